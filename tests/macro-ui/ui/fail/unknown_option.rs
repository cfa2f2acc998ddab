// Proves that the attribute accepts only the options it knows, each once: a misspelt option and one given
// twice are errors at the option.
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel(nowait)]
pub fn typo(x: u32) {}

#[kernel(no_wait, no_wait)]
pub fn twice(x: u32) {}

#[kernel("no_wait")]
pub fn not_an_option(x: u32) {}

fn main() {}
