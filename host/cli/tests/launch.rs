//! `ferrocomm launch` against small `sh -c` programs: the environment of each rank, the prefixed output,
//! exit statuses, the stopping of the other ranks after a failure, signals to the launcher.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::ferrocomm_binary;

/// `ferrocomm launch FLAGS... -- sh -c SCRIPT`, without an inherited FERROCOMM_BACKEND.
fn launch_sh(flags: &[&str], script: &str) -> Command {
    let mut command = Command::new(ferrocomm_binary());
    command.arg("launch").args(flags).args(["--", "sh", "-c", script]).env_remove("FERROCOMM_BACKEND");
    command
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

fn run(mut command: Command) -> Run {
    let start = Instant::now();
    let Output { status, stdout, stderr } = command.stdin(Stdio::null()).output().expect("the binary runs");
    let run = Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        took: start.elapsed(),
    };
    assert!(!run.stderr.contains("panicked"), "the launcher panicked: {}", run.stderr);
    run
}

/// The lines of `text` that rank `rank` printed, prefix removed, in order.
fn rank_lines(text: &str, rank: usize) -> Vec<&str> {
    let prefix = format!("[rank {rank}] ");
    text.lines().filter_map(|l| l.strip_prefix(prefix.as_str())).collect()
}

const ENV_SCRIPT: &str = r#"echo "r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK lw=$LOCAL_WORLD_SIZE g=$GROUP_RANK m=$MASTER_ADDR:$MASTER_PORT z=$FERROCOMM_RENDEZVOUS b=$FERROCOMM_BACKEND""#;

#[test]
fn every_rank_gets_torchruns_variables_and_the_rendezvous() {
    let out = run(launch_sh(&["-n", "3"], ENV_SCRIPT));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let mut master = None;
    let mut rendezvous = None;
    for rank in 0..3 {
        let lines = rank_lines(&out.stdout, rank);
        assert_eq!(lines.len(), 1, "one line from rank {rank}: {}", out.stdout);
        let fields: Vec<&str> = lines[0].split(' ').collect();
        assert_eq!(fields[..5], [format!("r={rank}").as_str(), "w=3", format!("l={rank}").as_str(), "lw=3", "g=0"]);
        let m = fields[5].strip_prefix("m=127.0.0.1:").expect("MASTER_ADDR is the loopback");
        let z = fields[6].strip_prefix("z=127.0.0.1:").expect("the rendezvous is on the loopback");
        assert!(m.parse::<u16>().is_ok_and(|p| p > 0), "MASTER_PORT: {m}");
        assert!(z.parse::<u16>().is_ok_and(|p| p > 0), "rendezvous port: {z}");
        assert_ne!(m, z, "the rendezvous keeps off torch's store port");
        assert_eq!(*master.get_or_insert(m), m, "every rank gets the same MASTER_PORT");
        assert_eq!(*rendezvous.get_or_insert(z), z, "every rank gets the same rendezvous");
        assert_eq!(fields[7], "b=", "FERROCOMM_BACKEND is left unset without --emulator");
    }
    assert_eq!(out.stdout.lines().count(), 3, "{}", out.stdout);
}

#[test]
fn emulator_sets_the_backend_and_otherwise_it_is_inherited() {
    let out = run(launch_sh(&["-n", "2", "--emulator"], ENV_SCRIPT));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for rank in 0..2 {
        assert!(rank_lines(&out.stdout, rank)[0].ends_with(" b=emulator"), "{}", out.stdout);
    }
    let mut inherited = launch_sh(
        &["-n", "2", "--rendezvous-timeout", "2.5"],
        r#"echo "$FERROCOMM_BACKEND $FERROCOMM_RENDEZVOUS_TIMEOUT_MS""#,
    );
    inherited.env("FERROCOMM_BACKEND", "cuda");
    let out = run(inherited);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(rank_lines(&out.stdout, 0), ["cuda 2500"]);
    assert_eq!(rank_lines(&out.stdout, 1), ["cuda 2500"]);
}

#[test]
fn stdout_and_stderr_come_back_prefixed_on_their_own_streams() {
    let out = run(launch_sh(
        &["-n", "2"],
        r#"echo "out $RANK"; echo "err $RANK" >&2; echo "second $RANK"; printf "partial $RANK""#,
    ));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for rank in 0..2 {
        assert_eq!(
            rank_lines(&out.stdout, rank),
            [format!("out {rank}"), format!("second {rank}"), format!("partial {rank}")]
        );
        assert_eq!(rank_lines(&out.stderr, rank), [format!("err {rank}")]);
    }
    assert!(out.stdout.lines().all(|l| l.starts_with("[rank ")), "{}", out.stdout);
    assert!(out.stdout.ends_with('\n'), "a partial last line is ended: {:?}", out.stdout);
    assert_eq!(out.stderr.lines().count(), 2, "nothing but the ranks' lines: {}", out.stderr);
}

#[test]
fn the_first_failing_ranks_status_is_returned() {
    // Rank 1 fails at once with 3; rank 0 fails later with 9 (within the grace period); rank 2 succeeds.
    let out = run(launch_sh(&["-n", "3"], r#"case $RANK in 0) sleep 1; exit 9;; 1) exit 3;; *) exit 0;; esac"#));
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(
        out.stderr.contains("ferrocomm launch: rank 1 exited with status 3; stopping the other ranks"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("status 9"), "only the first failure is announced: {}", out.stderr);

    let out = run(launch_sh(&["-n", "2"], r#"exit $((RANK+2))"#));
    assert!(matches!(out.code, Some(2 | 3)), "{:?} {}", out.code, out.stderr);
    let out = run(launch_sh(&["-n", "1"], "exit 0"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[test]
fn a_rank_killed_by_a_signal_fails_with_128_plus_the_signal() {
    let out = run(launch_sh(&["-n", "2"], r#"[ "$RANK" = 1 ] && kill -KILL $$; sleep 0.2"#));
    assert_eq!(out.code, Some(137), "{}", out.stderr);
    assert!(out.stderr.contains("rank 1 was killed by signal 9 (SIGKILL)"), "{}", out.stderr);
}

#[test]
fn a_hanging_rank_is_stopped_after_the_grace_period() {
    // `sleep` is not the last command, so `sh` forks it: stopping the rank stops its whole process group.
    let out = run(launch_sh(&["-n", "2", "--grace", "1"], r#"[ "$RANK" = 1 ] && exit 4; sleep 30; echo not stopped"#));
    assert_eq!(out.code, Some(4), "{}", out.stderr);
    assert!(out.took >= Duration::from_millis(900), "the grace period is waited: {:?}", out.took);
    assert!(out.took < Duration::from_secs(6), "the hanging rank was stopped: {:?}", out.took);
    assert!(!out.stdout.contains("not stopped"), "{}", out.stdout);
    assert!(out.stderr.contains("rank 0 still running"), "{}", out.stderr);
}

#[test]
fn a_rank_that_ignores_sigterm_is_killed_2_s_later() {
    // Rank 1 fails only once rank 0 ignores SIGTERM: on a loaded machine rank 0 may not have reached its
    // `trap` when rank 1 exits, and would then die of the SIGTERM at once.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ready = dir.path().join("trapped");
    let script = format!(
        r#"if [ "$RANK" = 1 ]; then while [ ! -e '{0}' ]; do sleep 0.01; done; exit 5; fi; trap "" TERM; touch '{0}'; sleep 30; echo not killed"#,
        ready.display()
    );
    let out = run(launch_sh(&["-n", "2", "--grace", "0"], &script));
    assert_eq!(out.code, Some(5), "{}", out.stderr);
    assert!(out.took >= Duration::from_millis(1900), "SIGKILL waits 2 s after SIGTERM: {:?}", out.took);
    assert!(out.took < Duration::from_secs(7), "{:?}", out.took);
    assert!(out.stderr.contains("sending SIGKILL"), "{}", out.stderr);
    assert!(!out.stdout.contains("not killed"), "{}", out.stdout);
}

#[test]
fn a_program_that_does_not_exist_exits_127() {
    let mut command = Command::new(ferrocomm_binary());
    command.args(["launch", "-n", "3", "--", "ferrocomm-no-such-program-xyz", "arg"]);
    let out = run(command);
    assert_eq!(out.code, Some(127), "{}", out.stderr);
    assert!(out.stderr.contains("ferrocomm-no-such-program-xyz"), "names the program: {}", out.stderr);
    assert!(out.took < Duration::from_secs(2), "{:?}", out.took);
}

#[test]
fn zero_ranks_or_no_program_is_a_usage_error() {
    for args in [&["launch", "-n", "0", "--", "true"][..], &["launch", "-n", "2"], &["launch", "-n", "2", "--"]] {
        let out = run({
            let mut c = Command::new(ferrocomm_binary());
            c.args(args);
            c
        });
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.starts_with("error: "), "clap's usage error: {args:?}: {}", out.stderr);
    }
}

#[test]
fn help_documents_the_variables() {
    let out = run({
        let mut c = Command::new(ferrocomm_binary());
        c.args(["launch", "--help"]);
        c
    });
    assert_eq!(out.code, Some(0));
    for var in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "FERROCOMM_RENDEZVOUS",
        "FERROCOMM_BACKEND=emulator",
        "--emulator",
        "--grace",
        "--rendezvous-timeout",
    ] {
        assert!(out.stdout.contains(var), "--help names {var}: {}", out.stdout);
    }
}

/// Whether this process was started with signal `signal` ignored (then so is the launcher, which leaves it so).
fn ignored(signal: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("SigIgn:")).and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

#[test]
fn sigterm_to_the_launcher_stops_every_rank() {
    const SIGTERM: u32 = 15;
    if ignored(SIGTERM) {
        eprintln!("skipped: this test runs with SIGTERM ignored, which the launcher keeps");
        return;
    }
    let mut launcher = launch_sh(&["-n", "2"], "echo $$; sleep 30; echo not stopped")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let start = Instant::now();
    let mut stdout = BufReader::new(launcher.stdout.take().unwrap());
    let mut pids = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let pid = line.trim().rsplit(' ').next().unwrap().to_owned();
        assert!(pid.parse::<u32>().is_ok(), "a rank's pid: {line:?}");
        pids.push(pid);
    }
    let killed = Command::new("kill").args(["-TERM", &launcher.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = launcher.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut launcher.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(128 + SIGTERM as i32), "{stderr}");
    assert!(stderr.contains("received SIGTERM"), "{stderr}");
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    for pid in pids {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "rank process {pid} outlived the launcher");
    }
}

/// A rank of a real team when `ferrocomm launch` started this test binary: each rank puts `2 * (rank + 1)`
/// into the next rank's inbox with the custom kernel, across processes, and checks its own.
#[test]
#[ignore = "the entry point of a spawned rank: run by its parent test"]
fn team_rank() {
    if std::env::var_os("FERROCOMM_LAUNCH_TEAM_TEST").is_none() {
        eprintln!("skipped: team_rank plays a rank of launched_processes_form_one_team_on_the_emulator");
        return;
    }
    use ferrocomm::{LaunchConfig, SignalPadBuffer, SymBuffer, Team};
    let team = Team::from_env().expect("the team of the launched processes");
    assert!(team.spans_processes());
    let (rank, world) = (team.local_ranks()[0], team.world());
    let mut src = SymBuffer::<f32>::new(&team, 100).unwrap();
    src.fill(rank as f32 + 1.0).unwrap();
    let mut inbox = SymBuffer::<f32>::new(&team, 100).unwrap();
    let pad = SignalPadBuffer::new(&team, "ring", custom_kernel::PAD_SIGNALS).unwrap();
    custom_kernel::scaled_put::launch(&team, LaunchConfig::new(2, 32), &src, &mut inbox, &pad, 2.0)
        .unwrap()
        .wait()
        .unwrap();
    let prev = (rank + world - 1) % world;
    assert_eq!(inbox.to_host(rank).unwrap(), vec![2.0 * (prev as f32 + 1.0); 100]);
    println!("rank {rank} received from rank {prev}");
}

#[test]
fn launched_processes_form_one_team_on_the_emulator() {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let mut command = Command::new(ferrocomm_binary());
    command
        .args(["launch", "-n", "3", "--emulator", "--"])
        .arg(exe)
        .args(["--ignored", "--exact", "team_rank", "--nocapture", "--test-threads=1"])
        .env("FERROCOMM_LAUNCH_TEAM_TEST", "1");
    let out = run(command);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    for (rank, prev) in [(0, 2), (1, 0), (2, 1)] {
        let said = format!("rank {rank} received from rank {prev}");
        assert!(rank_lines(&out.stdout, rank).iter().any(|l| l.contains(&said)), "{}", out.stdout);
    }
}
