//! Jobs of several processes of the running test binary on this host, started with the variables torchrun
//! sets: each process re-runs one test of the binary (`rank_process`, ignored in a normal run so that it is
//! not counted as a test of its own), which plays a rank and prints `outcome: ...`. Output is read while the
//! ranks run (a rank that prints more than a pipe holds must not stall), and a rank past the deadline is
//! killed, so a hang fails the test instead of stalling it.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What one rank printed and how it ended.
pub struct RankOutput {
    pub rank: usize,
    /// Its exit status; `None` when it was killed (by a signal, or for passing the deadline).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl RankOutput {
    /// What the rank said its outcome was.
    pub fn outcome(&self) -> &str {
        // libtest has printed `test rank_process ... ` before it on the same line.
        self.stdout.lines().find_map(|l| l.split_once("outcome: ").map(|(_, o)| o)).unwrap_or("<no outcome>")
    }
}

impl std::fmt::Debug for RankOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {} (exit {:?}): {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.rank,
            self.code,
            self.outcome(),
            self.stdout,
            self.stderr
        )
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

fn drain(mut from: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = from.read_to_string(&mut text);
        text
    })
}

/// Starts the job ranks `ranks` of a job of `world` on the emulator, each running this binary's ignored
/// test `rank_process` with `env(rank)` added to torchrun's variables, and waits for all of them (at most
/// `deadline` in all).
pub fn job(
    world: usize,
    ranks: &[usize],
    deadline: Duration,
    env: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<RankOutput> {
    let rendezvous = format!("127.0.0.1:{}", free_port());
    let exe = std::env::current_exe().expect("this test binary");
    let children: Vec<(usize, Child, JoinHandle<String>, JoinHandle<String>)> = ranks
        .iter()
        .map(|&rank| {
            let mut cmd = Command::new(&exe);
            cmd.args(["--ignored", "--exact", "rank_process", "--nocapture", "--test-threads=1"])
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_WORLD_SIZE", world.to_string())
                .env("FERROCOMM_RENDEZVOUS", &rendezvous)
                .env("FERROCOMM_RENDEZVOUS_TIMEOUT_MS", "60000")
                .env("FERROCOMM_BACKEND", "emulator")
                .env_remove("FERROCOMM_RANKS_PER_GPU")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env(rank) {
                cmd.env(k, v);
            }
            let mut child = cmd.spawn().expect("start a rank");
            let stdout = drain(child.stdout.take().expect("piped"));
            let stderr = drain(child.stderr.take().expect("piped"));
            (rank, child, stdout, stderr)
        })
        .collect();
    let started = Instant::now();
    children
        .into_iter()
        .map(|(rank, mut child, stdout, stderr)| {
            let code = loop {
                if let Some(status) = child.try_wait().expect("wait") {
                    break status.code();
                }
                if started.elapsed() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let (stdout, stderr) = (stdout.join().expect("reader"), stderr.join().expect("reader"));
            RankOutput { rank, code, stdout, stderr }
        })
        .collect()
}
