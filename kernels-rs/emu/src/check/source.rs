//! Sources of non-blocking puts. A put started with `put_nbi` (or its warp and block forms) may read its
//! source until the issuing thread's `quiet()` (any system-scope fence); the emulator copies at once, so it
//! keeps a snapshot of the source and compares at the fence, and at the end of the thread for a put never
//! quieted. A difference means the kernel rewrote the send buffer while the put could still be reading it.
//!
//! The kernel's own stores to the source are plain memory accesses the emulator cannot see, so the check is
//! by content: rewriting a byte with the value it had goes unnoticed, and is harmless.

use std::panic::Location;
use std::sync::atomic::{AtomicU8, Ordering};

/// A non-blocking put that has not reached its thread's `quiet()`.
#[derive(Debug)]
pub(crate) struct PendingPut {
    src: usize,
    dst: usize,
    snapshot: Vec<u8>,
    pub(crate) loc: &'static Location<'static>,
}

/// Where a source was found changed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Overwrite {
    /// The first changed byte.
    pub(crate) addr: usize,
    /// The put's source and destination.
    pub(crate) src: usize,
    pub(crate) dst: usize,
    /// The `put_nbi` call.
    pub(crate) loc: &'static Location<'static>,
}

/// Reads `bytes` bytes at `src` with relaxed byte loads: another thread may be writing them (that is the
/// bug looked for), which must not be undefined behaviour on the host.
///
/// # Safety
///
/// `src..src + bytes` is live memory for the whole launch.
unsafe fn read_bytes(src: usize, bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|i| {
            // SAFETY: in the live range (the caller); every access to it in the emulator is atomic or a plain
            // access of the kernel, which this relaxed load does not make undefined on the host's side.
            unsafe { AtomicU8::from_ptr((src + i) as *mut u8) }.load(Ordering::Relaxed)
        })
        .collect()
}

impl PendingPut {
    /// A put of `bytes` bytes from `src` to `dst` issued at `loc`.
    ///
    /// # Safety
    ///
    /// `src..src + bytes` is live memory for the whole launch (a kernel argument or symmetric buffer).
    pub(crate) unsafe fn start(src: usize, dst: usize, bytes: usize, loc: &'static Location<'static>) -> PendingPut {
        // SAFETY: the caller's contract.
        let snapshot = unsafe { read_bytes(src, bytes) };
        PendingPut { src, dst, snapshot, loc }
    }

    /// The first byte of the source that differs from when the put started, if any.
    pub(crate) fn changed(&self) -> Option<Overwrite> {
        // SAFETY: `start`'s contract keeps the range live for the launch, which is still running.
        let now = unsafe { read_bytes(self.src, self.snapshot.len()) };
        let i = now.iter().zip(&self.snapshot).position(|(a, b)| a != b)?;
        Some(Overwrite { addr: self.src + i, src: self.src, dst: self.dst, loc: self.loc })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_byte_is_found_and_an_unchanged_source_passes() {
        let mut buf = [1u8, 2, 3, 4, 5];
        let src = buf.as_ptr() as usize;
        // SAFETY: `buf` outlives the pending put.
        let p = unsafe { PendingPut::start(src, 0x1000, buf.len(), Location::caller()) };
        assert!(p.changed().is_none());
        std::hint::black_box(&mut buf)[3] = 9;
        let o = p.changed().expect("byte 3 changed");
        assert_eq!((o.addr - src, o.dst), (3, 0x1000));
    }
}
