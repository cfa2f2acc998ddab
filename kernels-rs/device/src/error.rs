//! Device error records: what a timed-out wait and the panic handler leave in the rank's error buffer for
//! the host, and how a kernel thread ends afterwards.
//!
//! A record is claimed with an atomic add on `count` (so concurrent errors never share a slot), written,
//! and then published by a release store of `written[i]`, so the host never reads half a record.

use crate::abi::{Cmp, ERROR_CAPACITY, ERROR_FILE_BYTES, ErrorBuffer, ErrorKind, ErrorRecord};
use crate::atomic::{GpuAtomicU32, SysAtomicU32};
use crate::ctx;
use crate::index;

/// What a record says beyond who wrote it.
struct Details<'a> {
    kind: ErrorKind,
    signal: u64,
    expected: u64,
    observed: u64,
    cmp: u32,
    file: &'a str,
    line: u32,
    column: u32,
}

/// The tail of `file` that fits a record, starting on a character boundary.
pub(crate) fn file_tail(file: &str) -> &[u8] {
    let bytes = file.as_bytes();
    if bytes.len() <= ERROR_FILE_BYTES {
        return bytes;
    }
    let mut start = bytes.len() - ERROR_FILE_BYTES;
    while start < bytes.len() && !file.is_char_boundary(start) {
        start += 1;
    }
    &bytes[start..]
}

/// Claims a slot of this rank's error buffer and writes one record into it. Errors beyond the capacity are
/// only counted; without an error buffer nothing is written.
#[inline(never)]
#[cold]
fn record(d: Details<'_>) {
    let errors: *mut ErrorBuffer = ctx::error_buffer();
    if errors.is_null() {
        return;
    }
    // SAFETY: the host keeps the error buffer allocated for the launch; `count` is only accessed atomically.
    let count = unsafe { GpuAtomicU32::from_ptr(&raw mut (*errors).count) };
    let slot = count.fetch_add_relaxed(1) as usize;
    if slot >= ERROR_CAPACITY {
        return;
    }
    let tail = file_tail(d.file);
    let mut file = [0u8; ERROR_FILE_BYTES];
    file[..tail.len()].copy_from_slice(tail);
    let rec = ErrorRecord {
        kind: d.kind as u32,
        rank: ctx::team::rank(),
        block: [index::block_idx_x(), index::block_idx_y(), index::block_idx_z()],
        thread: [index::thread_idx_x(), index::thread_idx_y(), index::thread_idx_z()],
        signal: d.signal,
        expected: d.expected,
        observed: d.observed,
        cmp: d.cmp,
        line: d.line,
        column: d.column,
        file_len: tail.len() as u32,
        file,
    };
    // SAFETY: the slot was claimed by this thread alone (the atomic add above), and the buffer is live.
    unsafe { (&raw mut (*errors).records[slot]).write(rec) };
    // SAFETY: as above; `written` is only accessed atomically during the launch.
    let written = unsafe { SysAtomicU32::from_ptr(&raw mut (*errors).written[slot]) };
    written.store_release(1);
}

/// Records that a wait on the signal at `signal` saw `observed` where it waited for `cmp expected`.
#[inline(never)]
#[cold]
pub(crate) fn record_timeout(
    signal: u64,
    expected: u64,
    observed: u64,
    cmp: Cmp,
    location: &core::panic::Location<'_>,
) {
    record(Details {
        kind: ErrorKind::Timeout,
        signal,
        expected,
        observed,
        cmp: cmp as u32,
        file: location.file(),
        line: location.line(),
        column: location.column(),
    });
}

/// Records a panic at `file:line:column`.
#[cold]
pub(crate) fn record_panic(file: &str, line: u32, column: u32) {
    record(Details { kind: ErrorKind::Panic, signal: 0, expected: 0, observed: 0, cmp: 0, file, line, column });
}

/// Ends the calling thread cleanly (PTX `exit`): the kernel's other threads go on, the launch completes, and
/// the context stays usable. In the emulator the thread unwinds to the launch, which ends it silently.
#[inline(always)]
pub fn exit_thread() -> ! {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: `exit` ends the thread; nothing after it runs.
        unsafe { core::arch::asm!("exit;", options(noreturn, nostack)) }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::emu::exit_thread()
    }
}

/// Aborts the whole kernel (PTX `trap`): the launch fails and the CUDA context cannot be used any more.
/// For bugs only; the panic handler calls it after recording the panic.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` aborts the kernel; nothing after it runs.
    unsafe { core::arch::asm!("trap;", options(noreturn, nostack)) }
}

/// A panic in device code (bounds check, `unwrap`, `panic!`): record where, then trap.
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    match info.location() {
        Some(l) => record_panic(l.file(), l.line(), l.column()),
        None => record_panic("", 0, 0),
    }
    trap()
}

#[cfg(test)]
mod tests {
    use super::file_tail;
    use crate::abi::ERROR_FILE_BYTES;

    #[test]
    fn long_file_names_keep_their_tail_on_a_char_boundary() {
        assert_eq!(file_tail("src/lib.rs"), b"src/lib.rs");
        let long = format!("{}é/kernel.rs", "a".repeat(ERROR_FILE_BYTES));
        let tail = std::str::from_utf8(file_tail(&long)).unwrap();
        assert!(tail.ends_with("/kernel.rs") && tail.len() <= ERROR_FILE_BYTES, "{tail}");
        // "é" is two bytes: a cut inside it moves forward to the next character.
        let cut = format!("{}é{}", "a".repeat(10), "b".repeat(ERROR_FILE_BYTES - 1));
        let tail = std::str::from_utf8(file_tail(&cut)).unwrap();
        assert_eq!(tail, "b".repeat(ERROR_FILE_BYTES - 1));
    }
}
