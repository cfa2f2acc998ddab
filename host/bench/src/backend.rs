//! The seam between the method (warm-up, trials, statistics) and the code that drives GPUs.
//!
//! Every mode is a [`Backend`]: given an operation, a size and an operation count, it runs them and says
//! how long one took. The `cpu` and `nccl` modes are built in ([`crate::gpu`]); the `gpu` and `proxy`
//! modes come from ferrocomm's runtime and kernels, which plug in through [`BackendOpener`].

use thiserror::Error;

use crate::model::{Dtype, Mode, Operation};

/// One timed trial to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// The operation.
    pub op: Operation,
    /// Size as defined per operation ([`Operation`]); already a whole number of elements per rank.
    pub bytes: u64,
    /// Element type.
    pub dtype: Dtype,
    /// Operations to run back to back in this trial.
    pub iters: u64,
    /// Whether to capture the operations in a CUDA graph and time its replay, where the mode allows.
    pub graph: bool,
}

/// What one trial measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Time per operation, µs: the trial's time divided by its operations (one way for ping-pong).
    pub us_per_op: f64,
    /// Whether the trial was timed as CUDA-graph replay.
    pub graph: bool,
    /// SMs the mode occupied (0 for copy-engine paths), when known.
    pub sms_used: Option<u32>,
    /// CPU time of the calling thread spent only waiting for the trial's end (the harness's cost, not the
    /// mode's: left out of the host CPU figure). Zero where the host takes part in the operation.
    pub wait_cpu: std::time::Duration,
}

/// A mode's driver of GPUs.
///
/// Contract: [`Backend::run`] with the same request may be called many times (warm-up, then trials);
/// the first call for a new request may allocate buffers or capture a graph, and only the operations
/// themselves are timed (CUDA events around them, or the host clock where the host is part of the
/// operation, as in the CPU-initiated ping-pong).
pub trait Backend {
    /// The mode this backend measures.
    fn mode(&self) -> Mode;

    /// The proxy's ring depth ([`Mode::Proxy`]); `None` for other modes.
    fn queue_depth(&self) -> Option<u32>;

    /// Ranks taking part in collectives (ping-pong and put use the first two).
    fn world(&self) -> usize;

    /// `Err(reason)` when this backend cannot run `op` at all.
    fn supports(&self, op: Operation) -> Result<(), String>;

    /// Runs `op` once on small known inputs and compares with a CPU reference, so that a mode that
    /// measures the wrong thing fails loudly instead of producing figures.
    fn verify(&mut self, op: Operation, dtype: Dtype) -> Result<(), BackendError>;

    /// Runs one trial and times it.
    fn run(&mut self, request: &Request) -> Result<Timing, BackendError>;

    /// Runs `request.iters` isolated operations of `request.op` and returns each one's time, µs: every
    /// operation between a one-thread kernel before it and one after it on every rank's stream (kernels
    /// that do not start the next launch early), its time the longest rank's span between the two — what a
    /// collective costs between two dependent compute kernels, complete on every rank. `None` where the mode
    /// has no such series (the default), or for ping-pong, which is a latency already.
    fn isolated(&mut self, _request: &Request) -> Result<Option<Vec<f64>>, BackendError> {
        Ok(None)
    }

    /// The CUDA ordinals of the GPUs this backend runs on, each once (for utilization windows); empty by
    /// default and on the emulator.
    fn gpu_ordinals(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Whether the ranks share GPUs (the one-GPU run), so that the figures are intra-GPU. False by default.
    fn intra_gpu(&self) -> bool {
        false
    }

    /// The GPUs in use, "ordinal: name" by rank, for the report's header. Empty by default.
    fn devices(&self) -> Vec<String> {
        Vec::new()
    }

    /// What the report should say about how this backend ran (e.g. a graph capture that fell back to
    /// eager launches). Empty by default.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// The label of this backend's series when it is a variant of its mode (e.g. `ll` for the gpu mode's
    /// LL-packet ping-pong, shown as `gpu-ll`); `None` for the mode's main series.
    fn label(&self) -> Option<String> {
        None
    }

    /// Whether this backend's series includes `op` at all. Operations left out are not reported (a variant
    /// that exists for one operation); included operations it cannot run are, with the reason.
    fn measures(&self, _op: Operation) -> bool {
        true
    }

    /// The largest size this backend runs `op` at, and why, when it has such a limit: the larger sizes of a
    /// sweep are then reported once as not measured instead of failing one by one.
    fn size_limit(&self, _op: Operation) -> Option<(u64, String)> {
        None
    }
}

/// Where the tool gets the backend for a mode.
pub trait BackendOpener {
    /// Opens `mode` (the variant `config.variant`) on the GPUs of `config`.
    fn open(&mut self, mode: Mode, config: &OpenConfig) -> Result<Box<dyn Backend>, BackendError>;

    /// The variants of `mode` a sweep opens, each its own series (`None`: the mode itself). Only the mode
    /// itself unless the opener offers more.
    fn variants(&self, _mode: Mode) -> Vec<Option<String>> {
        vec![None]
    }
}

/// What every backend is opened with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenConfig {
    /// Device ordinals to use, in rank order; `None` for every visible GPU.
    pub gpus: Option<Vec<usize>>,
    /// The proxy's ring depth (ignored by other modes).
    pub queue_depth: u32,
    /// Which variant of the mode to open ([`BackendOpener::variants`]); `None` for the mode itself.
    pub variant: Option<String>,
}

/// Why a backend cannot open or run.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BackendError {
    /// libcuda cannot be loaded.
    #[error("no CUDA driver: libcuda.so could not be loaded (install the NVIDIA driver, or run on a GPU machine)")]
    NoDriver,
    /// The driver loaded but sees no GPU.
    #[error("no GPU: the CUDA driver found no device (check nvidia-smi and CUDA_VISIBLE_DEVICES)")]
    NoDevice,
    /// Fewer GPUs than the mode needs.
    #[error("{mode} needs at least {need} GPUs, {have} visible (check CUDA_VISIBLE_DEVICES or --gpus)")]
    TooFewGpus {
        /// The mode.
        mode: Mode,
        /// GPUs needed.
        need: usize,
        /// GPUs visible.
        have: usize,
    },
    /// A `--gpus` ordinal that does not exist.
    #[error("GPU {ordinal} does not exist: {count} visible (ordinals 0..{count}); fix --gpus")]
    NoSuchGpu {
        /// The requested ordinal.
        ordinal: usize,
        /// Visible GPUs.
        count: usize,
    },
    /// A `--gpus` ordinal given twice.
    #[error("GPU {ordinal} is listed twice in --gpus: each rank needs its own GPU")]
    DuplicateGpu {
        /// The repeated ordinal.
        ordinal: usize,
    },
    /// The mode runs one rank per GPU, and the run puts several on each (the one-GPU run, or
    /// `FERROCOMM_RANKS_PER_GPU`).
    #[error(
        "{mode} runs one rank per GPU ({why}), and this run puts {ranks_per_gpu} ranks on each of GPUs {ordinals:?} \
         (one GPU visible, or FERROCOMM_RANKS_PER_GPU set): it needs two GPUs"
    )]
    OneRankPerGpu {
        /// The mode.
        mode: Mode,
        /// Why the mode cannot share a GPU between ranks.
        why: &'static str,
        /// Ranks the run puts on each GPU.
        ranks_per_gpu: usize,
        /// The GPUs.
        ordinals: Vec<usize>,
    },
    /// libnccl cannot be loaded.
    #[error(
        "NCCL not found: libnccl.so.2 could not be loaded (install NCCL, e.g. `pip install nvidia-nccl-cu13`, \
         and put its lib directory on LD_LIBRARY_PATH), or leave out --modes nccl"
    )]
    NoNccl,
    /// A CUDA driver call failed.
    #[error("CUDA driver error while {what}: {source}")]
    Driver {
        /// What the tool was doing.
        what: String,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// An NCCL call failed.
    #[error("NCCL error while {what}: {message}")]
    Nccl {
        /// What the tool was doing.
        what: String,
        /// NCCL's own description of the error.
        message: String,
    },
    /// The mode cannot run this operation.
    #[error("{mode} cannot run {op}: {reason}")]
    Unsupported {
        /// The mode.
        mode: Mode,
        /// The operation.
        op: Operation,
        /// Why not.
        reason: String,
    },
    /// The mode's result differed from the CPU reference.
    #[error("{mode} {op} gave wrong results: {detail}")]
    Verification {
        /// The mode.
        mode: Mode,
        /// The operation.
        op: Operation,
        /// First difference found.
        detail: String,
    },
    /// The mode is not part of this build.
    #[error("mode {mode} is not available in this build: {reason}")]
    NotAvailable {
        /// The mode.
        mode: Mode,
        /// Why, and what provides it.
        reason: String,
    },
    /// The mode or operation runs in one process, and this process is one rank of a job a launcher
    /// started (torchrun, `ferrocomm launch`, mpirun, srun): it cannot run there.
    #[error(
        "{what} runs in one process, but this process is rank {rank} of a job of {world} processes (a launcher's \
         variables are set); run it without the launcher (`ferrocomm bench --modes {mode} ...`) and add its \
         data.json to this report with --merge"
    )]
    OneProcessOnly {
        /// The mode.
        mode: Mode,
        /// What cannot run (a mode, a series, an operation).
        what: String,
        /// This process's rank.
        rank: usize,
        /// The processes of the job.
        world: usize,
    },
    /// An error from a backend implemented outside this crate.
    #[error("{mode}: {source}")]
    External {
        /// The mode.
        mode: Mode,
        /// The backend's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl BackendError {
    /// Wraps a driver error with what the tool was doing.
    pub fn driver(what: impl Into<String>) -> impl FnOnce(cudarc::driver::DriverError) -> BackendError {
        let what = what.into();
        move |source| BackendError::Driver { what, source }
    }
}
