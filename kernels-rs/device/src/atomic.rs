//! Scoped atomics. The scope is in the type — [`GpuAtomicU32`]/[`GpuAtomicU64`] synchronise threads of one
//! GPU (`.gpu`), [`SysAtomicU32`]/[`SysAtomicU64`] threads of every GPU and the host (`.sys`, what peers
//! over NVLink need) — and the ordering is in the method name (`_relaxed`, `_acquire`, `_release`,
//! `_acq_rel`). Each method is one PTX instruction; in the emulator, the `std::sync::atomic` operation of
//! the same ordering, which the emulator's checker follows (what a release publishes, an acquire learns).
//!
//! ```
//! # use ferrocomm_device::atomic::SysAtomicU64;
//! let mut flag = 0u64;
//! // SAFETY: `flag` outlives the reference and is only accessed atomically meanwhile.
//! let a = unsafe { SysAtomicU64::from_ptr(&mut flag) };
//! # #[cfg(not(target_arch = "nvptx64"))]
//! assert_eq!(a.fetch_add_release(2), 0);
//! ```

use core::cell::UnsafeCell;

/// One method: an `asm!` with the literal PTX on the GPU, the std atomic at the given ordering on the host.
macro_rules! load {
    ($(#[$doc:meta])* $name:ident, $int:ty, $reg:ident, $asm:literal, $ord:ident) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(&self) -> $int {
            #[cfg(target_arch = "nvptx64")]
            {
                let v: $int;
                // SAFETY: `self` addresses a live, aligned value (the contract of `from_ptr`).
                unsafe { core::arch::asm!($asm, v = out($reg) v, p = in(reg64) self.0.get(), options(nostack)) };
                v
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                use core::sync::atomic::Ordering;
                let op = crate::lower::check::AtomicOp::Load(Ordering::$ord);
                crate::lower::check::atomic(self.0.get() as usize, op, Self::SCOPE, || self.host().load(Ordering::$ord))
            }
        }
    };
}

macro_rules! store {
    ($(#[$doc:meta])* $name:ident, $int:ty, $reg:ident, $asm:literal, $ord:ident) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(&self, v: $int) {
            #[cfg(target_arch = "nvptx64")]
            {
                // SAFETY: `self` addresses a live, aligned value (the contract of `from_ptr`).
                unsafe { core::arch::asm!($asm, p = in(reg64) self.0.get(), v = in($reg) v, options(nostack)) };
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                use core::sync::atomic::Ordering;
                // A relaxed store may wait in the thread's store buffer (`emu::weak`).
                let (addr, width) = (self.0.get() as usize, core::mem::size_of::<$int>());
                crate::lower::check::atomic_store(addr, width, u64::from(v), Ordering::$ord, Self::SCOPE, || {
                    self.host().store(v, Ordering::$ord)
                });
            }
        }
    };
}

macro_rules! rmw {
    ($(#[$doc:meta])* $name:ident, $int:ty, $reg:ident, $asm:literal, $host:ident, $ord:ident) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(&self, v: $int) -> $int {
            #[cfg(target_arch = "nvptx64")]
            {
                let old: $int;
                // SAFETY: `self` addresses a live, aligned value (the contract of `from_ptr`).
                unsafe {
                    core::arch::asm!($asm, old = out($reg) old, p = in(reg64) self.0.get(), v = in($reg) v,
                        options(nostack))
                };
                old
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                use core::sync::atomic::Ordering;
                let op = crate::lower::check::AtomicOp::Rmw(Ordering::$ord);
                crate::lower::check::atomic(self.0.get() as usize, op, Self::SCOPE, || self.host().$host(v, Ordering::$ord))
            }
        }
    };
}

/// A `red` (reduction without a result, a posted atomic) on a value in global memory.
macro_rules! red {
    ($(#[$doc:meta])* $name:ident, $asm:literal, $ord:ident) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(&self, v: u64) {
            #[cfg(target_arch = "nvptx64")]
            {
                // SAFETY: `self` addresses a live, aligned value in global memory (the contract of `from_ptr`
                // and of this method).
                unsafe {
                    core::arch::asm!(
                        concat!("cvta.to.global.u64 {g}, {g};\n\t", $asm),
                        g = inout(reg64) self.0.get() => _, v = in(reg64) v, options(nostack)
                    )
                };
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                use core::sync::atomic::Ordering;
                let op = crate::lower::check::AtomicOp::Rmw(Ordering::$ord);
                let scope = Self::SCOPE;
                crate::lower::check::atomic(self.0.get() as usize, op, scope, || self.host().fetch_add(v, Ordering::$ord));
            }
        }
    };
}

macro_rules! cas {
    ($(#[$doc:meta])* $name:ident, $int:ty, $reg:ident, $asm:literal, $ord:ident, $fail:ident) => {
        $(#[$doc])*
        /// Returns the value found; the swap happened when it equals `current`.
        #[inline(always)]
        pub fn $name(&self, current: $int, new: $int) -> $int {
            #[cfg(target_arch = "nvptx64")]
            {
                let old: $int;
                // SAFETY: `self` addresses a live, aligned value (the contract of `from_ptr`).
                unsafe {
                    core::arch::asm!($asm, old = out($reg) old, p = in(reg64) self.0.get(), c = in($reg) current,
                        n = in($reg) new, options(nostack))
                };
                old
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                use core::sync::atomic::Ordering;
                let op = crate::lower::check::AtomicOp::Cas {
                    success: Ordering::$ord,
                    failure: Ordering::$fail,
                    current: u64::from(current),
                };
                crate::lower::check::atomic(self.0.get() as usize, op, Self::SCOPE, || {
                    match self.host().compare_exchange(current, new, Ordering::$ord, Ordering::$fail) {
                        Ok(v) | Err(v) => v,
                    }
                })
            }
        }
    };
}

/// The type's constructor and host view (and, on the host, its scope for the emulator's checker).
macro_rules! atomic_common {
    ($name:ident, $int:ty, $std:ty) => {
        #[cfg(not(target_arch = "nvptx64"))]
        impl $name {
            /// The scope of the type's operations, from its name.
            const SCOPE: crate::lower::check::Scope = if stringify!($name).as_bytes()[0] == b'G' {
                crate::lower::check::Scope::Gpu
            } else {
                crate::lower::check::Scope::Sys
            };
        }

        impl $name {
            /// Views `p` as an atomic of this scope.
            ///
            /// # Safety
            ///
            /// `p` is aligned, addresses memory that stays valid for `'a` (device, peer-mapped or host-mapped
            /// memory on the GPU), and is accessed only atomically while the reference lives.
            #[inline(always)]
            pub unsafe fn from_ptr<'a>(p: *mut $int) -> &'a $name {
                // SAFETY: the type is a transparent wrapper of an `UnsafeCell<$int>`; the caller guarantees
                // validity and alignment.
                unsafe { &*(p as *const $name) }
            }

            /// The address of the value.
            #[inline(always)]
            pub fn as_ptr(&self) -> *mut $int {
                self.0.get()
            }

            #[cfg(not(target_arch = "nvptx64"))]
            #[inline(always)]
            fn host(&self) -> &$std {
                // SAFETY: same size and alignment; `from_ptr`'s contract makes every access atomic.
                unsafe { <$std>::from_ptr(self.0.get()) }
            }
        }

        // SAFETY: all access goes through atomic instructions.
        unsafe impl Sync for $name {}
    };
}

/// A `u32` that threads of one GPU access atomically (`.gpu` scope).
#[repr(transparent)]
#[derive(Debug)]
pub struct GpuAtomicU32(UnsafeCell<u32>);
atomic_common!(GpuAtomicU32, u32, core::sync::atomic::AtomicU32);

/// A `u64` that threads of one GPU access atomically (`.gpu` scope).
#[repr(transparent)]
#[derive(Debug)]
pub struct GpuAtomicU64(UnsafeCell<u64>);
atomic_common!(GpuAtomicU64, u64, core::sync::atomic::AtomicU64);

/// A `u32` that threads of every GPU and the host access atomically (`.sys` scope).
#[repr(transparent)]
#[derive(Debug)]
pub struct SysAtomicU32(UnsafeCell<u32>);
atomic_common!(SysAtomicU32, u32, core::sync::atomic::AtomicU32);

/// A `u64` that threads of every GPU and the host access atomically (`.sys` scope).
#[repr(transparent)]
#[derive(Debug)]
pub struct SysAtomicU64(UnsafeCell<u64>);
atomic_common!(SysAtomicU64, u64, core::sync::atomic::AtomicU64);

impl GpuAtomicU32 {
    load!(/** `ld.relaxed.gpu.u32` */ load_relaxed, u32, reg32, "ld.relaxed.gpu.u32 {v}, [{p}];", Relaxed);
    load!(/** `ld.acquire.gpu.u32` */ load_acquire, u32, reg32, "ld.acquire.gpu.u32 {v}, [{p}];", Acquire);
    store!(/** `st.relaxed.gpu.u32` */ store_relaxed, u32, reg32, "st.relaxed.gpu.u32 [{p}], {v};", Relaxed);
    store!(/** `st.release.gpu.u32` */ store_release, u32, reg32, "st.release.gpu.u32 [{p}], {v};", Release);
    rmw!(/** `atom.relaxed.gpu.add.u32`: returns the old value */ fetch_add_relaxed, u32, reg32,
        "atom.relaxed.gpu.add.u32 {old}, [{p}], {v};", fetch_add, Relaxed);
    rmw!(/** `atom.acquire.gpu.add.u32`: returns the old value */ fetch_add_acquire, u32, reg32,
        "atom.acquire.gpu.add.u32 {old}, [{p}], {v};", fetch_add, Acquire);
    rmw!(/** `atom.release.gpu.add.u32`: returns the old value */ fetch_add_release, u32, reg32,
        "atom.release.gpu.add.u32 {old}, [{p}], {v};", fetch_add, Release);
    rmw!(/** `atom.acq_rel.gpu.add.u32`: returns the old value */ fetch_add_acq_rel, u32, reg32,
        "atom.acq_rel.gpu.add.u32 {old}, [{p}], {v};", fetch_add, AcqRel);
    rmw!(/** `atom.relaxed.gpu.exch.b32`: returns the old value */ swap_relaxed, u32, reg32,
        "atom.relaxed.gpu.exch.b32 {old}, [{p}], {v};", swap, Relaxed);
    rmw!(/** `atom.acquire.gpu.exch.b32`: returns the old value */ swap_acquire, u32, reg32,
        "atom.acquire.gpu.exch.b32 {old}, [{p}], {v};", swap, Acquire);
    rmw!(/** `atom.release.gpu.exch.b32`: returns the old value */ swap_release, u32, reg32,
        "atom.release.gpu.exch.b32 {old}, [{p}], {v};", swap, Release);
    rmw!(/** `atom.acq_rel.gpu.exch.b32`: returns the old value */ swap_acq_rel, u32, reg32,
        "atom.acq_rel.gpu.exch.b32 {old}, [{p}], {v};", swap, AcqRel);
    cas!(/** `atom.relaxed.gpu.cas.b32` */ compare_exchange_relaxed, u32, reg32,
        "atom.relaxed.gpu.cas.b32 {old}, [{p}], {c}, {n};", Relaxed, Relaxed);
    cas!(/** `atom.acquire.gpu.cas.b32` */ compare_exchange_acquire, u32, reg32,
        "atom.acquire.gpu.cas.b32 {old}, [{p}], {c}, {n};", Acquire, Acquire);
    cas!(/** `atom.release.gpu.cas.b32` */ compare_exchange_release, u32, reg32,
        "atom.release.gpu.cas.b32 {old}, [{p}], {c}, {n};", Release, Relaxed);
    cas!(/** `atom.acq_rel.gpu.cas.b32` */ compare_exchange_acq_rel, u32, reg32,
        "atom.acq_rel.gpu.cas.b32 {old}, [{p}], {c}, {n};", AcqRel, Acquire);
}

impl GpuAtomicU64 {
    red!(
        /// `red.relaxed.gpu.global.add.u64`: adds `v` without ordering and without returning the old value
        /// (a posted atomic, as cheap as a store: counters nobody reads until the next launch). The value
        /// must be in global memory.
        add_relaxed, "red.relaxed.gpu.global.add.u64 [{g}], {v};", Relaxed
    );

    load!(/** `ld.relaxed.gpu.u64` */ load_relaxed, u64, reg64, "ld.relaxed.gpu.u64 {v}, [{p}];", Relaxed);
    load!(/** `ld.acquire.gpu.u64` */ load_acquire, u64, reg64, "ld.acquire.gpu.u64 {v}, [{p}];", Acquire);
    store!(/** `st.relaxed.gpu.u64` */ store_relaxed, u64, reg64, "st.relaxed.gpu.u64 [{p}], {v};", Relaxed);
    store!(/** `st.release.gpu.u64` */ store_release, u64, reg64, "st.release.gpu.u64 [{p}], {v};", Release);
    rmw!(/** `atom.relaxed.gpu.add.u64`: returns the old value */ fetch_add_relaxed, u64, reg64,
        "atom.relaxed.gpu.add.u64 {old}, [{p}], {v};", fetch_add, Relaxed);
    rmw!(/** `atom.acquire.gpu.add.u64`: returns the old value */ fetch_add_acquire, u64, reg64,
        "atom.acquire.gpu.add.u64 {old}, [{p}], {v};", fetch_add, Acquire);
    rmw!(/** `atom.release.gpu.add.u64`: returns the old value */ fetch_add_release, u64, reg64,
        "atom.release.gpu.add.u64 {old}, [{p}], {v};", fetch_add, Release);
    rmw!(/** `atom.acq_rel.gpu.add.u64`: returns the old value */ fetch_add_acq_rel, u64, reg64,
        "atom.acq_rel.gpu.add.u64 {old}, [{p}], {v};", fetch_add, AcqRel);
    rmw!(/** `atom.relaxed.gpu.exch.b64`: returns the old value */ swap_relaxed, u64, reg64,
        "atom.relaxed.gpu.exch.b64 {old}, [{p}], {v};", swap, Relaxed);
    rmw!(/** `atom.acquire.gpu.exch.b64`: returns the old value */ swap_acquire, u64, reg64,
        "atom.acquire.gpu.exch.b64 {old}, [{p}], {v};", swap, Acquire);
    rmw!(/** `atom.release.gpu.exch.b64`: returns the old value */ swap_release, u64, reg64,
        "atom.release.gpu.exch.b64 {old}, [{p}], {v};", swap, Release);
    rmw!(/** `atom.acq_rel.gpu.exch.b64`: returns the old value */ swap_acq_rel, u64, reg64,
        "atom.acq_rel.gpu.exch.b64 {old}, [{p}], {v};", swap, AcqRel);
    cas!(/** `atom.relaxed.gpu.cas.b64` */ compare_exchange_relaxed, u64, reg64,
        "atom.relaxed.gpu.cas.b64 {old}, [{p}], {c}, {n};", Relaxed, Relaxed);
    cas!(/** `atom.acquire.gpu.cas.b64` */ compare_exchange_acquire, u64, reg64,
        "atom.acquire.gpu.cas.b64 {old}, [{p}], {c}, {n};", Acquire, Acquire);
    cas!(/** `atom.release.gpu.cas.b64` */ compare_exchange_release, u64, reg64,
        "atom.release.gpu.cas.b64 {old}, [{p}], {c}, {n};", Release, Relaxed);
    cas!(/** `atom.acq_rel.gpu.cas.b64` */ compare_exchange_acq_rel, u64, reg64,
        "atom.acq_rel.gpu.cas.b64 {old}, [{p}], {c}, {n};", AcqRel, Acquire);
}

impl SysAtomicU32 {
    load!(/** `ld.relaxed.sys.u32` */ load_relaxed, u32, reg32, "ld.relaxed.sys.u32 {v}, [{p}];", Relaxed);
    load!(/** `ld.acquire.sys.u32` */ load_acquire, u32, reg32, "ld.acquire.sys.u32 {v}, [{p}];", Acquire);
    store!(/** `st.relaxed.sys.u32` */ store_relaxed, u32, reg32, "st.relaxed.sys.u32 [{p}], {v};", Relaxed);
    store!(/** `st.release.sys.u32` */ store_release, u32, reg32, "st.release.sys.u32 [{p}], {v};", Release);
    rmw!(/** `atom.relaxed.sys.add.u32`: returns the old value */ fetch_add_relaxed, u32, reg32,
        "atom.relaxed.sys.add.u32 {old}, [{p}], {v};", fetch_add, Relaxed);
    rmw!(/** `atom.acquire.sys.add.u32`: returns the old value */ fetch_add_acquire, u32, reg32,
        "atom.acquire.sys.add.u32 {old}, [{p}], {v};", fetch_add, Acquire);
    rmw!(/** `atom.release.sys.add.u32`: returns the old value */ fetch_add_release, u32, reg32,
        "atom.release.sys.add.u32 {old}, [{p}], {v};", fetch_add, Release);
    rmw!(/** `atom.acq_rel.sys.add.u32`: returns the old value */ fetch_add_acq_rel, u32, reg32,
        "atom.acq_rel.sys.add.u32 {old}, [{p}], {v};", fetch_add, AcqRel);
    rmw!(/** `atom.relaxed.sys.exch.b32`: returns the old value */ swap_relaxed, u32, reg32,
        "atom.relaxed.sys.exch.b32 {old}, [{p}], {v};", swap, Relaxed);
    rmw!(/** `atom.acquire.sys.exch.b32`: returns the old value */ swap_acquire, u32, reg32,
        "atom.acquire.sys.exch.b32 {old}, [{p}], {v};", swap, Acquire);
    rmw!(/** `atom.release.sys.exch.b32`: returns the old value */ swap_release, u32, reg32,
        "atom.release.sys.exch.b32 {old}, [{p}], {v};", swap, Release);
    rmw!(/** `atom.acq_rel.sys.exch.b32`: returns the old value */ swap_acq_rel, u32, reg32,
        "atom.acq_rel.sys.exch.b32 {old}, [{p}], {v};", swap, AcqRel);
    cas!(/** `atom.relaxed.sys.cas.b32` */ compare_exchange_relaxed, u32, reg32,
        "atom.relaxed.sys.cas.b32 {old}, [{p}], {c}, {n};", Relaxed, Relaxed);
    cas!(/** `atom.acquire.sys.cas.b32` */ compare_exchange_acquire, u32, reg32,
        "atom.acquire.sys.cas.b32 {old}, [{p}], {c}, {n};", Acquire, Acquire);
    cas!(/** `atom.release.sys.cas.b32` */ compare_exchange_release, u32, reg32,
        "atom.release.sys.cas.b32 {old}, [{p}], {c}, {n};", Release, Relaxed);
    cas!(/** `atom.acq_rel.sys.cas.b32` */ compare_exchange_acq_rel, u32, reg32,
        "atom.acq_rel.sys.cas.b32 {old}, [{p}], {c}, {n};", AcqRel, Acquire);
}

impl SysAtomicU64 {
    load!(/** `ld.relaxed.sys.u64` */ load_relaxed, u64, reg64, "ld.relaxed.sys.u64 {v}, [{p}];", Relaxed);
    load!(/** `ld.acquire.sys.u64` */ load_acquire, u64, reg64, "ld.acquire.sys.u64 {v}, [{p}];", Acquire);
    store!(/** `st.relaxed.sys.u64` */ store_relaxed, u64, reg64, "st.relaxed.sys.u64 [{p}], {v};", Relaxed);
    store!(/** `st.release.sys.u64` */ store_release, u64, reg64, "st.release.sys.u64 [{p}], {v};", Release);
    rmw!(/** `atom.relaxed.sys.add.u64`: returns the old value */ fetch_add_relaxed, u64, reg64,
        "atom.relaxed.sys.add.u64 {old}, [{p}], {v};", fetch_add, Relaxed);
    rmw!(/** `atom.acquire.sys.add.u64`: returns the old value */ fetch_add_acquire, u64, reg64,
        "atom.acquire.sys.add.u64 {old}, [{p}], {v};", fetch_add, Acquire);
    rmw!(/** `atom.release.sys.add.u64`: returns the old value */ fetch_add_release, u64, reg64,
        "atom.release.sys.add.u64 {old}, [{p}], {v};", fetch_add, Release);
    rmw!(/** `atom.acq_rel.sys.add.u64`: returns the old value */ fetch_add_acq_rel, u64, reg64,
        "atom.acq_rel.sys.add.u64 {old}, [{p}], {v};", fetch_add, AcqRel);
    rmw!(/** `atom.relaxed.sys.exch.b64`: returns the old value */ swap_relaxed, u64, reg64,
        "atom.relaxed.sys.exch.b64 {old}, [{p}], {v};", swap, Relaxed);
    rmw!(/** `atom.acquire.sys.exch.b64`: returns the old value */ swap_acquire, u64, reg64,
        "atom.acquire.sys.exch.b64 {old}, [{p}], {v};", swap, Acquire);
    rmw!(/** `atom.release.sys.exch.b64`: returns the old value */ swap_release, u64, reg64,
        "atom.release.sys.exch.b64 {old}, [{p}], {v};", swap, Release);
    rmw!(/** `atom.acq_rel.sys.exch.b64`: returns the old value */ swap_acq_rel, u64, reg64,
        "atom.acq_rel.sys.exch.b64 {old}, [{p}], {v};", swap, AcqRel);
    cas!(/** `atom.relaxed.sys.cas.b64` */ compare_exchange_relaxed, u64, reg64,
        "atom.relaxed.sys.cas.b64 {old}, [{p}], {c}, {n};", Relaxed, Relaxed);
    cas!(/** `atom.acquire.sys.cas.b64` */ compare_exchange_acquire, u64, reg64,
        "atom.acquire.sys.cas.b64 {old}, [{p}], {c}, {n};", Acquire, Acquire);
    cas!(/** `atom.release.sys.cas.b64` */ compare_exchange_release, u64, reg64,
        "atom.release.sys.cas.b64 {old}, [{p}], {c}, {n};", Release, Relaxed);
    cas!(/** `atom.acq_rel.sys.cas.b64` */ compare_exchange_acq_rel, u64, reg64,
        "atom.acq_rel.sys.cas.b64 {old}, [{p}], {c}, {n};", AcqRel, Acquire);

    red!(
        /// `red.relaxed.sys.global.add.u64`: adds `v` without ordering and without returning the old value:
        /// a count whose readers need no data published with it (or that a fence before it publishes).
        /// The value must be in global memory (device or peer-mapped).
        add_relaxed, "red.relaxed.sys.global.add.u64 [{g}], {v};", Relaxed
    );

    red!(
        /// `red.release.sys.global.add.u64`: adds `v` with release ordering without returning the old value
        /// (the signal-raise of monotonic counters). The value must be in global memory (device or
        /// peer-mapped).
        add_release, "red.release.sys.global.add.u64 [{g}], {v};", Release
    );
}
