//! The stem's receiver (`tacid-stem-receive`) as systemd runs it, for every tier that runs a
//! stem: one instance per connection to its socket, started here by
//! `systemd-socket-activate --accept --inetd` (PID 1 is not systemd in tests), so every
//! `btrfs receive` in a test goes through the real split.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the receiver is started with; what its unit's command line sets in production.
#[derive(Debug, Clone)]
pub struct ReceiverArgs {
    /// The receiver's binary (`tacid-stem-receive`).
    pub binary: PathBuf,
    /// Where the store (`@snapshots`) is: `<top>/@snapshots` on a test's filesystem.
    pub snapshots: PathBuf,
    /// Root's copies configuration (a file; it need not exist: no targets).
    pub copies_config: PathBuf,
    /// `btrfs`, or a stand-in that misbehaves.
    pub btrfs: PathBuf,
    /// How long `btrfs receive` may go on after the stream ended.
    pub stall: Duration,
    /// As the unit's `ProtectSystem=strict` and `ReadWritePaths=`: these are made read-only,
    /// then `writable` (within them) writable again, in a mount namespace of the receiver's
    /// own. The binds this makes are what its unit's sandbox makes.
    pub read_only: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
}

impl ReceiverArgs {
    /// The defaults for a store at `top` (a test filesystem's top level).
    pub fn new(binary: impl Into<PathBuf>, top: &Path, copies_config: impl Into<PathBuf>) -> Self {
        let snapshots = top.join(layout::SNAPSHOTS_SUBVOLUME);
        let incoming = snapshots.join(layout::copies::INCOMING_DIR_NAME);
        let mut args = ReceiverArgs {
            binary: binary.into(),
            snapshots: snapshots.clone(),
            copies_config: copies_config.into(),
            btrfs: "btrfs".into(),
            stall: Duration::from_secs(600),
            read_only: vec![snapshots],
            writable: vec![incoming],
        };
        args.add_local_targets();
        args
    }

    /// Each local Btrfs target in the copies configuration, writable within its read-only
    /// parent, as the NixOS module's drop-in makes it (one that does not exist is left out,
    /// as `ReadWritePaths=-` leaves it).
    pub fn add_local_targets(&mut self) {
        let Ok(bytes) = std::fs::read(&self.copies_config) else {
            return;
        };
        let Ok(config) = layout::copies::CopiesConfig::parse(&bytes) else {
            return;
        };
        for t in config.targets.values() {
            if let (layout::copies::Place::Local(p), false) = (&t.place, t.is_sealed()) {
                let p = PathBuf::from(p);
                if let (true, Some(parent)) = (p.is_dir(), p.parent()) {
                    self.read_only.push(parent.to_owned());
                    self.writable.push(p);
                }
            }
        }
    }
}

/// `path` as one word for sh.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// The receiver a stem started with `stem_args` needs: the same store (`--top`'s
/// `@snapshots`) and the same copies configuration (`--copies-config`, or the default).
/// Every tier that starts a stem starts this beside it and hands the stem
/// `--receiver-socket` [`Receiver::socket`].
pub fn beside_stem<S: AsRef<str>>(binary: &Path, stem_args: &[S]) -> io::Result<Receiver> {
    let value = |flag: &str| {
        stem_args
            .windows(2)
            .find(|w| w[0].as_ref() == flag)
            .map(|w| PathBuf::from(w[1].as_ref()))
    };
    let top =
        value("--top").ok_or_else(|| io::Error::other("the stem's arguments name no --top"))?;
    let config = value("--copies-config").unwrap_or_else(|| layout::copies::CONFIG_PATH.into());
    Receiver::start(&ReceiverArgs::new(binary, &top, config))
}

/// A listening receiver; stopped (SIGTERM) on drop. Instances serving a connection then
/// end with it.
#[derive(Debug)]
pub struct Receiver {
    dir: tempfile::TempDir,
    child: Child,
}

/// `systemd-socket-activate`, which this machine's systemd ships.
pub const SOCKET_ACTIVATE: &str = "/usr/bin/systemd-socket-activate";

impl Receiver {
    /// Listen on a socket of its own (root's, 0600 as the unit's), and wait until it does.
    pub fn start(args: &ReceiverArgs) -> io::Result<Receiver> {
        let dir = tempfile::Builder::new()
            .prefix("tacid-receive-")
            .tempdir()?;
        let socket = dir.path().join("receive.sock");
        // Its chatter (and each instance's log) to a file: `Receiver::log`.
        let log = std::fs::File::create(dir.path().join("receive.log"))?;
        // Each connection's receiver gets a sandbox of its own, made when it starts, as
        // systemd makes each instance's: a path that does not exist then is left out, as
        // `ReadWritePaths=-` leaves it.
        let mut sandbox = String::from("set -e\n");
        for r in &args.read_only {
            let r = quoted(r);
            sandbox.push_str(&format!(
                "mount --bind {r} {r}\nmount -o remount,bind,ro {r}\n"
            ));
        }
        for w in &args.writable {
            let w = quoted(w);
            sandbox.push_str(&format!(
                "if [ -d {w} ]; then mount --bind {w} {w}; mount -o remount,bind,rw {w}; fi\n"
            ));
        }
        sandbox.push_str("exec \"$@\"\n");
        let child = Command::new(SOCKET_ACTIVATE)
            .arg("--accept")
            .arg("--inetd")
            .arg(format!("--listen={}", socket.display()))
            .args([
                "/usr/bin/unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                &sandbox,
                "sh",
            ])
            .arg(&args.binary)
            .arg("--snapshots")
            .arg(&args.snapshots)
            .arg("--copies-config")
            .arg(&args.copies_config)
            .arg("--btrfs")
            .arg(&args.btrfs)
            .arg("--stall-secs")
            .arg(args.stall.as_secs().max(1).to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| io::Error::other(format!("run {SOCKET_ACTIVATE}: {e}")))?;
        let mut r = Receiver { dir, child };
        let until = Instant::now() + Duration::from_secs(10);
        while !r.socket().exists() {
            if let Some(status) = r.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "{SOCKET_ACTIVATE} ended before listening: {status}"
                )));
            }
            if Instant::now() > until {
                return Err(io::Error::other(format!(
                    "{SOCKET_ACTIVATE} did not listen at {} within 10 s",
                    r.socket().display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(r.socket(), std::fs::Permissions::from_mode(0o600))?;
        Ok(r)
    }

    /// What it and its instances said.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("receive.log")).unwrap_or_default()
    }

    /// The socket the stem is pointed at (`--receiver-socket`).
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("receive.sock")
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// The pid of a `btrfs receive` a receiver for the store at `top` runs now, if any: what a
/// test stops or kills to catch a transfer mid-way.
pub fn btrfs_receive_for(top: &Path) -> Option<i32> {
    let snapshots = top.join(layout::SNAPSHOTS_SUBVOLUME);
    let args_of = |pid: &str| -> Vec<Vec<u8>> {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .split(|b| *b == 0)
            .map(<[u8]>::to_vec)
            .collect()
    };
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        if !args_of(&name).iter().any(|a| a == b"receive") {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's parenthesis: state, then the parent's pid.
        let Some(ppid) = stat
            .rsplit_once(") ")
            .and_then(|(_, r)| r.split(' ').nth(1).map(str::to_owned))
        else {
            continue;
        };
        let parent = args_of(&ppid);
        let is_receiver = parent
            .first()
            .is_some_and(|a| a.ends_with(b"tacid-stem-receive"));
        let ours = parent
            .iter()
            .any(|a| a.as_slice() == snapshots.as_os_str().as_encoded_bytes());
        if is_receiver && ours {
            return Some(pid);
        }
    }
    None
}
