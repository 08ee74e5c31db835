#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test
//! Copies off the disk to an SSH target: the stem's copy engine runs the real
//! `ssh` (through testbed's wrapper into a network namespace) to a real OpenSSH `sshd` whose
//! forced command is copies/tacid-copy-target, receiving onto a second loop-device Btrfs.
//!
//! Needs root, loop devices, btrfs-progs, OpenSSH, ip and nsenter; elsewhere each test says
//! SKIPPED loudly (and fails under CI=true, through testbed).

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{megabytes, Receiving};

/// The receiver's copies configuration: an SSH target is no place it receives into.
const NO_TARGETS: &str = r#"{"targets": {}}"#;
use layout::copies::CopiesConfig;
use layout::SubvolumeName;
use stem::copies::{Copies, CopyError};
use stem::worker::Worker;
use stem::{Engine, Snapshot};
use testbed::ssh::SshTarget;
use testbed::{LoopFs, Options};

const SIZE: u64 = 512 << 20;

struct Machine {
    fs: LoopFs,
    target_fs: LoopFs,
    far: SshTarget,
    worker: Worker,
    _runtime: Receiving,
}

fn machine() -> Option<Machine> {
    machine_with_script(&testbed::ssh::repo_script())
}

/// A machine whose backup host runs `script` as the forced command.
fn machine_with_script(script: &std::path::Path) -> Option<Machine> {
    let fs = LoopFs::with_layout(SIZE).expect("make a loop Btrfs")?;
    let target_fs = LoopFs::create(SIZE, Options::default()).expect("make the target")?;
    let dir = target_fs.top().join("tacid");
    fs::create_dir(&dir).unwrap();
    let far = SshTarget::start_with_script(script, &dir).expect("start sshd")?;
    let worker = Worker::start(Engine::open(fs.top()).unwrap(), || {}).unwrap();
    let runtime = Receiving::start(
        fs.top(),
        NO_TARGETS,
        "btrfs".as_ref(),
        stem::copies::DEFAULT_STALL,
    );
    Some(Machine {
        fs,
        target_fs,
        far,
        worker,
        _runtime: runtime,
    })
}

impl Machine {
    /// A copy engine with the target "offsite" pinned to `host_key`.
    fn copies_with_key(&self, host_key: &str) -> Copies {
        self.copies_with(host_key, stem::copies::DEFAULT_STALL)
    }

    /// A copy engine with the target "offsite" pinned to `host_key`, giving up after `stall`.
    fn copies_with(&self, host_key: &str, stall: Duration) -> Copies {
        let json = format!(
            r#"{{"targets": {{"offsite": {{"place": {:?}, "identity": {:?}, "host_key": {:?}}}}}}}"#,
            self.far.place(),
            self.far.identity().display().to_string(),
            host_key,
        );
        let config = CopiesConfig::parse(json.as_bytes()).unwrap();
        let programs = self._runtime.programs(self.far.ssh_program(), stall);
        Copies::new(
            config,
            programs,
            self.worker.clone(),
            self.fs.top().to_owned(),
        )
    }

    fn copies(&self) -> Copies {
        self.copies_with_key(self.far.host_key())
    }

    fn take(&self) -> Snapshot {
        let s = SubvolumeName::parse("@home").unwrap();
        self.worker
            .run_blocking(move |e| e.take(s))
            .unwrap()
            .unwrap()
    }

    fn write(&self, rel: &str, bytes: &[u8]) {
        fs::write(self.fs.top().join(rel), bytes).unwrap();
    }

    fn target_subvolumes(&self) -> Vec<String> {
        self.target_fs.subvolume_paths().unwrap()
    }
}

#[test]
fn ssh_copy_full_then_incremental_and_fetch_back() {
    let Some(m) = machine() else { return };
    let copies = m.copies();
    m.write("@home/big", &megabytes(4, 1));
    let s1 = m.take();
    let first = copies.copy_to(s1.name, "offsite").unwrap();
    assert_eq!(first.parent, None);
    assert_eq!(first.received_uuid, s1.uuid);
    let shown = m.target_fs.show(&format!("tacid/{}", s1.name)).unwrap();
    assert_eq!(shown["Received UUID"], s1.uuid.to_string(), "{shown:?}");

    m.write("@home/small", b"tuesday");
    let s2 = m.take();
    let second = copies.copy_to(s2.name, "offsite").unwrap();
    assert_eq!(second.parent, Some(s1.name));
    assert!(second.bytes < 1 << 20, "incremental: {}", second.bytes);

    let listed: Vec<_> = copies
        .copies_on("offsite")
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.received_uuid))
        .collect();
    assert_eq!(listed, vec![(s2.name, s2.uuid), (s1.name, s1.uuid)]);

    // Fetched back into a fresh store over the same link.
    let fresh = LoopFs::with_layout(SIZE).unwrap().unwrap();
    let worker = Worker::start(Engine::open(fresh.top()).unwrap(), || {}).unwrap();
    let runtime = Receiving::start(
        fresh.top(),
        NO_TARGETS,
        "btrfs".as_ref(),
        stem::copies::DEFAULT_STALL,
    );
    let json = format!(
        r#"{{"targets": {{"offsite": {{"place": {:?}, "identity": {:?}, "host_key": {:?}}}}}}}"#,
        m.far.place(),
        m.far.identity().display().to_string(),
        m.far.host_key(),
    );
    let fetcher = Copies::new(
        CopiesConfig::parse(json.as_bytes()).unwrap(),
        runtime.programs(m.far.ssh_program(), stem::copies::DEFAULT_STALL),
        worker.clone(),
        fresh.top().to_owned(),
    );
    let fetched = fetcher.fetch_from("offsite", s2.name).unwrap();
    assert_eq!(fetched.name, s2.name);
    assert!(fetched.readonly);
    assert_eq!(
        fs::read_to_string(
            fresh
                .top()
                .join(layout::SNAPSHOTS_SUBVOLUME)
                .join(s2.name.to_string())
                .join("small")
        )
        .unwrap(),
        "tuesday"
    );

    copies.delete_copy("offsite", s1.name).unwrap();
    assert_eq!(copies.copies_on("offsite").unwrap().len(), 1);
}

#[test]
fn ssh_copy_link_cut_mid_transfer() {
    let Some(m) = machine() else { return };
    let copies = m.copies();
    m.write("@home/big", &megabytes(160, 2));
    let s1 = m.take();
    let cut = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        let copying = s.spawn(|| copies.copy_to(s1.name, "offsite"));
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) && !copying.is_finished() {
            if copies.progress().first().is_some_and(|p| p.bytes > 2 << 20) {
                assert!(m.far.cut_link().unwrap() > 0);
                cut.store(true, Ordering::Relaxed);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        copying.join().unwrap()
    });
    assert!(
        cut.load(Ordering::Relaxed),
        "the copy ended before the link could be cut: {result:?}"
    );
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            CopyError::TransferFailed { .. } | CopyError::TargetUnreachable { .. }
        ),
        "{err}"
    );
    assert!(m.far.wait_far_side_idle(Duration::from_secs(10)));
    // The far side removes what it half-received when its receive fails, and at the start
    // of the next verb at the latest.
    let listed = copies.copies_on("offsite").unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    assert!(
        m.target_subvolumes().is_empty(),
        "{:?}",
        m.target_subvolumes()
    );

    let copied = copies.copy_to(s1.name, "offsite").unwrap();
    assert_eq!(copied.received_uuid, s1.uuid);
}

#[test]
fn ssh_host_key_changed_is_refused() {
    let Some(mut m) = machine() else { return };
    let pinned = m.far.host_key().to_owned();
    m.far.change_host_key().unwrap();
    let copies = m.copies_with_key(&pinned);
    let s1 = m.take();
    let err = copies.copy_to(s1.name, "offsite").unwrap_err();
    assert!(matches!(err, CopyError::HostKeyChanged { .. }), "{err}");
    assert!(matches!(
        copies.copies_on("offsite"),
        Err(CopyError::HostKeyChanged { .. })
    ));
    assert!(m.target_subvolumes().is_empty());
    // With the new key pinned, it goes.
    assert_eq!(
        m.copies()
            .copy_to(s1.name, "offsite")
            .unwrap()
            .received_uuid,
        s1.uuid
    );
}

#[test]
fn ssh_a_far_side_that_never_answers_is_given_up_and_frees_the_target() {
    // A hostile or broken backup host: the link stays up (sshd answers ssh's keepalives),
    // but its forced command never answers and never reads. Without a stall limit the act
    // would hold the target forever (every later copy: TargetBusy).
    let scripts = tempfile::tempdir().unwrap();
    let hang = scripts.path().join("hang");
    fs::write(&hang, "#!/bin/sh\nexec sleep 100000\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(&hang, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(scripts.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let Some(m) = machine_with_script(&hang) else {
        return;
    };
    let stall = Duration::from_secs(3);
    let copies = m.copies_with(m.far.host_key(), stall);

    let started = Instant::now();
    let listed = copies.copies_on("offsite");
    assert!(matches!(listed, Err(CopyError::Stalled(_))), "{listed:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );

    // A copy bigger than every buffer between here and there: the far side never reads it.
    m.write("@home/big", &megabytes(16, 3));
    let s1 = m.take();
    let started = Instant::now();
    let copied = copies.copy_to(s1.name, "offsite");
    assert!(matches!(copied, Err(CopyError::Stalled(_))), "{copied:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert!(copies.progress().is_empty(), "the target is free again");
    assert!(
        copied
            .unwrap_err()
            .to_string()
            .contains("stopped answering"),
        "says why"
    );
}

#[test]
fn ssh_a_hostile_fetch_stream_writes_nothing_outside_the_store() {
    // A hostile backup host lists a copy and, asked to send it, streams a subvolume of that
    // name and received UUID whose commands write outside the directory it is received in:
    // through a symlink the stream makes itself, and through `..`. btrfs receive follows
    // both unless confined (checked on btrfs-progs 6.2: both files land, exit 0).
    let scripts = tempfile::tempdir().unwrap();
    let victim = tempfile::tempdir().unwrap();
    let name = "@home.2026-12-01T140200.123456Z";
    let received = "11111111-2222-3333-4444-555555555555";
    let uuid = uuid::Uuid::parse_str(received).unwrap();
    let stream = testbed::send_stream::escaping(
        name,
        *uuid.as_bytes(),
        &victim.path().display().to_string(),
    );
    let stream_file = scripts.path().join("stream");
    fs::write(&stream_file, &stream).unwrap();
    let far = scripts.path().join("hostile");
    fs::write(
        &far,
        format!(
            "#!/bin/sh\ncase $SSH_ORIGINAL_COMMAND in\n  list) printf '%s\\t%s\\t%s\\n' '{name}' \
             '22222222-3333-4444-5555-666666666666' '{received}' ;;\n  'send {name}') exec cat '{}' ;;\n  \
             *) exit 2 ;;\nesac\n",
            stream_file.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    for p in [&far, &stream_file] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    fs::set_permissions(scripts.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let Some(m) = machine_with_script(&far) else {
        return;
    };
    let copies = m.copies();
    assert_eq!(
        copies.copies_on("offsite").unwrap().len(),
        1,
        "the far side lists it"
    );

    let fetched = copies.fetch_from("offsite", layout::SnapshotName::parse(name).unwrap());
    let escaped: Vec<_> = fs::read_dir(victim.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(escaped.is_empty(), "written outside the store: {escaped:?}");
    assert!(
        fetched.is_err(),
        "a stream that tried that is no fetch: {fetched:?}"
    );
    let incoming =
        m.fs.top()
            .join(layout::SNAPSHOTS_SUBVOLUME)
            .join(layout::copies::INCOMING_DIR_NAME);
    assert_eq!(
        fs::read_dir(&incoming).map(|d| d.count()).unwrap_or(0),
        0,
        ".incoming is left empty"
    );
    assert!(!m
        .fs
        .top()
        .join(layout::SNAPSHOTS_SUBVOLUME)
        .join(name)
        .exists());
}

#[test]
fn ssh_a_far_side_that_never_stops_talking_is_given_up() {
    // A hostile backup host answers `list` with lines that never end, on stdout, or talks
    // on stderr forever: data flows, so no stall catches it; the stem must still stop.
    let scripts = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(scripts.path(), fs::Permissions::from_mode(0o755)).unwrap();
    for (what, body) in [
        (
            "stdout",
            "yes '@home.2026-12-01T140200.123456Z\t11111111-2222-3333-4444-555555555555\t11111111-2222-3333-4444-555555555555'",
        ),
        ("stderr", "yes 'still thinking' >&2"),
    ] {
        let script = scripts.path().join(what);
        fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        let Some(m) = machine_with_script(&script) else { return };
        let copies = m.copies();
        let started = Instant::now();
        let listed = copies.copies_on("offsite");
        assert!(listed.is_err(), "{what}: {listed:?}");
        assert!(
            listed.unwrap_err().to_string().contains("more than"),
            "{what}: says why"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: {:?}",
            started.elapsed()
        );
        assert!(copies.progress().is_empty(), "{what}: the target is free");
    }
}
