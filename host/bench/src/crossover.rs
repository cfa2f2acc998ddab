//! Which mode wins at which size, computed from the data: "gpu beats cpu from 8 B to 1 GiB; nccl beats gpu
//! from 16 MiB to 1 GiB".
//!
//! Two series are compared at the sizes both measured (medians); consecutive sizes with the same winner
//! form a span. Medians within [`TIE`] of each other are a tie, not a win: two series that run the same
//! kernel at a size (the gpu series and the algorithm it picks there) differ by run-to-run noise only.
//! Otherwise nothing is smoothed: a point that flips the winner by more shows up as its own span.

use crate::model::{BenchData, Mode, Operation, Series};
use crate::sizes::format_size;

/// How much slower a median must be to lose: 2 %, about the trial-to-trial spread of a median on the GPU
/// machine. Closer medians tie.
pub const TIE: f64 = 1.02;

/// Consecutive common sizes over which one series is faster than the other.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The faster series; `None` where both medians are equal.
    pub winner: Option<Series>,
    /// First size of the span.
    pub from: u64,
    /// Last size of the span.
    pub to: u64,
    /// Largest speed-up in the span (loser's median / winner's median; 1 for a tie).
    pub best_ratio: f64,
    /// The size where that speed-up was measured.
    pub best_at: u64,
}

/// Two series of one operation, compared size by size.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossover {
    /// The operation.
    pub op: Operation,
    /// The first series.
    pub a: Series,
    /// The second series.
    pub b: Series,
    /// Spans in ascending size, covering every size both measured.
    pub spans: Vec<Span>,
}

/// Compares `a` with `b` on `op`; `None` when they have no size in common.
pub fn compare(data: &BenchData, op: Operation, a: &Series, b: &Series) -> Option<Crossover> {
    let points_b = data.points(op, b);
    let mut spans: Vec<Span> = Vec::new();
    for pa in data.points(op, a) {
        let Some(pb) = points_b.iter().find(|pb| pb.bytes == pa.bytes) else { continue };
        let (winner, ratio) = if pa.median_us * TIE < pb.median_us {
            (Some(a.clone()), pb.median_us / pa.median_us)
        } else if pb.median_us * TIE < pa.median_us {
            (Some(b.clone()), pa.median_us / pb.median_us)
        } else {
            (None, 1.0)
        };
        match spans.last_mut() {
            Some(span) if span.winner == winner => {
                span.to = pa.bytes;
                if ratio > span.best_ratio {
                    (span.best_ratio, span.best_at) = (ratio, pa.bytes);
                }
            }
            _ => spans.push(Span { winner, from: pa.bytes, to: pa.bytes, best_ratio: ratio, best_at: pa.bytes }),
        }
    }
    (!spans.is_empty()).then(|| Crossover { op, a: a.clone(), b: b.clone(), spans })
}

/// The fastest of the tool's own series (not anchors) at each size two or more of them measured, as spans.
/// The series of the current span keeps the lead while it is within [`TIE`] of the fastest.
pub fn fastest(data: &BenchData, op: Operation) -> Vec<(Series, u64, u64)> {
    fastest_of(data, op, |s| s.mode != Mode::Anchor && !s.is_traced())
}

/// [`fastest`] over the series `keep` accepts.
pub fn fastest_of(data: &BenchData, op: Operation, keep: impl Fn(&Series) -> bool) -> Vec<(Series, u64, u64)> {
    let own: Vec<Series> = data.series(op).into_iter().filter(|s| keep(s)).collect();
    let mut sizes: Vec<u64> = data.measurements.iter().filter(|m| m.op == op).map(|m| m.bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut spans: Vec<(Series, u64, u64)> = Vec::new();
    for size in sizes {
        let at: Vec<(&Series, f64)> = own
            .iter()
            .filter_map(|s| data.points(op, s).iter().find(|m| m.bytes == size).map(|m| (s, m.median_us)))
            .collect();
        if at.len() < 2 {
            continue;
        }
        let Some(&(fastest_series, fastest_us)) = at.iter().min_by(|x, y| x.1.total_cmp(&y.1)) else { continue };
        let leader = spans.last().and_then(|(s, _, _)| at.iter().find(|(a, _)| *a == s));
        let best = match leader {
            Some(&(leader, us)) if us <= fastest_us * TIE => leader,
            _ => fastest_series,
        };
        match spans.last_mut() {
            Some((series, _, to)) if *series == *best => *to = size,
            _ => spans.push(((*best).clone(), size, size)),
        }
    }
    spans
}

/// The series the summary is about: ferrocomm's own modes first (gpu, then proxy), else the first one.
fn focus(data: &BenchData, op: Operation) -> Option<Series> {
    data.series(op).into_iter().find(|s| s.mode != Mode::Anchor)
}

/// One sentence for a comparison, e.g. "gpu beats nccl from 8 B to 8 MiB (up to 4.6× at 8 B); nccl beats
/// gpu from 16 MiB to 1 GiB (up to 1.3× at 1 GiB) — the crossover lies between 8 MiB and 16 MiB".
pub fn describe(c: &Crossover) -> String {
    let other = |w: &Series| if *w == c.a { c.b.to_string() } else { c.a.to_string() };
    if let [span] = c.spans.as_slice() {
        let range = if span.from == span.to {
            format!("at the one size both measured ({})", format_size(span.from))
        } else {
            format!("at every size both measured ({} – {})", format_size(span.from), format_size(span.to))
        };
        return match &span.winner {
            Some(w) => format!(
                "{w} beats {} {range}, by up to {:.1}× at {}",
                other(w),
                span.best_ratio,
                format_size(span.best_at)
            ),
            None => format!("{} and {} tie {range}", c.a, c.b),
        };
    }
    let parts: Vec<String> = c
        .spans
        .iter()
        .map(|span| {
            let range = if span.from == span.to {
                format!("at {}", format_size(span.from))
            } else {
                format!("from {} to {}", format_size(span.from), format_size(span.to))
            };
            match &span.winner {
                Some(w) => format!(
                    "{w} beats {} {range} (up to {:.1}× at {})",
                    other(w),
                    span.best_ratio,
                    format_size(span.best_at)
                ),
                None => format!("{} and {} tie {range}", c.a, c.b),
            }
        })
        .collect();
    let mut sentence = parts.join("; ");
    if let [first @ Span { winner: Some(_), .. }, second @ Span { winner: Some(_), .. }] = c.spans.as_slice() {
        sentence +=
            &format!(" — the crossover lies between {} and {}", format_size(first.to), format_size(second.from));
    }
    sentence
}

/// How the `gpu-procs` series compares with `gpu` on `op`: the range of its extra time in percent over the
/// sizes both measured, and where the gap is largest, e.g. "gpu-procs vs gpu: +0.2 % to +1.9 % over the
/// sizes both measured (8 KiB – 16 MiB), the largest gap +1.9 % at 8 KiB". `None` without a common size.
pub fn procs_vs_gpu(data: &BenchData, op: Operation) -> Option<String> {
    let single = data.points(op, &Series::gpu());
    let pairs: Vec<(u64, f64)> = data
        .points(op, &Series::gpu_procs())
        .into_iter()
        .filter_map(|p| single.iter().find(|g| g.bytes == p.bytes).map(|g| (p.bytes, p.median_us / g.median_us - 1.0)))
        .collect();
    let (first, last) = (pairs.first()?, pairs.last()?);
    let pct = |r: f64| crate::report::table::percent_longer(1.0 + r, 1.0);
    let low = pairs.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let high = pairs.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let widest = pairs.iter().max_by(|a, b| a.1.abs().total_cmp(&b.1.abs())).unwrap_or(first);
    let sizes = if pairs.len() == 1 {
        format!("at the one size both measured ({})", format_size(first.0))
    } else {
        format!("over the sizes both measured ({} – {})", format_size(first.0), format_size(last.0))
    };
    let range = if pairs.len() == 1 { pct(low) } else { format!("{} to {}", pct(low), pct(high)) };
    Some(format!(
        "gpu-procs vs gpu (time per operation): {range} {sizes}, the largest gap {} at {}",
        pct(widest.1),
        format_size(widest.0)
    ))
}

/// The crossover summary of a run: per operation, the fastest mode by size range, then the focus series
/// (gpu when present) against every other series, anchors included, that shares a size with it (the
/// `gpu-procs` series against `gpu` in percent, see [`procs_vs_gpu`]).
pub fn summary(data: &BenchData) -> Vec<(Operation, Vec<String>)> {
    let mut out = Vec::new();
    for op in data.operations() {
        let mut lines = Vec::new();
        let fastest = fastest(data, op);
        if !fastest.is_empty() {
            let spans: Vec<String> = fastest
                .iter()
                .map(|(s, from, to)| {
                    if from == to {
                        format!("{s} at {}", format_size(*from))
                    } else {
                        format!("{s} from {} to {}", format_size(*from), format_size(*to))
                    }
                })
                .collect();
            lines.push(format!("fastest: {}", spans.join(", ")));
        }
        if let Some(focus) = focus(data, op) {
            for other in data.series(op).into_iter().filter(|s| *s != focus) {
                if focus == Series::gpu() && other.is_procs() {
                    lines.extend(procs_vs_gpu(data, op));
                } else if let Some(c) = compare(data, op, &focus, &other) {
                    lines.push(describe(&c));
                }
            }
        }
        if !lines.is_empty() {
            out.push((op, lines));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Measurement;

    fn point(op: Operation, mode: Mode, bytes: u64, us: f64) -> Measurement {
        let label = (mode == Mode::Anchor).then_some("torch symm_mem two-shot");
        Measurement::for_test(op, mode, label, bytes, us)
    }

    fn series(mode: Mode) -> Series {
        Series { mode, label: None, queue_depth: None }
    }

    #[test]
    fn single_crossover_between_measured_sizes() {
        // gpu: 2 µs + 300 GB/s; nccl: 10 µs + 400 GB/s → equal at 9.6 MB, between 8 MiB and 16 MiB.
        let mut data = BenchData::default();
        for shift in 3..=30 {
            let b = 1u64 << shift;
            data.measurements.push(point(Operation::AllReduce, Mode::Gpu, b, 2.0 + b as f64 / 300e3));
            data.measurements.push(point(Operation::AllReduce, Mode::Nccl, b, 10.0 + b as f64 / 400e3));
        }
        let c = compare(&data, Operation::AllReduce, &series(Mode::Gpu), &series(Mode::Nccl)).unwrap();
        assert_eq!(c.spans.len(), 2);
        assert_eq!((c.spans[0].winner.clone(), c.spans[0].from, c.spans[0].to), (Some(series(Mode::Gpu)), 8, 8 << 20));
        assert_eq!(
            (c.spans[1].winner.clone(), c.spans[1].from, c.spans[1].to),
            (Some(series(Mode::Nccl)), 16 << 20, 1 << 30)
        );
        assert_eq!(c.spans[0].best_at, 8);
        assert!((c.spans[0].best_ratio - (10.0 + 8.0 / 400e3) / (2.0 + 8.0 / 300e3)).abs() < 1e-12);
        let text = describe(&c);
        assert!(
            text.starts_with(
                "gpu beats nccl from 8 B to 8 MiB (up to 5.0× at 8 B); nccl beats gpu from 16 MiB to 1 GiB"
            ),
            "{text}"
        );
        assert!(text.ends_with("the crossover lies between 8 MiB and 16 MiB"), "{text}");

        let lines = &summary(&data)[0].1;
        assert_eq!(lines[0], "fastest: gpu from 8 B to 8 MiB, nccl from 16 MiB to 1 GiB");
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn one_winner_everywhere_ties_and_anchors() {
        let mut data = BenchData::default();
        for (b, gpu, cpu, anchor) in [(8, 1.2, 8.2, 6.0), (64, 1.3, 8.0, 6.5), (4096, 2.0, 9.0, 2.0)] {
            data.measurements.push(point(Operation::PingPong, Mode::Gpu, b, gpu));
            data.measurements.push(point(Operation::PingPong, Mode::Cpu, b, cpu));
            data.measurements.push(point(Operation::PingPong, Mode::Anchor, b, anchor));
        }
        // A size only one series measured is left out of both the comparison and the fastest list.
        data.measurements.push(point(Operation::PingPong, Mode::Cpu, 1 << 20, 50.0));
        let lines = &summary(&data)[0].1;
        assert_eq!(lines[0], "fastest: gpu from 8 B to 4 KiB");
        assert_eq!(lines[1], "gpu beats cpu at every size both measured (8 B – 4 KiB), by up to 6.8× at 8 B");
        assert_eq!(
            lines[2],
            "gpu beats torch symm_mem two-shot from 8 B to 64 B (up to 5.0× at 8 B); \
             gpu and torch symm_mem two-shot tie at 4 KiB"
        );
        // Anchors never count as the fastest of the tool's modes, and never become the focus.
        let mut only_anchor = BenchData::default();
        only_anchor.measurements.push(point(Operation::AllToAll, Mode::Anchor, 8, 1.0));
        assert!(summary(&only_anchor).is_empty());
    }

    #[test]
    fn flapping_winner_makes_separate_spans() {
        let mut data = BenchData::default();
        for (b, gpu, nccl) in [(8, 1.0, 2.0), (16, 3.0, 2.0), (32, 1.0, 2.0)] {
            data.measurements.push(point(Operation::AllGather, Mode::Gpu, b, gpu));
            data.measurements.push(point(Operation::AllGather, Mode::Nccl, b, nccl));
        }
        let c = compare(&data, Operation::AllGather, &series(Mode::Gpu), &series(Mode::Nccl)).unwrap();
        assert_eq!(c.spans.len(), 3);
        assert!(!describe(&c).contains("crossover lies"));
        assert!(compare(&data, Operation::AllReduce, &series(Mode::Gpu), &series(Mode::Nccl)).is_none());
    }
}
