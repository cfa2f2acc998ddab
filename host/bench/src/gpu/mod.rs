//! The built-in modes that need nothing but the CUDA driver (and NCCL): [`cpu_mode`] and [`nccl_mode`],
//! plus what they share — opening the GPUs behind a run-time check for a driver, raw device buffers,
//! per-rank event timing and CUDA-graph capture.
//!
//! cudarc is built with `dynamic-loading`: nothing here links libcuda or libnccl, and every entry point
//! first checks that the library loads, so a machine without a GPU gets [`BackendError::NoDriver`]
//! instead of a panic.

pub mod cpu_mode;
pub mod nccl_mode;
pub mod stamp;

use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{CudaContext, CudaEvent, CudaGraph, CudaStream, DriverError, result};

use crate::backend::{Backend, BackendError, BackendOpener, OpenConfig};
use crate::model::Mode;

/// The modes that need nothing but the driver: `cpu` and `nccl`. `gpu` and `proxy` run ferrocomm's
/// kernels and come from [`FerroBackends`](crate::ferro::FerroBackends), which opens every mode; this one
/// says so.
#[derive(Debug, Default, Clone, Copy)]
pub struct BuiltinBackends;

impl BackendOpener for BuiltinBackends {
    fn open(&mut self, mode: Mode, config: &OpenConfig) -> Result<Box<dyn Backend>, BackendError> {
        let placement = || Placement::resolve(mode, config.gpus.as_deref(), ranks_per_gpu_env(mode)?);
        match mode {
            Mode::Cpu => Ok(Box::new(cpu_mode::CpuBackend::open(&placement()?)?)),
            Mode::Nccl => {
                let eager = match config.variant.as_deref() {
                    None => false,
                    Some(nccl_mode::EAGER_LABEL) => true,
                    Some(other) => {
                        return Err(BackendError::NotAvailable {
                            mode,
                            reason: format!("no variant {other:?} of nccl (it has \"{}\")", nccl_mode::EAGER_LABEL),
                        });
                    }
                };
                Ok(Box::new(nccl_mode::NcclBackend::open(&placement()?, eager)?))
            }
            Mode::Gpu | Mode::Proxy | Mode::Nvshmem => Err(BackendError::NotAvailable {
                mode,
                reason: "BuiltinBackends opens cpu and nccl only; open gpu, proxy and nvshmem with \
                         ferrocomm_bench::ferro::FerroBackends"
                    .into(),
            }),
            Mode::Anchor => {
                Err(BackendError::NotAvailable { mode, reason: "anchor rows are read with --anchors FILE".into() })
            }
        }
    }
}

/// Whether libcuda can be loaded on this machine (no GPU call is made).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library by its usual names; nothing is called in it.
    unsafe { sys::is_culib_present() }
}

/// The number of visible GPUs, after checking that a driver is present.
pub fn device_count() -> Result<usize, BackendError> {
    if !driver_present() {
        return Err(BackendError::NoDriver);
    }
    match result::init() {
        Ok(()) => {}
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => return Err(BackendError::NoDevice),
        Err(source) => return Err(BackendError::Driver { what: "initialising the driver (cuInit)".into(), source }),
    }
    let count = CudaContext::device_count().map_err(BackendError::driver("counting GPUs"))?;
    Ok(count.max(0) as usize)
}

/// The driver's CUDA version, e.g. "13.0", when a driver is present.
pub fn driver_version() -> Option<String> {
    if !driver_present() {
        return None;
    }
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer for the call.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result().ok()?;
    Some(format!("{}.{}", version / 1000, (version % 1000) / 10))
}

/// The GPU ordinals `mode` runs on, in rank order: `ordinals` checked against the GPUs the driver sees (each
/// once, at least `need` of them), or every visible GPU when `None`.
pub fn resolve_ordinals(mode: Mode, ordinals: Option<&[usize]>, need: usize) -> Result<Vec<usize>, BackendError> {
    let count = device_count()?;
    let ordinals: Vec<usize> = match ordinals {
        Some(list) => list.to_vec(),
        None => (0..count).collect(),
    };
    if let Some(&ordinal) = ordinals.iter().find(|o| **o >= count) {
        return Err(BackendError::NoSuchGpu { ordinal, count });
    }
    if let Some((_, &ordinal)) = ordinals.iter().enumerate().find(|(i, o)| ordinals[..*i].contains(o)) {
        return Err(BackendError::DuplicateGpu { ordinal });
    }
    if ordinals.len() < need {
        return Err(BackendError::TooFewGpus { mode, need, have: ordinals.len() });
    }
    Ok(ordinals)
}

/// Where a run's ranks live: the GPUs, in rank order, and how many ranks share each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// GPU ordinals, each once.
    pub ordinals: Vec<usize>,
    /// Ranks on each GPU: rank `r` runs on `ordinals[r / ranks_per_gpu]`.
    pub ranks_per_gpu: usize,
}

impl Placement {
    /// The placement of a run: `ordinals` (every visible GPU when `None`), with `ranks_per_gpu` ranks on each
    /// when given (`FERROCOMM_RANKS_PER_GPU`). Without it, one rank per GPU, except on a single GPU, which
    /// then holds two ranks: the one-GPU run, whose figures are intra-GPU (no NVLink between the ranks).
    pub fn resolve(
        mode: Mode,
        ordinals: Option<&[usize]>,
        ranks_per_gpu: Option<usize>,
    ) -> Result<Placement, BackendError> {
        let ranks_per_gpu = match ranks_per_gpu {
            Some(k) => k.max(1),
            None => {
                let ordinals = resolve_ordinals(mode, ordinals, 1)?;
                if ordinals.len() == 1 { 2 } else { 1 }
            }
        };
        let ordinals = resolve_ordinals(mode, ordinals, 2usize.div_ceil(ranks_per_gpu))?;
        Ok(Placement { ordinals, ranks_per_gpu })
    }

    /// Ranks in the run.
    pub fn world(&self) -> usize {
        self.ordinals.len() * self.ranks_per_gpu
    }

    /// The GPU of each rank, in rank order.
    pub fn rank_ordinals(&self) -> Vec<usize> {
        self.ordinals.iter().flat_map(|&o| std::iter::repeat_n(o, self.ranks_per_gpu)).collect()
    }

    /// Whether ranks share GPUs: every figure between them is then intra-GPU.
    pub fn shares_gpus(&self) -> bool {
        self.ranks_per_gpu > 1
    }
}

/// `FERROCOMM_RANKS_PER_GPU`, or `None` when unset.
pub fn ranks_per_gpu_env(mode: Mode) -> Result<Option<usize>, BackendError> {
    ferrocomm::team::ranks_per_gpu_from(|var| std::env::var(var).ok())
        .map_err(|e| BackendError::External { mode, source: Box::new(e) })
}

/// The GPUs of one run, by rank: a context and a non-blocking stream each (ranks that share a GPU share its
/// primary context and have streams of their own), peer access enabled between every pair of GPUs that
/// supports it.
#[derive(Debug)]
pub struct Gpus {
    /// Contexts (primary), by rank.
    pub ctxs: Vec<Arc<CudaContext>>,
    /// One stream per rank.
    pub streams: Vec<Arc<CudaStream>>,
    /// Where the ranks are.
    pub placement: Placement,
}

impl Gpus {
    /// Opens the GPUs of `placement` for its ranks.
    pub fn open(placement: &Placement) -> Result<Gpus, BackendError> {
        let mut ctxs = Vec::new();
        let mut streams = Vec::new();
        for ordinal in placement.rank_ordinals() {
            let ctx = CudaContext::new(ordinal).map_err(BackendError::driver(format!("opening GPU {ordinal}")))?;
            // SAFETY: this crate never hands cudarc's tracked slices to these contexts; every buffer is a
            // raw allocation whose ordering the backends keep with explicit stream and event waits.
            unsafe { ctx.disable_event_tracking() };
            streams
                .push(ctx.new_stream().map_err(BackendError::driver(format!("creating a stream on GPU {ordinal}")))?);
            ctxs.push(ctx);
        }
        let gpus = Gpus { ctxs, streams, placement: placement.clone() };
        gpus.enable_peer_access()?;
        Ok(gpus)
    }

    /// Ranks in the run.
    pub fn world(&self) -> usize {
        self.ctxs.len()
    }

    /// "0: NVIDIA H200" for each rank.
    pub fn describe(&self) -> Vec<String> {
        self.ctxs
            .iter()
            .map(|ctx| format!("{}: {}", ctx.ordinal(), ctx.name().unwrap_or_else(|_| "unknown GPU".to_owned())))
            .collect()
    }

    /// Enables peer access between every pair that supports it (copies between the others go through
    /// the host, which the figures would show).
    fn enable_peer_access(&self) -> Result<(), BackendError> {
        for (i, a) in self.ctxs.iter().enumerate() {
            for (j, b) in self.ctxs.iter().enumerate() {
                if a.ordinal() == b.ordinal() {
                    continue;
                }
                let mut can = 0;
                // SAFETY: both devices come from live contexts; `can` is a valid out-pointer.
                unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()) }
                    .result()
                    .map_err(BackendError::driver(format!("asking whether GPU {i} can reach GPU {j}")))?;
                if can == 0 {
                    continue;
                }
                a.bind_to_thread().map_err(BackendError::driver(format!("binding GPU {i}")))?;
                // SAFETY: `b` is a live context of another device; flags must be 0.
                match unsafe { sys::cuCtxEnablePeerAccess(b.cu_ctx(), 0) }.result() {
                    Ok(()) | Err(DriverError(sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)) => {}
                    Err(source) => {
                        return Err(BackendError::Driver { what: format!("enabling peer access {i} → {j}"), source });
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits until every rank's stream is idle.
    pub fn synchronize(&self) -> Result<(), BackendError> {
        for (rank, stream) in self.streams.iter().enumerate() {
            stream.synchronize().map_err(BackendError::driver(format!("waiting for GPU rank {rank}")))?;
        }
        Ok(())
    }
}

/// A raw device allocation, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    ptr: CUdeviceptr,
    bytes: usize,
}

impl DeviceBuffer {
    /// Allocates `bytes` (at least 1) on `ctx`'s device, zeroed.
    pub fn zeroed(ctx: &Arc<CudaContext>, bytes: usize) -> Result<DeviceBuffer, BackendError> {
        let what = || format!("allocating {bytes} bytes on GPU {}", ctx.ordinal());
        ctx.bind_to_thread().map_err(BackendError::driver(what()))?;
        let bytes = bytes.max(1);
        // SAFETY: the context is current; the size is non-zero.
        let ptr = unsafe { result::malloc_sync(bytes) }.map_err(BackendError::driver(what()))?;
        let buffer = DeviceBuffer { ctx: ctx.clone(), ptr, bytes };
        // SAFETY: `ptr` is a live allocation of `bytes` bytes in the current context.
        unsafe { result::memset_d8_sync(ptr, 0, bytes) }.map_err(BackendError::driver(what()))?;
        buffer.settle()?;
        Ok(buffer)
    }

    /// The device address.
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Capacity in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Waits for the whole context. The "synchronous" memset and pageable host-to-device copy run on the
    /// legacy stream, which the non-blocking streams do not wait for, and may return before the device is
    /// done: without this, a later copy on a rank's stream could race them.
    fn settle(&self) -> Result<(), BackendError> {
        self.ctx.synchronize().map_err(BackendError::driver(format!("waiting for GPU {}", self.ctx.ordinal())))
    }

    /// Copies `data` to the start of the buffer and waits until it landed (the caller has idled the
    /// streams using the buffer).
    pub fn write(&self, data: &[u8]) -> Result<(), BackendError> {
        assert!(data.len() <= self.bytes, "write of {} bytes into a {}-byte buffer", data.len(), self.bytes);
        self.ctx.bind_to_thread().map_err(BackendError::driver("binding a context"))?;
        // SAFETY: the destination holds at least `data.len()` bytes (checked above).
        unsafe { result::memcpy_htod_sync(self.ptr, data) }.map_err(BackendError::driver("copying to a GPU"))?;
        self.settle()
    }

    /// Zeroes the first `len` bytes and waits until done.
    pub fn clear(&self, len: usize) -> Result<(), BackendError> {
        self.ctx.bind_to_thread().map_err(BackendError::driver("binding a context"))?;
        // SAFETY: the buffer holds at least `len.min(bytes)` bytes.
        unsafe { result::memset_d8_sync(self.ptr, 0, len.min(self.bytes)) }.map_err(BackendError::driver("zeroing"))?;
        self.settle()
    }

    /// Reads the first `len` bytes (synchronous; the caller has idled the streams using it).
    pub fn read(&self, len: usize) -> Result<Vec<u8>, BackendError> {
        let mut out = vec![0u8; len.min(self.bytes)];
        self.ctx.bind_to_thread().map_err(BackendError::driver("binding a context"))?;
        // SAFETY: the source holds at least `out.len()` bytes.
        unsafe { result::memcpy_dtoh_sync(&mut out, self.ptr) }.map_err(BackendError::driver("copying from a GPU"))?;
        Ok(out)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from `malloc_sync` in this context and is freed once; callers synchronise
            // the streams that used it before dropping (backends drop buffers only when idle).
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// A send and a receive buffer per rank, grown (never shrunk) to the largest size asked for.
#[derive(Debug, Default)]
pub struct Buffers {
    /// Send buffers, by rank.
    pub send: Vec<DeviceBuffer>,
    /// Receive buffers, by rank.
    pub recv: Vec<DeviceBuffer>,
}

impl Buffers {
    /// Whether every rank's buffers already hold `bytes` (else [`Buffers::ensure`] reallocates them).
    pub fn fit(&self, gpus: &Gpus, bytes: usize) -> bool {
        self.send.len() == gpus.world()
            && self.recv.len() == gpus.world()
            && self.send.iter().chain(&self.recv).all(|b| b.bytes() >= bytes)
    }

    /// Makes every rank's buffers hold at least `bytes`.
    pub fn ensure(&mut self, gpus: &Gpus, bytes: usize) -> Result<(), BackendError> {
        if self.fit(gpus, bytes) {
            return Ok(());
        }
        gpus.synchronize()?;
        // Free first: two generations of 1 GiB buffers need not fit at once.
        self.send.clear();
        self.recv.clear();
        for ctx in &gpus.ctxs {
            self.send.push(DeviceBuffer::zeroed(ctx, bytes)?);
            self.recv.push(DeviceBuffer::zeroed(ctx, bytes)?);
        }
        Ok(())
    }
}

/// A pair of timing events per rank.
#[derive(Debug)]
pub struct Timer {
    start: Vec<CudaEvent>,
    end: Vec<CudaEvent>,
}

impl Timer {
    /// Timing events on every rank of `gpus`.
    pub fn new(gpus: &Gpus) -> Result<Timer, BackendError> {
        let event = |ctx: &Arc<CudaContext>| {
            ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(BackendError::driver("creating an event"))
        };
        Ok(Timer {
            start: gpus.ctxs.iter().map(event).collect::<Result<_, _>>()?,
            end: gpus.ctxs.iter().map(event).collect::<Result<_, _>>()?,
        })
    }

    /// Records the start on the streams of `ranks`.
    pub fn start(&self, gpus: &Gpus, ranks: &[usize]) -> Result<(), BackendError> {
        for &r in ranks {
            self.start[r].record(&gpus.streams[r]).map_err(BackendError::driver("recording an event"))?;
        }
        Ok(())
    }

    /// Records the end on the streams of `ranks`.
    pub fn stop(&self, gpus: &Gpus, ranks: &[usize]) -> Result<(), BackendError> {
        for &r in ranks {
            self.end[r].record(&gpus.streams[r]).map_err(BackendError::driver("recording an event"))?;
        }
        Ok(())
    }

    /// Waits for the end events and returns the longest start-to-end time over `ranks`, in µs.
    pub fn elapsed_us(&self, ranks: &[usize]) -> Result<f64, BackendError> {
        let mut longest = 0.0f64;
        for &r in ranks {
            let ms = self.start[r].elapsed_ms(&self.end[r]).map_err(BackendError::driver("reading event times"))?;
            longest = longest.max(f64::from(ms) * 1e3);
        }
        Ok(longest)
    }
}

/// Captures what `enqueue` puts on the streams of `ranks` into one CUDA graph, rooted on the first rank's
/// stream: the other streams join the capture through an event recorded on the root (a fork), and the
/// root waits on each of them at the end (a join). Replaying it on the root runs every rank's part.
///
/// NCCL needs this shape: the calls of one `ncclGroupStart/End` must all be captured into the same graph,
/// so one graph per rank fails. The capture is relaxed, because NCCL may call the runtime in ways a
/// thread-local capture refuses (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`) while it enqueues.
pub fn capture_joined(
    gpus: &Gpus,
    ranks: &[usize],
    enqueue: impl FnOnce() -> Result<(), BackendError>,
) -> Result<CudaGraph, BackendError> {
    let Some(&root) = ranks.first() else {
        return Err(BackendError::Driver {
            what: "capturing a graph of no ranks".into(),
            source: DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE),
        });
    };
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    let streams = &gpus.streams;
    streams[root]
        .begin_capture(mode)
        .map_err(|source| BackendError::Driver { what: format!("starting a graph capture on rank {root}"), source })?;
    let mut outcome = ranks[1..].iter().try_for_each(|&r| {
        streams[r]
            .join(&streams[root])
            .map_err(BackendError::driver(format!("joining rank {r}'s stream to the capture")))
    });
    if outcome.is_ok() {
        outcome = enqueue();
    }
    // Every forked stream must rejoin the root, or ending the capture fails (and the streams stay broken).
    for &r in &ranks[1..] {
        let joined = streams[root].join(&streams[r]);
        if outcome.is_ok() {
            outcome = joined.map_err(BackendError::driver(format!("joining rank {r}'s stream back to the root")));
        }
    }
    let ended = streams[root].end_capture(sys::CUgraphInstantiate_flags(0));
    outcome?;
    match ended {
        Ok(Some(graph)) => Ok(graph),
        Ok(None) => Err(BackendError::Driver {
            what: format!("ending the graph capture on rank {root} (empty graph)"),
            source: DriverError(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        }),
        Err(source) => Err(BackendError::Driver { what: format!("ending the graph capture on rank {root}"), source }),
    }
}
