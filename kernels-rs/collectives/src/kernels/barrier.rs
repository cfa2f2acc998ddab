//! The barrier: no rank leaves it before every rank has entered it, and everything a rank's stream did
//! before the barrier is visible to every rank's stream after it.

use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

use super::peer_thread;
use crate::layout::barrier_pad;

/// Every rank raises its `arrived` signal on every peer with release ordering (the value is the pad's
/// epoch, so it only grows) and waits, with acquire loads, until every peer's signal has reached the
/// epoch. Thread `q` of block 0 talks to rank `q`, so the waits overlap. Launch one block of at least
/// `world` threads.
#[kernel]
pub fn barrier(pad: SignalPad) {
    let (rank, world) = (team::rank() as usize, team::world() as usize);
    let session = pad.session();
    if block_rank() == 0
        && let Some(ch) = peer_thread(rank, world).map(|q| session.channel(q))
    {
        ch.signal(barrier_pad::arrived(rank)).set_release(session.epoch());
        ch.inbox(barrier_pad::arrived(ch.peer() as usize)).wait_ge(session.epoch());
    }
}
