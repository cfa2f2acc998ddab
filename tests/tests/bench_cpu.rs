//! `ferrocomm bench` without a GPU: argument parsing, statistics, sizes, bandwidth formulas, the crossover
//! summary, every writer, and the whole driver end to end with a modelled backend standing in for GPUs.

use std::path::Path;

use ferrocomm_bench::backend::{Backend, BackendError, BackendOpener, OpenConfig, Request, Timing};
use ferrocomm_bench::bandwidth::{bus_factor, busbw_gbps};
use ferrocomm_bench::cli::{self, BenchArgs, CliError};
use ferrocomm_bench::crossover;
use ferrocomm_bench::gpu::BuiltinBackends;
use ferrocomm_bench::model::{BenchData, Dtype, Measurement, Meta, Mode, Operation, Series, Skipped};
use ferrocomm_bench::report::{self, data, plot};
use ferrocomm_bench::sizes::{format_size, parse_size, parse_sizes};
use ferrocomm_bench::stats::Summary;

fn args(line: &str) -> Result<BenchArgs, cli::ArgsError> {
    cli::parse(std::iter::once("bench").chain(line.split_whitespace()))
}

#[test]
fn arguments_defaults_and_quick() {
    let a = args("").unwrap();
    let plan = a.plan();
    assert_eq!(plan.ops, Operation::ALL.to_vec());
    assert_eq!(plan.sizes.len(), 28);
    assert_eq!((plan.sizes[0], plan.sizes[27]), (8, 1 << 30));
    assert_eq!((plan.iters, plan.warmup, plan.trials, plan.graph, plan.dtype), (50, 10, 7, true, Dtype::Bf16));
    assert_eq!(a.modes(), vec![Mode::Gpu, Mode::Proxy, Mode::Cpu, Mode::Nccl]);
    assert_eq!(a.queue_depths(), vec![1, 8, 64]);
    assert_eq!((a.out.clone(), a.from.clone(), a.anchors.len()), (None, None, 0));

    let q = args("--quick").unwrap();
    let plan = q.plan();
    assert_eq!((plan.iters, plan.warmup, plan.trials), (20, 5, 5));
    assert!(plan.sizes.contains(&65536) && plan.sizes.contains(&(256 << 20)) && plan.sizes.len() < 12);
    assert_eq!(q.queue_depths(), vec![8]);
    // What is given explicitly wins over --quick.
    let plan = args("--quick --iters 7 --sizes 1KiB").unwrap().plan();
    assert_eq!((plan.iters, plan.sizes), (7, vec![1024]));
}

#[test]
fn arguments_lists_and_files() {
    let a = args(
        "--ops all-reduce,pingpong,all-reduce --modes nccl,cpu --sizes 8B..1KiB:4,64KiB --queue-depth 1,8 \
         --iters 50 --warmup 3 --trials 7 --dtype f32 --gpus 1,0 --no-graph --anchors symm.txt --anchors a2a.txt \
         --anchor-world 2 --out report --from old.json",
    )
    .unwrap();
    let plan = a.plan();
    assert_eq!(plan.ops, vec![Operation::AllReduce, Operation::PingPong]);
    assert_eq!(plan.sizes, vec![8, 32, 128, 512, 65536]);
    assert_eq!((plan.iters, plan.warmup, plan.trials, plan.graph, plan.dtype), (50, 3, 7, false, Dtype::F32));
    assert_eq!(a.modes(), vec![Mode::Nccl, Mode::Cpu]);
    assert_eq!(a.queue_depths(), vec![1, 8]);
    assert_eq!(a.gpus, Some(vec![1, 0]));
    assert_eq!(a.anchors, vec![Path::new("symm.txt"), Path::new("a2a.txt")]);
    assert_eq!(
        (a.anchor_world, a.out.as_deref(), a.from.as_deref()),
        (Some(2), Some(Path::new("report")), Some(Path::new("old.json")))
    );
    let a = args("--ops put,put-bandwidth,all-gather,all-to-all,alltoall").unwrap();
    assert_eq!(a.plan().ops, vec![Operation::PutBandwidth, Operation::AllGather, Operation::AllToAll]);
}

#[test]
fn arguments_errors_say_what_is_wrong() {
    let e = args("--ops broadcast").unwrap_err().to_string();
    assert!(e.contains("broadcast") && e.contains("all-reduce"), "{e}");
    let e = args("--sizes 1MiB..8").unwrap_err().to_string();
    assert!(e.contains("runs backwards"), "{e}");
    let e = args("--sizes 64QiB").unwrap_err().to_string();
    assert!(e.contains("KiB"), "{e}");
    assert!(args("--modes anchor").is_err());
    assert!(args("--iters many").is_err());
    assert!(args("--dtype f64").is_err());
    // --help is not an error for `run`.
    assert!(cli::run(["bench", "--help"]).is_ok());
    assert!(matches!(cli::run(["bench", "--bogus"]), Err(CliError::Args(_))));
}

#[test]
fn statistics_sizes_and_bandwidth() {
    let s = Summary::of(&[3.0, 1.0, 100.0, 2.0, 2.5]).unwrap();
    assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 100.0));
    assert!(Summary::of(&[]).is_err());

    assert_eq!(parse_size("64KiB"), Ok(65536));
    assert_eq!(parse_size("1GiB"), Ok(1 << 30));
    assert_eq!(parse_sizes("8B..1GiB").unwrap().len(), 28);
    assert!(parse_size("0").is_err());
    assert_eq!(format_size(14336), "14 KiB");

    assert_eq!(bus_factor(Operation::AllReduce, 4), 1.5);
    assert_eq!(bus_factor(Operation::AllGather, 4), 0.75);
    assert_eq!(bus_factor(Operation::AllToAll, 2), 0.5);
    assert_eq!(bus_factor(Operation::PutBandwidth, 2), 1.0);
    // 1 GB all-reduce on 8 GPUs in 5 ms: 200 GB/s algbw, 350 GB/s busbw.
    assert!((busbw_gbps(Operation::AllReduce, 8, 1_000_000_000, 5000.0) - 350.0).abs() < 1e-9);
}

fn point(op: Operation, mode: Mode, bytes: u64, us: f64) -> Measurement {
    let world = 2;
    Measurement {
        op,
        mode,
        label: (mode == Mode::Anchor).then(|| "torch symm_mem two-shot, graph".to_owned()),
        world,
        bytes,
        dtype: if op.is_collective() { Dtype::Bf16 } else { Dtype::U8 },
        iterations: 100,
        trials: 10,
        median_us: us,
        min_us: us * 0.95,
        max_us: us * 1.2,
        algbw_gbps: bytes as f64 / us / 1e3,
        busbw_gbps: busbw_gbps(op, world, bytes, us),
        host_cpu_us_per_op: (mode != Mode::Anchor).then_some(0.5),
        sms_used: (mode == Mode::Gpu).then_some(16),
        queue_depth: (mode == Mode::Proxy).then_some(16),
        graph: mode != Mode::Cpu,
        intra_gpu: false,
        isolated: None,
        utilization: None,
    }
}

/// gpu: 2 µs + 300 GB/s, nccl: 10 µs + 400 GB/s (crossover between 8 and 16 MiB), cpu: 8 µs + 390 GB/s,
/// plus an anchor at three sizes.
fn synthetic() -> BenchData {
    let mut data = BenchData {
        meta: Meta {
            tool: "ferrocomm-bench test".into(),
            created_unix_s: 1_796_041_800,
            command: "ferrocomm bench --quick".into(),
            devices: vec!["0: NVIDIA H200".into(), "1: NVIDIA H200".into()],
            driver: Some("13.0".into()),
            nccl: Some("2.28.3".into()),
            notes: vec!["Environment: `NCCL_NVLS_ENABLE=0`.".into()],
        },
        ..BenchData::default()
    };
    for shift in 3..=30 {
        let b = 1u64 << shift;
        for (op, mode, a, bw) in [
            (Operation::AllReduce, Mode::Gpu, 2.0, 300e3),
            (Operation::AllReduce, Mode::Nccl, 10.0, 400e3),
            (Operation::PingPong, Mode::Gpu, 1.2, 300e3),
            (Operation::PingPong, Mode::Cpu, 8.1, 390e3),
        ] {
            data.measurements.push(point(op, mode, b, a + b as f64 / bw));
        }
    }
    for (b, us) in [(8192, 6.42), (65536, 7.56), (256 << 20, 814.4)] {
        data.measurements.push(point(Operation::AllReduce, Mode::Anchor, b, us));
    }
    data.skipped.push(Skipped {
        op: Operation::AllReduce,
        mode: Mode::Cpu,
        queue_depth: None,
        label: None,
        bytes: None,
        reason: "a CPU-initiated all-reduce needs a reduction kernel".into(),
    });
    data
}

#[test]
fn crossover_summary_from_data() {
    let data = synthetic();
    let summary = crossover::summary(&data);
    let ops: Vec<Operation> = summary.iter().map(|(op, _)| *op).collect();
    assert_eq!(ops, vec![Operation::PingPong, Operation::AllReduce]);
    let ping = &summary[0].1;
    // 1.2 µs + 300 GB/s against 8.1 µs + 390 GB/s: equal at 8.97 MB.
    assert_eq!(ping[0], "fastest: gpu from 8 B to 8 MiB, cpu from 16 MiB to 1 GiB");
    // At 8 MiB the two medians are within 2 % of each other: a tie, not a win.
    assert!(
        ping[1].starts_with(
            "gpu beats cpu from 8 B to 4 MiB (up to 6.7× at 8 B); gpu and cpu tie at 8 MiB; cpu beats gpu from 16 MiB"
        ),
        "{}",
        ping[1]
    );
    let reduce = &summary[1].1;
    assert_eq!(reduce[0], "fastest: gpu from 8 B to 8 MiB, nccl from 16 MiB to 1 GiB");
    assert!(reduce[1].contains("gpu beats nccl from 8 B to 8 MiB"), "{}", reduce[1]);
    assert!(reduce[1].contains("nccl beats gpu from 16 MiB to 1 GiB"), "{}", reduce[1]);
    assert!(reduce[1].ends_with("the crossover lies between 8 MiB and 16 MiB"), "{}", reduce[1]);
    // gpu vs the anchor: faster at 8 KiB and 64 KiB, slower at 256 MiB.
    assert!(reduce[2].starts_with("gpu beats torch symm_mem two-shot, graph from 8 KiB to 64 KiB"), "{}", reduce[2]);
    let gpu = Series { mode: Mode::Gpu, label: None, queue_depth: None };
    let nccl = Series { mode: Mode::Nccl, label: None, queue_depth: None };
    let c = crossover::compare(&data, Operation::AllReduce, &nccl, &gpu).unwrap();
    assert_eq!(c.spans[0].winner, Some(gpu));
}

#[test]
fn json_round_trip_and_csv() {
    let data = synthetic();
    let json = data::to_json(&data).unwrap();
    assert_eq!(data::from_json(&json).unwrap(), data);
    assert!(json.contains("\"op\": \"all-reduce\"") && json.contains("\"mode\": \"anchor\""));

    let csv = data::to_csv(&data);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], data::CSV_HEADER.join(","));
    assert!(lines[0].starts_with("op,mode,label,world,bytes,dtype,iterations,trials,median_us"));
    assert_eq!(lines.len(), 1 + data.measurements.len());
    let first: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(first.len(), data::CSV_HEADER.len());
    let m = &data.measurements[0];
    assert_eq!((first[0], first[1], first[2], first[4]), ("all-reduce", "gpu", "", "8"));
    assert_eq!(first[8].parse::<f64>().unwrap(), m.median_us);
    assert_eq!((first[14], first[15], first[16]), ("16", "", "true"));
    // A label with a comma is quoted; the row still has every column.
    let anchor = lines.iter().find(|l| l.contains(",anchor,")).unwrap();
    assert!(anchor.contains(",\"torch symm_mem two-shot, graph\","), "{anchor}");
}

#[test]
fn svg_plots_are_well_formed_with_one_line_per_series() {
    let data = synthetic();
    let dir = tempfile::tempdir().unwrap();
    for op in data.operations() {
        let colors = plot::series_colors(&data, op);
        for kind in [plot::PlotKind::Latency, plot::PlotKind::Bandwidth] {
            let path = dir.path().join(kind.file_name(op));
            assert!(plot::plot(&data, op, kind, &path).unwrap());
            let text = std::fs::read_to_string(&path).unwrap();
            let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(doc.root_element().tag_name().name(), "svg");
            let lines: Vec<roxmltree::Node> = doc
                .descendants()
                .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke-width") == Some("2"))
                .collect();
            assert_eq!(lines.len(), colors.len(), "{}", path.display());
            for (series, color) in &colors {
                let hex = plot::hex(*color);
                let n = lines.iter().filter(|l| l.attribute("stroke") == Some(hex.as_str())).count();
                assert_eq!(n, 1, "{series} ({hex}) in {}", path.display());
                let points = data.points(op, series).len();
                let drawn = lines.iter().find(|l| l.attribute("stroke") == Some(hex.as_str())).unwrap();
                assert_eq!(drawn.attribute("points").unwrap().split_whitespace().count(), points);
                let legend = doc
                    .descendants()
                    .filter(|n| n.has_tag_name("text"))
                    .any(|n| n.text().map(str::trim) == Some(series.to_string().as_str()));
                assert!(legend, "no legend entry for {series} in {}", path.display());
            }
        }
    }
    // Distinct colours within a plot.
    let colors = plot::series_colors(&data, Operation::AllReduce);
    assert_eq!(colors.len(), 3);
    assert!(colors[0].1 != colors[1].1 && colors[1].1 != colors[2].1 && colors[0].1 != colors[2].1);
}

#[test]
fn report_folder_and_readme() {
    let data = synthetic();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench");
    let files = report::write_report(&out, &data).unwrap();
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for name in [
        "data.json",
        "data.csv",
        "README.md",
        "ping-pong-latency.svg",
        "ping-pong-bandwidth.svg",
        "all-reduce-latency.svg",
        "all-reduce-bandwidth.svg",
        "tuning.txt",
    ] {
        assert!(names.contains(&name.to_owned()) && out.join(name).is_file(), "{name} missing from {names:?}");
    }
    // No isolated figures in this data, so no isolated plots; no utilization, so no utilization plots.
    assert_eq!(names.len(), 8, "{names:?}");
    let tuning = std::fs::read_to_string(out.join("tuning.txt")).unwrap();
    assert!(tuning.contains("all-reduce:") && !tuning.contains("one_shot_max_bytes"), "{tuning}");
    let json = std::fs::read_to_string(out.join("data.json")).unwrap();
    assert_eq!(data::from_json(&json).unwrap(), data);

    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        readme.contains(
            "Measured 2026-11-30 12:30 UTC on 0: NVIDIA H200, 1: NVIDIA H200; CUDA driver 13.0; NCCL 2.28.3."
        )
    );
    assert!(readme.contains("## Headline"));
    assert!(readme.contains("| operation | size | gpu | cpu | nccl | best anchor | gpu vs best other |"), "{readme}");
    // The headline row for a 64 KiB all-reduce: gpu's, nccl's and the anchor's medians, and gpu's lead.
    let gpu64 = 2.0 + 65536.0 / 300e3;
    let row = readme.lines().find(|l| l.starts_with("| all-reduce | 64 KiB |")).unwrap();
    assert!(row.contains(&format!("{gpu64:.2} µs")), "{row}");
    assert!(row.contains("7.56 µs (torch symm_mem two-shot, graph)"), "{row}");
    assert!(row.contains(&format!("{:.2}× (torch symm_mem two-shot, graph)", 7.56 / gpu64)), "{row}");
    // The 256 MiB row shows bus bandwidth too.
    let row = readme.lines().find(|l| l.starts_with("| all-reduce | 256 MiB |")).unwrap();
    assert!(row.contains("GB/s"), "{row}");
    assert!(readme.contains("## Who wins where") && readme.contains("the crossover lies between 8 MiB and 16 MiB"));
    assert!(readme.contains("![all-reduce time per operation, back to back](all-reduce-latency.svg)"));
    assert!(readme.contains("![ping-pong bus bandwidth](ping-pong-bandwidth.svg)"));
    // Each operation's table holds every point.
    assert!(readme.contains("| size | series | median µs | min µs | max µs |"));
    let reduce_rows = readme.lines().filter(|l| l.starts_with("| 1 GiB | ")).count();
    assert_eq!(reduce_rows, 4); // all-reduce gpu + nccl, ping-pong gpu + cpu
    assert!(readme.contains("| all-reduce | cpu | all | a CPU-initiated all-reduce needs a reduction kernel |"));
    assert!(readme.contains("## Method") && readme.contains("NCCL_NVLS_ENABLE=0"));
    assert!(readme.contains("[data.json](data.json)") && readme.contains("[data.csv](data.csv)"));
}

/// A backend standing in for GPUs: time = latency + bytes / bandwidth, exact.
struct Modelled {
    mode: Mode,
    latency_us: f64,
    bytes_per_us: f64,
    depth: Option<u32>,
}

impl Backend for Modelled {
    fn mode(&self) -> Mode {
        self.mode
    }
    fn queue_depth(&self) -> Option<u32> {
        self.depth
    }
    fn world(&self) -> usize {
        2
    }
    fn supports(&self, _: Operation) -> Result<(), String> {
        Ok(())
    }
    fn verify(&mut self, _: Operation, _: Dtype) -> Result<(), BackendError> {
        Ok(())
    }
    fn run(&mut self, r: &Request) -> Result<Timing, BackendError> {
        let depth_penalty = self.depth.map_or(0.0, |d| 4.0 / f64::from(d));
        let us = self.latency_us + depth_penalty + r.bytes as f64 / self.bytes_per_us;
        Ok(Timing { us_per_op: us, graph: r.graph, sms_used: Some(8), wait_cpu: std::time::Duration::ZERO })
    }
    fn devices(&self) -> Vec<String> {
        vec!["0: model".into(), "1: model".into()]
    }
}

struct ModelOpener;

impl BackendOpener for ModelOpener {
    fn open(&mut self, mode: Mode, config: &OpenConfig) -> Result<Box<dyn Backend>, BackendError> {
        let (latency_us, bytes_per_us) = match mode {
            Mode::Gpu => (2.0, 300e3),
            Mode::Proxy => (4.0, 380e3),
            Mode::Nccl => (10.0, 400e3),
            _ => return Err(BackendError::NotAvailable { mode, reason: "not modelled".into() }),
        };
        let depth = (mode == Mode::Proxy).then_some(config.queue_depth);
        Ok(Box::new(Modelled { mode, latency_us, bytes_per_us, depth }))
    }
}

#[test]
fn driver_end_to_end_with_a_modelled_backend() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let symm = dir.path().join("symm.txt");
    std::fs::write(&symm, "allreduce bf16 65536 B: nccl=10.44us busbw=6.3GB/s  symm_one_shot=7.04us busbw=9.3GB/s\n")
        .unwrap();
    let line = format!(
        "--ops all-reduce,ping-pong --modes gpu,proxy,cpu,nccl --queue-depth 1,16 --sizes 8B..1MiB:8 \
         --iters 4 --warmup 2 --trials 3 --anchors {} --out {}",
        symm.display(),
        out.display()
    );
    let a = args(&line).unwrap();
    let data = cli::execute_with(&a, &mut ModelOpener, "ferrocomm bench (test)").unwrap();

    // 2 ops × 7 sizes (8 B to 256 KiB, ×8, and the anchor's 64 KiB) × (gpu, proxy qd=1, proxy qd=16, nccl)
    // + 2 anchor rows.
    assert_eq!(data.measurements.len(), 2 * 7 * 4 + 2);
    assert_eq!(data.meta.devices, vec!["0: model", "1: model"]);
    let cpu_skips: Vec<&Skipped> = data.skipped.iter().filter(|s| s.mode == Mode::Cpu).collect();
    assert_eq!(cpu_skips.len(), 2);
    assert!(cpu_skips[0].reason.contains("not modelled"));
    let qd1 = data.measurements.iter().find(|m| m.queue_depth == Some(1) && m.bytes == 8).unwrap();
    let qd16 = data.measurements.iter().find(|m| m.queue_depth == Some(16) && m.bytes == 8).unwrap();
    assert!(qd1.median_us > qd16.median_us);
    let gpu = data
        .measurements
        .iter()
        .find(|m| m.mode == Mode::Gpu && m.op == Operation::AllReduce && m.bytes == 512)
        .unwrap();
    assert!((gpu.median_us - (2.0 + 512.0 / 300e3)).abs() < 1e-9);
    assert_eq!((gpu.iterations, gpu.trials, gpu.graph, gpu.sms_used), (4, 3, true, Some(8)));

    let saved = data::from_json(&std::fs::read_to_string(out.join("data.json")).unwrap()).unwrap();
    assert_eq!(saved, data);
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        readme.contains("proxy qd=1") && readme.contains("proxy qd=16") && readme.contains("torch symm_mem one-shot")
    );

    // --from redraws the same report without measuring (the opener is never asked).
    let again = dir.path().join("again");
    let a = args(&format!("--from {} --out {}", out.join("data.json").display(), again.display())).unwrap();
    let redrawn = cli::execute_with(&a, &mut BuiltinBackends, "unused").unwrap();
    assert_eq!(redrawn, data);
    assert_eq!(std::fs::read_to_string(again.join("README.md")).unwrap(), readme);
}

#[test]
fn builtin_modes_without_a_driver_say_so() {
    if ferrocomm_bench::gpu::driver_present() {
        eprintln!("skipped: a CUDA driver is present; the GPU tests of ferrocomm-bench cover the built-in modes");
        return;
    }
    let config = OpenConfig::default();
    for mode in [Mode::Cpu, Mode::Nccl] {
        let e = BuiltinBackends.open(mode, &config).err().unwrap();
        assert!(matches!(e, BackendError::NoDriver), "{mode}: {e}");
        assert!(e.to_string().contains("libcuda"), "{e}");
    }
    let e = BuiltinBackends.open(Mode::Gpu, &config).err().unwrap();
    assert!(matches!(e, BackendError::NotAvailable { .. }), "{e}");
    // With nothing measurable and no anchors, the command fails and says why, mode by mode.
    let e = cli::execute_with(&args("--quick --modes cpu,nccl").unwrap(), &mut BuiltinBackends, "t").unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, CliError::NothingMeasured { .. })
            && text.contains("cpu (ping-pong, put, all-reduce, all-gather, all-to-all; all sizes): no CUDA driver"),
        "{text}"
    );
}
