//! CUDA's Multi-Process Service for tests whose processes share one GPU: without it their kernels take
//! turns (about 2 ms per switch), so a signal between two processes on one GPU waits for a switch and a
//! kernel that waits for another process's kernel never sees it run. A test starts the daemon (which needs
//! root and `nvidia-cuda-mps-control`) in pipe and log directories of its own, passes [`MpsDaemon::env`] to
//! its processes, and the daemon stops when the guard drops. A daemon already serving this process is
//! used as it is, and left running.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferrocomm::system::{self, MPS_PIPE_DIRECTORY_ENV, Mps};

const CONTROL: &str = "nvidia-cuda-mps-control";
const LOG_DIRECTORY_ENV: &str = "CUDA_MPS_LOG_DIRECTORY";

/// A running MPS control daemon, stopped on drop when this guard started it.
pub struct MpsDaemon {
    pipe: PathBuf,
    log: Option<PathBuf>,
    /// The directories this guard made (and removes), when it started the daemon.
    owned: Option<tempfile::TempDir>,
}

impl MpsDaemon {
    /// Starts the daemon, or finds the one serving this process; `Err` says why MPS cannot run here.
    pub fn start() -> Result<MpsDaemon, String> {
        // A daemon another test just stopped takes a moment to go (its server outlives the quit).
        wait_while(Duration::from_secs(15), || matches!(system::mps(), Mps::Inactive { daemon_elsewhere: true, .. }));
        match system::mps() {
            Mps::Active { pipe_directory } => {
                eprintln!("MPS: using the running daemon ({})", pipe_directory.display());
                return Ok(MpsDaemon { pipe: pipe_directory, log: None, owned: None });
            }
            Mps::Inactive { daemon_elsewhere: true, pipe_directory } => {
                return Err(format!(
                    "an MPS daemon runs, but not in {} ({MPS_PIPE_DIRECTORY_ENV}); a second one cannot serve the same GPUs",
                    pipe_directory.display()
                ));
            }
            Mps::Inactive { .. } => {}
        }
        let owned = tempfile::Builder::new().prefix("ferrocomm-mps").tempdir().map_err(|e| e.to_string())?;
        let (pipe, log) = (owned.path().join("pipe"), owned.path().join("log"));
        for dir in [&pipe, &log] {
            std::fs::create_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let status = Command::new(CONTROL)
            .arg("-d")
            .env(MPS_PIPE_DIRECTORY_ENV, &pipe)
            .env(LOG_DIRECTORY_ENV, &log)
            .status()
            .map_err(|e| format!("`{CONTROL} -d` cannot be run: {e}"))?;
        if !status.success() {
            return Err(format!("`{CONTROL} -d` failed ({status}); its log: {}", read_log(&log)));
        }
        let daemon = MpsDaemon { pipe, log: Some(log), owned: Some(owned) };
        if !wait_while(Duration::from_secs(10), || !matches!(daemon.state(), Mps::Active { .. })) {
            return Err(format!("the MPS daemon did not come up in 10 s; its log: {}", daemon.log()));
        }
        eprintln!("MPS: started a control daemon for this test ({})", daemon.pipe.display());
        Ok(daemon)
    }

    /// The variables that make a process a client of this daemon.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![(MPS_PIPE_DIRECTORY_ENV, self.pipe.display().to_string())];
        if let Some(log) = &self.log {
            env.push((LOG_DIRECTORY_ENV, log.display().to_string()));
        }
        env
    }

    /// What the daemon logged (its control log), for a failure's message.
    pub fn log(&self) -> String {
        self.log.as_deref().map_or_else(|| "(a daemon this test did not start)".to_owned(), read_log)
    }

    fn state(&self) -> Mps {
        system::mps_at(&self.pipe)
    }
}

impl Drop for MpsDaemon {
    fn drop(&mut self) {
        if self.owned.is_none() {
            return;
        }
        let quit =
            Command::new(CONTROL).env(MPS_PIPE_DIRECTORY_ENV, &self.pipe).stdin(Stdio::piped()).spawn().and_then(
                |mut c| {
                    use std::io::Write;
                    c.stdin.take().expect("piped").write_all(b"quit\n")?;
                    c.wait()
                },
            );
        match quit {
            Ok(status) if status.success() => eprintln!("MPS: stopped the daemon this test started"),
            other => eprintln!("MPS: stopping the daemon failed ({other:?}); its log: {}", self.log()),
        }
        // The quit returns before the daemon and its server have exited; the next test (or process) to
        // start one would find this one still running.
        let runs = || matches!(system::mps(), Mps::Inactive { daemon_elsewhere: true, .. } | Mps::Active { .. });
        if !wait_while(Duration::from_secs(15), runs) {
            eprintln!("MPS: the daemon this test stopped still runs after 15 s; its log: {}", self.log());
        }
    }
}

/// Waits up to `limit` while `still` holds (polled every 50 ms); whether it stopped holding.
fn wait_while(limit: Duration, still: impl Fn() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if !still() {
            return true;
        }
        if started.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("control.log")).unwrap_or_else(|e| format!("(no control.log: {e})"))
}
