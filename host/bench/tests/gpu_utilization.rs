//! The utilization probe on a real GPU: an idle window, a window of a spinning kernel on every SM, one of
//! a kernel on one SM, one of device-to-device copies, and a window too short for GPM. Prints every
//! window's figures (JSON) so that what NVML offers on a machine can be read off the test's output.
//!
//! Skips (with a message) without a driver, a GPU or NVML; fails instead when FERROCOMM_REQUIRE_GPUS=N
//! asks for N GPUs.

use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaStream, result, sys};
use ferrocomm_bench::gpu::{DeviceBuffer, device_count, driver_present};
use ferrocomm_bench::utilization::{QUIET_BEFORE, SmSource, Utilization, UtilizationProbe, Window, format_uuid};

/// Spins every thread until `cycles` SM clocks have passed: keeps its SMs busy for a known time without
/// touching memory.
const SPIN_PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry spin(.param .u64 cycles)
{
    .reg .pred %p;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [cycles];
    mov.u64 %rd2, %clock64;
LOOP:
    mov.u64 %rd3, %clock64;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p, %rd4, %rd1;
    @%p bra LOOP;
    ret;
}
"#;

/// How long each measured window lasts: long against GPM's counter lag (up to a refresh, 100–200 ms).
const WINDOW: Duration = Duration::from_millis(1000);

fn gpu_or_skip() -> Option<UtilizationProbe> {
    let required: usize = std::env::var("FERROCOMM_REQUIRE_GPUS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let have = if driver_present() { device_count().unwrap_or(0) } else { 0 };
    assert!(have >= required, "FERROCOMM_REQUIRE_GPUS={required}, but {have} GPUs are visible");
    if have == 0 {
        eprintln!("skipped: no GPU visible (FERROCOMM_REQUIRE_GPUS=1 makes this fail)");
        return None;
    }
    match UtilizationProbe::open() {
        Ok(probe) => Some(probe),
        Err(e) if required == 0 => {
            eprintln!("skipped: {e} (FERROCOMM_REQUIRE_GPUS=1 makes this fail)");
            None
        }
        Err(e) => panic!("FERROCOMM_REQUIRE_GPUS={required}, but {e}"),
    }
}

struct Spin {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    func: sys::CUfunction,
    sms: u32,
    clock_khz: u64,
}

impl Spin {
    fn new(ordinal: usize) -> Spin {
        let ctx = CudaContext::new(ordinal).unwrap();
        let stream = ctx.new_stream().unwrap();
        ctx.bind_to_thread().unwrap();
        let src = CString::new(SPIN_PTX).unwrap();
        // SAFETY: `src` is a NUL-terminated PTX text that outlives the call; the context is current.
        let module = unsafe { result::module::load_data(src.as_ptr().cast()) }.unwrap();
        // SAFETY: `module` was just loaded and stays loaded for the test's life (never unloaded).
        let func = unsafe { result::module::get_function(module, CString::new("spin").unwrap()) }.unwrap();
        let attr = |a| ctx.attribute(a).unwrap();
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) as u32;
        let clock_khz = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE) as u64;
        Spin { ctx, stream, func, sms, clock_khz }
    }

    /// Keeps `blocks` blocks of 256 threads spinning, launch after launch of 10 ms each, for `time`; then
    /// waits for the stream.
    fn run(&self, blocks: u32, time: Duration) {
        self.ctx.bind_to_thread().unwrap();
        let mut cycles: u64 = self.clock_khz * 10; // 10 ms at the rated clock
        let end = Instant::now() + time;
        while Instant::now() < end {
            let mut params = [(&raw mut cycles).cast::<c_void>()];
            // SAFETY: `spin` takes one u64 parameter, which `params` points at for the call's length; the
            // stream belongs to the current context.
            unsafe {
                result::launch_kernel(self.func, (blocks, 1, 1), (256, 1, 1), 0, self.stream.cu_stream(), &mut params)
            }
            .unwrap();
            // Launches queue far faster than they run: keep the queue short so the window ends with the work.
            self.stream.synchronize().unwrap();
        }
        self.stream.synchronize().unwrap();
    }
}

fn show(what: &str, u: &Utilization) {
    eprintln!("{what}: {}", serde_json::to_string(u).unwrap());
    eprintln!(
        "{what}: {:.0} ms, SM activity {:?} %, occupancy {:?} %, busy {:?} %, DRAM {:?} %, NVLink tx {:?} B rx {:?} B",
        u.wall_s * 1e3,
        u.sm_activity_pct,
        u.sm_occupancy_pct,
        u.gpu_busy_pct,
        u.dram_bw_pct,
        u.nvlink_tx_bytes,
        u.nvlink_rx_bytes
    );
}

/// Runs `work` in a window opened after a quiet spell, so that no earlier work leaks into it through the
/// GPM counters' lag.
fn measured(probe: &UtilizationProbe, work: impl FnOnce()) -> Utilization {
    std::thread::sleep(QUIET_BEFORE);
    let window: Window<'_> = probe.start(&[0]).unwrap();
    work();
    window.finish()
}

/// What NVML gives between consecutive GPM samples 1 ms apart (NVML's first device, whichever CUDA
/// ordinal it is): equal counters between refreshes, so a figure other than 0 shows a refresh that saw
/// work (on an H200: 0 % between refreshes, not an error).
fn refresh_pattern(spin: &Spin) {
    use nvml_wrapper::enums::gpm::GpmMetricId;
    let nvml = nvml_wrapper::Nvml::init().unwrap();
    let device = nvml.device_by_index(0).unwrap();
    eprintln!("GPM supported: {:?}, streaming: {:?}", device.gpm_support(), device.gpm_streaming_enabled());
    let t0 = Instant::now();
    let mut prev = device.gpm_sample().unwrap();
    let mut pattern = Vec::new();
    spin.ctx.bind_to_thread().unwrap();
    for _ in 0..250 {
        std::thread::sleep(Duration::from_millis(1));
        let next = device.gpm_sample().unwrap();
        let r = nvml_wrapper::gpm::gpm_metrics_get(&nvml, &prev, &next, &[GpmMetricId::SmUtil]);
        let t = t0.elapsed().as_secs_f64() * 1e3;
        match r {
            Ok(v) => match &v[0] {
                Ok(m) if m.value.is_finite() => pattern.push(format!("{t:.0}ms:{:.0}", m.value)),
                Ok(m) => pattern.push(format!("{t:.0}ms:{}", m.value)),
                Err(e) => pattern.push(format!("{t:.0}ms:E({e})")),
            },
            Err(e) => pattern.push(format!("{t:.0}ms:EE({e})")),
        }
        prev = next;
    }
    // Collapse runs of the same outcome so the refreshes stand out.
    let mut out: Vec<String> = Vec::new();
    let mut last = String::new();
    for p in pattern {
        let kind = p.split(':').nth(1).unwrap_or("").to_owned();
        if (kind.starts_with('E') || kind == "0") && kind == last {
            continue;
        }
        last = kind;
        out.push(p);
    }
    eprintln!("GPM pairs 1 ms apart (idle GPU): {}", out.join(" "));
}

#[test]
fn utilization_of_busy_idle_and_copy_windows() {
    let Some(probe) = gpu_or_skip() else { return };
    eprintln!("NVML driver {:?}", probe.driver_version());
    let spin = Spin::new(0);
    eprintln!("GPU 0: {} SMs at {} MHz", spin.sms, spin.clock_khz / 1000);
    // Warm up: module load, first launch, clocks.
    spin.run(spin.sms * 4, Duration::from_millis(50));
    refresh_pattern(&spin);

    let timed = |what: &str, work: &dyn Fn()| {
        let u = measured(&probe, work);
        show(what, &u);
        u
    };
    let idle = timed("idle", &|| std::thread::sleep(WINDOW));
    let busy = timed("busy (every SM)", &|| spin.run(spin.sms * 4, WINDOW));
    let one_sm = timed("busy (one block)", &|| spin.run(1, WINDOW));

    let bytes = 1usize << 30;
    let (src, dst) = (DeviceBuffer::zeroed(&spin.ctx, bytes).unwrap(), DeviceBuffer::zeroed(&spin.ctx, bytes).unwrap());
    let copy = timed("device-to-device copy, 1 GiB each", &|| {
        spin.ctx.bind_to_thread().unwrap();
        let end = Instant::now() + WINDOW;
        while Instant::now() < end {
            // SAFETY: both buffers are live allocations of `bytes` bytes on this context's device.
            unsafe { result::memcpy_dtod_async(dst.ptr(), src.ptr(), bytes, spin.stream.cu_stream()) }.unwrap();
            spin.stream.synchronize().unwrap();
        }
    });
    let short = timed("short busy window (20 ms)", &|| spin.run(spin.sms * 4, Duration::from_millis(20)));
    eprintln!("short window notes: {:?}", short.devices[0].notes);
    let mut raw = UtilizationProbe::open().unwrap();
    raw.set_min_window(Duration::ZERO);
    let short_raw = measured(&raw, || spin.run(spin.sms * 4, Duration::from_millis(20)));
    show("short busy window (20 ms), GPM read regardless", &short_raw);

    let (busy_sm, idle_sm) =
        (busy.sm_activity_pct.expect("no SM activity figure"), idle.sm_activity_pct.unwrap_or(0.0));
    assert!(busy_sm > 0.0, "busy window: {busy:?}");
    assert!(idle_sm < busy_sm, "idle {idle_sm} % against busy {busy_sm} %");
    assert!(busy.wall_s >= WINDOW.as_secs_f64() * 0.9, "{busy:?}");
    if busy.devices[0].sm_source == SmSource::Gpm {
        assert!(busy_sm > 50.0, "every SM spinning, yet {busy_sm} %");
        assert!(idle_sm < 5.0, "idle, yet {idle_sm} %");
        // One block on one SM of many: a small share of SM activity, though a kernel ran throughout.
        let one = one_sm.sm_activity_pct.unwrap();
        assert!(one < busy_sm / 4.0, "one block {one} % against every SM {busy_sm} %");
        assert!(one_sm.gpu_busy_pct.unwrap() > 50.0, "{one_sm:?}");
        if let (Some(c), Some(i)) = (copy.dram_bw_pct, idle.dram_bw_pct) {
            assert!(c > i, "copying: DRAM {c} % against idle {i} %");
        }
        // Too short for GPM: unavailable, not NVML's stale figure.
        assert_eq!(short.sm_activity_pct, None, "{short:?}");
    }
    for u in [&idle, &busy, &one_sm, &copy] {
        // One GPU copies nothing over NVLink; a GPU that has it reports a measured figure, not a guess.
        if let Some(tx) = u.nvlink_tx_bytes {
            assert!(tx < 1 << 30, "{tx} bytes sent over NVLink by a single-GPU test: {u:?}");
        }
    }
}

#[test]
fn nvml_names_every_cuda_gpu() {
    let Some(probe) = gpu_or_skip() else { return };
    let n = device_count().unwrap();
    let ordinals: Vec<usize> = (0..n).collect();
    let u = probe.start(&ordinals).unwrap().finish();
    assert_eq!(u.devices.len(), n);
    for (d, ordinal) in u.devices.iter().zip(&ordinals) {
        assert_eq!(d.ordinal, *ordinal);
        assert!(d.uuid.starts_with("GPU-"), "{d:?}");
        let ctx = CudaContext::new(*ordinal).unwrap();
        let uuid = format_uuid(&ctx.uuid().unwrap().bytes.map(|b| b as u8));
        assert_eq!(d.uuid, uuid, "CUDA {ordinal} mapped to another GPU");
    }
    assert!(probe.start(&[n]).is_err(), "ordinal {n} of {n} GPUs should be refused");
}
