//! Block-wide reductions through the block's dynamic shared memory, safe to call: each function separates
//! its shared-memory writes from its reads with block barriers itself, so no caller can race them. Every
//! thread of the block calls them (they contain barriers), with blocks of whole warps. They use the start
//! of the dynamic shared memory, as a [`BulkCopier`](crate::bulk::BulkCopier)'s ring does: a kernel uses
//! one or the other.

use crate::index::{block_size, lane_id, warp_id, warps_per_block};
use crate::shared::dynamic_shared;
use crate::sync::sync_threads;

/// Dynamic shared memory [`sum_across_warps`] needs for `values_per_lane` `f32`s per lane (all its rows
/// and columns) in blocks of `warps` warps.
pub const fn sum_across_warps_bytes(values_per_lane: usize, warps: usize) -> usize {
    warps.saturating_sub(1) * 32 * values_per_lane * 4
}

/// Sums `values` over the warps of each group of the block, lane by lane. The block's warps form `groups`
/// groups of consecutive warps, `warps / groups` each (`groups` divides the warp count; panics otherwise);
/// lane `l` of each group's first warp returns the sum of its group's lane-`l` values (in warp order, so the
/// result does not depend on timing); the other warps return their own `values` unchanged. With one group,
/// warp 0 ends with the block's sums. The launch must give the block at least
/// [`sum_across_warps_bytes`]`(R * C, warps)` of dynamic shared memory (panics otherwise), which the call
/// uses and leaves free for the next.
///
/// For split-K products: the warps of a group accumulate slices of the rows for the same outputs, and its
/// first warp ends with their sum. The values are a fixed-size array so that the loops over it have
/// constant bounds and a caller's accumulators stay in registers.
#[inline(always)]
#[track_caller]
pub fn sum_across_warps<const R: usize, const C: usize>(values: [[f32; C]; R], groups: usize) -> [[f32; C]; R] {
    let warps = warps_per_block() as usize;
    assert!(block_size().is_multiple_of(32), "sum_across_warps needs blocks of whole warps");
    assert!(groups > 0 && warps.is_multiple_of(groups), "sum_across_warps: the groups must divide the warps");
    let size = warps / groups;
    if size == 1 {
        return values;
    }
    let stash = dynamic_shared::<f32>();
    assert!(
        stash.len() * 4 >= sum_across_warps_bytes(R * C, warps),
        "sum_across_warps needs more dynamic shared memory (see sum_across_warps_bytes)"
    );
    let (w, lane) = (warp_id() as usize, lane_id() as usize);
    // Value `v` of lane `l` of warp `w` (any but warp 0) at `((w - 1) * R * C + v) * 32 + l`: a warp's
    // store of one value is 32 consecutive words, one per bank.
    let at = |w: usize, v: usize| ((w - 1) * R * C + v) * 32 + lane;
    let first = w % size == 0;
    if !first {
        for (r, row) in values.iter().enumerate() {
            for (c, &v) in row.iter().enumerate() {
                // SAFETY: each (warp, value, lane) slot is written by one thread, and read only after the
                // barrier below.
                unsafe { stash.write(at(w, r * C + c), v) };
            }
        }
    }
    sync_threads();
    let mut sum = values;
    if first {
        for from in w + 1..w + size {
            for (r, row) in sum.iter_mut().enumerate() {
                for (c, s) in row.iter_mut().enumerate() {
                    // SAFETY: written before the barrier above; nothing writes it until the barrier below.
                    *s += unsafe { stash.read(at(from, r * C + c)) };
                }
            }
        }
    }
    // The stash is free again once the first warps have read it.
    sync_threads();
    sum
}

/// Dynamic shared memory [`sum_across_block`] needs for `values` `f32`s per thread in blocks of `warps`
/// warps.
pub const fn sum_across_block_bytes(values: usize, warps: usize) -> usize {
    warps * values * 4
}

/// Sums `values` over every thread of the block, element by element, and returns the totals to every
/// thread: within each warp by butterfly shuffles, then across the warps through shared memory (in warp
/// order, so every thread gets the same bits). The launch must give the block at least
/// [`sum_across_block_bytes`]`(R, warps)` of dynamic shared memory (panics otherwise), which the call
/// leaves free for the next.
#[inline(always)]
#[track_caller]
pub fn sum_across_block<const R: usize>(values: [f32; R]) -> [f32; R] {
    assert!(block_size().is_multiple_of(32), "sum_across_block needs blocks of whole warps");
    let mut warp_sum = values;
    for v in warp_sum.iter_mut() {
        for lanes in [16, 8, 4, 2, 1] {
            *v += crate::warp::shfl_xor_sync(u32::MAX, *v, lanes);
        }
    }
    let warps = warps_per_block() as usize;
    if warps == 1 {
        return warp_sum;
    }
    let stash = dynamic_shared::<f32>();
    assert!(
        stash.len() * 4 >= sum_across_block_bytes(R, warps),
        "sum_across_block needs more dynamic shared memory (see sum_across_block_bytes)"
    );
    if lane_id() == 0 {
        for (r, &v) in warp_sum.iter().enumerate() {
            // SAFETY: slot (warp, r) is written by this warp's lane 0 alone, and read after the barrier.
            unsafe { stash.write(warp_id() as usize * R + r, v) };
        }
    }
    sync_threads();
    let mut total = [0.0f32; R];
    for w in 0..warps {
        for (r, t) in total.iter_mut().enumerate() {
            // SAFETY: written before the barrier above; nothing writes it until the barrier below.
            *t += unsafe { stash.read(w * R + r) };
        }
    }
    sync_threads();
    total
}
