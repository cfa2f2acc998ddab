//! Reading the device's raw [`TraceEvent`](ferrocomm_device::abi::TraceEvent)s as the host's
//! [`TraceEvent`]s: their addresses named, their time put on the team's common clock.

use ferrocomm_device::abi::{TraceEvent as RawEvent, TraceKind};

use crate::event::{TraceEvent, TraceWhat};
use crate::names::{BufferRef, Cmp};
use crate::team::TeamShared;

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
