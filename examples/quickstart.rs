//! Quickstart: the README's main job. Opens a team on every GPU present — two ranks sharing the GPU when
//! there is one, the CPU emulator with two ranks when there is none — says which, runs sum all-reduces of a
//! few bf16 and f32 sizes and a ping-pong on both flag protocols, checks every result against the CPU
//! reference, and prints the latency: per all-reduce from CUDA-graph replays, one way for the ping-pong.
//! A failed check prints the rank and element and exits with status 1.
//!
//! ```sh
//! cargo run --release --example quickstart
//! FERROCOMM_BACKEND=emulator cargo run --release --example quickstart   # the CPU emulator, even with GPUs
//! FERROCOMM_WORLD=4 FERROCOMM_BACKEND=emulator cargo run --release --example quickstart
//! ```
//!
//! The code is `ferrocomm_examples::run_quickstart` (examples/src/quickstart.rs); the tests run it on the
//! emulator.

use std::process::ExitCode;

use ferrocomm_examples::{Platform, open_team, run_quickstart};

fn main() -> ExitCode {
    let team = match open_team() {
        Ok(team) => team,
        Err(e) => {
            eprintln!("error: no team to run on: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", Platform::of(&team));
    match run_quickstart(&team) {
        Ok(report) => {
            print!("{report}");
            println!("all results match the CPU reference");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
