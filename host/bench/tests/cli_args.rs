//! `ferrocomm bench`'s arguments: the default sweep, `--quick`, the lists, what is refused and how, and
//! the command line the report records. No GPU needed.

use std::ffi::OsString;

use ferrocomm_bench::backend::{BackendOpener, OpenConfig};
use ferrocomm_bench::cli::{self, CliError, DEFAULT_SIZES, MAX_BYTES_PER_TRIAL, QUICK_SIZES, command_line, parse};
use ferrocomm_bench::ferro::{FerroBackends, LL_LABEL};
use ferrocomm_bench::gpu::driver_present;
use ferrocomm_bench::model::{Dtype, Mode, Operation};
use ferrocomm_bench::sizes::parse_sizes;

fn args(line: &str) -> Result<cli::BenchArgs, String> {
    parse(std::iter::once("bench").chain(line.split_whitespace())).map_err(|e| e.to_string())
}

#[test]
fn the_default_sweep_is_every_op_mode_and_size_with_fewer_iterations_for_big_messages() {
    let a = args("").unwrap();
    let plan = a.plan();
    assert_eq!(plan.ops, Operation::ALL);
    assert_eq!(a.modes(), Mode::DEFAULT);
    assert_eq!(plan.sizes, parse_sizes(DEFAULT_SIZES).unwrap());
    assert_eq!((plan.sizes.len(), plan.sizes[0], *plan.sizes.last().unwrap()), (28, 8, 1 << 30));
    assert_eq!((plan.iters, plan.warmup, plan.trials, plan.graph), (50, 10, 7, true));
    assert_eq!(plan.max_bytes_per_trial, MAX_BYTES_PER_TRIAL);
    assert_eq!(a.queue_depths(), [1, 8, 64]);
    assert_eq!(plan.dtype, Dtype::Bf16);
    // A 1 GiB point runs 4 operations per trial, a 64 MiB one the full 50.
    let iters = |bytes| ferrocomm_bench::stats::iterations_for(bytes, plan.iters, plan.max_bytes_per_trial, 2);
    assert_eq!((iters(1 << 30), iters(64 << 20), iters(8)), (4, 50, 50));
    assert!(a.out.is_none() && a.anchors.is_empty() && a.from.is_none());
}

#[test]
fn quick_and_explicit_values() {
    let q = args("--quick").unwrap();
    let plan = q.plan();
    assert_eq!(plan.sizes, parse_sizes(QUICK_SIZES).unwrap());
    assert_eq!((plan.iters, plan.warmup, plan.trials), (20, 5, 5));
    assert_eq!(q.queue_depths(), [8]);
    let a = args(
        "--quick --iters 7 --trials 3 --warmup 0 --sizes 1KiB..4KiB --dtype f16 --no-graph --gpus 1,0 \
         --queue-depth 4,4,16 --ops all-reduce,allreduce,ping-pong --modes nccl,gpu,nccl --out bench \
         --anchors a.txt --anchors b.txt --sm-budgets 16,8 --utilization",
    )
    .unwrap();
    let plan = a.plan();
    assert_eq!((plan.iters, plan.trials, plan.warmup, plan.graph, plan.dtype), (7, 3, 0, false, Dtype::F16));
    assert_eq!(plan.sizes, [1024, 2048, 4096]);
    assert_eq!(plan.ops, [Operation::AllReduce, Operation::PingPong]);
    assert_eq!(a.modes(), [Mode::Nccl, Mode::Gpu]);
    assert_eq!(a.queue_depths(), [4, 16]);
    assert_eq!(a.gpus, Some(vec![1, 0]));
    assert_eq!(a.anchors.len(), 2);
    assert_eq!(a.sm_budgets, [16, 8]);
    assert!(plan.utilization && !q.plan().utilization);
}

#[test]
fn bad_arguments_say_what_is_wrong() {
    for (line, needle) in [
        ("--queue-depth 0", "0 is not in 1..=65536"),
        ("--queue-depth 65537", "65537 is not in 1..=65536"),
        ("--queue-depth four", "invalid digit"),
        ("--sm-budgets 0", "0 is not in 1..=1024"),
        ("--ops all-reduse", "all-reduce"),
        ("--modes anchor", "gpu"),
        ("--sizes 8..1MiB:1", "whole factor"),
        ("--sizes 1.5MiB", "whole number"),
        ("--dtype f64", "bf16"),
        ("--iters -1", "unexpected argument"),
    ] {
        let e = args(line).unwrap_err();
        assert!(e.contains(needle), "{line}: {e}");
    }
}

#[test]
fn the_recorded_command_names_the_program_not_its_path() {
    let argv = ["/opt/x/.gpu/bin/ferrocomm", "bench", "--out", "bench", "--anchors", "anchors/symm out.txt"];
    assert_eq!(
        command_line(argv.iter().map(OsString::from)),
        "ferrocomm bench --out bench --anchors 'anchors/symm out.txt'"
    );
    assert_eq!(command_line(["ferrocomm", "it's"].iter().map(OsString::from)), "ferrocomm 'it'\\''s'");
    assert_eq!(command_line(std::iter::empty()), "");
}

#[test]
fn the_opener_offers_the_variants_of_gpu_and_nccl() {
    let opener = FerroBackends::new();
    let some = |l: &str| Some(l.to_owned());
    assert_eq!(
        opener.variants(Mode::Gpu),
        [None, some(LL_LABEL), some("ll-one-shot"), some("one-shot"), some("two-shot")]
    );
    assert_eq!(opener.variants(Mode::Nccl), [None, some("eager")]);
    assert_eq!(opener.variants(Mode::Proxy), [None]);
    assert_eq!(opener.variants(Mode::Cpu), [None]);
    let mut opener = FerroBackends::new();
    let config = OpenConfig { variant: Some("fast".into()), ..OpenConfig::default() };
    let e = opener.open(Mode::Cpu, &config).err().unwrap().to_string();
    assert!(e.contains("no variant \"fast\" of cpu"), "{e}");
}

/// Without a driver every mode says why it cannot run — each variant and depth named — and the command
/// fails instead of writing an empty report.
#[test]
fn without_a_gpu_every_mode_says_why() {
    if driver_present() {
        eprintln!("skipped: a CUDA driver is present (the GPU tests in gpu_modes.rs run the modes instead)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let line = format!("--ops ping-pong --sizes 8 --queue-depth 2,3 --out {}", dir.path().join("r").display());
    let e = cli::execute_with(&args(&line).unwrap(), &mut FerroBackends::new(), "bench").unwrap_err();
    let CliError::NothingMeasured { reasons } = &e else { panic!("{e}") };
    for series in ["gpu", "gpu-ll", "proxy qd=2", "proxy qd=3", "cpu", "nccl"] {
        assert!(reasons.contains(&format!("  {series} (ping-pong; all sizes): ")), "{series}: {reasons}");
    }
    assert!(reasons.contains("no CUDA driver"), "{reasons}");
    assert!(!dir.path().join("r").exists());
}
