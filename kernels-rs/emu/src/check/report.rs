//! The checker's findings as device error records: which thread a checker id is, how a finding fills the
//! record's fields (see `ErrorRecord`), and writing a record into any rank's error buffer the way the
//! device's own records are written (claim a slot with an atomic add, publish with a release store).

use std::panic::Location;
use std::sync::atomic::{AtomicU32, Ordering};

use ferrocomm_abi::{
    ERROR_CAPACITY, ERROR_FILE_BYTES, ERROR_KIND_SLOTS, ErrorBuffer, ErrorKind, ErrorRecord, LaunchCtx, ThreadRef,
    file_tail, message_head,
};

/// The shape of a team launch: how a thread's checker id maps to its rank, block and thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub(crate) grid: [u32; 3],
    pub(crate) block: [u32; 3],
    pub(crate) block_threads: u32,
    pub(crate) rank_threads: u32,
    /// `Some(rank)` when the launch runs one rank of a larger team alone (ids then start at 0 for it).
    pub(crate) alone: Option<u32>,
}

fn unlinear(i: u32, dim: [u32; 3]) -> [u32; 3] {
    [i % dim[0], (i / dim[0]) % dim[1], i / (dim[0] * dim[1])]
}

impl Geometry {
    /// The id of thread `linear_tid` of block `linear_block` on `rank`.
    pub(crate) fn gid(&self, rank: u32, linear_block: u32, linear_tid: u32) -> u32 {
        let slot = if self.alone.is_some() { 0 } else { rank };
        slot * self.rank_threads + linear_block * self.block_threads + linear_tid
    }

    /// The thread with id `gid`.
    pub(crate) fn thread(&self, gid: u32) -> ThreadRef {
        let (slot, local) = (gid / self.rank_threads, gid % self.rank_threads);
        ThreadRef {
            rank: self.alone.unwrap_or(slot),
            block: unlinear(local / self.block_threads, self.grid),
            thread: unlinear(local % self.block_threads, self.block),
        }
    }

    /// The index of block `linear_block`.
    pub(crate) fn block_index(&self, linear_block: u32) -> [u32; 3] {
        unlinear(linear_block, self.grid)
    }

    /// Ids a clock needs entries for.
    pub(crate) fn ids(&self, world: u32) -> usize {
        let ranks = if self.alone.is_some() { 1 } else { world };
        ranks as usize * self.rank_threads as usize
    }
}

/// One finding, in record terms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finding {
    pub(crate) kind: ErrorKind,
    pub(crate) who: ThreadRef,
    pub(crate) signal: u64,
    pub(crate) expected: u64,
    pub(crate) observed: u64,
    pub(crate) cmp: u32,
    pub(crate) loc: Option<&'static Location<'static>>,
}

impl Finding {
    fn record(&self) -> ErrorRecord {
        let (file, line, column) = self.loc.map(|l| (l.file(), l.line(), l.column())).unwrap_or(("", 0, 0));
        let tail = file_tail(file);
        let mut name = [0u8; ERROR_FILE_BYTES];
        name[..tail.len()].copy_from_slice(tail);
        ErrorRecord {
            kind: self.kind as u32,
            rank: self.who.rank,
            block: self.who.block,
            thread: self.who.thread,
            signal: self.signal,
            expected: self.expected,
            observed: self.observed,
            cmp: self.cmp,
            line,
            column,
            file_len: tail.len() as u32,
            file: name,
            ..ErrorRecord::EMPTY
        }
    }

    /// Writes the finding into `errors` (a rank's live error buffer; null: dropped); whether it has room
    /// (further findings are only counted, as further device errors are). Findings are not counted among the
    /// device's errors (`ErrorBuffer::kinds`).
    pub(crate) fn write(&self, errors: *mut ErrorBuffer) -> bool {
        publish(errors, self.record())
    }
}

/// Claims a slot of `errors` (a rank's live error buffer; null: dropped) with an atomic add and publishes
/// `record` in it with a release store, as the device's own records are written; whether it had room.
fn publish(errors: *mut ErrorBuffer, record: ErrorRecord) -> bool {
    if errors.is_null() {
        return false;
    }
    // SAFETY: the host keeps every rank's error buffer allocated for the launch; `count` and `written` are
    // only accessed atomically while kernels run, as the device's own records do.
    let count = unsafe { AtomicU32::from_ptr(&raw mut (*errors).count) };
    let slot = count.fetch_add(1, Ordering::Relaxed) as usize;
    if slot >= ERROR_CAPACITY {
        return false;
    }
    // SAFETY: the slot was claimed by this call alone (the atomic add above), and the buffer is live.
    unsafe { (&raw mut (*errors).records[slot]).write(record) };
    // SAFETY: as above.
    unsafe { AtomicU32::from_ptr(&raw mut (*errors).written[slot]) }.store(1, Ordering::Release);
    true
}

/// Records the panic of thread `who` at `file:line:column` with `message` in its rank's error buffer (`ctx.errors`), counted among
/// the device's errors, then raises the team's abort word on every rank so that every wait of the launch
/// ends: what the device library's panic handler does on a GPU, done here for the thread that unwound.
pub(crate) fn record_panic(ctx: &LaunchCtx, who: ThreadRef, (file, line, column): (&str, u32, u32), message: &str) {
    let errors = ctx.errors;
    if errors.is_null() {
        return;
    }
    let kind = ErrorKind::Panic as usize;
    if kind < ERROR_KIND_SLOTS {
        // SAFETY: as in `publish`; the counters are only accessed atomically during the launch.
        unsafe { AtomicU32::from_ptr(&raw mut (*errors).kinds[kind]) }.fetch_add(1, Ordering::Relaxed);
    }
    let (tail, head) = (file_tail(file), message_head(message));
    let mut record = ErrorRecord {
        kind: ErrorKind::Panic as u32,
        rank: who.rank,
        block: who.block,
        thread: who.thread,
        line,
        column,
        file_len: tail.len() as u32,
        message_len: head.len() as u32,
        ..ErrorRecord::EMPTY
    };
    record.file[..tail.len()].copy_from_slice(tail);
    record.message[..head.len()].copy_from_slice(head);
    publish(errors, record);
    raise_abort(ctx);
}

/// Stores `ctx.rank + 1` into every rank's abort word (nothing when the team has none).
fn raise_abort(ctx: &LaunchCtx) {
    // SAFETY: the host keeps the error buffer allocated for the launch and writes this field only between
    // launches.
    let peers = unsafe { std::ptr::read_volatile(&raw const (*ctx.errors).abort_peers) } as usize as *const u64;
    if peers.is_null() {
        return;
    }
    for rank in 0..ctx.world as usize {
        // SAFETY: the host's table has `world` entries.
        let word = unsafe { peers.add(rank).read() } as usize as *mut u32;
        if word.is_null() {
            continue;
        }
        // SAFETY: a rank's live abort word, only accessed atomically while kernels run.
        unsafe { AtomicU32::from_ptr(word) }.store(ctx.rank + 1, Ordering::Relaxed);
    }
}

/// Rewrites the kind of `errors`' timeout records on `signal` to `UnraisedSignal`.
///
/// # Safety
///
/// `errors` is a live error buffer that no thread writes any more (its rank's launch has ended).
pub(crate) unsafe fn mark_unraised(errors: *mut ErrorBuffer, signal: u64) {
    if errors.is_null() {
        return;
    }
    // SAFETY: the caller's contract: nothing writes the buffer concurrently.
    let buf = unsafe { &mut *errors };
    let n = (buf.count as usize).min(ERROR_CAPACITY);
    for i in 0..n {
        let r = &mut buf.records[i];
        if buf.written[i] != 0 && r.kind == ErrorKind::Timeout as u32 && r.signal == signal {
            r.kind = ErrorKind::UnraisedSignal as u32;
        }
    }
}

/// Whether a rank's buffer holds a timeout, a panic or an aborted wait (its launch did not run to the end
/// everywhere).
///
/// # Safety
///
/// As for [`mark_unraised`].
pub(crate) unsafe fn has_failure(errors: *mut ErrorBuffer) -> bool {
    if errors.is_null() {
        return false;
    }
    // SAFETY: the caller's contract.
    let buf = unsafe { &*errors };
    let n = (buf.count as usize).min(ERROR_CAPACITY);
    buf.count as usize > ERROR_CAPACITY
        || (0..n).any(|i| {
            buf.written[i] != 0
                && matches!(
                    ErrorKind::from_u32(buf.records[i].kind),
                    Some(ErrorKind::Timeout | ErrorKind::Panic | ErrorKind::Aborted)
                )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_to_threads() {
        let g = Geometry { grid: [2, 3, 1], block: [4, 2, 1], block_threads: 8, rank_threads: 48, alone: None };
        let t = g.thread(g.gid(2, 5, 7));
        assert_eq!((t.rank, t.block, t.thread), (2, [1, 2, 0], [3, 1, 0]));
        let alone = Geometry { alone: Some(3), ..g };
        assert_eq!(alone.gid(3, 0, 1), 1);
        assert_eq!(alone.thread(1).rank, 3);
        assert_eq!(alone.ids(4), 48);
    }

    #[test]
    fn thread_refs_pack_into_two_fields() {
        let t = ThreadRef { rank: 7, block: [4095, 3, 2], thread: [1023, 1023, 63] };
        let (a, b) = t.pack();
        assert_eq!(ThreadRef::unpack(a, b), t);
    }

    #[test]
    fn findings_fill_a_record_and_unraised_timeouts_are_relabelled() {
        let mut buf = Box::new(ErrorBuffer::ZEROED);
        let who = ThreadRef { rank: 1, block: [0, 0, 0], thread: [2, 0, 0] };
        let f = Finding { kind: ErrorKind::Timeout, who, signal: 64, expected: 1, observed: 0, cmp: 1, loc: None };
        f.write(&mut *buf);
        Finding { kind: ErrorKind::Race, signal: 8, ..f }.write(&mut *buf);
        // SAFETY: nothing else uses the buffer.
        unsafe { mark_unraised(&mut *buf, 64) };
        let kinds: Vec<_> = buf.written_records().map(|r| (r.error_kind(), r.rank, r.thread)).collect();
        assert_eq!(kinds, [(Some(ErrorKind::UnraisedSignal), 1, [2, 0, 0]), (Some(ErrorKind::Race), 1, [2, 0, 0])]);
        // SAFETY: as above.
        assert!(!unsafe { has_failure(&mut *buf) });
    }
}
