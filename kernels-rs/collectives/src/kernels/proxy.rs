//! The device side of a proxy (the NVSHMEM / MSCCL++ "device-side task queue"): a kernel does not move
//! data itself but pushes put descriptors into a ring in pinned, host-mapped memory; a host proxy thread
//! pops them, issues copy-engine copies and raises each put's completion signal in the destination's
//! signal pad, which the kernels wait on. The benchmark's `proxy` mode runs these kernels against
//! GPU-initiated puts; `clock_stamp` is the device clock it times CUDA-graph replays with.
//!
//! The ring of rank `r` starts at `ring.base + r * ring.stride` (one pinned allocation mapped into every
//! GPU, so host and device agree on one address): the producer's `head` at [`RING_HEAD`], the consumer's
//! `tail` at [`RING_TAIL`] (separate 64-byte lines), then `depth` descriptors of [`DESCRIPTOR_BYTES`] at
//! [`RING_SLOTS`]. `head` and `tail` are monotonic counts of descriptors written and popped; descriptor `n`
//! lives in slot `n % depth`. The producer (one thread per rank) writes the slot with weak stores and
//! publishes it with `st.release.sys` of `head`; the proxy reads `head` with an acquire load, copies the
//! descriptor out and publishes the slot free with a release store of `tail`, which the producer reads
//! with `ld.acquire.sys` before it reuses the slot.

use ferrocomm_device::atomic::SysAtomicU64;
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

use super::spin_wait_ge;
use crate::layout::MAX_WORLD;

/// Byte offset of the producer's `head` count in a rank's ring.
pub const RING_HEAD: usize = 0;
/// Byte offset of the consumer's `tail` count (its own 64-byte line: the host writes it, the GPU polls it).
pub const RING_TAIL: usize = 64;
/// Byte offset of the first descriptor slot.
pub const RING_SLOTS: usize = 128;
/// Bytes of one descriptor slot (one host cache line).
pub const DESCRIPTOR_BYTES: usize = 64;

/// Bytes of one rank's ring with `depth` slots (a multiple of 64, so consecutive rings share no line).
pub const fn ring_bytes(depth: usize) -> usize {
    RING_SLOTS + depth * DESCRIPTOR_BYTES
}

/// The slot descriptor number `seq` occupies.
#[inline(always)]
pub const fn ring_slot(seq: u64, depth: u64) -> u64 {
    seq % depth
}

/// Whether the producer may write descriptor `head` after the consumer popped `tail` of them.
#[inline(always)]
pub const fn ring_has_space(head: u64, tail: u64, depth: u64) -> bool {
    head - tail < depth
}

/// The `tail` the producer must observe before writing descriptor `head`: the slot's previous occupant
/// (descriptor `head - depth`) has been popped.
#[inline(always)]
pub const fn ring_tail_needed(head: u64, depth: u64) -> u64 {
    (head + 1).saturating_sub(depth)
}

/// One put for the proxy: copy `bytes` from `src` (on `src_rank`'s GPU) to `dst` (on `dst_rank`'s GPU),
/// then store `value` into the `u64` signal at `signal` (in `dst_rank`'s memory). Addresses are as the
/// owning GPU addresses them (peer tables hold owners' addresses).
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyDescriptor {
    /// Source address.
    pub src: u64,
    /// Destination address.
    pub dst: u64,
    /// Bytes to copy (0: only the signal).
    pub bytes: u64,
    /// Address of the completion signal.
    pub signal: u64,
    /// Value the signal is set to once the copy has landed.
    pub value: u64,
    /// The rank whose GPU holds `src` (the ring's owner).
    pub src_rank: u32,
    /// The rank whose GPU holds `dst` and `signal`.
    pub dst_rank: u32,
    /// Zero; pads the descriptor to one 64-byte line.
    pub reserved: [u64; 2],
}

/// Where the rings are: rank `r`'s at `base + r * stride`, each with `depth` slots. Passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyRing {
    /// Device address of rank 0's ring (pinned host memory mapped at the same address on every GPU).
    pub base: u64,
    /// Bytes from one rank's ring to the next (at least [`ring_bytes`]`(depth)`).
    pub stride: u64,
    /// Descriptor slots per ring (at least 1).
    pub depth: u64,
}

// SAFETY: a `#[repr(C)]` struct of integers, valid for every bit pattern, passed by value as itself.
unsafe impl ferrocomm_device::DeviceParam for ProxyRing {
    type Abi = ProxyRing;
    #[inline(always)]
    unsafe fn from_abi(abi: ProxyRing) -> ProxyRing {
        abi
    }
}

#[cfg(not(target_arch = "nvptx64"))]
impl ferrocomm::LaunchParam for ProxyRing {
    type Host<'a> = ProxyRing;
    fn lower(host: &ProxyRing, _rank: &ferrocomm::RankRef<'_>) -> Result<ProxyRing, ferrocomm::Error> {
        Ok(*host)
    }
}

/// Signals of the proxy pad.
pub mod proxy_pad {
    use super::MAX_WORLD;
    /// This rank's sequence base: iterations run so far (local only, never raised by peers).
    pub const SEQUENCE: usize = 0;
    /// The receiver of a put stream acknowledges its last put (raised by a GPU, not the proxy).
    pub const ACK: usize = 1;
    /// Raised by the proxy once a put from rank `src` has landed here.
    pub const fn arrived(src: usize) -> usize {
        2 + src
    }
    /// Signals in the pad.
    pub const SIGNALS: usize = 2 + MAX_WORLD;
}

/// This rank's end of its ring.
struct Producer {
    head: &'static SysAtomicU64,
    tail: Signal,
    slots: *mut ProxyDescriptor,
    depth: u64,
    /// Descriptors written so far (what `head` holds).
    next: u64,
    /// The last `tail` observed: slots below `tail_seen + depth` are free without asking again.
    tail_seen: u64,
}

impl Producer {
    #[inline(always)]
    fn open(ring: ProxyRing) -> Producer {
        let base = (ring.base + u64::from(team::rank()) * ring.stride) as usize as *mut u8;
        // SAFETY: the host allocated `world` rings of `stride >= ring_bytes(depth)` bytes at `base`, 64-byte
        // aligned, mapped into this GPU, for as long as the launch runs; `head` is written by this thread
        // only and `tail` by the proxy only, both atomically.
        let (head, tail) = unsafe {
            (SysAtomicU64::from_ptr(base.add(RING_HEAD).cast()), Signal::from_ptr(base.add(RING_TAIL).cast()))
        };
        // SAFETY: as above; the slots follow the two counters.
        let slots = unsafe { base.add(RING_SLOTS).cast::<ProxyDescriptor>() };
        // Earlier launches of this rank published `head`; stream order makes their stores visible here.
        let next = head.load_relaxed();
        Producer { head, tail, slots, depth: ring.depth.max(1), next, tail_seen: tail.load_acquire() }
    }

    /// Writes `d` into the next slot once it is free, and publishes it.
    #[inline(always)]
    #[track_caller]
    fn push(&mut self, d: ProxyDescriptor) {
        if !ring_has_space(self.next, self.tail_seen, self.depth) {
            self.tail_seen = self.tail.wait_ge(ring_tail_needed(self.next, self.depth));
        }
        let slot = ring_slot(self.next, self.depth) as usize;
        // SAFETY: `slot < depth`, inside this rank's ring; the proxy popped the slot's previous descriptor
        // (acquire of `tail` above) and reads this one only after the release of `head` below.
        unsafe { self.slots.add(slot).write(d) };
        self.next += 1;
        self.head.store_release(self.next);
    }
}

/// The descriptor of a put of `src` into `dst` on `peer`, raising `pad`'s `arrived(rank)` there to `value`.
#[inline(always)]
fn descriptor(src: &[u8], dst: &SymSliceMut<u8>, pad: &SignalPad, peer: u32, value: u64) -> ProxyDescriptor {
    let rank = team::rank();
    ProxyDescriptor {
        src: src.as_ptr() as u64,
        dst: dst.peer(peer).as_ptr() as u64,
        bytes: src.len() as u64,
        signal: pad.peer(peer, proxy_pad::arrived(rank as usize)).as_ptr() as u64,
        value,
        src_rank: rank,
        dst_rank: peer,
        reserved: [0; 2],
    }
}

/// Every rank advances its sequence base by `iters` (participants or not), so signal values only grow and
/// stay equal across ranks; the barrier first lets every thread of the block read the old base.
#[inline(always)]
fn advance_sequence(pad: &SignalPad, base: u64, iters: u32) {
    sync_threads();
    if block_rank() == 0 && thread_rank() == 0 {
        pad.local(proxy_pad::SEQUENCE).set_relaxed(base + u64::from(iters));
    }
}

/// Ping-pong through the proxy, timed on the device. One thread per rank.
///
/// Iteration `i`: the initiator pushes a put of `payload` into the responder's `inbox` with signal value
/// `base + i` and waits until its own `arrived(responder)` reaches it; the responder waits first, then
/// replies with its own payload. The initiator writes `[elapsed ns, iters]` (`%globaltimer`) into `out`.
/// Launch one block of one thread; a proxy must serve `ring` meanwhile.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub fn proxy_ping_pong(
    ring: ProxyRing,
    pad: SignalPad,
    payload: &[u8],
    inbox: SymSliceMut<u8>,
    initiator: u32,
    responder: u32,
    iters: u32,
    out: &mut [u64],
) {
    let rank = team::rank();
    let base = pad.local(proxy_pad::SEQUENCE).load_relaxed();
    if block_rank() == 0 && thread_rank() == 0 && (rank == initiator || rank == responder) {
        let peer = if rank == initiator { responder } else { initiator };
        let arrived = pad.local(proxy_pad::arrived(peer as usize));
        let mut producer = Producer::open(ring);
        let start = globaltimer();
        for i in 1..=u64::from(iters) {
            if rank == initiator {
                producer.push(descriptor(payload, &inbox, &pad, peer, base + i));
                spin_wait_ge(arrived, base + i);
            } else {
                spin_wait_ge(arrived, base + i);
                producer.push(descriptor(payload, &inbox, &pad, peer, base + i));
            }
        }
        let elapsed = globaltimer() - start;
        if rank == initiator {
            out[0] = elapsed;
            out[1] = u64::from(iters);
        }
    }
    advance_sequence(&pad, base, iters);
}

/// Back-to-back puts through the proxy, timed on the device. One thread per rank.
///
/// Rank `from` pushes `iters` puts of `src` into rank `to`'s `dst` (signal values `base + 1 ..= base +
/// iters`; a full ring makes it wait for the proxy), then waits for `to`'s acknowledgement; `to` waits for
/// the last put's signal and acknowledges with a release store into `from`'s `ACK`. Rank `from` writes
/// `[elapsed ns, iters]` into `out`. Launch one block of one thread; a proxy must serve `ring` meanwhile.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub fn proxy_put(
    ring: ProxyRing,
    pad: SignalPad,
    src: &[u8],
    dst: SymSliceMut<u8>,
    from: u32,
    to: u32,
    iters: u32,
    out: &mut [u64],
) {
    let rank = team::rank();
    let base = pad.local(proxy_pad::SEQUENCE).load_relaxed();
    let last = base + u64::from(iters);
    if block_rank() == 0 && thread_rank() == 0 {
        if rank == from {
            let mut producer = Producer::open(ring);
            let start = globaltimer();
            for k in 1..=u64::from(iters) {
                producer.push(descriptor(src, &dst, &pad, to, base + k));
            }
            spin_wait_ge(pad.local(proxy_pad::ACK), last);
            out[0] = globaltimer() - start;
            out[1] = u64::from(iters);
        } else if rank == to {
            pad.local(proxy_pad::arrived(from as usize)).wait_ge(last);
            pad.peer(from, proxy_pad::ACK).set_release(last);
        }
    }
    advance_sequence(&pad, base, iters);
}

/// Writes this GPU's `%globaltimer` into `stamps[slot]`: captured before and after the operations of a
/// CUDA graph, two stamps time its replay on the device with no host involvement. One thread.
#[kernel(no_wait)]
pub fn clock_stamp(stamps: &mut [u64], slot: u32) {
    if block_rank() == 0 && thread_rank() == 0 {
        stamps[slot as usize] = globaltimer();
    }
}
