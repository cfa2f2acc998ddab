//! One emulated thread block: its barrier (`barrier.sync 0`), its warps and its shared memory.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::Trapped;
use super::check::{Clock, Deposit, join_deposits};
use super::launch::Launch;
use super::warp::Warp;

/// Shared memory is 16-byte aligned on the GPU (`.align 16`); so is every emulated allocation.
const SHARED_ALIGN: usize = 16;

/// A zeroed, 16-byte aligned allocation that the threads of one block address through raw pointers.
#[derive(Debug)]
pub(crate) struct SharedAlloc {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the allocation is plain memory; the kernel's threads synchronise their accesses to it (block
// barriers), exactly as they must on the GPU.
unsafe impl Send for SharedAlloc {}
// SAFETY: as above.
unsafe impl Sync for SharedAlloc {}

impl SharedAlloc {
    /// `bytes` zeroed bytes aligned to at least 16 (and to `align`).
    pub(crate) fn zeroed(bytes: usize, align: usize) -> SharedAlloc {
        let align = align.max(SHARED_ALIGN);
        let layout = match Layout::from_size_align(bytes, align) {
            Ok(layout) => layout,
            Err(_) => panic!("emulated shared memory of {bytes} bytes aligned to {align} is not a valid layout"),
        };
        if bytes == 0 {
            // A dangling pointer with the right alignment: nothing may be read through it.
            let ptr = NonNull::new(align as *mut u8).unwrap_or(NonNull::dangling());
            return SharedAlloc { ptr, layout };
        }
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        match NonNull::new(raw) {
            Some(ptr) => SharedAlloc { ptr, layout },
            None => alloc::handle_alloc_error(layout),
        }
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for SharedAlloc {
    fn drop(&mut self) {
        if self.layout.size() != 0 {
            // SAFETY: allocated in `zeroed` with this layout; no thread of the block runs any more.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
        }
    }
}

#[derive(Debug)]
struct BarrierState {
    /// Threads of the block that have not exited: the count a barrier waits for.
    live: u32,
    /// Threads waiting at the current barrier.
    arrived: u32,
    /// Incremented each time the barrier opens, so a waiter knows its barrier has passed.
    generation: u64,
    /// The checker's clocks of the threads waiting at the current barrier.
    deposits: Vec<Deposit>,
    /// What every thread of the barrier that opened last knows (read by its waiters as they leave).
    joined: Option<Clock>,
}

/// A named static shared array of the block (`shared_array!`).
#[derive(Debug)]
struct StaticShared {
    name: &'static str,
    alloc: SharedAlloc,
}

/// The state the threads of one block share.
#[derive(Debug)]
pub(crate) struct Block {
    barrier: Mutex<BarrierState>,
    opened: Condvar,
    warps: Vec<Warp>,
    statics: Mutex<Vec<StaticShared>>,
    dynamic: SharedAlloc,
    /// The mbarriers of the block's bulk copies (see `bulk`).
    pub(crate) bulk_barriers: super::bulk::Barriers,
    /// The block's shared memory as the async proxy sees it (see `bulk`).
    pub(crate) proxy: super::bulk::AsyncView,
}

/// Locks, ignoring poisoning: the guarded state is kept consistent by this module, which never panics while
/// holding a guard (kernel threads unwind only after releasing them).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Block {
    /// A block of `threads` threads with `dynamic_shared_bytes` of dynamic shared memory.
    pub(crate) fn new(threads: u32, dynamic_shared_bytes: usize) -> Block {
        let warps = (0..threads.div_ceil(32))
            .map(|w| {
                let lanes = (threads - w * 32).min(32);
                Warp::new(lanes)
            })
            .collect();
        Block {
            barrier: Mutex::new(BarrierState {
                live: threads,
                arrived: 0,
                generation: 0,
                deposits: Vec::new(),
                joined: None,
            }),
            opened: Condvar::new(),
            warps,
            statics: Mutex::new(Vec::new()),
            dynamic: SharedAlloc::zeroed(dynamic_shared_bytes, SHARED_ALIGN),
            bulk_barriers: Default::default(),
            proxy: Default::default(),
        }
    }

    /// `barrier.sync 0`: waits until every live thread of the block has arrived. Threads that exited no longer
    /// count, so a thread that ended on a timeout cannot hang the rest of its block. With the checker's
    /// `deposit`, returns the clock joined from every participant's.
    pub(crate) fn sync(&self, launch: &Launch, deposit: Option<Deposit>) -> Result<Option<Clock>, Trapped> {
        let mut st = lock(&self.barrier);
        st.arrived += 1;
        st.deposits.extend(deposit);
        if st.arrived >= st.live {
            self.open(&mut st);
            return Ok(st.joined.clone());
        }
        let generation = st.generation;
        while st.generation == generation {
            if launch.is_trapped() {
                return Err(Trapped);
            }
            st = self.opened.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        // The next barrier cannot open before this thread arrives there, so `joined` is still this one's.
        Ok(st.joined.clone())
    }

    fn open(&self, st: &mut BarrierState) {
        st.arrived = 0;
        st.generation += 1;
        st.joined = (!st.deposits.is_empty()).then(|| join_deposits(&st.deposits));
        st.deposits.clear();
        // Proxy fences before the barrier reach the block's bulk copies after it.
        self.proxy.barrier_opened(|| self.shared_regions());
        self.opened.notify_all();
    }

    /// The warp `w` of this block.
    pub(crate) fn warp(&self, w: u32) -> &Warp {
        &self.warps[w as usize]
    }

    /// Records that thread `linear_tid` exited: barriers and warp operations stop waiting for it.
    pub(crate) fn thread_exited(&self, linear_tid: u32) {
        {
            let mut st = lock(&self.barrier);
            st.live -= 1;
            if st.arrived > 0 && st.arrived >= st.live {
                self.open(&mut st);
            }
        }
        self.warps[(linear_tid / 32) as usize].leave(linear_tid % 32);
    }

    /// Wakes every waiter so it sees the launch's trap flag.
    pub(crate) fn wake_all(&self) {
        drop(lock(&self.barrier));
        self.opened.notify_all();
        for warp in &self.warps {
            warp.wake_all();
        }
    }

    /// The block's copy of the static shared array `name` (`bytes` long), zeroed on first use.
    pub(crate) fn static_shared(&self, name: &'static str, bytes: usize, align: usize) -> *mut u8 {
        let mut statics = lock(&self.statics);
        if let Some(s) = statics.iter().find(|s| s.name == name) {
            let len = s.alloc.len();
            let ptr = s.alloc.ptr();
            drop(statics);
            // The GPU module would not even assemble with two `.shared` arrays of one name.
            assert_eq!(len, bytes, "shared_array! `{name}` is declared twice with different sizes; rename one");
            return ptr;
        }
        let alloc = SharedAlloc::zeroed(bytes, align);
        let ptr = alloc.ptr();
        statics.push(StaticShared { name, alloc });
        ptr
    }

    /// The block's dynamic shared memory.
    pub(crate) fn dynamic_shared(&self) -> (*mut u8, usize) {
        (self.dynamic.ptr(), self.dynamic.len())
    }

    /// The block's shared allocations so far (start, bytes): the dynamic one and the static arrays.
    pub(crate) fn shared_regions(&self) -> Vec<(usize, usize)> {
        let mut regions = vec![(self.dynamic.ptr() as usize, self.dynamic.len())];
        regions.extend(lock(&self.statics).iter().map(|s| (s.alloc.ptr() as usize, s.alloc.len())));
        regions.retain(|&(_, len)| len > 0);
        regions
    }
}
