//! Shared helpers of the integration tests: the timeouts they give emulated teams, and the workspace's root.
//!
//! A test's time window is one of two kinds. A **limit** on how long correct work may take only has to
//! catch a hang: the emulator runs a host thread per GPU thread, on however few cores the machine has and
//! beside the other tests of the binary, so a launch that takes milliseconds alone may take seconds there.
//! A **window a test must see elapse** — a wait on a signal no rank raises ends in a typed timeout only
//! after it — is also the limit on the launches the same team runs correctly, so it is seconds, not
//! milliseconds. Tests that know they run on a GPU keep their shorter windows.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// An emulated team's timeout where every wait ends: long enough that only a hang reaches it.
pub const EMULATED_LIMIT: Duration = Duration::from_secs(120);

/// The environment variable that shortens the waits' limit of the suites `tools/mutate` runs, in seconds.
pub const WAIT_LIMIT_ENV: &str = "FERROCOMM_TEST_WAIT_LIMIT_S";

/// `limit`, or less where [`WAIT_LIMIT_ENV`] says so. `tools/mutate` sets it for the runs it makes: a
/// mutant that deadlocks then fails by the team's timeout in that many seconds, not in minutes, twice (its
/// failing test runs once more alone). Its unmutated baseline, under the same limit, shows that correct
/// kernels finish inside it. A limit a test must see elapse ([`EMULATED_HANG`]) is never shortened.
pub fn wait_limit(limit: Duration) -> Duration {
    match std::env::var(WAIT_LIMIT_ENV).map(|v| v.trim().parse::<u64>()) {
        Ok(Ok(s)) if s > 0 => limit.min(Duration::from_secs(s)),
        Ok(_) => panic!("{WAIT_LIMIT_ENV} is not a whole number of seconds above 0"),
        Err(_) => limit,
    }
}

/// An emulated team's timeout where a test waits for a timeout on purpose: the time it costs such a test,
/// and the limit on that team's other launches, which are small.
pub const EMULATED_HANG: Duration = Duration::from_secs(3);

/// The workspace's root: the folder above this package.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests package sits in the workspace").to_owned()
}
