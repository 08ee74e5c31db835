//! Test-only: a real Btrfs filesystem on a loop device, one per test, removed on drop.
//!
//! ```no_run
//! let Some(mut fs) = testbed::LoopFs::with_layout(256 << 20).unwrap() else {
//!     return; // not root or no loop devices: already reported loudly (fails under CI=true)
//! };
//! let top = fs.top(); // the top level (subvolid 5), with every layout subvolume in it
//! let before = fs.subvolumes_snapshot().unwrap();
//! // ... act on `top` ...
//! fs.remount().unwrap(); // what is still there was on disk
//! assert_eq!(before, fs.subvolumes_snapshot().unwrap());
//! ```
//!
//! Each [`LoopFs`] lives in its own temporary directory (a sparse image file and a mount
//! point), so tests in parallel threads or processes never share anything. Dropping it
//! unmounts (lazily if something is still busy), detaches the loop device and removes the
//! directory.
//!
//! When the machine cannot do this (not root, no `/dev/loop-control`, no `mkfs.btrfs`),
//! the constructors print a loud `SKIPPED` line and return `Ok(None)`; with the
//! environment variable `CI=true` they panic instead, so CI never passes by skipping.
//!
//! The queries here ([`LoopFs::subvolumes_snapshot`], [`LoopFs::show`]) go through the
//! `btrfs` command-line tool on purpose: they are an oracle independent of the code under
//! test.

pub mod command_line;
pub mod garage;
pub mod peaks;
pub mod quota;
pub mod receive;
pub mod send_stream;
pub mod ssh;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod units;
pub mod users;

/// The smallest image `mkfs.btrfs` (6.2, default profiles) accepts, rounded up.
pub const MIN_SIZE: u64 = 115 << 20;

/// How to make the filesystem.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Create every subvolume of `layout::SUBVOLUMES` flat at the top level.
    pub layout: bool,
    /// Data and metadata share block groups (`mkfs.btrfs --mixed`): filling the disk with
    /// data then also leaves no room for metadata, so a snapshot hits ENOSPC.
    pub mixed: bool,
}

/// A mounted loop-device Btrfs in a private temporary directory.
#[derive(Debug)]
pub struct LoopFs {
    // Removed last (after Drop unmounts and detaches), by its own Drop.
    dir: tempfile::TempDir,
    image: PathBuf,
    mount_point: PathBuf,
    device: Option<PathBuf>,
    mounted: bool,
}

impl LoopFs {
    /// A fresh, empty Btrfs of `size_bytes` (at least [`MIN_SIZE`]), top level mounted at
    /// [`LoopFs::top`]. `Ok(None)` when this machine cannot (see the crate docs).
    pub fn new(size_bytes: u64) -> io::Result<Option<LoopFs>> {
        Self::create(size_bytes, Options::default())
    }

    /// Like [`LoopFs::new`], laid out as a tacid machine: every subvolume of
    /// `layout::SUBVOLUMES` at the top level, `@root-blank` read-only and empty,
    /// `@snapshots` mode 0700 owned by root.
    pub fn with_layout(size_bytes: u64) -> io::Result<Option<LoopFs>> {
        Self::create(
            size_bytes,
            Options {
                layout: true,
                ..Options::default()
            },
        )
    }

    /// The general constructor.
    pub fn create(size_bytes: u64, options: Options) -> io::Result<Option<LoopFs>> {
        if let Some(missing) = missing_prerequisite() {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!(
                    "testbed: CI=true but this machine cannot make a loop-device Btrfs: \
                     {missing}. Run the tests as root on a machine with loop devices and \
                     btrfs-progs (apt-get install btrfs-progs)."
                );
            }
            eprintln!(
                "\n*** SKIPPED: needs root and loop devices ({missing}); \
                 this loop-device Btrfs test did not run ***\n"
            );
            return Ok(None);
        }

        let dir = tempfile::Builder::new()
            .prefix("tacid-testbed-")
            .tempdir()?;
        let image = dir.path().join("disk.img");
        let mount_point = dir.path().join("top");
        fs::create_dir(&mount_point)?;
        let file = fs::File::create(&image)?;
        file.set_len(size_bytes)?; // sparse: costs only what Btrfs writes
        drop(file);

        let mut fs = LoopFs {
            dir,
            image,
            mount_point,
            device: None,
            mounted: false,
        };
        let mut mkfs = vec!["-q", "-L", layout::names::FILESYSTEM_LABEL];
        if options.mixed {
            mkfs.push("--mixed");
        }
        let image_arg = path_str(&fs.image)?;
        mkfs.push(&image_arg);
        run("mkfs.btrfs", &mkfs)?;

        let device = attach_loop(&fs.image)?;
        fs.device = Some(device);
        fs.mount()?;
        if options.layout {
            fs.lay_out()?;
        }
        Ok(Some(fs))
    }

    /// The top level of the filesystem (subvolid 5), where it is mounted.
    pub fn top(&self) -> &Path {
        &self.mount_point
    }

    /// A private directory outside the filesystem (it holds the image and the mount point);
    /// removed on drop.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// The image file behind the loop device.
    pub fn image(&self) -> &Path {
        &self.image
    }

    /// The loop device (`/dev/loopN`).
    pub fn device(&self) -> &Path {
        self.device.as_deref().unwrap_or(Path::new(""))
    }

    /// Unmount and mount again: whatever is visible afterwards was on disk (this is how a
    /// test proves a write durable without a power cut: unmount commits what is in memory,
    /// so pair it with a check that nothing *unsynced* was expected to survive).
    pub fn remount(&mut self) -> io::Result<()> {
        self.unmount()?;
        self.mount()
    }

    /// Unmount the top level (fails if something inside is still open).
    pub fn unmount(&mut self) -> io::Result<()> {
        if self.mounted {
            let point = path_str(&self.mount_point)?;
            // Something outside the test (a scan of /tmp, a helper's `find`) may hold the
            // mount for a moment: wait for it up to 3 s, then say who holds it.
            let mut tries = 0;
            loop {
                match run("umount", &[&point]) {
                    Ok(_) => break,
                    Err(e) if tries < 30 && e.to_string().contains("busy") => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    Err(e) => {
                        let holders = Command::new("fuser")
                            .args(["-vm", &point])
                            .output()
                            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                            .unwrap_or_default();
                        return Err(io::Error::other(format!("{e}; held by: {holders}")));
                    }
                }
            }
            self.mounted = false;
        }
        Ok(())
    }

    /// Mount the top level (subvolid 5) at [`LoopFs::top`] again.
    pub fn mount(&mut self) -> io::Result<()> {
        if !self.mounted {
            run(
                "mount",
                &[
                    "-t",
                    "btrfs",
                    "-o",
                    "subvolid=5",
                    &path_str(self.device())?,
                    &path_str(&self.mount_point)?,
                ],
            )?;
            self.mounted = true;
        }
        Ok(())
    }

    /// Every subvolume of the filesystem as (path from the top, id, uuid), sorted, from
    /// `btrfs subvolume list -u` (the oracle: not the code under test).
    pub fn subvolumes_snapshot(&self) -> io::Result<Vec<(String, u64, String)>> {
        let out = run(
            "btrfs",
            &["subvolume", "list", "-u", &path_str(&self.mount_point)?],
        )?;
        let mut list = Vec::new();
        for line in out.lines().filter(|l| !l.trim().is_empty()) {
            list.push(parse_list_line(line).ok_or_else(|| {
                io::Error::other(format!(
                    "testbed: cannot parse `btrfs subvolume list` line {line:?}"
                ))
            })?);
        }
        list.sort();
        Ok(list)
    }

    /// The paths (from the top) of every subvolume, sorted: [`Self::subvolumes_snapshot`]
    /// without the ids and uuids.
    pub fn subvolume_paths(&self) -> io::Result<Vec<String>> {
        Ok(self
            .subvolumes_snapshot()?
            .into_iter()
            .map(|(path, _, _)| path)
            .collect())
    }

    /// `btrfs subvolume show` of `path` (relative to the top) as its "Key: value" lines,
    /// keys as printed ("UUID", "Parent UUID", "Subvolume ID", "Generation",
    /// "Gen at creation", "Parent ID", "Top level ID", "Flags", "Creation time", ...),
    /// plus "Name". A dash means none.
    pub fn show(&self, path: &str) -> io::Result<BTreeMap<String, String>> {
        let out = run(
            "btrfs",
            &[
                "subvolume",
                "show",
                &path_str(&self.mount_point.join(path))?,
            ],
        )?;
        let mut map = BTreeMap::new();
        for line in out.lines() {
            let line = line.trim();
            if let Some((key, value)) = line.split_once(':') {
                if !key.is_empty() && !value.trim().is_empty() {
                    map.entry(key.trim().to_owned())
                        .or_insert_with(|| value.trim().to_owned());
                }
            }
        }
        Ok(map)
    }

    /// Write files of `chunk` bytes into `dir` (relative to the top) until the filesystem
    /// answers ENOSPC; returns the bytes written. The filesystem is full afterwards.
    pub fn fill(&self, dir: &str, chunk: usize) -> io::Result<u64> {
        use std::io::Write as _;
        let base = self.mount_point.join(dir);
        let buf = vec![0x5a_u8; chunk];
        let mut written = 0u64;
        for i in 0u64.. {
            let path = base.join(format!("fill.{i}"));
            let result = fs::File::create(&path).and_then(|mut f| {
                f.write_all(&buf)?;
                f.sync_all()
            });
            match result {
                Ok(()) => written += chunk as u64,
                Err(e) if is_enospc(&e) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// The generation in the superblock on the device: one more for every transaction
    /// committed (`btrfs inspect-internal dump-super`, the oracle). Counting commits is how
    /// a test tells that something did not make the filesystem commit.
    pub fn superblock_generation(&self) -> io::Result<u64> {
        self.superblock_field("generation")
    }

    /// One numeric field of the superblock on the device (`dump-super`'s `name value` line).
    pub(crate) fn superblock_field(&self, name: &str) -> io::Result<u64> {
        let out = run(
            "btrfs",
            &["inspect-internal", "dump-super", &path_str(self.device())?],
        )?;
        out.lines()
            .find_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some(name))
                    .then(|| words.next()?.parse().ok())
                    .flatten()
            })
            .ok_or_else(|| io::Error::other(format!("testbed: no {name} in dump-super:\n{out}")))
    }

    fn lay_out(&self) -> io::Result<()> {
        for subvolume in layout::SUBVOLUMES {
            run(
                "btrfs",
                &[
                    "-q",
                    "subvolume",
                    "create",
                    &path_str(&self.mount_point.join(subvolume.name))?,
                ],
            )?;
        }
        let blank = self.mount_point.join(layout::ROOT_BLANK_SUBVOLUME);
        run(
            "btrfs",
            &["property", "set", "-ts", &path_str(&blank)?, "ro", "true"],
        )?;
        let snapshots = self.mount_point.join(layout::SNAPSHOTS_SUBVOLUME);
        std::os::unix::fs::chown(&snapshots, Some(0), Some(0))?;
        fs::set_permissions(&snapshots, fs::Permissions::from_mode(0o700))?;
        Ok(())
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let target = self.mount_point.display().to_string();
            if run("umount", &[&target]).is_err() {
                // Something (a leaked fd, a cwd) still holds it: detach it from the tree
                // so the temporary directory can go; the kernel frees it when released.
                if let Err(e) = run("umount", &["-l", &target]) {
                    eprintln!("testbed: could not unmount {target}: {e}");
                }
            }
        }
        if let Some(device) = &self.device {
            let device = device.display().to_string();
            if let Err(e) = run("losetup", &["-d", &device]) {
                eprintln!("testbed: could not detach {device}: {e}");
            }
        }
    }
}

/// Run `f` as an ordinary user: on a thread of its own whose real, effective and saved uid
/// and gid are `uid` and `gid`, with no supplementary groups and therefore no capabilities
/// (the kernel clears them when every uid leaves 0). Only that thread changes: on Linux the
/// raw `setresuid`/`setresgid` are per thread, and the test process stays root. A handle
/// opened before is used inside as a user's working directory would be: every `*at` call
/// and ioctl is checked against the thread's own credentials.
pub fn as_user<T: Send>(uid: u32, gid: u32, f: impl FnOnce() -> T + Send) -> T {
    use rustix::process::{Gid, Uid};
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    assert!(uid != 0, "testbed::as_user: uid 0 is not an ordinary user");
    std::thread::scope(|s| {
        s.spawn(move || {
            let gid_ = Gid::from_raw(gid);
            let uid_ = Uid::from_raw(uid);
            set_thread_groups(&[]).expect("drop supplementary groups");
            set_thread_res_gid(gid_, gid_, gid_).expect("setresgid");
            set_thread_res_uid(uid_, uid_, uid_).expect("setresuid");
            f()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A turn at something every test process shares (a fixed path such as
/// `/run/tacid-initrd/<job>`): an exclusive `flock` on `/run/tacid-test-<what>.lock`, held
/// until the guard is dropped. Threads of one process and other test processes alike wait.
pub fn turn(what: &str) -> fs::File {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = format!("/run/tacid-test-{what}.lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {path} (the tests that share it run as root): {e}"));
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .unwrap_or_else(|e| panic!("lock {path}: {e}"));
    file
}

/// Ask `f` every 20 ms until it says yes or `timeout` has passed: how long it took, or
/// `None` when it never did.
pub fn wait_until(
    timeout: std::time::Duration,
    mut f: impl FnMut() -> bool,
) -> Option<std::time::Duration> {
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

/// Whether `tool` is on the PATH (`command -v`): what a tier asks before it says SKIPPED.
pub fn installed(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Make a fifo (mode 0600) at `path`: what tests put where a regular file is expected.
pub fn make_fifo(path: &Path) -> io::Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .map_err(io::Error::from)
}

fn missing_prerequisite() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not running as root".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control".into());
    }
    for tool in ["mkfs.btrfs", "btrfs", "losetup", "mount", "umount"] {
        if find_tool(tool).is_none() {
            return Some(format!("no `{tool}` in PATH, /usr/sbin or /sbin"));
        }
    }
    None
}

/// Attach `image` to a free loop device. `losetup --find` can lose a race with another
/// test grabbing the same free device; it then fails with EBUSY, so try again.
fn attach_loop(image: &Path) -> io::Result<PathBuf> {
    let image = path_str(image)?;
    let mut last = None;
    for attempt in 0..20 {
        match run("losetup", &["--find", "--show", &image]) {
            Ok(out) => return Ok(PathBuf::from(out.trim())),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(20 * (attempt + 1)));
    }
    Err(last.unwrap_or_else(|| io::Error::other("losetup failed")))
}

fn parse_list_line(line: &str) -> Option<(String, u64, String)> {
    // "ID 256 gen 9 top level 5 uuid 3b1f...-... path @root"
    let mut words = line.split_whitespace();
    let mut id = None;
    let mut uuid = None;
    while let Some(word) = words.next() {
        match word {
            "ID" => id = words.next()?.parse().ok(),
            "uuid" => uuid = words.next().map(str::to_owned),
            "path" => break,
            _ => {}
        }
    }
    let path = line.split_once(" path ")?.1.to_owned();
    Some((path, id?, uuid?))
}

fn is_enospc(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error())
}

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn path_str(path: &Path) -> io::Result<String> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other(format!("testbed: path {path:?} is not UTF-8")))
}

/// Run a tool; its stdout on success, an error naming the command and its stderr otherwise.
fn run(tool: &str, args: &[&str]) -> io::Result<String> {
    let program =
        find_tool(tool).ok_or_else(|| io::Error::other(format!("testbed: `{tool}` not found")))?;
    let out = Command::new(&program).args(args).output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "testbed: `{tool} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_list_line() {
        let line =
            "ID 257 gen 9 top level 5 uuid 3b1f2e4a-0000-4000-8000-000000000001 path @root blank";
        assert_eq!(
            parse_list_line(line),
            Some((
                "@root blank".into(),
                257,
                "3b1f2e4a-0000-4000-8000-000000000001".into()
            ))
        );
        assert_eq!(parse_list_line("garbage"), None);
    }

    #[test]
    fn as_user_drops_root_for_that_thread_only() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("\n*** SKIPPED: as_user needs root ***\n");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let (uid, denied) = as_user(4242, 4242, || {
            let denied = fs::write(dir.path().join("x"), "y").expect_err("a user writes there");
            (rustix::process::geteuid().as_raw(), denied.kind())
        });
        assert_eq!(uid, 4242);
        assert_eq!(
            denied,
            io::ErrorKind::PermissionDenied,
            "no capability is left"
        );
        assert!(
            rustix::process::geteuid().is_root(),
            "the test process stays root"
        );
        fs::write(dir.path().join("x"), "y").expect("root still writes");
    }

    #[test]
    fn loop_layout_is_made_and_survives_remount() {
        let Some(mut fs) = LoopFs::with_layout(MIN_SIZE).expect("make a loop Btrfs") else {
            return;
        };
        let list = fs.subvolumes_snapshot().expect("list");
        let names: Vec<&str> = list.iter().map(|(p, _, _)| p.as_str()).collect();
        let mut expected: Vec<&str> = layout::SUBVOLUMES.iter().map(|s| s.name).collect();
        expected.sort();
        assert_eq!(names, expected);

        let blank = fs.show(layout::ROOT_BLANK_SUBVOLUME).expect("show");
        assert_eq!(blank.get("Flags").map(String::as_str), Some("readonly"));
        assert_eq!(
            fs::read_dir(fs.top().join(layout::ROOT_BLANK_SUBVOLUME))
                .expect("read")
                .count(),
            0
        );
        let meta = fs::metadata(fs.top().join(layout::SNAPSHOTS_SUBVOLUME)).expect("stat");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o700);

        fs::write(fs.top().join("@persist/file"), b"kept").expect("write");
        fs.remount().expect("remount");
        assert_eq!(
            fs::read(fs.top().join("@persist/file")).expect("read"),
            b"kept"
        );
        assert_eq!(fs.subvolumes_snapshot().expect("list"), list);
    }

    #[test]
    fn loop_parallel_filesystems_do_not_collide_and_are_removed() {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    let fs = LoopFs::new(MIN_SIZE).expect("make a loop Btrfs")?;
                    fs::write(fs.top().join("mine"), i.to_string()).expect("write");
                    Some((i, fs))
                })
            })
            .collect();
        // All alive at once: each must have its own device, directory and contents.
        let made: Vec<(i32, LoopFs)> = handles
            .into_iter()
            .filter_map(|h| h.join().expect("thread"))
            .collect();
        let mut devices: Vec<_> = made.iter().map(|(_, fs)| fs.device().to_owned()).collect();
        devices.sort();
        devices.dedup();
        assert_eq!(
            devices.len(),
            made.len(),
            "each filesystem has its own loop device"
        );
        for (i, fs) in &made {
            assert_eq!(
                fs::read_to_string(fs.top().join("mine")).expect("read"),
                i.to_string()
            );
        }
        let dirs: Vec<PathBuf> = made.iter().map(|(_, fs)| fs.scratch().to_owned()).collect();
        drop(made);
        for dir in &dirs {
            assert!(!dir.exists(), "{dir:?} was removed on drop");
        }
    }

    #[test]
    fn loop_drop_while_busy_still_cleans_up() {
        let Some(fs) = LoopFs::new(MIN_SIZE).expect("make a loop Btrfs") else {
            return;
        };
        let scratch = fs.scratch().to_owned();
        let device = fs.device().display().to_string();
        let held = fs::File::create(fs.top().join("held")).expect("create");
        drop(fs); // busy: unmounted lazily
        assert!(!scratch.exists(), "{scratch:?} was removed on drop");
        drop(held);
        // The lazy unmount finishes, and autoclear detaches the device, when the kernel
        // drops the last reference, a moment after the close: wait for it, a while.
        let scratch = scratch.display().to_string();
        let mut attached = String::new();
        for _ in 0..100 {
            attached = run("losetup", &["-a"]).expect("losetup -a");
            if !attached.contains(&scratch) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(
            !attached.contains(&scratch),
            "{device} still attached to {scratch} 5 s after the last file closed: {attached}"
        );
    }

    #[test]
    fn loop_fill_reaches_enospc() {
        let Some(fs) = LoopFs::create(
            MIN_SIZE,
            Options {
                mixed: true,
                ..Options::default()
            },
        )
        .expect("make a loop Btrfs") else {
            return;
        };
        let written = fs.fill("", 4 << 20).expect("fill");
        assert!(
            written > 32 << 20,
            "wrote only {written} bytes before ENOSPC"
        );
    }
}
