//! One-shot LL all-reduce, the small-message path: one kernel, one one-way trip, no fence, no barrier.
//!
//! Every thread owns some 16-byte vectors of the buffer. For each, it sends the vector as two LL packets
//! (8 data bytes + the launch's flag twice, one 16-byte store each) into every peer's LL region
//! `(epoch parity, this rank)`; then, for each vector again, it polls its own regions `(parity, peer)` until
//! both packets from every peer carry the flag, reduces the values in rank order with its own input and
//! stores the result in place. The same thread sends and overwrites a vector, so no input is overwritten
//! before it was sent.
//!
//! Reuse without resets: the flag is `ll_flag(epoch)` of the pad, the same on every rank, and regions
//! alternate by epoch parity. A rank that writes parity `p` at epoch `e + 2` has finished epoch `e + 1`,
//! whose packets from every peer it received — so every peer had started `e + 1`, hence finished reading
//! parity `p` at epoch `e`. Stale packets carry older flags and are never mistaken for new ones.

use ferrocomm_device::kernel;
use ferrocomm_device::ll::ll_flag;
use ferrocomm_device::prelude::*;

use super::SPIN_POLLS;
use crate::element::{Element, ReduceOp, reduce_ranks};
use crate::layout::ll_region;

/// The LL all-reduce of `data` in place (see the module documentation); `ll` holds `2 * world *
/// slot_packets` packets and each region at least two packets per vector of `data`.
#[inline(always)]
#[track_caller]
fn all_reduce_ll<T: Element, O: ReduceOp>(
    data: SymSliceMut<T>,
    ll: SymSliceMut<LlPacket>,
    pad: SignalPad,
    slot: usize,
) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    assert!(2 * world * slot <= ll.len(), "LL buffer smaller than the regions asked for");
    let session = pad.session();
    let (flag, parity) = (ll_flag(session.epoch()), session.epoch() & 1);
    // Vector `k` of this rank's copy is read and written by one thread only.
    let local = data.local().vectors();
    let vectors = local.vectors();
    assert!(2 * vectors.max(1) <= slot, "message larger than an LL region");
    // An empty message still exchanges one (empty) vector: every launch on the pad must hear from every
    // peer, or a rank could run two launches ahead and reuse a parity a peer is still reading.
    let exchanged = vectors.max(1);
    let (first, stride) = (global_thread_idx(), global_threads());

    let mut k = first;
    while k < exchanged {
        let v = if k < vectors { local.load(k) } else { [0; 4] };
        for ch in session.peers() {
            // This rank's region in the peer's LL buffer; only this thread writes vector `k` of it.
            ch.remote(ll).slice(ll_region(parity, rank, world, slot), slot).store_vector(k, v, flag);
        }
        k += stride;
    }

    let mut k = first;
    while k < exchanged {
        // This thread sent vector `k` above, before it overwrites it below.
        let own = if k < vectors { local.load(k) } else { [0; 4] };
        let v = reduce_ranks::<T, O>(world, rank, own, |p| {
            ll.local().slice(ll_region(parity, p, world, slot), slot).as_const().poll_vector(k, flag, SPIN_POLLS)
        });
        if k < vectors {
            local.store(k, v);
        }
        k += stride;
    }
}

/// One-shot LL all-reduce of `data` in place, with the [`op_code`] `op`, one PTX entry per element type; `ll`
/// is the LL buffer, `2 * world * slot_packets` packets (see the module documentation). Launch enough threads
/// for one per 16-byte vector or fewer (they stride), every block co-resident.
///
/// [`op_code`]: crate::layout::op_code
#[kernel(
    instances(all_reduce_ll_f32<f32>, all_reduce_ll_f16<f16>, all_reduce_ll_bf16<bf16>),
    requires(len(ll) >= 2 * world() * slot_packets)
)]
pub fn all_reduce<T: Element>(
    data: SymSliceMut<T>,
    ll: SymSliceMut<LlPacket>,
    pad: SignalPad,
    op: u32,
    slot_packets: u64,
) {
    crate::with_op!(op, O => all_reduce_ll::<T, O>(data, ll, pad, slot_packets as usize))
}
