//! Synchronisation through atomics and fences, as the checker follows it (the C++/PTX model): a release
//! (store, read-modify-write, or any write after a release fence) publishes the writer's clock with the
//! value; an acquire (load or read-modify-write, or a relaxed read before an acquire fence) that reads the
//! value joins it. Read-modify-writes continue a release sequence, so an acquire of a monotonic counter
//! learns every release that added to it; a plain store starts a new one.
//!
//! Each atomic address has a [`SyncVar`]: the operation itself runs under its lock, so the clock read is the
//! one published with the value read. Signals are atomics, so this is also where a raise is noted (a wait
//! that times out on a signal no rank wrote is diagnosed from it).

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use super::ThreadCheck;
use super::clock::{Clock, join};
use crate::emu::block::lock;

/// What an atomic access does, with its ordering.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AtomicOp {
    Load(Ordering),
    Store(Ordering),
    /// Add, exchange: reads and writes.
    Rmw(Ordering),
    /// Compare-and-swap: a read-modify-write with `success` when the value found is `current`, else a load
    /// with `failure`.
    Cas {
        success: Ordering,
        failure: Ordering,
        current: u64,
    },
}

fn acquires(o: Ordering) -> bool {
    matches!(o, Ordering::Acquire | Ordering::AcqRel | Ordering::SeqCst)
}

fn releases(o: Ordering) -> bool {
    matches!(o, Ordering::Release | Ordering::AcqRel | Ordering::SeqCst)
}

/// The checker's state of one atomic address.
#[derive(Debug, Default)]
pub(crate) struct SyncVar {
    state: Mutex<SyncState>,
}

#[derive(Debug, Default)]
struct SyncState {
    /// The clocks of the release sequence the current value belongs to.
    published: Option<Clock>,
    /// Whether any emulated thread wrote the address during the launch.
    written: bool,
}

impl SyncVar {
    /// Runs the atomic access `f` as thread `tc`, under this variable's lock, and follows what it orders.
    pub(crate) fn run<T: Copy + Into<u64>>(
        &self,
        tc: &mut ThreadCheck,
        addr: usize,
        op: AtomicOp,
        f: impl FnOnce() -> T,
    ) -> T {
        let mut st = lock(&self.state);
        let v = f();
        let (read, write) = match op {
            AtomicOp::Load(o) => (Some(o), None),
            AtomicOp::Store(o) => (None, Some((o, false))),
            AtomicOp::Rmw(o) => (Some(o), Some((o, true))),
            AtomicOp::Cas { success, current, .. } if v.into() == current => (Some(success), Some((success, true))),
            AtomicOp::Cas { failure, .. } => (Some(failure), None),
        };
        if let Some(o) = read
            && let Some(c) = &st.published
        {
            if acquires(o) {
                // A poll that reads the same release sequence again learns nothing new.
                let known = tc.acquired.get(&addr).is_some_and(|k| std::sync::Arc::ptr_eq(k, c));
                if !known {
                    tc.clock.acquire(c);
                    tc.acquired.insert(addr, std::sync::Arc::clone(c));
                }
            } else {
                tc.note_relaxed_read(c);
            }
        }
        if let Some((o, rmw)) = write {
            let mine = if releases(o) { Some(tc.clock.release()) } else { tc.fence_clock.clone() };
            st.published = match (rmw, st.published.take(), mine) {
                (true, Some(old), Some(mine)) => Some(join(&old, &mine)),
                (true, old, mine) => mine.or(old),
                (false, _, mine) => mine,
            };
            st.written = true;
        }
        v
    }

    /// Whether any emulated thread of the launch wrote the address.
    pub(crate) fn written(&self) -> bool {
        lock(&self.state).written
    }
}
