//! The examples' core paths on the CPU emulator: the quickstart (the README's main job), the ping-pong,
//! all-reduce and MoE runs, and the custom kernels crate through its typed launchers — each verifies
//! against the CPU reference, so a wrong result fails here. With 2 ranks (the examples' default) and 3 (a
//! ring that is not its own inverse). The same paths at GPU sizes run on the GPUs when there are any
//! (skipped with a message otherwise; failing when `FERROCOMM_REQUIRE_GPUS=N` asks for GPUs that are missing).

use std::time::Duration;

use ferrocomm::{Backend, Team, system};
use ferrocomm_device::bf16;
use ferrocomm_examples::all_reduce::{GraphRuns, all_reduce};
use ferrocomm_examples::custom::{CustomPlan, run_custom_kernel};
use ferrocomm_examples::moe::dispatch_and_combine;
use ferrocomm_examples::ping_pong::ping_pong;
use ferrocomm_examples::quickstart::{QuickstartPlan, run_quickstart_with};
use ferrocomm_examples::{ExampleError, Platform, open_team, run_quickstart};
use ferrocomm_kernels::{Algorithm, Communicator, Op, PingProtocol};
use ferrocomm_tests::wait_limit;

/// How long a launch may take before the team calls it stuck. This file's tests run side by side, each
/// emulating hundreds of GPU threads on as few as two cores (the tensor-parallel GEMV's `mma.sync` among
/// them), so a launch can take seconds: a hang still fails, after a minute.
const STUCK_AFTER: Duration = Duration::from_secs(60);
// tools/mutate's budget for a mutant's run outlasts `EMULATED_LIMIT`, so a deadlock mutant's kill by this
// watchdog is seen as a kill, not a hang.
const _: () = assert!(STUCK_AFTER.as_secs() <= ferrocomm_tests::EMULATED_LIMIT.as_secs());

fn emulated(world: usize) -> Team {
    Team::builder().backend(Backend::Emulator).world(world).timeout(wait_limit(STUCK_AFTER)).build().expect("team")
}

fn ok<T>(result: Result<T, ExampleError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn quickstart_runs_and_verifies_on_the_emulator() {
    let team = emulated(2);
    let report = ok(run_quickstart(&team));
    assert_eq!(report.platform.backend, Backend::Emulator);
    assert_eq!(report.platform.world, 2);
    let plan = QuickstartPlan::for_team(&team);
    assert_eq!(report.all_reduces.len(), plan.bf16_elements.len() + plan.f32_elements.len());
    // The emulator sizes take all three algorithms.
    for algorithm in [Algorithm::LlOneShot, Algorithm::OneShot, Algorithm::TwoShot] {
        assert!(report.all_reduces.iter().any(|r| r.algorithm == algorithm), "{algorithm:?} not exercised");
    }
    assert_eq!(report.ping_pongs.len(), 2);
    for p in &report.ping_pongs {
        assert!(p.one_way_ns.is_some_and(|ns| ns > 0.0), "{p:?}");
    }
    // `run_quickstart` returned: every result it reports was checked against the CPU reference (a mismatch
    // is its error, above). The printed report says where it ran.
    let printed = format!("{}{report}", report.platform);
    assert!(printed.contains("CPU emulator"), "{printed}");
}

#[test]
fn quickstart_in_trace_mode_writes_a_chrome_trace() {
    // What `FERROCOMM_TRACE=1 cargo run --release --example quickstart` does on the emulator: the team
    // traces, and dropping it writes the trace into the trace directory.
    let dir = tempfile::tempdir().unwrap();
    let team = Team::builder()
        .backend(Backend::Emulator)
        .world(2)
        .timeout(STUCK_AFTER)
        .trace(true)
        .trace_dir(dir.path())
        .build()
        .expect("team");
    let plan = QuickstartPlan { bf16_elements: vec![33], f32_elements: vec![], ..QuickstartPlan::for_team(&team) };
    ok(run_quickstart_with(&team, &plan));
    drop(team);
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "one trace file: {files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("ferrocomm-trace-") && name.ends_with(".json"), "{name}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().expect("traceEvents");
    assert!(events.iter().any(|e| e["ph"] == "X" && e["args"]["kind"] == "wait"), "waits are slices");
    assert!(events.iter().any(|e| e["name"] == "process_name" && e["pid"] == 1), "one process per rank");
}

#[test]
fn quickstart_on_three_ranks_and_refusing_one() {
    let team = emulated(3);
    let plan = QuickstartPlan { bf16_elements: vec![33, 700], f32_elements: vec![], ..QuickstartPlan::for_team(&team) };
    ok(run_quickstart_with(&team, &plan));
    let alone = emulated(1);
    let e = run_quickstart(&alone).unwrap_err();
    assert!(e.to_string().contains("at least 2 ranks"), "{e}");
}

#[test]
fn platform_says_why_it_is_the_emulator() {
    let platform = Platform::of(&emulated(2));
    let why = platform.emulator_reason.clone().expect("a reason");
    assert!(why.contains("no GPU was found") || why.contains("requested") || why.contains("emulator"), "{why}");
    assert_eq!(platform.devices.len(), 2);
}

#[test]
fn all_reduce_every_type_op_and_algorithm() {
    let team = emulated(2);
    let mut comm = Communicator::new(&team).unwrap();
    let runs = GraphRuns::EMULATOR;
    for (i, op) in [Op::Sum, Op::Max, Op::Min].into_iter().enumerate() {
        for algorithm in [Algorithm::LlOneShot, Algorithm::OneShot, Algorithm::TwoShot] {
            let n = if algorithm == Algorithm::TwoShot { 1500 } else { 61 };
            let r = ok(all_reduce::<bf16>(&mut comm, n, op, Some(algorithm), runs, i as u64));
            assert_eq!((r.algorithm, r.elements, r.bytes), (algorithm, n, 2 * n));
        }
        ok(all_reduce::<f32>(&mut comm, 77, op, None, runs, 9));
        ok(all_reduce::<ferrocomm_device::f16>(&mut comm, 130, op, None, runs, 10));
    }
}

#[test]
fn ping_pong_both_protocols_and_sizes() {
    let team = emulated(2);
    let mut comm = Communicator::new(&team).unwrap();
    for protocol in [PingProtocol::Ll, PingProtocol::ReleaseAcquire] {
        for bytes in [0, 1, 8, 100, 256] {
            for (a, b) in [(0, 1), (1, 0)] {
                let r = ok(ping_pong(&mut comm, a, b, 20, bytes, protocol));
                assert_eq!((r.bytes, r.ranks, r.iters), (bytes, (a, b), 20));
            }
        }
    }
    assert!(ping_pong(&mut comm, 0, 1, 10, 257, PingProtocol::Ll).is_err());
}

#[test]
fn moe_dispatch_and_combine() {
    for world in [2, 3] {
        let team = emulated(world);
        let mut comm = Communicator::new(&team).unwrap();
        // Small rows keep the emulator quick; the full 7168 runs in the example itself.
        for (tokens, hidden) in [(0, 16), (1, 24), (5, 40), (9, 200)] {
            let r = ok(dispatch_and_combine(&mut comm, tokens, hidden, GraphRuns::EMULATOR, 7));
            let sent: u32 = r.counts.iter().flatten().sum();
            assert_eq!(sent as usize, tokens * world);
        }
    }
}

#[test]
fn tensor_parallel_gemv_verified_and_timed() {
    use ferrocomm_examples::nccl::NcclAllReduce;
    use ferrocomm_examples::tp_decode::{
        ShapeReport, StepVariant, all_reduce_alone, report_csv, report_markdown, step,
    };
    use ferrocomm_kernels::TpVariant;
    let team = emulated(2);
    let mut comm = Communicator::new(&team).unwrap();
    // Variant 1 needs NCCL: on the emulator it is left out, saying why, and asking for it anyway is an error.
    let why = match NcclAllReduce::open(&team) {
        Ok(Err(why)) => why.to_string(),
        other => panic!("NCCL on the emulator: {other:?}"),
    };
    assert!(why.contains("emulator"), "{why}");
    let mut shapes = Vec::new();
    for tokens in [1, 6] {
        let shape = ferrocomm_kernels::TpShape { tokens, hidden: 72, k: 16 };
        let gemv = ok(ferrocomm_examples::tp_decode::gemv(&mut comm, shape, GraphRuns::EMULATOR, 3));
        // Each call below verifies before it returns (a mismatch is its error): `ok` fails the test on it.
        assert!(!gemv.on_gpus, "{}", gemv.line());
        let all_reduce = ok(all_reduce_alone(&mut comm, shape, GraphRuns::EMULATOR, 5));
        let mut steps = Vec::new();
        for variant in [TpVariant::TwoKernels, TpVariant::Fused].map(StepVariant::Library) {
            // Verified twice: one step on its own, and what the timed replays left in a poisoned output.
            steps.push(ok(step(&mut comm, shape, variant, None, GraphRuns::EMULATOR, 4)));
        }
        let refused = step(&mut comm, shape, StepVariant::Nccl, None, GraphRuns::EMULATOR, 4);
        assert!(matches!(refused, Err(ExampleError::BadArgument(_))), "{refused:?}");
        shapes.push(ShapeReport { gemv, all_reduce, steps });
    }
    // The report: a row per shape, no HBM figure off the GPU, no ratio for the variants not measured, and
    // why NCCL's is missing.
    let text = report_markdown("--world 2 --out DIR", "emulated\n", (2, 1), Some(&why), &shapes);
    assert!(text.contains("`cargo run --release --example tp_decode -- --world 2 --out DIR`"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| 1 |") || l.starts_with("| 6 |")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows.iter().all(|r| r.contains("| 72 |") && r.contains("| – |") && r.ends_with("| – |")), "{rows:?}");
    assert!(!text.contains("One GPU") && !text.contains("One rank"), "two ranks, one per GPU: no banner");
    assert!(text.contains("Variant 1 (NCCL) not measured:") && text.contains(&why), "{text}");
    let csv = report_csv(&shapes);
    assert_eq!(csv.lines().count(), 3);
    let first: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    // No HBM figure or peak off the GPU; neither NCCL's step nor the three-kernel one measured.
    assert_eq!(
        (&first[..3], first[4], first[5], first[7], first[8]),
        (&["1", "72", "16"][..], "", "", "", ""),
        "{csv}"
    );
    assert!(!first[9].is_empty() && !first[10].is_empty(), "{csv}");
}

#[test]
fn custom_kernel_through_its_typed_launchers() {
    for world in [2, 3] {
        let team = emulated(world);
        ok(run_custom_kernel(&team, &CustomPlan::for_team(&team)));
        // Fewer elements than threads, and more than one grid-stride pass.
        for len in [5, 200] {
            ok(run_custom_kernel(&team, &CustomPlan { steps: 2, ..CustomPlan::with_len(&team, len) }));
        }
    }
    let team = emulated(2);
    let too_many = CustomPlan { launch: ferrocomm::LaunchConfig::new(65, 32), ..CustomPlan::for_team(&team) };
    let e = run_custom_kernel(&team, &too_many).unwrap_err();
    assert!(e.to_string().contains("at most 64 blocks"), "{e}");
}

#[test]
fn examples_on_gpus() {
    const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_GPUS";
    let present = system::driver().map(|d| d.gpu_count).unwrap_or(0);
    if let Ok(v) = std::env::var(REQUIRE_ENV) {
        let need: usize = v.trim().parse().unwrap_or_else(|_| panic!("{REQUIRE_ENV}={v:?} is not a number of GPUs"));
        assert!(present >= need, "{REQUIRE_ENV}={need} but {present} GPU(s) are usable");
    }
    if present == 0 {
        let why = system::driver().err().map(|e| e.to_string()).unwrap_or_default();
        eprintln!("skipped: no GPU for examples_on_gpus ({why})");
        return;
    }
    // What `cargo run --example quickstart` opens: every GPU, two ranks on a single one.
    let team = Team::builder().backend(Backend::Cuda).world(present.max(2)).build().expect("GPU team");
    let report = ok(run_quickstart(&team));
    eprint!("{}{report}", report.platform);
    assert_eq!(report.platform.backend, Backend::Cuda);
    let custom = ok(run_custom_kernel(&team, &CustomPlan::for_team(&team)));
    eprintln!("custom kernel ring step: {}", custom.step);
    let mut comm = Communicator::new(&team).unwrap();
    for tokens in [1, 128] {
        let r = ok(dispatch_and_combine(&mut comm, tokens, ferrocomm_examples::moe::HIDDEN, GraphRuns::GPU, 3));
        eprintln!("{}", r.lines().join("\n"));
    }
}

#[test]
fn open_team_gives_at_least_two_ranks() {
    // Whatever the machine: every GPU (two ranks on one), or the emulator with two ranks even when
    // FERROCOMM_WORLD asks for one.
    match open_team() {
        Ok(team) => assert!(team.world() >= 2, "{} ranks", team.world()),
        Err(e) if std::env::var("FERROCOMM_BACKEND").is_ok_and(|v| v.trim().eq_ignore_ascii_case("cuda")) => {
            eprintln!("skipped: FERROCOMM_BACKEND=cuda and no GPU team ({e})");
        }
        Err(e) => panic!("no team: {e}"),
    }
}
