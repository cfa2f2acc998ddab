//! The device library on the CPU emulator: kernels written as plain functions, launched with
//! `ferrocomm_device::emu::launch` on several emulated ranks at once, each with its own memory, and checked
//! against plain CPU references. Symmetric buffers are host allocations with a peer table built here, as
//! the host runtime builds them for GPUs.

use std::fmt::Debug;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use ferrocomm_device::abi::{Cmp, ErrorKind, LaunchCtx};
use ferrocomm_device::emu::{self, EmuError};
use ferrocomm_device::error;
use ferrocomm_device::prelude::*;

#[path = "device_emulated/bulk.rs"]
mod bulk;
#[path = "device_emulated/ordering.rs"]
mod ordering;
#[path = "device_emulated/reduce.rs"]
mod reduce;
#[path = "device_emulated/support.rs"]
mod support;
#[path = "device_emulated/warp.rs"]
mod warp;
#[path = "device_emulated/weak_memory.rs"]
mod weak_memory;
use support::{Group, Outcome, Sym, TIMEOUT_NS, arg, block_for, byte, pad, run, run_ok, source_line, word};

/// Each rank puts (or gets) `len` elements between its `src` and rank `next`'s `dst`; checks every
/// element and that nothing past the end was written.
fn check_copy<T>(group: Group, get_side: bool, len: usize, src_off: usize, dst_off: usize, make: fn(u32, usize) -> T)
where
    T: DeviceCopy + PartialEq + Debug + Send + Sync,
{
    const WORLD: u32 = 2;
    const GUARD: usize = 3;
    let sentinel = make(99, 99);
    let src = Sym::new(WORLD, len, src_off, make);
    let dst = Sym::new(WORLD, len + GUARD, dst_off, |_, _| sentinel);
    let (src_raw, dst_raw, src_sl, dst_sl) = (src.raws(WORLD), dst.raws(WORLD), src.slices(WORLD), dst.slices(WORLD));
    let kernel = || {
        let rank = team::rank() as usize;
        let next = (team::rank() + 1) % team::world();
        if get_side {
            // Fill the local destination from the next rank's source.
            let src: SymSlice<T> = arg(src_raw[rank]);
            let dst: &mut [T] = &mut arg::<&mut [T]>(dst_sl[rank])[..len];
            match group {
                Group::Thread if thread_rank() == 0 => get(Group::Thread, dst, src.peer(next)),
                Group::Thread => {}
                Group::Warp => {
                    let half = len / 2;
                    let (lo, hi) = dst.split_at_mut(half);
                    if warp_id() == 0 {
                        get(Group::Warp, lo, src.peer(next))
                    } else {
                        get(Group::Warp, hi, src.peer(next).slice(half, len - half))
                    }
                }
                Group::Block => get(Group::Block, dst, src.peer(next)),
            }
        } else {
            let src: &[T] = arg(src_sl[rank]);
            let dst: SymSliceMut<T> = arg(dst_raw[rank]);
            match group {
                Group::Thread if thread_rank() == 0 => put(Group::Thread, dst.peer(next), src),
                Group::Thread => {}
                Group::Warp => {
                    let half = len / 2;
                    if warp_id() == 0 {
                        put(Group::Warp, dst.peer(next), &src[..half]);
                    } else {
                        put(Group::Warp, dst.peer(next).slice(half, len - half), &src[half..]);
                    }
                }
                Group::Block => put(Group::Block, dst.peer(next), src),
            }
        }
    };
    run_ok(WORLD, [1, 1, 1], block_for(group), 0, &kernel);
    for rank in 0..WORLD {
        let next = (rank + 1) % WORLD;
        // put: rank's source lands in next's destination; get: rank's destination holds next's source.
        let (from, to) = if get_side { (next, rank) } else { (rank, next) };
        let got = dst.copy(to);
        let want = src.copy(from);
        let case = format!("{group:?} {} len {len} src+{src_off} dst+{dst_off}", if get_side { "get" } else { "put" });
        if let Some(i) = (0..len).find(|&i| got[i] != want[i]) {
            panic!("{case}: element {i} is {:?}, want {:?}", got[i], want[i]);
        }
        assert!(got[len..].iter().all(|v| *v == sentinel), "{case}: wrote past the end");
    }
}

const SIZES: [usize; 6] = [0, 1, 15, 16, 17, 4095];

#[test]
fn put_and_get_move_every_size_by_thread_warp_and_block() {
    for group in [Group::Thread, Group::Warp, Group::Block] {
        for get_side in [false, true] {
            for len in SIZES {
                check_copy(group, get_side, len, 0, 0, word);
            }
        }
    }
}

#[test]
fn put_and_get_move_one_mebi_plus_three_elements() {
    for group in [Group::Thread, Group::Warp, Group::Block] {
        for get_side in [false, true] {
            check_copy(group, get_side, (1 << 20) + 3, 0, 0, word);
        }
    }
}

#[test]
fn put_and_get_handle_unaligned_offsets() {
    // Byte elements at every relative alignment: equal offsets modulo 16 take the vector path with heads
    // and tails, others the widest common unit.
    let offsets = [(1, 1), (3, 0), (0, 5), (8, 0), (4, 12), (15, 1), (2, 6), (9, 9)];
    for group in [Group::Thread, Group::Warp, Group::Block] {
        for get_side in [false, true] {
            for (s, d) in offsets {
                for len in [1, 15, 16, 17, 100, 4095] {
                    check_copy(group, get_side, len, s, d, byte);
                }
            }
        }
    }
    for (s, d) in [(2, 0), (6, 2), (4, 8)] {
        check_copy(Group::Block, false, 4095, s, d, |r, i| (i as u16) ^ (r as u16) << 12);
        check_copy(Group::Warp, true, 4095, s, d, |r, i| bf16::from_f32(i as f32 + r as f32 * 0.5));
    }
}

/// Ring put-with-signal on `world` ranks, launched `launches` times over the same buffers and pad: each
/// launch's data depends on its epoch, and the wait uses the epoch, so stale data or a missed reset fails.
fn put_signal_ring(world: u32, launches: u64, group: Group) {
    const LEN: usize = 1000;
    let src = Sym::new(world, LEN, 0, |_, _| 0u32);
    let dst = Sym::new(world, LEN, 0, |_, _| 0u32);
    let signals = pad(world, world as usize);
    let (src_raw, dst_raw, pad_raw) = (src.raws(world), dst.raws(world), signals.raws(world));
    let kernel = || {
        let (rank, world) = (team::rank(), team::world());
        let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
        let src: SymSliceMut<u32> = arg(src_raw[rank as usize]);
        let dst: SymSliceMut<u32> = arg(dst_raw[rank as usize]);
        let pad: SignalPad = arg(pad_raw[rank as usize]);
        let session = pad.session();
        let epoch = session.epoch();
        // Stage this launch's data in the local source (each thread its share), then send it.
        let (t, n) = (thread_rank() as usize, block_size() as usize);
        for i in (t..LEN).step_by(n) {
            // SAFETY: each thread writes its own elements; the barrier below orders them before the put.
            unsafe { src.local().write(i, epoch as u32 * 1_000_000 + rank * 10_000 + i as u32) };
        }
        sync_threads();
        // SAFETY: nobody writes the local source during the put.
        let data = unsafe { src.local_slice() };
        let signal = pad.peer(next, rank as usize);
        // The group's threads: thread 0, warp 0, or the whole block.
        if (group == Group::Thread && t == 0) || (group == Group::Warp && warp_id() == 0) || group == Group::Block {
            put_signal(group, dst.peer(next), data, signal, SignalOp::Add(1));
        }
        if t == 0 {
            pad.local(prev as usize).wait_ge(epoch);
        }
        sync_threads();
        for i in (t..LEN).step_by(n) {
            // SAFETY: the wait above covers every put into this copy.
            let v = unsafe { dst.local().read(i) };
            assert_eq!(v, epoch as u32 * 1_000_000 + prev * 10_000 + i as u32, "element {i} of launch {epoch}");
        }
    };
    for _ in 0..launches {
        run_ok(world, [1, 1, 1], block_for(group), 0, &kernel);
    }
    for rank in 0..world {
        let slots = signals.copy(rank);
        let prev = ((rank + world - 1) % world) as usize;
        assert_eq!(slots[prev], launches, "rank {rank}: one add per launch on the signal of its sender");
        let epochs = &slots[world as usize..];
        assert!(epochs.iter().all(|&e| e == launches), "rank {rank}: every block's epoch slot counts the launches");
    }
}

#[test]
fn put_signal_then_wait_across_launches_without_resets() {
    put_signal_ring(2, 3, Group::Block);
    put_signal_ring(2, 2, Group::Warp);
    put_signal_ring(2, 2, Group::Thread);
    put_signal_ring(4, 2, Group::Block);
}

#[test]
fn non_blocking_put_then_quiet_then_relaxed_signal_publishes_the_data() {
    const WORLD: u32 = 2;
    const LEN: usize = 333;
    let src = Sym::new(WORLD, LEN, 0, word);
    let dst = Sym::new(WORLD, LEN, 4, |_, _| 0u32);
    let signals = pad(WORLD, 1);
    let (src_sl, dst_raw, pad_raw) = (src.slices(WORLD), dst.raws(WORLD), signals.raws(WORLD));
    run_ok(WORLD, [1, 1, 1], [32, 1, 1], 0, &|| {
        let rank = team::rank();
        let peer = 1 - rank;
        let src: &[u32] = arg(src_sl[rank as usize]);
        let dst: SymSliceMut<u32> = arg(dst_raw[rank as usize]);
        let pad: SignalPad = arg(pad_raw[rank as usize]);
        let token = put_nbi(Group::Warp, dst.peer(peer), src);
        token.quiet();
        if lane_id() == 0 {
            pad.peer(peer, 0).set_relaxed(1);
            pad.local(0).wait_eq(1);
        }
        sync_warp(u32::MAX);
        for i in (lane_id() as usize..LEN).step_by(32) {
            // SAFETY: the wait covers the peer's put.
            assert_eq!(unsafe { dst.local().read(i) }, word(peer, i));
        }
    });
}

/// One thread per rank puts `LEN` words into its peer, then calls `complete` (the free `quiet()` or
/// `fence()`) and raises the peer's signal with a *relaxed* store: only the system fence inside `complete`
/// orders the data before the signal. The peer waits on the signal and must read every word.
fn put_then_relaxed_signal(complete: fn()) {
    const WORLD: u32 = 2;
    const LEN: usize = 77;
    let src = Sym::new(WORLD, LEN, 0, word);
    let dst = Sym::new(WORLD, LEN, 4, |_, _| 0u32);
    let signals = pad(WORLD, 1);
    let (src_sl, dst_raw, pad_raw) = (src.slices(WORLD), dst.raws(WORLD), signals.raws(WORLD));
    run_ok(WORLD, [1, 1, 1], [1, 1, 1], 0, &|| {
        let rank = team::rank();
        let peer = 1 - rank;
        let src: &[u32] = arg(src_sl[rank as usize]);
        let dst: SymSliceMut<u32> = arg(dst_raw[rank as usize]);
        let pad: SignalPad = arg(pad_raw[rank as usize]);
        put(Group::Thread, dst.peer(peer), src);
        complete();
        pad.peer(peer, 0).set_relaxed(1);
        pad.local(0).wait_eq(1);
        for i in 0..LEN {
            // SAFETY: the wait covers the peer's put, which its fence ordered before the signal.
            assert_eq!(unsafe { dst.local().read(i) }, word(peer, i), "word {i} from rank {peer}");
        }
    });
}

#[test]
fn put_then_quiet_then_relaxed_signal_publishes_the_data() {
    put_then_relaxed_signal(quiet);
}

#[test]
fn put_then_fence_then_relaxed_signal_publishes_the_data() {
    put_then_relaxed_signal(fence);
}

/// NVSHMEM's `quiet()` outside its own flavour is the same system fence: stores to a peer (as through
/// `nvshmem::reachable`) are complete after it.
#[test]
fn put_then_nvshmem_quiet_then_relaxed_signal_publishes_the_data() {
    put_then_relaxed_signal(ferrocomm_device::nvshmem::quiet);
}

/// LL round trip on two ranks, `launches` times over the same LL buffers: each rank sends `len` elements

/// NVSHMEM's non-blocking put with signal, completed by its token's `quiet()`, then a second signal raised
/// *relaxed*: the put's data (every thread of the block sent a share) is complete at the quiet, so a peer
/// that waits on the second signal alone reads all of it. (Outside NVSHMEM's own flavour the put is a
/// blocking put whose signal is a release; only the quiet's system fence orders the block's data before the
/// relaxed signal.)
#[test]
fn a_remote_put_completed_by_quiet_is_published_by_a_relaxed_signal() {
    const WORLD: u32 = 2;
    const LEN: usize = 300;
    let src = Sym::new(WORLD, LEN, 0, word);
    let dst = Sym::new(WORLD, LEN, 0, |_, _| 0u32);
    let signals = pad(WORLD, 2);
    let (src_raw, dst_raw, pad_raw) = (src.raws(WORLD), dst.raws(WORLD), signals.raws(WORLD));
    run_ok(WORLD, [1, 1, 1], [64, 1, 1], 0, &|| {
        let rank = team::rank();
        let peer = 1 - rank;
        let src: SymSlice<u32> = arg(src_raw[rank as usize]);
        let dst: SymSliceMut<u32> = arg(dst_raw[rank as usize]);
        let pad: SignalPad = arg(pad_raw[rank as usize]);
        let session = pad.session();
        let ch = session.channel(peer);
        ferrocomm_device::nvshmem::put_signal_nbi(Group::Block, &ch, dst, 0, src.peer(rank), 0, SignalOp::Add(1))
            .quiet();
        if thread_rank() == 0 {
            pad.peer(peer, 1).set_relaxed(1);
            pad.local(1).wait_eq(1);
        }
        sync_threads();
        for i in (thread_rank() as usize..LEN).step_by(64) {
            // SAFETY: the wait covers the peer's put, which its quiet completed before the signal.
            assert_eq!(unsafe { dst.local().read(i) }, word(peer, i), "word {i} from rank {peer}");
        }
    });
}

/// One rank's host queue of `DEPTH` slots in host memory, watched by the emulator's checker, and a host
/// consumer that pops `count` descriptors slowly (a few milliseconds each), so that a producer pushing
/// more than `DEPTH` finds the ring full. `produce` runs the launches that push; the result is what the
/// consumer popped, in order, and how the launches ended.
fn through_a_host_queue(
    count: u64,
    produce: &dyn Fn(ferrocomm_device::queue::HostQueues) -> Vec<Outcome>,
) -> (Vec<u64>, Vec<Outcome>) {
    use ferrocomm_device::emu::{QueueLayout, watch_host_queues};
    use ferrocomm_device::queue::{HostQueues, RING_HEAD, RING_SLOTS, RING_TAIL, SLOT_BYTES, ring_bytes, ring_slot};

    /// One cache line: the ring is 64-byte aligned as the host allocates it.
    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Line([u8; 64]);
    let bytes = ring_bytes(QUEUE_DEPTH as usize);
    let mut ring = vec![Line([0; 64]); bytes / 64];
    let base = ring.as_mut_ptr() as usize;
    let layout = QueueLayout {
        base,
        stride: bytes,
        rings: 1,
        depth: QUEUE_DEPTH,
        head: RING_HEAD,
        tail: RING_TAIL,
        slots: RING_SLOTS,
        slot_bytes: SLOT_BYTES,
    };
    let _watched = watch_host_queues(layout);
    // SAFETY: one rank's ring of `QUEUE_DEPTH` slots, aligned, live until the consumer below has joined.
    let queues = unsafe { HostQueues::new(base as u64, bytes as u64, QUEUE_DEPTH) };
    let counter = |offset: usize| {
        // SAFETY: `head` and `tail` are aligned `u64`s of the ring, accessed atomically on both sides.
        unsafe { &*((base + offset) as *const AtomicU64) }
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let consumer = s.spawn(|| {
            let mut popped = Vec::new();
            let mut tail = 0;
            // `stop`: the launches have ended, so what is published now is all there will be.
            while tail < count {
                let ended = stop.load(Ordering::Acquire);
                std::thread::sleep(std::time::Duration::from_millis(3));
                let head = counter(RING_HEAD).load(Ordering::Acquire);
                if ended && tail >= head {
                    break;
                }
                if tail < head {
                    let slot = base + RING_SLOTS + ring_slot(tail, QUEUE_DEPTH) as usize * SLOT_BYTES;
                    // SAFETY: the acquire of `head` covers the slot's descriptor, which stays until `tail` moves.
                    popped.push(unsafe { std::ptr::read_volatile(slot as *const u64) });
                    tail += 1;
                    counter(RING_TAIL).store(tail, Ordering::Release);
                }
            }
            popped
        });
        /// Ends the consumer however `produce` ends: a panic there must fail the test, not leave the
        /// consumer waiting for descriptors that will never come (the scope joins it before unwinding).
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let outcomes = {
            let _stop = Stop(&stop);
            produce(queues)
        };
        (consumer.join().expect("consumer thread"), outcomes)
    })
}

const QUEUE_DEPTH: u64 = 2;

/// A host queue's producer on a ring far smaller than what it pushes, over two launches, against a slow
/// consumer: every push into a full ring waits for the slot's previous descriptor to be popped, so the
/// consumer sees every descriptor once, in order, none overwritten before it was read. The second launch
/// starts once the consumer has popped everything: its producer finds free slots by the tail it acquires
/// as it opens the ring, and pushes into them at once.
#[test]
fn a_full_host_queue_waits_for_the_consumer_and_loses_no_descriptor() {
    use ferrocomm_device::queue::RING_TAIL;
    const PUSHES: u64 = 9;
    let (popped, outcomes) = through_a_host_queue(2 * PUSHES, &|queues| {
        let mut outcomes = Vec::new();
        for launch in 0..2 {
            if outcomes.iter().any(|o: &Outcome| o.result.is_err() || !o.records().is_empty()) {
                // The consumer will never pop what a failed launch did not push: report the failure below.
                break;
            }
            if launch == 1 {
                // SAFETY: the ring's `tail`, an aligned `u64` the consumer stores atomically.
                let tail = unsafe { &*((queues.base() as usize + RING_TAIL) as *const AtomicU64) };
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while tail.load(Ordering::Acquire) < PUSHES {
                    assert!(std::time::Instant::now() < deadline, "the consumer stopped popping");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            outcomes.extend(run(1, [1, 1, 1], [1, 1, 1], 0, TIMEOUT_NS, &|| {
                let mut producer = queues.producer::<u64>();
                for k in 0..PUSHES {
                    producer.push(1000 * (launch + 1) + k);
                }
            }));
        }
        outcomes
    });
    for o in &outcomes {
        assert!(o.result.is_ok() && o.records().is_empty(), "{:?} {:?}", o.result, o.records());
    }
    let want: Vec<u64> = (1000..1000 + PUSHES).chain(2000..2000 + PUSHES).collect();
    assert_eq!(popped, want, "descriptors the consumer popped from a ring of {QUEUE_DEPTH} slots");
}

/// The checker's side of the same protocol: a producer that writes a slot of a full ring having read the
/// consumer's tail only with a relaxed load is stopped at that write, naming the descriptor it overwrites.
#[test]
fn a_host_queue_slot_reused_without_acquiring_the_tail_is_reported() {
    use ferrocomm_device::queue::{RING_HEAD, RING_SLOTS, RING_TAIL, SLOT_BYTES};

    let (_, outcomes) = through_a_host_queue(QUEUE_DEPTH + 1, &|queues| {
        run(1, [1, 1, 1], [1, 1, 1], 0, TIMEOUT_NS, &|| {
            let base = queues.base() as usize;
            // SAFETY: the ring's counters, aligned `u64`s accessed atomically.
            let (head, tail) = unsafe {
                (
                    SysAtomicU64::from_ptr((base + RING_HEAD) as *mut u64),
                    SysAtomicU64::from_ptr((base + RING_TAIL) as *mut u64),
                )
            };
            for k in 0..=QUEUE_DEPTH {
                // The rogue producer: it spins on the tail relaxed, so nothing orders its write after the pop.
                while k >= QUEUE_DEPTH && tail.load_relaxed() < k + 1 - QUEUE_DEPTH {}
                let slot = base + RING_SLOTS + (k % QUEUE_DEPTH) as usize * SLOT_BYTES;
                // SAFETY: a slot of the ring; the consumer reads it only after `head` moves past it.
                unsafe { std::ptr::write_volatile(slot as *mut u64, 7) };
                ferrocomm_device::emu::lower::check::queued(slot);
                head.store_release(k + 1);
            }
        })
    });
    let err = outcomes[0].result.as_ref().expect_err("the rogue push must be stopped").to_string();
    assert!(err.contains("descriptor 2 written into slot 0") && err.contains("acquired"), "{err}");
}
/// as packets flagged with the launch's epoch and reads the other's. Data differs per launch, so a reader
/// that accepted a stale packet fails.
fn ll_round_trip<T>(len: usize, group: Group, launches: u64, make: fn(u32, u64, usize) -> T)
where
    T: DeviceCopy + PartialEq + Debug + Default + Send + Sync,
{
    const WORLD: u32 = 2;
    let lbuf = Sym::new(WORLD, ll_packets::<T>(len), 0, |_, _| LlPacket::default());
    let src = Sym::new(WORLD, len, 0, |_, _| T::default());
    let out = Sym::new(WORLD, len, 0, |_, _| T::default());
    // One signal: the end-of-launch acknowledgement before a buffer may be overwritten.
    let hand = pad(WORLD, 1);
    let (l_raw, src_raw, out_sl, hand_raw) = (lbuf.raws(WORLD), src.raws(WORLD), out.slices(WORLD), hand.raws(WORLD));
    let kernel = || {
        let rank = team::rank();
        let peer = 1 - rank;
        let lbuf: SymSliceMut<LlPacket> = arg(l_raw[rank as usize]);
        let src: SymSliceMut<T> = arg(src_raw[rank as usize]);
        let out: &mut [T] = arg(out_sl[rank as usize]);
        let hand: SignalPad = arg(hand_raw[rank as usize]);
        let session = hand.session();
        let epoch = session.epoch();
        let flag = ll_flag(epoch);
        let (t, n) = (thread_rank() as usize, block_size() as usize);
        for i in (t..len).step_by(n) {
            // SAFETY: each thread writes its own elements, ordered before the sends by the barrier.
            unsafe { src.local().write(i, make(rank, epoch, i)) };
        }
        sync_threads();
        // SAFETY: unwritten during the sends.
        let data = unsafe { src.local_slice() };
        if (group == Group::Thread && t == 0) || (group == Group::Warp && warp_id() == 0) || group == Group::Block {
            put_ll(group, lbuf.peer(peer), data, flag);
            read_ll(group, out, lbuf.local(), flag);
        }
        sync_threads();
        if t == 0 {
            for (i, v) in out.iter().enumerate() {
                assert_eq!(*v, make(peer, epoch, i), "element {i} of launch {epoch}");
            }
            // The peer may overwrite this rank's LL buffer only after it was read: ack, and wait for its ack.
            hand.peer(peer, 0).add_release(1);
            hand.local(0).wait_ge(epoch);
        }
    };
    for _ in 0..launches {
        run_ok(WORLD, [1, 1, 1], block_for(group), 0, &kernel);
    }
}

#[test]
fn ll_packets_round_trip_at_every_size_and_reuse_buffers_by_epoch() {
    for group in [Group::Thread, Group::Warp, Group::Block] {
        for len in SIZES {
            ll_round_trip(len, group, 2, |r, e, i| (i as u32) ^ (r << 24) ^ (e as u32) << 16);
            ll_round_trip(len, group, 2, |r, e, i| (i as u8).wrapping_add(r as u8 * 7 + e as u8 * 13));
        }
    }
    ll_round_trip(4095, Group::Block, 3, |r, e, i| bf16::from_f32((i % 251) as f32 + r as f32 + e as f32));
    ll_round_trip(1001, Group::Warp, 2, |r, e, i| (i as u64) << 20 | u64::from(r) << 8 | e);
}

#[test]
fn block_barrier_orders_shared_memory_and_survives_exited_threads() {
    let rounds_ok = AtomicU32::new(0);
    run_ok(1, [2, 1, 1], [8, 4, 2], 0, &|| {
        let tile = shared_array!(EMU_BARRIER_TILE: [u32; 64]);
        let (t, n) = (thread_rank() as usize, block_size() as usize);
        for round in 0..5u32 {
            // SAFETY: each thread writes its own slot; barriers separate writes from reads.
            unsafe { tile.write(t, round * 1000 + t as u32 + block_rank() * 100_000) };
            sync_threads();
            let neighbour = (t + 1) % n;
            // SAFETY: as above.
            let v = unsafe { tile.read(neighbour) };
            assert_eq!(v, round * 1000 + neighbour as u32 + block_rank() * 100_000);
            sync_threads();
        }
        rounds_ok.fetch_add(1, Ordering::Relaxed);
        // Half the threads leave; the other half still synchronise among themselves.
        if t % 2 == 1 {
            error::exit_thread();
        }
        sync_threads();
        sync_threads();
    });
    assert_eq!(rounds_ok.into_inner(), 2 * 64);
}

#[test]
fn static_and_dynamic_shared_memory_are_per_block() {
    let seen = Mutex::new(Vec::new());
    run_ok(2, [3, 1, 1], [32, 1, 1], 256, &|| {
        let tile = shared_array!(EMU_PER_BLOCK: [u64; 32]);
        let dynamic = dynamic_shared::<u32>();
        assert_eq!(dynamic.len(), 64);
        let t = thread_rank() as usize;
        let me = u64::from(team::rank()) << 32 | u64::from(block_rank());
        // SAFETY: each thread writes its own element; the barrier orders the reads.
        unsafe {
            tile.write(t, me);
            dynamic.write(t, me as u32 ^ 0xabcd);
        }
        sync_threads();
        // SAFETY: as above.
        let (a, b) = unsafe { (tile.read(31 - t), dynamic.read(31 - t)) };
        seen.lock().unwrap().push((a == me, b == me as u32 ^ 0xabcd));
    });
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 2 * 3 * 32);
    assert!(seen.iter().all(|&(a, b)| a && b), "a block saw another block's shared memory");
}

#[test]
fn shuffles_and_votes_match_the_ptx_reference() {
    // 72 threads: two full warps and one of 8 lanes.
    let results = Mutex::new(Vec::new());
    run_ok(1, [1, 1, 1], [24, 3, 1], 0, &|| {
        let lane = lane_id();
        let mask = warp_mask();
        let v = 1000 * warp_id() + lane;
        let row = [
            shfl_idx_sync(mask, v, 3),
            shfl_up_sync(mask, v, 2),
            shfl_down_sync(mask, v, 5),
            shfl_xor_sync(mask, v, 1),
            shfl_xor_sync(mask, u64::from(v) << 33 | 7, 4) as u32,
            (shfl_xor_sync(mask, u64::from(v) << 33, 4) >> 33) as u32,
            vote_ballot_sync(mask, lane.is_multiple_of(3)),
            u32::from(vote_any_sync(mask, lane == 5)),
            u32::from(vote_all_sync(mask, lane < 40)),
            u32::from(vote_all_sync(mask, lane != 2)),
        ];
        results.lock().unwrap().push((warp_id(), lane, row));
    });
    let results = results.into_inner().unwrap();
    assert_eq!(results.len(), 72);
    for (warp, lane, row) in results {
        let lanes = if warp == 2 { 8 } else { 32 };
        let val = |l: u32| 1000 * warp + l;
        // A source lane outside the warp is not taking part: the lane keeps its own value.
        let within = |l: u32| if l < lanes { val(l) } else { val(lane) };
        let ballot = (0..lanes).filter(|l| l % 3 == 0).fold(0u32, |m, l| m | 1 << l);
        let want = [
            within(3),
            if lane >= 2 { val(lane - 2) } else { val(lane) },
            if lane + 5 <= 31 { within(lane + 5) } else { val(lane) },
            within(lane ^ 1),
            7,
            within(lane ^ 4),
            ballot,
            u32::from(lanes > 5),
            1,
            0,
        ];
        assert_eq!(row, want, "warp {warp} lane {lane}");
    }
}

#[test]
fn scoped_atomics_count_every_thread() {
    let counter = Sym::new(1, 4, 0, |_, _| 0u64);
    let raw = counter.raw(0);
    run_ok(1, [4, 1, 1], [64, 1, 1], 0, &|| {
        let c: SymSliceMut<u64> = arg(raw);
        let c = c.local().as_ptr();
        // SAFETY: the counters live for the launch and are only accessed atomically.
        let (gpu, sys, cas, swap) = unsafe {
            (
                GpuAtomicU64::from_ptr(c),
                SysAtomicU64::from_ptr(c.add(1)),
                GpuAtomicU64::from_ptr(c.add(2)),
                SysAtomicU64::from_ptr(c.add(3)),
            )
        };
        gpu.fetch_add_relaxed(1);
        sys.fetch_add_acq_rel(2);
        let mut cur = cas.load_relaxed();
        loop {
            let seen = cas.compare_exchange_acq_rel(cur, cur + 3);
            if seen == cur {
                break;
            }
            cur = seen;
        }
        swap.swap_release(global_thread_idx() as u64 + 1);
    });
    let v = counter.copy(0);
    assert_eq!(&v[..3], &[256, 512, 768]);
    assert!((1..=256).contains(&v[3]));
}

#[test]
fn a_wait_that_times_out_records_who_waited_on_what_and_the_launch_returns() {
    let signals = pad(2, 2);
    let pad_raw = signals.raws(2);
    let continued = AtomicU32::new(0);
    let started = std::time::Instant::now();
    let outcomes = run(2, [2, 1, 1], [4, 1, 1], 0, 50_000_000, &|| {
        let pad: SignalPad = arg(pad_raw[team::rank() as usize]);
        if team::rank() == 1 && block_rank() == 1 && thread_rank() == 2 {
            // Nobody raises signal 1 to 7: this wait must time out.
            pad.local(1).set_relaxed(5);
            pad.local(1).wait_eq(7); // TIMEOUT-LINE
            continued.fetch_add(1, Ordering::Relaxed);
        }
        sync_threads();
    });
    assert!(started.elapsed().as_secs() < 10, "the launch did not end promptly after the timeout");
    assert!(outcomes[0].result.is_ok() && outcomes[0].errors.count == 0);
    let o = &outcomes[1];
    assert!(o.result.is_ok(), "a timeout ends the kernel cleanly: {:?}", o.result);
    let records = o.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let r = records[0];
    assert_eq!(r.error_kind(), Some(ErrorKind::Timeout));
    assert_eq!((r.rank, r.block, r.thread), (1, [1, 0, 0], [2, 0, 0]));
    assert_eq!(r.signal, pad_raw[1].local as u64 + 8, "the address of signal 1 on rank 1");
    assert_eq!((r.expected, r.observed, Cmp::from_u32(r.cmp)), (7, 5, Some(Cmp::Eq)));
    assert!(r.file_name().ends_with("device_emulated.rs"), "{}", r.file_name());
    assert_eq!(r.line, source_line("// TIMEOUT-LINE"));
    assert_eq!(continued.into_inner(), 0, "the thread went on after its timeout");
}

#[test]
fn an_ll_read_that_times_out_records_the_packet_and_its_flag() {
    let lbuf = Sym::new(1, 4, 0, |_, i| LlPacket::new(0, if i == 2 { 3 } else { 9 }));
    let l_raw = lbuf.raw(0);
    let outcomes = run(1, [1, 1, 1], [1, 1, 1], 0, 20_000_000, &|| {
        let lbuf: SymSliceMut<LlPacket> = arg(l_raw);
        let mut out = [0u64; 4];
        read_ll(Group::Thread, &mut out, lbuf.local(), 9);
    });
    assert!(outcomes[0].result.is_ok());
    let records = outcomes[0].records();
    assert_eq!(records.len(), 1, "{records:?}");
    let r = records[0];
    assert_eq!(r.error_kind(), Some(ErrorKind::Timeout));
    assert_eq!((r.signal, r.expected, r.observed), (l_raw.local as u64 + 32, 9, 3), "packet 2 held flag 3");
}

#[test]
fn a_panic_is_recorded_with_its_location_and_traps_the_launch() {
    let data = Sym::new(1, 4, 0, |_, i| i as u32);
    let sl = data.slice(0);
    let started = std::time::Instant::now();
    let outcomes = run(1, [1, 1, 1], [8, 1, 1], 0, TIMEOUT_NS, &|| {
        let data: &[u32] = arg(sl);
        if thread_rank() == 6 {
            let i = thread_rank() as usize;
            std::hint::black_box(data[i]); // PANIC-LINE: index 6 of 4
        }
        // The others wait at a barrier the panicking thread never reaches; the trap ends them.
        sync_threads();
        sync_threads();
    });
    assert!(started.elapsed().as_secs() < 10);
    let line = source_line("// PANIC-LINE");
    let o = &outcomes[0];
    match &o.result {
        Err(EmuError::Trapped { at, line: l, message, .. }) => {
            assert_eq!((at.block, at.thread, *l), ([0, 0, 0], [6, 0, 0], line));
            assert!(message.contains("index out of bounds"), "{message}");
        }
        other => panic!("expected a trapped launch, got {other:?}"),
    }
    let records = o.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let r = records[0];
    assert_eq!(r.error_kind(), Some(ErrorKind::Panic));
    assert_eq!((r.rank, r.block, r.thread, r.line), (0, [0, 0, 0], [6, 0, 0], line));
    assert!(r.file_name().ends_with("device_emulated.rs"), "{}", r.file_name());
}

/// The message-passing litmus: rank 0 writes 64 words with weak stores, then raises the flag with release;
/// rank 1 waits for the flag (`wait(flag, trial)`, an acquire) and checks every word, then acknowledges,
/// and the next of `trials` overwrites the same words.
fn message_passing(trials: u64, wait: &(dyn Fn(Signal, u64) + Sync)) {
    const WORDS: usize = 64;
    let data = Sym::new(2, WORDS, 0, |_, _| 0u64);
    let signals = pad(2, 2);
    let (d_raw, p_raw) = (data.raws(2), signals.raws(2));
    let stale = AtomicU64::new(0);
    run_ok(2, [1, 1, 1], [1, 1, 1], 0, &|| {
        let rank = team::rank();
        let data: SymSliceMut<u64> = arg(d_raw[rank as usize]);
        let pad: SignalPad = arg(p_raw[rank as usize]);
        for trial in 1..=trials {
            if rank == 0 {
                let peer = data.peer(1);
                for i in 0..WORDS {
                    // SAFETY: rank 1 reads only after acquiring the flag raised below.
                    unsafe { peer.write(i, trial * 1000 + i as u64) };
                }
                pad.peer(1, 0).set_release(trial);
                pad.local(1).wait_ge(trial);
            } else {
                wait(pad.local(0), trial);
                for i in 0..WORDS {
                    // SAFETY: the acquire above orders this read after the writes.
                    if unsafe { data.local().read(i) } != trial * 1000 + i as u64 {
                        stale.fetch_add(1, Ordering::Relaxed);
                    }
                }
                pad.peer(0, 1).set_release(trial);
            }
        }
    });
    assert_eq!(stale.into_inner(), 0, "stale reads after an acquire of a release-published flag");
}

#[test]
fn message_passing_litmus_never_reads_stale_data() {
    message_passing(2000, &|flag, trial| {
        flag.wait_ge(trial);
    });
}

/// The same with the flag waited for by equality and by inequality (with the previous trial's value): each
/// wait acquires. The first trial waits by `>=`: an inequality with 0 would make a wait for the value
/// before it, `0 - 1`, fail by overflow, where it must fail by the stale data it lets through.
#[test]
fn message_passing_by_every_comparison_never_reads_stale_data() {
    message_passing(300, &|flag, trial| {
        flag.wait_eq(trial);
    });
    message_passing(300, &|flag, trial| {
        if trial == 1 {
            flag.wait_ge(1);
        } else {
            flag.wait_ne(trial - 1);
        }
    });
}

#[test]
fn waits_compare_as_named_and_the_clock_advances() {
    let signals = pad(2, 1);
    let p_raw = signals.raws(2);
    run_ok(2, [1, 1, 1], [1, 1, 1], 0, &|| {
        let pad: SignalPad = arg(p_raw[team::rank() as usize]);
        if team::rank() == 0 {
            let t0 = globaltimer();
            nanosleep(100_000);
            assert!(globaltimer() >= t0 + 100_000, "nanosleep(100 us) returned early");
            for v in [3, 5, 9] {
                pad.peer(1, 0).set_release(v);
                nanosleep(50_000);
            }
        } else {
            assert_ne!(pad.local(0).wait_ne(0), 0);
            assert!(pad.local(0).wait(Cmp::Ge, 5) >= 5);
            assert_eq!(pad.local(0).wait_relaxed(Cmp::Eq, 9), 9);
        }
    });
}

#[test]
fn a_grid_larger_than_the_emulator_runs_is_rejected() {
    let ctx = LaunchCtx::EMPTY;
    let err = emu::launch([5, 1, 1], [1024, 1, 1], 0, ctx, &|| {}).unwrap_err();
    assert!(matches!(err, EmuError::TooManyThreads { threads: 5120, .. }), "{err}");
    assert!(err.to_string().contains("at most 4096"), "{err}");
    assert!(matches!(emu::launch([1, 1, 1], [0, 1, 1], 0, ctx, &|| {}), Err(EmuError::EmptyDimension { .. })));
}

#[test]
fn indices_and_team_match_the_launch() {
    let seen = Mutex::new(Vec::new());
    run_ok(3, [2, 3, 1], [4, 2, 2], 0, &|| {
        let (b, t, g, d) = (block_idx(), thread_idx(), grid_dim(), block_dim());
        assert_eq!((g, d), (Dim3 { x: 2, y: 3, z: 1 }, Dim3 { x: 4, y: 2, z: 2 }));
        assert_eq!(thread_rank(), t.x + 4 * (t.y + 2 * t.z));
        assert_eq!(block_rank(), b.x + 2 * b.y);
        assert_eq!(lane_id(), thread_rank() % 32);
        assert_eq!(team::world(), 3);
        seen.lock().unwrap().push((team::rank(), global_thread_idx()));
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort_unstable();
    let want: Vec<_> = (0..3).flat_map(|r| (0..96).map(move |i| (r, i))).collect();
    assert_eq!(seen, want);
}
