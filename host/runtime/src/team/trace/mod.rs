//! The team's tracing service: each local rank's ring, collected after every launch or replay and named
//! (see the crate's `trace` module for what trace mode records and how to use it).

mod chrome;
mod decode;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ferrocomm_device::abi::{TRACE_HEADER_BYTES, TraceEvent as RawEvent, TraceRing};

use crate::event::TraceEvent;

use crate::error::Error;
use crate::team::{Team, TeamShared};

/// Switches tracing on for every team (`1`) or off (`0`).
pub const TRACE_ENV: &str = "FERROCOMM_TRACE";
/// The directory a traced team writes its trace into when dropped.
pub const TRACE_DIR_ENV: &str = "FERROCOMM_TRACE_DIR";
/// Events each rank's ring holds per launch.
pub const TRACE_EVENTS_ENV: &str = "FERROCOMM_TRACE_EVENTS";
/// Events per rank per launch when nothing says otherwise (2.5 MiB of device memory per rank).
pub const DEFAULT_TRACE_EVENTS: usize = 1 << 16;
/// Events the host keeps for a team in all (a long traced run, such as a benchmark, would otherwise grow
/// without bound); later events are counted as lost like those of a full ring.
pub const HOST_TRACE_EVENTS: usize = 1 << 22;

/// How a team traces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConfig {
    /// Where the trace goes when the team is dropped (`None`: not written by itself).
    pub dir: Option<PathBuf>,
    /// Events each rank's ring holds per launch.
    pub capacity: usize,
}

impl TraceConfig {
    /// The configuration the builder's choice (`on`, `None`: unset) and the environment give, or `None`
    /// when the team does not trace.
    pub(crate) fn resolve(
        on: Option<bool>,
        dir: Option<PathBuf>,
        capacity: Option<usize>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<TraceConfig>, Error> {
        let from_env = match env(TRACE_ENV).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) {
            None => None,
            Some(v) if v == "1" => Some(true),
            Some(v) if v == "0" => Some(false),
            Some(v) => return Err(Error::BadEnv { var: TRACE_ENV, value: v, expected: "0 or 1" }),
        };
        if !on.or(from_env).unwrap_or(false) {
            return Ok(None);
        }
        let capacity = match capacity {
            Some(c) => c,
            None => match env(TRACE_EVENTS_ENV).filter(|v| !v.trim().is_empty()) {
                Some(v) => v.trim().parse::<usize>().map_err(|_| Error::BadEnv {
                    var: TRACE_EVENTS_ENV,
                    value: v.clone(),
                    expected: "a number of events, e.g. 65536",
                })?,
                None => DEFAULT_TRACE_EVENTS,
            },
        };
        if capacity == 0 {
            return Err(Error::TeamConfig { reason: "a trace ring must hold at least one event".into() });
        }
        let dir = dir.or_else(|| env(TRACE_DIR_ENV).filter(|v| !v.trim().is_empty()).map(PathBuf::from));
        Ok(Some(TraceConfig { dir: Some(dir.unwrap_or_else(|| PathBuf::from("."))), capacity }))
    }

    fn ring_bytes(&self) -> Result<usize, Error> {
        self.capacity
            .checked_mul(size_of::<RawEvent>())
            .and_then(|b| b.checked_add(TRACE_HEADER_BYTES))
            .map(|b| b.next_multiple_of(crate::size::ALIGN))
            .ok_or_else(|| Error::TeamConfig {
                reason: format!("a trace ring of {} events is too large", self.capacity),
            })
    }
}

/// A traced team's rings and what was collected from them.
#[derive(Debug)]
pub(crate) struct Tracer {
    pub config: TraceConfig,
    /// Per local rank: its ring's device address.
    rings: Vec<u64>,
    bytes: usize,
    /// Per local rank: nanoseconds to subtract from its GPU's `%globaltimer` to get the host clock of
    /// [`host_ns`](crate::exec::host_ns) (measured at team creation; 0 on the emulator, whose clock is the host's).
    pub offsets: Vec<i64>,
    log: Mutex<Log>,
}

#[derive(Debug, Default)]
struct Log {
    events: Vec<TraceEvent>,
    /// Per team rank: events its ring could not hold.
    lost: Vec<u64>,
    /// Collections so far (the `launch` of the next events).
    collections: u64,
}

impl TeamShared {
    /// Allocates every local rank's ring and tells the device library where it is (the error buffer's
    /// `trace_ring` for the emulator; the CUDA backend writes each traced module's global at load).
    pub(crate) fn enable_trace(&mut self, config: TraceConfig) -> Result<(), Error> {
        let bytes = config.ring_bytes()?;
        let offsets = self.exec.clock_offsets()?;
        let header = TraceRing { capacity: config.capacity as u64, claimed: 0, lost: 0 };
        let mut rings = Vec::with_capacity(self.local.len());
        for &rank in &self.local {
            // Every slot starts zeroed: a slot a block claims but does not fill must read as no event.
            let mut image = vec![0u8; bytes];
            let head = header_bytes(&header);
            image[..head.len()].copy_from_slice(&head);
            let made = self.alloc(rank, bytes).and_then(|addr| {
                rings.push(addr);
                self.write(rank, addr, &image)
            });
            if let Err(e) = made {
                for (&rank, &addr) in self.local.iter().zip(&rings) {
                    self.free(rank, addr, bytes);
                }
                return Err(e);
            }
        }
        for (errors, &ring) in self.error_buffers.iter().zip(&rings) {
            // SAFETY: the rank's live error buffer; no kernel of the team has run yet.
            unsafe { std::ptr::write_volatile(&raw mut (*errors.host).trace_ring, ring) };
        }
        let log = Log { lost: vec![0; self.world], ..Log::default() };
        self.tracer = Some(Tracer { config, rings, bytes, offsets, log: Mutex::new(log) });
        Ok(())
    }

    /// Events each ring holds (0 when not tracing).
    pub(crate) fn trace_capacity(&self) -> u64 {
        self.tracer.as_ref().map_or(0, |t| t.config.capacity as u64)
    }

    /// The ring of local rank `slot`, when tracing.
    pub(crate) fn trace_ring(&self, slot: usize) -> Option<u64> {
        self.tracer.as_ref().and_then(|t| t.rings.get(slot).copied())
    }

    /// Reads every local rank's ring (no kernel runs: the caller waited), empties it, and keeps its events;
    /// returns this collection's events (what the wait-for report of a failed launch reads).
    pub(crate) fn collect_trace(&self) -> Result<Vec<TraceEvent>, Error> {
        let Some(tracer) = &self.tracer else { return Ok(Vec::new()) };
        let mut log = tracer.log.lock().unwrap_or_else(|p| p.into_inner());
        let launch = log.collections;
        let mut fresh = Vec::new();
        for (slot, (&rank, &ring)) in self.local.iter().zip(&tracer.rings).enumerate() {
            let mut raw = [0u8; size_of::<TraceRing>()];
            self.read(rank, ring, &mut raw)?;
            let field = |at: usize| u64::from_ne_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
            let (claimed, lost) = (field(8), field(16));
            if claimed == 0 && lost == 0 {
                continue;
            }
            // Slots a block claimed but did not fill are still zero (kind 0), which decoding skips; the slots
            // read are zeroed again for the next launch, then the counters.
            let kept = claimed.min(tracer.config.capacity as u64) as usize;
            let mut bytes = vec![0u8; kept * size_of::<RawEvent>()];
            self.read(rank, ring + TRACE_HEADER_BYTES as u64, &mut bytes)?;
            self.write(rank, ring + TRACE_HEADER_BYTES as u64, &vec![0u8; bytes.len()])?;
            self.write(rank, ring + 8, &[0u8; 16])?;
            log.lost[rank] += lost;
            let offset = tracer.offsets.get(slot).copied().unwrap_or(0);
            fresh.extend(
                bytes
                    .chunks_exact(size_of::<RawEvent>())
                    .filter_map(|c| decode::decode(self, rank, launch, offset, &raw_event(c))),
            );
        }
        log.collections += 1;
        let room = HOST_TRACE_EVENTS.saturating_sub(log.events.len());
        for e in fresh.iter().skip(room) {
            log.lost[e.rank] += 1;
        }
        log.events.extend(fresh.iter().take(room).cloned());
        Ok(fresh)
    }

    /// Every event collected so far (what the wait-for report looks up raisers in).
    pub(crate) fn trace_history(&self) -> Vec<TraceEvent> {
        match &self.tracer {
            Some(t) => t.log.lock().unwrap_or_else(|p| p.into_inner()).events.clone(),
            None => Vec::new(),
        }
    }

    /// Frees the rings (the team is being dropped: no kernel runs).
    pub(crate) fn free_trace(&self) {
        if let Some(tracer) = &self.tracer {
            for (&rank, &ring) in self.local.iter().zip(&tracer.rings) {
                self.free(rank, ring, tracer.bytes);
            }
        }
    }

    /// Writes the trace into the configured directory, if the team traced anything; says where.
    pub(crate) fn write_trace_on_drop(&self) {
        let Some(tracer) = &self.tracer else { return };
        let Some(dir) = &tracer.config.dir else { return };
        let path = dir.join(format!("ferrocomm-trace-{}-team{}.json", std::process::id(), self.id));
        match self.write_trace(&path) {
            Ok(()) => eprintln!("ferrocomm: trace of team {} written to {}", self.id, path.display()),
            Err(e) => tracing::error!("writing the team's trace: {e}"),
        }
    }

    fn write_trace(&self, path: &Path) -> Result<(), Error> {
        let Some(tracer) = &self.tracer else {
            return Err(Error::Trace { path: path.to_owned(), reason: "the team does not trace".into() });
        };
        let log = tracer.log.lock().unwrap_or_else(|p| p.into_inner());
        let json = chrome::to_json(self, &log.events, &log.lost, &tracer.offsets);
        let fail = |e: &dyn std::fmt::Display| Error::Trace { path: path.to_owned(), reason: e.to_string() };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| fail(&e))?;
        }
        let text = serde_json::to_string(&json).map_err(|e| fail(&e))?;
        std::fs::write(path, text).map_err(|e| fail(&e))
    }
}

impl Team {
    /// Whether the team records device traces ([`TeamBuilder::trace`](crate::TeamBuilder::trace)).
    pub fn is_traced(&self) -> bool {
        self.shared.tracer.is_some()
    }

    /// Every event collected so far (after each launch's wait), in collection order; empty when the team
    /// does not trace.
    pub fn trace_events(&self) -> Vec<TraceEvent> {
        match &self.shared.tracer {
            Some(t) => t.log.lock().unwrap_or_else(|p| p.into_inner()).events.clone(),
            None => Vec::new(),
        }
    }

    /// Per rank: events its ring could not hold (raise `FERROCOMM_TRACE_EVENTS` or
    /// [`TeamBuilder::trace_capacity`](crate::TeamBuilder::trace_capacity) to keep them), and events past the
    /// [`HOST_TRACE_EVENTS`] the host keeps for a team.
    pub fn trace_lost(&self) -> Vec<u64> {
        match &self.shared.tracer {
            Some(t) => t.log.lock().unwrap_or_else(|p| p.into_inner()).lost.clone(),
            None => vec![0; self.world()],
        }
    }

    /// Writes the events collected so far as a Perfetto/Chrome trace JSON (one process per rank, one track
    /// per block) to `path`. [`Error::Trace`] when the team does not trace or the file cannot be written.
    pub fn write_trace(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        self.shared.write_trace(path.as_ref())
    }
}

fn header_bytes(h: &TraceRing) -> Vec<u8> {
    let mut b = h.capacity.to_ne_bytes().to_vec();
    b.extend(h.claimed.to_ne_bytes());
    b.extend(h.lost.to_ne_bytes());
    b
}

/// One event from its 40 bytes (the `TraceEvent` layout, native endianness).
fn raw_event(c: &[u8]) -> RawEvent {
    let u64_at = |o: usize| u64::from_ne_bytes(c[o..o + 8].try_into().expect("8 bytes"));
    let u32_at = |o: usize| u32::from_ne_bytes(c[o..o + 4].try_into().expect("4 bytes"));
    RawEvent {
        time: u64_at(0),
        kind: c[8],
        aux: c[9],
        smid: u16::from_ne_bytes([c[10], c[11]]),
        block: u32_at(12),
        thread: u32_at(16),
        reserved: u32_at(20),
        a: u64_at(24),
        b: u64_at(32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |var| pairs.iter().find(|(k, _)| *k == var).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn off_unless_asked_and_the_builder_wins() {
        assert_eq!(TraceConfig::resolve(None, None, None, env_of(&[])).unwrap(), None);
        let on = TraceConfig::resolve(None, None, None, env_of(&[(TRACE_ENV, "1")])).unwrap().unwrap();
        assert_eq!(on, TraceConfig { dir: Some(".".into()), capacity: DEFAULT_TRACE_EVENTS });
        assert_eq!(TraceConfig::resolve(Some(false), None, None, env_of(&[(TRACE_ENV, "1")])).unwrap(), None);
        let env = env_of(&[(TRACE_ENV, "1"), (TRACE_DIR_ENV, "/tmp/t"), (TRACE_EVENTS_ENV, "64")]);
        let c = TraceConfig::resolve(None, None, None, env).unwrap().unwrap();
        assert_eq!((c.dir.unwrap(), c.capacity), (PathBuf::from("/tmp/t"), 64));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = TraceConfig::resolve(None, None, None, env_of(&[(TRACE_ENV, "yes")])).unwrap_err();
        assert!(e.to_string().contains("FERROCOMM_TRACE=\"yes\""), "{e}");
        let e = TraceConfig::resolve(None, None, None, env_of(&[(TRACE_ENV, "1"), (TRACE_EVENTS_ENV, "many")]));
        assert!(e.unwrap_err().to_string().contains("FERROCOMM_TRACE_EVENTS"));
        assert!(TraceConfig::resolve(Some(true), None, Some(0), env_of(&[])).is_err());
    }

    #[test]
    fn events_decode_from_their_layout() {
        let e = RawEvent { time: 5, kind: 3, aux: 1, smid: 7, block: 2, thread: 9, reserved: 0, a: 11, b: 12 };
        // SAFETY: `RawEvent` is repr(C) plain integers, 40 bytes without padding.
        let bytes = unsafe { std::slice::from_raw_parts((&raw const e).cast::<u8>(), size_of::<RawEvent>()) };
        assert_eq!(raw_event(bytes), e);
    }
}
