//! CUDA-graph capture of team launches and their replay: one graph per rank, captured on the rank's stream
//! and launched together; on the emulator, the recorded launches are queued again.

use std::fmt;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::error::Error;
use crate::exec::Captured;
use crate::stream::LaunchGuard;
use crate::team::{Pin, Team, TeamShared};

/// Launches captured once and replayed many times (the way latency-critical code calls collectives).
///
/// The graph keeps alive the memory of every buffer its launches use (taken when the launch lowered the
/// buffer), so a buffer dropped meanwhile is freed only with the graph. Between replays the host may read
/// and write those buffers — a host access first waits for replays still running. Signal pads keep their
/// own epochs, so buffers and signals are reused across replays without resets.
///
/// ```no_run
/// # use ferrocomm::{LaunchConfig, SymBuffer, Team, LaunchGuard, Error};
/// # fn step<'a>(team: &'a Team, _: &'a mut SymBuffer<f32>) -> Result<LaunchGuard<'a>, Error> { todo!() }
/// # fn main() -> Result<(), Error> {
/// let team = Team::from_env()?;
/// let mut data = SymBuffer::<f32>::new(&team, 1024)?;
/// let graph = team.capture(|team| {
///     step(team, &mut data)?.wait()?; // captured: nothing runs, `wait` returns at once
///     step(team, &mut data)?.wait()
/// })?;
/// for _ in 0..100 {
///     data.fill(1.0)?; // between replays the host may update the inputs
///     graph.replay()?.wait()?;
/// }
/// # Ok(()) }
/// ```
pub struct TeamGraph<'a> {
    team: &'a Team,
    inner: Captured,
    /// Kernel launches per replay.
    launches: usize,
    /// The memory the captured launches use, alive as long as the graph.
    _pins: Vec<Pin>,
}

/// Ends the capture even if the closure panics, so the streams stay usable.
struct Scope<'t> {
    team: &'t TeamShared,
    open: bool,
}

impl Scope<'_> {
    fn end(&mut self, keep: bool) -> (Result<Captured, Error>, Vec<Pin>) {
        self.open = false;
        let inner = self.team.exec.end_capture(keep);
        let pins = std::mem::take(&mut *self.team.capture_pins.lock().unwrap_or_else(PoisonError::into_inner));
        self.team.capturing.store(false, Ordering::Release);
        (inner, pins)
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.end(false);
        }
    }
}

impl Team {
    /// Captures the launches `f` makes into a [`TeamGraph`]. Nothing runs during the capture: the guards of
    /// captured launches wait for nothing. Host copies, allocations and synchronisation are refused
    /// meanwhile ([`Error::Capturing`]).
    pub fn capture<'a>(&'a self, f: impl FnOnce(&'a Team) -> Result<(), Error>) -> Result<TeamGraph<'a>, Error> {
        let team = &*self.shared;
        team.settle("Team::capture")?;
        if team.capturing.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(Error::Capturing { what: "Team::capture" });
        }
        let begun = team.exec.begin_capture();
        if let Err(e) = begun {
            team.capturing.store(false, Ordering::Release);
            return Err(e);
        }
        team.captured_launches.store(0, Ordering::Release);
        let mut scope = Scope { team, open: true };
        let captured = f(self);
        let (inner, pins) = scope.end(captured.is_ok());
        captured?;
        let launches = team.captured_launches.load(Ordering::Acquire);
        Ok(TeamGraph { team: self, inner: inner?, launches, _pins: pins })
    }
}

impl<'a> TeamGraph<'a> {
    /// Runs every captured launch again, on every rank; the guard waits like a launch's.
    pub fn replay(&self) -> Result<LaunchGuard<'_>, Error> {
        let team = &*self.team.shared;
        team.refuse_while_capturing("TeamGraph::replay")?;
        let _queue = team.launch_lock.lock().unwrap_or_else(PoisonError::into_inner);
        let started = Instant::now();
        team.in_flight.fetch_add(self.launches, Ordering::AcqRel);
        let replayed = team.exec.replay(team, &self.inner);
        if let Err(partial) = replayed {
            let e = team.after_partial(partial, false);
            team.in_flight.fetch_sub(self.launches, Ordering::AcqRel);
            return Err(e);
        }
        Ok(LaunchGuard::pending(team, started, self.launches))
    }

    /// Kernel launches each replay runs (on every rank).
    pub fn launches(&self) -> usize {
        self.launches
    }

    /// The team the graph runs on.
    pub fn team(&self) -> &'a Team {
        self.team
    }
}

impl Drop for TeamGraph<'_> {
    fn drop(&mut self) {
        // Replay guards borrow the graph; only a leaked one could still be running.
        if let Err(e) = self.team.shared.settle("TeamGraph::drop") {
            tracing::error!("dropping a graph: {e}");
        }
    }
}

impl fmt::Debug for TeamGraph<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TeamGraph").field("team", &self.team.id()).field("inner", &self.inner).finish()
    }
}
