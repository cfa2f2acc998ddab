//! The bench's operations through NVSHMEM's device API (`ferrocomm bench --modes nvshmem`): put, ping-pong,
//! all-gather, all-to-all and all-reduce, each a put-with-signal per peer and a wait per signal. Built like
//! the rest of the crate: the NVSHMEM flavour lowers every put to `nvshmemx_putmem_signal_nbi_block` and every
//! wait to `nvshmem_signal_fetch` polls; the ordinary build and the emulator run the library's own stores.
//!
//! Every block moves its own chunk of the message ([`chunk`]), and signals say who wrote: block `b` of rank
//! `r` sets signal [`writer_signal`]`(r, b)` of a pad to the launch's epoch, so a block waits for its
//! counterparts on the other ranks only. Setting the epoch, rather than adding one per launch, keeps a
//! signal right when a block sits out a launch: grids must be the same on every rank in a launch, but may
//! differ between launches on one pad (at most [`MAX_OPS_BLOCKS`] blocks; a pad holds
//! `2 * world * MAX_OPS_BLOCKS` signals, three for the ping-pong).
//!
//! Before a block puts into a peer, the peer's block says it may ([`ready_signal`], set to the epoch as
//! its kernel starts): the peer's earlier kernels, which may still read the destination when its stream
//! runs behind the sender's, are done with it. The ping-pong does this once per launch, the others once
//! per launch and block; the all-reduce needs none (its stage's halves alternate, see
//! [`nvshmem_all_reduce_sum()`]).

use ferrocomm_device::kernel;
use ferrocomm_device::nvshmem;
use ferrocomm_device::prelude::*;

/// Elements `start..end` of `n` that block `block` of `blocks` moves: even chunks, the last ones shorter or
/// empty.
#[inline(always)]
pub fn chunk(n: usize, block: usize, blocks: usize) -> (usize, usize) {
    let per = n.div_ceil(blocks.max(1));
    let start = (block * per).min(n);
    (start, (start + per).min(n))
}

/// The most blocks an operation's grid may have (one per SM of the GPUs the kernels run on, at most: blocks
/// wait for their counterparts on other ranks, so each rank's grid must be resident at once).
pub const MAX_OPS_BLOCKS: usize = 128;

/// The signal block `block` of rank `rank` raises on every rank it writes to, after the data.
#[inline(always)]
pub fn writer_signal(rank: u32, block: usize) -> usize {
    rank as usize * MAX_OPS_BLOCKS + block
}

/// The signal block `block` of rank `rank` raises on every rank that writes to it, before the data: its
/// earlier kernels are done with the destination.
#[inline(always)]
pub fn ready_signal(rank: u32, block: usize) -> usize {
    (team::world() + rank) as usize * MAX_OPS_BLOCKS + block
}

/// Thread 0 sets signal `signal(rank)` of each of `peers`' pads to the epoch, with release ordering: what
/// this rank did before (its earlier kernels included) happens before what the peer does after seeing it.
#[inline(always)]
#[track_caller]
fn raise(session: &Session, peers: impl Iterator<Item = u32>, signal: impl Fn(u32) -> usize) {
    if thread_rank() == 0 {
        for q in peers {
            nvshmem::signal_release(&session.channel(q), signal(team::rank()), SignalOp::Set(session.epoch()));
        }
    }
}

/// Waits (thread 0, then the whole block) until each of `peers` has set its signal `signal(peer)` in this
/// rank's pad to this launch's epoch.
#[inline(always)]
#[track_caller]
fn wait_for(session: &Session, peers: impl Iterator<Item = u32>, signal: impl Fn(u32) -> usize) {
    if thread_rank() == 0 {
        for q in peers {
            nvshmem::wait_signal_acquire(&session.channel(q), signal(q), Cmp::Ge, session.epoch());
        }
    }
    sync_threads();
}

/// Rank `from` puts its copy of `src` into rank `to`'s `dst`: block `b` its chunk, once `to`'s block `b` is
/// ready, then signal `b` set to the epoch, delivered after the data; rank `to` waits in each block for
/// that block's signal. With one PE (`from == to`) the rank puts to itself.
#[kernel(bytes(src, dst), requires(len(dst) >= len(src), from < world(), to < world()))]
pub fn nvshmem_put(src: SymSlice<u8>, dst: SymSliceMut<u8>, pad: SignalPad, from: u32, to: u32) {
    let session = pad.session();
    let (b, blocks) = (block_rank() as usize, grid_size() as usize);
    let (start, end) = chunk(src.len(), b, blocks);
    if team::rank() == to {
        raise(&session, [from].into_iter(), |r| ready_signal(r, b));
    }
    if team::rank() == from {
        wait_for(&session, [to].into_iter(), |q| ready_signal(q, b));
        let mine = src.peer(from).slice(start, end - start);
        nvshmem::put_signal_nbi(
            Group::Block,
            &session.channel(to),
            dst,
            start,
            mine,
            b,
            SignalOp::Set(session.epoch()),
        )
        .quiet();
    }
    if team::rank() == to {
        wait_for(&session, [from].into_iter(), |_| b);
    }
}

/// `iters` round trips between ranks `a` and `b`, in block 0: `a` puts its copy of `payload` into `b`'s
/// `inbox` setting signal 0, `b` waits for it and puts its own copy back into `a`'s setting signal 1, and
/// `a` waits for that. One PE (`a == b`) plays both sides. The signals number every round trip of every
/// launch (round `i` of launch `e` sets `(e - 1) * iters + i + 1`), so every launch on one pad must use
/// the same `iters`. As the launch starts, `b` sets signal 2 to the epoch and `a` waits for it before its
/// first ping (`b`'s earlier kernels are done with its inbox; `a`'s are, before `b` can have seen a ping).
/// Other blocks and ranks only keep the pad's epochs.
#[kernel(bytes(payload, inbox), requires(len(inbox) >= len(payload), a < world(), b < world(), iters > 0))]
pub fn nvshmem_ping_pong(payload: SymSlice<u8>, inbox: SymSliceMut<u8>, pad: SignalPad, a: u32, b: u32, iters: u32) {
    let session = pad.session();
    let rank = team::rank();
    if block_rank() != 0 || (rank != a && rank != b) {
        return;
    }
    if rank == b {
        raise(&session, [a].into_iter(), |_| 2);
    }
    if rank == a {
        wait_for(&session, [b].into_iter(), |_| 2);
    }
    let base = (session.epoch() - 1) * u64::from(iters);
    for i in 0..u64::from(iters) {
        let target = base + i + 1;
        if rank == a {
            let ping = payload.peer(a);
            nvshmem::put_signal_nbi(Group::Block, &session.channel(b), inbox, 0, ping, 0, SignalOp::Set(target))
                .quiet();
        }
        if rank == b {
            if thread_rank() == 0 {
                nvshmem::wait_signal_acquire(&session.channel(a), 0, Cmp::Ge, target);
            }
            sync_threads();
            let pong = payload.peer(b);
            nvshmem::put_signal_nbi(Group::Block, &session.channel(a), inbox, 0, pong, 1, SignalOp::Set(target))
                .quiet();
        }
        if rank == a {
            if thread_rank() == 0 {
                nvshmem::wait_signal_acquire(&session.channel(b), 1, Cmp::Ge, target);
            }
            sync_threads();
        }
    }
}

/// Every rank's `input` in every rank's `output`, in rank order: block `b` of rank `r`, once every rank's
/// block `b` is ready, puts its chunk of `input` into slot `r` of every rank's `output` (its own included,
/// peers staggered from `r + 1`), each with its signal, then waits for every rank's block `b`.
#[kernel(bytes(input, output), requires(len(output) >= world() * len(input)))]
pub fn nvshmem_all_gather(input: SymSlice<u8>, output: SymSliceMut<u8>, pad: SignalPad) {
    let session = pad.session();
    let (rank, world) = (team::rank(), team::world());
    let (b, blocks) = (block_rank() as usize, grid_size() as usize);
    let n = input.len();
    let (start, end) = chunk(n, b, blocks);
    let mine = input.peer(rank).slice(start, end - start);
    let at = rank as usize * n + start;
    raise(&session, 0..world, |r| ready_signal(r, b));
    wait_for(&session, 0..world, |q| ready_signal(q, b));
    for step in 1..=world {
        let ch = session.channel((rank + step) % world);
        let signal = writer_signal(rank, b);
        nvshmem::put_signal_nbi(Group::Block, &ch, output, at, mine, signal, SignalOp::Set(session.epoch())).quiet();
    }
    wait_for(&session, 0..world, |q| writer_signal(q, b));
}

/// Row `q` of every rank's `send` (`row` bytes) into slot `r` of rank `q`'s `recv`, `r` the sender: block `b`,
/// once every rank's block `b` is ready, puts its chunk of each row, with its signal, then waits for every
/// rank's block `b`.
#[kernel(bytes(send, recv), requires(len(send) >= world() * row, len(recv) >= world() * row))]
pub fn nvshmem_all_to_all(send: SymSlice<u8>, recv: SymSliceMut<u8>, pad: SignalPad, row: u64) {
    let session = pad.session();
    let (rank, world) = (team::rank(), team::world());
    let (b, blocks) = (block_rank() as usize, grid_size() as usize);
    let row = row as usize;
    let (start, end) = chunk(row, b, blocks);
    raise(&session, 0..world, |r| ready_signal(r, b));
    wait_for(&session, 0..world, |q| ready_signal(q, b));
    for step in 1..=world {
        let to = (rank + step) % world;
        let mine = send.peer(rank).slice(to as usize * row + start, end - start);
        let (at, signal) = (rank as usize * row + start, writer_signal(rank, b));
        nvshmem::put_signal_nbi(
            Group::Block,
            &session.channel(to),
            recv,
            at,
            mine,
            signal,
            SignalOp::Set(session.epoch()),
        )
        .quiet();
    }
    wait_for(&session, 0..world, |q| writer_signal(q, b));
}

/// An element the all-reduce sums, in `f32`.
pub trait Summand: DeviceCopy {
    /// The exact `f32` value.
    fn to_f32(self) -> f32;
    /// The nearest value.
    fn from_f32(v: f32) -> Self;
}

impl Summand for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> f32 {
        v
    }
}

impl Summand for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> bf16 {
        bf16::from_f32(v)
    }
}

impl Summand for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> f16 {
        f16::from_f32(v)
    }
}

/// A one-shot sum of `data` in place: block `b` of rank `r` puts its chunk of `data` into slot `r` of half
/// `epoch % 2` of every rank's `stage`, each with its signal, waits for every rank's block `b`, and sums the
/// chunk's slots into `data` in rank order (the same sum, bit for bit, on every rank). The two halves let
/// launch `k + 1` write while a slower rank still reads launch `k`'s: no block starts launch `k + 2` before
/// its counterpart on every rank has put its launch `k + 1` chunk, which each does only after summing
/// launch `k`'s.
#[kernel(
    instances(nvshmem_all_reduce_sum_f32<f32>, nvshmem_all_reduce_sum_bf16<bf16>, nvshmem_all_reduce_sum_f16<f16>),
    requires(len(stage) >= 2 * world() * len(data))
)]
pub fn nvshmem_all_reduce_sum<T: Summand>(data: SymSliceMut<T>, stage: SymSliceMut<T>, pad: SignalPad) {
    let session = pad.session();
    let (rank, world) = (team::rank(), team::world() as usize);
    let (b, blocks) = (block_rank() as usize, grid_size() as usize);
    let n = data.len();
    let (start, end) = chunk(n, b, blocks);
    let half = (session.epoch() % 2) as usize * world * n;
    let mine = data.local().slice(start, end - start);
    for step in 1..=world as u32 {
        let ch = session.channel((rank + step) % world as u32);
        let (at, signal) = (half + rank as usize * n + start, writer_signal(rank, b));
        nvshmem::put_signal_nbi(Group::Block, &ch, stage, at, mine, signal, SignalOp::Set(session.epoch())).quiet();
    }
    wait_for(&session, 0..world as u32, |q| writer_signal(q, b));
    let (staged, out) = (stage.local(), data.local());
    let mut i = start + thread_rank() as usize;
    while i < end {
        let mut sum = 0.0f32;
        for q in 0..world {
            // SAFETY: slot `q` of this half holds rank `q`'s chunk (its signal was acquired above); no rank
            // writes it again before this block has put its next launch's chunk.
            sum += unsafe { staged.as_const().read(half + q * n + i) }.to_f32();
        }
        // SAFETY: element `i` of this rank's copy, in this block's chunk, written by this thread alone; the
        // puts that read it completed at their quiet.
        unsafe { out.write(i, T::from_f32(sum)) };
        i += block_size() as usize;
    }
}
