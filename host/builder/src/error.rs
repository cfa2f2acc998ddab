//! Build errors. Each message says what to do about it.

use std::path::PathBuf;

/// Why a PTX build failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// An architecture name that is not `sm_NN` with NN ≥ 70.
    #[error("`{given}` is not a GPU architecture ferrocomm builds for: write sm_NN with NN ≥ 70, e.g. `sm_80,sm_90`")]
    BadArch {
        /// What was given.
        given: String,
    },

    /// `cargo`/`rustc` could not be started at all.
    #[error("could not run `{program}`: {source}. Is Rust installed (https://rustup.rs)?")]
    Spawn {
        /// The program that failed to start.
        program: String,
        /// The operating system's reason.
        source: std::io::Error,
    },

    /// The toolchain the build asked for is not installed.
    #[error(
        "the Rust toolchain `{toolchain}` is not installed. Fix: run `rustup toolchain install` in the \
         repository root (it reads rust-toolchain.toml), or `rustup toolchain install {toolchain} \
         --component rust-src`"
    )]
    ToolchainNotInstalled {
        /// The toolchain's name.
        toolchain: String,
    },

    /// Building `core` for nvptx64 needs a nightly compiler (`-Zbuild-std`, `abi_ptx`).
    #[error(
        "kernels need a nightly compiler, but `{version}` is not one. Fix: build inside the repository \
         so that rust-toolchain.toml selects the pinned nightly, or pass it with `cargo +nightly-…`"
    )]
    NotNightly {
        /// `rustc --version` of the compiler found.
        version: String,
    },

    /// `-Zbuild-std=core` needs the standard library's sources.
    #[error(
        "the rust-src component is missing from the toolchain at {}. Fix: `rustup component add rust-src \
         --toolchain {toolchain}`",
        sysroot.display()
    )]
    RustSrcMissing {
        /// The compiler's sysroot.
        sysroot: PathBuf,
        /// The toolchain's name, as rustup knows it.
        toolchain: String,
    },

    /// The kernels crate did not compile for `nvptx64-nvidia-cuda`.
    #[error(
        "the kernels crate `{krate}` does not compile for nvptx64-nvidia-cuda ({arch}).\n\
         Kernel crates are #![no_std] on the GPU: no std, no alloc, no host-only dependencies \
         (put those under [target.'cfg(not(target_arch = \"nvptx64\"))'.dependencies]).\n\
         The compiler said:\n{diagnostics}"
    )]
    KernelCompile {
        /// The crate's name.
        krate: String,
        /// The architecture being built.
        arch: crate::Arch,
        /// The compiler's and cargo's errors, rendered.
        diagnostics: String,
    },

    /// The nested build succeeded but left no PTX where it should be.
    #[error("the build of `{krate}` made no PTX in {}: is it a library crate?", dir.display())]
    NoPtx {
        /// The crate's name.
        krate: String,
        /// Where the PTX was looked for.
        dir: PathBuf,
    },

    /// ptxas refused a module: the PTX is wrong for that architecture.
    #[error(
        "ptxas ({}) rejected the PTX for {arch} in {}:\n{stderr}",
        ptxas.display(),
        ptx.display()
    )]
    PtxasRejected {
        /// The ptxas used.
        ptxas: PathBuf,
        /// The architecture.
        arch: crate::Arch,
        /// The PTX file.
        ptx: PathBuf,
        /// What ptxas printed.
        stderr: String,
    },

    /// `FERROCOMM_REQUIRE_PTXAS=1` and no ptxas was found.
    #[error(
        "FERROCOMM_REQUIRE_PTXAS=1 but no ptxas was found (looked at $FERROCOMM_PTXAS, $PATH, \
         $CUDA_HOME/bin and the pip package). Fix: `pip install nvidia-cuda-nvcc==13.0.88`, or set \
         FERROCOMM_PTXAS to a ptxas binary"
    )]
    PtxasMissing,

    /// The NVSHMEM flavour was asked for and `FERROCOMM_REQUIRE_NVSHMEM=1`, but no bitcode was found.
    #[error(
        "NVSHMEM's device bitcode (libnvshmem_device.bc) was not found; looked at: {looked}. Fix: `python3 -m \
         pip install {requirement}`, or set FERROCOMM_NVSHMEM_BITCODE to the file (or NVSHMEM_HOME to an \
         installation with lib/libnvshmem_device.bc)"
    )]
    NvshmemMissing {
        /// Every place looked at, comma-separated.
        looked: String,
        /// The pip requirement that provides it.
        requirement: &'static str,
    },

    /// The bitcode is of another NVSHMEM release than the build is pinned to.
    #[error(
        "NVSHMEM's device bitcode {} is version {found}, but the build expects {expected} (its pin, or \
         FERROCOMM_NVSHMEM_VERSION; the host library must be the same release). Fix: `python3 -m pip install nvidia-nvshmem-cu13=={expected}`, or \
         set FERROCOMM_NVSHMEM_VERSION={found} where the host library is {found} too",
        bitcode.display()
    )]
    NvshmemVersionMismatch {
        /// The version the bitcode carries.
        found: crate::nvshmem::NvshmemVersion,
        /// The version the build expects.
        expected: crate::nvshmem::NvshmemVersion,
        /// The bitcode file.
        bitcode: PathBuf,
    },

    /// A version variable that is not `MAJOR.MINOR.PATCH`.
    #[error("{var}=`{given}` is not an NVSHMEM version: write MAJOR.MINOR.PATCH, e.g. 3.4.5")]
    BadNvshmemVersion {
        /// What was given.
        given: String,
        /// The variable.
        var: &'static str,
    },

    /// The toolchain lacks the `llvm-tools` component the NVSHMEM link path runs.
    #[error(
        "the NVSHMEM link path needs {missing} from the llvm-tools component, not found in {}. Fix: `rustup \
         component add llvm-tools --toolchain {toolchain}` (rust-toolchain.toml lists it; `rustup toolchain \
         install` in the repository root installs it)",
        bin.display()
    )]
    LlvmToolsMissing {
        /// Where the tools were looked for.
        bin: PathBuf,
        /// The tools missing, comma-separated.
        missing: String,
        /// The toolchain's name.
        toolchain: String,
    },

    /// The LLVM tools are of another LLVM than the compiler that made the bitcode.
    #[error(
        "the llvm-tools in {} are LLVM {tools}, but the compiler is LLVM {compiler}: they cannot read its \
         bitcode. Fix: `rustup component add llvm-tools --toolchain {toolchain}` for the toolchain that builds \
         the kernels",
        bin.display()
    )]
    LlvmVersionMismatch {
        /// The tools' directory.
        bin: PathBuf,
        /// The tools' LLVM major version.
        tools: u32,
        /// The compiler's LLVM major version.
        compiler: u32,
        /// The toolchain's name.
        toolchain: String,
    },

    /// `llvm-link`, `opt` or `llc` failed on the NVSHMEM flavour.
    #[error("{tool} failed linking the kernels with NVSHMEM's device bitcode ({arch}):\n{stderr}")]
    NvshmemLink {
        /// The tool.
        tool: &'static str,
        /// The architecture.
        arch: crate::Arch,
        /// What it printed.
        stderr: String,
    },

    /// A required build-script variable is missing: the builder was not called from build.rs.
    /// `#[kernel(launch_bounds(..))]` left a marker this builder cannot apply: a different `ferrocomm-macros`
    /// and `ferrocomm-builder`, or a hand-written global with the marker's name.
    #[error(
        "{module}: {reason}. Fix: use the same ferrocomm release for ferrocomm-macros and ferrocomm-builder, and \
         give no global of your own a name starting with `__ferrocomm_launch_bounds__`"
    )]
    LaunchBounds {
        /// The PTX module.
        module: String,
        /// What is wrong with the marker.
        reason: String,
    },

    /// A variable cargo sets for build scripts is missing: the builder was called from elsewhere.
    #[error("environment variable {0} is not set: call the builder from a build script")]
    MissingEnv(&'static str),

    /// Reading or writing a file failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
}

impl BuildError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| BuildError::Io { what, path, source }
    }
}
