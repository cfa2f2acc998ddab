//! Runnable examples: see `examples/*.rs`.
