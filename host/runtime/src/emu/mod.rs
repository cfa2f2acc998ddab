//! The emulator backend: each rank is a worker thread that plays its stream (launches run in order), each
//! team launch is one `ferrocomm_device::emu::TeamLaunch` whose ranks run the kernel's host body on one host
//! thread per GPU thread (so the emulator's checker sees every rank), and "device" memory is 256-byte
//! aligned host memory. The team's launches share one `Timeline`, told when the host waits for a stream
//! and when it writes memory, so the checker follows ordering from one kernel to the next as well.

use std::ffi::c_void;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;

use ferrocomm_device::emu::{
    EmuError, LateRank, MAX_BLOCK_THREADS, MAX_DYNAMIC_SHARED_BYTES, MAX_THREADS, TeamLaunch, Timeline,
};

mod heap;

pub(crate) use heap::{Heap, PrivateHeap, SharedHeap};
use heap::{alloc_zeroed, free_zeroed};

use crate::error::Error;
use crate::exec::{Captured, ErrorSlot, Exec, ExternalStream, Kernel, LaunchConfig, ParamPack, Partial, TeamView};
use crate::size::ERROR_BUFFER_BYTES;

type Job = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// One emulated stream.
#[derive(Debug)]
struct EmuRank {
    /// The team rank this stream plays.
    rank: usize,
    tx: Option<Sender<Job>>,
    submitted: AtomicU64,
    done: Arc<AtomicU64>,
    /// The first failure of a job, reported once the stream is idle.
    failure: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

/// A launch or copy recorded during graph capture, replayed as is.
#[derive(Debug, Clone)]
pub(crate) enum Recorded {
    Launch { kernel: &'static Kernel, cfg: LaunchConfig, packs: Vec<Arc<ParamPack>> },
    Copy { slot: usize, copy: Copy },
}

/// A copy queued on a rank's stream: `bytes` bytes from `src` to `dst`, both addresses of this process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Copy {
    dst: u64,
    src: u64,
    bytes: usize,
}

/// What a team's builder asks of the emulator (`TeamBuilder::emulator_*`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EmulatorOptions {
    /// Whether the checker watches launches (`None`: its default, `FERROCOMM_EMU_CHECK`).
    pub checker: Option<bool>,
    /// A rank late to everything (`TeamBuilder::emulator_late_rank`).
    pub late: Option<LateRank>,
}

/// The emulator half of a team.
#[derive(Debug)]
pub(crate) struct EmuTeam {
    ranks: Vec<EmuRank>,
    /// Where the ranks' memory comes from (shared with other processes in a team that spans them).
    heap: Box<dyn Heap>,
    /// Thread starts and ends of every launch (see `Exec::progress`).
    progress: Arc<AtomicU64>,
    recording: Mutex<Option<Vec<Recorded>>>,
    /// What the team's builder asked of the emulator.
    options: EmulatorOptions,
    /// The team's launches, in the order they were queued (made at the first launch, which knows the
    /// team's size).
    timeline: OnceLock<Timeline>,
}

/// The kernel's parameter pointers, shared by the host threads of one launch.
struct Pointers(Vec<*const c_void>);

// SAFETY: the pointers address the launch's `ParamPack`, which outlives the launch and is only read.
unsafe impl Sync for Pointers {}

impl Pointers {
    // A method, not a field access: a closure capturing `.0` would capture the bare (non-Sync) Vec.
    fn get(&self) -> &[*const c_void] {
        &self.0
    }
}

impl EmuTeam {
    /// Starts one worker thread for each of `ranks` (the team's local ranks), whose memory comes from
    /// `heap`, run as `options` say.
    pub fn new(ranks: &[usize], options: EmulatorOptions, heap: Box<dyn Heap>) -> Result<EmuTeam, Error> {
        let ranks = ranks
            .iter()
            .map(|&rank| {
                let (tx, rx) = mpsc::channel::<Job>();
                let done = Arc::new(AtomicU64::new(0));
                let failure = Arc::new(Mutex::new(None));
                let (done2, failure2) = (Arc::clone(&done), Arc::clone(&failure));
                let thread = std::thread::Builder::new()
                    .name(format!("ferrocomm-emu-rank{rank}"))
                    .spawn(move || {
                        for job in rx {
                            let outcome = panic::catch_unwind(AssertUnwindSafe(job))
                                .unwrap_or_else(|_| Err("the emulator worker panicked".to_owned()));
                            if let Err(reason) = outcome {
                                let mut f = failure2.lock().unwrap_or_else(PoisonError::into_inner);
                                f.get_or_insert(reason);
                            }
                            // Release: the grid's writes happen before the host sees the stream idle.
                            done2.fetch_add(1, Ordering::Release);
                        }
                    })
                    .map_err(|e| Error::Emulator { rank, reason: format!("could not start its worker thread: {e}") })?;
                Ok(EmuRank { rank, tx: Some(tx), submitted: AtomicU64::new(0), done, failure, thread: Some(thread) })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(EmuTeam {
            ranks,
            heap,
            progress: Arc::new(AtomicU64::new(0)),
            recording: Mutex::new(None),
            options,
            timeline: OnceLock::new(),
        })
    }

    fn submit(&self, slot: usize, job: Job) -> Result<(), Error> {
        let r = &self.ranks[slot];
        r.submitted.fetch_add(1, Ordering::AcqRel);
        let sent = r.tx.as_ref().map(|tx| tx.send(job).is_ok()).unwrap_or(false);
        if !sent {
            r.done.fetch_add(1, Ordering::Release);
            return Err(Error::Emulator { rank: r.rank, reason: "its worker thread has exited".into() });
        }
        Ok(())
    }

    /// Checks what `emu::launch` would refuse, so the error comes at launch and not at wait.
    pub fn check(kernel: &Kernel, cfg: &LaunchConfig) -> Result<(), Error> {
        let bad = |reason: String| Err(Error::BadLaunchConfig { kernel: kernel.name, reason });
        let (blocks, threads) = (cfg.blocks(), u64::from(cfg.threads_per_block()));
        if threads > u64::from(MAX_BLOCK_THREADS) {
            return bad(format!("{threads} threads per block; a block holds at most {MAX_BLOCK_THREADS}"));
        }
        if blocks.saturating_mul(threads) > u64::from(MAX_THREADS) {
            return bad(format!(
                "{} threads; the emulator runs at most {MAX_THREADS} per rank (one host thread each): use a smaller \
                 grid on the emulator",
                blocks.saturating_mul(threads)
            ));
        }
        if cfg.shared_bytes as usize > MAX_DYNAMIC_SHARED_BYTES {
            return bad(format!(
                "{} bytes of dynamic shared memory; a block has at most {MAX_DYNAMIC_SHARED_BYTES}",
                cfg.shared_bytes
            ));
        }
        Ok(())
    }

    /// Queues the kernel on every rank's worker (or records it during capture).
    fn queue(
        &self,
        team: &dyn TeamView,
        kernel: &'static Kernel,
        cfg: LaunchConfig,
        packs: Vec<Arc<ParamPack>>,
    ) -> Result<(), Partial> {
        EmuTeam::check(kernel, &cfg)?;
        if let Some(recording) = self.recording.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            recording.push(Recorded::Launch { kernel, cfg, packs });
            return Ok(());
        }
        let (world, shared_bytes) = (team.world() as u32, cfg.shared_bytes as usize);
        let timeline = self.timeline.get_or_init(|| {
            let timeline =
                Timeline::with_checker(world, self.options.checker.unwrap_or_else(TeamLaunch::checked_by_default));
            match self.options.late {
                Some(late) => timeline.with_late_rank(late),
                None => timeline,
            }
        });
        // A team whose ranks all live here is one team launch, so the checker sees every rank; a rank whose
        // peers run in other processes is checked on its own.
        let whole = (team.local().len() == team.world()).then(|| timeline.launch(cfg.grid, cfg.block, shared_bytes));
        for (slot, pack) in packs.into_iter().enumerate() {
            let rank = team.local()[slot];
            let ctx = team.launch_ctx(rank);
            let team_launch = match &whole {
                Some(all) => all.clone(),
                None => timeline.launch_rank(rank as u32, cfg.grid, cfg.block, shared_bytes),
            };
            team_launch.report_progress(Arc::clone(&self.progress));
            let emulate = kernel.emulate;
            let name = kernel.name;
            let submitted = self.submit(
                slot,
                Box::new(move || {
                    let pointers = Pointers(pack.pointers().into_iter().map(|p| p.cast_const()).collect());
                    let body = || {
                        // SAFETY: `Team::launch`'s contract: the pack holds exactly the kernel's parameters,
                        // and the memory they address outlives the launch.
                        unsafe { emulate(pointers.get()) }
                    };
                    match team_launch.run_rank(ctx, &body) {
                        // The panic is in the error buffer, like on the GPU; the guard reports it from there.
                        Ok(()) | Err(EmuError::Trapped { .. }) => Ok(()),
                        Err(e) => Err(format!("kernel `{name}`: {e}")),
                    }
                }),
            );
            if let Err(error) = submitted {
                // Ranks already queued may use the memory: the core lets them finish before the borrows end.
                return Err(Partial { queued: slot, error });
            }
        }
        Ok(())
    }
}

impl EmuTeam {
    /// Queues `copy` on local rank `slot`'s worker, after the launches before it. The checker sees it as a
    /// host write between kernels, which is what it is: the worker runs it when the rank's previous
    /// launches have ended.
    fn queue_copy(&self, slot: usize, copy: Copy) -> Result<(), Error> {
        if copy.bytes == 0 {
            return Ok(());
        }
        let timeline = self.timeline.get().cloned();
        self.submit(
            slot,
            Box::new(move || {
                if let Some(t) = &timeline {
                    t.host_wrote(copy.dst as usize, copy.bytes);
                }
                // SAFETY: `Exec::copy`'s contract: both ranges are live memory of this process until the copy
                // has run; `copy` (not `copy_nonoverlapping`): a caller may copy a buffer onto itself.
                unsafe { std::ptr::copy(copy.src as usize as *const u8, copy.dst as usize as *mut u8, copy.bytes) };
                Ok(())
            }),
        )
    }

    /// The host changed `bytes` bytes at `addr` (no kernel uses them meanwhile).
    fn host_wrote(&self, addr: u64, bytes: usize) {
        if let Some(t) = self.timeline.get() {
            t.host_wrote(addr as usize, bytes);
        }
    }
}

impl Exec for EmuTeam {
    fn alloc(&self, _slot: usize, bytes: usize) -> Result<u64, Error> {
        self.heap.alloc(bytes)
    }

    unsafe fn free(&self, _slot: usize, addr: u64, bytes: usize) -> Result<(), Error> {
        self.host_wrote(addr, bytes);
        // SAFETY: per the contract.
        unsafe { self.heap.free(addr, bytes) }
    }

    unsafe fn write(&self, _slot: usize, dst: u64, src: &[u8]) -> Result<(), Error> {
        self.host_wrote(dst, src.len());
        // SAFETY: per the contract, the range lies in a live allocation no kernel uses meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as usize as *mut u8, src.len()) };
        Ok(())
    }

    unsafe fn read(&self, _slot: usize, src: u64, dst: &mut [u8]) -> Result<(), Error> {
        // SAFETY: as for `write`.
        unsafe { std::ptr::copy_nonoverlapping(src as usize as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    unsafe fn memset(&self, _slot: usize, dst: u64, byte: u8, len: usize) -> Result<(), Error> {
        self.host_wrote(dst, len);
        // SAFETY: as for `write`.
        unsafe { std::ptr::write_bytes(dst as usize as *mut u8, byte, len) };
        Ok(())
    }

    fn idle(&self, slot: usize) -> Result<bool, Error> {
        let r = &self.ranks[slot];
        if r.done.load(Ordering::Acquire) < r.submitted.load(Ordering::Acquire) {
            return Ok(false);
        }
        if let Some(t) = self.timeline.get() {
            t.host_waited(r.rank as u32);
        }
        match r.failure.lock().unwrap_or_else(PoisonError::into_inner).take() {
            Some(reason) => Err(Error::Emulator { rank: r.rank, reason }),
            None => Ok(true),
        }
    }

    fn alloc_error_buffer(&self, _slot: usize) -> Result<ErrorSlot, Error> {
        let addr = alloc_zeroed(ERROR_BUFFER_BYTES)?;
        Ok(ErrorSlot { host: addr as usize as *mut _, device: addr })
    }

    unsafe fn free_error_buffer(&self, errors: ErrorSlot) -> Result<(), Error> {
        // SAFETY: allocated by `alloc_error_buffer` with this size; per the contract no kernel runs.
        unsafe { free_zeroed(errors.device, ERROR_BUFFER_BYTES) };
        Ok(())
    }

    fn max_threads_per_block(&self, _team: &dyn TeamView, _kernel: &'static Kernel) -> Result<u32, Error> {
        Ok(MAX_BLOCK_THREADS)
    }

    fn launch(
        &self,
        team: &dyn TeamView,
        kernel: &'static Kernel,
        cfg: LaunchConfig,
        packs: Vec<ParamPack>,
        _streams: Option<&[ExternalStream]>,
        _capturing: bool,
    ) -> Result<(), Partial> {
        // No caller streams here (`check_stream` refuses them): every launch goes to the ranks' own.
        self.queue(team, kernel, cfg, packs.into_iter().map(Arc::new).collect())
    }

    unsafe fn copy(
        &self,
        slot: usize,
        dst: u64,
        src: u64,
        bytes: usize,
        _stream: Option<&ExternalStream>,
        _capturing: bool,
    ) -> Result<(), Error> {
        let copy = Copy { dst, src, bytes };
        if let Some(recording) = self.recording.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            recording.push(Recorded::Copy { slot, copy });
            return Ok(());
        }
        self.queue_copy(slot, copy)
    }

    fn begin_capture(&self) -> Result<(), Error> {
        *self.recording.lock().unwrap_or_else(PoisonError::into_inner) = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&self, _keep: bool) -> Result<Captured, Error> {
        let launches = self.recording.lock().unwrap_or_else(PoisonError::into_inner).take().unwrap_or_default();
        Ok(Captured::new(launches))
    }

    fn replay(&self, team: &dyn TeamView, captured: &Captured) -> Result<(), Partial> {
        let launches = captured.get::<Vec<Recorded>>(self.name())?;
        for (i, r) in launches.iter().enumerate() {
            let queued = match r {
                Recorded::Launch { kernel, cfg, packs } => self.queue(team, kernel, *cfg, packs.clone()),
                Recorded::Copy { slot, copy } => self.queue_copy(*slot, *copy).map_err(Partial::from),
            };
            // The recorded work before this one was queued on every rank: the core waits for it too.
            queued.map_err(|p| if i > 0 { Partial { queued: self.ranks.len(), ..p } } else { p })?;
        }
        Ok(())
    }

    fn export(&self, _slot: usize, addr: u64, _bytes: usize) -> Result<OwnedFd, Error> {
        self.heap.export(addr)
    }

    fn import(&self, _slot: usize, fd: BorrowedFd<'_>, bytes: usize) -> Result<u64, Error> {
        self.heap.import(fd, bytes)
    }

    unsafe fn unmap(&self, _slot: usize, addr: u64, bytes: usize) -> Result<(), Error> {
        self.host_wrote(addr, bytes);
        // SAFETY: per the contract, a mapping of `import` that nothing uses any more.
        unsafe { heap::unmap(addr, bytes) }
    }

    fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    fn name(&self) -> &'static str {
        "emulator"
    }
}

impl Drop for EmuTeam {
    fn drop(&mut self) {
        for rank in &mut self.ranks {
            // Closing the channel ends the worker once its queue is empty.
            rank.tx = None;
            if let Some(thread) = rank.thread.take() {
                let _ = thread.join();
            }
        }
    }
}
