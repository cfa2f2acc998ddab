// Proves that a kernel cannot return a value: every GPU thread runs the body and the launch is
// asynchronous, so results go into a `&mut [T]`.
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel]
pub fn sum(src: &[f32]) -> f32 {
    src.iter().sum()
}

fn main() {}
