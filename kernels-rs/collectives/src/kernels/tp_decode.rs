//! Tensor-parallel decode: the row-parallel linear layer's product on each rank,
//! `y_partial[tokens, hidden] = x[tokens, k_local] · w[k_local, hidden]` in `bf16` with `f32` accumulation,
//! as split-K partial sums, then their sum over the ranks, the residual add and an RMSNorm — as three
//! kernels and the library's all-reduce ([`tp_gemv`](fn@tp_gemv), [`tp_split_sum`](fn@tp_split_sum), the
//! all-reduce, [`tp_norm`](fn@tp_norm)), as two ([`tp_gemv`](fn@tp_gemv), then
//! [`tp_reduce_norm`](fn@tp_reduce_norm)), or as one ([`tp_fused`](fn@tp_fused): each block pushes its tile
//! to the tile's owner as soon as it is done).
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
use ferrocomm_device::math::{fma, rsqrt};
use ferrocomm_device::prelude::*;
use ferrocomm_device::reduce::{sum_across_block, sum_across_warps};

use crate::element::Element;
use crate::layout::{TP_CHUNK_ROWS, TP_MAX_TOKENS, TP_TILE_COLS, TP_WARPS, TpPlan, tp_pad};

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

/// What the epilogue of a decode step reads and writes besides the partial sums: the residual and the
/// norm's weights (`tokens x hidden` and `hidden` `bf16`), the output (`tokens x hidden` `bf16`, on every
/// rank), and the symmetric buffers the reduced tiles travel in: `gather` (`tiles x tokens x 256` `f32`:
/// `y + residual`) and `squares` (`tiles x 16` `f32`: each tile's sum of squares per token).
struct Epilogue<'a> {
    residual: &'a [bf16],
    gamma: &'a [bf16],
    out: VectorsMut,
    gather: SymSliceMut<f32>,
    squares: SymSliceMut<f32>,
}

/// `[f32; 4]` from a vector of `f32` bits.
#[inline(always)]
fn floats(v: V16) -> [f32; 4] {
    v.map(f32::from_bits)
}

/// Reduces tile `tile` (this block; the caller owns the tile): every (token, 4 columns) item sums the
/// partial tiles `source(src, split)` (vectors of `[token][256]` `f32`) over every rank and split, adds the
/// residual, and goes into every rank's `gather`; the tile's sums of squares per token go into every rank's
/// `squares`. Then thread 0 raises every rank's `GATHERED` by one.
#[inline(always)]
fn reduce_tile(
    plan: &TpPlan,
    tile: usize,
    e: &Epilogue<'_>,
    session: &Session,
    source: impl Fn(usize, usize) -> Vectors,
) {
    let (tokens, hidden, world) = (plan.tokens as usize, plan.hidden as usize, team::world() as usize);
    let (t, threads) = Group::Block.position();
    let mut squares = [0.0f32; TP_MAX_TOKENS];
    let mut i = t;
    while i < tokens * TP_TILE_COLS / 4 {
        let (j, g) = (i / (TP_TILE_COLS / 4), i % (TP_TILE_COLS / 4));
        let col = tile * TP_TILE_COLS + 4 * g;
        if col < hidden {
            let mut z = [0.0f32; 4];
            for src in 0..world {
                for split in 0..plan.splits as usize {
                    let p = floats(source(src, split).load(i));
                    for (z, p) in z.iter_mut().zip(p) {
                        *z += p;
                    }
                }
            }
            for (c, z) in z.iter_mut().enumerate() {
                *z += e.residual[j * hidden + col + c].to_f32();
                squares[j] = fma(*z, *z, squares[j]);
            }
            let at = (tile * tokens * TP_TILE_COLS) / 4 + i;
            for ch in (0..world as u32).map(|q| session.channel(q)) {
                ch.remote(e.gather).vectors().store(at, z.map(f32::to_bits));
            }
        }
        i += threads;
    }
    let squares = sum_across_block(squares);
    if t < TP_MAX_TOKENS / 4 {
        let v = [0, 1, 2, 3].map(|c| squares[4 * t + c].to_bits());
        for ch in (0..world as u32).map(|q| session.channel(q)) {
            ch.remote(e.squares).vectors().store(tile * TP_MAX_TOKENS / 4 + t, v);
        }
    }
    // The block's stores, then one release per rank that covers them.
    sync_threads();
    if t == 0 {
        for q in 0..world as u32 {
            session.channel(q).signal(tp_pad::GATHERED).add_release(1);
        }
    }
}

/// Waits until every tile has been gathered here, then writes this block's share of the output:
/// `out[j, h] = (y + residual)[j, h] / sqrt(mean_h((y + residual)[j]²) + eps) * gamma[h]`, 8 columns per item.
#[inline(always)]
fn normalize(plan: &TpPlan, e: &Epilogue<'_>, session: &Session) {
    let (tokens, hidden, tiles) = (plan.tokens as usize, plan.hidden as usize, plan.tiles as usize);
    if thread_rank() == 0 {
        session.local(tp_pad::GATHERED).wait_ge(session.epoch() * tiles as u64);
    }
    sync_threads();
    let eps = f32::from_bits(plan.eps_bits as u32);
    let (gather, squares) = (e.gather.local().as_const().vectors(), e.squares.local().as_const().vectors());
    let (mut i, stride) = (global_thread_idx(), global_threads());
    while i < tokens * hidden / 8 {
        let (j, col) = (i / (hidden / 8), 8 * (i % (hidden / 8)));
        let mut sum = 0.0f32;
        for tile in 0..tiles {
            sum += floats(squares.load(tile * TP_MAX_TOKENS / 4 + j / 4))[j % 4];
        }
        let inv = rsqrt(sum / hidden as f32 + eps);
        let (tile, c) = (col / TP_TILE_COLS, col % TP_TILE_COLS);
        let at = ((tile * tokens + j) * TP_TILE_COLS + c) / 4;
        let (lo, hi) = (floats(gather.load(at)), floats(gather.load(at + 1)));
        let g = <bf16 as Element>::unpack(Vectors::of(e.gamma).load(col / 8));
        let z = [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]];
        let mut y = [0.0f32; 8];
        for ((y, z), g) in y.iter_mut().zip(z).zip(g) {
            *y = z * inv * g;
        }
        e.out.store(i, <bf16 as Element>::pack(y));
        i += stride;
    }
}

/// The epilogue of the two-kernel decode step: every rank's [`tp_gemv`](fn@tp_gemv) partial sums (in
/// `partials`, read on the peers) are reduced per tile by the tile's owner (rank `tile % world`), with the
/// residual added, gathered to every rank, and normalised (RMSNorm with `gamma`) into `out`. Raises
/// `ready` as it starts, so a peer reads this rank's partials only once its GEMV (earlier in the stream)
/// is done. Launch `plan.tiles` blocks of `TP_WARPS` warps with
/// `sum_across_block_bytes(16, TP_WARPS)` bytes of dynamic shared memory; every block must be co-resident.
#[kernel(requires(
    len(partials) >= plan.tiles * plan.splits * plan.tokens * 256,
    len(gather) >= plan.tiles * plan.tokens * 256,
    len(squares) >= plan.tiles * 16,
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
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let session = pad.session();
    let epoch = session.epoch();
    let e = Epilogue { residual, gamma, out: VectorsMut::of(out), gather, squares };
    if block_rank() == 0 && thread_rank() == 0 {
        for ch in session.peers() {
            ch.signal(tp_pad::ready(rank)).set_release(epoch);
        }
    }
    let tile = block_rank() as usize;
    if tile < plan.tiles as usize && tile % world == rank {
        if thread_rank() == 0 {
            for ch in session.peers() {
                ch.inbox(tp_pad::ready(ch.peer() as usize)).wait_ge(epoch);
            }
        }
        sync_threads();
        let peers: [Option<PeerSlice<f32>>; crate::layout::MAX_WORLD] =
            core::array::from_fn(|q| (q < world).then(|| session.channel(q as u32).remote_input(partials)));
        reduce_tile(&plan, tile, &e, &session, |src, split| {
            let p = peers[src].expect("a rank of the team");
            p.vectors().sub(plan.partial(tile, split) * 4, plan.tokens as usize * TP_TILE_COLS * 4)
        });
    }
    normalize(&plan, &e, &session);
}

/// The one-kernel decode step: each block computes its partial tile (as [`tp_gemv`](fn@tp_gemv)) and stores
/// it straight into the tile owner's `partials` (region `rank`: `world` regions of `plan.partials_len()`),
/// then adds one to the owner's `arrived(tile)`; the owner's split-0 block of each tile waits for all of them,
/// reduces the tile with the residual, gathers it to every rank, and every block then normalises its share of
/// `out`. Launch `plan.tiles * plan.splits` blocks of `TP_WARPS` warps with
/// `sum_across_warps_bytes(32, TP_WARPS)` bytes of dynamic shared memory; every block must be co-resident.
#[kernel(requires(
    len(w) == plan.k_local * plan.hidden,
    len(x) >= plan.tokens * plan.k_local,
    len(partials) >= world() * plan.tiles * plan.splits * plan.tokens * 256,
    len(gather) >= plan.tiles * plan.tokens * 256,
    len(squares) >= plan.tiles * 16,
    len(residual) >= plan.tokens * plan.hidden,
    len(gamma) >= plan.hidden,
    len(out) >= plan.tokens * plan.hidden
))]
#[allow(clippy::too_many_arguments)]
pub fn tp_fused(
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
    let session = pad.session();
    let splits = plan.splits as usize;
    let (tile, split) = (block_rank() as usize / splits, block_rank() as usize % splits);
    let owner = session.channel((tile % world) as u32);
    let region = plan.partials_len();
    let (sums, share) = gemv_tile(x, Vectors::of(w), &plan, tile, split);
    // This rank's region of the owner's partials, which the owner reads only after every block's add below.
    let to = owner.remote(partials).vectors().sub(rank * region * 4, region * 4);
    store_tile(to, &plan, tile, split, &sums, &share);
    sync_threads();
    if thread_rank() == 0 {
        owner.signal(tp_pad::arrived(tile)).add_release(1);
    }
    let e = Epilogue { residual, gamma, out: VectorsMut::of(out), gather, squares };
    if tile % world == rank && split == 0 {
        if thread_rank() == 0 {
            let all = (world * splits) as u64;
            session.local(tp_pad::arrived(tile)).wait_ge(session.epoch() * all);
        }
        sync_threads();
        let mine = partials.local().as_const().vectors();
        reduce_tile(&plan, tile, &e, &session, |src, split| {
            mine.sub((src * region + plan.partial(tile, split)) * 4, plan.tokens as usize * TP_TILE_COLS * 4)
        });
    }
    normalize(&plan, &e, &session);
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
        let mut sum = [0.0f32; 4];
        for split in 0..splits {
            for (s, p) in sum.iter_mut().zip(floats(from.load(plan.partial(tile, split) / 4 + k))) {
                *s += p;
            }
        }
        to.store(i, sum.map(f32::to_bits));
        i += stride;
    }
}

/// The three-kernel step's last: block `j` normalises token `j`: `out[j] = (y[j] + residual[j]) /
/// sqrt(mean((y[j] + residual[j])²) + eps) * gamma`, with `y` as [`tp_split_sum`](fn@tp_split_sum) lays it
/// out (after the all-reduce). Launch `plan.tokens` blocks of whole warps with
/// `sum_across_block_bytes(1, warps)` bytes of dynamic shared memory.
#[kernel(
    no_wait,
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
            for v in z(col) {
                squares = fma(v, v, squares);
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
            let mut o = z(col);
            for (o, g) in o.iter_mut().zip(g) {
                *o *= inv * g;
            }
            out.store((j * hidden + col) / 8, <bf16 as Element>::pack(o));
            col += 8 * threads;
        }
    }
}
