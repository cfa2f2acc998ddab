//! What to use at which size, from the measurements: per operation, the fastest series by size range
//! (mode and, for the all-reduce, algorithm), the all-reduce thresholds that make the library's
//! `Communicator` pick the fastest of its algorithms at each size measured, and the size from which its
//! copies should go through the TMA.
//!
//! The report writes it as `tuning.txt`: comments say which mode and algorithm won where, and the lines
//! that are not comments are `Tuning` overrides (`field=value`), which a communicator loads when
//! `FERROCOMM_TUNING_FILE` names the file.

use std::fmt::Write as _;

use ferrocomm_kernels::Algorithm;

use crate::ferro::gpu_mode::{ALL_REDUCE_ALGORITHMS, CopyPath, algorithm_label, copy_path_label};
use crate::model::{BenchData, Mode, Operation, Series};
use crate::sizes::format_size;

/// The all-reduce thresholds the measurements call for (the `Tuning` fields of the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllReduceThresholds {
    /// Messages up to this many bytes use the LL one-shot.
    pub ll_all_reduce_max_bytes: u64,
    /// Messages above the LL limit and up to this many bytes use the one-shot push; larger, the two-shot.
    pub one_shot_max_bytes: u64,
}

/// The points of the `gpu-<algorithm>` series at each all-reduce size the gpu mode measured, ascending:
/// `(bytes, [(algorithm, median µs)])`.
fn algorithm_points(data: &BenchData) -> Vec<(u64, Vec<(Algorithm, f64)>)> {
    let series =
        |a: Algorithm| Series { mode: Mode::Gpu, label: Some(algorithm_label(a).to_owned()), queue_depth: None };
    let mut sizes: Vec<u64> = data
        .measurements
        .iter()
        .filter(|m| m.op == Operation::AllReduce && m.mode == Mode::Gpu)
        .map(|m| m.bytes)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .map(|bytes| {
            let at = ALL_REDUCE_ALGORITHMS
                .iter()
                .filter_map(|&a| {
                    data.points(Operation::AllReduce, &series(a))
                        .iter()
                        .find(|m| m.bytes == bytes)
                        .map(|m| (a, m.median_us))
                })
                .collect();
            (bytes, at)
        })
        .collect()
}

/// Whether the sweep ran every all-reduce algorithm at its smallest size: thresholds are only meaningful
/// from the bottom up (a sweep from 1 MiB never saw the LL win, and must not recommend turning it off).
pub fn covers_every_algorithm(data: &BenchData) -> bool {
    algorithm_points(data)
        .iter()
        .find(|(_, at)| !at.is_empty())
        .is_some_and(|(_, at)| at.len() == ALL_REDUCE_ALGORITHMS.len())
}

/// The fastest all-reduce algorithm at each size where at least two of the `gpu-<algorithm>` series
/// were measured, ascending. The previous size's winner keeps the lead while it is within
/// [`TIE`](crate::crossover::TIE) of the fastest, so noise does not flip the thresholds.
pub fn algorithm_winners(data: &BenchData) -> Vec<(u64, Algorithm)> {
    let mut out = Vec::new();
    for (bytes, at) in algorithm_points(data) {
        if at.len() < 2 {
            continue;
        }
        let Some(&(fastest, fastest_us)) = at.iter().min_by(|x, y| x.1.total_cmp(&y.1)) else { continue };
        let previous = out.last().and_then(|(_, p)| at.iter().find(|(a, _)| a == p));
        let best = match previous {
            Some(&(p, us)) if us <= fastest_us * crate::crossover::TIE => p,
            _ => fastest,
        };
        out.push((bytes, best));
    }
    out
}

/// Thresholds from `winners` (ascending sizes): the library picks LL, then one-shot, then two-shot as the
/// size grows, so the LL range ends at the last size of the leading run of LL wins, and the one-shot range
/// at the last size of the run of LL or one-shot wins that follows. A lone win of a smaller algorithm
/// above a larger one's is not followed: the thresholds stay monotone, and that size is named in the
/// report's table beside them. `None` without winners.
pub fn thresholds(winners: &[(u64, Algorithm)]) -> Option<AllReduceThresholds> {
    if winners.is_empty() {
        return None;
    }
    let rank = |a: Algorithm| ALL_REDUCE_ALGORITHMS.iter().position(|x| *x == a).unwrap_or(2);
    let last_run = |upto: usize| winners.iter().take_while(|(_, a)| rank(*a) <= upto).last().map_or(0, |(b, _)| *b);
    Some(AllReduceThresholds { ll_all_reduce_max_bytes: last_run(0), one_shot_max_bytes: last_run(1) })
}

/// The fastest mode of `op` by size range, as "8 B – 256 KiB: gpu" lines: the tool's own single-process
/// series (anchors, `gpu-procs`, the forced-algorithm series and the SM-budget ones left out: the algorithms
/// have their own thresholds, and a budget is the user's choice of SMs, not a mode).
pub fn mode_ranges(data: &BenchData, op: Operation) -> Vec<String> {
    use crate::ferro::gpu_mode::{label_algorithm, label_budget, label_copy_path};
    let forced = |s: &Series| {
        s.label
            .as_deref()
            .is_some_and(|l| label_algorithm(l).is_some() || label_budget(l).is_some() || label_copy_path(l).is_some())
    };
    crate::crossover::fastest_of(data, op, |s| s.mode != Mode::Anchor && !s.is_procs() && !s.is_traced() && !forced(s))
        .into_iter()
        .map(|(s, from, to)| {
            if from == to {
                format!("{}: {s}", format_size(from))
            } else {
                format!("{} – {}: {s}", format_size(from), format_size(to))
            }
        })
        .collect()
}

/// Where the put's copies should go through the TMA, from the `gpu-tma` and `gpu-lsu` series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAdvice {
    /// From this many bytes on the TMA is as fast as loads and stores (within the tie) at every size
    /// measured: `bulk_min_bytes`.
    From(u64),
    /// Loads and stores were faster at the largest size: the TMA off (`bulk_stage_bytes=0`).
    Off,
}

/// The put's medians of both copy paths at each size both measured, ascending: `(bytes, tma µs, lsu µs)`.
fn copy_path_points(data: &BenchData) -> Vec<(u64, f64, f64)> {
    let series =
        |p: CopyPath| Series { mode: Mode::Gpu, label: Some(copy_path_label(p).to_owned()), queue_depth: None };
    let (tma, lsu) = (series(CopyPath::Tma), series(CopyPath::Loads));
    let lsu = data.points(Operation::PutBandwidth, &lsu);
    let mut points: Vec<(u64, f64, f64)> = data
        .points(Operation::PutBandwidth, &tma)
        .iter()
        .filter_map(|t| lsu.iter().find(|l| l.bytes == t.bytes).map(|l| (t.bytes, t.median_us, l.median_us)))
        .collect();
    points.sort_by_key(|p| p.0);
    points
}

/// The smallest put size from which the TMA keeps up with loads and stores at every larger size measured
/// (a tie counts for the TMA: it leaves the SMs' threads free), or `Off` when it loses at the largest;
/// `None` without both series.
pub fn bulk_advice(data: &BenchData) -> Option<BulkAdvice> {
    let points = copy_path_points(data);
    let keeps_up = |&(_, tma, lsu): &(u64, f64, f64)| tma <= lsu * crate::crossover::TIE;
    if !keeps_up(points.last()?) {
        return Some(BulkAdvice::Off);
    }
    let from = points.iter().rev().take_while(|p| keeps_up(p)).last().map_or(0, |p| p.0);
    Some(BulkAdvice::From(from))
}

/// The text of `tuning.txt` for `data`; `None` when no operation had two series to compare.
pub fn tuning_file(data: &BenchData) -> Option<String> {
    let ops: Vec<(Operation, Vec<String>)> =
        data.operations().into_iter().map(|op| (op, mode_ranges(data, op))).filter(|(_, r)| !r.is_empty()).collect();
    let winners = algorithm_winners(data);
    let limits = thresholds(&winners).filter(|_| covers_every_algorithm(data));
    let bulk = bulk_advice(data);
    if ops.is_empty() && winners.is_empty() && bulk.is_none() {
        return None;
    }
    let mut out = format!(
        "# Recommended by ferrocomm bench from the run of {}{}.\n",
        crate::report::readme::format_utc(data.meta.created_unix_s),
        if data.meta.devices.is_empty() {
            String::new()
        } else {
            format!(" on {}", crate::report::readme::describe_devices(&data.meta.devices))
        }
    );
    if data.measurements.iter().any(|m| m.intra_gpu) {
        out += "# One GPU: the ranks shared it, so these are intra-GPU figures (no NVLink between the ranks).\n";
    }
    if !ops.is_empty() {
        out += "# The fastest mode by size (back-to-back medians; within 2 % of each other counts as a tie):\n";
    }
    for (op, ranges) in &ops {
        let _ = writeln!(out, "#   {op}:");
        for range in ranges {
            let _ = writeln!(out, "#     {range}");
        }
    }
    if let Some(&(last, _)) = winners.last() {
        out += "# The fastest all-reduce algorithm by size (where two or more ran):\n";
        let mut spans: Vec<(Algorithm, u64, u64)> = Vec::new();
        for &(bytes, algorithm) in &winners {
            match spans.last_mut() {
                Some((a, _, to)) if *a == algorithm => *to = bytes,
                _ => spans.push((algorithm, bytes, bytes)),
            }
        }
        for (algorithm, from, to) in spans {
            let range =
                if from == to { format_size(from) } else { format!("{} – {}", format_size(from), format_size(to)) };
            let _ = writeln!(out, "#   {range}: {}", algorithm_label(algorithm));
        }
        if algorithm_points(data).iter().any(|(bytes, at)| *bytes > last && !at.is_empty()) {
            let _ = writeln!(out, "#   above {}: two-shot (the only algorithm measured there)", format_size(last));
        }
    }
    if limits.is_none() && !winners.is_empty() {
        out += "# No thresholds: the sweep did not run every algorithm from its smallest size up (sweep from 8 B).\n";
    }
    if let Some(t) = limits {
        out += "# The all-reduce thresholds under which Communicator::all_reduce picks the fastest of its algorithms\n\
                # at every size measured (load with FERROCOMM_TUNING_FILE=tuning.txt; FERROCOMM_TUNING overrides it):\n";
        let _ = writeln!(out, "ll_all_reduce_max_bytes={}", t.ll_all_reduce_max_bytes);
        let _ = writeln!(out, "one_shot_max_bytes={}", t.one_shot_max_bytes);
    }
    match bulk {
        Some(BulkAdvice::From(bytes)) => {
            let _ = writeln!(
                out,
                "# The put through the TMA keeps up with loads and stores from {} on (gpu-tma vs gpu-lsu):",
                format_size(bytes)
            );
            let _ = writeln!(out, "bulk_min_bytes={bytes}");
        }
        Some(BulkAdvice::Off) => {
            out += "# The put by loads and stores beat the TMA at the largest size (gpu-lsu vs gpu-tma): TMA off.\n";
            out += "bulk_stage_bytes=0\n";
        }
        None => {}
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Algorithm::{LlOneShot as Ll, OneShot as One, TwoShot as Two};

    #[test]
    fn thresholds_follow_the_leading_runs() {
        let w = [(8, Ll), (1024, Ll), (65536, One), (1 << 20, One), (4 << 20, Two), (1 << 30, Two)];
        let t = thresholds(&w).unwrap();
        assert_eq!((t.ll_all_reduce_max_bytes, t.one_shot_max_bytes), (1024, 1 << 20));
        // LL never fastest: no LL range; one-shot never fastest: its range ends where LL's does.
        let t = thresholds(&[(8, One), (1024, Two)]).unwrap();
        assert_eq!((t.ll_all_reduce_max_bytes, t.one_shot_max_bytes), (0, 8));
        let t = thresholds(&[(8, Ll), (1024, Two), (4096, One)]).unwrap();
        assert_eq!((t.ll_all_reduce_max_bytes, t.one_shot_max_bytes), (8, 8));
        assert_eq!(thresholds(&[]), None);
    }

    fn put_point(label: &str, bytes: u64, us: f64) -> crate::model::Measurement {
        crate::model::Measurement {
            dtype: crate::model::Dtype::U8,
            intra_gpu: true,
            ..crate::model::Measurement::for_test(Operation::PutBandwidth, Mode::Gpu, Some(label), bytes, us)
        }
    }

    #[test]
    fn bulk_advice_starts_where_the_tma_keeps_up_to_the_top() {
        let mut data = BenchData::default();
        assert_eq!(bulk_advice(&data), None);
        // TMA slower at 64 KiB, tied at 1 MiB, faster above; slower again nowhere.
        for (bytes, tma, lsu) in [(64 << 10, 6.0, 5.0), (1 << 20, 10.1, 10.0), (16 << 20, 40.0, 50.0)] {
            data.measurements.push(put_point("tma", bytes, tma));
            data.measurements.push(put_point("lsu", bytes, lsu));
        }
        assert_eq!(bulk_advice(&data), Some(BulkAdvice::From(1 << 20)));
        assert!(tuning_file(&data).unwrap().contains("bulk_min_bytes=1048576"));
        // Loads and stores ahead at the largest size: off.
        data.measurements.push(put_point("tma", 1 << 30, 700.0));
        data.measurements.push(put_point("lsu", 1 << 30, 600.0));
        assert_eq!(bulk_advice(&data), Some(BulkAdvice::Off));
        assert!(tuning_file(&data).unwrap().contains("bulk_stage_bytes=0"));
    }
}
