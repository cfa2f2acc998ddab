//! MoE all-to-all: every rank routes `tokens` tokens of 7168 bf16 values (DeepSeek-V3's hidden size) to
//! experts on the ranks, dispatches them with an all-to-all whose per-destination counts live in device
//! memory, lets each expert scale its rows, and combines them back (the received counts become the send
//! counts). Both directions are verified against the CPU reference and timed from graph replays.
//!
//! ```sh
//! cargo run --release --example moe_alltoall
//! cargo run --release --example moe_alltoall -- --tokens 1,8,128,1024
//! cargo run --release --example moe_alltoall -- --tokens 16 --hidden 4096 --ops-per-graph 50
//! ```

use std::process::ExitCode;

use clap::Parser;
use ferrocomm::Backend;
use ferrocomm_examples::all_reduce::GraphRuns;
use ferrocomm_examples::moe::{HIDDEN, dispatch_and_combine};
use ferrocomm_examples::{ExampleError, Platform, open_team};
use ferrocomm_kernels::Communicator;

/// MoE dispatch and combine across every GPU present (or the CPU emulator), verified and timed.
#[derive(Debug, Parser)]
struct Args {
    /// Tokens per rank, comma-separated [default: 1,8,128 on GPUs; 1,4 on the emulator].
    #[arg(long, value_delimiter = ',')]
    tokens: Vec<usize>,
    /// Values per token (bf16).
    #[arg(long, default_value_t = HIDDEN)]
    hidden: usize,
    /// All-to-alls per graph [default: 20 on GPUs, 3 on the emulator].
    #[arg(long)]
    ops_per_graph: Option<usize>,
    /// Timed replays [default: 30 on GPUs, 3 on the emulator].
    #[arg(long)]
    replays: Option<usize>,
}

fn run(args: &Args) -> Result<(), ExampleError> {
    let team = open_team()?;
    print!("{}", Platform::of(&team));
    let mut comm = Communicator::new(&team)?;
    let runs = GraphRuns::for_team_with(&team, args.ops_per_graph, args.replays);
    let tokens = match (args.tokens.is_empty(), team.backend()) {
        (false, _) => args.tokens.clone(),
        (true, Backend::Cuda) => vec![1, 8, 128],
        (true, Backend::Emulator) => vec![1, 4],
    };
    println!("MoE dispatch + combine (top-1 routing), per-op time from graph replays of {} ops:", runs.ops_per_graph);
    for (i, &n) in tokens.iter().enumerate() {
        let result = dispatch_and_combine(&mut comm, n, args.hidden, runs, i as u64 + 1)?;
        for line in result.lines() {
            println!("  {line}");
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
