//! Tensor-parallel decode: the row-parallel linear layer's product on each rank,
//! `y_partial[tokens, hidden] = x[tokens, k_local] · w[k_local, hidden]` in `bf16` with `f32` accumulation,
//! as split-K partial sums that the all-reduce (and its epilogue) adds up.
//!
//! Block `g` of the `tiles * splits` grid computes tile `g / splits` (columns `256t .. 256t + 256`) over the
//! rows of split `g % splits`. Lane `l` of each warp owns 8 columns (one 16-byte vector of weights per row),
//! so a warp reads 512 contiguous bytes of a row at a time. Each warp accumulates [`TOKENS_PER_WARP`]
//! tokens: with up to four tokens the block's four warps take every fourth row of the split; with more,
//! the warps split the tokens instead and take every second row (up to eight) or every row (up to 16).
//! Warps that share a row range read the same weights at about the same time, so those reads hit L1 and
//! HBM still sees each weight once. The warps of a token group meet through shared memory
//! (`sum_across_warps`) and the group's first warp stores the block's partial tile.

use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;
use ferrocomm_device::reduce::sum_across_warps;

use crate::element::Element;
use crate::layout::{TP_TILE_COLS, TP_WARPS, TpPlan};

/// Tokens one warp accumulates: 4 × 8 `f32` per lane, which stay in registers.
pub const TOKENS_PER_WARP: usize = 4;

/// Rows each lane loads before it multiplies: four 16-byte loads in flight per lane (the loop body below
/// is written for four).
const UNROLL: usize = 4;

/// `acc + x * row`, written out: loops here were left rolled, which put the accumulators in local memory.
#[inline(always)]
fn axpy8(acc: [f32; 8], x: f32, row: &[f32; 8]) -> [f32; 8] {
    let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
    let [r0, r1, r2, r3, r4, r5, r6, r7] = *row;
    [a0 + x * r0, a1 + x * r1, a2 + x * r2, a3 + x * r3, a4 + x * r4, a5 + x * r5, a6 + x * r6, a7 + x * r7]
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
    /// `acc[j] += x[first + j, k] * row` (slots past `tokens` multiply zero).
    #[inline(always)]
    fn multiply_row(&self, acc: [[f32; 8]; 4], row: &[f32; 8], x: &[bf16], k_local: usize, k: usize) -> [[f32; 8]; 4] {
        let xj = |j: usize| {
            let t = self.first + j;
            if t < self.tokens { x[t * k_local + k].to_f32() } else { 0.0 }
        };
        let [a0, a1, a2, a3] = acc;
        [axpy8(a0, xj(0), row), axpy8(a1, xj(1), row), axpy8(a2, xj(2), row), axpy8(a3, xj(3), row)]
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
        let weights = |k: usize| <bf16 as Element>::unpack(w.load((k * hidden + col) / 8));
        let s = share.stride;
        let mut k = start + share.phase;
        while k + (UNROLL - 1) * s < end {
            // The loads first, then the products.
            let (r0, r1, r2, r3) = (weights(k), weights(k + s), weights(k + 2 * s), weights(k + 3 * s));
            acc = share.multiply_row(acc, &r0, x, k_local, k);
            acc = share.multiply_row(acc, &r1, x, k_local, k + s);
            acc = share.multiply_row(acc, &r2, x, k_local, k + 2 * s);
            acc = share.multiply_row(acc, &r3, x, k_local, k + 3 * s);
            k += UNROLL * s;
        }
        while k < end {
            acc = share.multiply_row(acc, &weights(k), x, k_local, k);
            k += s;
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
