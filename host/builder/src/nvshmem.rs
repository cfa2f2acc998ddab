//! The NVSHMEM link path: kernels that call NVSHMEM's device API, so that they reach GPUs of other nodes.
//!
//! NVSHMEM ships its device library as LLVM bitcode (`libnvshmem_device.bc`, in the `nvidia-nvshmem-cu13`
//! wheel). For this flavour the nested build emits the kernels crate's bitcode (`--emit=llvm-bc`, compiled
//! with `--cfg ferrocomm_nvshmem`), and the LLVM tools of the toolchain's `llvm-tools` component turn it
//! into PTX:
//!
//! ```text
//! llvm-link --only-needed <crate>.bc libnvshmem_device.bc   # only the NVSHMEM functions the kernels call
//! opt -O3                                                   # inline and optimise across the two
//! llc -mcpu=sm_NN -mattr=+ptx85                             # PTX, which ptxas then validates
//! ```
//!
//! The PTX keeps NVSHMEM's `nvshmemi_device_lib_version_d` (the bitcode's version) and its device state,
//! which the host library fills in when it binds the module (`nvshmemx_cumodule_init`). The runtime reads
//! the version back from the PTX ([`ptx_version`]) and refuses a host library of another version.

use std::env;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Arch, BuildError};

/// The NVSHMEM release the project is pinned to: the bitcode the build links and the host library the
/// runtime loads must both be this one (override: [`VERSION_ENV`]).
pub const PINNED_VERSION: NvshmemVersion = NvshmemVersion { major: 3, minor: 4, patch: 5 };
/// The pip requirement that provides [`PINNED_VERSION`].
pub const PIP_REQUIREMENT: &str = "nvidia-nvshmem-cu13==3.4.5";
/// An explicit `libnvshmem_device.bc`; checked first.
pub const BITCODE_ENV: &str = "FERROCOMM_NVSHMEM_BITCODE";
/// An NVSHMEM installation (`$NVSHMEM_HOME/lib/libnvshmem_device.bc`); checked second.
pub const HOME_ENV: &str = "NVSHMEM_HOME";
/// When `1`, a missing NVSHMEM bitcode is an error rather than a warning (CI sets it).
pub const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_NVSHMEM";
/// Accept another NVSHMEM version than [`PINNED_VERSION`] (`3.8.0`): for sites whose host library is
/// another release; bitcode and host library must still agree at run time.
pub const VERSION_ENV: &str = "FERROCOMM_NVSHMEM_VERSION";
/// The `cfg` the NVSHMEM flavour compiles every crate with: the device library's `nvshmem` module lowers to
/// NVSHMEM calls under it.
pub const NVSHMEM_CFG: &str = "ferrocomm_nvshmem";
/// The PTX ISA the flavour is generated for: what NVSHMEM 3.4's bitcode needs (its own builds use 8.5).
pub const PTX_ISA: &str = "+ptx85";

/// An NVSHMEM release, as `nvshmemx_vendor_get_version_info` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NvshmemVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch level.
    pub patch: u32,
}

impl fmt::Display for NvshmemVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl std::str::FromStr for NvshmemVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<u32> =
            s.trim().split('.').map(str::parse).collect::<Result<_, _>>().map_err(|_| s.to_owned())?;
        match parts[..] {
            [major, minor, patch] => Ok(NvshmemVersion { major, minor, patch }),
            _ => Err(s.to_owned()),
        }
    }
}

/// The version the build expects: [`VERSION_ENV`] when set, else [`PINNED_VERSION`].
pub fn expected_version() -> Result<NvshmemVersion, BuildError> {
    match env::var(VERSION_ENV) {
        Ok(v) if !v.trim().is_empty() => {
            v.parse().map_err(|given| BuildError::BadNvshmemVersion { given, var: VERSION_ENV })
        }
        _ => Ok(PINNED_VERSION),
    }
}

/// Whether the environment says a missing NVSHMEM bitcode must fail the build.
pub fn nvshmem_required() -> bool {
    env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// Where `libnvshmem_device.bc` was found, or every place it was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BitcodeLocation {
    /// The bitcode, and which rule found it (`FERROCOMM_NVSHMEM_BITCODE`, `NVSHMEM_HOME`, `pip`).
    Found {
        /// The file.
        path: PathBuf,
        /// The rule that found it.
        how: &'static str,
    },
    /// Not found; the places looked at, for the error.
    Missing {
        /// Every path tried.
        looked: Vec<PathBuf>,
        /// The nearest existing folder of each place looked, no higher than the installation's root (the
        /// site-packages folder, `$NVSHMEM_HOME`, the explicit file's folder): where installing NVSHMEM
        /// later changes something, so that a build script watching them builds the flavour then.
        watch: Vec<PathBuf>,
    },
}

/// The first of `candidates` (a missing file's folders, nearest first, up to the installation's root) that exists.
fn nearest_folder(candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates.iter().find(|c| c.is_dir()).cloned()
}

/// Looks for `libnvshmem_device.bc`: `$FERROCOMM_NVSHMEM_BITCODE`, `$NVSHMEM_HOME/lib`, then the
/// `nvidia-nvshmem-cu13` pip package (`<site-packages>/nvidia/nvshmem/lib`) of each Python on `PATH`.
pub fn find_bitcode() -> BitcodeLocation {
    let (mut looked, mut watch) = (Vec::new(), Vec::new());
    let mut missing = |path: PathBuf, folders: Vec<PathBuf>| {
        looked.push(path);
        if let Some(folder) = nearest_folder(&folders)
            && !watch.contains(&folder)
        {
            watch.push(folder);
        }
    };
    if let Some(explicit) = env::var_os(BITCODE_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(explicit);
        if path.is_file() {
            return BitcodeLocation::Found { path, how: BITCODE_ENV };
        }
        let folder = path.parent().map(Path::to_path_buf).into_iter().collect();
        missing(path, folder);
    }
    if let Some(home) = env::var_os(HOME_ENV).filter(|p| !p.is_empty()) {
        let home = PathBuf::from(home);
        let path = home.join("lib/libnvshmem_device.bc");
        if path.is_file() {
            return BitcodeLocation::Found { path, how: HOME_ENV };
        }
        missing(path, vec![home.join("lib"), home]);
    }
    for dir in python_site_packages() {
        let (path, folders) = in_site_packages(&dir);
        if path.is_file() {
            return BitcodeLocation::Found { path, how: "pip" };
        }
        missing(path, folders);
    }
    BitcodeLocation::Missing { looked, watch }
}

/// Where the pip package puts the bitcode in `site`, and the folders to watch while it is absent, nearest
/// first: not site-packages itself while `nvidia/` is there (the nvcc wheel makes it), a smaller tree to scan.
fn in_site_packages(site: &Path) -> (PathBuf, Vec<PathBuf>) {
    let lib = site.join("nvidia/nvshmem/lib");
    let folders = vec![lib.clone(), site.join("nvidia/nvshmem"), site.join("nvidia"), site.to_path_buf()];
    (lib.join("libnvshmem_device.bc"), folders)
}

/// Every site-packages directory of `python3` (and `python`): where pip installs NVIDIA's wheels.
pub fn python_site_packages() -> Vec<PathBuf> {
    const ASK: &str = "import site, sysconfig; \
        print('\\n'.join([sysconfig.get_paths()['purelib'], site.getusersitepackages()] + site.getsitepackages()))";
    let mut dirs: Vec<PathBuf> = Vec::new();
    for python in ["python3", "python"] {
        let Ok(out) = Command::new(python).args(["-c", ASK]).output() else { continue };
        for line in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()) {
            let dir = PathBuf::from(line.trim());
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// The LLVM tools of the `llvm-tools` component: `llvm-link`, `opt`, `llc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlvmTools {
    /// `<sysroot>/lib/rustlib/<host>/bin`.
    pub bin: PathBuf,
}

impl LlvmTools {
    /// The tools of the toolchain whose sysroot is `sysroot` and host triple `host`; an error naming the
    /// `rustup component add` that installs them when they are missing.
    pub fn find(sysroot: &Path, host: &str, toolchain: &str) -> Result<LlvmTools, BuildError> {
        let bin = sysroot.join("lib/rustlib").join(host).join("bin");
        let missing: Vec<&str> = ["llvm-link", "opt", "llc"].into_iter().filter(|t| !bin.join(t).is_file()).collect();
        if missing.is_empty() {
            Ok(LlvmTools { bin })
        } else {
            Err(BuildError::LlvmToolsMissing { bin, missing: missing.join(", "), toolchain: toolchain.to_owned() })
        }
    }

    /// The path of tool `name`.
    pub fn tool(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The LLVM major version of these tools (`llc --version`), which must be the compiler's: bitcode of a
    /// newer LLVM does not load into older tools.
    pub fn llvm_major(&self) -> Result<u32, BuildError> {
        let llc = self.tool("llc");
        let out = Command::new(&llc)
            .arg("--version")
            .output()
            .map_err(|source| BuildError::Spawn { program: llc.display().to_string(), source })?;
        let text = String::from_utf8_lossy(&out.stdout);
        llvm_major_in(&text).ok_or_else(|| BuildError::Spawn {
            program: llc.display().to_string(),
            source: std::io::Error::other(format!("no `LLVM version` in its --version output: {}", text.trim())),
        })
    }

    /// Links `kernels` (the crate's bitcode) with `nvshmem` (NVSHMEM's device library) into PTX for
    /// `arch` at `ptx`, keeping the intermediate files beside it.
    pub fn link(&self, kernels: &Path, nvshmem: &Path, arch: Arch, ptx: &Path) -> Result<(), BuildError> {
        let linked = ptx.with_extension("linked.bc");
        let optimised = ptx.with_extension("opt.bc");
        // The kernels' module goes first: its data layout (rustc's) is the result's, and `--only-needed`
        // pulls from NVSHMEM's module only what the kernels call.
        self.run("llvm-link", arch, |c| {
            c.arg("--only-needed").arg(kernels).arg(nvshmem).arg("-o").arg(&linked);
        })?;
        self.run("opt", arch, |c| {
            c.arg("-O3").arg(&linked).arg("-o").arg(&optimised);
        })?;
        self.run("llc", arch, |c| {
            c.arg(format!("-mcpu={arch}")).arg(format!("-mattr={PTX_ISA}")).arg(&optimised).arg("-o").arg(ptx);
        })
    }

    fn run(&self, tool: &'static str, arch: Arch, args: impl FnOnce(&mut Command)) -> Result<(), BuildError> {
        let path = self.tool(tool);
        let mut cmd = Command::new(&path);
        args(&mut cmd);
        let out = cmd.output().map_err(|source| BuildError::Spawn { program: path.display().to_string(), source })?;
        if out.status.success() {
            return Ok(());
        }
        Err(BuildError::NvshmemLink { tool, arch, stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned() })
    }
}

/// The major version in `llc --version` / `rustc -vV` output (`LLVM version 22.1.4…`, `LLVM version: 22.1.4`).
pub fn llvm_major_in(text: &str) -> Option<u32> {
    let rest = &text[text.find("LLVM version")? + "LLVM version".len()..];
    let rest = rest.trim_start_matches(|c: char| c == ':' || c.is_whitespace());
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// The NVSHMEM version a linked PTX module carries: the bytes of `nvshmemi_device_lib_version_d`
/// (`{major, minor, patch}` as three little-endian `i32`s), which the bitcode defines. `None` for a module
/// without NVSHMEM.
pub fn ptx_version(ptx: &str) -> Option<NvshmemVersion> {
    let line = ptx.lines().find(|l| l.contains("nvshmemi_device_lib_version_d[12]"))?;
    let init = line.split_once('{')?.1.split_once('}')?.0;
    let mut bytes = [0u8; 12];
    for (i, b) in init.split(',').enumerate() {
        *bytes.get_mut(i)? = b.trim().parse().ok()?;
    }
    let word = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    Some(NvshmemVersion { major: word(0), minor: word(4), patch: word(8) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_the_ptx_initialiser() {
        let ptx = ".visible .const .align 4 .b8 nvshmemi_device_lib_version_d[12] = {3, 0, 0, 0, 4, 0, 0, 0, 5};";
        assert_eq!(ptx_version(ptx), Some(NvshmemVersion { major: 3, minor: 4, patch: 5 }));
        // Trailing zero bytes may be left out of the initialiser.
        let ptx = ".global .align 4 .b8 nvshmemi_device_lib_version_d[12] = {3, 0, 0, 0, 8};";
        assert_eq!(ptx_version(ptx), Some(NvshmemVersion { major: 3, minor: 8, patch: 0 }));
        assert_eq!(ptx_version(".visible .entry k()"), None);
    }

    #[test]
    fn llvm_versions_are_read_from_either_tool() {
        assert_eq!(llvm_major_in("LLVM (http://llvm.org/):\n  LLVM version 22.1.4-rust-1.97.0-nightly\n"), Some(22));
        assert_eq!(llvm_major_in("rustc 1.97.0-nightly\nLLVM version: 22.1.4\n"), Some(22));
        assert_eq!(llvm_major_in("no version here"), None);
    }

    #[test]
    fn versions_parse_and_print() {
        assert_eq!("3.4.5".parse::<NvshmemVersion>().unwrap(), PINNED_VERSION);
        assert_eq!(PINNED_VERSION.to_string(), "3.4.5");
        assert!("3.4".parse::<NvshmemVersion>().is_err() && "x.y.z".parse::<NvshmemVersion>().is_err());
        assert!(PIP_REQUIREMENT.ends_with(&PINNED_VERSION.to_string()));
    }

    #[test]
    fn a_missing_pip_bitcode_is_watched_for_from_its_nearest_existing_folder() {
        let site = tempfile::tempdir().unwrap();
        let (path, folders) = in_site_packages(site.path());
        assert!(path.ends_with("nvidia/nvshmem/lib/libnvshmem_device.bc"), "{}", path.display());
        assert_eq!(nearest_folder(&folders).as_deref(), Some(site.path()));
        std::fs::create_dir_all(site.path().join("nvidia/cuda_nvcc")).unwrap();
        assert_eq!(nearest_folder(&folders), Some(site.path().join("nvidia")));
        std::fs::create_dir_all(site.path().join("nvidia/nvshmem/lib")).unwrap();
        assert_eq!(nearest_folder(&folders), Some(site.path().join("nvidia/nvshmem/lib")));
        // Never above the installation's root: nothing is watched where the root itself is gone.
        let gone = site.path().join("no-such-site");
        assert_eq!(nearest_folder(&in_site_packages(&gone).1), None);
    }

    #[test]
    fn missing_llvm_tools_name_the_component() {
        let dir = tempfile::tempdir().unwrap();
        let msg =
            LlvmTools::find(dir.path(), "x86_64-unknown-linux-gnu", "nightly-2026-05-20").unwrap_err().to_string();
        assert!(msg.contains("rustup component add llvm-tools --toolchain nightly-2026-05-20"), "{msg}");
        assert!(msg.contains("llvm-link, opt, llc"), "{msg}");
    }
}
