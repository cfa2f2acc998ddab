//! Data movement round trips: put, get, put-with-signal and LL packets between ranks, by threads, warps or
//! blocks, on sub-slices at any element offset. The host fills the buffers, launches, reads every rank's
//! buffers back and compares them with a CPU reference (`host::reference`).
//!
//! Each rank works with its ring neighbours: it sends to `next = (rank + 1) % world` and gets from `next`,
//! so it receives from `prev`. The range `len` elements long is cut into `groups` chunks (uneven sizes,
//! so chunk starts take every alignment); chunk `g` is moved by group `g` — global thread `g`, global warp
//! `g` or block `g` — and groups past `groups` stay idle. For an operation ([`Op`]):
//!
//! - `Put`: `src[src_off..]` of this rank → `dst[dst_off..]` of `next`.
//! - `Get`: `src[src_off..]` of `next` → `back[dst_off..]` of this rank.
//! - `PutSignal`: as `Put`, raising signal `g` of `next` to the launch's epoch (release); then waits for
//!   its own signal `g` (acquire) and copies what `prev` put into `dst` on to `back`: the data must be
//!   visible in the same launch.
//! - `Ll`: chunk `g` travels as LL packets under the launch's flag into `next`'s `ll` buffer (packets from
//!   [`ll_range`]), and is read back from this rank's own `ll` buffer into `back`.

use ferrocomm_device::kernel;
use ferrocomm_device::ll::ll_flag;
use ferrocomm_device::prelude::*;

/// Most groups a launch may use (signals the pad needs for `PutSignal`).
pub const MAX_GROUPS: usize = 64;

/// What a round trip does.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `put` into the next rank's `dst`.
    Put = 0,
    /// `get` from the next rank's `src` into `back`.
    Get = 1,
    /// `put_signal` into the next rank's `dst`, then wait and copy the received data into `back`.
    PutSignal = 2,
    /// LL packets to the next rank, read back into `back`.
    Ll = 3,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 4] = [Op::Put, Op::Get, Op::PutSignal, Op::Ll];

    /// The operation of a kernel argument (`None` for an unknown code: the kernel then does nothing).
    #[inline(always)]
    pub const fn from_u32(v: u32) -> Option<Op> {
        match v {
            0 => Some(Op::Put),
            1 => Some(Op::Get),
            2 => Some(Op::PutSignal),
            3 => Some(Op::Ll),
            _ => None,
        }
    }
}

/// Which threads move one chunk.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// One thread.
    Thread = 0,
    /// A warp.
    Warp = 1,
    /// A block.
    Block = 2,
}

impl Group {
    /// Every group kind.
    pub const ALL: [Group; 3] = [Group::Thread, Group::Warp, Group::Block];

    /// The group of a kernel argument.
    #[inline(always)]
    pub const fn from_u32(v: u32) -> Option<Group> {
        match v {
            0 => Some(Group::Thread),
            1 => Some(Group::Warp),
            2 => Some(Group::Block),
            _ => None,
        }
    }

    /// Groups of this kind in a grid of `blocks` blocks of `threads` threads.
    pub const fn available(self, blocks: u32, threads: u32) -> u32 {
        match self {
            Group::Thread => blocks * threads,
            Group::Warp => blocks * threads.div_ceil(32),
            Group::Block => blocks,
        }
    }

    /// The calling thread's group index in the grid.
    #[inline(always)]
    fn index(self) -> usize {
        match self {
            Group::Thread => global_thread_idx(),
            Group::Warp => (block_rank() * warps_per_block() + warp_id()) as usize,
            Group::Block => block_rank() as usize,
        }
    }

    /// The device library's group of the same threads.
    #[inline(always)]
    fn threads(self) -> ferrocomm_device::Group {
        match self {
            Group::Thread => ferrocomm_device::Group::Thread,
            Group::Warp => ferrocomm_device::Group::Warp,
            Group::Block => ferrocomm_device::Group::Block,
        }
    }
}

/// Chunk `g` of `groups` of `0..len`: `len * g / groups .. len * (g + 1) / groups`.
#[inline(always)]
pub const fn chunk(len: usize, g: usize, groups: usize) -> (usize, usize) {
    (len * g / groups, len * (g + 1) / groups)
}

/// The LL packets carrying elements `start..end` of `T` (a chunk): first packet and count. Chunks never
/// share a packet: before chunk `g` lie at most `ll_packets(start) + g` packets of earlier chunks.
#[inline(always)]
pub const fn ll_range<T>(start: usize, end: usize, g: usize) -> (usize, usize) {
    (ll_packets::<T>(start) + g, ll_packets::<T>(end - start))
}

/// LL packets a buffer needs for `len` elements of `T` cut into `groups` chunks.
pub const fn ll_buffer_packets<T>(len: usize, groups: usize) -> usize {
    ll_packets::<T>(len) + groups
}

/// One thread's part of a round trip; see the module docs.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn round_trip<T: DeviceCopy>(
    op: u32,
    group: u32,
    groups: u32,
    src: SymSlice<T>,
    src_off: usize,
    len: usize,
    dst: SymSliceMut<T>,
    dst_off: usize,
    back: &mut [T],
    ll: SymSliceMut<LlPacket>,
    pad: SignalPad,
) {
    let session = pad.session();
    let epoch = session.epoch();
    let (rank, world) = (team::rank(), team::world());
    let next = (rank + 1) % world;
    let groups = groups as usize;
    if let (Some(op), Some(group)) = (Op::from_u32(op), Group::from_u32(group)) {
        let g = group.index();
        if g < groups {
            let (start, end) = chunk(len, g, groups);
            let n = end - start;
            let mine = &src.local()[src_off + start..src_off + end];
            let back = &mut back[dst_off + start..dst_off + end];
            let threads = group.threads();
            match op {
                Op::Put => put(threads, dst.peer(next).slice(dst_off + start, n), mine),
                Op::Get => get(threads, back, src.peer(next).slice(src_off + start, n)),
                Op::PutSignal => {
                    let signal = session.channel(next).signal(g);
                    put_signal(threads, dst.peer(next).slice(dst_off + start, n), mine, signal, SignalOp::Set(epoch));
                    if threads.is_leader() {
                        session.local(g).wait_ge(epoch);
                    }
                    threads.sync();
                    get(threads, back, dst.local().slice(dst_off + start, n).as_const());
                }
                Op::Ll => {
                    let flag = ll_flag(epoch);
                    let (first, packets) = ll_range::<T>(start, end, g);
                    put_ll(threads, ll.peer(next).slice(first, packets), mine, flag);
                    read_ll(threads, back, ll.local().slice(first, packets).as_const(), flag);
                }
            }
        }
    }
}

/// A round trip of `u8` elements. `op` is an [`Op`], `group` a [`Group`]; `groups <= MAX_GROUPS` groups
/// of that kind must exist in the grid; `src` holds `src_off + len` elements, `dst` and `back` hold
/// `dst_off + len`, `ll` holds `ll_buffer_packets::<u8>(len, groups)` packets, `pad` `groups` signals.
#[allow(clippy::too_many_arguments)]
#[kernel]
pub fn round_trip_u8(
    op: u32,
    group: u32,
    groups: u32,
    src: SymSlice<u8>,
    src_off: usize,
    len: usize,
    dst: SymSliceMut<u8>,
    dst_off: usize,
    back: &mut [u8],
    ll: SymSliceMut<LlPacket>,
    pad: SignalPad,
) {
    round_trip(op, group, groups, src, src_off, len, dst, dst_off, back, ll, pad);
}

/// [`round_trip_u8`](fn@round_trip_u8) with `u16` elements.
#[allow(clippy::too_many_arguments)]
#[kernel]
pub fn round_trip_u16(
    op: u32,
    group: u32,
    groups: u32,
    src: SymSlice<u16>,
    src_off: usize,
    len: usize,
    dst: SymSliceMut<u16>,
    dst_off: usize,
    back: &mut [u16],
    ll: SymSliceMut<LlPacket>,
    pad: SignalPad,
) {
    round_trip(op, group, groups, src, src_off, len, dst, dst_off, back, ll, pad);
}

/// [`round_trip_u8`](fn@round_trip_u8) with `u32` elements.
#[allow(clippy::too_many_arguments)]
#[kernel]
pub fn round_trip_u32(
    op: u32,
    group: u32,
    groups: u32,
    src: SymSlice<u32>,
    src_off: usize,
    len: usize,
    dst: SymSliceMut<u32>,
    dst_off: usize,
    back: &mut [u32],
    ll: SymSliceMut<LlPacket>,
    pad: SignalPad,
) {
    round_trip(op, group, groups, src, src_off, len, dst, dst_off, back, ll, pad);
}
