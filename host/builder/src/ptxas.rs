//! Finding ptxas and assembling PTX with it, so a bad instruction fails the build, not the launch.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Arch, BuildError};

/// Explicit path to a ptxas binary; checked first.
pub const PTXAS_ENV: &str = "FERROCOMM_PTXAS";
/// When `1`, a missing ptxas is an error rather than a warning (CI sets it).
pub const REQUIRE_PTXAS_ENV: &str = "FERROCOMM_REQUIRE_PTXAS";

/// Where ptxas was found, or why it was not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PtxasLocation {
    /// A ptxas binary, and how it was found.
    Found {
        /// The binary.
        path: PathBuf,
        /// Which rule found it (`FERROCOMM_PTXAS`, `PATH`, `CUDA_HOME`, `pip`).
        how: &'static str,
    },
    /// No ptxas anywhere the builder looks.
    Missing,
}

/// Looks for ptxas: `$FERROCOMM_PTXAS`, then `$PATH`, `$CUDA_HOME/bin`, `/usr/local/cuda/bin`, then the
/// `nvidia-cuda-nvcc` pip package (`<site-packages>/nvidia/cu13/bin/ptxas`).
pub fn find_ptxas() -> PtxasLocation {
    if let Some(explicit) = env::var_os(PTXAS_ENV).filter(|p| !p.is_empty()) {
        return PtxasLocation::Found { path: explicit.into(), how: PTXAS_ENV };
    }
    if let Some(path) =
        env::var_os("PATH").iter().flat_map(env::split_paths).map(|dir| dir.join("ptxas")).find(|p| is_executable(p))
    {
        return PtxasLocation::Found { path, how: "PATH" };
    }
    let cuda_homes = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(env::var_os).map(PathBuf::from);
    if let Some(path) = cuda_homes
        .chain([PathBuf::from("/usr/local/cuda")])
        .map(|home| home.join("bin/ptxas"))
        .find(|p| is_executable(p))
    {
        return PtxasLocation::Found { path, how: "CUDA_HOME" };
    }
    match pip_ptxas() {
        Some(path) => PtxasLocation::Found { path, how: "pip" },
        None => PtxasLocation::Missing,
    }
}

/// Whether the environment says a missing ptxas must fail the build.
pub fn ptxas_required() -> bool {
    env::var(REQUIRE_PTXAS_ENV).is_ok_and(|v| v == "1")
}

/// Assembles `ptx` for `arch` and throws the SASS away: a check; the error quotes ptxas.
pub fn validate(ptxas: &Path, ptx: &Path, arch: Arch) -> Result<(), BuildError> {
    assemble(ptxas, ptx, arch, Path::new(null_device()))
}

/// Assembles `ptx` for `arch` into the cubin `out` (SASS the GPU loads without a JIT); the error quotes
/// ptxas.
pub fn assemble(ptxas: &Path, ptx: &Path, arch: Arch, out: &Path) -> Result<(), BuildError> {
    let output = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg(ptx)
        .arg("-o")
        .arg(out)
        .output()
        .map_err(|source| BuildError::Spawn { program: ptxas.display().to_string(), source })?;
    if output.status.success() {
        return Ok(());
    }
    Err(BuildError::PtxasRejected {
        ptxas: ptxas.to_owned(),
        arch,
        ptx: ptx.to_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    })
}

fn null_device() -> &'static str {
    if cfg!(windows) { "NUL" } else { "/dev/null" }
}

fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// The pip package installs ptxas beside Python's site-packages; ask each Python where that is.
fn pip_ptxas() -> Option<PathBuf> {
    const ASK: &str = "import site, sysconfig; \
        print('\\n'.join([sysconfig.get_paths()['purelib'], site.getusersitepackages()] + site.getsitepackages()))";
    ["python3", "python"].iter().find_map(|python| {
        let out = Command::new(python).args(["-c", ASK]).output().ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .flat_map(|dir| ["cu13", "cu12"].map(|cu| Path::new(dir).join("nvidia").join(cu).join("bin/ptxas")))
            .find(|p| is_executable(p))
    })
}
