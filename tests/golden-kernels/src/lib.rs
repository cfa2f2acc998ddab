//! One tiny PTX entry per device intrinsic of `ferrocomm-device`, written without `#[kernel]` so each entry
//! holds the intrinsic and nothing else. `tests/tests/ptx_golden.rs` slices each entry out of the embedded
//! PTX and pins the exact instruction text between its `// begin inline asm` / `// end inline asm` markers.
//!
//! Entry names are `golden_<intrinsic>`; arguments are plain pointers and values so nothing folds away.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, asm_experimental_arch))]

extern crate ferrocomm_device;

#[cfg(target_arch = "nvptx64")]
mod data;
#[cfg(target_arch = "nvptx64")]
mod memory;
#[cfg(target_arch = "nvptx64")]
mod threads;
#[cfg(target_arch = "nvptx64")]
mod tma;

ferrocomm_device::embed_ptx!();
