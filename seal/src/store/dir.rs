//! A directory on any filesystem (ext4, exFAT, NFS, Btrfs): one file per key.
//!
//! A put writes a temporary `.tmp-…` name in the key's directory, fsyncs it, renames it over
//! the key and fsyncs the directory, so a key is either absent, the old bytes or the new
//! bytes, and on disk when `put` returns. Keys are checked ([`super::check_key`]), and every
//! path is resolved beneath the directory's own descriptor with `openat2`
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): no symbolic link is followed anywhere in a
//! path, so nothing outside the directory is read, written or removed through one.
//!
//! Each operation, opening the store included, runs on a thread of its own and is given up
//! after a deadline: a hung disk or network filesystem (a dead NFS server, a frozen
//! filesystem) makes it fail in words, not hang the caller. The thread itself may stay
//! blocked in the kernel until the filesystem answers; a put given up may then still
//! complete: its object is then either a part no manifest names (removed by `clean` once
//! old) or a whole, valid manifest.

use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::{check_key, check_prefix, too_many_listed, Object, Store, MAX_LISTED};
use crate::error::StoreError;

/// Files whose name starts with this are puts in flight (or cut short): never listed.
const TEMP_PREFIX: &str = ".tmp-";

/// How long one operation may take before it is given up (a 16 MiB part on a slow USB
/// stick is written and synced well inside).
const DEADLINE: Duration = Duration::from_secs(300);

/// A [`Store`] in a local directory.
#[derive(Debug, Clone)]
pub struct DirStore {
    inner: Arc<Inner>,
    deadline: Duration,
    max_listed: usize,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    /// The directory, opened once: every path is resolved beneath it.
    fd: OwnedFd,
}

/// Resolution of every path below the directory: never above it, never through a link.
fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// A directory opened with [`beneath`] (whose NO_SYMLINKS refuses a link at the last
/// component too, with ELOOP, where O_NOFOLLOW would say ENOTDIR).
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

impl DirStore {
    /// The store in `root`, made (mode 0700) when missing; its parent must exist. Bounded
    /// like every operation: a dead mount fails in words.
    pub fn open(root: &Path) -> Result<DirStore, StoreError> {
        Self::open_within(root, DEADLINE)
    }

    /// [`DirStore::open`] given up after `deadline`, which then bounds each operation too.
    pub fn open_within(root: &Path, deadline: Duration) -> Result<DirStore, StoreError> {
        if !root.is_absolute() {
            return Err(StoreError::Io(format!(
                "a sealed directory target must be an absolute path, not {}",
                root.display()
            )));
        }
        let shown = format!("the directory {}", root.display());
        let path = root.to_owned();
        let fd = bounded(&shown, deadline, "open".into(), move || open_root(&path))?;
        Ok(DirStore {
            inner: Arc::new(Inner {
                root: root.to_owned(),
                fd,
            }),
            deadline,
            max_listed: MAX_LISTED,
        })
    }

    /// Another deadline per operation.
    pub fn with_deadline(mut self, deadline: Duration) -> DirStore {
        self.deadline = deadline;
        self
    }

    /// Another cap on the objects one listing may return (tests of the cap).
    pub fn with_max_listed(mut self, max: usize) -> DirStore {
        self.max_listed = max;
        self
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// `f` on a thread of its own, given up after the deadline.
    fn bounded<T: Send + 'static>(
        &self,
        doing: String,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        bounded(&self.inner.describe(), self.deadline, doing, move || {
            f(&inner)
        })
    }
}

/// `f` on a thread of its own, given up after `deadline`.
fn bounded<T: Send + 'static>(
    shown: &str,
    deadline: Duration,
    doing: String,
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("tacid-dir-store".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| StoreError::Io(format!("cannot start a thread to {doing}: {e}")))?;
    match rx.recv_timeout(deadline) {
        Ok(result) => result,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(StoreError::Unreachable(format!(
            "{shown} did not {doing} within {} s (a hung disk or network filesystem?); check the disk or the mount, then try again",
            deadline.as_secs()
        ))),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(StoreError::Io(format!(
            "{shown}: the thread to {doing} died"
        ))),
    }
}

/// The store's directory, made when missing; never through a link at its last component.
fn open_root(root: &Path) -> Result<OwnedFd, StoreError> {
    let open = || rustix::fs::open(root, dir_flags() | OFlags::NOFOLLOW, Mode::empty());
    match open() {
        Ok(fd) => Ok(fd),
        Err(Errno::LOOP) | Err(Errno::NOTDIR) => Err(StoreError::Io(format!(
            "{} is not a directory (a symbolic link is not followed); point the target at a directory",
            root.display()
        ))),
        Err(Errno::NOENT) => {
            let parent = root.parent().unwrap_or(Path::new("/"));
            if !parent.is_dir() {
                return Err(StoreError::Unreachable(format!(
                    "{} is not there (is the disk mounted?); mount it or make the directory {}",
                    parent.display(),
                    root.display()
                )));
            }
            match rustix::fs::mkdir(root, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(io_error(root, "make the directory", e.into())),
            }
            sync_dir(parent).map_err(|e| io_error(parent, "sync", e))?;
            open().map_err(|e| io_error(root, "open", e.into()))
        }
        Err(e) => Err(io_error(root, "open", e.into())),
    }
}

impl Inner {
    fn describe(&self) -> String {
        format!("the directory {}", self.root.display())
    }

    fn shown(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The directory `rel` below the store ("" is the store's own), resolved beneath it.
    fn open_dir(&self, rel: &str) -> io::Result<OwnedFd> {
        let rel = if rel.is_empty() { "." } else { rel };
        Ok(rustix::fs::openat2(
            &self.fd,
            rel,
            dir_flags(),
            Mode::empty(),
            beneath(),
        )?)
    }

    /// Make the key's directories one by one (no link followed), each new one synced into
    /// its parent; the key's directory.
    fn make_dirs(&self, key: &str) -> Result<OwnedFd, StoreError> {
        let segments: Vec<&str> = key.split('/').collect();
        let mut dir = self
            .open_dir("")
            .map_err(|e| io_error(&self.root, "open", e))?;
        let mut walked = String::new();
        for segment in &segments[..segments.len() - 1] {
            let here = self.shown(&walked);
            walked = if walked.is_empty() {
                (*segment).to_owned()
            } else {
                format!("{walked}/{segment}")
            };
            match rustix::fs::mkdirat(&dir, *segment, Mode::from_raw_mode(0o700)) {
                Ok(()) => rustix::fs::fsync(&dir).map_err(|e| io_error(&here, "sync", e.into()))?,
                Err(Errno::EXIST) => {}
                Err(e) => {
                    return Err(io_error(
                        &self.shown(&walked),
                        "make the directory",
                        e.into(),
                    ))
                }
            }
            dir = match rustix::fs::openat2(&dir, *segment, dir_flags(), Mode::empty(), beneath()) {
                Ok(fd) => fd,
                Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                    return Err(StoreError::Io(format!(
                        "{} is in the way (not a directory; a symbolic link is never followed); remove it",
                        self.shown(&walked).display()
                    )))
                }
                Err(e) => return Err(io_error(&self.shown(&walked), "open", e.into())),
            };
        }
        Ok(dir)
    }
}

impl Store for DirStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        let (key, bytes) = (key.to_owned(), bytes.to_vec());
        self.bounded(format!("store {key}"), move |inner| inner.put(&key, &bytes))
    }

    fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, StoreError> {
        check_key(key)?;
        let key = key.to_owned();
        self.bounded(format!("read {key}"), move |inner| inner.get(&key, max))
    }

    fn list(&self, prefix: &str) -> Result<Vec<Object>, StoreError> {
        check_prefix(prefix)?;
        let prefix = prefix.to_owned();
        let max = self.max_listed;
        self.bounded(format!("list {prefix}"), move |inner| {
            inner.list(&prefix, max)
        })
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        let key = key.to_owned();
        self.bounded(format!("delete {key}"), move |inner| inner.delete(&key))
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn remove_temporaries(&self, grace: Duration) -> Result<u64, StoreError> {
        self.bounded("remove old temporary files".into(), move |inner| {
            let cutoff = SystemTime::now().checked_sub(grace).unwrap_or(UNIX_EPOCH);
            let dir = inner
                .open_dir("")
                .map_err(|e| io_error(&inner.root, "open", e))?;
            inner.remove_temporaries(dir, "", cutoff)
        })
    }
}

/// The directory part of `key` ("" for a top-level key) and its last segment.
fn split_key(key: &str) -> (&str, &str) {
    match key.rfind('/') {
        Some(i) => (&key[..i], &key[i + 1..]),
        None => ("", key),
    }
}

fn modified(st: &rustix::fs::Stat) -> Option<SystemTime> {
    let secs = u64::try_from(st.st_mtime).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, st.st_mtime_nsec as u32 % 1_000_000_000))
}

impl Inner {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.shown(key);
        let dir = self.make_dirs(key)?;
        let (_, name) = split_key(key);
        let tmp = format!("{TEMP_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let written = (|| -> io::Result<()> {
            let fd = rustix::fs::openat(
                &dir,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            let mut f = fs::File::from(fd);
            f.write_all(bytes)?;
            f.sync_all()?;
            rustix::fs::renameat(&dir, tmp.as_str(), &dir, name)?;
            Ok(rustix::fs::fsync(&dir)?)
        })();
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            return Err(io_error(&path, "write", e));
        }
        Ok(())
    }

    fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, StoreError> {
        let path = self.shown(key);
        // O_NONBLOCK: a FIFO planted under a key must not block the open.
        let fd = rustix::fs::openat2(
            &self.fd,
            key,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
            beneath(),
        )
        .map_err(|e| io_error(&path, "open", e.into()))?;
        let file = fs::File::from(fd);
        let meta = file.metadata().map_err(|e| io_error(&path, "stat", e))?;
        if !meta.is_file() {
            return Err(StoreError::Io(format!(
                "{} is not a regular file; remove it",
                path.display()
            )));
        }
        let size = meta.len();
        if size > max {
            return Err(self.too_big(key, size, max));
        }
        let mut bytes = Vec::with_capacity(size as usize);
        file.take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(&path, "read", e))?;
        if bytes.len() as u64 > max {
            return Err(self.too_big(key, bytes.len() as u64, max));
        }
        Ok(bytes)
    }

    fn list(&self, prefix: &str, max: usize) -> Result<Vec<Object>, StoreError> {
        check_prefix(prefix)?;
        let base = match prefix.rfind('/') {
            Some(i) => &prefix[..=i],
            None => "",
        };
        let dir = match self.open_dir(base.trim_end_matches('/')) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) if e.raw_os_error() == Some(Errno::NOTDIR.raw_os_error()) => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(io_error(&self.shown(base), "list", e)),
        };
        let mut found = Vec::new();
        self.walk(dir, base, max, &mut found)?;
        found.retain(|o| o.key.starts_with(prefix));
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    /// Every regular file below `dir` (whose key starts with `base`), skipping temporary
    /// names and links; an error past the listing's cap.
    fn walk(
        &self,
        dir: OwnedFd,
        base: &str,
        max: usize,
        found: &mut Vec<Object>,
    ) -> Result<(), StoreError> {
        let shown = self.shown(base);
        let entries =
            rustix::fs::Dir::read_from(&dir).map_err(|e| io_error(&shown, "list", e.into()))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&shown, "list", e.into()))?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let key = format!("{base}{name}");
            if check_key(&key).is_err() {
                continue;
            }
            let st = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Gone since it was read: not there.
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(io_error(&self.shown(&key), "stat", e.into())),
            };
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    let sub = match rustix::fs::openat2(
                        &dir,
                        name,
                        dir_flags(),
                        Mode::empty(),
                        beneath(),
                    ) {
                        Ok(fd) => fd,
                        Err(Errno::NOENT) | Err(Errno::LOOP) | Err(Errno::NOTDIR) => continue,
                        Err(e) => return Err(io_error(&self.shown(&key), "list", e.into())),
                    };
                    self.walk(sub, &format!("{key}/"), max, found)?;
                }
                FileType::RegularFile => {
                    if found.len() >= max {
                        return Err(too_many_listed(&self.describe(), base, max));
                    }
                    found.push(Object {
                        key,
                        size: st.st_size as u64,
                        modified: modified(&st),
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        let path = self.shown(key);
        let (dir_key, name) = split_key(key);
        let dir = match self.open_dir(dir_key) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(&path, "delete", e)),
        };
        match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(io_error(&path, "delete", e.into())),
        }
        rustix::fs::fsync(&dir).map_err(|e| io_error(&self.shown(dir_key), "sync", e.into()))?;
        // Directories a delete empties go too (a copy's parts directory); one still used
        // is not empty and stays.
        let mut rest = dir_key;
        while !rest.is_empty() {
            let (up, last) = split_key(rest);
            let removed = self
                .open_dir(up)
                .ok()
                .is_some_and(|fd| rustix::fs::unlinkat(&fd, last, AtFlags::REMOVEDIR).is_ok());
            if !removed {
                break;
            }
            rest = up;
        }
        Ok(())
    }

    /// Remove the temporary files below `dir` (at `rel`) last written before `cutoff`.
    fn remove_temporaries(
        &self,
        dir: OwnedFd,
        rel: &str,
        cutoff: SystemTime,
    ) -> Result<u64, StoreError> {
        let shown = self.shown(rel);
        let mut removed = 0;
        let mut names = Vec::new();
        for entry in
            rustix::fs::Dir::read_from(&dir).map_err(|e| io_error(&shown, "list", e.into()))?
        {
            let entry = entry.map_err(|e| io_error(&shown, "list", e.into()))?;
            if let Ok(name) = entry.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        for name in names {
            let Ok(st) = rustix::fs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile
                    if name.starts_with(TEMP_PREFIX)
                        && modified(&st).is_some_and(|t| t < cutoff) =>
                {
                    match rustix::fs::unlinkat(&dir, name.as_str(), AtFlags::empty()) {
                        Ok(()) => removed += 1,
                        Err(Errno::NOENT) => {}
                        Err(e) => return Err(io_error(&shown.join(&name), "delete", e.into())),
                    }
                }
                // Only the store's own directories: key segments.
                FileType::Directory if !name.starts_with('.') && check_key(&name).is_ok() => {
                    let Ok(sub) = rustix::fs::openat2(
                        &dir,
                        name.as_str(),
                        dir_flags(),
                        Mode::empty(),
                        beneath(),
                    ) else {
                        continue;
                    };
                    let rel = if rel.is_empty() {
                        name.clone()
                    } else {
                        format!("{rel}/{name}")
                    };
                    removed += self.remove_temporaries(sub, &rel, cutoff)?;
                }
                _ => {}
            }
        }
        if removed > 0 {
            rustix::fs::fsync(&dir).map_err(|e| io_error(&shown, "sync", e.into()))?;
        }
        Ok(removed)
    }

    fn too_big(&self, key: &str, size: u64, max: u64) -> StoreError {
        StoreError::TooBig {
            store: self.describe(),
            key: key.to_owned(),
            size,
            max,
        }
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// An io error in words; ENOSPC and EDQUOT are [`StoreError::Full`], ENOENT NotFound, a
/// link met on the way (ELOOP, EXDEV from `openat2`) refused in words.
fn io_error(path: &Path, doing: &str, e: io::Error) -> StoreError {
    let shown = path.display();
    match e.raw_os_error() {
        Some(n) if n == Errno::NOSPC.raw_os_error() || n == Errno::DQUOT.raw_os_error() => {
            StoreError::Full(format!(
                "no space left to {doing} {shown}: {e}; free space there (delete older copies) or use a larger disk"
            ))
        }
        _ if e.kind() == io::ErrorKind::NotFound => {
            StoreError::NotFound(format!("{shown} is not there"))
        }
        Some(n) if n == Errno::LOOP.raw_os_error() || n == Errno::XDEV.raw_os_error() => StoreError::Io(format!(
            "{shown} is or goes through a symbolic link; the store never follows one: remove it"
        )),
        _ => StoreError::Io(format!("cannot {doing} {shown}: {e}")),
    }
}
