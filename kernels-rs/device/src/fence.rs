//! Memory fences, scope and strength in the name. On the host each maps to `std::sync::atomic::fence` of
//! the same strength (`acq_rel` → `AcqRel`, `sc` → `SeqCst`), makes the thread's buffered stores visible to
//! the threads of its scope (see `emu::weak`), and tells the emulator's checker with its scope (a
//! system-scope fence is also what completes non-blocking puts: `quiet`). The proxy fences
//! (`fence.proxy.async*`) order against the TMA's async proxy, which the emulator models (`emu::bulk`).

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// One fence: a literal `asm!` on the GPU, `fence(ordering)` on the host.
macro_rules! fence_fn {
    ($(#[$doc:meta])* $name:ident, $asm:literal, $ord:ident, $scope:ident) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name() {
            #[cfg(target_arch = "nvptx64")]
            {
                // SAFETY: a fence only orders memory accesses; memory is clobbered so none moves across it.
                unsafe { asm!($asm, options(nostack)) };
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                crate::lower::check::fence(crate::lower::check::Scope::$scope);
                core::sync::atomic::fence(core::sync::atomic::Ordering::$ord);
            }
        }
    };
}

fence_fn!(
    /// `fence.acq_rel.cta`: orders this thread's accesses as seen by threads of its block.
    fence_acq_rel_cta, "fence.acq_rel.cta;", AcqRel, Cta
);
fence_fn!(
    /// `fence.acq_rel.gpu`: orders this thread's accesses as seen by threads of its GPU.
    fence_acq_rel_gpu, "fence.acq_rel.gpu;", AcqRel, Gpu
);
fence_fn!(
    /// `fence.acq_rel.sys`: orders this thread's accesses as seen by every GPU and the host; a relaxed store
    /// after it acts as a release store at system scope.
    fence_acq_rel_sys, "fence.acq_rel.sys;", AcqRel, Sys
);
fence_fn!(
    /// `fence.sc.gpu`: a sequentially consistent fence among threads of this GPU.
    fence_sc_gpu, "fence.sc.gpu;", SeqCst, Gpu
);
fence_fn!(
    /// `fence.sc.sys`: a sequentially consistent fence among every GPU and the host (CUDA's
    /// `__threadfence_system`).
    fence_sc_sys, "fence.sc.sys;", SeqCst, Sys
);

/// `fence.proxy.async`: orders this thread's generic-proxy accesses (ordinary loads and stores) against the
/// async proxy (TMA bulk copies), in every state space. It needs sm_90 and PTX 8.0: build the kernels crate
/// with `-Ctarget-feature=+ptx80` for sm_90, or ptxas rejects the module. In the emulator it does what
/// [`fence_proxy_async_global`] and [`fence_proxy_async_shared_cta`] do.
#[inline(always)]
pub fn fence_proxy_async() {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: a fence only orders memory accesses.
        unsafe { asm!("fence.proxy.async;", options(nostack)) };
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::lower::proxy_fence(true, true);
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    }
}

/// One proxy fence between the generic proxy and the async proxy (TMA) over one state space: the literal
/// `asm!` on sm_90, where the async proxy exists; nothing on older GPUs, which have none. In the emulator
/// (`emu::bulk`) the global one drains the thread's store buffer, so the emulated TMA's loads see the
/// thread's earlier stores, and the shared one hands the block's shared-memory writes to the emulated
/// async proxy, which bulk stores read — for the thread's own later bulk copies at once, for the block's
/// after its next barrier.
macro_rules! proxy_fence_fn {
    ($(#[$doc:meta])* $name:ident, $global:literal, $shared:literal, $asm:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name() {
            #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90", target_feature = "ptx80"))]
            {
                // SAFETY: a fence only orders memory accesses; memory is clobbered so none moves across it.
                unsafe { asm!($asm, options(nostack)) };
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                crate::lower::proxy_fence($global, $shared);
                core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
            }
        }
    };
}

proxy_fence_fn!(
    /// `fence.proxy.async.global`: orders this thread's generic accesses of global memory against bulk
    /// copies (TMA) of it — before a bulk load of data this thread (or, after a barrier, its block) wrote,
    /// and after a completed bulk store, before the release that publishes it.
    fence_proxy_async_global, true, false, "fence.proxy.async.global;"
);
proxy_fence_fn!(
    /// `fence.proxy.async.shared::cta`: the same for this block's shared memory — after initialising an
    /// mbarrier the TMA completes on, or writing a stage a bulk store reads.
    fence_proxy_async_shared_cta, false, true, "fence.proxy.async.shared::cta;"
);
