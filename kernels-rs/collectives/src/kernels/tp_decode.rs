//! Tensor-parallel decode: the row-parallel linear layer's product on each rank,
//! `y_partial[tokens, hidden] = x[tokens, k_local] · w[k_local, hidden]` in `bf16` with `f32` accumulation,
//! as split-K partial sums that the all-reduce (and its epilogue) adds up.
//!
//! Block `g` of the `tiles * splits` grid computes tile `g / splits` (columns `256t .. 256t + 256`) over the
//! rows of split `g % splits`. Lane `l` of each warp owns 8 columns (one 16-byte vector of weights per row),
//! so a warp reads 512 contiguous bytes of a row at a time, eight rows (one chunk) in flight. Each warp
//! accumulates [`TOKENS_PER_WARP`] tokens: with up to four tokens the block's four warps take every fourth
//! chunk of the split; with more, the warps split the tokens instead and take every second chunk (up to
//! eight tokens) or every chunk (up to 16).
//! Warps that share a row range read the same weights at about the same time, so those reads hit L1 and
//! HBM still sees each weight once. The warps of a token group meet through shared memory
//! (`sum_across_warps`) and the group's first warp stores the block's partial tile.

use ferrocomm_device::kernel;
use ferrocomm_device::math::fma;
use ferrocomm_device::prelude::*;
use ferrocomm_device::reduce::sum_across_warps;

use crate::element::Element;
use crate::layout::{TP_CHUNK_ROWS, TP_TILE_COLS, TP_WARPS, TpPlan};

/// Tokens one warp accumulates: 4 × 8 `f32` per lane, which stay in registers.
pub const TOKENS_PER_WARP: usize = 4;

/// `acc + x * row`, written out with one rounding per product and sum (`fma.rn.f32`): loops here were left
/// rolled, which put the accumulators in local memory, and LLVM does not contract `a + x * r` itself.
#[inline(always)]
fn axpy8(acc: [f32; 8], x: f32, row: &[f32; 8]) -> [f32; 8] {
    let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
    let [r0, r1, r2, r3, r4, r5, r6, r7] = *row;
    [
        fma(x, r0, a0),
        fma(x, r1, a1),
        fma(x, r2, a2),
        fma(x, r3, a3),
        fma(x, r4, a4),
        fma(x, r5, a5),
        fma(x, r6, a6),
        fma(x, r7, a7),
    ]
}

/// Token slots of one warp (`first .. first + 4`, those below `tokens` real) and its share of the rows.
#[derive(Debug, Clone, Copy)]
struct WarpShare {
    first: usize,
    tokens: usize,
    /// Rows `start + phase, start + phase + stride, ...` of the split.
    phase: usize,
    stride: usize,
}

impl WarpShare {
    /// Token `first + j`'s value of `x` at row `k` (zero past `tokens`).
    #[inline(always)]
    fn x_at(&self, x: &[bf16], k_local: usize, k: usize, j: usize) -> f32 {
        let t = self.first + j;
        if t < self.tokens { x[t * k_local + k].to_f32() } else { 0.0 }
    }

    /// Token `first + j`'s values of `x` at rows `k .. k + 8` (zero past `tokens`): one 16-byte load.
    #[inline(always)]
    fn x_chunk(&self, x: Vectors, k_local: usize, k: usize, j: usize) -> [f32; 8] {
        let t = self.first + j;
        if t < self.tokens { <bf16 as Element>::unpack(x.sub((t * k_local + k) * 2, 16).load(0)) } else { [0.0; 8] }
    }

    /// `acc[j] += x[first + j, k] * row` for the warp's four token slots.
    #[inline(always)]
    fn multiply_row(&self, acc: [[f32; 8]; 4], row: &[f32; 8], x: &[bf16], k_local: usize, k: usize) -> [[f32; 8]; 4] {
        let xj = |j| self.x_at(x, k_local, k, j);
        let [a0, a1, a2, a3] = acc;
        [axpy8(a0, xj(0), row), axpy8(a1, xj(1), row), axpy8(a2, xj(2), row), axpy8(a3, xj(3), row)]
    }

    /// [`multiply_row`](Self::multiply_row) for row `r` of a chunk whose `x` values are `xs`.
    #[inline(always)]
    fn multiply_chunk_row(acc: [[f32; 8]; 4], row: V16, xs: &[[f32; 8]; 4], r: usize) -> [[f32; 8]; 4] {
        let row = <bf16 as Element>::unpack(row);
        let [a0, a1, a2, a3] = acc;
        [axpy8(a0, xs[0][r], &row), axpy8(a1, xs[1][r], &row), axpy8(a2, xs[2][r], &row), axpy8(a3, xs[3][r], &row)]
    }
}

/// Warps per token group for `tokens`: 4 (every warp on every token), 2 or 1.
#[inline(always)]
fn warps_per_group(tokens: usize) -> usize {
    match tokens.div_ceil(TOKENS_PER_WARP) {
        0 | 1 => TP_WARPS,
        2 => TP_WARPS / 2,
        _ => 1,
    }
}

/// This warp's sums for its token slots over its rows of (`tile`, `split`), then summed over the warps of
/// its token group: the group's first warp returns the block's partial tile for those tokens.
#[inline(always)]
fn gemv_tile(x: &[bf16], w: Vectors, plan: &TpPlan, tile: usize, split: usize) -> ([[f32; 8]; 4], WarpShare) {
    let (tokens, hidden, k_local) = (plan.tokens as usize, plan.hidden as usize, plan.k_local as usize);
    let (warp, lane) = (warp_id() as usize, lane_id() as usize);
    let size = warps_per_group(tokens);
    let share = WarpShare { first: warp / size * TOKENS_PER_WARP, tokens, phase: warp % size, stride: size };
    let col = tile * TP_TILE_COLS + lane * 8;
    let (start, end) = plan.rows(split);
    let mut acc = [[0.0f32; 8]; 4];
    if col < hidden && share.first < tokens {
        // Row `k`'s 8 weights of this lane: vector `(k * hidden + col) / 8` (`hidden` is a multiple of 8).
        let weights = |k: usize| w.load((k * hidden + col) / 8);
        let xv = Vectors::of(x);
        // Whole chunks of 8 rows, chunk `phase, phase + stride, ...` of the split: the 8 weight loads go
        // out before the products, and `x` comes as one 16-byte load per token.
        let step = TP_CHUNK_ROWS * share.stride;
        let mut k = start + TP_CHUNK_ROWS * share.phase;
        while k + TP_CHUNK_ROWS <= end {
            let (w0, w1, w2, w3) = (weights(k), weights(k + 1), weights(k + 2), weights(k + 3));
            let (w4, w5, w6, w7) = (weights(k + 4), weights(k + 5), weights(k + 6), weights(k + 7));
            let xs = [0, 1, 2, 3].map(|j| share.x_chunk(xv, k_local, k, j));
            acc = WarpShare::multiply_chunk_row(acc, w0, &xs, 0);
            acc = WarpShare::multiply_chunk_row(acc, w1, &xs, 1);
            acc = WarpShare::multiply_chunk_row(acc, w2, &xs, 2);
            acc = WarpShare::multiply_chunk_row(acc, w3, &xs, 3);
            acc = WarpShare::multiply_chunk_row(acc, w4, &xs, 4);
            acc = WarpShare::multiply_chunk_row(acc, w5, &xs, 5);
            acc = WarpShare::multiply_chunk_row(acc, w6, &xs, 6);
            acc = WarpShare::multiply_chunk_row(acc, w7, &xs, 7);
            k += step;
        }
        // The split's last, partial chunk, row by row (only its first warp has one).
        if k < end {
            for k in k..end {
                acc = share.multiply_row(acc, &<bf16 as Element>::unpack(weights(k)), x, k_local, k);
            }
        }
    }
    (sum_across_warps(acc, TP_WARPS / size), share)
}

/// Stores a group's partial tile from its first warp: token `t`'s 8 columns of lane `l` at
/// `plan.partial(tile, split) + t * 256 + 8l` of `out` (two 16-byte vectors of `f32`).
#[inline(always)]
fn store_tile(out: VectorsMut, plan: &TpPlan, tile: usize, split: usize, sums: &[[f32; 8]; 4], share: &WarpShare) {
    let col = tile * TP_TILE_COLS + lane_id() as usize * 8;
    if share.phase != 0 || col >= plan.hidden as usize {
        return;
    }
    let base = plan.partial(tile, split) + lane_id() as usize * 8;
    for (j, s) in sums.iter().enumerate() {
        let t = share.first + j;
        if t < share.tokens {
            let at = (base + t * TP_TILE_COLS) / 4;
            out.store(at, [s[0].to_bits(), s[1].to_bits(), s[2].to_bits(), s[3].to_bits()]);
            out.store(at + 1, [s[4].to_bits(), s[5].to_bits(), s[6].to_bits(), s[7].to_bits()]);
        }
    }
}

/// This rank's split-K partial sums of `x · w` (see the module documentation) into `partials`
/// (`plan.partials_len()` `f32`s, `[tile][split][token][256]`; columns past `hidden` are left alone).
/// Launch `plan.tiles * plan.splits` blocks of `TP_WARPS` warps with
/// `sum_across_warps_bytes(32, TP_WARPS)` bytes of dynamic shared memory.
#[kernel(
    no_wait,
    requires(
        len(w) == plan.k_local * plan.hidden,
        len(x) >= plan.tokens * plan.k_local,
        len(partials) >= plan.tiles * plan.splits * plan.tokens * 256
    )
)]
pub fn tp_gemv(x: &[bf16], w: &[bf16], partials: &mut [f32], plan: TpPlan) {
    let splits = plan.splits as usize;
    let (tile, split) = (block_rank() as usize / splits, block_rank() as usize % splits);
    let (sums, share) = gemv_tile(x, Vectors::of(w), &plan, tile, split);
    store_tile(VectorsMut::of(partials), &plan, tile, split, &sums, &share);
}
