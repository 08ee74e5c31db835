//! Test-only: a real OpenSSH `sshd` in a network namespace of its own, as a copy target.
//!
//! ```no_run
//! let Some(fs) = testbed::LoopFs::new(testbed::MIN_SIZE).unwrap() else { return };
//! let Some(target) = testbed::ssh::SshTarget::start(fs.top()).unwrap() else { return };
//! // Any process that runs `ssh` reaches it through `target.ssh_program()` (a wrapper that
//! // runs /usr/bin/ssh inside the namespace), or is started with `target.exec_prefix()`:
//! let out = target.ssh("list").output().unwrap();
//! assert!(out.status.success(), "{}", target.log());
//! ```
//!
//! What it makes, all removed on drop: a network namespace (`ip netns add`, loopback up),
//! an ed25519 host key and an ed25519 client key (`ssh-keygen`), an `authorized_keys` whose
//! one line forces `copies/tacid-copy-target TARGET_DIR` on that key
//! (`restrict,command="..."`), an `sshd_config` of its own (no PAM, no passwords, root by
//! key only, `StrictModes no` because the files live under /tmp), and `sshd -D -e -f` on
//! 127.0.0.1 port [`PORT`] inside the namespace, logging to a file ([`SshTarget::log`]).
//!
//! **How a client reaches it.** The namespace's loopback is not the test's loopback, so a
//! plain `ssh 127.0.0.1` from the test's namespace finds nothing. Three ways in, pick the
//! one that fits the process that runs `ssh`:
//! - [`SshTarget::ssh_program`]: an executable that takes ssh's arguments and runs
//!   `/usr/bin/ssh` inside the namespace (`nsenter --net=...`). Give it to code that runs
//!   ssh by a configurable path.
//! - [`SshTarget::exec_prefix`]: `nsenter --net=/run/netns/NAME --`, to put in front of a
//!   whole program (the stem daemon): only its network namespace changes, so it still sees
//!   the same mounts, files and D-Bus socket (unix sockets with a path do not belong to a
//!   network namespace). `ip netns exec` is not used for this: it also makes a new mount
//!   namespace, and mounts the test makes later would not be seen inside.
//! - [`SshTarget::in_netns`]: run a closure on a thread moved into the namespace (setns);
//!   whatever that thread spawns (an `ssh` child, more threads) is inside it too.
//!
//! Faults: [`SshTarget::cut_link`] kills every sshd session process (the client's ssh
//! sees the connection drop at once; the far side's receive sees its stdin end);
//! [`SshTarget::set_link_up`]`(false)` takes the namespace's loopback down instead (the
//! client notices only through its keepalives); [`SshTarget::change_host_key`] restarts
//! sshd with a new host key, so a client pinned to the old one must refuse.
//!
//! When the machine cannot do this (not root; no sshd, ssh, ssh-keygen, ip or nsenter)
//! [`SshTarget::start`] prints a loud `SKIPPED` line and returns `Ok(None)`; with `CI=true`
//! it panics instead.

use std::fs;
use std::io::{self, Read as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The port sshd listens on inside its namespace (each target has a namespace of its own,
/// so they never collide; not 22, so the port option is exercised).
pub const PORT: u16 = 2222;

/// Where sshd listens, inside the namespace.
pub const HOST: &str = "127.0.0.1";

/// The user the client logs in as: `btrfs receive` needs root on the far side.
pub const USER: &str = "root";

const SSHD: &str = "/usr/sbin/sshd";
const SSH: &str = "/usr/bin/ssh";

/// The far-side script in this repository, for [`SshTarget::start`].
pub fn repo_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../copies/tacid-copy-target")
}

/// A running sshd in a private network namespace whose one key may only run the far-side
/// script on one target directory.
#[derive(Debug)]
pub struct SshTarget {
    // Removed last, by its own Drop, after sshd is gone and the namespace deleted.
    dir: tempfile::TempDir,
    netns: String,
    sshd: Option<Child>,
    host_key: String,
    target_dir: PathBuf,
    script: PathBuf,
    /// How many host keys have been made (each restart with a new key makes one).
    host_keys_made: u32,
    /// What ran below a session [`SshTarget::cut_link`] killed: orphaned then (no longer
    /// below the listener), still the far side's until it exits.
    cut_off: std::sync::Mutex<Vec<u32>>,
}

impl SshTarget {
    /// sshd with this repository's `copies/tacid-copy-target` forced on the client key,
    /// serving `target_dir` (which the test makes, normally on a [`crate::LoopFs`]).
    pub fn start(target_dir: &Path) -> io::Result<Option<SshTarget>> {
        Self::start_with_script(&repo_script(), target_dir)
    }

    /// Like [`SshTarget::start`], with another forced command (`script TARGET_DIR`).
    pub fn start_with_script(script: &Path, target_dir: &Path) -> io::Result<Option<SshTarget>> {
        if let Some(missing) = missing_prerequisite() {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!(
                    "testbed::ssh: CI=true but this machine cannot run an sshd target: \
                     {missing}. Run as root with openssh-server, openssh-client and iproute2 \
                     (apt-get install openssh-server openssh-client iproute2)."
                );
            }
            eprintln!(
                "\n*** SKIPPED: needs root and OpenSSH ({missing}); \
                 this sshd test did not run ***\n"
            );
            return Ok(None);
        }
        let script = fs::canonicalize(script)?;
        let dir = tempfile::Builder::new()
            .prefix("tacid-testbed-ssh-")
            .tempdir()?;
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))?;
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let netns = format!(
            "tacid-ssh-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        // Left over from a run that was killed: a name is this process's pid, so any
        // namespace of that name is stale.
        let _ = run("ip", &["netns", "del", &netns]);
        run("ip", &["netns", "add", &netns])?;
        let mut target = SshTarget {
            dir,
            netns,
            sshd: None,
            host_key: String::new(),
            target_dir: target_dir.to_owned(),
            script,
            host_keys_made: 0,
            cut_off: std::sync::Mutex::new(Vec::new()),
        };
        // From here on Drop deletes the namespace whatever fails.
        target.set_link_up(true)?;
        target.make_client_key()?;
        target.new_host_key()?;
        target.write_config()?;
        target.write_ssh_program()?;
        target.start_sshd()?;
        Ok(Some(target))
    }

    /// The network namespace's name (`ip netns` lists it).
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// The namespace's handle file, for `nsenter --net=` or setns.
    pub fn netns_path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.netns)
    }

    /// `nsenter --net=/run/netns/NAME --`: put it in front of a program (the stem) so that
    /// its own `ssh` reaches this sshd; nothing else about the program changes.
    pub fn exec_prefix(&self) -> Vec<String> {
        vec![
            "nsenter".into(),
            format!("--net={}", self.netns_path().display()),
            "--".into(),
        ]
    }

    /// An executable that behaves as `ssh` (same arguments, stdin, stdout, exit status)
    /// but runs inside the namespace.
    pub fn ssh_program(&self) -> PathBuf {
        self.dir.path().join("ssh")
    }

    /// `127.0.0.1`, as seen inside the namespace.
    pub fn host(&self) -> &str {
        HOST
    }

    /// [`PORT`].
    pub fn port(&self) -> u16 {
        PORT
    }

    /// [`USER`].
    pub fn user(&self) -> &str {
        USER
    }

    /// The target as a copies.json `place`: `ssh://root@127.0.0.1:2222/TARGET_DIR`.
    pub fn place(&self) -> String {
        format!("ssh://{USER}@{HOST}:{PORT}{}", self.target_dir.display())
    }

    /// The directory the far side serves.
    pub fn target_dir(&self) -> &Path {
        &self.target_dir
    }

    /// The host key sshd presents now, as copies.json's `host_key` wants it: `TYPE BASE64`.
    pub fn host_key(&self) -> &str {
        &self.host_key
    }

    /// The line a `known_hosts` file needs to pin [`SshTarget::host_key`]:
    /// `[127.0.0.1]:2222 TYPE BASE64`.
    pub fn known_hosts_line(&self) -> String {
        format!("[{HOST}]:{PORT} {}", self.host_key)
    }

    /// A `known_hosts` file holding the host key pinned when sshd first started (it is not
    /// rewritten by [`SshTarget::change_host_key`]: that is the point).
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }

    /// The client's private key (ed25519, no passphrase, mode 0600).
    pub fn identity(&self) -> PathBuf {
        self.dir.path().join("client_ed25519")
    }

    /// The far side's command on this key, as written in `authorized_keys`.
    pub fn forced_command(&self) -> String {
        format!("{} {}", self.script.display(), self.target_dir.display())
    }

    /// `ssh` into the target with the options the stem uses (copies-spec.md), the pinned
    /// known_hosts and the client key; `request` becomes SSH_ORIGINAL_COMMAND on the far
    /// side. Runs through [`SshTarget::ssh_program`], so it works from any thread.
    pub fn ssh(&self, request: &str) -> Command {
        let mut command = Command::new(self.ssh_program());
        command.args(self.ssh_args()).arg(request);
        command
    }

    /// The arguments of [`SshTarget::ssh`] before the request (`-F /dev/null ... root@127.0.0.1`).
    pub fn ssh_args(&self) -> Vec<String> {
        let known_hosts = self.known_hosts().display().to_string();
        let identity = self.identity().display().to_string();
        [
            "-F",
            "/dev/null",
            "-i",
            &identity,
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            &format!("UserKnownHostsFile={known_hosts}"),
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
            "-p",
            &PORT.to_string(),
            &format!("{USER}@{HOST}"),
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// Run `f` on a thread moved into the namespace (setns): an `ssh` it spawns, or a
    /// socket it opens, is inside. The test's other threads are not affected.
    pub fn in_netns<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let handle = fs::File::open(self.netns_path()).expect("open the namespace handle");
        std::thread::scope(|s| {
            s.spawn(move || {
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&handle),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .expect("setns into the test's network namespace");
                f()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Restart sshd with a new host key; returns it (`TYPE BASE64`). The pinned
    /// [`SshTarget::known_hosts`] keeps the old one, so a client using it must refuse.
    pub fn change_host_key(&mut self) -> io::Result<String> {
        self.stop_sshd();
        self.new_host_key()?;
        self.start_sshd()?;
        Ok(self.host_key.clone())
    }

    /// Cut every connection now: SIGKILL every sshd process serving a session (the
    /// listener stays, so the next connection works). Returns how many were killed.
    pub fn cut_link(&self) -> io::Result<usize> {
        let Some(listener) = self.sshd.as_ref().map(Child::id) else {
            return Ok(0);
        };
        let below = descendants(listener);
        let sessions = self.session_pids(listener);
        self.cut_off
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(below.iter().filter(|pid| !sessions.contains(pid)));
        for pid in &sessions {
            if let Some(pid) = rustix::process::Pid::from_raw(*pid as i32) {
                // Gone already is fine: the session ended on its own.
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        Ok(sessions.len())
    }

    /// The pids of the sshd processes serving sessions now (descendants of the listener
    /// whose command is sshd): a test waits on these to know a far-side act is over.
    pub fn sessions(&self) -> Vec<u32> {
        match self.sshd.as_ref().map(Child::id) {
            Some(listener) => self.session_pids(listener),
            None => Vec::new(),
        }
    }

    /// Every process the listener started, directly or not, that is still there (the
    /// far-side script and its btrfs too, also when [`SshTarget::cut_link`] orphaned them):
    /// a test waits for none to know the far side has finished.
    pub fn far_side_processes(&self) -> Vec<u32> {
        let mut processes = match self.sshd.as_ref().map(Child::id) {
            Some(listener) => descendants(listener),
            None => Vec::new(),
        };
        let mut cut_off = self
            .cut_off
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cut_off.retain(|pid| alive(*pid));
        let orphans: Vec<u32> = cut_off
            .iter()
            .copied()
            .filter(|pid| !processes.contains(pid))
            .collect();
        processes.extend(orphans);
        processes
    }

    /// Wait up to `timeout` until the listener has no descendants left (every session and
    /// forced command finished); false on timeout.
    pub fn wait_far_side_idle(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.far_side_processes().is_empty() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Bring the namespace's loopback up or down (down: packets go nowhere; connections
    /// hang until the client's keepalives give up, 15 s with the stem's options).
    pub fn set_link_up(&self, up: bool) -> io::Result<()> {
        run(
            "ip",
            &[
                "-n",
                &self.netns,
                "link",
                "set",
                "lo",
                if up { "up" } else { "down" },
            ],
        )
        .map(drop)
    }

    /// sshd's log so far (its stderr, `LogLevel VERBOSE`), for a failing test to print.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = fs::File::open(self.log_path()) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("sshd.log")
    }

    fn session_pids(&self, listener: u32) -> Vec<u32> {
        descendants(listener)
            .into_iter()
            .filter(|pid| {
                fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim_end() == "sshd")
            })
            .collect()
    }

    fn make_client_key(&self) -> io::Result<()> {
        let identity = path_str(&self.identity())?;
        make_key(&identity, "tacid-test-client")
    }

    fn new_host_key(&mut self) -> io::Result<()> {
        self.host_keys_made += 1;
        let path = self.host_key_path();
        let public_path = public_key_path(&path);
        let _ = fs::remove_file(&path);
        let _ = fs::remove_file(&public_path);
        make_key(&path_str(&path)?, "")?;
        let public = fs::read_to_string(&public_path)?;
        let mut words = public.split_whitespace();
        let (Some(kind), Some(base64)) = (words.next(), words.next()) else {
            return Err(io::Error::other(format!(
                "testbed::ssh: cannot read the host key {public:?}"
            )));
        };
        self.host_key = format!("{kind} {base64}");
        if self.host_keys_made == 1 {
            fs::write(self.known_hosts(), format!("{}\n", self.known_hosts_line()))?;
        }
        Ok(())
    }

    fn host_key_path(&self) -> PathBuf {
        self.dir
            .path()
            .join(format!("host_ed25519_{}", self.host_keys_made))
    }

    fn write_config(&self) -> io::Result<()> {
        let client_pub = fs::read_to_string(public_key_path(&self.identity()))?;
        let authorized = format!(
            "restrict,command=\"{}\" {}\n",
            self.forced_command(),
            client_pub.trim()
        );
        fs::write(self.dir.path().join("authorized_keys"), authorized)?;
        Ok(())
    }

    fn write_sshd_config(&self) -> io::Result<PathBuf> {
        let dir = self.dir.path().display();
        let config = format!(
            "# testbed::ssh: an sshd of its own for one test\n\
             Port {PORT}\n\
             ListenAddress {HOST}\n\
             HostKey {host_key}\n\
             PidFile none\n\
             AuthorizedKeysFile {dir}/authorized_keys\n\
             AuthenticationMethods publickey\n\
             PubkeyAuthentication yes\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             UsePAM no\n\
             PermitRootLogin prohibit-password\n\
             AllowUsers {USER}\n\
             StrictModes no\n\
             UseDNS no\n\
             LogLevel VERBOSE\n\
             MaxStartups 50:30:100\n",
            host_key = self.host_key_path().display(),
        );
        let path = self.dir.path().join("sshd_config");
        fs::write(&path, config)?;
        Ok(path)
    }

    fn write_ssh_program(&self) -> io::Result<()> {
        let path = self.ssh_program();
        fs::write(
            &path,
            format!(
                "#!/bin/sh\n# ssh, inside the network namespace of a testbed::ssh target\n\
                 exec nsenter --net={} -- {SSH} \"$@\"\n",
                self.netns_path().display()
            ),
        )?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
    }

    fn start_sshd(&mut self) -> io::Result<()> {
        // sshd's privilege separation directory; Debian's unit makes it, a test machine
        // without systemd may not have it.
        fs::create_dir_all("/run/sshd")?;
        let config = self.write_sshd_config()?;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let netns = format!("--net={}", self.netns_path().display());
        let mut child = Command::new("nsenter")
            .args([&netns, "--", SSHD, "-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let listening = format!("Server listening on {HOST} port {PORT}");
        let start = Instant::now();
        loop {
            let log = self.log();
            // The log is appended across restarts: count the listening lines.
            if log.matches(&listening).count() as u32 >= self.host_keys_made {
                break;
            }
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "testbed::ssh: sshd exited ({status}) before it listened; its log:\n{log}"
                )));
            }
            if start.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other(format!(
                    "testbed::ssh: sshd did not listen within 10 s; its log:\n{log}"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.sshd = Some(child);
        Ok(())
    }

    fn stop_sshd(&mut self) {
        if let Some(mut child) = self.sshd.take() {
            // Sessions first (the listener does not take them down with it), then the
            // listener; each by its own pid.
            for pid in descendants(child.id()) {
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SshTarget {
    fn drop(&mut self) {
        self.stop_sshd();
        if let Err(e) = run("ip", &["netns", "del", &self.netns]) {
            eprintln!(
                "testbed::ssh: could not delete the namespace {}: {e}",
                self.netns
            );
        }
    }
}

/// The process is there and not a zombie.
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

/// Every live process below `ancestor` (children, their children, ...), from /proc.
fn descendants(ancestor: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            let mut fields = after.split_whitespace();
            let state = fields.next();
            if state == Some("Z") {
                continue;
            }
            if let Some(ppid) = fields.next().and_then(|s| s.parse::<u32>().ok()) {
                parents.push((pid, ppid));
            }
        }
    }
    let mut found = vec![ancestor];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for (pid, ppid) in &parents {
            if *ppid == parent && !found.contains(pid) {
                found.push(*pid);
            }
        }
        i += 1;
    }
    found.remove(0);
    found
}

fn missing_prerequisite() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not running as root".into());
    }
    for path in [SSHD, SSH] {
        if !Path::new(path).exists() {
            return Some(format!("no {path}"));
        }
    }
    for tool in ["ssh-keygen", "ip", "nsenter"] {
        if crate::find_tool(tool).is_none() {
            return Some(format!("no `{tool}` in PATH, /usr/sbin or /sbin"));
        }
    }
    None
}

/// Where ssh-keygen puts the public half of the key at `private`.
/// A new ed25519 key pair without a passphrase at `path` (and `path`.pub).
fn make_key(path: &str, comment: &str) -> io::Result<()> {
    run(
        "ssh-keygen",
        &["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
    )
    .map(drop)
}

fn public_key_path(private: &Path) -> PathBuf {
    let mut path = private.as_os_str().to_owned();
    path.push(".pub");
    PathBuf::from(path)
}

fn path_str(path: &Path) -> io::Result<String> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other(format!("testbed::ssh: not UTF-8: {}", path.display())))
}

fn run(cmd: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(cmd).args(args).stdin(Stdio::null()).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "testbed::ssh: {cmd} {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
