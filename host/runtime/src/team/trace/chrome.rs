//! The Chrome trace-event JSON Perfetto's UI opens: one process per rank (`pid` = rank), one thread per
//! block (`tid` = block); puts and waits are complete (`X`) slices, signals, barriers, epoch advances and
//! marks instants (`i`). A wait that never ended (a timed-out launch) is an open `B` slice. Timestamps are
//! microseconds from the first event. `otherData` carries the lost-event counts and clock offsets.
//!
//! Every slice's `args` holds what `ferrocomm trace FILE` sums up: `kind` (`put` / `wait`), `bytes` and
//! `peer` for puts, `signal`, `expected` and `observed` for waits.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::event::{TraceEvent, TraceWhat};
use crate::team::TeamShared;

/// A slice begun and not yet ended on one thread.
struct Open<'a> {
    event: &'a TraceEvent,
}

/// The trace JSON of `events` (in collection order), with `lost[rank]` events lost and each local rank's
/// clock offset.
pub(crate) fn to_json(team: &TeamShared, events: &[TraceEvent], lost: &[u64], offsets: &[i64]) -> Value {
    let origin = events.iter().map(|e| e.time_ns).min().unwrap_or(0);
    let us = |t: u64| (t - origin) as f64 / 1000.0;
    let mut out: Vec<Value> = Vec::new();
    for &rank in &team.local {
        let device = team.devices[rank];
        out.push(json!({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": format!("rank {rank} ({device})")}}));
        out.push(json!({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}}));
    }
    let mut blocks: Vec<(usize, u32)> = events.iter().map(|e| (e.rank, e.block)).collect();
    blocks.sort_unstable();
    blocks.dedup();
    for &(rank, block) in &blocks {
        out.push(json!({"ph": "M", "name": "thread_name", "pid": rank, "tid": block, "args": {"name": format!("block {block}")}}));
    }
    // Begins wait for their ends per (rank, launch, block, thread): a thread's events are in program order.
    let mut puts: HashMap<(usize, u64, u32, u32), Vec<Open<'_>>> = HashMap::new();
    let mut waits: HashMap<(usize, u64, u32, u32), Vec<Open<'_>>> = HashMap::new();
    for e in events {
        let key = (e.rank, e.launch, e.block, e.thread);
        let base = |name: String, ph: &str| {
            json!({"name": name, "ph": ph, "pid": e.rank, "tid": e.block, "ts": us(e.time_ns),
                   "args": {"launch": e.launch, "thread": e.thread, "smid": e.smid}})
        };
        match &e.what {
            TraceWhat::PutBegin { .. } => puts.entry(key).or_default().push(Open { event: e }),
            TraceWhat::WaitBegin { .. } => waits.entry(key).or_default().push(Open { event: e }),
            TraceWhat::PutEnd { .. } => {
                if let Some(open) = puts.get_mut(&key).and_then(Vec::pop) {
                    let TraceWhat::PutBegin { bytes, peer } = &open.event.what else { continue };
                    let to = peer.map(|p| format!("rank {p}")).unwrap_or_else(|| "?".into());
                    let mut v =
                        slice(open.event, format!("put {bytes} B → {to}"), us(open.event.time_ns), us(e.time_ns));
                    v["args"]["kind"] = json!("put");
                    v["args"]["bytes"] = json!(bytes);
                    v["args"]["peer"] = json!(peer);
                    out.push(v);
                }
            }
            TraceWhat::WaitEnd { observed, .. } => {
                if let Some(open) = waits.get_mut(&key).and_then(Vec::pop) {
                    let TraceWhat::WaitBegin { signal, expected, cmp } = &open.event.what else { continue };
                    let name = format!("wait {signal} {cmp} {expected}");
                    let mut v = slice(open.event, name, us(open.event.time_ns), us(e.time_ns));
                    v["args"]["kind"] = json!("wait");
                    v["args"]["signal"] = json!(signal.to_string());
                    v["args"]["expected"] = json!(expected);
                    v["args"]["observed"] = json!(observed);
                    out.push(v);
                }
            }
            TraceWhat::Signal { signal, value, add } => {
                let op = if *add { "+=" } else { "=" };
                let mut v = base(format!("signal {signal} {op} {value}"), "i");
                v["s"] = json!("t");
                v["args"]["kind"] = json!("signal");
                v["args"]["signal"] = json!(signal.to_string());
                v["args"]["value"] = json!(value);
                out.push(v);
            }
            TraceWhat::Barrier => {
                let mut v = base("barrier".into(), "i");
                v["s"] = json!("t");
                out.push(v);
            }
            TraceWhat::Epoch { pad, epoch } => {
                let mut v = base(format!("epoch {pad} → {}", epoch + 1), "i");
                v["s"] = json!("t");
                out.push(v);
            }
            TraceWhat::Mark { name } => {
                let mut v = base(name.clone(), "i");
                v["s"] = json!("t");
                v["args"]["kind"] = json!("mark");
                out.push(v);
            }
        }
    }
    // Waits that never ended: open slices, so the UI draws them to the end of the trace.
    for open in waits.values().flatten() {
        let e = open.event;
        let TraceWhat::WaitBegin { signal, expected, cmp } = &e.what else { continue };
        out.push(json!({"name": format!("wait {signal} {cmp} {expected} (never ended)"), "ph": "B", "pid": e.rank,
                        "tid": e.block, "ts": us(e.time_ns),
                        "args": {"kind": "wait", "signal": signal.to_string(), "expected": expected, "ended": false}}));
    }
    let lost: serde_json::Map<String, Value> =
        lost.iter().enumerate().filter(|(_, n)| **n > 0).map(|(r, n)| (format!("rank {r}"), json!(n))).collect();
    let offsets: serde_json::Map<String, Value> =
        team.local.iter().zip(offsets).map(|(r, o)| (format!("rank {r}"), json!(o))).collect();
    json!({
        "traceEvents": out,
        "displayTimeUnit": "ns",
        "otherData": {"producer": "ferrocomm", "backend": team.backend.name(), "lost_events": lost,
                      "clock_offsets_ns": offsets},
    })
}

/// A complete slice of `begin` from `ts` to `end` (µs).
fn slice(begin: &TraceEvent, name: String, ts: f64, end: f64) -> Value {
    json!({"name": name, "ph": "X", "pid": begin.rank, "tid": begin.block, "ts": ts, "dur": (end - ts).max(0.0),
           "args": {"launch": begin.launch, "thread": begin.thread, "smid": begin.smid}})
}
