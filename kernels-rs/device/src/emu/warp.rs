//! One emulated warp: the rendezvous behind `shfl.sync`, `vote.sync` and `bar.warp.sync`.
//!
//! Every participating lane deposits a value; once all live lanes of the member mask have, each reads the
//! whole set. One round runs at a time; a lane whose mask differs waits for the current round to finish. A
//! round that can never finish (lanes of its mask waiting with other masks: undefined on the GPU) is
//! reported instead of hanging.

use std::sync::{Condvar, Mutex, PoisonError};

use super::block::lock;
use super::check::{Clock, Deposit, join_deposits};
use super::launch::Launch;

/// Why a warp operation did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WarpError {
    /// The launch trapped; the thread must exit.
    Trapped,
    /// Lanes of one round called with different member masks.
    MaskMismatch {
        /// The mask of the round in progress.
        round: u32,
    },
}

/// The lanes' values of one completed round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Round {
    /// Each participating lane's value (others: 0).
    pub(crate) values: [u64; 32],
    /// The lanes that took part: the member mask less exited lanes.
    pub(crate) participants: u32,
}

#[derive(Debug)]
struct WarpState {
    /// Lanes that have not exited.
    live: u32,
    /// Member mask of the round in progress (0: none).
    round: u32,
    /// Lanes that deposited into the round in progress.
    arrived: u32,
    /// Lanes of the completed round that still have to pick up the values.
    reading: u32,
    /// The lanes whose values the completed round holds.
    participants: u32,
    /// Lanes waiting to start a round, and the mask each waits with.
    waiting: u32,
    waiting_masks: [u32; 32],
    values: [u64; 32],
    /// The checker's clocks of the lanes of a `sync_warp` round, and their join once it completed.
    deposits: Vec<Deposit>,
    joined: Option<Clock>,
}

impl WarpState {
    /// A round whose missing lanes all wait to start a round with another mask can never complete.
    fn stuck(&self) -> bool {
        let missing = self.round & self.live & !self.arrived;
        self.round != 0
            && self.reading == 0
            && missing != 0
            && (0..32)
                .filter(|l| missing & (1 << l) != 0)
                .all(|l| self.waiting & (1 << l) != 0 && self.waiting_masks[l as usize] != self.round)
    }
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
                round: 0,
                arrived: 0,
                reading: 0,
                participants: 0,
                waiting: 0,
                waiting_masks: [0; 32],
                values: [0; 32],
                deposits: Vec::new(),
                joined: None,
            }),
            changed: Condvar::new(),
        }
    }

    /// Lane `lane` takes part in a round with member mask `mask` (which must contain the lane), depositing
    /// `value`; returns every participant's value once all live lanes of `mask` have deposited, and, for a
    /// round that orders memory (`sync_warp`: the checker's `deposit`), the participants' joined clock.
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
        loop {
            if launch.is_trapped() {
                st.waiting &= !bit;
                return Err(WarpError::Trapped);
            }
            if st.reading == 0 && (st.round == 0 || st.round == mask) {
                break;
            }
            st.waiting |= bit;
            st.waiting_masks[lane as usize] = mask;
            if st.stuck() {
                st.waiting &= !bit;
                return Err(WarpError::MaskMismatch { round: st.round });
            }
            st = self.changed.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.waiting &= !bit;
        if st.round == 0 {
            st.round = mask;
        }
        st.values[lane as usize] = value;
        st.deposits.extend(deposit);
        st.arrived |= bit;
        self.try_complete(&mut st);
        while st.reading & bit == 0 {
            if launch.is_trapped() {
                return Err(WarpError::Trapped);
            }
            if st.stuck() {
                return Err(WarpError::MaskMismatch { round: st.round });
            }
            st = self.changed.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        let round = Round { values: st.values, participants: st.participants };
        let joined = st.joined.clone();
        st.reading &= !bit;
        if st.reading == 0 {
            st.round = 0;
            st.values = [0; 32];
            st.joined = None;
            self.changed.notify_all();
        }
        Ok((round, joined))
    }

    fn try_complete(&self, st: &mut WarpState) {
        if st.round != 0 && st.reading == 0 && st.round & st.live & !st.arrived == 0 {
            st.participants = st.arrived;
            st.reading = st.arrived;
            st.arrived = 0;
            st.joined = (!st.deposits.is_empty()).then(|| join_deposits(&st.deposits));
            st.deposits.clear();
            self.changed.notify_all();
        } else if st.stuck() {
            // Let the waiters see it and report it.
            self.changed.notify_all();
        }
    }

    /// Lane `lane` exited: rounds stop waiting for it.
    pub(crate) fn leave(&self, lane: u32) {
        let mut st = lock(&self.state);
        st.live &= !(1u32 << lane);
        self.try_complete(&mut st);
        self.changed.notify_all();
    }

    /// Wakes every waiter so it sees the launch's trap flag.
    pub(crate) fn wake_all(&self) {
        drop(lock(&self.state));
        self.changed.notify_all();
    }
}
