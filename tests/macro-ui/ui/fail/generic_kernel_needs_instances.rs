// Proves that a generic kernel lists its instances: each PTX entry needs concrete types, so a generic
// kernel without `instances(...)` is an error naming the fix, and the list must set every type parameter
// once per instance, under a name of its own, for types no other instance has.
#![allow(unused_variables)]
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

#[kernel]
pub fn unlisted<T: DeviceCopy>(x: &[T]) {}

#[kernel(instances(two_f32<f32, u8>, own<f32>, one_f32<f32>, one_f32<u8>, again_f32<f32>))]
pub fn own<T: DeviceCopy>(x: &[T]) {}

#[kernel(instances(plain_u8<u8>))]
pub fn plain(x: &[u8]) {}

fn main() {}
