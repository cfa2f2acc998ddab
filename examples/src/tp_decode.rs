//! The tensor-parallel decode step (the row-parallel linear layer, the all-reduce, the residual add and an
//! RMSNorm), checked against the CPU reference and timed from CUDA-graph replays: the GEMV alone, with the
//! HBM bandwidth it reaches (each weight is read once, so the figure is the weight bytes of every rank on a
//! GPU over the time), and the whole step by each variant.

use ferrocomm::SymBuffer;
use ferrocomm_device::bf16;
use ferrocomm_kernels::verify::{self, pattern};
use ferrocomm_kernels::{Communicator, Op, TP_RMS_EPS, TpDecode, TpInputs, TpShape, TpVariant, reference};

use crate::ExampleError;
use crate::all_reduce::GraphRuns;
use crate::nccl::NcclAllReduce;
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
    /// The GPU's peak memory bandwidth (GB/s, from its memory clock and bus width), on GPUs.
    pub hbm_peak_gbps: Option<f64>,
}

impl GemvResult {
    /// HBM bandwidth of one GPU at the median: every rank on it reads its weights once.
    pub fn hbm_gbps(&self) -> f64 {
        self.timing.rate(self.weight_bytes * self.ranks_per_gpu) / 1e9
    }

    /// The measured bandwidth as a share of the GPU's peak, in percent.
    pub fn hbm_percent(&self) -> Option<f64> {
        self.hbm_peak_gbps.filter(|_| self.on_gpus).map(|peak| 100.0 * self.hbm_gbps() / peak)
    }

    /// One line: `tokens 1  hidden 8192  k 8192: 35.07 us  HBM 3827 GB/s = 78% of 4916  verified`.
    pub fn line(&self) -> String {
        let hbm = if self.on_gpus {
            let share = match (self.hbm_percent(), self.hbm_peak_gbps) {
                (Some(pct), Some(peak)) => format!(" = {pct:.0}% of {peak:.0}"),
                _ => String::new(),
            };
            format!("HBM {:>6.0} GB/s{share} ({} rank(s) per GPU)", self.hbm_gbps(), self.ranks_per_gpu)
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
    let hbm_peak_gbps = team.ranks().find_map(|rank| match rank.device() {
        ferrocomm::Device::Cuda { ordinal } => {
            ferrocomm::system::gpu(ordinal).ok().map(|gpu| gpu.memory_peak_bytes_per_s as f64 / 1e9)
        }
        ferrocomm::Device::Emulated { .. } => None,
    });
    Ok(GemvResult { shape, ranks_per_gpu, weight_bytes: w.len() * size_of::<bf16>(), timing, on_gpus, hbm_peak_gbps })
}

/// How a timed step runs: one of the library's variants, or variant 1 of the layer as a stack without
/// GPU-initiated communication runs it — the GEMV, the sum of its splits, NCCL's all-reduce and the norm,
/// captured into one graph per rank ([`TpDecode::step_with_all_reduce`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepVariant {
    /// The layer's kernels with NCCL's all-reduce between them (CPU-orchestrated).
    Nccl,
    /// One of the library's variants.
    Library(TpVariant),
}

impl std::fmt::Display for StepVariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepVariant::Nccl => f.write_str("Nccl"),
            StepVariant::Library(v) => write!(f, "{v:?}"),
        }
    }
}

impl StepVariant {
    /// Every variant, in the order the example times them.
    pub const ALL: [StepVariant; 4] = [
        StepVariant::Nccl,
        StepVariant::Library(TpVariant::ThreeKernels),
        StepVariant::Library(TpVariant::TwoKernels),
        StepVariant::Library(TpVariant::Fused),
    ];
}

impl std::str::FromStr for StepVariant {
    type Err = String;

    /// A variant by its name, in any case and with or without dashes: `nccl`, `three-kernels`,
    /// `two-kernels`, `fused` (or `TwoKernels`, as the example prints them).
    fn from_str(name: &str) -> Result<StepVariant, String> {
        let key = |s: &str| s.to_ascii_lowercase().replace(['-', '_'], "");
        StepVariant::ALL
            .into_iter()
            .find(|v| key(&v.to_string()) == key(name))
            .ok_or_else(|| format!("unknown variant `{name}`; use nccl, three-kernels, two-kernels or fused"))
    }
}

/// One decode step of one shape by one variant: verified, and how long a step took.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    /// The shape.
    pub shape: TpShape,
    /// How the step ran.
    pub variant: StepVariant,
    /// Time per step from graph replays.
    pub timing: Timing,
}

impl StepResult {
    /// One line: `tokens 1  hidden 8192  k 8192  Fused: 21.30 us per step   verified`.
    pub fn line(&self) -> String {
        let s = self.shape;
        let variant = self.variant.to_string();
        format!(
            "tokens {:>2}  hidden {:>5}  k {:>5}  {variant:<12}: {:>10.2} us per step   verified",
            s.tokens,
            s.hidden,
            s.k,
            self.timing.median_us()
        )
    }
}

/// Runs one step by `variant` (`nccl` must be open for [`StepVariant::Nccl`]).
fn run_step(
    comm: &mut Communicator<'_>,
    decode: &mut TpDecode,
    variant: StepVariant,
    nccl: Option<&NcclAllReduce>,
    inputs: TpInputs<'_>,
    out: &mut SymBuffer<bf16>,
) -> Result<(), ExampleError> {
    match (variant, nccl) {
        (StepVariant::Library(v), _) => {
            let TpInputs { x, w, residual, gamma } = inputs;
            Ok(decode.step(comm, v, x, w, residual, gamma, out)?)
        }
        (StepVariant::Nccl, Some(nccl)) => decode.step_with_all_reduce(comm, inputs, out, |_, y| nccl.sum_in_place(y)),
        (StepVariant::Nccl, None) => Err(ExampleError::BadArgument("the NCCL variant needs NCCL opened".into())),
    }
}

/// Verifies a decode step of `shape` by `variant` (`verify::tp_decode_by`), then times a graph of
/// `runs.ops_per_graph` steps on the same buffers, and verifies what the timed replays left: the output is
/// poisoned before them, so replays that waited on a stale epoch or wrote nothing fail the check.
pub fn step(
    comm: &mut Communicator<'_>,
    shape: TpShape,
    variant: StepVariant,
    nccl: Option<&NcclAllReduce>,
    runs: GraphRuns,
    seed: u64,
) -> Result<StepResult, ExampleError> {
    verify::tp_decode_by(comm, shape, &variant.to_string(), seed, |comm, decode, inputs, out| {
        run_step(comm, decode, variant, nccl, inputs, out)
    })?;
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
    // Residual and norm weights are the same on every rank (a replicated activation and parameter).
    let replicated = |len: usize, s: u64| -> Result<SymBuffer<bf16>, ExampleError> {
        let mut b = SymBuffer::<bf16>::new(team, len)?;
        for rank in team.local_ranks() {
            b.copy_from_host(rank, &pattern::<bf16>(s, 0, len))?;
        }
        Ok(b)
    };
    let (x, w) = (buf(shape.tokens * k_local, seed)?, buf(k_local * shape.hidden, seed + 1)?);
    let residual = replicated(shape.tokens * shape.hidden, seed + 2)?;
    let gamma = replicated(shape.hidden, seed + 3)?;
    let mut out = SymBuffer::<bf16>::new(team, shape.tokens * shape.hidden)?;
    let ops = runs.ops_per_graph.max(1);
    // The capture takes the library's errors only; another library's failure ends it and is returned here.
    let mut failure = None;
    let graph = comm.capture(|comm| {
        for _ in 0..ops {
            let inputs = TpInputs { x: &x, w: &w, residual: &residual, gamma: &gamma };
            match run_step(comm, &mut decode, variant, nccl, inputs, &mut out) {
                Ok(()) => {}
                Err(ExampleError::Comm(e)) => return Err(e),
                Err(other) => {
                    failure = Some(other);
                    return Err(ferrocomm::Error::Capturing { what: "a step that failed during capture" }.into());
                }
            }
        }
        Ok(())
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let graph = graph?;
    out.fill(bf16::from_f32(f32::NAN))?;
    let timing = time_replays(&graph, ops, runs.warmup, runs.replays)?;
    drop(graph);
    let world = team.world();
    let inputs = |s: u64, len: usize| (0..world).map(|r| pattern::<bf16>(s, r, len)).collect::<Vec<_>>();
    let expected = reference::tp_decode(
        &inputs(seed, shape.tokens * k_local),
        &inputs(seed + 1, k_local * shape.hidden),
        &pattern::<bf16>(seed + 2, 0, shape.tokens * shape.hidden),
        &pattern::<bf16>(seed + 3, 0, shape.hidden),
        (shape.tokens, shape.hidden, TP_RMS_EPS),
    );
    for rank in out.local_ranks() {
        let found = out.to_host(rank)?;
        let close = |e: &bf16, f: &bf16| (e.to_f32() - f.to_f32()).abs() <= e.to_f32().abs() / 64.0 + 1e-3;
        if let Some(index) = expected.iter().zip(&found).position(|(e, f)| !close(e, f)) {
            return Err(ExampleError::Mismatch {
                what: format!("tensor-parallel decode {shape:?} {variant} after the timed replays"),
                rank,
                index,
                expected: format!("{:?}", expected[index]),
                found: format!("{:?}", found[index]),
            });
        }
    }
    Ok(StepResult { shape, variant, timing })
}

/// The library's all-reduce alone of a step's output (`tokens x hidden` `bf16`), verified: the
/// communication's own time, for scale beside the steps.
pub fn all_reduce_alone(
    comm: &mut Communicator<'_>,
    shape: TpShape,
    runs: GraphRuns,
    seed: u64,
) -> Result<Timing, ExampleError> {
    let r = crate::all_reduce::all_reduce::<bf16>(comm, shape.tokens * shape.hidden, Op::Sum, None, runs, seed)?;
    Ok(r.timing)
}

/// Everything measured for one shape: the GEMV alone, the all-reduce alone, and each variant's step.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeReport {
    /// The GEMV alone.
    pub gemv: GemvResult,
    /// The all-reduce of the step's output alone.
    pub all_reduce: Timing,
    /// Each variant's step.
    pub steps: Vec<StepResult>,
}

impl ShapeReport {
    /// The median step time of `variant`, µs, if it was measured.
    pub fn step_us(&self, variant: StepVariant) -> Option<f64> {
        self.steps.iter().find(|s| s.variant == variant).map(|s| s.timing.median_us())
    }
}

const NCCL: StepVariant = StepVariant::Nccl;
const THREE: StepVariant = StepVariant::Library(TpVariant::ThreeKernels);
const TWO: StepVariant = StepVariant::Library(TpVariant::TwoKernels);
const FUSED: StepVariant = StepVariant::Library(TpVariant::Fused);

/// The report's README: the example's `arguments` and what ran where, one row per shape, and how the
/// figures were taken; `nccl_missing` says why the NCCL variant was not measured, where it was not.
pub fn report_markdown(
    arguments: &str,
    platform: &str,
    (world, ranks_per_gpu): (usize, usize),
    nccl_missing: Option<&str>,
    shapes: &[ShapeReport],
) -> String {
    let mut out = String::from("# Tensor-parallel decode step\n\n");
    out += &format!(
        "Measured with `cargo run --release --example tp_decode -- {arguments}` on:\n\n```text\n{platform}```\n\n"
    );
    if ranks_per_gpu > 1 {
        out += &format!(
            "> **One GPU: {ranks_per_gpu} ranks share it.** Their all-reduce never crosses NVLink and their kernels \
             share the SMs and the HBM, so these figures compare the variants' structure (kernels, launches, \
             synchronisation), not a two-GPU step.\n\n"
        );
    }
    if world == 1 {
        out += "> **One rank: nothing is communicated.** Every variant's all-reduce sums a single rank (NCCL's, in \
                place, has nothing to do), so these figures show what each structure costs around the GEMV, not \
                what communication costs or how well it hides.\n\n";
    }
    if let Some(why) = nccl_missing {
        out += &format!(
            "> **Variant 1 (NCCL) not measured:** {why}. `ThreeKernels` is the same structure with the library's \
             all-reduce.\n\n"
        );
    }
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".to_owned(),
    };
    out += "| tokens | H = K | GEMV alone µs | GEMV HBM GB/s | of HBM peak | all-reduce alone µs | NCCL (variant 1) µs \
            | ThreeKernels µs | TwoKernels µs | Fused µs | Fused vs NCCL | Fused vs TwoKernels | Fused vs ThreeKernels |\n";
    out += "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for s in shapes {
        let us = |v| s.step_us(v).map_or("–".to_owned(), |u| format!("{u:.2}"));
        let fused = s.step_us(FUSED);
        let hbm = if s.gemv.on_gpus { format!("{:.0}", s.gemv.hbm_gbps()) } else { "–".to_owned() };
        let share = s.gemv.hbm_percent().map_or("–".to_owned(), |p| format!("{p:.0}%"));
        out += &format!(
            "| {} | {} | {:.2} | {hbm} | {share} | {:.2} | {} | {} | {} | {} | {} | {} | {} |\n",
            s.gemv.shape.tokens,
            s.gemv.shape.hidden,
            s.gemv.timing.median_us(),
            s.all_reduce.median_us(),
            us(NCCL),
            us(THREE),
            us(TWO),
            us(FUSED),
            ratio(s.step_us(NCCL), fused),
            ratio(s.step_us(TWO), fused),
            ratio(s.step_us(THREE), fused),
        );
    }
    out += "\n- The step: `out = rmsnorm(all-reduce(x[tokens, K/world] · W[K/world, H]) + residual) · gamma`, bf16 \
            with f32 accumulation, every variant checked against the CPU reference before it is timed.\n\
            - NCCL (variant 1): the GEMV, the sum of its splits, NCCL's all-reduce (f32, in place, on the rank's \
            stream), a norm kernel, captured into one graph per rank: the CPU-orchestrated layer. ThreeKernels: the \
            same kernels with the library's all-reduce. TwoKernels: the GEMV, then the all-reduce fused with the \
            residual and the norm. Fused: one kernel, each block pushing its finished tile to the tile's owner, the \
            reduction and the norm finishing as tiles arrive; the tiles travel as LL packets in steps of up to \
            `Tuning::tp_ll_max_tokens` tokens (4 on GPUs), with a put and a signal per tile in larger ones.\n\
            - Times: the median over graph replays of (replay time / steps per replay), host-timed from launch to \
            completion, the launch cost spread over the graph's steps. *Fused vs X*: X's time over Fused's (above 1, \
            Fused is faster).\n\
            - GEMV HBM GB/s: the weight bytes of every rank on the GPU over the GEMV's time (each weight is read once); \
            *of HBM peak*: that over the GPU's peak, twice its memory clock times its bus width as the driver reports \
            them.\n";
    out
}

/// The report's data, one CSV line per shape (times in µs; empty where not measured, and the HBM figure
/// off the GPU).
pub fn report_csv(shapes: &[ShapeReport]) -> String {
    let mut out = String::from(
        "tokens,hidden,k,gemv_us,gemv_hbm_gbps,hbm_peak_gbps,all_reduce_us,nccl_us,three_kernels_us,two_kernels_us,\
         fused_us\n",
    );
    for s in shapes {
        let us = |v| s.step_us(v).map_or(String::new(), |u| format!("{u:.3}"));
        let shape = s.gemv.shape;
        let hbm = if s.gemv.on_gpus { format!("{:.1}", s.gemv.hbm_gbps()) } else { String::new() };
        let peak = s.gemv.hbm_peak_gbps.map_or(String::new(), |p| format!("{p:.1}"));
        out += &format!(
            "{},{},{},{:.3},{hbm},{peak},{:.3},{},{},{},{}\n",
            shape.tokens,
            shape.hidden,
            shape.k,
            s.gemv.timing.median_us(),
            s.all_reduce.median_us(),
            us(NCCL),
            us(THREE),
            us(TWO),
            us(FUSED)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_parse_by_name_in_any_case_and_with_dashes() {
        for (name, variant) in
            [("nccl", NCCL), ("three-kernels", THREE), ("TwoKernels", TWO), ("two_kernels", TWO), ("FUSED", FUSED)]
        {
            assert_eq!(name.parse::<StepVariant>(), Ok(variant), "{name}");
        }
        for v in StepVariant::ALL {
            assert_eq!(v.to_string().parse::<StepVariant>(), Ok(v));
        }
        let err = "four-kernels".parse::<StepVariant>().unwrap_err();
        assert!(err.contains("four-kernels") && err.contains("two-kernels"), "{err}");
    }
}
