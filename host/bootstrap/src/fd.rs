//! [`FdMesh`]: file descriptors between the processes of one host (CUDA IPC / fabric handles, memfds,
//! eventfds), which only a Unix socket can carry (`SCM_RIGHTS`).
//!
//! The mesh is set up over the rendezvous: every local rank but the last listens on an abstract socket
//! `"\0ferrocomm-{job_key}-{rank}"` (the abstract namespace leaves nothing on disk and vanishes with the
//! process), an all-gather confirms all are listening, then each rank connects to the lower local
//! ranks and accepts the higher ones. Connecting never waits on an accept (the listen backlog holds
//! the connection), so no order of arrival can deadlock.

use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

use crate::error::BootstrapError;
use crate::rendezvous::Rendezvous;
use crate::wire::{Dec, Enc, FrameError, left, read_frame, read_full, readable, write_frame};

const SETUP: &str = "FdMesh::connect";
/// The first bytes of a descriptor message and of a connection's introduction.
const MAGIC: u32 = u32::from_le_bytes(*b"FCFD");
/// A descriptor message's header: magic, sequence number, tag length.
const HEADER: usize = 16;
/// Tags are short so that a message always fits the socket buffer: everyone sends before receiving.
pub const MAX_TAG: usize = 1024;

/// A full mesh of Unix-domain stream sockets between the ranks of one host, for passing file
/// descriptors; set up over the rendezvous through abstract sockets `"\0ferrocomm-{job_key}-{rank}"`,
/// so nothing is left on disk.
#[derive(Debug)]
pub struct FdMesh {
    rank: usize,
    local_ranks: Vec<usize>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Indexed like `local_ranks`; `None` for this rank.
    peers: Vec<Option<UnixStream>>,
    seq: u64,
    timeout: Duration,
    broken: Option<String>,
}

fn socket_name(job_key: &str, rank: usize) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("ferrocomm-{job_key}-{rank}"))
}

impl FdMesh {
    /// Connects this rank to every other rank of its host. Every rank of the job calls it (the setup
    /// uses the rendezvous); it takes the rendezvous's timeout. A rank that cannot set up its sockets
    /// makes it fail on every rank with [`BootstrapError::MeshSetup`] naming it.
    pub fn connect(rdv: &Rendezvous) -> Result<FdMesh, BootstrapError> {
        let (rank, local) = (rdv.rank(), rdv.local_ranks().to_vec());
        let me = local.iter().position(|&r| r == rank).expect("a rank is on its own host");
        let timeout = rdv.timeout();
        // Listen first, and say so: nobody connects before every listener exists. Nobody connects to
        // the last local rank, so it does not listen.
        let bind = || socket_name(rdv.job_key(), rank).and_then(|name| UnixListener::bind_addr(&name));
        let listener = match (me + 1 < local.len()).then(bind).transpose() {
            Ok(listener) => listener,
            Err(e) => return Err(disagree(rdv, format!("cannot listen on its abstract socket: {e}"), "listening")),
        };
        agree(rdv, Ok(()), "listening")?;
        let setup = connect_lower(rdv, &local, me).and_then(|mut peers| {
            if let Some(listener) = &listener {
                // Half the timeout, so that the all-gather below still meets every rank in time.
                accept_higher(rdv, listener, &local, me, &mut peers, Instant::now() + timeout / 2)?;
            }
            Ok(peers)
        });
        drop(listener); // the name is free again as soon as the mesh stands
        let peers = match setup {
            Ok(peers) => {
                agree(rdv, Ok(()), "connecting")?;
                peers
            }
            Err(e) => return Err(disagree(rdv, e, "connecting")),
        };
        tracing::debug!(rank, local = ?local, "file-descriptor mesh up");
        let state = Mutex::new(State { peers, seq: 0, timeout, broken: None });
        Ok(FdMesh { rank, local_ranks: local, state })
    }

    /// The global ranks of the mesh, in local-rank order (as [`Rendezvous::local_ranks`]).
    pub fn local_ranks(&self) -> &[usize] {
        &self.local_ranks
    }

    /// Changes the deadline of each later exchange.
    pub fn set_timeout(&self, timeout: Duration) {
        self.lock().timeout = timeout;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `mine` (with `tag`, which says what it is) to every other local rank and receives theirs:
    /// the result is indexed like [`FdMesh::local_ranks`], with `None` for this rank. Every local rank
    /// must call it at the same point with the same tag, else it fails with
    /// [`BootstrapError::TagMismatch`] naming both ranks and tags; a peer that closed its end fails it
    /// with [`BootstrapError::PeerLost`], one that does not take part in time with
    /// [`BootstrapError::Timeout`].
    pub fn exchange(
        &self,
        what: &'static str,
        mine: BorrowedFd<'_>,
        tag: &[u8],
    ) -> Result<Vec<Option<OwnedFd>>, BootstrapError> {
        if tag.len() > MAX_TAG {
            return Err(BootstrapError::TagTooLong { during: what, len: tag.len(), max: MAX_TAG });
        }
        let mut st = self.lock();
        if let Some(cause) = &st.broken {
            return Err(BootstrapError::Broken { during: what, cause: cause.clone() });
        }
        let seq = st.seq;
        st.seq += 1;
        let timeout = st.timeout;
        let result = exchange(&mut st.peers, &self.local_ranks, self.rank, seq, what, mine, tag, timeout);
        if let Err(e) = &result {
            st.broken = Some(e.to_string());
            // The peers' next read sees the end instead of waiting for a message that will not come.
            for s in st.peers.iter().flatten() {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
        }
        result
    }
}

/// Shares this rank's setup `status` with every rank; fails with the first rank's failure.
fn agree(rdv: &Rendezvous, status: Result<(), String>, step: &'static str) -> Result<(), BootstrapError> {
    let mine = match &status {
        Ok(()) => Vec::new(),
        Err(e) => format!("{step}: {e}").into_bytes(),
    };
    let all = rdv.all_gather(SETUP, &mine)?;
    match all.iter().enumerate().find(|(_, s)| !s.is_empty()) {
        None => Ok(()),
        Some((rank, detail)) => {
            Err(BootstrapError::MeshSetup { during: SETUP, rank, detail: String::from_utf8_lossy(detail).into_owned() })
        }
    }
}

/// Shares this rank's failure with every rank and returns the resulting error.
fn disagree(rdv: &Rendezvous, detail: String, step: &'static str) -> BootstrapError {
    match agree(rdv, Err(detail), step) {
        Err(e) => e,
        Ok(()) => unreachable!("this rank's own failure is among the statuses"),
    }
}

/// Connects to every lower local rank and introduces this one.
fn connect_lower(rdv: &Rendezvous, local: &[usize], me: usize) -> Result<Vec<Option<UnixStream>>, String> {
    let mut peers: Vec<Option<UnixStream>> = (0..local.len()).map(|_| None).collect();
    let intro = Enc::default().u32(MAGIC).str(rdv.job_key()).usize(rdv.rank()).0;
    for (i, &peer) in local.iter().enumerate().take(me) {
        let mut s = socket_name(rdv.job_key(), peer)
            .and_then(|name| UnixStream::connect_addr(&name))
            .map_err(|e| format!("cannot connect to rank {peer}: {e}"))?;
        write_frame(&mut s, &intro, Instant::now() + rdv.timeout())
            .map_err(|e| format!("cannot introduce itself to rank {peer}: {e:?}"))?;
        peers[i] = Some(s);
    }
    Ok(peers)
}

/// Accepts every higher local rank before `deadline`, by their introductions.
fn accept_higher(
    rdv: &Rendezvous,
    listener: &UnixListener,
    local: &[usize],
    me: usize,
    peers: &mut [Option<UnixStream>],
    deadline: Instant,
) -> Result<(), String> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    loop {
        let missing: Vec<usize> = (me + 1..local.len()).filter(|&i| peers[i].is_none()).map(|i| local[i]).collect();
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("ranks {missing:?} did not connect within {:?}", rdv.timeout() / 2));
        }
        readable(&[listener.as_fd()], left(deadline)).map_err(|e| e.to_string())?;
        let mut s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(format!("accept: {e}")),
        };
        s.set_nonblocking(false).map_err(|e| e.to_string())?;
        // Anyone on the host can reach an abstract socket: only an introduction of this job counts.
        let intro = read_frame(&mut s, 4096, Instant::now() + Duration::from_secs(1).min(left(deadline)));
        let who = intro.ok().and_then(|frame| {
            let mut d = Dec(&frame);
            let ok = d.u32().ok() == Some(MAGIC) && d.str().ok().as_deref() == Some(rdv.job_key());
            ok.then(|| d.usize().ok()).flatten()
        });
        match who.and_then(|r| local.iter().position(|&l| l == r)) {
            Some(i) if i > me && peers[i].is_none() => peers[i] = Some(s),
            _ => tracing::warn!(
                rank = rdv.rank(),
                "turned away a connection to the fd mesh that is not a local rank of this job"
            ),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn exchange(
    peers: &mut [Option<UnixStream>],
    local: &[usize],
    rank: usize,
    seq: u64,
    what: &'static str,
    mine: BorrowedFd<'_>,
    tag: &[u8],
    timeout: Duration,
) -> Result<Vec<Option<OwnedFd>>, BootstrapError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let message = Enc::default().u32(MAGIC).u64(seq).u32(tag.len() as u32).0;
    let message = [&message[..], tag].concat();
    // Send to all before receiving from any: the messages are small enough for the socket buffers.
    for (i, s) in peers.iter_mut().enumerate() {
        let Some(s) = s else { continue };
        send(s, &message, mine, deadline).map_err(|e| match e {
            FrameError::Closed => BootstrapError::PeerLost { rank: local[i], during: what },
            FrameError::TimedOut => {
                BootstrapError::Timeout { during: what, missing: vec![local[i]], waited: start.elapsed() }
            }
            FrameError::Io(e) => BootstrapError::io(what, rank, "sendmsg", e),
            FrameError::TooLarge(_) => unreachable!("sending has no limit"),
        })?;
    }
    let mut got: Vec<Option<OwnedFd>> = (0..peers.len()).map(|_| None).collect();
    loop {
        let pending: Vec<usize> = (0..peers.len()).filter(|&i| peers[i].is_some() && got[i].is_none()).collect();
        if pending.is_empty() {
            return Ok(got);
        }
        if Instant::now() >= deadline {
            let missing = pending.iter().map(|&i| local[i]).collect();
            return Err(BootstrapError::Timeout { during: what, missing, waited: start.elapsed() });
        }
        let fds: Vec<_> = pending.iter().map(|&i| peers[i].as_ref().expect("pending").as_fd()).collect();
        let ready = readable(&fds, left(deadline)).map_err(|e| BootstrapError::io(what, rank, "poll", e))?;
        drop(fds);
        for i in ready.into_iter().map(|j| pending[j]) {
            let peer = local[i];
            let s = peers[i].as_mut().expect("pending");
            let malformed = |detail: String| BootstrapError::Malformed { during: what, peer, detail };
            let (fd, peer_seq, peer_tag) = receive(s, deadline).map_err(|e| match e {
                Received::Frame(FrameError::Closed) => BootstrapError::PeerLost { rank: peer, during: what },
                Received::Frame(FrameError::TimedOut) => {
                    BootstrapError::Timeout { during: what, missing: vec![peer], waited: start.elapsed() }
                }
                Received::Frame(FrameError::Io(e)) => BootstrapError::io(what, rank, "recvmsg", e),
                Received::Frame(FrameError::TooLarge(n)) => malformed(format!("a tag of {n} bytes")),
                Received::Bad(detail) => malformed(detail),
            })?;
            if peer_seq != seq {
                return Err(malformed(format!("exchange #{peer_seq} while rank {rank} is at #{seq}")));
            }
            if peer_tag != tag {
                return Err(BootstrapError::TagMismatch { during: what, rank, tag: tag.to_vec(), peer, peer_tag });
            }
            got[i] = Some(fd);
        }
    }
}

/// Sends `message` with `fd` attached to its first byte.
fn send(s: &mut UnixStream, message: &[u8], fd: BorrowedFd<'_>, deadline: Instant) -> Result<(), FrameError> {
    s.set_write_timeout(Some(left(deadline)))?;
    let fds = [fd.as_raw_fd()];
    // MSG_NOSIGNAL: a closed peer is an error to report, not a SIGPIPE to die of.
    let sent = loop {
        match sendmsg::<()>(
            s.as_raw_fd(),
            &[IoSlice::new(message)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(n) => break n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
    };
    // A stream socket may take less than asked; the descriptor went with the first part.
    s.write_all(&message[sent..])?;
    Ok(())
}

enum Received {
    Frame(FrameError),
    Bad(String),
}

impl From<FrameError> for Received {
    fn from(e: FrameError) -> Self {
        Received::Frame(e)
    }
}

/// Receives one descriptor message: the descriptor, the sender's sequence number and its tag.
fn receive(s: &mut UnixStream, deadline: Instant) -> Result<(OwnedFd, u64, Vec<u8>), Received> {
    s.set_read_timeout(Some(left(deadline))).map_err(FrameError::from)?;
    let mut header = [0u8; HEADER];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let (n, fds, truncated) = loop {
        let mut iov = [IoSliceMut::new(&mut header)];
        match recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(msg) => {
                let mut fds = Vec::new();
                let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
                for c in msg.cmsgs().into_iter().flatten() {
                    if let ControlMessageOwned::ScmRights(raw) = c {
                        // SAFETY: SCM_RIGHTS installed these descriptors in this process for this
                        // message; nothing else holds them, so each is owned exactly once, here.
                        fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
                    }
                }
                break (msg.bytes, fds, truncated);
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(FrameError::from(std::io::Error::from(e)).into()),
        }
    };
    if n == 0 {
        return Err(FrameError::Closed.into());
    }
    read_full(s, &mut header[n..], deadline)?;
    let mut d = Dec(&header);
    let (magic, seq, len) = (d.u32(), d.u64(), d.u32());
    if magic != Ok(MAGIC) {
        return Err(Received::Bad("a message that is not a descriptor message".into()));
    }
    let (seq, len) = (seq.expect("16-byte header"), len.expect("16-byte header") as usize);
    if len > MAX_TAG {
        return Err(FrameError::TooLarge(len as u64).into());
    }
    let mut tag = vec![0; len];
    read_full(s, &mut tag, deadline)?;
    if truncated || fds.len() != 1 {
        return Err(Received::Bad(format!("{} descriptors with one message (truncated: {truncated})", fds.len())));
    }
    Ok((fds.into_iter().next().expect("one"), seq, tag))
}
