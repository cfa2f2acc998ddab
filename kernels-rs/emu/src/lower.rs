//! The device library's one door into the emulator: what its intrinsics lower to when compiled for the
//! host. `ferrocomm-device` calls the emulator only through this module (as a crate reaches loom through
//! one module), and nothing here calls back into it, so the emulator sits below the device API as a crate
//! of its own, with `ferrocomm-abi` under both.
//!
//! - the thread's special registers and launch context ([`registers`], [`launch_ctx`]);
//! - barriers, warp exchanges, shared memory and `%globaltimer` ([`block_sync`], [`warp_exchange`], ...);
//! - weak global memory: loads and stores through the thread's store buffer ([`weak_load`], [`weak_store`],
//!   [`packet_store`]);
//! - the async proxy: mbarriers and TMA bulk copies ([`bulk_load`], [`mbarrier_try_wait_parity`], ...);
//! - the checker's hooks ([`check`]): every access, atomic, fence and signal wait it must see.

use std::sync::OnceLock;
use std::time::Instant;

use ferrocomm_abi::LaunchCtx;

pub use crate::bulk::{
    bulk_commit, bulk_load, bulk_store, bulk_wait, mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_try_wait_parity,
    proxy_fence,
};
use crate::check as checker;
pub use crate::launch::exit_thread;
pub use crate::warp::Round;
use crate::warp::WarpError;
pub use crate::weak::{packet_store, weak_load, weak_store};
use crate::{Trapped, thread, weak};

/// The checker's hooks: what the intrinsics tell it of every access, atomic, fence, copy and wait.
pub mod check {
    pub use crate::check::{
        Access, AtomicOp, Scope, SignalWait, access, atomic, atomic_store, copy, fence, input_read, own_copy, pad,
        put_started, queued, timed_out, weak_write,
    };
}

/// The special registers of the calling emulated thread.
#[derive(Debug, Clone, Copy)]
pub struct Registers {
    /// `%tid`.
    pub thread_idx: [u32; 3],
    /// `%ctaid`.
    pub block_idx: [u32; 3],
    /// `%ntid`.
    pub block_dim: [u32; 3],
    /// `%nctaid`.
    pub grid_dim: [u32; 3],
    /// `%laneid`.
    pub lane: u32,
    /// `%smid`: the emulator runs each block on an SM of its own, numbered as the blocks are.
    pub smid: u32,
}

/// The calling emulated thread's special registers. Panics outside an emulated kernel.
#[track_caller]
pub fn registers() -> Registers {
    let t = thread::current();
    Registers {
        thread_idx: t.thread_idx,
        block_idx: t.block_idx,
        block_dim: t.block_dim,
        grid_dim: t.grid_dim,
        lane: t.lane(),
        smid: t.linear_block,
    }
}

/// The launch context of the calling emulated thread's rank (what `FERROCOMM_LAUNCH_CTX` holds on a GPU).
/// Panics outside an emulated kernel.
#[track_caller]
pub fn launch_ctx() -> LaunchCtx {
    thread::current().launch.ctx
}

/// As [`launch_ctx`], or `None` outside an emulated kernel.
pub fn try_launch_ctx() -> Option<LaunchCtx> {
    thread::try_current().map(|t| t.launch.ctx)
}

/// `%globaltimer` of the emulated GPUs: nanoseconds since the first use in this process (one clock for
/// every rank, like the GPUs' synchronised global timers).
pub fn globaltimer_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Ends this thread if its launch trapped (a panic elsewhere in the grid); `nanosleep` calls it, so it is
/// also where a sleeping thread's buffered stores may drain.
pub fn exit_if_trapped() {
    let trapped = thread::with_current(|t| {
        weak::at_sleep(t);
        t.launch.is_trapped()
    });
    if trapped == Some(true) {
        exit_thread();
    }
}

/// The host side of `shared_array!`: this block's copy of the named static shared array.
#[doc(hidden)]
#[track_caller]
pub fn __static_shared(name: &'static str, bytes: usize, align: usize) -> *mut u8 {
    thread::current().block.static_shared(name, bytes, align)
}

/// An LL read begins polling its packets: the one scheduling point of the LL protocol's reads (a late rank
/// reads late, see [`LateRank`](crate::LateRank)).
pub fn ll_read_begins() {
    thread::with_current(weak::wait_begins);
}

/// The host side of `barrier.sync 0`.
pub fn block_sync() {
    let t = thread::current();
    t.pauses.at_point();
    // The barrier makes the thread's earlier stores visible to its block (a `.cta` release): they leave its
    // buffer first.
    weak::release(&t, checker::Scope::Cta);
    match t.block.sync(&t.launch, checker::deposit(&t)) {
        Ok(joined) => {
            checker::leave_barrier(&t, joined);
            weak::acquired(&t);
        }
        Err(Trapped) => {
            drop(t);
            exit_thread();
        }
    }
}

/// The host side of the warp operations: lane `laneid` exchanges `value` with the lanes of `mask`.
#[track_caller]
pub fn warp_exchange(mask: u32, value: u64) -> Round {
    exchange(mask, value, false)
}

/// The host side of `bar.warp.sync`: a warp exchange that also orders the lanes' memory accesses.
#[track_caller]
pub fn warp_sync(mask: u32) {
    exchange(mask, 0, true);
}

#[track_caller]
fn exchange(mask: u32, value: u64, orders_memory: bool) -> Round {
    let t = thread::current();
    let lane = t.lane();
    assert!(
        mask & (1 << lane) != 0,
        "warp operation with member mask {mask:#010x} called by lane {lane}, which is not in it (undefined on the GPU)"
    );
    t.pauses.at_point();
    if orders_memory {
        // As for a block barrier.
        weak::release(&t, checker::Scope::Cta);
    } else {
        weak::before_shuffle(&t);
    }
    let deposit = if orders_memory { checker::deposit(&t) } else { None };
    let result = t.block.warp(t.warp()).exchange(lane, mask, value, &t.launch, deposit);
    if orders_memory && let Ok((_, joined)) = &result {
        checker::leave_barrier(&t, joined.clone());
        weak::acquired(&t);
    }
    drop(t);
    match result {
        Ok((round, _)) => round,
        Err(WarpError::Trapped) => exit_thread(),
        Err(WarpError::MaskMismatch { lane: other_lane, other }) => panic!(
            "warp operation with member mask {mask:#010x} can never complete: lane {other_lane}, named in it, \
             made a warp-synchronous call with member mask {other:#010x} instead; every lane of a mask must \
             make the same call with the same mask, or exit before any other (undefined on the GPU)"
        ),
    }
}

/// The block's dynamic shared memory (pointer, bytes).
pub fn dynamic_shared() -> (*mut u8, usize) {
    thread::current().block.dynamic_shared()
}
