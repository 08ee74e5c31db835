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

use std::collections::HashMap;
use std::mem::offset_of;
use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::time::{Duration, Instant, SystemTime};

use linux_raw_sys::btrfs as raw;

use crate::sys::{SearchKey, TreeSearch};
use crate::{le, Error, ErrorKind, Result, Top};

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
    /// File extent items looked at (the work done).
    pub items_seen: u64,
    /// False when the deadline cut the walk short: then no number may be relied on.
    pub complete: bool,
}

/// What is known of one disk extent while the walk runs.
#[derive(Debug, Clone, Copy)]
struct Extent {
    disk_bytes: u64,
    /// Distinct subvolumes (positions in the walk) referencing it.
    holders: u32,
    /// The first holder (the only one when `holders == 1`).
    first: u32,
    /// The last holder seen: positions are walked in order, so a position sees whether the
    /// one just before it held the extent.
    last: u32,
}

impl Top {
    /// The data space of `groups`: each a list of subvolume ids on this filesystem, the
    /// snapshots of one subvolume oldest first (its live subvolume last, if wanted), so that
    /// [`RootSpace::new_since_previous`] compares neighbours. Exclusive is against every
    /// subvolume of every group. Walks each tree once (tree search; needs CAP_SYS_ADMIN);
    /// past `deadline` it stops and answers `complete: false`.
    pub fn space(&self, groups: &[Vec<u64>], deadline: Instant) -> Result<Space> {
        const OP: &str = "measure space";
        let order: Vec<(u64, bool)> = groups
            .iter()
            .flat_map(|g| g.iter().enumerate().map(|(i, id)| (*id, i == 0)))
            .collect();
        {
            let mut seen = std::collections::HashSet::new();
            if let Some((dup, _)) = order.iter().find(|(id, _)| !seen.insert(*id)) {
                return Err(Error::check(
                    OP,
                    dup.to_string(),
                    ErrorKind::Other,
                    "a subvolume is named twice; name each once",
                ));
            }
        }
        if order.len() >= u32::MAX as usize {
            return Err(Error::check(
                OP,
                "",
                ErrorKind::TooLarge,
                "too many subvolumes",
            ));
        }
        let fd = self.dir().as_fd();
        let mut search = TreeSearch::new();
        let mut extents: HashMap<u64, Extent> = HashMap::new();
        let mut roots: Vec<RootSpace> = Vec::with_capacity(order.len());
        let mut items_seen = 0u64;
        let mut complete = true;
        'walk: for (pos, (id, first_of_group)) in order.iter().enumerate() {
            let pos = pos as u32;
            let mut root = RootSpace {
                id: *id,
                new_since_previous: (!first_of_group).then_some(0),
                ..RootSpace::default()
            };
            let key = SearchKey {
                tree_id: *id,
                min: (FIRST_INODE, EXTENT_DATA, 0),
                max: (LAST_INODE, EXTENT_DATA, u64::MAX),
            };
            let mut late = false;
            let walked = search
                .scan(fd, key, 0, |item| {
                    if item.item_type as u8 != EXTENT_DATA {
                        return ControlFlow::Continue(());
                    }
                    items_seen += 1;
                    if items_seen.is_multiple_of(CHECK_EVERY) && Instant::now() > deadline {
                        late = true;
                        return ControlFlow::Break(());
                    }
                    match FileExtent::parse(item.data) {
                        Some(FileExtent::Inline { stored }) => root.inline += stored,
                        Some(FileExtent::Disk { bytenr, disk_bytes }) => {
                            let e = extents.entry(bytenr).or_insert(Extent {
                                disk_bytes,
                                holders: 0,
                                first: pos,
                                last: u32::MAX,
                            });
                            if e.last != pos {
                                let previous_held = pos > 0 && e.last == pos - 1;
                                if let Some(new) = root.new_since_previous.as_mut() {
                                    if !previous_held {
                                        *new += e.disk_bytes;
                                    }
                                }
                                e.holders += 1;
                                e.last = pos;
                                root.referenced += e.disk_bytes;
                                root.extents += 1;
                            }
                        }
                        None => {}
                    }
                    ControlFlow::Continue(())
                })
                .map_err(|e| Error::sys(OP, id.to_string(), e))?;
            roots.push(root);
            if !walked && late {
                complete = false;
                break 'walk;
            }
        }
        let mut total = 0u64;
        for e in extents.values() {
            total += e.disk_bytes;
            if e.holders == 1 {
                if let Some(root) = roots.get_mut(e.first as usize) {
                    root.exclusive += e.disk_bytes;
                }
            }
        }
        for root in &mut roots {
            root.shared = root.referenced - root.exclusive;
        }
        Ok(Space {
            roots,
            total,
            items_seen,
            complete,
        })
    }
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
