// Proves that a by-value argument must be `Copy`, even when it is otherwise a valid kernel parameter: each
// GPU thread gets a bitwise copy of the launch arguments.
#![allow(unused_variables)]
use ferrocomm::{Error, LaunchParam, RankRef};
use ferrocomm_device::{DeviceParam, kernel};

pub struct Params {
    pub n: u32,
}

// SAFETY: a `u32` in, a `u32` out.
unsafe impl DeviceParam for Params {
    type Abi = u32;
    unsafe fn from_abi(n: u32) -> Params {
        Params { n }
    }
}

impl LaunchParam for Params {
    type Host<'a> = u32;
    fn lower(host: &u32, _rank: &RankRef<'_>) -> Result<u32, Error> {
        Ok(*host)
    }
}

static __FERROCOMM_MODULE: ferrocomm::KernelModule = ferrocomm::KernelModule::new("ui", &[]);

#[kernel]
pub fn configured(dst: &mut [u32], params: Params) {}

fn main() {}
