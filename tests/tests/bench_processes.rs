//! The gpu mode's process-per-GPU series (`gpu-procs`) on the CPU emulator, with real processes: two
//! processes of this test binary, started with the variables torchrun sets, each run `ferrocomm bench`'s
//! library entry point (`cli::execute_with` with the opener `ferrocomm bench` uses) on the team of the two
//! processes. Rank 0 merges a single-process run's data and writes the report; rank 1 measures the same
//! points and writes nothing; modes and operations that run in one process are refused with typed errors.
//! Also, without processes: `--merge` beside `--from`, the headline's gpu-procs columns, the summary line.
//!
//! A rank prints `outcome: ...` and exits; the test reads every rank's output and the files they wrote.
//! Every rank has a deadline: a hang fails the test instead of stalling it.

use std::path::Path;
use std::time::Duration;

use ferrocomm::{Backend as TeamBackend, Team};
use ferrocomm_bench::backend::{Backend, BackendError, BackendOpener, OpenConfig};
use ferrocomm_bench::cli::{self, CliError};
use ferrocomm_bench::crossover;
use ferrocomm_bench::ferro::gpu_mode::{GpuBackend, Variant};
use ferrocomm_bench::ferro::{FerroBackends, PROCS_LABEL};
use ferrocomm_bench::gpu::BuiltinBackends;
use ferrocomm_bench::model::{BenchData, Dtype, Measurement, Meta, Mode, Operation, Series};
use ferrocomm_bench::report::{data, readme::PROCS_METHOD, table};

#[path = "support/local_job.rs"]
mod local_job;
use local_job::RankOutput;

/// The variable that tells a process of this binary to play a rank, and where to write.
const OUT_DIR: &str = "BENCH_PROCS_TEST_OUT";
/// The single-process run's data.json rank 0 merges.
const MERGE: &str = "BENCH_PROCS_TEST_MERGE";
/// Longest a rank may take (the emulator on a loaded machine is slow; a hang is much slower).
const DEADLINE: Duration = Duration::from_secs(300);
/// The sweep both ranks run.
const SWEEP: &str = "bench --ops all-reduce --sizes 256,4KiB --iters 3 --warmup 2 --trials 2";

/// Starts a job of `world` processes of this binary, each playing a rank that writes under `out`.
fn job(world: usize, out: &Path, merge: &Path) -> Vec<RankOutput> {
    let (out, merge) = (out.display().to_string(), merge.display().to_string());
    local_job::job(world, &(0..world).collect::<Vec<_>>(), DEADLINE, |_| {
        vec![(OUT_DIR, out.clone()), (MERGE, merge.clone())]
    })
}

/// Opens the gpu mode on an emulated team of this process, as `FerroBackends` opens it on GPUs.
struct Emulated(&'static Team);

impl BackendOpener for Emulated {
    fn open(&mut self, mode: Mode, config: &OpenConfig) -> Result<Box<dyn Backend>, BackendError> {
        match (mode, config.variant.as_deref()) {
            (Mode::Gpu, None) => Ok(Box::new(GpuBackend::new(self.0, Variant::Main)?)),
            _ => Err(BackendError::NotAvailable { mode, reason: "not emulated".into() }),
        }
    }
}

fn emulated_team() -> &'static Team {
    let team = Team::builder()
        .backend(TeamBackend::Emulator)
        .world(2)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an emulated team");
    Box::leak(Box::new(team))
}

fn args(line: &str) -> cli::BenchArgs {
    cli::parse(line.split_whitespace()).unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn read(path: &Path) -> BenchData {
    data::from_json(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

#[test]
fn two_processes_measure_gpu_procs_and_rank_0_reports_it_beside_the_single_process_run() {
    let dir = tempfile::tempdir().unwrap();
    // The single-process gpu series first, as the same device session would run it.
    let single = dir.path().join("single");
    let line = format!("{SWEEP} --modes gpu --out {}", single.display());
    let one = cli::execute_with(&args(&line), &mut Emulated(emulated_team()), &line).unwrap();
    assert!(one.measurements.iter().all(|m| m.series() == Series::gpu()), "{:#?}", one.measurements);

    let outputs = job(2, dir.path(), &single.join("data.json"));
    for o in &outputs {
        assert!(o.code == Some(0) && o.outcome().starts_with("ok"), "{o:?}");
    }
    // Each rank measured both sizes with positive times; rank 1 said so in one line and wrote nothing.
    for o in &outputs {
        let min_us: f64 = o.outcome().rsplit("min_us=").next().and_then(|v| v.trim().parse().ok()).unwrap();
        assert!(min_us > 0.0 && min_us.is_finite(), "{o:?}");
        assert!(o.outcome().contains("points=2"), "{o:?}");
    }
    assert!(outputs[1].stderr.contains("rank 1 of 2: 2 points measured"), "{:?}", outputs[1]);
    assert!(!outputs[1].stdout.contains("all-reduce:"), "rank 1 printed the summary: {:?}", outputs[1]);
    assert!(!dir.path().join("rank1").exists(), "rank 1 wrote files");

    // Rank 0's report: its gpu-procs points, the merged gpu points, and both in every table.
    let out = dir.path().join("rank0");
    let merged = read(&out.join("data.json"));
    let procs: Vec<&Measurement> = merged.measurements.iter().filter(|m| m.series().is_procs()).collect();
    assert_eq!(procs.iter().map(|m| m.bytes).collect::<Vec<_>>(), [256, 4096], "{:#?}", merged.measurements);
    for m in &procs {
        assert_eq!((m.mode, m.label.as_deref(), m.world, m.dtype), (Mode::Gpu, Some(PROCS_LABEL), 2, Dtype::Bf16));
        assert!(m.min_us > 0.0 && m.min_us <= m.median_us && m.median_us <= m.max_us, "{m:?}");
        assert!(m.graph && m.iterations == 3 && m.trials == 2, "{m:?}");
    }
    assert_eq!(merged.measurements.iter().filter(|m| m.series() == Series::gpu()).count(), 2);
    assert_eq!(merged.series(Operation::AllReduce), [Series::gpu(), Series::gpu_procs()]);
    let notes = merged.meta.notes.join("\n");
    assert!(notes.contains("gpu-procs (ferrocomm gpu, one process per GPU): 2 processes"), "{notes}");
    assert!(notes.contains("Merged: the points of `") && notes.contains("single"), "{notes}");
    assert!(!notes.contains("FERROCOMM_RENDEZVOUS"), "the rendezvous port is not worth recording: {notes}");
    let csv = std::fs::read_to_string(out.join("data.csv")).unwrap();
    assert_eq!(csv.lines().filter(|l| l.starts_with("all-reduce,gpu,procs,2,")).count(), 2, "{csv}");
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    for needle in [
        "| operation | size | gpu | gpu-procs | gpu vs best other | gpu-procs vs gpu |",
        "| 256 B | gpu-procs |",
        "gpu-procs vs gpu (time per operation)",
        PROCS_METHOD.lines().next().unwrap(),
    ] {
        assert!(readme.contains(needle), "{needle:?} missing from the README:\n{readme}");
    }
    let svg = std::fs::read_to_string(out.join("all-reduce-latency.svg")).unwrap();
    assert!(svg.contains("gpu-procs"), "the plot has no gpu-procs line");
}

/// One rank of the job, when this binary runs as one.
#[test]
#[ignore = "the entry point of a spawned rank: run by its parent test"]
fn rank_process() {
    let Ok(out) = std::env::var(OUT_DIR) else {
        eprintln!("skipped: rank_process plays a rank of a job another test of this binary starts");
        return;
    };
    let outcome = match play(Path::new(&out)) {
        Ok(done) => format!("ok {done}"),
        Err(e) => format!("error: {e}"),
    };
    println!("outcome: {outcome}");
    std::process::exit(if outcome.starts_with("ok") { 0 } else { 1 });
}

fn play(out: &Path) -> Result<String, Box<dyn std::error::Error>> {
    let rank: usize = std::env::var("RANK")?.parse()?;
    // What runs in one process is refused, with the fix, before any team is joined.
    for (line, asked) in [
        (format!("{SWEEP} --modes gpu,cpu,nccl"), "--modes cpu,nccl"),
        ("bench --ops put,all-reduce,ping-pong --modes proxy".to_owned(), "--modes proxy --ops put,ping-pong"),
    ] {
        match cli::execute_with(&args(&line), &mut FerroBackends::new(), &line) {
            Err(CliError::OneProcessOnly { what, rank: r, world: 2 }) if what == asked && r == rank => {}
            other => return Err(format!("{line}: expected OneProcessOnly for {asked:?}, got {other:?}").into()),
        }
    }
    let e = cli::execute_with(&args(&format!("{SWEEP} --modes proxy")), &mut FerroBackends::new(), "x").unwrap_err();
    let text = e.to_string();
    if !text.contains("without the launcher") || !text.contains("--merge") {
        return Err(format!("the refusal does not name the fix: {text}").into());
    }
    let mut opener = FerroBackends::new();
    if opener.variants(Mode::Gpu) != [Some(PROCS_LABEL.to_owned())] {
        return Err(format!("variants under a launcher: {:?}", opener.variants(Mode::Gpu)).into());
    }
    for (mode, variant) in [(Mode::Nccl, None), (Mode::Gpu, None), (Mode::Gpu, Some("ll".to_owned()))] {
        let config = OpenConfig { variant, ..OpenConfig::default() };
        match opener.open(mode, &config) {
            Err(BackendError::OneProcessOnly { world: 2, .. }) => {}
            Err(other) => return Err(format!("{mode}: expected OneProcessOnly, got {other}").into()),
            Ok(_) => return Err(format!("{mode} opened under a launcher").into()),
        }
    }

    // The sweep: the same on both ranks but for the folder, which only rank 0 writes.
    let merge = std::env::var(MERGE)?;
    let line = format!("{SWEEP} --merge {merge} --out {}", out.join(format!("rank{rank}")).display());
    let data = cli::execute_with(&args(&line), &mut FerroBackends::new(), &line)?;
    let procs: Vec<&Measurement> = data.measurements.iter().filter(|m| m.series().is_procs()).collect();
    let min_us = procs.iter().map(|m| m.min_us).fold(f64::INFINITY, f64::min);
    Ok(format!("points={} min_us={min_us}", procs.len()))
}

fn point(label: Option<&str>, bytes: u64, us: f64) -> Measurement {
    Measurement {
        op: Operation::AllReduce,
        mode: Mode::Gpu,
        label: label.map(str::to_owned),
        world: 2,
        bytes,
        dtype: Dtype::Bf16,
        iterations: 50,
        trials: 7,
        median_us: us,
        min_us: us,
        max_us: us,
        algbw_gbps: bytes as f64 / us / 1e3,
        busbw_gbps: bytes as f64 / us / 1e3,
        host_cpu_us_per_op: Some(0.04),
        sms_used: Some(1),
        queue_depth: None,
        graph: true,
        intra_gpu: false,
        isolated: None,
        utilization: None,
    }
}

fn run_of(label: Option<&str>, points: &[(u64, f64)], command: &str) -> BenchData {
    BenchData {
        meta: Meta {
            tool: "ferrocomm-bench test".into(),
            created_unix_s: 1_796_041_800,
            command: command.into(),
            devices: vec!["0: NVIDIA H200".into(), "1: NVIDIA H200".into()],
            driver: Some("13.0".into()),
            notes: vec![format!("Environment: `FERROCOMM_X={command}`.")],
            ..Meta::default()
        },
        measurements: points.iter().map(|&(b, us)| point(label, b, us)).collect(),
        skipped: Vec::new(),
    }
}

#[test]
fn merge_puts_gpu_procs_beside_gpu_in_the_headline_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let single = dir.path().join("single.json");
    let procs = dir.path().join("procs.json");
    let gpu = run_of(None, &[(8192, 2.77), (65536, 2.97), (16 << 20, 55.12)], "ferrocomm bench --modes gpu");
    let by_procs = run_of(Some(PROCS_LABEL), &[(8192, 2.80), (65536, 2.96), (16 << 20, 56.50)], "ferrocomm bench");
    std::fs::write(&single, data::to_json(&gpu).unwrap()).unwrap();
    std::fs::write(&procs, data::to_json(&by_procs).unwrap()).unwrap();

    let out = dir.path().join("report");
    let line = format!("bench --from {} --merge {} --out {}", procs.display(), single.display(), out.display());
    let merged = cli::execute_with(&args(&line), &mut BuiltinBackends, &line).unwrap();
    assert_eq!(merged.measurements.len(), 6);
    assert_eq!(merged.meta.command, "ferrocomm bench", "the run's own command stays");
    assert!(merged.meta.notes.iter().any(|n| n.starts_with("Environment of `") && n.contains("--modes gpu")));

    let (headers, rows) = table::headline(&merged, table::Figure::BackToBack);
    assert_eq!(headers, ["operation", "size", "gpu", "gpu-procs", "gpu vs best other", "gpu-procs vs gpu"]);
    assert_eq!(rows[0], ["all-reduce", "8 KiB", "2.77 µs", "2.80 µs", "–", "+1.1 %"]);
    assert_eq!(rows[1][5], "−0.3 %");
    assert!(rows[2][3].contains("GB/s") && rows[2][5] == "+2.5 %", "{:?}", rows[2]);
    let line = crossover::procs_vs_gpu(&merged, Operation::AllReduce).unwrap();
    assert_eq!(
        line,
        "gpu-procs vs gpu (time per operation): −0.3 % to +2.5 % over the sizes both measured (8 KiB – 16 MiB), \
         the largest gap +2.5 % at 16 MiB"
    );
    let summary = crossover::summary(&merged);
    assert!(summary[0].1.contains(&line), "{summary:?}");
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(readme.contains(&line) && readme.contains(PROCS_METHOD), "{readme}");
    assert!(readme.contains("*gpu-procs vs gpu*"), "{readme}");

    // A point both files have is refused, naming it.
    let line = format!("bench --from {} --merge {}", procs.display(), procs.display());
    let e = cli::execute_with(&args(&line), &mut BuiltinBackends, &line).unwrap_err();
    assert!(matches!(&e, CliError::MergeOverlap { bytes: 8192, .. }), "{e}");
    assert!(e.to_string().contains("gpu-procs all-reduce at 8 KiB"), "{e}");
    // A file that is not a run's data says so.
    let line = format!("bench --from {} --merge {}", procs.display(), dir.path().join("none.json").display());
    let e = cli::execute_with(&args(&line), &mut BuiltinBackends, &line).unwrap_err();
    assert!(matches!(e, CliError::Data { .. }), "{e}");
}

#[test]
fn without_a_launcher_gpu_procs_is_not_available_and_needs_a_process_team() {
    let config = OpenConfig { variant: Some(PROCS_LABEL.to_owned()), ..OpenConfig::default() };
    let e = FerroBackends::new().open(Mode::Gpu, &config).err().unwrap();
    assert!(matches!(e, BackendError::NotAvailable { .. }) && e.to_string().contains("ferrocomm launch"), "{e}");
    let e = GpuBackend::new(emulated_team(), Variant::Procs).err().unwrap();
    assert!(e.to_string().contains("spans processes"), "{e}");
    assert_eq!(FerroBackends::new().variants(Mode::Gpu).len(), 5, "gpu, gpu-ll and the three all-reduce algorithms");
}
