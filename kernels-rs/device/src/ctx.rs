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
        crate::emu::thread::current().launch.ctx
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
        super::launch_ctx().rank
    }

    /// The number of ranks in the team.
    #[inline(always)]
    pub fn world() -> u32 {
        super::launch_ctx().world
    }
}
