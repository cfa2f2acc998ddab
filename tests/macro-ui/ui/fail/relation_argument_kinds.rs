// Proves that each term of a relation takes an argument of the right kind: `len(...)` a buffer that is
// always passed (not a scalar, not an optional buffer), a bare name a number (not a buffer or a signal pad);
// and that a relation names an argument and does not compare an expression with itself.
#![allow(unused_variables)]
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

#[kernel(len(dst) == len(n))]
pub fn len_of_a_scalar(dst: &mut [u32], n: u32) {}

#[kernel(requires(len(out) >= len(src)))]
pub fn len_of_an_optional_buffer(out: Option<&mut [u32]>, src: &[u32]) {}

#[kernel(requires(dst >= n))]
pub fn buffer_as_a_number(dst: &mut [u32], n: u32) {}

#[kernel(requires(len(dst) >= pad))]
pub fn pad_as_a_number(dst: &mut [u32], pad: SignalPad) {}

#[kernel(requires(world() >= 2))]
pub fn no_argument(dst: &mut [u32]) {}

#[kernel(requires(len(dst) * 2 == len(dst) * 2))]
pub fn with_itself(dst: &mut [u32]) {}

fn main() {}
