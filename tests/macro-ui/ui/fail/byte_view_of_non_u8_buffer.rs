// Proves that `bytes(...)` names `u8` buffer arguments of the kernel: a byte view passes a buffer of any
// element type as bytes, so the kernel's side must be bytes; an unknown name or a repeated one is an error.
#![allow(unused_variables)]
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

#[kernel(bytes(src))]
pub fn floats(src: &[f32]) {}

#[kernel(bytes(n))]
pub fn scalar(n: u8) {}

#[kernel(bytes(dts))]
pub fn misspelt(dst: SymSliceMut<u8>) {}

#[kernel(bytes(dst, dst))]
pub fn twice(dst: SymSliceMut<u8>) {}

fn main() {}
