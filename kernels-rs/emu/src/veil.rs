//! Stores that some threads see and others do not yet: what a release narrower than `.sys` leaves behind.
//!
//! A `.cta` release (a `.cta` fence, a block barrier) promises its thread's earlier stores to the threads
//! of its block only, a `.gpu` one to the threads of its GPU (its rank); a thread outside that scope may
//! still read the old values, however it synchronises. The store buffers (see [`weak`](super::weak)) hand
//! such stores here: each is written to memory at once, and a **veil** remembers the value it replaced
//! and who may see the new one. A tracked load (a weak load, an atomic, a bulk copy's global source) by a
//! thread outside the veil's scope reads the old value; threads inside read memory. So a release narrowed
//! from `.sys` to `.gpu` or `.cta` shows in the data a reader outside its scope reads, not only to the
//! checker. Plain loads through raw pointers read memory, the new value: seeing a store early is always
//! allowed.
//!
//! A veil widens or lifts as PTX's cumulativity asks: a release of scope S by a thread carries the stores
//! it could have observed — its own veils and, of the veils visible to it, those made before its last
//! acquire (an acquire load or read-modify-write, a fence, a barrier: every way the checker lets ordering
//! in) — so a `.gpu` release widens them to its rank and a `.sys` release lifts them. Where it cannot tell
//! (a veil visible to the releaser that some other thread of its block made before the releaser's last
//! acquire, which the releaser never synchronised with) it lifts too much, which hides a bug, never
//! invents one.
//!
//! Veils also lift when their rank's grid ends, when a store or read-modify-write through the library
//! writes their bytes (coherence: a newer value), when a read finds memory no longer holding the veiled
//! value (an untracked write replaced it), when a read of other bytes of the word overlaps one, at
//! seeded random reads by a thread outside (a poll sees the value eventually, as on a GPU, whatever the
//! writer does next), and all at once when more than [`LIMIT`] are held.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::block::lock;
use super::check::{AddrMap, Place, Scope};

/// Most veils one team launch holds; one more lifts them all.
pub const LIMIT: usize = 1 << 16;

/// A read by a thread outside a veil's scope lifts it with probability one in this.
const LIFT_ODDS: u64 = 16;

/// The block number of the async proxy's place ([`async_proxy`]): no block of a grid has it.
const ASYNC_PROXY_BLOCK: u32 = u32::MAX;

/// Where the async proxy (the TMA) of rank `rank` reads global memory from: outside every block and rank
/// scope, so it sees a generic store only once the writer's `fence.proxy.async` lifted its veil (or it
/// reached memory unveiled), and sees its own rank's bulk stores.
pub(crate) fn async_proxy(rank: u32) -> Place {
    Place { rank, block: ASYNC_PROXY_BLOCK }
}

/// The threads that see a veiled store's new value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Within {
    /// The writer's block (a `.cta` release).
    Block { rank: u32, block: u32 },
    /// The writer's rank (a `.gpu` release).
    Rank(u32),
    /// The async proxy of the writer's rank only: a bulk store's bytes, which no thread's generic loads
    /// see before the issuing thread's `fence.proxy.async` hands them to its block (see
    /// [`Veils::proxy_fence`]).
    AsyncProxy(u32),
}

impl Within {
    /// The threads a release of `scope` (narrower than `.sys`) by a thread at `at` makes its stores visible to.
    pub(crate) fn of(scope: Scope, at: Place) -> Within {
        match scope {
            Scope::Cta => Within::Block { rank: at.rank, block: at.block },
            _ => Within::Rank(at.rank),
        }
    }

    fn holds(self, at: Place) -> bool {
        if at.block == ASYNC_PROXY_BLOCK {
            return self == Within::AsyncProxy(at.rank);
        }
        match self {
            Within::Block { rank, block } => rank == at.rank && block == at.block,
            Within::Rank(rank) => rank == at.rank,
            Within::AsyncProxy(_) => false,
        }
    }

    fn rank(self) -> u32 {
        match self {
            Within::Block { rank, .. } | Within::Rank(rank) | Within::AsyncProxy(rank) => rank,
        }
    }
}

/// Who made a veil: rank, block and thread packed into one word.
pub(crate) fn writer_id(rank: u32, block: u32, thread: u32) -> u64 {
    u64::from(rank) << 32 | u64::from(block) << 16 | u64::from(thread)
}

/// One store visible inside `within` only: `width` bytes at `addr`, `new` in memory, `old` for the rest.
#[derive(Debug, Clone, Copy)]
struct Veil {
    addr: usize,
    width: usize,
    old: u64,
    new: u64,
    within: Within,
    seq: u64,
}

impl Veil {
    fn overlaps(&self, addr: usize, width: usize) -> bool {
        self.addr < addr + width && addr < self.addr + self.width
    }

    fn is(&self, addr: usize, width: usize) -> bool {
        self.addr == addr && self.width == width
    }
}

/// The veils of one team launch.
#[derive(Debug, Default)]
pub(crate) struct Veils {
    /// How many are held: loads skip the table while it is zero.
    live: AtomicUsize,
    /// The sequence number of the last veil made.
    seq: AtomicU64,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    /// By 8-byte word (every store is at most 8 bytes and aligned to its width), oldest first.
    words: AddrMap<Vec<Veil>>,
    /// Per scope, `(seq, word, writer)` of the veils made or widened into it (some may have lifted since).
    scopes: HashMap<Within, Vec<(u64, usize, u64)>>,
    count: usize,
}

fn load(addr: usize, width: usize) -> u64 {
    // SAFETY: a veiled address was valid and aligned for `width` bytes when its store was issued and stays
    // so while the launch runs; a load of a live address is valid as the tracked access it stands for.
    unsafe {
        match width {
            8 => AtomicU64::from_ptr(addr as *mut u64).load(Ordering::Relaxed),
            4 => u64::from(AtomicU32::from_ptr(addr as *mut u32).load(Ordering::Relaxed)),
            2 => u64::from(AtomicU16::from_ptr(addr as *mut u16).load(Ordering::Relaxed)),
            _ => u64::from(AtomicU8::from_ptr(addr as *mut u8).load(Ordering::Relaxed)),
        }
    }
}

impl Table {
    /// Removes the veils of `word` that `pick` selects.
    fn remove(&mut self, word: usize, mut pick: impl FnMut(&Veil) -> bool) {
        if let Some(list) = self.words.get_mut(&word) {
            let before = list.len();
            list.retain(|v| !pick(v));
            self.count -= before - list.len();
            if list.is_empty() {
                self.words.remove(&word);
            }
        }
    }

    /// Lifts the veil `seq` of `word` and the older ones of the same bytes, which its value replaced.
    fn lift(&mut self, word: usize, seq: u64) {
        let Some(v) = self.words.get(&word).and_then(|l| l.iter().find(|v| v.seq == seq)).copied() else { return };
        self.remove(word, |w| w.is(v.addr, v.width) && w.seq <= seq);
    }
}

impl Veils {
    fn published(&self, t: &Table) {
        self.live.store(t.count, Ordering::Release);
    }

    /// Whether any veil is held.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.live.load(Ordering::Acquire) != 0
    }

    /// The sequence number of the last veil made: what a thread that acquires now may have observed.
    pub(crate) fn now(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// A store of `width` bytes of `value` at `addr` by `writer` becomes visible inside `within`: `store`
    /// writes it to memory, and the value it replaces stays what the other threads read.
    pub(crate) fn publish(
        &self,
        (addr, width, value): (usize, usize, u64),
        within: Within,
        writer: u64,
        store: impl FnOnce(),
    ) {
        let mut t = lock(&self.table);
        let word = addr & !7;
        // Coherence by bytes: veils of other bytes of the word that this store overlaps lift first.
        t.remove(word, |v| v.overlaps(addr, width) && !v.is(addr, width));
        let old = load(addr, width);
        store();
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        t.words.entry(word).or_default().push(Veil { addr, width, old, new: value, within, seq });
        t.scopes.entry(within).or_default().push((seq, word, writer));
        t.count += 1;
        if t.count > LIMIT {
            *t = Table::default();
        }
        self.published(&t);
    }

    /// A release of `scope` by `writer` at `at`, which acquired last when the sequence was at `seen`: the
    /// veils it could have observed widen to `scope` (`.gpu`: to its rank; `.sys`: they lift).
    pub(crate) fn release(&self, scope: Scope, at: Place, writer: u64, seen: u64) {
        if scope == Scope::Cta || !self.active() {
            return;
        }
        let mut t = lock(&self.table);
        let block = Within::Block { rank: at.rank, block: at.block };
        let rank = Within::Rank(at.rank);
        let keys: &[Within] = if scope == Scope::Sys { &[block, rank] } else { &[block] };
        for &key in keys {
            let Some(list) = t.scopes.remove(&key) else { continue };
            let (carried, kept): (Vec<_>, Vec<_>) = list.into_iter().partition(|&(s, _, w)| s <= seen || w == writer);
            if !kept.is_empty() {
                t.scopes.insert(key, kept);
            }
            for (s, word, w) in carried {
                if scope == Scope::Sys {
                    t.lift(word, s);
                } else if let Some(v) = t.words.get_mut(&word).and_then(|l| l.iter_mut().find(|v| v.seq == s)) {
                    v.within = rank;
                    t.scopes.entry(rank).or_default().push((s, word, w));
                }
            }
        }
        self.published(&t);
    }

    /// `fence.proxy.async` by `writer` at `at`: its bulk stores' bytes, which only the async proxy saw, become
    /// visible to its block's generic loads, as if it had stored them and released at `.cta`; a later release
    /// of its own carries them further.
    pub(crate) fn proxy_fence(&self, at: Place, writer: u64) {
        if !self.active() {
            return;
        }
        let mut t = lock(&self.table);
        let key = Within::AsyncProxy(at.rank);
        let Some(list) = t.scopes.remove(&key) else { return };
        let (handed, kept): (Vec<_>, Vec<_>) = list.into_iter().partition(|&(_, _, w)| w == writer);
        if !kept.is_empty() {
            t.scopes.insert(key, kept);
        }
        let block = Within::Block { rank: at.rank, block: at.block };
        for (s, word, w) in handed {
            if let Some(v) = t.words.get_mut(&word).and_then(|l| l.iter_mut().find(|v| v.seq == s)) {
                v.within = block;
                t.scopes.entry(block).or_default().push((s, word, w));
            }
        }
        self.published(&t);
    }

    /// What a tracked load of `width` bytes at `addr` by a thread at `at` reads, if a veil decides it
    /// (`None`: memory); `draw` is the reader's random stream.
    pub(crate) fn read(&self, addr: usize, width: usize, at: Place, draw: impl FnMut() -> u64) -> Option<u64> {
        if !self.active() {
            return None;
        }
        let mut draw = draw;
        let mut t = lock(&self.table);
        let word = addr & !7;
        if !t.words.contains_key(&word) {
            return None;
        }
        // A load of other bytes than a veiled store's sees them as they are: those veils lift.
        t.remove(word, |v| v.overlaps(addr, width) && !v.is(addr, width));
        let list: Vec<Veil> =
            t.words.get(&word).map(|l| l.iter().filter(|v| v.is(addr, width)).copied().collect()).unwrap_or_default();
        if list.is_empty() {
            self.published(&t);
            return None;
        }
        // `None` unless an older value is shown: a reader that sees memory's value (the store is visible to
        // it, or its veil lifts now) reads it as any tracked load does, synchronising with its publication.
        let mut shown = None;
        let mut value = load(addr, width);
        for v in list.iter().rev() {
            if v.new != value {
                // Something newer than this veil's store was written there: it and older ones are moot.
                t.remove(word, |w| w.is(addr, width) && w.seq <= v.seq);
                break;
            }
            if v.within.holds(at) {
                break;
            }
            if draw().is_multiple_of(LIFT_ODDS) {
                // The store becomes visible to everyone now.
                t.lift(word, v.seq);
                break;
            }
            value = v.old;
            shown = Some(value);
        }
        self.published(&t);
        shown
    }

    /// What a reader at `at` sees of the aligned 8-byte word at `word` if veils decide some of its bytes
    /// (`None`: memory), for a reader of whole words over stores of any width (the async proxy's bulk
    /// loads): each veiled store of the word shows its old value as [`read`](Self::read) would show it to a
    /// load of exactly its bytes, without lifting the veils of the word's other bytes.
    pub(crate) fn read_word(&self, word: usize, at: Place, draw: impl FnMut() -> u64) -> Option<u64> {
        if !self.active() {
            return None;
        }
        let stores: Vec<(usize, usize)> = {
            let t = lock(&self.table);
            let list = t.words.get(&word)?;
            let mut stores: Vec<(usize, usize)> = list.iter().map(|v| (v.addr, v.width)).collect();
            stores.sort_unstable();
            stores.dedup();
            stores
        };
        let mut draw = draw;
        let mut bytes = load(word, 8).to_le_bytes();
        let mut shown = false;
        for (addr, width) in stores {
            if let Some(old) = self.read(addr, width, at, &mut draw) {
                let at = addr - word;
                bytes[at..at + width].copy_from_slice(&old.to_le_bytes()[..width]);
                shown = true;
            }
        }
        shown.then(|| u64::from_le_bytes(bytes))
    }

    /// Bytes `lo..hi` are about to be written (or read and written) through the library: veils over them
    /// lift, so the new value is the newest for every reader.
    pub(crate) fn overwrite(&self, lo: usize, hi: usize) {
        if !self.active() {
            return;
        }
        let mut t = lock(&self.table);
        let mut word = lo & !7;
        while word < hi {
            if t.words.contains_key(&word) {
                t.remove(word, |v| v.overlaps(lo, hi - lo));
            }
            word += 8;
        }
        self.published(&t);
    }

    /// Rank `rank`'s grid has ended: its veiled stores are visible to everyone.
    pub(crate) fn rank_ended(&self, rank: u32) {
        if !self.active() {
            return;
        }
        let mut t = lock(&self.table);
        let words: Vec<usize> = t.words.keys().copied().collect();
        for word in words {
            t.remove(word, |v| v.within.rank() == rank);
        }
        t.scopes.retain(|k, _| k.rank() != rank);
        self.published(&t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rank: u32, block: u32) -> Place {
        Place { rank, block }
    }

    #[test]
    fn a_veiled_store_shows_its_old_value_outside_its_scope_only() {
        let word = Box::new(AtomicU64::new(5));
        let addr = word.as_ptr() as usize;
        let veils = Veils::default();
        let within = Within::of(Scope::Cta, at(0, 1));
        veils.publish((addr, 8, 9), within, writer_id(0, 1, 0), || word.store(9, Ordering::Relaxed));
        let never = || 1;
        // Inside the scope the store is memory's value: the load reads it as any load (and synchronises).
        assert_eq!(veils.read(addr, 8, at(0, 1), never), None);
        assert_eq!(veils.read(addr, 8, at(0, 2), never), Some(5));
        assert_eq!(veils.read(addr, 8, at(1, 1), never), Some(5));
        // A `.gpu` release by the writer widens it to its rank.
        veils.release(Scope::Gpu, at(0, 1), writer_id(0, 1, 0), 0);
        assert_eq!(veils.read(addr, 8, at(0, 2), never), None);
        assert_eq!(veils.read(addr, 8, at(1, 1), never), Some(5));
        // A `.sys` release by a thread of the rank that acquired after it lifts it.
        veils.release(Scope::Sys, at(0, 3), writer_id(0, 3, 0), veils.now());
        assert!(!veils.active());
        assert_eq!(veils.read(addr, 8, at(1, 1), never), None);
    }

    #[test]
    fn the_async_proxy_sees_no_block_or_rank_scope_and_its_own_stores_until_a_proxy_fence() {
        let words = Box::new([AtomicU64::new(5), AtomicU64::new(0)]);
        let (a, b) = (words[0].as_ptr() as usize, words[1].as_ptr() as usize);
        let veils = Veils::default();
        let never = || 1;
        // A generic store released to its rank: the rank's threads see it, its async proxy does not.
        veils.publish((a, 8, 9), Within::Rank(0), writer_id(0, 1, 0), || words[0].store(9, Ordering::Relaxed));
        assert_eq!(veils.read(a, 8, at(0, 2), never), None);
        assert_eq!(veils.read_word(a, async_proxy(0), never), Some(5));
        // Half a word veiled: the async proxy's whole-word read shows that half's old bytes only.
        veils.publish((b + 4, 4, 7), Within::Rank(0), 0, || {
            // SAFETY: the upper half of the live, aligned word `b`.
            unsafe { AtomicU32::from_ptr((b + 4) as *mut u32) }.store(7, Ordering::Relaxed)
        });
        assert_eq!(veils.read_word(b, async_proxy(0), never), Some(0));
        // A bulk store by thread 3 of block 1: its rank's async proxy sees it, no thread's loads do, until
        // thread 3's proxy fence hands it to block 1; another thread's fence does not.
        veils.overwrite(a, a + 16);
        veils.publish((a, 8, 11), Within::AsyncProxy(0), writer_id(0, 1, 3), || words[0].store(11, Ordering::Relaxed));
        assert_eq!(veils.read_word(a, async_proxy(0), never), None);
        assert_eq!(veils.read(a, 8, at(0, 1), never), Some(9));
        veils.proxy_fence(at(0, 1), writer_id(0, 1, 4));
        assert_eq!(veils.read(a, 8, at(0, 1), never), Some(9));
        veils.proxy_fence(at(0, 1), writer_id(0, 1, 3));
        assert_eq!(veils.read(a, 8, at(0, 1), never), None);
        assert_eq!(veils.read(a, 8, at(0, 2), never), Some(9));
        // Its release of `.sys` after the fence carries it to everyone.
        veils.release(Scope::Sys, at(0, 1), writer_id(0, 1, 3), 0);
        assert_eq!(veils.read(a, 8, at(1, 0), never), None);
    }

    #[test]
    fn a_release_carries_only_what_its_thread_could_have_observed() {
        let word = Box::new(AtomicU64::new(1));
        let addr = word.as_ptr() as usize;
        let veils = Veils::default();
        let within = Within::of(Scope::Cta, at(0, 0));
        veils.publish((addr, 8, 2), within, writer_id(0, 0, 1), || word.store(2, Ordering::Relaxed));
        // Thread 0 of the block acquired before the veil was made: its release does not carry it.
        veils.release(Scope::Sys, at(0, 0), writer_id(0, 0, 0), 0);
        assert_eq!(veils.read(addr, 8, at(1, 0), || 1), Some(1));
        veils.release(Scope::Sys, at(0, 0), writer_id(0, 0, 0), veils.now());
        assert_eq!(veils.read(addr, 8, at(1, 0), || 1), None);
    }

    #[test]
    fn a_newer_write_or_an_overlapping_read_lifts_a_veil() {
        let word = Box::new(AtomicU64::new(1));
        let addr = word.as_ptr() as usize;
        let veils = Veils::default();
        let within = Within::of(Scope::Gpu, at(0, 0));
        veils.publish((addr, 8, 2), within, 0, || word.store(2, Ordering::Relaxed));
        word.store(3, Ordering::Relaxed);
        assert_eq!(veils.read(addr, 8, at(1, 0), || 1), None);
        assert!(!veils.active());
        veils.publish((addr, 8, 4), within, 0, || word.store(4, Ordering::Relaxed));
        assert_eq!(veils.read(addr, 4, at(1, 0), || 1), None);
        assert!(!veils.active());
    }

    /// A veil that lifts as it is read shows memory's value, and so must not answer for the load: the
    /// reader synchronises with the store's publication as any tracked load does. (Answering with the
    /// new value let a reader acquire a signal without its writer's release, a false race.)
    #[test]
    fn a_veil_lifted_by_the_reader_leaves_the_load_to_memory() {
        let word = Box::new(AtomicU64::new(0));
        let addr = word.as_ptr() as usize;
        let veils = Veils::default();
        let within = Within::of(Scope::Cta, at(0, 0));
        veils.publish((addr, 8, 1), within, writer_id(0, 0, 0), || word.store(1, Ordering::Relaxed));
        let lift = || LIFT_ODDS;
        assert_eq!(veils.read(addr, 8, at(1, 0), lift), None);
        assert!(!veils.active());
    }
}
