//! One process per rank: every collective, checked by every process against the CPU reference, one
//! `verified` line per check. Start it with a launcher, which gives each process its rank:
//!
//! ```sh
//! cargo build --release --example multiprocess -p ferrocomm-examples
//! cargo run --release -p ferrocomm-cli -- launch -n 4 --emulator -- target/release/examples/multiprocess
//! torchrun --nproc-per-node 2 target/release/examples/multiprocess     # on GPUs
//! ```
//!
//! Without a launcher it runs as one process with every rank (what `Team::from_env` gives). The code is
//! `ferrocomm_examples::multiprocess` (examples/src/multiprocess.rs).

use std::process::ExitCode;

use ferrocomm_examples::multiprocess::run_multiprocess;
use ferrocomm_examples::{Platform, open_team};

fn main() -> ExitCode {
    let team = match open_team() {
        Ok(team) => team,
        Err(e) => {
            eprintln!("error: no team to run on: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ranks = team.local_ranks();
    let who = match ranks.as_slice() {
        [one] if team.spans_processes() => format!("rank {one} of {} processes", team.world()),
        _ => format!("ranks {ranks:?} in one process"),
    };
    if ranks.first() == Some(&0) {
        print!("{}", Platform::of(&team));
    }
    let mut checks = 0;
    match run_multiprocess(&team, |what| {
        checks += 1;
        println!("verified ({who}): {what}");
    }) {
        Ok(()) => {
            println!("{who}: all {checks} checks match the CPU reference");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error ({who}): {e}");
            ExitCode::FAILURE
        }
    }
}
