//! [`DeviceError`]: the records kernels leave in their rank's device error buffer, decoded, with what they
//! name: source locations, signals, buffers and GPU threads.

use std::fmt;

use super::waitfor::WaitForReport;
pub use crate::names::{BufferRef, Cmp, GpuThread, Location, SignalRef};

/// One error record a kernel wrote into its rank's device error buffer. `Timeout` and `KernelPanic` come
/// from GPUs and the emulator alike; `Race`, `SourceOverwritten`, `UnraisedSignal` and `BarrierMismatch` are
/// the emulator's checker's findings, which a GPU cannot see (a GPU reports the same unraised signal as a
/// `Timeout`, and the others not at all).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// A wait did not see its signal before the timeout; the kernel ended cleanly.
    #[error(
        "{at}: the wait at {location} timed out: {signal} was {observed}, \
         expected {cmp} {expected}; check that the peer raises it (every rank launched, same epoch), or raise the \
         timeout (TeamBuilder::timeout or FERROCOMM_TIMEOUT_MS)"
    )]
    Timeout {
        /// The waiting thread.
        at: GpuThread,
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
    /// Device code panicked (bounds check, `unwrap`, `assert!`, `panic!`). The panicking thread ended (PTX
    /// `exit`, not `trap`), the team's other waits ended early ([`DeviceError::Aborted`]), and the team
    /// stays usable: the next launch runs normally. Reset the signal pads the launch used
    /// ([`SignalPadBuffer::reset`](crate::SignalPadBuffer::reset)) before using them again.
    #[error(
        "{at}: the kernel panicked at {location}{}; fix the failing check \
         there (the emulator runs the same body on the host with the full message); the team stays usable, reset \
         the launch's signal pads (SignalPadBuffer::reset) before reusing them",
        with_message(.message)
    )]
    KernelPanic {
        /// The thread that panicked.
        at: GpuThread,
        /// Where it panicked.
        location: Location,
        /// The panic's message: on the emulator the whole message (its head, up to the record's
        /// `ERROR_MESSAGE_BYTES`); on a GPU a message without format arguments (`assert!(x, "literal")`),
        /// else the device library's `FORMATTED_MESSAGE` placeholder.
        message: String,
    },
    /// A wait that ended early, without its signal, because a thread of the team panicked: the panic raised
    /// the team's abort word, and every wait that saw it recorded this and ended its thread instead of
    /// waiting out the timeout. The cause is the [`DeviceError::KernelPanic`] of rank `origin` (in a team
    /// that spans processes, reported by that rank's process).
    #[error(
        "{at}: the wait at {location} on {signal} (for {cmp} {expected}, \
         last {observed}) ended early because {}; that panic is the error to fix",
        aborted_by(.origin)
    )]
    Aborted {
        /// The waiting thread.
        at: GpuThread,
        /// The signal (or LL packet) it waited on.
        signal: SignalRef,
        /// The value waited for.
        expected: u64,
        /// The last value read.
        observed: u64,
        /// The comparison.
        cmp: Cmp,
        /// The rank whose panic raised the abort, when the record says.
        origin: Option<usize>,
        /// Where the wait is in the kernel's source.
        location: Location,
    },
    /// Emulator checker: a thread read bytes that a put (or a weak write) of another thread wrote, or writes
    /// later, with nothing ordering the two — the reader did not wait on a signal raised after the put
    /// (with acquire ordering), or read before waiting.
    #[error(
        "{at}: the read at {location} of {buffer} ({bytes} byte(s)) races \
         with the put into it by {writer}: nothing orders the read after the put; wait (acquire) on the signal \
         the writer raises after the put before reading its destination (and sync_threads() to share the wait \
         with the block), and read nothing of it before"
    )]
    Race {
        /// The reading thread.
        at: GpuThread,
        /// The first byte both touched.
        buffer: BufferRef,
        /// Bytes both touched from there (in one run of the checker's shadow memory).
        bytes: u32,
        /// The thread whose put (or weak write) it is.
        writer: GpuThread,
        /// Where the read is in the kernel's source.
        location: Location,
    },
    /// Emulator checker: a put (or a weak write) into bytes that a thread read in an earlier kernel, with
    /// nothing ordering the put after that read: on a GPU the put may land while the earlier kernel still
    /// reads them.
    #[error(
        "{at}: the put at {location} into {buffer} ({bytes} byte(s)) \
         races with the read of it by {reader} in an earlier kernel: nothing orders the put after that read; \
         before writing a peer's buffer, wait (acquire) for a signal the peer raises once its earlier kernels \
         are done with it (a ready handshake), or synchronise with the host"
    )]
    UnorderedPut {
        /// The writing thread.
        at: GpuThread,
        /// The first byte both touched.
        buffer: BufferRef,
        /// Bytes both touched from there (in one run of the checker's shadow memory).
        bytes: u32,
        /// The thread of the earlier kernel that read the bytes.
        reader: GpuThread,
        /// Where the put is in the kernel's source.
        location: Location,
    },
    /// Emulator checker: the source of a non-blocking put changed before the put completed.
    #[error(
        "{at}: the source of the non-blocking put at {location} changed \
         {} ({source_byte} changed; the put writes {destination}); keep the send buffer unchanged until the \
         put's token.quiet() (or quiet()), and quiet every non-blocking put",
        when_changed(.quieted)
    )]
    SourceOverwritten {
        /// The thread that issued the put (the one that speaks for a warp or block put).
        at: GpuThread,
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
        "{at}: the wait at {location} timed out on {signal}, which no rank \
         raised during the launch (it held {observed}; the wait was for {cmp} {expected}); raise that signal where \
         the data is sent (Signal::set_release / add_release, put_signal), or wait on the one the sender raises"
    )]
    UnraisedSignal {
        /// The waiting thread.
        at: GpuThread,
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
         every thread of every block of every rank must end one session of the pad per launch (`pad.session()`, \
         dropped after its last use){}",
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
        /// Where this rank's last session that advanced the pad began, if one did.
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

fn with_message(message: &str) -> String {
    if message.is_empty() { String::new() } else { format!(": {message}") }
}

fn aborted_by(origin: &Option<usize>) -> String {
    match origin {
        Some(r) => format!("rank {r} panicked during this launch (or an earlier one whose errors were not read yet)"),
        None => "a rank of the team panicked".to_owned(),
    }
}

fn when_changed(quieted: &bool) -> &'static str {
    if *quieted { "before the put's quiet()" } else { "and the put was never quieted" }
}

fn in_block(block: &Option<[u32; 3]>) -> String {
    block.map(|b| format!(" block {b:?}")).unwrap_or_default()
}

fn the_others(block: &Option<[u32; 3]>) -> &'static str {
    if block.is_some() { "the rank's other blocks advanced it" } else { "the other ranks advanced it" }
}

fn last_call(location: &Option<Location>) -> String {
    location.as_ref().map(|l| format!(" (last call at {l})")).unwrap_or_default()
}

impl DeviceError {
    /// The rank whose kernel recorded it.
    pub fn rank(&self) -> usize {
        match self {
            DeviceError::Timeout { at, .. }
            | DeviceError::KernelPanic { at, .. }
            | DeviceError::Aborted { at, .. }
            | DeviceError::Race { at, .. }
            | DeviceError::UnorderedPut { at, .. }
            | DeviceError::SourceOverwritten { at, .. }
            | DeviceError::UnraisedSignal { at, .. } => at.rank,
            DeviceError::BarrierMismatch { rank, .. } | DeviceError::Unknown { rank, .. } => *rank,
        }
    }

    /// Whether the emulator's checker found it (a GPU does not report it).
    pub fn is_checker_finding(&self) -> bool {
        matches!(
            self,
            DeviceError::Race { .. }
                | DeviceError::UnorderedPut { .. }
                | DeviceError::SourceOverwritten { .. }
                | DeviceError::UnraisedSignal { .. }
                | DeviceError::BarrierMismatch { .. }
        )
    }
}

impl DeviceError {
    /// What kind of error it is, in words ("panic", "aborted wait", "timeout", ...): the summary counts by it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            DeviceError::Timeout { .. } => "timeout",
            DeviceError::KernelPanic { .. } => "panic",
            DeviceError::Aborted { .. } => "aborted wait",
            DeviceError::Race { .. } => "race",
            DeviceError::UnorderedPut { .. } => "unordered put",
            DeviceError::SourceOverwritten { .. } => "overwritten source",
            DeviceError::UnraisedSignal { .. } => "unraised signal",
            DeviceError::BarrierMismatch { .. } => "barrier mismatch",
            DeviceError::Unknown { .. } => "unknown",
        }
    }

    /// Which records a report shows first: the causes (panics), then the other errors, then the waits a
    /// panic aborted (consequences).
    fn precedence(&self) -> u8 {
        match self {
            DeviceError::KernelPanic { .. } => 0,
            DeviceError::Aborted { .. } => 2,
            _ => 1,
        }
    }

    /// One short line: who, what, where (the summary's form of the further errors).
    fn brief(&self) -> String {
        match self {
            DeviceError::KernelPanic { at, location, message } => {
                format!("{}: panicked at {location}{}", at, with_message(message))
            }
            DeviceError::Timeout { at, location, signal, .. }
            | DeviceError::UnraisedSignal { at, location, signal, .. } => {
                format!("{}: {} at {location} on {signal}", at, self.kind_name())
            }
            DeviceError::Aborted { at, location, .. }
            | DeviceError::Race { at, location, .. }
            | DeviceError::UnorderedPut { at, location, .. }
            | DeviceError::SourceOverwritten { at, location, .. } => {
                format!("{}: {} at {location}", at, self.kind_name())
            }
            other => format!("rank {}: {}", other.rank(), other.kind_name()),
        }
    }
}

/// How many errors of one kind one rank raised in a synchronisation (records read back or not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorCount {
    /// The rank.
    pub rank: usize,
    /// The kind, as [`DeviceError::kind_name`] says it.
    pub kind: &'static str,
    /// How many.
    pub count: u64,
}

/// Records shown in full or in brief by the message of a [`DeviceErrors`]; the rest are counted.
const SHOWN: usize = 3;

/// All device error records of one synchronisation: the causes first (panics), then other errors, then the
/// waits a panic aborted; by rank within each. Never empty.
///
/// Each rank keeps its first `ERROR_CAPACITY` records; [`counts`](DeviceErrors::counts) has every error
/// the device raised, by rank and kind, so a launch in which a thousand threads fail reads as a few
/// records and a count per rank, not a thousand lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceErrors {
    errors: Vec<DeviceError>,
    lost: u64,
    counts: Vec<ErrorCount>,
    report: Option<Box<WaitForReport>>,
}

impl DeviceErrors {
    /// Wraps the records of a synchronisation (`None` when there are none), with the device's counts per
    /// rank and kind (`counts`; a kind a rank has records of but no count for is counted from its records).
    pub(crate) fn with_counts(
        mut errors: Vec<DeviceError>,
        lost: u64,
        mut counts: Vec<ErrorCount>,
    ) -> Option<DeviceErrors> {
        if errors.is_empty() {
            return None;
        }
        errors.sort_by_key(|e| (e.precedence(), e.rank()));
        for e in &errors {
            let (rank, kind) = (e.rank(), e.kind_name());
            let seen = errors.iter().filter(|o| o.rank() == rank && o.kind_name() == kind).count() as u64;
            match counts.iter_mut().find(|c| c.rank == rank && c.kind == kind) {
                Some(c) => c.count = c.count.max(seen),
                None => counts.push(ErrorCount { rank, kind, count: seen }),
            }
        }
        counts.sort_by_key(|c| (c.rank, c.kind));
        Some(DeviceErrors { errors, lost, counts, report: None })
    }

    /// The same errors with the wait-for report of their timeouts, if any.
    pub(crate) fn with_report(mut self, report: Option<WaitForReport>) -> DeviceErrors {
        self.report = report.map(Box::new);
        self
    }

    /// When waits timed out: who waits on what across the team, the last signal each block raised (trace
    /// mode) and the culprit ([`WaitForReport`]); the message ends with it.
    pub fn wait_for(&self) -> Option<&WaitForReport> {
        self.report.as_deref()
    }

    /// The records read back (each rank keeps its first few), causes first.
    pub fn errors(&self) -> &[DeviceError] {
        &self.errors
    }

    /// The first record: the one the message shows (a panic, when there was one).
    pub fn first(&self) -> &DeviceError {
        &self.errors[0]
    }

    /// Errors raised beyond what the device buffers could hold.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Every error raised, counted by rank and kind, in rank order.
    pub fn counts(&self) -> &[ErrorCount] {
        &self.counts
    }

    /// How many errors were raised in all (records read back and lost).
    pub fn total(&self) -> u64 {
        (self.errors.len() as u64 + self.lost).max(self.counts.iter().map(|c| c.count).sum())
    }
}

impl fmt::Display for DeviceErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_records(f)?;
        match &self.report {
            Some(report) => write!(f, ". {report}"),
            None => Ok(()),
        }
    }
}

impl DeviceErrors {
    fn fmt_records(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.first())?;
        let more = self.total() - 1;
        if more == 0 {
            return Ok(());
        }
        let mut ranks: Vec<usize> = self.errors.iter().map(DeviceError::rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        let by_rank = self
            .counts
            .iter()
            .map(|c| format!("rank {}: {} {}{}", c.rank, c.count, c.kind, if c.count == 1 { "" } else { "s" }))
            .collect::<Vec<_>>()
            .join(", ");
        write!(f, " (and {more} more device error(s); ranks with errors: {ranks:?}; by rank and kind: {by_rank}")?;
        let next: Vec<String> = self.errors.iter().skip(1).take(SHOWN - 1).map(DeviceError::brief).collect();
        if !next.is_empty() {
            write!(f, "; next: {}", next.join("; "))?;
        }
        write!(f, ")")
    }
}
