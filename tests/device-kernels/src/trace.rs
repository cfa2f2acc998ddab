//! Kernels the trace-mode tests launch (`tests/tests/gpu_trace.rs`): a ring exchange whose events are
//! known in order, with a planted hang (one rank's block skips its signal), and a flood of marks that
//! overflows a small ring.

use ferrocomm_device::prelude::*;
use ferrocomm_device::{kernel, trace};

/// Every rank's block `b` puts `src` into slot `b` of the next rank's `dst` and adds 1 to that rank's
/// signal `b`, then its thread 0 waits for its own signal `b` to reach the launch's epoch. Rank
/// `skip_rank`'s block `skip_block` skips its put and signal: the next rank's block `skip_block` then waits
/// until the timeout (a planted hang; `u32::MAX` skips nothing).
///
/// Thread 0 of each block records, in order: the mark `ring`, the put's begin and end, the signal, the
/// wait's begin and end, and the epoch advance (with barriers between). `dst` holds `len(src)` per block.
#[kernel]
pub fn traced_ring(src: &[u32], dst: SymSliceMut<u32>, pad: SignalPad, skip_rank: u32, skip_block: u32) {
    let (rank, world) = (team::rank(), team::world());
    let block = block_rank();
    let session = pad.session();
    if thread_rank() == 0 {
        trace::mark("ring");
    }
    let next = session.channel((rank + 1) % world);
    let n = src.len();
    if !(rank == skip_rank && block == skip_block) {
        let slot = next.remote(dst).slice(block as usize * n, n);
        put_signal(Group::Block, slot, src, next.signal(block as usize), SignalOp::Add(1));
    }
    if thread_rank() == 0 {
        session.local(block as usize).wait_ge(session.epoch());
    }
    sync_threads();
}

/// Every thread records `marks` marks: more than a small ring holds.
#[kernel]
pub fn trace_flood(marks: u32) {
    for _ in 0..marks {
        trace::mark("flood");
    }
}
