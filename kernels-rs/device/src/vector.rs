//! 16-byte vector access to a byte range of global memory — a kernel argument, this rank's copy of a
//! symmetric buffer, or a peer's — with the range's end and any misalignment handled: a whole, aligned
//! vector is one `ld/st.global.v4.b32`; a partial or misaligned one uses the widest units its address
//! allows. Vectors are addressed by their index in the range, so the sender and the receiver of a message
//! agree on them by construction.
//!
//! [`Vectors`] reads; [`VectorsMut`] reads and writes. Both are views made from the typed handles
//! (`PeerSlice::vectors`, `PeerSliceMut::vectors`, [`Vectors::of`], [`VectorsMut::of`]), so every access
//! is bounds-checked and no kernel needs a raw pointer. The accesses are weak: ordering comes from the
//! signals and LL flags around them. In the emulator each access is seen by the checker (a read of a peer's
//! put before the signal that covers it is a race; a store into another rank's copy is a put), and goes
//! through the emulated weak memory.
//!
//! ```
//! use ferrocomm_device::vector::{Vectors, VectorsMut};
//! let src = [1u8, 2, 3, 4, 5];
//! let mut dst = [0u8; 5];
//! let (from, to) = (Vectors::of(&src), VectorsMut::of(&mut dst));
//! for k in 0..from.vectors() {
//!     to.store(k, from.load(k)); // one partial vector: 5 bytes
//! }
//! assert_eq!(dst, src);
//! ```

use crate::mem::{GlobalPtr, unit_for};
use crate::sym::{DeviceCopy, PeerSlice, PeerSliceMut};

/// Sixteen bytes as four little-endian words: the unit of every vector load and store.
pub type V16 = [u32; 4];

/// Bytes per vector.
pub const VECTOR_BYTES: usize = 16;

/// Vectors each thread loads before it stores them in [`VectorsMut::copy_from`].
const UNROLL: usize = 4;

/// A read-only byte range of global memory, accessed by 16-byte vectors.
#[derive(Debug, Clone, Copy)]
pub struct Vectors {
    base: GlobalPtr,
    len: usize,
}

/// A writable byte range of global memory, accessed by 16-byte vectors.
#[derive(Debug, Clone, Copy)]
pub struct VectorsMut {
    /// The bytes, as a read-only range: every length and sub-range computation is its.
    range: Vectors,
    /// Whether stores are puts the emulator's checker tracks (a symmetric buffer's copy; its checker skips
    /// the writer's own copy) rather than writes of a kernel's local output.
    #[cfg(not(target_arch = "nvptx64"))]
    tracked: bool,
}

/// The range of `len` elements of `T` at `ptr`, in the global window.
#[inline(always)]
fn range<T>(ptr: *const T, len: usize) -> (GlobalPtr, usize) {
    // SAFETY: every handle these views are made from addresses global memory: kernel arguments and
    // symmetric buffers (the handles' contracts).
    (unsafe { GlobalPtr::from_generic(ptr) }, len * core::mem::size_of::<T>())
}

impl Vectors {
    /// The vectors of a kernel argument (or any slice in global memory).
    #[inline(always)]
    pub fn of<T: DeviceCopy>(s: &[T]) -> Vectors {
        let (base, len) = range(s.as_ptr(), s.len());
        Vectors { base, len }
    }

    /// An empty range.
    #[inline(always)]
    pub fn empty() -> Vectors {
        Vectors::of::<u8>(&[])
    }

    /// The first byte's address (a put's source).
    #[inline(always)]
    pub(crate) fn base(&self) -> GlobalPtr {
        self.base
    }

    /// Bytes in the range.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The vectors the range holds (the last one may be partial).
    #[inline(always)]
    pub fn vectors(&self) -> usize {
        self.len.div_ceil(VECTOR_BYTES)
    }

    /// The bytes `start..start + len`, clipped to the range.
    #[inline(always)]
    pub fn sub(&self, start: usize, len: usize) -> Vectors {
        let start = start.min(self.len);
        Vectors { base: self.base.byte_add(start), len: len.min(self.len - start) }
    }

    /// Where vector `k` starts and how many of its bytes lie in the range (panics when `k` is not a vector
    /// of the range).
    #[inline(always)]
    #[track_caller]
    fn vector(&self, k: usize) -> (GlobalPtr, usize) {
        assert!(k < self.vectors(), "vector index out of bounds");
        let off = k * VECTOR_BYTES;
        (self.base.byte_add(off), (self.len - off).min(VECTOR_BYTES))
    }

    /// Vector `k`: bytes `16k .. 16k + 16` that lie in the range, zero beyond its end (panics when `k` is
    /// not a vector of the range).
    #[inline(always)]
    #[track_caller]
    pub fn load(&self, k: usize) -> V16 {
        let (p, bytes) = self.vector(k);
        #[cfg(not(target_arch = "nvptx64"))]
        track_read(p, bytes);
        // SAFETY: `bytes` bytes at `p` lie inside the range, live global memory (the handle's contract).
        unsafe { load_at(p, bytes) }
    }

    /// Vectors `first, first + stride, ..., first + (N - 1) * stride` — a column of a row-major matrix of
    /// vectors, say — with one bounds check for all `N` rather than one each. Every one must lie wholly in
    /// the range (panics otherwise). On a 16-byte aligned range they are `N` `ld.global.v4.b32`, issued
    /// back to back; elsewhere each is [`Vectors::load`].
    #[inline(always)]
    #[track_caller]
    pub fn load_strided<const N: usize>(&self, first: usize, stride: usize) -> [V16; N] {
        // SAFETY: `strided` passes whole, aligned vectors of the range, live global memory.
        self.strided(first, stride, |p| unsafe { p.ld_v4() })
    }

    /// [`load_strided`](Self::load_strided) for vectors read once — weights streamed through a GEMV —
    /// which pass the L1 cache without taking its lines from what the SM reuses (`GlobalPtr::ld_v4_streamed`:
    /// `ld.global.L1::no_allocate.v4.b32` on sm_90).
    #[inline(always)]
    #[track_caller]
    pub fn load_strided_streamed<const N: usize>(&self, first: usize, stride: usize) -> [V16; N] {
        // SAFETY: as in `load_strided`.
        self.strided(first, stride, |p| unsafe { p.ld_v4_streamed() })
    }

    /// The strided vectors, each whole aligned one through `load` (every one checked in bounds first).
    #[inline(always)]
    #[track_caller]
    fn strided<const N: usize>(&self, first: usize, stride: usize, load: impl Fn(GlobalPtr) -> V16) -> [V16; N] {
        let last = first + N.saturating_sub(1) * stride;
        assert!(N == 0 || (last + 1) * VECTOR_BYTES <= self.len, "strided vectors out of bounds");
        if !self.base.addr().is_multiple_of(VECTOR_BYTES) {
            return core::array::from_fn(|i| self.load(first + i * stride));
        }
        core::array::from_fn(|i| {
            let p = self.base.byte_add((first + i * stride) * VECTOR_BYTES);
            #[cfg(not(target_arch = "nvptx64"))]
            track_read(p, VECTOR_BYTES);
            load(p)
        })
    }
}

impl VectorsMut {
    /// The vectors of a kernel's local output (writes to it are not puts).
    #[inline(always)]
    pub fn of<T: DeviceCopy>(s: &mut [T]) -> VectorsMut {
        VectorsMut {
            range: Vectors::of(s),
            #[cfg(not(target_arch = "nvptx64"))]
            tracked: false,
        }
    }

    /// An empty range.
    #[inline(always)]
    pub fn empty() -> VectorsMut {
        VectorsMut::of::<u8>(&mut [])
    }

    /// The same range, read-only.
    #[inline(always)]
    pub fn as_const(&self) -> Vectors {
        self.range
    }

    /// The first byte's address (a bulk copy's destination).
    #[inline(always)]
    pub(crate) fn base(&self) -> GlobalPtr {
        self.range.base
    }

    /// Bytes in the range.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether the range is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// The vectors the range holds (the last one may be partial).
    #[inline(always)]
    pub fn vectors(&self) -> usize {
        self.range.vectors()
    }

    /// The bytes `start..start + len`, clipped to the range.
    #[inline(always)]
    pub fn sub(&self, start: usize, len: usize) -> VectorsMut {
        VectorsMut { range: self.range.sub(start, len), ..*self }
    }

    /// Vector `k`, as [`Vectors::load`].
    #[inline(always)]
    #[track_caller]
    pub fn load(&self, k: usize) -> V16 {
        self.range.load(k)
    }

    /// Stores the bytes of `v` that fall inside the range as vector `k` (panics when `k` is not a vector
    /// of the range).
    #[inline(always)]
    #[track_caller]
    pub fn store(&self, k: usize, v: V16) {
        self.store_with(k, v, GlobalPtr::st_v4);
    }

    /// [`store`](Self::store) for a vector read back soon, by a later kernel or another block: a whole,
    /// aligned one asks L2 to keep it ahead of what other accesses bring in
    /// ([`GlobalPtr::st_v4_kept`](crate::mem::GlobalPtr::st_v4_kept)); a partial or misaligned one is stored
    /// as `store` stores it.
    #[inline(always)]
    #[track_caller]
    pub fn store_kept(&self, k: usize, v: V16) {
        self.store_with(k, v, GlobalPtr::st_v4_kept);
    }

    /// [`store`](Self::store), a whole aligned vector stored by `whole` (one of `GlobalPtr`'s 16-byte stores).
    #[inline(always)]
    #[track_caller]
    fn store_with(&self, k: usize, v: V16, whole: unsafe fn(GlobalPtr, V16)) {
        let (p, bytes) = self.range.vector(k);
        #[cfg(not(target_arch = "nvptx64"))]
        self.track_write(p, bytes);
        // SAFETY: `bytes` bytes at `p` lie inside the range, live global memory (the handle's contract).
        unsafe { store_at(p, bytes, v, whole) }
    }

    /// Stores vectors `lo..hi` of `src` here, vector `k` of `src` as vector `k - first` of this range;
    /// this thread takes vectors `lo + lane`, `lo + lane + lanes`, … (`(lane, lanes)` is its position in
    /// the threads sharing the copy, e.g. [`Group::position`](crate::group::Group::position)). Whole,
    /// aligned vectors go four loads in flight before their stores; the rest (a partial last vector, a
    /// misaligned range) one at a time. Every vector is stored whole, a partial one padded with zeros as far
    /// as this range reaches. An empty `lo..hi` copies nothing; otherwise a vector outside either range
    /// panics.
    #[inline(always)]
    #[track_caller]
    pub fn copy_from(&self, src: Vectors, first: usize, (lo, hi): (usize, usize), (lane, lanes): (usize, usize)) {
        if hi <= lo {
            return;
        }
        assert!(first <= lo && hi <= src.vectors(), "copied vectors outside the source");
        assert!(hi - first <= self.vectors(), "copied vectors outside the destination");
        let dst = self.range;
        let aligned = src.base.addr().is_multiple_of(VECTOR_BYTES) && dst.base.addr().is_multiple_of(VECTOR_BYTES);
        // Vectors whole in both ranges, where both are aligned: the fast path's.
        let whole = if aligned { (src.len / VECTOR_BYTES).min(dst.len / VECTOR_BYTES + first) } else { 0 };
        let fast_end = hi.min(whole);
        let at = |k: usize| dst.base.byte_add((k - first) * VECTOR_BYTES);
        let from = |k: usize| src.base.byte_add(k * VECTOR_BYTES);
        // The copy's first thread traces its share's begin and end, as the copy's.
        let traced = crate::trace::COMPILED_IN && lane == 0;
        if traced {
            crate::trace::put_begin((hi - lo) * VECTOR_BYTES, dst.base.addr() as u64);
        }
        let mut k = lo + lane;
        while k + (UNROLL - 1) * lanes < fast_end {
            let mut v = [[0u32; 4]; UNROLL];
            for (u, v) in v.iter_mut().enumerate() {
                #[cfg(not(target_arch = "nvptx64"))]
                track_read(from(k + u * lanes), VECTOR_BYTES);
                // SAFETY: `k + u * lanes < whole`: a whole, aligned vector of the source.
                *v = unsafe { from(k + u * lanes).ld_v4() };
            }
            for (u, v) in v.iter().enumerate() {
                #[cfg(not(target_arch = "nvptx64"))]
                self.track_write(at(k + u * lanes), VECTOR_BYTES);
                // SAFETY: `k + u * lanes - first < whole - first`: a whole, aligned vector of this range.
                unsafe { at(k + u * lanes).st_v4(*v) };
            }
            k += UNROLL * lanes;
        }
        while k < hi {
            self.store(k - first, src.load(k));
            k += lanes;
        }
        if traced {
            crate::trace::put_end((hi - lo) * VECTOR_BYTES, dst.base.addr() as u64);
        }
    }

    /// The emulator's checker sees a store of `bytes` at `p`: a put when the range is a symmetric copy.
    #[cfg(not(target_arch = "nvptx64"))]
    #[track_caller]
    fn track_write(&self, p: GlobalPtr, bytes: usize) {
        if self.tracked {
            crate::lower::check::weak_write(p.addr(), bytes, core::panic::Location::caller());
        }
    }
}

/// The emulator's checker sees a weak read of `bytes` at `p`.
#[cfg(not(target_arch = "nvptx64"))]
#[track_caller]
fn track_read(p: GlobalPtr, bytes: usize) {
    crate::lower::check::access(p.addr(), bytes, crate::lower::check::Access::Read, core::panic::Location::caller());
}

impl<T: DeviceCopy> PeerSlice<T> {
    /// The view's bytes as vectors, for weak reads.
    #[inline(always)]
    pub fn vectors(self) -> Vectors {
        let (base, len) = range(self.as_ptr(), self.len());
        Vectors { base, len }
    }
}

impl<T: DeviceCopy> PeerSliceMut<T> {
    /// The view's bytes as vectors, for weak reads and writes (a write into another rank's copy is a put).
    #[inline(always)]
    pub fn vectors(self) -> VectorsMut {
        VectorsMut {
            range: self.as_const().vectors(),
            #[cfg(not(target_arch = "nvptx64"))]
            tracked: true,
        }
    }
}

/// Loads `n <= 16` bytes at `p` into the low bytes of a vector: one `ld.global.v4.b32` when they are a
/// whole, aligned vector, else the widest units the address allows.
///
/// # Safety
///
/// `n` bytes at `p` are readable global memory.
#[inline(always)]
unsafe fn load_at(p: GlobalPtr, n: usize) -> V16 {
    if n == VECTOR_BYTES && p.addr().is_multiple_of(VECTOR_BYTES) {
        // SAFETY: 16 readable bytes, 16-byte aligned (the caller).
        return unsafe { p.ld_v4() };
    }
    // SAFETY: the caller's contract.
    let v = unsafe { load_partial(p, n) };
    [v as u32, (v >> 32) as u32, (v >> 64) as u32, (v >> 96) as u32]
}

/// Stores the low `n <= 16` bytes of `v` at `p`, as [`load_at`] loads them: a whole, aligned vector by
/// `whole` (one of `GlobalPtr`'s 16-byte stores).
///
/// # Safety
///
/// `n` bytes at `p` are writable global memory, and `whole` stores 16 bytes at a 16-byte aligned address.
#[inline(always)]
unsafe fn store_at(p: GlobalPtr, n: usize, v: V16, whole: unsafe fn(GlobalPtr, V16)) {
    if n == VECTOR_BYTES && p.addr().is_multiple_of(VECTOR_BYTES) {
        // SAFETY: 16 writable bytes, 16-byte aligned (the caller).
        return unsafe { whole(p, v) };
    }
    if n == 8 && p.addr().is_multiple_of(8) {
        // SAFETY: 8 writable bytes, 8-byte aligned (the caller): what `store_partial` would store, inline
        // (an 8-byte message, the latency size, stores without a call).
        return unsafe { p.st_b64(u64::from(v[0]) | u64::from(v[1]) << 32) };
    }
    let all = v.iter().rev().fold(0u128, |acc, &w| acc << 32 | u128::from(w));
    // SAFETY: the caller's contract.
    unsafe { store_partial(p, n, all) }
}

/// Loads `n <= 16` bytes (a partial or misaligned vector) gathered in a `u128`, so nothing goes through
/// local memory; out of line, off the fast path.
///
/// # Safety
///
/// `n` bytes at `p` are readable global memory.
#[inline(never)]
unsafe fn load_partial(p: GlobalPtr, n: usize) -> u128 {
    let mut acc = 0u128;
    let mut i = 0;
    while i < n {
        let a = p.byte_add(i);
        let u = unit_for(a.addr(), n - i);
        // SAFETY: `i + u <= n` bytes are readable and `a` is aligned to `u`.
        let word = unsafe {
            match u {
                8 => a.ld_b64(),
                4 => u64::from(a.ld_b32()),
                2 => u64::from(a.ld_b16()),
                _ => u64::from(a.ld_b8()),
            }
        };
        acc |= u128::from(word) << (8 * i);
        i += u;
    }
    acc
}

/// Stores the low `n <= 16` bytes of `all`; out of line, off the fast path.
///
/// # Safety
///
/// `n` bytes at `p` are writable global memory.
#[inline(never)]
unsafe fn store_partial(p: GlobalPtr, n: usize, all: u128) {
    let mut i = 0;
    while i < n {
        let a = p.byte_add(i);
        let u = unit_for(a.addr(), n - i);
        let word = (all >> (8 * i)) as u64;
        // SAFETY: `i + u <= n` bytes are writable and `a` is aligned to `u`.
        unsafe {
            match u {
                8 => a.st_b64(word),
                4 => a.st_b32(word as u32),
                2 => a.st_b16(word as u16),
                _ => a.st_b8(word as u8),
            }
        }
        i += u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_move_every_byte_at_any_alignment() {
        let src: Vec<u8> = (1..=80).collect();
        type Store = fn(&VectorsMut, usize, V16);
        let stores: [(&str, Store); 2] =
            [("store", |to, k, v| to.store(k, v)), ("store_kept", |to, k, v| to.store_kept(k, v))];
        for (name, store) in stores {
            for start in 0..17 {
                for len in 0..48 {
                    let mut dst = [0u8; 80];
                    let from = Vectors::of(&src[start..start + len]);
                    let to = VectorsMut::of(&mut dst[start..start + len]);
                    for k in 0..from.vectors() {
                        store(&to, k, from.load(k));
                    }
                    assert_eq!(&dst[start..start + len], &src[start..start + len], "{name}: start {start} len {len}");
                    assert!(dst[..start].iter().chain(&dst[start + len..]).all(|&b| b == 0), "{name}");
                }
            }
        }
    }

    #[test]
    fn copies_take_every_vector_once_whatever_the_split() {
        let src: Vec<u8> = (0..=255).cycle().take(300).collect();
        for offset in [0usize, 1, 8] {
            for lanes in [1usize, 3, 32] {
                let from = Vectors::of(&src[offset..]);
                let mut dst = vec![0u8; src.len()];
                let to = VectorsMut::of(&mut dst[offset..]);
                for lane in 0..lanes {
                    to.copy_from(from, 0, (0, from.vectors()), (lane, lanes));
                }
                assert_eq!(&dst[offset..], &src[offset..], "offset {offset} lanes {lanes}");
            }
        }
    }

    #[test]
    fn partial_vectors_read_zero_beyond_the_end() {
        let src = [0xffu8; 32];
        assert_eq!(Vectors::of(&src[..5]).load(0), [0xffff_ffff, 0xff, 0, 0]);
        assert_eq!(Vectors::empty().vectors(), 0);
    }

    #[test]
    fn strided_vectors_are_a_column_and_stay_inside_the_range() {
        // A 4 x 3 matrix of vectors; vector (r, c) holds words 12r + 4c ..
        let words: Vec<u32> = (0..48).collect();
        let m = Vectors::of(&words);
        let column: [V16; 4] = m.load_strided(1, 3);
        for (r, v) in column.iter().enumerate() {
            assert_eq!(*v, m.load(3 * r + 1), "row {r}");
        }
        assert_eq!(m.load_strided::<0>(99, 5), [] as [V16; 0]);
        // The same column through a range that is not 16-byte aligned (the vector-by-vector path).
        let shifted = Vectors::of(&words[1..]);
        let column: [V16; 4] = shifted.load_strided(0, 3);
        assert_eq!(column[3], [37, 38, 39, 40]);
    }

    #[test]
    #[should_panic(expected = "strided vectors out of bounds")]
    fn strided_vectors_past_the_end_panic() {
        let words = [0u32; 48];
        let _: [V16; 5] = Vectors::of(&words).load_strided(1, 3);
    }

    #[test]
    #[should_panic(expected = "vector index out of bounds")]
    fn a_vector_past_the_end_panics() {
        Vectors::of(&[0u8; 16]).load(1);
    }
}
