//! The modes that run ferrocomm's own kernels, and the opener of every mode:
//!
//! - `gpu` ([`gpu_mode`]): the communication library (`ferrocomm-kernels`' `Communicator`) moves the data
//!   over NVLink from inside its kernels; operations are captured into CUDA graphs and their replay is
//!   timed on the device ([`timed`]). Its variant `gpu-ll` is the LL-packet ping-pong.
//! - `proxy` ([`proxy_mode`]): kernels push put descriptors into pinned, host-mapped rings ([`ring`]); a
//!   host thread pops them and issues copy-engine copies and completion signals ([`proxy_thread`]).
//!
//! | module | job |
//! | --- | --- |
//! | [`gpu_mode`] | the `gpu` backend: graphs of library calls, ping-pong kernels |
//! | [`checks`] | each operation checked once against the library's CPU references |
//! | [`grid`] | the blocks (SMs) a library call occupies |
//! | [`timed`] | `%globaltimer` stamps around captured operations: device time of a graph replay |
//! | [`ring`] | the proxy's rings in pinned host-mapped memory, from the host's side |
//! | [`proxy_thread`] | the proxy thread and its copy engines (CUDA, or host copies for the emulator) |
//! | [`proxy_mode`] | the `proxy` backend |
//! | [`nvshmem_mode`] | the `nvshmem` backend: the bench's operations through NVSHMEM's device API, one PE per process |
//!
//! Both modes borrow a `ferrocomm::Team`, which lives for the rest of the process: one per set of GPUs,
//! shared by every backend opened on it ([`bench_team`]), so sweeping several modes and depths creates (and
//! JIT-compiles the kernels for) one team only. `FERROCOMM_RANKS_PER_GPU=k` puts `k` ranks on each GPU,
//! as it puts `k` processes on each GPU under a launcher; a one-GPU machine gets two ranks on its GPU
//! without it.
//!
//! Under a launcher ([`job_env`] is `Some`: torchrun, `ferrocomm launch`, mpirun, srun) the process is one
//! rank of a team that spans the job's processes, and the gpu mode runs its `gpu-procs` series there
//! ([`PROCS_LABEL`]): the same collectives, each process launching and timing its own rank; the nvshmem
//! mode runs every operation there, one PE per process. The other modes, variants and operations run in one
//! process and refuse with [`BackendError::OneProcessOnly`].

pub mod checks;
pub mod gpu_mode;
pub mod grid;
pub mod nvshmem_mode;
pub mod proxy_mode;
pub mod proxy_thread;
pub mod ring;
pub mod timed;

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ferrocomm::{Backend as TeamBackend, Team};
use ferrocomm_bootstrap::JobEnv;
use ferrocomm_kernels::CommError;

use crate::backend::{Backend, BackendError, BackendOpener, OpenConfig};
use crate::gpu::{BuiltinBackends, Placement, ranks_per_gpu_env};
use crate::model::Mode;
pub use crate::model::{PROCS_LABEL, PROCS_TITLE, TRACED_LABEL};

/// The label of the gpu mode's LL-packet ping-pong series (`gpu-ll`).
pub const LL_LABEL: &str = "ll";

/// Ranks (processes, under a launcher) per GPU: `FERROCOMM_RANKS_PER_GPU`, default 1.
pub use ferrocomm::team::RANKS_PER_GPU_ENV;

/// Events each rank's trace ring holds per launch on the `gpu-traced` team: a trial's graph of 50 collectives
/// on every SM records tens of thousands, and every one recorded is what the series times (40 MiB a rank).
pub const TRACED_RING_EVENTS: usize = 1 << 20;

/// How long a device wait may spin before it gives up: long enough for a 1 GiB transfer queued behind
/// others, short enough that a broken run ends.
pub const TEAM_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens every mode: `gpu` (and its `ll` variant) and `proxy` on ferrocomm's kernels, `cpu` and `nccl`
/// through [`BuiltinBackends`]. What `ferrocomm bench` uses.
#[derive(Debug, Default)]
pub struct FerroBackends {
    builtin: BuiltinBackends,
}

impl FerroBackends {
    /// The opener.
    pub fn new() -> FerroBackends {
        FerroBackends::default()
    }
}

impl BackendOpener for FerroBackends {
    /// Opens `mode`; under a launcher only the gpu mode's `procs` variant, the others refusing with
    /// [`BackendError::OneProcessOnly`].
    fn open(&mut self, mode: Mode, config: &OpenConfig) -> Result<Box<dyn Backend>, BackendError> {
        let variant = config.variant.as_deref();
        if let Some(job) = job_env(mode)? {
            return match (mode, variant) {
                (Mode::Gpu, Some(PROCS_LABEL)) => {
                    Ok(Box::new(gpu_mode::GpuBackend::open(config, gpu_mode::Variant::Procs)?))
                }
                (Mode::Nvshmem, None) => {
                    Ok(Box::new(nvshmem_mode::NvshmemBackend::new(process_team(mode, config, job, true)?)?))
                }
                (Mode::Anchor, _) => self.builtin.open(mode, config),
                (mode, variant) => {
                    let series = crate::model::Series { mode, label: variant.map(str::to_owned), queue_depth: None };
                    let what = format!("the {series} series");
                    Err(BackendError::OneProcessOnly { mode, what, rank: job.rank, world: job.world })
                }
            };
        }
        match (mode, variant) {
            (Mode::Gpu, None) => Ok(Box::new(gpu_mode::GpuBackend::open(config, gpu_mode::Variant::Main)?)),
            (Mode::Gpu, Some(LL_LABEL)) => Ok(Box::new(gpu_mode::GpuBackend::open(config, gpu_mode::Variant::Ll)?)),
            (Mode::Gpu, Some(TRACED_LABEL)) => {
                Ok(Box::new(gpu_mode::GpuBackend::open(config, gpu_mode::Variant::Traced)?))
            }
            (Mode::Gpu, Some(label)) if gpu_mode::label_budget(label).is_some() => {
                let sms = gpu_mode::label_budget(label).unwrap_or(1);
                Ok(Box::new(gpu_mode::GpuBackend::open(config, gpu_mode::Variant::SmBudget(sms))?))
            }
            (Mode::Gpu, Some(label)) if gpu_mode::label_copy_path(label).is_some() => {
                let path = gpu_mode::label_copy_path(label).unwrap_or(gpu_mode::CopyPath::Tma);
                Ok(Box::new(gpu_mode::GpuBackend::open(config, gpu_mode::Variant::Copy(path))?))
            }
            (Mode::Gpu, Some(label)) if gpu_mode::label_algorithm(label).is_some() => {
                let algorithm = gpu_mode::label_algorithm(label).unwrap_or(ferrocomm_kernels::Algorithm::TwoShot);
                Ok(Box::new(gpu_mode::GpuBackend::open(config, gpu_mode::Variant::AllReduce(algorithm))?))
            }
            (Mode::Gpu, Some(PROCS_LABEL)) => Err(BackendError::NotAvailable {
                mode,
                reason: "the gpu-procs series runs one process per GPU: start the bench under a launcher, e.g. \
                         `ferrocomm launch -n 2 -- ferrocomm bench --modes gpu` or `torchrun --no-python \
                         --nproc-per-node 2 ferrocomm bench --modes gpu`"
                    .into(),
            }),
            (Mode::Proxy, None) => Ok(Box::new(proxy_mode::ProxyBackend::open(config)?)),
            (Mode::Nvshmem, None) => Ok(Box::new(nvshmem_mode::NvshmemBackend::new(nvshmem_pe_team(config)?)?)),
            (Mode::Cpu | Mode::Nccl | Mode::Anchor, None) => self.builtin.open(mode, config),
            (Mode::Nccl, Some(crate::gpu::nccl_mode::EAGER_LABEL)) => self.builtin.open(mode, config),
            (mode, Some(variant)) => Err(BackendError::NotAvailable {
                mode,
                reason: format!(
                    "no variant {variant:?} of {mode} (the gpu mode has \"{LL_LABEL}\", and \"{PROCS_LABEL}\" under a \
                     launcher)"
                ),
            }),
        }
    }

    /// The gpu mode's `gpu` and `gpu-ll` series; under a launcher its `gpu-procs` series only.
    fn variants(&self, mode: Mode) -> Vec<Option<String>> {
        let under_launcher = job_env(mode).is_ok_and(|job| job.is_some());
        match mode {
            Mode::Gpu if under_launcher => vec![Some(PROCS_LABEL.to_owned())],
            Mode::Gpu => [None, Some(LL_LABEL.to_owned())]
                .into_iter()
                .chain(gpu_mode::ALL_REDUCE_ALGORITHMS.iter().map(|a| Some(gpu_mode::algorithm_label(*a).to_owned())))
                .collect(),
            Mode::Nccl => vec![None, Some(crate::gpu::nccl_mode::EAGER_LABEL.to_owned())],
            _ => vec![None],
        }
    }
}

/// The job this process is one rank of, when a launcher's variables are set (torchrun, `ferrocomm launch`,
/// mpirun, srun, `FERROCOMM_RANK`...); `None` for a process on its own. Variables that contradict each
/// other are `mode`'s error.
pub fn job_env(mode: Mode) -> Result<Option<JobEnv>, BackendError> {
    JobEnv::from_env().map_err(|e| BackendError::External { mode, source: Box::new(e) })
}

/// A single-process team's GPUs, ranks per GPU, and whether it traces.
type TeamKey = (Vec<usize>, usize, bool);

/// Teams created so far, by GPU list and ranks per GPU; each lives until the process exits.
static TEAMS: Mutex<Vec<(TeamKey, &'static Team)>> = Mutex::new(Vec::new());

/// The team that spans the job's processes, once joined (one per process: joining is collective), and
/// whether it was initialised with NVSHMEM.
static PROCESS_TEAM: Mutex<Option<(&'static Team, bool)>> = Mutex::new(None);

/// The nvshmem mode's one-PE team of a process on its own (NVSHMEM initialises once per process).
static NVSHMEM_TEAM: Mutex<Option<&'static Team>> = Mutex::new(None);

/// The team the ferro modes run on, created on first use and shared afterwards. It lives for the rest of
/// the process because the backends borrow it (a `Communicator` holds `&Team`); everything a backend
/// allocates on it is freed when the backend drops.
///
/// - On its own, the process's CUDA team on `config.gpus` (every visible GPU when `None`), one rank per GPU,
///   or `FERROCOMM_RANKS_PER_GPU` ranks on each; two ranks at least, so two on a single GPU
///   ([`Placement::resolve`]).
/// - Under a launcher ([`job_env`]), the team of the job's processes, this process running its own rank
///   (on the GPU its `LOCAL_RANK` picks among `config.gpus`, `FERROCOMM_RANKS_PER_GPU` processes to a GPU),
///   with the same device timeout. Its backend is CUDA unless `FERROCOMM_BACKEND` says otherwise
///   (`ferrocomm launch --emulator` sets it to the emulator).
pub fn bench_team(mode: Mode, config: &OpenConfig) -> Result<&'static Team, BackendError> {
    if let Some(job) = job_env(mode)? {
        return process_team(mode, config, job, false);
    }
    single_process_team(mode, config, false)
}

/// Like [`bench_team`] in one process, with trace mode on (rings of [`TRACED_RING_EVENTS`]): the team of the
/// `gpu-traced` series. It never writes its trace (it lives until the process exits); `ferrocomm trace`
/// is for runs of one's own.
pub fn traced_bench_team(mode: Mode, config: &OpenConfig) -> Result<&'static Team, BackendError> {
    single_process_team(mode, config, true)
}

fn single_process_team(mode: Mode, config: &OpenConfig, traced: bool) -> Result<&'static Team, BackendError> {
    let placement = Placement::resolve(mode, config.gpus.as_deref(), ranks_per_gpu_env(mode)?)?;
    let per_gpu = placement.ranks_per_gpu;
    let key = (placement.ordinals, per_gpu, traced);
    let mut teams = TEAMS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, team)) = teams.iter().find(|(k, _)| *k == key) {
        return Ok(team);
    }
    let team = Team::builder()
        .single_process()
        .backend(TeamBackend::Cuda)
        .devices(key.0.iter().copied())
        .world(key.0.len() * per_gpu)
        .ranks_per_gpu(per_gpu)
        .timeout(TEAM_TIMEOUT)
        .trace(traced)
        .trace_capacity(TRACED_RING_EVENTS)
        .build()
        .map_err(runtime(mode))?;
    let team: &'static Team = Box::leak(Box::new(team));
    teams.push((key, team));
    Ok(team)
}

/// The single-process team of the nvshmem mode: one PE (NVSHMEM runs one per process) on the first GPU of
/// `config.gpus` (GPU 0 when `None`), initialised with NVSHMEM once per process.
fn nvshmem_pe_team(config: &OpenConfig) -> Result<&'static Team, BackendError> {
    let mut slot = NVSHMEM_TEAM.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(team) = *slot {
        return Ok(team);
    }
    let gpu = config.gpus.as_ref().and_then(|g| g.first().copied()).unwrap_or(0);
    let team = Team::builder()
        .single_process()
        .backend(TeamBackend::Cuda)
        .devices([gpu])
        .world(1)
        .nvshmem(true)
        .timeout(TEAM_TIMEOUT)
        .build()
        .map_err(runtime(Mode::Nvshmem))?;
    let team: &'static Team = Box::leak(Box::new(team));
    *slot = Some(team);
    Ok(team)
}

/// Joins the job `job` (once per process) with the bench's timeout, initialising NVSHMEM for it when
/// `nvshmem` says so. Joining is collective and happens once: a mode that wants the other kind of team
/// than the one joined is refused.
fn process_team(mode: Mode, config: &OpenConfig, job: JobEnv, nvshmem: bool) -> Result<&'static Team, BackendError> {
    let mut slot = PROCESS_TEAM.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((team, joined_with_nvshmem)) = *slot {
        if joined_with_nvshmem != nvshmem {
            let (with, without) = if nvshmem { ("with", "without") } else { ("without", "with") };
            return Err(BackendError::NotAvailable {
                mode,
                reason: format!(
                    "{mode} needs the job's team {with} NVSHMEM, and this run joined it {without}; under a launcher, \
                     run --modes nvshmem and --modes gpu in separate runs (merge their data.json with --merge)"
                ),
            });
        }
        return Ok(team);
    }
    let mut builder = Team::builder().job(job).timeout(TEAM_TIMEOUT).nvshmem(nvshmem);
    let backend_chosen =
        std::env::var(ferrocomm::team::BACKEND_ENV).is_ok_and(|v| !v.trim().is_empty() && v.trim() != "auto");
    if !backend_chosen {
        // Figures of the emulator are not a benchmark: without a GPU the run says so instead.
        builder = builder.backend(TeamBackend::Cuda);
    }
    if let Some(gpus) = &config.gpus {
        builder = builder.devices(gpus.iter().copied());
    }
    let team = builder.build().map_err(runtime(mode))?;
    let team: &'static Team = Box::leak(Box::new(team));
    *slot = Some((team, nvshmem));
    Ok(team)
}

/// Whether ranks of `team` share a GPU (the one-GPU run, or `FERROCOMM_RANKS_PER_GPU` above 1): their
/// figures are then intra-GPU.
pub fn shares_gpus(team: &Team) -> bool {
    let devices: Vec<_> = (0..team.world()).filter_map(|r| team.device(r).ok()).collect();
    devices.iter().enumerate().any(|(i, d)| matches!(d, ferrocomm::Device::Cuda { .. }) && devices[..i].contains(d))
}

/// The CUDA ordinals of the GPUs `team`'s local ranks run on, each once; empty on the emulator.
pub fn team_ordinals(team: &Team) -> Vec<usize> {
    let mut ordinals: Vec<usize> = team
        .local_ranks()
        .into_iter()
        .filter_map(|r| match team.device(r) {
            Ok(ferrocomm::Device::Cuda { ordinal }) => Some(ordinal),
            _ => None,
        })
        .collect();
    ordinals.dedup();
    ordinals
}

/// "0: NVIDIA H200" for each rank of `team` (emulated ranks say so).
pub fn describe_team(team: &Team) -> Vec<String> {
    (0..team.world())
        .map(|rank| match team.device(rank) {
            Ok(ferrocomm::Device::Cuda { ordinal }) => {
                let name = ferrocomm::system::gpu(ordinal).map_or_else(|_| "unknown GPU".to_owned(), |g| g.name);
                format!("{ordinal}: {name}")
            }
            Ok(device) => format!("{rank}: {device}"),
            Err(e) => format!("{rank}: {e}"),
        })
        .collect()
}

/// Wraps a runtime error of `mode`.
pub fn runtime(mode: Mode) -> impl FnOnce(ferrocomm::Error) -> BackendError {
    move |e| BackendError::External { mode, source: Box::new(e) }
}

/// Wraps a communication library error of `mode`.
pub fn comm(mode: Mode) -> impl FnOnce(CommError) -> BackendError {
    move |e| BackendError::External { mode, source: Box::new(e) }
}

/// A trial's operation count as the kernels take it (`u32`).
pub fn iters_u32(mode: Mode, iters: u64) -> Result<u32, BackendError> {
    u32::try_from(iters.max(1)).map_err(|_| BackendError::External {
        mode,
        source: format!("{iters} operations in one trial is more than the kernels count (at most {})", u32::MAX).into(),
    })
}
