//! Btrfs subvolume operations, capability style.
//!
//! Open the top of a Btrfs filesystem (subvolume id 5) once as a [`Top`]; every other
//! handle ([`Dir`]) is reached beneath it, one path component at a time, never following a
//! symlink and never leaving it. Raw ioctls through rustix: no C library, a small static
//! binary for the initrd (adr/0006).
//!
//! Durability is the caller's to ask for: [`Dir::commit`] commits the filesystem's
//! current transaction; see `docs/machine-facts.md` for which operations commit.
//!
//! Names are bytes: every name a caller passes is an `impl AsRef<OsStr>` (a `&str` is one)
//! and every name Btrfs reports is an [`OsString`], exactly as on disk. Users name files and
//! directories with any bytes but NUL and `/`; a name made lossy UTF-8 cannot be opened
//! again. A lossy conversion is for display only, and [`Error`] shows a name escaped.

pub mod changes;
mod nested;
pub mod space;
#[doc(hidden)]
pub mod sys; // the raw ioctls, public for the benches' floor only

pub use changes::{Change, ChangedPath, Changes, ChangesOptions, Counts, Progress, Viewer};
pub use nested::TreeDeleted;
pub use space::{growth_per_day, RootSpace, Space};

use std::ffi::{OsStr, OsString};
use std::mem::offset_of;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;
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
    /// For a subvolume made by `btrfs receive`: the UUID of the subvolume that was sent
    /// (what a copy is checked against); `None` otherwise.
    pub received_uuid: Option<Uuid>,
    /// When it was made (Btrfs "otime"); `None` when Btrfs holds no valid one: none set
    /// (a root item older than the field), before 1970, or nanoseconds out of range.
    pub created: Option<SystemTime>,
    /// The generation it was made in; and its last change.
    pub created_generation: u64,
    pub generation: u64,
    pub readonly: bool,
}

/// A subvolume directly inside another, by its name there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubvolumeEntry {
    /// Its name in the directory that holds it, exactly as on disk.
    pub name: OsString,
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

/// What went wrong, with the operation and the name it was about (shown escaped: quoted,
/// with bytes that are not UTF-8 and control characters as `\xff`-style escapes).
#[derive(Debug, thiserror::Error)]
#[error("{op} {name:?}: {kind}")]
pub struct Error {
    pub op: &'static str,
    pub name: OsString,
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
    #[error("not a regular file (a directory, fifo, device or socket)")]
    NotARegularFile,
    #[error(
        "not a single path component (empty, `.`, `..`, contains `/` or NUL, or over 255 bytes)"
    )]
    InvalidName,
    #[error("failed")]
    Other,
}

pub type Result<T> = std::result::Result<T, Error>;

/// `BTRFS_SUPER_MAGIC`, the `f_type` of a Btrfs filesystem.
const BTRFS_MAGIC: u64 = linux_raw_sys::general::BTRFS_SUPER_MAGIC as u64;
/// The inode number of every subvolume's root directory.
const SUBVOLUME_ROOT_INO: u64 = linux_raw_sys::btrfs::BTRFS_FIRST_FREE_OBJECTID as u64;
const TOP_LEVEL_ID: u64 = linux_raw_sys::btrfs::BTRFS_FS_TREE_OBJECTID as u64;
const ROOT_TREE_ID: u64 = linux_raw_sys::btrfs::BTRFS_ROOT_TREE_OBJECTID as u64;
const ROOT_ITEM_KEY: u8 = linux_raw_sys::btrfs::BTRFS_ROOT_ITEM_KEY as u8;
const ROOT_BACKREF_KEY: u8 = linux_raw_sys::btrfs::BTRFS_ROOT_BACKREF_KEY as u8;
const ROOT_REF_KEY: u8 = linux_raw_sys::btrfs::BTRFS_ROOT_REF_KEY as u8;
const ROOT_SUBVOL_RDONLY: u64 = linux_raw_sys::btrfs::BTRFS_ROOT_SUBVOL_RDONLY as u64;
const SUBVOL_RDONLY: u64 = linux_raw_sys::btrfs::BTRFS_SUBVOL_RDONLY as u64;

/// The prefix of [`Dir::write_file_durably`]'s temporary names (the layout crate's
/// `TEMP_PREFIX`; a test holds them equal, this crate names no tacid paths itself).
pub const TEMP_FILE_PREFIX: &str = ".tmp.";

/// How many temporary names [`Dir::write_temp_file`] tries before it gives up.
const MAX_TEMP_NAMES: usize = 64;

/// A file written and synced under a temporary name by [`Dir::write_temp_file`], waiting
/// for [`Dir::put_temp_file`] to give it its name.
#[derive(Debug)]
#[must_use = "a temporary file stays on disk under its temporary name until it is put in place"]
pub struct TempFile {
    name: String,
}

impl TempFile {
    /// Its temporary name in the directory.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// True for the names [`Dir::write_file_durably`] gives its temporary files:
/// `.tmp.<pid>.<n>`, both numbers decimal digits only.
pub fn is_durable_temp_name(name: &OsStr) -> bool {
    let Some(rest) = name.as_bytes().strip_prefix(TEMP_FILE_PREFIX.as_bytes()) else {
        return false;
    };
    let number = |b: &[u8]| !b.is_empty() && b.len() <= 20 && b.iter().all(u8::is_ascii_digit);
    match rest.iter().position(|&b| b == b'.') {
        Some(dot) => number(&rest[..dot]) && number(&rest[dot + 1..]),
        None => false,
    }
}

/// The longest name one directory entry can have.
pub const NAME_MAX: usize = 255;

impl Error {
    fn new(
        op: &'static str,
        name: impl AsRef<OsStr>,
        kind: ErrorKind,
        source: std::io::Error,
    ) -> Error {
        Error {
            op,
            name: name.as_ref().to_owned(),
            kind,
            source,
        }
    }

    /// From an errno, classified the usual way.
    fn sys(op: &'static str, name: impl AsRef<OsStr>, errno: Errno) -> Error {
        Error::new(op, name, kind_of(errno), std::io::Error::from(errno))
    }

    /// From an errno, with `kind` for the ones this operation gives a specific meaning.
    fn sys_with(
        op: &'static str,
        name: impl AsRef<OsStr>,
        errno: Errno,
        special: &[(Errno, ErrorKind)],
    ) -> Error {
        let kind = special
            .iter()
            .find(|(e, _)| *e == errno)
            .map_or_else(|| kind_of(errno), |(_, k)| *k);
        Error::new(op, name, kind, std::io::Error::from(errno))
    }

    /// A failure found by checking, not by a syscall.
    fn check(op: &'static str, name: impl AsRef<OsStr>, kind: ErrorKind, why: &str) -> Error {
        Error::new(op, name, kind, std::io::Error::other(why.to_owned()))
    }
}

/// The class of a failure from its errno. Operations where an errno means something more
/// specific (EINVAL from a subvolume ioctl) say so with [`Error::sys_with`].
fn kind_of(errno: Errno) -> ErrorKind {
    match errno {
        Errno::NOENT => ErrorKind::NotFound,
        Errno::EXIST => ErrorKind::AlreadyExists,
        Errno::NOSPC | Errno::DQUOT => ErrorKind::NoSpace,
        Errno::PERM | Errno::ACCESS => ErrorKind::PermissionDenied,
        Errno::ROFS => ErrorKind::ReadOnly,
        Errno::NOTEMPTY => ErrorKind::NotEmpty,
        Errno::NOTDIR => ErrorKind::NotADirectory,
        // RESOLVE_NO_SYMLINKS / O_NOFOLLOW give ELOOP; RESOLVE_BENEATH gives EXDEV.
        Errno::LOOP | Errno::XDEV => ErrorKind::Escapes,
        Errno::AGAIN => ErrorKind::WouldBlock,
        Errno::FBIG => ErrorKind::TooLarge,
        Errno::NAMETOOLONG => ErrorKind::InvalidName,
        _ => ErrorKind::Other,
    }
}

/// Refuse anything but one plain path component, before any syscall sees it. Any other
/// bytes are a name: Linux names are bytes, not text.
fn check_name(op: &'static str, name: &OsStr) -> Result<()> {
    let bytes = name.as_bytes();
    let why = if bytes.is_empty() {
        "the name is empty"
    } else if bytes == b"." || bytes == b".." {
        "`.` and `..` are not names of entries"
    } else if bytes.contains(&b'/') {
        "the name contains `/`; give one path component"
    } else if bytes.contains(&0) {
        "the name contains a NUL byte"
    } else if bytes.len() > NAME_MAX {
        "the name is longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(Error::check(op, name, ErrorKind::InvalidName, why))
}

/// The field widths of `struct stat` differ per architecture; these are all widening.
#[allow(clippy::unnecessary_cast)]
fn stat_of(st: &rustix::fs::Stat) -> Stat {
    let kind = match FileType::from_raw_mode(st.st_mode as _) {
        FileType::Directory => FileKind::Directory,
        FileType::RegularFile => FileKind::Regular,
        FileType::Symlink => FileKind::Symlink,
        FileType::Fifo => FileKind::Fifo,
        _ => FileKind::Other,
    };
    Stat {
        uid: st.st_uid as u32,
        gid: st.st_gid as u32,
        mode: (st.st_mode as u32) & 0o7777,
        kind,
        size: st.st_size as u64,
        ino: st.st_ino as u64,
    }
}

fn is_btrfs(fd: BorrowedFd<'_>) -> std::result::Result<bool, Errno> {
    #[allow(clippy::unnecessary_cast)]
    let magic = rustix::fs::fstatfs(fd)?.f_type as u64;
    Ok(magic == BTRFS_MAGIC)
}

fn uuid_or_none(bytes: [u8; 16]) -> Option<Uuid> {
    let uuid = Uuid::from_bytes(bytes);
    (!uuid.is_nil()).then_some(uuid)
}

/// A Btrfs timespec as a time. Its seconds are the kernel's signed `time64_t` stored in
/// 64 unsigned bits: one above `i64::MAX` is before 1970, refused rather than read as a
/// far future (or an overflow). All zero is "not set", as `btrfs subvolume show` says.
fn time_of(sec: u64, nsec: u32) -> Option<SystemTime> {
    if (sec, nsec) == (0, 0) || nsec > 999_999_999 || i64::try_from(sec).is_err() {
        return None;
    }
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(sec, nsec))
}

/// Read a little-endian integer of `N` bytes at `at`, or zero past the end (old, shorter
/// root items lack the newer fields).
fn le<const N: usize>(data: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    if let Some(src) = data.get(at..at + N) {
        bytes[..N].copy_from_slice(src);
    }
    u64::from_le_bytes(bytes)
}

fn bytes16(data: &[u8], at: usize) -> [u8; 16] {
    let mut out = [0u8; 16];
    if let Some(src) = data.get(at..at + 16) {
        out.copy_from_slice(src);
    }
    out
}

/// The fields of an on-disk `btrfs_root_item` that [`SubvolumeInfo`] carries.
#[derive(Debug, Clone, Copy)]
struct RootItem {
    generation: u64,
    flags: u64,
    refs: u64,
    uuid: [u8; 16],
    parent_uuid: [u8; 16],
    received_uuid: [u8; 16],
    otransid: u64,
    otime: (u64, u32),
}

impl RootItem {
    fn parse(data: &[u8]) -> RootItem {
        use linux_raw_sys::btrfs::{btrfs_root_item as R, btrfs_timespec as T};
        let otime = offset_of!(R, otime);
        let generation = le::<8>(data, offset_of!(R, generation));
        // An item last written by a kernel that predates the UUID fields has a stale
        // generation_v2; the kernel then treats those fields as zero, and so do we.
        if le::<8>(data, offset_of!(R, generation_v2)) != generation {
            return RootItem {
                generation,
                flags: le::<8>(data, offset_of!(R, flags)),
                refs: le::<4>(data, offset_of!(R, refs)),
                uuid: [0; 16],
                parent_uuid: [0; 16],
                received_uuid: [0; 16],
                otransid: 0,
                otime: (0, 0),
            };
        }
        RootItem {
            generation,
            flags: le::<8>(data, offset_of!(R, flags)),
            refs: le::<4>(data, offset_of!(R, refs)),
            uuid: bytes16(data, offset_of!(R, uuid)),
            parent_uuid: bytes16(data, offset_of!(R, parent_uuid)),
            received_uuid: bytes16(data, offset_of!(R, received_uuid)),
            otransid: le::<8>(data, offset_of!(R, otransid)),
            otime: (
                le::<8>(data, otime + offset_of!(T, sec)),
                le::<4>(data, otime + offset_of!(T, nsec)) as u32,
            ),
        }
    }

    fn info(&self, id: u64, parent_id: u64, dir_id: u64) -> SubvolumeInfo {
        SubvolumeInfo {
            id,
            parent_id,
            dir_id,
            uuid: Uuid::from_bytes(self.uuid),
            parent_uuid: uuid_or_none(self.parent_uuid),
            received_uuid: uuid_or_none(self.received_uuid),
            created: time_of(self.otime.0, self.otime.1),
            created_generation: self.otransid,
            generation: self.generation,
            readonly: self.flags & ROOT_SUBVOL_RDONLY != 0,
        }
    }
}

/// A `btrfs_root_ref` (ROOT_REF and ROOT_BACKREF items): the directory and the name.
fn parse_root_ref(data: &[u8]) -> Option<(u64, OsString)> {
    use linux_raw_sys::btrfs::btrfs_root_ref as R;
    let name_len = le::<2>(data, offset_of!(R, name_len)) as usize;
    let start = std::mem::size_of::<R>();
    let name = data.get(start..start + name_len)?;
    Some((
        le::<8>(data, offset_of!(R, dirid)),
        OsStr::from_bytes(name).to_owned(),
    ))
}

fn full_key(id: u64, item_type: u8) -> sys::SearchKey {
    sys::SearchKey {
        tree_id: ROOT_TREE_ID,
        min: (id, item_type, 0),
        max: (id, item_type, u64::MAX),
    }
}

impl Top {
    /// Open `path`, which must be the top level (subvolume id 5) of a Btrfs filesystem.
    /// `path` comes from configuration (the one ambient path); symlinks on the way to it
    /// are followed, nothing beneath it ever is.
    pub fn open(path: &Path) -> Result<Top> {
        let shown = path.display().to_string();
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::sys("open the top of the Btrfs filesystem", &shown, e))?;
        Top::from_fd(fd).map_err(|mut e| {
            e.name = shown.into();
            e
        })
    }

    /// Take an already open directory (e.g. passed in by a service manager); the same
    /// checks as [`Top::open`].
    pub fn from_fd(fd: OwnedFd) -> Result<Top> {
        const OP: &str = "check the top of the Btrfs filesystem";
        if !is_btrfs(fd.as_fd()).map_err(|e| Error::sys(OP, "", e))? {
            return Err(Error::check(
                OP,
                "",
                ErrorKind::NotTopLevel,
                "not on a Btrfs filesystem",
            ));
        }
        let dir = Dir { fd };
        let tree = dir.subvolume_id()?;
        if tree != TOP_LEVEL_ID || !dir.is_subvolume_root()? {
            let why = format!(
                "this is subvolume {tree}, not the top level; mount the filesystem with \
                 -o subvolid=5 and open that mount point"
            );
            return Err(Error::check(OP, "", ErrorKind::NotTopLevel, &why));
        }
        Ok(Top { dir })
    }

    /// Another handle on the top level (for work done on another thread).
    pub fn try_clone(&self) -> Result<Top> {
        Ok(Top {
            dir: self.dir.try_clone()?,
        })
    }

    /// The top level as a directory handle.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Every subvolume of the filesystem whose id is `id` (tree search; needs CAP_SYS_ADMIN).
    pub fn subvolume_info_by_id(&self, id: u64) -> Result<SubvolumeInfo> {
        const OP: &str = "look up subvolume";
        let shown = id.to_string();
        let mut search = sys::TreeSearch::new();
        let mut item = None;
        let mut backref = None;
        let key = sys::SearchKey {
            tree_id: ROOT_TREE_ID,
            min: (id, ROOT_ITEM_KEY, 0),
            max: (id, ROOT_BACKREF_KEY, u64::MAX),
        };
        search
            .for_each(self.dir.fd.as_fd(), key, |found| {
                match found.item_type as u8 {
                    ROOT_ITEM_KEY => item = Some(RootItem::parse(found.data)),
                    ROOT_BACKREF_KEY if backref.is_none() => {
                        backref =
                            parse_root_ref(found.data).map(|(dir_id, _)| (found.offset, dir_id));
                    }
                    _ => {}
                }
            })
            .map_err(|e| Error::sys(OP, &shown, e))?;
        // A deleted subvolume keeps its root item (refs 0) until the cleaner drops it.
        match item {
            Some(item) if item.refs > 0 && (backref.is_some() || id == TOP_LEVEL_ID) => {
                let (parent_id, dir_id) = backref.unwrap_or((0, 0));
                Ok(item.info(id, parent_id, dir_id))
            }
            _ => Err(Error::check(
                OP,
                &shown,
                ErrorKind::NotFound,
                "no subvolume has this id",
            )),
        }
    }
}

/// Names for unique temporary files: pid + a per-process counter.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Dir {
    /// Open the directory at `path`, an absolute path from root's configuration (a copy
    /// target): `O_DIRECTORY | O_NOFOLLOW`, so its last component is never a symlink. On any
    /// filesystem; [`Dir::is_on_btrfs`] says which.
    pub fn open_configured(path: &Path) -> Result<Dir> {
        const OP: &str = "open configured directory";
        let shown = path.display().to_string();
        if !path.is_absolute() {
            return Err(Error::check(
                OP,
                &shown,
                ErrorKind::InvalidName,
                "not an absolute path",
            ));
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => Ok(Dir { fd }),
            Err(Errno::NOTDIR)
                if rustix::fs::lstat(path)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink) =>
            {
                Err(Error::sys(OP, &shown, Errno::LOOP))
            }
            Err(e) => Err(Error::sys(OP, &shown, e)),
        }
    }

    /// Open `name`, one path component (no `/`, not `.` or `..`), beneath this directory:
    /// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`,
    /// `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`.
    pub fn open_dir(&self, name: impl AsRef<OsStr>) -> Result<Dir> {
        const OP: &str = "open directory";
        let name = name.as_ref();
        check_name(OP, name)?;
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        // openat2 answers EAGAIN when a rename raced the lookup; it is safe to ask again.
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(&self.fd, name, flags, Mode::empty(), resolve) {
                Ok(fd) => return Ok(Dir { fd }),
                Err(Errno::AGAIN) if tries < 16 => tries += 1,
                // O_DIRECTORY wins over O_NOFOLLOW: a symlink gives ENOTDIR, not ELOOP.
                Err(Errno::NOTDIR)
                    if rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(
                        |st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink,
                    ) =>
                {
                    return Err(Error::sys(OP, name, Errno::LOOP));
                }
                Err(e) => return Err(Error::sys(OP, name, e)),
            }
        }
    }

    /// Another handle on the same directory.
    pub fn try_clone(&self) -> Result<Dir> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| Error::new("duplicate handle", "", ErrorKind::Other, e))?;
        Ok(Dir { fd })
    }

    /// Owner, mode and kind of this directory.
    pub fn stat(&self) -> Result<Stat> {
        rustix::fs::fstat(&self.fd)
            .map(|st| stat_of(&st))
            .map_err(|e| Error::sys("stat", "", e))
    }

    /// Owner, mode and kind of `name` inside this directory, without following a symlink.
    pub fn stat_at(&self, name: impl AsRef<OsStr>) -> Result<Stat> {
        const OP: &str = "stat";
        let name = name.as_ref();
        check_name(OP, name)?;
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .map(|st| stat_of(&st))
            .map_err(|e| Error::sys(OP, name, e))
    }

    /// True when this directory is the root of a subvolume (Btrfs inode 256).
    pub fn is_subvolume_root(&self) -> Result<bool> {
        const OP: &str = "check for a subvolume root";
        let btrfs = is_btrfs(self.fd.as_fd()).map_err(|e| Error::sys(OP, "", e))?;
        Ok(btrfs && self.stat()?.ino == SUBVOLUME_ROOT_INO)
    }

    /// The id of the subvolume this directory is in (`BTRFS_IOC_INO_LOOKUP`; no capability
    /// needed).
    pub fn subvolume_id(&self) -> Result<u64> {
        sys::tree_id(self.fd.as_fd()).map_err(|e| {
            Error::sys_with(
                "look up the subvolume id",
                "",
                e,
                &[(Errno::NOTTY, ErrorKind::NotASubvolume)],
            )
        })
    }

    /// The subvolume this directory is in (`BTRFS_IOC_GET_SUBVOL_INFO`).
    pub fn subvolume_info(&self) -> Result<SubvolumeInfo> {
        let a = sys::get_subvol_info(self.fd.as_fd()).map_err(|e| {
            Error::sys_with(
                "read subvolume info",
                "",
                e,
                &[(Errno::NOTTY, ErrorKind::NotASubvolume)],
            )
        })?;
        Ok(SubvolumeInfo {
            id: a.treeid,
            parent_id: a.parent_id,
            dir_id: a.dirid,
            uuid: Uuid::from_bytes(a.uuid),
            parent_uuid: uuid_or_none(a.parent_uuid),
            received_uuid: uuid_or_none(a.received_uuid),
            created: time_of(a.otime.sec, a.otime.nsec),
            created_generation: a.otransid,
            generation: a.generation,
            readonly: a.flags & ROOT_SUBVOL_RDONLY != 0,
        })
    }

    /// When anything in the subvolume this directory is in last changed: the transaction
    /// it changed in and the time, in nanoseconds since the epoch (the root item's
    /// `ctransid` and `ctime`, from `BTRFS_IOC_GET_SUBVOL_INFO`, which reads the root item in
    /// memory). Btrfs sets both whenever it updates any inode of the subvolume — an entry
    /// added, removed or renamed in any of its directories, a file written — before any
    /// commit, and the time from the fine-grained real-time clock, so two changes are told
    /// apart even within one transaction.
    pub fn subvolume_last_change(&self) -> Result<(u64, u64)> {
        let a = sys::get_subvol_info(self.fd.as_fd()).map_err(|e| {
            Error::sys_with(
                "read subvolume info",
                "",
                e,
                &[(Errno::NOTTY, ErrorKind::NotASubvolume)],
            )
        })?;
        let nanos = a
            .ctime
            .sec
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(a.ctime.nsec));
        Ok((a.ctransid, nanos))
    }

    fn require_subvolume_root(&self, op: &'static str) -> Result<()> {
        if self.is_subvolume_root()? {
            Ok(())
        } else {
            Err(Error::check(
                op,
                "",
                ErrorKind::NotASubvolume,
                "this directory is not the root of a subvolume",
            ))
        }
    }

    /// Snapshot the subvolume whose root is `self` to `dest/name` (`BTRFS_IOC_SNAP_CREATE_V2`),
    /// read-only or writable. Fails with `AlreadyExists` if `name` exists; commits nothing
    /// beyond what the ioctl commits.
    pub fn snapshot_to(
        &self,
        dest: &Dir,
        name: impl AsRef<OsStr>,
        readonly: bool,
    ) -> Result<SubvolumeInfo> {
        const OP: &str = "snapshot to";
        let name = name.as_ref();
        check_name(OP, name)?;
        // The kernel snapshots the subvolume *containing* the source fd, so a plain
        // directory would silently snapshot its whole subvolume: refuse it here.
        self.require_subvolume_root(OP).map_err(|mut e| {
            e.name = name.to_owned();
            e
        })?;
        let flags = if readonly { SUBVOL_RDONLY } else { 0 };
        sys::snap_create(dest.fd.as_fd(), self.fd.as_fd(), name, flags).map_err(|e| {
            // EXDEV here is "source on another filesystem", not an escape.
            Error::sys_with(
                OP,
                name,
                e,
                &[
                    (Errno::XDEV, ErrorKind::Other),
                    (Errno::NOTTY, ErrorKind::NotASubvolume),
                ],
            )
        })?;
        dest.open_dir(name)?.subvolume_info()
    }

    /// Make an empty subvolume `name` in this directory (`BTRFS_IOC_SUBVOL_CREATE`).
    pub fn create_subvolume(&self, name: impl AsRef<OsStr>) -> Result<SubvolumeInfo> {
        const OP: &str = "create subvolume";
        let name = name.as_ref();
        check_name(OP, name)?;
        sys::subvol_create(self.fd.as_fd(), name).map_err(|e| {
            Error::sys_with(OP, name, e, &[(Errno::NOTTY, ErrorKind::NotASubvolume)])
        })?;
        self.open_dir(name)?.subvolume_info()
    }

    /// Delete the subvolume with id `id` (`BTRFS_IOC_SNAP_DESTROY_V2`, by id); `self` is any
    /// directory on the same filesystem. `NotEmpty` when it holds other subvolumes.
    pub fn delete_subvolume_by_id(&self, id: u64) -> Result<()> {
        const OP: &str = "delete subvolume";
        let shown = id.to_string();
        if id < SUBVOLUME_ROOT_INO {
            return Err(Error::check(
                OP,
                &shown,
                ErrorKind::NotASubvolume,
                "ids below 256 are not deletable subvolumes",
            ));
        }
        sys::snap_destroy_by_id(self.fd.as_fd(), id).map_err(|e| {
            Error::sys_with(OP, &shown, e, &[(Errno::NOTTY, ErrorKind::NotASubvolume)])
        })
    }

    /// Set or clear the read-only flag of the subvolume whose root is `self`.
    pub fn set_readonly(&self, readonly: bool) -> Result<()> {
        const OP: &str = "set the read-only flag";
        self.require_subvolume_root(OP)?;
        let special = [
            (Errno::INVAL, ErrorKind::NotASubvolume),
            (Errno::NOTTY, ErrorKind::NotASubvolume),
        ];
        let flags = sys::subvol_getflags(self.fd.as_fd())
            .map_err(|e| Error::sys_with(OP, "", e, &special))?;
        let wanted = if readonly {
            flags | SUBVOL_RDONLY
        } else {
            flags & !SUBVOL_RDONLY
        };
        if wanted == flags {
            return Ok(());
        }
        sys::subvol_setflags(self.fd.as_fd(), wanted)
            .map_err(|e| Error::sys_with(OP, "", e, &special))
    }

    /// Whether Btrfs still holds the tree of subvolume `id`: true for a live subvolume, and
    /// for a deleted one until the cleaner has freed its space (tree search of its
    /// ROOT_ITEM; needs CAP_SYS_ADMIN). Any handle on the filesystem will do.
    pub fn subvolume_tree_exists(&self, id: u64) -> Result<bool> {
        let mut found = false;
        let key = sys::SearchKey {
            tree_id: ROOT_TREE_ID,
            min: (id, ROOT_ITEM_KEY, 0),
            max: (id, ROOT_ITEM_KEY, u64::MAX),
        };
        sys::TreeSearch::new()
            .for_each(self.fd.as_fd(), key, |item| {
                found |= item.item_type as u8 == ROOT_ITEM_KEY;
            })
            .map_err(|e| Error::sys("look up a subvolume's tree", id.to_string(), e))?;
        Ok(found)
    }

    /// The subvolumes directly inside the subvolume whose root is `self`, with their names
    /// (tree search of ROOT_REF and ROOT_ITEM; needs CAP_SYS_ADMIN). Includes those in
    /// nested directories (`name` is then the entry's name in its own directory, and
    /// `info.dir_id` is not 256). Sorted by id.
    pub fn list_subvolumes(&self) -> Result<Vec<SubvolumeEntry>> {
        const OP: &str = "list subvolumes";
        self.require_subvolume_root(OP)?;
        let parent = self.subvolume_id()?;
        let fd = self.fd.as_fd();
        let mut search = sys::TreeSearch::new();

        // ROOT_REF items (parent, 156, child) are contiguous: one pass names every child.
        let mut children: Vec<(u64, u64, OsString)> = Vec::new();
        search
            .for_each(fd, full_key(parent, ROOT_REF_KEY), |item| {
                if let Some((dir_id, name)) = parse_root_ref(item.data) {
                    children.push((item.offset, dir_id, name));
                }
            })
            .map_err(|e| Error::sys(OP, "", e))?;
        if children.is_empty() {
            return Ok(Vec::new());
        }
        children.sort_by_key(|c| c.0);

        // Their ROOT_ITEMs, in one range pass from the lowest child id to the highest
        // (snapshots of one store are mostly contiguous ids); items of other subvolumes in
        // between are skipped.
        let first = children[0].0;
        let last = children[children.len() - 1].0;
        let mut items: Vec<(u64, RootItem)> = Vec::with_capacity(children.len());
        let range = sys::SearchKey {
            tree_id: ROOT_TREE_ID,
            min: (first, ROOT_ITEM_KEY, 0),
            max: (last, ROOT_ITEM_KEY, u64::MAX),
        };
        search
            .for_each(fd, range, |item| {
                if item.item_type as u8 == ROOT_ITEM_KEY {
                    items.push((item.objectid, RootItem::parse(item.data)));
                }
            })
            .map_err(|e| Error::sys(OP, "", e))?;

        let mut entries = Vec::with_capacity(children.len());
        let mut items = items.into_iter().peekable();
        for (id, dir_id, name) in children {
            while items.next_if(|(item_id, _)| *item_id < id).is_some() {}
            // A child deleted between the two passes has no root item any more: skip it.
            if let Some((_, item)) = items.next_if(|(item_id, _)| *item_id == id) {
                entries.push(SubvolumeEntry {
                    name,
                    info: item.info(id, parent, dir_id),
                });
            }
        }
        Ok(entries)
    }

    /// Write the send stream of the read-only subvolume whose root is `self` into `out`
    /// (`BTRFS_IOC_SEND`), incremental against `parent` (a read-only subvolume root on the
    /// same filesystem) when given. Blocks until the stream is written or the reader is
    /// gone (`EPIPE`, kind `Other`). Needs CAP_SYS_ADMIN.
    pub fn send(&self, out: BorrowedFd<'_>, parent: Option<&Dir>) -> Result<()> {
        const OP: &str = "send";
        self.require_subvolume_root(OP)?;
        let parent = match parent {
            Some(p) => {
                p.require_subvolume_root(OP)?;
                Some(p.subvolume_id()?)
            }
            None => None,
        };
        sys::send(self.fd.as_fd(), out, parent)
            .map_err(|e| Error::sys_with(OP, "", e, &[(Errno::NOTTY, ErrorKind::NotASubvolume)]))
    }

    /// The names in this directory, but `.` and `..`, exactly as on disk.
    pub fn entry_names(&self) -> Result<Vec<OsString>> {
        nested::entries(self.fd.as_fd()).map_err(|e| Error::sys("read the directory", "", e))
    }

    /// True when this directory is on a Btrfs filesystem (`fstatfs`).
    pub fn is_on_btrfs(&self) -> Result<bool> {
        is_btrfs(self.fd.as_fd()).map_err(|e| Error::sys("statfs", "", e))
    }

    /// The UUID of the Btrfs filesystem this directory is on (`BTRFS_IOC_FS_INFO`'s fsid):
    /// two directories are on the same filesystem exactly when theirs are equal, whichever
    /// subvolume each is in (`st_dev` differs per subvolume).
    pub fn filesystem_uuid(&self) -> Result<uuid::Uuid> {
        sys::fs_uuid(self.fd.as_fd())
            .map(uuid::Uuid::from_bytes)
            .map_err(|e| Error::sys("read the filesystem's UUID", "", e))
    }

    /// Bytes an unprivileged writer could still use on this directory's filesystem
    /// (`fstatvfs`'s `f_bavail`).
    pub fn free_bytes(&self) -> Result<u64> {
        let st = rustix::fs::fstatvfs(&self.fd).map_err(|e| Error::sys("statvfs", "", e))?;
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }

    /// Swap the names `a` and `b` in this directory in one step (`renameat2(RENAME_EXCHANGE)`).
    pub fn exchange(&self, a: impl AsRef<OsStr>, b: impl AsRef<OsStr>) -> Result<()> {
        self.rename_with(
            "exchange",
            a.as_ref(),
            self,
            b.as_ref(),
            RenameFlags::EXCHANGE,
        )
    }

    /// Rename `from` to `to` in this directory, refusing to replace `to` (`RENAME_NOREPLACE`).
    pub fn rename_noreplace(&self, from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> Result<()> {
        self.rename_with(
            "rename (no replace)",
            from.as_ref(),
            self,
            to.as_ref(),
            RenameFlags::NOREPLACE,
        )
    }

    /// Rename `from` to `to` in this directory, replacing a file `to` (plain `renameat`).
    pub fn rename_replace(&self, from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> Result<()> {
        self.rename_with(
            "rename",
            from.as_ref(),
            self,
            to.as_ref(),
            RenameFlags::empty(),
        )
    }

    /// Move `from` in this directory to `to` in `dest` (on the same filesystem), refusing to
    /// replace anything (`RENAME_NOREPLACE`). Btrfs moves a subvolume into another subvolume
    /// this way; any other inode only within its own subvolume.
    pub fn move_noreplace(
        &self,
        from: impl AsRef<OsStr>,
        dest: &Dir,
        to: impl AsRef<OsStr>,
    ) -> Result<()> {
        self.rename_with(
            "move (no replace)",
            from.as_ref(),
            dest,
            to.as_ref(),
            RenameFlags::NOREPLACE,
        )
    }

    fn rename_with(
        &self,
        op: &'static str,
        from: &OsStr,
        dest: &Dir,
        to: &OsStr,
        flags: RenameFlags,
    ) -> Result<()> {
        check_name(op, from)?;
        check_name(op, to)?;
        rustix::fs::renameat_with(&self.fd, from, &dest.fd, to, flags).map_err(|e| {
            let mut both = from.to_owned();
            both.push(" -> ");
            both.push(to);
            Error::sys(op, both, e)
        })
    }

    /// Write `name` durably: a temp file (`.tmp.` prefix) with `mode`, fsync, rename over
    /// `name`, fsync this directory. On failure the temp file is removed and `name` is
    /// untouched. The two halves are [`Dir::write_temp_file`] and [`Dir::put_temp_file`].
    pub fn write_file_durably(
        &self,
        name: impl AsRef<OsStr>,
        contents: &[u8],
        mode: u32,
    ) -> Result<()> {
        let name = name.as_ref();
        let temp = self.write_temp_file(name, contents, mode)?;
        self.put_temp_file(temp, name)
    }

    /// The first half of [`Dir::write_file_durably`]: `contents` in a new file of exactly
    /// `mode` under a temporary name (`.tmp.<pid>.<n>`), synced, so that only the rename is
    /// left. `for_name` is the name it is meant for (for messages).
    ///
    /// A temporary name can be taken already: a process cut short between its temp and its
    /// rename leaves that file, and where pids repeat (an initrd, boot after boot) the next
    /// process with the same pid reaches the same name. No live process other than this one
    /// has this pid, and this process never uses a counter twice, so a regular file under
    /// the name is such a leftover: it is removed and the name taken. Anything else there
    /// (a directory, a symlink) is not followed and not touched; the next name is tried.
    pub fn write_temp_file(
        &self,
        for_name: impl AsRef<OsStr>,
        contents: &[u8],
        mode: u32,
    ) -> Result<TempFile> {
        const OP: &str = "write durably";
        let for_name = for_name.as_ref();
        check_name(OP, for_name)?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let open = |temp: &str| {
            rustix::fs::openat(&self.fd, temp, flags, Mode::from_raw_mode(mode & 0o7777))
        };
        for _ in 0..MAX_TEMP_NAMES {
            let temp = format!(
                "{TEMP_FILE_PREFIX}{}.{}",
                std::process::id(),
                TEMP_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let file = match open(&temp) {
                Ok(file) => file,
                Err(Errno::EXIST) => {
                    if !self.remove_if_regular_file(&temp)? {
                        continue;
                    }
                    match open(&temp) {
                        Ok(file) => file,
                        Err(Errno::EXIST) => continue,
                        Err(e) => return Err(Error::sys(OP, for_name, e)),
                    }
                }
                Err(e) => return Err(Error::sys(OP, for_name, e)),
            };
            let written = (|| {
                // The umask may have narrowed the mode given to openat; set it exactly.
                rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o7777))?;
                let mut rest = contents;
                while !rest.is_empty() {
                    match rustix::io::write(&file, rest) {
                        Ok(0) => return Err(Errno::NOSPC),
                        Ok(n) => rest = &rest[n..],
                        Err(Errno::INTR) => {}
                        Err(e) => return Err(e),
                    }
                }
                rustix::fs::fsync(&file)
            })();
            drop(file);
            if let Err(e) = written {
                let _ = rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty());
                return Err(Error::sys(OP, for_name, e));
            }
            return Ok(TempFile { name: temp });
        }
        Err(Error::check(
            OP,
            for_name,
            ErrorKind::Other,
            &format!(
                "{MAX_TEMP_NAMES} temporary names in a row are taken by something that is not \
                 a file (directories or symlinks named {TEMP_FILE_PREFIX}<pid>.<n>); remove them"
            ),
        ))
    }

    /// The second half of [`Dir::write_file_durably`]: rename `temp` over `name`, then fsync
    /// this directory. On failure the temp file is removed and `name` is untouched.
    pub fn put_temp_file(&self, temp: TempFile, name: impl AsRef<OsStr>) -> Result<()> {
        const OP: &str = "write durably";
        let name = name.as_ref();
        check_name(OP, name)?;
        if let Err(e) = rustix::fs::renameat(&self.fd, temp.name.as_str(), &self.fd, name) {
            let _ = rustix::fs::unlinkat(&self.fd, temp.name.as_str(), AtFlags::empty());
            return Err(Error::sys(OP, name, e));
        }
        self.sync().map_err(|mut e| {
            e.op = OP;
            e.name = name.to_owned();
            e
        })
    }

    /// Remove every temporary file of [`Dir::write_file_durably`] in this directory (a
    /// regular file named `.tmp.<pid>.<n>`, [`is_durable_temp_name`]): what writes cut short
    /// between their temp and their rename left. Symlinks, directories and other names are
    /// left alone and never followed. Not durable until a commit. Returns the names removed.
    ///
    /// Only for a directory where nothing else is writing durably at the time (a process's
    /// start, before its own first write).
    pub fn remove_leftover_temp_files(&self) -> Result<Vec<OsString>> {
        let mut removed = Vec::new();
        for name in self.entry_names()? {
            if is_durable_temp_name(&name) && self.remove_if_regular_file(&name)? {
                removed.push(name);
            }
        }
        Ok(removed)
    }

    /// Unlink `name` if it is a regular file (looked at without following a symlink);
    /// `Ok(true)` when it is gone, `Ok(false)` when something else is there.
    fn remove_if_regular_file(&self, name: impl AsRef<OsStr>) -> Result<bool> {
        const OP: &str = "remove a leftover temporary file";
        let name = name.as_ref();
        match self.stat_at(name) {
            Ok(st) if st.kind == FileKind::Regular => {}
            Ok(_) => return Ok(false),
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(e),
        }
        // Between the look and the unlink only this directory's owner can swap the entry;
        // unlinkat never follows a symlink and refuses a directory, so nothing else goes.
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(true),
            Err(Errno::ISDIR) | Err(Errno::PERM) => Ok(false),
            Err(e) => Err(Error::sys(OP, name, e)),
        }
    }

    /// Read `name` as untrusted input: opened `O_NOFOLLOW | O_NONBLOCK` (a fifo cannot
    /// block), must be a regular file of at most `max` bytes. `Ok(None)` if it does not
    /// exist. Returns its stat so the caller can check the owner.
    pub fn read_file_limited(
        &self,
        name: impl AsRef<OsStr>,
        max: usize,
    ) -> Result<Option<(Stat, Vec<u8>)>> {
        const OP: &str = "read";
        let name = name.as_ref();
        check_name(OP, name)?;
        // Look before opening: opening a device node can have effects of its own.
        let before = match self.stat_at(name) {
            Ok(st) => st,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let not_regular = |st: &Stat| {
            let kind = if st.kind == FileKind::Symlink {
                ErrorKind::Escapes
            } else {
                ErrorKind::NotARegularFile
            };
            Error::check(
                OP,
                name,
                kind,
                &format!("it is a {:?}, not a regular file", st.kind),
            )
        };
        if before.kind != FileKind::Regular {
            return Err(not_regular(&before));
        }
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        // Without an access time: an update of it is a change of the subvolume (its root
        // item's last-change stamps, the store's generation), and a read is none. Only the
        // owner or CAP_FOWNER may ask for that; anybody else reads the usual way.
        let opened =
            match rustix::fs::openat(&self.fd, name, flags | OFlags::NOATIME, Mode::empty()) {
                Err(Errno::PERM) => rustix::fs::openat(&self.fd, name, flags, Mode::empty()),
                other => other,
            };
        let file = match opened {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(Error::sys(OP, name, e)),
        };
        let st = stat_of(&rustix::fs::fstat(&file).map_err(|e| Error::sys(OP, name, e))?);
        if st.kind != FileKind::Regular {
            return Err(not_regular(&st)); // replaced between the look and the open
        }
        let too_large = || {
            Error::check(
                OP,
                name,
                ErrorKind::TooLarge,
                &format!("larger than the limit of {max} bytes"),
            )
        };
        if st.size > max as u64 {
            return Err(too_large());
        }
        // Never trust the size: read at most max + 1 bytes.
        let mut data = vec![0u8; max.saturating_add(1).min(st.size as usize + 1)];
        let mut filled = 0;
        loop {
            if filled == data.len() {
                if data.len() > max {
                    return Err(too_large());
                }
                data.resize(data.len().saturating_mul(2).min(max.saturating_add(1)), 0);
            }
            match rustix::io::read(&file, &mut data[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(Error::sys(OP, name, e)),
            }
        }
        if filled > max {
            return Err(too_large());
        }
        data.truncate(filled);
        Ok(Some((st, data)))
    }

    /// Remove the file (not directory) `name`; `Ok(false)` if it did not exist.
    pub fn remove_file(&self, name: impl AsRef<OsStr>) -> Result<bool> {
        const OP: &str = "remove file";
        let name = name.as_ref();
        check_name(OP, name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(Error::sys_with(
                OP,
                name,
                e,
                &[(Errno::ISDIR, ErrorKind::NotARegularFile)],
            )),
        }
    }

    /// Make directory `name` with exactly `mode`; `Ok(false)` if a directory of that name
    /// already existed (its mode is left alone). Something else of that name is an error:
    /// `Escapes` for a symlink, `NotADirectory` for anything else.
    pub fn create_dir(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<bool> {
        const OP: &str = "create directory";
        let name = name.as_ref();
        check_name(OP, name)?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode & 0o7777)) {
            Ok(()) => {
                // The umask may have narrowed the mode; set it exactly through a handle.
                let dir = self.open_dir(name)?;
                rustix::fs::fchmod(&dir.fd, Mode::from_raw_mode(mode & 0o7777))
                    .map_err(|e| Error::sys(OP, name, e))?;
                Ok(true)
            }
            Err(Errno::EXIST) => match self.stat_at(name)?.kind {
                FileKind::Directory => Ok(false),
                FileKind::Symlink => Err(Error::check(
                    OP,
                    name,
                    ErrorKind::Escapes,
                    "a symlink has this name",
                )),
                other => Err(Error::check(
                    OP,
                    name,
                    ErrorKind::NotADirectory,
                    &format!("a {other:?} has this name"),
                )),
            },
            Err(e) => Err(Error::sys(OP, name, e)),
        }
    }

    /// fsync this directory (makes renames in it durable; forces a Btrfs commit).
    pub fn sync(&self) -> Result<()> {
        rustix::fs::fsync(&self.fd).map_err(|e| Error::sys("fsync directory", "", e))
    }

    /// Commit the filesystem's current transaction and wait for it (`BTRFS_IOC_SYNC`).
    pub fn commit(&self) -> Result<()> {
        sys::sync(self.fd.as_fd()).map_err(|e| Error::sys("commit the Btrfs transaction", "", e))
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_one_component_are_refused() {
        let long = "x".repeat(256);
        for name in ["", ".", "..", "a/b", "/", "../x", "a\0b", long.as_str()] {
            let e = check_name("test", OsStr::new(name)).expect_err(name);
            assert_eq!(e.kind, ErrorKind::InvalidName, "{name:?}");
        }
    }

    #[test]
    fn plain_names_are_accepted() {
        let longest = "x".repeat(255);
        for name in [
            "a",
            "@home",
            ".restore",
            "...",
            "with space",
            "new\nline",
            longest.as_str(),
            "ünï",
        ] {
            check_name("test", OsStr::new(name)).expect(name);
        }
        // Names are bytes: not UTF-8 is no reason to refuse one.
        check_name("test", OsStr::from_bytes(b"\xff\xfe")).expect("bytes");
    }

    #[test]
    fn errnos_map_to_the_kinds_callers_act_on() {
        assert_eq!(kind_of(Errno::NOENT), ErrorKind::NotFound);
        assert_eq!(kind_of(Errno::NOSPC), ErrorKind::NoSpace);
        assert_eq!(kind_of(Errno::DQUOT), ErrorKind::NoSpace);
        assert_eq!(kind_of(Errno::LOOP), ErrorKind::Escapes);
        assert_eq!(kind_of(Errno::XDEV), ErrorKind::Escapes);
        assert_eq!(kind_of(Errno::ACCESS), ErrorKind::PermissionDenied);
        assert_eq!(kind_of(Errno::NOTEMPTY), ErrorKind::NotEmpty);
        assert_eq!(kind_of(Errno::IO), ErrorKind::Other);
        let e = Error::sys_with(
            "op",
            "n",
            Errno::INVAL,
            &[(Errno::INVAL, ErrorKind::NotASubvolume)],
        );
        assert_eq!(e.kind, ErrorKind::NotASubvolume);
    }

    #[test]
    fn root_ref_and_short_root_item_parse() {
        let mut data = Vec::new();
        data.extend_from_slice(&256u64.to_le_bytes());
        data.extend_from_slice(&7u64.to_le_bytes());
        data.extend_from_slice(&5u16.to_le_bytes());
        data.extend_from_slice(b"@home");
        assert_eq!(parse_root_ref(&data), Some((256, OsString::from("@home"))));
        let mut odd = data.clone();
        odd.truncate(16);
        odd.extend_from_slice(&1u16.to_le_bytes());
        odd.push(0xff);
        assert_eq!(
            parse_root_ref(&odd),
            Some((256, OsStr::from_bytes(b"\xff").to_owned())),
            "a name that is not UTF-8 is kept as its bytes"
        );
        assert_eq!(parse_root_ref(&data[..20]), None);
        // An item from an old kernel, cut before the UUIDs: no panic, nil UUIDs.
        let item = RootItem::parse(&[0u8; 200]);
        assert_eq!(item.uuid, [0; 16]);
        assert_eq!(uuid_or_none(item.parent_uuid), None);
    }

    #[test]
    fn root_item_fields_are_read_and_stale_uuids_ignored() {
        use linux_raw_sys::btrfs::btrfs_root_item as R;
        let mut data = vec![0u8; std::mem::size_of::<R>()];
        let put = |data: &mut Vec<u8>, at: usize, bytes: &[u8]| {
            data[at..at + bytes.len()].copy_from_slice(bytes)
        };
        put(&mut data, offset_of!(R, generation), &7u64.to_le_bytes());
        put(&mut data, offset_of!(R, generation_v2), &7u64.to_le_bytes());
        put(
            &mut data,
            offset_of!(R, flags),
            &ROOT_SUBVOL_RDONLY.to_le_bytes(),
        );
        put(&mut data, offset_of!(R, uuid), &[0xab; 16]);
        put(&mut data, offset_of!(R, otransid), &5u64.to_le_bytes());
        put(
            &mut data,
            offset_of!(R, otime),
            &1_700_000_000u64.to_le_bytes(),
        );
        let info = RootItem::parse(&data).info(300, 256, 256);
        assert_eq!(info.uuid, Uuid::from_bytes([0xab; 16]));
        assert_eq!(
            (info.generation, info.created_generation, info.readonly),
            (7, 5, true)
        );
        assert_eq!(
            info.created,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        // Before 1970 on disk (a negative time64_t): no time, not one in a far future.
        put(&mut data, offset_of!(R, otime), &(-1i64).to_le_bytes());
        assert_eq!(RootItem::parse(&data).info(300, 256, 256).created, None);

        put(&mut data, offset_of!(R, generation_v2), &3u64.to_le_bytes());
        let stale = RootItem::parse(&data).info(300, 256, 256);
        assert!(stale.uuid.is_nil());
        assert_eq!(stale.created_generation, 0);
    }

    #[test]
    fn temp_prefix_is_the_layouts() {
        assert_eq!(TEMP_FILE_PREFIX, layout::TEMP_PREFIX);
    }

    #[test]
    fn durable_temp_names_are_exactly_prefix_pid_dot_counter() {
        let is = |n: &str| is_durable_temp_name(OsStr::new(n));
        assert!(is(".tmp.1.0"));
        assert!(is(".tmp.4242.17"));
        for not in [
            ".tmp.",
            ".tmp.1",
            ".tmp.1.",
            ".tmp..0",
            ".tmp.1.0.0",
            ".tmp.subvolume.256.0",
            ".tmp.1.x",
            ".tmp.-1.0",
            "tmp.1.0",
            ".restore",
            ".tmp.123456789012345678901.0",
        ] {
            assert!(!is(not), "{not}");
        }
    }

    #[test]
    fn error_says_what_and_which() {
        let e = Error::check("snapshot to", "a/b", ErrorKind::InvalidName, "why");
        assert_eq!(
            e.to_string(),
            format!("snapshot to \"a/b\": {}", ErrorKind::InvalidName)
        );
        // A name that is not UTF-8 is shown escaped, never as U+FFFD.
        let e = Error::check(
            "open",
            OsStr::from_bytes(b"\xff"),
            ErrorKind::NotFound,
            "why",
        );
        assert_eq!(e.to_string(), "open \"\\xFF\": not found");
    }
}
