//! Seeded schedule perturbation: where emulated threads pause, so that runs explore many interleavings and
//! a seed replays the emulator's part of one.
//!
//! Emulated GPU threads are host threads, and the host's scheduler runs them in an order of its own. On a
//! quiet machine that order is nearly always the same one, and a kernel whose outcome depends on it (a
//! missing wait, a warp call with a wrong mask) passes until the machine is loaded. So every emulated
//! thread draws from a pseudo-random stream seeded by its launch's seed and its own indices, and at each
//! scheduling point (thread start, block barrier, warp call, atomic access) sometimes yields its core or
//! sleeps a little. Different seeds give different arrival orders; the same seed gives every thread the
//! same pauses at the same points.
//!
//! A launch's seed comes from the process's base seed and the number of launches the same host thread made
//! before it, so each test thread's launches get the same seeds in every run with one base seed. The base
//! seed is `FERROCOMM_EMU_SEED` (decimal or `0x` hex) when set, else fresh per process; each host thread
//! prints it to stderr with its first launch (test harnesses show that output only for a failing test).
//! Running the failing test alone with `FERROCOMM_EMU_SEED=<seed>` replays its pauses. The host's own scheduling stays outside the seed's reach, so a replay makes the failing order
//! likely, not certain.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable that fixes the base seed.
pub const SEED_VARIABLE: &str = "FERROCOMM_EMU_SEED";

/// SplitMix64: a well-mixed 64-bit value from any input.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Parses a seed as `FERROCOMM_EMU_SEED` may spell it.
fn parse_seed(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// The process's base seed: `FERROCOMM_EMU_SEED`, else drawn from the clock and the process id.
pub fn base_seed() -> u64 {
    static BASE: OnceLock<u64> = OnceLock::new();
    *BASE.get_or_init(|| match std::env::var(SEED_VARIABLE) {
        Ok(text) => parse_seed(&text).unwrap_or_else(|| {
            panic!("{SEED_VARIABLE}={text:?} is not a seed: give a decimal number or 0x followed by hex digits")
        }),
        Err(_) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            mix(now.as_nanos() as u64 ^ u64::from(std::process::id()) << 40)
        }
    })
}

thread_local! {
    /// Launches the current host thread has made so far.
    static LAUNCHES: Cell<u64> = const { Cell::new(0) };
}

/// The seed of the next launch made by this host thread; the first one prints the base seed.
pub(crate) fn next_launch_seed() -> u64 {
    let n = LAUNCHES.with(|c| {
        let n = c.get();
        c.set(n + 1);
        n
    });
    let base = base_seed();
    if n == 0 {
        eprintln!(
            "ferrocomm emulator: schedule seed {base:#x} ({SEED_VARIABLE}={base:#x} replays this thread's launches)"
        );
    }
    mix(base ^ mix(n))
}

/// A rank that is late to everything: each of its threads starts `delay` late in every launch, waits
/// `delay` before each release wider than its block (a signal raise, a release store or read-modify-write,
/// a `.gpu` or `.sys` fence), and before and after each wait (a signal wait; an LL read, before only). Its
/// peers run ahead of it as far as their waits let them, so a wait that does not really wait (on the wrong
/// epoch, the wrong value) lets a peer read before the late rank's data is there, and a peer that reuses a
/// buffer too soon overwrites what the late rank has yet to read — stale values, a wait that times out, or
/// the checker's finding — where a seeded pause would only sometimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LateRank {
    /// The rank.
    pub rank: u32,
    /// How late: long against a launch's own work on the emulator (milliseconds).
    pub delay: Duration,
}

/// One emulated thread's stream of scheduling decisions.
#[derive(Debug)]
pub(crate) struct Pauses {
    state: Cell<u64>,
    /// `Some`: this thread is of the launch's late rank, this late.
    late: Option<Duration>,
}

impl Pauses {
    /// The stream of the thread `linear_tid` of block `linear_block` of rank `rank` in a launch of `seed`,
    /// which `late` may name as its late rank.
    pub(crate) fn new(seed: u64, rank: u32, linear_block: u32, linear_tid: u32, late: Option<LateRank>) -> Pauses {
        let who = u64::from(rank) << 48 ^ u64::from(linear_block) << 24 ^ u64::from(linear_tid);
        let late = late.filter(|l| l.rank == rank).map(|l| l.delay);
        Pauses { state: Cell::new(mix(seed ^ mix(who))), late }
    }

    fn draw(&self) -> u64 {
        let s = self.state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.state.set(s);
        mix(s)
    }

    /// At a thread's start: a quarter of the threads start up to a millisecond late, so that which lanes and
    /// blocks arrive first changes from seed to seed.
    pub(crate) fn at_start(&self) {
        self.be_late();
        let r = self.draw();
        if r.is_multiple_of(4) {
            std::thread::sleep(Duration::from_micros((r >> 8) % 1000));
        }
    }

    /// Before a release wider than the thread's block: the late rank's threads wait.
    pub(crate) fn before_wide_release(&self) {
        self.be_late();
    }

    /// Before a wait begins (a signal wait, an LL read): the late rank's threads read late.
    pub(crate) fn before_wait(&self) {
        self.be_late();
    }

    /// After a signal wait returned: the late rank's threads wait before reading what it ordered.
    pub(crate) fn after_wait(&self) {
        self.be_late();
    }

    /// Whether this thread is of the late rank.
    pub(crate) fn is_late(&self) -> bool {
        self.late.is_some()
    }

    fn be_late(&self) {
        if let Some(delay) = self.late {
            std::thread::sleep(delay);
        }
    }

    /// At a scheduling point: one in eight yields its core, one in 512 sleeps up to 200 µs.
    pub(crate) fn at_point(&self) {
        let r = self.draw();
        if r.is_multiple_of(512) {
            std::thread::sleep(Duration::from_micros((r >> 16) % 200));
        } else if r.is_multiple_of(8) {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_in_decimal_and_hex() {
        assert_eq!(parse_seed("42"), Some(42));
        assert_eq!(parse_seed(" 0x2a "), Some(42));
        assert_eq!(parse_seed("0Xff"), Some(255));
        assert_eq!(parse_seed("forty-two"), None);
    }

    #[test]
    fn one_seed_gives_every_thread_the_same_stream_and_threads_differ() {
        let a: Vec<u64> = (0..8)
            .map({
                let p = Pauses::new(7, 1, 2, 3, None);
                move |_| p.draw()
            })
            .collect();
        let b: Vec<u64> = (0..8)
            .map({
                let p = Pauses::new(7, 1, 2, 3, None);
                move |_| p.draw()
            })
            .collect();
        let other: Vec<u64> = (0..8)
            .map({
                let p = Pauses::new(7, 1, 2, 4, None);
                move |_| p.draw()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, other);
    }
}
