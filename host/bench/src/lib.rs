//! `ferrocomm bench`: when is GPU-initiated communication worth it? The same operations (ping-pong, put,
//! all-reduce, all-gather, all-to-all) in each mode — `gpu` (ferrocomm kernels), `proxy` (kernels post
//! descriptors, a host thread issues copies), `cpu` (the host issues `cuMemcpyPeerAsync`), `nccl`
//! (graph-replayed) and `nccl-eager` — swept over sizes, with medians of back-to-back and of isolated
//! operations, bandwidths, host CPU time, plots, a crossover summary and a recommended tuning. With one GPU
//! it runs two ranks on it, and says every figure is intra-GPU.
//!
//! | module | job |
//! | --- | --- |
//! | [`model`] | the data: operations, modes, measurements, a run |
//! | [`sizes`] | size parsing (`8B..1GiB`, `64KiB`) and printing |
//! | [`stats`] | median / min / max, operations per trial |
//! | [`bandwidth`] | algorithm and bus bandwidth (NCCL's convention) |
//! | [`cputime`] | host CPU time per operation (every thread's own CPU clock, summed) |
//! | [`reference`](mod@reference) | CPU references the modes are checked against |
//! | [`backend`] | the trait every mode implements, and its errors |
//! | [`method`] | warm-up, trials, sweeps, progress bar |
//! | [`gpu`] | the built-in `cpu` and `nccl` modes (cudarc, loaded at run time) |
//! | [`ferro`] | the `gpu` and `proxy` modes on ferrocomm's runtime and kernels (under a launcher, the gpu mode's `gpu-procs` series: one process per GPU), and the opener of every mode |
//! | [`anchors`] | figures from the anchor scripts' output (torch symm_mem, NCCL, CUDA C++) |
//! | [`crossover`] | which mode wins at which size |
//! | [`recommend`] | the recommended mode and algorithm per size range, and the tuning file a `Communicator` loads |
//! | [`report`] | terminal table, JSON, CSV, SVG plots, the report folder |
//! | [`utilization`] | SM activity and NVLink bytes over a window, from NVML (loaded at run time) |
//! | [`cli`] | `ferrocomm bench`'s arguments and driver (SPMD under a launcher: rank 0 reports; `--merge` joins runs) |
//!
//! ```no_run
//! // What `ferrocomm bench --quick --modes cpu,nccl --out bench` does:
//! ferrocomm_bench::cli::run(["bench", "--quick", "--modes", "cpu,nccl", "--out", "bench"]).unwrap();
//! ```

pub mod anchors;
pub mod backend;
pub mod bandwidth;
pub mod cli;
pub mod cputime;
pub mod crossover;
pub mod ferro;
pub mod gpu;
pub mod method;
pub mod model;
pub mod recommend;
pub mod reference;
pub mod report;
pub mod sizes;
pub mod stats;
pub mod utilization;

pub use backend::{Backend, BackendError, BackendOpener, OpenConfig, Request, Timing};
pub use model::{BenchData, Dtype, Measurement, Meta, Mode, Operation, Series, Skipped};
