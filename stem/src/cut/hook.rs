//! Hooks where a pause is not enough (adr/0026): a command root configured for a paused
//! unit, run as that unit's user before the freeze (a database's checkpoint) or after the
//! thaw, with a time limit, its output captured (capped) and journalled.
//!
//! Two ways to run one, as there are two ways to freeze:
//! - where systemd is PID 1, a transient service (`StartTransientUnit`, `User=` the hook's
//!   user, `TimeoutStartSec=` its limit, `KillSignal=SIGKILL` over its whole cgroup), its
//!   output on a pipe the stem holds: the stem's own unit gains no capability, and the hook
//!   runs outside the stem's sandbox (a hook inside it would have no network and the
//!   stem's system-call filter);
//! - elsewhere (CI, containers), the stem starts it itself: in a process group of its own,
//!   with the user's uid, primary gid and supplementary groups set before `exec`, every
//!   other file descriptor closed, an environment of six fixed variables, `/` as its
//!   directory; at the limit the whole process group is killed with `SIGKILL`.
//!
//! Never as root: the configuration refuses the name, and a user whose uid is 0 is refused
//! here.

use std::io::Read as _;
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use layout::cut::{Hook, HookCommand, HookUser, HookWhen, UnitName, MAX_HOOK_OUTPUT_BYTES};

/// The `PATH` a hook starts with (its program is named by absolute path; this is for what
/// the program itself runs).
pub const HOOK_PATH: &str = "/run/wrappers/bin:/run/current-system/sw/bin:/usr/bin:/bin";
/// After the limit or the hook's exit, how long output still in the pipe is read.
const DRAIN: Duration = Duration::from_millis(200);

/// What became of one hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOutcome {
    pub unit: UnitName,
    pub when: HookWhen,
    pub user: HookUser,
    /// It ran and exited with status 0 within its limit.
    pub ok: bool,
    /// What happened, in words: `exited 0 in 12 ms`, `ran past its limit of 5000 ms ...`.
    pub summary: String,
    /// Its output, stdout and stderr as they came, the first [`MAX_HOOK_OUTPUT_BYTES`].
    pub output: Vec<u8>,
    /// How many bytes of output there were in all.
    pub output_bytes: u64,
    pub took: Duration,
}

impl HookOutcome {
    /// One line for the journal and the keeper's record: `before pg.service as postgres:
    /// exited 0 in 12 ms`.
    pub fn line(&self) -> String {
        format!(
            "{} {} as {}: {}",
            self.when, self.unit, self.user, self.summary
        )
    }

    /// Log it (journald where it runs): the outcome, and the output escaped and capped.
    pub fn journal(&self) {
        let output = layout::escape::escape(&self.output);
        let more = if self.output_bytes > self.output.len() as u64 {
            format!(
                " (first {} of {} bytes)",
                self.output.len(),
                self.output_bytes
            )
        } else {
            String::new()
        };
        if self.ok {
            tracing::info!(
                unit = %self.unit,
                hook = self.when.as_str(),
                took_ms = self.took.as_millis() as u64,
                "hook {}; output{more}: {output}",
                self.line()
            );
        } else {
            tracing::warn!(
                unit = %self.unit,
                hook = self.when.as_str(),
                took_ms = self.took.as_millis() as u64,
                "hook {}; output{more}: {output}",
                self.line()
            );
        }
    }
}

/// How hooks are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// The stem forks, drops to the user and execs (no systemd as PID 1).
    Direct,
    /// A transient service of systemd's.
    Systemd,
}

/// Run `hook`'s command for `when` (the caller checked there is one) and say how it went.
pub async fn run(
    runner: Runner,
    bus: Option<&zbus::Connection>,
    hook: &Hook,
    when: HookWhen,
) -> HookOutcome {
    let (command, limit_ms) = hook
        .command(when)
        .expect("the caller asks only for a hook that exists");
    let limit = Duration::from_millis(limit_ms.into());
    let started = Instant::now();
    let ran = match (runner, bus) {
        (Runner::Systemd, Some(bus)) => {
            run_transient(bus, &hook.unit, &hook.user, command, when, limit).await
        }
        (Runner::Systemd, None) => Err("cannot reach systemd on the system bus".to_string()),
        (Runner::Direct, _) => {
            let (user, command) = (hook.user.clone(), command.clone());
            let unit = hook.unit.clone();
            match tokio::task::spawn_blocking(move || {
                run_direct(&unit, &user, &command, when, limit)
            })
            .await
            {
                Ok(r) => r,
                Err(e) => Err(format!("the hook's runner failed: {e}")),
            }
        }
    };
    let took = started.elapsed();
    let (ok, summary, output, output_bytes) = match ran {
        Ok(Ran {
            ended,
            output,
            output_bytes,
        }) => {
            let ms = took.as_millis();
            let (ok, summary) = match ended {
                Ended::Exited(0) => (true, format!("exited 0 in {ms} ms")),
                Ended::Exited(c) => (false, format!("failed: exited {c} after {ms} ms")),
                Ended::Signal(s) => (false, format!("failed: killed by signal {s} after {ms} ms")),
                Ended::Limit => (
                    false,
                    format!("failed: ran past its limit of {limit_ms} ms and was killed, with every process it started"),
                ),
                Ended::Other(why) => (false, format!("failed: {why} after {ms} ms")),
            };
            (ok, summary, output, output_bytes)
        }
        Err(why) => (false, format!("could not run: {why}"), Vec::new(), 0),
    };
    HookOutcome {
        unit: hook.unit.clone(),
        when,
        user: hook.user.clone(),
        ok,
        summary,
        output,
        output_bytes,
        took,
    }
}

/// How a hook's process ended.
#[derive(Debug)]
pub enum Ended {
    Exited(i32),
    Signal(i32),
    /// Killed at its limit.
    Limit,
    /// systemd's word for it.
    Other(String),
}

#[derive(Debug)]
pub struct Ran {
    pub ended: Ended,
    pub output: Vec<u8>,
    pub output_bytes: u64,
}

/// The environment a hook starts with, besides what names its user.
pub fn environment(unit: &UnitName, when: HookWhen) -> Vec<(String, String)> {
    vec![
        ("PATH".into(), HOOK_PATH.into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("TACID_HOOK".into(), when.as_str().into()),
        ("TACID_UNIT".into(), unit.as_str().into()),
    ]
}

/// Output read from `read` as it comes, until end of file or `until`; the first
/// [`MAX_HOOK_OUTPUT_BYTES`] kept, every byte counted.
#[derive(Debug, Default)]
pub struct Capture {
    pub kept: Vec<u8>,
    pub total: u64,
}

impl Capture {
    /// Read what is there before `until`; `true` at end of file.
    pub fn read_until(&mut self, pipe: &mut std::fs::File, until: Instant) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let fd = pipe.as_fd();
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let ts = rustix::event::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(0) => return false,
                Ok(_) => match pipe.read(&mut buf) {
                    Ok(0) => return true,
                    Ok(n) => {
                        self.total += n as u64;
                        let room = MAX_HOOK_OUTPUT_BYTES.saturating_sub(self.kept.len());
                        self.kept.extend_from_slice(&buf[..n.min(room)]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return true,
                },
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return true,
            }
        }
    }
}

/// A pipe for the hook's output: the read end (kept) and the write end (given away).
pub fn output_pipe() -> Result<(std::fs::File, OwnedFd), String> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("cannot make a pipe: {e}"))?;
    Ok((std::fs::File::from(r), w))
}

/// The user's uid, primary gid and every group it is a member of.
fn identity(user: &HookUser) -> Result<(u32, u32, Vec<u32>, String), String> {
    let found = nix::unistd::User::from_name(user.as_str())
        .map_err(|e| format!("cannot look up the user {user}: {e}"))?
        .ok_or_else(|| format!("there is no user {user}: create it or name the unit's user"))?;
    if found.uid.is_root() {
        return Err(format!(
            "the user {user} has uid 0; a hook never runs as root"
        ));
    }
    let name = std::ffi::CString::new(user.as_str()).map_err(|e| e.to_string())?;
    let groups = nix::unistd::getgrouplist(&name, found.gid)
        .map_err(|e| format!("cannot list the groups of {user}: {e}"))?;
    Ok((
        found.uid.as_raw(),
        found.gid.as_raw(),
        groups.iter().map(|g| g.as_raw()).collect(),
        found.dir.to_string_lossy().into_owned(),
    ))
}

/// Start the hook as its user in a process group of its own, read its output until it ends
/// or its limit, and kill the group at the limit (and whatever it left behind at its end).
fn run_direct(
    unit: &UnitName,
    user: &HookUser,
    command: &HookCommand,
    when: HookWhen,
    limit: Duration,
) -> Result<Ran, String> {
    let (uid, gid, groups, home) = identity(user)?;
    let argv = command.argv();
    let (mut read, write) = output_pipe()?;
    let write2 = write
        .try_clone()
        .map_err(|e| format!("cannot share the pipe: {e}"))?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(environment(unit, when))
        .env("HOME", &home)
        .env("USER", user.as_str())
        .env("LOGNAME", user.as_str())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::from(write2))
        .process_group(0);
    let gids: Vec<libc::gid_t> = groups;
    // SAFETY: between fork and exec the closure calls only async-signal-safe system calls
    // (setgroups, setgid, setuid, close_range) on memory made before the fork.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            // Groups first, then the gid, then the uid: after setuid nothing else may change.
            if libc::setgroups(gids.len(), gids.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // Every descriptor but 0, 1 and 2 closes at exec, whoever opened it.
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", layout::human::cap(&argv[0], 120)))?;
    // Our copies of the write end went into the command and are dropped with it.
    drop(cmd);
    let pgid = child.id() as libc::pid_t;
    let deadline = started + limit;
    let mut out = Capture::default();
    let mut eof = false;
    let mut timed_out = false;
    loop {
        if !eof {
            let step = (Instant::now() + Duration::from_millis(20)).min(deadline);
            eof = out.read_until(&mut read, step);
        } else {
            std::thread::sleep(
                Duration::from_millis(2).min(deadline.saturating_duration_since(Instant::now())),
            );
        }
        if exited_unreaped(pgid) {
            break;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            break;
        }
    }
    // The leader is a zombie or still running: its pid, and so the group's id, cannot be
    // reused until it is reaped, so this kill reaches only the hook's own processes.
    // SAFETY: kill(2) with a negative pid signals that process group; no memory is shared.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    let status = child
        .wait()
        .map_err(|e| format!("cannot wait for the hook: {e}"))?;
    if !eof {
        out.read_until(&mut read, Instant::now() + DRAIN);
    }
    let ended = if timed_out {
        Ended::Limit
    } else if let Some(c) = status.code() {
        Ended::Exited(c)
    } else {
        Ended::Signal(status.signal().unwrap_or(0))
    };
    Ok(Ran {
        ended,
        output: out.kept,
        output_bytes: out.total,
    })
}

/// Whether `pid` (our child) has exited, without reaping it.
fn exited_unreaped(pid: libc::pid_t) -> bool {
    // SAFETY: waitid writes only into `info`, which lives on this stack.
    #[allow(unsafe_code)]
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r == 0 && info.si_pid() != 0
    }
}

/// Run a hook as a transient service of systemd's (adr/0026): `User=` the hook's user (with
/// its groups, as systemd sets them), `Type=oneshot` so that the start job ends when the
/// command does, `TimeoutStartSec=` the limit, `KillSignal=SIGKILL` over its cgroup (every
/// process it started), its output on a pipe the stem reads, gone once it ended
/// (`CollectMode=inactive-or-failed`).
async fn run_transient(
    bus: &zbus::Connection,
    unit: &UnitName,
    user: &layout::cut::HookUser,
    command: &layout::cut::HookCommand,
    when: layout::cut::HookWhen,
    limit: std::time::Duration,
) -> Result<Ran, String> {
    use zbus::export::futures_core::Stream;
    use zbus::{Fd, Variant as Value};
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let manager = super::systemd::ManagerProxy::new(bus)
        .await
        .map_err(|e| format!("cannot reach systemd: {e}"))?;
    manager
        .subscribe()
        .await
        .map_err(|e| format!("cannot subscribe to systemd's jobs: {e}"))?;
    let mut removed = manager
        .receive_job_removed()
        .await
        .map_err(|e| format!("cannot watch systemd's jobs: {e}"))?;
    let (mut read, write) = output_pipe()?;
    let name = format!(
        "tacid-cut-hook-{}-{}.service",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let argv = command.argv().to_vec();
    let env: Vec<String> = environment(unit, when)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let exec: Vec<(String, Vec<String>, bool)> = vec![(argv[0].clone(), argv, false)];
    let properties: Vec<(&str, Value<'_>)> = vec![
        (
            "Description",
            Value::from(format!("tacid: the {when} hook of {unit}")),
        ),
        ("Type", Value::from("oneshot")),
        ("ExecStart", Value::from(exec)),
        ("User", Value::from(user.as_str())),
        ("Environment", Value::from(env)),
        ("WorkingDirectory", Value::from("/")),
        (
            "TimeoutStartUSec",
            Value::from(limit.as_micros().min(u128::from(u64::MAX)) as u64),
        ),
        ("KillSignal", Value::from(libc::SIGKILL)),
        ("CollectMode", Value::from("inactive-or-failed")),
        ("StandardInput", Value::from("null")),
        (
            "StandardOutputFileDescriptor",
            Value::from(Fd::from(write.as_fd())),
        ),
        (
            "StandardErrorFileDescriptor",
            Value::from(Fd::from(write.as_fd())),
        ),
    ];
    let job = manager
        .start_transient_unit(&name, "fail", properties, Vec::new())
        .await
        .map_err(|e| format!("systemd would not start the hook: {e}"))?;
    drop(write);
    // The output, read on a thread of its own until every process of the hook is gone.
    let deadline = std::time::Instant::now() + limit + std::time::Duration::from_secs(5);
    let reader = tokio::task::spawn_blocking(move || {
        let mut out = Capture::default();
        out.read_until(&mut read, deadline);
        out
    });
    let result = tokio::time::timeout_at(deadline.into(), async {
        loop {
            let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut removed).poll_next(cx));
            let Some(signal) = next.await else {
                return Err("systemd stopped telling about jobs".to_string());
            };
            let Ok(args) = signal.args() else { continue };
            if args.job().as_str() == job.as_str() {
                return Ok(args.result().to_string());
            }
        }
    })
    .await
    .map_err(|_| "systemd did not finish the hook's job in time".to_string())??;
    let out = reader
        .await
        .map_err(|e| format!("the hook's output reader failed: {e}"))?;
    let ended = match result.as_str() {
        "done" => Ended::Exited(0),
        "timeout" => Ended::Limit,
        other => Ended::Other(format!(
            "systemd's job ended \"{other}\" (see `journalctl -u {name}`)"
        )),
    };
    Ok(Ran {
        ended,
        output: out.kept,
        output_bytes: out.total,
    })
}
