//! Host queues: a single-producer ring of fixed-size descriptors per rank, in host memory mapped into every
//! GPU of the team (pinned, `cuMemHostAlloc` with `DEVICEMAP | PORTABLE`), which a host thread consumes —
//! the device half of a proxy (the NVSHMEM / MSCCL++ "device-side task queue").
//!
//! The rings of a team are one allocation: rank `r`'s starts at `base + r * stride` and holds the
//! producer's `head` at [`RING_HEAD`], the consumer's `tail` at [`RING_TAIL`] (separate 64-byte lines:
//! the GPU writes one, the host the other), then `depth` slots of [`SLOT_BYTES`] at [`RING_SLOTS`]. `head`
//! and `tail` are monotonic counts of descriptors written and popped; descriptor `n` lives in slot
//! `n % depth` ([`ring_slot`]).
//!
//! The protocol, and its memory ordering:
//!
//! - the producer (one thread of the rank, [`Producer::push`]) waits until the slot is free — an acquire
//!   wait ([`Signal::wait_ge`], `ld.acquire.sys`) for the `tail` that pops the slot's previous descriptor
//!   ([`ring_tail_needed`]) — writes the slot with weak stores and publishes it with a release store of
//!   `head` (`st.release.sys`);
//! - the consumer reads `head` with an acquire load, copies the descriptors below it out, and frees their
//!   slots with a release store of `tail`.
//!
//! A kernel takes the rings as one by-value argument, [`HostQueues`], which only the host can build (its
//! constructor is `unsafe`: it vouches for the memory); on the device [`HostQueues::producer`] opens this
//! rank's ring, so kernels push descriptors without a raw pointer. In the emulator the slot write is a weak
//! write the checker sees, and it waits in the thread's store buffer until the release of `head`.

use core::marker::PhantomData;

use crate::atomic::SysAtomicU64;
use crate::ctx::team;
use crate::param::DeviceParam;
use crate::signal::Signal;
use crate::sym::DeviceCopy;

/// Byte offset of the producer's `head` count in a rank's ring.
pub const RING_HEAD: usize = 0;
/// Byte offset of the consumer's `tail` count (its own 64-byte line: the host writes it, the GPU polls it).
pub const RING_TAIL: usize = 64;
/// Byte offset of the first descriptor slot.
pub const RING_SLOTS: usize = 128;
/// Bytes of one descriptor slot (one host cache line); a descriptor is at most this large and aligned.
pub const SLOT_BYTES: usize = 64;

// `head`, `tail` and every slot on lines of their own.
const _: () = assert!(
    RING_TAIL - RING_HEAD >= 64 && RING_SLOTS - RING_TAIL >= 64 && RING_SLOTS.is_multiple_of(64) && SLOT_BYTES == 64
);

/// Bytes of one rank's ring with `depth` slots (a multiple of 64, so consecutive rings share no line).
pub const fn ring_bytes(depth: usize) -> usize {
    RING_SLOTS + depth * SLOT_BYTES
}

/// The slot descriptor number `seq` occupies.
#[inline(always)]
pub const fn ring_slot(seq: u64, depth: u64) -> u64 {
    seq % depth
}

/// Whether the producer may write descriptor `head` after the consumer popped `tail` of them.
#[inline(always)]
pub const fn ring_has_space(head: u64, tail: u64, depth: u64) -> bool {
    head - tail < depth
}

/// The `tail` the producer must observe before writing descriptor `head`: the slot's previous occupant
/// (descriptor `head - depth`) has been popped.
#[inline(always)]
pub const fn ring_tail_needed(head: u64, depth: u64) -> u64 {
    (head + 1).saturating_sub(depth)
}

/// The rings of a team, a kernel argument passed by value: rank `r`'s ring at `base + r * stride`, each
/// with `depth` slots. Built on the host by [`HostQueues::new`]; opened on the device by
/// [`HostQueues::producer`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostQueues {
    base: u64,
    stride: u64,
    depth: u64,
}

impl HostQueues {
    /// The rings of `world` ranks at `base`, `stride` bytes apart, of `depth` slots each.
    ///
    /// # Safety
    ///
    /// Every launch given the value runs while this holds: `base` is the address of memory that every GPU
    /// of the team maps at that same address (pinned host memory, device-mapped and portable; for an
    /// emulated team, host memory), holding one ring of `stride` bytes per rank of the launching team, zeroed
    /// before first use (or left so by earlier launches), live until the launch has ended, and touched by
    /// nothing but this protocol: `head` and the slots written by the rank's kernels only, `tail` by one
    /// consumer only, both counts accessed atomically.
    ///
    /// # Panics
    ///
    /// If `depth` is 0, `base` or `stride` is not a multiple of 64, or `stride < ring_bytes(depth)`.
    pub const unsafe fn new(base: u64, stride: u64, depth: u64) -> HostQueues {
        assert!(depth >= 1, "a host queue needs at least one slot");
        assert!(base.is_multiple_of(64) && stride.is_multiple_of(64), "host queues are 64-byte aligned");
        let min = match depth.checked_mul(SLOT_BYTES as u64) {
            Some(slots) => slots.checked_add(RING_SLOTS as u64),
            None => None,
        };
        assert!(matches!(min, Some(min) if stride >= min), "a host queue's stride must hold its ring");
        HostQueues { base, stride, depth }
    }

    /// Device address of rank 0's ring.
    #[inline(always)]
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes from one rank's ring to the next.
    #[inline(always)]
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// Slots per ring.
    #[inline(always)]
    pub fn depth(&self) -> u64 {
        self.depth
    }

    /// This rank's end of its ring, for descriptors of type `T` (at most [`SLOT_BYTES`] large and aligned;
    /// checked at compile time). Its first push continues after what earlier launches of this rank
    /// published.
    ///
    /// Open one producer per rank at a time, from one thread (the ring has a single producer): a second one
    /// would write the same slots, a race the emulator's checker reports.
    #[inline(always)]
    pub fn producer<T: DeviceCopy>(self) -> Producer<T> {
        const {
            assert!(
                size_of::<T>() <= SLOT_BYTES && SLOT_BYTES.is_multiple_of(align_of::<T>()),
                "a host-queue descriptor fits one slot"
            )
        };
        let base = (self.base + u64::from(team::rank()) * self.stride) as usize as *mut u8;
        // SAFETY: `new`'s contract: this rank's ring (`rank < world`) of `stride >= ring_bytes(depth)` bytes
        // lies at `base`, 64-byte aligned, mapped into this GPU for the launch; `head` is written by this
        // rank's producer only and `tail` by the consumer only, both atomically.
        let (head, tail) = unsafe {
            (SysAtomicU64::from_ptr(base.add(RING_HEAD).cast()), Signal::from_ptr(base.add(RING_TAIL).cast()))
        };
        // SAFETY: as above; the slots follow the two counters.
        let slots = unsafe { base.add(RING_SLOTS) };
        // Earlier launches of this rank published `head`; stream order makes their stores visible here.
        let next = head.load_relaxed();
        Producer {
            head,
            tail,
            slots,
            depth: self.depth.max(1),
            next,
            tail_seen: tail.load_acquire(),
            item: PhantomData,
        }
    }
}

// SAFETY: a `#[repr(C)]` struct of integers passed by value as itself; only `HostQueues::new`, whose
// contract vouches for the memory, builds one on the host.
unsafe impl DeviceParam for HostQueues {
    type Abi = HostQueues;
    #[inline(always)]
    unsafe fn from_abi(abi: HostQueues) -> HostQueues {
        abi
    }
}

/// This rank's end of its ring: pushes descriptors of type `T`.
#[derive(Debug)]
pub struct Producer<T> {
    head: &'static SysAtomicU64,
    tail: Signal,
    slots: *mut u8,
    depth: u64,
    /// Descriptors written so far (what `head` holds).
    next: u64,
    /// The last `tail` observed: slots below `tail_seen + depth` are free without asking again.
    tail_seen: u64,
    item: PhantomData<fn(T)>,
}

impl<T: DeviceCopy> Producer<T> {
    /// Writes `d` into the next slot once it is free (an acquire wait for the consumer's `tail` when the
    /// ring is full), and publishes it (a release store of `head`).
    #[inline(always)]
    #[track_caller]
    pub fn push(&mut self, d: T) {
        if !ring_has_space(self.next, self.tail_seen, self.depth) {
            self.tail_seen = self.tail.wait_ge(ring_tail_needed(self.next, self.depth));
        }
        let slot = ring_slot(self.next, self.depth) as usize;
        // SAFETY: `slot < depth`, inside this rank's ring, aligned for `T` (the ring is 64-byte aligned and
        // `T` fits a slot); the consumer popped the slot's previous descriptor (acquire of `tail` above) and
        // reads this one only after the release of `head` below.
        unsafe { write_slot(self.slots.add(slot * SLOT_BYTES).cast::<T>(), d) };
        // The emulator's checker keeps what this thread knows for the proxy that will serve the slot.
        #[cfg(not(target_arch = "nvptx64"))]
        crate::lower::check::queued(self.slots as usize + slot * SLOT_BYTES);
        self.next += 1;
        self.head.store_release(self.next);
    }

    /// Descriptors this rank has published (its `head`).
    #[inline(always)]
    pub fn pushed(&self) -> u64 {
        self.next
    }
}

/// A weak write of one descriptor: a plain store on the GPU; in the emulator a weak write the checker sees,
/// buffered until a release.
///
/// # Safety
///
/// `p` addresses a live, aligned `T` that no other thread accesses concurrently.
#[inline(always)]
#[cfg_attr(not(target_arch = "nvptx64"), track_caller)]
unsafe fn write_slot<T: DeviceCopy>(p: *mut T, v: T) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: the caller guarantees a valid, aligned slot.
        unsafe { p.write(v) }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        use crate::mem::{GlobalPtr, copy_small};
        let (bytes, loc) = (size_of::<T>(), core::panic::Location::caller());
        crate::lower::check::weak_write(p as usize, bytes, loc);
        // SAFETY: the caller guarantees a valid, aligned slot; `v` is a whole `T` with no padding
        // (`DeviceCopy`).
        unsafe { copy_small(GlobalPtr::from_generic(p), GlobalPtr::from_generic(&v), bytes) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        assert_eq!(ring_bytes(5), 128 + 5 * 64);
        assert_eq!((ring_slot(7, 5), ring_slot(4, 5)), (2, 4));
        assert!(ring_has_space(4, 0, 5) && !ring_has_space(5, 0, 5) && ring_has_space(5, 1, 5));
        assert_eq!((ring_tail_needed(5, 5), ring_tail_needed(2, 5)), (1, 0));
    }

    #[test]
    fn the_constructor_checks_what_it_can() {
        // SAFETY: not used by any launch.
        let q = unsafe { HostQueues::new(4096, ring_bytes(3) as u64, 3) };
        assert_eq!((q.base(), q.stride(), q.depth()), (4096, 320, 3));
        for (base, stride, depth) in [(4096, 320, 0), (4100, 320, 3), (4096, 256, 3), (4096, 64, u64::MAX)] {
            // SAFETY: as above (it panics before it returns).
            assert!(std::panic::catch_unwind(|| unsafe { HostQueues::new(base, stride, depth) }).is_err());
        }
    }
}
