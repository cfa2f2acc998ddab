//! Shared memory: per-block arrays, static ([`shared_array!`](crate::shared_array)) or sized at launch
//! ([`dynamic_shared`]).
//!
//! On the GPU a static array is a module-level `.shared` declaration named after the macro's identifier,
//! and dynamic shared memory is `.extern .shared .align 16 .b8 FERROCOMM_DYN_SHARED[]`; both are reached
//! through `cvta.shared` generic addresses. In the emulator each block gets its own zeroed copies.
//!
//! Threads of a block share these arrays: separate a write from another thread's read of the same element
//! with [`sync_threads`](crate::sync::sync_threads), as on the GPU.

#[cfg(target_arch = "nvptx64")]
core::arch::global_asm!(".extern .shared .align 16 .b8 FERROCOMM_DYN_SHARED[];");

/// A block's shared array of `T`, addressed generically.
#[derive(Debug, Clone, Copy)]
pub struct SharedSlice<T> {
    ptr: *mut T,
    len: usize,
}

impl<T: Copy> SharedSlice<T> {
    /// A view of `len` elements at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` addresses `len` elements of this block's shared memory, aligned for `T`.
    #[doc(hidden)]
    #[inline(always)]
    pub unsafe fn from_raw(ptr: *mut T, len: usize) -> SharedSlice<T> {
        SharedSlice { ptr, len }
    }

    /// Elements in the array.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's (generic) address.
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Element `i` (panics when out of bounds).
    ///
    /// # Safety
    ///
    /// No other thread writes element `i` concurrently (a barrier separates them).
    #[inline(always)]
    #[track_caller]
    pub unsafe fn read(&self, i: usize) -> T {
        assert!(i < self.len, "shared array index out of bounds");
        // SAFETY: in bounds; no concurrent write (the caller).
        unsafe { self.ptr.add(i).read() }
    }

    /// Sets element `i` (panics when out of bounds).
    ///
    /// # Safety
    ///
    /// No other thread accesses element `i` concurrently (a barrier separates them).
    #[inline(always)]
    #[track_caller]
    pub unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len, "shared array index out of bounds");
        // SAFETY: in bounds; no concurrent access (the caller).
        unsafe { self.ptr.add(i).write(v) }
    }

    /// The whole array as a slice.
    ///
    /// # Safety
    ///
    /// No thread writes the array while the slice lives.
    #[inline(always)]
    pub unsafe fn as_slice(&self) -> &[T] {
        // SAFETY: `len` live elements (`from_raw`); no writer (the caller).
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The whole array as a mutable slice.
    ///
    /// # Safety
    ///
    /// No other thread accesses the array while the slice lives.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    pub unsafe fn as_mut_slice(&self) -> &mut [T] {
        // SAFETY: `len` live elements (`from_raw`); exclusive (the caller).
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// The block's dynamic shared memory (sized by the launch) as an array of `T`: as many whole elements as
/// fit (`mov.u32 %r, %dynamic_smem_size;`), starting 16-byte aligned.
#[inline(always)]
pub fn dynamic_shared<T: Copy>() -> SharedSlice<T> {
    const { assert!(core::mem::align_of::<T>() <= 16, "shared memory is 16-byte aligned") };
    #[cfg(target_arch = "nvptx64")]
    let (ptr, bytes) = {
        let (p, n): (*mut u8, u32);
        // SAFETY: address arithmetic and a special register read; no memory is touched.
        unsafe {
            core::arch::asm!("mov.u64 {p}, FERROCOMM_DYN_SHARED;\n\tcvta.shared.u64 {p}, {p};", p = out(reg64) p,
                options(pure, nomem, nostack));
            core::arch::asm!("mov.u32 {n}, %dynamic_smem_size;", n = out(reg32) n, options(pure, nomem, nostack));
        }
        (p, n as usize)
    };
    #[cfg(not(target_arch = "nvptx64"))]
    let (ptr, bytes) = crate::lower::dynamic_shared();
    let len = match core::mem::size_of::<T>() {
        0 => 0,
        size => bytes / size,
    };
    // SAFETY: the launch's dynamic shared memory holds `bytes` bytes, 16-byte aligned.
    unsafe { SharedSlice::from_raw(ptr.cast(), len) }
}

/// An address in the block's shared memory as TMA instructions take it: the `.shared::cta` window offset
/// on the GPU, the host pointer in the emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedAddr(usize);

impl SharedAddr {
    /// The address `bytes` further.
    #[inline(always)]
    pub fn byte_add(self, bytes: usize) -> SharedAddr {
        SharedAddr(self.0 + bytes)
    }

    /// The address as an integer (the window offset on the GPU).
    #[inline(always)]
    pub fn addr(self) -> usize {
        self.0
    }

    /// The 32-bit operand the instructions take.
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90", target_feature = "ptx80"))]
    #[inline(always)]
    pub(crate) fn window(self) -> u32 {
        self.0 as u32
    }

    /// `addr` in the block's shared window (on the GPU the `.shared::cta` offset, as
    /// [`dynamic_shared_window`] gives it; in the emulator a pointer into the block's shared memory).
    #[inline(always)]
    pub fn from_window(addr: usize) -> SharedAddr {
        SharedAddr(addr)
    }
}

/// The block's dynamic shared memory as TMA instructions address it — its `.shared::cta` window offset
/// (`mov.u32 %r, FERROCOMM_DYN_SHARED;`) — and its size in bytes.
#[inline(always)]
pub fn dynamic_shared_window() -> (SharedAddr, usize) {
    #[cfg(target_arch = "nvptx64")]
    let (addr, bytes) = {
        let (a, n): (u32, u32);
        // SAFETY: a symbol's address and a special register read; no memory is touched.
        unsafe {
            core::arch::asm!("mov.u32 {a}, FERROCOMM_DYN_SHARED;", a = out(reg32) a, options(pure, nomem, nostack));
            core::arch::asm!("mov.u32 {n}, %dynamic_smem_size;", n = out(reg32) n, options(pure, nomem, nostack));
        }
        (a as usize, n as usize)
    };
    #[cfg(not(target_arch = "nvptx64"))]
    let (addr, bytes) = {
        let (p, n) = crate::lower::dynamic_shared();
        (p as usize, n)
    };
    (SharedAddr::from_window(addr), bytes)
}

/// Declares a static shared array of the block and evaluates to its [`SharedSlice`].
///
/// `shared_array!(NAME: [T; N])` — `NAME` becomes the array's PTX symbol, so it must be unique among the
/// kernels crate and its dependencies (the module would not assemble otherwise); `T` and `N` must be
/// concrete. Every call of the expression in a block gives the same array.
///
/// ```
/// use ferrocomm_device::prelude::*;
/// fn kernel_body() -> u32 {
///     let tile = ferrocomm_device::shared_array!(DOC_TILE: [u32; 64]);
///     let t = thread_rank() as usize;
///     // SAFETY: each thread writes its own element; the barrier orders the reads after all writes.
///     unsafe { tile.write(t, t as u32) };
///     sync_threads();
///     unsafe { tile.read(63 - t) }
/// }
/// # use ferrocomm_device::abi::{ErrorBuffer, LaunchCtx};
/// # let mut errors = ErrorBuffer::ZEROED;
/// # let ctx = LaunchCtx { rank: 0, world: 1, timeout_ns: 0, errors: &mut errors };
/// # ferrocomm_device::emu::launch([1, 1, 1], [64, 1, 1], 0, ctx, &|| {
/// #     assert_eq!(kernel_body(), 63 - thread_rank());
/// # }).unwrap();
/// ```
#[macro_export]
macro_rules! shared_array {
    ($name:ident : [$t:ty; $n:expr]) => {{
        const _: () = ::core::assert!(::core::mem::align_of::<$t>() <= 16, "shared memory is 16-byte aligned");
        #[cfg(target_arch = "nvptx64")]
        let ptr: *mut $t = {
            ::core::arch::global_asm!(
                ::core::concat!(".shared .align 16 .b8 ", ::core::stringify!($name), "[{bytes}];"),
                bytes = const ($n) * ::core::mem::size_of::<$t>(),
            );
            let p: *mut $t;
            // SAFETY: takes the address of the array declared above; no memory is touched.
            unsafe {
                ::core::arch::asm!(
                    ::core::concat!("mov.u64 {p}, ", ::core::stringify!($name), ";\n\tcvta.shared.u64 {p}, {p};"),
                    p = out(reg64) p,
                    options(pure, nomem, nostack),
                )
            };
            p
        };
        #[cfg(not(target_arch = "nvptx64"))]
        let ptr: *mut $t = $crate::emu::lower::__static_shared(
            ::core::stringify!($name),
            ($n) * ::core::mem::size_of::<$t>(),
            ::core::mem::align_of::<$t>(),
        )
        .cast();
        // SAFETY: the block's array of `N` elements of `T`, 16-byte aligned.
        unsafe { $crate::shared::SharedSlice::<$t>::from_raw(ptr, $n) }
    }};
}
