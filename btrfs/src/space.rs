//! Which snapshot holds the disk: the data space of a set of subvolumes, without quotas
//! (adr/0029).
//!
//! Every subvolume's tree is walked for its file extent items (`EXTENT_DATA`, by
//! `BTRFS_IOC_TREE_SEARCH_V2`). A regular or preallocated item names a disk extent by its
//! logical address (`disk_bytenr`) and its size on disk (`disk_num_bytes`: after
//! compression, and the whole extent however little of it the item still uses, as Btrfs
//! frees nothing of an extent until its last reference goes). Counting each disk extent once
//! per subvolume gives, for each subvolume of the set:
//!
//! - **referenced**: the disk bytes of every extent it references;
//! - **exclusive**: of those, the extents no other subvolume of the set references — what
//!   deleting it frees now (once the cleaner has run);
//! - **shared**: the rest;
//! - **new since the previous** one of its group (a subvolume's snapshots, oldest first):
//!   the extents it references that the one before it does not — what the subvolume wrote
//!   between the two, as far as it was still there at the second.
//!
//! Data only. File data small enough to be stored inline lives in the tree's leaves, and
//! the trees' own blocks (metadata) are shared and unshared block by block as they are
//! copied on write; neither is a data extent, and tree blocks cannot be attributed from user
//! space without the kernel's back-reference walk. Inline bytes are reported apart
//! ([`RootSpace::inline`]); tree blocks are not counted (quotas count them; adr/0029 says
//! by how much that differs and how the tests check the data part exactly).
//!
//! Exclusive is relative to the set walked: an extent also referenced by a subvolume outside
//! it (a reflink into a subvolume nobody asked about) counts as exclusive.

use std::collections::{HashMap, HashSet};
use std::mem::offset_of;
use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::time::{Duration, Instant, SystemTime};

use linux_raw_sys::btrfs as raw;

use crate::sys::{SearchKey, TreeSearch};
use crate::{le, Error, ErrorKind, Result, RootItem, Top, ROOT_ITEM_KEY, ROOT_TREE_ID};

const EXTENT_DATA: u8 = raw::BTRFS_EXTENT_DATA_KEY as u8;
const FIRST_INODE: u64 = raw::BTRFS_FIRST_FREE_OBJECTID as u64;
const LAST_INODE: u64 = raw::BTRFS_LAST_FREE_OBJECTID as u64;
const INLINE: u8 = raw::BTRFS_FILE_EXTENT_INLINE as u8;
const REG: u8 = raw::BTRFS_FILE_EXTENT_REG as u8;
const PREALLOC: u8 = raw::BTRFS_FILE_EXTENT_PREALLOC as u8;
/// How often the deadline is looked at, in items.
const CHECK_EVERY: u64 = 4096;

/// The data space of one subvolume, in bytes on disk (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RootSpace {
    /// The subvolume (tree) id.
    pub id: u64,
    pub referenced: u64,
    /// What deleting it frees now: extents no other subvolume of the set references.
    pub exclusive: u64,
    /// `referenced - exclusive`.
    pub shared: u64,
    /// Extents it references that the subvolume before it in its group does not; `None` for
    /// the first of a group.
    pub new_since_previous: Option<u64>,
    /// Bytes of file data stored inline in its tree's leaves (as stored, so compressed when
    /// compressed). Metadata: in none of the sums above.
    pub inline: u64,
    /// Distinct disk extents it references.
    pub extents: u64,
}

/// The answer for a set of subvolumes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Space {
    /// One per subvolume asked about, in the order asked (groups one after the other).
    pub roots: Vec<RootSpace>,
    /// Disk bytes of the distinct extents the whole set references.
    pub total: u64,
    /// Of those, the extents no group's last member holds: with each group a subvolume's
    /// snapshots and then the live subvolume, what the snapshots alone hold (deleting every
    /// one of them frees it).
    pub history_only: u64,
    /// File extent items looked at (the work done).
    pub items_seen: u64,
    /// Subvolumes walked for this answer (the others came from the cache).
    pub walked: u64,
    /// False when the deadline cut the walk short: then no number may be relied on.
    pub complete: bool,
}

/// What the walks found, kept between answers (the stem keeps one): a subvolume's extents
/// are walked again only when its generation moved. A read-only snapshot's tree never changes
/// (but for a balance, which moves its generation too), so each is walked once; the live
/// subvolumes are walked again after they changed. Each entry is kept as the difference from
/// the subvolume before it in its group when it was walked (a day's churn, not the whole
/// tree), so a thousand snapshots cost what their changes cost.
#[derive(Debug, Default)]
pub struct SpaceCache {
    entries: HashMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    generation: u64,
    /// The subvolume this entry is a difference from; `None`: `added` is the whole set.
    base: Option<u64>,
    /// Sorted by logical address.
    added: Vec<(u64, u64)>,
    removed: Vec<u64>,
    inline: u64,
}

impl SpaceCache {
    pub fn new() -> SpaceCache {
        SpaceCache::default()
    }

    /// How many subvolumes it holds (the ones asked about last, and those their differences
    /// are taken from).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forget `id` and every entry that is a difference from it, however indirectly.
    fn invalidate(&mut self, id: u64) {
        let mut gone = vec![id];
        while let Some(id) = gone.pop() {
            if self.entries.remove(&id).is_some() {
                gone.extend(
                    self.entries
                        .iter()
                        .filter(|(_, e)| e.base == Some(id))
                        .map(|(k, _)| *k),
                );
            }
        }
    }

    /// The whole set of `id`'s extents (address → disk bytes), replayed from the first
    /// entry of its chain of differences.
    fn full_set(&self, id: u64) -> Option<HashMap<u64, u64>> {
        let mut chain = vec![id];
        let mut at = self.entries.get(&id)?;
        while let Some(base) = at.base {
            if chain.contains(&base) || chain.len() > self.entries.len() {
                return None; // cannot happen: bases are always entries made earlier
            }
            chain.push(base);
            at = self.entries.get(&base)?;
        }
        let mut set = HashMap::new();
        for id in chain.iter().rev() {
            let e = &self.entries[id];
            for r in &e.removed {
                set.remove(r);
            }
            set.extend(e.added.iter().copied());
        }
        Some(set)
    }

    /// Drop entries nobody asked about that no kept entry is a difference from.
    fn prune(&mut self, asked: &HashSet<u64>) {
        loop {
            let needed: HashSet<u64> = self.entries.values().filter_map(|e| e.base).collect();
            let before = self.entries.len();
            self.entries
                .retain(|id, _| asked.contains(id) || needed.contains(id));
            if self.entries.len() == before {
                return;
            }
        }
    }
}

/// What is known of one disk extent across the groups.
#[derive(Debug, Clone, Copy)]
struct Held {
    disk_bytes: u64,
    /// How many subvolumes (positions) hold it, counted as each stretch of neighbours
    /// holding it ends.
    holders: u64,
    /// The first position holding it (the only one when `holders == 1`).
    first: u32,
    /// The last member of a group holds it.
    held_by_last: bool,
}

/// One tree walked: its extents, sorted by address, each once.
#[derive(Debug)]
struct Walk {
    extents: Vec<(u64, u64)>,
    inline: u64,
    items: u64,
}

/// Walk tree `id` for its file extent items; `None` when past the deadline.
fn walk(
    fd: std::os::fd::BorrowedFd<'_>,
    search: &mut TreeSearch,
    id: u64,
    deadline: Instant,
) -> Result<Option<Walk>> {
    let key = SearchKey {
        tree_id: id,
        min: (FIRST_INODE, EXTENT_DATA, 0),
        max: (LAST_INODE, EXTENT_DATA, u64::MAX),
    };
    let mut walk = Walk {
        extents: Vec::new(),
        inline: 0,
        items: 0,
    };
    let mut late = false;
    search
        .scan(fd, key, 0, |item| {
            if item.item_type as u8 != EXTENT_DATA {
                return ControlFlow::Continue(());
            }
            walk.items += 1;
            if walk.items.is_multiple_of(CHECK_EVERY) && Instant::now() > deadline {
                late = true;
                return ControlFlow::Break(());
            }
            match FileExtent::parse(item.data) {
                Some(FileExtent::Inline { stored }) => walk.inline += stored,
                Some(FileExtent::Disk { bytenr, disk_bytes }) => {
                    walk.extents.push((bytenr, disk_bytes));
                }
                None => {}
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| Error::sys("measure space", id.to_string(), e))?;
    if late {
        return Ok(None);
    }
    walk.extents.sort_unstable();
    walk.extents.dedup_by_key(|e| e.0);
    Ok(Some(walk))
}

/// The root items' generations of `ids` (one range search of the root tree).
fn generations(fd: std::os::fd::BorrowedFd<'_>, ids: &[u64]) -> Result<HashMap<u64, u64>> {
    let (Some(min), Some(max)) = (ids.iter().min(), ids.iter().max()) else {
        return Ok(HashMap::new());
    };
    let wanted: HashSet<u64> = ids.iter().copied().collect();
    let mut found = HashMap::new();
    let key = SearchKey {
        tree_id: ROOT_TREE_ID,
        min: (*min, ROOT_ITEM_KEY, 0),
        max: (*max, ROOT_ITEM_KEY, u64::MAX),
    };
    TreeSearch::new()
        .for_each(fd, key, |item| {
            if item.item_type as u8 == ROOT_ITEM_KEY && wanted.contains(&item.objectid) {
                let root = RootItem::parse(item.data);
                if root.refs > 0 {
                    found.insert(item.objectid, root.generation);
                }
            }
        })
        .map_err(|e| Error::sys("measure space", "", e))?;
    Ok(found)
}

impl Top {
    /// The data space of `groups`: each a list of subvolume ids on this filesystem, the
    /// snapshots of one subvolume oldest first (its live subvolume last, if wanted), so that
    /// [`RootSpace::new_since_previous`] compares neighbours. Exclusive is against every
    /// subvolume of every group. Walks each tree (tree search; needs CAP_SYS_ADMIN); past
    /// `deadline` it stops and answers `complete: false`.
    pub fn space(&self, groups: &[Vec<u64>], deadline: Instant) -> Result<Space> {
        self.space_cached(groups, deadline, &mut SpaceCache::new())
    }

    /// [`Top::space`], walking only the subvolumes `cache` does not hold at their current
    /// generation, and leaving in it what the next answer needs.
    pub fn space_cached(
        &self,
        groups: &[Vec<u64>],
        deadline: Instant,
        cache: &mut SpaceCache,
    ) -> Result<Space> {
        const OP: &str = "measure space";
        let ids: Vec<u64> = groups.iter().flatten().copied().collect();
        let asked: HashSet<u64> = ids.iter().copied().collect();
        if asked.len() != ids.len() {
            let mut seen = HashSet::new();
            let dup = ids.iter().find(|id| !seen.insert(**id)).copied();
            return Err(Error::check(
                OP,
                dup.unwrap_or_default().to_string(),
                ErrorKind::Other,
                "a subvolume is named twice; name each once",
            ));
        }
        if ids.len() >= u32::MAX as usize {
            return Err(Error::check(
                OP,
                "",
                ErrorKind::TooLarge,
                "too many subvolumes",
            ));
        }
        let fd = self.dir().as_fd();
        let generation = generations(fd, &ids)?;
        if let Some(missing) = ids.iter().find(|id| !generation.contains_key(id)) {
            return Err(Error::check(
                OP,
                missing.to_string(),
                ErrorKind::NotFound,
                "no subvolume has this id",
            ));
        }
        for id in &ids {
            if cache
                .entries
                .get(id)
                .is_some_and(|e| e.generation != generation[id])
            {
                cache.invalidate(*id);
            }
        }

        let mut search = TreeSearch::new();
        let mut held: HashMap<u64, Held> = HashMap::new();
        let mut roots: Vec<RootSpace> = Vec::with_capacity(ids.len());
        let mut space = Space {
            complete: true,
            ..Space::default()
        };
        let mut pos = 0u32;
        'groups: for group in groups {
            // The extents the previous member holds: address → (disk bytes, the position
            // from which the group has held it without a break).
            let mut running: HashMap<u64, (u64, u32)> = HashMap::new();
            let mut referenced = 0u64;
            let mut previous: Option<u64> = None;
            for id in group {
                let (added, removed, inline) = match cache.entries.get(id) {
                    Some(e) if e.base == previous && (e.base.is_some() || running.is_empty()) => {
                        (e.added.clone(), e.removed.clone(), e.inline)
                    }
                    Some(e) => {
                        let inline = e.inline;
                        let set = cache.full_set(*id).ok_or_else(|| {
                            Error::check(OP, id.to_string(), ErrorKind::Other, "broken cache")
                        })?;
                        let (a, r) = difference(&running, set.into_iter().collect());
                        (a, r, inline)
                    }
                    None => {
                        if Instant::now() > deadline {
                            space.complete = false;
                            break 'groups;
                        }
                        let Some(w) = walk(fd, &mut search, *id, deadline)? else {
                            space.complete = false;
                            break 'groups;
                        };
                        space.walked += 1;
                        space.items_seen += w.items;
                        let (a, r) = difference(&running, w.extents.clone());
                        // A difference from the previous member when that one is kept;
                        // else the whole set.
                        let entry = match previous.filter(|p| cache.entries.contains_key(p)) {
                            Some(p) => Entry {
                                generation: generation[id],
                                base: Some(p),
                                added: a.clone(),
                                removed: r.clone(),
                                inline: w.inline,
                            },
                            None => Entry {
                                generation: generation[id],
                                base: None,
                                added: w.extents,
                                removed: Vec::new(),
                                inline: w.inline,
                            },
                        };
                        cache.entries.insert(*id, entry);
                        (a, r, w.inline)
                    }
                };
                let mut root = RootSpace {
                    id: *id,
                    inline,
                    new_since_previous: previous.map(|_| 0),
                    ..RootSpace::default()
                };
                for address in &removed {
                    if let Some((disk, from)) = running.remove(address) {
                        referenced -= disk;
                        close(&mut held, *address, disk, from, pos);
                    }
                }
                for (address, disk) in &added {
                    if running.insert(*address, (*disk, pos)).is_none() {
                        referenced += disk;
                        if let Some(new) = root.new_since_previous.as_mut() {
                            *new += disk;
                        }
                    }
                }
                root.referenced = referenced;
                root.extents = running.len() as u64;
                roots.push(root);
                previous = Some(*id);
                pos += 1;
            }
            for (address, (disk, from)) in running {
                close(&mut held, address, disk, from, pos);
                if let Some(h) = held.get_mut(&address) {
                    h.held_by_last = true;
                }
            }
        }
        for (_, h) in held {
            space.total += h.disk_bytes;
            if !h.held_by_last {
                space.history_only += h.disk_bytes;
            }
            if h.holders == 1 {
                if let Some(root) = roots.get_mut(h.first as usize) {
                    root.exclusive += h.disk_bytes;
                }
            }
        }
        for root in &mut roots {
            root.shared = root.referenced - root.exclusive;
        }
        space.roots = roots;
        cache.prune(&asked);
        Ok(space)
    }
}

/// A stretch of neighbours `[from, to)` held the extent at `address`.
fn close(held: &mut HashMap<u64, Held>, address: u64, disk: u64, from: u32, to: u32) {
    let h = held.entry(address).or_insert(Held {
        disk_bytes: disk,
        holders: 0,
        first: from,
        held_by_last: false,
    });
    h.holders += u64::from(to - from);
    h.first = h.first.min(from);
}

/// What `now` (address, disk bytes; any order) adds to and removes from `running`.
fn difference(
    running: &HashMap<u64, (u64, u32)>,
    now: Vec<(u64, u64)>,
) -> (Vec<(u64, u64)>, Vec<u64>) {
    let keep: HashSet<u64> = now.iter().map(|e| e.0).collect();
    let removed = running
        .keys()
        .filter(|a| !keep.contains(a))
        .copied()
        .collect();
    let added = now
        .into_iter()
        .filter(|(a, _)| !running.contains_key(a))
        .collect();
    (added, removed)
}

/// One file extent item, as far as space goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileExtent {
    /// Data in the leaf itself: `stored` bytes of it.
    Inline { stored: u64 },
    /// A regular or preallocated extent on disk (holes, `disk_bytenr` 0, are neither).
    Disk { bytenr: u64, disk_bytes: u64 },
}

impl FileExtent {
    fn parse(data: &[u8]) -> Option<FileExtent> {
        use raw::btrfs_file_extent_item as F;
        let header = offset_of!(F, disk_bytenr);
        match *data.get(offset_of!(F, type_))? {
            INLINE => Some(FileExtent::Inline {
                stored: data.len().saturating_sub(header) as u64,
            }),
            REG | PREALLOC if data.len() >= std::mem::size_of::<F>() => {
                let bytenr = le::<8>(data, offset_of!(F, disk_bytenr));
                (bytenr != 0).then(|| FileExtent::Disk {
                    bytenr,
                    disk_bytes: le::<8>(data, offset_of!(F, disk_num_bytes)),
                })
            }
            _ => None,
        }
    }
}

/// How fast a subvolume's snapshots grow: the bytes each snapshot holds that the one before
/// it did not, summed, over the time from the first snapshot to the last, in bytes a day.
/// `snapshots` are (when taken, new since the previous), oldest first; `None` with fewer
/// than two or no time between them.
pub fn growth_per_day(snapshots: &[(SystemTime, u64)]) -> Option<u64> {
    let (first, last) = (snapshots.first()?, snapshots.last()?);
    let span = last.0.duration_since(first.0).ok()?;
    if snapshots.len() < 2 || span < Duration::from_secs(1) {
        return None;
    }
    let bytes: u128 = snapshots[1..].iter().map(|s| u128::from(s.1)).sum();
    let per_day = bytes * 86_400 * 1000 / span.as_millis().max(1);
    Some(u64::try_from(per_day).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: u8, bytenr: u64, disk: u64) -> Vec<u8> {
        use raw::btrfs_file_extent_item as F;
        let mut data = vec![0u8; std::mem::size_of::<F>()];
        data[offset_of!(F, type_)] = kind;
        data[offset_of!(F, disk_bytenr)..][..8].copy_from_slice(&bytenr.to_le_bytes());
        data[offset_of!(F, disk_num_bytes)..][..8].copy_from_slice(&disk.to_le_bytes());
        data
    }

    #[test]
    fn file_extents_parse_as_disk_inline_or_nothing() {
        assert_eq!(
            FileExtent::parse(&item(REG, 1 << 20, 8192)),
            Some(FileExtent::Disk {
                bytenr: 1 << 20,
                disk_bytes: 8192
            })
        );
        assert_eq!(
            FileExtent::parse(&item(PREALLOC, 4096, 4096)),
            Some(FileExtent::Disk {
                bytenr: 4096,
                disk_bytes: 4096
            })
        );
        assert_eq!(FileExtent::parse(&item(REG, 0, 0)), None, "a hole");
        let mut inline = item(INLINE, 0, 0);
        inline.truncate(offset_of!(raw::btrfs_file_extent_item, disk_bytenr) + 300);
        inline.resize(
            offset_of!(raw::btrfs_file_extent_item, disk_bytenr) + 300,
            7,
        );
        assert_eq!(
            FileExtent::parse(&inline),
            Some(FileExtent::Inline { stored: 300 })
        );
        assert_eq!(FileExtent::parse(&item(REG, 4096, 4096)[..30]), None);
        assert_eq!(FileExtent::parse(&[]), None);
        assert_eq!(FileExtent::parse(&item(9, 4096, 4096)), None);
    }

    #[test]
    fn growth_is_new_bytes_over_the_span() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let day = Duration::from_secs(86_400);
        assert_eq!(growth_per_day(&[]), None);
        assert_eq!(growth_per_day(&[(t0, 5)]), None);
        assert_eq!(growth_per_day(&[(t0, 5), (t0, 7)]), None, "no time between");
        // The first snapshot's bytes are its start, not growth.
        let s = [(t0, 1 << 30), (t0 + day, 100), (t0 + day * 2, 300)];
        assert_eq!(growth_per_day(&s), Some(200));
        assert_eq!(growth_per_day(&[(t0, 0), (t0 + day / 2, 1000)]), Some(2000));
    }
}
