//! The gpu mode's checks: before an operation is timed, the library runs it on deterministic inputs and
//! every rank's result is compared with the library's CPU reference (`ferrocomm_kernels::verify`), at one
//! size per algorithm or transport the sweep will reach (sizes derived from the communicator's tuning,
//! so the emulator's tiny thresholds are covered the same way as the GPUs').
//!
//! Every check writes and reads only the ranks this process runs: all of them in a team of one process,
//! its own in a team that spans processes (where each process checks its own rank, as the library's
//! `verify` functions do).

use ferrocomm::SymBuffer;
use ferrocomm_device::{bf16, f16};
use ferrocomm_kernels::verify::{self, Sample, VerifyError};
use ferrocomm_kernels::{Communicator, Op, PingProtocol, Reducible, Route};

use crate::backend::BackendError;
use crate::ferro::comm;
use crate::ferro::gpu_mode::PING_MAX_BYTES;
use crate::model::{Dtype, Mode, Operation};
use crate::reference::first_difference;

/// Seed of the checks' input patterns.
const SEED: u64 = 0x5eed_0b5e;

/// Byte `i` of rank `rank`'s ping-pong payload, as `Communicator::ping_pong` fills it.
pub fn ping_payload(rank: usize, bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| ((rank * 31 + i) % 251) as u8).collect()
}

/// Three sizes around two thresholds (`low <= high`): below the first, between, above the second; odd, so
/// vector tails are covered.
pub fn around(low: usize, high: usize) -> [usize; 3] {
    let high = high.max(low);
    [low / 2 + 3, (low + high) / 2 + 3, high + 17]
}

fn mismatch(op: Operation) -> impl Fn(VerifyError) -> BackendError {
    move |e| match e {
        VerifyError::Comm(e) => comm(Mode::Gpu)(e),
        other => BackendError::Verification { mode: Mode::Gpu, op, detail: other.to_string() },
    }
}

/// Checks `op` with elements of `dtype` (ping-pong and put move bytes whatever the type). `protocols`: the
/// ping-pong kernels to check; `put_pings`: also the two-put round trip used above their payload limit.
pub fn check(
    comm_: &mut Communicator<'_>,
    op: Operation,
    dtype: Dtype,
    protocols: &[PingProtocol],
    put_pings: bool,
) -> Result<(), BackendError> {
    let t = comm_.tuning().clone();
    let err = mismatch(op);
    match op {
        Operation::PingPong => {
            for &protocol in protocols {
                for bytes in [1, 8, PING_MAX_BYTES] {
                    ping(comm_, protocol, bytes)?;
                }
            }
            if put_pings {
                round_trip(comm_, 3 * 4096 + 24)?;
            }
            Ok(())
        }
        Operation::PutBandwidth => {
            let full_grid = t.put_threads as usize * t.put_blocks as usize * t.vectors_per_thread as usize * 16;
            for (i, len) in [3 * 4096 + 24, full_grid + 5].into_iter().enumerate() {
                let route = Route::Pair { from: 0, to: 1 };
                verify::put_or_get::<u8>(comm_, len, len, route, false, SEED + i as u64).map_err(&err)?;
            }
            Ok(())
        }
        Operation::AllReduce => match dtype {
            Dtype::Bf16 => all_reduce::<bf16>(comm_, op),
            Dtype::F16 => all_reduce::<f16>(comm_, op),
            Dtype::F32 => all_reduce::<f32>(comm_, op),
            Dtype::U8 => Err(unsupported_u8()),
        },
        Operation::AllGather => {
            for (i, len) in around(t.ll_exchange_max_bytes, t.one_shot_max_bytes).into_iter().enumerate() {
                verify::all_gather::<u8>(comm_, len, SEED + i as u64).map_err(&err)?;
            }
            Ok(())
        }
        Operation::AllToAll => {
            let world = comm_.world();
            let counts = vec![vec![1u32; world]; world];
            for (i, row) in around(t.ll_exchange_max_bytes, t.one_shot_max_bytes).into_iter().enumerate() {
                verify::all_to_all::<u8>(comm_, &counts, row, 1, SEED + i as u64).map_err(&err)?;
            }
            Ok(())
        }
    }
}

/// Why the gpu mode has no `u8` all-reduce.
pub fn unsupported_u8() -> BackendError {
    BackendError::Unsupported {
        mode: Mode::Gpu,
        op: Operation::AllReduce,
        reason: "the library reduces f32, f16 and bf16; pass --dtype bf16 (or f16, f32)".into(),
    }
}

/// An all-reduce at one size per algorithm (by the size's own choice, twice in a row for the epochs), and
/// a few replays of a captured graph of three.
fn all_reduce<T: Reducible + Sample>(comm_: &mut Communicator<'_>, op: Operation) -> Result<(), BackendError> {
    let t = comm_.tuning().clone();
    let elem = size_of::<T>();
    let err = mismatch(op);
    for (i, bytes) in around(t.ll_all_reduce_max_bytes, t.one_shot_max_bytes).into_iter().enumerate() {
        let len = (bytes / elem).max(1);
        verify::all_reduce::<T>(comm_, len, Op::Sum, None, 2, SEED + i as u64).map_err(&err)?;
    }
    let small = (t.ll_all_reduce_max_bytes / 2 / elem).max(1);
    verify::all_reduce_graph::<T>(comm_, small, 3, 3, 1, SEED).map_err(&err)
}

/// One ping-pong kernel of two round trips carrying `bytes`; each side must hold the other's payload (each
/// side this process runs; the initiator's process has the time).
fn ping(comm_: &mut Communicator<'_>, protocol: PingProtocol, bytes: usize) -> Result<(), BackendError> {
    let op = Operation::PingPong;
    let local = comm_.team().local_ranks();
    let result = comm_.ping_pong(0, 1, 2, bytes, protocol).map_err(comm(Mode::Gpu))?;
    if result.total_ns == 0 && local.contains(&0) {
        let detail = format!("{protocol:?} ping-pong of {bytes} B reported no time");
        return Err(BackendError::Verification { mode: Mode::Gpu, op, detail });
    }
    for (rank, peer) in [(0, 1), (1, 0)].into_iter().filter(|(rank, _)| local.contains(rank)) {
        let inbox = comm_.ping_inbox(rank).map_err(comm(Mode::Gpu))?;
        let what = format!("{protocol:?} ping-pong of {bytes} B, rank {rank}'s inbox");
        let got = inbox.get(..bytes).unwrap_or(&inbox);
        if let Some(detail) = first_difference(&what, got, &ping_payload(peer, bytes), Dtype::U8) {
            return Err(BackendError::Verification { mode: Mode::Gpu, op, detail });
        }
    }
    Ok(())
}

/// The round trip the gpu mode times for ping-pongs above the kernels' payload: rank 0's `a` put into
/// rank 1's `b`, rank 1's `b` put back into rank 0's `c`.
pub fn put_round_trip(
    comm_: &mut Communicator<'_>,
    a: &SymBuffer<u8>,
    b: &mut SymBuffer<u8>,
    c: &mut SymBuffer<u8>,
) -> Result<(), ferrocomm_kernels::CommError> {
    comm_.put(a, b, Route::Pair { from: 0, to: 1 })?.wait()?;
    comm_.put(b, c, Route::Pair { from: 1, to: 0 })?.wait()?;
    Ok(())
}

/// [`put_round_trip`] of `bytes` on known inputs: rank 1 must get rank 0's payload, and rank 0 its own back
/// (each checked by the process that runs the rank).
fn round_trip(comm_: &mut Communicator<'_>, bytes: usize) -> Result<(), BackendError> {
    let team = comm_.team();
    let local = team.local_ranks();
    let runtime = |e: ferrocomm::Error| comm(Mode::Gpu)(e.into());
    let mut a = SymBuffer::<u8>::new(team, bytes).map_err(runtime)?;
    let payload = ping_payload(0, bytes);
    for rank in [0, 1].into_iter().filter(|r| local.contains(r)) {
        a.copy_from_host(rank, &ping_payload(rank, bytes)).map_err(runtime)?;
    }
    let mut b = SymBuffer::<u8>::new(team, bytes).map_err(runtime)?;
    let mut c = SymBuffer::<u8>::new(team, bytes).map_err(runtime)?;
    put_round_trip(comm_, &a, &mut b, &mut c).map_err(comm(Mode::Gpu))?;
    let reads = [(1, "rank 1 after the first put", &b), (0, "rank 0 after the round trip", &c)];
    for (what, got) in
        reads.into_iter().filter(|(r, ..)| local.contains(r)).map(|(r, what, buf)| (what, buf.to_host(r)))
    {
        let got = got.map_err(runtime)?;
        let what = format!("two-put ping-pong of {bytes} B, {what}");
        if let Some(detail) = first_difference(&what, &got, &payload, Dtype::U8) {
            return Err(BackendError::Verification { mode: Mode::Gpu, op: Operation::PingPong, detail });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_straddle_the_thresholds() {
        let [a, b, c] = around(256, 1024);
        assert!(a < 256 && (256..=1024).contains(&b) && c > 1024);
        assert!([a, b, c].iter().all(|s| s % 2 == 1));
        let [a, b, c] = around(128 << 10, 4 << 20);
        assert!(a < 128 << 10 && b > 128 << 10 && b <= 4 << 20 && c > 4 << 20);
        // A high threshold below the low one (a tuning with the middle path switched off) still orders.
        let [a, b, c] = around(1000, 10);
        assert!(a < 1000 && b <= 1003 && c > 1000);
    }

    #[test]
    fn ping_payloads_differ_per_rank() {
        assert_eq!(ping_payload(0, 3), [0, 1, 2]);
        assert_eq!(ping_payload(1, 3), [31, 32, 33]);
        assert_eq!(ping_payload(0, 300)[251], 0);
    }
}
