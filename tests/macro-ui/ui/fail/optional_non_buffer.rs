// Proves that only buffers may be optional: `None` travels as a null address, which a scalar or a signal pad
// does not have (and an `Option` of an `Option` has no second null).
#![allow(unused_variables)]
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

#[kernel]
pub fn optional_scalar(n: Option<u32>) {}

#[kernel]
pub fn optional_pad(pad: Option<SignalPad>) {}

#[kernel]
pub fn optional_option(a: Option<Option<&[u8]>>) {}

fn main() {}
