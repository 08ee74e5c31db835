//! The real disk: a Btrfs top level reached through the `btrfs` crate (capability style: every
//! name is opened beneath the top handle, never following a symlink).

use std::path::Path;

use btrfs::{Dir, ErrorKind, FileKind, TempFile, Top, TreeDeleted};
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
    #[error("the outcome was to be put in place before it was written (a bug; please report it)")]
    NoOutcomeWritten,
}

/// The top level of a mounted Btrfs filesystem and its snapshot store.
#[derive(Debug)]
pub struct BtrfsDisk {
    top: Top,
    store: Dir,
    /// The outcome written under its temporary name, not yet renamed.
    outcome_temp: Option<TempFile>,
}

fn subvol(info: &btrfs::SubvolumeInfo) -> Subvol {
    Subvol {
        id: info.id,
        uuid: info.uuid,
        parent_uuid: info.parent_uuid,
        readonly: info.readonly,
        generation: info.generation,
        created_generation: info.created_generation,
    }
}

impl BtrfsDisk {
    /// Open the top level (subvolume id 5) mounted at `path`, and the store beneath it.
    pub fn open(path: &Path) -> Result<BtrfsDisk, DiskError> {
        let top = Top::open(path)?;
        let store = top.dir().open_dir(SNAPSHOTS_SUBVOLUME)?;
        Ok(BtrfsDisk {
            top,
            store,
            outcome_temp: None,
        })
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
            // Harmless: no snapshot name is non-UTF-8, and check_snapshot drops unparsable names.
            .filter_map(|e| Some((e.name.into_string().ok()?, subvol(&e.info))))
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

    fn keep(&mut self, source: &str, name: &str) -> Result<(), DiskError> {
        let source = self.top.dir().open_dir(source)?;
        source.snapshot_to(&self.store, name, true)?;
        Ok(())
    }

    fn free_bytes(&mut self) -> Result<u64, DiskError> {
        Ok(self.top.dir().free_bytes()?)
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

    fn write_outcome_temp(&mut self, outcome: &Outcome) -> Result<(), DiskError> {
        let temp =
            self.store
                .write_temp_file(OUTCOME_FILE_NAME, outcome.render().as_bytes(), 0o600)?;
        if let Some(older) = self.outcome_temp.replace(temp) {
            let _ = self.store.remove_file(older.name());
        }
        Ok(())
    }

    fn put_outcome(&mut self) -> Result<(), DiskError> {
        let temp = self
            .outcome_temp
            .take()
            .ok_or(DiskError::NoOutcomeWritten)?;
        Ok(self.store.put_temp_file(temp, OUTCOME_FILE_NAME)?)
    }

    fn remove_leftover_temps(&mut self) -> Result<Vec<String>, DiskError> {
        Ok(self
            .store
            .remove_leftover_temp_files()?
            .into_iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect())
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
            Err(_) => {
                // A file cannot replace a directory nor a directory a file, nor anything a
                // directory that is not empty: whatever is in the way is an older refused
                // request, or junk in a root-only directory; it goes (adr/0015).
                self.store.remove_all(REFUSED_REQUEST_FILE_NAME)?;
                Ok(self
                    .store
                    .rename_noreplace(REQUEST_FILE_NAME, REFUSED_REQUEST_FILE_NAME)?)
            }
        }
    }

    fn delete_tree(&mut self, name: &str) -> Result<TreeDeleted, DiskError> {
        let id = self.top.dir().open_dir(name)?.subvolume_id()?;
        Ok(self.top.dir().delete_subvolume_tree(id)?)
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), DiskError> {
        Ok(self.top.dir().rename_noreplace(from, to)?)
    }

    fn move_into(&mut self, from: &str, into: &str) -> Result<(), DiskError> {
        let id = self.top.dir().open_dir(from)?.subvolume_id()?;
        let dest = self.top.dir().open_dir(into)?;
        if !dest.is_subvolume_root()? {
            return Err(DiskError::NotASubvolume(into.to_owned()));
        }
        dest.set_readonly(false)?;
        Ok(self
            .top
            .dir()
            .move_noreplace(from, &dest, format!("{from}.{id}"))?)
    }
}
