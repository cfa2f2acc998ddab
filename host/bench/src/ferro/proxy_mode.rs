//! The `proxy` mode: the device-side task queue of NVSHMEM's and MSCCL++'s proxies. The kernels
//! (`proxy_ping_pong`, `proxy_put`, one thread per rank) push put descriptors into their rank's ring
//! ([`Rings`]); the [`Proxy`] thread issues each as a copy-engine copy followed by the completion signal;
//! the kernels wait on the signals. Every round trip or put of a trial runs inside one launch, timed by
//! the kernel with `%globaltimer` (a put trial ends with one GPU acknowledgement from the receiver).
//!
//! The queue depth is the ring's slots: how many descriptors a kernel may publish before the proxy has
//! popped them. Ping-pong keeps one in flight, so depth does not matter there; back-to-back puts stall the
//! kernel on a full ring, and at depth 1 every put waits for the proxy to take the previous one.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use ferrocomm::{Device, LaunchConfig, SignalPadBuffer, SymBuffer, Team};
use ferrocomm_device::queue::HostQueues;
use ferrocomm_kernels::kernels::proxy::{ProxyDescriptor, proxy_pad, proxy_ping_pong, proxy_put};

use super::proxy_thread::{CopyEngine, CudaEngine, HostEngine, Proxy, SignalPath};
use super::ring::Rings;
use super::{bench_team, describe_team, iters_u32, runtime};
use crate::backend::{Backend, BackendError, OpenConfig, Request, Timing};
use crate::cputime::thread_cpu_time;
use crate::model::{Dtype, Mode, Operation};
use crate::reference::{first_difference, pattern};

/// A source and a destination buffer of one size on every rank.
#[derive(Debug)]
struct Buffers {
    src: SymBuffer<u8>,
    dst: SymBuffer<u8>,
}

/// Kernels that hand their puts to a host proxy thread.
#[derive(Debug)]
pub struct ProxyBackend {
    // Field order is drop order: the proxy stops (and waits for its copies) before the memory goes.
    proxy: Proxy,
    buffers: Option<Buffers>,
    out: SymBuffer<u64>,
    pad: SignalPadBuffer,
    rings: Arc<Rings>,
    team: &'static Team,
    depth: u32,
    engine: String,
    /// Set after a failed launch: the ring and signal state is then unknown, so the backend refuses to run.
    failed: Option<String>,
}

impl ProxyBackend {
    /// Opens the proxy mode with a ring of `config.queue_depth` slots per rank on the GPUs of `config`.
    pub fn open(config: &OpenConfig) -> Result<ProxyBackend, BackendError> {
        let team = bench_team(Mode::Proxy, config)?;
        let ctxs = (0..team.world())
            .map(|rank| match team.device(rank) {
                Ok(Device::Cuda { ordinal }) => {
                    CudaContext::new(ordinal).map_err(BackendError::driver(format!("opening GPU {ordinal}")))
                }
                Ok(other) => {
                    Err(BackendError::NotAvailable { mode: Mode::Proxy, reason: format!("{other} is not a GPU") })
                }
                Err(e) => Err(runtime(Mode::Proxy)(e)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rings = Rings::cuda(&ctxs, config.queue_depth as usize)?;
        let pad =
            SignalPadBuffer::new(team, "ferrocomm.bench.proxy", proxy_pad::SIGNALS).map_err(runtime(Mode::Proxy))?;
        let mut engine = CudaEngine::new(ctxs, SignalPath::PeerWrite)?;
        choose_signal_path(team, &mut engine)?;
        ProxyBackend::start(team, rings, pad, Box::new(engine), config.queue_depth)
    }

    /// The proxy mode on an emulated team: host-memory rings and host copies, the same kernels.
    pub fn emulated(team: &'static Team, depth: u32) -> Result<ProxyBackend, BackendError> {
        if team.backend() != ferrocomm::Backend::Emulator {
            return Err(BackendError::NotAvailable {
                mode: Mode::Proxy,
                reason: "host copies serve emulated teams only; open GPUs with ProxyBackend::open".into(),
            });
        }
        let rings = Rings::host(team.world(), depth as usize)?;
        let pad =
            SignalPadBuffer::new(team, "ferrocomm.bench.proxy", proxy_pad::SIGNALS).map_err(runtime(Mode::Proxy))?;
        // SAFETY: the rings are served only while this backend lives; its kernels put only between its own
        // symmetric buffers (kept alive by the backend until every kernel that waits on a put is done) and
        // signal only into its pad, and the emulator's memory is host memory.
        let engine = unsafe { HostEngine::new() };
        ProxyBackend::start(team, rings, pad, Box::new(engine), depth)
    }

    fn start(
        team: &'static Team,
        rings: Rings,
        pad: SignalPadBuffer,
        engine: Box<dyn CopyEngine>,
        depth: u32,
    ) -> Result<ProxyBackend, BackendError> {
        let rings = Arc::new(rings);
        let description = engine.describe();
        let proxy = Proxy::start(Arc::clone(&rings), engine)?;
        Ok(ProxyBackend {
            proxy,
            buffers: None,
            out: SymBuffer::new(team, 2).map_err(runtime(Mode::Proxy))?,
            pad,
            rings,
            team,
            depth,
            engine: description,
            failed: None,
        })
    }

    /// Descriptors the proxy has served so far.
    pub fn served(&self) -> u64 {
        self.proxy.served()
    }

    /// Runs `iters` operations of `op` (rank 0 → rank 1) in one launch and returns the kernel's time in ns.
    fn launch(
        &mut self,
        op: Operation,
        bytes: usize,
        iters: u32,
        fresh: Option<&mut Buffers>,
    ) -> Result<u64, BackendError> {
        if let Some(reason) = &self.failed {
            return Err(stopped(reason));
        }
        if !self.buffers.as_ref().is_some_and(|b| b.src.len() == bytes) && fresh.is_none() {
            self.buffers = None;
            self.buffers = Some(Buffers {
                src: SymBuffer::new(self.team, bytes).map_err(runtime(Mode::Proxy))?,
                dst: SymBuffer::new(self.team, bytes).map_err(runtime(Mode::Proxy))?,
            });
        }
        let buffers = match fresh {
            Some(b) => b,
            None => self.buffers.as_mut().ok_or_else(|| stopped("no buffers"))?,
        };
        self.out.fill(0).map_err(runtime(Mode::Proxy))?;
        let (team, ring, pad, out) = (self.team, self.rings.param(), &self.pad, &mut self.out);
        let launched = kernel(team, op, ring, pad, buffers, iters, out);
        if let Err(e) = launched {
            let reason = match self.proxy.failure() {
                Some(proxy) => format!("the proxy failed ({proxy}); the kernel: {e}"),
                None => e.to_string(),
            };
            self.failed = Some(reason.clone());
            return Err(stopped(&reason));
        }
        let out = self.out.to_host(0).map_err(runtime(Mode::Proxy))?;
        if out[1] != u64::from(iters) || out[0] == 0 {
            let detail = format!("the {op} kernel reported [{} ns, {} iterations] for {iters}", out[0], out[1]);
            return Err(BackendError::Verification { mode: Mode::Proxy, op, detail });
        }
        Ok(out[0])
    }
}

/// Launches the proxy kernel of `op` from rank 0 to rank 1 and waits for it.
fn kernel(
    team: &Team,
    op: Operation,
    ring: HostQueues,
    pad: &SignalPadBuffer,
    buffers: &mut Buffers,
    iters: u32,
    out: &mut SymBuffer<u64>,
) -> Result<(), ferrocomm::Error> {
    let cfg = LaunchConfig::single();
    let (src, dst) = (&buffers.src, &mut buffers.dst);
    match op {
        Operation::PingPong => proxy_ping_pong::launch(team, cfg, ring, pad, src, dst, 0, 1, iters, out)?.wait(),
        _ => proxy_put::launch(team, cfg, ring, pad, src, dst, 0, 1, iters, out)?.wait(),
    }
}

fn stopped(reason: &str) -> BackendError {
    BackendError::External {
        mode: Mode::Proxy,
        source: format!("the proxy mode stopped after an error: {reason}").into(),
    }
}

/// Finds a way to raise a peer's signal from the copy's stream: a write into a probe word of rank 1 by each
/// [`SignalPath`] in turn, read back through the runtime.
fn choose_signal_path(team: &Team, engine: &mut CudaEngine) -> Result<(), BackendError> {
    let mut probe = SymBuffer::<u64>::new(team, 1).map_err(runtime(Mode::Proxy))?;
    let signal = probe.address(1).map_err(runtime(Mode::Proxy))?;
    let mut tried = Vec::new();
    for (i, path) in [SignalPath::PeerWrite, SignalPath::LocalAfterEvent].into_iter().enumerate() {
        probe.fill(0).map_err(runtime(Mode::Proxy))?;
        engine.set_path(path);
        let value = 0x0b5e_55ed + i as u64;
        let d = ProxyDescriptor { signal, value, src_rank: 0, dst_rank: 1, ..ProxyDescriptor::default() };
        match engine.issue(&d, None).and_then(|()| engine.quiesce()) {
            Ok(()) => match probe.to_host(1).map_err(runtime(Mode::Proxy))?[0] {
                v if v == value => return Ok(()),
                v => tried.push(format!("{path:?}: the probe read {v:#x}, not {value:#x}")),
            },
            Err(e) => tried.push(format!("{path:?}: {e}")),
        }
    }
    Err(BackendError::NotAvailable {
        mode: Mode::Proxy,
        reason: format!("no way to raise a peer's signal behind a copy: {}", tried.join("; ")),
    })
}

impl Backend for ProxyBackend {
    fn mode(&self) -> Mode {
        Mode::Proxy
    }

    fn queue_depth(&self) -> Option<u32> {
        Some(self.depth)
    }

    fn world(&self) -> usize {
        self.team.world()
    }

    fn supports(&self, op: Operation) -> Result<(), String> {
        match op {
            Operation::PingPong | Operation::PutBandwidth => Ok(()),
            _ => Err("the proxy mode implements ping-pong and put: a collective through a proxy is the cpu mode's \
                      copies issued from a host thread, plus a queue"
                .into()),
        }
    }

    fn verify(&mut self, op: Operation, _dtype: Dtype) -> Result<(), BackendError> {
        if let Err(reason) = self.supports(op) {
            return Err(BackendError::Unsupported { mode: Mode::Proxy, op, reason });
        }
        for bytes in [1, 3 * 4096 + 24, (1 << 20) + 5] {
            let src_data: Vec<Vec<u8>> = (0..self.team.world()).map(|r| pattern(r, bytes, Dtype::U8)).collect();
            let mut fresh = Buffers {
                src: SymBuffer::new(self.team, bytes).map_err(runtime(Mode::Proxy))?,
                dst: SymBuffer::new(self.team, bytes).map_err(runtime(Mode::Proxy))?,
            };
            for (rank, data) in src_data.iter().enumerate() {
                fresh.src.copy_from_host(rank, data).map_err(runtime(Mode::Proxy))?;
            }
            self.launch(op, bytes, 2, Some(&mut fresh))?;
            // Ping-pong: each side holds the other's payload; put: rank 1 holds rank 0's.
            let expect: &[(usize, usize)] = if op == Operation::PingPong { &[(1, 0), (0, 1)] } else { &[(1, 0)] };
            for &(rank, from) in expect {
                let got = fresh.dst.to_host(rank).map_err(runtime(Mode::Proxy))?;
                let what = format!("{bytes} B, rank {rank}'s destination");
                if let Some(detail) = first_difference(&what, &got, &src_data[from], Dtype::U8) {
                    return Err(BackendError::Verification { mode: Mode::Proxy, op, detail });
                }
            }
        }
        Ok(())
    }

    fn run(&mut self, request: &Request) -> Result<Timing, BackendError> {
        let op = request.op;
        if let Err(reason) = self.supports(op) {
            return Err(BackendError::Unsupported { mode: Mode::Proxy, op, reason });
        }
        let iters = iters_u32(Mode::Proxy, request.iters)?;
        let started = thread_cpu_time();
        let ns = self.launch(op, request.bytes as usize, iters, None)?;
        // This thread only launched and waited: the proxy thread's CPU is the mode's cost.
        let wait_cpu = thread_cpu_time().saturating_sub(started);
        let hops = if op == Operation::PingPong { 2 } else { 1 };
        let us_per_op = ns as f64 / 1e3 / f64::from(iters * hops);
        Ok(Timing { us_per_op, graph: false, sms_used: Some(1), wait_cpu })
    }

    /// One put per launch, timed by the kernel from its first descriptor push to the receiver's
    /// acknowledgement: complete at the receiver (and one GPU-to-GPU flag back) with no launch in the span.
    fn isolated(&mut self, request: &Request) -> Result<Option<Vec<f64>>, BackendError> {
        if request.op != Operation::PutBandwidth {
            return Ok(None);
        }
        let bytes = request.bytes as usize;
        self.launch(request.op, bytes, 1, None)?;
        (0..request.iters.max(1))
            .map(|_| Ok(self.launch(request.op, bytes, 1, None)? as f64 / 1e3))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    fn intra_gpu(&self) -> bool {
        super::shares_gpus(self.team)
    }

    fn gpu_ordinals(&self) -> Vec<usize> {
        super::team_ordinals(self.team)
    }

    fn devices(&self) -> Vec<String> {
        describe_team(self.team)
    }

    fn notes(&self) -> Vec<String> {
        vec![format!(
            "proxy: kernels of one thread per rank push 64-byte put descriptors into a ring of qd slots in pinned, \
             host-mapped memory (st.release.sys of the head); a host thread polls every ring (spinning, asleep \
             only after {} ms idle) and issues each descriptor as {}; the kernel waits on the signal. Every round \
             trip or put of a trial runs inside one launch, timed with %globaltimer (graph: no); a put trial \
             ends with one GPU acknowledgement. SMs: the one block each kernel occupies; host CPU: the proxy \
             thread's.",
            super::proxy_thread::IDLE_BEFORE_SLEEP.as_millis(),
            self.engine
        )]
    }
}
