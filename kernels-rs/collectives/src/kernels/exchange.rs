//! Exchanges: every rank sends one message to every rank — broadcast (the root's buffer, empty messages
//! from the others), all-gather (each rank's input to all) and all-to-all with per-destination row counts
//! held in device memory (MoE dispatch and combine). An [`ExchangePlan`] says which.
//!
//! Three transports, one message layout:
//! - `exchange_ll` (small messages): each message travels as LL packets into the receiver's region of the
//!   LL buffer (epoch parity × source), headed by a vector holding its length; the receiver polls until
//!   every packet carries this launch's flag and unpacks into its buffer. One one-way trip, no fence.
//!   Every rank sends every peer at least the header each launch, so finishing a launch proves every peer
//!   has started it — which is what makes reusing a parity two launches later safe.
//! - `exchange_staged` (mid-size messages): each message is stored with plain 16-byte stores into the
//!   receiver's staging slot (epoch parity × source), then one release flag per block carries its header;
//!   the receiver copies its share out of the slot. One one-way trip at full NVLink efficiency, plus a
//!   local copy. Same reuse argument as LL (the two share the one-shot pad's epoch).
//! - `exchange_direct` (large messages): each rank says `ready` (its receive buffer may be written), senders
//!   wait for it, store the message straight into the receiver's buffer — through the TMA when the launch
//!   gives each block a staging ring ([`BulkCopier`]), else with 16-byte stores — and raise
//!   `done(block, src)` with release ordering, its low 32 bits carrying the row count.
//!
//! The staged and direct transports split every message into one share per block (`layout::share`), block `b`
//! moving share `b` on both sides; the LL transport splits it by packet over the grid's threads.

use ferrocomm_device::kernel;
use ferrocomm_device::ll::ll_flag;
use ferrocomm_device::prelude::*;

use super::{SPIN_POLLS, peer_thread};
use crate::layout::{
    ExchangePlan, VECTOR_BYTES, epoch_tag, exchange_mode, exchange_pad, ll_region, one_shot_pad, share, stage_slot,
};

/// One rank's view of an exchange.
struct Messages<'a> {
    plan: ExchangePlan,
    rank: usize,
    /// The send buffer (a broadcast root's is its own part of the receive buffer).
    src: Vectors,
    send_counts: &'a [u32],
}

impl Messages<'_> {
    /// The message to rank `dst`: (offset in `src`, bytes, header). The header is the row count for an
    /// all-to-all and the byte count otherwise.
    #[inline(always)]
    #[track_caller]
    fn outgoing(&self, dst: usize) -> (usize, usize, u64) {
        let row = self.plan.row_bytes as usize;
        match self.plan.mode {
            exchange_mode::ALL_TO_ALL => {
                let mut offset = 0;
                for &count in &self.send_counts[..dst] {
                    offset += count as usize * row;
                }
                let count = self.send_counts[dst];
                assert!(u64::from(count) <= self.plan.cap_rows, "all-to-all count exceeds the receive capacity");
                (offset, count as usize * row, u64::from(count))
            }
            exchange_mode::ALL_GATHER => (0, row, row as u64),
            // The root's buffer is already where its message to itself would go.
            exchange_mode::BROADCAST if self.rank == self.plan.root as usize && dst != self.rank => {
                (0, row, row as u64)
            }
            exchange_mode::BROADCAST => (0, 0, 0),
            _ => panic!("unknown exchange mode"),
        }
    }

    /// Where the message from rank `src` with header `header` lands: (offset in `dst`, bytes).
    #[inline(always)]
    #[track_caller]
    fn incoming(&self, src: usize, header: u64) -> (usize, usize) {
        let slot = src * self.plan.slot_bytes as usize;
        match self.plan.mode {
            exchange_mode::ALL_TO_ALL => {
                assert!(header <= self.plan.cap_rows, "all-to-all count exceeds the receive capacity");
                (slot, header as usize * self.plan.row_bytes as usize)
            }
            _ => (slot, header as usize),
        }
    }

    /// The `len` bytes at `offset` of the send buffer, as vectors.
    #[inline(always)]
    #[track_caller]
    fn vectors(&self, offset: usize, len: usize) -> Vectors {
        assert!(offset <= self.src.len() && len <= self.src.len() - offset, "message outside the send buffer");
        self.src.sub(offset, len)
    }

    /// The message bytes `start..end` of the message to `dst` at `offset`.
    #[inline(always)]
    #[track_caller]
    fn bytes(&self, offset: usize, start: usize, end: usize) -> Vectors {
        self.vectors(offset + start, end - start)
    }
}

/// The block's share of this rank's message to itself, copied locally by `copier`.
#[inline(always)]
fn copy_to_self(messages: &Messages<'_>, dst: SymSliceMut<u8>, recv_counts: &mut [u32], copier: &mut BulkCopier) {
    let rank = messages.rank;
    let (offset, len, header) = messages.outgoing(rank);
    let (at, _) = messages.incoming(rank, header);
    let (start, end) = share(len, grid_size() as usize, block_rank() as usize);
    copier.put(dst.local().slice(at + start, end - start), messages.bytes(offset, start, end));
    if messages.plan.mode == exchange_mode::ALL_TO_ALL && block_rank() == 0 && thread_rank() == 0 {
        recv_counts[rank] = header as u32;
    }
}

/// The exchange kernels' optional buffers as the bodies use them. `src`: the send buffer, or — for a
/// broadcast's root, which passes none — its own part of `dst`, which no rank writes in a broadcast (the
/// root sends nothing to itself and receives only empty messages); other ranks without one send nothing.
/// The counts: all-to-all only (the other modes never read them), empty when not passed.
#[inline(always)]
fn exchange_buffers<'a>(
    src: Option<&'a [u8]>,
    send_counts: Option<&'a [u32]>,
    recv_counts: Option<&'a mut [u32]>,
    dst: SymSliceMut<u8>,
    plan: &ExchangePlan,
    rank: usize,
) -> (Vectors, &'a [u32], &'a mut [u32]) {
    let src = match src {
        Some(src) => Vectors::of(src),
        // A broadcast's root part of `dst` is read, never written.
        None if plan.mode == exchange_mode::BROADCAST && rank == plan.root as usize => dst.local().as_const().vectors(),
        None => Vectors::empty(),
    };
    (src, send_counts.unwrap_or_default(), recv_counts.unwrap_or_default())
}

/// Small-message exchange over LL packets (see the module documentation). `src`: this rank's send buffer
/// (`None` in a broadcast: the root sends its part of `dst`); `send_counts`/`recv_counts`: all-to-all only
/// (`world` rows each, `None` otherwise); `dst`: the receive buffer; `ll`: the LL buffer, `2 * world * plan.slot` packets.
///
/// A message travels as 16-byte vectors of two packets each: vector 0 is its header, vector `1 + k` its
/// bytes `16k..16k + 16`. Thread `g` of the grid sends and receives vectors `g, g + threads, …` of every
/// message — a split that does not depend on the length, so no thread waits for another: each polls the
/// header itself, then its own vectors, and no barrier stands between a message's arrival and its copy.
#[kernel(bytes(src, dst), requires(len(dst) >= world() * plan.slot_bytes, len(ll) >= 2 * world() * plan.slot))]
pub fn exchange_ll(
    src: Option<&[u8]>,
    send_counts: Option<&[u32]>,
    dst: SymSliceMut<u8>,
    recv_counts: Option<&mut [u32]>,
    ll: SymSliceMut<LlPacket>,
    pad: SignalPad,
    plan: ExchangePlan,
) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let slot = plan.slot as usize;
    assert!(2 * world * slot <= ll.len(), "LL buffer smaller than the plan's regions");
    let session = pad.session();
    let (flag, parity) = (ll_flag(session.epoch()), session.epoch() & 1);
    let (src, send_counts, recv_counts) = exchange_buffers(src, send_counts, recv_counts, dst, &plan, rank);
    let messages = Messages { plan, rank, src, send_counts };
    let (first, stride) = (global_thread_idx(), global_threads());

    for ch in session.peers() {
        let (offset, len, header) = messages.outgoing(ch.peer() as usize);
        let body = messages.vectors(offset, len);
        let vectors = 1 + body.vectors();
        assert!(2 * vectors <= slot, "exchange message larger than an LL region");
        // This rank's region in the peer's LL buffer; vector `j` of it is written by this thread alone.
        let region = ch.remote(ll).slice(ll_region(parity, rank, world, slot), 2 * vectors);
        let mut j = first;
        while j < vectors {
            let v = if j == 0 { [header as u32, (header >> 32) as u32, 0, 0] } else { body.load(j - 1) };
            region.store_vector(j, v, flag);
            j += stride;
        }
    }

    // This rank's message to itself, copied locally with the same split.
    let (offset, len, header) = messages.outgoing(rank);
    let (at, _) = messages.incoming(rank, header);
    let (from, to) = (messages.vectors(offset, len), receive_vectors(dst, at, len));
    let mut k = first;
    while k < from.vectors() {
        to.store(k, from.load(k));
        k += stride;
    }
    if plan.mode == exchange_mode::ALL_TO_ALL && first == 0 {
        recv_counts[rank] = header as u32;
    }

    for peer in (0..world).filter(|&q| q != rank) {
        let region = ll.local().slice(ll_region(parity, peer, world, slot), slot).as_const();
        let h = region.poll_vector(0, flag, SPIN_POLLS);
        let header = u64::from(h[0]) | u64::from(h[1]) << 32;
        let (at, len) = messages.incoming(peer, header);
        let out = receive_vectors(dst, at, len);
        // Thread 0's first vector is the header, which every thread polled above.
        let mut j = if first == 0 { stride } else { first };
        while j <= out.vectors() {
            out.store(j - 1, region.poll_vector(j, flag, SPIN_POLLS));
            j += stride;
        }
        if plan.mode == exchange_mode::ALL_TO_ALL && first == 0 {
            recv_counts[peer] = header as u32;
        }
    }
}

/// Bytes `at..at + len` of this rank's receive buffer (panics beyond its end) as vectors; this launch
/// writes them from this rank's threads only, each vector from one thread.
#[inline(always)]
#[track_caller]
fn receive_vectors(dst: SymSliceMut<u8>, at: usize, len: usize) -> VectorsMut {
    assert!(at <= dst.len() && len <= dst.len() - at, "exchange message overflows the receive buffer");
    dst.local().slice(at, len).vectors()
}

/// Mid-size exchange through the staging buffer (see the module documentation). Arguments as for
/// [`exchange_ll`](fn@exchange_ll), with `stage` (`2 * world * plan.slot` vectors) instead of the LL buffer
/// and the one-shot pad.
#[kernel(bytes(src, dst), requires(len(dst) >= world() * plan.slot_bytes, len(stage) >= 2 * world() * plan.slot))]
pub fn exchange_staged(
    src: Option<&[u8]>,
    send_counts: Option<&[u32]>,
    dst: SymSliceMut<u8>,
    recv_counts: Option<&mut [u32]>,
    stage: SymSliceMut<[u32; 4]>,
    pad: SignalPad,
    plan: ExchangePlan,
) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let (block, blocks) = (block_rank() as usize, grid_size() as usize);
    let (t, threads) = Group::Block.position();
    let slot = plan.slot as usize;
    assert!(2 * world * slot <= stage.len(), "staging buffer smaller than the plan's slots");
    let session = pad.session();
    let (epoch, parity) = (session.epoch(), session.epoch() & 1);
    let (src, send_counts, recv_counts) = exchange_buffers(src, send_counts, recv_counts, dst, &plan, rank);
    let messages = Messages { plan, rank, src, send_counts };
    // Slot (`parity`, `src`) of a copy of the staging buffer, as bytes.
    let slot_of =
        |copy: PeerSliceMut<V16>, src: usize| copy.slice(stage_slot(parity, src, world, slot), slot).vectors();

    for ch in session.peers() {
        let (offset, len, header) = messages.outgoing(ch.peer() as usize);
        assert!(len <= slot * VECTOR_BYTES, "exchange message larger than a staging slot");
        let (start, end) = share(len, blocks, block);
        let from = messages.vectors(offset + start, end - start);
        // This block's share of slot (`parity`, `rank`) in the peer's staging buffer, which the peer no
        // longer reads (the module documentation).
        let to = slot_of(ch.remote(stage), rank).sub(start, end - start);
        to.copy_from(from, 0, (0, from.vectors()), (t, threads));
        // The block's stores, then the release that covers them.
        sync_threads();
        if t == 0 {
            ch.signal(one_shot_pad::pushed(parity, block, rank)).set_release(epoch_tag(epoch, header));
        }
    }
    copy_to_self(&messages, dst, recv_counts, &mut BulkCopier::new());

    if let Some(q) = peer_thread(rank, world) {
        session.local(one_shot_pad::pushed(parity, block, q as usize)).wait_ge(epoch_tag(epoch, 0));
    }
    // Every peer's flag was acquired by its thread; the barrier orders the whole block after them.
    sync_threads();
    for q in (0..world).filter(|&q| q != rank) {
        // The header rides in the flag's low half; its value is final for this launch (acquired above).
        let header = session.local(one_shot_pad::pushed(parity, block, q)).load_relaxed() & 0xffff_ffff;
        let (at, len) = messages.incoming(q, header);
        let (start, end) = share(len, blocks, block);
        // Bytes `start..end` of slot (`parity`, `q`) of this rank's staging buffer, which rank `q` published
        // with the flag acquired above and does not write again before this launch ends.
        let from = slot_of(stage.local(), q).as_const().sub(start, end - start);
        receive_vectors(dst, at + start, end - start).copy_from(from, 0, (0, from.vectors()), (t, threads));
        if plan.mode == exchange_mode::ALL_TO_ALL && block == 0 && t == 0 {
            recv_counts[q] = header as u32;
        }
    }
}

/// Large-message exchange by direct stores (see the module documentation). Arguments as for
/// [`exchange_ll`](fn@exchange_ll), without the LL buffer.
#[kernel(bytes(src, dst), requires(len(dst) >= world() * plan.slot_bytes))]
pub fn exchange_direct(
    src: Option<&[u8]>,
    send_counts: Option<&[u32]>,
    dst: SymSliceMut<u8>,
    recv_counts: Option<&mut [u32]>,
    pad: SignalPad,
    plan: ExchangePlan,
) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let (block, blocks) = (block_rank() as usize, grid_size() as usize);
    let session = pad.session();
    let epoch = session.epoch();
    let (src, send_counts, recv_counts) = exchange_buffers(src, send_counts, recv_counts, dst, &plan, rank);
    let messages = Messages { plan, rank, src, send_counts };
    let peer = peer_thread(rank, world).map(|q| session.channel(q));
    let mut copier = BulkCopier::new();

    // Tell each peer that this rank's receive buffer may be written; wait until the peer's may.
    if let Some(ch) = peer {
        if block == 0 {
            ch.signal(exchange_pad::ready(rank)).set_release(epoch);
        }
        ch.inbox(exchange_pad::ready(ch.peer() as usize)).wait_ge(epoch);
    }
    sync_threads();
    for ch in session.peers() {
        let (offset, len, header) = messages.outgoing(ch.peer() as usize);
        let (at, _) = messages.incoming(rank, header);
        let (start, end) = share(len, blocks, block);
        let target = ch.remote(dst).slice(at + start, end - start);
        let signal = ch.signal(exchange_pad::done(block, rank));
        let value = SignalOp::Set(epoch << 32 | (header & 0xffff_ffff));
        copier.put_signal(target, messages.bytes(offset, start, end), signal, value);
    }
    copy_to_self(&messages, dst, recv_counts, &mut copier);
    if let Some(ch) = peer {
        let value = ch.inbox(exchange_pad::done(block, ch.peer() as usize)).wait_ge(epoch_tag(epoch, 0));
        if plan.mode == exchange_mode::ALL_TO_ALL && block == 0 {
            recv_counts[ch.peer() as usize] = value as u32;
        }
    }
}
