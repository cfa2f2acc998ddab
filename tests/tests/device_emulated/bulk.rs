//! TMA bulk copies on the emulator: `BulkCopier` against a plain copy at awkward sizes and offsets, with
//! and without a staging ring, and the emulator's model of the hardware's lateness — a store that is read
//! before its group completes, a stage rewritten before its store read it, a store still in flight when
//! its thread ends.

use ferrocomm_device::bulk::{self, BulkCopier, SharedAddr, bulk_staging_bytes};
use ferrocomm_device::emu::EmuError;
use ferrocomm_device::fence::fence_proxy_async_shared_cta;
use ferrocomm_device::mem::GlobalPtr;
use ferrocomm_device::prelude::*;

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
