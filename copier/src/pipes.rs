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
