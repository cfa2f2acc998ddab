//! Warp-wide matrix multiply-accumulate on the tensor cores (`mma.sync`), for the compute that
//! communication kernels carry with them (the GEMV of a tensor-parallel decode step).
//!
//! One call is one warp's `D = A · B + C` of a fixed shape; every lane holds a fragment of each matrix in
//! registers, laid out as the PTX ISA lays it out. With `g = lane / 4` (the lane's group) and
//! `t = lane % 4` (its place in the group), for [`mma_m16n8k16_bf16`]:
//!
//! | operand | registers | lane `(g, t)` holds |
//! | --- | --- | --- |
//! | `a`, 16 × 16 `bf16`, row-major | 4 × `bf16x2` | `A[g][2t..2t+2]`, `A[g+8][2t..2t+2]`, `A[g][2t+8..2t+10]`, `A[g+8][2t+8..2t+10]` |
//! | `b`, 16 × 8 `bf16`, column-major | 2 × `bf16x2` | `B[2t..2t+2][g]`, `B[2t+8..2t+10][g]` |
//! | `c`, `d`, 16 × 8 `f32` | 4 × `f32` | `C[g][2t]`, `C[g][2t+1]`, `C[g+8][2t]`, `C[g+8][2t+1]` |
//!
//! In a `bf16x2` word the element of the lower index is in the low 16 bits ([`pack_bf16x2`]).

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// Two `bf16` (as bits) in one `bf16x2` word: `lo` (the lower index) in the low half.
#[inline(always)]
pub fn pack_bf16x2(lo: u16, hi: u16) -> u32 {
    u32::from(lo) | u32::from(hi) << 16
}

/// The low halves of `a` and `b` as one `bf16x2` word, `a`'s low (`prmt.b32` selector `0x5410`): column `2i`
/// of two rows' vectors, paired into a `B` fragment.
#[inline(always)]
pub fn pack_low_halves(a: u32, b: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: arithmetic on registers only.
        unsafe {
            asm!("prmt.b32 {r}, {a}, {b}, 0x5410;", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
                options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        (a & 0xffff) | b << 16
    }
}

/// The high halves of `a` and `b` as one `bf16x2` word, `a`'s low (`prmt.b32` selector `0x7632`): column
/// `2i + 1` of two rows' vectors, paired into a `B` fragment.
#[inline(always)]
pub fn pack_high_halves(a: u32, b: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: arithmetic on registers only.
        unsafe {
            asm!("prmt.b32 {r}, {a}, {b}, 0x7632;", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
                options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        a >> 16 | (b & 0xffff_0000)
    }
}

/// `D = A · B + C` for one warp: `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` (sm_80+), with the
/// fragments of the module's table. Products are exact and sums are kept in `f32`.
///
/// Every lane of the warp calls it together (`.aligned`): call it from converged, whole warps only. The
/// emulator exchanges the fragments among the warp's lanes (three warp rounds) and computes the product in
/// `f32`.
#[inline(always)]
pub fn mma_m16n8k16_bf16(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        let (d0, d1, d2, d3): (f32, f32, f32, f32);
        // SAFETY: arithmetic on registers only; the whole warp takes part (the caller's contract above).
        unsafe {
            asm!(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{c0}, {c1}, {c2}, {c3}}};",
                d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
                a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                b0 = in(reg32) b[0], b1 = in(reg32) b[1],
                c0 = in(reg32) c[0], c1 = in(reg32) c[1], c2 = in(reg32) c[2], c3 = in(reg32) c[3],
                options(nomem, nostack)
            )
        };
        [d0, d1, d2, d3]
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        host::mma_m16n8k16_bf16(a, b, c)
    }
}

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use crate::half::bf16;
    use crate::lower::warp_exchange;

    /// The whole warp: `mma.sync` has no member mask.
    const WARP: u32 = u32::MAX;

    /// Element `half` (0: low) of a `bf16x2` word, as `f32`.
    fn element(word: u32, half: usize) -> f32 {
        bf16::from_bits((word >> (16 * half)) as u16).to_f32()
    }

    pub(super) fn mma_m16n8k16_bf16(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
        let pair = |lo: u32, hi: u32| u64::from(lo) | u64::from(hi) << 32;
        let (a01, a23, b01) = (
            warp_exchange(WARP, pair(a[0], a[1])),
            warp_exchange(WARP, pair(a[2], a[3])),
            warp_exchange(WARP, pair(b[0], b[1])),
        );
        let full = a01.participants & a23.participants & b01.participants;
        assert!(
            full == WARP,
            "mma.sync called by a partial warp (lanes {full:#010x}): every lane of a whole warp must take part"
        );
        // A's word for (row, k): lane (row % 8) * 4 + (k % 8) / 2, register row / 8 + 2 * (k / 8).
        let a_at = |row: usize, k: usize| {
            let lane = (row % 8) * 4 + (k % 8) / 2;
            let reg = row / 8 + 2 * (k / 8);
            let words = if reg < 2 { a01.values[lane] } else { a23.values[lane] };
            element((words >> (32 * (reg % 2))) as u32, k % 2)
        };
        // B's word for (k, col): lane col * 4 + (k % 8) / 2, register k / 8.
        let b_at = |k: usize, col: usize| {
            let words = b01.values[col * 4 + (k % 8) / 2];
            element((words >> (32 * (k / 8))) as u32, k % 2)
        };
        let lane = crate::index::lane_id() as usize;
        let (g, t) = (lane / 4, lane % 4);
        let mut d = c;
        for (i, d) in d.iter_mut().enumerate() {
            let (row, col) = (g + 8 * (i / 2), 2 * t + i % 2);
            let mut sum = 0.0f32;
            for k in 0..16 {
                sum += a_at(row, k) * b_at(k, col);
            }
            *d += sum;
        }
        d
    }
}
