//! The kernels the device library's GPU tests launch (`tests/tests/gpu_device.rs`), written with
//! `#[kernel]` and run both as PTX on GPUs and on the CPU emulator:
//!
//! | module | what |
//! | --- | --- |
//! | [`litmus`] | message passing across ranks: release/acquire flags and their relaxed twin, stale reads counted |
//! | [`round_trip`] | put / get / put-with-signal / LL by thread, warp and block, at any size and element offset |
//! | [`trace`] | trace mode: a ring exchange with known events (and a planted hang), a flood of marks |
//! | `host` | the host side: buffers, launches, CPU references and the checks against them (host only) |
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

pub mod litmus;
pub mod round_trip;
pub mod trace;

#[cfg(not(target_arch = "nvptx64"))]
pub mod host;

#[cfg(not(target_arch = "nvptx64"))]
ferrocomm::kernel_module!();
