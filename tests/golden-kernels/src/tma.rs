//! Entries for the TMA bulk copies, their mbarriers and proxy fences. The TMA entries exist in the sm_90
//! module only (PTX ISA 8.0); the proxy fences in both, empty on sm_80, which has no async proxy.
//!
//! # Safety
//!
//! Every entry takes shared-window offsets and global pointers: launch them with valid, aligned ones.

use ferrocomm_device::bulk;
use ferrocomm_device::fence;

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_fence_proxy_async_global() {
    fence::fence_proxy_async_global();
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_fence_proxy_async_shared_cta() {
    fence::fence_proxy_async_shared_cta();
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_dynamic_shared_window(out: *mut usize) {
    let (at, bytes) = bulk::dynamic_shared_window();
    // SAFETY: the launch passes a valid pointer to two words.
    unsafe { (*out, *out.add(1)) = (at.addr(), bytes) };
}

#[cfg(all(target_feature = "sm_90", target_feature = "ptx80"))]
mod sm_90 {
    use ferrocomm_device::bulk::{self, SharedAddr};
    use ferrocomm_device::mem::GlobalPtr;

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn golden_mbarrier_init(bar: u32, count: u32) {
        // SAFETY: the launch passes a barrier's offset.
        unsafe { bulk::mbarrier_init(SharedAddr::from_window(bar as usize), count) };
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn golden_mbarrier_arrive_expect_tx(bar: u32, bytes: u32) {
        // SAFETY: as above.
        unsafe { bulk::mbarrier_arrive_expect_tx(SharedAddr::from_window(bar as usize), bytes) };
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn golden_mbarrier_try_wait_parity(bar: u32, parity: u32, out: *mut u32) {
        // SAFETY: as above, and a valid `out`.
        unsafe { *out = u32::from(bulk::mbarrier_try_wait_parity(SharedAddr::from_window(bar as usize), parity)) };
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn golden_bulk_load(dst: u32, src: *const u8, bytes: u32, bar: u32) {
        // SAFETY: the launch passes valid, aligned ranges and an expecting barrier.
        unsafe {
            bulk::bulk_load(
                SharedAddr::from_window(dst as usize),
                GlobalPtr::from_generic(src),
                bytes,
                SharedAddr::from_window(bar as usize),
            )
        };
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn golden_bulk_store(dst: *mut u8, src: u32, bytes: u32) {
        // SAFETY: the launch passes valid, aligned ranges.
        unsafe { bulk::bulk_store(GlobalPtr::from_generic(dst), SharedAddr::from_window(src as usize), bytes) };
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn golden_bulk_commit() {
        bulk::bulk_commit();
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn golden_bulk_wait_read_1() {
        bulk::bulk_wait_read::<1>();
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn golden_bulk_wait_0() {
        bulk::bulk_wait::<0>();
    }
}
