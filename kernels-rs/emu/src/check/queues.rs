//! Host queues the checker watches (`ferrocomm_device::queue`). A descriptor's slot is reused once the
//! ring has gone round: the producer may write it only after it has *acquired* the consumer's `tail` past
//! the descriptor the slot held, or the consumer may still be reading that one. The host side of a queue
//! tells the checker where its rings lie ([`watch_host_queues`]); a push into a watched slot without that
//! acquire panics, naming the descriptors, as a race would be reported.

use std::sync::Mutex;

use super::lock;

/// Where a team's host queues lie: `rings` rings of `stride` bytes from `base`, each with its producer's
/// `head` at offset `head`, its consumer's `tail` at `tail`, and `depth` slots of `slot_bytes` from `slots`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLayout {
    /// Address of the first ring.
    pub base: usize,
    /// Bytes from one ring to the next.
    pub stride: usize,
    /// How many rings (one per rank).
    pub rings: usize,
    /// Slots per ring.
    pub depth: u64,
    /// Offset of the producer's `head` (descriptors published) in a ring.
    pub head: usize,
    /// Offset of the consumer's `tail` (descriptors popped) in a ring.
    pub tail: usize,
    /// Offset of the first slot in a ring.
    pub slots: usize,
    /// Bytes per slot.
    pub slot_bytes: usize,
}

static WATCHED: Mutex<Vec<QueueLayout>> = Mutex::new(Vec::new());

/// The checker watches the pushes into the rings of `layout` until the returned value is dropped (drop it
/// before the rings' memory is freed).
pub fn watch_host_queues(layout: QueueLayout) -> WatchedQueues {
    lock(&WATCHED).push(layout);
    WatchedQueues(layout)
}

/// Rings the checker watches, while this lives.
#[derive(Debug)]
pub struct WatchedQueues(QueueLayout);

impl Drop for WatchedQueues {
    fn drop(&mut self) {
        let mut watched = lock(&WATCHED);
        if let Some(i) = watched.iter().position(|l| *l == self.0) {
            watched.remove(i);
        }
    }
}

/// The ring whose slots hold the address `slot`, if a watched one does: the addresses of its `head` and
/// `tail`, and its depth.
pub(crate) fn ring_of(slot: usize) -> Option<(usize, usize, u64)> {
    lock(&WATCHED).iter().find_map(|l| {
        let offset = slot.checked_sub(l.base)?;
        let (ring, within) = (offset / l.stride.max(1), offset % l.stride.max(1));
        let slots = l.slots..l.slots + l.depth as usize * l.slot_bytes;
        (ring < l.rings && slots.contains(&within)).then(|| {
            let at = l.base + ring * l.stride;
            (at + l.head, at + l.tail, l.depth)
        })
    })
}
