//! Anchor rows: figures measured by other code in the same device session (torch symm_mem, NCCL through
//! torch, the CUDA C++ ping-pong), read from what the anchor scripts print, to sit beside ferrocomm's.
//!
//! Recognised lines (anything else — warnings, banners — is ignored):
//! - `symm.py`: `allreduce bf16 1024 B: nccl=9.98us busbw=… symm_one_shot=6.65us busbw=… symm_two_shot=…`
//! - `a2a.py`: `tokens 1 x 7168 bf16 (14336 B): nccl all_to_all 10.60 us (… GB/s algbw)  nccl all_gather 17.60 us`
//! - `nccl.py`: `nccl all_reduce 256 B: 9.00 us  busbw …`
//! - `ref_pingpong.cu`: `ref pingpong st.release.sys/ld.acquire.sys   rtt 2.400 us one-way 1.200 us`
//!
//! The same figure printed several times (repeats) becomes one row with the median, min and max.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::bandwidth::{algbw_gbps, busbw_gbps};
use crate::model::{Dtype, Measurement, Mode, Operation};
use crate::stats::Summary;

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
        "no anchor figures in {path}: pass the output of symm.py, a2a.py, nccl.py or ref_pingpong \
         (e.g. `python3 symm.py | tee symm.txt`, then --anchors symm.txt)"
    )]
    NoRows {
        /// The file.
        path: PathBuf,
    },
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
}

/// Reads the anchor figures in `text`; `world` is the GPU count the scripts ran on (for bus bandwidth).
pub fn parse_anchors(text: &str, world: usize) -> Vec<Measurement> {
    let mut groups: BTreeMap<(Operation, String, u64, Dtype, bool), Vec<f64>> = BTreeMap::new();
    for figure in text.lines().flat_map(parse_line) {
        groups.entry((figure.op, figure.label, figure.bytes, figure.dtype, figure.graph)).or_default().push(figure.us);
    }
    groups
        .into_iter()
        .filter_map(|((op, label, bytes, dtype, graph), times)| {
            let s = Summary::of(&times).ok()?;
            let world = if op.is_collective() { world } else { 2 };
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
                sms_used: None,
                queue_depth: None,
                graph,
                intra_gpu: false,
                isolated: None,
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
    if let Some(rest) = line.strip_prefix("allreduce ") {
        parse_symm(rest)
    } else if let Some(rest) = line.strip_prefix("tokens ") {
        parse_a2a(rest)
    } else if let Some(rest) = line.strip_prefix("nccl all_reduce ") {
        parse_nccl(rest).into_iter().collect()
    } else if let Some(rest) = line.strip_prefix("ref pingpong ") {
        parse_ref_pingpong(rest).into_iter().collect()
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

/// `bf16 1024 B: nccl=9.98us busbw=0.1GB/s  symm_one_shot=6.65us …` (values that are not times, like
/// `symm_one_shot=None` or an error text, are left out).
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
            Some(Figure { op: Operation::AllReduce, label, bytes, dtype, us, graph: true })
        })
        .collect()
}

/// `1 x 7168 bf16 (14336 B): nccl all_to_all 10.60 us (1.4 GB/s algbw)  nccl all_gather 17.60 us`
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
            figures.push(Figure { op, label: "torch NCCL".to_owned(), bytes, dtype, us, graph: true });
        }
    }
    figures
}

/// `256 B: 9.00 us  busbw 0.0 GB/s` (f32, timed eagerly by nccl.py).
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
        graph: false,
    })
}

/// `st.release.sys/ld.acquire.sys   rtt 2.400 us one-way 1.200 us` (a 4-byte flag).
fn parse_ref_pingpong(rest: &str) -> Option<Figure> {
    let (name, values) = rest.split_once(" rtt ")?;
    let (_, one_way) = values.split_once("one-way")?;
    let us = one_way.trim().strip_suffix("us")?.trim().parse().ok()?;
    let label = format!("CUDA C++ flag {}", name.trim());
    Some(Figure { op: Operation::PingPong, label, bytes: 4, dtype: Dtype::U8, us, graph: false })
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
