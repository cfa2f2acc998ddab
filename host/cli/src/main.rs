//! `ferrocomm`: the command-line tool. Each subcommand lives in its own module of the `ferrocomm_cli` library.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use ferrocomm_cli::{doctor, launch, trace};

/// ferrocomm: GPU-initiated communication kernels in Rust.
#[derive(Debug, Parser)]
#[command(name = "ferrocomm", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Checks the driver, the GPUs, peer access / NVLink, PTX JIT and ptxas.
    Doctor,
    /// Measures gpu / proxy / cpu / nccl modes over sizes: tables, JSON, CSV, SVG plots, a report folder.
    Bench(Box<ferrocomm_bench::cli::BenchArgs>),
    /// Starts N processes of a program with torchrun's environment (RANK, WORLD_SIZE, ...), without torch.
    Launch(launch::LaunchArgs),
    /// Sums up a trace of trace mode (FERROCOMM_TRACE=1): per-rank timeline, waiting vs moving data, bytes
    /// to each peer; `--svg` draws the timeline.
    Trace(trace::TraceArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Doctor => match doctor::run(&mut std::io::stdout().lock()) {
            Ok(_) => ExitCode::SUCCESS,
            Err(sentence) => {
                eprintln!("ferrocomm doctor: {sentence}");
                ExitCode::FAILURE
            }
        },
        Command::Bench(args) => match ferrocomm_bench::cli::execute(&args) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ferrocomm bench: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Launch(args) => ExitCode::from(launch::run(&args)),
        Command::Trace(args) => match trace::run(&args, &mut std::io::stdout().lock()) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ferrocomm trace: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
