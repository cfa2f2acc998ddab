//! Team launches, written once and run twice: on an emulated team (always, so CI checks them) and on the
//! GPUs (where present; skipped with a message otherwise, and a failure when `FERROCOMM_REQUIRE_GPUS=N`
//! asks for N GPUs that are not there). Two ranks run on two GPUs, or both on one GPU when only one exists.
//!
//! Covered: peer access over every GPU, symmetric allocation and its device-resident peer table, concurrent
//! launch on every rank, CUDA-graph capture and replay, co-residency refusal, and a timeout provoked on
//! purpose (a signal no peer raises: the error arrives soon after the timeout and the next launch works).

use std::time::{Duration, Instant};

use ferrocomm::{Backend, Cmp, DeviceError, Error, LaunchConfig, SignalPadBuffer, SignalRef, SymBuffer, Team, system};
use ferrocomm_device::abi::SIGNAL_PAD_EPOCH_SLOTS;
use ferrocomm_runtime_kernels::body::tag;
use ferrocomm_runtime_kernels::host as kernels;
use ferrocomm_tests::{EMULATED_HANG, EMULATED_LIMIT};

const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_GPUS";

/// A scenario's team timeout on each backend: a wait records a timeout after it, and the host gives up on
/// a launch after it + 1 s.
#[derive(Debug, Clone, Copy)]
struct Timeout {
    emulator: Duration,
    gpu: Duration,
}

/// For scenarios whose every wait ends: it only has to catch a hang.
const LIMIT: Timeout = Timeout { emulator: EMULATED_LIMIT, gpu: Duration::from_secs(2) };
/// For scenarios that wait on a signal no rank raises: the window they see elapse.
const HANG: Timeout = Timeout { emulator: EMULATED_HANG, gpu: Duration::from_millis(300) };

fn usable_gpus() -> usize {
    system::driver().map(|d| d.gpu_count).unwrap_or(0)
}

/// A CUDA team of `world` ranks, or `None` (with a visible message) when there is no GPU.
fn gpu_team(test: &str, world: Option<usize>, timeout: Duration) -> Option<Team> {
    let present = usable_gpus();
    if let Ok(v) = std::env::var(REQUIRE_ENV) {
        let need: usize = v.trim().parse().unwrap_or_else(|_| panic!("{REQUIRE_ENV}={v:?} is not a number of GPUs"));
        let why = system::driver().err().map(|e| format!(": {e}")).unwrap_or_default();
        assert!(present >= need, "{REQUIRE_ENV}={need} but {present} GPU(s) are usable{why}");
    }
    if present == 0 {
        let why = system::driver().err().map(|e| e.to_string()).unwrap_or_default();
        eprintln!("skipped: no GPU for {test} ({why})");
        return None;
    }
    let mut builder = Team::builder().backend(Backend::Cuda).timeout(timeout);
    if let Some(world) = world {
        builder = builder.world(world);
    }
    Some(builder.build().unwrap_or_else(|e| panic!("{test}: building the GPU team failed: {e}")))
}

fn emulated_team(world: usize, timeout: Duration) -> Team {
    Team::builder().backend(Backend::Emulator).world(world).timeout(timeout).build().expect("emulated team")
}

/// One scenario, two tests: `on_the_emulator` and `on_gpus`.
macro_rules! everywhere {
    ($name:ident, world: $world:expr, timeout: $timeout:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn on_the_emulator() {
                super::$name(&super::emulated_team($world, $timeout.emulator));
            }

            #[test]
            fn on_gpus() {
                if let Some(team) = super::gpu_team(stringify!($name), Some($world), $timeout.gpu) {
                    super::$name(&team);
                }
            }
        }
    };
}

everywhere!(symmetric_allocation, world: 2, timeout: LIMIT);
everywhere!(concurrent_launch, world: 2, timeout: LIMIT);
everywhere!(graph_capture_and_replay, world: 2, timeout: LIMIT);
everywhere!(waiting_grids_must_be_co_resident, world: 2, timeout: LIMIT);
everywhere!(timeout_then_next_launch, world: 2, timeout: HANG);
everywhere!(host_watchdog_never_hangs, world: 2, timeout: Timeout { gpu: Duration::from_millis(100), ..HANG });
// One rank: every kernel of this file runs without needing another kernel to run beside it, which is
// what compute-sanitizer (it serialises kernels) can check.
everywhere!(one_rank_runs_every_kernel, world: 1, timeout: HANG);

fn prev(rank: usize, world: usize) -> u32 {
    ((rank + world - 1) % world) as u32
}

/// Checks that every rank's `data` holds what its left neighbour's `ring` wrote in launch `epoch`.
fn assert_ring_data(data: &SymBuffer<u32>, epoch: u64) {
    let world = data.world();
    for rank in 0..world {
        let got = data.to_host(rank).unwrap();
        let from = prev(rank, world);
        if let Some(i) = (0..got.len()).find(|&i| got[i] != tag(from, epoch, i)) {
            panic!(
                "rank {rank}[{i}] = {:#x}, expected {:#x} (from rank {from}, epoch {epoch})",
                got[i],
                tag(from, epoch, i)
            );
        }
    }
}

fn symmetric_allocation(team: &Team) {
    let world = team.world();
    for len in [0, 1, 17, (1 << 20) + 3] {
        let mut buf = SymBuffer::<u32>::new(team, len).unwrap();
        let bases: Vec<u64> = (0..world).map(|r| buf.address(r).unwrap()).collect();
        for rank in 0..world {
            assert_eq!(buf.peer_table(rank).unwrap(), bases, "peer table of rank {rank} (len {len})");
            assert_eq!(bases[rank] % 256, 0);
            assert_eq!(buf.to_host(rank).unwrap(), vec![0; len], "fresh memory is zeroed");
        }
        let mut distinct = bases.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), world, "each rank has its own allocation, even on a shared GPU");
        for rank in 0..world {
            let data: Vec<u32> = (0..len as u32).map(|i| i ^ (rank as u32) << 28).collect();
            buf.copy_from_host(rank, &data).unwrap();
        }
        for rank in 0..world {
            let got = buf.to_host(rank).unwrap();
            assert!(got.iter().enumerate().all(|(i, &v)| v == (i as u32) ^ (rank as u32) << 28), "rank {rank}");
        }
        buf.fill(0x5a5a_0001).unwrap();
        assert!(buf.to_host(world - 1).unwrap().iter().all(|&v| v == 0x5a5a_0001));
    }
    let pad = SignalPadBuffer::new(team, "pad", 4).unwrap();
    assert_eq!(pad.read(world - 1).unwrap(), [0; 4]);
}

fn concurrent_launch(team: &Team) {
    let world = team.world();
    let mut stamps = SymBuffer::<u32>::new(team, 5000).unwrap();
    kernels::stamp_rank(team, LaunchConfig::new(4, 256), &mut stamps).unwrap().wait().unwrap();
    for rank in 0..world {
        let got = stamps.to_host(rank).unwrap();
        assert!(got.iter().enumerate().all(|(i, &v)| v == rank as u32 * 1_000_000 + i as u32), "rank {rank}");
    }
    // Dropping the guard waits as well.
    stamps.fill(0).unwrap();
    drop(kernels::stamp_rank(team, LaunchConfig::new(2, 128), &mut stamps).unwrap());
    assert_eq!(stamps.to_host(world - 1).unwrap()[4999], (world as u32 - 1) * 1_000_000 + 4999);

    // Every rank waits for its neighbour: this finishes only if all ranks run at once.
    let mut data = SymBuffer::<u32>::new(team, 777).unwrap();
    let pad = SignalPadBuffer::new(team, "ring", 1).unwrap();
    let cfg = LaunchConfig::new(2, 64);
    for epoch in 1..=3u64 {
        kernels::ring(team, cfg, &mut data, &pad).unwrap().wait().unwrap();
        assert_ring_data(&data, epoch);
        for rank in 0..world {
            assert_eq!(pad.read(rank).unwrap(), [epoch * 2], "signal 0 counts every block of every launch");
            assert_eq!(
                pad.epochs(rank).unwrap(),
                vec![epoch; SIGNAL_PAD_EPOCH_SLOTS],
                "the kernel advanced the pad's epoch"
            );
        }
    }
}

fn graph_capture_and_replay(team: &Team) {
    let world = team.world();
    let mut data = SymBuffer::<u32>::new(team, 500).unwrap();
    let mut scratch = SymBuffer::<u32>::new(team, 64).unwrap();
    let pad = SignalPadBuffer::new(team, "graph", 1).unwrap();
    let cfg = LaunchConfig::new(2, 32);
    let graph = team
        .capture(|t| {
            kernels::ring(t, cfg, &mut data, &pad)?.wait()?;
            kernels::ring(t, cfg, &mut data, &pad)?.wait()?;
            kernels::stamp_rank(t, LaunchConfig::new(1, 64), &mut scratch)?.wait()
        })
        .unwrap();
    assert_eq!(graph.launches(), 3);
    // Captured, not run.
    assert_eq!(data.to_host(0).unwrap(), vec![0; 500]);
    assert_eq!(pad.epochs(0).unwrap(), vec![0; SIGNAL_PAD_EPOCH_SLOTS]);
    // The graph keeps the memory of its buffers: dropping one does not free what replays write.
    drop(scratch);
    for replay in 1..=3u64 {
        data.fill(0).unwrap(); // the host may touch the inputs between replays
        graph.replay().unwrap().wait().unwrap();
        let epoch = 2 * replay;
        assert_ring_data(&data, epoch);
        for rank in 0..world {
            assert_eq!(pad.read(rank).unwrap(), [epoch * 2]);
            assert_eq!(
                pad.epochs(rank).unwrap(),
                vec![epoch; SIGNAL_PAD_EPOCH_SLOTS],
                "epochs advance across replays, no reset"
            );
        }
    }
    drop(graph);
    // Plain launches continue the same epochs.
    kernels::ring(team, cfg, &mut data, &pad).unwrap().wait().unwrap();
    assert_ring_data(&data, 7);
}

fn waiting_grids_must_be_co_resident(team: &Team) {
    let mut data = SymBuffer::<u32>::new(team, 16).unwrap();
    let pad = SignalPadBuffer::new(team, "big", 1).unwrap();
    let e = kernels::ring(team, LaunchConfig::new(1 << 20, 1024), &mut data, &pad).unwrap_err();
    match (team.backend(), &e) {
        (Backend::Cuda, Error::NotCoResident { kernel: "ring", blocks, max, .. }) => assert!(blocks > max),
        (Backend::Emulator, Error::BadLaunchConfig { kernel: "ring", .. }) => {}
        _ => panic!("expected a co-residency refusal on {}, got {e}", team.backend()),
    }
    // Nothing ran; the team is fine.
    assert_eq!(pad.read(0).unwrap(), [0]);
    kernels::ring(team, LaunchConfig::new(1, 32), &mut data, &pad).unwrap().wait().unwrap();
    assert_ring_data(&data, 1);
}

fn timeout_then_next_launch(team: &Team) {
    let pad = SignalPadBuffer::new(team, "never", 2).unwrap();
    let started = Instant::now();
    let e = kernels::wait_unraised(team, LaunchConfig::new(1, 32), &pad).unwrap().wait().unwrap_err();
    let elapsed = started.elapsed();
    assert!(elapsed >= team.timeout(), "the wait gave up after {elapsed:?}, before the timeout");
    // Within 1 s of it on a GPU; on the emulator the waiting threads may also start late on a loaded machine.
    let late = if team.backend() == Backend::Emulator { Duration::from_secs(2) } else { Duration::from_secs(1) };
    assert!(elapsed < team.timeout() + late, "the error took {elapsed:?}");
    let msg = e.to_string();
    // A GPU sees a timeout; the emulator's checker also knows that no rank raised the signal at all.
    match e.device_errors() {
        [
            DeviceError::Timeout { at, signal, expected, observed, cmp, location }
            | DeviceError::UnraisedSignal { at, signal, expected, observed, cmp, location },
        ] => {
            assert_eq!((at.rank, at.block, at.thread), (0, [0, 0, 0], [0, 0, 0]));
            assert_eq!(*signal, SignalRef::Pad { name: "never".into(), owner: 0, index: 1 });
            assert_eq!((*expected, *observed, *cmp), (1, 0, Cmp::Ge));
            assert!(location.file.ends_with("body.rs") && location.line > 0, "{location}");
        }
        other => panic!("expected one timeout record, got {other:?} ({msg})"),
    }
    let unraised = matches!(e.device_errors()[0], DeviceError::UnraisedSignal { .. });
    assert_eq!(unraised, team.backend() == Backend::Emulator, "{msg}");
    let hint = if unraised { "no rank raised" } else { "FERROCOMM_TIMEOUT_MS" };
    assert!(msg.contains("signal `never`[1] (rank 0's copy)") && msg.contains(hint), "{msg}");
    assert!(e.is_timeout(), "{msg}");
    // The context survived: the next launch runs and reports nothing stale.
    let mut data = SymBuffer::<u32>::new(team, 100).unwrap();
    let ring_pad = SignalPadBuffer::new(team, "ring", 1).unwrap();
    kernels::ring(team, LaunchConfig::new(1, 32), &mut data, &ring_pad).unwrap().wait().unwrap();
    assert_ring_data(&data, 1);
}

fn host_watchdog_never_hangs(team: &Team) {
    let mut buf = SymBuffer::<u32>::new(team, 4).unwrap();
    // The host gives up after the timeout + 1 s, a little later where it polls late or (on the emulator) a
    // rank's thread started late. The kernel spins outside any timed wait until after the latest moment this
    // test accepts (1.6 s on a GPU), so only the watchdog can end the wait.
    let deadline = team.timeout() + Duration::from_secs(1);
    let late = if team.backend() == Backend::Emulator { Duration::from_secs(2) } else { Duration::from_millis(400) };
    let latest = deadline + late;
    let spin = latest + late / 4;
    let started = Instant::now();
    let e = kernels::spin(team, LaunchConfig::single(), spin.as_nanos() as u64).unwrap().wait().unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(e, Error::HostTimeout { .. }), "{e}");
    assert!(elapsed >= deadline && elapsed < latest, "the watchdog ended the wait after {elapsed:?}");
    // The team refuses further use instead of touching memory a kernel may still use.
    assert!(matches!(buf.fill(1), Err(Error::Poisoned)));
    assert!(matches!(kernels::stamp_rank(team, LaunchConfig::single(), &mut buf), Err(Error::Poisoned)));
}

fn one_rank_runs_every_kernel(team: &Team) {
    let mut stamps = SymBuffer::<u32>::new(team, 1000).unwrap();
    kernels::stamp_rank(team, LaunchConfig::new(2, 128), &mut stamps).unwrap().wait().unwrap();
    assert!(stamps.to_host(0).unwrap().iter().enumerate().all(|(i, &v)| v == i as u32));
    let mut data = SymBuffer::<u32>::new(team, 300).unwrap();
    let pad = SignalPadBuffer::new(team, "self", 2).unwrap();
    for epoch in 1..=2 {
        kernels::ring(team, LaunchConfig::new(2, 64), &mut data, &pad).unwrap().wait().unwrap();
        assert_ring_data(&data, epoch);
    }
    let graph = team.capture(|t| kernels::ring(t, LaunchConfig::new(1, 32), &mut data, &pad)?.wait()).unwrap();
    graph.replay().unwrap().wait().unwrap();
    drop(graph);
    assert_ring_data(&data, 3);
    let e = kernels::wait_unraised(team, LaunchConfig::single(), &pad).unwrap().wait().unwrap_err();
    assert!(e.is_timeout(), "{e}");
}

#[test]
fn peer_access_over_every_gpu() {
    let Some(team) = gpu_team("peer_access_over_every_gpu", None, LIMIT.gpu) else { return };
    let n = usable_gpus();
    assert_eq!(team.world(), n, "one rank per GPU");
    for a in 0..n {
        for b in (0..n).filter(|&b| b != a) {
            let link = system::link(a, b).unwrap();
            assert_ne!(link, ferrocomm::Link::None, "GPU {a} -> GPU {b}");
            eprintln!("GPU {a} -> GPU {b}: {link}");
        }
    }
    // Peer stores over every link, all GPUs at once.
    let mut data = SymBuffer::<u32>::new(&team, 4096).unwrap();
    let pad = SignalPadBuffer::new(&team, "ring", 1).unwrap();
    kernels::ring(&team, LaunchConfig::new(4, 128), &mut data, &pad).unwrap().wait().unwrap();
    assert_ring_data(&data, 1);
}

#[test]
fn two_ranks_share_one_gpu() {
    if gpu_team("two_ranks_share_one_gpu", Some(1), LIMIT.gpu).is_none() {
        return;
    }
    let team = Team::builder().backend(Backend::Cuda).devices([0]).ranks_per_gpu(2).timeout(LIMIT.gpu).build().unwrap();
    assert_eq!(team.device(1).unwrap(), ferrocomm::Device::Cuda { ordinal: 0 });
    concurrent_launch(&team);
    graph_capture_and_replay(&team);
}

#[test]
fn doctor_passes_where_gpus_exist() {
    if gpu_team("doctor_passes_where_gpus_exist", Some(1), LIMIT.gpu).is_none() {
        return;
    }
    let mut out = Vec::new();
    let report = ferrocomm_cli::doctor::run(&mut out).unwrap_or_else(|e| panic!("doctor: {e}"));
    let text = String::from_utf8(out).unwrap();
    assert_eq!(report.gpus.len(), usable_gpus());
    assert!(text.contains("PTX JIT smoke test on GPU 0: ok"), "{text}");
    eprintln!("{text}");
}
