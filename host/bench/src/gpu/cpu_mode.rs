//! The `cpu` mode: CPU-initiated communication, the classic path GPU-initiated kernels are measured
//! against. The host issues every copy with `cuMemcpyPeerAsync` (copy engines between GPUs; within one GPU,
//! in the one-GPU run, the driver copies with kernels of its own) and orders ranks with events.
//!
//! - ping-pong: copy 0 → 1, wait for the stream, copy 1 → 0, wait (the host is in every hop, so the
//!   host clock times it);
//! - put: a copy 0 → 1 on rank 0's stream, then rank 1's stream waits on an event recorded after it: the
//!   put is done when the data is in rank 1's memory and rank 1's stream knows it. Back to back, the
//!   copies still pipeline on rank 0's stream; the time ends when rank 1's stream has seen the last;
//! - all-gather and all-to-all: each rank's stream pushes its chunks to every peer, then every stream
//!   waits on every other's completion event (the barrier that makes each operation a collective);
//! - all-reduce is not offered: it needs a reduction kernel, which is what the `gpu` mode brings;
//! - isolated operations ([`Backend::isolated`]): each enqueued from the host between clock-stamp kernels on
//!   every rank's stream ([`StampSlots`]), as the gpu mode's are captured between the library's.

use std::time::{Duration, Instant};

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaEvent, result};

use crate::backend::{Backend, BackendError, Request, Timing};
use crate::cputime::thread_cpu_time;
use crate::gpu::stamp::StampSlots;
use crate::gpu::{Buffers, Gpus, Placement, Timer};
use crate::model::{Dtype, Mode, Operation};
use crate::reference;

/// Bytes the checks run at: a few pages plus a tail that is not a multiple of 16.
const CHECK_BYTES: u64 = 3 * 4096 + 24;

/// CPU-initiated copies between GPUs.
#[derive(Debug)]
pub struct CpuBackend {
    // Field order is drop order: events, stamps and buffers go before the contexts that own them.
    done: Vec<CudaEvent>,
    stamps: Option<StampSlots>,
    timer: Timer,
    buffers: Buffers,
    gpus: Gpus,
}

impl CpuBackend {
    /// Opens the GPUs of `placement` (two ranks at least; ranks that share a GPU copy within it).
    pub fn open(placement: &Placement) -> Result<CpuBackend, BackendError> {
        let gpus = Gpus::open(placement)?;
        let done = gpus
            .ctxs
            .iter()
            .map(|ctx| ctx.new_event(None).map_err(BackendError::driver("creating an event")))
            .collect::<Result<_, _>>()?;
        Ok(CpuBackend { done, stamps: None, timer: Timer::new(&gpus)?, buffers: Buffers::default(), gpus })
    }

    /// One peer copy of `bytes` from `src` on rank `from` to `dst` on rank `to`, on `from`'s stream.
    fn copy(
        &self,
        from: usize,
        src: CUdeviceptr,
        to: usize,
        dst: CUdeviceptr,
        bytes: usize,
    ) -> Result<(), BackendError> {
        let (gpus, stream) = (&self.gpus, &self.gpus.streams[from]);
        gpus.ctxs[from].bind_to_thread().map_err(BackendError::driver("binding a context"))?;
        // SAFETY: both pointers are live allocations of at least `bytes` bytes (the buffers were sized
        // by `Buffers::ensure` for this request) in the named contexts; the stream belongs to `from`.
        unsafe {
            result::memcpy_peer_async(
                gpus.ctxs[to].cu_ctx(),
                dst,
                gpus.ctxs[from].cu_ctx(),
                src,
                bytes,
                stream.cu_stream(),
            )
        }
        .map_err(BackendError::driver(format!("copying {bytes} bytes from rank {from} to rank {to}")))
    }

    /// `iters` round trips, each hop a copy and a host wait; returns the host time in µs.
    fn ping_pong(&self, bytes: usize, iters: u64) -> Result<f64, BackendError> {
        let (send, recv) = (&self.buffers.send, &self.buffers.recv);
        let wait =
            |rank: usize| self.gpus.streams[rank].synchronize().map_err(BackendError::driver("waiting for a hop"));
        let t = Instant::now();
        for _ in 0..iters {
            self.copy(0, send[0].ptr(), 1, recv[1].ptr(), bytes)?;
            wait(0)?;
            self.copy(1, recv[1].ptr(), 0, recv[0].ptr(), bytes)?;
            wait(1)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6)
    }

    /// Enqueues `iters` operations of `op` (not ping-pong) on the streams.
    fn enqueue(&self, op: Operation, bytes: usize, iters: u64) -> Result<(), BackendError> {
        let (send, recv) = (&self.buffers.send, &self.buffers.recv);
        let chunk = bytes / self.gpus.world();
        for _ in 0..iters {
            match op {
                Operation::PutBandwidth => {
                    self.copy(0, send[0].ptr(), 1, recv[1].ptr(), bytes)?;
                    self.notify(0, 1)?;
                }
                Operation::AllGather | Operation::AllToAll => {
                    for (r, from) in send.iter().enumerate() {
                        for (p, to) in recv.iter().enumerate() {
                            let src = match op {
                                Operation::AllToAll => from.ptr() + (p * chunk) as u64,
                                _ => from.ptr(),
                            };
                            self.copy(r, src, p, to.ptr() + (r * chunk) as u64, chunk)?;
                        }
                    }
                    self.barrier()?;
                }
                Operation::PingPong | Operation::AllReduce => {
                    return Err(BackendError::Unsupported { mode: Mode::Cpu, op, reason: "not enqueued".into() });
                }
            }
        }
        Ok(())
    }

    /// `to`'s stream waits until `from`'s work so far is done: how the receiver of a put learns of it.
    fn notify(&self, from: usize, to: usize) -> Result<(), BackendError> {
        let event = &self.done[from];
        event.record(&self.gpus.streams[from]).map_err(BackendError::driver("recording a completion event"))?;
        self.gpus.streams[to].wait(event).map_err(BackendError::driver("waiting on a completion event"))
    }

    /// Every stream waits until every other stream's work so far is done.
    fn barrier(&self) -> Result<(), BackendError> {
        for (r, event) in self.done.iter().enumerate() {
            event.record(&self.gpus.streams[r]).map_err(BackendError::driver("recording a barrier event"))?;
        }
        for (r, stream) in self.gpus.streams.iter().enumerate() {
            for (p, event) in self.done.iter().enumerate() {
                if p != r {
                    stream.wait(event).map_err(BackendError::driver("waiting on a barrier event"))?;
                }
            }
        }
        Ok(())
    }

    fn ranks(&self, op: Operation) -> Vec<usize> {
        if op.is_collective() { (0..self.gpus.world()).collect() } else { vec![0, 1] }
    }
}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        // Buffers must not be freed under queued copies (after an error mid-trial).
        let _ = self.gpus.synchronize();
    }
}

impl Backend for CpuBackend {
    fn mode(&self) -> Mode {
        Mode::Cpu
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

    fn intra_gpu(&self) -> bool {
        self.gpus.placement.shares_gpus()
    }

    fn gpu_ordinals(&self) -> Vec<usize> {
        self.gpus.placement.ordinals.clone()
    }

    fn isolated(&mut self, request: &Request) -> Result<Option<Vec<f64>>, BackendError> {
        let op = request.op;
        if op == Operation::PingPong || self.supports(op).is_err() {
            return Ok(None);
        }
        let (bytes, ops) = (request.bytes as usize, request.iters.max(1));
        self.buffers.ensure(&self.gpus, bytes)?;
        if self.stamps.as_ref().is_none_or(|s| s.spans() < ops) {
            self.gpus.synchronize()?;
            self.stamps = Some(StampSlots::new(&self.gpus, ops)?);
        }
        let ranks = self.ranks(op);
        // The first pass warms up; the second is read.
        for _ in 0..2 {
            self.gpus.synchronize()?;
            let Some(stamps) = &self.stamps else { break };
            stamps.clear()?;
            for i in 0..ops as u32 {
                ranks.iter().try_for_each(|&r| stamps.stamp(&self.gpus, r, 2 * i))?;
                self.enqueue(op, bytes, 1)?;
                ranks.iter().try_for_each(|&r| stamps.stamp(&self.gpus, r, 2 * i + 1))?;
            }
        }
        self.gpus.synchronize()?;
        match &self.stamps {
            Some(stamps) => stamps.each_us(Mode::Cpu, &ranks, ops).map(Some),
            None => Ok(None),
        }
    }

    fn supports(&self, op: Operation) -> Result<(), String> {
        match op {
            Operation::AllReduce => {
                Err("a CPU-initiated all-reduce needs a reduction kernel; the gpu mode is that".into())
            }
            _ => Ok(()),
        }
    }

    fn verify(&mut self, op: Operation, dtype: Dtype) -> Result<(), BackendError> {
        self.supports(op).map_err(|reason| BackendError::Unsupported { mode: Mode::Cpu, op, reason })?;
        let world = self.gpus.world();
        let bytes = op.round_bytes(CHECK_BYTES, world, dtype) as usize;
        self.buffers.ensure(&self.gpus, bytes)?;
        self.gpus.synchronize()?;
        let send_len = if op == Operation::AllGather { bytes / world } else { bytes };
        let inputs: Vec<Vec<u8>> = (0..world).map(|r| reference::pattern(r, send_len, dtype)).collect();
        for (r, input) in inputs.iter().enumerate() {
            self.buffers.send[r].write(input)?;
            self.buffers.recv[r].clear(bytes)?;
        }
        match op {
            Operation::PingPong => {
                self.ping_pong(bytes, 1)?;
            }
            _ => self.enqueue(op, bytes, 1)?,
        }
        self.gpus.synchronize()?;
        let check = |rank: usize, want: &[u8]| -> Result<(), BackendError> {
            let got = self.buffers.recv[rank].read(want.len())?;
            match reference::first_difference(&format!("rank {rank}'s output"), &got, want, dtype) {
                Some(detail) => Err(BackendError::Verification { mode: Mode::Cpu, op, detail }),
                None => Ok(()),
            }
        };
        match op {
            Operation::PingPong => {
                check(1, &inputs[0])?;
                check(0, &inputs[0])
            }
            Operation::PutBandwidth => check(1, &inputs[0]),
            Operation::AllGather => (0..world).try_for_each(|r| check(r, &reference::all_gather(&inputs))),
            Operation::AllToAll => (0..world).try_for_each(|r| check(r, &reference::all_to_all(&inputs, r))),
            Operation::AllReduce => Err(BackendError::Unsupported { mode: Mode::Cpu, op, reason: "no kernel".into() }),
        }
    }

    fn run(&mut self, request: &Request) -> Result<Timing, BackendError> {
        let op = request.op;
        self.supports(op).map_err(|reason| BackendError::Unsupported { mode: Mode::Cpu, op, reason })?;
        let bytes = request.bytes as usize;
        let iters = request.iters.max(1);
        self.buffers.ensure(&self.gpus, bytes)?;
        self.gpus.synchronize()?;
        let (us, wait_cpu) = if op == Operation::PingPong {
            // The host waits on every hop: that waiting is the mode's cost, nothing is left out.
            (self.ping_pong(bytes, iters)? / 2.0, Duration::ZERO)
        } else {
            let ranks = self.ranks(op);
            self.timer.start(&self.gpus, &ranks)?;
            self.enqueue(op, bytes, iters)?;
            self.timer.stop(&self.gpus, &ranks)?;
            let waiting = thread_cpu_time();
            let us = self.timer.elapsed_us(&ranks)?;
            (us, thread_cpu_time().saturating_sub(waiting))
        };
        // The CPU-initiated path is never captured in a graph: the host issuing each copy is the point.
        Ok(Timing { us_per_op: us / iters as f64, graph: false, sms_used: Some(0), wait_cpu })
    }
}
