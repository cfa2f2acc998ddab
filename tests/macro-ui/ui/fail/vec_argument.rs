// Proves that host heap types are rejected wherever they appear in an argument's type.
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel]
pub fn owned(data: Vec<f32>) {}

#[kernel]
pub fn strings(names: &[String]) {}

fn main() {}
