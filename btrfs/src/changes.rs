//! What changed in a subvolume since a read-only snapshot of it, from Btrfs metadata only
//! (adr/0012): no file content is read, and no snapshot is made.
//!
//! The method is a generation-based tree search. Every item Btrfs writes carries the
//! transaction it was written in, and every tree block the newest transaction of anything
//! beneath it; a snapshot taken in transaction `T` shares every block of the subvolume as it
//! was then. So a tree search of the live subvolume restricted to blocks newer than `T`
//! visits only the parts that changed, however large the rest is:
//!
//! - an inode item newer than `T` whose inode was created after `T` is **added**;
//! - one created at or before `T` is **modified** when its change time, modification time,
//!   size, link count, mode or owner differ from the snapshot's copy (a read that only moved
//!   the access time is not a change);
//! - entries that a modified directory had in the snapshot and no longer has name inodes
//!   that are **removed** when the live subvolume has no such inode any more; a removed
//!   directory's own entries are followed the same way, in the snapshot;
//! - **bytes written** are the logical bytes of file extents written after `T` that the live
//!   subvolume still holds (the file ranges a restore would throw away); preallocated,
//!   never-written ranges and holes do not count, nor do bytes written and deleted again.
//!
//! A rename is a modification of the inode renamed and of the directories on both sides,
//! never an addition and a removal. A file replaced by a new file of the same name in the
//! same directory (an editor's save: write a new file, rename it over the old one) is one
//! modification too; a directory replaced so is one removed and one added. A new hard link modifies the inode (its link count) and
//! the directory; removing one of two links modifies it; removing the last removes it, once.
//! Nested subvolumes are other trees and are not looked into.
//!
//! For a person's eyes ([`Viewer`]), the paths are narrowed to a subtree and to names in
//! directories that person may list: the others are counted, not named.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::mem::offset_of;
use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use layout::subtree::within;
use linux_raw_sys::btrfs as raw;
use rustix::io::Errno;

use crate::sys::{self, SearchKey, TreeSearch};
use crate::{le, Error, Result, SubvolumeInfo, Top};

/// Added, modified and removed, of files or of directories.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub added: u64,
    pub modified: u64,
    pub removed: u64,
}

/// How one path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    Added,
    Modified,
    Removed,
}

/// One changed file or directory, by its path relative to the subvolume's root (for a
/// removed one, where it was in the snapshot). An inode with several hard links is listed
/// once, under one of its names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedPath {
    pub change: Change,
    pub directory: bool,
    /// Relative, `/`-separated: the names' own bytes, whatever they are (a name is any
    /// bytes but NUL and `/`); shown to people only escaped (`layout::escape`).
    pub path: Vec<u8>,
}

/// What changed since the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Everything that is not a directory: regular files, symlinks, fifos, devices.
    pub files: Counts,
    pub directories: Counts,
    /// Logical bytes of file data written since and still there (see the module doc).
    pub bytes_written: u64,
    /// False when the time limit cut the count short: every number is then a lower bound.
    pub complete: bool,
    /// The changed paths, when asked for; at most `ChangesOptions::max_paths`.
    pub paths: Vec<ChangedPath>,
    /// How many changed paths were left out of `paths` by `max_paths` (or by the limit).
    pub paths_left_off: u64,
    /// Tree items looked at (the measure of the work, and of `ChangesOptions::max_items`).
    pub items_seen: u64,
    /// For a [`Viewer`]: changed paths in its subtree that are not named because a
    /// directory on the way to them is one the viewer may not list. Always 0 without one.
    pub paths_hidden: u64,
}

/// Whose eyes the paths are for (a person's diff): only changes at or below `within` are
/// listed, and of those only names whose every directory below the subvolume's root the
/// viewer may list (read and search, by the owner, group and other bits, or the POSIX ACL,
/// with `uid` and `gids`) in the tree where the name is: the snapshot for a removed one, the
/// live subvolume for the others. The rest of the subtree is counted in
/// [`Changes::paths_hidden`]; nothing outside it is named or counted there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    pub uid: u32,
    /// Every group of the viewer, the primary one included.
    pub gids: Vec<u32>,
    /// Relative to the subvolume's root, `/`-separated, no empty, `.` or `..` component;
    /// empty for everything.
    pub within: Vec<u8>,
}

impl Viewer {
    /// The viewer may list (read and search) a directory of this owner, group and mode,
    /// with this access ACL (`system.posix_acl_access`'s value), as the kernel's
    /// `generic_permission` decides it.
    fn may_list(&self, owner: u64, group: u64, mode: u32, acl: Option<&[u8]>) -> bool {
        const WANT: u32 = 0o5;
        if self.uid == 0 {
            return true;
        }
        if owner == u64::from(self.uid) {
            return (mode >> 6) & WANT == WANT;
        }
        let in_group = |g: u64| self.gids.iter().any(|x| u64::from(*x) == g);
        let Some(acl) = acl else {
            if in_group(group) {
                return (mode >> 3) & WANT == WANT;
            }
            return mode & WANT == WANT;
        };
        // version (u32) 2, then entries of tag (u16), perm (u16), id (u32). A value that
        // does not parse lets nobody but the owner in.
        if acl.len() < 4 || le::<4>(acl, 0) != 2 || (acl.len() - 4) % 8 != 0 {
            return false;
        }
        let entries: Vec<(u64, u32, u64)> = acl[4..]
            .chunks_exact(8)
            .map(|e| (le::<2>(e, 0), le::<2>(e, 2) as u32, le::<4>(e, 4)))
            .collect();
        let (user, group_obj, named_group, mask_tag, other) = (0x02, 0x04, 0x08, 0x10, 0x20);
        let mask = entries
            .iter()
            .find(|e| e.0 == mask_tag)
            .map_or(0o7, |e| e.1);
        if let Some(e) = entries
            .iter()
            .find(|e| e.0 == user && e.2 == u64::from(self.uid))
        {
            return e.1 & mask & WANT == WANT;
        }
        let mut found = false;
        for e in &entries {
            let matches =
                (e.0 == group_obj && in_group(group)) || (e.0 == named_group && in_group(e.2));
            if matches {
                found = true;
                if e.1 & mask & WANT == WANT {
                    return true;
                }
            }
        }
        if found {
            return false;
        }
        entries
            .iter()
            .find(|e| e.0 == other)
            .is_some_and(|e| e.1 & WANT == WANT)
    }
}

impl Changes {
    /// Files and directories added, modified and removed, all together.
    pub fn total(&self) -> u64 {
        let Counts {
            added,
            modified,
            removed,
        } = self.files;
        let d = self.directories;
        added + modified + removed + d.added + d.modified + d.removed
    }
}

/// How far a count has come, handed to the progress callback (the stem: once a second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Tree items looked at so far.
    pub items_seen: u64,
    /// Changed files and directories found so far.
    pub changes_found: u64,
    pub elapsed: Duration,
}

/// What to count, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct ChangesOptions {
    /// Past this moment the count stops and answers what it has (`complete: false`).
    pub deadline: Instant,
    /// Resolve the changed inodes to paths.
    pub with_paths: bool,
    /// At most this many paths.
    pub max_paths: usize,
    /// Stop, as at the deadline, after looking at this many tree items (`u64::MAX`: no
    /// bound but time). A bound on work that does not depend on the machine's speed.
    pub max_items: u64,
    /// Stop, as at the deadline, once this many changed inodes are held (`usize::MAX`: no
    /// bound). A bound on memory: each costs about 250 bytes while the count runs.
    pub max_inodes: usize,
    /// The least time between two calls of the progress callback (the stem: a second).
    pub progress_every: Duration,
}

const INODE_ITEM: u8 = raw::BTRFS_INODE_ITEM_KEY as u8;
const DIR_INDEX: u8 = raw::BTRFS_DIR_INDEX_KEY as u8;
const EXTENT_DATA: u8 = raw::BTRFS_EXTENT_DATA_KEY as u8;
const INODE_REF: u8 = raw::BTRFS_INODE_REF_KEY as u8;
const XATTR_ITEM: u8 = raw::BTRFS_XATTR_ITEM_KEY as u8;
/// The access ACL's extended attribute.
const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// A path deeper than this many directories is taken for a broken chain of back references.
const MAX_DEPTH: usize = 4096;
const FIRST_INODE: u64 = raw::BTRFS_FIRST_FREE_OBJECTID as u64;
const LAST_INODE: u64 = raw::BTRFS_LAST_FREE_OBJECTID as u64;
const FT_DIR: u8 = raw::BTRFS_FT_DIR as u8;
const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
/// How often the deadline is looked at, in items.
const CHECK_EVERY: u64 = 1024;

/// The fields of a `btrfs_inode_item` that say whether an inode changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inode {
    /// The transaction that created it (the inode's generation, which its file handle
    /// carries), and the last that changed its item.
    pub(crate) created: u64,
    transid: u64,
    size: u64,
    nlink: u64,
    uid: u64,
    gid: u64,
    mode: u32,
    ctime: (u64, u64),
    mtime: (u64, u64),
}

impl Inode {
    fn parse(data: &[u8]) -> Option<Inode> {
        use raw::{btrfs_inode_item as I, btrfs_timespec as T};
        if data.len() < std::mem::size_of::<I>() {
            return None;
        }
        let time = |at: usize| {
            (
                le::<8>(data, at + offset_of!(T, sec)),
                le::<4>(data, at + offset_of!(T, nsec)),
            )
        };
        Some(Inode {
            created: le::<8>(data, offset_of!(I, generation)),
            transid: le::<8>(data, offset_of!(I, transid)),
            size: le::<8>(data, offset_of!(I, size)),
            nlink: le::<4>(data, offset_of!(I, nlink)),
            uid: le::<4>(data, offset_of!(I, uid)),
            gid: le::<4>(data, offset_of!(I, gid)),
            mode: le::<4>(data, offset_of!(I, mode)) as u32,
            ctime: time(offset_of!(I, ctime)),
            mtime: time(offset_of!(I, mtime)),
        })
    }

    fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }

    /// The same inode as `then`, changed in more than its access time.
    fn differs_from(&self, then: &Inode) -> bool {
        (
            self.ctime, self.mtime, self.size, self.nlink, self.mode, self.uid, self.gid,
        ) != (
            then.ctime, then.mtime, then.size, then.nlink, then.mode, then.uid, then.gid,
        )
    }
}

/// Logical bytes of file data one `btrfs_file_extent_item` holds, if it was written after
/// generation `since`.
fn extent_bytes_since(data: &[u8], since: u64) -> u64 {
    use raw::btrfs_file_extent_item as F;
    if data.len() <= offset_of!(F, type_) || le::<8>(data, offset_of!(F, generation)) <= since {
        return 0;
    }
    match u32::from(data[offset_of!(F, type_)]) {
        t if t == raw::BTRFS_FILE_EXTENT_INLINE as u32 => le::<8>(data, offset_of!(F, ram_bytes)),
        // A disk_bytenr of 0 is a hole; prealloc (2) is reserved, never written.
        t if t == raw::BTRFS_FILE_EXTENT_REG as u32 => {
            if le::<8>(data, offset_of!(F, disk_bytenr)) == 0 {
                0
            } else {
                le::<8>(data, offset_of!(F, num_bytes))
            }
        }
        _ => 0,
    }
}

/// One directory entry (a DIR_INDEX item's `btrfs_dir_item`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// Its DIR_INDEX key offset: unique in the directory, never reused.
    index: u64,
    /// The inode it names.
    ino: u64,
    is_dir: bool,
    /// False for a nested subvolume's root (another tree).
    is_inode: bool,
    /// Where its name is in [`Entries::names`].
    name: (usize, usize),
}

/// A directory's entries in index order, their names in one buffer (one allocation per
/// directory, not per entry: a changed directory of 100k entries is read twice).
#[derive(Debug, Default)]
struct Entries {
    list: Vec<Entry>,
    names: Vec<u8>,
}

impl Entries {
    fn get(&self, index: u64) -> Option<&Entry> {
        let at = self.list.binary_search_by_key(&index, |e| e.index).ok()?;
        self.list.get(at)
    }

    fn name(&self, e: &Entry) -> &[u8] {
        &self.names[e.name.0..e.name.0 + e.name.1]
    }

    fn push(&mut self, index: u64, data: &[u8]) {
        use raw::{btrfs_dir_item as D, btrfs_disk_key as K};
        let header = std::mem::size_of::<D>();
        if data.len() < header {
            return;
        }
        let location = offset_of!(D, location);
        let name_len = le::<2>(data, offset_of!(D, name_len)) as usize;
        let Some(name) = data.get(header..header + name_len) else {
            return;
        };
        let start = self.names.len();
        self.names.extend_from_slice(name);
        self.list.push(Entry {
            index,
            ino: le::<8>(data, location + offset_of!(K, objectid)),
            is_dir: data[offset_of!(D, type_)] == FT_DIR,
            is_inode: data[location + offset_of!(K, type_)] == INODE_ITEM,
            name: (start, name_len),
        });
    }
}

/// The running count, with the clock.
struct Counter<'p> {
    options: ChangesOptions,
    started: Instant,
    last_progress: Instant,
    items_seen: u64,
    out_of_time: bool,
    changes: Changes,
    progress: &'p mut dyn FnMut(Progress),
}

impl Counter<'_> {
    /// Count one item looked at; false once the deadline has passed or the budget of
    /// items is spent.
    fn tick(&mut self) -> bool {
        if self.items_seen >= self.options.max_items {
            self.out_of_time = true;
            return false;
        }
        self.items_seen += 1;
        if !self.items_seen.is_multiple_of(CHECK_EVERY) {
            return !self.out_of_time;
        }
        let now = Instant::now();
        if now >= self.options.deadline {
            self.out_of_time = true;
        }
        if now.duration_since(self.last_progress) >= self.options.progress_every {
            self.last_progress = now;
            (self.progress)(Progress {
                items_seen: self.items_seen,
                changes_found: self.changes.total(),
                elapsed: now.duration_since(self.started),
            });
        }
        !self.out_of_time
    }

    fn count(&mut self, change: Change, directory: bool) {
        let c = if directory {
            &mut self.changes.directories
        } else {
            &mut self.changes.files
        };
        match change {
            Change::Added => c.added += 1,
            Change::Modified => c.modified += 1,
            Change::Removed => c.removed += 1,
        }
    }
}

impl Top {
    /// What changed in the subvolume `live` since `snapshot`, a read-only snapshot of it or
    /// of a state it descends from (the caller checks that lineage: against an unrelated
    /// snapshot the answer means nothing). Tree searches only; needs CAP_SYS_ADMIN.
    /// `progress` is called while it runs, at most once per `options.progress_every`.
    pub fn changes_since(
        &self,
        live: &SubvolumeInfo,
        snapshot: &SubvolumeInfo,
        options: ChangesOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Changes> {
        self.changes_seen_by(live, snapshot, options, None, progress)
    }

    /// As [`Top::changes_since`], the paths (with `options.with_paths`) narrowed to what
    /// `viewer` may see when there is one (see [`Viewer`]). The counts stay those of the
    /// whole subvolume: whoever shows them to the viewer counts the paths instead.
    pub fn changes_seen_by(
        &self,
        live: &SubvolumeInfo,
        snapshot: &SubvolumeInfo,
        options: ChangesOptions,
        viewer: Option<&Viewer>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Changes> {
        const OP: &str = "count the changes since a snapshot";
        let shown = format!("subvolume {} since subvolume {}", live.id, snapshot.id);
        let fail = |e: Errno| Error::sys(OP, &shown, e);
        // The snapshot shares every block the live subvolume had when it was taken, in
        // transaction `since`; anything written later carries a newer generation.
        let since = if snapshot.created_generation != 0 {
            snapshot.created_generation
        } else {
            snapshot.generation
        };
        let fd = self.dir().as_fd();
        let now = Instant::now();
        let mut counter = Counter {
            options,
            started: now,
            last_progress: now,
            items_seen: 0,
            out_of_time: false,
            changes: Changes::default(),
            progress,
        };
        let mut search = TreeSearch::new();

        // 1. The blocks of the live tree written since: inode items and file extents.
        let mut touched: BTreeMap<u64, Inode> = BTreeMap::new();
        let mut full = false;
        let mut bytes = 0u64;
        let everything = SearchKey {
            tree_id: live.id,
            min: (FIRST_INODE, 0, 0),
            max: (LAST_INODE, u8::MAX, u64::MAX),
        };
        search
            .scan(fd, everything, since + 1, |item| {
                match item.item_type as u8 {
                    INODE_ITEM => {
                        if let Some(inode) = Inode::parse(item.data) {
                            if inode.transid > since {
                                touched.insert(item.objectid, inode);
                                if touched.len() >= counter.options.max_inodes {
                                    // Those held are still classified; the rest is not
                                    // looked at, and the answer says it is incomplete.
                                    full = true;
                                    return ControlFlow::Break(());
                                }
                            }
                        }
                    }
                    EXTENT_DATA => bytes += extent_bytes_since(item.data, since),
                    _ => {}
                }
                if counter.tick() {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            })
            .map_err(fail)?;
        counter.changes.bytes_written = bytes;

        // 2. Each touched inode: added, modified, or only read (its access time moved).
        let mut found: Vec<(u64, Change, bool)> = Vec::new();
        let mut changed_dirs: Vec<u64> = Vec::new();
        for (&ino, inode) in &touched {
            if !counter.tick() {
                break;
            }
            // Unlinked but still open: gone from the tree's names; counted as removed
            // below if it was there before.
            if inode.nlink == 0 {
                continue;
            }
            let change = if inode.created > since {
                Change::Added
            } else {
                match lookup_inode(&mut search, fd, snapshot.id, ino).map_err(fail)? {
                    Some(then) if !inode.differs_from(&then) => continue,
                    Some(_) => Change::Modified,
                    // Created before the snapshot yet not in it: not of this lineage's
                    // snapshot state; it is new to the subvolume all the same.
                    None => Change::Added,
                }
            };
            if change == Change::Modified && inode.is_dir() {
                changed_dirs.push(ino);
            }
            counter.count(change, inode.is_dir());
            found.push((ino, change, inode.is_dir()));
        }

        // 3. Names a changed directory had in the snapshot and has no more: removed inodes,
        // when the live subvolume has no such inode (a rename or a dropped hard link
        // leaves it in place, and it was counted as modified above). A file whose name now
        // names a file added since was replaced (an editor's save: write a new file, rename
        // it over the old): that path is modified, not one added and one removed.
        let added: HashMap<u64, usize> = found
            .iter()
            .enumerate()
            .filter(|(_, f)| f.1 == Change::Added && !f.2)
            .map(|(i, f)| (f.0, i))
            .collect();
        let mut removed: HashSet<u64> = HashSet::new();
        let mut gone_dirs: Vec<u64> = Vec::new();
        'dirs: for dir in changed_dirs {
            let now = dir_entries(&mut search, fd, live.id, dir).map_err(fail)?;
            let then = dir_entries(&mut search, fd, snapshot.id, dir).map_err(fail)?;
            // The live directory's files by name, made at the first file gone from it.
            let mut files_now: Option<HashMap<&[u8], u64>> = None;
            for entry in &then.list {
                if !counter.tick() {
                    break 'dirs;
                }
                let child = entry.ino;
                if !entry.is_inode || now.get(entry.index).is_some_and(|e| e.ino == child) {
                    continue;
                }
                let alive = lookup_inode(&mut search, fd, live.id, child)
                    .map_err(fail)?
                    .is_some_and(|i| i.nlink > 0 && i.created <= since);
                if alive || !removed.insert(child) {
                    continue;
                }
                let name = then.name(entry);
                let replacement = if entry.is_dir {
                    None
                } else {
                    files_now
                        .get_or_insert_with(|| {
                            now.list
                                .iter()
                                .filter(|e| e.is_inode && !e.is_dir)
                                .map(|e| (now.name(e), e.ino))
                                .collect()
                        })
                        .get(name)
                        .and_then(|ino| added.get(ino))
                };
                if let Some(&i) = replacement {
                    if found[i].1 == Change::Added {
                        if let Some(files) = files_now.as_mut() {
                            files.remove(name);
                        }
                        found[i].1 = Change::Modified;
                        counter.changes.files.added -= 1;
                        counter.changes.files.modified += 1;
                        continue;
                    }
                }
                counter.count(Change::Removed, entry.is_dir);
                found.push((child, Change::Removed, entry.is_dir));
                if entry.is_dir {
                    gone_dirs.push(child);
                }
            }
        }
        // A removed directory's entries, as the snapshot has them: each removed too,
        // unless it was moved out first.
        'gone: while let Some(dir) = gone_dirs.pop() {
            for Entry {
                ino: child,
                is_dir,
                is_inode,
                ..
            } in dir_entries(&mut search, fd, snapshot.id, dir)
                .map_err(fail)?
                .list
            {
                if !counter.tick() {
                    break 'gone;
                }
                if !is_inode || removed.contains(&child) {
                    continue;
                }
                let alive = lookup_inode(&mut search, fd, live.id, child)
                    .map_err(fail)?
                    .is_some_and(|i| i.nlink > 0 && i.created <= since);
                if !alive {
                    removed.insert(child);
                    counter.count(Change::Removed, is_dir);
                    found.push((child, Change::Removed, is_dir));
                    if is_dir {
                        gone_dirs.push(child);
                    }
                }
            }
        }

        // 4. Paths, by each inode's first back reference: in the live tree, or for a
        // removed one in the snapshot's.
        if options.with_paths {
            found.sort_by_key(|f| (f.1, f.0));
            let mut walk = Walk::default();
            let mut left_off = 0u64;
            for (ino, change, directory) in &found {
                if viewer.is_none() && counter.changes.paths.len() >= options.max_paths {
                    break;
                }
                if !counter.tick() {
                    break;
                }
                let tree = if *change == Change::Removed {
                    snapshot.id
                } else {
                    live.id
                };
                let path = match viewer {
                    // Removed between the count and now (a live subvolume keeps changing).
                    None => match sys::ino_lookup_path(fd, tree, *ino) {
                        Ok(path) => path,
                        Err(_) => continue,
                    },
                    Some(viewer) => {
                        let Some((path, listable)) = walk
                            .path(&mut search, fd, tree, *ino, viewer)
                            .map_err(fail)?
                        else {
                            continue;
                        };
                        if !within(&path, &viewer.within) {
                            continue;
                        }
                        if !listable {
                            counter.changes.paths_hidden += 1;
                            continue;
                        }
                        if counter.changes.paths.len() >= options.max_paths {
                            left_off += 1;
                            continue;
                        }
                        path
                    }
                };
                counter.changes.paths.push(ChangedPath {
                    change: *change,
                    directory: *directory,
                    path,
                });
            }
            counter.changes.paths_left_off = match viewer {
                None => found.len() as u64 - counter.changes.paths.len() as u64,
                Some(_) => left_off,
            };
        }

        counter.changes.complete = !counter.out_of_time && !full;
        counter.changes.items_seen = counter.items_seen;
        Ok(counter.changes)
    }
}

/// Paths built from back references, for a [`Viewer`]: each directory met is looked up
/// once per tree, with its path and whether the viewer may list it and every directory
/// above it (below the subvolume's root).
#[derive(Debug, Default)]
struct Walk {
    /// By (tree, directory): its path, and whether the viewer may list the way to it.
    dirs: HashMap<(u64, u64), Option<Seen>>,
}

/// A path, and whether the viewer may list every directory on the way to it.
type Seen = (Vec<u8>, bool);

impl Walk {
    /// The path of `ino` in `tree` by its first back reference (the one the kernel's
    /// INO_LOOKUP follows), and whether the viewer may list every directory on the way;
    /// `None` when it has no name there (removed meanwhile).
    fn path(
        &mut self,
        search: &mut TreeSearch,
        fd: std::os::fd::BorrowedFd<'_>,
        tree: u64,
        ino: u64,
        viewer: &Viewer,
    ) -> std::result::Result<Option<Seen>, Errno> {
        if ino == FIRST_INODE {
            return Ok(Some((Vec::new(), true)));
        }
        let Some((parent, name)) = back_reference(search, fd, tree, ino)? else {
            return Ok(None);
        };
        let Some((mut path, listable)) = self.dir(search, fd, tree, parent, viewer)? else {
            return Ok(None);
        };
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&name);
        Ok(Some((path, listable)))
    }

    /// The path of the directory `dir` and whether the viewer may list it and each one
    /// above it; the subvolume's root is not looked at (nobody is shown it whole).
    fn dir(
        &mut self,
        search: &mut TreeSearch,
        fd: std::os::fd::BorrowedFd<'_>,
        tree: u64,
        dir: u64,
        viewer: &Viewer,
    ) -> std::result::Result<Option<Seen>, Errno> {
        let mut chain: Vec<(u64, Vec<u8>, bool)> = Vec::new();
        let mut at = dir;
        let mut known = loop {
            if at == FIRST_INODE {
                break Some((Vec::new(), true));
            }
            if let Some(k) = self.dirs.get(&(tree, at)) {
                break k.clone();
            }
            if chain.len() >= MAX_DEPTH {
                break None;
            }
            let Some((parent, name)) = back_reference(search, fd, tree, at)? else {
                break None;
            };
            let listable = match lookup_inode(search, fd, tree, at)? {
                Some(i) if i.is_dir() => {
                    let acl = if i.uid == u64::from(viewer.uid) || viewer.uid == 0 {
                        None
                    } else {
                        xattr(search, fd, tree, at, ACL_ACCESS)?
                    };
                    viewer.may_list(i.uid, i.gid, i.mode, acl.as_deref())
                }
                _ => false,
            };
            chain.push((at, name, listable));
            at = parent;
        };
        while let Some((d, name, listable)) = chain.pop() {
            known = known.map(|(mut path, above)| {
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(&name);
                (path, above && listable)
            });
            self.dirs.insert((tree, d), known.clone());
        }
        Ok(known)
    }
}

/// The first back reference of `ino` in `tree` as INO_LOOKUP takes it (the INODE_REF of
/// the greatest parent directory, its first name): `(parent, name)`.
fn back_reference(
    search: &mut TreeSearch,
    fd: std::os::fd::BorrowedFd<'_>,
    tree: u64,
    ino: u64,
) -> std::result::Result<Option<(u64, Vec<u8>)>, Errno> {
    use raw::btrfs_inode_ref as R;
    let mut found = None;
    let key = SearchKey {
        tree_id: tree,
        min: (ino, INODE_REF, 0),
        max: (ino, INODE_REF, u64::MAX),
    };
    search.scan(fd, key, 0, |item| {
        let header = std::mem::size_of::<R>();
        if item.data.len() >= header {
            let len = le::<2>(item.data, offset_of!(R, name_len)) as usize;
            if let Some(name) = item.data.get(header..header + len) {
                found = Some((item.offset, name.to_vec()));
            }
        }
        ControlFlow::Continue(())
    })?;
    Ok(found)
}

/// The value of the extended attribute `name` of `ino` in `tree`, if it has one.
fn xattr(
    search: &mut TreeSearch,
    fd: std::os::fd::BorrowedFd<'_>,
    tree: u64,
    ino: u64,
    name: &[u8],
) -> std::result::Result<Option<Vec<u8>>, Errno> {
    use raw::btrfs_dir_item as D;
    let mut value = None;
    let key = SearchKey {
        tree_id: tree,
        min: (ino, XATTR_ITEM, 0),
        max: (ino, XATTR_ITEM, u64::MAX),
    };
    search.scan(fd, key, 0, |item| {
        // One item holds every attribute whose name hashes alike, one after another.
        let header = std::mem::size_of::<D>();
        let mut rest = item.data;
        while rest.len() >= header {
            let name_len = le::<2>(rest, offset_of!(D, name_len)) as usize;
            let data_len = le::<2>(rest, offset_of!(D, data_len)) as usize;
            let Some(this) = rest.get(header..header + name_len) else {
                break;
            };
            if this == name {
                value = rest
                    .get(header + name_len..header + name_len + data_len)
                    .map(<[u8]>::to_vec);
                return ControlFlow::Break(());
            }
            rest = rest.get(header + name_len + data_len..).unwrap_or_default();
        }
        ControlFlow::Continue(())
    })?;
    Ok(value)
}

/// The inode item of `ino` in tree `tree`, if there is one.
pub(crate) fn lookup_inode(
    search: &mut TreeSearch,
    fd: std::os::fd::BorrowedFd<'_>,
    tree: u64,
    ino: u64,
) -> std::result::Result<Option<Inode>, Errno> {
    let mut inode = None;
    let key = SearchKey {
        tree_id: tree,
        min: (ino, INODE_ITEM, 0),
        max: (ino, INODE_ITEM, 0),
    };
    search.scan(fd, key, 0, |item| {
        inode = Inode::parse(item.data);
        ControlFlow::Break(())
    })?;
    Ok(inode)
}

/// A directory's entries, in index order (the order a tree search gives them).
fn dir_entries(
    search: &mut TreeSearch,
    fd: std::os::fd::BorrowedFd<'_>,
    tree: u64,
    dir: u64,
) -> std::result::Result<Entries, Errno> {
    let mut out = Entries::default();
    let key = SearchKey {
        tree_id: tree,
        min: (dir, DIR_INDEX, 0),
        max: (dir, DIR_INDEX, u64::MAX),
    };
    search.scan(fd, key, 0, |item| {
        out.push(item.offset, item.data);
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_count_only_when_written_since() {
        use raw::btrfs_file_extent_item as F;
        let mut data = vec![0u8; std::mem::size_of::<F>()];
        let put =
            |d: &mut Vec<u8>, at: usize, v: u64| d[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put(&mut data, offset_of!(F, generation), 10);
        data[offset_of!(F, type_)] = raw::BTRFS_FILE_EXTENT_REG as u8;
        put(&mut data, offset_of!(F, disk_bytenr), 4096);
        put(&mut data, offset_of!(F, num_bytes), 8192);
        assert_eq!(extent_bytes_since(&data, 9), 8192);
        assert_eq!(extent_bytes_since(&data, 10), 0);
        put(&mut data, offset_of!(F, disk_bytenr), 0); // a hole
        assert_eq!(extent_bytes_since(&data, 9), 0);
        data[offset_of!(F, type_)] = 2; // prealloc
        assert_eq!(extent_bytes_since(&data, 9), 0);
        let mut inline = vec![0u8; offset_of!(F, disk_bytenr) + 5];
        put(&mut inline, offset_of!(F, generation), 10);
        put(&mut inline, offset_of!(F, ram_bytes), 5);
        inline[offset_of!(F, type_)] = raw::BTRFS_FILE_EXTENT_INLINE as u8;
        assert_eq!(extent_bytes_since(&inline, 9), 5);
        assert_eq!(extent_bytes_since(&inline[..3], 9), 0);
    }

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in entries {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    #[test]
    fn a_directory_is_listable_as_the_kernel_decides() {
        let alice = Viewer {
            uid: 1000,
            gids: vec![1000, 50],
            within: Vec::new(),
        };
        // Owner, group, other: only the first class that matches counts.
        assert!(alice.may_list(1000, 0, 0o700, None));
        assert!(
            !alice.may_list(1000, 0, 0o077, None),
            "the owner's own bits"
        );
        assert!(!alice.may_list(0, 0, 0o700, None), "root's 0700");
        assert!(alice.may_list(0, 50, 0o750, None), "by a group of hers");
        assert!(
            !alice.may_list(0, 50, 0o705, None),
            "the group's bits, not other's"
        );
        assert!(alice.may_list(0, 0, 0o755, None));
        assert!(!alice.may_list(0, 0, 0o751, None), "search without read");
        assert!(!alice.may_list(0, 0, 0o754, None), "read without search");
        let root = Viewer {
            uid: 0,
            gids: vec![0],
            within: Vec::new(),
        };
        assert!(root.may_list(1000, 1000, 0o000, None));
        // ACLs: a named user, the mask, a group that matches but does not grant, other.
        let (uo, u, go, g, m, o) = (1, 2, 4, 8, 0x10, 0x20);
        let named = acl(&[(uo, 7, 0), (u, 5, 1000), (go, 0, 0), (m, 5, 0), (o, 0, 0)]);
        assert!(alice.may_list(0, 0, 0o750, Some(&named)));
        let masked = acl(&[(uo, 7, 0), (u, 5, 1000), (go, 0, 0), (m, 1, 0), (o, 0, 0)]);
        assert!(!alice.may_list(0, 0, 0o710, Some(&masked)));
        let denied = acl(&[(uo, 7, 0), (u, 0, 1000), (go, 5, 0), (m, 5, 0), (o, 5, 0)]);
        assert!(
            !alice.may_list(0, 0, 0o755, Some(&denied)),
            "named user: ---"
        );
        let group_denies = acl(&[(uo, 7, 0), (go, 0, 0), (g, 0, 50), (m, 7, 0), (o, 5, 0)]);
        assert!(!alice.may_list(0, 0, 0o775, Some(&group_denies)));
        let group_grants = acl(&[(uo, 7, 0), (go, 0, 0), (g, 5, 50), (m, 7, 0), (o, 0, 0)]);
        assert!(alice.may_list(0, 0, 0o770, Some(&group_grants)));
        assert!(
            !alice.may_list(0, 0, 0o755, Some(b"junk")),
            "unparsed: nobody"
        );
    }

    #[test]
    fn an_access_time_alone_is_no_change() {
        let then = Inode {
            created: 5,
            transid: 5,
            size: 1,
            nlink: 1,
            uid: 0,
            gid: 0,
            mode: 0o100_644,
            ctime: (1, 0),
            mtime: (1, 0),
        };
        let read = Inode { transid: 9, ..then };
        assert!(!read.differs_from(&then));
        let written = Inode {
            ctime: (2, 0),
            ..read
        };
        assert!(written.differs_from(&then));
        assert!(!then.is_dir());
    }
}
