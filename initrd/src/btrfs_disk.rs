//! The real disk: a Btrfs top level reached through the `btrfs` crate (capability style: every
//! name is opened beneath the top handle, never following a symlink).

use std::collections::VecDeque;
use std::path::Path;

use btrfs::{Dir, ErrorKind, FileKind, Top};
use layout::{
    Outcome, MAX_REQUEST_BYTES, OUTCOME_FILE_NAME, REFUSED_REQUEST_FILE_NAME, REQUEST_FILE_NAME,
    SNAPSHOTS_SUBVOLUME,
};

use crate::disk::{Disk, FileFacts, ReadFailure, RequestFile, SnapshotFacts, Source};
use crate::machine::Subvol;

/// Why the real disk failed.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error(transparent)]
    Btrfs(#[from] btrfs::Error),
    #[error("{0} at the top level is not a subvolume; tacid-initrd uses that name and will not touch it — move it away")]
    NotASubvolume(String),
    #[error("cannot find the directory holding subvolume {id} ({name:?}) inside {parent}")]
    NestedNotFound {
        parent: String,
        id: u64,
        name: String,
    },
    #[error("reading a directory inside {0}: {1}")]
    ReadDir(String, std::io::Error),
}

/// The top level of a mounted Btrfs filesystem and its snapshot store.
#[derive(Debug)]
pub struct BtrfsDisk {
    top: Top,
    store: Dir,
}

fn subvol(info: &btrfs::SubvolumeInfo) -> Subvol {
    Subvol {
        id: info.id,
        uuid: info.uuid,
        parent_uuid: info.parent_uuid,
        readonly: info.readonly,
    }
}

impl BtrfsDisk {
    /// Open the top level (subvolume id 5) mounted at `path`, and the store beneath it.
    pub fn open(path: &Path) -> Result<BtrfsDisk, DiskError> {
        let top = Top::open(path)?;
        let store = top.dir().open_dir(SNAPSHOTS_SUBVOLUME)?;
        Ok(BtrfsDisk { top, store })
    }

    /// Delete the subvolume `id` whose root is `dir`, nested subvolumes first (depth first).
    fn delete_with_nested(&self, dir: &Dir, id: u64, label: &str) -> Result<(), DiskError> {
        for child in dir.list_subvolumes()? {
            match self.top.dir().delete_subvolume_by_id(child.info.id) {
                Ok(()) => {}
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) if e.kind == ErrorKind::NotEmpty => {
                    let child_dir =
                        find_nested(dir, child.info.dir_id, &child.name).ok_or_else(|| {
                            DiskError::NestedNotFound {
                                parent: label.to_owned(),
                                id: child.info.id,
                                name: child.name.clone(),
                            }
                        })??;
                    self.delete_with_nested(&child_dir, child.info.id, &child.name)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.top.dir().delete_subvolume_by_id(id)?;
        Ok(())
    }
}

/// The inode number of every subvolume's root directory.
const SUBVOLUME_ROOT_INO: u64 = 256;

/// Open the nested subvolume `name` that sits in the directory with inode `dir_ino` somewhere
/// inside the subvolume whose root is `root`: breadth-first over plain directories, never
/// into other subvolumes. Only needed for a subvolume nested inside a nested one.
fn find_nested(root: &Dir, dir_ino: u64, name: &str) -> Option<Result<Dir, DiskError>> {
    if dir_ino == SUBVOLUME_ROOT_INO {
        return Some(root.open_dir(name).map_err(DiskError::from));
    }
    let mut queue: VecDeque<Dir> = VecDeque::new();
    let subdirs = |d: &Dir| -> Result<Vec<String>, std::io::Error> {
        let mut names = Vec::new();
        let mut entries = rustix::fs::Dir::read_from(d)?;
        while let Some(entry) = entries.read() {
            let entry = entry?;
            let Ok(n) = entry.file_name().to_str() else {
                continue;
            };
            if n == "." || n == ".." || entry.ino() == SUBVOLUME_ROOT_INO {
                continue;
            }
            if entry.file_type() == rustix::fs::FileType::Directory {
                names.push(n.to_owned());
            }
        }
        Ok(names)
    };
    let mut first = true;
    loop {
        let children = if first {
            first = false;
            match subdirs(root) {
                Ok(c) => c.into_iter().map(|n| root.open_dir(&n)).collect::<Vec<_>>(),
                Err(e) => return Some(Err(DiskError::ReadDir(name.to_owned(), e))),
            }
        } else {
            let d = queue.pop_front()?;
            match subdirs(&d) {
                Ok(c) => c.into_iter().map(|n| d.open_dir(&n)).collect(),
                Err(e) => return Some(Err(DiskError::ReadDir(name.to_owned(), e))),
            }
        };
        for child in children.into_iter().flatten() {
            if child.stat().map(|s| s.ino).ok() == Some(dir_ino) {
                return Some(child.open_dir(name).map_err(DiskError::from));
            }
            queue.push_back(child);
        }
    }
}

impl Disk for BtrfsDisk {
    type Error = DiskError;

    fn request(&mut self) -> Result<RequestFile, DiskError> {
        let stat = match self.store.stat_at(REQUEST_FILE_NAME) {
            Ok(stat) => stat,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(RequestFile::Absent),
            Err(e) => return Err(e.into()),
        };
        let lstat_facts = FileFacts {
            kind: stat.kind,
            uid: stat.uid,
            mode: stat.mode,
            size: stat.size,
        };
        if stat.kind != FileKind::Regular {
            return Ok(RequestFile::Present {
                facts: lstat_facts,
                bytes: Err(ReadFailure::NotRegular),
            });
        }
        if stat.size > MAX_REQUEST_BYTES as u64 {
            return Ok(RequestFile::Present {
                facts: lstat_facts,
                bytes: Err(ReadFailure::TooLarge(stat.size)),
            });
        }
        // The checks that count are on the opened file's own fstat, not the lstat above.
        Ok(
            match self
                .store
                .read_file_limited(REQUEST_FILE_NAME, MAX_REQUEST_BYTES)
            {
                Ok(None) => RequestFile::Absent,
                Ok(Some((stat, bytes))) => RequestFile::Present {
                    facts: FileFacts {
                        kind: stat.kind,
                        uid: stat.uid,
                        mode: stat.mode,
                        size: stat.size,
                    },
                    bytes: Ok(bytes),
                },
                Err(e) if e.kind == ErrorKind::TooLarge => RequestFile::Present {
                    facts: lstat_facts,
                    bytes: Err(ReadFailure::TooLarge(
                        stat.size.max(MAX_REQUEST_BYTES as u64 + 1),
                    )),
                },
                Err(e)
                    if matches!(
                        e.kind,
                        ErrorKind::WouldBlock | ErrorKind::NotARegularFile | ErrorKind::Escapes
                    ) =>
                {
                    RequestFile::Present {
                        facts: lstat_facts,
                        bytes: Err(ReadFailure::NotRegular),
                    }
                }
                Err(e) => RequestFile::Present {
                    facts: lstat_facts,
                    bytes: Err(ReadFailure::Io(e.to_string())),
                },
            },
        )
    }

    fn top_subvolume(&mut self, name: &str) -> Result<Option<Subvol>, DiskError> {
        let dir = match self.top.dir().open_dir(name) {
            Ok(dir) => dir,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
            Err(e) if matches!(e.kind, ErrorKind::Escapes | ErrorKind::NotADirectory) => {
                return Err(DiskError::NotASubvolume(name.to_owned()))
            }
            Err(e) => return Err(e.into()),
        };
        if !dir.is_subvolume_root()? {
            return Err(DiskError::NotASubvolume(name.to_owned()));
        }
        Ok(Some(subvol(&dir.subvolume_info()?)))
    }

    fn snapshot(&mut self, name: &str) -> Result<SnapshotFacts, DiskError> {
        let stat = match self.store.stat_at(name) {
            Ok(stat) => stat,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(SnapshotFacts::Missing),
            Err(e) => return Err(e.into()),
        };
        if stat.kind != FileKind::Directory {
            return Ok(SnapshotFacts::NotADirectory(stat.kind));
        }
        let dir = self.store.open_dir(name)?;
        if !dir.is_subvolume_root()? {
            return Ok(SnapshotFacts::NotASubvolume);
        }
        Ok(SnapshotFacts::Subvolume(subvol(&dir.subvolume_info()?)))
    }

    fn store(&mut self) -> Result<Vec<(String, Subvol)>, DiskError> {
        Ok(self
            .store
            .list_subvolumes()?
            .into_iter()
            .map(|e| (e.name, subvol(&e.info)))
            .collect())
    }

    fn copy(&mut self, source: Source<'_>, dest: &str) -> Result<(), DiskError> {
        let source = match source {
            Source::Snapshot(name) => self.store.open_dir(name)?,
            Source::Top(name) => self.top.dir().open_dir(name)?,
        };
        source.snapshot_to(self.top.dir(), dest, false)?;
        Ok(())
    }

    fn ensure_dir(&mut self, subvolume: &str, path: &str) -> Result<(), DiskError> {
        let mut dir = self.top.dir().open_dir(subvolume)?;
        for component in path.split('/').filter(|c| !c.is_empty()) {
            dir.create_dir(component, 0o700)?;
            dir = dir.open_dir(component)?;
        }
        Ok(())
    }

    fn exchange(&mut self, a: &str, b: &str) -> Result<(), DiskError> {
        Ok(self.top.dir().exchange(a, b)?)
    }

    fn commit(&mut self) -> Result<(), DiskError> {
        // fsync of the top directory makes renames in it durable (it forces a commit);
        // the commit ioctl then also covers deletions and the store.
        self.top.dir().sync()?;
        Ok(self.top.dir().commit()?)
    }

    fn write_outcome(&mut self, outcome: &Outcome) -> Result<(), DiskError> {
        Ok(self
            .store
            .write_file_durably(OUTCOME_FILE_NAME, outcome.render().as_bytes(), 0o600)?)
    }

    fn remove_request(&mut self) -> Result<(), DiskError> {
        self.store.remove_file(REQUEST_FILE_NAME)?;
        Ok(())
    }

    fn move_request_aside(&mut self) -> Result<(), DiskError> {
        match self
            .store
            .rename_replace(REQUEST_FILE_NAME, REFUSED_REQUEST_FILE_NAME)
        {
            Ok(()) => Ok(()),
            Err(first) => {
                // A file cannot replace a directory nor a directory a file: remove the older
                // refused request (a file) and try once more.
                match self.store.remove_file(REFUSED_REQUEST_FILE_NAME) {
                    Ok(_) => Ok(self
                        .store
                        .rename_noreplace(REQUEST_FILE_NAME, REFUSED_REQUEST_FILE_NAME)?),
                    Err(_) => Err(first.into()),
                }
            }
        }
    }

    fn delete_tree(&mut self, name: &str) -> Result<(), DiskError> {
        let dir = self.top.dir().open_dir(name)?;
        let id = dir.subvolume_info()?.id;
        self.delete_with_nested(&dir, id, name)
    }
}
