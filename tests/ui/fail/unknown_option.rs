// The attribute's options: unknown names, and `len(...)` of what is not a buffer argument.
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel(nowait)]
pub fn typo(x: u32) {}

#[kernel(len(dst) == len(n))]
pub fn not_a_buffer(dst: &mut [u32], n: u32) {}

#[kernel(len(dst) == len(source))]
pub fn no_such_argument(dst: &mut [u32], src: &[u32]) {}

fn main() {}
