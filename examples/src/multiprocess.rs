//! Every collective in a team whose ranks are separate processes (one per GPU, or per emulated GPU):
//! all-reduce by each algorithm and element type, reduce-scatter, all-gather, broadcast, all-to-all, put,
//! get, the barrier, a CUDA graph of all-reduces, and a kernels crate of one's own. Each process checks its
//! own ranks against the CPU reference (every process knows every rank's input) and reports one line per
//! check. The same code runs in a team of one process, where it checks every rank.

use ferrocomm::{Backend, Team};
use ferrocomm_device::{bf16, f16};
use ferrocomm_kernels::verify;
use ferrocomm_kernels::{Algorithm, Communicator, Op, Route};

use crate::custom::{CustomPlan, run_custom_kernel};
use crate::error::ExampleError;

/// Element counts per rank: empty, one, odd, and sizes past one block's share (on GPUs, past the LL and
/// one-shot thresholds too).
pub fn sizes(team: &Team) -> Vec<usize> {
    match team.backend() {
        Backend::Cuda => vec![0, 1, 4099, 1 << 20],
        Backend::Emulator => vec![0, 1, 33, 1000],
    }
}

/// Runs every check on `team`, calling `verified` with a description of each that passed; stops at the
/// first failure, which names the rank and element.
pub fn run_multiprocess(team: &Team, mut verified: impl FnMut(&str)) -> Result<(), ExampleError> {
    let world = team.world();
    if world < 2 {
        return Err(ExampleError::BadArgument(format!("the team has {world} rank; start at least 2 processes")));
    }
    let mut comm = Communicator::new(team)?;
    let mut ok = |what: String, result: Result<(), verify::VerifyError>| -> Result<(), ExampleError> {
        result?;
        verified(&what);
        Ok(())
    };
    for (i, &len) in sizes(team).iter().enumerate() {
        let seed = 10 * i as u64;
        // Every algorithm the size allows: the default one and the ones meant for larger messages.
        let all = [Algorithm::LlOneShot, Algorithm::OneShot, Algorithm::TwoShot];
        let first = all.iter().position(|&a| a == comm.all_reduce_algorithm(len * 4)).unwrap_or(0);
        for algorithm in all[first..].iter().copied() {
            let what = format!("all-reduce f32 sum x {len} ({algorithm:?})");
            ok(what, verify::all_reduce::<f32>(&mut comm, len, Op::Sum, Some(algorithm), 2, seed))?;
        }
        ok(format!("all-reduce bf16 sum x {len}"), verify::all_reduce::<bf16>(&mut comm, len, Op::Sum, None, 1, seed))?;
        ok(format!("all-reduce f16 max x {len}"), verify::all_reduce::<f16>(&mut comm, len, Op::Max, None, 1, seed))?;
        let what = format!("reduce-scatter f32 min x {len} per rank");
        ok(what, verify::reduce_scatter::<f32>(&mut comm, len, Op::Min, seed))?;
        ok(format!("all-gather f32 x {len} per rank"), verify::all_gather::<f32>(&mut comm, len, seed))?;
        let what = format!("broadcast bf16 x {len} from rank {}", world - 1);
        ok(what, verify::broadcast::<bf16>(&mut comm, len, world - 1, seed))?;
        for get in [false, true] {
            let what = format!("{} u32 x {len} along shift 1", if get { "get" } else { "put" });
            ok(what, verify::put_or_get::<u32>(&mut comm, len, len, Route::Shift(1), get, seed))?;
        }
    }
    // Rank r sends (r + q) % 3 rows to rank q.
    let counts: Vec<Vec<u32>> = (0..world).map(|r| (0..world).map(|q| ((r + q) % 3) as u32).collect()).collect();
    for row_len in [8usize, 200] {
        let what = format!("all-to-all bf16, rows of {row_len}, counts {counts:?}");
        ok(what, verify::all_to_all::<bf16>(&mut comm, &counts, row_len, 3, 77))?;
    }
    ok("barrier".into(), comm.barrier().and_then(|g| Ok(g.wait()?)).map_err(Into::into))?;
    let what = "graph of 4 all-reduces f32 x 1000, replayed 3 times".to_owned();
    ok(what, verify::all_reduce_graph::<f32>(&mut comm, 1000, 4, 3, 1, 5))?;
    drop(comm);
    let custom = CustomPlan::for_team(team);
    run_custom_kernel(team, &custom)?;
    verified(&format!("custom kernels scaled_put and accumulate x {} with {} graph replays", custom.len, custom.steps));
    Ok(())
}
