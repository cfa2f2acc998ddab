//! Where queued work goes: the team's own streams, or streams the caller owns — how a framework that has
//! its own streams and graphs (PyTorch, candle, mistral.rs) runs ferrocomm's kernels in its order of work —
//! and the [`LaunchGuard`] of work queued there (`guard`).
//!
//! A [`StreamBinding`] makes the launches of one team, made on this thread while it lives, go to the
//! caller's streams instead of the team's own — as `torch.cuda.stream(s)` makes torch's work go to `s`.
//! The binding is per thread, like torch's current stream. What a launch on a caller's stream does:
//!
//! - **The caller's capture records it.** When the caller's stream is capturing (`torch.cuda.graph`,
//!   `cuStreamBeginCapture`), the launch is recorded into the caller's graph and its guard waits for
//!   nothing ([`LaunchGuard::is_captured`](crate::LaunchGuard::is_captured)). Signal pads keep their epochs
//!   on the device, so the caller's graph replays any number of times without resets. The buffers it uses
//!   must outlive the caller's graph, as the tensors of a torch graph must.
//! - **Otherwise it runs in the stream's order**, and its guard waits for the caller's stream. A guard
//!   left in the stream ([`LaunchGuard::leave_in_stream`](crate::LaunchGuard::leave_in_stream)) is waited
//!   for before the host next touches the team's memory, and its device errors come back from
//!   [`Team::check_errors`] or [`Team::synchronize`].

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

mod guard;

pub use guard::LaunchGuard;

pub use crate::exec::ExternalStream;
pub(crate) use crate::exec::StreamState;

use crate::error::Error;
use crate::exec::Partial;
use crate::team::{Team, TeamShared};

thread_local! {
    /// Per team id: the caller's streams this thread launches on (one per local rank), innermost last.
    static BOUND: RefCell<Vec<(u64, Arc<[ExternalStream]>)>> = const { RefCell::new(Vec::new()) };
}

/// The caller's streams this thread launches `team`'s work on, if it bound some.
pub(crate) fn bound(team: u64) -> Option<Arc<[ExternalStream]>> {
    BOUND.with(|b| b.borrow().iter().rev().find(|(id, _)| *id == team).map(|(_, s)| Arc::clone(s)))
}

/// Where this thread's next launch or copy of `team` goes.
#[derive(Debug)]
pub(crate) struct Route {
    /// The caller's streams, one per local rank, when this thread bound some.
    pub streams: Option<Arc<[ExternalStream]>>,
    /// [`Team::capture`] records it.
    pub team_capture: bool,
    /// The caller's capture records it.
    pub caller_capture: bool,
}

impl Route {
    /// Whether a capture records the work instead of running it.
    pub fn recorded(&self) -> bool {
        self.team_capture || self.caller_capture
    }
}

/// Where this thread's next piece of work for `team` goes: the caller's streams, if bound (asking each
/// whether it captures), or the team's own.
pub(crate) fn route(team: &TeamShared) -> Result<Route, Error> {
    let team_capture = team.capturing.load(std::sync::atomic::Ordering::Acquire);
    let Some(streams) = bound(team.id) else {
        return Ok(Route { streams: None, team_capture, caller_capture: false });
    };
    if team_capture {
        return Err(Error::Capturing { what: "launching on the caller's streams inside Team::capture" });
    }
    let mut capturing = Vec::with_capacity(streams.len());
    for (slot, stream) in streams.iter().enumerate() {
        capturing.push(team.exec.stream_state(slot, stream)? == StreamState::Capturing);
    }
    let caller_capture = capturing.first().copied().unwrap_or(false);
    if capturing.iter().any(|&c| c != caller_capture) {
        return Err(Error::TeamConfig {
            reason: format!(
                "of the caller's streams bound for ranks {:?}, some are capturing a graph and some are not \
                 ({capturing:?}); capture every rank's stream or none",
                team.local
            ),
        });
    }
    Ok(Route { streams: Some(streams), team_capture, caller_capture })
}

/// While it lives, this thread's launches and stream-ordered copies of one team go to the caller's streams
/// ([`Team::bind_streams`]). Not `Send`: the binding belongs to the thread that made it.
#[must_use = "the binding ends when it is dropped"]
pub struct StreamBinding<'t> {
    team: &'t Team,
    _thread: PhantomData<*const ()>,
}

impl Drop for StreamBinding<'_> {
    fn drop(&mut self) {
        let id = self.team.id();
        BOUND.with(|b| {
            let mut b = b.borrow_mut();
            if let Some(at) = b.iter().rposition(|(team, _)| *team == id) {
                b.remove(at);
            }
        });
    }
}

impl fmt::Debug for StreamBinding<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamBinding").field("team", &self.team.id()).finish()
    }
}

impl Team {
    /// Launches this thread makes on the team from now until the binding is dropped go to `streams`, one per
    /// local rank in [`Team::local_ranks`] order, instead of the team's own streams. Each stream must belong
    /// to the primary context of its rank's GPU ([`Error::ForeignStream`] otherwise). Bindings nest: the
    /// innermost one counts. The emulator has no streams to bind ([`Error::Unsupported`]).
    pub fn bind_streams(&self, streams: Vec<ExternalStream>) -> Result<StreamBinding<'_>, Error> {
        let team = &*self.shared;
        if streams.len() != team.local.len() {
            return Err(Error::TeamConfig {
                reason: format!(
                    "{} stream(s) bound for {} local rank(s); bind one stream per rank of this process",
                    streams.len(),
                    team.local.len()
                ),
            });
        }
        for (slot, stream) in streams.iter().enumerate() {
            team.exec.check_stream(slot, stream).map_err(|reason| Error::ForeignStream {
                rank: team.local[slot],
                stream: stream.id(),
                reason,
            })?;
        }
        let streams: Arc<[ExternalStream]> = streams.into();
        BOUND.with(|b| b.borrow_mut().push((team.id, streams)));
        Ok(StreamBinding { team: self, _thread: PhantomData })
    }

    /// [`Team::bind_streams`] for a team with one rank in this process (one process per GPU).
    pub fn bind_stream(&self, stream: ExternalStream) -> Result<StreamBinding<'_>, Error> {
        self.bind_streams(vec![stream])
    }
}

/// Queues one piece of work — a launch, or a copy (`memory::caller`) — with `queue` where `route` says, under
/// the team's launch lock: counted in flight while it runs, or among the capture's launches when a capture
/// records it (`queue` is told which). Returns its guard.
pub(crate) fn enqueue<'a, E: Into<Partial>>(
    team: &'a TeamShared,
    route: &Route,
    queue: impl FnOnce(bool) -> Result<(), E>,
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
        Err(failed) => {
            let e = team.after_partial(failed.into(), recorded);
            if !recorded {
                team.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            Err(e)
        }
    }
}
