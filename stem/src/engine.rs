//! The stem engine: snapshots, listing, deletion and the staged restore, on real Btrfs.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::SystemTime;

use btrfs::{Dir, ErrorKind, FileKind, SubvolumeInfo};
use layout::origin::{Ancestry, Lineages, LiveSubvolume, StoredSnapshot};
use layout::{
    Outcome, RestoreMember, RestoreRequest, SnapshotName, SubvolumeName, OUTCOME_FILE_NAME,
    REQUEST_FILE_NAME, SNAPSHOTS_SUBVOLUME,
};
use serde::Serialize;
use uuid::Uuid;

mod changes;
pub use changes::{
    counted_from_paths, ChangeCount, Commit, CountStopped, MAX_COUNTED_INODES, MAX_PATHS,
    MAX_REUSED_COUNTS,
};
mod generation;
pub use generation::StoreGeneration;
mod space;
pub use space::{SnapshotSpace, SpaceMeasure, SpaceReport, SubvolumeSpace};

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
    /// When it was taken: the Btrfs creation time, or the time in its name when Btrfs
    /// holds no valid one (`btrfs::SubvolumeInfo::created`).
    #[serde(with = "unix_micros")]
    pub taken: SystemTime,
    pub readonly: bool,
    /// True when the staged restore request names it.
    pub staged: bool,
    /// When it was received (fetched from a copy): the UUID of the snapshot it was
    /// received from, its identity to `btrfs send` and `receive` (a stream of it, or
    /// against it, names this).
    pub received_uuid: Option<Uuid>,
}

pub use layout::origin::Origin;

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
    #[error(
        "{path} is missing; create it with `btrfs subvolume create` at the top of the filesystem"
    )]
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
    #[error("snapshots of {0} are not taken (snapshotted: {list})", list = SubvolumeName::snapshottable_list())]
    NotSnapshottable(SubvolumeName),
    #[error("{0} is not restorable (restorable: {list})", list = SubvolumeName::restorable_list())]
    NotRestorable(SubvolumeName),
    #[error("live subvolume {subvolume} is missing or not a subvolume: {source}")]
    LiveSubvolume {
        subvolume: SubvolumeName,
        source: btrfs::Error,
    },
    #[error("there is no snapshot named {0}")]
    NoSuchSnapshot(SnapshotName),
    #[error("{0} is writable, not a read-only snapshot; only read-only snapshots are restored")]
    NotReadOnly(SnapshotName),
    #[error("{snapshot} is a snapshot of {actual}, not of {expected}")]
    OfAnotherSubvolume {
        snapshot: SnapshotName,
        expected: SubvolumeName,
        actual: SubvolumeName,
    },
    #[error("a restore is already staged ({staged}); cancel it first with `tacid data cancel`")]
    AnotherRestoreStaged { staged: RestoreRequest },
    /// A set restore that names no snapshot, or two of one subvolume.
    #[error("{0}")]
    InvalidSet(String),
    #[error("{0} is named by the staged restore; cancel the restore before deleting it")]
    Pinned(SnapshotName),
    #[error("{name} is in use and was not deleted: {held}. While a process uses an open of it, deleting it would give no space back (the kernel keeps it whole until the last user lets go); close it once nothing uses it (`tacid data close {name}`, by whoever opened it), then delete it")]
    InUse { name: SnapshotName, held: String },
    #[error("{0} cannot be deleted now: the kernel refuses while a copy off the disk reads it (the snapshot sent, or the parent it is sent against); try again when the copy is done")]
    BeingSent(SnapshotName),
    #[error("no space left on the filesystem while {doing}; nothing was left half-made")]
    NoSpace { doing: String },
    #[error("refused {doing}: only {free} free, below the hard floor of {floor}; nothing was taken. Free space (`tacid data prune`, or delete snapshots with `tacid data delete`) and try again")]
    BelowHardFloor {
        doing: String,
        free: ByteCount,
        floor: ByteCount,
    },
    #[error("taking the set failed at {member} (the members already taken were removed again): {source}")]
    SetMember {
        member: SubvolumeName,
        source: Box<EngineError>,
    },
    #[error("no free snapshot name for {0} after {MAX_NAME_ATTEMPTS} tries; is the clock stuck?")]
    NoFreeName(SubvolumeName),
    #[error("{snapshot} holds no state that {path} descends from now (an earlier restore left that line behind), so what changed since it cannot be counted", path = subvolume.display_path())]
    NotInHistory {
        snapshot: SnapshotName,
        subvolume: SubvolumeName,
    },
    #[error("the restore request file is bad: {0}; the next boot refuses it and changes nothing, and `tacid data cancel` removes it")]
    BadRequestFile(String),
    #[error("the outcome file is unreadable or malformed: {0}")]
    BadOutcomeFile(String),
    #[error("a snapshot named {0} is already in the store; nothing was fetched")]
    AlreadyHere(SnapshotName),
    #[error("the fetched {name} does not check out: {why}; it was removed")]
    FetchUnverified { name: SnapshotName, why: String },
    #[error(transparent)]
    Btrfs(#[from] btrfs::Error),
}

/// The engine, holding the top of the filesystem open.
#[derive(Debug)]
pub struct Engine {
    top: btrfs::Top,
    /// Serializes the acts that read-then-write the staged request (stage, withdraw,
    /// delete), so "refused while staged" cannot race with staging.
    request_lock: Mutex<()>,
    /// Below this many free bytes a snapshot is refused (0: no floor).
    hard_floor: AtomicU64,
    /// Subvolume ids deleted and perhaps not yet cleaned by Btrfs.
    deleted: Mutex<Vec<u64>>,
    /// Wakes the thread that commits deletions off the request path.
    committer: Mutex<Option<mpsc::Sender<()>>>,
    /// Complete counts of changes, reused while the live subvolume's generation stands.
    reused_counts: std::sync::Arc<Mutex<changes::ReusedCounts>>,
    /// What the space walks found, per subvolume and generation (adr/0029).
    space_cache: std::sync::Arc<Mutex<btrfs::space::SpaceCache>>,
}

/// A number of bytes, shown for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ByteCount(pub u64);

impl std::fmt::Display for ByteCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&layout::human::bytes(self.0))
    }
}

/// The filesystem's space, as `statvfs` on the top level says (adr/0013).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FreeSpace {
    /// Bytes an unprivileged writer could still use (`f_bavail`).
    pub free_bytes: u64,
    /// The filesystem's size (`f_blocks`).
    pub size_bytes: u64,
    /// The hard floor below which snapshots are refused (0: none).
    pub hard_floor_bytes: u64,
    /// Snapshots deleted whose space Btrfs's cleaner has not given back yet.
    pub deletions_pending: u32,
}

/// Where people see the store, for messages.
const STORE_PATH: &str = layout::SNAPSHOTS_MOUNT_POINT;

impl Engine {
    /// Open the top level of the tacid filesystem mounted at `top` (subvolid=5).
    pub fn open(top: &Path) -> Result<Engine, EngineError> {
        let handle = btrfs::Top::open(top).map_err(|source| EngineError::NotTopLevel {
            path: top.display().to_string(),
            source,
        })?;
        Ok(Engine {
            top: handle,
            request_lock: Mutex::new(()),
            hard_floor: AtomicU64::new(0),
            deleted: Mutex::new(Vec::new()),
            committer: Mutex::new(None),
            reused_counts: Default::default(),
            space_cache: Default::default(),
        })
    }

    /// Refuse snapshots while fewer than `bytes` are free (0: never).
    pub fn set_hard_floor(&self, bytes: u64) {
        self.hard_floor.store(bytes, Ordering::Relaxed);
    }

    /// The free space now, and how many deletions Btrfs is still cleaning up.
    ///
    /// `statvfs` of the top level, not `BTRFS_IOC_SPACE_INFO`: its `f_bavail` is Btrfs's
    /// own estimate of what a writer can still use (data profile and unallocated space
    /// included), which is the question a floor asks.
    pub fn free_space(&self) -> Result<FreeSpace, EngineError> {
        let st = rustix::fs::fstatvfs(self.top.dir()).map_err(|e| {
            EngineError::Btrfs(btrfs::Error {
                op: "statvfs the top level",
                name: Default::default(),
                kind: ErrorKind::Other,
                source: e.into(),
            })
        })?;
        let pending = still_cleaning(self.top.dir(), &self.deleted);
        Ok(FreeSpace {
            free_bytes: st.f_bavail.saturating_mul(st.f_frsize),
            size_bytes: st.f_blocks.saturating_mul(st.f_frsize),
            hard_floor_bytes: self.hard_floor.load(Ordering::Relaxed),
            deletions_pending: u32::try_from(pending).unwrap_or(u32::MAX),
        })
    }

    /// Refuse `doing` when the free space is below the hard floor.
    fn check_hard_floor(&self, doing: impl FnOnce() -> String) -> Result<(), EngineError> {
        let floor = self.hard_floor.load(Ordering::Relaxed);
        if floor == 0 {
            return Ok(());
        }
        let space = self.free_space()?;
        if space.free_bytes < floor {
            return Err(EngineError::BelowHardFloor {
                doing: doing(),
                free: ByteCount(space.free_bytes),
                floor: ByteCount(floor),
            });
        }
        Ok(())
    }

    /// Commit deletions on a thread of their own, so the caller of `delete` does not wait
    /// for the commit (~20 ms, the cleaner's work in it). Requests arriving while a commit
    /// runs share the next one. The space itself comes back when Btrfs's cleaner has
    /// dropped the deleted trees, which it does when the kernel gets to it (milliseconds
    /// to a periodic commit later; never while a file inside is open, adr/0013):
    /// [`Engine::free_space`] counts the deletions still waiting for it.
    fn commit_soon(&self) -> Result<(), EngineError> {
        let mut committer = self.committer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(wake) = committer.as_ref() {
            if wake.send(()).is_ok() {
                return Ok(());
            }
        }
        let dir = self.top.dir().try_clone()?;
        let (wake, woken) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("stem-commit".into())
            .spawn(move || {
                while woken.recv().is_ok() {
                    while woken.try_recv().is_ok() {}
                    if let Err(e) = dir.commit() {
                        tracing::warn!("committing deletions: {e}");
                    }
                }
            })
            .map_err(|e| {
                EngineError::Btrfs(btrfs::Error {
                    op: "start the commit thread",
                    name: Default::default(),
                    kind: ErrorKind::Other,
                    source: e,
                })
            })?;
        let _ = wake.send(());
        *committer = Some(wake);
        Ok(())
    }

    /// Check the snapshots subvolume: a subvolume root, owned by root, mode 0700 or stricter,
    /// not a symlink. Every act below does this first.
    pub fn check_store(&self) -> Result<(), EngineError> {
        self.store().map(drop)
    }

    /// The snapshots subvolume, opened and checked.
    fn store(&self) -> Result<Dir, EngineError> {
        let path = STORE_PATH.to_owned();
        let problem = |p: StoreProblem| EngineError::Store(p);
        // The stat of the name only makes the message precise; the checks that decide are
        // made on the opened handle itself, so a swap between the two cannot fool them.
        match self.top.dir().stat_at(SNAPSHOTS_SUBVOLUME) {
            Err(e) if e.kind == ErrorKind::NotFound => {
                return Err(problem(StoreProblem::Missing { path }))
            }
            Ok(st) if st.kind == FileKind::Symlink => {
                return Err(problem(StoreProblem::Symlink { path }))
            }
            Ok(st) if st.kind != FileKind::Directory => {
                return Err(problem(StoreProblem::NotASubvolume { path }))
            }
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        let dir = self
            .top
            .dir()
            .open_dir(SNAPSHOTS_SUBVOLUME)
            .map_err(|e| match e.kind {
                ErrorKind::Escapes => problem(StoreProblem::Symlink { path: path.clone() }),
                ErrorKind::NotFound => problem(StoreProblem::Missing { path: path.clone() }),
                ErrorKind::NotADirectory => {
                    problem(StoreProblem::NotASubvolume { path: path.clone() })
                }
                _ => e.into(),
            })?;
        if !dir.is_subvolume_root()? {
            return Err(problem(StoreProblem::NotASubvolume { path }));
        }
        let st = dir.stat()?;
        if st.uid != 0 {
            return Err(problem(StoreProblem::NotOwnedByRoot { path, uid: st.uid }));
        }
        if st.mode & 0o077 != 0 {
            return Err(problem(StoreProblem::ModeTooOpen {
                path,
                mode: st.mode,
            }));
        }
        Ok(dir)
    }

    /// The live subvolume, opened beneath the top and checked to be a subvolume root.
    fn live(&self, subvolume: SubvolumeName) -> Result<Dir, EngineError> {
        let wrap = |source| EngineError::LiveSubvolume { subvolume, source };
        let dir = self.top.dir().open_dir(subvolume.as_str()).map_err(wrap)?;
        if !dir.is_subvolume_root()? {
            let source = btrfs::Error {
                op: "open live subvolume",
                name: subvolume.to_string().into(),
                kind: ErrorKind::NotASubvolume,
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            };
            return Err(wrap(source));
        }
        Ok(dir)
    }

    /// Take one read-only snapshot of a snapshotted subvolume, committed.
    pub fn take(&self, subvolume: SubvolumeName) -> Result<Snapshot, EngineError> {
        if !subvolume.subvolume().snapshottable() {
            return Err(EngineError::NotSnapshottable(subvolume));
        }
        let store = self.store()?;
        self.take_into(&store, subvolume)
    }

    fn take_into(&self, store: &Dir, subvolume: SubvolumeName) -> Result<Snapshot, EngineError> {
        self.check_hard_floor(|| format!("a snapshot of {}", subvolume.display_path()))?;
        let live = self.live(subvolume)?;
        let mut name = SnapshotName::new(subvolume, SystemTime::now())
            .map_err(|_| EngineError::NotSnapshottable(subvolume))?;
        // Names are unique by construction: the filesystem refuses a name that exists, and
        // the next microsecond is tried. The snapshot ioctl commits its own transaction.
        for _ in 0..MAX_NAME_ATTEMPTS {
            match live.snapshot_to(store, name.to_string(), true) {
                Ok(info) => {
                    return Ok(Snapshot {
                        name,
                        id: info.id,
                        uuid: info.uuid,
                        of: subvolume,
                        origin: Origin::ParentUuid,
                        taken: info.created.unwrap_or_else(|| name.taken()),
                        readonly: info.readonly,
                        staged: false,
                        received_uuid: info.received_uuid,
                    })
                }
                Err(e) if e.kind == ErrorKind::AlreadyExists => name = name.next(),
                Err(e) if e.kind == ErrorKind::NoSpace => {
                    self.remove_half_made(store, &name);
                    return Err(EngineError::NoSpace {
                        doing: format!("taking a snapshot of {}", subvolume.display_path()),
                    });
                }
                Err(e) => {
                    self.remove_half_made(store, &name);
                    return Err(e.into());
                }
            }
        }
        Err(EngineError::NoFreeName(subvolume))
    }

    /// A failed snapshot ioctl creates nothing; this makes sure of it.
    fn remove_half_made(&self, store: &Dir, name: &SnapshotName) {
        if let Ok(dir) = store.open_dir(name.to_string()) {
            if let Ok(info) = dir.subvolume_info() {
                let _ = store.delete_subvolume_by_id(info.id);
                let _ = store.commit();
            }
        }
    }

    /// Take a set, all or nothing: each member committed; on a failure the members already
    /// taken are deleted again and the error names the member that failed.
    pub fn take_set(&self, subvolumes: &[SubvolumeName]) -> Result<Vec<Snapshot>, EngineError> {
        let mut members: Vec<SubvolumeName> = Vec::with_capacity(subvolumes.len());
        for s in subvolumes {
            if !s.subvolume().snapshottable() {
                return Err(EngineError::NotSnapshottable(*s));
            }
            if !members.contains(s) {
                members.push(*s);
            }
        }
        let store = self.store()?;
        let mut taken = Vec::with_capacity(members.len());
        for member in members {
            match self.take_into(&store, member) {
                Ok(s) => taken.push(s),
                Err(source) => {
                    for s in &taken {
                        let _ = store.delete_subvolume_by_id(s.id);
                    }
                    if !taken.is_empty() {
                        let _ = store.commit();
                    }
                    return Err(EngineError::SetMember {
                        member,
                        source: Box::new(source),
                    });
                }
            }
        }
        Ok(taken)
    }

    /// Every snapshot in the store, newest first.
    pub fn list(&self) -> Result<Vec<Snapshot>, EngineError> {
        self.list_in(&self.store()?)
    }

    /// The store's generation now, and every snapshot (as [`Engine::list`]) unless the
    /// generation is `known`: then `None`, since nothing a list shows has changed.
    pub fn list_since(
        &self,
        known: &[u64],
    ) -> Result<(StoreGeneration, Option<Vec<Snapshot>>), EngineError> {
        let store = self.store()?;
        // Read before the list is made: a change during it shows in the next generation.
        let now = generation::read(self.top.dir(), &store)?;
        if now.matches(known) {
            return Ok((now, None));
        }
        Ok((now, Some(self.list_in(&store)?)))
    }

    fn list_in(&self, store: &Dir) -> Result<Vec<Snapshot>, EngineError> {
        // A bad request names nothing: the next boot refuses it (adr/0015).
        let staged = read_request(store).unwrap_or(None);
        let view = self.view(store)?;
        let mut out = Vec::with_capacity(view.stored.len());
        for (stored, info) in &view.stored {
            let (of, origin) = match view.lineages.origin_of(stored) {
                Ancestry::Of(of, origin) => (of, origin),
                // Listed by its name: a contradiction matters when restoring, and is
                // refused there; the list still shows that it exists.
                Ancestry::Contradicts { by_name, .. } => (by_name, Origin::NameOnly),
            };
            out.push(Snapshot {
                name: stored.name,
                id: info.id,
                uuid: info.uuid,
                of,
                origin,
                taken: info.created.unwrap_or_else(|| stored.name.taken()),
                readonly: info.readonly,
                staged: staged
                    .as_ref()
                    .is_some_and(|r| r.members().iter().any(|m| m.snapshot() == stored.name)),
                received_uuid: info.received_uuid,
            });
        }
        out.sort_by_key(|s| std::cmp::Reverse(s.name));
        Ok(out)
    }

    /// The store's snapshots and the live subvolumes, as Btrfs reports them.
    fn view(&self, store: &Dir) -> Result<View, EngineError> {
        let mut stored = Vec::new();
        for entry in store.list_subvolumes()? {
            // Only direct children with a canonical name are snapshots; temp names and
            // anything nested are not.
            if entry.info.dir_id != SUBVOLUME_ROOT_DIR {
                continue;
            }
            let Some(Ok(name)) = entry.name.to_str().map(SnapshotName::parse) else {
                continue;
            };
            let plain = StoredSnapshot {
                name,
                uuid: entry.info.uuid,
                parent_uuid: entry.info.parent_uuid,
            };
            stored.push((plain, entry.info));
        }
        let mut lives = Vec::new();
        for sub in layout::SUBVOLUMES.iter().filter(|s| s.snapshottable()) {
            let name = SubvolumeName::parse(sub.name).expect("the table's own names parse");
            // A missing live subvolume has no lineage; its snapshots are listed by name.
            if let Ok(dir) = self.live(name) {
                let info = dir.subvolume_info()?;
                lives.push(LiveSubvolume {
                    name,
                    uuid: info.uuid,
                    parent_uuid: info.parent_uuid,
                });
            }
        }
        let plain: Vec<StoredSnapshot> = stored.iter().map(|(s, _)| *s).collect();
        let lineages = Lineages::new(&lives, &plain);
        Ok(View { stored, lineages })
    }

    /// Delete a snapshot; refused while the staged request names it (a bad request names
    /// nothing: the next boot refuses it).
    pub fn delete(&self, name: SnapshotName) -> Result<(), EngineError> {
        let _guard = self.request_lock.lock().unwrap_or_else(|p| p.into_inner());
        let store = self.store()?;
        if let Ok(Some(staged)) = read_request(&store) {
            if staged.members().iter().any(|m| m.snapshot() == name) {
                return Err(EngineError::Pinned(name));
            }
        }
        let info = self.open_snapshot(&store, name)?;
        // Not committed here: a commit after a delete costs ~20 ms (the cleaner's work is
        // in it), so it runs on the commit thread; a crash before it only brings the
        // snapshot back whole, which the keeper's reconciliation sees.
        store
            .delete_subvolume_by_id(info.id)
            .map_err(|e| match e.kind {
                // BTRFS_IOC_SNAP_DESTROY's EPERM for a root with a send in progress.
                ErrorKind::PermissionDenied => EngineError::BeingSent(name),
                _ => e.into(),
            })?;
        self.deleted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(info.id);
        self.commit_soon()
    }

    /// Open a snapshot by name: it must be a subvolume root directly in the store.
    fn open_snapshot(&self, store: &Dir, name: SnapshotName) -> Result<SubvolumeInfo, EngineError> {
        let dir = store.open_dir(name.to_string()).map_err(|e| match e.kind {
            ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::Escapes => {
                EngineError::NoSuchSnapshot(name)
            }
            _ => e.into(),
        })?;
        if !dir.is_subvolume_root()? {
            return Err(EngineError::NoSuchSnapshot(name));
        }
        Ok(dir.subvolume_info()?)
    }

    /// The root directory of the read-only snapshot `name`, opened beneath the store, to be
    /// mounted for a person (by the open module); nothing in it is read.
    pub fn open_snapshot_root(&self, name: SnapshotName) -> Result<Dir, EngineError> {
        let store = self.store()?;
        let dir = store.open_dir(name.to_string()).map_err(|e| match e.kind {
            ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::Escapes => {
                EngineError::NoSuchSnapshot(name)
            }
            _ => e.into(),
        })?;
        if !dir.is_subvolume_root()? {
            return Err(EngineError::NoSuchSnapshot(name));
        }
        if !dir.subvolume_info()?.readonly {
            return Err(EngineError::NotReadOnly(name));
        }
        Ok(dir)
    }

    /// Stage a restore of the snapshot `name` (of the subvolume its name and parent say),
    /// written durably: a request of one member.
    pub fn stage_restore(&self, name: SnapshotName) -> Result<Staged, EngineError> {
        self.stage_set_restore(&[name])
    }

    /// Stage a restore of every snapshot in `names` together — a set, put back at one boot
    /// or not at all — as one request written durably once. Each is checked as a single
    /// restore is (a read-only snapshot of a restorable subvolume, of that subvolume by
    /// lineage); at most one per subvolume. Exactly the staged request again changes
    /// nothing; any other is refused while one is staged.
    pub fn stage_set_restore(&self, names: &[SnapshotName]) -> Result<Staged, EngineError> {
        let _guard = self.request_lock.lock().unwrap_or_else(|p| p.into_inner());
        if names.is_empty() {
            return Err(EngineError::InvalidSet(
                "name at least one snapshot to put back".into(),
            ));
        }
        for (i, name) in names.iter().enumerate() {
            let subvolume = name.subvolume();
            if !subvolume.subvolume().restorable {
                return Err(EngineError::NotRestorable(subvolume));
            }
            if let Some(earlier) = names[..i].iter().find(|n| n.subvolume() == subvolume) {
                return Err(EngineError::InvalidSet(format!(
                    "{earlier} and {name} are both of {subvolume}; a restore puts each \
                     subvolume back at most once"
                )));
            }
        }
        let store = self.store()?;
        let mut infos = Vec::with_capacity(names.len());
        for &name in names {
            let info = self.open_snapshot(&store, name)?;
            if !info.readonly {
                return Err(EngineError::NotReadOnly(name));
            }
            infos.push((name, info));
        }
        let view = self.view(&store)?;
        let mut members = Vec::with_capacity(infos.len());
        for (name, info) in infos {
            let subvolume = name.subvolume();
            let stored = StoredSnapshot {
                name,
                uuid: info.uuid,
                parent_uuid: info.parent_uuid,
            };
            if let Ancestry::Contradicts { by_parent, .. } = view.lineages.origin_of(&stored) {
                return Err(EngineError::OfAnotherSubvolume {
                    snapshot: name,
                    expected: subvolume,
                    actual: by_parent,
                });
            }
            members.push(
                RestoreMember::new(subvolume, name, info.uuid)
                    .map_err(|e| EngineError::BadRequestFile(e.to_string()))?,
            );
        }
        let request =
            RestoreRequest::new(members).map_err(|e| EngineError::InvalidSet(e.to_string()))?;
        match read_request(&store)? {
            Some(staged) if staged == request => return Ok(Staged::AlreadyStaged(staged)),
            Some(staged) => return Err(EngineError::AnotherRestoreStaged { staged }),
            None => {}
        }
        store
            .write_file_durably(REQUEST_FILE_NAME, request.render().as_bytes(), 0o600)
            .map_err(|e| match e.kind {
                ErrorKind::NoSpace => EngineError::NoSpace {
                    doing: "writing the restore request".into(),
                },
                _ => e.into(),
            })?;
        Ok(Staged::New(request))
    }

    /// Remove the temporary files that durable writes of the request, cut short between
    /// their temp and their rename, left in the store (only regular files named
    /// `.tmp.<pid>.<n>`, never through a symlink; `layout::TEMP_PREFIX`). The stem does this
    /// at its start, before its first write. Returns the names removed.
    pub fn remove_leftover_temps(&self) -> Result<Vec<std::ffi::OsString>, EngineError> {
        // Under the request's lock: no write of the request is between its temp and its
        // rename meanwhile.
        let _guard = self.request_lock.lock().unwrap_or_else(|p| p.into_inner());
        let store = self.store()?;
        let removed = store.remove_leftover_temp_files()?;
        if !removed.is_empty() {
            store.sync()?;
        }
        Ok(removed)
    }

    /// Withdraw the staged request; `None` when nothing was staged.
    pub fn withdraw(&self) -> Result<Option<RestoreRequest>, EngineError> {
        let _guard = self.request_lock.lock().unwrap_or_else(|p| p.into_inner());
        let store = self.store()?;
        let staged = read_request(&store)?;
        if staged.is_some() {
            store.remove_file(REQUEST_FILE_NAME)?;
            store.sync()?;
        }
        Ok(staged)
    }

    /// Remove the request file when it is bad — unreadable, malformed, not a regular file,
    /// not root's: whatever is under its name goes (adr/0015). The next boot would refuse it
    /// anyway; until it is gone no restore can be staged. Returns what was wrong with it;
    /// `None` when nothing bad was there (no request, or a good one: that is `withdraw`).
    pub fn discard_bad_request(&self) -> Result<Option<String>, EngineError> {
        let _guard = self.request_lock.lock().unwrap_or_else(|p| p.into_inner());
        let store = self.store()?;
        let why = match read_request(&store) {
            Ok(_) => return Ok(None),
            Err(EngineError::BadRequestFile(why)) => why,
            Err(e) => return Err(e),
        };
        store.remove_all(REQUEST_FILE_NAME)?;
        store.sync()?;
        Ok(Some(why))
    }

    /// The staged request, if any.
    pub fn staged(&self) -> Result<Option<RestoreRequest>, EngineError> {
        read_request(&self.store()?)
    }

    /// The initrd's record of what it did with the last request, if any.
    pub fn outcome(&self) -> Result<Option<Outcome>, EngineError> {
        read_root_file(
            &self.store()?,
            OUTCOME_FILE_NAME,
            layout::MAX_OUTCOME_BYTES,
            |b| Outcome::parse(b).map_err(|e| e.to_string()),
        )
        .map_err(EngineError::BadOutcomeFile)
    }
}

/// The snapshot to send, with the store and its subvolume's other snapshots.
#[derive(Debug)]
pub struct CopySource {
    pub store: Dir,
    pub info: SubvolumeInfo,
    /// Every snapshot of the same subvolume in the store.
    pub siblings: Vec<(SnapshotName, SubvolumeInfo)>,
}

/// Copies off the disk: the engine's short steps of a copy and a fetch (the transfers run on
/// threads of their own, in the copies module).
impl Engine {
    /// The snapshot `name` to send, and every snapshot of its subvolume (parent candidates).
    pub fn open_for_copy(&self, name: SnapshotName) -> Result<CopySource, EngineError> {
        let store = self.store()?;
        let info = self.open_snapshot(&store, name)?;
        let mut siblings = Vec::new();
        for entry in store.list_subvolumes()? {
            if entry.info.dir_id != SUBVOLUME_ROOT_DIR {
                continue;
            }
            if let Some(Ok(n)) = entry.name.to_str().map(SnapshotName::parse) {
                if n.subvolume() == name.subvolume() {
                    siblings.push((n, entry.info));
                }
            }
        }
        Ok(CopySource {
            store,
            info,
            siblings,
        })
    }

    /// Before a fetch: the store checked, no snapshot named `name` in it, and an empty
    /// `.incoming` directory (root-only) to receive into.
    pub fn prepare_fetch(&self, name: SnapshotName) -> Result<(), EngineError> {
        let store = self.store()?;
        match store.stat_at(name.to_string()) {
            Ok(_) => return Err(EngineError::AlreadyHere(name)),
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        store.create_dir(INCOMING_DIR_NAME, 0o700)?;
        self.clean_incoming()
    }

    /// Remove whatever is in the store's `.incoming`: fetches that died.
    pub fn clean_incoming(&self) -> Result<(), EngineError> {
        let store = self.store()?;
        let incoming = match store.open_dir(INCOMING_DIR_NAME) {
            Ok(d) => d,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let names = incoming.entry_names()?;
        for entry in &names {
            incoming.remove_all(entry)?;
        }
        if !names.is_empty() {
            store.commit()?;
        }
        Ok(())
    }

    /// After a fetch received `name` into `.incoming`: check it (a read-only subvolume whose
    /// received UUID is `received_uuid`), put a read-only snapshot of it in the store under
    /// its name (one step: a listing sees it whole or not at all; the kernel refuses to
    /// move a read-only subvolume to another directory), and remove the received one.
    pub fn finish_fetch(
        &self,
        name: SnapshotName,
        received_uuid: Uuid,
    ) -> Result<Snapshot, EngineError> {
        let store = self.store()?;
        let unverified = |why: String| EngineError::FetchUnverified { name, why };
        let incoming = store.open_dir(INCOMING_DIR_NAME)?;
        let received = incoming
            .open_dir(name.to_string())
            .map_err(|e| unverified(e.to_string()))?;
        let info = received.subvolume_info()?;
        if !received.is_subvolume_root()?
            || !info.readonly
            || info.received_uuid != Some(received_uuid)
        {
            let why = format!(
                "read-only: {}, received UUID {:?}, expected {received_uuid}",
                info.readonly, info.received_uuid
            );
            drop(received);
            let _ = self.clean_incoming();
            return Err(unverified(why));
        }
        let made = received.snapshot_to(&store, name.to_string(), true);
        drop(received);
        let _ = self.clean_incoming();
        match made {
            Ok(_) => {}
            Err(e) if e.kind == ErrorKind::AlreadyExists => {
                return Err(EngineError::AlreadyHere(name))
            }
            Err(e) => return Err(e.into()),
        }
        store.commit()?;
        self.list()?
            .into_iter()
            .find(|s| s.name == name)
            .ok_or(EngineError::NoSuchSnapshot(name))
    }
}

/// Where a fetch is received before it is checked (`layout::copies::INCOMING_DIR_NAME`).
const INCOMING_DIR_NAME: &str = layout::copies::INCOMING_DIR_NAME;

/// The inode number of a Btrfs subvolume's root directory: a snapshot sits directly in the
/// store when the directory holding it is the store's root.
const SUBVOLUME_ROOT_DIR: u64 = 256;

/// Forget the deleted subvolumes the cleaner is done with; how many are left.
fn still_cleaning(dir: &Dir, deleted: &Mutex<Vec<u64>>) -> usize {
    let mut deleted = deleted.lock().unwrap_or_else(|p| p.into_inner());
    // A deleted subvolume's root item stays until the cleaner has freed its extents; on an
    // error it is counted as still there.
    deleted.retain(|id| dir.subvolume_tree_exists(*id).unwrap_or(true));
    deleted.len()
}

/// How many names one take tries before giving up (each a microsecond later).
const MAX_NAME_ATTEMPTS: usize = 1000;

/// What Btrfs says about the store and the live subvolumes, read once per act.
struct View {
    stored: Vec<(StoredSnapshot, SubvolumeInfo)>,
    lineages: Lineages,
}

/// The staged request, read as the initrd will read it.
fn read_request(store: &Dir) -> Result<Option<RestoreRequest>, EngineError> {
    read_root_file(store, REQUEST_FILE_NAME, layout::MAX_REQUEST_BYTES, |b| {
        RestoreRequest::parse(b).map_err(|e| e.to_string())
    })
    .map_err(EngineError::BadRequestFile)
}

/// A small file in the store that only root may have written (not a symlink, fifo or
/// directory; at most `max` bytes), parsed; `None` when absent; the error says why not.
fn read_root_file<T>(
    store: &Dir,
    name: &str,
    max: usize,
    parse: impl FnOnce(&[u8]) -> Result<T, String>,
) -> Result<Option<T>, String> {
    match store.read_file_limited(name, max) {
        Ok(None) => Ok(None),
        Ok(Some((st, _))) if st.uid != 0 => Err(format!("owned by uid {}, not root", st.uid)),
        Ok(Some((_, bytes))) => parse(&bytes).map(Some),
        Err(e) => Err(e.to_string()),
    }
}

mod unix_micros {
    use std::time::SystemTime;

    pub fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(layout::human::unix_micros(*t))
    }
}
