//! The receiver (`tacid-stem-receive`, adr/0025): `btrfs receive` in a root unit of its own,
//! started per connection to its socket, so the long-lived stem on the bus holds none of
//! what writing a received tree needs (CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID,
//! CAP_MKNOD, setuid files).
//!
//! One connection is one receive: a header line naming where ([`Where`]), then the plain
//! send stream until the sender half-closes; the answer is one line ([`Answer`]). The
//! receiver trusts nothing it is sent: the header names a place only by what it is (the
//! store's `.incoming`, or a local Btrfs target by its name in root's copies configuration,
//! which the receiver reads itself), never by a path, and the stream goes to
//! `btrfs receive --chroot`, confined to that directory.

use std::io::Read as _;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::receive_protocol::{Answer, Where, MAX_HEADER_BYTES};
use layout::copies::Place;
use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// How long the header may take to come.
pub const HEADER_WAIT: Duration = Duration::from_secs(30);
/// The most bytes of `btrfs receive`'s stderr kept.
const STDERR_KEPT: usize = 4096;

/// What the receiver is started with (its unit's command line; never the stem's word).
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the store (`@snapshots`) is mounted: its `.incoming` is received into.
    pub snapshots: PathBuf,
    /// Root's copies configuration: the local targets that may be received into.
    pub copies_config: PathBuf,
    /// `btrfs` (btrfs-progs).
    pub btrfs: PathBuf,
    /// How long `btrfs receive` may go on after the sender's end of the stream.
    pub stall: Duration,
    /// How long one receive may take in all.
    pub deadline: Duration,
}

/// Serve the one connection at `conn` (the socket as stdin; the answer goes to `answer`,
/// the same socket as stdout).
pub fn serve(opts: &Options, conn: BorrowedFd<'_>, answer: &mut dyn std::io::Write) -> Answer {
    let outcome = read_header(conn)
        .and_then(|line| Where::parse(&line))
        .and_then(|w| Ok((dest(opts, &w)?, w)))
        .and_then(|(dest, w)| receive(opts, conn, &dest, &w));
    let a = match outcome {
        Ok(()) => Answer::Ok,
        Err(why) => Answer::Failed(why),
    };
    let _ = answer.write_all(a.line().as_bytes());
    let _ = answer.flush();
    a
}

/// Read the header line, byte by byte (what follows is the stream, `btrfs receive`'s to
/// read), within [`HEADER_WAIT`].
fn read_header(conn: BorrowedFd<'_>) -> Result<String, String> {
    let until = Instant::now() + HEADER_WAIT;
    let mut line = Vec::new();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no header line came in time".into());
        }
        let t = Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos().into(),
        };
        match poll(&mut [PollFd::new(&conn, PollFlags::IN)], Some(&t)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(format!("waiting for the header: {e}")),
        }
        let mut byte = [0u8];
        match rustix::io::read(conn, &mut byte) {
            Ok(0) => return Err("the connection ended before the header line".into()),
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => line.push(byte[0]),
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(e) => return Err(format!("reading the header: {e}")),
        }
        if line.len() > MAX_HEADER_BYTES {
            return Err(format!(
                "the header is longer than {MAX_HEADER_BYTES} bytes"
            ));
        }
    }
    String::from_utf8(line).map_err(|_| "the header is not UTF-8".into())
}

/// A directory received into must be a real directory (no symlink last), root's, on Btrfs.
fn check_dir(path: &Path) -> Result<(), String> {
    let shown = path.display();
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.file_type().is_dir() {
        return Err(format!("{shown} is not a directory"));
    }
    if meta.uid() != 0 {
        return Err(format!("{shown} is not root's"));
    }
    let dir = btrfs::Dir::open_configured(path).map_err(|e| format!("{shown}: {e}"))?;
    match dir.is_on_btrfs() {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{shown} is not on Btrfs")),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

/// The root of the subvolume `dir` is in: the nearest of `dir` and its ancestors that is a
/// subvolume's root (inode 256 on Btrfs).
fn subvolume_root(dir: &Path) -> Result<PathBuf, String> {
    const SUBVOLUME_ROOT_INODE: u64 = 256;
    for at in dir.ancestors() {
        let meta = std::fs::metadata(at).map_err(|e| format!("{}: {e}", at.display()))?;
        if meta.ino() == SUBVOLUME_ROOT_INODE {
            let on_btrfs = btrfs::Dir::open_configured(at)
                .and_then(|d| d.is_on_btrfs())
                .unwrap_or(false);
            if on_btrfs {
                return Ok(at.to_owned());
            }
        }
    }
    Err(format!("{} is in no Btrfs subvolume", dir.display()))
}

/// The directory `w` names, found and checked by the receiver itself.
fn dest(opts: &Options, w: &Where) -> Result<PathBuf, String> {
    let path = match w {
        Where::Store | Where::StoreChain => {
            check_dir(&opts.snapshots)?;
            opts.snapshots.join(layout::copies::INCOMING_DIR_NAME)
        }
        Where::Target(name) => {
            let config = crate::copies::load_config(&opts.copies_config)?;
            let target = config
                .target(name.as_str())
                .ok_or_else(|| format!("root's copies configuration names no target {name}"))?;
            match (&target.place, target.is_sealed()) {
                (Place::Local(p), false) => PathBuf::from(p),
                _ => return Err(format!("target {name} is not a local Btrfs target")),
            }
        }
    };
    check_dir(&path)?;
    Ok(path)
}

/// Run `btrfs receive --chroot` into `dest` with the connection as its input, until it
/// ends: killed `stall` after the sender's end of the stream, or at the deadline.
fn receive(opts: &Options, conn: BorrowedFd<'_>, dest: &Path, w: &Where) -> Result<(), String> {
    let mut cmd = Command::new(&opts.btrfs);
    cmd.arg("receive");
    // -e stops at the one stream's end; a chain is several streams, each with its own end.
    if *w != Where::StoreChain {
        cmd.arg("-e");
    }
    // -m: the subvolume holding `dest`, so btrfs-progs finds an incremental's parent from
    // there. Left to itself it starts from the mount `dest` is on, which under the unit's
    // ReadWritePaths= is a bind mount of `dest` itself, not a subvolume's root: the parent
    // is then not found (measured: "It seems that you have changed your default
    // subvolume"). It also confines that lookup: btrfs receive finds a parent or a clone
    // source by (received) UUID across the whole filesystem, and --chroot confines paths,
    // not it; from a subvolume root, one outside that subvolume is refused as not reachable,
    // so a read-only subvolume a user made in /tmp claiming a snapshot's UUID is never used.
    cmd.arg("-m").arg(subvolume_root(dest)?);
    cmd.arg("--chroot").arg(dest);
    let input = conn
        .try_clone_to_owned()
        .map_err(|e| format!("dup the connection: {e}"))?;
    let mut child = cmd
        .stdin(Stdio::from(input))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {}: {e}", opts.btrfs.display()))?;
    let mut stderr = child.stderr.take().expect("piped");
    let tail = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > STDERR_KEPT {
                kept.drain(..kept.len() - STDERR_KEPT);
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    });
    let started = Instant::now();
    let mut ended_at: Option<Instant> = None;
    let mut stopped = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => {
                stopped = Some(format!("wait for btrfs receive: {e}"));
                break None;
            }
        }
        if started.elapsed() >= opts.deadline {
            stopped = Some(format!(
                "the receive was still going after {} s, the most one may take",
                opts.deadline.as_secs()
            ));
            break None;
        }
        if ended_at.is_some_and(|at| at.elapsed() >= opts.stall) {
            stopped = Some(format!(
                "btrfs receive was still going {} s after the stream ended",
                opts.stall.as_secs()
            ));
            break None;
        }
        // The sender's half-close (or its going away) shows as RDHUP on the connection.
        let tick = Timespec {
            tv_sec: 0,
            tv_nsec: 200_000_000,
        };
        let mut fds = [PollFd::new(&conn, PollFlags::RDHUP)];
        if ended_at.is_none() {
            if let Ok(n) = poll(&mut fds, Some(&tick)) {
                if n > 0 {
                    ended_at = Some(Instant::now());
                }
            }
        } else {
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let said = tail.join().unwrap_or_default();
    if let Some(why) = stopped {
        return Err(format!(
            "{why}; it was stopped. btrfs receive: {}",
            said.trim()
        ));
    }
    let status = status.expect("ended");
    if status.success() {
        return Ok(());
    }
    let said = said.trim();
    Err(if said.is_empty() {
        format!("btrfs receive ended with {status}")
    } else {
        said.to_owned()
    })
}
