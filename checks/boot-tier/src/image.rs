//! The test machine's disk: one Btrfs filesystem laid out from the layout crate.
//!
//! Made and inspected with the `btrfs` command-line tool on purpose: it is an oracle
//! independent of the code under test (the stem and `tacid-initrd` use raw ioctls).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use layout::{names::FILESYSTEM_LABEL, SUBVOLUMES};
use uuid::Uuid;

use crate::env::tools;
use crate::{run, run_stdout, shown, Error, IoContext as _, Result};

/// Size of the (sparse) disk image.
pub const IMAGE_BYTES: u64 = 1 << 30;

/// Make a laid-out disk at `path`: every subvolume of the layout flat at the top level,
/// `@root-blank` read-only and empty, `@snapshots` 0700, each nested mount point's
/// directory made in its parent subvolume, and the guest's userland in the store.
pub fn make_disk(path: &Path, busybox: &Path) -> Result<()> {
    let file = std::fs::File::create(path).context(|| format!("creating {}", shown(path)))?;
    file.set_len(IMAGE_BYTES)
        .context(|| format!("sizing {}", shown(path)))?;
    drop(file);
    run(
        "mkfs.btrfs",
        Command::new(tools::MKFS_BTRFS)
            .args(["-q", "-L", FILESYSTEM_LABEL])
            .arg(path),
    )?;
    let top = Mounted::top(path)?;
    for s in SUBVOLUMES {
        run(
            "btrfs subvolume create",
            Command::new(tools::BTRFS)
                .args(["-q", "subvolume", "create"])
                .arg(top.path().join(s.name)),
        )?;
    }
    let snapshots = top.path().join(layout::SNAPSHOTS_SUBVOLUME);
    std::fs::set_permissions(&snapshots, std::fs::Permissions::from_mode(0o700))
        .context(|| format!("chmod 0700 {}", shown(&snapshots)))?;
    // A mount point inside another subvolume must exist in it, as an installer makes it.
    for s in SUBVOLUMES {
        if let (Some(mp), Some((parent, parent_mp))) = (
            s.mount_point,
            s.mount_point.and_then(crate::guest::parent_mount),
        ) {
            let rel = mp
                .strip_prefix(parent_mp)
                .unwrap_or(mp)
                .trim_start_matches('/');
            let dir = top.path().join(parent).join(rel);
            std::fs::create_dir_all(&dir).context(|| format!("creating {}", shown(&dir)))?;
        }
    }
    crate::guest::install(&top.path().join(crate::guest::store_subvolume()), busybox)?;
    let blank = top.path().join(layout::ROOT_BLANK_SUBVOLUME);
    run(
        "making @root-blank read-only",
        Command::new(tools::BTRFS)
            .args(["property", "set", "-ts"])
            .arg(&blank)
            .args(["ro", "true"]),
    )?;
    top.unmount()
}

/// Copy a disk image, keeping it sparse.
pub fn copy_disk(from: &Path, to: &Path) -> Result<()> {
    run(
        "copying the disk image",
        Command::new(tools::CP)
            .args(["--sparse=always", "--reflink=auto"])
            .arg(from)
            .arg(to),
    )?;
    Ok(())
}

/// The top level (subvolid 5) of a disk image, loop-mounted in a private directory;
/// unmounted on drop.
#[derive(Debug)]
pub struct Mounted {
    dir: tempfile::TempDir,
    mounted: bool,
}

impl Mounted {
    /// Loop-mount the top level of the Btrfs in `image`.
    pub fn top(image: &Path) -> Result<Mounted> {
        let dir = tempfile::Builder::new()
            .prefix("boot-tier-top.")
            .tempdir()
            .context(|| "making a mount point".into())?;
        run(
            "mounting the disk image",
            Command::new(tools::MOUNT)
                .args(["-t", "btrfs", "-o", "loop,subvolid=5"])
                .arg(image)
                .arg(dir.path()),
        )?;
        Ok(Mounted { dir, mounted: true })
    }

    /// The mounted top level.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Path of `rel` inside subvolume `subvolume`.
    pub fn in_subvolume(&self, subvolume: &str, rel: &str) -> PathBuf {
        self.path()
            .join(subvolume)
            .join(rel.trim_start_matches('/'))
    }

    /// Unmount now (everything written is on the image afterwards).
    pub fn unmount(mut self) -> Result<()> {
        self.mounted = false;
        // The cases run on threads of one process: another case's child between its fork and
        // its exec holds a copy of every descriptor, ours beneath this mount too (CLOEXEC
        // closes them only at the exec). That window is short but real on a loaded machine,
        // so a busy mount is asked again for a while before it counts as a failure.
        let mut attempts = 0;
        loop {
            match run(
                "unmounting the disk image",
                Command::new(tools::UMOUNT).arg(self.dir.path()),
            ) {
                Err(e) if attempts < 50 && e.to_string().contains("target is busy") => {
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                other => return other.map(|_| ()),
            }
        }
    }

    /// Every subvolume, as `btrfs subvolume list` says: path → (id, uuid, parent uuid).
    pub fn subvolumes(&self) -> Result<BTreeMap<String, SubvolumeRecord>> {
        let out = run_stdout(
            "btrfs subvolume list",
            Command::new(tools::BTRFS)
                .args(["subvolume", "list", "-u", "-q"])
                .arg(self.path()),
        )?;
        out.lines()
            .map(parse_list_line)
            .map(|r| r.map(|r| (r.path.clone(), r)))
            .collect()
    }

    /// What `btrfs subvolume show` says of the subvolume at `rel`: whether it is read-only.
    pub fn readonly(&self, rel: &str) -> Result<bool> {
        let out = run_stdout(
            "btrfs property get",
            Command::new(tools::BTRFS)
                .args(["property", "get", "-ts"])
                .arg(self.path().join(rel))
                .arg("ro"),
        )?;
        Ok(out.trim() == "ro=true")
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.mounted {
            let ok = Command::new(tools::UMOUNT)
                .arg(self.dir.path())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new(tools::UMOUNT)
                    .arg("-l")
                    .arg(self.dir.path())
                    .status();
            }
        }
    }
}

/// One line of `btrfs subvolume list -u -q`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubvolumeRecord {
    pub id: u64,
    pub uuid: Uuid,
    pub parent_uuid: Option<Uuid>,
    pub path: String,
}

fn parse_list_line(line: &str) -> Result<SubvolumeRecord> {
    // ID 256 gen 9 top level 5 parent_uuid - uuid 3f0c... path @root
    let bad = || Error::Other(format!("unexpected `btrfs subvolume list` line: {line:?}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
    };
    let id = after("ID").and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let uuid = after("uuid")
        .and_then(|v| Uuid::parse_str(v).ok())
        .ok_or_else(bad)?;
    let parent_uuid = match after("parent_uuid").ok_or_else(bad)? {
        &"-" => None,
        v => Some(Uuid::parse_str(v).map_err(|_| bad())?),
    };
    let path_at = line.find(" path ").ok_or_else(bad)?;
    let path = line[path_at + 6..]
        .trim_start_matches("<FS_TREE>/")
        .to_owned();
    Ok(SubvolumeRecord {
        id,
        uuid,
        parent_uuid,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_lines_parse() {
        let r = parse_list_line(
            "ID 257 gen 12 top level 5 parent_uuid 0b7c0f3e-9f4a-4e8e-8a55-3c1d2f6b9a01 uuid 1b7c0f3e-9f4a-4e8e-8a55-3c1d2f6b9a01 path @snapshots/@home.x",
        )
        .expect("parses");
        assert_eq!(r.id, 257);
        assert_eq!(r.path, "@snapshots/@home.x");
        assert!(r.parent_uuid.is_some());
        let r = parse_list_line("ID 256 gen 9 top level 5 parent_uuid - uuid 1b7c0f3e-9f4a-4e8e-8a55-3c1d2f6b9a01 path @root")
            .expect("parses");
        assert_eq!(r.parent_uuid, None);
        assert!(parse_list_line("ID x").is_err());
    }
}
