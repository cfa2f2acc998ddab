//! Teams that span processes: one process per rank, started by torchrun, mpirun, srun or `ferrocomm
//! launch`, found through `ferrocomm-bootstrap`'s rendezvous.
//!
//! A [`ProcessGroup`] is what a team's core holds when its ranks live in several processes: the rendezvous
//! (all-gathers through rank 0) and the Unix-socket mesh that carries memory handles between the
//! processes of a host. On it the core builds
//! - symmetric memory ([`symmetric`]): each process allocates its part shareable, exports it as a file
//!   descriptor, and maps every peer's part; the peer tables hold the mapped addresses;
//! - agreement checks: before each allocation, and before a kernel module's first launch, every rank
//!   states what it is doing and all must state the same, or every rank fails with
//!   [`Error::Disagreement`] naming what each did (symmetric memory allocated in a different order or
//!   size is silent corruption otherwise);
//! - the team itself ([`team`]): one local rank, on the backend's cross-process variant.

use std::collections::{BTreeSet, HashSet};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ferrocomm_bootstrap::{BootstrapError, FdMesh, JobEnv, Rendezvous};

use crate::error::Error;
use crate::module::KernelModule;

/// How long the rendezvous waits for every rank to join, unless `FERROCOMM_RENDEZVOUS_TIMEOUT_MS` says.
pub const DEFAULT_RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(60);
/// The variable that sets how long joining (and each later exchange between processes) may take.
pub const RENDEZVOUS_TIMEOUT_ENV: &str = "FERROCOMM_RENDEZVOUS_TIMEOUT_MS";

/// The processes of one team, connected.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    rdv: Rendezvous,
    mesh: FdMesh,
    /// Symmetric allocations made so far (each rank counts its own; the agreement check compares them).
    allocations: AtomicU64,
    /// Kernel modules whose first launch the ranks agreed on.
    modules: Mutex<HashSet<usize>>,
    /// Every rank's process id (the team is one host), to tell a dead peer from a slow one.
    pids: Vec<u32>,
    /// Ranks an exchange found lost (their connection closed), whichever host they ran on.
    lost: Mutex<BTreeSet<usize>>,
}

impl ProcessGroup {
    /// Joins the job `env` describes: every rank within `timeout`, on one host — or, with `several_hosts`
    /// (a team with NVSHMEM, which reaches the other hosts), on any; the Unix-socket mesh then joins the
    /// ranks of each host.
    pub fn join(env: &JobEnv, timeout: Duration, several_hosts: bool) -> Result<ProcessGroup, Error> {
        let rdv = Rendezvous::connect(env, timeout)?;
        if rdv.local_ranks().len() != rdv.world() && !several_hosts {
            return Err(Error::TeamConfig {
                reason: format!(
                    "the job's {} ranks run on several hosts ({} on this one); a ferrocomm team spans the processes \
                     of one host, unless it reaches the others through NVSHMEM (TeamBuilder::nvshmem)",
                    rdv.world(),
                    rdv.local_ranks().len()
                ),
            });
        }
        let mesh = FdMesh::connect(&rdv)?;
        let pids = rdv
            .all_gather("the ranks' process ids", &std::process::id().to_le_bytes())?
            .iter()
            .map(|b| b.as_slice().try_into().map(u32::from_le_bytes).unwrap_or(0))
            .collect();
        let modules = Mutex::new(HashSet::new());
        Ok(ProcessGroup { rdv, mesh, allocations: AtomicU64::new(0), modules, pids, lost: Mutex::default() })
    }

    /// The ranks whose processes are gone: their peers' waits on them can only time out, and collective
    /// calls with them never end. A rank is gone when an exchange found its connection closed (on any host),
    /// or when its process on this host has exited or been killed (not reaped yet counts). The connection
    /// tells first: a process that aborts closes it while its exit (a core dump, its GPU contexts' teardown)
    /// can still take seconds before `/proc` shows it dead.
    pub fn exited_ranks(&self) -> Vec<usize> {
        let lost = self.lost.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let gone = |pid: u32| match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // The state follows the command name in parentheses: Z (zombie) and X (dead) have exited.
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        };
        // Process ids mean something on this host only.
        let exited = self.rdv.local_ranks().iter().copied().filter(|&r| r != self.rank() && gone(self.pids[r]));
        lost.into_iter().chain(exited).collect::<BTreeSet<usize>>().into_iter().collect()
    }

    /// An exchange's result, noting the rank it found lost.
    fn noting<T>(&self, result: Result<T, BootstrapError>) -> Result<T, Error> {
        if let Err(BootstrapError::PeerLost { rank, .. }) = &result {
            self.lost.lock().unwrap_or_else(PoisonError::into_inner).insert(*rank);
        }
        Ok(result?)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rdv.rank()
    }

    /// The number of ranks (processes) in the team.
    pub fn world(&self) -> usize {
        self.rdv.world()
    }

    /// The ranks on this host (all of them, unless an NVSHMEM team spans hosts).
    pub fn local_ranks(&self) -> &[usize] {
        self.rdv.local_ranks()
    }

    /// Every rank's `bytes`, in rank order.
    pub fn all_gather(&self, what: &'static str, bytes: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        self.noting(self.rdv.all_gather(what, bytes))
    }

    /// The bytes rank 0 makes with `make`, in every rank: how a library bootstraps over the rendezvous (the
    /// unique ids of NCCL and NVSHMEM). When rank 0's `make` fails, it returns that error and every other
    /// rank [`Error::TeamConfig`] saying that rank 0 could not make `what`.
    pub fn share_from_rank_zero(
        &self,
        what: &'static str,
        make: impl FnOnce() -> Result<Vec<u8>, Error>,
    ) -> Result<Vec<u8>, Error> {
        let made = if self.rank() == 0 { Some(make()) } else { None };
        // Rank 0 sends nothing when `make` failed, so that the others stop instead of waiting for it.
        let mine = match &made {
            Some(Ok(bytes)) => bytes.as_slice(),
            _ => &[],
        };
        let mut all = self.all_gather(what, mine)?;
        if let Some(Err(e)) = made {
            return Err(e);
        }
        match all.swap_remove(0) {
            bytes if bytes.is_empty() => Err(Error::TeamConfig { reason: format!("rank 0 could not make {what}") }),
            bytes => Ok(bytes),
        }
    }

    /// Every rank states `statement` about `what`; unless all state the same, every rank returns
    /// [`Error::Disagreement`] with each rank's statement.
    pub fn agree(&self, what: &'static str, statement: &str) -> Result<(), Error> {
        let all = self.all_gather(what, statement.as_bytes())?;
        if all.iter().all(|s| *s == all[0]) {
            return Ok(());
        }
        let statements = all.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        Err(Error::Disagreement { what, statements })
    }

    /// The number of the next symmetric allocation of this rank.
    pub fn next_allocation(&self) -> u64 {
        self.allocations.fetch_add(1, Ordering::Relaxed)
    }

    /// Before `module`'s first launch in this team: every rank must be launching from the same module.
    pub fn agree_on_module(&self, module: &'static KernelModule) -> Result<(), Error> {
        if self.modules.lock().unwrap_or_else(PoisonError::into_inner).contains(&module.key()) {
            return Ok(());
        }
        self.agree("the kernel module launched first", &describe_module(module))?;
        self.modules.lock().unwrap_or_else(PoisonError::into_inner).insert(module.key());
        Ok(())
    }

    /// Sends `mine` to every other rank and receives theirs, in rank order (`None` for this rank).
    pub fn exchange_fds(
        &self,
        what: &'static str,
        mine: BorrowedFd<'_>,
        tag: &[u8],
    ) -> Result<Vec<Option<OwnedFd>>, Error> {
        let received = self.noting(self.mesh.exchange(what, mine, tag))?;
        // The mesh orders them like the host's local ranks; the team is one host, so by rank.
        let mut by_rank: Vec<Option<OwnedFd>> = (0..self.world()).map(|_| None).collect();
        for (fd, &rank) in received.into_iter().zip(self.mesh.local_ranks()) {
            by_rank[rank] = fd;
        }
        Ok(by_rank)
    }
}

/// A module as the agreement check states it: its name and a digest of its PTX.
fn describe_module(module: &KernelModule) -> String {
    // FNV-1a: a stable digest (the ranks may be different builds of one program).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (arch, ptx) in module.ptx() {
        for byte in arch.to_le_bytes().iter().chain(ptx.as_bytes()) {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("module `{}` (PTX digest {hash:016x})", module.name())
}

/// The rendezvous timeout from `FERROCOMM_RENDEZVOUS_TIMEOUT_MS`, else the default.
pub(crate) fn rendezvous_timeout(env: impl Fn(&str) -> Option<String>) -> Result<Duration, Error> {
    match env(RENDEZVOUS_TIMEOUT_ENV).filter(|v| !v.trim().is_empty()) {
        None => Ok(DEFAULT_RENDEZVOUS_TIMEOUT),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(Error::BadEnv {
                var: RENDEZVOUS_TIMEOUT_ENV,
                value: v,
                expected: "a whole number of milliseconds above zero, e.g. 60000",
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr, TcpListener};

    use super::*;

    /// A free port on the loopback interface for a rendezvous.
    fn free_address() -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
        listener.local_addr().expect("its address")
    }

    #[test]
    fn a_rank_whose_connection_closed_is_gone_though_its_process_lives() {
        // Both ranks in this process: its pid is alive, so only the closed connection can tell.
        let at = free_address();
        let join = |rank: usize| {
            let env = JobEnv::explicit(rank, 2, rank, 2, at).expect("a layout");
            std::thread::spawn(move || ProcessGroup::join(&env, Duration::from_secs(20), false))
        };
        let (zero, one) = (join(0), join(1));
        let zero = zero.join().unwrap().expect("rank 0 joins");
        let one = one.join().unwrap().expect("rank 1 joins");
        assert!(zero.exited_ranks().is_empty());
        drop(one);
        let e = zero.agree("a check", "the same").unwrap_err();
        assert!(e.to_string().contains("rank 1 was lost"), "{e}");
        assert_eq!(zero.exited_ranks(), vec![1]);
    }
}
