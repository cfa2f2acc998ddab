//! Opening the examples' team — every GPU present, two ranks sharing the GPU when there is only one, the CPU
//! emulator when there is none — and saying which it is.

use std::fmt;

use ferrocomm::team::BACKEND_ENV;
use ferrocomm::{Backend, Device, Team, system};

/// The team the examples run on: what `FERROCOMM_BACKEND` (default `auto`) and `FERROCOMM_WORLD` ask for,
/// with at least two ranks — on a machine with one GPU, two ranks share it; on the emulator, a world of
/// one becomes two. Under a launcher, the job's processes, however many the launcher started.
pub fn open_team() -> Result<Team, ferrocomm::Error> {
    let team = Team::from_env()?;
    if team.world() >= 2 || team.spans_processes() {
        return Ok(team);
    }
    // Communication needs a peer: ask again for two ranks (the builder places both on the one GPU).
    drop(team);
    Team::builder().world(2).build()
}

/// Where a team runs, in words: printed first by every example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    /// The backend.
    pub backend: Backend,
    /// Ranks in the team.
    pub world: usize,
    /// One line per GPU in use (`GPU 0: NVIDIA H200, sm_90, 132 SMs, ranks 0`), or the emulated GPUs.
    pub devices: Vec<String>,
    /// Why the emulator, when it is the emulator: requested, or the reason no GPU could be used.
    pub emulator_reason: Option<String>,
}

impl Platform {
    /// Describes `team`.
    pub fn of(team: &Team) -> Platform {
        let mut devices: Vec<(Device, Vec<usize>)> = Vec::new();
        for rank in team.ranks() {
            match devices.iter_mut().find(|(d, _)| *d == rank.device()) {
                Some((_, ranks)) => ranks.push(rank.rank()),
                None => devices.push((rank.device(), vec![rank.rank()])),
            }
        }
        let devices = devices
            .into_iter()
            .map(|(device, ranks)| {
                let ranks = ranks.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
                let what = match device {
                    Device::Cuda { ordinal } => match system::gpu(ordinal) {
                        Ok(gpu) => format!(
                            "{device}: {}, sm_{}, {} SMs, {} GiB",
                            gpu.name,
                            gpu.compute_capability,
                            gpu.multiprocessors,
                            gpu.memory_bytes >> 30
                        ),
                        Err(e) => format!("{device}: ({e})"),
                    },
                    Device::Emulated { .. } => format!("{device} (host threads)"),
                };
                format!("{what} -> rank{} {ranks}", if ranks.contains(',') { "s" } else { "" })
            })
            .collect();
        let emulator_reason = (team.backend() == Backend::Emulator).then(emulator_reason);
        Platform { backend: team.backend(), world: team.world(), devices, emulator_reason }
    }
}

/// Why the team is emulated: the environment asked for it, or no GPU is usable (and why not).
fn emulator_reason() -> String {
    let requested = std::env::var(BACKEND_ENV)
        .ok()
        .filter(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "emulator" | "emu" | "cpu"));
    match (requested, system::driver()) {
        (Some(v), _) => format!("requested by {BACKEND_ENV}={v}"),
        (None, Err(e)) => format!("no GPU was found ({e})"),
        (None, Ok(d)) => format!("the driver sees {} GPU(s), but the emulator was chosen", d.gpu_count),
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.emulator_reason {
            Some(why) => {
                writeln!(f, "running on the CPU emulator, {} ranks: {why}", self.world)?;
                writeln!(f, "  (every GPU thread is a host thread: results are checked, times are not GPU times)")?;
            }
            None => writeln!(f, "running on {} GPU(s), {} ranks:", self.devices.len(), self.world)?,
        }
        for line in &self.devices {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// The most ranks any one device of `team` runs (1 with one rank per GPU).
pub fn ranks_per_gpu(team: &Team) -> usize {
    let devices: Vec<_> = team.ranks().map(|r| r.device()).collect();
    devices.iter().map(|d| devices.iter().filter(|e| *e == d).count()).max().unwrap_or(1)
}
