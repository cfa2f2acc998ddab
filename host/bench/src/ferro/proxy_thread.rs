//! The proxy thread: it polls every rank's ring, and for each descriptor a kernel publishes it issues the
//! copy and then the completion signal through a [`CopyEngine`] — on GPUs a copy engine
//! (`cuMemcpyPeerAsync` on a stream per (source, destination) pair, then `cuStreamWriteValue64` of the
//! signal behind it on the same stream), on the emulator a host `memcpy` and a release store.
//!
//! The thread spins while work may come (a proxy that sleeps adds its wake-up time to every message) and
//! sleeps between polls only after [`IDLE_BEFORE_SLEEP`] without a descriptor. A failure (a malformed
//! descriptor, a driver error) stops the serving; the kernel waiting on the signal then times out, and
//! [`Proxy::failure`] says what happened.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, result};
use ferrocomm_device::emu::Issued;
use ferrocomm_kernels::kernels::proxy::ProxyDescriptor;

use super::ring::Rings;
use crate::backend::BackendError;

/// Idle time after which the proxy sleeps between polls.
pub const IDLE_BEFORE_SLEEP: Duration = Duration::from_millis(50);
/// How long it sleeps then.
const IDLE_SLEEP: Duration = Duration::from_micros(100);

/// What the proxy does with one descriptor.
pub trait CopyEngine: Send {
    /// Starts the copy of `d`, then the store of `d.value` into `d.signal`, ordered after the copy (the
    /// signal must never be seen before the data). `issued`: what the emulator's checker saw of the push of
    /// `d` (an emulated kernel's descriptor), for an engine that tells the checker what it does.
    fn issue(&mut self, d: &ProxyDescriptor, issued: Option<&Issued>) -> Result<(), String>;

    /// Waits until everything issued so far has completed.
    fn quiesce(&mut self) -> Result<(), String>;

    /// How the engine copies and signals, for the report.
    fn describe(&self) -> String;
}

/// Checks what the proxy relies on before it trusts a descriptor popped from rank `rank`'s ring.
pub fn check_descriptor(d: &ProxyDescriptor, rank: usize, world: usize) -> Result<(), String> {
    if d.src_rank as usize != rank {
        return Err(format!("source rank {} in rank {rank}'s ring", d.src_rank));
    }
    if d.dst_rank as usize >= world || d.dst_rank as usize == rank {
        return Err(format!("destination rank {} (world {world}, source {rank})", d.dst_rank));
    }
    if d.signal == 0 || !d.signal.is_multiple_of(8) {
        return Err(format!("signal address {:#x} is not an aligned u64", d.signal));
    }
    if d.bytes > 0 && (d.src == 0 || d.dst == 0) {
        return Err(format!("a copy of {} bytes from {:#x} to {:#x}", d.bytes, d.src, d.dst));
    }
    Ok(())
}

/// The emulator's engine: the copy and the signal as host memory operations.
#[derive(Debug)]
pub struct HostEngine {
    _private: (),
}

impl HostEngine {
    /// An engine that copies and signals in host memory.
    ///
    /// # Safety
    ///
    /// Every descriptor it is given must name live, readable `src` and writable `dst` ranges of `bytes`
    /// bytes and an aligned `u64` signal that is only accessed atomically, none of them accessed otherwise
    /// during the copy: true of the proxy kernels' descriptors on an emulated team, whose buffers the
    /// backend keeps alive and whose kernels wait for the signal before touching the destination.
    pub unsafe fn new() -> HostEngine {
        HostEngine { _private: () }
    }
}

impl CopyEngine for HostEngine {
    fn issue(&mut self, d: &ProxyDescriptor, issued: Option<&Issued>) -> Result<(), String> {
        let (src, dst, bytes) = (d.src as usize, d.dst as usize, d.bytes as usize);
        // SAFETY: `new`'s contract: both ranges are live and not accessed meanwhile.
        let copy = || unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
        // SAFETY: `new`'s contract: an aligned, live `u64` accessed only atomically.
        let signal = unsafe { AtomicU64::from_ptr(d.signal as usize as *mut u64) };
        let raise = || signal.store(d.value, Ordering::Release);
        // The checker sees the copy and the signal as the pushing kernel thread's put with signal.
        match issued {
            Some(issued) => {
                if bytes > 0 {
                    issued.copy(src, dst, bytes, copy);
                }
                issued.signal(d.signal as usize, raise);
            }
            None => {
                if bytes > 0 {
                    copy();
                }
                raise();
            }
        }
        Ok(())
    }

    fn quiesce(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn describe(&self) -> String {
        "host memcpy, then a release store of the signal (emulator)".into()
    }
}

/// How the CUDA engine raises a destination's signal behind the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalPath {
    /// `cuStreamWriteValue64` on the copy's stream, into the peer's memory.
    PeerWrite,
    /// An event after the copy, waited on by a stream of the destination GPU, which then writes the value
    /// into its own memory (for platforms whose stream memory operations cannot reach peer memory).
    LocalAfterEvent,
}

/// The GPUs' engine: a stream per (source, destination) pair on the source GPU, plus (for
/// [`SignalPath::LocalAfterEvent`]) an event per pair and a stream per pair on the destination GPU.
#[derive(Debug)]
pub struct CudaEngine {
    ctxs: Vec<Arc<CudaContext>>,
    path: SignalPath,
    /// `[src][dst]`, on `src`'s GPU.
    copy: Vec<Vec<Option<Arc<CudaStream>>>>,
    /// `[src][dst]`, on `src`'s GPU.
    done: Vec<Vec<Option<CudaEvent>>>,
    /// `[dst][src]`, on `dst`'s GPU.
    land: Vec<Vec<Option<Arc<CudaStream>>>>,
}

impl CudaEngine {
    /// An engine over the contexts of a team's GPUs (by rank), signalling by `path`.
    pub fn new(ctxs: Vec<Arc<CudaContext>>, path: SignalPath) -> Result<CudaEngine, BackendError> {
        let world = ctxs.len();
        let mut engine = CudaEngine {
            path,
            copy: (0..world).map(|_| (0..world).map(|_| None).collect()).collect(),
            done: (0..world).map(|_| (0..world).map(|_| None).collect()).collect(),
            land: (0..world).map(|_| (0..world).map(|_| None).collect()).collect(),
            ctxs,
        };
        for src in 0..world {
            for dst in (0..world).filter(|&d| d != src) {
                let (on_src, on_dst) = (&engine.ctxs[src], &engine.ctxs[dst]);
                let what = |w: &str| format!("creating the proxy's {w} for rank {src} → rank {dst}");
                engine.copy[src][dst] = Some(on_src.new_stream().map_err(BackendError::driver(what("copy stream")))?);
                engine.done[src][dst] = Some(on_src.new_event(None).map_err(BackendError::driver(what("event")))?);
                engine.land[dst][src] = Some(on_dst.new_stream().map_err(BackendError::driver(what("signal stream")))?);
            }
        }
        Ok(engine)
    }

    /// Switches the signal path (before the engine serves kernels: see the proxy mode's probe).
    pub fn set_path(&mut self, path: SignalPath) {
        self.path = path;
    }

    /// The signal path in use.
    pub fn path(&self) -> SignalPath {
        self.path
    }

    fn pair<T>(table: &[Vec<Option<T>>], a: usize, b: usize) -> Result<&T, String> {
        table.get(a).and_then(|row| row.get(b)).and_then(Option::as_ref).ok_or_else(|| format!("no rank pair {a}, {b}"))
    }
}

fn drv(what: &str) -> impl Fn(cudarc::driver::DriverError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl CopyEngine for CudaEngine {
    fn issue(&mut self, d: &ProxyDescriptor, _issued: Option<&Issued>) -> Result<(), String> {
        let (src, dst) = (d.src_rank as usize, d.dst_rank as usize);
        let stream = Self::pair(&self.copy, src, dst)?;
        let (on_src, on_dst) = (&self.ctxs[src], &self.ctxs[dst]);
        on_src.bind_to_thread().map_err(drv("binding the source GPU"))?;
        if d.bytes > 0 {
            // SAFETY: the addresses are device memory of `src` and `dst` as their owners address them (the
            // proxy kernels build descriptors from live symmetric buffers the backend keeps alive until the
            // kernels that wait for this copy are done); the stream belongs to `src`'s current context.
            unsafe {
                result::memcpy_peer_async(
                    on_dst.cu_ctx(),
                    d.dst,
                    on_src.cu_ctx(),
                    d.src,
                    d.bytes as usize,
                    stream.cu_stream(),
                )
            }
            .map_err(drv("cuMemcpyPeerAsync"))?;
        }
        let flags = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
        match self.path {
            SignalPath::PeerWrite => {
                // SAFETY: `d.signal` is an aligned u64 of `dst`'s signal pad, reachable from `src` (peer access
                // is enabled between every pair of the team); the default flags fence the copy before it.
                unsafe { sys::cuStreamWriteValue64_v2(stream.cu_stream(), d.signal, d.value, flags) }
                    .result()
                    .map_err(drv("cuStreamWriteValue64 into the peer"))
            }
            SignalPath::LocalAfterEvent => {
                let (event, land) = (Self::pair(&self.done, src, dst)?, Self::pair(&self.land, dst, src)?);
                event.record(stream).map_err(drv("recording the copy's event"))?;
                land.wait(event).map_err(drv("waiting on the copy's event"))?;
                on_dst.bind_to_thread().map_err(drv("binding the destination GPU"))?;
                // SAFETY: `d.signal` is an aligned u64 of `dst`'s own signal pad; the stream is `dst`'s.
                unsafe { sys::cuStreamWriteValue64_v2(land.cu_stream(), d.signal, d.value, flags) }
                    .result()
                    .map_err(drv("cuStreamWriteValue64 on the destination"))
            }
        }
    }

    fn quiesce(&mut self) -> Result<(), String> {
        for stream in self.copy.iter().chain(&self.land).flatten().flatten() {
            stream.synchronize().map_err(drv("waiting for the proxy's streams"))?;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        match self.path {
            SignalPath::PeerWrite => {
                "cuMemcpyPeerAsync on a stream per (source, destination) pair, then cuStreamWriteValue64 of the \
                 signal into the destination's pad on the same stream"
            }
            SignalPath::LocalAfterEvent => {
                "cuMemcpyPeerAsync on a stream per (source, destination) pair, then an event that a stream of the \
                 destination GPU waits on before cuStreamWriteValue64 of the signal into its own pad"
            }
        }
        .into()
    }
}

impl Drop for CudaEngine {
    fn drop(&mut self) {
        // Streams are destroyed next; copies into buffers about to be freed must be done.
        let _ = self.quiesce();
    }
}

/// What the backend and the thread share.
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    failure: Mutex<Option<String>>,
    served: AtomicU64,
}

/// A running proxy thread. Dropping it stops the thread and waits until its copies are done.
#[derive(Debug)]
pub struct Proxy {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts serving `rings` with `engine`.
    pub fn start(rings: Arc<Rings>, mut engine: Box<dyn CopyEngine>) -> Result<Proxy, BackendError> {
        let shared = Arc::new(Shared::default());
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("ferrocomm-proxy".into())
            .spawn(move || {
                let served = serve(&rings, engine.as_mut(), &theirs);
                let settled = engine.quiesce();
                if let Some(e) = served.err().or(settled.err()) {
                    theirs.failure.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(e);
                }
            })
            .map_err(|e| BackendError::External {
                mode: crate::model::Mode::Proxy,
                source: format!("starting the proxy thread: {e}").into(),
            })?;
        Ok(Proxy { shared, thread: Some(thread) })
    }

    /// What stopped the proxy, if something did.
    pub fn failure(&self) -> Option<String> {
        self.shared.failure.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Descriptors served so far: each is counted as it is issued, before its completion signal is raised,
    /// so after a kernel saw its puts complete, they are all counted.
    pub fn served(&self) -> u64 {
        self.shared.served.load(Ordering::Acquire)
    }

    /// Stops the thread and waits for it (and its copies); returns what stopped it early, if anything.
    pub fn stop(&mut self) -> Option<String> {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            self.shared
                .failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert("the proxy thread panicked".into());
        }
        self.failure()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves until told to stop; an error ends the serving.
fn serve(rings: &Rings, engine: &mut dyn CopyEngine, shared: &Shared) -> Result<(), String> {
    let (world, depth) = (rings.world(), rings.depth() as u64);
    let mut tails: Vec<u64> = (0..world).map(|rank| rings.tail(rank)).collect();
    let mut idle_since = Instant::now();
    while !shared.stop.load(Ordering::Acquire) {
        let mut busy = false;
        for (rank, tail) in tails.iter_mut().enumerate() {
            let head = rings.head(rank);
            if head < *tail || head - *tail > depth {
                return Err(format!("rank {rank}'s ring is corrupt: head {head}, tail {tail}, depth {depth}"));
            }
            while *tail < head {
                let d = rings.read(rank, *tail);
                check_descriptor(&d, rank, world).map_err(|e| format!("descriptor {tail} of rank {rank}: {e}"))?;
                // Counted before the copy raises its completion signal: a kernel that saw its puts complete
                // (and the host that waited for it) must see them counted.
                shared.served.fetch_add(1, Ordering::Release);
                let issued = rings.issued(rank, *tail);
                engine.issue(&d, issued.as_ref()).map_err(|e| format!("descriptor {tail} of rank {rank}: {e}"))?;
                *tail += 1;
                rings.publish_tail(rank, *tail);
                busy = true;
            }
        }
        if busy {
            idle_since = Instant::now();
        } else if idle_since.elapsed() > IDLE_BEFORE_SLEEP {
            std::thread::sleep(IDLE_SLEEP);
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> ProxyDescriptor {
        ProxyDescriptor {
            src: 0x1000,
            dst: 0x2000,
            bytes: 64,
            signal: 0x3000,
            value: 1,
            src_rank: 1,
            dst_rank: 0,
            reserved: [0; 2],
        }
    }

    #[test]
    fn descriptors_are_checked() {
        assert!(check_descriptor(&good(), 1, 2).is_ok());
        assert!(check_descriptor(&good(), 0, 2).unwrap_err().contains("source rank 1 in rank 0"));
        assert!(check_descriptor(&ProxyDescriptor { dst_rank: 1, ..good() }, 1, 2).is_err());
        assert!(check_descriptor(&ProxyDescriptor { dst_rank: 2, ..good() }, 1, 2).is_err());
        assert!(check_descriptor(&ProxyDescriptor { signal: 0x3004, ..good() }, 1, 2).is_err());
        assert!(check_descriptor(&ProxyDescriptor { src: 0, ..good() }, 1, 2).is_err());
        assert!(check_descriptor(&ProxyDescriptor { src: 0, dst: 0, bytes: 0, ..good() }, 1, 2).is_ok());
    }
}
