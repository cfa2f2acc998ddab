//! The launch context: which rank this kernel runs as, the team size, the wait timeout and the error
//! buffer. On the GPU it is the module global `FERROCOMM_LAUNCH_CTX`, written by the host before each
//! launch; in the emulator it is the context the launch was given.

use crate::abi::{DEFAULT_TIMEOUT_NS, ErrorBuffer, LaunchCtx};

/// The context of the running launch, written by the host (`cuModuleGetGlobal` + copy) before each launch.
/// Kernels read it through [`launch_ctx`] and [`team`]; it is `static mut` only so the host can write it.
#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub static mut FERROCOMM_LAUNCH_CTX: LaunchCtx = LaunchCtx::EMPTY;

/// The context of the running launch.
#[inline(always)]
pub fn launch_ctx() -> LaunchCtx {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: the host writes the global only between launches; during a kernel it is read-only.
        unsafe { (&raw const FERROCOMM_LAUNCH_CTX).read() }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::lower::launch_ctx()
    }
}

/// How long a wait may spin before it records a timeout, in nanoseconds.
#[inline(always)]
pub(crate) fn timeout_ns() -> u64 {
    match launch_ctx().timeout_ns {
        0 => DEFAULT_TIMEOUT_NS,
        t => t,
    }
}

/// `(rank, world)` of the running launch. On the GPU one `ld.global.nc.v2.u32` of the context global marked
/// pure: the host writes the global only while no kernel of the module runs, so for a launch it is a
/// constant, and every read merges into the first — which [`preload`] places before the kernel waits for
/// the previous one.
#[inline(always)]
fn rank_and_world() -> (u32, u32) {
    #[cfg(target_arch = "nvptx64")]
    {
        let (rank, world): (u32, u32);
        // SAFETY: reads 8 bytes of the module's context global, which is constant while the kernel runs.
        unsafe {
            core::arch::asm!(
                "ld.global.nc.v2.u32 {{{r}, {w}}}, [FERROCOMM_LAUNCH_CTX];",
                r = out(reg32) rank,
                w = out(reg32) world,
                options(pure, nomem, nostack, preserves_flags)
            )
        };
        (rank, world)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let ctx = launch_ctx();
        (ctx.rank, ctx.world)
    }
}

/// Reads the rank and team size before the kernel waits for the previous one (`#[kernel]` entries call it
/// first): the context does not depend on that kernel, and every later [`team::rank`] / [`team::world`]
/// reuses the registers instead of waiting for a load on the kernel's critical path.
#[inline(always)]
pub fn preload() {
    #[cfg(target_arch = "nvptx64")]
    {
        let (rank, world) = rank_and_world();
        // SAFETY: an empty asm that takes the values, so the loads happen here and are not discarded.
        unsafe {
            core::arch::asm!("// rank {r}, world {w}", r = in(reg32) rank, w = in(reg32) world, options(nomem, nostack))
        };
    }
}

/// This rank's error buffer (null when the host gave none).
#[inline(always)]
pub(crate) fn error_buffer() -> *mut ErrorBuffer {
    launch_ctx().errors
}

/// The team of ranks the kernel runs in.
pub mod team {
    /// This rank's index in the team, `0..world()`.
    #[inline(always)]
    pub fn rank() -> u32 {
        super::rank_and_world().0
    }

    /// The number of ranks in the team.
    #[inline(always)]
    pub fn world() -> u32 {
        super::rank_and_world().1
    }
}
