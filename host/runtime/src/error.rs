//! Every way a ferrocomm host call can fail. Each message says what to do about it.

use std::fmt;
use std::time::Duration;

use cudarc::driver::DriverError;

use crate::system::Link;
use crate::team::Device;

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
        "the buffer belongs to team #{buffer_team}, not to the launching team #{team}; its peer table is that \
         team's: allocate it with the team that launches the kernel"
    )]
    ForeignBuffer {
        /// The team that allocated the buffer.
        buffer_team: u64,
        /// The launching team.
        team: u64,
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

impl Error {
    /// The device error records, when this is [`Error::Device`].
    pub fn device_errors(&self) -> &[DeviceError] {
        match self {
            Error::Device(errors) => errors.errors(),
            _ => &[],
        }
    }

    /// Whether this is a device timeout (a wait that never saw its signal).
    pub fn is_timeout(&self) -> bool {
        matches!(self.device_errors().first(), Some(DeviceError::Timeout { .. }))
    }

    /// Whether this is a device panic.
    pub fn is_kernel_panic(&self) -> bool {
        matches!(self.device_errors().first(), Some(DeviceError::KernelPanic { .. }))
    }
}

/// Maps a driver error to [`Error::Cuda`] naming the call.
pub(crate) fn cuda(call: &'static str, device: Option<Device>) -> impl FnOnce(DriverError) -> Error {
    move |source| Error::Cuda { call, device, source }
}

/// A source location recorded by device code.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    /// The file, as the compiler spelled it (longer names keep their tail).
    pub file: String,
    /// Line.
    pub line: u32,
    /// Column.
    pub column: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.file.is_empty() {
            write!(f, "<unknown location>")
        } else {
            write!(f, "{}:{}:{}", self.file, self.line, self.column)
        }
    }
}

/// The comparison a timed-out wait was making (the device's `signal::Cmp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// Waited for `signal == expected`.
    Eq,
    /// Waited for `signal >= expected`.
    Ge,
    /// Waited for `signal != expected`.
    Ne,
    /// A code this runtime does not know.
    Other(u32),
}

impl Cmp {
    /// Decodes the record's `cmp` field.
    pub fn from_u32(v: u32) -> Cmp {
        match v {
            0 => Cmp::Eq,
            1 => Cmp::Ge,
            2 => Cmp::Ne,
            other => Cmp::Other(other),
        }
    }
}

impl fmt::Display for Cmp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cmp::Eq => write!(f, "=="),
            Cmp::Ge => write!(f, ">="),
            Cmp::Ne => write!(f, "!="),
            Cmp::Other(v) => write!(f, "<cmp {v}>"),
        }
    }
}

/// The signal a timed-out wait was polling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalRef {
    /// A signal of a [`SignalPadBuffer`](crate::SignalPadBuffer).
    Pad {
        /// The pad's name.
        name: String,
        /// Whose copy of the pad (the rank whose memory holds it).
        owner: usize,
        /// The signal's index in the pad.
        index: usize,
    },
    /// An address that is no known signal pad.
    Address(u64),
}

impl fmt::Display for SignalRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignalRef::Pad { name, owner, index } => write!(f, "signal `{name}`[{index}] (rank {owner}'s copy)"),
            SignalRef::Address(addr) => write!(f, "the signal at {addr:#x}"),
        }
    }
}

/// One error record a kernel wrote into its rank's device error buffer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// A wait did not see its signal before the timeout; the kernel ended cleanly.
    #[error(
        "rank {rank} block {block:?} thread {thread:?}: the wait at {location} timed out: {signal} was {observed}, \
         expected {cmp} {expected}; check that the peer raises it (every rank launched, same epoch), or raise the \
         timeout (TeamBuilder::timeout or FERROCOMM_TIMEOUT_MS)"
    )]
    Timeout {
        /// The waiting rank.
        rank: usize,
        /// Its block index.
        block: [u32; 3],
        /// Its thread index in the block.
        thread: [u32; 3],
        /// The signal.
        signal: SignalRef,
        /// The value waited for.
        expected: u64,
        /// The last value read.
        observed: u64,
        /// The comparison.
        cmp: Cmp,
        /// Where the wait is in the kernel's source.
        location: Location,
    },
    /// Device code panicked (bounds check, `unwrap`, `panic!`).
    #[error(
        "rank {rank} block {block:?} thread {thread:?}: the kernel panicked at {location}; fix the failing check \
         there (the emulator runs the same body on the host with a backtrace)"
    )]
    KernelPanic {
        /// The rank.
        rank: usize,
        /// Block index.
        block: [u32; 3],
        /// Thread index in the block.
        thread: [u32; 3],
        /// Where it panicked.
        location: Location,
    },
    /// A record of a kind this runtime does not know.
    #[error(
        "rank {rank}: device error record of unknown kind {kind}; the kernels were built against another \
         ferrocomm-device than this runtime"
    )]
    Unknown {
        /// The rank.
        rank: usize,
        /// The record's kind field.
        kind: u32,
    },
}

impl DeviceError {
    /// The rank whose kernel recorded it.
    pub fn rank(&self) -> usize {
        match self {
            DeviceError::Timeout { rank, .. }
            | DeviceError::KernelPanic { rank, .. }
            | DeviceError::Unknown { rank, .. } => *rank,
        }
    }
}

/// All device error records of one synchronisation, ordered by rank. Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceErrors {
    errors: Vec<DeviceError>,
    lost: u64,
}

impl DeviceErrors {
    /// Wraps the records of a synchronisation; `None` when there are none.
    pub(crate) fn new(errors: Vec<DeviceError>, lost: u64) -> Option<DeviceErrors> {
        (!errors.is_empty()).then_some(DeviceErrors { errors, lost })
    }

    /// The records read back (each rank keeps its first few).
    pub fn errors(&self) -> &[DeviceError] {
        &self.errors
    }

    /// The first record: the one the message shows.
    pub fn first(&self) -> &DeviceError {
        &self.errors[0]
    }

    /// Errors raised beyond what the device buffers could hold.
    pub fn lost(&self) -> u64 {
        self.lost
    }
}

impl fmt::Display for DeviceErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.first())?;
        let more = self.errors.len() as u64 - 1 + self.lost;
        if more > 0 {
            let mut ranks: Vec<usize> = self.errors.iter().map(DeviceError::rank).collect();
            ranks.dedup();
            write!(f, " (and {more} more device error(s); ranks with errors: {ranks:?})")?;
        }
        Ok(())
    }
}
