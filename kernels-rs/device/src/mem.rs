//! Weak (non-atomic, unordered) loads and stores of global memory, the bodies of data movement: 16-byte
//! vectors (`ld/st.global.v4.b32`), 8/4/2/1-byte units for heads and tails, and the volatile 16-byte
//! accesses of LL packets. Ordering comes from signals and fences, never from these.
//!
//! A [`GlobalPtr`] is an address already converted to the global window (`cvta.to.global.u64`), done once
//! per copy rather than per access. In the emulator the accesses are relaxed atomics of the same width
//! (a 16-byte vector is two 8-byte ones), so racing a weak copy is never undefined behaviour on the host;
//! stores into a put's destination and LL packet stores wait in the emulated thread's store buffer and
//! become visible late and out of order, and loads read the thread's own buffered stores (see
//! `emu::weak`).

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;
#[cfg(not(target_arch = "nvptx64"))]
use core::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering::Relaxed};

/// An address in the global state space: device memory of this GPU or peer memory mapped into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalPtr(*mut u8);

/// One weak load: a literal `asm!` on the GPU, on the host the thread's own buffered store of those bytes
/// if it holds one, else a relaxed atomic load of the same width.
macro_rules! weak_load {
    ($(#[$doc:meta])* $name:ident, $int:ty, $reg:ident, $asm:literal, $atomic:ty) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// The address is valid for reading and aligned to the access size.
        #[inline(always)]
        pub unsafe fn $name(self) -> $int {
            #[cfg(target_arch = "nvptx64")]
            {
                let v: $int;
                // SAFETY: the caller guarantees a valid, aligned global address.
                unsafe { asm!($asm, v = out($reg) v, p = in(reg64) self.0, options(nostack, readonly)) };
                v
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                match crate::lower::weak_load(self.0 as usize, core::mem::size_of::<$int>()) {
                    Some(v) => v as $int,
                    // SAFETY: the caller guarantees a valid, aligned address.
                    None => unsafe { <$atomic>::from_ptr(self.0.cast()) }.load(Relaxed),
                }
            }
        }
    };
}

/// One weak store: a literal `asm!` on the GPU; on the host into the thread's store buffer when it is inside
/// the destination the library announced, else a relaxed atomic store of the same width.
macro_rules! weak_store {
    ($(#[$doc:meta])* $name:ident, $int:ty, $reg:ident, $asm:literal, $atomic:ty) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// The address is valid for writing and aligned to the access size.
        #[inline(always)]
        pub unsafe fn $name(self, v: $int) {
            #[cfg(target_arch = "nvptx64")]
            {
                // SAFETY: the caller guarantees a valid, aligned global address.
                unsafe { asm!($asm, p = in(reg64) self.0, v = in($reg) v, options(nostack)) };
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                if !crate::lower::weak_store(self.0 as usize, core::mem::size_of::<$int>(), u64::from(v)) {
                    // SAFETY: the caller guarantees a valid, aligned address.
                    unsafe { <$atomic>::from_ptr(self.0.cast()) }.store(v, Relaxed)
                }
            }
        }
    };
}

impl GlobalPtr {
    /// Converts a generic address of global memory (`cvta.to.global.u64`).
    ///
    /// # Safety
    ///
    /// `p` addresses global memory (device memory of this GPU or mapped peer memory), not shared or local
    /// memory.
    #[inline(always)]
    pub unsafe fn from_generic<T>(p: *const T) -> GlobalPtr {
        #[cfg(target_arch = "nvptx64")]
        {
            let g: *mut u8;
            // SAFETY: an address conversion; no memory is touched.
            unsafe {
                asm!("cvta.to.global.u64 {g}, {p};", g = out(reg64) g, p = in(reg64) p, options(pure, nomem, nostack))
            };
            GlobalPtr(g)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            GlobalPtr(p as *mut u8)
        }
    }

    /// The address as an integer (for alignment arithmetic).
    #[inline(always)]
    pub fn addr(self) -> usize {
        self.0 as usize
    }

    /// The address `bytes` further.
    #[inline(always)]
    pub fn byte_add(self, bytes: usize) -> GlobalPtr {
        GlobalPtr(self.0.wrapping_add(bytes))
    }

    /// `ld.global.v4.b32`: 16 bytes as four words, little-endian order.
    ///
    /// # Safety
    ///
    /// The address is valid for reading 16 bytes and 16-byte aligned.
    #[inline(always)]
    pub unsafe fn ld_v4(self) -> [u32; 4] {
        #[cfg(target_arch = "nvptx64")]
        {
            let (a, b, c, d): (u32, u32, u32, u32);
            // SAFETY: the caller guarantees a valid, aligned global address.
            unsafe {
                asm!("ld.global.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
                    c = out(reg32) c, d = out(reg32) d, p = in(reg64) self.0, options(nostack, readonly))
            };
            [a, b, c, d]
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            // SAFETY: the caller guarantees a valid, 16-byte aligned address.
            let (lo, hi) = unsafe { (self.ld_b64(), self.byte_add(8).ld_b64()) };
            [lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32]
        }
    }

    /// [`ld_v4`](Self::ld_v4) for data read once, streamed past the L1 cache:
    /// `ld.global.L1::no_allocate.v4.b32` in PTX ISA 8.0 builds (this crate's sm_90 ones; the hint needs
    /// 7.4, and its sm_80 builds are 7.0), else `ld.global.v4.b32`. Lines it brings in do not evict what the
    /// SM reuses from L1.
    ///
    /// # Safety
    ///
    /// The address is valid for reading 16 bytes and 16-byte aligned.
    #[inline(always)]
    pub unsafe fn ld_v4_streamed(self) -> [u32; 4] {
        #[cfg(all(target_arch = "nvptx64", target_feature = "ptx80"))]
        {
            let (a, b, c, d): (u32, u32, u32, u32);
            // SAFETY: the caller guarantees a valid, aligned global address.
            unsafe {
                asm!("ld.global.L1::no_allocate.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a,
                    b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) self.0,
                    options(nostack, readonly))
            };
            [a, b, c, d]
        }
        #[cfg(not(all(target_arch = "nvptx64", target_feature = "ptx80")))]
        // SAFETY: the caller's guarantee is `ld_v4`'s.
        unsafe {
            self.ld_v4()
        }
    }

    /// [`st_v4`](Self::st_v4) for data read back soon, by this kernel's successor or by another block:
    /// kept in L2 ahead of what other accesses bring in, with an `L2::evict_last` cache policy
    /// (`createpolicy.fractional.L2::evict_last.b64 pol, 1.0; st.global.L2::cache_hint.v4.b32 [p], {..}, pol;`)
    /// in PTX ISA 8.0 builds (this crate's sm_90 ones; the hint needs 7.4, and its sm_80 builds are 7.0),
    /// else `st.global.v4.b32`. A GEMV's partial sums are the case: written while the weights stream through
    /// L2, they were evicted to HBM before the next kernel read them, and the write-backs took from the
    /// weights' bandwidth.
    ///
    /// # Safety
    ///
    /// The address is valid for writing 16 bytes and 16-byte aligned.
    #[inline(always)]
    pub unsafe fn st_v4_kept(self, v: [u32; 4]) {
        #[cfg(all(target_arch = "nvptx64", target_feature = "ptx80"))]
        // SAFETY: the caller guarantees a valid, aligned global address.
        unsafe {
            asm!("{{ .reg .b64 pol; createpolicy.fractional.L2::evict_last.b64 pol, 1.0; \
                st.global.L2::cache_hint.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}}, pol; }}", p = in(reg64) self.0,
                a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
        };
        #[cfg(not(all(target_arch = "nvptx64", target_feature = "ptx80")))]
        // SAFETY: the caller's guarantee is `st_v4`'s.
        unsafe {
            self.st_v4(v)
        }
    }

    /// `st.global.v4.b32`: stores four words (16 bytes).
    ///
    /// # Safety
    ///
    /// The address is valid for writing 16 bytes and 16-byte aligned.
    #[inline(always)]
    pub unsafe fn st_v4(self, v: [u32; 4]) {
        #[cfg(target_arch = "nvptx64")]
        {
            // SAFETY: the caller guarantees a valid, aligned global address.
            unsafe {
                asm!("st.global.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg64) self.0, a = in(reg32) v[0],
                    b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
            };
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            // SAFETY: the caller guarantees a valid, 16-byte aligned address.
            unsafe {
                self.st_b64(u64::from(v[0]) | u64::from(v[1]) << 32);
                self.byte_add(8).st_b64(u64::from(v[2]) | u64::from(v[3]) << 32);
            }
        }
    }

    /// `ld.volatile.global.v4.b32`: the LL packet read; never merged with or moved across other volatile
    /// accesses, and each 8-byte half is read whole (what the LL protocol relies on, as NCCL's does).
    ///
    /// # Safety
    ///
    /// The address is valid for reading 16 bytes and 16-byte aligned.
    #[inline(always)]
    pub unsafe fn ld_volatile_v4(self) -> [u32; 4] {
        #[cfg(target_arch = "nvptx64")]
        {
            let (a, b, c, d): (u32, u32, u32, u32);
            // SAFETY: the caller guarantees a valid, aligned global address.
            unsafe {
                asm!("ld.volatile.global.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a,
                    b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg64) self.0, options(nostack))
            };
            [a, b, c, d]
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            // SAFETY: as for `ld_v4`.
            unsafe { self.ld_v4() }
        }
    }

    /// `st.volatile.global.v4.b32`: the LL packet write, one 16-byte store.
    ///
    /// # Safety
    ///
    /// The address is valid for writing 16 bytes and 16-byte aligned.
    #[inline(always)]
    pub unsafe fn st_volatile_v4(self, v: [u32; 4]) {
        #[cfg(target_arch = "nvptx64")]
        {
            // SAFETY: the caller guarantees a valid, aligned global address.
            unsafe {
                asm!("st.volatile.global.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg64) self.0,
                    a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
            };
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            // Each 8-byte half (data word and flag word) is one relaxed store, buffered as one.
            let halves = [u64::from(v[0]) | u64::from(v[1]) << 32, u64::from(v[2]) | u64::from(v[3]) << 32];
            for (k, half) in halves.into_iter().enumerate() {
                let p = self.byte_add(8 * k);
                if !crate::lower::packet_store(p.addr(), half) {
                    // SAFETY: the caller guarantees a valid, 16-byte aligned address.
                    unsafe { AtomicU64::from_ptr(p.0.cast()) }.store(half, Relaxed)
                }
            }
        }
    }

    weak_load!(/** `ld.global.b64` */ ld_b64, u64, reg64, "ld.global.b64 {v}, [{p}];", AtomicU64);
    weak_load!(/** `ld.global.b32` */ ld_b32, u32, reg32, "ld.global.b32 {v}, [{p}];", AtomicU32);
    weak_load!(/** `ld.global.b16` */ ld_b16, u16, reg16, "ld.global.b16 {v}, [{p}];", AtomicU16);
    weak_load!(/** `ld.global.u8` */ ld_b8, u8, reg16, "ld.global.u8 {v}, [{p}];", AtomicU8);
    weak_store!(/** `st.global.b64` */ st_b64, u64, reg64, "st.global.b64 [{p}], {v};", AtomicU64);
    weak_store!(/** `st.global.b32` */ st_b32, u32, reg32, "st.global.b32 [{p}], {v};", AtomicU32);
    weak_store!(/** `st.global.b16` */ st_b16, u16, reg16, "st.global.b16 [{p}], {v};", AtomicU16);
    weak_store!(/** `st.global.u8` */ st_b8, u8, reg16, "st.global.u8 [{p}], {v};", AtomicU8);
}

/// The widest unit (8, 4, 2 or 1 bytes) that `addr` is aligned to and that fits in `remaining`.
#[inline(always)]
pub(crate) fn unit_for(addr: usize, remaining: usize) -> usize {
    let mut unit = 8;
    while unit > 1 && (!addr.is_multiple_of(unit) || remaining < unit) {
        unit /= 2;
    }
    unit
}

/// Copies `n` bytes one unit at a time, each unit the widest both addresses allow: heads and tails, and
/// single elements.
///
/// # Safety
///
/// Both ranges are valid for `n` bytes and do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_small(dst: GlobalPtr, src: GlobalPtr, n: usize) {
    let mut off = 0;
    while off < n {
        let (d, s) = (dst.byte_add(off), src.byte_add(off));
        let unit = unit_for(d.addr() | s.addr(), n - off);
        // SAFETY: `off + unit <= n`, and both addresses are aligned to `unit`.
        unsafe {
            match unit {
                8 => d.st_b64(s.ld_b64()),
                4 => d.st_b32(s.ld_b32()),
                2 => d.st_b16(s.ld_b16()),
                _ => d.st_b8(s.ld_b8()),
            }
        }
        off += unit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_follow_alignment_and_length() {
        assert_eq!(unit_for(0, 100), 8);
        assert_eq!(unit_for(4, 100), 4);
        assert_eq!(unit_for(6, 100), 2);
        assert_eq!(unit_for(7, 100), 1);
        assert_eq!(unit_for(8, 7), 4);
        assert_eq!(unit_for(8, 1), 1);
    }

    #[test]
    fn small_copies_move_every_byte() {
        let src: Vec<u8> = (0..64).collect();
        for start in 0..16 {
            for n in 0..40 {
                let mut dst = vec![0xffu8; 64];
                // SAFETY: both vectors hold `start + n` bytes.
                unsafe {
                    copy_small(
                        GlobalPtr::from_generic(dst.as_mut_ptr().add(start)),
                        GlobalPtr::from_generic(src.as_ptr().add(start)),
                        n,
                    )
                };
                assert_eq!(&dst[start..start + n], &src[start..start + n]);
                assert!(dst[..start].iter().chain(&dst[start + n..]).all(|&b| b == 0xff));
            }
        }
    }
}
