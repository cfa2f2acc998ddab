//! The data model of a run: which operation, in which mode, at which size, and what came out.
//!
//! Everything here is plain data with serde derives, so a run written as `data.json` reads back into the
//! same values (the report can be regenerated from it without a GPU).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A communication operation the benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
pub enum Operation {
    /// Two GPUs pass a message back and forth; the figure is one way (half a round trip).
    #[serde(rename = "ping-pong")]
    #[value(name = "ping-pong", alias = "pingpong")]
    PingPong,
    /// One GPU writes `bytes` into a peer's memory, transfers back to back; the figure is one transfer.
    #[serde(rename = "put")]
    #[value(name = "put", alias = "put-bandwidth")]
    PutBandwidth,
    /// Every rank ends with the element-wise sum of every rank's `bytes`-sized buffer.
    #[serde(rename = "all-reduce")]
    #[value(name = "all-reduce", alias = "allreduce")]
    AllReduce,
    /// Every rank contributes `bytes / world`; every rank ends with the `bytes`-sized concatenation.
    #[serde(rename = "all-gather")]
    #[value(name = "all-gather", alias = "allgather")]
    AllGather,
    /// Every rank sends `bytes / world` to each rank (itself included); `bytes` is one rank's send buffer.
    #[serde(rename = "all-to-all")]
    #[value(name = "all-to-all", alias = "alltoall")]
    AllToAll,
}

impl Operation {
    /// Every operation, in report order.
    pub const ALL: [Operation; 5] =
        [Operation::PingPong, Operation::PutBandwidth, Operation::AllReduce, Operation::AllGather, Operation::AllToAll];

    /// The short name used on the command line, in file names and in data files.
    pub fn name(self) -> &'static str {
        match self {
            Operation::PingPong => "ping-pong",
            Operation::PutBandwidth => "put",
            Operation::AllReduce => "all-reduce",
            Operation::AllGather => "all-gather",
            Operation::AllToAll => "all-to-all",
        }
    }

    /// A human title for tables and plots, saying what the time means.
    pub fn title(self) -> &'static str {
        match self {
            Operation::PingPong => "Ping-pong (one way)",
            Operation::PutBandwidth => "Put (one direction)",
            Operation::AllReduce => "All-reduce",
            Operation::AllGather => "All-gather",
            Operation::AllToAll => "All-to-all",
        }
    }

    /// Whether every rank of the team takes part (the others involve two GPUs).
    pub fn is_collective(self) -> bool {
        matches!(self, Operation::AllReduce | Operation::AllGather | Operation::AllToAll)
    }

    /// Whether the operation reduces values, so that the element type changes the work done.
    pub fn reduces(self) -> bool {
        self == Operation::AllReduce
    }

    /// The largest size not above `bytes` that the operation can run at with `world` ranks and elements
    /// of `dtype`: whole elements, and for gathers and all-to-all whole elements per rank. 0 when none.
    pub fn round_bytes(self, bytes: u64, world: usize, dtype: Dtype) -> u64 {
        let elem = dtype.size() as u64;
        let unit = match self {
            Operation::AllGather | Operation::AllToAll => elem * world.max(1) as u64,
            _ => elem,
        };
        bytes - bytes % unit
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an operation is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// ferrocomm kernels move the data over NVLink themselves (GPU-initiated).
    Gpu,
    /// Kernels push put descriptors into a pinned ring; a host proxy thread issues copy-engine copies.
    Proxy,
    /// The host issues `cuMemcpyPeerAsync` and waits on streams/events (CPU-initiated).
    Cpu,
    /// NCCL, loaded at run time.
    Nccl,
    /// Kernels that put with signals through NVSHMEM's device API (`ferrocomm-nvshmem-kernels`), NVSHMEM
    /// loaded at run time: one PE per process.
    Nvshmem,
    /// A figure measured elsewhere (e.g. torch symm_mem) and read from a file; never run by the tool.
    #[value(skip)]
    Anchor,
}

impl Mode {
    /// The modes the tool can run, in report order.
    pub const RUNNABLE: [Mode; 5] = [Mode::Gpu, Mode::Proxy, Mode::Cpu, Mode::Nccl, Mode::Nvshmem];

    /// The modes a run without `--modes` measures: all but `nvshmem`, which runs only when asked for (it
    /// initialises NVSHMEM in the process, and in one process it is one PE putting to itself).
    pub const DEFAULT: [Mode; 4] = [Mode::Gpu, Mode::Proxy, Mode::Cpu, Mode::Nccl];

    /// The short name used on the command line and in data files.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Gpu => "gpu",
            Mode::Proxy => "proxy",
            Mode::Cpu => "cpu",
            Mode::Nccl => "nccl",
            Mode::Nvshmem => "nvshmem",
            Mode::Anchor => "anchor",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Element type of the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Dtype {
    /// Bytes (data movement without arithmetic).
    U8,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    F32,
}

impl Dtype {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 => 1,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 => 4,
        }
    }

    /// The short name used on the command line and in data files.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::U8 => "u8",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::F32 => "f32",
        }
    }

    /// The little-endian bytes of `v` in this type. Exact for the small integers the checks use
    /// (0..=255 for u8, 0..=2048 for f16, 0..=256 for bf16, any f32).
    pub fn encode(self, v: f32) -> Vec<u8> {
        match self {
            Dtype::U8 => vec![v as u8],
            Dtype::F16 => f32_to_f16_bits(v).to_le_bytes().to_vec(),
            // bf16 is the top half of an f32; truncation is exact for values with ≤ 8 significant bits.
            Dtype::Bf16 => ((v.to_bits() >> 16) as u16).to_le_bytes().to_vec(),
            Dtype::F32 => v.to_le_bytes().to_vec(),
        }
    }

    /// The value of one element from its little-endian bytes (`bytes.len() == self.size()`).
    pub fn decode(self, bytes: &[u8]) -> f32 {
        match self {
            Dtype::U8 => f32::from(bytes[0]),
            Dtype::F16 => f16_bits_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])),
            Dtype::Bf16 => f32::from_bits(u32::from(u16::from_le_bytes([bytes[0], bytes[1]])) << 16),
            Dtype::F32 => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// f32 → f16 for normal values in f16 range, truncating the mantissa (exact for small integers).
fn f32_to_f16_bits(v: f32) -> u16 {
    if v == 0.0 {
        return if v.is_sign_negative() { 0x8000 } else { 0 };
    }
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mantissa = ((bits >> 13) & 0x3ff) as u16;
    if exp >= 0x1f {
        return sign | 0x7c00; // overflow: infinity
    }
    if exp <= 0 {
        return sign; // below the normal range: flush to zero (the checks never go there)
    }
    sign | ((exp as u16) << 10) | mantissa
}

/// f16 → f32, normals, zeros and infinities (subnormals flush to zero; the checks never produce them).
fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let mantissa = u32::from(h & 0x3ff);
    let bits = match exp {
        0 => sign,
        0x1f => sign | 0x7f80_0000 | (mantissa << 13),
        e => sign | ((e + 127 - 15) << 23) | (mantissa << 13),
    };
    f32::from_bits(bits)
}

/// One measured point: an operation in one mode at one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// The operation.
    pub op: Operation,
    /// How it was driven.
    pub mode: Mode,
    /// Part of the series name: the figure's source for [`Mode::Anchor`] rows (e.g. "torch symm_mem
    /// two-shot"); `None` for the tool's own modes.
    pub label: Option<String>,
    /// Ranks (GPUs) taking part in collectives; 2 for ping-pong and put.
    pub world: usize,
    /// Message size as defined per operation (see [`Operation`]).
    pub bytes: u64,
    /// Element type.
    pub dtype: Dtype,
    /// Operations per timed trial; 0 for anchor rows (the figure comes from elsewhere).
    pub iterations: u64,
    /// Timed trials the statistics are over; 0 for anchor rows.
    pub trials: u32,
    /// Median over trials of the time per operation, µs (one way for ping-pong).
    pub median_us: f64,
    /// Fastest trial, µs per operation.
    pub min_us: f64,
    /// Slowest trial, µs per operation.
    pub max_us: f64,
    /// Algorithm bandwidth at the median: bytes / time, GB/s (10^9 bytes per second).
    pub algbw_gbps: f64,
    /// Bus bandwidth at the median, NCCL's convention ([`crate::bandwidth::bus_factor`]), GB/s.
    pub busbw_gbps: f64,
    /// Host CPU time (user + system, all threads of the process) per operation, µs; `None` when unknown.
    pub host_cpu_us_per_op: Option<f64>,
    /// Streaming multiprocessors the mode occupies (0 for copy-engine paths); `None` when unknown.
    pub sms_used: Option<u32>,
    /// Depth of the proxy's descriptor ring ([`Mode::Proxy`] only).
    pub queue_depth: Option<u32>,
    /// Whether the operations were timed as CUDA-graph replay.
    pub graph: bool,
    /// Whether the ranks shared a GPU (the one-GPU run: two ranks on one GPU), so that nothing crossed a
    /// link between GPUs.
    #[serde(default)]
    pub intra_gpu: bool,
    /// The same operation isolated: one at a time between dependent kernels, each timed alone and complete
    /// on every rank (the longest rank), as a collective sits between two compute kernels of a model;
    /// `None` where the mode does not time it.
    #[serde(default)]
    pub isolated: Option<Isolated>,
    /// GPU and link utilization over a window of back-to-back trials (`--utilization`); `None` where it
    /// was not recorded.
    #[serde(default)]
    pub utilization: Option<crate::utilization::Utilization>,
}

/// Time per operation of isolated operations: each between a kernel before it and one after it on every
/// rank's stream, its time the longest rank's span between them. Median, min and max over the operations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Isolated {
    /// Median over the operations, µs.
    pub median_us: f64,
    /// Fastest operation, µs.
    pub min_us: f64,
    /// Slowest operation, µs.
    pub max_us: f64,
    /// Operations timed.
    pub samples: u64,
}

impl Skipped {
    /// The series the skip belongs to, as plots and tables name it.
    pub fn series(&self) -> Series {
        Series { mode: self.mode, label: self.label.clone(), queue_depth: self.queue_depth }
    }
}

impl Measurement {
    /// A point for the unit tests: `op` in `mode` (with `label`) at `bytes`, every trial `us`, on 2 ranks,
    /// bf16, graph replay, nothing else known.
    #[cfg(test)]
    pub(crate) fn for_test(op: Operation, mode: Mode, label: Option<&str>, bytes: u64, us: f64) -> Measurement {
        Measurement {
            op,
            mode,
            label: label.map(str::to_owned),
            world: 2,
            bytes,
            dtype: Dtype::Bf16,
            iterations: 10,
            trials: 3,
            median_us: us,
            min_us: us,
            max_us: us,
            algbw_gbps: 0.0,
            busbw_gbps: 0.0,
            host_cpu_us_per_op: None,
            sms_used: None,
            queue_depth: None,
            graph: true,
            intra_gpu: false,
            isolated: None,
            utilization: None,
        }
    }

    /// The series (one line in a plot, one column in the headline table) this point belongs to.
    pub fn series(&self) -> Series {
        Series { mode: self.mode, label: self.label.clone(), queue_depth: self.queue_depth }
    }
}

/// The label of the gpu mode's process-per-GPU series (`gpu-procs`): the same collectives with one process
/// per rank, started by a launcher (torchrun, `ferrocomm launch`, mpirun, srun).
pub const PROCS_LABEL: &str = "procs";

/// The label of the gpu mode's traced series (`gpu-traced`): the gpu series on a team with trace mode on.
pub const TRACED_LABEL: &str = "traced";

/// What the `gpu-procs` series is, in words, for the report.
pub const PROCS_TITLE: &str = "ferrocomm gpu, one process per GPU";

/// What makes points one line in a plot: the mode, the anchor's label, the proxy's queue depth.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Series {
    /// The mode.
    pub mode: Mode,
    /// The label (anchors).
    pub label: Option<String>,
    /// The proxy's queue depth.
    pub queue_depth: Option<u32>,
}

impl Series {
    /// Whether this is the gpu mode's process-per-GPU series (`gpu-procs`).
    pub fn is_procs(&self) -> bool {
        self.mode == Mode::Gpu && self.label.as_deref() == Some(PROCS_LABEL)
    }

    /// Whether this is the gpu mode's traced series (`gpu-traced`), which measures trace mode's cost rather
    /// than a way to communicate: it never counts as a mode's best or fastest.
    pub fn is_traced(&self) -> bool {
        self.mode == Mode::Gpu && self.label.as_deref() == Some(TRACED_LABEL)
    }

    /// The gpu mode's traced series (`gpu-traced`).
    pub fn gpu_traced() -> Series {
        Series { mode: Mode::Gpu, label: Some(TRACED_LABEL.to_owned()), queue_depth: None }
    }

    /// The gpu mode's single-process main series (`gpu`).
    pub fn gpu() -> Series {
        Series { mode: Mode::Gpu, label: None, queue_depth: None }
    }

    /// The gpu mode's process-per-GPU series (`gpu-procs`).
    pub fn gpu_procs() -> Series {
        Series { mode: Mode::Gpu, label: Some(PROCS_LABEL.to_owned()), queue_depth: None }
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.label, self.mode) {
            (Some(label), Mode::Anchor) => f.write_str(label)?,
            (Some(label), mode) => write!(f, "{mode}-{label}")?,
            (None, mode) => f.write_str(mode.name())?,
        }
        if let Some(depth) = self.queue_depth {
            write!(f, " qd={depth}")?;
        }
        Ok(())
    }
}

/// A point that was not measured, and why (unsupported, failed check, driver error, out of memory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The operation.
    pub op: Operation,
    /// The mode.
    pub mode: Mode,
    /// The proxy's queue depth, when the mode has one.
    pub queue_depth: Option<u32>,
    /// The series label of a mode's variant (see [`Measurement::label`]).
    #[serde(default)]
    pub label: Option<String>,
    /// The size, or `None` when the whole operation was skipped.
    pub bytes: Option<u64>,
    /// Why.
    pub reason: String,
}

/// Where and how a run was taken.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// `ferrocomm-bench <version>`.
    pub tool: String,
    /// Seconds since the Unix epoch when the run started.
    pub created_unix_s: u64,
    /// The command line that produced the data.
    pub command: String,
    /// GPU names and ordinals taking part, e.g. "0: NVIDIA H200".
    pub devices: Vec<String>,
    /// CUDA driver version, e.g. "13.0", when a driver was loaded.
    pub driver: Option<String>,
    /// NCCL version, e.g. "2.28.3", when NCCL was loaded.
    pub nccl: Option<String>,
    /// Free-form notes (e.g. where the anchor figures come from).
    pub notes: Vec<String>,
}

/// A whole run: what `data.json` holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchData {
    /// Where and how.
    pub meta: Meta,
    /// The measured points (and anchor rows).
    pub measurements: Vec<Measurement>,
    /// What was not measured, and why.
    pub skipped: Vec<Skipped>,
}

impl BenchData {
    /// The operations present in the data, in report order.
    pub fn operations(&self) -> Vec<Operation> {
        Operation::ALL.into_iter().filter(|op| self.measurements.iter().any(|m| m.op == *op)).collect()
    }

    /// The series present for `op`, the tool's modes first (in [`Mode`] order), then anchors.
    pub fn series(&self, op: Operation) -> Vec<Series> {
        let mut series: Vec<Series> = self.measurements.iter().filter(|m| m.op == op).map(|m| m.series()).collect();
        series.sort();
        series.dedup();
        series
    }

    /// The points of one series for `op`, ordered by size.
    pub fn points(&self, op: Operation, series: &Series) -> Vec<&Measurement> {
        let mut points: Vec<&Measurement> =
            self.measurements.iter().filter(|m| m.op == op && m.series() == *series).collect();
        points.sort_by_key(|m| m.bytes);
        points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_small_integers_exactly() {
        for dtype in [Dtype::U8, Dtype::F16, Dtype::Bf16, Dtype::F32] {
            for v in [0.0f32, 1.0, 2.0, 3.0, 7.0, 36.0, 255.0] {
                let bytes = dtype.encode(v);
                assert_eq!(bytes.len(), dtype.size());
                assert_eq!(dtype.decode(&bytes), v, "{dtype} {v}");
            }
        }
        assert_eq!(Dtype::Bf16.encode(1.0), 0x3f80u16.to_le_bytes());
        assert_eq!(Dtype::F16.encode(1.0), 0x3c00u16.to_le_bytes());
        assert_eq!(Dtype::F16.encode(3.0), 0x4200u16.to_le_bytes());
        assert_eq!(Dtype::F16.encode(2048.0), 0x6800u16.to_le_bytes());
    }

    #[test]
    fn round_bytes_keeps_whole_elements_per_rank() {
        assert_eq!(Operation::AllReduce.round_bytes(1001, 4, Dtype::Bf16), 1000);
        assert_eq!(Operation::AllGather.round_bytes(1001, 4, Dtype::Bf16), 1000);
        assert_eq!(Operation::AllToAll.round_bytes(14, 4, Dtype::Bf16), 8);
        assert_eq!(Operation::AllToAll.round_bytes(6, 4, Dtype::Bf16), 0);
        assert_eq!(Operation::PingPong.round_bytes(7, 2, Dtype::U8), 7);
    }

    #[test]
    fn series_names() {
        let anchor = Series { mode: Mode::Anchor, label: Some("torch symm_mem two-shot".into()), queue_depth: None };
        assert_eq!(anchor.to_string(), "torch symm_mem two-shot");
        let proxy = Series { mode: Mode::Proxy, label: None, queue_depth: Some(16) };
        assert_eq!(proxy.to_string(), "proxy qd=16");
        let ll = Series { mode: Mode::Gpu, label: Some("ll".into()), queue_depth: None };
        assert_eq!(ll.to_string(), "gpu-ll");
        assert!(Series { mode: Mode::Gpu, label: None, queue_depth: None } < ll);
        assert!(Series { mode: Mode::Gpu, label: None, queue_depth: None } < anchor);
        // The process-per-GPU series sits next to gpu (and gpu-ll), before the other modes.
        let procs = Series::gpu_procs();
        assert_eq!(procs.to_string(), "gpu-procs");
        assert!(procs.is_procs() && !ll.is_procs() && !Series::gpu().is_procs());
        assert!(Series::gpu() < ll && ll < procs && procs < proxy);
    }
}
