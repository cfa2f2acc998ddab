//! Launching one kernel on every rank of a team: the configuration, the kernel description the
//! `#[kernel]` macro emits, parameter lowering ([`LaunchParam`], [`ParamPack`]) and the guard that waits ([`LaunchGuard`]).

mod decode;
mod guard;
mod param;
mod views;

use std::ffi::c_void;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub(crate) use decode::short_type_name;
pub use guard::LaunchGuard;
pub use param::{LaunchParam, ParamPack};
pub use views::{ByteView, ByteViewMut, LaunchBytes};

use crate::error::Error;
use crate::module::KernelModule;
use crate::stream::Route;
use crate::team::{RankRef, Team, TeamShared};

/// Grid, block and dynamic shared memory of a launch (the same on every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks per rank, x y z.
    pub grid: [u32; 3],
    /// Threads per block, x y z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// A one-dimensional launch of `blocks` blocks of `threads` threads.
    pub const fn new(blocks: u32, threads: u32) -> LaunchConfig {
        LaunchConfig { grid: [blocks, 1, 1], block: [threads, 1, 1], shared_bytes: 0 }
    }

    /// A launch with three-dimensional grid and block.
    pub const fn dims(grid: [u32; 3], block: [u32; 3]) -> LaunchConfig {
        LaunchConfig { grid, block, shared_bytes: 0 }
    }

    /// One block of one thread.
    pub const fn single() -> LaunchConfig {
        LaunchConfig::new(1, 1)
    }

    /// Enough blocks of `threads` threads to give each of `n` elements a thread (at least one block).
    pub fn for_elements(n: usize, threads: u32) -> LaunchConfig {
        let threads = threads.max(1);
        let blocks = n.div_ceil(threads as usize).clamp(1, i32::MAX as usize) as u32;
        LaunchConfig::new(blocks, threads)
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub const fn with_shared_bytes(mut self, bytes: u32) -> LaunchConfig {
        self.shared_bytes = bytes;
        self
    }

    /// Blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&d| u64::from(d)).product()
    }

    /// Threads in a block.
    pub fn threads_per_block(&self) -> u32 {
        self.block.iter().map(|&d| u64::from(d)).product::<u64>().min(u64::from(u32::MAX)) as u32
    }

    /// Checks what no GPU accepts (device limits are checked again at launch).
    pub fn validate(&self, kernel: &'static str) -> Result<(), Error> {
        let bad = |reason: String| Err(Error::BadLaunchConfig { kernel, reason });
        if self.grid.contains(&0) || self.block.contains(&0) {
            return bad(format!(
                "grid {:?} / block {:?} has a zero dimension; every dimension must be at least 1",
                self.grid, self.block
            ));
        }
        let threads = self.block.iter().map(|&d| u64::from(d)).product::<u64>();
        if threads > 1024 {
            return bad(format!("block {:?} has {threads} threads; a block holds at most 1024", self.block));
        }
        if self.block[2] > 64 {
            return bad(format!("block z = {} exceeds 64", self.block[2]));
        }
        if self.grid[0] > i32::MAX as u32 || self.grid[1] > 65535 || self.grid[2] > 65535 {
            return bad(format!("grid {:?} exceeds 2^31-1 x 65535 x 65535", self.grid));
        }
        Ok(())
    }
}

/// A kernel as its launcher describes it: where its PTX is, its entry name, its host body for the emulator,
/// and whether it waits on other blocks or ranks (then its grid must be co-resident).
#[derive(Debug)]
pub struct Kernel {
    /// The kernels crate's embedded PTX.
    pub module: &'static KernelModule,
    /// The PTX entry name.
    pub name: &'static str,
    /// The emulator body: reads each parameter from the pointer array (exactly what `cuLaunchKernel` gets)
    /// and runs the kernel as the current emulated thread.
    ///
    /// Safety contract of the pointer: the array holds one pointer per kernel parameter, in order, each to a
    /// value of that parameter's ABI type.
    pub emulate: unsafe fn(&[*const c_void]),
    /// Whether the kernel waits on other blocks or ranks.
    pub waits: bool,
    /// Whether the entry first waits for the previous kernel of the stream (`griddepcontrol.wait`, as
    /// every `#[kernel]` entry does), so it may be launched with programmatic dependent launch on sm_90.
    pub grid_dependency: bool,
    /// The most threads per block its PTX allows (`#[kernel(launch_bounds(..))]`: `.maxntid`); a launch
    /// with more is refused before it reaches the GPU or the emulator.
    pub max_threads_per_block: Option<u32>,
}

impl Team {
    /// The most threads per block `kernel` can be launched with on every rank's GPU: 1024 unless its
    /// registers (or its PTX) allow fewer. Grid sizing uses it to stay launchable whatever the tuning asks.
    pub fn max_threads_per_block(&self, kernel: &'static Kernel) -> Result<u32, Error> {
        let team = &*self.shared;
        team.exec.max_threads_per_block(team, kernel)
    }

    /// Launches `kernel` on every rank at once, with the parameters `params` lowers for each rank; the
    /// returned guard waits for all of them. Typed launchers (generated by `#[kernel]`) call this.
    ///
    /// Checks the configuration, each rank's device limits, and — for a kernel that `waits` — that all of its
    /// blocks (of every rank sharing a GPU) fit on the GPU at once. The launch goes to the caller's streams
    /// while this thread has bound some ([`Team::bind_streams`]). During [`Team::capture`], or while the
    /// caller's streams capture, the launch is recorded instead, and the guard's wait does nothing.
    ///
    /// # Safety
    ///
    /// - `params` must produce, for every rank, exactly the parameters `kernel` declares, in order, each of
    ///   the kernel's ABI type for that parameter (the launcher generated from the kernel guarantees it).
    /// - Every memory the packs address must stay allocated until the guard has waited, and the host must
    ///   not access it meanwhile in a way that races with the kernel: a launcher makes this hold by taking
    ///   the buffers as `&'a` / `&'a mut` borrows that live as long as the returned `LaunchGuard<'a>`.
    ///   During a capture, memory must stay allocated until the graph is dropped: addresses taken with
    ///   [`SymBuffer::raw`](crate::SymBuffer::raw) / `raw_slice` (which `LaunchParam::lower` uses) are kept
    ///   alive by the graph automatically.
    pub unsafe fn launch<'a>(
        &'a self,
        kernel: &'static Kernel,
        cfg: LaunchConfig,
        mut params: impl FnMut(&RankRef<'_>) -> Result<ParamPack, Error>,
    ) -> Result<LaunchGuard<'a>, Error> {
        let team = &*self.shared;
        team.check_usable()?;
        cfg.validate(kernel.name)?;
        if let Some(max) = kernel.max_threads_per_block.filter(|&max| cfg.threads_per_block() > max) {
            return Err(Error::BadLaunchConfig {
                kernel: kernel.name,
                reason: format!(
                    "{} threads per block; the kernel's launch_bounds allow at most {max}",
                    cfg.threads_per_block()
                ),
            });
        }
        if let Some(group) = &team.group {
            group.agree_on_module(kernel.module)?;
        }
        let packs = team.local.iter().map(|&rank| params(&RankRef { team, rank })).collect::<Result<Vec<_>, _>>()?;
        let route = crate::stream::route(team)?;
        enqueue(team, &route, |recorded| team.exec.launch(team, kernel, cfg, packs, route.streams.as_deref(), recorded))
    }
}

/// Queues one piece of work — a launch, or a copy (`memory::caller`) — with `queue` where `route` says, under
/// the team's launch lock: counted in flight while it runs, or among the capture's launches when a capture
/// records it (`queue` is told which). Returns its guard.
pub(crate) fn enqueue<'a>(
    team: &'a TeamShared,
    route: &Route,
    queue: impl FnOnce(bool) -> Result<(), Error>,
) -> Result<LaunchGuard<'a>, Error> {
    let _queue = team.launch_lock.lock().unwrap_or_else(PoisonError::into_inner);
    let recorded = route.recorded();
    if !recorded {
        team.in_flight.fetch_add(1, Ordering::AcqRel);
    }
    match queue(recorded) {
        Ok(()) if recorded => {
            if route.team_capture {
                team.captured_launches.fetch_add(1, Ordering::AcqRel);
            }
            Ok(LaunchGuard::recorded(team))
        }
        // The watchdog counts from the enqueue: a first launch JIT-compiles the module on every rank
        // (seconds for a large module on a cold cache), which no kernel waits through.
        Ok(()) => Ok(LaunchGuard::pending(team, Instant::now(), 1)),
        Err(e) => {
            if !recorded {
                team.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            Err(e)
        }
    }
}
