//! Signals: `u64` flags in symmetric memory that order data between GPUs. A sender raises one with
//! release ordering after its data (`st.release.sys.u64` to set, `red.release.sys.global.add.u64` to add);
//! the receiver waits with acquire loads (`ld.acquire.sys.u64`), after which the data is visible.
//!
//! Signals are monotonic counters: each launch adds to them and waits for `>=` the launch's target, so they
//! never need a reset — see [`Session::epoch`]. Every wait has a timeout (the launch context's
//! `timeout_ns`): on expiry it records who waited on what, and the thread ends cleanly (PTX `exit`).

use core::panic::Location;

pub use crate::abi::Cmp;
use crate::abi::{RawSym, SIGNAL_PAD_EPOCH_SLOTS};
use crate::atomic::{GpuAtomicU64, SysAtomicU64};
use crate::ctx::{self, team};
use crate::index::{block_rank, block_size, grid_size, thread_rank};
use crate::sym::{DeviceCopy, PeerSlice, PeerSliceMut, SymSlice, SymSliceMut};
use crate::sync::sync_threads;
use crate::time::{globaltimer, nanosleep};
use crate::{error, trace};

/// Polls before a wait starts to sleep between polls (see [`Signal::spin_wait_acquire`] for more).
pub(crate) const SPIN_POLLS: u32 = 64;
/// First and longest back-off between polls once sleeping.
const MIN_BACKOFF_NS: u32 = 32;
const MAX_BACKOFF_NS: u32 = 1024;

/// Polls `poll` until it returns `Ok` — `spins` times in a tight loop, then backing off with `nanosleep`
/// — and gives up after the launch's timeout: then records a timeout for the address `addr` (with
/// `expected`, the last `Err` observed and `cmp`) and ends the thread. Between the back-off's polls it also reads the team's abort word (raised by
/// a panic anywhere in the team): once raised, it records an `Aborted` wait and ends the thread. The spin
/// polls before the back-off do neither, so a wait that succeeds early runs the same instructions as
/// without them.
#[inline(always)]
pub(crate) fn poll_until<R>(
    mut poll: impl FnMut() -> Result<R, u64>,
    spins: u32,
    addr: u64,
    expected: u64,
    cmp: Cmp,
    location: &'static Location<'static>,
) -> R {
    let mut polls = 0u32;
    let mut start = 0u64;
    let mut backoff = MIN_BACKOFF_NS;
    let mut abort = core::ptr::null_mut();
    loop {
        let observed = match poll() {
            Ok(r) => return r,
            Err(observed) => observed,
        };
        if polls < spins {
            polls += 1;
            if polls == spins {
                start = globaltimer();
                abort = error::abort_word();
            }
            continue;
        }
        nanosleep(backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF_NS);
        let origin = error::abort_raised(abort);
        if origin != 0 {
            error::aborted(addr, expected, observed, cmp, origin, location);
        }
        if globaltimer().wrapping_sub(start) > ctx::timeout_ns() {
            timed_out(addr, expected, observed, cmp, location);
        }
    }
}

#[cold]
#[inline(never)]
fn timed_out(addr: u64, expected: u64, observed: u64, cmp: Cmp, location: &Location<'_>) -> ! {
    #[cfg(not(target_arch = "nvptx64"))]
    crate::lower::check::timed_out(addr);
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
        trace::raised(self.ptr as u64, v, false, || self.atomic().store_release(v));
    }

    /// Sets the signal without ordering (`st.relaxed.sys.u64`): for flags whose data travels in the same
    /// store, or with an explicit fence before.
    #[inline(always)]
    pub fn set_relaxed(self, v: u64) {
        trace::raised(self.ptr as u64, v, false, || self.atomic().store_relaxed(v));
    }

    /// Adds to the signal after this thread's earlier writes (`red.release.sys.global.add.u64`).
    #[inline(always)]
    pub fn add_release(self, v: u64) {
        trace::raised(self.ptr as u64, v, true, || self.atomic().add_release(v));
    }

    /// Adds to the signal without ordering (`red.relaxed.sys.global.add.u64`): for counts that publish no
    /// data, or with an explicit fence before.
    #[inline(always)]
    pub fn add_relaxed(self, v: u64) {
        trace::raised(self.ptr as u64, v, true, || self.atomic().add_relaxed(v));
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
        self.poll(cmp, expected, SPIN_POLLS, Signal::load_acquire)
    }

    /// [`Signal::wait`] that polls `spins` times in a tight loop before it starts to back off (the wait's
    /// own default is 64): the fast path of a latency-critical wait such as a ping-pong's, which must not
    /// sleep while a peer's round trip is under way.
    #[inline(always)]
    #[track_caller]
    pub fn spin_wait_acquire(self, cmp: Cmp, expected: u64, spins: u32) -> u64 {
        self.poll(cmp, expected, spins, Signal::load_acquire)
    }

    /// [`Signal::spin_wait_acquire`] polling with relaxed loads: nothing the sender wrote before is ordered
    /// by it.
    #[inline(always)]
    #[track_caller]
    pub fn spin_wait_relaxed(self, cmp: Cmp, expected: u64, spins: u32) -> u64 {
        self.poll(cmp, expected, spins, Signal::load_relaxed)
    }

    /// [`Signal::wait`] polling with relaxed loads: nothing the sender wrote before is ordered by it (the
    /// weakened twin of a message-passing test; LL packets).
    #[inline(always)]
    #[track_caller]
    pub fn wait_relaxed(self, cmp: Cmp, expected: u64) -> u64 {
        self.poll(cmp, expected, SPIN_POLLS, Signal::load_relaxed)
    }

    /// Polls with `load` until `cmp` holds (the body of the waits).
    #[inline(always)]
    #[track_caller]
    fn poll(self, cmp: Cmp, expected: u64, spins: u32, load: impl Fn(Signal) -> u64) -> u64 {
        #[cfg(not(target_arch = "nvptx64"))]
        let _wait = crate::lower::check::SignalWait::begin(self.ptr as u64);
        trace::wait_begin(self.ptr as u64, expected, cmp);
        poll_until(
            || {
                let v = load(self);
                if cmp.holds(v, expected) { Ok(trace::waited(self.ptr as u64, v, cmp)) } else { Err(v) }
            },
            spins,
            self.ptr as u64,
            expected,
            cmp,
            Location::caller(),
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
/// `k` (1-based) of a kernel using the pad sees [`Session::epoch`] `== k` on every rank, so a sender adds 1
/// per launch and the receiver waits for `>= epoch * adds_per_launch`. A kernel uses the pad through one
/// [`Session`] per thread ([`SignalPad::session`]), which advances the epoch exactly once, when it is
/// dropped at the kernel's end: there is no advance to forget or to repeat.
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

    /// Begins this launch's use of the pad: the returned [`Session`] knows the launch's epoch and advances
    /// it when dropped. Block-collective: every thread of every block takes one session per launch and keeps
    /// it to the end of its use of the pad (at the kernel's end, usually); the drop waits for the block.
    #[inline(always)]
    #[track_caller]
    pub fn session(&self) -> Session {
        Session {
            pad: *self,
            epoch: self.epoch(),
            #[cfg(not(target_arch = "nvptx64"))]
            begun: Location::caller(),
        }
    }

    /// This launch's epoch: 1 for the first launch that used the pad, then 2, 3, … — the same on every
    /// rank and in every block when all ranks launch the same kernels.
    ///
    /// Each block keeps its own count of completed launches, and every launch leaves all counts equal (its
    /// blocks also advance the slots of the blocks it did not run), so a launch reads only its block's slot
    /// and ends with posted adds — no load, no fence; stream order makes them visible to the next launch.
    #[inline(always)]
    #[track_caller]
    fn epoch(&self) -> u64 {
        // SAFETY: `from_raw`'s contract: a live pad of the launch's team.
        #[cfg(not(target_arch = "nvptx64"))]
        unsafe {
            crate::lower::check::pad(&self.raw, None)
        };
        self.epoch_slot(block_rank() as usize).load_relaxed() + 1
    }

    /// Ends this launch's epoch ([`Session`]'s drop). Block-collective: every thread of every block, once, at
    /// the end of its use of the pad (`at`: where its session began). Every slot goes up by one with a
    /// posted `red.add` (no load, no fence on the kernel's way out): each block its own slot, and the slots
    /// of the blocks beyond the grid shared out over the grid's threads (at most one each for grids of 1024
    /// threads or more), so the next launch may use any grid.
    #[inline(always)]
    fn advance_epoch(&self, #[cfg(not(target_arch = "nvptx64"))] at: &'static Location<'static>) {
        // SAFETY: `from_raw`'s contract: a live pad of the launch's team.
        #[cfg(not(target_arch = "nvptx64"))]
        unsafe {
            crate::lower::check::pad(&self.raw, Some(at))
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

/// One launch's use of a [`SignalPad`] by one thread: the launch's epoch, and the pad's signals. Dropping it
/// advances the epoch — once, by construction.
///
/// ```
/// use ferrocomm_device::prelude::*;
/// fn notify(pad: SignalPad) {
///     let session = pad.session();
///     let next = (team::rank() + 1) % team::world();
///     if thread_rank() == 0 {
///         session.channel(next).signal(0).set_release(session.epoch());
///     }
/// } // the session's drop: the block's barrier, then the epoch advances
/// ```
#[derive(Debug)]
#[must_use = "a session advances the pad's epoch when dropped: keep it to the end of the pad's use"]
pub struct Session {
    pad: SignalPad,
    epoch: u64,
    /// Where it began: the emulator's checker names it when ranks or blocks advance differently.
    #[cfg(not(target_arch = "nvptx64"))]
    begun: &'static Location<'static>,
}

impl Session {
    /// This launch's epoch: 1 for the first launch that used the pad, then 2, 3, … — the same on every rank
    /// and in every block when all ranks launch the same kernels.
    #[inline(always)]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The pad.
    #[inline(always)]
    pub fn pad(&self) -> SignalPad {
        self.pad
    }

    /// Signal `i` of this rank's copy: the one this rank waits on.
    #[inline(always)]
    #[track_caller]
    pub fn local(&self, i: usize) -> Signal {
        self.pad.local(i)
    }

    /// The channel to rank `peer` (panics when `peer` is not in the team).
    #[inline(always)]
    #[track_caller]
    pub fn channel(&self, peer: u32) -> Channel {
        assert!(peer < team::world(), "peer rank out of range of the team");
        Channel { pad: self.pad, peer, epoch: self.epoch }
    }

    /// The channels to every other rank, in rank order.
    #[inline(always)]
    pub fn peers(&self) -> impl Iterator<Item = Channel> + use<> {
        let (pad, epoch, rank) = (self.pad, self.epoch, team::rank());
        (0..team::world()).filter(move |&q| q != rank).map(move |peer| Channel { pad, peer, epoch })
    }
}

impl Drop for Session {
    #[inline(always)]
    fn drop(&mut self) {
        self.pad.advance_epoch(
            #[cfg(not(target_arch = "nvptx64"))]
            self.begun,
        );
        trace::epoch(self.pad.raw.local as u64, self.epoch);
    }
}

/// What one rank needs to talk to one peer in a launch: the peer's signals (raise them to tell it), this
/// rank's signals the peer raises, the peer's copies of symmetric buffers, and the launch's epoch.
///
/// ```
/// use ferrocomm_device::prelude::*;
/// /// Sends `src` to every peer's `inbox` slot of this rank and waits for every peer's message.
/// fn all_gather(session: &Session, inbox: SymSliceMut<u32>, src: &[u32]) {
///     let rank = team::rank() as usize;
///     for ch in session.peers() {
///         let slot = ch.remote(inbox).slice(rank * src.len(), src.len());
///         put_signal(Group::Block, slot, src, ch.signal(rank), SignalOp::Set(session.epoch()));
///     }
///     if thread_rank() == 0 {
///         for ch in session.peers() {
///             ch.inbox(ch.peer() as usize).wait_ge(session.epoch());
///         }
///     }
///     sync_threads();
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Channel {
    pad: SignalPad,
    peer: u32,
    epoch: u64,
}

impl Channel {
    /// The peer's rank.
    #[inline(always)]
    pub fn peer(&self) -> u32 {
        self.peer
    }

    /// The launch's epoch (its session's).
    #[inline(always)]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Signal `i` of the peer's copy of the pad: raise it to tell the peer.
    #[inline(always)]
    #[track_caller]
    pub fn signal(&self, i: usize) -> Signal {
        self.pad.peer(self.peer, i)
    }

    /// Signal `i` of this rank's copy of the pad: the one the peer raises, this rank waits on.
    #[inline(always)]
    #[track_caller]
    pub fn inbox(&self, i: usize) -> Signal {
        self.pad.local(i)
    }

    /// The peer's copy of `buf`: the destination of puts to it.
    #[inline(always)]
    #[track_caller]
    pub fn remote<T: DeviceCopy>(&self, buf: SymSliceMut<T>) -> PeerSliceMut<T> {
        buf.peer(self.peer)
    }

    /// The peer's copy of the read-only `buf`: the source of gets from it.
    #[inline(always)]
    #[track_caller]
    pub fn remote_input<T: DeviceCopy>(&self, buf: SymSlice<T>) -> PeerSlice<T> {
        buf.peer(self.peer)
    }
}
