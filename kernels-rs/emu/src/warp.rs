//! One emulated warp: the rendezvous behind `shfl.sync`, `vote.sync` and `bar.warp.sync`.
//!
//! The rule the emulator applies, whatever order the lanes arrive in:
//!
//! > A warp-synchronous call with member mask `M` completes once every lane of `M` has made a call with
//! > the same mask `M`, or has exited without making any other warp-synchronous call since it last took
//! > part in a call together with the caller.
//!
//! So lanes that return early before a full-mask shuffle are fine (the PTX ISA waits for the *non-exited*
//! lanes of the mask), and divergent branches may use disjoint masks (several rounds are in progress at
//! once, one per mask). What is reported, as [`WarpError::MaskMismatch`], is a lane named in a round that
//! made a different call instead: whether it did so before the round started (it then exited, or it waits
//! in a round that can never complete) or after.
//!
//! The judgment depends only on each lane's own sequence of calls, never on when they happen: a lane's
//! count of completed calls and, for every pair of lanes, that count as of their last common call are
//! enough to tell "exited before reaching this call" from "made another call, then exited". Rounds that
//! wait on each other in a cycle can never complete either, and are reported as soon as every lane they
//! wait for is blocked.

use std::sync::{Condvar, Mutex, PoisonError};

use super::block::lock;
use super::check::{Clock, Deposit, join_deposits};
use super::launch::Launch;

/// Why a warp operation did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarpError {
    /// The launch trapped; the thread must exit.
    Trapped,
    /// The round with the caller's mask can never complete: `lane`, named in it, made a call with member
    /// mask `other` instead.
    MaskMismatch {
        /// The lane that made another call.
        lane: u32,
        /// The member mask of that other call.
        other: u32,
    },
}

/// The lanes' values of one completed round.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    /// Each participating lane's value (others: 0).
    pub values: [u64; 32],
    /// The lanes that took part: the member mask less exited lanes.
    pub participants: u32,
}

/// A round in progress: the calls with one member mask that have arrived so far.
#[derive(Debug)]
struct Pending {
    mask: u32,
    arrived: u32,
    values: [u64; 32],
    /// The checker's clocks of the lanes of a `sync_warp` round.
    deposits: Vec<Deposit>,
    /// Set once the round can never complete.
    broken: Option<WarpError>,
}

/// What a lane picks up when its round ends.
type Outcome = Result<(Round, Option<Clock>), WarpError>;

#[derive(Debug)]
struct WarpState {
    /// Lanes that exist and have not exited.
    live: u32,
    /// Lanes that are waiting in a round in progress.
    blocked: u32,
    rounds: Vec<Pending>,
    /// Each lane's result, from the moment its round ends until it picks it up.
    outcomes: [Option<Outcome>; 32],
    /// Completed calls per lane, and the mask of each lane's last one.
    calls: [u32; 32],
    last_mask: [u32; 32],
    /// `met[p][l]`: lane `l`'s count of completed calls as of the last call lanes `p` and `l` made together.
    met: [[u32; 32]; 32],
}

impl WarpState {
    /// Lane `lane` has exited after a warp call that participant `p` did not take part in.
    fn called_without(&self, lane: u32, p: u32) -> bool {
        self.live & (1 << lane) == 0 && self.calls[lane as usize] > self.met[p as usize][lane as usize]
    }

    /// Marks the rounds that can never complete, and completes the rounds that can; says whether a lane
    /// was released (its outcome set).
    fn settle(&mut self) -> bool {
        let mut released = false;
        loop {
            self.break_exited_mismatches();
            self.break_deadlocks();
            let Some(i) = self.rounds.iter().position(|r| r.broken.is_none() && r.mask & self.live & !r.arrived == 0)
            else {
                break;
            };
            let round = self.rounds.swap_remove(i);
            self.complete(round);
            released = true;
        }
        // Broken rounds release their lanes with the error.
        let (broken, pending): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut self.rounds).into_iter().partition(|r| r.broken.is_some());
        self.rounds = pending;
        for round in broken {
            let error = round.broken.expect("partitioned on it");
            for lane in lanes(round.arrived) {
                self.outcomes[lane as usize] = Some(Err(error));
            }
            self.blocked &= !round.arrived;
            released = true;
        }
        released
    }

    /// A round that names an exited lane which, since its last call with a participant, made another call.
    fn break_exited_mismatches(&mut self) {
        for i in 0..self.rounds.len() {
            let r = &self.rounds[i];
            if r.broken.is_some() {
                continue;
            }
            let culprit = lanes(r.mask & !r.arrived).find(|&l| lanes(r.arrived).any(|p| self.called_without(l, p)));
            if let Some(lane) = culprit {
                let other = self.last_mask[lane as usize];
                self.rounds[i].broken = Some(WarpError::MaskMismatch { lane, other });
            }
        }
    }

    /// Rounds that wait, directly or through other rounds, only on lanes blocked in rounds that wait on
    /// them: no lane is left that could complete them.
    fn break_deadlocks(&mut self) {
        let mut can_progress = vec![false; self.rounds.len()];
        loop {
            let mut changed = false;
            for i in 0..self.rounds.len() {
                if can_progress[i] || self.rounds[i].broken.is_some() {
                    continue;
                }
                let missing = self.rounds[i].mask & self.live & !self.rounds[i].arrived;
                let free = lanes(missing).all(|l| match self.round_of(l) {
                    None => true,
                    Some(j) => can_progress[j],
                });
                if free {
                    can_progress[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let doomed: Vec<usize> =
            (0..self.rounds.len()).filter(|&i| !can_progress[i] && self.rounds[i].broken.is_none()).collect();
        for i in doomed {
            let r = &self.rounds[i];
            let lane = lanes(r.mask & self.live & !r.arrived)
                .find(|&l| self.round_of(l).is_some())
                .expect("a round that cannot progress waits on a blocked lane");
            let other = self.rounds[self.round_of(lane).expect("found blocked")].mask;
            self.rounds[i].broken = Some(WarpError::MaskMismatch { lane, other });
        }
    }

    /// The round in progress that lane `lane` waits in.
    fn round_of(&self, lane: u32) -> Option<usize> {
        (self.blocked & (1 << lane) != 0)
            .then(|| self.rounds.iter().position(|r| r.arrived & (1 << lane) != 0))
            .flatten()
    }

    fn complete(&mut self, round: Pending) {
        let participants = round.arrived;
        let joined = (!round.deposits.is_empty()).then(|| join_deposits(&round.deposits));
        let result = Round { values: round.values, participants };
        for lane in lanes(participants) {
            self.calls[lane as usize] += 1;
            self.last_mask[lane as usize] = round.mask;
        }
        for p in lanes(participants) {
            for l in lanes(participants) {
                self.met[p as usize][l as usize] = self.calls[l as usize];
            }
            self.outcomes[p as usize] = Some(Ok((result, joined.clone())));
        }
        self.blocked &= !participants;
    }
}

/// The lanes set in `mask`, lowest first.
fn lanes(mask: u32) -> impl Iterator<Item = u32> {
    (0..32).filter(move |l| mask & (1 << l) != 0)
}

/// The rendezvous state of one warp.
#[derive(Debug)]
pub(crate) struct Warp {
    state: Mutex<WarpState>,
    changed: Condvar,
}

impl Warp {
    /// A warp with `lanes` (1..=32) threads.
    pub(crate) fn new(lanes: u32) -> Warp {
        let present = if lanes >= 32 { u32::MAX } else { (1u32 << lanes) - 1 };
        Warp {
            state: Mutex::new(WarpState {
                live: present,
                blocked: 0,
                rounds: Vec::new(),
                outcomes: std::array::from_fn(|_| None),
                calls: [0; 32],
                last_mask: [0; 32],
                met: [[0; 32]; 32],
            }),
            changed: Condvar::new(),
        }
    }

    /// Lane `lane` takes part in a round with member mask `mask` (which must contain the lane), depositing
    /// `value`; returns every participant's value once the round completes (see the module's rule), and,
    /// for a round that orders memory (`sync_warp`: the checker's `deposit`), the participants' joined
    /// clock.
    pub(crate) fn exchange(
        &self,
        lane: u32,
        mask: u32,
        value: u64,
        launch: &Launch,
        deposit: Option<Deposit>,
    ) -> Result<(Round, Option<Clock>), WarpError> {
        let bit = 1u32 << lane;
        let mut st = lock(&self.state);
        let i = match st.rounds.iter().position(|r| r.mask == mask && r.broken.is_none()) {
            Some(i) => i,
            None => {
                st.rounds.push(Pending { mask, arrived: 0, values: [0; 32], deposits: Vec::new(), broken: None });
                st.rounds.len() - 1
            }
        };
        let round = &mut st.rounds[i];
        round.values[lane as usize] = value;
        round.arrived |= bit;
        round.deposits.extend(deposit);
        st.blocked |= bit;
        // Only a released lane has anything to wake for: waking every waiter at each arrival cost a warp's
        // round 32 wake-ups per lane (the `mma.sync` of an emulated GEMV is one round each).
        if st.settle() {
            self.changed.notify_all();
        }
        loop {
            if let Some(outcome) = st.outcomes[lane as usize].take() {
                return outcome;
            }
            if launch.is_trapped() {
                return Err(WarpError::Trapped);
            }
            st = self.changed.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Lane `lane` exited: rounds stop waiting for it, or learn that it will never come.
    pub(crate) fn leave(&self, lane: u32) {
        let mut st = lock(&self.state);
        st.live &= !(1u32 << lane);
        if st.settle() {
            self.changed.notify_all();
        }
    }

    /// Wakes every waiter so it sees the launch's trap flag.
    pub(crate) fn wake_all(&self) {
        drop(lock(&self.state));
        self.changed.notify_all();
    }
}
