//! The memory layouts the host runtime and the kernels agree on. Every type here is `#[repr(C)]` and is
//! read or written by both sides: change one only together with `ferrocomm` (host/runtime).

/// The per-launch context a module holds in its global [`LAUNCH_CTX_SYMBOL`], written by the host before
/// each launch (each rank loads its own module instance, so ranks sharing a GPU do not share it).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LaunchCtx {
    /// This rank's index in its team.
    pub rank: u32,
    /// Number of ranks in the team.
    pub world: u32,
    /// How long any wait may spin before it records a timeout and ends the kernel, in nanoseconds.
    pub timeout_ns: u64,
    /// The device error buffer of this rank (device memory, zeroed by the host).
    pub errors: *mut ErrorBuffer,
}

impl LaunchCtx {
    /// A context for a team of one with no error buffer (used before the host sets one).
    pub const EMPTY: LaunchCtx = LaunchCtx {
        rank: 0,
        world: 1,
        timeout_ns: 0,
        errors: core::ptr::null_mut(),
    };
}

/// The name of the module-global holding the [`LaunchCtx`] in every PTX module.
pub const LAUNCH_CTX_SYMBOL: &str = "FERROCOMM_LAUNCH_CTX";

/// What went wrong on the device.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A wait on a signal did not see the expected value before the timeout.
    Timeout = 1,
    /// Device code panicked (bounds check, `unwrap`, explicit `panic!`).
    Panic = 2,
}

impl ErrorKind {
    /// Decodes the `kind` field of an [`ErrorRecord`].
    pub fn from_u32(v: u32) -> Option<ErrorKind> {
        match v {
            1 => Some(ErrorKind::Timeout),
            2 => Some(ErrorKind::Panic),
            _ => None,
        }
    }
}

/// Bytes of a source file name kept in a record (longer names keep their tail).
pub const ERROR_FILE_BYTES: usize = 96;

/// One device error, as the host reads it back.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ErrorRecord {
    /// An [`ErrorKind`] as `u32`.
    pub kind: u32,
    /// The rank whose kernel recorded it.
    pub rank: u32,
    /// Block index (x, y, z).
    pub block: [u32; 3],
    /// Thread index in the block (x, y, z).
    pub thread: [u32; 3],
    /// For a timeout: the signal's address on its rank (the host maps it back to a buffer and index).
    pub signal: u64,
    /// For a timeout: the value waited for.
    pub expected: u64,
    /// For a timeout: the last value read.
    pub observed: u64,
    /// For a timeout: the comparison (see `signal::Cmp`), as `u32`.
    pub cmp: u32,
    /// Source line of the wait or panic.
    pub line: u32,
    /// Source column.
    pub column: u32,
    /// Length of the file name in `file`.
    pub file_len: u32,
    /// The source file name, UTF-8, not NUL-terminated.
    pub file: [u8; ERROR_FILE_BYTES],
}

/// Records kept per rank per launch; later errors only count.
pub const ERROR_CAPACITY: usize = 8;

/// A rank's device error buffer: a count and the first [`ERROR_CAPACITY`] records.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ErrorBuffer {
    /// How many errors were raised (may exceed [`ERROR_CAPACITY`]); claimed with an atomic add.
    pub count: u32,
    /// Set once a record is fully written (so the host never reads a half-written record).
    pub written: [u32; ERROR_CAPACITY],
    /// The records.
    pub records: [ErrorRecord; ERROR_CAPACITY],
}

/// A device slice as kernels receive it: pointer and length, the plain ABI of `&[T]` / `&mut [T]`.
#[repr(C)]
#[derive(Debug)]
pub struct RawSlice<T> {
    /// First element (device address of this rank).
    pub ptr: *mut T,
    /// Number of elements.
    pub len: usize,
}

impl<T> Clone for RawSlice<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RawSlice<T> {}

/// A symmetric buffer as kernels receive it: the same allocation on every rank of the team.
#[repr(C)]
#[derive(Debug)]
pub struct RawSym<T> {
    /// Device-resident table of `world` base pointers, indexed by rank, as this rank's GPU addresses them
    /// (peer memory mapped over NVLink, or the same process memory in the emulator).
    pub peers: *const *mut T,
    /// This rank's own allocation (the table's entry `rank`, kept here to avoid a load).
    pub local: *mut T,
    /// Number of elements in each rank's allocation.
    pub len: usize,
}

impl<T> Clone for RawSym<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RawSym<T> {}

// SAFETY: these are plain addresses handed to kernels; the host runtime guarantees the memory outlives the
// launch, and the emulator runs kernel threads on host threads that need to carry them.
unsafe impl<T> Send for RawSlice<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for RawSlice<T> {}
// SAFETY: as above.
unsafe impl<T> Send for RawSym<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for RawSym<T> {}
// SAFETY: as above.
unsafe impl Send for LaunchCtx {}
// SAFETY: as above.
unsafe impl Sync for LaunchCtx {}
