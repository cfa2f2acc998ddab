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
use ferrocomm_device::mem::GlobalPtr;
use ferrocomm_device::prelude::*;

use super::peer_thread;
use crate::element::{Element, ReduceOp, V16, reduce_strided};
use crate::layout::{MAX_WORLD, VECTOR_BYTES, epoch_tag, one_shot_pad, stage_slot};
use crate::vector::{Region, store_vectors};

#[inline(always)]
#[track_caller]
fn one_shot<T: Element, O: ReduceOp>(data: SymSliceMut<T>, stage: SymSliceMut<V16>, pad: SignalPad, slot: usize) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    assert!(world <= MAX_WORLD && 2 * world * slot <= stage.len(), "staging buffer smaller than its slots");
    let epoch = pad.epoch();
    let parity = epoch & 1;
    // SAFETY: this rank's copy of `data`; vector `k` is read and written by one thread only.
    let local = unsafe { Region::new(data.local().as_ptr(), data.len()) };
    let vectors = local.vectors();
    assert!(vectors <= slot, "message larger than a staging slot");
    let (block, blocks) = (block_rank() as usize, grid_size() as usize);
    let (t, threads) = (thread_rank() as usize, block_size() as usize);
    let per_block = vectors.div_ceil(blocks);
    let (lo, hi) = ((block * per_block).min(vectors), ((block + 1) * per_block).min(vectors));
    let peer = peer_thread(rank, world);

    for q in (0..world).filter(|&q| q != rank) {
        // SAFETY: slot (`parity`, `rank`) of rank `q`'s staging buffer, global memory that `q` no longer
        // reads (see the module documentation); `hi <= vectors <= slot`.
        unsafe {
            let dst = GlobalPtr::from_generic(stage.peer(q as u32).as_ptr().add(stage_slot(parity, rank, world, slot)));
            store_vectors(dst, 0, local, lo, hi, t, threads);
        }
    }
    sync_threads();
    if let Some(q) = peer {
        pad.peer(q, one_shot_pad::pushed(parity, block, rank)).set_release(epoch_tag(epoch, 0));
        pad.local(one_shot_pad::pushed(parity, block, q as usize)).wait_ge(epoch_tag(epoch, 0));
    }
    sync_threads();

    // SAFETY: this rank's staging buffer, global memory.
    let own_stage = unsafe { GlobalPtr::from_generic(stage.local().as_ptr()) };
    reduce_strided::<T, O>(
        (world, rank),
        (lo, hi),
        (t, threads),
        // SAFETY: `k < vectors`; this thread pushed vector `k` above and overwrites it below.
        |k| unsafe { local.load(k) },
        // SAFETY: vector `k` of slot (`parity`, `p`), published by the acquire of this block's flags.
        |p, k| unsafe { own_stage.byte_add((stage_slot(parity, p, world, slot) + k) * VECTOR_BYTES).ld_v4() },
        // SAFETY: as for the load.
        |k, v| unsafe { local.store(k, v) },
    );
    pad.advance_epoch();
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
pub fn all_reduce<T: Element>(data: SymSliceMut<T>, stage: SymSliceMut<[u32; 4]>, pad: SignalPad, op: u32, slot_vectors: u64) {
    crate::with_op!(op, O => one_shot::<T, O>(data, stage, pad, slot_vectors as usize))
}
