//! Deleting a subvolume with every subvolume nested in it, and removing whatever is under a
//! name, whatever ordinary users made there (adr/0015).
//!
//! Users can create subvolumes anywhere they can write, nest them at any depth and width,
//! name the directories on the way with any bytes, make their own read-only and snapshot
//! them. None of that may keep a deletion from finishing, with a bounded number of file
//! descriptors. So nested subvolumes are found in the root tree — each ROOT_REF item names a
//! child, the directory inode holding it and its name there — never by walking directories,
//! and deleted by id (`BTRFS_IOC_SNAP_DESTROY_V2` with `BTRFS_SUBVOL_SPEC_BY_ID`), children
//! before parents. Two cases still need a handle on a directory, opened by its file handle
//! (subvolume id, inode, generation: no path is walked) and closed again at once:
//!
//! - nothing inside a read-only subvolume can be unlinked (EROFS), so a read-only subvolume
//!   that holds others is made writable first;
//! - the kernel builds the whole path of a subvolume it deletes by id and refuses one longer
//!   than `PATH_MAX` (ENAMETOOLONG), so such a subvolume is first moved up, into the root
//!   directory of the subvolume being deleted (a rename that stays inside the tree being
//!   deleted, so a run cut short finds it there again).
//!
//! At most three descriptors are open at a time, whatever the depth or the width.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt as _;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::sys::{self, SearchKey, TreeSearch};
use crate::{
    check_name, parse_root_ref, Dir, Error, ErrorKind, FileKind, Result, RootItem,
    ROOT_BACKREF_KEY, ROOT_ITEM_KEY, ROOT_REF_KEY, ROOT_SUBVOL_RDONLY, ROOT_TREE_ID,
    SUBVOLUME_ROOT_INO, TEMP_FILE_PREFIX,
};

/// What [`Dir::delete_subvolume_tree`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeDeleted {
    /// Subvolumes deleted, the one asked for included.
    pub deleted: usize,
    /// Read-only subvolumes made writable first, so that what they held could go.
    pub made_writable: usize,
    /// Subvolumes moved up first, their path being longer than the kernel builds.
    pub moved_up: usize,
}

/// One subvolume of the tree being deleted.
#[derive(Debug)]
struct Node {
    id: u64,
    /// The subvolume holding it, the directory inode there, and its name in that directory.
    parent: u64,
    dir_id: u64,
    name: OsString,
    readonly: bool,
    holds_others: bool,
}

/// The inode of the empty directory Btrfs shows where a snapshot's source held a nested
/// subvolume (`BTRFS_EMPTY_SUBVOL_DIR_OBJECTID`).
const EMPTY_SUBVOLUME_DIR_INO: u64 = 2;

impl Dir {
    /// Delete the subvolume `id` and every subvolume nested in it, at any depth, deepest
    /// first; `self` is any directory on the same filesystem (needs CAP_SYS_ADMIN and
    /// CAP_DAC_READ_SEARCH). A subvolume that cannot be deleted does not stop the others:
    /// everything that can go goes, and the error is the first failure (its ancestors then
    /// fail only because they still hold it).
    pub fn delete_subvolume_tree(&self, id: u64) -> Result<TreeDeleted> {
        let mut search = TreeSearch::new();
        let nodes = self.tree_of(&mut search, id)?;
        let mut deletion = Deletion {
            dir: self,
            search,
            top: &nodes[0],
            top_moved: false,
            done: TreeDeleted::default(),
        };
        let mut first: Option<Error> = None;
        for node in nodes.iter().filter(|n| n.readonly && n.holds_others) {
            match deletion.make_writable(node.id) {
                Ok(()) => deletion.done.made_writable += 1,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        // Breadth-first order, read backwards: every child before its parent, the top last.
        for node in nodes.iter().rev() {
            match deletion.delete(node) {
                Ok(()) => deletion.done.deleted += 1,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(deletion.done),
        }
    }

    /// The subvolume `id` and every one nested in it, breadth first (`id` itself first), from
    /// one tree search per subvolume: its ROOT_ITEM (is it read-only), its ROOT_BACKREF (where
    /// it is; read for `id` only) and its ROOT_REFs (its children, each with its directory and
    /// name).
    fn tree_of(&self, search: &mut TreeSearch, id: u64) -> Result<Vec<Node>> {
        const OP: &str = "find the subvolumes nested in";
        let mut nodes = vec![Node {
            id,
            parent: 0,
            dir_id: 0,
            name: OsString::new(),
            readonly: false,
            holds_others: false,
        }];
        let mut seen = HashSet::from([id]);
        let mut at = 0;
        while at < nodes.len() {
            let here = nodes[at].id;
            let mut item = None;
            let mut backref = None;
            let mut children = Vec::new();
            let key = SearchKey {
                tree_id: ROOT_TREE_ID,
                min: (here, ROOT_ITEM_KEY, 0),
                max: (here, ROOT_REF_KEY, u64::MAX),
            };
            search
                .for_each(self.fd.as_fd(), key, |found| match found.item_type as u8 {
                    ROOT_ITEM_KEY => item = Some(RootItem::parse(found.data)),
                    ROOT_BACKREF_KEY if at == 0 && backref.is_none() => {
                        backref = parse_root_ref(found.data).map(|r| (found.offset, r));
                    }
                    ROOT_REF_KEY => {
                        if let Some((dir_id, name)) = parse_root_ref(found.data) {
                            children.push((found.offset, dir_id, name));
                        }
                    }
                    _ => {}
                })
                .map_err(|e| Error::sys(OP, here.to_string(), e))?;
            // A deleted subvolume keeps its root item until the cleaner drops it, but loses
            // its back reference at once.
            let gone = at == 0 && backref.is_none();
            let Some(item) = item.filter(|i| i.refs > 0 && !gone) else {
                if at == 0 {
                    return Err(Error::check(
                        "delete subvolume",
                        id.to_string(),
                        ErrorKind::NotFound,
                        "no subvolume has this id",
                    ));
                }
                at += 1;
                continue;
            };
            if let Some((parent, (dir_id, name))) = backref {
                (nodes[0].parent, nodes[0].dir_id, nodes[0].name) = (parent, dir_id, name);
            }
            nodes[at].readonly = item.flags & ROOT_SUBVOL_RDONLY != 0;
            nodes[at].holds_others = !children.is_empty();
            for (child, dir_id, name) in children {
                // The root tree is a tree; the set only guards against a corrupt one.
                if seen.insert(child) {
                    nodes.push(Node {
                        id: child,
                        parent: here,
                        dir_id,
                        name,
                        readonly: false,
                        holds_others: false,
                    });
                }
            }
            at += 1;
        }
        Ok(nodes)
    }
}

/// One deletion of a tree, under way.
struct Deletion<'a> {
    dir: &'a Dir,
    search: TreeSearch,
    top: &'a Node,
    /// The top was moved into its parent's root directory (its own path was too long).
    top_moved: bool,
    done: TreeDeleted,
}

impl Deletion<'_> {
    /// Delete one subvolume of the tree (whose children are gone): by id; when its path is
    /// longer than the kernel builds, moved up first (a nested one into the top's root
    /// directory; the top, or a nested one still too deep after that, with the top moved into
    /// its parent's root directory); when its parent turned read-only, that made writable.
    fn delete(&mut self, node: &Node) -> Result<()> {
        const OP: &str = "delete subvolume";
        let is_top = node.id == self.top.id;
        for _ in 0..4 {
            match sys::snap_destroy_by_id(self.dir.fd.as_fd(), node.id) {
                // Gone already (a run cut short deleted it) is gone.
                Ok(()) | Err(Errno::NOENT) => return Ok(()),
                Err(Errno::NAMETOOLONG) if !is_top && !self.moved(node) => {
                    self.move_up(node, self.top.id)?;
                }
                Err(Errno::NAMETOOLONG) if !self.top_moved && self.top.parent != 0 => {
                    let top = self.top;
                    self.move_up(top, top.parent)?;
                    self.top_moved = true;
                }
                Err(Errno::ROFS) => self.make_writable(node.parent)?,
                Err(e) => {
                    return Err(Error::sys_with(
                        OP,
                        node.id.to_string(),
                        e,
                        &[(Errno::NOTTY, ErrorKind::NotASubvolume)],
                    ))
                }
            }
        }
        Err(Error::check(
            OP,
            node.id.to_string(),
            ErrorKind::Other,
            "still refused after moving it up and making its parent writable",
        ))
    }

    /// Whether `node` was moved into the top's root directory already.
    fn moved(&mut self, node: &Node) -> bool {
        self.search_backref(node.id)
            .is_some_and(|(parent, dir_id)| parent == self.top.id && dir_id == SUBVOLUME_ROOT_INO)
    }

    /// Where subvolume `id` is now: (its parent subvolume, the directory inode there).
    fn search_backref(&mut self, id: u64) -> Option<(u64, u64)> {
        let mut found = None;
        let key = SearchKey {
            tree_id: ROOT_TREE_ID,
            min: (id, ROOT_BACKREF_KEY, 0),
            max: (id, ROOT_BACKREF_KEY, u64::MAX),
        };
        self.search
            .for_each(self.dir.fd.as_fd(), key, |item| {
                if found.is_none() {
                    found = parse_root_ref(item.data).map(|(dir_id, _)| (item.offset, dir_id));
                }
            })
            .ok()?;
        found
    }

    /// Rename `node` from the directory holding it (found again: it may have moved) into the
    /// root directory of subvolume `into`, under a name of this crate's temporary form that
    /// is free there.
    fn move_up(&mut self, node: &Node, into: u64) -> Result<()> {
        const OP: &str = "move up the deeply nested subvolume";
        let shown = || node.id.to_string();
        let (parent, dir_id) = self.search_backref(node.id).ok_or_else(|| {
            Error::check(OP, shown(), ErrorKind::NotFound, "it is in no directory")
        })?;
        let name = self.name_in(node.id, parent)?;
        let holding = self.open_by_handle(parent, dir_id)?;
        let root = self.open_by_handle(into, SUBVOLUME_ROOT_INO)?;
        root.set_readonly(false)?;
        for attempt in 0..64u32 {
            let to = format!("{TEMP_FILE_PREFIX}subvolume.{}.{attempt}", node.id);
            match rustix::fs::renameat_with(
                &holding.fd,
                name.as_os_str(),
                &root.fd,
                to.as_str(),
                RenameFlags::NOREPLACE,
            ) {
                Ok(()) => {
                    self.done.moved_up += 1;
                    return Ok(());
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(Error::sys(OP, shown(), e)),
            }
        }
        Err(Error::check(
            OP,
            shown(),
            ErrorKind::AlreadyExists,
            "every temporary name tried is taken",
        ))
    }

    /// The name of subvolume `id` in its directory in `parent` (its ROOT_REF there).
    fn name_in(&mut self, id: u64, parent: u64) -> Result<OsString> {
        let mut name = None;
        let key = SearchKey {
            tree_id: ROOT_TREE_ID,
            min: (parent, ROOT_REF_KEY, id),
            max: (parent, ROOT_REF_KEY, id),
        };
        self.search
            .for_each(self.dir.fd.as_fd(), key, |item| {
                name = parse_root_ref(item.data).map(|(_, n)| n);
            })
            .map_err(|e| Error::sys("look up the name of subvolume", id.to_string(), e))?;
        name.ok_or_else(|| {
            Error::check(
                "look up the name of subvolume",
                id.to_string(),
                ErrorKind::NotFound,
                "no reference from its parent",
            )
        })
    }

    /// Clear the read-only flag of subvolume `id`, reached by its file handle.
    fn make_writable(&mut self, id: u64) -> Result<()> {
        self.open_by_handle(id, SUBVOLUME_ROOT_INO)?
            .set_readonly(false)
    }

    /// The directory `ino` of subvolume `subvolume`, opened by its file handle (its
    /// generation read from its inode item).
    fn open_by_handle(&mut self, subvolume: u64, ino: u64) -> Result<Dir> {
        const OP: &str = "open by file handle the directory";
        let shown = || format!("{ino} of subvolume {subvolume}");
        let fd = self.dir.fd.as_fd();
        let inode = crate::changes::lookup_inode(&mut self.search, fd, subvolume, ino)
            .map_err(|e| Error::sys(OP, shown(), e))?
            .ok_or_else(|| Error::check(OP, shown(), ErrorKind::NotFound, "no such inode"))?;
        // The handle carries the generation as the kernel's 32-bit `i_generation`.
        let generation = inode.created as u32;
        sys::open_dir_by_handle(fd, subvolume, ino, generation)
            .map(|fd| Dir { fd })
            .map_err(|e| Error::sys(OP, shown(), e))
    }
}

impl Dir {
    /// Remove whatever is under `name` in this directory: a file, symlink, fifo, socket or
    /// device is unlinked (a symlink itself, never what it points to); a subvolume is deleted
    /// with everything nested in it; a directory is emptied, depth first, and removed.
    /// `Ok(false)` when nothing is there. Never leaves this directory: the walk opens each
    /// directory beneath the last without following symlinks, and climbs back by `..`,
    /// checked to be the directory it came from; so few descriptors are open at any depth.
    pub fn remove_all(&self, name: impl AsRef<OsStr>) -> Result<bool> {
        const OP: &str = "remove";
        let name = name.as_ref();
        check_name(OP, name)?;
        let st = match self.stat_at(name) {
            Ok(st) => st,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        if st.kind != FileKind::Directory {
            rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
                .map_err(|e| Error::sys(OP, name, e))?;
            return Ok(true);
        }
        let dir = self.open_dir(name)?;
        if dir.is_subvolume_root()? {
            let id = dir.subvolume_id()?;
            drop(dir);
            self.delete_subvolume_tree(id)?;
            return Ok(true);
        }
        dir.empty_depth_first(name)?;
        drop(dir);
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)
            .map_err(|e| Error::sys(OP, name, e))?;
        Ok(true)
    }

    /// Remove everything inside this directory (`shown` names it in errors). Subvolumes found
    /// inside are deleted whole; placeholders of nested subvolumes in a snapshot are removed
    /// like empty directories.
    fn empty_depth_first(&self, shown: &OsStr) -> Result<()> {
        const OP: &str = "empty the directory";
        // Where the walk came down from: each directory's name in its parent, and the
        // parent's inode and subvolume, to check `..` against on the way back up.
        let mut path: Vec<(OsString, u64, u64)> = Vec::new();
        let mut here = self.try_clone()?;
        loop {
            let mut down = None;
            for entry in entries(here.fd.as_fd()).map_err(|e| Error::sys(OP, shown, e))? {
                let st = match here.stat_at(&entry) {
                    Ok(st) => st,
                    Err(e) if e.kind == ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                };
                if st.kind != FileKind::Directory || st.ino == EMPTY_SUBVOLUME_DIR_INO {
                    let flags = if st.kind == FileKind::Directory {
                        AtFlags::REMOVEDIR
                    } else {
                        AtFlags::empty()
                    };
                    rustix::fs::unlinkat(&here.fd, entry.as_os_str(), flags)
                        .map_err(|e| Error::sys(OP, &entry, e))?;
                } else if st.ino == SUBVOLUME_ROOT_INO {
                    let id = here.open_dir(&entry)?.subvolume_id()?;
                    self.delete_subvolume_tree(id)?;
                } else {
                    down = Some(entry);
                    break;
                }
            }
            if let Some(entry) = down {
                let below = here.open_dir(&entry)?;
                path.push((entry, here.stat()?.ino, here.subvolume_id()?));
                here = below;
                continue;
            }
            // `here` is empty now.
            let Some((name, parent_ino, parent_tree)) = path.pop() else {
                return Ok(());
            };
            let up = rustix::fs::openat(
                &here.fd,
                "..",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map(|fd| Dir { fd })
            .map_err(|e| Error::sys(OP, shown, e))?;
            if up.stat()?.ino != parent_ino || up.subvolume_id()? != parent_tree {
                return Err(Error::check(
                    OP,
                    shown,
                    ErrorKind::Escapes,
                    "a directory was moved while it was being emptied",
                ));
            }
            rustix::fs::unlinkat(&up.fd, name.as_os_str(), AtFlags::REMOVEDIR)
                .map_err(|e| Error::sys(OP, &name, e))?;
            here = up;
        }
    }
}

/// The names in a directory but `.` and `..`, read through a descriptor of its own.
pub(crate) fn entries(dir: BorrowedFd<'_>) -> std::result::Result<Vec<OsString>, Errno> {
    let mut names = Vec::new();
    let mut reader = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = reader.read() {
        let name = entry?.file_name().to_bytes().to_owned();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(&name).to_owned());
        }
    }
    Ok(names)
}
