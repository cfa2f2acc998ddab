//! Per-operation times from CUDA-graph replays (on the emulator, replays of the recorded launches): a graph
//! of `n` back-to-back operations is replayed after a warm-up, each replay timed on the host from launch to
//! completion, and divided by `n` — the way latency-critical code calls collectives, with the launch cost
//! spread over the graph.

use std::fmt;
use std::time::{Duration, Instant};

use ferrocomm::TeamGraph;

/// How long one operation took, over several replays of a graph.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Median over the replays of (replay time / operations per replay).
    pub median: Duration,
    /// The fastest replay's time per operation.
    pub min: Duration,
    /// Replays timed.
    pub replays: usize,
    /// Operations in each replay.
    pub ops_per_replay: usize,
}

impl Timing {
    /// The median in microseconds.
    pub fn median_us(&self) -> f64 {
        self.median.as_secs_f64() * 1e6
    }

    /// Bytes per second moved by an operation of `bytes` bytes at the median time.
    pub fn rate(&self, bytes: usize) -> f64 {
        bytes as f64 / self.median.as_secs_f64().max(1e-12)
    }
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.2} us per op (median; min {:.2}; {} replays x {} ops)",
            self.median_us(),
            self.min.as_secs_f64() * 1e6,
            self.replays,
            self.ops_per_replay
        )
    }
}

/// Replays `graph` `warmup` times untimed, then `replays` times timed; `ops_per_replay` is how many
/// operations the graph holds.
pub fn time_replays(
    graph: &TeamGraph<'_>,
    ops_per_replay: usize,
    warmup: usize,
    replays: usize,
) -> Result<Timing, ferrocomm::Error> {
    for _ in 0..warmup {
        graph.replay()?.wait()?;
    }
    let ops = ops_per_replay.max(1) as u32;
    let mut per_op = Vec::with_capacity(replays.max(1));
    for _ in 0..replays.max(1) {
        let started = Instant::now();
        graph.replay()?.wait()?;
        per_op.push(started.elapsed() / ops);
    }
    per_op.sort_unstable();
    Ok(Timing { median: per_op[per_op.len() / 2], min: per_op[0], replays: per_op.len(), ops_per_replay })
}

/// `bytes` with a binary unit: `64 KiB`, `1 MiB`, `100 B`.
pub fn format_bytes(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes;
    let mut unit = 0;
    while unit + 1 < UNITS.len() && value >= 1024 && value.is_multiple_of(1024) {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}

/// Parses a size in bytes ([`ferrocomm::size::parse_size`]: `4096`, `64K`, `64KiB`, `1M`, `1MiB`, `1G`).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let bytes = ferrocomm::size::parse_size(text).map_err(|e| e.to_string())?;
    usize::try_from(bytes).map_err(|_| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64K"), Ok(64 << 10));
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes(" 2g "), Ok(2 << 30));
        assert!(parse_bytes("1Q").unwrap_err().contains("not a size"));
        assert!(parse_bytes("K").unwrap_err().contains("not a size"));
        assert_eq!(format_bytes(64 << 10), "64 KiB");
        assert_eq!(format_bytes(3000), "3000 B");
        assert_eq!(format_bytes(16 << 20), "16 MiB");
    }
}
