// Proves that what a PTX entry cannot be is rejected at the offending tokens: async, const, extern, a
// method, with patterns, named lifetimes or raw pointers, generic over a lifetime or a const. (Generic over
// types is fine with an instance list: `generic_kernel_needs_instances.rs`.)
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel]
pub fn over_a_lifetime<'a>(x: &'a [u32]) {}

#[kernel]
pub fn over_a_const<const N: usize>(x: [u32; N]) {}

#[kernel]
pub async fn later(x: u32) {}

#[kernel]
pub const fn constant(x: u32) {}

#[kernel]
pub fn pattern((a, b): (u32, u32)) {}

#[kernel]
pub fn lifetime(x: &'static [u32]) {}

#[kernel]
pub extern "C" fn foreign(x: u32) {}

#[kernel]
pub fn pointer(x: *mut u32) {}

struct S;

impl S {
    #[kernel]
    pub fn method(&self) {}
}

fn main() {}
