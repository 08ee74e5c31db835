//! The guard: a small process of its own, started before any unit is frozen, that thaws
//! them when the stem cannot (adr/0026). It holds the read end of a pipe whose only write
//! end is the stem's: the stem writes `done` after it thawed them itself; end of file
//! without `done` (the stem died, however) or the hold limit passing makes the guard thaw
//! every unit and exit. It ignores the signals a stop sends to the whole unit, so that it
//! outlives the stem long enough to thaw. `ExecStopPost=` covers the one case left, both
//! killed at once.

use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use layout::cut::UnitName;

use super::Target;

/// The first argument that makes `tacid-stem` the guard.
pub const SUBCOMMAND: &str = "thaw-guard";
/// What the stem writes once it thawed every unit itself.
const DONE: &[u8] = b"done\n";
/// What the guard writes once it is ready to thaw.
const READY: &str = "ready";
/// The guard exits with this when it thawed because the stem went away.
pub const EXIT_STEM_GONE: u8 = 2;
/// The guard exits with this when it thawed because the hold limit passed.
pub const EXIT_LIMIT: u8 = 3;
/// How long the stem waits for the guard to say it is ready.
const START_LIMIT: Duration = Duration::from_secs(5);

/// The stem's end of a running guard.
#[derive(Debug)]
pub struct Guard {
    child: Child,
    stdin: Option<ChildStdin>,
}

fn arg(t: &Target) -> OsString {
    match t {
        Target::Cgroup { dir, .. } => {
            let mut a = OsString::from("cgroup=");
            a.push(dir.as_os_str());
            a
        }
        Target::Unit(unit) => OsString::from(format!("unit={unit}")),
    }
}

impl Guard {
    /// Start `program thaw-guard LIMIT_MS TARGET...` and wait until it says it is ready.
    pub fn start(program: &Path, targets: &[Target], limit: Duration) -> Result<Guard, String> {
        let mut child = Command::new(program)
            .arg(SUBCOMMAND)
            .arg(limit.as_millis().to_string())
            .args(targets.iter().map(arg))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().ok_or("no pipe from the guard")?;
        let ready = rustix::event::poll(
            &mut [rustix::event::PollFd::new(
                &stdout.as_fd(),
                rustix::event::PollFlags::IN,
            )],
            Some(&rustix::event::Timespec {
                tv_sec: START_LIMIT.as_secs() as i64,
                tv_nsec: 0,
            }),
        );
        let mut line = [0u8; 16];
        let n = match ready {
            Ok(1) => stdout.read(&mut line).unwrap_or(0),
            _ => 0,
        };
        if !line[..n].starts_with(READY.as_bytes()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{} did not say it was ready within {} s",
                program.display(),
                START_LIMIT.as_secs()
            ));
        }
        Ok(Guard { child, stdin })
    }

    /// The guard's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Why the units are no longer held, if the guard has thawed them (it has exited).
    pub fn fired(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(match status.code() {
                Some(c) if c == i32::from(EXIT_LIMIT) => {
                    "the guard thawed them at its limit".into()
                }
                _ => format!("the guard ended ({status})"),
            }),
            Err(e) => Some(format!("the guard cannot be asked: {e}")),
        }
    }

    /// The stem is done: with `thawed`, tell the guard so (it exits quietly); without, close
    /// the pipe so that it thaws every unit too. Then reap it.
    pub fn finish(mut self, thawed: bool) {
        if let Some(mut stdin) = self.stdin.take() {
            if thawed {
                let _ = stdin.write_all(DONE);
            }
        }
        let _ = self.child.wait();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Dropped without finish (a panic): the pipe closes and the guard thaws.
        self.stdin.take();
    }
}

enum Thaw {
    Cgroup(PathBuf),
    Unit(UnitName),
}

/// `tacid-stem thaw-guard LIMIT_MS TARGET...`: the guard's own program. `args` are the
/// arguments after the subcommand.
pub fn main(args: &[OsString]) -> ExitCode {
    // The stop of a unit signals every process in it; the guard must live to thaw.
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGPIPE] {
        // SAFETY: SIG_IGN installs no handler; nothing runs in signal context.
        #[allow(unsafe_code)]
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let started = Instant::now();
    let Some(limit) = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse::<u64>().ok())
        .map(Duration::from_millis)
    else {
        eprintln!("tacid-stem thaw-guard: usage: thaw-guard LIMIT_MS (cgroup=DIR|unit=NAME)...");
        return ExitCode::from(64);
    };
    let mut targets = Vec::new();
    for a in &args[1..] {
        let b = a.as_bytes();
        if let Some(dir) = b.strip_prefix(b"cgroup=") {
            targets.push(Thaw::Cgroup(PathBuf::from(OsStr::from_bytes(dir))));
        } else if let Some(Ok(unit)) = b
            .strip_prefix(b"unit=")
            .map(|u| UnitName::parse(&String::from_utf8_lossy(u)))
        {
            targets.push(Thaw::Unit(unit));
        } else {
            eprintln!(
                "tacid-stem thaw-guard: not a target: {}",
                a.to_string_lossy()
            );
            return ExitCode::from(64);
        }
    }
    {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{READY}").and_then(|_| out.flush()).is_err() {
            // The stem is gone already; it froze nothing before this line.
            return ExitCode::from(EXIT_STEM_GONE);
        }
    }
    let stdin = std::io::stdin();
    let mut got = Vec::new();
    let why = loop {
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            break EXIT_LIMIT;
        }
        let mut fds = [rustix::event::PollFd::new(
            &stdin,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(0) => break EXIT_LIMIT,
            Ok(_) => {
                let mut buf = [0u8; 16];
                match stdin.lock().read(&mut buf) {
                    Ok(0) | Err(_) => break EXIT_STEM_GONE,
                    Ok(n) => {
                        got.extend_from_slice(&buf[..n]);
                        if got.starts_with(DONE) {
                            return ExitCode::SUCCESS;
                        }
                        if got.len() > DONE.len() {
                            break EXIT_STEM_GONE;
                        }
                    }
                }
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break EXIT_STEM_GONE,
        }
    };
    let reason = if why == EXIT_LIMIT {
        format!("the hold limit of {} ms passed", limit.as_millis())
    } else {
        "the stem went away while they were frozen".to_string()
    };
    let mut failed = false;
    let units: Vec<&UnitName> = targets
        .iter()
        .filter_map(|t| match t {
            Thaw::Unit(u) => Some(u),
            Thaw::Cgroup(_) => None,
        })
        .collect();
    for t in &targets {
        if let Thaw::Cgroup(dir) = t {
            if let Err(e) = super::cgroup::set_frozen(dir, false) {
                eprintln!("tacid-stem thaw-guard: {e}");
                failed = true;
            }
        }
    }
    if !units.is_empty() {
        failed |= !thaw_units(&units);
    }
    eprintln!(
        "tacid-stem thaw-guard: thawed {} unit(s) because {reason}{}",
        targets.len(),
        if failed {
            " (some would not thaw; see above)"
        } else {
            ""
        }
    );
    ExitCode::from(why)
}

fn thaw_units(units: &[&UnitName]) -> bool {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        eprintln!("tacid-stem thaw-guard: cannot start a runtime to reach systemd");
        return false;
    };
    rt.block_on(async {
        let bus = match zbus::Connection::system().await {
            Ok(b) => b,
            Err(e) => {
                eprintln!("tacid-stem thaw-guard: cannot reach the system bus: {e}");
                return false;
            }
        };
        let mut all = true;
        for u in units {
            if let Err(e) = super::systemd::thaw(&bus, u).await {
                eprintln!("tacid-stem thaw-guard: {u}: {e}");
                all = false;
            }
        }
        all
    })
}
