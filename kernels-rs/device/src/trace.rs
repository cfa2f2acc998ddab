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

#[cfg(all(target_arch = "nvptx64", ferrocomm_trace))]
use crate::abi::TRACE_CHUNK_EVENTS;
use crate::abi::{Cmp, TraceKind};
#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
use crate::abi::{TRACE_HEADER_BYTES, TraceEvent, TraceRing};

// The rank's ring and its capacity, as the host wrote them at module load (traced GPU modules only; see
// [`TRACE_RING_SYMBOL`](crate::abi::TRACE_RING_SYMBOL)). In the constant space: the constant cache serves
// every event after the first, where a global would be read from L2 again after each acquire (which
// invalidates the L1 cache) — half a microsecond per event on an H200.
#[cfg(all(target_arch = "nvptx64", ferrocomm_trace))]
core::arch::global_asm!(".visible .const .align 8 .b8 FERROCOMM_TRACE_RING[16];");

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

/// A [`mark`] by thread 0 of the block: one event per block, when thread 0 gets there (a phase of a
/// block-wide step: call it after the step's barrier). In an untraced GPU build it folds away, thread
/// test included.
#[inline(always)]
pub fn block_mark(name: &'static str) {
    #[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
    if crate::index::thread_rank() == 0 {
        mark(name);
    }
    #[cfg(not(any(ferrocomm_trace, not(target_arch = "nvptx64"))))]
    let _ = name;
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

/// The rank's ring (null when not tracing) and its capacity.
#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
#[inline(always)]
fn ring() -> (*mut TraceRing, u64) {
    #[cfg(target_arch = "nvptx64")]
    {
        let (ring, capacity): (u64, u64);
        // SAFETY: reads the module's constant written by the host only while no kernel of the module runs.
        unsafe {
            core::arch::asm!("ld.const.v2.u64 {{{r}, {c}}}, [FERROCOMM_TRACE_RING];", r = out(reg64) ring,
                c = out(reg64) capacity, options(pure, readonly, nostack))
        };
        (ring as usize as *mut TraceRing, capacity)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let none = (core::ptr::null_mut(), 0);
        // Device-library calls outside an emulated launch (host-side unit tests of copies) trace nothing.
        let Some(errors) = crate::lower::try_launch_ctx().map(|c| c.errors) else {
            return none;
        };
        if errors.is_null() {
            return none;
        }
        // SAFETY: the launch's live error buffer; the host writes this field only between launches.
        let ring = unsafe { core::ptr::read_volatile(&raw const (*errors).trace_ring) as usize as *mut TraceRing };
        if ring.is_null() {
            return none;
        }
        // SAFETY: a live ring (the host keeps it while the team lives); `capacity` does not change in a launch.
        (ring, unsafe { (*ring).capacity })
    }
}

/// Claims a slot and writes the event there; an event whose slot is past the capacity is counted as lost.
/// Not inlined: a traced hot loop keeps its registers, and the event's stores sit in one function.
#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
#[inline(never)]
fn record_into_ring(kind: TraceKind, aux: u8, a: u64, b: u64) {
    let (ring, capacity) = ring();
    if ring.is_null() {
        return;
    }
    // SAFETY: the host keeps the ring allocated (header + `capacity` events) while the team lives and touches
    // it only between launches; the counters are only accessed atomically during one.
    let (claimed, lost) = unsafe { (&raw mut (*ring).claimed, &raw mut (*ring).lost) };
    // SAFETY: as above.
    let slot = unsafe { claim(claimed) };
    if slot >= capacity {
        // SAFETY: as above.
        unsafe { count_lost(lost) };
        return;
    }
    // The event's five words in `TraceEvent`'s layout, stored as five 8-byte stores: a struct store would go
    // through the stack and split into stores of each field's width.
    let words = [
        crate::time::globaltimer(),
        kind as u64
            | (aux as u64) << 8
            | (crate::index::smid() as u16 as u64) << 16
            | (crate::index::block_rank() as u64) << 32,
        crate::index::thread_rank() as u64,
        a,
        b,
    ];
    // SAFETY: slot `slot < capacity` of the ring's events, claimed by this thread alone; the ring is 8-byte
    // aligned and an event is five words (asserted below).
    unsafe {
        let event = ring.cast::<u8>().add(TRACE_HEADER_BYTES).cast::<TraceEvent>().add(slot as usize).cast::<u64>();
        for (i, w) in words.into_iter().enumerate() {
            event.add(i).write(w);
        }
    }
}

#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
const _: () = {
    assert!(core::mem::size_of::<TraceEvent>() == 40 && core::mem::align_of::<TraceEvent>() == 8);
    assert!(core::mem::offset_of!(TraceEvent, kind) == 8 && core::mem::offset_of!(TraceEvent, aux) == 9);
    assert!(core::mem::offset_of!(TraceEvent, smid) == 10 && core::mem::offset_of!(TraceEvent, block) == 12);
    assert!(core::mem::offset_of!(TraceEvent, thread) == 16 && core::mem::offset_of!(TraceEvent, reserved) == 20);
    assert!(core::mem::offset_of!(TraceEvent, a) == 24 && core::mem::offset_of!(TraceEvent, b) == 32);
    assert!(TRACE_HEADER_BYTES.is_multiple_of(8) && cfg!(target_endian = "little"));
};

/// Chunks of [`TRACE_CHUNK_EVENTS`] slots a block has in flight at once: the entries of its chunk table.
#[cfg(all(target_arch = "nvptx64", ferrocomm_trace))]
const CHUNK_TABLE: usize = 32;

/// Polls of its chunk's table entry after which a thread gives its event up (milliseconds; an opener takes
/// about a microsecond).
#[cfg(all(target_arch = "nvptx64", ferrocomm_trace))]
const SPINS_FOR_A_CHUNK: u32 = 1 << 20;

/// The block's trace bookkeeping in shared memory: word 0 counts the block's events of this launch, and
/// entry `1 + k % CHUNK_TABLE` says where chunk `k` of them landed: `(k + 1) << 32 | first slot` (the slot
/// `u32::MAX` when the chunk lies past the capacity), 0 until it is claimed.
#[cfg(all(target_arch = "nvptx64", ferrocomm_trace))]
#[inline(always)]
fn block_table() -> crate::shared::SharedSlice<u64> {
    crate::shared_array!(FERROCOMM_TRACE_CHUNKS: [u64; 1 + CHUNK_TABLE])
}

/// Prepares the block for recording: zeroes its chunk table, then a block barrier. Every `#[kernel]` entry
/// calls it before the body (a hand-written `extern "ptx-kernel"` entry that records events must call it
/// first, from every thread); in an untraced GPU build and on the emulator it is nothing.
#[inline(always)]
pub fn begin_block() {
    #[cfg(all(target_arch = "nvptx64", ferrocomm_trace))]
    {
        let table = block_table();
        let mut i = crate::index::thread_rank() as usize;
        while i < table.len() {
            // SAFETY: each thread zeroes its own entries; the barrier below orders them before any claim.
            unsafe { table.write(i, 0) };
            i += crate::index::block_size() as usize;
        }
        // SAFETY: every thread of the block runs the entry, so every thread reaches this barrier.
        unsafe { core::arch::asm!("barrier.sync 0;", options(nostack)) };
    }
}

/// Claims one slot of the ring whose `claimed` counter is at `claimed`; `u64::MAX` and up mean none.
///
/// GPU: the block's event number comes from a shared-memory add; the thread that opens a chunk claims its
/// [`TRACE_CHUNK_EVENTS`] slots from the ring (the one global round trip per chunk) and publishes them in
/// the chunk table, where the chunk's other threads wait for them (a few hundred nanoseconds, once per
/// chunk). A thread whose table entry was reused by a later chunk before it looked (more than
/// `CHUNK_TABLE` chunks opened meanwhile, which takes more threads than a block has: each has one claim in
/// flight at most) gives its event up as lost rather than wait. Emulator: one
/// atomic add per event, outside the emulator's checker and store buffers (a trace is not kernel data).
///
/// # Safety
///
/// `claimed` is a live, aligned `u64` only accessed atomically while kernels run.
#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
#[inline(always)]
unsafe fn claim(claimed: *mut u64) -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let table = block_table();
        let n: u64;
        // SAFETY: word 0 of the block's table, zeroed by `begin_block`; shared memory, generic address.
        unsafe {
            core::arch::asm!("atom.relaxed.cta.add.u64 {n}, [{p}], 1;", n = out(reg64) n,
                p = in(reg64) table.as_ptr(), options(nostack))
        };
        let (chunk, offset) = (n / TRACE_CHUNK_EVENTS, n % TRACE_CHUNK_EVENTS);
        let tag = (chunk + 1) << 32;
        // SAFETY: an entry of the table (index below its length).
        let entry = unsafe { table.as_ptr().add(1 + (chunk as usize % CHUNK_TABLE)) };
        if offset == 0 {
            // SAFETY: per the contract.
            let first = unsafe { crate::atomic::GpuAtomicU64::from_ptr(claimed) }.fetch_add_relaxed(TRACE_CHUNK_EVENTS);
            let first = if first < u32::MAX as u64 { first } else { u32::MAX as u64 };
            // SAFETY: the entry is this chunk's; one 64-bit store publishes tag and slot together.
            unsafe { entry.write_volatile(tag | first) };
            return first;
        }
        // Bounded: an entry that never gets its chunk (a hand-written entry that skipped `begin_block`, whose
        // table holds whatever shared memory held) loses the event instead of hanging the kernel.
        for _ in 0..SPINS_FOR_A_CHUNK {
            // SAFETY: as above; the opener's store is the only write this chunk's entry gets.
            let seen = unsafe { entry.read_volatile() };
            if seen & !0xffff_ffff == tag {
                let first = seen & 0xffff_ffff;
                return if first == u32::MAX as u64 { u64::MAX } else { first + offset };
            }
            if seen > tag {
                return u64::MAX;
            }
            core::hint::spin_loop();
        }
        u64::MAX
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        // SAFETY: per the contract.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(claimed) }.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Counts one lost event: a posted add on the GPU (nothing waits for it), a plain atomic on the host.
///
/// # Safety
///
/// `lost` is a live, aligned `u64` only accessed atomically while kernels run.
#[cfg(any(ferrocomm_trace, not(target_arch = "nvptx64")))]
#[inline(always)]
unsafe fn count_lost(lost: *mut u64) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: per the contract; the ring is in global memory.
    unsafe { crate::atomic::GpuAtomicU64::from_ptr(lost) }.add_relaxed(1);
    #[cfg(not(target_arch = "nvptx64"))]
    // SAFETY: per the contract.
    unsafe { std::sync::atomic::AtomicU64::from_ptr(lost) }.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
