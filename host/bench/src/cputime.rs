//! Host CPU time of the whole process (every thread, user + system), from `CLOCK_PROCESS_CPUTIME_ID`.
//!
//! The proxy mode spends CPU in its proxy thread and the CPU-initiated mode in the issuing thread; both
//! count, which is the point: the figure is what a mode costs the host per operation. What the measuring
//! thread spends only waiting for a trial to end (event synchronisation spins by default) is the
//! harness's cost, not the mode's: backends time it with [`thread_cpu_time`] and it is left out.
//!
//! Both clocks are the scheduler's own runtime accounting, in nanoseconds. `getrusage` is not used: it
//! splits that runtime by timer ticks, so a few milliseconds of CPU over a trial came out in 4 ms steps
//! (11.45, 5.72 or 0.04 µs per operation at neighbouring points).

use std::time::Duration;

/// User + system CPU time consumed so far by every thread of this process (zero where the OS cannot say).
pub fn process_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// User + system CPU time consumed so far by the calling thread (zero where the OS cannot say).
pub fn thread_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable `timespec`; an unsupported clock returns an error, nothing else.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec.max(0) as u64, now.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// A span of process CPU time.
#[derive(Debug, Clone, Copy)]
pub struct CpuClock {
    start: Duration,
}

impl CpuClock {
    /// Starts measuring.
    pub fn start() -> CpuClock {
        CpuClock { start: process_cpu_time() }
    }

    /// CPU time since [`CpuClock::start`], less `excluded`, divided over `ops` operations, in µs (`None`
    /// for no operations).
    pub fn us_per_op(&self, ops: u64, excluded: Duration) -> Option<f64> {
        let spent = process_cpu_time().saturating_sub(self.start).saturating_sub(excluded);
        (ops > 0).then(|| spent.as_secs_f64() * 1e6 / ops as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_loop_shows_up() {
        let clock = CpuClock::start();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        // Other tests share the process (and the machine may be loaded): only a lower bound is certain.
        let busy = clock.us_per_op(2, Duration::ZERO).unwrap();
        assert!(busy > 2_500.0, "a 60 ms busy loop measured {busy} µs of CPU per op over 2 ops");
        assert_eq!(clock.us_per_op(0, Duration::ZERO), None);
        // Excluding more than was spent leaves zero, never a negative figure.
        assert_eq!(clock.us_per_op(2, Duration::from_secs(3600)), Some(0.0));
    }

    #[test]
    fn clocks_are_finer_than_a_tick() {
        // A few microseconds of work must show: a tick-based clock (4 ms) reads zero or a whole tick.
        let before = thread_cpu_time();
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_micros(200) {
            std::hint::black_box(0u64);
        }
        let spent = thread_cpu_time().saturating_sub(before);
        assert!(spent > Duration::ZERO && spent < Duration::from_millis(3), "200 µs of spinning read {spent:?}");
    }

    #[test]
    fn thread_time_counts_this_thread_only() {
        let before = thread_cpu_time();
        let other = std::thread::spawn(|| {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(40) {
                std::hint::black_box(0u64);
            }
        });
        other.join().unwrap();
        // This thread only waited on the join.
        assert!(thread_cpu_time().saturating_sub(before) < Duration::from_millis(30));
    }
}
