//! The timeline as an SVG (plotters): one row per rank and block, time across; puts blue, waits orange,
//! waits that never ended red.

use std::path::Path;

use plotters::prelude::*;

use super::{SliceKind, TraceFileError, TraceSummary};

const PUT: RGBColor = RGBColor(31, 119, 180);
const WAIT: RGBColor = RGBColor(255, 127, 14);
const OPEN: RGBColor = RGBColor(214, 39, 40);
/// Pixels per row, and the chart's width.
const ROW: u32 = 26;
const WIDTH: u32 = 1100;

/// Draws `summary`'s slices into `path`.
pub(super) fn draw(summary: &TraceSummary, path: &Path) -> Result<(), TraceFileError> {
    let fail = |e: &dyn std::fmt::Display| TraceFileError::Svg { path: path.to_owned(), reason: e.to_string() };
    let mut rows: Vec<(u64, u64)> = summary.slices.iter().map(|s| (s.rank, s.block)).collect();
    rows.sort_unstable();
    rows.dedup();
    if rows.is_empty() {
        return Err(fail(&"the trace has no puts or waits to draw"));
    }
    let height = 120 + ROW * rows.len() as u32;
    let end = summary.end_us.max(1e-3);
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("ferrocomm trace: puts (blue), waits (orange), waits that never ended (red)", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(130)
        .build_cartesian_2d(0.0..end, 0.0..rows.len() as f64)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("µs from the first event")
        .y_labels(0)
        .draw()
        .map_err(|e| fail(&e))?;
    // Each row's name in the label area, at its band's middle (row 0 at the top).
    for (i, (rank, block)) in rows.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, (rows.len() - i) as f64 - 0.5));
        let name = format!("rank {rank} block {block}");
        root.draw(&Text::new(name, (x - 124, y - 6), ("sans-serif", 13))).map_err(|e| fail(&e))?;
    }
    // Row 0 at the top: the first (rank, block) gets the highest y band.
    let band = |rank: u64, block: u64| {
        let i = rows.iter().position(|&r| r == (rank, block)).unwrap_or(0);
        (rows.len() - 1 - i) as f64
    };
    let rects = summary.slices.iter().map(|s| {
        let y = band(s.rank, s.block);
        let color = match s.kind {
            SliceKind::Put => PUT,
            SliceKind::Wait => WAIT,
            SliceKind::OpenWait => OPEN,
        };
        // The thinnest slice stays visible.
        let x1 = s.start_us + s.dur_us.max(end / f64::from(WIDTH));
        Rectangle::new([(s.start_us, y + 0.15), (x1, y + 0.85)], color.filled())
    });
    chart.draw_series(rects).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
