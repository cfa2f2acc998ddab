//! Entries for scoped atomics, fences and signals.
//!
//! # Safety
//!
//! Every entry dereferences its pointers: launch them with valid, aligned device pointers.

use ferrocomm_device::abi::RawSym;
use ferrocomm_device::atomic::{GpuAtomicU32, GpuAtomicU64, SysAtomicU32, SysAtomicU64};
use ferrocomm_device::fence;
use ferrocomm_device::prelude::*;

/// Loads: `*out = atomic.load_*()`.
macro_rules! load_entries {
    ($($entry:ident => $ty:ident::$method:ident, $int:ty;)*) => { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $entry(p: *mut $int, out: *mut $int) {
            // SAFETY: the launch passes valid, aligned pointers.
            unsafe { *out = $ty::from_ptr(p).$method() };
        }
    )* };
}

/// Stores: `atomic.store_*(v)`.
macro_rules! store_entries {
    ($($entry:ident => $ty:ident::$method:ident, $int:ty;)*) => { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $entry(p: *mut $int, v: $int) {
            // SAFETY: the launch passes a valid, aligned pointer.
            unsafe { $ty::from_ptr(p).$method(v) };
        }
    )* };
}

/// Read-modify-writes: `*out = atomic.op_*(v)`.
macro_rules! rmw_entries {
    ($($entry:ident => $ty:ident::$method:ident, $int:ty;)*) => { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $entry(p: *mut $int, v: $int, out: *mut $int) {
            // SAFETY: the launch passes valid, aligned pointers.
            unsafe { *out = $ty::from_ptr(p).$method(v) };
        }
    )* };
}

/// Compare-and-swaps: `*out = atomic.compare_exchange_*(c, n)`.
macro_rules! cas_entries {
    ($($entry:ident => $ty:ident::$method:ident, $int:ty;)*) => { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $entry(p: *mut $int, c: $int, n: $int, out: *mut $int) {
            // SAFETY: the launch passes valid, aligned pointers.
            unsafe { *out = $ty::from_ptr(p).$method(c, n) };
        }
    )* };
}

load_entries! {
    golden_gpu_u32_load_relaxed => GpuAtomicU32::load_relaxed, u32;
    golden_gpu_u32_load_acquire => GpuAtomicU32::load_acquire, u32;
    golden_gpu_u64_load_relaxed => GpuAtomicU64::load_relaxed, u64;
    golden_gpu_u64_load_acquire => GpuAtomicU64::load_acquire, u64;
    golden_sys_u32_load_relaxed => SysAtomicU32::load_relaxed, u32;
    golden_sys_u32_load_acquire => SysAtomicU32::load_acquire, u32;
    golden_sys_u64_load_relaxed => SysAtomicU64::load_relaxed, u64;
    golden_sys_u64_load_acquire => SysAtomicU64::load_acquire, u64;
}

store_entries! {
    golden_gpu_u32_store_relaxed => GpuAtomicU32::store_relaxed, u32;
    golden_gpu_u32_store_release => GpuAtomicU32::store_release, u32;
    golden_gpu_u64_store_relaxed => GpuAtomicU64::store_relaxed, u64;
    golden_gpu_u64_store_release => GpuAtomicU64::store_release, u64;
    golden_sys_u32_store_relaxed => SysAtomicU32::store_relaxed, u32;
    golden_sys_u32_store_release => SysAtomicU32::store_release, u32;
    golden_sys_u64_store_relaxed => SysAtomicU64::store_relaxed, u64;
    golden_sys_u64_store_release => SysAtomicU64::store_release, u64;
}

rmw_entries! {
    golden_gpu_u32_fetch_add_relaxed => GpuAtomicU32::fetch_add_relaxed, u32;
    golden_gpu_u32_fetch_add_acquire => GpuAtomicU32::fetch_add_acquire, u32;
    golden_gpu_u32_fetch_add_release => GpuAtomicU32::fetch_add_release, u32;
    golden_gpu_u32_fetch_add_acq_rel => GpuAtomicU32::fetch_add_acq_rel, u32;
    golden_gpu_u32_swap_relaxed => GpuAtomicU32::swap_relaxed, u32;
    golden_gpu_u32_swap_acquire => GpuAtomicU32::swap_acquire, u32;
    golden_gpu_u32_swap_release => GpuAtomicU32::swap_release, u32;
    golden_gpu_u32_swap_acq_rel => GpuAtomicU32::swap_acq_rel, u32;
    golden_gpu_u64_fetch_add_relaxed => GpuAtomicU64::fetch_add_relaxed, u64;
    golden_gpu_u64_fetch_add_acquire => GpuAtomicU64::fetch_add_acquire, u64;
    golden_gpu_u64_fetch_add_release => GpuAtomicU64::fetch_add_release, u64;
    golden_gpu_u64_fetch_add_acq_rel => GpuAtomicU64::fetch_add_acq_rel, u64;
    golden_gpu_u64_swap_relaxed => GpuAtomicU64::swap_relaxed, u64;
    golden_gpu_u64_swap_acquire => GpuAtomicU64::swap_acquire, u64;
    golden_gpu_u64_swap_release => GpuAtomicU64::swap_release, u64;
    golden_gpu_u64_swap_acq_rel => GpuAtomicU64::swap_acq_rel, u64;
    golden_sys_u32_fetch_add_relaxed => SysAtomicU32::fetch_add_relaxed, u32;
    golden_sys_u32_fetch_add_acquire => SysAtomicU32::fetch_add_acquire, u32;
    golden_sys_u32_fetch_add_release => SysAtomicU32::fetch_add_release, u32;
    golden_sys_u32_fetch_add_acq_rel => SysAtomicU32::fetch_add_acq_rel, u32;
    golden_sys_u32_swap_relaxed => SysAtomicU32::swap_relaxed, u32;
    golden_sys_u32_swap_acquire => SysAtomicU32::swap_acquire, u32;
    golden_sys_u32_swap_release => SysAtomicU32::swap_release, u32;
    golden_sys_u32_swap_acq_rel => SysAtomicU32::swap_acq_rel, u32;
    golden_sys_u64_fetch_add_relaxed => SysAtomicU64::fetch_add_relaxed, u64;
    golden_sys_u64_fetch_add_acquire => SysAtomicU64::fetch_add_acquire, u64;
    golden_sys_u64_fetch_add_release => SysAtomicU64::fetch_add_release, u64;
    golden_sys_u64_fetch_add_acq_rel => SysAtomicU64::fetch_add_acq_rel, u64;
    golden_sys_u64_swap_relaxed => SysAtomicU64::swap_relaxed, u64;
    golden_sys_u64_swap_acquire => SysAtomicU64::swap_acquire, u64;
    golden_sys_u64_swap_release => SysAtomicU64::swap_release, u64;
    golden_sys_u64_swap_acq_rel => SysAtomicU64::swap_acq_rel, u64;
}

cas_entries! {
    golden_gpu_u32_cas_relaxed => GpuAtomicU32::compare_exchange_relaxed, u32;
    golden_gpu_u32_cas_acquire => GpuAtomicU32::compare_exchange_acquire, u32;
    golden_gpu_u32_cas_release => GpuAtomicU32::compare_exchange_release, u32;
    golden_gpu_u32_cas_acq_rel => GpuAtomicU32::compare_exchange_acq_rel, u32;
    golden_gpu_u64_cas_relaxed => GpuAtomicU64::compare_exchange_relaxed, u64;
    golden_gpu_u64_cas_acquire => GpuAtomicU64::compare_exchange_acquire, u64;
    golden_gpu_u64_cas_release => GpuAtomicU64::compare_exchange_release, u64;
    golden_gpu_u64_cas_acq_rel => GpuAtomicU64::compare_exchange_acq_rel, u64;
    golden_sys_u32_cas_relaxed => SysAtomicU32::compare_exchange_relaxed, u32;
    golden_sys_u32_cas_acquire => SysAtomicU32::compare_exchange_acquire, u32;
    golden_sys_u32_cas_release => SysAtomicU32::compare_exchange_release, u32;
    golden_sys_u32_cas_acq_rel => SysAtomicU32::compare_exchange_acq_rel, u32;
    golden_sys_u64_cas_relaxed => SysAtomicU64::compare_exchange_relaxed, u64;
    golden_sys_u64_cas_acquire => SysAtomicU64::compare_exchange_acquire, u64;
    golden_sys_u64_cas_release => SysAtomicU64::compare_exchange_release, u64;
    golden_sys_u64_cas_acq_rel => SysAtomicU64::compare_exchange_acq_rel, u64;
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_gpu_u64_add_relaxed(p: *mut u64, v: u64) {
    // SAFETY: the launch passes a valid, aligned pointer to global memory.
    unsafe { GpuAtomicU64::from_ptr(p).add_relaxed(v) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_sys_u64_add_release(p: *mut u64, v: u64) {
    // SAFETY: the launch passes a valid, aligned pointer to global memory.
    unsafe { SysAtomicU64::from_ptr(p).add_release(v) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_sys_u64_add_relaxed(p: *mut u64, v: u64) {
    // SAFETY: the launch passes a valid, aligned pointer to global memory.
    unsafe { SysAtomicU64::from_ptr(p).add_relaxed(v) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_signal_add_relaxed(p: *mut u64, v: u64) {
    // SAFETY: the launch passes a valid, aligned pointer to global memory.
    unsafe { Signal::from_ptr(p) }.add_relaxed(v);
}

/// One entry per fence.
macro_rules! fence_entries {
    ($($entry:ident => $fence:path;)*) => { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $entry() {
            $fence();
        }
    )* };
}

fence_entries! {
    golden_fence_acq_rel_cta => fence::fence_acq_rel_cta;
    golden_fence_acq_rel_gpu => fence::fence_acq_rel_gpu;
    golden_fence_acq_rel_sys => fence::fence_acq_rel_sys;
    golden_fence_sc_gpu => fence::fence_sc_gpu;
    golden_fence_sc_sys => fence::fence_sc_sys;
}

#[cfg(all(target_feature = "sm_90", target_feature = "ptx80"))]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_fence_proxy_async() {
    fence::fence_proxy_async();
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_signal_set_release(p: *mut u64, v: u64) {
    // SAFETY: the launch passes a valid, aligned pointer to global memory.
    unsafe { Signal::from_ptr(p) }.set_release(v);
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_signal_set_relaxed(p: *mut u64, v: u64) {
    // SAFETY: as above.
    unsafe { Signal::from_ptr(p) }.set_relaxed(v);
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_signal_add_release(p: *mut u64, v: u64) {
    // SAFETY: as above.
    unsafe { Signal::from_ptr(p) }.add_release(v);
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_signal_load_acquire(p: *mut u64, out: *mut u64) {
    // SAFETY: as above.
    unsafe { *out = Signal::from_ptr(p).load_acquire() };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_signal_wait_ge(p: *mut u64, expected: u64, out: *mut u64) {
    // SAFETY: as above.
    unsafe { *out = Signal::from_ptr(p).wait_ge(expected) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_signal_wait_relaxed(p: *mut u64, expected: u64, out: *mut u64) {
    // SAFETY: as above.
    unsafe { *out = Signal::from_ptr(p).wait_relaxed(Cmp::Eq, expected) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_pad_epoch(pad: RawSym<u64>, out: *mut u64) {
    // SAFETY: the launch passes a live pad with its epoch slots.
    let pad = unsafe { SignalPad::from_raw(pad) };
    let session = pad.session();
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = session.epoch() };
}
