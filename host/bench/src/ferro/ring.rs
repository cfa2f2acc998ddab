//! The proxy's rings, from the host's side: one pinned allocation mapped into every GPU of the team (or,
//! for the emulator, plain host memory) holding every rank's ring in the layout of
//! `ferrocomm_device::queue` — `head` (written by the rank's kernel), `tail` (written by the proxy), then
//! `depth` descriptor slots.
//!
//! The consumer's half of the protocol is here: [`Rings::head`] is read with acquire ordering (it pairs
//! with the kernel's `st.release.sys`), a slot is copied out, then [`Rings::publish_tail`] stores the new
//! tail with release ordering (the kernel's `ld.acquire.sys` of it lets it reuse the slot).

use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{CudaContext, result};
use ferrocomm_device::emu::{Issued, QueueLayout, WatchedQueues, watch_host_queues};
use ferrocomm_device::queue::{HostQueues, RING_HEAD, RING_SLOTS, RING_TAIL, SLOT_BYTES, ring_bytes, ring_slot};
use ferrocomm_kernels::kernels::proxy::ProxyDescriptor;

use crate::backend::BackendError;

/// Largest ring depth the tool accepts (`--queue-depth`): 4 MiB of descriptors per rank.
pub const MAX_DEPTH: u32 = 1 << 16;

/// Where the memory came from, and so how it is freed.
#[derive(Debug)]
enum Owner {
    /// `cuMemHostAlloc` (portable, device-mapped) in this context.
    Cuda(Arc<CudaContext>),
    /// The global allocator (emulated teams, tests).
    Host(Layout),
}

/// Every rank's ring.
#[derive(Debug)]
pub struct Rings {
    ptr: *mut u8,
    owner: Owner,
    /// The address kernels use (the same on every GPU).
    device_base: u64,
    world: usize,
    depth: usize,
    stride: usize,
    /// Host rings are the emulator's: its checker watches the pushes into them until they are freed.
    watched: Option<WatchedQueues>,
}

// SAFETY: the memory is shared with the GPUs by design; the host touches it only through `head`/`tail`
// atomics and slot copies ordered by them (see the module docs), from any thread.
unsafe impl Send for Rings {}
// SAFETY: as above.
unsafe impl Sync for Rings {}

/// Bytes from one rank's ring to the next (whole 64-byte lines, so rings never share a line).
pub fn ring_stride(depth: usize) -> usize {
    ring_bytes(depth).next_multiple_of(SLOT_BYTES)
}

fn check_depth(depth: usize) -> Result<(), BackendError> {
    if depth == 0 || depth > MAX_DEPTH as usize {
        return Err(BackendError::External {
            mode: crate::model::Mode::Proxy,
            source: format!("queue depth {depth}: use 1 to {MAX_DEPTH} descriptor slots (--queue-depth)").into(),
        });
    }
    Ok(())
}

impl Rings {
    /// Rings for `world` ranks of `depth` slots in ordinary host memory: for emulated teams, whose
    /// "device" memory is host memory.
    pub fn host(world: usize, depth: usize) -> Result<Rings, BackendError> {
        check_depth(depth)?;
        let stride = ring_stride(depth);
        let bytes = stride * world.max(1);
        let layout = Layout::from_size_align(bytes, 4096).map_err(|e| BackendError::External {
            mode: crate::model::Mode::Proxy,
            source: format!("{world} rings of {depth} slots: {e}").into(),
        })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let device_base = ptr as u64;
        let watched = Some(watch_host_queues(QueueLayout {
            base: ptr as usize,
            stride,
            rings: world,
            depth: depth as u64,
            head: RING_HEAD,
            tail: RING_TAIL,
            slots: RING_SLOTS,
            slot_bytes: SLOT_BYTES,
        }));
        Ok(Rings { ptr, owner: Owner::Host(layout), device_base, world, depth, stride, watched })
    }

    /// Rings for the GPUs `ctxs` (one per rank): pinned host memory, portable and mapped into every
    /// context. Every GPU must map it at one address (unified addressing, true of every 64-bit CUDA
    /// platform), since all ranks' kernels receive one base address.
    pub fn cuda(ctxs: &[Arc<CudaContext>], depth: usize) -> Result<Rings, BackendError> {
        check_depth(depth)?;
        let first = ctxs.first().ok_or(BackendError::NoDevice)?;
        let stride = ring_stride(depth);
        let bytes = stride * ctxs.len();
        first.bind_to_thread().map_err(BackendError::driver("binding GPU 0 for the proxy's rings"))?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: a plain pinned allocation of `bytes` bytes; zeroed below before any kernel sees it.
        let host = unsafe { result::malloc_host(bytes, flags) }.map_err(BackendError::driver(format!(
            "allocating {bytes} bytes of pinned memory for the proxy's rings"
        )))?;
        // From here on, dropping `rings` frees the allocation.
        let mut rings = Rings {
            ptr: host.cast(),
            owner: Owner::Cuda(first.clone()),
            device_base: 0,
            world: ctxs.len(),
            depth,
            stride,
            watched: None,
        };
        // SAFETY: `host` holds `bytes` writable bytes.
        unsafe { std::ptr::write_bytes(rings.ptr, 0, bytes) };
        for (rank, ctx) in ctxs.iter().enumerate() {
            ctx.bind_to_thread().map_err(BackendError::driver(format!("binding rank {rank}'s GPU")))?;
            let mut device: CUdeviceptr = 0;
            // SAFETY: `host` was allocated with DEVICEMAP | PORTABLE; the rank's context is current.
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) }
                .result()
                .map_err(BackendError::driver(format!("mapping the proxy's rings into rank {rank}'s GPU")))?;
            if rank == 0 {
                rings.device_base = device;
            } else if device != rings.device_base {
                return Err(BackendError::External {
                    mode: crate::model::Mode::Proxy,
                    source: format!(
                        "the proxy's rings map at {device:#x} on rank {rank} but {:#x} on rank 0; the proxy mode \
                         needs unified addressing (one address on every GPU)",
                        rings.device_base
                    )
                    .into(),
                });
            }
        }
        Ok(rings)
    }

    /// The kernels' view of the rings. Launches given it must end before the rings are dropped (the
    /// backend that owns them waits for its kernels).
    pub fn param(&self) -> HostQueues {
        // SAFETY: `world` rings of `stride >= ring_bytes(depth)` bytes at `device_base`, page-aligned and
        // zeroed, mapped at that one address into every GPU (checked in `Rings::cuda`; for emulated teams,
        // host memory); the proxy is the one consumer (it writes `tail` only), kernels write `head` and the
        // slots; the memory lives as long as `self`, which outlives the launches.
        unsafe { HostQueues::new(self.device_base, self.stride as u64, self.depth as u64) }
    }

    /// Ranks with a ring.
    pub fn world(&self) -> usize {
        self.world
    }

    /// Slots per ring.
    pub fn depth(&self) -> usize {
        self.depth
    }

    fn counter(&self, rank: usize, offset: usize) -> &AtomicU64 {
        assert!(rank < self.world, "rank {rank} has no ring ({} rings)", self.world);
        // SAFETY: in bounds (`rank < world`, the counters lie in the first line of each ring), 8-byte aligned
        // (allocation and stride are multiples of 64), alive as long as `self`, accessed only atomically.
        unsafe { AtomicU64::from_ptr(self.ptr.add(rank * self.stride + offset).cast()) }
    }

    /// Descriptors rank `rank`'s kernels have published (acquire: their slots are readable).
    pub fn head(&self, rank: usize) -> u64 {
        self.counter(rank, RING_HEAD).load(Ordering::Acquire)
    }

    /// Descriptors of rank `rank` the proxy has popped so far.
    pub fn tail(&self, rank: usize) -> u64 {
        self.counter(rank, RING_TAIL).load(Ordering::Acquire)
    }

    /// Tells rank `rank`'s kernels that descriptors below `tail` are popped (release: their slots may be
    /// overwritten once the kernel has seen it).
    pub fn publish_tail(&self, rank: usize, tail: u64) {
        self.counter(rank, RING_TAIL).store(tail, Ordering::Release);
    }

    /// Publishes descriptor number `seq` of rank `rank`: what a kernel's producer does, for host tests of
    /// the consumer (write the slot, then a release store of `head`). The slot must be free
    /// (`seq - tail < depth`) and `seq` the ring's current head.
    pub fn push_for_test(&self, rank: usize, seq: u64, d: &ProxyDescriptor) {
        assert_eq!(self.counter(rank, RING_HEAD).load(Ordering::Relaxed), seq, "descriptors are pushed in order");
        let slot = self.slot_ptr(rank, seq);
        // SAFETY: the slot lies in this rank's ring; the caller (the only producer) checked it is free.
        unsafe { slot.write_volatile(*d) };
        self.counter(rank, RING_HEAD).store(seq + 1, Ordering::Release);
    }

    fn slot_ptr(&self, rank: usize, seq: u64) -> *mut ProxyDescriptor {
        assert!(rank < self.world, "rank {rank} has no ring ({} rings)", self.world);
        let slot = ring_slot(seq, self.depth as u64) as usize;
        // SAFETY: `slot < depth`, so the slot lies inside rank `rank`'s ring of `stride` bytes.
        unsafe { self.ptr.add(rank * self.stride + RING_SLOTS + slot * SLOT_BYTES).cast() }
    }

    /// What the emulator's checker saw of the push of descriptor number `seq` of rank `rank` (`None` unless
    /// a checked emulated kernel pushed it into these host rings; GPU rings have none to look up); taken
    /// once, by the proxy that serves it.
    pub fn issued(&self, rank: usize, seq: u64) -> Option<Issued> {
        match self.owner {
            Owner::Host(_) => Issued::take(self.slot_ptr(rank, seq).cast_const().cast()),
            Owner::Cuda(_) => None,
        }
    }

    /// A copy of descriptor number `seq` of rank `rank`. Call it only for `tail <= seq < head` (after the
    /// acquire load of [`Rings::head`] that covers it, and before publishing a tail past it).
    pub fn read(&self, rank: usize, seq: u64) -> ProxyDescriptor {
        // SAFETY: the slot lies in the ring (see `slot_ptr`); the kernel wrote it before releasing a head
        // above `seq`, which the caller acquired, and will not rewrite it before a tail above `seq` is
        // published. Volatile: a GPU wrote it, outside the compiler's view.
        unsafe { self.slot_ptr(rank, seq).read_volatile() }
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        // Unwatched before the memory goes: another allocation may take its place.
        drop(self.watched.take());
        match &self.owner {
            Owner::Cuda(ctx) => {
                if ctx.bind_to_thread().is_ok() {
                    // SAFETY: allocated by `malloc_host` and freed once; the backend owning the rings has
                    // stopped its proxy and waited for its kernels before dropping them.
                    let _ = unsafe { result::free_host(self.ptr.cast::<c_void>()) };
                }
            }
            Owner::Host(layout) => {
                // SAFETY: allocated by `alloc_zeroed(layout)` and freed once.
                unsafe { std::alloc::dealloc(self.ptr, *layout) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocomm_device::queue::{ring_has_space, ring_tail_needed};

    #[test]
    fn layout_and_counters() {
        let rings = Rings::host(3, 5).unwrap();
        assert_eq!(rings.param().stride(), ring_stride(5) as u64);
        assert_eq!(ring_stride(5), 128 + 5 * 64);
        assert_eq!(rings.param().base() % 4096, 0);
        assert_eq!((rings.head(2), rings.tail(2)), (0, 0));
        let d = ProxyDescriptor {
            src: 1,
            dst: 2,
            bytes: 3,
            signal: 4,
            value: 5,
            src_rank: 2,
            dst_rank: 0,
            reserved: [0; 2],
        };
        for seq in 0..5 {
            rings.push_for_test(2, seq, &ProxyDescriptor { value: seq, ..d });
        }
        assert_eq!((rings.head(2), rings.head(1)), (5, 0));
        assert!(!ring_has_space(5, rings.tail(2), 5));
        assert_eq!(rings.read(2, 3).value, 3);
        rings.publish_tail(2, 1);
        assert!(ring_has_space(5, rings.tail(2), 5) && ring_tail_needed(5, 5) == 1);
        rings.push_for_test(2, 5, &ProxyDescriptor { value: 50, ..d });
        // Descriptor 5 reuses slot 0.
        assert_eq!((rings.read(2, 5).value, rings.read(2, 0).value), (50, 50));
        assert!(Rings::host(2, 0).is_err() && Rings::host(2, MAX_DEPTH as usize + 1).is_err());
    }
}
