#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test
//! Copies off the disk to a local target: a second loop-device Btrfs, received
//! by the real `btrfs receive`, checked against `btrfs subvolume show/list` (the oracle).
//!
//! Needs root, loop devices and btrfs-progs; elsewhere each test says SKIPPED loudly (and
//! fails under CI=true, through testbed).

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::common::{megabytes, Receiving};
use layout::copies::CopiesConfig;
use layout::{SnapshotName, SubvolumeName, SNAPSHOTS_SUBVOLUME};
use stem::copies::{load_config, Copies, CopyError};
use stem::worker::Worker;
use stem::{Engine, Snapshot};
use testbed::{LoopFs, Options};

const SIZE: u64 = 512 << 20;
/// The target directory's name on the target filesystem.
const COPIES_DIR: &str = "tacid";

fn sv(name: &str) -> SubvolumeName {
    SubvolumeName::parse(name).unwrap()
}

/// A tacid machine with its copy engine, and a second Btrfs as the target "usb".
struct Machine {
    fs: LoopFs,
    target: LoopFs,
    worker: Worker,
    copies: Copies,
    _runtime: Receiving,
}

/// Root's copies configuration naming `targets`, as JSON.
fn config_for(targets: &[(&str, &Path)]) -> String {
    let body: Vec<String> = targets
        .iter()
        .map(|(name, place)| format!("{name:?}: {{\"place\": {:?}}}", place.display().to_string()))
        .collect();
    format!("{{\"targets\": {{{}}}}}", body.join(","))
}

/// A copy engine with the configuration `config`, its receiver running `btrfs`.
fn copies_for(fs: &LoopFs, worker: &Worker, config: String, btrfs: PathBuf) -> (Copies, Receiving) {
    let runtime = Receiving::start(fs.top(), &config, &btrfs, stem::copies::DEFAULT_STALL);
    let programs = runtime.programs("ssh".into(), stem::copies::DEFAULT_STALL);
    let config = CopiesConfig::parse(config.as_bytes()).unwrap();
    (
        Copies::new(config, programs, worker.clone(), fs.top().to_owned()),
        runtime,
    )
}

fn machine_with(target_size: u64, btrfs: PathBuf) -> Option<Machine> {
    let fs = LoopFs::with_layout(SIZE).expect("make a loop Btrfs")?;
    let target = LoopFs::create(target_size, Options::default()).expect("make the target")?;
    fs::create_dir(target.top().join(COPIES_DIR)).unwrap();
    let engine = Engine::open(fs.top()).unwrap();
    let worker = Worker::start(engine, || {}).unwrap();
    let config = config_for(&[("usb", &target.top().join(COPIES_DIR))]);
    let (copies, runtime) = copies_for(&fs, &worker, config, btrfs);
    Some(Machine {
        fs,
        target,
        worker,
        copies,
        _runtime: runtime,
    })
}

fn machine() -> Option<Machine> {
    machine_with(SIZE, "btrfs".into())
}

impl Machine {
    fn take(&self, subvolume: &str) -> Snapshot {
        let s = sv(subvolume);
        self.worker
            .run_blocking(move |e| e.take(s))
            .unwrap()
            .unwrap()
    }

    fn write(&self, rel: &str, bytes: &[u8]) {
        fs::write(self.fs.top().join(rel), bytes).unwrap();
    }

    /// What the oracle says about the copy `name` on the target.
    fn shown_on_target(&self, name: SnapshotName) -> std::collections::BTreeMap<String, String> {
        self.target.show(&format!("{COPIES_DIR}/{name}")).unwrap()
    }

    /// Every subvolume on the target, by path (the oracle).
    fn target_subvolumes(&self) -> Vec<String> {
        self.target.subvolume_paths().unwrap()
    }
}

#[test]
fn loop_copy_full_then_incremental_chain() {
    let Some(m) = machine() else { return };
    m.write("@home/big", &megabytes(4, 1));
    let s1 = m.take("@home");
    let first = m.copies.copy_to(s1.name, "usb").unwrap();
    assert_eq!(first.parent, None, "nothing on the target yet: a full send");
    assert_eq!(first.received_uuid, s1.uuid);
    assert!(
        first.bytes > 4 << 20,
        "the full stream holds the file: {}",
        first.bytes
    );

    let shown = m.shown_on_target(s1.name);
    assert_eq!(shown["Received UUID"], s1.uuid.to_string(), "{shown:?}");
    assert!(shown["Flags"].contains("readonly"), "{shown:?}");
    assert_eq!(
        fs::read(
            m.target
                .top()
                .join(COPIES_DIR)
                .join(s1.name.to_string())
                .join("big")
        )
        .unwrap(),
        megabytes(4, 1)
    );

    m.write("@home/small", b"tuesday");
    let s2 = m.take("@home");
    let second = m.copies.copy_to(s2.name, "usb").unwrap();
    assert_eq!(
        second.parent,
        Some(s1.name),
        "the newest snapshot both hold"
    );
    assert!(
        second.bytes < 1 << 20,
        "incremental: {} bytes",
        second.bytes
    );
    assert_eq!(
        m.shown_on_target(s2.name)["Received UUID"],
        s2.uuid.to_string()
    );

    m.write("@home/small", b"wednesday");
    let s3 = m.take("@home");
    let third = m.copies.copy_to(s3.name, "usb").unwrap();
    assert_eq!(third.parent, Some(s2.name));
    assert_eq!(
        fs::read_to_string(
            m.target
                .top()
                .join(COPIES_DIR)
                .join(s3.name.to_string())
                .join("small")
        )
        .unwrap(),
        "wednesday"
    );

    // Another subvolume's chain is its own: a full send.
    let log = m.take("@log");
    assert_eq!(m.copies.copy_to(log.name, "usb").unwrap().parent, None);

    let listed: Vec<_> = m
        .copies
        .copies_on("usb")
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.received_uuid))
        .collect();
    let mut expected = vec![
        (s1.name, s1.uuid),
        (s2.name, s2.uuid),
        (s3.name, s3.uuid),
        (log.name, log.uuid),
    ];
    expected.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    assert_eq!(listed, expected);

    // Again: nothing sent, and it says so.
    assert!(matches!(
        m.copies.copy_to(s3.name, "usb"),
        Err(CopyError::AlreadyHere(_))
    ));
    assert!(m.copies.progress().is_empty());
}

#[test]
fn loop_listings_in_a_flood_never_make_a_copy_or_deletion_busy() {
    // Anybody may list a target (through the keeper); a flood of listings must not make
    // the timer's copies, a fetch or retention's deletions fail as TargetBusy.
    let Some(m) = machine() else { return };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let listed = std::sync::atomic::AtomicUsize::new(0);
    let (copied, deleted) = std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = m.copies.copies_on("usb");
                    listed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        let mut copied = Vec::new();
        for i in 0..6u8 {
            m.write("@home/f", &[i]);
            let s = m.take("@home");
            copied.push((s.name, m.copies.copy_to(s.name, "usb").map(|c| c.parent)));
        }
        let deleted = m.copies.delete_copy("usb", copied[0].0);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (copied, deleted)
    });
    for (i, (_, c)) in copied.iter().enumerate() {
        assert!(c.is_ok(), "copy {i} in a flood of listings: {c:?}");
    }
    assert!(
        deleted.is_ok(),
        "a deletion in a flood of listings: {deleted:?}"
    );
    assert!(
        listed.load(std::sync::atomic::Ordering::Relaxed) > 20,
        "the listings ran alongside"
    );
}

#[test]
fn loop_copy_chain_broken_by_deleted_parents() {
    let Some(m) = machine() else { return };
    m.write("@home/f", b"1");
    let s1 = m.take("@home");
    m.copies.copy_to(s1.name, "usb").unwrap();
    m.write("@home/f", b"2");
    let s2 = m.take("@home");
    assert_eq!(
        m.copies.copy_to(s2.name, "usb").unwrap().parent,
        Some(s1.name)
    );

    // The newest common parent deleted on the target: the one before it serves.
    m.copies.delete_copy("usb", s2.name).unwrap();
    assert!(!m
        .target_subvolumes()
        .iter()
        .any(|p| p.ends_with(&s2.name.to_string())));
    m.write("@home/f", b"3");
    let s3 = m.take("@home");
    assert_eq!(
        m.copies.copy_to(s3.name, "usb").unwrap().parent,
        Some(s1.name)
    );

    // The parent deleted in the source store: the next one both hold.
    let s1_name = s1.name;
    m.worker
        .run_blocking(move |e| e.delete(s1_name))
        .unwrap()
        .unwrap();
    m.write("@home/f", b"4");
    let s4 = m.take("@home");
    assert_eq!(
        m.copies.copy_to(s4.name, "usb").unwrap().parent,
        Some(s3.name)
    );

    // Nothing in common any more: a full send, still verified.
    for c in m.copies.copies_on("usb").unwrap() {
        m.copies.delete_copy("usb", c.name).unwrap();
    }
    m.write("@home/f", b"5");
    let s5 = m.take("@home");
    let copied = m.copies.copy_to(s5.name, "usb").unwrap();
    assert_eq!(copied.parent, None);
    assert_eq!(
        m.shown_on_target(s5.name)["Received UUID"],
        s5.uuid.to_string()
    );

    assert!(matches!(
        m.copies.delete_copy("usb", s1.name),
        Err(CopyError::NoSuchCopy { .. })
    ));
}

/// A `btrfs` that passes on only the first 3 MB of the stream to the real `btrfs receive`:
/// the link cut mid-transfer. The receiver ends with an error, its reader gone.
fn cutting_btrfs(dir: &Path) -> PathBuf {
    let path = dir.join("btrfs-cut");
    fs::write(
        &path,
        "#!/bin/sh\n# The link cut after 3 MB.\nhead -c 3000000 | btrfs \"$@\"\n",
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn loop_copy_cut_mid_transfer_leaves_nothing_half_received() {
    let scripts = tempfile::tempdir().unwrap();
    let Some(m) = machine_with(SIZE, cutting_btrfs(scripts.path())) else {
        return;
    };
    m.write("@home/big", &megabytes(8, 2));
    let s1 = m.take("@home");
    let err = m.copies.copy_to(s1.name, "usb").unwrap_err();
    assert!(matches!(err, CopyError::TransferFailed { .. }), "{err}");
    assert!(
        m.target_subvolumes().is_empty(),
        "no half-received subvolume: {:?}",
        m.target_subvolumes()
    );
    assert!(m.copies.progress().is_empty());

    // The next run, with a working link, succeeds.
    let (copies, _runtime) = copies_for(
        &m.fs,
        &m.worker,
        config_for(&[("usb", &m.target.top().join(COPIES_DIR))]),
        "btrfs".into(),
    );
    let copied = copies.copy_to(s1.name, "usb").unwrap();
    assert_eq!(copied.received_uuid, s1.uuid);
}

#[test]
fn loop_copy_dead_transfer_found_on_target_is_removed_first() {
    let Some(m) = machine() else { return };
    m.write("@home/f", b"x");
    let s1 = m.take("@home");
    // What a receiver killed mid-way leaves: a writable subvolume under the copy's name.
    let dir = m.target.top().join(COPIES_DIR);
    let status = std::process::Command::new("btrfs")
        .args(["-q", "subvolume", "create"])
        .arg(dir.join(s1.name.to_string()))
        .status()
        .unwrap();
    assert!(status.success());
    assert!(m.copies.copies_on("usb").unwrap().is_empty(), "not a copy");
    assert!(m.target_subvolumes().is_empty(), "and removed");
    m.copies.copy_to(s1.name, "usb").unwrap();
    assert_eq!(m.copies.copies_on("usb").unwrap().len(), 1);
}

#[test]
fn loop_copy_to_a_full_target() {
    let Some(m) = machine_with(testbed::MIN_SIZE, "btrfs".into()) else {
        return;
    };
    m.write("@home/big", &megabytes(160, 3));
    let s1 = m.take("@home");
    let err = m.copies.copy_to(s1.name, "usb").unwrap_err();
    assert!(matches!(err, CopyError::TargetFull { .. }), "{err}");
    assert!(
        m.target_subvolumes().is_empty(),
        "nothing half-received: {:?}",
        m.target_subvolumes()
    );
}

#[test]
fn loop_copy_to_a_target_that_is_not_btrfs() {
    let Some(m) = machine() else { return };
    // /tmp here is not Btrfs; a tmpfs would do as well.
    let plain = tempfile::tempdir_in("/dev/shm").unwrap();
    let (copies, _runtime) = copies_for(
        &m.fs,
        &m.worker,
        config_for(&[("plain", plain.path())]),
        "btrfs".into(),
    );
    let s1 = m.take("@home");
    let err = copies.copy_to(s1.name, "plain").unwrap_err();
    assert!(matches!(err, CopyError::TargetNotBtrfs { .. }), "{err}");
    assert!(matches!(
        copies.copies_on("plain"),
        Err(CopyError::TargetNotBtrfs { .. })
    ));
    assert_eq!(fs::read_dir(plain.path()).unwrap().count(), 0);
}

#[test]
fn loop_copy_to_a_target_on_the_tacid_disk_itself_is_refused() {
    let Some(m) = machine() else { return };
    // A directory on the tacid filesystem, in a subvolume of its own and in a plain
    // directory of another subvolume: a copy in either dies with the disk.
    let own = m.fs.top().join("backups");
    btrfs::Dir::open_configured(m.fs.top())
        .unwrap()
        .create_subvolume("backups")
        .unwrap();
    let plain = m.fs.top().join("@persist/backup");
    fs::create_dir(&plain).unwrap();
    let (copies, _runtime) = copies_for(
        &m.fs,
        &m.worker,
        config_for(&[("same", &own), ("plain", &plain)]),
        "btrfs".into(),
    );
    let s1 = m.take("@home");
    for target in ["same", "plain"] {
        let err = copies.copy_to(s1.name, target).unwrap_err();
        assert!(matches!(err, CopyError::OnTheTacidDisk { .. }), "{err}");
        assert!(err.to_string().contains("dies with the disk"), "{err}");
        assert!(matches!(
            copies.copies_on(target),
            Err(CopyError::OnTheTacidDisk { .. })
        ));
    }
    assert_eq!(fs::read_dir(&own).unwrap().count(), 0);
    assert_eq!(fs::read_dir(&plain).unwrap().count(), 0);
    // The second Btrfs is still a target.
    m.copies.copy_to(s1.name, "usb").unwrap();
}

#[test]
fn loop_a_fetch_a_stopped_stem_left_half_received_is_removed_at_start() {
    // The stem killed mid-fetch leaves a writable subvolume in @snapshots/.incoming, as
    // big as what arrived; no list shows it, and it holds space until removed.
    let Some(m) = machine() else { return };
    let incoming =
        m.fs.top()
            .join(SNAPSHOTS_SUBVOLUME)
            .join(layout::copies::INCOMING_DIR_NAME);
    fs::create_dir(&incoming).unwrap();
    let left = btrfs::Dir::open_configured(&incoming)
        .unwrap()
        .create_subvolume("@home.2026-12-01T140200.123456Z")
        .unwrap();
    assert!(!left.readonly);
    fs::write(
        incoming.join("@home.2026-12-01T140200.123456Z/part"),
        megabytes(2, 9),
    )
    .unwrap();
    m.copies.clean_dead_fetches();
    assert_eq!(fs::read_dir(&incoming).unwrap().count(), 0);
}

#[test]
fn loop_deleting_a_snapshot_a_copy_is_sending_says_so() {
    // The kernel refuses to delete a subvolume a send reads (EPERM); the person deleting it
    // is told why, not "permission denied".
    let scripts = tempfile::tempdir().unwrap();
    let slow = scripts.path().join("btrfs-slow");
    fs::write(
        &slow,
        "#!/bin/sh\n# A receiver that starts reading late.\n{ sleep 3; cat; } | btrfs \"$@\"\n",
    )
    .unwrap();
    fs::set_permissions(&slow, fs::Permissions::from_mode(0o755)).unwrap();
    let Some(m) = machine_with(SIZE, slow) else {
        return;
    };
    m.write("@home/big", &megabytes(16, 5));
    let s1 = m.take("@home");
    let deleted = std::thread::scope(|scope| {
        let copy = scope.spawn(|| m.copies.copy_to(s1.name, "usb"));
        let started = std::time::Instant::now();
        while m.copies.progress().first().is_none_or(|p| p.bytes == 0) {
            assert!(started.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let name = s1.name;
        let deleted = m.worker.run_blocking(move |e| e.delete(name)).unwrap();
        assert!(copy.join().unwrap().is_ok(), "the copy goes on");
        deleted
    });
    let err = deleted.unwrap_err();
    assert!(matches!(err, stem::EngineError::BeingSent(_)), "{err}");
    assert!(err.to_string().contains("copy off the disk"), "{err}");
    // Once the copy is done, it can go.
    let name = s1.name;
    m.worker
        .run_blocking(move |e| e.delete(name))
        .unwrap()
        .unwrap();
}

#[test]
fn loop_forged_target_names_are_refused() {
    let Some(m) = machine() else { return };
    let s1 = m.take("@home");
    let huge = "u".repeat(100_000);
    for forged in [
        "../x",
        "usb/..",
        "/mnt",
        "USB",
        "usb\0",
        "\u{ff}\u{fe}",
        "ssh://evil/x",
        "nosuch",
        huge.as_str(),
    ] {
        match m.copies.copy_to(s1.name, forged) {
            Err(e @ CopyError::NoSuchTarget(_)) => {
                assert!(
                    e.to_string().len() < 400,
                    "capped: {} bytes",
                    e.to_string().len()
                )
            }
            other => panic!("{forged:.40?}: {other:?}"),
        }
        assert!(matches!(
            m.copies.copies_on(forged),
            Err(CopyError::NoSuchTarget(_))
        ));
    }
    assert!(m.target_subvolumes().is_empty());
}

#[test]
fn loop_fetch_back_into_a_fresh_store() {
    let Some(m) = machine() else { return };
    m.write("@home/letter", b"dear disk");
    let s1 = m.take("@home");
    m.copies.copy_to(s1.name, "usb").unwrap();

    // A new disk: the layout made, nothing else.
    let fresh = LoopFs::with_layout(SIZE).unwrap().unwrap();
    let worker = Worker::start(Engine::open(fresh.top()).unwrap(), || {}).unwrap();
    let (copies, _runtime) = copies_for(
        &fresh,
        &worker,
        config_for(&[("usb", &m.target.top().join(COPIES_DIR))]),
        "btrfs".into(),
    );
    let fetched = copies.fetch_from("usb", s1.name).unwrap();
    assert_eq!(fetched.name, s1.name);
    assert!(fetched.readonly);
    assert_eq!(fetched.of, sv("@home"));

    let listed = worker.run_blocking(|e| e.list()).unwrap().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, s1.name);
    assert!(listed[0].readonly);
    let store = fresh.top().join(SNAPSHOTS_SUBVOLUME);
    assert_eq!(
        fs::read_to_string(store.join(s1.name.to_string()).join("letter")).unwrap(),
        "dear disk"
    );
    let incoming = store.join(layout::copies::INCOMING_DIR_NAME);
    assert_eq!(
        fs::read_dir(&incoming).unwrap().count(),
        0,
        ".incoming is empty"
    );
    // The oracle: the fetched snapshot remembers what it was received from.
    let shown = fresh
        .show(&format!("{SNAPSHOTS_SUBVOLUME}/{}", s1.name))
        .unwrap();
    assert!(shown["Flags"].contains("readonly"), "{shown:?}");
    assert_eq!(shown["Received UUID"], s1.uuid.to_string(), "{shown:?}");

    // Its restore is staged like any other's.
    let name = s1.name;
    worker
        .run_blocking(move |e| e.stage_restore(name))
        .unwrap()
        .unwrap();

    // Again: the store holds it.
    assert!(matches!(
        copies.fetch_from("usb", s1.name),
        Err(CopyError::AlreadyHere(_))
    ));
    let missing = SnapshotName::parse("@home.2001-01-01T000000.000000Z").unwrap();
    assert!(matches!(
        copies.fetch_from("usb", missing),
        Err(CopyError::NoSuchCopy { .. })
    ));
}

#[test]
fn loop_copies_config_must_be_roots_and_not_writable_by_others() {
    // Root-only (chown); no loop device needed, but the same tier.
    if !rustix::process::geteuid().is_root() {
        eprintln!("\n*** SKIPPED: needs root ***\n");
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copies.json");
    assert!(
        load_config(&path).unwrap().targets.is_empty(),
        "missing: no targets"
    );

    fs::write(&path, r#"{"targets": {"usb": {"place": "/mnt/usb"}}}"#).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(load_config(&path).unwrap().targets.len(), 1);

    fs::set_permissions(&path, fs::Permissions::from_mode(0o664)).unwrap();
    assert!(load_config(&path).unwrap_err().contains("writable"));
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();

    std::os::unix::fs::chown(&path, Some(1000), None).unwrap();
    assert!(load_config(&path).unwrap_err().contains("not root"));
    std::os::unix::fs::chown(&path, Some(0), None).unwrap();

    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(load_config(&link).is_err(), "a symlink is refused");

    fs::write(&path, b"{\"targets\": {\"../x\": {\"place\": \"/mnt\"}}}").unwrap();
    assert!(load_config(&path).is_err());
}
