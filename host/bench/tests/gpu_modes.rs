//! Every mode on real GPUs — `cpu` and `nccl` (built in), `gpu` and `gpu-ll` (ferrocomm's library) and
//! `proxy` (ferrocomm's proxy kernels and thread): each checked against the CPU reference, then a short
//! sweep whose figures must be plausible, then `ferrocomm bench` end to end into a report folder.
//!
//! On one GPU the modes run two ranks on it (the one-GPU run, whose points say `intra_gpu`), except NCCL,
//! which needs two GPUs and must say so. Skips (with a message) without a driver; fails instead when
//! FERROCOMM_REQUIRE_GPUS=N asks for N GPUs and fewer are visible. The tests hold one lock: kernels that
//! wait on each other must not share the GPUs with another test's.

use std::sync::{Mutex, MutexGuard, PoisonError};

use ferrocomm_bench::backend::{Backend, BackendOpener, OpenConfig, Request};
use ferrocomm_bench::ferro::FerroBackends;
use ferrocomm_bench::gpu::stamp::StampSlots;
use ferrocomm_bench::gpu::{
    BuiltinBackends, Gpus, Placement, capture_joined, device_count, driver_present, nccl_mode::nccl_present,
};
use ferrocomm_bench::method::{Plan, measure};
use ferrocomm_bench::model::{BenchData, Dtype, Mode, Operation};

static GPUS: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    GPUS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The visible GPUs, or `None` (with a message) when there is none.
fn gpus_or_skip() -> Option<usize> {
    let required: usize = std::env::var("FERROCOMM_REQUIRE_GPUS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let have = if driver_present() { device_count().unwrap_or(0) } else { 0 };
    assert!(have >= required, "FERROCOMM_REQUIRE_GPUS={required}, but {have} GPUs are visible");
    if have == 0 {
        eprintln!("skipped: no GPU (FERROCOMM_REQUIRE_GPUS=1 makes this fail)");
        return None;
    }
    Some(have)
}

fn plan(ops: &[Operation]) -> Plan {
    Plan {
        ops: ops.to_vec(),
        sizes: vec![8, 65536, 4 << 20],
        dtype: Dtype::Bf16,
        iters: 10,
        warmup: 10,
        trials: 3,
        graph: true,
        max_bytes_per_trial: 1 << 30,
        utilization: false,
    }
}

fn sweep(backend: &mut dyn Backend, ops: &[Operation]) -> BenchData {
    let mut data = BenchData::default();
    measure(backend, &plan(ops), &indicatif::ProgressBar::hidden(), &mut data);
    for note in backend.notes() {
        eprintln!("note: {note}");
    }
    assert!(data.skipped.is_empty(), "{} skipped points: {:#?}", backend.mode(), data.skipped);
    for m in &data.measurements {
        assert!(
            m.median_us.is_finite() && m.min_us > 0.0 && m.min_us <= m.median_us && m.median_us <= m.max_us,
            "{m:?}"
        );
        assert!(m.median_us < 100_000.0, "{m:?}");
        assert!(m.host_cpu_us_per_op.is_some_and(|c| c >= 0.0), "{m:?}");
        // One GPU holds both ranks: every figure is intra-GPU, and says so.
        assert_eq!(m.intra_gpu, device_count().unwrap_or(0) == 1, "{m:?}");
        if m.op != Operation::PingPong {
            let isolated = m.isolated.unwrap_or_else(|| panic!("no isolated series: {m:?}"));
            assert!(isolated.min_us > 0.0 && isolated.min_us <= isolated.median_us, "{m:?}");
            assert!(isolated.samples >= ferrocomm_bench::method::ISOLATED_OPS, "{m:?}");
        }
    }
    data
}

#[test]
fn cpu_mode_checks_and_measures() {
    if gpus_or_skip().is_none() {
        return;
    }
    let _gpus = lock();
    let mut cpu = BuiltinBackends.open(Mode::Cpu, &OpenConfig::default()).unwrap();
    let ops = [Operation::PingPong, Operation::PutBandwidth, Operation::AllGather, Operation::AllToAll];
    for op in ops {
        cpu.verify(op, if op.is_collective() { Dtype::Bf16 } else { Dtype::U8 }).unwrap();
    }
    assert!(cpu.supports(Operation::AllReduce).is_err());
    let data = sweep(cpu.as_mut(), &ops);
    assert_eq!(data.measurements.len(), ops.len() * 3);
    for m in &data.measurements {
        assert!(!m.graph && m.sms_used == Some(0), "{m:?}");
    }
    // A CPU-initiated hop costs the host a wait on the stream: microseconds, not nanoseconds.
    let ping = data.measurements.iter().find(|m| m.op == Operation::PingPong && m.bytes == 8).unwrap();
    assert!(ping.median_us > 1.0, "{ping:?}");
    let put = data.measurements.iter().find(|m| m.op == Operation::PutBandwidth && m.bytes == 4 << 20).unwrap();
    assert!(put.busbw_gbps > 5.0, "{put:?}");
    eprintln!("cpu: ping-pong 8 B one way {:.2} µs; put 4 MiB {:.1} GB/s", ping.median_us, put.busbw_gbps);
}

#[test]
fn nccl_mode_checks_and_measures() {
    let Some(gpus) = gpus_or_skip() else { return };
    let _gpus = lock();
    if !nccl_present() {
        assert!(
            std::env::var_os("FERROCOMM_REQUIRE_NCCL").is_none(),
            "FERROCOMM_REQUIRE_NCCL is set, libnccl is missing"
        );
        eprintln!("skipped: libnccl.so.2 not found (FERROCOMM_REQUIRE_NCCL=1 makes this fail)");
        return;
    }
    if gpus == 1 {
        let refused = BuiltinBackends.open(Mode::Nccl, &OpenConfig::default()).map(drop).unwrap_err().to_string();
        assert!(refused.contains("nccl runs one rank per GPU") && refused.contains("needs two GPUs"), "{refused}");
        eprintln!("skipped: nccl on one GPU ({refused})");
        return;
    }
    for variant in [None, Some("eager")] {
        let config = OpenConfig { variant: variant.map(str::to_owned), ..OpenConfig::default() };
        let nccl = BuiltinBackends.open(Mode::Nccl, &config).unwrap();
        assert_eq!(nccl.label().as_deref(), variant);
    }
    let mut nccl = BuiltinBackends.open(Mode::Nccl, &OpenConfig::default()).unwrap();
    for op in Operation::ALL {
        for dtype in [Dtype::Bf16, Dtype::F32] {
            nccl.verify(op, dtype).unwrap_or_else(|e| panic!("{op} {dtype}: {e}"));
        }
    }
    let data = sweep(nccl.as_mut(), &Operation::ALL);
    assert_eq!(data.measurements.len(), Operation::ALL.len() * 3);
    let reduce = data.measurements.iter().find(|m| m.op == Operation::AllReduce && m.bytes == 65536).unwrap();
    eprintln!("nccl: all-reduce 64 KiB {:.2} µs (graph: {})", reduce.median_us, reduce.graph);
    assert!(reduce.median_us > 1.0, "{reduce:?}");
    // One graph spanning both ranks' streams: NCCL's group is captured whole.
    assert!(data.measurements.iter().all(|m| m.graph), "{:#?}", nccl.notes());
}

#[test]
fn bench_command_end_to_end() {
    if gpus_or_skip().is_none() {
        return;
    }
    let _gpus = lock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench");
    let modes = if nccl_present() { "cpu,nccl" } else { "cpu" };
    let argv = format!(
        "bench --ops ping-pong,all-gather --modes {modes} --sizes 8,1MiB --iters 5 --trials 3 --out {}",
        out.display()
    );
    let args = ferrocomm_bench::cli::parse(argv.split_whitespace()).unwrap();
    let data = ferrocomm_bench::cli::execute_with(&args, &mut BuiltinBackends, &argv).unwrap();
    assert!(data.meta.driver.is_some() && !data.meta.devices.is_empty());
    assert!(data.measurements.iter().any(|m| m.mode == Mode::Cpu));
    for file in ["README.md", "data.json", "data.csv", "ping-pong-latency.svg", "all-gather-bandwidth.svg"] {
        assert!(out.join(file).is_file(), "{file}");
    }
}

#[test]
fn gpu_mode_checks_and_measures() {
    if gpus_or_skip().is_none() {
        return;
    }
    let _gpus = lock();
    let mut gpu = FerroBackends::new().open(Mode::Gpu, &OpenConfig::default()).unwrap();
    for op in Operation::ALL {
        let dtype = if op.is_collective() { Dtype::Bf16 } else { Dtype::U8 };
        gpu.verify(op, dtype).unwrap_or_else(|e| panic!("{op}: {e}"));
    }
    gpu.verify(Operation::AllReduce, Dtype::F32).unwrap();
    let data = sweep(gpu.as_mut(), &Operation::ALL);
    assert_eq!(data.measurements.len(), Operation::ALL.len() * 3);
    let at = |op, bytes| data.measurements.iter().find(|m| m.op == op && m.bytes == bytes).unwrap();
    for m in &data.measurements {
        // Only the ping-pong kernel (up to 256 B) is timed inside a kernel; the rest as graph replays.
        assert_eq!(m.graph, !(m.op == Operation::PingPong && m.bytes <= 256), "{m:?}");
        assert!(m.sms_used.is_some_and(|s| s >= 1), "{m:?}");
    }
    let ping = at(Operation::PingPong, 8);
    let put = at(Operation::PutBandwidth, 4 << 20);
    let reduce = at(Operation::AllReduce, 65536);
    assert!(put.sms_used.is_some_and(|s| s <= 64), "the put's SM budget (Tuning::put_blocks): {put:?}");
    assert!(put.busbw_gbps > 20.0, "{put:?}");
    assert!(ping.median_us < 20.0, "{ping:?}");
    eprintln!(
        "gpu: ping-pong 8 B one way {:.2} µs; put 4 MiB {:.1} GB/s on {:?} SMs; all-reduce 64 KiB {:.2} µs",
        ping.median_us, put.busbw_gbps, put.sms_used, reduce.median_us
    );
}

#[test]
fn gpu_ll_ping_pong_is_its_own_series() {
    if gpus_or_skip().is_none() {
        return;
    }
    let _gpus = lock();
    let config = OpenConfig { variant: Some("ll".into()), ..OpenConfig::default() };
    let mut ll = FerroBackends::new().open(Mode::Gpu, &config).unwrap();
    assert_eq!(ll.label().as_deref(), Some("ll"));
    let mut data = BenchData::default();
    let plan = Plan { sizes: vec![8, 64, 256, 4096], ..plan(&Operation::ALL) };
    measure(ll.as_mut(), &plan, &indicatif::ProgressBar::hidden(), &mut data);
    let sizes: Vec<u64> = data.measurements.iter().map(|m| m.bytes).collect();
    assert_eq!(sizes, [8, 64, 256], "{:#?}", data.skipped);
    assert_eq!(data.skipped.len(), 1, "{:#?}", data.skipped);
    assert!(data.measurements.iter().all(|m| m.median_us > 0.0 && m.median_us < 20.0 && m.label.is_some()));
    eprintln!("gpu-ll: ping-pong 8 B one way {:.2} µs", data.measurements[0].median_us);
}

#[test]
fn proxy_mode_checks_and_measures_at_two_depths() {
    if gpus_or_skip().is_none() {
        return;
    }
    let _gpus = lock();
    for depth in [1, 16] {
        let config = OpenConfig { queue_depth: depth, ..OpenConfig::default() };
        let mut proxy = FerroBackends::new().open(Mode::Proxy, &config).unwrap();
        for note in proxy.notes() {
            eprintln!("note: {note}");
        }
        let ops = [Operation::PingPong, Operation::PutBandwidth];
        for op in ops {
            proxy.verify(op, Dtype::U8).unwrap_or_else(|e| panic!("depth {depth} {op}: {e}"));
        }
        assert!(proxy.supports(Operation::AllReduce).is_err());
        let data = sweep(proxy.as_mut(), &ops);
        assert_eq!(data.measurements.len(), 6);
        for m in &data.measurements {
            assert!(m.queue_depth == Some(depth) && !m.graph && m.sms_used == Some(1), "{m:?}");
        }
        let ping = data.measurements.iter().find(|m| m.op == Operation::PingPong && m.bytes == 8).unwrap();
        let put = data.measurements.iter().find(|m| m.op == Operation::PutBandwidth && m.bytes == 4 << 20).unwrap();
        assert!(put.busbw_gbps > 5.0, "{put:?}");
        // A proxy hop has the host in it: microseconds, and a host thread busy meanwhile.
        assert!(ping.median_us > 1.0 && ping.host_cpu_us_per_op.is_some_and(|c| c > 0.1), "{ping:?}");
        eprintln!(
            "proxy qd={depth}: ping-pong 8 B one way {:.2} µs ({:.2} µs host CPU); put 4 MiB {:.1} GB/s",
            ping.median_us,
            ping.host_cpu_us_per_op.unwrap_or(0.0),
            put.busbw_gbps
        );
        // Back-to-back small puts through one ring, deeper than it: the kernel waits on the proxy.
        let t = proxy
            .run(&Request { op: Operation::PutBandwidth, bytes: 8, dtype: Dtype::U8, iters: 100, graph: false })
            .unwrap();
        eprintln!("proxy qd={depth}: 100 puts of 8 B, {:.2} µs each", t.us_per_op);
    }
}

#[test]
fn bench_command_every_mode_end_to_end() {
    if gpus_or_skip().is_none() {
        return;
    }
    let _gpus = lock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench");
    let argv = format!(
        "bench --ops ping-pong,put,all-reduce --modes gpu,proxy,cpu --sizes 8,64KiB,64MiB --queue-depth 1,8 \
         --iters 10 --warmup 5 --trials 3 --out {}",
        out.display()
    );
    let args = ferrocomm_bench::cli::parse(argv.split_whitespace()).unwrap();
    let data = ferrocomm_bench::cli::execute_with(&args, &mut FerroBackends::new(), &argv).unwrap();
    let series: Vec<String> = data.series(Operation::PingPong).iter().map(ToString::to_string).collect();
    assert_eq!(series, ["gpu", "gpu-ll", "proxy qd=1", "proxy qd=8", "cpu"], "{:#?}", data.skipped);
    let median = |mode, label: Option<&str>| {
        data.measurements
            .iter()
            .find(|m| m.op == Operation::PingPong && m.bytes == 8 && m.mode == mode && m.label.as_deref() == label)
            .map(|m| m.median_us)
            .unwrap()
    };
    let (gpu, cpu) = (median(Mode::Gpu, None), median(Mode::Cpu, None));
    eprintln!(
        "ping-pong 8 B one way: gpu {gpu:.2} µs, gpu-ll {:.2} µs, cpu {cpu:.2} µs ({:.1}×)",
        median(Mode::Gpu, Some("ll")),
        cpu / gpu
    );
    assert!(gpu < cpu, "GPU-initiated ping-pong ({gpu} µs) should beat CPU-initiated ({cpu} µs)");
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    for needle in ["gpu-ll", "proxy qd=8", "%globaltimer", "Command: `bench --ops"] {
        assert!(readme.contains(needle), "{needle}");
    }
}

#[test]
fn utilization_is_recorded_per_point() {
    if gpus_or_skip().is_none() {
        return;
    }
    let _gpus = lock();
    let mut gpu = FerroBackends::new().open(Mode::Gpu, &OpenConfig::default()).unwrap();
    let plan = Plan { sizes: vec![64 << 20], utilization: true, ..plan(&[Operation::AllReduce]) };
    let mut data = BenchData::default();
    measure(gpu.as_mut(), &plan, &indicatif::ProgressBar::hidden(), &mut data);
    assert!(data.skipped.is_empty(), "{:#?}", data.skipped);
    let m = &data.measurements[0];
    let Some(u) = &m.utilization else {
        // NVML absent: the run says so instead of giving figures.
        assert!(data.meta.notes.iter().any(|n| n.contains("No utilization figures")), "{:#?}", data.meta.notes);
        eprintln!("skipped: no NVML ({:?})", data.meta.notes);
        return;
    };
    eprintln!("utilization of a 64 MiB all-reduce: {u:?}");
    assert!(u.wall_s >= 1.0, "{u:?}");
    // Back-to-back two-shot all-reduces keep every SM of the grid busy for the whole window.
    if let Some(sm) = u.sm_activity_pct {
        assert!(sm > 10.0 && sm <= 100.0, "{u:?}");
    }
}

/// The shape NCCL's graphs take: one capture rooted on rank 0's stream, the other ranks' streams forked
/// from it and joined back. Replaying it on the root must run every rank's part (here, the clock stamps
/// of every rank; a stamp that did not run reads zero, which `each_us` refuses).
#[test]
fn a_graph_captured_across_rank_streams_runs_every_ranks_part() {
    if gpus_or_skip().is_none() {
        return;
    }
    let _gpus = lock();
    let placement = Placement::resolve(Mode::Nccl, None, Some(2)).unwrap();
    let gpus = Gpus::open(&placement).unwrap();
    let stamps = StampSlots::new(&gpus, 2).unwrap();
    let ranks: Vec<usize> = (0..gpus.world()).collect();
    let graph = capture_joined(&gpus, &ranks, || {
        for slot in 0..4 {
            ranks.iter().try_for_each(|&r| stamps.stamp(&gpus, r, slot))?;
        }
        Ok(())
    })
    .unwrap();
    for _ in 0..2 {
        stamps.clear().unwrap();
        graph.launch().unwrap();
        gpus.synchronize().unwrap();
        let spans = stamps.each_us(Mode::Nccl, &ranks, 2).unwrap();
        assert!(spans.iter().all(|us| us.is_finite() && *us >= 0.0 && *us < 1e5), "{spans:?}");
    }
    // Nothing was enqueued outside the capture: the streams are usable afterwards.
    stamps.clear().unwrap();
    ranks.iter().for_each(|&r| stamps.stamp(&gpus, r, 0).unwrap());
    gpus.synchronize().unwrap();
}
