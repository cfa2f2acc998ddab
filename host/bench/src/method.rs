//! The method: for every operation and size, check the mode once, warm up, run timed trials, and keep the
//! median with min and max, bandwidths and host CPU time per operation.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use thiserror::Error;

use crate::backend::{Backend, BackendError, Request};
use crate::bandwidth::{algbw_gbps, busbw_gbps};
use crate::cputime::CpuClock;
use crate::model::{BenchData, Dtype, Isolated, Measurement, Operation, Skipped};
use crate::sizes::format_size;
use crate::stats::{StatsError, Summary, iterations_for};
use crate::utilization::{QUIET_BEFORE, Utilization, UtilizationProbe};

/// Fewest operations in a timed trial, however large the message.
pub const MIN_ITERS: u64 = 2;

/// Fewest isolated operations a point times (each is one sample of its own, so a point's median is over
/// at least this many, however large the message).
pub const ISOLATED_OPS: u64 = 7;

/// What to measure and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Operations, in order.
    pub ops: Vec<Operation>,
    /// Sizes in bytes, ascending.
    pub sizes: Vec<u64>,
    /// Element type of the collectives (ping-pong and put move bytes).
    pub dtype: Dtype,
    /// Operations per timed trial for small messages (fewer for large ones, see `max_bytes_per_trial`).
    pub iters: u64,
    /// Operations run before timing, rounded up to whole trials.
    pub warmup: u64,
    /// Timed trials per point; the median, min and max are over these.
    pub trials: u32,
    /// Whether to time CUDA-graph replay where the mode allows.
    pub graph: bool,
    /// Bytes one trial may move before its operation count shrinks (keeps 1 GiB points short).
    pub max_bytes_per_trial: u64,
    /// Whether to record GPU and link utilization per point (NVML): each point then runs more trials in
    /// a window of at least [`UTILIZATION_WINDOW`], after [`QUIET_BEFORE`] of idle.
    pub utilization: bool,
}

/// The shortest utilization window of a point: NVML's GPM counters lag by up to about 170 ms, so a second
/// keeps that error under about a fifth (see [`crate::utilization`]).
pub const UTILIZATION_WINDOW: Duration = Duration::from_secs(1);

impl Plan {
    /// The element type `op` runs with.
    pub fn dtype_for(&self, op: Operation) -> Dtype {
        if op.is_collective() { self.dtype } else { Dtype::U8 }
    }

    /// Points per backend (for the progress bar).
    pub fn points(&self) -> u64 {
        (self.ops.len() * self.sizes.len()) as u64
    }
}

/// Why one point has no figure.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PointError {
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// No usable timing.
    #[error(transparent)]
    Stats(#[from] StatsError),
    /// NVML could not open a utilization window on the point's GPUs.
    #[error("utilization: {0}")]
    Utilization(String),
}

/// Timed units in one iteration: a ping-pong iteration is a round trip, timed as two one-way hops.
fn hops(op: Operation) -> u64 {
    if op == Operation::PingPong { 2 } else { 1 }
}

/// Measures one point: warm-up trials, then `plan.trials` timed trials of the same request.
pub fn measure_point(
    backend: &mut dyn Backend,
    plan: &Plan,
    op: Operation,
    bytes: u64,
    probe: Option<&UtilizationProbe>,
) -> Result<Measurement, PointError> {
    let iters = iterations_for(bytes, plan.iters, plan.max_bytes_per_trial, MIN_ITERS);
    let request = Request { op, bytes, dtype: plan.dtype_for(op), iters, graph: plan.graph };
    for _ in 0..plan.warmup.div_ceil(iters) {
        backend.run(&request)?;
    }
    let trials = plan.trials.max(1);
    let clock = CpuClock::start();
    let mut samples = Vec::with_capacity(trials as usize);
    let (mut graph, mut sms_used, mut waited) = (true, None, Duration::ZERO);
    for _ in 0..trials {
        let timing = backend.run(&request)?;
        samples.push(timing.us_per_op);
        graph &= timing.graph;
        sms_used = sms_used.max(timing.sms_used);
        waited += timing.wait_cpu;
    }
    let host_cpu_us_per_op = clock.us_per_op(iters * hops(op) * u64::from(trials), waited);
    let summary = Summary::of(&samples)?;
    let isolated = match backend.isolated(&Request { iters: iters.max(ISOLATED_OPS), ..request })? {
        Some(times) => {
            let spread = Summary::of(&times)?;
            Some(Isolated {
                median_us: spread.median,
                min_us: spread.min,
                max_us: spread.max,
                samples: spread.count as u64,
            })
        }
        None => None,
    };
    let utilization = match probe {
        Some(probe) => Some(utilization_window(backend, probe, &request)?),
        None => None,
    };
    // Ping-pong and put run between two ranks, or a rank and itself in a team of one (the nvshmem mode's PE).
    let world = if op.is_collective() { backend.world() } else { backend.world().min(2) };
    Ok(Measurement {
        op,
        mode: backend.mode(),
        label: backend.label(),
        world,
        bytes,
        dtype: request.dtype,
        iterations: iters,
        trials,
        median_us: summary.median,
        min_us: summary.min,
        max_us: summary.max,
        algbw_gbps: algbw_gbps(bytes, summary.median),
        busbw_gbps: busbw_gbps(op, world, bytes, summary.median),
        host_cpu_us_per_op,
        sms_used,
        queue_depth: backend.queue_depth(),
        graph,
        intra_gpu: backend.intra_gpu(),
        isolated,
        utilization,
    })
}

/// Runs back-to-back trials of `request` for at least [`UTILIZATION_WINDOW`] inside one NVML window, after
/// the GPUs were idle for [`QUIET_BEFORE`] (every trial waits for its operations, so idle they are).
fn utilization_window(
    backend: &mut dyn Backend,
    probe: &UtilizationProbe,
    request: &Request,
) -> Result<Utilization, PointError> {
    std::thread::sleep(QUIET_BEFORE);
    let window = probe.start(&backend.gpu_ordinals()).map_err(|e| PointError::Utilization(e.to_string()))?;
    let long_enough = UTILIZATION_WINDOW.max(probe.min_window());
    while window.elapsed() < long_enough {
        backend.run(request)?;
    }
    Ok(window.finish())
}

/// Sweeps every operation and size of `plan` on `backend`, adding points and skips to `out`.
///
/// An operation the backend does not support, or whose check against the CPU reference fails, is skipped
/// whole; a size that fails (out of memory, driver error) is skipped alone and the sweep goes on. Sizes
/// above the backend's [`size_limit`](Backend::size_limit) are skipped with one entry; operations outside
/// its series ([`measures`](Backend::measures)) are left out silently.
pub fn measure(backend: &mut dyn Backend, plan: &Plan, progress: &ProgressBar, out: &mut BenchData) {
    let probe = if plan.utilization && !backend.gpu_ordinals().is_empty() {
        match UtilizationProbe::open() {
            Ok(probe) => Some(probe),
            Err(e) => {
                let note = format!("No utilization figures: {e}.");
                if !out.meta.notes.contains(&note) {
                    out.meta.notes.push(note);
                }
                None
            }
        }
    } else {
        None
    };
    let mode = backend.mode();
    let queue_depth = backend.queue_depth();
    let label = backend.label();
    let skip = |op, bytes, reason: String| Skipped { op, mode, queue_depth, label: label.clone(), bytes, reason };
    for &op in &plan.ops {
        if !backend.measures(op) {
            progress.inc(plan.sizes.len() as u64);
            continue;
        }
        let dtype = plan.dtype_for(op);
        let checked = backend.supports(op).and_then(|()| backend.verify(op, dtype).map_err(|e| e.to_string()));
        if let Err(reason) = checked {
            out.skipped.push(skip(op, None, reason));
            progress.inc(plan.sizes.len() as u64);
            continue;
        }
        let mut done = Vec::new();
        let limit = backend.size_limit(op);
        let mut above_limit = false;
        for &size in &plan.sizes {
            progress.set_message(format!("{mode} {op} {}", format_size(size)));
            let bytes = op.round_bytes(size, backend.world(), dtype);
            if let Some((max, why)) = limit.as_ref().filter(|(max, _)| bytes > *max) {
                if !above_limit {
                    above_limit = true;
                    out.skipped.push(skip(op, Some(bytes), format!("sizes above {}: {why}", format_size(*max))));
                }
            } else if bytes == 0 {
                let reason = format!("less than one {dtype} element per rank at {} ranks", backend.world());
                out.skipped.push(skip(op, Some(size), reason));
            } else if !done.contains(&bytes) {
                done.push(bytes);
                match measure_point(backend, plan, op, bytes, probe.as_ref()) {
                    Ok(point) => out.measurements.push(point),
                    Err(e) => out.skipped.push(skip(op, Some(bytes), e.to_string())),
                }
            }
            progress.inc(1);
        }
    }
}

/// A progress bar for a sweep of `total` points on stderr, hidden when stderr is not a terminal.
pub fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    ProgressBar::new(total).with_style(style)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Timing;
    use crate::model::Mode;

    /// A backend whose time is `latency + bytes / bandwidth`, with scripted failures.
    struct Model {
        calls: Vec<Request>,
        fail_bytes: u64,
        trial: u32,
    }

    impl Backend for Model {
        fn mode(&self) -> Mode {
            Mode::Proxy
        }
        fn queue_depth(&self) -> Option<u32> {
            Some(8)
        }
        fn world(&self) -> usize {
            4
        }
        fn supports(&self, op: Operation) -> Result<(), String> {
            if op == Operation::AllGather { Err("no gathers here".into()) } else { Ok(()) }
        }
        fn verify(&mut self, op: Operation, _: Dtype) -> Result<(), BackendError> {
            match op {
                Operation::AllToAll => {
                    Err(BackendError::Verification { mode: Mode::Proxy, op, detail: "element 3: 2 != 7".into() })
                }
                _ => Ok(()),
            }
        }
        fn run(&mut self, request: &Request) -> Result<Timing, BackendError> {
            self.calls.push(*request);
            if request.bytes == self.fail_bytes {
                return Err(BackendError::NoDevice);
            }
            self.trial += 1;
            // Trials alternate around the model time: median exact, min/max ±10 %.
            let base = 2.0 + request.bytes as f64 / 100e3;
            let jitter = [1.0, 0.9, 1.1][self.trial as usize % 3];
            Ok(Timing { us_per_op: base * jitter, graph: true, sms_used: Some(4), wait_cpu: Duration::ZERO })
        }
        /// Isolated operations take 1, 2, 3... µs more than the model, one per operation asked for.
        fn isolated(&mut self, request: &Request) -> Result<Option<Vec<f64>>, BackendError> {
            let base = 2.0 + request.bytes as f64 / 100e3;
            Ok((request.op != Operation::PingPong).then(|| (1..=request.iters).map(|i| base + i as f64).collect()))
        }
    }

    fn plan() -> Plan {
        Plan {
            ops: vec![Operation::AllReduce, Operation::AllGather, Operation::AllToAll, Operation::PingPong],
            sizes: vec![2, 8, 1 << 20, 1 << 30],
            dtype: Dtype::Bf16,
            iters: 50,
            warmup: 120,
            trials: 3,
            graph: true,
            max_bytes_per_trial: 8 << 30,
            utilization: false,
        }
    }

    #[test]
    fn sweep_points_skips_and_statistics() {
        let mut backend = Model { calls: Vec::new(), fail_bytes: 1 << 30, trial: 0 };
        let mut out = BenchData::default();
        let plan = plan();
        measure(&mut backend, &plan, &ProgressBar::hidden(), &mut out);

        let reduce: Vec<_> = out.measurements.iter().filter(|m| m.op == Operation::AllReduce).collect();
        assert_eq!(reduce.iter().map(|m| m.bytes).collect::<Vec<_>>(), vec![2, 8, 1 << 20]);
        let m = reduce[2];
        let base = 2.0 + (1u64 << 20) as f64 / 100e3;
        assert!((m.median_us - base).abs() < 1e-9 && (m.min_us - 0.9 * base).abs() < 1e-9);
        assert!((m.max_us - 1.1 * base).abs() < 1e-9);
        assert_eq!((m.world, m.dtype, m.queue_depth, m.sms_used, m.graph), (4, Dtype::Bf16, Some(8), Some(4), true));
        assert!((m.busbw_gbps - 1.5 * m.algbw_gbps).abs() < 1e-9);
        assert!(m.host_cpu_us_per_op.is_some());
        // Isolated: one sample per operation of a trial (50 here), median, min and max over them.
        let isolated = m.isolated.unwrap();
        assert_eq!(isolated.samples, 50);
        assert!((isolated.median_us - (base + 25.5)).abs() < 1e-9 && (isolated.min_us - (base + 1.0)).abs() < 1e-9);
        assert!((isolated.max_us - (base + 50.0)).abs() < 1e-9);
        assert!(m.utilization.is_none() && !m.intra_gpu);
        // Ping-pong is a two-GPU operation on bytes, and has no isolated series.
        let ping = out.measurements.iter().find(|m| m.op == Operation::PingPong).unwrap();
        assert_eq!((ping.world, ping.dtype, ping.bytes), (2, Dtype::U8, 2));
        assert!(ping.isolated.is_none());

        let reasons: Vec<_> = out.skipped.iter().map(|s| (s.op, s.bytes, s.reason.as_str())).collect();
        assert!(reasons.contains(&(Operation::AllGather, None, "no gathers here")));
        assert!(reasons.iter().any(|(op, b, r)| *op == Operation::AllToAll && b.is_none() && r.contains("2 != 7")));
        assert!(
            reasons.iter().any(|(op, b, r)| *op == Operation::AllReduce && *b == Some(1 << 30) && r.contains("no GPU"))
        );
        // 2 B cannot hold one bf16 per rank for all-to-all, but all-to-all was skipped whole before that.
        assert!(!reasons.iter().any(|(op, b, _)| *op == Operation::AllToAll && b.is_some()));
    }

    #[test]
    fn warmup_rounds_up_to_whole_trials_and_large_sizes_run_fewer_ops() {
        let mut backend = Model { calls: Vec::new(), fail_bytes: 0, trial: 0 };
        let plan = Plan { ops: vec![Operation::AllReduce], sizes: vec![8, 1 << 30], ..plan() };
        measure(&mut backend, &plan, &ProgressBar::hidden(), &mut BenchData::default());
        let small: Vec<_> = backend.calls.iter().filter(|r| r.bytes == 8).collect();
        // 120 warm-up ops at 50 per trial: 3 warm-up trials, then 3 timed ones.
        assert_eq!(small.len(), 6);
        assert!(small.iter().all(|r| r.iters == 50 && r.graph));
        let large: Vec<_> = backend.calls.iter().filter(|r| r.bytes == 1 << 30).collect();
        assert!(large.iter().all(|r| r.iters == 8));
        assert_eq!(large.len(), 15 + 3);
    }

    #[test]
    fn sizes_that_round_to_zero_or_repeat_are_not_measured_twice() {
        let mut backend = Model { calls: Vec::new(), fail_bytes: 0, trial: 0 };
        // f32 all-reduce needs multiples of 4 bytes: 2 rounds to nothing, 9 rounds to 8 (already measured).
        let plan = Plan { ops: vec![Operation::AllReduce], sizes: vec![2, 4, 8, 9], dtype: Dtype::F32, ..plan() };
        let mut out = BenchData::default();
        measure(&mut backend, &plan, &ProgressBar::hidden(), &mut out);
        assert_eq!(out.measurements.iter().map(|m| m.bytes).collect::<Vec<_>>(), vec![4, 8]);
        assert_eq!(out.skipped.len(), 1);
        assert!(out.skipped[0].bytes == Some(2) && out.skipped[0].reason.contains("less than one f32"));
        let plan = Plan { ops: vec![Operation::PingPong], sizes: vec![1], ..plan };
        measure(&mut backend, &plan, &ProgressBar::hidden(), &mut out);
        assert_eq!(out.measurements.last().map(|m| m.bytes), Some(1));
    }
}
