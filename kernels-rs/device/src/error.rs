//! Device error records: what a timed-out wait, an aborted wait and the panic handler leave in the rank's
//! error buffer for the host, and how a kernel thread ends afterwards.
//!
//! A record is claimed with an atomic add on `count` (so concurrent errors never share a slot), written,
//! and then published by a release store of `written[i]`, so the host never reads half a record.
//!
//! A panic is an error, not a crash: the handler records it (location and, where the message has no
//! format arguments, the message), raises the team's abort word on every rank (see
//! [`ErrorBuffer`]) and ends its thread with PTX `exit`. Waits that see the word
//! end their threads too, so the launch ends promptly on every rank, the CUDA context stays usable, and the
//! host reports a typed `KernelPanic`.

use crate::abi::{
    Cmp, ERROR_CAPACITY, ERROR_FILE_BYTES, ERROR_KIND_SLOTS, ERROR_MESSAGE_BYTES, ErrorBuffer, ErrorKind, ErrorRecord,
    file_tail, message_head,
};
#[cfg(target_arch = "nvptx64")]
use crate::atomic::GpuAtomicU64;
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
    message: &'a str,
    origin: u32,
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
    let kind = d.kind as usize;
    if kind < ERROR_KIND_SLOTS {
        // SAFETY: as above; the counters are only accessed atomically during the launch.
        unsafe { GpuAtomicU32::from_ptr(&raw mut (*errors).kinds[kind]) }.fetch_add_relaxed(1);
    }
    if slot >= ERROR_CAPACITY {
        return;
    }
    let tail = file_tail(d.file);
    let mut file = [0u8; ERROR_FILE_BYTES];
    file[..tail.len()].copy_from_slice(tail);
    let head = message_head(d.message);
    let mut message = [0u8; ERROR_MESSAGE_BYTES];
    message[..head.len()].copy_from_slice(head);
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
        message_len: head.len() as u32,
        origin: d.origin,
        message,
    };
    // SAFETY: the slot was claimed by this thread alone (the atomic add above), and the buffer is live.
    unsafe { (&raw mut (*errors).records[slot]).write(rec) };
    // SAFETY: as above; `written` is only accessed atomically during the launch.
    let written = unsafe { SysAtomicU32::from_ptr(&raw mut (*errors).written[slot]) };
    written.store_release(1);
}

/// Records how a wait at `location` on the signal at `signal` (for `cmp expected`, last seen `observed`)
/// ended: `kind` is `Timeout`, or `Aborted` by rank `origin - 1`. Inlined into both, so each calls
/// [`record`] itself, as before.
#[inline(always)]
fn record_wait(
    kind: ErrorKind,
    (signal, expected, observed, cmp): (u64, u64, u64, Cmp),
    origin: u32,
    location: &core::panic::Location<'_>,
) {
    record(Details {
        kind,
        signal,
        expected,
        observed,
        cmp: cmp as u32,
        file: location.file(),
        line: location.line(),
        column: location.column(),
        message: "",
        origin,
    });
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
    record_wait(ErrorKind::Timeout, (signal, expected, observed, cmp), 0, location);
}

/// Records a panic at `file:line:column` with `message`, then raises the team's abort word on every rank,
/// so every wait of the launch ends instead of timing out. The caller ends the thread. (In the emulator, the
/// thread unwinds and the emulator writes the same record: `ferrocomm_emu::lower` is the one way into it.)
#[cfg(target_arch = "nvptx64")]
#[cold]
fn record_panic(file: &str, line: u32, column: u32, message: &str) {
    record(Details {
        kind: ErrorKind::Panic,
        signal: 0,
        expected: 0,
        observed: 0,
        cmp: 0,
        file,
        line,
        column,
        message,
        origin: 0,
    });
    raise_abort();
}

/// Stores this rank + 1 into every rank's abort word (nothing when the team has none).
#[cfg(target_arch = "nvptx64")]
#[cold]
#[inline(never)]
fn raise_abort() {
    let errors: *mut ErrorBuffer = ctx::error_buffer();
    if errors.is_null() {
        return;
    }
    // SAFETY: the host keeps the error buffer allocated for the launch and writes this field only between
    // launches.
    let peers = unsafe { core::ptr::read_volatile(&raw const (*errors).abort_peers) } as usize as *const u64;
    if peers.is_null() {
        return;
    }
    let origin = ctx::team::rank() + 1;
    for rank in 0..ctx::team::world() as usize {
        // SAFETY: the host's table has `world` entries.
        let addr = unsafe { peers.add(rank).read() } as usize as *mut u32;
        // In a team with NVSHMEM a peer on another node has no address here (stores cannot reach it): its
        // waits end by their timeout instead.
        if addr.is_null() {
            continue;
        }
        // SAFETY: the address of a rank's live abort word, which is only accessed atomically while kernels run.
        let word = unsafe { SysAtomicU32::from_ptr(addr) };
        word.store_relaxed(origin);
    }
}

/// The address of this rank's abort word as [`abort_word`] last read it from the error buffer, with bit 0
/// set once it was read (an abort word is 4-byte aligned, and a team without one caches the null address as
/// 1). A global of the module: each rank of a team loads its own instance of the module, after the host has
/// written the address into that rank's error buffer, and the host never changes it while the team lives,
/// so the copy never goes stale.
#[cfg(target_arch = "nvptx64")]
static mut ABORT_WORD_CACHE: u64 = 0;

/// This rank's abort word, read once when a wait turns to its slow path (null: the team has none).
///
/// Its address is in the error buffer, which the CUDA backend keeps in pinned host memory: a read of it
/// crosses PCIe, and when every thread waiting in a launch turned to its back-off at about the same time
/// those reads held each wait up by tens of microseconds — on one H200, a 32 MiB `put_signal` took 90 µs
/// instead of 27, its receivers stalled there long after the data had landed. So on the GPU the first read
/// in a module instance is copied into `ABORT_WORD_CACHE` (device memory, an L2 hit afterwards) and every
/// later wait of every launch takes the copy; only the first wait of the instance to back off reads the
/// host's buffer.
#[cold]
#[inline(never)]
pub(crate) fn abort_word() -> *mut u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: a global of this module instance (device memory), only ever accessed atomically.
        let cache = unsafe { GpuAtomicU64::from_ptr(&raw mut ABORT_WORD_CACHE) };
        let cached = cache.load_relaxed();
        if cached != 0 {
            return (cached & !1) as usize as *mut u32;
        }
        let word = abort_word_of_buffer();
        // Racing first readers store the same value.
        cache.store_relaxed(word as usize as u64 | 1);
        word
    }
    #[cfg(not(target_arch = "nvptx64"))]
    abort_word_of_buffer()
}

/// This rank's abort word as the error buffer gives it (null: no buffer, or the team has no word).
#[inline(always)]
fn abort_word_of_buffer() -> *mut u32 {
    let errors: *mut ErrorBuffer = ctx::error_buffer();
    if errors.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: as in `raise_abort`.
    unsafe { core::ptr::read_volatile(&raw const (*errors).abort_local) as usize as *mut u32 }
}

/// Whether the team's abort word `word` (from [`abort_word`]) was raised: the raising rank + 1, or 0.
#[inline(always)]
pub(crate) fn abort_raised(word: *mut u32) -> u32 {
    if word.is_null() {
        return 0;
    }
    // SAFETY: the host keeps the word allocated while the team lives; it is only accessed atomically.
    unsafe { SysAtomicU32::from_ptr(word) }.load_relaxed()
}

/// Records that the wait on the signal at `signal` (for `cmp expected`, last seen `observed`) ended because
/// rank `origin - 1` raised the team's abort word, then ends the thread.
#[cold]
#[inline(never)]
pub(crate) fn aborted(
    signal: u64,
    expected: u64,
    observed: u64,
    cmp: Cmp,
    origin: u32,
    location: &core::panic::Location<'_>,
) -> ! {
    record_wait(ErrorKind::Aborted, (signal, expected, observed, cmp), origin, location);
    exit_thread()
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
        crate::lower::exit_thread()
    }
}

/// Aborts the whole kernel (PTX `trap`): the launch fails and the CUDA context cannot be used any more (the
/// process must restart to use that GPU again). Nothing in this library calls it: a panic ends its thread
/// and the team's waits instead (see the module docs).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` aborts the kernel; nothing after it runs.
    unsafe { core::arch::asm!("trap;", options(noreturn, nostack)) }
}

/// A panic in device code (bounds check, `unwrap`, `assert!`, `panic!`): record where and why, raise the
/// team's abort word, and end the thread (PTX `exit`). The message is kept when it is a literal (`.as_str()`:
/// no format arguments); formatting one on the GPU would pull `core::fmt` into every module, so a message
/// with arguments is recorded as [`FORMATTED_MESSAGE`](crate::abi::FORMATTED_MESSAGE).
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let message = info.message().as_str().unwrap_or(crate::abi::FORMATTED_MESSAGE);
    match info.location() {
        Some(l) => record_panic(l.file(), l.line(), l.column(), message),
        None => record_panic("", 0, 0, message),
    }
    exit_thread()
}
