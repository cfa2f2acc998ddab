//! The threads that share one piece of work: one thread, its warp, or its block. Cooperative data movement
//! (`put`, `get`, `put_signal`, LL sends and reads, vector copies) takes a [`Group`]; every thread of the
//! group calls it with the same arguments and does its share. The group is a value, so one function serves
//! all three; it is known at compile time wherever the call is inlined, and the dispatch folds away.
//!
//! ```
//! use ferrocomm_device::prelude::*;
//! fn send(dst: PeerSliceMut<f32>, src: &[f32]) {
//!     put(Group::Block, dst, src); // every thread of the block, each its share
//! }
//! ```

use crate::index::{block_size, lane_id, thread_rank, warp_lanes, warp_mask};
use crate::sync::{sync_threads, sync_warp};

/// One thread, its warp, or its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// The calling thread alone.
    Thread,
    /// The calling thread's warp (the lanes of `warp_mask()`).
    Warp,
    /// The calling thread's block.
    Block,
}

impl Group {
    /// `(this thread's index in the group, the group's size)`.
    #[inline(always)]
    pub fn position(self) -> (usize, usize) {
        match self {
            Group::Thread => (0, 1),
            Group::Warp => (lane_id() as usize, warp_lanes() as usize),
            Group::Block => (thread_rank() as usize, block_size() as usize),
        }
    }

    /// Waits for every thread of the group (`bar.warp.sync` / `barrier.sync 0`); orders their memory
    /// accesses before the barrier before every access after it, within the block.
    #[inline(always)]
    pub fn sync(self) {
        match self {
            Group::Thread => {}
            Group::Warp => sync_warp(warp_mask()),
            Group::Block => sync_threads(),
        }
    }

    /// Whether this thread speaks for the group (raises its signals): its first thread.
    #[inline(always)]
    pub fn is_leader(self) -> bool {
        self.position().0 == 0
    }
}
