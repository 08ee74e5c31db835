//! What every bus test of the copier needs, none of it a mock: a private `dbus-daemon`
//! with a system-bus-like policy and the shipped `org.tacid.Copier1.conf`, the real users
//! (`tacid-keeper`, `tacid-copier`, and a stranger), the real `tacid-copier` binary running
//! as the copier's user, its key made by `tacid-copier key init`, a directory target, real
//! Btrfs send streams from a loop filesystem, and the keeper's side played by the published
//! `Copier1Proxy` on a thread that runs as the keeper's user.
//!
//! Everything needs root. When it cannot run, [`require`] prints a loud SKIPPED line and
//! returns false; with CI=true it panics instead.
#![allow(dead_code)] // each test file uses a different part

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use copier_interface::{Copier1Proxy, Error};
use layout::names;
use stem_interface::pipe::{FrameReader, FrameWriter};

pub const FULL: &str = "@home.2026-12-01T140200.123456Z";
pub const INCR: &str = "@home.2026-12-02T140200.123456Z";
/// The sealed directory target's name in every test's copies.json.
pub const USB: &str = "usb";
/// A Btrfs (not sealed) target's name: the copier refuses it.
pub const PLAIN: &str = "plain";
/// A user who is neither the keeper nor the copier.
pub const STRANGER: &str = "tacid-stranger";

fn skip_or_fail(what: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true but this copier test cannot run: {what}");
    }
    eprintln!("\n*** SKIPPED: {what}; this copier test did not run ***\n");
    false
}

/// Root, `dbus-daemon`, `setpriv`, `useradd`, `btrfs`: what every bus test needs.
pub fn require() -> bool {
    if !rustix::process::geteuid().is_root() {
        return skip_or_fail("needs root (test users are made with useradd; loop Btrfs)");
    }
    for tool in ["dbus-daemon", "dbus-send", "useradd", "setpriv", "btrfs"] {
        if !testbed::installed(tool) {
            return skip_or_fail(&format!(
                "{tool} is not installed (apt-get install dbus passwd util-linux btrfs-progs)"
            ));
        }
    }
    true
}

/// A system user's uid and gid, made when missing (never removed).
pub fn user(name: &str) -> (u32, u32) {
    testbed::users::ensure_system_user(name)
}

pub fn keeper() -> (u32, u32) {
    user(names::KEEPER_USER)
}

pub fn copier_user() -> (u32, u32) {
    user(names::COPIER_USER)
}

const BUS_CONFIG: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=@SOCKET@</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
  </policy>
  <include>@POLICY@</include>
  <!-- The stranger passes the bus, so that the copier's own check is what refuses it. -->
  <policy user="tacid-stranger">
    <allow send_destination="org.tacid.Copier1" send_interface="org.tacid.Copier1"/>
  </policy>
</busconfig>
"#;

/// A private `dbus-daemon` with a system-like policy and the shipped copier policy.
#[derive(Debug)]
pub struct PrivateBus {
    _dir: tempfile::TempDir,
    daemon: Child,
    address: String,
}

impl PrivateBus {
    pub fn start() -> PrivateBus {
        let dir = tempfile::Builder::new()
            .prefix("tacid-copier-bus-")
            .tempdir()
            .expect("a temporary directory");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod bus dir");
        let policy = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("dbus")
            .join(format!("{}.conf", names::COPIER_BUS_NAME));
        let config = BUS_CONFIG
            .replace(
                "@SOCKET@",
                &dir.path().join("system_bus_socket").display().to_string(),
            )
            .replace("@POLICY@", &policy.display().to_string());
        let config_path = dir.path().join("bus.conf");
        std::fs::write(&config_path, config).expect("write the bus configuration");
        let mut daemon = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config_path.display()))
            .args(["--nofork", "--nopidfile", "--print-address"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start dbus-daemon");
        let mut line = String::new();
        BufReader::new(daemon.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read the bus address");
        let address = line.trim().to_owned();
        assert!(address.starts_with("unix:"), "no bus address: {line:?}");
        PrivateBus {
            _dir: dir,
            daemon,
            address,
        }
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn has_owner(&self, name: &str) -> bool {
        let out = Command::new("dbus-send")
            .arg(format!("--bus={}", self.address))
            .args([
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.NameHasOwner",
            ])
            .arg(format!("string:{name}"))
            .output()
            .expect("run dbus-send");
        String::from_utf8_lossy(&out.stdout).contains("boolean true")
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// A test's places: copies.json (root's, 0644), the copier's state directory and key, the
/// directory target (the copier's).
#[derive(Debug)]
pub struct Places {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub state: PathBuf,
    pub key: PathBuf,
    /// The sealed directory target's place.
    pub target: PathBuf,
}

impl Places {
    /// The places, with the key made by `tacid-copier key init` and copies.json naming
    /// the directory target `usb`, a Btrfs target `plain`, and `extra` targets (JSON
    /// members, "" for none).
    pub fn new(extra: &str) -> Places {
        let (cuid, cgid) = copier_user();
        let dir = tempfile::Builder::new()
            .prefix("tacid-copier-test-")
            .tempdir()
            .expect("a temporary directory");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let state = dir.path().join("state");
        let key = state.join("recovery.key");
        let usb = dir.path().join("usb");
        std::fs::create_dir(&usb).expect("mkdir usb");
        chown(&usb, cuid, cgid);
        let target = usb.join("tacid");
        let config = dir.path().join("copies.json");
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(", {extra}")
        };
        let json = format!(
            r#"{{"targets": {{"{USB}": {{"place": "{}", "seal": {{}}}}, "{PLAIN}": {{"place": "{}/plain"}}{extra}}}}}"#,
            target.display(),
            dir.path().display()
        );
        std::fs::write(&config, json).expect("write copies.json");
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let places = Places {
            dir,
            config,
            state,
            key,
            target,
        };
        let out = places.key_command(&["init"], "");
        assert!(out.status.success(), "key init: {out:?}");
        places
    }

    /// `tacid-copier key ARGS --key K --user tacid-copier`, as root, `stdin` on stdin.
    pub fn key_command(&self, args: &[&str], stdin: &str) -> std::process::Output {
        self.key_command_at(&self.key, args, stdin)
    }

    pub fn key_command_at(&self, key: &Path, args: &[&str], stdin: &str) -> std::process::Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tacid-copier"))
            .arg("key")
            .args(args)
            .arg("--key")
            .arg(key)
            .args(["--user", names::COPIER_USER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tacid-copier key");
        // A command that refuses before it reads stdin closes it: that is its answer, not
        // the test's failure.
        let _ = child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes());
        child.wait_with_output().expect("wait tacid-copier key")
    }

    /// Every object file under the target (relative paths), sorted.
    pub fn objects(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.target, &self.target, &mut out);
        out.sort();
        out
    }

    /// The parts' files under the target.
    pub fn parts(&self) -> Vec<String> {
        self.objects()
            .into_iter()
            .filter(|o| o.contains("/parts/"))
            .collect()
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out);
        } else {
            out.push(
                p.strip_prefix(root)
                    .expect("under the root")
                    .display()
                    .to_string(),
            );
        }
    }
}

pub fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
}

/// `tacid-copier` running as the copier's user on `bus`; killed on drop.
#[derive(Debug)]
pub struct CopierDaemon {
    child: Child,
}

impl CopierDaemon {
    pub fn start(bus: &PrivateBus, places: &Places) -> CopierDaemon {
        CopierDaemon::start_with(bus, places, &[])
    }

    /// As [`CopierDaemon::start`], its command line after `prefix` (run as root; for
    /// `nsenter --net=…` into an SSH target's network namespace).
    pub fn start_with(bus: &PrivateBus, places: &Places, prefix: &[String]) -> CopierDaemon {
        CopierDaemon::start_args(bus, places, prefix, &[])
    }

    /// As [`CopierDaemon::start_with`], with more arguments.
    pub fn start_args(
        bus: &PrivateBus,
        places: &Places,
        prefix: &[String],
        args: &[&str],
    ) -> CopierDaemon {
        let (uid, gid) = copier_user();
        let _ = keeper();
        let mut command = match prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg("setpriv");
                c
            }
            None => Command::new("setpriv"),
        };
        let child = command
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg(env!("CARGO_BIN_EXE_tacid-copier"))
            .args(["--bus", bus.address()])
            .args(["--keeper-user", names::KEEPER_USER])
            .arg("--copies-config")
            .arg(&places.config)
            .arg("--key")
            .arg(&places.key)
            .arg("--state-dir")
            .arg(&places.state)
            .args(args)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tacid-copier");
        // Its log goes on to the test's stderr, and is kept for a panic's message.
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut child = child;
        let stderr = child.stderr.take().expect("piped stderr");
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{line}");
                let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                kept.push_str(&line);
                kept.push('\n');
            }
        });
        let mut daemon = CopierDaemon { child };
        let start = Instant::now();
        while !bus.has_owner(names::COPIER_BUS_NAME) {
            if let Some(status) = daemon.child.try_wait().expect("poll tacid-copier") {
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "tacid-copier exited before owning its name: {status}; its log:\n{}",
                    log.lock().unwrap_or_else(|p| p.into_inner())
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "tacid-copier did not own its name in 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    /// Its process id (setpriv executes the copier in its own process).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash or a power cut would stop it, and wait.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for CopierDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Call the copier through the published proxy as `uid`/`gid` (a thread with those
/// credentials, which the bus reads from the socket): `f` gets the proxy.
pub fn call<T: Send>(
    bus: &PrivateBus,
    (uid, gid): (u32, u32),
    f: impl for<'p> FnOnce(
            &'p Copier1Proxy<'static>,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'p>>
        + Send,
) -> T {
    let address = bus.address().to_owned();
    testbed::as_user(uid, gid, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let connection = zbus::connection::Builder::address(address.as_str())
                .build()
                .await
                .expect("connect to the bus");
            let proxy = Copier1Proxy::new(&connection).await.expect("a proxy");
            f(&proxy).await
        })
    })
}

/// A pipe: (read end, write end).
pub fn pipe() -> (OwnedFd, OwnedFd) {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a pipe")
}

pub fn fd(fd: OwnedFd) -> zbus::OwnedFd {
    zbus::OwnedFd::from(fd)
}

/// How the test's writer (the stem's part) ends the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// END with the right trailer.
    End,
    /// END with this trailer instead.
    Trailer(serde_json::Value),
    /// ABORT after half the stream.
    AbortHalfway,
    /// Half the stream, then the writer dies (its end closed without END).
    DieHalfway,
}

/// Write `stream` into `w` as the stem's SendSealed would, ending as `ending` says.
pub fn write_frames(
    w: OwnedFd,
    stream: Vec<u8>,
    uuid: uuid::Uuid,
    parent: Option<uuid::Uuid>,
    ending: Ending,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut out = FrameWriter::new(std::fs::File::from(w));
        let half = stream.len() / 2;
        let result = match ending {
            Ending::End | Ending::Trailer(_) => out.write_all(&stream),
            Ending::AbortHalfway | Ending::DieHalfway => out.write_all(&stream[..half]),
        };
        if result.is_err() {
            return; // the copier stopped reading: its answer says why
        }
        match ending {
            Ending::End => {
                let _ = out.end(&serde_json::json!({
                    "uuid": uuid, "parent_uuid": parent, "bytes": stream.len()
                }));
            }
            Ending::Trailer(t) => {
                let _ = out.end(&t);
            }
            Ending::AbortHalfway => out.abort("btrfs send failed: the test says so"),
            Ending::DieHalfway => drop(out),
        }
    })
}

/// What the test's reader got: the stream's bytes and the END's trailer, or the error.
pub type Received = Result<(Vec<u8>, Vec<u8>), String>;

/// Read frames from `r` until the END (the stream's bytes and the trailer), or the error.
pub fn read_frames(r: OwnedFd) -> std::thread::JoinHandle<Received> {
    std::thread::spawn(move || {
        let mut frames = FrameReader::new(std::fs::File::from(r));
        let mut bytes = Vec::new();
        frames.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
        let trailer = frames.trailer().map(<[u8]>::to_vec).unwrap_or_default();
        Ok((bytes, trailer))
    })
}

/// Seal `stream` as `name` through a pipe written by the test, ending as `ending` says.
pub fn seal(
    bus: &PrivateBus,
    name: &str,
    uuid: uuid::Uuid,
    parent: Option<(&str, uuid::Uuid)>,
    stream: &[u8],
    ending: Ending,
) -> Result<copier_interface::Sealed, Error> {
    seal_to(bus, USB, name, uuid, parent, stream, ending)
}

/// As [`seal`], to the sealed target `target`.
pub fn seal_to(
    bus: &PrivateBus,
    target: &str,
    name: &str,
    uuid: uuid::Uuid,
    parent: Option<(&str, uuid::Uuid)>,
    stream: &[u8],
    ending: Ending,
) -> Result<copier_interface::Sealed, Error> {
    let target = target.to_owned();
    let (r, w) = pipe();
    let writer = write_frames(w, stream.to_vec(), uuid, parent.map(|p| p.1), ending);
    let (pname, puuid) = parent
        .map(|(n, u)| (n.to_owned(), u.to_string()))
        .unwrap_or_default();
    let name = name.to_owned();
    let answer = call(bus, keeper(), move |p| {
        Box::pin(async move {
            p.seal(&target, &name, &uuid.to_string(), &pname, &puuid, fd(r))
                .await
        })
    });
    writer.join().expect("the writer");
    answer
}

/// Unseal `name` through a pipe read by the test: the stream's bytes and the trailer.
pub fn unseal(
    bus: &PrivateBus,
    name: &str,
) -> (Result<copier_interface::Unsealed, Error>, Received) {
    let (r, w) = pipe();
    let reader = read_frames(r);
    let name = name.to_owned();
    let answer = call(bus, keeper(), move |p| {
        Box::pin(async move { p.unseal(USB, &name, fd(w)).await })
    });
    (answer, reader.join().expect("the reader"))
}

/// A send stream of about `bytes` bytes zstd cannot shrink.
pub fn incompressible(bytes: usize) -> Vec<u8> {
    testbed::send_stream::incompressible(bytes, 0x9e37_79b9_7f4a_7c15)
}

/// Two real Btrfs send streams: a full one of a tree and an incremental one on it.
#[derive(Debug)]
pub struct Streams {
    pub fs: testbed::LoopFs,
    pub full_uuid: uuid::Uuid,
    pub full: Vec<u8>,
    pub incr_uuid: uuid::Uuid,
    pub incr: Vec<u8>,
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.stderr(Stdio::piped()).output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub fn uuid_of(path: &Path) -> uuid::Uuid {
    let out = String::from_utf8(run(Command::new("btrfs")
        .args(["subvolume", "show"])
        .arg(path)))
    .expect("utf-8");
    out.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("UUID:"))
        .expect("a UUID line")
        .trim()
        .parse()
        .expect("a UUID")
}

/// A tree of `files` files in `@home`, snapshotted as FULL, `changes` of them changed,
/// snapshotted as INCR; both sent. None when no loop Btrfs can be made (said loudly).
pub fn streams(files: usize, changes: usize) -> Option<Streams> {
    let fs = testbed::LoopFs::new(256 << 20).expect("a loop Btrfs")?;
    let top = fs.top().to_owned();
    let sub = top.join("@home");
    run(Command::new("btrfs")
        .args(["subvolume", "create"])
        .arg(&sub));
    for i in 0..files {
        let dir = sub.join(format!("d{}", i % 10));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut bytes = format!("file {i}\n").repeat(40).into_bytes();
        bytes.extend((0..2000u32).map(|j| (j.wrapping_mul(2654435761) >> 13) as u8 ^ i as u8));
        std::fs::write(dir.join(format!("f{i}")), bytes).expect("write");
    }
    let s1 = top.join(FULL);
    run(Command::new("btrfs")
        .args(["subvolume", "snapshot", "-r"])
        .arg(&sub)
        .arg(&s1));
    for i in 0..changes {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(sub.join(format!("d{}/f{i}", i % 10)))
            .expect("open");
        writeln!(f, "changed {i}").expect("append");
    }
    std::fs::write(sub.join("new-file"), b"made after the full copy").expect("write");
    let s2 = top.join(INCR);
    run(Command::new("btrfs")
        .args(["subvolume", "snapshot", "-r"])
        .arg(&sub)
        .arg(&s2));
    let full = run(Command::new("btrfs").args(["-q", "send"]).arg(&s1));
    let incr = run(Command::new("btrfs")
        .args(["-q", "send", "-p"])
        .arg(&s1)
        .arg(&s2));
    Some(Streams {
        full_uuid: uuid_of(&s1),
        incr_uuid: uuid_of(&s2),
        fs,
        full,
        incr,
    })
}

/// `btrfs receive` the concatenated `streams` into `dir` on `fs` (a new directory), and
/// compare the received INCR with the original one file by file (`diff -r`).
pub fn receive_and_compare(fs: &testbed::LoopFs, bytes: &[u8], name: &str) {
    let into = fs.top().join("received");
    std::fs::create_dir_all(&into).expect("mkdir received");
    let mut child = Command::new("btrfs")
        .args(["receive", "-q"])
        .arg(&into)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("btrfs receive");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(bytes)
        .expect("feed btrfs receive");
    let out = child.wait_with_output().expect("wait btrfs receive");
    assert!(
        out.status.success(),
        "btrfs receive: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let diff = Command::new("diff")
        .arg("-r")
        .arg(fs.top().join(name))
        .arg(into.join(name))
        .output()
        .expect("diff");
    assert!(
        diff.status.success(),
        "the received {name} differs from the original:\n{}",
        String::from_utf8_lossy(&diff.stdout)
    );
}
