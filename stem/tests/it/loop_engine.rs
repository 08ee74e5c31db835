#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test
//! The stem engine on a real loop-device Btrfs laid out from the layout crate.
//!
//! Needs root and loop devices; elsewhere each test says SKIPPED loudly (and fails under
//! CI=true, through testbed).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt as _};
use std::path::Path;
use std::sync::Arc;

use layout::{SnapshotName, SubvolumeName, REQUEST_FILE_NAME, SNAPSHOTS_SUBVOLUME};
use stem::{Engine, EngineError, Origin, Staged, StoreProblem};
use testbed::LoopFs;

const SIZE: u64 = 256 << 20;

fn sv(name: &str) -> SubvolumeName {
    SubvolumeName::parse(name).unwrap()
}

fn machine() -> Option<(LoopFs, Engine)> {
    let fs = LoopFs::with_layout(SIZE).expect("make a loop Btrfs")?;
    let engine = Engine::open(fs.top()).expect("open the top level");
    Some((fs, engine))
}

fn store(fs: &LoopFs) -> std::path::PathBuf {
    fs.top().join(SNAPSHOTS_SUBVOLUME)
}

#[test]
fn loop_take_list_and_what_each_is_of() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    fs::write(fs.top().join("@home/file"), "monday").unwrap();
    let home = engine.take(sv("@home")).unwrap();
    let log = engine.take(sv("@log")).unwrap();
    assert_eq!(home.of, sv("@home"));
    assert!(home.readonly);
    assert_eq!(
        fs::read_to_string(store(&fs).join(home.name.to_string()).join("file")).unwrap(),
        "monday"
    );

    let oracle = fs
        .show(&format!("{SNAPSHOTS_SUBVOLUME}/{}", home.name))
        .unwrap();
    assert_eq!(
        oracle.get("UUID").map(String::as_str),
        Some(home.uuid.to_string().as_str())
    );

    let listed = engine.list().unwrap();
    let names: Vec<_> = listed.iter().map(|s| s.name).collect();
    assert_eq!(names, vec![log.name, home.name], "newest first");
    assert!(listed
        .iter()
        .all(|s| s.origin == Origin::ParentUuid && !s.staged));
    assert_eq!(listed[1].of, sv("@home"));
}

#[test]
fn loop_snapshots_of_what_is_not_snapshotted_are_refused() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    for name in ["@root", "@root-blank", "@snapshots"] {
        assert!(
            matches!(engine.take(sv(name)), Err(EngineError::NotSnapshottable(_))),
            "{name}"
        );
    }
    assert!(engine.list().unwrap().is_empty());
    drop(fs);
}

#[test]
fn loop_the_store_must_be_a_root_only_subvolume() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    let st = store(&fs);

    fs::set_permissions(&st, fs::Permissions::from_mode(0o777)).unwrap();
    match engine.take(sv("@home")) {
        Err(EngineError::Store(StoreProblem::ModeTooOpen { mode, .. })) => assert_eq!(mode, 0o777),
        other => panic!("mode 0777 accepted: {other:?}"),
    }
    fs::set_permissions(&st, fs::Permissions::from_mode(0o750)).unwrap();
    assert!(matches!(
        engine.list(),
        Err(EngineError::Store(StoreProblem::ModeTooOpen { .. }))
    ));
    fs::set_permissions(&st, fs::Permissions::from_mode(0o700)).unwrap();

    std::os::unix::fs::chown(&st, Some(1000), None).unwrap();
    assert!(matches!(
        engine.take(sv("@home")),
        Err(EngineError::Store(StoreProblem::NotOwnedByRoot {
            uid: 1000,
            ..
        }))
    ));
    std::os::unix::fs::chown(&st, Some(0), None).unwrap();
    engine.check_store().unwrap();

    // Replaced by a symlink to a directory that would otherwise pass every check.
    let elsewhere = fs.top().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o700)).unwrap();
    fs::rename(&st, fs.top().join("moved-away")).unwrap();
    symlink("elsewhere", &st).unwrap();
    let err = engine.take(sv("@home")).unwrap_err();
    assert!(
        matches!(err, EngineError::Store(StoreProblem::Symlink { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("symlink"), "{err}");
    assert_eq!(
        fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written through the link"
    );

    // Replaced by a plain directory.
    fs::remove_file(&st).unwrap();
    fs::create_dir(&st).unwrap();
    fs::set_permissions(&st, fs::Permissions::from_mode(0o700)).unwrap();
    let err = engine.take(sv("@home")).unwrap_err();
    assert!(
        matches!(err, EngineError::Store(StoreProblem::NotASubvolume { .. })),
        "{err:?}"
    );

    fs::remove_dir(&st).unwrap();
    assert!(matches!(
        engine.list(),
        Err(EngineError::Store(StoreProblem::Missing { .. }))
    ));
}

#[test]
fn loop_a_live_subvolume_replaced_by_a_plain_directory_is_refused() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    let home = fs.top().join("@home");
    std::process::Command::new("btrfs")
        .args(["-q", "subvolume", "delete"])
        .arg(&home)
        .status()
        .unwrap();
    fs::create_dir(&home).unwrap();
    let err = engine.take(sv("@home")).unwrap_err();
    assert!(matches!(err, EngineError::LiveSubvolume { .. }), "{err:?}");
    assert!(engine.list().unwrap().is_empty(), "nothing made");

    // A set fails at that member, names it, and leaves none of the others behind.
    let err = engine
        .take_set(&SubvolumeName::default_snapshot_set())
        .unwrap_err();
    match &err {
        EngineError::SetMember { member, .. } => assert_eq!(*member, sv("@home")),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("@home"), "{err}");
    assert!(
        engine.list().unwrap().is_empty(),
        "members already taken were removed"
    );
}

#[test]
fn loop_a_set_is_whole() {
    let Some((_fs, engine)) = machine() else {
        return;
    };
    let set = engine
        .take_set(&SubvolumeName::default_snapshot_set())
        .unwrap();
    let of: BTreeSet<_> = set.iter().map(|s| s.of.as_str()).collect();
    assert_eq!(of, BTreeSet::from(["@home", "@log", "@persist"]));
    assert_eq!(engine.list().unwrap().len(), 3);
}

#[test]
fn loop_names_that_are_not_snapshot_names_never_reach_the_disk() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    let long = "a".repeat(300);
    for bad in [
        "@home/..",
        "..",
        "../@home",
        "@home.2025-12-01T140200.123456Z/x",
        "a\0b",
        "a\nb",
        &long,
    ] {
        assert!(SnapshotName::parse(bad).is_err(), "{bad:?}");
    }
    // Something in the store that is not a canonical name is not a snapshot.
    std::process::Command::new("btrfs")
        .args(["-q", "subvolume", "create"])
        .arg(store(&fs).join("not-a-snapshot"))
        .status()
        .unwrap();
    assert!(engine.list().unwrap().is_empty());
}

#[test]
fn loop_eight_threads_take_at_once() {
    let Some((_fs, engine)) = machine() else {
        return;
    };
    let engine = Arc::new(engine);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let engine = Arc::clone(&engine);
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| engine.take(sv("@home")).unwrap().name)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let taken: Vec<SnapshotName> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let unique: BTreeSet<_> = taken.iter().copied().collect();
    assert_eq!(unique.len(), 40, "unique names");
    let listed: BTreeSet<_> = engine.list().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(listed, unique, "all listed");
}

#[test]
fn loop_stage_withdraw_and_the_pin() {
    let Some((mut fs, engine)) = machine() else {
        return;
    };
    let older = engine.take(sv("@home")).unwrap();
    let newer = engine.take(sv("@home")).unwrap();
    assert_eq!(engine.staged().unwrap(), None);

    let staged = match engine.stage_restore(older.name).unwrap() {
        Staged::New(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(staged.members().len(), 1);
    assert_eq!(staged.members()[0].uuid(), older.uuid);
    assert_eq!(
        engine.stage_restore(older.name).unwrap(),
        Staged::AlreadyStaged(staged.clone())
    );
    match engine.stage_restore(newer.name) {
        Err(e @ EngineError::AnotherRestoreStaged { .. }) => {
            assert!(
                e.to_string().contains(&older.name.to_string()),
                "names the staged one: {e}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(engine.delete(older.name), Err(EngineError::Pinned(n)) if n == older.name));
    let listed = engine.list().unwrap();
    assert!(listed.iter().find(|s| s.name == older.name).unwrap().staged);
    assert!(!listed.iter().find(|s| s.name == newer.name).unwrap().staged);

    // Durable: the request is on disk, byte for byte what the initrd will parse.
    drop(engine);
    fs.remount().unwrap();
    let engine = Engine::open(fs.top()).unwrap();
    assert_eq!(engine.staged().unwrap(), Some(staged.clone()));
    let on_disk = fs::read(store(&fs).join(REQUEST_FILE_NAME)).unwrap();
    assert_eq!(on_disk, staged.render().into_bytes());
    assert_eq!(
        fs::metadata(store(&fs).join(REQUEST_FILE_NAME))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );

    assert_eq!(engine.withdraw().unwrap(), Some(staged));
    assert_eq!(engine.withdraw().unwrap(), None);
    engine.delete(older.name).unwrap();
    assert!(matches!(
        engine.delete(older.name),
        Err(EngineError::NoSuchSnapshot(_))
    ));
    let left: Vec<_> = engine.list().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(left, vec![newer.name]);
    assert!(!store(&fs).join(older.name.to_string()).exists());
}

/// A stem cut short between the request's temporary file and its rename leaves that file;
/// the next stem with the same pid reaches the same name (pids repeat from boot to boot).
/// Here every name this process's next writes can take holds such a leftover, or a
/// symlink or a directory (not ours: skipped, never followed): staging still works, and at
/// the stem's start the leftovers go, only they.
#[test]
fn loop_leftover_request_temps_never_block_staging_and_go_at_start() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    fs::write(fs.top().join("@home/file"), "monday").unwrap();
    let snapshot = engine.take(sv("@home")).unwrap();
    let elsewhere = fs.top().join("@home/elsewhere");
    fs::write(&elsewhere, "must stay").unwrap();
    let pid = std::process::id();
    // Far more than this test binary's durable writes, so the next counter is below it.
    const PLANTED: u64 = 300;
    for n in 0..PLANTED {
        let p = store(&fs).join(format!(".tmp.{pid}.{n}"));
        match n % 3 {
            1 => symlink(&elsewhere, &p).unwrap(),
            2 => fs::create_dir(&p).unwrap(),
            _ => fs::write(&p, "@home a request a cut-short stem was writing\n").unwrap(),
        }
    }
    match engine.stage_restore(snapshot.name).unwrap() {
        Staged::New(r) => assert_eq!(engine.staged().unwrap(), Some(r)),
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read_to_string(&elsewhere).unwrap(), "must stay");

    let removed = engine.remove_leftover_temps().unwrap();
    assert!(!removed.is_empty());
    let left: BTreeSet<String> = fs::read_dir(store(&fs))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(layout::TEMP_PREFIX))
        .collect();
    let expected: BTreeSet<String> = (0..PLANTED)
        .filter(|n| n % 3 != 0)
        .map(|n| format!(".tmp.{pid}.{n}"))
        .collect();
    assert_eq!(left, expected, "only the leftover files go");
    assert_eq!(fs::read_to_string(&elsewhere).unwrap(), "must stay");
    assert!(engine.staged().unwrap().is_some(), "the request stays");
}

#[test]
fn loop_a_set_is_staged_as_one_request_and_withdrawn_whole() {
    let Some((mut fs, engine)) = machine() else {
        return;
    };
    let set = engine
        .take_set(&[sv("@home"), sv("@log"), sv("@persist")])
        .unwrap();
    let names: Vec<SnapshotName> = set.iter().map(|s| s.name).collect();
    let staged = match engine.stage_set_restore(&names).unwrap() {
        Staged::New(r) => r,
        other => panic!("{other:?}"),
    };
    // One line per member, in the layout's order, each pinning its snapshot's UUID.
    let order: Vec<&str> = staged
        .members()
        .iter()
        .map(|m| m.subvolume().as_str())
        .collect();
    assert_eq!(order, ["@persist", "@log", "@home"]);
    for s in &set {
        let m = staged.member(s.of).unwrap();
        assert_eq!((m.snapshot(), m.uuid()), (s.name, s.uuid));
    }
    let request_path = store(&fs).join(REQUEST_FILE_NAME);
    let text = fs::read_to_string(&request_path).unwrap();
    assert_eq!(text, staged.render());
    assert_eq!(text.lines().count(), 3, "{text}");

    // Exactly that set again, in any order: nothing changed.
    let reversed: Vec<SnapshotName> = names.iter().rev().copied().collect();
    assert_eq!(
        engine.stage_set_restore(&reversed).unwrap(),
        Staged::AlreadyStaged(staged.clone())
    );
    // Part of it, one member alone, or another snapshot: refused while it is staged.
    let newer = engine.take(sv("@home")).unwrap();
    for other in [
        &names[..2],
        &names[..1],
        &[newer.name][..],
        &[newer.name, names[1], names[2]][..],
    ] {
        match engine.stage_set_restore(other) {
            Err(EngineError::AnotherRestoreStaged { staged: s }) => assert_eq!(s, staged),
            x => panic!("{other:?}: {x:?}"),
        }
    }
    assert_eq!(fs::read_to_string(&request_path).unwrap(), text);
    // Every member is pinned and listed as staged; nothing else is.
    for n in &names {
        assert!(matches!(engine.delete(*n), Err(EngineError::Pinned(p)) if p == *n));
    }
    let listed = engine.list().unwrap();
    let staged_names: BTreeSet<_> = listed.iter().filter(|s| s.staged).map(|s| s.name).collect();
    assert_eq!(staged_names, names.iter().copied().collect());

    // Durable, and withdrawn whole.
    drop(engine);
    fs.remount().unwrap();
    let engine = Engine::open(fs.top()).unwrap();
    assert_eq!(engine.staged().unwrap(), Some(staged.clone()));
    assert_eq!(engine.withdraw().unwrap(), Some(staged));
    assert_eq!(engine.withdraw().unwrap(), None);
    assert!(!request_path.exists());
    for n in &names {
        engine.delete(*n).unwrap();
    }
}

#[test]
fn loop_a_set_with_one_bad_member_stages_nothing() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    let set = engine.take_set(&[sv("@persist"), sv("@log")]).unwrap();
    let (persist, log) = (set[0].name, set[1].name);
    let home = engine.take(sv("@home")).unwrap().name;
    let home2 = engine.take(sv("@home")).unwrap().name;
    // A writable subvolume under an @home name, and a snapshot of @log wearing one.
    let writable = home2.next();
    btrfs_cli(
        &["subvolume", "snapshot"],
        &fs.top().join("@home"),
        &store(&fs).join(writable.to_string()),
    );
    let liar = writable.next();
    btrfs_cli(
        &["subvolume", "snapshot", "-r"],
        &fs.top().join("@log"),
        &store(&fs).join(liar.to_string()),
    );
    let nix = engine.take(sv("@nix")).unwrap().name;
    let missing = liar.next();
    type Expected = fn(&EngineError) -> bool;
    let cases: Vec<(Vec<SnapshotName>, Expected)> = vec![
        (vec![], |e| matches!(e, EngineError::InvalidSet(_))),
        (
            vec![persist, home, home2],
            |e| matches!(e, EngineError::InvalidSet(m) if m.contains("both of @home")),
        ),
        (vec![persist, nix], |e| {
            matches!(e, EngineError::NotRestorable(_))
        }),
        (vec![persist, log, missing], |e| {
            matches!(e, EngineError::NoSuchSnapshot(_))
        }),
        (vec![persist, writable], |e| {
            matches!(e, EngineError::NotReadOnly(_))
        }),
        (
            vec![log, liar, persist],
            |e| matches!(e, EngineError::OfAnotherSubvolume { actual, .. } if actual.as_str() == "@log"),
        ),
    ];
    for (names, expected) in cases {
        match engine.stage_set_restore(&names) {
            Err(e) if expected(&e) => {}
            other => panic!("{names:?}: {other:?}"),
        }
        assert_eq!(engine.staged().unwrap(), None, "{names:?} staged something");
        assert!(!store(&fs).join(REQUEST_FILE_NAME).exists());
    }
    // The good members alone are fine.
    assert!(matches!(
        engine.stage_set_restore(&[home, log, persist]).unwrap(),
        Staged::New(r) if r.members().len() == 3
    ));
}

#[test]
fn loop_only_a_read_only_snapshot_of_that_subvolume_is_staged() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    let now = std::time::SystemTime::now();
    // A writable subvolume under a snapshot's name.
    let writable = SnapshotName::new(sv("@home"), now).unwrap();
    btrfs_cli(
        &["subvolume", "snapshot"],
        &fs.top().join("@home"),
        &store(&fs).join(writable.to_string()),
    );
    assert!(matches!(
        engine.stage_restore(writable),
        Err(EngineError::NotReadOnly(_))
    ));

    // A snapshot of @log wearing an @home name.
    let liar = writable.next();
    btrfs_cli(
        &["subvolume", "snapshot", "-r"],
        &fs.top().join("@log"),
        &store(&fs).join(liar.to_string()),
    );
    match engine.stage_restore(liar) {
        Err(EngineError::OfAnotherSubvolume { actual, .. }) => assert_eq!(actual, sv("@log")),
        other => panic!("{other:?}"),
    }
    let missing = liar.next();
    assert!(matches!(
        engine.stage_restore(missing),
        Err(EngineError::NoSuchSnapshot(_))
    ));
    let nix = engine.take(sv("@nix")).unwrap();
    assert!(matches!(
        engine.stage_restore(nix.name),
        Err(EngineError::NotRestorable(_))
    ));
    assert_eq!(
        engine.staged().unwrap(),
        None,
        "nothing staged by any of that"
    );
    assert!(!Path::new(&store(&fs).join(REQUEST_FILE_NAME)).exists());
}

#[test]
fn loop_a_full_filesystem_gives_a_clean_error_and_nothing_half_made() {
    let Some(fs) = LoopFs::create(
        testbed::MIN_SIZE,
        testbed::Options {
            layout: true,
            mixed: true,
        },
    )
    .expect("make a loop Btrfs") else {
        return;
    };
    let engine = Engine::open(fs.top()).unwrap();
    let before = engine.take(sv("@home")).unwrap();
    fs.fill("@home", 1 << 20).unwrap();
    // Full: keep asking until the filesystem says no; every answer is either a whole
    // snapshot or NoSpace.
    let mut taken = vec![before.name];
    let err = loop {
        match engine.take_set(&SubvolumeName::default_snapshot_set()) {
            Ok(set) => taken.extend(set.into_iter().map(|s| s.name)),
            Err(e) => break e,
        }
        assert!(
            taken.len() < 3000,
            "the full filesystem never refused a snapshot"
        );
    };
    match &err {
        EngineError::SetMember { source, .. } => {
            assert!(matches!(**source, EngineError::NoSpace { .. }), "{err:?}")
        }
        EngineError::NoSpace { .. } => {}
        other => panic!("not a clean NoSpace: {other:?}"),
    }
    assert!(err.to_string().contains("no space"), "{err}");
    let listed: BTreeSet<_> = engine.list().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(
        listed,
        taken.into_iter().collect(),
        "exactly the whole snapshots, no half-made one"
    );
}

fn btrfs_cli(args: &[&str], from: &Path, to: &Path) {
    let ok = std::process::Command::new("btrfs")
        .arg("-q")
        .args(args)
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(ok.success());
}
