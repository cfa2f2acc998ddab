//! The one-kernel decode step: each block pushes its tile to the tile's owner as soon as it is done.

use ferrocomm_device::kernel;
use ferrocomm_device::ll::ll_flag;
use ferrocomm_device::prelude::*;
use ferrocomm_device::trace::block_mark;

use crate::layout::{TP_MAX_TOKENS, TP_TILE_COLS, TpPlan, ll_region, tp_pad};

use super::epilogue::*;
use super::gemv::*;

/// Polls of the LL step's waits in a tight loop before they back off. Its tile owners and normalising blocks
/// wait for the slowest blocks of the product, a good part of the kernel: hundreds of blocks polling without
/// pause took the memory system from the blocks they waited for (the 16-token step ran twice as long).
const TAIL_SPINS: u32 = 16;

/// The one-kernel decode step, put + signal per tile: each block computes its columns of a partial tile (as
/// [`tp_gemv`](fn@super::tp_gemv)) and stores them straight into the tile owner's `partials` (region `rank`:
/// `world` regions of `plan.partials_len()`), then adds one to the owner's `arrived(tile)`; the owner's
/// first blocks wait for all of them and reduce a share of a tile each ([`share_of_block`]) with the
/// residual, gathering it to every rank, and the first blocks then normalise `out`. Launch
/// [`TpPlan::grid`] blocks of `TP_WARPS` warps with `sum_across_block_bytes(16, TP_WARPS)` bytes of dynamic
/// shared memory (and at least [`block_product`]'s); every block must be co-resident. `gather` and `squares` as
/// for [`tp_reduce_norm`](fn@super::tp_reduce_norm). The protocol for larger tiles: [`tp_fused_ll`](fn@tp_fused_ll)
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
    let (tile, _) = plan.tile_of_block(block_rank());
    let owner = session.channel((tile % world) as u32);
    let region = plan.partials_len();
    block_product::<G, _>(x, w, &plan, |_| {
        // This rank's region of the owner's partials, which the owner reads only after every block's add below.
        let to = owner.remote(partials).vectors().sub(rank * region * 4, region * 4);
        move |at, v| to.store_kept(at, v)
    });
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
/// hops. Each block computes its columns of a partial tile (as [`tp_gemv`](fn@super::tp_gemv)) and stores them
/// straight into the tile owner's `partials` as LL packets (region `(epoch parity, rank)` of `2 * world`
/// regions of `plan.partials_len() / 2` packets: [`ll_region`]); the owner's first blocks poll a tile's
/// packets from every rank and split and reduce a share of it each ([`share_of_block`]) with the residual,
/// sending it to every rank's `gather` (`tiles x tokens x 128` packets) and its sums of squares to every
/// rank's `squares` (`tiles x reduce_parts x 8` packets), and the first blocks then poll those and normalise
/// `out`. Launch [`TpPlan::grid`] blocks of `TP_WARPS` warps with
/// `sum_across_block_bytes(16, TP_WARPS)` bytes of dynamic shared memory (and at least [`block_product`]'s);
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
    // Packets of a rank's region: two per vector of the partial tiles.
    let slot = plan.partials_len() / 2;
    block_product::<G, _>(x, w, &plan, |tile| {
        // This rank's region of the owner's partials; vector `at` of the tiles is its packets `2at, 2at + 1`.
        let to =
            session.channel((tile % world) as u32).remote(partials).slice(ll_region(parity, rank, world, slot), slot);
        move |at, v| to.store_vector(at, v, flag)
    });
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
