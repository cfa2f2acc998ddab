//! The state a team shares with its buffers and guards: the backend, the per-rank error buffers, the host
//! watchdog, and the registries that turn an address back into a pad or buffer name (`decode`).

use std::any::Any;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrocomm_device::abi::{ERROR_KIND_SLOTS, ErrorBuffer, ErrorKind, LaunchCtx};

use super::symmetric;
use super::{Backend, Device};
use crate::error::{DeviceError, DeviceErrors, Error, ErrorCount};
use crate::exec::{ErrorSlot, Exec, Partial, SymmetricHeap, TeamView};
use crate::process::ProcessGroup;

/// Slack the host watchdog gives a launch beyond the device timeout before it declares the stream stuck.
pub(crate) const HOST_GRACE: Duration = Duration::from_secs(1);

/// Memory a captured graph's launches use (a symmetric buffer's), which the graph keeps alive: the team
/// holds it without knowing what it is.
pub(crate) type Pin = Arc<dyn Any + Send + Sync>;

/// The team's abort words: one `u32` per rank in a symmetric allocation (a panic raises every rank's, and
/// waits end when they see their own), and each local rank's table of every rank's word.
#[derive(Debug)]
pub(crate) struct AbortWords {
    /// Per rank: its word's part, as this process addresses it.
    parts: Vec<Part>,
    /// Per local rank: the address of its table of `world` word addresses.
    tables: Vec<u64>,
}

/// Bytes of each rank's abort word allocation (one allocation granule; the word is its first 4 bytes).
const ABORT_BYTES: usize = crate::size::ALIGN;

/// A signal pad's ranges, so a timeout's address can be named.
#[derive(Debug)]
pub(crate) struct PadEntry {
    pub id: u64,
    pub name: String,
    pub elem_bytes: usize,
    /// `(owner rank, base address, bytes)`.
    pub ranges: Vec<(usize, u64, usize)>,
}

/// A symmetric buffer's ranges, so an address in a checker finding can be named.
#[derive(Debug)]
pub(crate) struct BufferEntry {
    /// The allocation's number.
    pub id: u64,
    /// How findings name it: `SymBuffer<u32> #3`, or the name it was given.
    pub label: String,
    pub elem_bytes: usize,
    /// `(owner rank, base address, bytes)`.
    pub ranges: Vec<(usize, u64, usize)>,
}

#[derive(Debug)]
pub(crate) struct TeamShared {
    pub id: u64,
    pub backend: Backend,
    pub world: usize,
    /// The ranks this process runs, in the order the backend numbers them (every rank, unless the team
    /// spans processes).
    pub local: Vec<usize>,
    pub timeout: Duration,
    /// Per rank of the team.
    pub devices: Vec<Device>,
    /// Per local rank: its [`ErrorBuffer`], in host memory the device writes through a mapping (so a
    /// record survives even a trap that kills the CUDA context).
    pub error_buffers: Vec<ErrorSlot>,
    /// Set by a host timeout: from then on memory is leaked rather than freed under a running kernel.
    pub poisoned: AtomicBool,
    pub capturing: AtomicBool,
    /// Kernel launches and copies (a graph replay counts each of its launches) whose guard has not waited yet.
    pub in_flight: AtomicUsize,
    /// Those of `in_flight` whose guard was left in the stream (`LaunchGuard::leave_in_stream`): the next
    /// wait that sees every stream idle retires them.
    pub left_in_stream: AtomicUsize,
    /// Launches recorded by the capture in progress.
    pub captured_launches: AtomicUsize,
    /// Held while one team launch is queued on every rank, so two threads' launches cannot interleave
    /// differently on different ranks (kernels waiting on each other would deadlock).
    pub launch_lock: Mutex<()>,
    /// Memory the launches of the capture in progress use: the graph keeps it alive.
    pub capture_pins: Mutex<Vec<Pin>>,
    pub pads: Mutex<Vec<PadEntry>>,
    pub buffers: Mutex<Vec<BufferEntry>>,
    /// The team's other processes, when it spans several.
    pub group: Option<ProcessGroup>,
    /// NVSHMEM, for a team made with it: the symmetric heap every symmetric allocation comes from, and the
    /// binding of each module's NVSHMEM flavour.
    pub nvshmem: Option<Box<dyn SymmetricHeap>>,
    /// The abort words (`None` only while the team is being built).
    abort: Option<AbortWords>,
    /// Trace mode's rings and log (`None`: the team does not trace).
    pub tracer: Option<super::trace::Tracer>,
    /// Dropped only when no kernel can still run (see `Drop`).
    pub exec: ManuallyDrop<Box<dyn Exec>>,
}

/// One rank's part of a symmetric allocation, as this process addresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// Allocated by this process for one of its ranks.
    Own(u64),
    /// Another process's part, mapped into this one.
    Mapped(u64),
    /// This process's part, from NVSHMEM's symmetric heap.
    Nvshmem(u64),
    /// A peer's part of an NVSHMEM allocation as `nvshmem_ptr` maps it (0: loads and stores cannot reach it,
    /// only NVSHMEM's puts); NVSHMEM owns the mapping.
    NvshmemPeer(u64),
}

impl Part {
    pub fn address(self) -> u64 {
        match self {
            Part::Own(a) | Part::Mapped(a) | Part::Nvshmem(a) | Part::NvshmemPeer(a) => a,
        }
    }
}

impl TeamShared {
    /// The core of a team of `world` ranks, `local` of which run here on `exec`; allocates their error
    /// buffers.
    #[expect(clippy::too_many_arguments, reason = "each part of the core comes from a different place of the builder")]
    pub fn new(
        backend: Backend,
        world: usize,
        local: Vec<usize>,
        timeout: Duration,
        devices: Vec<Device>,
        exec: Box<dyn Exec>,
        group: Option<ProcessGroup>,
        nvshmem: Option<Box<dyn SymmetricHeap>>,
    ) -> Result<TeamShared, Error> {
        static NEXT_TEAM_ID: AtomicU64 = AtomicU64::new(1);
        let mut shared = TeamShared {
            id: NEXT_TEAM_ID.fetch_add(1, Ordering::Relaxed),
            backend,
            world,
            local,
            timeout,
            devices,
            error_buffers: Vec::new(),
            poisoned: AtomicBool::new(false),
            capturing: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            left_in_stream: AtomicUsize::new(0),
            captured_launches: AtomicUsize::new(0),
            launch_lock: Mutex::new(()),
            capture_pins: Mutex::new(Vec::new()),
            pads: Mutex::new(Vec::new()),
            buffers: Mutex::new(Vec::new()),
            group,
            nvshmem,
            abort: None,
            tracer: None,
            exec: ManuallyDrop::new(exec),
        };
        for slot in 0..shared.local.len() {
            // On an error, dropping `shared` frees the buffers made so far.
            let errors = shared.exec.alloc_error_buffer(slot)?;
            shared.error_buffers.push(errors);
        }
        shared.abort = Some(shared.alloc_abort_words()?);
        Ok(shared)
    }

    /// Allocates the abort words (every rank's part, and each local rank's table of them) and writes their
    /// addresses into the local ranks' error buffers, where the device library finds them.
    fn alloc_abort_words(&self) -> Result<AbortWords, Error> {
        let parts = self.alloc_symmetric(ABORT_BYTES, "the team's abort words")?;
        let mut words = AbortWords { parts, tables: Vec::with_capacity(self.local.len()) };
        let table: Vec<u8> = words.parts.iter().flat_map(|p| p.address().to_ne_bytes()).collect();
        let table_bytes = crate::size::allocation_bytes::<u64>(self.world)?;
        for &rank in &self.local {
            let made = self.alloc(rank, table_bytes).and_then(|addr| {
                words.tables.push(addr);
                self.write(rank, addr, &table)
            });
            if let Err(e) = made {
                self.free_abort_words(&words);
                return Err(e);
            }
        }
        for (slot, (&rank, errors)) in self.local.iter().zip(&self.error_buffers).enumerate() {
            // SAFETY: the rank's live error buffer; no kernel of the team has run yet.
            unsafe {
                std::ptr::write_volatile(&raw mut (*errors.host).abort_local, words.parts[rank].address());
                std::ptr::write_volatile(&raw mut (*errors.host).abort_peers, words.tables[slot]);
            }
        }
        Ok(words)
    }

    fn free_abort_words(&self, words: &AbortWords) {
        let table_bytes = crate::size::allocation_bytes::<u64>(self.world).unwrap_or(crate::size::ALIGN);
        for (&rank, &addr) in self.local.iter().zip(&words.tables) {
            self.free(rank, addr, table_bytes);
        }
        for (rank, &part) in words.parts.iter().enumerate() {
            self.release(rank, part, ABORT_BYTES);
        }
    }

    /// Lowers this process's ranks' abort words after a launch whose errors were read: the next launch
    /// starts with the team running. Only local words: another process clears its own when it reads its
    /// errors (a word cleared from here could hide the abort of that process's next launch).
    fn clear_abort_words(&self) -> Result<(), Error> {
        let Some(words) = &self.abort else { return Ok(()) };
        for &rank in &self.local {
            self.memset(rank, words.parts[rank].address(), 0, 4)?;
        }
        Ok(())
    }

    pub fn check_rank(&self, rank: usize) -> Result<(), Error> {
        if rank < self.world { Ok(()) } else { Err(Error::RankOutOfRange { rank, world: self.world }) }
    }

    /// The backend's number for `rank`, which must run in this process.
    pub fn slot(&self, rank: usize) -> Result<usize, Error> {
        self.check_rank(rank)?;
        self.local.iter().position(|&r| r == rank).ok_or_else(|| Error::NotLocal { rank, local: self.local.clone() })
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    pub fn check_usable(&self) -> Result<(), Error> {
        if self.is_poisoned() { Err(Error::Poisoned) } else { Ok(()) }
    }

    pub fn refuse_while_capturing(&self, what: &'static str) -> Result<(), Error> {
        self.check_usable()?;
        if self.capturing.load(Ordering::Acquire) { Err(Error::Capturing { what }) } else { Ok(()) }
    }

    /// Keeps `alloc` alive for the graph being captured, if one is (a kernel parameter lowered from it).
    pub fn pin_if_capturing<T: Any + Send + Sync>(&self, alloc: &Arc<T>) {
        if self.capturing.load(Ordering::Acquire) {
            let mut pins = self.capture_pins.lock().unwrap_or_else(|p| p.into_inner());
            let pinned = Arc::as_ptr(alloc).cast::<()>();
            if !pins.iter().any(|p| Arc::as_ptr(p).cast::<()>() == pinned) {
                pins.push(Arc::clone(alloc) as Pin);
            }
        }
    }

    /// What each rank's module global holds.
    pub fn launch_ctx(&self, rank: usize) -> LaunchCtx {
        LaunchCtx {
            rank: rank as u32,
            world: self.world as u32,
            timeout_ns: self.timeout.as_nanos().min(u64::MAX as u128) as u64,
            errors: self.error_buffers[self.slot(rank).expect("launched on a local rank")].device as usize
                as *mut ErrorBuffer,
        }
    }

    /// The error of a launch or replay that failed part-way (`recorded`: by a capture, so nothing ran): the
    /// ranks already queued are waited for first, since they may use memory the caller frees next, and their
    /// device errors, consequences of the failure (their peers never started), are dropped.
    pub(crate) fn after_partial(&self, partial: Partial, recorded: bool) -> Error {
        if partial.queued > 0 && !recorded {
            let _ = self.wait_idle(Instant::now());
            let _ = self.take_device_errors();
        }
        partial.error
    }

    /// Makes sure no kernel runs before the host touches memory: a no-op unless a launch guard is alive or
    /// was leaked with `mem::forget`.
    pub fn settle(&self, what: &'static str) -> Result<(), Error> {
        self.refuse_while_capturing(what)?;
        if self.in_flight.load(Ordering::Acquire) > 0 {
            self.wait_idle(Instant::now())?;
        }
        Ok(())
    }

    /// Polls every local rank's stream until all are idle; past `started + timeout + 1 s` (one timeout per
    /// launch still queued; on the emulator, counted from its last sign of progress instead of `started`)
    /// the team is poisoned and the busy rank named. Never blocks in the driver, so it
    /// never hangs. A rank that fails (a trapped kernel, a dead emulator thread) does not end the wait
    /// early: the others may still use the memory.
    pub fn wait_idle(&self, started: Instant) -> Result<(), Error> {
        self.check_usable()?;
        let left_before = self.left_in_stream.load(Ordering::Acquire);
        let queued = self.in_flight.load(Ordering::Acquire).max(1) as u32;
        let allowance = self.timeout.saturating_mul(queued) + HOST_GRACE;
        // Counted from the enqueue, or from the backend's last sign of progress (an emulated grid on a
        // loaded host is slow, not stuck, while its threads keep starting and ending).
        let (mut progress, mut since) = (self.exec.progress(), started);
        let mut pending: Vec<usize> = self.local.clone();
        let mut failure: Option<Error> = None;
        let mut polls = 0u32;
        loop {
            pending.retain(|&rank| match self.idle(rank) {
                Ok(idle) => !idle,
                Err(e) => {
                    failure.get_or_insert(e);
                    false
                }
            });
            let Some(&rank) = pending.first() else { break };
            let now = self.exec.progress();
            if now != progress {
                (progress, since) = (now, Instant::now());
            }
            if Instant::now() >= since + allowance {
                self.poisoned.store(true, Ordering::Release);
                tracing::error!(
                    rank,
                    "a kernel did not finish within the host watchdog's deadline; the team is poisoned"
                );
                return Err(Error::HostTimeout { rank, waited: started.elapsed() });
            }
            // Spin briefly for latency, then back off so a long kernel does not burn a core.
            polls += 1;
            if polls < 2000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        // Every stream was idle after the launches left in them before this wait began: those have ended
        // (one left meanwhile by another thread may still run, and is retired by a later wait).
        // Another wait may have retired some of them already: take no more than are left.
        let taken = self
            .left_in_stream
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n - n.min(left_before)))
            .map_or(0, |n| n.min(left_before));
        self.in_flight.fetch_sub(taken, Ordering::AcqRel);
        match failure {
            None => Ok(()),
            // A device panic traps, which kills the context: the record in the error buffer says where.
            Some(e @ Error::Cuda { .. }) => match self.take_device_errors() {
                Err(device @ Error::Device(_)) => Err(device),
                _ => Err(e),
            },
            Some(e) => Err(e),
        }
    }

    fn idle(&self, rank: usize) -> Result<bool, Error> {
        self.exec.idle(self.slot(rank)?)
    }

    /// Whether a local rank's device error buffer holds a record, read without waiting for any kernel: the
    /// count is one word in host memory that kernels only ever raise.
    pub fn errors_pending(&self) -> bool {
        self.error_buffers.iter().any(|slot| {
            // SAFETY: the rank's live error buffer; `count` is an aligned u32 that kernels update atomically,
            // so reading it atomically races with nothing.
            let count = unsafe { &*(&raw const (*slot.host).count).cast::<std::sync::atomic::AtomicU32>() };
            count.load(Ordering::Acquire) != 0
        })
    }

    /// Reads and clears every rank's device error buffer; the records become one [`Error::Device`]. After
    /// errors it also lowers the local ranks' abort words (a panic raised them).
    pub fn take_device_errors(&self) -> Result<(), Error> {
        // The launch's trace first: a failed launch's wait-for report reads it.
        let traced = self.collect_trace().unwrap_or_else(|e| {
            tracing::error!("collecting the launch's trace: {e}");
            Vec::new()
        });
        let mut all = Vec::new();
        let mut lost = 0u64;
        let mut counts = Vec::new();
        for &rank in &self.local {
            let (records, dropped, rank_counts) = self.take_rank_errors(rank)?;
            all.extend(records);
            lost += dropped;
            counts.extend(rank_counts);
        }
        let Some(errors) = DeviceErrors::with_counts(all, lost, counts) else { return Ok(()) };
        let history = self.trace_history();
        let report = crate::error::WaitForReport::build(errors.errors(), &traced, &history, (&self.local, self.world));
        let errors = errors.with_report(report);
        if let Err(e) = self.clear_abort_words() {
            tracing::error!("lowering the team's abort words after a failed launch: {e}");
        }
        // A wait that timed out in a team that spans processes may have waited on a rank that is gone.
        if let Some(group) = &self.group {
            let exited = group.exited_ranks();
            if !exited.is_empty() {
                return Err(Error::PeersExited { exited, errors });
            }
        }
        Err(Error::Device(errors))
    }

    /// Rank `rank`'s records, how many errors it raised beyond them, and its device-counted errors by kind.
    fn take_rank_errors(&self, rank: usize) -> Result<(Vec<DeviceError>, u64, Vec<ErrorCount>), Error> {
        let host = self.error_buffers[self.slot(rank)?].host;
        // SAFETY: `host` is this rank's live error buffer and no kernel of the team runs (the caller waited),
        // so nothing writes it concurrently; volatile because the device wrote it behind the compiler's back.
        let count = unsafe { std::ptr::read_volatile(&raw const (*host).count) };
        if count == 0 {
            return Ok((Vec::new(), 0, Vec::new()));
        }
        // SAFETY: as above; `ErrorBuffer` is plain integers, any bit pattern is valid.
        let buffer: ErrorBuffer = unsafe { std::ptr::read_volatile(host) };
        // SAFETY: as above; the next launch is issued after this write. The abort words' addresses stay.
        unsafe { std::ptr::write_volatile(host, buffer.cleared()) };
        let records: Vec<DeviceError> = buffer.written_records().map(|r| self.decode(rank, r)).collect();
        let lost = u64::from(buffer.count) - records.len() as u64;
        // The emulator's checker relabels a timeout on a signal nobody raised: count it once, as that.
        let unraised = records.iter().filter(|r| matches!(r, DeviceError::UnraisedSignal { .. })).count() as u64;
        let counts = (0..ERROR_KIND_SLOTS)
            .filter_map(|k| {
                let kind = ErrorKind::from_u32(k as u32)?;
                let mut n = u64::from(buffer.kinds[k]);
                if kind == ErrorKind::Timeout {
                    n = n.saturating_sub(unraised);
                }
                let name = match kind {
                    ErrorKind::Timeout => "timeout",
                    ErrorKind::Panic => "panic",
                    ErrorKind::Aborted => "aborted wait",
                    _ => return None,
                };
                (n > 0).then_some(ErrorCount { rank, kind: name, count: n })
            })
            .collect();
        Ok((records, lost, counts))
    }

    /// A zeroed allocation of `bytes` (a multiple of 256, at least 256) on `rank`, which runs here.
    pub fn alloc(&self, rank: usize, bytes: usize) -> Result<u64, Error> {
        self.exec.alloc(self.slot(rank)?, bytes)
    }

    /// Every rank's part of a new symmetric allocation of `bytes` per rank, in rank order; `label` names
    /// it in the agreement check of a team that spans processes.
    pub fn alloc_symmetric(&self, bytes: usize, label: &str) -> Result<Vec<Part>, Error> {
        if let Some(nv) = &self.nvshmem {
            return self.alloc_nvshmem(nv.as_ref(), bytes, label);
        }
        if let Some(group) = &self.group {
            return symmetric::allocate(self, group, bytes, label);
        }
        let mut parts = Vec::with_capacity(self.world);
        for &rank in &self.local {
            match self.alloc(rank, bytes) {
                Ok(addr) => parts.push(Part::Own(addr)),
                Err(e) => {
                    for (rank, part) in parts.into_iter().enumerate() {
                        self.release(rank, part, bytes);
                    }
                    return Err(e);
                }
            }
        }
        Ok(parts)
    }

    /// A symmetric allocation from NVSHMEM's heap: this process's one rank's part, zeroed, and every peer's
    /// as `nvshmem_ptr` maps it. Across processes the ranks first agree on what they allocate, since
    /// `nvshmem_malloc` is collective and a different order or size would pair the wrong buffers.
    fn alloc_nvshmem(&self, nv: &dyn SymmetricHeap, bytes: usize, label: &str) -> Result<Vec<Part>, Error> {
        if let Some(group) = &self.group {
            let number = group.next_allocation();
            group
                .agree("a symmetric allocation", &format!("allocation #{number}: {label} ({bytes} bytes per rank)"))?;
        }
        let rank = nv.rank();
        let slot = self.slot(rank)?;
        self.exec.make_current(slot)?;
        let own = nv.malloc(bytes, label)?;
        if let Err(e) = self.memset(rank, own, 0, bytes) {
            nv.free(own);
            return Err(e);
        }
        Ok((0..self.world)
            .map(|pe| if pe == rank { Part::Nvshmem(own) } else { Part::NvshmemPeer(nv.peer_address(own, pe)) })
            .collect())
    }

    /// Releases rank `rank`'s part of a symmetric allocation; leaks it if the team is poisoned.
    pub fn release(&self, rank: usize, part: Part, bytes: usize) {
        match part {
            Part::Nvshmem(addr) if !self.is_poisoned() => {
                if let Some(nv) = &self.nvshmem {
                    self.abandon_nvshmem_if_peers_exited(nv.as_ref());
                    if let Err(e) = self.slot(rank).and_then(|slot| self.exec.make_current(slot)) {
                        tracing::error!("before freeing NVSHMEM memory of rank {rank}: {e}");
                    }
                    nv.free(addr);
                }
            }
            Part::Nvshmem(_) | Part::NvshmemPeer(_) => {}
            Part::Own(addr) => self.free(rank, addr, bytes),
            Part::Mapped(addr) if !self.is_poisoned() => {
                let Some(&here) = self.local.first() else { return };
                // SAFETY: mapped by `alloc_symmetric` for the local rank with `bytes`, released once, and
                // no kernel runs (not poisoned, settled by the owner).
                let unmapped = self.slot(here).and_then(|slot| unsafe { self.exec.unmap(slot, addr, bytes) });
                if let Err(e) = unmapped {
                    tracing::error!("unmapping rank {rank}'s memory: {e}");
                }
            }
            Part::Mapped(_) => {}
        }
    }

    /// NVSHMEM's teardown is collective (`nvshmem_free` and the finalisation wait for every PE): once a PE's
    /// process has exited, this one would wait for it forever, so it leaves NVSHMEM as it is. Only processes
    /// of this host can be seen to exit.
    fn abandon_nvshmem_if_peers_exited(&self, nv: &dyn SymmetricHeap) {
        if let Some(group) = &self.group {
            let exited = group.exited_ranks();
            if !exited.is_empty() {
                nv.abandon(&exited);
            }
        }
    }

    /// Frees an allocation of [`TeamShared::alloc`]; leaks it if the team is poisoned (a kernel may still run).
    pub fn free(&self, rank: usize, addr: u64, bytes: usize) {
        if self.is_poisoned() {
            return;
        }
        // SAFETY: `addr` came from `alloc(rank, bytes)`, and no kernel runs (not poisoned, settled).
        let freed = self.slot(rank).and_then(|slot| unsafe { self.exec.free(slot, addr, bytes) });
        if let Err(e) = freed {
            tracing::error!("freeing device memory of rank {rank}: {e}");
        }
    }

    /// Copies `src` to device address `dst` of `rank`; the caller checked the range and settled the team.
    pub fn write(&self, rank: usize, dst: u64, src: &[u8]) -> Result<(), Error> {
        // SAFETY: the caller checked `dst..dst+len` lies in one allocation of this team, and settled.
        unsafe { self.exec.write(self.slot(rank)?, dst, src) }
    }

    /// Copies from device address `src` of `rank` into `dst`; the caller checked the range and settled.
    pub fn read(&self, rank: usize, src: u64, dst: &mut [u8]) -> Result<(), Error> {
        // SAFETY: as for `write`.
        unsafe { self.exec.read(self.slot(rank)?, src, dst) }
    }

    /// Sets `len` bytes at `dst` of `rank` to `byte`; the caller checked the range and settled.
    pub fn memset(&self, rank: usize, dst: u64, byte: u8, len: usize) -> Result<(), Error> {
        // SAFETY: as for `write`.
        unsafe { self.exec.memset(self.slot(rank)?, dst, byte, len) }
    }
}

impl Drop for TeamShared {
    fn drop(&mut self) {
        if self.is_poisoned() {
            // A kernel may still run: leak its memory, modules, streams and emulator threads.
            return;
        }
        if let Some(words) = self.abort.take() {
            self.free_abort_words(&words);
        }
        self.write_trace_on_drop();
        self.free_trace();
        for slot in &self.error_buffers {
            // SAFETY: allocated by the backend's `alloc_error_buffer`, freed once; no kernel runs.
            let freed = unsafe { self.exec.free_error_buffer(*slot) };
            if let Err(e) = freed {
                tracing::error!("freeing an error buffer: {e}");
            }
        }
        // NVSHMEM ends before the contexts and modules it was initialised on go.
        if let Some(nv) = self.nvshmem.take() {
            self.abandon_nvshmem_if_peers_exited(nv.as_ref());
            if nv.is_abandoned() {
                // NVSHMEM was left unfinalised: its proxy and bootstrap threads still use the contexts and
                // the modules, so they stay until the process ends.
                drop(nv);
                return;
            }
            if let Err(e) = self.exec.make_current(0) {
                tracing::error!("before finalising NVSHMEM: {e}");
            }
            drop(nv);
        }
        // SAFETY: dropped once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.exec) };
    }
}

/// What the backends read of the team.
impl TeamView for TeamShared {
    fn world(&self) -> usize {
        self.world
    }

    fn local(&self) -> &[usize] {
        &self.local
    }

    fn launch_ctx(&self, rank: usize) -> LaunchCtx {
        TeamShared::launch_ctx(self, rank)
    }

    fn trace_ring(&self, slot: usize) -> Option<(u64, u64)> {
        TeamShared::trace_ring(self, slot).map(|ring| (ring, self.trace_capacity()))
    }

    fn heap(&self) -> Option<&dyn SymmetricHeap> {
        self.nvshmem.as_deref()
    }
}
