//! `ferrocomm bench`: the arguments (clap) and the driver that measures, prints and writes the report.
//!
//! ```text
//! ferrocomm bench --out bench                        # every op and mode, 8 B..1 GiB (a few minutes), report
//! ferrocomm bench --quick                            # the headline sizes only, table on stdout
//! ferrocomm bench --ops all-reduce --modes gpu,nccl --sizes 8KiB..256MiB:4 --anchors symm.txt --out bench
//! ferrocomm bench --from bench/data.json --anchors symm.txt --out bench   # redraw from saved data
//!
//! # the gpu mode with one process per GPU (series gpu-procs), beside the single-process gpu series:
//! ferrocomm bench --ops all-reduce --modes gpu --out single
//! ferrocomm launch -n 2 -- ferrocomm bench --ops all-reduce --merge single/data.json --out bench
//! torchrun --no-python --nproc-per-node 2 ferrocomm bench --ops all-reduce --merge single/data.json --out bench
//!
//! # the NVSHMEM path (asked for by name): one PE on its own, or one PE per process under a launcher
//! ferrocomm bench --modes nvshmem --out nvshmem-one-pe
//! ferrocomm launch -n 2 -- ferrocomm bench --modes nvshmem --merge single/data.json --out bench
//! ```
//!
//! Under a launcher (its variables set: torchrun, `ferrocomm launch`, mpirun, srun) every process runs the
//! same sweep on the team of the job's processes, one rank each: the gpu mode's collectives, reported as
//! the `gpu-procs` series. Only rank 0 prints the tables and writes the report; the other ranks measure the
//! same points (their kernels are rank 0's peers) and print one line. `--modes nvshmem` runs every
//! operation there, one PE per process (on its own the nvshmem mode is one PE, putting to itself). The
//! modes and operations that run in one process (proxy, cpu, nccl; the gpu mode's ping-pong and put) are
//! refused there with [`CliError::OneProcessOnly`]; without `--modes` and `--ops` a launched run measures
//! what it can.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Parser};
use ferrocomm_bootstrap::{BootstrapError, JobEnv};
use thiserror::Error;

use crate::anchors::{AnchorError, read_anchor_file};
use crate::backend::{BackendOpener, OpenConfig};
use crate::ferro::FerroBackends;
use crate::gpu::{driver_version, nccl_mode::nccl_version};
use crate::method::{Plan, measure, progress_bar};
use crate::model::{BenchData, Dtype, Meta, Mode, Operation, Skipped};
use crate::report::{self, ReportError, data::from_json};
use crate::sizes::{SizeError, parse_sizes};

/// Sizes of a default run.
pub const DEFAULT_SIZES: &str = "8B..1GiB";
/// Bytes one timed trial may move before its operation count shrinks (a 1 GiB point runs 4 per trial).
pub const MAX_BYTES_PER_TRIAL: u64 = 4 << 30;
/// Sizes of `--quick`: the headline sizes (anchors' and targets').
pub const QUICK_SIZES: &str = "8,64,1KiB,8KiB,64KiB,256KiB,1MiB,16MiB,256MiB";

/// A list of sizes as written on the command line ("8B..1GiB", "64KiB,1MiB").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeList(pub Vec<u64>);

fn size_list(text: &str) -> Result<SizeList, SizeError> {
    parse_sizes(text).map(SizeList)
}

/// The arguments of `ferrocomm bench` (usable as a clap subcommand: `Bench(BenchArgs)`).
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct BenchArgs {
    /// Operations to measure, comma-separated [default: all].
    #[arg(long, value_delimiter = ',', value_name = "OPS")]
    pub ops: Vec<Operation>,
    /// Modes to compare, comma-separated [default: gpu,proxy,cpu,nccl; nvshmem runs only when named].
    #[arg(long, value_delimiter = ',', value_name = "MODES")]
    pub modes: Vec<Mode>,
    /// Message sizes: sizes (8, 64KiB), ranges doubling (8B..1GiB) or with a factor (8B..1GiB:4), comma-separated
    /// [default: 8B..1GiB; --quick: a few headline sizes].
    #[arg(long, value_parser = size_list, value_name = "SIZES")]
    pub sizes: Option<SizeList>,
    /// Operations per timed trial (fewer for large messages: a trial moves at most 4 GiB)
    /// [default: 50; --quick: 20].
    #[arg(long, value_name = "N")]
    pub iters: Option<u64>,
    /// Operations run before timing each point [default: 10; --quick: 5].
    #[arg(long, value_name = "N")]
    pub warmup: Option<u64>,
    /// Timed trials per point; median, min and max are over them [default: 7; --quick: 5].
    #[arg(long, value_name = "N")]
    pub trials: Option<u32>,
    /// Proxy ring depths (descriptor slots, 1..=65536), each measured as its own series
    /// [default: 1,8,64; --quick: 8].
    #[arg(long, value_delimiter = ',', value_name = "DEPTHS", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub queue_depth: Vec<u32>,
    /// SM budgets to sweep (blocks per rank, as `Communicator::set_sm_budget` takes them), each its own
    /// gpu series (`gpu-sm16`) of the put and the collectives, beside the tuned `gpu` series [default: none].
    #[arg(long, value_delimiter = ',', value_name = "SMS", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub sm_budgets: Vec<u32>,
    /// Also measure the put, all-gather and all-to-all with every large copy through the TMA (`gpu-tma`)
    /// and with none (`gpu-lsu`), from which the report recommends `Tuning::bulk_min_bytes`.
    #[arg(long)]
    pub copy_paths: bool,
    /// Also measure the gpu series on a traced team (`gpu-traced`: trace mode on, every event recorded),
    /// and report trace mode's cost beside the targets (≤ 10 % on the ping-pong, ≤ 3 % on a 1 MiB
    /// all-reduce).
    #[arg(long)]
    pub traced: bool,
    /// Element type of the collectives.
    #[arg(long, default_value = "bf16")]
    pub dtype: Dtype,
    /// GPU ordinals to use, in rank order [default: every visible GPU]. FERROCOMM_RANKS_PER_GPU=k puts k
    /// ranks on each (k processes under a launcher, each picking its GPU by LOCAL_RANK from these).
    #[arg(long, value_delimiter = ',', value_name = "ORDINALS")]
    pub gpus: Option<Vec<usize>>,
    /// Time eager launches only, no CUDA-graph replay.
    #[arg(long)]
    pub no_graph: bool,
    /// A short sweep: fewer sizes, iterations and trials.
    #[arg(long)]
    pub quick: bool,
    /// Also record GPU and link utilization per point from NVML (SM activity, NVLink bytes): each point
    /// then runs about a second more of back-to-back trials, after 0.3 s of idle.
    #[arg(long)]
    pub utilization: bool,
    /// Output of the anchor programs in bench/anchors (`bash bench/anchors/run.sh DIR` writes DIR/*.txt and
    /// prints these arguments) to show beside the modes; repeatable. The sizes they measured join the sweep,
    /// so every anchor figure has one of ours beside it.
    #[arg(long, value_name = "FILE")]
    pub anchors: Vec<PathBuf>,
    /// GPUs the anchor scripts ran on, for their bus bandwidth [default: the GPUs measured here, else 2].
    #[arg(long, value_name = "N")]
    pub anchor_world: Option<usize>,
    /// Read the measurements from a data.json instead of measuring (to redraw a report).
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,
    /// Add the points of another run's data.json to this report, e.g. the single-process run beside one
    /// under a launcher (gpu beside gpu-procs); repeatable. A series and size both hold is an error.
    #[arg(long, value_name = "FILE")]
    pub merge: Vec<PathBuf>,
    /// Write the report folder (README.md, data.json, data.csv, plots) here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Parser)]
#[command(name = "bench", about = "GPU-initiated vs proxy vs CPU-initiated vs NCCL, with a report")]
struct Command {
    #[command(flatten)]
    args: BenchArgs,
}

/// Why `ferrocomm bench` failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CliError {
    /// The arguments do not parse (clap's message says which and why).
    #[error("{0}")]
    Args(#[from] clap::Error),
    /// An anchor file is missing or has no figures.
    #[error(transparent)]
    Anchor(#[from] AnchorError),
    /// The report could not be written.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// `--from` could not be read.
    #[error("cannot read {path}: {message} (pass a data.json written by ferrocomm bench)")]
    Data {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The launcher's variables do not describe a job (a rank or size missing or out of range).
    #[error("the launcher's variables do not describe a job: {0}")]
    Launcher(#[from] BootstrapError),
    /// Under a launcher, modes or operations that run in one process were asked for.
    #[error(
        "this process is rank {rank} of a job of {world} processes (a launcher's variables are set), where \
         ferrocomm bench runs the gpu mode's collectives with one process per GPU (the gpu-procs series: --modes \
         gpu --ops all-reduce,all-gather,all-to-all); {what} run in one process: run them without the launcher \
         (`ferrocomm bench {what} --out DIR`) and add that run's DIR/data.json to this report with --merge"
    )]
    OneProcessOnly {
        /// What was asked for, as options (`--modes proxy,cpu --ops put`).
        what: String,
        /// This process's rank.
        rank: usize,
        /// The processes of the job.
        world: usize,
    },
    /// A `--merge` file has a point of a series and size this run has too.
    #[error(
        "cannot merge {path}: it has {series} {op} at {size}, and so does this run (merge runs of different \
         series or sizes)",
        size = crate::sizes::format_size(*bytes)
    )]
    MergeOverlap {
        /// The file.
        path: PathBuf,
        /// The series both have.
        series: String,
        /// The operation.
        op: Operation,
        /// The size.
        bytes: u64,
    },
    /// No mode produced a figure and there was nothing else to report.
    #[error("nothing measured:\n{reasons}")]
    NothingMeasured {
        /// Why each mode produced nothing.
        reasons: String,
    },
}

/// The error of [`parse`]: clap's, which prints the usage and what was wrong.
pub type ArgsError = clap::Error;

/// Parses `argv` (the first item is the command's name, as in `std::env::args`).
pub fn parse<I, T>(argv: I) -> Result<BenchArgs, ArgsError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    Command::try_parse_from(argv).map(|c| c.args)
}

/// Parses `argv` and runs; `--help` prints the help and succeeds.
pub fn run<I, T>(argv: I) -> Result<(), CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
    let args = match parse(argv.clone()) {
        Ok(args) => args,
        Err(e) if matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion) => {
            print!("{e}");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let command = argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
    execute_with(&args, &mut FerroBackends::new(), &format!("ferrocomm {command}")).map(drop)
}

/// Runs `args` with every mode ([`FerroBackends`]: gpu and proxy on ferrocomm's kernels, cpu and nccl),
/// recording this process's command line: what `ferrocomm bench` does once clap has parsed
/// `Bench(BenchArgs)`.
pub fn execute(args: &BenchArgs) -> Result<BenchData, CliError> {
    execute_with(args, &mut FerroBackends::new(), &command_line(std::env::args_os()))
}

/// The command line as the report shows it: the program by its file name (`ferrocomm`, not the path it
/// was started from), then the arguments, quoted where a shell would need it.
pub fn command_line<I: IntoIterator<Item = OsString>>(argv: I) -> String {
    let mut words: Vec<String> = Vec::new();
    for (i, arg) in argv.into_iter().enumerate() {
        let arg = if i == 0 {
            let path = PathBuf::from(&arg);
            path.file_name().map_or_else(|| arg.to_string_lossy().into_owned(), |n| n.to_string_lossy().into_owned())
        } else {
            arg.to_string_lossy().into_owned()
        };
        let plain = !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_.,/:=+@%".contains(c));
        words.push(if plain { arg } else { format!("'{}'", arg.replace('\'', "'\\''")) });
    }
    words.join(" ")
}

impl BenchArgs {
    /// The plan these arguments ask for, `--quick` filling what was not given.
    pub fn plan(&self) -> Plan {
        let pick = |given: Option<u64>, full: u64, quick: u64| given.unwrap_or(if self.quick { quick } else { full });
        let sizes = match &self.sizes {
            Some(list) => list.0.clone(),
            None => parse_sizes(if self.quick { QUICK_SIZES } else { DEFAULT_SIZES }).unwrap_or_default(),
        };
        Plan {
            ops: if self.ops.is_empty() { Operation::ALL.to_vec() } else { dedup(&self.ops) },
            sizes,
            dtype: self.dtype,
            iters: pick(self.iters, 50, 20),
            warmup: pick(self.warmup, 10, 5),
            trials: self.trials.unwrap_or(if self.quick { 5 } else { 7 }),
            graph: !self.no_graph,
            max_bytes_per_trial: MAX_BYTES_PER_TRIAL,
            utilization: self.utilization,
        }
    }

    /// The modes to run, in the order given.
    pub fn modes(&self) -> Vec<Mode> {
        if self.modes.is_empty() { Mode::DEFAULT.to_vec() } else { dedup(&self.modes) }
    }

    /// The proxy depths to run.
    pub fn queue_depths(&self) -> Vec<u32> {
        match (self.queue_depth.is_empty(), self.quick) {
            (false, _) => dedup(&self.queue_depth),
            (true, true) => vec![8],
            (true, false) => vec![1, 8, 64],
        }
    }
}

fn dedup<T: PartialEq + Copy>(items: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for item in items {
        if !out.contains(item) {
            out.push(*item);
        }
    }
    out
}

/// Environment variables that change what NCCL and torch do, recorded with the run.
const ENV_NOTED: [&str; 5] = ["NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_", "CUDA_VISIBLE_DEVICES", "FERROCOMM_"];
/// ... except where a launcher's processes meet (a port of the moment).
const ENV_IGNORED: [&str; 1] = ["FERROCOMM_RENDEZVOUS"];

/// Runs `args` with the modes of `opener`, prints the tables and crossovers, writes the report when asked,
/// and returns the data. `command` is recorded in the report.
///
/// Under a launcher (see the module's documentation) only rank 0 merges, prints and writes; the other
/// ranks return what they measured.
pub fn execute_with(args: &BenchArgs, opener: &mut dyn BackendOpener, command: &str) -> Result<BenchData, CliError> {
    let job = JobEnv::from_env()?;
    let reporting = job.as_ref().is_none_or(|job| job.rank == 0);
    let mut data = match &args.from {
        Some(path) => read_data(path)?,
        None => {
            let mut plan = args.plan();
            let mut modes = args.modes();
            if let Some(job) = &job {
                refuse_one_process_only(args, job)?;
                if args.ops.is_empty() && !nvshmem_only(args) {
                    plan.ops.retain(|op| op.is_collective());
                }
                if args.modes.is_empty() {
                    modes = vec![Mode::Gpu];
                }
            }
            for path in &args.anchors {
                let rows = read_anchor_file(path, args.anchor_world.unwrap_or(2))?;
                plan.sizes.extend(rows.iter().filter(|m| plan.ops.contains(&m.op)).map(|m| m.bytes));
            }
            plan.sizes.sort_unstable();
            plan.sizes.dedup();
            measure_all(plan, args, &modes, opener, command, reporting)
        }
    };
    if let (Some(job), false) = (&job, reporting) {
        if data.measurements.is_empty() {
            return Err(nothing_measured(&skipped_lines(&data)));
        }
        eprintln!(
            "rank {} of {}: {} points measured, {} not; rank 0 prints the tables and writes the report",
            job.rank,
            job.world,
            data.measurements.len(),
            data.skipped.len()
        );
        return Ok(data);
    }
    for path in &args.merge {
        merge(&mut data, path)?;
    }
    let world = args
        .anchor_world
        .or_else(|| {
            data.measurements.iter().filter(|m| m.op.is_collective() && m.mode != Mode::Anchor).map(|m| m.world).max()
        })
        .unwrap_or(2);
    for path in &args.anchors {
        for row in read_anchor_file(path, world)? {
            // A merged run that read the same file has these rows already.
            if !data.measurements.contains(&row) {
                data.measurements.push(row);
            }
        }
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let note = format!(
            "Anchor figures read from `{name}` (collective rows that do not state their ranks: {world}, for bus \
             bandwidth)."
        );
        if !data.meta.notes.contains(&note) {
            data.meta.notes.push(note);
        }
    }
    let skipped = skipped_lines(&data);
    if data.measurements.is_empty() {
        return Err(nothing_measured(&skipped));
    }

    print!("{}", report::table::terminal_report(&data));
    for (op, lines) in crate::crossover::summary(&data) {
        println!("{op}:");
        for line in lines {
            println!("  {line}");
        }
    }
    for line in &skipped {
        eprintln!("not measured: {line}");
    }
    if let Some(dir) = &args.out {
        let files = report::write_report(dir, &data)?;
        println!("report: {} ({} files)", dir.join("README.md").display(), files.len());
    }
    Ok(data)
}

/// What was not measured, one line per series, size and reason.
fn skipped_lines(data: &BenchData) -> Vec<String> {
    report::table::skipped_rows(data)
        .into_iter()
        .map(|row| {
            let size = if row[2] == "all" { "all sizes" } else { row[2].as_str() };
            format!("{} ({}; {size}): {}", row[1], row[0], row[3])
        })
        .collect()
}

fn nothing_measured(skipped: &[String]) -> CliError {
    let reasons: Vec<String> = skipped.iter().map(|s| format!("  {s}")).collect();
    CliError::NothingMeasured { reasons: reasons.join("\n") }
}

/// Reads a data.json written by `ferrocomm bench`.
fn read_data(path: &Path) -> Result<BenchData, CliError> {
    let error = |message: String| CliError::Data { path: path.to_owned(), message };
    let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
    from_json(&text).map_err(|e| error(e.to_string()))
}

/// Whether only the nvshmem mode was asked for: under a launcher it runs every operation (one PE per
/// process), where the gpu mode's `gpu-procs` series runs the collectives only.
fn nvshmem_only(args: &BenchArgs) -> bool {
    !args.modes.is_empty() && args.modes.iter().all(|m| *m == Mode::Nvshmem)
}

/// Under a launcher: the modes and operations asked for that run in one process, as an error.
fn refuse_one_process_only(args: &BenchArgs, job: &JobEnv) -> Result<(), CliError> {
    let names = |items: Vec<String>| items.join(",");
    let modes: Vec<String> = dedup(&args.modes)
        .into_iter()
        .filter(|m| !matches!(m, Mode::Gpu | Mode::Nvshmem))
        .map(|m| m.to_string())
        .collect();
    let ops: Vec<String> = match nvshmem_only(args) {
        true => Vec::new(),
        false => dedup(&args.ops).into_iter().filter(|op| !op.is_collective()).map(|op| op.to_string()).collect(),
    };
    let mut what = Vec::new();
    if !modes.is_empty() {
        what.push(format!("--modes {}", names(modes)));
    }
    if !ops.is_empty() {
        what.push(format!("--ops {}", names(ops)));
    }
    if what.is_empty() {
        return Ok(());
    }
    Err(CliError::OneProcessOnly { what: what.join(" "), rank: job.rank, world: job.world })
}

/// Adds the points, skips and notes of the data.json at `path` to `data`, with a note naming the file.
fn merge(data: &mut BenchData, path: &Path) -> Result<(), CliError> {
    let other = read_data(path)?;
    let same = |a: &crate::model::Measurement, b: &crate::model::Measurement| {
        a.op == b.op && a.series() == b.series() && a.bytes == b.bytes && a.dtype == b.dtype
    };
    for m in other.measurements.iter().filter(|m| m.mode != Mode::Anchor) {
        if data.measurements.iter().any(|d| same(d, m)) {
            let series = m.series().to_string();
            return Err(CliError::MergeOverlap { path: path.to_owned(), series, op: m.op, bytes: m.bytes });
        }
    }
    let name = path.display().to_string();
    for m in other.measurements {
        // The same anchor file given to both runs gives the same rows: keep one.
        if !(m.mode == Mode::Anchor && data.measurements.contains(&m)) {
            data.measurements.push(m);
        }
    }
    for s in other.skipped {
        if !data.skipped.contains(&s) {
            data.skipped.push(s);
        }
    }
    let meta = &mut data.meta;
    if meta.devices.is_empty() {
        meta.devices = other.meta.devices;
    }
    meta.driver = meta.driver.take().or(other.meta.driver);
    meta.nccl = meta.nccl.take().or(other.meta.nccl);
    for note in other.meta.notes {
        if meta.notes.contains(&note) {
            continue;
        }
        let note = match note.strip_prefix("Environment: ") {
            Some(env) => format!("Environment of `{name}`: {env}"),
            None => note,
        };
        if !meta.notes.contains(&note) {
            meta.notes.push(note);
        }
    }
    let when = crate::report::readme::format_utc(other.meta.created_unix_s);
    let command = if other.meta.command.is_empty() { String::new() } else { format!(", `{}`", other.meta.command) };
    meta.notes.push(format!("Merged: the points of `{name}` (measured {when}{command})."));
    Ok(())
}

/// Opens each mode of `modes` (each variant, each proxy depth), sweeps it, and collects points, skips and
/// notes. `reporting`: whether this process shows a progress bar (rank 0 under a launcher).
fn measure_all(
    plan: Plan,
    args: &BenchArgs,
    modes: &[Mode],
    opener: &mut dyn BackendOpener,
    command: &str,
    reporting: bool,
) -> BenchData {
    let created_unix_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut data = BenchData {
        meta: Meta {
            tool: format!("ferrocomm-bench {}", env!("CARGO_PKG_VERSION")),
            created_unix_s,
            command: command.to_owned(),
            driver: driver_version(),
            ..Meta::default()
        },
        ..BenchData::default()
    };
    let mut env: Vec<String> = std::env::vars()
        .filter(|(k, _)| ENV_NOTED.iter().any(|p| k.starts_with(p)) && !ENV_IGNORED.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.sort();
    if !env.is_empty() {
        data.meta.notes.push(format!("Environment: `{}`.", env.join(" ")));
    }
    // Processes sharing a GPU run at once only under MPS: their figures mean something else without it.
    data.meta.notes.push(match ferrocomm::system::mps() {
        ferrocomm::system::Mps::Active { .. } => {
            "MPS: on (processes sharing a GPU run their kernels at once).".to_owned()
        }
        _ => "MPS: off (processes sharing a GPU take turns).".to_owned(),
    });

    let mut runs: Vec<(Mode, Option<String>, u32)> = Vec::new();
    for &mode in modes {
        for variant in opener.variants(mode) {
            match mode {
                Mode::Proxy => runs.extend(args.queue_depths().into_iter().map(|d| (mode, variant.clone(), d))),
                _ => runs.push((mode, variant, 0)),
            }
        }
        if mode == Mode::Gpu && args.copy_paths {
            runs.extend(
                crate::ferro::gpu_mode::COPY_PATHS.iter().map(|(_, label)| (mode, Some((*label).to_owned()), 0)),
            );
        }
        if mode == Mode::Gpu && args.traced {
            runs.push((mode, Some(crate::model::TRACED_LABEL.to_owned()), 0));
        }
        if mode == Mode::Gpu {
            runs.extend(
                dedup(&args.sm_budgets)
                    .into_iter()
                    .map(|sms| (mode, Some(crate::ferro::gpu_mode::budget_label(sms)), 0)),
            );
        }
    }
    let total = plan.points() * runs.len() as u64;
    let progress = if reporting { progress_bar(total) } else { indicatif::ProgressBar::hidden() };
    for (mode, variant, queue_depth) in runs {
        let config = OpenConfig { gpus: args.gpus.clone(), queue_depth, variant: variant.clone() };
        let depth = (mode == Mode::Proxy).then_some(queue_depth);
        match opener.open(mode, &config) {
            Ok(mut backend) => {
                if data.meta.devices.is_empty() {
                    data.meta.devices = backend.devices();
                }
                if mode == Mode::Nccl {
                    data.meta.nccl = nccl_version();
                }
                measure(backend.as_mut(), &plan, &progress, &mut data);
                for note in backend.notes() {
                    if !data.meta.notes.contains(&note) {
                        data.meta.notes.push(note);
                    }
                }
            }
            Err(e) => {
                progress.inc(plan.points());
                let reason = e.to_string();
                data.skipped.extend(plan.ops.iter().map(|&op| Skipped {
                    op,
                    mode,
                    queue_depth: depth,
                    label: variant.clone(),
                    bytes: None,
                    reason: reason.clone(),
                }));
            }
        }
    }
    progress.finish_and_clear();
    data
}
