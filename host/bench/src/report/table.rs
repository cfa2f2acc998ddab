//! Tables: the per-operation tables (terminal text and Markdown) and the headline table.

use crate::model::{BenchData, Measurement, Mode, Operation, Series};
use crate::sizes::format_size;

/// Column headers of the per-operation tables.
pub const HEADERS: [&str; 11] = [
    "size",
    "series",
    "median µs",
    "min µs",
    "max µs",
    "isolated µs",
    "algbw GB/s",
    "busbw GB/s",
    "host CPU µs/op",
    "SMs",
    "graph",
];

/// The columns the utilization adds to the per-operation tables, when the data has it (`--utilization`).
pub const UTILIZATION_HEADERS: [&str; 2] = ["SM active %", "NVLink GB/s"];

/// The per-operation tables' headers for `data`: [`HEADERS`], and [`UTILIZATION_HEADERS`] when a point
/// has utilization figures.
pub fn headers(data: &BenchData) -> Vec<&'static str> {
    let mut out = HEADERS.to_vec();
    if has_utilization(data) {
        out.extend(UTILIZATION_HEADERS);
    }
    out
}

/// Whether some point of `data` has utilization figures.
pub fn has_utilization(data: &BenchData) -> bool {
    data.measurements.iter().any(|m| m.utilization.is_some())
}

/// The cells of a row for `headers(data)`: [`row`], then the utilization cells when the data has them
/// (SM activity, and NVLink bytes sent and received per second over the window).
pub fn row_for(data: &BenchData, m: &Measurement) -> Vec<String> {
    let mut cells = row(m);
    if has_utilization(data) {
        let u = m.utilization.as_ref();
        cells.push(opt(u.and_then(|u| u.sm_activity_pct).map(fmt_num)));
        let link = u.and_then(|u| Some(u.nvlink_tx_gbps()? + u.nvlink_rx_gbps()?));
        cells.push(opt(link.map(fmt_num)));
    }
    cells
}

/// A number with a precision that suits its magnitude (3 significant digits or more).
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

/// The cells of one row of a per-operation table.
pub fn row(m: &Measurement) -> Vec<String> {
    vec![
        format_size(m.bytes),
        m.series().to_string(),
        fmt_num(m.median_us),
        fmt_num(m.min_us),
        fmt_num(m.max_us),
        opt(m.isolated.map(|i| fmt_num(i.median_us))),
        fmt_num(m.algbw_gbps),
        fmt_num(m.busbw_gbps),
        opt(m.host_cpu_us_per_op.map(fmt_num)),
        opt(m.sms_used),
        if m.graph { "yes" } else { "no" }.to_owned(),
    ]
}

/// The rows of `op`, by size then series.
pub fn rows(data: &BenchData, op: Operation) -> Vec<&Measurement> {
    let mut rows: Vec<&Measurement> = data.measurements.iter().filter(|m| m.op == op).collect();
    rows.sort_by(|a, b| a.bytes.cmp(&b.bytes).then_with(|| a.series().cmp(&b.series())));
    rows
}

/// A caption for `op`'s table: "All-reduce — bf16, 2 GPUs", or "All-reduce — bf16, 2 ranks on one GPU
/// (intra-GPU)" for the one-GPU run.
pub fn caption(data: &BenchData, op: Operation) -> String {
    let first = data.measurements.iter().find(|m| m.op == op && m.mode != Mode::Anchor);
    let first = first.or_else(|| data.measurements.iter().find(|m| m.op == op));
    match first {
        Some(m) if m.intra_gpu && m.world == 1 => {
            format!("{} — {}, one rank to itself (intra-GPU)", op.title(), m.dtype)
        }
        Some(m) if m.intra_gpu => format!("{} — {}, {} ranks on one GPU (intra-GPU)", op.title(), m.dtype, m.world),
        Some(m) => format!("{} — {}, {} GPUs", op.title(), m.dtype, m.world),
        None => op.title().to_owned(),
    }
}

/// Which figure of a point a headline compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// The median of back-to-back operations (streaming).
    BackToBack,
    /// The median of isolated operations ([`Measurement::isolated`]).
    Isolated,
}

impl Figure {
    /// The figure of `m`, µs; `None` where the point has none.
    pub fn of(self, m: &Measurement) -> Option<f64> {
        match self {
            Figure::BackToBack => Some(m.median_us),
            Figure::Isolated => m.isolated.map(|i| i.median_us),
        }
    }
}

/// Column-aligned text: numbers right-aligned, words left-aligned.
pub fn text_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let numeric = |i: usize| rows.iter().all(|r| r[i].chars().all(|c| c.is_ascii_digit() || ".–-".contains(c)));
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pad = " ".repeat(widths[i].saturating_sub(c.chars().count()));
                if numeric(i) && i > 0 { format!("{pad}{c}") } else { format!("{c}{pad}") }
            })
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut out = line(headers.to_vec()) + "\n";
    for row in rows {
        out += &line(row.iter().map(String::as_str).collect());
        out.push('\n');
    }
    out
}

/// A Markdown pipe table (numbers right-aligned).
pub fn markdown_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let numeric = |i: usize| {
        !rows.is_empty() && rows.iter().all(|r| r[i].chars().all(|c| c.is_ascii_digit() || ".–-".contains(c)))
    };
    let mut out = format!("| {} |\n|", headers.join(" | "));
    for i in 0..headers.len() {
        out += if numeric(i) { " ---: |" } else { " --- |" };
    }
    out.push('\n');
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        out += &format!("| {} |\n", cells.join(" | "));
    }
    out
}

/// Every operation's table, as text for a terminal.
pub fn terminal_report(data: &BenchData) -> String {
    let mut out = String::new();
    for op in data.operations() {
        let cells: Vec<Vec<String>> = rows(data, op).into_iter().map(|m| row_for(data, m)).collect();
        out += &format!("{}\n{}\n", caption(data, op), text_table(&headers(data), &cells));
    }
    out
}

/// What was not measured, one row per (mode, size, reason) with the operations it covers: columns
/// operations, mode, size, reason.
pub fn skipped_rows(data: &BenchData) -> Vec<Vec<String>> {
    let mut groups: Vec<(String, String, String, Vec<&str>)> = Vec::new();
    for s in &data.skipped {
        let mode = s.series().to_string();
        let size = s.bytes.map_or_else(|| "all".to_owned(), format_size);
        let reason = s.reason.replace('\n', " ");
        match groups.iter_mut().find(|g| g.0 == mode && g.1 == size && g.2 == reason) {
            Some(group) => {
                if !group.3.contains(&s.op.name()) {
                    group.3.push(s.op.name());
                }
            }
            None => groups.push((mode, size, reason, vec![s.op.name()])),
        }
    }
    groups.into_iter().map(|(mode, size, reason, ops)| vec![ops.join(", "), mode, size, reason]).collect()
}

/// Sizes worth a headline row per operation (the anchors' sizes and the targets); the smallest
/// and largest measured sizes stand in when none of them was measured.
fn headline_candidates(op: Operation) -> &'static [u64] {
    const K: u64 = 1 << 10;
    const M: u64 = 1 << 20;
    match op {
        Operation::PingPong => &[4, 8, 64, 4 * K],
        Operation::PutBandwidth => &[64 * K, M, 64 * M, 1 << 30],
        Operation::AllReduce => &[8 * K, 64 * K, 256 * K, M, 16 * M, 256 * M],
        // Tokens × 7168 bf16 (MoE): 1, 128, 1024 tokens, and powers of two.
        Operation::AllGather | Operation::AllToAll => &[14336, 1835008, 14680064, 64 * K, M, 16 * M, 256 * M],
    }
}

/// The (operation, size) rows of the headline table: candidate sizes some mode of the tool measured.
pub fn headline_points(data: &BenchData) -> Vec<(Operation, u64)> {
    let mut out = Vec::new();
    for op in data.operations() {
        let mut own: Vec<u64> =
            data.measurements.iter().filter(|m| m.op == op && m.mode != Mode::Anchor).map(|m| m.bytes).collect();
        own.sort_unstable();
        own.dedup();
        let mut picked: Vec<u64> = headline_candidates(op).iter().copied().filter(|b| own.contains(b)).collect();
        if picked.is_empty() {
            picked.extend(own.first().copied());
            picked.extend(own.last().copied().filter(|l| Some(l) != own.first()));
        }
        picked.sort_unstable();
        out.extend(picked.into_iter().map(|b| (op, b)));
    }
    out
}

/// The fastest point of `mode` at (op, bytes) (the best queue depth for the proxy, the best anchor), not
/// counting the `gpu-procs` series, which has a column of its own, nor `gpu-traced`, which measures trace
/// mode's cost.
fn best(data: &BenchData, op: Operation, bytes: u64, mode: Mode, figure: Figure) -> Option<(&Measurement, f64)> {
    data.measurements
        .iter()
        .filter(|m| m.op == op && m.bytes == bytes && m.mode == mode)
        .filter(|m| !m.series().is_procs() && !m.series().is_traced())
        .filter_map(|m| figure.of(m).map(|us| (m, us)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The `gpu-procs` point at (op, bytes), with its figure.
fn procs(data: &BenchData, op: Operation, bytes: u64, figure: Figure) -> Option<(&Measurement, f64)> {
    data.measurements
        .iter()
        .find(|m| m.op == op && m.bytes == bytes && m.series().is_procs())
        .and_then(|m| figure.of(m).map(|us| (m, us)))
}

/// How much longer `procs` took than `single`, in percent of `single` ("+1.4 %", "−0.3 %"), or as a
/// factor from twice as long up ("732.4×").
pub fn percent_longer(procs: f64, single: f64) -> String {
    if procs >= 2.0 * single {
        return format!("{:.1}×", procs / single);
    }
    let pct = (procs / single - 1.0) * 100.0;
    let pct = if pct.abs() < 0.05 { 0.0 } else { pct };
    if pct < 0.0 { format!("−{:.1} %", -pct) } else { format!("+{pct:.1} %") }
}

/// A headline cell without the variant: the figure, and bus bandwidth for large messages (a team of one
/// rank has no bus to measure).
fn cell_plain((m, us): (&Measurement, f64)) -> String {
    let mut s = format!("{} µs", fmt_num(us));
    if m.bytes >= 16 << 20 && m.world > 1 {
        s += &format!(" · {} GB/s", fmt_num(crate::bandwidth::busbw_gbps(m.op, m.world, m.bytes, us)));
    }
    s
}

/// A headline cell: the figure, bus bandwidth for large messages, and which variant when it matters.
fn cell((m, us): (&Measurement, f64)) -> String {
    let mut s = cell_plain((m, us));
    if m.mode == Mode::Anchor {
        s += &format!(" ({})", m.label.as_deref().unwrap_or("anchor"));
    } else if let Some(depth) = m.queue_depth {
        s += &format!(" (qd={depth})");
    } else if let Some(label) = &m.label {
        s += &format!(" ({label})");
    }
    s
}

/// The headline table: for each headline point, each mode's best median side by side, the best anchor,
/// and how much faster `gpu` is than the best of the others (anchors included). When the data has the
/// `gpu-procs` series, it has its own column after `gpu` and a last column says how much longer it took
/// than `gpu` (the other columns leave it out: it is the gpu mode in other processes).
///
/// `figure` picks what is compared: back-to-back medians, or isolated ones (points without an isolated
/// figure are then left out).
pub fn headline(data: &BenchData, figure: Figure) -> (Vec<String>, Vec<Vec<String>>) {
    let modes: Vec<Mode> = Mode::RUNNABLE
        .into_iter()
        .filter(|mode| {
            data.measurements.iter().any(|m| m.mode == *mode && !m.series().is_procs() && figure.of(m).is_some())
        })
        .collect();
    let has_procs = data.measurements.iter().any(|m| m.series().is_procs() && figure.of(m).is_some());
    let anchors = data.measurements.iter().any(|m| m.mode == Mode::Anchor && figure.of(m).is_some());
    let mut headers: Vec<String> = vec!["operation".into(), "size".into()];
    for mode in &modes {
        headers.push(mode.name().to_owned());
        if *mode == Mode::Gpu && has_procs {
            headers.push(Series::gpu_procs().to_string());
        }
    }
    if has_procs && !modes.contains(&Mode::Gpu) {
        headers.insert(2, Series::gpu_procs().to_string());
    }
    if anchors {
        headers.push("best anchor".into());
    }
    headers.push("gpu vs best other".into());
    if has_procs {
        headers.push("gpu-procs vs gpu".into());
    }
    let mut rows = Vec::new();
    for (op, bytes) in headline_points(data) {
        if !data.measurements.iter().any(|m| m.op == op && m.bytes == bytes && figure.of(m).is_some()) {
            continue;
        }
        let mut row = vec![op.name().to_owned(), format_size(bytes)];
        let procs_cell = || procs(data, op, bytes, figure).map_or_else(|| "–".to_owned(), cell_plain);
        if has_procs && !modes.contains(&Mode::Gpu) {
            row.push(procs_cell());
        }
        for &mode in &modes {
            row.push(best(data, op, bytes, mode, figure).map_or_else(|| "–".to_owned(), cell));
            if mode == Mode::Gpu && has_procs {
                row.push(procs_cell());
            }
        }
        if anchors {
            row.push(best(data, op, bytes, Mode::Anchor, figure).map_or_else(|| "–".to_owned(), cell));
        }
        let others = data
            .measurements
            .iter()
            .filter(|m| m.op == op && m.bytes == bytes && m.mode != Mode::Gpu)
            .filter_map(|m| figure.of(m).map(|us| (m, us)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        row.push(match (best(data, op, bytes, Mode::Gpu, figure), others) {
            (Some((_, gpu)), Some((other, us))) => format!("{:.2}× ({})", us / gpu, other.series()),
            _ => "–".to_owned(),
        });
        if has_procs {
            let single = data
                .measurements
                .iter()
                .find(|m| m.op == op && m.bytes == bytes && m.series() == Series::gpu())
                .and_then(|m| figure.of(m));
            row.push(match (procs(data, op, bytes, figure), single) {
                (Some((_, p)), Some(g)) => percent_longer(p, g),
                _ => "–".to_owned(),
            });
        }
        rows.push(row);
    }
    (headers, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_table_aligns_numbers_right() {
        let rows = vec![
            vec!["8 B".to_owned(), "gpu".to_owned(), "1.25".to_owned()],
            vec!["1 GiB".to_owned(), "nccl".to_owned(), "2650.0".to_owned()],
        ];
        let t = text_table(&["size", "series", "median µs"], &rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "size   series  median µs");
        assert_eq!(lines[1], "8 B    gpu          1.25");
        assert_eq!(lines[2], "1 GiB  nccl       2650.0");
    }

    #[test]
    fn markdown_escapes_and_aligns() {
        let t = markdown_table(&["a", "n"], &[vec!["x|y".to_owned(), "1.5".to_owned()]]);
        assert_eq!(t, "| a | n |\n| --- | ---: |\n| x\\|y | 1.5 |\n");
    }

    #[test]
    fn skipped_rows_group_operations() {
        use crate::model::Skipped;
        let skip = |op, bytes, reason: &str| Skipped {
            op,
            mode: Mode::Cpu,
            queue_depth: None,
            label: None,
            bytes,
            reason: reason.into(),
        };
        let data = BenchData {
            skipped: vec![
                skip(Operation::PingPong, None, "no driver"),
                skip(Operation::AllReduce, None, "no driver"),
                skip(Operation::AllReduce, Some(1 << 30), "out of memory"),
            ],
            ..BenchData::default()
        };
        let rows = skipped_rows(&data);
        assert_eq!(
            rows,
            vec![
                vec!["ping-pong, all-reduce", "cpu", "all", "no driver"],
                vec!["all-reduce", "cpu", "1 GiB", "out of memory"]
            ]
        );
    }

    #[test]
    fn utilization_columns_appear_with_the_data() {
        use crate::model::{Dtype, Measurement};
        use crate::utilization::Utilization;
        let point = |utilization: Option<Utilization>| Measurement {
            op: Operation::PutBandwidth,
            mode: Mode::Cpu,
            label: None,
            world: 2,
            bytes: 1 << 20,
            dtype: Dtype::U8,
            iterations: 10,
            trials: 3,
            median_us: 5.0,
            min_us: 4.9,
            max_us: 5.2,
            algbw_gbps: 200.0,
            busbw_gbps: 200.0,
            host_cpu_us_per_op: Some(3.0),
            sms_used: Some(0),
            queue_depth: None,
            graph: false,
            intra_gpu: true,
            isolated: None,
            utilization,
        };
        let mut data = BenchData { measurements: vec![point(None)], ..BenchData::default() };
        assert_eq!(headers(&data), HEADERS.to_vec());
        assert_eq!(row_for(&data, &data.measurements[0]).len(), HEADERS.len());
        let mut u = Utilization::from_devices(1.5, Vec::new());
        u.sm_activity_pct = Some(42.0);
        data.measurements.push(point(Some(u)));
        let h = headers(&data);
        assert_eq!(h.len(), HEADERS.len() + 2);
        let cells = row_for(&data, &data.measurements[1]);
        assert_eq!(cells.len(), h.len());
        // SM activity measured; the link counters absent (one GPU in a VM): a dash, not a zero.
        assert_eq!(&cells[HEADERS.len()..], ["42.00", "–"]);
        assert_eq!(&row_for(&data, &data.measurements[0])[HEADERS.len()..], ["–", "–"]);
    }

    #[test]
    fn one_rank_to_itself_is_captioned_so_and_shows_no_bus_bandwidth() {
        use crate::model::{Dtype, Measurement};
        let m = Measurement {
            op: Operation::AllGather,
            mode: Mode::Nvshmem,
            label: None,
            world: 1,
            bytes: 64 << 20,
            dtype: Dtype::Bf16,
            iterations: 10,
            trials: 3,
            median_us: 100.0,
            min_us: 99.0,
            max_us: 101.0,
            algbw_gbps: 671.0,
            busbw_gbps: 0.0,
            host_cpu_us_per_op: None,
            sms_used: Some(32),
            queue_depth: None,
            graph: true,
            intra_gpu: true,
            isolated: None,
            utilization: None,
        };
        let mut data = BenchData { measurements: vec![m.clone()], ..BenchData::default() };
        assert_eq!(caption(&data, Operation::AllGather), "All-gather — bf16, one rank to itself (intra-GPU)");
        assert_eq!(cell_plain((&m, 100.0)), "100.0 µs");
        data.measurements[0].world = 2;
        assert!(caption(&data, Operation::AllGather).ends_with("2 ranks on one GPU (intra-GPU)"));
        assert!(cell_plain((&data.measurements[0], 100.0)).contains("GB/s"));
    }

    #[test]
    fn procs_against_gpu() {
        assert_eq!(percent_longer(2.80, 2.77), "+1.1 %");
        assert_eq!(percent_longer(2.96, 2.97), "−0.3 %");
        assert_eq!(percent_longer(3.0001, 3.0), "+0.0 %");
        assert_eq!(percent_longer(5.9, 3.0), "+96.7 %");
        assert_eq!(percent_longer(2204.6, 3.01), "732.4×");
    }

    #[test]
    fn numbers() {
        assert_eq!(fmt_num(1234.56), "1234.6");
        assert_eq!(fmt_num(6.4249), "6.42");
        assert_eq!(fmt_num(0.01234), "0.012");
    }
}
