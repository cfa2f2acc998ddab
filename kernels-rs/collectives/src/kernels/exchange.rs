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
//!   wait for it, store the message straight into the receiver's buffer with 16-byte stores and raise
//!   `done(block, src)` with release ordering, its low 32 bits carrying the row count.
//!
//! The staged and direct transports split every message into one share per block (`layout::share`), block `b`
//! moving share `b` on both sides; the LL transport splits it by packet over the grid's threads.

use ferrocomm_device::kernel;
use ferrocomm_device::ll::{ll_flag, ll_store};
use ferrocomm_device::mem::GlobalPtr;
use ferrocomm_device::prelude::*;

use super::{peer_thread, poll_ll_vector, vector_packets};
use crate::layout::{
    ExchangePlan, MAX_WORLD, VECTOR_BYTES, epoch_tag, exchange_mode, exchange_pad, ll_region, one_shot_pad, share,
    stage_slot,
};
use crate::vector::{Region, store_vectors};

/// One rank's view of an exchange.
struct Messages<'a> {
    plan: ExchangePlan,
    rank: usize,
    src: &'a [u8],
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

    /// The `len` bytes at `offset` of the send buffer, as a vector region.
    #[inline(always)]
    #[track_caller]
    fn region(&self, offset: usize, len: usize) -> Region {
        let bytes = &self.src[offset..offset + len];
        // SAFETY: a kernel argument (global memory) that no thread writes in this launch.
        unsafe { Region::new(bytes.as_ptr(), bytes.len()) }
    }

    /// The message bytes `start..end` of the message to `dst` at `offset`.
    #[inline(always)]
    #[track_caller]
    fn bytes(&self, offset: usize, start: usize, end: usize) -> &[u8] {
        &self.src[offset + start..offset + end]
    }
}

/// The block's share of this rank's message to itself, copied locally.
#[inline(always)]
fn copy_to_self(messages: &Messages<'_>, dst: SymSliceMut<u8>, recv_counts: &mut [u32]) {
    let rank = messages.rank;
    let (offset, len, header) = messages.outgoing(rank);
    let (at, _) = messages.incoming(rank, header);
    let (start, end) = share(len, grid_size() as usize, block_rank() as usize);
    put_block(dst.local().slice(at + start, end - start), messages.bytes(offset, start, end));
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
) -> (&'a [u8], &'a [u32], &'a mut [u32]) {
    let src = match src {
        Some(src) => src,
        None if plan.mode == exchange_mode::BROADCAST && rank == plan.root as usize => {
            let raw = dst.raw();
            // SAFETY: this rank's part of `dst`, live for the launch; a broadcast's root is read, never
            // written (see above), so a shared slice of it is sound for the whole launch.
            unsafe { core::slice::from_raw_parts(raw.local.cast_const(), raw.len) }
        }
        None => &[],
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
    let epoch = pad.epoch();
    let (flag, parity) = (ll_flag(epoch), epoch & 1);
    let (src, send_counts, recv_counts) = exchange_buffers(src, send_counts, recv_counts, dst, &plan, rank);
    let messages = Messages { plan, rank, src, send_counts };
    let (first, stride) = (global_thread_idx() as usize, global_threads() as usize);

    for peer in (0..world).filter(|&q| q != rank) {
        let (offset, len, header) = messages.outgoing(peer);
        let body = messages.region(offset, len);
        let vectors = 1 + body.vectors();
        assert!(2 * vectors <= slot, "exchange message larger than an LL region");
        let region = ll.peer(peer as u32).slice(ll_region(parity, rank, world, slot), 2 * vectors);
        let mut j = first;
        while j < vectors {
            // SAFETY: vector `j - 1 < body.vectors()` of the send buffer.
            let v = if j == 0 { [header as u32, (header >> 32) as u32, 0, 0] } else { unsafe { body.load(j - 1) } };
            let [lo, hi] = vector_packets(v, flag);
            // SAFETY: packets `2j` and `2j + 1` of the peer's region (the slice checked them), 16-byte aligned
            // in the LL buffer, written by this thread alone in this launch.
            unsafe {
                ll_store(region.as_ptr().add(2 * j), lo);
                ll_store(region.as_ptr().add(2 * j + 1), hi);
            }
            j += stride;
        }
    }

    // This rank's message to itself, copied locally with the same split.
    let (offset, len, header) = messages.outgoing(rank);
    let (at, _) = messages.incoming(rank, header);
    let (from, to) = (messages.region(offset, len), local_region(dst, at, len));
    let mut k = first;
    while k < from.vectors() {
        // SAFETY: vector `k` of both regions, this thread's alone.
        unsafe { to.store(k, from.load(k)) };
        k += stride;
    }
    if plan.mode == exchange_mode::ALL_TO_ALL && first == 0 {
        recv_counts[rank] = header as u32;
    }

    for peer in (0..world).filter(|&q| q != rank) {
        let region = ll.local().slice(ll_region(parity, peer, world, slot), slot);
        let h = poll_ll_vector(region.slice(0, 2).as_const(), flag);
        let header = u64::from(h[0]) | u64::from(h[1]) << 32;
        let (at, len) = messages.incoming(peer, header);
        let out = local_region(dst, at, len);
        // Thread 0's first vector is the header, which every thread polled above.
        let mut j = if first == 0 { stride } else { first };
        while j <= out.vectors() {
            let v = poll_ll_vector(region.slice(2 * j, 2).as_const(), flag);
            // SAFETY: vector `j - 1` of the message's place in the receive buffer, this thread's alone.
            unsafe { out.store(j - 1, v) };
            j += stride;
        }
        if plan.mode == exchange_mode::ALL_TO_ALL && first == 0 {
            recv_counts[peer] = header as u32;
        }
    }
    pad.advance_epoch();
}

/// Bytes `at..at + len` of this rank's receive buffer (checked against its length) as a vector region.
#[inline(always)]
#[track_caller]
fn local_region(dst: SymSliceMut<u8>, at: usize, len: usize) -> Region {
    assert!(at + len <= dst.len(), "exchange message overflows the receive buffer");
    // SAFETY: in bounds (checked); this rank's copy is written in this launch by this rank's threads only,
    // each vector by one thread.
    unsafe { Region::new(dst.local().as_ptr().add(at), len) }
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
    let (t, threads) = (thread_rank() as usize, block_size() as usize);
    let slot = plan.slot as usize;
    assert!(2 * world * slot <= stage.len(), "staging buffer smaller than the plan's slots");
    let epoch = pad.epoch();
    let parity = epoch & 1;
    let (src, send_counts, recv_counts) = exchange_buffers(src, send_counts, recv_counts, dst, &plan, rank);
    let messages = Messages { plan, rank, src, send_counts };

    for q in (0..world).filter(|&q| q != rank) {
        let (offset, len, header) = messages.outgoing(q);
        assert!(len <= slot * VECTOR_BYTES, "exchange message larger than a staging slot");
        let (start, end) = share(len, blocks, block);
        let from = messages.bytes(offset, start, end);
        // SAFETY: this block's share of slot (`parity`, `rank`) in `q`'s staging buffer, global memory that
        // `q` no longer reads (the module documentation); the source is this rank's send buffer.
        unsafe {
            let slot_base = stage.peer(q as u32).as_ptr().add(stage_slot(parity, rank, world, slot));
            let target = GlobalPtr::from_generic(slot_base.cast::<u8>().add(start));
            let region = Region::new(from.as_ptr(), from.len());
            store_vectors(target, 0, region, 0, region.vectors(), t, threads);
        }
        sync_threads();
        if t == 0 {
            pad.peer(q as u32, one_shot_pad::pushed(parity, block, rank)).set_release(epoch_tag(epoch, header));
        }
    }
    copy_to_self(&messages, dst, recv_counts);

    let headers = ferrocomm_device::shared_array!(FERROCOMM_EXCHANGE_STAGED_HEADERS: [u64; MAX_WORLD]);
    if let Some(q) = peer_thread(rank, world) {
        let value = pad.local(one_shot_pad::pushed(parity, block, q as usize)).wait_ge(epoch_tag(epoch, 0));
        // SAFETY: thread `q` alone writes element `q`; the barrier below orders the reads after it.
        unsafe { headers.write(q as usize, value & 0xffff_ffff) };
    }
    sync_threads();
    for q in (0..world).filter(|&q| q != rank) {
        // SAFETY: written before the barrier above, read-only from here on.
        let header = unsafe { headers.read(q) };
        let (at, len) = messages.incoming(q, header);
        let (start, end) = share(len, blocks, block);
        // SAFETY: bytes `start..end` of slot (`parity`, `q`) of this rank's staging buffer, which rank `q`
        // published with the flag acquired above and does not write again before this launch ends.
        let from = unsafe {
            let slot_base = stage.local().as_ptr().add(stage_slot(parity, q, world, slot));
            core::slice::from_raw_parts(slot_base.cast::<u8>().add(start), end - start)
        };
        put_block(dst.local().slice(at + start, end - start), from);
        if plan.mode == exchange_mode::ALL_TO_ALL && block == 0 && t == 0 {
            recv_counts[q] = header as u32;
        }
    }
    pad.advance_epoch();
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
    let epoch = pad.epoch();
    let (src, send_counts, recv_counts) = exchange_buffers(src, send_counts, recv_counts, dst, &plan, rank);
    let messages = Messages { plan, rank, src, send_counts };
    let peer = peer_thread(rank, world);

    if let Some(q) = peer {
        if block == 0 {
            pad.peer(q, exchange_pad::ready(rank)).set_release(epoch);
        }
        pad.local(exchange_pad::ready(q as usize)).wait_ge(epoch);
    }
    sync_threads();
    for q in (0..world).filter(|&q| q != rank) {
        let (offset, len, header) = messages.outgoing(q);
        let (at, _) = messages.incoming(rank, header);
        let (start, end) = share(len, blocks, block);
        let target = dst.peer(q as u32).slice(at + start, end - start);
        let signal = pad.peer(q as u32, exchange_pad::done(block, rank));
        put_signal_block(
            target,
            messages.bytes(offset, start, end),
            signal,
            SignalOp::Set(epoch << 32 | (header & 0xffff_ffff)),
        );
    }
    copy_to_self(&messages, dst, recv_counts);
    if let Some(q) = peer {
        let value = pad.local(exchange_pad::done(block, q as usize)).wait_ge(epoch_tag(epoch, 0));
        if plan.mode == exchange_mode::ALL_TO_ALL && block == 0 {
            recv_counts[q as usize] = value as u32;
        }
    }
    pad.advance_epoch();
}
