//! Communication kernels.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, asm_experimental_arch))]
use ferrocomm_device::abi::RawSym;
extern crate ferrocomm_device;

#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe(s: RawSym<u32>, v: u32) {
    unsafe { *s.local.add(1) = v + s.len as u32 };
}

/// PTX
#[cfg(not(target_arch = "nvptx64"))]
pub static PTX: &[(u32, &str)] = include!(concat!(env!("OUT_DIR"), "/ferrocomm_ptx.rs"));
