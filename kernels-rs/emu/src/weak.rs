//! The emulator's weak memory: stores that become visible to other threads late and out of order.
//!
//! The host is strongly ordered (x86 is TSO), so a kernel that forgot a release or a barrier would read the
//! right data there every time. To show what a GPU may show, every emulated thread keeps a **store
//! buffer**: its weak stores (the destinations of puts and `PeerSliceMut::write`s, LL packet stores) and
//! its relaxed atomic stores go into the buffer instead of memory, and reach memory later:
//!
//! | event of the thread | what leaves its buffer |
//! | --- | --- |
//! | a `.sys` release store or read-modify-write, a `.sys` fence (`acq_rel` or `sc`) | everything, oldest first, before the event, to every thread; and the veils it could have observed lift |
//! | a `.gpu` release or fence | everything, oldest first, visible to the threads of its rank only; veils of its block it could have observed widen to its rank |
//! | a `.cta` fence, `sync_threads`, `sync_warp` | everything, oldest first, visible to the threads of its block only |
//! | a warp shuffle (where the lane may wait for the others) | everything, in random order, visible to its block |
//! | a read-modify-write or a load of a different width that overlaps a buffered store | the overlapping stores, to every thread |
//! | more than [`CAPACITY`] buffered stores | the oldest, to every thread |
//! | the thread's end (exit, timeout, trap) | everything, to every thread |
//! | seeded random points: its buffered stores, its atomics and weak loads while it holds stores, `nanosleep` | a random subset, in random order, to every thread |
//!
//! A store visible to a block or a rank only is in memory with a **veil** ([`veil`]): a tracked load by a
//! thread outside that scope reads the value it replaced, until a `.sys` release of a thread that could have
//! observed it, the end of its rank's grid, a newer write of its bytes, or a seeded random read from
//! outside lifts it. So two relaxed stores to different addresses may become visible in either order, and
//! a reader that polls a relaxed flag can see the flag before the data; a release makes its thread's
//! stores visible to its scope first, so an acquire that reads a release-published value sees everything
//! the releaser had stored before it (and, through barriers, what its block had) when the reader is inside
//! the release's scope — and may read stale data when it is not: a release narrowed from `.sys` to `.gpu`
//! or `.cta` shows in the data. What a thread could have observed is what was visible to it at its last
//! acquire (a load or read-modify-write with acquire, a fence, a barrier), which covers every chain of
//! releases and acquires (PTX's cumulativity): a barrier and then thread 0's `.sys` signal publish the
//! whole block's stores. Per address the buffer is coherent: a store to an address already buffered with
//! the same width replaces it, an overlapping store of another width drains the old one first, and the
//! thread's own weak and atomic loads read its buffered value (store forwarding).
//!
//! Which stores are buffered: weak stores inside the destination the device library announced last (a put's
//! or `PeerSliceMut::write`'s range; a `get` or a weak read announces none, so a copy into the thread's own
//! memory is never buffered and its plain reads see it at once), LL packet stores, and relaxed atomic
//! stores. Of a long destination only the stores into its last `CAPACITY * 16 * threads-per-block` bytes
//! are: a thread's earlier stores of the copy would have drained as the oldest by then anyway, so they go
//! to memory at once and a mebibyte put costs little more than without buffers. Taking `SymSliceMut::local_slice`/`local_slice_mut` drains the thread's stores into the copy
//! first, so its plain reads of it see them. Plain Rust loads and stores through raw pointers bypass the
//! buffer: a kernel that weakly stores through the library and then reads the same bytes through a raw
//! pointer in the same thread, with no library call between, would read its own stale value (no kernel of
//! the library does).
//!
//! The random decisions come from a stream per emulated thread seeded by the launch's schedule seed (see
//! [`schedule`](super::schedule)), so `FERROCOMM_EMU_SEED` replays them with the pauses. They are drawn
//! at the thread's own events, so a thread whose sequence of events does not depend on other threads (no
//! polls of another thread's flag) makes the same decisions for the same seed; a poll loop draws once per
//! poll, and how many polls it takes is up to the host's scheduler. `FERROCOMM_EMU_WEAK=0` turns the
//! buffers off (every store goes to memory at once, visible to every thread, as before).

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering::Relaxed};

use super::check::{self, Scope};
use super::thread::{self, ThreadState};
use super::veil::{self, Veils, Within};

/// The environment variable that turns the store buffers off (`0`, `off` or `false`).
pub const WEAK_VARIABLE: &str = "FERROCOMM_EMU_WEAK";

/// Most stores one thread keeps buffered; one more drains the oldest.
pub const CAPACITY: usize = 16;

/// Whether launches buffer stores unless told otherwise: yes, unless `FERROCOMM_EMU_WEAK` is `0`, `off` or
/// `false`.
pub(crate) fn enabled_by_default() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !matches!(std::env::var(WEAK_VARIABLE).as_deref().map(str::trim), Ok("0" | "off" | "false")))
}

/// One buffered store of `width` bytes (1, 2, 4 or 8) at `addr`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: usize,
    width: usize,
    value: u64,
    /// `Some(scope)`: a relaxed atomic store of that scope, which the checker learns of when it drains.
    atomic: Option<Scope>,
}

impl Entry {
    fn overlaps(&self, lo: usize, hi: usize) -> bool {
        self.addr < hi && lo < self.addr + self.width
    }
}

/// One emulated thread's store buffer and the stream of its random decisions.
#[derive(Debug)]
pub(crate) struct StoreBuffer {
    on: bool,
    entries: RefCell<Vec<Entry>>,
    rng: Cell<u64>,
    /// The destination the library announced last (`lo..hi`): weak stores inside it are buffered.
    window: Cell<(usize, usize)>,
    /// Bytes at the end of a destination whose stores are buffered: a thread of a block of `n` threads
    /// copying its share holds at most its last [`CAPACITY`] stores of up to 16 bytes, `n * 16` bytes apart,
    /// so earlier ones would have been drained as the oldest anyway and go to memory at once.
    tail: usize,
    /// The launch's veil sequence at the thread's last acquire: the veils it may have observed.
    seen: Cell<u64>,
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl StoreBuffer {
    /// The buffer of thread `linear_tid` of block `linear_block` (of `block_threads`) of `rank` in a launch
    /// of `seed`: its own stream, apart from the thread's pauses.
    pub(crate) fn new(on: bool, seed: u64, who: (u32, u32, u32), block_threads: u32) -> StoreBuffer {
        let (rank, linear_block, linear_tid) = who;
        let who = u64::from(rank) << 48 ^ u64::from(linear_block) << 24 ^ u64::from(linear_tid);
        // A salt keeps this stream apart from the pauses drawn from the same seed and indices.
        let state = mix(seed ^ 0x5EED_5708_EB0F_FE25 ^ mix(who.wrapping_add(0x9E37_79B9_7F4A_7C15)));
        let tail = CAPACITY * 16 * block_threads as usize;
        StoreBuffer {
            on,
            entries: RefCell::new(Vec::new()),
            rng: Cell::new(state),
            window: Cell::new((0, 0)),
            tail,
            seen: Cell::new(0),
        }
    }

    fn draw(&self) -> u64 {
        let s = self.rng.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.rng.set(s);
        mix(s)
    }

    fn is_empty(&self) -> bool {
        self.entries.borrow().is_empty()
    }

    /// Announces the destination of the weak stores that follow (`lo == hi`: none).
    fn announce(&self, lo: usize, hi: usize) {
        if self.on {
            self.window.set((lo, hi));
        }
    }

    /// Takes the entries `pick` selects out of the buffer, in buffer order.
    fn take(&self, mut pick: impl FnMut(&Entry) -> bool) -> Vec<Entry> {
        let mut entries = self.entries.borrow_mut();
        let mut taken = Vec::new();
        entries.retain(|e| {
            if pick(e) {
                taken.push(*e);
                false
            } else {
                true
            }
        });
        taken
    }
}

/// Stores `e`'s value in memory.
fn store(e: &Entry) {
    // SAFETY: the address was valid and aligned for `width` bytes when the store was issued, and stays so
    // until the thread ends (memory of the launch), which drains first.
    unsafe {
        match e.width {
            8 => AtomicU64::from_ptr(e.addr as *mut u64).store(e.value, Relaxed),
            4 => AtomicU32::from_ptr(e.addr as *mut u32).store(e.value as u32, Relaxed),
            2 => AtomicU16::from_ptr(e.addr as *mut u16).store(e.value as u16, Relaxed),
            _ => AtomicU8::from_ptr(e.addr as *mut u8).store(e.value as u8, Relaxed),
        }
    }
}

/// The veils of `t`'s team launch.
fn veils(t: &ThreadState) -> &Veils {
    &t.launch.session().veils
}

/// Who `t` is, as veils record their writers.
fn writer(t: &ThreadState) -> u64 {
    veil::writer_id(t.launch.ctx.rank, t.linear_block, t.linear_tid)
}

/// Writes `e` to memory, visible to every thread (through the checker for an atomic store, which
/// publishes it there): the newest value of its bytes, so veils over them lift.
fn write(t: &ThreadState, e: Entry) {
    let store = || {
        veils(t).overwrite(e.addr, e.addr + e.width);
        store(&e);
    };
    match e.atomic {
        Some(scope) => check::drained_store(t, e.addr, scope, store),
        None => store(),
    }
}

/// Writes `e` to memory visible to the threads `within` only (see [`veil`]).
fn reveal(t: &ThreadState, e: Entry, within: Within) {
    let store = || veils(t).publish((e.addr, e.width, e.value), within, writer(t), || store(&e));
    match e.atomic {
        Some(scope) => check::drained_store(t, e.addr, scope, store),
        None => store(),
    }
}

/// A release of `scope` by `t` (a release store or read-modify-write, the release half of a fence; a
/// block barrier or `sync_warp` is one of `.cta`): its buffered stores become visible to the threads of
/// that scope, oldest first — to every thread for `.sys` — and so do the veils it could have observed.
pub(crate) fn release(t: &ThreadState, scope: Scope) {
    if !t.weak.on {
        return;
    }
    let at = check::place(t);
    veils(t).release(scope, at, writer(t), t.weak.seen.get());
    if scope == Scope::Sys {
        drain_all(t);
    } else if !t.weak.is_empty() {
        let within = Within::of(scope, at);
        for e in t.weak.take(|_| true) {
            reveal(t, e, within);
        }
    }
}

/// A wait of `t` begins (a signal wait, an LL read): a late rank's thread pauses there (see
/// [`LateRank`](crate::LateRank)), and its buffered stores reach memory first, as a GPU's do while the
/// thread that made them is stalled (else a peer waiting for them would wait out the pause too).
pub(crate) fn wait_begins(t: &ThreadState) {
    if t.pauses.is_late() {
        drain_all(t);
    }
    t.pauses.before_wait();
}

/// `fence.proxy.async` (generic or `.global`) by `t`, between its generic accesses and the async proxy's:
/// its buffered stores reach memory and the veils it could have observed lift (a release of `.sys`, which
/// shows them to the TMA's reads; wider than the fence, so it may hide a narrow generic release, never
/// invent one), and its completed bulk stores become visible to its block's generic loads.
pub(crate) fn proxy_fence(t: &ThreadState) {
    if !t.weak.on {
        return;
    }
    release(t, Scope::Sys);
    veils(t).proxy_fence(check::place(t), writer(t));
}

/// What the async proxy of `t`'s rank reads of the aligned 8-byte word at `word` if veils decide some of
/// its bytes; `None`: memory.
pub(crate) fn async_read(t: &ThreadState, word: usize) -> Option<u64> {
    veils(t).read_word(word, veil::async_proxy(t.launch.ctx.rank), || t.weak.draw())
}

/// A bulk store of `t` wrote `value` to the 8 bytes at `addr` (`store` writes memory): visible to the async
/// proxy of its rank only, until `t`'s `fence.proxy.async` (see [`proxy_fence`]).
pub(crate) fn async_write(t: &ThreadState, addr: usize, value: u64, store: impl FnOnce()) {
    if !t.weak.on {
        store();
        return;
    }
    veils(t).publish((addr, 8, value), Within::AsyncProxy(t.launch.ctx.rank), writer(t), store);
}

/// `t` acquired (an acquire load or read-modify-write, a fence, a barrier): a release of its own from now
/// on carries what was visible to it so far.
pub(crate) fn acquired(t: &ThreadState) {
    if t.weak.on {
        t.weak.seen.set(veils(t).now());
    }
}

/// A fence of `scope` (`acq_rel` or `sc`) by `t`: an acquire, then a release.
pub(crate) fn fence(t: &ThreadState, scope: Scope) {
    acquired(t);
    release(t, scope);
}

/// Drains every buffered store of `t`, oldest first.
pub(crate) fn drain_all(t: &ThreadState) {
    if t.weak.is_empty() {
        return;
    }
    for e in t.weak.take(|_| true) {
        write(t, e);
    }
}

/// Drains `t`'s buffered stores that overlap `lo..hi`.
fn drain_overlapping(t: &ThreadState, lo: usize, hi: usize) {
    if t.weak.is_empty() {
        return;
    }
    for e in t.weak.take(|e| e.overlaps(lo, hi)) {
        write(t, e);
    }
}

/// A seeded random point: with probability `1 / odds`, a random subset of `t`'s buffered stores (each with
/// probability one half) drains, in random order.
fn random_drain(t: &ThreadState, odds: u64) {
    if t.weak.is_empty() || !t.weak.draw().is_multiple_of(odds) {
        return;
    }
    let chosen = t.weak.take(|_| t.weak.draw() & 1 == 1);
    write_in_random_order(t, chosen);
}

/// Writes `entries` (taken from `t`'s buffer) to memory in an order drawn from `t`'s stream (Fisher-Yates):
/// they become visible in an order of their own.
fn write_in_random_order(t: &ThreadState, mut entries: Vec<Entry>) {
    shuffle(t, &mut entries);
    for e in entries {
        write(t, e);
    }
}

/// Puts `entries` in an order drawn from `t`'s stream (Fisher-Yates).
fn shuffle(t: &ThreadState, entries: &mut [Entry]) {
    for i in (1..entries.len()).rev() {
        let j = (t.weak.draw() % (i as u64 + 1)) as usize;
        entries.swap(i, j);
    }
}

/// Buffers a store of `width` bytes of `value` at `addr` by `t`; `atomic`: a relaxed atomic store.
fn buffer(t: &ThreadState, addr: usize, width: usize, value: u64, atomic: Option<Scope>) {
    let (end, mut overlap) = (addr + width, false);
    {
        let mut entries = t.weak.entries.borrow_mut();
        for e in entries.iter_mut() {
            if e.addr == addr && e.width == width && e.atomic == atomic {
                // The same location again: the newer value replaces the older, which nobody had seen.
                e.value = value;
                drop(entries);
                random_drain(t, 8);
                return;
            }
            overlap |= e.overlaps(addr, end);
        }
    }
    if overlap {
        // Coherence: an older store of another width to these bytes reaches memory first.
        drain_overlapping(t, addr, end);
    }
    let full = {
        let mut entries = t.weak.entries.borrow_mut();
        entries.push(Entry { addr, width, value, atomic });
        (entries.len() > CAPACITY).then(|| entries.remove(0))
    };
    if let Some(e) = full {
        write(t, e);
    }
    random_drain(t, 8);
}

/// A weak store (`GlobalPtr::st_*`) of `width` bytes: buffered, and `true`, when inside the announced
/// destination of a running emulated thread with buffering on; else the caller stores to memory.
#[inline]
pub fn weak_store(addr: usize, width: usize, value: u64) -> bool {
    thread::with_current(|t| {
        let (lo, hi) = t.weak.window.get();
        let inside = t.weak.on && lo <= addr && addr + width <= hi && hi - addr <= t.weak.tail;
        if inside {
            buffer(t, addr, width, value, None);
        } else {
            // The caller stores to memory now: the newest value of these bytes.
            veils(t).overwrite(addr, addr + width);
        }
        inside
    })
    .unwrap_or(false)
}

/// An LL packet's store of one 8-byte half (a relaxed store of data word and flag): buffered, and `true`,
/// in a running emulated thread with buffering on.
#[inline]
pub fn packet_store(addr: usize, value: u64) -> bool {
    thread::with_current(|t| {
        if t.weak.on {
            buffer(t, addr, 8, value, None);
        }
        t.weak.on
    })
    .unwrap_or(false)
}

/// A weak load of `width` bytes at `addr`: `Some` with the thread's own buffered value (forwarding) or the
/// value a veil shows it; `None` when the caller loads from memory (after overlapping stores of other widths
/// drained).
#[inline]
pub fn weak_load(addr: usize, width: usize) -> Option<u64> {
    thread::with_current(|t| forward(t, addr, width).or_else(|| veiled(t, addr, width))).flatten()
}

/// What `t` reads at `addr` if a veil decides it (a store made visible to a scope `t` is outside of shows
/// its old value); `None`: memory.
#[inline]
pub(crate) fn veiled(t: &ThreadState, addr: usize, width: usize) -> Option<u64> {
    let veils = veils(t);
    if !veils.active() {
        return None;
    }
    veils.read(addr, width, check::place(t), || t.weak.draw())
}

/// The thread's own buffered value of the `width` bytes at `addr`, if it holds exactly that store; drains
/// stores that overlap them otherwise. Also a random point while the thread holds stores.
pub(crate) fn forward(t: &ThreadState, addr: usize, width: usize) -> Option<u64> {
    if t.weak.is_empty() {
        return None;
    }
    random_drain(t, 16);
    let (end, mut exact, mut overlap) = (addr + width, None, false);
    for e in t.weak.entries.borrow().iter() {
        if e.addr == addr && e.width == width {
            exact = Some(e.value);
        } else {
            overlap |= e.overlaps(addr, end);
        }
    }
    if overlap {
        drain_overlapping(t, addr, end);
    }
    exact
}

/// A relaxed atomic store of `width` bytes of `value` at `addr`, of scope `scope`: buffered, and `true`, when
/// buffering is on.
pub(crate) fn atomic_store(t: &ThreadState, addr: usize, width: usize, value: u64, scope: Scope) -> bool {
    if t.weak.on {
        buffer(t, addr, width, value, Some(scope));
    }
    t.weak.on
}

/// Before a read-modify-write of `width` bytes at `addr`: the thread's own stores to them reach memory.
pub(crate) fn before_rmw(t: &ThreadState, addr: usize, width: usize) {
    drain_overlapping(t, addr, addr + width);
}

/// Before an atomic store or read-modify-write of `width` bytes at `addr` that goes to memory now: it
/// writes the newest value there, so veils over those bytes lift.
pub(crate) fn before_write(t: &ThreadState, addr: usize, width: usize) {
    veils(t).overwrite(addr, addr + width);
}

/// An atomic access that is only a scheduling point here (a random drain while the thread holds stores).
pub(crate) fn at_point(t: &ThreadState) {
    random_drain(t, 8);
}

/// A warp shuffle, where the thread may wait for its warp's other lanes: every buffered store becomes
/// visible to the thread's block, in random order. A GPU makes a thread's stores visible eventually even
/// while it waits; a buffer that kept them across the wait would hang a lane polling for them (an LL
/// packet another lane of the block wrote). Threads outside the block see them when a veil's seeded
/// random lift or a release lets them.
pub(crate) fn before_shuffle(t: &ThreadState) {
    if t.weak.is_empty() {
        return;
    }
    let mut all = t.weak.take(|_| true);
    shuffle(t, &mut all);
    let within = Within::of(Scope::Cta, check::place(t));
    for e in all {
        reveal(t, e, within);
    }
}

/// `nanosleep`: a sleeping thread's stores drain now and then, so a poll loop never waits on its own
/// buffer.
pub(crate) fn at_sleep(t: &ThreadState) {
    random_drain(t, 2);
}

/// The library announces that the weak stores that follow write `addr..addr + bytes` (a put's destination).
pub(crate) fn announce_destination(addr: usize, bytes: usize) {
    thread::with_current(|t| t.weak.announce(addr, addr.saturating_add(bytes)));
}

/// The library announces that the weak stores that follow are not into global memory (a `get`, a weak read
/// into the thread's own variable): they go to memory at once.
pub(crate) fn announce_private() {
    thread::with_current(|t| t.weak.announce(0, 0));
}

/// The thread is about to read `addr..addr + bytes` with plain loads (a slice of its copy): its own
/// buffered stores there reach memory first.
pub(crate) fn before_plain_read(addr: usize, bytes: usize) {
    thread::with_current(|t| drain_overlapping(t, addr, addr.saturating_add(bytes)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_gives_one_stream_and_the_stream_is_not_the_pauses_one() {
        let a = StoreBuffer::new(true, 7, (1, 2, 3), 32);
        let b = StoreBuffer::new(true, 7, (1, 2, 3), 32);
        let c = StoreBuffer::new(true, 7, (1, 2, 4), 32);
        let stream = |s: &StoreBuffer| (0..8).map(|_| s.draw()).collect::<Vec<u64>>();
        let (xa, xb, xc) = (stream(&a), stream(&b), stream(&c));
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
    }

    #[test]
    fn entries_overlap_by_bytes() {
        let e = Entry { addr: 16, width: 8, value: 0, atomic: None };
        assert!(e.overlaps(16, 17) && e.overlaps(23, 24) && e.overlaps(8, 32));
        assert!(!e.overlaps(24, 32) && !e.overlaps(8, 16));
    }
}
