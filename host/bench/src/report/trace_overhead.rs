//! The report's *Trace mode overhead* table: the `gpu-traced` series over the `gpu` series, point by
//! point, against trace mode's targets (≤ 10 % on the ping-pong, ≤ 3 % on a 1 MiB all-reduce).

use crate::model::{BenchData, Operation, Series};
use crate::report::table::{fmt_num, markdown_table, percent_longer};
use crate::sizes::format_size;

/// The slowdown trace mode may cost at (op, bytes), in percent, where it has a target.
pub fn target_percent(op: Operation, bytes: u64) -> Option<f64> {
    match (op, bytes) {
        (Operation::PingPong, _) => Some(10.0),
        (Operation::AllReduce, b) if b == 1 << 20 => Some(3.0),
        _ => None,
    }
}

/// One point measured both untraced and traced.
#[derive(Debug, Clone, PartialEq)]
pub struct Overhead {
    /// The operation.
    pub op: Operation,
    /// The message size.
    pub bytes: u64,
    /// The `gpu` median, µs.
    pub plain_us: f64,
    /// The `gpu-traced` median, µs.
    pub traced_us: f64,
}

impl Overhead {
    /// The slowdown in percent (negative: the traced run was faster, within noise).
    pub fn percent(&self) -> f64 {
        100.0 * (self.traced_us / self.plain_us - 1.0)
    }

    /// Whether the slowdown is within the target at this point (`None`: no target here).
    pub fn met(&self) -> Option<bool> {
        target_percent(self.op, self.bytes).map(|t| self.percent() <= t)
    }
}

/// Every (op, size) both the `gpu` and the `gpu-traced` series measured, in operation and size order.
pub fn overheads(data: &BenchData) -> Vec<Overhead> {
    let mut out = Vec::new();
    for op in data.operations() {
        let traced = data.points(op, &Series::gpu_traced());
        for plain in data.points(op, &Series::gpu()) {
            if let Some(t) = traced.iter().find(|t| t.bytes == plain.bytes && t.dtype == plain.dtype)
                && plain.median_us > 0.0
            {
                out.push(Overhead { op, bytes: plain.bytes, plain_us: plain.median_us, traced_us: t.median_us });
            }
        }
    }
    out
}

/// The README section, when the data holds both series.
pub fn section(data: &BenchData) -> Option<String> {
    let rows: Vec<Vec<String>> = overheads(data)
        .iter()
        .map(|o| {
            let target = target_percent(o.op, o.bytes).map_or("–".to_owned(), |t| format!("≤ {t} %"));
            let verdict = match o.met() {
                Some(true) => "met",
                Some(false) => "**not met**",
                None => "–",
            };
            vec![
                o.op.name().to_owned(),
                format_size(o.bytes),
                fmt_num(o.plain_us),
                fmt_num(o.traced_us),
                percent_longer(o.traced_us, o.plain_us),
                target,
                verdict.to_owned(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let headers = ["operation", "size", "gpu µs", "gpu-traced µs", "overhead", "target", "verdict"];
    Some(format!(
        "\n## Trace mode overhead\n\n{}\nBack-to-back medians of the gpu series on an untraced team and on a traced \
         one (`gpu-traced`, `--traced`): the same kernels, timed the same way, with every put, signal, wait and \
         barrier recorded into the rank's ring. With tracing off the kernels hold no trace code at all (the PTX \
         goldens pin it), so the gpu series is the cost of trace mode off.\n",
        markdown_table(&headers, &rows)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Measurement, Mode};

    fn point(op: Operation, label: Option<&str>, bytes: u64, us: f64) -> Measurement {
        Measurement::for_test(op, Mode::Gpu, label, bytes, us)
    }

    #[test]
    fn pairs_the_two_series_and_judges_the_targets() {
        let data = BenchData {
            measurements: vec![
                point(Operation::PingPong, None, 8, 2.0),
                point(Operation::PingPong, Some("traced"), 8, 2.1),
                point(Operation::AllReduce, None, 1 << 20, 10.0),
                point(Operation::AllReduce, Some("traced"), 1 << 20, 10.5),
                point(Operation::AllReduce, None, 4 << 20, 20.0),
                // No traced point at 4 MiB, and a series that is neither.
                point(Operation::AllReduce, Some("two-shot"), 4 << 20, 19.0),
            ],
            ..BenchData::default()
        };
        let o = overheads(&data);
        assert_eq!(o.len(), 2);
        assert_eq!((o[0].op, o[0].bytes, o[0].met()), (Operation::PingPong, 8, Some(true)));
        assert!((o[0].percent() - 5.0).abs() < 1e-9);
        assert_eq!((o[1].op, o[1].bytes, o[1].met()), (Operation::AllReduce, 1 << 20, Some(false)));
        let text = section(&data).unwrap();
        assert!(text.contains("| ping-pong | 8 B |") && text.contains("+5.0 %") && text.contains("**not met**"));
        assert!(section(&BenchData::default()).is_none());
    }
}
