//! GPU and NVLink utilization over a window of time (one bench point, say), read from NVML.
//!
//! GPU-initiated communication keeps kernels resident (a proxy or a persistent collective), CPU-initiated
//! communication leaves the SMs to copy engines: the times alone do not show what each costs the GPU.
//! A [`Window`] brackets the work of one point and says, per GPU and for the set, how busy the SMs were
//! and how many bytes crossed NVLink.
//!
//! ```no_run
//! use ferrocomm_bench::utilization::UtilizationProbe;
//!
//! let probe = UtilizationProbe::open()?; // Err(UtilError::NvmlNotFound) without a driver
//! let window = probe.start(&[0, 1])?; // CUDA ordinals, as the bench's --gpus takes them
//! // ... the trials of one point ...
//! let u = window.finish();
//! println!("{:?} % SM activity, {:?} GB/s sent", u.sm_activity_pct, u.nvlink_tx_gbps());
//! # Ok::<(), ferrocomm_bench::utilization::UtilError>(())
//! ```
//!
//! # Where the figures come from
//!
//! * **SM activity** — on Hopper and newer, NVML's GPM (GPU performance monitoring) metric
//!   `NVML_GPM_METRIC_SM_UTIL` between a sample at [`UtilizationProbe::start`] and one at
//!   [`Window::finish`]: the share of time-and-SMs with at least one warp resident (DCGM's
//!   `SM_ACTIVE`). A kernel spinning on one SM of 132 shows under 1 %, not 100 %. Next to it,
//!   `NVML_GPM_METRIC_SM_OCCUPANCY` (resident warps against the maximum), `NVML_GPM_METRIC_GRAPHICS_UTIL`
//!   (time any kernel ran) and `NVML_GPM_METRIC_DRAM_BW_UTIL`. [`SmSource::Gpm`]. On an H200 a
//!   device-to-device `cuMemcpyDtoDAsync` of 1 GiB read 57–74 % SM activity and 51–66 % DRAM bandwidth:
//!   the driver copies within a GPU with kernels, so a copy the CPU issues does not leave the SMs free.
//! * Where GPM is missing or refuses (older GPUs; the counters held by a profiler), the driver's
//!   utilization samples (`nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES)`, the figure behind
//!   `nvmlDeviceGetUtilizationRates`' gpu %): the share of each sample period during which *any* kernel ran,
//!   an upper bound of SM activity. [`SmSource::UtilizationSamples`].
//! * **NVLink bytes** — the counters `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` / `_RX` (payload only, in
//!   KiB, all links summed via scope `UINT_MAX`; link by link where the sum is refused), read at start and
//!   finish; the difference times 1024. Granularity is 1 KiB per GPU and direction. A GPU whose NVLink
//!   NVML does not expose (a lone H200 in a VM answered "not supported", per link too) gets `None`.
//!
//! # Counter refreshes and short windows
//!
//! NVML refreshes the GPM counters periodically (documented: 100 ms, [`MIN_GPM_WINDOW`]) and a sample
//! reads the last refresh, not the present. So a window's GPM figures cover a span shifted back by up to
//! one refresh: work just before [`UtilizationProbe::start`] counts, work in the last stretch before
//! [`Window::finish`] does not. On an H200 (driver 580) the lag was up to about 170 ms: a 400 ms window of
//! full load read 59–77 % SM activity, a 400 ms window of one spinning block (under 1 % of the SMs) begun
//! right after full load read 23 %, and two samples 1 ms apart compared equal counters (0 %, not an error)
//! except across a refresh. Hence, for figures that belong to a bench point:
//!
//! * leave the GPUs idle for [`QUIET_BEFORE`] before `start` (after warm-up), so nothing earlier leaks in;
//! * make the window long: one window over all trials of a point, a second or more, puts the error under
//!   about 20 % (lag / window);
//! * a window shorter than [`UtilizationProbe::min_window`] reports `None` for the GPM figures, with a
//!   note, rather than the stale 0 % NVML gives (an H200 read 0 % for a 20 ms window of full load).
//!
//! NVML offers no way to see when the counters refreshed (equal counters read as 0 %, which an idle GPU
//! also reads), so the lag cannot be corrected from inside. The utilization samples have a longer period
//! still (about 1/6 s to 1 s by product): a window gets the mean of the samples whose whole period lies
//! inside it, or `None` when none does. NVLink counters are read directly and need neither.
//!
//! # Unavailable versus zero
//!
//! Every figure is an `Option`: `None` means NVML could not give it (no NVML support, no NVLink on this
//! GPU, window too short — see [`DeviceUtilization::notes`]); `Some(0)` means it was measured and was zero
//! (a GPU with NVLink that sent nothing).

use std::ffi::{CStr, c_char};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nvml_wrapper::enum_wrappers::device::Sampling;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, GpmSample, Nvml};
use nvml_wrapper_sys::bindings as nvml_sys;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// NVML's refresh period of GPM counters: the documented least interval between two GPM samples.
pub const MIN_GPM_WINDOW: Duration = Duration::from_millis(100);

/// How long GPUs should idle before [`UtilizationProbe::start`] so that no earlier work counts in the
/// window: GPM samples read the last counter refresh, which lagged by up to about 170 ms on an H200
/// (driver 580) although NVML documents a 100 ms refresh.
pub const QUIET_BEFORE: Duration = Duration::from_millis(300);

/// NVML field ids of the NVLink payload counters (KiB since the driver loaded).
const FI_NVLINK_DATA_TX: u32 = nvml_sys::field_id::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
const FI_NVLINK_DATA_RX: u32 = nvml_sys::field_id::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
/// The scope of a field value that sums every link.
const ALL_LINKS: u32 = u32::MAX;

/// The GPM metrics asked for, in this order.
const GPM_METRICS: [GpmMetricId; 4] =
    [GpmMetricId::SmUtil, GpmMetricId::SmOccupancy, GpmMetricId::GraphicsUtil, GpmMetricId::DramBwUtil];

/// Why utilization cannot be measured.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum UtilError {
    /// libnvidia-ml could not be loaded.
    #[error(
        "NVML not found ({reason}): GPU utilization needs libnvidia-ml.so.1, which ships with the NVIDIA \
         driver (Ubuntu: libnvidia-compute-<driver version>; Debian: libnvidia-ml1); in a container, run it \
         with the NVIDIA container toolkit's utility capability"
    )]
    NvmlNotFound {
        /// The loader's message.
        reason: String,
    },
    /// NVML loaded but would not start (no driver running, no permission).
    #[error("NVML did not start: {0} (is the NVIDIA driver loaded, and may this user open /dev/nvidia*?)")]
    Init(#[source] NvmlError),
    /// The CUDA driver (needed to name a CUDA ordinal's GPU) is missing or sees no such GPU.
    #[error("CUDA GPU {ordinal}: {reason}")]
    Cuda {
        /// The CUDA ordinal.
        ordinal: usize,
        /// What failed.
        reason: String,
    },
    /// NVML has no device with the CUDA GPU's UUID or PCI bus id.
    #[error("NVML has no device for CUDA GPU {ordinal} (UUID {uuid}, PCI {pci_bus_id}): {source}")]
    NoNvmlDevice {
        /// The CUDA ordinal.
        ordinal: usize,
        /// Its UUID as CUDA gives it.
        uuid: String,
        /// Its PCI bus id as CUDA gives it.
        pci_bus_id: String,
        /// NVML's answer to the PCI look-up.
        #[source]
        source: NvmlError,
    },
}

/// Which counter [`DeviceUtilization::sm_activity_pct`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SmSource {
    /// GPM's SM activity (Hopper and newer): the share of time-and-SMs with a warp resident.
    Gpm,
    /// The driver's utilization samples: the share of time any kernel ran (an upper bound).
    UtilizationSamples,
    /// Neither gave a figure for this window.
    Unavailable,
}

/// One GPU's figures over a window. Percentages are 0–100; `None` is "not measured", see
/// [`notes`](Self::notes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceUtilization {
    /// The CUDA ordinal the window was started with.
    pub ordinal: usize,
    /// NVML's UUID of the GPU (`GPU-…`).
    pub uuid: String,
    /// The GPU's name.
    pub name: String,
    /// Where `sm_activity_pct` came from.
    pub sm_source: SmSource,
    /// SM activity, % (GPM) or kernel-running time, % (utilization samples): see [`SmSource`].
    pub sm_activity_pct: Option<f64>,
    /// Resident warps against the maximum, % (GPM only).
    pub sm_occupancy_pct: Option<f64>,
    /// Time any kernel ran, % (GPM's graphics/compute activity, or the utilization samples).
    pub gpu_busy_pct: Option<f64>,
    /// DRAM bandwidth used, % of peak (GPM only).
    pub dram_bw_pct: Option<f64>,
    /// NVLink payload bytes sent during the window, all links (1 KiB granularity).
    pub nvlink_tx_bytes: Option<u64>,
    /// NVLink payload bytes received during the window, all links (1 KiB granularity).
    pub nvlink_rx_bytes: Option<u64>,
    /// Why a figure is `None`, or how it was obtained when that is unusual.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A window's figures, per GPU and for the set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Utilization {
    /// Wall time from [`UtilizationProbe::start`] to [`Window::finish`], seconds.
    pub wall_s: f64,
    /// Per GPU, in the order of the ordinals given to `start`.
    pub devices: Vec<DeviceUtilization>,
    /// Mean over the GPUs that have it (each GPU weighs the same: one host's GPUs are one model).
    pub sm_activity_pct: Option<f64>,
    /// Mean over the GPUs that have it.
    pub sm_occupancy_pct: Option<f64>,
    /// Mean over the GPUs that have it.
    pub gpu_busy_pct: Option<f64>,
    /// Mean over the GPUs that have it.
    pub dram_bw_pct: Option<f64>,
    /// Sum over the GPUs that have it; `None` when no GPU has it.
    pub nvlink_tx_bytes: Option<u64>,
    /// Sum over the GPUs that have it; `None` when no GPU has it.
    pub nvlink_rx_bytes: Option<u64>,
}

impl Utilization {
    /// Builds the set's figures from the GPUs' (means of percentages, sums of bytes).
    pub fn from_devices(wall_s: f64, devices: Vec<DeviceUtilization>) -> Utilization {
        let mean_of = |f: fn(&DeviceUtilization) -> Option<f64>| mean(devices.iter().filter_map(f));
        let sum_of =
            |f: fn(&DeviceUtilization) -> Option<u64>| devices.iter().filter_map(f).reduce(|a, b| a.saturating_add(b));
        Utilization {
            wall_s,
            sm_activity_pct: mean_of(|d| d.sm_activity_pct),
            sm_occupancy_pct: mean_of(|d| d.sm_occupancy_pct),
            gpu_busy_pct: mean_of(|d| d.gpu_busy_pct),
            dram_bw_pct: mean_of(|d| d.dram_bw_pct),
            nvlink_tx_bytes: sum_of(|d| d.nvlink_tx_bytes),
            nvlink_rx_bytes: sum_of(|d| d.nvlink_rx_bytes),
            devices,
        }
    }

    /// NVLink bytes sent by the set per second of the window, in GB/s (10^9 bytes).
    pub fn nvlink_tx_gbps(&self) -> Option<f64> {
        rate_gbps(self.nvlink_tx_bytes, self.wall_s)
    }

    /// NVLink bytes received by the set per second of the window, in GB/s (10^9 bytes).
    pub fn nvlink_rx_gbps(&self) -> Option<f64> {
        rate_gbps(self.nvlink_rx_bytes, self.wall_s)
    }
}

/// `bytes / seconds` in GB/s; `None` without bytes or without a positive duration.
pub fn rate_gbps(bytes: Option<u64>, seconds: f64) -> Option<f64> {
    let bytes = bytes?;
    (seconds > 0.0 && seconds.is_finite()).then(|| bytes as f64 / seconds / 1e9)
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.filter(|v| v.is_finite()).fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

/// Bytes moved between two readings of a KiB counter. `None` when the counter went backwards: NVML's
/// counters are 64-bit (they would take 16 ZiB to wrap), so a smaller end reading is a reset (a driver
/// reload, `nvidia-smi nvlink -r`), across which nothing can be said.
pub fn kib_counter_delta_bytes(start_kib: u64, end_kib: u64) -> Option<u64> {
    end_kib.checked_sub(start_kib).map(|kib| kib.saturating_mul(1024))
}

/// The mean of the utilization samples (µs timestamp, %) whose whole period lies in `[start_us, end_us]`:
/// each sample covers the time since the one before it, so the first sample (whose period is unknown) only
/// bounds the next. `None` when no sample's period fits, i.e. the window is shorter than the driver's
/// sample period or the samples miss it.
pub fn covered_sample_mean(samples: &[(u64, f64)], start_us: u64, end_us: u64) -> Option<f64> {
    let mut sorted = samples.to_vec();
    sorted.sort_by_key(|s| s.0);
    mean(sorted.windows(2).filter(|w| w[0].0 >= start_us && w[1].0 <= end_us && w[1].0 > w[0].0).map(|w| w[1].1))
}

/// An open NVML, and the CUDA driver to name GPUs by ordinal. Cheap to keep for a whole run; one per
/// process is enough (NVML counts its users).
#[derive(Debug)]
pub struct UtilizationProbe {
    nvml: Arc<Nvml>,
    min_window: Duration,
}

impl UtilizationProbe {
    /// Loads libnvidia-ml.so.1 (dlopen: nothing links it) and starts NVML.
    pub fn open() -> Result<UtilizationProbe, UtilError> {
        Self::from_init(Nvml::init())
    }

    /// As [`open`](Self::open), from the NVML library at `path` (a file name for the loader to look up,
    /// or a path).
    pub fn open_library(path: impl AsRef<std::ffi::OsStr>) -> Result<UtilizationProbe, UtilError> {
        Self::from_init(Nvml::builder().lib_path(path.as_ref()).init())
    }

    fn from_init(init: Result<Nvml, NvmlError>) -> Result<UtilizationProbe, UtilError> {
        match init {
            Ok(nvml) => Ok(UtilizationProbe { nvml: Arc::new(nvml), min_window: MIN_GPM_WINDOW }),
            Err(
                e @ (NvmlError::LibloadingError(_) | NvmlError::FailedToLoadSymbol(_) | NvmlError::LibraryNotFound),
            ) => Err(UtilError::NvmlNotFound { reason: e.to_string() }),
            Err(e) => Err(UtilError::Init(e)),
        }
    }

    /// The least window for which GPM figures are reported ([`MIN_GPM_WINDOW`] unless changed).
    pub fn min_window(&self) -> Duration {
        self.min_window
    }

    /// Sets the least window for GPM figures. Below [`MIN_GPM_WINDOW`] NVML compares counters of the
    /// same refresh (an H200 read 0 % for a 20 ms window of full load): only for studying that.
    pub fn set_min_window(&mut self, min: Duration) {
        self.min_window = min;
    }

    /// The NVML driver version, e.g. "580.95.05".
    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    /// NVML's device for the CUDA GPU `ordinal`, found by UUID (then PCI bus id): CUDA's ordinals follow
    /// `CUDA_VISIBLE_DEVICES` and CUDA's own ordering, NVML's indices do not.
    fn device(&self, ordinal: usize) -> Result<(Device<'_>, String), UtilError> {
        let (uuid, pci_bus_id) = cuda_identity(ordinal)?;
        match self.nvml.device_by_uuid(uuid.as_str()) {
            Ok(device) => Ok((device, uuid)),
            Err(_) => match self.nvml.device_by_pci_bus_id(pci_bus_id.as_str()) {
                Ok(device) => {
                    let uuid = device.uuid().unwrap_or(uuid);
                    Ok((device, uuid))
                }
                Err(source) => Err(UtilError::NoNvmlDevice { ordinal, uuid, pci_bus_id, source }),
            },
        }
    }

    /// Opens a window over the CUDA GPUs `ordinals`: reads every counter now. Errors only when a GPU
    /// cannot be named; a counter that cannot be read makes its figure `None` at [`Window::finish`].
    ///
    /// GPM counters lag by up to one refresh (see the module's doc): for figures that belong to the
    /// window alone, leave the GPUs idle for [`QUIET_BEFORE`] before calling this, and keep the window
    /// long (a second or more for errors under about 20 %).
    pub fn start(&self, ordinals: &[usize]) -> Result<Window<'_>, UtilError> {
        let mut devices = Vec::with_capacity(ordinals.len());
        for &ordinal in ordinals {
            let (device, uuid) = self.device(ordinal)?;
            let name = device.name().unwrap_or_else(|_| "unknown GPU".to_owned());
            devices.push(WindowDevice {
                ordinal,
                uuid,
                name,
                device,
                gpm_start: Err(NvmlError::Uninitialized),
                nvlink_start: [Err(String::new()), Err(String::new())],
            });
        }
        let started_unix_us = unix_us();
        let started = Instant::now();
        // Counters last, back to back, so the window begins as close as it can to the caller's work.
        for d in &mut devices {
            d.gpm_start = gpm_sample(&d.device);
            d.nvlink_start = [
                nvlink_kib(&self.nvml, &d.device, FI_NVLINK_DATA_TX),
                nvlink_kib(&self.nvml, &d.device, FI_NVLINK_DATA_RX),
            ];
        }
        Ok(Window { probe: self, started, started_unix_us, devices })
    }
}

/// An open window: counters read at its start. [`finish`](Self::finish) reads them again.
#[derive(Debug)]
pub struct Window<'p> {
    probe: &'p UtilizationProbe,
    started: Instant,
    started_unix_us: u64,
    devices: Vec<WindowDevice<'p>>,
}

#[derive(Debug)]
struct WindowDevice<'p> {
    ordinal: usize,
    uuid: String,
    name: String,
    device: Device<'p>,
    gpm_start: Result<GpmSample<'p>, NvmlError>,
    nvlink_start: [Result<u64, String>; 2],
}

impl Window<'_> {
    /// Time since the window started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Reads every counter again and returns the window's figures; call it once the work is done (the
    /// caller's streams synchronized). Never fails: what cannot be measured is `None`, with a note saying
    /// why.
    pub fn finish(self) -> Utilization {
        let nvml = &*self.probe.nvml;
        // Every end reading first, then the arithmetic.
        let ends: Vec<_> = self
            .devices
            .iter()
            .map(|d| {
                let gpm = d.gpm_start.as_ref().ok().map(|_| gpm_sample(&d.device));
                let nvlink =
                    [nvlink_kib(nvml, &d.device, FI_NVLINK_DATA_TX), nvlink_kib(nvml, &d.device, FI_NVLINK_DATA_RX)];
                (gpm, nvlink)
            })
            .collect();
        let window = self.started.elapsed();
        let ended_unix_us = unix_us();
        let devices = self
            .devices
            .into_iter()
            .zip(ends)
            .map(|(d, (gpm_end, nvlink_end))| {
                let mut u = DeviceUtilization {
                    ordinal: d.ordinal,
                    uuid: d.uuid,
                    name: d.name,
                    sm_source: SmSource::Unavailable,
                    sm_activity_pct: None,
                    sm_occupancy_pct: None,
                    gpu_busy_pct: None,
                    dram_bw_pct: None,
                    nvlink_tx_bytes: None,
                    nvlink_rx_bytes: None,
                    notes: Vec::new(),
                };
                let gpm_ok = match (d.gpm_start, gpm_end) {
                    (Ok(start), Some(Ok(end))) if window >= self.probe.min_window => {
                        gpm_figures(nvml, &start, &end, &mut u)
                    }
                    (Ok(_), Some(Ok(_))) => {
                        u.notes.push(format!(
                            "GPM: window of {:.1} ms is shorter than NVML's {} ms counter refresh; no GPM figures",
                            window.as_secs_f64() * 1e3,
                            self.probe.min_window.as_millis()
                        ));
                        // Too short for the utilization samples as well: they come further apart.
                        true
                    }
                    (Err(e), _) | (_, Some(Err(e))) => {
                        u.notes.push(format!("GPM: {e}"));
                        false
                    }
                    (Ok(_), None) => false,
                };
                if !gpm_ok {
                    sample_figures(&d.device, self.started_unix_us, ended_unix_us, &mut u);
                }
                let [tx, rx] = nvlink_end;
                let [tx0, rx0] = d.nvlink_start;
                u.nvlink_tx_bytes = nvlink_delta("NVLink TX", tx0, tx, &mut u.notes);
                u.nvlink_rx_bytes = nvlink_delta("NVLink RX", rx0, rx, &mut u.notes);
                u
            })
            .collect();
        Utilization::from_devices(window.as_secs_f64(), devices)
    }
}

fn gpm_sample<'n>(device: &Device<'n>) -> Result<GpmSample<'n>, NvmlError> {
    match device.gpm_support() {
        Ok(true) => device.gpm_sample(),
        Ok(false) => Err(NvmlError::NotSupported),
        Err(e) => Err(e),
    }
}

/// Fills the GPM figures; `false` (and a note) when NVML gave none.
fn gpm_figures(nvml: &Nvml, start: &GpmSample<'_>, end: &GpmSample<'_>, u: &mut DeviceUtilization) -> bool {
    let results = match nvml_wrapper::gpm::gpm_metrics_get(nvml, start, end, &GPM_METRICS) {
        Ok(results) => results,
        Err(e) => {
            u.notes.push(format!("GPM metrics: {e}"));
            return false;
        }
    };
    let mut values = [None; GPM_METRICS.len()];
    for ((slot, result), id) in values.iter_mut().zip(results).zip(GPM_METRICS) {
        match result {
            Ok(r) if r.value.is_finite() => *slot = Some(r.value.clamp(0.0, 100.0)),
            Ok(r) => u.notes.push(format!("GPM {id:?}: not a number ({})", r.value)),
            Err(e) => u.notes.push(format!("GPM {id:?}: {e}")),
        }
    }
    [u.sm_activity_pct, u.sm_occupancy_pct, u.gpu_busy_pct, u.dram_bw_pct] = values;
    if u.sm_activity_pct.is_some() {
        u.sm_source = SmSource::Gpm;
    }
    u.sm_activity_pct.is_some()
}

/// Fills SM activity (and GPU busy) from the driver's utilization samples in the window.
fn sample_figures(device: &Device<'_>, start_us: u64, end_us: u64, u: &mut DeviceUtilization) {
    // One sample before the window bounds the first period inside it: ask from a second earlier.
    let samples = match device.samples(Sampling::GpuUtilization, start_us.saturating_sub(1_000_000)) {
        Ok(samples) => samples,
        Err(NvmlError::NotFound) => Vec::new(),
        Err(e) => {
            u.notes.push(format!("utilization samples: {e}"));
            return;
        }
    };
    let points: Vec<(u64, f64)> = samples
        .iter()
        .map(|s| {
            let v = match s.value {
                SampleValue::F64(v) => v,
                SampleValue::U32(v) => f64::from(v),
                SampleValue::U64(v) => v as f64,
                SampleValue::I64(v) => v as f64,
            };
            (s.timestamp, v)
        })
        .collect();
    match covered_sample_mean(&points, start_us, end_us) {
        Some(pct) => {
            u.sm_source = SmSource::UtilizationSamples;
            u.sm_activity_pct = Some(pct);
            u.gpu_busy_pct = Some(pct);
        }
        None => u.notes.push(format!(
            "utilization samples: none covers the {:.1} ms window (the driver samples less often)",
            (end_us.saturating_sub(start_us)) as f64 / 1e3
        )),
    }
}

fn nvlink_delta(
    what: &str,
    start: Result<u64, String>,
    end: Result<u64, String>,
    notes: &mut Vec<String>,
) -> Option<u64> {
    match (start, end) {
        (Ok(a), Ok(b)) => {
            let delta = kib_counter_delta_bytes(a, b);
            if delta.is_none() {
                notes.push(format!("{what}: counter went back from {a} to {b} KiB (reset)"));
            }
            delta
        }
        (Err(e), _) | (_, Err(e)) => {
            notes.push(format!("{what}: {e}"));
            None
        }
    }
}

/// One NVLink counter (KiB): every link at once, else link by link summed; the error when no link answers
/// (GPUs without NVLink answer "not supported").
fn nvlink_kib(nvml: &Nvml, device: &Device<'_>, field: u32) -> Result<u64, String> {
    match field_value_u64(nvml, device, &[(field, ALL_LINKS)]).remove(0) {
        Ok(v) => Ok(v),
        Err(all) => {
            let links: Vec<(u32, u32)> = (0..nvml_sys::NVML_NVLINK_MAX_LINKS).map(|l| (field, l)).collect();
            let per_link: Vec<u64> = field_value_u64(nvml, device, &links).into_iter().filter_map(Result::ok).collect();
            if per_link.is_empty() {
                Err(all.to_string())
            } else {
                Ok(per_link.iter().fold(0, |a, b| a.saturating_add(*b)))
            }
        }
    }
}

/// `nvmlDeviceGetFieldValues` for (field, scope) pairs, each as an unsigned integer. nvml-wrapper's own
/// call leaves the scope at 0 (link 0 alone), hence the raw one.
fn field_value_u64(nvml: &Nvml, device: &Device<'_>, fields: &[(u32, u32)]) -> Vec<Result<u64, NvmlError>> {
    let Ok(sym) = nvml.lib().nvmlDeviceGetFieldValues.as_ref() else {
        return fields.iter().map(|_| Err(NvmlError::FailedToLoadSymbol("nvmlDeviceGetFieldValues".into()))).collect();
    };
    let mut values: Vec<nvml_sys::nvmlFieldValue_t> = fields
        .iter()
        .map(|&(field, scope)| {
            // SAFETY: nvmlFieldValue_t is plain data (integers and a union of numbers): all-zero is valid.
            let mut v: nvml_sys::nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = field;
            v.scopeId = scope;
            v
        })
        .collect();
    // SAFETY: the device handle is live while `nvml` is; `values` holds `fields.len()` initialised entries
    // that NVML fills in place.
    let code = unsafe { sym(device.handle(), values.len() as i32, values.as_mut_ptr()) };
    if nvml_wrapper::error::nvml_try(code).is_err() {
        return fields.iter().map(|_| Err(NvmlError::from(code))).collect();
    }
    values
        .iter()
        .map(|v| {
            nvml_wrapper::error::nvml_try(v.nvmlReturn)?;
            // SAFETY: `valueType` says which member of the union NVML wrote.
            let value = unsafe {
                match v.valueType {
                    nvml_sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => u64::from(v.value.uiVal),
                    nvml_sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG => v.value.ulVal,
                    nvml_sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => v.value.ullVal,
                    nvml_sys::nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG => v.value.sllVal.max(0) as u64,
                    nvml_sys::nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT => v.value.siVal.max(0) as u64,
                    nvml_sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT => u64::from(v.value.usVal),
                    _ => return Err(NvmlError::UnexpectedVariant(v.valueType)),
                }
            };
            Ok(value)
        })
        .collect()
}

fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// CUDA's UUID (`GPU-…`, NVML's spelling) and PCI bus id of the GPU `ordinal`.
fn cuda_identity(ordinal: usize) -> Result<(String, String), UtilError> {
    use cudarc::driver::{result, sys};
    let fail = |reason: String| UtilError::Cuda { ordinal, reason };
    let count = crate::gpu::device_count().map_err(|e| fail(e.to_string()))?;
    if ordinal >= count {
        return Err(fail(format!("no such GPU ({count} visible)")));
    }
    let dev = result::device::get(ordinal as i32).map_err(|e| fail(format!("cuDeviceGet: {e}")))?;
    let uuid = result::device::get_uuid(dev).map_err(|e| fail(format!("cuDeviceGetUuid: {e}")))?;
    let mut pci = [0 as c_char; 64];
    // SAFETY: `pci` is a writable buffer of the length passed; `dev` is a device handle from cuDeviceGet.
    unsafe { sys::cuDeviceGetPCIBusId(pci.as_mut_ptr(), pci.len() as i32, dev) }
        .result()
        .map_err(|e| fail(format!("cuDeviceGetPCIBusId: {e}")))?;
    // SAFETY: the driver wrote a NUL-terminated string into the zeroed buffer, which keeps its last NUL.
    let pci = unsafe { CStr::from_ptr(pci.as_ptr()) }.to_string_lossy().into_owned();
    Ok((format_uuid(&uuid.bytes.map(|b| b as u8)), pci))
}

/// 16 bytes as NVML writes a GPU UUID: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex = |r: std::ops::Range<usize>| bytes[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("GPU-{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(sm: Option<f64>, tx: Option<u64>) -> DeviceUtilization {
        DeviceUtilization {
            ordinal: 0,
            uuid: "GPU-0".into(),
            name: "test".into(),
            sm_source: if sm.is_some() { SmSource::Gpm } else { SmSource::Unavailable },
            sm_activity_pct: sm,
            sm_occupancy_pct: None,
            gpu_busy_pct: sm,
            dram_bw_pct: None,
            nvlink_tx_bytes: tx,
            nvlink_rx_bytes: tx.map(|t| t / 2),
            notes: Vec::new(),
        }
    }

    #[test]
    fn missing_library_is_nvml_not_found() {
        let err = UtilizationProbe::open_library("libnvidia-ml-does-not-exist.so.0").unwrap_err();
        assert!(matches!(err, UtilError::NvmlNotFound { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("libnvidia-ml.so.1") && text.contains("driver"), "{text}");
    }

    #[test]
    fn counter_deltas() {
        assert_eq!(kib_counter_delta_bytes(10, 10), Some(0));
        assert_eq!(kib_counter_delta_bytes(10, 13), Some(3 * 1024));
        // A reset, not a wrap: nothing can be said.
        assert_eq!(kib_counter_delta_bytes(13, 10), None);
        assert_eq!(kib_counter_delta_bytes(0, u64::MAX), Some(u64::MAX));
        let mut notes = Vec::new();
        assert_eq!(nvlink_delta("TX", Ok(5), Ok(4), &mut notes), None);
        assert_eq!(nvlink_delta("TX", Err("Not supported".into()), Ok(4), &mut notes), None);
        assert_eq!(nvlink_delta("TX", Ok(1), Ok(2), &mut notes), Some(1024));
        assert_eq!(notes.len(), 2, "{notes:?}");
    }

    #[test]
    fn sample_means_only_count_whole_periods() {
        // Samples every 100 ms at 1000, 1100, ... ms (µs timestamps); values 10, 20, 30, 40.
        let s: Vec<(u64, f64)> = (0..4).map(|i| (1_000_000 + i * 100_000, 10.0 * (i + 1) as f64)).collect();
        // A window from 1000 to 1300 ms holds the periods ending at 1100, 1200, 1300.
        assert_eq!(covered_sample_mean(&s, 1_000_000, 1_300_000), Some(30.0));
        // From 1050 ms: the period ending at 1100 began before the window.
        assert_eq!(covered_sample_mean(&s, 1_050_000, 1_300_000), Some(35.0));
        // Shorter than one period: nothing.
        assert_eq!(covered_sample_mean(&s, 1_120_000, 1_180_000), None);
        assert_eq!(covered_sample_mean(&[], 0, u64::MAX), None);
        // Order of the input does not matter.
        let mut r = s.clone();
        r.reverse();
        assert_eq!(covered_sample_mean(&r, 1_000_000, 1_300_000), Some(30.0));
    }

    #[test]
    fn totals_average_percentages_and_sum_bytes() {
        let u = Utilization::from_devices(
            0.5,
            vec![device(Some(80.0), Some(1_000_000_000)), device(Some(40.0), None), device(None, Some(0))],
        );
        assert_eq!(u.sm_activity_pct, Some(60.0));
        assert_eq!(u.nvlink_tx_bytes, Some(1_000_000_000));
        assert_eq!(u.nvlink_rx_bytes, Some(500_000_000));
        assert_eq!(u.nvlink_tx_gbps(), Some(2.0));
        assert_eq!(u.sm_occupancy_pct, None);
        // Measured zero stays zero; unavailable stays None.
        let idle = Utilization::from_devices(1.0, vec![device(Some(0.0), Some(0))]);
        assert_eq!(
            (idle.sm_activity_pct, idle.nvlink_tx_bytes, idle.nvlink_tx_gbps()),
            (Some(0.0), Some(0), Some(0.0))
        );
        let none = Utilization::from_devices(1.0, vec![device(None, None)]);
        assert_eq!((none.sm_activity_pct, none.nvlink_tx_bytes, none.nvlink_tx_gbps()), (None, None, None));
        assert_eq!(rate_gbps(Some(1), 0.0), None);
        assert_eq!(mean([f64::NAN, 2.0].into_iter()), Some(2.0));
    }

    #[test]
    fn serde_round_trip_keeps_none_and_zero_apart() {
        let mut d = device(None, Some(0));
        d.notes.push("GPM: Not supported".into());
        let u = Utilization::from_devices(0.25, vec![d, device(Some(12.5), None)]);
        let json = serde_json::to_string(&u).unwrap();
        assert!(json.contains("\"sm_source\":\"unavailable\"") && json.contains("\"nvlink_tx_bytes\":0"), "{json}");
        let back: Utilization = serde_json::from_str(&json).unwrap();
        assert_eq!(back, u);
        assert_eq!(back.devices[0].sm_activity_pct, None);
        assert_eq!(back.devices[0].nvlink_tx_bytes, Some(0));
        assert_eq!(back.devices[1].nvlink_tx_bytes, None);
    }

    #[test]
    fn uuid_spelling() {
        let bytes: [u8; 16] =
            [0x1f, 0x2e, 0x3d, 0x4c, 0x5b, 0x6a, 0x79, 0x88, 0x97, 0xa6, 0xb5, 0xc4, 0xd3, 0xe2, 0xf1, 0x00];
        assert_eq!(format_uuid(&bytes), "GPU-1f2e3d4c-5b6a-7988-97a6-b5c4d3e2f100");
    }
}
