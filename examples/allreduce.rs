//! All-reduce sweep: sizes, element types and reductions from the command line, each size verified against
//! the CPU reference (after a direct call and after the timed graph replays) and timed per operation from
//! CUDA-graph replays, with the bus bandwidth NCCL's tests report.
//!
//! ```sh
//! cargo run --release --example allreduce
//! cargo run --release --example allreduce -- --dtype bf16,f32 --sizes 8K,64K,1M,256M --op sum,max
//! cargo run --release --example allreduce -- --algorithm two-shot --sizes 1M --ops-per-graph 50
//! ```

use std::mem::size_of;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use ferrocomm::{Backend, Team};
use ferrocomm_device::{bf16, f16};
use ferrocomm_examples::all_reduce::{GraphRuns, all_reduce};
use ferrocomm_examples::timing::parse_bytes;
use ferrocomm_examples::{ExampleError, Platform, open_team};
use ferrocomm_kernels::{Algorithm, Communicator, Op};

/// Sum / max / min all-reduce across every GPU present (or the CPU emulator), verified and timed.
#[derive(Debug, Parser)]
struct Args {
    /// Element types, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Dtype::Bf16])]
    dtype: Vec<Dtype>,
    /// Bytes per rank, comma-separated, with K/M/G suffixes [default: 8K,64K,256K,1M,16M,256M on GPUs;
    /// 200,1000,6000 on the emulator].
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes)]
    sizes: Vec<usize>,
    /// Reductions, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Reduction::Sum])]
    op: Vec<Reduction>,
    /// The algorithm; `auto` lets the communicator choose by size.
    #[arg(long, value_enum, default_value_t = Choice::Auto)]
    algorithm: Choice,
    /// All-reduces per graph [default: 20 on GPUs, 3 on the emulator].
    #[arg(long)]
    ops_per_graph: Option<usize>,
    /// Timed replays [default: 30 on GPUs, 3 on the emulator].
    #[arg(long)]
    replays: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Dtype {
    Bf16,
    F16,
    F32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Reduction {
    Sum,
    Max,
    Min,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Choice {
    Auto,
    Ll,
    OneShot,
    TwoShot,
}

fn default_sizes(team: &Team) -> Vec<usize> {
    match team.backend() {
        Backend::Cuda => vec![8 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 256 << 20],
        Backend::Emulator => vec![200, 1000, 6000],
    }
}

fn dtype_bytes(dtype: Dtype) -> usize {
    match dtype {
        Dtype::Bf16 => size_of::<bf16>(),
        Dtype::F16 => size_of::<f16>(),
        Dtype::F32 => size_of::<f32>(),
    }
}

/// Elements of `dtype` in `bytes`, which must divide evenly.
fn elements(bytes: usize, dtype: Dtype) -> Result<usize, ExampleError> {
    let elem = dtype_bytes(dtype);
    if !bytes.is_multiple_of(elem) {
        return Err(ExampleError::BadArgument(format!(
            "{bytes} bytes is not a whole number of {dtype:?} elements ({elem} bytes each); choose a multiple of {elem}"
        )));
    }
    Ok(bytes / elem)
}

fn run(args: &Args) -> Result<(), ExampleError> {
    let team = open_team()?;
    print!("{}", Platform::of(&team));
    let mut comm = Communicator::new(&team)?;
    let runs = GraphRuns::for_team_with(&team, args.ops_per_graph, args.replays);
    let sizes = if args.sizes.is_empty() { default_sizes(&team) } else { args.sizes.clone() };
    // Refuse a size that is no whole number of elements before running anything.
    for &dtype in &args.dtype {
        for &bytes in &sizes {
            elements(bytes, dtype)?;
        }
    }
    let algorithm = match args.algorithm {
        Choice::Auto => None,
        Choice::Ll => Some(Algorithm::LlOneShot),
        Choice::OneShot => Some(Algorithm::OneShot),
        Choice::TwoShot => Some(Algorithm::TwoShot),
    };
    println!("all-reduce, time per op from graph replays of {} ops:", runs.ops_per_graph);
    let mut seed = 0;
    for &dtype in &args.dtype {
        for &reduction in &args.op {
            let op = match reduction {
                Reduction::Sum => Op::Sum,
                Reduction::Max => Op::Max,
                Reduction::Min => Op::Min,
            };
            for &bytes in &sizes {
                seed += 1;
                let n = elements(bytes, dtype)?;
                let result = match dtype {
                    Dtype::Bf16 => all_reduce::<bf16>(&mut comm, n, op, algorithm, runs, seed)?,
                    Dtype::F16 => all_reduce::<f16>(&mut comm, n, op, algorithm, runs, seed)?,
                    Dtype::F32 => all_reduce::<f32>(&mut comm, n, op, algorithm, runs, seed)?,
                };
                println!("  {}", result.line());
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
