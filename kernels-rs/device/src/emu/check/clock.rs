//! Vector clocks: what each emulated thread knows of every other thread's progress.
//!
//! Entry `g` of a clock is an epoch of the thread with id `g` (all ranks of a team launch). A thread's own
//! epoch starts at 1 and grows at each release (signal raise, release atomic, release fence, barrier), so a
//! write stamped `(g, e)` happened before thread `t`'s current point exactly when `t` knows epoch `e` of
//! `g`. The clock a thread keeps (`base`) is shared copy-on-write (`Arc`): after a block barrier every
//! thread of the block holds the same one, so barriers and joins cost one vector per distinct clock.

use std::sync::Arc;

/// A vector of epochs, one per emulated thread of the launch; shared, copied on write.
pub(crate) type Clock = Arc<Vec<u32>>;

/// One thread's view: the clock it has acquired and its own current epoch (kept apart so a release does not
/// copy the vector until it must be published).
#[derive(Debug)]
pub(crate) struct ThreadClock {
    gid: u32,
    base: Clock,
    own: u32,
}

/// What a thread brings to a barrier: who it is, its epoch, what it knows.
#[derive(Debug, Clone)]
pub(crate) struct Deposit {
    gid: u32,
    own: u32,
    base: Clock,
}

/// Joins `other` into `into`, copying `into` only when `other` adds something.
fn join_into(into: &mut Clock, other: &Clock) {
    if Arc::ptr_eq(into, other) {
        return;
    }
    let adds = other.iter().zip(into.iter()).any(|(o, i)| o > i) || other.len() > into.len();
    if !adds {
        return;
    }
    let v = Arc::make_mut(into);
    if v.len() < other.len() {
        v.resize(other.len(), 0);
    }
    for (i, o) in v.iter_mut().zip(other.iter()) {
        *i = (*i).max(*o);
    }
}

impl ThreadClock {
    /// The clock of thread `gid` at kernel start: it knows nothing of the others.
    pub(crate) fn new(gid: u32, empty: &Clock) -> ThreadClock {
        ThreadClock { gid, base: Arc::clone(empty), own: 1 }
    }

    /// This thread's id.
    pub(crate) fn gid(&self) -> u32 {
        self.gid
    }

    /// The epoch this thread stamps its accesses with.
    pub(crate) fn epoch(&self) -> u32 {
        self.own
    }

    /// Whether the access stamped `(gid, epoch)` happened before this thread's current point.
    pub(crate) fn knows(&self, gid: u32, epoch: u32) -> bool {
        gid == self.gid || self.base.get(gid as usize).is_some_and(|&e| e >= epoch)
    }

    /// An acquire that synchronises with a release that published `other`.
    pub(crate) fn acquire(&mut self, other: &Clock) {
        join_into(&mut self.base, other);
    }

    /// A release: the clock to publish (this thread's accesses so far included); later accesses get a new
    /// epoch, so the published clock does not cover them.
    pub(crate) fn release(&mut self) -> Clock {
        let mut published = Arc::clone(&self.base);
        let v = Arc::make_mut(&mut published);
        let g = self.gid as usize;
        if v.len() <= g {
            v.resize(g + 1, 0);
        }
        v[g] = self.own;
        self.own += 1;
        published
    }

    /// What this thread brings to a barrier.
    pub(crate) fn deposit(&self) -> Deposit {
        Deposit { gid: self.gid, own: self.own, base: Arc::clone(&self.base) }
    }

    /// Leaves a barrier whose participants' knowledge was joined into `joined`.
    pub(crate) fn leave_barrier(&mut self, joined: &Clock) {
        self.base = Arc::clone(joined);
        self.own += 1;
    }
}

/// Joins two published clocks (a release sequence of read-modify-writes accumulates its releasers').
pub(crate) fn join(a: &Clock, b: &Clock) -> Clock {
    let mut out = Arc::clone(a);
    join_into(&mut out, b);
    out
}

/// The clock every participant of a barrier leaves with: everything any of them knew, and each one's epoch.
pub(crate) fn join_deposits(deposits: &[Deposit]) -> Clock {
    let mut distinct: Vec<&Clock> = Vec::new();
    for d in deposits {
        if !distinct.iter().any(|c| Arc::ptr_eq(c, &d.base)) {
            distinct.push(&d.base);
        }
    }
    let len = distinct.iter().map(|c| c.len()).max().unwrap_or(0);
    let len = deposits.iter().map(|d| d.gid as usize + 1).fold(len, usize::max);
    let mut v = vec![0u32; len];
    for c in distinct {
        for (i, o) in v.iter_mut().zip(c.iter()) {
            *i = (*i).max(*o);
        }
    }
    for d in deposits {
        let e = &mut v[d.gid as usize];
        *e = (*e).max(d.own);
    }
    Arc::new(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty(n: usize) -> Clock {
        Arc::new(vec![0; n])
    }

    #[test]
    fn a_release_covers_earlier_accesses_only() {
        let e = empty(4);
        let mut writer = ThreadClock::new(0, &e);
        let mut reader = ThreadClock::new(1, &e);
        let before = writer.epoch();
        let published = writer.release();
        let after = writer.epoch();
        assert!(!reader.knows(0, before));
        reader.acquire(&published);
        assert!(reader.knows(0, before));
        assert!(!reader.knows(0, after), "accesses after the release are not covered");
        assert!(reader.knows(1, reader.epoch()), "a thread knows its own accesses");
    }

    #[test]
    fn barriers_join_every_participant() {
        let e = empty(3);
        let mut t: Vec<ThreadClock> = (0..3).map(|g| ThreadClock::new(g, &e)).collect();
        let stamps: Vec<(u32, u32)> = t.iter().map(|c| (c.gid(), c.epoch())).collect();
        let joined = join_deposits(&t.iter().map(ThreadClock::deposit).collect::<Vec<_>>());
        for c in &mut t {
            c.leave_barrier(&joined);
        }
        for c in &t {
            assert!(stamps.iter().all(|&(g, ep)| c.knows(g, ep)));
            assert!(!stamps.iter().any(|&(g, _)| g != c.gid() && c.knows(g, c.epoch())));
        }
    }

    #[test]
    fn joins_copy_only_when_they_add() {
        let e = empty(2);
        let mut a = ThreadClock::new(0, &e);
        let same = Arc::clone(&a.base);
        a.acquire(&e);
        assert!(Arc::ptr_eq(&a.base, &same), "joining nothing new must not copy");
        let mut b = ThreadClock::new(1, &e);
        let p = b.release();
        a.acquire(&p);
        assert!(!Arc::ptr_eq(&a.base, &same));
        assert_eq!(*join(&p, &e), *p);
    }
}
