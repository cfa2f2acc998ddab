//! Shadow memory for put destinations: for every byte range that tracked accesses touched in a team's
//! launches, the writes not yet ordered before each other and the reads since the last write, each stamped
//! with its launch, thread and epoch (see [`Stamp`]). The shadow outlives a launch, so an access is
//! checked against the accesses of the launches before it too: a put that the receiver's next kernel
//! reads without having waited for it, or a put into a buffer whose owner's earlier kernel may still read
//! it. A read of bytes whose write it does not know of (it acquired no release made after
//! the write), or a write of bytes whose earlier read the writer does not know of (the read was not ordered
//! before the put), is a race: a thread read a put's destination without waiting on the signal that covers
//! the put. Checking both directions makes the finding independent of which thread the host ran first.
//!
//! Memory is cut into lines of 256 bytes spread over 64 locks, so threads working on different parts of a
//! buffer rarely wait for each other. Within a line, bytes are kept as disjoint segments in address order;
//! an access splits the segments at its ends and neighbours with equal state merge again, so a put's line is
//! one segment and sequential element reads by one thread collapse.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::panic::Location;
use std::sync::Mutex;

use super::AddrHasher;
use super::clock::{Clock, Stamp, ThreadClock};
use crate::block::lock;

/// Whether an access reads or writes its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// A read and a write of the same bytes, neither ordered before the other.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conflict {
    pub(crate) reader: Stamp,
    pub(crate) writer: Stamp,
    /// The first byte both touched.
    pub(crate) addr: usize,
    /// Bytes both touched, from `addr` (within one segment).
    pub(crate) bytes: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct State {
    /// Writes no later write is known to follow (several when writers did not synchronise).
    writes: Vec<Stamp>,
    /// The latest read of each thread since the last write, sorted by thread.
    reads: Vec<Stamp>,
}

/// Bytes `lo..hi` of a line, all in one state.
#[derive(Debug, Clone)]
struct Seg {
    lo: u16,
    hi: u16,
    st: State,
}

/// The segments of one line, disjoint and in address order.
#[derive(Debug, Default)]
struct Line {
    segs: Vec<Seg>,
}

/// Bytes per line: an access is cut into lines, each kept on its own.
const LINE: usize = 256;
/// Locks the lines are spread over (line `i` is under lock `i % SHARDS`), so threads touching different
/// lines of one buffer do not wait for each other.
const SHARDS: usize = 64;

type Lines = HashMap<usize, Line, BuildHasherDefault<AddrHasher>>;

/// The shadow of one launch's tracked accesses, all ranks together (the emulated GPUs share one address
/// space, so an address names one rank's buffer).
#[derive(Debug)]
pub(crate) struct Shadow {
    shards: Vec<Mutex<Lines>>,
}

impl Default for Shadow {
    fn default() -> Shadow {
        Shadow { shards: (0..SHARDS).map(|_| Mutex::new(Lines::default())).collect() }
    }
}

/// Whether `a` and `b` are the same thread of the same launch.
fn same_thread(a: &Stamp, b: &Stamp) -> bool {
    a.gid == b.gid && a.launch == b.launch
}

fn push_conflict(out: &mut Vec<Conflict>, c: Conflict) {
    if !out.iter().any(|o| same_thread(&o.reader, &c.reader) && same_thread(&o.writer, &c.writer)) {
        out.push(c);
    }
}

/// Checks one segment `[lo, hi)` of state `st` for an access by `clock`, adding conflicts to `out`.
fn check(st: &State, lo: usize, hi: usize, clock: &ThreadClock, me: Stamp, kind: Access, out: &mut Vec<Conflict>) {
    let unordered = |s: &Stamp| !same_thread(s, &me) && !clock.knows(s);
    match kind {
        Access::Read => {
            for w in st.writes.iter().filter(|w| unordered(w)) {
                push_conflict(out, Conflict { reader: me, writer: *w, addr: lo, bytes: hi - lo });
            }
        }
        Access::Write => {
            for r in st.reads.iter().filter(|r| unordered(r)) {
                push_conflict(out, Conflict { reader: *r, writer: me, addr: lo, bytes: hi - lo });
            }
        }
    }
}

/// Applies an access that `check` has seen to the segment's state.
fn apply(st: &mut State, clock: &ThreadClock, me: Stamp, kind: Access) {
    match kind {
        Access::Read => match st.reads.binary_search_by_key(&(me.launch, me.gid), |r| (r.launch, r.gid)) {
            Ok(i) => st.reads[i] = me,
            Err(i) => st.reads.insert(i, me),
        },
        Access::Write => {
            // Writes this one follows are superseded; reads are either ordered before it or were reported.
            st.writes.retain(|w| !same_thread(w, &me) && !clock.knows(w));
            st.writes.push(me);
            st.reads.clear();
        }
    }
}

/// One access, cut to one line.
#[derive(Clone, Copy)]
struct Piece<'a> {
    clock: &'a ThreadClock,
    me: Stamp,
    kind: Access,
    record: bool,
}

impl Line {
    /// Cuts the segment that contains `at` strictly inside in two with the same state.
    fn split(&mut self, at: u16) {
        if let Some(i) = self.segs.iter().position(|s| s.lo < at && at < s.hi) {
            let right = Seg { lo: at, hi: self.segs[i].hi, st: self.segs[i].st.clone() };
            self.segs[i].hi = at;
            self.segs.insert(i + 1, right);
        }
    }

    /// Bytes `lo..hi` of this line, which starts at address `base`.
    fn access(&mut self, base: usize, lo: u16, hi: u16, p: Piece<'_>, out: &mut Vec<Conflict>) {
        let addr = |off: u16| base + usize::from(off);
        if !p.record {
            for s in self.segs.iter().filter(|s| s.lo < hi && s.hi > lo) {
                check(&s.st, addr(s.lo.max(lo)), addr(s.hi.min(hi)), p.clock, p.me, p.kind, out);
            }
            return;
        }
        self.split(lo);
        self.split(hi);
        let mut i = self.segs.partition_point(|s| s.hi <= lo);
        let mut cursor = lo;
        while cursor < hi {
            if i < self.segs.len() && self.segs[i].lo == cursor {
                let s = &mut self.segs[i];
                check(&s.st, addr(s.lo), addr(s.hi), p.clock, p.me, p.kind, out);
                apply(&mut s.st, p.clock, p.me, p.kind);
                cursor = s.hi;
            } else {
                let end = self.segs.get(i).map_or(hi, |s| s.lo.min(hi));
                let mut st = State::default();
                apply(&mut st, p.clock, p.me, p.kind);
                self.segs.insert(i, Seg { lo: cursor, hi: end, st });
                cursor = end;
            }
            i += 1;
        }
        self.merge();
    }

    /// Neighbours in the same state become one segment again.
    fn merge(&mut self) {
        self.segs.dedup_by(|b, a| {
            let same = a.hi == b.lo && a.st == b.st;
            if same {
                a.hi = b.hi;
            }
            same
        });
    }
}

impl Shadow {
    /// An access by the thread of `clock` to bytes `[lo, hi)`: adds to `out` every tracked access of another
    /// thread to those bytes that neither happened before it nor after it, then (if `record`) remembers it.
    /// A cooperative copy is checked for every thread of its group but recorded once, for the thread that
    /// speaks for the group.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn access(
        &self,
        lo: usize,
        hi: usize,
        (clock, rank): (&ThreadClock, u32),
        loc: &'static Location<'static>,
        kind: Access,
        record: bool,
        out: &mut Vec<Conflict>,
    ) {
        if lo >= hi {
            return;
        }
        let p = Piece { clock, me: clock.stamp(rank, loc), kind, record };
        let (first, last) = (lo / LINE, (hi - 1) / LINE);
        // Each lock once: by line for a short access, by lock (all its lines) for a long one.
        let groups: Vec<(usize, usize)> = if last - first < SHARDS {
            (first..=last).map(|l| (l % SHARDS, l)).collect()
        } else {
            (0..SHARDS).map(|s| (s, first + (s + SHARDS - first % SHARDS) % SHARDS)).collect()
        };
        for (shard, start) in groups {
            let mut lines = lock(&self.shards[shard]);
            let mut l = start;
            while l <= last {
                let base = l * LINE;
                let (a, b) = (lo.max(base) - base, hi.min(base + LINE) - base);
                // Both fit in u16: at most LINE.
                let (a, b) = (a as u16, b as u16);
                if record {
                    lines.entry(l).or_default().access(base, a, b, p, out);
                } else if let Some(line) = lines.get_mut(&l) {
                    line.access(base, a, b, p, out);
                }
                if last - first < SHARDS {
                    break;
                }
                l += SHARDS;
            }
        }
    }

    /// Rank `rank` ended its grid of launch `launch` knowing `known` (a clock of that launch): its bit joins
    /// the knowers of every access of that launch the clock covers, so whoever later knows that end knows
    /// them.
    pub(crate) fn rank_ended(&self, launch: u32, rank: u32, known: &Clock) {
        let Some(bit) = 1u64.checked_shl(rank) else { return };
        let covers = |s: &Stamp| s.launch == launch && known.get(s.gid as usize).is_some_and(|&e| e >= s.epoch);
        for shard in &self.shards {
            for line in lock(shard).values_mut() {
                for seg in &mut line.segs {
                    for s in seg.st.writes.iter_mut().chain(seg.st.reads.iter_mut()) {
                        if covers(s) {
                            s.knowers |= bit;
                        }
                    }
                }
                line.merge();
            }
        }
    }

    /// Drops what is known of bytes `[lo, hi)`: the host wrote, cleared or freed them, and no kernel uses
    /// them meanwhile, so whatever the kernels did there before is ordered before what they do next.
    pub(crate) fn forget(&self, lo: usize, hi: usize) {
        if lo >= hi {
            return;
        }
        let (first, last) = (lo / LINE, (hi - 1) / LINE);
        for shard in &self.shards {
            lock(shard).retain(|&l, line| {
                if l < first || l > last {
                    return true;
                }
                let base = l * LINE;
                // Both fit in u16: at most LINE.
                let (a, b) = ((lo.max(base) - base) as u16, (hi.min(base + LINE) - base) as u16);
                line.split(a);
                line.split(b);
                line.segs.retain(|s| s.hi <= a || s.lo >= b);
                !line.segs.is_empty()
            });
        }
    }

    /// Segments kept (for tests of the merging).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).values().map(|l| l.segs.len()).sum::<usize>()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::clock::Layout;
    use super::super::clock::tests::clocks as launch_clocks;
    use super::*;

    fn clocks(n: u32) -> Vec<ThreadClock> {
        launch_clocks(1, n)
    }

    fn run(s: &Shadow, lo: usize, hi: usize, c: &ThreadClock, kind: Access) -> Vec<Conflict> {
        let mut out = Vec::new();
        s.access(lo, hi, (c, 0), Location::caller(), kind, true, &mut out);
        out
    }

    #[test]
    fn a_later_launch_reads_what_a_rank_knew_at_its_end() {
        let mut first = clocks(2);
        let s = Shadow::default();
        assert!(run(&s, 0, 64, &first[0], Access::Write).is_empty());
        // Thread 1 of the same rank acquired the write; rank 1 of the team (a thread of its own, id 0 of
        // a world of one here) ends knowing the clock thread 1 ended with.
        let p = first[0].release();
        first[1].acquire(&p);
        s.rank_ended(1, 1, &first[1].current());
        let layout = Layout { launch: 2, fine: 1, rank_threads: 1, alone: None };
        let knows_rank_1 = ThreadClock::new(0, layout, &layout.clock_of_ends(&[0, 1]));
        let knows_nothing = ThreadClock::new(0, layout, &layout.clock_of_ends(&[0, 0]));
        assert!(run(&s, 0, 64, &knows_rank_1, Access::Read).is_empty());
        assert_eq!(run(&s, 0, 64, &knows_nothing, Access::Read).len(), 1, "an unordered read of an earlier launch");
        s.forget(0, 32);
        assert_eq!(run(&s, 0, 64, &knows_nothing, Access::Read).len(), 1, "bytes 32.. are still known");
        s.forget(32, 64);
        assert!(run(&s, 0, 64, &knows_nothing, Access::Read).is_empty(), "the host rewrote every byte");
    }

    #[test]
    fn a_read_before_the_acquire_conflicts_and_after_it_does_not() {
        let mut t = clocks(2);
        let s = Shadow::default();
        assert!(run(&s, 100, 200, &t[0], Access::Write).is_empty());
        let c = run(&s, 150, 160, &t[1], Access::Read);
        assert_eq!((c.len(), c[0].reader.gid, c[0].writer.gid, c[0].addr, c[0].bytes), (1, 1, 0, 150, 10));
        let published = t[0].release();
        t[1].acquire(&published);
        assert!(run(&s, 100, 200, &t[1], Access::Read).is_empty());
    }

    #[test]
    fn a_write_after_an_unordered_read_conflicts() {
        let mut t = clocks(2);
        let s = Shadow::default();
        assert!(run(&s, 0, 8, &t[1], Access::Read).is_empty());
        let c = run(&s, 0, 64, &t[0], Access::Write);
        assert_eq!((c.len(), c[0].reader.gid, c[0].writer.gid), (1, 1, 0));
        // Ordered the other way round (the reader released, the writer acquired): no conflict.
        assert!(run(&s, 0, 8, &t[1], Access::Read).len() == 1, "the write above is still unordered");
        let p = t[1].release();
        t[0].acquire(&p);
        assert!(run(&s, 0, 64, &t[0], Access::Write).is_empty());
    }

    #[test]
    fn own_accesses_and_disjoint_ranges_never_conflict() {
        let t = clocks(2);
        let s = Shadow::default();
        run(&s, 0, 100, &t[0], Access::Write);
        assert!(run(&s, 0, 100, &t[0], Access::Read).is_empty());
        assert!(run(&s, 100, 200, &t[1], Access::Read).is_empty());
    }

    #[test]
    fn segments_split_and_merge_back() {
        let t = clocks(1);
        let s = Shadow::default();
        run(&s, 0, 1000, &t[0], Access::Write);
        assert_eq!(s.len(), 4, "one segment per line");
        for i in 0..50 {
            run(&s, i * 4, i * 4 + 4, &t[0], Access::Read);
        }
        assert_eq!(s.len(), 5, "200 bytes read in order by one thread, the rest of the first line untouched");
    }

    #[test]
    fn unrecorded_accesses_only_check() {
        let t = clocks(3);
        let s = Shadow::default();
        run(&s, 0, 16, &t[0], Access::Write);
        let mut out = Vec::new();
        s.access(0, 16, (&t[1], 0), Location::caller(), Access::Read, false, &mut out);
        assert_eq!(out.len(), 1);
        assert!(run(&s, 0, 16, &t[0], Access::Write).is_empty(), "the unrecorded read left no trace");
    }
}
