//! Typed handles to symmetric memory — the same allocation on every rank of the team — and the views of one
//! rank's copy that data movement works on.
//!
//! [`SymSlice`] is an input no rank writes during the launch; [`SymSliceMut`] is a buffer ranks write into
//! (puts from peers land in it). `.peer(rank)` gives a [`PeerSlice`]/[`PeerSliceMut`]: rank `rank`'s copy
//! as this GPU addresses it (over NVLink for a peer; `.peer(team::rank())` is this rank's own).

use crate::abi::RawSym;
use crate::ctx::team;
use crate::half::{bf16, f16};
#[cfg(not(target_arch = "nvptx64"))]
use crate::mem::{GlobalPtr, copy_small};

/// Plain data that may be copied byte-wise between GPUs.
///
/// # Safety
///
/// The type has no padding bytes, every bit pattern is a valid value (a torn copy is still a value), and
/// it has no drop glue or interior pointers that mean something to one GPU only.
pub unsafe trait DeviceCopy: Copy + 'static {}

macro_rules! device_copy {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive with no padding, valid for every bit pattern.
        unsafe impl DeviceCopy for $t {}
    )* };
}
device_copy!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64, bf16, f16);
// SAFETY: an array of such values has no padding either.
unsafe impl<T: DeviceCopy, const N: usize> DeviceCopy for [T; N] {}

/// Rank `rank`'s base address of a symmetric buffer.
#[inline(always)]
#[track_caller]
fn peer_base<T>(raw: &RawSym<T>, rank: u32) -> *mut T {
    let world = team::world();
    assert!(rank < world, "peer rank out of range of the team");
    // SAFETY: the host's table has `world` entries, and `rank < world`.
    unsafe { raw.peers.add(rank as usize).read() }
}

/// A symmetric buffer no rank writes during the launch (a kernel input).
#[derive(Debug, Clone, Copy)]
pub struct SymSlice<T> {
    raw: RawSym<T>,
}

impl<T: DeviceCopy> SymSlice<T> {
    /// The handle of a symmetric buffer.
    ///
    /// # Safety
    ///
    /// `raw` describes a live symmetric allocation of `raw.len` elements on every rank, with a peer table
    /// of `world` entries, that no rank writes while the handle is used.
    #[inline(always)]
    pub unsafe fn from_raw(raw: RawSym<T>) -> SymSlice<T> {
        SymSlice { raw }
    }

    /// The raw table and length.
    #[inline(always)]
    pub fn raw(&self) -> RawSym<T> {
        self.raw
    }

    /// Elements in each rank's copy.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Whether the buffer is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// This rank's copy.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub fn local(&self) -> &[T] {
        if self.raw.len == 0 {
            return &[];
        }
        // The emulator's checker: the slice reads the whole copy (no rank writes it during the launch), so
        // every put into it must be ordered before, and a later put after, this launch of its rank.
        #[cfg(not(target_arch = "nvptx64"))]
        crate::lower::check::input_read(
            self.raw.local as usize,
            self.raw.len * core::mem::size_of::<T>(),
            core::panic::Location::caller(),
        );
        // SAFETY: `from_raw`'s contract: live, `len` elements, not written during the launch.
        unsafe { core::slice::from_raw_parts(self.raw.local, self.raw.len) }
    }

    /// Rank `rank`'s copy (panics when `rank` is not in the team).
    #[inline(always)]
    #[track_caller]
    pub fn peer(&self, rank: u32) -> PeerSlice<T> {
        PeerSlice { ptr: peer_base(&self.raw, rank), len: self.raw.len }
    }
}

/// A symmetric buffer that ranks write into during the launch (puts from peers, LL packets).
#[derive(Debug, Clone, Copy)]
pub struct SymSliceMut<T> {
    raw: RawSym<T>,
}

impl<T: DeviceCopy> SymSliceMut<T> {
    /// The handle of a symmetric buffer.
    ///
    /// # Safety
    ///
    /// `raw` describes a live symmetric allocation of `raw.len` elements on every rank, with a peer table
    /// of `world` entries.
    #[inline(always)]
    pub unsafe fn from_raw(raw: RawSym<T>) -> SymSliceMut<T> {
        // The emulator's checker learns which memory is this rank's own copy.
        #[cfg(not(target_arch = "nvptx64"))]
        crate::lower::check::own_copy(raw.local as usize, raw.len * core::mem::size_of::<T>());
        SymSliceMut { raw }
    }

    /// The raw table and length.
    #[inline(always)]
    pub fn raw(&self) -> RawSym<T> {
        self.raw
    }

    /// Elements in each rank's copy.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Whether the buffer is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// This rank's copy, as a view for weak reads and writes and as the target of `get`s and LL reads.
    #[inline(always)]
    pub fn local(&self) -> PeerSliceMut<T> {
        PeerSliceMut { ptr: self.raw.local, len: self.raw.len }
    }

    /// This rank's copy as a slice.
    ///
    /// # Safety
    ///
    /// No thread of any rank writes the copy while the slice lives (e.g. after waiting on the signal that
    /// covers every put into it).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn local_slice(&self) -> &[T] {
        if self.raw.len == 0 {
            return &[];
        }
        // The emulator's checker: the slice reads the whole copy for as long as it lives.
        #[cfg(not(target_arch = "nvptx64"))]
        crate::lower::check::access(
            self.raw.local as usize,
            self.raw.len * core::mem::size_of::<T>(),
            crate::lower::check::Access::Read,
            core::panic::Location::caller(),
        );
        // SAFETY: live and `len` long (`from_raw`); unwritten meanwhile (the caller).
        unsafe { core::slice::from_raw_parts(self.raw.local, self.raw.len) }
    }

    /// This rank's copy as a mutable slice.
    ///
    /// # Safety
    ///
    /// No other thread of any rank reads or writes the copy while the slice lives.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    #[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
    pub unsafe fn local_slice_mut(&self) -> &mut [T] {
        if self.raw.len == 0 {
            return &mut [];
        }
        // The emulator's checker: the slice reads the whole copy for as long as it lives (the owner's own
        // writes are not puts and are not tracked).
        #[cfg(not(target_arch = "nvptx64"))]
        crate::lower::check::access(
            self.raw.local as usize,
            self.raw.len * core::mem::size_of::<T>(),
            crate::lower::check::Access::Read,
            core::panic::Location::caller(),
        );
        // SAFETY: live and `len` long (`from_raw`); exclusive meanwhile (the caller).
        unsafe { core::slice::from_raw_parts_mut(self.raw.local, self.raw.len) }
    }

    /// Rank `rank`'s copy (panics when `rank` is not in the team).
    #[inline(always)]
    #[track_caller]
    pub fn peer(&self, rank: u32) -> PeerSliceMut<T> {
        PeerSliceMut { ptr: peer_base(&self.raw, rank), len: self.raw.len }
    }
}

/// One rank's copy of a symmetric buffer, read-only: the source of a `get`.
#[derive(Debug, Clone, Copy)]
pub struct PeerSlice<T> {
    ptr: *const T,
    len: usize,
}

/// One rank's copy of a symmetric buffer, writable: the destination of a `put`.
#[derive(Debug, Clone, Copy)]
pub struct PeerSliceMut<T> {
    ptr: *mut T,
    len: usize,
}

/// Checks `start..start + len` against `total`, naming both on failure.
#[inline(always)]
#[track_caller]
fn check_range(start: usize, len: usize, total: usize) {
    assert!(start <= total && len <= total - start, "peer slice range out of bounds");
}

/// A weak read of one element (relaxed atomics of its units in the emulator, which checks it).
///
/// # Safety
///
/// `p` addresses a live, aligned element.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
unsafe fn weak_read<T: DeviceCopy>(p: *const T) -> T {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: the caller guarantees a valid element.
        unsafe { p.read() }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let (bytes, loc) = (core::mem::size_of::<T>(), core::panic::Location::caller());
        crate::lower::check::access(p as usize, bytes, crate::lower::check::Access::Read, loc);
        let mut out = core::mem::MaybeUninit::<T>::uninit();
        // SAFETY: the caller guarantees a valid element; `out` has room for one, and every bit pattern is a
        // value (`DeviceCopy`).
        unsafe {
            copy_small(
                GlobalPtr::from_generic(out.as_mut_ptr()),
                GlobalPtr::from_generic(p),
                core::mem::size_of::<T>(),
            );
            out.assume_init()
        }
    }
}

/// A weak write of one element.
///
/// # Safety
///
/// `p` addresses a live, aligned element.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
unsafe fn weak_write<T: DeviceCopy>(p: *mut T, v: T) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: the caller guarantees a valid element.
        unsafe { p.write(v) }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let (bytes, loc) = (core::mem::size_of::<T>(), core::panic::Location::caller());
        crate::lower::check::weak_write(p as usize, bytes, loc);
        // SAFETY: the caller guarantees a valid element.
        unsafe { copy_small(GlobalPtr::from_generic(p), GlobalPtr::from_generic(&v), bytes) }
    }
}

impl<T> From<PeerSliceMut<T>> for PeerSlice<T> {
    #[inline(always)]
    fn from(v: PeerSliceMut<T>) -> PeerSlice<T> {
        PeerSlice { ptr: v.ptr, len: v.len }
    }
}

impl<T: DeviceCopy> PeerSlice<T> {
    /// Elements in the view.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's address, as this GPU addresses it.
    #[inline(always)]
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The elements `start..start + len` (panics when out of bounds).
    #[inline(always)]
    #[track_caller]
    pub fn slice(self, start: usize, len: usize) -> PeerSlice<T> {
        check_range(start, len, self.len);
        PeerSlice { ptr: self.ptr.wrapping_add(start), len }
    }

    /// A weak read of element `i` (panics when out of bounds).
    ///
    /// # Safety
    ///
    /// No thread writes element `i` concurrently unless a torn value is acceptable; order the read after
    /// the writer with a signal.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn read(&self, i: usize) -> T {
        assert!(i < self.len, "peer slice index out of bounds");
        // SAFETY: in bounds of a live copy.
        unsafe { weak_read(self.ptr.add(i)) }
    }
}

impl<T: DeviceCopy> PeerSliceMut<T> {
    /// The `len` elements at `ptr`: a peer's copy that NVSHMEM mapped (`nvshmem_ptr`).
    ///
    /// # Safety
    ///
    /// `ptr` addresses a live copy of a symmetric buffer of `len` elements.
    #[cfg_attr(not(all(target_arch = "nvptx64", ferrocomm_nvshmem)), allow(dead_code))] // the NVSHMEM flavour's
    #[inline(always)]
    pub(crate) unsafe fn from_raw_parts(ptr: *mut T, len: usize) -> PeerSliceMut<T> {
        PeerSliceMut { ptr, len }
    }

    /// Elements in the view.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's address, as this GPU addresses it.
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// The same view, read-only.
    #[inline(always)]
    pub fn as_const(self) -> PeerSlice<T> {
        PeerSlice { ptr: self.ptr, len: self.len }
    }

    /// The elements `start..start + len` (panics when out of bounds).
    #[inline(always)]
    #[track_caller]
    pub fn slice(self, start: usize, len: usize) -> PeerSliceMut<T> {
        check_range(start, len, self.len);
        PeerSliceMut { ptr: self.ptr.wrapping_add(start), len }
    }

    /// A weak read of element `i` (panics when out of bounds).
    ///
    /// # Safety
    ///
    /// As [`PeerSlice::read`].
    #[inline(always)]
    #[track_caller]
    pub unsafe fn read(&self, i: usize) -> T {
        assert!(i < self.len, "peer slice index out of bounds");
        // SAFETY: in bounds of a live copy.
        unsafe { weak_read(self.ptr.add(i)) }
    }

    /// A weak write of element `i` (panics when out of bounds); publish it with a release signal.
    ///
    /// # Safety
    ///
    /// No other thread accesses element `i` concurrently unless torn values are acceptable to it.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len, "peer slice index out of bounds");
        // SAFETY: in bounds of a live copy.
        unsafe { weak_write(self.ptr.add(i), v) }
    }
}
