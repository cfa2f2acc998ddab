//! Barrier agreement across ranks. The device library has no team-wide barrier instruction: ranks meet
//! through signal pads, and every signal-pad barrier (the collectives' `barrier`, a kernel's own rounds of
//! `set_release(epoch)` / `wait_ge(epoch)`) relies on the pad's launch epoch being the same on every rank.
//! That holds only if, in each launch, every rank advances each pad it uses the same number of times, and
//! on each rank every block ends equally many sessions of the pad (`SignalPad::session`, whose drop advances its epoch). When they
//! do not, the next barrier on the pad compares against counts from different launches: it passes at once
//! on one rank (a barrier that synchronises nothing) or waits for ever on another.
//!
//! The checker logs, per pad and rank, the epoch when the rank first used the pad in the launch, the epoch
//! when the rank's grid ended (read from the pad's memory then: the rank's stream may already run its next
//! kernel when the last rank ends) and each block's `advance_epoch` calls with their call site; at the end
//! of the launch it compares every rank's epoch advance (a rank that never touched the pad counts as zero)
//! and the blocks' calls. A pad is known by rank 0's base address, the same in every rank's peer table.

use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};

use super::report::{Finding, Geometry};
use ferrocomm_abi::{ErrorKind, MismatchScope, RawSym, SIGNAL_PAD_EPOCH_SLOTS, ThreadRef};

#[derive(Debug)]
struct RankLog {
    /// The pad's epoch when this rank first used it in the launch.
    start: u64,
    /// `advance_epoch` calls of each block (counted by its thread 0, which does the block's part).
    block_calls: Vec<u32>,
    /// The last `advance_epoch` call site.
    site: Option<&'static Location<'static>>,
    /// The pad's epoch when this rank's grid ended.
    end: Option<u64>,
}

#[derive(Debug)]
struct PadLog {
    /// A peer table of the pad: `world` base addresses.
    table: usize,
    /// Index of the first epoch slot (block 0's) after the signals.
    slot: usize,
    ranks: Vec<Option<RankLog>>,
}

/// The pads used in one launch.
#[derive(Debug, Default)]
pub(crate) struct PadLogs {
    pads: HashMap<usize, PadLog>,
}

/// The epoch slot of the pad at `base`.
///
/// # Safety
///
/// `base` is a pad's live allocation of at least `slot + 1` `u64`s, accessed atomically.
unsafe fn epoch_at(base: usize, slot: usize) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { AtomicU64::from_ptr((base as *mut u64).add(slot)) }.load(Ordering::Relaxed)
}

/// Rank `rank`'s base address in the peer table at `table`.
///
/// # Safety
///
/// `table` is a live peer table of more than `rank` entries.
unsafe fn base_of(table: usize, rank: usize) -> usize {
    // SAFETY: the caller's contract.
    unsafe { (table as *const usize).add(rank).read() }
}

/// The value most of `values` have (the larger on a tie), or `None` for no values.
fn majority(values: impl Iterator<Item = u64>) -> Option<u64> {
    let mut counts: Vec<(u64, usize)> = Vec::new();
    for v in values {
        match counts.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => counts.push((v, 1)),
        }
    }
    counts.into_iter().max_by_key(|&(v, n)| (n, v)).map(|(v, _)| v)
}

impl PadLogs {
    /// Rank `rank`'s thread (`thread0`: thread 0 of its block `linear_block`) uses the pad `raw` — reads its
    /// epoch, or (`advance`) calls `advance_epoch` at `site`.
    ///
    /// # Safety
    ///
    /// `raw` describes a live signal pad of a team of `world` ranks (the contract of `SignalPad::from_raw`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn touch(
        &mut self,
        raw: &RawSym<u64>,
        world: u32,
        blocks: u32,
        rank: u32,
        linear_block: u32,
        thread0: bool,
        advance: Option<&'static Location<'static>>,
    ) {
        if raw.len < SIGNAL_PAD_EPOCH_SLOTS || raw.peers.is_null() {
            return;
        }
        let slot = raw.len - SIGNAL_PAD_EPOCH_SLOTS;
        // SAFETY: a pad's table has `world >= 1` entries (the caller).
        let key = unsafe { base_of(raw.peers as usize, 0) };
        let pad = self.pads.entry(key).or_insert_with(|| PadLog {
            table: raw.peers as usize,
            slot,
            ranks: (0..world).map(|_| None).collect(),
        });
        let Some(entry) = pad.ranks.get_mut(rank as usize) else { return };
        let log = entry.get_or_insert_with(|| RankLog {
            // Slots change only when their block ends its epoch, which is after this (its first) use, and
            // every launch starts with all slots equal: this is the epoch the launch started from.
            // SAFETY: this rank's copy of a live pad with its epoch slots (the caller).
            start: unsafe {
                epoch_at(raw.local as usize, slot + (linear_block as usize).min(SIGNAL_PAD_EPOCH_SLOTS - 1))
            },
            block_calls: vec![0; blocks as usize],
            site: None,
            end: None,
        });
        if let Some(site) = advance {
            log.site = Some(site);
            if thread0 && let Some(n) = log.block_calls.get_mut(linear_block as usize) {
                *n += 1;
            }
        }
    }

    /// Rank `rank`'s grid has ended: the epochs of the pads it used are read now, before its next kernel
    /// advances them.
    ///
    /// # Safety
    ///
    /// Every pad touched is still live.
    pub(crate) unsafe fn rank_ended(&mut self, rank: u32) {
        for pad in self.pads.values_mut() {
            if let Some(Some(log)) = pad.ranks.get_mut(rank as usize) {
                // SAFETY: the pad is live (the caller), its table has an entry per rank, and this is rank
                // `rank`'s copy.
                log.end = Some(unsafe { epoch_at(base_of(pad.table, rank as usize), pad.slot) });
            }
        }
    }

    /// The mismatches of the launch. `failed[r]`: rank `r` timed out or panicked, so its threads did not all
    /// reach their `advance_epoch` and its counts prove nothing. With `geometry.alone`, only that rank ran
    /// and only its blocks are compared.
    ///
    /// # Safety
    ///
    /// Every pad touched is still live, and no kernel of the launch runs any more.
    pub(crate) unsafe fn findings(&self, geometry: &Geometry, world: u32, failed: &[bool]) -> Vec<Finding> {
        let mut out = Vec::new();
        let mut pads: Vec<(&usize, &PadLog)> = self.pads.iter().collect();
        pads.sort_by_key(|(k, _)| **k);
        for (_, pad) in pads {
            // SAFETY: the pad is live (the caller) and its table has `world` entries.
            let base = |r: usize| unsafe { base_of(pad.table, r) };
            for (r, log) in pad.ranks.iter().enumerate() {
                let Some(log) = log else { continue };
                if failed.get(r).copied().unwrap_or(true) {
                    continue;
                }
                let Some(most) = majority(log.block_calls.iter().map(|&n| u64::from(n))) else { continue };
                for (b, &n) in log.block_calls.iter().enumerate() {
                    if u64::from(n) != most {
                        let who = ThreadRef { rank: r as u32, block: geometry.block_index(b as u32), thread: [0; 3] };
                        out.push(finding(who, base(r), most, u64::from(n), MismatchScope::Blocks, log.site));
                    }
                }
            }
            if geometry.alone.is_some() {
                continue;
            }
            let deltas: Vec<Option<u64>> = (0..world as usize)
                .map(|r| {
                    if failed.get(r).copied().unwrap_or(true) {
                        return None;
                    }
                    Some(pad.ranks[r].as_ref().map_or(0, |l| {
                        // SAFETY: rank `r`'s copy of the live pad (read here only if its end was not).
                        let end = l.end.unwrap_or_else(|| unsafe { epoch_at(base(r), pad.slot) });
                        end.wrapping_sub(l.start)
                    }))
                })
                .collect();
            let Some(most) = majority(deltas.iter().flatten().copied()) else { continue };
            for (r, d) in deltas.iter().enumerate() {
                if let Some(d) = *d
                    && d != most
                {
                    let who = ThreadRef { rank: r as u32, block: [0; 3], thread: [0; 3] };
                    let site = pad.ranks[r].as_ref().and_then(|l| l.site);
                    out.push(finding(who, base(r), most, d, MismatchScope::Ranks, site));
                }
            }
        }
        out
    }
}

fn finding(
    who: ThreadRef,
    base: usize,
    expected: u64,
    observed: u64,
    scope: MismatchScope,
    loc: Option<&'static Location<'static>>,
) -> Finding {
    Finding { kind: ErrorKind::BarrierMismatch, who, signal: base as u64, expected, observed, cmp: scope as u32, loc }
}

#[cfg(test)]
mod tests {
    use super::majority;

    #[test]
    fn the_majority_wins_and_ties_go_to_the_larger() {
        assert_eq!(majority([1, 1, 0].into_iter()), Some(1));
        assert_eq!(majority([0, 2].into_iter()), Some(2));
        assert_eq!(majority(std::iter::empty()), None);
    }
}
