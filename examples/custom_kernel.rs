//! A kernels crate of one's own, launched. `examples/custom_kernel` is the crate an author starts with: a
//! `build.rs` calling `ferrocomm_builder::build_script()`, two `#[kernel]`s written with the device library
//! (`scaled_put`: every rank stores `scale * src` into the next rank's inbox and raises a release signal;
//! `accumulate`: adds the inbox into a local sum) and `ferrocomm::kernel_module!()`. This program launches
//! them through their typed launchers on every GPU present or on the CPU emulator — once directly, then as
//! a CUDA graph of the ring step replayed with new inputs — and checks every result against the crate's CPU
//! reference.
//!
//! ```sh
//! cargo run --release --example custom_kernel
//! cargo run --release --example custom_kernel -- --len 100000 --steps 50
//! ```
//!
//! The launches are in examples/src/custom.rs; the kernels in examples/custom_kernel/src/lib.rs.

use std::process::ExitCode;

use clap::Parser;
use ferrocomm_examples::custom::{CustomPlan, run_custom_kernel};
use ferrocomm_examples::{ExampleError, Platform, open_team};

/// Launches the custom-kernel crate's ring step on every GPU present (or the CPU emulator) and checks it.
#[derive(Debug, Parser)]
struct Args {
    /// Elements per rank [default: 1048576 on GPUs, 1000 on the emulator].
    #[arg(long)]
    len: Option<usize>,
    /// Graph replays with new inputs, each verified [default: 20 on GPUs, 4 on the emulator].
    #[arg(long)]
    steps: Option<usize>,
    /// The factor each rank applies to the vector it sends.
    #[arg(long, default_value_t = 0.5)]
    scale: f32,
}

fn run(args: &Args) -> Result<(), ExampleError> {
    let team = open_team()?;
    print!("{}", Platform::of(&team));
    let mut plan = match args.len {
        Some(len) => CustomPlan::with_len(&team, len),
        None => CustomPlan::for_team(&team),
    };
    plan.steps = args.steps.unwrap_or(plan.steps);
    plan.scale = args.scale;
    let report = run_custom_kernel(&team, &plan)?;
    let cfg = report.plan.launch;
    println!(
        "custom-kernel ring step (scaled_put + accumulate), {} f32 per rank, grid {} x {} threads:",
        plan.len,
        cfg.blocks(),
        cfg.threads_per_block()
    );
    println!("  scaled_put: every rank's inbox holds scale x its predecessor's vector   verified");
    println!("  accumulate after {} graph replays with new inputs                          verified", plan.steps);
    let t = report.step;
    println!(
        "  {:.2} us per ring step (median of {} graph replays; min {:.2})",
        t.median_us(),
        t.replays,
        t.min.as_secs_f64() * 1e6
    );
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
