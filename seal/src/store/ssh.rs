//! A far directory over SSH, behind the forced command `tacid-copy-target DIR` and its
//! object verbs (`obj-put KEY SIZE`, `obj-get KEY`, `obj-list PREFIX`, `obj-delete KEY`,
//! `obj-clean MINUTES`).
//!
//! ssh runs as the stem runs it for Btrfs targets: no config file (`-F /dev/null`), the
//! host key pinned in a known_hosts file of our own, key authentication only, batch mode,
//! keepalives. Each operation is bounded: ssh's own connect timeout and keepalives, and a
//! deadline after which the ssh process is killed.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{check_key, check_prefix, too_many_listed, Object, Store, StorePlace, MAX_LISTED};
use crate::error::{capped, StoreError};

/// Exit codes of the far side (copies/tacid-copy-target).
const BAD_COMMAND: i32 = 2;
const NO_SPACE: i32 = 4;
const NO_SUCH: i32 = 5;
/// ssh's own failure (no connection, authentication, host key).
const SSH_FAILED: i32 = 255;

/// The most one operation may take (a 16 MiB part on a slow link is well inside).
const DEADLINE: Duration = Duration::from_secs(600);
/// The most a listing may print.
const MAX_LIST_BYTES: u64 = 64 << 20;
/// The most of ssh's or the far side's stderr kept.
const MAX_STDERR_BYTES: u64 = 4096;

/// A [`Store`] on an SSH host.
#[derive(Debug)]
pub struct SshStore {
    program: PathBuf,
    destination: String,
    port: u16,
    identity: PathBuf,
    known_hosts: PathBuf,
    shown: String,
    deadline: Duration,
    max_listed: usize,
    /// Lines of listings skipped so far: names no key of this format has (a sync tool's
    /// `000000 (conflicted copy)`), skipped as the other stores skip them.
    skipped: std::sync::atomic::AtomicU64,
}

/// What one ssh run gave.
struct Ran {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
    stdout_over: bool,
}

impl SshStore {
    /// The store at `place` (a [`StorePlace::Ssh`]); writes the pinned known_hosts file.
    pub fn open(place: &StorePlace) -> Result<SshStore, StoreError> {
        let StorePlace::Ssh {
            program,
            user,
            host,
            port,
            identity,
            host_key,
            known_hosts_dir,
            label,
        } = place
        else {
            return Err(StoreError::Io("not an ssh place".into()));
        };
        let plain = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        };
        if !plain(label)
            || !plain(user)
            || !(plain(host) || host.parse::<std::net::IpAddr>().is_ok())
        {
            return Err(StoreError::Io(format!(
                "an ssh target's name, user and host are letters, digits, '.', '_' and '-' (or an IP address): {:?}, {:?}, {:?}",
                capped(label),
                capped(user),
                capped(host)
            )));
        }
        let mut words = host_key.split_whitespace();
        let (Some(kind), Some(base64), None) = (words.next(), words.next(), words.next()) else {
            return Err(StoreError::Io(format!(
                "the host key of {label} must be \"TYPE BASE64\" (as in the far side's /etc/ssh/ssh_host_ed25519_key.pub)"
            )));
        };
        let host_shown = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let line = if *port == 22 {
            format!("{host} {kind} {base64}\n")
        } else {
            format!("[{host}]:{port} {kind} {base64}\n")
        };
        let known_hosts = known_hosts_dir.join(format!("known_hosts.{label}"));
        write_private(&known_hosts, line.as_bytes())
            .map_err(|e| StoreError::Io(format!("cannot write {}: {e}", known_hosts.display())))?;
        Ok(SshStore {
            program: program.clone(),
            destination: format!("{user}@{host}"),
            port: *port,
            identity: identity.clone(),
            known_hosts,
            shown: format!("the ssh target {label} ({user}@{host_shown}:{port})"),
            deadline: DEADLINE,
            max_listed: MAX_LISTED,
            skipped: Default::default(),
        })
    }

    /// How many listed names were skipped so far, not being keys of this format.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Another cap on the objects one listing may return (tests of the cap).
    pub fn with_max_listed(mut self, max: usize) -> SshStore {
        self.max_listed = max;
        self
    }

    /// Another deadline per operation (tests of a store that never answers).
    pub fn with_deadline(mut self, deadline: Duration) -> SshStore {
        self.deadline = deadline;
        self
    }

    fn command(&self, request: &str) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.args(["-F", "/dev/null", "-i"])
            .arg(&self.identity)
            .args(["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"])
            .args(["-o", "StrictHostKeyChecking=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", self.known_hosts.display()))
            .args(["-o", "GlobalKnownHostsFile=/dev/null"])
            .args(["-o", "ConnectTimeout=10"])
            .args(["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"])
            .arg("-p")
            .arg(self.port.to_string())
            .arg("--")
            .arg(&self.destination)
            .arg(request);
        cmd
    }

    /// Run `request` with `input` on stdin, keeping at most `max_stdout` bytes of stdout;
    /// killed at the deadline.
    fn run(&self, request: &str, input: &[u8], max_stdout: u64) -> Result<Ran, StoreError> {
        let mut child = self
            .command(request)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| StoreError::Io(format!("cannot run {}: {e}", self.program.display())))?;
        let mut stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        // Set when stdout passed its cap: no need to wait for the rest.
        let over = std::sync::atomic::AtomicBool::new(false);
        let ran = std::thread::scope(|s| {
            let writer = s.spawn(move || {
                // The far side may stop reading (a refusal): its exit status says why.
                let _ = stdin.write_all(input);
            });
            let over = &over;
            let out = s.spawn(move || {
                let mut bytes = Vec::new();
                let _ = stdout.take(max_stdout + 1).read_to_end(&mut bytes);
                if bytes.len() as u64 > max_stdout {
                    over.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                bytes
            });
            let err = s.spawn(move || {
                let mut bytes = Vec::new();
                let _ = stderr.take(MAX_STDERR_BYTES).read_to_end(&mut bytes);
                bytes
            });
            let start = Instant::now();
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if start.elapsed() > self.deadline => break None,
                    Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                    Err(_) => break None,
                }
                if over.load(std::sync::atomic::Ordering::Relaxed) {
                    break None;
                }
            };
            if status.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let _ = writer.join();
            let stdout = out.join().unwrap_or_default();
            let stderr = err.join().unwrap_or_default();
            (status, stdout, stderr, start.elapsed())
        });
        let (status, stdout, stderr, took) = ran;
        let stdout_over = stdout.len() as u64 > max_stdout;
        let stderr = capped(String::from_utf8_lossy(&stderr).trim());
        match status {
            Some(status) => Ok(Ran {
                code: status.code(),
                stdout,
                stderr,
                stdout_over,
            }),
            None if stdout_over => Ok(Ran {
                code: None,
                stdout,
                stderr,
                stdout_over,
            }),
            None => Err(StoreError::Unreachable(format!(
                "{} did not finish {request:.80} within {} s (stopped); check the host and the network, then try again",
                self.shown,
                took.as_secs()
            ))),
        }
    }

    /// The far side's or ssh's failure in words.
    fn failed(&self, request: &str, ran: &Ran) -> StoreError {
        let shown = &self.shown;
        let said = &ran.stderr;
        match ran.code {
            Some(NO_SPACE) => StoreError::Full(format!(
                "{shown} has no space left ({said}); free space there (delete older copies) or use a larger disk"
            )),
            Some(NO_SUCH) => StoreError::NotFound(format!("{shown}: {said}")),
            Some(BAD_COMMAND) => StoreError::Io(format!(
                "{shown} refused {request:.80}: {said}; its tacid-copy-target may be older than object storage: update it there"
            )),
            Some(SSH_FAILED) if said.contains("Host key verification failed")
                || said.contains("REMOTE HOST IDENTIFICATION HAS CHANGED") =>
            {
                StoreError::Io(format!(
                    "{shown} presented another host key than the one configured: nothing was sent. \
                     If the host was reinstalled, put its new key in the configuration; otherwise someone is in between"
                ))
            }
            Some(SSH_FAILED) => StoreError::Unreachable(format!(
                "{shown} could not be reached: {said}; check the host, the network and the key, then try again"
            )),
            _ => StoreError::Io(format!("{shown}: {request:.80} failed: {said}")),
        }
    }
}

impl Store for SshStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        let request = format!("obj-put {key} {}", bytes.len());
        let ran = self.run(&request, bytes, 4096)?;
        if ran.code != Some(0) {
            return Err(self.failed(&request, &ran));
        }
        // The far side says so only after it synced: that is the durability.
        let expected = format!("stored {key} {}\n", bytes.len());
        if ran.stdout != expected.as_bytes() {
            return Err(StoreError::Io(format!(
                "{} did not confirm storing {key}: {:?}",
                self.shown,
                capped(&String::from_utf8_lossy(&ran.stdout))
            )));
        }
        Ok(())
    }

    fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, StoreError> {
        check_key(key)?;
        let request = format!("obj-get {key}");
        let ran = self.run(&request, &[], max)?;
        if ran.stdout_over {
            return Err(StoreError::TooBig {
                store: self.shown.clone(),
                key: key.to_owned(),
                size: ran.stdout.len() as u64,
                max,
            });
        }
        if ran.code != Some(0) {
            return Err(self.failed(&request, &ran));
        }
        Ok(ran.stdout)
    }

    fn list(&self, prefix: &str) -> Result<Vec<Object>, StoreError> {
        check_prefix(prefix)?;
        let request = format!("obj-list {prefix}");
        let ran = self.run(&request, &[], MAX_LIST_BYTES)?;
        if ran.code != Some(0) || ran.stdout_over {
            return Err(self.failed(&request, &ran));
        }
        let text = String::from_utf8_lossy(&ran.stdout);
        let mut found = Vec::new();
        for line in text.lines() {
            if found.len() >= self.max_listed {
                return Err(too_many_listed(&self.shown, prefix, self.max_listed));
            }
            // SIZE<TAB>MTIME<TAB>KEY; a far side older than MTIME prints SIZE<TAB>KEY (its
            // objects then have no time, and are never old enough to be cleaned).
            let fields: Vec<&str> = line.splitn(3, '\t').collect();
            let (size, mtime, key) = match fields.as_slice() {
                [size, mtime, key] => (*size, Some(*mtime), *key),
                [size, key] => (*size, None, *key),
                _ => ("", None, ""),
            };
            let parsed = (|| {
                let size = size.parse::<u64>().ok()?;
                let modified = match mtime {
                    Some(t) => Some(
                        std::time::UNIX_EPOCH
                            .checked_add(Duration::from_secs(t.parse::<u64>().ok()?))?,
                    ),
                    None => None,
                };
                (key.starts_with(prefix) && check_key(key).is_ok()).then(|| Object {
                    key: key.to_owned(),
                    size,
                    modified,
                })
            })();
            // A name that is no key of this format (another program's file, a name with a
            // newline cut into two lines) is not this format's object: skipped, as the
            // directory and S3 stores skip it, rather than failing every listing.
            match parsed {
                Some(entry) => found.push(entry),
                None => {
                    self.skipped
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        let request = format!("obj-delete {key}");
        let ran = self.run(&request, &[], 4096)?;
        if ran.code != Some(0) {
            return Err(self.failed(&request, &ran));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn remove_temporaries(&self, grace: Duration) -> Result<u64, StoreError> {
        let request = format!("obj-clean {}", grace.as_secs().div_ceil(60).min(9_999_999));
        let ran = self.run(&request, &[], 4096)?;
        match ran.code {
            // A far side older than the verb: it has nothing to say; its temporaries stay.
            Some(BAD_COMMAND) => return Ok(0),
            Some(0) => {}
            _ => return Err(self.failed(&request, &ran)),
        }
        let text = String::from_utf8_lossy(&ran.stdout);
        text.trim()
            .strip_prefix("cleaned ")
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| {
                StoreError::Io(format!(
                    "{} did not say what {request} cleaned: {:?}",
                    self.shown,
                    capped(&text)
                ))
            })
    }
}

/// Write `bytes` at `path` (mode 0600, not through a symlink), replacing it atomically.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // Named after the whole file name: `with_extension` would give every target's
    // `known_hosts.<label>` the same temporary, and two targets' acts would race on it.
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".tmp.{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
