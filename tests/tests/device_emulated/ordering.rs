//! Ordering bugs the emulator shows in the data a kernel reads, with the checker off: a release narrowed
//! to a scope that leaves the reader out (`.sys` → `.gpu`, `.sys` → `.cta`, `.gpu` → `.cta`), a bulk store
//! of shared memory written without `fence.proxy.async`, and an mbarrier that expects the wrong number of
//! transaction bytes. Each correct kernel reads the right data over many launches (each with its own seed)
//! and, where the checker runs, is not reported; each weakened one reads wrong data within a bounded
//! number of launches.

use std::sync::atomic::{AtomicU64, Ordering};

use ferrocomm_device::abi::{ErrorBuffer, LaunchCtx};
use ferrocomm_device::emu::{EmuError, TeamLaunch};
use ferrocomm_device::prelude::*;

use super::support::{Sym, TIMEOUT_NS, arg, pad};

/// Launches of a correct kernel, each of which must read the right data.
const CORRECT_LAUNCHES: usize = 40;
/// Most launches of a weakened kernel before it must have read wrong data once.
const WEAK_LAUNCHES: usize = 100;

/// Runs `kernel` on `world` ranks as one team launch, with the checker on or off; returns every rank's
/// result and error records.
fn launch(
    world: u32,
    grid: [u32; 3],
    block: [u32; 3],
    dyn_shared: usize,
    timeout_ns: u64,
    checked: bool,
    kernel: &(dyn Fn() + Sync),
) -> Vec<(Result<(), EmuError>, u32)> {
    let mut buffers: Vec<Box<ErrorBuffer>> = (0..world).map(|_| Box::new(ErrorBuffer::ZEROED)).collect();
    let addrs: Vec<usize> = buffers.iter_mut().map(|b| &mut **b as *mut ErrorBuffer as usize).collect();
    let team = TeamLaunch::with_checker(world, grid, block, dyn_shared, checked);
    assert_eq!(team.is_checked(), checked);
    let results: Vec<Result<(), EmuError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let ctx = LaunchCtx { rank, world, timeout_ns, errors: addrs[rank as usize] as *mut ErrorBuffer };
                let team = team.clone();
                s.spawn(move || team.run_rank(ctx, kernel))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("launch thread")).collect()
    });
    results.into_iter().zip(buffers).map(|(r, b)| (r, b.count)).collect()
}

/// Runs `kernel` and requires every rank to end cleanly; with the checker on, also without any record.
fn launch_ok(
    world: u32,
    grid: [u32; 3],
    block: [u32; 3],
    dyn_shared: usize,
    checked: bool,
    kernel: &(dyn Fn() + Sync),
) {
    for (rank, (result, records)) in
        launch(world, grid, block, dyn_shared, TIMEOUT_NS, checked, kernel).into_iter().enumerate()
    {
        if let Err(e) = result {
            panic!("rank {rank}: {e}");
        }
        assert_eq!(records, 0, "rank {rank} recorded errors");
    }
}

/// How the writing block's thread 0 publishes its block's stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publish {
    /// A `.sys` release store of the flag (`st.release.sys`).
    ReleaseSys,
    /// A `.gpu` release store of the flag (`st.release.gpu`).
    ReleaseGpu,
    /// `fence.acq_rel.sys`, then a relaxed store of the flag.
    FenceSys,
    /// `fence.acq_rel.gpu`, then a relaxed store of the flag.
    FenceGpu,
    /// `fence.acq_rel.cta`, then a relaxed store of the flag.
    FenceCta,
}

/// Which thread reads what rank 0's block 0 published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// Rank 0, block 0, thread 1: inside every scope.
    SameBlock,
    /// Rank 0, block 1: inside `.gpu` and `.sys`.
    OtherBlock,
    /// Rank 1: inside `.sys` only.
    OtherRank,
}

impl Reader {
    fn at(self) -> (u32, u32, u32) {
        match self {
            Reader::SameBlock => (0, 0, 1),
            Reader::OtherBlock => (0, 1, 0),
            Reader::OtherRank => (1, 0, 0),
        }
    }
}

/// Threads of the writing block.
const WRITERS: u32 = 4;
/// Words each writer stores per message.
const WORDS_EACH: usize = 4;
/// Messages per launch.
const MESSAGES: u64 = 3;

/// Word `k` of message `seq`.
fn message(seq: u64, k: usize) -> u64 {
    (seq << 32) | (k as u64 + 1)
}

/// Message passing from rank 0's block 0 to `reader`, launched as 2 ranks of 2 blocks of [`WRITERS`]
/// threads: each writer stores its words into the reader's rank's copy, the block meets at a barrier,
/// thread 0 publishes a flag as `publish` says; the reader waits on the flag (acquire), reads every word
/// and acknowledges with a `.sys` release, which the writers wait for before the next message. Returns
/// the words the reader read stale.
fn message_passing(publish: Publish, reader: Reader, checked: bool) -> u64 {
    let words = WRITERS as usize * WORDS_EACH;
    let data = Sym::new(2, words, 0, |_, _| 0u64);
    let signals = pad(2, 2);
    let (d_raw, p_raw) = (data.raws(2), signals.raws(2));
    let stale = AtomicU64::new(0);
    let (reader_rank, reader_block, reader_thread) = reader.at();
    launch_ok(2, [2, 1, 1], [WRITERS, 1, 1], 0, checked, &|| {
        let (rank, b, t) = (team::rank(), block_rank(), thread_rank());
        let data: SymSliceMut<u64> = arg(d_raw[rank as usize]);
        let pad: SignalPad = arg(p_raw[rank as usize]);
        let (flag, ack) = (pad.peer(reader_rank, 0), pad.peer(0, 1));
        for seq in 1..=MESSAGES {
            if (rank, b) == (0, 0) {
                let inbox = data.peer(reader_rank);
                for k in 0..WORDS_EACH {
                    let i = t as usize * WORDS_EACH + k;
                    // SAFETY: in bounds; the reader reads the words between the flag and its ack.
                    unsafe { inbox.write(i, message(seq, i)) };
                }
                sync_threads();
                if t == 0 {
                    // SAFETY: the flag is a live, aligned word of the reader's pad.
                    let gpu = unsafe { GpuAtomicU64::from_ptr(flag.as_ptr()) };
                    match publish {
                        Publish::ReleaseSys => flag.set_release(seq),
                        Publish::ReleaseGpu => gpu.store_release(seq),
                        Publish::FenceSys => {
                            fence_acq_rel_sys();
                            flag.set_relaxed(seq);
                        }
                        Publish::FenceGpu => {
                            fence_acq_rel_gpu();
                            flag.set_relaxed(seq);
                        }
                        Publish::FenceCta => {
                            fence_acq_rel_cta();
                            flag.set_relaxed(seq);
                        }
                    }
                }
            }
            if (rank, b, t) == (reader_rank, reader_block, reader_thread) {
                pad.local(0).wait_ge(seq);
                let inbox = data.local();
                for i in 0..words {
                    // SAFETY: in bounds; ordered after the writes when the release's scope holds the reader.
                    let fresh = unsafe { inbox.read(i) } == message(seq, i);
                    stale.fetch_add(u64::from(!fresh), Ordering::Relaxed);
                }
                ack.set_release(seq);
            }
            if (rank, b) == (0, 0) {
                // The writers stay until the reader is done: their rank's end would publish everything.
                pad.local(1).wait_ge(seq);
            }
        }
    });
    stale.into_inner()
}

/// Runs the correct case `CORRECT_LAUNCHES` times, checked on every other launch: never stale.
fn never_stale(publish: Publish, reader: Reader) {
    for n in 0..CORRECT_LAUNCHES {
        let stale = message_passing(publish, reader, n % 2 == 0);
        assert_eq!(stale, 0, "{publish:?} read by {reader:?}: {stale} stale word(s) in launch {n}");
    }
}

/// Runs the weakened case unchecked until it reads a stale word, at most `WEAK_LAUNCHES` times.
fn shows_stale(publish: Publish, reader: Reader) {
    for _ in 0..WEAK_LAUNCHES {
        if message_passing(publish, reader, false) > 0 {
            return;
        }
    }
    panic!("{publish:?} read by {reader:?}: {WEAK_LAUNCHES} launches never read a stale word");
}

#[test]
fn a_sys_release_publishes_a_whole_block_to_every_rank() {
    for publish in [Publish::ReleaseSys, Publish::FenceSys] {
        never_stale(publish, Reader::OtherRank);
    }
}

#[test]
fn a_release_narrowed_from_sys_to_gpu_shows_stale_data_on_another_rank() {
    shows_stale(Publish::ReleaseGpu, Reader::OtherRank);
    shows_stale(Publish::FenceGpu, Reader::OtherRank);
}

#[test]
fn a_gpu_release_publishes_to_every_block_of_its_rank() {
    for publish in [Publish::ReleaseGpu, Publish::FenceGpu] {
        never_stale(publish, Reader::OtherBlock);
    }
}

#[test]
fn a_fence_narrowed_to_cta_shows_stale_data_outside_its_block() {
    // From `.gpu`: another block of the rank; from `.sys`: another rank.
    shows_stale(Publish::FenceCta, Reader::OtherBlock);
    shows_stale(Publish::FenceCta, Reader::OtherRank);
}

#[test]
fn a_cta_fence_publishes_to_its_own_block() {
    never_stale(Publish::FenceCta, Reader::SameBlock);
}

/// A release carries what its thread observed (cumulativity): block 0 of rank 0 publishes to block 1 with
/// a `.gpu` release, and block 1's thread, having acquired it, publishes to rank 1 with a `.sys` release;
/// rank 1 reads block 0's words. `relay` is block 1's release (`.sys`: correct; `.gpu`: the chain's
/// second link narrowed). Returns the stale words.
fn relay(relay_scope: Publish) -> u64 {
    const WORDS: usize = 8;
    let data = Sym::new(2, WORDS, 0, |_, _| 0u64);
    let signals = pad(2, 2);
    let (d_raw, p_raw) = (data.raws(2), signals.raws(2));
    let stale = AtomicU64::new(0);
    launch_ok(2, [2, 1, 1], [1, 1, 1], 0, false, &|| {
        let (rank, b) = (team::rank(), block_rank());
        let data: SymSliceMut<u64> = arg(d_raw[rank as usize]);
        let pad: SignalPad = arg(p_raw[rank as usize]);
        match (rank, b) {
            (0, 0) => {
                for i in 0..WORDS {
                    // SAFETY: in bounds; rank 1 reads after the chain of flags.
                    unsafe { data.peer(1).write(i, message(1, i)) };
                }
                // SAFETY: a live, aligned word of rank 0's pad.
                unsafe { GpuAtomicU64::from_ptr(pad.local(0).as_ptr()) }.store_release(1);
                pad.local(1).wait_ge(1);
            }
            (0, 1) => {
                pad.local(0).wait_ge(1);
                let flag = pad.peer(1, 0);
                match relay_scope {
                    Publish::ReleaseSys => flag.set_release(1),
                    // SAFETY: a live, aligned word of rank 1's pad.
                    _ => unsafe { GpuAtomicU64::from_ptr(flag.as_ptr()) }.store_release(1),
                }
                pad.local(1).wait_ge(1);
            }
            (1, 0) => {
                pad.local(0).wait_ge(1);
                for i in 0..WORDS {
                    // SAFETY: in bounds.
                    let fresh = unsafe { data.local().read(i) } == message(1, i);
                    stale.fetch_add(u64::from(!fresh), Ordering::Relaxed);
                }
                pad.peer(0, 1).set_release(1);
            }
            _ => {}
        }
    });
    stale.into_inner()
}

#[test]
fn a_release_carries_what_its_thread_acquired_from_a_narrower_one() {
    for n in 0..CORRECT_LAUNCHES {
        assert_eq!(relay(Publish::ReleaseSys), 0, "launch {n}");
    }
    assert!((0..WEAK_LAUNCHES).any(|_| relay(Publish::ReleaseGpu) > 0), "a `.gpu` relay never read stale data");
}
