//! Ordering bugs the emulator shows in the data a kernel reads, with the checker off: a release narrowed
//! to a scope that leaves the reader out (`.sys` → `.gpu`, `.sys` → `.cta`, `.gpu` → `.cta`), a bulk store
//! of shared memory written without `fence.proxy.async`, and an mbarrier that expects the wrong number of
//! transaction bytes. Each correct kernel reads the right data over many launches (each with its own seed)
//! and, where the checker runs, is not reported; each weakened one reads wrong data within a bounded
//! number of launches.

use std::sync::atomic::{AtomicU64, Ordering};

use ferrocomm_device::abi::{ErrorBuffer, LaunchCtx};
use ferrocomm_device::bulk;
use ferrocomm_device::emu::{EmuError, TeamLaunch};
use ferrocomm_device::fence::{fence_proxy_async, fence_proxy_async_global, fence_proxy_async_shared_cta};
use ferrocomm_device::mem::GlobalPtr;
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

/// How the writers of a stage hand it to the async proxy before thread 0's bulk store reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProxyFence {
    /// `fence.proxy.async.shared::cta` by every writer (the protocol).
    SharedCta,
    /// `fence.proxy.async` (every state space) by every writer.
    Generic,
    /// `fence.proxy.async.global`: the wrong state space.
    Global,
    /// No proxy fence.
    None,
}

/// Threads that write the stage.
const STAGE_WRITERS: usize = 4;
/// Bytes each writes.
const STAGE_SHARE: usize = 32;
/// Rounds per launch, each into its own part of the destination.
const ROUNDS: usize = 2;

/// Byte `i` of round `round`'s stage.
fn stage_byte(round: usize, i: usize) -> u8 {
    (i as u8).wrapping_mul(7).wrapping_add(round as u8 * 64 + 1)
}

/// Each round, every thread writes its share of a shared-memory stage with generic stores, fences as
/// `fence` says, and the block meets at a barrier; thread 0 bulk-stores the stage to global memory and
/// waits for it. Returns the destination's bytes that differ from what the threads wrote.
fn stage_through_the_async_proxy(fence: ProxyFence) -> usize {
    let stage_bytes = STAGE_WRITERS * STAGE_SHARE;
    let dst = Sym::new(1, ROUNDS * stage_bytes, 0, |_, _| 0xEEu8);
    let dst_sl = dst.slice(0);
    launch_ok(1, [1, 1, 1], [STAGE_WRITERS as u32, 1, 1], stage_bytes, false, &|| {
        let dst: &mut [u8] = arg(dst_sl);
        let t = thread_rank() as usize;
        let (stage, _) = bulk::dynamic_shared_window();
        for round in 0..ROUNDS {
            for i in t * STAGE_SHARE..(t + 1) * STAGE_SHARE {
                // SAFETY: this thread's share of the stage, which no bulk store reads now (the last one was
                // waited for before the barrier that ended the previous round).
                unsafe { ((stage.addr() + i) as *mut u8).write_volatile(stage_byte(round, i)) };
            }
            match fence {
                ProxyFence::SharedCta => fence_proxy_async_shared_cta(),
                ProxyFence::Generic => fence_proxy_async(),
                ProxyFence::Global => fence_proxy_async_global(),
                ProxyFence::None => {}
            }
            sync_threads();
            if t == 0 {
                // SAFETY: the round's part of the destination, a 16-byte aligned kernel argument of
                // `stage_bytes` bytes; the stage is the launch's dynamic shared memory, 16-byte aligned.
                unsafe {
                    let to = GlobalPtr::from_generic(dst.as_mut_ptr()).byte_add(round * stage_bytes);
                    bulk::bulk_store(to, stage, stage_bytes as u32);
                    bulk::bulk_commit();
                    bulk::bulk_wait::<0>();
                }
            }
            sync_threads();
        }
    });
    let got = dst.copy(0);
    (0..ROUNDS * stage_bytes).filter(|&i| got[i] != stage_byte(i / stage_bytes, i % stage_bytes)).count()
}

#[test]
fn a_bulk_store_sees_shared_memory_its_writers_fenced_for_the_async_proxy() {
    for fence in [ProxyFence::SharedCta, ProxyFence::Generic] {
        for n in 0..CORRECT_LAUNCHES {
            let wrong = stage_through_the_async_proxy(fence);
            assert_eq!(wrong, 0, "{fence:?}: {wrong} wrong byte(s) in launch {n}");
        }
    }
}

#[test]
fn a_bulk_store_of_shared_memory_written_without_a_proxy_fence_copies_stale_bytes() {
    for fence in [ProxyFence::None, ProxyFence::Global] {
        assert!(
            (0..WEAK_LAUNCHES).any(|_| stage_through_the_async_proxy(fence) > 0),
            "{fence:?}: the bulk store always copied what the threads wrote"
        );
    }
}

/// Bytes of the bulk load of the transaction-count tests.
const LOAD_BYTES: usize = 64;

/// One thread loads [`LOAD_BYTES`] into a stage with a bulk load on an mbarrier whose arrival expects
/// `expect` transaction bytes, waits for the phase and reads the stage. Returns the launch's result and the
/// stage bytes that differ from the source.
fn load_expecting(expect: u32, timeout_ns: u64) -> (Result<(), EmuError>, usize) {
    let src = Sym::new(1, LOAD_BYTES, 0, |_, i| i as u8 | 0x80);
    let src_sl = src.slice(0);
    let wrong = AtomicU64::new(0);
    let mut results = launch(1, [1, 1, 1], [1, 1, 1], 16 + LOAD_BYTES, timeout_ns, false, &|| {
        let src: &[u8] = arg(src_sl);
        let (base, _) = bulk::dynamic_shared_window();
        let (bar, stage) = (base, base.byte_add(16));
        // SAFETY: the launch's dynamic shared memory holds the barrier and the stage; the source is a
        // 16-byte aligned kernel argument of `LOAD_BYTES` bytes.
        unsafe {
            bulk::mbarrier_init(bar, 1);
            fence_proxy_async_shared_cta();
            bulk::mbarrier_arrive_expect_tx(bar, expect);
            bulk::bulk_load(stage, GlobalPtr::from_generic(src.as_ptr()), LOAD_BYTES as u32, bar);
            while !bulk::mbarrier_try_wait_parity(bar, 0) {}
        }
        let stale = (0..LOAD_BYTES)
            // SAFETY: a byte of the stage, after the phase that loaded it completed.
            .filter(|&i| unsafe { ((stage.addr() + i) as *const u8).read_volatile() } != src[i])
            .count();
        wrong.store(stale as u64, Ordering::Relaxed);
    });
    let (result, _) = results.remove(0);
    (result, wrong.into_inner() as usize)
}

#[test]
fn an_mbarrier_expecting_its_loads_bytes_completes_with_them_landed() {
    for n in 0..CORRECT_LAUNCHES {
        let (result, wrong) = load_expecting(LOAD_BYTES as u32, TIMEOUT_NS);
        result.unwrap();
        assert_eq!(wrong, 0, "launch {n}");
    }
}

#[test]
fn an_mbarrier_expecting_too_few_bytes_completes_before_its_load_has_landed() {
    let (result, wrong) = load_expecting(LOAD_BYTES as u32 / 2, TIMEOUT_NS);
    result.unwrap();
    assert_eq!(wrong, LOAD_BYTES / 2, "the waiter must read the bytes past the expected count unlanded");
}

#[test]
fn an_mbarrier_expecting_too_many_bytes_is_reported_as_a_hang() {
    let (result, _) = load_expecting(LOAD_BYTES as u32 + 16, 50_000_000);
    match result {
        Err(e @ EmuError::Trapped { .. }) => {
            let text = e.to_string();
            assert!(text.contains("never returns") && text.contains("16 transaction byte(s)"), "{text}");
        }
        other => panic!("a phase that cannot complete ended the launch with {other:?}"),
    }
}
