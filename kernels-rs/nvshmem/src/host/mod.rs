//! The host side: buffers, launches and CPU references, written once for every team — the emulator's, and
//! a team initialised with NVSHMEM on GPUs (`tests/tests/gpu_nvshmem.rs`). Every check reads back the ranks
//! this process runs and compares them with the reference. The bench's operations: [`NvshmemOps`].

mod ops;

pub use ops::{
    BYTES_PER_BLOCK, NvshmemOps, PING_WARP_MAX_BYTES, REDUCE_BYTES_PER_BLOCK, byte_pattern, check_all_gather,
    check_all_reduce_sum, check_all_to_all, check_ping_pong, check_put,
};

use ferrocomm::{Error, LaunchConfig, LaunchGuard, SignalPadBuffer, SymBuffer, Team};

/// What a check found wrong.
#[derive(Debug)]
pub enum CheckError {
    /// The runtime refused the launch, or the kernel reported an error.
    Runtime(Error),
    /// A rank's buffer differs from the reference.
    Mismatch {
        /// The check.
        what: String,
        /// The rank.
        rank: usize,
        /// The first differing element.
        index: usize,
        /// The reference's value.
        want: String,
        /// The buffer's value.
        got: String,
    },
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Runtime(e) => write!(f, "{e}"),
            CheckError::Mismatch { what, rank, index, want, got } => {
                write!(f, "{what}: rank {rank}, element {index}: want {want}, got {got}")
            }
        }
    }
}

impl std::error::Error for CheckError {}

impl From<Error> for CheckError {
    fn from(e: Error) -> Self {
        CheckError::Runtime(e)
    }
}

fn compare<T: PartialEq + std::fmt::Debug>(what: &str, rank: usize, want: &[T], got: &[T]) -> Result<(), CheckError> {
    match want.iter().zip(got).position(|(w, g)| w != g) {
        None if want.len() == got.len() => Ok(()),
        found => {
            let index = found.unwrap_or(want.len().min(got.len()));
            Err(CheckError::Mismatch {
                what: what.to_owned(),
                rank,
                index,
                want: format!("{:?}", want.get(index)),
                got: format!("{:?}", got.get(index)),
            })
        }
    }
}

/// Rank `rank`'s source in launch `launch`: distinct per rank, launch and element.
pub fn put_pattern(rank: usize, launch: usize, i: usize) -> u32 {
    (rank as u32 + 1) << 24 | (launch as u32 & 0xff) << 16 | (i as u32 & 0xffff)
}

/// The reference of [`crate::nvshmem_put_signal()`]: rank `rank`'s `dst` after a launch in which every rank
/// `q` sent `sources[q]` (slot `q` of rank `q + 1`; every other slot keeps `before`).
pub fn put_signal_reference(rank: usize, sources: &[Vec<u32>], before: &[u32]) -> Vec<u32> {
    let world = sources.len();
    let prev = (rank + world - 1) % world;
    let n = sources[prev].len();
    let mut dst = before.to_vec();
    dst[prev * n..(prev + 1) * n].copy_from_slice(&sources[prev]);
    dst
}

/// Launches [`crate::nvshmem_put_signal()`] `launches` times with `len` elements per rank (new sources each
/// time, on the same pad: its epochs carry on) and checks every local rank's `dst` after each, and that
/// loads and stores reach every rank (true of every team these checks run on: the emulator's, and GPUs of
/// one node).
pub fn check_put_signal(team: &Team, len: usize, threads: u32, launches: usize) -> Result<(), CheckError> {
    let world = team.world();
    let mut src = SymBuffer::<u32>::new(team, len)?;
    let mut dst = SymBuffer::<u32>::new(team, world * len)?;
    let mut reach = SymBuffer::<u32>::new(team, world)?;
    let pad = SignalPadBuffer::new(team, "nvshmem_put_signal", 2)?;
    let mut expected: Vec<Vec<u32>> = vec![vec![0; world * len]; world];
    for launch in 0..launches {
        let sources: Vec<Vec<u32>> =
            (0..world).map(|r| (0..len).map(|i| put_pattern(r, launch, i)).collect()).collect();
        for rank in team.local_ranks() {
            src.copy_from_host(rank, &sources[rank])?;
        }
        let cfg = LaunchConfig::new(1, threads);
        crate::nvshmem_put_signal::launch(team, cfg, &src, &mut dst, &mut reach, &pad)?.wait()?;
        for rank in team.local_ranks() {
            expected[rank] = put_signal_reference(rank, &sources, &expected[rank]);
            let what = format!("nvshmem_put_signal, {len} elements, launch {launch}");
            compare(&what, rank, &expected[rank], &dst.to_host(rank)?)?;
            compare(&format!("{what}: reachable ranks"), rank, &vec![1; world], &reach.to_host(rank)?)?;
        }
        // The kernel has no handshake that keeps a rank's next put out of a `dst` its host still reads:
        // with ranks in other processes, every process finishes its checks before any launches again.
        team.agree("check_put_signal", &format!("launch {launch} checked"))?;
    }
    Ok(())
}

/// Rank `rank`'s input in launch `launch`: small integers, so sums in any order are exact in f32.
pub fn reduce_pattern(rank: usize, launch: usize, i: usize) -> f32 {
    ((rank * 7 + launch * 3 + i) % 97) as f32 - 48.0
}

/// The reference sum of every rank's input.
pub fn all_reduce_reference(inputs: &[Vec<f32>]) -> Vec<f32> {
    let n = inputs.first().map_or(0, Vec::len);
    (0..n).map(|i| inputs.iter().map(|v| v[i]).sum()).collect()
}

/// Launches [`crate::nvshmem_all_reduce_f32()`] `launches` times on the same buffers and pad, each reducing
/// the previous launch's result (so the stage's halves alternate), and checks every local rank's result
/// after each against the reference.
pub fn check_all_reduce(team: &Team, len: usize, threads: u32, launches: usize) -> Result<(), CheckError> {
    let world = team.world();
    let mut data = SymBuffer::<f32>::new(team, len)?;
    let mut stage = SymBuffer::<f32>::new(team, 2 * world * len)?;
    let pad = SignalPadBuffer::new(team, "nvshmem_all_reduce", world)?;
    let inputs: Vec<Vec<f32>> = (0..world).map(|r| (0..len).map(|i| reduce_pattern(r, 0, i)).collect()).collect();
    for rank in team.local_ranks() {
        data.copy_from_host(rank, &inputs[rank])?;
    }
    let mut want = inputs;
    for launch in 0..launches {
        let guard: LaunchGuard<'_> =
            crate::nvshmem_all_reduce_f32::launch(team, LaunchConfig::new(1, threads), &mut data, &mut stage, &pad)?;
        guard.wait()?;
        let sum = all_reduce_reference(&want);
        want = vec![sum; world];
        for rank in team.local_ranks() {
            let what = format!("nvshmem_all_reduce_f32, {len} elements, launch {launch}");
            compare(&what, rank, &want[rank], &data.to_host(rank)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_put_reference_fills_the_previous_ranks_slot_only() {
        let sources = vec![vec![1, 2], vec![3, 4], vec![5, 6]];
        assert_eq!(put_signal_reference(0, &sources, &[0; 6]), [0, 0, 0, 0, 5, 6]);
        assert_eq!(put_signal_reference(1, &sources, &[9; 6]), [1, 2, 9, 9, 9, 9]);
    }

    #[test]
    fn the_reduce_reference_sums_across_ranks() {
        assert_eq!(all_reduce_reference(&[vec![1.0, 2.0], vec![10.0, 20.0]]), [11.0, 22.0]);
        assert_ne!(reduce_pattern(0, 0, 5), reduce_pattern(1, 0, 5));
    }
}
