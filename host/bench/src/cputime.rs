//! Host CPU time of the whole process (every thread, user + system): the sum of every thread's own CPU
//! clock.
//!
//! The proxy mode spends CPU in its proxy thread and the CPU-initiated mode in the issuing thread; both
//! count, which is the point: the figure is what a mode costs the host per operation. What the measuring
//! thread spends only waiting for a trial to end (event synchronisation spins by default) is the
//! harness's cost, not the mode's: backends time it with [`thread_cpu_time`] and it is left out.
//!
//! Per-thread clocks are the scheduler's runtime accounting to the nanosecond, including the slice a thread
//! is running right now. Neither process-wide clock is: `getrusage` splits the runtime by timer ticks,
//! and `CLOCK_PROCESS_CPUTIME_ID` adds up the other threads' runtime as of their last tick, so a proxy
//! thread spinning through a 1 ms trial on another core could read as zero (the figures came out in 4 ms
//! steps: 11.45, 5.72 or 0.04 µs per operation at neighbouring points).

use std::time::Duration;

/// User + system CPU time consumed so far by every thread of this process: each thread's clock, the
/// calling thread's read last (zero where the OS cannot say).
pub fn process_cpu_time() -> Duration {
    other_threads_cpu_time() + thread_cpu_time()
}

/// User + system CPU time consumed so far by the calling thread (zero where the OS cannot say).
pub fn thread_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The CPU clocks of every thread of this process but the calling one, summed. Where the threads cannot be
/// listed (no `/proc`), the process clock less the calling thread's.
fn other_threads_cpu_time() -> Duration {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
            return tasks
                .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
                .filter(|&tid| tid != me)
                .map(|tid| cpu_clock(thread_clock(tid)))
                .sum();
        }
    }
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID).saturating_sub(thread_cpu_time())
}

/// The CPU clock of thread `tid` of this process: Linux's `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`,
/// what `pthread_getcpuclockid` returns, made from a thread id (threads the driver started have no
/// `pthread_t` here). A thread that has exited reads as zero.
#[cfg(target_os = "linux")]
fn thread_clock(tid: libc::pid_t) -> libc::clockid_t {
    const CPUCLOCK_PERTHREAD: libc::clockid_t = 4;
    const CPUCLOCK_SCHED: libc::clockid_t = 2;
    (!tid << 3) | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable `timespec`; an unknown clock returns an error, nothing else.
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
    /// for no operations). The calling thread's clock is read first here and last at the start, so the
    /// reading of the other threads' clocks stays out of the span.
    pub fn us_per_op(&self, ops: u64, excluded: Duration) -> Option<f64> {
        let mine = thread_cpu_time();
        let now = mine + other_threads_cpu_time();
        let spent = now.saturating_sub(self.start).saturating_sub(excluded);
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
    fn another_threads_spin_counts_to_the_microsecond() {
        // A thread spinning for 2 ms on another core, still running when the clock is read: well under
        // one timer tick, which a tick-based clock would miss.
        let clock = CpuClock::start();
        let (started, stop) = (
            std::sync::Arc::new(std::sync::Barrier::new(2)),
            std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
        let (s, st) = (started.clone(), stop.clone());
        let spinner = std::thread::spawn(move || {
            s.wait();
            let t = std::time::Instant::now();
            while !st.load(std::sync::atomic::Ordering::Relaxed) || t.elapsed() < Duration::from_millis(2) {
                std::hint::black_box(0u64);
            }
        });
        started.wait();
        std::thread::sleep(Duration::from_millis(3));
        let busy = clock.us_per_op(1, Duration::ZERO).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().unwrap();
        // On a loaded machine the spinner may have had less than its wall time: a lower bound only.
        assert!(busy > 300.0, "a thread spinning ~3 ms read {busy} µs");
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
