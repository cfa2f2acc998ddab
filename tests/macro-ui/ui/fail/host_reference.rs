// Proves that a kernel may only borrow device buffers (`&[T]`, `&mut [T]`): `&String`, `&Vec<T>`, `&T` are host data.
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel]
pub fn by_string(name: &String) {}

#[kernel]
pub fn by_vec_ref(data: &Vec<f32>) {}

#[kernel]
pub fn by_scalar_ref(n: &mut u32) {}

fn main() {}
