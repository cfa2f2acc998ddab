//! Teams that span processes, on the CPU emulator (CI): every collective and the custom kernels with 2 and
//! 4 processes, each checking its own rank against the CPU reference; and every fault of a job of several
//! processes, each a typed error on every surviving rank, never a hang: a rank that never joins, one that
//! dies, mismatched world sizes, duplicate ranks, allocations that differ in size or order, different
//! kernel modules. And bytes that rank 0 makes for another library's bootstrap reach every process.
//!
//! Each test starts its ranks as processes of this test binary, with the variables torchrun sets and
//! `FERROCOMM_TEST_SCENARIO` naming what the rank does (the test `rank_process` runs it); a rank prints
//! `outcome: ...` and exits, and the test reads every rank's output.

use std::time::Duration;

use ferrocomm::{Backend, SymBuffer, Team};
use ferrocomm_tests::{EMULATED_HANG, EMULATED_LIMIT};

#[path = "support/local_job.rs"]
mod local_job;
use local_job::RankOutput;

/// The variable that tells a process of this binary which scenario to play as a rank.
const SCENARIO: &str = "FERROCOMM_TEST_SCENARIO";
/// Longest any rank may take: a hang fails the test instead of stalling CI.
const DEADLINE: Duration = Duration::from_secs(120);
/// The scenarios in which a rank's wait times out on purpose: their device timeout is the window they see
/// elapse, [`EMULATED_HANG`]; every other scenario's, [`EMULATED_LIMIT`], only a hang reaches.
const TIMING_OUT: [&str; 2] = ["dies", "traced"];

/// Starts `ranks` of a job of `world` playing `scenario`; `env` adds or overrides variables per rank.
fn job(
    scenario: &str,
    world: usize,
    ranks: &[usize],
    env: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<RankOutput> {
    let timeout = if TIMING_OUT.contains(&scenario) { EMULATED_HANG } else { EMULATED_LIMIT };
    local_job::job(world, ranks, DEADLINE, |rank| {
        let mut vars = vec![
            (SCENARIO, scenario.to_owned()),
            ("FERROCOMM_RENDEZVOUS_TIMEOUT_MS", "20000".to_owned()),
            ("FERROCOMM_TIMEOUT_MS", timeout.as_millis().to_string()),
        ];
        vars.extend(env(rank));
        vars
    })
}

fn no_env(_: usize) -> Vec<(&'static str, String)> {
    Vec::new()
}

/// Every rank ended with status 0 and said so.
fn assert_all_ok(outputs: &[RankOutput]) {
    for o in outputs {
        assert!(o.code == Some(0) && o.outcome().starts_with("ok"), "{o:?}");
    }
}

/// Every rank failed with an outcome containing each of `needles`.
fn assert_all_fail(outputs: &[RankOutput], needles: &[&str]) {
    for o in outputs {
        assert_ne!(o.code, None, "rank {} hung: {o:?}", o.rank);
        let outcome = o.outcome();
        assert!(outcome.starts_with("error"), "{o:?}");
        for n in needles {
            assert!(outcome.contains(n), "rank {}: {n:?} not in {outcome:?}", o.rank);
        }
    }
}

#[test]
fn every_collective_across_two_and_four_processes() {
    for world in [2, 4] {
        let ranks: Vec<usize> = (0..world).collect();
        let outputs = job("collectives", world, &ranks, no_env);
        assert_all_ok(&outputs);
        for o in &outputs {
            let checks = o.stdout.lines().filter(|l| l.starts_with("verified")).count();
            assert!(checks >= 40, "rank {} of {world} verified only {checks} checks: {o:?}", o.rank);
        }
    }
}

#[test]
fn a_rank_that_never_joins_is_named_by_the_ranks_that_did() {
    // Rank 2 never comes: the rendezvous timeout is the window the others see elapse.
    let window = EMULATED_HANG.as_millis().to_string();
    let outputs = job("join", 3, &[0, 1], |_| vec![("FERROCOMM_RENDEZVOUS_TIMEOUT_MS", window.clone())]);
    assert_all_fail(&outputs, &["2"]);
    assert!(outputs[0].outcome().contains("never joined") || outputs[0].outcome().contains("missing"), "{outputs:?}");
}

#[test]
fn a_rank_that_dies_mid_collective_is_named_and_the_survivor_exits_cleanly() {
    let outputs = job("dies", 2, &[0, 1], no_env);
    let survivor = &outputs[0];
    assert_eq!(survivor.code, Some(1), "{survivor:?}");
    let outcome = survivor.outcome();
    assert!(
        outcome.contains("rank(s) [1]") && outcome.contains("exited") && outcome.contains("timed out"),
        "{outcome}"
    );
    assert_ne!(outputs[1].code, Some(0), "{:?}", outputs[1]);
}

#[test]
fn mismatched_world_sizes_and_duplicate_ranks_are_typed_errors() {
    let outputs = job("join", 2, &[0, 1], |rank| {
        if rank == 1 { vec![("WORLD_SIZE", "3".into()), ("LOCAL_WORLD_SIZE", "3".into())] } else { Vec::new() }
    });
    for o in &outputs {
        assert!(o.outcome().starts_with("error") && o.outcome().contains('3'), "{o:?}");
    }
    let outputs = job("join", 3, &[0, 1, 1], no_env);
    for o in &outputs {
        assert!(o.outcome().starts_with("error") && o.outcome().contains("rank 1"), "{o:?}");
    }
}

#[test]
fn allocations_of_different_sizes_or_order_fail_on_every_rank() {
    let outputs = job("sizes", 2, &[0, 1], no_env);
    assert_all_fail(&outputs, &["disagree", "10 elements", "20 elements", "rank 0", "rank 1"]);
    let outputs = job("order", 2, &[0, 1], no_env);
    assert_all_fail(&outputs, &["disagree", "SymBuffer<f32>", "SymBuffer<u32>"]);
}

#[test]
fn launching_from_different_kernel_modules_fails_on_every_rank() {
    let outputs = job("modules", 2, &[0, 1], no_env);
    assert_all_fail(&outputs, &["disagree", "custom_kernel", "ferrocomm_runtime_kernels"]);
}

#[test]
fn trace_mode_across_processes_writes_a_trace_per_process_and_reports_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_string_lossy().into_owned();
    let outputs =
        job("traced", 2, &[0, 1], |_| vec![("FERROCOMM_TRACE", "1".into()), ("FERROCOMM_TRACE_DIR", path.clone())]);
    assert_all_ok(&outputs);
    // Rank 0's wait timed out; its process knows only its own ranks' waits, so it points at the other one.
    let report = outputs[0].stdout.lines().find_map(|l| l.split_once("report: ")).map(|(_, r)| r);
    let report = report.unwrap_or_else(|| panic!("no report: {outputs:?}"));
    assert!(
        report.contains("rank 0 block 1 waits on rank 0's `ring`[1]") && report.contains("another process"),
        "{report}"
    );
    let traces = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(traces, 2, "one trace per process");
}

#[test]
fn bytes_made_by_rank_zero_reach_every_process_and_its_failure_stops_them_all() {
    let outputs = job("share", 3, &[0, 1, 2], no_env);
    assert_all_ok(&outputs);
    let outputs = job("share_fails", 3, &[0, 1, 2], no_env);
    assert_all_fail(&outputs[..1], &["no id today"]);
    assert_all_fail(&outputs[1..], &["rank 0 could not make", "the test's id"]);
}

/// One rank of a scenario, when this binary runs as a rank.
#[test]
#[ignore = "the entry point of a spawned rank: run by its parent test"]
fn rank_process() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        eprintln!("skipped: rank_process plays a rank of a job another test of this binary starts");
        return;
    };
    let outcome = match play(&scenario) {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("error: {e}"),
    };
    println!("outcome: {outcome}");
    std::process::exit(if outcome == "ok" { 0 } else { 1 });
}

fn play(scenario: &str) -> Result<(), Box<dyn std::error::Error>> {
    let team = Team::from_env()?;
    assert!(team.spans_processes() && team.backend() == Backend::Emulator);
    let rank = team.local_ranks()[0];
    match scenario {
        "join" => {}
        "collectives" => ferrocomm_examples::multiprocess::run_multiprocess(&team, |what| println!("verified {what}"))?,
        "dies" => {
            let mut comm = ferrocomm_kernels::Communicator::new(&team)?;
            let mut buf = SymBuffer::<f32>::new(&team, 64)?;
            comm.all_reduce(&mut buf, ferrocomm_kernels::Op::Sum)?.wait()?;
            if rank == 1 {
                // Gone without a word while the survivor's next collective waits on it, as a process the
                // OOM killer takes is. It dies before launching its own part: dying just after the launch
                // would race with its kernel, which can raise its signals first and let the survivor's
                // collective complete.
                std::process::abort();
            }
            comm.all_reduce(&mut buf, ferrocomm_kernels::Op::Sum)?.wait()?;
        }
        "sizes" => {
            let _buf = SymBuffer::<f32>::new(&team, if rank == 0 { 10 } else { 20 })?;
        }
        "order" => {
            if rank == 0 {
                let _a = SymBuffer::<f32>::new(&team, 8)?;
                let _b = SymBuffer::<u32>::new(&team, 8)?;
            } else {
                let _b = SymBuffer::<u32>::new(&team, 8)?;
                let _a = SymBuffer::<f32>::new(&team, 8)?;
            }
        }
        "modules" => {
            let mut acc = SymBuffer::<f32>::new(&team, 8)?;
            let inbox = SymBuffer::<f32>::new(&team, 8)?;
            let mut stamps = SymBuffer::<u32>::new(&team, 8)?;
            let cfg = ferrocomm::LaunchConfig::new(1, 32);
            if rank == 0 {
                custom_kernel::accumulate::launch(&team, cfg, &mut acc, &inbox)?.wait()?;
            } else {
                ferrocomm_runtime_kernels::host::stamp_rank(&team, cfg, &mut stamps)?.wait()?;
            }
        }
        "traced" => {
            // A clean launch, then one in which rank 1's block 1 skips its signal: rank 0's block 1 times out.
            use ferrocomm_device_kernels::trace::traced_ring;
            let mut src = SymBuffer::<u32>::new(&team, 16)?;
            src.fill(3)?;
            let mut dst = SymBuffer::<u32>::new(&team, 32)?;
            let mut pad = ferrocomm::SignalPadBuffer::new(&team, "ring", 2)?;
            let cfg = ferrocomm::LaunchConfig::new(2, 32);
            traced_ring::launch(&team, cfg, &src, &mut dst, &pad, u32::MAX, u32::MAX)?.wait()?;
            let hang = traced_ring::launch(&team, cfg, &src, &mut dst, &pad, 1, 1)?.wait();
            match (rank, hang) {
                (0, Err(ferrocomm::Error::Device(errors))) => {
                    println!("report: {}", errors.wait_for().map(|r| r.culprit.clone()).unwrap_or_default())
                }
                (0, other) => panic!("rank 0 should have timed out: {other:?}"),
                (_, result) => result?,
            }
            // Both processes are still there while rank 0 reads its errors; the reset is collective.
            pad.reset()?;
            assert!(team.is_traced() && !team.trace_events().is_empty());
        }
        "share" => {
            // Only rank 0's `make` runs; every process gets its bytes.
            let bytes = team.share_from_rank_zero("the test's id", || {
                assert_eq!(rank, 0, "make ran on rank {rank}");
                Ok(b"rank zero's id".to_vec())
            })?;
            assert_eq!(bytes, b"rank zero's id");
        }
        "share_fails" => {
            team.share_from_rank_zero("the test's id", || {
                Err(ferrocomm::Error::TeamConfig { reason: "no id today".into() })
            })?;
        }
        other => panic!("no scenario {other}"),
    }
    Ok(())
}
