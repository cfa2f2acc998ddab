//! `ferrocomm launch`: starts N processes of a program on this machine with the environment torchrun gives
//! its workers, for machines without torch.
//!
//! Rank `i` of `N` gets `RANK=i`, `WORLD_SIZE=N`, `LOCAL_RANK=i`, `LOCAL_WORLD_SIZE=N`, `GROUP_RANK=0`,
//! `MASTER_ADDR=127.0.0.1`, `MASTER_PORT` (a free TCP port, for torch's store) and `FERROCOMM_RENDEZVOUS`
//! (`127.0.0.1:` another free port: ferrocomm's own rendezvous, hosted by rank 0); `--emulator` adds
//! `FERROCOMM_BACKEND=emulator`, `--rendezvous-timeout` adds `FERROCOMM_RENDEZVOUS_TIMEOUT_MS`. Everything
//! else is inherited; standard input is not (every rank reads an empty one).
//!
//! Each rank's output comes back line by line, `[rank i] ` before each line (its stdout on stdout, its
//! stderr on stderr). The launcher's exit status is the first failing rank's (a rank killed by a signal
//! exits with 128 + the signal, as shells report): once a rank fails, the others get a grace period
//! (`--grace`, 10 s) to exit on their own, then SIGTERM, then SIGKILL 2 s later. A program that cannot
//! be started exits 127 (126 where it exists but cannot be executed), as in a shell.
//!
//! Processes: every rank is the leader of a process group of its own, so stopping a rank stops what it
//! started too (`sh -c '...; sleep 30'` included). The terminal's Ctrl-C therefore reaches the launcher
//! only, which forwards SIGINT, SIGTERM and SIGHUP to every running rank's group and kills what is left
//! 2 s later (a second signal kills at once); it exits with 128 + the signal. A signal the launcher was
//! started with ignored (`nohup`, a script's `cmd &`) is left ignored, and the ranks inherit that. A
//! launcher killed with SIGKILL cannot forward anything: its ranks then go on as orphans.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Writes one line of the launcher's own to stderr; a closed stderr is no reason to abandon the ranks.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(io::stderr(), "ferrocomm launch: {}", format_args!($($arg)*));
    }};
}

/// The address every rank is told to meet at: this machine's loopback.
pub const MASTER_ADDR: &str = "127.0.0.1";
/// ferrocomm's rendezvous address, `127.0.0.1:PORT`.
pub const RENDEZVOUS_ENV: &str = "FERROCOMM_RENDEZVOUS";
/// How long the ranks may take to meet at the rendezvous, in milliseconds (only set by
/// `--rendezvous-timeout`).
pub const RENDEZVOUS_TIMEOUT_ENV: &str = "FERROCOMM_RENDEZVOUS_TIMEOUT_MS";
/// How long ranks get between SIGTERM (or a forwarded signal) and SIGKILL.
pub const KILL_AFTER: Duration = Duration::from_secs(2);
/// How long the launcher waits, once every rank has exited, for output still held by processes that
/// outlived their rank (a background job the rank started).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

const ENV_HELP: &str = "\
Environment of rank i of N (everything else is inherited; standard input is empty):
  RANK=i  WORLD_SIZE=N  LOCAL_RANK=i  LOCAL_WORLD_SIZE=N  GROUP_RANK=0
  MASTER_ADDR=127.0.0.1  MASTER_PORT=<a free TCP port>        (torch's store, as torchrun sets them)
  FERROCOMM_RENDEZVOUS=127.0.0.1:<another free TCP port>      (ferrocomm's rendezvous, hosted by rank 0)
  FERROCOMM_BACKEND=emulator                                  (with --emulator; else inherited)
  FERROCOMM_RENDEZVOUS_TIMEOUT_MS=<SECS * 1000>               (with --rendezvous-timeout; else inherited)

Output: every line of a rank's stdout and stderr comes back on the same stream, prefixed `[rank i] `.

Exit status: 0 when every rank succeeds, else the first failing rank's (128 + signal for a rank killed by
a signal). After the first failure the other ranks get --grace seconds to exit, then SIGTERM, then SIGKILL
2 s later. A PROGRAM that cannot be started: 127 (126 if it exists but cannot be executed).

Signals: each rank leads a process group of its own; SIGINT (Ctrl-C), SIGTERM and SIGHUP sent to the
launcher are forwarded to every rank's group, SIGKILL follows 2 s later (or at once on a second signal),
and the launcher exits with 128 + the signal. A signal ignored when the launcher starts (nohup) stays so.

Example:
  ferrocomm launch -n 2 --emulator -- cargo run --release --example quickstart";

/// `ferrocomm launch`'s arguments.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = ENV_HELP)]
pub struct LaunchArgs {
    /// How many processes (ranks) to start.
    #[arg(
        short = 'n',
        long = "nproc-per-node",
        value_name = "N",
        value_parser = parse_nprocs
    )]
    pub nprocs: u32,
    /// Runs every rank on ferrocomm's CPU emulator: sets FERROCOMM_BACKEND=emulator.
    #[arg(long)]
    pub emulator: bool,
    /// How long the ranks may take to meet at ferrocomm's rendezvous: sets FERROCOMM_RENDEZVOUS_TIMEOUT_MS.
    #[arg(long, value_name = "SECS", value_parser = parse_positive_secs)]
    pub rendezvous_timeout: Option<Duration>,
    /// After the first rank fails, how long the others get to exit on their own before they are stopped.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_secs)]
    pub grace: Duration,
    /// The program every rank runs, and its arguments (after `--`).
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_parser = clap::value_parser!(OsString)
    )]
    pub command: Vec<OsString>,
}

/// A number of ranks: 1 or more.
fn parse_nprocs(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(0) => Err("at least 1 rank is needed".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a number of ranks")),
    }
}

/// A number of seconds (fractions allowed), zero included.
fn parse_secs(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.trim().parse().map_err(|_| format!("`{text}` is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{text}` is not a number of seconds (0 or more)"))
}

/// A number of seconds greater than zero.
fn parse_positive_secs(text: &str) -> Result<Duration, String> {
    match parse_secs(text)? {
        d if d.is_zero() => Err("the timeout must be more than 0 seconds".to_owned()),
        d => Ok(d),
    }
}

/// The ports one launch hands its ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// `MASTER_PORT`: torch's store.
    pub master: u16,
    /// The port of `FERROCOMM_RENDEZVOUS`.
    pub rendezvous: u16,
}

/// Two distinct free TCP ports of 127.0.0.1: both listeners are held until both ports are known, then dropped.
pub fn free_ports() -> io::Result<Ports> {
    let master = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let rendezvous = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(Ports { master: master.local_addr()?.port(), rendezvous: rendezvous.local_addr()?.port() })
}

/// The variables rank `rank` of `args.nprocs` gets, in the order `--help` lists them.
pub fn rank_env(args: &LaunchArgs, rank: u32, ports: Ports) -> Vec<(&'static str, String)> {
    let n = args.nprocs;
    let mut env = vec![
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", n.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("LOCAL_WORLD_SIZE", n.to_string()),
        ("GROUP_RANK", "0".to_owned()),
        ("MASTER_ADDR", MASTER_ADDR.to_owned()),
        ("MASTER_PORT", ports.master.to_string()),
        (RENDEZVOUS_ENV, format!("{MASTER_ADDR}:{}", ports.rendezvous)),
    ];
    if args.emulator {
        env.push((ferrocomm::team::BACKEND_ENV, "emulator".to_owned()));
    }
    if let Some(timeout) = args.rendezvous_timeout {
        env.push((RENDEZVOUS_TIMEOUT_ENV, timeout.as_millis().max(1).to_string()));
    }
    env
}

/// The exit code a shell would report for `status`: the code, or 128 + the signal that killed it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
        (None, None) => 1,
    }
}

/// `exited with status 3`, `was killed by signal 9 (SIGKILL)`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(name) => format!("was killed by signal {signal} ({})", name.as_str()),
            Err(_) => format!("was killed by signal {signal}"),
        },
        (None, None) => format!("ended ({status})"),
    }
}

fn signal_name(signal: i32) -> String {
    Signal::try_from(signal).map(|s| s.as_str().to_owned()).unwrap_or_else(|_| format!("signal {signal}"))
}

/// The signals this process was started with ignored, bit `s - 1` for signal `s` (Linux's `SigIgn`; none
/// where `/proc` does not say).
fn ignored_signals() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|line| line.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .unwrap_or(0)
}

/// What the supervisor hears about.
#[derive(Debug)]
enum Event {
    /// A rank's process ended (or could not be waited for).
    Exited { rank: usize, status: io::Result<ExitStatus> },
    /// The launcher received this signal.
    Signal(i32),
}

/// One started rank.
#[derive(Debug)]
struct Rank {
    /// Its process id, which is also its process group's id.
    pgid: Pid,
    /// `None` while it runs; its exit code once it has ended.
    exit: Option<u8>,
}

/// Where the stopping of the ranks stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing has failed.
    Running,
    /// A rank failed; the others may exit on their own until then.
    Grace(Instant),
    /// The running ranks were sent SIGTERM (or a forwarded signal); SIGKILL follows then.
    Terminating(Instant),
    /// The running ranks were sent SIGKILL.
    Killed,
}

/// Starts the ranks, streams their output and waits for them: the launcher's exit code.
///
/// Installs handlers for SIGINT, SIGTERM and SIGHUP in this process (they are forwarded to the ranks); meant
/// to be called once, by the `ferrocomm` binary.
pub fn run(args: &LaunchArgs) -> u8 {
    let Some(program) = args.command.first() else {
        say!("no PROGRAM given");
        return 2;
    };
    let ports = match free_ports() {
        Ok(ports) => ports,
        Err(e) => {
            say!("cannot find free TCP ports on {MASTER_ADDR}: {e}");
            return 1;
        }
    };
    let (events, inbox) = mpsc::channel();
    // The handlers go in before any rank starts, so that no signal can end the launcher and leave ranks behind.
    // A signal ignored from the start (`nohup`, a script's `&`) stays ignored, for the ranks too.
    let ignored = ignored_signals();
    let caught = [SIGINT, SIGTERM, SIGHUP].into_iter().filter(|&s| ignored & (1 << (s - 1)) == 0);
    let mut signals = match Signals::new(caught) {
        Ok(signals) => signals,
        Err(e) => {
            say!("cannot install signal handlers: {e}");
            return 1;
        }
    };
    let signal_events = events.clone();
    thread::spawn(move || {
        for signal in signals.forever() {
            if signal_events.send(Event::Signal(signal)).is_err() {
                break;
            }
        }
    });

    let (output_done, output_inbox) = mpsc::channel();
    let mut ranks = Vec::new();
    let mut start_failure = None;
    for rank in 0..args.nprocs {
        let mut command = Command::new(program);
        command
            .args(&args.command[1..])
            .envs(rank_env(args, rank, ports))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        match command.spawn() {
            Ok(mut child) => {
                let prefix = format!("[rank {rank}] ");
                if let Some(out) = child.stdout.take() {
                    forward_lines(out, prefix.clone(), io::stdout, output_done.clone());
                }
                if let Some(err) = child.stderr.take() {
                    forward_lines(err, prefix, io::stderr, output_done.clone());
                }
                let index = ranks.len();
                ranks.push(Rank { pgid: Pid::from_raw(child.id() as i32), exit: None });
                let exits = events.clone();
                thread::spawn(move || {
                    let _ = exits.send(Event::Exited { rank: index, status: child.wait() });
                });
            }
            Err(e) => {
                start_failure = Some((rank, e));
                break;
            }
        }
    }
    drop(output_done);
    drop(events);

    let mut outcome = None;
    let mut phase = Phase::Running;
    if let Some((rank, e)) = start_failure {
        let code = if e.kind() == io::ErrorKind::NotFound { 127 } else { 126 };
        let started = if rank == 0 { String::new() } else { format!(" (rank {rank}); stopping the started ranks") };
        say!("cannot start `{}`: {e}{started}", program.to_string_lossy());
        outcome = Some(code);
        signal_running(&ranks, Signal::SIGTERM);
        phase = Phase::Terminating(Instant::now() + KILL_AFTER);
    }
    supervise(&mut ranks, &inbox, args.grace, &mut outcome, phase);

    // Every reader ends at the end of its pipe; a process that outlived its rank may keep one open.
    let readers = 2 * ranks.len();
    let drained_by = Instant::now() + OUTPUT_DRAIN;
    for _ in 0..readers {
        if output_inbox.recv_timeout(drained_by.saturating_duration_since(Instant::now())).is_err() {
            break;
        }
    }
    outcome.unwrap_or(0)
}

/// Waits until every rank has ended, stopping them as the module docs say; `outcome` ends up holding the
/// launcher's exit code where something failed.
fn supervise(ranks: &mut [Rank], inbox: &Receiver<Event>, grace: Duration, outcome: &mut Option<u8>, mut phase: Phase) {
    while ranks.iter().any(|r| r.exit.is_none()) {
        let event = match phase {
            Phase::Grace(deadline) | Phase::Terminating(deadline) => {
                match inbox.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(event) => Some(event),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            Phase::Running | Phase::Killed => match inbox.recv() {
                Ok(event) => Some(event),
                Err(_) => return,
            },
        };
        match event {
            None => match phase {
                Phase::Grace(_) => {
                    say!(
                        "{} still running {} s after the first failure; sending SIGTERM",
                        running_list(ranks),
                        grace.as_secs_f64()
                    );
                    signal_running(ranks, Signal::SIGTERM);
                    phase = Phase::Terminating(Instant::now() + KILL_AFTER);
                }
                Phase::Terminating(_) => {
                    say!(
                        "{} still running {} s after being told to stop; sending SIGKILL",
                        running_list(ranks),
                        KILL_AFTER.as_secs()
                    );
                    signal_running(ranks, Signal::SIGKILL);
                    phase = Phase::Killed;
                }
                Phase::Running | Phase::Killed => {}
            },
            Some(Event::Exited { rank, status }) => {
                let (code, how) = match status {
                    Ok(status) => (exit_code(status), describe(status)),
                    Err(e) => (1, format!("could not be waited for ({e})")),
                };
                ranks[rank].exit = Some(code);
                if code != 0 && outcome.is_none() {
                    *outcome = Some(code);
                    if ranks.iter().any(|r| r.exit.is_none()) {
                        say!(
                            "rank {rank} {how}; stopping the other ranks (they have {} s to exit)",
                            grace.as_secs_f64()
                        );
                        phase = Phase::Grace(Instant::now() + grace);
                    } else {
                        say!("rank {rank} {how}");
                    }
                }
            }
            Some(Event::Signal(signal)) => match phase {
                Phase::Running | Phase::Grace(_) => {
                    say!("received {}; forwarding it to {}", signal_name(signal), running_list(ranks));
                    outcome.get_or_insert((128 + signal).clamp(0, 255) as u8);
                    match Signal::try_from(signal) {
                        Ok(signal) => signal_running(ranks, signal),
                        Err(_) => signal_running(ranks, Signal::SIGTERM),
                    }
                    phase = Phase::Terminating(Instant::now() + KILL_AFTER);
                }
                Phase::Terminating(_) | Phase::Killed => {
                    say!("received {} while stopping; sending SIGKILL to {}", signal_name(signal), running_list(ranks));
                    outcome.get_or_insert((128 + signal).clamp(0, 255) as u8);
                    signal_running(ranks, Signal::SIGKILL);
                    phase = Phase::Killed;
                }
            },
        }
    }
}

/// `rank 2`, `ranks 0, 3`.
fn running_list(ranks: &[Rank]) -> String {
    let running: Vec<usize> = (0..ranks.len()).filter(|&r| ranks[r].exit.is_none()).collect();
    let mut list = String::from(if running.len() == 1 { "rank " } else { "ranks " });
    for (i, rank) in running.iter().enumerate() {
        let _ = write!(list, "{}{rank}", if i == 0 { "" } else { ", " });
    }
    list
}

/// Sends `signal` to the process group of every rank still running (errors ignored: a group may just have
/// ended).
fn signal_running(ranks: &[Rank], signal: Signal) {
    for rank in ranks.iter().filter(|r| r.exit.is_none()) {
        let _ = killpg(rank.pgid, signal);
    }
}

/// Copies `from` to `to()` line by line, `prefix` before each line, on a thread of its own; a last line
/// without a newline gets one. Says so on `done` at the end of `from`.
fn forward_lines<R, W>(from: R, prefix: String, to: fn() -> W, done: Sender<()>)
where
    R: Read + Send + 'static,
    W: Write + 'static,
{
    thread::spawn(move || {
        let mut from = BufReader::new(from);
        let mut line = prefix.clone().into_bytes();
        loop {
            line.truncate(prefix.len());
            match from.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    // One write per line keeps the ranks' lines whole; a closed stream is drained regardless.
                    let mut out = to();
                    let _ = out.write_all(&line).and_then(|()| out.flush());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done.send(());
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        launch: LaunchArgs,
    }

    fn parse(args: &[&str]) -> Result<LaunchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("launch").chain(args.iter().copied())).map(|c| c.launch)
    }

    #[test]
    fn flags_before_the_program_are_the_launchers_and_after_it_the_programs() {
        let args =
            parse(&["-n", "2", "--emulator", "--grace", "0.5", "python", "-u", "train.py", "--emulator"]).unwrap();
        assert_eq!(args.nprocs, 2);
        assert!(args.emulator);
        assert_eq!(args.grace, Duration::from_millis(500));
        assert_eq!(args.command, ["python", "-u", "train.py", "--emulator"].map(OsString::from));
        let args = parse(&["-n", "1", "--", "-weird", "x"]).unwrap();
        assert_eq!(args.command, ["-weird", "x"].map(OsString::from));
        assert_eq!(args.grace, Duration::from_secs(10));
        assert_eq!(args.rendezvous_timeout, None);
    }

    #[test]
    fn zero_ranks_no_program_and_bad_durations_are_usage_errors() {
        assert!(parse(&["-n", "0", "--", "true"]).is_err());
        assert!(parse(&["-n", "2"]).is_err());
        assert!(parse(&["-n", "2", "--"]).is_err());
        assert!(parse(&["--", "true"]).is_err());
        assert!(parse(&["-n", "2", "--grace", "-1", "--", "true"]).is_err());
        assert!(parse(&["-n", "2", "--rendezvous-timeout", "0", "--", "true"]).is_err());
        assert!(parse(&["-n", "2", "--rendezvous-timeout", "soon", "--", "true"]).is_err());
    }

    #[test]
    fn the_environment_of_a_rank() {
        let args = parse(&["-n", "4", "--rendezvous-timeout", "1.5", "--", "true"]).unwrap();
        let ports = Ports { master: 1000, rendezvous: 2000 };
        let env = rank_env(&args, 3, ports);
        let get = |k: &str| env.iter().find(|(name, _)| *name == k).map(|(_, v)| v.as_str());
        assert_eq!(get("RANK"), Some("3"));
        assert_eq!(get("WORLD_SIZE"), Some("4"));
        assert_eq!(get("LOCAL_RANK"), Some("3"));
        assert_eq!(get("LOCAL_WORLD_SIZE"), Some("4"));
        assert_eq!(get("GROUP_RANK"), Some("0"));
        assert_eq!(get("MASTER_ADDR"), Some("127.0.0.1"));
        assert_eq!(get("MASTER_PORT"), Some("1000"));
        assert_eq!(get("FERROCOMM_RENDEZVOUS"), Some("127.0.0.1:2000"));
        assert_eq!(get("FERROCOMM_RENDEZVOUS_TIMEOUT_MS"), Some("1500"));
        assert_eq!(get("FERROCOMM_BACKEND"), None, "inherited without --emulator");
    }

    #[test]
    fn free_ports_differ() {
        let ports = free_ports().unwrap();
        assert_ne!(ports.master, ports.rendezvous);
        assert!(ports.master != 0 && ports.rendezvous != 0);
    }

    #[test]
    fn exit_codes_are_a_shells() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
        assert_eq!(describe(ExitStatus::from_raw(3 << 8)), "exited with status 3");
        assert_eq!(describe(ExitStatus::from_raw(15)), "was killed by signal 15 (SIGTERM)");
    }
}
