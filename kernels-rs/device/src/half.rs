//! 16-bit floats: [`bf16`] and [`f16`](struct@f16) as plain data, with conversion and addition (the reduction op of
//! all-reduce). On the GPU addition and conversion from `f32` are PTX instructions; on the host they are
//! computed in `f32` and rounded to nearest-even, which gives the same result (an `f32` sum of two 16-bit
//! values is exact enough that rounding it once more is still correctly rounded).

use core::ops::{Add, AddAssign};

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// A bfloat16: the upper 16 bits of an `f32`.
#[allow(non_camel_case_types)]
#[repr(transparent)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct bf16(u16);

/// An IEEE 754 binary16 float.
#[allow(non_camel_case_types)]
#[repr(transparent)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct f16(u16);

impl bf16 {
    /// The value with these bits.
    #[inline(always)]
    pub const fn from_bits(bits: u16) -> bf16 {
        bf16(bits)
    }

    /// The bits.
    #[inline(always)]
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// The nearest bf16 (round to nearest, ties to even; NaN stays NaN).
    #[inline(always)]
    pub fn from_f32(v: f32) -> bf16 {
        #[cfg(target_arch = "nvptx64")]
        {
            let r: u16;
            // SAFETY: register-only conversion (sm_80+).
            unsafe {
                asm!("cvt.rn.bf16.f32 {r}, {v};", r = out(reg16) r, v = in(reg32) v, options(pure, nomem, nostack))
            };
            bf16(r)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            bf16(f32_to_bf16_bits(v))
        }
    }

    /// The exact `f32` value.
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

/// Round to nearest even of an `f32` to its upper 16 bits.
#[cfg(not(target_arch = "nvptx64"))]
fn f32_to_bf16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    if v.is_nan() {
        // Quiet NaN with the sign kept, as the GPU produces.
        return ((bits >> 16) as u16) | 0x0040;
    }
    let lsb = (bits >> 16) & 1;
    ((bits + 0x7fff + lsb) >> 16) as u16
}

impl f16 {
    /// The value with these bits.
    #[inline(always)]
    pub const fn from_bits(bits: u16) -> f16 {
        f16(bits)
    }

    /// The bits.
    #[inline(always)]
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// The nearest f16 (round to nearest, ties to even; overflow gives infinity).
    #[inline(always)]
    pub fn from_f32(v: f32) -> f16 {
        #[cfg(target_arch = "nvptx64")]
        {
            let r: u16;
            // SAFETY: register-only conversion.
            unsafe {
                asm!("cvt.rn.f16.f32 {r}, {v};", r = out(reg16) r, v = in(reg32) v, options(pure, nomem, nostack))
            };
            f16(r)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            f16(f32_to_f16_bits(v))
        }
    }

    /// The exact `f32` value.
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        {
            let r: f32;
            // SAFETY: register-only conversion.
            unsafe {
                asm!("cvt.f32.f16 {r}, {v};", r = out(reg32) r, v = in(reg16) self.0, options(pure, nomem, nostack))
            };
            r
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            f16_bits_to_f32(self.0)
        }
    }
}

#[cfg(not(target_arch = "nvptx64"))]
fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        // Subnormal: value = man * 2^-24, exact in f32.
        (0, m) => {
            let v = m as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

#[cfg(not(target_arch = "nvptx64"))]
fn f32_to_f16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let a = v.abs();
    if a.is_nan() {
        return sign | 0x7e00 | ((bits >> 13) & 0x3ff) as u16;
    }
    if a >= 65520.0 {
        // At or above the midpoint between the largest finite f16 and the next power: infinity.
        return sign | 0x7c00;
    }
    if a < f32::from_bits(0x3880_0000) {
        // Below 2^-14: subnormal or zero, in units of 2^-24; the f32 rounding of `a * 2^24` is exact
        // because `a` has at most 24 significant bits, and `round_ties_even` finishes it.
        let units = (a * 16_777_216.0).round_ties_even();
        return sign | units as u16;
    }
    let exp = (bits >> 23) & 0xff;
    let man = bits & 0x7f_ffff;
    let half_exp = exp + 15 - 127;
    let mut h = (half_exp << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        // The carry may ripple into the exponent, which is the right answer (up to infinity).
        h += 1;
    }
    sign | h as u16
}

impl Add for bf16 {
    type Output = bf16;

    /// Correctly rounded sum: `fma.rn.bf16 a, 1.0, b` (one rounding, like `add.rn.bf16`, which needs sm_90
    /// while the fma runs on sm_80 too).
    #[inline(always)]
    fn add(self, rhs: bf16) -> bf16 {
        #[cfg(target_arch = "nvptx64")]
        {
            let r: u16;
            // SAFETY: register-only arithmetic; `one` is a scratch register scoped to the block.
            unsafe {
                asm!("{{ .reg .b16 one; mov.b16 one, 0x3F80; fma.rn.bf16 {r}, {a}, one, {b}; }}",
                    r = out(reg16) r, a = in(reg16) self.0, b = in(reg16) rhs.0, options(pure, nomem, nostack))
            };
            bf16(r)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            bf16::from_f32(self.to_f32() + rhs.to_f32())
        }
    }
}

impl Add for f16 {
    type Output = f16;

    /// Correctly rounded sum (`add.rn.f16`).
    #[inline(always)]
    fn add(self, rhs: f16) -> f16 {
        #[cfg(target_arch = "nvptx64")]
        {
            let r: u16;
            // SAFETY: register-only arithmetic.
            unsafe {
                asm!("add.rn.f16 {r}, {a}, {b};", r = out(reg16) r, a = in(reg16) self.0, b = in(reg16) rhs.0,
                    options(pure, nomem, nostack))
            };
            f16(r)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            f16::from_f32(self.to_f32() + rhs.to_f32())
        }
    }
}

impl AddAssign for bf16 {
    #[inline(always)]
    fn add_assign(&mut self, rhs: bf16) {
        *self = *self + rhs;
    }
}

impl AddAssign for f16 {
    #[inline(always)]
    fn add_assign(&mut self, rhs: f16) {
        *self = *self + rhs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16::from_f32(1.0).to_bits(), 0x3f80);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(bf16::from_f32(1.0 + 1.0 / 256.0).to_bits(), 0x3f80);
        // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up to even.
        assert_eq!(bf16::from_f32(1.0 + 3.0 / 256.0).to_bits(), 0x3f82);
        assert!(bf16::from_f32(f32::NAN).to_f32().is_nan());
        assert_eq!(bf16::from_f32(-2.5).to_f32(), -2.5);
    }

    #[test]
    fn f16_converts_exactly_and_rounds() {
        for (v, bits) in [(1.0f32, 0x3c00u16), (-2.0, 0xc000), (65504.0, 0x7bff), (65520.0, 0x7c00), (0.0, 0)] {
            assert_eq!(f16::from_f32(v).to_bits(), bits, "{v}");
        }
        // Smallest subnormal 2^-24, and half of it rounds to even (zero).
        assert_eq!(f16::from_f32(5.960_464_5e-8).to_bits(), 1);
        assert_eq!(f16::from_f32(2.980_232_2e-8).to_bits(), 0);
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even.
        assert_eq!(f16::from_f32(1.0 + 1.0 / 2048.0).to_bits(), 0x3c00);
        for bits in (0u16..0x7c00).step_by(7) {
            let h = f16::from_bits(bits);
            assert_eq!(f16::from_f32(h.to_f32()).to_bits(), bits, "{bits:#x}");
        }
    }

    #[test]
    fn sums_are_correctly_rounded() {
        let a = bf16::from_f32(1.0);
        let b = bf16::from_f32(1.0 / 512.0);
        // 1 + 2^-9 rounds back to 1 in bf16 (8 significant bits).
        assert_eq!((a + b).to_bits(), a.to_bits());
        let h = f16::from_f32(1000.0) + f16::from_f32(24.0);
        assert_eq!(h.to_f32(), 1024.0);
    }
}
