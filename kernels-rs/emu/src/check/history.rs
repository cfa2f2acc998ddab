//! What a team's launches leave to the launches after them: the shadow of tracked accesses, the atomics'
//! publications, and which ends of launches (see [`clock`](super::clock)) each rank's stream and the host
//! know of.
//!
//! A rank's stream runs its launches in order, so a launch starts knowing its rank's earlier ends and
//! what that rank knew at them. The host knows a rank's ends once it has seen the rank's stream idle (a
//! synchronisation), and every launch queued after that knows them too. Nothing else orders launches: a
//! kernel on one rank may run while its peer is still in an earlier one, as on GPUs, so a put into a
//! buffer that the peer's earlier kernel may still read must follow a signal from that peer, and a kernel
//! that reads a put of an earlier launch must know, through its rank or a signal, that the put happened.

use std::sync::{Arc, Mutex};

use super::AddrMap;
use super::atomics::SyncVar;
use super::clock::Clock;
use super::report::Geometry;
use super::shadow::Shadow;
use crate::block::lock;

/// The checker's state shared by every launch of one emulated team.
#[derive(Debug)]
pub(crate) struct History {
    world: u32,
    pub(crate) shadow: Shadow,
    pub(crate) syncvars: Mutex<AddrMap<Arc<SyncVar>>>,
    /// The shape of launch `l` at index `l - 1`.
    launches: Mutex<Vec<Geometry>>,
    /// Per rank, the ends its stream knows: what its next launch starts knowing.
    streams: Mutex<Vec<Vec<u32>>>,
    /// The ends the host knows (it saw those ranks' streams idle).
    host: Mutex<Vec<u32>>,
}

fn join_ends(into: &mut Vec<u32>, other: &[u32]) {
    if into.len() < other.len() {
        into.resize(other.len(), 0);
    }
    for (i, o) in into.iter_mut().zip(other) {
        *i = (*i).max(*o);
    }
}

impl History {
    /// The history of a team of `world` ranks that has launched nothing yet.
    pub(crate) fn new(world: u32) -> History {
        History {
            world,
            shadow: Shadow::default(),
            syncvars: Mutex::new(AddrMap::default()),
            launches: Mutex::new(Vec::new()),
            streams: Mutex::new(vec![vec![0; world as usize]; world as usize]),
            host: Mutex::new(vec![0; world as usize]),
        }
    }

    /// Ranks of the team.
    pub(crate) fn world(&self) -> u32 {
        self.world
    }

    /// A launch shaped `geometry` is queued: its number, and the ends the host knows now (every rank's
    /// grid of it starts knowing them).
    pub(crate) fn begin(&self, geometry: Geometry) -> (u32, Vec<u32>) {
        let mut launches = lock(&self.launches);
        launches.push(geometry);
        let launch = u32::try_from(launches.len()).unwrap_or(u32::MAX);
        (launch, lock(&self.host).clone())
    }

    /// The shape of launch `launch`.
    pub(crate) fn geometry(&self, launch: u32) -> Option<Geometry> {
        lock(&self.launches).get((launch as usize).checked_sub(1)?).copied()
    }

    /// What rank `rank`'s grid of a launch that the host queued knowing `host` starts knowing.
    pub(crate) fn start(&self, rank: u32, host: &[u32]) -> Vec<u32> {
        let mut ends = lock(&self.streams).get(rank as usize).cloned().unwrap_or_default();
        join_ends(&mut ends, host);
        ends
    }

    /// Rank `rank` ended its grid of launch `launch` knowing `known`, a clock of that launch whose
    /// per-rank part starts at `fine`: its stream knows that end from now on, and the accesses of the
    /// launch it knew of are marked as known at it.
    pub(crate) fn rank_ended(&self, launch: u32, rank: u32, known: &Clock, fine: usize, others_known: bool) {
        let mut ends = known.get(fine..).map(<[u32]>::to_vec).unwrap_or_default();
        if ends.len() <= rank as usize {
            ends.resize(rank as usize + 1, 0);
        }
        ends[rank as usize] = launch;
        if others_known {
            self.shadow.rank_ended(launch, rank, known);
        }
        if let Some(stream) = lock(&self.streams).get_mut(rank as usize) {
            join_ends(stream, &ends);
        }
    }

    /// The host saw rank `rank`'s stream idle: it, and what it queues next, knows the rank's ends.
    pub(crate) fn host_waited(&self, rank: u32) {
        let stream = lock(&self.streams).get(rank as usize).cloned().unwrap_or_default();
        join_ends(&mut lock(&self.host), &stream);
    }

    /// The host wrote, cleared or freed bytes `[addr, addr + bytes)` while no kernel used them: the
    /// accesses and publications kernels made there are forgotten.
    pub(crate) fn forget(&self, addr: usize, bytes: usize) {
        let end = addr.saturating_add(bytes);
        self.shadow.forget(addr, end);
        lock(&self.syncvars).retain(|&a, _| a < addr || a >= end);
    }
}
