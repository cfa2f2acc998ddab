//! [`NvshmemOps`]: the bench's operations through NVSHMEM's device API ([`crate::ops`]) on a team, and
//! their checks against CPU references, at any size, on every rank this process runs.

use ferrocomm::{Backend, Device, Error, LaunchConfig, LaunchGuard, SignalPadBuffer, SymBuffer, Team};

use super::{CheckError, compare};
use crate::ops::{self, MAX_OPS_BLOCKS, Summand};

/// Bytes of a message per block of an operation's grid (a block's put-with-signal moves one chunk).
pub const BYTES_PER_BLOCK: usize = 64 << 10;
/// Bytes per block of the all-reduce, whose blocks also sum what arrived: smaller chunks keep each thread's
/// loop short (its loads are not hidden behind others).
pub const REDUCE_BYTES_PER_BLOCK: usize = 8 << 10;
/// Payloads up to this many bytes ping-pong with one warp: a smaller block synchronises faster around each
/// put, and one warp's stores carry such a payload in a few instructions.
pub const PING_WARP_MAX_BYTES: usize = 512;

/// The bench's operations through NVSHMEM on one team: the grids, and a signal pad per operation.
#[derive(Debug)]
pub struct NvshmemOps<'t> {
    team: &'t Team,
    threads: u32,
    max_blocks: usize,
    put_pad: SignalPadBuffer,
    gather_pad: SignalPadBuffer,
    exchange_pad: SignalPadBuffer,
    reduce_pad: SignalPadBuffer,
}

impl<'t> NvshmemOps<'t> {
    /// The operations on `team` (every rank calls it, in a team that spans processes).
    pub fn new(team: &'t Team) -> Result<NvshmemOps<'t>, Error> {
        // Each rank's writer signals and ready signals (`ops::writer_signal`, `ops::ready_signal`).
        let signals = 2 * team.world() * MAX_OPS_BLOCKS;
        let pad = |name: &str| SignalPadBuffer::new(team, name, signals);
        // Every block of a rank's grid must be resident at once: one block per multiprocessor at most.
        let mut max_blocks = MAX_OPS_BLOCKS;
        for rank in team.local_ranks() {
            if let Device::Cuda { ordinal } = team.device(rank)? {
                max_blocks = max_blocks.min(ferrocomm::system::gpu(ordinal)?.multiprocessors as usize);
            }
        }
        Ok(NvshmemOps {
            team,
            max_blocks,
            // The emulator runs every GPU thread as a host thread: fewer of them keep its checks quick.
            threads: if team.backend() == Backend::Cuda { 512 } else { 32 },
            put_pad: pad("nvshmem.ops.put")?,
            gather_pad: pad("nvshmem.ops.all_gather")?,
            exchange_pad: pad("nvshmem.ops.all_to_all")?,
            reduce_pad: pad("nvshmem.ops.all_reduce")?,
        })
    }

    /// The team.
    pub fn team(&self) -> &'t Team {
        self.team
    }

    /// Blocks of the grid that moves a message of `bytes` (per destination): one per [`BYTES_PER_BLOCK`],
    /// 1 ..= [`MAX_OPS_BLOCKS`] and no more than the GPU's multiprocessors.
    pub fn blocks(&self, bytes: usize) -> u32 {
        self.blocks_of(bytes, BYTES_PER_BLOCK)
    }

    /// Blocks of the all-reduce of `bytes`: one per [`REDUCE_BYTES_PER_BLOCK`], within the same bounds.
    pub fn reduce_blocks(&self, bytes: usize) -> u32 {
        self.blocks_of(bytes, REDUCE_BYTES_PER_BLOCK)
    }

    fn blocks_of(&self, bytes: usize, per_block: usize) -> u32 {
        bytes.div_ceil(per_block).clamp(1, self.max_blocks) as u32
    }

    fn grid(&self, bytes: usize) -> LaunchConfig {
        LaunchConfig::new(self.blocks(bytes), self.threads)
    }

    /// Rank `from` puts its `src` into rank `to`'s `dst` (`from == to` with one PE).
    pub fn put<'a>(
        &'a self,
        src: &'a SymBuffer<u8>,
        dst: &'a mut SymBuffer<u8>,
        (from, to): (usize, usize),
    ) -> Result<LaunchGuard<'a>, Error> {
        let cfg = self.grid(src.len());
        ops::nvshmem_put::launch(self.team, cfg, src.bytes(), dst.bytes_mut(), &self.put_pad, from as u32, to as u32)
    }

    /// A pad for [`ping_pong`](Self::ping_pong): every launch on it must make the same number of round trips.
    pub fn ping_pad(&self) -> Result<SignalPadBuffer, Error> {
        SignalPadBuffer::new(self.team, "nvshmem.ops.ping_pong", 3)
    }

    /// `iters` round trips of `payload` between ranks `a` and `b` in one launch (`a == b` with one PE):
    /// afterwards each one's `inbox` holds the other's payload.
    pub fn ping_pong<'a>(
        &'a self,
        payload: &'a SymBuffer<u8>,
        inbox: &'a mut SymBuffer<u8>,
        pad: &'a SignalPadBuffer,
        (a, b): (usize, usize),
        iters: u32,
    ) -> Result<LaunchGuard<'a>, Error> {
        let threads = if payload.len() <= PING_WARP_MAX_BYTES { 32 } else { self.threads };
        let (cfg, (a, b)) = (LaunchConfig::new(1, threads), (a as u32, b as u32));
        ops::nvshmem_ping_pong::launch(self.team, cfg, payload.bytes(), inbox.bytes_mut(), pad, a, b, iters)
    }

    /// Every rank's `input` into slot `rank` of every rank's `output`.
    pub fn all_gather<'a>(
        &'a self,
        input: &'a SymBuffer<u8>,
        output: &'a mut SymBuffer<u8>,
    ) -> Result<LaunchGuard<'a>, Error> {
        let cfg = self.grid(input.len());
        ops::nvshmem_all_gather::launch(self.team, cfg, input.bytes(), output.bytes_mut(), &self.gather_pad)
    }

    /// Row `q` (`row` bytes) of every rank's `send` into slot `rank` of rank `q`'s `recv`.
    pub fn all_to_all<'a>(
        &'a self,
        send: &'a SymBuffer<u8>,
        recv: &'a mut SymBuffer<u8>,
        row: usize,
    ) -> Result<LaunchGuard<'a>, Error> {
        let (cfg, pad) = (self.grid(row), &self.exchange_pad);
        ops::nvshmem_all_to_all::launch(self.team, cfg, send.bytes(), recv.bytes_mut(), pad, row as u64)
    }

    /// The sum of `data` over the ranks, in place; `stage` holds `2 * world * len(data)` elements.
    pub fn all_reduce_sum<'a, T: Summand + ops::nvshmem_all_reduce_sum::Instance>(
        &'a self,
        data: &'a mut SymBuffer<T>,
        stage: &'a mut SymBuffer<T>,
    ) -> Result<LaunchGuard<'a>, Error> {
        let cfg = LaunchConfig::new(self.reduce_blocks(data.len() * size_of::<T>()), self.threads);
        ops::nvshmem_all_reduce_sum::launch(self.team, cfg, data, stage, &self.reduce_pad)
    }

    /// The two ranks of the put and the ping-pong: 0 and 1, or 0 with itself with one PE.
    pub fn pair(&self) -> (usize, usize) {
        (0, 1.min(self.team.world() - 1))
    }
}

/// Byte `i` of rank `rank`'s message in launch `launch`.
pub fn byte_pattern(rank: usize, launch: usize, i: usize) -> u8 {
    ((rank * 31 + launch * 7 + i) % 251) as u8
}

fn fill_bytes(buf: &mut SymBuffer<u8>, launch: usize) -> Result<Vec<Vec<u8>>, Error> {
    let all: Vec<Vec<u8>> =
        (0..buf.world()).map(|r| (0..buf.len()).map(|i| byte_pattern(r, launch, i)).collect()).collect();
    for rank in buf.local_ranks() {
        buf.copy_from_host(rank, &all[rank])?;
    }
    Ok(all)
}

/// [`NvshmemOps::put`] of `bytes`, `launches` times with new data each time: the receiver holds the sender's.
pub fn check_put(ops: &NvshmemOps<'_>, bytes: usize, launches: usize) -> Result<(), CheckError> {
    let team = ops.team();
    let (from, to) = ops.pair();
    let mut src = SymBuffer::<u8>::new(team, bytes)?;
    let mut dst = SymBuffer::<u8>::new(team, bytes)?;
    for launch in 0..launches {
        let sent = fill_bytes(&mut src, launch)?;
        ops.put(&src, &mut dst, (from, to))?.wait()?;
        if dst.local_ranks().contains(&to) {
            let what = format!("nvshmem put {from} -> {to}, {bytes} B, launch {launch}");
            compare(&what, to, &sent[from], &dst.to_host(to)?)?;
        }
    }
    Ok(())
}

/// [`NvshmemOps::ping_pong`] of `bytes`, `iters` round trips a launch, two launches on one pad: each side's
/// inbox holds the other's payload.
pub fn check_ping_pong(ops: &NvshmemOps<'_>, bytes: usize, iters: u32) -> Result<(), CheckError> {
    let team = ops.team();
    let (a, b) = ops.pair();
    let mut payload = SymBuffer::<u8>::new(team, bytes)?;
    let mut inbox = SymBuffer::<u8>::new(team, bytes)?;
    let pad = ops.ping_pad()?;
    for launch in 0..2 {
        let sent = fill_bytes(&mut payload, launch)?;
        ops.ping_pong(&payload, &mut inbox, &pad, (a, b), iters)?.wait()?;
        for (me, other) in [(a, b), (b, a)] {
            if inbox.local_ranks().contains(&me) {
                let what = format!("nvshmem ping-pong {a} <-> {b}, {bytes} B x {iters}, launch {launch}");
                compare(&what, me, &sent[other], &inbox.to_host(me)?)?;
            }
        }
    }
    Ok(())
}

/// [`NvshmemOps::all_gather`] of `bytes` per rank, `launches` times: every rank holds every rank's input.
pub fn check_all_gather(ops: &NvshmemOps<'_>, bytes: usize, launches: usize) -> Result<(), CheckError> {
    let team = ops.team();
    let mut input = SymBuffer::<u8>::new(team, bytes)?;
    let mut output = SymBuffer::<u8>::new(team, team.world() * bytes)?;
    for launch in 0..launches {
        let want = fill_bytes(&mut input, launch)?.concat();
        ops.all_gather(&input, &mut output)?.wait()?;
        for rank in output.local_ranks() {
            let what = format!("nvshmem all-gather, {bytes} B per rank, launch {launch}");
            compare(&what, rank, &want, &output.to_host(rank)?)?;
        }
    }
    Ok(())
}

/// [`NvshmemOps::all_to_all`] of `row` bytes per destination, `launches` times: slot `r` of rank `q`'s
/// `recv` holds row `q` of rank `r`'s `send`.
pub fn check_all_to_all(ops: &NvshmemOps<'_>, row: usize, launches: usize) -> Result<(), CheckError> {
    let team = ops.team();
    let world = team.world();
    let mut send = SymBuffer::<u8>::new(team, world * row)?;
    let mut recv = SymBuffer::<u8>::new(team, world * row)?;
    for launch in 0..launches {
        let sent = fill_bytes(&mut send, launch)?;
        ops.all_to_all(&send, &mut recv, row)?.wait()?;
        for q in recv.local_ranks() {
            let want: Vec<u8> = (0..world).flat_map(|r| sent[r][q * row..(q + 1) * row].iter().copied()).collect();
            let what = format!("nvshmem all-to-all, {row} B per destination, launch {launch}");
            compare(&what, q, &want, &recv.to_host(q)?)?;
        }
    }
    Ok(())
}

/// [`NvshmemOps::all_reduce_sum`] of `len` elements, `launches` times with new inputs each time (small
/// integers: every sum is exact in every element type): every rank holds the sum.
pub fn check_all_reduce_sum<T>(ops: &NvshmemOps<'_>, len: usize, launches: usize) -> Result<(), CheckError>
where
    T: Summand + ops::nvshmem_all_reduce_sum::Instance + PartialEq + std::fmt::Debug,
{
    let team = ops.team();
    let world = team.world();
    let mut data = SymBuffer::<T>::new(team, len)?;
    let mut stage = SymBuffer::<T>::new(team, 2 * world * len)?;
    for launch in 0..launches {
        let value = |r: usize, i: usize| ((r * 5 + launch * 3 + i) % 9) as f32 - 4.0;
        let inputs: Vec<Vec<T>> = (0..world).map(|r| (0..len).map(|i| T::from_f32(value(r, i))).collect()).collect();
        for rank in data.local_ranks() {
            data.copy_from_host(rank, &inputs[rank])?;
        }
        ops.all_reduce_sum(&mut data, &mut stage)?.wait()?;
        let want: Vec<T> = (0..len).map(|i| T::from_f32((0..world).map(|r| value(r, i)).sum())).collect();
        for rank in data.local_ranks() {
            let what = format!("nvshmem all-reduce sum, {len} elements, launch {launch}");
            compare(&what, rank, &want, &data.to_host(rank)?)?;
        }
    }
    Ok(())
}
