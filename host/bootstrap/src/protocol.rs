//! The rendezvous messages and their encoding (on top of `wire`'s frames).
//!
//! A non-zero rank sends a [`Hello`], then one `Contribute` per operation; rank 0 answers the hello
//! with a `Welcome` (the table of every rank) and each operation with `Gathered` (every rank's bytes),
//! or, when it fails, with `Failed` carrying the error, so that every rank reports the same one.

use std::time::Duration;

use crate::error::BootstrapError;
use crate::wire::{Dec, Enc};

/// The first bytes of a hello: a connection that does not start so is not a ferrocomm rank.
const MAGIC: &[u8; 4] = b"FCBS";
/// Raised whenever a message changes, so that ranks of different builds fail with a clear error.
pub(crate) const VERSION: u32 = 1;

/// The largest frame taken from a connection that has not said hello: a hello is small, and a stray
/// client must not make rank 0 allocate.
pub(crate) const MAX_HELLO: u64 = 64 << 10;
/// The largest frame between ranks that did say hello (an all-gather of any sensible size).
pub(crate) const MAX_FRAME: u64 = 1 << 40;

/// What a rank says when it joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) version: u32,
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) local_rank: usize,
    pub(crate) local_world: usize,
    pub(crate) host: String,
    pub(crate) job_key: String,
}

/// One rank's place in the job, as rank 0 tells everyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) local_rank: usize,
    pub(crate) local_world: usize,
    pub(crate) host: String,
}

impl Hello {
    pub(crate) fn encode(&self) -> Vec<u8> {
        // The version and rank come first so that a hello of another version can still be named.
        let e = Enc(MAGIC.to_vec()).u32(self.version).usize(self.rank).usize(self.world);
        e.usize(self.local_rank).usize(self.local_world).str(&self.host).str(&self.job_key).0
    }

    /// The hello in `frame`; `Err(None)` when it is not one of ours at all, `Err(Some(hello))` with what
    /// could be read when it is of another protocol version.
    pub(crate) fn decode(frame: &[u8]) -> Result<Hello, Option<(u32, usize)>> {
        let Some(rest) = frame.strip_prefix(MAGIC) else { return Err(None) };
        let mut d = Dec(rest);
        let (Ok(version), Ok(rank)) = (d.u32(), d.usize()) else { return Err(None) };
        if version != VERSION {
            return Err(Some((version, rank)));
        }
        let mut rest = || -> Result<Hello, String> {
            let (world, local_rank, local_world) = (d.usize()?, d.usize()?, d.usize()?);
            let hello = Hello { version, rank, world, local_rank, local_world, host: d.str()?, job_key: d.str()? };
            d.end()?;
            Ok(hello)
        };
        rest().map_err(|_| None)
    }
}

/// The kinds of message after the hello.
const WELCOME: u8 = 1;
const GATHERED: u8 = 2;
const FAILED: u8 = 3;
const CONTRIBUTE: u8 = 4;

/// A message from rank 0.
#[derive(Debug)]
pub(crate) enum Reply {
    Welcome(Vec<Member>),
    Gathered { seq: u64, parts: Vec<Vec<u8>> },
    Failed(BootstrapError),
}

pub(crate) fn welcome(table: &[Member]) -> Vec<u8> {
    let e = Enc::default().u8(WELCOME).usize(table.len());
    table.iter().fold(e, |e, m| e.usize(m.local_rank).usize(m.local_world).str(&m.host)).0
}

pub(crate) fn gathered(seq: u64, parts: &[Vec<u8>]) -> Vec<u8> {
    let e = Enc::default().u8(GATHERED).u64(seq).usize(parts.len());
    parts.iter().fold(e, |e, p| e.bytes(p)).0
}

pub(crate) fn failed(error: &BootstrapError) -> Vec<u8> {
    encode_error(Enc::default().u8(FAILED), error).0
}

pub(crate) fn contribute(seq: u64, what: &str, bytes: &[u8]) -> Vec<u8> {
    Enc::default().u8(CONTRIBUTE).u64(seq).str(what).bytes(bytes).0
}

/// Decodes a message from rank 0; errors it carries name `during`, this rank's operation.
pub(crate) fn decode_reply(frame: &[u8], during: &'static str) -> Result<Reply, String> {
    let mut d = Dec(frame);
    let reply = match d.u8()? {
        WELCOME => {
            let n = d.count(24)?;
            let member = |d: &mut Dec<'_>| {
                Ok::<_, String>(Member { local_rank: d.usize()?, local_world: d.usize()?, host: d.str()? })
            };
            Reply::Welcome((0..n).map(|_| member(&mut d)).collect::<Result<_, _>>()?)
        }
        GATHERED => {
            let seq = d.u64()?;
            let n = d.count(8)?;
            Reply::Gathered { seq, parts: (0..n).map(|_| d.bytes().map(<[u8]>::to_vec)).collect::<Result<_, _>>()? }
        }
        FAILED => Reply::Failed(decode_error(&mut d, during)?),
        other => return Err(format!("unknown message kind {other}")),
    };
    d.end()?;
    Ok(reply)
}

/// Decodes a contribution: its sequence number, the operation's name, the bytes.
pub(crate) fn decode_contribute(frame: &[u8]) -> Result<(u64, String, Vec<u8>), String> {
    let mut d = Dec(frame);
    match d.u8()? {
        CONTRIBUTE => {}
        other => return Err(format!("expected a contribution, got message kind {other}")),
    }
    let out = (d.u64()?, d.str()?, d.bytes()?.to_vec());
    d.end()?;
    Ok(out)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The errors rank 0 can detect for the whole job each have a code; any other travels as its message.
fn encode_error(e: Enc, error: &BootstrapError) -> Enc {
    use BootstrapError::*;
    match error {
        NeverJoined { missing, waited, turned_away } => e.u8(1).usizes(missing).u64(millis(*waited)).strs(turned_away),
        WorldMismatch { rank, says, expected } => e.u8(2).usize(*rank).usize(*says).usize(*expected),
        DuplicateRank { rank } => e.u8(3).usize(*rank),
        RankOutOfRange { rank, world, origin } => e.u8(4).usize(*rank).usize(*world).str(origin),
        LayoutMismatch { host, detail } => e.u8(5).str(host).str(detail),
        JobMismatch { rank, says, expected } => e.u8(6).usize(*rank).str(says).str(expected),
        ProtocolMismatch { rank, says, expected } => e.u8(7).usize(*rank).u32(*says).u32(*expected),
        PeerLost { rank, .. } => e.u8(8).usize(*rank),
        Timeout { missing, waited, .. } => e.u8(9).usizes(missing).u64(millis(*waited)),
        Diverged { rank, says, with, expected } => e.u8(10).usize(*rank).str(says).usize(*with).str(expected),
        Malformed { peer, detail, .. } => e.u8(11).usize(*peer).str(detail),
        other => e.u8(0).str(&other.to_string()),
    }
}

fn decode_error(d: &mut Dec<'_>, during: &'static str) -> Result<BootstrapError, String> {
    use BootstrapError::*;
    Ok(match d.u8()? {
        1 => NeverJoined { missing: d.usizes()?, waited: Duration::from_millis(d.u64()?), turned_away: d.strs()? },
        2 => WorldMismatch { rank: d.usize()?, says: d.usize()?, expected: d.usize()? },
        3 => DuplicateRank { rank: d.usize()? },
        4 => RankOutOfRange { rank: d.usize()?, world: d.usize()?, origin: d.str()? },
        5 => LayoutMismatch { host: d.str()?, detail: d.str()? },
        6 => JobMismatch { rank: d.usize()?, says: d.str()?, expected: d.str()? },
        7 => ProtocolMismatch { rank: d.usize()?, says: d.u32()?, expected: d.u32()? },
        8 => PeerLost { rank: d.usize()?, during },
        9 => Timeout { during, missing: d.usizes()?, waited: Duration::from_millis(d.u64()?) },
        10 => Diverged { rank: d.usize()?, says: d.str()?, with: d.usize()?, expected: d.str()? },
        11 => Malformed { during, peer: d.usize()?, detail: d.str()? },
        _ => Remote { message: d.str()? },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_names_other_versions() {
        let hello = Hello {
            version: VERSION,
            rank: 3,
            world: 4,
            local_rank: 1,
            local_world: 2,
            host: "node-b".into(),
            job_key: "k".into(),
        };
        assert_eq!(Hello::decode(&hello.encode()), Ok(hello.clone()));
        let old = Hello { version: VERSION + 1, ..hello };
        assert_eq!(Hello::decode(&old.encode()), Err(Some((VERSION + 1, 3))));
        assert_eq!(Hello::decode(b"GET / HTTP/1.1\r\n"), Err(None));
    }

    #[test]
    fn errors_travel_typed() {
        let sent = BootstrapError::NeverJoined {
            missing: vec![2, 5],
            waited: Duration::from_millis(300),
            turned_away: vec!["x".into()],
        };
        let Reply::Failed(got) = decode_reply(&failed(&sent), "op").unwrap() else { panic!() };
        assert_eq!(got.to_string(), sent.to_string());
        let lost = BootstrapError::PeerLost { rank: 3, during: "theirs" };
        let Reply::Failed(got) = decode_reply(&failed(&lost), "mine").unwrap() else { panic!() };
        assert!(matches!(got, BootstrapError::PeerLost { rank: 3, during: "mine" }));
        let other = BootstrapError::Broken { during: "x", cause: "y".into() };
        let Reply::Failed(got) = decode_reply(&failed(&other), "x").unwrap() else { panic!() };
        assert!(matches!(got, BootstrapError::Remote { message } if message == other.to_string()));
    }

    #[test]
    fn replies_round_trip() {
        let table = vec![Member { local_rank: 0, local_world: 1, host: "h".into() }];
        assert!(matches!(decode_reply(&welcome(&table), "x"), Ok(Reply::Welcome(t)) if t == table));
        let parts = vec![b"a".to_vec(), Vec::new()];
        assert!(
            matches!(decode_reply(&gathered(7, &parts), "x"), Ok(Reply::Gathered { seq: 7, parts: p }) if p == parts)
        );
        assert_eq!(decode_contribute(&contribute(7, "op", b"z")), Ok((7, "op".into(), b"z".to_vec())));
        assert!(decode_reply(&[99], "x").is_err());
    }
}
