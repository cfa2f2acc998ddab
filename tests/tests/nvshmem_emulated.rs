//! The NVSHMEM test kernels on the CPU emulator: the remote-capable calls of `ferrocomm_device::nvshmem`
//! run on the emulator's memory model (weak stores, the checker) and give what the CPU references say, at
//! several team sizes and lengths that are not multiples of 16 bytes. The GPU test (`gpu_nvshmem.rs`) runs
//! the same checks on a team initialised with NVSHMEM.

use ferrocomm::Team;
use ferrocomm_nvshmem_kernels::host::{check_all_reduce, check_put_signal};

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
