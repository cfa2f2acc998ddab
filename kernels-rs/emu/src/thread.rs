//! The emulated GPU thread a host thread is playing: its indices, its block and its launch, kept in a
//! thread-local that every host-side intrinsic reads.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use super::block::Block;
use super::bulk::StoreGroups;
use super::check::ThreadCheck;
use super::launch::Launch;
use super::schedule::Pauses;
use super::weak::StoreBuffer;

/// Everything an intrinsic needs to know about the emulated thread running on this host thread.
#[derive(Debug)]
pub(crate) struct ThreadState {
    /// `%tid`.
    pub(crate) thread_idx: [u32; 3],
    /// `%ctaid`.
    pub(crate) block_idx: [u32; 3],
    /// `%ntid`.
    pub(crate) block_dim: [u32; 3],
    /// `%nctaid`.
    pub(crate) grid_dim: [u32; 3],
    /// The thread's index in its block, x fastest (what warps are cut from).
    pub(crate) linear_tid: u32,
    /// The block's index in the grid, x fastest.
    pub(crate) linear_block: u32,
    /// Barrier, warps and shared memory of this thread's block.
    pub(crate) block: Arc<Block>,
    /// The launch this thread belongs to (context, trap flag, checker).
    pub(crate) launch: Arc<Launch>,
    /// The checker's state of this thread (`None` when the launch runs unchecked).
    pub(crate) check: Option<RefCell<ThreadCheck>>,
    /// Where this thread pauses (seeded by its launch).
    pub(crate) pauses: Pauses,
    /// The thread's buffered stores, not yet visible to other threads (see `weak`).
    pub(crate) weak: StoreBuffer,
    /// The thread's bulk store groups (see `bulk`).
    pub(crate) bulk: RefCell<StoreGroups>,
}

impl ThreadState {
    /// `%laneid`.
    pub(crate) fn lane(&self) -> u32 {
        self.linear_tid % 32
    }

    /// The warp's index in the block.
    pub(crate) fn warp(&self) -> u32 {
        self.linear_tid / 32
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<ThreadState>>> = const { RefCell::new(None) };
}

/// Makes `state` the emulated thread of this host thread (or clears it).
pub(crate) fn set_current(state: Option<Rc<ThreadState>>) {
    CURRENT.with(|c| *c.borrow_mut() = state);
}

/// Runs `f` with the emulated thread of this host thread, if it is running a kernel (no reference count
/// taken: the weak loads and stores of a copy's every unit come here).
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
    CURRENT.with(|c| c.borrow().as_deref().map(f))
}

/// The emulated thread of this host thread, if it is running a kernel.
pub(crate) fn try_current() -> Option<Rc<ThreadState>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// The emulated thread of this host thread. Panics, naming the fix, when device code runs outside a launch.
#[track_caller]
pub(crate) fn current() -> Rc<ThreadState> {
    match try_current() {
        Some(state) => state,
        None => panic!(
            "ferrocomm-device: a device intrinsic ran outside an emulated launch; run the kernel through \
             ferrocomm_device::emu::launch (or the ferrocomm runtime's emulator team)"
        ),
    }
}
