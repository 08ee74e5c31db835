//! The stem's own mount of the filesystem's top level (subvolid=5), seen by no other process.
//!
//! systemd cannot hand a service a mount made in `ExecStartPre=`: each command of a unit
//! gets a fresh mount namespace. So the daemon, started with `--device`, makes the mount
//! itself, first thing, in a mount namespace of its own whose propagation to the host is
//! cut. The mount goes away with the process; nothing else on the machine ever sees every
//! snapshot of every user's files laid out under one directory. See ADR 0010.

use std::io;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;

use rustix::mount::{mount, mount_change, MountFlags, MountPropagationFlags};
use rustix::thread::UnshareFlags;

/// Why the private mount could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PrivateTopError {
    #[error("cannot enter a mount namespace of its own: {0} (the stem needs CAP_SYS_ADMIN; the unit must allow namespaces: RestrictNamespaces=mnt)")]
    Unshare(io::Error),
    #[error("cannot cut mount propagation to the host: {0}")]
    Propagation(io::Error),
    #[error("cannot create the mount point {path}: {source}")]
    MountPoint { path: String, source: io::Error },
    #[error("cannot mount {device} (subvolid=5) at {path}: {source} (is it the tacid Btrfs filesystem, and does the unit's DeviceAllow= name it?)")]
    Mount {
        device: String,
        path: String,
        source: io::Error,
    },
}

/// Enter a private mount namespace and mount `device`'s top level at `at` (created 0700).
///
/// Must run before the process starts any thread: a mount namespace is per thread until
/// the others are made from this one.
pub fn mount_private_top(device: &Path, at: &Path) -> Result<(), PrivateTopError> {
    // SAFETY: only NEWNS (which implies FS), never FILES: no file descriptor table is split,
    // and the caller runs this before any other thread exists.
    #[allow(unsafe_code)]
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }
        .map_err(|e| PrivateTopError::Unshare(e.into()))?;
    // Slave, not private: an unmount of the device on the host still reaches us.
    mount_change(
        "/",
        MountPropagationFlags::DOWNSTREAM | MountPropagationFlags::REC,
    )
    .map_err(|e| PrivateTopError::Propagation(e.into()))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(at)
        .map_err(|source| PrivateTopError::MountPoint {
            path: at.display().to_string(),
            source,
        })?;
    mount(
        device,
        at,
        "btrfs",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        c"subvolid=5",
    )
    .map_err(|e| PrivateTopError::Mount {
        device: device.display().to_string(),
        path: at.display().to_string(),
        source: e.into(),
    })
}
