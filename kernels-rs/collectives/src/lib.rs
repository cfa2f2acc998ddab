//! `ferrocomm-kernels`: the communication library, written in ferrocomm's device DSL — point-to-point
//! (put, get, ping-pong), barrier, broadcast, all-gather, reduce-scatter, all-reduce and all-to-all — and
//! its host API.
//!
//! ```
//! use ferrocomm::{SymBuffer, Team};
//! use ferrocomm_device::bf16;
//! use ferrocomm_kernels::{Communicator, Op};
//!
//! # fn main() -> Result<(), ferrocomm_kernels::CommError> {
//! let team = Team::from_env()?; // every GPU, or the CPU emulator
//! let mut comm = Communicator::new(&team)?;
//! let mut grads = SymBuffer::from_host(&team, &vec![bf16::from_f32(1.0); 4096])?;
//! comm.all_reduce(&mut grads, Op::Sum)?.wait()?; // LL, one-shot push or two-shot, by size
//! assert_eq!(grads.to_host(0)?[0].to_f32(), team.world() as f32);
//! # Ok(()) }
//! ```
//!
//! | module | what |
//! | --- | --- |
//! | [`kernels`] | the `#[kernel]`s: PTX entries, emulator bodies, typed launchers |
//! | [`layout`] | what host and kernels agree on: limits, signal indices, LL regions, plans |
//! | [`element`] | `f32` / `f16` / `bf16` and the reduction operators, `f32` accumulation |
//! | `host` | [`Communicator`], [`Tuning`], algorithm choice, [`reference`](mod@reference), [`verify`] (host only) |
//!
//! Algorithms by size (bytes per rank; thresholds in [`Tuning`], GPU defaults shown):
//!
//! | call | small | mid | large |
//! | --- | --- | --- | --- |
//! | all-reduce | LL one-shot, ≤ 256 KiB | one-shot push, ≤ 4 MiB (1 MiB above 2 ranks) | two-shot |
//! | broadcast, all-gather, all-to-all (per message) | LL, ≤ 256 KiB | staged, ≤ the one-shot limit | direct |
//! | reduce-scatter | two-shot | | |
//!
//! Grids: one kernel per call, every block co-resident (at most the SMs each rank may use, and at most
//! [`layout::MAX_BLOCKS`]); latency kernels use one 16-byte vector per thread, of 64-thread blocks (LL) or
//! 512-thread blocks (one-shot, staged); bandwidth kernels (two-shot, direct) four per thread of 512-thread
//! blocks (fewer threads where a kernel's registers allow fewer); put and get at most 64 blocks of 512
//! threads; the barrier one warp, ping-pong one thread (one warp for LL). `FERROCOMM_TUNING` overrides any
//! of it.
//!
//! Copies: put, get, the direct exchange and the two-shot's push and all-gather copy messages (per
//! destination) of at least `Tuning::bulk_min_bytes` (1 MiB) through the TMA on sm_90 GPUs: thread 0 of
//! each block streams its share through a four-stage ring of 16 KiB stages in dynamic shared memory
//! (`ferrocomm_device::bulk::BulkCopier`), the rest with 16-byte loads and stores. Between ranks that share
//! a GPU the defaults leave the TMA off: loads and stores copy faster there.
//!
//! Memory ordering: data moves with weak 16-byte accesses; small messages are guarded by LL flags that
//! travel in the same store, larger ones by release/acquire signals per block. Every signal and flag is
//! derived from a signal pad's device-resident epoch, so back-to-back launches and CUDA-graph replays need
//! no reset and no host involvement.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]
#![warn(missing_docs)]

pub mod element;
pub mod kernels;
pub mod layout;

#[cfg(not(target_arch = "nvptx64"))]
mod host;

#[cfg(not(target_arch = "nvptx64"))]
pub use host::{
    Algorithm, CommError, Communicator, ExchangeTransport, FusedProtocol, Op, PingPong, PingProtocol, Reducible, Route,
    TP_RMS_EPS, TUNING_ENV, TUNING_FILE_ENV, TpDecode, TpInputs, TpShape, TpVariant, Tuning, reference, verify,
};

#[cfg(not(target_arch = "nvptx64"))]
ferrocomm::kernel_module!();
