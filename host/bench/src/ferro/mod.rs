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
//!
//! Both modes borrow a `ferrocomm::Team`, which lives for the rest of the process: one per set of GPUs,
//! shared by every backend opened on it ([`bench_team`]), so sweeping several modes and depths creates (and
//! JIT-compiles the kernels for) one team only.

pub mod checks;
pub mod gpu_mode;
pub mod grid;
pub mod proxy_mode;
pub mod proxy_thread;
pub mod ring;
pub mod timed;

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ferrocomm::{Backend as TeamBackend, Team};
use ferrocomm_kernels::CommError;

use crate::backend::{Backend, BackendError, BackendOpener, OpenConfig};
use crate::gpu::{BuiltinBackends, resolve_ordinals};
use crate::model::Mode;

/// The label of the gpu mode's LL-packet ping-pong series (`gpu-ll`).
pub const LL_LABEL: &str = "ll";

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
    fn open(&mut self, mode: Mode, config: &OpenConfig) -> Result<Box<dyn Backend>, BackendError> {
        match (mode, config.variant.as_deref()) {
            (Mode::Gpu, None) => Ok(Box::new(gpu_mode::GpuBackend::open(config, gpu_mode::Variant::Main)?)),
            (Mode::Gpu, Some(LL_LABEL)) => Ok(Box::new(gpu_mode::GpuBackend::open(config, gpu_mode::Variant::Ll)?)),
            (Mode::Proxy, None) => Ok(Box::new(proxy_mode::ProxyBackend::open(config)?)),
            (Mode::Cpu | Mode::Nccl | Mode::Anchor, None) => self.builtin.open(mode, config),
            (mode, Some(variant)) => Err(BackendError::NotAvailable {
                mode,
                reason: format!("no variant {variant:?} of {mode} (the gpu mode has \"{LL_LABEL}\")"),
            }),
        }
    }

    fn variants(&self, mode: Mode) -> Vec<Option<String>> {
        match mode {
            Mode::Gpu => vec![None, Some(LL_LABEL.to_owned())],
            _ => vec![None],
        }
    }
}

/// Teams created so far, by GPU list; each lives until the process exits.
static TEAMS: Mutex<Vec<(Vec<usize>, &'static Team)>> = Mutex::new(Vec::new());

/// The CUDA team on `config.gpus` (every visible GPU when `None`, at least two, one rank each), created on
/// first use and shared afterwards. It lives for the rest of the process because the backends borrow it
/// (a `Communicator` holds `&Team`); everything a backend allocates on it is freed when the backend drops.
pub fn bench_team(mode: Mode, config: &OpenConfig) -> Result<&'static Team, BackendError> {
    let ordinals = resolve_ordinals(mode, config.gpus.as_deref(), 2)?;
    let mut teams = TEAMS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, team)) = teams.iter().find(|(gpus, _)| *gpus == ordinals) {
        return Ok(team);
    }
    let team = Team::builder()
        .backend(TeamBackend::Cuda)
        .devices(ordinals.iter().copied())
        .world(ordinals.len())
        .ranks_per_gpu(1)
        .timeout(TEAM_TIMEOUT)
        .build()
        .map_err(runtime(mode))?;
    let team: &'static Team = Box::leak(Box::new(team));
    teams.push((ordinals, team));
    Ok(team)
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
