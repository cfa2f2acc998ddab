//! What this machine has: the CUDA driver, its GPUs and how they are linked. This is the one place that
//! asks whether a driver exists, so every caller gets [`Error::NoDriver`] / [`Error::NoGpu`] instead of a
//! panic from the dynamic loader.

use std::ffi::{CString, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUdevice_attribute, CUresult};
use cudarc::driver::{CudaContext, DriverError, result};

use crate::error::{Error, cuda};
use crate::names::Device;
pub use crate::names::Link;

/// The oldest driver (as the CUDA version it supports, `major * 1000 + minor * 10`) ferrocomm calls into.
pub const MIN_DRIVER_VERSION: i32 = 12_000;

/// The CUDA driver as loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverInfo {
    /// The CUDA version the driver supports, `major * 1000 + minor * 10` (`13000` is 13.0).
    pub version: i32,
    /// GPUs it sees.
    pub gpu_count: usize,
}

impl DriverInfo {
    /// `"13.0"`.
    pub fn version_string(&self) -> String {
        version_string(self.version)
    }
}

fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The CUDA version this build's bindings target (cudarc's `cuda-13000` feature).
pub const BINDINGS_VERSION: &str = "13.0";

/// One GPU as the driver describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// The driver's ordinal.
    pub ordinal: usize,
    /// Marketing name (`NVIDIA H200`).
    pub name: String,
    /// Compute capability as `major * 10 + minor` (`90` is `sm_90`).
    pub compute_capability: u32,
    /// Device memory in bytes.
    pub memory_bytes: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Peak memory bandwidth in bytes per second, from the memory clock and bus width the driver reports
    /// (two transfers per clock): what a kernel's measured bandwidth is a fraction of.
    pub memory_peak_bytes_per_s: u64,
    /// PCI address, `domain:bus:device.0`.
    pub pci_bus_id: String,
}

#[derive(Debug, Clone, Copy)]
enum InitFailure {
    NoDriver,
    NoGpu,
    TooOld(i32),
    Cuda(&'static str, DriverError),
}

/// Loads and initialises the driver once per process.
pub fn driver() -> Result<DriverInfo, Error> {
    static INIT: OnceLock<Result<DriverInfo, InitFailure>> = OnceLock::new();
    INIT.get_or_init(init).map_err(|failure| match failure {
        InitFailure::NoDriver => Error::NoDriver,
        InitFailure::NoGpu => Error::NoGpu,
        InitFailure::TooOld(v) => {
            Error::DriverTooOld { found: version_string(v), needed: version_string(MIN_DRIVER_VERSION) }
        }
        InitFailure::Cuda(call, source) => Error::Cuda { call, device: None, source },
    })
}

fn init() -> Result<DriverInfo, InitFailure> {
    // SAFETY: only tries to dlopen the driver library by its usual names; loads no symbol.
    if !unsafe { sys::is_culib_present() } {
        return Err(InitFailure::NoDriver);
    }
    let mut version = 0;
    // SAFETY: cuDriverGetVersion writes one int and needs no cuInit; the symbol exists in every driver.
    match unsafe { sys::cuDriverGetVersion(&mut version) } {
        CUresult::CUDA_SUCCESS => {}
        CUresult::CUDA_ERROR_STUB_LIBRARY => return Err(InitFailure::NoDriver),
        other => return Err(InitFailure::Cuda("cuDriverGetVersion", DriverError(other))),
    }
    // Checked before any newer symbol is resolved: the loader panics on a missing one.
    if version < MIN_DRIVER_VERSION {
        return Err(InitFailure::TooOld(version));
    }
    match result::init() {
        Ok(()) => {}
        Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE)) => return Err(InitFailure::NoGpu),
        Err(DriverError(CUresult::CUDA_ERROR_STUB_LIBRARY)) => return Err(InitFailure::NoDriver),
        Err(e) => return Err(InitFailure::Cuda("cuInit", e)),
    }
    let count = result::device::get_count().map_err(|e| InitFailure::Cuda("cuDeviceGetCount", e))?;
    if count <= 0 {
        return Err(InitFailure::NoGpu);
    }
    Ok(DriverInfo { version, gpu_count: count as usize })
}

/// The variable naming the directory where CUDA's Multi-Process Service control daemon and its clients
/// meet.
pub const MPS_PIPE_DIRECTORY_ENV: &str = "CUDA_MPS_PIPE_DIRECTORY";

/// The MPS pipe directory when [`MPS_PIPE_DIRECTORY_ENV`] is unset.
pub const MPS_DEFAULT_PIPE_DIRECTORY: &str = "/tmp/nvidia-mps";

/// Whether CUDA's Multi-Process Service (MPS) serves this process. Processes that share a GPU run their
/// kernels at the same time only under MPS; without it they take turns, and every collective between
/// them waits for a switch (about 2 ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mps {
    /// A control daemon runs and listens in the pipe directory this process would connect through.
    Active {
        /// The pipe directory.
        pipe_directory: PathBuf,
    },
    /// No daemon listens in this process's pipe directory.
    Inactive {
        /// The pipe directory this process would connect through.
        pipe_directory: PathBuf,
        /// A control daemon runs, but listens in another directory (set [`MPS_PIPE_DIRECTORY_ENV`] to it).
        daemon_elsewhere: bool,
    },
}

impl fmt::Display for Mps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mps::Active { pipe_directory } => write!(
                f,
                "active (control daemon in {}): processes sharing a GPU run their kernels at once",
                pipe_directory.display()
            ),
            Mps::Inactive { pipe_directory, daemon_elsewhere: true } => write!(
                f,
                "a control daemon runs, but not in {} ({MPS_PIPE_DIRECTORY_ENV} of this process): set it to the \
                 daemon's directory, or processes sharing a GPU take turns",
                pipe_directory.display()
            ),
            Mps::Inactive { .. } => f.write_str(
                "not active: processes sharing a GPU take turns (about 2 ms per switch); as root, \
                 `nvidia-cuda-mps-control -d` starts it",
            ),
        }
    }
}

/// Whether MPS serves this process (see [`Mps`]): a control daemon process runs (found in `/proc`) and its
/// control pipe is in this process's pipe directory. Asks neither the driver nor the daemon.
pub fn mps() -> Mps {
    let pipe_directory = std::env::var_os(MPS_PIPE_DIRECTORY_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(MPS_DEFAULT_PIPE_DIRECTORY));
    mps_at(&pipe_directory)
}

/// Whether an MPS daemon serves clients whose pipe directory is `pipe_directory` (see [`mps`]).
pub fn mps_at(pipe_directory: &Path) -> Mps {
    mps_in(pipe_directory.to_owned(), mps_daemon_runs())
}

/// [`mps`] for a pipe directory, knowing whether a daemon process runs.
fn mps_in(pipe_directory: PathBuf, daemon: bool) -> Mps {
    if daemon && has_control_pipe(&pipe_directory) {
        Mps::Active { pipe_directory }
    } else {
        Mps::Inactive { pipe_directory, daemon_elsewhere: daemon }
    }
}

/// Whether a process named `nvidia-cuda-mps-control` runs (its `comm`, which the kernel cuts to 15 bytes:
/// `nvidia-cuda-mps`).
fn mps_daemon_runs() -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    procs.flatten().any(|p| {
        // `nvidia-cuda-mps-server` (which runs only under the daemon) reads the same once cut.
        std::fs::read_to_string(p.path().join("comm")).is_ok_and(|c| c.trim() == "nvidia-cuda-mps")
    })
}

/// Whether `dir` holds the daemon's control pipe (a socket or a FIFO named `control`).
fn has_control_pipe(dir: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(dir.join("control")).is_ok_and(|m| m.file_type().is_socket() || m.file_type().is_fifo())
}

/// Whether a driver and at least one GPU are usable (what `FERROCOMM_BACKEND=auto` asks).
pub fn gpus_available() -> bool {
    driver().is_ok()
}

pub(crate) fn cu_device(ordinal: usize) -> Result<sys::CUdevice, Error> {
    let info = driver()?;
    if ordinal >= info.gpu_count {
        return Err(Error::NoSuchGpu { ordinal, count: info.gpu_count });
    }
    result::device::get(ordinal as i32).map_err(cuda("cuDeviceGet", Some(Device::Cuda { ordinal })))
}

pub(crate) fn attribute(ordinal: usize, attr: CUdevice_attribute) -> Result<i32, Error> {
    let dev = cu_device(ordinal)?;
    // SAFETY: `dev` is a valid device handle of an initialised driver.
    unsafe { result::device::get_attribute(dev, attr) }
        .map_err(cuda("cuDeviceGetAttribute", Some(Device::Cuda { ordinal })))
}

/// The compute capability of GPU `ordinal`, `major * 10 + minor`.
pub fn compute_capability(ordinal: usize) -> Result<u32, Error> {
    let major = attribute(ordinal, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(ordinal, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok((major * 10 + minor) as u32)
}

/// Describes GPU `ordinal`.
pub fn gpu(ordinal: usize) -> Result<GpuInfo, Error> {
    let dev = cu_device(ordinal)?;
    let on = Some(Device::Cuda { ordinal });
    let name = result::device::get_name(dev).map_err(cuda("cuDeviceGetName", on))?;
    // SAFETY: `dev` is a valid device handle of an initialised driver.
    let memory_bytes = unsafe { result::device::total_mem(dev) }.map_err(cuda("cuDeviceTotalMem", on))?;
    let attr = |a| attribute(ordinal, a);
    let pci_bus_id = format!(
        "{:04x}:{:02x}:{:02x}.0",
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
    );
    Ok(GpuInfo {
        ordinal,
        name,
        compute_capability: compute_capability(ordinal)?,
        memory_bytes,
        multiprocessors: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        // The clock is in kHz, the width in bits.
        memory_peak_bytes_per_s: 2
            * 1000
            * attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?.max(0) as u64
            * attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?.max(0) as u64
            / 8,
        pci_bus_id,
    })
}

/// Describes every GPU the driver sees.
pub fn gpus() -> Result<Vec<GpuInfo>, Error> {
    (0..driver()?.gpu_count).map(gpu).collect()
}

/// How GPU `a` reaches GPU `b`'s memory. NVLink is inferred from native peer atomics, which PCIe
/// peer-to-peer does not offer; the driver API has no direct "is NVLink" query.
pub fn link(a: usize, b: usize) -> Result<Link, Error> {
    let (da, db) = (cu_device(a)?, cu_device(b)?);
    let on = Some(Device::Cuda { ordinal: a });
    if a == b {
        return Ok(Link::NvLink);
    }
    let mut can = 0;
    // SAFETY: both handles are valid devices; the call writes one int.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, da, db) }.result().map_err(cuda("cuDeviceCanAccessPeer", on))?;
    if can == 0 {
        return Ok(Link::None);
    }
    let mut atomics = 0;
    // SAFETY: as above.
    unsafe {
        sys::cuDeviceGetP2PAttribute(
            &mut atomics,
            sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
            da,
            db,
        )
    }
    .result()
    .map_err(cuda("cuDeviceGetP2PAttribute", on))?;
    Ok(if atomics != 0 { Link::NvLink } else { Link::Pcie })
}

/// A tiny hand-written kernel: `out[i] = 3 * i + 7` for `i < n`.
pub const SMOKE_PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry ferrocomm_smoke(
    .param .u64 out,
    .param .u32 n
)
{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.s32 %r2, %r3, %r4, %r2;
    setp.ge.u32 %p, %r2, %r1;
    @%p bra DONE;
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd3, %rd1, %rd2;
    mad.lo.s32 %r5, %r2, 3, 7;
    st.global.u32 [%rd3], %r5;
DONE:
    ret;
}
"#;

/// Loads [`SMOKE_PTX`] on GPU `ordinal` (the driver JIT-compiles it), runs it and checks its output.
/// Returns how long load + run took.
pub fn jit_smoke_test(ordinal: usize) -> Result<Duration, Error> {
    const N: u32 = 1000;
    let device = Device::Cuda { ordinal };
    let on = Some(device);
    cu_device(ordinal)?;
    let start = Instant::now();
    let ctx = CudaContext::new(ordinal).map_err(cuda("cuDevicePrimaryCtxRetain", on))?;
    ctx.bind_to_thread().map_err(cuda("cuCtxSetCurrent", on))?;
    let image = CString::new(SMOKE_PTX).expect("the embedded PTX has no NUL byte");
    // SAFETY: `image` is a NUL-terminated PTX string; the primary context is current.
    let module = unsafe { result::module::load_data(image.as_ptr().cast()) }.map_err(|source| Error::PtxLoad {
        module: "ferrocomm_smoke",
        cc: 80,
        device,
        source,
    })?;
    let outcome = run_smoke(module, N, on);
    // SAFETY: the module was loaded above and nothing of it is in use once `run_smoke` synchronised.
    let unloaded = unsafe { result::module::unload(module) }.map_err(cuda("cuModuleUnload", on));
    let out = outcome?;
    unloaded?;
    if let Some((index, &got)) = out.iter().enumerate().find(|&(i, &v)| v != 3 * i as u32 + 7) {
        return Err(Error::JitSmokeTest { device, index, got, expected: 3 * index as u32 + 7 });
    }
    Ok(start.elapsed())
}

fn run_smoke(module: sys::CUmodule, n: u32, on: Option<Device>) -> Result<Vec<u32>, Error> {
    let name = CString::new("ferrocomm_smoke").expect("no NUL");
    // SAFETY: `module` is loaded in the current context.
    let func = unsafe { result::module::get_function(module, name) }.map_err(cuda("cuModuleGetFunction", on))?;
    let bytes = n as usize * 4;
    // SAFETY: plain allocation in the current context, freed below.
    let buf = unsafe { result::malloc_sync(bytes) }.map_err(cuda("cuMemAlloc", on))?;
    let run = || -> Result<Vec<u32>, Error> {
        let mut out_ptr = buf;
        let mut n_arg = n;
        let mut params = [(&raw mut out_ptr).cast::<c_void>(), (&raw mut n_arg).cast::<c_void>()];
        // SAFETY: the parameter array matches the kernel's (.u64, .u32) signature; `buf` holds `n` u32s.
        unsafe {
            result::launch_kernel(func, (n.div_ceil(128), 1, 1), (128, 1, 1), 0, std::ptr::null_mut(), &mut params)
        }
        .map_err(cuda("cuLaunchKernel", on))?;
        result::ctx::synchronize().map_err(cuda("cuCtxSynchronize", on))?;
        let mut out = vec![0u32; n as usize];
        // SAFETY: `buf` holds `bytes` bytes and the kernel has finished.
        unsafe { result::memcpy_dtoh_sync(&mut out, buf) }.map_err(cuda("cuMemcpyDtoH", on))?;
        Ok(out)
    };
    let out = run();
    // SAFETY: allocated above; the context was synchronised (or the launch failed).
    let freed = unsafe { result::free_sync(buf) }.map_err(cuda("cuMemFree", on));
    let out = out?;
    freed?;
    Ok(out)
}

#[cfg(test)]
mod mps_tests {
    use super::*;

    #[test]
    fn mps_is_active_only_with_a_daemon_and_its_control_pipe_in_this_directory() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().to_owned();
        assert_eq!(mps_in(at.clone(), false), Mps::Inactive { pipe_directory: at.clone(), daemon_elsewhere: false });
        assert_eq!(mps_in(at.clone(), true), Mps::Inactive { pipe_directory: at.clone(), daemon_elsewhere: true });
        let pipe = at.join("control");
        nix::unistd::mkfifo(&pipe, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(mps_in(at.clone(), true), Mps::Active { pipe_directory: at.clone() });
        // A pipe left behind by a daemon that is gone serves nobody.
        assert!(matches!(mps_in(at, false), Mps::Inactive { daemon_elsewhere: false, .. }));
        assert!(
            Mps::Inactive { pipe_directory: "/x".into(), daemon_elsewhere: false }.to_string().contains("take turns")
        );
    }
}
