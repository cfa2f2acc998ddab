//! Barriers: the block barrier, the warp barrier, and the grid dependency of programmatic dependent launch.

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
        crate::lower::block_sync();
    }
    crate::trace::barrier();
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
        crate::lower::warp_sync(mask);
    }
}

/// Waits until the kernels this grid depends on completed and their memory is visible
/// (`griddepcontrol.wait;`, sm_90+). The runtime launches `#[kernel]`s with programmatic dependent launch on
/// sm_90, so a kernel's blocks may start while the previous kernel of the stream is still running: the
/// generated entry calls this before the body, which then sees the stream as if launched in order. Without
/// that launch attribute it returns at once; on sm_80 and in the emulator it is nothing.
#[inline(always)]
pub fn wait_prior_grids() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
    {
        // SAFETY: waits for the prerequisite grids; memory is clobbered so no access moves above it.
        unsafe { asm!("griddepcontrol.wait;", options(nostack)) };
    }
}

/// Lets the next kernel of the stream start launching its blocks now (`griddepcontrol.launch_dependents;`,
/// sm_90+): they run up to their [`wait_prior_grids`], hiding the launch behind this kernel's tail. The
/// generated entry calls it right after [`wait_prior_grids`], so at most one kernel waits ahead. A no-op
/// where [`wait_prior_grids`] is.
#[inline(always)]
pub fn launch_dependents() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
    {
        // SAFETY: a scheduling hint; it neither reads nor writes memory.
        unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack, nomem)) };
    }
}
