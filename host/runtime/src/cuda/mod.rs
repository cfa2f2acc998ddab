//! The CUDA backend, on cudarc's driver API: one primary context per GPU, one non-blocking stream per rank,
//! memory, modules ([`module`]), launches and graphs ([`launch`]), peer access ([`peer`]).

mod clock;
mod launch;
mod marks;
mod module;
mod peer;
mod shareable;
mod vmm;

use std::collections::HashMap;
use std::ffi::c_void;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUdevice_attribute, CUresult};
use cudarc::driver::{CudaContext, CudaStream, DriverError, result};

pub(crate) use launch::RankGraph;
use marks::Marks;
pub(crate) use module::LoadedModule;
use shareable::ShareableHeap;

use crate::error::{Error, cuda};
use crate::exec::{
    Captured, ErrorSlot, Exec, ExternalStream, Kernel, LaunchConfig, ParamPack, Partial, StreamState, TeamView,
};
use crate::names::Device;
use crate::size::ERROR_BUFFER_BYTES;
use crate::system;

/// One GPU of a team and the limits launches are checked against.
#[derive(Debug)]
pub(crate) struct CudaGpu {
    pub ordinal: usize,
    pub ctx: Arc<CudaContext>,
    pub cc: u32,
    pub multiprocessors: u32,
    pub max_threads_per_block: u32,
    pub max_block: [u32; 3],
    pub max_grid: [u32; 3],
    /// Dynamic + static shared memory a block may opt into.
    pub max_shared_optin: u32,
    /// Blocks per multiprocessor the driver reported, by (function, threads per block, dynamic shared bytes).
    pub occupancy: Mutex<HashMap<(usize, u32, u32), i32>>,
}

impl CudaGpu {
    fn open(ordinal: usize) -> Result<CudaGpu, Error> {
        let on = Some(Device::Cuda { ordinal });
        system::cu_device(ordinal)?;
        let ctx = CudaContext::new(ordinal).map_err(cuda("cuDevicePrimaryCtxRetain", on))?;
        let attr = |a: CUdevice_attribute| -> Result<u32, Error> { Ok(system::attribute(ordinal, a)?.max(0) as u32) };
        use CUdevice_attribute as A;
        Ok(CudaGpu {
            ordinal,
            cc: system::compute_capability(ordinal)?,
            multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            max_threads_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block: [
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid: [
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            max_shared_optin: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            occupancy: Mutex::new(HashMap::new()),
            ctx,
        })
    }

    fn device(&self) -> Device {
        Device::Cuda { ordinal: self.ordinal }
    }
}

/// One rank: its GPU, its stream, its module instances.
#[derive(Debug)]
pub(crate) struct CudaRank {
    pub gpu: usize,
    pub stream: Arc<CudaStream>,
    /// Keyed by [`KernelModule::key`](crate::KernelModule): each rank loads its own instance, so ranks
    /// sharing a GPU have their own `FERROCOMM_LAUNCH_CTX`.
    pub modules: Mutex<HashMap<usize, Arc<LoadedModule>>>,
    /// Where this rank's work on the caller's streams ends: what `idle` waits for besides its own stream.
    pub marks: Marks,
    /// The caller's streams found to belong to this rank's context, asked about once each. A handle the
    /// driver reuses for a stream of another context is not asked about again: its launches then fail with
    /// the driver's error instead of this check's.
    pub checked_streams: Mutex<std::collections::HashSet<usize>>,
}

/// The CUDA half of a team. Field order is drop order: modules and streams before contexts.
#[derive(Debug)]
pub(crate) struct CudaTeam {
    pub ranks: Vec<CudaRank>,
    pub gpus: Vec<CudaGpu>,
    /// Launch `#[kernel]`s with programmatic dependent launch where the PTX is for sm_90 or later. Off when
    /// ranks share a GPU: a rank's next kernel, launched early, could take the room the co-residency check
    /// counted on for another rank's current one, which this rank's current one waits for.
    pub programmatic_launch: bool,
    /// In a team that spans processes: the memory other processes map (every allocation comes from it).
    shareable: Option<ShareableHeap>,
}

impl CudaTeam {
    /// Opens the GPUs `ordinals`, enables peer access between every pair, and creates one stream per rank
    /// (`rank_gpu[r]` indexes `ordinals`).
    pub fn new(ordinals: &[usize], rank_gpu: &[usize], programmatic_launch: bool) -> Result<CudaTeam, Error> {
        system::driver()?;
        let gpus = ordinals.iter().map(|&o| CudaGpu::open(o)).collect::<Result<Vec<_>, _>>()?;
        peer::enable_all(&gpus)?;
        let ranks = rank_gpu
            .iter()
            .map(|&gpu| {
                let g = &gpus[gpu];
                let stream = g.ctx.new_stream().map_err(cuda("cuStreamCreate", Some(g.device())))?;
                Ok(CudaRank {
                    gpu,
                    stream,
                    modules: Mutex::new(HashMap::new()),
                    marks: Marks::default(),
                    checked_streams: Mutex::new(std::collections::HashSet::new()),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let shared_gpu = (1..rank_gpu.len()).any(|r| rank_gpu[..r].contains(&rank_gpu[r]));
        Ok(CudaTeam { ranks, gpus, programmatic_launch: programmatic_launch && !shared_gpu, shareable: None })
    }

    /// The one rank of this process in a team that spans processes, on GPU `ordinal`, with memory the
    /// other processes map. `programmatic_launch`: as for [`CudaTeam::new`] (the caller turns it off when
    /// ranks of other processes share the GPU).
    pub fn for_process(ordinal: usize, programmatic_launch: bool) -> Result<CudaTeam, Error> {
        let mut team = CudaTeam::new(&[ordinal], &[0], programmatic_launch)?;
        team.shareable = Some(ShareableHeap::new(Arc::clone(&team.gpus[0].ctx))?);
        Ok(team)
    }

    fn shareable_heap(&self) -> Result<&ShareableHeap, Error> {
        self.shareable
            .as_ref()
            .ok_or(Error::Unsupported { what: "sharing memory with other processes", backend: "cuda" })
    }

    pub fn gpu_of(&self, rank: usize) -> &CudaGpu {
        &self.gpus[self.ranks[rank].gpu]
    }

    fn on(&self, rank: usize) -> Option<Device> {
        Some(self.gpu_of(rank).device())
    }

    /// Makes rank `rank`'s context current on this thread; every driver call for the rank follows this.
    pub fn bind(&self, rank: usize) -> Result<&CudaRank, Error> {
        self.gpu_of(rank).ctx.bind_to_thread().map_err(cuda("cuCtxSetCurrent", self.on(rank)))?;
        Ok(&self.ranks[rank])
    }

    fn stream(&self, rank: usize) -> sys::CUstream {
        self.ranks[rank].stream.cu_stream()
    }

    /// The stream rank `rank`'s work goes to: the caller's, or its own.
    fn target(&self, rank: usize, caller: Option<&ExternalStream>) -> sys::CUstream {
        caller.map_or_else(|| self.stream(rank), ExternalStream::as_raw)
    }

    fn sync(&self, rank: usize) -> Result<(), Error> {
        self.ranks[rank].stream.synchronize().map_err(cuda("cuStreamSynchronize", self.on(rank)))
    }
}

impl Exec for CudaTeam {
    /// `bytes` zeroed bytes of device memory on `rank`'s GPU (256-byte aligned, as cuMemAlloc returns).
    fn alloc(&self, rank: usize, bytes: usize) -> Result<u64, Error> {
        self.bind(rank)?;
        if let Some(heap) = &self.shareable {
            return heap.alloc(bytes);
        }
        let on = self.on(rank);
        // SAFETY: the rank's context is current; the memory is zeroed below before anyone reads it.
        let ptr = unsafe { result::malloc_sync(bytes) }.map_err(cuda("cuMemAlloc", on))?;
        // SAFETY: `ptr` holds `bytes` bytes; the rank's stream belongs to the current context.
        let zeroed = unsafe { result::memset_d8_async(ptr, 0, bytes, self.stream(rank)) }
            .map_err(cuda("cuMemsetD8Async", on))
            .and_then(|()| self.sync(rank));
        if let Err(e) = zeroed {
            // SAFETY: allocated above and not handed out.
            let _ = unsafe { result::free_sync(ptr) };
            return Err(e);
        }
        Ok(ptr)
    }

    /// Frees an allocation of [`CudaTeam::alloc`]; no kernel may use it any more.
    unsafe fn free(&self, rank: usize, addr: u64, _bytes: usize) -> Result<(), Error> {
        self.bind(rank)?;
        if let Some(heap) = &self.shareable {
            heap.release(addr);
            return Ok(());
        }
        // SAFETY: `addr` came from `alloc` on this rank's context and the caller settled the team.
        unsafe { result::free_sync(addr) }.map_err(cuda("cuMemFree", self.on(rank)))
    }

    /// Copies host bytes to `dst` through the rank's stream and waits for the copy.
    unsafe fn write(&self, rank: usize, dst: u64, src: &[u8]) -> Result<(), Error> {
        if src.is_empty() {
            return Ok(());
        }
        self.bind(rank)?;
        // SAFETY: the caller checked `dst..dst + src.len()` lies in a live allocation of this rank; `src`
        // outlives the copy because the stream is synchronised before returning.
        unsafe { result::memcpy_htod_async(dst, src, self.stream(rank)) }
            .map_err(cuda("cuMemcpyHtoDAsync", self.on(rank)))?;
        self.sync(rank)
    }

    /// Copies device bytes at `src` into `dst` through the rank's stream and waits for the copy.
    unsafe fn read(&self, rank: usize, src: u64, dst: &mut [u8]) -> Result<(), Error> {
        if dst.is_empty() {
            return Ok(());
        }
        self.bind(rank)?;
        // SAFETY: as for `write`, with the roles swapped.
        unsafe { result::memcpy_dtoh_async(dst, src, self.stream(rank)) }
            .map_err(cuda("cuMemcpyDtoHAsync", self.on(rank)))?;
        self.sync(rank)
    }

    /// Sets `len` bytes at `dst` to `byte` and waits.
    unsafe fn memset(&self, rank: usize, dst: u64, byte: u8, len: usize) -> Result<(), Error> {
        if len == 0 {
            return Ok(());
        }
        self.bind(rank)?;
        // SAFETY: the caller checked the range lies in a live allocation of this rank.
        unsafe { result::memset_d8_async(dst, byte, len, self.stream(rank)) }
            .map_err(cuda("cuMemsetD8Async", self.on(rank)))?;
        self.sync(rank)
    }

    /// Whether everything queued on the rank's stream, and its work on the caller's streams, has finished
    /// (never blocks).
    fn idle(&self, rank: usize) -> Result<bool, Error> {
        self.bind(rank)?;
        // SAFETY: the stream is alive (owned by this rank) and its context is current.
        let own = match unsafe { sys::cuStreamQuery(self.stream(rank)) } {
            CUresult::CUDA_SUCCESS => true,
            CUresult::CUDA_ERROR_NOT_READY => false,
            other => {
                return Err(Error::Cuda { call: "cuStreamQuery", device: self.on(rank), source: DriverError(other) });
            }
        };
        Ok(own && self.ranks[rank].marks.passed().map_err(cuda("cuEventQuery", self.on(rank)))?)
    }

    unsafe fn copy(
        &self,
        rank: usize,
        dst: u64,
        src: u64,
        bytes: usize,
        stream: Option<&ExternalStream>,
        capturing: bool,
    ) -> Result<(), Error> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind(rank)?;
        let target = self.target(rank, stream);
        // SAFETY: the caller vouches both ranges are device-accessible and outlive the copy; the stream
        // belongs to the rank's (current) context.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, target) }
            .map_err(cuda("cuMemcpyDtoDAsync", self.on(rank)))?;
        if let (Some(stream), false) = (stream, capturing) {
            self.ranks[rank].marks.record(stream).map_err(cuda("cuEventRecord", self.on(rank)))?;
        }
        Ok(())
    }

    fn check_stream(&self, rank: usize, stream: &ExternalStream) -> Result<(), String> {
        // A framework binds the same few streams before every call: each is asked about once.
        if self.ranks[rank].checked_streams.lock().unwrap_or_else(|p| p.into_inner()).contains(&stream.id()) {
            return Ok(());
        }
        self.bind(rank).map_err(|e| e.to_string())?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: the caller vouched the stream is live (`ExternalStream::from_raw`); 0 is the legacy default
        // stream of the current context.
        let got = unsafe { sys::cuStreamGetCtx(stream.as_raw(), &mut ctx) };
        if got != CUresult::CUDA_SUCCESS {
            return Err(format!("cuStreamGetCtx failed ({got:?}): not a live CUDA stream"));
        }
        let gpu = self.gpu_of(rank);
        if ctx != gpu.ctx.cu_ctx() {
            return Err(format!(
                "it belongs to another context than {}'s primary context; launch on a stream of the primary \
                 context (as torch's and cudarc's are)",
                gpu.device()
            ));
        }
        self.ranks[rank].checked_streams.lock().unwrap_or_else(|p| p.into_inner()).insert(stream.id());
        Ok(())
    }

    fn stream_state(&self, rank: usize, stream: &ExternalStream) -> Result<StreamState, Error> {
        self.bind(rank)?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a live stream of the rank's (current) context; asking is legal during any capture.
        unsafe { sys::cuStreamIsCapturing(stream.as_raw(), &mut status) }
            .result()
            .map_err(cuda("cuStreamIsCapturing", self.on(rank)))?;
        match status {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Ok(StreamState::Running),
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => Ok(StreamState::Capturing),
            _ => Err(Error::Cuda {
                call: "cuStreamIsCapturing (the caller's capture was invalidated before this launch)",
                device: self.on(rank),
                source: DriverError(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
            }),
        }
    }

    fn check_memory(&self, rank: usize, addr: u64, bytes: usize) -> Result<(), String> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind(rank).map_err(|e| e.to_string())?;
        let gpu = self.gpu_of(rank);
        for (end, at) in [("first", addr), ("last", addr + bytes as u64 - 1)] {
            let mut ordinal: i32 = -1;
            // SAFETY: asks about an address; writes one int.
            let got = unsafe {
                sys::cuPointerGetAttribute(
                    (&raw mut ordinal).cast(),
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    at,
                )
            };
            if got != CUresult::CUDA_SUCCESS {
                return Err(format!("its {end} byte ({at:#x}) is not memory the CUDA driver knows ({got:?})"));
            }
            if ordinal != gpu.ordinal as i32 {
                return Err(format!("its {end} byte ({at:#x}) is on GPU {ordinal}, not on {}", gpu.device()));
            }
        }
        Ok(())
    }

    /// A rank's error buffer: pinned host memory mapped into every context, zeroed.
    fn alloc_error_buffer(&self, rank: usize) -> Result<ErrorSlot, Error> {
        self.bind(rank)?;
        let on = self.on(rank);
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: a plain pinned allocation; zeroed below before any kernel can see it.
        let host = unsafe { result::malloc_host(ERROR_BUFFER_BYTES, flags) }.map_err(cuda("cuMemHostAlloc", on))?;
        // SAFETY: `host` holds ERROR_BUFFER_BYTES writable bytes.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, ERROR_BUFFER_BYTES) };
        let mut device = 0;
        // SAFETY: `host` was allocated with DEVICEMAP; the rank's context is current.
        let mapped = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) }.result();
        if let Err(source) = mapped {
            // SAFETY: allocated above and not handed out.
            let _ = unsafe { result::free_host(host) };
            return Err(Error::Cuda { call: "cuMemHostGetDevicePointer", device: on, source });
        }
        Ok(ErrorSlot { host: host.cast(), device })
    }

    /// Frees an error buffer of [`CudaTeam::alloc_error_buffer`].
    fn clock_offsets(&self) -> Result<Vec<i64>, Error> {
        self.measure_clock_offsets()
    }

    fn make_current(&self, slot: usize) -> Result<(), Error> {
        self.bind(slot).map(|_| ())
    }

    fn cuda_stream(&self, rank: usize) -> Option<Arc<CudaStream>> {
        self.ranks.get(rank).map(|r| Arc::clone(&r.stream))
    }

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn export(&self, rank: usize, addr: u64, _bytes: usize) -> Result<OwnedFd, Error> {
        self.bind(rank)?;
        self.shareable_heap()?.export(addr)
    }

    fn import(&self, rank: usize, fd: BorrowedFd<'_>, bytes: usize) -> Result<u64, Error> {
        self.bind(rank)?;
        self.shareable_heap()?.import(fd, bytes)
    }

    unsafe fn unmap(&self, rank: usize, addr: u64, _bytes: usize) -> Result<(), Error> {
        self.bind(rank)?;
        self.shareable_heap()?.release(addr);
        Ok(())
    }

    unsafe fn free_error_buffer(&self, slot: ErrorSlot) -> Result<(), Error> {
        self.bind(0)?;
        // SAFETY: allocated by `alloc_error_buffer` and no kernel of the team runs.
        unsafe { result::free_host(slot.host.cast::<c_void>()) }.map_err(cuda("cuMemFreeHost", self.on(0)))
    }

    fn max_threads_per_block(&self, team: &dyn TeamView, kernel: &'static Kernel) -> Result<u32, Error> {
        self.kernel_thread_limit(team, kernel)
    }

    fn launch(
        &self,
        team: &dyn TeamView,
        kernel: &'static Kernel,
        cfg: LaunchConfig,
        packs: Vec<ParamPack>,
        streams: Option<&[ExternalStream]>,
        capturing: bool,
    ) -> Result<(), Partial> {
        self.launch_all(team, kernel, &cfg, &packs, streams, capturing)
    }

    fn begin_capture(&self) -> Result<(), Error> {
        self.begin_stream_capture()
    }

    fn end_capture(&self, keep: bool) -> Result<Captured, Error> {
        self.end_stream_capture(keep).map(Captured::new)
    }

    fn replay(&self, _team: &dyn TeamView, captured: &Captured) -> Result<(), Partial> {
        self.launch_graphs(captured.get::<Vec<RankGraph>>(self.name())?)
    }
}
