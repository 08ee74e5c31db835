//! Which snapshot holds the disk (adr/0029): the data space of every snapshot and live
//! subvolume, from their file extents, without quotas. The checks run on the engine's
//! thread; the walk runs off it, one at a time, and what it walked is kept per generation
//! for the next question.

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use btrfs::space::SpaceCache;
use btrfs::RootSpace;
use layout::{SnapshotName, SubvolumeName};

use super::{Engine, EngineError};

/// One snapshot's space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSpace {
    pub name: SnapshotName,
    pub of: SubvolumeName,
    pub taken: SystemTime,
    pub space: RootSpace,
}

/// One subvolume's: its live subvolume, its snapshots together, and their growth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubvolumeSpace {
    pub subvolume: SubvolumeName,
    /// `None` when the live subvolume is missing.
    pub live: Option<RootSpace>,
    pub snapshots: u32,
    /// The sum of its snapshots' exclusive bytes.
    pub snapshots_exclusive: u64,
    /// Bytes a day ([`btrfs::growth_per_day`]); `None` with fewer than two snapshots.
    pub growth_per_day: Option<u64>,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceReport {
    /// The snapshots asked about (all when none were named), oldest first.
    pub snapshots: Vec<SnapshotSpace>,
    /// Every snapshotted subvolume, in the layout's order.
    pub subvolumes: Vec<SubvolumeSpace>,
    /// What the snapshots alone hold: deleting all of them frees it.
    pub store_bytes: u64,
    /// Every data extent walked (live subvolumes, the store, the snapshots).
    pub total_bytes: u64,
    pub complete: bool,
    /// Subvolumes walked for this answer (the rest came from the kept walks).
    pub walked: u64,
}

/// The checks done, the walk to do ([`SpaceMeasure::run`], off the engine's thread).
#[derive(Debug)]
pub struct SpaceMeasure {
    top: btrfs::Top,
    groups: Vec<Vec<u64>>,
    /// Per group: the subvolume, and whether its live subvolume is the group's last member.
    subvolumes: Vec<(SubvolumeName, bool)>,
    snapshots: Vec<SnapshotSpace>,
    asked: Vec<SnapshotName>,
    cache: Arc<Mutex<SpaceCache>>,
}

impl Engine {
    /// Check `names` (every one a snapshot in the store; empty: all) and gather the groups
    /// to walk: per snapshotted subvolume, its snapshots oldest first and then the live
    /// subvolume; and the store itself. Does not commit.
    pub fn prepare_space(&self, names: &[SnapshotName]) -> Result<SpaceMeasure, EngineError> {
        let store = self.store()?;
        let mut list = self.list_in(&store)?;
        if let Some(missing) = names.iter().find(|n| !list.iter().any(|s| s.name == **n)) {
            return Err(EngineError::NoSuchSnapshot(*missing));
        }
        // Subvolume ids grow with every subvolume made: oldest first.
        list.sort_by_key(|s| s.id);
        let mut groups = Vec::new();
        let mut subvolumes = Vec::new();
        let mut ofs: Vec<SubvolumeName> = layout::SUBVOLUMES
            .iter()
            .filter(|s| s.snapshottable())
            .filter_map(|s| SubvolumeName::parse(s.name).ok())
            .collect();
        for s in &list {
            if !ofs.contains(&s.of) {
                ofs.push(s.of);
            }
        }
        for of in ofs {
            let mut group: Vec<u64> = list.iter().filter(|s| s.of == of).map(|s| s.id).collect();
            let live = match self.live(of) {
                Ok(dir) if of.subvolume().snapshottable() => Some(dir.subvolume_info()?.id),
                _ => None,
            };
            group.extend(live);
            if !group.is_empty() {
                groups.push(group);
                subvolumes.push((of, live.is_some()));
            }
        }
        groups.push(vec![store.subvolume_info()?.id]);
        let snapshots = list
            .iter()
            .map(|s| SnapshotSpace {
                name: s.name,
                of: s.of,
                taken: s.taken,
                space: RootSpace {
                    id: s.id,
                    ..RootSpace::default()
                },
            })
            .collect();
        Ok(SpaceMeasure {
            top: self.top.try_clone()?,
            groups,
            subvolumes,
            snapshots,
            asked: names.to_vec(),
            cache: self.space_cache.clone(),
        })
    }
}

impl SpaceMeasure {
    /// Walk what is not kept from before, until `deadline` (then `complete: false`, and
    /// what was walked is kept for the next question).
    pub fn run(mut self, deadline: Instant) -> Result<SpaceReport, EngineError> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let space = self.top.space_cached(&self.groups, deadline, &mut cache)?;
        drop(cache);
        let of_id = |id: u64| space.roots.iter().find(|r| r.id == id).copied();
        for s in &mut self.snapshots {
            s.space = of_id(s.space.id).unwrap_or(s.space);
        }
        let subvolumes = self
            .subvolumes
            .iter()
            .zip(&self.groups)
            .filter(|((of, _), _)| of.subvolume().snapshottable())
            .map(|((of, has_live), group)| {
                let mine: Vec<&SnapshotSpace> =
                    self.snapshots.iter().filter(|s| s.of == *of).collect();
                let timeline: Vec<(SystemTime, u64)> = mine
                    .iter()
                    .map(|s| (s.taken, s.space.new_since_previous.unwrap_or(0)))
                    .collect();
                SubvolumeSpace {
                    subvolume: *of,
                    live: has_live
                        .then(|| group.last().and_then(|id| of_id(*id)))
                        .flatten(),
                    snapshots: mine.len() as u32,
                    snapshots_exclusive: mine.iter().map(|s| s.space.exclusive).sum(),
                    growth_per_day: btrfs::growth_per_day(&timeline),
                }
            })
            .collect();
        let snapshots = if self.asked.is_empty() {
            self.snapshots
        } else {
            self.snapshots
                .into_iter()
                .filter(|s| self.asked.contains(&s.name))
                .collect()
        };
        Ok(SpaceReport {
            snapshots,
            subvolumes,
            store_bytes: space.history_only,
            total_bytes: space.total,
            complete: space.complete,
            walked: space.walked,
        })
    }
}
