//! Bandwidth from time, with NCCL's bus-bandwidth convention so figures compare with nccl-tests'.
//!
//! Algorithm bandwidth is the operation's size over its time. Bus bandwidth scales it by how much of the
//! data each rank's links must carry, so that a perfect implementation reaches the link rate whatever the
//! rank count (nccl-tests, doc/PERFORMANCE.md):
//!
//! | operation | size | bus factor |
//! | --- | --- | --- |
//! | all-reduce | the buffer | 2(n−1)/n |
//! | all-gather, reduce-scatter | the whole (gathered) buffer | (n−1)/n |
//! | all-to-all | one rank's send buffer | (n−1)/n |
//! | ping-pong, put | the message, one way | 1 |

use crate::model::Operation;

/// NCCL's bus factor for `op` with `world` ranks (0 for a collective over one rank: nothing crosses a link).
pub fn bus_factor(op: Operation, world: usize) -> f64 {
    let n = world.max(1) as f64;
    match op {
        Operation::PingPong | Operation::PutBandwidth => 1.0,
        Operation::AllReduce => 2.0 * (n - 1.0) / n,
        Operation::AllGather | Operation::AllToAll => (n - 1.0) / n,
    }
}

/// Algorithm bandwidth, GB/s (10^9 bytes per second), of `bytes` in `us` microseconds; 0 for no time.
pub fn algbw_gbps(bytes: u64, us: f64) -> f64 {
    if us > 0.0 && us.is_finite() { bytes as f64 / us / 1e3 } else { 0.0 }
}

/// Bus bandwidth, GB/s, of `op` on `world` ranks moving `bytes` in `us` microseconds.
pub fn busbw_gbps(op: Operation, world: usize, bytes: u64, us: f64) -> f64 {
    algbw_gbps(bytes, us) * bus_factor(op, world)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_factors() {
        assert_eq!(bus_factor(Operation::AllReduce, 2), 1.0);
        assert_eq!(bus_factor(Operation::AllReduce, 8), 1.75);
        assert_eq!(bus_factor(Operation::AllGather, 2), 0.5);
        assert_eq!(bus_factor(Operation::AllToAll, 4), 0.75);
        assert_eq!(bus_factor(Operation::PingPong, 8), 1.0);
        assert_eq!(bus_factor(Operation::AllReduce, 1), 0.0);
    }

    #[test]
    fn units() {
        // 1 GB in 1 s = 1 GB/s; 256 MiB all-reduce on 2 GPUs in 813.4 µs ≈ 330 GB/s busbw (the two-shot anchor).
        assert!((algbw_gbps(1_000_000_000, 1e6) - 1.0).abs() < 1e-12);
        let bus = busbw_gbps(Operation::AllReduce, 2, 256 << 20, 813.4);
        assert!((bus - 330.0).abs() < 0.1, "{bus}");
        assert_eq!(algbw_gbps(8, 0.0), 0.0);
        assert_eq!(algbw_gbps(8, f64::NAN), 0.0);
    }
}
