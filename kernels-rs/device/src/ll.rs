//! LL (low-latency) packets: the small-message path that needs no release fence.
//!
//! Each [`LlPacket`] carries 8 bytes of data and, beside each 4-byte half, the sender's flag for this
//! launch; the sender writes it with one 16-byte `st.volatile.global.v4.b32`, the receiver polls it with
//! `ld.volatile.global.v4.b32` until both flags equal the current one. The flag travels in the same store
//! as its data, so no fence and no separate signal are needed. Flags come from [`ll_flag`] of a
//! [`Session::epoch`](crate::signal::Session::epoch), so buffers are reused without resets: stale
//! packets carry an older flag.
//!
//! In the emulator each 8-byte (data, flag) half is one relaxed atomic store and load, which is the
//! atomicity the protocol relies on.

use crate::abi::Cmp;
use crate::group::Group;
use crate::mem::{GlobalPtr, unit_for};
use crate::signal::poll_until;
use crate::sym::{DeviceCopy, PeerSlice, PeerSliceMut};
use crate::vector::V16;

/// Data bytes per packet.
pub const LL_PAYLOAD_BYTES: usize = 8;

/// Packets needed to carry `len` elements of `T`.
#[inline(always)]
pub const fn ll_packets<T>(len: usize) -> usize {
    (len * core::mem::size_of::<T>()).div_ceil(LL_PAYLOAD_BYTES)
}

/// The flag of epoch `epoch` (>= 1): never 0, so a zeroed buffer never looks written.
#[inline(always)]
pub fn ll_flag(epoch: u64) -> u32 {
    (epoch.wrapping_sub(1) % u64::from(u32::MAX)) as u32 + 1
}

/// The flag of the epoch after the one whose flag is `flag`: `ll_next_flag(ll_flag(e)) == ll_flag(e + 1)`,
/// without [`ll_flag`]'s 64-bit remainder (a loop over epochs steps its flag with it).
#[inline(always)]
pub fn ll_next_flag(flag: u32) -> u32 {
    if flag == u32::MAX { 1 } else { flag + 1 }
}

/// A low-latency packet: 8 bytes of data and two copies of a 4-byte flag, written by one 16-byte store, so
/// a reader that sees the current flag in both halves has the data without any fence (NCCL's LL protocol).
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LlPacket {
    /// Data bytes 0..4.
    pub data_lo: u32,
    /// The flag guarding `data_lo`.
    pub flag_lo: u32,
    /// Data bytes 4..8.
    pub data_hi: u32,
    /// The flag guarding `data_hi`.
    pub flag_hi: u32,
}

// SAFETY: four `u32`s, no padding.
unsafe impl DeviceCopy for LlPacket {}

impl LlPacket {
    /// A packet carrying `data` under `flag`.
    #[inline(always)]
    pub const fn new(data: u64, flag: u32) -> LlPacket {
        LlPacket { data_lo: data as u32, flag_lo: flag, data_hi: (data >> 32) as u32, flag_hi: flag }
    }

    /// The 8 data bytes.
    #[inline(always)]
    pub const fn data(&self) -> u64 {
        self.data_lo as u64 | (self.data_hi as u64) << 32
    }

    /// Whether both halves carry `flag` (the data is complete).
    #[inline(always)]
    pub const fn is_complete(&self, flag: u32) -> bool {
        self.flag_lo == flag && self.flag_hi == flag
    }

    fn from_words(w: [u32; 4]) -> LlPacket {
        LlPacket { data_lo: w[0], flag_lo: w[1], data_hi: w[2], flag_hi: w[3] }
    }
}

/// Stores one packet with a single 16-byte volatile store.
///
/// # Safety
///
/// `dst` is a live, 16-byte aligned packet in global memory.
#[inline(always)]
pub unsafe fn ll_store(dst: *mut LlPacket, packet: LlPacket) {
    let w = [packet.data_lo, packet.flag_lo, packet.data_hi, packet.flag_hi];
    // SAFETY: the caller's contract.
    unsafe { GlobalPtr::from_generic(dst).st_volatile_v4(w) };
}

/// Loads one packet with a single 16-byte volatile load.
///
/// # Safety
///
/// `src` is a live, 16-byte aligned packet in global memory.
#[inline(always)]
pub unsafe fn ll_load(src: *const LlPacket) -> LlPacket {
    // SAFETY: the caller's contract.
    LlPacket::from_words(unsafe { GlobalPtr::from_generic(src).ld_volatile_v4() })
}

/// Reads `len <= 8` bytes at `p` as the low bytes of a little-endian word, with the widest aligned units.
///
/// # Safety
///
/// `len` bytes at `p` are readable and not written concurrently.
#[inline(always)]
unsafe fn load_word(p: *const u8, len: usize) -> u64 {
    if len == 8 && (p as usize).is_multiple_of(8) {
        // SAFETY: the caller guarantees 8 readable bytes; aligned.
        return unsafe { p.cast::<u64>().read() };
    }
    let mut word = 0u64;
    let mut off = 0;
    while off < len {
        // SAFETY: `off < len`, inside the readable range (the caller).
        let a = unsafe { p.add(off) };
        let unit = unit_for(a as usize, len - off);
        // SAFETY: `off + unit <= len` bytes are readable (the caller) and `a` is aligned to `unit`.
        let v = unsafe {
            match unit {
                8 => a.cast::<u64>().read(),
                4 => u64::from(a.cast::<u32>().read()),
                2 => u64::from(a.cast::<u16>().read()),
                _ => u64::from(a.read()),
            }
        };
        word |= v << (8 * off);
        off += unit;
    }
    word
}

/// Writes the low `len <= 8` bytes of `word` at `p`.
///
/// # Safety
///
/// `len` bytes at `p` are writable and not accessed concurrently.
#[inline(always)]
unsafe fn store_word(p: *mut u8, len: usize, word: u64) {
    if len == 8 && (p as usize).is_multiple_of(8) {
        // SAFETY: the caller guarantees 8 writable bytes; aligned.
        return unsafe { p.cast::<u64>().write(word) };
    }
    let mut off = 0;
    while off < len {
        let v = word >> (8 * off);
        // SAFETY: `off < len`, inside the writable range (the caller).
        let a = unsafe { p.add(off) };
        let unit = unit_for(a as usize, len - off);
        // SAFETY: `off + unit <= len` bytes are writable (the caller) and `a` is aligned to `unit`.
        unsafe {
            match unit {
                8 => a.cast::<u64>().write(v),
                4 => a.cast::<u32>().write(v as u32),
                2 => a.cast::<u16>().write(v as u16),
                _ => a.write(v as u8),
            }
        }
        off += unit;
    }
}

#[inline(always)]
#[track_caller]
fn put_ll_lanes<T: DeviceCopy>(dst: PeerSliceMut<LlPacket>, src: &[T], flag: u32, lane: usize, lanes: usize) {
    let bytes = core::mem::size_of_val(src);
    let packets = bytes.div_ceil(LL_PAYLOAD_BYTES);
    assert!(packets <= dst.len(), "LL destination has fewer packets than the source needs");
    let base = src.as_ptr().cast::<u8>();
    let mut i = lane;
    while i < packets {
        let off = i * LL_PAYLOAD_BYTES;
        // SAFETY: bytes `off..off + len` are inside `src`; packet `i` is inside `dst`.
        unsafe {
            let word = load_word(base.add(off), (bytes - off).min(LL_PAYLOAD_BYTES));
            ll_store(dst.as_ptr().add(i), LlPacket::new(word, flag));
        }
        i += lanes;
    }
}

#[inline(always)]
#[track_caller]
fn read_ll_lanes<T: DeviceCopy>(dst: &mut [T], src: PeerSlice<LlPacket>, flag: u32, lane: usize, lanes: usize) {
    let location = core::panic::Location::caller();
    let bytes = core::mem::size_of_val(dst);
    let packets = bytes.div_ceil(LL_PAYLOAD_BYTES);
    assert!(packets <= src.len(), "LL source has fewer packets than the destination needs");
    let base = dst.as_mut_ptr().cast::<u8>();
    let mut i = lane;
    while i < packets {
        // SAFETY: packet `i` is inside `src`.
        let p = unsafe { src.as_ptr().add(i) };
        let word = poll_until(
            || {
                // SAFETY: as above.
                let packet = unsafe { ll_load(p) };
                match (packet.flag_lo == flag, packet.flag_hi == flag) {
                    (true, true) => Ok(packet.data()),
                    (false, _) => Err(u64::from(packet.flag_lo)),
                    (true, false) => Err(u64::from(packet.flag_hi)),
                }
            },
            crate::signal::SPIN_POLLS,
            p as u64,
            u64::from(flag),
            Cmp::Eq,
            location,
        );
        let off = i * LL_PAYLOAD_BYTES;
        // SAFETY: bytes `off..off + len` are inside `dst`.
        unsafe { store_word(base.add(off), (bytes - off).min(LL_PAYLOAD_BYTES), word) };
        i += lanes;
    }
}

/// The group's threads send `src` to `dst` (a rank's LL buffer) as packets carrying `flag`, packet `i` by
/// the group's thread `i % size`; no thread waits for the others.
#[inline(always)]
#[track_caller]
pub fn put_ll<T: DeviceCopy>(group: Group, dst: PeerSliceMut<LlPacket>, src: &[T], flag: u32) {
    let (lane, lanes) = group.position();
    // The group's first thread traces its share's begin and end, as the put's.
    let (traced, bytes, at) =
        (crate::trace::COMPILED_IN && lane == 0, core::mem::size_of_val(src), dst.as_ptr() as u64);
    if traced {
        crate::trace::put_begin(bytes, at);
    }
    put_ll_lanes(dst, src, flag, lane, lanes);
    if traced {
        crate::trace::put_end(bytes, at);
    }
}

/// The group's threads wait until every packet of `src` (this rank's LL buffer) carries `flag` and unpack
/// them into `dst`, packet `i` by the group's thread `i % size`; returns when every thread of the group is
/// done. Times out like a signal wait, recording the packet's address and the flag it held.
#[inline(always)]
#[track_caller]
pub fn read_ll<T: DeviceCopy>(group: Group, dst: &mut [T], src: impl Into<PeerSlice<LlPacket>>, flag: u32) {
    #[cfg(not(target_arch = "nvptx64"))]
    crate::lower::ll_read_begins();
    let (lane, lanes) = group.position();
    read_ll_lanes(dst, src.into(), flag, lane, lanes);
    group.sync();
}

// The group-suffixed calls of 0.1's first API, kept for one release (CHANGELOG.md).

/// Deprecated: use `put_ll(Group::Warp, dst, src, flag)`.
#[deprecated(since = "0.2.0", note = "use `put_ll(Group::Warp, dst, src, flag)`")]
#[inline(always)]
#[track_caller]
pub fn put_ll_warp<T: DeviceCopy>(dst: PeerSliceMut<LlPacket>, src: &[T], flag: u32) {
    put_ll(Group::Warp, dst, src, flag)
}

/// Deprecated: use `put_ll(Group::Block, dst, src, flag)`.
#[deprecated(since = "0.2.0", note = "use `put_ll(Group::Block, dst, src, flag)`")]
#[inline(always)]
#[track_caller]
pub fn put_ll_block<T: DeviceCopy>(dst: PeerSliceMut<LlPacket>, src: &[T], flag: u32) {
    put_ll(Group::Block, dst, src, flag)
}

/// Deprecated: use `read_ll(Group::Warp, dst, src, flag)`.
#[deprecated(since = "0.2.0", note = "use `read_ll(Group::Warp, dst, src, flag)`")]
#[inline(always)]
#[track_caller]
pub fn read_ll_warp<T: DeviceCopy>(dst: &mut [T], src: impl Into<PeerSlice<LlPacket>>, flag: u32) {
    read_ll(Group::Warp, dst, src, flag)
}

/// Deprecated: use `read_ll(Group::Block, dst, src, flag)`.
#[deprecated(since = "0.2.0", note = "use `read_ll(Group::Block, dst, src, flag)`")]
#[inline(always)]
#[track_caller]
pub fn read_ll_block<T: DeviceCopy>(dst: &mut [T], src: impl Into<PeerSlice<LlPacket>>, flag: u32) {
    read_ll(Group::Block, dst, src, flag)
}

impl PeerSliceMut<LlPacket> {
    /// Stores packet `i` with one 16-byte volatile store (panics when out of bounds).
    #[inline(always)]
    #[track_caller]
    pub fn store_packet(&self, i: usize, packet: LlPacket) {
        assert!(i < self.len(), "LL packet index out of bounds");
        // SAFETY: in bounds of a live copy of an LL buffer, whose packets are 16-byte aligned (`LlPacket`
        // is `align(16)`).
        unsafe { ll_store(self.as_ptr().add(i), packet) }
    }

    /// Sends the 16-byte vector `v` as packets `2k` and `2k + 1` under `flag` (8 data bytes each).
    #[inline(always)]
    #[track_caller]
    pub fn store_vector(&self, k: usize, v: V16, flag: u32) {
        self.store_packet(2 * k, LlPacket { data_lo: v[0], flag_lo: flag, data_hi: v[1], flag_hi: flag });
        self.store_packet(2 * k + 1, LlPacket { data_lo: v[2], flag_lo: flag, data_hi: v[3], flag_hi: flag });
    }
}

impl PeerSlice<LlPacket> {
    /// Loads packet `i` with one 16-byte volatile load (panics when out of bounds).
    #[inline(always)]
    #[track_caller]
    pub fn load_packet(&self, i: usize) -> LlPacket {
        assert!(i < self.len(), "LL packet index out of bounds");
        // SAFETY: as for `store_packet`.
        unsafe { ll_load(self.as_ptr().add(i)) }
    }

    /// Waits until packet `i` carries `flag` and returns its 8 data bytes (as [`LlPacket::data`]): `spins`
    /// polls in a tight loop, the latency-critical path, then through the library's wait, which backs off
    /// and records a timeout.
    #[inline(always)]
    #[track_caller]
    pub fn poll_packet(&self, i: usize, flag: u32, spins: u32) -> u64 {
        #[cfg(not(target_arch = "nvptx64"))]
        crate::lower::ll_read_begins();
        assert!(i < self.len(), "LL packet index out of bounds");
        for _ in 0..spins {
            let p = self.load_packet(i);
            if p.is_complete(flag) {
                return p.data();
            }
        }
        let mut word = [0u8; LL_PAYLOAD_BYTES];
        read_ll_lanes(&mut word, self.slice(i, 1), flag, 0, 1);
        u64::from_le_bytes(word)
    }

    /// Waits until packets `2k` and `2k + 1` both carry `flag` and returns the 16-byte vector they hold.
    /// Both are loaded together on every poll (one round trip, not two): `spins` times in a tight loop, the
    /// latency-critical path, then through the library's wait, which backs off and records a timeout.
    #[inline(always)]
    #[track_caller]
    pub fn poll_vector(&self, k: usize, flag: u32, spins: u32) -> V16 {
        #[cfg(not(target_arch = "nvptx64"))]
        crate::lower::ll_read_begins();
        assert!(2 * k + 1 < self.len(), "LL packet index out of bounds");
        for _ in 0..spins {
            let (lo, hi) = (self.load_packet(2 * k), self.load_packet(2 * k + 1));
            if lo.is_complete(flag) && hi.is_complete(flag) {
                return [lo.data_lo, lo.data_hi, hi.data_lo, hi.data_hi];
            }
        }
        let mut words = [0u32; 4];
        read_ll_lanes(&mut words, self.slice(2 * k, 2), flag, 0, 1);
        words
    }

    /// Waits until the `live` (at most `N`) vectors `k(0) .. k(live - 1)` (each as in
    /// [`poll_vector`](Self::poll_vector)) all carry `flag` and returns them, zeros past `live`. Every poll
    /// loads all of them together, so vectors that arrive together cost one round trip, not one each (a sum
    /// over several senders' packets). `spins` polls in a tight loop, then the library's wait: it backs off
    /// between polls — many threads waiting long (a kernel's tail waiting for its other blocks) would
    /// otherwise take the memory system from the blocks they wait for — and records a timeout.
    #[inline(always)]
    #[track_caller]
    pub fn poll_vectors<const N: usize>(
        &self,
        k: impl Fn(usize) -> usize,
        live: usize,
        flag: u32,
        spins: u32,
    ) -> [V16; N] {
        #[cfg(not(target_arch = "nvptx64"))]
        crate::lower::ll_read_begins();
        let live = live.min(N);
        let mut vectors = [[0u32; 4]; N];
        if live == 0 {
            return vectors;
        }
        // Loops of a constant count over local arrays, indexed by constants once unrolled: every load goes out
        // before any test of what it loaded, and nothing goes through local memory (which `array::from_fn`,
        // by-value iteration, `all` or a loop up to `live` can cause: each load's packets are then stored
        // there before the next load goes out). The places past `live` load the last live vector again.
        let poll = || {
            let mut packets = [(LlPacket::new(0, 0), LlPacket::new(0, 0)); N];
            for (j, p) in packets.iter_mut().enumerate() {
                let k = k(j.min(live - 1));
                assert!(2 * k + 1 < self.len(), "LL packet index out of bounds");
                *p = (self.load_packet(2 * k), self.load_packet(2 * k + 1));
            }
            // A flag other than `flag` that an incomplete packet holds (what the timeout record shows).
            let stale = |p: LlPacket| if p.flag_lo != flag { p.flag_lo } else { p.flag_hi };
            let mut seen = flag;
            #[allow(clippy::needless_range_loop)]
            for j in 0..N {
                let (lo, hi) = packets[j];
                if !hi.is_complete(flag) {
                    seen = stale(hi);
                }
                if !lo.is_complete(flag) {
                    seen = stale(lo);
                }
            }
            if seen == flag { Ok(packets) } else { Err(u64::from(seen)) }
        };
        let first = self.as_ptr().wrapping_add(2 * k(0)) as u64;
        let packets = poll_until(poll, spins, first, u64::from(flag), Cmp::Eq, core::panic::Location::caller());
        #[allow(clippy::needless_range_loop)]
        for j in 0..N {
            let (lo, hi) = packets[j];
            if j < live {
                vectors[j] = [lo.data_lo, lo.data_hi, hi.data_lo, hi.data_hi];
            }
        }
        vectors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_skip_zero() {
        assert_eq!(ll_flag(1), 1);
        assert_eq!(ll_flag(2), 2);
        assert_eq!(ll_flag(u64::from(u32::MAX)), u32::MAX);
        assert_eq!(ll_flag(u64::from(u32::MAX) + 1), 1);
    }

    #[test]
    fn next_flag_steps_like_the_epoch() {
        let max = u64::from(u32::MAX);
        for e in [1, 2, 3, max - 1, max, max + 1, 2 * max - 1, 2 * max, 2 * max + 1] {
            assert_eq!(ll_next_flag(ll_flag(e)), ll_flag(e + 1), "epoch {e}");
        }
    }

    #[test]
    fn words_round_trip_at_any_alignment() {
        let src: Vec<u8> = (1..=24).collect();
        for start in 0..8 {
            for len in 0..=8 {
                // SAFETY: `start + len <= 16 < 24`.
                let w = unsafe { load_word(src.as_ptr().add(start), len) };
                let mut dst = [0u8; 24];
                // SAFETY: as above.
                unsafe { store_word(dst.as_mut_ptr().add(start), len, w) };
                assert_eq!(&dst[start..start + len], &src[start..start + len]);
                assert!(dst[start + len..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn packets_carry_data_and_flag() {
        let p = LlPacket::new(0x1122_3344_5566_7788, 9);
        assert_eq!(p.data(), 0x1122_3344_5566_7788);
        assert!(p.is_complete(9) && !p.is_complete(8));
        assert_eq!(ll_packets::<u32>(3), 2);
        assert_eq!(ll_packets::<u8>(0), 0);
    }
}
