//! The children an act runs (`ssh`) and the receiver it connects to
//! (`tacid-stem-receive`, for every `btrfs receive`), and their pipes: a stream fed in,
//! their output drained and capped, a stall ending them.

mod pump;

use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use pump::{pump, Drain, Pumped};

use super::{failed, CopyError};
use crate::receive_protocol::{Answer, Where};

/// Most bytes of a child's stderr kept for the reason of a failure.
const STDERR_CAP: usize = 4096;
/// Most bytes of a far side's answer read (a `list` of the most copies listed, about 105
/// bytes a line, fits); more is refused, never parsed cut short.
const STDOUT_CAP: usize = 2 << 20;
/// At most this many bytes of a reason are put in an error or a log line.
const REASON_CAP: usize = 400;
/// Most bytes of the receiver's answer read (one line of at most ~420 bytes).
const ANSWER_CAP: usize = 4096;
/// How much longer than the stall the stem waits for the receiver's answer after it gave
/// the stream up: the receiver stops `btrfs receive` one stall after the stream's end.
const ANSWER_GRACE: Duration = Duration::from_secs(5);

/// Where a stream goes: a child the stem runs (`ssh … receive` on a far host), or the
/// receiver, root's own unit behind `socket`, into the place `place` names.
#[derive(Debug)]
pub enum Sink<'a> {
    Child(Command),
    Receiver { socket: &'a Path, place: Where },
}

/// A sink started: the child, or the connection to the receiver.
enum Running {
    Child(std::process::Child),
    Receiver(UnixStream),
}

impl Running {
    /// Start `sink`: its input, and its outputs to drain.
    fn start(sink: Sink<'_>, stall: Duration) -> Result<(Running, OwnedFd, [Drain; 2]), CopyError> {
        match sink {
            Sink::Child(cmd) => {
                let mut child = spawn(cmd, Stdio::piped())?;
                let stdin: OwnedFd = child.stdin.take().expect("piped").into();
                let drains = [
                    Drain::first(child.stdout.take().expect("piped").into(), STDOUT_CAP),
                    Drain::last(child.stderr.take().expect("piped").into(), STDERR_CAP),
                ];
                Ok((Running::Child(child), stdin, drains))
            }
            Sink::Receiver { socket, place } => {
                let conn = connect(socket, &place, stall)?;
                let dup = |c: &UnixStream| {
                    c.try_clone()
                        .map(OwnedFd::from)
                        .map_err(|e| failed("dup the receiver's connection", e))
                };
                let (input, answer) = (dup(&conn)?, dup(&conn)?);
                Ok((
                    Running::Receiver(conn),
                    input,
                    [Drain::first(answer, ANSWER_CAP), Drain::empty()],
                ))
            }
        }
    }

    /// Stop it: a child is killed; the receiver is told the stream ended (it stops
    /// `btrfs receive` when that does not end it).
    fn stop(&mut self) {
        match self {
            Running::Child(c) => {
                let _ = c.kill();
            }
            Running::Receiver(conn) => {
                let _ = conn.shutdown(std::net::Shutdown::Write);
            }
        }
    }

    /// Wait for it to end; what it said.
    fn finish(self, drains: [Drain; 2], stall: Duration) -> Result<Ran, CopyError> {
        match self {
            Running::Child(child) => finish(child, drains),
            Running::Receiver(conn) => {
                let _ = conn.shutdown(std::net::Shutdown::Write);
                let [mut answer, _] = drains;
                // Given up early, the answer is still to come: the receiver ends once the
                // `btrfs receive` it ran ended, which cleaning up after it must wait for.
                answer.finish_within(stall + ANSWER_GRACE);
                Ok(answered(&answer.text(), answer.open()))
            }
        }
    }
}

/// Connect to the receiver at `socket` and name `place`.
fn connect(socket: &Path, place: &Where, stall: Duration) -> Result<UnixStream, CopyError> {
    let unreachable = |e: std::io::Error| {
        CopyError::Failed(format!(
            "cannot reach the receiver (tacid-stem-receive) at {}: {e}; is \
             {} running (systemctl status {})?",
            socket.display(),
            layout::names::STEM_RECEIVE_SOCKET_UNIT,
            layout::names::STEM_RECEIVE_SOCKET_UNIT,
        ))
    };
    let mut conn = UnixStream::connect(socket).map_err(unreachable)?;
    conn.set_write_timeout(Some(stall)).map_err(unreachable)?;
    conn.write_all(place.line().as_bytes())
        .map_err(unreachable)?;
    Ok(conn)
}

/// The receiver's answer as a child's end: `ok` is exit 0; a failure's reason is the
/// stderr the callers read (`btrfs receive`'s words).
fn answered(text: &str, still_running: bool) -> Ran {
    let (code, stderr) = match Answer::parse(text) {
        Some(Answer::Ok) => (Some(0), String::new()),
        Some(Answer::Failed(why)) => (Some(1), why),
        None if still_running => (
            None,
            "the receiver (tacid-stem-receive) did not answer in time; it was left to its \
             own time limit (journalctl -u 'tacid-stem-receive@*')"
                .into(),
        ),
        None => (
            None,
            "the receiver (tacid-stem-receive) ended without an answer \
             (journalctl -u 'tacid-stem-receive@*')"
                .into(),
        ),
    };
    Ran {
        code,
        stdout: String::new(),
        stderr,
    }
}

/// What a child said and how it ended.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// A child's stderr (or answer) as a reason: its end, on one line.
pub fn capped(text: &str) -> String {
    layout::human::cap_end(text.trim(), REASON_CAP)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn spawn(mut cmd: Command, stdin: Stdio) -> Result<std::process::Child, CopyError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            failed(
                &format!("run {program} (is it installed and in the stem's PATH?)"),
                e,
            )
        })
}

/// Run `cmd` with no input; capture its output (capped).
pub fn run_plain(cmd: Command, stall: Duration) -> Result<Ran, CopyError> {
    let mut child = spawn(cmd, Stdio::null())?;
    let mut drains = [
        Drain::first(child.stdout.take().expect("piped").into(), STDOUT_CAP),
        Drain::last(child.stderr.take().expect("piped").into(), STDERR_CAP),
    ];
    // No stream: an empty pipe as the source, its write end closed at once.
    let (src, snk) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| failed("pipe", e))?;
    let (_, unused_sink) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| failed("pipe", e))?;
    drop(snk);
    if let Err(e) = pump(
        src,
        unused_sink,
        &mut drains,
        &AtomicU64::new(0),
        stall,
        None,
    ) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(stalled(e, "reading a child's output"));
    }
    finish(child, drains)
}

fn finish(mut child: std::process::Child, drains: [Drain; 2]) -> Result<Ran, CopyError> {
    let status = child.wait().map_err(|e| failed("wait for a child", e))?;
    let [stdout, stderr] = drains;
    let mut stderr_text = stderr.text();
    if status.code().is_none() {
        use std::os::unix::process::ExitStatusExt as _;
        stderr_text.push_str(&format!(
            " (killed by signal {})",
            status.signal().unwrap_or(0)
        ));
    }
    Ok(Ran {
        code: status.code(),
        stdout: stdout.text(),
        stderr: stderr_text,
    })
}

/// Run `cmd` with the stream `send` writes as its stdin, counted into `moved`. The send runs
/// on a thread of its own (the ioctl blocks until the whole stream is written); how it
/// ended is returned with how the child ended.
pub fn run_fed<T: Send + 'static>(
    cmd: Sink<'_>,
    send: impl FnOnce(OwnedFd) -> T + Send + 'static,
    moved: &AtomicU64,
    stall: Duration,
) -> Result<(Ran, T), CopyError> {
    run_fed_until(cmd, send, moved, stall, None)
}

/// [`run_fed`], the child killed when `deadline` passes as when the stream stalls.
pub fn run_fed_until<T: Send + 'static>(
    sink: Sink<'_>,
    send: impl FnOnce(OwnedFd) -> T + Send + 'static,
    moved: &AtomicU64,
    stall: Duration,
    deadline: Option<Instant>,
) -> Result<(Ran, T), CopyError> {
    let (stream_out, stream_in) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| failed("pipe", e))?;
    let (mut running, stdin, mut drains) = Running::start(sink, stall)?;
    let sender = std::thread::Builder::new()
        .name("stem-send".into())
        .spawn(move || send(stream_in))
        .map_err(|e| failed("start the send thread", e))?;
    // On a stall the stream's read end is closed here, so the send ends with EPIPE.
    let pumped = pump(stream_out, stdin, &mut drains, moved, stall, deadline);
    if pumped.is_err() {
        running.stop();
    }
    let sent = sender
        .join()
        .map_err(|_| CopyError::Failed("the send thread panicked".into()))?;
    let ran = running.finish(drains, stall)?;
    if let Ok(Pumped::SinkClosed) = pumped {
        tracing::debug!("the receiver stopped before the stream ended");
    }
    pumped.map_err(|e| stalled(e, "moving the stream"))?;
    Ok((ran, sent))
}

/// Run `from | to`, counting the bytes between them. Returns how `to` and `from` ended.
pub fn run_piped(
    from: Command,
    to: Sink<'_>,
    moved: &AtomicU64,
    stall: Duration,
) -> Result<(Ran, Ran), CopyError> {
    let mut source = spawn(from, Stdio::null())?;
    let (mut sink, stdin, [out, err]) = match Running::start(to, stall) {
        Ok(s) => s,
        Err(e) => {
            let _ = source.kill();
            let _ = source.wait();
            return Err(e);
        }
    };
    let stream: OwnedFd = source.stdout.take().expect("piped").into();
    let mut all = [
        out,
        err,
        Drain::last(source.stderr.take().expect("piped").into(), STDERR_CAP),
    ];
    let pumped = pump(stream, stdin, &mut all, moved, stall, None);
    if pumped.is_err() {
        let _ = source.kill();
        sink.stop();
    }
    let [out, err, source_err] = all;
    let to_ran = sink.finish([out, err], stall)?;
    let from_ran = finish(source, [Drain::empty(), source_err])?;
    pumped.map_err(|e| stalled(e, "moving the stream"))?;
    Ok((to_ran, from_ran))
}

/// The error of a pump that failed: a stall says the other side stopped answering.
fn stalled(e: std::io::Error, what: &str) -> CopyError {
    if e.kind() == std::io::ErrorKind::TimedOut {
        CopyError::Stalled(e.to_string())
    } else {
        failed(what, e)
    }
}
