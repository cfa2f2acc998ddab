//! [`SignalPadBuffer`]: the symmetric memory behind a kernel's `SignalPad` — `u64` signals plus the pad's
//! epoch bookkeeping, registered by name so a timed-out wait is reported as `pad[index]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrocomm_device::abi::{RawSym, SIGNAL_PAD_EPOCH_SLOTS};

use super::SymBuffer;
use crate::error::Error;
use crate::team::{PadEntry, RankRef, Team, TeamShared};

/// Symmetric signals: `signals` monotonic `u64` counters on every rank, and the epoch slots the device
/// library keeps after them so a pad is reused across launches and graph replays without a reset.
///
/// # After a timeout or a panic
///
/// A launch that ended with device errors — a wait that timed out, a panic, the waits a panic aborted —
/// leaves the pads it used part-way: some senders raised their signals and others did not, and the blocks
/// whose threads ended early never advanced the pad's epoch, so the epoch slots of blocks and ranks
/// disagree. The next launch on such a pad would wait for counts that can never add up (or pass a barrier
/// early). The team itself stays usable (new launches, new buffers); the pad needs
/// [`reset`](SignalPadBuffer::reset) first, on every rank, before any rank launches on it again. Pads the
/// failed launch did not use are untouched.
///
/// ```
/// # use ferrocomm::{SignalPadBuffer, Team};
/// # fn main() -> Result<(), ferrocomm::Error> {
/// let team = Team::emulated(2)?;
/// let pad = SignalPadBuffer::new(&team, "ready", 2)?;
/// assert_eq!(pad.read(0)?, [0, 0]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SignalPadBuffer {
    name: String,
    id: u64,
    signals: usize,
    mem: SymBuffer<u64>,
    team: Arc<TeamShared>,
}

impl SignalPadBuffer {
    /// Allocates a pad of `signals` zeroed signals on every rank; `name` appears in timeout errors.
    pub fn new(team: &Team, name: impl Into<String>, signals: usize) -> Result<Self, Error> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let total =
            signals.checked_add(SIGNAL_PAD_EPOCH_SLOTS).ok_or(Error::SizeOverflow { len: signals, elem_bytes: 8 })?;
        let mem = SymBuffer::<u64>::new(team, total)?;
        let pad = SignalPadBuffer {
            name: name.into(),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            signals,
            team: Arc::clone(&team.shared),
            mem,
        };
        let ranges =
            (0..team.world()).map(|r| Ok((r, pad.mem.address(r)?, signals * 8))).collect::<Result<_, Error>>()?;
        lock(&pad.team).push(PadEntry { id: pad.id, name: pad.name.clone(), elem_bytes: 8, ranges });
        Ok(pad)
    }

    /// The name timeouts report.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Signals per rank (the epoch slots not counted).
    pub fn len(&self) -> usize {
        self.signals
    }

    /// Whether the pad has no signals.
    pub fn is_empty(&self) -> bool {
        self.signals == 0
    }

    /// The current values of rank `rank`'s signals.
    pub fn read(&self, rank: usize) -> Result<Vec<u64>, Error> {
        let mut all = self.mem.to_host(rank)?;
        all.truncate(self.signals);
        Ok(all)
    }

    /// Rank `rank`'s epoch slots as the device library keeps them: per block, the launches that used the
    /// pad and completed (all equal between launches).
    pub fn epochs(&self, rank: usize) -> Result<Vec<u64>, Error> {
        Ok(self.mem.to_host(rank)?.split_off(self.signals))
    }

    /// Zeroes every signal and epoch on every rank (of this process): the pad is as new, and the next launch
    /// using it is its epoch 1. Never needed between launches that succeeded (signals are monotonic); needed
    /// after a launch that used the pad ended with a timeout or a panic (see the type's docs). Waits for
    /// the team's kernels first. In a team that spans processes every rank must call it, and it returns
    /// once every rank has zeroed its copy (so no rank's next launch raises a peer's signal before that
    /// peer zeroed it).
    pub fn reset(&mut self) -> Result<(), Error> {
        self.mem.fill(0)?;
        match &self.team.group {
            Some(group) => group.agree("a signal pad reset", &format!("reset of signal pad `{}`", self.name)),
            None => Ok(()),
        }
    }

    /// The kernel ABI as rank `rank` sees it: `len` counts the signals and the epoch slots.
    pub fn raw(&self, rank: usize) -> Result<RawSym<u64>, Error> {
        self.mem.raw(rank)
    }

    /// The device address of signal `index` in rank `rank`'s copy.
    pub fn signal_address(&self, rank: usize, index: usize) -> Result<u64, Error> {
        if index >= self.signals {
            return Err(Error::LengthMismatch { relation: "index < pad.len()", left: index, right: self.signals });
        }
        Ok(self.mem.address(rank)? + 8 * index as u64)
    }

    /// Checks the pad may be used by a launch on `rank`.
    pub fn check_for(&self, rank: &RankRef<'_>) -> Result<(), Error> {
        self.mem.check_for(rank)
    }

    /// The symmetric memory under the pad.
    pub fn memory(&self) -> &SymBuffer<u64> {
        &self.mem
    }
}

fn lock(team: &TeamShared) -> std::sync::MutexGuard<'_, Vec<PadEntry>> {
    team.pads.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for SignalPadBuffer {
    fn drop(&mut self) {
        lock(&self.team).retain(|p| p.id != self.id);
    }
}
