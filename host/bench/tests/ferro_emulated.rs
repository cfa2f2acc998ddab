//! The `gpu`, `proxy` and `nvshmem` modes on the CPU emulator: the same kernels, the same backends, the same
//! checks against the CPU references, and the sweep end to end into a report — everything but the GPUs'
//! speed (and, for `nvshmem`, NVSHMEM itself: the emulator runs the kernels' ordinary lowering).
//! The proxy is served by host copies instead of copy engines; its rings, descriptors, signals and queue
//! depths are the GPU path's.

use std::time::Duration;

use ferrocomm::{Backend as TeamBackend, Team, TraceWhat};
use ferrocomm_bench::backend::{Backend, BackendError, BackendOpener, OpenConfig, Request};
use ferrocomm_bench::ferro::gpu_mode::{GpuBackend, PING_MAX_BYTES, Variant, label_algorithm};
use ferrocomm_bench::ferro::nvshmem_mode::NvshmemBackend;
use ferrocomm_bench::ferro::proxy_mode::ProxyBackend;
use ferrocomm_bench::ferro::{FerroBackends, LL_LABEL, grid};
use ferrocomm_bench::method::{Plan, measure};
use ferrocomm_bench::model::{BenchData, Dtype, Mode, Operation};
use ferrocomm_kernels::{CommError, Communicator, PingProtocol, Tuning};

/// An emulated team of two ranks for the rest of the process (the backends borrow it for `'static`).
fn team() -> &'static Team {
    let team = Team::builder()
        .backend(TeamBackend::Emulator)
        .world(2)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an emulated team");
    Box::leak(Box::new(team))
}

fn request(op: Operation, bytes: u64, iters: u64) -> Request {
    let dtype = if op.is_collective() { Dtype::Bf16 } else { Dtype::U8 };
    Request { op, bytes, dtype, iters, graph: true }
}

#[test]
fn gpu_mode_checks_and_times_every_operation() {
    let mut gpu = GpuBackend::new(team(), Variant::Main).unwrap();
    assert_eq!((gpu.mode(), gpu.label(), gpu.world()), (Mode::Gpu, None, 2));
    for op in Operation::ALL {
        assert!(gpu.measures(op) && gpu.supports(op).is_ok() && gpu.size_limit(op).is_none());
        let dtype = if op.is_collective() { Dtype::Bf16 } else { Dtype::U8 };
        gpu.verify(op, dtype).unwrap_or_else(|e| panic!("{op}: {e}"));
    }
    assert!(matches!(gpu.verify(Operation::AllReduce, Dtype::U8), Err(BackendError::Unsupported { .. })));
    // The ping-pong kernel up to its payload limit, graphs of two puts above it, graphs for the rest.
    let cases = [
        (Operation::PingPong, 8, false),
        (Operation::PingPong, 1000, true),
        (Operation::PutBandwidth, 4096, true),
        (Operation::AllReduce, 512, true),
        (Operation::AllReduce, 4000, true),
        (Operation::AllGather, 1024, true),
        (Operation::AllToAll, 1024, true),
    ];
    for (op, bytes, graph) in cases {
        for _ in 0..2 {
            let t = gpu.run(&request(op, bytes, 3)).unwrap_or_else(|e| panic!("{op} {bytes}: {e}"));
            assert!(t.us_per_op.is_finite() && t.us_per_op > 0.0, "{op} {bytes}: {t:?}");
            assert_eq!(t.graph, graph, "{op} {bytes}");
            assert!(t.sms_used.is_some_and(|s| s >= 1), "{op} {bytes}: {t:?}");
        }
    }
    // --no-graph: the same calls launched one by one, between the same stamps.
    for (op, bytes) in [(Operation::PutBandwidth, 4096), (Operation::AllReduce, 512), (Operation::PingPong, 1000)] {
        let t = gpu.run(&Request { graph: false, ..request(op, bytes, 3) }).unwrap();
        assert!(!t.graph && t.us_per_op > 0.0 && t.wait_cpu.is_zero(), "{op}: {t:?}");
    }
    assert!(matches!(
        gpu.run(&Request { dtype: Dtype::U8, ..request(Operation::AllReduce, 64, 2) }),
        Err(BackendError::Unsupported { .. })
    ));
    assert!(gpu.notes().iter().any(|n| n.contains("%globaltimer stamp kernels")));
}

#[test]
fn nvshmem_mode_checks_and_times_every_operation_on_one_and_two_pes() {
    let one = Box::leak(Box::new(Team::builder().backend(TeamBackend::Emulator).world(1).build().unwrap()));
    for team in [&*one, team()] {
        let mut nvshmem = NvshmemBackend::new(team).unwrap();
        assert_eq!((nvshmem.mode(), nvshmem.label(), nvshmem.world()), (Mode::Nvshmem, None, team.world()));
        for op in Operation::ALL {
            let dtype = if op.is_collective() { Dtype::Bf16 } else { Dtype::U8 };
            nvshmem.verify(op, dtype).unwrap_or_else(|e| panic!("{op} on {} PE(s): {e}", team.world()));
        }
        nvshmem.verify(Operation::AllReduce, Dtype::F32).unwrap();
        assert!(matches!(nvshmem.verify(Operation::AllReduce, Dtype::U8), Err(BackendError::Unsupported { .. })));
        // Graphs of launches (the ping-pong: one launch of the trial's round trips), and --no-graph.
        for op in Operation::ALL {
            for graph in [true, false] {
                let r = Request { graph, ..request(op, 3000, 3) };
                let t = nvshmem.run(&r).unwrap_or_else(|e| panic!("{op} graph {graph}: {e}"));
                assert!(t.us_per_op.is_finite() && t.us_per_op > 0.0 && t.graph == graph, "{op}: {t:?}");
                assert!(t.sms_used.is_some_and(|s| s >= 1), "{op}: {t:?}");
            }
        }
        let note = nvshmem.notes().join(" ");
        assert!(note.contains("nvshmemx_putmem_signal_nbi_block") && note.contains("a warp up to 512 B"), "{note}");
        assert_eq!(note.contains("one PE in this process"), team.world() == 1, "{note}");
    }
}

#[test]
fn gpu_mode_times_isolated_operations_one_by_one() {
    let mut gpu = GpuBackend::new(team(), Variant::Main).unwrap();
    // The emulated team's ranks are not CUDA devices sharing a GPU.
    assert!(!gpu.intra_gpu());
    for (op, bytes) in [(Operation::PutBandwidth, 4099), (Operation::AllReduce, 4000), (Operation::AllGather, 1024)] {
        let times = gpu.isolated(&request(op, bytes, 4)).unwrap().unwrap_or_else(|| panic!("{op}: no isolated series"));
        assert_eq!(times.len(), 4, "{op}: one time per operation");
        assert!(times.iter().all(|t| t.is_finite() && *t > 0.0), "{op}: {times:?}");
        // The back-to-back graph is recaptured after the isolated one, on fresh buffers.
        assert!(gpu.run(&request(op, bytes, 2)).unwrap().us_per_op > 0.0);
    }
    // A ping-pong is a latency already: no isolated series.
    assert_eq!(gpu.isolated(&request(Operation::PingPong, 8, 4)).unwrap(), None);
}

#[test]
fn gpu_ll_variant_is_the_ll_ping_pong_only() {
    let mut ll = GpuBackend::new(team(), Variant::Ll).unwrap();
    assert_eq!(ll.label().as_deref(), Some(LL_LABEL));
    assert!(ll.measures(Operation::PingPong) && !ll.measures(Operation::AllReduce));
    assert_eq!(ll.size_limit(Operation::PingPong).map(|l| l.0), Some(PING_MAX_BYTES as u64));
    ll.verify(Operation::PingPong, Dtype::U8).unwrap();
    let t = ll.run(&request(Operation::PingPong, 64, 4)).unwrap();
    assert!(t.us_per_op > 0.0 && !t.graph);
    assert!(matches!(ll.run(&request(Operation::PingPong, 512, 2)), Err(BackendError::Unsupported { .. })));
    assert!(matches!(ll.verify(Operation::AllGather, Dtype::Bf16), Err(BackendError::Unsupported { .. })));
}

#[test]
fn ping_limit_and_grids_match_the_library() {
    let team = team();
    let mut comm = Communicator::new(team).unwrap();
    comm.ping_pong(0, 1, 1, PING_MAX_BYTES, PingProtocol::Ll).unwrap();
    assert!(matches!(
        comm.ping_pong(0, 1, 1, PING_MAX_BYTES + 1, PingProtocol::ReleaseAcquire),
        Err(CommError::TooLarge { .. })
    ));
    // With the GPUs' tuning (on the emulator's memory): puts use at most 64 blocks, the collectives at most
    // one block per SM.
    let comm = Communicator::with_tuning(team, Tuning::gpu(132, 2)).unwrap();
    assert_eq!(grid::blocks(&comm, Operation::PutBandwidth, 64 << 20, 1, false), 64);
    assert_eq!(grid::blocks(&comm, Operation::PingPong, 8, 1, true), 1);
    for op in [Operation::AllReduce, Operation::AllGather, Operation::AllToAll] {
        for bytes in [8, 64 << 10, 1 << 20, 256 << 20] {
            let blocks = grid::blocks(&comm, op, bytes, 2, false);
            assert!((1..=132).contains(&blocks), "{op} {bytes}: {blocks}");
        }
        assert_eq!(grid::blocks(&comm, op, 8, 2, false), 1, "{op}");
        assert_eq!(grid::blocks(&comm, op, 1 << 30, 2, false), 132, "{op}");
    }
}

#[test]
fn proxy_mode_moves_data_through_the_rings_at_every_depth() {
    let team = team();
    for depth in [1, 3, 64] {
        let mut proxy = ProxyBackend::emulated(team, depth).unwrap();
        assert_eq!((proxy.mode(), proxy.queue_depth()), (Mode::Proxy, Some(depth)));
        for op in [Operation::PingPong, Operation::PutBandwidth] {
            proxy.verify(op, Dtype::U8).unwrap_or_else(|e| panic!("depth {depth} {op}: {e}"));
        }
        assert!(matches!(proxy.verify(Operation::AllReduce, Dtype::Bf16), Err(BackendError::Unsupported { .. })));
        let before = proxy.served();
        let t = proxy.run(&request(Operation::PingPong, 64, 5)).unwrap();
        assert!(t.us_per_op > 0.0 && !t.graph && t.sms_used == Some(1));
        // Two puts per round trip; then ten puts back to back, several rings' worth at small depths.
        assert_eq!(proxy.served() - before, 10);
        let t = proxy.run(&request(Operation::PutBandwidth, 4096, 10)).unwrap();
        assert!(t.us_per_op > 0.0);
        assert_eq!(proxy.served() - before, 20);
        // Isolated: one put per launch, a warm-up launch first.
        let times = proxy.isolated(&request(Operation::PutBandwidth, 4096, 3)).unwrap().unwrap();
        assert!(times.len() == 3 && times.iter().all(|t| *t > 0.0), "{times:?}");
        assert_eq!(proxy.served() - before, 24);
        assert!(proxy.notes()[0].contains("host memcpy"));
    }
}

#[test]
fn proxy_refuses_bad_depths() {
    assert!(ProxyBackend::emulated(team(), 0).is_err());
    assert!(ProxyBackend::emulated(team(), 1 << 20).is_err());
}

/// Opens the ferro modes on an emulated team, as [`FerroBackends`] opens them on GPUs.
struct Emulated(&'static Team);

impl BackendOpener for Emulated {
    fn open(&mut self, mode: Mode, config: &OpenConfig) -> Result<Box<dyn Backend>, BackendError> {
        match (mode, config.variant.as_deref()) {
            (Mode::Gpu, None) => Ok(Box::new(GpuBackend::new(self.0, Variant::Main)?)),
            (Mode::Gpu, Some(LL_LABEL)) => Ok(Box::new(GpuBackend::new(self.0, Variant::Ll)?)),
            (Mode::Gpu, Some(label)) if label_algorithm(label).is_some() => {
                let algorithm = label_algorithm(label).unwrap();
                Ok(Box::new(GpuBackend::new(self.0, Variant::AllReduce(algorithm))?))
            }
            (Mode::Proxy, None) => Ok(Box::new(ProxyBackend::emulated(self.0, config.queue_depth)?)),
            _ => Err(BackendError::NotAvailable { mode, reason: "not emulated".into() }),
        }
    }

    fn variants(&self, mode: Mode) -> Vec<Option<String>> {
        FerroBackends::new().variants(mode)
    }
}

#[test]
fn sweep_labels_the_variants_and_recommends_thresholds() {
    let mut emulated = Emulated(team());
    let mut data = BenchData::default();
    let plan = Plan {
        ops: vec![Operation::PingPong, Operation::AllReduce],
        sizes: vec![8, 256, 2048],
        dtype: Dtype::Bf16,
        iters: 3,
        warmup: 3,
        trials: 2,
        graph: true,
        max_bytes_per_trial: 1 << 20,
        utilization: false,
    };
    for variant in emulated.variants(Mode::Gpu) {
        let config = OpenConfig { variant, ..OpenConfig::default() };
        let mut backend = emulated.open(Mode::Gpu, &config).unwrap();
        measure(backend.as_mut(), &plan, &indicatif::ProgressBar::hidden(), &mut data);
    }
    let series: Vec<String> = data.series(Operation::PingPong).iter().map(ToString::to_string).collect();
    assert_eq!(series, ["gpu", "gpu-ll"]);
    // gpu-ll: ping-pong to 256 B, one entry for the sizes above, nothing about all-reduce.
    let ll: Vec<u64> =
        data.measurements.iter().filter(|m| m.label.as_deref() == Some(LL_LABEL)).map(|m| m.bytes).collect();
    assert_eq!(ll, [8, 256]);
    let series: Vec<String> = data.series(Operation::AllReduce).iter().map(ToString::to_string).collect();
    assert_eq!(series, ["gpu", "gpu-ll-one-shot", "gpu-one-shot", "gpu-two-shot"]);
    // The emulator's thresholds: LL up to 256 B, one-shot up to 1 KiB; each forced algorithm stops at its
    // limit with one entry, the two-shot runs everywhere.
    let mut skipped: Vec<_> = data.skipped.iter().map(|s| (s.series().to_string(), s.op, s.bytes)).collect();
    skipped.sort();
    assert_eq!(
        skipped,
        [
            ("gpu-ll".to_owned(), Operation::PingPong, Some(2048)),
            ("gpu-ll-one-shot".to_owned(), Operation::AllReduce, Some(2048)),
            ("gpu-one-shot".to_owned(), Operation::AllReduce, Some(2048)),
        ],
        "{:#?}",
        data.skipped
    );
    assert_eq!(data.points(Operation::AllReduce, &data.series(Operation::AllReduce)[0]).len(), 3);
    assert_eq!(data.points(Operation::AllReduce, &data.series(Operation::AllReduce)[3]).len(), 3);
    assert!(data.measurements.iter().all(|m| m.median_us > 0.0 && m.host_cpu_us_per_op.is_some()));
    // Every all-reduce point also has its isolated figure.
    assert!(data.measurements.iter().filter(|m| m.op == Operation::AllReduce).all(|m| m.isolated.is_some()));

    // The recommendation: thresholds no larger than the sizes the LL and one-shot ran at, which a
    // communicator's tuning loads.
    let winners = ferrocomm_bench::recommend::algorithm_winners(&data);
    assert_eq!(winners.iter().map(|w| w.0).collect::<Vec<_>>(), [8, 256], "two algorithms or more ran at 8 and 256 B");
    let t = ferrocomm_bench::recommend::thresholds(&winners).unwrap();
    assert!(t.ll_all_reduce_max_bytes <= t.one_shot_max_bytes && t.one_shot_max_bytes <= 256, "{t:?}");
    let text = ferrocomm_bench::recommend::tuning_file(&data).unwrap();
    assert!(text.contains("ping-pong:") && text.contains("fastest all-reduce algorithm"), "{text}");
    assert!(text.contains("one_shot_max_bytes="), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tuning.txt");
    std::fs::write(&path, &text).unwrap();
    let mut tuning = Tuning::emulator();
    tuning.apply_file(&path).unwrap();
    assert_eq!(tuning.one_shot_max_bytes as u64, t.one_shot_max_bytes);
    assert_eq!(tuning.ll_all_reduce_max_bytes as u64, t.ll_all_reduce_max_bytes);
}

#[test]
fn bench_command_writes_a_report_with_every_emulated_series() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench");
    let argv = format!(
        "bench --ops ping-pong,put --modes gpu,proxy --queue-depth 1,4 --sizes 8,512 --iters 2 --warmup 2 \
         --trials 2 --out {}",
        out.display()
    );
    let args = ferrocomm_bench::cli::parse(argv.split_whitespace()).unwrap();
    let data = ferrocomm_bench::cli::execute_with(&args, &mut Emulated(team()), &argv).unwrap();
    let mut series: Vec<String> = data.series(Operation::PingPong).iter().map(ToString::to_string).collect();
    series.dedup();
    assert_eq!(series, ["gpu", "gpu-ll", "proxy qd=1", "proxy qd=4"]);
    assert_eq!(data.series(Operation::PutBandwidth).len(), 3, "gpu, proxy qd=1, proxy qd=4");
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    for needle in ["gpu-ll", "proxy qd=4", "Command: `bench --ops", "proxy: kernels of one thread"] {
        assert!(readme.contains(needle), "{needle} missing from the README:\n{readme}");
    }
    // The proxy's note is the same at every depth, so it is there once.
    assert_eq!(readme.matches("proxy: kernels of one thread").count(), 1);
}

#[test]
fn anchor_sizes_join_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let anchors = dir.path().join("a2a.txt");
    std::fs::write(
        &anchors,
        "tokens 1 x 7168 bf16 (14336 B): nccl all_to_all 10.92 us (1.3 GB/s algbw)  nccl all_gather 9.79 us\n",
    )
    .unwrap();
    let argv = format!(
        "bench --ops all-to-all --modes gpu --sizes 64 --iters 2 --warmup 1 --trials 2 --anchors {}",
        anchors.display()
    );
    let args = ferrocomm_bench::cli::parse(argv.split_whitespace()).unwrap();
    let data = ferrocomm_bench::cli::execute_with(&args, &mut Emulated(team()), &argv).unwrap();
    let ours: Vec<u64> = data.measurements.iter().filter(|m| m.mode == Mode::Gpu).map(|m| m.bytes).collect();
    assert_eq!(ours, [64, 14336], "the anchor's all-to-all size is measured too; its all-gather is not asked for");
    assert!(data.measurements.iter().any(|m| m.mode == Mode::Anchor && m.bytes == 14336));
}

#[test]
fn an_sm_budget_series_runs_on_fewer_blocks() {
    let mut tuned = GpuBackend::new(team(), Variant::Main).unwrap();
    let mut budget = GpuBackend::new(team(), Variant::SmBudget(1)).unwrap();
    assert_eq!(budget.label().as_deref(), Some("sm1"));
    assert!(!budget.measures(Operation::PingPong) && budget.supports(Operation::PingPong).is_err());
    // The all-reduce at the emulator's one-shot limit (the two-shot's segments fit one block there).
    for (op, bytes) in
        [(Operation::PutBandwidth, 1 << 16), (Operation::AllReduce, 1024), (Operation::AllGather, 1 << 14)]
    {
        budget.verify(op, Dtype::Bf16).unwrap_or_else(|e| panic!("{op}: {e}"));
        let capped = budget.run(&request(op, bytes, 2)).unwrap();
        let full = tuned.run(&request(op, bytes, 2)).unwrap();
        // The emulator's tuned grids have two blocks; the budget allows one.
        assert_eq!((capped.sms_used, full.sms_used), (Some(1), Some(2)), "{op}");
    }
}

/// The gpu-traced series: every operation of the gpu series on a traced team, its events collected, and the
/// report's overhead table; on an untraced team (or the gpu series on a traced one) the backend refuses.
#[test]
fn gpu_traced_series_times_the_gpu_operations_on_a_traced_team() {
    let traced: &'static Team = Box::leak(Box::new(
        Team::builder()
            .backend(TeamBackend::Emulator)
            .world(2)
            .timeout(Duration::from_secs(30))
            .trace(true)
            .trace_capacity(1 << 14)
            .build()
            .expect("a traced emulated team"),
    ));
    for (team, variant) in [(team(), Variant::Traced), (traced, Variant::Main)] {
        let e = GpuBackend::new(team, variant).err().unwrap();
        assert!(matches!(e, BackendError::NotAvailable { .. }) && e.to_string().contains("trace mode"), "{e}");
    }
    let plan = Plan {
        ops: vec![Operation::PingPong, Operation::AllReduce],
        sizes: vec![8, 4096],
        dtype: Dtype::Bf16,
        iters: 2,
        warmup: 1,
        trials: 2,
        graph: true,
        max_bytes_per_trial: 4 << 20,
        utilization: false,
    };
    let mut data = BenchData::default();
    let mut plain = GpuBackend::new(team(), Variant::Main).unwrap();
    measure(&mut plain, &plan, &indicatif::ProgressBar::hidden(), &mut data);
    let mut gpu_traced = GpuBackend::new(traced, Variant::Traced).unwrap();
    assert_eq!(gpu_traced.label().as_deref(), Some("traced"));
    assert!(Operation::ALL.into_iter().all(|op| gpu_traced.measures(op) && gpu_traced.supports(op).is_ok()));
    measure(&mut gpu_traced, &plan, &indicatif::ProgressBar::hidden(), &mut data);
    assert!(data.skipped.is_empty(), "{:#?}", data.skipped);
    // What the traced kernels recorded: the ping-pong's signals and waits, the all-reduce's puts.
    let events = traced.trace_events();
    let has = |f: fn(&TraceWhat) -> bool| events.iter().any(|e| f(&e.what));
    assert!(has(|w| matches!(w, TraceWhat::Signal { .. })) && has(|w| matches!(w, TraceWhat::WaitEnd { .. })));
    assert!(has(|w| matches!(w, TraceWhat::PutBegin { .. })), "the all-reduce's puts");
    assert!(gpu_traced.notes().iter().any(|n| n.starts_with("gpu-traced:") && n.contains("kept")));

    let overheads = ferrocomm_bench::report::trace_overhead::overheads(&data);
    let points: Vec<(Operation, u64)> = overheads.iter().map(|o| (o.op, o.bytes)).collect();
    let sizes = [
        (Operation::PingPong, 8),
        (Operation::PingPong, 4096),
        (Operation::AllReduce, 8),
        (Operation::AllReduce, 4096),
    ];
    assert_eq!(points, sizes);
    let readme = ferrocomm_bench::report::readme::readme(&data, &[]);
    assert!(readme.contains("## Trace mode overhead") && readme.contains("| all-reduce | 4 KiB |"), "{readme}");
    // The traced series never stands for the gpu mode in the headline.
    let (_, rows) = ferrocomm_bench::report::table::headline(&data, ferrocomm_bench::report::table::Figure::BackToBack);
    assert!(rows.iter().flatten().all(|cell| !cell.contains("(traced)")), "{rows:?}");
}
