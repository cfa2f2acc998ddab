//! What trace mode costs: the same ping-pongs and 1 MiB all-reduce on a team without tracing and on a
//! traced one (the kernels crate's traced flavour, recording every event), each verified, and the
//! slowdown. The ping-pongs are timed inside their kernel, so their slowdown is the kernel's, against the
//! target (≤ 10 %). The all-reduce is timed on the host from each graph replay's launch to the end of its
//! wait, which on a traced team includes reading and emptying the rings: what a traced run costs end to
//! end, not the ≤ 3 % target's kernel time, which `ferrocomm bench --traced` measures on the device.
//!
//! The two teams run one after the other (the untraced one is dropped first), so they never share the
//! GPUs. Meaningful on GPUs; on the emulator the figures are host-thread times.

use ferrocomm::{Backend, Team};
use ferrocomm_device::bf16;
use ferrocomm_kernels::{Communicator, Op, PingProtocol};

use crate::ExampleError;
use crate::all_reduce::{GraphRuns, all_reduce};
use crate::ping_pong::{default_iters, ping_pong};

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct OverheadPlan {
    /// Ping-pong round trips.
    pub ping_iters: u32,
    /// Ping-pong payload bytes.
    pub ping_bytes: usize,
    /// bf16 elements per rank of the all-reduce (1 MiB on GPUs).
    pub all_reduce_elements: usize,
    /// Graph length and replays of the all-reduce.
    pub runs: GraphRuns,
}

impl OverheadPlan {
    /// The GPU plan (10000 round trips of 8 B, a 1 MiB all-reduce) or a small one for the emulator.
    pub fn for_backend(backend: Backend) -> OverheadPlan {
        match backend {
            Backend::Cuda => OverheadPlan {
                ping_iters: default_iters(backend),
                ping_bytes: 8,
                all_reduce_elements: (1 << 20) / 2,
                runs: GraphRuns::GPU,
            },
            Backend::Emulator => {
                OverheadPlan { ping_iters: 20, ping_bytes: 8, all_reduce_elements: 700, runs: GraphRuns::EMULATOR }
            }
        }
    }
}

/// One measurement, untraced and traced.
#[derive(Debug, Clone, PartialEq)]
pub struct Overhead {
    /// What was measured.
    pub what: String,
    /// Microseconds without tracing.
    pub plain_us: f64,
    /// Microseconds with tracing.
    pub traced_us: f64,
    /// The target slowdown of the kernel, in percent, where the measurement is the kernel's time.
    pub target_percent: Option<f64>,
}

impl Overhead {
    /// The slowdown in percent (negative: the traced run was faster, within noise).
    pub fn percent(&self) -> f64 {
        if self.plain_us > 0.0 { 100.0 * (self.traced_us / self.plain_us - 1.0) } else { 0.0 }
    }

    /// `ping-pong release/acquire 8 B   2.210 us -> 2.301 us   +4.1 % (target <= 10 %)   within target`.
    pub fn line(&self) -> String {
        let judged = match self.target_percent {
            Some(t) if self.percent() <= t => format!("(target <= {t} %)   within target"),
            Some(t) => format!("(target <= {t} %)   OVER TARGET"),
            None => "(host-timed, the rings' collection included)".to_owned(),
        };
        format!(
            "{:<36} {:>10.3} us -> {:>10.3} us   {:>+6.1} % {judged}",
            self.what,
            self.plain_us,
            self.traced_us,
            self.percent()
        )
    }
}

/// Runs `plan` on `make(false)` and then on `make(true)` (a team with tracing on), and pairs the results.
pub fn trace_overhead(
    make: impl Fn(bool) -> Result<Team, ferrocomm::Error>,
    plan: &OverheadPlan,
) -> Result<Vec<Overhead>, ExampleError> {
    let plain = measure(&make(false)?, plan)?;
    let traced_team = make(true)?;
    if !traced_team.is_traced() {
        return Err(ExampleError::BadArgument("the traced team does not trace; build it with .trace(true)".into()));
    }
    let traced = measure(&traced_team, plan)?;
    Ok(plain
        .into_iter()
        .zip(traced)
        .map(|((what, plain_us, target_percent), (_, traced_us, _))| Overhead {
            what,
            plain_us,
            traced_us,
            target_percent,
        })
        .collect())
}

/// (what, microseconds, target percent) of each measurement on `team`.
fn measure(team: &Team, plan: &OverheadPlan) -> Result<Vec<(String, f64, Option<f64>)>, ExampleError> {
    let mut comm = Communicator::new(team)?;
    let mut out = Vec::new();
    for (protocol, name) in [(PingProtocol::Ll, "LL"), (PingProtocol::ReleaseAcquire, "release/acquire")] {
        let r = ping_pong(&mut comm, 0, 1, plan.ping_iters, plan.ping_bytes, protocol)?;
        let us = r.one_way_ns.unwrap_or(0.0) / 1e3;
        out.push((format!("ping-pong {name} {} B one way", plan.ping_bytes), us, Some(10.0)));
    }
    let r = all_reduce::<bf16>(&mut comm, plan.all_reduce_elements, Op::Sum, None, plan.runs, 1)?;
    let what = format!("all-reduce bf16 {} B {:?}", r.bytes, r.algorithm);
    out.push((what, r.timing.median_us(), None));
    Ok(out)
}
