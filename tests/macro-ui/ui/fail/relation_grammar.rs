// Proves that a relation is one comparison of integer expressions over `len(argument)`, `world()`,
// arguments, their fields, integer literals, `+ - * / %` and parentheses: anything else is an error at the
// token that leaves that grammar, naming what is accepted.
#![allow(unused_variables)]
use ferrocomm_device::kernel;

#[kernel(len(a) == size(b))]
pub fn unknown_function(a: &[u8], b: &[u8]) {}

#[kernel(len(a) >= 1.5)]
pub fn float_literal(a: &[u8]) {}

#[kernel(len(a) == -n)]
pub fn negation(a: &[u8], n: i32) {}

#[kernel(len(a) == len(b) << 1)]
pub fn shift(a: &[u8], b: &[u8]) {}

#[kernel(len(a) + len(b))]
pub fn no_comparison(a: &[u8], b: &[u8]) {}

#[kernel(len(a) <= (len(b) < 4))]
pub fn two_comparisons(a: &[u8], b: &[u8]) {}

#[kernel(len(a) == len(a, b))]
pub fn len_of_two(a: &[u8], b: &[u8]) {}

fn main() {}
