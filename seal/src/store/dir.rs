//! A directory on any filesystem (ext4, exFAT, NFS, Btrfs): one file per key.
//!
//! A put writes a temporary `.tmp-…` name in the key's directory, fsyncs it, renames it over
//! the key and fsyncs the directory, so a key is either absent, the old bytes or the new
//! bytes, and on disk when `put` returns. Keys are checked ([`super::check_key`]) so nothing
//! is read or written outside the directory; symbolic links inside it are not followed.
//!
//! Each operation runs on a thread of its own and is given up after a deadline: a hung
//! disk or network filesystem (a dead NFS server, a frozen filesystem) makes it fail in
//! words, not hang the caller. The thread itself may stay blocked in the kernel until the
//! filesystem answers; a put given up may then still complete: its object is then either a
//! part no manifest names (removed by `clean`) or a whole, valid manifest.

use std::fs;
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{check_key, check_prefix, Store};
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
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
}

impl DirStore {
    /// The store in `root`, made (mode 0700) when missing; its parent must exist.
    pub fn open(root: &Path) -> Result<DirStore, StoreError> {
        if !root.is_absolute() {
            return Err(StoreError::Io(format!(
                "a sealed directory target must be an absolute path, not {}",
                root.display()
            )));
        }
        match fs::symlink_metadata(root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(StoreError::Io(format!(
                    "{} is not a directory (a symbolic link is not followed); point the target at a directory",
                    root.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = root.parent().unwrap_or(Path::new("/"));
                if !parent.is_dir() {
                    return Err(StoreError::Unreachable(format!(
                        "{} is not there (is the disk mounted?); mount it or make the directory {}",
                        parent.display(),
                        root.display()
                    )));
                }
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(root)
                    .map_err(|e| io_error(root, "make the directory", e))?;
                sync_dir(parent).map_err(|e| io_error(parent, "sync", e))?;
            }
            Err(e) => return Err(io_error(root, "stat", e)),
        }
        Ok(DirStore {
            inner: Arc::new(Inner {
                root: root.to_owned(),
            }),
            deadline: DEADLINE,
        })
    }

    /// Another deadline per operation.
    pub fn with_deadline(mut self, deadline: Duration) -> DirStore {
        self.deadline = deadline;
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
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("tacid-dir-store".into())
            .spawn(move || {
                let _ = tx.send(f(&inner));
            })
            .map_err(|e| StoreError::Io(format!("cannot start a thread to {doing}: {e}")))?;
        match rx.recv_timeout(self.deadline) {
            Ok(result) => result,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(StoreError::Unreachable(format!(
                "{} did not {doing} within {} s (a hung disk or network filesystem?); check the disk or the mount, then try again",
                self.inner.describe(),
                self.deadline.as_secs()
            ))),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(StoreError::Io(format!(
                "{}: the thread to {doing} died",
                self.inner.describe()
            ))),
        }
    }
}

impl Inner {
    fn describe(&self) -> String {
        format!("the directory {}", self.root.display())
    }

    fn path(&self, key: &str) -> Result<PathBuf, StoreError> {
        check_key(key)?;
        Ok(self.root.join(key))
    }

    /// Make the key's directories one by one (no symlink followed), each new one synced
    /// into its parent.
    fn make_dirs(&self, key: &str) -> Result<PathBuf, StoreError> {
        let mut dir = self.root.clone();
        let segments: Vec<&str> = key.split('/').collect();
        for segment in &segments[..segments.len() - 1] {
            let next = dir.join(segment);
            match fs::DirBuilder::new().mode(0o700).create(&next) {
                Ok(()) => sync_dir(&dir).map_err(|e| io_error(&dir, "sync", e))?,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if !fs::symlink_metadata(&next).is_ok_and(|m| m.is_dir()) {
                        return Err(StoreError::Io(format!(
                            "{} is in the way (not a directory); remove it",
                            next.display()
                        )));
                    }
                }
                Err(e) => return Err(io_error(&next, "make the directory", e)),
            }
            dir = next;
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

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        check_prefix(prefix)?;
        let prefix = prefix.to_owned();
        self.bounded(format!("list {prefix}"), move |inner| inner.list(&prefix))
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        let key = key.to_owned();
        self.bounded(format!("delete {key}"), move |inner| inner.delete(&key))
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

impl Inner {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.path(key)?;
        let dir = self.make_dirs(key)?;
        let tmp = dir.join(format!("{TEMP_PREFIX}{}", uuid::Uuid::new_v4().simple()));
        let written = (|| {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(nofollow())
                .open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            sync_dir(&dir)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_error(&path, "write", e));
        }
        Ok(())
    }

    fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, StoreError> {
        let path = self.path(key)?;
        // O_NONBLOCK: a FIFO planted under a key must not block the open.
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(nofollow() | rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&path)
            .map_err(|e| io_error(&path, "open", e))?;
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

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        check_prefix(prefix)?;
        let base = match prefix.rfind('/') {
            Some(i) => &prefix[..=i],
            None => "",
        };
        let mut found = Vec::new();
        walk(&self.root.join(base), base, &mut found)?;
        found.retain(|(k, _)| k.starts_with(prefix));
        found.sort();
        Ok(found)
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        let path = self.path(key)?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(&path, "delete", e)),
        }
        let dir = path.parent().unwrap_or(&self.root).to_owned();
        sync_dir(&dir).map_err(|e| io_error(&dir, "sync", e))?;
        // Directories a delete empties go too (a copy's parts directory); one still used
        // is not empty and stays.
        let mut dir = dir;
        while dir != self.root && fs::remove_dir(&dir).is_ok() {
            dir = dir.parent().unwrap_or(&self.root).to_owned();
        }
        Ok(())
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

/// Every regular file below `dir` (whose key starts with `base`), skipping temporary
/// names and symlinks.
fn walk(dir: &Path, base: &str, found: &mut Vec<(String, u64)>) -> Result<(), StoreError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
            return Ok(())
        }
        Err(e) => return Err(io_error(dir, "list", e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, "list", e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let key = format!("{base}{name}");
        if check_key(&key).is_err() {
            continue;
        }
        let meta = entry
            .metadata()
            .map_err(|e| io_error(&entry.path(), "stat", e))?;
        if meta.is_dir() {
            walk(&entry.path(), &format!("{key}/"), found)?;
        } else if meta.is_file() {
            found.push((key, meta.len()));
        }
    }
    Ok(())
}

fn nofollow() -> i32 {
    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// An io error in words; ENOSPC and EDQUOT are [`StoreError::Full`], ENOENT NotFound.
fn io_error(path: &Path, doing: &str, e: io::Error) -> StoreError {
    let shown = path.display();
    match e.raw_os_error() {
        Some(n) if n == rustix::io::Errno::NOSPC.raw_os_error() || n == rustix::io::Errno::DQUOT.raw_os_error() => {
            StoreError::Full(format!(
                "no space left to {doing} {shown}: {e}; free space there (delete older copies) or use a larger disk"
            ))
        }
        _ if e.kind() == io::ErrorKind::NotFound => {
            StoreError::NotFound(format!("{shown} is not there"))
        }
        Some(n) if n == rustix::io::Errno::LOOP.raw_os_error() => StoreError::Io(format!(
            "{shown} is a symbolic link; the store never follows one: remove it"
        )),
        _ => StoreError::Io(format!("cannot {doing} {shown}: {e}")),
    }
}
