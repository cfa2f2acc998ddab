//! Tensor-parallel decode: the row-parallel linear layer's product on each rank,
//! `y_partial[tokens, hidden] = x[tokens, k_local] · w[k_local, hidden]` in `bf16` with `f32` accumulation,
//! as split-K partial sums, then their sum over the ranks, the residual add and an RMSNorm — as three
//! kernels and the library's all-reduce ([`tp_gemv`](fn@tp_gemv), [`tp_split_sum`](fn@tp_split_sum), the
//! all-reduce, [`tp_norm`](fn@tp_norm)), as two ([`tp_gemv`](fn@tp_gemv), then
//! [`tp_reduce_norm`](fn@tp_reduce_norm)), or as one, each block pushing its tile to the tile's owner as soon
//! as it is done ([`tp_fused_ll`](fn@tp_fused_ll) in LL packets for few tokens, [`tp_fused`](fn@tp_fused) with
//! a put and a signal per tile for more).
//!
//! | module | what |
//! | --- | --- |
//! | `gemv` | the product on the tensor cores: [`tp_gemv`](fn@tp_gemv) and the block's share every step computes |
//! | `epilogue` | the sum over ranks and splits, the residual and the RMSNorm: [`tp_reduce_norm`](fn@tp_reduce_norm), [`tp_split_sum`](fn@tp_split_sum), [`tp_norm`](fn@tp_norm) |
//! | `fused` | the one-kernel step: [`tp_fused`](fn@tp_fused) (put and signal) and [`tp_fused_ll`](fn@tp_fused_ll) (LL packets) |

mod epilogue;
mod fused;
mod gemv;

pub use epilogue::*;
pub use fused::*;
pub use gemv::*;
