//! CPU references for the checks every mode passes before it is timed: known inputs per rank, the
//! output each rank must end with, and the first difference when it does not.

use crate::model::Dtype;

/// Rank `rank`'s input of `bytes` bytes (whole elements): element `i` holds `rank + 1 + i % 7`, small
/// integers every type (bf16 included) represents exactly, also once summed over up to 16 ranks.
pub fn pattern(rank: usize, bytes: usize, dtype: Dtype) -> Vec<u8> {
    let elems = bytes / dtype.size();
    (0..elems).flat_map(|i| dtype.encode((rank + 1 + i % 7) as f32)).collect()
}

/// The element-wise sum of the inputs (every rank's all-reduce output).
pub fn all_reduce(inputs: &[Vec<u8>], dtype: Dtype) -> Vec<u8> {
    let size = dtype.size();
    let len = inputs.first().map_or(0, Vec::len);
    (0..len / size)
        .flat_map(|i| {
            let sum: f32 = inputs.iter().map(|input| dtype.decode(&input[i * size..(i + 1) * size])).sum();
            dtype.encode(sum)
        })
        .collect()
}

/// The inputs one after the other (every rank's all-gather output).
pub fn all_gather(inputs: &[Vec<u8>]) -> Vec<u8> {
    inputs.concat()
}

/// Rank `rank`'s all-to-all output: chunk `p` is chunk `rank` of rank `p`'s input.
pub fn all_to_all(inputs: &[Vec<u8>], rank: usize) -> Vec<u8> {
    let world = inputs.len();
    inputs
        .iter()
        .flat_map(|input| {
            let chunk = input.len() / world;
            input[rank * chunk..(rank + 1) * chunk].to_vec()
        })
        .collect()
}

/// `None` when `got` equals `want`, else where and how they first differ.
pub fn first_difference(what: &str, got: &[u8], want: &[u8], dtype: Dtype) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{what}: {} bytes, expected {}", got.len(), want.len()));
    }
    let size = dtype.size();
    let (i, (g, w)) = got.chunks(size).zip(want.chunks(size)).enumerate().find(|(_, (g, w))| g != w)?;
    Some(format!("{what}: element {i} is {}, expected {}", dtype.decode(g), dtype.decode(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let inputs: Vec<Vec<u8>> = (0..3).map(|r| pattern(r, 12, Dtype::Bf16)).collect();
        assert_eq!(inputs[1].len(), 12);
        assert_eq!(Dtype::Bf16.decode(&inputs[1][2..4]), 3.0);
        let sum = all_reduce(&inputs, Dtype::Bf16);
        // element 1: (1+1) + (2+1) + (3+1) = 9
        assert_eq!(Dtype::Bf16.decode(&sum[2..4]), 9.0);
        assert_eq!(all_gather(&inputs).len(), 36);
        let out = all_to_all(&inputs, 2);
        assert_eq!(out[0..4], inputs[0][8..12]);
        assert_eq!(out[8..12], inputs[2][8..12]);
        let sum16: Vec<Vec<u8>> = (0..16).map(|r| pattern(r, 14, Dtype::Bf16)).collect();
        let total = all_reduce(&sum16, Dtype::Bf16);
        assert_eq!(Dtype::Bf16.decode(&total[12..14]), (1..=16).sum::<u32>() as f32 + 16.0 * 6.0);
    }

    #[test]
    fn differences() {
        let want = pattern(0, 8, Dtype::F32);
        assert_eq!(first_difference("recv", &want, &want, Dtype::F32), None);
        let mut got = want.clone();
        got[4..8].copy_from_slice(&7.0f32.to_le_bytes());
        assert_eq!(first_difference("recv", &got, &want, Dtype::F32).unwrap(), "recv: element 1 is 7, expected 2");
        assert!(first_difference("recv", &got[..4], &want, Dtype::F32).unwrap().contains("4 bytes, expected 8"));
    }
}
