//! `ferrocomm doctor`: what this machine offers ferrocomm — the driver and its CUDA version, every GPU, the
//! peer-access / NVLink matrix, a PTX JIT smoke test per GPU, and whether ptxas is found.

use std::io::{self, Write};
use std::time::Duration;

use ferrocomm::system::{self, BINDINGS_VERSION, DriverInfo, GpuInfo, Link};
use ferrocomm_builder::ptxas::{PtxasLocation, find_ptxas};

/// Everything the doctor found.
#[derive(Debug)]
pub struct Report {
    /// The driver.
    pub driver: DriverInfo,
    /// Every GPU, by ordinal.
    pub gpus: Vec<GpuInfo>,
    /// `links[a][b]`: how GPU `a` reaches GPU `b` (`None` where the query failed).
    pub links: Vec<Vec<Result<Link, String>>>,
    /// Per GPU: how long loading and running the smoke kernel took, or why it failed.
    pub jit: Vec<Result<Duration, String>>,
    /// Where ptxas is.
    pub ptxas: PtxasLocation,
}

impl Report {
    /// What failed: GPU queries and smoke tests (a missing ptxas is not a failure: it only validates builds).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (a, row) in self.links.iter().enumerate() {
            for (b, link) in row.iter().enumerate() {
                if let Err(e) = link {
                    problems.push(format!("peer query GPU {a} -> GPU {b}: {e}"));
                }
            }
        }
        for (gpu, jit) in self.jit.iter().enumerate() {
            if let Err(e) = jit {
                problems.push(format!("PTX JIT smoke test on GPU {gpu}: {e}"));
            }
        }
        problems
    }
}

/// Examines the machine. Fails with one sentence ([`ferrocomm::Error::NoDriver`], [`ferrocomm::Error::NoGpu`],
/// ...) when there is no usable driver or GPU.
pub fn examine() -> Result<Report, ferrocomm::Error> {
    let driver = system::driver()?;
    let gpus = system::gpus()?;
    let links = (0..gpus.len())
        .map(|a| (0..gpus.len()).map(|b| system::link(a, b).map_err(|e| e.to_string())).collect())
        .collect();
    let jit = (0..gpus.len()).map(|g| system::jit_smoke_test(g).map_err(|e| e.to_string())).collect();
    Ok(Report { driver, gpus, links, jit, ptxas: find_ptxas() })
}

/// Writes the report in the terminal's format.
pub fn render(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "driver: supports CUDA {} (ferrocomm's bindings target CUDA {BINDINGS_VERSION})",
        report.driver.version_string()
    )?;
    writeln!(out, "GPUs: {}", report.gpus.len())?;
    for g in &report.gpus {
        writeln!(
            out,
            "  GPU {}: {}, sm_{}, {:.1} GiB, {} SMs, PCI {}",
            g.ordinal,
            g.name,
            g.compute_capability,
            g.memory_bytes as f64 / (1u64 << 30) as f64,
            g.multiprocessors,
            g.pci_bus_id
        )?;
    }
    if report.gpus.len() > 1 {
        writeln!(out, "peer access (row GPU reads column GPU's memory):")?;
        write!(out, "{:8}", "")?;
        for b in 0..report.gpus.len() {
            write!(out, "{:>8}", format!("GPU {b}"))?;
        }
        writeln!(out)?;
        for (a, row) in report.links.iter().enumerate() {
            write!(out, "{:8}", format!("  GPU {a}"))?;
            for (b, link) in row.iter().enumerate() {
                let cell = match link {
                    _ if a == b => "-".to_owned(),
                    Ok(link) => link.to_string(),
                    Err(_) => "error".to_owned(),
                };
                write!(out, "{cell:>8}")?;
            }
            writeln!(out)?;
        }
    }
    for (gpu, jit) in report.jit.iter().enumerate() {
        match jit {
            Ok(t) => writeln!(out, "PTX JIT smoke test on GPU {gpu}: ok ({:.1} ms)", t.as_secs_f64() * 1e3)?,
            Err(e) => writeln!(out, "PTX JIT smoke test on GPU {gpu}: FAILED: {e}")?,
        }
    }
    match &report.ptxas {
        PtxasLocation::Found { path, how } => writeln!(out, "ptxas: {} (found via {how})", path.display())?,
        PtxasLocation::Missing => writeln!(
            out,
            "ptxas: not found (kernel builds are not validated; `pip install nvidia-cuda-nvcc==13.0.88` or set \
             FERROCOMM_PTXAS)"
        )?,
    }
    let problems = report.problems();
    if problems.is_empty() {
        writeln!(out, "ferrocomm is ready to run on {} GPU(s)", report.gpus.len())
    } else {
        writeln!(out, "{} problem(s) found", problems.len())
    }
}

/// `ferrocomm doctor`: prints the report to `out`. `Err` carries the one sentence to print when the
/// machine cannot run ferrocomm's GPU path at all, or lists the problems found.
pub fn run(out: &mut dyn Write) -> Result<Report, String> {
    let report = examine().map_err(|e| e.to_string())?;
    render(&report, out).map_err(|e| format!("could not write the report: {e}"))?;
    let problems = report.problems();
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(report)
}
