//! Building this process's share of a team that spans processes: join the job, agree on the backend,
//! run this process's one rank on the backend's cross-process variant (the CUDA GPU `LOCAL_RANK` picks, or
//! an emulated GPU whose memory the other processes map), and learn every rank's device.

use std::sync::Arc;

use ferrocomm_bootstrap::JobEnv;

use super::Plan;
use crate::cuda::CudaTeam;
use crate::emu::{EmuTeam, EmulatorOptions, SharedHeap};
use crate::error::Error;
use crate::exec::{Exec, SymmetricHeap};
use crate::process::{ProcessGroup, rendezvous_timeout};
use crate::system;
use crate::team::{Backend, Device, Team, TeamShared, ranks_per_gpu_from};

/// This process's rank of the job `job`, with what `plan` chose (backend, the GPUs to pick from, timeout).
pub(crate) fn create(
    plan: Plan,
    job: &JobEnv,
    ranks_per_gpu: Option<usize>,
    emulator: EmulatorOptions,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Team, Error> {
    let ranks_per_gpu = match ranks_per_gpu {
        Some(k) => k,
        None => ranks_per_gpu_from(&env)?.unwrap_or(1),
    };
    let group = ProcessGroup::join(job, rendezvous_timeout(&env)?, plan.nvshmem)?;
    let (rank, world) = (group.rank(), group.world());
    group.agree("the backend", plan.backend.name())?;
    let (exec, device): (Box<dyn Exec>, Device) = match plan.backend {
        Backend::Cuda => {
            let ordinal = gpu_for(rank, job.local_rank, ranks_per_gpu, &plan.gpus)?;
            let bus = system::gpu(ordinal)?.pci_bus_id;
            let buses: Vec<String> = group
                .all_gather("the ranks' GPUs", bus.as_bytes())?
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect();
            // PCI bus ids name GPUs of this host only (another host's GPU may sit at the same address).
            let here: Vec<String> = group.local_ranks().iter().map(|&r| buses[r].clone()).collect();
            check_reachable(ordinal, &here)?;
            // Kernels of several processes on one GPU: programmatic dependent launch is off, as for ranks
            // sharing a GPU in one process.
            let shares = group.local_ranks().iter().any(|&r| r != rank && buses[r] == bus);
            let exec = CudaTeam::for_process(ordinal, plan.programmatic_launch && !shares)?;
            (Box::new(exec), Device::Cuda { ordinal })
        }
        Backend::Emulator => {
            let exec = EmuTeam::new(&[rank], emulator, Box::new(SharedHeap::default()))?;
            (Box::new(exec), Device::Emulated { gpu: rank })
        }
    };
    let devices = gather_devices(&group, device)?;
    let nvshmem: Option<Box<dyn SymmetricHeap>> =
        if plan.nvshmem { Some(Box::new(init_nvshmem(&group, exec.as_ref())?)) } else { None };
    tracing::info!(rank, world, %device, "ferrocomm team rank {rank} of {world} processes on {}", plan.backend);
    let mut shared =
        TeamShared::new(plan.backend, world, vec![rank], plan.timeout, devices, exec, Some(group), nvshmem)?;
    if let Some(config) = plan.trace {
        shared.enable_trace(config)?;
    }
    Ok(Team { shared: Arc::new(shared) })
}

/// NVSHMEM as PE `rank` of the job: rank 0 makes the unique id, the rendezvous carries it to every rank,
/// and each initialises on its GPU's context.
fn init_nvshmem(group: &ProcessGroup, exec: &dyn Exec) -> Result<crate::nvshmem::Nvshmem, Error> {
    let (rank, world) = (group.rank(), group.world());
    let bytes = group.share_from_rank_zero("NVSHMEM's unique id", || Ok(crate::nvshmem::unique_id()?.to_bytes()))?;
    let id = crate::nvshmem::UniqueId::from_bytes(&bytes).ok_or_else(|| Error::TeamConfig {
        reason: format!("rank 0 sent {} bytes as NVSHMEM's unique id", bytes.len()),
    })?;
    exec.make_current(0)?;
    crate::nvshmem::Nvshmem::init(rank, world, &id)
}

/// The GPU of the process with local rank `local_rank`, `per_gpu` processes to a GPU of `gpus` (the
/// ordinals this process may use, in order).
fn gpu_for(rank: usize, local_rank: usize, per_gpu: usize, gpus: &[usize]) -> Result<usize, Error> {
    gpus.get(local_rank / per_gpu).copied().ok_or(Error::NoGpuForRank { rank, local_rank, gpus: gpus.len(), per_gpu })
}

/// Every rank's device, as its own process numbers it.
fn gather_devices(group: &ProcessGroup, mine: Device) -> Result<Vec<Device>, Error> {
    let encoded = match mine {
        Device::Cuda { ordinal } => format!("cuda {ordinal}"),
        Device::Emulated { gpu } => format!("emulated {gpu}"),
    };
    group
        .all_gather("the ranks' devices", encoded.as_bytes())?
        .iter()
        .enumerate()
        .map(|(rank, bytes)| {
            let text = String::from_utf8_lossy(bytes);
            let parsed = match text.split_once(' ') {
                Some(("cuda", n)) => n.parse().ok().map(|ordinal| Device::Cuda { ordinal }),
                Some(("emulated", n)) => n.parse().ok().map(|gpu| Device::Emulated { gpu }),
                _ => None,
            };
            parsed.ok_or_else(|| Error::TeamConfig { reason: format!("rank {rank} reported its device as {text:?}") })
        })
        .collect()
}

/// GPU `here` must reach every GPU of the team (PCI bus ids `buses`) that this process can see, over
/// NVLink or PCIe; a GPU that `CUDA_VISIBLE_DEVICES` hides from this process is checked by its own.
fn check_reachable(here: usize, buses: &[String]) -> Result<(), Error> {
    let visible = system::gpus()?;
    for bus in buses {
        let Some(peer) = visible.iter().find(|g| g.pci_bus_id == *bus) else { continue };
        if peer.ordinal != here && system::link(here, peer.ordinal)? == system::Link::None {
            return Err(Error::PeerAccess { a: here, b: peer.ordinal, link: system::Link::None });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::team::RANKS_PER_GPU_ENV;

    #[test]
    fn local_ranks_pick_their_gpus_and_a_rank_without_one_is_named() {
        assert_eq!(gpu_for(5, 1, 1, &[0, 1]).unwrap(), 1);
        assert_eq!(gpu_for(3, 3, 2, &[0, 1]).unwrap(), 1);
        assert_eq!(gpu_for(1, 1, 2, &[4]).unwrap(), 4);
        let e = gpu_for(1, 1, 1, &[0]).unwrap_err();
        assert!(matches!(e, Error::NoGpuForRank { rank: 1, local_rank: 1, gpus: 1, per_gpu: 1 }), "{e}");
        assert!(e.to_string().contains(RANKS_PER_GPU_ENV), "{e}");
    }
}
