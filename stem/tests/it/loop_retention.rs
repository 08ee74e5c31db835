#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test
//! Free space, the hard floor and deletion off the request path, on a real loop Btrfs.
//!
//! Needs root and loop devices; elsewhere each test says SKIPPED loudly (and fails under
//! CI=true, through testbed).

use std::fs;
use std::io::Write as _;
use std::time::{Duration, Instant};

use layout::{SubvolumeName, SNAPSHOTS_SUBVOLUME};
use stem::{Engine, EngineError};
use testbed::LoopFs;

const SIZE: u64 = 512 << 20;

fn sv(name: &str) -> SubvolumeName {
    SubvolumeName::parse(name).unwrap()
}

fn machine() -> Option<(LoopFs, Engine)> {
    let fs = LoopFs::with_layout(SIZE).expect("make a loop Btrfs")?;
    let engine = Engine::open(fs.top()).expect("open the top level");
    Some((fs, engine))
}

fn write_file(path: &std::path::Path, bytes: usize) {
    let mut f = fs::File::create(path).unwrap();
    let chunk = vec![0x5a_u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    f.sync_all().unwrap();
}

fn commit(fs: &LoopFs) {
    let top = btrfs::Top::open(fs.top()).unwrap();
    top.dir().commit().unwrap();
}

fn store_entries(fs: &LoopFs) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(fs.top().join(SNAPSHOTS_SUBVOLUME))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn loop_below_the_hard_floor_snapshots_are_refused_and_nothing_is_half_made() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    let before = engine.free_space().unwrap();
    assert!(before.free_bytes > 100 << 20, "{before:?}");
    assert!(before.size_bytes >= before.free_bytes);
    assert_eq!(before.hard_floor_bytes, 0);

    // The floor sits 64 MiB below today's free space; 128 MiB written puts us under it.
    let floor = before.free_bytes - (64 << 20);
    engine.set_hard_floor(floor);
    engine.take(sv("@home")).unwrap();
    write_file(&fs.top().join("@home/big"), 128 << 20);
    commit(&fs);
    let space = engine.free_space().unwrap();
    assert!(space.free_bytes < floor, "{space:?} floor {floor}");
    let listed_before = engine.list().unwrap();
    let entries_before = store_entries(&fs);

    match engine.take(sv("@log")) {
        Err(EngineError::BelowHardFloor { free, floor: f, .. }) => {
            assert_eq!(f.0, floor);
            assert!(free.0 < floor);
        }
        other => panic!("expected BelowHardFloor, got {other:?}"),
    }
    let e = engine
        .take_set(&[sv("@persist"), sv("@log"), sv("@home")])
        .unwrap_err();
    match &e {
        EngineError::SetMember { member, source } => {
            assert_eq!(*member, sv("@persist"));
            assert!(
                matches!(**source, EngineError::BelowHardFloor { .. }),
                "{source:?}"
            );
        }
        other => panic!("expected a set refused at its first member, got {other:?}"),
    }
    assert!(e.to_string().contains("hard floor"), "{e}");
    // Nothing half-made: the same snapshots, and nothing else in the store.
    assert_eq!(engine.list().unwrap(), listed_before);
    assert_eq!(store_entries(&fs), entries_before);

    // Freed again, snapshots are taken again.
    fs::remove_file(fs.top().join("@home/big")).unwrap();
    commit(&fs);
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.free_space().unwrap().free_bytes < floor {
        assert!(Instant::now() < deadline, "space never came back");
        std::thread::sleep(Duration::from_millis(100));
        commit(&fs);
    }
    engine.take(sv("@log")).unwrap();
}

#[test]
fn loop_delete_is_fast_and_the_space_comes_back_in_the_background() {
    let Some((fs, engine)) = machine() else {
        return;
    };
    // A snapshot that alone holds 128 MiB: written, snapshotted, removed from the live side.
    write_file(&fs.top().join("@home/big"), 128 << 20);
    let snap = engine.take(sv("@home")).unwrap();
    fs::remove_file(fs.top().join("@home/big")).unwrap();
    commit(&fs);
    let held = engine.free_space().unwrap();

    let started = Instant::now();
    engine.delete(snap.name).unwrap();
    let took = started.elapsed();
    let right_after = engine.free_space().unwrap();
    println!(
        "delete on the request path: {:.3} ms; right after: {} pending, {} MiB free",
        took.as_secs_f64() * 1e3,
        right_after.deletions_pending,
        right_after.free_bytes >> 20
    );
    // The unlink only; the commit runs on its own thread. Generous against a busy host.
    assert!(took < Duration::from_millis(50), "delete took {took:?}");
    assert!(!store_entries(&fs).contains(&snap.name.to_string()));

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = engine.free_space().unwrap();
        if now.deletions_pending == 0 && now.free_bytes >= held.free_bytes + (100 << 20) {
            println!(
                "space back after {:.0} ms: {} MiB free (was {} MiB)",
                started.elapsed().as_secs_f64() * 1e3,
                now.free_bytes >> 20,
                held.free_bytes >> 20
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "space never came back: {now:?}, before {held:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
