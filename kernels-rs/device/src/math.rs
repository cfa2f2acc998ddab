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

/// `a * b + c` with one rounding (`fma.rn.f32`; `f32::mul_add` on the host). LLVM does not contract
/// `a * b + c` into it by itself: without it a product and a sum cost two instructions.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: f32;
        // SAFETY: arithmetic on registers only.
        unsafe {
            core::arch::asm!("fma.rn.f32 {r}, {a}, {b}, {c};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
                c = in(reg32) c, options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        a.mul_add(b, c)
    }
}
