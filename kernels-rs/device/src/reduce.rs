//! Block-wide reductions through the block's dynamic shared memory, safe to call: each function separates
//! its shared-memory writes from its reads with block barriers itself, so no caller can race them. Every
//! thread of the block calls them (they contain barriers), with blocks of whole warps. They use the start
//! of the dynamic shared memory, as a [`BulkCopier`](crate::bulk::BulkCopier)'s ring does: a kernel uses
//! one or the other.

use crate::index::{block_size, lane_id, warp_id, warps_per_block};
use crate::shared::dynamic_shared;
use crate::sync::sync_threads;
use crate::warp::{shfl_idx_sync, shfl_xor_sync};

/// Dynamic shared memory [`sum_across_block`] needs for `values` `f32`s per thread in blocks of `warps`
/// warps.
pub const fn sum_across_block_bytes(values: usize, warps: usize) -> usize {
    warps * values * 4
}

/// Sums `values` over every thread of the block, element by element, and returns the totals to every
/// thread: within each warp by shuffles (see [`sum_across_warp_spread`]), then across the warps through
/// shared memory (in warp order, so every thread gets the same bits). The launch must give the block at
/// least [`sum_across_block_bytes`]`(R, warps)` of dynamic shared memory (panics otherwise), which the call
/// leaves free for the next.
#[inline(always)]
#[track_caller]
pub fn sum_across_block<const R: usize>(values: [f32; R]) -> [f32; R] {
    assert!(block_size().is_multiple_of(32), "sum_across_block needs blocks of whole warps");
    let (sum, r) = sum_across_warp_spread(values);
    let warps = warps_per_block() as usize;
    if warps == 1 {
        // Value `k`'s total is in lane `k * 32 / R` (or every lane, when `R` does not divide 32).
        return core::array::from_fn(|k| match spread_lanes::<R>() {
            Some(lanes) => shfl_idx_sync(u32::MAX, sum[0], (k * lanes) as u32),
            None => sum[k],
        });
    }
    let stash = dynamic_shared::<f32>();
    assert!(
        stash.len() * 4 >= sum_across_block_bytes(R, warps),
        "sum_across_block needs more dynamic shared memory (see sum_across_block_bytes)"
    );
    let warp = warp_id() as usize * R;
    match spread_lanes::<R>() {
        Some(lanes) if (lane_id() as usize).is_multiple_of(lanes) => {
            // SAFETY: slot (warp, r) is written by one lane of this warp alone, and read after the barrier.
            unsafe { stash.write(warp + r, sum[0]) };
        }
        Some(_) => {}
        None if lane_id() == 0 => {
            for (r, &v) in sum.iter().enumerate() {
                // SAFETY: as above.
                unsafe { stash.write(warp + r, v) };
            }
        }
        None => {}
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

/// Dynamic shared memory [`sum_across_warp_groups`] needs for `vectors` vectors of four `f32`s per lane in
/// blocks of `warps` warps (room for every warp but one).
pub const fn sum_across_warp_groups_bytes(vectors: usize, warps: usize) -> usize {
    warps.saturating_sub(1) * vectors * 32 * 16
}

/// Four `f32`s aligned to 16 bytes, so that shared memory moves them with one access.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Quad([f32; 4]);

/// Sums each lane's `values` over the same lane of every warp in its group of `group` consecutive warps
/// (warps `0 .. group`, `group .. 2 group`, ...): the group's first warp gets the totals, added in warp
/// order, the other warps `None`. This is how the warps of a block that took different rows of a split-K
/// product combine it, so that one warp stores one partial sum where `group` would have. `group` divides
/// the block's warps and is the same in every thread; 1 returns `values` with no barrier. Through shared
/// memory, `[writer][vector][lane]` so that a warp's accesses are 32 consecutive 16-byte vectors: the launch
/// must give the block at least [`sum_across_warp_groups_bytes`]`(N, warps)` of dynamic shared memory
/// (panics otherwise), which the call leaves free for the next.
#[inline(always)]
#[track_caller]
pub fn sum_across_warp_groups<const N: usize>(values: [[f32; 4]; N], group: usize) -> Option<[[f32; 4]; N]> {
    let warps = warps_per_block() as usize;
    assert!(
        block_size().is_multiple_of(32) && group > 0 && warps.is_multiple_of(group),
        "sum_across_warp_groups needs blocks of whole warps in whole groups"
    );
    if group == 1 {
        return Some(values);
    }
    let stash = dynamic_shared::<Quad>();
    assert!(
        stash.len() * 16 >= sum_across_warp_groups_bytes(N, warps),
        "sum_across_warp_groups needs more dynamic shared memory (see sum_across_warp_groups_bytes)"
    );
    let (warp, lane) = (warp_id() as usize, lane_id() as usize);
    // Writer `w` is the `(w % (group - 1) + 1)`-th warp of group `w / (group - 1)`.
    let (first_writer, place) = ((warp / group) * (group - 1), warp % group);
    let at = |writer: usize, v: usize| (writer * N + v) * 32 + lane;
    if place != 0 {
        for (v, &x) in values.iter().enumerate() {
            // SAFETY: this lane's own slots, read only after the barrier below.
            unsafe { stash.write(at(first_writer + place - 1, v), Quad(x)) };
        }
    }
    sync_threads();
    let mut total = values;
    if place == 0 {
        for writer in first_writer..first_writer + group - 1 {
            for (v, t) in total.iter_mut().enumerate() {
                // SAFETY: written before the barrier above; nothing writes it until the barrier below.
                let Quad(x) = unsafe { stash.read(at(writer, v)) };
                *t = [t[0] + x[0], t[1] + x[1], t[2] + x[2], t[3] + x[3]];
            }
        }
    }
    sync_threads();
    if place == 0 { Some(total) } else { None }
}

/// Lanes per value once [`sum_across_warp_spread`] has spread `R` values over the warp: `Some(32 / R)`
/// when `R` is a power of two of at most 32, else `None` (every lane holds every total).
#[inline(always)]
const fn spread_lanes<const R: usize>() -> Option<usize> {
    if R.is_power_of_two() && R <= 32 { Some(32 / R) } else { None }
}

/// Sums `values` over the warp with the totals spread over the lanes: when `R` is a power of two of at most
/// 32, each shuffle level halves the values a lane holds — a lane keeps one half, sends the other to its
/// partner and adds what comes back — so `R` values take `R - 1` shuffles (plus the levels left once one
/// value remains) instead of `5 R`, and value `r`'s total ends in element 0 of lanes `r * 32 / R ..
/// (r + 1) * 32 / R`; the second result is `r` for this lane. Otherwise every lane gets every total by `5 R`
/// butterfly shuffles (second result 0). Either way each total is summed in one order, whichever lane
/// holds it. Every lane of the warp calls it.
#[inline(always)]
pub fn sum_across_warp_spread<const R: usize>(values: [f32; R]) -> ([f32; R], usize) {
    let mut v = values;
    let Some(lanes) = spread_lanes::<R>() else {
        for v in v.iter_mut() {
            // Spelled out: a loop over an array of offsets can leave the array in local memory.
            *v =
                butterfly_level(butterfly_level(butterfly_level(butterfly_level(butterfly_level(*v, 16), 8), 4), 2), 1);
        }
        return (v, 0);
    };
    // Written out level by level so that after inlining `held` is a constant at each: the loops unroll and
    // `v` stays in registers.
    let held = halve(&mut v, R, 16);
    let held = halve(&mut v, held, 8);
    let held = halve(&mut v, held, 4);
    let held = halve(&mut v, held, 2);
    halve(&mut v, held, 1);
    (v, lane_id() as usize / lanes)
}

/// `v` plus lane `lane ^ offset`'s `v`.
#[inline(always)]
fn butterfly_level(v: f32, offset: u32) -> f32 {
    v + shfl_xor_sync(u32::MAX, v, offset)
}

/// One level of [`sum_across_warp_spread`] at shuffle distance `offset`, the lane holding `held` values:
/// with more than one, it keeps the half its lane bit `offset` selects (the upper half when set) plus the
/// partner's copy of that half, and returns how many it now holds; with one, a butterfly.
#[inline(always)]
fn halve<const R: usize>(v: &mut [f32; R], held: usize, offset: u32) -> usize {
    if held == 1 {
        v[0] = butterfly_level(v[0], offset);
        return 1;
    }
    let half = held / 2;
    let upper = lane_id() & offset != 0;
    for i in 0..half {
        let (keep, send) = if upper { (v[i + half], v[i]) } else { (v[i], v[i + half]) };
        v[i] = keep + shfl_xor_sync(u32::MAX, send, offset);
    }
    half
}
