//! One-shot push all-reduce, the mid-size path: every rank stores its whole input into every peer's staging
//! slot with plain 16-byte stores, raises one release flag per block, and reduces everything it received
//! with its own input once the flags arrive. One kernel and one one-way trip, like the LL one-shot, but with
//! the data at full NVLink efficiency (no flag in every 8 bytes) at the price of one release per block.
//!
//! Block `b` pushes and reduces share `b` of the vectors, paired with block `b` of every peer. Staging slots
//! alternate by the pad's epoch parity, and every rank hears from every peer in every launch of a kernel on
//! this pad (this one and the LL kernels), so a rank writing parity `p` at epoch `e + 2` knows every peer
//! has finished epoch `e` — no ready handshake, no reset. The flags carry `epoch_tag(epoch, 0)`, which only
//! grows.

use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

use super::peer_thread;
use crate::element::{Element, ReduceOp, reduce_strided};
use crate::layout::{MAX_WORLD, epoch_tag, one_shot_pad, stage_slot};

#[inline(always)]
#[track_caller]
fn one_shot<T: Element, O: ReduceOp>(data: SymSliceMut<T>, stage: SymSliceMut<V16>, pad: SignalPad, slot: usize) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    assert!(world <= MAX_WORLD && 2 * world * slot <= stage.len(), "staging buffer smaller than its slots");
    let session = pad.session();
    let epoch = session.epoch();
    let parity = epoch & 1;
    // Vector `k` of this rank's copy is read and written by one thread only.
    let local = data.local().vectors();
    let vectors = local.vectors();
    assert!(vectors <= slot, "message larger than a staging slot");
    let (block, blocks) = (block_rank() as usize, grid_size() as usize);
    let (t, threads) = Group::Block.position();
    let per_block = vectors.div_ceil(blocks);
    let (lo, hi) = ((block * per_block).min(vectors), ((block + 1) * per_block).min(vectors));

    for ch in session.peers() {
        // Slot (`parity`, `rank`) of the peer's staging buffer, which it no longer reads (see the module
        // documentation).
        let to = ch.remote(stage).slice(stage_slot(parity, rank, world, slot), slot).vectors();
        to.copy_from(local.as_const(), 0, (lo, hi), (t, threads));
    }
    // The block's stores, then one release per peer that covers them.
    sync_threads();
    if let Some(q) = peer_thread(rank, world) {
        let ch = session.channel(q);
        ch.signal(one_shot_pad::pushed(parity, block, rank)).set_release(epoch_tag(epoch, 0));
        ch.inbox(one_shot_pad::pushed(parity, block, q as usize)).wait_ge(epoch_tag(epoch, 0));
    }
    sync_threads();

    let staged = stage.local().vectors();
    reduce_strided::<T, O>(
        (world, rank),
        (lo, hi),
        (t, threads),
        |k| local.load(k),
        // Vector `k` of slot (`parity`, `p`), published by the acquire of this block's flags.
        |p, k| staged.load(stage_slot(parity, p, world, slot) + k),
        // This thread pushed vector `k` above; overwriting it now loses nothing.
        |k, v| local.store(k, v),
    );
}

/// One-shot push all-reduce of `data` in place with the [`op_code`] `op` (see the module documentation), one
/// PTX entry per element type. `stage` holds `2 * world * slot_vectors` vectors and a slot at least the
/// vectors of `data`. Every block must be co-resident; grids are the same on every rank.
///
/// [`op_code`]: crate::layout::op_code
#[kernel(
    instances(one_shot_f32<f32>, one_shot_f16<f16>, one_shot_bf16<bf16>),
    requires(len(stage) >= 2 * world() * slot_vectors)
)]
pub fn all_reduce<T: Element>(
    data: SymSliceMut<T>,
    stage: SymSliceMut<[u32; 4]>,
    pad: SignalPad,
    op: u32,
    slot_vectors: u64,
) {
    crate::with_op!(op, O => one_shot::<T, O>(data, stage, pad, slot_vectors as usize))
}
