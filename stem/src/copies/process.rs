//! The children an act runs (`btrfs receive`, `ssh`) and their pipes: a stream fed in,
//! their output drained and capped, a stall ending them.

mod pump;

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use pump::{pump, Drain, Pumped};

use super::{failed, CopyError};

/// Most bytes of a child's stderr kept for the reason of a failure.
const STDERR_CAP: usize = 4096;
/// Most bytes of a far side's answer read (a `list` of the most copies listed, about 105
/// bytes a line, fits); more is refused, never parsed cut short.
const STDOUT_CAP: usize = 2 << 20;
/// At most this many bytes of a reason are put in an error or a log line.
const REASON_CAP: usize = 400;

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
    cmd: Command,
    send: impl FnOnce(OwnedFd) -> T + Send + 'static,
    moved: &AtomicU64,
    stall: Duration,
) -> Result<(Ran, T), CopyError> {
    run_fed_until(cmd, send, moved, stall, None)
}

/// [`run_fed`], the child killed when `deadline` passes as when the stream stalls.
pub fn run_fed_until<T: Send + 'static>(
    cmd: Command,
    send: impl FnOnce(OwnedFd) -> T + Send + 'static,
    moved: &AtomicU64,
    stall: Duration,
    deadline: Option<Instant>,
) -> Result<(Ran, T), CopyError> {
    let (stream_out, stream_in) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| failed("pipe", e))?;
    let mut child = spawn(cmd, Stdio::piped())?;
    let stdin: OwnedFd = child.stdin.take().expect("piped").into();
    let sender = std::thread::Builder::new()
        .name("stem-send".into())
        .spawn(move || send(stream_in))
        .map_err(|e| failed("start the send thread", e))?;
    let mut drains = [
        Drain::first(child.stdout.take().expect("piped").into(), STDOUT_CAP),
        Drain::last(child.stderr.take().expect("piped").into(), STDERR_CAP),
    ];
    // On a stall the stream's read end is closed here, so the send ends with EPIPE.
    let pumped = pump(stream_out, stdin, &mut drains, moved, stall, deadline);
    if pumped.is_err() {
        let _ = child.kill();
    }
    let sent = sender
        .join()
        .map_err(|_| CopyError::Failed("the send thread panicked".into()))?;
    let ran = finish(child, drains)?;
    if let Ok(Pumped::SinkClosed) = pumped {
        tracing::debug!("the receiver stopped before the stream ended");
    }
    pumped.map_err(|e| stalled(e, "moving the stream"))?;
    Ok((ran, sent))
}

/// Run `from | to`, counting the bytes between them. Returns how `to` and `from` ended.
pub fn run_piped(
    from: Command,
    to: Command,
    moved: &AtomicU64,
    stall: Duration,
) -> Result<(Ran, Ran), CopyError> {
    let mut source = spawn(from, Stdio::null())?;
    let mut sink = spawn(to, Stdio::piped())?;
    let stdin: OwnedFd = sink.stdin.take().expect("piped").into();
    let stream: OwnedFd = source.stdout.take().expect("piped").into();
    let mut all = [
        Drain::first(sink.stdout.take().expect("piped").into(), STDOUT_CAP),
        Drain::last(sink.stderr.take().expect("piped").into(), STDERR_CAP),
        Drain::last(source.stderr.take().expect("piped").into(), STDERR_CAP),
    ];
    let pumped = pump(stream, stdin, &mut all, moved, stall, None);
    if pumped.is_err() {
        let _ = source.kill();
        let _ = sink.kill();
    }
    let [out, err, source_err] = all;
    let to_ran = finish(sink, [out, err])?;
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
