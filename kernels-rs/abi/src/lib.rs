//! `ferrocomm-abi`: the memory layouts the host runtime, the kernels and the CPU emulator agree on. Every
//! type here is `#[repr(C)]` and is read or written by more than one of them: change one only together with
//! `ferrocomm` (host/runtime). The device library re-exports this crate as `ferrocomm_device::abi`.
#![no_std]
#![warn(missing_docs)]

/// The per-launch context a module holds in its global [`LAUNCH_CTX_SYMBOL`], written by the host before
/// each launch (each rank loads its own module instance, so ranks sharing a GPU do not share it).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LaunchCtx {
    /// This rank's index in its team.
    pub rank: u32,
    /// Number of ranks in the team.
    pub world: u32,
    /// How long any wait may spin before it records a timeout and ends the kernel, in nanoseconds
    /// (`0` means [`DEFAULT_TIMEOUT_NS`]).
    pub timeout_ns: u64,
    /// The device error buffer of this rank (device memory, zeroed by the host).
    pub errors: *mut ErrorBuffer,
}

impl LaunchCtx {
    /// A context for a team of one with no error buffer (used before the host sets one).
    pub const EMPTY: LaunchCtx = LaunchCtx { rank: 0, world: 1, timeout_ns: 0, errors: core::ptr::null_mut() };
}

/// The wait timeout used when [`LaunchCtx::timeout_ns`] is `0`: 10 s.
pub const DEFAULT_TIMEOUT_NS: u64 = 10_000_000_000;

/// The name of the module-global holding the [`LaunchCtx`] in every PTX module.
pub const LAUNCH_CTX_SYMBOL: &str = "FERROCOMM_LAUNCH_CTX";

/// What went wrong on the device. `Timeout` and `Panic` come from GPUs and the emulator alike; the others
/// only from the emulator's checker (see `emu`), which sees what a GPU cannot.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A wait on a signal did not see the expected value before the timeout.
    Timeout = 1,
    /// Device code panicked (bounds check, `unwrap`, explicit `panic!`).
    Panic = 2,
    /// Checker: a thread read a put's destination without an acquire ordering the read after the put (it
    /// did not wait on the signal that covers the put, or read before waiting).
    Race = 3,
    /// Checker: the source of a non-blocking put changed before the put completed (`quiet()`).
    SourceOverwritten = 4,
    /// Checker: a wait timed out on a signal that no rank wrote during the launch.
    UnraisedSignal = 5,
    /// Checker: ranks (or blocks of a rank) advanced a signal pad's epoch — what every signal-pad barrier
    /// waits on — a different number of times.
    BarrierMismatch = 6,
    /// A wait ended early because a thread of the team panicked and raised the team's abort word (see
    /// [`ErrorBuffer::abort_local`]): the wait's thread ended instead of waiting out the timeout.
    Aborted = 7,
    /// Checker: a put (or weak write) into a buffer that a thread read in an earlier launch, with nothing
    /// ordering the put after that read (the writer did not wait for a signal the reader's rank raised
    /// after its earlier kernels, such as a `ready` handshake).
    UnorderedPut = 8,
}

/// Kinds an [`ErrorBuffer`] counts separately ([`ErrorBuffer::kinds`], indexed by the kind's code).
pub const ERROR_KIND_SLOTS: usize = 8;

impl ErrorKind {
    /// Decodes the `kind` field of an [`ErrorRecord`].
    pub fn from_u32(v: u32) -> Option<ErrorKind> {
        match v {
            1 => Some(ErrorKind::Timeout),
            2 => Some(ErrorKind::Panic),
            3 => Some(ErrorKind::Race),
            4 => Some(ErrorKind::SourceOverwritten),
            5 => Some(ErrorKind::UnraisedSignal),
            6 => Some(ErrorKind::BarrierMismatch),
            7 => Some(ErrorKind::Aborted),
            8 => Some(ErrorKind::UnorderedPut),
            _ => None,
        }
    }
}

/// Bytes of a source file name kept in a record (longer names keep their tail).
pub const ERROR_FILE_BYTES: usize = 96;

/// Bytes of a panic message kept in a record (longer messages keep their head).
pub const ERROR_MESSAGE_BYTES: usize = 120;

/// What a GPU's panic handler records as the message when the panic's message has format arguments (only
/// a message without arguments is a string the handler can copy; the emulator keeps every message).
pub const FORMATTED_MESSAGE: &str = "<formatted message: run the kernel on the emulator to see it>";

/// One device error, as the host reads it back.
///
/// The fields `signal`, `expected`, `observed` and `cmp` are named after the timeout; other kinds use them
/// as follows (the layout is the same for every kind):
///
/// | kind | `signal` | `expected`, `observed` | `cmp` | location |
/// | --- | --- | --- | --- | --- |
/// | `Timeout`, `UnraisedSignal` | the signal's address | value waited for, last value read | [`Cmp`] | the wait |
/// | `Panic` | — | — | — | the panic (and `message`) |
/// | `Aborted` | the signal's address | value waited for, last value read | [`Cmp`] | the wait (and `origin`) |
/// | `Race` | first byte read | the writer, [`ThreadRef::pack`] | bytes in conflict | the read |
/// | `UnorderedPut` | first byte written | the earlier reader, [`ThreadRef::pack`] | bytes in conflict | the put |
/// | `SourceOverwritten` | first changed source byte | destination address, source address | [`SourceCheck`] | the put |
/// | `BarrierMismatch` | the pad's base address on this rank | advances expected, advances made | [`MismatchScope`] | the last `advance_epoch` |
#[repr(C)]
#[derive(Clone, Copy)]
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
    /// Length of the message in `message` (a `Panic`'s; 0 for other kinds).
    pub message_len: u32,
    /// For `Aborted`: the rank whose panic raised the team's abort word, plus one (0: unknown).
    pub origin: u32,
    /// A `Panic`'s message, UTF-8, not NUL-terminated (its head, when longer than the field).
    pub message: [u8; ERROR_MESSAGE_BYTES],
}

impl ErrorRecord {
    /// A record with every field zero (kind 0 is no kind): the start of a record being filled in.
    pub const EMPTY: ErrorRecord = ErrorRecord {
        kind: 0,
        rank: 0,
        block: [0; 3],
        thread: [0; 3],
        signal: 0,
        expected: 0,
        observed: 0,
        cmp: 0,
        line: 0,
        column: 0,
        file_len: 0,
        file: [0; ERROR_FILE_BYTES],
        message_len: 0,
        origin: 0,
        message: [0; ERROR_MESSAGE_BYTES],
    };

    /// The panic message the record carries (empty for other kinds).
    pub fn message(&self) -> &str {
        let bytes = &self.message[..(self.message_len as usize).min(ERROR_MESSAGE_BYTES)];
        // The head was cut on a character boundary by the writer; stay safe if it was not.
        match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => core::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
        }
    }

    /// The source file name the record carries (its tail, when the name was longer than the field).
    pub fn file_name(&self) -> &str {
        let bytes = &self.file[..(self.file_len as usize).min(ERROR_FILE_BYTES)];
        // A tail may start inside a multi-byte character: skip its continuation bytes.
        let start = bytes.iter().position(|b| b & 0xC0 != 0x80).unwrap_or(bytes.len());
        core::str::from_utf8(&bytes[start..]).unwrap_or("")
    }

    /// The decoded [`ErrorKind`], `None` for a code this library does not know.
    pub fn error_kind(&self) -> Option<ErrorKind> {
        ErrorKind::from_u32(self.kind)
    }
}

/// The fixed-size byte fields as the strings they hold, and the kind by name: a failing assertion on
/// records then reads `file: "src/lib.rs"`, not 96 numbers.
impl core::fmt::Debug for ErrorRecord {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("ErrorRecord");
        match self.error_kind() {
            Some(kind) => d.field("kind", &kind),
            None => d.field("kind", &self.kind),
        };
        d.field("rank", &self.rank)
            .field("block", &self.block)
            .field("thread", &self.thread)
            .field("signal", &format_args!("{:#x}", self.signal))
            .field("expected", &self.expected)
            .field("observed", &self.observed)
            .field("cmp", &self.cmp)
            .field("file", &self.file_name())
            .field("line", &self.line)
            .field("column", &self.column)
            .field("message", &self.message())
            .field("origin", &self.origin)
            .finish()
    }
}

/// The head of `message` that fits a record, ending on a character boundary.
pub fn message_head(message: &str) -> &[u8] {
    let bytes = message.as_bytes();
    if bytes.len() <= ERROR_MESSAGE_BYTES {
        return bytes;
    }
    let mut end = ERROR_MESSAGE_BYTES;
    while end > 0 && !message.is_char_boundary(end) {
        end -= 1;
    }
    &bytes[..end]
}

/// The tail of `file` that fits a record, starting on a character boundary.
pub fn file_tail(file: &str) -> &[u8] {
    let bytes = file.as_bytes();
    if bytes.len() <= ERROR_FILE_BYTES {
        return bytes;
    }
    let mut start = bytes.len() - ERROR_FILE_BYTES;
    while start < bytes.len() && !file.is_char_boundary(start) {
        start += 1;
    }
    &bytes[start..]
}

/// A GPU thread of a team launch: the one an emulated launch's panic names, or the other party that a
/// checker record names in its `expected` and `observed` fields (the writer of a `Race`).
#[cfg(not(target_arch = "nvptx64"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadRef {
    /// Its rank.
    pub rank: u32,
    /// Its block index.
    pub block: [u32; 3],
    /// Its thread index in the block.
    pub thread: [u32; 3],
}

#[cfg(not(target_arch = "nvptx64"))]
impl ThreadRef {
    /// Packs the thread into two record fields: block indices of up to 21 bits each, then thread indices
    /// of up to 10 bits (11 for x) and the rank (32). The emulator's grids fit (at most 4096 threads).
    pub fn pack(&self) -> (u64, u64) {
        let b = self.block.map(|v| u64::from(v) & 0x1f_ffff);
        let t = self.thread.map(u64::from);
        let block = b[0] | b[1] << 21 | b[2] << 42;
        let rest = (t[0] & 0x7ff) | (t[1] & 0x7ff) << 11 | (t[2] & 0x3ff) << 22 | u64::from(self.rank) << 32;
        (block, rest)
    }

    /// The thread [`pack`](ThreadRef::pack) packed.
    pub fn unpack(block: u64, rest: u64) -> ThreadRef {
        ThreadRef {
            rank: (rest >> 32) as u32,
            block: [block & 0x1f_ffff, (block >> 21) & 0x1f_ffff, (block >> 42) & 0x1f_ffff].map(|v| v as u32),
            thread: [rest & 0x7ff, (rest >> 11) & 0x7ff, (rest >> 22) & 0x3ff].map(|v| v as u32),
        }
    }
}

#[cfg(not(target_arch = "nvptx64"))]
impl core::fmt::Display for ThreadRef {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "rank {} block {:?} thread {:?}", self.rank, self.block, self.thread)
    }
}

/// When the checker found a non-blocking put's source changed (the `cmp` of a `SourceOverwritten` record).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceCheck {
    /// At the issuing thread's `quiet()` (or another system-scope fence).
    AtQuiet = 0,
    /// At the end of the thread, which never quieted the put.
    AtThreadEnd = 1,
}

impl SourceCheck {
    /// Decodes the `cmp` field of a `SourceOverwritten` record.
    pub fn from_u32(v: u32) -> Option<SourceCheck> {
        match v {
            0 => Some(SourceCheck::AtQuiet),
            1 => Some(SourceCheck::AtThreadEnd),
            _ => None,
        }
    }
}

/// Between whom a signal pad's epoch advances differ (the `cmp` of a `BarrierMismatch` record).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchScope {
    /// This rank advanced the pad a different number of times than the other ranks.
    Ranks = 0,
    /// This block called `advance_epoch` a different number of times than the other blocks of its rank.
    Blocks = 1,
}

impl MismatchScope {
    /// Decodes the `cmp` field of a `BarrierMismatch` record.
    pub fn from_u32(v: u32) -> Option<MismatchScope> {
        match v {
            0 => Some(MismatchScope::Ranks),
            1 => Some(MismatchScope::Blocks),
            _ => None,
        }
    }
}

/// How a timed-out wait compared the signal with the value it waited for (the record's `cmp`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `signal == expected`.
    Eq = 0,
    /// `signal >= expected` (the comparison for monotonic counters).
    Ge = 1,
    /// `signal != expected`.
    Ne = 2,
}

impl Cmp {
    /// Whether `observed` satisfies the comparison against `expected`.
    #[inline(always)]
    pub fn holds(self, observed: u64, expected: u64) -> bool {
        match self {
            Cmp::Eq => observed == expected,
            Cmp::Ge => observed >= expected,
            Cmp::Ne => observed != expected,
        }
    }

    /// Decodes the `cmp` field of an [`ErrorRecord`].
    pub fn from_u32(v: u32) -> Option<Cmp> {
        match v {
            0 => Some(Cmp::Eq),
            1 => Some(Cmp::Ge),
            2 => Some(Cmp::Ne),
            _ => None,
        }
    }
}

/// Records kept per rank per launch; later errors only count.
pub const ERROR_CAPACITY: usize = 8;

/// A rank's device error buffer: a count, counts per kind, the first [`ERROR_CAPACITY`] records, and where
/// the team's abort word is.
///
/// The abort word: a `u32` per rank in a symmetric allocation of the team, 0 while the team runs. A thread
/// that panics records its panic, stores its rank + 1 into every rank's word and ends (PTX `exit`, not
/// `trap`: the CUDA context survives); every wait that has turned to its back-off (slow) path reads its own
/// rank's word between polls and, once it is raised, records an [`ErrorKind::Aborted`] and ends its thread.
/// So a panic ends the launch on every rank promptly, and the host reports the panic, not timeouts. The
/// host clears its ranks' words after it reported the errors of a launch.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ErrorBuffer {
    /// How many errors were raised (may exceed [`ERROR_CAPACITY`]); claimed with an atomic add.
    pub count: u32,
    /// Set once a record is fully written (so the host never reads a half-written record).
    pub written: [u32; ERROR_CAPACITY],
    /// Errors raised by the device library per kind code (`kinds[ErrorKind::Panic as usize]`, ...),
    /// including those past the capacity: what the host's summary counts. The emulator's checker findings
    /// are not counted here (their records are).
    pub kinds: [u32; ERROR_KIND_SLOTS],
    /// Device address of this rank's abort word (0: the team has none). Written by the host, kept across
    /// launches.
    pub abort_local: u64,
    /// Device address of the team's table of `world` abort-word addresses, indexed by rank, as this rank
    /// addresses them (0: none). Written by the host, kept across launches.
    pub abort_peers: u64,
    /// The records.
    pub records: [ErrorRecord; ERROR_CAPACITY],
    /// Address of this rank's [`TraceRing`] for the emulator (0: not tracing). Written by the host, kept
    /// across launches. A traced GPU module finds its ring in the module global [`TRACE_RING_SYMBOL`]
    /// instead (device memory: no read of this pinned host buffer on the hot path); untraced GPU code never
    /// reads it, so appending it changed no PTX.
    pub trace_ring: u64,
}

impl ErrorBuffer {
    /// An empty buffer, as the host must initialise it before a launch (without an abort word).
    pub const ZEROED: ErrorBuffer = ErrorBuffer {
        count: 0,
        written: [0; ERROR_CAPACITY],
        kinds: [0; ERROR_KIND_SLOTS],
        abort_local: 0,
        abort_peers: 0,
        records: [ErrorRecord::EMPTY; ERROR_CAPACITY],
        trace_ring: 0,
    };

    /// The buffer with its records and counts cleared and its abort-word addresses kept: what the host
    /// writes back after reading it.
    pub fn cleared(&self) -> ErrorBuffer {
        ErrorBuffer {
            abort_local: self.abort_local,
            abort_peers: self.abort_peers,
            trace_ring: self.trace_ring,
            ..ErrorBuffer::ZEROED
        }
    }

    /// The records that were completely written, in claim order (read after the kernel finished).
    pub fn written_records(&self) -> impl Iterator<Item = &ErrorRecord> {
        let n = (self.count as usize).min(ERROR_CAPACITY);
        (0..n).filter(|&i| self.written[i] != 0).map(|i| &self.records[i])
    }
}

/// The module constant, present only in a traced module (built with `--cfg ferrocomm_trace`), that holds
/// the device address of the rank's [`TraceRing`] (0: not recording) and the ring's capacity: two `u64`s,
/// written by the host at module load.
pub const TRACE_RING_SYMBOL: &str = "FERROCOMM_TRACE_RING";

/// What a [`TraceEvent`] records; its `a`, `b` and `aux` fields as the table says.
///
/// | kind | `a` | `b` | `aux` |
/// | --- | --- | --- | --- |
/// | `PutBegin`, `PutEnd` | bytes (0 at a non-blocking put's end) | destination address (0 likewise) | — |
/// | `Signal` | the signal's address | the value stored or added | 0 set, 1 add |
/// | `WaitBegin` | the signal's address | the value waited for | [`Cmp`] |
/// | `WaitEnd` | the signal's address | the value that ended the wait | [`Cmp`] |
/// | `Barrier` | — | — | — |
/// | `Epoch` | the pad's base address on this rank | the epoch that ended | — |
/// | `Mark` | name bytes 0..8 (little-endian) | name bytes 8..16 | — |
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// A group began a put (recorded by its leader).
    PutBegin = 1,
    /// The put's group finished it.
    PutEnd = 2,
    /// A signal was raised (set or added, release or relaxed).
    Signal = 3,
    /// A wait on a signal began.
    WaitBegin = 4,
    /// The wait saw its value.
    WaitEnd = 5,
    /// The block passed a barrier (recorded by its thread 0).
    Barrier = 6,
    /// A signal pad's session ended: the pad's epoch advanced (recorded by thread 0).
    Epoch = 7,
    /// A user mark (`trace::mark("phase")`).
    Mark = 8,
}

impl TraceKind {
    /// Decodes the `kind` field of a [`TraceEvent`].
    pub fn from_u8(v: u8) -> Option<TraceKind> {
        Some(match v {
            1 => TraceKind::PutBegin,
            2 => TraceKind::PutEnd,
            3 => TraceKind::Signal,
            4 => TraceKind::WaitBegin,
            5 => TraceKind::WaitEnd,
            6 => TraceKind::Barrier,
            7 => TraceKind::Epoch,
            8 => TraceKind::Mark,
            _ => return None,
        })
    }
}

/// One traced event, as the device writes it into its rank's ring.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// `%globaltimer` when it happened (ns; the emulator's host clock).
    pub time: u64,
    /// A [`TraceKind`] as `u8`.
    pub kind: u8,
    /// See [`TraceKind`].
    pub aux: u8,
    /// `%smid` of the recording thread (the emulator: the linear block index).
    pub smid: u16,
    /// The recording thread's linear block index in the grid.
    pub block: u32,
    /// The recording thread's linear index in its block.
    pub thread: u32,
    /// Zero.
    pub reserved: u32,
    /// See [`TraceKind`].
    pub a: u64,
    /// See [`TraceKind`].
    pub b: u64,
}

impl TraceEvent {
    /// An event of kind 0 (none): what an unwritten slot holds.
    pub const EMPTY: TraceEvent =
        TraceEvent { time: 0, kind: 0, aux: 0, smid: 0, block: 0, thread: 0, reserved: 0, a: 0, b: 0 };
}

/// A rank's trace ring: this header, then `capacity` [`TraceEvent`]s from byte [`TRACE_HEADER_BYTES`].
///
/// Recording threads claim slots by atomic adds on `claimed`: on the GPU a block claims
/// [`TRACE_CHUNK_EVENTS`] at once and hands them out from shared memory, so an event costs a shared-memory
/// add instead of a round trip to L2; the emulator claims one slot per event. An event whose slot is at or
/// past `capacity` is dropped and counted in `lost` — never lost silently. The ring keeps the first events of
/// a launch rather than the last: two threads can never write one slot (no torn events). Slots a block
/// claimed but did not fill keep kind 0 (the host zeroes the slots it read), and the host reads the ring only
/// after the launch, then sets `claimed` and `lost` back to 0.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TraceRing {
    /// Events the ring holds.
    pub capacity: u64,
    /// Slots claimed since the host last emptied it (may exceed `capacity`).
    pub claimed: u64,
    /// Events dropped since the host last emptied it: their slot was past `capacity`.
    pub lost: u64,
}

/// Slots a block claims from its rank's [`TraceRing`] at once on the GPU.
pub const TRACE_CHUNK_EVENTS: u64 = 32;

/// Bytes before the first event of a [`TraceRing`].
pub const TRACE_HEADER_BYTES: usize = 64;

/// Slots of bookkeeping at the end of every signal pad's allocation, after its signals: one launch epoch
/// per block, so a kernel ends its epoch with posted adds — no load, no fence, no block waiting for another
/// (see `SignalPad::epoch`). It is also the most blocks a kernel using a pad may run. The host allocates
/// `signals + SIGNAL_PAD_EPOCH_SLOTS` zeroed `u64`s per rank and passes that total as [`RawSym::len`];
/// signal `i` stays at offset `i`.
pub const SIGNAL_PAD_EPOCH_SLOTS: usize = 1024;

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

// The layouts the host reads back: a change here is a change of the ABI (update the host runtime too).
const _: () = assert!(core::mem::size_of::<ErrorRecord>() == 296 && core::mem::align_of::<ErrorRecord>() == 8);
const _: () = assert!(core::mem::offset_of!(ErrorRecord, message_len) == 168);
const _: () = assert!(core::mem::offset_of!(ErrorBuffer, abort_local) == 72);
const _: () = assert!(core::mem::offset_of!(ErrorBuffer, records) == 88);
const _: () = assert!(core::mem::size_of::<TraceEvent>() == 40 && core::mem::align_of::<TraceEvent>() == 8);
const _: () = assert!(core::mem::size_of::<TraceRing>() <= TRACE_HEADER_BYTES);

#[cfg(test)]
mod tests {
    extern crate std;
    use super::{ERROR_FILE_BYTES, ERROR_MESSAGE_BYTES, ErrorKind, ErrorRecord, file_tail, message_head};
    use std::format;

    #[test]
    fn a_record_prints_its_strings_and_kind_not_their_bytes() {
        let mut r = ErrorRecord { kind: ErrorKind::Panic as u32, line: 7, ..ErrorRecord::EMPTY };
        let (file, message) = (file_tail("src/lib.rs"), message_head("planted"));
        r.file[..file.len()].copy_from_slice(file);
        r.file_len = file.len() as u32;
        r.message[..message.len()].copy_from_slice(message);
        r.message_len = message.len() as u32;
        let shown = format!("{r:?}");
        assert!(
            shown.starts_with("ErrorRecord { kind: Panic, ")
                && shown.contains(r#"file: "src/lib.rs", line: 7"#)
                && shown.contains(r#"message: "planted""#),
            "{shown}"
        );
        assert!(format!("{:?}", ErrorRecord { kind: 99, ..ErrorRecord::EMPTY }).contains("kind: 99"));
    }

    #[test]
    fn long_messages_keep_their_head_on_a_char_boundary() {
        assert_eq!(message_head("planted"), b"planted");
        let long = format!("{}é and more", "a".repeat(ERROR_MESSAGE_BYTES - 1));
        let head = std::str::from_utf8(message_head(&long)).unwrap();
        // "é" straddles the end of the field: the head stops before it.
        assert_eq!(head, "a".repeat(ERROR_MESSAGE_BYTES - 1));
    }

    #[test]
    fn long_file_names_keep_their_tail_on_a_char_boundary() {
        assert_eq!(file_tail("src/lib.rs"), b"src/lib.rs");
        let long = format!("{}é/kernel.rs", "a".repeat(ERROR_FILE_BYTES));
        let tail = std::str::from_utf8(file_tail(&long)).unwrap();
        assert!(tail.ends_with("/kernel.rs") && tail.len() <= ERROR_FILE_BYTES, "{tail}");
        // "é" is two bytes: a cut inside it moves forward to the next character.
        let cut = format!("{}é{}", "a".repeat(10), "b".repeat(ERROR_FILE_BYTES - 1));
        let tail = std::str::from_utf8(file_tail(&cut)).unwrap();
        assert_eq!(tail, "b".repeat(ERROR_FILE_BYTES - 1));
    }
}
