//! The store's generation (`Engine::list_since`, `Stem1.ListSince`) on a real loop Btrfs:
//! unchanged while nothing a list shows changes, and changed — with the list right — after
//! each act of the stem and each change root makes by hand behind its back.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test

use std::fs;
use std::process::Command;

use layout::{SnapshotName, SubvolumeName, REQUEST_FILE_NAME, SNAPSHOTS_SUBVOLUME};
use stem::engine::StoreGeneration;
use stem::Engine;
use testbed::LoopFs;

fn sv(name: &str) -> SubvolumeName {
    SubvolumeName::parse(name).unwrap()
}

fn btrfs(args: &[&str]) {
    let out = Command::new("btrfs").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "btrfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The names a fresh list shows.
fn names(engine: &Engine) -> Vec<String> {
    engine
        .list()
        .unwrap()
        .iter()
        .map(|s| s.name.to_string())
        .collect()
}

/// Asked with `known`: it must have changed, and the list answered must be a fresh one.
fn changed(engine: &Engine, known: StoreGeneration, what: &str) -> StoreGeneration {
    let (now, listed) = engine.list_since(known.as_slice()).unwrap();
    let listed = listed.unwrap_or_else(|| panic!("{what}: the generation did not change"));
    assert_ne!(now, known, "{what}");
    assert_eq!(listed, engine.list().unwrap(), "{what}: the list answered");
    // And again with nothing changed in between: unchanged, nothing listed.
    let (again, none) = engine.list_since(now.as_slice()).unwrap();
    assert!(none.is_none(), "{what}: unchanged, yet listed again");
    assert_eq!(again, now, "{what}");
    now
}

#[test]
fn loop_the_generation_changes_with_every_act_and_every_change_by_hand() {
    let Some(fs) = LoopFs::with_layout(256 << 20).expect("make a loop Btrfs") else {
        return;
    };
    let engine = Engine::open(fs.top()).unwrap();
    let store = fs.top().join(SNAPSHOTS_SUBVOLUME);
    let path = |name: &str| store.join(name).to_str().unwrap().to_owned();

    // Nothing known: a list. Then nothing changed: none.
    let (g0, first) = engine.list_since(&[]).unwrap();
    assert_eq!(first.unwrap(), Vec::new());
    let (same, none) = engine.list_since(g0.as_slice()).unwrap();
    assert!(none.is_none());
    assert_eq!(same, g0);
    // Something that is not a generation never matches.
    assert!(engine.list_since(&[1, 2, 3]).unwrap().1.is_some());

    // Writes inside a live subvolume are not in any list.
    fs::write(fs.top().join("@home/file"), "monday").unwrap();
    let (same, none) = engine.list_since(g0.as_slice()).unwrap();
    assert!(none.is_none(), "a write in @home changed nothing listed");
    assert_eq!(same, g0);

    // The stem's own acts.
    let a = engine.take(sv("@home")).unwrap();
    let g = changed(&engine, g0, "a snapshot taken");
    let b = engine.take(sv("@log")).unwrap();
    let g = changed(&engine, g, "another");
    engine.stage_restore(a.name).unwrap();
    let g = changed(&engine, g, "a restore staged");
    assert!(engine
        .list()
        .unwrap()
        .iter()
        .any(|s| s.name == a.name && s.staged));
    engine.withdraw().unwrap();
    let g = changed(&engine, g, "the restore withdrawn");
    engine.delete(b.name).unwrap();
    let g = changed(&engine, g, "a snapshot deleted (not yet committed)");
    assert_eq!(names(&engine), vec![a.name.to_string()]);

    // Root, by hand, behind the stem's back, each right after the last (one transaction).
    let c = SnapshotName::new(sv("@home"), std::time::SystemTime::now()).unwrap();
    btrfs(&[
        "subvolume",
        "snapshot",
        "-r",
        fs.top().join("@home").to_str().unwrap(),
        &path(&c.to_string()),
    ]);
    let g = changed(&engine, g, "`btrfs subvolume snapshot` into the store");
    assert_eq!(names(&engine).len(), 2);
    btrfs(&["subvolume", "delete", &path(&c.to_string())]);
    let g = changed(&engine, g, "`btrfs subvolume delete` by hand");
    assert_eq!(names(&engine), vec![a.name.to_string()]);
    fs::rename(path(&a.name.to_string()), path("set-aside")).unwrap();
    let g = changed(&engine, g, "a snapshot renamed by hand");
    assert_eq!(names(&engine), Vec::<String>::new());
    fs::rename(path("set-aside"), path(&a.name.to_string())).unwrap();
    let g = changed(&engine, g, "and back");
    engine.stage_restore(a.name).unwrap();
    let g = changed(&engine, g, "staged again");
    // The request edited in place (no rename): the list no longer shows it staged.
    fs::write(path(REQUEST_FILE_NAME), "garbage\n").unwrap();
    let g = changed(&engine, g, "the request overwritten in place");
    assert!(!engine.list().unwrap()[0].staged);
    fs::remove_file(path(REQUEST_FILE_NAME)).unwrap();
    let g = changed(&engine, g, "the request removed by hand");

    // The top level: a live subvolume replaced decides lineages.
    fs::rename(fs.top().join("@log"), fs.top().join("@log.old")).unwrap();
    let g = changed(&engine, g, "a live subvolume renamed away at the top");
    btrfs(&[
        "subvolume",
        "create",
        fs.top().join("@log").to_str().unwrap(),
    ]);
    let g = changed(&engine, g, "a new live subvolume made");

    let (_, none) = engine.list_since(g.as_slice()).unwrap();
    assert!(none.is_none());
}
