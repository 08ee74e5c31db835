//! A private system-like D-Bus for tests, real users, and the stem daemon on it.
//!
//! Reusable: copy this folder (or `#[path]`-include it) into another crate's tests. Nothing
//! here is a mock: a real `dbus-daemon` with a system-bus-like default policy plus the
//! shipped `org.tacid.Stem1.conf`, real system users made with `useradd`, the real
//! `tacid-stem` binary as root, and clients that are other processes or threads whose
//! credentials the kernel reports to the bus.
//!
//! Everything needs root. When it cannot run, [`require_root_and_tools`] prints a loud
//! SKIPPED line and returns false; with CI=true it panics instead.
#![allow(dead_code)] // each test file uses a different part

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The system-bus default policy (as Debian's system.conf), then the given includes and
/// extra policy text. Users may connect; method calls are denied unless a policy allows.
const SYSTEM_LIKE_CONFIG: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
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
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus" send_member="UpdateActivationEnvironment"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Debug.Stats"/>
  </policy>
@INCLUDES@
@EXTRA@
</busconfig>
"#;

fn skip_or_fail(what: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true but this bus test cannot run: {what}");
    }
    eprintln!("\n*** SKIPPED: {what}; this bus test did not run ***\n");
    false
}

/// Root, `dbus-daemon`, `useradd`: what every bus test needs.
pub fn require_root_and_tools() -> bool {
    if !rustix::process::geteuid().is_root() {
        return skip_or_fail(
            "needs root (the stem runs as root; test users are made with useradd)",
        );
    }
    for tool in ["dbus-daemon", "dbus-send", "useradd", "setpriv"] {
        if !testbed::installed(tool) {
            return skip_or_fail(&format!(
                "{tool} is not installed (apt-get install dbus passwd)"
            ));
        }
    }
    true
}

/// A system user's uid and gid, made with `useradd --system` when missing, under the lock
/// every test process takes, and never removed (`testbed::users`).
pub fn ensure_user(name: &str) -> (u32, u32) {
    testbed::users::ensure_system_user(name)
}

/// A private `dbus-daemon` with a system-like policy; killed on drop.
#[derive(Debug)]
pub struct PrivateBus {
    dir: tempfile::TempDir,
    daemon: Child,
    address: String,
}

impl PrivateBus {
    /// Start a bus whose configuration includes each of `includes` (policy files, e.g. the
    /// shipped `stem/dbus/org.tacid.Stem1.conf`) and then `extra` (more policy XML).
    pub fn start(includes: &[&Path], extra: &str) -> PrivateBus {
        let dir = tempfile::Builder::new()
            .prefix("tacid-bus-")
            .tempdir()
            .expect("a temporary directory");
        // Other users must reach the socket, as they reach /run/dbus on a real system.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod bus dir");
        let socket = dir.path().join("system_bus_socket");
        let includes: String = includes
            .iter()
            .map(|p| {
                let p = p
                    .canonicalize()
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                format!("  <include>{}</include>\n", p.display())
            })
            .collect();
        let config = SYSTEM_LIKE_CONFIG
            .replace("@SOCKET@", &socket.display().to_string())
            .replace("@INCLUDES@", &includes)
            .replace("@EXTRA@", extra);
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
        assert!(
            address.starts_with("unix:"),
            "dbus-daemon printed no address (config error?): {line:?}"
        );
        PrivateBus {
            dir,
            daemon,
            address,
        }
    }

    /// The bus's address, for `--bus` and for clients.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether some connection owns `name` (asked as root, of the bus itself).
    pub fn has_owner(&self, name: &str) -> bool {
        let out = Command::new("dbus-send")
            .arg(format!("--bus={}", self.address))
            .args([
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
            ])
            .arg("org.freedesktop.DBus.NameHasOwner")
            .arg(format!("string:{name}"))
            .output()
            .expect("run dbus-send");
        String::from_utf8_lossy(&out.stdout).contains("boolean true")
    }

    /// Wait up to `timeout` for `name` to be owned.
    pub fn wait_for_owner(&self, name: &str, timeout: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.has_owner(name) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// Wait (up to 20 s) until the just-started `tacid-stem` owns its bus name, and hand it
/// back. Panics when it exits first (its log is on stderr) or never does (it is killed).
pub fn wait_for_stem_name(bus: &PrivateBus, mut child: Child) -> Child {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if let Some(status) = child.try_wait().expect("poll tacid-stem") {
            panic!("tacid-stem exited before owning its name: {status} (its log is above)");
        }
        if bus.has_owner(layout::names::STEM_BUS_NAME) {
            return child;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!(
        "tacid-stem did not own {} within 20 s",
        layout::names::STEM_BUS_NAME
    );
}

/// The `tacid-stem` daemon as root on a bus; SIGTERM then SIGKILL on drop.
#[derive(Debug)]
pub struct StemDaemon {
    child: Child,
    /// Its receiver (`tacid-stem-receive`), as the system runs it beside the stem.
    _receiver: testbed::receive::Receiver,
}

impl StemDaemon {
    /// Start `tacid-stem --bus ADDRESS --keeper-user USER` plus `args`, and wait until it
    /// owns its name. Panics with its stderr when it exits instead.
    pub fn start(bus: &PrivateBus, keeper_user: &str, args: &[&str]) -> StemDaemon {
        Self::start_logging(bus, keeper_user, args, None)
    }

    /// As [`StemDaemon::start`], its log (stderr) written to `log` when given.
    pub fn start_logging(
        bus: &PrivateBus,
        keeper_user: &str,
        args: &[&str],
        log: Option<std::fs::File>,
    ) -> StemDaemon {
        let receiver = testbed::receive::beside_stem(
            Path::new(env!("CARGO_BIN_EXE_tacid-stem-receive")),
            args,
        )
        .expect("start the receiver");
        let child = Command::new(env!("CARGO_BIN_EXE_tacid-stem"))
            .args(["--bus", bus.address(), "--keeper-user", keeper_user])
            // The loop filesystems are smaller than the default hard floor.
            .args(["--hard-floor-bytes", "0"])
            .arg("--receiver-socket")
            .arg(receiver.socket())
            .args(args)
            .env("RUST_LOG", "info")
            .stderr(log.map_or_else(std::process::Stdio::inherit, std::process::Stdio::from))
            .spawn()
            .expect("start tacid-stem");
        StemDaemon {
            child: wait_for_stem_name(bus, child),
            _receiver: receiver,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory now (VmRSS), in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read /proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    /// SIGTERM, and the exit status (SIGKILL after 5 s).
    pub fn stop(mut self) -> std::process::ExitStatus {
        let pid =
            rustix::process::Pid::from_raw(self.child.id() as i32).expect("a child has a pid");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("poll tacid-stem") {
                return status;
            }
            if start.elapsed() > Duration::from_secs(5) {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for StemDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a `dbus-send` call ended: the reply's text, or the D-Bus error name and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Ok(String),
    Error { name: String, message: String },
}

impl Reply {
    pub fn error_name(&self) -> Option<&str> {
        match self {
            Reply::Error { name, .. } => Some(name),
            Reply::Ok(_) => None,
        }
    }
}

/// Call `interface.member` on the stem with `dbus-send`, as another process running as
/// `uid`/`gid` (a separate program, so the bus sees that user, not root).
pub fn dbus_send_as(bus: &PrivateBus, uid: u32, gid: u32, member: &str, args: &[&str]) -> Reply {
    // setpriv, not Command::uid: it also clears root's supplementary groups.
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg("dbus-send")
        .arg(format!("--bus={}", bus.address()))
        .args(["--print-reply", "--reply-timeout=10000"])
        .arg(format!("--dest={}", layout::names::STEM_BUS_NAME))
        .arg(layout::names::STEM_OBJECT_PATH)
        .arg(format!("{}.{member}", layout::names::STEM_BUS_NAME))
        .args(args)
        .output()
        .expect("run dbus-send");
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if out.status.success() {
        return Reply::Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    // dbus-send prints "Error org.example.Name: message".
    let (name, message) = stderr
        .strip_prefix("Error ")
        .and_then(|rest| rest.split_once(": "))
        .unwrap_or_else(|| panic!("dbus-send failed without a D-Bus error: {stderr}"));
    Reply::Error {
        name: name.to_owned(),
        message: message.to_owned(),
    }
}

/// Run `f` on a new thread whose credentials (real, effective; saved stays root) are
/// `uid`/`gid`, then join it. Linux keeps credentials per thread, and the bus learns the
/// caller from the socket's peer credentials, taken from the thread that connects: so a
/// connection made inside `f` is that user's, to the bus and to the stem.
pub fn as_user<T: Send + 'static>(uid: u32, gid: u32, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        use rustix::process::{Gid, Uid};
        let gid = Gid::from_raw(gid);
        rustix::thread::set_thread_groups(&[gid]).expect("set the thread's groups");
        rustix::thread::set_thread_res_gid(gid, gid, Gid::ROOT).expect("set the thread's gid");
        rustix::thread::set_thread_res_uid(Uid::from_raw(uid), Uid::from_raw(uid), Uid::ROOT)
            .expect("set the thread's uid");
        f()
    })
    .join()
    .expect("the user's thread panicked")
}

/// The stem's shipped bus policy.
pub fn shipped_policy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("dbus")
        .join(format!("{}.conf", layout::names::STEM_BUS_NAME))
}

/// `n` MiB of data that is not all one byte, so nothing could be skipped as a hole;
/// `seed` makes runs differ.
pub fn megabytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n << 20)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The receiver (`tacid-stem-receive`) for the store at `top`, as the tests run it
/// (testbed: `systemd-socket-activate`), with a runtime directory that is also the copy
/// engine's. Root's copies configuration for it is `copies_json`.
#[derive(Debug)]
pub struct Receiving {
    pub receiver: testbed::receive::Receiver,
    dir: tempfile::TempDir,
}

impl Receiving {
    pub fn start(top: &Path, copies_json: &str, btrfs: &Path, stall: Duration) -> Receiving {
        let dir = tempfile::tempdir().expect("a runtime directory");
        let config = dir.path().join("copies.json");
        std::fs::write(&config, copies_json).expect("write the copies configuration");
        let mut args = testbed::receive::ReceiverArgs::new(
            env!("CARGO_BIN_EXE_tacid-stem-receive"),
            top,
            &config,
        );
        args.btrfs = btrfs.to_owned();
        args.stall = stall;
        let receiver = testbed::receive::Receiver::start(&args).expect("start the receiver");
        Receiving { receiver, dir }
    }

    /// The copy engine's programs: this receiver, `ssh`, and `stall`.
    pub fn programs(&self, ssh: PathBuf, stall: Duration) -> stem::copies::Programs {
        stem::copies::Programs {
            receiver: self.receiver.socket(),
            ssh,
            runtime_dir: self.dir.path().to_owned(),
            stall,
        }
    }
}
