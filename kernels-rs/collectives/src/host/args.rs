//! Lowering buffers to kernel arguments by hand, for the launches the typed launchers cannot express: a
//! buffer of any element type passed to a byte kernel (broadcast, all-gather, all-to-all, put, get), one
//! buffer passed to two arguments (the root's buffer is both the source and the receive buffer of a
//! broadcast), or different arguments per rank (an empty source on non-root ranks).
//!
//! Each helper checks the buffer belongs to the launching team, as `LaunchParam::lower` does, and takes
//! the address with `raw`/`raw_slice`, which also keeps the memory alive for a graph being captured.

use std::mem::size_of;

use ferrocomm::{DeviceCopy, Error, Kernel, LaunchConfig, LaunchGuard, ParamPack, RankRef, SignalPadBuffer, SymBuffer};
use ferrocomm_device::abi::{RawSlice, RawSym};

/// Rank `rank`'s view of the whole symmetric buffer.
pub(crate) fn sym<T: DeviceCopy>(buf: &SymBuffer<T>, rank: &RankRef<'_>) -> Result<RawSym<T>, Error> {
    buf.check_for(rank)?;
    buf.raw(rank.rank())
}

/// Rank `rank`'s view of the whole symmetric buffer, as bytes.
pub(crate) fn sym_bytes<T: DeviceCopy>(buf: &SymBuffer<T>, rank: &RankRef<'_>) -> Result<RawSym<u8>, Error> {
    let raw = sym(buf, rank)?;
    Ok(RawSym { peers: raw.peers.cast(), local: raw.local.cast(), len: raw.len * size_of::<T>() })
}

/// Rank `rank`'s part of the buffer.
pub(crate) fn slice<T: DeviceCopy>(buf: &SymBuffer<T>, rank: &RankRef<'_>) -> Result<RawSlice<T>, Error> {
    buf.check_for(rank)?;
    buf.raw_slice(rank.rank())
}

/// Rank `rank`'s part of the buffer, as bytes.
pub(crate) fn slice_bytes<T: DeviceCopy>(buf: &SymBuffer<T>, rank: &RankRef<'_>) -> Result<RawSlice<u8>, Error> {
    let raw = slice(buf, rank)?;
    Ok(RawSlice { ptr: raw.ptr.cast(), len: raw.len * size_of::<T>() })
}

/// An empty slice argument (a kernel sees `&[]`).
pub(crate) fn empty<T>() -> RawSlice<T> {
    RawSlice { ptr: std::ptr::null_mut(), len: 0 }
}

/// Rank `rank`'s view of a signal pad.
pub(crate) fn pad(pad: &SignalPadBuffer, rank: &RankRef<'_>) -> Result<RawSym<u64>, Error> {
    pad.check_for(rank)?;
    pad.raw(rank.rank())
}

/// Packs ABI values in argument order: `pack![a, b, c]`.
macro_rules! pack {
    ($($value:expr),* $(,)?) => {{
        let mut pack = ::ferrocomm::ParamPack::new();
        $(pack.push($value);)*
        pack
    }};
}
pub(crate) use pack;

/// Launches `kernel` on every rank of `team` with the arguments `args` packs for each rank.
///
/// # Safety
///
/// For every rank, `args` packs exactly the kernel's parameters in order, each of the ABI type of the
/// kernel's argument (`<A as DeviceParam>::Abi`), lowered with the helpers above from buffers that stay
/// borrowed — shared where the kernel only reads them, mutably where it writes them — for `'a`, the
/// lifetime of the returned guard.
pub(crate) unsafe fn launch<'a>(
    team: &'a ferrocomm::Team,
    kernel: &'static Kernel,
    cfg: LaunchConfig,
    args: impl FnMut(&RankRef<'_>) -> Result<ParamPack, Error>,
) -> Result<LaunchGuard<'a>, Error> {
    // SAFETY: the caller's contract is `Team::launch`'s.
    unsafe { team.launch(kernel, cfg, args) }
}
