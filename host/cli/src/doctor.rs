//! `ferrocomm doctor`: what this machine offers ferrocomm — the driver and its CUDA version, every GPU, the
//! peer-access / NVLink matrix, a PTX JIT smoke test per GPU, whether ptxas is found, what the
//! communication library embeds (SASS or PTX only) and what each GPU loads of it, a cold start: a team's
//! creation and its first all-reduce, timed, whether MPS serves this process, and NVSHMEM: found or not,
//! its release, its transports (and which of them cannot load here) and heap.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use ferrocomm::nvshmem::{self, NvshmemInfo};
use ferrocomm::system::{self, BINDINGS_VERSION, DriverInfo, GpuInfo, Link};
use ferrocomm::{Backend, ModuleImage, SymBuffer, Team};
use ferrocomm_builder::ptxas::{PtxasLocation, find_ptxas};
use ferrocomm_device::bf16;
use ferrocomm_kernels::{Communicator, Op};

/// The elements of the cold start's all-reduce: 1 MiB of bf16, a size every algorithm threshold puts on
/// the one-shot, so the measured first call loads the library and runs one collective.
const COLD_START_ELEMENTS: usize = 1 << 19;

/// A team's creation and its first all-reduce, from a process that had loaded no kernels yet.
#[derive(Debug, Clone, Copy)]
pub struct ColdStart {
    /// `Team::build` on GPU 0 (two ranks, on two GPUs when there are two).
    pub team: Duration,
    /// From the team's creation to the first all-reduce's completion: the library's module loads (SASS or
    /// a PTX JIT) and the collective itself.
    pub first_all_reduce: Duration,
    /// Whether the driver's JIT cache was off (`CUDA_CACHE_DISABLE=1`), so that a PTX load compiled for real.
    pub jit_cache_disabled: bool,
}

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
    /// The compute capabilities the communication library embeds SASS for (empty: PTX only).
    pub library_sass: Vec<u32>,
    /// Per GPU: what it loads of the communication library.
    pub library_image: Vec<Result<ModuleImage, String>>,
    /// A team's creation and first all-reduce, or why it failed.
    pub cold_start: Result<ColdStart, String>,
    /// NVSHMEM's host library, or why it cannot be loaded (not a problem: only teams that reach other nodes
    /// need it).
    pub nvshmem: Result<NvshmemInfo, String>,
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
        for (gpu, image) in self.library_image.iter().enumerate() {
            if let Err(e) = image {
                problems.push(format!("the communication library on GPU {gpu}: {e}"));
            }
        }
        if let Err(e) = &self.cold_start {
            problems.push(format!("cold start: {e}"));
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
    // Before anything loads the library, so that the cold start is one.
    let cold_start = cold_start().map_err(|e| e.to_string());
    let jit = (0..gpus.len()).map(|g| system::jit_smoke_test(g).map_err(|e| e.to_string())).collect();
    let library = &ferrocomm_kernels::__FERROCOMM_MODULE;
    let library_image =
        gpus.iter().map(|g| library.image_for(g.compute_capability).map_err(|e| e.to_string())).collect();
    Ok(Report {
        driver,
        gpus,
        links,
        jit,
        ptxas: find_ptxas(),
        library_sass: library.sass_arches(),
        library_image,
        cold_start,
        nvshmem: nvshmem::probe().map_err(|e| e.to_string()),
    })
}

/// Creates a team of two ranks (on GPU 0, or GPUs 0 and 1) and runs one all-reduce, timing both.
pub fn cold_start() -> Result<ColdStart, ferrocomm::Error> {
    let jit_cache_disabled = std::env::var("CUDA_CACHE_DISABLE").is_ok_and(|v| v == "1");
    let started = Instant::now();
    let team = Team::builder().single_process().backend(Backend::Cuda).world(2).build()?;
    let team_time = started.elapsed();
    let created = Instant::now();
    let mut comm = Communicator::new(&team).map_err(library_error)?;
    let mut buf = SymBuffer::<bf16>::new(&team, COLD_START_ELEMENTS)?;
    comm.all_reduce(&mut buf, Op::Sum).map_err(library_error)?.wait()?;
    Ok(ColdStart { team: team_time, first_all_reduce: created.elapsed(), jit_cache_disabled })
}

/// The library's error as the runtime's, for one `?` in [`cold_start`].
fn library_error(e: ferrocomm_kernels::CommError) -> ferrocomm::Error {
    ferrocomm::Error::TeamConfig { reason: format!("the communication library: {e}") }
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
    match report.library_sass.as_slice() {
        [] => writeln!(
            out,
            "communication library: PTX only (built without ptxas): each GPU JIT-compiles it when it first loads"
        )?,
        sass => {
            let arches: Vec<String> = sass.iter().map(|cc| format!("sm_{cc}")).collect();
            writeln!(out, "communication library: SASS for {} and PTX", arches.join(", "))?
        }
    }
    for (gpu, image) in report.library_image.iter().enumerate() {
        match image {
            Ok(ModuleImage::Sass { cc, .. }) => writeln!(out, "  GPU {gpu} loads its sm_{cc} SASS: no JIT")?,
            Ok(ModuleImage::Ptx { cc, .. }) => writeln!(
                out,
                "  GPU {gpu} loads its sm_{cc} PTX: JIT-compiled at first load (then cached by the driver)"
            )?,
            Err(e) => writeln!(out, "  GPU {gpu}: FAILED: {e}")?,
        }
    }
    match &report.cold_start {
        Ok(c) => writeln!(
            out,
            "cold start: a team of 2 ranks in {:.0} ms, its first all-reduce done {:.0} ms later ({:.0} ms in all){}",
            c.team.as_secs_f64() * 1e3,
            c.first_all_reduce.as_secs_f64() * 1e3,
            (c.team + c.first_all_reduce).as_secs_f64() * 1e3,
            if c.jit_cache_disabled {
                " (JIT cache off)"
            } else {
                " (CUDA_CACHE_DISABLE=1 times it with an empty JIT cache)"
            }
        )?,
        Err(e) => writeln!(out, "cold start: FAILED: {e}")?,
    }
    match &report.ptxas {
        PtxasLocation::Found { path, how } => writeln!(out, "ptxas: {} (found via {how})", path.display())?,
        PtxasLocation::Missing => writeln!(
            out,
            "ptxas: not found (kernel builds are not validated; `pip install nvidia-cuda-nvcc==13.0.88` or set \
             FERROCOMM_PTXAS)"
        )?,
    }
    writeln!(out, "MPS: {}", system::mps())?;
    render_nvshmem(&report.nvshmem, out)?;
    let problems = report.problems();
    if problems.is_empty() {
        writeln!(out, "ferrocomm is ready to run on {} GPU(s)", report.gpus.len())
    } else {
        writeln!(out, "{} problem(s) found", problems.len())
    }
}

/// Writes the NVSHMEM part of the report: the library, its release, the transports that reach other nodes,
/// the bootstrap, and the symmetric heap each PE gets.
pub fn render_nvshmem(found: &Result<NvshmemInfo, String>, out: &mut dyn Write) -> io::Result<()> {
    let info = match found {
        Ok(info) => info,
        Err(e) => return writeln!(out, "NVSHMEM: not available, so kernels reach the GPUs of this node only: {e}"),
    };
    let pinned = if info.version == nvshmem::PINNED_VERSION {
        String::new()
    } else {
        format!(" (kernels are built against {}: rebuild them against {})", nvshmem::PINNED_VERSION, info.version)
    };
    writeln!(
        out,
        "NVSHMEM: {}{pinned}, OpenSHMEM {}.{}, at {}",
        info.version,
        info.openshmem.0,
        info.openshmem.1,
        info.library.display()
    )?;
    let list = |v: &[String]| if v.is_empty() { "none found".to_owned() } else { v.join(", ") };
    let remote = match &info.remote_transport {
        Some(t) => format!("{} = {t}", nvshmem::REMOTE_TRANSPORT_ENV),
        None => format!("{} unset: NVSHMEM's default, ibrc", nvshmem::REMOTE_TRANSPORT_ENV),
    };
    writeln!(out, "  transports: {} ({remote})", list(&info.transports))?;
    for (name, why) in &info.unloadable {
        writeln!(out, "  transport {name} cannot load here: {why}")?;
    }
    let uid = if info.bootstraps.iter().any(|b| b == "uid") { "uid: found" } else { "uid: MISSING" };
    writeln!(out, "  bootstraps: {} ({uid}; ferrocomm initialises with it)", list(&info.bootstraps))?;
    let gib = info.heap_bytes as f64 / (1u64 << 30) as f64;
    let from = if info.heap_from_env {
        format!("from {}", nvshmem::SYMMETRIC_SIZE_ENV)
    } else {
        format!("NVSHMEM's default; {} sets it", nvshmem::SYMMETRIC_SIZE_ENV)
    };
    writeln!(out, "  symmetric heap: {gib:.1} GiB per PE at start ({from}; it grows up to {})", nvshmem::MAX_MEMORY_ENV)
}

/// `ferrocomm doctor`: prints the report to `out`. `Err` carries the one sentence to print when the
/// machine cannot run ferrocomm's GPU path at all, or lists the problems found.
pub fn run(out: &mut dyn Write) -> Result<Report, String> {
    let report = match examine() {
        Ok(report) => report,
        Err(e) => {
            // NVSHMEM's part needs no GPU: a build machine learns whether its kernels can be run across nodes.
            let _ = render_nvshmem(&nvshmem::probe().map_err(|e| e.to_string()), out);
            return Err(e.to_string());
        }
    };
    render(&report, out).map_err(|e| format!("could not write the report: {e}"))?;
    let problems = report.problems();
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(report)
}
