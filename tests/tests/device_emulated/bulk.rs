//! TMA bulk copies on the emulator: `BulkCopier` against a plain copy at awkward sizes and offsets, with
//! and without a staging ring, and the emulator's model of the hardware's lateness — a store that is read
//! before its group completes, a stage rewritten before its store read it, a store still in flight when
//! its thread ends.

use ferrocomm_device::bulk::{self, BulkCopier, SharedAddr, bulk_staging_bytes};
use ferrocomm_device::emu::EmuError;
use ferrocomm_device::fence::fence_proxy_async_shared_cta;
use ferrocomm_device::mem::GlobalPtr;
use ferrocomm_device::prelude::*;
use ferrocomm_device::vector::{V16, Vectors, VectorsMut};

use super::support::{Sym, TIMEOUT_NS, arg, byte, run, run_ok};

/// Each rank copies `len` bytes between its `src` (at `src_off`) and the next rank's `dst` (at `dst_off`)
/// with a `BulkCopier` whose launch gave `staging` bytes of dynamic shared memory; checks every byte and
/// that nothing past the end was written.
fn check_bulk(get_side: bool, len: usize, src_off: usize, dst_off: usize, staging: usize) {
    const WORLD: u32 = 2;
    const GUARD: usize = 5;
    let src = Sym::new(WORLD, len, src_off, byte);
    let dst = Sym::new(WORLD, len + GUARD, dst_off, |_, _| 0xEE);
    let (src_raw, dst_raw, src_sl, dst_sl) = (src.raws(WORLD), dst.raws(WORLD), src.slices(WORLD), dst.slices(WORLD));
    let kernel = || {
        let rank = team::rank() as usize;
        let next = (team::rank() + 1) % team::world();
        let mut copier = BulkCopier::new();
        assert_eq!(copier.uses_tma(), staging >= bulk_staging_bytes(16));
        if get_side {
            let src: SymSlice<u8> = arg(src_raw[rank]);
            let dst: &mut [u8] = &mut arg::<&mut [u8]>(dst_sl[rank])[..len];
            copier.get(dst, src.peer(next));
        } else {
            let src: &[u8] = arg(src_sl[rank]);
            let dst: SymSliceMut<u8> = arg(dst_raw[rank]);
            copier.put(dst.peer(next), src);
        }
    };
    run_ok(WORLD, [1, 1, 1], [32, 1, 1], staging, &kernel);
    for rank in 0..WORLD {
        let next = (rank + 1) % WORLD;
        let (from, to) = if get_side { (next, rank) } else { (rank, next) };
        let (got, want) = (dst.copy(to), src.copy(from));
        let case =
            format!("{} len {len} src+{src_off} dst+{dst_off} staging {staging}", if get_side { "get" } else { "put" });
        if let Some(i) = (0..len).find(|&i| got[i] != want[i]) {
            panic!("{case}: byte {i} is {:#x}, want {:#x}", got[i], want[i]);
        }
        assert!(got[len..].iter().all(|&v| v == 0xEE), "{case}: wrote past the end");
    }
}

#[test]
fn bulk_copier_moves_every_size_through_rings_of_every_depth() {
    // No ring, stages of 16 and 48 bytes (many trips round the ring), a stage larger than some copies.
    for staging in [0, bulk_staging_bytes(16), bulk_staging_bytes(48), bulk_staging_bytes(1024)] {
        for get_side in [false, true] {
            for len in [0, 1, 15, 16, 17, 64, 65, 1000, 4095] {
                check_bulk(get_side, len, 0, 0, staging);
            }
        }
    }
}

#[test]
fn bulk_copier_handles_heads_tails_and_unequal_alignment() {
    // Equal offsets modulo 16 take the TMA with a head and a tail; unequal ones fall back to loads and stores.
    for (s, d) in [(1, 1), (15, 15), (8, 8), (3, 0), (0, 5), (4, 12)] {
        for get_side in [false, true] {
            for len in [1, 17, 100, 4095] {
                check_bulk(get_side, len, s, d, bulk_staging_bytes(32));
            }
        }
    }
}

/// One thread stages `bytes` of `src` through shared memory into `dst` with the raw intrinsics, then runs
/// `after` (given the stage) before the final wait; returns what `dst` held when `after` ran and at the end.
fn raw_stream(bytes: usize, after: fn(SharedAddr, GlobalPtr, usize) -> u8) -> (u8, Vec<u8>, Result<(), EmuError>) {
    let src = Sym::new(1, bytes, 0, |_, i| (i as u8) | 0x80);
    let dst = Sym::new(1, bytes, 0, |_, _| 0);
    let seen = std::sync::atomic::AtomicU8::new(0);
    let (src_sl, dst_sl) = (src.slice(0), dst.slice(0));
    let kernel = || {
        let src: &[u8] = arg(src_sl);
        let dst: &mut [u8] = arg(dst_sl);
        let (base, _) = bulk::dynamic_shared_window();
        let (bar, stage) = (base, base.byte_add(16));
        // SAFETY: the launch's dynamic shared memory holds the barrier and a stage of `bytes`; both ranges
        // are 16-byte aligned kernel arguments of `bytes` bytes.
        unsafe {
            let (from, to) = (GlobalPtr::from_generic(src.as_ptr()), GlobalPtr::from_generic(dst.as_mut_ptr()));
            bulk::mbarrier_init(bar, 1);
            fence_proxy_async_shared_cta();
            bulk::mbarrier_arrive_expect_tx(bar, bytes as u32);
            bulk::bulk_load(stage, from, bytes as u32, bar);
            while !bulk::mbarrier_try_wait_parity(bar, 0) {}
            bulk::bulk_store(to, stage, bytes as u32);
            bulk::bulk_commit();
            seen.store(after(stage, to, bytes), std::sync::atomic::Ordering::Relaxed);
        }
    };
    let outcome = run(1, [1, 1, 1], [1, 1, 1], 16 + bytes, TIMEOUT_NS, &kernel).remove(0);
    (seen.into_inner(), dst.copy(0), outcome.result)
}

#[test]
fn a_bulk_store_lands_only_when_its_group_is_waited_for() {
    let (early, end, result) = raw_stream(64, |_, to, _| {
        // SAFETY: a byte of the destination, read before the store's group completed.
        let before = unsafe { to.ld_b8() };
        bulk::bulk_wait::<0>();
        before
    });
    result.unwrap();
    assert_eq!(early, 0, "the destination changed before its store's group completed");
    assert_eq!(end, (0..64).map(|i| i as u8 | 0x80).collect::<Vec<_>>());
}

#[test]
fn a_stage_rewritten_before_its_store_read_it_lands_rewritten() {
    let (_, end, result) = raw_stream(32, |stage, _, bytes| {
        // Rewrites the stage the committed store has not been waited on to read (a bug on a GPU too), and
        // fences so the async proxy may see the new bytes.
        for i in 0..bytes {
            // SAFETY: a byte of the block's stage.
            unsafe { ((stage.addr() + i) as *mut u8).write_volatile(0x11) };
        }
        fence_proxy_async_shared_cta();
        bulk::bulk_wait::<0>();
        0
    });
    result.unwrap();
    assert_eq!(end, vec![0x11; 32], "the emulator read the stage before the read-wait");
    let (_, end, result) = raw_stream(32, |stage, _, bytes| {
        bulk::bulk_wait_read::<0>();
        for i in 0..bytes {
            // SAFETY: as above, after the read-wait: the stage is free.
            unsafe { ((stage.addr() + i) as *mut u8).write_volatile(0x11) };
        }
        bulk::bulk_wait::<0>();
        0
    });
    result.unwrap();
    assert_eq!(end, (0..32).map(|i| i as u8 | 0x80).collect::<Vec<_>>(), "the read-wait did not take the stage");
}

#[test]
fn a_bulk_store_in_flight_when_its_thread_ends_is_an_error() {
    let (_, end, result) = raw_stream(16, |_, _, _| 0);
    match result {
        Err(e @ EmuError::Trapped { .. }) => {
            let text = e.to_string();
            assert!(text.contains("bulk store still in flight"), "{text}");
            assert!(text.contains("bulk.rs"), "the error names where the store was issued: {text}");
        }
        other => panic!("a store left in flight ended the launch with {other:?}"),
    }
    assert_eq!(end, vec![0; 16], "a store never waited for must not land");
}

/// The words thread `k`'s vector of round `round` on `rank` holds: new in every round, so a copy that reads
/// the last round's bytes (or none) is seen.
fn round_vector(round: u32, rank: usize, k: usize) -> V16 {
    let base = round << 24 | (rank as u32) << 20 | (k as u32) << 2;
    [base, base | 1, base | 2, base | 3]
}

fn round_bytes(round: u32, rank: usize, len: usize) -> Vec<u8> {
    (0..len / 16).flat_map(|k| round_vector(round, rank, k).into_iter().flat_map(u32::to_le_bytes)).collect()
}

/// A block puts the source of a copy into its own copy of a symmetric buffer in the launch that copies
/// it, and copies that through the TMA. The put's stores reach the block at its barrier, and the async
/// proxy reads global memory from outside the block, so the bulk loads see them only through each writer's
/// `fence.proxy.async.global` in `copy`: without it they read the last round's bytes, as they may on a GPU.
#[test]
fn a_copy_moves_what_the_block_put_just_before_it() {
    const WORLD: u32 = 2;
    const LEN: usize = 4096;
    let src = Sym::new(WORLD, LEN, 0, |_, _| 0);
    let dst = Sym::new(WORLD, LEN, 0, |_, _| 0);
    let (src_raw, dst_raw) = (src.raws(WORLD), dst.raws(WORLD));
    for round in 1..=4 {
        let data: Vec<Vec<u8>> = (0..WORLD as usize).map(|rank| round_bytes(round, rank, LEN)).collect();
        let data = Sym::new(WORLD, LEN, 0, |rank, i| data[rank as usize][i]);
        let data_sl = data.slices(WORLD);
        let kernel = || {
            let rank = team::rank() as usize;
            let next = (team::rank() + 1) % team::world();
            let mut copier = BulkCopier::new();
            assert!(copier.uses_tma());
            let own: SymSliceMut<u8> = arg(src_raw[rank]);
            put(Group::Block, own.peer(rank as u32), arg::<&[u8]>(data_sl[rank]));
            let (src, dst): (SymSlice<u8>, SymSliceMut<u8>) = (arg(src_raw[rank]), arg(dst_raw[rank]));
            copier.put(dst.peer(next), src.peer(rank as u32));
        };
        run_ok(WORLD, [1, 1, 1], [64, 1, 1], bulk_staging_bytes(1024), &kernel);
        for rank in 0..WORLD as usize {
            let to = (rank + 1) % WORLD as usize;
            let (got, want) = (dst.copy(to as u32), round_bytes(round, rank, LEN));
            if let Some(i) = (0..LEN).find(|&i| got[i] != want[i]) {
                panic!(
                    "round {round}: rank {rank}'s copy to rank {to}: byte {i} is {:#x}, want {:#x}",
                    got[i], want[i]
                );
            }
        }
    }
}

/// How a block copies in [`every_thread_reads_the_copy_once_it_returns`].
#[derive(Debug, Clone, Copy)]
enum Copied {
    /// `BulkCopier::get` through the TMA.
    GetByTma,
    /// `BulkCopier::copy_vectors` through the TMA.
    VectorsByTma,
    /// `BulkCopier::copy_vectors` without a ring: every thread copies its share.
    VectorsByThreads,
}

/// A copy is complete for every thread of the block when it returns (`copy`'s last barrier, and
/// `copy_vectors`' own where the threads copy): each thread then reads vectors that another thread or the
/// TMA wrote, and every round's source is new.
#[test]
fn every_thread_reads_the_copy_once_it_returns() {
    const LEN: usize = 4096;
    for how in [Copied::GetByTma, Copied::VectorsByTma, Copied::VectorsByThreads] {
        let dst = Sym::new(1, LEN, 0, |_, _| 0);
        let out = Sym::new(1, LEN, 0, |_, _| 0);
        let (dst_sl, out_sl) = (dst.slices(1), out.slices(1));
        let staging = match how {
            Copied::VectorsByThreads => 0,
            _ => bulk_staging_bytes(1024),
        };
        for round in 1..=3 {
            let bytes = round_bytes(round, 0, LEN);
            let src = Sym::new(1, LEN, 0, |_, i| bytes[i]);
            let (src_raw, src_sl) = (src.raws(1), src.slices(1));
            let kernel = || {
                let mut copier = BulkCopier::new();
                let dst: &mut [u8] = arg(dst_sl[0]);
                match how {
                    Copied::GetByTma => copier.get(dst, arg::<SymSlice<u8>>(src_raw[0]).peer(0)),
                    Copied::VectorsByTma | Copied::VectorsByThreads => {
                        copier.copy_vectors(VectorsMut::of(dst), Vectors::of(arg::<&[u8]>(src_sl[0])))
                    }
                }
                // Each thread reads the vectors of the thread after it.
                let (copied, out) = (Vectors::of(arg::<&[u8]>(dst_sl[0])), VectorsMut::of(arg::<&mut [u8]>(out_sl[0])));
                let first = (thread_rank() as usize + 1) % block_size() as usize;
                for k in (first..copied.vectors()).step_by(block_size() as usize) {
                    out.store(k, copied.load(k));
                }
            };
            run_ok(1, [1, 1, 1], [64, 1, 1], staging, &kernel);
            let (got, want) = (out.copy(0), round_bytes(round, 0, LEN));
            if let Some(i) = (0..LEN).find(|&i| got[i] != want[i]) {
                panic!("{how:?}, round {round}: byte {i} read after the copy is {:#x}, want {:#x}", got[i], want[i]);
            }
        }
    }
}

/// The TMA completes a bulk load's transactions on an mbarrier, which it may see initialised only after a
/// proxy fence (`BulkCopier::new` fences): a load on a barrier no fence followed is an error that says so.
#[test]
fn a_bulk_load_on_a_barrier_the_async_proxy_may_not_see_is_an_error() {
    let src = Sym::new(1, 64, 0, |_, i| i as u8);
    let src_sl = src.slice(0);
    let kernel = || {
        let src: &[u8] = arg(src_sl);
        let (base, _) = bulk::dynamic_shared_window();
        // SAFETY: the launch's dynamic shared memory holds the barrier and a stage of 64 bytes; the source
        // is a 16-byte aligned kernel argument of 64 bytes.
        unsafe {
            bulk::mbarrier_init(base, 1);
            bulk::mbarrier_arrive_expect_tx(base, 64);
            bulk::bulk_load(base.byte_add(16), GlobalPtr::from_generic(src.as_ptr()), 64, base);
        }
    };
    let outcome = run(1, [1, 1, 1], [1, 1, 1], 16 + 64, TIMEOUT_NS, &kernel).remove(0);
    match outcome.result {
        Err(EmuError::Trapped { message, .. }) => {
            assert!(message.contains("no proxy fence") && message.contains("fence_proxy_async_shared_cta"), "{message}")
        }
        other => panic!("a bulk load on an unfenced mbarrier ran: {other:?}"),
    }
}
