//! Host side of the test kernels: the runtime's descriptors, the emulator entries (reading each parameter
//! from the pointer array `cuLaunchKernel` would get) and typed launchers whose borrows last as long as the
//! returned guard — the shape `#[kernel]` generates.

use std::ffi::c_void;

use ferrocomm::{Error, Kernel, LaunchConfig, LaunchGuard, ParamPack, SignalPadBuffer, SymBuffer, Team};
use ferrocomm_device::abi::{RawSlice, RawSym};

use crate::body;

/// Reads parameter `i` of type `A`.
///
/// # Safety
///
/// `params[i]` points at a valid `A`.
unsafe fn param<A: Copy>(params: &[*const c_void], i: usize) -> A {
    // SAFETY: the caller's contract.
    unsafe { params[i].cast::<A>().read_unaligned() }
}

macro_rules! descriptor {
    ($static:ident, $name:literal, $emulate:ident, waits: $waits:expr) => {
        #[doc = concat!("Kernel `", $name, "`.")]
        pub static $static: Kernel =
            // Hand-written entries without `griddepcontrol.wait`: launched in plain stream order.
            Kernel {
                module: &crate::__FERROCOMM_MODULE,
                name: $name,
                emulate: $emulate,
                waits: $waits,
                grid_dependency: false,
                max_threads_per_block: None,
            };
    };
}

descriptor!(STAMP_RANK, "stamp_rank", emulate_stamp_rank, waits: false);
descriptor!(RING, "ring", emulate_ring, waits: true);
descriptor!(WAIT_UNRAISED, "wait_unraised", emulate_wait_unraised, waits: true);
descriptor!(SPIN, "spin", emulate_spin, waits: false);
descriptor!(OUT_OF_BOUNDS, "out_of_bounds", emulate_out_of_bounds, waits: false);

/// # Safety
///
/// `params` holds one pointer to a `RawSlice<u32>` of a live buffer.
unsafe fn emulate_stamp_rank(params: &[*const c_void]) {
    assert_eq!(params.len(), 1);
    // SAFETY: the caller's contract.
    body::stamp_rank(unsafe { param(params, 0) })
}

/// # Safety
///
/// `params` holds pointers to a `RawSym<u32>` and a `RawSym<u64>` signal pad of the launching team.
unsafe fn emulate_ring(params: &[*const c_void]) {
    assert_eq!(params.len(), 2);
    // SAFETY: the caller's contract.
    unsafe { body::ring(param(params, 0), param(params, 1)) }
}

/// # Safety
///
/// `params` holds one pointer to the `RawSym<u64>` of a signal pad with two signals.
unsafe fn emulate_wait_unraised(params: &[*const c_void]) {
    assert_eq!(params.len(), 1);
    // SAFETY: the caller's contract.
    unsafe { body::wait_unraised(param(params, 0)) }
}

/// # Safety
///
/// `params` holds one pointer to a `u64`.
unsafe fn emulate_spin(params: &[*const c_void]) {
    assert_eq!(params.len(), 1);
    // SAFETY: the caller's contract.
    body::spin(unsafe { param(params, 0) })
}

/// # Safety
///
/// `params` holds one pointer to a `RawSlice<u32>` of a live buffer.
unsafe fn emulate_out_of_bounds(params: &[*const c_void]) {
    assert_eq!(params.len(), 1);
    // SAFETY: the caller's contract.
    body::out_of_bounds(unsafe { param(params, 0) })
}

fn slice(buf: &SymBuffer<u32>, rank: &ferrocomm::RankRef<'_>) -> Result<RawSlice<u32>, Error> {
    buf.check_for(rank)?;
    buf.raw_slice(rank.rank())
}

fn pad_raw(pad: &SignalPadBuffer, rank: &ferrocomm::RankRef<'_>) -> Result<RawSym<u64>, Error> {
    pad.check_for(rank)?;
    pad.raw(rank.rank())
}

/// Launches `stamp_rank` on every rank; `dst` stays borrowed until the guard is gone.
pub fn stamp_rank<'a>(
    team: &'a Team,
    cfg: LaunchConfig,
    dst: &'a mut SymBuffer<u32>,
) -> Result<LaunchGuard<'a>, Error> {
    // SAFETY: the pack holds the kernel's one parameter (`RawSlice<u32>`), and `dst` is borrowed mutably for
    // as long as the guard lives.
    unsafe {
        team.launch(&STAMP_RANK, cfg, |rank| {
            let mut pack = ParamPack::new();
            pack.push(slice(dst, rank)?);
            Ok(pack)
        })
    }
}

/// Launches `ring`; `data` and `pad` stay borrowed until the guard is gone.
pub fn ring<'a>(
    team: &'a Team,
    cfg: LaunchConfig,
    data: &'a mut SymBuffer<u32>,
    pad: &'a SignalPadBuffer,
) -> Result<LaunchGuard<'a>, Error> {
    // SAFETY: the pack holds the kernel's parameters (`RawSym<u32>`, `RawSym<u64>`) in order, both borrowed
    // for as long as the guard lives (`data` mutably: peers write it).
    unsafe {
        team.launch(&RING, cfg, |rank| {
            data.check_for(rank)?;
            let mut pack = ParamPack::new();
            pack.push(data.raw(rank.rank())?);
            pack.push(pad_raw(pad, rank)?);
            Ok(pack)
        })
    }
}

/// Launches `wait_unraised` (rank 0 times out waiting for signal 1 of `pad`).
pub fn wait_unraised<'a>(
    team: &'a Team,
    cfg: LaunchConfig,
    pad: &'a SignalPadBuffer,
) -> Result<LaunchGuard<'a>, Error> {
    if pad.len() < 2 {
        return Err(Error::LengthMismatch { relation: "pad.len() >= 2", left: pad.len(), right: 2 });
    }
    // SAFETY: the pack holds the kernel's one parameter, borrowed for as long as the guard lives.
    unsafe {
        team.launch(&WAIT_UNRAISED, cfg, |rank| {
            let mut pack = ParamPack::new();
            pack.push(pad_raw(pad, rank)?);
            Ok(pack)
        })
    }
}

/// Launches `out_of_bounds` (every rank panics).
pub fn out_of_bounds<'a>(
    team: &'a Team,
    cfg: LaunchConfig,
    dst: &'a mut SymBuffer<u32>,
) -> Result<LaunchGuard<'a>, Error> {
    // SAFETY: as for `stamp_rank`.
    unsafe {
        team.launch(&OUT_OF_BOUNDS, cfg, |rank| {
            let mut pack = ParamPack::new();
            pack.push(slice(dst, rank)?);
            Ok(pack)
        })
    }
}

/// Launches `spin`: thread 0 of every rank busy-waits `ns` nanoseconds outside any timed wait.
pub fn spin(team: &Team, cfg: LaunchConfig, ns: u64) -> Result<LaunchGuard<'_>, Error> {
    // SAFETY: the pack holds the kernel's one parameter, a `u64`; no memory is involved.
    unsafe {
        team.launch(&SPIN, cfg, |_| {
            let mut pack = ParamPack::new();
            pack.push(ns);
            Ok(pack)
        })
    }
}
