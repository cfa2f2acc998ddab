//! Kernels written with the device library's remote-capable calls (`ferrocomm_device::nvshmem`), built
//! twice: as ordinary PTX (the calls become the library's own stores through the peer table) and linked
//! with NVSHMEM's device bitcode (the calls become NVSHMEM's). The emulator runs the same source.
//!
//! | kernel | what |
//! | --- | --- |
//! | [`nvshmem_put_signal()`] | every rank puts its `src` into slot `rank` of the next rank's `dst` with a signal, raises a second signal, waits for the previous rank's, and records which ranks loads and stores reach |
//! | [`nvshmem_all_reduce_f32()`] | a one-shot sum in one block: every rank puts its `data` into slot `rank` of every rank's `stage` with a signal, waits for all, sums |
//! | [`ops`] | the bench's operations (`ferrocomm bench --modes nvshmem`): put, ping-pong, all-gather, all-to-all and a one-shot all-reduce over many blocks, launched through [`host::NvshmemOps`] |
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

use ferrocomm_device::kernel;
use ferrocomm_device::nvshmem;
use ferrocomm_device::prelude::*;

/// Rank `r` puts `src` (its copy) into elements `r * len(src)..` of rank `(r + 1) % world`'s `dst`, raising
/// that rank's signal 0 by one with the data, then its signal 1 by a release signal of its own; waits until
/// both of its own signals reached the launch's epoch (the previous rank's put arrived), and records in
/// `reach[q]` whether loads and stores reach rank `q` (`nvshmem_ptr`). Every thread of block 0 takes part;
/// other blocks only keep the pad's epoch.
#[kernel(requires(len(dst) >= world() * len(src), len(reach) >= world()))]
pub fn nvshmem_put_signal(src: SymSlice<u32>, dst: SymSliceMut<u32>, reach: SymSliceMut<u32>, pad: SignalPad) {
    let (rank, world) = (team::rank(), team::world());
    let session = pad.session();
    if block_rank() == 0 {
        let next = session.channel((rank + 1) % world);
        let at = rank as usize * src.len();
        nvshmem::put_signal_nbi(Group::Block, &next, dst, at, src.peer(rank), 0, SignalOp::Add(1)).quiet();
        if thread_rank() == 0 {
            nvshmem::signal_release(&next, 1, SignalOp::Add(1));
            let prev = session.channel((rank + world - 1) % world);
            nvshmem::wait_signal_acquire(&prev, 0, Cmp::Ge, session.epoch());
            nvshmem::wait_signal_acquire(&prev, 1, Cmp::Ge, session.epoch());
            for q in 0..world {
                let reachable = nvshmem::reachable(&session.channel(q), dst).is_some();
                // SAFETY: element `q` of this rank's own copy, which only this thread writes.
                unsafe { reach.local().write(q as usize, reachable as u32) };
            }
        }
        sync_threads();
    }
}

/// A one-shot all-reduce (sum) of `data` in place. Rank `r` puts its copy of `data` into slot `r` of half
/// `epoch % 2` of every rank's `stage` (itself included) with signal `r` raised by one, waits until every
/// rank's signal reached the epoch, and sums the slots into `data`. The two halves let launch `k + 1`
/// write while a slower rank still reads launch `k`'s: no rank starts launch `k + 2` before every rank
/// has put its launch `k + 1` data, which each does only after summing launch `k`'s. One block.
#[kernel(requires(len(stage) >= 2 * world() * len(data)))]
pub fn nvshmem_all_reduce_f32(data: SymSliceMut<f32>, stage: SymSliceMut<f32>, pad: SignalPad) {
    let (rank, world) = (team::rank(), team::world());
    let session = pad.session();
    let n = data.len();
    let half = (session.epoch() % 2) as usize * world as usize * n;
    for q in 0..world {
        let ch = session.channel(q);
        let at = half + rank as usize * n;
        nvshmem::put_signal_nbi(Group::Block, &ch, stage, at, data.local(), rank as usize, SignalOp::Add(1)).quiet();
    }
    if thread_rank() == 0 {
        for q in 0..world {
            nvshmem::wait_signal_acquire(&session.channel(q), q as usize, Cmp::Ge, session.epoch());
        }
    }
    sync_threads();
    let mine = stage.local();
    let out = data.local();
    let mut i = thread_rank() as usize;
    while i < n {
        let mut sum = 0.0f32;
        for q in 0..world as usize {
            // SAFETY: slot `q` of this half is complete (its signal was acquired above) and no rank writes
            // it again before every rank, this one included, has put its next launch's data.
            sum += unsafe { mine.as_const().read(half + q * n + i) };
        }
        // SAFETY: element `i` of this rank's copy, written by this thread alone; its own puts of it
        // completed at their quiet.
        unsafe { out.write(i, sum) };
        i += block_size() as usize;
    }
}

pub mod ops;

#[cfg(not(target_arch = "nvptx64"))]
ferrocomm::kernel_module!();

#[cfg(not(target_arch = "nvptx64"))]
pub mod host;
