//! The emulator's checker: the classic bugs of GPU-initiated communication, found while the kernel runs on
//! the CPU and reported as device error records (so the host runtime turns them into typed errors):
//!
//! | finding | record kind | how |
//! | --- | --- | --- |
//! | a put's destination read before waiting on the signal covering it | `Race` | clocks, [`shadow`] |
//! | a non-blocking put's source rewritten before its `quiet()` | `SourceOverwritten` | [`source`] snapshots |
//! | a wait timing out on a signal no rank raised in the launch | `UnraisedSignal` | [`atomics`] |
//! | ranks or blocks advancing a signal pad's barrier epoch differently | `BarrierMismatch` | [`epochs`] logs |
//!
//! Happens-before is tracked with a vector clock per emulated thread of every rank ([`clock`]): releases
//! (signal raises, release atomics, writes after a release fence) publish the thread's clock with the value,
//! acquires that read the value join it, block barriers and `sync_warp` join their participants. Shuffles
//! and votes do not order memory on the GPU and do not here. Only this synchronisation is understood: a
//! kernel that orders a put by other means (an LL packet or a raw store used as a flag) is reported.
//!
//! Scopes are followed ([`atomics`] has the rule):
//!
//! | release (or release fence + relaxed store) | orders for an acquirer in | acquire of scope | joins releases of writers in |
//! | --- | --- | --- | --- |
//! | `.cta` (`fence_acq_rel_cta`) | the writer's block | `.cta` (fence) | its block (its rank, for a wider release) |
//! | `.gpu` (`GpuAtomic*`, `fence_*_gpu`) | the writer's rank | `.gpu` | its rank |
//! | `.sys` (`SysAtomic*`, signals, `fence_*_sys`) | every rank | `.sys` | every rank |
//!
//! so a `.cta` fence before a signal that another block or rank waits on, or a `.gpu` release that another
//! rank acquires, leaves the reader's later reads unordered, and they are reported. The emulator's store
//! buffers (`emu::weak`) make the same mistakes show as stale data where the checker is off, scopes
//! included: a release makes its thread's stores visible to the threads of its scope only (`emu::veil`),
//! so a reader outside it may read the old values whatever it acquired. The acquire's scope is the
//! checker's alone: the data does not show an acquire narrower than the release it reads.
//!
//! Tracked accesses are the device library's: puts and gets (every variant; a cooperative copy is checked
//! and recorded whole for the thread that speaks for its group, and sampled at each other thread's
//! position), `PeerSlice::read`, `PeerSliceMut::read`, `PeerSliceMut::write` into another rank's copy (a put,
//! element by element), taking `SymSliceMut::local_slice`/`local_slice_mut` (a read of the whole copy for
//! as long as the slice lives, as its contract says: take it after the wait), taking `SymSlice::local` (a
//! kernel input's copy, read whole: every put into it must be ordered before the launch, and the next put
//! after it), and a host proxy's copy and
//! signal for a descriptor a kernel pushed into a host queue, as the pusher's put with signal ([`Issued`]).
//! A rank's writes into its own copy (the owner preparing data is not a put), plain loads and stores through
//! raw pointers, and LL packets (which carry their own flags) are not tracked.
//!
//! Launches of one team share a [`History`] (the host runtime's emulated teams keep one for their life):
//! the shadow and the publications outlive a launch, and a launch's clocks know which ends of earlier
//! launches its rank's stream and the host had seen, so ordering across launches is checked too: a
//! `ready` handshake that does not order a put after the receiver's earlier kernels, a wait at the end of
//! a kernel that does not order a put before the receiver's next kernels (see [`history`]).
//!
//! All of it exists only in host builds; the GPU's code paths have none of it. Set `FERROCOMM_EMU_CHECK=0`
//! to run without it.

mod atomics;
mod clock;
mod epochs;
mod history;
mod queues;
mod report;
mod shadow;
mod source;

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) use atomics::Place;
pub use atomics::{AtomicOp, Scope};
pub(crate) use clock::{Clock, Deposit, join_deposits};
pub(crate) use history::History;
pub use queues::{QueueLayout, WatchedQueues, watch_host_queues};
use report::Finding;
pub(crate) use report::{Geometry, record_panic};
pub use shadow::Access;

use super::block::lock;
use super::thread::{self, ThreadState};
use super::weak;
use atomics::{Pub, SyncVar};
use clock::{Layout, Stamp, ThreadClock, join_into};
use epochs::PadLogs;
use ferrocomm_abi::{ErrorBuffer, ErrorKind, RawSym, SourceCheck, ThreadRef};
use shadow::Conflict;
use source::{Overwrite, PendingPut};

/// Hashes an address (or a line index) with a multiplication: the checker's maps are keyed by addresses
/// of one launch, which need no protection against crafted keys, and are looked up on every tracked access.
#[derive(Debug, Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        // The high bits mixed into the low ones: aligned addresses have zero low bits.
        let h = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

/// A map keyed by address.
pub(crate) type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

/// The checker's state of one team launch, shared by every thread of every rank.
#[derive(Debug)]
pub(crate) struct Checker {
    geometry: Geometry,
    world: u32,
    /// What this team's launches share.
    history: Arc<History>,
    layout: Layout,
    /// The ends the host knew when it queued the launch.
    host: Vec<u32>,
    /// Per rank: what its threads know at start, once its grid started.
    starts: Vec<Mutex<Option<Clock>>>,
    /// Per rank: what its threads knew at their ends, joined (what the rank knows at its end).
    ends: Vec<Mutex<Option<Clock>>>,
    /// Per rank: its error buffer (where findings about its threads go), once its launch started.
    errors: Vec<AtomicUsize>,
    pads: Mutex<PadLogs>,
    /// Waits on signals that timed out: (rank, signal address).
    timeouts: Mutex<Vec<(u32, u64)>>,
    /// (reader, writer) pairs already reported, as (launch, id) of each.
    races: Mutex<HashSet<[u32; 4]>>,
    /// Each rank's own copies of its symmetric buffers: `(start, end, rank)`.
    own_copies: Mutex<Vec<(usize, usize, u32)>>,
    /// Findings recorded so far in this launch (the first [`PRINTED_FINDINGS`] are printed).
    recorded: AtomicUsize,
}

/// Findings of one team launch said on stderr; the rest are counted in one line when the launch ends (the
/// records, and the host's error, hold them all).
const PRINTED_FINDINGS: usize = 8;

/// What the checker keeps per emulated thread.
#[derive(Debug)]
pub(crate) struct ThreadCheck {
    pub(crate) clock: ThreadClock,
    /// The clock and scope of this thread's last release fence: a relaxed write after it publishes it.
    pub(crate) fence_clock: Option<(Clock, Scope)>,
    /// Publications seen by relaxed reads since the last acquire fence, which joins those in its scope.
    pending: Vec<Pub>,
    nbi: Vec<PendingPut>,
    syncvars: AddrMap<Arc<SyncVar>>,
    /// Per atomic address, the version of its publications this thread acquired last (polls skip joining
    /// them again).
    acquired: AddrMap<u64>,
    /// Per atomic address, the largest value this thread read there with acquire (a host queue's `tail`:
    /// how far the thread knows the consumer has read, see `queues`).
    acquired_values: AddrMap<u64>,
    /// The signal a `Signal::wait` of this thread is polling.
    signal_wait: Option<u64>,
}

impl ThreadCheck {
    /// A relaxed read saw a value published as `p`: an acquire fence later synchronises with it.
    pub(crate) fn note_relaxed_read(&mut self, p: &Pub) {
        if self.pending.iter().any(|q| Arc::ptr_eq(&q.clock, &p.clock)) {
            return;
        }
        if self.pending.len() >= 16 {
            // Bounded: fold what was seen so far into one clock per scope and writer.
            for q in std::mem::take(&mut self.pending) {
                atomics::add_pub(&mut self.pending, q);
            }
        }
        atomics::add_pub(&mut self.pending, p.clone());
    }
}

impl Checker {
    /// The checker of the next launch of the team of `history`, shaped as `geometry`.
    pub(crate) fn new(geometry: Geometry, history: Arc<History>) -> Checker {
        let world = history.world();
        let (launch, host) = history.begin(geometry);
        let fine = u32::try_from(geometry.ids(world)).unwrap_or(u32::MAX);
        let layout = Layout { launch, fine, rank_threads: geometry.rank_threads, alone: geometry.alone };
        Checker {
            geometry,
            world,
            history,
            layout,
            host,
            starts: (0..world).map(|_| Mutex::new(None)).collect(),
            ends: (0..world).map(|_| Mutex::new(None)).collect(),
            errors: (0..world).map(|_| AtomicUsize::new(0)).collect(),
            pads: Mutex::new(PadLogs::default()),
            timeouts: Mutex::new(Vec::new()),
            races: Mutex::new(HashSet::new()),
            own_copies: Mutex::new(Vec::new()),
            recorded: AtomicUsize::new(0),
        }
    }

    /// The shape of the launch.
    pub(crate) fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Rank `rank` starts, with its error buffer at `errors`.
    pub(crate) fn rank_started(&self, rank: u32, errors: *mut ErrorBuffer) {
        if let Some(slot) = self.errors.get(rank as usize) {
            slot.store(errors as usize, Ordering::Release);
        }
        if let Some(start) = self.starts.get(rank as usize) {
            *lock(start) = Some(self.layout.clock_of_ends(&self.history.start(rank, &self.host)));
        }
    }

    /// Rank `rank`'s grid has ended: its pads' epochs are read, and its stream, and the accesses it knew
    /// of, remember it.
    pub(crate) fn rank_ended(&self, rank: u32) {
        // SAFETY: the pads are kernel arguments, live until the host sees the launch end.
        unsafe { lock(&self.pads).rank_ended(rank) };
        let Some(known) = self.ends.get(rank as usize).and_then(|e| lock(e).take()) else {
            // No thread ran (the launch failed to start): nothing new is known.
            return;
        };
        let fine = self.layout.fine as usize;
        let others_known =
            known.iter().take(fine).enumerate().any(|(gid, &e)| e > 0 && self.layout.rank_of(gid as u32) != rank);
        self.history.rank_ended(self.layout.launch, rank, &known, fine, others_known);
    }

    fn errors_of(&self, rank: u32) -> *mut ErrorBuffer {
        self.errors.get(rank as usize).map_or(0, |e| e.load(Ordering::Acquire)) as *mut ErrorBuffer
    }

    /// The state of a new thread of rank `rank` with id `gid`.
    pub(crate) fn thread(&self, rank: u32, gid: u32) -> ThreadCheck {
        let start = self.starts.get(rank as usize).and_then(|s| lock(s).clone());
        let start = start.unwrap_or_else(|| self.layout.clock_of_ends(&vec![0; self.world as usize]));
        ThreadCheck {
            clock: ThreadClock::new(gid, self.layout, &start),
            fence_clock: None,
            pending: Vec::new(),
            nbi: Vec::new(),
            syncvars: AddrMap::default(),
            acquired: AddrMap::default(),
            acquired_values: AddrMap::default(),
            signal_wait: None,
        }
    }

    fn syncvar(&self, tc: &mut ThreadCheck, addr: usize) -> Arc<SyncVar> {
        let global = || Arc::clone(lock(&self.history.syncvars).entry(addr).or_default());
        Arc::clone(tc.syncvars.entry(addr).or_insert_with(global))
    }

    /// Writes `f` into its rank's error buffer and, when it had room, says so on stderr with what the record
    /// cannot hold (the other party's source location).
    fn report(&self, f: &Finding, detail: &str) {
        if !f.write(self.errors_of(f.who.rank)) || self.recorded.fetch_add(1, Ordering::Relaxed) >= PRINTED_FINDINGS {
            return;
        }
        let at = f.loc.map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column())).unwrap_or_default();
        eprintln!(
            "emulator checker: {:?} on rank {} block {:?} thread {:?}{at}: {detail}",
            f.kind, f.who.rank, f.who.block, f.who.thread
        );
    }

    /// The thread a stamp names (of whichever launch made it).
    fn who(&self, s: &Stamp) -> ThreadRef {
        let geometry =
            if s.launch == self.layout.launch { Some(self.geometry) } else { self.history.geometry(s.launch) };
        geometry.map_or(ThreadRef { rank: s.rank, block: [0; 3], thread: [0; 3] }, |g| g.thread(s.gid))
    }

    /// Reports `c`. A read with no ordering to a write is a `Race` of the reader (whichever came first in
    /// the launch, the reader's fix is to wait); a write with no ordering to a read of an earlier launch is
    /// an `UnorderedPut` of the writer (its fix is to wait for the reader's rank).
    fn report_race(&self, c: &Conflict) {
        let key = [c.reader.launch, c.reader.gid, c.writer.launch, c.writer.gid];
        if !lock(&self.races).insert(key) {
            return;
        }
        let late_write = c.reader.launch != self.layout.launch;
        let (kind, mine, other, what) = if late_write {
            (ErrorKind::UnorderedPut, &c.writer, &c.reader, "wrote")
        } else {
            (ErrorKind::Race, &c.reader, &c.writer, "read")
        };
        let them = self.who(other);
        let (expected, observed) = them.pack();
        let f = Finding {
            kind,
            who: self.who(mine),
            signal: c.addr as u64,
            expected,
            observed,
            cmp: u32::try_from(c.bytes).unwrap_or(u32::MAX),
            loc: Some(mine.loc),
        };
        let theirs = if late_write { "read" } else { "write" };
        let when = if other.launch == self.layout.launch {
            String::new()
        } else {
            format!(" in launch {} of the team (this is launch {})", other.launch, self.layout.launch)
        };
        let l = other.loc;
        let detail = format!(
            "{what} {} byte(s) at {:#x} not ordered after the {theirs} of rank {} block {:?} thread {:?} at {}:{}:{}{when}",
            c.bytes,
            c.addr,
            them.rank,
            them.block,
            them.thread,
            l.file(),
            l.line(),
            l.column()
        );
        self.report(&f, &detail);
    }

    fn report_overwrite(&self, who: u32, o: &Overwrite, when: SourceCheck) {
        let f = Finding {
            kind: ErrorKind::SourceOverwritten,
            who: self.geometry.thread(who),
            signal: o.addr as u64,
            expected: o.dst as u64,
            observed: o.src as u64,
            cmp: when as u32,
            loc: Some(o.loc),
        };
        let detail = format!("source byte {:#x} of the put to {:#x} changed before the put completed", o.addr, o.dst);
        self.report(&f, &detail);
    }

    /// Ends the launch once every rank's grid has finished: relabels timeouts on signals nobody raised and
    /// compares the pads' epochs. `trapped[r]`: rank `r`'s launch trapped.
    pub(crate) fn finish(&self, trapped: &[bool]) {
        let errors: Vec<*mut ErrorBuffer> = (0..self.world).map(|r| self.errors_of(r)).collect();
        // SAFETY: every rank's launch has ended: nothing writes the buffers, and the host still holds them.
        let failed: Vec<bool> = (0..self.world as usize)
            .map(|r| trapped.get(r).copied().unwrap_or(false) || unsafe { report::has_failure(errors[r]) })
            .collect();
        let whole_team = self.geometry.alone.is_none();
        if whole_team {
            let syncvars = lock(&self.history.syncvars);
            for &(rank, addr) in lock(&self.timeouts).iter() {
                if !syncvars.get(&(addr as usize)).is_some_and(|v| v.written_in(self.layout.launch)) {
                    // SAFETY: as above.
                    unsafe { report::mark_unraised(errors[rank as usize], addr) };
                }
            }
        }
        // SAFETY: the pads are kernel arguments, live until the host sees the launch end; no kernel runs.
        let findings = unsafe { lock(&self.pads).findings(&self.geometry, self.world, &failed) };
        for f in findings {
            let scope = if f.cmp == ferrocomm_abi::MismatchScope::Ranks as u32 { "rank" } else { "block" };
            let detail = format!(
                "this {scope} advanced the signal pad at {:#x} {} time(s), the others {}",
                f.signal, f.observed, f.expected
            );
            self.report(&f, &detail);
        }
        let recorded = self.recorded.load(Ordering::Relaxed);
        if recorded > PRINTED_FINDINGS {
            eprintln!("emulator checker: {} more finding(s) of this launch not printed", recorded - PRINTED_FINDINGS);
        }
    }
}

/// Runs `f` with the current emulated thread's checker state; `None` outside a checked launch.
fn with<R>(f: impl FnOnce(&Checker, &ThreadState, &mut ThreadCheck) -> R) -> Option<R> {
    let t = thread::try_current()?;
    let checker = t.launch.checker()?;
    let mut tc = t.check.as_ref()?.borrow_mut();
    Some(f(checker, &t, &mut tc))
}

/// Where thread `t` is, as scopes see it.
pub(crate) fn place(t: &ThreadState) -> Place {
    Place { rank: t.launch.ctx.rank, block: t.linear_block }
}

fn releases(o: Ordering) -> bool {
    matches!(o, Ordering::Release | Ordering::AcqRel | Ordering::SeqCst)
}

fn acquires(o: Ordering) -> bool {
    matches!(o, Ordering::Acquire | Ordering::AcqRel | Ordering::SeqCst)
}

/// An atomic access `op` of scope `scope` to the `size_of::<T>()` bytes at `addr`, performed by `f`: the
/// thread's store buffer drains as the access needs (its stores become visible to the release's scope
/// before a release, the same bytes reach memory before a read-modify-write) or forwards the thread's own
/// buffered value to a load, and a veil may show a load an older value (see `emu::veil`); then the checker
/// follows it.
#[inline]
pub fn atomic<T>(addr: usize, op: AtomicOp, scope: Scope, f: impl FnOnce() -> T) -> T
where
    T: Copy + Into<u64> + TryFrom<u64>,
{
    let Some(t) = thread::try_current() else { return f() };
    t.pauses.at_point();
    let width = std::mem::size_of::<T>();
    let acquire = match op {
        AtomicOp::Load(o) | AtomicOp::Rmw(o) => acquires(o),
        AtomicOp::Cas { success, failure, .. } => acquires(success) || acquires(failure),
        AtomicOp::Store(_) => false,
    };
    match op {
        AtomicOp::Load(_) => {
            if let Some(v) = weak::forward(&t, addr, width).and_then(|v| T::try_from(v).ok()) {
                // The thread reads its own store, not yet visible to others: nothing to synchronise with.
                return v;
            }
            if let Some(v) = weak::veiled(&t, addr, width).and_then(|v| T::try_from(v).ok()) {
                // A value older than memory's, whose publication the checker no longer holds: the reader
                // learns nothing from it (it polls again, or reads unordered).
                if acquire {
                    weak::acquired(&t);
                }
                return v;
            }
        }
        AtomicOp::Store(o) | AtomicOp::Rmw(o) | AtomicOp::Cas { success: o, .. } if releases(o) => {
            if scope != Scope::Cta {
                t.pauses.before_wide_release();
            }
            weak::release(&t, scope);
            weak::before_rmw(&t, addr, width);
        }
        AtomicOp::Store(_) => weak::at_point(&t),
        AtomicOp::Rmw(_) | AtomicOp::Cas { .. } => {
            weak::before_rmw(&t, addr, width);
            weak::at_point(&t);
        }
    }
    if !matches!(op, AtomicOp::Load(_)) {
        weak::before_write(&t, addr, width);
    }
    let v = match (t.launch.checker(), t.check.as_ref()) {
        (Some(checker), Some(cell)) => {
            let mut tc = cell.borrow_mut();
            let var = checker.syncvar(&mut tc, addr);
            let v = var.run(&mut tc, (addr, scope, place(&t)), op, f);
            if acquire && matches!(op, AtomicOp::Load(_)) {
                let seen = tc.acquired_values.entry(addr).or_default();
                *seen = (*seen).max(v.into());
            }
            v
        }
        _ => f(),
    };
    if acquire {
        weak::acquired(&t);
    }
    v
}

/// A store of scope `scope` and ordering `o` of `value` (`width` bytes) at `addr`, performed by `f` when it
/// goes to memory now: a relaxed one waits in the thread's store buffer (see `emu::weak`) when buffering is
/// on.
#[inline]
pub fn atomic_store(addr: usize, width: usize, value: u64, o: Ordering, scope: Scope, f: impl FnOnce()) {
    if o == Ordering::Relaxed {
        let buffered = thread::with_current(|t| {
            t.pauses.at_point();
            weak::atomic_store(t, addr, width, value, scope)
        });
        match buffered {
            Some(true) => return,
            Some(false) => {}
            None => return f(),
        }
        // Unbuffered: as any other store (its pause is taken).
        let Some(t) = thread::try_current() else { return f() };
        let (Some(checker), Some(cell)) = (t.launch.checker(), t.check.as_ref()) else { return f() };
        let mut tc = cell.borrow_mut();
        let var = checker.syncvar(&mut tc, addr);
        var.run(&mut tc, (addr, scope, place(&t)), AtomicOp::Store(o), || {
            f();
            0u64
        });
        return;
    }
    atomic(addr, AtomicOp::Store(o), scope, || {
        f();
        0u64
    });
}

/// A relaxed atomic store of scope `scope` by `t` at `addr` reaches memory (`f` writes it) after waiting in
/// its store buffer: the checker publishes it now, with the clock of the thread's last release fence, which
/// has not changed since the store was issued (a fence drains the buffer first).
pub(crate) fn drained_store(t: &ThreadState, addr: usize, scope: Scope, f: impl FnOnce()) {
    let (Some(checker), Some(cell)) = (t.launch.checker(), t.check.as_ref()) else { return f() };
    let mut tc = cell.borrow_mut();
    let var = checker.syncvar(&mut tc, addr);
    var.run(&mut tc, (addr, scope, place(t)), AtomicOp::Store(Ordering::Relaxed), || {
        f();
        0u64
    });
}

/// An acquire-release fence of scope `scope`: the thread's buffered stores become visible to the scope
/// first; a system-scope one also completes this thread's non-blocking puts.
pub fn fence(scope: Scope) {
    if let Some(t) = thread::try_current() {
        if scope != Scope::Cta {
            t.pauses.before_wide_release();
        }
        weak::fence(&t, scope);
    }
    with(|checker, t, tc| {
        let me = place(t);
        let mut pending = std::mem::take(&mut tc.pending);
        pending.retain(|p| {
            let reaches = p.reaches(scope, me);
            if reaches {
                tc.clock.acquire_from(&p.layout, &p.clock);
            }
            !reaches
        });
        tc.pending = pending;
        tc.fence_clock = Some((tc.clock.release(), scope));
        if scope == Scope::Sys {
            for p in std::mem::take(&mut tc.nbi) {
                if let Some(o) = p.changed() {
                    checker.report_overwrite(tc.clock.gid(), &o, SourceCheck::AtQuiet);
                }
            }
        }
    });
}

/// A tracked access by this thread alone of `bytes` bytes at `addr`, from `loc`.
pub fn access(addr: usize, bytes: usize, kind: Access, loc: &'static Location<'static>) {
    if kind == Access::Read {
        // A weak read (its stores go to the thread's own variable) or a slice read with plain loads: the
        // thread's own buffered stores to these bytes reach memory, and none that follow are buffered.
        weak::before_plain_read(addr, bytes);
        weak::announce_private();
    }
    track(&[(addr, kind)], bytes, (0, 1), loc);
}

/// `SymSlice::local` of `bytes` bytes at `addr`: a read of a kernel input through plain loads, which no
/// rank writes during the launch. Thread 0 of each block checks and records the whole copy (a later put
/// into it must be ordered after the block's read); the block's other threads check 16 bytes at their own
/// position, as a cooperative copy's lanes do, so thousands of threads taking the slice cost little more
/// than one.
pub fn input_read(addr: usize, bytes: usize, loc: &'static Location<'static>) {
    let Some(t) = thread::try_current() else { return };
    let lane = (t.linear_tid as usize, t.block_dim.iter().product::<u32>() as usize);
    drop(t);
    weak::before_plain_read(addr, bytes);
    weak::announce_private();
    track(&[(addr, Access::Read)], bytes, lane, loc);
}

/// The tracked accesses of one copy of `bytes` bytes (its source read, its destination written), by lane
/// `lane` of the `lanes` threads that share it. The first lane, which speaks for the group, checks and
/// records the whole ranges; each other lane checks the 16 bytes at its own position in them, so the group
/// samples the ranges evenly: a thread that copies without being ordered after a put into them is found
/// at the cost of one check.
pub fn copy(
    accesses: &[(usize, Access)],
    bytes: usize,
    (lane, lanes): (usize, usize),
    loc: &'static Location<'static>,
) {
    // The store buffer buffers the copy's stores when it writes a destination in global memory (a put);
    // a get's destination is the thread's own and is read with plain loads, so its stores are not.
    match accesses.iter().find(|(_, kind)| *kind == Access::Write) {
        Some(&(addr, _)) => weak::announce_destination(addr, bytes),
        None => weak::announce_private(),
    }
    track(accesses, bytes, (lane, lanes), loc);
}

/// A bulk copy (TMA) read or wrote these ranges just now, as issued at `loc`: tracked like a put by one
/// thread. Its bytes move outside the store buffer, as the async proxy's do.
pub(crate) fn bulk(accesses: &[(usize, Access)], bytes: usize, loc: &'static Location<'static>) {
    track(accesses, bytes, (0, 1), loc);
}

/// The checker's part of [`copy`].
fn track(accesses: &[(usize, Access)], bytes: usize, (lane, lanes): (usize, usize), loc: &'static Location<'static>) {
    with(|checker, t, tc| {
        let mut out = Vec::new();
        let (start, len) = if lane == 0 {
            (0, bytes)
        } else {
            let at = (bytes / lanes.max(1)).saturating_mul(lane).min(bytes);
            (at, (bytes - at).min(16))
        };
        for &(addr, kind) in accesses {
            let lo = addr.saturating_add(start);
            let me = (&tc.clock, t.launch.ctx.rank);
            checker.history.shadow.access(lo, lo.saturating_add(len), me, loc, kind, lane == 0, &mut out);
        }
        for c in &out {
            checker.report_race(c);
        }
    });
}

/// A weak write of `bytes` bytes at `addr` (`PeerSliceMut::write`): tracked like a put, unless it writes the
/// writer's own copy (the owner preparing its data is not a put; races inside a rank are not looked for).
pub fn weak_write(addr: usize, bytes: usize, loc: &'static Location<'static>) {
    weak::announce_destination(addr, bytes);
    let own = with(|checker, t, _| {
        let rank = t.launch.ctx.rank;
        lock(&checker.own_copies).iter().any(|&(lo, hi, r)| r == rank && lo <= addr && addr < hi)
    });
    if own == Some(false) {
        access(addr, bytes, Access::Write, loc);
    }
}

/// `start..start + bytes` is the current rank's own copy of a symmetric buffer (a `SymSliceMut` argument).
pub fn own_copy(start: usize, bytes: usize) {
    with(|checker, t, _| {
        let entry = (start, start + bytes, t.launch.ctx.rank);
        let mut own = lock(&checker.own_copies);
        if bytes != 0 && !own.contains(&entry) {
            own.push(entry);
        }
    });
}

/// A non-blocking put of `bytes` bytes from `src` to `dst`, issued at `loc`, starts.
///
/// # Safety
///
/// `src..src + bytes` stays live for the launch (the put's source).
pub unsafe fn put_started(src: usize, dst: usize, bytes: usize, loc: &'static Location<'static>) {
    with(|_, _, tc| {
        // SAFETY: the caller's contract.
        tc.nbi.push(unsafe { PendingPut::start(src, dst, bytes, loc) });
    });
}

/// The thread ends; `clean`: it was not ended by a trap.
pub(crate) fn thread_ended(t: &ThreadState, clean: bool) {
    let (Some(checker), Some(cell)) = (t.launch.checker(), t.check.as_ref()) else { return };
    let mut tc = cell.borrow_mut();
    for p in std::mem::take(&mut tc.nbi) {
        if clean && let Some(o) = p.changed() {
            checker.report_overwrite(tc.clock.gid(), &o, SourceCheck::AtThreadEnd);
        }
    }
    if let Some(end) = checker.ends.get(t.launch.ctx.rank as usize) {
        let mut end = lock(end);
        match end.as_mut() {
            Some(known) => join_into(known, &tc.clock.current()),
            None => *end = Some(tc.clock.current()),
        }
    }
}

/// What this thread brings to a block barrier or `sync_warp`.
pub(crate) fn deposit(t: &ThreadState) -> Option<Deposit> {
    Some(t.check.as_ref()?.borrow().clock.deposit())
}

/// This thread leaves a barrier whose participants' clocks were joined into `joined`.
pub(crate) fn leave_barrier(t: &ThreadState, joined: Option<Clock>) {
    if let (Some(cell), Some(joined)) = (t.check.as_ref(), joined) {
        cell.borrow_mut().clock.leave_barrier(&joined);
    }
}

/// A `Signal::wait` polling `addr`; ends with the value's drop.
#[derive(Debug)]
pub struct SignalWait(());

impl SignalWait {
    /// The calling thread starts waiting on the signal at `addr`.
    pub fn begin(addr: u64) -> SignalWait {
        thread::with_current(weak::wait_begins);
        with(|_, _, tc| tc.signal_wait = Some(addr));
        SignalWait(())
    }
}

impl Drop for SignalWait {
    fn drop(&mut self) {
        with(|_, _, tc| tc.signal_wait = None);
        thread::with_current(|t| t.pauses.after_wait());
    }
}

/// A wait polling `addr` timed out (a signal wait, or an LL read).
pub fn timed_out(addr: u64) {
    with(|checker, t, tc| {
        if tc.signal_wait == Some(addr) {
            lock(&checker.timeouts).push((t.launch.ctx.rank, addr));
        }
    });
}

/// The thread uses the signal pad `raw`: reads its epoch, or (`advance`) calls `advance_epoch` there.
///
/// # Safety
///
/// `raw` describes a live signal pad of the launch's team (`SignalPad::from_raw`'s contract).
pub unsafe fn pad(raw: &RawSym<u64>, advance: Option<&'static Location<'static>>) {
    with(|checker, t, _| {
        let blocks = t.grid_dim.iter().product::<u32>();
        // SAFETY: the caller's contract.
        unsafe {
            lock(&checker.pads).touch(
                raw,
                checker.world,
                blocks,
                t.launch.ctx.rank,
                t.linear_block,
                t.linear_tid == 0,
                advance,
            )
        };
    });
}

/// A descriptor a kernel thread pushed into a host queue (`ferrocomm_device::queue`), as the checker saw
/// the push: a host proxy that serves it copies and signals on the pusher's behalf, as NVSHMEM's proxy does,
/// so its copy is the pusher's put — stamped with the thread's epoch at the push — and its signal is a
/// release of what the thread knew then. A kernel that waits on the signal (with acquire) knows the copy;
/// one that reads the copy's destination without it is a race, as for a GPU-initiated put.
#[derive(Debug)]
pub struct Issued {
    session: Arc<super::team::Session>,
    clock: ThreadClock,
    rank: u32,
    place: Place,
    loc: &'static Location<'static>,
}

/// Descriptors pushed and not yet taken by a proxy, by slot address.
static ISSUED: Mutex<AddrMap<Issued>> = Mutex::new(HashMap::with_hasher(BuildHasherDefault::new()));

/// The calling thread pushed a descriptor into the queue slot at `slot` (before it publishes the slot).
#[track_caller]
pub fn queued(slot: usize) {
    let loc = Location::caller();
    if let Some((head, tail, depth)) = queues::ring_of(slot) {
        let unordered = with(|_, t, tc| {
            // The descriptor pushed is the `head`-th: what the thread last wrote there, buffered or not.
            // SAFETY: a watched ring's `head` is an aligned `u64` of live memory (`watch_host_queues`).
            let pushed = weak::forward(t, head, 8)
                .unwrap_or_else(|| unsafe { &*(head as *const std::sync::atomic::AtomicU64) }.load(Ordering::Relaxed));
            let needed = (pushed + 1).saturating_sub(depth);
            let known = tc.acquired_values.get(&tail).copied().unwrap_or(0);
            (known < needed).then_some((pushed, needed, known))
        });
        if let Some(Some((pushed, needed, known))) = unordered {
            panic!(
                "host queue: descriptor {pushed} written into slot {} (of {depth}) before this thread acquired the \
                 consumer's tail at {needed}, which frees the slot of descriptor {}: the consumer may still be \
                 reading it (the most this thread acquired is {known}); wait for the tail with acquire \
                 (Signal::wait_ge) before reusing a slot",
                pushed % depth,
                pushed - depth,
            );
        }
    }
    let issued = with(|_, t, tc| Issued {
        session: Arc::clone(t.launch.session()),
        clock: tc.clock.clone(),
        rank: t.launch.ctx.rank,
        place: place(t),
        loc,
    });
    // An unchecked push leaves nothing of an earlier push of the slot behind for the proxy to take.
    match issued {
        Some(issued) => lock(&ISSUED).insert(slot, issued),
        None => lock(&ISSUED).remove(&slot),
    };
}

impl Issued {
    /// What the checker saw of the push of the descriptor in the queue slot at `slot`, if a checked
    /// emulated kernel pushed it (the proxy takes it as it pops the slot).
    pub fn take(slot: *const u8) -> Option<Issued> {
        lock(&ISSUED).remove(&(slot as usize))
    }

    /// The proxy copies `bytes` bytes from `src` to `dst` for the pusher (`copy` moves them): the checker
    /// sees the pusher read the source and put into the destination.
    pub fn copy(&self, src: usize, dst: usize, bytes: usize, copy: impl FnOnce()) {
        let Some(checker) = self.session.checker.as_ref() else { return copy() };
        let me = (&self.clock, self.rank);
        let mut out = Vec::new();
        let shadow = &checker.history.shadow;
        shadow.access(src, src.saturating_add(bytes), me, self.loc, Access::Read, true, &mut out);
        shadow.access(dst, dst.saturating_add(bytes), me, self.loc, Access::Write, true, &mut out);
        copy();
        for c in &out {
            checker.report_race(c);
        }
    }

    /// Then raises the signal at `addr` (`store` writes it) with a `.sys` release of what the pusher knew
    /// at the push, its copy included.
    pub fn signal(&self, addr: usize, store: impl FnOnce()) {
        let Some(checker) = self.session.checker.as_ref() else { return store() };
        let var = Arc::clone(lock(&checker.history.syncvars).entry(addr).or_default());
        let p = Pub { scope: Scope::Sys, at: self.place, clock: self.clock.current(), layout: self.clock.layout() };
        var.publish(p, store);
    }
}
