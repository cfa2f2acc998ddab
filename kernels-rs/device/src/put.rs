//! Peer data movement: `put` (a local slice or a symmetric copy → a rank's copy of a symmetric buffer) and
//! `get` (a rank's copy → local), by one thread, a warp or a block, plus put-with-signal and non-blocking
//! puts.
//!
//! The body moves 16 bytes per access (`ld.global.v4.b32` / `st.global.v4.b32`, four in flight per thread)
//! whenever source and destination are equally aligned modulo 16; a head and a tail of fewer than 16 bytes
//! use the widest units both addresses allow. Otherwise the whole copy uses that widest common unit.
//! Every buffer involved is in global memory (kernel arguments, symmetric buffers), not shared memory.
//!
//! The copies are weak: a peer may read the data only after an acquire that synchronises with a release
//! after the copy — use [`put_signal`] or raise a signal after [`quiet`].
//!
//! Every call takes the [`Group`] of threads that share it: every thread of the group calls it with the
//! same arguments, and each copies its share.

use core::marker::PhantomData;

use crate::fence::fence_acq_rel_sys;
pub use crate::group::Group;
use crate::mem::{GlobalPtr, copy_small, unit_for};
use crate::signal::{Signal, SignalOp};
use crate::sym::{DeviceCopy, PeerSlice, PeerSliceMut};
use crate::trace;
use crate::vector::Vectors;

/// 16-byte vectors each thread keeps in flight in the copy body.
const UNROLL: usize = 4;

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

/// The source of a put: a local slice (a kernel argument), a view of a symmetric buffer's copy — this
/// rank's own included, so a kernel forwards what a peer put there without a raw pointer — or, for bytes,
/// a [`Vectors`] range.
pub trait PutSource<T>: Copy + private::Sealed {
    /// The first element's address in the global window and the number of elements.
    #[doc(hidden)]
    fn parts(self) -> (GlobalPtr, usize);
}

mod private {
    pub trait Sealed {}
}

impl<T> private::Sealed for &[T] {}
impl<T> private::Sealed for PeerSlice<T> {}
impl<T> private::Sealed for PeerSliceMut<T> {}
impl private::Sealed for Vectors {}

/// `len` elements at `p`, in the global window.
#[inline(always)]
fn global<T>(p: *const T, len: usize) -> (GlobalPtr, usize) {
    // SAFETY: a put's source is global memory: a kernel argument or a symmetric copy (the module's
    // contract).
    (unsafe { GlobalPtr::from_generic(p) }, len)
}

impl<T: DeviceCopy> PutSource<T> for &[T] {
    #[inline(always)]
    fn parts(self) -> (GlobalPtr, usize) {
        global(self.as_ptr(), self.len())
    }
}

impl<T: DeviceCopy> PutSource<T> for PeerSlice<T> {
    #[inline(always)]
    fn parts(self) -> (GlobalPtr, usize) {
        global(self.as_ptr(), self.len())
    }
}

impl<T: DeviceCopy> PutSource<T> for PeerSliceMut<T> {
    #[inline(always)]
    fn parts(self) -> (GlobalPtr, usize) {
        global(self.as_ptr().cast_const(), self.len())
    }
}

impl PutSource<u8> for Vectors {
    #[inline(always)]
    fn parts(self) -> (GlobalPtr, usize) {
        (self.base(), self.len())
    }
}

/// The group's threads copy `src` into the start of `dst` (a rank's copy of a symmetric buffer), each its
/// share; for a warp or a block, returns when every thread's loads are done (the source may change).
#[inline(always)]
#[track_caller]
pub fn put<T: DeviceCopy>(group: Group, dst: PeerSliceMut<T>, src: impl PutSource<T>) {
    put_share(group, dst, src);
    group.sync();
    traced_end(group, dst, src);
}

/// The group's leader records the end of a put (nothing in an untraced GPU build).
#[inline(always)]
fn traced_end<T: DeviceCopy>(group: Group, dst: PeerSliceMut<T>, src: impl PutSource<T>) {
    if trace::COMPILED_IN && group.is_leader() {
        trace::put_end(src.parts().1 * core::mem::size_of::<T>(), dst.as_ptr() as u64);
    }
}

/// This thread's share of a put, without waiting for the group.
#[inline(always)]
#[track_caller]
fn put_share<T: DeviceCopy>(group: Group, dst: PeerSliceMut<T>, src: impl PutSource<T>) {
    let (src, len) = src.parts();
    assert!(len <= dst.len(), "put source is longer than its destination");
    let (lane, lanes) = group.position();
    let bytes = len * core::mem::size_of::<T>();
    if bytes == 0 {
        return;
    }
    if trace::COMPILED_IN && lane == 0 {
        trace::put_begin(bytes, dst.as_ptr() as u64);
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        use crate::lower::check::Access;
        let accesses = [(src.addr(), Access::Read), (dst.as_ptr() as usize, Access::Write)];
        crate::lower::check::copy(&accesses, bytes, (lane, lanes), core::panic::Location::caller());
    }
    // SAFETY: `src` addresses `len` live elements (a slice or a view of a live symmetric copy) and `dst` a
    // live peer view at least as long, both in global memory (the module's contract). They do not overlap:
    // a put into the range it reads from is a protocol error every rank's copy layout rules out.
    unsafe { copy_bytes(GlobalPtr::from_generic(dst.as_ptr()), src, bytes, lane, lanes) };
}

/// The group's threads fill `dst` from the start of `src` (a rank's copy of a symmetric buffer); for a warp
/// or a block, returns when every thread's stores are issued.
#[inline(always)]
#[track_caller]
pub fn get<T: DeviceCopy>(group: Group, dst: &mut [T], src: PeerSlice<T>) {
    assert!(dst.len() <= src.len(), "get destination is longer than its source");
    let (lane, lanes) = group.position();
    let bytes = core::mem::size_of_val(dst);
    if bytes != 0 {
        #[cfg(not(target_arch = "nvptx64"))]
        {
            let (read, loc) = (crate::lower::check::Access::Read, core::panic::Location::caller());
            crate::lower::check::copy(&[(src.as_ptr() as usize, read)], bytes, (lane, lanes), loc);
        }
        // SAFETY: as in `put_share`, with the roles swapped.
        unsafe {
            copy_bytes(
                GlobalPtr::from_generic(dst.as_mut_ptr()),
                GlobalPtr::from_generic(src.as_ptr()),
                bytes,
                lane,
                lanes,
            )
        };
    }
    group.sync();
}

/// A put in flight: it borrows its source until it completes, so rewriting the send buffer before the
/// put completed does not compile. It completes at [`quiet`](PutToken::quiet) or when the token is dropped
/// (a token cannot be forgotten un-quieted: its drop quiets).
///
/// ```
/// use ferrocomm_device::prelude::*;
/// fn send(dst: PeerSliceMut<u32>, buf: &mut [u32]) {
///     let token = put_nbi(Group::Thread, dst, buf);
///     token.quiet();
///     buf[0] = 7; // fine: the put completed
/// }
/// ```
///
/// ```compile_fail
/// use ferrocomm_device::prelude::*;
/// fn send(dst: PeerSliceMut<u32>, buf: &mut [u32]) {
///     let token = put_nbi(Group::Thread, dst, buf);
///     buf[0] = 7; // error: `*buf` is borrowed by the put in flight
///     token.quiet();
/// }
/// ```
#[must_use = "a non-blocking put completes at `quiet()` or where its token is dropped; dropping it at once makes it blocking"]
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
        drop(self);
    }
}

impl Drop for PutToken<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.group.sync();
        fence_acq_rel_sys();
        if trace::COMPILED_IN && self.group.is_leader() {
            trace::put_end(0, 0);
        }
    }
}

/// The group's threads start copying `src` into `dst` without waiting for each other; the returned token
/// borrows `src` until the put completes.
#[inline(always)]
#[track_caller]
pub fn put_nbi<'src, T: DeviceCopy>(group: Group, dst: PeerSliceMut<T>, src: &'src [T]) -> PutToken<'src> {
    put_share(group, dst, src);
    // The emulator's checker keeps the source (the group's leader does, for the group) to compare it when
    // the put completes.
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let bytes = core::mem::size_of_val(src);
        if group.is_leader() && bytes != 0 {
            let (s, d, loc) = (src.as_ptr() as usize, dst.as_ptr() as usize, core::panic::Location::caller());
            // SAFETY: the source is memory of the launch or of this thread's stack, which outlives every
            // check of this thread (they run at its fences and as it ends).
            unsafe { crate::lower::check::put_started(s, d, bytes, loc) };
        }
    }
    PutToken { group, _src: PhantomData }
}

/// The group's threads copy `src` into `dst`; once every thread of the group is done, its leader raises
/// `signal` with release ordering: a peer that acquires the signal sees the data.
#[inline(always)]
#[track_caller]
pub fn put_signal<T: DeviceCopy>(
    group: Group,
    dst: PeerSliceMut<T>,
    src: impl PutSource<T>,
    signal: Signal,
    op: SignalOp,
) {
    put_share(group, dst, src);
    // The leader's release is cumulative over the writes the barrier made it observe.
    group.sync();
    traced_end(group, dst, src);
    if group.is_leader() {
        signal.raise_release(op);
    }
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

// The group-suffixed calls of 0.1's first API, kept for one release so that kernels written against it
// build with a warning naming the replacement (CHANGELOG.md).

/// Deprecated: use `put(Group::Warp, dst, src)`.
#[deprecated(since = "0.2.0", note = "use `put(Group::Warp, dst, src)`")]
#[inline(always)]
#[track_caller]
pub fn put_warp<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T]) {
    put(Group::Warp, dst, src)
}

/// Deprecated: use `put(Group::Block, dst, src)`.
#[deprecated(since = "0.2.0", note = "use `put(Group::Block, dst, src)`")]
#[inline(always)]
#[track_caller]
pub fn put_block<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T]) {
    put(Group::Block, dst, src)
}

/// Deprecated: use `put_nbi(Group::Warp, dst, src)`.
#[deprecated(since = "0.2.0", note = "use `put_nbi(Group::Warp, dst, src)`")]
#[inline(always)]
#[track_caller]
pub fn put_warp_nbi<'src, T: DeviceCopy>(dst: PeerSliceMut<T>, src: &'src [T]) -> PutToken<'src> {
    put_nbi(Group::Warp, dst, src)
}

/// Deprecated: use `put_nbi(Group::Block, dst, src)`.
#[deprecated(since = "0.2.0", note = "use `put_nbi(Group::Block, dst, src)`")]
#[inline(always)]
#[track_caller]
pub fn put_block_nbi<'src, T: DeviceCopy>(dst: PeerSliceMut<T>, src: &'src [T]) -> PutToken<'src> {
    put_nbi(Group::Block, dst, src)
}

/// Deprecated: use `put_signal(Group::Warp, dst, src, signal, op)`.
#[deprecated(since = "0.2.0", note = "use `put_signal(Group::Warp, dst, src, signal, op)`")]
#[inline(always)]
#[track_caller]
pub fn put_signal_warp<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T], signal: Signal, op: SignalOp) {
    put_signal(Group::Warp, dst, src, signal, op)
}

/// Deprecated: use `put_signal(Group::Block, dst, src, signal, op)`.
#[deprecated(since = "0.2.0", note = "use `put_signal(Group::Block, dst, src, signal, op)`")]
#[inline(always)]
#[track_caller]
pub fn put_signal_block<T: DeviceCopy>(dst: PeerSliceMut<T>, src: &[T], signal: Signal, op: SignalOp) {
    put_signal(Group::Block, dst, src, signal, op)
}

/// Deprecated: use `get(Group::Warp, dst, src)`.
#[deprecated(since = "0.2.0", note = "use `get(Group::Warp, dst, src)`")]
#[inline(always)]
#[track_caller]
pub fn get_warp<T: DeviceCopy>(dst: &mut [T], src: PeerSlice<T>) {
    get(Group::Warp, dst, src)
}

/// Deprecated: use `get(Group::Block, dst, src)`.
#[deprecated(since = "0.2.0", note = "use `get(Group::Block, dst, src)`")]
#[inline(always)]
#[track_caller]
pub fn get_block<T: DeviceCopy>(dst: &mut [T], src: PeerSlice<T>) {
    get(Group::Block, dst, src)
}
