// Proves that trait objects are rejected: the device cannot call through a host vtable.
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel]
pub fn callback(f: &dyn Fn(u32)) {}

#[kernel]
pub fn boxed(x: Box<dyn Send>) {}

fn main() {}
