//! `ferrocomm-device`: the language communication kernels are written in.
//!
//! A kernel moves data to peer GPUs itself and orders it with signals:
//!
//! ```
//! use ferrocomm_device::prelude::*;
//!
//! /// Rank r sends `src` to rank (r + 1) % world and waits for the data of rank (r - 1).
//! pub fn ring_step(src: &[f32], dst: SymSliceMut<f32>, pad: SignalPad) {
//!     let (rank, world) = (team::rank(), team::world());
//!     let session = pad.session(); // this launch's epoch; advanced when the session ends
//!     let next = session.channel((rank + 1) % world);
//!     // Data, then a release add on the peer's signal `rank`; the receiver waits for this launch's count.
//!     put_signal(Group::Block, next.remote(dst), src, next.signal(rank as usize), SignalOp::Add(1));
//!     if thread_rank() == 0 {
//!         session.local(((rank + world - 1) % world) as usize).wait_ge(session.epoch());
//!     }
//!     sync_threads();
//! }
//! ```
//!
//! Every intrinsic is one `#[inline(always)]` function around one literal `asm!`, with scope and ordering
//! in its name or type; the PTX of each is pinned by the golden tests. Compiled for the host, each maps to
//! the `std::sync::atomic` operation of the same ordering and runs on the CPU emulator ([`emu`]).
//!
//! | module | what |
//! | --- | --- |
//! | [`index`] | thread / block / grid indices, lane, warp, `%smid` |
//! | [`sync`] | `barrier.sync 0`, `bar.warp.sync`, `griddepcontrol` (programmatic dependent launch) |
//! | [`warp`] | `shfl.sync` idx/up/down/bfly, `vote.sync` any/all/ballot |
//! | [`shared`] | static (`shared_array!`) and dynamic shared memory |
//! | [`time`] | `%globaltimer`, `nanosleep` |
//! | [`atomic`] | scoped atomics: `GpuAtomicU32/U64`, `SysAtomicU32/U64` |
//! | [`fence`] | `fence.acq_rel.{cta,gpu,sys}`, `fence.sc.{gpu,sys}`, `fence.proxy.async{,.global,.shared::cta}` |
//! | [`ctx`] | the launch context, `team::rank()` / `team::world()` |
//! | [`signal`] | `Signal`, `SignalPad`: release raises, acquire waits with timeout; `Session` (a launch's epoch), `Channel` (one peer) |
//! | [`group`] | `Group`: one thread, a warp or a block sharing a piece of work |
//! | [`put`] | put / get by a group; put-with-signal; non-blocking put; `fence` / `quiet` |
//! | [`nvshmem`] | remote-capable put-with-signal, signal, wait and quiet: NVSHMEM's device API in the NVSHMEM flavour, the library's own stores elsewhere |
//! | [`bulk`] | TMA bulk copies (`cp.async.bulk`, mbarriers) and `BulkCopier`, a block's staged copy engine |
//! | [`reduce`] | block-wide sums through dynamic shared memory (`sum_across_block`; per lane over groups of warps, `sum_across_warp_groups`), warp sums spread over the lanes (`sum_across_warp_spread`) |
//! | [`queue`] | host queues: a single-producer descriptor ring per rank in host-mapped memory (a proxy's) |
//! | [`vector`] | 16-byte vector access to a range of global memory, tails and misalignment handled |
//! | [`ll`] | LL packets: data and flag in one 16-byte store |
//! | [`sym`] | `SymSlice`, `SymSliceMut`, peer views, `DeviceCopy` |
//! | [`half`] | `bf16`, `f16` |
//! | [`math`] | `rsqrt` (`rsqrt.approx.f32`), `fma` (`fma.rn.f32`) |
//! | [`mma`] | warp-wide matrix multiply-accumulate on the tensor cores (`mma.sync` m16n8k16, `bf16` in, `f32` out) |
//! | [`mem`] | weak global loads and stores (`ld/st.global.v4.b32` …) |
//! | [`param`] | `DeviceParam`: how kernel arguments cross the launch |
//! | [`error`] | device error records, `exit_thread`, the panic handler |
//! | [`trace`] | trace events into a per-rank ring (the traced flavour on the GPU; the emulator when asked) |
//! | [`abi`] | the `#[repr(C)]` layouts shared with the host runtime |
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(asm_experimental_arch))]
#![warn(missing_docs)]

pub use ferrocomm_abi as abi;
pub mod atomic;
pub mod bulk;
pub mod ctx;
pub mod error;
pub mod fence;
pub mod group;
pub mod half;
pub mod index;
pub mod ll;
pub mod math;
pub mod mem;
pub mod mma;
pub mod nvshmem;
pub mod param;
pub mod put;
pub mod queue;
pub mod reduce;
pub mod shared;
pub mod signal;
pub mod sym;
pub mod sync;
pub mod time;
pub mod trace;
pub mod vector;
pub mod warp;

/// The CPU emulator the intrinsics run on in host builds (the `ferrocomm-emu` crate).
#[cfg(not(target_arch = "nvptx64"))]
pub use ferrocomm_emu as emu;
/// The emulator's lowering: the one module of it the intrinsics call.
#[cfg(not(target_arch = "nvptx64"))]
use ferrocomm_emu::lower;

pub use ctx::team;
pub use ferrocomm_macros::kernel;
pub use group::Group;
pub use half::{bf16, f16};
pub use param::DeviceParam;
pub use signal::{Channel, Session, Signal, SignalOp, SignalPad};
pub use sym::{DeviceCopy, PeerSlice, PeerSliceMut, SymSlice, SymSliceMut};

/// Everything a kernel body usually needs: `use ferrocomm_device::prelude::*;`.
pub mod prelude {
    pub use crate::atomic::{GpuAtomicU32, GpuAtomicU64, SysAtomicU32, SysAtomicU64};
    pub use crate::bulk::BulkCopier;
    pub use crate::ctx::team;
    pub use crate::error::exit_thread;
    pub use crate::fence::{fence_acq_rel_cta, fence_acq_rel_gpu, fence_acq_rel_sys, fence_sc_gpu, fence_sc_sys};
    pub use crate::group::Group;
    pub use crate::half::{bf16, f16};
    pub use crate::index::{
        Dim3, block_dim, block_idx, block_rank, block_size, global_thread_idx, global_threads, grid_dim, grid_size,
        lane_id, smid, thread_idx, thread_rank, warp_id, warp_lanes, warp_mask, warps_per_block,
    };
    pub use crate::ll::LlPacket;
    pub use crate::ll::{ll_flag, ll_packets, put_ll, read_ll};
    // 0.1's group-suffixed calls, deprecated for one release (CHANGELOG.md).
    #[allow(deprecated)]
    pub use crate::ll::{put_ll_block, put_ll_warp, read_ll_block, read_ll_warp};
    pub use crate::put::{PutSource, PutToken, fence, get, put, put_nbi, put_signal, quiet};
    #[allow(deprecated)]
    pub use crate::put::{
        get_block, get_warp, put_block, put_block_nbi, put_signal_block, put_signal_warp, put_warp, put_warp_nbi,
    };
    pub use crate::shared::{SharedSlice, dynamic_shared};
    pub use crate::shared_array;
    pub use crate::signal::{Channel, Cmp, Session, Signal, SignalOp, SignalPad};
    pub use crate::sym::{DeviceCopy, PeerSlice, PeerSliceMut, SymSlice, SymSliceMut};
    pub use crate::sync::{sync_threads, sync_warp};
    pub use crate::time::{globaltimer, nanosleep};
    pub use crate::vector::{V16, VECTOR_BYTES, Vectors, VectorsMut};
    pub use crate::warp::{
        shfl_down_sync, shfl_idx_sync, shfl_up_sync, shfl_xor_sync, vote_all_sync, vote_any_sync, vote_ballot_sync,
    };
}

/// Embeds the kernels crate's PTX, on the host only: expands to
/// `pub static PTX: &[(u32, &str)]` — (compute capability, PTX module) per architecture the crate's
/// `build.rs` (`ferrocomm_builder::build_script()`) compiled — and `pub static TRACED_PTX` of the same
/// form, the traced flavour (see [`trace`]).
///
/// ```ignore
/// ferrocomm_device::embed_ptx!();
/// ```
#[macro_export]
macro_rules! embed_ptx {
    () => {
        /// This crate's PTX: (compute capability, module text), one per architecture it was built for.
        #[cfg(not(target_arch = "nvptx64"))]
        pub static PTX: &[(u32, &str)] = include!(concat!(env!("OUT_DIR"), "/ferrocomm_ptx.rs"));
        /// This crate's traced flavour (`--cfg ferrocomm_trace`): (compute capability, module text).
        #[cfg(not(target_arch = "nvptx64"))]
        pub static TRACED_PTX: &[(u32, &str)] = include!(concat!(env!("OUT_DIR"), "/ferrocomm_ptx_trace.rs"));
    };
}
