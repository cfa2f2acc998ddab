//! The quickstart's core: on a team of at least two ranks, all-reduces of a few sizes and a ping-pong on
//! both flag protocols, each verified against the CPU reference and timed. `examples/quickstart.rs` prints
//! it; `tests/tests/examples.rs` runs it on the emulator.

use std::fmt;

use ferrocomm::{Backend, Team};
use ferrocomm_device::bf16;
use ferrocomm_kernels::{Communicator, Op, PingProtocol};

use crate::all_reduce::{AllReduceResult, GraphRuns, all_reduce};
use crate::error::ExampleError;
use crate::ping_pong::{PingPongResult, default_iters, ping_pong};
use crate::team::Platform;

/// What the quickstart runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuickstartPlan {
    /// bf16 all-reduce sizes, in elements per rank.
    pub bf16_elements: Vec<usize>,
    /// f32 all-reduce sizes, in elements per rank.
    pub f32_elements: Vec<usize>,
    /// Graph length and replays per size.
    pub runs: GraphRuns,
    /// Ping-pong payload bytes.
    pub ping_bytes: usize,
    /// Ping-pong round trips.
    pub ping_iters: u32,
}

impl QuickstartPlan {
    /// On GPUs: bf16 at 4 KiB, 64 KiB, 1 MiB and 16 MiB per rank (LL one-shot, one-shot and two-shot sizes)
    /// and f32 at 256 KiB. On the emulator: sizes that take the same three algorithms under its tuning,
    /// small enough to finish in seconds.
    pub fn for_team(team: &Team) -> QuickstartPlan {
        match team.backend() {
            Backend::Cuda => QuickstartPlan {
                bf16_elements: vec![2 << 10, 32 << 10, 512 << 10, 8 << 20],
                f32_elements: vec![64 << 10],
                runs: GraphRuns::GPU,
                ping_bytes: 8,
                ping_iters: default_iters(Backend::Cuda),
            },
            Backend::Emulator => QuickstartPlan {
                bf16_elements: vec![100, 500, 3001],
                f32_elements: vec![57],
                runs: GraphRuns::EMULATOR,
                ping_bytes: 8,
                ping_iters: default_iters(Backend::Emulator),
            },
        }
    }
}

/// Everything the quickstart measured; every entry passed its verification.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Where it ran.
    pub platform: Platform,
    /// One per size and type.
    pub all_reduces: Vec<AllReduceResult>,
    /// One per protocol.
    pub ping_pongs: Vec<PingPongResult>,
}

/// Runs [`QuickstartPlan::for_team`] on `team` (which needs at least two ranks).
pub fn run_quickstart(team: &Team) -> Result<Report, ExampleError> {
    run_quickstart_with(team, &QuickstartPlan::for_team(team))
}

/// Runs `plan` on `team`: the sum all-reduces, then the ping-pongs between ranks 0 and 1. Stops at the
/// first failure — a verification error names the rank and element.
pub fn run_quickstart_with(team: &Team, plan: &QuickstartPlan) -> Result<Report, ExampleError> {
    if team.world() < 2 {
        return Err(ExampleError::BadArgument(format!(
            "the quickstart needs at least 2 ranks, the team has {}; build it with Team::builder().world(2)",
            team.world()
        )));
    }
    let mut comm = Communicator::new(team)?;
    let mut all_reduces = Vec::new();
    for (i, &elements) in plan.bf16_elements.iter().enumerate() {
        all_reduces.push(all_reduce::<bf16>(&mut comm, elements, Op::Sum, None, plan.runs, i as u64)?);
    }
    for (i, &elements) in plan.f32_elements.iter().enumerate() {
        all_reduces.push(all_reduce::<f32>(&mut comm, elements, Op::Sum, None, plan.runs, 100 + i as u64)?);
    }
    let mut ping_pongs = Vec::new();
    for protocol in [PingProtocol::Ll, PingProtocol::ReleaseAcquire] {
        ping_pongs.push(ping_pong(&mut comm, 0, 1, plan.ping_iters, plan.ping_bytes, protocol)?);
    }
    Ok(Report { platform: Platform::of(team), all_reduces, ping_pongs })
}

impl fmt::Display for Report {
    /// The measurements (the platform is printed on its own, before the run).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let replays = match self.platform.backend {
            Backend::Cuda => "CUDA-graph replays",
            Backend::Emulator => "replays of the recorded graph",
        };
        writeln!(f, "all-reduce (sum, in place; time per op from {replays}):")?;
        for r in &self.all_reduces {
            writeln!(f, "  {}", r.line())?;
        }
        writeln!(f, "ping-pong (one way = half a round trip, timed on the device):")?;
        for p in &self.ping_pongs {
            writeln!(f, "  {}", p.line())?;
        }
        if self.platform.backend == Backend::Emulator {
            writeln!(f, "(emulator times are host-thread times, not GPU times)")?;
        }
        Ok(())
    }
}
