//! Device-side traces: puts, signals, waits, barriers, epoch advances and user marks ([`mark`]), each with
//! `%globaltimer` and `%smid`, recorded into a bounded per-rank ring ([`TraceRing`]) that the host reads
//! after every launch and writes out as a Perfetto/Chrome trace.
//!
//! # Zero cost when off
//!
//! On the GPU the recording code exists only in the *traced flavour* of a kernels crate: a second PTX
//! module the builder compiles with `--cfg ferrocomm_trace` (`ferrocomm_builder`, `FERROCOMM_TRACE_ARCHES`),
//! which the runtime loads only for a team built with tracing on. In the ordinary build every hook of this
//! module is an empty `#[inline(always)]` function, so the PTX of every kernel is unchanged byte for byte
//! (the PTX goldens pin it), and no runtime check of a ring pointer sits in any wait.
//!
//! In host builds (the emulator) the hooks are always compiled and check at run time whether the rank's
//! error buffer names a ring: the emulator's speed is not what it verifies.
//!
//! ```
//! use ferrocomm_device::prelude::*;
//! fn phase(pad: SignalPad) {
//!     ferrocomm_device::trace::mark("exchange"); // a mark on this block's track, when tracing
//!     let session = pad.session();
//!     let _ = session.epoch();
//! }
//! ```

use crate::abi::{Cmp, TraceKind};
#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
use crate::abi::{TRACE_HEADER_BYTES, TraceEvent, TraceRing};

/// The rank's ring, as the host wrote it at module load (traced GPU modules only; see
/// [`TRACE_RING_SYMBOL`](crate::abi::TRACE_RING_SYMBOL)).
#[cfg(all(target_arch = "nvptx64", ferrocomm_trace))]
#[unsafe(no_mangle)]
pub static mut FERROCOMM_TRACE_RING: u64 = 0;

/// Whether this build of the device library can record events: the traced GPU flavour, and every host
/// build (the emulator).
pub const COMPILED_IN: bool = cfg!(any(ferrocomm_trace, not(target_arch = "nvptx64")));

/// Marks a point of the kernel on this block's track (`name`: its first 16 bytes are kept). Each thread that
/// calls it records one event: call it from one thread of the block (`thread_rank() == 0`) for one mark.
#[inline(always)]
pub fn mark(name: &'static str) {
    let bytes = name.as_bytes();
    let (mut a, mut b) = (0u64, 0u64);
    let mut i = 0;
    // Folded to two constants for a literal name: no string reaches the device.
    while i < bytes.len() && i < 16 {
        if i < 8 {
            a |= (bytes[i] as u64) << (8 * i);
        } else {
            b |= (bytes[i] as u64) << (8 * (i - 8));
        }
        i += 1;
    }
    record(TraceKind::Mark, 0, a, b);
}

/// The name a [`mark`] recorded in an event's `a` and `b` (host side).
#[cfg(not(target_arch = "nvptx64"))]
pub fn mark_name(a: u64, b: u64) -> String {
    let bytes: Vec<u8> = a.to_le_bytes().into_iter().chain(b.to_le_bytes()).take_while(|&c| c != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A put of `bytes` to `dst` begins (its group's leader records it).
#[inline(always)]
pub(crate) fn put_begin(bytes: usize, dst: u64) {
    record(TraceKind::PutBegin, 0, bytes as u64, dst);
}

/// The put ends (`0, 0` where the end does not know the put: a non-blocking put's quiet).
#[inline(always)]
pub(crate) fn put_end(bytes: usize, dst: u64) {
    record(TraceKind::PutEnd, 0, bytes as u64, dst);
}

/// Raises the signal at `addr` (`raise`: its store or add), then records that it was set to (`add ==
/// false`) or increased by `value`.
#[inline(always)]
pub(crate) fn raised(addr: u64, value: u64, add: bool, raise: impl FnOnce()) {
    raise();
    record(TraceKind::Signal, add as u8, addr, value);
}

/// A wait for `signal cmp expected` begins.
#[inline(always)]
pub(crate) fn wait_begin(addr: u64, expected: u64, cmp: Cmp) {
    record(TraceKind::WaitBegin, cmp as u8, addr, expected);
}

/// The wait ended, seeing `observed` (returned, for the wait's result).
#[inline(always)]
pub(crate) fn waited(addr: u64, observed: u64, cmp: Cmp) -> u64 {
    record(TraceKind::WaitEnd, cmp as u8, addr, observed);
    observed
}

/// The block passed a barrier (thread 0 records it).
#[inline(always)]
pub(crate) fn barrier() {
    #[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
    if crate::index::thread_rank() == 0 {
        record(TraceKind::Barrier, 0, 0, 0);
    }
}

/// The session of the pad at `pad` ended epoch `epoch` (thread 0 of each block records it).
#[inline(always)]
pub(crate) fn epoch(pad: u64, epoch: u64) {
    #[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
    if crate::index::thread_rank() == 0 {
        record(TraceKind::Epoch, 0, pad, epoch);
    }
    #[cfg(not(any(ferrocomm_trace, not(target_arch = "nvptx64"))))]
    let _ = (pad, epoch);
}

/// Records one event, or nothing in an untraced GPU build (the call folds away).
#[inline(always)]
fn record(kind: TraceKind, aux: u8, a: u64, b: u64) {
    #[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
    record_into_ring(kind, aux, a, b);
    #[cfg(not(any(ferrocomm_trace, not(target_arch = "nvptx64"))))]
    let _ = (kind, aux, a, b);
}

/// The rank's ring, null when not tracing.
#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
#[inline(always)]
fn ring() -> *mut TraceRing {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: a global of this module instance, written by the host only while no kernel of it runs.
        unsafe { (&raw const FERROCOMM_TRACE_RING).read_volatile() as usize as *mut TraceRing }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        // Device-library calls outside an emulated launch (host-side unit tests of copies) trace nothing.
        let Some(errors) = crate::emu::thread::try_current().map(|t| t.launch.ctx.errors) else {
            return core::ptr::null_mut();
        };
        if errors.is_null() {
            return core::ptr::null_mut();
        }
        // SAFETY: the launch's live error buffer; the host writes this field only between launches.
        unsafe { core::ptr::read_volatile(&raw const (*errors).trace_ring) as usize as *mut TraceRing }
    }
}

/// Claims a slot and writes the event there; past the capacity the claim alone counts the lost event.
/// Not inlined: a traced hot loop keeps its registers, and the event's stores sit in one function.
#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
#[inline(never)]
fn record_into_ring(kind: TraceKind, aux: u8, a: u64, b: u64) {
    let ring = ring();
    if ring.is_null() {
        return;
    }
    // SAFETY: the host keeps the ring allocated (header + `capacity` events) while the team lives and touches
    // it only between launches; `claimed` is only accessed atomically during a launch.
    let slot = unsafe { claim(&raw mut (*ring).claimed) };
    // SAFETY: as above; `capacity` does not change during a launch.
    let capacity = unsafe { core::ptr::read_volatile(&raw const (*ring).capacity) };
    if slot >= capacity {
        return;
    }
    let event = TraceEvent {
        time: crate::time::globaltimer(),
        kind: kind as u8,
        aux,
        smid: crate::index::smid() as u16,
        block: crate::index::block_rank(),
        thread: crate::index::thread_rank(),
        reserved: 0,
        a,
        b,
    };
    // SAFETY: slot `slot < capacity` of the ring's events, claimed by this thread alone.
    unsafe {
        let events = ring.cast::<u8>().add(TRACE_HEADER_BYTES).cast::<TraceEvent>();
        events.add(slot as usize).write_volatile(event);
    }
}

/// `atomicAdd(claimed, 1)`: on the GPU the device library's relaxed GPU-scope add; on the host a plain std
/// atomic, outside the emulator's checker and store buffers (a trace is not kernel data).
///
/// # Safety
///
/// `claimed` is a live, aligned `u64` only accessed atomically while kernels run.
#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
#[inline(always)]
unsafe fn claim(claimed: *mut u64) -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: per the contract.
        unsafe { crate::atomic::GpuAtomicU64::from_ptr(claimed) }.fetch_add_relaxed(1)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        // SAFETY: per the contract.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(claimed) }.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::mark_name;

    #[test]
    fn mark_names_round_trip_through_two_words() {
        let pack = |name: &str| {
            let mut w = [0u8; 16];
            let n = name.len().min(16);
            w[..n].copy_from_slice(&name.as_bytes()[..n]);
            (u64::from_le_bytes(w[..8].try_into().unwrap()), u64::from_le_bytes(w[8..].try_into().unwrap()))
        };
        let (a, b) = pack("phase");
        assert_eq!(mark_name(a, b), "phase");
        let (a, b) = pack("a-long-phase-name-cut");
        assert_eq!(mark_name(a, b), "a-long-phase-nam");
    }
}
