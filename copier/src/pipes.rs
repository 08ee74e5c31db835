//! The pipe ends the keeper hands over: checked to be what they must be before a byte moves.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{FileType, OFlags};

/// Which end of a pipe the copier must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Seal reads the stem's frames from it.
    Read,
    /// Unseal writes frames into it for the stem.
    Write,
}

/// `fd` is a FIFO open for `end`; it is made blocking (the copier's threads wait on it).
/// The error says what it is instead.
pub fn check(fd: &OwnedFd, end: End, argument: &str) -> Result<(), String> {
    let st = rustix::fs::fstat(fd.as_fd()).map_err(|e| format!("cannot fstat {argument}: {e}"))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Fifo {
        return Err(format!(
            "{argument} is not a pipe ({:?}); hand the copier one end of a pipe",
            FileType::from_raw_mode(st.st_mode)
        ));
    }
    let flags = rustix::fs::fcntl_getfl(fd.as_fd())
        .map_err(|e| format!("cannot read {argument}'s flags: {e}"))?;
    let mode = flags & OFlags::RWMODE;
    let fits = match end {
        End::Read => mode == OFlags::RDONLY || mode == OFlags::RDWR,
        End::Write => mode == OFlags::WRONLY || mode == OFlags::RDWR,
    };
    if !fits {
        let want = match end {
            End::Read => "the read end",
            End::Write => "the write end",
        };
        return Err(format!(
            "{argument} is not open for what it is for: hand the copier {want} of the pipe"
        ));
    }
    if flags.contains(OFlags::NONBLOCK) {
        rustix::fs::fcntl_setfl(fd.as_fd(), flags - OFlags::NONBLOCK)
            .map_err(|e| format!("cannot make {argument} blocking: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    #[test]
    fn a_pipe_that_moves_nothing_is_given_up() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a pipe");
        let mut reader = Bounded::new(r, std::time::Duration::from_millis(200));
        let mut writer = std::fs::File::from(w);
        writer.write_all(b"x").expect("write");
        let mut buf = [0u8; 8];
        assert_eq!(reader.read(&mut buf).expect("one byte"), 1);
        let started = std::time::Instant::now();
        let e = reader.read(&mut buf).expect_err("nothing more");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("moved nothing for"), "{e}");
        assert!(started.elapsed() >= std::time::Duration::from_millis(200));
        drop(writer);
        assert_eq!(reader.read(&mut buf).expect("EOF"), 0);
    }

    #[test]
    fn only_the_right_end_of_a_pipe_passes() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a pipe");
        assert_eq!(check(&r, End::Read, "from"), Ok(()));
        assert_eq!(check(&w, End::Write, "into"), Ok(()));
        let wrong = check(&w, End::Read, "from").expect_err("the write end");
        assert!(wrong.contains("hand the copier the read end"), "{wrong}");
        let file: OwnedFd = std::fs::File::open("/dev/null").expect("null").into();
        let not = check(&file, End::Read, "from").expect_err("not a pipe");
        assert!(not.contains("from is not a pipe"), "{not}");
    }
}

/// A pipe end whose reads and writes give up when the other side moves nothing for
/// `stall`: a stem that neither writes nor closes (or stops reading) must not hold the
/// target's turn for ever.
#[derive(Debug)]
pub struct Bounded {
    file: std::fs::File,
    stall: std::time::Duration,
}

impl Bounded {
    pub fn new(fd: OwnedFd, stall: std::time::Duration) -> Bounded {
        Bounded {
            file: std::fs::File::from(fd),
            stall,
        }
    }

    /// Wait until the pipe is ready for `flags`, or the stall's error.
    fn wait(&self, flags: rustix::event::PollFlags) -> std::io::Result<()> {
        use rustix::event::{poll, PollFd, Timespec};
        let started = std::time::Instant::now();
        loop {
            let left = self.stall.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the stem's pipe moved nothing for {} s; given up (is the stem stuck?)",
                        self.stall.as_secs()
                    ),
                ));
            }
            let timeout = Timespec {
                tv_sec: left.as_secs().try_into().unwrap_or(i64::MAX),
                tv_nsec: left.subsec_nanos().into(),
            };
            let mut fds = [PollFd::new(&self.file, flags)];
            match poll(&mut fds, Some(&timeout)) {
                // Ready, or the other end closed or failed: the read or write says which.
                Ok(n) if n > 0 => return Ok(()),
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl std::io::Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.wait(rustix::event::PollFlags::IN)?;
        self.file.read(buf)
    }
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.wait(rustix::event::PollFlags::OUT)?;
        self.file.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}
