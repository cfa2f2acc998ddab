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
//! Segment `s + 1` is pushed only after the receiver raised `reduced` for segment `s` (it consumed the
//! slot), and a launch ends only after every peer's `reduced` for the last segment (its results landed, and
//! it is done with this rank's pushes, so the next launch may push at once). A peer writes results into
//! this rank's chunk `q` share only after this rank's `pushed` for it, i.e. after this rank read it.
//! Signals carry `segment_tag(epoch, segment)`, which only grows: no resets across launches and replays.

use ferrocomm_device::kernel;
use ferrocomm_device::mem::GlobalPtr;
use ferrocomm_device::prelude::*;

use super::peer_thread;
use crate::element::{Element, ReduceOp, V16, reduce_strided};
use crate::layout::{MAX_WORLD, TwoShotPlan, VECTOR_BYTES, segment_tag, two_shot_pad};
use crate::vector::{Region, store_vectors};

/// What every segment of one launch shares (kept small: the segment loop carries it across calls).
#[derive(Clone, Copy)]
struct Launch<T> {
    data: SymSliceMut<T>,
    scratch: SymSliceMut<V16>,
    pad: SignalPad,
    /// Where this rank's reduced chunk goes: its own chunk of `data` (all-reduce) or `out`.
    result: Region,
    plan: TwoShotPlan,
    epoch: u64,
}

impl<T: Element> Launch<T> {
    /// Chunk `c` of the `plan.len` elements at `base` (the last chunks may be shorter or empty).
    #[inline(always)]
    fn chunk(&self, base: *const T, c: usize) -> Region {
        let (len, chunk) = (self.plan.len as usize, self.plan.chunk as usize);
        let start = (c * chunk).min(len);
        // SAFETY: `start + (chunk ∩ rest) <= len` elements of a live buffer (the kernel's arguments).
        unsafe { Region::new(base.wrapping_add(start), chunk.min(len - start)) }
    }

    /// Vectors per segment and the number of segments: segments hold at most one scratch slot and are cut
    /// from the largest chunk (chunk 0), so every rank agrees on them.
    #[inline(always)]
    fn segments(&self) -> (usize, usize) {
        let largest = self.chunk(self.data.local().as_ptr(), 0).vectors();
        let seg = (self.plan.slot_vectors as usize).min(largest).max(1);
        (seg, largest.div_ceil(seg))
    }
}

/// Segment `s` for this block: wait until every peer consumed segment `s - 1`, push this block's share of
/// every peer's chunk into its scratch, exchange `pushed`, reduce the share of this rank's chunk (and store
/// it into every peer for an all-reduce), raise `reduced`. Out of line so the segment loop's state and the
/// segment's own registers are not live at once.
#[inline(never)]
fn segment<T: Element, O: ReduceOp>(l: &Launch<T>, s: usize) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let (block, blocks) = (block_rank() as usize, grid_size() as usize);
    let (t, threads) = (thread_rank() as usize, block_size() as usize);
    let slot = l.plan.slot_vectors as usize;
    let (seg, _) = l.segments();
    let per_block = seg.div_ceil(blocks);
    let first = s * seg;
    let (lo, hi) = (first + (block * per_block).min(seg), first + ((block + 1) * per_block).min(seg));
    let peer = peer_thread(rank, world);
    let input = l.data.local().as_ptr();

    if s > 0 {
        if let Some(q) = peer {
            l.pad.local(two_shot_pad::reduced(block, q as usize)).wait_ge(segment_tag(l.epoch, s - 1));
        }
        sync_threads();
    }
    for q in (0..world).filter(|&q| q != rank) {
        let src = l.chunk(input, q);
        // SAFETY: the share's vectors of slot `rank` in `q`'s scratch (global memory), which `q` no longer
        // reads (flow control above); `hi` clipped to the chunk.
        unsafe {
            let target = GlobalPtr::from_generic(l.scratch.peer(q as u32).as_ptr().add(rank * slot));
            store_vectors(target, first, src, lo, hi.min(src.vectors()), t, threads);
        }
    }
    sync_threads();
    if let Some(q) = peer {
        l.pad.peer(q, two_shot_pad::pushed(block, rank)).set_release(segment_tag(l.epoch, s));
        l.pad.local(two_shot_pad::pushed(block, q as usize)).wait_ge(segment_tag(l.epoch, s));
    }
    sync_threads();

    let mine = l.chunk(input, rank);
    // SAFETY: this rank's scratch, global memory.
    let own_scratch = unsafe { GlobalPtr::from_generic(l.scratch.local().as_ptr()) };
    let gather = l.plan.gather != 0;
    reduce_strided::<T, O>(
        (world, rank),
        (lo, hi.min(mine.vectors())),
        (t, threads),
        // SAFETY: `k < mine.vectors()`; vector `k` is read and then written by this thread only.
        |k| unsafe { mine.load(k) },
        // SAFETY: vector `k - first` of slot `p`, inside this rank's scratch, published by the acquire above.
        |p, k| unsafe { own_scratch.byte_add((p * slot + k - first) * VECTOR_BYTES).ld_v4() },
        |k, v| {
            // SAFETY: `k` is inside this rank's chunk, and of the same chunk on every peer.
            unsafe { l.result.store(k, v) };
            if gather {
                for q in (0..world).filter(|&q| q != rank) {
                    // SAFETY: as above; the peer read this vector before raising `pushed`.
                    unsafe { l.chunk(l.data.peer(q as u32).as_ptr(), rank).store(k, v) };
                }
            }
        },
    );
    sync_threads();
    if let Some(q) = peer {
        l.pad.peer(q, two_shot_pad::reduced(block, rank)).set_release(segment_tag(l.epoch, s));
    }
}

#[inline(always)]
#[track_caller]
fn two_shot<T: Element, O: ReduceOp>(
    data: SymSliceMut<T>,
    out: &mut [T],
    scratch: SymSliceMut<V16>,
    pad: SignalPad,
    plan: TwoShotPlan,
) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let slot = plan.slot_vectors as usize;
    assert!(plan.len <= data.len() as u64 && plan.chunk > 0 && slot > 0, "two-shot plan does not fit its buffer");
    assert!(world <= MAX_WORLD && world * slot <= scratch.len(), "two-shot scratch smaller than its slots");
    let mut l = Launch { data, scratch, pad, result: Region::empty(), plan, epoch: pad.epoch() };
    let mine = l.chunk(data.local().as_ptr(), rank);
    l.result = if plan.gather != 0 {
        mine
    } else {
        assert!(core::mem::size_of_val(out) >= mine.len(), "reduce-scatter output shorter than a chunk");
        // SAFETY: this rank's output, written by this launch only (each vector by one thread).
        unsafe { Region::new(out.as_ptr(), out.len()) }.sub(0, mine.len())
    };
    let (_, segments) = l.segments();
    for s in 0..segments {
        segment::<T, O>(&l, s);
    }
    // Every peer's results have landed here, and every peer is done with this rank's pushes.
    if let Some(q) = peer_thread(rank, world)
        && segments > 0
    {
        pad.local(two_shot_pad::reduced(block_rank() as usize, q as usize)).wait_ge(segment_tag(l.epoch, segments - 1));
    }
    pad.advance_epoch();
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
    let plan = TwoShotPlan { gather: 1, ..plan };
    crate::with_op!(plan.op, O => two_shot::<T, O>(data, out.unwrap_or_default(), scratch, pad, plan))
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
    let plan = TwoShotPlan { gather: 0, ..plan };
    // SAFETY: the same symmetric buffer; without the gather the two-shot only reads `data` (it writes the
    // reduced chunk into `out`), which is what `input: SymSlice<T>` lets the launcher borrow it for.
    let data = unsafe { SymSliceMut::from_raw(input.raw()) };
    crate::with_op!(plan.op, O => two_shot::<T, O>(data, out, scratch, pad, plan))
}
