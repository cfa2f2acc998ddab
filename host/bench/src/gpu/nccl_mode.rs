//! The `nccl` mode: NCCL (libnccl.so.2, loaded at run time) with one communicator per GPU in this one
//! process (`ncclCommInitAll`), every call of a step in one `ncclGroupStart/End`.
//!
//! - all-reduce, all-gather: the collectives;
//! - all-to-all: grouped `ncclSend`/`ncclRecv` of one chunk per peer (what torch's all_to_all_single does);
//! - ping-pong: a grouped send 0 → 1 then a grouped send 1 → 0; put: a grouped send 0 → 1.
//!
//! The `nccl` series captures a trial's operations into one CUDA graph spanning every rank's stream
//! ([`capture_joined`]: NCCL wants a group's calls in one graph) and times its replay, as the gpu mode is
//! timed; if a capture fails, that operation falls back to eager launches (the data says `graph: false`,
//! and a note says why). The `nccl-eager` series ([`EAGER_LABEL`]) launches every call from the host.
//! Both also time isolated operations: each between clock-stamp kernels on every rank's stream
//! ([`StampSlots`]), captured into one graph for `nccl`, launched eagerly for `nccl-eager`.

use std::ffi::CStr;

use cudarc::driver::CudaGraph;
use cudarc::driver::sys::CUdeviceptr;
use cudarc::nccl::result::{self as nccl, NcclError};
use cudarc::nccl::sys;

use crate::backend::{Backend, BackendError, Request, Timing};
use crate::cputime::thread_cpu_time;
use crate::gpu::stamp::StampSlots;
use crate::gpu::{Buffers, Gpus, Placement, Timer, capture_joined};
use crate::model::{Dtype, Mode, Operation};
use crate::reference;

/// Bytes the checks run at: a few pages plus a tail that is not a multiple of 16.
const CHECK_BYTES: u64 = 3 * 4096 + 24;

/// Whether libnccl can be loaded on this machine (nothing is called in it).
pub fn nccl_present() -> bool {
    // SAFETY: only tries to dlopen the library by its usual names.
    unsafe { sys::is_culib_present() }
}

/// NCCL's version, e.g. "2.28.3", when the library loads.
pub fn nccl_version() -> Option<String> {
    if !nccl_present() {
        return None;
    }
    let v = nccl::get_nccl_version().ok()?;
    Some(format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100))
}

fn nccl_error(what: impl Into<String>) -> impl FnOnce(NcclError) -> BackendError {
    let what = what.into();
    move |e| {
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any result code.
        let text = unsafe { CStr::from_ptr(sys::ncclGetErrorString(e.0)) };
        let message = format!("{} ({:?}; NCCL_DEBUG=WARN says more)", text.to_string_lossy(), e.0);
        BackendError::Nccl { what, message }
    }
}

fn nccl_type(dtype: Dtype) -> sys::ncclDataType_t {
    match dtype {
        Dtype::U8 => sys::ncclDataType_t::ncclUint8,
        Dtype::F16 => sys::ncclDataType_t::ncclFloat16,
        Dtype::Bf16 => sys::ncclDataType_t::ncclBfloat16,
        Dtype::F32 => sys::ncclDataType_t::ncclFloat32,
    }
}

/// One communicator per rank, destroyed on drop.
#[derive(Debug)]
struct Comms(Vec<sys::ncclComm_t>);

impl Drop for Comms {
    fn drop(&mut self) {
        for &comm in &self.0 {
            // SAFETY: each communicator came from ncclCommInitAll and is destroyed once; the backend
            // synchronised its streams before dropping.
            let _ = unsafe { nccl::comm_destroy(comm) };
        }
    }
}

/// Runs `body` between ncclGroupStart and ncclGroupEnd (the end is called even when `body` fails).
fn group(body: impl FnOnce() -> Result<(), BackendError>) -> Result<(), BackendError> {
    nccl::group_start().map_err(nccl_error("starting a group"))?;
    let outcome = body();
    let end = nccl::group_end().map_err(nccl_error("ending a group"));
    outcome.and(end.map(drop))
}

/// The label of the eager NCCL series (`nccl-eager`).
pub const EAGER_LABEL: &str = "eager";

/// The graph of one request, spanning the streams of every rank taking part.
struct Captured {
    key: (Operation, u64, Dtype, u64),
    graph: CudaGraph,
}

impl std::fmt::Debug for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Captured").field("key", &self.key).finish_non_exhaustive()
    }
}

/// NCCL, one process driving every GPU.
#[derive(Debug)]
pub struct NcclBackend {
    // Field order is drop order: graphs, stamps and events before communicators, buffers and contexts.
    captured: Option<Captured>,
    stamps: Option<StampSlots>,
    timer: Timer,
    comms: Comms,
    buffers: Buffers,
    gpus: Gpus,
    eager_only: Vec<Operation>,
    notes: Vec<String>,
    /// The `nccl-eager` series: no graphs.
    eager: bool,
}

impl NcclBackend {
    /// Opens the GPUs of `placement` (two at least, one rank each) and their communicators; `eager` for the
    /// `nccl-eager` series.
    pub fn open(placement: &Placement, eager: bool) -> Result<NcclBackend, BackendError> {
        if placement.shares_gpus() {
            return Err(BackendError::OneRankPerGpu {
                mode: Mode::Nccl,
                why: "a communicator with two ranks on one GPU fails with \"Duplicate GPU detected\"",
                ranks_per_gpu: placement.ranks_per_gpu,
                ordinals: placement.ordinals.clone(),
            });
        }
        let gpus = Gpus::open(placement)?;
        if !nccl_present() {
            return Err(BackendError::NoNccl);
        }
        let devices: Vec<i32> = gpus.ctxs.iter().map(|c| c.ordinal() as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `comms` has room for one communicator per listed device.
        unsafe { nccl::comm_init_all(comms.as_mut_ptr(), devices.len() as i32, devices.as_ptr()) }
            .map_err(nccl_error(format!("creating communicators on GPUs {devices:?} (ncclCommInitAll)")))?;
        Ok(NcclBackend {
            captured: None,
            stamps: None,
            timer: Timer::new(&gpus)?,
            comms: Comms(comms),
            buffers: Buffers::default(),
            gpus,
            eager_only: Vec::new(),
            notes: Vec::new(),
            eager,
        })
    }

    fn stream(&self, rank: usize) -> sys::cudaStream_t {
        self.gpus.streams[rank].cu_stream() as sys::cudaStream_t
    }

    fn send(&self, rank: usize, buf: CUdeviceptr, count: usize, dtype: Dtype, peer: usize) -> Result<(), BackendError> {
        // SAFETY: `buf` holds `count` elements (buffers sized by `Buffers::ensure`); comm and stream
        // belong to `rank`.
        unsafe { nccl::send(buf as _, count, nccl_type(dtype), peer as i32, self.comms.0[rank], self.stream(rank)) }
            .map(drop)
            .map_err(nccl_error(format!("sending from rank {rank} to rank {peer}")))
    }

    fn recv(&self, rank: usize, buf: CUdeviceptr, count: usize, dtype: Dtype, peer: usize) -> Result<(), BackendError> {
        // SAFETY: as in `send`, for the receive buffer.
        unsafe { nccl::recv(buf as _, count, nccl_type(dtype), peer as i32, self.comms.0[rank], self.stream(rank)) }
            .map(drop)
            .map_err(nccl_error(format!("receiving on rank {rank} from rank {peer}")))
    }

    /// Enqueues one operation of `op` on the streams.
    fn enqueue(&self, op: Operation, bytes: usize, dtype: Dtype) -> Result<(), BackendError> {
        let world = self.gpus.world();
        let (send, recv) = (&self.buffers.send, &self.buffers.recv);
        let elems = bytes / dtype.size();
        match op {
            Operation::AllReduce => group(|| {
                for r in 0..world {
                    // SAFETY: send and receive buffers of rank `r` hold `elems` elements.
                    unsafe {
                        nccl::all_reduce(
                            send[r].ptr() as _,
                            recv[r].ptr() as _,
                            elems,
                            nccl_type(dtype),
                            sys::ncclRedOp_t::ncclSum,
                            self.comms.0[r],
                            self.stream(r),
                        )
                    }
                    .map_err(nccl_error(format!("all-reduce on rank {r}")))?;
                }
                Ok(())
            }),
            Operation::AllGather => group(|| {
                for r in 0..world {
                    // SAFETY: rank `r` sends `elems / world` elements and receives `elems`.
                    unsafe {
                        nccl::all_gather(
                            send[r].ptr() as _,
                            recv[r].ptr() as _,
                            elems / world,
                            nccl_type(dtype),
                            self.comms.0[r],
                            self.stream(r),
                        )
                    }
                    .map_err(nccl_error(format!("all-gather on rank {r}")))?;
                }
                Ok(())
            }),
            Operation::AllToAll => group(|| {
                let chunk = bytes / world;
                for r in 0..world {
                    for p in 0..world {
                        let offset = (p * chunk) as u64;
                        self.send(r, send[r].ptr() + offset, elems / world, dtype, p)?;
                        self.recv(r, recv[r].ptr() + offset, elems / world, dtype, p)?;
                    }
                }
                Ok(())
            }),
            Operation::PutBandwidth => group(|| {
                self.send(0, send[0].ptr(), elems, dtype, 1)?;
                self.recv(1, recv[1].ptr(), elems, dtype, 0)
            }),
            Operation::PingPong => {
                group(|| {
                    self.send(0, send[0].ptr(), elems, dtype, 1)?;
                    self.recv(1, recv[1].ptr(), elems, dtype, 0)
                })?;
                group(|| {
                    self.send(1, recv[1].ptr(), elems, dtype, 0)?;
                    self.recv(0, recv[0].ptr(), elems, dtype, 1)
                })
            }
        }
    }

    /// Grows the buffers to `bytes`, first dropping graphs that point into the ones being replaced.
    fn ensure_buffers(&mut self, bytes: usize) -> Result<(), BackendError> {
        if !self.buffers.fit(&self.gpus, bytes) {
            self.gpus.synchronize()?;
            self.captured = None;
        }
        self.buffers.ensure(&self.gpus, bytes)
    }

    fn ranks(&self, op: Operation) -> Vec<usize> {
        if op.is_collective() { (0..self.gpus.world()).collect() } else { vec![0, 1] }
    }

    /// The graph for `request`, captured now if the cached one is for another request; `false` when
    /// capture does not work for this operation (it is then timed eagerly, and a note says why).
    fn graphs(&mut self, request: &Request, bytes: usize) -> Result<bool, BackendError> {
        let key = (request.op, request.bytes, request.dtype, request.iters);
        if self.captured.as_ref().is_some_and(|c| c.key == key) {
            return Ok(true);
        }
        self.gpus.synchronize()?;
        self.captured = None;
        let ranks = self.ranks(request.op);
        let enqueue = || (0..request.iters).try_for_each(|_| self.enqueue(request.op, bytes, request.dtype));
        match capture_joined(&self.gpus, &ranks, enqueue) {
            Ok(graph) => {
                self.captured = Some(Captured { key, graph });
                Ok(true)
            }
            Err(e) => {
                let note = format!("nccl {}: CUDA-graph capture failed ({e}); timed with eager launches", request.op);
                eprintln!("warning: {note}");
                self.notes.push(note);
                self.eager_only.push(request.op);
                self.gpus.synchronize()?;
                Ok(false)
            }
        }
    }

    /// Enqueues `ops` isolated operations, each between stamps `2i` and `2i + 1` on every rank of `ranks`.
    fn enqueue_isolated(&self, op: Operation, bytes: usize, dtype: Dtype, ops: u64) -> Result<(), BackendError> {
        let Some(stamps) = &self.stamps else { return Ok(()) };
        let ranks = self.ranks(op);
        for i in 0..ops as u32 {
            ranks.iter().try_for_each(|&r| stamps.stamp(&self.gpus, r, 2 * i))?;
            self.enqueue(op, bytes, dtype)?;
            ranks.iter().try_for_each(|&r| stamps.stamp(&self.gpus, r, 2 * i + 1))?;
        }
        Ok(())
    }
}

impl Drop for NcclBackend {
    fn drop(&mut self) {
        // Communicators and buffers must not go while work is queued.
        let _ = self.gpus.synchronize();
    }
}

impl Backend for NcclBackend {
    fn mode(&self) -> Mode {
        Mode::Nccl
    }

    fn queue_depth(&self) -> Option<u32> {
        None
    }

    fn devices(&self) -> Vec<String> {
        self.gpus.describe()
    }

    fn world(&self) -> usize {
        self.gpus.world()
    }

    fn supports(&self, _op: Operation) -> Result<(), String> {
        Ok(())
    }

    fn verify(&mut self, op: Operation, dtype: Dtype) -> Result<(), BackendError> {
        let world = self.gpus.world();
        let bytes = op.round_bytes(CHECK_BYTES, world, dtype) as usize;
        self.ensure_buffers(bytes)?;
        self.gpus.synchronize()?;
        let send_len = if op == Operation::AllGather { bytes / world } else { bytes };
        let inputs: Vec<Vec<u8>> = (0..world).map(|r| reference::pattern(r, send_len, dtype)).collect();
        for (r, input) in inputs.iter().enumerate() {
            self.buffers.send[r].write(input)?;
            self.buffers.recv[r].clear(bytes)?;
        }
        self.enqueue(op, bytes, dtype)?;
        self.gpus.synchronize()?;
        let check = |rank: usize, want: &[u8]| -> Result<(), BackendError> {
            let got = self.buffers.recv[rank].read(want.len())?;
            match reference::first_difference(&format!("rank {rank}'s output"), &got, want, dtype) {
                Some(detail) => Err(BackendError::Verification { mode: Mode::Nccl, op, detail }),
                None => Ok(()),
            }
        };
        match op {
            Operation::PingPong => {
                check(1, &inputs[0])?;
                check(0, &inputs[0])
            }
            Operation::PutBandwidth => check(1, &inputs[0]),
            Operation::AllReduce => (0..world).try_for_each(|r| check(r, &reference::all_reduce(&inputs, dtype))),
            Operation::AllGather => (0..world).try_for_each(|r| check(r, &reference::all_gather(&inputs))),
            Operation::AllToAll => (0..world).try_for_each(|r| check(r, &reference::all_to_all(&inputs, r))),
        }
    }

    fn run(&mut self, request: &Request) -> Result<Timing, BackendError> {
        let op = request.op;
        let bytes = request.bytes as usize;
        let iters = request.iters.max(1);
        let request = Request { iters, ..*request };
        self.ensure_buffers(bytes)?;
        let graph = request.graph && !self.eager && !self.eager_only.contains(&op) && self.graphs(&request, bytes)?;
        self.gpus.synchronize()?;
        let ranks = self.ranks(op);
        // A graph spanning the ranks replays on the first rank's stream and ends when every rank's part has.
        let timed = if graph { &ranks[..1] } else { &ranks[..] };
        self.timer.start(&self.gpus, timed)?;
        match (&self.captured, graph) {
            (Some(captured), true) => {
                captured.graph.launch().map_err(BackendError::driver("replaying the graph"))?;
            }
            _ => (0..iters).try_for_each(|_| self.enqueue(op, bytes, request.dtype))?,
        }
        self.timer.stop(&self.gpus, timed)?;
        let waiting = thread_cpu_time();
        let us = self.timer.elapsed_us(timed)?;
        let wait_cpu = thread_cpu_time().saturating_sub(waiting);
        let hops = if op == Operation::PingPong { 2.0 } else { 1.0 };
        Ok(Timing { us_per_op: us / iters as f64 / hops, graph, sms_used: None, wait_cpu })
    }

    fn label(&self) -> Option<String> {
        self.eager.then(|| EAGER_LABEL.to_owned())
    }

    fn gpu_ordinals(&self) -> Vec<usize> {
        self.gpus.placement.ordinals.clone()
    }

    fn isolated(&mut self, request: &Request) -> Result<Option<Vec<f64>>, BackendError> {
        let op = request.op;
        if op == Operation::PingPong {
            return Ok(None);
        }
        let (bytes, ops) = (request.bytes as usize, request.iters.max(1));
        self.ensure_buffers(bytes)?;
        self.gpus.synchronize()?;
        // The back-to-back graph goes: it is recaptured for the next point anyway.
        self.captured = None;
        if self.stamps.as_ref().is_none_or(|s| s.spans() < ops) {
            self.stamps = Some(StampSlots::new(&self.gpus, ops)?);
        }
        let ranks = self.ranks(op);
        let graph = if self.eager || self.eager_only.contains(&op) {
            None
        } else {
            let enqueue = || self.enqueue_isolated(op, bytes, request.dtype, ops);
            match capture_joined(&self.gpus, &ranks, enqueue) {
                Ok(graph) => Some(graph),
                Err(e) => {
                    // As for the back-to-back series: eager launches, and the report says why.
                    let note =
                        format!("nccl {op} isolated: CUDA-graph capture failed ({e}); timed with eager launches");
                    eprintln!("warning: {note}");
                    self.notes.push(note);
                    self.gpus.synchronize()?;
                    None
                }
            }
        };
        // The first pass warms up; the second is read.
        for _ in 0..2 {
            self.gpus.synchronize()?;
            if let Some(stamps) = &self.stamps {
                stamps.clear()?;
            }
            match &graph {
                Some(graph) => graph.launch().map_err(BackendError::driver("replaying the isolated graph"))?,
                None => self.enqueue_isolated(op, bytes, request.dtype, ops)?,
            }
        }
        self.gpus.synchronize()?;
        match &self.stamps {
            Some(stamps) => stamps.each_us(Mode::Nccl, &ranks, ops).map(Some),
            None => Ok(None),
        }
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = self.notes.clone();
        notes.push(if self.eager {
            "nccl-eager: every NCCL call launched from the host, one ncclGroupStart/End per operation over every \
             rank's communicator (one process drives every GPU)."
                .to_owned()
        } else {
            "nccl: a trial's NCCL calls captured into one CUDA graph spanning every rank's stream (the other streams \
             fork from the first rank's and join it at the end, since NCCL wants a group's calls in one graph), \
             timed with CUDA events around its replay."
                .to_owned()
        });
        notes
    }
}
