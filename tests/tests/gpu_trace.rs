//! Trace mode and hang diagnosis, written once and run twice: on an emulated team (always) and on the GPUs
//! (where present; skipped with a message otherwise, a failure when `FERROCOMM_REQUIRE_GPUS=N` asks for
//! GPUs that are not there). Two ranks run on two GPUs, or both on one GPU when only one exists.
//!
//! Covered: a known kernel's trace holds its events in order, per rank and block, with the bytes, peers,
//! signals and epochs they name; a ring too small for a launch counts what it lost; the trace file opens
//! as Chrome trace JSON; a planted hang (one rank's block skips its signal) comes back with a wait-for
//! report naming that rank, block and signal — with and without trace mode; the overhead of trace mode on
//! the ping-pong and the 1 MiB all-reduce is measured and printed (`--nocapture` shows it; the targets are
//! reported, not asserted: GPU timings vary from run to run).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ferrocomm::{Backend, Cmp, Error, LaunchConfig, SignalPadBuffer, SignalRef, SymBuffer, Team, TraceWhat};
use ferrocomm_device_kernels::trace::{trace_flood, traced_ring};
use ferrocomm_tests::{EMULATED_HANG, EMULATED_LIMIT};

const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_GPUS";
const BLOCKS: u32 = 2;
const THREADS: u32 = 64;
const N: usize = 48;
/// A GPU team's timeout.
const GPU_TIMEOUT: Duration = Duration::from_millis(800);

fn usable_gpus() -> usize {
    ferrocomm::system::driver().map(|d| d.gpu_count).unwrap_or(0)
}

/// A traced (or not) team on `backend` and the directory it writes its trace into when dropped (declared
/// first, so it outlives the team), or `None` (with a visible message) when it is CUDA and there is no GPU.
/// Every wait of its launches must end: on the emulator its timeout only has to catch a hang.
fn team(backend: Backend, traced: bool, capacity: usize, test: &str) -> Option<(tempfile::TempDir, Team)> {
    team_with(backend, EMULATED_LIMIT, traced, capacity, test)
}

/// [`team`] for a scenario with a planted hang: on the emulator its timeout is the window the scenario sees
/// elapse.
fn hanging_team(backend: Backend, traced: bool, test: &str) -> Option<(tempfile::TempDir, Team)> {
    team_with(backend, EMULATED_HANG, traced, 1024, test)
}

fn team_with(
    backend: Backend,
    emulated_timeout: Duration,
    traced: bool,
    capacity: usize,
    test: &str,
) -> Option<(tempfile::TempDir, Team)> {
    if backend == Backend::Cuda {
        let present = usable_gpus();
        if let Ok(v) = std::env::var(REQUIRE_ENV) {
            let need: usize = v.trim().parse().unwrap_or_else(|_| panic!("{REQUIRE_ENV}={v:?} is not a number"));
            assert!(present >= need, "{REQUIRE_ENV}={need} but {present} GPU(s) are usable");
        }
        if present == 0 {
            eprintln!("skipped: no GPU for {test}");
            return None;
        }
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let timeout = if backend == Backend::Cuda { GPU_TIMEOUT } else { emulated_timeout };
    let b = Team::builder().backend(backend).world(2).timeout(timeout).trace(traced).trace_capacity(capacity);
    let team = b.trace_dir(dir.path()).build().unwrap_or_else(|e| panic!("{test}: building the team failed: {e}"));
    Some((dir, team))
}

/// The GPU tests of this file one at a time: their kernels wait on each other's ranks with short timeouts, and
/// another test's teams on the same GPU (their module loads, their kernels) could hold a rank's launch back
/// past them.
fn one_gpu_test_at_a_time() -> MutexGuard<'static, ()> {
    static GPUS: Mutex<()> = Mutex::new(());
    GPUS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One scenario, two tests: `on_the_emulator` and `on_gpus`.
macro_rules! everywhere {
    ($name:ident) => {
        mod $name {
            #[test]
            fn on_the_emulator() {
                super::$name(ferrocomm::Backend::Emulator);
            }

            #[test]
            fn on_gpus() {
                let _gpus = super::one_gpu_test_at_a_time();
                super::$name(ferrocomm::Backend::Cuda);
            }
        }
    };
}

everywhere!(a_known_kernel_traces_its_events_in_order);
everywhere!(an_overflowing_ring_counts_what_it_lost);
everywhere!(a_planted_hang_names_the_rank_block_and_signal);
everywhere!(without_trace_mode_the_hang_report_names_the_rank);
everywhere!(the_overhead_of_trace_mode_is_reported);
everywhere!(graph_replays_are_traced_like_launches);

struct Ring {
    src: SymBuffer<u32>,
    dst: SymBuffer<u32>,
    pad: SignalPadBuffer,
}

impl Ring {
    fn new(team: &Team) -> Ring {
        let mut src = SymBuffer::<u32>::new(team, N).unwrap();
        src.fill(7).unwrap();
        let dst = SymBuffer::<u32>::new(team, N * BLOCKS as usize).unwrap();
        let pad = SignalPadBuffer::new(team, "ring", BLOCKS as usize).unwrap();
        Ring { src, dst, pad }
    }

    fn run(&mut self, team: &Team, skip: (u32, u32)) -> Result<(), Error> {
        let cfg = LaunchConfig::new(BLOCKS, THREADS);
        traced_ring::launch(team, cfg, &self.src, &mut self.dst, &self.pad, skip.0, skip.1)?.wait()
    }
}

const NOTHING: (u32, u32) = (u32::MAX, u32::MAX);

/// The kinds of `what`, as the expected sequence names them.
fn kind(what: &TraceWhat) -> &'static str {
    match what {
        TraceWhat::PutBegin { .. } => "put-begin",
        TraceWhat::PutEnd { .. } => "put-end",
        TraceWhat::Signal { .. } => "signal",
        TraceWhat::WaitBegin { .. } => "wait-begin",
        TraceWhat::WaitEnd { .. } => "wait-end",
        TraceWhat::Barrier => "barrier",
        TraceWhat::Epoch { .. } => "epoch",
        TraceWhat::Mark { .. } => "mark",
        _ => "other",
    }
}

fn a_known_kernel_traces_its_events_in_order(backend: Backend) {
    let Some((_dir, team)) = team(backend, true, 1024, "a_known_kernel_traces_its_events_in_order") else { return };
    let mut ring = Ring::new(&team);
    ring.run(&team, NOTHING).unwrap();
    assert_eq!(ring.dst.to_host(1).unwrap(), vec![7; N * BLOCKS as usize]);
    let events = team.trace_events();
    assert_eq!(team.trace_lost(), [0, 0]);
    assert!(events.iter().all(|e| e.thread == 0 && e.launch == 0), "only thread 0 records in this kernel");
    for rank in 0..2usize {
        let next = (rank + 1) % 2;
        for block in 0..BLOCKS {
            let mine: Vec<_> = events.iter().filter(|e| e.rank == rank && e.block == block).collect();
            let kinds: Vec<&str> = mine.iter().map(|e| kind(&e.what)).collect();
            assert_eq!(
                kinds,
                [
                    "mark",
                    "put-begin",
                    "barrier",
                    "put-end",
                    "signal",
                    "wait-begin",
                    "wait-end",
                    "barrier",
                    "barrier",
                    "epoch"
                ],
                "rank {rank} block {block}"
            );
            assert!(mine.windows(2).all(|w| w[0].time_ns <= w[1].time_ns), "time runs forward: {mine:?}");
            let peer = Some(next);
            let bytes = (N * 4) as u64;
            assert_eq!(mine[0].what, TraceWhat::Mark { name: "ring".into() });
            assert_eq!(mine[1].what, TraceWhat::PutBegin { bytes, peer });
            assert_eq!(mine[3].what, TraceWhat::PutEnd { bytes, peer });
            let signal = |owner| SignalRef::Pad { name: "ring".into(), owner, index: block as usize };
            assert_eq!(mine[4].what, TraceWhat::Signal { signal: signal(next), value: 1, add: true });
            assert_eq!(mine[5].what, TraceWhat::WaitBegin { signal: signal(rank), expected: 1, cmp: Cmp::Ge });
            assert!(
                matches!(&mine[6].what, TraceWhat::WaitEnd { signal: s, observed } if *s == signal(rank) && *observed >= 1)
            );
            assert!(matches!(&mine[9].what, TraceWhat::Epoch { epoch: 1, .. }), "{:?}", mine[9]);
        }
    }
    // The file Perfetto opens: one process per rank, one track per block, puts and waits as slices.
    let path = std::env::temp_dir().join(format!("ferrocomm-trace-test-{}-{backend}.json", std::process::id()));
    team.write_trace(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    for needle in
        ["\"traceEvents\"", "\"process_name\"", "\"thread_name\"", "\"ph\":\"X\"", "put 192 B → rank 1", "\"ring\""]
    {
        assert!(text.contains(needle), "`{needle}` missing from the trace");
    }
}

fn an_overflowing_ring_counts_what_it_lost(backend: Backend) {
    const CAPACITY: usize = 16;
    let Some((_dir, team)) = team(backend, true, CAPACITY, "an_overflowing_ring_counts_what_it_lost") else { return };
    let (threads, marks) = (32u32, 4u32);
    for launch in 0..2u64 {
        trace_flood::launch(&team, LaunchConfig::new(1, threads), marks).unwrap().wait().unwrap();
        let events = team.trace_events();
        for rank in 0..2 {
            let kept = events.iter().filter(|e| e.rank == rank && e.launch == launch).count();
            assert_eq!(kept, CAPACITY, "rank {rank} keeps a full ring each launch");
        }
        // Every launch starts with an empty ring: the losses add up.
        let lost = u64::from(threads * marks) - CAPACITY as u64;
        assert_eq!(team.trace_lost(), [lost * (launch + 1); 2]);
    }
}

fn a_planted_hang_names_the_rank_block_and_signal(backend: Backend) {
    let Some((_dir, team)) = hanging_team(backend, true, "a_planted_hang_names_the_rank_block_and_signal") else {
        return;
    };
    let mut ring = Ring::new(&team);
    // A clean launch first: the trace learns who raises each signal.
    ring.run(&team, NOTHING).unwrap();
    let e = ring.run(&team, (1, 1)).unwrap_err();
    let msg = e.to_string();
    let Error::Device(errors) = &e else { panic!("expected device errors, got {e}") };
    let report = errors.wait_for().unwrap_or_else(|| panic!("no wait-for report: {msg}"));
    assert!(
        report.culprit.starts_with("rank 1 block 1 never raised rank 0's `ring`[1]"),
        "the culprit must be rank 1 block 1 and its signal: {}",
        report.culprit
    );
    assert!(report.culprit.contains("holds 1, wants 2") && report.culprit.contains("skipped the raise"), "{msg}");
    assert_eq!(report.pending.len(), 1, "{msg}");
    assert_eq!((report.pending[0].rank, report.pending[0].block), (0, 1), "{msg}");
    // Every other block of both ranks raised its signal this launch.
    let raised: Vec<(usize, u32)> = report.last_raised.iter().map(|l| (l.rank, l.block)).collect();
    assert_eq!(raised, [(0, 0), (0, 1), (1, 0)], "{msg}");
    assert!(msg.contains("hang diagnosis: rank 1 block 1 never raised"), "{msg}");
}

fn without_trace_mode_the_hang_report_names_the_rank(backend: Backend) {
    let Some((_dir, team)) = hanging_team(backend, false, "without_trace_mode_the_hang_report_names_the_rank") else {
        return;
    };
    let mut ring = Ring::new(&team);
    let e = ring.run(&team, (1, 1)).unwrap_err();
    let Error::Device(errors) = &e else { panic!("expected device errors, got {e}") };
    let report = errors.wait_for().unwrap_or_else(|| panic!("no wait-for report: {e}"));
    assert!(report.culprit.starts_with("rank 1 never raised rank 0's `ring`[1]"), "{}", report.culprit);
    assert!(report.culprit.contains("FERROCOMM_TRACE=1"), "it says how to name the block: {}", report.culprit);
    assert!(report.last_raised.is_empty() && team.trace_events().is_empty());
}

fn the_overhead_of_trace_mode_is_reported(backend: Backend) {
    use ferrocomm_examples::trace_overhead::{OverheadPlan, trace_overhead};
    let Some((dir, _)) = team(backend, false, 16, "the_overhead_of_trace_mode_is_reported") else { return };
    let make = |traced: bool| {
        let timeout = if backend == Backend::Cuda { Duration::from_secs(2) } else { EMULATED_LIMIT };
        Team::builder().backend(backend).world(2).timeout(timeout).trace(traced).trace_dir(dir.path()).build()
    };
    let rows = trace_overhead(make, &OverheadPlan::for_backend(backend)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows.len(), 3, "two ping-pongs and an all-reduce: {rows:?}");
    for row in &rows {
        eprintln!("trace mode overhead on {backend}: {}", row.line());
        assert!(row.plain_us > 0.0 && row.traced_us > 0.0, "{row:?}");
    }
}

fn graph_replays_are_traced_like_launches(backend: Backend) {
    let Some((_dir, team)) = team(backend, true, 1024, "graph_replays_are_traced_like_launches") else { return };
    let mut ring = Ring::new(&team);
    let graph = team
        .capture(|team| {
            ring.run(team, NOTHING)?;
            ring.run(team, NOTHING)
        })
        .unwrap();
    for _ in 0..2 {
        graph.replay().unwrap().wait().unwrap();
    }
    let events = team.trace_events();
    // Each replay is one collection of two launches: per rank and block, two epoch advances each.
    for launch in 0..2u64 {
        for rank in 0..2 {
            for block in 0..BLOCKS {
                let epochs: Vec<u64> = events
                    .iter()
                    .filter(|e| (e.launch, e.rank, e.block) == (launch, rank, block))
                    .filter_map(|e| match e.what {
                        TraceWhat::Epoch { epoch, .. } => Some(epoch),
                        _ => None,
                    })
                    .collect();
                assert_eq!(epochs, [2 * launch + 1, 2 * launch + 2], "replay {launch} rank {rank} block {block}");
            }
        }
    }
}
