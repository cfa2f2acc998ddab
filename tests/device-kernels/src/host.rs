//! The host side of the device tests: buffers, launches, CPU references and the checks against them. The
//! same functions run on an emulated team and on GPUs; only the sizes the tests choose differ.

use std::fmt::{self, Debug};
use std::time::{Duration, Instant};

use ferrocomm::{DeviceCopy, Error, LaunchConfig, LaunchGuard, SignalPadBuffer, SymBuffer, Team};
use ferrocomm_device::ll::LlPacket;

use crate::litmus::{self, ELAPSED_NS, MESSAGE_WORDS, RESULT_WORDS, SIGNALS_PER_PAIR, STALE, TRIALS};
use crate::round_trip::{self, Group, MAX_GROUPS, Op, ll_buffer_packets};

/// Elements of a guard region after each destination range, which must keep the sentinel.
pub const GUARD: usize = 2;

/// Why a check failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The runtime refused the launch or the kernel reported an error (timeout, panic).
    #[error("{what}: {source}")]
    Runtime {
        /// The case or scenario.
        what: String,
        /// The runtime's error.
        source: Error,
    },
    /// The case cannot run on this team or grid.
    #[error("{what}: {reason}")]
    Setup {
        /// The case or scenario.
        what: String,
        /// What to change.
        reason: String,
    },
    /// A buffer differs from the CPU reference.
    #[error(
        "{case}: rank {rank}'s `{buffer}`[{index}] is {found}, the CPU reference says {expected} \
         ({mismatches} element(s) differ)"
    )]
    Mismatch {
        /// The case.
        case: String,
        /// The rank whose buffer differs.
        rank: usize,
        /// `dst` or `back`.
        buffer: &'static str,
        /// The first element that differs.
        index: usize,
        /// What the reference holds there.
        expected: String,
        /// What the rank holds there.
        found: String,
        /// How many elements differ.
        mismatches: usize,
    },
    /// A litmus launch did not complete every trial.
    #[error("{what}: {got} trials completed, {want} launched")]
    Incomplete {
        /// The scenario.
        what: String,
        /// Trials read by every reader together.
        got: u64,
        /// Trials launched.
        want: u64,
    },
}

fn runtime(what: impl fmt::Display) -> impl FnOnce(Error) -> CheckError {
    move |source| CheckError::Runtime { what: what.to_string(), source }
}

/// The message-passing litmus test's buffers, reused across launches (flags continue, never reset).
#[derive(Debug)]
pub struct Litmus {
    cfg: LaunchConfig,
    data: SymBuffer<u32>,
    pad: SignalPadBuffer,
    results: SymBuffer<u64>,
}

/// What one litmus launch observed, summed over every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LitmusReport {
    /// Messages read (one per trial).
    pub trials: u64,
    /// Trials in which the reader saw at least one data word of an older message.
    pub stale: u64,
    /// The longest time one thread spent in its trials (`%globaltimer`).
    pub device: Duration,
    /// Launch and wait, as the host saw it.
    pub wall: Duration,
}

impl LitmusReport {
    /// Trials per second of device time.
    pub fn trials_per_second(&self) -> f64 {
        self.trials as f64 / self.device.as_secs_f64().max(1e-9)
    }
}

impl Litmus {
    /// Buffers for launches of `cfg` (one pair per thread of the grid) on an even team.
    pub fn new(team: &Team, cfg: LaunchConfig) -> Result<Litmus, CheckError> {
        let what = "message-passing litmus";
        if !team.world().is_multiple_of(2) {
            let reason =
                format!("pairs join rank r with rank r ^ 1, so the team needs an even world, not {}", team.world());
            return Err(CheckError::Setup { what: what.into(), reason });
        }
        let pairs = cfg.blocks() as usize * cfg.threads_per_block() as usize;
        Ok(Litmus {
            cfg,
            data: SymBuffer::new(team, MESSAGE_WORDS * pairs).map_err(runtime(what))?,
            pad: SignalPadBuffer::new(team, "litmus", SIGNALS_PER_PAIR * pairs).map_err(runtime(what))?,
            results: SymBuffer::new(team, RESULT_WORDS * pairs).map_err(runtime(what))?,
        })
    }

    /// Writer/reader pairs per launch.
    pub fn pairs(&self) -> usize {
        self.cfg.blocks() as usize * self.cfg.threads_per_block() as usize
    }

    /// Runs `trials` trials per pair with release/acquire flags, or with relaxed ones (`relaxed`), and sums
    /// what every reader saw. Fails unless every reader completed every trial.
    pub fn run(&mut self, team: &Team, relaxed: bool, trials: u32) -> Result<LitmusReport, CheckError> {
        let what = if relaxed { "relaxed message passing" } else { "release/acquire message passing" };
        let started = Instant::now();
        let guard = if relaxed {
            litmus::message_passing_relaxed::launch(
                team,
                self.cfg,
                &mut self.data,
                &self.pad,
                trials,
                &mut self.results,
            )
        } else {
            litmus::message_passing::launch(team, self.cfg, &mut self.data, &self.pad, trials, &mut self.results)
        };
        guard.and_then(LaunchGuard::wait).map_err(runtime(what))?;
        let wall = started.elapsed();
        let mut report = LitmusReport { trials: 0, stale: 0, device: Duration::ZERO, wall };
        for rank in 0..team.world() {
            for r in self.results.to_host(rank).map_err(runtime(what))?.chunks_exact(RESULT_WORDS) {
                report.trials += r[TRIALS];
                report.stale += r[STALE];
                report.device = report.device.max(Duration::from_nanos(r[ELAPSED_NS]));
            }
        }
        let want = (self.pairs() * team.world() / 2) as u64 * u64::from(trials);
        if report.trials != want {
            return Err(CheckError::Incomplete { what: what.into(), got: report.trials, want });
        }
        Ok(report)
    }
}

/// An element type of the round trips: its kernel, a data pattern and a sentinel the pattern never takes.
pub trait Element: DeviceCopy + PartialEq + Debug {
    /// The type's name, for messages.
    const NAME: &'static str;
    /// What destination buffers hold before a launch.
    const SENTINEL: Self;

    /// Element `i` of rank `rank`'s source: a hash, so a misplaced element shows; never the sentinel.
    fn pattern(rank: usize, i: usize) -> Self;

    /// Launches this type's round-trip kernel for `case` on `bufs`.
    fn launch<'a>(
        team: &'a Team,
        cfg: LaunchConfig,
        case: &Case,
        bufs: &'a mut RoundTripBuffers<Self>,
    ) -> Result<LaunchGuard<'a>, Error>;
}

/// A 64-bit mix of rank and index (splitmix64's finaliser).
fn mix(rank: usize, i: usize) -> u64 {
    let mut z = (rank as u64) << 48 ^ i as u64 ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

macro_rules! element {
    ($t:ty, $kernel:ident, $sentinel:expr) => {
        impl Element for $t {
            const NAME: &'static str = stringify!($t);
            const SENTINEL: $t = $sentinel;

            fn pattern(rank: usize, i: usize) -> $t {
                let v = mix(rank, i) as $t;
                if v == Self::SENTINEL { v ^ 1 } else { v }
            }

            fn launch<'a>(
                team: &'a Team,
                cfg: LaunchConfig,
                case: &Case,
                bufs: &'a mut RoundTripBuffers<$t>,
            ) -> Result<LaunchGuard<'a>, Error> {
                round_trip::$kernel::launch(
                    team,
                    cfg,
                    case.op as u32,
                    case.group as u32,
                    case.groups,
                    &bufs.src,
                    case.src_off,
                    case.len,
                    &mut bufs.dst,
                    case.dst_off,
                    &mut bufs.back,
                    &mut bufs.ll,
                    &bufs.pad,
                )
            }
        }
    };
}
element!(u8, round_trip_u8, 0xA5);
element!(u16, round_trip_u16, 0xA5A5);
element!(u32, round_trip_u32, 0xA5A5_A5A5);

/// One round trip: operation, group kind and count, element range and offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// What moves the data.
    pub op: Op,
    /// Which threads move a chunk.
    pub group: Group,
    /// How many chunks (and groups moving them).
    pub groups: u32,
    /// Elements moved.
    pub len: usize,
    /// First element read in `src`.
    pub src_off: usize,
    /// First element written in `dst` / `back`.
    pub dst_off: usize,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} by {} {:?}(s), {} elements from src[{}..] to [{}..]",
            self.op, self.groups, self.group, self.len, self.src_off, self.dst_off
        )
    }
}

/// The buffers of a round trip on every rank. `ll` and `pad` are kept from case to case: the pad's epoch
/// gives each launch new signal values and LL flags, so nothing is reset between launches.
#[derive(Debug)]
pub struct RoundTripBuffers<T: DeviceCopy> {
    src: SymBuffer<T>,
    dst: SymBuffer<T>,
    back: SymBuffer<T>,
    ll: SymBuffer<LlPacket>,
    pad: SignalPadBuffer,
}

/// Runs round trips of `T` on one team, keeping the LL buffer and the signal pad across cases.
#[derive(Debug)]
pub struct RoundTrips<T: DeviceCopy> {
    bufs: RoundTripBuffers<T>,
    /// Each rank's source pattern, as long as the longest case so far needed (cases take prefixes).
    patterns: Vec<Vec<T>>,
}

impl<T: Element> RoundTrips<T> {
    /// Buffers for cases of up to `max_len` elements (the LL buffer is sized for it).
    pub fn new(team: &Team, max_len: usize) -> Result<RoundTrips<T>, CheckError> {
        let what = format!("round trips of {}", T::NAME);
        let ll = SymBuffer::new(team, ll_buffer_packets::<T>(max_len, MAX_GROUPS)).map_err(runtime(&what))?;
        let pad = SignalPadBuffer::new(team, "round_trip", MAX_GROUPS).map_err(runtime(&what))?;
        let empty = || SymBuffer::new(team, 0).map_err(runtime(&what));
        Ok(RoundTrips {
            bufs: RoundTripBuffers { src: empty()?, dst: empty()?, back: empty()?, ll, pad },
            patterns: Vec::new(),
        })
    }

    /// Fills fresh buffers for `case`, launches it with `cfg`, and compares every rank's `dst` and `back`
    /// with [`reference`](fn@reference).
    pub fn run(&mut self, team: &Team, cfg: LaunchConfig, case: &Case) -> Result<(), CheckError> {
        let what = format!("{} {case}", T::NAME);
        let [blocks, threads] = [cfg.blocks() as u32, cfg.threads_per_block()];
        let available = case.group.available(blocks, threads);
        if case.groups == 0 || case.groups as usize > MAX_GROUPS || case.groups > available {
            let reason = format!(
                "{} groups asked for; the grid has {available} and the pad {MAX_GROUPS} signals (at least 1)",
                case.groups
            );
            return Err(CheckError::Setup { what, reason });
        }
        if ll_buffer_packets::<T>(case.len, MAX_GROUPS) > self.bufs.ll.len() {
            let reason =
                format!("the LL buffer holds {} packets; make RoundTrips with a larger max_len", self.bufs.ll.len());
            return Err(CheckError::Setup { what, reason });
        }
        let world = team.world();
        let src_len = case.src_off + case.len + GUARD;
        self.patterns.resize_with(world, Vec::new);
        for (rank, pattern) in self.patterns.iter_mut().enumerate() {
            let have = pattern.len();
            pattern.extend((have..src_len).map(|i| T::pattern(rank, i)));
        }
        let sources: Vec<&[T]> = self.patterns.iter().map(|p| &p[..src_len]).collect();
        let dst_len = case.dst_off + case.len + GUARD;
        let bufs = &mut self.bufs;
        bufs.src = SymBuffer::new(team, src_len).map_err(runtime(&what))?;
        for (rank, source) in sources.iter().enumerate() {
            bufs.src.copy_from_host(rank, source).map_err(runtime(&what))?;
        }
        bufs.dst = SymBuffer::new(team, dst_len).map_err(runtime(&what))?;
        bufs.dst.fill(T::SENTINEL).map_err(runtime(&what))?;
        bufs.back = SymBuffer::new(team, dst_len).map_err(runtime(&what))?;
        bufs.back.fill(T::SENTINEL).map_err(runtime(&what))?;
        T::launch(team, cfg, case, bufs).and_then(LaunchGuard::wait).map_err(runtime(&what))?;
        for rank in 0..world {
            let (dst, back) = reference(case, rank, &sources, dst_len);
            compare(&what, rank, "dst", &dst, &bufs.dst.to_host(rank).map_err(runtime(&what))?)?;
            compare(&what, rank, "back", &back, &bufs.back.to_host(rank).map_err(runtime(&what))?)?;
        }
        Ok(())
    }
}

/// What rank `rank`'s `dst` and `back` (each `dst_len` elements) hold after `case`, given every rank's
/// source: data from the previous rank for puts, signalled puts and LL; from the next rank for gets.
pub fn reference<T: Element>(case: &Case, rank: usize, sources: &[&[T]], dst_len: usize) -> (Vec<T>, Vec<T>) {
    let world = sources.len();
    let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
    let mut dst = vec![T::SENTINEL; dst_len];
    let mut back = vec![T::SENTINEL; dst_len];
    let range = |from: usize| &sources[from][case.src_off..case.src_off + case.len];
    let at = case.dst_off..case.dst_off + case.len;
    match case.op {
        Op::Put => dst[at].copy_from_slice(range(prev)),
        Op::Get => back[at].copy_from_slice(range(next)),
        Op::PutSignal => {
            dst[at.clone()].copy_from_slice(range(prev));
            back[at].copy_from_slice(range(prev));
        }
        Op::Ll => back[at].copy_from_slice(range(prev)),
    }
    (dst, back)
}

fn show<T: Debug>(v: Option<&T>) -> String {
    v.map_or_else(|| "past the end".to_owned(), |v| format!("{v:?}"))
}

fn compare<T: Element>(case: &str, rank: usize, buffer: &'static str, want: &[T], got: &[T]) -> Result<(), CheckError> {
    if want == got {
        return Ok(());
    }
    let differ = |i: &usize| want.get(*i) != got.get(*i);
    let Some(index) = (0..want.len().max(got.len())).find(differ) else { return Ok(()) };
    Err(CheckError::Mismatch {
        case: case.into(),
        rank,
        buffer,
        index,
        expected: show(want.get(index)),
        found: show(got.get(index)),
        mismatches: (0..want.len().max(got.len())).filter(differ).count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::round_trip::{chunk, ll_range};

    #[test]
    fn patterns_avoid_the_sentinel_and_differ_by_rank() {
        assert!((0..100_000).all(|i| u8::pattern(0, i) != u8::SENTINEL && u16::pattern(1, i) != u16::SENTINEL));
        assert!((0..1000).filter(|&i| u32::pattern(0, i) == u32::pattern(1, i)).count() < 2);
    }

    /// Chunk `g`'s packets start after chunk `g - 1`'s and the last one ends inside the buffer.
    fn ll_ranges_fit<T>(len: usize, groups: usize) {
        let mut next = 0;
        for g in 0..groups {
            let (s, e) = chunk(len, g, groups);
            let (first, packets) = ll_range::<T>(s, e, g);
            assert!(first >= next, "{len} elements in {groups} chunks: chunk {g} overlaps its predecessor");
            next = first + packets;
        }
        assert!(next <= ll_buffer_packets::<T>(len, groups), "{len} elements in {groups} chunks overflow");
    }

    #[test]
    fn chunks_tile_the_range_and_ll_ranges_never_overlap() {
        for len in [0, 1, 15, 16, 17, 4095, 100_003] {
            for groups in [1, 2, 3, 5, 9, MAX_GROUPS] {
                let ends: Vec<(usize, usize)> = (0..groups).map(|g| chunk(len, g, groups)).collect();
                assert_eq!(ends[0].0, 0);
                assert_eq!(ends[groups - 1].1, len);
                assert!(ends.windows(2).all(|w| w[0].1 == w[1].0));
                ll_ranges_fit::<u8>(len, groups);
                ll_ranges_fit::<u16>(len, groups);
                ll_ranges_fit::<u32>(len, groups);
            }
        }
    }

    #[test]
    fn the_reference_moves_ranges_between_ring_neighbours() {
        let sources: Vec<Vec<u16>> = (0..3).map(|r| (0..8).map(|i| u16::pattern(r, i)).collect()).collect();
        let case = Case { op: Op::Put, group: Group::Warp, groups: 1, len: 3, src_off: 1, dst_off: 2 };
        let sources: Vec<&[u16]> = sources.iter().map(Vec::as_slice).collect();
        let (dst, back) = reference(&case, 0, &sources, 7);
        assert_eq!(&dst[2..5], &sources[2][1..4]);
        assert_eq!([dst[0], dst[1], dst[5], dst[6]], [u16::SENTINEL; 4]);
        assert!(back.iter().all(|&v| v == u16::SENTINEL));
        let (_, back) = reference(&Case { op: Op::Get, ..case }, 0, &sources, 7);
        assert_eq!(&back[2..5], &sources[1][1..4]);
    }
}
