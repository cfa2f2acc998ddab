//! The wait-for report of a hang: when waits time out, who waits on what across the team, the last signal
//! each rank and block raised, and the culprit — the rank and block that never raised the signal a wait
//! needs, and what that block is itself waiting on.
//!
//! The pending waits come from the timeout records every waiting thread leaves (no trace needed). Who
//! raises a signal comes from trace mode: a signal raised in this launch or an earlier one of the team
//! names its raiser (rank and block), so the report can follow the chain of waits to the block that
//! skipped its raise. Without a trace, a rank with no pending wait is the suspect (it ended without
//! raising the signal), and the report says that tracing names the block.

use std::fmt;

use super::{Cmp, DeviceError, SignalRef};
use crate::event::{TraceEvent, TraceWhat};

/// One wait that did not see its value before the timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingWait {
    /// The waiting rank.
    pub rank: usize,
    /// Its block's linear index (the record's x index in a one-dimensional grid).
    pub block: u32,
    /// The signal.
    pub signal: SignalRef,
    /// The value waited for.
    pub expected: u64,
    /// The last value read (`None`: known from the trace only).
    pub observed: Option<u64>,
    /// The comparison.
    pub cmp: Cmp,
}

/// The last signal a rank's block raised in the failed launch (trace mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRaised {
    /// The raising rank.
    pub rank: usize,
    /// Its block.
    pub block: u32,
    /// The signal.
    pub signal: SignalRef,
    /// The value set or added.
    pub value: u64,
    /// Whether it was an add.
    pub add: bool,
}

/// Who waits on what when a launch's waits time out, and who is to blame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitForReport {
    /// Every pending wait, by rank and block.
    pub pending: Vec<PendingWait>,
    /// The last signal each rank and block raised in the launch (empty without trace mode).
    pub last_raised: Vec<LastRaised>,
    /// The culprit, in words: "rank 1 block 3 never raised rank 0's `data`\[3\]; it is waiting on …".
    pub culprit: String,
}

/// `rank 0's `ready`[1]`: a signal in the report's short form.
fn short(signal: &SignalRef) -> String {
    match signal {
        SignalRef::Pad { name, owner, index } => format!("rank {owner}'s `{name}`[{index}]"),
        SignalRef::Address(a) => format!("the signal at {a:#x}"),
    }
}

impl PendingWait {
    fn holds(&self) -> String {
        let held = self.observed.map(|o| format!("holds {o}, ")).unwrap_or_default();
        let wants = if self.cmp == Cmp::Ge { String::new() } else { format!("{} ", self.cmp) };
        format!("{held}wants {wants}{}", self.expected)
    }
}

impl WaitForReport {
    /// The report of a launch whose `errors` include timeouts (`None` otherwise): `launch` is its trace,
    /// `history` every event the team collected (this launch's included), `known` the ranks whose records
    /// these are (every rank, or this process's in a team that spans processes) of the team's `world`.
    pub(crate) fn build(
        errors: &[DeviceError],
        launch: &[TraceEvent],
        history: &[TraceEvent],
        (known, world): (&[usize], usize),
    ) -> Option<WaitForReport> {
        let mut pending: Vec<PendingWait> = errors
            .iter()
            .filter_map(|e| match e {
                DeviceError::Timeout { at, signal, expected, observed, cmp, .. }
                | DeviceError::UnraisedSignal { at, signal, expected, observed, cmp, .. } => Some(PendingWait {
                    rank: at.rank,
                    block: at.block[0],
                    signal: signal.clone(),
                    expected: *expected,
                    observed: Some(*observed),
                    cmp: *cmp,
                }),
                _ => None,
            })
            .collect();
        if pending.is_empty() {
            return None;
        }
        // Waits the trace saw begin and never end, beyond the records each rank keeps.
        for open in open_waits(launch) {
            if !pending.iter().any(|p| p.rank == open.rank && p.block == open.block && p.signal == open.signal) {
                pending.push(open);
            }
        }
        pending.sort_by_key(|p| (p.rank, p.block));
        let mut last_raised: Vec<LastRaised> = Vec::new();
        for e in launch {
            if let TraceWhat::Signal { signal, value, add } = &e.what {
                let raised =
                    LastRaised { rank: e.rank, block: e.block, signal: signal.clone(), value: *value, add: *add };
                match last_raised.iter_mut().find(|l| l.rank == e.rank && l.block == e.block) {
                    Some(l) => *l = raised,
                    None => last_raised.push(raised),
                }
            }
        }
        last_raised.sort_by_key(|l| (l.rank, l.block));
        let culprit = culprit(&pending, history, (known, world), !history.is_empty() || !launch.is_empty());
        Some(WaitForReport { pending, last_raised, culprit })
    }
}

/// Waits of `launch` that began and never ended.
fn open_waits(launch: &[TraceEvent]) -> Vec<PendingWait> {
    let mut open: Vec<(&TraceEvent, PendingWait)> = Vec::new();
    for e in launch {
        match &e.what {
            TraceWhat::WaitBegin { signal, expected, cmp } => open.push((
                e,
                PendingWait {
                    rank: e.rank,
                    block: e.block,
                    signal: signal.clone(),
                    expected: *expected,
                    observed: None,
                    cmp: *cmp,
                },
            )),
            TraceWhat::WaitEnd { .. } => {
                if let Some(i) =
                    open.iter().rposition(|(b, _)| (b.rank, b.block, b.thread) == (e.rank, e.block, e.thread))
                {
                    open.remove(i);
                }
            }
            _ => {}
        }
    }
    open.into_iter().map(|(_, p)| p).collect()
}

/// Follows the chain from the first pending wait to the block that should have raised its signal.
fn culprit(pending: &[PendingWait], history: &[TraceEvent], (known, world): (&[usize], usize), traced: bool) -> String {
    let raisers = |signal: &SignalRef| -> Vec<(usize, u32)> {
        let mut who: Vec<(usize, u32)> = history
            .iter()
            .filter_map(|e| match &e.what {
                TraceWhat::Signal { signal: s, .. } if s == signal => Some((e.rank, e.block)),
                _ => None,
            })
            .collect();
        who.sort_unstable();
        who.dedup();
        who
    };
    let waits_of = |rank: usize, block: u32| pending.iter().find(|p| p.rank == rank && p.block == block);
    let mut sentences = Vec::new();
    let mut cur = &pending[0];
    let mut seen: Vec<(usize, u32)> = vec![(cur.rank, cur.block)];
    for _ in 0..pending.len() + 1 {
        let who = raisers(&cur.signal);
        let Some(&(rank, block)) = who.iter().find(|&&w| w != (cur.rank, cur.block)).or(who.first()) else {
            sentences.push(untraced_suspects(pending, cur, (known, world), traced));
            break;
        };
        let never = format!(
            "rank {rank} block {block} never raised {} (rank {} block {} waits on it: {})",
            short(&cur.signal),
            cur.rank,
            cur.block,
            cur.holds()
        );
        match waits_of(rank, block) {
            Some(next) if seen.contains(&(rank, block)) => {
                sentences.push(format!(
                    "{never}; it is waiting on {} ({}): a cycle",
                    short(&next.signal),
                    next.holds()
                ));
                break;
            }
            Some(next) => {
                sentences.push(format!("{never}; it is waiting on {} ({})", short(&next.signal), next.holds()));
                seen.push((rank, block));
                cur = next;
            }
            None => {
                sentences.push(format!("{never}; it is waiting on nothing: it skipped the raise"));
                break;
            }
        }
    }
    sentences.join("; in turn, ")
}

/// Without a raiser in the trace: the ranks that wait on nothing are the suspects (of the `known` ranks: in a
/// team that spans processes, another process's ranks report their own waits).
fn untraced_suspects(
    pending: &[PendingWait],
    cur: &PendingWait,
    (known, world): (&[usize], usize),
    traced: bool,
) -> String {
    let idle: Vec<usize> = known.iter().copied().filter(|r| !pending.iter().any(|p| p.rank == *r)).collect();
    let hint = if known.len() < world {
        " (the raises of other processes' ranks are in their own traces)"
    } else if traced {
        " (no rank raised it in any traced launch)"
    } else {
        " (trace mode, FERROCOMM_TRACE=1, names the block that should raise it)"
    };
    let wait = format!("rank {} block {} waits on {} ({})", cur.rank, cur.block, short(&cur.signal), cur.holds());
    match idle.as_slice() {
        [] if known.len() < world => format!(
            "{wait}; every rank of this process is waiting, so the raiser runs in another process, whose error \
             names its own waits{hint}"
        ),
        [] => format!("every rank is waiting, none raised what another waits for: {wait}{hint}"),
        [one] => format!("rank {one} never raised {}: it waits on nothing; {wait}{hint}", short(&cur.signal)),
        many => {
            format!("ranks {many:?} wait on nothing, one of them never raised {}; {wait}{hint}", short(&cur.signal))
        }
    }
}

impl fmt::Display for WaitForReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hang diagnosis: {}", self.culprit)?;
        let waits: Vec<String> = self
            .pending
            .iter()
            .map(|p| format!("rank {} block {} on {} ({})", p.rank, p.block, short(&p.signal), p.holds()))
            .collect();
        write!(f, ". Pending waits: {}", waits.join(", "))?;
        if !self.last_raised.is_empty() {
            let raised: Vec<String> = self
                .last_raised
                .iter()
                .map(|l| {
                    let op = if l.add { "+=" } else { "=" };
                    format!("rank {} block {}: {} {op} {}", l.rank, l.block, short(&l.signal), l.value)
                })
                .collect();
            write!(f, ". Last signal raised: {}", raised.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{GpuThread, Location};

    fn pad(name: &str, owner: usize, index: usize) -> SignalRef {
        SignalRef::Pad { name: name.into(), owner, index }
    }

    fn timeout(rank: usize, block: u32, signal: SignalRef, observed: u64, expected: u64) -> DeviceError {
        DeviceError::Timeout {
            at: GpuThread { rank, block: [block, 0, 0], thread: [0; 3] },
            signal,
            expected,
            observed,
            cmp: Cmp::Ge,
            location: Location::default(),
        }
    }

    fn raise(rank: usize, block: u32, signal: SignalRef, launch: u64) -> TraceEvent {
        TraceEvent {
            rank,
            launch,
            block,
            thread: 0,
            smid: 0,
            time_ns: 0,
            what: TraceWhat::Signal { signal, value: 1, add: true },
        }
    }

    #[test]
    fn the_chain_of_waits_leads_to_the_block_that_skipped_its_raise() {
        // Rank 0 block 3 waits for DATA[3], which rank 1 block 3 raises; rank 1 block 3 waits for READY[0],
        // which rank 2 block 0 raises — and rank 2 block 0 waits on nothing: it skipped the raise.
        let errors = [timeout(0, 3, pad("data", 0, 3), 4, 5), timeout(1, 3, pad("ready", 1, 0), 4, 5)];
        let history = [raise(1, 3, pad("data", 0, 3), 0), raise(2, 0, pad("ready", 1, 0), 0)];
        let r = WaitForReport::build(&errors, &[], &history, (&[0, 1, 2], 3)).unwrap();
        assert_eq!(
            r.culprit,
            "rank 1 block 3 never raised rank 0's `data`[3] (rank 0 block 3 waits on it: holds 4, wants 5); it is \
             waiting on rank 1's `ready`[0] (holds 4, wants 5); in turn, rank 2 block 0 never raised rank 1's \
             `ready`[0] (rank 1 block 3 waits on it: holds 4, wants 5); it is waiting on nothing: it skipped the raise"
        );
        assert_eq!(r.pending.len(), 2);
        assert!(r.to_string().starts_with("hang diagnosis: rank 1 block 3 never raised"), "{r}");
    }

    #[test]
    fn waits_on_each_other_are_a_cycle() {
        let errors = [timeout(0, 0, pad("a", 0, 0), 0, 1), timeout(1, 0, pad("b", 1, 0), 0, 1)];
        let history = [raise(1, 0, pad("a", 0, 0), 0), raise(0, 0, pad("b", 1, 0), 0)];
        let r = WaitForReport::build(&errors, &[], &history, (&[0, 1], 2)).unwrap();
        assert!(r.culprit.ends_with("a cycle"), "{}", r.culprit);
    }

    #[test]
    fn without_a_trace_the_rank_that_waits_on_nothing_is_named() {
        let errors = [timeout(0, 1, pad("ring", 0, 1), 1, 2)];
        let r = WaitForReport::build(&errors, &[], &[], (&[0, 1], 2)).unwrap();
        assert!(r.culprit.starts_with("rank 1 never raised rank 0's `ring`[1]: it waits on nothing"), "{}", r.culprit);
        assert!(r.culprit.contains("FERROCOMM_TRACE=1") && r.last_raised.is_empty(), "{}", r.culprit);
        // In a team that spans processes, the other process's ranks are not suspects: their errors say.
        let r = WaitForReport::build(&errors, &[], &[], (&[0], 2)).unwrap();
        assert!(r.culprit.contains("the raiser runs in another process"), "{}", r.culprit);
        // No timeout, no report.
        assert_eq!(WaitForReport::build(&[], &[], &[], (&[0], 1)), None);
    }

    #[test]
    fn the_trace_adds_waits_past_the_records_and_the_last_raises() {
        let errors = [timeout(0, 0, pad("x", 0, 0), 0, 1)];
        let begin = |rank, block| TraceEvent {
            rank,
            launch: 1,
            block,
            thread: 0,
            smid: 0,
            time_ns: 0,
            what: TraceWhat::WaitBegin { signal: pad("x", rank, 0), expected: 1, cmp: Cmp::Ge },
        };
        let launch = [begin(0, 0), begin(0, 1), raise(1, 0, pad("y", 0, 0), 1), raise(1, 0, pad("z", 0, 0), 1)];
        let r = WaitForReport::build(&errors, &launch, &launch, (&[0, 1], 2)).unwrap();
        assert_eq!(
            r.pending.iter().map(|p| (p.rank, p.block, p.observed)).collect::<Vec<_>>(),
            [(0, 0, Some(0)), (0, 1, None)]
        );
        assert_eq!(r.last_raised.len(), 1);
        assert_eq!(r.last_raised[0].signal, pad("z", 0, 0));
        assert!(r.to_string().contains("Last signal raised: rank 1 block 0: rank 0's `z`[0] += 1"), "{r}");
    }
}
