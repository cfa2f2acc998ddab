//! The device side of a proxy (the NVSHMEM / MSCCL++ "device-side task queue"): a kernel does not move
//! data itself but pushes put descriptors ([`ProxyDescriptor`]) into its rank's host queue, a ring in
//! pinned, host-mapped memory ([`ferrocomm_device::queue`]); a host proxy thread pops them, issues
//! copy-engine copies and raises each put's completion signal in the destination's signal pad, which the
//! kernels wait on. The benchmark's `proxy` mode runs these kernels against GPU-initiated puts;
//! `clock_stamp` is the device clock it times CUDA-graph replays with.
//!
//! The ring's layout and protocol are the device library's: the producer (one thread per rank) waits for a
//! free slot with an acquire wait on the consumer's `tail`, writes the slot with weak stores and publishes
//! it with `st.release.sys` of `head`; the proxy reads `head` with an acquire load, copies the descriptor
//! out and frees the slot with a release store of `tail`. This module holds no `unsafe` code.
#![forbid(unsafe_code)]

use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;
use ferrocomm_device::queue::HostQueues;

use super::{advance_sequence, sequence_base, spin_wait_ge};
use crate::layout::MAX_WORLD;
pub use crate::layout::ProxyDescriptor;

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

/// Ping-pong through the proxy, timed on the device. One thread per rank.
///
/// Iteration `i`: the initiator pushes a put of `payload` into the responder's `inbox` with signal value
/// `base + i` and waits until its own `arrived(responder)` reaches it; the responder waits first, then
/// replies with its own payload. The initiator writes `[elapsed ns, iters]` (`%globaltimer`) into `out`.
/// Launch one block of one thread; a proxy must serve `ring` meanwhile.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub fn proxy_ping_pong(
    ring: HostQueues,
    pad: SignalPad,
    payload: &[u8],
    inbox: SymSliceMut<u8>,
    initiator: u32,
    responder: u32,
    iters: u32,
    out: &mut [u64],
) {
    let rank = team::rank();
    let base = sequence_base(pad.local(proxy_pad::SEQUENCE));
    if block_rank() == 0 && thread_rank() == 0 && (rank == initiator || rank == responder) {
        let peer = if rank == initiator { responder } else { initiator };
        let arrived = pad.local(proxy_pad::arrived(peer as usize));
        let mut producer = ring.producer::<ProxyDescriptor>();
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
    advance_sequence(pad.local(proxy_pad::SEQUENCE), base, iters);
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
    ring: HostQueues,
    pad: SignalPad,
    src: &[u8],
    dst: SymSliceMut<u8>,
    from: u32,
    to: u32,
    iters: u32,
    out: &mut [u64],
) {
    let rank = team::rank();
    let base = sequence_base(pad.local(proxy_pad::SEQUENCE));
    let last = base + u64::from(iters);
    if block_rank() == 0 && thread_rank() == 0 {
        if rank == from {
            let mut producer = ring.producer::<ProxyDescriptor>();
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
    advance_sequence(pad.local(proxy_pad::SEQUENCE), base, iters);
}

/// Writes this GPU's `%globaltimer` into `stamps[slot]`: captured before and after the operations of a
/// CUDA graph, two stamps time its replay on the device with no host involvement. One thread.
#[kernel(no_wait)]
pub fn clock_stamp(stamps: &mut [u64], slot: u32) {
    if block_rank() == 0 && thread_rank() == 0 {
        stamps[slot as usize] = globaltimer();
    }
}
