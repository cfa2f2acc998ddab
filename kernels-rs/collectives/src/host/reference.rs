//! Plain CPU references of every collective: what each rank must hold afterwards, computed the way the
//! kernels define it (reductions accumulate in `f32` in rank order and round once). The emulator and GPU
//! tests and the benchmark's verification compare against these.
//!
//! `inputs[r]` is always rank `r`'s buffer before the call.

use super::Op;
use crate::element::Element;
use ferrocomm_device::bf16;

/// The all-reduce result every rank holds: element-wise `op` over the ranks' inputs (all of one length).
///
/// # Panics
///
/// If `inputs` is empty or the lengths differ.
pub fn all_reduce<T: Element>(inputs: &[Vec<T>], op: Op) -> Vec<T> {
    let len = inputs.first().map_or(0, Vec::len);
    assert!(!inputs.is_empty() && inputs.iter().all(|v| v.len() == len), "one input of equal length per rank");
    (0..len)
        .map(|i| {
            let acc = inputs[1..].iter().fold(inputs[0][i].to_f32(), |acc, v| op.apply(acc, v[i].to_f32()));
            T::from_f32(acc)
        })
        .collect()
}

/// The reduce-scatter result of every rank: rank `r` holds chunk `r` (of `len / world` elements) of the
/// all-reduce.
///
/// # Panics
///
/// As [`all_reduce`], and if the length is not a multiple of the number of ranks.
pub fn reduce_scatter<T: Element>(inputs: &[Vec<T>], op: Op) -> Vec<Vec<T>> {
    let world = inputs.len();
    let all = all_reduce(inputs, op);
    assert!(all.len().is_multiple_of(world), "the input length must be a multiple of the number of ranks");
    let chunk = all.len() / world;
    (0..world).map(|r| all[r * chunk..(r + 1) * chunk].to_vec()).collect()
}

/// The all-gather result every rank holds: the inputs concatenated in rank order.
pub fn all_gather<T: Copy>(inputs: &[Vec<T>]) -> Vec<T> {
    inputs.concat()
}

/// The broadcast result every rank holds: the root's buffer.
///
/// # Panics
///
/// If `root` is not a rank.
pub fn broadcast<T: Copy>(inputs: &[Vec<T>], root: usize) -> Vec<T> {
    inputs[root].clone()
}

/// What one rank receives in an all-to-all: from each source rank, its rows (`counts[src]` rows of
/// `row_len` elements), which land in slot `src` of the receive buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct Received<T> {
    /// Rows received from each source rank, in source order.
    pub counts: Vec<u32>,
    /// The rows from each source rank, flattened.
    pub rows: Vec<Vec<T>>,
}

/// The all-to-all result of every rank: rank `r` sends `send_counts[r][q]` rows to rank `q`, taken in
/// destination order from the start of `sends[r]`.
///
/// # Panics
///
/// If a send buffer holds fewer rows than its counts add up to.
pub fn all_to_all<T: Copy>(sends: &[Vec<T>], send_counts: &[Vec<u32>], row_len: usize) -> Vec<Received<T>> {
    let world = sends.len();
    (0..world)
        .map(|dst| {
            let mut received = Received { counts: Vec::with_capacity(world), rows: Vec::with_capacity(world) };
            for (src, counts) in send_counts.iter().enumerate() {
                let first: usize = counts[..dst].iter().map(|&c| c as usize).sum();
                let rows = counts[dst] as usize;
                received.counts.push(counts[dst]);
                received.rows.push(sends[src][first * row_len..(first + rows) * row_len].to_vec());
            }
            received
        })
        .collect()
}

/// One rank's tensor-parallel product in `f32`: `x` (`tokens x k_local`) times `w` (`k_local x hidden`),
/// as `tokens x hidden`, each sum in row order.
pub fn tp_gemv(x: &[bf16], w: &[bf16], tokens: usize, hidden: usize) -> Vec<f32> {
    let k_local = x.len() / tokens.max(1);
    let mut y = vec![0.0f32; tokens * hidden];
    for j in 0..tokens {
        for k in 0..k_local {
            let xj = x[j * k_local + k].to_f32();
            for (h, out) in y[j * hidden..(j + 1) * hidden].iter_mut().enumerate() {
                *out += xj * w[k * hidden + h].to_f32();
            }
        }
    }
    y
}

/// A tensor-parallel decode step on the CPU: `y` = the sum over the ranks of their products
/// ([`tp_gemv`] of `xs[r]`, `ws[r]`), then `out = (y + residual) / sqrt(mean((y + residual)²) + eps) * gamma`
/// per token, in `f32`, rounded to `bf16` once.
pub fn tp_decode(
    xs: &[Vec<bf16>],
    ws: &[Vec<bf16>],
    residual: &[bf16],
    gamma: &[bf16],
    (tokens, hidden, eps): (usize, usize, f32),
) -> Vec<bf16> {
    let mut y = vec![0.0f32; tokens * hidden];
    for (x, w) in xs.iter().zip(ws) {
        for (y, p) in y.iter_mut().zip(tp_gemv(x, w, tokens, hidden)) {
            *y += p;
        }
    }
    let mut out = Vec::with_capacity(tokens * hidden);
    for (j, row) in y.chunks(hidden).enumerate() {
        let z: Vec<f32> = row.iter().enumerate().map(|(h, y)| y + residual[j * hidden + h].to_f32()).collect();
        let inv = 1.0 / (z.iter().map(|z| z * z).sum::<f32>() / hidden as f32 + eps).sqrt();
        out.extend(z.iter().zip(gamma).map(|(z, g)| bf16::from_f32(z * inv * g.to_f32())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocomm_device::bf16;

    #[test]
    fn reductions_accumulate_in_f32_and_round_once() {
        // 1 + 2^-8 + 2^-8 in bf16: pairwise rounding loses both (each sum is a tie, rounded to even 1.0),
        // f32 accumulation keeps 2^-7.
        let x = |v: f32| vec![bf16::from_f32(v)];
        let out = all_reduce(&[x(1.0), x(1.0 / 256.0), x(1.0 / 256.0)], Op::Sum);
        assert_eq!(out[0].to_f32(), 1.0 + 1.0 / 128.0);
        assert_eq!(all_reduce(&[vec![1.0f32, 5.0], vec![3.0, 2.0]], Op::Max), [3.0, 5.0]);
        assert_eq!(all_reduce(&[vec![1.0f32, 5.0], vec![3.0, 2.0]], Op::Min), [1.0, 2.0]);
    }

    #[test]
    fn scatter_gather_and_all_to_all() {
        let inputs = vec![vec![1.0f32, 2.0, 3.0, 4.0], vec![10.0, 20.0, 30.0, 40.0]];
        assert_eq!(reduce_scatter(&inputs, Op::Sum), [vec![11.0, 22.0], vec![33.0, 44.0]]);
        assert_eq!(reduce_scatter::<f32>(&[vec![], vec![]], Op::Sum), [Vec::<f32>::new(), Vec::new()]);
        assert_eq!(all_gather(&[vec![1, 2], vec![3, 4]]), [1, 2, 3, 4]);
        assert_eq!(broadcast(&[vec![1, 2], vec![3, 4]], 1), [3, 4]);
        // Rank 0 sends 1 row to itself and 2 to rank 1; rank 1 sends 0 and 1.
        let sends = vec![vec![1, 1, 2, 2, 3, 3], vec![7, 7, 0, 0]];
        let got = all_to_all(&sends, &[vec![1, 2], vec![0, 1]], 2);
        assert_eq!(got[0], Received { counts: vec![1, 0], rows: vec![vec![1, 1], vec![]] });
        assert_eq!(got[1], Received { counts: vec![2, 1], rows: vec![vec![2, 2, 3, 3], vec![7, 7]] });
    }
}
