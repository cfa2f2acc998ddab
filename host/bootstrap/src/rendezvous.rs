//! [`Rendezvous`]: a star of TCP connections through rank 0, for the job's few small collective
//! exchanges (addresses, handles, "ready" barriers) before and between the GPU work.
//!
//! Rank 0 serves every operation: it reads one frame from every rank, then writes the result to all.
//! Each operation has a deadline; a rank that closes its connection or does not take part in time makes
//! the operation fail on every surviving rank with the same error ([`BootstrapError::PeerLost`],
//! [`BootstrapError::Timeout`]), never a hang. After a failure the connections are out of step, so every
//! later operation fails with [`BootstrapError::Broken`]: a job whose bootstrap failed restarts.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::env::JobEnv;
use crate::error::BootstrapError;
use crate::join::{self, verdict_wait};
use crate::protocol::{self, MAX_FRAME, Member, Reply};
use crate::wire::{FrameError, left, read_frame, readable, write_frame};

/// The processes of one job, connected through rank 0.
#[derive(Debug)]
pub struct Rendezvous {
    rank: usize,
    world: usize,
    local_ranks: Vec<usize>,
    job_key: String,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    link: Link,
    /// The number of operations so far; every frame carries it, so ranks out of step are caught.
    seq: u64,
    timeout: Duration,
    /// The first failure; set, every operation fails with it.
    broken: Option<String>,
}

#[derive(Debug)]
enum Link {
    /// A job of one rank: nothing to connect.
    Solo,
    /// Rank 0: a stream to every other rank (`None` for itself and for ranks found lost).
    Root(Vec<Option<TcpStream>>),
    /// Any other rank: its stream to rank 0.
    Leaf(TcpStream),
}

impl Rendezvous {
    /// Joins the job's rendezvous. Rank 0 listens on `env.rendezvous`; every other rank connects
    /// (retrying until `timeout` while rank 0 is not up yet) and says hello: its rank, world, local rank,
    /// local world, host name, job key and protocol version. Rank 0 waits up to `timeout` for all
    /// `world` ranks, checks that they agree, and answers each with the table of every rank. `timeout`
    /// is also the deadline of later operations ([`Rendezvous::set_timeout`] changes it).
    ///
    /// Fails on every rank alike with [`BootstrapError::NeverJoined`] (naming the missing ranks),
    /// [`BootstrapError::WorldMismatch`], [`BootstrapError::DuplicateRank`],
    /// [`BootstrapError::RankOutOfRange`] or [`BootstrapError::LayoutMismatch`]; a non-zero rank that
    /// cannot reach rank 0 fails with [`BootstrapError::RendezvousUnreachable`], and rank 0 that cannot
    /// listen with [`BootstrapError::Listen`].
    pub fn connect(env: &JobEnv, timeout: Duration) -> Result<Rendezvous, BootstrapError> {
        if env.world == 1 {
            return Ok(Self::new(env, Link::Solo, vec![env.rank], timeout));
        }
        if env.rank != 0 {
            let (stream, table) = join::join(env, timeout)?;
            let local = local_ranks(&table, env.rank);
            return Ok(Self::new(env, Link::Leaf(stream), local, timeout));
        }
        // A loopback rendezvous stays private to this host; any other is reached from other hosts under
        // whatever name they resolved, so listen on every interface.
        let ip = env.rendezvous.ip();
        let bind = match ip {
            _ if ip.is_loopback() => env.rendezvous,
            IpAddr::V4(_) => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), env.rendezvous.port()),
            IpAddr::V6(_) => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), env.rendezvous.port()),
        };
        let listener = TcpListener::bind(bind).map_err(|source| BootstrapError::Listen { addr: bind, source })?;
        Self::host(env, listener, timeout)
    }

    /// [`Rendezvous::connect`] for rank 0 on a listener bound already, e.g. to port 0 so that the
    /// operating system picks a free port (which the other ranks are then told by other means).
    pub fn host(env: &JobEnv, listener: TcpListener, timeout: Duration) -> Result<Rendezvous, BootstrapError> {
        if env.rank != 0 {
            let detail =
                format!("Rendezvous::host is for rank 0, but this is rank {}: call Rendezvous::connect", env.rank);
            return Err(BootstrapError::BadLayout { detail });
        }
        if env.world == 1 {
            return Ok(Self::new(env, Link::Solo, vec![0], timeout));
        }
        // The listener is dropped on return: ranks that come later are refused, not left hanging.
        let (streams, table) = join::host(env, &listener, timeout)?;
        Ok(Self::new(env, Link::Root(streams), local_ranks(&table, 0), timeout))
    }

    fn new(env: &JobEnv, link: Link, local_ranks: Vec<usize>, timeout: Duration) -> Self {
        let state = Mutex::new(State { link, seq: 0, timeout, broken: None });
        Rendezvous { rank: env.rank, world: env.world, local_ranks, job_key: env.job_key.clone(), state }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes in the job.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The global ranks on this host, in local-rank order (grouped by the host names in the hellos).
    pub fn local_ranks(&self) -> &[usize] {
        &self.local_ranks
    }

    /// The job key every rank agreed on.
    pub fn job_key(&self) -> &str {
        &self.job_key
    }

    /// The deadline of each operation.
    pub fn timeout(&self) -> Duration {
        self.lock().timeout
    }

    /// Changes the deadline of each later operation. Every rank should use the same: a non-zero rank
    /// waits up to twice it for rank 0's answer, so that rank 0's verdict reaches it.
    pub fn set_timeout(&self, timeout: Duration) {
        self.lock().timeout = timeout;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves nothing half-written that matters here: the streams
        // are marked broken by the failing operation itself.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every rank's `bytes`, in rank order. `what` names the operation in errors (e.g.
    /// `"SymBuffer::new #3"`); every rank must call the same operations in the same order.
    ///
    /// A rank whose connection closes fails it with [`BootstrapError::PeerLost`], ranks that do not
    /// take part within the timeout with [`BootstrapError::Timeout`] naming them, on every surviving rank.
    pub fn all_gather(&self, what: &'static str, bytes: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        let mut st = self.lock();
        if let Some(cause) = &st.broken {
            return Err(BootstrapError::Broken { during: what, cause: cause.clone() });
        }
        let (seq, timeout) = (st.seq, st.timeout);
        st.seq += 1;
        let result = match &mut st.link {
            Link::Solo => Ok(vec![bytes.to_vec()]),
            Link::Root(peers) => root_gather(peers, seq, what, bytes, timeout),
            Link::Leaf(s) => leaf_gather(s, self.rank, self.world, seq, what, bytes, timeout),
        };
        if let Err(e) = &result {
            tracing::warn!(rank = self.rank, "{e}");
            st.broken = Some(e.to_string());
            // Half-close every stream: the peers read what was sent (rank 0's error message) and then
            // see the end, so nobody waits on a rank that has given up. A full close could instead
            // reset the connection and lose that message.
            let streams: Vec<&TcpStream> = match &st.link {
                Link::Solo => Vec::new(),
                Link::Root(peers) => peers.iter().flatten().collect(),
                Link::Leaf(s) => vec![s],
            };
            for s in streams {
                let _ = s.shutdown(Shutdown::Write);
            }
        }
        result
    }

    /// Returns once every rank has called it; fails like [`Rendezvous::all_gather`].
    pub fn barrier(&self, what: &'static str) -> Result<(), BootstrapError> {
        self.all_gather(what, &[]).map(drop)
    }
}

/// The ranks on `rank`'s host, in local-rank order.
fn local_ranks(table: &[Member], rank: usize) -> Vec<usize> {
    let host = &table[rank].host;
    let mut local: Vec<usize> = (0..table.len()).filter(|&r| &table[r].host == host).collect();
    local.sort_by_key(|&r| table[r].local_rank);
    local
}

/// Rank 0's side of an all-gather: a frame from every rank, then the result to every rank.
fn root_gather(
    peers: &mut [Option<TcpStream>],
    seq: u64,
    what: &'static str,
    bytes: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, BootstrapError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let mut parts: Vec<Option<Vec<u8>>> = vec![None; peers.len()];
    parts[0] = Some(bytes.to_vec());
    let failure = loop {
        let pending: Vec<usize> = (1..peers.len()).filter(|&r| parts[r].is_none()).collect();
        if pending.is_empty() {
            break None;
        }
        if Instant::now() >= deadline {
            break Some(BootstrapError::Timeout { during: what, missing: pending, waited: start.elapsed() });
        }
        // A lost rank has no stream: it cannot be in `pending` since the operation fails at once.
        let fds: Vec<_> = pending.iter().map(|&r| peers[r].as_ref().expect("not lost").as_fd()).collect();
        let ready = match readable(&fds, left(deadline)) {
            Ok(ready) => ready,
            Err(e) => break Some(BootstrapError::io(what, 0, "poll", e)),
        };
        drop(fds);
        let mut failed = None;
        for r in ready.into_iter().map(|i| pending[i]) {
            let s = peers[r].as_mut().expect("not lost");
            // Once readable, a frame should arrive whole soon; the deadline still bounds it.
            match read_frame(s, MAX_FRAME, deadline.max(Instant::now() + Duration::from_millis(100))) {
                Ok(frame) => match protocol::decode_contribute(&frame) {
                    Ok((_, op, _)) if op != what => {
                        failed = Some(BootstrapError::Diverged { rank: r, says: op, with: 0, expected: what.into() });
                    }
                    Ok((theirs, _, _)) if theirs != seq => {
                        let detail = format!("operation #{theirs} while rank 0 is at #{seq}");
                        failed = Some(BootstrapError::Malformed { during: what, peer: r, detail });
                    }
                    Ok((_, _, theirs)) => parts[r] = Some(theirs),
                    Err(detail) => failed = Some(BootstrapError::Malformed { during: what, peer: r, detail }),
                },
                Err(FrameError::TimedOut) => {
                    failed = Some(BootstrapError::Timeout { during: what, missing: vec![r], waited: start.elapsed() });
                }
                Err(FrameError::TooLarge(n)) => {
                    let detail = format!("a frame of {n} bytes");
                    failed = Some(BootstrapError::Malformed { during: what, peer: r, detail });
                }
                Err(FrameError::Closed | FrameError::Io(_)) => {
                    peers[r] = None;
                    failed = Some(BootstrapError::PeerLost { rank: r, during: what });
                }
            }
            if failed.is_some() {
                break;
            }
        }
        if failed.is_some() {
            break failed;
        }
    };
    let (message, result) = match failure {
        None => {
            let parts: Vec<Vec<u8>> = parts.into_iter().map(|p| p.expect("every rank contributed")).collect();
            (protocol::gathered(seq, &parts), Ok(parts))
        }
        Some(error) => (protocol::failed(&error), Err(error)),
    };
    // The streams stay open after a failure (until the Rendezvous is dropped), so that the error
    // message is read before any close could reset the connection.
    let send_by = Instant::now() + timeout.max(Duration::from_secs(1));
    let mut lost = None;
    for (r, peer) in peers.iter_mut().enumerate() {
        let Some(s) = peer else { continue };
        if write_frame(s, &message, send_by).is_err() && lost.is_none() {
            lost = Some(r);
        }
    }
    match (result, lost) {
        (Ok(_), Some(r)) => {
            // A rank that went away after contributing: the others have their result, and read this
            // error as the answer to their next operation.
            let error = BootstrapError::PeerLost { rank: r, during: what };
            let message = protocol::failed(&error);
            for s in peers.iter_mut().enumerate().filter(|&(p, _)| p != r).filter_map(|(_, s)| s.as_mut()) {
                let _ = write_frame(s, &message, send_by);
            }
            Err(error)
        }
        (result, _) => result,
    }
}

/// A non-zero rank's side of an all-gather: its frame to rank 0, then rank 0's answer.
fn leaf_gather(
    s: &mut TcpStream,
    rank: usize,
    world: usize,
    seq: u64,
    what: &'static str,
    bytes: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, BootstrapError> {
    let start = Instant::now();
    let lost = BootstrapError::PeerLost { rank: 0, during: what };
    let sent = write_frame(s, &protocol::contribute(seq, what, bytes), start + timeout);
    // If rank 0 failed and closed meanwhile, its message may be waiting: read it before giving up.
    let answer_by =
        if sent.is_ok() { start + verdict_wait(timeout) } else { Instant::now() + Duration::from_millis(100) };
    let frame = match read_frame(s, MAX_FRAME, answer_by) {
        Ok(frame) => frame,
        Err(_) if sent.is_err() => {
            return Err(match sent {
                Err(FrameError::TimedOut) => {
                    BootstrapError::Timeout { during: what, missing: vec![0], waited: start.elapsed() }
                }
                _ => lost,
            });
        }
        Err(FrameError::TimedOut) => {
            return Err(BootstrapError::Timeout { during: what, missing: vec![0], waited: start.elapsed() });
        }
        Err(FrameError::Io(e)) => return Err(BootstrapError::io(what, rank, "read", e)),
        Err(_) => return Err(lost),
    };
    let malformed = |detail: String| BootstrapError::Malformed { during: what, peer: 0, detail };
    match protocol::decode_reply(&frame, what).map_err(malformed)? {
        Reply::Failed(error) => Err(error),
        Reply::Gathered { seq: got, parts } if got == seq && parts.len() == world => Ok(parts),
        Reply::Gathered { seq: got, parts } => {
            Err(malformed(format!("result #{got} of {} ranks for operation #{seq} of {world}", parts.len())))
        }
        Reply::Welcome(_) => Err(malformed("a second table".into())),
    }
}
