//! Time: the `%globaltimer` clock and `nanosleep` back-off.

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// `%globaltimer`: a nanosecond clock shared by the whole GPU (`mov.u64 %rd, %globaltimer;`).
#[inline(always)]
pub fn globaltimer() -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let t: u64;
        // SAFETY: reads a special register; no memory is touched.
        unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack)) };
        t
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::lower::globaltimer_ns()
    }
}

/// Suspends the thread for about `ns` nanoseconds (`nanosleep.u32`; the hardware picks a time in
/// `[0, 2 * ns]`). In the emulator the host thread sleeps, and ends if another thread of its launch panicked.
#[inline(always)]
pub fn nanosleep(ns: u32) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: only delays the thread.
        unsafe { asm!("nanosleep.u32 {ns};", ns = in(reg32) ns, options(nomem, nostack)) };
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::lower::exit_if_trapped();
        std::thread::sleep(std::time::Duration::from_nanos(u64::from(ns)));
    }
}
