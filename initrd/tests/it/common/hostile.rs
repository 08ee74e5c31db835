//! What an ordinary user can leave on a disk, made as that user (`testbed::as_user`: no
//! capabilities) through the kernel's own interfaces: directories named with any bytes,
//! subvolumes nested at any depth and width, read-only ones, snapshots of their own
//! subvolumes. Each maker works in a directory handle the user could write to (their
//! `/var/tmp`, their home) and says how many subvolumes it made.
//!
//! Self-contained (the `btrfs` crate's raw ioctls, rustix, testbed), so the boot tier
//! includes this very file to plant the same leftover in a real machine's `@root`.

#![allow(dead_code)] // each test file uses its own part

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// The hostile user's uid and gid: nobody the system knows, with no capabilities.
pub const UID: u32 = 4242;
pub const GID: u32 = 4242;

/// How deep the directory chain of [`deep_chain`] goes in adr/0015's attack: far past the
/// 1024 file descriptors an initrd service has, and past `PATH_MAX` (4096 bytes).
pub const DEEP: usize = 3000;

/// Make `rel` (a `/`-separated path under `top`) as root with `mode` and owner `uid`, like a
/// running system's `/var/tmp` (1777, root) or a home (0700, the user); a handle on it.
pub fn dir_for_user(top: &Path, rel: &str, mode: u32, uid: u32) -> OwnedFd {
    let path = top.join(rel);
    std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
    std::os::unix::fs::chown(&path, Some(uid), Some(if uid == 0 { 0 } else { GID }))
        .expect("chown");
    rustix::fs::chmod(&path, Mode::from_raw_mode(mode)).expect("chmod");
    rustix::fs::open(
        &path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open")
}

/// `mkdir` then open `name` (any bytes but NUL and `/`) in `dir`.
pub fn mkdir_open(dir: BorrowedFd<'_>, name: &[u8]) -> OwnedFd {
    let name = std::ffi::OsStr::from_bytes(name);
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755))
        .unwrap_or_else(|e| panic!("mkdir {name:?}: {e}"));
    open(dir, name)
}

fn open(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> OwnedFd {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap_or_else(|e| panic!("open {name:?}: {e}"))
}

/// An empty subvolume `name` (any bytes but NUL and `/`) in `dir`, opened.
pub fn subvolume(dir: BorrowedFd<'_>, name: impl AsRef<std::ffi::OsStr>) -> OwnedFd {
    let name = name.as_ref();
    btrfs::sys::subvol_create(dir, name).unwrap_or_else(|e| panic!("subvolume {name:?}: {e}"));
    open(dir, name)
}

/// A snapshot of the subvolume whose root is `source`, as `dest/name`.
pub fn snapshot(source: BorrowedFd<'_>, dest: BorrowedFd<'_>, name: &str, readonly: bool) {
    let flags = if readonly {
        u64::from(linux_raw_sys::btrfs::BTRFS_SUBVOL_RDONLY)
    } else {
        0
    };
    btrfs::sys::snap_create(dest, source, name, flags)
        .unwrap_or_else(|e| panic!("snapshot {name}: {e}"));
}

/// Make the subvolume whose root is `root` read-only, as its owner may.
pub fn make_read_only(root: BorrowedFd<'_>) {
    let flags = btrfs::sys::subvol_getflags(root).expect("getflags");
    btrfs::sys::subvol_setflags(
        root,
        flags | u64::from(linux_raw_sys::btrfs::BTRFS_SUBVOL_RDONLY),
    )
    .expect("set read-only");
}

fn file(dir: BorrowedFd<'_>, name: &str, text: &str) {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .expect("create file");
    rustix::io::write(&fd, text.as_bytes()).expect("write");
}

/// adr/0015's attack: a subvolume named `\xff` (not UTF-8) with a subvolume inside it.
/// And a directory named `\xfe` holding a subvolume, which holds a directory named with a
/// newline and an escape sequence, holding another subvolume.
pub fn odd_names(dir: BorrowedFd<'_>) -> usize {
    let odd = subvolume(dir, std::ffi::OsStr::from_bytes(b"\xff"));
    subvolume(odd.as_fd(), "inside");
    let odd_dir = mkdir_open(dir, b"\xfe");
    let inside = subvolume(odd_dir.as_fd(), "inside");
    file(inside.as_fd(), "note", "not UTF-8 above me");
    let worse = mkdir_open(inside.as_fd(), b"new\nline \x1b[31mred\xfd");
    subvolume(worse.as_fd(), "deeper");
    4
}

/// `depth` directories, one inside the other, with a subvolume in the last, and one more
/// inside that. Only one directory handle is open at a time while making it.
pub fn deep_chain(dir: BorrowedFd<'_>, depth: usize) -> usize {
    let mut here = mkdir_open(dir, b"d");
    for _ in 1..depth {
        here = mkdir_open(here.as_fd(), b"d");
    }
    let last = subvolume(here.as_fd(), "last");
    subvolume(last.as_fd(), "under");
    2
}

/// Subvolumes nested three deep, then made read-only from the inside out: nothing inside a
/// read-only subvolume can be unlinked until it is writable again.
pub fn read_only_nest(dir: BorrowedFd<'_>) -> usize {
    let outer = subvolume(dir, "ro-outer");
    let inner = subvolume(outer.as_fd(), "ro-inner");
    let leaf = subvolume(inner.as_fd(), "ro-leaf");
    make_read_only(leaf.as_fd());
    make_read_only(inner.as_fd());
    make_read_only(outer.as_fd());
    3
}

/// A subvolume of the user's own, `snapshots` snapshots of it (read-only and writable by
/// turns) side by side, one inside itself, and `plain` more empty subvolumes in one
/// directory: thousands of subvolumes for one user.
pub fn own_snapshots(dir: BorrowedFd<'_>, snapshots: usize, plain: usize) -> usize {
    let mine = subvolume(dir, "mine");
    file(mine.as_fd(), "data", "the user's own");
    snapshot(mine.as_fd(), mine.as_fd(), "self", true);
    let snaps = mkdir_open(dir, b"snaps");
    for i in 0..snapshots {
        snapshot(mine.as_fd(), snaps.as_fd(), &format!("s{i}"), i % 2 == 0);
    }
    let many = mkdir_open(dir, b"many");
    for i in 0..plain {
        subvolume(many.as_fd(), format!("p{i}"));
    }
    2 + snapshots + plain
}

/// Every attack above in one directory (the deep chain as deep as adr/0015's).
pub fn all_of_it(dir: BorrowedFd<'_>, snapshots: usize, plain: usize) -> usize {
    odd_names(dir)
        + deep_chain(dir, DEEP)
        + read_only_nest(dir)
        + own_snapshots(dir, snapshots, plain)
}

/// Make the user's mess in `dir` as the hostile user; how many subvolumes it made.
pub fn as_hostile_user(dir: &OwnedFd, make: impl FnOnce(BorrowedFd<'_>) -> usize + Send) -> usize {
    testbed::as_user(UID, GID, || make(dir.as_fd()))
}
