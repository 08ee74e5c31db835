#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test
//! What changed since a snapshot, on a real loop-device Btrfs with known changes: exact
//! counts for additions, edits, removals, renames, hard links and directories, a
//! 100k-file tree, and the time limit.
//!
//! Needs root and loop devices; elsewhere each test says SKIPPED loudly (and fails under
//! CI=true, through testbed).

use std::collections::BTreeSet;
use std::fs;
use std::io::{Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{symlink, PermissionsExt as _};
use std::path::Path;
use std::time::{Duration, Instant};

use btrfs::{Change, Changes, Counts};
use layout::{SnapshotName, SubvolumeName};
use stem::engine::Commit;
use stem::{Engine, EngineError};
use testbed::LoopFs;

fn sv(name: &str) -> SubvolumeName {
    SubvolumeName::parse(name).unwrap()
}

fn machine(size: u64) -> Option<(LoopFs, Engine)> {
    let fs = LoopFs::with_layout(size).expect("make a loop Btrfs")?;
    let engine = Engine::open(fs.top()).expect("open the top level");
    Some((fs, engine))
}

fn counts(added: u64, modified: u64, removed: u64) -> Counts {
    Counts {
        added,
        modified,
        removed,
    }
}

fn changes(engine: &Engine, name: SnapshotName, paths: bool) -> Changes {
    engine
        .changes_since(name, Duration::from_secs(60), paths, &mut |_| {})
        .unwrap()
}

fn write(path: &Path, bytes: usize) {
    fs::write(path, vec![b'x'; bytes]).unwrap();
}

#[test]
fn loop_changes_count_adds_edits_removals_renames_links_and_directories() {
    let Some((fs, engine)) = machine(256 << 20) else {
        return;
    };
    let home = fs.top().join("@home");
    let a = home.join("a");
    fs::create_dir(&a).unwrap();
    for i in 1..=8 {
        write(&a.join(format!("f{i}")), 1000);
    }
    write(&a.join("h"), 10);
    fs::hard_link(a.join("h"), a.join("h2")).unwrap();
    write(&a.join("k"), 10);
    fs::hard_link(a.join("k"), a.join("k2")).unwrap();
    fs::create_dir_all(home.join("b/c")).unwrap();
    write(&home.join("b/file"), 10);
    write(&home.join("b/c/file1"), 10);
    write(&home.join("b/c/file2"), 10);
    write(&home.join("untouched"), 5000);
    write(&a.join("saved"), 10);

    let snap = engine.take(sv("@home")).unwrap();
    let nothing = changes(&engine, snap.name, false);
    assert_eq!(
        nothing,
        Changes {
            complete: true,
            items_seen: nothing.items_seen,
            ..Changes::default()
        },
        "nothing changed yet"
    );

    // Files added: three written, one in a new directory tree, one symlink.
    for i in 1..=3 {
        write(&a.join(format!("new{i}")), 4096);
    }
    fs::create_dir_all(home.join("e/x")).unwrap();
    write(&home.join("e/x/y"), 100);
    symlink("target", home.join("s")).unwrap();
    // Files modified: an edit, a rename in place, a move into a new directory, a new hard
    // link, a hard link dropped, a chmod.
    let mut f1 = fs::OpenOptions::new()
        .write(true)
        .open(a.join("f1"))
        .unwrap();
    f1.seek(SeekFrom::Start(0)).unwrap();
    f1.write_all(&[b'y'; 8192]).unwrap();
    drop(f1);
    fs::rename(a.join("f4"), a.join("f4-renamed")).unwrap();
    fs::create_dir(home.join("d")).unwrap();
    fs::rename(a.join("f5"), home.join("d/f5")).unwrap();
    fs::hard_link(a.join("f6"), a.join("f6-link")).unwrap();
    fs::remove_file(a.join("h2")).unwrap();
    fs::set_permissions(a.join("f8"), fs::Permissions::from_mode(0o600)).unwrap();
    // Files removed: two plainly, one with both its names, a directory tree.
    fs::remove_file(a.join("f2")).unwrap();
    fs::remove_file(a.join("f3")).unwrap();
    fs::remove_file(a.join("k")).unwrap();
    fs::remove_file(a.join("k2")).unwrap();
    fs::remove_dir_all(home.join("b")).unwrap();
    // An editor's save: a new file renamed over the old one; one path modified.
    write(&a.join(".saved.swp"), 100);
    fs::rename(a.join(".saved.swp"), a.join("saved")).unwrap();
    // Only read: its access time moves, which is no change.
    assert_eq!(fs::read(a.join("f7")).unwrap().len(), 1000);

    let c = changes(&engine, snap.name, true);
    assert!(c.complete);
    // new1..3, e/x/y, s | f1, f4, f5, f6, h, f8, saved | f2, f3, k, b/file, b/c/file1,
    // b/c/file2
    assert_eq!(c.files, counts(5, 7, 6), "files");
    // d, e, e/x | the root, a | b, b/c
    assert_eq!(c.directories, counts(3, 2, 2), "directories");
    assert_eq!(
        c.bytes_written,
        3 * 4096 + 8192 + 100 + 100 + "target".len() as u64,
        "bytes of the extents written since (a symlink's target is its data)"
    );

    let listed: BTreeSet<(Change, bool, &str)> = c
        .paths
        .iter()
        .map(|p| (p.change, p.directory, std::str::from_utf8(&p.path).unwrap()))
        .collect();
    let expected: BTreeSet<(Change, bool, &str)> = [
        (Change::Added, false, "a/new1"),
        (Change::Added, false, "a/new2"),
        (Change::Added, false, "a/new3"),
        (Change::Added, false, "e/x/y"),
        (Change::Added, false, "s"),
        (Change::Added, true, "d"),
        (Change::Added, true, "e"),
        (Change::Added, true, "e/x"),
        (Change::Modified, false, "a/f1"),
        (Change::Modified, false, "a/f4-renamed"),
        (Change::Modified, false, "d/f5"),
        (Change::Modified, false, "a/f8"),
        (Change::Modified, false, "a/h"),
        (Change::Modified, false, "a/saved"),
        (Change::Modified, true, ""),
        (Change::Modified, true, "a"),
        (Change::Removed, false, "a/f2"),
        (Change::Removed, false, "a/f3"),
        (Change::Removed, false, "b/file"),
        (Change::Removed, false, "b/c/file1"),
        (Change::Removed, false, "b/c/file2"),
        (Change::Removed, true, "b"),
        (Change::Removed, true, "b/c"),
    ]
    .into_iter()
    .collect();
    // f6 has two names now and k had two: one of each is listed, either may be.
    let one_of = |x: &str, y: &str, change: Change| {
        let hits = [x, y]
            .iter()
            .filter(|p| listed.contains(&(change, false, **p)))
            .count();
        assert_eq!(
            hits, 1,
            "exactly one name of {x} / {y} listed as {change:?}"
        );
    };
    one_of("a/f6", "a/f6-link", Change::Modified);
    one_of("a/k", "a/k2", Change::Removed);
    let rest: BTreeSet<_> = listed
        .iter()
        .copied()
        .filter(|(_, _, p)| !["a/f6", "a/f6-link", "a/k", "a/k2"].contains(p))
        .collect();
    assert_eq!(rest, expected);
    assert_eq!(c.paths_left_off, 0);
}

#[test]
fn loop_changes_refuse_what_cannot_be_counted() {
    let Some((fs, engine)) = machine(256 << 20) else {
        return;
    };
    let nix = engine.take(sv("@nix")).unwrap();
    assert!(matches!(
        engine.changes_since(nix.name, Duration::from_secs(5), false, &mut |_| {}),
        Err(EngineError::NotRestorable(_))
    ));
    let missing = SnapshotName::new(sv("@home"), std::time::SystemTime::now()).unwrap();
    assert!(matches!(
        engine.changes_since(missing, Duration::from_secs(5), false, &mut |_| {}),
        Err(EngineError::NoSuchSnapshot(_))
    ));
    // A snapshot of another lineage: @home replaced by a fresh subvolume.
    let old = engine.take(sv("@home")).unwrap();
    let status = std::process::Command::new("btrfs")
        .args(["subvolume", "delete"])
        .stdout(std::process::Stdio::null())
        .arg(fs.top().join("@home"))
        .status()
        .unwrap();
    assert!(status.success());
    let status = std::process::Command::new("btrfs")
        .args(["subvolume", "create"])
        .arg(fs.top().join("@home"))
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(matches!(
        engine.changes_since(old.name, Duration::from_secs(5), false, &mut |_| {}),
        Err(EngineError::NotInHistory { .. })
    ));
}

/// 100 directories of 1000 empty files.
fn hundred_thousand_files(root: &Path) {
    for d in 0..100 {
        let dir = root.join(format!("d{d:03}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..1000 {
            fs::File::create(dir.join(format!("f{f:04}"))).unwrap();
        }
    }
}

#[test]
fn loop_changes_in_a_hundred_thousand_files_and_the_time_limit() {
    let Some((fs, engine)) = machine(1 << 30) else {
        return;
    };
    let home = fs.top().join("@home");
    let made = Instant::now();
    hundred_thousand_files(&home);
    eprintln!("100k files made in {:?}", made.elapsed());
    let snap = engine.take(sv("@home")).unwrap();

    // 1000 changes spread over the tree: 500 edits, 300 additions, 200 removals.
    for i in 0..500 {
        let path = home.join(format!("d{:03}/f{:04}", i % 100, i * 7 % 1000));
        fs::write(path, b"edited").unwrap();
    }
    for i in 0..300 {
        write(&home.join(format!("d{:03}/new{i}", i % 50)), 0);
    }
    for i in 0..200 {
        let path = home.join(format!("d{:03}/f{:04}", 50 + i % 50, 999 - i));
        fs::remove_file(path).unwrap();
    }

    let started = Instant::now();
    let c = changes(&engine, snap.name, false);
    let took = started.elapsed();
    eprintln!("changes_since over 100k files, 1000 changes: {took:?}");
    assert!(c.complete);
    assert_eq!(c.files, counts(300, 500, 200));
    // d000..d049 gained files, d050..d099 lost some: all 100 modified; the root not.
    assert_eq!(c.directories, counts(0, 100, 0));
    assert_eq!(c.bytes_written, 500 * "edited".len() as u64);
    assert!(took < Duration::from_secs(5), "took {took:?}");

    // No time at all: whatever was counted before the first look at the clock, all of it
    // true, and said to be incomplete.
    let cut = engine
        .changes_since(snap.name, Duration::ZERO, false, &mut |_| {})
        .unwrap();
    assert!(!cut.complete);
    assert!(cut.files.added <= 300 && cut.files.modified <= 500 && cut.files.removed <= 200);
    assert!(cut.directories.modified <= 100 && cut.bytes_written <= c.bytes_written);
    assert!(cut.total() < c.total(), "{cut:?}");

    // A budget of work instead of time (the same cut, independent of this machine's
    // speed): at each tenth of the full run's items, every number is a lower bound, none
    // shrinks as the budget grows, and some cut is partway.
    let top = btrfs::Top::open(fs.top()).unwrap();
    let live = top
        .dir()
        .open_dir("@home")
        .unwrap()
        .subvolume_info()
        .unwrap();
    let snapshot = top
        .dir()
        .open_dir(layout::SNAPSHOTS_SUBVOLUME)
        .unwrap()
        .open_dir(snap.name.to_string())
        .unwrap()
        .subvolume_info()
        .unwrap();
    let bounded = |max_items: u64, max_inodes: usize| {
        let options = btrfs::ChangesOptions {
            deadline: Instant::now() + Duration::from_secs(60),
            with_paths: false,
            max_paths: 0,
            max_items,
            max_inodes,
            progress_every: Duration::from_secs(1),
        };
        top.changes_since(&live, &snapshot, options, &mut |_| {})
            .unwrap()
    };
    let budget = |max_items: u64| bounded(max_items, usize::MAX);
    let full = budget(u64::MAX);
    assert!(full.complete);
    assert_eq!((full.files, full.directories), (c.files, c.directories));
    let mut last = Changes::default();
    let mut partway = 0;
    for tenth in 1..10 {
        let cut = budget(full.items_seen * tenth / 10);
        assert!(!cut.complete, "{tenth}/10");
        for (part, whole, before) in [
            (cut.files, full.files, last.files),
            (cut.directories, full.directories, last.directories),
        ] {
            assert!(part.added <= whole.added && part.added >= before.added);
            assert!(part.modified <= whole.modified && part.modified >= before.modified);
            assert!(part.removed <= whole.removed && part.removed >= before.removed);
        }
        assert!(cut.bytes_written <= full.bytes_written);
        if cut.total() > 0 && cut.total() < full.total() {
            partway += 1;
        }
        last = cut;
    }
    assert!(partway > 0, "no cut fell partway through the count");

    // A bound on memory: at most 100 changed inodes held. Those are classified, every
    // number is a lower bound, and the answer says it is incomplete.
    let held = bounded(u64::MAX, 100);
    assert!(!held.complete);
    assert!(held.total() > 0 && held.total() <= 100, "{held:?}");
    assert!(held.files.added <= full.files.added && held.files.modified <= full.files.modified);

    // Progress is reported while the count runs: with no least interval, at every check
    // of the clock (each 1024 items), each report further on than the last.
    let mut reports: Vec<btrfs::Progress> = Vec::new();
    let options = btrfs::ChangesOptions {
        deadline: Instant::now() + Duration::from_secs(60),
        with_paths: false,
        max_paths: 0,
        max_items: u64::MAX,
        max_inodes: usize::MAX,
        progress_every: Duration::ZERO,
    };
    let reported = top
        .changes_since(&live, &snapshot, options, &mut |p| reports.push(p))
        .unwrap();
    assert_eq!(reported.files, full.files, "reporting changes no count");
    assert!(
        reports.len() >= 10,
        "a count of {} items reported {} times",
        full.items_seen,
        reports.len()
    );
    assert!(
        reports.windows(2).all(|w| w[0].items_seen < w[1].items_seen
            && w[0].changes_found <= w[1].changes_found
            && w[0].elapsed <= w[1].elapsed),
        "progress only moves forward: {reports:?}"
    );
    let last = reports.last().expect("a report");
    assert!(last.items_seen <= full.items_seen && last.changes_found <= full.total());

    // The engine's paths listing of the same change set.
    let with_paths = engine
        .changes_since(snap.name, Duration::from_secs(60), true, &mut |_| {})
        .unwrap();
    assert_eq!(with_paths.paths.len() as u64, c.total());
    assert!(with_paths
        .paths
        .iter()
        .any(|p| p.change == Change::Removed && p.path == b"d050/f0999"));
}

#[test]
fn loop_changes_after_a_restore_count_along_the_live_history() {
    let Some((fs, engine)) = machine(256 << 20) else {
        return;
    };
    let top = fs.top();
    let home = top.join("@home");
    let store = top.join(layout::SNAPSHOTS_SUBVOLUME);
    write(&home.join("a"), 10);
    write(&home.join("b"), 10);
    let s0 = engine.take(sv("@home")).unwrap();
    write(&home.join("c"), 10);
    write(&home.join("a"), 20);
    let s1 = engine.take(sv("@home")).unwrap();
    write(&home.join("d"), 10);
    fs::remove_file(home.join("b")).unwrap();
    let s2 = engine.take(sv("@home")).unwrap();

    // What the initrd does for a restore to s1: the live subvolume replaced by a writable
    // snapshot of s1 (here by the btrfs CLI, the test's oracle tool).
    let btrfs = |args: &[&str]| {
        let out = std::process::Command::new("btrfs")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "btrfs {args:?}: {out:?}");
    };
    btrfs(&["subvolume", "delete", home.to_str().unwrap()]);
    let s1_path = store.join(s1.name.to_string());
    btrfs(&[
        "subvolume",
        "snapshot",
        s1_path.to_str().unwrap(),
        home.to_str().unwrap(),
    ]);
    write(&home.join("e"), 10);

    let since_s1 = changes(&engine, s1.name, false);
    assert_eq!(
        (since_s1.files, since_s1.directories),
        (counts(1, 0, 0), counts(0, 1, 0)),
        "only e is new since the state the live subvolume was made from"
    );
    let since_s0 = changes(&engine, s0.name, false);
    assert_eq!(
        (since_s0.files, since_s0.directories),
        (counts(2, 1, 0), counts(0, 1, 0)),
        "c and e added, a edited; d and the removal of b were undone by the restore"
    );
    assert!(matches!(
        engine.changes_since(s2.name, Duration::from_secs(5), false, &mut |_| {}),
        Err(EngineError::NotInHistory { .. })
    ));
}

#[test]
fn loop_a_count_is_reused_while_the_live_generation_stands_and_a_lookers_never_commits() {
    let Some((fs, engine)) = machine(256 << 20) else {
        return;
    };
    let home = fs.top().join("@home");
    write(&home.join("kept"), 10);
    let snap = engine.take(sv("@home")).unwrap();
    write(&home.join("added"), 4096);

    // A looker's count never commits: the superblock's generation stands, whatever is dirty.
    let before = fs.superblock_generation().unwrap();
    let never = engine
        .prepare_change_count(snap.name, Commit::Never)
        .unwrap();
    assert!(never.reused().is_none(), "nothing was counted yet");
    never
        .run(Instant::now() + Duration::from_secs(60), false, &mut |_| {})
        .unwrap();
    let again = engine
        .prepare_change_count(snap.name, Commit::Never)
        .unwrap();
    assert!(
        again.reused().is_some(),
        "the same generation: counted once"
    );
    assert_eq!(
        fs.superblock_generation().unwrap(),
        before,
        "a looker's count committed"
    );

    // Somebody who may confirm commits first: the write moved @home's generation, so the
    // count is made again, and it is exact.
    let first = engine
        .prepare_change_count(snap.name, Commit::First)
        .unwrap();
    assert!(fs.superblock_generation().unwrap() > before);
    assert!(
        first.reused().is_none(),
        "a count of an older generation was reused"
    );
    let exact = first
        .run(Instant::now() + Duration::from_secs(60), false, &mut |_| {})
        .unwrap();
    assert_eq!(
        (exact.files, exact.bytes_written, exact.complete),
        (counts(1, 0, 0), 4096, true)
    );
    // Nothing changed since: the commit finds nothing to do and the count is given again.
    let same = engine
        .prepare_change_count(snap.name, Commit::First)
        .unwrap();
    assert_eq!(same.reused(), Some(exact.clone()));

    // A write not yet committed: a looker is given the count of the last commit (it says
    // so in its words); the next commit moves the generation and the count is made again.
    write(&home.join("later"), 4096);
    let stale = engine
        .prepare_change_count(snap.name, Commit::Never)
        .unwrap();
    assert_eq!(stale.reused(), Some(exact));
    let fresh = engine
        .prepare_change_count(snap.name, Commit::First)
        .unwrap();
    assert!(fresh.reused().is_none());
    let c = fresh
        .run(Instant::now() + Duration::from_secs(60), false, &mut |_| {})
        .unwrap();
    assert_eq!((c.files, c.bytes_written), (counts(2, 0, 0), 8192));
}

/// A person's view (`btrfs::Viewer`): names only in directories they may list, in the tree
/// where the name is (the snapshot for a removed one, the live subvolume for the others);
/// the rest of their subtree counted; nothing outside it.
#[test]
fn loop_a_viewer_is_shown_names_only_where_it_may_list_in_the_tree_of_each_name() {
    use std::os::unix::fs::chown;
    let Some((fs, engine)) = machine(256 << 20) else {
        return;
    };
    let (uid, gid) = (4711, 4711);
    let home = fs.top().join("@home");
    let u = home.join("u");
    let dir = |p: &Path, mode: u32| {
        fs::create_dir(p).unwrap();
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    };
    dir(&u, 0o700);
    chown(&u, Some(uid), Some(gid)).unwrap();
    // Root's: closed in the snapshot and opened since; open then and closed since.
    dir(&u.join("opened"), 0o700);
    write(&u.join("opened/gone-then-closed.txt"), 10);
    dir(&u.join("closed"), 0o755);
    write(&u.join("closed/gone-then-open.txt"), 10);
    // Open to all by its bits, but its ACL gives this uid nothing.
    dir(&u.join("acl"), 0o755);
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 7u16, u32::MAX),
        (0x02, 0, uid),
        (0x04, 5, u32::MAX),
        (0x10, 5, u32::MAX),
        (0x20, 5, u32::MAX),
    ] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    rustix::fs::setxattr(
        u.join("acl"),
        "system.posix_acl_access",
        &acl,
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    dir(&home.join("v"), 0o755);
    let snap = engine.take(sv("@home")).unwrap();

    fs::remove_file(u.join("opened/gone-then-closed.txt")).unwrap();
    write(&u.join("opened/added-open.txt"), 10);
    fs::set_permissions(u.join("opened"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::remove_file(u.join("closed/gone-then-open.txt")).unwrap();
    write(&u.join("closed/added-closed.txt"), 10);
    fs::set_permissions(u.join("closed"), fs::Permissions::from_mode(0o700)).unwrap();
    write(&u.join("acl/added-refused.txt"), 10);
    write(&u.join("mine.txt"), 10);
    write(&home.join("v/elsewhere.txt"), 10);

    let view = |within: &[u8]| {
        let viewer = btrfs::Viewer {
            uid,
            gids: vec![gid],
            within: within.to_vec(),
        };
        let c = engine
            .prepare_change_count(snap.name, Commit::First)
            .unwrap()
            .run_seen_by(
                Instant::now() + Duration::from_secs(60),
                true,
                Some(&viewer),
                &mut |_| {},
            )
            .unwrap();
        let named: BTreeSet<(Change, String)> = c
            .paths
            .iter()
            .map(|p| (p.change, String::from_utf8(p.path.clone()).unwrap()))
            .collect();
        (named, c.paths_hidden, c.paths_left_off)
    };
    let (named, hidden, left_off) = view(b"u");
    let expected: BTreeSet<(Change, String)> = [
        (Change::Modified, "u"),
        (Change::Modified, "u/opened"),
        (Change::Added, "u/opened/added-open.txt"),
        (Change::Modified, "u/closed"),
        (Change::Removed, "u/closed/gone-then-open.txt"),
        (Change::Modified, "u/acl"),
        (Change::Added, "u/mine.txt"),
    ]
    .into_iter()
    .map(|(c, p)| (c, p.to_owned()))
    .collect();
    assert_eq!(named, expected);
    assert_eq!(
        (hidden, left_off),
        (3, 0),
        "gone-then-closed, added-closed, added-refused"
    );
    let (named, hidden, _) = view(b"u/closed");
    assert_eq!(named.len(), 2, "{named:?}");
    assert_eq!(hidden, 1);
    // Another subtree (root's, open to all): its own changes, nothing of u's.
    let (named, hidden, _) = view(b"v");
    assert_eq!(
        (named.len(), hidden),
        (2, 0),
        "v and v/elsewhere.txt only: {named:?}"
    );
}
