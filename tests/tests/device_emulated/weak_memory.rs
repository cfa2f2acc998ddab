//! The emulator's weak memory (`ferrocomm_device::emu::weak`): each emulated thread's weak and relaxed
//! stores wait in a store buffer and reach memory late and out of order, drained at releases, fences,
//! barriers and seeded random points. These tests show that the model can show what a GPU may show — a
//! relaxed flag before its data, two relaxed stores in either order, a release that does not cover the
//! stores of threads that did not meet it at a barrier — that correct synchronisation never shows it, that
//! the checker still reports the unsynchronised reads, with scopes, and that a seed replays the decisions.
//!
//! Outcomes that need a stale read are asserted over many launches (each with its own seed), never for one.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ferrocomm_device::abi::{ErrorKind, ErrorRecord};
use ferrocomm_device::prelude::*;

use super::support::{Sym, TIMEOUT_NS, arg, pad, run, run_ok};

/// The 1-based line of this file that contains `marker` (and is not this lookup).
fn line_of(marker: &str) -> u32 {
    let pos = include_str!("weak_memory.rs")
        .lines()
        .position(|l| l.contains(marker) && !l.contains("line_of("))
        .expect("marker line");
    pos as u32 + 1
}

/// Runs `kernel` on `world` ranks and returns every rank's records, failing on a trapped launch or a
/// timeout (a model that lost a store for good would show as one).
fn records_of(world: u32, grid: [u32; 3], block: [u32; 3], kernel: &(dyn Fn() + Sync)) -> Vec<ErrorRecord> {
    let mut all = Vec::new();
    for (rank, o) in run(world, grid, block, 0, TIMEOUT_NS, kernel).into_iter().enumerate() {
        if let Err(e) = &o.result {
            panic!("rank {rank}: {e}");
        }
        let records = o.records();
        assert!(
            records.iter().all(|r| r.error_kind() == Some(ErrorKind::Race)),
            "rank {rank} recorded more than races: {records:?}"
        );
        all.extend(records);
    }
    all
}

/// Data words of one message.
const WORDS: usize = 4;
/// Messages per launch.
const TRIALS: u64 = 4;
/// Launches of each case that asserts a stale read can happen (each launch has its own seed).
const LAUNCHES: usize = 200;

/// Word `k` of message `seq`: consecutive messages differ in every word.
fn message(seq: u64, k: usize) -> u64 {
    seq * 1000 + k as u64
}

/// Message passing between rank 0 (writer) and rank 1 (reader), one thread each, `TRIALS` messages: the
/// writer stores the words weakly into rank 1's copy and raises the flag (release, or relaxed); the reader
/// waits on the flag (acquire, or relaxed), reads the words and acknowledges with a release, which the
/// writer waits for before the next message. Returns the stale reads and the records.
fn message_passing(release: bool) -> (u64, Vec<ErrorRecord>) {
    let data = Sym::new(2, WORDS, 0, |_, _| 0u64);
    let signals = pad(2, 2);
    let (d_raw, p_raw) = (data.raws(2), signals.raws(2));
    let stale = AtomicU64::new(0);
    let records = records_of(2, [1, 1, 1], [1, 1, 1], &|| {
        let rank = team::rank();
        let data: SymSliceMut<u64> = arg(d_raw[rank as usize]);
        let pad: SignalPad = arg(p_raw[rank as usize]);
        for seq in 1..=TRIALS {
            if rank == 0 {
                let inbox = data.peer(1);
                for k in 0..WORDS {
                    // SAFETY: in bounds; rank 1 reads the words between the flag and its ack.
                    unsafe { inbox.write(k, message(seq, k)) };
                }
                if release {
                    pad.peer(1, 0).set_release(seq);
                } else {
                    pad.peer(1, 0).set_relaxed(seq);
                }
                // While it waits, the writer's buffered stores drain at seeded random points.
                pad.local(1).wait_ge(seq);
            } else {
                if release {
                    pad.local(0).wait_ge(seq);
                } else {
                    pad.local(0).wait_relaxed(Cmp::Ge, seq);
                }
                let inbox = data.local();
                let mut fresh = true;
                for k in 0..WORDS {
                    // SAFETY: in bounds; ordered after the writes only with release / acquire.
                    fresh &= unsafe { inbox.read(k) } == message(seq, k); // MP-READ
                }
                stale.fetch_add(u64::from(!fresh), Ordering::Relaxed);
                pad.peer(0, 1).set_release(seq);
            }
        }
    });
    (stale.into_inner(), records)
}

#[test]
fn a_relaxed_flag_can_show_stale_data_and_is_reported_as_a_race() {
    let line = line_of("// MP-READ");
    let mut stale = 0;
    for _ in 0..LAUNCHES {
        let (s, records) = message_passing(false);
        stale += s;
        // The checker does not depend on the stale read: nothing orders the reads after the writes.
        assert!(
            records.iter().any(|r| (r.error_kind(), r.rank, r.block, r.thread, r.line)
                == (Some(ErrorKind::Race), 1, [0, 0, 0], [0, 0, 0], line)),
            "the relaxed flag's reads are not reported: {records:?}"
        );
        if stale > 0 {
            break;
        }
    }
    assert!(stale > 0, "{LAUNCHES} launches of message passing with a relaxed flag never read stale data");
}

#[test]
fn a_release_flag_never_shows_stale_data_and_is_not_reported() {
    for _ in 0..LAUNCHES / 4 {
        let (stale, records) = message_passing(true);
        assert_eq!(stale, 0, "stale data after acquiring a release-published flag");
        assert!(records.is_empty(), "{records:?}");
    }
}

/// Threads of rank 0's block each store one word into rank 1's copy; thread 0 raises the flag with a
/// release once it knows (`barrier`: from `sync_threads`; else from a relaxed counter, which orders nothing)
/// that every thread has stored. Rank 1 waits (acquire) and reads every word. Returns the stale reads and
/// the records.
fn block_then_release(barrier: bool) -> (u64, Vec<ErrorRecord>) {
    const THREADS: u32 = 8;
    let data = Sym::new(2, THREADS as usize, 0, |_, _| 0u64);
    let counter = Sym::new(2, 1, 0, |_, _| 0u64);
    let signals = pad(2, 2);
    let (d_raw, c_raw, p_raw) = (data.raws(2), counter.raws(2), signals.raws(2));
    let stale = AtomicU64::new(0);
    let records = records_of(2, [1, 1, 1], [THREADS, 1, 1], &|| {
        let (rank, t) = (team::rank(), thread_rank() as usize);
        let data: SymSliceMut<u64> = arg(d_raw[rank as usize]);
        let pad: SignalPad = arg(p_raw[rank as usize]);
        // SAFETY: rank 0's counter, only accessed atomically during the launch.
        let stored = unsafe { GpuAtomicU64::from_ptr(c_raw[rank as usize].local) };
        if rank == 0 {
            // SAFETY: in bounds; rank 1 reads after the flag.
            unsafe { data.peer(1).write(t, 7 + t as u64) };
            if barrier {
                sync_threads();
            } else {
                // The bug: thread 0 learns that the stores happened, not that they are visible.
                stored.fetch_add_relaxed(1);
            }
            if t == 0 {
                while !barrier && stored.load_relaxed() < u64::from(THREADS) {}
                pad.peer(1, 0).set_release(1);
            }
            // Every thread stays until the reader is done, draining at seeded points meanwhile.
            pad.local(1).wait_ge(1);
        } else if t == 0 {
            pad.local(0).wait_ge(1);
            let mine = data.local();
            for k in 0..THREADS as usize {
                // SAFETY: in bounds; ordered after every store only with the barrier.
                let fresh = unsafe { mine.read(k) } == 7 + k as u64; // BLOCK-READ
                stale.fetch_add(u64::from(!fresh), Ordering::Relaxed);
            }
            pad.peer(0, 1).set_release(1);
        }
    });
    (stale.into_inner(), records)
}

#[test]
fn a_release_without_the_block_barrier_can_show_stale_data_and_is_reported() {
    let line = line_of("// BLOCK-READ");
    let mut stale = 0;
    for _ in 0..LAUNCHES {
        let (s, records) = block_then_release(false);
        stale += s;
        assert!(
            records.iter().any(|r| (r.error_kind(), r.rank, r.line) == (Some(ErrorKind::Race), 1, line)),
            "the reads not covered by the release are not reported: {records:?}"
        );
        if stale > 0 {
            break;
        }
    }
    assert!(stale > 0, "{LAUNCHES} launches of a release without a block barrier never read stale data");
}

#[test]
fn a_release_after_the_block_barrier_covers_every_thread() {
    for _ in 0..LAUNCHES / 4 {
        let (stale, records) = block_then_release(true);
        assert_eq!(stale, 0, "stale data after a barrier and a release");
        assert!(records.is_empty(), "{records:?}");
    }
}

#[test]
fn two_relaxed_stores_become_visible_in_either_order() {
    // Rank 0 stores x = 1 then y = 1 (relaxed, into rank 1's pad); rank 1 polls y then x until it sees
    // either. On a strongly ordered host "y without x" never happens; with store buffers both "x without
    // y" and "y without x" must show up across seeds.
    const X: usize = 0;
    const Y: usize = 1;
    const ACK: usize = 2;
    let (mut x_first, mut y_first) = (0, 0);
    for _ in 0..LAUNCHES * 2 {
        let signals = pad(2, 3);
        let p_raw = signals.raws(2);
        let seen = Mutex::new((0, 0));
        records_of(2, [1, 1, 1], [1, 1, 1], &|| {
            let pad: SignalPad = arg(p_raw[team::rank() as usize]);
            if team::rank() == 0 {
                pad.peer(1, X).set_relaxed(1);
                pad.peer(1, Y).set_relaxed(1);
                pad.local(ACK).wait_ge(1);
            } else {
                let (x, y) = loop {
                    let y = pad.local(Y).load_relaxed();
                    let x = pad.local(X).load_relaxed();
                    if x != 0 || y != 0 {
                        break (x, y);
                    }
                };
                *seen.lock().unwrap() = (x, y);
                pad.peer(0, ACK).set_release(1);
            }
        });
        match seen.into_inner().unwrap() {
            (1, 0) => x_first += 1,
            (0, 1) => y_first += 1,
            _ => {}
        }
        if x_first > 0 && y_first > 0 {
            return;
        }
    }
    panic!("relaxed stores to two addresses seen alone: x {x_first} times, y {y_first} times; both must happen");
}

/// Which thread reads what rank 0 block 0 thread 0 published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    SameBlock,
    OtherBlock,
    OtherRank,
}

/// Rank 0 block 0 thread 0 stores into rank 1's copy, fences with `fence` and raises a flag relaxed; the
/// `reader` waits on the flag (acquire) and reads the copy, which must hold the stores when the fence's
/// scope includes it (`ordered`). Launched as 2 ranks of 2 blocks of 2 threads.
fn scoped_publication(fence: fn(), reader: Reader, ordered: bool) -> Vec<ErrorRecord> {
    let data = Sym::new(2, WORDS, 0, |_, _| 0u64);
    let signals = pad(2, 1);
    let (d_raw, p_raw) = (data.raws(2), signals.raws(2));
    let (reader_rank, reader_block, reader_thread) = match reader {
        Reader::SameBlock => (0, 0, 1),
        Reader::OtherBlock => (0, 1, 0),
        Reader::OtherRank => (1, 0, 0),
    };
    records_of(2, [2, 1, 1], [2, 1, 1], &|| {
        let (rank, b, t) = (team::rank(), block_rank(), thread_rank());
        let data: SymSliceMut<u64> = arg(d_raw[rank as usize]);
        let pad: SignalPad = arg(p_raw[rank as usize]);
        if (rank, b, t) == (0, 0, 0) {
            for k in 0..WORDS {
                // SAFETY: in bounds; the reader reads after the flag.
                unsafe { data.peer(1).write(k, message(1, k)) };
            }
            fence();
            pad.peer(reader_rank, 0).set_relaxed(1);
        } else if (rank, b, t) == (reader_rank, reader_block, reader_thread) {
            pad.local(0).wait_ge(1);
            for k in 0..WORDS {
                // SAFETY: in bounds; ordered after the writes when the fence's scope includes this thread.
                let v = unsafe { data.peer(1).read(k) }; // SCOPED-READ
                // Outside the fence's scope the stores may not be visible yet (the old zero).
                assert!(v == message(1, k) || (!ordered && v == 0), "word {k} is {v}");
            }
        }
    })
}

#[test]
fn a_fence_orders_only_for_the_threads_of_its_scope() {
    let line = line_of("// SCOPED-READ");
    type Case = (&'static str, fn(), Reader, bool);
    let cases: [Case; 9] = [
        ("cta", fence_acq_rel_cta, Reader::SameBlock, false),
        ("cta", fence_acq_rel_cta, Reader::OtherBlock, true),
        ("cta", fence_acq_rel_cta, Reader::OtherRank, true),
        ("gpu", fence_acq_rel_gpu, Reader::SameBlock, false),
        ("gpu", fence_acq_rel_gpu, Reader::OtherBlock, false),
        ("gpu", fence_acq_rel_gpu, Reader::OtherRank, true),
        ("sys", fence_acq_rel_sys, Reader::SameBlock, false),
        ("sys", fence_acq_rel_sys, Reader::OtherBlock, false),
        ("sys", fence_acq_rel_sys, Reader::OtherRank, false),
    ];
    for (scope, fence, reader, race) in cases {
        let records = scoped_publication(fence, reader, !race);
        let reported = records.iter().any(|r| r.error_kind() == Some(ErrorKind::Race) && r.line == line);
        assert_eq!(reported, race, "a {scope}-scope fence read by a thread of {reader:?}: {records:?}");
    }
}

#[test]
fn a_gpu_scope_release_store_publishes_within_its_rank_only() {
    // The same with the release in the atomic itself: a `.gpu` release store of a flag in rank 0's memory,
    // acquired by another block of rank 0 (ordered) and by rank 1 (not ordered: a `.gpu` release says
    // nothing to another GPU).
    let line = line_of("// GPU-RELEASE-READ");
    for (other_rank, race) in [(false, false), (true, true)] {
        let data = Sym::new(2, WORDS, 0, |_, _| 0u64);
        let flag = Sym::new(2, 1, 0, |_, _| 0u64);
        let (d_raw, f_raw) = (data.raws(2), flag.raws(2));
        let records = records_of(2, [2, 1, 1], [1, 1, 1], &|| {
            let (rank, b) = (team::rank(), block_rank());
            let data: SymSliceMut<u64> = arg(d_raw[rank as usize]);
            // SAFETY: rank 0's flag word, accessed only atomically during the launch (rank 1 reads it through
            // the peer table, as peer memory).
            let flag = unsafe { GpuAtomicU64::from_ptr(f_raw[0].local) };
            let reader = if other_rank { (1, 0) } else { (0, 1) };
            if (rank, b) == (0, 0) {
                for k in 0..WORDS {
                    // SAFETY: in bounds; the reader reads after the flag.
                    unsafe { data.peer(1).write(k, message(1, k)) };
                }
                flag.store_release(1);
            } else if (rank, b) == reader {
                while flag.load_acquire() == 0 {}
                for k in 0..WORDS {
                    // SAFETY: in bounds.
                    let _ = unsafe { data.peer(1).read(k) }; // GPU-RELEASE-READ
                }
            }
        });
        let reported = records.iter().any(|r| r.error_kind() == Some(ErrorKind::Race) && r.line == line);
        assert_eq!(reported, race, "other rank {other_rank}: {records:?}");
    }
}

#[test]
fn one_seed_replays_the_store_buffer_of_a_thread_that_depends_on_no_other() {
    // One thread stores 8 relaxed words, passes 8 more points (relaxed loads of another word), then looks
    // at memory with plain loads, which bypass its buffer and see what other threads would: which stores had
    // drained. The decisions depend only on the thread's own events and its launch's seed, and a host
    // thread's launches get the same seeds in the same order (the base seed and a count of its launches), so
    // two host threads making the same launches see the same sequence — while the launches differ.
    const STORES: usize = 8;
    const LAUNCHES_PER_THREAD: usize = 48;
    fn masks() -> Vec<u32> {
        (0..LAUNCHES_PER_THREAD)
            .map(|_| {
                let words = Sym::new(1, STORES + 1, 0, |_, _| 0u64);
                // An address, so the kernel closure is `Sync`.
                let base = words.raws(1)[0].local as usize;
                let mask = AtomicUsize::new(0);
                records_of(1, [1, 1, 1], [1, 1, 1], &|| {
                    let word = |i: usize| {
                        // SAFETY: in bounds; accessed only by this thread during the launch.
                        unsafe { SysAtomicU64::from_ptr((base as *mut u64).add(i)) }
                    };
                    for i in 0..STORES {
                        word(i).store_relaxed(1);
                    }
                    for _ in 0..8 {
                        let _ = word(STORES).load_relaxed();
                    }
                    let visible = (0..STORES)
                        // SAFETY: in bounds; a plain load of memory, outside the thread's buffer.
                        .filter(|&i| unsafe { std::ptr::read_volatile((base as *const u64).add(i)) } != 0)
                        .fold(0, |m, i| m | 1 << i);
                    mask.store(visible, Ordering::Relaxed);
                });
                // The thread's end drained the rest.
                assert!(words.copy(0)[..STORES].iter().all(|&w| w == 1));
                mask.into_inner() as u32
            })
            .collect()
    }
    let first = std::thread::spawn(masks).join().unwrap();
    let second = std::thread::spawn(masks).join().unwrap();
    assert_eq!(first, second, "one seed, two outcomes");
    assert!(first.iter().any(|&m| m != first[0]), "every seed drained the same stores: {first:?}");
    // Out of order: some store visible while an earlier one is not.
    assert!(first.iter().any(|&m| m != 0 && (m + 1) & m != 0), "stores drained only in order: {first:?}");
}

/// A lane waiting in a warp shuffle lets its buffered stores go, as a GPU makes stores visible eventually
/// whatever their thread does next: lanes 0 and 2 each send a vector as LL packets into their own rank's
/// buffer and go on to a shuffle, which lane 1 joins only once `poll_vectors` has both vectors (the fused
/// decode step's tile owners poll packets that lanes of their own block sent). A buffer that kept the
/// packets while their lanes waited would hang lane 1 until its timeout, on most seeds. Also: the vectors
/// past `live` come back zero.
#[test]
fn a_lane_waiting_in_a_shuffle_does_not_hold_back_its_stores() {
    use ferrocomm_device::ll::ll_flag;
    let packets = Sym::new(1, 4, 0, |_, _| LlPacket::default());
    let epochs = pad(1, 0);
    let (packets_raw, epochs_raw) = (packets.raws(1), epochs.raws(1));
    let kernel = || {
        let packets: SymSliceMut<LlPacket> = arg(packets_raw[0]);
        let epochs: SignalPad = arg(epochs_raw[0]);
        let session = epochs.session();
        let (flag, epoch) = (ll_flag(session.epoch()), session.epoch() as u32);
        let lane = lane_id();
        if lane == 0 || lane == 2 {
            packets.local().store_vector(lane as usize / 2, [epoch, lane, 7, 8], flag);
        }
        if lane == 1 {
            let got = packets.local().as_const().poll_vectors::<3>(|q| q, 2, flag, 4);
            assert_eq!(got, [[epoch, 0, 7, 8], [epoch, 2, 7, 8], [0; 4]], "launch {epoch}");
        }
        assert_eq!(shfl_idx_sync(warp_mask(), lane, 1), 1);
    };
    for _ in 0..LAUNCHES / 10 {
        run_ok(1, [1, 1, 1], [32, 1, 1], 0, &kernel);
    }
}
