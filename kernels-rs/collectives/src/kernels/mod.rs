//! The kernels, one module per family. Each `#[kernel]` is a PTX entry on the GPU and, on the host, an
//! emulator body plus a typed launcher (`<kernel>::launch`); the host API
//! ([`Communicator`](crate::Communicator)) launches them for you.
//!
//! | module | kernels |
//! | --- | --- |
//! | [`barrier`] | `barrier` |
//! | [`p2p`] | `ping_pong`, `ping_pong_ll`, `put_signal`, `get` |
//! | [`exchange`] | `exchange_ll`, `exchange_staged`, `exchange_direct`: broadcast, all-gather, all-to-all |
//! | [`all_reduce_ll`] | `all_reduce_ll_{f32,f16,bf16}`: one-shot LL all-reduce for small messages |
//! | [`one_shot`] | `one_shot_{f32,f16,bf16}`: one-shot push all-reduce for mid-size messages |
//! | [`two_shot`] | `two_shot_{f32,f16,bf16}`: all-reduce for large messages, reduce-scatter |
//! | [`tp_decode`] | tensor-parallel decode: `tp_gemv`, `tp_split_sum`, `tp_norm`, `tp_reduce_norm`, `tp_fused` |
//! | [`proxy`] | the device side of the host-proxy baseline (descriptor ring), and a device clock stamp |

//!
//! The kernels are safe code: every access goes through the device library's views, so `unsafe` is
//! forbidden here.
#![forbid(unsafe_code)]

pub mod all_reduce_ll;
pub mod barrier;
pub mod exchange;
pub mod one_shot;
pub mod p2p;
pub mod proxy;
pub mod tp_decode;
pub mod two_shot;

use ferrocomm_device::prelude::*;

/// Polls of a spin wait (a signal, or an LL vector's packets) before it starts to back off: on the GPU
/// long enough to cover a peer's round trip without ever sleeping on the latency-critical path; in the
/// emulator short, because spinning host threads take the CPU from the threads they wait for.
#[cfg(target_arch = "nvptx64")]
pub(crate) const SPIN_POLLS: u32 = 1 << 14;
#[cfg(not(target_arch = "nvptx64"))]
pub(crate) const SPIN_POLLS: u32 = 64;

/// Waits until `signal >= value` (acquire), first [`SPIN_POLLS`] times in a tight loop with no back-off —
/// the ping-pong's fast path — then backing off until the timeout, as every wait does.
#[inline(always)]
#[track_caller]
pub(crate) fn spin_wait_ge(signal: Signal, value: u64) {
    signal.spin_wait_acquire(Cmp::Ge, value, SPIN_POLLS);
}

/// The sequence base of the ping-pong and proxy kernels, `sequence` (this rank's own signal): iterations
/// every rank has run so far, so their flag values only grow. Thread 0 of block 0 reads it (the LL
/// ping-pong's other lanes get it from lane 0 with a shuffle) and, once its iterations are done, advances
/// it by `iters` ([`advance_sequence`], participants or not), keeping it equal on all ranks. No other
/// thread reads it, so no barrier has to hold the advance back until they have.
#[inline(always)]
pub(crate) fn sequence_base(sequence: Signal) -> u64 {
    if block_rank() == 0 && thread_rank() == 0 { sequence.load_relaxed() } else { 0 }
}

/// Thread 0 of block 0 advances the sequence base it read (see [`sequence_base`]).
#[inline(always)]
pub(crate) fn advance_sequence(sequence: Signal, base: u64, iters: u32) {
    if block_rank() == 0 && thread_rank() == 0 {
        sequence.set_relaxed(base + u64::from(iters));
    }
}

/// Whether this thread speaks for peer `t` of the block's signalling: thread `t` of the block handles peer
/// `t`'s signals, so the waits on different peers overlap.
#[inline(always)]
pub(crate) fn peer_thread(rank: usize, world: usize) -> Option<u32> {
    let t = thread_rank() as usize;
    if t < world && t != rank { Some(t as u32) } else { None }
}
