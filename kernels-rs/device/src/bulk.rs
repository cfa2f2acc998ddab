//! TMA bulk copies (`cp.async.bulk`, sm_90): one thread hands a whole range to the SM's tensor memory
//! accelerator, which moves it global → shared → global without registers. A block drives a ring of
//! staging buffers in its dynamic shared memory ([`BulkCopier`]), so a handful of SMs keeps as many bytes
//! in flight over NVLink as a grid of load/store copies would — and leaves the other SMs to compute.
//!
//! The intrinsics, each one literal `asm!` (PTX ISA 8.0, sm_90; pinned by the golden tests):
//!
//! | function | PTX |
//! | --- | --- |
//! | [`mbarrier_init`] | `mbarrier.init.shared::cta.b64` |
//! | [`mbarrier_arrive_expect_tx`] | `mbarrier.arrive.expect_tx.shared::cta.b64` |
//! | [`mbarrier_try_wait_parity`] | `mbarrier.try_wait.parity.shared::cta.b64` |
//! | [`bulk_load`] | `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes` |
//! | [`bulk_store`] | `cp.async.bulk.global.shared::cta.bulk_group` |
//! | [`bulk_commit`] | `cp.async.bulk.commit_group` |
//! | [`bulk_wait_read`] | `cp.async.bulk.wait_group.read N` |
//! | [`bulk_wait`] | `cp.async.bulk.wait_group N` |
//!
//! Ordering: a bulk load completes on its mbarrier (the waiter then sees the staged bytes); a bulk store's
//! group completes at [`bulk_wait`], after which its writes are visible to the issuing thread, and a
//! `fence.proxy.async.global` orders them before that thread's later generic accesses — the release that
//! publishes them to a peer. Generic stores a bulk load must see need the same proxy fence before it.
//!
//! In the emulator the copies are deferred as the hardware may defer them: a load's bytes land when its
//! barrier's phase is waited on, a store group reads its source at [`bulk_wait_read`] and writes its
//! destination at [`bulk_wait`]. A kernel that reuses a stage before its store read it, or publishes data
//! before the store completed, reads stale bytes in the emulator's tests; a store still in flight when its
//! thread ends is an error (its shared memory is gone). The emulated async proxy sees the threads' writes
//! to shared memory only through `fence.proxy.async.shared::cta` (each writer's, then a block barrier
//! before another thread's bulk store): a store of a stage written without it copies stale bytes. An
//! mbarrier whose `expect_tx` bytes are fewer than its loads bring completes with the rest of them still in
//! flight; one whose bytes are more never completes, and the emulator ends the launch with a panic that
//! says so once the wait has outlasted the launch's timeout.
//!
//! On sm_80 (and any build without sm_90) [`BulkCopier`] copies with the block's loads and stores instead;
//! the intrinsics themselves exist only where the PTX allows them, and in the emulator.

// Without TMA the intrinsics' arguments go unused and their bodies end in `no_tma()`.
#![cfg_attr(
    all(target_arch = "nvptx64", not(all(target_feature = "sm_90", target_feature = "ptx80"))),
    allow(unused_variables, unreachable_code)
)]

#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90", target_feature = "ptx80"))]
use core::arch::asm;

use crate::fence::fence_proxy_async_global;
use crate::mem::{GlobalPtr, copy_small};
use crate::put::{PutSource, put};
pub use crate::shared::{SharedAddr, dynamic_shared_window};
use crate::signal::{Signal, SignalOp};
use crate::sym::{DeviceCopy, PeerSlice, PeerSliceMut};
use crate::sync::sync_threads;
use crate::vector::{Vectors, VectorsMut};
use crate::{group::Group, index::thread_rank};

/// Whether this build's PTX has the TMA instructions (sm_90 with PTX ISA 8.0); the emulator models them.
pub const HAS_TMA: bool = cfg!(any(
    not(target_arch = "nvptx64"),
    all(target_arch = "nvptx64", target_feature = "sm_90", target_feature = "ptx80")
));

/// One TMA instruction: the literal `asm!` on the GPU with TMA, the emulator's model on the host. In a
/// build without TMA it cannot run: [`BulkCopier`] calls it only where [`HAS_TMA`] holds, and a kernel that
/// calls it anyway traps.
macro_rules! tma {
    (gpu: $gpu:block host: $host:block) => {
        #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90", target_feature = "ptx80"))]
        $gpu
        #[cfg(not(target_arch = "nvptx64"))]
        $host
        #[cfg(all(target_arch = "nvptx64", not(all(target_feature = "sm_90", target_feature = "ptx80"))))]
        no_tma()
    };
}

/// `mbarrier.init.shared::cta.b64`: makes the 8 bytes at `bar` an mbarrier whose phases complete after
/// `count` arrivals (and the transaction bytes they expect). Make it visible to the async proxy
/// (`fence.proxy.async.shared::cta`) and to the block (a barrier) before use.
///
/// # Safety
///
/// `bar` is 8-byte aligned shared memory of this block that nothing else uses while it is a barrier.
#[inline(always)]
pub unsafe fn mbarrier_init(bar: SharedAddr, count: u32) {
    tma!(gpu: {
        // SAFETY: a valid barrier address (the caller).
        unsafe {
            asm!("mbarrier.init.shared::cta.b64 [{b}], {n};", b = in(reg32) bar.window(), n = in(reg32) count,
                options(nostack))
        };
    } host: {
        crate::lower::mbarrier_init(bar.addr(), count);
    });
}

/// `mbarrier.arrive.expect_tx.shared::cta.b64`: one arrival on `bar`'s current phase, which now also waits
/// for `bytes` transaction bytes (the bulk loads that complete on it).
///
/// # Safety
///
/// `bar` is an initialised mbarrier of this block.
#[inline(always)]
pub unsafe fn mbarrier_arrive_expect_tx(bar: SharedAddr, bytes: u32) {
    tma!(gpu: {
        // SAFETY: an initialised barrier (the caller).
        unsafe {
            asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};", b = in(reg32) bar.window(),
                n = in(reg32) bytes, options(nostack))
        };
    } host: {
        crate::lower::mbarrier_arrive_expect_tx(bar.addr(), bytes);
    });
}

/// `mbarrier.try_wait.parity.shared::cta.b64`: whether the phase of `bar` with parity `parity` (0 or 1)
/// has completed, waiting a while (the hardware's choice) before answering no. A completed phase makes the
/// bytes its bulk loads brought visible to this thread.
///
/// # Safety
///
/// `bar` is an initialised mbarrier of this block.
#[inline(always)]
pub unsafe fn mbarrier_try_wait_parity(bar: SharedAddr, parity: u32) -> bool {
    let done: u32;
    tma!(gpu: {
        // SAFETY: an initialised barrier (the caller); memory is clobbered, so reads of the staged bytes
        // stay after it.
        unsafe {
            asm!(
                "{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {q}; selp.u32 {d}, 1, 0, p; }}",
                b = in(reg32) bar.window(), q = in(reg32) parity, d = out(reg32) done, options(nostack)
            )
        };
    } host: {
        done = u32::from(crate::lower::mbarrier_try_wait_parity(bar.addr(), parity));
    });
    done != 0
}

/// `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`: the TMA copies `bytes` bytes from
/// `src` (global memory: this GPU's or a peer's) to `dst` in this block's shared memory and completes them
/// on `bar` as transaction bytes.
///
/// # Safety
///
/// Both ranges are valid for `bytes`, which is a multiple of 16; both addresses are 16-byte aligned; `bar`
/// is an initialised mbarrier whose current phase expects these bytes; nothing reads `dst` before the phase
/// completes or writes it before then.
#[inline(always)]
#[track_caller]
pub unsafe fn bulk_load(dst: SharedAddr, src: GlobalPtr, bytes: u32, bar: SharedAddr) {
    tma!(gpu: {
        // SAFETY: valid, aligned ranges and an expecting barrier (the caller).
        unsafe {
            asm!(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{s}], {n}, [{b}];",
                d = in(reg32) dst.window(), s = in(reg64) src.addr(), n = in(reg32) bytes, b = in(reg32) bar.window(),
                options(nostack)
            )
        };
    } host: {
        crate::lower::bulk_load(dst.addr(), src.addr(), bytes, bar.addr(), core::panic::Location::caller());
    });
}

/// `cp.async.bulk.global.shared::cta.bulk_group`: the TMA copies `bytes` bytes from `src` in this block's
/// shared memory to `dst` (global memory: this GPU's or a peer's), as part of this thread's open bulk
/// group ([`bulk_commit`] closes it).
///
/// # Safety
///
/// Both ranges are valid for `bytes`, a multiple of 16; both addresses are 16-byte aligned; nothing writes
/// `src` until the group is read ([`bulk_wait_read`]), and nothing else accesses `dst` until it completes
/// ([`bulk_wait`]).
#[inline(always)]
#[track_caller]
pub unsafe fn bulk_store(dst: GlobalPtr, src: SharedAddr, bytes: u32) {
    tma!(gpu: {
        // SAFETY: valid, aligned ranges (the caller).
        unsafe {
            asm!("cp.async.bulk.global.shared::cta.bulk_group [{d}], [{s}], {n};", d = in(reg64) dst.addr(),
                s = in(reg32) src.window(), n = in(reg32) bytes, options(nostack))
        };
    } host: {
        crate::lower::bulk_store(dst.addr(), src.addr(), bytes, core::panic::Location::caller());
    });
}

/// `cp.async.bulk.commit_group`: closes this thread's open bulk group (its bulk stores since the last
/// commit); [`bulk_wait_read`] and [`bulk_wait`] count groups.
#[inline(always)]
pub fn bulk_commit() {
    tma!(gpu: {
        // SAFETY: closes the thread's bulk group; touches no memory itself.
        unsafe { asm!("cp.async.bulk.commit_group;", options(nostack)) };
    } host: {
        crate::lower::bulk_commit();
    });
}

/// `cp.async.bulk.wait_group.read N`: waits until at most `N` of this thread's committed bulk groups still
/// read their shared-memory sources; the others' sources may be rewritten.
#[inline(always)]
pub fn bulk_wait_read<const N: u32>() {
    tma!(gpu: {
        // SAFETY: a wait; memory is clobbered, so later writes of the sources stay after it.
        unsafe { asm!("cp.async.bulk.wait_group.read {n};", n = const N, options(nostack)) };
    } host: {
        crate::lower::bulk_wait(N as usize, false);
    });
}

/// `cp.async.bulk.wait_group N`: waits until at most `N` of this thread's committed bulk groups are still
/// in flight; the others' writes are complete and visible to this thread.
#[inline(always)]
pub fn bulk_wait<const N: u32>() {
    tma!(gpu: {
        // SAFETY: a wait; memory is clobbered, so later accesses stay after it.
        unsafe { asm!("cp.async.bulk.wait_group {n};", n = const N, options(nostack)) };
    } host: {
        crate::lower::bulk_wait(N as usize, true);
    });
}

#[cfg(all(target_arch = "nvptx64", not(all(target_feature = "sm_90", target_feature = "ptx80"))))]
#[inline(always)]
fn no_tma() -> ! {
    panic!("a TMA instruction in a build without sm_90 (see `bulk::HAS_TMA`)")
}

/// Stages of a block's staging ring: a load fills one while earlier ones drain to their destinations.
pub const BULK_STAGES: usize = 4;

/// Bytes at the start of the dynamic shared memory holding the ring's mbarriers (one per stage).
pub const BULK_BARRIER_BYTES: usize = 8 * BULK_STAGES;

/// The dynamic shared memory a launch gives each block for a staging ring of stages of `stage_bytes` (a
/// multiple of 16): what the host passes as the launch's shared bytes to have [`BulkCopier`] use the TMA.
pub const fn bulk_staging_bytes(stage_bytes: usize) -> usize {
    BULK_BARRIER_BYTES + BULK_STAGES * stage_bytes
}

/// The ring of a block: its barriers, its stages, and the parity each stage's barrier waits for next.
#[derive(Debug, Clone, Copy)]
struct Ring {
    bars: SharedAddr,
    stages: SharedAddr,
    stage_bytes: usize,
    /// Bit `s`: the parity of the phase stage `s`'s barrier completes next.
    phases: u32,
}

/// A block's bulk copier: every thread of the block calls its methods with the same arguments.
///
/// Where the launch gave the block a staging ring ([`bulk_staging_bytes`] of dynamic shared memory) on a
/// GPU with TMA, thread 0 moves each copy's 16-byte-aligned body through the ring with bulk loads and
/// stores, a stage per chunk, and copies the head and tail of fewer than 16 bytes itself; bodies shorter
/// than one stage, copies whose source and destination are not equally aligned, and builds without TMA
/// copy with every thread's 16-byte loads and stores, as [`put`] does. Either way a call returns when the
/// copy is complete and every thread of the block may rely on it. The ring is the whole dynamic shared
/// memory: a kernel that copies this way does not also use it for [`reduce`](crate::reduce) calls.
///
/// ```
/// use ferrocomm_device::bulk::BulkCopier;
/// use ferrocomm_device::prelude::*;
/// fn send(dst: PeerSliceMut<u8>, src: &[u8], done: Signal) {
///     let mut copier = BulkCopier::new(); // once per block, before any copy
///     copier.put_signal(dst, src, done, SignalOp::Add(1));
/// }
/// ```
#[derive(Debug)]
pub struct BulkCopier {
    ring: Option<Ring>,
}

impl BulkCopier {
    /// Sets up the block's staging ring, when the launch gave it one: thread 0 initialises the barriers,
    /// and the block waits for it. Every thread of the block calls it, once per launch.
    #[inline(always)]
    pub fn new() -> BulkCopier {
        let ring = if HAS_TMA { Self::ring() } else { None };
        if let Some(r) = ring {
            if thread_rank() == 0 {
                for s in 0..BULK_STAGES {
                    // SAFETY: the first `BULK_BARRIER_BYTES` of the dynamic shared memory are the ring's.
                    unsafe { mbarrier_init(r.bars.byte_add(8 * s), 1) };
                }
                // The TMA completes transactions on the barriers: it must see them initialised.
                crate::fence::fence_proxy_async_shared_cta();
            }
            sync_threads();
        }
        BulkCopier { ring }
    }

    /// The ring the launch's dynamic shared memory holds, if it holds one of stages of at least 16 bytes.
    #[inline(always)]
    fn ring() -> Option<Ring> {
        let (base, bytes) = dynamic_shared_window();
        let stage_bytes = (bytes.checked_sub(BULK_BARRIER_BYTES)? / BULK_STAGES) & !15;
        (stage_bytes > 0).then(|| Ring {
            bars: base,
            stages: base.byte_add(BULK_BARRIER_BYTES),
            stage_bytes,
            phases: 0,
        })
    }

    /// Whether copies of at least one stage go through the TMA.
    #[inline(always)]
    pub fn uses_tma(&self) -> bool {
        self.ring.is_some()
    }

    /// The block copies `src` into the start of `dst` (a rank's copy of a symmetric buffer); when it
    /// returns the copy is complete and the source may change.
    #[inline(always)]
    #[track_caller]
    pub fn put<T: DeviceCopy>(&mut self, dst: PeerSliceMut<T>, src: impl PutSource<T>) {
        let (from, len) = src.parts();
        assert!(len <= dst.len(), "put source is longer than its destination");
        let bytes = len * core::mem::size_of::<T>();
        // SAFETY: `dst` is a live peer view of at least `bytes` bytes, in global memory (the module's
        // contract), which the put's source does not overlap (see `put`).
        let to = unsafe { GlobalPtr::from_generic(dst.as_ptr()) };
        if !self.copy(to, from, bytes) {
            put(Group::Block, dst, src);
        }
    }

    /// [`put`](Self::put), then thread 0 raises `signal` with release ordering: a peer that acquires it
    /// sees the data.
    #[inline(always)]
    #[track_caller]
    pub fn put_signal<T: DeviceCopy>(
        &mut self,
        dst: PeerSliceMut<T>,
        src: impl PutSource<T>,
        signal: Signal,
        op: SignalOp,
    ) {
        self.put(dst, src);
        if thread_rank() == 0 {
            signal.raise_release(op);
        }
    }

    /// The block fills `dst` from the start of `src` (a rank's copy of a symmetric buffer); when it
    /// returns the copy is complete.
    #[inline(always)]
    #[track_caller]
    pub fn get<T: DeviceCopy>(&mut self, dst: &mut [T], src: PeerSlice<T>) {
        assert!(dst.len() <= src.len(), "get destination is longer than its source");
        let bytes = core::mem::size_of_val(dst);
        // SAFETY: both are global memory: a kernel argument and a live peer view (the module's contract).
        let (to, from) = unsafe { (GlobalPtr::from_generic(dst.as_mut_ptr()), GlobalPtr::from_generic(src.as_ptr())) };
        if !self.copy(to, from, bytes) {
            crate::put::get(Group::Block, dst, src);
        }
    }

    /// The block copies `src` into the start of `dst` (vector ranges of global memory: kernel arguments,
    /// this rank's or a peer's copy of a symmetric buffer); when it returns the copy is complete.
    #[inline(always)]
    #[track_caller]
    pub fn copy_vectors(&mut self, dst: VectorsMut, src: Vectors) {
        assert!(src.len() <= dst.len(), "copied vectors outside the destination");
        let dst = dst.sub(0, src.len());
        if !self.copy(dst.base(), src.base(), src.len()) {
            dst.copy_from(src, 0, (0, src.vectors()), Group::Block.position());
            sync_threads();
        }
    }

    /// Copies through the ring when it can (returns `false` otherwise, having done nothing): the body by
    /// TMA, head and tail by thread 0, then the block waits.
    #[inline(always)]
    #[track_caller]
    fn copy(&mut self, dst: GlobalPtr, src: GlobalPtr, bytes: usize) -> bool {
        let Some(ring) = self.ring.as_mut() else { return false };
        let (d, s) = (dst.addr(), src.addr());
        let head = ((16 - d % 16) % 16).min(bytes);
        let body = (bytes - head) & !15;
        if (d ^ s) % 16 != 0 || body < ring.stage_bytes {
            return false;
        }
        // Generic stores of this block (earlier in the launch) that the bulk loads must see.
        fence_proxy_async_global();
        sync_threads();
        if thread_rank() == 0 {
            if crate::trace::COMPILED_IN {
                crate::trace::put_begin(bytes, dst.addr() as u64);
            }
            let tail = head + body;
            // SAFETY: the head, body and tail partition both ranges (valid for `bytes`, the callers).
            unsafe {
                copy_small(dst, src, head);
                copy_small(dst.byte_add(tail), src.byte_add(tail), bytes - tail);
                ring.stream(dst.byte_add(head), src.byte_add(head), body);
            }
            if crate::trace::COMPILED_IN {
                crate::trace::put_end(bytes, dst.addr() as u64);
            }
        }
        // The TMA's writes, complete and fenced by thread 0, come before every thread's later accesses.
        sync_threads();
        true
    }
}

impl Default for BulkCopier {
    fn default() -> Self {
        Self::new()
    }
}

impl Ring {
    #[inline(always)]
    fn bar(&self, s: usize) -> SharedAddr {
        self.bars.byte_add(8 * s)
    }

    #[inline(always)]
    fn stage(&self, s: usize) -> SharedAddr {
        self.stages.byte_add(s * self.stage_bytes)
    }

    /// Starts the bulk load of chunk `c` (of `chunk` bytes) into stage `c % BULK_STAGES`.
    ///
    /// # Safety
    ///
    /// As for [`Ring::stream`]; the stage is free (its last store read it).
    #[inline(always)]
    #[track_caller]
    unsafe fn load(&self, src: GlobalPtr, c: usize, chunk: usize) {
        let s = c % BULK_STAGES;
        // SAFETY: the ring's barrier and stage; `chunk` bytes of the source (the caller).
        unsafe {
            mbarrier_arrive_expect_tx(self.bar(s), chunk as u32);
            bulk_load(self.stage(s), src.byte_add(c * self.stage_bytes), chunk as u32, self.bar(s));
        }
    }

    /// Waits for stage `s`'s load (its barrier's next phase).
    #[inline(always)]
    fn wait_loaded(&mut self, s: usize) {
        let parity = (self.phases >> s) & 1;
        // SAFETY: the ring's initialised barrier.
        while !unsafe { mbarrier_try_wait_parity(self.bar(s), parity) } {}
        self.phases ^= 1 << s;
    }

    /// Moves `bytes` (a multiple of 16) from `src` to `dst`, both 16-byte aligned, a stage at a time:
    /// loads run `BULK_STAGES - 1` chunks ahead of the stores, and a stage is refilled once the store that
    /// read it is done reading. Returns with every store complete and fenced for this thread's later
    /// generic accesses.
    ///
    /// # Safety
    ///
    /// Both ranges are valid global memory for `bytes` and do not overlap; only this thread uses the ring.
    #[inline(always)]
    #[track_caller]
    unsafe fn stream(&mut self, dst: GlobalPtr, src: GlobalPtr, bytes: usize) {
        let stage = self.stage_bytes;
        let chunks = bytes.div_ceil(stage);
        let chunk = |c: usize| (bytes - c * stage).min(stage);
        for c in 0..(BULK_STAGES - 1).min(chunks) {
            // SAFETY: chunk `c` of the ranges; its stage has not been used yet.
            unsafe { self.load(src, c, chunk(c)) };
        }
        for c in 0..chunks {
            let s = c % BULK_STAGES;
            self.wait_loaded(s);
            // SAFETY: chunk `c`, which the completed phase brought into stage `s`.
            unsafe { bulk_store(dst.byte_add(c * stage), self.stage(s), chunk(c) as u32) };
            bulk_commit();
            let next = c + BULK_STAGES - 1;
            if next < chunks {
                // Chunk `next` refills the stage of chunk `c - 1`: every store but chunk `c`'s has read.
                bulk_wait_read::<1>();
                // SAFETY: chunk `next` of the ranges into a stage no store reads any more.
                unsafe { self.load(src, next, chunk(next)) };
            }
        }
        bulk_wait::<0>();
        // The async proxy's writes before this thread's generic release that publishes them.
        fence_proxy_async_global();
    }
}
