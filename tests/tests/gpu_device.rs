//! The device library across ranks, written once and run twice: on an emulated team (always, so CI checks
//! it) and on the GPUs (where present; skipped with a message otherwise, and a failure when
//! `FERROCOMM_REQUIRE_GPUS=N` asks for N GPUs that are not there). Two ranks run on two GPUs, or both on
//! one GPU when only one exists. The kernels are `ferrocomm-device-kernels`'.
//!
//! - Message passing: data stored weakly into the peer, then a release flag; the peer acquires the flag
//!   and checks the data. On GPUs at least 10^6 trials per run, and not one stale read. Its weakened twin
//!   (relaxed flag, no fence) runs beside it; its stale count is printed, not asserted (the PTX memory
//!   model allows stale reads there; whether this hardware shows any is what the print says).
//! - put / get / put-with-signal / LL round trips by thread, warp and block at sizes 0, 1, 15, 16, 17,
//!   4095 and 1 MiB + 3 elements, on sub-slices at element offsets that give every relative alignment,
//!   each compared with a CPU reference.
//!
//! Run with `--nocapture` to see the figures. Scenarios hold one lock: two teams spinning on the same
//! GPUs (or the same two CPU cores) at once would only slow each other down.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferrocomm::{Backend, DeviceError, LaunchConfig, Team, system};
use ferrocomm_device_kernels::host::{Case, CheckError, Element, Litmus, LitmusReport, RoundTrips};
use ferrocomm_device_kernels::round_trip::{Group, Op};

const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_GPUS";
const MEBI_PLUS_3: usize = (1 << 20) + 3;
const SIZES: [usize; 7] = [0, 1, 15, 16, 17, 4095, MEBI_PLUS_3];

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a scenario runs at: grids, trial counts and the cases' breadth.
#[derive(Debug, Clone, Copy)]
struct Scale {
    /// One writer/reader pair per thread of this grid.
    litmus_grid: LaunchConfig,
    /// Trials per pair and launch.
    litmus_trials: u32,
    /// Launches of each flavour (they alternate, on the same flags).
    litmus_launches: u32,
    /// Release/acquire trials the scenario must reach.
    litmus_min_trials: u64,
    /// The grid of every round trip: its threads, warps and blocks are the groups.
    trip_grid: LaunchConfig,
    /// Chunks (and threads moving them) of the thread variant.
    thread_groups: u32,
    /// Sizes of the unaligned cases.
    unaligned_sizes: &'static [usize],
    /// Whether the unaligned cases include 1 MiB + 3 elements.
    unaligned_mebi: bool,
}

/// GPUs: 4096 pairs × 1024 trials per launch; every case at every size.
const GPU: Scale = Scale {
    litmus_grid: LaunchConfig::new(16, 256),
    litmus_trials: 1024,
    litmus_launches: 2,
    litmus_min_trials: 1_000_000,
    trip_grid: LaunchConfig::new(3, 80),
    thread_groups: 8,
    unaligned_sizes: &[0, 1, 15, 16, 17, 4095],
    unaligned_mebi: true,
};

/// The emulator runs one host thread per GPU thread: small grids, few trials, fewer unaligned sizes.
const EMULATOR: Scale = Scale {
    litmus_grid: LaunchConfig::new(2, 64),
    litmus_trials: 64,
    litmus_launches: 2,
    litmus_min_trials: 2 * 128 * 64,
    trip_grid: LaunchConfig::new(2, 36),
    thread_groups: 5,
    unaligned_sizes: &[17, 4095],
    unaligned_mebi: false,
};

/// The GPU team — two ranks on two GPUs, or on one GPU when there is only one — or `None` with a visible
/// message when there is no GPU.
fn gpu_team(test: &str) -> Option<Team> {
    let present = system::driver().map(|d| d.gpu_count).unwrap_or(0);
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
    let builder = Team::builder().backend(Backend::Cuda).timeout(Duration::from_secs(10));
    let builder = if present == 1 { builder.devices([0]).ranks_per_gpu(2) } else { builder.world(2) };
    Some(builder.build().unwrap_or_else(|e| panic!("{test}: building the GPU team failed: {e}")))
}

/// An emulated team of two ranks; a generous timeout, since two cores run every emulated thread.
fn emulated_team() -> Team {
    Team::builder().backend(Backend::Emulator).world(2).timeout(Duration::from_secs(30)).build().expect("emulated team")
}

/// One scenario, two tests: `on_the_emulator` and `on_gpus`.
macro_rules! everywhere {
    ($name:ident) => {
        mod $name {
            #[test]
            fn on_the_emulator() {
                let _one = super::one_at_a_time();
                super::$name(&super::emulated_team(), &super::EMULATOR);
            }

            #[test]
            fn on_gpus() {
                let _one = super::one_at_a_time();
                if let Some(team) = super::gpu_team(stringify!($name)) {
                    super::$name(&team, &super::GPU);
                }
            }
        }
    };
}

everywhere!(message_passing_litmus);
everywhere!(round_trips_at_every_size);
everywhere!(round_trips_on_unaligned_sub_slices);

fn check<T>(result: Result<T, CheckError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn placement(team: &Team) -> String {
    let devices: Vec<String> = (0..team.world()).map(|r| team.device(r).unwrap().to_string()).collect();
    format!("{} ranks on {}", team.world(), devices.join(" + "))
}

fn message_passing_litmus(team: &Team, scale: &Scale) {
    let mut litmus = check(Litmus::new(team, scale.litmus_grid));
    let zero = LitmusReport { trials: 0, stale: 0, device: Duration::ZERO, wall: Duration::ZERO };
    let (mut strong, mut weak) = (zero, zero);
    let add = |sum: &mut LitmusReport, r: LitmusReport| {
        sum.trials += r.trials;
        sum.stale += r.stale;
        sum.device += r.device;
        sum.wall += r.wall;
    };
    let emulated = team.backend() == Backend::Emulator;
    // The flavours alternate on the same flags and data: each continues the other's sequence.
    for launch in 0..scale.litmus_launches {
        let r = check(litmus.run(team, false, scale.litmus_trials));
        assert_eq!(r.stale, 0, "launch {launch}: {} of {} release/acquire trials read stale data", r.stale, r.trials);
        add(&mut strong, r);
        if !emulated {
            add(&mut weak, check(litmus.run(team, true, scale.litmus_trials)));
        }
    }
    if emulated {
        // The emulator's checker reports what the hardware may do: data read behind a relaxed flag is a race.
        match litmus.run(team, true, scale.litmus_trials) {
            Err(CheckError::Runtime { source, .. })
                if source.device_errors().iter().any(|e| matches!(e, DeviceError::Race { .. })) =>
            {
                eprintln!("message passing, relaxed flag, no fence: the emulator's checker reports a race");
            }
            Ok(r) => panic!("the checker let the relaxed twin pass ({} trials, {} stale)", r.trials, r.stale),
            Err(e) => panic!("the relaxed twin must fail as a race, not: {e}"),
        }
    }
    eprintln!(
        "message passing, {}, {} pairs: release/acquire {} trials, {} stale, {:.3e} trials/s ({:?} device, {:?} \
         wall)",
        placement(team),
        litmus.pairs(),
        strong.trials,
        strong.stale,
        strong.trials_per_second(),
        strong.device,
        strong.wall
    );
    if !emulated {
        eprintln!(
            "message passing, {}: relaxed flag, no fence: {} trials, {} stale ({:.3e} of trials), {:.3e} trials/s",
            placement(team),
            weak.trials,
            weak.stale,
            weak.stale as f64 / weak.trials.max(1) as f64,
            weak.trials_per_second()
        );
    }
    assert!(
        strong.trials >= scale.litmus_min_trials,
        "{} release/acquire trials, the scenario needs at least {}",
        strong.trials,
        scale.litmus_min_trials
    );
}

/// Every operation by every group kind at every size in `sizes`, from `src[src_off..]` to `[dst_off..]`.
fn sweep<T: Element>(team: &Team, scale: &Scale, trips: &mut RoundTrips<T>, sizes: &[usize], offsets: (usize, usize)) {
    let grid = scale.trip_grid;
    let (blocks, threads) = (grid.blocks() as u32, grid.threads_per_block());
    for group in Group::ALL {
        let groups = match group {
            Group::Thread => scale.thread_groups,
            _ => group.available(blocks, threads),
        };
        for &len in sizes {
            for op in Op::ALL {
                let case = Case { op, group, groups, len, src_off: offsets.0, dst_off: offsets.1 };
                check(trips.run(team, grid, &case));
            }
        }
    }
}

fn round_trips_at_every_size(team: &Team, scale: &Scale) {
    let started = Instant::now();
    let mut trips = check(RoundTrips::<u32>::new(team, MEBI_PLUS_3));
    sweep(team, scale, &mut trips, &SIZES, (0, 0));
    // Bytes from a sub-slice at element 1 into one at element 1: the vector path with a head and a tail.
    let mut trips = check(RoundTrips::<u8>::new(team, MEBI_PLUS_3));
    sweep(team, scale, &mut trips, &SIZES, (1, 1));
    eprintln!("round trips at every size, {}: {:?}", placement(team), started.elapsed());
}

fn round_trips_on_unaligned_sub_slices(team: &Team, scale: &Scale) {
    let started = Instant::now();
    let mut sizes = scale.unaligned_sizes.to_vec();
    if scale.unaligned_mebi {
        sizes.push(MEBI_PLUS_3);
    }
    let max = sizes.iter().copied().max().unwrap_or(0);
    // Offsets in elements; with 256-byte aligned buffers they give these byte misalignments: equal (vector
    // path with heads and tails) and different (the widest unit both allow).
    let mut u8s = check(RoundTrips::<u8>::new(team, max));
    for offsets in [(1, 0), (0, 1), (3, 7), (5, 13)] {
        sweep(team, scale, &mut u8s, &sizes, offsets);
    }
    let mut u16s = check(RoundTrips::<u16>::new(team, max));
    for offsets in [(1, 1), (1, 0), (0, 3)] {
        sweep(team, scale, &mut u16s, &sizes, offsets);
    }
    let mut u32s = check(RoundTrips::<u32>::new(team, max));
    for offsets in [(1, 1), (1, 0), (2, 1)] {
        sweep(team, scale, &mut u32s, &sizes, offsets);
    }
    eprintln!("round trips on unaligned sub-slices, {}: {:?}", placement(team), started.elapsed());
}
