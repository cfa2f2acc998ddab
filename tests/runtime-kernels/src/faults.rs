//! Kernels that fail on purpose: a planted panic on one rank while its peers wait, a thousand threads
//! that panic at once, and threads that exit before a barrier. Bodies for both targets, the PTX entries,
//! and (on the host) the descriptors and launchers.

use ferrocomm_device::abi::{RawSlice, RawSym};
use ferrocomm_device::ctx::team;
use ferrocomm_device::error::exit_thread;
use ferrocomm_device::index::{global_thread_idx, thread_rank};
use ferrocomm_device::signal::SignalPad;
use ferrocomm_device::sync::{sync_threads, sync_warp};

/// The message of [`planted_panic`]'s assertion.
pub const PLANTED_MESSAGE: &str = "planted device panic";

/// Thread 0 of rank `panic_rank` fails an assertion (message [`PLANTED_MESSAGE`]); thread 0 of every other
/// rank raises signal 0 of the next rank by one. Then every thread waits for its own signal 0 to reach
/// `target`, passes a block barrier and sets `out[thread]` of its rank's copy to 1. With a panic, the next
/// rank's signal is never raised: its waits can only end through the team's abort word (or the timeout).
/// Without one (`panic_rank >= world`), launch `k` of a fresh pad passes with `target = k`.
///
/// # Safety
///
/// `pad` is a live signal pad of the launching team with at least one signal; `out` a live symmetric
/// buffer with an element per thread of the block.
pub unsafe fn planted_panic(pad: RawSym<u64>, out: RawSym<u32>, panic_rank: u32, target: u64) {
    // SAFETY: the caller's contract.
    let pad = unsafe { SignalPad::from_raw(pad) };
    let (rank, world) = (team::rank(), team::world());
    let t = thread_rank();
    assert!(rank != panic_rank || t != 0, "planted device panic");
    if t == 0 {
        pad.peer((rank + 1) % world, 0).add_release(1);
    }
    pad.local(0).wait_ge(target);
    // Thread 0 of the panicking rank has exited: the barrier must not wait for it.
    sync_threads();
    if (t as usize) < out.len {
        // SAFETY: in bounds of this rank's live copy; each thread writes its own element.
        unsafe { out.local.add(t as usize).write(1) };
    }
}

/// Every thread whose global index is below `failing` fails an assertion: a launch with thousands of
/// errors, whose report must stay a summary.
pub fn many_panics(failing: u32) {
    assert!(global_thread_idx() as u32 >= failing, "thread failed on purpose");
}

/// Threads leave before a barrier (PTX `exit`), the others meet at it and set `out[thread] = 1`:
/// - `mode` 0: thread 0 exits, the rest of the block passes `barrier.sync 0`;
/// - `mode` 1: all of warp 0 exits, the other warps pass `barrier.sync 0`;
/// - `mode` 2: lane 0 exits, lanes 1..31 of warp 0 pass `bar.warp.sync 0xffffffff` (a mask naming it).
pub fn exit_then_sync(out: RawSlice<u32>, mode: u32) {
    let t = thread_rank();
    match mode {
        0 | 2 if t == 0 => exit_thread(),
        1 if t < 32 => exit_thread(),
        _ => {}
    }
    if mode == 2 {
        if t >= 32 {
            return;
        }
        sync_warp(u32::MAX);
    } else {
        sync_threads();
    }
    if (t as usize) < out.len {
        // SAFETY: in bounds of this rank's live buffer; each thread writes its own element.
        unsafe { out.ptr.add(t as usize).write(1) };
    }
}

#[cfg(target_arch = "nvptx64")]
mod entries {
    use ferrocomm_device::abi::{RawSlice, RawSym};

    /// See [`super::planted_panic`].
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn planted_panic(pad: RawSym<u64>, out: RawSym<u32>, panic_rank: u32, target: u64) {
        // SAFETY: the launcher passes a live signal pad and symmetric buffer of this team.
        unsafe { super::planted_panic(pad, out, panic_rank, target) }
    }

    /// See [`super::many_panics`].
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn many_panics(failing: u32) {
        super::many_panics(failing)
    }

    /// See [`super::exit_then_sync`].
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn exit_then_sync(out: RawSlice<u32>, mode: u32) {
        super::exit_then_sync(out, mode)
    }
}

/// Descriptors and typed launchers of these kernels (the shape `#[kernel]` generates).
#[cfg(not(target_arch = "nvptx64"))]
pub mod launch {
    use std::ffi::c_void;

    use ferrocomm::{Error, Kernel, LaunchConfig, LaunchGuard, ParamPack, SignalPadBuffer, SymBuffer, Team};

    /// # Safety
    ///
    /// `params[i]` points at a valid `A`.
    unsafe fn param<A: Copy>(params: &[*const c_void], i: usize) -> A {
        // SAFETY: the caller's contract.
        unsafe { params[i].cast::<A>().read_unaligned() }
    }

    // Hand-written entries without `griddepcontrol.wait`: launched in plain stream order.
    /// Kernel `planted_panic`.
    pub static PLANTED_PANIC: Kernel = Kernel {
        module: &crate::__FERROCOMM_MODULE,
        name: "planted_panic",
        emulate: emulate_planted_panic,
        waits: true,
        grid_dependency: false,
        max_threads_per_block: None,
    };
    /// Kernel `many_panics`.
    pub static MANY_PANICS: Kernel = Kernel {
        module: &crate::__FERROCOMM_MODULE,
        name: "many_panics",
        emulate: emulate_many_panics,
        waits: false,
        grid_dependency: false,
        max_threads_per_block: None,
    };
    /// Kernel `exit_then_sync`.
    pub static EXIT_THEN_SYNC: Kernel = Kernel {
        module: &crate::__FERROCOMM_MODULE,
        name: "exit_then_sync",
        emulate: emulate_exit_then_sync,
        waits: false,
        grid_dependency: false,
        max_threads_per_block: None,
    };

    /// # Safety
    ///
    /// `params` holds pointers to a pad's `RawSym<u64>`, a `RawSym<u32>`, a `u32` and a `u64`.
    unsafe fn emulate_planted_panic(params: &[*const c_void]) {
        assert_eq!(params.len(), 4);
        // SAFETY: the caller's contract.
        unsafe { super::planted_panic(param(params, 0), param(params, 1), param(params, 2), param(params, 3)) }
    }

    /// # Safety
    ///
    /// `params` holds one pointer to a `u32`.
    unsafe fn emulate_many_panics(params: &[*const c_void]) {
        assert_eq!(params.len(), 1);
        // SAFETY: the caller's contract.
        super::many_panics(unsafe { param(params, 0) })
    }

    /// # Safety
    ///
    /// `params` holds pointers to a `RawSlice<u32>` of a live buffer and a `u32`.
    unsafe fn emulate_exit_then_sync(params: &[*const c_void]) {
        assert_eq!(params.len(), 2);
        // SAFETY: the caller's contract.
        unsafe { super::exit_then_sync(param(params, 0), param(params, 1)) }
    }

    /// Launches `planted_panic` (see the body); `pad` and `out` stay borrowed until the guard is gone.
    pub fn planted_panic<'a>(
        team: &'a Team,
        cfg: LaunchConfig,
        pad: &'a SignalPadBuffer,
        out: &'a mut SymBuffer<u32>,
        panic_rank: u32,
        target: u64,
    ) -> Result<LaunchGuard<'a>, Error> {
        // SAFETY: the pack holds the kernel's four parameters in order, the buffers borrowed for as long as
        // the guard lives (`out` mutably: the kernel writes it).
        unsafe {
            team.launch(&PLANTED_PANIC, cfg, |rank| {
                pad.check_for(rank)?;
                out.check_for(rank)?;
                let mut pack = ParamPack::new();
                pack.push(pad.raw(rank.rank())?);
                pack.push(out.raw(rank.rank())?);
                pack.push(panic_rank);
                pack.push(target);
                Ok(pack)
            })
        }
    }

    /// Launches `many_panics`: every thread with a global index below `failing` panics, on every rank.
    pub fn many_panics(team: &Team, cfg: LaunchConfig, failing: u32) -> Result<LaunchGuard<'_>, Error> {
        // SAFETY: the pack holds the kernel's one parameter, a `u32`; no memory is involved.
        unsafe {
            team.launch(&MANY_PANICS, cfg, |_| {
                let mut pack = ParamPack::new();
                pack.push(failing);
                Ok(pack)
            })
        }
    }

    /// Launches `exit_then_sync` in `mode` (see the body); `out` stays borrowed until the guard is gone.
    pub fn exit_then_sync<'a>(
        team: &'a Team,
        cfg: LaunchConfig,
        out: &'a mut SymBuffer<u32>,
        mode: u32,
    ) -> Result<LaunchGuard<'a>, Error> {
        // SAFETY: the pack holds the kernel's parameters in order, `out` borrowed mutably while the guard lives.
        unsafe {
            team.launch(&EXIT_THEN_SYNC, cfg, |rank| {
                out.check_for(rank)?;
                let mut pack = ParamPack::new();
                pack.push(out.raw_slice(rank.rank())?);
                pack.push(mode);
                Ok(pack)
            })
        }
    }
}
