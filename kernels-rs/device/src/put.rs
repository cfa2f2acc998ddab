//! Peer data movement: `put` (local → a rank's copy of a symmetric buffer) and `get` (a rank's copy →
//! local), by one thread, a warp or a block, plus put-with-signal and non-blocking puts.
//!
//! The body moves 16 bytes per access (`ld.global.v4.b32` / `st.global.v4.b32`, four in flight per thread)
//! whenever source and destination are equally aligned modulo 16; a head and a tail of fewer than 16 bytes
//! use the widest units both addresses allow. Otherwise the whole copy uses that widest common unit.
//! Every buffer involved is in global memory (kernel arguments, symmetric buffers), not shared memory.
//!
//! The copies are weak: a peer may read the data only after an acquire that synchronises with a release
//! after the copy — use [`put_signal`] or raise a signal after [`quiet`].
//!
//! Cooperative variants (`_warp`, `_block`) must be called by every thread of the warp / block with the
//! same arguments; each thread copies its share.

use core::marker::PhantomData;

use crate::fence::fence_acq_rel_sys;
use crate::index::{block_size, lane_id, thread_rank, warp_lanes, warp_mask};
use crate::mem::{GlobalPtr, copy_small, unit_for};
use crate::signal::{Signal, SignalOp};
use crate::sym::{DeviceCopy, PeerSlice, PeerSliceMut};
use crate::sync::{sync_threads, sync_warp};

/// 16-byte vectors each thread keeps in flight in the copy body.
const UNROLL: usize = 4;

/// The threads that share one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    Thread,
    Warp,
    Block,
}

impl Group {
    /// (this thread's index in the group, the group's size).
    #[inline(always)]
    fn position(self) -> (usize, usize) {
        match self {
            Group::Thread => (0, 1),
            Group::Warp => (lane_id() as usize, warp_lanes() as usize),
            Group::Block => (thread_rank() as usize, block_size() as usize),
        }
    }

    /// Waits for every thread of the group (their loads of the source are then done).
    #[inline(always)]
    fn sync(self) {
        match self {
            Group::Thread => {}
            Group::Warp => sync_warp(warp_mask()),
            Group::Block => sync_threads(),
        }
    }

    /// Whether this thread speaks for the group (raises its signal).
    #[inline(always)]
    fn is_leader(self) -> bool {
        match self {
            Group::Thread => true,
            Group::Warp => lane_id() == 0,
            Group::Block => thread_rank() == 0,
        }
    }
}

/// Copies `n` 16-byte vectors, vector `i` by lane `i % lanes`, `UNROLL` loads in flight before the stores.
///
/// # Safety
///
/// Both ranges hold `n` vectors, are 16-byte aligned and do not overlap.
#[inline(always)]
unsafe fn copy_vectors(dst: GlobalPtr, src: GlobalPtr, n: usize, lane: usize, lanes: usize) {
    let mut i = lane;
    while i + (UNROLL - 1) * lanes < n {
        let mut v = [[0u32; 4]; UNROLL];
        for (k, v) in v.iter_mut().enumerate() {
            // SAFETY: vector `i + k * lanes < n` is inside both 16-byte aligned ranges (the caller).
            *v = unsafe { src.byte_add((i + k * lanes) * 16).ld_v4() };
        }
        for (k, v) in v.iter().enumerate() {
            // SAFETY: as above.
            unsafe { dst.byte_add((i + k * lanes) * 16).st_v4(*v) };
        }
        i += UNROLL * lanes;
    }
    while i < n {
        // SAFETY: as above.
        unsafe { dst.byte_add(i * 16).st_v4(src.byte_add(i * 16).ld_v4()) };
        i += lanes;
    }
}

/// Copies `n` units of `unit` bytes (8, 4, 2 or 1), unit `i` by lane `i % lanes`.
///
/// # Safety
///
/// Both ranges hold `n` units, are aligned to `unit` and do not overlap.
#[inline(always)]
unsafe fn copy_units(dst: GlobalPtr, src: GlobalPtr, n: usize, unit: usize, lane: usize, lanes: usize) {
    let mut i = lane;
    while i < n {
        let (d, s) = (dst.byte_add(i * unit), src.byte_add(i * unit));
        // SAFETY: unit `i < n` is inside both ranges, which are aligned to `unit` (the caller).
        unsafe {
            match unit {
                8 => d.st_b64(s.ld_b64()),
                4 => d.st_b32(s.ld_b32()),
                2 => d.st_b16(s.ld_b16()),
                _ => d.st_b8(s.ld_b8()),
            }
        }
        i += lanes;
    }
}

/// Copies `bytes` bytes from `src` to `dst`; lane `lane` of `lanes` does its share (the head by the first
/// lane, the tail by the last).
///
/// # Safety
///
/// Both ranges are valid global memory for `bytes` bytes and do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_bytes(dst: GlobalPtr, src: GlobalPtr, bytes: usize, lane: usize, lanes: usize) {
    let (d, s) = (dst.addr(), src.addr());
    // Vectors need both addresses 16-byte aligned at the same offsets; else the widest common unit.
    let unit = if (d ^ s) % 16 == 0 { 16 } else { unit_for(d ^ s, 8) };
    let head = ((unit - d % unit) % unit).min(bytes);
    let count = (bytes - head) / unit;
    let tail_start = head + count * unit;
    if lane == 0 {
        // SAFETY: the first `head` bytes of both ranges.
        unsafe { copy_small(dst, src, head) };
    }
    let (body_dst, body_src) = (dst.byte_add(head), src.byte_add(head));
    // SAFETY: `count` units after the head lie inside both ranges, aligned to `unit`.
    unsafe {
        if unit == 16 {
            copy_vectors(body_dst, body_src, count, lane, lanes);
        } else {
            copy_units(body_dst, body_src, count, unit, lane, lanes);
        }
    }
    if lane == lanes - 1 {
        // SAFETY: the last `bytes - tail_start` bytes of both ranges.
        unsafe { copy_small(dst.byte_add(tail_start), src.byte_add(tail_start), bytes - tail_start) };
    }
}

#[inline(always)]
#[track_caller]
fn put_group<T: DeviceCopy>(group: Group, dst: PeerSliceMut<T>, src: &[T]) {
    assert!(src.len() <= dst.len(), "put source is longer than its destination");
    let (lane, lanes) = group.position();
    let bytes = core::mem::size_of_val(src);
    if bytes == 0 {
        return;
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        use crate::emu::check::Access;
        let accesses = [(src.as_ptr() as usize, Access::Read), (dst.as_ptr() as usize, Access::Write)];
        crate::emu::check::copy(&accesses, bytes, (lane, lanes), core::panic::Location::caller());
    }
    // SAFETY: `src` is a live local slice and `dst` a live peer view at least as long, both in global
    // memory (the module's contract); a local buffer and a symmetric one never overlap.
    unsafe {
        copy_bytes(GlobalPtr::from_generic(dst.as_ptr()), GlobalPtr::from_generic(src.as_ptr()), bytes, lane, lanes)
    };
}

#[inline(always)]
#[track_caller]
fn get_group<T: DeviceCopy>(group: Group, dst: &mut [T], src: PeerSlice<T>) {
    assert!(dst.len() <= src.len(), "get destination is longer than its source");
    let (lane, lanes) = group.position();
    let bytes = core::mem::size_of_val(dst);
    if bytes == 0 {
        return;
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let (read, loc) = (crate::emu::check::Access::Read, core::panic::Location::caller());
        crate::emu::check::copy(&[(src.as_ptr() as usize, read)], bytes, (lane, lanes), loc);
    }
    // SAFETY: as in `put_group`, with the roles swapped.
    unsafe {
        copy_bytes(GlobalPtr::from_generic(dst.as_mut_ptr()), GlobalPtr::from_generic(src.as_ptr()), bytes, lane, lanes)
    };
}

/// One thread copies `src` into the start of `dst` (a rank's copy of a symmetric buffer).
#[inline(always)]
#[track_caller]
pub fn put<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T]) {
    put_group(Group::Thread, dst, src);
}

/// The warp copies `src` into the start of `dst`; returns when every lane's loads are done.
#[inline(always)]
#[track_caller]
pub fn put_warp<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T]) {
    put_group(Group::Warp, dst, src);
    Group::Warp.sync();
}

/// The block copies `src` into the start of `dst`; returns when every thread's loads are done.
#[inline(always)]
#[track_caller]
pub fn put_block<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T]) {
    put_group(Group::Block, dst, src);
    Group::Block.sync();
}

/// One thread fills `dst` from the start of `src` (a rank's copy of a symmetric buffer).
#[inline(always)]
#[track_caller]
pub fn get<T: DeviceCopy>(dst: &mut [T], src: PeerSlice<T>) {
    get_group(Group::Thread, dst, src);
}

/// The warp fills `dst` from the start of `src`; returns when every lane's stores are issued.
#[inline(always)]
#[track_caller]
pub fn get_warp<T: DeviceCopy>(dst: &mut [T], src: PeerSlice<T>) {
    get_group(Group::Warp, dst, src);
    Group::Warp.sync();
}

/// The block fills `dst` from the start of `src`; returns when every thread's stores are issued.
#[inline(always)]
#[track_caller]
pub fn get_block<T: DeviceCopy>(dst: &mut [T], src: PeerSlice<T>) {
    get_group(Group::Block, dst, src);
    Group::Block.sync();
}

/// A put in flight: it borrows its source until [`quiet`](PutToken::quiet), so rewriting the send buffer
/// before the put completed does not compile.
///
/// ```
/// use ferrocomm_device::put::put_nbi;
/// use ferrocomm_device::sym::PeerSliceMut;
/// fn send(dst: PeerSliceMut<u32>, buf: &mut [u32]) {
///     let token = put_nbi(dst, buf);
///     token.quiet();
///     buf[0] = 7; // fine: the put completed
/// }
/// ```
///
/// ```compile_fail
/// use ferrocomm_device::put::put_nbi;
/// use ferrocomm_device::sym::PeerSliceMut;
/// fn send(dst: PeerSliceMut<u32>, buf: &mut [u32]) {
///     let token = put_nbi(dst, buf);
///     buf[0] = 7; // error: `*buf` is borrowed by the put in flight
///     token.quiet();
/// }
/// ```
#[must_use = "a non-blocking put completes only at `quiet()`; until then its source must stay unchanged"]
#[derive(Debug)]
pub struct PutToken<'src> {
    group: Group,
    _src: PhantomData<&'src [u8]>,
}

impl PutToken<'_> {
    /// Completes the put: waits for the group's threads, then `fence.acq_rel.sys`, after which the source
    /// may change and a relaxed signal store publishes the data.
    #[inline(always)]
    pub fn quiet(self) {
        self.group.sync();
        fence_acq_rel_sys();
    }
}

/// The emulator's checker keeps the source of a non-blocking put (the group's leader does, for the group)
/// to compare it at the put's `quiet()`.
#[cfg(not(target_arch = "nvptx64"))]
#[track_caller]
fn nbi_started<T: DeviceCopy>(group: Group, dst: PeerSliceMut<T>, src: &[T]) {
    let bytes = core::mem::size_of_val(src);
    if group.is_leader() && bytes != 0 {
        let (s, d, loc) = (src.as_ptr() as usize, dst.as_ptr() as usize, core::panic::Location::caller());
        // SAFETY: the source is memory of the launch or of this thread's stack, which outlives every check
        // of this thread (they run at its fences and as it ends).
        unsafe { crate::emu::check::put_started(s, d, bytes, loc) };
    }
}

/// One thread starts copying `src` into `dst`; the returned token borrows `src` until `quiet`.
#[inline(always)]
#[track_caller]
pub fn put_nbi<'src, T: DeviceCopy>(dst: PeerSliceMut<T>, src: &'src [T]) -> PutToken<'src> {
    put_group(Group::Thread, dst, src);
    #[cfg(not(target_arch = "nvptx64"))]
    nbi_started(Group::Thread, dst, src);
    PutToken { group: Group::Thread, _src: PhantomData }
}

/// The warp starts copying `src` into `dst` without waiting for its lanes; the token borrows `src`.
#[inline(always)]
#[track_caller]
pub fn put_warp_nbi<'src, T: DeviceCopy>(dst: PeerSliceMut<T>, src: &'src [T]) -> PutToken<'src> {
    put_group(Group::Warp, dst, src);
    #[cfg(not(target_arch = "nvptx64"))]
    nbi_started(Group::Warp, dst, src);
    PutToken { group: Group::Warp, _src: PhantomData }
}

/// The block starts copying `src` into `dst` without waiting for its threads; the token borrows `src`.
#[inline(always)]
#[track_caller]
pub fn put_block_nbi<'src, T: DeviceCopy>(dst: PeerSliceMut<T>, src: &'src [T]) -> PutToken<'src> {
    put_group(Group::Block, dst, src);
    #[cfg(not(target_arch = "nvptx64"))]
    nbi_started(Group::Block, dst, src);
    PutToken { group: Group::Block, _src: PhantomData }
}

#[inline(always)]
#[track_caller]
fn put_signal_group<T: DeviceCopy>(group: Group, dst: PeerSliceMut<T>, src: &[T], signal: Signal, op: SignalOp) {
    put_group(group, dst, src);
    // The leader's release is cumulative over the writes the barrier made it observe.
    group.sync();
    if group.is_leader() {
        signal.raise_release(op);
    }
}

/// One thread copies `src` into `dst`, then raises `signal` with release ordering: a peer that acquires
/// the signal sees the data.
#[inline(always)]
#[track_caller]
pub fn put_signal<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T], signal: Signal, op: SignalOp) {
    put_signal_group(Group::Thread, dst, src, signal, op);
}

/// The warp copies `src` into `dst`; after every lane is done, lane 0 raises `signal` (release).
#[inline(always)]
#[track_caller]
pub fn put_signal_warp<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T], signal: Signal, op: SignalOp) {
    put_signal_group(Group::Warp, dst, src, signal, op);
}

/// The block copies `src` into `dst`; after every thread is done, thread 0 raises `signal` (release).
#[inline(always)]
#[track_caller]
pub fn put_signal_block<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T], signal: Signal, op: SignalOp) {
    put_signal_group(Group::Block, dst, src, signal, op);
}

/// Orders this thread's earlier puts before its later puts and signals, as every peer sees them
/// (`fence.acq_rel.sys`; over NVLink stores, NVSHMEM's `fence` and `quiet` are the same system fence).
#[inline(always)]
pub fn fence() {
    fence_acq_rel_sys();
}

/// Completes this thread's earlier puts: after it, a relaxed signal store publishes them
/// (`fence.acq_rel.sys`). Cooperative puts need their group's barrier first — [`PutToken::quiet`] does both.
#[inline(always)]
pub fn quiet() {
    fence_acq_rel_sys();
}
