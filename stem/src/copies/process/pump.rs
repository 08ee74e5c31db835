//! Moving a send stream from where it is made to where it is received, counting the bytes,
//! while the children's own output is drained (and capped) so none of them can block the
//! others or fill the stem's memory.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;

/// How much of a stream moves per read.
const CHUNK: usize = 256 * 1024;
/// The most bytes a child may print on a drained output whose end is kept (stderr) before
/// the pump gives up: a legitimate child says a few KiB; a hostile far side that never stops
/// talking must not keep an act (and its target) forever.
const MAX_DRAINED: u64 = 16 << 20;

/// A child's output kept while it is drained: the first `cap` bytes (what it answers) or
/// the last `cap` bytes (why it failed: the end of stderr says it).
#[derive(Debug)]
pub struct Drain {
    fd: Option<OwnedFd>,
    keep_last: bool,
    cap: usize,
    pub bytes: Vec<u8>,
    /// More came than was kept.
    pub cut: bool,
    /// Bytes read in all.
    seen: u64,
}

impl Drain {
    pub fn first(fd: OwnedFd, cap: usize) -> Drain {
        Drain {
            fd: Some(fd),
            keep_last: false,
            cap,
            bytes: Vec::new(),
            cut: false,
            seen: 0,
        }
    }

    /// Nothing to drain.
    pub fn empty() -> Drain {
        Drain {
            fd: None,
            keep_last: false,
            cap: 0,
            bytes: Vec::new(),
            cut: false,
            seen: 0,
        }
    }

    pub fn last(fd: OwnedFd, cap: usize) -> Drain {
        Drain {
            keep_last: true,
            ..Drain::first(fd, cap)
        }
    }

    /// Too much: the answer kept whole is longer than its cap, or more than
    /// [`MAX_DRAINED`] came in all.
    fn overflowed(&self) -> bool {
        (!self.keep_last && self.cut) || self.seen > MAX_DRAINED
    }

    fn take(&mut self, data: &[u8]) {
        self.seen += data.len() as u64;
        if self.keep_last {
            self.bytes.extend_from_slice(data);
            if self.bytes.len() > self.cap {
                let extra = self.bytes.len() - self.cap;
                self.bytes.drain(..extra);
                self.cut = true;
            }
        } else {
            let room = self.cap - self.bytes.len();
            self.bytes.extend_from_slice(&data[..data.len().min(room)]);
            self.cut |= data.len() > room;
        }
    }

    /// Whether its end has not been read yet.
    pub fn open(&self) -> bool {
        self.fd.is_some()
    }

    /// Read on to its end, waiting at most `within` in all (what is kept is capped as
    /// ever); it is left open when its end did not come.
    pub fn finish_within(&mut self, within: std::time::Duration) {
        let until = std::time::Instant::now() + within;
        let mut buf = vec![0u8; 4096];
        while let Some(fd) = &self.fd {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            let timeout = rustix::event::Timespec {
                tv_sec: left.as_secs().try_into().unwrap_or(i64::MAX),
                tv_nsec: left.subsec_nanos().into(),
            };
            match poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&timeout)) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(_) => return,
            }
            match rustix::io::read(fd, &mut buf[..]) {
                Ok(0) => self.fd = None,
                Ok(n) => {
                    let data = buf[..n].to_vec();
                    self.take(&data);
                    if self.seen > MAX_DRAINED {
                        self.fd = None;
                    }
                }
                Err(Errno::AGAIN | Errno::INTR) => {}
                Err(_) => self.fd = None,
            }
        }
    }

    /// The kept text, lossy, trimmed.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).trim().to_owned()
    }
}

/// How the pump ended.
#[derive(Debug)]
pub enum Pumped {
    /// The source ended and everything read was written.
    Whole,
    /// The sink stopped taking the stream (its reader exited or was killed).
    SinkClosed,
}

/// Move everything from `source` to `sink`, adding each byte moved to `moved`, and drain
/// every `drains` to its end. `source` is closed when the sink stops; `sink` when the
/// source ends. Returns when the source is done and every drain is at its end, or with
/// `TimedOut` when nothing at all moved for `stall` (a far side that keeps its link alive
/// but never answers must not hold its target forever: the caller kills the children), or
/// when `deadline` passes.
pub fn pump(
    source: OwnedFd,
    sink: OwnedFd,
    drains: &mut [Drain],
    moved: &AtomicU64,
    stall: std::time::Duration,
    deadline: Option<std::time::Instant>,
) -> io::Result<Pumped> {
    for fd in [source.as_fd(), sink.as_fd()].into_iter().chain(
        drains
            .iter()
            .filter_map(|d| d.fd.as_ref().map(|f| f.as_fd())),
    ) {
        rustix::io::ioctl_fionbio(fd, true)?;
    }
    let mut source = Some(source);
    let mut sink = Some(sink);
    let mut outcome = Pumped::Whole;
    let mut buf = vec![0u8; CHUNK];
    let mut pending: (usize, usize) = (0, 0); // buf[start..end] waits for the sink
    let mut scratch = vec![0u8; 64 * 1024];
    loop {
        if source.is_none() && pending.0 == pending.1 {
            // Everything read is written: the receiver sees the end of the stream. A
            // socket's sink is half-closed (its other copies stay open for the answer).
            if let Some(s) = sink.take() {
                let _ = rustix::net::shutdown(&s, rustix::net::Shutdown::Write);
            }
        }
        if source.is_none() && sink.is_none() && drains.iter().all(|d| d.fd.is_none()) {
            return Ok(outcome);
        }
        let mut fds = Vec::with_capacity(2 + drains.len());
        let want_read = pending.0 == pending.1;
        if let (Some(s), true) = (&source, want_read) {
            fds.push(PollFd::new(s, PollFlags::IN));
        }
        if let (Some(s), false) = (&sink, want_read) {
            fds.push(PollFd::new(s, PollFlags::OUT));
        }
        for d in drains.iter() {
            if let Some(fd) = &d.fd {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
        }
        let waited = std::time::Instant::now();
        let wait = match deadline {
            Some(at) if at <= waited => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the transfer went on past its deadline",
                ))
            }
            Some(at) => stall.min(at - waited),
            None => stall,
        };
        let timeout = rustix::event::Timespec {
            tv_sec: wait.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: wait.subsec_nanos().into(),
        };
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) if waited.elapsed() >= stall => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "nothing moved for {} s: the other side stopped answering",
                        stall.as_secs()
                    ),
                ))
            }
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        drop(fds);

        if want_read {
            if let Some(s) = &source {
                match rustix::io::read(s, &mut buf[..]) {
                    Ok(0) => source = None,
                    Ok(n) => pending = (0, n),
                    Err(Errno::AGAIN | Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        } else if let Some(s) = &sink {
            match rustix::io::write(s, &buf[pending.0..pending.1]) {
                Ok(n) => {
                    pending.0 += n;
                    moved.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(Errno::AGAIN | Errno::INTR) => {}
                Err(Errno::PIPE | Errno::CONNRESET) => {
                    // The receiver is gone: stop the sender too (it gets EPIPE).
                    outcome = Pumped::SinkClosed;
                    source = None;
                    sink = None;
                    pending = (0, 0);
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            pending = (0, 0);
        }

        for d in drains.iter_mut() {
            let Some(fd) = &d.fd else { continue };
            match rustix::io::read(fd, &mut scratch[..]) {
                Ok(0) => d.fd = None,
                Ok(n) => {
                    let data = scratch[..n].to_vec();
                    d.take(&data);
                    if d.overflowed() {
                        return Err(io::Error::other(format!(
                            "the other side said more than {} bytes; it is not tacid's answer",
                            if d.keep_last {
                                MAX_DRAINED
                            } else {
                                d.cap as u64
                            }
                        )));
                    }
                }
                Err(Errno::AGAIN | Errno::INTR) => {}
                Err(_) => d.fd = None,
            }
        }
    }
}
