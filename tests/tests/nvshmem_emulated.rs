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

/// The kernels of this file have no PTX: they run on the emulator only.
static EMU_ONLY: ferrocomm::KernelModule = ferrocomm::KernelModule::new("nvshmem_emulated", &[]);

/// A kernel that consumes what an operation delivered: every rank copies its own copy of `delivered` into
/// `out`. It does not communicate, so only the operation before it orders its reads after the puts that
/// filled `delivered`.
#[ferrocomm_device::kernel(module = crate::EMU_ONLY, bytes(delivered, out), requires(len(out) >= len(delivered)))]
pub fn consume(delivered: ferrocomm_device::prelude::SymSlice<u8>, out: &mut [u8]) {
    use ferrocomm_device::prelude::*;
    let from = Vectors::of(delivered.local());
    VectorsMut::of(out).copy_from(from, 0, (0, from.vectors()), (global_thread_idx(), global_threads()));
}

/// What the put and the ping-pong deliver is ordered before the receivers' next kernels: each is followed,
/// in one replayed graph (no host wait between the kernels, so the ranks' streams run ahead of each other),
/// by a kernel that reads the delivered buffer and does not communicate, and then by the same operation
/// again. The emulator's checker reports a read that no acquire orders after the put that wrote it, and a
/// put that nothing orders after an earlier kernel's read of its destination.
#[test]
fn what_the_put_and_the_ping_pong_deliver_is_ordered_before_the_next_kernel() {
    use ferrocomm::{LaunchConfig, SymBuffer};
    use ferrocomm_nvshmem_kernels::host::byte_pattern;
    let reader = LaunchConfig::new(2, 32);
    for world in [2, 3] {
        let team = emulated(world);
        let ops = NvshmemOps::new(&team).unwrap();
        let (a, b) = ops.pair();
        let payload = |rank: usize, bytes: usize| (0..bytes).map(|i| byte_pattern(rank, 0, i)).collect::<Vec<u8>>();
        let filled = |bytes: usize| {
            let mut buf = SymBuffer::<u8>::new(&team, bytes).unwrap();
            for rank in 0..world {
                buf.copy_from_host(rank, &payload(rank, bytes)).unwrap();
            }
            buf
        };
        let bytes = BYTES_PER_BLOCK + 77;
        let (src, mut dst) = (filled(bytes), SymBuffer::<u8>::new(&team, bytes).unwrap());
        let mut read = SymBuffer::<u8>::new(&team, bytes).unwrap();
        let graph = team
            .capture(|team| {
                ops.put(&src, &mut dst, (a, b))?.wait()?;
                consume::launch(team, reader, dst.bytes(), read.bytes_mut())?.wait()?;
                ops.put(&src, &mut dst, (a, b))?.wait()
            })
            .unwrap();
        graph.replay().unwrap().wait().unwrap_or_else(|e| panic!("world {world}, put: {e}"));
        drop(graph);
        assert_eq!(read.to_host(b).unwrap(), payload(a, bytes), "world {world}");

        let small = 200;
        let (ping, mut inbox) = (filled(small), SymBuffer::<u8>::new(&team, small).unwrap());
        let mut seen = SymBuffer::<u8>::new(&team, small).unwrap();
        let pad = ops.ping_pad().unwrap();
        let graph = team
            .capture(|team| {
                ops.ping_pong(&ping, &mut inbox, &pad, (a, b), 3)?.wait()?;
                consume::launch(team, reader, inbox.bytes(), seen.bytes_mut())?.wait()?;
                ops.ping_pong(&ping, &mut inbox, &pad, (a, b), 3)?.wait()
            })
            .unwrap();
        graph.replay().unwrap().wait().unwrap_or_else(|e| panic!("world {world}, ping-pong: {e}"));
        drop(graph);
        assert_eq!(seen.to_host(a).unwrap(), payload(b, small), "world {world}");
        assert_eq!(seen.to_host(b).unwrap(), payload(a, small), "world {world}");
    }
}
