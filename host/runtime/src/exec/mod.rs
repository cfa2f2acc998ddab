//! The seam between a team's core and what runs its ranks.
//!
//! The core (`team`) owns the ranks, their devices, their error slots and the watchdog; an [`Exec`] owns
//! streams, memory and launches. The in-process CUDA backend (`cuda`) and the emulator (`emu`) implement
//! it, and so do their cross-process variants. Backends number the ranks they run `0..n`, in the order of
//! the team's local ranks ([`TeamView::local`]): in a team of one process that is every rank, in a team
//! that spans processes it is this process's share.
//!
//! Everything that crosses the seam is defined here — the kernel and its arguments (`kernel`), the
//! caller's streams (`stream`), the error buffers, the view of the team a backend reads ([`TeamView`]) — so
//! the backends import the core's seam and nothing above it, and the core never imports a backend.

mod kernel;
mod stream;

pub use kernel::{Kernel, LaunchConfig, ParamPack};
pub use stream::ExternalStream;
pub(crate) use stream::StreamState;

use std::any::Any;
use std::fmt;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::CUmodule;
use ferrocomm_device::abi::{ErrorBuffer, LaunchCtx};

use crate::error::Error;

/// Nanoseconds since this process first asked: the host clock against which [`Exec::clock_offsets`] measures
/// every GPU's `%globaltimer`, so that every rank's trace events share one time axis.
pub(crate) fn host_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A rank's error buffer: host memory, and the address kernels write it at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ErrorSlot {
    pub host: *mut ErrorBuffer,
    pub device: u64,
}

// SAFETY: the buffer is plain memory owned by the team; the host reads and clears it only while no kernel
// of the team runs (after `wait_idle`).
unsafe impl Send for ErrorSlot {}
// SAFETY: as above.
unsafe impl Sync for ErrorSlot {}

/// What a backend reads of the team to load modules and launch kernels. The core implements it: a
/// backend sees this, never the team itself.
pub(crate) trait TeamView: Sync {
    /// The number of ranks in the team.
    fn world(&self) -> usize;

    /// The team rank each local slot runs, in slot order.
    fn local(&self) -> &[usize];

    /// The launch context (the device ABI's) of team rank `rank`, which runs here.
    fn launch_ctx(&self, rank: usize) -> LaunchCtx;

    /// In trace mode: local slot `slot`'s trace ring, and the rings' capacity in events.
    fn trace_ring(&self, slot: usize) -> Option<(u64, u64)>;

    /// The symmetric heap the team's modules link against, if it has one.
    fn heap(&self) -> Option<&dyn SymmetricHeap>;
}

/// A launch or replay that failed on a local rank after the ranks before it were queued: the core waits
/// for those (they may use memory the caller is about to free) before it reports `error`.
#[derive(Debug)]
pub(crate) struct Partial {
    /// How many local ranks (slots `0..queued`) had their work queued.
    pub queued: usize,
    /// Why the next one failed.
    pub error: Error,
}

impl From<Error> for Partial {
    /// A failure before any rank was queued.
    fn from(error: Error) -> Partial {
        Partial { queued: 0, error }
    }
}

/// What runs a team's local ranks: their memory, their streams, their launches and graphs.
pub(crate) trait Exec: Send + Sync + fmt::Debug {
    /// A zeroed allocation of `bytes` (a multiple of 256, at least 256) on local rank `slot`.
    fn alloc(&self, slot: usize, bytes: usize) -> Result<u64, Error>;

    /// Frees an allocation of [`Exec::alloc`].
    ///
    /// # Safety
    ///
    /// `addr` came from `alloc(slot, bytes)`, is freed once, and no kernel or copy uses it any more.
    unsafe fn free(&self, slot: usize, addr: u64, bytes: usize) -> Result<(), Error>;

    /// Copies `src` to address `dst` of local rank `slot`.
    ///
    /// # Safety
    ///
    /// `dst..dst + src.len()` lies in one live allocation of this team, and no kernel accesses it meanwhile.
    unsafe fn write(&self, slot: usize, dst: u64, src: &[u8]) -> Result<(), Error>;

    /// Copies from address `src` of local rank `slot` into `dst`.
    ///
    /// # Safety
    ///
    /// As for [`Exec::write`], for `src..src + dst.len()`.
    unsafe fn read(&self, slot: usize, src: u64, dst: &mut [u8]) -> Result<(), Error>;

    /// Sets `len` bytes at `dst` of local rank `slot` to `byte`.
    ///
    /// # Safety
    ///
    /// As for [`Exec::write`].
    unsafe fn memset(&self, slot: usize, dst: u64, byte: u8, len: usize) -> Result<(), Error>;

    /// Whether local rank `slot` has finished everything queued on it — on its own stream, and the launches
    /// and copies it queued on the caller's streams; a failure is reported once it has.
    fn idle(&self, slot: usize) -> Result<bool, Error>;

    /// A zeroed error buffer for local rank `slot`, in host memory its kernels write through.
    fn alloc_error_buffer(&self, slot: usize) -> Result<ErrorSlot, Error>;

    /// Frees an error buffer of [`Exec::alloc_error_buffer`].
    ///
    /// # Safety
    ///
    /// `errors` came from `alloc_error_buffer`, is freed once, and no kernel of the team runs.
    unsafe fn free_error_buffer(&self, errors: ErrorSlot) -> Result<(), Error>;

    /// The most threads per block `kernel` can be launched with on every local rank.
    fn max_threads_per_block(&self, team: &dyn TeamView, kernel: &'static Kernel) -> Result<u32, Error>;

    /// Queues `kernel` on every local rank (`packs` in local order): on `streams` (the caller's, one per local
    /// rank) when given, else on the ranks' own. `capturing`: a capture records it (the team's, or the one of
    /// the caller's streams), so nothing is waited for or marked.
    fn launch(
        &self,
        team: &dyn TeamView,
        kernel: &'static Kernel,
        cfg: LaunchConfig,
        packs: Vec<ParamPack>,
        streams: Option<&[ExternalStream]>,
        capturing: bool,
    ) -> Result<(), Partial>;

    /// Queues a copy of `bytes` bytes from `src` to `dst` on local rank `slot`, in the order of its launches:
    /// on `stream` (the caller's) when given, else on the rank's own; recorded by a capture as a launch is.
    ///
    /// # Safety
    ///
    /// Both ranges are memory the rank's device can access, and stay allocated until the copy has finished.
    unsafe fn copy(
        &self,
        slot: usize,
        dst: u64,
        src: u64,
        bytes: usize,
        stream: Option<&ExternalStream>,
        capturing: bool,
    ) -> Result<(), Error>;

    /// Whether `stream` may carry local rank `slot`'s launches: why not, if it may not.
    fn check_stream(&self, slot: usize, stream: &ExternalStream) -> Result<(), String> {
        let _ = (slot, stream);
        Err(format!("the {} backend has no CUDA streams to launch on", self.name()))
    }

    /// Where a caller's stream stands (only backends that accept caller streams are asked).
    fn stream_state(&self, slot: usize, stream: &ExternalStream) -> Result<StreamState, Error> {
        let _ = (slot, stream);
        Ok(StreamState::Running)
    }

    /// Whether `bytes` bytes of memory the caller allocated at `addr` can be used by local rank `slot`'s
    /// kernels and copies: why not, if they cannot.
    fn check_memory(&self, slot: usize, addr: u64, bytes: usize) -> Result<(), String> {
        let _ = (slot, addr, bytes);
        Ok(())
    }

    /// Starts capturing every local rank's launches.
    fn begin_capture(&self) -> Result<(), Error>;

    /// Ends the capture; `keep`: make it replayable (else discard it).
    fn end_capture(&self, keep: bool) -> Result<Captured, Error>;

    /// Queues a capture of [`Exec::end_capture`] again on every local rank.
    fn replay(&self, team: &dyn TeamView, captured: &Captured) -> Result<(), Partial>;

    /// Allocation `addr` (`bytes`, from [`Exec::alloc`]) of local rank `slot` as a file descriptor that
    /// the other processes of this host can map with [`Exec::import`]. Only the cross-process variants of
    /// a backend can.
    fn export(&self, slot: usize, addr: u64, bytes: usize) -> Result<OwnedFd, Error> {
        let _ = (slot, addr, bytes);
        Err(Error::Unsupported { what: "sharing memory with other processes", backend: self.name() })
    }

    /// Maps another process's exported allocation of `bytes` for local rank `slot`; returns the address
    /// that rank's kernels and copies use.
    fn import(&self, slot: usize, fd: BorrowedFd<'_>, bytes: usize) -> Result<u64, Error> {
        let _ = (slot, fd, bytes);
        Err(Error::Unsupported { what: "mapping another process's memory", backend: self.name() })
    }

    /// Unmaps a mapping of [`Exec::import`].
    ///
    /// # Safety
    ///
    /// `addr` came from `import(slot, _, bytes)`, is unmapped once, and no kernel or copy uses it any more.
    unsafe fn unmap(&self, slot: usize, addr: u64, bytes: usize) -> Result<(), Error> {
        let _ = (slot, addr, bytes);
        Err(Error::Unsupported { what: "unmapping another process's memory", backend: self.name() })
    }

    /// A count that grows while the backend's kernels visibly move on (the emulator counts thread starts
    /// and ends); the host watchdog measures its deadline from the last change. GPUs report nothing (0):
    /// their kernels run at the GPU's speed whatever the host does, so the deadline counts from the enqueue.
    fn progress(&self) -> u64 {
        0
    }

    /// Per local rank: how many nanoseconds its device's `%globaltimer` runs ahead of the host clock of
    /// trace mode (measured once, when a traced team is made), so every rank's events share one time axis.
    /// The emulator's timer is the host's clock: zeros.
    fn clock_offsets(&self) -> Result<Vec<i64>, Error> {
        Ok(Vec::new())
    }

    /// Makes local rank `slot`'s device current on this thread, for libraries that work on the current
    /// context (NVSHMEM's host calls). Backends without contexts have nothing to do.
    fn make_current(&self, slot: usize) -> Result<(), Error> {
        let _ = slot;
        Ok(())
    }

    /// Local rank `slot`'s CUDA stream, for libraries that enqueue work of their own there (NCCL's
    /// collectives); `None` where the backend has no streams.
    fn cuda_stream(&self, slot: usize) -> Option<Arc<CudaStream>> {
        let _ = slot;
        None
    }

    /// The backend's name in errors.
    fn name(&self) -> &'static str;
}

/// A symmetric heap the team's allocations come from instead of the backend's (NVSHMEM's): one rank per
/// process, allocation and teardown collective over the processes. Dropping it finalises it, unless it was
/// abandoned. The builder makes it; the core allocates from it, and the CUDA backend binds the modules
/// linked with its device library.
pub(crate) trait SymmetricHeap: Send + Sync + fmt::Debug {
    /// This process's rank (its PE).
    fn rank(&self) -> usize;

    /// A symmetric allocation of `bytes` (collective: every rank makes the same ones, in the same order);
    /// `label` names it in the error when the heap is too small.
    fn malloc(&self, bytes: usize, label: &str) -> Result<u64, Error>;

    /// Frees a [`SymmetricHeap::malloc`] allocation (collective, like the allocation); leaks it once the
    /// heap is abandoned.
    fn free(&self, addr: u64);

    /// Where this rank's loads and stores reach rank `pe`'s copy of the heap address `addr`; 0 when they
    /// do not.
    fn peer_address(&self, addr: u64, pe: usize) -> u64;

    /// Binds a loaded module that was linked with the heap's device library, after checking that it was
    /// linked with this release of it.
    fn bind_module(&self, module: CUmodule, name: &'static str, ptx: &str) -> Result<(), Error>;

    /// The first rank this one cannot reach with loads and stores, if any.
    fn first_unreachable(&self) -> Option<usize>;

    /// Ranks `gone` have exited: from now on the collective calls that would wait for them forever (frees,
    /// the finalisation) are not made, and the heap is left to the process's end.
    fn abandon(&self, gone: &[usize]);

    /// Whether [`SymmetricHeap::abandon`] was called.
    fn is_abandoned(&self) -> bool;
}

/// Launches captured by a backend, in the form that backend replays (CUDA graphs, recorded launches).
pub(crate) struct Captured(Box<dyn Any + Send + Sync>);

impl Captured {
    pub(crate) fn new<T: Any + Send + Sync>(launches: T) -> Captured {
        Captured(Box::new(launches))
    }

    /// The backend's own form, or [`Error::Unsupported`] for a capture made by another backend (`backend`
    /// names the one asking).
    pub(crate) fn get<T: Any>(&self, backend: &'static str) -> Result<&T, Error> {
        self.0
            .downcast_ref::<T>()
            .ok_or(Error::Unsupported { what: "replaying a graph captured by another backend", backend })
    }
}

impl fmt::Debug for Captured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Captured")
    }
}
