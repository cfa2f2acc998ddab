//! Vector clocks: what each emulated thread knows of every other thread's progress.
//!
//! A clock of team launch `L` has two parts. Entry `g < fine` is an epoch of the thread with id `g` of
//! `L` (all ranks): a thread's own epoch starts at 1 and grows at each release (signal raise, release
//! atomic, release fence, barrier), so a write of `L` stamped `(g, e)` happened before thread `t`'s
//! current point exactly when `t` knows epoch `e` of `g`. Entry `fine + r` is the last launch whose end on
//! rank `r` the thread knows of: a rank's stream runs its launches in order, so a launch starts knowing its
//! rank's earlier ends, and a release carries that knowledge to other ranks (a `ready` handshake tells
//! the writer that the reader's earlier kernels are done). What a rank knew at the end of a launch is kept
//! with the accesses it knew of ([`Stamp::knowers`]), so knowing that end is knowing them.
//!
//! The clock a thread keeps (`base`) is shared copy-on-write (`Arc`): after a block barrier every
//! thread of the block holds the same one, so barriers and joins cost one vector per distinct clock.

use std::panic::Location;
use std::sync::Arc;

/// A vector of epochs, one per emulated thread of the launch, then one launch per rank (see the module
/// documentation); shared, copied on write.
pub(crate) type Clock = Arc<Vec<u32>>;

/// How a launch's clocks are laid out: which launch, how many thread entries, how ids map to ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The team launch, counted from 1 on its timeline.
    pub(crate) launch: u32,
    /// Thread entries before the per-rank ones.
    pub(crate) fine: u32,
    /// Threads per rank (ids `r * rank_threads ..` are rank `r`'s).
    pub(crate) rank_threads: u32,
    /// `Some(rank)` when the launch runs one rank alone (its ids start at 0).
    pub(crate) alone: Option<u32>,
}

impl Layout {
    /// The rank of thread id `gid`.
    pub(crate) fn rank_of(&self, gid: u32) -> u32 {
        self.alone.unwrap_or(gid / self.rank_threads.max(1))
    }

    /// The per-rank part of a clock of this layout, over-approximated for a thread of another launch: a
    /// rank any of whose threads the clock knows is taken as known up to its end of this launch. (Used
    /// for synchronisation across launches, where the exact epochs mean nothing to the reader; knowing too
    /// much can hide a race, never invent one.)
    pub(crate) fn ends(&self, clock: &Clock) -> Vec<u32> {
        let fine = self.fine as usize;
        let mut ends = clock.get(fine..).map(<[u32]>::to_vec).unwrap_or_default();
        for (gid, &e) in clock.iter().take(fine).enumerate() {
            if e > 0 {
                let r = self.rank_of(gid as u32) as usize;
                if ends.len() <= r {
                    ends.resize(r + 1, 0);
                }
                ends[r] = ends[r].max(self.launch);
            }
        }
        ends
    }

    /// A clock of this layout that knows `ends` and nothing of this launch's threads.
    pub(crate) fn clock_of_ends(&self, ends: &[u32]) -> Clock {
        let mut v = vec![0; self.fine as usize];
        v.extend_from_slice(ends);
        Arc::new(v)
    }
}

/// One tracked access: the launch, rank and thread that made it, at which epoch, from where in the kernel
/// source; and, once ranks finished that launch, which of them knew of it at their end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) launch: u32,
    pub(crate) rank: u32,
    pub(crate) gid: u32,
    pub(crate) epoch: u32,
    /// Bit `r`: rank `r`'s threads knew of the access when its grid of `launch` ended.
    pub(crate) knowers: u64,
    pub(crate) loc: &'static Location<'static>,
}

/// One thread's view: the clock it has acquired and its own current epoch (kept apart so a release does not
/// copy the vector until it must be published).
#[derive(Debug, Clone)]
pub(crate) struct ThreadClock {
    gid: u32,
    base: Clock,
    own: u32,
    layout: Layout,
}

/// What a thread brings to a barrier: who it is, its epoch, what it knows.
#[derive(Debug, Clone)]
pub(crate) struct Deposit {
    gid: u32,
    own: u32,
    base: Clock,
}

/// Joins `other` into `into`, copying `into` only when `other` adds something.
pub(crate) fn join_into(into: &mut Clock, other: &Clock) {
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
    /// The clock of thread `gid` of a launch laid out as `layout` at kernel start: it knows what `start`
    /// knows (its rank's earlier ends, what the host waited for) and nothing of the launch's threads.
    pub(crate) fn new(gid: u32, layout: Layout, start: &Clock) -> ThreadClock {
        ThreadClock { gid, base: Arc::clone(start), own: 1, layout }
    }

    /// The layout of the thread's launch.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// This thread's id.
    pub(crate) fn gid(&self) -> u32 {
        self.gid
    }

    /// The epoch this thread stamps its accesses with.
    #[cfg(test)]
    pub(crate) fn epoch(&self) -> u32 {
        self.own
    }

    /// A stamp of this thread, now.
    pub(crate) fn stamp(&self, rank: u32, loc: &'static Location<'static>) -> Stamp {
        Stamp { launch: self.layout.launch, rank, gid: self.gid, epoch: self.own, knowers: 0, loc }
    }

    /// Whether this thread knows rank `rank`'s end of launch `launch` (or of a later one).
    fn knows_end(&self, rank: u32, launch: u32) -> bool {
        self.base.get(self.layout.fine as usize + rank as usize).is_some_and(|&l| l >= launch)
    }

    /// Whether the access `s` happened before this thread's current point.
    pub(crate) fn knows(&self, s: &Stamp) -> bool {
        if s.launch == self.layout.launch
            && (s.gid == self.gid || self.base.get(s.gid as usize).is_some_and(|&e| e >= s.epoch))
        {
            return true;
        }
        if self.knows_end(s.rank, s.launch) {
            return true;
        }
        // The set bits only: this runs for every tracked access of an earlier launch.
        let mut knowers = s.knowers;
        while knowers != 0 {
            if self.knows_end(knowers.trailing_zeros(), s.launch) {
                return true;
            }
            knowers &= knowers - 1;
        }
        false
    }

    /// An acquire that synchronises with a release that published `other` (a clock of this launch).
    #[cfg(test)]
    pub(crate) fn acquire(&mut self, other: &Clock) {
        join_into(&mut self.base, other);
    }

    /// An acquire that synchronises with a release of the launch laid out as `from` that published `other`.
    pub(crate) fn acquire_from(&mut self, from: &Layout, other: &Clock) {
        if from.launch == self.layout.launch {
            join_into(&mut self.base, other);
        } else {
            join_into(&mut self.base, &self.layout.clock_of_ends(&from.ends(other)));
        }
    }

    /// What this thread knows, its own accesses so far included (what its rank knows when it ends).
    pub(crate) fn current(&self) -> Clock {
        let mut now = Arc::clone(&self.base);
        let g = self.gid as usize;
        if now.get(g).is_none_or(|&e| e < self.own) {
            let v = Arc::make_mut(&mut now);
            if v.len() <= g {
                v.resize(g + 1, 0);
            }
            v[g] = self.own;
        }
        now
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
pub(crate) mod tests {
    use super::*;

    /// Launch `launch` of one rank of `n` threads (a world of two), with nothing known at start.
    pub(crate) fn clocks(launch: u32, n: u32) -> Vec<ThreadClock> {
        let layout = Layout { launch, fine: n, rank_threads: n, alone: None };
        let start = layout.clock_of_ends(&[0, 0]);
        (0..n).map(|g| ThreadClock::new(g, layout, &start)).collect()
    }

    fn stamp(c: &ThreadClock) -> Stamp {
        c.stamp(0, Location::caller())
    }

    #[test]
    fn a_release_covers_earlier_accesses_only() {
        let mut t = clocks(1, 4);
        let before = stamp(&t[0]);
        let published = t[0].release();
        let after = stamp(&t[0]);
        assert!(!t[1].knows(&before));
        t[1].acquire(&published);
        assert!(t[1].knows(&before));
        assert!(!t[1].knows(&after), "accesses after the release are not covered");
        assert!(t[1].knows(&stamp(&t[1])), "a thread knows its own accesses");
    }

    #[test]
    fn barriers_join_every_participant() {
        let mut t = clocks(1, 3);
        let stamps: Vec<Stamp> = t.iter().map(stamp).collect();
        let joined = join_deposits(&t.iter().map(ThreadClock::deposit).collect::<Vec<_>>());
        for c in &mut t {
            c.leave_barrier(&joined);
        }
        for c in &t {
            assert!(stamps.iter().all(|s| c.knows(s)));
            assert!(!stamps.iter().any(|s| s.gid != c.gid() && c.knows(&Stamp { epoch: c.epoch(), ..*s })));
        }
    }

    #[test]
    fn joins_copy_only_when_they_add() {
        let mut t = clocks(1, 2);
        let same = Arc::clone(&t[0].base);
        let nothing = Arc::new(vec![0; 4]);
        t[0].acquire(&nothing);
        assert!(Arc::ptr_eq(&t[0].base, &same), "joining nothing new must not copy");
        let p = t[1].release();
        t[0].acquire(&p);
        assert!(!Arc::ptr_eq(&t[0].base, &same));
        assert_eq!(*join(&p, &nothing), *p);
    }

    #[test]
    fn a_later_launch_knows_an_access_through_a_rank_that_knew_it_at_its_end() {
        let mut old = clocks(3, 2);
        let s = Stamp { knowers: 0b10, rank: 0, ..stamp(&old[0]) };
        let layout = Layout { launch: 4, fine: 2, rank_threads: 2, alone: None };
        let knows_rank_1 = ThreadClock::new(0, layout, &layout.clock_of_ends(&[0, 3]));
        let knows_rank_0 = ThreadClock::new(0, layout, &layout.clock_of_ends(&[3, 0]));
        let knows_earlier = ThreadClock::new(0, layout, &layout.clock_of_ends(&[2, 2]));
        assert!(knows_rank_1.knows(&s), "rank 1 knew it at its end of launch 3");
        assert!(knows_rank_0.knows(&s), "its writer's end of launch 3 follows it");
        assert!(!knows_earlier.knows(&s), "ends of launch 2 precede it");
        assert!(!knows_rank_1.knows(&Stamp { knowers: 0, ..s }), "rank 1 did not know it");
        // Across launches, a publication's threads count as their ranks' ends.
        let published = old[0].release();
        let mut reader = ThreadClock::new(1, layout, &layout.clock_of_ends(&[0, 0]));
        reader.acquire_from(&old[1].layout(), &published);
        assert!(reader.knows(&Stamp { knowers: 0, ..s }));
    }
}
