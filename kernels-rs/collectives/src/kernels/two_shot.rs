//! Two-shot all-reduce (large messages) and reduce-scatter, pushing over NVLink with 16-byte stores only.
//!
//! The input is cut into `world` chunks; rank `c` owns chunk `c`. Each chunk is processed in segments of at
//! most one scratch slot, and block `b` handles share `b` of every segment, paired with block `b` of every
//! other rank:
//!
//! 1. push: rank `r` stores its share of chunk `q` into rank `q`'s scratch slot `r`, then raises
//!    `pushed(b, r)` on `q` (release);
//! 2. reduce: after `pushed(b, q)` from every peer (acquire), rank `r` reduces its chunk's share — its own
//!    input and every peer's scratch slot, in rank order — and stores the result in its output; for an
//!    all-reduce also straight into every peer's buffer (the all-gather). Then it raises `reduced(b, r)` on
//!    every peer.
//!
//! When the launch gives each block a staging ring ([`BulkCopier`]), both copies — the push into the
//! peers' scratch and the all-gather of the reduced share — go through the TMA: the reduce then stores its
//! result locally only, and the block copies it to every peer.
//!
//! Segment `s + 1` is pushed only after the receiver raised `reduced` for segment `s` (it consumed the
//! slot), and a launch ends only after every peer's `reduced` for the last segment (its results landed, and
//! it is done with this rank's pushes, so the next launch may push at once). A peer writes results into
//! this rank's chunk `q` share only after this rank's `pushed` for it, i.e. after this rank read it.
//! Signals carry `segment_tag(epoch, segment)`, which only grows: no resets across launches and replays.

use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

use super::peer_thread;
use crate::element::{Element, ReduceOp, reduce_strided};
use crate::layout::{MAX_WORLD, TwoShotPlan, segment_tag, two_shot_pad};

/// What every segment of one launch shares.
struct Launch<'s, T> {
    /// This rank's input: its copy of the all-reduce's buffer, or the reduce-scatter's input.
    input: Vectors,
    /// All-reduce: the buffer every rank's reduced chunk is stored into on every peer (the all-gather).
    gather: Option<SymSliceMut<T>>,
    scratch: SymSliceMut<V16>,
    session: &'s Session,
    /// Where this rank's reduced chunk goes: its own chunk of the buffer (all-reduce) or `out`.
    result: VectorsMut,
    plan: TwoShotPlan,
}

impl<T: Element> Launch<'_, T> {
    /// Bytes `(start, len)` of chunk `c` of the `plan.len` elements (the last chunks may be shorter or
    /// empty).
    #[inline(always)]
    fn chunk(&self, c: usize) -> (usize, usize) {
        let (len, chunk) = (self.plan.len as usize, self.plan.chunk as usize);
        let start = (c * chunk).min(len);
        let size = core::mem::size_of::<T>();
        (start * size, chunk.min(len - start) * size)
    }

    /// Chunk `c` of this rank's input.
    #[inline(always)]
    fn input_chunk(&self, c: usize) -> Vectors {
        let (start, len) = self.chunk(c);
        self.input.sub(start, len)
    }

    /// Vectors per segment and the number of segments: segments hold at most one scratch slot and are cut
    /// from the largest chunk (chunk 0), so every rank agrees on them.
    #[inline(always)]
    fn segments(&self) -> (usize, usize) {
        let largest = self.chunk(0).1.div_ceil(VECTOR_BYTES);
        let seg = (self.plan.slot_vectors as usize).min(largest).max(1);
        (seg, largest.div_ceil(seg))
    }
}

/// Segment `s` for this block: wait until every peer consumed segment `s - 1`, push this block's share of
/// every peer's chunk into its scratch, exchange `pushed`, reduce the share of this rank's chunk (and store
/// it into every peer for an all-reduce), raise `reduced`. Out of line so the segment loop's state and the
/// segment's own registers are not live at once.
#[inline(never)]
fn segment<T: Element, O: ReduceOp>(l: &Launch<'_, T>, s: usize, copier: &mut BulkCopier) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let (block, blocks) = (block_rank() as usize, grid_size() as usize);
    let (t, threads) = Group::Block.position();
    let slot = l.plan.slot_vectors as usize;
    let (seg, _) = l.segments();
    let per_block = seg.div_ceil(blocks);
    let first = s * seg;
    let (lo, hi) = (first + (block * per_block).min(seg), first + ((block + 1) * per_block).min(seg));
    let tag = |segment| segment_tag(l.session.epoch(), segment);
    let peer = peer_thread(rank, world).map(|q| l.session.channel(q));

    if s > 0 {
        if let Some(ch) = peer {
            ch.inbox(two_shot_pad::reduced(block, ch.peer() as usize)).wait_ge(tag(s - 1));
        }
        sync_threads();
    }
    let tma = copier.uses_tma();
    for ch in l.session.peers() {
        let from = l.input_chunk(ch.peer() as usize);
        // Slot `rank` of the peer's scratch, which it no longer reads (flow control above); vector `k` of the
        // chunk lands at `k - first`.
        let to = ch.remote(l.scratch).slice(rank * slot, slot).vectors();
        let end = hi.min(from.vectors());
        if tma {
            // The same bytes as a whole range; `lo`, `end` are the block's, so every thread takes this path.
            let (a, b) = (lo * VECTOR_BYTES, (end * VECTOR_BYTES).min(from.len()));
            if b > a {
                copier.copy_vectors(to.sub((lo - first) * VECTOR_BYTES, b - a), from.sub(a, b - a));
            }
        } else {
            to.copy_from(from, first, (lo, end), (t, threads));
        }
    }
    // The block's stores, then one release per peer that covers them.
    sync_threads();
    if let Some(ch) = peer {
        ch.signal(two_shot_pad::pushed(block, rank)).set_release(tag(s));
        ch.inbox(two_shot_pad::pushed(block, ch.peer() as usize)).wait_ge(tag(s));
    }
    sync_threads();

    let mine = l.input_chunk(rank);
    let (start, len) = l.chunk(rank);
    let scratch = l.scratch.local().vectors();
    reduce_strided::<T, O>(
        (world, rank),
        (lo, hi.min(mine.vectors())),
        (t, threads),
        // Vector `k` of this rank's chunk is read and then written by this thread only.
        |k| mine.load(k),
        // Vector `k - first` of slot `p`, published by the acquire above.
        |p, k| scratch.load(p * slot + k - first),
        |k, v| {
            l.result.store(k, v);
            if let Some(data) = l.gather
                && !tma
            {
                // The same chunk of every peer, which read this vector before raising `pushed`.
                for ch in l.session.peers() {
                    ch.remote(data).vectors().sub(start, len).store(k, v);
                }
            }
        },
    );
    if let Some(data) = l.gather
        && tma
    {
        // The block's reduced vectors, from this rank's result into the same chunk of every peer (which
        // read them before raising `pushed`).
        let (a, b) = (lo * VECTOR_BYTES, (hi.min(mine.vectors()) * VECTOR_BYTES).min(len));
        if b > a {
            for ch in l.session.peers() {
                let to = ch.remote(data).vectors().sub(start, len).sub(a, b - a);
                copier.copy_vectors(to, l.result.as_const().sub(a, b - a));
            }
        }
    }
    sync_threads();
    if let Some(ch) = peer {
        ch.signal(two_shot_pad::reduced(block, rank)).set_release(tag(s));
    }
}

/// The two-shot over this rank's `input` (`plan.len` elements of `T`): this rank's reduced chunk goes to
/// `result((start, len))` (the chunk's bytes) and, with `gather`, into that buffer's chunk on every peer.
#[inline(always)]
#[track_caller]
fn two_shot<T: Element, O: ReduceOp>(
    input: Vectors,
    gather: Option<SymSliceMut<T>>,
    result: impl FnOnce((usize, usize)) -> VectorsMut,
    scratch: SymSliceMut<V16>,
    pad: SignalPad,
    plan: TwoShotPlan,
) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let slot = plan.slot_vectors as usize;
    let size = core::mem::size_of::<T>() as u64;
    assert!(
        plan.len * size <= input.len() as u64 && plan.chunk > 0 && slot > 0,
        "two-shot plan does not fit its buffer"
    );
    assert!(world <= MAX_WORLD && world * slot <= scratch.len(), "two-shot scratch smaller than its slots");
    let session = pad.session();
    let mut l = Launch { input, gather, scratch, session: &session, result: VectorsMut::empty(), plan };
    l.result = result(l.chunk(rank));
    let (_, segments) = l.segments();
    let mut copier = BulkCopier::new();
    for s in 0..segments {
        segment::<T, O>(&l, s, &mut copier);
    }
    // Every peer's results have landed here, and every peer is done with this rank's pushes.
    if let Some(q) = peer_thread(rank, world)
        && segments > 0
    {
        let last = segment_tag(session.epoch(), segments - 1);
        session.channel(q).inbox(two_shot_pad::reduced(block_rank() as usize, q as usize)).wait_ge(last);
    }
}

/// Two-shot all-reduce of `data` in place with the [`op_code`] `plan.op` (see the module documentation), one
/// PTX entry per element type: the result replaces `data` on every rank. `out` is unused: pass `None` (it
/// keeps the entry's parameters those of the reduce-scatter). `scratch` holds `world * plan.slot_vectors`
/// vectors. Every block must be co-resident; grids are the same on every rank.
///
/// [`op_code`]: crate::layout::op_code
#[kernel(
    instances(two_shot_f32<f32>, two_shot_f16<f16>, two_shot_bf16<bf16>),
    requires(len(data) >= plan.len, len(scratch) >= world() * plan.slot_vectors)
)]
pub fn all_reduce<T: Element>(
    data: SymSliceMut<T>,
    out: Option<&mut [T]>,
    scratch: SymSliceMut<[u32; 4]>,
    pad: SignalPad,
    plan: TwoShotPlan,
) {
    let _ = out;
    // The reduced chunk replaces this rank's own chunk, and goes into every peer's.
    let own = data.local().vectors();
    let result = |(start, len): (usize, usize)| own.sub(start, len);
    crate::with_op!(plan.op, O => two_shot::<T, O>(own.as_const(), Some(data), result, scratch, pad, plan))
}

/// Two-shot reduce-scatter with the [`op_code`] `plan.op` (see the module documentation), one PTX entry per
/// element type: `input` (`world` chunks) is only read, and rank `r`'s `out` receives chunk `r` reduced.
/// `scratch` holds `world * plan.slot_vectors` vectors. Every block must be co-resident; grids are the same
/// on every rank.
///
/// [`op_code`]: crate::layout::op_code
#[kernel(
    instances(reduce_scatter_f32<f32>, reduce_scatter_f16<f16>, reduce_scatter_bf16<bf16>),
    requires(len(input) == world() * len(out), len(input) >= plan.len, len(scratch) >= world() * plan.slot_vectors)
)]
pub fn reduce_scatter<T: Element>(
    input: SymSlice<T>,
    out: &mut [T],
    scratch: SymSliceMut<[u32; 4]>,
    pad: SignalPad,
    plan: TwoShotPlan,
) {
    let out = VectorsMut::of(out);
    let result = |(_, len): (usize, usize)| {
        assert!(out.len() >= len, "reduce-scatter output shorter than a chunk");
        // This rank's output, written by this launch only (each vector by one thread).
        out.sub(0, len)
    };
    crate::with_op!(plan.op, O => two_shot::<T, O>(Vectors::of(input.local()), None, result, scratch, pad, plan))
}
