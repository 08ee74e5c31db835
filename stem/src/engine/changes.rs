//! What a restore would throw away: the changes in a live subvolume since one of its
//! snapshots, counted from Btrfs metadata (adr/0012, `btrfs::changes`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btrfs::{
    Change, Changes, ChangesOptions, Counts, Progress, SubvolumeEntry, SubvolumeInfo, Viewer,
};
use layout::SnapshotName;
use uuid::Uuid;

use super::{Engine, EngineError};

/// At most this many changed paths are listed; the rest are counted.
pub const MAX_PATHS: usize = 10_000;

/// How often a running count reports how far it has come (the stem logs it).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How many snapshot-of links are followed from the live subvolume back to the snapshot.
const MAX_LINEAGE: usize = 64;

/// A count holds at most this many changed inodes (about 250 bytes each, so ~250 MB at
/// most); past it the answer says "at least" (adr/0016, the stem's MemoryMax).
pub const MAX_COUNTED_INODES: usize = 1_000_000;

/// How many complete counts are kept for reuse (a few hundred bytes each, without paths).
pub const MAX_REUSED_COUNTS: usize = 64;

/// Whether a count first commits the filesystem (adr/0012, adr/0016).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Commit first, so that every write so far is counted: for somebody who may confirm.
    First,
    /// Never commit: count what the filesystem's last commit holds (writes not yet
    /// committed may be missing). For people who only look.
    Never,
}

/// What a count is of: the live subvolume as of one generation, against one snapshot. A
/// subvolume's generation moves with every commit that changes it, so a count made at the
/// same key counts the same trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CountKey {
    live: Uuid,
    live_generation: u64,
    snapshot: Uuid,
}

/// Complete counts, newest last, at most [`MAX_REUSED_COUNTS`].
#[derive(Debug, Default)]
pub(super) struct ReusedCounts(VecDeque<(CountKey, Changes)>);

impl ReusedCounts {
    fn get(&self, key: &CountKey) -> Option<Changes> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, c)| c.clone())
    }

    fn put(&mut self, key: CountKey, counts: Changes) {
        self.0.retain(|(k, _)| *k != key);
        if self.0.len() >= MAX_REUSED_COUNTS {
            self.0.pop_front();
        }
        self.0.push_back((key, counts));
    }
}

/// A count of the changes since a snapshot, checked and ready to run: the checks and the
/// commit are quick and belong on the engine's thread; the count itself may take seconds
/// and runs elsewhere, so that it never holds up a snapshot.
#[derive(Debug)]
pub struct ChangeCount {
    top: btrfs::Top,
    live: SubvolumeInfo,
    snapshot: SubvolumeInfo,
    key: CountKey,
    reused: Arc<Mutex<ReusedCounts>>,
}

/// One count at a time: a burst of previews queues here instead of filling the blocking
/// pool with tree searches.
static COUNTS_IN_TURN: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// A count that could not run to its answer: no turn was given, or its thread stopped.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CountStopped(String);

impl ChangeCount {
    /// Count until `deadline`; see [`Engine::changes_since`]. A complete count is kept, so
    /// that [`ChangeCount::reused`] can give it again while the live subvolume's generation
    /// stands (without its paths).
    pub fn run(
        &self,
        deadline: Instant,
        with_paths: bool,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Changes, EngineError> {
        self.run_seen_by(deadline, with_paths, None, progress)
    }

    /// [`ChangeCount::run_seen_by`] off the async runtime, in turn with every other count:
    /// counts wait for each other (each may take seconds), never for the engine's thread
    /// beyond the checks and the commit, so a snapshot is not held up by a count.
    pub async fn run_in_turn(
        self,
        deadline: Instant,
        with_paths: bool,
        viewer: Option<Viewer>,
        progress: impl FnMut(Progress) + Send + 'static,
    ) -> Result<Result<Changes, EngineError>, CountStopped> {
        let _turn = COUNTS_IN_TURN
            .acquire()
            .await
            .map_err(|e| CountStopped(e.to_string()))?;
        let mut progress = progress;
        tokio::task::spawn_blocking(move || {
            self.run_seen_by(deadline, with_paths, viewer.as_ref(), &mut progress)
        })
        .await
        .map_err(|e| CountStopped(e.to_string()))
    }

    /// As [`ChangeCount::run`], the paths narrowed to what `viewer` may see (see
    /// [`btrfs::Viewer`]); the counts stay the whole subvolume's.
    pub fn run_seen_by(
        &self,
        deadline: Instant,
        with_paths: bool,
        viewer: Option<&Viewer>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Changes, EngineError> {
        let options = ChangesOptions {
            deadline,
            with_paths,
            max_paths: MAX_PATHS,
            max_items: u64::MAX,
            max_inodes: MAX_COUNTED_INODES,
            progress_every: PROGRESS_EVERY,
        };
        let changes =
            self.top
                .changes_seen_by(&self.live, &self.snapshot, options, viewer, progress)?;
        if changes.complete {
            let counts = Changes {
                paths: Vec::new(),
                paths_left_off: 0,
                paths_hidden: 0,
                ..changes.clone()
            };
            self.reused
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .put(self.key, counts);
        }
        Ok(changes)
    }

    /// A complete count made earlier of the same live generation against the same
    /// snapshot (without paths), if one is kept: the same trees, so the same answer.
    pub fn reused(&self) -> Option<Changes> {
        self.reused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.key)
    }
}

/// `changes` counted from its listed paths alone, with no bytes written (Btrfs counts those
/// per subvolume): a person's diff, where what they are shown is counted from what they
/// are shown.
pub fn counted_from_paths(mut changes: Changes) -> Changes {
    let (mut files, mut directories) = (Counts::default(), Counts::default());
    for p in &changes.paths {
        let counts = if p.directory {
            &mut directories
        } else {
            &mut files
        };
        match p.change {
            Change::Added => counts.added += 1,
            Change::Modified => counts.modified += 1,
            Change::Removed => counts.removed += 1,
        }
    }
    changes.files = files;
    changes.directories = directories;
    changes.bytes_written = 0;
    changes
}

impl Engine {
    /// What changed in the live subvolume since the snapshot `name` (of a restorable
    /// subvolume, read-only, on the live subvolume's own history): files and directories
    /// added, modified and removed, and bytes written. Reads no file content. Past `limit`
    /// it answers with what it has and `complete: false`. `with_paths` lists up to
    /// [`MAX_PATHS`] paths, relative to the subvolume's root. `progress` is called about
    /// once a second. Commits the filesystem first (written-back data is what Btrfs
    /// metadata can see).
    pub fn changes_since(
        &self,
        name: SnapshotName,
        limit: Duration,
        with_paths: bool,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Changes, EngineError> {
        let deadline = Instant::now() + limit;
        self.prepare_change_count(name, Commit::First)?
            .run(deadline, with_paths, progress)
    }

    /// The checks of [`Engine::changes_since`] and, with [`Commit::First`], its commit;
    /// without the count.
    pub fn prepare_change_count(
        &self,
        name: SnapshotName,
        commit: Commit,
    ) -> Result<ChangeCount, EngineError> {
        let subvolume = name.subvolume();
        if !subvolume.subvolume().restorable {
            return Err(EngineError::NotRestorable(subvolume));
        }
        let store = self.store()?;
        let snapshot = self.open_snapshot(&store, name)?;
        if !snapshot.readonly {
            return Err(EngineError::NotReadOnly(name));
        }
        let live_dir = self.live(subvolume)?;
        // Data not yet written back has no extent items yet, and inode updates wait in
        // memory until a commit: write everything out first, so the count is exact.
        if commit == Commit::First {
            live_dir.commit()?;
        }
        let live = live_dir.subvolume_info()?;
        let stored = store.list_subvolumes()?;
        if !on_history_of(&live, &snapshot, &stored) {
            return Err(EngineError::NotInHistory {
                snapshot: name,
                subvolume,
            });
        }
        Ok(ChangeCount {
            top: self.top.try_clone()?,
            key: CountKey {
                live: live.uuid,
                live_generation: live.generation,
                snapshot: snapshot.uuid,
            },
            live,
            snapshot,
            reused: self.reused_counts.clone(),
        })
    }
}

/// True when `snapshot` holds a state the live subvolume descends from: taken of it, or of
/// a subvolume it was made from (by an earlier restore) no later than it was made, or that
/// very subvolume. Only then do generations newer than the snapshot's mean "changed since".
fn on_history_of(
    live: &SubvolumeInfo,
    snapshot: &SubvolumeInfo,
    stored: &[SubvolumeEntry],
) -> bool {
    let by_uuid: HashMap<Uuid, &SubvolumeInfo> =
        stored.iter().map(|e| (e.info.uuid, &e.info)).collect();
    // Walk from the live subvolume to what it was made from: `upto` is the generation
    // until which `tree`'s state is the live subvolume's past.
    let mut tree = live.uuid;
    let mut upto = u64::MAX;
    let mut parent = live.parent_uuid;
    let mut made_at = live.created_generation;
    for _ in 0..MAX_LINEAGE {
        if snapshot.uuid == tree {
            return true;
        }
        let frozen = by_uuid.get(&tree).is_some_and(|i| i.readonly);
        if snapshot.parent_uuid == Some(tree) && (snapshot.created_generation <= upto || frozen) {
            return true;
        }
        let Some(p) = parent else {
            return false;
        };
        tree = p;
        upto = made_at;
        match by_uuid.get(&p) {
            Some(info) => {
                parent = info.parent_uuid;
                made_at = info.created_generation;
            }
            None => parent = None,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn info(uuid: u8, parent: Option<u8>, generation: u64, readonly: bool) -> SubvolumeInfo {
        SubvolumeInfo {
            id: 256 + u64::from(uuid),
            parent_id: 5,
            dir_id: 256,
            uuid: Uuid::from_bytes([uuid; 16]),
            parent_uuid: parent.map(|p| Uuid::from_bytes([p; 16])),
            received_uuid: None,
            created: Some(SystemTime::UNIX_EPOCH),
            created_generation: generation,
            generation,
            readonly,
        }
    }

    fn entry(i: &SubvolumeInfo) -> SubvolumeEntry {
        SubvolumeEntry {
            name: "x".into(),
            info: i.clone(),
        }
    }

    #[test]
    fn snapshots_on_the_live_history_are_told_from_others() {
        // Live L1 (uuid 1); S0 at 10 and S2 at 30 of it; a restore made L2 (uuid 5) from
        // S1 (uuid 3, taken at 20) at 40.
        let l1 = info(1, None, 1, false);
        let s0 = info(2, Some(1), 10, true);
        let s1 = info(3, Some(1), 20, true);
        let s2 = info(4, Some(1), 30, true);
        let l2 = info(5, Some(3), 40, false);
        let s3 = info(6, Some(5), 50, true);
        let stored: Vec<_> = [&s0, &s1, &s2, &s3].into_iter().map(entry).collect();
        assert!(on_history_of(&l1, &s0, &stored));
        assert!(on_history_of(&l1, &s2, &stored));
        assert!(on_history_of(&l2, &s3, &stored), "taken of the live one");
        assert!(
            on_history_of(&l2, &s1, &stored),
            "the live one was made from it"
        );
        assert!(
            on_history_of(&l2, &s0, &stored),
            "older than what it was made from"
        );
        assert!(
            !on_history_of(&l2, &s2, &stored),
            "a state the restore left behind"
        );
        let stranger = info(9, Some(8), 5, true);
        assert!(!on_history_of(&l2, &stranger, &stored));
    }
}
