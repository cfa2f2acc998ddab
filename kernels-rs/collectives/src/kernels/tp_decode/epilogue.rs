//! The epilogues: the partial tiles' sum over ranks and splits, the residual add and the RMSNorm.

use ferrocomm_device::kernel;
use ferrocomm_device::math::{fma, rsqrt};
use ferrocomm_device::prelude::*;
use ferrocomm_device::reduce::sum_across_block;
use ferrocomm_device::trace::block_mark;

use crate::element::Element;
use crate::layout::{TP_MAX_TOKENS, TP_TILE_COLS, TpPlan, tp_pad};

/// What the epilogue of a decode step reads and writes besides the partial sums and the reduced tiles:
/// the residual and the norm's weights (`tokens x hidden` and `hidden` `bf16`) and the output (`tokens x
/// hidden` `bf16`, on every rank).
pub(super) struct Epilogue<'a> {
    pub(super) residual: &'a [bf16],
    pub(super) gamma: &'a [bf16],
    pub(super) out: VectorsMut,
}

/// `[f32; 4]` from a vector of `f32` bits.
#[inline(always)]
pub(super) fn floats(v: V16) -> [f32; 4] {
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
pub(super) fn add_vectors(count: usize, batch: impl Fn(usize, usize) -> [V16; 8]) -> [f32; 4] {
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
pub(super) fn loads(load: impl Fn(usize) -> V16) -> impl Fn(usize, usize) -> [V16; 8] {
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
pub(super) fn reduce_share(
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
pub(super) struct Gathered {
    pub(super) gather: SymSliceMut<f32>,
    pub(super) squares: SymSliceMut<f32>,
}

/// [`reduce_share`] of the partial tiles `source(src, split)` (vectors of `[token][256]` `f32`), stored into
/// every rank's [`Gathered`] buffers; then thread 0 raises every rank's `GATHERED` by one.
#[inline(always)]
pub(super) fn reduce_tile(
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
pub(super) fn share_of_block(plan: &TpPlan) -> Option<(usize, usize)> {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let (b, parts) = (block_rank(), plan.reduce_parts(world) as u32);
    let tile = rank + world * (b / parts) as usize;
    (tile < plan.tiles as usize).then_some((tile, (b % parts) as usize))
}

/// How many blocks write the output: [`TpPlan::norm_blocks`], a thread per item of 8 columns (or the whole
/// grid, if fewer). The others return at once, so that no more blocks than needed wait for the reduced tiles
/// (hundreds of pollers slow down the stores they wait for) or stay resident.
#[inline(always)]
pub(super) fn normalizing_blocks(plan: &TpPlan) -> usize {
    plan.norm_blocks().min(grid_size() as usize)
}

/// This block's share of the output (one of the first `blocks`), once every tile is reduced: `out[j, h] =
/// (y + residual)[j, h] / sqrt(mean_h((y + residual)[j]²) + eps) * gamma[h]`, 8 columns per item.
/// `entry(n)` is entry `n`'s four vectors of sums of squares (see [`reduce_share`]), `pair(at)` the reduced
/// tiles' vectors `at` and `at + 1`.
#[inline(always)]
pub(super) fn write_norm(
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
pub(super) fn normalize(plan: &TpPlan, e: &Epilogue<'_>, (from, session): (Gathered, &Session)) {
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

/// The epilogue of the two-kernel decode step: every rank's [`tp_gemv`](fn@super::tp_gemv) partial sums (in
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

/// The three-kernel step's middle: `y[tile][token][256]` = the sum over the splits of this rank's
/// [`tp_gemv`](fn@super::tp_gemv) partial tiles, which the library's all-reduce then sums over the ranks.
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
