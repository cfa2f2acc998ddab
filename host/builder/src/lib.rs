//! `ferrocomm-builder`: the path from a Rust kernels crate to validated PTX, run from a `build.rs`.
//!
//! A kernels crate's build script calls [`build_script`]; the crate then embeds the PTX with
//! `include!(concat!(env!("OUT_DIR"), "/ferrocomm_ptx.rs"))`, so a program that depends on it needs nothing
//! else at run time.
//!
//! ```no_run
//! // build.rs of a kernels crate
//! fn main() {
//!     ferrocomm_builder::build_script();
//! }
//! ```
//!
//! For each requested architecture (default `sm_80` and `sm_90`; [`PtxBuilder::arch`] or
//! `FERROCOMM_PTX_ARCHES=sm_80,sm_90` choose others) the builder runs a nested
//! `cargo rustc --target nvptx64-nvidia-cuda -Zbuild-std=core --crate-type=staticlib -- --emit=asm`
//! with fat LTO, in a target directory of its own, with the outer build's environment filtered. The
//! kernels' launch bounds (`#[kernel(launch_bounds(..))]`) become PTX directives (see [`launch_bounds`]), and
//! every module is then assembled by `ptxas` when one is found (see [`ptxas`]).
//!
//! # The traced flavour
//!
//! Besides, the builder compiles a *traced* PTX module with `--cfg ferrocomm_trace`, in which the device
//! library records trace events (`ferrocomm_device::trace`); the runtime loads it only for a team with
//! tracing on, so the ordinary modules stay byte for byte what they were. To keep build time down it is
//! made for one architecture — the newest one built, or those `FERROCOMM_TRACE_ARCHES` (or
//! [`PtxBuilder::trace_arch`]) name; `none` makes none — and as PTX only: ptxas validates it but no SASS is
//! embedded, so a traced team JIT-compiles it at first load (newer GPUs JIT any PTX forward). It is embedded
//! through [`TRACE_INCLUDE_FILE`].
//!
//! # The NVSHMEM flavour
//!
//! [`PtxBuilder::nvshmem`] adds a flavour whose kernels call NVSHMEM's device API (the device library's
//! `nvshmem` module, compiled with `--cfg ferrocomm_nvshmem`), so they reach GPUs on other nodes: the
//! nested build emits LLVM bitcode, which is linked with NVSHMEM's `libnvshmem_device.bc` and lowered to
//! PTX by the `llvm-tools` component (see [`nvshmem`]). It is embedded through [`NVSHMEM_INCLUDE_FILE`]
//! (PTX, validated by ptxas), and a team initialised with NVSHMEM loads it instead of the ordinary modules.
//! Where the bitcode is missing the flavour is skipped with a warning, unless `FERROCOMM_REQUIRE_NVSHMEM=1`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod arch;
pub mod command;
pub mod depinfo;
mod error;
pub mod launch_bounds;
pub mod nvshmem;
pub mod ptxas;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use arch::Arch;
pub use command::Flavour;
use command::{NESTED_ENV, NestedBuild};
pub use error::BuildError;
use ptxas::PtxasLocation;

/// Chooses the architectures when the builder is not told: a comma-separated list (`sm_80,sm_90`).
pub const ARCHES_ENV: &str = "FERROCOMM_PTX_ARCHES";
/// The file, in `OUT_DIR`, that a kernels crate includes to embed its PTX.
pub const INCLUDE_FILE: &str = "ferrocomm_ptx.rs";

/// The file `ferrocomm::kernel_module!()` includes for the SASS: a `&[(compute capability, cubin)]` slice
/// expression, empty when no ptxas was found (the GPU then JIT-compiles the PTX at first load).
pub const SASS_INCLUDE_FILE: &str = "ferrocomm_sass.rs";

/// Chooses the architectures of the traced flavour: a comma-separated list, or `none`.
pub const TRACE_ARCHES_ENV: &str = "FERROCOMM_TRACE_ARCHES";

/// The file `ferrocomm::kernel_module!()` includes for the traced flavour: a `&[(compute capability, PTX)]`
/// slice expression, empty when no traced module was built.
pub const TRACE_INCLUDE_FILE: &str = "ferrocomm_ptx_trace.rs";

/// The file `ferrocomm::kernel_module!()` includes for the NVSHMEM flavour: a `&[(compute capability, PTX)]`
/// slice expression, empty when the crate asked for none or the bitcode was not found.
pub const NVSHMEM_INCLUDE_FILE: &str = "ferrocomm_ptx_nvshmem.rs";

/// Builds a kernels crate's PTX. See the crate documentation.
#[derive(Debug, Clone)]
#[must_use]
pub struct PtxBuilder {
    crate_dir: PathBuf,
    arches: Vec<Arch>,
    target_dir: Option<PathBuf>,
    out_dir: Option<PathBuf>,
    toolchain: Option<String>,
    cargo_directives: bool,
    /// `None`: the environment or the default decides; `Some(empty)`: no traced flavour.
    trace_arches: Option<Vec<Arch>>,
    /// `None`: no NVSHMEM flavour; `Some(empty)`: for the ordinary modules' architectures.
    nvshmem_arches: Option<Vec<Arch>>,
}

/// One PTX module the build made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxFile {
    /// The architecture it was compiled for.
    pub arch: Arch,
    /// The PTX, copied to the output directory.
    pub path: PathBuf,
    /// The SASS ptxas assembled from it (a cubin beside the PTX), when ptxas was found.
    pub cubin: Option<PathBuf>,
}

/// What a successful build made.
#[derive(Debug, Clone)]
pub struct PtxOutput {
    /// The kernels crate's name (as a Rust identifier).
    pub krate: String,
    /// One module per architecture, in the order of [`PtxBuilder::arch`].
    pub modules: Vec<PtxFile>,
    /// The source files the PTX depends on (from the dep-info file).
    pub sources: Vec<PathBuf>,
    /// The compiler's warnings, rendered, without duplicates across architectures.
    pub warnings: Vec<String>,
    /// The ptxas that validated every module; `None` when none was found (and none was required).
    pub validated_by: Option<PathBuf>,
    /// The traced flavour's modules (PTX only, validated by ptxas when found; see the crate docs).
    pub traced: Vec<PtxFile>,
    /// The NVSHMEM flavour's modules (PTX only, validated by ptxas when found).
    pub nvshmem: Vec<PtxFile>,
    /// Why an NVSHMEM flavour that was asked for was not built (the bitcode is missing).
    pub nvshmem_skipped: Option<String>,
    /// What the NVSHMEM flavour depends on outside the crate, which a build script reruns on: the device
    /// bitcode it was linked with or, when none was found, the folders where installing it would change
    /// something (see [`nvshmem::BitcodeLocation::Missing`]).
    pub nvshmem_watched: Vec<PathBuf>,
}

impl PtxBuilder {
    /// A builder for the kernels crate whose `Cargo.toml` is in `crate_dir`.
    pub fn new(crate_dir: impl Into<PathBuf>) -> Self {
        PtxBuilder {
            crate_dir: crate_dir.into(),
            arches: Vec::new(),
            target_dir: None,
            out_dir: None,
            toolchain: None,
            cargo_directives: false,
            trace_arches: None,
            nvshmem_arches: None,
        }
    }

    /// Also builds the NVSHMEM flavour (see the crate docs), for the ordinary modules' architectures unless
    /// [`PtxBuilder::nvshmem_arch`] names others.
    pub fn nvshmem(mut self) -> Self {
        self.nvshmem_arches.get_or_insert_with(Vec::new);
        self
    }

    /// Builds the NVSHMEM flavour for `arch` (NVSHMEM 3.4's bitcode supports sm_70 and newer).
    pub fn nvshmem_arch(mut self, arch: Arch) -> Self {
        let arches = self.nvshmem_arches.get_or_insert_with(Vec::new);
        if !arches.contains(&arch) {
            arches.push(arch);
        }
        self
    }

    /// Adds an architecture to build the traced flavour for (default: the newest architecture built, or
    /// `FERROCOMM_TRACE_ARCHES`).
    pub fn trace_arch(mut self, arch: Arch) -> Self {
        let arches = self.trace_arches.get_or_insert_with(Vec::new);
        if !arches.contains(&arch) {
            arches.push(arch);
        }
        self
    }

    /// Builds no traced flavour (teams with tracing on then refuse this crate's kernels with an error
    /// that names the fix).
    pub fn no_trace(mut self) -> Self {
        self.trace_arches = Some(Vec::new());
        self
    }

    /// Adds an architecture to build for. Without any, `FERROCOMM_PTX_ARCHES` or [`Arch::DEFAULT`] decide.
    pub fn arch(mut self, arch: Arch) -> Self {
        if !self.arches.contains(&arch) {
            self.arches.push(arch);
        }
        self
    }

    /// The nested build's target directory (default: `ferrocomm-ptx/` beside the outer build's profile
    /// directories). Each architecture gets a sub-directory.
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }

    /// Where the PTX files and the include file go (default: `OUT_DIR`).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Runs the nested build with this rustup toolchain instead of the outer build's compiler.
    pub fn toolchain(mut self, name: impl Into<String>) -> Self {
        self.toolchain = Some(name.into());
        self
    }

    /// Prints `cargo:rerun-if-changed` and `cargo:warning` lines (what a build script wants).
    pub fn cargo_directives(mut self, on: bool) -> Self {
        self.cargo_directives = on;
        self
    }

    /// Compiles the crate for every architecture, validates each module with ptxas, and writes the PTX and
    /// the include file into the output directory.
    pub fn build(&self) -> Result<PtxOutput, BuildError> {
        let arches = self.resolved_arches()?;
        let out_dir = match &self.out_dir {
            Some(dir) => dir.clone(),
            None => env::var_os("OUT_DIR").map(PathBuf::from).ok_or(BuildError::MissingEnv("OUT_DIR"))?,
        };
        let target_root = match &self.target_dir {
            Some(dir) => dir.clone(),
            None => default_target_root(&out_dir),
        };
        let manifest = self.crate_dir.join("Cargo.toml");
        let cargo = self.cargo_program();
        self.check_toolchain()?;

        let mut modules = Vec::new();
        let mut warnings: Vec<String> = Vec::new();
        let mut sources = Vec::new();
        let mut krate = String::new();
        let trace_arches = self.resolved_trace_arches(&arches)?;
        let mut traced = Vec::new();
        let flavours =
            arches.iter().map(|&a| (a, Flavour::Plain)).chain(trace_arches.iter().map(|&a| (a, Flavour::Traced)));
        for (arch, flavour) in flavours {
            let nested = NestedBuild {
                cargo: cargo.clone(),
                manifest: manifest.clone(),
                target_dir: command::arch_target_dir(&target_root, arch, flavour),
                arch,
                toolchain: self.toolchain.clone(),
                flavour,
            };
            let built = run_nested(&nested)?;
            if flavour == Flavour::Traced {
                let dest = out_dir.join(format!("{}.{arch}.trace.ptx", built.krate));
                write_module(&built.artifact, &dest)?;
                traced.push(PtxFile { arch, path: dest, cubin: None });
                continue;
            }
            for w in built.warnings {
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
            let dest = out_dir.join(format!("{}.{arch}.ptx", built.krate));
            write_module(&built.artifact, &dest)?;
            modules.push(PtxFile { arch, path: dest, cubin: None });
            sources = built.sources;
            krate = built.krate;
        }

        let (nvshmem, nvshmem_skipped, nvshmem_watched) = match &self.nvshmem_arches {
            None => (Vec::new(), None, Vec::new()),
            Some(chosen) => {
                let nv_arches = if chosen.is_empty() { arches.clone() } else { chosen.clone() };
                let mut build_one = |arch: Arch| {
                    let nested = NestedBuild {
                        cargo: cargo.clone(),
                        manifest: manifest.clone(),
                        target_dir: command::arch_target_dir(&target_root, arch, Flavour::Nvshmem),
                        arch,
                        toolchain: self.toolchain.clone(),
                        flavour: Flavour::Nvshmem,
                    };
                    run_nested(&nested)
                };
                self.build_nvshmem(&nv_arches, &out_dir, &mut build_one)?
            }
        };

        let validated_by = assemble_all(&mut modules)?;
        if let Some(ptxas) = &validated_by {
            let others: Vec<&PtxFile> = traced.iter().chain(&nvshmem).collect();
            each_at_once(&others, |m| ptxas::validate(ptxas, &m.path, m.arch))?;
        }
        let output = PtxOutput {
            krate,
            modules,
            sources,
            warnings,
            validated_by,
            traced,
            nvshmem,
            nvshmem_skipped,
            nvshmem_watched,
        };
        output.write_include(&out_dir.join(INCLUDE_FILE))?;
        output.write_sass_include(&out_dir.join(SASS_INCLUDE_FILE))?;
        output.write_trace_include(&out_dir.join(TRACE_INCLUDE_FILE))?;
        write_ptx_include(&output.nvshmem, &out_dir.join(NVSHMEM_INCLUDE_FILE))?;
        if self.cargo_directives {
            output.print_cargo_directives(&manifest);
        }
        Ok(output)
    }

    /// The NVSHMEM flavour for `arches`: finds the bitcode (or says why the flavour is skipped), checks the
    /// LLVM tools, then per architecture runs the nested build (`nested`) and links its bitcode into PTX
    /// that must carry the expected NVSHMEM version. Returns the modules, why none were built, and the
    /// bitcode they were linked with.
    #[allow(clippy::type_complexity)]
    fn build_nvshmem(
        &self,
        arches: &[Arch],
        out_dir: &Path,
        nested: &mut dyn FnMut(Arch) -> Result<Nested, BuildError>,
    ) -> Result<(Vec<PtxFile>, Option<String>, Vec<PathBuf>), BuildError> {
        let expected = nvshmem::expected_version()?;
        let bitcode = match nvshmem::find_bitcode() {
            nvshmem::BitcodeLocation::Found { path, .. } => path,
            nvshmem::BitcodeLocation::Missing { looked, watch } => {
                let looked = looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
                let err = BuildError::NvshmemMissing { looked, requirement: nvshmem::PIP_REQUIREMENT };
                if nvshmem::nvshmem_required() {
                    return Err(err);
                }
                return Ok((Vec::new(), Some(err.to_string()), watch));
            }
        };
        let (sysroot, host, compiler_llvm) = self.compiler_facts()?;
        let toolchain = self.toolchain_name();
        let tools = nvshmem::LlvmTools::find(&sysroot, &host, &toolchain)?;
        let tools_llvm = tools.llvm_major()?;
        if tools_llvm != compiler_llvm {
            return Err(BuildError::LlvmVersionMismatch {
                bin: tools.bin.clone(),
                tools: tools_llvm,
                compiler: compiler_llvm,
                toolchain,
            });
        }
        let mut files = Vec::new();
        for &arch in arches {
            let built = nested(arch)?;
            let ptx = out_dir.join(format!("{}.{arch}.nvshmem.ptx", built.krate));
            tools.link(&built.artifact, &bitcode, arch, &ptx)?;
            let linked = fs::read_to_string(&ptx).map_err(BuildError::io("reading", &ptx))?;
            let text = launch_bounds::apply(&linked, &ptx.display().to_string())?;
            fs::write(&ptx, &text).map_err(BuildError::io("writing PTX to", &ptx))?;
            // A module that calls no NVSHMEM function carries no version: nothing to disagree with.
            if let Some(found) = nvshmem::ptx_version(&text)
                && found != expected
            {
                return Err(BuildError::NvshmemVersionMismatch { found, expected, bitcode });
            }
            files.push(PtxFile { arch, path: ptx, cubin: None });
        }
        Ok((files, None, vec![bitcode]))
    }

    /// The compiler's sysroot, host triple and LLVM major version (`rustc --print sysroot`, `rustc -vV`).
    fn compiler_facts(&self) -> Result<(PathBuf, String, u32), BuildError> {
        let spawn = |source| BuildError::Spawn { program: "rustc".into(), source };
        let sysroot = self.rustc().args(["--print", "sysroot"]).output().map_err(spawn)?;
        let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
        let verbose = self.rustc().arg("-vV").output().map_err(spawn)?;
        let verbose = String::from_utf8_lossy(&verbose.stdout).into_owned();
        let host = verbose.lines().find_map(|l| l.strip_prefix("host: ")).unwrap_or_default().trim().to_owned();
        let llvm = nvshmem::llvm_major_in(&verbose).ok_or_else(|| {
            spawn(std::io::Error::other(format!("`rustc -vV` names no LLVM version: {}", verbose.trim())))
        })?;
        Ok((sysroot, host, llvm))
    }

    fn toolchain_name(&self) -> String {
        self.toolchain.clone().or_else(|| env::var("RUSTUP_TOOLCHAIN").ok()).unwrap_or_else(|| "nightly".into())
    }

    fn resolved_arches(&self) -> Result<Vec<Arch>, BuildError> {
        if !self.arches.is_empty() {
            return Ok(self.arches.clone());
        }
        match env::var(ARCHES_ENV) {
            Ok(list) if !list.trim().is_empty() => Arch::parse_list(&list),
            _ => Ok(Arch::DEFAULT.to_vec()),
        }
    }

    /// The traced flavour's architectures: the builder's, else `FERROCOMM_TRACE_ARCHES` (`none`: none), else
    /// the newest of `arches`.
    fn resolved_trace_arches(&self, arches: &[Arch]) -> Result<Vec<Arch>, BuildError> {
        if let Some(chosen) = &self.trace_arches {
            return Ok(chosen.clone());
        }
        match env::var(TRACE_ARCHES_ENV) {
            Ok(list) if list.trim().eq_ignore_ascii_case("none") => Ok(Vec::new()),
            Ok(list) if !list.trim().is_empty() => Arch::parse_list(&list),
            _ => Ok(arches.iter().copied().max_by_key(|a| a.compute_capability()).into_iter().collect()),
        }
    }

    fn cargo_program(&self) -> PathBuf {
        match (&self.toolchain, env::var_os("CARGO")) {
            (None, Some(cargo)) => cargo.into(),
            _ => "cargo".into(),
        }
    }

    fn rustc(&self) -> Command {
        let mut cmd = match (&self.toolchain, env::var_os("RUSTC")) {
            (None, Some(rustc)) => Command::new(rustc),
            _ => Command::new("rustc"),
        };
        // From the crate's directory, rustup honours the crate's own rust-toolchain.toml.
        cmd.current_dir(&self.crate_dir);
        cmd.env("RUSTUP_AUTO_INSTALL", "0");
        if let Some(toolchain) = &self.toolchain {
            cmd.env("RUSTUP_TOOLCHAIN", toolchain);
        }
        cmd
    }

    /// Nightly compiler with rust-src: checked up front, so the error names the fix instead of quoting a
    /// page of `-Zbuild-std` failures.
    fn check_toolchain(&self) -> Result<(), BuildError> {
        let toolchain_name = || self.toolchain_name();
        let version = self
            .rustc()
            .arg("--version")
            .output()
            .map_err(|source| BuildError::Spawn { program: "rustc".into(), source })?;
        let stderr = String::from_utf8_lossy(&version.stderr);
        if !version.status.success() {
            if stderr.contains("is not installed") {
                return Err(BuildError::ToolchainNotInstalled { toolchain: toolchain_name() });
            }
            return Err(BuildError::Spawn { program: "rustc".into(), source: std::io::Error::other(stderr.trim()) });
        }
        let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
        if !(version.contains("nightly") || version.contains("-dev")) {
            return Err(BuildError::NotNightly { version });
        }
        let sysroot = self
            .rustc()
            .args(["--print", "sysroot"])
            .output()
            .map_err(|source| BuildError::Spawn { program: "rustc".into(), source })?;
        let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
        check_rust_src(&sysroot, &toolchain_name())
    }
}

/// `-Zbuild-std=core` compiles `core` from the rust-src component; fail early when it is missing.
pub fn check_rust_src(sysroot: &Path, toolchain: &str) -> Result<(), BuildError> {
    let core = sysroot.join("lib/rustlib/src/rust/library/core/Cargo.toml");
    if core.is_file() {
        Ok(())
    } else {
        Err(BuildError::RustSrcMissing { sysroot: sysroot.to_owned(), toolchain: toolchain.to_owned() })
    }
}

impl PtxOutput {
    /// Writes the file a kernels crate `include!`s: a `&[(compute capability, PTX)]` slice expression.
    pub fn write_include(&self, path: &Path) -> Result<(), BuildError> {
        write_ptx_include(&self.modules, path)
    }

    /// Writes the file `ferrocomm::kernel_module!()` includes for the traced flavour: the same form as
    /// [`PtxOutput::write_include`]'s, empty when no traced module was built.
    pub fn write_trace_include(&self, path: &Path) -> Result<(), BuildError> {
        write_ptx_include(&self.traced, path)
    }

    /// Writes the file `ferrocomm::kernel_module!()` includes for the SASS: a `&[(compute capability,
    /// cubin)]` slice expression of the modules ptxas assembled (empty without ptxas).
    pub fn write_sass_include(&self, path: &Path) -> Result<(), BuildError> {
        let mut text =
            String::from("// @generated by ferrocomm-builder: (compute capability, SASS cubin) per architecture\n&[\n");
        for m in &self.modules {
            if let Some(cubin) = &m.cubin {
                text.push_str(&format!(
                    "    ({}u32, include_bytes!({:?})),\n",
                    m.arch.compute_capability(),
                    cubin.display().to_string()
                ));
            }
        }
        text.push_str("]\n");
        fs::write(path, text).map_err(BuildError::io("writing", path))
    }

    /// What the build embeds, in words: "SASS for sm_80, sm_90 and PTX" or "PTX only (...)".
    pub fn embedded(&self) -> String {
        let sass: Vec<String> = self.modules.iter().filter(|m| m.cubin.is_some()).map(|m| m.arch.to_string()).collect();
        if sass.is_empty() {
            "PTX only: no ptxas, so GPUs JIT-compile the PTX when a module first loads (seconds, once per JIT cache)"
                .to_owned()
        } else {
            format!("SASS for {} and PTX (newer GPUs JIT the PTX)", sass.join(", "))
        }
    }

    /// The `cargo:rerun-if-*` lines: the build's inputs only. A file the build script writes itself must
    /// not be one: cargo dates a script's run from its start, so such a file would always look changed and
    /// every build would rerun the script and rebuild everything that depends on the crate.
    fn rerun_directives(&self, manifest: &Path) -> Vec<String> {
        let files = std::iter::once(manifest).chain(self.sources.iter().map(PathBuf::as_path));
        let mut lines: Vec<String> = files
            .chain(self.nvshmem_watched.iter().map(PathBuf::as_path))
            .map(|f| format!("cargo:rerun-if-changed={}", f.display()))
            .collect();
        for var in [
            ARCHES_ENV,
            TRACE_ARCHES_ENV,
            ptxas::PTXAS_ENV,
            ptxas::REQUIRE_PTXAS_ENV,
            nvshmem::BITCODE_ENV,
            nvshmem::HOME_ENV,
            nvshmem::REQUIRE_ENV,
            nvshmem::VERSION_ENV,
        ] {
            lines.push(format!("cargo:rerun-if-env-changed={var}"));
        }
        lines
    }

    fn print_cargo_directives(&self, manifest: &Path) {
        for line in self.rerun_directives(manifest) {
            println!("{line}");
        }
        if let Some(why) = &self.nvshmem_skipped {
            println!("cargo:warning=the NVSHMEM flavour of {} was not built: {why}", self.krate);
        }
        for warning in &self.warnings {
            for line in warning.lines() {
                println!("cargo:warning={line}");
            }
        }
        if self.validated_by.is_none() {
            println!(
                "cargo:warning=ptxas not found: the PTX was not validated, and no SASS is embedded, so GPUs JIT-compile \
                 it at first load (pip install nvidia-cuda-nvcc==13.0.88)"
            );
        }
        // Seen with `cargo build -vv`; the build without ptxas says so above as a warning.
        println!("ferrocomm-builder: {} embeds {}", self.krate, self.embedded());
    }
}

/// Writes a `&[(compute capability, PTX)]` slice expression of `modules` to `path`.
fn write_ptx_include(modules: &[PtxFile], path: &Path) -> Result<(), BuildError> {
    let mut text = String::from("// @generated by ferrocomm-builder: (compute capability, PTX) per architecture\n&[\n");
    for m in modules {
        text.push_str(&format!(
            "    ({}u32, include_str!({:?})),\n",
            m.arch.compute_capability(),
            m.path.display().to_string()
        ));
    }
    text.push_str("]\n");
    fs::write(path, text).map_err(BuildError::io("writing", path))
}

/// The entry points (`.entry NAME(`) a PTX module defines.
pub fn ptx_entries(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|l| {
            l.trim_start().strip_prefix(".visible .entry ").or_else(|| l.trim_start().strip_prefix(".entry "))
        })
        .map(|rest| rest.split('(').next().unwrap_or(rest).trim())
        .collect()
}

/// For a kernels crate's build.rs: builds the crate being compiled and embeds its PTX. Does nothing when
/// the crate is itself being compiled for the GPU (the nested build). Exits with the error's message on
/// failure, which cargo shows as the build script's output.
pub fn build_script() {
    build_script_with(|builder| builder)
}

/// [`build_script`] with the builder configured by `configure` first, e.g. for the NVSHMEM flavour:
///
/// ```no_run
/// // the body of a kernels crate's build.rs `main`
/// ferrocomm_builder::build_script_with(|b| b.nvshmem());
/// ```
pub fn build_script_with(configure: impl FnOnce(PtxBuilder) -> PtxBuilder) {
    if is_nested_build() {
        return;
    }
    let Some(dir) = env::var_os("CARGO_MANIFEST_DIR") else {
        eprintln!("error: {}", BuildError::MissingEnv("CARGO_MANIFEST_DIR"));
        std::process::exit(1);
    };
    if let Err(err) = configure(PtxBuilder::new(dir)).cargo_directives(true).build() {
        eprintln!("error: {err}");
        std::process::exit(1);
    }
}

/// Whether this build script runs inside the builder's own nested build (or for the GPU target itself).
pub fn is_nested_build() -> bool {
    env::var_os(NESTED_ENV).is_some() || env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "nvptx64")
}

/// `<target>/ferrocomm-ptx`, from `OUT_DIR = <target>/<profile>/build/<pkg>-<hash>/out`: shared by every
/// kernels crate and profile of the outer build, so `core` is compiled once per architecture.
fn default_target_root(out_dir: &Path) -> PathBuf {
    out_dir.ancestors().nth(4).unwrap_or(out_dir).join("ferrocomm-ptx")
}

struct Nested {
    krate: String,
    /// The PTX (`.s`), or for the NVSHMEM flavour the bitcode (`.bc`).
    artifact: PathBuf,
    sources: Vec<PathBuf>,
    warnings: Vec<String>,
}

fn run_nested(nested: &NestedBuild) -> Result<Nested, BuildError> {
    let mut cmd = nested.command();
    if let Some(dir) = nested.manifest.parent() {
        cmd.current_dir(dir);
    }
    let output =
        cmd.output().map_err(|source| BuildError::Spawn { program: nested.cargo.display().to_string(), source })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("is not installed") && stderr.contains("toolchain") {
        let toolchain = nested.toolchain.clone().unwrap_or_else(|| env::var("RUSTUP_TOOLCHAIN").unwrap_or_default());
        return Err(BuildError::ToolchainNotInstalled { toolchain });
    }

    let mut warnings = Vec::new();
    let mut errors = Vec::new();
    let mut krate = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        match msg["reason"].as_str() {
            Some("compiler-message") => {
                let rendered = msg["message"]["rendered"].as_str().unwrap_or_default().trim_end().to_owned();
                match msg["message"]["level"].as_str() {
                    Some("error") => errors.push(rendered),
                    // The builder itself asks for the PTX ISA version; that is not the user's concern.
                    Some("warning") if rendered.contains("unstable feature specified for `-Ctarget-feature`: `ptx") => {
                    }
                    Some("warning") => warnings.push(rendered),
                    _ => {}
                }
            }
            Some("compiler-artifact") => {
                let kinds = msg["target"]["kind"].as_array().cloned().unwrap_or_default();
                if kinds.iter().any(|k| k == "staticlib") {
                    krate = msg["target"]["name"].as_str().map(|n| n.replace('-', "_"));
                }
            }
            _ => {}
        }
    }
    let manifest_name = || nested.manifest.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned());
    if !output.status.success() {
        // Cargo's own errors (a bad manifest, a missing path) are on stderr, not in the JSON.
        const PROGRESS: &[&str] = &["Compiling", "Finished", "Blocking", "Updating", "Locking", "Download", "Running"];
        let rendered = errors.join("\n");
        errors.extend(
            stderr
                .lines()
                .filter(|l| !PROGRESS.iter().any(|p| l.trim_start().starts_with(p)))
                .filter(|l| !rendered.contains(l.trim()))
                .map(str::to_owned),
        );
        return Err(BuildError::KernelCompile {
            krate: krate.or_else(manifest_name).unwrap_or_default(),
            arch: nested.arch,
            diagnostics: errors.join("\n"),
        });
    }
    let deps = nested.deps_dir();
    let krate =
        krate.ok_or_else(|| BuildError::NoPtx { krate: manifest_name().unwrap_or_default(), dir: deps.clone() })?;
    let ext = if nested.flavour == Flavour::Nvshmem { "bc" } else { "s" };
    let artifact = newest_with_prefix(&deps, &format!("{krate}-"), ext)
        .ok_or_else(|| BuildError::NoPtx { krate: krate.clone(), dir: deps.clone() })?;
    let depfile = nested.target_dir.join(command::TARGET).join("release").join(format!("lib{krate}.d"));
    let sources = fs::read_to_string(&depfile).map(|d| depinfo::parse(&d)).unwrap_or_default();
    Ok(Nested { krate, artifact, sources, warnings })
}

/// Writes the PTX the compiler made (`artifact`) to `dest`, with the kernels' launch bounds applied
/// ([`launch_bounds`]).
fn write_module(artifact: &Path, dest: &Path) -> Result<(), BuildError> {
    let ptx = fs::read_to_string(artifact).map_err(BuildError::io("reading PTX from", artifact))?;
    let ptx = launch_bounds::apply(&ptx, &artifact.display().to_string())?;
    fs::write(dest, ptx).map_err(BuildError::io("writing PTX to", dest))
}

/// The most recently written `<prefix>*.<ext>` in `dir`: the assembly of the build that just ran.
fn newest_with_prefix(dir: &Path, prefix: &str, ext: &str) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == ext)
                && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix))
        })
        .max_by_key(|p| fs::metadata(p).and_then(|m| m.modified()).ok())
}

/// Assembles every module with ptxas (which validates it) into a cubin beside its PTX, recorded in the
/// module; returns the ptxas used, or `None` when there is none (and none is required).
fn assemble_all(modules: &mut [PtxFile]) -> Result<Option<PathBuf>, BuildError> {
    match ptxas::find_ptxas() {
        PtxasLocation::Found { path, .. } => {
            let cubins: Vec<PathBuf> = modules.iter().map(|m| m.path.with_extension("cubin")).collect();
            let jobs: Vec<(&PtxFile, &PathBuf)> = modules.iter().zip(&cubins).collect();
            each_at_once(&jobs, |(m, cubin)| ptxas::assemble(&path, &m.path, m.arch, cubin))?;
            for (m, cubin) in modules.iter_mut().zip(cubins) {
                m.cubin = Some(cubin);
            }
            Ok(Some(path))
        }
        PtxasLocation::Missing if ptxas::ptxas_required() => Err(BuildError::PtxasMissing),
        PtxasLocation::Missing => Ok(None),
    }
}

/// Runs `job` on every item at once, one thread each, and returns the first error in the items' order.
/// ptxas is single-threaded and takes tens of seconds on a large module: the architectures' modules of a
/// crate assemble side by side instead of one after another (a rebuild of one kernels crate, as a mutant's,
/// otherwise waits for them in turn).
fn each_at_once<T: Sync>(items: &[T], job: impl Fn(&T) -> Result<(), BuildError> + Sync) -> Result<(), BuildError> {
    std::thread::scope(|s| {
        let running: Vec<_> = items.iter().map(|item| s.spawn(|| job(item))).collect();
        running.into_iter().try_for_each(|r| r.join().expect("a ptxas thread panicked"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_target_root_is_beside_the_profile_directories() {
        let out = Path::new("/w/target/release/build/k-0123/out");
        assert_eq!(default_target_root(out), Path::new("/w/target/ferrocomm-ptx"));
    }

    #[test]
    fn rust_src_check_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let err = check_rust_src(dir.path(), "nightly-2026-05-20").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("rustup component add rust-src --toolchain nightly-2026-05-20"), "{msg}");
        fs::create_dir_all(dir.path().join("lib/rustlib/src/rust/library/core")).unwrap();
        fs::write(dir.path().join("lib/rustlib/src/rust/library/core/Cargo.toml"), "").unwrap();
        check_rust_src(dir.path(), "x").unwrap();
    }

    #[test]
    fn entries_are_read_from_ptx() {
        let ptx = ".visible .entry put_signal(\n.param .u64 a\n)\n.entry local_only(\n.func helper(";
        assert_eq!(ptx_entries(ptx), vec!["put_signal", "local_only"]);
    }

    #[test]
    fn a_build_script_reruns_on_its_inputs_never_on_what_it_wrote() {
        let out_dir = Path::new("/w/target/debug/build/k-0123/out");
        let bitcode = PathBuf::from("/site-packages/nvidia/nvshmem/lib/libnvshmem_device.bc");
        let out = PtxOutput {
            krate: "k".into(),
            modules: vec![PtxFile { arch: Arch::SM_80, path: out_dir.join("k.sm_80.ptx"), cubin: None }],
            sources: vec![PathBuf::from("/w/k/src/lib.rs")],
            warnings: vec![],
            validated_by: None,
            traced: vec![PtxFile { arch: Arch::SM_80, path: out_dir.join("k.sm_80.trace.ptx"), cubin: None }],
            nvshmem: vec![PtxFile { arch: Arch::SM_80, path: out_dir.join("k.sm_80.nvshmem.ptx"), cubin: None }],
            nvshmem_skipped: None,
            nvshmem_watched: vec![bitcode.clone()],
        };
        let lines = out.rerun_directives(Path::new("/w/k/Cargo.toml"));
        let files: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("cargo:rerun-if-changed=")).collect();
        assert_eq!(files, ["/w/k/Cargo.toml", "/w/k/src/lib.rs", bitcode.to_str().unwrap()]);
        assert!(lines.contains(&format!("cargo:rerun-if-env-changed={ARCHES_ENV}")), "{lines:?}");
    }

    #[test]
    fn include_file_is_a_slice_of_arch_and_ptx() {
        let dir = tempfile::tempdir().unwrap();
        let out = PtxOutput {
            krate: "k".into(),
            modules: vec![
                PtxFile { arch: Arch::SM_80, path: dir.path().join("k.sm_80.ptx"), cubin: None },
                PtxFile {
                    arch: Arch::SM_90,
                    path: dir.path().join("k.sm_90.ptx"),
                    cubin: Some(dir.path().join("k.sm_90.cubin")),
                },
            ],
            sources: vec![],
            warnings: vec![],
            validated_by: None,
            traced: vec![PtxFile { arch: Arch::SM_90, path: dir.path().join("k.sm_90.trace.ptx"), cubin: None }],
            nvshmem: vec![],
            nvshmem_skipped: None,
            nvshmem_watched: vec![],
        };
        let inc = dir.path().join(INCLUDE_FILE);
        out.write_include(&inc).unwrap();
        let text = fs::read_to_string(inc).unwrap();
        assert!(text.contains("(90u32, include_str!("), "{text}");
        assert!(text.contains("k.sm_90.ptx"), "{text}");
        // The SASS include names only the cubins ptxas made.
        let sass = dir.path().join(SASS_INCLUDE_FILE);
        out.write_sass_include(&sass).unwrap();
        let text = fs::read_to_string(sass).unwrap();
        assert!(text.contains("(90u32, include_bytes!(") && text.contains("k.sm_90.cubin"), "{text}");
        assert!(!text.contains("80u32"), "{text}");
        assert_eq!(out.embedded(), "SASS for sm_90 and PTX (newer GPUs JIT the PTX)");
        let trace = dir.path().join(TRACE_INCLUDE_FILE);
        out.write_trace_include(&trace).unwrap();
        let text = fs::read_to_string(trace).unwrap();
        assert!(text.contains("(90u32, include_str!(") && text.contains("k.sm_90.trace.ptx"), "{text}");
    }
}
