//! One all-reduce size, verified and timed: a direct call checked against the CPU reference, then a CUDA
//! graph of back-to-back calls on the same buffer, timed over several replays and checked once more against
//! the reference applied as many times.

use std::mem::size_of;

use ferrocomm::SymBuffer;
use ferrocomm_kernels::element::Element;
use ferrocomm_kernels::verify::{Sample, pattern};
use ferrocomm_kernels::{Algorithm, Communicator, Op, Reducible, reference};

use crate::error::{ExampleError, check_equal};
use crate::timing::{Timing, format_bytes, time_replays};

/// How much of each size to run: the graph's length and the replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphRuns {
    /// Operations captured back to back in one graph.
    pub ops_per_graph: usize,
    /// Untimed replays first.
    pub warmup: usize,
    /// Timed replays.
    pub replays: usize,
}

impl GraphRuns {
    /// GPU defaults: graphs of 20 operations, 5 warm-up and 30 timed replays.
    pub const GPU: GraphRuns = GraphRuns { ops_per_graph: 20, warmup: 5, replays: 30 };
    /// Emulator defaults: enough to exercise replays, short enough to finish in a moment.
    pub const EMULATOR: GraphRuns = GraphRuns { ops_per_graph: 3, warmup: 1, replays: 3 };

    /// The defaults for `team`'s backend.
    pub fn for_team(team: &ferrocomm::Team) -> GraphRuns {
        match team.backend() {
            ferrocomm::Backend::Cuda => GraphRuns::GPU,
            ferrocomm::Backend::Emulator => GraphRuns::EMULATOR,
        }
    }

    /// The defaults for `team`'s backend, with the operations per graph and the timed replays a command
    /// line gave (the warm-up stays the default).
    pub fn for_team_with(team: &ferrocomm::Team, ops_per_graph: Option<usize>, replays: Option<usize>) -> GraphRuns {
        let defaults = GraphRuns::for_team(team);
        GraphRuns {
            ops_per_graph: ops_per_graph.unwrap_or(defaults.ops_per_graph),
            replays: replays.unwrap_or(defaults.replays),
            ..defaults
        }
    }
}

/// The outcome of [`all_reduce`]: every check passed, and how long one call took.
#[derive(Debug, Clone, PartialEq)]
pub struct AllReduceResult {
    /// `bf16`, `f16` or `f32`.
    pub dtype: &'static str,
    /// Elements per rank.
    pub elements: usize,
    /// Bytes per rank.
    pub bytes: usize,
    /// The reduction.
    pub op: Op,
    /// The algorithm the calls used.
    pub algorithm: Algorithm,
    /// Ranks.
    pub world: usize,
    /// Time per call from graph replays.
    pub timing: Timing,
}

impl AllReduceResult {
    /// Bus bandwidth in GB/s: `2 (world - 1) / world` of the message per rank over the time, the figure
    /// NCCL's tests report (comparable across team sizes).
    pub fn bus_gbps(&self) -> f64 {
        let w = self.world as f64;
        self.timing.rate(self.bytes) * 2.0 * (w - 1.0) / w / 1e9
    }

    /// One line: `bf16 x 32768 (64 KiB) Sum LlOneShot 2.71 us/op bus 48.3 GB/s verified`.
    pub fn line(&self) -> String {
        let bus = self.bus_gbps();
        let bus = if bus >= 0.1 { format!("{bus:>7.1} GB/s") } else { format!("{:>7.3} MB/s", bus * 1e3) };
        format!(
            "{:>4} x {:>9} ({:>8}) {:?} {:<10} {:>10.2} us/op   bus {bus}   verified",
            self.dtype,
            self.elements,
            format_bytes(self.bytes),
            self.op,
            format!("{:?}", self.algorithm),
            self.timing.median_us(),
        )
    }
}

/// All-reduce of `elements` elements of `T` per rank with `op` — by `algorithm`, or the one the
/// communicator picks for the size — verified against [`reference::all_reduce`] after a direct call and
/// after the timed graph replays. Inputs are `verify::pattern(seed, rank, elements)`.
pub fn all_reduce<T: Reducible + Sample>(
    comm: &mut Communicator<'_>,
    elements: usize,
    op: Op,
    algorithm: Option<Algorithm>,
    runs: GraphRuns,
    seed: u64,
) -> Result<AllReduceResult, ExampleError> {
    let team = comm.team();
    let world = team.world();
    let bytes = elements * size_of::<T>();
    let algorithm = algorithm.unwrap_or_else(|| comm.all_reduce_algorithm(bytes));
    let what = |stage: &str| format!("all-reduce {} x {elements} {op:?} {algorithm:?} ({stage})", T::NAME);

    // A direct call: fill every rank, reduce, compare every rank with the CPU reference.
    let inputs: Vec<Vec<T>> = (0..world).map(|rank| pattern(seed, rank, elements)).collect();
    let mut buf = SymBuffer::<T>::new(team, elements)?;
    for rank in team.local_ranks() {
        buf.copy_from_host(rank, &inputs[rank])?;
    }
    comm.all_reduce_with(&mut buf, op, algorithm)?.wait()?;
    let expected = reference::all_reduce(&inputs, op);
    for rank in team.local_ranks() {
        check_equal(&what("direct call"), rank, &expected, &buf.to_host(rank)?)?;
    }

    // A graph of back-to-back calls on the same buffer: nothing is reset between them or between replays.
    let ops = runs.ops_per_graph.max(1);
    let graph = comm.capture(|comm| {
        for _ in 0..ops {
            comm.all_reduce_with(&mut buf, op, algorithm)?.wait()?;
        }
        Ok(())
    })?;
    let timing = time_replays(&graph, ops, runs.warmup, runs.replays)?;

    // One more replay from fresh inputs: every rank must hold the reference applied `ops` times.
    for rank in team.local_ranks() {
        buf.copy_from_host(rank, &inputs[rank])?;
    }
    graph.replay()?.wait()?;
    let expected = repeated_all_reduce(&inputs, op, ops);
    for rank in team.local_ranks() {
        check_equal(&what(&format!("graph of {ops} calls")), rank, &expected, &buf.to_host(rank)?)?;
    }
    Ok(AllReduceResult { dtype: T::NAME, elements, bytes, op, algorithm, world, timing })
}

/// What every rank holds after `times` all-reduces of `inputs` in a row: the first reduces the inputs,
/// each later one reduces `world` equal copies (accumulated in `f32` in rank order, rounded once — as the
/// kernels and [`reference::all_reduce`] do).
pub fn repeated_all_reduce<T: Element>(inputs: &[Vec<T>], op: Op, times: usize) -> Vec<T> {
    let world = inputs.len();
    let mut out = reference::all_reduce(inputs, op);
    for v in &mut out {
        for _ in 1..times {
            let x = v.to_f32();
            *v = T::from_f32((1..world).fold(x, |acc, _| op.apply(acc, x)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocomm_device::bf16;

    #[test]
    fn repeating_matches_the_reference_applied_again() {
        let inputs = vec![vec![bf16::from_f32(1.5), bf16::from_f32(-0.25)], vec![bf16::from_f32(0.75); 2]];
        let once = reference::all_reduce(&inputs, Op::Sum);
        let twice = reference::all_reduce(&[once.clone(), once.clone()], Op::Sum);
        let thrice = reference::all_reduce(&[twice.clone(), twice.clone()], Op::Sum);
        assert_eq!(repeated_all_reduce(&inputs, Op::Sum, 1), once);
        assert_eq!(repeated_all_reduce(&inputs, Op::Sum, 3), thrice);
        assert_eq!(repeated_all_reduce(&inputs, Op::Max, 4), reference::all_reduce(&inputs, Op::Max));
    }
}
