//! Device time of a CUDA-graph replay: the graph is captured as `clock_stamp(0)`, the operations,
//! `clock_stamp(1)`, where each stamp is a one-thread kernel writing `%globaltimer` into a per-rank slot.
//! Stream order puts the first stamp before the first operation and the second after the last, so
//! `stamp[1] - stamp[0]` on a rank is that rank's time for the operations (plus one kernel boundary, spread
//! over all of them) — what CUDA events recorded around the replay would give. Nothing on the host runs
//! between the stamps: the host replays the graph, then waits, then reads the stamps.
//!
//! Stamps rather than CUDA events: they are launches like the operations, so they are captured with them
//! into each rank's graph, and they run on the emulator too, where the same code times the same kernels.
//!
//! [`time_trial`] is a trial as the modes on ferrocomm's runtime time it: a graph kept per request
//! ([`CapturedTrial`]) and replayed between the stamps, or the calls run one by one with `--no-graph`.
//!
//! In a team that spans processes (one rank per process), each process reads its own rank's stamps only:
//! each rank times itself, and the figure a process reports is its own rank's (rank 0's is the one the
//! report shows; every rank of a collective ends within one NVLink trip of the others). The processes
//! replay their graphs independently, so a rank's first stamp could otherwise run while a peer's process is
//! still reading its last trial; there the graph starts with a device barrier before the first stamp, and a
//! rank's span starts once every rank has reached it. A team in one process has no such barrier: one thread
//! replays every rank's graph back to back, and the gpu series is timed as it always was.

use std::time::Duration;

use ferrocomm::{LaunchConfig, SymBuffer, Team, TeamGraph};
use ferrocomm_kernels::kernels::proxy::clock_stamp;
use ferrocomm_kernels::{CommError, Communicator};
use thiserror::Error;

use crate::backend::{BackendError, Request, Timing};
use crate::cputime::thread_cpu_time;
use crate::model::{Dtype, Mode, Operation};

/// Why a replay has no time.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StampError {
    /// The runtime failed (replay, wait, reading the stamps).
    #[error(transparent)]
    Runtime(#[from] ferrocomm::Error),
    /// None of the ranks asked about is run by this process.
    #[error("none of ranks {ranks:?} is this process's (it runs {local:?}), so it has no stamps to read")]
    NotLocal {
        /// The ranks asked about.
        ranks: Vec<usize>,
        /// The ranks this process runs.
        local: Vec<usize>,
    },
    /// A rank's stamps do not describe a span: a stamp kernel did not run, or the clock went backwards.
    #[error("rank {rank}: clock stamps {start} → {end} ns do not span the replay ({why})")]
    Stamps {
        /// The rank.
        rank: usize,
        /// First stamp.
        start: u64,
        /// Second stamp.
        end: u64,
        /// What is wrong.
        why: &'static str,
    },
}

/// The span between one rank's two stamps, in ns. Both were cleared to zero before the replay, so a zero
/// means the stamp did not run.
pub fn span_ns(rank: usize, stamps: &[u64]) -> Result<u64, StampError> {
    let (start, end) = (stamps.first().copied().unwrap_or(0), stamps.get(1).copied().unwrap_or(0));
    let bad = |why| Err(StampError::Stamps { rank, start, end, why });
    if start == 0 || end == 0 {
        return bad("a stamp kernel did not run");
    }
    if end < start {
        return bad("the second stamp is earlier than the first");
    }
    Ok(end - start)
}

/// How the operations of a recording sit between stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Stamp 0, every operation back to back, stamp 1: one span for them all.
    BackToBack,
    /// Stamp `2i`, operation `i`, stamp `2i + 1`: a span per operation, each between two kernels that do
    /// not start the next launch early (a stamp kernel never triggers programmatic launch), as a
    /// collective sits between two dependent compute kernels.
    Isolated,
}

/// `%globaltimer` slots per rank: a pair per span.
#[derive(Debug)]
pub struct Stamps {
    buf: SymBuffer<u64>,
    /// Whether recordings start with a device barrier: in a team that spans processes.
    align: bool,
}

impl Stamps {
    /// One span's slots on every rank of `team` (for [`Pattern::BackToBack`]); recordings start with a
    /// barrier when the team spans processes.
    pub fn new(team: &Team) -> Result<Stamps, ferrocomm::Error> {
        Stamps::spans(team, 1)
    }

    /// Slots for `spans` spans on every rank of `team` ([`Pattern::Isolated`] needs one per operation).
    pub fn spans(team: &Team, spans: u64) -> Result<Stamps, ferrocomm::Error> {
        let slots = usize::try_from(spans.max(1) * 2).unwrap_or(usize::MAX);
        Ok(Stamps { buf: SymBuffer::new(team, slots)?, align: team.spans_processes() })
    }

    /// Spans these stamps hold.
    pub fn capacity(&self) -> u64 {
        self.buf.len() as u64 / 2
    }

    /// Launches (or, inside a capture, records) the stamp kernel writing slot `slot` on every rank.
    pub fn stamp(&mut self, team: &Team, slot: u32) -> Result<(), ferrocomm::Error> {
        clock_stamp::launch(team, LaunchConfig::single(), &mut self.buf, slot)?.wait()
    }

    /// `iters` calls of `op` between stamps as `pattern` places them: captured into a graph (`graph`), which
    /// is returned, or run now with a host wait after each call (the library's launch guards wait), after
    /// which [`Stamps::longest_ns`] (back to back) or [`Stamps::each_ns`] (isolated) has their time. In a
    /// team that spans processes a barrier of every rank comes first, outside the stamps.
    pub fn record<'t>(
        &mut self,
        comm: &mut Communicator<'t>,
        iters: u64,
        graph: bool,
        pattern: Pattern,
        mut op: impl FnMut(&mut Communicator<'t>) -> Result<(), CommError>,
    ) -> Result<Option<TeamGraph<'t>>, CommError> {
        if pattern == Pattern::Isolated && iters > self.capacity() {
            return Err(CommError::BadTuning {
                reason: format!("{iters} isolated operations need {iters} stamp spans, {} allocated", self.capacity()),
            });
        }
        if !graph {
            self.buf.fill(0)?;
        }
        let align = self.align;
        let mut body = |comm: &mut Communicator<'t>| {
            if align {
                comm.barrier()?.wait()?;
            }
            let team = comm.team();
            match pattern {
                Pattern::BackToBack => {
                    self.stamp(team, 0)?;
                    for _ in 0..iters {
                        op(comm)?;
                    }
                    self.stamp(team, 1)?;
                }
                Pattern::Isolated => {
                    for i in 0..iters as u32 {
                        self.stamp(team, 2 * i)?;
                        op(comm)?;
                        self.stamp(team, 2 * i + 1)?;
                    }
                }
            }
            Ok(())
        };
        if graph {
            return comm.capture(body).map(Some);
        }
        body(comm)?;
        Ok(None)
    }

    /// The longest span between the stamps over those of `ranks` this process runs (every rank of a team
    /// in one process; its own in a team that spans processes), in ns, once every stamp kernel has finished.
    pub fn longest_ns(&self, ranks: &[usize]) -> Result<u64, StampError> {
        let local = self.buf.local_ranks();
        let mine: Vec<usize> = ranks.iter().copied().filter(|r| local.contains(r)).collect();
        if mine.is_empty() {
            return Err(StampError::NotLocal { ranks: ranks.to_vec(), local });
        }
        let mut longest = 0;
        for rank in mine {
            longest = longest.max(span_ns(rank, &self.buf.to_host(rank)?)?);
        }
        Ok(longest)
    }

    /// Each span's time, in ns: for span `i`, the longest over those of `ranks` this process runs of the
    /// time between its stamps `2i` and `2i + 1`, once every stamp kernel has finished.
    pub fn each_ns(&self, ranks: &[usize], spans: u64) -> Result<Vec<u64>, StampError> {
        let local = self.buf.local_ranks();
        let mine: Vec<usize> = ranks.iter().copied().filter(|r| local.contains(r)).collect();
        if mine.is_empty() {
            return Err(StampError::NotLocal { ranks: ranks.to_vec(), local });
        }
        let mut longest = vec![0u64; spans.min(self.capacity()) as usize];
        for rank in mine {
            let stamps = self.buf.to_host(rank)?;
            for (i, span) in longest.iter_mut().enumerate() {
                *span = (*span).max(span_ns(rank, &stamps[2 * i..2 * i + 2])?);
            }
        }
        Ok(longest)
    }

    /// Clears the stamps, replays `graph` once and waits for it (an untimed replay, or one whose spans
    /// [`Stamps::each_ns`] then reads).
    pub fn replay(&mut self, graph: &TeamGraph<'_>) -> Result<(), StampError> {
        self.buf.fill(0)?;
        graph.replay()?.wait()?;
        Ok(())
    }

    /// Replays `graph` (recorded by [`Stamps::record`] with these stamps) once and returns the longest
    /// stamped span over those of `ranks` this process runs, in ns, and the CPU time this thread spent
    /// clearing the stamps, waiting for the replay and reading the stamps: the harness's cost. Only
    /// launching the replay is the mode's.
    pub fn time_replay(&mut self, graph: &TeamGraph<'_>, ranks: &[usize]) -> Result<(u64, Duration), StampError> {
        let clearing = thread_cpu_time();
        self.buf.fill(0)?;
        let cleared = thread_cpu_time().saturating_sub(clearing);
        let guard = graph.replay()?;
        let waiting = thread_cpu_time();
        guard.wait()?;
        let longest = self.longest_ns(ranks)?;
        Ok((longest, cleared + thread_cpu_time().saturating_sub(waiting)))
    }
}

/// A trial's graph, kept for the trials of the same request that follow, and what it was made for
/// (operation, bytes, element type, operations).
#[derive(Debug)]
pub struct CapturedTrial {
    key: (Operation, u64, Dtype, u64),
    graph: TeamGraph<'static>,
}

/// Times one trial of `request` (at least one operation) by the spans of `ranks`, each call running
/// `blocks` blocks. With `request.graph`, as a replay of its graph: `record` captures it between `stamps`
/// unless `cache` holds this request's, the old graph dropped first so that its buffers are freed before
/// new ones are allocated. Without, `record` runs the calls now, the host waiting for each (that is this
/// path's cost, so no wait is left out of the host CPU figure). A ping-pong's time is one way: two hops per
/// round trip.
pub fn time_trial(
    mode: Mode,
    (cache, stamps): (&mut Option<CapturedTrial>, &mut Stamps),
    request: &Request,
    (ranks, blocks): (&[usize], u32),
    record: impl FnOnce(&mut Stamps) -> Result<Option<TeamGraph<'static>>, BackendError>,
) -> Result<Timing, BackendError> {
    let stamp_error = |e| BackendError::External { mode, source: Box::new(e) };
    let (ns, wait_cpu) = if request.graph {
        let key = (request.op, request.bytes, request.dtype, request.iters);
        if cache.as_ref().is_none_or(|c| c.key != key) {
            *cache = None;
            let graph = record(stamps)?
                .ok_or_else(|| BackendError::External { mode, source: "a capture returned no graph".into() })?;
            *cache = Some(CapturedTrial { key, graph });
        }
        let Some(captured) = cache.as_ref() else {
            return Err(BackendError::External { mode, source: "no graph after capturing".into() });
        };
        stamps.time_replay(&captured.graph, ranks).map_err(stamp_error)?
    } else {
        *cache = None;
        record(stamps)?;
        (stamps.longest_ns(ranks).map_err(stamp_error)?, Duration::ZERO)
    };
    let hops = if request.op == Operation::PingPong { 2 } else { 1 };
    let us_per_op = ns as f64 / 1e3 / (request.iters * hops) as f64;
    Ok(Timing { us_per_op, graph: request.graph, sms_used: Some(blocks), wait_cpu })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(span_ns(0, &[1_000, 4_500]).unwrap(), 3_500);
        assert_eq!(span_ns(0, &[7, 7]).unwrap(), 0);
        let e = span_ns(1, &[0, 5]).unwrap_err().to_string();
        assert!(e.contains("rank 1") && e.contains("did not run"), "{e}");
        assert!(span_ns(0, &[9, 3]).unwrap_err().to_string().contains("earlier"));
        assert!(span_ns(0, &[9]).is_err());
    }
}
