//! The built-in `cpu` and `nccl` modes on real GPUs: each checked against the CPU reference, then a short
//! sweep whose figures must be plausible, then `ferrocomm bench` end to end into a report folder.
//!
//! Skips (with a message) without a driver or with fewer than two GPUs; fails instead when
//! FERROCOMM_REQUIRE_GPUS=N asks for N GPUs and fewer are visible.

use ferrocomm_bench::backend::{Backend, BackendOpener, OpenConfig};
use ferrocomm_bench::gpu::{BuiltinBackends, device_count, driver_present, nccl_mode::nccl_present};
use ferrocomm_bench::method::{Plan, measure};
use ferrocomm_bench::model::{BenchData, Dtype, Mode, Operation};

fn two_gpus_or_skip() -> bool {
    let required: usize = std::env::var("FERROCOMM_REQUIRE_GPUS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let have = if driver_present() { device_count().unwrap_or(0) } else { 0 };
    assert!(have >= required, "FERROCOMM_REQUIRE_GPUS={required}, but {have} GPUs are visible");
    if have < 2 {
        eprintln!("skipped: no GPU pair ({have} GPUs visible; FERROCOMM_REQUIRE_GPUS=2 makes this fail)");
        return false;
    }
    true
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
    }
    data
}

#[test]
fn cpu_mode_checks_and_measures() {
    if !two_gpus_or_skip() {
        return;
    }
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
    if !two_gpus_or_skip() {
        return;
    }
    if !nccl_present() {
        assert!(
            std::env::var_os("FERROCOMM_REQUIRE_NCCL").is_none(),
            "FERROCOMM_REQUIRE_NCCL is set, libnccl is missing"
        );
        eprintln!("skipped: libnccl.so.2 not found (FERROCOMM_REQUIRE_NCCL=1 makes this fail)");
        return;
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
}

#[test]
fn bench_command_end_to_end() {
    if !two_gpus_or_skip() {
        return;
    }
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
