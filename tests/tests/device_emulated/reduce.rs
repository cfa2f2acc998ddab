//! Block-wide sums (`reduce::sum_across_block`): every thread gets every total, in the same bits, for
//! power-of-two value counts (spread over the lanes, then gathered) and others (a butterfly per value), in
//! blocks of one warp and of several.

use std::sync::Mutex;

use ferrocomm_device::prelude::*;
use ferrocomm_device::reduce::{sum_across_block, sum_across_block_bytes};

use super::support::run_ok;

/// Thread `t`'s value `r`: a small integer (so any order of addition gives the exact total) or, with
/// `fractional`, a value whose sums round (so only one fixed order gives every thread the same bits).
fn value(t: u32, r: usize, fractional: bool) -> f32 {
    let k = (t as usize * 7 + r * 13) % 29;
    if fractional { k as f32 * 0.1 + 1.0 / (1.0 + r as f32 + t as f32) } else { k as f32 - 14.0 }
}

/// Runs `sum_across_block::<R>` in `blocks` blocks of `threads` threads; returns each thread's totals.
fn block_sums<const R: usize>(blocks: u32, threads: u32, fractional: bool) -> Vec<(u32, u32, [f32; R])> {
    let got = Mutex::new(Vec::new());
    let shared = sum_across_block_bytes(R, threads as usize / 32);
    run_ok(1, [blocks, 1, 1], [threads, 1, 1], shared, &|| {
        let t = thread_rank();
        let totals = sum_across_block(core::array::from_fn::<f32, R, _>(|r| value(t, r, fractional)));
        got.lock().unwrap().push((block_rank(), t, totals));
    });
    got.into_inner().unwrap()
}

fn check<const R: usize>(threads: u32) {
    let blocks = 2;
    // Exact totals: every thread of every block has them.
    let want: [f32; R] = core::array::from_fn(|r| (0..threads).map(|t| value(t, r, false)).sum());
    let got = block_sums::<R>(blocks, threads, false);
    assert_eq!(got.len(), (blocks * threads) as usize);
    for (b, t, totals) in &got {
        assert_eq!(totals, &want, "R = {R}, {threads} threads: block {b} thread {t}");
    }
    // Rounded totals: the same bits in every thread, and close to the reference.
    let got = block_sums::<R>(blocks, threads, true);
    let first = got[0].2;
    for r in 0..R {
        let reference: f64 = (0..threads).map(|t| f64::from(value(t, r, true))).sum();
        assert!((f64::from(first[r]) - reference).abs() < 1e-3 * reference.abs().max(1.0), "R = {R}: {first:?}");
    }
    for (b, t, totals) in &got {
        let bits = |v: &[f32; R]| v.map(f32::to_bits);
        assert_eq!(bits(totals), bits(&first), "R = {R}, {threads} threads: block {b} thread {t} differs");
    }
}

#[test]
fn block_sums_reach_every_thread_in_the_same_bits() {
    for threads in [32, 64, 96, 128] {
        check::<1>(threads);
        check::<2>(threads);
        check::<3>(threads);
        check::<16>(threads);
        check::<32>(threads);
        check::<33>(threads);
    }
}

/// Lane `lane` of warp `warp`'s vector `v` in call `call` of the warp-group sums: fractions, so only the
/// documented order of addition gives the expected bits.
fn lane_value(call: usize, warp: usize, lane: usize, v: usize) -> [f32; 4] {
    core::array::from_fn(|c| {
        1.0 / (1.0 + (call * 17 + warp * 131 + lane * 7 + v * 3 + c) as f32) + (warp + call) as f32 * 0.37
    })
}

#[test]
fn warp_group_sums_reach_each_groups_first_warp_in_warp_order() {
    use ferrocomm_device::reduce::{sum_across_warp_groups, sum_across_warp_groups_bytes};
    const N: usize = 3;
    type Sums = Option<[[f32; 4]; N]>;
    for (warps, group) in [(4, 1), (4, 2), (4, 4), (2, 2), (1, 1)] {
        let got = Mutex::new(Vec::new());
        let shared = sum_across_warp_groups_bytes(N, warps);
        run_ok(1, [2, 1, 1], [32 * warps as u32, 1, 1], shared, &|| {
            let (warp, lane) = (warp_id() as usize, lane_id() as usize);
            // Two calls back to back: the second's writes must wait for the first's reads.
            let sums: [Sums; 2] = core::array::from_fn(|call| {
                sum_across_warp_groups(core::array::from_fn::<_, N, _>(|v| lane_value(call, warp, lane, v)), group)
            });
            got.lock().unwrap().push((block_rank(), warp, lane, sums));
        });
        let got = got.into_inner().unwrap();
        assert_eq!(got.len(), 2 * 32 * warps, "{warps} warps, groups of {group}");
        for (block, warp, lane, sums) in got {
            for (call, sums) in sums.into_iter().enumerate() {
                let what =
                    format!("{warps} warps, groups of {group}: block {block} warp {warp} lane {lane} call {call}");
                if warp % group != 0 {
                    assert!(sums.is_none(), "{what} got sums");
                    continue;
                }
                let want: [[f32; 4]; N] = core::array::from_fn(|v| {
                    (warp + 1..warp + group).fold(lane_value(call, warp, lane, v), |t, w| {
                        let x = lane_value(call, w, lane, v);
                        core::array::from_fn(|c| t[c] + x[c])
                    })
                });
                let bits = |s: [[f32; 4]; N]| s.map(|q| q.map(f32::to_bits));
                assert_eq!(sums.map(bits), Some(bits(want)), "{what}");
            }
        }
    }
}

/// Sums back to back in one block: a call's writes to the shared stash must wait until every warp has read
/// the previous call's (the barrier that ends a call), or a slow warp adds the next call's values into this
/// call's totals. Many calls in many warps, so that some warp is slow.
#[test]
fn back_to_back_block_sums_keep_their_own_values() {
    const CALLS: usize = 12;
    fn twice<const R: usize>(threads: u32) {
        let got = Mutex::new(Vec::new());
        let shared = sum_across_block_bytes(R, threads as usize / 32);
        run_ok(1, [2, 1, 1], [threads, 1, 1], shared, &|| {
            let t = thread_rank();
            let calls: [[f32; R]; CALLS] = core::array::from_fn(|call| {
                sum_across_block(core::array::from_fn::<f32, R, _>(|r| value(t, r, false) + (call * 1000) as f32))
            });
            got.lock().unwrap().push((block_rank(), t, calls));
        });
        for (b, t, calls) in got.into_inner().unwrap() {
            for (call, totals) in calls.iter().enumerate() {
                let want: [f32; R] =
                    core::array::from_fn(|r| (0..threads).map(|u| value(u, r, false) + (call * 1000) as f32).sum());
                assert_eq!(totals, &want, "R = {R}, {threads} threads: block {b} thread {t}, call {call}");
            }
        }
    }
    for threads in [64, 96, 256] {
        twice::<1>(threads);
        twice::<2>(threads);
        twice::<3>(threads);
    }
}
