//! The tensor-parallel decode step — `out = rmsnorm(all-reduce(x[tokens, K/world] · W[K/world, H]) +
//! residual) · gamma` in bf16 — verified and timed from CUDA-graph replays: the GEMV alone, with the HBM
//! bandwidth it reaches, then the whole step in two kernels (GEMV, then the all-reduce fused with the
//! residual and the norm) and in one (each block pushes its finished tile).
//!
//! ```sh
//! cargo run --release --example tp_decode
//! cargo run --release --example tp_decode -- --tokens 1,4,16 --hidden 8192,7168
//! ```

use std::process::ExitCode;

use clap::Parser;
use ferrocomm::Backend;
use ferrocomm_examples::all_reduce::GraphRuns;
use ferrocomm_examples::tp_decode::{gemv, step};
use ferrocomm_examples::{ExampleError, Platform, open_team};
use ferrocomm_kernels::{Communicator, TpShape, TpVariant};

/// The split-K GEMV of tensor-parallel decode on every GPU present (or the CPU emulator).
#[derive(Debug, Parser)]
struct Args {
    /// Tokens per step, comma-separated (1 ..= 16).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16])]
    tokens: Vec<usize>,
    /// Hidden sizes (H = K), comma-separated [default: 8192,7168 on GPUs; 264 on the emulator].
    #[arg(long, value_delimiter = ',')]
    hidden: Vec<usize>,
}

fn run(args: &Args) -> Result<(), ExampleError> {
    let team = open_team()?;
    print!("{}", Platform::of(&team));
    let mut comm = Communicator::new(&team)?;
    let runs = GraphRuns::for_team(&team);
    let hidden = match (args.hidden.is_empty(), team.backend()) {
        (false, _) => args.hidden.clone(),
        (true, Backend::Cuda) => vec![8192, 7168],
        (true, Backend::Emulator) => vec![264],
    };
    println!("tensor-parallel GEMV (H = K, bf16, f32 accumulation), time per GEMV from graph replays:");
    for (i, &h) in hidden.iter().enumerate() {
        for &tokens in &args.tokens {
            let shape = TpShape { tokens, hidden: h, k: h };
            println!("  {}", gemv(&mut comm, shape, runs, i as u64)?.line());
        }
    }
    println!("the whole step (GEMV, all-reduce, residual, RMSNorm), time per step from graph replays:");
    for (i, &h) in hidden.iter().enumerate() {
        for &tokens in &args.tokens {
            let shape = TpShape { tokens, hidden: h, k: h };
            for variant in [TpVariant::ThreeKernels, TpVariant::TwoKernels, TpVariant::Fused] {
                println!("  {}", step(&mut comm, shape, variant, runs, i as u64)?.line());
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
