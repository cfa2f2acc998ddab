//! Ordering between kernels: each collective followed, with no host synchronisation, by a kernel of the
//! user's that reads what it delivered, then the same collective again into the same buffer — all of it
//! replayed from one graph, so the ranks' streams run ahead of each other as GPUs' do. The emulator's
//! checker follows ordering across launches (its `Timeline`): the `ready` handshake of a collective must
//! order its puts after the receiver's earlier kernels, and the waits that end it must order the puts
//! before the receiver's next kernels; without them these tests report a `Race` or an `UnorderedPut`.

use ferrocomm::{DeviceError, Error, KernelModule, LaunchConfig, SymBuffer, Team};
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;
use ferrocomm_device::vector::{Vectors, VectorsMut};
use ferrocomm_kernels::{Algorithm, CommError, Communicator, Op, Route};

use super::{team, team_with_late_rank};

/// The kernels of this file have no PTX: they run on the emulator only.
static EMU_ONLY: KernelModule = KernelModule::new("collectives_emulated", &[]);

/// A kernel that consumes what a collective delivered: every rank copies its own copy of `delivered` into
/// `out`. It does not communicate, so only the collectives around it order its reads after the puts that
/// filled `delivered`, and the next puts into `delivered` after its reads.
#[kernel(module = crate::between_kernels::EMU_ONLY, bytes(delivered, out), requires(len(out) >= len(delivered)))]
pub fn consume(delivered: SymSlice<u8>, out: &mut [u8]) {
    let from = Vectors::of(delivered.local());
    VectorsMut::of(out).copy_from(from, 0, (0, from.vectors()), (global_thread_idx(), global_threads()));
}

/// Rank `from` puts `src` into rank `to`'s copy of `dst` and raises no signal: only something between
/// the kernels (a barrier, the host) orders it before a later kernel's reads.
#[kernel(module = crate::between_kernels::EMU_ONLY, bytes(src, dst), requires(len(dst) >= len(src)))]
pub fn put_unsignalled(src: &[u8], dst: SymSliceMut<u8>, from: u32, to: u32) {
    if team::rank() == from && block_rank() == 0 && thread_rank() == 0 {
        put(Group::Thread, dst.peer(to).slice(0, src.len()), src);
    }
}

const CONSUME: LaunchConfig = LaunchConfig::new(2, 32);

fn consume_into<T: ferrocomm::DeviceCopy>(
    team: &Team,
    delivered: &SymBuffer<T>,
    out: &mut SymBuffer<T>,
) -> Result<(), CommError> {
    consume::launch(team, CONSUME, delivered.bytes(), out.bytes_mut())?.wait()?;
    Ok(())
}

/// Rank `r`'s pattern number `k`, `len` elements.
fn pattern(k: u32, r: usize, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| k * 1_000_003 + r as u32 * 10_007 + i).collect()
}

fn filled(team: &Team, k: u32, len: usize) -> SymBuffer<u32> {
    let mut b = SymBuffer::new(team, len).unwrap();
    for r in b.local_ranks() {
        b.copy_from_host(r, &pattern(k, r, len)).unwrap();
    }
    b
}

fn replay(comm: &mut Communicator<'_>, f: impl FnOnce(&mut Communicator<'_>) -> Result<(), CommError>) {
    let graph = comm.capture(|c| f(c)).expect("capture");
    if let Err(e) = graph.replay().and_then(|g| g.wait()) {
        panic!("{e}");
    }
}

/// Elements per message: above the emulator tuning's staging slot, so exchanges store directly, and more
/// than one block's share.
const LEN: usize = 600;

#[test]
fn a_put_then_a_kernel_reading_it_then_a_put_again() {
    // The receiver (rank 1) starts each launch late, so the sender reaches the second put's `ready` wait
    // while the receiver is still to read the first put: a sender that took the first put's `ready` for the
    // second's would write over what the receiver's kernel has yet to read. (With a receiver on time, this
    // launch's `ready` is often raised before the sender looks, which hides such a sender.)
    let team = team_with_late_rank(2, 1);
    let mut comm = Communicator::new(&team).unwrap();
    let (first, second) = (filled(&team, 1, LEN), filled(&team, 2, LEN));
    let mut dst = SymBuffer::<u32>::new(&team, LEN).unwrap();
    let (mut out1, mut out2) = (SymBuffer::new(&team, LEN).unwrap(), SymBuffer::new(&team, LEN).unwrap());
    let route = Route::Pair { from: 0, to: 1 };
    replay(&mut comm, |c| {
        drop(c.put(&first, &mut dst, route)?);
        consume_into(c.team(), &dst, &mut out1)?;
        drop(c.put(&second, &mut dst, route)?);
        consume_into(c.team(), &dst, &mut out2)
    });
    assert_eq!(out1.to_host(1).unwrap(), pattern(1, 0, LEN));
    assert_eq!(out2.to_host(1).unwrap(), pattern(2, 0, LEN));
}

/// Rank 2 puts into rank 1's `shared`, rank 0 gets it, rank 2 puts again: the get's `ready` orders its
/// reads after the first put, its `done` orders them before the second.
fn get_between_puts_into_its_source(comm: &mut Communicator<'_>) {
    let team = comm.team();
    let (first, second) = (filled(team, 1, LEN), filled(team, 2, LEN));
    let mut shared = SymBuffer::<u32>::new(team, LEN).unwrap();
    let mut got = SymBuffer::<u32>::new(team, LEN).unwrap();
    let mut out = SymBuffer::new(team, LEN).unwrap();
    replay(comm, |c| {
        drop(c.put(&first, &mut shared, Route::Pair { from: 2, to: 1 })?);
        drop(c.get(&mut got, &shared, Route::Pair { from: 0, to: 1 })?);
        drop(c.put(&second, &mut shared, Route::Pair { from: 2, to: 1 })?);
        consume_into(c.team(), &shared, &mut out)
    });
    assert_eq!(got.to_host(0).unwrap(), pattern(1, 2, LEN));
    assert_eq!(out.to_host(1).unwrap(), pattern(2, 2, LEN));
}

#[test]
fn a_get_between_puts_into_its_source() {
    let team = team(3);
    get_between_puts_into_its_source(&mut Communicator::new(&team).unwrap());
}

#[test]
fn a_get_between_puts_into_its_source_by_loads_and_stores() {
    // The same with the TMA off: every thread of a put's block stores, so each must wait for the block's
    // leader to see the target's `ready` (the TMA path's own barrier hides that one).
    let team = team(3);
    get_between_puts_into_its_source(&mut Communicator::with_tuning(&team, without_the_tma()).unwrap());
}

#[test]
fn a_get_from_a_late_source_waits_for_its_ready() {
    // The source (rank 1) is late to everything: a get that did not wait for this launch's `ready` would
    // read its copy before the first put filled it.
    let team = team_with_late_rank(3, 1);
    get_between_puts_into_its_source(&mut Communicator::new(&team).unwrap());
}

#[test]
fn two_gets_from_a_late_source_that_rewrites_it_between_them() {
    // Rank 0 gets rank 1's `shared`, rank 1 rewrites it in a kernel of its own, rank 0 gets it again. The
    // second get's wait for rank 1's `ready` is all that orders its reads after the rewrite: a wait the first
    // get's `ready` already met would read the old data while rank 1 (late) has yet to write the new.
    let team = team_with_late_rank(3, 1);
    let mut comm = Communicator::new(&team).unwrap();
    let (mut shared, second) = (filled(&team, 1, LEN), filled(&team, 2, LEN));
    let (mut got1, mut got2) = (SymBuffer::<u32>::new(&team, LEN).unwrap(), SymBuffer::<u32>::new(&team, LEN).unwrap());
    replay(&mut comm, |c| {
        drop(c.get(&mut got1, &shared, Route::Pair { from: 0, to: 1 })?);
        consume_into(c.team(), &second, &mut shared)?;
        drop(c.get(&mut got2, &shared, Route::Pair { from: 0, to: 1 })?);
        Ok(())
    });
    assert_eq!(got1.to_host(0).unwrap(), pattern(1, 1, LEN));
    assert_eq!(got2.to_host(0).unwrap(), pattern(2, 1, LEN));
}

/// The emulator tuning with the TMA off: every thread of a block stores its share of a put itself.
fn without_the_tma() -> ferrocomm_kernels::Tuning {
    ferrocomm_kernels::Tuning { bulk_stage_bytes: 0, ..ferrocomm_kernels::Tuning::emulator() }
}

#[test]
fn an_all_gather_then_a_kernel_reading_it_then_an_all_gather_again() {
    let team = team(3);
    all_gathers_around_a_kernel_reading_them(&mut Communicator::new(&team).unwrap());
}

#[test]
fn an_all_gather_then_a_kernel_reading_it_then_an_all_gather_again_by_loads_and_stores() {
    // Without the TMA every thread of a block stores into the peers' buffers, not only the thread that
    // waited for their `ready`: the block barrier after the waits must order them all.
    let team = team(3);
    all_gathers_around_a_kernel_reading_them(&mut Communicator::with_tuning(&team, without_the_tma()).unwrap());
}

/// All-gather, read the result in a kernel, all-gather other data into the same buffer, read it again.
fn all_gathers_around_a_kernel_reading_them(comm: &mut Communicator<'_>) {
    let team = comm.team();
    let (first, second) = (filled(team, 1, LEN), filled(team, 2, LEN));
    let mut gathered = SymBuffer::<u32>::new(team, 3 * LEN).unwrap();
    let (mut out1, mut out2) = (SymBuffer::new(team, 3 * LEN).unwrap(), SymBuffer::new(team, 3 * LEN).unwrap());
    replay(comm, |c| {
        drop(c.all_gather(&first, &mut gathered)?);
        consume_into(c.team(), &gathered, &mut out1)?;
        drop(c.all_gather(&second, &mut gathered)?);
        consume_into(c.team(), &gathered, &mut out2)
    });
    for (k, out) in [(1, &out1), (2, &out2)] {
        let want: Vec<u32> = (0..3).flat_map(|r| pattern(k, r, LEN)).collect();
        for r in 0..3 {
            assert_eq!(out.to_host(r).unwrap(), want, "all-gather {k}, rank {r}");
        }
    }
}

#[test]
fn a_two_shot_all_reduce_then_a_kernel_reading_the_result() {
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    let mut data = SymBuffer::<f32>::new(&team, LEN).unwrap();
    for r in data.local_ranks() {
        data.copy_from_host(r, &(0..LEN).map(|i| (i + 7 * r) as f32).collect::<Vec<_>>()).unwrap();
    }
    let mut out = SymBuffer::<f32>::new(&team, LEN).unwrap();
    replay(&mut comm, |c| {
        drop(c.all_reduce_with(&mut data, Op::Sum, Algorithm::TwoShot)?);
        consume_into(c.team(), &data, &mut out)
    });
    let want: Vec<f32> = (0..LEN).map(|i| (2 * i + 7) as f32).collect();
    for r in 0..2 {
        assert_eq!(out.to_host(r).unwrap(), want, "rank {r}");
    }
}

fn unsignalled_put_then_read(barrier: bool, team: Team) -> Result<Vec<u32>, Error> {
    let mut comm = Communicator::new(&team).unwrap();
    let src = filled(&team, 1, LEN);
    let mut dst = SymBuffer::<u32>::new(&team, LEN).unwrap();
    let mut out = SymBuffer::<u32>::new(&team, LEN).unwrap();
    let graph = comm
        .capture(|c| {
            drop(put_unsignalled::launch(c.team(), CONSUME, src.bytes(), dst.bytes_mut(), 0, 1)?);
            if barrier {
                drop(c.barrier()?);
            }
            drop(consume::launch(c.team(), CONSUME, dst.bytes(), out.bytes_mut())?);
            Ok(())
        })
        .expect("capture");
    graph.replay()?.wait()?;
    drop(graph);
    out.to_host(1)
}

#[test]
fn a_barrier_orders_a_kernel_s_puts_before_the_next_kernel_s_reads() {
    assert_eq!(unsignalled_put_then_read(true, team(2)).unwrap(), pattern(1, 0, LEN));
}

#[test]
fn a_barrier_waits_for_a_late_rank_s_puts() {
    // The putter (rank 0) is late to everything: a barrier that let rank 1 through on an earlier epoch's
    // arrival would have it read before the put.
    assert_eq!(unsignalled_put_then_read(true, team_with_late_rank(2, 0)).unwrap(), pattern(1, 0, LEN));
}

#[test]
fn without_the_barrier_the_checker_reports_the_read() {
    let e = unsignalled_put_then_read(false, team(2)).unwrap_err();
    let errors = e.device_errors();
    assert!(
        errors.iter().any(|d| matches!(d, DeviceError::Race { at, writer, .. } if at.rank == 1 && writer.rank == 0)),
        "{e}"
    );
}

#[test]
fn a_put_into_a_buffer_an_earlier_kernel_reads_needs_a_handshake() {
    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    let src = filled(&team, 1, LEN);
    let mut dst = filled(&team, 2, LEN);
    let mut out = SymBuffer::<u32>::new(&team, LEN).unwrap();
    // Rank 1 reads its `dst` while rank 0 may already put into it: nothing orders the two kernels.
    let graph = comm
        .capture(|c| {
            drop(consume::launch(c.team(), CONSUME, dst.bytes(), out.bytes_mut())?);
            drop(put_unsignalled::launch(c.team(), CONSUME, src.bytes(), dst.bytes_mut(), 0, 1)?);
            Ok(())
        })
        .expect("capture");
    let e = graph.replay().and_then(|g| g.wait()).unwrap_err();
    // Which of the two the checker sees depends on the schedule, and both are this missing handshake: the
    // put landing after rank 1's read (an `UnorderedPut` by rank 0), or rank 1 reading what the put wrote
    // with nothing ordering the read after it (a `Race` on rank 1 against rank 0's put).
    assert!(
        e.device_errors().iter().any(|d| match d {
            DeviceError::UnorderedPut { at, reader, .. } => at.rank == 0 && reader.rank == 1,
            DeviceError::Race { at, writer, .. } => at.rank == 1 && writer.rank == 0,
            _ => false,
        }),
        "{e}"
    );
    // And nothing but the checker's findings: no panic, no timeout.
    assert!(e.device_errors().iter().all(DeviceError::is_checker_finding), "{e}");
}

#[test]
fn a_ping_pong_then_kernels_reading_what_each_side_received() {
    // The flags' release/acquire order each payload before the flag that announces it, so a later kernel
    // on either side may read its inbox.
    ping_pong_then_read_what_each_side_received(team(2));
}

#[test]
fn a_ping_pong_with_a_late_responder() {
    // The responder (rank 1) raises each flag late: an initiator that stopped waiting one message short
    // would read its inbox before the last reply is announced.
    ping_pong_then_read_what_each_side_received(team_with_late_rank(2, 1));
}

fn ping_pong_then_read_what_each_side_received(team: Team) {
    use ferrocomm::SignalPadBuffer;
    use ferrocomm_kernels::kernels::p2p;
    use ferrocomm_kernels::layout::p2p_pad;

    let mut comm = Communicator::new(&team).unwrap();
    let pad = SignalPadBuffer::new(&team, "ping", p2p_pad::SIGNALS).unwrap();
    let bytes_of = |r: usize| -> Vec<u8> { (0..40).map(|i| (r * 50 + i) as u8).collect() };
    let mut payload = SymBuffer::<u8>::new(&team, 40).unwrap();
    for r in 0..2 {
        payload.copy_from_host(r, &bytes_of(r)).unwrap();
    }
    let mut inbox = SymBuffer::<u8>::new(&team, 40).unwrap();
    let mut times = SymBuffer::<u64>::new(&team, 2).unwrap();
    let mut out = SymBuffer::<u8>::new(&team, 40).unwrap();
    replay(&mut comm, |c| {
        let one = LaunchConfig::single();
        drop(p2p::ping_pong::launch(c.team(), one, &pad, &mut inbox, &payload, 0, 1, 5, &mut times)?);
        consume_into(c.team(), &inbox, &mut out)
    });
    assert_eq!(out.to_host(0).unwrap(), bytes_of(1));
    assert_eq!(out.to_host(1).unwrap(), bytes_of(0));
}

#[test]
fn proxied_puts_then_a_kernel_reading_what_landed() {
    // A host proxy copies for the pushing thread (on the emulator a `memcpy` and a release store): the
    // receiver's wait on the last put's signal orders the copies before its later kernels.
    proxied_puts_then_read_what_landed(team(2));
}

#[test]
fn proxied_puts_from_a_late_sender() {
    // The sender (rank 0) pushes each descriptor late, so the proxy's puts land one by one: a receiver that
    // waited for a put short of the last would go on while the last is still to land, unordered before its
    // next kernel's reads.
    proxied_puts_then_read_what_landed(team_with_late_rank(2, 0));
}

#[test]
fn a_slow_proxy_s_puts_land_before_the_sender_rewrites_their_source() {
    // The sender's kernel ends once the receiver acknowledges the last put, which it does after that put
    // landed; the sender then rewrites `src`. With a proxy that copies slowly, an acknowledgement raised
    // before the receiver's wait would let the rewrite overtake the copies still to come.
    use std::sync::Arc;
    use std::time::Duration;

    use ferrocomm::SignalPadBuffer;
    use ferrocomm_bench::ferro::proxy_thread::{CopyEngine, HostEngine, Proxy};
    use ferrocomm_bench::ferro::ring::Rings;
    use ferrocomm_device::emu::Issued;
    use ferrocomm_kernels::kernels::proxy::{ProxyDescriptor, proxy_pad, proxy_put};

    /// A host engine that waits before each copy: a proxy thread that is slow to serve its rings.
    struct Slow(HostEngine);
    impl CopyEngine for Slow {
        fn issue(&mut self, d: &ProxyDescriptor, issued: Option<&Issued>) -> Result<(), String> {
            std::thread::sleep(Duration::from_millis(20));
            self.0.issue(d, issued)
        }
        fn quiesce(&mut self) -> Result<(), String> {
            self.0.quiesce()
        }
        fn describe(&self) -> String {
            format!("{}, 20 ms late per copy", self.0.describe())
        }
    }

    let team = team(2);
    let mut comm = Communicator::new(&team).unwrap();
    let rings = Arc::new(Rings::host(2, 4).unwrap());
    // SAFETY: as in `proxied_puts_then_read_what_landed`.
    let _proxy = Proxy::start(Arc::clone(&rings), Box::new(Slow(unsafe { HostEngine::new() }))).unwrap();
    let pad = SignalPadBuffer::new(&team, "proxy", proxy_pad::SIGNALS).unwrap();
    let bytes_of = |k: usize, r: usize| -> Vec<u8> { (0..LEN).map(|i| (k * 31 + r * 7 + i) as u8).collect() };
    let (mut src, mut next) = (SymBuffer::<u8>::new(&team, LEN).unwrap(), SymBuffer::<u8>::new(&team, LEN).unwrap());
    for r in 0..2 {
        src.copy_from_host(r, &bytes_of(1, r)).unwrap();
        next.copy_from_host(r, &bytes_of(2, r)).unwrap();
    }
    let mut dst = SymBuffer::<u8>::new(&team, LEN).unwrap();
    let mut times = SymBuffer::<u64>::new(&team, 2).unwrap();
    let mut out = SymBuffer::<u8>::new(&team, LEN).unwrap();
    replay(&mut comm, |c| {
        let one = LaunchConfig::single();
        drop(proxy_put::launch(c.team(), one, rings.param(), &pad, &src, &mut dst, 0, 1, 3, &mut times)?);
        consume_into(c.team(), &next, &mut src)?;
        consume_into(c.team(), &dst, &mut out)
    });
    assert_eq!(out.to_host(1).unwrap(), bytes_of(1, 0), "the proxied puts carried a rewritten source");
}

fn proxied_puts_then_read_what_landed(team: Team) {
    use std::sync::Arc;

    use ferrocomm::SignalPadBuffer;
    use ferrocomm_bench::ferro::proxy_thread::{HostEngine, Proxy};
    use ferrocomm_bench::ferro::ring::Rings;
    use ferrocomm_kernels::kernels::proxy::{proxy_pad, proxy_put};

    let mut comm = Communicator::new(&team).unwrap();
    let rings = Arc::new(Rings::host(2, 4).unwrap());
    // SAFETY: the proxy serves `rings` only while this test's buffers live; the kernel puts between them
    // and signals into `pad`, all host memory on an emulated team.
    let _proxy = Proxy::start(Arc::clone(&rings), Box::new(unsafe { HostEngine::new() })).unwrap();
    let pad = SignalPadBuffer::new(&team, "proxy", proxy_pad::SIGNALS).unwrap();
    let bytes_of = |r: usize| -> Vec<u8> { (0..LEN).map(|i| (r * 7 + i) as u8).collect() };
    let mut src = SymBuffer::<u8>::new(&team, LEN).unwrap();
    for r in 0..2 {
        src.copy_from_host(r, &bytes_of(r)).unwrap();
    }
    let mut dst = SymBuffer::<u8>::new(&team, LEN).unwrap();
    let mut times = SymBuffer::<u64>::new(&team, 2).unwrap();
    let mut out = SymBuffer::<u8>::new(&team, LEN).unwrap();
    replay(&mut comm, |c| {
        let one = LaunchConfig::single();
        drop(proxy_put::launch(c.team(), one, rings.param(), &pad, &src, &mut dst, 0, 1, 3, &mut times)?);
        consume_into(c.team(), &dst, &mut out)
    });
    assert_eq!(out.to_host(1).unwrap(), bytes_of(0));
}

#[test]
fn one_shot_all_reduces_and_staged_exchanges_alternate_with_a_late_rank() {
    // The one-shot all-reduce and the staged exchange share the staging buffer and its signal pad, one launch
    // epoch after the other, each writing the half of the epoch's parity: a rank that has finished one may
    // write the next into the half its late peer is still to read only if the two agree on the parity.
    // 100 elements of 4 bytes: past the LL sizes, within a staging slot (the emulator tuning).
    let team = team_with_late_rank(2, 1);
    alternate_all_reduces_and_all_gathers(&team, 100, Algorithm::OneShot, ferrocomm_kernels::ExchangeTransport::Staged);
}

#[test]
fn ll_all_reduces_and_ll_exchanges_alternate_with_a_late_rank() {
    // The LL all-reduce and the LL exchange share the LL buffer and the signal pad, one launch epoch after the
    // other, each writing the half of the epoch's parity: a rank that has finished one may write the next
    // into the half its late peer is still to read only if the two agree on the parity (the late rank reads
    // each packet late, so the next launch's packets would replace the ones it waits for).
    let team = Team::builder()
        .backend(ferrocomm::Backend::Emulator)
        .world(2)
        // A parity the two disagree on leaves a wait for packets that were overwritten, forever: fail
        // sooner than the emulated teams' usual limit, yet well past a correct wait on a loaded machine.
        .timeout(std::time::Duration::from_secs(15))
        .emulator_late_rank(1, super::LATE)
        .build()
        .expect("emulated team");
    // 16 elements of 4 bytes: LL sizes (the emulator tuning).
    alternate_all_reduces_and_all_gathers(&team, 16, Algorithm::LlOneShot, ferrocomm_kernels::ExchangeTransport::Ll);
}

/// Three rounds of an all-reduce of `n` f32 by `algorithm` and an all-gather of `n` u32 (which must take
/// `transport`), replayed from one graph on a team of two, then every result checked.
fn alternate_all_reduces_and_all_gathers(
    team: &Team,
    n: usize,
    algorithm: Algorithm,
    transport: ferrocomm_kernels::ExchangeTransport,
) {
    let mut comm = Communicator::new(team).unwrap();
    let values = |k: usize, r: usize| -> Vec<f32> { (0..n).map(|i| (k * 1000 + r * 100 + i) as f32).collect() };
    let mut sums: Vec<SymBuffer<f32>> = (0..3).map(|_| SymBuffer::new(team, n).unwrap()).collect();
    for (k, sum) in sums.iter_mut().enumerate() {
        for r in 0..2 {
            sum.copy_from_host(r, &values(k, r)).unwrap();
        }
    }
    let sources: Vec<SymBuffer<u32>> = (0..3).map(|k| filled(team, k as u32 + 1, n)).collect();
    let mut gathered: Vec<SymBuffer<u32>> = (0..3).map(|_| SymBuffer::new(team, 2 * n).unwrap()).collect();
    assert_eq!(comm.exchange_transport(n * 4), transport);
    replay(&mut comm, |c| {
        for ((sum, source), gathered) in sums.iter_mut().zip(&sources).zip(&mut gathered) {
            drop(c.all_reduce_with(sum, Op::Sum, algorithm)?);
            drop(c.all_gather(source, gathered)?);
        }
        Ok(())
    });
    for k in 0..3 {
        let want: Vec<f32> = (0..n).map(|i| values(k, 0)[i] + values(k, 1)[i]).collect();
        let want_gathered: Vec<u32> = (0..2).flat_map(|r| pattern(k as u32 + 1, r, n)).collect();
        for r in 0..2 {
            assert_eq!(sums[k].to_host(r).unwrap(), want, "all-reduce {k}, rank {r}");
            assert_eq!(gathered[k].to_host(r).unwrap(), want_gathered, "all-gather {k}, rank {r}");
        }
    }
}
