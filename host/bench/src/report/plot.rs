//! SVG plots with plotters: per operation, latency vs size (log-log) and bus bandwidth vs size (log size,
//! linear bandwidth), one line per series (mode, proxy queue depth, anchor).
//!
//! Sizes are plotted on a log2 axis so that ticks fall on powers of two and read as "1 KiB", "1 MiB".

use std::path::Path;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;

use crate::model::{BenchData, Mode, Operation, Series};
use crate::sizes::format_size;

/// Which figure of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotKind {
    /// Median time per operation vs size (back to back), both axes logarithmic.
    Latency,
    /// Median time of an isolated operation vs size, both axes logarithmic.
    Isolated,
    /// Bus bandwidth vs size.
    Bandwidth,
}

impl PlotKind {
    /// The file name of `op`'s plot of this kind, e.g. `all-reduce-latency.svg`.
    pub fn file_name(self, op: Operation) -> String {
        match self {
            PlotKind::Latency => format!("{}-latency.svg", op.name()),
            PlotKind::Isolated => format!("{}-isolated.svg", op.name()),
            PlotKind::Bandwidth => format!("{}-bandwidth.svg", op.name()),
        }
    }
}

/// Preferred colours per mode (several series of one mode take them in turn), then spares.
pub(super) const GPU: [RGBColor; 2] = [RGBColor(214, 39, 40), RGBColor(255, 152, 150)];
pub(super) const PROXY: [RGBColor; 3] = [RGBColor(255, 127, 14), RGBColor(188, 95, 10), RGBColor(255, 187, 120)];
pub(super) const CPU: [RGBColor; 2] = [RGBColor(31, 119, 180), RGBColor(174, 199, 232)];
pub(super) const NCCL: [RGBColor; 2] = [RGBColor(44, 160, 44), RGBColor(152, 223, 138)];
pub(super) const NVSHMEM: [RGBColor; 2] = [RGBColor(23, 128, 128), RGBColor(127, 201, 201)];
pub(super) const ANCHOR: [RGBColor; 5] = [
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];
pub(super) const SPARE: [RGBColor; 4] =
    [RGBColor(188, 189, 34), RGBColor(0, 0, 0), RGBColor(197, 176, 213), RGBColor(196, 156, 148)];

/// The colour of each series of `op`, distinct within the plot.
pub fn series_colors(data: &BenchData, op: Operation) -> Vec<(Series, RGBColor)> {
    let mut out: Vec<(Series, RGBColor)> = Vec::new();
    for series in data.series(op) {
        let preferred: &[RGBColor] = match series.mode {
            Mode::Gpu => &GPU,
            Mode::Proxy => &PROXY,
            Mode::Cpu => &CPU,
            Mode::Nccl => &NCCL,
            Mode::Nvshmem => &NVSHMEM,
            Mode::Anchor => &ANCHOR,
        };
        let free = preferred
            .iter()
            .chain(SPARE.iter())
            .chain(GPU.iter().chain(&PROXY).chain(&CPU).chain(&NCCL).chain(&NVSHMEM).chain(&ANCHOR))
            .find(|c| !out.iter().any(|(_, used)| used == *c));
        let color = free.copied().unwrap_or(BLACK);
        out.push((series, color));
    }
    out
}

/// `#rrggbb` as the SVG backend writes it.
pub fn hex(color: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", color.0, color.1, color.2)
}

/// A plot that could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw {path}: {message}")]
pub struct PlotError {
    /// The file.
    pub path: String,
    /// plotters' message.
    pub message: String,
}

/// One series as drawn: its name, colour and (x, y) points in axis units.
pub(super) struct Line {
    pub(super) name: String,
    pub(super) color: RGBColor,
    pub(super) points: Vec<(f64, f64)>,
}

/// Draws `op`'s plot of `kind` into the SVG file at `path`; `Ok(false)` (and no file) when no point of
/// `op` has a positive value to plot.
pub fn plot(data: &BenchData, op: Operation, kind: PlotKind, path: &Path) -> Result<bool, PlotError> {
    // Latency is drawn as log10(µs) on a linear axis with 1-2-5 ticks; sizes as log2(bytes).
    let lines: Vec<Line> = series_colors(data, op)
        .into_iter()
        .map(|(series, color)| {
            let points = data
                .points(op, &series)
                .iter()
                .map(|m| match kind {
                    PlotKind::Latency => (m.bytes as f64, m.median_us),
                    PlotKind::Isolated => (m.bytes as f64, m.isolated.map_or(f64::NAN, |i| i.median_us)),
                    PlotKind::Bandwidth => (m.bytes as f64, m.busbw_gbps),
                })
                .filter(|(_, y)| *y > 0.0 && y.is_finite())
                .map(|(x, y)| (x.log2(), if kind == PlotKind::Bandwidth { y } else { y.log10() }))
                .collect();
            Line { name: series.to_string(), color, points }
        })
        .filter(|l: &Line| !l.points.is_empty())
        .collect();
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let (Some(x_min), Some(x_max)) = (all().map(|p| p.0).reduce(f64::min), all().map(|p| p.0).reduce(f64::max)) else {
        return Ok(false);
    };
    let (y_min, y_max) = (all().map(|p| p.1).fold(f64::MAX, f64::min), all().map(|p| p.1).fold(f64::MIN, f64::max));
    let x = Axis { lo: x_min.floor() - 0.25, hi: x_max.ceil() + 0.25, ticks: size_ticks(x_min, x_max) };
    let subject = crate::report::table::caption(data, op);
    let drawn = match kind {
        PlotKind::Latency | PlotKind::Isolated => {
            let (lo, hi) = (y_min - 0.15, y_max + 0.15);
            let y = Axis { lo, hi, ticks: decade_ticks(lo, hi) };
            let what = if kind == PlotKind::Latency { "back to back" } else { "isolated" };
            draw(
                path,
                &format!("{subject}: time per operation, {what}"),
                x,
                y,
                "µs per operation",
                &|y| number(10f64.powf(*y)),
                &lines,
            )
        }
        PlotKind::Bandwidth => {
            let y = Axis { lo: 0.0, hi: y_max * 1.1, ticks: linear_ticks(y_max * 1.1) };
            draw(path, &format!("{subject}: bus bandwidth"), x, y, "bus bandwidth, GB/s", &|y| number(*y), &lines)
        }
    };
    drawn.map_err(|message| PlotError { path: path.display().to_string(), message })?;
    Ok(true)
}

/// A linear axis with the ticks this module chooses (plotters' own ticks fall between powers of two).
pub(super) struct Axis {
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) ticks: Vec<f64>,
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (span * (value - self.lo) / (self.hi - self.lo)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format(value: &f64) -> String {
        number(*value)
    }
}

/// Ticks from 0 to `hi` at a 1-2-5 step giving 4 to 10 of them.
pub(super) fn linear_ticks(hi: f64) -> Vec<f64> {
    if hi <= 0.0 || !hi.is_finite() {
        return vec![0.0];
    }
    let raw = hi / 6.0;
    let decade = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * decade).find(|s| *s >= raw).unwrap_or(10.0 * decade);
    (0..).map(|i| f64::from(i) * step).take_while(|t| *t <= hi).collect()
}

/// Whole powers of two from `lo` to `hi` (log2), thinned to at most 12 ticks.
pub(super) fn size_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (lo, hi) = (lo.ceil() as i64, hi.floor() as i64);
    let step = ((hi - lo) / 12 + 1).max(1);
    (lo..=hi).step_by(step as usize).map(|e| e as f64).collect()
}

/// log10 of 1, 2 and 5 times powers of ten within `lo..hi` (log10); powers of ten alone when many.
fn decade_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let decades = (lo.floor() as i64)..=(hi.ceil() as i64);
    let ticks = |mantissas: &[f64]| -> Vec<f64> {
        decades
            .clone()
            .flat_map(|k| mantissas.iter().map(move |m| m.log10() + k as f64))
            .filter(|t| (lo..=hi).contains(t))
            .collect()
    };
    let fine = ticks(&[1.0, 2.0, 5.0]);
    if fine.len() > 14 { ticks(&[1.0]) } else { fine }
}

/// A tick label: whole numbers from 10 up, otherwise up to three decimals without trailing zeros.
pub(super) fn number(y: f64) -> String {
    let s = if y.abs() >= 10.0 || y == 0.0 { format!("{y:.0}") } else { format!("{y:.3}") };
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_owned() } else { s }
}

pub(super) fn x_label(x: &f64) -> String {
    if (x - x.round()).abs() < 1e-6 && *x >= 0.0 { format_size(2f64.powf(x.round()) as u64) } else { String::new() }
}

fn draw(
    path: &Path,
    title: &str,
    x: Axis,
    y: Axis,
    y_desc: &str,
    y_label: &dyn Fn(&f64) -> String,
    lines: &[Line],
) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    chart(&root, (title, 26), (x, y), y_desc, y_label, lines)?;
    root.present().map_err(|e| e.to_string())
}

/// One chart on `area`: the caption (text, font size), the size axis `x` against `y` (described by `y_desc`,
/// labelled by `y_label`), a line per series and a legend (none without lines). Every plot of a report
/// draws its charts with it, so they read alike.
pub(super) fn chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    (caption, caption_size): (&str, u32),
    (x, y): (Axis, Axis),
    y_desc: &str,
    y_label: &dyn Fn(&f64) -> String,
    lines: &[Line],
) -> Result<(), String> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", caption_size))
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("message size")
        .y_desc(y_desc)
        .x_label_formatter(&x_label)
        .y_label_formatter(y_label)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(|e| e.to_string())?;
    if lines.is_empty() {
        return Ok(());
    }
    for line in lines {
        let color = line.color;
        chart
            .draw_series(LineSeries::new(line.points.iter().copied(), color.stroke_width(2)).point_size(3))
            .map_err(|e| e.to_string())?
            .label(line.name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_and_labels() {
        assert_eq!(size_ticks(3.0, 30.0).len(), 10);
        assert_eq!(size_ticks(3.0, 10.0), vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]);
        let labels: Vec<String> = decade_ticks(0.0, 2.0).iter().map(|t| number(10f64.powf(*t))).collect();
        assert_eq!(labels, ["1", "2", "5", "10", "20", "50", "100"]);
        assert_eq!(decade_ticks(-1.0, 6.0).len(), 8);
        assert_eq!(x_label(&10.0), "1 KiB");
        assert_eq!(x_label(&10.5), "");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(397.4), "397");
        assert_eq!(linear_ticks(440.0), vec![0.0, 100.0, 200.0, 300.0, 400.0]);
        assert_eq!(linear_ticks(1.1), vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]);
    }
}
