//! The communication library on the GPUs: the scenarios of `collectives_emulated.rs` (shared through
//! `ferrocomm_kernels::verify`) at GPU sizes — 0, 1, odd, unaligned tails, LL and two-shot sizes on both
//! sides of the threshold, MoE shapes, 1 GiB — plus 10^5 back-to-back all-reduces replayed from CUDA graphs
//! and verified, ping-pong on both protocols, and the decode step with NCCL's all-reduce replayed from a
//! graph, every replay verified (a check that also runs on the emulator, with the library's all-reduce).
//!
//! Skipped with a visible message when no GPU is usable; failing instead when `FERROCOMM_REQUIRE_GPUS=N`
//! asks for N GPUs that are not there. With one GPU, two ranks share it. The tests hold one lock: kernels
//! of two teams spinning on the same GPUs at once could starve each other of SMs.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferrocomm::{Backend, SymBuffer, Team, system};
use ferrocomm_device::{bf16, f16};
use ferrocomm_examples::ExampleError;
use ferrocomm_kernels::verify::{self, VerifyError, pattern};
use ferrocomm_kernels::{
    Algorithm, Communicator, Op, PingProtocol, Route, TP_RMS_EPS, TpDecode, TpInputs, TpShape, reference,
};
use ferrocomm_tests::EMULATED_LIMIT;

const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_GPUS";
const GIB: usize = 1 << 30;

static GPUS: Mutex<()> = Mutex::new(());

/// The GPU team (every GPU, or two ranks on a single GPU) and the lock that serialises GPU tests, or
/// `None` with a visible message when there is no GPU.
fn gpu_team(test: &str) -> Option<(MutexGuard<'static, ()>, Team)> {
    let present = system::driver().map(|d| d.gpu_count).unwrap_or(0);
    if let Ok(v) = std::env::var(REQUIRE_ENV) {
        let need: usize = v.trim().parse().unwrap_or_else(|_| panic!("{REQUIRE_ENV}={v:?} is not a number of GPUs"));
        let why = system::driver().err().map(|e| format!(": {e}")).unwrap_or_default();
        assert!(present >= need, "{REQUIRE_ENV}={need} but {present} GPU(s) are usable{why}");
    }
    if present == 0 {
        let why = system::driver().err().map(|e| e.to_string()).unwrap_or_default();
        eprintln!("skipped: no GPU for {test} ({why})");
        return None;
    }
    let lock = GPUS.lock().unwrap_or_else(PoisonError::into_inner);
    let team = Team::builder()
        .backend(Backend::Cuda)
        .world(present.clamp(2, 8))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_else(|e| panic!("{test}: building the GPU team failed: {e}"));
    Some((lock, team))
}

fn check(result: Result<(), VerifyError>) {
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn all_reduce_sizes_dtypes_and_ops() {
    let Some((_lock, team)) = gpu_team("all_reduce_sizes_dtypes_and_ops") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    let ll = comm.tuning().ll_all_reduce_max_bytes;
    eprintln!("LL one-shot up to {ll} bytes per rank, two-shot above; tuning {:?}", comm.tuning());
    // Elements of bf16: around the LL threshold, unaligned tails, several blocks and segments.
    let sizes = [0, 1, 7, 4095, 32 * 1024 - 3, ll / 2, ll / 2 + 1, (1 << 19) + 3, (16 << 20) + 5, (64 << 20) + 9];
    for (i, &len) in sizes.iter().enumerate() {
        let op = [Op::Sum, Op::Max, Op::Min][i % 3];
        check(verify::all_reduce::<bf16>(&mut comm, len, op, None, 2, i as u64));
        check(verify::all_reduce::<f32>(&mut comm, len / 2, Op::Sum, None, 1, i as u64));
        check(verify::all_reduce::<f16>(&mut comm, len, Op::Max, None, 1, i as u64));
    }
    for (i, len) in [1usize, 1000, 8191, 40_000].into_iter().enumerate() {
        for algorithm in [Algorithm::LlOneShot, Algorithm::OneShot, Algorithm::TwoShot] {
            check(verify::all_reduce::<bf16>(&mut comm, len, Op::Sum, Some(algorithm), 2, 50 + i as u64));
        }
    }
}

/// `len` elements per rank of a periodic pattern (period 251, prime, so a misplaced chunk shows), rank `r`
/// scaled by `r + 1`, all-reduced, and compared byte for byte with the reference tiled the same way.
#[test]
fn all_reduce_one_gib() {
    let Some((_lock, team)) = gpu_team("all_reduce_one_gib") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    let world = team.world();
    let len = GIB / 2 + 3;
    const PERIOD: usize = 251;
    let periods: Vec<Vec<bf16>> = (0..world)
        .map(|r| (0..PERIOD).map(|i| bf16::from_f32((i as f32 - 125.0) / 4.0 * (r + 1) as f32)).collect())
        .collect();
    let expected_period = reference::all_reduce(&periods, Op::Sum);
    let tile = |p: &[bf16]| -> Vec<bf16> { p.iter().copied().cycle().take(len).collect() };
    let mut buf = SymBuffer::<bf16>::new(&team, len).unwrap();
    for (rank, period) in periods.iter().enumerate() {
        buf.copy_from_host(rank, &tile(period)).unwrap();
    }
    let started = Instant::now();
    comm.all_reduce(&mut buf, Op::Sum).unwrap().wait().unwrap();
    eprintln!("1 GiB bf16 all-reduce (with host wait): {:?}", started.elapsed());
    let expected = tile(&expected_period);
    for rank in 0..world {
        let got = buf.to_host(rank).unwrap();
        if got != expected {
            let i = got.iter().zip(&expected).position(|(a, b)| a != b).unwrap_or(len);
            panic!("rank {rank}: element {i} of {len} differs: expected {:?}, found {:?}", expected.get(i), got.get(i));
        }
    }
}

#[test]
fn reduce_scatter_sizes() {
    let Some((_lock, team)) = gpu_team("reduce_scatter_sizes") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    for (i, chunk) in [0usize, 1, 3, 4097, (1 << 20) + 1, 8 << 20].into_iter().enumerate() {
        check(verify::reduce_scatter::<bf16>(&mut comm, chunk, Op::Sum, i as u64));
        check(verify::reduce_scatter::<f32>(&mut comm, chunk, Op::Max, i as u64));
    }
    check(verify::reduce_scatter::<bf16>(&mut comm, GIB / 2 / team.world(), Op::Sum, 99));
}

#[test]
fn all_gather_and_broadcast_sizes() {
    let Some((_lock, team)) = gpu_team("all_gather_and_broadcast_sizes") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    let world = team.world();
    for (i, len) in [0usize, 1, 7, 4095, 128 * 7168 / 2, (1 << 20) + 3, 8 << 20].into_iter().enumerate() {
        check(verify::all_gather::<bf16>(&mut comm, len, i as u64));
        check(verify::broadcast::<bf16>(&mut comm, len, i % world, i as u64));
    }
    check(verify::all_gather::<u8>(&mut comm, GIB / world, 7));
    check(verify::broadcast::<u8>(&mut comm, GIB, world - 1, 8));
}

#[test]
fn all_to_all_moe_shapes() {
    let Some((_lock, team)) = gpu_team("all_to_all_moe_shapes") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    let world = team.world();
    const HIDDEN: usize = 7168;
    for (i, tokens) in [1usize, 8, 128, 1024, 4096].into_iter().enumerate() {
        // Uneven routing: rank r sends (tokens + r + q) % (tokens + 1) rows to rank q.
        let counts: Vec<Vec<u32>> =
            (0..world).map(|r| (0..world).map(|q| ((tokens + r + q) % (tokens + 1)) as u32).collect()).collect();
        check(verify::all_to_all::<bf16>(&mut comm, &counts, HIDDEN, tokens, i as u64));
        // Exact splits, as NCCL's all_to_all_single of `tokens` rows.
        let even = vec![vec![(tokens / world).max(1) as u32; world]; world];
        check(verify::all_to_all::<bf16>(&mut comm, &even, HIDDEN, tokens.max(world) / world, i as u64));
    }
    check(verify::all_to_all::<bf16>(&mut comm, &vec![vec![3; world]; world], 7, 5, 1));
}

#[test]
fn put_and_get_sizes() {
    let Some((_lock, team)) = gpu_team("put_and_get_sizes") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    let world = team.world();
    for (i, len) in [0usize, 1, 15, 16, 17, 4095, (1 << 20) + 3].into_iter().enumerate() {
        for route in [Route::Pair { from: 0, to: 1 }, Route::Pair { from: 1, to: 0 }, Route::Shift(1)] {
            check(verify::put_or_get::<u8>(&mut comm, len, len + 5, route, false, i as u64));
            check(verify::put_or_get::<f32>(&mut comm, len, len, route, true, i as u64));
        }
    }
    check(verify::put_or_get::<u8>(&mut comm, GIB, GIB, Route::Pair { from: 0, to: world - 1 }, false, 3));
}

/// Put, get, all-gather, all-to-all and the two-shot with every copy of at least one stage through the TMA
/// (small stages, no size threshold), at awkward sizes: heads, tails, a stage's worth, many trips round the
/// ring.
#[test]
fn tma_copies_at_awkward_sizes() {
    let Some((_lock, team)) = gpu_team("tma_copies_at_awkward_sizes") else { return };
    if system::gpu(0).map(|g| g.compute_capability).unwrap_or(0) < 90 {
        eprintln!("skipped: tma_copies_at_awkward_sizes needs sm_90 GPUs (older ones have no TMA)");
        return;
    }
    for stage in [16usize, 1024, 16 << 10] {
        let mut tuning = ferrocomm_kernels::Tuning::for_team(&team).unwrap();
        (tuning.bulk_stage_bytes, tuning.bulk_min_bytes) = (stage, 0);
        let mut comm = Communicator::with_tuning(&team, tuning).unwrap();
        let world = team.world();
        for (i, len) in [1usize, 15, 16, 17, 1000, 4095, 65537, (4 << 20) + 3].into_iter().enumerate() {
            let route = if i % 2 == 0 { Route::Shift(1) } else { Route::Pair { from: world - 1, to: 0 } };
            check(verify::put_or_get::<u8>(&mut comm, len, len + 5, route, false, i as u64));
            check(verify::put_or_get::<u8>(&mut comm, len + 3, len, route, true, i as u64));
            check(verify::all_gather::<bf16>(&mut comm, len, i as u64));
            check(verify::all_reduce::<bf16>(&mut comm, len, Op::Sum, Some(Algorithm::TwoShot), 2, i as u64));
            check(verify::reduce_scatter::<f32>(&mut comm, len, Op::Max, i as u64));
        }
        let counts: Vec<Vec<u32>> = (0..world).map(|r| (0..world).map(|q| (3 + r + 2 * q) as u32).collect()).collect();
        check(verify::all_to_all::<bf16>(&mut comm, &counts, 7168, 8, 5));
        check(verify::all_to_all::<bf16>(&mut comm, &counts, 7, 8, 6));
    }
}

/// One rank, every copy through the TMA: its all-gather and all-to-all copy to itself, so no kernel waits
/// for another and `compute-sanitizer --tool memcheck` (which runs one kernel at a time) can check the
/// bulk copies: `compute-sanitizer --tool memcheck gpu_collectives one_rank_tma`.
#[test]
fn one_rank_tma_copies_at_awkward_sizes() {
    let Some((_lock, _)) = gpu_team("one_rank_tma_copies_at_awkward_sizes") else { return };
    let team = Team::builder().backend(Backend::Cuda).world(1).timeout(Duration::from_secs(10)).build().unwrap();
    let mut tuning = ferrocomm_kernels::Tuning::for_team(&team).unwrap();
    (tuning.bulk_stage_bytes, tuning.bulk_min_bytes) = (1024, 0);
    let mut comm = Communicator::with_tuning(&team, tuning).unwrap();
    for (i, len) in [1usize, 15, 16, 17, 4095, 65537, (4 << 20) + 3].into_iter().enumerate() {
        check(verify::all_gather::<bf16>(&mut comm, len, i as u64));
        check(verify::all_to_all::<bf16>(&mut comm, &[vec![5]], 1 + len % 7168, 6, i as u64));
    }
}

#[test]
fn ping_pong_both_protocols() {
    let Some((_lock, team)) = gpu_team("ping_pong_both_protocols") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    for protocol in [PingProtocol::ReleaseAcquire, PingProtocol::Ll] {
        for bytes in [0usize, 8, 64, 256] {
            let result = comm.ping_pong(0, 1, 10_000, bytes, protocol).unwrap();
            eprintln!("ping-pong {protocol:?} {bytes} B: {:.3} us one way", result.one_way_ns() / 1e3);
            for (rank, peer) in [(0usize, 1usize), (1, 0)] {
                let want: Vec<u8> = (0..bytes).map(|i| ((peer * 31 + i) % 251) as u8).collect();
                assert_eq!(&comm.ping_inbox(rank).unwrap()[..bytes], &want[..], "{protocol:?} {bytes} B rank {rank}");
            }
        }
    }
}

#[test]
fn barrier_back_to_back() {
    let Some((_lock, team)) = gpu_team("barrier_back_to_back") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    for _ in 0..1000 {
        comm.barrier().unwrap().wait().unwrap();
    }
}

/// 10^5 all-reduces with no host work between them: graphs of up to 100 sums, replayed with fresh inputs
/// before each replay, a third of the calls at each algorithm's size (LL one-shot, one-shot push, two-shot);
/// 16 sampled elements checked after every replay and the whole buffer after every 50th. Each sum doubles
/// the values (on two ranks), so a graph holds at most as many as keep them finite.
#[test]
fn hundred_thousand_back_to_back_all_reduces() {
    let Some((_lock, team)) = gpu_team("hundred_thousand_back_to_back_all_reduces") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    let per_graph = (120 / team.world().ilog2() as usize).min(100);
    let replays = 100_000usize.div_ceil(3 * per_graph);
    let started = Instant::now();
    let sizes = [32 * 1024 - 3, (1 << 19) + 3, (4 << 20) + 5];
    for (i, len) in sizes.into_iter().enumerate() {
        let algorithm = comm.all_reduce_algorithm(len * 2);
        eprintln!("{replays} replays x {per_graph} all-reduces of {len} bf16 ({algorithm:?})");
        check(verify::all_reduce_graph::<bf16>(&mut comm, len, per_graph, replays, 50, i as u64));
    }
    eprintln!("{} all-reduces in graphs, verified: {:?}", 3 * replays * per_graph, started.elapsed());
}

#[test]
fn graph_capture_and_replay_of_mixed_collectives() {
    let Some((_lock, team)) = gpu_team("graph_capture_and_replay_of_mixed_collectives") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    check(verify::all_reduce_graph::<bf16>(&mut comm, 4095, 3, 20, 1, 3));
    check(verify::all_reduce_graph::<bf16>(&mut comm, (4 << 20) + 1, 2, 10, 1, 4));
    // Direct calls between graphs keep every epoch in step.
    check(verify::all_gather::<bf16>(&mut comm, 1000, 5));
    check(verify::all_reduce::<bf16>(&mut comm, 1000, Op::Sum, None, 3, 6));
    check(verify::all_reduce_graph::<bf16>(&mut comm, 4095, 3, 5, 1, 7));
}

/// The tensor-parallel decode step at the full shapes (H = K = 8192 and 7168; 1, 4 and 16 tokens)
/// and at awkward ones (a partial tile, odd shard rows, more rows than one block's chunk), the GEMV alone and
/// every variant, each against the CPU reference within bf16 tolerance.
#[test]
fn tensor_parallel_decode_at_full_and_awkward_shapes() {
    use ferrocomm_kernels::TpVariant;
    let Some((_lock, team)) = gpu_team("tensor_parallel_decode_at_full_and_awkward_shapes") else { return };
    let world = team.world();
    let mut comm = Communicator::new(&team).unwrap();
    let full = [8192, 7168].into_iter().flat_map(|h| [1, 4, 16].map(|t| (t, h, h)));
    let awkward = [(1, 8, 4 * world), (3, 264, 13 * world), (16, 520, 1001 * world), (5, 7168 + 8, 9 * world)];
    for (i, (tokens, hidden, k)) in full.chain(awkward).enumerate() {
        let shape = TpShape { tokens, hidden, k };
        let t = Instant::now();
        check(verify::tp_gemv(&mut comm, shape, i as u64));
        for variant in [TpVariant::ThreeKernels, TpVariant::TwoKernels, TpVariant::Fused] {
            check(verify::tp_decode(&mut comm, shape, variant, i as u64));
        }
        eprintln!("{shape:?}: the GEMV and three variants verified in {:.2?}", t.elapsed());
    }
}

/// Variant 1 of the decode step — the layer's kernels with NCCL's all-reduce between them, enqueued on the
/// rank's own stream — against the CPU reference, directly and replayed from a graph. One rank on GPU 0:
/// NCCL refuses two ranks on one GPU and wants one process per GPU, so this team has one process's rank;
/// the two-GPU run checks the reduction itself (the example verifies before it times).
#[test]
fn decode_step_with_nccls_all_reduce_between_the_kernels() {
    use ferrocomm_examples::nccl::NcclAllReduce;
    let Some((lock, _)) = gpu_team("decode_step_with_nccls_all_reduce_between_the_kernels") else { return };
    let team = Team::builder().backend(Backend::Cuda).devices([0]).world(1).single_process().build().unwrap();
    let mut comm = Communicator::new(&team).unwrap();
    let nccl = match NcclAllReduce::open(&team).unwrap() {
        Ok(nccl) => nccl,
        Err(why) => {
            eprintln!("skipped: NCCL cannot run here ({why})");
            return;
        }
    };
    for (i, (tokens, hidden)) in [(1, 8192), (4, 7168), (5, 7168 + 8), (16, 520)].into_iter().enumerate() {
        let shape = TpShape { tokens, hidden, k: hidden };
        let stepped = verify::tp_decode_by(&mut comm, shape, "nccl", i as u64, |comm, decode, inputs, out| {
            decode.step_with_all_reduce(comm, inputs, out, |_, y| nccl.sum_in_place(y))
        });
        stepped.unwrap_or_else(|e: ExampleError| panic!("{e}"));
    }
    // Captured into the rank's graph, three steps a graph, and replayed with new inputs each time.
    for (i, (tokens, hidden)) in [(4, 8192), (5, 7168 + 8)].into_iter().enumerate() {
        let shape = TpShape { tokens, hidden, k: hidden };
        let replayed =
            verify_step_replays(&mut comm, shape, "nccl", (3, 4), 10 + i as u64, |_, y| nccl.sum_in_place(y));
        replayed.unwrap_or_else(|e| panic!("{e}"));
    }
    drop(lock);
}

/// [`verify_step_replays`] on the emulator (CI), with the library's all-reduce in NCCL's place: the check the
/// GPU test makes of NCCL's step runs, and passes, on a step known to be right.
#[test]
fn replays_of_a_decode_step_are_verified_on_the_emulator() {
    let team = Team::builder().backend(Backend::Emulator).world(2).timeout(EMULATED_LIMIT).build().unwrap();
    let mut comm = Communicator::new(&team).unwrap();
    let shape = TpShape { tokens: 2, hidden: 64, k: 16 * team.world() };
    let replayed = verify_step_replays(&mut comm, shape, "the library's all-reduce", (2, 2), 1, |comm, y| {
        Ok(comm.all_reduce(y, Op::Sum)?.wait().map_err(ferrocomm_kernels::CommError::from)?)
    });
    replayed.unwrap_or_else(|e| panic!("{e}"));
}

/// Captures `steps` decode steps of `shape` into one graph, `all_reduce` summing each step's partial output
/// between its kernels (on every rank of this process), and replays the graph `replays` times. Before each
/// replay every step gets new activations and a new residual, written into the buffers the graph reads, and
/// its output is poisoned (NaN); after it, every step's output is compared with the CPU reference. A replay
/// that read the previous replay's inputs, waited on a stale epoch or left an output unwritten fails.
fn verify_step_replays(
    comm: &mut Communicator<'_>,
    shape: TpShape,
    name: &str,
    (steps, replays): (usize, usize),
    seed: u64,
    mut all_reduce: impl FnMut(&mut Communicator<'_>, &mut SymBuffer<f32>) -> Result<(), ExampleError>,
) -> Result<(), ExampleError> {
    let team = comm.team();
    let (tokens, hidden, world) = (shape.tokens, shape.hidden, team.world());
    let k_local = shape.k_local(world);
    let mut decode = TpDecode::new(comm, shape)?;
    let buffer = |len: usize| SymBuffer::<bf16>::new(team, len);
    // The layer's parameters stay; the norm weights are the same on every rank.
    let ws: Vec<Vec<bf16>> = (0..world).map(|rank| pattern(seed ^ 0x5EED, rank, k_local * hidden)).collect();
    let gamma_host: Vec<bf16> = pattern(seed ^ 0xB22, 0, hidden);
    let (mut w, mut gamma) = (buffer(k_local * hidden)?, buffer(hidden)?);
    for rank in team.local_ranks() {
        w.copy_from_host(rank, &ws[rank])?;
        gamma.copy_from_host(rank, &gamma_host)?;
    }
    // Each step of the graph has its own activations, residual and output.
    let buffers = |len: usize| (0..steps).map(|_| buffer(len)).collect::<Result<Vec<_>, _>>();
    let (mut xs, mut residuals) = (buffers(tokens * k_local)?, buffers(tokens * hidden)?);
    let mut outs = buffers(tokens * hidden)?;
    // The capture takes the library's errors only; another library's failure ends it and is returned here.
    let mut failure = None;
    let graph = comm.capture(|comm| {
        for ((x, residual), out) in xs.iter().zip(&residuals).zip(&mut outs) {
            let inputs = TpInputs { x, w: &w, residual, gamma: &gamma };
            match decode.step_with_all_reduce(comm, inputs, out, &mut all_reduce) {
                Ok(()) => {}
                Err(ExampleError::Comm(e)) => return Err(e),
                Err(other) => {
                    failure = Some(other);
                    return Err(ferrocomm::Error::Capturing { what: "a step that failed during capture" }.into());
                }
            }
        }
        Ok(())
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let graph = graph?;
    for replay in 0..replays {
        let mut expected = Vec::with_capacity(steps);
        for (step, ((x, residual), out)) in xs.iter_mut().zip(&mut residuals).zip(&mut outs).enumerate() {
            let s = seed.wrapping_mul(1000).wrapping_add((replay * steps + step) as u64);
            let x_host: Vec<Vec<bf16>> = (0..world).map(|rank| pattern(s, rank, x.len())).collect();
            let residual_host: Vec<bf16> = pattern(s ^ 0xA11, 0, residual.len());
            for rank in team.local_ranks() {
                x.copy_from_host(rank, &x_host[rank])?;
                residual.copy_from_host(rank, &residual_host)?;
            }
            out.fill(bf16::from_f32(f32::NAN))?;
            expected.push(reference::tp_decode(
                &x_host,
                &ws,
                &residual_host,
                &gamma_host,
                (tokens, hidden, TP_RMS_EPS),
            ));
        }
        graph.replay()?.wait()?;
        for (step, (out, expected)) in outs.iter().zip(&expected).enumerate() {
            for rank in out.local_ranks() {
                let found = out.to_host(rank)?;
                // Within two bf16 steps of rounding, as `verify::tp_decode` allows.
                let close = |e: &bf16, f: &bf16| (e.to_f32() - f.to_f32()).abs() <= e.to_f32().abs() / 64.0 + 1e-3;
                if let Some(index) = expected.iter().zip(&found).position(|(e, f)| !close(e, f)) {
                    return Err(ExampleError::Mismatch {
                        what: format!(
                            "tensor-parallel decode {shape:?} {name}: step {step} of {steps}, replay {replay}"
                        ),
                        rank,
                        index,
                        expected: format!("{:?}", expected[index]),
                        found: format!("{:?}", found[index]),
                    });
                }
            }
        }
    }
    Ok(())
}
