//! The bus tier's world: a loop-device Btrfs with the tacid layout, a private dbus-daemon
//! with the shipped policies, the stem as root (its real binary), the keeper as its own
//! user (setpriv), and the CLI as an approver or a stranger. Real users, made here.
//!
//! Needs root, loop devices, dbus-daemon and setpriv; without them the tests say so loudly
//! and return, and under CI=true they fail instead.

#![allow(dead_code)]

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use keeper::journal::{Journal, RequestRow, SnapshotRow};
use layout::names;

pub mod copies;
pub mod hostile;
pub mod sealed;

pub const APPROVER: &str = "tacid-approver";
pub const STRANGER: &str = "tacid-stranger";
pub const APPROVER_GROUP: &str = layout::defaults::APPROVER_GROUP;

pub fn skip(why: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("bus tier cannot run under CI=true: {why}");
    }
    eprintln!("\n!!!!!!!!!!\n!!! SKIPPED bus tier: {why}\n!!!!!!!!!!\n");
    true
}

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} {args:?}: {e}"))
}

pub fn ok(cmd: &str, args: &[&str]) {
    let out = run(cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Users and groups the story needs: the keeper's user, an approver in wheel, a stranger.
fn ensure_users() {
    static USERS: Once = Once::new();
    // Made once under the lock every test process takes, never removed (testbed::users).
    USERS.call_once(|| {
        use testbed::users::{ensure_group, ensure_member, ensure_system_user, ensure_user};
        ensure_group(APPROVER_GROUP, &["--system"]);
        ensure_system_user(names::KEEPER_USER);
        ensure_user(APPROVER, &["--user-group", "--no-create-home"]);
        ensure_member(APPROVER, APPROVER_GROUP);
        ensure_user(STRANGER, &["--user-group", "--no-create-home"]);
    });
}

pub fn uid_of(user: &str) -> u32 {
    let out = run("id", &["-u", user]);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a uid")
}

/// The workspace's binaries, next to this crate's (built first if missing).
pub fn bin(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_tacid-keeper"))
        .parent()
        .expect("target dir")
        .to_owned();
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace's binaries first: `cargo build -p stem -p tacid-cli -p initrd --bins`",
        path.display()
    );
    path
}

fn bus_config(dir: &Path, socket: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace");
    let keeper = root.join("keeper/dbus/org.tacid.Keeper1.conf");
    let stem = root.join("stem/dbus/org.tacid.Stem1.conf");
    // The copier's policy, where its crate is built: it lets only the keeper's user call it.
    let copier = root.join("copier/dbus/org.tacid.Copier1.conf");
    let copier = if copier.exists() {
        format!("<include>{}</include>", copier.display())
    } else {
        String::new()
    };
    assert!(
        stem.exists(),
        "{} is missing: the stem's bus policy is part of this tier",
        stem.display()
    );
    // The defaults of a system bus (as Debian's /usr/share/dbus-1/system.conf): nobody owns
    // a name and no method call is delivered unless a policy file says so.
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <pidfile>{dir}/bus.pid</pidfile>
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
  <include>{keeper}</include>
  <include>{stem}</include>
  {copier}
  <includedir>{dir}/bus.d</includedir>
</busconfig>
"#,
        socket = socket.display(),
        dir = dir.display(),
        keeper = keeper.display(),
        stem = stem.display(),
    )
}

/// One private world per test.
pub struct World {
    pub fs: testbed::LoopFs,
    pub dir: PathBuf,
    pub address: String,
    pub state: PathBuf,
    pub journal: PathBuf,
    bus: Child,
    stem: Option<Child>,
    /// The stem's receiver (`tacid-stem-receive`), started beside it.
    receiver: Option<testbed::receive::Receiver>,
    keeper: Option<Child>,
    keeper_starts: u32,
    /// Extra flags for the next start of the stem, and of the keeper.
    pub stem_args: Vec<String>,
    pub keeper_args: Vec<String>,
    /// Extra environment for the next start of the keeper (a test-hooks build's injected
    /// facts, e.g. `TACID_TEST_CLOCK_FILE`).
    pub keeper_env: Vec<(String, String)>,
}

/// Keeper flags for the large prune setups: timeline retention keeps only the newest
/// hourly snapshot, and no free-space floor.
pub const KEEP_ONLY_THE_NEWEST_HOURLY: &[&str] = &[
    "--keep-hourly",
    "1",
    "--keep-daily",
    "0",
    "--keep-weekly",
    "0",
    "--keep-monthly",
    "0",
    "--free-floor-bytes",
    "0",
];

impl World {
    /// `None` when this machine cannot run the tier (already reported loudly).
    pub fn start() -> Option<World> {
        World::start_on(512 << 20)
    }

    /// [`World::start`] on a loop Btrfs of `size_bytes` (the bench's 10 000 snapshots).
    pub fn start_on(size_bytes: u64) -> Option<World> {
        if !rustix::process::geteuid().is_root() {
            skip("not root");
            return None;
        }
        for tool in ["/usr/bin/dbus-daemon", "/usr/bin/setpriv"] {
            if !Path::new(tool).exists() {
                skip(&format!(
                    "{tool} is missing (apt-get install dbus util-linux)"
                ));
                return None;
            }
        }
        ensure_users();
        let fs = testbed::LoopFs::with_layout(size_bytes).expect("loop Btrfs")?;
        // A directory the unprivileged processes can reach (the loop fs's is root-only).
        let dir = PathBuf::from(format!(
            "/tmp/tacid-bus-{}-{}",
            std::process::id(),
            next_id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("dir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        let socket = dir.join("bus.sock");
        let config = dir.join("bus.conf");
        // Policies a test adds (`World::add_bus_policy`), read after the shipped ones.
        fs::create_dir_all(dir.join("bus.d")).expect("bus.d");
        fs::write(&config, bus_config(&dir, &socket)).expect("bus config");
        let mut bus = Command::new("/usr/bin/dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--nopidfile", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("dbus-daemon starts");
        let mut line = String::new();
        BufReader::new(bus.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("address");
        let address = line.trim().to_owned();
        assert!(
            address.starts_with("unix:"),
            "dbus-daemon printed {address:?}"
        );

        // The keeper's own directory on @snapshots, bound where the keeper can reach it,
        // as the unit's BindPaths does.
        let keeper_dir = fs
            .top()
            .join(layout::SNAPSHOTS_SUBVOLUME)
            .join(layout::KEEPER_DIR_NAME);
        fs::create_dir_all(&keeper_dir).expect("keeper dir");
        ok(
            "chown",
            &[
                &format!("{0}:{0}", names::KEEPER_USER),
                keeper_dir.to_str().expect("utf-8"),
            ],
        );
        fs::set_permissions(&keeper_dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        let state = dir.join("state");
        fs::create_dir_all(&state).expect("state");
        ok(
            "mount",
            &[
                "--bind",
                keeper_dir.to_str().expect("utf-8"),
                state.to_str().expect("utf-8"),
            ],
        );
        let journal = state.join(layout::JOURNAL_FILE_NAME);
        let mut w = World {
            fs,
            dir,
            address,
            state,
            journal,
            bus,
            stem: None,
            receiver: None,
            keeper: None,
            keeper_starts: 0,
            // The loop filesystem is smaller than the default floors (the stem's hard floor,
            // below which snapshots are refused, and the keeper's free-space floor, below
            // which every snapshot prunes first); tests that want a floor set it.
            stem_args: vec!["--hard-floor-bytes".into(), "0".into()],
            keeper_args: vec!["--free-floor-bytes".into(), "0".into()],
            keeper_env: Vec::new(),
        };
        w.start_stem();
        w.start_keeper(None);
        Some(w)
    }

    pub fn top(&self) -> &Path {
        self.fs.top()
    }

    /// Add `policy` (the inside of a `<busconfig>`) to the bus's configuration, and make
    /// the bus read it again before this returns.
    pub fn add_bus_policy(&self, file: &str, policy: &str) {
        fs::write(
            self.dir.join("bus.d").join(file),
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>{policy}</busconfig>
"#
            ),
        )
        .expect("policy");
        ok(
            "/usr/bin/dbus-send",
            &[
                &format!("--bus={}", self.address),
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.ReloadConfig",
            ],
        );
    }

    pub fn has_owner(&self, name: &str) -> bool {
        let out = Command::new("/usr/bin/dbus-send")
            .args([
                &format!("--bus={}", self.address),
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.NameHasOwner",
                &format!("string:{name}"),
            ])
            .output()
            .expect("dbus-send");
        String::from_utf8_lossy(&out.stdout).contains("boolean true")
    }

    pub fn wait_owner(&self, name: &str, owned: bool, log: &Path) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.has_owner(name) != owned {
            assert!(
                Instant::now() < deadline,
                "{name} {} within 20 s; log:\n{}",
                if owned {
                    "never appeared"
                } else {
                    "never went away"
                },
                fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stem_log(&self) -> PathBuf {
        self.dir.join("stem.log")
    }

    pub fn keeper_log(&self) -> PathBuf {
        self.dir.join("keeper.log")
    }

    fn log_file(&self, path: &Path) -> fs::File {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("log")
    }

    pub fn start_stem(&mut self) {
        let log = self.log_file(&self.stem_log());
        let mut args = vec!["--top".to_owned(), self.top().display().to_string()];
        args.extend(self.stem_args.iter().cloned());
        let receiver = testbed::receive::beside_stem(&bin("tacid-stem-receive"), &args)
            .expect("start the stem's receiver");
        let child = Command::new(bin("tacid-stem"))
            .arg("--top")
            .arg(self.top())
            .arg("--receiver-socket")
            .arg(receiver.socket())
            .args(["--bus", &self.address, "--keeper-user", names::KEEPER_USER])
            .args(&self.stem_args)
            .env("RUST_LOG", "debug")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("tacid-stem starts");
        self.stem = Some(child);
        self.receiver = Some(receiver);
        self.wait_owner(names::STEM_BUS_NAME, true, &self.stem_log());
    }

    /// Freeze the stem (SIGSTOP): calls reach it and wait.
    pub fn freeze_stem(&self) {
        let pid = self
            .stem
            .as_ref()
            .map(rustix::process::Pid::from_child)
            .expect("stem running");
        rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("SIGSTOP");
    }

    pub fn kill_stem(&mut self) {
        if let Some(mut c) = self.stem.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.wait_owner(names::STEM_BUS_NAME, false, &self.stem_log());
    }

    /// Start the keeper as its own user; with `pause_at`, a test-hooks build stops there.
    pub fn start_keeper(&mut self, pause_at: Option<&str>) {
        self.keeper_starts += 1;
        let log = self.log_file(&self.keeper_log());
        let mut cmd = Command::new("/usr/bin/setpriv");
        cmd.args([
            &format!("--reuid={}", names::KEEPER_USER),
            &format!("--regid={}", names::KEEPER_USER),
            "--init-groups",
        ])
        .arg(env!("CARGO_BIN_EXE_tacid-keeper"))
        .arg("--journal")
        .arg(&self.journal)
        .args(["--bus", &self.address, "--approver-group", APPROVER_GROUP])
        .args(&self.keeper_args)
        .env("TACID_LOG", "debug")
        .env_remove("TACID_KEEPER_PAUSE_AT")
        .envs(self.keeper_env.iter().map(|(k, v)| (k, v)))
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
        if let Some(p) = pause_at {
            cmd.env("TACID_KEEPER_PAUSE_AT", p);
        }
        self.keeper = Some(cmd.spawn().expect("tacid-keeper starts"));
        self.wait_owner(names::KEEPER_BUS_NAME, true, &self.keeper_log());
    }

    /// The daemons' process ids (for their memory use).
    pub fn keeper_pid(&self) -> Option<u32> {
        self.keeper.as_ref().map(Child::id)
    }

    pub fn stem_pid(&self) -> Option<u32> {
        self.stem.as_ref().map(Child::id)
    }

    /// The CLI as root (no setpriv in between), for timing.
    pub fn tacid_as_root(&self, args: &[&str]) -> Output {
        Command::new(bin("tacid"))
            .args(args)
            .env("TACID_BUS_ADDRESS", &self.address)
            .output()
            .expect("tacid runs")
    }

    /// SIGKILL the keeper (setpriv execs it, so the child is the keeper itself).
    pub fn kill_keeper(&mut self) {
        if let Some(mut c) = self.keeper.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.wait_owner(names::KEEPER_BUS_NAME, false, &self.keeper_log());
    }

    /// SIGKILL the keeper and start it again, `rounds` times, each after a pause of
    /// `base_ms` plus a part of `spread_ms` taken from the clock (no two runs alike; `step`
    /// moves each round's part on).
    pub fn kill_keeper_at_random_moments(
        &mut self,
        rounds: u64,
        base_ms: u64,
        spread_ms: u64,
        step: u64,
    ) {
        for round in 0..rounds {
            let nanos = u64::from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .subsec_nanos(),
            );
            std::thread::sleep(std::time::Duration::from_millis(
                base_ms + (nanos + round * step) % spread_ms,
            ));
            self.kill_keeper();
            self.start_keeper(None);
        }
    }

    /// Stop the keeper and give its next start these flags.
    pub fn stop_keeper_and_set_args(&mut self, args: &[&str]) {
        self.stop_keeper();
        self.keeper_args = args.iter().map(|s| s.to_string()).collect();
    }

    /// Stop the keeper the way systemd does (SIGTERM), and wait for it.
    pub fn stop_keeper(&mut self) {
        if let Some(mut c) = self.keeper.take() {
            let pid = rustix::process::Pid::from_child(&c);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let _ = c.wait();
        }
        self.wait_owner(names::KEEPER_BUS_NAME, false, &self.keeper_log());
    }

    /// Wait until the keeper's log says `text` (e.g. a test pause).
    pub fn wait_keeper_log(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = fs::read_to_string(self.keeper_log()).unwrap_or_default();
            if log.contains(text) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "keeper never logged {text:?}; log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The CLI as `user`, started (for concurrency).
    pub fn spawn_tacid(&self, user: &str, args: &[&str]) -> Child {
        Command::new("/usr/bin/setpriv")
            .args([
                &format!("--reuid={user}"),
                &format!("--regid={user}"),
                "--init-groups",
            ])
            .arg(bin("tacid"))
            .args(args)
            .env("TACID_BUS_ADDRESS", &self.address)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tacid starts")
    }

    /// The approver's snapshot of /home, through the CLI; its name.
    pub fn snapshot_home(&self) -> String {
        let (code, out, err) = self.tacid(
            APPROVER,
            &[
                "data",
                "snapshot",
                "/home",
                "--reason",
                "before the test",
                "--json",
            ],
        );
        assert_eq!(code, 0, "snapshot failed: {err}");
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
        v["snapshots"][0]["name"]
            .as_str()
            .expect("a name")
            .to_owned()
    }

    /// The CLI as `user`: (exit code, stdout, stderr).
    pub fn tacid(&self, user: &str, args: &[&str]) -> (i32, String, String) {
        let out = self
            .spawn_tacid(user, args)
            .wait_with_output()
            .expect("tacid runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `tacid ARGS` run `times` times in a row by `user`, from one shell of theirs (a
    /// flood, as a person could make it); what each call answered is not looked at.
    pub fn tacid_again_and_again(&self, user: &str, times: usize, args: &[&str]) {
        let script =
            format!("for i in $(seq {times}); do \"$0\" \"$@\" >/dev/null 2>&1; done; exit 0");
        let status = Command::new("/usr/bin/setpriv")
            .args([
                &format!("--reuid={user}"),
                &format!("--regid={user}"),
                "--init-groups",
                "/bin/sh",
                "-c",
                &script,
            ])
            .arg(bin("tacid"))
            .args(args)
            .env("TACID_BUS_ADDRESS", &self.address)
            .status()
            .expect("the flood runs");
        assert!(status.success());
    }

    /// The journal's rows, read directly (as root; ownership given back to the keeper).
    /// A running keeper holds the journal exclusively (adr/0013), so this reads a copy of
    /// the database and its WAL, taken while the keeper is between requests.
    pub fn journal_rows(&self) -> (Vec<RequestRow>, Vec<SnapshotRow>) {
        let (_copy, copied) = self.copy_journal();
        let j = Journal::open(&copied).expect("journal opens");
        let rows = (
            j.requests().expect("requests"),
            j.snapshots().expect("snapshots"),
        );
        drop(j);
        self.give_journal_back();
        rows
    }

    /// A copy of the journal and its WAL, in a directory of its own (kept while the returned
    /// handle lives): the path of the copied database. Opening it as root may make files in
    /// the keeper's directory; [`Self::give_journal_back`] after.
    pub fn copy_journal(&self) -> (tempfile::TempDir, PathBuf) {
        let copy = tempfile::tempdir().expect("a directory for the copy");
        let copied = copy.path().join("journal.sqlite");
        fs::copy(&self.journal, &copied).expect("copy the journal");
        let wal = PathBuf::from(format!("{}-wal", self.journal.display()));
        if wal.exists() {
            fs::copy(&wal, copy.path().join("journal.sqlite-wal")).expect("copy its WAL");
        }
        (copy, copied)
    }

    /// Files root made in the keeper's directory (a journal opened as root makes its WAL)
    /// go back to the keeper's user.
    pub fn give_journal_back(&self) {
        for entry in fs::read_dir(&self.state).expect("state dir").flatten() {
            ok(
                "chown",
                &[
                    &format!("{0}:{0}", names::KEEPER_USER),
                    entry.path().to_str().expect("utf-8"),
                ],
            );
        }
    }

    /// Names of the snapshots on disk (the btrfs CLI as oracle), and any temporary names.
    pub fn disk_snapshots(&self) -> (Vec<String>, Vec<String>) {
        let prefix = format!("{}/", layout::SNAPSHOTS_SUBVOLUME);
        let mut snaps = Vec::new();
        let mut temps = Vec::new();
        for (path, _, _) in self.fs.subvolumes_snapshot().expect("btrfs subvolume list") {
            if let Some(name) = path.strip_prefix(&prefix) {
                if name.starts_with(layout::TEMP_PREFIX) {
                    temps.push(name.to_owned());
                } else {
                    snaps.push(name.to_owned());
                }
            }
        }
        (snaps, temps)
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

impl Drop for World {
    fn drop(&mut self) {
        for c in [self.keeper.take(), self.stem.take()].into_iter().flatten() {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.bus.kill();
        let _ = self.bus.wait();
        // Lazily when something still holds it: a bind mount left behind would hold the
        // loop device and its deleted image for as long as the machine runs.
        let unmounted = Command::new("umount")
            .arg(&self.state)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.state).status();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The keeper's own proxy (`keeper::wire::Keeper1Proxy`), called from the test process as
/// root: for calls the CLI never makes (confirming words it was not shown).
pub struct RootKeeper {
    runtime: tokio::runtime::Runtime,
    pub proxy: keeper::wire::Keeper1Proxy<'static>,
}

impl RootKeeper {
    /// Wait for a call on the proxy.
    pub fn run<F: std::future::Future>(&self, call: F) -> F::Output {
        self.runtime.block_on(call)
    }
}

impl World {
    /// A connection to the private bus as root, and the keeper's proxy on it.
    pub fn keeper_as_root(&self) -> RootKeeper {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let proxy = runtime.block_on(async {
            let conn = zbus::connection::Builder::address(self.address.as_str())
                .build()
                .await
                .expect("root connects to the private bus");
            keeper::wire::Keeper1Proxy::builder(&conn)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
                .expect("the keeper's proxy")
        });
        RootKeeper { runtime, proxy }
    }

    /// Call a method of `org.tacid.Keeper1` as `user` with `dbus-send` (string arguments
    /// only), as a program other than the CLI would: (succeeded, stdout, stderr).
    pub fn call_keeper_as(
        &self,
        user: &str,
        method: &str,
        args: &[&str],
    ) -> (bool, String, String) {
        self.dbus_send_as(
            user,
            names::KEEPER_BUS_NAME,
            names::KEEPER_OBJECT_PATH,
            method,
            args,
        )
    }

    /// Call `method` of the daemon owning `destination` (whose interface has the same name)
    /// as `user` with `dbus-send`, string arguments only: (succeeded, stdout, stderr).
    pub fn dbus_send_as(
        &self,
        user: &str,
        destination: &str,
        path: &str,
        method: &str,
        args: &[&str],
    ) -> (bool, String, String) {
        let out = Command::new("/usr/bin/setpriv")
            .args([
                &format!("--reuid={user}"),
                &format!("--regid={user}"),
                "--init-groups",
            ])
            .args([
                "/usr/bin/dbus-send",
                &format!("--bus={}", self.address),
                "--print-reply",
            ])
            .arg(format!("--dest={destination}"))
            .arg(path)
            .arg(format!("{destination}.{method}"))
            .args(args.iter().map(|a| format!("string:{a}")))
            .output()
            .expect("dbus-send runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Make the restore previews `uid` was shown for `snapshot` `age` old, as if shown that
    /// long ago. The keeper must be stopped: a running keeper holds the journal exclusively.
    /// How many rows changed.
    pub fn age_previews(&self, uid: u32, snapshot: &str, age: Duration) -> usize {
        assert!(
            self.keeper.is_none(),
            "stop the keeper before writing to its journal"
        );
        let asked = layout::human::unix_micros(std::time::SystemTime::now() - age);
        let conn = rusqlite::Connection::open(&self.journal).expect("journal opens");
        let changed = conn
            .execute(
                "UPDATE requests SET asked_micros = ?1
                 WHERE action = ?2 AND uid = ?3 AND subject = ?4",
                rusqlite::params![
                    asked,
                    keeper::journal::Action::RestorePreview,
                    i64::from(uid),
                    snapshot
                ],
            )
            .expect("the previews are aged");
        drop(conn);
        self.give_journal_back();
        changed
    }

    /// Wait until the keeper's log says `text` at least `times` times (one per start, say).
    pub fn wait_keeper_log_times(&self, text: &str, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = fs::read_to_string(self.keeper_log()).unwrap_or_default();
            if log.matches(text).count() >= times {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "keeper logged {text:?} fewer than {times} times; log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many times the keeper has been started in this world.
    pub fn keeper_starts(&self) -> u32 {
        self.keeper_starts
    }
}

impl World {
    /// Journal `taken` as the keeper journals timeline sets, one member each, asked by root:
    /// a large setup in seconds rather than minutes of requests. The keeper must be stopped
    /// (it holds the journal exclusively); the journal's files are given back to its user.
    pub fn journal_timeline_sets(&self, taken: &[stem::Snapshot]) {
        use keeper::journal::{Asker, Member};
        assert!(
            self.keeper.is_none(),
            "stop the keeper before writing to its journal"
        );
        {
            let mut j = Journal::open(&self.journal).expect("journal");
            let root = Asker {
                uid: 0,
                name: "root".into(),
            };
            for s in taken {
                let of = s.name.subvolume();
                let id = j
                    .set_request(&root, &[of])
                    .reason("timeline")
                    .begin()
                    .expect("set");
                let m = Member {
                    name: s.name.to_string(),
                    uuid: s.uuid.hyphenated().to_string(),
                    of_subvolume: of.to_string(),
                    taken_micros: s.name.taken_unix_micros(),
                };
                j.complete_set(id, &[m], "complete").expect("complete");
                j.mark_timeline(id).expect("timeline");
            }
        }
        self.give_journal_back();
    }

    /// What a boot does with a staged request: the real `tacid-initrd restore-data --top`,
    /// which must succeed. The keeper should be stopped first, as at a reboot.
    pub fn run_initrd_restore(&self) {
        let ran = Command::new(bin("tacid-initrd"))
            .args(["restore-data", "--top"])
            .arg(self.top())
            // The loop filesystem is smaller than the shipped hard floor, below which the boot
            // deletes what a restore replaces instead of keeping it (adr/0027).
            .arg("--hard-floor-bytes=0")
            .output()
            .expect("tacid-initrd runs");
        assert!(
            ran.status.success(),
            "tacid-initrd: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
    }

    /// A restore of `target` (a snapshot's name or a set's id) confirmed by an approver while
    /// the keeper is started paused at `point` (a `test-hooks` build), and the keeper killed
    /// there; it starts again and is asked for the status: the journal's last restore row.
    pub fn kill_keeper_mid_restore(&mut self, point: &str, target: &str) -> RequestRow {
        self.kill_keeper();
        self.start_keeper(Some(point));
        assert_eq!(self.tacid(APPROVER, &["data", "restore", target]).0, 3);
        let cli = self.spawn_tacid(APPROVER, &["data", "restore", target, "--yes"]);
        self.wait_keeper_log(&format!("paused at {point}"));
        self.kill_keeper();
        let _ = cli.wait_with_output();
        self.start_keeper(None);
        assert_eq!(self.tacid(APPROVER, &["data", "status"]).0, 0);
        let (requests, _) = self.journal_rows();
        requests
            .into_iter()
            .rfind(|r| r.action == keeper::journal::Action::Restore)
            .expect("the killed restore")
    }

    /// The staged request's text, read from the store as the initrd will read it.
    pub fn request_file(&self) -> Option<String> {
        fs::read_to_string(
            self.top()
                .join(layout::SNAPSHOTS_SUBVOLUME)
                .join(layout::REQUEST_FILE_NAME),
        )
        .ok()
    }
}

/// Mount points beneath `dir` in the test's mount namespace (the stem's host namespace).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(PathBuf::from))
        .filter(|p| p.starts_with(dir) && p != dir)
        .collect()
}

/// The CLI's `--json` output, parsed; a test fails saying what was not JSON.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A set's members as the snapshot's JSON names them: (persist, log, home).
pub struct Set {
    pub id: String,
    pub persist: String,
    pub log: String,
    pub home: String,
}

impl Set {
    pub fn names(&self) -> [&str; 3] {
        [&self.persist, &self.log, &self.home]
    }
}

/// Files before the set, the set (before a switch, as the NixOS module takes it), and
/// changes after it: /persist one file added, /var/log two, /home one edited.
pub fn a_set_and_changes_since(w: &World) -> Set {
    let write = |sub: &str, name: &str, bytes: usize| {
        std::fs::write(w.top().join(sub).join(name), vec![b'x'; bytes]).expect("write")
    };
    write("@persist", "kept", 10);
    write("@home", "edited", 10);
    let (code, out, err) = w.tacid(
        APPROVER,
        &[
            "data",
            "snapshot",
            "--pre-switch",
            "--reason",
            "before switching to generation 42",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let member = |of: &str| {
        v["snapshots"]
            .as_array()
            .expect("members")
            .iter()
            .find(|s| s["of"] == of)
            .and_then(|s| s["name"].as_str())
            .unwrap_or_else(|| panic!("no member of {of}: {v}"))
            .to_owned()
    };
    let set = Set {
        id: v["set_id"].as_i64().expect("a set id").to_string(),
        persist: member("@persist"),
        log: member("@log"),
        home: member("@home"),
    };
    write("@persist", "p-new", 4096);
    write("@log", "l-new1", 4096);
    write("@log", "l-new2", 4096);
    write("@home", "edited", 8192);
    set
}

/// `promtool check metrics` (Debian's prometheus package) on `text`: it must accept it,
/// lint included. Missing promtool is a loud skip, and a failure under CI=true.
pub fn check_with_promtool(text: &str) {
    use std::io::Write as _;
    let promtool = "/usr/bin/promtool";
    if !std::path::Path::new(promtool).exists() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("promtool is missing under CI=true (apt-get install prometheus)");
        }
        eprintln!("\n!!!!!!!!!!\n!!! SKIPPED promtool check: {promtool} is missing (apt-get install prometheus)\n!!!!!!!!!!\n");
        return;
    }
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the metrics");
    let out = child.wait_with_output().expect("promtool ends");
    assert!(
        out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
        "promtool check metrics refused (exit {:?}):\n{}{}\n{text}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
