//! Warp-synchronous operations: shuffles (`shfl.sync`) and votes (`vote.sync`) over the lanes named by a
//! member mask. Every lane in the mask must make the same call; the calling lane must be in the mask. The
//! whole warp is the segment (CUDA's default `width` of 32).
//!
//! Shuffles move 32-bit words; [`ShflValue`] types of 64 bits take two shuffles.

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// The four shuffle modes, as PTX computes the source lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(target_arch = "nvptx64", allow(dead_code))]
enum Mode {
    Idx,
    Up,
    Down,
    Bfly,
}

/// The lane `lane` reads from, for operand `b` and the clamp/segment operand `c` (PTX ISA, `shfl.sync`):
/// out-of-range sources read the lane's own value.
#[cfg(not(target_arch = "nvptx64"))]
fn shfl_source(mode: Mode, lane: u32, b: u32, c: u32) -> u32 {
    let (bval, cval, seg) = ((b & 0x1f) as i32, (c & 0x1f) as i32, ((c >> 8) & 0x1f) as i32);
    let lane = lane as i32;
    let max_lane = (lane & seg) | (cval & !seg);
    let min_lane = lane & seg;
    let (j, ok) = match mode {
        Mode::Up => (lane - bval, lane - bval >= max_lane),
        Mode::Down => (lane + bval, lane + bval <= max_lane),
        Mode::Bfly => (lane ^ bval, (lane ^ bval) <= max_lane),
        Mode::Idx => {
            let j = min_lane | (bval & !seg);
            (j, j <= max_lane)
        }
    };
    if ok { j as u32 } else { lane as u32 }
}

/// The emulator's `shfl.sync`: one warp round, then the source lane's value (own value when the source is
/// not taking part: undefined on the GPU).
#[cfg(not(target_arch = "nvptx64"))]
fn shfl_host(mode: Mode, mask: u32, v: u32, b: u32, c: u32) -> u32 {
    let round = crate::lower::warp_exchange(mask, u64::from(v));
    let j = shfl_source(mode, crate::index::lane_id(), b, c);
    if round.participants & (1 << j) != 0 { round.values[j as usize] as u32 } else { v }
}

/// One 32-bit shuffle: the asm on the GPU (its `c` operand written in the string), the emulator's round on
/// the host.
macro_rules! shfl_b32 {
    ($(#[$doc:meta])* $name:ident, $asm:literal, $mode:ident, $c:literal) => {
        $(#[$doc])*
        #[inline(always)]
        fn $name(mask: u32, v: u32, b: u32) -> u32 {
            #[cfg(target_arch = "nvptx64")]
            {
                let r: u32;
                // SAFETY: a register exchange among the lanes of `mask`; the calling lane is in it.
                unsafe { asm!($asm, r = out(reg32) r, v = in(reg32) v, b = in(reg32) b, m = in(reg32) mask,
                    options(nomem, nostack)) };
                r
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                shfl_host(Mode::$mode, mask, v, b, $c)
            }
        }
    };
}

shfl_b32!(/** `shfl.sync.idx.b32`, c = 31 */ shfl_idx_b32, "shfl.sync.idx.b32 {r}, {v}, {b}, 31, {m};", Idx, 31);
shfl_b32!(/** `shfl.sync.up.b32`, c = 0 */ shfl_up_b32, "shfl.sync.up.b32 {r}, {v}, {b}, 0, {m};", Up, 0);
shfl_b32!(/** `shfl.sync.down.b32`, c = 31 */ shfl_down_b32, "shfl.sync.down.b32 {r}, {v}, {b}, 31, {m};", Down, 31);
shfl_b32!(/** `shfl.sync.bfly.b32`, c = 31 */ shfl_bfly_b32, "shfl.sync.bfly.b32 {r}, {v}, {b}, 31, {m};", Bfly, 31);

mod sealed {
    pub trait Sealed {}
}

/// A value a shuffle can move: 32 bits (one `shfl.sync`) or 64 bits (two).
pub trait ShflValue: Copy + sealed::Sealed {
    /// Whether the value needs two 32-bit shuffles.
    #[doc(hidden)]
    const WIDE: bool;
    /// The value's bits.
    #[doc(hidden)]
    fn to_bits64(self) -> u64;
    /// The value from its bits.
    #[doc(hidden)]
    fn from_bits64(bits: u64) -> Self;
}

macro_rules! shfl_value {
    ($t:ty, $wide:literal, |$v:ident| $to:expr, |$b:ident| $from:expr) => {
        impl sealed::Sealed for $t {}
        impl ShflValue for $t {
            const WIDE: bool = $wide;
            #[inline(always)]
            fn to_bits64(self) -> u64 {
                let $v = self;
                $to
            }
            #[inline(always)]
            fn from_bits64($b: u64) -> $t {
                $from
            }
        }
    };
}
shfl_value!(u32, false, |v| u64::from(v), |b| b as u32);
shfl_value!(i32, false, |v| u64::from(v as u32), |b| b as u32 as i32);
shfl_value!(f32, false, |v| u64::from(v.to_bits()), |b| f32::from_bits(b as u32));
shfl_value!(u64, true, |v| v, |b| b);
shfl_value!(i64, true, |v| v as u64, |b| b as i64);
shfl_value!(f64, true, |v| v.to_bits(), |b| f64::from_bits(b));

#[inline(always)]
fn shfl_wide<T: ShflValue>(f: impl Fn(u32, u32, u32) -> u32, mask: u32, v: T, b: u32) -> T {
    let bits = v.to_bits64();
    let lo = f(mask, bits as u32, b);
    let hi = if T::WIDE { f(mask, (bits >> 32) as u32, b) } else { 0 };
    T::from_bits64(u64::from(lo) | u64::from(hi) << 32)
}

/// Every lane of `mask` reads `v` of lane `src_lane` (CUDA's `__shfl_sync`).
#[inline(always)]
pub fn shfl_idx_sync<T: ShflValue>(mask: u32, v: T, src_lane: u32) -> T {
    shfl_wide(shfl_idx_b32, mask, v, src_lane)
}

/// Lane `i` reads `v` of lane `i - delta`; lanes below `delta` keep their own (`__shfl_up_sync`).
#[inline(always)]
pub fn shfl_up_sync<T: ShflValue>(mask: u32, v: T, delta: u32) -> T {
    shfl_wide(shfl_up_b32, mask, v, delta)
}

/// Lane `i` reads `v` of lane `i + delta`; lanes past 31 keep their own (`__shfl_down_sync`).
#[inline(always)]
pub fn shfl_down_sync<T: ShflValue>(mask: u32, v: T, delta: u32) -> T {
    shfl_wide(shfl_down_b32, mask, v, delta)
}

/// Lane `i` reads `v` of lane `i ^ lane_mask` (`__shfl_xor_sync`): the butterfly of warp reductions.
#[inline(always)]
pub fn shfl_xor_sync<T: ShflValue>(mask: u32, v: T, lane_mask: u32) -> T {
    shfl_wide(shfl_bfly_b32, mask, v, lane_mask)
}

/// The lanes of `mask` whose `pred` is true, as a bit mask (`vote.sync.ballot.b32`).
#[inline(always)]
pub fn vote_ballot_sync(mask: u32, pred: bool) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: a register vote among the lanes of `mask`; the predicate registers are scoped to the block.
        unsafe {
            asm!("{{ .reg .pred vin; setp.ne.u32 vin, {p}, 0; vote.sync.ballot.b32 {r}, vin, {m}; }}",
                r = out(reg32) r, p = in(reg32) u32::from(pred), m = in(reg32) mask, options(nomem, nostack))
        };
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        ballot_host(mask, pred).0
    }
}

/// The emulator's vote: (ballot, participating lanes).
#[cfg(not(target_arch = "nvptx64"))]
fn ballot_host(mask: u32, pred: bool) -> (u32, u32) {
    let round = crate::lower::warp_exchange(mask, u64::from(pred));
    let ballot = (0..32).filter(|&l| round.participants & (1 << l) != 0 && round.values[l] != 0);
    (ballot.fold(0, |acc, l| acc | 1 << l), round.participants)
}

/// Whether `pred` is true on any lane of `mask` (`vote.sync.any.pred`).
#[inline(always)]
pub fn vote_any_sync(mask: u32, pred: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: a register vote among the lanes of `mask`; the predicate registers are scoped to the block.
        unsafe {
            asm!("{{ .reg .pred vin; .reg .pred vout; setp.ne.u32 vin, {p}, 0; vote.sync.any.pred vout, vin, {m}; selp.u32 {r}, 1, 0, vout; }}",
                r = out(reg32) r, p = in(reg32) u32::from(pred), m = in(reg32) mask, options(nomem, nostack))
        };
        r != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        ballot_host(mask, pred).0 != 0
    }
}

/// Whether `pred` is true on every lane of `mask` (`vote.sync.all.pred`).
#[inline(always)]
pub fn vote_all_sync(mask: u32, pred: bool) -> bool {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: a register vote among the lanes of `mask`; the predicate registers are scoped to the block.
        unsafe {
            asm!("{{ .reg .pred vin; .reg .pred vout; setp.ne.u32 vin, {p}, 0; vote.sync.all.pred vout, vin, {m}; selp.u32 {r}, 1, 0, vout; }}",
                r = out(reg32) r, p = in(reg32) u32::from(pred), m = in(reg32) mask, options(nomem, nostack))
        };
        r != 0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let (ballot, participants) = ballot_host(mask, pred);
        ballot == participants
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;

    #[test]
    fn shuffle_sources_follow_ptx() {
        assert_eq!(shfl_source(Mode::Idx, 5, 17, 31), 17);
        assert_eq!(shfl_source(Mode::Up, 5, 2, 0), 3);
        assert_eq!(shfl_source(Mode::Up, 1, 2, 0), 1);
        assert_eq!(shfl_source(Mode::Down, 5, 2, 31), 7);
        assert_eq!(shfl_source(Mode::Down, 30, 4, 31), 30);
        assert_eq!(shfl_source(Mode::Bfly, 5, 1, 31), 4);
        assert_eq!(shfl_source(Mode::Bfly, 6, 16, 31), 22);
        // A segment of 8 lanes (c = (32 - 8) << 8 | 7): idx stays inside the segment.
        assert_eq!(shfl_source(Mode::Idx, 13, 2, (24 << 8) | 7), 10);
    }
}
