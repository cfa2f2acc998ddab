//! What trace mode costs: ping-pongs (LL and release/acquire, 8 B; kernel time, against the ≤ 10 % target)
//! and a 1 MiB bf16 all-reduce (host time per graph replay, the rings' collection included) on a team
//! without tracing, then on a traced team. `ferrocomm bench --traced` measures every operation's kernel time
//! on the device. The traced team writes its trace when it is dropped (`FERROCOMM_TRACE_DIR`).
//!
//! ```sh
//! cargo run --release --example trace_overhead
//! ```

use std::process::ExitCode;

use ferrocomm::Team;
use ferrocomm_examples::trace_overhead::{OverheadPlan, trace_overhead};
use ferrocomm_examples::{Platform, open_team};

fn main() -> ExitCode {
    let probe = match open_team() {
        Ok(team) => team,
        Err(e) => {
            eprintln!("error: no team to run on: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", Platform::of(&probe));
    let (backend, world) = (probe.backend(), probe.world());
    drop(probe);
    let plan = OverheadPlan::for_backend(backend);
    let make = |traced: bool| Team::builder().backend(backend).world(world).trace(traced).build();
    match trace_overhead(make, &plan) {
        Ok(rows) => {
            println!("trace mode overhead (untraced -> traced):");
            for row in rows {
                println!("  {}", row.line());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
