//! Device panics are errors, not crashes: written once and run twice, on an emulated team (always) and on
//! the GPUs (where present; skipped with a message otherwise, a failure when `FERROCOMM_REQUIRE_GPUS=N`
//! asks for GPUs that are not there). Two ranks run on two GPUs, or both on one GPU when only one exists.
//!
//! Covered: a panic planted on one rank comes back as a typed `KernelPanic` with file, line and message;
//! the peer's waits end promptly through the team's abort word (not after the timeout); the next launch,
//! a new allocation and a reset pad work; a launch in which a thousand threads panic reads as a summary;
//! threads that exited do not hold up block barriers (nor, on sm_70+, a warp barrier naming them).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferrocomm::{Backend, DeviceError, Error, ErrorCount, LaunchConfig, SignalPadBuffer, SignalRef, SymBuffer, Team};
use ferrocomm_runtime_kernels::body::tag;
use ferrocomm_runtime_kernels::faults::{PLANTED_MESSAGE, launch as faults};
use ferrocomm_runtime_kernels::host as kernels;
use ferrocomm_tests::EMULATED_LIMIT;

const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_GPUS";
/// A GPU team's timeout: long enough that a wait ended by the timeout is told apart from one ended by the
/// abort word. (An emulated team's, [`EMULATED_LIMIT`], is longer still: no scenario here waits for it.)
const GPU_TIMEOUT: Duration = Duration::from_secs(3);

fn usable_gpus() -> usize {
    ferrocomm::system::driver().map(|d| d.gpu_count).unwrap_or(0)
}

/// A CUDA team of `world` ranks, or `None` (with a visible message) when there is no GPU.
fn gpu_team(test: &str, world: usize, timeout: Duration) -> Option<Team> {
    let present = usable_gpus();
    if let Ok(v) = std::env::var(REQUIRE_ENV) {
        let need: usize = v.trim().parse().unwrap_or_else(|_| panic!("{REQUIRE_ENV}={v:?} is not a number of GPUs"));
        assert!(present >= need, "{REQUIRE_ENV}={need} but {present} GPU(s) are usable");
    }
    if present == 0 {
        let why = ferrocomm::system::driver().err().map(|e| e.to_string()).unwrap_or_default();
        eprintln!("skipped: no GPU for {test} ({why})");
        return None;
    }
    let team = Team::builder().backend(Backend::Cuda).world(world).timeout(timeout).build();
    Some(team.unwrap_or_else(|e| panic!("{test}: building the GPU team failed: {e}")))
}

fn emulated_team(world: usize, timeout: Duration) -> Team {
    Team::builder().backend(Backend::Emulator).world(world).timeout(timeout).build().expect("emulated team")
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
    ($name:ident, world: $world:expr) => {
        mod $name {
            #[test]
            fn on_the_emulator() {
                super::$name(&super::emulated_team($world, super::EMULATED_LIMIT));
            }

            #[test]
            fn on_gpus() {
                let _gpus = super::one_gpu_test_at_a_time();
                if let Some(team) = super::gpu_team(stringify!($name), $world, super::GPU_TIMEOUT) {
                    super::$name(&team);
                }
            }
        }
    };
}

everywhere!(a_planted_panic_is_typed_and_the_team_goes_on, world: 2);
everywhere!(a_thousand_failing_threads_read_as_a_summary, world: 2);
everywhere!(exited_threads_do_not_hold_up_block_barriers, world: 1);
everywhere!(an_exited_lane_does_not_hold_up_a_warp_barrier, world: 1);

/// The line of the planted assertion in the kernel's source (what the record must name).
fn planted_line() -> u32 {
    let source = include_str!("../runtime-kernels/src/faults.rs");
    let at = source.lines().position(|l| l.contains("assert!(rank != panic_rank")).expect("the planted assert");
    at as u32 + 1
}

fn a_planted_panic_is_typed_and_the_team_goes_on(team: &Team) {
    const THREADS: u32 = 64;
    let pad = SignalPadBuffer::new(team, "planted", 1).unwrap();
    let mut out = SymBuffer::<u32>::new(team, THREADS as usize).unwrap();
    // The module's first launch JIT-compiles it on every rank: do that first, so the clock below times
    // the aborted launch alone.
    kernels::stamp_rank(team, LaunchConfig::new(1, THREADS), &mut out).unwrap().wait().unwrap();
    out.fill(0).unwrap();
    let started = Instant::now();
    let cfg = LaunchConfig::new(1, THREADS);
    let e = faults::planted_panic(team, cfg, &pad, &mut out, 0, 1).unwrap().wait().unwrap_err();
    let elapsed = started.elapsed();
    let msg = e.to_string();
    // Rank 1's waits ended through the abort word: well before the timeout would have ended them.
    assert!(elapsed < team.timeout() / 3, "the launch took {elapsed:?}: the peer's waits were not aborted ({msg})");
    assert!(e.is_kernel_panic() && e.is_aborted(), "{msg}");
    let Error::Device(errors) = &e else { panic!("expected device errors, got {e}") };
    match errors.first() {
        DeviceError::KernelPanic { at, location, message } => {
            assert_eq!((at.rank, at.block, at.thread), (0, [0, 0, 0], [0, 0, 0]), "{msg}");
            assert!(location.file.ends_with("faults.rs"), "{location}");
            assert_eq!(location.line, planted_line(), "{location}");
            assert!(location.column > 0, "{location}");
            assert_eq!(message, PLANTED_MESSAGE, "{msg}");
        }
        other => panic!("the first record should be the panic, got {other}"),
    }
    // The cause is shown first, with its message; nothing timed out.
    assert!(msg.contains("panicked at") && msg.contains(PLANTED_MESSAGE), "{msg}");
    assert!(!errors.errors().iter().any(|d| matches!(d, DeviceError::Timeout { .. })), "{msg}");
    for d in &errors.errors()[1..] {
        let DeviceError::Aborted { at, signal, expected, origin, location, .. } = d else {
            panic!("every other record is a wait the panic aborted, got {d}")
        };
        // Rank 1's waits can only end this way; a thread of rank 0 may too, when its wait turned to the
        // back-off path before rank 1 raised its signal and then saw rank 0's own abort.
        assert_eq!((*origin, *expected), (Some(0), 1), "{d}");
        assert_eq!(*signal, SignalRef::Pad { name: "planted".into(), owner: at.rank, index: 0 }, "{d}");
        assert!(location.file.ends_with("faults.rs"), "{d}");
    }
    // Every thread of rank 1 waited and was aborted: 64 counted, the first few kept as records.
    let counts = errors.counts();
    assert!(counts.contains(&ErrorCount { rank: 0, kind: "panic", count: 1 }), "{counts:?}");
    assert!(counts.contains(&ErrorCount { rank: 1, kind: "aborted wait", count: u64::from(THREADS) }), "{counts:?}");
    assert!(msg.contains("rank 1: 64 aborted waits"), "{msg}");
    if team.backend() == Backend::Cuda {
        // On a GPU the panicking thread exited and the rest of its block went on: the barrier after the
        // wait opened without thread 0. (The emulator ends the panicking rank's grid at its next barrier.)
        let aborted0 = counts.iter().find(|c| c.rank == 0 && c.kind == "aborted wait").map_or(0, |c| c.count);
        let rank0 = out.to_host(0).unwrap();
        assert_eq!(rank0[0], 0, "the panicking thread wrote after its panic");
        let passed = rank0[1..].iter().filter(|&&v| v == 1).count() as u64;
        assert_eq!(passed, u64::from(THREADS) - 1 - aborted0, "rank 0's threads did not pass the barrier: {rank0:?}");
    }
    // The team is usable: memory can be allocated, a reset pad runs again from epoch 1, results are right.
    let mut fresh = SymBuffer::<u32>::new(team, 100).unwrap();
    fresh.fill(7).unwrap();
    assert_eq!(fresh.to_host(1).unwrap(), vec![7; 100]);
    let mut pad = pad;
    pad.reset().unwrap();
    assert_eq!(pad.read(1).unwrap(), [0]);
    out.fill(0).unwrap();
    for target in 1..=2 {
        // No rank panics (panic_rank 2 is outside the team): each launch raises every signal once.
        faults::planted_panic(team, cfg, &pad, &mut out, 2, target).unwrap().wait().unwrap();
        for rank in 0..2 {
            assert_eq!(pad.read(rank).unwrap(), [target]);
            assert_eq!(out.to_host(rank).unwrap(), vec![1; THREADS as usize]);
        }
    }
    let ring_pad = SignalPadBuffer::new(team, "ring", 1).unwrap();
    kernels::ring(team, LaunchConfig::new(2, 64), &mut fresh, &ring_pad).unwrap().wait().unwrap();
    for rank in 0..2 {
        let from = (rank as u32 + 1) % 2;
        let got = fresh.to_host(rank).unwrap();
        assert!(got.iter().enumerate().all(|(i, &v)| v == tag(from, 1, i)), "rank {rank}: {got:?}");
    }
    team.synchronize().unwrap();
}

fn a_thousand_failing_threads_read_as_a_summary(team: &Team) {
    // 4 blocks of 250 threads on each of 2 ranks: 2000 threads, every one fails its assertion.
    let e = faults::many_panics(team, LaunchConfig::new(4, 250), 1000).unwrap().wait().unwrap_err();
    let msg = e.to_string();
    let Error::Device(errors) = &e else { panic!("expected device errors, got {e}") };
    assert_eq!(errors.total(), 2000, "{msg}");
    assert_eq!(
        errors.counts(),
        [ErrorCount { rank: 0, kind: "panic", count: 1000 }, ErrorCount { rank: 1, kind: "panic", count: 1000 }],
        "{msg}"
    );
    // A few records, the rest counted: one line that says how many failed where, not 2000 of them.
    assert!(errors.errors().len() <= 16, "{} records", errors.errors().len());
    assert!(
        errors
            .errors()
            .iter()
            .all(|d| matches!(d, DeviceError::KernelPanic { message, .. } if message == "thread failed on purpose"))
    );
    assert_eq!(msg.lines().count(), 1, "{msg}");
    assert!(msg.len() < 1200, "{} bytes: {msg}", msg.len());
    for needle in
        ["thread failed on purpose", "and 1999 more device error(s)", "rank 0: 1000 panics", "rank 1: 1000 panics"]
    {
        assert!(msg.contains(needle), "`{needle}` missing from: {msg}");
    }
    let mut stamps = SymBuffer::<u32>::new(team, 64).unwrap();
    kernels::stamp_rank(team, LaunchConfig::new(1, 64), &mut stamps).unwrap().wait().unwrap();
    assert_eq!(stamps.to_host(1).unwrap()[5], 1_000_005);
}

fn exited_threads_do_not_hold_up_block_barriers(team: &Team) {
    // Mode 0: thread 0 exits, the other 63 threads of the block meet at `barrier.sync 0`; mode 1: all of
    // warp 0 exits, warp 1 meets there. Both must finish (a barrier counting exited threads would hang
    // until the host watchdog) and every thread that stayed must have passed the barrier.
    for (mode, exited) in [(0u32, 1usize), (1, 32)] {
        let mut out = SymBuffer::<u32>::new(team, 64).unwrap();
        faults::exit_then_sync(team, LaunchConfig::new(1, 64), &mut out, mode).unwrap().wait().unwrap();
        let got = out.to_host(0).unwrap();
        assert!(got[..exited].iter().all(|&v| v == 0) && got[exited..].iter().all(|&v| v == 1), "mode {mode}: {got:?}");
    }
}

fn an_exited_lane_does_not_hold_up_a_warp_barrier(team: &Team) {
    // Lane 0 exits; lanes 1..31 call `bar.warp.sync 0xffffffff`, whose mask names the exited lane.
    let mut out = SymBuffer::<u32>::new(team, 64).unwrap();
    faults::exit_then_sync(team, LaunchConfig::new(1, 64), &mut out, 2).unwrap().wait().unwrap();
    let got = out.to_host(0).unwrap();
    assert!(got[0] == 0 && got[1..32].iter().all(|&v| v == 1) && got[32..].iter().all(|&v| v == 0), "{got:?}");
}

#[test]
fn a_buffer_of_another_team_is_named_by_its_parameter() {
    // The `#[kernel]` launcher passes each parameter's name with its checks: the error says which
    // argument was another team's buffer.
    let (a, b) = (emulated_team(2, EMULATED_LIMIT), emulated_team(2, EMULATED_LIMIT));
    let pad = SignalPadBuffer::new(&b, "p2p", ferrocomm_kernels::layout::p2p_pad::SIGNALS).unwrap();
    let mut inbox = SymBuffer::<u8>::new(&a, 8).unwrap();
    let payload = SymBuffer::<u8>::new(&b, 8).unwrap();
    let mut out = SymBuffer::<u64>::new(&b, 2).unwrap();
    let e = ferrocomm_kernels::kernels::p2p::ping_pong::launch(
        &b,
        LaunchConfig::single(),
        &pad,
        &mut inbox,
        &payload,
        0,
        1,
        1,
        &mut out,
    )
    .unwrap_err();
    assert!(matches!(e, Error::ForeignBuffer { argument: Some("inbox"), .. }), "{e}");
    assert!(e.to_string().contains("passed as argument `inbox`"), "{e}");
}
