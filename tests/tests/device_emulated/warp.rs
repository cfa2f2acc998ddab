//! Warp-synchronous calls with member masks: the emulator's rule (`kernels-rs/emu/src/warp.rs`) judged in every arrival
//! order. Each case runs with the lanes let loose together, and with one half of the warp held back so
//! that the other half arrives (and, where it can, finishes) first: the verdict must not change.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ferrocomm_device::emu::EmuError;
use ferrocomm_device::prelude::*;

use super::support::{TIMEOUT_NS, run, run_ok};

/// Which lanes start late.
#[derive(Debug, Clone, Copy)]
enum Order {
    Together,
    LowHalfLate,
    HighHalfLate,
}

const ORDERS: [Order; 3] = [Order::Together, Order::LowHalfLate, Order::HighHalfLate];

/// Holds back this lane's half of the warp, so that the other half's calls happen first.
fn hold(order: Order) {
    let late = match order {
        Order::Together => false,
        Order::LowHalfLate => lane_id() < 16,
        Order::HighHalfLate => lane_id() >= 16,
    };
    if late {
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// A single warp of 32 lanes runs `body`; the launch must trap with a member-mask report.
fn assert_mask_mismatch(order: Order, body: &(dyn Fn() + Sync)) {
    let outcome = run(1, [1, 1, 1], [32, 1, 1], 0, TIMEOUT_NS, body);
    match &outcome[0].result {
        Err(EmuError::Trapped { message, .. }) => {
            assert!(message.contains("member mask") && message.contains("can never complete"), "{order:?}: {message}")
        }
        other => panic!("{order:?}: expected a trapped launch, got {other:?}"),
    }
}

#[test]
fn warp_calls_with_different_masks_are_reported_in_every_arrival_order() {
    for order in ORDERS {
        for _ in 0..8 {
            assert_mask_mismatch(order, &|| {
                hold(order);
                let mask = if lane_id() < 16 { u32::MAX } else { 0xffff_0000 };
                shfl_idx_sync(mask, lane_id(), 16);
            });
        }
    }
}

#[test]
fn a_lane_that_calls_again_with_another_mask_before_exiting_is_reported() {
    // All lanes meet once; then the high half shuffles among itself and exits while the low half names it.
    for order in ORDERS {
        assert_mask_mismatch(order, &|| {
            shfl_idx_sync(u32::MAX, lane_id(), 0);
            hold(order);
            if lane_id() >= 16 {
                shfl_idx_sync(0xffff_0000, lane_id(), 16);
                return;
            }
            shfl_idx_sync(u32::MAX, lane_id(), 0);
        });
    }
}

#[test]
fn rounds_that_wait_on_each_other_are_reported_not_hung() {
    // Lanes 0-15 wait for 16-31 in a full-mask call; 16-31 wait for 0-7 in theirs: neither can complete.
    for order in ORDERS {
        assert_mask_mismatch(order, &|| {
            hold(order);
            let mask = if lane_id() < 16 { u32::MAX } else { 0xffff_00ff };
            vote_ballot_sync(mask, true);
        });
    }
}

#[test]
fn lanes_that_exit_before_a_full_mask_call_are_not_waited_for() {
    // The PTX ISA waits for the non-exited lanes of the mask: early returns are legal.
    for order in ORDERS {
        run_ok(1, [1, 1, 1], [32, 1, 1], 0, &|| {
            shfl_idx_sync(u32::MAX, 0u32, 0);
            hold(order);
            if lane_id() >= 16 {
                return;
            }
            let ballot = vote_ballot_sync(u32::MAX, true);
            assert_eq!(ballot, 0xffff, "{order:?}: only the live lanes take part");
            assert_eq!(shfl_idx_sync(u32::MAX, lane_id() * 10, 5), 50, "{order:?}");
        });
    }
}

#[test]
fn divergent_branches_with_disjoint_masks_then_a_full_mask_call_complete() {
    // Each half shuffles among itself (at once, in two rounds), then the whole warp meets.
    for order in ORDERS {
        run_ok(1, [1, 1, 1], [32, 1, 1], 0, &|| {
            hold(order);
            let lane = lane_id();
            let (mask, src) = if lane < 16 { (0x0000_ffff, 3) } else { (0xffff_0000, 19) };
            assert_eq!(shfl_idx_sync(mask, lane + 100, src), src + 100, "{order:?} lane {lane}");
            if lane >= 16 {
                // A second call of the high half alone while the low half may already wait for it below.
                assert_eq!(vote_ballot_sync(0xffff_0000, lane.is_multiple_of(2)), 0x5555_0000, "{order:?}");
            }
            assert_eq!(vote_ballot_sync(u32::MAX, lane < 4), 0xf, "{order:?} lane {lane}");
        });
    }
}

/// `mma_m16n8k16_bf16` in the emulator: each lane builds its fragments of random `A` (16 × 16), `B` (16 × 8)
/// and `C` by the module's table, and the warp's `D` must be `A · B + C` computed here, element by element.
#[test]
fn mma_m16n8k16_bf16_multiplies_the_fragments_the_table_lays_out() {
    use ferrocomm_device::mma::{mma_m16n8k16_bf16, pack_bf16x2};
    // Small integers: every product and sum is exact in f32, so any misplaced element shows.
    let value = |i: usize| bf16::from_f32(((i * 37 + 11) % 19) as f32 - 9.0);
    let a: Vec<bf16> = (0..16 * 16).map(value).collect();
    let b: Vec<bf16> = (0..16 * 8).map(|i| value(i + 1000)).collect();
    let c: Vec<f32> = (0..16 * 8).map(|i| (i % 7) as f32).collect();
    let d: Vec<AtomicU32> = (0..16 * 8).map(|_| AtomicU32::new(f32::NAN.to_bits())).collect();
    for order in ORDERS {
        run_ok(1, [1, 1, 1], [32, 1, 1], 0, &|| {
            hold(order);
            let lane = lane_id() as usize;
            let (g, t) = (lane / 4, lane % 4);
            let a_pair = |row: usize, k: usize| pack_bf16x2(a[row * 16 + k].to_bits(), a[row * 16 + k + 1].to_bits());
            let b_pair = |k: usize, col: usize| pack_bf16x2(b[k * 8 + col].to_bits(), b[(k + 1) * 8 + col].to_bits());
            let frag_a = [a_pair(g, 2 * t), a_pair(g + 8, 2 * t), a_pair(g, 2 * t + 8), a_pair(g + 8, 2 * t + 8)];
            let frag_b = [b_pair(2 * t, g), b_pair(2 * t + 8, g)];
            let at = [g * 8 + 2 * t, g * 8 + 2 * t + 1, (g + 8) * 8 + 2 * t, (g + 8) * 8 + 2 * t + 1];
            let out = mma_m16n8k16_bf16(frag_a, frag_b, at.map(|i| c[i]));
            for (i, v) in at.into_iter().zip(out) {
                d[i].store(v.to_bits(), Ordering::Relaxed);
            }
        });
        for row in 0..16 {
            for col in 0..8 {
                let expected =
                    c[row * 8 + col] + (0..16).map(|k| a[row * 16 + k].to_f32() * b[k * 8 + col].to_f32()).sum::<f32>();
                let got = f32::from_bits(d[row * 8 + col].load(Ordering::Relaxed));
                assert_eq!(got, expected, "{order:?}: D[{row}][{col}]");
            }
        }
    }
}

#[test]
fn mma_from_a_partial_warp_is_reported() {
    let outcome = run(1, [1, 1, 1], [16, 1, 1], 0, TIMEOUT_NS, &|| {
        ferrocomm_device::mma::mma_m16n8k16_bf16([0; 4], [0; 2], [0.0; 4]);
    });
    match &outcome[0].result {
        Err(EmuError::Trapped { message, .. }) => assert!(message.contains("partial warp"), "{message}"),
        other => panic!("expected a trapped launch, got {other:?}"),
    }
}
