//! Anchor rows: figures measured by other code in the same device session (torch symm_mem, NCCL through
//! torch, NVSHMEM, the CUDA C++ flag ping-pong), read from what the anchor scripts in `bench/anchors/`
//! print, to sit beside ferrocomm's.
//!
//! Recognised lines (anything else — warnings, banners, `#` comments, failed sizes — is ignored):
//! - `symm_mem.py`, `nccl_torch.py`: `torch nccl all_reduce bf16 1024 B graph world 2: 9.16 us max over ranks …`
//!   (the implementation, the operation, the size as ferrocomm defines it, `graph` or `eager`, the rank
//!   count, an optional `[shared-gpu N]` placement, the time);
//! - `nvshmem_bench.cu`: `nvshmem pingpong put_signal 8 B [gpus 0<->1]  rtt 2.4 us one-way 1.2 us` and
//!   `nvshmem put putmem_nbi_block 1048576 B [gpus 0->1, 16 blocks]  time 4.1 us  algbw 255.7 GB/s`;
//! - `flag_pingpong.cu`: `ref pingpong st.release.sys/ld.acquire.sys  [intra-gpu 0]  rtt 1.5 us one-way 0.76 us`
//!   (the placement is `[intra-gpu N]` or `[gpus A<->B]`).
//!
//! Lines of the earlier scripts, whose outputs are committed in `bench/anchors/` (symm.txt, a2a.txt,
//! ref_pingpong.txt), are still read, so the committed report can be redrawn:
//! - `symm.py`: `allreduce bf16 1024 B: nccl=9.98us busbw=… symm_one_shot=6.65us busbw=… symm_two_shot=…`
//! - `a2a.py`: `tokens 1 x 7168 bf16 (14336 B): nccl all_to_all 10.60 us (… GB/s algbw)  nccl all_gather 17.60 us`
//! - `nccl.py`: `nccl all_reduce 256 B: 9.00 us  busbw …`
//! - `ref_pingpong`: `ref pingpong st.release.sys/ld.acquire.sys   rtt 2.400 us one-way 1.200 us`
//!
//! Those lines do not say how they were timed, so the parser says it for them (symm.py and a2a.py:
//! CUDA-graph replay; nccl.py: eager), once, in two constants; the new scripts' lines must say `graph` or
//! `eager` or they are not read. Eager rows carry ` (eager)` in their label: graph and eager figures of
//! one implementation are two series, not two points of one. A placement other than a GPU pair (one GPU,
//! one PE, two ranks sharing a GPU) goes into the label too, and into the rank count.
//!
//! The same figure printed several times (repeats) becomes one row with the median, min and max.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::bandwidth::{algbw_gbps, busbw_gbps};
use crate::model::{Dtype, Measurement, Mode, Operation};
use crate::stats::Summary;

/// How the earlier `symm.py` and `a2a.py` timed: every figure in their committed outputs is a CUDA-graph
/// replay (bench/README.md says so), and their lines do not say it.
const LEGACY_TORCH_GRAPH: bool = true;

/// How the earlier `nccl.py` timed: eager launches (its lines do not say it either).
const LEGACY_NCCL_PY_GRAPH: bool = false;

/// An anchor file that cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AnchorError {
    /// The file cannot be read.
    #[error("cannot read anchor file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Nothing in the file looks like an anchor line.
    #[error(
        "no anchor figures in {path}: pass what an anchor script printed (bench/anchors/run.sh OUTDIR saves \
         each one's output as OUTDIR/<name>.txt and prints the --anchors arguments)"
    )]
    NoRows {
        /// The file.
        path: PathBuf,
    },
}

/// Where the two ends of a figure ran, from the line's `[…]` field; it changes what the figure means, so
/// it goes into the label and the rank count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Two GPUs (and the old ping-pong lines, which have no field: they ran on two).
    Pair,
    /// Both ends on one GPU: two blocks of one kernel.
    IntraGpu,
    /// One NVSHMEM PE putting to itself.
    SelfPe,
    /// Two processes on one GPU (a probe: without MPS their kernels time-slice).
    SharedGpu,
}

impl Placement {
    /// The placements on one GPU, whose figures are intra-GPU.
    const ONE_GPU: [Placement; 3] = [Placement::IntraGpu, Placement::SelfPe, Placement::SharedGpu];
    /// `intra-gpu 0`, `gpus 0<->1`, `gpus 0->1`, `self 1 PE`, `shared-gpu 0`; anything after a comma
    /// (`, 64 blocks`) is not the placement. Unknown text is `None`, so the line is not read under a label
    /// that would misname it.
    fn parse(field: &str) -> Option<Placement> {
        let place = field.split(',').next()?.trim();
        let mut words = place.split_whitespace();
        let placement = match (words.next()?, words.next()) {
            ("intra-gpu", Some(gpu)) if gpu.parse::<u32>().is_ok() => Placement::IntraGpu,
            ("shared-gpu", Some(gpu)) if gpu.parse::<u32>().is_ok() => Placement::SharedGpu,
            ("gpus", Some(pair)) if pair.contains("->") || pair.contains("<->") => Placement::Pair,
            ("self", Some("1")) if words.next() == Some("PE") => Placement::SelfPe,
            _ => return None,
        };
        words.next().is_none().then_some(placement)
    }

    /// What the label gains, so the series name says where it ran.
    fn suffix(self) -> &'static str {
        match self {
            Placement::Pair => "",
            Placement::IntraGpu => " (intra-GPU)",
            Placement::SelfPe => " (self, 1 PE)",
            Placement::SharedGpu => " (2 ranks on one GPU)",
        }
    }

    /// GPUs (or PEs) a point-to-point figure spans: 1 when it never left one GPU's memory path by design.
    fn world(self) -> usize {
        match self {
            Placement::IntraGpu | Placement::SelfPe => 1,
            Placement::Pair | Placement::SharedGpu => 2,
        }
    }
}

/// Splits `… [field] …` into the text before the bracket, the field and the text after it; `None` when
/// there is no bracket.
fn bracket(text: &str) -> Option<(&str, &str, &str)> {
    let (before, rest) = text.split_once('[')?;
    let (field, after) = rest.split_once(']')?;
    Some((before, field, after))
}

/// One figure read from a line, before repeats are merged.
#[derive(Debug, Clone, PartialEq)]
struct Figure {
    op: Operation,
    label: String,
    bytes: u64,
    dtype: Dtype,
    us: f64,
    graph: bool,
    /// The rank count the line states; `None` for lines that do not (the caller's `world` then).
    world: Option<usize>,
    /// Streaming multiprocessors the figure occupied, when the line says (blocks of one SM each).
    sms: Option<u32>,
}

/// Reads the anchor figures in `text`. `world` is the GPU count for collective lines that do not state
/// their own (the earlier scripts'); the new scripts' lines say it and that wins.
pub fn parse_anchors(text: &str, world: usize) -> Vec<Measurement> {
    type Key = (Operation, String, u64, Dtype, bool, Option<usize>, Option<u32>);
    let mut groups: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    for f in text.lines().flat_map(parse_line) {
        groups.entry((f.op, f.label, f.bytes, f.dtype, f.graph, f.world, f.sms)).or_default().push(f.us);
    }
    groups
        .into_iter()
        .filter_map(|((op, label, bytes, dtype, graph, line_world, sms_used), times)| {
            let s = Summary::of(&times).ok()?;
            // The placement's suffix in the label says the figure never crossed a link between GPUs.
            let intra_gpu = Placement::ONE_GPU.iter().any(|p| label.contains(p.suffix()));
            let world = match line_world {
                Some(w) => w,
                None if op.is_collective() => world,
                None => 2,
            };
            Some(Measurement {
                op,
                mode: Mode::Anchor,
                label: Some(label),
                world,
                bytes,
                dtype,
                iterations: 0,
                trials: 0,
                median_us: s.median,
                min_us: s.min,
                max_us: s.max,
                algbw_gbps: algbw_gbps(bytes, s.median),
                busbw_gbps: busbw_gbps(op, world, bytes, s.median),
                host_cpu_us_per_op: None,
                sms_used,
                queue_depth: None,
                graph,
                intra_gpu,
                isolated: None,
                utilization: None,
            })
        })
        .collect()
}

/// Reads the anchor figures in the file at `path`.
pub fn read_anchor_file(path: &Path, world: usize) -> Result<Vec<Measurement>, AnchorError> {
    let text = std::fs::read_to_string(path).map_err(|source| AnchorError::Io { path: path.to_owned(), source })?;
    let rows = parse_anchors(&text, world);
    if rows.is_empty() {
        return Err(AnchorError::NoRows { path: path.to_owned() });
    }
    Ok(rows)
}

fn parse_line(line: &str) -> Vec<Figure> {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix("torch ") {
        parse_torch(rest).into_iter().collect()
    } else if let Some(rest) = line.strip_prefix("nvshmem ") {
        parse_nvshmem(rest).into_iter().collect()
    } else if let Some(rest) = line.strip_prefix("ref pingpong ") {
        parse_ref_pingpong(rest).into_iter().collect()
    } else if let Some(rest) = line.strip_prefix("allreduce ") {
        parse_symm(rest)
    } else if let Some(rest) = line.strip_prefix("tokens ") {
        parse_a2a(rest)
    } else if let Some(rest) = line.strip_prefix("nccl all_reduce ") {
        parse_nccl(rest).into_iter().collect()
    } else {
        Vec::new()
    }
}

fn dtype_named(name: &str) -> Option<Dtype> {
    match name {
        "bf16" => Some(Dtype::Bf16),
        "f16" | "fp16" => Some(Dtype::F16),
        "f32" | "fp32" => Some(Dtype::F32),
        _ => None,
    }
}

/// `graph` or `eager`, as the new scripts write it: whether the figure is a CUDA-graph replay.
fn timing_named(word: &str) -> Option<bool> {
    match word {
        "graph" => Some(true),
        "eager" => Some(false),
        _ => None,
    }
}

/// A time that starts `text`: `9.16 us …` (positive and finite: a broken timer is no figure).
fn leading_us(text: &str) -> Option<f64> {
    let mut words = text.split_whitespace();
    let us: f64 = words.next()?.parse().ok()?;
    (words.next()? == "us" && us.is_finite() && us > 0.0).then_some(us)
}

/// The time after `key`: `one-way 1.2 us`, `time 4.1 us`.
fn us_after(text: &str, key: &str) -> Option<f64> {
    leading_us(text.split_once(key)?.1)
}

/// `nccl all_reduce bf16 1024 B graph world 2: 9.16 us max over ranks  algbw … busbw …`, also with
/// ` [shared-gpu 0]` before the colon; `…: failed (…)` has no time and is left out.
fn parse_torch(rest: &str) -> Option<Figure> {
    let (head, values) = rest.split_once(':')?;
    let (head, placement) = match bracket(head) {
        Some((before, field, after)) if after.trim().is_empty() => (before, Placement::parse(field)?),
        Some(_) => return None,
        None => (head, Placement::Pair),
    };
    let words: Vec<&str> = head.split_whitespace().collect();
    let [implementation, op, dtype, bytes, "B", timing, "world", world] = words[..] else { return None };
    let op = match op {
        "all_reduce" => Operation::AllReduce,
        "all_gather" => Operation::AllGather,
        "all_to_all" => Operation::AllToAll,
        _ => return None,
    };
    let dtype = dtype_named(dtype)?;
    let bytes = bytes.parse().ok()?;
    let graph = timing_named(timing)?;
    let world: usize = world.parse().ok().filter(|&w| w >= 1)?;
    let name = match implementation {
        "nccl" => "torch NCCL".to_owned(),
        "symm_mem.one_shot" => "torch symm_mem one-shot".to_owned(),
        "symm_mem.two_shot" => "torch symm_mem two-shot".to_owned(),
        other => format!("torch {other}"),
    };
    let eager = if graph { "" } else { " (eager)" };
    let label = format!("{name}{}{eager}", placement.suffix());
    let us = leading_us(values)?;
    Some(Figure { op, label, bytes, dtype, us, graph, world: Some(world), sms: None })
}

/// `pingpong put_signal 8 B [gpus 0<->1]  rtt … one-way 1.2 us` or
/// `put putmem_nbi_block 1048576 B [gpus 0->1, 16 blocks]  time 4.1 us  algbw …`: both timed inside one
/// kernel (%globaltimer, or CUDA events around a kernel that loops), so not a graph replay.
fn parse_nvshmem(rest: &str) -> Option<Figure> {
    let (head, field, values) = bracket(rest)?;
    let placement = Placement::parse(field)?;
    let words: Vec<&str> = head.split_whitespace().collect();
    let [kind, call, bytes, "B"] = words[..] else { return None };
    let bytes = bytes.parse().ok()?;
    let (op, name, us, sms) = match (kind, call) {
        ("pingpong", "put_signal") => {
            (Operation::PingPong, "NVSHMEM put+signal".to_owned(), us_after(values, "one-way")?, Some(1))
        }
        ("put", call) => {
            let blocks = field.split_once(',').and_then(|(_, b)| b.trim().strip_suffix("blocks")?.trim().parse().ok());
            (Operation::PutBandwidth, format!("NVSHMEM {call}"), us_after(values, "time")?, blocks)
        }
        _ => return None,
    };
    let label = format!("{name}{}", placement.suffix());
    Some(Figure { op, label, bytes, dtype: Dtype::U8, us, graph: false, world: Some(placement.world()), sms })
}

/// `st.release.sys/ld.acquire.sys  [intra-gpu 0]  rtt 1.5 us one-way 0.76 us` (a 4-byte flag, one thread
/// per side in one kernel launch each, timed with %globaltimer); the old lines have no `[…]` and ran on
/// two GPUs.
fn parse_ref_pingpong(rest: &str) -> Option<Figure> {
    let (name, values) = rest.split_once(" rtt ")?;
    let (name, placement) = match bracket(name) {
        Some((before, field, after)) if after.trim().is_empty() => (before, Placement::parse(field)?),
        Some(_) => return None,
        None => (name, Placement::Pair),
    };
    let us = us_after(values, "one-way")?;
    let label = format!("CUDA C++ flag {}{}", name.trim(), placement.suffix());
    let world = Some(placement.world());
    Some(Figure { op: Operation::PingPong, label, bytes: 4, dtype: Dtype::U8, us, graph: false, world, sms: Some(1) })
}

/// `bf16 1024 B: nccl=9.98us busbw=0.8GB/s  symm_one_shot=6.65us …` (values that are not times, like
/// `symm_one_shot=None` or an error text, are left out); [`LEGACY_TORCH_GRAPH`].
fn parse_symm(rest: &str) -> Vec<Figure> {
    let Some((head, values)) = rest.split_once(':') else { return Vec::new() };
    let mut head = head.split_whitespace();
    let (Some(dtype), Some(bytes), Some("B"), None) = (head.next(), head.next(), head.next(), head.next()) else {
        return Vec::new();
    };
    let (Some(dtype), Ok(bytes)) = (dtype_named(dtype), bytes.parse::<u64>()) else { return Vec::new() };
    values
        .split_whitespace()
        .filter_map(|token| {
            let (key, value) = token.split_once('=')?;
            let us: f64 = value.strip_suffix("us")?.parse().ok()?;
            let label = match key {
                "nccl" => "torch NCCL".to_owned(),
                "symm_one_shot" => "torch symm_mem one-shot".to_owned(),
                "symm_two_shot" => "torch symm_mem two-shot".to_owned(),
                "busbw" => return None,
                other => format!("torch {other}"),
            };
            let graph = LEGACY_TORCH_GRAPH;
            Some(Figure { op: Operation::AllReduce, label, bytes, dtype, us, graph, world: None, sms: None })
        })
        .collect()
}

/// `1 x 7168 bf16 (14336 B): nccl all_to_all 10.60 us (1.4 GB/s algbw)  nccl all_gather 17.60 us`;
/// [`LEGACY_TORCH_GRAPH`].
fn parse_a2a(rest: &str) -> Vec<Figure> {
    let Some((head, values)) = rest.split_once(':') else { return Vec::new() };
    let Some(dtype) = head.split_whitespace().find_map(dtype_named) else { return Vec::new() };
    let bytes = head.split_once('(').and_then(|(_, b)| b.trim_end_matches([')', ' ', 'B']).trim().parse::<u64>().ok());
    let Some(bytes) = bytes else { return Vec::new() };
    let words: Vec<&str> = values.split_whitespace().collect();
    let mut figures = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let op = match *word {
            "all_to_all" => Operation::AllToAll,
            "all_gather" => Operation::AllGather,
            _ => continue,
        };
        if let (Some(us), Some(&"us")) = (words.get(i + 1).and_then(|v| v.parse::<f64>().ok()), words.get(i + 2)) {
            let label = "torch NCCL".to_owned();
            let graph = LEGACY_TORCH_GRAPH;
            figures.push(Figure { op, label, bytes, dtype, us, graph, world: None, sms: None });
        }
    }
    figures
}

/// `256 B: 9.00 us  busbw 0.0 GB/s` (f32); [`LEGACY_NCCL_PY_GRAPH`].
fn parse_nccl(rest: &str) -> Option<Figure> {
    let (head, values) = rest.split_once(':')?;
    let bytes = head.trim().strip_suffix('B')?.trim().parse().ok()?;
    let mut words = values.split_whitespace();
    let us = words.next()?.parse().ok()?;
    (words.next()? == "us").then(|| Figure {
        op: Operation::AllReduce,
        label: "torch NCCL (eager)".to_owned(),
        bytes,
        dtype: Dtype::F32,
        us,
        graph: LEGACY_NCCL_PY_GRAPH,
        world: None,
        sms: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYMM: &str = "\
W1130 12:00:00 some torch warning=1.0us ignored
allreduce bf16 8192 B: nccl=9.98us busbw=0.8GB/s  symm_one_shot=6.65us busbw=1.2GB/s  symm_two_shot=6.42us busbw=1.3GB/s
allreduce bf16 268435456 B: nccl=889.50us busbw=301.8GB/s  symm_one_shot=None  symm_two_shot=814.40us busbw=329.6GB/s
allreduce bf16 1024 B: nccl=NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO  symm_err=boom x=1
";

    #[test]
    fn symm_lines() {
        let rows = parse_anchors(SYMM, 2);
        assert_eq!(rows.len(), 5);
        let two = rows.iter().find(|r| r.bytes == 268435456 && r.label.as_deref() == Some("torch symm_mem two-shot"));
        let two = two.unwrap();
        assert_eq!(
            (two.op, two.mode, two.dtype, two.world, two.graph),
            (Operation::AllReduce, Mode::Anchor, Dtype::Bf16, 2, true)
        );
        assert_eq!(two.median_us, 814.40);
        assert!((two.busbw_gbps - 329.6).abs() < 0.1, "{}", two.busbw_gbps);
        assert!(!rows.iter().any(|r| r.bytes == 1024));
        assert!(!rows.iter().any(|r| r.bytes == 268435456 && r.label.as_deref() == Some("torch symm_mem one-shot")));
    }

    #[test]
    fn a2a_nccl_and_ref_lines() {
        let text = "\
tokens 1 x 7168 bf16 (14336 B): nccl all_to_all 10.60 us (1.4 GB/s algbw)  nccl all_gather 17.60 us
nccl all_reduce 256 B: 9.00 us  busbw 0.0 GB/s
ref pingpong st.release.sys/ld.acquire.sys    rtt 2.400 us one-way 1.200 us
ref pingpong st.release.sys/ld.acquire.sys    rtt 2.500 us one-way 1.250 us
ref pingpong st.release.sys/ld.acquire.sys    rtt 2.440 us one-way 1.220 us
";
        let rows = parse_anchors(text, 2);
        let find = |op| rows.iter().find(|r| r.op == op).unwrap();
        let a2a = find(Operation::AllToAll);
        assert_eq!((a2a.bytes, a2a.median_us, a2a.dtype), (14336, 10.60, Dtype::Bf16));
        assert_eq!(find(Operation::AllGather).median_us, 17.60);
        let eager = find(Operation::AllReduce);
        assert_eq!((eager.bytes, eager.dtype, eager.graph), (256, Dtype::F32, false));
        let ping = find(Operation::PingPong);
        assert_eq!((ping.median_us, ping.min_us, ping.max_us, ping.bytes), (1.22, 1.2, 1.25, 4));
        assert_eq!(ping.label.as_deref(), Some("CUDA C++ flag st.release.sys/ld.acquire.sys"));
        assert_eq!(rows.len(), 4);
    }

    const TORCH: &str = "\
# symm_mem.py: torch 2.11.0, 2 ranks; CUDA-graph replay: 1.0 us
torch symm_mem.two_shot all_reduce bf16 8192 B graph world 2: 6.40 us max over ranks  algbw 1.28 GB/s  busbw 1.28 GB/s
torch symm_mem.two_shot all_reduce bf16 8192 B graph world 2: 6.60 us max over ranks  algbw 1.24 GB/s  busbw 1.24 GB/s
torch symm_mem.two_shot all_reduce bf16 8192 B graph world 2: 6.50 us max over ranks  algbw 1.26 GB/s  busbw 1.26 GB/s
torch symm_mem.one_shot all_reduce bf16 268435456 B graph world 2: failed (RuntimeError: too large)
torch nccl all_reduce bf16 1024 B graph world 4: 9.00 us max over ranks  algbw 0.11 GB/s  busbw 0.17 GB/s
torch nccl all_reduce bf16 1024 B eager world 4: 14.00 us max over ranks  algbw 0.07 GB/s  busbw 0.11 GB/s
torch nccl all_gather bf16 14336 B graph world 2: 10.00 us max over ranks  algbw 1.43 GB/s  busbw 0.72 GB/s
torch nccl all_to_all bf16 14336 B eager world 2: 20.00 us max over ranks  algbw 0.72 GB/s  busbw 0.36 GB/s
torch symm_mem.two_shot all_reduce bf16 1024 B graph world 2 [shared-gpu 0]: 50.00 us max over ranks
torch nccl all_reduce bf16 2048 B world 2: 9.00 us max over ranks
torch nccl all_reduce bf16 4096 B graph world 2 [somewhere else]: 9.00 us max over ranks
torch nccl all_reduce bf16 8192 B graph world 0: 9.00 us max over ranks
torch nccl reduce_scatter bf16 8192 B graph world 2: 9.00 us max over ranks
torch nccl all_reduce bf16 16384 B graph world 2: -1.00 us max over ranks
";

    #[test]
    fn torch_lines_say_their_timing_and_world() {
        // world 8 is only for lines that do not say theirs: every line here does.
        let rows = parse_anchors(TORCH, 8);
        let labels: Vec<(&str, u64)> = rows.iter().map(|r| (r.label.as_deref().unwrap(), r.bytes)).collect();
        assert_eq!(rows.len(), 6, "{labels:?}");
        let find = |label: &str, bytes: u64| {
            rows.iter().find(|r| r.label.as_deref() == Some(label) && r.bytes == bytes).unwrap()
        };
        let two = find("torch symm_mem two-shot", 8192);
        assert_eq!((two.op, two.graph, two.world, two.dtype), (Operation::AllReduce, true, 2, Dtype::Bf16));
        assert_eq!((two.median_us, two.min_us, two.max_us), (6.5, 6.4, 6.6));
        let graph = find("torch NCCL", 1024);
        let eager = find("torch NCCL (eager)", 1024);
        assert_eq!((graph.graph, graph.median_us, graph.world), (true, 9.0, 4));
        assert_eq!((eager.graph, eager.median_us, eager.world), (false, 14.0, 4));
        // 2(n-1)/n with the line's n = 4, not the caller's 8.
        assert!((graph.busbw_gbps - 1024.0 / 9.0 / 1e3 * 1.5).abs() < 1e-9, "{}", graph.busbw_gbps);
        let gather = find("torch NCCL", 14336);
        assert_eq!((gather.op, gather.graph), (Operation::AllGather, true));
        let a2a = find("torch NCCL (eager)", 14336);
        assert_eq!((a2a.op, a2a.graph, a2a.median_us), (Operation::AllToAll, false, 20.0));
        let shared = find("torch symm_mem two-shot (2 ranks on one GPU)", 1024);
        assert_eq!((shared.world, shared.graph), (2, true));
        // Failed sizes, lines without graph/eager, unknown placements, a zero world, unknown operations
        // and negative times are not figures.
        for bytes in [268435456, 2048, 4096, 8192, 16384] {
            assert!(!rows.iter().any(|r| r.bytes == bytes && r.label.as_deref() == Some("torch NCCL")), "{bytes}");
        }
        assert!(!rows.iter().any(|r| r.label.as_deref() == Some("torch symm_mem one-shot")));
    }

    #[test]
    fn nvshmem_lines() {
        let text = "\
# nvshmem_bench: NVSHMEM 3.4.5, 1 PE(s)
nvshmem pingpong put_signal 8 B [self 1 PE]  rtt 2.480 us one-way 1.240 us
nvshmem pingpong put_signal 8 B [self 1 PE]  rtt 2.500 us one-way 1.250 us
nvshmem pingpong put_signal 8 B [gpus 0<->1]  rtt 4.000 us one-way 2.000 us
nvshmem pingpong put_signal 8 B [shared-gpu 0]  rtt 4478.7 us one-way 2239.4 us
nvshmem put putmem_nbi_block 1073741824 B [gpus 0->1, 64 blocks]  time 2800.000 us  algbw 383.48 GB/s
nvshmem put putmem_nbi_block 8 B [self 1 PE, 1 blocks]  time 1.645 us  algbw 0.00 GB/s
nvshmem put putmem_nbi_block 64 B [self 2 PE, 1 blocks]  time 1.5 us  algbw 0.04 GB/s
nvshmem pingpong put_signal 64 B  rtt 2.0 us one-way 1.0 us
";
        let rows = parse_anchors(text, 2);
        assert_eq!(rows.len(), 5);
        let find = |label: &str, bytes: u64| {
            rows.iter().find(|r| r.label.as_deref() == Some(label) && r.bytes == bytes).unwrap()
        };
        let solo = find("NVSHMEM put+signal (self, 1 PE)", 8);
        assert!(solo.intra_gpu, "{solo:?}");
        assert_eq!((solo.op, solo.world, solo.graph, solo.dtype), (Operation::PingPong, 1, false, Dtype::U8));
        assert_eq!((solo.min_us, solo.max_us), (1.24, 1.25));
        assert_eq!(find("NVSHMEM put+signal", 8).world, 2);
        assert!(!find("NVSHMEM put+signal", 8).intra_gpu);
        assert_eq!(find("NVSHMEM put+signal (2 ranks on one GPU)", 8).median_us, 2239.4);
        let put = find("NVSHMEM putmem_nbi_block", 1 << 30);
        assert_eq!((put.op, put.sms_used, put.world), (Operation::PutBandwidth, Some(64), 2));
        assert!((put.algbw_gbps - 383.48).abs() < 0.01, "{}", put.algbw_gbps);
        let self_put = find("NVSHMEM putmem_nbi_block (self, 1 PE)", 8);
        assert_eq!((self_put.sms_used, self_put.world, self_put.median_us), (Some(1), 1, 1.645));
    }

    #[test]
    fn flag_lines_say_where_they_ran() {
        let text = "\
ref pingpong st.release.sys/ld.acquire.sys   [intra-gpu 0]  rtt 1.522 us one-way 0.761 us
ref pingpong relaxed.sys (no ordering)       [intra-gpu 0]  rtt 0.494 us one-way 0.247 us
ref pingpong st.release.sys/ld.acquire.sys   [gpus 0<->1]  rtt 2.400 us one-way 1.200 us
ref pingpong st.release.sys/ld.acquire.sys    rtt 2.500 us one-way 1.250 us
ref pingpong st.release.sys/ld.acquire.sys   [gpu zero]  rtt 2.500 us one-way 1.250 us
ref pingpong st.release.sys/ld.acquire.sys   [intra-gpu 0]  failed: a side timed out waiting for its flag
";
        let rows = parse_anchors(text, 2);
        assert_eq!(rows.len(), 3);
        let intra =
            rows.iter().find(|r| r.label.as_deref() == Some("CUDA C++ flag st.release.sys/ld.acquire.sys (intra-GPU)"));
        let intra = intra.unwrap();
        assert_eq!((intra.median_us, intra.world, intra.bytes, intra.graph), (0.761, 1, 4, false));
        assert!(rows.iter().any(|r| r.label.as_deref() == Some("CUDA C++ flag relaxed.sys (no ordering) (intra-GPU)")));
        // A GPU pair is the series the old lines (no placement, two GPUs) belong to.
        let pair = rows.iter().find(|r| r.label.as_deref() == Some("CUDA C++ flag st.release.sys/ld.acquire.sys"));
        let pair = pair.unwrap();
        assert_eq!((pair.min_us, pair.max_us, pair.world), (1.2, 1.25, 2));
    }

    /// The outputs committed in bench/anchors/ are what `--anchors` is given: each must keep giving its rows.
    #[test]
    fn committed_outputs() {
        let count = |text: &str| parse_anchors(text, 2).len();
        assert_eq!(count(include_str!("../../../bench/anchors/symm.txt")), 9 * 3 - 2);
        assert_eq!(count(include_str!("../../../bench/anchors/a2a.txt")), 6 * 2);
        assert_eq!(count(include_str!("../../../bench/anchors/ref_pingpong.txt")), 3);
        let flags = parse_anchors(include_str!("../../../bench/anchors/one-gpu/flag_pingpong.txt"), 2);
        assert_eq!(flags.len(), 3);
        assert!(flags.iter().all(|r| r.world == 1 && r.label.as_deref().is_some_and(|l| l.ends_with("(intra-GPU)"))));
        let nvshmem = parse_anchors(include_str!("../../../bench/anchors/one-gpu/nvshmem_bench.txt"), 2);
        assert_eq!(nvshmem.iter().filter(|r| r.op == Operation::PingPong).count(), 4);
        assert_eq!(nvshmem.iter().filter(|r| r.op == Operation::PutBandwidth).count(), 10);
        assert!(nvshmem.iter().all(|r| r.world == 1 && !r.graph));
        // The probes of two ranks on one GPU: NVSHMEM runs (and says where), NCCL refuses (no figures).
        let shared = parse_anchors(include_str!("../../../bench/anchors/one-gpu/nvshmem_shared_gpu.txt"), 2);
        assert_eq!(shared.len(), 4 + 10);
        assert!(shared.iter().all(|r| r.label.as_deref().is_some_and(|l| l.ends_with("(2 ranks on one GPU)"))));
        assert_eq!(count(include_str!("../../../bench/anchors/one-gpu/nccl_torch_shared_gpu.txt")), 0);
    }

    #[test]
    fn files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("symm.txt");
        std::fs::write(&path, SYMM).unwrap();
        assert_eq!(read_anchor_file(&path, 2).unwrap().len(), 5);
        std::fs::write(&path, "nothing to see\n").unwrap();
        assert!(matches!(read_anchor_file(&path, 2), Err(AnchorError::NoRows { .. })));
        let missing = dir.path().join("missing.txt");
        assert!(matches!(read_anchor_file(&missing, 2), Err(AnchorError::Io { .. })));
    }
}
