//! NVSHMEM on a GPU: a team of one PE initialised through NVSHMEM's unique-id bootstrap runs the NVSHMEM
//! flavour of `ferrocomm-nvshmem-kernels` — put-with-signal, a one-shot all-reduce and the bench's
//! operations (`NvshmemOps`) through NVSHMEM's device API, bound with `nvshmemx_cumodule_init` — and the
//! results are checked against the CPU references the emulator test (`nvshmem_emulated.rs`) uses for the
//! same kernels.
//!
//! Skipped with a visible message without a GPU, or without NVSHMEM's host library (`python3 -m pip install
//! nvidia-nvshmem-cu13==3.4.5`, or `FERROCOMM_NVSHMEM_LIB=<dir>`), or without the kernels' NVSHMEM flavour
//! (the build found no bitcode). When `FERROCOMM_REQUIRE_GPUS=N` is set, a missing GPU, library or flavour
//! fails instead. NVSHMEM initialises once per process, so the one-PE checks run in one test, in order.
//!
//! With two GPUs or more, a second test starts a job of two processes (torchrun's variables), one PE each:
//! rank 0's unique id travels over ferrocomm's rendezvous, and the same checks run across the two PEs.
//!
//! On one GPU, a third test starts CUDA's Multi-Process Service (MPS: the PEs' kernels wait for each other,
//! so they must run at once) and runs the same checks with two, then four PEs sharing the GPU, each a
//! process of its own (`FERROCOMM_RANKS_PER_GPU`). It says so and skips when MPS cannot start (it needs
//! root), and fails instead under `FERROCOMM_REQUIRE_GPUS`. Then three faults: a PE that never initialises
//! and a PE that dies between two all-reduces, each an error that names the PE on the survivor, and a PE
//! that dies before its put, whose peer's kernel ends in an error; never a hang.

use std::time::Duration;

#[path = "support/local_job.rs"]
mod local_job;
#[path = "support/mps.rs"]
mod mps;

use ferrocomm::{Backend, Error, LaunchConfig, SignalPadBuffer, SymBuffer, Team, nvshmem, system};
use ferrocomm_device::{bf16, f16};
use ferrocomm_nvshmem_kernels::__FERROCOMM_MODULE as MODULE;
use ferrocomm_nvshmem_kernels::host::{
    BYTES_PER_BLOCK, NvshmemOps, check_all_gather, check_all_reduce, check_all_reduce_sum, check_all_to_all,
    check_ping_pong, check_put, check_put_signal,
};
use ferrocomm_nvshmem_kernels::nvshmem_put_signal;

const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_GPUS";

/// Whether `FERROCOMM_REQUIRE_GPUS` asks for at least one GPU.
fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v.trim().parse::<usize>().is_ok_and(|n| n > 0))
}

/// Skips (with a message) or, when GPUs are required, fails.
fn skip_or_fail(why: String) {
    assert!(!required(), "{REQUIRE_ENV} is set but {why}");
    eprintln!("skipped: {why}");
}

/// Whether this machine can run the NVSHMEM tests with `gpus` GPUs at least: the GPUs, NVSHMEM's host
/// library and the kernels' NVSHMEM flavour (see the module docs).
fn runnable(gpus: usize) -> bool {
    let present = system::driver().map(|d| d.gpu_count).unwrap_or(0);
    if present == 0 {
        let why = system::driver().err().map(|e| e.to_string()).unwrap_or_default();
        skip_or_fail(format!("no GPU for the NVSHMEM test ({why})"));
        return false;
    }
    if present < gpus {
        // Not a failure under FERROCOMM_REQUIRE_GPUS=1: the machine has what it was required to have.
        let need: usize = std::env::var(REQUIRE_ENV).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        assert!(need < gpus, "{REQUIRE_ENV}={need} but {present} GPU(s) are usable");
        eprintln!("skipped: the test needs {gpus} GPUs, this machine has {present}");
        return false;
    }
    let info = match nvshmem::probe() {
        Ok(info) => info,
        Err(e) => {
            skip_or_fail(format!("NVSHMEM cannot be used: {e}"));
            return false;
        }
    };
    eprintln!("NVSHMEM {} from {} (transports: {:?})", info.version, info.library.display(), info.transports);
    if MODULE.nvshmem_arches().is_empty() {
        skip_or_fail(
            "ferrocomm-nvshmem-kernels was built without its NVSHMEM flavour (no libnvshmem_device.bc at build time)"
                .into(),
        );
        return false;
    }
    true
}

/// The one-PE team, or `None` where this machine cannot run it (see the module docs).
fn nvshmem_team() -> Option<Team> {
    if !runnable(1) {
        return None;
    }
    if std::env::var_os("NVSHMEM_DISABLE_NVLS").is_none() {
        // SAFETY: set before NVSHMEM (the only reader) starts, while this binary's single test is the only
        // thread that touches the environment. NVLink SHARP needs a multicast-capable fabric one GPU lacks.
        unsafe { std::env::set_var("NVSHMEM_DISABLE_NVLS", "1") };
    }
    // A GPU and NVSHMEM are here: from now on every failure is the code's, not the machine's.
    let team = Team::builder()
        .backend(Backend::Cuda)
        .single_process()
        .world(1)
        .nvshmem(true)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap_or_else(|e| panic!("an NVSHMEM team of one PE on a GPU: {e}"));
    Some(team)
}

#[test]
fn one_pe_puts_signals_and_all_reduces_through_nvshmem() {
    let Some(team) = nvshmem_team() else { return };
    assert_eq!((team.world(), team.backend()), (1, Backend::Cuda));

    // NVSHMEM's put-with-signal to itself (PE 0 → PE 0), at sizes from one element to 256 KiB, three launches
    // on one pad (its epochs carry on).
    for len in [1, 1000, 1 << 16] {
        check_put_signal(&team, len, 256, 3).unwrap_or_else(|e| panic!("put/signal, {len} elements: {e}"));
    }
    // The all-reduce over NVSHMEM's puts and signals, the stage's halves alternating over launches.
    for len in [1, 333, 1 << 15] {
        check_all_reduce(&team, len, 256, 3).unwrap_or_else(|e| panic!("all-reduce, {len} elements: {e}"));
    }

    // The bench's operations (the nvshmem mode's kernels), PE 0 to itself, at awkward sizes and over
    // several blocks.
    check_bench_operations(&team);

    // A buffer larger than the heap can grow to (NVSHMEM grows it on demand, up to the GPU's memory): a typed
    // error that names the variable and a size, and the team stays usable.
    let (heap, _) = nvshmem::heap_size().unwrap();
    let too_big = (2 * heap).max(1 << 40) as usize;
    match SymBuffer::<u8>::new(&team, too_big) {
        Err(e @ Error::NvshmemHeapTooSmall { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("NVSHMEM_SYMMETRIC_SIZE="), "{msg}");
        }
        Err(e) => panic!("allocating {too_big} bytes: want NvshmemHeapTooSmall, got {e}"),
        Ok(_) => panic!("NVSHMEM's heap of {heap} bytes gave {too_big} bytes"),
    }
    check_put_signal(&team, 64, 128, 1).unwrap_or_else(|e| panic!("put/signal after the heap error: {e}"));
}

/// Every operation of `NvshmemOps` on `team` against its CPU reference: 0, 1, odd sizes and messages of
/// more than one block's chunk.
fn check_bench_operations(team: &Team) {
    let ops = NvshmemOps::new(team).unwrap();
    for bytes in [0, 1, 4099, 3 * BYTES_PER_BLOCK + 5, 8 << 20] {
        check_put(&ops, bytes, 2).unwrap_or_else(|e| panic!("put of {bytes} B: {e}"));
        check_all_gather(&ops, bytes, 2).unwrap_or_else(|e| panic!("all-gather of {bytes} B: {e}"));
        check_all_to_all(&ops, bytes, 2).unwrap_or_else(|e| panic!("all-to-all of {bytes} B: {e}"));
    }
    for bytes in [8, 1000, 65536] {
        check_ping_pong(&ops, bytes, 100).unwrap_or_else(|e| panic!("ping-pong of {bytes} B: {e}"));
    }
    for len in [0, 1, 4099, 1 << 20] {
        check_all_reduce_sum::<f32>(&ops, len, 3).unwrap_or_else(|e| panic!("all-reduce f32 x {len}: {e}"));
        check_all_reduce_sum::<bf16>(&ops, len, 2).unwrap_or_else(|e| panic!("all-reduce bf16 x {len}: {e}"));
    }
    check_all_reduce_sum::<f16>(&ops, 777, 2).unwrap_or_else(|e| panic!("all-reduce f16: {e}"));
}

/// The variable that makes this binary play one rank of [`two_pes_in_two_processes_put_signal_and_all_reduce`].
const RANK_ENV: &str = "FERROCOMM_TEST_NVSHMEM_RANK";
/// What a spawned rank plays: `checks` (every check of the suite), `dies` (PE 1 aborts between two
/// all-reduces) or `dies-before-its-put` (PE 1 aborts after one put round, once the next put's buffers are
/// allocated).
const SCENARIO_ENV: &str = "FERROCOMM_TEST_NVSHMEM_SCENARIO";

#[test]
fn two_pes_in_two_processes_put_signal_and_all_reduce() {
    if std::env::var_os(RANK_ENV).is_some() || !runnable(2) {
        return;
    }
    let outputs = local_job::job(2, &[0, 1], Duration::from_secs(180), |_| {
        vec![
            (RANK_ENV, "1".to_owned()),
            ("FERROCOMM_BACKEND", "cuda".to_owned()),
            ("NVSHMEM_DISABLE_NVLS", "1".to_owned()),
        ]
    });
    for o in &outputs {
        assert!(o.code == Some(0) && o.outcome() == "ok", "{o:?}");
    }
}

#[test]
fn two_and_four_pes_on_one_gpu_under_mps_put_signal_and_all_reduce() {
    if std::env::var_os(RANK_ENV).is_some() || !runnable(1) {
        return;
    }
    let daemon = match mps::MpsDaemon::start() {
        Ok(daemon) => daemon,
        Err(why) => return skip_or_fail(format!("MPS cannot start here, and PEs sharing a GPU need it: {why}")),
    };
    let shared_gpu_job = |world: usize, ranks: &[usize], scenario: &str, deadline: u64| {
        local_job::job(world, ranks, Duration::from_secs(deadline), |_| {
            let mut env = vec![
                (RANK_ENV, "1".to_owned()),
                (SCENARIO_ENV, scenario.to_owned()),
                ("FERROCOMM_BACKEND", "cuda".to_owned()),
                ("FERROCOMM_RANKS_PER_GPU", world.to_string()),
                ("FERROCOMM_RENDEZVOUS_TIMEOUT_MS", "10000".to_owned()),
                ("NVSHMEM_DISABLE_NVLS", "1".to_owned()),
                // Each PE's share of the SMs: grids are sized for the SMs a process sees, and PEs that each
                // size theirs for the whole GPU cannot all be resident (a kernel waits for blocks that never
                // start). NVSHMEM also gives full MPG support only when the shares add up to 100 %.
                ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", (100 / world).to_string()),
            ];
            env.extend(daemon.env());
            env
        })
    };
    for world in [2, 4] {
        let ranks: Vec<usize> = (0..world).collect();
        let started = std::time::Instant::now();
        for o in &shared_gpu_job(world, &ranks, "checks", 240) {
            assert!(
                o.code == Some(0) && o.outcome() == "ok",
                "{world} PEs on one GPU: {o:?}\nMPS log: {}",
                daemon.log()
            );
        }
        eprintln!("{world} PEs on one GPU under MPS: every check passed ({:.1} s)", started.elapsed().as_secs_f64());
    }

    // A PE that never initialises: PE 0 is told which one, within the rendezvous window, and exits.
    let outputs = shared_gpu_job(2, &[0], "checks", 60);
    let pe0 = &outputs[0];
    assert!(pe0.code == Some(1) && pe0.outcome().starts_with("error") && pe0.outcome().contains('1'), "{pe0:?}");
    eprintln!("a PE that never initialises: {}", pe0.outcome());

    // A PE that dies between two all-reduces: the survivor's second one ends in an error naming it.
    let outputs = shared_gpu_job(2, &[0, 1], "dies", 90);
    let pe0 = &outputs[0];
    assert!(pe0.code == Some(1) && pe0.outcome().starts_with("error") && pe0.outcome().contains('1'), "{pe0:?}");
    assert_ne!(outputs[1].code, Some(0), "{:?}", outputs[1]);
    eprintln!("a PE that dies mid-job: {}", pe0.outcome());

    // A PE that dies before its put: the survivor's kernel ends at the team's timeout with an error.
    let outputs = shared_gpu_job(2, &[0, 1], "dies-before-its-put", 90);
    let pe0 = &outputs[0];
    assert!(pe0.code == Some(1) && pe0.outcome().starts_with("error"), "{pe0:?}");
    eprintln!("a PE that dies before its put: {}", pe0.outcome());
}

/// One rank of [`two_pes_in_two_processes_put_signal_and_all_reduce`] or
/// [`two_and_four_pes_on_one_gpu_under_mps_put_signal_and_all_reduce`], when this binary runs as one.
#[test]
#[ignore = "the entry point of a spawned rank: run by its parent test"]
fn rank_process() {
    if std::env::var_os(RANK_ENV).is_none() {
        eprintln!("skipped: rank_process plays a rank of the multi-PE tests");
        return;
    }
    let played = || -> Result<(), Box<dyn std::error::Error>> {
        let team = Team::builder().nvshmem(true).timeout(Duration::from_secs(5)).build()?;
        let world: usize = std::env::var("WORLD_SIZE")?.parse()?;
        assert!(team.spans_processes() && team.world() == world && team.backend() == Backend::Cuda);
        match std::env::var(SCENARIO_ENV).as_deref() {
            Ok("dies-before-its-put") => {
                // One put-with-signal round loads the module on both PEs; then both allocate the put's
                // buffers and PE 1 is gone before it puts, so PE 0's kernel waits for a signal no PE will
                // raise, and its put lands in the memory of a process that exited.
                check_put_signal(&team, 1000, 256, 1)?;
                let src = SymBuffer::<u32>::new(&team, 1000)?;
                let mut dst = SymBuffer::<u32>::new(&team, 2 * 1000)?;
                let mut reach = SymBuffer::<u32>::new(&team, 2)?;
                let pad = SignalPadBuffer::new(&team, "nvshmem_put_signal", 2)?;
                if team.local_ranks()[0] == 1 {
                    std::process::abort();
                }
                let cfg = LaunchConfig::new(1, 256);
                nvshmem_put_signal::launch(&team, cfg, &src, &mut dst, &mut reach, &pad)?.wait()?;
            }
            Ok("dies") => {
                check_all_reduce(&team, 333, 256, 3)?;
                if team.local_ranks()[0] == 1 {
                    // Gone without a word, as a process the OOM killer takes is.
                    std::process::abort();
                }
                check_all_reduce(&team, 333, 256, 3)?;
            }
            _ => {
                check_put_signal(&team, 1000, 256, 3)?;
                check_all_reduce(&team, 333, 256, 3)?;
                check_bench_operations(&team);
            }
        }
        Ok(())
    };
    let outcome = match played() {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("error: {e}"),
    };
    println!("outcome: {outcome}");
    std::process::exit(if outcome == "ok" { 0 } else { 1 });
}
