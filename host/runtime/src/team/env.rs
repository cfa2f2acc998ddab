//! The environment variables a team is chosen by, and their defaults (the builder reads them).

use std::time::Duration;

use crate::error::Error;

/// Chooses the backend: `cuda`, `emulator` or `auto` (the default).
pub const BACKEND_ENV: &str = "FERROCOMM_BACKEND";
/// The device wait timeout in milliseconds, when the builder sets none.
pub const TIMEOUT_ENV: &str = "FERROCOMM_TIMEOUT_MS";
/// The number of ranks, when the builder sets none (on GPUs: spread over them, several per GPU if needed).
pub const WORLD_ENV: &str = "FERROCOMM_WORLD";
/// `0` launches kernels without programmatic dependent launch (on by default where the GPU has it).
pub const PDL_ENV: &str = "FERROCOMM_PDL";
/// The device wait timeout on GPUs when neither the builder nor the environment sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(2000);
/// The same on the emulator. It runs a host thread per GPU thread, so a launch of a few thousand threads
/// takes about a second on a small host (the tensor-parallel decode step at H = K = 264 on two cores, its
/// tile owners waiting most of it for the other blocks' products), more when the host is busy: with the
/// GPUs' 2 s its waits and the host's watchdog took slow for stuck. A kernel that never finishes is still reported, after this.
pub const EMULATOR_DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
/// Ranks of an emulated team when nothing says otherwise.
pub const DEFAULT_WORLD: usize = 2;
/// Ranks (in a job of several processes: processes) per GPU, when the code does not say.
pub const RANKS_PER_GPU_ENV: &str = "FERROCOMM_RANKS_PER_GPU";

/// `FERROCOMM_RANKS_PER_GPU` as `env` gives it: `None` when unset or empty.
pub fn ranks_per_gpu_from(env: impl Fn(&str) -> Option<String>) -> Result<Option<usize>, Error> {
    let Some(v) = env(RANKS_PER_GPU_ENV).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
    match v.trim().parse::<usize>() {
        Ok(k) if k > 0 => Ok(Some(k)),
        _ => Err(Error::BadEnv { var: RANKS_PER_GPU_ENV, value: v, expected: "a number of ranks per GPU, 1 or more" }),
    }
}
