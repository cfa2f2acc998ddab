//! Every way a ferrocomm host call can fail. Each message says what to do about it.
//!
//! [`Error`] is what host calls return; [`DeviceError`] (module `device`) is one record a kernel left in its
//! rank's device error buffer: a timeout or a panic on any backend, and on the emulator the checker's
//! findings (races, overwritten sources, signals nobody raised, mismatched barrier epochs).

mod device;
mod waitfor;

pub use device::{BufferRef, Cmp, DeviceError, DeviceErrors, ErrorCount, GpuThread, Location, SignalRef};
pub use waitfor::{LastRaised, PendingWait, WaitForReport};

use std::time::Duration;

use cudarc::driver::DriverError;

use crate::names::{Device, Link};
use crate::size::{AllocationError, format_size};

/// The error of every fallible ferrocomm call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library could not be loaded.
    #[error(
        "no CUDA driver: libcuda could not be loaded; install the NVIDIA driver, or run on the CPU emulator \
         (FERROCOMM_BACKEND=emulator or Team::emulated)"
    )]
    NoDriver,
    /// The driver loaded but sees no GPU.
    #[error(
        "the CUDA driver sees no GPU; check `nvidia-smi` and CUDA_VISIBLE_DEVICES, or run on the CPU emulator \
         (FERROCOMM_BACKEND=emulator or Team::emulated)"
    )]
    NoGpu,
    /// The driver is older than the CUDA version ferrocomm calls into.
    #[error("the CUDA driver supports CUDA {found}, ferrocomm needs {needed} or newer; update the NVIDIA driver")]
    DriverTooOld {
        /// The driver's CUDA version, `major.minor`.
        found: String,
        /// The oldest version that works.
        needed: String,
    },
    /// A GPU ordinal that does not exist was requested.
    #[error("GPU {ordinal} was requested but the driver sees {count} GPU(s); choose ordinals below {count}")]
    NoSuchGpu {
        /// The requested ordinal.
        ordinal: usize,
        /// How many GPUs the driver sees.
        count: usize,
    },
    /// Two GPUs of the team cannot map each other's memory.
    #[error(
        "GPU {a} cannot access the memory of GPU {b} (link: {link}); build the team from GPUs that are peers \
         (`ferrocomm doctor` prints the P2P matrix), or put several ranks on one GPU with TeamBuilder::ranks_per_gpu"
    )]
    PeerAccess {
        /// The GPU that would access.
        a: usize,
        /// The GPU whose memory it would access.
        b: usize,
        /// How the two are connected.
        link: Link,
    },
    /// A team description that cannot be built.
    #[error("invalid team: {reason}")]
    TeamConfig {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// An environment variable holds a value ferrocomm cannot use.
    #[error("{var}={value:?} is not valid; expected {expected}")]
    BadEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it may hold.
        expected: &'static str,
    },
    /// A rank index outside the team.
    #[error("rank {rank} does not exist in a team of {world} ranks; use a rank below {world}")]
    RankOutOfRange {
        /// The rank given.
        rank: usize,
        /// The team's size.
        world: usize,
    },
    /// The processes of a job could not find each other, or lost each other: a rank that never joined,
    /// died, or disagrees with the others on the job's layout (the message names the ranks).
    #[error(transparent)]
    Bootstrap(#[from] ferrocomm_bootstrap::BootstrapError),
    /// The ranks of a team that spans processes did not all do the same thing: allocated a different
    /// size, in a different order, or loaded a different kernel module. Every rank gets this error.
    #[error("the ranks disagree on {what}: {}; every rank must make the same calls in the same order", describe_statements(.statements))]
    Disagreement {
        /// The operation they disagree on.
        what: &'static str,
        /// What each rank did, in rank order.
        statements: Vec<String>,
    },
    /// Memory shared with the team's other processes could not be made, mapped or unmapped.
    #[error("{call} failed for {bytes} bytes of memory shared with the team's other processes: {source}")]
    SharedMemory {
        /// The system call.
        call: &'static str,
        /// The size asked for.
        bytes: usize,
        /// What the system said.
        source: std::io::Error,
    },
    /// Kernels of this process reported errors (waits that timed out) while ranks of the team had exited:
    /// their processes are gone, so nothing will ever raise what the waits were waiting for. The team of
    /// this process can still be dropped cleanly; the job cannot go on.
    #[error("rank(s) {exited:?} of the team have exited (their processes are gone); here: {errors}")]
    PeersExited {
        /// The ranks whose processes have exited.
        exited: Vec<usize>,
        /// What this process's kernels reported.
        errors: DeviceErrors,
    },
    /// A process of a job has no GPU of its own: its local rank is past the GPUs it can see.
    #[error(
        "rank {rank} (local rank {local_rank}) has no GPU: {gpus} GPU(s) are visible to it with {per_gpu} \
         process(es) per GPU; start fewer processes per host, or share GPUs with FERROCOMM_RANKS_PER_GPU"
    )]
    NoGpuForRank {
        /// The job rank.
        rank: usize,
        /// Its rank among the processes of its host.
        local_rank: usize,
        /// The GPUs it can see.
        gpus: usize,
        /// Processes per GPU.
        per_gpu: usize,
    },
    /// A rank of a team that spans processes, used from a process that does not run it.
    #[error(
        "rank {rank} runs in another process (this one runs rank(s) {local:?}); read, write and launch only \
         this process's ranks"
    )]
    NotLocal {
        /// The rank given.
        rank: usize,
        /// The ranks this process runs.
        local: Vec<usize>,
    },
    /// A buffer used on a rank whose device does not hold it.
    #[error(
        "the buffer for rank {rank} lives on {buffer} but rank {rank} runs on {team}; allocate buffers with the \
         team that launches the kernel"
    )]
    WrongDevice {
        /// The rank being launched.
        rank: usize,
        /// Where the buffer's part for that rank lives.
        buffer: Device,
        /// Where the rank runs.
        team: Device,
    },
    /// A symmetric buffer whose ranks do not match the team's.
    #[error(
        "the buffer is symmetric over {buffer_world} ranks but the team has {team_world}; allocate it with the \
         team that launches the kernel"
    )]
    NotSymmetric {
        /// Ranks the buffer spans.
        buffer_world: usize,
        /// Ranks in the launching team.
        team_world: usize,
    },
    /// A buffer allocated by another team.
    #[error(
        "the buffer{} belongs to team #{buffer_team}, not to the launching team #{team}; its peer table is that \
         team's: allocate it with the team that launches the kernel",
        for_argument(.argument)
    )]
    ForeignBuffer {
        /// The team that allocated the buffer.
        buffer_team: u64,
        /// The launching team.
        team: u64,
        /// The kernel parameter it was passed as, when the launcher says (`#[kernel]` launchers do).
        argument: Option<&'static str>,
    },
    /// A caller's stream that cannot carry a rank's launches ([`Team::bind_streams`](crate::Team::bind_streams)).
    #[error("the stream {stream:#x} bound for rank {rank} cannot carry its launches: {reason}")]
    ForeignStream {
        /// The rank it was bound for.
        rank: usize,
        /// The stream's driver handle.
        stream: usize,
        /// Why not.
        reason: String,
    },
    /// Memory the caller allocated that a rank cannot use ([`Team::caller_memory`](crate::Team::caller_memory)).
    #[error("memory given for rank {rank} cannot be used there: {reason}")]
    CallerMemory {
        /// The rank it was given for.
        rank: usize,
        /// Why not (where it is instead).
        reason: String,
    },
    /// Ordinary memory where a kernel argument needs symmetric memory (the same allocation on every rank,
    /// with a peer table): peers reach it by address.
    #[error(
        "argument `{argument}` must be symmetric memory (its peers store into it or read from it), but {found}; \
         allocate it with the team (SymBuffer::new, or ferrocomm.empty in Python)"
    )]
    SymmetricRequired {
        /// The argument.
        argument: String,
        /// What was passed instead.
        found: String,
    },
    /// A length relation between arguments does not hold.
    #[error("length check `{relation}` failed ({left} vs {right}); pass buffers whose lengths satisfy it")]
    LengthMismatch {
        /// The relation, as written (`len(dst) == len(src)`).
        relation: &'static str,
        /// The left side's value.
        left: usize,
        /// The right side's value.
        right: usize,
    },
    /// A relation a kernel requires of its arguments (`#[kernel(requires(...))]`) does not hold; the launcher
    /// checked it before anything was launched.
    #[error(
        "kernel `{kernel}`: argument `{argument}` does not satisfy `{relation}` ({values}); pass arguments that \
         satisfy it"
    )]
    Requirement {
        /// The kernel's name.
        kernel: &'static str,
        /// The first argument the relation names (the one it constrains, as written first).
        argument: &'static str,
        /// The relation, as written (`len(out) >= world() * len(src)`).
        relation: &'static str,
        /// The value of each term and of both sides (`len(out) = 3, world() = 2, len(src) = 4; 3 >= 8`).
        values: String,
    },
    /// An allocation whose byte size does not fit in `usize`.
    #[error("{len} elements of {elem_bytes} bytes overflow the address space; allocate fewer elements")]
    SizeOverflow {
        /// Elements requested.
        len: usize,
        /// Bytes per element.
        elem_bytes: usize,
    },
    /// A launch configuration the hardware cannot run.
    #[error("bad launch configuration for `{kernel}`: {reason}")]
    BadLaunchConfig {
        /// The kernel.
        kernel: &'static str,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A kernel that waits on other blocks or ranks launched with more blocks than fit on the GPU at once.
    #[error(
        "kernel `{kernel}` waits on other blocks or ranks, so all of its blocks must be resident at once, but \
         {blocks} blocks ({ranks} rank(s)) on {device} exceed the {max} that fit; launch at most {per_rank} blocks \
         per rank, or use fewer threads or less shared memory per block"
    )]
    NotCoResident {
        /// The kernel.
        kernel: &'static str,
        /// The GPU.
        device: Device,
        /// Blocks of all ranks on that GPU together.
        blocks: u64,
        /// Ranks sharing that GPU.
        ranks: usize,
        /// Blocks that fit at once (occupancy × multiprocessors).
        max: u64,
        /// `max / ranks`.
        per_rank: u64,
    },
    /// The kernels crate embeds no PTX the device can run.
    #[error(
        "module `{module}` has no PTX for sm_{device_cc} or older (it has {available:?}); add the arch with \
         FERROCOMM_PTX_ARCHES (e.g. sm_{device_cc}) and rebuild"
    )]
    NoPtxForArch {
        /// The kernels crate.
        module: &'static str,
        /// The device's compute capability (`90`).
        device_cc: u32,
        /// The compute capabilities the module has PTX for.
        available: Vec<u32>,
    },
    /// A team with tracing on launched a kernel whose crate has no traced flavour the device can run.
    #[error(
        "module `{module}` has no traced PTX for sm_{device_cc} (traced flavour built for {available:?}); rebuild \
         the kernels crate with FERROCOMM_TRACE_ARCHES=sm_{device_cc} (the builder makes the traced flavour for \
         the newest architecture it builds unless told), or turn tracing off"
    )]
    NoTracedPtx {
        /// The kernels crate.
        module: &'static str,
        /// The device's compute capability (`90`).
        device_cc: u32,
        /// The compute capabilities the traced flavour was built for.
        available: Vec<u32>,
    },
    /// A trace could not be written or read.
    #[error("trace file {path}: {reason}")]
    Trace {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong (the I/O or parse error).
        reason: String,
    },
    /// The driver rejected a module's PTX.
    #[error(
        "the driver could not load module `{module}` (PTX for sm_{cc}) on {device}: {source}; update the driver \
         or rebuild the kernels crate for the driver's CUDA version (ptxas validates it at build time)"
    )]
    PtxLoad {
        /// The kernels crate.
        module: &'static str,
        /// The PTX's compute capability.
        cc: u32,
        /// The device.
        device: Device,
        /// The driver's error.
        source: DriverError,
    },
    /// A kernel name that the module does not define.
    #[error(
        "module `{module}` has no kernel `{kernel}`; define it with #[kernel] (or `#[unsafe(no_mangle)] pub unsafe \
         extern \"ptx-kernel\" fn {kernel}`) in that crate"
    )]
    KernelNotFound {
        /// The kernels crate.
        module: &'static str,
        /// The kernel.
        kernel: &'static str,
    },
    /// One or more device error records: timeouts, panics.
    #[error("{0}")]
    Device(DeviceErrors),
    /// A rank's stream did not finish within the device timeout (per queued launch) plus one second.
    #[error(
        "rank {rank}'s kernels did not finish within {waited:?} (the device timeout per queued launch + 1 s): a \
         kernel is stuck outside a timed wait; the team is now unusable (its memory is kept alive): create a new team"
    )]
    HostTimeout {
        /// The rank whose stream was still busy.
        rank: usize,
        /// How long the host waited.
        waited: Duration,
    },
    /// The team saw a [`Error::HostTimeout`] earlier.
    #[error("the team is unusable after a kernel that never finished (Error::HostTimeout); create a new team")]
    Poisoned,
    /// A host operation during graph capture.
    #[error("`{what}` is not allowed while a graph is being captured; do it before Team::capture or after it returns")]
    Capturing {
        /// The refused operation.
        what: &'static str,
    },
    /// The PTX JIT smoke kernel ran but computed a wrong value.
    #[error(
        "the PTX JIT smoke kernel on {device} wrote {got} at index {index} instead of {expected}; the GPU or its \
         driver is faulty: check `nvidia-smi` and the kernel log"
    )]
    JitSmokeTest {
        /// The GPU.
        device: Device,
        /// The first wrong element.
        index: usize,
        /// What it holds.
        got: u32,
        /// What it should hold.
        expected: u32,
    },
    /// A team with NVSHMEM was asked for, but NVSHMEM's host library is not installed where it is looked for.
    #[error(
        "NVSHMEM's host library (libnvshmem_host.so.3) could not be loaded; tried: {tried}. Fix: `python3 -m pip \
         install {}`, or point FERROCOMM_NVSHMEM_LIB (or NVSHMEM_HOME) at an installation, or add its lib directory \
         to LD_LIBRARY_PATH",
        ferrocomm_builder::nvshmem::PIP_REQUIREMENT
    )]
    NvshmemMissing {
        /// Every place tried, and why each failed.
        tried: String,
    },
    /// A kernels crate's NVSHMEM flavour was linked with another NVSHMEM release than the host library's.
    #[error(
        "module `{module}` was linked with NVSHMEM {bitcode}'s device bitcode, but the host library {} is NVSHMEM \
         {host}; they must be one release: install nvidia-nvshmem-cu13=={host} where the kernels are built (and \
         rebuild), or load the host library of {bitcode} (FERROCOMM_NVSHMEM_LIB)",
        library.display()
    )]
    NvshmemVersionMismatch {
        /// The kernels crate.
        module: &'static str,
        /// The bitcode's version.
        bitcode: String,
        /// The host library's version.
        host: String,
        /// The host library.
        library: std::path::PathBuf,
    },
    /// NVSHMEM's symmetric heap has no room for an allocation.
    #[error(
        "NVSHMEM's symmetric heap ({}{}) has no room for {label} ({} requested, {} of this team's allocations live); \
         set NVSHMEM_SYMMETRIC_SIZE={suggested} (or larger) before the team is made, and NVSHMEM_MAX_MEMORY_PER_GPU \
         (the most the heap grows to) no lower, or allocate less if the GPU has not that much free",
        format_size(*heap),
        if *heap_from_env { ", from NVSHMEM_SYMMETRIC_SIZE" } else { ", NVSHMEM's default" },
        format_size(*bytes),
        format_size(*live)
    )]
    NvshmemHeapTooSmall {
        /// What was being allocated.
        label: String,
        /// Bytes requested.
        bytes: u64,
        /// Bytes of the heap already handed out.
        live: u64,
        /// The heap per PE.
        heap: u64,
        /// Whether `heap` came from NVSHMEM_SYMMETRIC_SIZE.
        heap_from_env: bool,
        /// A size that fits.
        suggested: String,
    },
    /// A kernels crate built without the NVSHMEM flavour was launched on a team in which some peer is reachable
    /// only through NVSHMEM: its loads and stores cannot reach that peer.
    #[error(
        "module `{module}` has no NVSHMEM flavour, and rank {rank} of this NVSHMEM team cannot reach rank {peer} with \
         loads and stores (another node, or no P2P path); build the kernels crate with \
         PtxBuilder::nvshmem() (and the nvidia-nvshmem-cu13 wheel), or launch it on ranks of one node"
    )]
    NvshmemUnreachable {
        /// The kernels crate.
        module: &'static str,
        /// The launching rank.
        rank: usize,
        /// The first peer it cannot reach.
        peer: usize,
    },
    /// An NVSHMEM host call failed.
    #[error("{call} failed with status {status}{}", if hint.is_empty() { String::new() } else { format!("; {hint}") })]
    NvshmemCall {
        /// The call.
        call: &'static str,
        /// Its return value.
        status: i32,
        /// What usually helps.
        hint: &'static str,
    },
    /// An operation the chosen backend does not have.
    #[error("{what} is not available on the {backend} backend")]
    Unsupported {
        /// The operation.
        what: &'static str,
        /// The backend.
        backend: &'static str,
    },
    /// The emulator could not run a rank's grid.
    #[error("the emulator failed on rank {rank}: {reason}")]
    Emulator {
        /// The rank.
        rank: usize,
        /// What went wrong and how to fix it.
        reason: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA call {call} failed{}: {source}", on_device(.device))]
    Cuda {
        /// The driver function.
        call: &'static str,
        /// The device it was made for, where one.
        device: Option<Device>,
        /// The driver's error.
        source: DriverError,
    },
}

fn on_device(device: &Option<Device>) -> String {
    device.map(|d| format!(" on {d}")).unwrap_or_default()
}

fn for_argument(argument: &Option<&'static str>) -> String {
    argument.map(|a| format!(" passed as argument `{a}`")).unwrap_or_default()
}

impl Error {
    /// This error, naming kernel parameter `argument` as the buffer it is about, where it is about one
    /// (a [`Error::ForeignBuffer`] without a name gets this one). `#[kernel]` launchers call it on what
    /// lowering each argument returns.
    pub fn in_argument(self, argument: &'static str) -> Error {
        match self {
            Error::ForeignBuffer { buffer_team, team, argument: None } => {
                Error::ForeignBuffer { buffer_team, team, argument: Some(argument) }
            }
            other => other,
        }
    }

    /// The device error records, when this is [`Error::Device`].
    pub fn device_errors(&self) -> &[DeviceError] {
        match self {
            Error::Device(errors) => errors.errors(),
            _ => &[],
        }
    }

    /// Whether this is a device timeout (a wait that never saw its signal; on the emulator also one whose
    /// signal no rank raised, [`DeviceError::UnraisedSignal`]).
    pub fn is_timeout(&self) -> bool {
        matches!(self.device_errors().first(), Some(DeviceError::Timeout { .. } | DeviceError::UnraisedSignal { .. }))
    }

    /// Whether this is a device panic (the first record is a [`DeviceError::KernelPanic`]; records are
    /// ordered causes first, so a panic comes before the waits it aborted).
    pub fn is_kernel_panic(&self) -> bool {
        matches!(self.device_errors().first(), Some(DeviceError::KernelPanic { .. }))
    }

    /// Whether a wait of this process ended because a rank of the team panicked: the cause, or only its
    /// consequence here (in a team that spans processes, the panicking rank's process reports the panic).
    pub fn is_aborted(&self) -> bool {
        let errors = match self {
            Error::PeersExited { errors, .. } => errors.errors(),
            other => other.device_errors(),
        };
        errors.iter().any(|e| matches!(e, DeviceError::KernelPanic { .. } | DeviceError::Aborted { .. }))
    }
}

/// Maps a driver error to [`Error::Cuda`] naming the call.
pub(crate) fn cuda(call: &'static str, device: Option<Device>) -> impl FnOnce(DriverError) -> Error {
    move |source| Error::Cuda { call, device, source }
}

/// "rank 0: X, rank 1: Y", grouping the ranks that said the same.
fn describe_statements(all: &[String]) -> String {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (rank, s) in all.iter().enumerate() {
        match groups.iter_mut().find(|(t, _)| *t == s.as_str()) {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((s, vec![rank])),
        }
    }
    groups
        .iter()
        .map(|(s, ranks)| {
            let who = ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
            format!("rank{} {who}: {s}", if ranks.len() > 1 { "s" } else { "" })
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl From<AllocationError> for Error {
    fn from(e: AllocationError) -> Error {
        match e {
            AllocationError::Overflow { len, elem_bytes } => Error::SizeOverflow { len, elem_bytes },
            AllocationError::Alignment { .. } => Error::TeamConfig { reason: e.to_string() },
        }
    }
}
