//! What the host and the kernels agree on: team and grid limits, the index of every signal in each signal
//! pad, the LL buffer's regions, how a range is split among blocks, the by-value plans some kernels take, and
//! the host proxy's put descriptor.
//!
//! Every signal holds a monotonic value derived from its pad's launch epoch (`SignalPad::epoch`): senders
//! *set* it, receivers wait for `>=`. Values only grow, across launches of every kernel that shares the pad
//! and across CUDA-graph replays, so nothing is ever reset.

/// Most ranks a team may have for these kernels (signal arrays are sized for it).
pub const MAX_WORLD: usize = 8;

/// Most blocks a kernel of this crate is launched with (signal arrays are sized for it).
pub const MAX_BLOCKS: usize = 256;

pub use ferrocomm_device::vector::VECTOR_BYTES;

/// Signals of the barrier pad: `ARRIVED + src`, raised by rank `src` on every rank.
pub mod barrier_pad {
    /// Signals in the pad.
    pub const SIGNALS: usize = super::MAX_WORLD;
    /// Rank `src` has entered the barrier of the epoch the signal holds.
    pub const fn arrived(src: usize) -> usize {
        src
    }
}

/// Signals of the point-to-point pad (ping-pong, put, get).
pub mod p2p_pad {
    use super::{MAX_BLOCKS, MAX_WORLD};
    /// The ping-pong flag a peer raises on this rank.
    pub const PING: usize = 0;
    /// This rank's ping-pong sequence base: iterations run so far (local only, never raised by peers).
    pub const SEQUENCE: usize = 1;
    /// Rank `src` is ready: its buffer may be written (put) or its source holds the data (get).
    pub const fn ready(src: usize) -> usize {
        2 + src
    }
    /// Block `block` of the peer finished its share (put: data landed; get: reads done).
    pub const fn done(block: usize) -> usize {
        2 + MAX_WORLD + block
    }
    /// Signals in the pad.
    pub const SIGNALS: usize = 2 + MAX_WORLD + MAX_BLOCKS;
}

/// Signals of the exchange pad (broadcast, all-gather and all-to-all by direct stores).
pub mod exchange_pad {
    use super::{MAX_BLOCKS, MAX_WORLD};
    /// Rank `src` has entered the launch: its receive buffer may be written.
    pub const fn ready(src: usize) -> usize {
        src
    }
    /// Block `block` of rank `src` wrote its share into this rank's receive buffer; the low 32 bits of the
    /// value carry the message's row count.
    pub const fn done(block: usize, src: usize) -> usize {
        MAX_WORLD + block * MAX_WORLD + src
    }
    /// Signals in the pad.
    pub const SIGNALS: usize = MAX_WORLD + MAX_BLOCKS * MAX_WORLD;
}

/// Signals of the one-shot pad, whose epoch also drives the LL kernels (LL all-reduce, LL exchange) and the
/// staged exchange: every kernel on it hears from every peer each launch, which is what makes the
/// epoch-parity buffers safe to reuse.
pub mod one_shot_pad {
    use super::{MAX_BLOCKS, MAX_WORLD};
    /// Block `block` of rank `src` pushed its share into this rank's staging slot (`parity`, `src`). Indexed
    /// by parity too, so a peer already in the next launch cannot overwrite a value (its low 32 bits carry
    /// the staged exchange's header) before this rank read it.
    pub const fn pushed(parity: u64, block: usize, src: usize) -> usize {
        parity as usize * MAX_BLOCKS * MAX_WORLD + block * MAX_WORLD + src
    }
    /// Signals in the pad.
    pub const SIGNALS: usize = 2 * MAX_BLOCKS * MAX_WORLD;
}

/// The one-shot staging buffer: two parities × one slot per source rank × `slot_vectors` vectors. Returns
/// the index of the first vector of slot (`parity`, `src`).
#[inline(always)]
pub const fn stage_slot(parity: u64, src: usize, world: usize, slot_vectors: usize) -> usize {
    (parity as usize * world + src) * slot_vectors
}

/// Signals of the two-shot pad (all-reduce for large messages, reduce-scatter).
pub mod two_shot_pad {
    use super::{MAX_BLOCKS, MAX_WORLD};
    /// Block `block` of rank `src` pushed its share of a segment into this rank's scratch.
    pub const fn pushed(block: usize, src: usize) -> usize {
        block * MAX_WORLD + src
    }
    /// Block `block` of rank `src` reduced a segment: it consumed what this rank pushed, and (all-reduce)
    /// wrote its results into this rank's buffer.
    pub const fn reduced(block: usize, src: usize) -> usize {
        MAX_BLOCKS * MAX_WORLD + block * MAX_WORLD + src
    }
    /// Signals in the pad.
    pub const SIGNALS: usize = 2 * MAX_BLOCKS * MAX_WORLD;
}

/// The value a one-shot or staged-exchange flag carries for launch `epoch`, with a 32-bit `header` (the
/// message's row or byte count): at least `epoch << 32`, which is what receivers wait for.
#[inline(always)]
pub const fn epoch_tag(epoch: u64, header: u64) -> u64 {
    (epoch << 32) | (header & 0xffff_ffff)
}

/// The value a two-shot signal carries for segment `segment` of launch `epoch`: increasing in both.
#[inline(always)]
pub const fn segment_tag(epoch: u64, segment: usize) -> u64 {
    (epoch << 32) | (segment as u64 + 1)
}

/// The LL buffer: two parities (epoch parity, so consecutive launches never share packets) × one region per
/// source rank × `slot_packets` packets. Returns the index of the first packet of region (`parity`, `src`).
#[inline(always)]
pub const fn ll_region(parity: u64, src: usize, world: usize, slot_packets: usize) -> usize {
    (parity as usize * world + src) * slot_packets
}

/// Packets of a region that carries messages of up to `max_bytes`: a header vector (the message length)
/// and the message's 16-byte vectors, two packets each (8 data bytes per packet).
pub const fn ll_slot_packets(max_bytes: usize) -> usize {
    2 * (1 + max_bytes.div_ceil(VECTOR_BYTES))
}

/// Splits `len` bytes into `parts` shares of whole 16-byte vectors and returns share `part` as `(start,
/// end)`; the last non-empty share ends at `len`. Senders and receivers call it with the same arguments, so
/// they agree on which block moves which bytes.
#[inline(always)]
pub const fn share(len: usize, parts: usize, part: usize) -> (usize, usize) {
    let vectors = len.div_ceil(VECTOR_BYTES);
    let per = vectors.div_ceil(if parts == 0 { 1 } else { parts }) * VECTOR_BYTES;
    let start = if part * per < len { part * per } else { len };
    let end = if start + per < len { start + per } else { len };
    (start, end)
}

/// Reduction operators, as the `op` argument of the reducing kernels encodes them.
pub mod op_code {
    /// Sum.
    pub const SUM: u32 = 0;
    /// Maximum.
    pub const MAX: u32 = 1;
    /// Minimum.
    pub const MIN: u32 = 2;
}

/// What an exchange kernel moves: who sends what to whom and where receivers put it.
pub mod exchange_mode {
    /// All-to-all: rank `r` sends `send_counts[q]` rows (taken in destination order from its send buffer)
    /// to rank `q`, which stores them in slot `r` of its receive buffer and the count in `recv_counts[r]`.
    pub const ALL_TO_ALL: u32 = 0;
    /// All-gather: every rank sends its input to every rank, which stores it in slot `src`.
    pub const ALL_GATHER: u32 = 1;
    /// Broadcast: the root sends its buffer to every rank; the others send empty messages.
    pub const BROADCAST: u32 = 2;
}

/// The by-value description of one exchange launch (broadcast, all-gather, all-to-all).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangePlan {
    /// An [`exchange_mode`] value.
    pub mode: u32,
    /// Broadcast: the sending rank.
    pub root: u32,
    /// All-to-all: bytes per row. All-gather and broadcast: bytes of the message.
    pub row_bytes: u64,
    /// Bytes between consecutive source slots of the receive buffer (0 for broadcast).
    pub slot_bytes: u64,
    /// All-to-all: rows a receive slot holds; a larger count is a bug the kernel traps on.
    pub cap_rows: u64,
    /// LL transport: packets per (parity, source) region of the LL buffer. Staged transport: 16-byte vectors
    /// per (parity, source) slot of the staging buffer.
    pub slot: u64,
}

/// The by-value description of one two-shot launch (all-reduce or reduce-scatter).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwoShotPlan {
    /// An [`op_code`] value.
    pub op: u32,
    /// Non-zero: all-gather the reduced chunks into every rank's buffer (all-reduce); zero: keep each
    /// rank's chunk in its own output (reduce-scatter).
    pub gather: u32,
    /// Elements of the input on every rank.
    pub len: u64,
    /// Elements of each rank's chunk (rank `c` owns `c * chunk .. min((c + 1) * chunk, len)`).
    pub chunk: u64,
    /// 16-byte vectors in each rank's scratch slot (one slot per source rank).
    pub slot_vectors: u64,
}

/// Plans cross the launch as themselves (`.param .align 8 .b8 p[N]`).
macro_rules! plain_param {
    ($($t:ty),*) => { $(
        // SAFETY: a `#[repr(C)]` struct of integers, valid for every bit pattern, passed by value as itself.
        unsafe impl ferrocomm_device::DeviceParam for $t {
            type Abi = $t;
            #[inline(always)]
            unsafe fn from_abi(abi: $t) -> $t {
                abi
            }
        }

        #[cfg(not(target_arch = "nvptx64"))]
        impl ferrocomm::LaunchParam for $t {
            type Host<'a> = $t;
            fn lower(host: &$t, _rank: &ferrocomm::RankRef<'_>) -> Result<$t, ferrocomm::Error> {
                Ok(*host)
            }
        }
    )* };
}
/// Output columns of one tile of the tensor-parallel GEMV: 32 lanes × 8 columns (one 16-byte vector of
/// `bf16` weights per lane and row).
pub const TP_TILE_COLS: usize = 256;
/// Warps per block of the tensor-parallel GEMV; each takes 64 columns of a tile over some of the block's
/// rows (see [`TpPlan::row_groups`]).
pub const TP_WARPS: usize = 4;
/// Rows of `w` in one k-step of the tensor-parallel GEMV: the `k` of `mma.m16n8k16`.
pub const TP_CHUNK_ROWS: usize = 16;
/// Rows of `w` one iteration of a warp of the tensor-parallel GEMV loads before it multiplies them: four
/// k-steps; lane `(g, t)` holds rows `16t .. 16t + 16` of them (16 16-byte loads in flight per lane). Splits
/// hold whole iterations (but the last).
pub const TP_ITERATION_ROWS: usize = 4 * TP_CHUNK_ROWS;
/// Blocks of the tensor-parallel GEMV (and of the fused step) that fit on one multiprocessor: their
/// `#[kernel(launch_bounds(128, 3))]` keeps ptxas to the registers three blocks share.
pub const TP_RESIDENT_BLOCKS_PER_SM: u32 = 3;
/// The most tokens a tensor-parallel decode step carries (the GEMV's accumulators are unrolled up to it).
pub const TP_MAX_TOKENS: usize = 16;

/// The most column tiles of a tensor-parallel decode step (hidden sizes up to 16384).
pub const TP_MAX_TILES: usize = 64;

/// Signals of a tensor-parallel decode pad (one pad per variant: their counters grow by different steps).
pub mod tp_pad {
    use super::{MAX_WORLD, TP_MAX_TILES};
    /// Tile `tile`'s owner: every block's partial tile has landed (fused: one add per block and rank).
    pub const fn arrived(tile: usize) -> usize {
        tile
    }
    /// Every rank: a share of a tile's reduced values and its sums of squares have landed (one add per
    /// reducing block: `tiles × reduce_parts` per launch).
    pub const GATHERED: usize = TP_MAX_TILES;
    /// Rank `src`'s partial sums are complete (two kernels: raised as the epilogue starts).
    pub const fn ready(src: usize) -> usize {
        TP_MAX_TILES + 1 + src
    }
    /// Signals in the pad.
    pub const SIGNALS: usize = TP_MAX_TILES + 1 + MAX_WORLD;
}

/// The by-value description of a tensor-parallel decode launch: `y[tokens, hidden] = x[tokens, k_local] ·
/// w[k_local, hidden]` on each rank, the rows of `w` cut into `splits` ranges per tile of
/// [`TP_TILE_COLS`] columns, each range taken by `row_groups` blocks (`TP_TILE_COLS / row_groups` columns
/// each), whose warps split the range's rows `row_groups` ways and add their sums in shared memory before
/// the block stores them: the split-K partial sums, which every epilogue reads back, shrink `row_groups`
/// times for the same grid.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpPlan {
    /// Tokens (rows of `x`), 1 ..= [`TP_MAX_TOKENS`].
    pub tokens: u64,
    /// Output columns, a multiple of 8.
    pub hidden: u64,
    /// This rank's rows of `w` (columns of `x`).
    pub k_local: u64,
    /// Column tiles: `hidden.div_ceil(TP_TILE_COLS)`.
    pub tiles: u64,
    /// Row ranges per tile: partial sums per tile and rank.
    pub splits: u64,
    /// Warps of a block that share a range's rows, taking every `row_groups`-th 64-row iteration of it: 1
    /// or 2, each the kernels' instance of that count (`kernels::tp_decode::RowGroups`). The grid is `tiles *
    /// row_groups * splits` blocks ([`TpPlan::grid`]).
    pub row_groups: u64,
    /// The RMSNorm's epsilon, as `f32` bits.
    pub eps_bits: u64,
}

impl TpPlan {
    /// The first `f32` of the partial sums of (`tile`, `split`) in a partials buffer: `[tile][split]
    /// [token][TP_TILE_COLS]`.
    #[inline(always)]
    pub const fn partial(&self, tile: usize, split: usize) -> usize {
        (tile * self.splits as usize + split) * self.tokens as usize * TP_TILE_COLS
    }

    /// `f32`s of a partials buffer.
    pub const fn partials_len(&self) -> usize {
        self.partial(self.tiles as usize, 0)
    }

    /// Blocks of the product per tile: `row_groups` blocks of columns for each of the `splits` ranges.
    #[inline(always)]
    pub const fn blocks_per_tile(&self) -> usize {
        (self.row_groups * self.splits) as usize
    }

    /// Blocks of the product (and of the fused step): `tiles * blocks_per_tile()`.
    #[inline(always)]
    pub const fn grid(&self) -> usize {
        self.tiles as usize * self.blocks_per_tile()
    }

    /// Where block `r` of a tile's [`blocks_per_tile`](Self::blocks_per_tile) computes: its range (split)
    /// `r % splits` and its columns, the `(r / splits)`-th `TP_TILE_COLS / row_groups` of the tile.
    #[inline(always)]
    pub const fn block_in_tile(&self, r: usize) -> (usize, usize) {
        // In 32 bits, as is every count here: a GPU divides those in a few instructions, where 64-bit
        // division is a subroutine.
        let (r, splits) = (r as u32, self.splits as u32);
        ((r / splits) as usize, (r % splits) as usize)
    }

    /// Block `b` of the grid: its tile, and its place among the tile's blocks (see
    /// [`block_in_tile`](Self::block_in_tile)).
    #[inline(always)]
    pub const fn tile_of_block(&self, b: u32) -> (usize, usize) {
        let per = self.blocks_per_tile() as u32;
        ((b / per) as usize, (b % per) as usize)
    }

    /// Blocks that reduce each tile in the decode step's epilogues on a team of `world` ranks, each a
    /// contiguous share of the tile's `tokens × 64` vectors: enough for about one vector per thread (one block
    /// at 1 token, eight at 16), and no more than the fused step's grid holds for the rank that owns the
    /// most tiles (`tiles.div_ceil(world)` of them), whose blocks reduce them. Each one's sums of squares
    /// take an entry of `TP_MAX_TOKENS` `f32`s: `tiles × reduce_parts` of them.
    #[inline(always)]
    pub const fn reduce_parts(&self, world: usize) -> usize {
        let parts = (self.tokens as usize * TP_TILE_COLS / 4).div_ceil(TP_WARPS * 32);
        // In 32 bits, as `block_in_tile` says. At least `blocks_per_tile`: a rank owns at most every tile.
        let most = (self.grid() as u32 / (self.tiles as u32).div_ceil(world as u32)) as usize;
        if parts < most { parts } else { most }
    }

    /// Blocks of `TP_WARPS` warps that give the RMSNorm a thread per 8 output columns: as many as the
    /// epilogues let write the output (fewer where their grid is smaller).
    #[inline(always)]
    pub const fn norm_blocks(&self) -> usize {
        (self.tokens as usize * self.hidden as usize / 8).div_ceil(TP_WARPS * 32)
    }

    /// Blocks of the two-kernel step's epilogue on a team of `world` ranks: as many as the reducing blocks of
    /// the rank that owns the most tiles (`tiles.div_ceil(world) × reduce_parts`) or as the norm wants
    /// ([`norm_blocks`](Self::norm_blocks)), whichever is more, but no more than the product's grid. That one
    /// keeps to the rank's share of the GPU: every block must be resident, beside the other ranks' kernels
    /// where ranks share a GPU.
    #[inline(always)]
    pub const fn epilogue_grid(&self, world: usize) -> usize {
        let reducers = (self.tiles as usize).div_ceil(world) * self.reduce_parts(world);
        let grid = if reducers > self.norm_blocks() { reducers } else { self.norm_blocks() };
        if grid < self.grid() { grid } else { self.grid() }
    }

    /// This split's rows: `start..end` of `k_local`, in whole iterations of [`TP_ITERATION_ROWS`] (the last split
    /// may hold fewer, or none).
    #[inline(always)]
    pub const fn rows(&self, split: usize) -> (usize, usize) {
        let per = (self.k_local as u32).div_ceil(self.splits as u32) as usize;
        let per = per.next_multiple_of(TP_ITERATION_ROWS);
        let start = split * per;
        let end = start + per;
        let k = self.k_local as usize;
        (if start < k { start } else { k }, if end < k { end } else { k })
    }
}

plain_param!(ExchangePlan, TwoShotPlan, TpPlan);

/// One put for the host proxy (`kernels::proxy`), the descriptor of its host queue: copy `bytes` from `src`
/// (on `src_rank`'s GPU) to `dst` (on `dst_rank`'s GPU), then store `value` into the `u64` signal at
/// `signal` (in `dst_rank`'s memory). Addresses are as the owning GPU addresses them (peer tables hold
/// owners' addresses). One 64-byte slot ([`ferrocomm_device::queue::SLOT_BYTES`]).
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

// The fields fill the 64 bytes: no padding.
const _: () = assert!(size_of::<ProxyDescriptor>() == 5 * 8 + 2 * 4 + 2 * 8);
const _: () = assert!(size_of::<ProxyDescriptor>() == ferrocomm_device::queue::SLOT_BYTES);

// SAFETY: `#[repr(C)]` integers with no padding (asserted above): every bit pattern is a descriptor, and it
// holds no pointer a GPU dereferences (the proxy interprets the addresses).
unsafe impl ferrocomm_device::DeviceCopy for ProxyDescriptor {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_range_in_whole_vectors() {
        for len in [0usize, 1, 15, 16, 17, 100, 4096, 4097] {
            for parts in 1..6 {
                let mut next = 0;
                for part in 0..parts {
                    let (s, e) = share(len, parts, part);
                    assert_eq!(s, next, "len {len} parts {parts} part {part}");
                    assert!(s <= e && e <= len);
                    assert!(s % VECTOR_BYTES == 0 || s == len, "shares start on a vector or are empty");
                    next = e;
                }
                assert_eq!(next, len);
            }
        }
    }

    /// A plan of `tiles` whole tiles.
    fn tp_plan(tokens: u64, tiles: u64, splits: u64, row_groups: u64) -> TpPlan {
        TpPlan { tokens, hidden: 256 * tiles, k_local: 8192, tiles, splits, row_groups, eps_bits: 0 }
    }

    #[test]
    fn a_tile_is_reduced_by_a_block_per_block_of_vectors_within_the_grid_of_its_owner() {
        // 64 vectors per token, 128 threads per block.
        assert_eq!(tp_plan(1, 32, 12, 1).reduce_parts(2), 1);
        assert_eq!(tp_plan(2, 32, 12, 1).reduce_parts(2), 1);
        assert_eq!(tp_plan(3, 32, 12, 1).reduce_parts(2), 2);
        assert_eq!(tp_plan(16, 32, 12, 1).reduce_parts(2), 8);
        assert_eq!(tp_plan(16, 32, 6, 2).reduce_parts(2), 8);
        // Fewer blocks per tile than parts: each rank's blocks reduce its half of the tiles, so twice as many
        // blocks per owned tile as per tile (H = K = 7168 on two ranks of one GPU: 28 tiles of 7 splits).
        assert_eq!(tp_plan(16, 28, 7, 1).reduce_parts(2), 8);
        assert_eq!(tp_plan(16, 32, 2, 2).reduce_parts(2), 8);
        assert_eq!(tp_plan(16, 32, 3, 1).reduce_parts(2), 6);
        assert_eq!(tp_plan(16, 32, 3, 1).reduce_parts(4), 8);
        // One rank owns every tile: its tile's blocks, as many as there are.
        assert_eq!(tp_plan(16, 32, 5, 1).reduce_parts(1), 5);
        assert_eq!(tp_plan(16, 32, 1, 1).reduce_parts(1), 1);
        // An odd tile count: rank 0 owns two of three tiles, with the grid's three (or six) blocks.
        assert_eq!(tp_plan(16, 3, 1, 1).reduce_parts(2), 1);
        assert_eq!(tp_plan(16, 3, 2, 1).reduce_parts(2), 3);
    }

    #[test]
    fn the_two_kernel_epilogue_has_a_block_per_tile_share_or_per_1024_columns_within_the_products_grid() {
        // H = 8192 (32 tiles), 1 token: 16 owned tiles of one share, 8 blocks of 1024 columns.
        assert_eq!(tp_plan(1, 32, 6, 1).epilogue_grid(2), 16);
        // 16 tokens: 16 tiles of 8 shares, 128 blocks of 1024 columns.
        assert_eq!(tp_plan(16, 32, 6, 1).epilogue_grid(2), 128);
        // One rank owns every tile: 32 tiles of 6 shares (its tiles' blocks), 192 blocks.
        assert_eq!(tp_plan(16, 32, 6, 1).epilogue_grid(1), 192);
        // 16 tokens of H = 1024 on two ranks: 2 tiles of 8 shares, but 16 blocks of columns.
        assert_eq!(tp_plan(16, 4, 6, 1).epilogue_grid(2), 16);
        // One tile of one split: the product's one block.
        assert_eq!(tp_plan(16, 1, 1, 1).epilogue_grid(2), 1);
    }

    #[test]
    fn a_tiles_blocks_take_every_range_of_rows_for_every_block_of_columns() {
        let plan = tp_plan(1, 32, 6, 2);
        assert_eq!((plan.blocks_per_tile(), plan.grid()), (12, 384));
        let places: std::collections::BTreeSet<_> = (0..12).map(|r| plan.block_in_tile(r)).collect();
        assert_eq!(places, (0..2).flat_map(|part| (0..6).map(move |split| (part, split))).collect());
        assert_eq!((plan.tile_of_block(0), plan.tile_of_block(383)), ((0, 0), (31, 11)));
    }

    #[test]
    fn tags_grow_with_epoch_and_segment() {
        assert!(segment_tag(1, 0) < segment_tag(1, 1));
        assert!(segment_tag(1, 1000) < segment_tag(2, 0));
        assert!(segment_tag(2, 0) >= 2 << 32);
    }

    #[test]
    fn signal_indices_stay_inside_their_pads() {
        assert!(p2p_pad::done(MAX_BLOCKS - 1) < p2p_pad::SIGNALS);
        assert!(exchange_pad::done(MAX_BLOCKS - 1, MAX_WORLD - 1) < exchange_pad::SIGNALS);
        assert!(two_shot_pad::reduced(MAX_BLOCKS - 1, MAX_WORLD - 1) < two_shot_pad::SIGNALS);
        assert!(one_shot_pad::pushed(1, MAX_BLOCKS - 1, MAX_WORLD - 1) < one_shot_pad::SIGNALS);
        assert_eq!(stage_slot(1, 0, 4, 8), 32);
        assert_eq!(ll_region(1, 1, 2, 10), 30);
        assert_eq!(ll_slot_packets(16), 4);
    }
}
