//! Barriers: the block barrier and the warp barrier.

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// Waits until every thread of the block reached this barrier, and makes the block's earlier memory
/// accesses visible to all its threads (`barrier.sync 0;`, CUDA's `__syncthreads`). Every thread of the block
/// must call it (threads that exited no longer count).
#[inline(always)]
pub fn sync_threads() {
    #[cfg(target_arch = "nvptx64")]
    {
        // Not `bar.sync` (= `barrier.sync.aligned`): inline asm cannot be marked convergent, so LLVM may
        // duplicate the barrier into both arms of a branch (seen: a thread spinning on a signal while the
        // rest of its warp waits), and the aligned form then deadlocks. The unaligned form may be reached
        // divergently on sm_70+, and threads that exited (a timed-out wait) no longer hold it up.
        // SAFETY: a barrier; memory is clobbered so no access moves across it.
        unsafe { asm!("barrier.sync 0;", options(nostack)) };
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::emu::block_sync();
    }
}

/// Waits until every lane in `mask` reached this barrier, ordering their memory accesses
/// (`bar.warp.sync mask;`, CUDA's `__syncwarp`). The calling lane must be in `mask`.
#[inline(always)]
pub fn sync_warp(mask: u32) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: a warp barrier; memory is clobbered so no access moves across it.
        unsafe { asm!("bar.warp.sync {m};", m = in(reg32) mask, options(nostack)) };
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::emu::warp_sync(mask);
    }
}
