//! 16-byte vector access to a byte region of global memory (this GPU's or a peer's), with the region's end
//! and any misalignment handled: a full, aligned vector is one `ld/st.global.v4.b32`; a partial or
//! misaligned one is done with the widest units its address allows. Vectors are addressed by their byte
//! offset in the region, so sender and receiver of a message agree on them by construction.
//!
//! The accesses are weak: ordering comes from the signals and LL flags of the kernels that call them.

use ferrocomm_device::mem::GlobalPtr;

use crate::element::V16;
use crate::layout::VECTOR_BYTES;

/// A byte region of global memory: `len` bytes at `base`.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    base: GlobalPtr,
    len: usize,
}

impl Region {
    /// The region of `len` elements of `T` at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` addresses `len` elements of global memory (device or peer-mapped) that stay valid while the
    /// region is used, and accesses through it follow the kernel's protocol (no unordered conflicting
    /// access by another thread).
    #[inline(always)]
    pub unsafe fn new<T>(ptr: *const T, len: usize) -> Region {
        // SAFETY: the caller guarantees global memory.
        Region { base: unsafe { GlobalPtr::from_generic(ptr) }, len: len * core::mem::size_of::<T>() }
    }

    /// An empty region.
    #[inline(always)]
    pub fn empty() -> Region {
        // SAFETY: no byte of an empty region is ever accessed.
        Region { base: unsafe { GlobalPtr::from_generic(core::ptr::null::<u8>()) }, len: 0 }
    }

    /// Bytes in the region.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The 16-byte vectors the region holds (the last one may be partial).
    #[inline(always)]
    pub fn vectors(&self) -> usize {
        self.len.div_ceil(VECTOR_BYTES)
    }

    /// The sub-region `start..start + len` (bytes; clipped to the region).
    #[inline(always)]
    pub fn sub(&self, start: usize, len: usize) -> Region {
        let start = start.min(self.len);
        Region { base: self.base.byte_add(start), len: len.min(self.len - start) }
    }

    /// Vector `k`: bytes `16k .. 16k + 16` that lie in the region, zero beyond its end.
    ///
    /// # Safety
    ///
    /// The region's contract ([`Region::new`]); `16 * k < len`.
    #[inline(always)]
    pub unsafe fn load(&self, k: usize) -> V16 {
        let off = k * VECTOR_BYTES;
        let p = self.base.byte_add(off);
        if off + VECTOR_BYTES <= self.len && p.addr().is_multiple_of(VECTOR_BYTES) {
            // SAFETY: 16 bytes inside the region, 16-byte aligned.
            return unsafe { p.ld_v4() };
        }
        // SAFETY: the bytes read lie inside the region.
        let v = unsafe { load_partial(p, (self.len - off).min(VECTOR_BYTES)) };
        [v as u32, (v >> 32) as u32, (v >> 64) as u32, (v >> 96) as u32]
    }

    /// Stores vector `k`: the bytes of `v` that fall inside the region.
    ///
    /// # Safety
    ///
    /// The region's contract ([`Region::new`]); `16 * k < len`.
    #[inline(always)]
    pub unsafe fn store(&self, k: usize, v: V16) {
        let off = k * VECTOR_BYTES;
        let p = self.base.byte_add(off);
        if off + VECTOR_BYTES <= self.len && p.addr().is_multiple_of(VECTOR_BYTES) {
            // SAFETY: 16 bytes inside the region, 16-byte aligned.
            return unsafe { p.st_v4(v) };
        }
        let all = v.iter().rev().fold(0u128, |acc, &w| acc << 32 | u128::from(w));
        // SAFETY: the bytes written lie inside the region.
        unsafe { store_partial(p, (self.len - off).min(VECTOR_BYTES), all) }
    }
}

/// Vectors each thread loads before it stores them in [`store_vectors`].
const UNROLL: usize = 4;

/// Stores vectors `lo..hi` of `src` to `dst`, where `dst` is the place of vector `first` and vector `k`
/// goes `16 * (k - first)` bytes after it. Thread `t` of `threads` takes every `threads`-th vector; whole,
/// aligned vectors go four loads in flight before their stores, the rest (a partial last vector, a
/// misaligned region) one at a time. Every vector is stored whole (a partial one padded with zeros).
///
/// # Safety
///
/// `first <= lo`, `hi <= src.vectors()`, and `dst` addresses `hi - first` vectors of global memory that
/// only this call's threads write meanwhile.
#[inline(always)]
pub unsafe fn store_vectors(dst: GlobalPtr, first: usize, src: Region, lo: usize, hi: usize, t: usize, threads: usize) {
    let at = |k: usize| dst.byte_add((k - first) * VECTOR_BYTES);
    let whole = if src.base.addr().is_multiple_of(VECTOR_BYTES) { src.len / VECTOR_BYTES } else { 0 };
    let fast_end = hi.min(whole);
    let mut k = lo + t;
    while k + (UNROLL - 1) * threads < fast_end {
        let mut v = [[0u32; 4]; UNROLL];
        for (u, v) in v.iter_mut().enumerate() {
            // SAFETY: `k + u * threads < whole`: a whole, aligned vector of the region.
            *v = unsafe { src.base.byte_add((k + u * threads) * VECTOR_BYTES).ld_v4() };
        }
        for (u, v) in v.iter().enumerate() {
            // SAFETY: the destination vector is inside `dst` (the caller).
            unsafe { at(k + u * threads).st_v4(*v) };
        }
        k += UNROLL * threads;
    }
    while k < hi {
        // SAFETY: `k < hi <= src.vectors()`; the destination vector is inside `dst`.
        unsafe { at(k).st_v4(src.load(k)) };
        k += threads;
    }
}

/// The widest unit (8, 4, 2, 1 bytes) `addr` is aligned to that fits in `remaining`.
#[inline(always)]
fn unit(addr: usize, remaining: usize) -> usize {
    let mut u = 8;
    while u > 1 && (!addr.is_multiple_of(u) || remaining < u) {
        u /= 2;
    }
    u
}

/// Loads `n < 16` bytes (or 16 misaligned ones) into the low bytes of a vector, gathered and returned in a
/// `u128` so nothing goes through local memory.
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
        let u = unit(a.addr(), n - i);
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

/// Stores the low `n` bytes of `all` (`n < 16`, or 16 misaligned).
///
/// # Safety
///
/// `n` bytes at `p` are writable global memory.
#[inline(never)]
unsafe fn store_partial(p: GlobalPtr, n: usize, all: u128) {
    let mut i = 0;
    while i < n {
        let a = p.byte_add(i);
        let u = unit(a.addr(), n - i);
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
        for start in 0..17 {
            for len in 0..48 {
                let mut dst = vec![0u8; 80];
                // SAFETY: both vectors hold `start + len <= 80` bytes; one thread.
                let (from, to) = unsafe {
                    (Region::new(src.as_ptr().add(start), len), Region::new(dst.as_mut_ptr().add(start), len))
                };
                for k in 0..from.vectors() {
                    // SAFETY: `16k < len`.
                    unsafe { to.store(k, from.load(k)) };
                }
                assert_eq!(&dst[start..start + len], &src[start..start + len], "start {start} len {len}");
                assert!(dst[..start].iter().chain(&dst[start + len..]).all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn partial_vectors_read_zero_beyond_the_end() {
        let src = [0xffu8; 32];
        // SAFETY: 5 readable bytes.
        let v = unsafe { Region::new(src.as_ptr(), 5).load(0) };
        assert_eq!(v, [0xffff_ffff, 0xff, 0, 0]);
    }
}
