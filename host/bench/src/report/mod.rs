//! Output: terminal tables, JSON and CSV data, SVG plots, and the report folder that holds them all.
//!
//! A report folder (`bench/` in the repository) has `README.md` (headline table, crossover summary,
//! plots and tables), `data.json`, `data.csv`, and up to three plots per operation (`<op>-latency.svg`,
//! `<op>-isolated.svg`, `<op>-bandwidth.svg`), and `tuning.txt`, the recommendation from the crossovers.

pub mod data;
pub mod plot;
pub mod readme;
pub mod table;
pub mod trace_overhead;
pub mod utilization_plot;

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::model::BenchData;
use plot::{PlotError, PlotKind};

/// A report that could not be written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReportError {
    /// A file or folder could not be written or read.
    #[error("cannot write {path}: {source} (check that the folder is writable)")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The data could not be turned into JSON.
    #[error("cannot encode the data as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// The recommendation a report folder holds ([`crate::recommend::tuning_file`]), when there is one.
pub const TUNING_FILE: &str = "tuning.txt";

fn write(path: PathBuf, contents: &str) -> Result<PathBuf, ReportError> {
    std::fs::write(&path, contents).map_err(|source| ReportError::Io { path: path.clone(), source })?;
    Ok(path)
}

/// Writes the report folder `dir` (created if missing; files of the same names are replaced) and
/// returns the files written.
pub fn write_report(dir: &Path, data: &BenchData) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Io { path: dir.to_owned(), source })?;
    let mut files = vec![
        write(dir.join("data.json"), &(data::to_json(data)? + "\n"))?,
        write(dir.join("data.csv"), &data::to_csv(data))?,
    ];
    let mut plots = Vec::new();
    for op in data.operations() {
        for kind in [PlotKind::Latency, PlotKind::Isolated, PlotKind::Bandwidth] {
            let name = kind.file_name(op);
            let path = dir.join(&name);
            if plot::plot(data, op, kind, &path)? {
                plots.push(name);
                files.push(path);
            }
        }
    }
    if table::has_utilization(data) {
        for op in data.operations() {
            let series: Vec<utilization_plot::UtilizationSeries> = data
                .series(op)
                .into_iter()
                .map(|s| {
                    let points = data
                        .points(op, &s)
                        .iter()
                        .filter_map(|m| {
                            let u = m.utilization.as_ref()?;
                            let link = u.nvlink_tx_gbps().zip(u.nvlink_rx_gbps()).map(|(t, r)| t + r);
                            Some((m.bytes, u.sm_activity_pct, link))
                        })
                        .collect();
                    (s.to_string(), points)
                })
                .filter(|(_, points): &(String, Vec<_>)| !points.is_empty())
                .collect();
            let name = utilization_plot::file_name(op.name());
            let path = dir.join(&name);
            let title = format!("{}: utilization", table::caption(data, op));
            if utilization_plot::plot_utilization(&title, &series, &path)? {
                plots.push(name);
                files.push(path);
            }
        }
    }
    match crate::recommend::tuning_file(data) {
        Some(text) => files.push(write(dir.join(TUNING_FILE), &text)?),
        // A redrawn report must not keep an earlier run's recommendation.
        None => match std::fs::remove_file(dir.join(TUNING_FILE)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(ReportError::Io { path: dir.join(TUNING_FILE), source: e });
            }
            _ => {}
        },
    }
    files.push(write(dir.join("README.md"), &readme::readme(data, &plots))?);
    Ok(files)
}
