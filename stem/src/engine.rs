//! The stem engine: snapshots, listing, deletion and the staged restore, on real Btrfs.

use std::path::Path;
use std::time::SystemTime;

use layout::{Outcome, RestoreRequest, SnapshotName, SubvolumeName};
use serde::Serialize;
use uuid::Uuid;

/// One snapshot in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub name: SnapshotName,
    /// Its Btrfs subvolume id and UUID.
    pub id: u64,
    pub uuid: Uuid,
    /// What it is a snapshot of.
    pub of: SubvolumeName,
    /// How `of` is known.
    pub origin: Origin,
    /// When it was taken (the Btrfs creation time).
    #[serde(with = "unix_micros")]
    pub taken: SystemTime,
    pub readonly: bool,
    /// True when the staged restore request names it.
    pub staged: bool,
}

/// How the engine knows what a snapshot is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Its parent UUID is the live subvolume's, or one the live subvolume descends from.
    ParentUuid,
    /// Its parent is gone (replaced by an earlier restore); only its name says what it is of.
    NameOnly,
}

/// The answer to "stage this restore".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staged {
    /// The request was written.
    New(RestoreRequest),
    /// The same request was already staged; nothing changed.
    AlreadyStaged(RestoreRequest),
}

/// What is wrong with the snapshots subvolume.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreProblem {
    #[error("{path} is missing; create it with `btrfs subvolume create` at the top of the filesystem")]
    Missing { path: String },
    #[error("{path} is a symlink; it must be the subvolume itself (remove the link and create the subvolume)")]
    Symlink { path: String },
    #[error("{path} is a plain directory, not a subvolume; move its contents aside and create it with `btrfs subvolume create`")]
    NotASubvolume { path: String },
    #[error("{path} is owned by uid {uid}; it must be owned by root (chown root:root {path})")]
    NotOwnedByRoot { path: String, uid: u32 },
    #[error("{path} has mode {mode:04o}; it must be 0700 or stricter, since snapshots hold other users' files (chmod 0700 {path})")]
    ModeTooOpen { path: String, mode: u32 },
}

/// Everything the engine can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the snapshot store is unsafe: {0}")]
    Store(StoreProblem),
    #[error("{path} is not the top level of a Btrfs filesystem: {source}")]
    NotTopLevel { path: String, source: btrfs::Error },
    #[error("snapshots of {0} are not taken (snapshotted: {list})", list = snapshottable_list())]
    NotSnapshottable(SubvolumeName),
    #[error("{0} is not restorable (restorable: {list})", list = restorable_list())]
    NotRestorable(SubvolumeName),
    #[error("live subvolume {subvolume} is missing or not a subvolume: {source}")]
    LiveSubvolume { subvolume: SubvolumeName, source: btrfs::Error },
    #[error("there is no snapshot named {0}")]
    NoSuchSnapshot(SnapshotName),
    #[error("{0} is writable, not a read-only snapshot; only read-only snapshots are restored")]
    NotReadOnly(SnapshotName),
    #[error("{snapshot} is a snapshot of {actual}, not of {expected}")]
    OfAnotherSubvolume { snapshot: SnapshotName, expected: SubvolumeName, actual: SubvolumeName },
    #[error("a restore is already staged ({staged}); cancel it first with `tacid data cancel`")]
    AnotherRestoreStaged { staged: RestoreRequest },
    #[error("{0} is named by the staged restore; cancel the restore before deleting it")]
    Pinned(SnapshotName),
    #[error("no space left on the filesystem while {doing}; nothing was left half-made")]
    NoSpace { doing: String },
    #[error("taking the set failed at {member} (the members already taken were removed again): {source}")]
    SetMember { member: SubvolumeName, source: Box<EngineError> },
    #[error("the staged request file is unreadable or malformed: {0}")]
    BadRequestFile(String),
    #[error("the outcome file is unreadable or malformed: {0}")]
    BadOutcomeFile(String),
    #[error(transparent)]
    Btrfs(#[from] btrfs::Error),
}

fn snapshottable_list() -> String {
    layout::SUBVOLUMES.iter().filter(|s| s.snapshottable()).map(|s| s.name).collect::<Vec<_>>().join(", ")
}

fn restorable_list() -> String {
    SubvolumeName::restorable().iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
}

/// The engine, holding the top of the filesystem open.
#[derive(Debug)]
pub struct Engine {
    top: btrfs::Top,
}

impl Engine {
    /// Open the top level of the tacid filesystem mounted at `top` (subvolid=5).
    pub fn open(top: &Path) -> Result<Engine, EngineError> {
        let _ = top;
        unimplemented!()
    }

    /// Check the snapshots subvolume: a subvolume root, owned by root, mode 0700 or stricter,
    /// not a symlink. Every act below does this first.
    pub fn check_store(&self) -> Result<(), EngineError> {
        unimplemented!()
    }

    /// Take one read-only snapshot of a snapshotted subvolume, committed.
    pub fn take(&self, subvolume: SubvolumeName) -> Result<Snapshot, EngineError> {
        let _ = (&self.top, subvolume);
        unimplemented!()
    }

    /// Take a set, all or nothing: each member committed; on a failure the members already
    /// taken are deleted again and the error names the member that failed.
    pub fn take_set(&self, subvolumes: &[SubvolumeName]) -> Result<Vec<Snapshot>, EngineError> {
        let _ = subvolumes;
        unimplemented!()
    }

    /// Every snapshot in the store, newest first.
    pub fn list(&self) -> Result<Vec<Snapshot>, EngineError> {
        unimplemented!()
    }

    /// Delete a snapshot; refused while the staged request names it.
    pub fn delete(&self, name: SnapshotName) -> Result<(), EngineError> {
        let _ = name;
        unimplemented!()
    }

    /// Stage a restore of the snapshot `name` (of the subvolume its name and parent say),
    /// written durably.
    pub fn stage_restore(&self, name: SnapshotName) -> Result<Staged, EngineError> {
        let _ = name;
        unimplemented!()
    }

    /// Withdraw the staged request; `None` when nothing was staged.
    pub fn withdraw(&self) -> Result<Option<RestoreRequest>, EngineError> {
        unimplemented!()
    }

    /// The staged request, if any.
    pub fn staged(&self) -> Result<Option<RestoreRequest>, EngineError> {
        unimplemented!()
    }

    /// The initrd's record of what it did with the last request, if any.
    pub fn outcome(&self) -> Result<Option<Outcome>, EngineError> {
        unimplemented!()
    }
}

mod unix_micros {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let micros = t.duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0);
        s.serialize_i64(micros)
    }
}
