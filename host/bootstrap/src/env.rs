//! [`JobEnv`]: the job's layout — this process's rank, the world size, the local ranks, where the
//! rendezvous is — read from the variables a launcher sets.
//!
//! | field | `FERROCOMM_*` (wins) | torchrun | Open MPI | Slurm |
//! | --- | --- | --- | --- | --- |
//! | rank | `FERROCOMM_RANK` | `RANK` | `OMPI_COMM_WORLD_RANK` | `SLURM_PROCID` |
//! | world | `FERROCOMM_WORLD_SIZE` | `WORLD_SIZE` | `OMPI_COMM_WORLD_SIZE` | `SLURM_NTASKS` |
//! | local rank | `FERROCOMM_LOCAL_RANK` | `LOCAL_RANK` | `OMPI_COMM_WORLD_LOCAL_RANK` | `SLURM_LOCALID` |
//! | local world | `FERROCOMM_LOCAL_WORLD_SIZE` | `LOCAL_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_SIZE` | `SLURM_TASKS_PER_NODE` (with `SLURM_NODEID`), else `SLURM_NTASKS_PER_NODE`, else all tasks on one node |
//! | rendezvous | `FERROCOMM_RENDEZVOUS=host:port` | `MASTER_ADDR`:`MASTER_PORT`+1 | see below | see below |
//!
//! The launcher is the first of torchrun, Open MPI and Slurm whose variables are present (so `srun
//! torchrun ...` and `mpirun` inside a Slurm allocation read the inner launcher), else
//! [`Launcher::Explicit`] when `FERROCOMM_RANK` or `FERROCOMM_WORLD_SIZE` is set. Each `FERROCOMM_*`
//! variable overrides its field whatever the launcher. With explicit variables alone, the local fields
//! default to "every rank on this host", and the rendezvous is `FERROCOMM_RENDEZVOUS`, else
//! `MASTER_ADDR`:`MASTER_PORT`+1.
//!
//! The rendezvous is a TCP service hosted by rank 0. It never uses `MASTER_PORT` itself: torch's own
//! TCPStore listens there in the same job. Under Open MPI and Slurm without `FERROCOMM_RENDEZVOUS` it is
//! `MASTER_ADDR` (else `127.0.0.1`) with `MASTER_PORT`+1 when that is set, else a port in 20000..40000
//! derived from the job id (`OMPI_MCA_ess_base_jobid` or `PMIX_NAMESPACE`; `SLURM_JOB_ID` and
//! `SLURM_STEP_ID`). That default suits a job on one node; a multi-node MPI or Slurm job sets
//! `FERROCOMM_RENDEZVOUS` to rank 0's host.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::error::BootstrapError;
use crate::slurm;

/// Which launcher started the job (where the layout was read from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Launcher {
    /// PyTorch's `torchrun` (torch elastic): `RANK`, `WORLD_SIZE`, `MASTER_ADDR`...
    Torchrun,
    /// Open MPI's `mpirun`: `OMPI_COMM_WORLD_*`.
    OpenMpi,
    /// Slurm's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`...
    Slurm,
    /// Set by code ([`JobEnv::explicit`]) or by `FERROCOMM_RANK` / `FERROCOMM_WORLD_SIZE` alone.
    Explicit,
}

impl std::fmt::Display for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Launcher::Torchrun => "torchrun",
            Launcher::OpenMpi => "Open MPI",
            Launcher::Slurm => "Slurm",
            Launcher::Explicit => "explicit (FERROCOMM_*)",
        })
    }
}

/// The layout of a job as one of its processes sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    /// This process's rank, in `0..world`.
    pub rank: usize,
    /// The number of processes in the job.
    pub world: usize,
    /// This process's rank among those of its host, in `0..local_world`.
    pub local_rank: usize,
    /// The number of processes of the job on this host.
    pub local_world: usize,
    /// Where rank 0 hosts the rendezvous (rank 0 listens on its port).
    pub rendezvous: SocketAddr,
    /// A string all processes of the job agree on and no other running job has; names Unix sockets.
    pub job_key: String,
    /// Where the layout came from.
    pub launcher: Launcher,
    /// This host's name, by which the rendezvous groups ranks into hosts; a test may set it to fake a
    /// multi-host job.
    pub host: String,
}

/// The variable names of one launcher's layout fields.
struct Names {
    rank: &'static str,
    world: &'static str,
    local_rank: &'static str,
    local_world: &'static str,
}

const EXPLICIT: Names = Names {
    rank: "FERROCOMM_RANK",
    world: "FERROCOMM_WORLD_SIZE",
    local_rank: "FERROCOMM_LOCAL_RANK",
    local_world: "FERROCOMM_LOCAL_WORLD_SIZE",
};
const TORCHRUN: Names =
    Names { rank: "RANK", world: "WORLD_SIZE", local_rank: "LOCAL_RANK", local_world: "LOCAL_WORLD_SIZE" };
const OPEN_MPI: Names = Names {
    rank: "OMPI_COMM_WORLD_RANK",
    world: "OMPI_COMM_WORLD_SIZE",
    local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
    local_world: "OMPI_COMM_WORLD_LOCAL_SIZE",
};
// Slurm's local world is not one variable (see `slurm::local_world`); the name is for messages.
const SLURM: Names = Names {
    rank: "SLURM_PROCID",
    world: "SLURM_NTASKS",
    local_rank: "SLURM_LOCALID",
    local_world: "SLURM_TASKS_PER_NODE",
};

/// The environment as a lookup function; values that are empty after trimming count as unset, since
/// `export VAR=` is how shells often clear a variable.
pub(crate) struct Vars<'a>(pub(crate) &'a dyn Fn(&str) -> Option<String>);

impl Vars<'_> {
    pub(crate) fn get(&self, var: &str) -> Option<String> {
        (self.0)(var).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    pub(crate) fn num(&self, var: &'static str) -> Result<Option<usize>, BootstrapError> {
        self.get(var).map(|value| parse_num(var, &value)).transpose()
    }

    /// The layout field from `FERROCOMM_*` if set, else from the launcher's variable; with the name of
    /// the variable it came from, for messages.
    fn field(&self, ours: &'static str, theirs: &'static str) -> Result<Option<(usize, &'static str)>, BootstrapError> {
        for var in [ours, theirs] {
            if let Some(n) = self.num(var)? {
                return Ok(Some((n, var)));
            }
        }
        Ok(None)
    }
}

pub(crate) fn parse_num(var: &'static str, value: &str) -> Result<usize, BootstrapError> {
    value.parse().map_err(|_| BootstrapError::BadVar {
        var,
        value: value.to_owned(),
        why: "not a non-negative integer".into(),
        fix: format!("set {var} to a number such as 0, or unset it"),
    })
}

impl JobEnv {
    /// The layout from this process's environment; `None` when no launcher variables are set (a
    /// single-process job).
    pub fn from_env() -> Result<Option<JobEnv>, BootstrapError> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// The same as [`JobEnv::from_env`] from any lookup function, so tests need not change the process
    /// environment.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<JobEnv>, BootstrapError> {
        let vars = Vars(&get);
        let any = |names: &[&str]| names.iter().any(|n| vars.get(n).is_some());
        let launcher = if any(&[TORCHRUN.rank, TORCHRUN.world, TORCHRUN.local_rank, TORCHRUN.local_world]) {
            Launcher::Torchrun
        } else if any(&[OPEN_MPI.rank, OPEN_MPI.world, OPEN_MPI.local_rank, OPEN_MPI.local_world]) {
            Launcher::OpenMpi
        } else if any(&[SLURM.rank]) {
            // SLURM_NTASKS alone is also set in an salloc shell; SLURM_PROCID marks a task of a step.
            Launcher::Slurm
        } else if any(&[EXPLICIT.rank, EXPLICIT.world]) {
            Launcher::Explicit
        } else if any(&[EXPLICIT.local_rank, EXPLICIT.local_world]) {
            return Err(missing(&vars, Launcher::Explicit, EXPLICIT.rank));
        } else {
            return Ok(None);
        };
        let names = match launcher {
            Launcher::Torchrun => &TORCHRUN,
            Launcher::OpenMpi => &OPEN_MPI,
            Launcher::Slurm => &SLURM,
            Launcher::Explicit => &EXPLICIT,
        };
        let need = |field: Option<(usize, &'static str)>, theirs: &'static str| {
            field.ok_or_else(|| missing(&vars, launcher, theirs))
        };
        let (rank, rank_var) = need(vars.field(EXPLICIT.rank, names.rank)?, names.rank)?;
        let (world, world_var) = need(vars.field(EXPLICIT.world, names.world)?, names.world)?;
        let local_rank = vars.field(EXPLICIT.local_rank, names.local_rank)?;
        let local_world = match launcher {
            Launcher::Slurm => match vars.num(EXPLICIT.local_world)? {
                Some(n) => Some((n, EXPLICIT.local_world)),
                None => Some(slurm::local_world(&vars, world)?),
            },
            _ => vars.field(EXPLICIT.local_world, names.local_world)?,
        };
        let ((local_rank, lr_var), (local_world, lw_var)) = match (local_rank, local_world, launcher) {
            (Some(lr), Some(lw), _) => (lr, lw),
            // Explicit variables alone describe one host unless they say otherwise.
            (None, None, Launcher::Explicit) => ((rank, rank_var), (world, world_var)),
            (None, _, _) => return Err(missing(&vars, launcher, names.local_rank)),
            (Some(_), None, _) => return Err(missing(&vars, launcher, names.local_world)),
        };
        validate([(rank, rank_var), (world, world_var), (local_rank, lr_var), (local_world, lw_var)])?;
        let (rendezvous, job_ids) = rendezvous(&vars, launcher)?;
        Ok(Some(JobEnv {
            rank,
            world,
            local_rank,
            local_world,
            rendezvous,
            job_key: job_key(rendezvous, &job_ids),
            launcher,
            host: this_host(),
        }))
    }

    /// A layout set by code, e.g. by a launcher of one's own; the job key is derived from the rendezvous
    /// address, which is then unique to the job while it runs.
    pub fn explicit(
        rank: usize,
        world: usize,
        local_rank: usize,
        local_world: usize,
        rendezvous: SocketAddr,
    ) -> Result<JobEnv, BootstrapError> {
        validate([(rank, "rank"), (world, "world"), (local_rank, "local_rank"), (local_world, "local_world")])?;
        Ok(JobEnv {
            rank,
            world,
            local_rank,
            local_world,
            rendezvous,
            job_key: job_key(rendezvous, &[]),
            launcher: Launcher::Explicit,
            host: this_host(),
        })
    }
}

/// The error for a launcher whose variable `absent` is missing, naming the ones that are present.
fn missing(vars: &Vars<'_>, launcher: Launcher, absent: &'static str) -> BootstrapError {
    let names: &[&str] = match launcher {
        Launcher::Torchrun => &["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"],
        Launcher::OpenMpi => &[OPEN_MPI.rank, OPEN_MPI.world, OPEN_MPI.local_rank, OPEN_MPI.local_world],
        Launcher::Slurm => &[SLURM.rank, SLURM.world, SLURM.local_rank],
        Launcher::Explicit => &[EXPLICIT.rank, EXPLICIT.world, EXPLICIT.local_rank, EXPLICIT.local_world],
    };
    let set: Vec<&str> = names.iter().copied().filter(|n| vars.get(n).is_some()).collect();
    let present = match set.as_slice() {
        [one] => format!("{one} is"),
        many => format!("{} are", many.join(", ")),
    };
    let fix = if absent == "FERROCOMM_RENDEZVOUS" {
        "set FERROCOMM_RENDEZVOUS=host:port (rank 0's host, a free port, the same on every rank)".to_owned()
    } else {
        format!("set {absent} too (or its FERROCOMM_ counterpart), or unset the others for a single-process run")
    };
    BootstrapError::MissingVar { launcher, present, missing: absent, fix }
}

/// Checks that `[rank, world, local_rank, local_world]` (each with the name it came from) add up.
fn validate(f: [(usize, &'static str); 4]) -> Result<(), BootstrapError> {
    let [(rank, rank_var), (world, world_var), (local_rank, lr_var), (local_world, lw_var)] = f;
    for (n, var) in [(world, world_var), (local_world, lw_var)] {
        if n == 0 {
            let why = "a job has at least one rank".into();
            return Err(BootstrapError::BadVar { var, value: "0".into(), why, fix: format!("set {var} to 1 or more") });
        }
    }
    if rank >= world {
        let origin = format!("{rank_var}={rank}, {world_var}={world}");
        return Err(BootstrapError::RankOutOfRange { rank, world, origin });
    }
    if local_rank >= local_world {
        let detail = format!("{lr_var}={local_rank} is not below {lw_var}={local_world}");
        return Err(BootstrapError::BadLayout { detail });
    }
    if local_world > world {
        let detail = format!(
            "{lw_var}={local_world} is more than {world_var}={world}: a host cannot run more ranks than the job has"
        );
        return Err(BootstrapError::BadLayout { detail });
    }
    Ok(())
}

/// The rendezvous address and the job ids that, with it, make the job key.
fn rendezvous(vars: &Vars<'_>, launcher: Launcher) -> Result<(SocketAddr, Vec<String>), BootstrapError> {
    let ids: &[&str] = match launcher {
        Launcher::Torchrun => &["TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"],
        Launcher::OpenMpi => &["OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"],
        Launcher::Slurm => &["SLURM_JOB_ID", "SLURM_STEP_ID"],
        Launcher::Explicit => &[],
    };
    let ids: Vec<String> = ids.iter().filter_map(|v| vars.get(v).map(|x| format!("{v}={x}"))).collect();
    if let Some(spec) = vars.get("FERROCOMM_RENDEZVOUS") {
        return Ok((resolve("FERROCOMM_RENDEZVOUS", &spec)?, ids));
    }
    let master_port = match vars.get("MASTER_PORT") {
        None => None,
        // One above torch's store port, which torch's TCPStore holds in the same job.
        Some(value) => match value.parse::<u16>() {
            Ok(65535) => {
                let why = "the rendezvous uses MASTER_PORT + 1, and 65535 is the last port".into();
                let fix = "use a lower MASTER_PORT, or set FERROCOMM_RENDEZVOUS=host:port".into();
                return Err(BootstrapError::BadVar { var: "MASTER_PORT", value, why, fix });
            }
            Ok(port) => Some(port + 1),
            Err(_) => {
                let why = "not a port number (0..65535)".into();
                let fix = "set MASTER_PORT to a free port such as 29500".into();
                return Err(BootstrapError::BadVar { var: "MASTER_PORT", value, why, fix });
            }
        },
    };
    let master_addr = vars.get("MASTER_ADDR");
    let (host, port) = match (launcher, master_addr, master_port) {
        (_, Some(addr), Some(port)) => (addr, port),
        (Launcher::Torchrun, None, _) => return Err(missing(vars, launcher, "MASTER_ADDR")),
        (Launcher::Torchrun, Some(_), None) => return Err(missing(vars, launcher, "MASTER_PORT")),
        (Launcher::Explicit, _, _) => return Err(missing(vars, launcher, "FERROCOMM_RENDEZVOUS")),
        (Launcher::OpenMpi | Launcher::Slurm, addr, port) => {
            let port = match port {
                Some(port) => port,
                None if ids.is_empty() => return Err(missing(vars, launcher, "FERROCOMM_RENDEZVOUS")),
                // A single-node default: every rank derives the same port from the job id alone.
                None => 20000 + (fnv1a(ids.join("|").as_bytes()) % 20000) as u16,
            };
            (addr.unwrap_or_else(|| "127.0.0.1".into()), port)
        }
    };
    let var = if vars.get("MASTER_ADDR").is_some() { "MASTER_ADDR" } else { "FERROCOMM_RENDEZVOUS" };
    // An IPv6 literal needs brackets before a port is appended.
    let spec = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok((resolve(var, &spec)?, ids))
}

/// Resolves `host:port`, preferring IPv4 so that every rank picks the same family as rank 0 binds.
fn resolve(var: &'static str, spec: &str) -> Result<SocketAddr, BootstrapError> {
    if let Ok(addr) = spec.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if spec.rsplit_once(':').is_none_or(|(_, port)| port.parse::<u16>().is_err()) {
        let why = "not host:port".into();
        let fix = format!("set {var} like 10.0.0.1:29600 or node-1:29600");
        return Err(BootstrapError::BadVar { var, value: spec.to_owned(), why, fix });
    }
    let fail = |source| BootstrapError::Unresolvable { var, value: spec.to_owned(), source };
    let addrs: Vec<SocketAddr> = spec.to_socket_addrs().map_err(fail)?.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| fail(std::io::Error::new(std::io::ErrorKind::NotFound, "no address")))
}

/// The job key: a hash of the rendezvous address and the launcher's job ids, short enough for a socket
/// name (the abstract namespace allows 107 bytes).
fn job_key(rendezvous: SocketAddr, ids: &[String]) -> String {
    format!("{:016x}", fnv1a(format!("{rendezvous}|{}", ids.join("|")).as_bytes()))
}

/// FNV-1a: stable across builds and languages, unlike std's hasher, so every process derives the same
/// port and key.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// This host's name; if the call fails, one name for every such rank keeps them on one "host".
fn this_host() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".into())
}
