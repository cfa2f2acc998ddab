//! Block `b` of the [`TpPlan::grid`] computes, for tile `b / blocks_per_tile` (256 columns), its
//! `256 / row_groups` columns over the rows of its split ([`TpPlan::block_in_tile`]), on the tensor cores:
//! each warp owns 64 of the columns for every token at once (the tokens are the 16 rows of
//! `mma.m16n8k16`'s `A`, padded with zeros), over every `row_groups`-th iteration of the split's rows, so
//! each weight is read once by one warp, whatever the token count. The warps of a column group then add
//! their sums in shared memory, and the first stores them: the partial tile of (tile, split).
//!
//! A warp takes [`TP_ITERATION_ROWS`] (64) rows of `w` at a time. Lane `(g, t)` holds the 16-byte vectors of
//! its 8 columns `64 slot + 8g ..` on the 16 consecutive rows `16t .. 16t + 16` of them (16 loads in flight,
//! one bounds check, streamed past L1: each weight is read once, and `x`, which all four warps read, stays
//! cached), and `x` of tokens `g` and `g + 8` on the same rows (two 16-byte loads each). The
//! sum over a k-step's 16 rows does not care which row sits in which `k` slot, so k-step `s` gives lane
//! `t`'s slots `2t, 2t + 1, 2t + 8, 2t + 9` its rows `4s .. 4s + 4`: the `A` fragments are `x`'s words as
//! loaded, and each `B` fragment is one `prmt` of two rows' words.

use ferrocomm_device::kernel;
use ferrocomm_device::mma::{mma_m16n8k16_bf16, pack_high_halves, pack_low_halves};
use ferrocomm_device::prelude::*;
use ferrocomm_device::reduce::sum_across_warp_groups;

use crate::layout::{TP_ITERATION_ROWS, TP_TILE_COLS, TP_WARPS, TpPlan};

/// Rows of one iteration that one lane holds: `16t .. 16t + 16` for lane `(g, t)`.
const LANE_ROWS: usize = TP_ITERATION_ROWS / 4;

/// What one warp of the GEMV computes: its 8 columns per lane, the tokens, and where `x` and `w` are.
#[derive(Clone, Copy)]
struct WarpGemv {
    x: Vectors,
    w: Vectors,
    tokens: usize,
    hidden: usize,
    k_local: usize,
    /// The warp's 64 columns of the tile: `64 * slot ..`.
    slot: usize,
    /// The first of the lane's 8 columns (lane group `g`'s: `64 * slot + 8g` of the tile).
    col: usize,
    /// The lane's place in its group (`t`): its rows of an iteration are `16t .. 16t + 16`.
    quad: usize,
    /// The lane's group (`g`): its tokens in `A` are `g` and `g + 8`.
    group: usize,
}

/// One lane's operands of one iteration: `x` of tokens `g` and `g + 8` on its 16 rows (`bf16x2` words:
/// word `i` holds rows `2i, 2i + 1`), and its 16 rows of 8 weights.
struct Operands {
    x_lo: [u32; 8],
    x_hi: [u32; 8],
    w: [V16; LANE_ROWS],
}

impl WarpGemv {
    /// Token `token`'s `x` on the lane's 16 rows from `k` (8 words), zero for a token past the last; `whole`:
    /// all 16 rows exist (else those past `k_local` read as zero).
    #[inline(always)]
    fn x_words(&self, token: usize, k: usize, whole: bool) -> [u32; 8] {
        if token >= self.tokens {
            return [0; 8];
        }
        let row = self.x.sub(token * self.k_local * 2, self.k_local * 2);
        let part = |v: usize| if v < row.vectors() { row.load(v) } else { [0; 4] };
        let [a, b] = if whole { row.load_strided::<2>(k / 8, 1) } else { [part(k / 8), part(k / 8 + 1)] };
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    }

    /// The lane's operands of the whole iteration at row `k` (every row below the split's end).
    #[inline(always)]
    fn load(&self, k: usize) -> Operands {
        let k = k + LANE_ROWS * self.quad;
        let w = if self.col < self.hidden {
            self.w.load_strided_streamed::<LANE_ROWS>((k * self.hidden + self.col) / 8, self.hidden / 8)
        } else {
            [[0; 4]; LANE_ROWS]
        };
        Operands { x_lo: self.x_words(self.group, k, true), x_hi: self.x_words(self.group + 8, k, true), w }
    }

    /// [`load`](Self::load) for the split's last, partial iteration: rows at or past `end` read as zero
    /// (both `x` and `w`, so no row of the next split counts).
    #[inline(always)]
    fn load_masked(&self, k: usize, end: usize) -> Operands {
        let k = k + LANE_ROWS * self.quad;
        let live = |r: usize| k + r < end;
        let w = core::array::from_fn(|r| {
            if live(r) && self.col < self.hidden { self.w.load(((k + r) * self.hidden + self.col) / 8) } else { [0; 4] }
        });
        // Word `i` holds rows `2i` (low half) and `2i + 1`.
        let mask = |words: [u32; 8]| {
            core::array::from_fn(|i| {
                let lo = if live(2 * i) { words[i] & 0xffff } else { 0 };
                let hi = if live(2 * i + 1) { words[i] & 0xffff_0000 } else { 0 };
                lo | hi
            })
        };
        let (x_lo, x_hi) = if k < end {
            (mask(self.x_words(self.group, k, false)), mask(self.x_words(self.group + 8, k, false)))
        } else {
            ([0; 8], [0; 8])
        };
        Operands { x_lo, x_hi, w }
    }

    /// K-step `s` of an iteration: `acc[j] += A_s · B_sj` for the 8 columns `j` of the lane's vectors, where
    /// the lane's `k` slots hold its rows `4s .. 4s + 4`.
    #[inline(always)]
    fn step(acc: [[f32; 4]; 8], op: &Operands, s: usize) -> [[f32; 4]; 8] {
        let a = [op.x_lo[2 * s], op.x_hi[2 * s], op.x_lo[2 * s + 1], op.x_hi[2 * s + 1]];
        let (r0, r1, r2, r3) = (op.w[4 * s], op.w[4 * s + 1], op.w[4 * s + 2], op.w[4 * s + 3]);
        // Column `j` of the vectors: word `j / 2`, its low half for even `j`.
        let b = |j: usize| {
            let i = j / 2;
            if j.is_multiple_of(2) {
                [pack_low_halves(r0[i], r1[i]), pack_low_halves(r2[i], r3[i])]
            } else {
                [pack_high_halves(r0[i], r1[i]), pack_high_halves(r2[i], r3[i])]
            }
        };
        let [c0, c1, c2, c3, c4, c5, c6, c7] = acc;
        [
            mma_m16n8k16_bf16(a, b(0), c0),
            mma_m16n8k16_bf16(a, b(1), c1),
            mma_m16n8k16_bf16(a, b(2), c2),
            mma_m16n8k16_bf16(a, b(3), c3),
            mma_m16n8k16_bf16(a, b(4), c4),
            mma_m16n8k16_bf16(a, b(5), c5),
            mma_m16n8k16_bf16(a, b(6), c6),
            mma_m16n8k16_bf16(a, b(7), c7),
        ]
    }

    /// The four k-steps of an iteration, written out: a loop over them stays rolled and puts the operands
    /// in local memory.
    #[inline(always)]
    fn multiply(acc: [[f32; 4]; 8], op: &Operands) -> [[f32; 4]; 8] {
        let acc = Self::step(acc, op, 0);
        let acc = Self::step(acc, op, 1);
        let acc = Self::step(acc, op, 2);
        Self::step(acc, op, 3)
    }

    /// The warp's products over the iterations of rows `start..end` that start at `start`, `start + step`,
    /// ...: whole iterations, then a masked one if the last is partial. Every lane takes every step
    /// together: `mma.sync` is warp-wide.
    #[inline(always)]
    fn products(&self, start: usize, end: usize, step: usize) -> [[f32; 4]; 8] {
        let mut acc = [[0.0f32; 4]; 8];
        let mut k = start;
        while k + TP_ITERATION_ROWS <= end {
            acc = Self::multiply(acc, &self.load(k));
            k += step;
        }
        if k < end {
            acc = Self::multiply(acc, &self.load_masked(k, end));
        }
        acc
    }
}

/// A lane's products of one warp: `acc[j]` for the 8 columns `j` of its vectors (see [`gemv_tile`]).
type Products = [[f32; 4]; 8];

/// How many warps of a GEMV block share a range of rows ([`TpPlan::row_groups`]), as a type: each count is
/// its own PTX entry of the product's kernels, with the count a constant. (One entry holding both counts
/// ran the one-group product about 1 µs (3 %) slower on an H200: ptxas allocates registers for the whole
/// entry.)
pub trait RowGroups {
    /// Warps per range of rows.
    const COUNT: usize;
}

/// Every warp of a block takes all of its range's rows (`row_groups == 1`).
#[derive(Debug, Clone, Copy)]
pub struct OneRowGroup;

/// Two warps share each range's rows (`row_groups == 2`), half the partial sums.
#[derive(Debug, Clone, Copy)]
pub struct TwoRowGroups;

impl RowGroups for OneRowGroup {
    const COUNT: usize = 1;
}

impl RowGroups for TwoRowGroups {
    const COUNT: usize = 2;
}

/// This block's products: block `r` of tile `tile` (see [`TpPlan::block_in_tile`]). Warp `w` is warp `w %
/// row_groups` of column group `w / row_groups`, whose 64 columns are slot `part * groups + w / row_groups`
/// of the tile (`groups = TP_WARPS / row_groups` column groups per block); it takes iterations `w %
/// row_groups`, `w % row_groups + row_groups`, ... of the split's rows. Returns the warp's view, and its
/// products summed over its column group for the group's first warp (`None` for the others): lane `(g, t)`
/// then holds, for token `g` (and `g + 8` in the last two), `acc[j] = [y[g][c], y[g][c + 8], y[g + 8][c],
/// y[g + 8][c + 8]]`, `c = 64 slot + 16t + j` of the tile. Block-collective; with more than one row group
/// it needs `sum_across_warp_groups_bytes(8, TP_WARPS)` bytes of dynamic shared memory.
#[inline(always)]
fn gemv_tile<G: RowGroups>(
    x: &[bf16],
    w: Vectors,
    plan: &TpPlan,
    tile: usize,
    r: usize,
) -> (Option<Products>, WarpGemv) {
    assert!(plan.row_groups as usize == G::COUNT, "the plan's row groups are not the kernel instance's");
    let (lane, warp) = (lane_id() as usize, warp_id() as usize);
    let (part, split) = plan.block_in_tile(r);
    let slot = part * (TP_WARPS / G::COUNT) + warp / G::COUNT;
    let view = WarpGemv {
        x: Vectors::of(x),
        w,
        tokens: plan.tokens as usize,
        hidden: plan.hidden as usize,
        k_local: plan.k_local as usize,
        slot,
        col: tile * TP_TILE_COLS + slot * 64 + 8 * (lane / 4),
        quad: lane % 4,
        group: lane / 4,
    };
    let (start, end) = plan.rows(split);
    let first = start + (warp % G::COUNT) * TP_ITERATION_ROWS;
    let acc = view.products(first, end, G::COUNT * TP_ITERATION_ROWS);
    (sum_across_warp_groups(acc, G::COUNT), view)
}

/// Stores a column group's products (see [`gemv_tile`]) as its columns of the partial tile (tile, split):
/// token `j`'s columns `c .. c + 4` go to `put(at, v)` as the vector `at = (plan.partial(tile, split) + j *
/// 256 + c) / 4` of the `[tile][split][token][256]` `f32` partials, 16 columns (four vectors) per lane and
/// token.
#[inline(always)]
fn store_tile(plan: &TpPlan, (tile, split): (usize, usize), acc: &Products, view: &WarpGemv, put: impl Fn(usize, V16)) {
    let first = view.slot * 64 + 16 * view.quad;
    // Element `e` of every `acc[j]`: token `token`, columns `first + 8n + j`. Four calls, not a loop: a rolled
    // loop indexes `acc` at run time, which puts it in local memory.
    let store = |token: usize, e: usize, n: usize| {
        let c = first + 8 * n;
        if token < view.tokens && tile * TP_TILE_COLS + c < view.hidden {
            let at = (plan.partial(tile, split) + token * TP_TILE_COLS + c) / 4;
            let v = |j: usize| acc[j][e].to_bits();
            put(at, [v(0), v(1), v(2), v(3)]);
            put(at + 1, [v(4), v(5), v(6), v(7)]);
        }
    };
    store(view.group, 0, 0);
    store(view.group, 1, 1);
    store(view.group + 8, 2, 0);
    store(view.group + 8, 3, 1);
}

/// This rank's split-K partial sums of `x · w` (see the module documentation) into `partials`
/// (`plan.partials_len()` `f32`s, `[tile][split][token][256]`; columns past `hidden` are left alone).
/// Launch [`TpPlan::grid`] blocks of `TP_WARPS` warps with the dynamic shared memory [`gemv_tile`] needs.
#[kernel(
    no_wait,
    // Three blocks per multiprocessor: `TP_RESIDENT_BLOCKS_PER_SM`.
    launch_bounds(128, 3),
    instances(tp_gemv_rows1<OneRowGroup>, tp_gemv_rows2<TwoRowGroups>),
    requires(
        len(w) == plan.k_local * plan.hidden,
        len(x) >= plan.tokens * plan.k_local,
        len(partials) >= plan.tiles * plan.splits * plan.tokens * 256
    )
)]
pub fn tp_gemv<G: RowGroups>(x: &[bf16], w: &[bf16], partials: &mut [f32], plan: TpPlan) {
    let out = VectorsMut::of(partials);
    // Kept in L2: the epilogue reads them next, and evicted by the weights streaming past they went back to
    // HBM, taking the weights' bandwidth (6% of the GEMV's time at 16 tokens).
    block_product::<G, _>(x, w, &plan, |_| move |at, v| out.store_kept(at, v));
}

/// This block's part of the product, every step's first phase: its columns of its partial tile (block
/// `block_rank()` of [`TpPlan::tile_of_block`]), computed by [`gemv_tile`] and handed vector by vector, as
/// [`store_tile`] lays them out, to the `put` that `destination(tile)` makes once the products are done (made
/// earlier, its addresses stay live through the product's loop, and the fused steps spilled more registers).
/// Block-collective, with [`gemv_tile`]'s shared memory.
#[inline(always)]
pub(super) fn block_product<G: RowGroups, P: Fn(usize, V16)>(
    x: &[bf16],
    w: &[bf16],
    plan: &TpPlan,
    destination: impl FnOnce(usize) -> P,
) {
    let (tile, r) = plan.tile_of_block(block_rank());
    let (acc, view) = gemv_tile::<G>(x, Vectors::of(w), plan, tile, r);
    let put = destination(tile);
    if let Some(acc) = acc {
        store_tile(plan, (tile, plan.block_in_tile(r).1), &acc, &view, put);
    }
}
