//! The element types the reducing collectives handle (`f32`, `f16`, `bf16`) and the reduction operators.
//!
//! Every reduction accumulates in `f32`, in rank order `0, 1, …, world - 1`, and rounds once at the end
//! (round to nearest even). The kernels and the CPU references (`host::reference`) use these same
//! functions, so their results agree bit for bit on every rank, whichever algorithm ran.

use ferrocomm_device::{DeviceCopy, bf16, f16};

use crate::layout::op_code;

pub use ferrocomm_device::vector::V16;

/// Lanes of `f32` accumulators one vector unpacks into (eight for 16-bit types, four used for `f32`).
pub type Acc = [f32; 8];

/// An element type the reducing collectives support.
pub trait Element: DeviceCopy + Default + PartialEq + core::fmt::Debug {
    /// Elements per 16-byte vector.
    const LANES: usize;
    /// The name used in kernel names and messages (`"bf16"`).
    const NAME: &'static str;

    /// The exact `f32` value.
    fn to_f32(self) -> f32;
    /// The nearest value (round to nearest even).
    fn from_f32(v: f32) -> Self;
    /// The lanes of a vector as `f32` (unused lanes are zero).
    fn unpack(v: V16) -> Acc;
    /// A vector of the rounded lanes.
    fn pack(acc: Acc) -> V16;
}

impl Element for f32 {
    const LANES: usize = 4;
    const NAME: &'static str = "f32";

    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> f32 {
        v
    }
    #[inline(always)]
    fn unpack(v: V16) -> Acc {
        let f = f32::from_bits;
        [f(v[0]), f(v[1]), f(v[2]), f(v[3]), 0.0, 0.0, 0.0, 0.0]
    }
    #[inline(always)]
    fn pack(acc: Acc) -> V16 {
        [acc[0].to_bits(), acc[1].to_bits(), acc[2].to_bits(), acc[3].to_bits()]
    }
}

/// Unpacks the two 16-bit halves of each word with `lo`/`hi` converting bits to `f32`.
#[inline(always)]
fn unpack_halves(v: V16, convert: impl Fn(u16) -> f32) -> Acc {
    let mut acc = [0.0; 8];
    for (i, w) in v.iter().enumerate() {
        acc[2 * i] = convert(*w as u16);
        acc[2 * i + 1] = convert((*w >> 16) as u16);
    }
    acc
}

/// Packs pairs of lanes into words with `convert` rounding each `f32` to 16 bits.
#[inline(always)]
fn pack_halves(acc: Acc, convert: impl Fn(f32) -> u16) -> V16 {
    let mut v = [0u32; 4];
    for (i, w) in v.iter_mut().enumerate() {
        *w = u32::from(convert(acc[2 * i])) | u32::from(convert(acc[2 * i + 1])) << 16;
    }
    v
}

impl Element for bf16 {
    const LANES: usize = 8;
    const NAME: &'static str = "bf16";

    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> bf16 {
        bf16::from_f32(v)
    }
    #[inline(always)]
    fn unpack(v: V16) -> Acc {
        unpack_halves(v, |h| bf16::from_bits(h).to_f32())
    }
    #[inline(always)]
    fn pack(acc: Acc) -> V16 {
        pack_halves(acc, |x| bf16::from_f32(x).to_bits())
    }
}

impl Element for f16 {
    const LANES: usize = 8;
    const NAME: &'static str = "f16";

    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> f16 {
        f16::from_f32(v)
    }
    #[inline(always)]
    fn unpack(v: V16) -> Acc {
        unpack_halves(v, |h| f16::from_bits(h).to_f32())
    }
    #[inline(always)]
    fn pack(acc: Acc) -> V16 {
        pack_halves(acc, |x| f16::from_f32(x).to_bits())
    }
}

/// A reduction operator on `f32` accumulators.
pub trait ReduceOp: Copy {
    /// The [`op_code`] the kernels receive.
    const CODE: u32;
    /// `acc ⊕ x`.
    fn apply(acc: f32, x: f32) -> f32;

    /// Lane-wise `acc ⊕ x`.
    #[inline(always)]
    fn apply_lanes(acc: &mut Acc, x: &Acc) {
        for (a, b) in acc.iter_mut().zip(x) {
            *a = Self::apply(*a, *b);
        }
    }
}

/// Sum.
#[derive(Debug, Clone, Copy)]
pub struct Sum;
/// Maximum (a NaN loses to a number, as `f32::max`).
#[derive(Debug, Clone, Copy)]
pub struct Max;
/// Minimum (a NaN loses to a number, as `f32::min`).
#[derive(Debug, Clone, Copy)]
pub struct Min;

impl ReduceOp for Sum {
    const CODE: u32 = op_code::SUM;
    #[inline(always)]
    fn apply(acc: f32, x: f32) -> f32 {
        acc + x
    }
}

impl ReduceOp for Max {
    const CODE: u32 = op_code::MAX;
    #[inline(always)]
    fn apply(acc: f32, x: f32) -> f32 {
        acc.max(x)
    }
}

impl ReduceOp for Min {
    const CODE: u32 = op_code::MIN;
    #[inline(always)]
    fn apply(acc: f32, x: f32) -> f32 {
        acc.min(x)
    }
}

/// Reduces one vector over the ranks in rank order `0..world`: `own` is this rank's value, `peer(p)`
/// loads rank `p`'s. Accumulates in `f32` and rounds once.
#[inline(always)]
pub fn reduce_ranks<T: Element, O: ReduceOp>(
    world: usize,
    rank: usize,
    own: V16,
    mut peer: impl FnMut(usize) -> V16,
) -> V16 {
    let mut acc = [0.0f32; 8];
    for p in 0..world {
        let v = if p == rank { own } else { peer(p) };
        if p == 0 {
            acc = T::unpack(v);
        } else {
            O::apply_lanes(&mut acc, &T::unpack(v));
        }
    }
    T::pack(acc)
}

/// Reduces vectors `lo..hi` of a block's share, thread `t` of `threads` taking every `threads`-th from
/// `lo + t`, two per step so the loads of both are in flight together: `own(k)` loads this rank's vector
/// `k`, `peer(p, k)` rank `p`'s, and `store(k, v)` takes the result. A thread stores only the vectors it
/// loaded, so results may overwrite their inputs in place.
///
/// A step issues both vectors' loads of a rank before it combines them (this rank's two, then each
/// peer's two): written as two [`reduce_ranks`] one after the other, the second vector's loads were
/// issued only once the first vector's sums had waited for its loads (the compiler does not move loads
/// across the partial-vector branches of each load and the loop over ranks), one load of a rank in
/// flight per thread instead of two. The sums are those of [`reduce_ranks`], in the same rank order. The
/// step is written out rather than as a `reduce_ranks` over an array of vectors: that form kept its
/// accumulators in local memory, and the two-shot all-reduce ran at half the speed (measured on one H200).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn reduce_strided<T: Element, O: ReduceOp>(
    (world, rank): (usize, usize),
    (lo, hi): (usize, usize),
    (t, threads): (usize, usize),
    own: impl Fn(usize) -> V16,
    peer: impl Fn(usize, usize) -> V16,
    mut store: impl FnMut(usize, V16),
) {
    let mut k = lo + t;
    while k + threads < hi {
        let (ka, kb) = (k, k + threads);
        let (oa, ob) = (own(ka), own(kb));
        // Rank order, as `reduce_ranks`: the same sums, two vectors at a time.
        let mut acc = [[0.0f32; 8]; 2];
        for p in 0..world {
            let (va, vb) = if p == rank { (oa, ob) } else { (peer(p, ka), peer(p, kb)) };
            if p == 0 {
                acc = [T::unpack(va), T::unpack(vb)];
            } else {
                O::apply_lanes(&mut acc[0], &T::unpack(va));
                O::apply_lanes(&mut acc[1], &T::unpack(vb));
            }
        }
        store(ka, T::pack(acc[0]));
        store(kb, T::pack(acc[1]));
        k += 2 * threads;
    }
    if k < hi {
        store(k, reduce_ranks::<T, O>(world, rank, own(k), |p| peer(p, k)));
    }
}

/// Calls `$body` with the operator type `$op` named by the runtime code `$code` (an unknown code is a bug
/// of the host: it traps).
#[macro_export]
#[doc(hidden)]
macro_rules! with_op {
    ($code:expr, $op:ident => $body:expr) => {
        match $code {
            $crate::layout::op_code::SUM => {
                type $op = $crate::element::Sum;
                $body
            }
            $crate::layout::op_code::MAX => {
                type $op = $crate::element::Max;
                $body
            }
            $crate::layout::op_code::MIN => {
                type $op = $crate::element::Min;
                $body
            }
            _ => panic!("unknown reduction op code"),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip() {
        let v: V16 = [0x3f80_4000, 0xc000_3f00, 0x0000_0001, 0x7f7f_8000];
        assert_eq!(bf16::pack(bf16::unpack(v)), v);
        let h: V16 = [0x3c00_4000, 0xc000_3800, 0x0000_0001, 0x7bff_8000];
        assert_eq!(f16::pack(f16::unpack(h)), h);
        let f: V16 = [1.0f32.to_bits(), (-2.5f32).to_bits(), 0, 7];
        assert_eq!(f32::pack(f32::unpack(f)), f);
    }

    #[test]
    fn ops_combine_lanes() {
        let mut a = [1.0, -2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        Max::apply_lanes(&mut a, &[0.5, -1.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(a[..3], [1.0, -1.0, 4.0]);
        Sum::apply_lanes(&mut a, &[1.0; 8]);
        assert_eq!(a[..3], [2.0, 0.0, 5.0]);
        Min::apply_lanes(&mut a, &[0.0; 8]);
        assert_eq!(a[..3], [0.0, 0.0, 0.0]);
    }
}
