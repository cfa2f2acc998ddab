//! Tensor-parallel decode: the row-parallel linear layer's product on each rank,
//! `y_partial[tokens, hidden] = x[tokens, k_local] · w[k_local, hidden]` in `bf16` with `f32` accumulation,
//! as split-K partial sums, then their sum over the ranks, the residual add and an RMSNorm — as three
//! kernels and the library's all-reduce ([`tp_gemv`](fn@tp_gemv), [`tp_split_sum`](fn@tp_split_sum), the
//! all-reduce, [`tp_norm`](fn@tp_norm)), as two ([`tp_gemv`](fn@tp_gemv), then
//! [`tp_reduce_norm`](fn@tp_reduce_norm)), or as one, each block pushing its tile to the tile's owner as soon
//! as it is done ([`tp_fused_ll`](fn@tp_fused_ll) in LL packets for few tokens, [`tp_fused`](fn@tp_fused) with
//! a put and a signal per tile for more).
//!
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
use ferrocomm_device::ll::ll_flag;
use ferrocomm_device::math::{fma, rsqrt};
use ferrocomm_device::mma::{mma_m16n8k16_bf16, pack_high_halves, pack_low_halves};
use ferrocomm_device::prelude::*;
use ferrocomm_device::reduce::{sum_across_block, sum_across_warp_groups};
use ferrocomm_device::trace::block_mark;

use crate::element::Element;
use crate::layout::{TP_ITERATION_ROWS, TP_MAX_TOKENS, TP_TILE_COLS, TP_WARPS, TpPlan, ll_region, tp_pad};

/// Polls of the LL step's waits in a tight loop before they back off. Its tile owners and normalising blocks
/// wait for the slowest blocks of the product, a good part of the kernel: hundreds of blocks polling without
/// pause took the memory system from the blocks they waited for (the 16-token step ran twice as long).
const TAIL_SPINS: u32 = 16;

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
    let (tile, r) = plan.tile_of_block(block_rank());
    let (acc, view) = gemv_tile::<G>(x, Vectors::of(w), &plan, tile, r);
    let out = VectorsMut::of(partials);
    if let Some(acc) = acc {
        // Kept in L2: the epilogue reads them next, and evicted by the weights streaming past they went back
        // to HBM, taking the weights' bandwidth (6% of the GEMV's time at 16 tokens).
        store_tile(&plan, (tile, plan.block_in_tile(r).1), &acc, &view, |at, v| out.store_kept(at, v));
    }
}

/// What the epilogue of a decode step reads and writes besides the partial sums and the reduced tiles:
/// the residual and the norm's weights (`tokens x hidden` and `hidden` `bf16`) and the output (`tokens x
/// hidden` `bf16`, on every rank).
struct Epilogue<'a> {
    residual: &'a [bf16],
    gamma: &'a [bf16],
    out: VectorsMut,
}

/// `[f32; 4]` from a vector of `f32` bits.
#[inline(always)]
fn floats(v: V16) -> [f32; 4] {
    v.map(f32::from_bits)
}

/// `values[j]`, chosen by comparisons: an array indexed by a variable lives in local memory, where every
/// access is a round trip.
#[inline(always)]
fn pick<const N: usize>(values: &[f32; N], j: usize) -> f32 {
    values.iter().enumerate().fold(0.0, |picked, (q, &v)| if q == j { v } else { picked })
}

/// `values[j] = value`, by comparisons, for the reason [`pick`] gives.
#[inline(always)]
fn assign<const N: usize>(values: &mut [f32; N], j: usize, value: f32) {
    for (q, v) in values.iter_mut().enumerate() {
        if q == j {
            *v = value;
        }
    }
}

/// The sum of `count` vectors of `f32`, eight at a time from `batch(s, live)` (terms `s .. s + live`,
/// `live <= 8`, and zeros past them), added in order: the eight terms' loads are in flight together, so a
/// sum waits on memory once per eight terms. (A loop of load-then-add waits once per term: the two-rank
/// step's epilogues sum twelve partial tiles per vector.)
#[inline(always)]
fn add_vectors(count: usize, batch: impl Fn(usize, usize) -> [V16; 8]) -> [f32; 4] {
    let add = |z: [f32; 4], v: V16| {
        let p = floats(v);
        [z[0] + p[0], z[1] + p[1], z[2] + p[2], z[3] + p[3]]
    };
    let mut z = [0.0f32; 4];
    let mut s = 0;
    while s < count {
        let [v0, v1, v2, v3, v4, v5, v6, v7] = batch(s, (count - s).min(8));
        z = add(add(add(add(add(add(add(add(z, v0), v1), v2), v3), v4), v5), v6), v7);
        s += 8;
    }
    z
}

/// [`add_vectors`]'s batches as plain loads: term `s + q` is `load(s + q)`.
#[inline(always)]
fn loads(load: impl Fn(usize) -> V16) -> impl Fn(usize, usize) -> [V16; 8] {
    move |s, live| {
        let term = |q: usize| if q < live { load(s + q) } else { [0; 4] };
        // Written out: `array::from_fn` over eight loads stays a loop and goes through local memory.
        [term(0), term(1), term(2), term(3), term(4), term(5), term(6), term(7)]
    }
}

/// Reduces share `part` of tile `tile` (of [`TpPlan::reduce_parts`]; the caller owns the tile): every (token,
/// 4 columns) vector `i` of the share is `sum(i)` (the tile's partial sums over every rank and split) plus
/// the residual, and goes to `publish(at, z)`, `at` its vector in the reduced tiles (`[tile][token][256]`
/// `f32`); the share's sums of squares per token (its entry: `tile * parts + part`) go to
/// `publish_squares(t, v)`, vector `t < TP_MAX_TOKENS / 4` of the entry. Block-collective; making what is
/// published visible is the caller's.
#[inline(always)]
fn reduce_share(
    plan: &TpPlan,
    (tile, part): (usize, usize),
    e: &Epilogue<'_>,
    sum: impl Fn(usize) -> [f32; 4],
    publish: impl Fn(usize, V16),
    publish_squares: impl Fn(usize, V16),
) {
    let (tokens, hidden) = (plan.tokens as usize, plan.hidden as usize);
    let (t, threads) = Group::Block.position();
    let (vectors, parts) = (tokens * TP_TILE_COLS / 4, plan.reduce_parts(team::world() as usize));
    let share = vectors.div_ceil(parts);
    let end = ((part + 1) * share).min(vectors);
    let mut squares = [0.0f32; TP_MAX_TOKENS];
    let mut i = part * share + t;
    while i < end {
        let (j, g) = (i / (TP_TILE_COLS / 4), i % (TP_TILE_COLS / 4));
        let col = tile * TP_TILE_COLS + 4 * g;
        if col < hidden {
            let mut z = sum(i);
            let mut square = pick(&squares, j);
            for (c, z) in z.iter_mut().enumerate() {
                *z += e.residual[j * hidden + col + c].to_f32();
                square = fma(*z, *z, square);
            }
            assign(&mut squares, j, square);
            publish((tile * tokens * TP_TILE_COLS) / 4 + i, z.map(f32::to_bits));
        }
        i += threads;
    }
    let squares = sum_across_block(squares);
    if t < TP_MAX_TOKENS / 4 {
        publish_squares(t, [0, 1, 2, 3].map(|c| pick(&squares, 4 * t + c).to_bits()));
    }
}

/// The reduced tiles and their sums of squares, in symmetric buffers of `f32`: `gather` (`tiles x tokens x
/// 256`: `y + residual`) and `squares` (`tiles x reduce_parts x 16`: each tile share's sums per token).
#[derive(Clone, Copy)]
struct Gathered {
    gather: SymSliceMut<f32>,
    squares: SymSliceMut<f32>,
}

/// [`reduce_share`] of the partial tiles `source(src, split)` (vectors of `[token][256]` `f32`), stored into
/// every rank's [`Gathered`] buffers; then thread 0 raises every rank's `GATHERED` by one.
#[inline(always)]
fn reduce_tile(
    plan: &TpPlan,
    (tile, part): (usize, usize),
    e: &Epilogue<'_>,
    (out, session): (Gathered, &Session),
    source: impl Fn(usize, usize) -> Vectors,
) {
    let ranks = || (0..team::world()).map(|q| session.channel(q));
    let (splits, parts) = (plan.splits as usize, plan.reduce_parts(team::world() as usize));
    reduce_share(
        plan,
        (tile, part),
        e,
        // Every rank's splits as one sum: term `q` is rank `q / splits`'s split `q % splits`.
        |i| add_vectors(team::world() as usize * splits, loads(|q| source(q / splits, q % splits).load(i))),
        |at, z| ranks().for_each(|ch| ch.remote(out.gather).vectors().store(at, z)),
        |t, v| {
            let at = (tile * parts + part) * TP_MAX_TOKENS / 4 + t;
            ranks().for_each(|ch| ch.remote(out.squares).vectors().store(at, v));
        },
    );
    // The block's stores, then one release per rank that covers them.
    sync_threads();
    if thread_rank() == 0 {
        for q in 0..team::world() {
            session.channel(q).signal(tp_pad::GATHERED).add_release(1);
        }
    }
}

/// The tile share this block of an epilogue reduces, if any: (tile, share). A rank's first blocks take its
/// tiles (`rank`, `rank + world`, ...) in order, [`TpPlan::reduce_parts`] blocks each. In the fused step
/// these are not the tile's own blocks, which can be fewer than its shares (7 splits per tile at H = K =
/// 7168 with two ranks on one GPU, 8 shares at 16 tokens: some threads would sum two vectors, one after the
/// other).
#[inline(always)]
fn share_of_block(plan: &TpPlan) -> Option<(usize, usize)> {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let (b, parts) = (block_rank(), plan.reduce_parts(world) as u32);
    let tile = rank + world * (b / parts) as usize;
    (tile < plan.tiles as usize).then_some((tile, (b % parts) as usize))
}

/// How many blocks write the output: [`TpPlan::norm_blocks`], a thread per item of 8 columns (or the whole
/// grid, if fewer). The others return at once, so that no more blocks than needed wait for the reduced tiles
/// (hundreds of pollers slow down the stores they wait for) or stay resident.
#[inline(always)]
fn normalizing_blocks(plan: &TpPlan) -> usize {
    plan.norm_blocks().min(grid_size() as usize)
}

/// This block's share of the output (one of the first `blocks`), once every tile is reduced: `out[j, h] =
/// (y + residual)[j, h] / sqrt(mean_h((y + residual)[j]²) + eps) * gamma[h]`, 8 columns per item.
/// `entry(n)` is entry `n`'s four vectors of sums of squares (see [`reduce_share`]), `pair(at)` the reduced
/// tiles' vectors `at` and `at + 1`.
#[inline(always)]
fn write_norm(
    plan: &TpPlan,
    e: &Epilogue<'_>,
    blocks: usize,
    entry: impl Fn(usize) -> [V16; 4],
    pair: impl Fn(usize) -> [V16; 2],
) {
    let (tokens, hidden, tiles) = (plan.tokens as usize, plan.hidden as usize, plan.tiles as usize);
    let eps = f32::from_bits(plan.eps_bits as u32);
    // Every token's sum of squares over the tiles, once per block: each thread adds up some entries' 16
    // sums (four vectors), then one block-wide sum.
    let (t, threads) = Group::Block.position();
    let mut part = [0.0f32; TP_MAX_TOKENS];
    let mut n = t;
    while n < tiles * plan.reduce_parts(team::world() as usize) {
        let sums = entry(n);
        // Indexed: an array's by-value iterator keeps the array in local memory.
        for q in 0..TP_MAX_TOKENS / 4 {
            let v = floats(sums[q]);
            for c in 0..4 {
                part[4 * q + c] += v[c];
            }
        }
        n += threads;
    }
    let sums = sum_across_block(part);
    block_mark("norm sums");
    let (mut i, stride, items) = (global_thread_idx(), blocks * threads, tokens * hidden / 8);
    while i < items {
        let (j, col) = (i / (hidden / 8), 8 * (i % (hidden / 8)));
        let inv = rsqrt(pick(&sums, j) / hidden as f32 + eps);
        let (tile, c) = (col / TP_TILE_COLS, col % TP_TILE_COLS);
        let [lo, hi] = pair(((tile * tokens + j) * TP_TILE_COLS + c) / 4).map(floats);
        let g = <bf16 as Element>::unpack(Vectors::of(e.gamma).load(col / 8));
        let z = [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]];
        e.out.store(i, <bf16 as Element>::pack(core::array::from_fn(|c| z[c] * inv * g[c])));
        i += stride;
    }
    block_mark("normalized");
}

/// [`write_norm`] by the first [`normalizing_blocks`] once every tile's share has raised this rank's
/// `GATHERED`, from this rank's [`Gathered`] buffers.
#[inline(always)]
fn normalize(plan: &TpPlan, e: &Epilogue<'_>, (from, session): (Gathered, &Session)) {
    let blocks = normalizing_blocks(plan);
    if block_rank() as usize >= blocks {
        return;
    }
    let entries = plan.tiles as usize * plan.reduce_parts(team::world() as usize);
    if thread_rank() == 0 {
        session.local(tp_pad::GATHERED).wait_ge(session.epoch() * entries as u64);
    }
    sync_threads();
    let (gathered, sums) = (from.gather.local().as_const().vectors(), from.squares.local().as_const().vectors());
    write_norm(
        plan,
        e,
        blocks,
        |n| core::array::from_fn(|q| sums.load(n * TP_MAX_TOKENS / 4 + q)),
        |at| [gathered.load(at), gathered.load(at + 1)],
    );
}

/// The epilogue of the two-kernel decode step: every rank's [`tp_gemv`](fn@tp_gemv) partial sums (in
/// `partials`, read on the peers) are reduced per tile by the tile's owner (rank `tile % world`, its first
/// blocks a share each: [`share_of_block`]), with the residual added, gathered to every rank (`gather`:
/// `tiles x tokens x 256` `f32`, `y + residual`; `squares`: `tiles x reduce_parts x 16` `f32`, each tile
/// share's sums of squares per token) and normalised (RMSNorm with `gamma`) into `out`. Raises `ready` as it
/// starts, so a peer reads this rank's partials only once its GEMV (earlier in the stream) is done. Launch
/// [`TpPlan::epilogue_grid`] blocks of `TP_WARPS` warps with `sum_across_block_bytes(16, TP_WARPS)` bytes of
/// dynamic shared memory; every block must be co-resident.
#[kernel(requires(
    len(partials) >= plan.tiles * plan.splits * plan.tokens * 256,
    len(gather) >= plan.tiles * plan.tokens * 256,
    // Room for a tile's most shares, one per 128 of its vectors (`TpPlan::reduce_parts`).
    len(squares) >= plan.tiles * ((plan.tokens + 1) / 2) * 16,
    len(residual) >= plan.tokens * plan.hidden,
    len(gamma) >= plan.hidden,
    len(out) >= plan.tokens * plan.hidden
))]
#[allow(clippy::too_many_arguments)]
pub fn tp_reduce_norm(
    partials: SymSlice<f32>,
    gather: SymSliceMut<f32>,
    squares: SymSliceMut<f32>,
    residual: &[bf16],
    gamma: &[bf16],
    out: &mut [bf16],
    pad: SignalPad,
    plan: TpPlan,
) {
    let rank = team::rank() as usize;
    let session = pad.session();
    let epoch = session.epoch();
    let e = Epilogue { residual, gamma, out: VectorsMut::of(out) };
    let gathered = Gathered { gather, squares };
    if block_rank() == 0 && thread_rank() == 0 {
        for ch in session.peers() {
            ch.signal(tp_pad::ready(rank)).set_release(epoch);
        }
    }
    if let Some((owned, part)) = share_of_block(&plan) {
        if thread_rank() == 0 {
            for ch in session.peers() {
                ch.inbox(tp_pad::ready(ch.peer() as usize)).wait_ge(epoch);
            }
        }
        sync_threads();
        reduce_tile(&plan, (owned, part), &e, (gathered, &session), |src, split| {
            let p = session.channel(src as u32).remote_input(partials);
            p.vectors().sub(plan.partial(owned, split) * 4, plan.tokens as usize * TP_TILE_COLS * 4)
        });
    }
    normalize(&plan, &e, (gathered, &session));
}

/// The one-kernel decode step, put + signal per tile: each block computes its columns of a partial tile (as
/// [`tp_gemv`](fn@tp_gemv)) and stores them straight into the tile owner's `partials` (region `rank`:
/// `world` regions of `plan.partials_len()`), then adds one to the owner's `arrived(tile)`; the owner's
/// first blocks wait for all of them and reduce a share of a tile each ([`share_of_block`]) with the
/// residual, gathering it to every rank, and the first blocks then normalise `out`. Launch
/// [`TpPlan::grid`] blocks of `TP_WARPS` warps with `sum_across_block_bytes(16, TP_WARPS)` bytes of dynamic
/// shared memory (and at least [`gemv_tile`]'s); every block must be co-resident. `gather` and `squares` as
/// for [`tp_reduce_norm`](fn@tp_reduce_norm). The protocol for larger tiles: [`tp_fused_ll`](fn@tp_fused_ll)
/// for small ones.
#[kernel(
    // Three blocks per multiprocessor: `TP_RESIDENT_BLOCKS_PER_SM`.
    launch_bounds(128, 3),
    instances(tp_fused_rows1<OneRowGroup>, tp_fused_rows2<TwoRowGroups>),
    requires(
    len(w) == plan.k_local * plan.hidden,
    len(x) >= plan.tokens * plan.k_local,
    len(partials) >= world() * plan.tiles * plan.splits * plan.tokens * 256,
    len(gather) >= plan.tiles * plan.tokens * 256,
    // Room for a tile's most shares, one per 128 of its vectors (`TpPlan::reduce_parts`).
    len(squares) >= plan.tiles * ((plan.tokens + 1) / 2) * 16,
    len(residual) >= plan.tokens * plan.hidden,
    len(gamma) >= plan.hidden,
    len(out) >= plan.tokens * plan.hidden
))]
#[allow(clippy::too_many_arguments)]
pub fn tp_fused<G: RowGroups>(
    x: &[bf16],
    w: &[bf16],
    partials: SymSliceMut<f32>,
    gather: SymSliceMut<f32>,
    squares: SymSliceMut<f32>,
    residual: &[bf16],
    gamma: &[bf16],
    out: &mut [bf16],
    pad: SignalPad,
    plan: TpPlan,
) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    block_mark("start");
    let session = pad.session();
    let (tile, r) = plan.tile_of_block(block_rank());
    let owner = session.channel((tile % world) as u32);
    let region = plan.partials_len();
    let (acc, view) = gemv_tile::<G>(x, Vectors::of(w), &plan, tile, r);
    // This rank's region of the owner's partials, which the owner reads only after every block's add below.
    let to = owner.remote(partials).vectors().sub(rank * region * 4, region * 4);
    if let Some(acc) = acc {
        store_tile(&plan, (tile, plan.block_in_tile(r).1), &acc, &view, |at, v| to.store_kept(at, v));
    }
    sync_threads();
    if thread_rank() == 0 {
        owner.signal(tp_pad::arrived(tile)).add_release(1);
    }
    block_mark("pushed");
    let e = Epilogue { residual, gamma, out: VectorsMut::of(out) };
    let gathered = Gathered { gather, squares };
    if let Some((owned, part)) = share_of_block(&plan) {
        if thread_rank() == 0 {
            let all = (world * plan.blocks_per_tile()) as u64;
            session.local(tp_pad::arrived(owned)).wait_ge(session.epoch() * all);
        }
        sync_threads();
        let mine = partials.local().as_const().vectors();
        reduce_tile(&plan, (owned, part), &e, (gathered, &session), |src, split| {
            mine.sub((src * region + plan.partial(owned, split)) * 4, plan.tokens as usize * TP_TILE_COLS * 4)
        });
        block_mark("reduced");
    }
    normalize(&plan, &e, (gathered, &session));
}

/// The one-kernel decode step on LL packets, for small tiles (few tokens): no fence, no signal and no
/// barrier between blocks, where [`tp_fused`](fn@tp_fused) has a release and an acquire on each of its two
/// hops. Each block computes its columns of a partial tile (as [`tp_gemv`](fn@tp_gemv)) and stores them
/// straight into the tile owner's `partials` as LL packets (region `(epoch parity, rank)` of `2 * world`
/// regions of `plan.partials_len() / 2` packets: [`ll_region`]); the owner's first blocks poll a tile's
/// packets from every rank and split and reduce a share of it each ([`share_of_block`]) with the residual,
/// sending it to every rank's `gather` (`tiles x tokens x 128` packets) and its sums of squares to every
/// rank's `squares` (`tiles x reduce_parts x 8` packets), and the first blocks then poll those and normalise
/// `out`. Launch [`TpPlan::grid`] blocks of `TP_WARPS` warps with
/// `sum_across_block_bytes(16, TP_WARPS)` bytes of dynamic shared memory (and at least [`gemv_tile`]'s);
/// every block must be co-resident.
///
/// Every packet is polled for, by each thread that reads it, and the packets are twice the data: with many
/// tokens the pollers (most blocks, at 16 tokens) and the bytes cost more than the fences they save, and
/// [`tp_fused`](fn@tp_fused) is faster (`Tuning::tp_ll_max_tokens`).
///
/// Reuse without resets: packets carry the pad's `ll_flag(epoch)`. A rank writes partials of parity `p` at
/// epoch `e + 2` only after its epoch `e + 1`, which received every owner's reduced tiles of `e + 1` — so
/// every owner had begun `e + 1`, and finished reading parity `p` of `e`. An owner sends reduced tiles of
/// `e + 1` only once it has every rank's partials of `e + 1`: every rank had finished `e`, and with it its
/// reading of `gather` and `squares`, which need no parity.
#[kernel(
    // Three blocks per multiprocessor: `TP_RESIDENT_BLOCKS_PER_SM`.
    launch_bounds(128, 3),
    instances(tp_fused_ll_rows1<OneRowGroup>, tp_fused_ll_rows2<TwoRowGroups>),
    requires(
    len(w) == plan.k_local * plan.hidden,
    len(x) >= plan.tokens * plan.k_local,
    len(partials) >= world() * plan.tiles * plan.splits * plan.tokens * 256,
    len(gather) >= plan.tiles * plan.tokens * 128,
    // Room for a tile's most shares, one per 128 of its vectors (`TpPlan::reduce_parts`).
    len(squares) >= plan.tiles * ((plan.tokens + 1) / 2) * 8,
    len(residual) >= plan.tokens * plan.hidden,
    len(gamma) >= plan.hidden,
    len(out) >= plan.tokens * plan.hidden
))]
#[allow(clippy::too_many_arguments)]
pub fn tp_fused_ll<G: RowGroups>(
    x: &[bf16],
    w: &[bf16],
    partials: SymSliceMut<LlPacket>,
    gather: SymSliceMut<LlPacket>,
    squares: SymSliceMut<LlPacket>,
    residual: &[bf16],
    gamma: &[bf16],
    out: &mut [bf16],
    pad: SignalPad,
    plan: TpPlan,
) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    block_mark("start");
    let session = pad.session();
    let (flag, parity) = (ll_flag(session.epoch()), session.epoch() & 1);
    let splits = plan.splits as usize;
    let (tile, r) = plan.tile_of_block(block_rank());
    // Packets of a rank's region: two per vector of the partial tiles.
    let slot = plan.partials_len() / 2;
    let (acc, view) = gemv_tile::<G>(x, Vectors::of(w), &plan, tile, r);
    // This rank's region of the owner's partials; vector `at` of the tiles is its packets `2at, 2at + 1`.
    let to = session.channel((tile % world) as u32).remote(partials).slice(ll_region(parity, rank, world, slot), slot);
    if let Some(acc) = acc {
        store_tile(&plan, (tile, plan.block_in_tile(r).1), &acc, &view, |at, v| to.store_vector(at, v, flag));
    }
    block_mark("pushed");
    let e = Epilogue { residual, gamma, out: VectorsMut::of(out) };
    let ranks = || (0..world as u32).map(|q| session.channel(q));
    if let Some((owned, part)) = share_of_block(&plan) {
        let mine = partials.local().as_const();
        // Vector `i` of split `s`'s partial tile from rank `src` is vector `first(src) + s * step + i` of `mine`.
        let first = |src: usize| ll_region(parity, src, world, slot) / 2 + plan.partial(owned, 0) / 4;
        let step = plan.tokens as usize * TP_TILE_COLS / 4;
        reduce_share(
            &plan,
            (owned, part),
            &e,
            // Rank by rank (no division in the packets' addresses), each one's splits polled eight at a time.
            |i| {
                (0..world).fold([0.0f32; 4], |z, src| {
                    let p = add_vectors(splits, |s, live| {
                        mine.poll_vectors::<8>(|q| first(src) + (s + q) * step + i, live, flag, TAIL_SPINS)
                    });
                    [z[0] + p[0], z[1] + p[1], z[2] + p[2], z[3] + p[3]]
                })
            },
            |at, z| ranks().for_each(|ch| ch.remote(gather).store_vector(at, z, flag)),
            |t, v| {
                let at = (owned * plan.reduce_parts(world) + part) * TP_MAX_TOKENS / 4 + t;
                ranks().for_each(|ch| ch.remote(squares).store_vector(at, v, flag));
            },
        );
        block_mark("reduced");
    }
    let blocks = normalizing_blocks(&plan);
    if block_rank() as usize >= blocks {
        return;
    }
    let (gathered, sums) = (gather.local().as_const(), squares.local().as_const());
    write_norm(
        &plan,
        &e,
        blocks,
        |n| sums.poll_vectors::<4>(|q| n * TP_MAX_TOKENS / 4 + q, 4, flag, TAIL_SPINS),
        |at| gathered.poll_vectors::<2>(|q| at + q, 2, flag, TAIL_SPINS),
    );
}

/// The three-kernel step's middle: `y[tile][token][256]` = the sum over the splits of this rank's
/// [`tp_gemv`](fn@tp_gemv) partial tiles, which the library's all-reduce then sums over the ranks.
#[kernel(
    no_wait,
    requires(len(partials) >= plan.tiles * plan.splits * plan.tokens * 256, len(y) >= plan.tiles * plan.tokens * 256)
)]
pub fn tp_split_sum(partials: &[f32], y: &mut [f32], plan: TpPlan) {
    let (tokens, splits) = (plan.tokens as usize, plan.splits as usize);
    let (from, to) = (Vectors::of(partials), VectorsMut::of(y));
    let per_tile = tokens * TP_TILE_COLS / 4;
    let (mut i, stride) = (global_thread_idx(), global_threads());
    while i < plan.tiles as usize * per_tile {
        let (tile, k) = (i / per_tile, i % per_tile);
        let sum = add_vectors(splits, loads(|split| from.load(plan.partial(tile, split) / 4 + k)));
        to.store(i, sum.map(f32::to_bits));
        i += stride;
    }
}

/// The three-kernel step's last: block `j` normalises token `j`: `out[j] = (y[j] + residual[j]) /
/// sqrt(mean((y[j] + residual[j])²) + eps) * gamma`, with `y` as [`tp_split_sum`](fn@tp_split_sum) lays it
/// out (after the all-reduce). Launch `plan.tokens` blocks of whole warps (a thread per 8 columns keeps
/// each thread to one load of each input) with `sum_across_block_bytes(1, warps)` bytes of dynamic shared
/// memory.
#[kernel(
    no_wait,
    // Registers for 1024 threads: the host launches a thread per 8 columns.
    launch_bounds(1024),
    requires(
        len(y) >= plan.tiles * plan.tokens * 256,
        len(residual) >= plan.tokens * plan.hidden,
        len(gamma) >= plan.hidden,
        len(out) >= plan.tokens * plan.hidden
    )
)]
pub fn tp_norm(y: &[f32], residual: &[bf16], gamma: &[bf16], out: &mut [bf16], plan: TpPlan) {
    let (tokens, hidden) = (plan.tokens as usize, plan.hidden as usize);
    let j = block_rank() as usize;
    let (t, threads) = Group::Block.position();
    let (y, out) = (Vectors::of(y), VectorsMut::of(out));
    // Columns `col .. col + 8` of token `j`: `y + residual`.
    let z = |col: usize| {
        let at = ((col / TP_TILE_COLS * tokens + j) * TP_TILE_COLS + col % TP_TILE_COLS) / 4;
        let (lo, hi) = (floats(y.load(at)), floats(y.load(at + 1)));
        let r = <bf16 as Element>::unpack(Vectors::of(residual).load((j * hidden + col) / 8));
        [lo[0] + r[0], lo[1] + r[1], lo[2] + r[2], lo[3] + r[3], hi[0] + r[4], hi[1] + r[5], hi[2] + r[6], hi[3] + r[7]]
    };
    let mut squares = 0.0f32;
    if j < tokens {
        let mut col = 8 * t;
        while col < hidden {
            let v = z(col);
            // Indexed: an array's by-value iterator keeps the array in local memory.
            #[allow(clippy::needless_range_loop)]
            for c in 0..8 {
                squares = fma(v[c], v[c], squares);
            }
            col += 8 * threads;
        }
    }
    let [total] = sum_across_block([squares]);
    if j < tokens {
        let inv = rsqrt(total / hidden as f32 + f32::from_bits(plan.eps_bits as u32));
        let mut col = 8 * t;
        while col < hidden {
            let g = <bf16 as Element>::unpack(Vectors::of(gamma).load(col / 8));
            let o = z(col);
            out.store((j * hidden + col) / 8, <bf16 as Element>::pack(core::array::from_fn(|c| o[c] * (inv * g[c]))));
            col += 8 * threads;
        }
    }
}
