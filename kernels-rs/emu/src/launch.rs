//! Running one rank's grid: one host thread per GPU thread, panics caught and recorded like the GPU's
//! panic handler does; the launch then ends every thread at its next block barrier or warp call (where the
//! GPU's threads would go on until they exit, which reports the same errors).

use std::any::Any;
use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread;

use super::block::{Block, lock};
use super::check::{self, Checker};
use super::schedule::Pauses;
use super::team::Session;
use super::thread::{self as emu_thread, ThreadState};
use super::weak::{self, StoreBuffer};
use super::{EmuError, KernelExit, MAX_BLOCK_THREADS, MAX_DYNAMIC_SHARED_BYTES, MAX_THREADS};
use ferrocomm_abi::{LaunchCtx, ThreadRef};

/// Stack of each emulated thread: kernels are small, and thousands of them run at once.
const STACK_BYTES: usize = 512 * 1024;

/// Where and why an emulated thread panicked (what the GPU's panic handler would record, plus the message).
#[derive(Debug, Clone)]
pub(crate) struct PanicSite {
    pub(crate) file: String,
    pub(crate) line: u32,
    pub(crate) column: u32,
    pub(crate) message: String,
}

/// The first panic of a launch, which trapped it.
#[derive(Debug, Clone)]
struct Trap {
    block: [u32; 3],
    thread: [u32; 3],
    site: PanicSite,
}

/// The state every thread of one launch shares.
#[derive(Debug)]
pub(crate) struct Launch {
    pub(crate) ctx: LaunchCtx,
    trapped: AtomicBool,
    trap: Mutex<Option<Trap>>,
    blocks: Vec<Arc<Block>>,
    /// The team launch this rank's grid is part of.
    session: Arc<Session>,
    /// Threads of this grid that panicked (the first [`PRINTED_PANICS`] are said on stderr).
    panics: AtomicU32,
}

/// Panics of one rank's grid said on stderr; the rest are counted in one line when the grid ends (the error
/// records, and the host's error, summarise them all).
const PRINTED_PANICS: u32 = 8;

impl Launch {
    /// The team launch this rank's grid is part of.
    pub(crate) fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The checker watching the launch, if any.
    pub(crate) fn checker(&self) -> Option<&Checker> {
        self.session.checker.as_ref()
    }

    /// Whether a thread of the launch panicked.
    pub(crate) fn is_trapped(&self) -> bool {
        self.trapped.load(Ordering::Acquire)
    }

    fn trap(&self, trap: Option<Trap>) {
        {
            let mut first = lock(&self.trap);
            if first.is_none() {
                *first = trap;
            }
        }
        self.trapped.store(true, Ordering::Release);
        for block in &self.blocks {
            block.wake_all();
        }
    }
}

thread_local! {
    /// Set by the panic hook for the catching frame of the same thread.
    static LAST_PANIC: RefCell<Option<PanicSite>> = const { RefCell::new(None) };
}

/// Installs (once) a panic hook that, on emulated threads, keeps the panic's location for the error record
/// and prints one line naming the GPU thread; other threads get the previous hook.
fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let Some(t) = emu_thread::try_current() else {
                previous(info);
                return;
            };
            let (file, line, column) =
                info.location().map(|l| (l.file().to_owned(), l.line(), l.column())).unwrap_or_default();
            let message = payload_message(info.payload());
            if t.launch.panics.fetch_add(1, Ordering::Relaxed) < PRINTED_PANICS {
                eprintln!(
                    "emulated kernel panicked (rank {} block {:?} thread {:?}) at {file}:{line}:{column}: {message}",
                    t.launch.ctx.rank, t.block_idx, t.thread_idx
                );
            }
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(PanicSite { file, line, column, message }));
        }));
    });
}

fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_owned()
    }
}

fn linear(idx: [u32; 3], dim: [u32; 3]) -> u32 {
    idx[0] + dim[0] * (idx[1] + dim[1] * idx[2])
}

fn unlinear(i: u32, dim: [u32; 3]) -> [u32; 3] {
    [i % dim[0], (i / dim[0]) % dim[1], i / (dim[0] * dim[1])]
}

/// Records the thread's panic in its rank's error buffer and raises the team's abort word, as the device
/// library's panic handler does on a GPU.
fn record_panic(state: &ThreadState, site: &PanicSite) {
    let who = ThreadRef { rank: state.launch.ctx.rank, block: state.block_idx, thread: state.thread_idx };
    check::record_panic(&state.launch.ctx, who, (&site.file, site.line, site.column), &site.message);
}

/// Runs the kernel as one emulated thread, then tells the block it exited.
fn run_thread(state: Rc<ThreadState>, kernel: &(dyn Fn() + Sync)) {
    emu_thread::set_current(Some(state.clone()));
    state.launch.session.progressed();
    state.pauses.at_start();
    let result = panic::catch_unwind(AssertUnwindSafe(kernel));
    let in_flight = state.bulk.borrow().in_flight();
    if result.is_ok()
        && let Some(loc) = in_flight
    {
        // On a GPU the store would go on reading shared memory that no longer exists.
        let message = "bulk store still in flight when its thread ended: wait for it (`bulk_wait`) first".to_owned();
        let site = PanicSite { file: loc.file().to_owned(), line: loc.line(), column: loc.column(), message };
        record_panic(&state, &site);
        state.launch.trap(Some(Trap { block: state.block_idx, thread: state.thread_idx, site }));
    }
    if let Err(payload) = result
        && !payload.is::<KernelExit>()
    {
        let site = LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| PanicSite {
            file: String::new(),
            line: 0,
            column: 0,
            message: payload_message(payload.as_ref()),
        });
        record_panic(&state, &site);
        state.launch.trap(Some(Trap { block: state.block_idx, thread: state.thread_idx, site }));
    }
    // The thread's last stores reach memory as it ends, however it ended (on a GPU they would too).
    weak::drain_all(&state);
    check::thread_ended(&state, !state.launch.is_trapped());
    emu_thread::set_current(None);
    state.block.thread_exited(state.linear_tid);
    state.launch.session.progressed();
}

pub(crate) fn check_dims(grid: [u32; 3], block: [u32; 3], dynamic_shared_bytes: usize) -> Result<(u32, u32), EmuError> {
    if grid.contains(&0) || block.contains(&0) {
        return Err(EmuError::EmptyDimension { grid, block });
    }
    let block_threads = block.iter().map(|&d| u64::from(d)).product::<u64>();
    if block_threads > u64::from(MAX_BLOCK_THREADS) {
        return Err(EmuError::BlockTooLarge { block, threads: block_threads });
    }
    let blocks = grid.iter().map(|&d| u64::from(d)).product::<u64>();
    let threads = blocks.saturating_mul(block_threads);
    if threads > u64::from(MAX_THREADS) {
        return Err(EmuError::TooManyThreads { grid, block, threads });
    }
    if dynamic_shared_bytes > MAX_DYNAMIC_SHARED_BYTES {
        return Err(EmuError::SharedMemoryTooLarge { requested: dynamic_shared_bytes });
    }
    // Both fit in u32: checked against the limits above.
    Ok((blocks as u32, block_threads as u32))
}

/// Marks the rank finished however its launch ends (the session's last rank runs the cross-rank checks).
struct Finish<'a> {
    session: &'a Session,
    rank: u32,
    trapped: bool,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.session.finish_rank(self.rank, self.trapped);
    }
}

/// Runs rank `ctx.rank`'s grid of the team launch `session` (see [`launch`](fn@super::launch)).
pub(crate) fn launch(session: &Arc<Session>, ctx: LaunchCtx, kernel: &(dyn Fn() + Sync)) -> Result<(), EmuError> {
    let (grid, block, dynamic_shared_bytes) = (session.grid, session.block, session.dynamic_shared_bytes);
    let (blocks, block_threads) = check_dims(grid, block, dynamic_shared_bytes)?;
    session.start_rank(&ctx)?;
    let mut finish = Finish { session, rank: ctx.rank, trapped: false };
    install_panic_hook();
    let launch = Arc::new(Launch {
        ctx,
        trapped: AtomicBool::new(false),
        trap: Mutex::new(None),
        blocks: (0..blocks).map(|_| Arc::new(Block::new(block_threads, dynamic_shared_bytes))).collect(),
        session: Arc::clone(session),
        panics: AtomicU32::new(0),
    });
    let mut spawn_error = None;
    thread::scope(|scope| {
        'spawn: for b in 0..blocks {
            for t in 0..block_threads {
                let state = (b, t);
                let launch_ref = launch.clone();
                let spawned = thread::Builder::new().stack_size(STACK_BYTES).spawn_scoped(scope, move || {
                    let (b, t) = state;
                    let (session_weak, seed, me) =
                        (launch_ref.session.weak, launch_ref.session.seed, (launch_ref.ctx.rank, b, t));
                    let check = launch_ref.checker().map(|c| {
                        RefCell::new(c.thread(launch_ref.ctx.rank, c.geometry().gid(launch_ref.ctx.rank, b, t)))
                    });
                    let st = Rc::new(ThreadState {
                        thread_idx: unlinear(t, block),
                        block_idx: unlinear(b, grid),
                        block_dim: block,
                        grid_dim: grid,
                        linear_tid: t,
                        linear_block: b,
                        block: launch_ref.blocks[b as usize].clone(),
                        pauses: Pauses::new(
                            launch_ref.session.seed,
                            launch_ref.ctx.rank,
                            b,
                            t,
                            launch_ref.session.late,
                        ),
                        weak: StoreBuffer::new(session_weak, seed, me, block_threads),
                        launch: launch_ref,
                        check,
                        bulk: Default::default(),
                    });
                    debug_assert_eq!(linear(st.thread_idx, block), t);
                    run_thread(st, kernel);
                });
                if let Err(e) = spawned {
                    // The threads already running must not wait for the ones that never start.
                    spawn_error = Some(EmuError::Spawn { threads: blocks * block_threads, source: e });
                    launch.trap(None);
                    for (bb, blk) in launch.blocks.iter().enumerate() {
                        let first = if bb as u32 == b {
                            t
                        } else if (bb as u32) > b {
                            0
                        } else {
                            block_threads
                        };
                        for tt in first..block_threads {
                            blk.thread_exited(tt);
                        }
                    }
                    break 'spawn;
                }
            }
        }
    });
    // What the rank's threads made visible to their block or rank only, everyone sees once its grid ended.
    session.veils.rank_ended(ctx.rank);
    finish.trapped = launch.is_trapped();
    let panics = launch.panics.load(Ordering::Relaxed);
    if panics > PRINTED_PANICS {
        eprintln!("emulated kernel: {} more panic(s) on rank {} not printed", panics - PRINTED_PANICS, ctx.rank);
    }
    if let Some(err) = spawn_error {
        return Err(err);
    }
    match lock(&launch.trap).take() {
        Some(trap) => Err(EmuError::Trapped {
            at: ThreadRef { rank: ctx.rank, block: trap.block, thread: trap.thread },
            file: trap.site.file,
            line: trap.site.line,
            column: trap.site.column,
            message: trap.site.message,
        }),
        None => Ok(()),
    }
}

/// Ends the calling emulated thread the way PTX `exit` does: the launch catches this unwind silently.
pub fn exit_thread() -> ! {
    panic::resume_unwind(Box::new(KernelExit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_indices_round_trip() {
        let dim = [3, 4, 5];
        for i in 0..60 {
            assert_eq!(linear(unlinear(i, dim), dim), i);
        }
    }

    #[test]
    fn limits_are_checked() {
        assert!(matches!(check_dims([0, 1, 1], [1, 1, 1], 0), Err(EmuError::EmptyDimension { .. })));
        assert!(matches!(check_dims([1, 1, 1], [1025, 1, 1], 0), Err(EmuError::BlockTooLarge { .. })));
        assert!(matches!(check_dims([5, 1, 1], [1024, 1, 1], 0), Err(EmuError::TooManyThreads { .. })));
        assert!(matches!(check_dims([1, 1, 1], [32, 1, 1], 1 << 20), Err(EmuError::SharedMemoryTooLarge { .. })));
        assert_eq!(check_dims([2, 2, 1], [32, 2, 1], 0).unwrap(), (4, 64));
    }
}
