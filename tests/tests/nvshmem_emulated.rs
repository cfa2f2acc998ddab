//! The NVSHMEM kernels on the CPU emulator: the remote-capable calls of `ferrocomm_device::nvshmem` run on
//! the emulator's memory model (weak stores, the checker) and give what the CPU references say, at several
//! team sizes and lengths that are not multiples of 16 bytes — the put-with-signal and one-block all-reduce,
//! and the bench's operations (`NvshmemOps`) at 0, 1, odd sizes and more than one block's chunk. The GPU
//! test (`gpu_nvshmem.rs`) runs the same checks on a team initialised with NVSHMEM.

use ferrocomm::Team;
use ferrocomm_device::{bf16, f16};
use ferrocomm_nvshmem_kernels::host::{
    BYTES_PER_BLOCK, NvshmemOps, check_all_gather, check_all_reduce, check_all_reduce_sum, check_all_to_all,
    check_ping_pong, check_put, check_put_signal,
};

fn emulated(world: usize) -> Team {
    Team::emulated(world).expect("an emulated team needs no GPU")
}

#[test]
fn put_with_signal_reaches_the_next_rank_in_every_launch() {
    for world in [1, 2, 3] {
        let team = emulated(world);
        for len in [1, 37, 256] {
            check_put_signal(&team, len, 64, 3).unwrap_or_else(|e| panic!("world {world}: {e}"));
        }
    }
}

#[test]
fn the_all_reduce_sums_every_rank_over_launches_back_to_back() {
    for world in [1, 2, 4] {
        let team = emulated(world);
        for len in [1, 33, 200] {
            check_all_reduce(&team, len, 64, 3).unwrap_or_else(|e| panic!("world {world}: {e}"));
        }
    }
}

/// Sizes of the bench's operations: empty, one byte, odd, and more than one block's chunk with a tail.
const OPS_BYTES: [usize; 4] = [0, 1, 333, BYTES_PER_BLOCK + 77];

#[test]
fn the_bench_operations_through_nvshmem_match_their_references() {
    for world in [1, 2, 3] {
        let team = emulated(world);
        let ops = NvshmemOps::new(&team).unwrap();
        let fail = |what: &'static str, bytes: usize| move |e| panic!("world {world}, {what} of {bytes} B: {e}");
        for bytes in OPS_BYTES {
            check_put(&ops, bytes, 2).unwrap_or_else(fail("put", bytes));
            check_all_gather(&ops, bytes, 2).unwrap_or_else(fail("all-gather", bytes));
            check_all_to_all(&ops, bytes, 2).unwrap_or_else(fail("all-to-all", bytes));
        }
        for bytes in [1, 64, 1000] {
            check_ping_pong(&ops, bytes, 3).unwrap_or_else(fail("ping-pong", bytes));
        }
        for len in [0, 1, 37, BYTES_PER_BLOCK / 4 + 5] {
            check_all_reduce_sum::<f32>(&ops, len, 3).unwrap_or_else(fail("all-reduce f32", len * 4));
        }
        check_all_reduce_sum::<bf16>(&ops, 1001, 2).unwrap_or_else(fail("all-reduce bf16", 2002));
        check_all_reduce_sum::<f16>(&ops, 7, 2).unwrap_or_else(fail("all-reduce f16", 14));
    }
}
