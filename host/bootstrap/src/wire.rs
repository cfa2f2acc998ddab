//! Length-prefixed frames with deadlines, a small binary encoding, and waiting on several sockets.
//!
//! Every read here has a deadline, enforced with the socket's read timeout on each call, so that no
//! peer — slow, stuck or gone — can make a rank hang.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// A socket whose reads and writes can be given a timeout.
pub(crate) trait Stream: Read + Write + AsFd {
    fn read_timeout(&self, t: Duration) -> io::Result<()>;
    fn write_timeout(&self, t: Duration) -> io::Result<()>;
}

impl Stream for TcpStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

impl Stream for UnixStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

/// Why a frame did not arrive (or could not be sent).
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The peer closed the connection (or reset it): it exited or crashed.
    Closed,
    /// The deadline passed first.
    TimedOut,
    /// The length prefix is over the limit for this phase: not a peer of ours.
    TooLarge(u64),
    /// Any other failure of the socket.
    Io(io::Error),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        use io::ErrorKind::*;
        match e.kind() {
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe | NotConnected => Self::Closed,
            WouldBlock | TimedOut => Self::TimedOut,
            _ => Self::Io(e),
        }
    }
}

/// The time left until `deadline`, at least a millisecond: a zero timeout means "block forever" to
/// the socket API, and a frame already waiting should still be read at the deadline.
pub(crate) fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
}

/// Fills `buf` before `deadline`.
pub(crate) fn read_full<S: Stream>(s: &mut S, buf: &mut [u8], deadline: Instant) -> Result<(), FrameError> {
    let mut got = 0;
    while got < buf.len() {
        s.read_timeout(left(deadline))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(FrameError::Closed),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads one frame of at most `max` bytes before `deadline`.
pub(crate) fn read_frame<S: Stream>(s: &mut S, max: u64, deadline: Instant) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 8];
    read_full(s, &mut len, deadline)?;
    let len = u64::from_le_bytes(len);
    if len > max {
        return Err(FrameError::TooLarge(len));
    }
    // Grow as the bytes arrive instead of trusting the prefix with one allocation.
    const CHUNK: usize = 64 << 20;
    let len = usize::try_from(len).map_err(|_| FrameError::TooLarge(len))?;
    let mut buf = Vec::with_capacity(len.min(CHUNK));
    while buf.len() < len {
        let start = buf.len();
        buf.resize(start + (len - start).min(CHUNK), 0);
        read_full(s, &mut buf[start..], deadline)?;
    }
    Ok(buf)
}

/// Writes one frame before `deadline`.
pub(crate) fn write_frame<S: Stream>(s: &mut S, payload: &[u8], deadline: Instant) -> Result<(), FrameError> {
    let len = (payload.len() as u64).to_le_bytes();
    for part in [&len[..], payload] {
        let mut sent = 0;
        while sent < part.len() {
            s.write_timeout(left(deadline))?;
            match s.write(&part[sent..]) {
                Ok(0) => return Err(FrameError::Closed),
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// The indices of `fds` that have something to read (data, or the peer's close), waiting at most
/// `timeout`; empty when it passes (or a signal interrupts: the callers loop on their deadline).
pub(crate) fn readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<Vec<usize>> {
    let mut polled: Vec<PollFd<'_>> = fds.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)).collect();
    let ms = PollTimeout::try_from(timeout.max(Duration::from_millis(1))).unwrap_or(PollTimeout::MAX);
    match poll(&mut polled, ms) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    }
    let ready = PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL;
    Ok(polled
        .iter()
        .enumerate()
        .filter(|(_, p)| p.revents().is_some_and(|r| r.intersects(ready)))
        .map(|(i, _)| i)
        .collect())
}

/// A message being encoded: little-endian integers, length-prefixed byte strings.
#[derive(Debug, Default)]
pub(crate) struct Enc(pub(crate) Vec<u8>);

impl Enc {
    pub(crate) fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub(crate) fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn usize(self, v: usize) -> Self {
        self.u64(v as u64)
    }
    pub(crate) fn bytes(mut self, v: &[u8]) -> Self {
        self = self.usize(v.len());
        self.0.extend_from_slice(v);
        self
    }
    pub(crate) fn str(self, v: &str) -> Self {
        self.bytes(v.as_bytes())
    }
    pub(crate) fn usizes(self, v: &[usize]) -> Self {
        v.iter().fold(self.usize(v.len()), |e, &x| e.usize(x))
    }
    pub(crate) fn strs(self, v: &[String]) -> Self {
        v.iter().fold(self.usize(v.len()), |e, x| e.str(x))
    }
}

/// A message being decoded; every error says what was short or wrong.
#[derive(Debug)]
pub(crate) struct Dec<'a>(pub(crate) &'a [u8]);

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("truncated {what}: needs {n} bytes, {} left", self.0.len()));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1, "u8")?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4, "u32")?.try_into().expect("4 bytes")))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8, "u64")?.try_into().expect("8 bytes")))
    }
    pub(crate) fn usize(&mut self) -> Result<usize, String> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| format!("{v} does not fit a usize"))
    }
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.usize()?;
        self.take(n, "byte string")
    }
    pub(crate) fn str(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "a string that is not UTF-8".to_owned())
    }
    /// A count of items that each take at least `min_size` bytes, checked against what is left so a
    /// garbage count cannot allocate without bound.
    pub(crate) fn count(&mut self, min_size: usize) -> Result<usize, String> {
        let n = self.usize()?;
        if n.saturating_mul(min_size) > self.0.len() {
            return Err(format!("a count of {n} items with only {} bytes left", self.0.len()));
        }
        Ok(n)
    }
    pub(crate) fn usizes(&mut self) -> Result<Vec<usize>, String> {
        (0..self.count(8)?).map(|_| self.usize()).collect()
    }
    pub(crate) fn strs(&mut self) -> Result<Vec<String>, String> {
        (0..self.count(8)?).map(|_| self.str()).collect()
    }
    pub(crate) fn end(&self) -> Result<(), String> {
        if self.0.is_empty() { Ok(()) } else { Err(format!("{} bytes past the end of the message", self.0.len())) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let e = Enc::default().u8(7).u32(9).usize(1 << 40).bytes(b"ab").str("rank").usizes(&[3, 1]).strs(&["x".into()]);
        let mut d = Dec(&e.0);
        assert_eq!(d.u8(), Ok(7));
        assert_eq!(d.u32(), Ok(9));
        assert_eq!(d.usize(), Ok(1 << 40));
        assert_eq!(d.bytes(), Ok(&b"ab"[..]));
        assert_eq!(d.str().as_deref(), Ok("rank"));
        assert_eq!(d.usizes(), Ok(vec![3, 1]));
        assert_eq!(d.strs(), Ok(vec!["x".to_owned()]));
        assert_eq!(d.end(), Ok(()));
    }

    #[test]
    fn rejects_short_and_oversized() {
        assert!(Dec(&[1, 2]).u32().is_err());
        let huge = Enc::default().usize(usize::MAX / 2);
        assert!(Dec(&huge.0).usizes().is_err());
        assert!(Dec(&huge.0).bytes().is_err());
    }

    #[test]
    fn frames_close_and_time_out() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let soon = || Instant::now() + Duration::from_millis(50);
        write_frame(&mut a, b"hello", soon()).unwrap();
        assert_eq!(read_frame(&mut b, 16, soon()).unwrap(), b"hello");
        assert!(matches!(read_frame(&mut b, 16, soon()), Err(FrameError::TimedOut)));
        write_frame(&mut a, &[0; 32], soon()).unwrap();
        assert!(matches!(read_frame(&mut b, 16, soon()), Err(FrameError::TooLarge(32))));
        drop(a);
        let mut rest = Vec::new();
        b.read_to_end(&mut rest).unwrap();
        assert!(matches!(read_frame(&mut b, 16, soon()), Err(FrameError::Closed)));
    }
}
