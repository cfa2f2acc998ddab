//! Synchronisation through atomics and fences, as the checker follows it (the C++/PTX model): a release
//! (store, read-modify-write, or any write after a release fence) publishes the writer's clock with the
//! value; an acquire (load or read-modify-write, or a relaxed read before an acquire fence) that reads the
//! value joins it. Read-modify-writes continue a release sequence, so an acquire of a monotonic counter
//! learns every release that added to it; a plain store starts a new one.
//!
//! Scopes are followed as far as PTX makes them matter: a publication is tagged with its [`Scope`] (the
//! atomic's, or the narrower of the fence's and the atomic's for a write after a release fence) and its
//! writer's rank and block. An acquire joins it only when the reader is inside that scope (a `.cta`
//! release: the writer's block; `.gpu`: its rank; `.sys`: everyone) and the writer is inside the acquire's
//! own scope (a `.gpu` acquire: same rank; a `.cta` one: same rank, and same block when the release was
//! `.cta` too — a wider release keeps the rank of its writer, not the block).
//!
//! Each atomic address has a [`SyncVar`]: the operation itself runs under its lock, so the clock read is the
//! one published with the value read. Signals are atomics, so this is also where a raise is noted (a wait
//! that times out on a signal no rank wrote is diagnosed from it). A relaxed store that sat in its thread's
//! store buffer (see `emu::weak`) is run here when it reaches memory, so value and clock appear together.
//!
//! The variables outlive a launch, as the signals do: a wait in one launch on a value raised in an earlier
//! one learns what its raiser's rank had done (see [`Layout::ends`]).

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use super::ThreadCheck;
use super::clock::{Clock, Layout, join};
use crate::block::lock;

/// The scope of an atomic or a fence: the threads it orders for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// `.cta`: the threads of one block.
    Cta,
    /// `.gpu`: the threads of one GPU (one rank).
    Gpu,
    /// `.sys`: every GPU and the host.
    Sys,
}

/// Who a thread is, as scopes see it: its rank and its block's linear index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) rank: u32,
    pub(crate) block: u32,
}

/// A clock of the launch laid out as `layout`, published at `scope` by a thread of `at`.
#[derive(Debug, Clone)]
pub(crate) struct Pub {
    pub(crate) scope: Scope,
    pub(crate) at: Place,
    pub(crate) clock: Clock,
    pub(crate) layout: Layout,
}

impl Pub {
    /// Releases of one key accumulate into one clock: the launch, the scope, the rank, and the block for
    /// `.cta`.
    fn key(&self) -> (u32, Scope, u32, u32) {
        (self.layout.launch, self.scope, self.at.rank, if self.scope == Scope::Cta { self.at.block } else { u32::MAX })
    }

    /// Whether an acquire of scope `acquire` by a thread of `me` synchronises with this publication.
    pub(crate) fn reaches(&self, acquire: Scope, me: Place) -> bool {
        let same_rank = self.at.rank == me.rank;
        let same_block = same_rank && self.at.block == me.block;
        let inside_release = match self.scope {
            Scope::Sys => true,
            Scope::Gpu => same_rank,
            Scope::Cta => same_block,
        };
        let inside_acquire = match acquire {
            Scope::Sys => true,
            Scope::Gpu => same_rank,
            // The block of a wider release's writer is not kept: a `.cta` acquire of one is taken as same-block.
            Scope::Cta => same_rank && (self.scope != Scope::Cta || same_block),
        };
        inside_release && inside_acquire
    }
}

/// Joins `p` into the publications `into` (into the one of its key, if any).
pub(crate) fn add_pub(into: &mut Vec<Pub>, p: Pub) {
    match into.iter_mut().find(|q| q.key() == p.key()) {
        Some(q) => {
            if !std::sync::Arc::ptr_eq(&q.clock, &p.clock) {
                q.clock = join(&q.clock, &p.clock);
            }
        }
        None => into.push(p),
    }
}

/// What an atomic access does, with its ordering.
#[derive(Debug, Clone, Copy)]
pub enum AtomicOp {
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
    /// The clocks of the release sequence the current value belongs to, one per scope and writer's rank
    /// (and block, for `.cta`).
    published: Vec<Pub>,
    /// Counts the writes that changed `published`: a poll that acquires the same version again learns
    /// nothing new.
    version: u64,
    /// The last launch in which an emulated thread wrote the address (0: none).
    written_in: u32,
}

impl SyncVar {
    /// Runs the atomic access `f` of scope `scope` as thread `tc` of `me`, under this variable's lock, and
    /// follows what it orders.
    pub(crate) fn run<T: Copy + Into<u64>>(
        &self,
        tc: &mut ThreadCheck,
        (addr, scope, me): (usize, Scope, Place),
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
            && !st.published.is_empty()
        {
            if acquires(o) {
                // A poll that reads the same release sequence again learns nothing new.
                let known = tc.acquired.get(&addr) == Some(&st.version);
                if !known {
                    for p in st.published.iter().filter(|p| p.reaches(scope, me)) {
                        tc.clock.acquire_from(&p.layout, &p.clock);
                    }
                    tc.acquired.insert(addr, st.version);
                }
            } else {
                for p in st.published.iter().filter(|p| p.reaches(scope, me)) {
                    tc.note_relaxed_read(p);
                }
            }
        }
        if let Some((o, rmw)) = write {
            let layout = tc.clock.layout();
            let mine = if releases(o) {
                Some(Pub { scope, at: me, clock: tc.clock.release(), layout })
            } else {
                // A write after a release fence publishes at the narrower of the two scopes.
                tc.fence_clock.as_ref().map(|(c, s)| Pub { scope: scope.min(*s), at: me, clock: c.clone(), layout })
            };
            if rmw {
                // The release sequence goes on in this launch: what earlier launches published joins it
                // in this launch's terms.
                for p in st.published.iter_mut().filter(|p| p.layout != layout) {
                    p.clock = layout.clock_of_ends(&p.layout.ends(&p.clock));
                    p.layout = layout;
                }
            }
            match (rmw, mine) {
                (true, Some(mine)) => add_pub(&mut st.published, mine),
                (true, None) => {}
                (false, mine) => st.published = mine.into_iter().collect(),
            }
            st.version += 1;
            st.written_in = layout.launch;
        }
        v
    }

    /// A release store of scope `.sys` made for a thread of the launch laid out as `p.layout` by someone else
    /// (a host proxy serving its put), publishing `p`; `store` writes the value.
    pub(crate) fn publish(&self, p: Pub, store: impl FnOnce()) {
        let mut st = lock(&self.state);
        store();
        st.written_in = p.layout.launch;
        // A plain store starts a new release sequence.
        st.published = vec![p];
        st.version += 1;
    }

    /// Whether an emulated thread wrote the address in launch `launch`.
    pub(crate) fn written_in(&self, launch: u32) -> bool {
        lock(&self.state).written_in == launch
    }
}
