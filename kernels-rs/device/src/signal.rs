//! Signals: `u64` flags in symmetric memory that order data between GPUs. A sender raises one with
//! release ordering after its data (`st.release.sys.u64` to set, `red.release.sys.global.add.u64` to add);
//! the receiver waits with acquire loads (`ld.acquire.sys.u64`), after which the data is visible.
//!
//! Signals are monotonic counters: each launch adds to them and waits for `>=` the launch's target, so they
//! never need a reset — see [`SignalPad::epoch`]. Every wait has a timeout (the launch context's
//! `timeout_ns`): on expiry it records who waited on what, and the thread ends cleanly (PTX `exit`).

use core::panic::Location;

pub use crate::abi::Cmp;
use crate::abi::{RawSym, SIGNAL_PAD_EPOCH_SLOTS};
use crate::atomic::{GpuAtomicU64, SysAtomicU64};
use crate::ctx::{self, team};
use crate::error;
use crate::index::{block_rank, block_size, grid_size, thread_rank};
use crate::sync::sync_threads;
use crate::time::{globaltimer, nanosleep};

/// Polls before a wait starts to sleep between polls: the fast path of a ping-pong.
const SPIN_POLLS: u32 = 64;
/// First and longest back-off between polls once sleeping.
const MIN_BACKOFF_NS: u32 = 32;
const MAX_BACKOFF_NS: u32 = 1024;

/// Polls `poll` until it returns `Ok`, backing off with `nanosleep` and giving up after the launch's
/// timeout: then records a timeout for the address `addr` (with `expected`, the last `Err` observed and
/// `cmp`) and ends the thread.
#[inline(always)]
pub(crate) fn poll_until<R>(
    mut poll: impl FnMut() -> Result<R, u64>,
    addr: u64,
    expected: u64,
    cmp: Cmp,
    location: &'static Location<'static>,
) -> R {
    let mut polls = 0u32;
    let mut start = 0u64;
    let mut backoff = MIN_BACKOFF_NS;
    loop {
        let observed = match poll() {
            Ok(r) => return r,
            Err(observed) => observed,
        };
        if polls < SPIN_POLLS {
            polls += 1;
            if polls == SPIN_POLLS {
                start = globaltimer();
            }
            continue;
        }
        nanosleep(backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF_NS);
        if globaltimer().wrapping_sub(start) > ctx::timeout_ns() {
            timed_out(addr, expected, observed, cmp, location);
        }
    }
}

#[cold]
#[inline(never)]
fn timed_out(addr: u64, expected: u64, observed: u64, cmp: Cmp, location: &Location<'_>) -> ! {
    #[cfg(not(target_arch = "nvptx64"))]
    crate::emu::check::timed_out(addr);
    error::record_timeout(addr, expected, observed, cmp, location);
    error::exit_thread()
}

/// How a sender raises a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// Store the value (`st.release.sys.u64`).
    Set(u64),
    /// Add the value (`red.release.sys.global.add.u64`): monotonic counters.
    Add(u64),
}

/// One `u64` signal in some rank's copy of a [`SignalPad`].
#[derive(Debug, Clone, Copy)]
pub struct Signal {
    ptr: *mut u64,
}

impl Signal {
    /// A signal at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is an aligned `u64` in global memory (device or peer-mapped) that stays live while the signal
    /// is used and is accessed only atomically.
    #[inline(always)]
    pub unsafe fn from_ptr(ptr: *mut u64) -> Signal {
        Signal { ptr }
    }

    /// The signal's address, as this GPU addresses it.
    #[inline(always)]
    pub fn as_ptr(self) -> *mut u64 {
        self.ptr
    }

    #[inline(always)]
    fn atomic(self) -> &'static SysAtomicU64 {
        // SAFETY: `from_ptr`'s contract (signals are built from pads, whose memory outlives the launch).
        unsafe { SysAtomicU64::from_ptr(self.ptr) }
    }

    /// Sets the signal after this thread's earlier writes (`st.release.sys.u64`).
    #[inline(always)]
    pub fn set_release(self, v: u64) {
        self.atomic().store_release(v);
    }

    /// Sets the signal without ordering (`st.relaxed.sys.u64`): for flags whose data travels in the same
    /// store, or with an explicit fence before.
    #[inline(always)]
    pub fn set_relaxed(self, v: u64) {
        self.atomic().store_relaxed(v);
    }

    /// Adds to the signal after this thread's earlier writes (`red.release.sys.global.add.u64`).
    #[inline(always)]
    pub fn add_release(self, v: u64) {
        self.atomic().add_release(v);
    }

    /// Raises the signal as `op` says, with release ordering.
    #[inline(always)]
    pub fn raise_release(self, op: SignalOp) {
        match op {
            SignalOp::Set(v) => self.set_release(v),
            SignalOp::Add(v) => self.add_release(v),
        }
    }

    /// The value, ordering this thread's later reads after the writes it publishes (`ld.acquire.sys.u64`).
    #[inline(always)]
    pub fn load_acquire(self) -> u64 {
        self.atomic().load_acquire()
    }

    /// The value, without ordering (`ld.relaxed.sys.u64`).
    #[inline(always)]
    pub fn load_relaxed(self) -> u64 {
        self.atomic().load_relaxed()
    }

    /// Waits until `signal cmp expected` holds, polling with acquire loads; returns the value seen. On
    /// timeout records a `Timeout` error with this call's location and ends the thread.
    #[inline(always)]
    #[track_caller]
    pub fn wait(self, cmp: Cmp, expected: u64) -> u64 {
        self.poll(cmp, expected, Signal::load_acquire)
    }

    /// [`Signal::wait`] polling with relaxed loads: nothing the sender wrote before is ordered by it (the
    /// weakened twin of a message-passing test; LL packets).
    #[inline(always)]
    #[track_caller]
    pub fn wait_relaxed(self, cmp: Cmp, expected: u64) -> u64 {
        self.poll(cmp, expected, Signal::load_relaxed)
    }

    /// Polls with `load` until `cmp` holds (the body of the waits).
    #[inline(always)]
    #[track_caller]
    fn poll(self, cmp: Cmp, expected: u64, load: impl Fn(Signal) -> u64) -> u64 {
        let location = Location::caller();
        #[cfg(not(target_arch = "nvptx64"))]
        let _wait = crate::emu::check::SignalWait::begin(self.ptr as u64);
        poll_until(
            || {
                let v = load(self);
                if cmp.holds(v, expected) { Ok(v) } else { Err(v) }
            },
            self.ptr as u64,
            expected,
            cmp,
            location,
        )
    }

    /// Waits until the signal equals `expected` (acquire).
    #[inline(always)]
    #[track_caller]
    pub fn wait_eq(self, expected: u64) -> u64 {
        self.wait(Cmp::Eq, expected)
    }

    /// Waits until the signal is at least `expected` (acquire): the wait of monotonic counters.
    #[inline(always)]
    #[track_caller]
    pub fn wait_ge(self, expected: u64) -> u64 {
        self.wait(Cmp::Ge, expected)
    }

    /// Waits until the signal differs from `expected` (acquire).
    #[inline(always)]
    #[track_caller]
    pub fn wait_ne(self, expected: u64) -> u64 {
        self.wait(Cmp::Ne, expected)
    }
}

/// An array of signals in symmetric memory (one per peer, per block, per chunk — the kernel decides), and
/// the pad's launch epoch.
///
/// The epoch makes signals reusable without host resets, across launches and CUDA-graph replays: launch
/// `k` (1-based) of a kernel using the pad sees [`epoch`](SignalPad::epoch) `== k` on every rank, so a
/// sender adds 1 per launch and the receiver waits for `>= epoch * adds_per_launch`. The kernel advances the
/// epoch itself with [`advance_epoch`](SignalPad::advance_epoch) at its end.
#[derive(Debug, Clone, Copy)]
pub struct SignalPad {
    raw: RawSym<u64>,
}

impl SignalPad {
    /// The pad described by `raw` (its allocation includes the epoch slots, see
    /// [`SIGNAL_PAD_EPOCH_SLOTS`]).
    ///
    /// # Safety
    ///
    /// `raw` describes a live symmetric allocation of `raw.len` zero-initialised (or previously used by
    /// pads) `u64`s on every rank, `raw.len >= SIGNAL_PAD_EPOCH_SLOTS`, with a peer table of `world`
    /// entries, accessed only through signal operations.
    #[inline(always)]
    pub unsafe fn from_raw(raw: RawSym<u64>) -> SignalPad {
        SignalPad { raw }
    }

    /// The raw table and length (epoch slots included).
    #[inline(always)]
    pub fn raw(&self) -> RawSym<u64> {
        self.raw
    }

    /// Signals in the pad (per rank).
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.raw.len.saturating_sub(SIGNAL_PAD_EPOCH_SLOTS)
    }

    /// Whether the pad has no signals.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Signal `i` of this rank's copy: the one this rank waits on.
    #[inline(always)]
    #[track_caller]
    pub fn local(&self, i: usize) -> Signal {
        assert!(i < self.len(), "signal index out of bounds of the pad");
        Signal { ptr: self.raw.local.wrapping_add(i) }
    }

    /// Signal `i` of rank `rank`'s copy: the one to raise to tell `rank`.
    #[inline(always)]
    #[track_caller]
    pub fn peer(&self, rank: u32, i: usize) -> Signal {
        assert!(i < self.len(), "signal index out of bounds of the pad");
        assert!(rank < team::world(), "peer rank out of range of the team");
        // SAFETY: the host's table has `world` entries, and `rank < world`.
        let base = unsafe { self.raw.peers.add(rank as usize).read() };
        Signal { ptr: base.wrapping_add(i) }
    }

    /// This rank's epoch slot of block `block`: the launches it completed.
    #[inline(always)]
    #[track_caller]
    fn epoch_slot(&self, block: usize) -> &'static GpuAtomicU64 {
        assert!(
            self.raw.len >= SIGNAL_PAD_EPOCH_SLOTS && block < SIGNAL_PAD_EPOCH_SLOTS,
            "a signal pad allocated without its epoch slots, or a grid larger than its epoch slots"
        );
        // SAFETY: in bounds (checked); the pad's memory outlives the launch and these slots are only
        // accessed atomically, by this rank alone.
        unsafe { GpuAtomicU64::from_ptr(self.raw.local.add(self.len() + block)) }
    }

    /// This launch's epoch: 1 for the first launch that used the pad, then 2, 3, … — the same on every
    /// rank and in every block when all ranks launch the same kernels. Read it before
    /// [`advance_epoch`](SignalPad::advance_epoch).
    ///
    /// Each block keeps its own count of completed launches, and every launch leaves all counts equal (its
    /// blocks also advance the slots of the blocks it did not run), so a launch reads only its block's slot
    /// and ends with posted adds — no load, no fence; stream order makes them visible to the next launch.
    #[inline(always)]
    #[track_caller]
    pub fn epoch(&self) -> u64 {
        // SAFETY: `from_raw`'s contract: a live pad of the launch's team.
        #[cfg(not(target_arch = "nvptx64"))]
        unsafe {
            crate::emu::check::pad(&self.raw, None)
        };
        self.epoch_slot(block_rank() as usize).load_relaxed() + 1
    }

    /// Ends this launch's epoch. Block-collective: every thread of every block calls it once, at the end
    /// of the kernel, after its last use of [`epoch`](SignalPad::epoch). Every slot goes up by one with a
    /// posted `red.add` (no load, no fence on the kernel's way out): each block its own slot, and the slots
    /// of the blocks beyond the grid shared out over the grid's threads (at most one each for grids of 256
    /// threads or more), so the next launch may use any grid.
    #[inline(always)]
    #[track_caller]
    pub fn advance_epoch(&self) {
        // SAFETY: `from_raw`'s contract: a live pad of the launch's team.
        #[cfg(not(target_arch = "nvptx64"))]
        unsafe {
            crate::emu::check::pad(&self.raw, Some(Location::caller()))
        };
        let (block, blocks) = (block_rank() as usize, grid_size() as usize);
        // Every thread of the block has read the epoch before it changes.
        sync_threads();
        // Thread `t` of block `b` advances slots `b + (t + k * threads) * blocks`: thread 0 first its own
        // block's, the others slots beyond the grid; together they cover every slot once.
        let stride = block_size() as usize * blocks;
        let mut slot = block + thread_rank() as usize * blocks;
        while slot < SIGNAL_PAD_EPOCH_SLOTS {
            self.epoch_slot(slot).add_relaxed(1);
            slot += stride;
        }
    }
}
