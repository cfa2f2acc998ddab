//! The communication library on the CPU emulator (CI): every kernel with 2 and 4 ranks against the CPU
//! references, at sizes 0, 1, odd, unaligned tails and larger than one block's share; repeated calls on the
//! same buffers (epochs, LL parities, two-shot segments); graph capture and replay; proptest over sizes.
//!
//! The emulator tuning keeps grids tiny (two blocks of one warp) and buffers small, so modest sizes already
//! cross the LL/two-shot threshold and split the two-shot into several segments.

use ferrocomm::{Backend, Team};
use ferrocomm_device::{bf16, f16};
use ferrocomm_kernels::verify::{self, VerifyError};
use ferrocomm_kernels::{Algorithm, CommError, Communicator, ExchangeTransport, Op, PingProtocol, Route, Tuning};
use ferrocomm_tests::{EMULATED_LIMIT, wait_limit};
use proptest::prelude::*;

#[path = "collectives_emulated/between_kernels.rs"]
mod between_kernels;

fn team(world: usize) -> Team {
    Team::builder()
        .backend(Backend::Emulator)
        .world(world)
        .timeout(wait_limit(EMULATED_LIMIT))
        .build()
        .expect("emulated team")
}

/// How late a late rank is: long against an emulated launch's own work, so its peers run ahead of it as far
/// as their waits let them, every time.
const LATE: std::time::Duration = std::time::Duration::from_millis(20);

/// A team whose rank `late` starts every launch, and raises every signal, [`LATE`]: a wait that does not
/// wait for this launch's signal (a stale epoch, a value one short) reads before the late rank's data is there.
fn team_with_late_rank(world: usize, late: usize) -> Team {
    Team::builder()
        .backend(Backend::Emulator)
        .world(world)
        .timeout(wait_limit(EMULATED_LIMIT))
        .emulator_late_rank(late, LATE)
        .build()
        .expect("emulated team")
}

fn check(result: Result<(), VerifyError>) {
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Sizes (elements) around the interesting edges for the emulator tuning: empty, one, odd, a partial last
/// vector, LL-sized, and two-shot sizes spanning several segments and several blocks.
const SIZES: [usize; 8] = [0, 1, 7, 33, 100, 129, 1000, 3001];

fn all_reduce_every_size(world: usize) {
    let team = team(world);
    let mut comm = Communicator::new(&team).unwrap();
    for (i, &len) in SIZES.iter().enumerate() {
        let op = [Op::Sum, Op::Max, Op::Min][i % 3];
        check(verify::all_reduce::<f32>(&mut comm, len, op, None, 1, i as u64));
        check(verify::all_reduce::<bf16>(&mut comm, len, Op::Sum, None, 1, 100 + i as u64));
    }
    check(verify::all_reduce::<f16>(&mut comm, 517, Op::Max, None, 1, 7));
}

#[test]
fn all_reduce_two_ranks() {
    all_reduce_every_size(2);
}

#[test]
fn all_reduce_four_ranks() {
    all_reduce_every_size(4);
}

#[test]
fn both_algorithms_at_the_same_sizes() {
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    for (i, len) in [0usize, 1, 5, 9, 64, 127].into_iter().enumerate() {
        for algorithm in [Algorithm::LlOneShot, Algorithm::OneShot, Algorithm::TwoShot] {
            check(verify::all_reduce::<bf16>(&mut comm, len, Op::Sum, Some(algorithm), 1, i as u64));
            check(verify::all_reduce::<f16>(&mut comm, len, Op::Min, Some(algorithm), 1, i as u64));
        }
    }
}

#[test]
fn back_to_back_calls_reuse_epochs_parities_and_segments() {
    let team = team(4);
    let mut comm = Communicator::new(&team).unwrap();
    check(verify::all_reduce::<f32>(&mut comm, 61, Op::Sum, Some(Algorithm::LlOneShot), 5, 1));
    check(verify::all_reduce::<f32>(&mut comm, 250, Op::Max, Some(Algorithm::OneShot), 5, 3));
    check(verify::all_reduce::<f32>(&mut comm, 700, Op::Sum, Some(Algorithm::TwoShot), 4, 2));
    // Interleaved kinds share the LL buffer and its epochs.
    for round in 0..3 {
        check(verify::all_gather::<u32>(&mut comm, 9, round));
        check(verify::all_reduce::<bf16>(&mut comm, 40, Op::Max, None, 1, round));
        check(verify::broadcast::<u8>(&mut comm, 13, (round % 4) as usize, round));
    }
}

/// Larger thresholds than the emulator default, so each thread of the tiny grids handles several vectors of
/// the LL, one-shot and staged paths (their stride loops and tails).
#[test]
fn latency_paths_with_several_vectors_per_thread() {
    let team = team(2);
    let mut tuning = Tuning::emulator();
    tuning.ll_all_reduce_max_bytes = 4096;
    tuning.one_shot_max_bytes = 8192;
    tuning.ll_exchange_max_bytes = 2048;
    let mut comm = Communicator::with_tuning(&team, tuning).unwrap();
    for (i, len) in [1023usize, 1024, 999].into_iter().enumerate() {
        check(verify::all_reduce::<f32>(&mut comm, len, Op::Sum, Some(Algorithm::LlOneShot), 2, i as u64));
        check(verify::all_reduce::<bf16>(&mut comm, 2 * len, Op::Max, Some(Algorithm::OneShot), 2, i as u64));
        check(verify::all_gather::<u16>(&mut comm, len, i as u64));
        check(verify::all_gather::<u16>(&mut comm, 3 * len, i as u64));
    }
}

#[test]
fn ll_all_reduce_refuses_messages_beyond_its_buffer() {
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    let mut buf = ferrocomm::SymBuffer::<f32>::new(&team, 1 << 12).unwrap();
    match comm.all_reduce_with(&mut buf, Op::Sum, Algorithm::LlOneShot) {
        Err(CommError::TooLarge { .. }) => {}
        other => panic!("expected TooLarge, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn reduce_scatter_sizes() {
    for world in [2, 4] {
        let team = team(world);
        let mut comm = Communicator::new(&team).unwrap();
        for (i, chunk) in [0usize, 1, 3, 8, 33, 250].into_iter().enumerate() {
            check(verify::reduce_scatter::<f32>(&mut comm, chunk, Op::Sum, i as u64));
            check(verify::reduce_scatter::<bf16>(&mut comm, chunk, Op::Max, i as u64));
        }
    }
}

#[test]
fn all_gather_and_broadcast_sizes() {
    for world in [2, 4] {
        let team = team(world);
        let mut comm = Communicator::new(&team).unwrap();
        // Bytes per message: 0, 2, 14, 200 (LL), 402, 1000 (staged) and 2002 (direct stores).
        for (i, len) in [0usize, 1, 7, 100, 201, 500, 1001].into_iter().enumerate() {
            check(verify::all_gather::<bf16>(&mut comm, len, i as u64));
            check(verify::broadcast::<f16>(&mut comm, len, i % world, i as u64));
        }
        check(verify::all_gather::<u8>(&mut comm, 333, 9));
        check(verify::broadcast::<u64>(&mut comm, 77, world - 1, 9));
    }
}

#[test]
fn broadcast_rejects_a_root_outside_the_team() {
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    let mut buf = ferrocomm::SymBuffer::<u32>::new(&team, 4).unwrap();
    assert!(matches!(comm.broadcast(&mut buf, 2), Err(CommError::RankOutOfRange { rank: 2, .. })));
}

#[test]
fn all_to_all_moe_shapes() {
    // LL: slots of 3 rows x 8 bf16 (48 bytes); staged: 4 rows x 40 bf16 (320 bytes); direct: 4 rows x 200
    // bf16 (1600 bytes).
    let team2 = team(2);
    let mut comm = Communicator::new(&team2).unwrap();
    check(verify::all_to_all::<bf16>(&mut comm, &[vec![1, 2], vec![3, 0]], 8, 3, 1));
    check(verify::all_to_all::<bf16>(&mut comm, &[vec![0, 0], vec![0, 0]], 8, 3, 2));
    check(verify::all_to_all::<bf16>(&mut comm, &[vec![4, 1], vec![2, 4]], 40, 4, 3));
    check(verify::all_to_all::<bf16>(&mut comm, &[vec![1, 1], vec![1, 1]], 7, 2, 4));
    check(verify::all_to_all::<bf16>(&mut comm, &[vec![4, 2], vec![0, 3]], 200, 4, 8));
    let team4 = team(4);
    let mut comm = Communicator::new(&team4).unwrap();
    let counts = vec![vec![1, 0, 2, 3], vec![3, 3, 3, 3], vec![0, 0, 0, 1], vec![2, 1, 0, 0]];
    check(verify::all_to_all::<bf16>(&mut comm, &counts, 5, 3, 5));
    check(verify::all_to_all::<bf16>(&mut comm, &counts, 24, 3, 6));
    check(verify::all_to_all::<u32>(&mut comm, &counts, 1, 3, 7));
    check(verify::all_to_all::<bf16>(&mut comm, &counts, 200, 3, 9));
}

#[test]
fn all_to_all_combine_returns_the_rows() {
    // Dispatch then combine (counts received become counts sent): every rank gets its own rows back.
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    let (row, cap) = (16usize, 3usize);
    let counts = [vec![2u32, 1], vec![0, 3]];
    let mut send = ferrocomm::SymBuffer::<bf16>::new(&team, 3 * row).unwrap();
    let mut send_counts = ferrocomm::SymBuffer::<u32>::new(&team, 2).unwrap();
    let mut sent = Vec::new();
    for (rank, counts) in counts.iter().enumerate() {
        let data = verify::pattern::<bf16>(11, rank, 3 * row);
        send.copy_from_host(rank, &data).unwrap();
        send_counts.copy_from_host(rank, counts).unwrap();
        sent.push(data);
    }
    let mut recv = ferrocomm::SymBuffer::<bf16>::new(&team, 2 * cap * row).unwrap();
    let mut recv_counts = ferrocomm::SymBuffer::<u32>::new(&team, 2).unwrap();
    comm.all_to_all(&send, &send_counts, &mut recv, &mut recv_counts, row, cap).unwrap().wait().unwrap();
    let mut back = ferrocomm::SymBuffer::<bf16>::new(&team, 2 * cap * row).unwrap();
    let mut back_counts = ferrocomm::SymBuffer::<u32>::new(&team, 2).unwrap();
    // Combine: slot s of `recv` holds the rows from rank s; send them back in that order. The rows sit at
    // slot offsets, so compact them first (what an expert layer's output would look like).
    let mut compact = ferrocomm::SymBuffer::<bf16>::new(&team, 2 * cap * row).unwrap();
    for rank in 0..2 {
        let got = recv.to_host(rank).unwrap();
        let n = recv_counts.to_host(rank).unwrap();
        let mut rows = Vec::new();
        for (s, &c) in n.iter().enumerate() {
            rows.extend_from_slice(&got[s * cap * row..(s * cap + c as usize) * row]);
        }
        rows.resize(2 * cap * row, bf16::default());
        compact.copy_from_host(rank, &rows).unwrap();
    }
    comm.all_to_all(&compact, &recv_counts, &mut back, &mut back_counts, row, cap).unwrap().wait().unwrap();
    for rank in 0..2 {
        let got = back.to_host(rank).unwrap();
        let mut offset = 0;
        for dst in 0..2 {
            let c = counts[rank][dst] as usize;
            assert_eq!(back_counts.to_host(rank).unwrap()[dst] as usize, c);
            assert_eq!(&got[dst * cap * row..(dst * cap + c) * row], &sent[rank][offset * row..(offset + c) * row]);
            offset += c;
        }
    }
}

#[test]
fn all_to_all_over_capacity_is_a_device_error() {
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    let result = verify::all_to_all::<u32>(&mut comm, &[vec![1, 3], vec![1, 1]], 4, 2, 1);
    match result {
        Err(VerifyError::Comm(CommError::Runtime(ferrocomm::Error::Device(_)))) => {}
        other => panic!("expected a device error (trap), got {other:?}"),
    }
}

#[test]
fn put_and_get_routes() {
    for world in [2, 4] {
        let team = team(world);
        let mut comm = Communicator::new(&team).unwrap();
        let routes = [Route::Pair { from: 0, to: world - 1 }, Route::Pair { from: world - 1, to: 0 }, Route::Shift(1)];
        for (i, route) in routes.into_iter().enumerate() {
            for (len, dst_len) in [(0usize, 4usize), (1, 1), (13, 20), (301, 301)] {
                check(verify::put_or_get::<u8>(&mut comm, len, dst_len, route, false, i as u64));
                check(verify::put_or_get::<f32>(&mut comm, dst_len, len, route, true, i as u64));
            }
        }
    }
}

#[test]
fn routes_that_move_nothing_are_refused() {
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    let src = ferrocomm::SymBuffer::<u32>::new(&team, 4).unwrap();
    let mut dst = ferrocomm::SymBuffer::<u32>::new(&team, 4).unwrap();
    for route in [Route::Shift(2), Route::Pair { from: 1, to: 1 }, Route::Pair { from: 0, to: 5 }] {
        assert!(matches!(comm.put(&src, &mut dst, route), Err(CommError::BadRoute { .. })), "{route:?}");
    }
}

#[test]
fn barrier_many_times() {
    for world in [2, 4] {
        let team = team(world);
        let mut comm = Communicator::new(&team).unwrap();
        for _ in 0..10 {
            comm.barrier().unwrap().wait().unwrap();
        }
    }
}

#[test]
fn ping_pong_moves_payloads_both_ways() {
    let team = team(4);
    let mut comm = Communicator::new(&team).unwrap();
    for protocol in [PingProtocol::ReleaseAcquire, PingProtocol::Ll] {
        for (initiator, responder, bytes) in [(0, 1, 8), (3, 1, 61), (2, 0, 0), (1, 2, 256)] {
            let result = comm.ping_pong(initiator, responder, 20, bytes, protocol).unwrap();
            assert_eq!(result.iters, 20);
            assert!(result.total_ns > 0 && result.one_way_ns() > 0.0);
            for (rank, peer) in [(initiator, responder), (responder, initiator)] {
                let got = comm.ping_inbox(rank).unwrap();
                let want: Vec<u8> = (0..bytes).map(|i| ((peer * 31 + i) % 251) as u8).collect();
                assert_eq!(&got[..bytes], &want[..], "{protocol:?} {initiator}<->{responder} rank {rank}");
            }
        }
    }
    assert!(matches!(comm.ping_pong(0, 0, 1, 8, PingProtocol::Ll), Err(CommError::BadRoute { .. })));
    assert!(matches!(comm.ping_pong(0, 1, 1, 257, PingProtocol::Ll), Err(CommError::TooLarge { .. })));
}

/// LL ping-pongs of one round each, back to back on one pad and one LL buffer, each with a payload of its
/// own: every launch's flag is new to the buffer, so no reader takes the packet the launch before left there.
/// The responder (rank 1) starts each launch late, so the initiator polls before the reply is sent: a flag
/// the previous launch also used (the first two epochs' flags made one lower are both `ll_flag(0)`'s 1, the
/// flag's wrap) would hand it the stale reply.
#[test]
fn ll_ping_pongs_of_one_round_each_deliver_their_own_payload() {
    use ferrocomm::{LaunchConfig, SignalPadBuffer, SymBuffer};
    use ferrocomm_device::ll::{LlPacket, ll_packets};
    use ferrocomm_kernels::kernels::p2p;
    use ferrocomm_kernels::layout::p2p_pad;

    const BYTES: usize = 24;
    let team = team_with_late_rank(2, 1);
    let pad = SignalPadBuffer::new(&team, "ping_ll", p2p_pad::SIGNALS).unwrap();
    let mut ll = SymBuffer::<LlPacket>::new(&team, ll_packets::<u8>(BYTES)).unwrap();
    let mut payload = SymBuffer::<u8>::new(&team, BYTES).unwrap();
    let mut inbox = SymBuffer::<u8>::new(&team, BYTES).unwrap();
    let mut times = SymBuffer::<u64>::new(&team, 2).unwrap();
    let bytes_of =
        |launch: usize, r: usize| -> Vec<u8> { (0..BYTES).map(|i| (launch * 64 + r * 32 + i) as u8).collect() };
    for launch in 0..3 {
        for r in 0..2 {
            payload.copy_from_host(r, &bytes_of(launch, r)).unwrap();
        }
        let cfg = LaunchConfig::new(1, 32);
        p2p::ping_pong_ll::launch(&team, cfg, &pad, &mut ll, &payload, &mut inbox, 0, 1, 1, &mut times)
            .and_then(|running| running.wait())
            .unwrap_or_else(|e| panic!("launch {launch}: {e}"));
        for (rank, peer) in [(0, 1), (1, 0)] {
            assert_eq!(inbox.to_host(rank).unwrap(), bytes_of(launch, peer), "launch {launch}: rank {rank}'s inbox");
        }
    }
}

#[test]
fn graph_replays_need_no_reset() {
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    // LL-, one-shot- and two-shot-sized graphs, replayed with fresh inputs each time.
    check(verify::all_reduce_graph::<f32>(&mut comm, 37, 3, 4, 2, 1));
    check(verify::all_reduce_graph::<f32>(&mut comm, 200, 3, 3, 1, 5));
    check(verify::all_reduce_graph::<bf16>(&mut comm, 600, 2, 3, 1, 2));
    // Direct calls between replays of another graph keep every epoch in step.
    check(verify::all_reduce::<f32>(&mut comm, 37, Op::Sum, None, 2, 3));
    check(verify::all_reduce_graph::<f32>(&mut comm, 37, 2, 2, 1, 4));
}

#[test]
fn algorithms_and_transports_follow_the_thresholds() {
    let team = team(2);
    let comm = Communicator::new(&team).unwrap();
    let t = comm.tuning().clone();
    assert_eq!(comm.all_reduce_algorithm(0), Algorithm::LlOneShot);
    assert_eq!(comm.all_reduce_algorithm(t.ll_all_reduce_max_bytes), Algorithm::LlOneShot);
    assert_eq!(comm.all_reduce_algorithm(t.ll_all_reduce_max_bytes + 1), Algorithm::OneShot);
    assert_eq!(comm.all_reduce_algorithm(t.one_shot_max_bytes), Algorithm::OneShot);
    assert_eq!(comm.all_reduce_algorithm(t.one_shot_max_bytes + 1), Algorithm::TwoShot);
    assert_eq!(comm.exchange_transport(t.ll_exchange_max_bytes), ExchangeTransport::Ll);
    assert_eq!(comm.exchange_transport(t.ll_exchange_max_bytes + 1), ExchangeTransport::Staged);
    assert_eq!(comm.exchange_transport(t.one_shot_max_bytes), ExchangeTransport::Staged);
    assert_eq!(comm.exchange_transport(t.one_shot_max_bytes + 1), ExchangeTransport::Direct);
}

#[test]
fn tuning_is_validated() {
    let team = team(2);
    let mut t = Tuning::emulator();
    t.ll_threads = 33;
    assert!(matches!(Communicator::with_tuning(&team, t), Err(CommError::BadTuning { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Any size, either algorithm, any op, 2 or 4 ranks.
    #[test]
    fn all_reduce_any_size(len in 0usize..2500, world in prop::sample::select(vec![2usize, 4]), algorithm in 0usize..3, op in 0usize..3, seed: u64) {
        let team = team(world);
        let mut comm = Communicator::new(&team).unwrap();
        // The chosen algorithm where the message fits its buffer, the two-shot otherwise.
        let t = comm.tuning();
        let algorithm = match algorithm {
            0 if len * 4 <= t.ll_all_reduce_max_bytes => Algorithm::LlOneShot,
            1 if len * 4 <= t.one_shot_max_bytes => Algorithm::OneShot,
            _ => Algorithm::TwoShot,
        };
        let op = [Op::Sum, Op::Max, Op::Min][op];
        if let Err(e) = verify::all_reduce::<f32>(&mut comm, len, op, Some(algorithm), 2, seed) {
            return Err(TestCaseError::fail(e.to_string()));
        }
    }

    /// Any message size through all-gather and an all-to-all with random counts.
    #[test]
    fn exchanges_any_size(len in 0usize..700, counts in prop::collection::vec(0u32..4, 4), seed: u64) {
        let team = team(2);
        let mut comm = Communicator::new(&team).unwrap();
        if let Err(e) = verify::all_gather::<u16>(&mut comm, len, seed) {
            return Err(TestCaseError::fail(e.to_string()));
        }
        let counts = vec![counts[..2].to_vec(), counts[2..].to_vec()];
        if let Err(e) = verify::all_to_all::<u16>(&mut comm, &counts, 1 + len % 37, 3, seed) {
            return Err(TestCaseError::fail(e.to_string()));
        }
    }
}

/// An SM budget caps every kernel's grid (the emulator's tuned grids have two blocks: a budget of one
/// halves them) and changes no result: each collective and put at sizes beyond one block's share, on the
/// same communicator before and after the budget, and after lifting it.
#[test]
fn an_sm_budget_caps_the_grids_and_keeps_the_results() {
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    let tuned = comm.tuning().clone();
    assert_eq!(comm.sm_budget(), None);
    assert!(matches!(comm.set_sm_budget(Some(0)), Err(CommError::BadTuning { .. })));
    let run = |comm: &mut Communicator<'_>, seed: u64| {
        for (i, &len) in [1usize, 129, 3001].iter().enumerate() {
            let seed = seed + i as u64 * 10;
            for algorithm in [Algorithm::LlOneShot, Algorithm::OneShot, Algorithm::TwoShot] {
                let fits = match algorithm {
                    Algorithm::LlOneShot => len * 4 <= comm.tuning().ll_all_reduce_max_bytes,
                    Algorithm::OneShot => len * 4 <= comm.tuning().one_shot_max_bytes,
                    Algorithm::TwoShot => true,
                };
                if fits {
                    check(verify::all_reduce::<f32>(comm, len, Op::Sum, Some(algorithm), 2, seed));
                }
            }
            check(verify::all_gather::<u32>(comm, len, seed + 1));
            check(verify::all_to_all::<u32>(comm, &[vec![1, 2], vec![3, 0]], len, 3, seed + 2));
            check(verify::put_or_get::<u8>(
                comm,
                len * 4 + 3,
                len * 4 + 3,
                Route::Pair { from: 0, to: 1 },
                false,
                seed + 3,
            ));
        }
    };
    run(&mut comm, 1);
    comm.set_sm_budget(Some(1)).unwrap();
    assert_eq!((comm.tuning().max_blocks, comm.tuning().put_blocks), (1, 1));
    assert_eq!(comm.sm_budget(), Some(1));
    run(&mut comm, 100);
    // A budget above the tuned grids changes nothing; lifting it restores them.
    comm.set_sm_budget(Some(1000)).unwrap();
    assert_eq!(comm.tuning(), &tuned);
    comm.set_sm_budget(None).unwrap();
    assert_eq!(comm.tuning(), &tuned);
    run(&mut comm, 200);
}

/// One rank alone: its all-gather and all-to-all are copies to itself, through the TMA ring from one stage
/// up (what `compute-sanitizer`, which runs one kernel at a time, checks on the GPU machine).
#[test]
fn one_rank_copies_to_itself_through_the_tma() {
    let team = team(1);
    let mut tuning = ferrocomm_kernels::Tuning::for_team(&team).unwrap();
    tuning.bulk_min_bytes = 0;
    let mut comm = Communicator::with_tuning(&team, tuning).unwrap();
    for (i, len) in [0usize, 1, 7, 8, 100, 1001].into_iter().enumerate() {
        check(verify::all_gather::<bf16>(&mut comm, len, i as u64));
        check(verify::all_to_all::<u16>(&mut comm, &[vec![3]], len, 4, i as u64));
    }
}

#[test]
fn tensor_parallel_gemv_shapes() {
    use ferrocomm_kernels::TpShape;
    for world in [2, 4] {
        let team = team(world);
        // Blocks whose warps share the rows of a split two ways, or not at all.
        for (row_groups, min_tokens) in [(1u64, 17), (2, 1)] {
            let tuning = Tuning { tp_row_groups_min_tokens: min_tokens, ..Tuning::emulator() };
            let mut comm = Communicator::with_tuning(&team, tuning).unwrap();
            // One partial tile, a tile and a half, tokens on both sides of the 8 rows of an `A` half, odd shard
            // rows; one whole 64-row iteration, one with `x` rows not 16-byte aligned, and several splits of
            // whole iterations with a partial last one. Four ranks take the shapes of one iteration only: the
            // emulator runs a thread per GPU thread, and the larger shapes on four ranks take long on a busy
            // machine.
            let shapes = [
                (1, 8, 4 * world),
                (1, 64, 24 * world),
                (3, 264, 13 * world),
                (5, 40, 7 * world),
                (16, 520, 9 * world),
                (9, 64, 64 * world),
                (2, 72, 67 * world),
                (4, 64, 200 * world),
                (3, 264, 300 * world),
            ];
            for (i, &(tokens, hidden, k)) in shapes.iter().take(if world == 2 { shapes.len() } else { 5 }).enumerate() {
                let shape = TpShape { tokens, hidden, k };
                assert_eq!(comm.tp_plan(shape).unwrap().row_groups, row_groups, "{shape:?}");
                check(verify::tp_gemv(&mut comm, shape, i as u64));
            }
        }
    }
}

#[test]
fn a_launch_past_the_gemvs_launch_bounds_is_refused() {
    use ferrocomm::{Error, LaunchConfig, SymBuffer};
    use ferrocomm_kernels::TpShape;
    use ferrocomm_kernels::kernels::tp_decode::tp_gemv_rows1;
    let team = team(2);
    let comm = Communicator::new(&team).unwrap();
    let plan = comm.tp_plan(TpShape { tokens: 1, hidden: 8, k: 8 }).unwrap();
    let x = SymBuffer::<bf16>::new(&team, (plan.tokens * plan.k_local) as usize).unwrap();
    let w = SymBuffer::<bf16>::new(&team, (plan.k_local * plan.hidden) as usize).unwrap();
    let mut partials = SymBuffer::<f32>::new(&team, plan.partials_len()).unwrap();
    let cfg = LaunchConfig::new(1, 256);
    match tp_gemv_rows1::launch(&team, cfg, &x, &w, &mut partials, plan).map(|g| g.wait()) {
        Err(Error::BadLaunchConfig { kernel: "tp_gemv_rows1", reason }) => {
            assert!(reason.contains("256 threads per block") && reason.contains("at most 128"), "{reason}")
        }
        other => panic!("expected BadLaunchConfig, got {other:?}"),
    }
}

#[test]
fn a_kernel_with_a_signal_pad_refuses_a_grid_past_its_epoch_slots() {
    use ferrocomm::{Error, LaunchConfig, SignalPadBuffer};
    use ferrocomm_kernels::kernels::barrier::barrier;
    use ferrocomm_kernels::layout::barrier_pad;
    let team = team(2);
    let pad = SignalPadBuffer::new(&team, "test.barrier", barrier_pad::SIGNALS).unwrap();
    match barrier::launch(&team, LaunchConfig::new(1025, 32), &pad).map(|g| g.wait()) {
        Err(Error::BadLaunchConfig { kernel: "barrier", reason }) => {
            assert!(reason.contains("1025 blocks") && reason.contains("`pad`") && reason.contains("1024"), "{reason}")
        }
        other => panic!("expected BadLaunchConfig, got {other:?}"),
    }
    // The pad is untouched: a launch within the slots still works.
    barrier::launch(&team, LaunchConfig::new(1, 32), &pad).unwrap().wait().unwrap();
}

#[test]
fn the_fused_steps_grid_fits_its_signal_pad_on_a_whole_gpu() {
    use ferrocomm_device::abi::SIGNAL_PAD_EPOCH_SLOTS;
    use ferrocomm_kernels::{TpDecode, TpShape};
    let team = team(1);
    let plans = |max_blocks: u32| {
        let tuning = Tuning { max_blocks, tp_blocks_per_sm: 3, ..Tuning::emulator() };
        let comm = Communicator::with_tuning(&team, tuning).unwrap();
        TpDecode::new(&comm, TpShape { tokens: 1, hidden: 8192, k: 8192 }).unwrap().plans()
    };
    // One rank with an H200's 132 multiprocessors: three blocks on each, 396, within the pad's epoch slots
    // (one per block of a launch), so the fused step has the GEMV's whole grid.
    let (gemv, fused) = plans(132);
    assert_eq!(gemv.grid(), 32 * 12, "{gemv:?}");
    assert_eq!(fused, gemv);
    // The most blocks a rank may use (256 per kernel, three per multiprocessor): still within the slots.
    let (gemv, fused) = plans(256);
    assert_eq!(fused, gemv);
    assert!(fused.grid() <= SIGNAL_PAD_EPOCH_SLOTS, "{fused:?}");
}

#[test]
fn tensor_parallel_shapes_the_kernels_cannot_run_are_refused() {
    use ferrocomm_kernels::{CommError, TpShape};
    let team = team(2);
    let comm = Communicator::new(&team).unwrap();
    for shape in [
        TpShape { tokens: 0, hidden: 64, k: 8 },
        TpShape { tokens: 17, hidden: 64, k: 8 },
        TpShape { tokens: 1, hidden: 60, k: 8 },
        TpShape { tokens: 1, hidden: 64, k: 7 },
        TpShape { tokens: 1, hidden: 8, k: 2 << 32 },
    ] {
        assert!(matches!(comm.tp_plan(shape), Err(CommError::BadShape { .. })), "{shape:?} was accepted");
    }
}

#[test]
fn tensor_parallel_decode_waits_for_a_late_rank() {
    // Each rank's reduction reads its peers' partial sums once they say `ready`; a rank that read rank 1's
    // before its GEMV of this round wrote them would get the last round's (the activations change).
    use ferrocomm_kernels::{TpShape, TpVariant};
    let team = team_with_late_rank(2, 1);
    let mut comm = Communicator::new(&team).unwrap();
    for variant in [TpVariant::ThreeKernels, TpVariant::TwoKernels, TpVariant::Fused] {
        check(verify::tp_decode(&mut comm, TpShape { tokens: 3, hidden: 264, k: 32 }, variant, 5));
    }
}

#[test]
fn a_captured_two_kernel_step_waits_for_a_late_rank_s_partial_sums() {
    // Another step, then the checked one, in one graph: no host wait between a GEMV and the reduction that
    // reads its peers' partial sums once they say `ready`. Had the reduction read rank 1's (late) before this
    // step's GEMV wrote them, it would have summed the other step's.
    use ferrocomm::SymBuffer;
    use ferrocomm_kernels::{TpShape, TpVariant};
    let team = team_with_late_rank(2, 1);
    let mut comm = Communicator::new(&team).unwrap();
    let shape = TpShape { tokens: 3, hidden: 264, k: 32 };
    let mut other_x = SymBuffer::<bf16>::new(&team, shape.tokens * shape.k_local(2)).unwrap();
    other_x.fill(bf16::from_f32(0.5)).unwrap();
    let mut other_out = SymBuffer::<bf16>::new(&team, shape.tokens * shape.hidden).unwrap();
    let name = "TwoKernels, captured after another step";
    check(verify::tp_decode_by(&mut comm, shape, name, 11, |comm, decode, inputs, out| -> Result<(), VerifyError> {
        let (w, residual, gamma) = (inputs.w, inputs.residual, inputs.gamma);
        let graph = comm.capture(|c| {
            decode.step(c, TpVariant::TwoKernels, &other_x, w, residual, gamma, &mut other_out)?;
            decode.step(c, TpVariant::TwoKernels, inputs.x, w, residual, gamma, out)
        })?;
        graph.replay()?.wait()?;
        Ok(())
    }));
}

#[test]
fn tensor_parallel_decode_steps_every_variant() {
    use ferrocomm_kernels::{FusedProtocol, TpDecode, TpShape, TpVariant};
    for world in [2, 4] {
        let team = team(world);
        let mut comm = Communicator::new(&team).unwrap();
        // The fused step in both protocols at every shape: LL packets up to `tp_ll_max_tokens` tokens, a put
        // and a signal per tile above.
        // Their blocks' warps share no rows (signalled) or share them two ways (LL, and the other variants:
        // `Tuning::tp_row_groups_min_tokens`).
        let mut protocols =
            [(0, 17, FusedProtocol::Signal), (16, 1, FusedProtocol::Ll)].map(|(most, min_tokens, protocol)| {
                let tuning =
                    Tuning { tp_ll_max_tokens: most, tp_row_groups_min_tokens: min_tokens, ..Tuning::emulator() };
                (Communicator::with_tuning(&team, tuning).unwrap(), protocol)
            });
        // Four ranks on the smaller shapes only: the emulator runs a thread per GPU thread. The last shape has
        // four iterations of rows per rank, so the tiles are split several ways and each tile's 320 vectors
        // are reduced in three shares of 107 (`TpPlan::reduce_parts`), in the fused step by more blocks than
        // the tile's own two.
        let shapes = [(1, 64, 16 * world), (3, 520, 9 * world), (6, 264, 24 * world), (5, 264, 256 * world)];
        for (i, &(tokens, hidden, k)) in shapes.iter().take(if world == 2 { 4 } else { 2 }).enumerate() {
            if k == 256 * world {
                let (gemv, fused) = TpDecode::new(&comm, TpShape { tokens, hidden, k }).unwrap().plans();
                let parts = (gemv.reduce_parts(world), fused.reduce_parts(world));
                assert_eq!((parts, fused.blocks_per_tile()), ((3, 3), 2), "{gemv:?} {fused:?}");
            }
            let shape = TpShape { tokens, hidden, k };
            for variant in [TpVariant::ThreeKernels, TpVariant::TwoKernels] {
                check(verify::tp_decode(&mut comm, shape, variant, i as u64));
            }
            for (comm, protocol) in &mut protocols {
                assert_eq!(TpDecode::new(comm, shape).unwrap().fused_protocol(), *protocol);
                check(verify::tp_decode(comm, shape, TpVariant::Fused, i as u64));
            }
        }
    }
}
