//! The tensor-parallel decode step (the row-parallel linear layer, the all-reduce, the residual add and an
//! RMSNorm), checked against the CPU reference and timed from CUDA-graph replays: the GEMV alone, with the
//! HBM bandwidth it reaches (each weight is read once, so the figure is the weight bytes of every rank on a
//! GPU over the time), and the whole step by each variant.

use ferrocomm::SymBuffer;
use ferrocomm_device::bf16;
use ferrocomm_kernels::verify::{self, pattern};
use ferrocomm_kernels::{Communicator, TpDecode, TpShape, TpVariant};

use crate::ExampleError;
use crate::all_reduce::GraphRuns;
use crate::timing::{Timing, time_replays};

/// The GEMV of one shape: verified, and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct GemvResult {
    /// The shape.
    pub shape: TpShape,
    /// Ranks per GPU (their GEMVs run at once and share the GPU's HBM).
    pub ranks_per_gpu: usize,
    /// Bytes of weights each rank reads.
    pub weight_bytes: usize,
    /// Time per GEMV from graph replays.
    pub timing: Timing,
    /// Whether it ran on GPUs (an emulated time says nothing about HBM).
    pub on_gpus: bool,
}

impl GemvResult {
    /// HBM bandwidth of one GPU at the median: every rank on it reads its weights once.
    pub fn hbm_gbps(&self) -> f64 {
        self.timing.rate(self.weight_bytes * self.ranks_per_gpu) / 1e9
    }

    /// One line: `tokens 1  hidden 8192  k 8192: 17.10 us  HBM 3920 GB/s  verified`.
    pub fn line(&self) -> String {
        let hbm = if self.on_gpus {
            format!("HBM {:>6.0} GB/s ({} rank(s) per GPU)", self.hbm_gbps(), self.ranks_per_gpu)
        } else {
            "(emulated: no HBM figure)".to_owned()
        };
        let s = self.shape;
        let us = self.timing.median_us();
        format!("tokens {:>2}  hidden {:>5}  k {:>5}: {us:>10.2} us   {hbm}   verified", s.tokens, s.hidden, s.k)
    }
}

/// Verifies the GEMV of `shape` (`verify::tp_gemv`), then times a graph of `runs.ops_per_graph` of them.
pub fn gemv(
    comm: &mut Communicator<'_>,
    shape: TpShape,
    runs: GraphRuns,
    seed: u64,
) -> Result<GemvResult, ExampleError> {
    verify::tp_gemv(comm, shape, seed)?;
    let team = comm.team();
    let plan = comm.tp_plan(shape)?;
    let k_local = plan.k_local as usize;
    let mut x = SymBuffer::<bf16>::new(team, shape.tokens * k_local)?;
    let mut w = SymBuffer::<bf16>::new(team, k_local * shape.hidden)?;
    let mut partials = SymBuffer::<f32>::new(team, plan.partials_len())?;
    for rank in team.local_ranks() {
        x.copy_from_host(rank, &pattern::<bf16>(seed, rank, x.len()))?;
        w.copy_from_host(rank, &pattern::<bf16>(seed + 1, rank, w.len()))?;
    }
    let ops = runs.ops_per_graph.max(1);
    let graph = comm.capture(|comm| {
        for _ in 0..ops {
            comm.tp_gemv(&x, &w, &mut partials, plan)?.wait()?;
        }
        Ok(())
    })?;
    let timing = time_replays(&graph, ops, runs.warmup, runs.replays)?;
    let ranks_per_gpu = crate::team::ranks_per_gpu(team);
    let on_gpus = team.backend() == ferrocomm::Backend::Cuda;
    Ok(GemvResult { shape, ranks_per_gpu, weight_bytes: w.len() * size_of::<bf16>(), timing, on_gpus })
}

/// One decode step of one shape by one variant: verified, and how long a step took.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    /// The shape.
    pub shape: TpShape,
    /// How the step ran.
    pub variant: TpVariant,
    /// Time per step from graph replays.
    pub timing: Timing,
}

impl StepResult {
    /// One line: `tokens 1  hidden 8192  k 8192  Fused: 21.30 us per step   verified`.
    pub fn line(&self) -> String {
        let s = self.shape;
        let variant = format!("{:?}", self.variant);
        format!(
            "tokens {:>2}  hidden {:>5}  k {:>5}  {variant:<10}: {:>10.2} us per step   verified",
            s.tokens,
            s.hidden,
            s.k,
            self.timing.median_us()
        )
    }
}

/// Verifies a decode step of `shape` by `variant` (`verify::tp_decode`), then times a graph of
/// `runs.ops_per_graph` steps on the same buffers.
pub fn step(
    comm: &mut Communicator<'_>,
    shape: TpShape,
    variant: TpVariant,
    runs: GraphRuns,
    seed: u64,
) -> Result<StepResult, ExampleError> {
    verify::tp_decode(comm, shape, variant, seed)?;
    let team = comm.team();
    let k_local = shape.k_local(team.world());
    let mut decode = TpDecode::new(comm, shape)?;
    let buf = |len: usize, s: u64| -> Result<SymBuffer<bf16>, ExampleError> {
        let mut b = SymBuffer::<bf16>::new(team, len)?;
        for rank in team.local_ranks() {
            b.copy_from_host(rank, &pattern::<bf16>(s, rank, len))?;
        }
        Ok(b)
    };
    let (x, w) = (buf(shape.tokens * k_local, seed)?, buf(k_local * shape.hidden, seed + 1)?);
    let (residual, gamma) = (buf(shape.tokens * shape.hidden, seed + 2)?, buf(shape.hidden, seed + 3)?);
    let mut out = SymBuffer::<bf16>::new(team, shape.tokens * shape.hidden)?;
    let ops = runs.ops_per_graph.max(1);
    let graph = comm.capture(|comm| {
        for _ in 0..ops {
            decode.step(comm, variant, &x, &w, &residual, &gamma, &mut out)?;
        }
        Ok(())
    })?;
    let timing = time_replays(&graph, ops, runs.warmup, runs.replays)?;
    Ok(StepResult { shape, variant, timing })
}
