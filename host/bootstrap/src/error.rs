//! [`BootstrapError`]: every way the processes of a job can fail to find each other or to exchange data.
//!
//! Each message names who (the ranks, the variable, the address), what (the operation, as its caller
//! named it) and, where there is one, the fix. The errors that rank 0 detects for the whole job (a rank
//! that never joined, a world-size mismatch, a lost peer...) travel over the rendezvous to every rank
//! (`crate::protocol` encodes them), so each rank fails with the same error, not with a vague timeout.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::env::Launcher;

/// Every failure of the bootstrap: reading the job's layout, the rendezvous, the file-descriptor mesh.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// An environment variable holds a value that cannot be used.
    #[error("{var}={value:?} is not valid: {why}; {fix}")]
    BadVar {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: String,
        /// How to fix it.
        fix: String,
    },

    /// Some of a launcher's variables are set, but not one this layout needs.
    #[error("{launcher} job: {present} set but {missing} is not; {fix}")]
    MissingVar {
        /// The launcher whose variables were found.
        launcher: Launcher,
        /// The variables that were found (e.g. "RANK is").
        present: String,
        /// The variable that is missing.
        missing: &'static str,
        /// How to fix it.
        fix: String,
    },

    /// A host name for the rendezvous does not resolve to an address.
    #[error(
        "{var}={value:?} does not resolve to an address ({source}); set it to a host name or IP of rank 0's machine that every rank can resolve"
    )]
    Unresolvable {
        /// The variable that holds the host name.
        var: &'static str,
        /// The host:port it resolved.
        value: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },

    /// A rank is not below the world size.
    #[error("rank {rank} is out of range for a world of {world} ranks (from {origin}); ranks go from 0 to {world} - 1")]
    RankOutOfRange {
        /// The rank.
        rank: usize,
        /// The world size.
        world: usize,
        /// Where the numbers came from: the variables, or a rank's hello.
        origin: String,
    },

    /// The layout one process was given does not add up (a local rank not below the local world size...).
    #[error("the job layout does not add up: {detail}")]
    BadLayout {
        /// What does not add up, naming the variables or arguments.
        detail: String,
    },

    /// Rank 0 cannot listen on the rendezvous address.
    #[error(
        "rank 0 cannot listen for the rendezvous on {addr}: {source}; another job may hold the port: set FERROCOMM_RENDEZVOUS=host:port with a free port (the same on every rank)"
    )]
    Listen {
        /// The address it tried to listen on.
        addr: SocketAddr,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// A non-zero rank could not reach rank 0 within the timeout.
    #[error(
        "rank {rank} could not reach the rendezvous at {addr} within {waited:?} (last error: {last_error}); is rank 0 running, and does FERROCOMM_RENDEZVOUS (or MASTER_ADDR) name its host?"
    )]
    RendezvousUnreachable {
        /// The rank that tried.
        rank: usize,
        /// Rank 0's rendezvous address.
        addr: SocketAddr,
        /// How long it kept trying.
        waited: Duration,
        /// The last connection error.
        last_error: String,
    },

    /// Not every rank joined the rendezvous within the timeout.
    #[error("ranks {missing:?} never joined the rendezvous within {waited:?}{}; did they start, and do they use the same FERROCOMM_RENDEZVOUS / MASTER_ADDR:MASTER_PORT?", turned_away_note(.turned_away))]
    NeverJoined {
        /// The ranks that did not join.
        missing: Vec<usize>,
        /// How long rank 0 waited.
        waited: Duration,
        /// Connections rank 0 turned away (another job, another protocol version), described.
        turned_away: Vec<String>,
    },

    /// A rank was started with another world size than rank 0.
    #[error(
        "rank {rank} says the world has {says} ranks but rank 0 says {expected}; every process of a job must be started with the same world size"
    )]
    WorldMismatch {
        /// The rank that disagrees.
        rank: usize,
        /// Its world size.
        says: usize,
        /// Rank 0's world size.
        expected: usize,
    },

    /// Two processes claim the same rank.
    #[error("two processes claim rank {rank}; every process of a job needs its own rank (check RANK / FERROCOMM_RANK)")]
    DuplicateRank {
        /// The rank claimed twice.
        rank: usize,
    },

    /// The local ranks and local world sizes do not match the host names the ranks reported.
    #[error(
        "the local layout on host {host:?} does not add up: {detail}; check LOCAL_RANK / LOCAL_WORLD_SIZE (or their FERROCOMM_ counterparts)"
    )]
    LayoutMismatch {
        /// The host.
        host: String,
        /// What does not add up.
        detail: String,
    },

    /// A process of another job reached this job's rendezvous (or this one reached another's).
    #[error(
        "rank {rank} belongs to job {says:?} but the rendezvous serves job {expected:?}; two jobs share one rendezvous port: give each its own with FERROCOMM_RENDEZVOUS=host:port"
    )]
    JobMismatch {
        /// The rank of the process that connected.
        rank: usize,
        /// Its job key.
        says: String,
        /// The job key of the rendezvous.
        expected: String,
    },

    /// A process speaks another version of the rendezvous protocol.
    #[error(
        "rank {rank} speaks bootstrap protocol {says} but rank 0 speaks {expected}; run the same ferrocomm build on every rank"
    )]
    ProtocolMismatch {
        /// The rank of the process that connected.
        rank: usize,
        /// Its protocol version.
        says: u32,
        /// Rank 0's protocol version.
        expected: u32,
    },

    /// A rank's connection closed (it exited or crashed) during an operation.
    #[error(
        "rank {rank} was lost during {during} (its connection closed: the process exited, crashed, or gave up after an error of its own); see its log for why"
    )]
    PeerLost {
        /// The rank that was lost.
        rank: usize,
        /// The operation, as its caller named it.
        during: &'static str,
    },

    /// Some ranks did not take part in an operation within the timeout.
    #[error(
        "{during}: ranks {missing:?} did not take part within {waited:?}; are they stuck before it, or calling another operation? (raise the timeout with Rendezvous::set_timeout if they are just slow)"
    )]
    Timeout {
        /// The operation, as its caller named it.
        during: &'static str,
        /// The ranks that did not take part.
        missing: Vec<usize>,
        /// How long this rank waited.
        waited: Duration,
    },

    /// Ranks called different operations at the same point.
    #[error(
        "rank {rank} called {says:?} while rank {with} called {expected:?}; every rank must call the same operations in the same order"
    )]
    Diverged {
        /// The rank that called something else.
        rank: usize,
        /// What it called.
        says: String,
        /// The rank it was compared with.
        with: usize,
        /// What that rank called.
        expected: String,
    },

    /// Two local ranks exchanged file descriptors of different things.
    #[error("{during}: rank {rank} sent a descriptor tagged {} but rank {peer} sent one tagged {}; both must exchange the same kind of object at the same point", show_tag(.tag), show_tag(.peer_tag))]
    TagMismatch {
        /// The operation, as its caller named it.
        during: &'static str,
        /// This rank.
        rank: usize,
        /// This rank's tag.
        tag: Vec<u8>,
        /// The peer.
        peer: usize,
        /// The peer's tag.
        peer_tag: Vec<u8>,
    },

    /// A rank could not set up its part of the file-descriptor mesh.
    #[error("{during}: rank {rank} could not set up its Unix sockets to the ranks of its host: {detail}")]
    MeshSetup {
        /// The operation, as its caller named it.
        during: &'static str,
        /// The rank that failed.
        rank: usize,
        /// What failed.
        detail: String,
    },

    /// A descriptor's tag is longer than a descriptor message carries.
    #[error(
        "{during}: a tag of {len} bytes is longer than the {max} a descriptor message carries; use a short tag (a name or a hash)"
    )]
    TagTooLong {
        /// The operation, as its caller named it.
        during: &'static str,
        /// The tag's length.
        len: usize,
        /// The longest tag.
        max: usize,
    },

    /// A peer sent something that does not follow the protocol.
    #[error("{during}: rank {peer} sent a malformed message ({detail}); is it running the same ferrocomm build?")]
    Malformed {
        /// The operation, as its caller named it.
        during: &'static str,
        /// The rank that sent it.
        peer: usize,
        /// What was wrong.
        detail: String,
    },

    /// An operating-system call failed.
    #[error("{during}: {call} failed on rank {rank}: {source}")]
    Io {
        /// The operation, as its caller named it.
        during: &'static str,
        /// This rank.
        rank: usize,
        /// The call that failed.
        call: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// Rank 0 failed with an error that has no wire form; its message, as rank 0 wrote it.
    #[error("rank 0 failed: {message}")]
    Remote {
        /// Rank 0's message.
        message: String,
    },

    /// An earlier operation failed, so the connections are no longer in step.
    #[error(
        "{during}: the bootstrap connections are unusable since an earlier operation failed ({cause}); a job whose bootstrap failed must be restarted"
    )]
    Broken {
        /// The operation that was attempted.
        during: &'static str,
        /// The first failure.
        cause: String,
    },
}

impl BootstrapError {
    /// An `Io` error for `rank` during `during`.
    pub(crate) fn io(during: &'static str, rank: usize, call: &'static str, source: io::Error) -> Self {
        Self::Io { during, rank, call, source }
    }
}

/// A tag as text when it is printable, else as hex, so both forms read well in one message.
pub(crate) fn show_tag(tag: &[u8]) -> String {
    match std::str::from_utf8(tag) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => format!("{s:?}"),
        _ => {
            let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}")
        }
    }
}

fn turned_away_note(turned_away: &[String]) -> String {
    if turned_away.is_empty() { String::new() } else { format!(" (rank 0 turned away: {})", turned_away.join("; ")) }
}
