//! The blocks a library call launches per rank, for the report's *SMs* column. Every kernel of the library
//! that waits is launched with at most one block per SM (`Tuning::max_blocks` is the SM count), so blocks
//! are the SMs the call occupies.
//!
//! The `Communicator` does not say which grid it picked, so this mirrors its choice: the algorithm or
//! transport comes from the communicator itself, the grid from the same `Tuning` fields and formula
//! (`blocks = ceil(vectors / (threads × vectors per thread))`, between 1 and the cap).

use ferrocomm_kernels::layout::VECTOR_BYTES;
use ferrocomm_kernels::{Algorithm, Communicator, ExchangeTransport, Tuning};

use crate::model::Operation;

/// `ceil(vectors / (threads × per_thread))`, at least 1, at most `cap`.
pub fn grid(vectors: usize, threads: u32, per_thread: u32, cap: u32) -> u32 {
    let per_block = (threads as usize * per_thread as usize).max(1);
    vectors.div_ceil(per_block).clamp(1, cap.max(1) as usize) as u32
}

/// Blocks of a put (or get) of `bytes`.
pub fn put_blocks(t: &Tuning, bytes: usize) -> u32 {
    grid(bytes.div_ceil(VECTOR_BYTES), t.put_threads, t.vectors_per_thread, t.put_blocks)
}

/// Blocks of an all-reduce of `bytes` per rank in elements of `elem` bytes.
pub fn all_reduce_blocks(comm: &Communicator<'_>, bytes: usize, elem: usize) -> u32 {
    let (t, world) = (comm.tuning(), comm.world());
    let vectors = bytes.div_ceil(VECTOR_BYTES);
    match comm.all_reduce_algorithm(bytes) {
        Algorithm::LlOneShot => grid(vectors, t.ll_threads, t.ll_vectors_per_thread, t.max_blocks),
        Algorithm::OneShot => grid(vectors, t.threads, t.ll_vectors_per_thread, t.max_blocks),
        Algorithm::TwoShot => {
            let elem = elem.max(1);
            let lanes = (VECTOR_BYTES / elem).max(1);
            let chunk = (bytes / elem).div_ceil(world).next_multiple_of(lanes).max(1);
            let slot_vectors = t.scratch_bytes / VECTOR_BYTES / world;
            let segment = (chunk * elem).div_ceil(VECTOR_BYTES).min(slot_vectors);
            grid(segment, t.threads, t.vectors_per_thread, t.max_blocks)
        }
    }
}

/// Blocks of an exchange (all-gather, all-to-all, broadcast) whose messages per destination are at most
/// `bytes`.
pub fn exchange_blocks(comm: &Communicator<'_>, bytes: usize) -> u32 {
    let t = comm.tuning();
    let vectors = bytes.div_ceil(VECTOR_BYTES);
    match comm.exchange_transport(bytes) {
        ExchangeTransport::Ll => grid(vectors, t.ll_threads, t.ll_vectors_per_thread, t.max_blocks),
        ExchangeTransport::Staged => grid(vectors, t.threads, t.ll_vectors_per_thread, t.max_blocks),
        ExchangeTransport::Direct => grid(vectors, t.threads, t.vectors_per_thread, t.max_blocks),
    }
}

/// Blocks per rank of the gpu mode's `op` at `bytes` (the benchmark's size convention) in elements of
/// `elem` bytes, as the gpu mode runs it (`ping_kernel`: a ping-pong kernel rather than two puts).
pub fn blocks(comm: &Communicator<'_>, op: Operation, bytes: usize, elem: usize, ping_kernel: bool) -> u32 {
    let world = comm.world().max(1);
    match op {
        Operation::PingPong if ping_kernel => 1,
        Operation::PingPong | Operation::PutBandwidth => put_blocks(comm.tuning(), bytes),
        Operation::AllReduce => all_reduce_blocks(comm, bytes, elem),
        // Each rank contributes `bytes / world`, and all-to-all sends `bytes / world` to each rank.
        Operation::AllGather | Operation::AllToAll => exchange_blocks(comm, bytes / world),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids() {
        assert_eq!(grid(0, 256, 4, 132), 1);
        assert_eq!(grid(1024, 256, 4, 132), 1);
        assert_eq!(grid(1025, 256, 4, 132), 2);
        assert_eq!(grid(1 << 30, 256, 4, 132), 132);
        // Put: 512 threads × 4 vectors per block, at most `put_blocks` (64) blocks.
        let t = Tuning::gpu(132, 2);
        assert_eq!(put_blocks(&t, 8), 1);
        assert_eq!(put_blocks(&t, 512 * 4 * 16), 1);
        assert_eq!(put_blocks(&t, 512 * 4 * 16 + 1), 2);
        assert_eq!(put_blocks(&t, 64 << 20), 64);
    }
}
