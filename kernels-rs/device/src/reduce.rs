//! Block-wide reductions through the block's dynamic shared memory, safe to call: each function separates
//! its shared-memory writes from its reads with block barriers itself, so no caller can race them. Every
//! thread of the block calls them (they contain barriers), with blocks of whole warps. They use the start
//! of the dynamic shared memory, as a [`BulkCopier`](crate::bulk::BulkCopier)'s ring does: a kernel uses
//! one or the other.

use crate::index::{block_size, lane_id, warp_id, warps_per_block};
use crate::shared::dynamic_shared;
use crate::sync::sync_threads;

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
