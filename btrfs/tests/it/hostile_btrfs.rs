//! The hostile tier of the btrfs crate: names of any bytes, trees of nested subvolumes an
//! ordinary user made (as uid 4242, no capabilities), and whatever sits under a name,
//! against a real loop-device Btrfs, with `btrfs subvolume list` as the oracle (adr/0015).
#![allow(clippy::unwrap_used)] // a panic is how a test reports

#[path = "../../../initrd/tests/it/common/hostile.rs"]
mod hostile;

use std::ffi::OsStr;
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;

use btrfs::{ErrorKind, Top, TreeDeleted};
use testbed::LoopFs;

fn fresh() -> Option<LoopFs> {
    LoopFs::new(512 << 20).expect("make a loop-device Btrfs")
}

/// Every subvolume the oracle lists, by path (lossy: the oracle prints text).
fn listed(fs: &LoopFs) -> Vec<String> {
    fs.subvolumes_snapshot()
        .unwrap()
        .into_iter()
        .map(|(p, _, _)| p)
        .collect()
}

#[test]
fn hostile_names_of_any_bytes_are_kept_as_bytes_and_shown_escaped() {
    let Some(fs) = fresh() else { return };
    let top = Top::open(fs.top()).unwrap();
    let odd = OsStr::from_bytes(b"\xff\n\x1b[31m");
    assert!(top.dir().create_dir(odd, 0o755).unwrap());
    let dir = top.dir().open_dir(odd).unwrap();
    let name = OsStr::from_bytes(b"sub\xfe");
    let made = dir.create_subvolume(name).unwrap();
    let list = top.dir().list_subvolumes().unwrap();
    let found = list.iter().find(|e| e.info.id == made.id).unwrap();
    assert_eq!(found.name, name, "the name as on disk, not made lossy");
    assert_eq!(dir.stat_at(name).unwrap().ino, 256);
    let e = top
        .dir()
        .open_dir(OsStr::from_bytes(b"\xfa"))
        .expect_err("missing");
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(e.to_string(), "open directory \"\\xFA\": not found");
}

#[test]
fn hostile_a_users_tree_of_nested_subvolumes_goes_by_id() {
    let Some(fs) = fresh() else { return };
    let top = Top::open(fs.top()).unwrap();
    let base = top.dir().create_subvolume("base").unwrap();
    let tmp = hostile::dir_for_user(fs.top(), "base/tmp", 0o1777, 0);
    let made = hostile::as_hostile_user(&tmp, |dir| hostile::all_of_it(dir, 20, 100));
    assert!(made > 100, "{made}");
    let done = top.dir().delete_subvolume_tree(base.id).unwrap();
    assert_eq!(
        done,
        TreeDeleted {
            deleted: made + 1,
            // ro-outer and ro-inner hold others; ro-leaf and the read-only snapshots do not.
            made_writable: 2,
            // The chain's `last` and `under`, both deeper than PATH_MAX.
            moved_up: 2,
        }
    );
    assert_eq!(listed(&fs), Vec::<String>::new(), "nothing left");
    let e = top.dir().delete_subvolume_tree(base.id).expect_err("gone");
    assert_eq!(e.kind, ErrorKind::NotFound);
}

#[test]
fn hostile_remove_all_takes_whatever_is_under_a_name_and_follows_no_symlink() {
    let Some(fs) = fresh() else { return };
    let top = Top::open(fs.top()).unwrap();
    std::fs::write(fs.scratch().join("outside"), "not ours").unwrap();
    // A directory 3000 deep (one handle open at a time while making it), with a file, a fifo,
    // a symlink out of the filesystem and a subvolume holding another at the bottom.
    top.dir().create_dir("junk", 0o755).unwrap();
    let mut here = top.dir().open_dir("junk").unwrap();
    for _ in 0..hostile::DEEP {
        here.create_dir("d", 0o755).unwrap();
        here = here.open_dir("d").unwrap();
    }
    here.write_file_durably("file", b"x", 0o600).unwrap();
    let link = fs.scratch().join("outside");
    rustix::fs::symlinkat(&link, &here, "link").unwrap();
    rustix::fs::mknodat(&here, "fifo", rustix::fs::FileType::Fifo, 0o600.into(), 0).unwrap();
    let sub = hostile::subvolume(here.as_fd(), "sub");
    hostile::subvolume(sub.as_fd(), "inner");
    drop((sub, here));
    assert!(top.dir().remove_all("junk").unwrap());
    assert!(!fs.top().join("junk").exists());
    assert_eq!(listed(&fs), Vec::<String>::new());
    assert_eq!(
        std::fs::read_to_string(&link).unwrap(),
        "not ours",
        "the symlink was followed"
    );
    // A symlink, a fifo, nothing.
    rustix::fs::symlinkat(&link, top.dir(), "a-link").unwrap();
    assert!(top.dir().remove_all("a-link").unwrap());
    assert!(link.exists());
    assert!(!top.dir().remove_all("a-link").unwrap(), "nothing there");
}
