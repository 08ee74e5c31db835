//! Shared by the `loop_` tests: a laid-out loop-device Btrfs, snapshots and requests made
//! with the `btrfs` tool and plain files (independent of the code under test), and the real
//! `tacid-initrd` binary run against it with `--top`.

#![allow(dead_code)] // each test file uses its own part

pub mod hostile;

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, UNIX_EPOCH};

use layout::{
    Outcome, RestoreMember, RestoreRequest, SnapshotName, SubvolumeName, SNAPSHOTS_SUBVOLUME,
};
use testbed::LoopFs;
use uuid::Uuid;

pub const BIN: &str = env!("CARGO_BIN_EXE_tacid-initrd");

/// A laid-out machine, or `None` (already reported loudly; fails under CI=true).
pub fn machine() -> Option<LoopFs> {
    LoopFs::with_layout(512 << 20).expect("make a loop-device Btrfs")
}

pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn path(fs: &LoopFs, rel: &str) -> String {
    fs.top().join(rel).to_str().expect("utf-8 path").to_owned()
}

/// A snapshot name for `sub`, `n` seconds into 2025 (distinct per `n`).
pub fn snapshot_name(sub: &str, n: u64) -> SnapshotName {
    let sv = SubvolumeName::parse(sub).expect("layout name");
    SnapshotName::new(sv, UNIX_EPOCH + Duration::from_secs(1_735_689_600 + n)).expect("name")
}

/// Snapshot the live `sub` (read-only unless `writable`) into the store as `name`; its UUID.
pub fn snapshot_as(fs: &LoopFs, sub: &str, name: &str, writable: bool) -> Uuid {
    let dest = path(fs, &format!("{SNAPSHOTS_SUBVOLUME}/{name}"));
    let mut args = vec!["-q", "subvolume", "snapshot"];
    if !writable {
        args.push("-r");
    }
    let src = path(fs, sub);
    args.extend([src.as_str(), dest.as_str()]);
    sh("btrfs", &args);
    uuid_of(fs, &format!("{SNAPSHOTS_SUBVOLUME}/{name}"))
}

pub fn uuid_of(fs: &LoopFs, rel: &str) -> Uuid {
    let show = fs.show(rel).expect("btrfs subvolume show");
    Uuid::parse_str(&show["UUID"]).expect("uuid")
}

pub fn parent_uuid_of(fs: &LoopFs, rel: &str) -> Option<Uuid> {
    let show = fs.show(rel).expect("btrfs subvolume show");
    show.get("Parent UUID")
        .and_then(|u| Uuid::parse_str(u).ok())
}

/// Snapshot `sub` (read-only) and return the request that names it.
pub fn snapshot(fs: &LoopFs, sub: &str, n: u64) -> RestoreRequest {
    RestoreRequest::from(snapshot_member(fs, sub, n))
}

/// Snapshot `sub` (read-only) and return the member of a request that names it.
pub fn snapshot_member(fs: &LoopFs, sub: &str, n: u64) -> RestoreMember {
    let name = snapshot_name(sub, n);
    let uuid = snapshot_as(fs, sub, &name.to_string(), false);
    RestoreMember::new(name.subvolume(), name, uuid).expect("member")
}

/// The one member of a request of one.
pub fn only(request: &RestoreRequest) -> RestoreMember {
    match request.members() {
        [m] => *m,
        more => panic!("a request of {} members, not one", more.len()),
    }
}

pub fn request_path(fs: &LoopFs) -> std::path::PathBuf {
    fs.top()
        .join(SNAPSHOTS_SUBVOLUME)
        .join(layout::REQUEST_FILE_NAME)
}

/// Stage raw bytes as the request (root-owned, 0600), as the stem would.
pub fn stage_bytes(fs: &LoopFs, bytes: &[u8]) {
    let p = request_path(fs);
    fs::write(&p, bytes).expect("write request");
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).expect("chmod");
}

pub fn stage(fs: &LoopFs, request: &RestoreRequest) {
    stage_bytes(fs, request.render().as_bytes());
}

/// The hard floor the loop tests give `restore-data`: their file systems are smaller than the
/// shipped floor, and they test keeping what a restore replaces (adr/0027); a test of the
/// floor itself passes its own with [`run_with_floor`].
pub const LOOP_HARD_FLOOR: u64 = 1 << 20;

/// Run `tacid-initrd JOB --top <top>` with extra environment.
pub fn run(fs: &LoopFs, job: &str, env: &[(&str, &str)]) -> Output {
    run_with_floor(fs, job, env, LOOP_HARD_FLOOR)
}

/// [`run`] with the hard floor `floor` (restore-data only).
pub fn run_with_floor(fs: &LoopFs, job: &str, env: &[(&str, &str)], floor: u64) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args([job, "--top", &path(fs, "")]);
    if job == "restore-data" {
        cmd.arg(format!("--hard-floor-bytes={floor}"));
    }
    cmd.env_remove("TACID_TEST_STOP_AFTER");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run tacid-initrd")
}

/// Run `tacid-initrd JOB --top <top>` as its unit runs it in the initrd: with at most 1024
/// open files (systemd's default soft `LimitNOFILE=`), `ulimit -n 1024`.
pub fn run_as_unit(fs: &LoopFs, job: &str) -> Output {
    Command::new("sh")
        .args([
            "-c",
            "ulimit -n 1024 && exec \"$0\" \"$@\"",
            BIN,
            job,
            "--top",
        ])
        .arg(path(fs, ""))
        .arg(format!("--hard-floor-bytes={LOOP_HARD_FLOOR}"))
        .env_remove("TACID_TEST_STOP_AFTER")
        .output()
        .expect("run tacid-initrd under ulimit -n 1024")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Run and require exit 0, every line prefixed.
pub fn run_ok(fs: &LoopFs, job: &str) -> String {
    let out = run(fs, job, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{job} failed:\n{err}");
    for line in err.lines() {
        assert!(
            line.starts_with("tacid-initrd: "),
            "unprefixed line {line:?}"
        );
    }
    err
}

pub fn outcome(fs: &LoopFs) -> Outcome {
    let p = fs
        .top()
        .join(SNAPSHOTS_SUBVOLUME)
        .join(layout::OUTCOME_FILE_NAME);
    let bytes = fs::read(&p).unwrap_or_else(|e| panic!("read {p:?}: {e}"));
    Outcome::parse(&bytes).expect("the outcome parses")
}

/// Write a file (creating directories) inside the top level.
pub fn write(fs: &LoopFs, rel: &str, text: &str) {
    let p = fs.top().join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(&p, text).expect("write");
}

pub fn exists(fs: &LoopFs, rel: &str) -> bool {
    fs.top().join(rel).symlink_metadata().is_ok()
}

pub fn read(fs: &LoopFs, rel: &str) -> String {
    fs::read_to_string(fs.top().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// Every name at the top level with `.tacid-` in it (swap names left behind).
pub fn swap_names(fs: &LoopFs) -> Vec<String> {
    fs::read_dir(fs.top())
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tacid-"))
        .collect()
}

/// Every name at the top of the store with the temporary prefix (durable writes' temporaries
/// a cut-short run left, and anything else of that prefix).
pub fn store_temps(fs: &LoopFs) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(fs.top().join(SNAPSHOTS_SUBVOLUME))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(layout::TEMP_PREFIX))
        .collect();
    names.sort();
    names
}

pub fn is_dir(p: &Path) -> bool {
    p.symlink_metadata().map(|m| m.is_dir()).unwrap_or(false)
}

/// A story every restore test shares: @home had `kept` when the snapshot was taken, then
/// `kept` was changed and `lost` written. Returns the request for that snapshot.
pub fn home_story(fs: &LoopFs) -> RestoreRequest {
    write(fs, "@home/alice/kept", "tuesday");
    let request = snapshot(fs, "@home", 1);
    write(fs, "@home/alice/kept", "wednesday");
    write(fs, "@home/alice/lost", "written after the snapshot");
    request
}

/// The story's end: @home is the snapshot's copy, the outcome says done, nothing left over.
pub fn assert_home_restored(fs: &LoopFs, request: &RestoreRequest) {
    assert_eq!(read(fs, "@home/alice/kept"), "tuesday");
    assert!(!exists(fs, "@home/alice/lost"));
    assert_eq!(parent_uuid_of(fs, "@home"), Some(only(request).uuid()));
    assert!(!request_path(fs).exists(), "the request is removed");
    assert!(swap_names(fs).is_empty(), "left over: {:?}", swap_names(fs));
    assert!(
        store_temps(fs).is_empty(),
        "left over: {:?}",
        store_temps(fs)
    );
    let o = outcome(fs);
    assert_eq!(o.result, layout::OutcomeResult::Done, "{o}");
    assert_eq!(o.request.as_ref(), Some(request));
    let kept = assert_kept(fs, &o, "@home");
    assert_eq!(read(fs, &format!("{kept}/alice/kept")), "wednesday");
    assert_eq!(
        read(fs, &format!("{kept}/alice/lost")),
        "written after the snapshot"
    );
}

/// What `sub` held before the restore the outcome `o` reports is kept read-only in the store,
/// once, under the name the outcome gives; its path from the top.
pub fn assert_kept(fs: &LoopFs, o: &Outcome, sub: &str) -> String {
    let replaced = o
        .replaced
        .iter()
        .find(|r| r.subvolume.as_str() == sub)
        .unwrap_or_else(|| panic!("the outcome says nothing of {sub}'s replaced subvolume: {o}"));
    let name = replaced
        .kept
        .unwrap_or_else(|| panic!("{sub}'s replaced subvolume was not kept: {o}"));
    let rel = format!("{SNAPSHOTS_SUBVOLUME}/{name}");
    let show = fs.show(&rel).expect("the kept snapshot");
    assert!(
        show.get("Flags").is_some_and(|f| f.contains("readonly")),
        "{rel} is not read-only: {show:?}"
    );
    let requested = o
        .request
        .as_ref()
        .and_then(|r| r.member(replaced.subvolume))
        .expect("a member");
    // Once: of the snapshots of what the restore replaced, only the kept one is new (any
    // other is one taken before, like the one the request named).
    let replaced_uuid = parent_uuid_of(fs, &rel);
    let kept_ones: Vec<String> = fs::read_dir(fs.top().join(SNAPSHOTS_SUBVOLUME))
        .expect("read the store")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("{sub}.")))
        .filter(|n| *n != requested.snapshot().to_string())
        .filter(|n| {
            SnapshotName::parse(n).is_ok_and(|n| n.taken() > requested.snapshot().taken())
                && parent_uuid_of(fs, &format!("{SNAPSHOTS_SUBVOLUME}/{n}")) == replaced_uuid
        })
        .collect();
    assert_eq!(kept_ones, [name.to_string()], "kept once");
    rel
}

/// The set story: each of @persist, @log and @home had `<sub>/kept` = "then" when its
/// snapshot was taken (snapshot `n`, `n + 1`, `n + 2`), then `kept` was changed and `lost`
/// written. Returns the request for all three (not staged).
pub fn set_story(fs: &LoopFs, n: u64) -> RestoreRequest {
    let members: Vec<RestoreMember> = ["@persist", "@log", "@home"]
        .iter()
        .zip(n..)
        .map(|(sub, k)| {
            write(fs, &format!("{sub}/kept"), &format!("{sub} then"));
            snapshot_member(fs, sub, k)
        })
        .collect();
    for sub in ["@persist", "@log", "@home"] {
        write(fs, &format!("{sub}/kept"), "changed after the snapshot");
        write(fs, &format!("{sub}/lost"), "written after the snapshot");
    }
    RestoreRequest::new(members).expect("a set")
}

/// The set story's end: every member is its snapshot's copy with the snapshot's data (and
/// `@persist` has its store's mount point), the outcome says done and names every member,
/// nothing left over.
pub fn assert_set_restored(fs: &LoopFs, request: &RestoreRequest) {
    for m in request.members() {
        let sub = m.subvolume().as_str();
        assert_eq!(read(fs, &format!("{sub}/kept")), format!("{sub} then"));
        assert!(!exists(fs, &format!("{sub}/lost")), "{sub}/lost");
        assert_eq!(parent_uuid_of(fs, sub), Some(m.uuid()), "{sub}");
    }
    if request
        .member(SubvolumeName::parse("@persist").expect("layout"))
        .is_some()
    {
        assert!(
            is_dir(&fs.top().join("@persist/.snapshots")),
            "the mount point"
        );
    }
    assert!(!request_path(fs).exists(), "the request is removed");
    assert!(swap_names(fs).is_empty(), "left over: {:?}", swap_names(fs));
    assert!(
        store_temps(fs).is_empty(),
        "left over: {:?}",
        store_temps(fs)
    );
    let o = outcome(fs);
    assert_eq!(o.result, layout::OutcomeResult::Done, "{o}");
    assert_eq!(
        o.request.as_ref(),
        Some(request),
        "the outcome names every member"
    );
    let mut stamps = Vec::new();
    for m in request.members() {
        let sub = m.subvolume().as_str();
        let kept = assert_kept(fs, &o, sub);
        assert_eq!(
            read(fs, &format!("{kept}/lost")),
            "written after the snapshot"
        );
        // The time part of the name (`YYYY-MM-DDTHHMMSS.ffffffZ`).
        stamps.push(kept[kept.len() - 25..].to_owned());
    }
    stamps.dedup();
    assert_eq!(stamps.len(), 1, "one time for the set: {stamps:?}");
}

/// `@root` is a fresh copy of `@root-blank`, and nothing is left under a swap name.
pub fn assert_root_is_fresh(fs: &LoopFs, context: &str) {
    assert_root_is_a_blank_copy(fs, context);
    assert!(
        swap_names(fs).is_empty(),
        "{context}: left over: {:?}",
        swap_names(fs)
    );
}

/// `@root` is empty and a copy of `@root-blank`.
pub fn assert_root_is_a_blank_copy(fs: &LoopFs, context: &str) {
    assert_eq!(
        fs::read_dir(fs.top().join("@root"))
            .expect("read @root")
            .count(),
        0,
        "{context}: @root is not empty"
    );
    assert_eq!(
        parent_uuid_of(fs, "@root"),
        Some(uuid_of(fs, layout::ROOT_BLANK_SUBVOLUME)),
        "{context}: @root is not a copy of @root-blank"
    );
}

/// A set of `@persist` and `@home` (snapshots `n`, `n + 1`; each had `kept` = "<sub> then"),
/// staged, and found as no run of the initrd leaves it: `@persist` exchanged (the live name a
/// writable copy of its snapshot, made after the old one, which is under the swap name) and
/// `@home` with no copy. Returns the request.
pub fn half_exchanged_set(fs: &LoopFs, n: u64) -> RestoreRequest {
    let members: Vec<RestoreMember> = ["@persist", "@home"]
        .iter()
        .zip(n..)
        .map(|(sub, k)| {
            write(fs, &format!("{sub}/kept"), &format!("{sub} then"));
            let m = snapshot_member(fs, sub, k);
            write(fs, &format!("{sub}/kept"), "changed after the snapshot");
            m
        })
        .collect();
    let request = RestoreRequest::new(members).expect("a set");
    stage(fs, &request);
    let persist = request.members()[0];
    fs::rename(
        fs.top().join("@persist"),
        fs.top().join("@persist.tacid-swap"),
    )
    .expect("move @persist to its swap name");
    let snap = path(fs, &format!("{SNAPSHOTS_SUBVOLUME}/{}", persist.snapshot()));
    sh(
        "btrfs",
        &["-q", "subvolume", "snapshot", &snap, &path(fs, "@persist")],
    );
    request
}
