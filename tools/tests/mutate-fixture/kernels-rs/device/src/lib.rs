//! A stand-in for the device library: each ordering call has a `relaxed` twin, which `tools/mutate`
//! substitutes, and each twin misbehaves in its own way so that a test sees it.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Flag(pub AtomicU64);

impl Flag {
    pub fn set_release(&self, v: u64) {
        self.0.store(v, Ordering::Release)
    }

    /// Loses the store, as a reader may find a relaxed flag's data missing: the test of `publish` fails.
    pub fn set_relaxed(&self, _v: u64) {}

    pub fn add_release(&self, v: u64) {
        self.0.fetch_add(v, Ordering::Release);
    }

    /// Takes one more argument: the `relaxed` mutant of `add_release` does not compile.
    pub fn add_relaxed(&self, v: u64, _unused: u64) {
        self.0.fetch_add(v, Ordering::Relaxed);
    }

    pub fn load_acquire(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Never returns: the `relaxed` mutant of `load_acquire` hangs its test.
    pub fn load_relaxed(&self) -> u64 {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }

    pub fn wait_acquire(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Fails as a deadlocked wait does under the team's watchdog: after most of the fixture's 5 s budget,
    /// so that the failure and its second run together take longer than one budget.
    pub fn wait_relaxed(&self) -> u64 {
        std::thread::sleep(std::time::Duration::from_secs(3));
        panic!("the wait timed out: the watchdog ended it");
    }
}
