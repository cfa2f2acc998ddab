//! [`TeamLaunch`]: one kernel launch on every rank of an emulated team. Each rank's grid runs in its own
//! [`TeamLaunch::run_rank`] call, concurrently; what the ranks share is the checker, which needs all of them
//! (a race between ranks, a signal no rank raised, ranks that disagree on a barrier epoch), and which
//! finishes its cross-rank checks when the last rank's grid ends. A [`Timeline`] makes the launches of one
//! team, so the checker follows ordering from one launch to the next.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::EmuError;
use super::block::lock;
use super::check::{Checker, Geometry, History};
use super::launch::{self, check_dims};
use super::schedule::{self, LateRank};
use super::veil::Veils;
use ferrocomm_abi::LaunchCtx;

/// Whether launches are checked unless told otherwise: yes, unless `FERROCOMM_EMU_CHECK` is `0`, `off`
/// or `false`.
pub(crate) fn checked_by_default() -> bool {
    static CHECKED: OnceLock<bool> = OnceLock::new();
    *CHECKED.get_or_init(|| {
        !matches!(std::env::var("FERROCOMM_EMU_CHECK").as_deref().map(str::trim), Ok("0" | "off" | "false"))
    })
}

#[derive(Debug, Default)]
struct Ranks {
    started: Vec<bool>,
    trapped: Vec<bool>,
    finished: u32,
}

/// The state the ranks of one team launch share.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) world: u32,
    pub(crate) grid: [u32; 3],
    pub(crate) block: [u32; 3],
    pub(crate) dynamic_shared_bytes: usize,
    /// `Some(rank)`: only this rank of a larger team runs here (the others run elsewhere, unseen).
    alone: Option<u32>,
    pub(crate) checker: Option<Checker>,
    /// The seed of the threads' pauses (see `schedule`) and of their store buffers' decisions (`weak`).
    pub(crate) seed: u64,
    /// Whether the threads buffer their weak and relaxed stores (see `weak`).
    pub(crate) weak: bool,
    /// The stores some threads of the launch see and others do not yet (see `veil`).
    pub(crate) veils: Veils,
    /// The rank that is late to everything in this launch, if any (see [`LateRank`]).
    pub(crate) late: Option<LateRank>,
    /// Counts every thread start and end, when someone watches the launch's progress.
    progress: OnceLock<Arc<AtomicU64>>,
    ranks: Mutex<Ranks>,
}

impl Session {
    pub(crate) fn new(
        timeline: &Timeline,
        grid: [u32; 3],
        block: [u32; 3],
        dynamic_shared_bytes: usize,
        alone: Option<u32>,
    ) -> Session {
        let world = timeline.world;
        let fits = alone.is_none_or(|r| r < world);
        let checker = match (check_dims(grid, block, dynamic_shared_bytes), &timeline.history) {
            (Ok((blocks, block_threads)), Some(history)) if world > 0 && fits => {
                let geometry = Geometry { grid, block, block_threads, rank_threads: blocks * block_threads, alone };
                Some(Checker::new(geometry, Arc::clone(history)))
            }
            // A launch with bad dimensions fails in `run_rank`; there is nothing to check.
            _ => None,
        };
        let slots = if alone.is_some() { 1 } else { world as usize };
        let ranks = Ranks { started: vec![false; slots], trapped: vec![false; slots], finished: 0 };
        let seed = schedule::next_launch_seed();
        let progress = OnceLock::new();
        let weak = super::weak::enabled_by_default();
        Session {
            world,
            grid,
            block,
            dynamic_shared_bytes,
            alone,
            checker,
            seed,
            weak,
            veils: Veils::default(),
            late: timeline.late,
            progress,
            ranks: Mutex::new(ranks),
        }
    }

    /// A thread started or ended.
    pub(crate) fn progressed(&self) {
        if let Some(p) = self.progress.get() {
            p.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The bookkeeping slot of `rank`.
    fn slot(&self, rank: u32) -> usize {
        if self.alone.is_some() { 0 } else { rank as usize }
    }

    /// Claims `ctx.rank` for a `run_rank` call. A rank launched alone is not checked against its context.
    pub(crate) fn start_rank(&self, ctx: &LaunchCtx) -> Result<(), EmuError> {
        let bad = |reason: String| Err(EmuError::TeamLaunch { rank: ctx.rank, reason });
        if self.alone.is_none() {
            if ctx.world != self.world {
                return bad(format!("its context says world {} but the team launch has {}", ctx.world, self.world));
            }
            if ctx.rank >= self.world {
                return bad("the rank is not part of this team launch".into());
            }
        }
        let mut ranks = lock(&self.ranks);
        if std::mem::replace(&mut ranks.started[self.slot(ctx.rank)], true) {
            return bad("the rank already ran in this team launch; make a new TeamLaunch per launch".into());
        }
        drop(ranks);
        if let Some(c) = &self.checker {
            c.rank_started(ctx.rank, ctx.errors);
        }
        Ok(())
    }

    /// Rank `rank`'s grid has ended (`trapped`: by a panic); the last rank finishes the checks.
    pub(crate) fn finish_rank(&self, rank: u32, trapped: bool) {
        if let Some(c) = &self.checker {
            c.rank_ended(rank);
        }
        let all_done = {
            let mut ranks = lock(&self.ranks);
            let slot = self.slot(rank);
            ranks.trapped[slot] = trapped;
            ranks.finished += 1;
            (ranks.finished as usize == ranks.started.len()).then(|| match self.alone {
                // The checker indexes by rank.
                Some(r) => (0..self.world).map(|q| q == r && ranks.trapped[0]).collect::<Vec<_>>(),
                None => ranks.trapped.clone(),
            })
        };
        if let (Some(trapped), Some(c)) = (all_done, &self.checker) {
            c.finish(&trapped);
        }
    }
}

/// One launch of a kernel on every rank of an emulated team: call [`run_rank`](TeamLaunch::run_rank) once per
/// rank, each on its own host thread, all at once (ranks wait on each other as GPUs do). The emulator's
/// checker (see the module `emu`) sees every rank: it reports races between ranks, waits on signals no rank
/// raised and barrier epochs the ranks disagree on, in the ranks' error buffers, by the time the last
/// `run_rank` returns.
///
/// ```
/// use ferrocomm_device::abi::{ErrorBuffer, LaunchCtx};
/// use ferrocomm_device::emu::TeamLaunch;
/// use ferrocomm_device::prelude::*;
///
/// let team = TeamLaunch::new(2, [1, 1, 1], [32, 1, 1], 0);
/// let mut errors = [ErrorBuffer::ZEROED, ErrorBuffer::ZEROED];
/// std::thread::scope(|s| {
///     for (rank, e) in errors.iter_mut().enumerate() {
///         let (team, ctx) = (team.clone(), LaunchCtx { rank: rank as u32, world: 2, timeout_ns: 0, errors: e });
///         s.spawn(move || team.run_rank(ctx, &|| assert_eq!(team::world(), 2)).unwrap());
///     }
/// });
/// assert!(errors.iter().all(|e| e.count == 0));
/// ```
#[derive(Debug, Clone)]
pub struct TeamLaunch {
    session: Arc<Session>,
}

impl TeamLaunch {
    /// A launch of `grid` × `block` with `dynamic_shared_bytes` per block on each of `world` ranks, checked
    /// unless `FERROCOMM_EMU_CHECK=0`.
    pub fn new(world: u32, grid: [u32; 3], block: [u32; 3], dynamic_shared_bytes: usize) -> TeamLaunch {
        TeamLaunch::with_checker(world, grid, block, dynamic_shared_bytes, checked_by_default())
    }

    /// As [`new`](TeamLaunch::new), with the checker on or off as `checked` says.
    pub fn with_checker(
        world: u32,
        grid: [u32; 3],
        block: [u32; 3],
        dynamic_shared_bytes: usize,
        checked: bool,
    ) -> TeamLaunch {
        Timeline::with_checker(world, checked).launch(grid, block, dynamic_shared_bytes)
    }

    /// One rank of a launch whose other ranks run elsewhere (in other processes): only `rank` calls
    /// [`run_rank`](TeamLaunch::run_rank), and the checker sees it alone (no cross-rank findings).
    pub fn one_rank(
        world: u32,
        rank: u32,
        grid: [u32; 3],
        block: [u32; 3],
        dynamic_shared_bytes: usize,
        checked: bool,
    ) -> TeamLaunch {
        Timeline::with_checker(world, checked).launch_rank(rank, grid, block, dynamic_shared_bytes)
    }

    /// Whether launches are checked when nobody says: yes, unless `FERROCOMM_EMU_CHECK` is `0`, `off` or
    /// `false`.
    pub fn checked_by_default() -> bool {
        checked_by_default()
    }

    /// Counts into `progress` every start and end of a thread of this launch, so a watchdog can tell a
    /// grid that runs slowly (on a loaded host every emulated thread is slow) from one that is stuck.
    /// Call it before the ranks run; a second call is ignored.
    pub fn report_progress(&self, progress: Arc<AtomicU64>) {
        let _ = self.session.progress.set(progress);
    }

    /// Whether the checker watches this launch.
    pub fn is_checked(&self) -> bool {
        self.session.checker.is_some()
    }

    /// Runs rank `ctx.rank`'s grid, as [`launch`](fn@super::launch) does, and returns when it has finished (the
    /// last rank to finish also completes the checker's cross-rank checks first). `ctx.world` must be the
    /// launch's, and each rank runs once.
    pub fn run_rank(&self, ctx: LaunchCtx, kernel: &(dyn Fn() + Sync)) -> Result<(), EmuError> {
        launch::launch(&self.session, ctx, kernel)
    }
}

/// A launch of one rank alone (the other ranks of its team, if any, run unseen): what [`launch`](fn@super::launch) runs.
pub(crate) fn alone(ctx: &LaunchCtx, grid: [u32; 3], block: [u32; 3], dynamic_shared_bytes: usize) -> Arc<Session> {
    Timeline::new(ctx.world).launch_rank(ctx.rank, grid, block, dynamic_shared_bytes).session
}

/// The launches of one emulated team, in the order the host queues them. The checker's knowledge carries
/// from one launch to the next as a GPU's memory and streams do: the tracked accesses and the signals
/// raised stay, each rank's stream runs its launches in order (a launch knows what its rank's earlier
/// ones did and knew), and the host knows a rank's launches once it saw that rank's stream idle. Nothing
/// else orders two launches, so the checker also finds a put into a buffer whose owner's earlier kernel
/// was not known to be done with it, and a kernel that reads a put of an earlier launch that its rank
/// never waited for.
///
/// ```
/// use ferrocomm_device::abi::{ErrorBuffer, LaunchCtx};
/// use ferrocomm_device::emu::Timeline;
///
/// let timeline = Timeline::new(1);
/// for _ in 0..2 {
///     let mut errors = ErrorBuffer::ZEROED;
///     let ctx = LaunchCtx { rank: 0, world: 1, timeout_ns: 0, errors: &mut errors };
///     timeline.launch([1, 1, 1], [32, 1, 1], 0).run_rank(ctx, &|| {}).unwrap();
///     timeline.host_waited(0);
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Timeline {
    world: u32,
    /// The checker's state the launches share; `None` when they are not checked.
    history: Option<Arc<History>>,
    /// The rank that is late to everything in every launch, if any.
    late: Option<LateRank>,
}

impl Timeline {
    /// The timeline of a team of `world` ranks, checked unless `FERROCOMM_EMU_CHECK=0`.
    pub fn new(world: u32) -> Timeline {
        Timeline::with_checker(world, checked_by_default())
    }

    /// As [`new`](Timeline::new), with the checker on or off as `checked` says.
    pub fn with_checker(world: u32, checked: bool) -> Timeline {
        Timeline { world, history: checked.then(|| Arc::new(History::new(world))), late: None }
    }

    /// The same timeline with `late` late to everything in every launch (see [`LateRank`]): a test of the
    /// waits that order one rank's data before its peers' reads.
    #[must_use]
    pub fn with_late_rank(mut self, late: LateRank) -> Timeline {
        self.late = Some(late);
        self
    }

    /// The next launch of the team: `grid` × `block` with `dynamic_shared_bytes` per block on every rank.
    pub fn launch(&self, grid: [u32; 3], block: [u32; 3], dynamic_shared_bytes: usize) -> TeamLaunch {
        TeamLaunch { session: Arc::new(Session::new(self, grid, block, dynamic_shared_bytes, None)) }
    }

    /// The next launch of rank `rank` alone, whose peers run elsewhere (in other processes): the checker
    /// sees this rank only, and no cross-rank findings are made.
    pub fn launch_rank(&self, rank: u32, grid: [u32; 3], block: [u32; 3], dynamic_shared_bytes: usize) -> TeamLaunch {
        // A team of one is whole.
        let alone = (self.world != 1).then_some(rank);
        TeamLaunch { session: Arc::new(Session::new(self, grid, block, dynamic_shared_bytes, alone)) }
    }

    /// The host saw rank `rank`'s stream idle (every launch it queued there has ended): launches it queues
    /// from now on, on any rank, are ordered after them.
    pub fn host_waited(&self, rank: u32) {
        if let Some(h) = &self.history {
            h.host_waited(rank);
        }
    }

    /// The host wrote, cleared or freed `bytes` bytes at `addr` while no kernel used them: what kernels did
    /// there before is ordered before whatever they do there next.
    pub fn host_wrote(&self, addr: usize, bytes: usize) {
        if let Some(h) = &self.history {
            h.forget(addr, bytes);
        }
    }

    /// Whether the checker watches the launches.
    pub fn is_checked(&self) -> bool {
        self.history.is_some()
    }
}
