//! The emulator's TMA: bulk copies that happen as late as the hardware may let them, through an async proxy
//! that sees shared memory only as the threads' proxy fences let it.
//!
//! Lateness: a bulk load's bytes land when a thread waits on the mbarrier it completes on; a bulk store
//! group reads its shared-memory source at `wait_group.read` and writes its destination at `wait_group`
//! (or reads and writes both at `wait_group` when no read-wait came first). So a stage refilled before its
//! store read it, or data published before its store completed, shows as wrong bytes, as it may on a GPU.
//!
//! The async proxy ([`AsyncView`]): a block's shared memory has a second copy, the bytes as bulk stores
//! read them. Bulk loads write both copies; threads' generic stores write only the first. A thread's
//! `fence.proxy.async` (generic, or `.shared::cta`) takes the bytes where the two differ then, and they
//! reach the async proxy's copy for the thread's own later bulk operations at once, and for everyone's at
//! the block's next barrier — the protocol CUTLASS's epilogues follow (every writer fences, the block
//! synchronises, one thread issues the store). A bulk store of bytes a thread wrote without that reads
//! what the async proxy saw last (zero, or an earlier load or fenced write). A fence takes every byte that
//! differs, whoever wrote it: a thread that skips its fence while another fences after its write goes
//! unnoticed.
//!
//! Global memory and the async proxy: a bulk load reads its global source as the async proxy does, from
//! outside every block and rank scope (see `veil`), so a thread's generic store that reached only its
//! block or GPU (a barrier, a `.gpu` release) is not what the copy reads; the writer's
//! `fence.proxy.async.global` (or the generic `fence.proxy.async`) shows it. A bulk store's bytes, once its
//! group completes, are seen by the async proxy only: the issuing thread's proxy fence shows them to its
//! block, and its release after that to whom the release reaches. So a missing proxy fence on either side
//! shows as old bytes, as it may on a GPU.
//!
//! Transaction bytes: an mbarrier's phase completes once its arrivals are made and the bytes its
//! `expect_tx` arrivals announced have landed. Loads land in the order issued when a thread waits; one
//! that brings more than the phase still expects lands only that much, the phase completes with the rest
//! of the load in flight (a waiter reads bytes that have not landed), and the rest counts for the next
//! phase. A phase whose arrivals expect more than its loads bring never completes, as on a GPU: a wait
//! still failing after the launch's timeout ends the launch with a panic that says so.
//!
//! Barriers belong to the block (any of its threads may arrive or wait); bulk groups to the thread that
//! issued them. The copies move relaxed atomics, like every other emulated access, and tell the checker what
//! they read and wrote when they do.

use std::collections::{HashMap, VecDeque};
use std::panic::Location;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};

use super::block::lock;
use super::check::{self, Access};
use super::thread::{self, ThreadState};
use super::weak;

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

    /// The first `n` bytes of the copy, and the rest.
    fn split(self, n: usize) -> (Copy, Copy) {
        let head = Copy { bytes: n, ..self };
        let rest = Copy { dst: self.dst + n, src: self.src + n, bytes: self.bytes - n, ..self };
        (head, rest)
    }
}

/// `n` bytes at `addr`, read as relaxed atomics (whole words where aligned).
fn read_bytes(addr: usize, n: usize, mut word: impl FnMut(usize) -> u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let mut at = addr;
    while at < addr + n {
        if at.is_multiple_of(8) && addr + n - at >= 8 {
            out.extend_from_slice(&word(at).to_le_bytes());
            at += 8;
        } else {
            // SAFETY: inside a range the copy's issuer guaranteed valid (the intrinsic's contract).
            out.push(unsafe { AtomicU8::from_ptr(at as *mut u8) }.load(Relaxed));
            at += 1;
        }
    }
    out
}

/// A word of memory.
fn memory_word(at: usize) -> u64 {
    // SAFETY: an aligned word inside a range the copy's issuer guaranteed valid (the intrinsic's contract).
    unsafe { AtomicU64::from_ptr(at as *mut u64) }.load(Relaxed)
}

/// A bulk store's write of `bytes` at `addr` (16-byte aligned, a multiple of 16 long: whole words), each
/// word visible to the async proxy only until the issuing thread's proxy fence.
fn write_async(t: &ThreadState, addr: usize, bytes: &[u8]) {
    for (i, w) in bytes.chunks_exact(8).enumerate() {
        let at = addr + 8 * i;
        let value = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        // SAFETY: an aligned word inside a range the copy's issuer guaranteed valid.
        weak::async_write(t, at, value, || unsafe { AtomicU64::from_ptr(at as *mut u64) }.store(value, Relaxed));
    }
}

/// Writes `bytes` at `addr` as relaxed atomics (whole words where aligned).
fn write_bytes(addr: usize, bytes: &[u8]) {
    let mut i = 0;
    while i < bytes.len() {
        let at = addr + i;
        if at.is_multiple_of(8) && bytes.len() - i >= 8 {
            let w = u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or([0; 8]));
            // SAFETY: an aligned word inside a range the copy's issuer guaranteed valid.
            unsafe { AtomicU64::from_ptr(at as *mut u64) }.store(w, Relaxed);
            i += 8;
        } else {
            // SAFETY: inside a range the copy's issuer guaranteed valid.
            unsafe { AtomicU8::from_ptr(at as *mut u8) }.store(bytes[i], Relaxed);
            i += 1;
        }
    }
}

/// The async proxy's view of one block's shared memory (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct AsyncView(Mutex<View>);

#[derive(Debug, Default)]
struct View {
    /// Per shared allocation, its start and its bytes as the async proxy sees them; made zeroed (as the
    /// allocation starts) when first needed.
    copies: Vec<(usize, Vec<u8>)>,
    /// Bytes a thread's proxy fence took, not yet visible to other threads' bulk copies: (thread, address,
    /// bytes), oldest first.
    fenced: Vec<(u32, usize, Vec<u8>)>,
}

impl View {
    /// The async proxy's copy of the allocation `region` (start, length).
    fn copy(&mut self, (start, len): (usize, usize)) -> &mut Vec<u8> {
        let i = match self.copies.iter().position(|(s, _)| *s == start) {
            Some(i) => i,
            None => {
                self.copies.push((start, vec![0; len]));
                self.copies.len() - 1
            }
        };
        &mut self.copies[i].1
    }

    /// Writes `bytes` at `addr`, inside the allocation `region`, into the async proxy's copy.
    fn put(&mut self, region: (usize, usize), addr: usize, bytes: &[u8]) {
        let off = addr - region.0;
        self.copy(region)[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// The fenced bytes of the threads `pick` selects reach the async proxy's copy.
    fn apply(&mut self, regions: &[(usize, usize)], mut pick: impl FnMut(u32) -> bool) {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.fenced).into_iter().partition(|f| pick(f.0));
        self.fenced = rest;
        for (_, addr, bytes) in mine {
            if let Some(&r) = regions.iter().find(|r| inside(**r, addr, bytes.len())) {
                self.put(r, addr, &bytes);
            }
        }
    }
}

fn inside((start, len): (usize, usize), addr: usize, n: usize) -> bool {
    start <= addr && addr + n <= start + len
}

impl AsyncView {
    /// A block barrier opened: every thread's fenced bytes reach the async proxy (`regions`: the block's
    /// shared allocations).
    pub(crate) fn barrier_opened(&self, regions: impl FnOnce() -> Vec<(usize, usize)>) {
        let mut v = lock(&self.0);
        if !v.fenced.is_empty() {
            v.apply(&regions(), |_| true);
        }
    }
}

/// `fence.proxy.async` by the current thread: `global`, its generic global stores become visible to the
/// async proxy (bulk loads read them) and its completed bulk stores to its block's generic loads; `shared`,
/// the block's initialised mbarriers become usable by bulk loads, and the bytes of the block's shared memory that the async proxy does not see yet are
/// taken for it.
pub fn proxy_fence(global: bool, shared: bool) {
    let Some(t) = thread::try_current() else { return };
    if global {
        weak::proxy_fence(&t);
    }
    if !shared {
        return;
    }
    for b in lock(&t.block.bulk_barriers.0).values_mut() {
        b.init_seen_by_async_proxy = true;
    }
    let regions = t.block.shared_regions();
    let mut v = lock(&t.block.proxy.0);
    for &region in &regions {
        let generic = read_bytes(region.0, region.1, memory_word);
        let seen = v.copy(region);
        let mut taken = Vec::new();
        let mut i = 0;
        while i < generic.len() {
            if generic[i] == seen[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < generic.len() && generic[i] != seen[i] {
                i += 1;
            }
            taken.push((t.linear_tid, region.0 + start, generic[start..i].to_vec()));
        }
        v.fenced.extend(taken);
    }
}

/// What the async proxy reads at `addr..addr + n` of `t`'s block's shared memory, after `t`'s own fences.
fn read_shared(t: &ThreadState, addr: usize, n: usize) -> Vec<u8> {
    for b in lock(&t.block.bulk_barriers.0).values_mut() {
        b.init_seen_by_async_proxy = true;
    }
    let regions = t.block.shared_regions();
    let mut v = lock(&t.block.proxy.0);
    let me = t.linear_tid;
    v.apply(&regions, |who| who == me);
    match regions.iter().find(|r| inside(**r, addr, n)) {
        Some(&r) => {
            let off = addr - r.0;
            v.copy(r)[off..off + n].to_vec()
        }
        // Not this block's shared memory: what is there.
        None => read_bytes(addr, n, memory_word),
    }
}

/// The async proxy writes `bytes` at `addr` of `t`'s block's shared memory: both views see them.
fn write_shared(t: &ThreadState, addr: usize, bytes: &[u8]) {
    write_bytes(addr, bytes);
    for b in lock(&t.block.bulk_barriers.0).values_mut() {
        b.init_seen_by_async_proxy = true;
    }
    let regions = t.block.shared_regions();
    if let Some(&r) = regions.iter().find(|r| inside(**r, addr, bytes.len())) {
        lock(&t.block.proxy.0).put(r, addr, bytes);
    }
}

/// One mbarrier of a block: the arrivals its current phase still needs, the transaction bytes it still
/// expects, and the bulk loads in flight that complete on it.
#[derive(Debug)]
struct Barrier {
    count: u32,
    arrivals_left: u32,
    phase: u32,
    tx: u64,
    loads: VecDeque<Copy>,
    /// When a wait first found the current phase unable to complete.
    stalled_since: Option<u64>,
    /// Whether a proxy fence of the block (`fence.proxy.async`, generic or `.shared::cta`) came after the
    /// barrier's `mbarrier_init`: until one does, the async proxy may not see the initialisation, and a
    /// bulk load may not complete its transactions on it.
    init_seen_by_async_proxy: bool,
}

/// A block's mbarriers, by shared-memory address.
#[derive(Debug, Default)]
pub(crate) struct Barriers(Mutex<HashMap<usize, Barrier>>);

/// A committed bulk group: its stores, and their sources' bytes once a read-wait took them.
#[derive(Debug)]
struct Group {
    copies: Vec<Copy>,
    read: Option<Vec<Vec<u8>>>,
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

pub fn mbarrier_init(bar: usize, count: u32) {
    assert!(count > 0, "an mbarrier needs at least one arrival per phase");
    with_barriers(|bars| {
        let b = Barrier {
            count,
            arrivals_left: count,
            phase: 0,
            tx: 0,
            loads: VecDeque::new(),
            stalled_since: None,
            init_seen_by_async_proxy: false,
        };
        bars.insert(bar, b)
    });
}

#[track_caller]
pub fn mbarrier_arrive_expect_tx(bar: usize, bytes: u32) {
    with_barriers(|bars| {
        let b = barrier(bars, bar);
        assert!(b.arrivals_left > 0, "mbarrier at {bar:#x}: more arrivals than its count in one phase");
        b.arrivals_left -= 1;
        b.tx += u64::from(bytes);
    });
}

#[track_caller]
pub fn bulk_load(dst: usize, src: usize, bytes: u32, bar: usize, loc: &'static Location<'static>) {
    let copy = Copy::new(dst, src, bytes, loc);
    with_barriers(|bars| {
        let b = barrier(bars, bar);
        assert!(
            b.init_seen_by_async_proxy,
            "bulk load at {loc} completes on the mbarrier at {bar:#x}, whose `mbarrier_init` no proxy fence \
             followed: the TMA may not see it initialised (fence with `fence_proxy_async_shared_cta` after \
             initialising, before the block's barrier)"
        );
        b.loads.push_back(copy)
    });
}

/// What a wait on an mbarrier found.
enum Wait {
    /// The phase completed.
    Done,
    /// Not yet.
    Pending,
    /// Not yet, and not for longer than the launch's timeout: this says why.
    Hung(String),
}

/// Completes the phase of `bar` with parity `parity` if it can: once every arrival is made, the loads in
/// flight land in the order issued until the phase has the bytes its arrivals expect.
#[track_caller]
pub fn mbarrier_try_wait_parity(bar: usize, parity: u32) -> bool {
    let t = thread::current();
    let timeout = t.launch.ctx.timeout_ns;
    let mut landed = Vec::new();
    let wait = {
        let mut bars = lock(&t.block.bulk_barriers.0);
        let b = barrier(&mut bars, bar);
        if b.phase & 1 != parity & 1 {
            Wait::Done
        } else {
            while b.arrivals_left == 0 && b.tx > 0 {
                let Some(c) = b.loads.pop_front() else { break };
                let n = (c.bytes as u64).min(b.tx) as usize;
                let (head, rest) = c.split(n);
                if rest.bytes > 0 {
                    // More than the phase expects: the rest is still in flight when the phase completes.
                    b.loads.push_front(rest);
                }
                b.tx -= n as u64;
                landed.push(head);
            }
            if b.arrivals_left == 0 && b.tx == 0 {
                b.phase += 1;
                b.arrivals_left = b.count;
                b.stalled_since = None;
                Wait::Done
            } else {
                let now = crate::lower::globaltimer_ns();
                let since = *b.stalled_since.get_or_insert(now);
                if now.saturating_sub(since) > timeout {
                    Wait::Hung(format!(
                        "mbarrier at {bar:#x}: phase {} has not completed within the launch's timeout ({timeout} ns): \
                         {} arrival(s) still due, {} transaction byte(s) expected that no bulk load in flight brings \
                         (an `mbarrier_arrive_expect_tx` count larger than its loads?); on a GPU this wait never returns",
                        b.phase, b.arrivals_left, b.tx
                    ))
                } else {
                    Wait::Pending
                }
            }
        }
    };
    for c in landed {
        check::bulk(&[(c.src, Access::Read)], c.bytes, c.loc);
        let bytes = read_bytes(c.src, c.bytes, |at| weak::async_read(&t, at).unwrap_or_else(|| memory_word(at)));
        write_shared(&t, c.dst, &bytes);
    }
    match wait {
        Wait::Done => {
            weak::acquired(&t);
            true
        }
        Wait::Pending => {
            drop(t);
            // Another thread's arrival or load is due; let it run.
            crate::lower::exit_if_trapped();
            std::thread::yield_now();
            false
        }
        Wait::Hung(message) => panic!("{message}"),
    }
}

#[track_caller]
pub fn bulk_store(dst: usize, src: usize, bytes: u32, loc: &'static Location<'static>) {
    let copy = Copy::new(dst, src, bytes, loc);
    let t = thread::current();
    // The thread's own fences come before the store in its program: the async proxy sees what they took.
    for b in lock(&t.block.bulk_barriers.0).values_mut() {
        b.init_seen_by_async_proxy = true;
    }
    let regions = t.block.shared_regions();
    lock(&t.block.proxy.0).apply(&regions, |who| who == t.linear_tid);
    t.bulk.borrow_mut().open.push(copy);
}

pub fn bulk_commit() {
    let t = thread::current();
    let mut groups = t.bulk.borrow_mut();
    let copies = std::mem::take(&mut groups.open);
    groups.committed.push_back(Group { copies, read: None });
}

/// `wait_group{.read} keep`: every committed group but the newest `keep` reads its sources now (if it has
/// not yet), as the async proxy sees them; with `complete`, it also writes its destinations and is done.
pub fn bulk_wait(keep: usize, complete: bool) {
    let t = thread::current();
    let mut groups = t.bulk.borrow_mut();
    let older = groups.committed.len().saturating_sub(keep);
    for g in groups.committed.iter_mut().take(older) {
        if g.read.is_none() {
            g.read = Some(g.copies.iter().map(|c| read_shared(&t, c.src, c.bytes)).collect());
        }
    }
    if complete {
        let done: Vec<Group> = groups.committed.drain(..older).collect();
        drop(groups);
        for g in done {
            for (c, bytes) in g.copies.iter().zip(g.read.iter().flatten()) {
                weak::before_write(&t, c.dst, c.bytes);
                write_async(&t, c.dst, bytes);
                check::bulk(&[(c.dst, Access::Write)], c.bytes, c.loc);
            }
        }
    }
}
