//! Teams: ranks, each a GPU (or a share of one) with its own stream, memory and module instances — all in
//! this process, or one per process of a job (`process`). Choosing one: [`TeamBuilder`](crate::TeamBuilder).
//!
//! The core: the ranks, their devices and error buffers, the watchdog (`shared`); decoding the device's
//! error records and naming the addresses in them (`decode`); symmetric memory across processes
//! (`symmetric`); the tracing service (`trace`); the environment a team is chosen by (`env`). The backends
//! behind the `exec` seam run the ranks (`cuda`, `emu`, NVSHMEM's heap); the core knows them only through
//! that seam, and the builder is the one place that picks them.

mod decode;
mod env;
mod shared;
mod symmetric;
pub(crate) mod trace;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use env::{
    BACKEND_ENV, DEFAULT_TIMEOUT, DEFAULT_WORLD, EMULATOR_DEFAULT_TIMEOUT, PDL_ENV, RANKS_PER_GPU_ENV, TIMEOUT_ENV,
    WORLD_ENV, ranks_per_gpu_from,
};
pub(crate) use shared::{BufferEntry, PadEntry, Part, Pin, TeamShared};

pub use crate::names::Device;

use crate::error::Error;

/// Where a team's kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// NVIDIA GPUs through the CUDA driver.
    Cuda,
    /// The CPU emulator: every GPU thread is a host thread, every rank has its own host memory.
    Emulator,
}

impl Backend {
    /// `"cuda"` or `"emulator"`, as `FERROCOMM_BACKEND` spells them.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Emulator => "emulator",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The ranks that run one kernel together: every rank in this process, or one rank per process of a job.
///
/// ```
/// use ferrocomm::{Team, SymBuffer};
/// # fn main() -> Result<(), ferrocomm::Error> {
/// let team = Team::from_env()?; // every GPU, or the emulator when there is none
/// let mut buf = SymBuffer::<f32>::new(&team, 1024)?;
/// buf.fill(1.0)?;
/// assert_eq!(buf.to_host(team.world() - 1)?[0], 1.0);
/// # Ok(()) }
/// ```
///
/// # When a kernel fails
///
/// A wait that times out, or a panic in device code, ends its thread and comes back from the launch
/// guard's `wait` as [`Error::Device`] (a panic first, as `KernelPanic` with its location and message;
/// the waits it ended early as `Aborted`). The team stays usable: the next launch, new buffers and reads
/// all work. The [`SignalPadBuffer`](crate::SignalPadBuffer)s that launch used are left part-way (see
/// its docs): [`reset`](crate::SignalPadBuffer::reset) them before their next launch. Only a kernel that
/// never finishes ([`Error::HostTimeout`]) makes the team unusable.
#[derive(Debug)]
pub struct Team {
    pub(crate) shared: Arc<TeamShared>,
}

impl Team {
    /// Number of ranks.
    pub fn world(&self) -> usize {
        self.shared.world
    }

    /// Where the kernels run.
    pub fn backend(&self) -> Backend {
        self.shared.backend
    }

    /// How long a device wait may spin before it records a timeout.
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// A process-unique number for this team (buffers remember it).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The device rank `rank` runs on.
    pub fn device(&self, rank: usize) -> Result<Device, Error> {
        Ok(self.rank(rank)?.device())
    }

    /// One rank, as launch parameters see it.
    pub fn rank(&self, rank: usize) -> Result<RankRef<'_>, Error> {
        self.shared.check_rank(rank)?;
        Ok(RankRef { team: &self.shared, rank })
    }

    /// Every rank in order.
    pub fn ranks(&self) -> impl ExactSizeIterator<Item = RankRef<'_>> {
        (0..self.world()).map(|rank| RankRef { team: &self.shared, rank })
    }

    /// The ranks this process runs: every rank, unless the team spans processes (then this process's own).
    /// Host reads and writes of a buffer's part, and launches, happen on these.
    pub fn local_ranks(&self) -> Vec<usize> {
        self.shared.local.clone()
    }

    /// Whether the team's ranks live in several processes (one each).
    pub fn spans_processes(&self) -> bool {
        self.shared.group.is_some()
    }

    /// The CUDA stream that rank `rank` (one of this process's) launches on, so that another library's work
    /// is ordered with the rank's kernels: NCCL's collectives enqueued there run after the launches before
    /// them and before the launches after, and inside [`Team::capture`] they are recorded into the rank's
    /// graph. [`Team::synchronize`] waits for them as for the team's own launches; their errors are the
    /// other library's to report. `None` on the emulator.
    pub fn cuda_stream(&self, rank: usize) -> Result<Option<Arc<cudarc::driver::CudaStream>>, Error> {
        let slot = self.shared.slot(rank)?;
        Ok(self.shared.exec.cuda_stream(slot))
    }

    /// The bytes that `make` returns in rank 0's process, in every process of the team: how another library
    /// bootstraps over the team's own rendezvous (NCCL's unique id). `make` runs once, in rank 0's process;
    /// if it fails there, that process gets its error and every other [`Error::TeamConfig`] naming `what`.
    /// In a team of one process, `make`'s bytes.
    pub fn share_from_rank_zero(
        &self,
        what: &'static str,
        make: impl FnOnce() -> Result<Vec<u8>, Error>,
    ) -> Result<Vec<u8>, Error> {
        match &self.shared.group {
            Some(group) => group.share_from_rank_zero(what, make),
            None => make(),
        }
    }

    /// The device errors of launches that ended since the last wait, without waiting when there are none:
    /// one read of each local rank's error count in host memory (what an embedding framework calls before
    /// each operation, as torch reports a failed kernel at a later call). When a rank has recorded one, waits
    /// for every local rank's streams (the team's and the caller's, see [`crate::stream`]) and returns the
    /// records as [`Error::Device`].
    pub fn check_errors(&self) -> Result<(), Error> {
        self.shared.check_usable()?;
        if !self.shared.errors_pending() {
            return Ok(());
        }
        self.shared.wait_idle(std::time::Instant::now())?;
        self.shared.take_device_errors()
    }

    /// Checks that every process of the team states the same `statement` about `what` (a call's operation,
    /// sizes and types), over the team's rendezvous: a host round trip, no device work, so it may be made
    /// while a graph is captured. A difference is [`Error::Disagreement`] on every rank, listing each
    /// rank's statement. In a team of one process there is nobody to disagree with.
    pub fn agree(&self, what: &'static str, statement: &str) -> Result<(), Error> {
        match &self.shared.group {
            Some(group) => group.agree(what, statement),
            None => Ok(()),
        }
    }

    /// Waits until every rank's stream is idle (with the work it queued on the caller's streams) and reads
    /// every rank's device error buffer.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.shared.refuse_while_capturing("Team::synchronize")?;
        self.shared.wait_idle(std::time::Instant::now())?;
        self.shared.take_device_errors()
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        // Guards and graphs borrow the team, so nothing of ours is pending unless a guard was leaked.
        if let Err(e) = self.shared.settle("Team::drop") {
            tracing::error!("dropping a team: {e}");
        }
    }
}

/// One rank of a team, as a kernel parameter is lowered for it.
#[derive(Debug, Clone, Copy)]
pub struct RankRef<'a> {
    pub(crate) team: &'a TeamShared,
    pub(crate) rank: usize,
}

impl RankRef<'_> {
    /// This rank's index.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the team.
    pub fn world(&self) -> usize {
        self.team.world
    }

    /// The device this rank runs on.
    pub fn device(&self) -> Device {
        self.team.devices[self.rank]
    }

    /// The team's id ([`Team::id`]).
    pub fn team_id(&self) -> u64 {
        self.team.id
    }

    /// The team's backend.
    pub fn backend(&self) -> Backend {
        self.team.backend
    }
}
