//! Btrfs subvolume operations, capability style.
//!
//! Open the top of a Btrfs filesystem (subvolume id 5) once as a [`Top`]; every other
//! handle ([`Dir`]) is reached beneath it, one path component at a time, never following a
//! symlink and never leaving it. Raw ioctls through rustix: no C library, a small static
//! binary for the initrd (adr/0006).
//!
//! Durability is the caller's to ask for: [`Dir::commit`] commits the filesystem's
//! current transaction; see `../shared/MACHINE-NOTES.md` for which operations commit.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::SystemTime;

use uuid::Uuid;

/// The top of a Btrfs filesystem (subvolume id 5), opened once.
#[derive(Debug)]
pub struct Top {
    dir: Dir,
}

/// A directory reached beneath a [`Top`] without following symlinks.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

/// What Btrfs says about one subvolume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubvolumeInfo {
    /// The subvolume (tree) id.
    pub id: u64,
    /// The id of the subvolume that holds it (5 for the top level).
    pub parent_id: u64,
    /// The inode number of the directory that holds it, within `parent_id`.
    pub dir_id: u64,
    pub uuid: Uuid,
    /// The UUID of the subvolume it is a snapshot of; `None` for a subvolume made empty.
    pub parent_uuid: Option<Uuid>,
    /// When it was made (Btrfs "otime").
    pub created: SystemTime,
    /// The generation it was made in; and its last change.
    pub created_generation: u64,
    pub generation: u64,
    pub readonly: bool,
}

/// A subvolume directly inside another, by its name there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubvolumeEntry {
    pub name: String,
    pub info: SubvolumeInfo,
}

/// Owner, mode and type of a file or directory, from `fstat`/`statx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub uid: u32,
    pub gid: u32,
    /// Permission bits only (`0o7777`).
    pub mode: u32,
    pub kind: FileKind,
    pub size: u64,
    pub ino: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    Regular,
    Symlink,
    Fifo,
    Other,
}

/// What went wrong, with the operation and the name it was about.
#[derive(Debug, thiserror::Error)]
#[error("{op} {name:?}: {kind}")]
pub struct Error {
    pub op: &'static str,
    pub name: String,
    pub kind: ErrorKind,
    #[source]
    pub source: std::io::Error,
}

/// The classes of failure callers act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    #[error("not found")]
    NotFound,
    #[error("already exists")]
    AlreadyExists,
    #[error("no space left on the filesystem")]
    NoSpace,
    #[error("not a Btrfs subvolume")]
    NotASubvolume,
    #[error("not the top level (subvolume id 5) of a Btrfs filesystem")]
    NotTopLevel,
    #[error("a symlink, or a path leaving the directory handle, was refused")]
    Escapes,
    #[error("not a directory")]
    NotADirectory,
    #[error("permission denied")]
    PermissionDenied,
    #[error("read-only")]
    ReadOnly,
    #[error("still has subvolumes inside it")]
    NotEmpty,
    #[error("too large")]
    TooLarge,
    #[error("would block (not a regular file)")]
    WouldBlock,
    #[error("failed")]
    Other,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Top {
    /// Open `path`, which must be the top level (subvolume id 5) of a Btrfs filesystem.
    pub fn open(path: &Path) -> Result<Top> {
        unimplemented!("{path:?}")
    }

    /// The top level as a directory handle.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Every subvolume of the filesystem whose id is `id` (tree search; needs CAP_SYS_ADMIN).
    pub fn subvolume_info_by_id(&self, id: u64) -> Result<SubvolumeInfo> {
        unimplemented!("{id}")
    }
}

impl Dir {
    /// Open `name`, one path component (no `/`, not `.` or `..`), beneath this directory:
    /// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`,
    /// `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`.
    pub fn open_dir(&self, name: &str) -> Result<Dir> {
        unimplemented!("{name}")
    }

    /// Owner, mode and kind of this directory.
    pub fn stat(&self) -> Result<Stat> {
        unimplemented!()
    }

    /// Owner, mode and kind of `name` inside this directory, without following a symlink.
    pub fn stat_at(&self, name: &str) -> Result<Stat> {
        unimplemented!("{name}")
    }

    /// True when this directory is the root of a subvolume (Btrfs inode 256).
    pub fn is_subvolume_root(&self) -> Result<bool> {
        unimplemented!()
    }

    /// The subvolume this directory is in (`BTRFS_IOC_GET_SUBVOL_INFO`).
    pub fn subvolume_info(&self) -> Result<SubvolumeInfo> {
        unimplemented!()
    }

    /// Snapshot the subvolume whose root is `self` to `dest/name` (`BTRFS_IOC_SNAP_CREATE_V2`),
    /// read-only or writable. Fails with `AlreadyExists` if `name` exists; commits nothing
    /// beyond what the ioctl commits.
    pub fn snapshot_to(&self, dest: &Dir, name: &str, readonly: bool) -> Result<SubvolumeInfo> {
        unimplemented!("{dest:?} {name} {readonly}")
    }

    /// Make an empty subvolume `name` in this directory (`BTRFS_IOC_SUBVOL_CREATE`).
    pub fn create_subvolume(&self, name: &str) -> Result<SubvolumeInfo> {
        unimplemented!("{name}")
    }

    /// Delete the subvolume with id `id` (`BTRFS_IOC_SNAP_DESTROY_V2`, by id); `self` is any
    /// directory on the same filesystem. `NotEmpty` when it holds other subvolumes.
    pub fn delete_subvolume_by_id(&self, id: u64) -> Result<()> {
        unimplemented!("{id}")
    }

    /// Set or clear the read-only flag of the subvolume whose root is `self`.
    pub fn set_readonly(&self, readonly: bool) -> Result<()> {
        unimplemented!("{readonly}")
    }

    /// The subvolumes directly inside the subvolume whose root is `self`, with their names
    /// (tree search of ROOT_REF and ROOT_ITEM; needs CAP_SYS_ADMIN). Includes those in
    /// nested directories (`name` is then the entry's name in its own directory).
    pub fn list_subvolumes(&self) -> Result<Vec<SubvolumeEntry>> {
        unimplemented!()
    }

    /// Swap the names `a` and `b` in this directory in one step (`renameat2(RENAME_EXCHANGE)`).
    pub fn exchange(&self, a: &str, b: &str) -> Result<()> {
        unimplemented!("{a} {b}")
    }

    /// Rename `from` to `to` in this directory, refusing to replace `to` (`RENAME_NOREPLACE`).
    pub fn rename_noreplace(&self, from: &str, to: &str) -> Result<()> {
        unimplemented!("{from} {to}")
    }

    /// Rename `from` to `to` in this directory, replacing a file `to` (plain `renameat`).
    pub fn rename_replace(&self, from: &str, to: &str) -> Result<()> {
        unimplemented!("{from} {to}")
    }

    /// Write `name` durably: a temp file (`.tmp.` prefix) with `mode`, fsync, rename over
    /// `name`, fsync this directory.
    pub fn write_file_durably(&self, name: &str, contents: &[u8], mode: u32) -> Result<()> {
        unimplemented!("{name} {contents:?} {mode}")
    }

    /// Read `name` as untrusted input: opened `O_NOFOLLOW | O_NONBLOCK` (a fifo cannot
    /// block), must be a regular file of at most `max` bytes. `Ok(None)` if it does not
    /// exist. Returns its stat so the caller can check the owner.
    pub fn read_file_limited(&self, name: &str, max: usize) -> Result<Option<(Stat, Vec<u8>)>> {
        unimplemented!("{name} {max}")
    }

    /// Remove the file (not directory) `name`; `Ok(false)` if it did not exist.
    pub fn remove_file(&self, name: &str) -> Result<bool> {
        unimplemented!("{name}")
    }

    /// Make directory `name` with `mode`; `Ok(false)` if it already existed.
    pub fn create_dir(&self, name: &str, mode: u32) -> Result<bool> {
        unimplemented!("{name} {mode}")
    }

    /// fsync this directory (makes renames in it durable; forces a Btrfs commit).
    pub fn sync(&self) -> Result<()> {
        unimplemented!()
    }

    /// Commit the filesystem's current transaction and wait for it (`BTRFS_IOC_SYNC`).
    pub fn commit(&self) -> Result<()> {
        unimplemented!()
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd as _;
        self.fd.as_fd()
    }
}
