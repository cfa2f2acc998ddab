//! Kernel bodies, compiled for the GPU (called by the PTX entries) and for the host (called by the
//! emulator through [`crate::host`]).

use ferrocomm_device::abi::{RawSlice, RawSym};
use ferrocomm_device::ctx::team;
use ferrocomm_device::index::{global_thread_idx, global_threads, grid_size, thread_rank};
use ferrocomm_device::signal::SignalPad;
use ferrocomm_device::sym::SymSliceMut;
use ferrocomm_device::sync::sync_threads;
use ferrocomm_device::time::{globaltimer, nanosleep};

/// What `ring` writes: who wrote it, in which launch, at which index.
pub const fn tag(rank: u32, epoch: u64, i: usize) -> u32 {
    (rank << 24) ^ (((epoch as u32) & 0xff) << 16) ^ (i as u32 & 0xffff)
}

/// `dst[i] = rank * 1_000_000 + i` on every rank (grid-stride): shows every rank ran, with its own context.
pub fn stamp_rank(dst: RawSlice<u32>) {
    let rank = team::rank();
    let mut i = global_thread_idx();
    while i < dst.len {
        // SAFETY: `i < len` of this rank's live buffer; every thread writes distinct elements.
        unsafe { dst.ptr.add(i).write(rank * 1_000_000 + i as u32) };
        i += global_threads();
    }
}

/// Every rank writes [`tag`]`(rank, epoch, i)` into the next rank's `data`, then each block raises the next
/// rank's signal 0 by one (release); each rank waits until its own signal 0 has seen every block of this
/// launch (acquire), so all ranks must run at once. Advances the pad's epoch: reusable without resets.
///
/// # Safety
///
/// `data` and `pad` describe live symmetric allocations of the launching team (`pad` with its epoch slots).
pub unsafe fn ring(data: RawSym<u32>, pad: RawSym<u64>) {
    // SAFETY: the caller's contract.
    let (data, pad) = unsafe { (SymSliceMut::from_raw(data), SignalPad::from_raw(pad)) };
    let (rank, world) = (team::rank(), team::world());
    let next = (rank + 1) % world;
    let session = pad.session(); // the launch's epoch, advanced when the session ends
    let epoch = session.epoch();
    let dst = data.peer(next);
    let mut i = global_thread_idx();
    while i < dst.len() {
        // SAFETY: in bounds; only this thread writes element `i` of the next rank's copy in this launch.
        unsafe { dst.write(i, tag(rank, epoch, i)) };
        i += global_threads();
    }
    // The block's writes are ordered before thread 0's release by the barrier.
    sync_threads();
    if thread_rank() == 0 {
        pad.peer(next, 0).add_release(1);
        pad.local(0).wait_ge(epoch * u64::from(grid_size()));
    }
}

/// Rank 0 waits for signal 1 of its pad, which no rank ever raises: a timeout on purpose. The other ranks
/// return at once.
///
/// # Safety
///
/// `pad` describes a live signal pad of the launching team with at least two signals.
pub unsafe fn wait_unraised(pad: RawSym<u64>) {
    // SAFETY: the caller's contract.
    let pad = unsafe { SignalPad::from_raw(pad) };
    if team::rank() == 0 && thread_rank() == 0 {
        pad.local(1).wait_ge(1);
    }
}

/// Writes one element past the end of `dst`: a device panic on purpose (a bounds check; its message has
/// format arguments, so on a GPU the record carries file and line but not the text).
pub fn out_of_bounds(dst: RawSlice<u32>) {
    if thread_rank() != 0 {
        return;
    }
    // SAFETY: a live buffer of `len` elements (never dangling: the runtime allocates at least 256 bytes).
    let s = unsafe { core::slice::from_raw_parts_mut(dst.ptr, dst.len) };
    let past_end = s.len();
    s[past_end] = 1;
}

/// Thread 0 of every rank spins for `ns` nanoseconds outside any timed wait: a kernel the device timeout
/// cannot end, for the host watchdog to catch.
pub fn spin(ns: u64) {
    if thread_rank() != 0 {
        return;
    }
    let start = globaltimer();
    while globaltimer().wrapping_sub(start) < ns {
        nanosleep(1000);
    }
}
