// Proves that a relation may only name the kernel's own arguments: `srcs` is not one, and the error points
// at it (a misspelt name would otherwise be checked against nothing).
#![allow(unused_variables)]
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

#[kernel(requires(len(out) >= world() * len(srcs)))]
pub fn gather(out: SymSliceMut<f32>, src: &[f32]) {}

#[kernel(requires(len(out) >= count))]
pub fn counted(out: &mut [f32], n: u32) {}

fn main() {}
