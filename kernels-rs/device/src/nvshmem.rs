//! Remote-capable puts, signals, waits and quiet: what reaches a peer that loads and stores cannot (another
//! node), through NVSHMEM's device API.
//!
//! One kernel source, three lowerings:
//!
//! | build | lowering |
//! | --- | --- |
//! | NVSHMEM flavour (`--cfg ferrocomm_nvshmem`, linked with `libnvshmem_device.bc` by the builder) | `nvshmemx_putmem_signal_nbi_{block,warp}`, `nvshmem_putmem_signal_nbi`, `nvshmem_fence` + `nvshmemx_signal_op`, `nvshmem_signal_fetch`, `nvshmem_quiet`, `nvshmem_ptr` |
//! | ordinary PTX | the device library's own stores through the peer table: the host refuses to launch it on a team whose peers loads and stores cannot reach |
//! | host (the emulator) | the same stores on the emulator's memory model, seen by its checker |
//!
//! Addresses are symmetric, as in NVSHMEM: a destination is a [`SymSliceMut`] and an element offset, a
//! signal is an index into a [`Channel`]'s pad, and the PE is the channel's peer (a team initialised with
//! NVSHMEM numbers its ranks by PE). The source of a put is a copy of a symmetric buffer
//! ([`PeerSlice`]): remote transports (IBGDA, IB RC) read only memory of NVSHMEM's symmetric heap.
//!
//! Ordering: a put-with-signal's signal is delivered after its data, so a peer that sees the signal by a
//! [`wait_signal_acquire`] sees the data; [`RemotePutToken::quiet`] (or its drop) completes the put at the source,
//! after which the source may be rewritten. Waits keep the library's timeout: NVSHMEM's
//! `nvshmem_signal_wait_until` polls forever in its released builds (`NVSHMEM_TIMEOUT_DEVICE_POLLING=OFF`),
//! so the wait polls `nvshmem_signal_fetch` under the library's timed loop, then fences with acquire
//! semantics at system scope.
//!
//! ```
//! use ferrocomm_device::prelude::*;
//! use ferrocomm_device::nvshmem;
//!
//! /// Rank r puts its copy of `src` into slot r of the next rank's `inbox`, with a signal.
//! fn ring(src: SymSlice<f32>, inbox: SymSliceMut<f32>, pad: SignalPad) {
//!     let (rank, world) = (team::rank(), team::world());
//!     let session = pad.session();
//!     let next = session.channel((rank + 1) % world);
//!     let n = src.len();
//!     let mine = src.peer(rank); // this rank's copy: symmetric memory, which remote transports read
//!     let put = nvshmem::put_signal_nbi(Group::Block, &next, inbox, rank as usize * n, mine, 0, SignalOp::Add(1));
//!     put.quiet();
//!     if thread_rank() == 0 {
//!         nvshmem::wait_signal_acquire(&session.channel((rank + world - 1) % world), 0, Cmp::Ge, session.epoch());
//!     }
//!     sync_threads();
//! }
//! ```

use core::panic::Location;

use crate::abi::Cmp;
use crate::group::Group;
use crate::signal::{Channel, SignalOp};
use crate::sym::{DeviceCopy, PeerSlice, PeerSliceMut, SymSliceMut};

/// NVSHMEM's device functions, linked in from `libnvshmem_device.bc` (signatures of NVSHMEM 3.4's
/// `nvshmem.h`: `size_t` is `usize`, `int` is `i32`, `nvshmemx_signal_op_t` an `i32`).
#[cfg(all(target_arch = "nvptx64", ferrocomm_nvshmem))]
mod sys {
    unsafe extern "C" {
        pub fn nvshmem_putmem_signal_nbi(
            dest: *mut u8,
            source: *const u8,
            bytes: usize,
            sig_addr: *mut u64,
            signal: u64,
            sig_op: i32,
            pe: i32,
        );
        pub fn nvshmemx_putmem_signal_nbi_warp(
            dest: *mut u8,
            source: *const u8,
            bytes: usize,
            sig_addr: *mut u64,
            signal: u64,
            sig_op: i32,
            pe: i32,
        );
        pub fn nvshmemx_putmem_signal_nbi_block(
            dest: *mut u8,
            source: *const u8,
            bytes: usize,
            sig_addr: *mut u64,
            signal: u64,
            sig_op: i32,
            pe: i32,
        );
        pub fn nvshmemx_signal_op(sig_addr: *mut u64, signal: u64, sig_op: i32, pe: i32);
        pub fn nvshmem_fence();
        pub fn nvshmem_signal_fetch(sig_addr: *const u64) -> u64;
        pub fn nvshmem_quiet();
        pub fn nvshmem_ptr(ptr: *const u8, pe: i32) -> *mut u8;
        pub fn nvshmem_my_pe() -> i32;
        pub fn nvshmem_n_pes() -> i32;
    }
}

/// `NVSHMEM_SIGNAL_SET` and `NVSHMEM_SIGNAL_ADD` (`nvshmem_common_transport.h`).
pub const SIGNAL_SET: i32 = 9;
/// See [`SIGNAL_SET`].
pub const SIGNAL_ADD: i32 = 10;

/// Whether this build lowers to NVSHMEM (the NVSHMEM flavour on the GPU).
pub const LINKED: bool = cfg!(all(target_arch = "nvptx64", ferrocomm_nvshmem));

/// NVSHMEM's `(value, sig_op)` for a signal operation.
#[inline(always)]
pub fn signal_op(op: SignalOp) -> (u64, i32) {
    match op {
        SignalOp::Set(v) => (v, SIGNAL_SET),
        SignalOp::Add(v) => (v, SIGNAL_ADD),
    }
}

/// A remote put in flight ([`put_signal_nbi`]): completed at the source by [`RemotePutToken::quiet`] or
/// its drop (`nvshmem_quiet` by the group's leader between two barriers of the group).
#[must_use = "a remote put completes at `quiet()` or where its token is dropped"]
#[derive(Debug)]
pub struct RemotePutToken {
    group: Group,
}

impl RemotePutToken {
    /// Completes the put: after it the source may change.
    #[inline(always)]
    pub fn quiet(self) {
        drop(self);
    }
}

impl Drop for RemotePutToken {
    #[inline(always)]
    fn drop(&mut self) {
        // Every thread's share is issued before the leader's quiet covers them, and nobody reuses the source
        // before it returned.
        self.group.sync();
        if self.group.is_leader() {
            quiet();
        }
        self.group.sync();
    }
}

/// The group's threads put `src` into elements `at..at + src.len()` of the channel's peer's copy of `dst`,
/// then raise signal `signal` of the peer's copy of the channel's pad as `op` says, delivered after the data.
/// Non-blocking: the returned token completes it. Every thread of the group calls it with the same
/// arguments (NVSHMEM's `_block` / `_warp` variants are collective in the same way).
#[inline(always)]
#[track_caller]
pub fn put_signal_nbi<T: DeviceCopy>(
    group: Group,
    ch: &Channel,
    dst: SymSliceMut<T>,
    at: usize,
    src: impl Into<PeerSlice<T>>,
    signal: usize,
    op: SignalOp,
) -> RemotePutToken {
    let src = src.into();
    // The bounds are checked the same way in every lowering (the peer's copy has the local copy's length).
    let local = dst.local().slice(at, src.len());
    #[cfg(all(target_arch = "nvptx64", ferrocomm_nvshmem))]
    {
        let sig = ch.inbox(signal).as_ptr();
        let (value, op) = signal_op(op);
        let bytes = src.len() * core::mem::size_of::<T>();
        let (d, s, pe) = (local.as_ptr().cast::<u8>(), src.as_ptr().cast::<u8>(), ch.peer() as i32);
        // SAFETY: `local` is a symmetric address of `bytes` bytes (a bounds-checked view of this rank's copy,
        // which NVSHMEM maps to the peer's), `sig` a symmetric signal of the pad, `src` symmetric memory of
        // `bytes` bytes; the group's threads call it together, as the `_block` and `_warp` forms require.
        unsafe {
            match group {
                Group::Thread => sys::nvshmem_putmem_signal_nbi(d, s, bytes, sig, value, op, pe),
                Group::Warp => sys::nvshmemx_putmem_signal_nbi_warp(d, s, bytes, sig, value, op, pe),
                Group::Block => sys::nvshmemx_putmem_signal_nbi_block(d, s, bytes, sig, value, op, pe),
            }
        }
    }
    #[cfg(not(all(target_arch = "nvptx64", ferrocomm_nvshmem)))]
    {
        let _ = local;
        crate::put::put_signal(group, ch.remote(dst).slice(at, src.len()), src, ch.signal(signal), op);
    }
    RemotePutToken { group }
}

/// Raises signal `signal` of the channel's peer's copy of its pad as `op` says, delivered after this
/// thread's earlier puts to that peer: `nvshmem_fence` then `nvshmemx_signal_op` (NVSHMEM orders a signal
/// operation after earlier puts only across a fence); else a release store or add.
#[inline(always)]
#[track_caller]
pub fn signal_release(ch: &Channel, signal: usize, op: SignalOp) {
    #[cfg(all(target_arch = "nvptx64", ferrocomm_nvshmem))]
    {
        let (value, op) = signal_op(op);
        // SAFETY: a symmetric signal of the pad (bounds-checked by `inbox`), and a PE of the team.
        unsafe {
            sys::nvshmem_fence();
            sys::nvshmemx_signal_op(ch.inbox(signal).as_ptr(), value, op, ch.peer() as i32)
        };
    }
    #[cfg(not(all(target_arch = "nvptx64", ferrocomm_nvshmem)))]
    ch.signal(signal).raise_release(op);
}

/// Waits until signal `signal` of this rank's copy of the channel's pad (the one the peer raises) satisfies
/// `cmp expected`, with acquire ordering: the data the signal covers is visible after it. Returns the
/// value seen. On timeout it
/// records a `Timeout` with this call's location and ends the thread, as every wait of the library does.
#[inline(always)]
#[track_caller]
pub fn wait_signal_acquire(ch: &Channel, signal: usize, cmp: Cmp, expected: u64) -> u64 {
    let sig = ch.inbox(signal);
    #[cfg(all(target_arch = "nvptx64", ferrocomm_nvshmem))]
    {
        let addr = sig.as_ptr();
        let seen = crate::signal::poll_until(
            || {
                // SAFETY: a live symmetric signal of this rank (the pad's contract).
                let v = unsafe { sys::nvshmem_signal_fetch(addr) };
                if cmp.holds(v, expected) { Ok(v) } else { Err(v) }
            },
            crate::signal::SPIN_POLLS,
            addr as u64,
            expected,
            cmp,
            Location::caller(),
        );
        // NVSHMEM's fetch is a volatile load: the fence gives it acquire semantics at system scope.
        crate::fence::fence_acq_rel_sys();
        seen
    }
    #[cfg(not(all(target_arch = "nvptx64", ferrocomm_nvshmem)))]
    {
        let _ = Location::caller();
        sig.wait(cmp, expected)
    }
}

/// Completes this thread's earlier remote puts and signals at their sources (`nvshmem_quiet`; else
/// `fence.acq_rel.sys`, which completes stores over NVLink).
#[inline(always)]
pub fn quiet() {
    #[cfg(all(target_arch = "nvptx64", ferrocomm_nvshmem))]
    {
        // SAFETY: no preconditions beyond an initialised NVSHMEM, which the host guarantees for this flavour.
        unsafe { sys::nvshmem_quiet() };
    }
    #[cfg(not(all(target_arch = "nvptx64", ferrocomm_nvshmem)))]
    crate::fence::fence_acq_rel_sys();
}

/// The channel's peer's copy of `buf` when loads and stores reach it (`nvshmem_ptr`: same node, NVLink or
/// P2P); `None` when only remote puts do. The ordinary build reads the team's peer table, which a team
/// initialised with NVSHMEM fills from `nvshmem_ptr` on the host, so both builds agree.
#[inline(always)]
#[track_caller]
pub fn reachable<T: DeviceCopy>(ch: &Channel, buf: SymSliceMut<T>) -> Option<PeerSliceMut<T>> {
    #[cfg(all(target_arch = "nvptx64", ferrocomm_nvshmem))]
    {
        // SAFETY: a symmetric address and a PE of the team.
        let p = unsafe { sys::nvshmem_ptr(buf.local().as_ptr().cast::<u8>(), ch.peer() as i32) };
        if p.is_null() {
            return None;
        }
        // SAFETY: NVSHMEM maps the peer's copy, as long as this rank's, at `p`.
        Some(unsafe { PeerSliceMut::from_raw_parts(p.cast::<T>(), buf.len()) })
    }
    #[cfg(not(all(target_arch = "nvptx64", ferrocomm_nvshmem)))]
    {
        let peer = ch.remote(buf);
        if peer.as_ptr().is_null() { None } else { Some(peer) }
    }
}

/// This PE's number as NVSHMEM counts (`nvshmem_my_pe`); the team's rank elsewhere. A team initialised
/// with NVSHMEM makes the two equal; a kernel may assert it.
#[inline(always)]
pub fn my_pe() -> u32 {
    #[cfg(all(target_arch = "nvptx64", ferrocomm_nvshmem))]
    {
        // SAFETY: no preconditions.
        unsafe { sys::nvshmem_my_pe() as u32 }
    }
    #[cfg(not(all(target_arch = "nvptx64", ferrocomm_nvshmem)))]
    crate::ctx::team::rank()
}

/// The number of PEs (`nvshmem_n_pes`); the team's size elsewhere.
#[inline(always)]
pub fn n_pes() -> u32 {
    #[cfg(all(target_arch = "nvptx64", ferrocomm_nvshmem))]
    {
        // SAFETY: no preconditions.
        unsafe { sys::nvshmem_n_pes() as u32 }
    }
    #[cfg(not(all(target_arch = "nvptx64", ferrocomm_nvshmem)))]
    crate::ctx::team::world()
}
