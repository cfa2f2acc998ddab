//! The emulator's TMA: bulk copies that happen as late as the hardware may let them. A bulk load's bytes
//! land when a thread waits on the phase of the mbarrier it completes on; a bulk store group reads its
//! shared-memory source at `wait_group.read` and writes its destination at `wait_group` (or reads and
//! writes both at `wait_group` when no read-wait came first). So a stage refilled before its store read
//! it, or data published before its store completed, shows as wrong bytes, as it may on a GPU.
//!
//! Barriers belong to the block (any of its threads may arrive or wait); bulk groups to the thread that
//! issued them. The copies move 8-byte relaxed atomics, like every other emulated access, and tell the
//! checker what they read and wrote when they do.

use std::collections::{HashMap, VecDeque};
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::block::lock;
use super::check::{self, Access};
use super::thread;

/// One bulk copy, issued at `loc`.
#[derive(Debug, Clone, Copy)]
struct Copy {
    dst: usize,
    src: usize,
    bytes: usize,
    loc: &'static Location<'static>,
}

impl Copy {
    #[track_caller]
    fn new(dst: usize, src: usize, bytes: u32, loc: &'static Location<'static>) -> Copy {
        let bytes = bytes as usize;
        // The TMA faults on these; the emulator says why.
        assert!(
            bytes.is_multiple_of(16) && dst.is_multiple_of(16) && src.is_multiple_of(16),
            "bulk copy of {bytes} bytes from {src:#x} to {dst:#x} at {loc}: TMA needs 16-byte aligned addresses and \
             a size that is a multiple of 16"
        );
        Copy { dst, src, bytes, loc }
    }

    /// The source's words, as the copy reads them now.
    fn read(&self) -> Vec<u64> {
        (0..self.bytes / 8)
            // SAFETY: the issuer guaranteed a valid, aligned source range (the intrinsic's contract).
            .map(|i| unsafe { AtomicU64::from_ptr((self.src + 8 * i) as *mut u64) }.load(Relaxed))
            .collect()
    }

    /// Writes `words` (read from the source earlier) to the destination.
    fn write(&self, words: &[u64]) {
        for (i, &w) in words.iter().enumerate() {
            // SAFETY: the issuer guaranteed a valid, aligned destination range (the intrinsic's contract).
            unsafe { AtomicU64::from_ptr((self.dst + 8 * i) as *mut u64) }.store(w, Relaxed);
        }
    }
}

/// One mbarrier of a block: the arrivals its current phase still needs, the transaction bytes it expects,
/// and the bulk loads that complete on it.
#[derive(Debug)]
struct Barrier {
    count: u32,
    arrivals_left: u32,
    phase: u32,
    expected_tx: u64,
    loads: Vec<Copy>,
}

/// A block's mbarriers, by shared-memory address.
#[derive(Debug, Default)]
pub(crate) struct Barriers(std::sync::Mutex<HashMap<usize, Barrier>>);

/// A committed bulk group: its stores, and their sources' words once a read-wait took them.
#[derive(Debug)]
struct Group {
    copies: Vec<Copy>,
    read: Option<Vec<Vec<u64>>>,
}

/// A thread's bulk stores: the open group and the committed ones, oldest first.
#[derive(Debug, Default)]
pub(crate) struct StoreGroups {
    open: Vec<Copy>,
    committed: VecDeque<Group>,
}

impl StoreGroups {
    /// Where a store still in flight was issued, if one is.
    pub(crate) fn in_flight(&self) -> Option<&'static Location<'static>> {
        self.open.first().or_else(|| self.committed.iter().flat_map(|g| g.copies.first()).next()).map(|c| c.loc)
    }
}

/// Runs `f` on the current block's barriers.
fn with_barriers<R>(f: impl FnOnce(&mut HashMap<usize, Barrier>) -> R) -> R {
    let t = thread::current();
    let mut bars = lock(&t.block.bulk_barriers.0);
    f(&mut bars)
}

#[track_caller]
fn barrier(bars: &mut HashMap<usize, Barrier>, bar: usize) -> &mut Barrier {
    match bars.get_mut(&bar) {
        Some(b) => b,
        None => panic!("mbarrier at shared address {bar:#x} used before `mbarrier_init`"),
    }
}

pub(crate) fn mbarrier_init(bar: usize, count: u32) {
    assert!(count > 0, "an mbarrier needs at least one arrival per phase");
    with_barriers(|bars| {
        bars.insert(bar, Barrier { count, arrivals_left: count, phase: 0, expected_tx: 0, loads: Vec::new() })
    });
}

#[track_caller]
pub(crate) fn mbarrier_arrive_expect_tx(bar: usize, bytes: u32) {
    with_barriers(|bars| {
        let b = barrier(bars, bar);
        assert!(b.arrivals_left > 0, "mbarrier at {bar:#x}: more arrivals than its count in one phase");
        b.arrivals_left -= 1;
        b.expected_tx += u64::from(bytes);
    });
}

#[track_caller]
pub(crate) fn bulk_load(dst: usize, src: usize, bytes: u32, bar: usize, loc: &'static Location<'static>) {
    let copy = Copy::new(dst, src, bytes, loc);
    with_barriers(|bars| barrier(bars, bar).loads.push(copy));
}

/// Completes the phase of `bar` with parity `parity` if it can (every arrival made): its loads land now,
/// and must have brought exactly the bytes the arrivals expected (else the GPU's phase never completes).
#[track_caller]
pub(crate) fn mbarrier_try_wait_parity(bar: usize, parity: u32) -> bool {
    let done = with_barriers(|bars| {
        let b = barrier(bars, bar);
        if b.phase & 1 != parity & 1 {
            return Some(Vec::new());
        }
        if b.arrivals_left > 0 {
            return None;
        }
        let loads = std::mem::take(&mut b.loads);
        let brought: u64 = loads.iter().map(|c| c.bytes as u64).sum();
        assert_eq!(
            brought, b.expected_tx,
            "mbarrier at {bar:#x}: its loads bring {brought} bytes but its arrivals expect {}: the phase would never \
             complete on a GPU",
            b.expected_tx
        );
        b.phase += 1;
        b.arrivals_left = b.count;
        b.expected_tx = 0;
        Some(loads)
    });
    match done {
        Some(loads) => {
            for c in loads {
                check::bulk(&[(c.src, Access::Read)], c.bytes, c.loc);
                c.write(&c.read());
            }
            true
        }
        None => {
            // Another thread's arrival is due; let it run.
            super::exit_if_trapped();
            std::thread::yield_now();
            false
        }
    }
}

#[track_caller]
pub(crate) fn bulk_store(dst: usize, src: usize, bytes: u32, loc: &'static Location<'static>) {
    let copy = Copy::new(dst, src, bytes, loc);
    thread::current().bulk.borrow_mut().open.push(copy);
}

pub(crate) fn bulk_commit() {
    let t = thread::current();
    let mut groups = t.bulk.borrow_mut();
    let copies = std::mem::take(&mut groups.open);
    groups.committed.push_back(Group { copies, read: None });
}

/// `wait_group{.read} keep`: every committed group but the newest `keep` reads its sources now (if it has
/// not yet); with `complete`, it also writes its destinations and is done.
pub(crate) fn bulk_wait(keep: usize, complete: bool) {
    let t = thread::current();
    let mut groups = t.bulk.borrow_mut();
    let older = groups.committed.len().saturating_sub(keep);
    for g in groups.committed.iter_mut().take(older) {
        if g.read.is_none() {
            g.read = Some(g.copies.iter().map(Copy::read).collect());
        }
    }
    if complete {
        let done: Vec<Group> = groups.committed.drain(..older).collect();
        drop(groups);
        for g in done {
            for (c, words) in g.copies.iter().zip(g.read.iter().flatten()) {
                c.write(words);
                check::bulk(&[(c.dst, Access::Write)], c.bytes, c.loc);
            }
        }
    }
}
