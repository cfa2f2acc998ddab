//! The CPU emulator (host builds only): runs a kernel's grid with one host thread per GPU thread, so the
//! same kernel source is verified without a GPU.
//!
//! Compiled for the host, every intrinsic of this crate maps to `std::sync::atomic` at the ordering its
//! PTX has; indices, barriers, warp shuffles and votes, shared memory and `%globaltimer` come from the
//! emulated thread's state kept here. Each emulated thread's weak and relaxed stores wait in a store
//! buffer and reach memory late and out of order (module [`weak`]; off with `FERROCOMM_EMU_WEAK=0`), so a
//! missing release or barrier shows as stale data, as it may on a GPU.
//!
//! One [`launch`](fn@launch) runs one rank's grid; a [`TeamLaunch`] runs every rank
//! of a team (one `run_rank` per rank, on concurrent threads), so several emulated GPUs run at once, each
//! with its own memory; a [`Timeline`] makes consecutive team launches one team's, so the checker follows
//! ordering from one launch to the next — the host runtime's emulated teams launch that way.
//!
//! A checker watches every launch (module `check`; off with `FERROCOMM_EMU_CHECK=0`) and records, like a
//! timeout, the bugs a GPU would not report: a put's destination read before waiting on the signal that
//! covers it (`Race`), a non-blocking put's source rewritten before `quiet()` (`SourceOverwritten`), a wait
//! that timed out on a signal no rank raised (`UnraisedSignal`), and ranks or blocks that disagree on how often
//! a signal pad's barrier epoch advanced (`BarrierMismatch`). Cross-rank findings need a [`TeamLaunch`].
//!
//! ```
//! use ferrocomm_device::abi::{ErrorBuffer, LaunchCtx};
//! use ferrocomm_device::prelude::*;
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! let mut errors = ErrorBuffer::ZEROED;
//! let ctx = LaunchCtx { rank: 0, world: 1, timeout_ns: 1_000_000_000, errors: &mut errors };
//! let sum = AtomicU32::new(0);
//! ferrocomm_device::emu::launch([2, 1, 1], [64, 1, 1], 0, ctx, &|| {
//!     sum.fetch_add(global_thread_idx() as u32, Ordering::Relaxed);
//! })
//! .unwrap();
//! assert_eq!(sum.into_inner(), (0..128).sum::<u32>());
//! ```

mod block;
pub(crate) mod bulk;
pub(crate) mod check;
mod launch;
pub mod lower;
pub mod schedule;
mod team;
pub(crate) mod thread;
pub mod veil;
mod warp;
pub mod weak;

use ferrocomm_abi::{LaunchCtx, ThreadRef};

pub use check::{Issued, QueueLayout, WatchedQueues, watch_host_queues};
pub use schedule::LateRank;
pub use team::{TeamLaunch, Timeline};

/// Most GPU threads one emulated launch may have (one host thread each).
pub const MAX_THREADS: u32 = 4096;
/// Most threads per block, as on the GPU.
pub const MAX_BLOCK_THREADS: u32 = 1024;
/// Most dynamic shared memory per block, as on an H100/H200 (227 KiB).
pub const MAX_DYNAMIC_SHARED_BYTES: usize = 227 * 1024;

/// Why an emulated launch failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmuError {
    /// A grid or block dimension is zero.
    #[error("grid {grid:?} / block {block:?} has a zero dimension; every dimension must be at least 1")]
    EmptyDimension {
        /// The grid dimensions asked for.
        grid: [u32; 3],
        /// The block dimensions asked for.
        block: [u32; 3],
    },
    /// More threads per block than a GPU allows.
    #[error("block {block:?} has {threads} threads; a block holds at most {MAX_BLOCK_THREADS}")]
    BlockTooLarge {
        /// The block dimensions asked for.
        block: [u32; 3],
        /// Their product.
        threads: u64,
    },
    /// More threads than the emulator runs (one host thread each).
    #[error(
        "grid {grid:?} x block {block:?} is {threads} threads; the emulator runs at most {MAX_THREADS} per rank \
         (use a smaller grid for emulated runs)"
    )]
    TooManyThreads {
        /// The grid dimensions asked for.
        grid: [u32; 3],
        /// The block dimensions asked for.
        block: [u32; 3],
        /// Threads in the grid.
        threads: u64,
    },
    /// More dynamic shared memory than a GPU block has.
    #[error("{requested} bytes of dynamic shared memory asked for; a block has at most {MAX_DYNAMIC_SHARED_BYTES}")]
    SharedMemoryTooLarge {
        /// Bytes asked for.
        requested: usize,
    },
    /// The host could not start a thread for every GPU thread.
    #[error("could not start the {threads} host threads of the emulated grid ({source}); use a smaller grid")]
    Spawn {
        /// Threads in the grid.
        threads: u32,
        /// The error of the failed spawn.
        source: std::io::Error,
    },
    /// A kernel thread panicked: like the GPU's panic handler, the panic was recorded in the error buffer
    /// and the launch was ended (`trap`).
    #[error("{at}: kernel panicked at {file}:{line}:{column}: {message}")]
    Trapped {
        /// The first thread that panicked (the same as the error record's).
        at: ThreadRef,
        /// Source file of the panic.
        file: String,
        /// Source line.
        line: u32,
        /// Source column.
        column: u32,
        /// The panic message (the GPU cannot keep it; the emulator can).
        message: String,
    },
    /// A [`TeamLaunch::run_rank`] call that does not fit its team launch.
    #[error("rank {rank} cannot run in this team launch: {reason}")]
    TeamLaunch {
        /// The rank of the context given.
        rank: u32,
        /// What does not fit.
        reason: String,
    },
}

/// Runs every GPU thread of one rank's grid as a host thread and returns when all have finished.
///
/// `ctx` is what the GPU would read from `FERROCOMM_LAUNCH_CTX`: this rank, the team size, the wait timeout
/// and a pointer to this rank's [`ErrorBuffer`](ferrocomm_abi::ErrorBuffer), which must stay valid for the
/// whole call. A wait that times out records a `Timeout` and ends its thread, and the launch still returns
/// `Ok`; a panic records a `Panic`, ends every thread of the launch (the GPU's `trap`) and returns
/// [`EmuError::Trapped`]. At most [`MAX_THREADS`] threads per launch.
///
/// The checker sees this rank only; when `ctx.world > 1`, run the ranks through a [`TeamLaunch`] so it sees
/// them all (races between ranks, signals no rank raised, barrier epochs).
pub fn launch(
    grid: [u32; 3],
    block: [u32; 3],
    dynamic_shared_bytes: usize,
    ctx: LaunchCtx,
    kernel: &(dyn Fn() + Sync),
) -> Result<(), EmuError> {
    launch::launch(&team::alone(&ctx, grid, block, dynamic_shared_bytes), ctx, kernel)
}

/// The payload of the unwind that ends an emulated thread like PTX `exit`.
#[derive(Debug)]
pub(crate) struct KernelExit;

/// The launch trapped: the thread must end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trapped;
