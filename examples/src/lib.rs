//! The code behind ferrocomm's examples, shared by the programs next to this crate's manifest and by the
//! tests that run them on the CPU emulator (`tests/tests/examples.rs`).
//!
//! ```sh
//! cargo run --release --example quickstart      # all-reduce + ping-pong on every GPU, or the emulator
//! cargo run --release --example pingpong -- --bytes 8,64,256
//! cargo run --release --example allreduce -- --dtype bf16 --sizes 8K,64K,1M
//! cargo run --release --example moe_alltoall -- --tokens 1,8,128
//! cargo run --release --example tp_decode -- --tokens 1,4,16
//! cargo run --release --example trace_overhead  # what trace mode costs (ping-pong, 1 MiB all-reduce)
//! cargo run --release --example custom_kernel   # a kernels crate of one's own (examples/custom_kernel)
//! cargo run --release -p ferrocomm-cli -- launch -n 4 --emulator -- target/release/examples/multiprocess
//! ```
//!
//! | module | what |
//! | --- | --- |
//! | [`team`] | [`open_team`]: every GPU (two ranks on a single GPU) or the emulator; [`Platform`] says which |
//! | [`quickstart`] | [`run_quickstart`]: the README's main job, verified, with its [`Report`] |
//! | [`all_reduce`] | one all-reduce size: checked against the CPU reference, timed from graph replays |
//! | [`ping_pong`] | one ping-pong: device-timed, both inboxes checked |
//! | [`moe`] | MoE dispatch and combine: all-to-all with per-destination counts, tokens x 7168 bf16 |
//! | [`custom`] | the `custom-kernel` crate's kernels through their typed launchers |
//! | [`multiprocess`] | every collective in a team of one process per rank, checked by each process |
//! | [`nccl`] | NCCL's all-reduce on a team's streams (one process per GPU), for the decode step's variant 1 |
//! | [`tp_decode`] | the tensor-parallel decode step's GEMV: verified, timed, its HBM bandwidth |
//! | [`trace_overhead`] | what trace mode costs: ping-pong and 1 MiB all-reduce, untraced vs traced |
//! | [`timing`] | per-operation times from graph replays; sizes in bytes |
//! | [`error`] | [`ExampleError`] and the comparison with the reference |

pub mod all_reduce;
pub mod custom;
pub mod error;
pub mod moe;
pub mod multiprocess;
pub mod nccl;
pub mod ping_pong;
pub mod quickstart;
pub mod team;
pub mod timing;
pub mod tp_decode;
pub mod trace_overhead;

pub use error::ExampleError;
pub use quickstart::{Report, run_quickstart};
pub use team::{Platform, open_team};
