//! Choosing a team: backend (explicit, `FERROCOMM_BACKEND`, or auto), GPUs, ranks per GPU, timeout — and
//! the one place that picks the backends behind the `exec` seam (`cuda`, `emu`), the cross-process
//! variants (`process`: a team that spans processes) and NVSHMEM, and hands them to the team's core.

mod process;

use std::sync::Arc;

use ferrocomm_bootstrap::JobEnv;
use std::time::Duration;

use crate::cuda::CudaTeam;
use crate::emu::{EmuTeam, EmulatorOptions, PrivateHeap};
use crate::error::Error;
use crate::exec::{Exec, SymmetricHeap};
use crate::system;
use crate::team::{
    BACKEND_ENV, Backend, DEFAULT_TIMEOUT, DEFAULT_WORLD, Device, EMULATOR_DEFAULT_TIMEOUT, PDL_ENV, TIMEOUT_ENV, Team,
    TeamShared, WORLD_ENV,
};
use crate::trace::TraceConfig;
use ferrocomm_device::emu::LateRank;

/// Making a team (the core's `Team` knows no backend: this module chooses them).
impl Team {
    /// A builder: choose the backend, GPUs, ranks per GPU and timeout.
    pub fn builder() -> TeamBuilder {
        TeamBuilder::new()
    }

    /// The team the environment asks for: `FERROCOMM_BACKEND=cuda|emulator|auto` (default `auto`: every GPU
    /// when a driver and a GPU exist, else the emulator with `FERROCOMM_WORLD` ranks, default 2), and
    /// `FERROCOMM_TIMEOUT_MS`. Under a launcher (torchrun, mpirun, srun, `ferrocomm launch`: their variables
    /// are set) the process joins the job instead, and the team spans its processes, one rank each
    /// ([`Team::spans_processes`]). The choice is logged (`tracing`, info) and [`Team::backend`] tells it.
    pub fn from_env() -> Result<Team, Error> {
        TeamBuilder::new().build()
    }

    /// An emulated team of `world` ranks, each its own emulated GPU.
    pub fn emulated(world: usize) -> Result<Team, Error> {
        TeamBuilder::new().backend(Backend::Emulator).world(world).build()
    }
}

/// Describes a team; [`TeamBuilder::build`] makes it. Builder settings win over the environment.
///
/// ```
/// use std::time::Duration;
/// use ferrocomm::{Backend, Team};
/// # fn main() -> Result<(), ferrocomm::Error> {
/// // Three ranks on the CPU emulator, whatever the machine has. With `Backend::Cuda` they are one per GPU,
/// // or share GPU 0 of a one-GPU machine.
/// let team = Team::builder().backend(Backend::Emulator).world(3).timeout(Duration::from_secs(5)).build()?;
/// assert_eq!((team.world(), team.backend()), (3, Backend::Emulator));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct TeamBuilder {
    backend: Option<Backend>,
    devices: Option<Vec<usize>>,
    world: Option<usize>,
    ranks_per_gpu: Option<usize>,
    timeout: Option<Duration>,
    emulator: EmulatorOptions,
    programmatic_launch: Option<bool>,
    job: Option<JobEnv>,
    single_process: bool,
    trace: Option<bool>,
    trace_dir: Option<std::path::PathBuf>,
    trace_capacity: Option<usize>,
    nvshmem: bool,
}

/// What a builder resolved to, before anything is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub backend: Backend,
    /// The device of each rank (ranks sharing a GPU are consecutive).
    pub devices: Vec<Device>,
    /// CUDA: the distinct GPU ordinals in use. Emulator: `0..gpus`.
    pub gpus: Vec<usize>,
    pub timeout: Duration,
    /// Whether `#[kernel]`s launch with programmatic dependent launch where the GPU has it.
    pub programmatic_launch: bool,
    /// Why this backend (for the log).
    pub why: String,
    /// Trace mode (`None`: off).
    pub trace: Option<TraceConfig>,
    /// Whether the team initialises NVSHMEM (CUDA only; see [`TeamBuilder::nvshmem`]).
    pub nvshmem: bool,
}

impl TeamBuilder {
    /// A builder with nothing chosen: everything comes from the environment or the defaults.
    pub fn new() -> Self {
        TeamBuilder::default()
    }

    /// Runs on this backend instead of what `FERROCOMM_BACKEND` (or auto-detection) picks.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Uses these GPUs (driver ordinals), in this order. On the emulator only their number counts.
    pub fn devices(mut self, ordinals: impl IntoIterator<Item = usize>) -> Self {
        self.devices = Some(ordinals.into_iter().collect());
        self
    }

    /// Uses every GPU the driver sees (the default).
    pub fn all_devices(mut self) -> Self {
        self.devices = None;
        self
    }

    /// The number of ranks. Without [`TeamBuilder::ranks_per_gpu`]: the first `world` GPUs, or, when
    /// there are fewer GPUs, `world / gpus` ranks on each (which must divide evenly).
    pub fn world(mut self, world: usize) -> Self {
        self.world = Some(world);
        self
    }

    /// Puts `n` ranks on each GPU; each has its own memory, stream and module instance, and the kernels
    /// of all of them must be co-resident (checked at launch for kernels that wait).
    pub fn ranks_per_gpu(mut self, n: usize) -> Self {
        self.ranks_per_gpu = Some(n);
        self
    }

    /// How long a device wait spins before it records a timeout and ends its kernel (default 2 s on GPUs
    /// and 20 s on the emulator, or `FERROCOMM_TIMEOUT_MS`). The host gives up on a stream after this
    /// (per launch still queued) plus one second.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// On the emulator, whether its checker watches every launch (default: yes, unless
    /// `FERROCOMM_EMU_CHECK=0`): it reports races on put destinations, overwritten put sources, waits on
    /// signals no rank raised and mismatched barrier epochs as device errors. Turn it off for kernels that
    /// race on purpose (a weakened litmus test). GPUs ignore it.
    pub fn emulator_checker(mut self, on: bool) -> Self {
        self.emulator.checker = Some(on);
        self
    }

    /// On the emulator, makes rank `rank` late to everything: its threads start every launch `delay` late,
    /// wait `delay` before each release that reaches beyond their block (signal raises, release stores,
    /// `.gpu` and `.sys` fences) and before and after each wait (signal waits; LL reads, before only). Its
    /// peers run ahead as far as their waits let them, so a wait on a stale epoch or value reads before the
    /// late rank's data is there, and a buffer reused too soon is overwritten before the late rank reads it,
    /// every time: a test of a kernel's waits. GPUs ignore it.
    pub fn emulator_late_rank(mut self, rank: usize, delay: Duration) -> Self {
        self.emulator.late = Some(LateRank { rank: rank as u32, delay });
        self
    }

    /// On GPUs of compute capability 9.0 and up, whether `#[kernel]`s are launched with programmatic
    /// dependent launch (default: yes, unless `FERROCOMM_PDL=0`): a kernel's blocks start while the
    /// previous kernel of the stream finishes and wait for it in their entry (`griddepcontrol.wait`), which
    /// hides most of the launch latency between back-to-back collectives. Results are the same either way.
    pub fn programmatic_launch(mut self, on: bool) -> Self {
        self.programmatic_launch = Some(on);
        self
    }

    /// Whether the team records device traces (default: `FERROCOMM_TRACE=1` says; see [`crate::trace`]):
    /// kernels then run their crate's traced flavour on GPUs, every launch's events are collected when it is
    /// waited for, and the dropped team writes a Perfetto/Chrome trace JSON into `FERROCOMM_TRACE_DIR`
    /// (default: the working directory) or [`TeamBuilder::trace_dir`].
    pub fn trace(mut self, on: bool) -> Self {
        self.trace = Some(on);
        self
    }

    /// Where a traced team writes its trace when dropped (a directory).
    pub fn trace_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.trace_dir = Some(dir.into());
        self
    }

    /// Events each rank's trace ring holds per launch (default 65536, or `FERROCOMM_TRACE_EVENTS`); more are
    /// counted as lost ([`Team::trace_lost`]).
    pub fn trace_capacity(mut self, events: usize) -> Self {
        self.trace_capacity = Some(events);
        self
    }

    /// Makes this process one rank of the job `job` describes (a team that spans processes, one rank each):
    /// what [`TeamBuilder::build`] does by itself when a launcher's variables are set (torchrun, Open MPI,
    /// Slurm, `ferrocomm launch`, or `FERROCOMM_RANK` and friends; see `ferrocomm_bootstrap::JobEnv`).
    pub fn job(mut self, job: JobEnv) -> Self {
        self.job = Some(job);
        self
    }

    /// Initialises NVSHMEM for the team (see [`crate::nvshmem`]): symmetric memory comes from NVSHMEM's heap,
    /// kernels run their crate's NVSHMEM flavour, and ranks are PEs, so kernels reach peers on other nodes
    /// through NVSHMEM's transports. NVSHMEM runs one PE per process: the team is one rank in this process, or
    /// one per process of a job (mpirun, srun, torchrun, `ferrocomm launch`), rank 0's unique id carried to
    /// the others over the job's rendezvous. On the emulator nothing changes: it implements the NVSHMEM
    /// calls on its own memory.
    pub fn nvshmem(mut self, on: bool) -> Self {
        self.nvshmem = on;
        self
    }

    /// A team of this process's GPUs alone, even when a launcher's variables say the process is one rank
    /// of a larger job.
    pub fn single_process(mut self) -> Self {
        self.single_process = true;
        self
    }

    /// Builds the team: finds this process's place in its job (a launcher's variables, or every visible GPU
    /// of one process), opens the backend and, across processes, meets every rank at the rendezvous.
    pub fn build(self) -> Result<Team, Error> {
        let env = |var: &str| std::env::var(var).ok();
        let job = match (&self.job, self.single_process) {
            (Some(job), _) => Some(job.clone()),
            (None, true) => None,
            (None, false) => JobEnv::from_env()?,
        };
        if let Some(job) = job {
            if self.world.is_some_and(|w| w != job.world) {
                return Err(Error::TeamConfig {
                    reason: format!(
                        "the builder asks for {} ranks but the job has {} processes; leave the world unset in a job \
                         of several processes (or call single_process())",
                        self.world.unwrap_or_default(),
                        job.world
                    ),
                });
            }
            // The plan for this process's one rank: its backend, the GPUs it may pick from, the timeout.
            let plan = self.clone().world_unset().plan(env, || system::driver().map(|d| d.gpu_count))?;
            return process::create(plan, &job, self.ranks_per_gpu, self.emulator, env);
        }
        let plan = self.plan(env, || system::driver().map(|d| d.gpu_count))?;
        tracing::info!(
            backend = %plan.backend,
            world = plan.devices.len(),
            timeout_ms = plan.timeout.as_millis() as u64,
            "ferrocomm team on {}: {}",
            plan.backend,
            plan.why
        );
        create(plan, self.emulator)
    }

    /// Resolves the builder against an environment and a GPU probe (both injected so tests need neither).
    fn world_unset(mut self) -> Self {
        self.world = None;
        self.ranks_per_gpu = None;
        self
    }

    pub(crate) fn plan(
        &self,
        env: impl Fn(&str) -> Option<String>,
        probe: impl Fn() -> Result<usize, Error>,
    ) -> Result<Plan, Error> {
        let (backend, why, gpu_count) = match self.backend.map(Ok).or_else(|| backend_from_env(&env).transpose()) {
            Some(Ok(Backend::Cuda)) => (Backend::Cuda, "requested".to_owned(), Some(probe()?)),
            Some(Ok(Backend::Emulator)) => (Backend::Emulator, "requested".to_owned(), None),
            Some(Err(e)) => return Err(e),
            None => match probe() {
                Ok(n) => (Backend::Cuda, format!("auto: the driver sees {n} GPU(s)"), Some(n)),
                Err(e) => (Backend::Emulator, format!("auto: no GPU to use ({e})"), None),
            },
        };
        let timeout = match self.timeout {
            Some(t) => t,
            None => match env(TIMEOUT_ENV).filter(|v| !v.trim().is_empty()) {
                Some(v) => v.trim().parse::<u64>().map(Duration::from_millis).map_err(|_| Error::BadEnv {
                    var: TIMEOUT_ENV,
                    value: v.clone(),
                    expected: "a whole number of milliseconds, e.g. 2000",
                })?,
                None if backend == Backend::Emulator => EMULATOR_DEFAULT_TIMEOUT,
                None => DEFAULT_TIMEOUT,
            },
        };
        if timeout.is_zero() {
            return Err(Error::TeamConfig { reason: "the timeout must be longer than zero".into() });
        }
        let world = match self.world {
            Some(w) => Some(w),
            None => match env(WORLD_ENV).filter(|v| !v.trim().is_empty()) {
                Some(v) => Some(v.trim().parse::<usize>().map_err(|_| Error::BadEnv {
                    var: WORLD_ENV,
                    value: v.clone(),
                    expected: "a number of ranks, e.g. 2",
                })?),
                None => None,
            },
        };
        let ordinals: Option<Vec<usize>> = match (backend, &self.devices, gpu_count) {
            (Backend::Cuda, Some(list), Some(count)) => {
                if let Some(&ordinal) = list.iter().find(|&&o| o >= count) {
                    return Err(Error::NoSuchGpu { ordinal, count });
                }
                Some(list.clone())
            }
            (Backend::Cuda, None, Some(count)) => Some((0..count).collect()),
            (_, list, _) => list.as_ref().map(|l| (0..l.len()).collect()),
        };
        if let Some(list) = &ordinals {
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if sorted.len() != list.len() {
                return Err(Error::TeamConfig {
                    reason: format!(
                        "GPU list {list:?} names a GPU twice; use ranks_per_gpu to put several ranks on one GPU"
                    ),
                });
            }
            if list.is_empty() {
                return Err(Error::TeamConfig { reason: "the GPU list is empty; name at least one GPU".into() });
            }
        }
        let (gpus, per_gpu) = layout(ordinals, world, self.ranks_per_gpu)?;
        let devices = (0..gpus.len() * per_gpu)
            .map(|rank| {
                let gpu = rank / per_gpu;
                match backend {
                    Backend::Cuda => Device::Cuda { ordinal: gpus[gpu] },
                    Backend::Emulator => Device::Emulated { gpu },
                }
            })
            .collect();
        let programmatic_launch = match self.programmatic_launch {
            Some(on) => on,
            None => match env(PDL_ENV).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) {
                None => true,
                Some(v) if v == "1" => true,
                Some(v) if v == "0" => false,
                Some(v) => return Err(Error::BadEnv { var: PDL_ENV, value: v, expected: "0 or 1" }),
            },
        };
        let trace = TraceConfig::resolve(self.trace, self.trace_dir.clone(), self.trace_capacity, &env)?;
        let nvshmem = self.nvshmem && backend == Backend::Cuda;
        Ok(Plan { backend, devices, gpus, timeout, programmatic_launch, why, trace, nvshmem })
    }
}

fn backend_from_env(env: &impl Fn(&str) -> Option<String>) -> Result<Option<Backend>, Error> {
    let Some(value) = env(BACKEND_ENV) else { return Ok(None) };
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => Ok(None),
        "cuda" | "gpu" => Ok(Some(Backend::Cuda)),
        "emulator" | "emu" | "cpu" => Ok(Some(Backend::Emulator)),
        _ => Err(Error::BadEnv { var: BACKEND_ENV, value, expected: "cuda, emulator or auto" }),
    }
}

/// Picks the GPUs and ranks per GPU: `(gpus used, ranks per gpu)`.
fn layout(
    ordinals: Option<Vec<usize>>,
    world: Option<usize>,
    per_gpu: Option<usize>,
) -> Result<(Vec<usize>, usize), Error> {
    let bad = |reason: String| Err(Error::TeamConfig { reason });
    if world == Some(0) {
        return bad("a team needs at least one rank; set world to 1 or more".into());
    }
    if per_gpu == Some(0) {
        return bad("ranks_per_gpu must be at least 1".into());
    }
    let (gpus, k) = match (ordinals, world, per_gpu) {
        // Emulator with nothing but (maybe) a world: one emulated GPU per rank unless told otherwise.
        (None, world, per_gpu) => {
            let k = per_gpu.unwrap_or(1);
            let world = world.unwrap_or(DEFAULT_WORLD * k);
            if world % k != 0 {
                return bad(format!("world {world} is not a multiple of ranks_per_gpu {k}"));
            }
            ((0..world / k).collect(), k)
        }
        (Some(list), None, per_gpu) => (list, per_gpu.unwrap_or(1)),
        (Some(list), Some(world), Some(k)) => {
            if world % k != 0 || world / k > list.len() {
                return bad(format!(
                    "world {world} with {k} rank(s) per GPU needs {} GPU(s); {} are available",
                    world.div_ceil(k),
                    list.len()
                ));
            }
            (list[..world / k].to_vec(), k)
        }
        (Some(list), Some(world), None) => {
            if world <= list.len() {
                (list[..world].to_vec(), 1)
            } else if world % list.len() == 0 {
                let k = world / list.len();
                (list, k)
            } else {
                return bad(format!(
                    "world {world} cannot be spread evenly over {} GPU(s); choose a multiple of the GPU count or set \
                     ranks_per_gpu",
                    list.len()
                ));
            }
        }
    };
    if gpus.len() * k > u32::MAX as usize {
        return bad("more ranks than a u32 can count".into());
    }
    Ok((gpus, k))
}

fn create(plan: Plan, emulator: EmulatorOptions) -> Result<Team, Error> {
    let world = plan.devices.len();
    let local: Vec<usize> = (0..world).collect();
    if plan.nvshmem && world != 1 {
        return Err(Error::TeamConfig {
            reason: format!(
                "an NVSHMEM team has one rank per process, and this one asks for {world} in one process: start one \
                 process per GPU (mpirun, srun, torchrun or `ferrocomm launch`), or use world(1)"
            ),
        });
    }
    let exec: Box<dyn Exec> = match plan.backend {
        Backend::Cuda => {
            let rank_gpu: Vec<usize> = plan
                .devices
                .iter()
                .map(|d| match d {
                    Device::Cuda { ordinal } => plan.gpus.iter().position(|o| o == ordinal).unwrap_or(0),
                    Device::Emulated { gpu } => *gpu,
                })
                .collect();
            Box::new(CudaTeam::new(&plan.gpus, &rank_gpu, plan.programmatic_launch)?)
        }
        Backend::Emulator => Box::new(EmuTeam::new(&local, emulator, Box::new(PrivateHeap))?),
    };
    // One PE alone: its own unique id, no exchange.
    let nvshmem: Option<Box<dyn SymmetricHeap>> = if plan.nvshmem {
        exec.make_current(0)?;
        Some(Box::new(crate::nvshmem::Nvshmem::init(0, 1, &crate::nvshmem::unique_id()?)?))
    } else {
        None
    };
    let mut shared = TeamShared::new(plan.backend, world, local, plan.timeout, plan.devices, exec, None, nvshmem)?;
    if let Some(config) = plan.trace {
        shared.enable_trace(config)?;
    }
    Ok(Team { shared: Arc::new(shared) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |var| pairs.iter().find(|(k, _)| *k == var).map(|(_, v)| (*v).to_owned())
    }

    fn no_gpu() -> Result<usize, Error> {
        Err(Error::NoDriver)
    }

    #[test]
    fn auto_falls_back_to_the_emulator_and_says_why() {
        let plan = TeamBuilder::new().plan(env_of(&[]), no_gpu).unwrap();
        assert_eq!(plan.backend, Backend::Emulator);
        assert_eq!(plan.devices.len(), DEFAULT_WORLD);
        assert!(plan.why.contains("no CUDA driver"), "{}", plan.why);
        assert_eq!(plan.timeout, EMULATOR_DEFAULT_TIMEOUT);
    }

    #[test]
    fn auto_picks_every_gpu_when_there_are_some() {
        let plan = TeamBuilder::new().plan(env_of(&[]), || Ok(4)).unwrap();
        assert_eq!(plan.backend, Backend::Cuda);
        assert_eq!(plan.gpus, vec![0, 1, 2, 3]);
        assert_eq!(plan.devices[3], Device::Cuda { ordinal: 3 });
        assert_eq!(plan.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn environment_chooses_backend_timeout_and_world() {
        let env = env_of(&[(BACKEND_ENV, "Emulator"), (TIMEOUT_ENV, "150"), (WORLD_ENV, "4")]);
        let plan = TeamBuilder::new().plan(env, || Ok(8)).unwrap();
        assert_eq!(plan.backend, Backend::Emulator);
        assert_eq!(plan.timeout, Duration::from_millis(150));
        assert_eq!(plan.devices.len(), 4);
        // The builder wins over the environment.
        let env = env_of(&[(BACKEND_ENV, "cuda"), (TIMEOUT_ENV, "150")]);
        let plan = TeamBuilder::new().backend(Backend::Emulator).timeout(Duration::from_secs(9)).plan(env, no_gpu);
        assert_eq!(plan.unwrap().timeout, Duration::from_secs(9));
    }

    #[test]
    fn bad_environment_values_name_the_variable() {
        let e = TeamBuilder::new().plan(env_of(&[(BACKEND_ENV, "tpu")]), no_gpu).unwrap_err();
        assert!(e.to_string().contains("FERROCOMM_BACKEND=\"tpu\""), "{e}");
        let e = TeamBuilder::new().plan(env_of(&[(TIMEOUT_ENV, "2s")]), no_gpu).unwrap_err();
        assert!(e.to_string().contains("milliseconds"), "{e}");
        let e = TeamBuilder::new().plan(env_of(&[(TIMEOUT_ENV, "0")]), no_gpu).unwrap_err();
        assert!(e.to_string().contains("longer than zero"), "{e}");
    }

    #[test]
    fn programmatic_launch_is_on_unless_switched_off() {
        let plan = |b: TeamBuilder, env| b.plan(env, || Ok(2)).unwrap().programmatic_launch;
        assert!(plan(TeamBuilder::new(), env_of(&[])));
        assert!(!plan(TeamBuilder::new(), env_of(&[(PDL_ENV, "0")])));
        assert!(plan(TeamBuilder::new().programmatic_launch(true), env_of(&[(PDL_ENV, "0")])), "the builder wins");
        let e = TeamBuilder::new().plan(env_of(&[(PDL_ENV, "yes")]), || Ok(2)).unwrap_err();
        assert!(e.to_string().contains("FERROCOMM_PDL=\"yes\"") && e.to_string().contains("0 or 1"), "{e}");
    }

    #[test]
    fn cuda_requested_without_a_driver_is_an_error() {
        let e = TeamBuilder::new().backend(Backend::Cuda).plan(env_of(&[]), no_gpu).unwrap_err();
        assert!(matches!(e, Error::NoDriver), "{e}");
    }

    #[test]
    fn ranks_spread_over_gpus() {
        let b = || TeamBuilder::new().backend(Backend::Cuda);
        // Two ranks on a one-GPU machine share GPU 0.
        let plan = b().world(2).plan(env_of(&[]), || Ok(1)).unwrap();
        assert_eq!(plan.devices, vec![Device::Cuda { ordinal: 0 }; 2]);
        // Two ranks on a four-GPU machine take the first two.
        let plan = b().world(2).plan(env_of(&[]), || Ok(4)).unwrap();
        assert_eq!(plan.gpus, vec![0, 1]);
        // Chosen GPUs, two ranks each, consecutive ranks on one GPU.
        let plan = b().devices([3, 1]).ranks_per_gpu(2).plan(env_of(&[]), || Ok(4)).unwrap();
        let ordinals: Vec<_> = plan.devices.iter().map(|d| d.to_string()).collect();
        assert_eq!(ordinals, ["GPU 3", "GPU 3", "GPU 1", "GPU 1"]);
    }

    #[test]
    fn impossible_layouts_are_explained() {
        let b = || TeamBuilder::new().backend(Backend::Cuda);
        let msg = |r: Result<Plan, Error>| r.unwrap_err().to_string();
        assert!(msg(b().world(3).plan(env_of(&[]), || Ok(2))).contains("spread evenly"));
        assert!(msg(b().devices([0, 0]).plan(env_of(&[]), || Ok(2))).contains("twice"));
        assert!(msg(b().devices([5]).plan(env_of(&[]), || Ok(2))).contains("GPU 5 was requested"));
        assert!(msg(b().world(0).plan(env_of(&[]), || Ok(2))).contains("at least one rank"));
        assert!(msg(b().world(6).ranks_per_gpu(2).plan(env_of(&[]), || Ok(2))).contains("needs 3 GPU(s)"));
        let emu = TeamBuilder::new().backend(Backend::Emulator);
        assert!(msg(emu.world(3).ranks_per_gpu(2).plan(env_of(&[]), no_gpu)).contains("not a multiple"));
    }

    #[test]
    fn emulated_ranks_can_share_an_emulated_gpu() {
        let plan =
            TeamBuilder::new().backend(Backend::Emulator).world(4).ranks_per_gpu(2).plan(env_of(&[]), no_gpu).unwrap();
        assert_eq!(plan.devices[1], Device::Emulated { gpu: 0 });
        assert_eq!(plan.devices[2], Device::Emulated { gpu: 1 });
    }
}
