//! `ferrocomm trace FILE [--svg OUT]`: sums up a trace that trace mode wrote (`FERROCOMM_TRACE=1`, or
//! `Team::write_trace`) — per rank its timeline (span, blocks, events), the time its blocks spent waiting
//! versus moving data, and the bytes it put to each peer — and draws the timeline as an SVG (one row per
//! rank and block; puts, waits, and waits that never ended).
//!
//! ```text
//! ferrocomm trace ferrocomm-trace-1234-team1.json --svg timeline.svg
//! ```
//!
//! It reads the Chrome trace-event JSON the runtime writes (`ferrocomm::trace`): complete slices (`X`)
//! whose `args.kind` is `put` or `wait`, open `B` slices for waits that never ended, instants for the rest.

mod svg;

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use ferrocomm::size::format_size;
use serde_json::Value;

/// The arguments of `ferrocomm trace`.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    /// The trace JSON to read.
    pub file: PathBuf,
    /// Also draw the timeline into this SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

/// Why a trace could not be summed up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceFileError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("{path} is not JSON ({source}); give a trace that FERROCOMM_TRACE=1 or Team::write_trace wrote")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The JSON has no `traceEvents` array.
    #[error("{path} has no `traceEvents` array: it is not a Chrome/Perfetto trace")]
    NotATrace {
        /// The file.
        path: PathBuf,
    },
    /// The SVG could not be drawn or written.
    #[error("drawing {path}: {reason}")]
    Svg {
        /// The SVG file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// What a slice of a track was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceKind {
    /// Moving data (a put).
    Put,
    /// Waiting on a signal.
    Wait,
    /// A wait that never ended (the launch timed out): drawn to the end of the trace.
    OpenWait,
}

/// One put or wait of one block.
#[derive(Debug, Clone, PartialEq)]
pub struct Slice {
    /// The rank (`pid`).
    pub rank: u64,
    /// The block (`tid`).
    pub block: u64,
    /// What it did.
    pub kind: SliceKind,
    /// Start, µs from the trace's first event.
    pub start_us: f64,
    /// Length, µs (an open wait: to the end of the trace).
    pub dur_us: f64,
    /// A put's bytes.
    pub bytes: u64,
    /// A put's destination rank.
    pub peer: Option<u64>,
}

/// One rank's sums.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankSummary {
    /// First and last event, µs.
    pub span_us: (f64, f64),
    /// Blocks with events.
    pub blocks: usize,
    /// Events of the rank (slices count once).
    pub events: usize,
    /// Block-time spent waiting, µs (every block's waits added up).
    pub waiting_us: f64,
    /// Block-time spent in puts, µs.
    pub moving_us: f64,
    /// Bytes put to each peer rank.
    pub bytes_to: BTreeMap<u64, u64>,
    /// Waits that never ended.
    pub open_waits: usize,
}

/// A trace, read.
#[derive(Debug, Clone, Default)]
pub struct TraceSummary {
    /// Every put and wait.
    pub slices: Vec<Slice>,
    /// Per rank.
    pub ranks: BTreeMap<u64, RankSummary>,
    /// The last event, µs.
    pub end_us: f64,
    /// Events lost per rank (the rings were too small).
    pub lost: BTreeMap<String, u64>,
}

impl TraceSummary {
    /// Reads the trace at `path`.
    pub fn read(path: &Path) -> Result<TraceSummary, TraceFileError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| TraceFileError::Read { path: path.to_owned(), source })?;
        let json: Value =
            serde_json::from_str(&text).map_err(|source| TraceFileError::Parse { path: path.to_owned(), source })?;
        TraceSummary::from_json(&json).ok_or_else(|| TraceFileError::NotATrace { path: path.to_owned() })
    }

    /// Sums up trace JSON (`None`: no `traceEvents` array).
    pub fn from_json(json: &Value) -> Option<TraceSummary> {
        let events = json.get("traceEvents")?.as_array()?;
        let mut s = TraceSummary::default();
        let mut blocks: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for e in events {
            let (Some(ph), Some(rank)) = (e["ph"].as_str(), e["pid"].as_u64()) else { continue };
            if ph == "M" {
                continue;
            }
            let ts = e["ts"].as_f64().unwrap_or(0.0);
            let dur = e["dur"].as_f64().unwrap_or(0.0);
            let block = e["tid"].as_u64().unwrap_or(0);
            s.end_us = s.end_us.max(ts + dur);
            let r = s.ranks.entry(rank).or_insert_with(|| RankSummary { span_us: (ts, ts), ..RankSummary::default() });
            r.span_us = (r.span_us.0.min(ts), r.span_us.1.max(ts + dur));
            r.events += 1;
            let seen = blocks.entry(rank).or_default();
            if !seen.contains(&block) {
                seen.push(block);
            }
            let kind = match (ph, e["args"]["kind"].as_str()) {
                ("X", Some("put")) => SliceKind::Put,
                ("X", Some("wait")) => SliceKind::Wait,
                ("B", Some("wait")) => SliceKind::OpenWait,
                _ => continue,
            };
            let bytes = e["args"]["bytes"].as_u64().unwrap_or(0);
            let peer = e["args"]["peer"].as_u64();
            s.slices.push(Slice { rank, block, kind, start_us: ts, dur_us: dur, bytes, peer });
        }
        // Open waits last until the end of the trace.
        let end = s.end_us;
        for slice in &mut s.slices {
            if slice.kind == SliceKind::OpenWait {
                slice.dur_us = (end - slice.start_us).max(0.0);
            }
        }
        for slice in &s.slices {
            let r = s.ranks.get_mut(&slice.rank).expect("every slice's rank was seen");
            match slice.kind {
                SliceKind::Put => {
                    r.moving_us += slice.dur_us;
                    if let Some(peer) = slice.peer {
                        *r.bytes_to.entry(peer).or_default() += slice.bytes;
                    }
                }
                SliceKind::Wait => r.waiting_us += slice.dur_us,
                SliceKind::OpenWait => {
                    r.waiting_us += slice.dur_us;
                    r.open_waits += 1;
                }
            }
        }
        for (rank, b) in blocks {
            if let Some(r) = s.ranks.get_mut(&rank) {
                r.blocks = b.len();
            }
        }
        if let Some(lost) = json["otherData"]["lost_events"].as_object() {
            s.lost = lost.iter().filter_map(|(k, v)| Some((k.clone(), v.as_u64()?))).collect();
        }
        Some(s)
    }
}

impl fmt::Display for TraceSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} rank(s), {:.1} µs from the first event to the last", self.ranks.len(), self.end_us)?;
        for (rank, r) in &self.ranks {
            let busy = r.waiting_us + r.moving_us;
            let share = |t: f64| if busy > 0.0 { 100.0 * t / busy } else { 0.0 };
            writeln!(
                f,
                "rank {rank}: {:.1}–{:.1} µs, {} block(s), {} event(s); block-time waiting {:.1} µs ({:.0}%), moving \
                 data {:.1} µs ({:.0}%)",
                r.span_us.0,
                r.span_us.1,
                r.blocks,
                r.events,
                r.waiting_us,
                share(r.waiting_us),
                r.moving_us,
                share(r.moving_us)
            )?;
            let mut peers = String::new();
            for (peer, n) in &r.bytes_to {
                let _ = write!(peers, "{}rank {peer}: {}", if peers.is_empty() { "" } else { ", " }, format_size(*n));
            }
            if !peers.is_empty() {
                writeln!(f, "  bytes put: {peers}")?;
            }
            if r.open_waits > 0 {
                writeln!(f, "  {} wait(s) never ended (the launch timed out)", r.open_waits)?;
            }
        }
        for (rank, n) in &self.lost {
            writeln!(f, "{rank}: {n} event(s) lost (the ring was full: raise FERROCOMM_TRACE_EVENTS)")?;
        }
        Ok(())
    }
}

/// Runs `ferrocomm trace`: prints the summary, draws the SVG when asked.
pub fn run(args: &TraceArgs, out: &mut impl std::io::Write) -> Result<TraceSummary, TraceFileError> {
    let summary = TraceSummary::read(&args.file)?;
    let io = |e: std::io::Error| TraceFileError::Read { path: args.file.clone(), source: e };
    write!(out, "{summary}").map_err(io)?;
    if let Some(path) = &args.svg {
        svg::draw(&summary, path)?;
        writeln!(out, "timeline drawn to {}", path.display()).map_err(io)?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        serde_json::json!({"traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0"}},
            {"ph": "X", "pid": 0, "tid": 0, "ts": 0.0, "dur": 2.0, "name": "put", "args": {"kind": "put", "bytes": 4096, "peer": 1}},
            {"ph": "X", "pid": 0, "tid": 1, "ts": 1.0, "dur": 2.0, "name": "put", "args": {"kind": "put", "bytes": 1024, "peer": 1}},
            {"ph": "X", "pid": 0, "tid": 0, "ts": 2.0, "dur": 6.0, "name": "wait", "args": {"kind": "wait"}},
            {"ph": "i", "pid": 1, "tid": 0, "ts": 3.0, "name": "signal", "args": {"kind": "signal"}},
            {"ph": "B", "pid": 1, "tid": 0, "ts": 4.0, "name": "wait", "args": {"kind": "wait"}},
            {"ph": "i", "pid": 1, "tid": 0, "ts": 10.0, "name": "barrier"}
        ], "otherData": {"lost_events": {"rank 1": 3}}})
    }

    #[test]
    fn sums_waiting_moving_and_bytes_per_peer() {
        let s = TraceSummary::from_json(&sample()).unwrap();
        let r0 = &s.ranks[&0];
        assert_eq!((r0.moving_us, r0.waiting_us, r0.blocks, r0.events), (4.0, 6.0, 2, 3));
        assert_eq!(r0.bytes_to[&1], 5120);
        let r1 = &s.ranks[&1];
        assert_eq!((r1.open_waits, r1.waiting_us), (1, 6.0), "an open wait lasts to the end");
        assert_eq!(s.lost["rank 1"], 3);
        let text = s.to_string();
        assert!(text.contains("rank 0: 0.0–8.0 µs, 2 block(s)") && text.contains("rank 1: 5 KiB"), "{text}");
        assert!(text.contains("1 wait(s) never ended") && text.contains("3 event(s) lost"), "{text}");
    }

    #[test]
    fn a_file_that_is_not_a_trace_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        std::fs::write(&path, "{\"a\": 1}").unwrap();
        assert!(matches!(TraceSummary::read(&path), Err(TraceFileError::NotATrace { .. })));
        std::fs::write(&path, "not json").unwrap();
        assert!(matches!(TraceSummary::read(&path), Err(TraceFileError::Parse { .. })));
        assert!(matches!(TraceSummary::read(&dir.path().join("missing")), Err(TraceFileError::Read { .. })));
    }

    #[test]
    fn draws_an_svg_timeline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.svg");
        svg::draw(&TraceSummary::from_json(&sample()).unwrap(), &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("rank 0 block 1") && svg.contains("<rect"), "{svg}");
    }
}
