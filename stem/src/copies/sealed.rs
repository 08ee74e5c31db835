//! Sealed copies, the stem's side: a snapshot's send stream framed into a pipe for the
//! copier (which seals and stores it), and a framed chain of streams from the copier
//! received into the store. The stem sees only a pipe end the keeper hands it: no target,
//! no key, no network. What comes through the pipe is untrusted like any caller's input:
//! framed ([`stem_interface::pipe`]), complete only with its END frame, received only
//! under `btrfs receive --chroot` into `.incoming`, and kept only when the snapshot named
//! checks out; otherwise everything received is deleted.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use layout::SnapshotName;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::{FileType, OFlags};
use rustix::io::Errno;
use stem_interface::pipe::{FrameReader, FrameWriter, MAX_DATA};
use uuid::Uuid;

use super::process::{capped, run_fed_until, Ran, Sink};
use super::target::receive_failure;
use super::{failed, identity, Copies, CopyError};
use crate::engine::{ByteCount, EngineError, Snapshot};

/// How long an ABORT frame may wait for room in the pipe: it is a courtesy to a reader
/// that may be gone or stuck.
const ABORT_WAIT: Duration = Duration::from_secs(2);

/// What SendSealed answers, and the END frame's trailer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SentSealed {
    /// The stream's UUID: the snapshot's identity (its received UUID when it was itself
    /// received, else its UUID), what a receive of the stream records as received UUID.
    pub uuid: Uuid,
    /// The parent's identity, when incremental.
    pub parent_uuid: Option<Uuid>,
    /// Bytes of stream sent.
    pub bytes: u64,
}

/// Which way the stem uses a pipe end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The stem reads (ReceiveSealed's `from`).
    Read,
    /// The stem writes (SendSealed's `into`).
    Write,
}

/// How long a sealed receive may take in all, by default: a whole chain restored from a
/// slow link (a disk's worth at a few MB/s) fits; a copier that trickles forever does not.
pub const DEFAULT_SEALED_DEADLINE: Duration = Duration::from_secs(48 * 3600);

/// How often (in stream bytes) a sealed receive looks at the store's free space again.
const SPACE_LOOK_EVERY: u64 = 8 << 20;

/// A pipe end the keeper handed over: checked to be a FIFO open the right way, made
/// non-blocking, every read and write waiting at most `stall` for the other side, and
/// none past the deadline, when there is one.
#[derive(Debug)]
pub struct PipeEnd {
    fd: OwnedFd,
    stall: Duration,
    /// When the whole transfer must be over, and how long it was given.
    deadline: Option<(Instant, Duration)>,
    /// Who stopped, when nothing moved for `stall`.
    stalled: &'static str,
}

impl PipeEnd {
    /// Check `fd`: a FIFO (not a file, socket or terminal), open for `way`.
    pub fn check(fd: OwnedFd, way: Way) -> Result<OwnedFd, CopyError> {
        let bad = |why: String| CopyError::BadPipe(why);
        let st = rustix::fs::fstat(&fd).map_err(|e| bad(format!("cannot stat it: {e}")))?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::Fifo {
            return Err(bad(format!("it is a {kind:?}, not a pipe")));
        }
        let flags =
            rustix::fs::fcntl_getfl(&fd).map_err(|e| bad(format!("cannot read its flags: {e}")))?;
        let mode = flags & OFlags::RWMODE;
        let fits = match way {
            Way::Read => mode == OFlags::RDONLY || mode == OFlags::RDWR,
            Way::Write => mode == OFlags::WRONLY || mode == OFlags::RDWR,
        };
        if !fits {
            let wanted = match way {
                Way::Read => "reading",
                Way::Write => "writing",
            };
            return Err(bad(format!("it is not open for {wanted}")));
        }
        Ok(fd)
    }

    fn new(fd: OwnedFd, stall: Duration) -> io::Result<PipeEnd> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(PipeEnd {
            fd,
            stall,
            deadline: None,
            stalled: "the copier stopped answering",
        })
    }

    /// Wait until the pipe is ready for `flags`, at most `stall`, and not past the deadline.
    fn wait(&self, flags: PollFlags) -> io::Result<()> {
        let started = Instant::now();
        loop {
            let mut left = self.stall.saturating_sub(started.elapsed());
            if let Some((at, given)) = self.deadline {
                let to_deadline = at.saturating_duration_since(Instant::now());
                if to_deadline.is_zero() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        past_deadline(given),
                    ));
                }
                left = left.min(to_deadline);
            }
            if started.elapsed() >= self.stall {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "nothing moved through the pipe for {} s: {}",
                        self.stall.as_secs(),
                        self.stalled
                    ),
                ));
            }
            let timeout = Timespec {
                tv_sec: left.as_secs().try_into().unwrap_or(i64::MAX),
                tv_nsec: left.subsec_nanos().into(),
            };
            let mut fds = [PollFd::new(&self.fd, flags)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(Errno::INTR) => continue,
                // Ready, or hung up / in error: the read or write says which.
                Ok(_) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Read for PipeEnd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match rustix::io::read(&self.fd, &mut *buf) {
                Ok(n) => return Ok(n),
                Err(Errno::AGAIN) => self.wait(PollFlags::IN)?,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Write for PipeEnd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match rustix::io::write(&self.fd, buf) {
                Ok(n) => return Ok(n),
                Err(Errno::AGAIN) => self.wait(PollFlags::OUT)?,
                Err(Errno::INTR) => {}
                Err(Errno::PIPE) => {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the pipe's reader is gone (the copier stopped or died)",
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A duration for people: seconds, minutes or hours.
fn shown(d: Duration) -> String {
    match d.as_secs() {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}

/// Why a transfer that went on for `given` was stopped, and what to do.
fn past_deadline(given: Duration) -> String {
    format!(
        "the transfer was still going after {}, the most one may take (a copier still \
         sending then is stuck or hostile: see tacid-copier's log, then fetch again)",
        shown(given)
    )
}

fn sealed_failed(name: SnapshotName, reason: impl std::fmt::Display) -> CopyError {
    CopyError::SealedFailed {
        name,
        reason: reason.to_string(),
    }
}

impl Copies {
    /// Send the snapshot `name` (incremental against `parent`, a read-only snapshot of the
    /// same subvolume in the store) framed into the pipe `into`: an END frame with the
    /// trailer once the send succeeded, an ABORT frame with the reason otherwise.
    pub fn send_sealed(
        &self,
        name: SnapshotName,
        parent: Option<SnapshotName>,
        into: OwnedFd,
    ) -> Result<SentSealed, CopyError> {
        let into = PipeEnd::check(into, Way::Write)?;
        if let Some(p) = parent {
            if p == name {
                return Err(CopyError::BadParent(format!(
                    "{name} cannot be its own parent"
                )));
            }
            if p.subvolume() != name.subvolume() {
                return Err(CopyError::BadParent(format!(
                    "the parent {p} is not a snapshot of {}",
                    name.subvolume()
                )));
            }
        }
        let turn = self.turns.take_sealed(name, "send-sealed")?;
        let into = PipeEnd::new(into, self.programs.stall).map_err(|e| failed("the pipe", e))?;
        let mut frames = FrameWriter::new(into);
        let abort = |mut frames: FrameWriter<PipeEnd>, e: CopyError| {
            frames.get_mut().stall = ABORT_WAIT;
            frames.abort(&e.to_string());
            e
        };
        let source = match self.worker.run_blocking(move |e| e.open_for_copy(name)) {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(abort(frames, e.into())),
            Err(e) => return Err(abort(frames, e.into())),
        };
        if !source.info.readonly {
            return Err(abort(frames, CopyError::NotReadOnly(name)));
        }
        let parent_info = match parent {
            None => None,
            Some(p) => match source.siblings.iter().find(|(n, _)| *n == p) {
                Some((_, info)) if info.readonly => Some(info.clone()),
                Some(_) => return Err(abort(frames, CopyError::NotReadOnly(p))),
                None => return Err(abort(frames, CopyError::NoSuchSnapshot(p))),
            },
        };
        let opened = source.store.open_dir(name.to_string()).and_then(|s| {
            let p = match parent {
                Some(p) => Some(source.store.open_dir(p.to_string())?),
                None => None,
            };
            Ok((s, p))
        });
        let (snapshot, parent_dir) = match opened {
            Ok(o) => o,
            Err(e) => return Err(abort(frames, failed("open the snapshot to send", e))),
        };
        tracing::info!(
            parent = parent.map(|p| p.to_string()).unwrap_or_default(),
            "sending {name} sealed, into a pipe"
        );
        let (mut stream, stream_in) =
            match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
                Ok((r, w)) => (std::fs::File::from(r), w),
                Err(e) => return Err(abort(frames, failed("pipe", e))),
            };
        // Bigger frames, fewer of them; a smaller pipe works too.
        let _ = rustix::pipe::fcntl_setpipe_size(&stream_in, MAX_DATA);
        let sender = std::thread::Builder::new()
            .name("stem-send".into())
            .spawn(move || snapshot.send(stream_in.as_fd(), parent_dir.as_ref()));
        let sender = match sender {
            Ok(s) => s,
            Err(e) => return Err(abort(frames, failed("start the send thread", e))),
        };
        let mut buf = vec![0u8; MAX_DATA];
        let moved: io::Result<()> = loop {
            let n = match stream.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(e),
            };
            if let Err(e) = frames.write_all(&buf[..n]) {
                break Err(e);
            }
            turn.bytes.fetch_add(n as u64, Ordering::Relaxed);
        };
        // A failed write leaves the send writing into a pipe nobody reads: close it, so
        // the ioctl ends (EPIPE).
        drop(stream);
        let sent = sender
            .join()
            .map_err(|_| CopyError::Failed("the send thread panicked".into()));
        let reason = match (moved, sent) {
            (Ok(()), Ok(Ok(()))) => None,
            (Err(e), _) => Some(sealed_failed(name, format!("writing the pipe: {e}"))),
            (_, Err(e)) => Some(e),
            (Ok(()), Ok(Err(e))) => Some(sealed_failed(name, format!("btrfs send: {e}"))),
        };
        if let Some(e) = reason {
            return Err(abort(frames, e));
        }
        let sent = SentSealed {
            uuid: identity(&source.info),
            parent_uuid: parent_info.as_ref().map(identity),
            bytes: frames.data_bytes(),
        };
        frames
            .end(&sent)
            .map_err(|e| sealed_failed(name, format!("writing the end frame: {e}")))?;
        Ok(sent)
    }

    /// Receive the framed chain of send streams (full first, then each incremental on the
    /// one before) from the pipe `from` into the store's `.incoming`, under
    /// `btrfs receive --chroot`. Only after the END frame, and only when `.incoming/<name>`
    /// is a read-only subvolume whose received UUID is `uuid`, is it snapshotted into the
    /// store as `name`; whatever happens, everything received is then deleted. Answers the
    /// snapshot and the stream bytes received.
    pub fn receive_sealed(
        &self,
        name: SnapshotName,
        uuid: Uuid,
        from: OwnedFd,
    ) -> Result<(Snapshot, u64), CopyError> {
        let from = PipeEnd::check(from, Way::Read)?;
        let turn = self.turns.take_sealed(name, "receive-sealed")?;
        let _incoming = self.incoming_turn()?;
        let given = self.sealed_deadline;
        let deadline = Instant::now() + given;
        let mut from =
            PipeEnd::new(from, self.programs.stall).map_err(|e| failed("the pipe", e))?;
        from.deadline = Some((deadline, given));
        self.worker.run_blocking(move |e| e.prepare_fetch(name))??;
        let room = self.room(name)?;
        tracing::info!(room = room.cap, "receiving {name} sealed, from a pipe");
        // By the receiver, as a chain: several streams, each ended by its own end command;
        // each incremental's parent is the subvolume received before it, inside the chroot.
        let receive = Sink::Receiver {
            socket: &self.programs.receiver,
            place: crate::receive_protocol::Where::StoreChain,
        };
        let stall = self.programs.stall;
        let received = run_fed_until(
            receive,
            move |out| unframe(from, out, room),
            &turn.bytes,
            stall,
            Some(deadline),
        );
        let receive_failed = |ran: &Ran| {
            if ran.stderr.contains("No space left") {
                CopyError::Engine(EngineError::NoSpace {
                    doing: format!("receiving {name}: btrfs receive: {}", capped(&ran.stderr)),
                })
            } else {
                sealed_failed(name, receive_failure(&ran.stderr))
            }
        };
        let finished = match received {
            Err(e) => Err(match e {
                CopyError::Stalled(_) if Instant::now() >= deadline => {
                    sealed_failed(name, past_deadline(given))
                }
                // The pump's stall and the pipe's are one: which side stopped is not known.
                CopyError::Stalled(_) => sealed_failed(
                    name,
                    format!(
                        "nothing moved through the pipe for {} s: the copier stopped writing, \
                         or btrfs receive stopped taking the stream (see tacid-copier's log, \
                         then fetch again)",
                        self.programs.stall.as_secs()
                    ),
                ),
                e => e,
            }),
            Ok((_, Err(Unframed::Input(why) | Unframed::Bound(why)))) => {
                Err(sealed_failed(name, why))
            }
            // btrfs receive stopped taking the stream: its words say why.
            Ok((ran, Err(Unframed::Output(_)))) if !ran.ok() => Err(receive_failed(&ran)),
            Ok((_, Err(Unframed::Output(why)))) => Err(sealed_failed(name, why)),
            Ok((ran, Ok((trailer, bytes)))) => check_trailer(&trailer, uuid, bytes)
                .map_err(|why| sealed_failed(name, why))
                .and_then(|()| {
                    if ran.ok() {
                        Ok(())
                    } else {
                        Err(receive_failed(&ran))
                    }
                }),
        }
        .and_then(|()| {
            match self
                .worker
                .run_blocking(move |e| e.finish_fetch(name, uuid))?
            {
                Ok(s) => Ok(s),
                Err(EngineError::FetchUnverified { why, .. }) => Err(sealed_failed(
                    name,
                    format!("what was received is not the snapshot named ({why})"),
                )),
                Err(e) => Err(e.into()),
            }
        });
        if finished.is_err() {
            if let Err(e) = self
                .worker
                .run_blocking(|e| e.clean_incoming())
                .map_err(CopyError::from)
                .and_then(|r| r.map_err(CopyError::from))
            {
                tracing::warn!("cannot clean the store's .incoming after a failed receive: {e}");
            }
        }
        finished.map(|s| (s, turn.bytes.load(Ordering::Relaxed)))
    }
}

impl Copies {
    /// What the store can take of a sealed receive: the free space above the hard floor.
    /// Below the floor already, the receive is refused before it begins.
    fn room(&self, name: SnapshotName) -> Result<Room, CopyError> {
        let space = self.worker.run_blocking(|e| e.free_space())??;
        let floor = space.hard_floor_bytes;
        if space.free_bytes <= floor {
            return Err(CopyError::Engine(EngineError::BelowHardFloor {
                doing: format!("receiving {name}"),
                free: ByteCount(space.free_bytes),
                floor: ByteCount(floor),
            }));
        }
        let top = rustix::fs::open(
            &self.top_path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| failed("open the tacid filesystem", e))?;
        Ok(Room {
            cap: space.free_bytes - floor,
            free: space.free_bytes,
            floor,
            top,
        })
    }
}

/// What a sealed receive may fill: the stem trusts no size it is told (the manifest's is
/// the copier's word), so the store's own free space above its hard floor is the bound.
#[derive(Debug)]
struct Room {
    /// The most stream bytes taken: the free space above the floor when it began (a stream
    /// writes at most about its own size; metadata beyond that is what `floor` catches).
    cap: u64,
    /// The free space when it began.
    free: u64,
    /// The hard floor (0: none).
    floor: u64,
    /// The tacid filesystem, to look at its free space again as the stream comes.
    top: OwnedFd,
}

impl Room {
    fn full(&self, why: String) -> Unframed {
        Unframed::Bound(format!(
            "{why}; the receive was stopped. Free space in the store (`tacid data prune`, or \
             `tacid data delete` snapshots) and fetch again; if there is room for the copy's \
             size, the copier sent more than the copy holds (`tacid data verify` the copy)"
        ))
    }

    /// Whether `so_far` stream bytes, and what the filesystem says now, are within bounds.
    fn check(&self, so_far: u64, look: bool) -> Result<(), Unframed> {
        if so_far > self.cap {
            return Err(self.full(format!(
                "the stream grew past {}, all the store could take above its hard floor of {} \
                 ({} free when the receive began)",
                ByteCount(self.cap),
                ByteCount(self.floor),
                ByteCount(self.free)
            )));
        }
        if look && self.floor > 0 {
            if let Ok(st) = rustix::fs::fstatvfs(&self.top) {
                let free = st.f_bavail.saturating_mul(st.f_frsize);
                if free < self.floor {
                    return Err(self.full(format!(
                        "the store's free space fell to {}, below its hard floor of {}, after \
                         {} of stream",
                        ByteCount(free),
                        ByteCount(self.floor),
                        ByteCount(so_far)
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Why the unframing stopped before the END frame.
#[derive(Debug)]
enum Unframed {
    /// The pipe: an ABORT, an EOF, a stall, bad framing, data after the END.
    Input(String),
    /// The stream's way into `btrfs receive` (it stopped taking it).
    Output(String),
    /// A bound of the receive: the room in the store, the deadline, or `btrfs receive`
    /// taking nothing for the stall.
    Bound(String),
}

/// The unframing thread: the frames read from the pipe `from` become the plain stream,
/// written into `out` (`run_fed`'s way into `btrfs receive`), within `room` and `from`'s
/// stall and deadline. Returns the END frame's trailer and the stream bytes that came, or
/// why the stream is not whole. `out` is closed on return either way, so the receive sees
/// the end of its input.
fn unframe(from: PipeEnd, out: OwnedFd, room: Room) -> Result<(Vec<u8>, u64), Unframed> {
    let mut out = PipeEnd::new(out, from.stall).map_err(|e| Unframed::Output(e.to_string()))?;
    out.deadline = from.deadline;
    out.stalled = "btrfs receive stopped taking the stream";
    let mut frames = FrameReader::new(from);
    let mut buf = vec![0u8; 256 << 10];
    let mut next_look = SPACE_LOOK_EVERY;
    loop {
        match frames.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Checked before it is written: what is past the room never reaches the disk.
                let so_far = frames.data_bytes();
                let look = so_far >= next_look;
                if look {
                    next_look = so_far.saturating_add(SPACE_LOOK_EVERY);
                }
                room.check(so_far, look)?;
                out.write_all(&buf[..n]).map_err(|e| match e.kind() {
                    io::ErrorKind::TimedOut => Unframed::Bound(e.to_string()),
                    _ => Unframed::Output(format!("btrfs receive stopped taking the stream: {e}")),
                })?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Unframed::Input(e.to_string())),
        }
    }
    // Nothing may follow the END. What is already there is looked at; nothing is waited
    // for (the writer's end may stay open a while in the keeper or the bus).
    frames.get_mut().stall = Duration::ZERO;
    match frames.expect_eof() {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
        Err(e) => return Err(Unframed::Input(e.to_string())),
    }
    Ok((
        frames.trailer().unwrap_or_default().to_vec(),
        frames.data_bytes(),
    ))
}

/// Check the END frame's trailer against the call: `uuid` (when the trailer names one)
/// and the bytes that came (when it counts them). What else it holds is the copier's.
fn check_trailer(trailer: &[u8], uuid: Uuid, bytes: u64) -> Result<(), String> {
    let value: serde_json::Value = serde_json::from_slice(trailer)
        .map_err(|e| format!("the end frame's trailer is not JSON: {e}"))?;
    let serde_json::Value::Object(fields) = value else {
        return Err("the end frame's trailer is not a JSON object".into());
    };
    if let Some(said) = fields.get("uuid") {
        let said = said.as_str().and_then(|s| Uuid::parse_str(s).ok());
        if said != Some(uuid) {
            return Err(format!(
                "the end frame names another snapshot than the one asked for ({uuid})"
            ));
        }
    }
    if let Some(said) = fields.get("bytes") {
        if said.as_u64() != Some(bytes) {
            return Err(format!(
                "the end frame counts {} bytes of stream; {bytes} came",
                layout::human::cap(&said.to_string(), 24)
            ));
        }
    }
    Ok(())
}
