//! Trace events as the host reads them: the device's raw trace records with their addresses named (the pad
//! and index of a signal, the rank a put went to) and their time on the team's common clock. Plain values:
//! `trace` makes them, and the hang report (`error`) reads them.

use crate::names::{Cmp, SignalRef};

/// What an event records.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceWhat {
    /// A group began a put of `bytes` into rank `peer`'s memory (`None`: an address of no known buffer).
    PutBegin {
        /// Bytes of the put.
        bytes: u64,
        /// The rank whose copy of a symmetric buffer it writes.
        peer: Option<usize>,
    },
    /// The put ended (`bytes` 0 and `peer` `None` at a non-blocking put's quiet, which does not know them).
    PutEnd {
        /// Bytes of the put.
        bytes: u64,
        /// The rank it wrote to.
        peer: Option<usize>,
    },
    /// A signal was set to, or increased by, `value`.
    Signal {
        /// The signal.
        signal: SignalRef,
        /// The value stored or added.
        value: u64,
        /// Whether it was an add.
        add: bool,
    },
    /// A wait began.
    WaitBegin {
        /// The signal.
        signal: SignalRef,
        /// The value waited for.
        expected: u64,
        /// The comparison.
        cmp: Cmp,
    },
    /// The wait saw its value.
    WaitEnd {
        /// The signal.
        signal: SignalRef,
        /// The value that ended the wait.
        observed: u64,
    },
    /// The block passed a barrier.
    Barrier,
    /// A signal pad's session ended epoch `epoch`.
    Epoch {
        /// The pad, as errors name it.
        pad: String,
        /// The epoch that ended.
        epoch: u64,
    },
    /// A user mark (`ferrocomm_device::trace::mark`).
    Mark {
        /// Its name (the first 16 bytes).
        name: String,
    },
}

/// One traced event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// The rank that recorded it.
    pub rank: usize,
    /// Which collection (launch, or graph replay) of the team it came from, from 0.
    pub launch: u64,
    /// The recording thread's linear block index.
    pub block: u32,
    /// Its linear thread index in the block.
    pub thread: u32,
    /// `%smid` (the emulator: the block index).
    pub smid: u32,
    /// When, in nanoseconds of the team's common clock: the GPU's `%globaltimer` corrected by the offset
    /// measured for it at team creation (the emulator's host clock as is).
    pub time_ns: u64,
    /// What happened.
    pub what: TraceWhat,
}
