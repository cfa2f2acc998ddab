//! A ping-pong between two ranks, timed on the device and verified: one kernel runs `iters` round trips
//! (the initiator times them with `%globaltimer`), and afterwards each side's inbox must hold the other's
//! payload.

use ferrocomm::Backend;
use ferrocomm_kernels::{Communicator, PingProtocol};

use crate::error::{ExampleError, check_equal};

/// Round trips per measurement on GPUs.
pub const GPU_ITERS: u32 = 10_000;
/// Round trips per measurement on the emulator.
pub const EMULATOR_ITERS: u32 = 200;

/// The default round trips for a backend.
pub fn default_iters(backend: Backend) -> u32 {
    match backend {
        Backend::Cuda => GPU_ITERS,
        Backend::Emulator => EMULATOR_ITERS,
    }
}

/// The outcome of [`ping_pong`]: both inboxes were right, and the one-way latency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingPongResult {
    /// The flag protocol.
    pub protocol: PingProtocol,
    /// Payload bytes each way.
    pub bytes: usize,
    /// The two ranks.
    pub ranks: (usize, usize),
    /// Round trips timed.
    pub iters: u32,
    /// One-way latency (half a round trip) in nanoseconds, device-timed; `None` in the processes of a
    /// team that spans processes other than the initiator's, which timed it.
    pub one_way_ns: Option<f64>,
}

impl PingPongResult {
    /// One line: `ping-pong LL 8 B, ranks 0 <-> 1: 0.68 us one way (10000 round trips)  verified`.
    pub fn line(&self) -> String {
        let protocol = match self.protocol {
            PingProtocol::Ll => "LL packets",
            PingProtocol::ReleaseAcquire => "release/acquire",
        };
        let time = match self.one_way_ns {
            Some(ns) => format!("{:>8.3} us one way", ns / 1e3),
            None => format!("timed by rank {}", self.ranks.0),
        };
        format!(
            "ping-pong {protocol:<15} {:>3} B, ranks {} <-> {}: {time} ({} round trips)   verified",
            self.bytes, self.ranks.0, self.ranks.1, self.iters
        )
    }
}

/// Ping-pong of `bytes` payload bytes (at most 256) between `initiator` and `responder`, `iters` round
/// trips with `protocol`; checks that each side received the other's payload.
pub fn ping_pong(
    comm: &mut Communicator<'_>,
    initiator: usize,
    responder: usize,
    iters: u32,
    bytes: usize,
    protocol: PingProtocol,
) -> Result<PingPongResult, ExampleError> {
    let measured = comm.ping_pong(initiator, responder, iters, bytes, protocol)?;
    // Byte `i` of rank `r`'s payload is `(r * 31 + i) % 251` (see `Communicator::ping_pong`).
    // In a team that spans processes, each process checks the inbox of its own rank.
    let local = comm.team().local_ranks();
    for (rank, peer) in [(initiator, responder), (responder, initiator)].into_iter().filter(|(r, _)| local.contains(r))
    {
        let want: Vec<u8> = (0..bytes).map(|i| ((peer * 31 + i) % 251) as u8).collect();
        let inbox = comm.ping_inbox(rank)?;
        let got = inbox.get(..bytes).unwrap_or(&inbox);
        check_equal(&format!("ping-pong {protocol:?} {bytes} B, inbox"), rank, &want, got)?;
    }
    Ok(PingPongResult {
        protocol,
        bytes,
        ranks: (initiator, responder),
        iters: measured.iters,
        one_way_ns: (measured.total_ns > 0).then(|| measured.one_way_ns()),
    })
}
