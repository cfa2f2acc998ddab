//! One SVG of what a sweep cost the GPUs: SM activity (%) above, NVLink GB/s below, both against message
//! size on the log2 axis of [`plot`](super::plot), one line per series.
//!
//! The input is plain tuples, so the figure can be drawn from whatever holds the
//! [`Utilization`](crate::utilization::Utilization) of each point:
//!
//! ```no_run
//! use ferrocomm_bench::report::utilization_plot::{UtilizationSeries, plot_utilization};
//!
//! let series: Vec<UtilizationSeries> = vec![
//!     ("gpu".into(), vec![(4096, Some(3.1), Some(0.4)), (1 << 20, Some(9.8), Some(61.0))]),
//!     ("cpu".into(), vec![(4096, Some(0.0), Some(0.3)), (1 << 20, Some(0.2), Some(70.2))]),
//! ];
//! plot_utilization("all-reduce, bf16, 2 GPUs", &series, std::path::Path::new("all-reduce-utilization.svg"))?;
//! # Ok::<(), ferrocomm_bench::report::plot::PlotError>(())
//! ```

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

// The axis, ticks, labels and mode colours of the latency and bandwidth plots, so this figure reads like
// the ones beside it.
use super::plot::{
    ANCHOR, Axis, CPU, GPU, Line, NCCL, PROXY, PlotError, SPARE, chart, linear_ticks, number, size_ticks,
};

/// One point: (message bytes, SM activity %, NVLink GB/s). A `None` figure leaves the point out of that
/// panel.
pub type UtilizationPoint = (u64, Option<f64>, Option<f64>);

/// One line: its name (a mode, "proxy depth 4", …) and its points.
pub type UtilizationSeries = (String, Vec<UtilizationPoint>);

/// The file name of an operation's utilization plot, e.g. `all-reduce-utilization.svg`, next to
/// `all-reduce-latency.svg` in a report folder.
pub fn file_name(op_name: &str) -> String {
    format!("{op_name}-utilization.svg")
}

/// The colours of [`plot`](super::plot)'s modes, picked by the series name's first word, so that a mode
/// has one colour across a report's figures; other names take the spares in turn.
fn colors(series: &[UtilizationSeries]) -> Vec<RGBColor> {
    let by_mode: [(&str, &[RGBColor]); 4] = [("gpu", &GPU), ("proxy", &PROXY), ("cpu", &CPU), ("nccl", &NCCL)];
    let mut out: Vec<RGBColor> = Vec::new();
    for (name, _) in series {
        let word = name.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or("").to_ascii_lowercase();
        let preferred: &[RGBColor] = by_mode.iter().find(|(m, _)| *m == word).map_or(&[], |(_, c)| c);
        let free = preferred.iter().chain(ANCHOR.iter()).chain(SPARE.iter()).find(|c| !out.contains(c));
        out.push(free.copied().unwrap_or(BLACK));
    }
    out
}

/// Draws `series` into the SVG at `path`, titled `title` (the operation, dtype, GPUs): SM activity on a
/// 0–100 % axis, NVLink GB/s (whatever direction the caller chose: sent, received, or their sum) on an axis
/// from 0. `Ok(false)` (and no file) when no point has either figure; a panel with no figures says so.
pub fn plot_utilization(title: &str, series: &[UtilizationSeries], path: &Path) -> Result<bool, PlotError> {
    let colors = colors(series);
    let lines = |pick: fn(&UtilizationPoint) -> Option<f64>| -> Vec<Line> {
        series
            .iter()
            .zip(&colors)
            .map(|((name, points), color)| Line {
                name: name.clone(),
                color: *color,
                points: points
                    .iter()
                    .filter(|p| p.0 > 0)
                    .filter_map(|p| pick(p).filter(|y| y.is_finite() && *y >= 0.0).map(|y| ((p.0 as f64).log2(), y)))
                    .collect(),
            })
            .filter(|l| !l.points.is_empty())
            .collect()
    };
    let sm = lines(|p| p.1);
    let link = lines(|p| p.2);
    let xs = || sm.iter().chain(&link).flat_map(|l| l.points.iter().map(|p| p.0));
    let (Some(x_min), Some(x_max)) = (xs().reduce(f64::min), xs().reduce(f64::max)) else {
        return Ok(false);
    };
    let x = || Axis { lo: x_min.floor() - 0.25, hi: x_max.ceil() + 0.25, ticks: size_ticks(x_min, x_max) };
    let link_max = link.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(0.0, f64::max);
    let link_hi = if link_max > 0.0 { link_max * 1.1 } else { 1.0 };
    let draw = || -> Result<(), String> {
        let root = SVGBackend::new(path, (960, 900)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let root = root.titled(title, ("sans-serif", 26)).map_err(|e| e.to_string())?;
        let (top, bottom) = root.split_vertically(440);
        panel(
            &top,
            "SM activity",
            x(),
            Axis { lo: 0.0, hi: 105.0, ticks: linear_ticks(100.0) },
            "SM activity, %",
            &sm,
        )?;
        panel(
            &bottom,
            "NVLink traffic",
            x(),
            Axis { lo: 0.0, hi: link_hi, ticks: linear_ticks(link_hi) },
            "NVLink, GB/s",
            &link,
        )?;
        root.present().map_err(|e| e.to_string())
    };
    draw().map_err(|message| PlotError { path: path.display().to_string(), message })?;
    Ok(true)
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    x: Axis,
    y: Axis,
    y_desc: &str,
    lines: &[Line],
) -> Result<(), String> {
    let caption = if lines.is_empty() { format!("{caption}: not measured") } else { caption.to_owned() };
    chart(area, (&caption, 20), (x, y), y_desc, &|y| number(*y), lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series() -> Vec<UtilizationSeries> {
        vec![
            (
                "gpu".into(),
                vec![(8, Some(1.5), None), (65536, Some(4.0), Some(2.5)), (4 << 20, Some(9.0), Some(120.0))],
            ),
            (
                "cpu".into(),
                vec![(8, Some(0.0), Some(0.0)), (65536, None, Some(3.0)), (4 << 20, Some(0.1), Some(140.0))],
            ),
            ("proxy depth 4".into(), vec![(65536, Some(0.8), None)]),
        ]
    }

    #[test]
    fn draws_both_panels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name("all-reduce"));
        assert!(plot_utilization("all-reduce, bf16, 2 GPUs", &series(), &path).unwrap());
        let svg = std::fs::read_to_string(&path).unwrap();
        for text in ["SM activity, %", "NVLink, GB/s", "proxy depth 4", "2 MiB", "all-reduce, bf16, 2 GPUs"] {
            assert!(svg.contains(text), "{text} missing");
        }
        // The modes keep plot.rs's colours: gpu red, cpu blue, proxy orange.
        for color in ["#D62728", "#1F77B4", "#FF7F0E"] {
            assert!(svg.to_ascii_uppercase().contains(color), "{color} missing");
        }
    }

    #[test]
    fn nothing_to_draw_is_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.svg");
        let empty: Vec<UtilizationSeries> = vec![("gpu".into(), vec![(8, None, None)]), ("cpu".into(), vec![])];
        assert!(!plot_utilization("x", &empty, &path).unwrap());
        assert!(!path.exists());
        // One panel only: the other says it was not measured.
        let sm_only: Vec<UtilizationSeries> = vec![("gpu".into(), vec![(8, Some(3.0), None)])];
        assert!(plot_utilization("x", &sm_only, &path).unwrap());
        assert!(std::fs::read_to_string(&path).unwrap().contains("NVLink traffic: not measured"));
    }

    #[test]
    fn colours_follow_modes_then_spares() {
        let c = colors(&series());
        assert_eq!(c[0], RGBColor(214, 39, 40));
        assert_eq!(c[1], RGBColor(31, 119, 180));
        assert_eq!(c[2], RGBColor(255, 127, 14));
        let two_gpu: Vec<UtilizationSeries> = vec![("gpu".into(), vec![]), ("gpu-ll".into(), vec![])];
        let c = colors(&two_gpu);
        assert_ne!(c[0], c[1]);
    }
}
