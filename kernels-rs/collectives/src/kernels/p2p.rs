//! Point to point: ping-pong latency (release/acquire flags, and LL packets), put-with-signal and get.
//!
//! Put and get are two-sided handshakes, so they are safe inside any stream or graph: the side whose memory
//! is touched first says it is ready (its earlier stream work is done), and the other side says when it is
//! finished. A route is a shift: rank `r` talks to rank `(r + shift) % world` when bit `r` of `active` is set.

use ferrocomm_device::kernel;
use ferrocomm_device::ll::{LL_PAYLOAD_BYTES, ll_flag, ll_next_flag};
use ferrocomm_device::prelude::*;

use super::{SPIN_POLLS, advance_sequence, sequence_base, spin_wait_ge};
use crate::layout::{p2p_pad, share};

/// Where a rank stands in a route.
#[derive(Debug, Clone, Copy)]
struct Route {
    /// The rank this one sends to / reads from, when it is active.
    to: Option<u32>,
    /// The rank that sends to / reads from this one, when that rank is active.
    from: Option<u32>,
}

#[inline(always)]
fn route(shift: u32, active: u32) -> Route {
    let (rank, world) = (team::rank(), team::world());
    let shift = shift % world;
    let from = (rank + world - shift) % world;
    let is_active = |r: u32| shift != 0 && r < 32 && active & (1 << r) != 0;
    Route { to: is_active(rank).then_some((rank + shift) % world), from: is_active(from).then_some(from) }
}

/// Ping-pong between `initiator` and `responder` with release/acquire flags, timed on the device.
///
/// One thread per rank. Iteration `i`: the initiator puts `payload` into the responder's `inbox`, raises
/// the responder's `PING` flag to `base + i` with `st.release.sys`, and spins (`ld.acquire.sys`) until its
/// own flag reaches `base + i`; the responder does the same in the opposite order. Each participant
/// writes `[elapsed ns, iters]` (from `%globaltimer`) into `out`. Launch one block of one thread.
///
/// A payload of one vector (at most 16 bytes: the latency sizes) is loaded once, before the loop, and
/// stored from registers each iteration. The put would load it again every iteration, right after the
/// acquire poll, whose `ld.acquire.sys` invalidates the L1: a load from L2 between the poll and the reply.
/// Only the loads of this rank's own payload move, which nothing writes during the launch; the stores into
/// the peer's inbox stay between the acquire and the release, as before.
#[kernel]
pub fn ping_pong(
    pad: SignalPad,
    inbox: SymSliceMut<u8>,
    payload: &[u8],
    initiator: u32,
    responder: u32,
    iters: u32,
    out: &mut [u64],
) {
    let rank = team::rank();
    let session = pad.session();
    let base = sequence_base(session.local(p2p_pad::SEQUENCE));
    if block_rank() == 0 && thread_rank() == 0 && (rank == initiator || rank == responder) {
        let ch = session.channel(if rank == initiator { responder } else { initiator });
        let (mine, theirs) = (ch.inbox(p2p_pad::PING), ch.signal(p2p_pad::PING));
        let dst = ch.remote(inbox).slice(0, payload.len());
        let src = Vectors::of(payload);
        let held = if src.vectors() == 1 { Some(src.load(0)) } else { None };
        let send = || {
            if payload.is_empty() {
                // The flag is the message.
            } else if let Some(v) = held {
                dst.vectors().store(0, v);
            } else {
                put(Group::Thread, dst, payload);
            }
        };
        let start = globaltimer();
        for i in 1..=u64::from(iters) {
            if rank == initiator {
                send();
                theirs.set_release(base + i);
                spin_wait_ge(mine, base + i);
            } else {
                spin_wait_ge(mine, base + i);
                send();
                theirs.set_release(base + i);
            }
        }
        let elapsed = globaltimer() - start;
        out[0] = elapsed;
        out[1] = u64::from(iters);
    }
    advance_sequence(session.local(p2p_pad::SEQUENCE), base, iters);
}

/// Ping-pong with LL packets: data and flag travel in the same 16-byte stores, so no fence and no separate
/// flag are needed.
///
/// One warp per rank, lane `j` carrying packet `j` (a payload of at most 256 bytes is at most 32 packets).
/// Iteration `i` uses the flag `ll_flag(base + i)`: the initiator's lanes store their packets into the
/// responder's `ll`, then poll their own `ll` until every packet carries the flag; the responder polls
/// first, then replies with its own payload. Each lane loads its 8 payload bytes once, before the loop, and
/// keeps what it receives in a register: every message carries the same payload, so the last one is
/// unpacked into `inbox` after the loop, and the per-iteration path is a poll, a warp barrier and a store.
/// Lane 0 writes `[elapsed ns, iters]` into `out`. Launch one block of one warp.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub fn ping_pong_ll(
    pad: SignalPad,
    ll: SymSliceMut<LlPacket>,
    payload: &[u8],
    inbox: &mut [u8],
    initiator: u32,
    responder: u32,
    iters: u32,
    out: &mut [u64],
) {
    let rank = team::rank();
    let session = pad.session();
    let base = sequence_base(session.local(p2p_pad::SEQUENCE));
    if block_rank() == 0 && warp_id() == 0 && (rank == initiator || rank == responder) {
        let base = shfl_idx_sync(warp_mask(), base, 0);
        let ch = session.channel(if rank == initiator { responder } else { initiator });
        // An empty payload still travels as one packet: the flag is the message.
        let packets = ll_packets::<u8>(payload.len()).max(1);
        let (lane, lanes) = Group::Warp.position();
        assert!(packets <= lanes, "an LL ping-pong carries one packet per lane: at most 256 bytes in a warp");
        let (to, from) = (ch.remote(ll).slice(0, packets), ll.local().as_const().slice(0, packets));
        let active = lane < packets;
        let word = if active && !payload.is_empty() {
            let v = Vectors::of(payload).load(lane / 2);
            let half = lane % 2 * 2;
            u64::from(v[half]) | u64::from(v[half + 1]) << 32
        } else {
            0
        };
        // Lanes without a packet poll one of the others' (read only): the whole warp leaves the poll together
        // instead of idle lanes waiting at the barrier for the ones that poll.
        let polled = lane % packets;
        let mut flag = ll_flag(base + 1);
        let mut got = 0u64;
        let start = globaltimer();
        for _ in 0..iters {
            if rank == initiator {
                if active {
                    to.store_packet(lane, LlPacket::new(word, flag));
                }
                got = from.poll_packet(polled, flag, SPIN_POLLS);
                Group::Warp.sync();
            } else {
                got = from.poll_packet(polled, flag, SPIN_POLLS);
                Group::Warp.sync();
                if active {
                    to.store_packet(lane, LlPacket::new(word, flag));
                }
            }
            flag = ll_next_flag(flag);
        }
        let elapsed = globaltimer() - start;
        if active && iters > 0 && !payload.is_empty() {
            let off = lane * LL_PAYLOAD_BYTES;
            let n = (payload.len() - off).min(LL_PAYLOAD_BYTES);
            inbox[off..off + n].copy_from_slice(&got.to_le_bytes()[..n]);
        }
        if lane_id() == 0 {
            out[0] = elapsed;
            out[1] = u64::from(iters);
        }
    }
    advance_sequence(session.local(p2p_pad::SEQUENCE), base, iters);
}

/// Put with signal: each active rank copies `src` into the start of its target's `dst`, block `b` moving
/// share `b` and then raising the target's `done(b)` signal with release ordering; the target waits for
/// every block's signal. Before writing, a sender waits until its target has raised `ready` (the target's
/// earlier stream work on `dst` is done). A block copies through the TMA when the launch gives it a staging
/// ring ([`BulkCopier`]), else with 16-byte vectors, four in flight per thread.
#[kernel(bytes(src, dst), requires(len(dst) >= len(src)))]
pub fn put_signal(src: &[u8], dst: SymSliceMut<u8>, pad: SignalPad, shift: u32, active: u32) {
    let route = route(shift, active);
    let session = pad.session();
    let epoch = session.epoch();
    let (block, blocks) = (block_rank() as usize, grid_size() as usize);
    let leader = thread_rank() == 0;
    let mut copier = BulkCopier::new();
    if let Some(from) = route.from
        && block == 0
        && leader
    {
        session.channel(from).signal(p2p_pad::ready(team::rank() as usize)).set_release(epoch);
    }
    if let Some(to) = route.to.map(|to| session.channel(to)) {
        if leader {
            to.inbox(p2p_pad::ready(to.peer() as usize)).wait_ge(epoch);
        }
        sync_threads();
        let (start, end) = share(src.len(), blocks, block);
        let target = to.remote(dst).slice(start, end - start);
        let done = to.signal(p2p_pad::done(block));
        copier.put_signal(target, &src[start..end], done, SignalOp::Set(epoch));
    }
    if route.from.is_some() && leader {
        session.local(p2p_pad::done(block)).wait_ge(epoch);
    }
}

/// Get: each active rank reads the start of its source rank's `src` into `dst`, block `b` moving share `b`
/// once the source has raised `ready` (its earlier stream work on `src` is done); then block `b` raises the
/// source's `done(b)`, and the source waits for every block before its launch ends (so later writes to
/// `src` cannot race the reads). Blocks copy through the TMA when the launch gives them a staging ring, as
/// in [`put_signal`](fn@put_signal).
#[kernel(bytes(dst, src), requires(len(src) >= len(dst)))]
pub fn get(dst: &mut [u8], src: SymSlice<u8>, pad: SignalPad, shift: u32, active: u32) {
    let route = route(shift, active);
    let session = pad.session();
    let epoch = session.epoch();
    let (block, blocks) = (block_rank() as usize, grid_size() as usize);
    let leader = thread_rank() == 0;
    let mut copier = BulkCopier::new();
    if let Some(reader) = route.from
        && block == 0
        && leader
    {
        session.channel(reader).signal(p2p_pad::ready(team::rank() as usize)).set_release(epoch);
    }
    if let Some(source) = route.to.map(|to| session.channel(to)) {
        if leader {
            source.inbox(p2p_pad::ready(source.peer() as usize)).wait_ge(epoch);
        }
        sync_threads();
        let (start, end) = share(dst.len(), blocks, block);
        let from = source.remote_input(src).slice(start, end - start);
        copier.get(&mut dst[start..end], from);
        if leader {
            source.signal(p2p_pad::done(block)).set_release(epoch);
        }
    }
    if route.from.is_some() && leader {
        session.local(p2p_pad::done(block)).wait_ge(epoch);
    }
}
