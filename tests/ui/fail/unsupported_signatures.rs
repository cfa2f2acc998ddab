// What a PTX entry cannot be: generic, async, const, a method, with patterns or named lifetimes.
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel]
pub fn generic<T: Copy>(x: T) {}

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
