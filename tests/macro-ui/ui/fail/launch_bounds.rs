// Proves that `launch_bounds` takes 1 ..= 1024 threads and, optionally, at least one block per
// multiprocessor, as integer literals: anything else is an error at the value.
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel(no_wait, launch_bounds(2048))]
pub fn too_many_threads(x: u32) {}

#[kernel(no_wait, launch_bounds(128, 0))]
pub fn no_blocks(x: u32) {}

#[kernel(no_wait, launch_bounds(128, 2, 1))]
pub fn three_values(x: u32) {}

#[kernel(no_wait, launch_bounds(threads))]
pub fn not_a_literal(x: u32) {}

fn main() {}
