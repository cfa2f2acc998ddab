//! Floating-point functions the kernels' epilogues need and `core` does not give a `no_std` GPU build:
//! each one literal `asm!` on the GPU, the `std` function on the host.

/// `1 / sqrt(x)` (`rsqrt.approx.f32`: at most 2 ulp from the rounded result; the emulator computes it in
/// `f32` with `std`).
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: f32;
        // SAFETY: arithmetic on registers only.
        unsafe {
            core::arch::asm!("rsqrt.approx.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x,
                options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        1.0 / x.sqrt()
    }
}
