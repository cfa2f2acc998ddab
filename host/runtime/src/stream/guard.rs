//! [`LaunchGuard`]: proof that a launch is running, holding the borrows of the buffers it uses; its wait
//! polls every rank's stream under a host watchdog and turns device error records into typed errors.

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::error::Error;
use crate::team::TeamShared;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Running on the streams; the guard must wait.
    Pending,
    /// Recorded into a graph being captured: nothing runs until a replay.
    Captured,
    /// Waited.
    Done,
}

/// A launch in flight on every rank of a team. The typed launcher ties the borrows of the kernel's buffers
/// to `'a`, so they cannot be freed, written or (if the kernel writes them) read from the host until the
/// guard is gone. Dropping it waits too (errors are then logged); call [`LaunchGuard::wait`] to see them.
#[must_use = "a launch guard waits when dropped and only `wait` returns the kernel's errors"]
pub struct LaunchGuard<'a> {
    team: &'a TeamShared,
    started: Instant,
    /// Kernel launches this guard waits for (a graph replay: all of its launches).
    launches: usize,
    state: State,
}

impl<'a> LaunchGuard<'a> {
    /// A guard for `launches` kernel launches already counted in the team's `in_flight`.
    pub(crate) fn pending(team: &'a TeamShared, started: Instant, launches: usize) -> LaunchGuard<'a> {
        LaunchGuard { team, started, launches, state: State::Pending }
    }

    /// A guard for work a capture recorded (the team's, or the caller's).
    pub(crate) fn recorded(team: &'a TeamShared) -> LaunchGuard<'a> {
        LaunchGuard { team, started: Instant::now(), launches: 0, state: State::Captured }
    }

    /// Whether this launch was recorded into a graph being captured — the team's
    /// ([`Team::capture`](crate::Team::capture)) or the caller's (see [`crate::stream`]) — so it has not run.
    pub fn is_captured(&self) -> bool {
        self.state == State::Captured
    }

    /// Waits until every rank's kernels have finished, then reads and clears every rank's device error
    /// buffer. Returns [`Error::Device`] with every record (timeouts, panics; the first one in the
    /// message), or [`Error::HostTimeout`] if a stream was still busy `timeout + 1 s` after the launch.
    /// After a device timeout the team stays usable.
    pub fn wait(mut self) -> Result<(), Error> {
        self.finish()
    }

    /// Leaves the launch to run in its streams' order without waiting for it here, as a framework's
    /// operators do (torch's eager ops return before their kernels run). The team still waits for it before
    /// the host next reads, writes or frees its memory, and its device errors come back from the next
    /// [`Team::check_errors`](crate::Team::check_errors), [`Team::synchronize`](crate::Team::synchronize) or
    /// guard's wait. The borrows end now, which is sound because every host access of the team's memory
    /// waits for the launches still in flight first.
    pub fn leave_in_stream(mut self) {
        if self.state == State::Pending {
            self.team.left_in_stream.fetch_add(self.launches, Ordering::AcqRel);
        }
        self.state = State::Done;
    }

    fn finish(&mut self) -> Result<(), Error> {
        if self.state != State::Pending {
            return Ok(());
        }
        self.state = State::Done;
        let idle = self.team.wait_idle(self.started);
        self.team.in_flight.fetch_sub(self.launches, Ordering::AcqRel);
        idle?;
        self.team.take_device_errors()
    }
}

impl Drop for LaunchGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            tracing::error!("a launch guard was dropped without `wait`; the launch failed: {e}");
        }
    }
}

impl fmt::Debug for LaunchGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchGuard").field("team", &self.team.id).field("state", &self.state).finish()
    }
}
