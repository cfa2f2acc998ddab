//! The nested `cargo rustc` that turns a kernels crate into PTX, and the environment it runs in.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Arch;

/// Set in the nested build's environment so a kernels crate's own build.rs does not build itself again.
pub const NESTED_ENV: &str = "FERROCOMM_BUILDER_NESTED";

/// The target every kernel is compiled for.
pub const TARGET: &str = "nvptx64-nvidia-cuda";

/// Variables of the outer build that would leak into the nested one and change or break it: flags meant
/// for the host, another target directory, wrappers, and the outer package's build-script variables.
const FILTERED_EXACT: &[&str] = &[
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTDOCFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_RUSTFLAGS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "OUT_DIR",
    "TARGET",
    "HOST",
    "PROFILE",
    "OPT_LEVEL",
    "DEBUG",
    "NUM_JOBS",
    "RUSTC_LINKER",
    "CARGO_INCREMENTAL",
    "CARGO_PROFILE_RELEASE_LTO",
    "CARGO_PROFILE_RELEASE_PANIC",
    "CARGO_PROFILE_RELEASE_CODEGEN_UNITS",
];
const FILTERED_PREFIXES: &[&str] = &["CARGO_CFG_", "CARGO_FEATURE_", "CARGO_PKG_", "DEP_", "CARGO_TARGET_"];

/// Whether the outer build's variable `name` is kept out of the nested build.
pub fn is_filtered(name: &str) -> bool {
    FILTERED_EXACT.contains(&name) || FILTERED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Everything that decides one nested build.
#[derive(Debug, Clone)]
pub struct NestedBuild {
    /// The `cargo` to run.
    pub cargo: PathBuf,
    /// The kernels crate's `Cargo.toml`.
    pub manifest: PathBuf,
    /// The nested build's own target directory (never the outer one: sharing it deadlocks).
    pub target_dir: PathBuf,
    /// The architecture of this build.
    pub arch: Arch,
    /// A rustup toolchain to select, where the outer build's own compiler is not the one to use.
    pub toolchain: Option<String>,
    /// Which flavour of the kernels this build makes.
    pub flavour: Flavour,
}

/// The flavours of a kernels crate's PTX: each a nested build of its own, in a target directory of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// The ordinary modules.
    Plain,
    /// Every crate compiled with `--cfg ferrocomm_trace`, so the device library's trace hooks record
    /// events (see `ferrocomm_device::trace`).
    Traced,
    /// Every crate compiled with `--cfg ferrocomm_nvshmem` to LLVM bitcode, for linking with NVSHMEM's
    /// device library (see [`crate::nvshmem`]).
    Nvshmem,
}

impl NestedBuild {
    /// The command line: `cargo rustc` of the library as a staticlib with `core` built from source, fat LTO,
    /// one codegen unit, `panic=abort`, emitting the PTX as assembly.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> =
            ["rustc", "--lib", "--release", "--target", TARGET, "-Zbuild-std=core"].map(OsString::from).into();
        args.push("--manifest-path".into());
        args.push(self.manifest.clone().into());
        args.push("--target-dir".into());
        args.push(self.target_dir.clone().into());
        args.push("--crate-type=staticlib".into());
        args.push("--message-format=json".into());
        for setting in [
            "profile.release.lto=\"fat\"",
            "profile.release.codegen-units=1",
            "profile.release.panic=\"abort\"",
            "profile.release.opt-level=3",
            "profile.release.debug=false",
            "profile.release.incremental=false",
        ] {
            args.push("--config".into());
            args.push(setting.into());
        }
        args.push("--".into());
        // The NVSHMEM flavour's PTX is made by `llc` after linking the bitcode with NVSHMEM's.
        args.push(if self.flavour == Flavour::Nvshmem { "--emit=llvm-bc" } else { "--emit=asm" }.into());
        args
    }

    /// The flags every crate of the nested build is compiled with (`core` and the device library too, so
    /// `cfg(target_feature)` in them sees the architecture): the target CPU, and for sm_90 PTX ISA 8.0, which
    /// Hopper-only instructions (`fence.proxy.async`) need.
    pub fn rustflags(&self) -> Vec<String> {
        let mut flags = vec![format!("-Ctarget-cpu={}", self.arch)];
        if self.arch.compute_capability() >= 90 {
            flags.push("-Ctarget-feature=+ptx80".into());
        }
        match self.flavour {
            Flavour::Plain => {}
            Flavour::Traced => flags.extend(["--cfg".into(), TRACE_CFG.into()]),
            Flavour::Nvshmem => flags.extend(["--cfg".into(), crate::nvshmem::NVSHMEM_CFG.into()]),
        }
        flags
    }

    /// The nested build's whole environment, from `outer` (this process's): filtered, with the recursion
    /// guard set and, where a toolchain is chosen, the outer compiler dropped so rustup selects it.
    pub fn environment(&self, outer: impl Iterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
        let chosen = self.toolchain.is_some();
        let mut env: Vec<(OsString, OsString)> = outer
            .filter(|(k, _)| {
                let name = k.to_str().unwrap_or_default();
                !is_filtered(name) && !(chosen && ["RUSTC", "CARGO", "RUSTUP_TOOLCHAIN"].contains(&name))
            })
            .collect();
        env.push((NESTED_ENV.into(), "1".into()));
        env.push(("CARGO_ENCODED_RUSTFLAGS".into(), self.rustflags().join("\x1f").into()));
        // A missing toolchain must be reported, not silently downloaded in the middle of a build.
        env.push(("RUSTUP_AUTO_INSTALL".into(), "0".into()));
        if let Some(toolchain) = &self.toolchain {
            env.push(("RUSTUP_TOOLCHAIN".into(), toolchain.into()));
        }
        env
    }

    /// The command, run in [`NestedBuild::environment`] of this process's environment.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.cargo);
        cmd.args(self.args());
        cmd.env_clear();
        cmd.envs(self.environment(std::env::vars_os()));
        cmd
    }

    /// Where the compiler leaves the PTX (`<crate>-<hash>.s`) and the dep-info file.
    pub fn deps_dir(&self) -> PathBuf {
        self.target_dir.join(TARGET).join("release").join("deps")
    }
}

/// The `cfg` of the traced flavour.
pub const TRACE_CFG: &str = "ferrocomm_trace";

/// The directory name of one architecture's nested target directory under `root` (`sm_90`, and
/// `sm_90-trace` / `sm_90-nvshmem` for the other flavours, so they never invalidate each other's cache).
pub fn arch_target_dir(root: &Path, arch: Arch, flavour: Flavour) -> PathBuf {
    root.join(match flavour {
        Flavour::Plain => arch.to_string(),
        Flavour::Traced => format!("{arch}-trace"),
        Flavour::Nvshmem => format!("{arch}-nvshmem"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build() -> NestedBuild {
        NestedBuild {
            cargo: "cargo".into(),
            manifest: "/k/Cargo.toml".into(),
            target_dir: "/t/sm_90".into(),
            arch: Arch::SM_90,
            toolchain: None,
            flavour: Flavour::Plain,
        }
    }

    #[test]
    fn command_line_is_the_documented_recipe() {
        let args: Vec<String> = build().args().into_iter().map(|a| a.into_string().unwrap()).collect();
        let line = args.join(" ");
        for needle in [
            "rustc --lib --release --target nvptx64-nvidia-cuda -Zbuild-std=core",
            "--manifest-path /k/Cargo.toml",
            "--target-dir /t/sm_90",
            "--crate-type=staticlib",
            "--config profile.release.lto=\"fat\"",
            "--config profile.release.codegen-units=1",
            "--config profile.release.panic=\"abort\"",
        ] {
            assert!(line.contains(needle), "missing `{needle}` in `{line}`");
        }
        assert!(line.ends_with("-- --emit=asm"), "{line}");
        assert!(!line.contains("llbc"), "must not need the llvm-bitcode-linker: {line}");
    }

    #[test]
    fn outer_build_variables_are_filtered() {
        for name in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_CFG_TARGET_ARCH",
            "CARGO_FEATURE_STD",
            "CARGO_PKG_NAME",
            "OUT_DIR",
            "TARGET",
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
        ] {
            assert!(is_filtered(name), "{name} leaks into the nested build");
        }
        for name in ["PATH", "HOME", "RUSTUP_TOOLCHAIN", "RUSTC", "CARGO", "CARGO_HOME", "CARGO_MAKEFLAGS"] {
            assert!(!is_filtered(name), "{name} must reach the nested build");
        }
    }

    fn outer() -> impl Iterator<Item = (OsString, OsString)> {
        [("PATH", "/bin"), ("RUSTFLAGS", "-Ctarget-cpu=native"), ("RUSTC", "/tc/rustc"), ("CARGO_CFG_UNIX", "")]
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
    }

    fn lookup(env: &[(OsString, OsString)], name: &str) -> Option<String> {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.to_string_lossy().into_owned())
    }

    #[test]
    fn environment_sets_the_recursion_guard_and_drops_filtered_variables() {
        let env = build().environment(outer());
        assert_eq!(lookup(&env, NESTED_ENV).as_deref(), Some("1"));
        assert_eq!(lookup(&env, "RUSTUP_AUTO_INSTALL").as_deref(), Some("0"));
        assert_eq!(lookup(&env, "PATH").as_deref(), Some("/bin"));
        assert_eq!(lookup(&env, "RUSTC").as_deref(), Some("/tc/rustc"), "the outer compiler is kept by default");
        assert_eq!(
            lookup(&env, "CARGO_ENCODED_RUSTFLAGS").as_deref(),
            Some("-Ctarget-cpu=sm_90\x1f-Ctarget-feature=+ptx80"),
            "the outer RUSTFLAGS are replaced by the architecture's"
        );
        assert!(
            env.iter().all(|(k, _)| k == "CARGO_ENCODED_RUSTFLAGS" || !is_filtered(k.to_str().unwrap())),
            "{env:?}"
        );
    }

    #[test]
    fn the_traced_flavour_adds_its_cfg_and_a_target_dir_of_its_own() {
        let mut b = build();
        b.flavour = Flavour::Traced;
        assert_eq!(b.rustflags(), ["-Ctarget-cpu=sm_90", "-Ctarget-feature=+ptx80", "--cfg", "ferrocomm_trace"]);
        assert_eq!(arch_target_dir(Path::new("/t"), Arch::SM_90, Flavour::Traced), Path::new("/t/sm_90-trace"));
        assert_eq!(arch_target_dir(Path::new("/t"), Arch::SM_90, Flavour::Plain), Path::new("/t/sm_90"));
    }

    #[test]
    fn the_nvshmem_flavour_emits_bitcode_with_its_cfg() {
        let mut b = build();
        b.flavour = Flavour::Nvshmem;
        assert_eq!(b.rustflags(), ["-Ctarget-cpu=sm_90", "-Ctarget-feature=+ptx80", "--cfg", "ferrocomm_nvshmem"]);
        let line = b.args().into_iter().map(|a| a.into_string().unwrap()).collect::<Vec<_>>().join(" ");
        assert!(line.ends_with("-- --emit=llvm-bc"), "{line}");
        assert_eq!(arch_target_dir(Path::new("/t"), Arch::SM_90, Flavour::Nvshmem), Path::new("/t/sm_90-nvshmem"));
    }

    #[test]
    fn a_chosen_toolchain_replaces_the_outer_compiler() {
        let mut b = build();
        b.toolchain = Some("nightly-2026-05-20".into());
        let env = b.environment(outer());
        assert_eq!(lookup(&env, "RUSTUP_TOOLCHAIN").as_deref(), Some("nightly-2026-05-20"));
        assert_eq!(lookup(&env, "RUSTC"), None, "RUSTC must be dropped so rustup picks the toolchain");
    }
}
