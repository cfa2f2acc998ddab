//! Joining the rendezvous: rank 0 accepts every rank's hello and checks that they agree; the others
//! connect (retrying while rank 0 is not up yet) and wait for rank 0's verdict.
//!
//! Rank 0 decides for the whole job: when something is wrong it tells every rank that joined, so all
//! fail with the same error. A non-zero rank therefore waits for the verdict longer than rank 0 waits
//! for the ranks (`verdict_wait`), else it would give up just before being told why.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::env::JobEnv;
use crate::error::BootstrapError;
use crate::protocol::{self, Hello, MAX_FRAME, MAX_HELLO, Member, Reply, VERSION};
use crate::wire::{FrameError, left, read_frame, readable, write_frame};

/// The operation name in the errors of the join itself.
pub(crate) const JOIN: &str = "the rendezvous";

/// How long a non-zero rank waits for rank 0's answer when rank 0 waits `timeout` for the others: rank
/// 0 may have entered up to `timeout` later, and then waits `timeout` itself.
pub(crate) fn verdict_wait(timeout: Duration) -> Duration {
    timeout * 2 + Duration::from_millis(100)
}

/// How long rank 0 gives a stream to deliver a message it has started, or to take an error message.
const SHORT: Duration = Duration::from_secs(1);

/// The hello this process sends (or, on rank 0, counts as its own).
pub(crate) fn hello(env: &JobEnv) -> Hello {
    Hello {
        version: VERSION,
        rank: env.rank,
        world: env.world,
        local_rank: env.local_rank,
        local_world: env.local_world,
        host: env.host.clone(),
        job_key: env.job_key.clone(),
    }
}

/// Tells `streams` about `error` (best effort: they may be gone) and returns it.
fn fail_all<'a>(streams: impl IntoIterator<Item = &'a mut TcpStream>, error: BootstrapError) -> BootstrapError {
    let message = protocol::failed(&error);
    for s in streams {
        let _ = write_frame(s, &message, Instant::now() + SHORT);
    }
    error
}

/// Rank 0: accepts every other rank on `listener` within `timeout`, checks the hellos, sends everyone
/// the table. Returns the streams (indexed by rank, `None` for rank 0) and the table.
pub(crate) fn host(
    env: &JobEnv,
    listener: &TcpListener,
    timeout: Duration,
) -> Result<(Vec<Option<TcpStream>>, Vec<Member>), BootstrapError> {
    let io = |call, e| BootstrapError::io(JOIN, 0, call, e);
    listener.set_nonblocking(true).map_err(|e| io("set_nonblocking", e))?;
    let deadline = Instant::now() + timeout;
    let mut streams: Vec<Option<TcpStream>> = (0..env.world).map(|_| None).collect();
    let mut hellos: Vec<Option<Hello>> = vec![None; env.world];
    hellos[0] = Some(hello(env));
    let mut fresh: Vec<(TcpStream, SocketAddr)> = Vec::new();
    let mut turned_away: Vec<String> = Vec::new();
    loop {
        let missing: Vec<usize> = (0..env.world).filter(|&r| hellos[r].is_none()).collect();
        if missing.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let error = BootstrapError::NeverJoined { missing, waited: timeout, turned_away };
            return Err(fail_all(streams.iter_mut().flatten(), error));
        }
        // Wait on the listener, the connections that have not said hello, and the joined ones (whose
        // only news can be that they closed).
        let joined: Vec<usize> = (1..env.world).filter(|&r| streams[r].is_some()).collect();
        let mut fds = vec![listener.as_fd()];
        fds.extend(fresh.iter().map(|(s, _)| s.as_fd()));
        fds.extend(joined.iter().map(|&r| streams[r].as_ref().expect("joined").as_fd()));
        let ready = readable(&fds, left(deadline)).map_err(|e| io("poll", e))?;
        drop(fds);
        if let Some(&r) = ready.iter().filter(|&&i| i > fresh.len()).map(|&i| &joined[i - 1 - fresh.len()]).next() {
            // A joined rank has nothing to say before the table: it closed, or does not follow the protocol.
            let s = streams[r].as_mut().expect("joined");
            let error = match read_frame(s, MAX_HELLO, Instant::now() + SHORT) {
                Ok(_) | Err(FrameError::TooLarge(_)) => {
                    BootstrapError::Malformed { during: JOIN, peer: r, detail: "a message before the table".into() }
                }
                Err(_) => BootstrapError::PeerLost { rank: r, during: JOIN },
            };
            streams[r] = None;
            return Err(fail_all(streams.iter_mut().flatten(), error));
        }
        let mut done = Vec::new();
        for &i in ready.iter().filter(|&&i| 1 <= i && i <= fresh.len()) {
            done.push(i - 1);
        }
        // Take the ready fresh connections out, last first so the indices stay valid.
        for i in done.into_iter().rev() {
            let (mut s, addr) = fresh.swap_remove(i);
            let frame = match read_frame(&mut s, MAX_HELLO, Instant::now() + SHORT.min(left(deadline))) {
                Ok(frame) => frame,
                Err(FrameError::Closed) => continue, // a port probe, or a rank that gave up
                Err(e) => {
                    turned_away.push(format!("{addr} sent no hello ({e:?})"));
                    continue;
                }
            };
            let hello = match Hello::decode(&frame) {
                Ok(hello) => hello,
                Err(None) => {
                    turned_away.push(format!("{addr} is not a ferrocomm rank"));
                    continue;
                }
                Err(Some((says, rank))) => {
                    // Not necessarily of this job, so it is turned away rather than failing the job.
                    let error = BootstrapError::ProtocolMismatch { rank, says, expected: VERSION };
                    turned_away.push(format!("{addr} (rank {rank}): {error}"));
                    fail_all([&mut s], error);
                    continue;
                }
            };
            if hello.job_key != env.job_key {
                let error = BootstrapError::JobMismatch {
                    rank: hello.rank,
                    says: hello.job_key,
                    expected: env.job_key.clone(),
                };
                tracing::warn!(%addr, "turned away a process of another job: {error}");
                turned_away.push(format!("{addr} (rank {}) is of another job", hello.rank));
                fail_all([&mut s], error);
                continue;
            }
            let error = if hello.world != env.world {
                Some(BootstrapError::WorldMismatch { rank: hello.rank, says: hello.world, expected: env.world })
            } else if hello.rank >= env.world {
                let origin = format!("the hello of the process at {addr}");
                Some(BootstrapError::RankOutOfRange { rank: hello.rank, world: env.world, origin })
            } else if hellos[hello.rank].is_some() {
                Some(BootstrapError::DuplicateRank { rank: hello.rank })
            } else {
                None
            };
            if let Some(error) = error {
                return Err(fail_all(streams.iter_mut().flatten().chain([&mut s]), error));
            }
            tracing::debug!(rank = hello.rank, %addr, host = %hello.host, "joined the rendezvous");
            let rank = hello.rank;
            streams[rank] = Some(s);
            hellos[rank] = Some(hello);
        }
        if ready.contains(&0) {
            accept_all(listener, &mut fresh).map_err(|e| io("accept", e))?;
        }
    }
    let table: Vec<Member> = hellos
        .into_iter()
        .map(|h| {
            let h = h.expect("every rank joined");
            Member { local_rank: h.local_rank, local_world: h.local_world, host: h.host }
        })
        .collect();
    if let Err(error) = check_layout(&table) {
        return Err(fail_all(streams.iter_mut().flatten(), error));
    }
    let message = protocol::welcome(&table);
    for r in 1..env.world {
        let s = streams[r].as_mut().expect("every rank joined");
        if write_frame(s, &message, Instant::now() + SHORT.max(timeout)).is_err() {
            streams[r] = None;
            return Err(fail_all(streams.iter_mut().flatten(), BootstrapError::PeerLost { rank: r, during: JOIN }));
        }
    }
    tracing::info!(world = env.world, "every rank joined the rendezvous");
    Ok((streams, table))
}

/// Accepts every connection waiting on the (non-blocking) listener.
fn accept_all(listener: &TcpListener, fresh: &mut Vec<(TcpStream, SocketAddr)>) -> std::io::Result<()> {
    loop {
        match listener.accept() {
            Ok((s, addr)) => {
                s.set_nonblocking(false)?;
                // Frames are small and each waits for an answer: do not let Nagle hold them back.
                s.set_nodelay(true)?;
                fresh.push((s, addr));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A connection reset before it was accepted is the peer's business, not rank 0's.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Checks that on every host the local ranks are 0..n and every rank there says n.
pub(crate) fn check_layout(table: &[Member]) -> Result<(), BootstrapError> {
    let mut hosts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (rank, m) in table.iter().enumerate() {
        hosts.entry(&m.host).or_default().push(rank);
    }
    for (host, ranks) in hosts {
        let n = ranks.len();
        let fail = |detail| Err(BootstrapError::LayoutMismatch { host: host.to_owned(), detail });
        let mut by_local: BTreeMap<usize, usize> = BTreeMap::new();
        for &r in &ranks {
            let m = &table[r];
            if m.local_world != n {
                return fail(format!("rank {r} says {} ranks run there, but {n} do (ranks {ranks:?})", m.local_world));
            }
            if let Some(other) = by_local.insert(m.local_rank, r) {
                return fail(format!("ranks {other} and {r} both have local rank {}", m.local_rank));
            }
        }
    }
    Ok(())
}

/// A non-zero rank: connects to rank 0 (retrying until `timeout`), says hello, waits for the table.
pub(crate) fn join(env: &JobEnv, timeout: Duration) -> Result<(TcpStream, Vec<Member>), BootstrapError> {
    let (rank, addr) = (env.rank, env.rendezvous);
    let start = Instant::now();
    let deadline = start + timeout;
    let mut pause = Duration::from_millis(10);
    let mut s = loop {
        match TcpStream::connect_timeout(&addr, left(deadline).min(SHORT)) {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                let last_error = e.to_string();
                return Err(BootstrapError::RendezvousUnreachable { rank, addr, waited: start.elapsed(), last_error });
            }
            Err(e) => {
                // Rank 0 may simply not be listening yet: back off a little and try again.
                tracing::trace!(%addr, "rendezvous not reachable yet: {e}");
                std::thread::sleep(pause.min(left(deadline)));
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    };
    let _ = s.set_nodelay(true);
    let answer_by = Instant::now() + verdict_wait(timeout);
    let lost = || BootstrapError::PeerLost { rank: 0, during: JOIN };
    if write_frame(&mut s, &hello(env).encode(), Instant::now() + timeout).is_err() {
        // Rank 0 may have closed after telling us why; that message beats a bare "lost".
        return Err(match read_frame(&mut s, MAX_HELLO, Instant::now() + Duration::from_millis(100)) {
            Ok(frame) => match protocol::decode_reply(&frame, JOIN) {
                Ok(Reply::Failed(error)) => error,
                _ => lost(),
            },
            Err(_) => lost(),
        });
    }
    let frame = match read_frame(&mut s, MAX_FRAME, answer_by) {
        Ok(frame) => frame,
        Err(FrameError::TimedOut) => {
            return Err(BootstrapError::Timeout { during: JOIN, missing: vec![0], waited: start.elapsed() });
        }
        Err(FrameError::Io(e)) => return Err(BootstrapError::io(JOIN, rank, "read", e)),
        Err(_) => return Err(lost()),
    };
    let malformed = |detail: String| BootstrapError::Malformed { during: JOIN, peer: 0, detail };
    match protocol::decode_reply(&frame, JOIN).map_err(malformed)? {
        Reply::Failed(error) => Err(error),
        Reply::Welcome(table) => {
            let me = hello(env);
            let mine = table.get(rank);
            if table.len() != env.world || mine.is_none_or(|m| m.host != me.host || m.local_rank != me.local_rank) {
                return Err(malformed(format!(
                    "a table of {} ranks that does not list this rank as it joined",
                    table.len()
                )));
            }
            Ok((s, table))
        }
        Reply::Gathered { .. } => Err(malformed("an all-gather result before the table".into())),
    }
}
