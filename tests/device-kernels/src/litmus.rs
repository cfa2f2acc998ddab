//! The message-passing litmus test across ranks: does a reader that saw the flag also see the data?
//!
//! Every thread of the grid is one side of a writer/reader pair; pair `t` joins thread `t` of rank `r`
//! with thread `t` of rank `r ^ 1`, and whole warps share a role (the warp's index plus the rank is even:
//! writer), so both directions run at once and no warp diverges on its role. One trial:
//!
//! ```text
//! writer (rank r)                               reader (rank r ^ 1)
//! wait ack >= seq - 1          (acquire)
//! data[k] = word(seq, k)       (weak stores, into the reader's copy over NVLink)
//! ready = seq                  (release | relaxed)  ->  wait ready >= seq   (acquire | relaxed)
//!                                                      read data[k]         (weak loads, local copy)
//!                                                      stale += any data[k] != word(seq, k)
//! ack >= seq - 1  <-----------------------------------  ack = seq           (release)
//! ```
//!
//! [`message_passing`](fn@message_passing) raises and polls the flag with release / acquire (`st.release.sys`,
//! `ld.acquire.sys`): the PTX memory model forbids a stale read. [`message_passing_relaxed`](fn@message_passing_relaxed) is its
//! weakened twin (`st.relaxed.sys`, `ld.relaxed.sys`, no fence): nothing orders the data with the flag, so a
//! stale read is allowed (whether the hardware ever shows one is what the test reports). The ack keeps
//! release / acquire in both, so a mismatch can only be an older message, never a newer one.
//!
//! Flags are monotonic: each side continues its pair's sequence from the flag it raises itself (which the
//! other side never writes), so the kernels run again and again on the same pad without a reset.

use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

/// `u32` words each message carries.
pub const MESSAGE_WORDS: usize = 4;
/// `u64`s each thread reports in `results`: [`TRIALS`], [`STALE`], [`ELAPSED_NS`].
pub const RESULT_WORDS: usize = 3;
/// Result slot: messages this thread read as a reader (0 for writers).
pub const TRIALS: usize = 0;
/// Result slot: trials in which at least one data word was not the current message's.
pub const STALE: usize = 1;
/// Result slot: `%globaltimer` nanoseconds from this thread's first trial to its last.
pub const ELAPSED_NS: usize = 2;

/// Signals per pair in the pad: the reader's `ready` flag and the writer's `ack`.
pub const SIGNALS_PER_PAIR: usize = 2;

/// Data word `k` of message `seq`: consecutive messages differ in every word (the multiplier is odd).
#[inline(always)]
pub const fn message_word(seq: u64, k: usize) -> u32 {
    (seq as u32).wrapping_mul(0x9E37_79B9) ^ k as u32
}

/// Index of word `k` of pair `t` in `data`: the words of one pair lie `pairs` apart (other cache lines
/// than the flag and than each other), while a warp's stores of one word are contiguous.
#[inline(always)]
pub const fn data_index(pairs: usize, t: usize, k: usize) -> usize {
    k * pairs + t
}

/// Whether thread `t` of rank `rank` writes (else it reads).
#[inline(always)]
pub const fn is_writer(rank: u32, t: usize) -> bool {
    (t / 32 + rank as usize).is_multiple_of(2)
}

/// How the flag of a message is raised and polled.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flag {
    ReleaseAcquire,
    Relaxed,
}

/// One thread's part of the litmus test; see the module docs.
#[inline(always)]
fn litmus(flag: Flag, data: SymSliceMut<u32>, pad: SignalPad, trials: u32, results: &mut [u64]) {
    let t = global_thread_idx();
    let pairs = global_threads();
    let rank = team::rank();
    let peer = rank ^ 1;
    let (ready_index, ack_index) = (SIGNALS_PER_PAIR * t, SIGNALS_PER_PAIR * t + 1);
    let out = &mut results[RESULT_WORDS * t..RESULT_WORDS * (t + 1)];
    let start = globaltimer();
    if is_writer(rank, t) {
        let ack = pad.local(ack_index);
        let ready = pad.peer(peer, ready_index);
        let inbox = data.peer(peer);
        // Each side continues from the flag it raises itself: the peer never writes that one, so it holds
        // what this side left at the end of the previous launch.
        let base = ready.load_relaxed();
        for i in 1..=u64::from(trials) {
            let seq = base + i;
            // The reader is done with the previous message before its words are overwritten.
            ack.wait_ge(seq - 1);
            for k in 0..MESSAGE_WORDS {
                // SAFETY: only this thread writes these words, and the reader reads them only between a
                // flag and its ack; the index is in bounds (the host sized `data`).
                unsafe { inbox.write(data_index(pairs, t, k), message_word(seq, k)) };
            }
            match flag {
                Flag::ReleaseAcquire => ready.set_release(seq),
                Flag::Relaxed => ready.set_relaxed(seq),
            }
        }
        out[TRIALS] = 0;
        out[STALE] = 0;
    } else {
        let ready = pad.local(ready_index);
        let ack = pad.peer(peer, ack_index);
        let inbox = data.local();
        // As for the writer (`ready` may already hold this launch's first message).
        let base = ack.load_relaxed();
        let mut stale = 0u64;
        for i in 1..=u64::from(trials) {
            let seq = base + i;
            match flag {
                Flag::ReleaseAcquire => ready.wait_ge(seq),
                Flag::Relaxed => ready.wait_relaxed(Cmp::Ge, seq),
            };
            let mut fresh = true;
            for k in 0..MESSAGE_WORDS {
                // SAFETY: the writer does not touch these words until the ack below; in bounds as above.
                fresh &= unsafe { inbox.read(data_index(pairs, t, k)) } == message_word(seq, k);
            }
            stale += u64::from(!fresh);
            // Release: this trial's reads are done before the writer may store the next message.
            ack.set_release(seq);
        }
        out[TRIALS] = u64::from(trials);
        out[STALE] = stale;
    }
    out[ELAPSED_NS] = globaltimer() - start;
}

/// Message passing with a release flag and acquire polls: no stale read is allowed.
///
/// Needs an even team; `data` holds `MESSAGE_WORDS * threads` words, `pad` `SIGNALS_PER_PAIR * threads`
/// signals and `results` `RESULT_WORDS * threads` values (threads: of the whole grid, the same on every
/// rank). Every thread runs `trials` trials; each wait has the launch's timeout.
#[kernel]
pub fn message_passing(data: SymSliceMut<u32>, pad: SignalPad, trials: u32, results: &mut [u64]) {
    litmus(Flag::ReleaseAcquire, data, pad, trials, results);
}

/// [`message_passing`](fn@message_passing)'s weakened twin: relaxed flag store and relaxed polls, no fence; stale reads are
/// allowed and counted. Same layout and requirements.
#[kernel]
pub fn message_passing_relaxed(data: SymSliceMut<u32>, pad: SignalPad, trials: u32, results: &mut [u64]) {
    litmus(Flag::Relaxed, data, pad, trials, results);
}
