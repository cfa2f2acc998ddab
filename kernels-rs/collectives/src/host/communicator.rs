//! [`Communicator`]: the buffers the collectives share, the barrier and the point-to-point calls (ping-pong
//! latency, put, get). The collectives themselves are in `collectives.rs`.

use std::fmt;
use std::mem::size_of;

use ferrocomm::{DeviceCopy, LaunchConfig, LaunchGuard, SignalPadBuffer, SymBuffer, Team, TeamGraph};
use ferrocomm_device::ll::LlPacket;

use super::{CommError, Tuning};
use crate::element::V16;
use crate::kernels::{barrier, p2p};
use crate::layout::{
    MAX_WORLD, VECTOR_BYTES, barrier_pad, exchange_pad, ll_slot_packets, one_shot_pad, p2p_pad, two_shot_pad,
};

/// Most payload bytes of a ping-pong (the LL variant carries them in one warp's packets).
pub const PING_MAX_BYTES: usize = 256;

/// The collectives of one team: owns their signal pads, LL buffer and two-shot scratch (all symmetric and
/// allocated once, so calls and graph replays never allocate), and launches one kernel per call.
///
/// Calls take `&mut self` and return the launch's guard: wait on it (or capture the calls into a graph
/// with `Team::capture` and replay it). Every rank of the team takes part in every call.
pub struct Communicator<'t> {
    pub(super) team: &'t Team,
    /// The tuning the kernels launch with: `tuned`, its grids capped by the SM budget.
    pub(super) tuning: Tuning,
    /// The tuning the communicator was made with.
    tuned: Tuning,
    /// Blocks (SMs) per rank every kernel may use, when capped ([`Communicator::set_sm_budget`]).
    sm_budget: Option<u32>,
    pub(super) barrier_pad: SignalPadBuffer,
    pub(super) p2p_pad: SignalPadBuffer,
    pub(super) exchange_pad: SignalPadBuffer,
    /// Epoch of the LL kernels and the one-shot push, and the one-shot's flags.
    pub(super) one_shot_pad: SignalPadBuffer,
    pub(super) two_shot_pad: SignalPadBuffer,
    /// LL regions: 2 parities × world sources × `ll_slot_packets`.
    pub(super) ll: SymBuffer<LlPacket>,
    pub(super) ll_slot_packets: usize,
    /// One-shot staging: 2 parities × world sources × `stage_slot_vectors`.
    pub(super) stage: SymBuffer<V16>,
    pub(super) stage_slot_vectors: usize,
    /// Two-shot scratch: world slots of `slot_vectors` vectors.
    pub(super) scratch: SymBuffer<V16>,
    pub(super) slot_vectors: usize,
    ping: PingBuffers,
}

/// The ping-pong's own small buffers (its LL packets must not share the collectives' LL regions).
struct PingBuffers {
    inbox: SymBuffer<u8>,
    ll: SymBuffer<LlPacket>,
    out: SymBuffer<u64>,
}

/// Which flag protocol a ping-pong uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PingProtocol {
    /// Put, then `st.release.sys` of a flag; the peer spins with `ld.acquire.sys`.
    ReleaseAcquire,
    /// LL packets: data and flag in each 16-byte store, polled until the flag is current.
    Ll,
}

/// A ping-pong's device-timed result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingPong {
    /// Round trips run.
    pub iters: u32,
    /// Nanoseconds the initiator measured with `%globaltimer` for all of them.
    pub total_ns: u64,
}

impl PingPong {
    /// One-way latency in nanoseconds: half a round trip.
    pub fn one_way_ns(&self) -> f64 {
        self.total_ns as f64 / (2.0 * f64::from(self.iters.max(1)))
    }
}

/// Which ranks a put or get connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// One transfer: rank `from` puts into rank `to` (a get: rank `from` reads from rank `to`).
    Pair {
        /// The active rank (the one that writes, or reads).
        from: usize,
        /// The passive rank.
        to: usize,
    },
    /// Every rank `r` puts into (gets from) rank `(r + shift) % world`.
    Shift(usize),
}

impl Route {
    /// `(shift, active ranks bitmask)` as the kernels take them.
    fn encode(self, world: usize) -> Result<(u32, u32), CommError> {
        let bad = |reason| Err(CommError::BadRoute { route: format!("{self:?}"), reason });
        match self {
            Route::Pair { from, to } => {
                if from >= world || to >= world {
                    return bad("both ranks must be in the team");
                }
                if from == to {
                    return bad("a rank cannot put to or get from itself; copy locally instead");
                }
                Ok((((to + world - from) % world) as u32, 1 << from))
            }
            Route::Shift(shift) => {
                if shift % world == 0 {
                    return bad("a shift that is a multiple of the team size moves nothing between ranks");
                }
                Ok(((shift % world) as u32, (1u32 << world) - 1))
            }
        }
    }
}

impl<'t> Communicator<'t> {
    /// A communicator for `team` with [`Tuning::for_team`].
    pub fn new(team: &'t Team) -> Result<Communicator<'t>, CommError> {
        Communicator::with_tuning(team, Tuning::for_team(team)?)
    }

    /// A communicator for `team` with `tuning`; allocates the LL buffer and the scratch it asks for.
    pub fn with_tuning(team: &'t Team, tuning: Tuning) -> Result<Communicator<'t>, CommError> {
        let world = team.world();
        tuning.validate(world)?;
        let ll_slot_packets = ll_slot_packets(tuning.ll_all_reduce_max_bytes.max(tuning.ll_exchange_max_bytes));
        let slot_vectors = tuning.scratch_bytes / VECTOR_BYTES / world;
        let stage_slot_vectors = tuning.one_shot_max_bytes.div_ceil(VECTOR_BYTES);
        Ok(Communicator {
            team,
            barrier_pad: SignalPadBuffer::new(team, "ferrocomm.barrier", barrier_pad::SIGNALS)?,
            p2p_pad: SignalPadBuffer::new(team, "ferrocomm.p2p", p2p_pad::SIGNALS)?,
            exchange_pad: SignalPadBuffer::new(team, "ferrocomm.exchange", exchange_pad::SIGNALS)?,
            one_shot_pad: SignalPadBuffer::new(team, "ferrocomm.one_shot", one_shot_pad::SIGNALS)?,
            two_shot_pad: SignalPadBuffer::new(team, "ferrocomm.two_shot", two_shot_pad::SIGNALS)?,
            ll: SymBuffer::new(team, 2 * world * ll_slot_packets)?,
            ll_slot_packets,
            stage: SymBuffer::new(team, 2 * world * stage_slot_vectors)?,
            stage_slot_vectors,
            scratch: SymBuffer::new(team, world * slot_vectors)?,
            slot_vectors,
            ping: PingBuffers {
                inbox: SymBuffer::new(team, PING_MAX_BYTES)?,
                ll: SymBuffer::new(team, PING_MAX_BYTES / 8)?,
                out: SymBuffer::new(team, 2)?,
            },
            tuned: tuning.clone(),
            tuning,
            sm_budget: None,
        })
    }

    /// Lets every kernel this communicator launches from now on use at most `sms` blocks per rank (one
    /// block per SM at most: the grids are co-resident), as DeepEP's `set_num_sms` does: the other SMs are
    /// left to compute that runs beside the communication. `None` goes back to the tuned grids. A budget
    /// above the tuned grid changes nothing; zero is refused. Calls already captured into a graph keep the
    /// grids they were captured with.
    pub fn set_sm_budget(&mut self, sms: Option<u32>) -> Result<(), CommError> {
        if sms == Some(0) {
            return Err(CommError::BadTuning {
                reason: "an SM budget of 0: every kernel needs at least one block (None lifts the budget)".into(),
            });
        }
        let mut tuning = self.tuned.clone();
        if let Some(sms) = sms {
            tuning.max_blocks = tuning.max_blocks.min(sms);
            tuning.put_blocks = tuning.put_blocks.min(sms);
        }
        self.tuning = tuning;
        self.sm_budget = sms;
        Ok(())
    }

    /// The SM budget set with [`Communicator::set_sm_budget`], if any.
    pub fn sm_budget(&self) -> Option<u32> {
        self.sm_budget
    }

    /// The team.
    pub fn team(&self) -> &'t Team {
        self.team
    }

    /// The tuning in use: the one the communicator was made with, its grids capped by the SM budget.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// Ranks in the team.
    pub fn world(&self) -> usize {
        self.team.world()
    }

    /// Zeroes every signal pad and epoch. Never needed between calls; after a device error (a timed-out
    /// wait leaves the epochs of the ranks out of step) it makes the communicator usable again.
    pub fn reset(&mut self) -> Result<(), CommError> {
        for pad in [
            &mut self.barrier_pad,
            &mut self.p2p_pad,
            &mut self.exchange_pad,
            &mut self.one_shot_pad,
            &mut self.two_shot_pad,
        ] {
            pad.reset()?;
        }
        self.ll.fill(LlPacket::default())?;
        self.ping.ll.fill(LlPacket::default())?;
        Ok(())
    }

    /// Captures the calls `f` makes into a CUDA graph (on the emulator: a recording) with `Team::capture`:
    /// nothing runs until [`TeamGraph::replay`], and the calls' guards return at once. The graph keeps the
    /// buffers it uses alive; the communicator stays usable for direct calls between replays.
    pub fn capture(
        &mut self,
        f: impl FnOnce(&mut Communicator<'t>) -> Result<(), CommError>,
    ) -> Result<TeamGraph<'t>, CommError> {
        let team = self.team;
        let mut failure = None;
        let captured = team.capture(|_| match f(self) {
            Ok(()) => Ok(()),
            Err(CommError::Runtime(e)) => Err(e),
            Err(other) => {
                failure = Some(other);
                // Ends the capture; the caller gets `other` instead.
                Err(ferrocomm::Error::Capturing { what: "a collective call refused during capture" })
            }
        });
        match (captured, failure) {
            (_, Some(e)) => Err(e),
            (graph, None) => Ok(graph?),
        }
    }

    /// A barrier across every rank: nothing after it on any rank's stream starts before everything before
    /// it on every rank's stream is done and visible. One block of one warp.
    pub fn barrier(&mut self) -> Result<LaunchGuard<'_>, CommError> {
        let cfg = LaunchConfig::new(1, 32);
        Ok(barrier::barrier::launch(self.team, cfg, &self.barrier_pad)?)
    }

    /// Ping-pong of `bytes` payload bytes between `initiator` and `responder`, `iters` round trips in one
    /// kernel timed on the device; waits for it. Afterwards each side's inbox ([`Communicator::ping_inbox`])
    /// holds the other's payload (byte `i` of rank `r`'s payload is `(r * 31 + i) % 251`). The initiator
    /// times it: in a team that spans processes, the result of every other process has `total_ns == 0`.
    pub fn ping_pong(
        &mut self,
        initiator: usize,
        responder: usize,
        iters: u32,
        bytes: usize,
        protocol: PingProtocol,
    ) -> Result<PingPong, CommError> {
        let world = self.world();
        for (what, rank) in [("initiator", initiator), ("responder", responder)] {
            if rank >= world {
                return Err(CommError::RankOutOfRange { what, rank, world });
            }
        }
        if initiator == responder {
            return Err(CommError::BadRoute {
                route: format!("ping-pong {initiator} <-> {responder}"),
                reason: "a rank cannot ping-pong with itself",
            });
        }
        if bytes > PING_MAX_BYTES {
            return Err(CommError::TooLarge {
                what: "ping-pong payload",
                bytes,
                max: PING_MAX_BYTES,
                fix: "measure larger transfers with put",
            });
        }
        let ping = &mut self.ping;
        // The kernels send the whole payload buffer: one of exactly `bytes`, filled per rank.
        let mut payload = SymBuffer::<u8>::new(self.team, bytes)?;
        for rank in payload.local_ranks() {
            let pattern: Vec<u8> = (0..bytes).map(|i| ((rank * 31 + i) % 251) as u8).collect();
            payload.copy_from_host(rank, &pattern)?;
        }
        let (init, resp) = (initiator as u32, responder as u32);
        match protocol {
            PingProtocol::ReleaseAcquire => {
                let cfg = LaunchConfig::single();
                p2p::ping_pong::launch(
                    self.team,
                    cfg,
                    &self.p2p_pad,
                    &mut ping.inbox,
                    &payload,
                    init,
                    resp,
                    iters,
                    &mut ping.out,
                )?
                .wait()?;
            }
            PingProtocol::Ll => {
                let cfg = LaunchConfig::new(1, 32);
                p2p::ping_pong_ll::launch(
                    self.team,
                    cfg,
                    &self.p2p_pad,
                    &mut ping.ll,
                    &payload,
                    &mut ping.inbox,
                    init,
                    resp,
                    iters,
                    &mut ping.out,
                )?
                .wait()?;
            }
        }
        // The initiator timed it; in a team that spans processes, the others' processes have no figure.
        let total_ns = if ping.out.local_ranks().contains(&initiator) { ping.out.to_host(initiator)?[0] } else { 0 };
        Ok(PingPong { iters, total_ns })
    }

    /// What rank `rank` received in the last ping-pong (the first `bytes` bytes are the peer's payload).
    pub fn ping_inbox(&self, rank: usize) -> Result<Vec<u8>, CommError> {
        Ok(self.ping.inbox.to_host(rank)?)
    }

    /// Put with signal: along `route`, each active rank copies its `src` into the start of the target's
    /// `dst` with 16-byte stores from up to [`Tuning::put_blocks`] blocks; the target's kernel ends once all
    /// of it has landed (release/acquire per block). The writer first waits for the target to be ready, so
    /// the call is safe anywhere in a stream or graph.
    pub fn put<'a, T: DeviceCopy>(
        &'a mut self,
        src: &'a SymBuffer<T>,
        dst: &'a mut SymBuffer<T>,
        route: Route,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let (shift, active) = route.encode(self.world())?;
        if src.len() > dst.len() {
            return Err(CommError::LengthMismatch {
                what: "put destination (at least the source's length)",
                expected: src.len(),
                found: dst.len(),
            });
        }
        let cfg = self.put_config(src.len() * size_of::<T>());
        Ok(p2p::put_signal::launch(self.team, cfg, src.bytes(), dst.bytes_mut(), &self.p2p_pad, shift, active)?)
    }

    /// Get: along `route`, each active rank reads the start of the source rank's `src` into its `dst` (as
    /// many elements as `dst` holds) with 16-byte loads from up to [`Tuning::put_blocks`] blocks. The source
    /// says when its data is ready and waits until every read is done.
    pub fn get<'a, T: DeviceCopy>(
        &'a mut self,
        dst: &'a mut SymBuffer<T>,
        src: &'a SymBuffer<T>,
        route: Route,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let (shift, active) = route.encode(self.world())?;
        if dst.len() > src.len() {
            return Err(CommError::LengthMismatch {
                what: "get source (at least the destination's length)",
                expected: dst.len(),
                found: src.len(),
            });
        }
        let cfg = self.put_config(dst.len() * size_of::<T>());
        Ok(p2p::get::launch(self.team, cfg, dst.bytes_mut(), src.bytes(), &self.p2p_pad, shift, active)?)
    }

    fn put_config(&self, bytes: usize) -> LaunchConfig {
        let t = &self.tuning;
        LaunchConfig::new(t.blocks_for(bytes.div_ceil(VECTOR_BYTES), t.put_threads, t.put_blocks), t.put_threads)
            .with_shared_bytes(t.staging_for(bytes))
    }
}

impl fmt::Debug for Communicator<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("team", &self.team.id())
            .field("world", &self.world())
            .field("tuning", &self.tuning)
            .field("ll_slot_packets", &self.ll_slot_packets)
            .field("stage_slot_vectors", &self.stage_slot_vectors)
            .field("slot_vectors", &self.slot_vectors)
            .finish()
    }
}

const _: () = assert!(MAX_WORLD <= 32, "route bitmasks are u32");
