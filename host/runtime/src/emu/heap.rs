//! The emulator's "device" memory: host memory, private to the process ([`PrivateHeap`]) or shareable with
//! the other processes of a team ([`SharedHeap`]: one `memfd` per allocation, mapped by every process that
//! receives its descriptor), so that emulated ranks in separate processes store to each other's memory the
//! way GPUs do over NVLink.

use std::alloc::{self, Layout};
use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Mutex, PoisonError};

use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use nix::unistd::ftruncate;

use crate::error::Error;
use crate::size::ALIGN;

/// Where an emulated team's allocations come from.
pub(crate) trait Heap: Send + Sync + fmt::Debug {
    /// `bytes` zeroed bytes aligned to [`ALIGN`].
    fn alloc(&self, bytes: usize) -> Result<u64, Error>;

    /// Frees an allocation of [`Heap::alloc`].
    ///
    /// # Safety
    ///
    /// `addr` came from `alloc(bytes)`, is freed once, and nothing uses it any more.
    unsafe fn free(&self, addr: u64, bytes: usize) -> Result<(), Error>;

    /// A descriptor another process can map allocation `addr` through.
    fn export(&self, addr: u64) -> Result<OwnedFd, Error> {
        let _ = addr;
        Err(Error::Unsupported { what: "sharing memory with other processes", backend: "emulator" })
    }

    /// Maps `bytes` of another process's allocation from its descriptor.
    fn import(&self, fd: BorrowedFd<'_>, bytes: usize) -> Result<u64, Error> {
        let _ = (fd, bytes);
        Err(Error::Unsupported { what: "mapping another process's memory", backend: "emulator" })
    }
}

/// Memory of one process: the global allocator.
#[derive(Debug, Default)]
pub(crate) struct PrivateHeap;

impl Heap for PrivateHeap {
    fn alloc(&self, bytes: usize) -> Result<u64, Error> {
        alloc_zeroed(bytes)
    }

    unsafe fn free(&self, addr: u64, bytes: usize) -> Result<(), Error> {
        // SAFETY: per the contract, allocated by `alloc_zeroed(bytes)` and unused.
        unsafe { free_zeroed(addr, bytes) };
        Ok(())
    }
}

/// `bytes` zeroed bytes of process memory aligned to [`ALIGN`] (error buffers, private heaps).
pub(crate) fn alloc_zeroed(bytes: usize) -> Result<u64, Error> {
    let layout = Layout::from_size_align(bytes.max(ALIGN), ALIGN)
        .map_err(|_| Error::SizeOverflow { len: bytes, elem_bytes: 1 })?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        alloc::handle_alloc_error(layout);
    }
    Ok(ptr as usize as u64)
}

/// Frees memory of [`alloc_zeroed`].
///
/// # Safety
///
/// `addr` came from `alloc_zeroed(bytes)`, is freed once, and nothing uses it any more.
pub(crate) unsafe fn free_zeroed(addr: u64, bytes: usize) {
    let layout = Layout::from_size_align(bytes.max(ALIGN), ALIGN).expect("checked when allocated");
    // SAFETY: per the contract, allocated with this layout and unused.
    unsafe { alloc::dealloc(addr as usize as *mut u8, layout) };
}

/// Memory the processes of a team share: each allocation is a `memfd`, mapped here and, through its
/// descriptor, in every peer process (pages are zero when created, and page-aligned, so [`ALIGN`]-aligned).
#[derive(Debug, Default)]
pub(crate) struct SharedHeap {
    /// Each allocation of this process, by address: its descriptor, kept to export it.
    own: Mutex<HashMap<u64, OwnedFd>>,
}

impl Heap for SharedHeap {
    fn alloc(&self, bytes: usize) -> Result<u64, Error> {
        let failed = |call: &'static str| move |e: nix::Error| shared_memory_error(call, bytes, e);
        let fd = memfd_create("ferrocomm-emulated-gpu", MFdFlags::MFD_CLOEXEC).map_err(failed("memfd_create"))?;
        ftruncate(&fd, bytes as i64).map_err(failed("ftruncate"))?;
        let addr = map(fd.as_fd(), bytes)?;
        self.own.lock().unwrap_or_else(PoisonError::into_inner).insert(addr, fd);
        Ok(addr)
    }

    unsafe fn free(&self, addr: u64, bytes: usize) -> Result<(), Error> {
        // Peers keep their own mappings: the memory lives until the last one is gone.
        self.own.lock().unwrap_or_else(PoisonError::into_inner).remove(&addr);
        // SAFETY: per the contract, a mapping of `map(_, bytes)` that nothing uses any more.
        unsafe { unmap(addr, bytes) }
    }

    fn export(&self, addr: u64) -> Result<OwnedFd, Error> {
        let own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        let fd = own.get(&addr).ok_or(Error::TeamConfig {
            reason: format!("address {addr:#x} is not an allocation of this process's shared emulator heap"),
        })?;
        fd.try_clone().map_err(|source| Error::SharedMemory { call: "dup", bytes: 0, source })
    }

    fn import(&self, fd: BorrowedFd<'_>, bytes: usize) -> Result<u64, Error> {
        map(fd, bytes)
    }
}

/// Maps `bytes` of `fd`, shared and read/write.
fn map(fd: BorrowedFd<'_>, bytes: usize) -> Result<u64, Error> {
    let len = NonZeroUsize::new(bytes).ok_or(Error::SizeOverflow { len: 0, elem_bytes: 1 })?;
    let prot = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
    // SAFETY: a fresh shared mapping chosen by the kernel, aliasing nothing of this process's.
    let ptr = unsafe { mmap(None, len, prot, MapFlags::MAP_SHARED, fd, 0) }
        .map_err(|e| shared_memory_error("mmap", bytes, e))?;
    Ok(ptr.as_ptr() as usize as u64)
}

/// Unmaps a mapping of [`map`].
///
/// # Safety
///
/// `addr` came from `map(_, bytes)`, is unmapped once, and nothing uses it any more.
pub(crate) unsafe fn unmap(addr: u64, bytes: usize) -> Result<(), Error> {
    let ptr = NonNull::new(addr as usize as *mut std::ffi::c_void).expect("mappings are not null");
    // SAFETY: per the contract.
    unsafe { munmap(ptr, bytes) }.map_err(|e| shared_memory_error("munmap", bytes, e))
}

fn shared_memory_error(call: &'static str, bytes: usize, e: nix::Error) -> Error {
    Error::SharedMemory { call, bytes, source: e.into() }
}
