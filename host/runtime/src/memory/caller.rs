//! [`CallerMemory`]: memory the caller allocated (a torch tensor's storage, a cudarc slice; on the emulator
//! a numpy array), and the stream-ordered copies that move it into and out of symmetric buffers.
//!
//! Kernels reach peers through symmetric memory only: a peer's address comes from the buffer's peer table.
//! Memory the caller allocated has no peer table, so it enters a collective the way torch's symmetric
//! memory takes an ordinary tensor: copied into a symmetric buffer before the kernel and out after it, in
//! the order of the rank's launches (on the caller's stream while one is bound), so nothing waits on the
//! host and a capture records the copies with the kernel.

use std::mem::size_of;

use super::{DeviceCopy, SymBuffer};
use crate::error::Error;
use crate::stream::LaunchGuard;
use crate::team::{Team, TeamShared};

/// `bytes` bytes at `addr` on one rank's device, allocated by the caller. Made with
/// [`Team::caller_memory`], which checks that the rank's device holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerMemory {
    team: u64,
    rank: usize,
    addr: u64,
    bytes: usize,
}

impl CallerMemory {
    /// The rank whose device holds it.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Its address.
    pub fn address(&self) -> u64 {
        self.addr
    }

    /// Its length in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Team {
    /// Memory the caller allocated, for rank `rank` (one of this process's) to copy from and into. On GPUs the
    /// driver must place every byte of it on that rank's GPU ([`Error::CallerMemory`] names the rank and
    /// says where it is instead); on the emulator every rank addresses this process's memory.
    ///
    /// # Safety
    ///
    /// `addr..addr + bytes` stays allocated while work that uses it is queued (a torch tensor used on torch's
    /// current stream is: torch's allocator reuses freed memory in that stream's order).
    pub unsafe fn caller_memory(&self, rank: usize, addr: u64, bytes: usize) -> Result<CallerMemory, Error> {
        let team = &*self.shared;
        let slot = team.slot(rank)?;
        if bytes > 0 && addr == 0 {
            return Err(Error::CallerMemory { rank, reason: format!("a null address for {bytes} bytes") });
        }
        team.exec.check_memory(slot, addr, bytes).map_err(|reason| Error::CallerMemory { rank, reason })?;
        Ok(CallerMemory { team: team.id, rank, addr, bytes })
    }
}

impl<T: DeviceCopy> SymBuffer<T> {
    /// Copies `src` into the start of rank `src.rank()`'s part, in the order of the rank's launches (on the
    /// caller's stream while one is bound, recorded by a capture). The guard waits like a launch's.
    pub fn copy_from_caller(&mut self, src: &CallerMemory) -> Result<LaunchGuard<'_>, Error> {
        let dst = self.raw_slice(src.rank)?.ptr as u64;
        self.check_caller(src, "the caller's memory copied into a symmetric buffer")?;
        // SAFETY: `dst` is this buffer's part, borrowed mutably as long as the guard; `src` is the caller's
        // (`Team::caller_memory`'s contract), and fits (`check_caller`).
        unsafe { queue_copy(self.team_shared(), src.rank, dst, src.addr, src.bytes) }
    }

    /// Copies the start of rank `dst.rank()`'s part into `dst` (all of it), in the order of the rank's
    /// launches, as [`copy_from_caller`](Self::copy_from_caller) does the other way.
    pub fn copy_to_caller(&self, dst: &CallerMemory) -> Result<LaunchGuard<'_>, Error> {
        let src = self.raw_slice(dst.rank)?.ptr as u64;
        self.check_caller(dst, "the caller's memory a symmetric buffer is copied into")?;
        // SAFETY: as above, with the roles swapped; the buffer is borrowed shared as long as the guard.
        unsafe { queue_copy(self.team_shared(), dst.rank, dst.addr, src, dst.bytes) }
    }

    fn check_caller(&self, mem: &CallerMemory, what: &'static str) -> Result<(), Error> {
        let shared = self.team_shared();
        if mem.team != shared.id {
            return Err(Error::CallerMemory {
                rank: mem.rank,
                reason: format!("{what} was checked for team #{}, not this buffer's team #{}", mem.team, shared.id),
            });
        }
        let capacity = self.len() * size_of::<T>();
        if mem.bytes > capacity {
            return Err(Error::LengthMismatch {
                relation: "caller bytes <= symmetric buffer bytes",
                left: mem.bytes,
                right: capacity,
            });
        }
        Ok(())
    }
}

/// Queues a copy on `rank` where this thread's work for the team goes (see [`crate::stream`]).
///
/// # Safety
///
/// Both ranges are memory the rank can access that stay allocated until the guard has waited (or, left in
/// the stream, until the team has next waited).
unsafe fn queue_copy(
    team: &TeamShared,
    rank: usize,
    dst: u64,
    src: u64,
    bytes: usize,
) -> Result<LaunchGuard<'_>, Error> {
    team.check_usable()?;
    let slot = team.slot(rank)?;
    let route = crate::stream::route(team)?;
    let stream = route.streams.as_ref().map(|s| &s[slot]);
    // SAFETY: the caller's contract.
    crate::stream::enqueue(team, &route, |recorded| unsafe { team.exec.copy(slot, dst, src, bytes, stream, recorded) })
}
