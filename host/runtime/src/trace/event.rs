//! Trace events as the host reads them: the device's raw [`TraceEvent`](ferrocomm_device::abi::TraceEvent)
//! with its addresses named (the pad and index of a signal, the rank a put went to) and its time on the
//! team's common clock.

use std::sync::OnceLock;
use std::time::Instant;

use ferrocomm_device::abi::{TraceEvent as RawEvent, TraceKind};

use crate::error::{BufferRef, Cmp, SignalRef};
use crate::team::TeamShared;

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

/// Nanoseconds since this process first asked: the host clock every GPU's offset is measured against.
pub(crate) fn host_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Names a raw event of rank `rank` (its GPU's clock `offset` ns ahead of the host's); `None` for a slot the
/// device never wrote (kind 0) or a kind this runtime does not know.
pub(crate) fn decode(team: &TeamShared, rank: usize, launch: u64, offset: i64, e: &RawEvent) -> Option<TraceEvent> {
    let peer = |addr: u64| match team.name_buffer(addr) {
        BufferRef::Element { owner, .. } => Some(owner),
        BufferRef::Address(_) => None,
    };
    let cmp = |aux: u8| Cmp::from_u32(u32::from(aux));
    let what = match TraceKind::from_u8(e.kind)? {
        TraceKind::PutBegin => TraceWhat::PutBegin { bytes: e.a, peer: peer(e.b) },
        TraceKind::PutEnd => TraceWhat::PutEnd { bytes: e.a, peer: (e.b != 0).then(|| peer(e.b)).flatten() },
        TraceKind::Signal => TraceWhat::Signal { signal: team.name_signal(e.a), value: e.b, add: e.aux == 1 },
        TraceKind::WaitBegin => TraceWhat::WaitBegin { signal: team.name_signal(e.a), expected: e.b, cmp: cmp(e.aux) },
        TraceKind::WaitEnd => TraceWhat::WaitEnd { signal: team.name_signal(e.a), observed: e.b },
        TraceKind::Barrier => TraceWhat::Barrier,
        TraceKind::Epoch => TraceWhat::Epoch { pad: team.name_pad(e.a), epoch: e.b },
        TraceKind::Mark => TraceWhat::Mark { name: ferrocomm_device::trace::mark_name(e.a, e.b) },
    };
    Some(TraceEvent {
        rank,
        launch,
        block: e.block,
        thread: e.thread,
        smid: u32::from(e.smid),
        time_ns: (e.time as i64).saturating_sub(offset).max(0) as u64,
        what,
    })
}
