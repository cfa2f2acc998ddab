//! [`DeviceError`]: the records kernels leave in their rank's device error buffer, decoded, with what they
//! name: source locations, signals, buffers and GPU threads.

use std::fmt;

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

/// A byte of device memory, named after the buffer that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BufferRef {
    /// An element of a symmetric buffer or a signal pad.
    Element {
        /// The buffer: `SymBuffer<u32> #3` (`#` the allocation's number), its name when it was given one
        /// ([`SymBuffer::named`](crate::SymBuffer::named)), or `signal pad `ready``.
        buffer: String,
        /// Whose copy (the rank whose memory holds it).
        owner: usize,
        /// The element's index.
        index: usize,
    },
    /// An address in no buffer this team allocated.
    Address(u64),
}

impl fmt::Display for BufferRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BufferRef::Element { buffer, owner, index } => {
                write!(f, "element {index} of {buffer} (rank {owner}'s copy)")
            }
            BufferRef::Address(addr) => write!(f, "address {addr:#x}"),
        }
    }
}

/// One GPU thread of a launch: the other party of a checker finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuThread {
    /// Its rank.
    pub rank: usize,
    /// Its block index.
    pub block: [u32; 3],
    /// Its thread index in the block.
    pub thread: [u32; 3],
}

impl fmt::Display for GpuThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} block {:?} thread {:?}", self.rank, self.block, self.thread)
    }
}

/// One error record a kernel wrote into its rank's device error buffer. `Timeout` and `KernelPanic` come
/// from GPUs and the emulator alike; `Race`, `SourceOverwritten`, `UnraisedSignal` and `BarrierMismatch` are
/// the emulator's checker's findings, which a GPU cannot see (a GPU reports the same unraised signal as a
/// `Timeout`, and the others not at all).
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
    /// Emulator checker: a thread read bytes that a put (or a weak write) of another thread wrote, or writes
    /// later, with nothing ordering the two — the reader did not wait on a signal raised after the put
    /// (with acquire ordering), or read before waiting.
    #[error(
        "rank {rank} block {block:?} thread {thread:?}: the read at {location} of {buffer} ({bytes} byte(s)) races \
         with the put into it by {writer}: nothing orders the read after the put; wait (acquire) on the signal \
         the writer raises after the put before reading its destination (and sync_threads() to share the wait \
         with the block), and read nothing of it before"
    )]
    Race {
        /// The reading rank.
        rank: usize,
        /// The reader's block index.
        block: [u32; 3],
        /// The reader's thread index in the block.
        thread: [u32; 3],
        /// The first byte both touched.
        buffer: BufferRef,
        /// Bytes both touched from there (in one run of the checker's shadow memory).
        bytes: u32,
        /// The thread whose put (or weak write) it is.
        writer: GpuThread,
        /// Where the read is in the kernel's source.
        location: Location,
    },
    /// Emulator checker: the source of a non-blocking put changed before the put completed.
    #[error(
        "rank {rank} block {block:?} thread {thread:?}: the source of the non-blocking put at {location} changed \
         {} ({source_byte} changed; the put writes {destination}); keep the send buffer unchanged until the \
         put's token.quiet() (or quiet()), and quiet every non-blocking put",
        when_changed(.quieted)
    )]
    SourceOverwritten {
        /// The rank that issued the put.
        rank: usize,
        /// Its block index.
        block: [u32; 3],
        /// Its thread index (the thread that speaks for a warp or block put).
        thread: [u32; 3],
        /// The first source byte that changed.
        source_byte: BufferRef,
        /// The put's destination (its first byte).
        destination: BufferRef,
        /// Whether the change was found at the put's `quiet()` (else at the end of the thread, which never
        /// quieted it).
        quieted: bool,
        /// Where the put is in the kernel's source.
        location: Location,
    },
    /// Emulator checker: a wait timed out on a signal that no rank wrote during the launch (on a GPU the
    /// same wait is a [`DeviceError::Timeout`]).
    #[error(
        "rank {rank} block {block:?} thread {thread:?}: the wait at {location} timed out on {signal}, which no rank \
         raised during the launch (it held {observed}; the wait was for {cmp} {expected}); raise that signal where \
         the data is sent (Signal::set_release / add_release, put_signal), or wait on the one the sender raises"
    )]
    UnraisedSignal {
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
        /// The value it held throughout.
        observed: u64,
        /// The comparison.
        cmp: Cmp,
        /// Where the wait is in the kernel's source.
        location: Location,
    },
    /// Emulator checker: this rank (or this block of it) advanced a signal pad's launch epoch — what every
    /// signal-pad barrier waits on — a different number of times than the other ranks (or blocks) did, so
    /// the next barrier on the pad will compare counts of different launches.
    #[error(
        "rank {rank}{}: signal pad {pad}'s epoch advanced {observed} time(s) in this launch where {} {expected}; \
         every thread of every block of every rank must call advance_epoch() once per launch, after its last \
         use of epoch(){}",
        in_block(.block),
        the_others(.block),
        last_call(.location)
    )]
    BarrierMismatch {
        /// The rank.
        rank: usize,
        /// The block whose calls differ from its rank's other blocks'; `None` when ranks differ.
        block: Option<[u32; 3]>,
        /// The pad (its name, or its address).
        pad: String,
        /// How many advances (or calls) the others made.
        expected: u64,
        /// How many this rank (or block) made.
        observed: u64,
        /// The last `advance_epoch()` call of this rank, if it made one.
        location: Option<Location>,
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

fn when_changed(quieted: &bool) -> &'static str {
    if *quieted { "before the put's quiet()" } else { "and the put was never quieted" }
}

fn in_block(block: &Option<[u32; 3]>) -> String {
    block.map(|b| format!(" block {b:?}")).unwrap_or_default()
}

fn the_others(block: &Option<[u32; 3]>) -> &'static str {
    if block.is_some() { "the rank's other blocks called advance_epoch()" } else { "the other ranks advanced it" }
}

fn last_call(location: &Option<Location>) -> String {
    location.as_ref().map(|l| format!(" (last call at {l})")).unwrap_or_default()
}

impl DeviceError {
    /// The rank whose kernel recorded it.
    pub fn rank(&self) -> usize {
        match self {
            DeviceError::Timeout { rank, .. }
            | DeviceError::KernelPanic { rank, .. }
            | DeviceError::Race { rank, .. }
            | DeviceError::SourceOverwritten { rank, .. }
            | DeviceError::UnraisedSignal { rank, .. }
            | DeviceError::BarrierMismatch { rank, .. }
            | DeviceError::Unknown { rank, .. } => *rank,
        }
    }

    /// Whether the emulator's checker found it (a GPU does not report it).
    pub fn is_checker_finding(&self) -> bool {
        matches!(
            self,
            DeviceError::Race { .. }
                | DeviceError::SourceOverwritten { .. }
                | DeviceError::UnraisedSignal { .. }
                | DeviceError::BarrierMismatch { .. }
        )
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
