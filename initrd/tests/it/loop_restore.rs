//! The real binary against a real loop-device Btrfs: good requests, bad requests, wipe-root.
#![allow(clippy::unwrap_used)] // a panic is how a test reports

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt as _};

use crate::common::*;
use layout::{OutcomeResult, SNAPSHOTS_SUBVOLUME};

/// Without `--top` the binary mounts at /run/tacid-initrd/<job>, one path for every test
/// and every test process (loop_restore and loop_resume): they take turns.
const MOUNT_DIR: &str = "initrd-mount-dir";

/// [`LOOP_HARD_FLOOR`] as the argument a run without `--top` passes.
const LOOP_FLOOR_ARG: &str = "--hard-floor-bytes=1048576";

#[test]
fn loop_a_good_request_is_honoured_once() {
    let Some(mut fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    let log = run_ok(&fs, "restore-data");
    assert!(
        log.contains("exchanging @home and @home.tacid-swap"),
        "{log}"
    );
    assert_home_restored(&fs, &request);
    // Durable: what a fresh mount sees.
    fs.remount().expect("remount");
    assert_home_restored(&fs, &request);
    let first = outcome(&fs);

    // Written after the restore: the next boot must keep it (no second restore).
    write(&fs, "@home/alice/new", "thursday");
    let before = fs.subvolumes_snapshot().expect("list");
    let log = run_ok(&fs, "restore-data");
    assert!(log.contains("no restore is staged"), "{log}");
    assert_eq!(read(&fs, "@home/alice/new"), "thursday");
    assert_eq!(fs.subvolumes_snapshot().expect("list"), before);
    assert_eq!(outcome(&fs), first, "the outcome is not rewritten");
}

/// What a restore replaced is kept read-only in the store (adr/0027), and an undo is an
/// ordinary restore of it: after two boots the file written after the first snapshot is back,
/// and what the undo replaced is kept in turn.
#[test]
fn loop_a_restore_is_undone_by_restoring_what_it_replaced() {
    let Some(mut fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    let log = run_ok(&fs, "restore-data");
    assert!(log.contains("keeping @home.tacid-swap"), "{log}");
    assert_home_restored(&fs, &request);
    let first = outcome(&fs);
    let kept = first.replaced[0].kept.expect("kept");
    assert!(
        first.reason.as_str().contains(&kept.to_string()),
        "{}",
        first.reason.as_str()
    );
    let kept_rel = format!("{SNAPSHOTS_SUBVOLUME}/{kept}");
    // Its parent is what it replaced: the old @home, whose snapshot the restore named.
    let snapshot_rel = format!("{SNAPSHOTS_SUBVOLUME}/{}", only(&request).snapshot());
    let old_home = parent_uuid_of(&fs, &snapshot_rel);
    assert_eq!(parent_uuid_of(&fs, &kept_rel), old_home);
    write(
        &fs,
        "@home/alice/after-restore",
        "written after the restore",
    );

    // The undo: the next boot honours a request for the kept snapshot, like any other.
    let undo = layout::RestoreRequest::from(
        layout::RestoreMember::new(kept.subvolume(), kept, uuid_of(&fs, &kept_rel)).unwrap(),
    );
    stage(&fs, &undo);
    fs.remount().expect("remount");
    run_ok(&fs, "restore-data");
    fs.remount().expect("remount");
    assert_eq!(read(&fs, "@home/alice/lost"), "written after the snapshot");
    assert_eq!(read(&fs, "@home/alice/kept"), "wednesday");
    assert!(!exists(&fs, "@home/alice/after-restore"));
    let second = outcome(&fs);
    assert_eq!(second.result, OutcomeResult::Done, "{second}");
    let kept_again = assert_kept(&fs, &second, "@home");
    assert_eq!(
        read(&fs, &format!("{kept_again}/alice/after-restore")),
        "written after the restore"
    );
    assert!(swap_names(&fs).is_empty(), "{:?}", swap_names(&fs));
}

/// Below the hard floor at the boot the replaced subvolume is deleted as before, and the
/// outcome says so.
#[test]
fn loop_below_the_hard_floor_the_replaced_subvolume_is_deleted_and_the_outcome_says_so() {
    let Some(fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    let before: Vec<String> = fs::read_dir(fs.top().join(SNAPSHOTS_SUBVOLUME))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let out = run_with_floor(&fs, "restore-data", &[], u64::MAX);
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("below the hard floor"), "{log}");
    assert_eq!(read(&fs, "@home/alice/kept"), "tuesday");
    let o = outcome(&fs);
    assert_eq!(o.result, OutcomeResult::Done);
    assert_eq!(o.replaced.len(), 1);
    assert_eq!(o.replaced[0].kept, None, "{o}");
    assert!(o.reason.as_str().contains("deleted, not kept"), "{o}");
    let after: Vec<String> = fs::read_dir(fs.top().join(SNAPSHOTS_SUBVOLUME))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    let before: Vec<String> = before.into_iter().filter(|n| !n.starts_with('.')).collect();
    assert_eq!(after, before, "nothing kept");
    assert!(swap_names(&fs).is_empty());
}

#[test]
fn the_floor_argument_is_the_loop_floor() {
    assert_eq!(
        LOOP_FLOOR_ARG,
        format!("--hard-floor-bytes={LOOP_HARD_FLOOR}")
    );
}

#[test]
fn loop_restoring_persist_keeps_the_snapshots_mount_point() {
    let Some(fs) = machine() else { return };
    write(&fs, "@persist/etc/machine-id", "0123");
    assert!(!exists(&fs, "@persist/.snapshots"));
    let request = snapshot(&fs, "@persist", 2);
    write(&fs, "@persist/etc/machine-id", "4567");
    stage(&fs, &request);
    run_ok(&fs, "restore-data");
    assert_eq!(read(&fs, "@persist/etc/machine-id"), "0123");
    let rel = layout::SNAPSHOTS_MOUNT_POINT
        .strip_prefix("/persist/")
        .expect("under /persist");
    let meta = fs::symlink_metadata(fs.top().join("@persist").join(rel)).expect("mount point");
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert_eq!(outcome(&fs).result, OutcomeResult::Done);
}

#[test]
fn loop_restoring_deletes_nested_subvolumes_of_the_replaced_one() {
    let Some(fs) = machine() else { return };
    let request = home_story(&fs);
    // A nested subvolume, one nested in that (in a subdirectory), and one more.
    fs::create_dir_all(fs.top().join("@home/bob/deep")).expect("mkdir");
    sh(
        "btrfs",
        &["-q", "subvolume", "create", &path(&fs, "@home/bob/inner")],
    );
    fs::create_dir_all(fs.top().join("@home/bob/inner/x/y")).expect("mkdir");
    sh(
        "btrfs",
        &[
            "-q",
            "subvolume",
            "create",
            &path(&fs, "@home/bob/inner/x/y/innermost"),
        ],
    );
    sh(
        "btrfs",
        &[
            "-q",
            "subvolume",
            "create",
            &path(&fs, "@home/bob/deep/other"),
        ],
    );
    stage(&fs, &request);
    run_ok(&fs, "restore-data");
    assert_home_restored(&fs, &request);
    let names: Vec<String> = fs
        .subvolumes_snapshot()
        .expect("list")
        .into_iter()
        .map(|(p, _, _)| p)
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.contains("inner") && !n.contains("other")),
        "{names:?}"
    );
}

#[test]
fn loop_restoring_the_same_snapshot_twice_and_an_older_one_after_a_restore() {
    let Some(fs) = machine() else { return };
    write(&fs, "@home/f", "monday");
    let monday = snapshot(&fs, "@home", 10);
    write(&fs, "@home/f", "tuesday");
    let tuesday = snapshot(&fs, "@home", 11);
    write(&fs, "@home/f", "wednesday");
    stage(&fs, &tuesday);
    run_ok(&fs, "restore-data");
    assert_eq!(read(&fs, "@home/f"), "tuesday");
    write(&fs, "@home/f", "thursday");
    // The same snapshot again: a second, separate restore.
    stage(&fs, &tuesday);
    run_ok(&fs, "restore-data");
    assert_eq!(read(&fs, "@home/f"), "tuesday");
    // A snapshot of the subvolume that the first restore replaced.
    stage(&fs, &monday);
    run_ok(&fs, "restore-data");
    assert_eq!(read(&fs, "@home/f"), "monday");
    assert_eq!(outcome(&fs).result, OutcomeResult::Done);
}

/// One bad request: how to stage it, and words its recorded reason must contain.
struct Bad {
    what: &'static str,
    stage: Box<dyn Fn(&testbed::LoopFs)>,
    reason: &'static str,
}

fn bad(
    what: &'static str,
    reason: &'static str,
    stage: impl Fn(&testbed::LoopFs) + 'static,
) -> Bad {
    Bad {
        what,
        stage: Box::new(stage),
        reason,
    }
}

fn bytes(
    what: &'static str,
    reason: &'static str,
    b: impl Fn(&str, &str) -> Vec<u8> + 'static,
) -> Bad {
    // Given a good snapshot name and UUID of @home.
    bad(what, reason, move |fs| {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);
        let good = snapshot_member(
            fs,
            "@home",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        );
        let name = good.snapshot().to_string();
        let uuid = good.uuid().hyphenated().to_string();
        stage_bytes(fs, &b(&name, &uuid));
    })
}

fn bad_requests() -> Vec<Bad> {
    let u0 = "00000000-0000-0000-0000-000000000000";
    vec![
        bytes("empty", "empty", |_, _| Vec::new()),
        bytes("1 MiB", "1048576 bytes", |_, _| vec![b'a'; 1 << 20]),
        bytes("NUL byte", "not text", |n, u| {
            format!("@home\0{n} {u}\n").into_bytes()
        }),
        bytes("binary", "not text", |_, _| {
            vec![0xff, 0xfe, 0x00, 0x80, b'\n']
        }),
        bytes("CRLF", "carriage return", |n, u| {
            format!("@home {n} {u}\r\n").into_bytes()
        }),
        bytes("no newline", "newline", |n, u| {
            format!("@home {n} {u}").into_bytes()
        }),
        bytes(
            "the same member twice",
            "line 2: @home is named twice",
            |n, u| format!("@home {n} {u}\n@home {n} {u}\n").into_bytes(),
        ),
        bytes("trailing empty line", "empty line", |n, u| {
            format!("@home {n} {u}\n\n").into_bytes()
        }),
        bytes("tab", "not text", |n, u| {
            format!("@home\t{n} {u}\n").into_bytes()
        }),
        bytes("two spaces", "three fields", |n, u| {
            format!("@home  {n} {u}\n").into_bytes()
        }),
        bytes("two fields", "three fields", |n, _| {
            format!("@home {n}\n").into_bytes()
        }),
        bytes("four fields", "three fields", |n, u| {
            format!("@home {n} {u} now\n").into_bytes()
        }),
        bytes(
            "unknown subvolume",
            "not a subvolume of the tacid layout",
            |n, u| format!("@opt {n} {u}\n").into_bytes(),
        ),
        bytes("@nix", "not restorable", |_, u| {
            format!("@nix @nix.2025-01-01T000100.000000Z {u}\n").into_bytes()
        }),
        bytes("@root", "never taken", |_, u| {
            format!("@root @root.2025-01-01T000100.000000Z {u}\n").into_bytes()
        }),
        bytes("@root-blank", "never taken", |_, u| {
            format!("@root-blank @root-blank.2025-01-01T000100.000000Z {u}\n").into_bytes()
        }),
        bytes("@snapshots", "never taken", |_, u| {
            format!("@snapshots @snapshots.2025-01-01T000100.000000Z {u}\n").into_bytes()
        }),
        bytes(
            "mount point",
            "not a subvolume of the tacid layout",
            |n, u| format!("/home {n} {u}\n").into_bytes(),
        ),
        bytes(
            "a path as subvolume",
            "not a subvolume of the tacid layout",
            |n, u| format!("../@home {n} {u}\n").into_bytes(),
        ),
        bytes("dot-dot snapshot", "snapshot name", |n, u| {
            format!("@home ../{n} {u}\n").into_bytes()
        }),
        bytes("snapshot path", "snapshot name", |n, u| {
            format!("@home @snapshots/{n} {u}\n").into_bytes()
        }),
        bytes("snapshot named for another", "is of @log", |_, u| {
            format!("@home @log.2025-01-01T000100.000000Z {u}\n").into_bytes()
        }),
        bytes("uppercase UUID", "UUID", |n, u| {
            format!("@home {n} {}\n", u.to_uppercase()).into_bytes()
        }),
        bytes("nil UUID", "UUID", move |n, _| {
            format!("@home {n} {u0}\n").into_bytes()
        }),
        bytes("UUID without hyphens", "UUID", |n, u| {
            format!("@home {n} {}\n", u.replace('-', "")).into_bytes()
        }),
        bytes("braced UUID", "UUID", |n, u| {
            format!("@home {n} {{{u}}}\n").into_bytes()
        }),
        bad("missing snapshot", "no snapshot", |fs| {
            let name = snapshot_name("@home", 200);
            let r = layout::RestoreRequest::one(name.subvolume(), name, uuid::Uuid::from_u128(42))
                .unwrap();
            stage(fs, &r);
        }),
        bad("writable snapshot", "writable", |fs| {
            let name = snapshot_name("@home", 201);
            let uuid = snapshot_as(fs, "@home", &name.to_string(), true);
            stage(
                fs,
                &layout::RestoreRequest::one(name.subvolume(), name, uuid).unwrap(),
            );
        }),
        bad(
            "snapshot of another subvolume",
            "a snapshot of @log",
            |fs| {
                let name = snapshot_name("@home", 202);
                let uuid = snapshot_as(fs, "@log", &name.to_string(), false);
                stage(
                    fs,
                    &layout::RestoreRequest::one(name.subvolume(), name, uuid).unwrap(),
                );
            },
        ),
        bad("UUID mismatch", "not the", |fs| {
            let good = snapshot_member(fs, "@home", 203);
            let r = layout::RestoreRequest::one(
                good.subvolume(),
                good.snapshot(),
                uuid::Uuid::from_u128(7),
            )
            .unwrap();
            stage(fs, &r);
        }),
        bad("plain directory as snapshot", "plain directory", |fs| {
            let name = snapshot_name("@home", 204);
            fs::create_dir(fs.top().join(SNAPSHOTS_SUBVOLUME).join(name.to_string())).unwrap();
            stage(
                fs,
                &layout::RestoreRequest::one(name.subvolume(), name, uuid::Uuid::from_u128(8))
                    .unwrap(),
            );
        }),
        bad("symlink as snapshot", "a symlink", |fs| {
            let good = snapshot_member(fs, "@home", 205);
            let name = snapshot_name("@home", 206);
            symlink(
                good.snapshot().to_string(),
                fs.top().join(SNAPSHOTS_SUBVOLUME).join(name.to_string()),
            )
            .unwrap();
            stage(
                fs,
                &layout::RestoreRequest::one(name.subvolume(), name, good.uuid()).unwrap(),
            );
        }),
        bad("request is a symlink", "a symlink", |fs| {
            let good = snapshot(fs, "@home", 207);
            let elsewhere = fs.top().join(SNAPSHOTS_SUBVOLUME).join("elsewhere");
            fs::write(&elsewhere, good.render()).unwrap();
            symlink(&elsewhere, request_path(fs)).unwrap();
        }),
        bad("request is a fifo", "a fifo", |fs| {
            sh("mkfifo", &["-m", "600", request_path(fs).to_str().unwrap()]);
        }),
        bad("request is a directory", "a directory", |fs| {
            fs::create_dir(request_path(fs)).unwrap();
        }),
        bad("request is a socket", "special file", |fs| {
            let l = std::os::unix::net::UnixListener::bind(request_path(fs)).unwrap();
            drop(l);
        }),
        bad("foreign owner", "uid 1000", |fs| {
            let good = snapshot(fs, "@home", 208);
            stage(fs, &good);
            std::os::unix::fs::chown(request_path(fs), Some(1000), Some(1000)).unwrap();
        }),
        bad("world-writable", "0666", |fs| {
            let good = snapshot(fs, "@home", 209);
            stage(fs, &good);
            fs::set_permissions(request_path(fs), fs::Permissions::from_mode(0o666)).unwrap();
        }),
        bad("live subvolume missing", "missing", |fs| {
            let good = snapshot(fs, "@log", 210);
            sh("btrfs", &["-q", "subvolume", "delete", &path(fs, "@log")]);
            stage(fs, &good);
        }),
    ]
}

#[test]
fn loop_bad_requests_change_no_subvolume_and_say_why() {
    let Some(fs) = machine() else { return };
    let cases = bad_requests();
    assert!(cases.len() >= 30, "{} kinds", cases.len());
    for case in cases {
        (case.stage)(&fs);
        let before = fs.subvolumes_snapshot().expect("list");
        let log = run_ok(&fs, "restore-data");
        assert!(log.contains("refusing"), "{}: {log}", case.what);
        assert_eq!(
            fs.subvolumes_snapshot().expect("list"),
            before,
            "{}: a subvolume changed",
            case.what
        );
        let o = outcome(&fs);
        assert_eq!(o.result, OutcomeResult::Refused, "{}: {o}", case.what);
        assert!(
            o.reason.as_str().contains(case.reason),
            "{}: reason {:?} lacks {:?}",
            case.what,
            o.reason.as_str(),
            case.reason
        );
        assert!(
            request_path(&fs).symlink_metadata().is_err(),
            "{}: the request is moved aside",
            case.what
        );
        let refused = fs
            .top()
            .join(SNAPSHOTS_SUBVOLUME)
            .join(layout::REFUSED_REQUEST_FILE_NAME);
        assert!(
            refused.symlink_metadata().is_ok(),
            "{}: kept as {refused:?}",
            case.what
        );
        // The next boot does not try it again.
        let log = run_ok(&fs, "restore-data");
        assert!(log.contains("no restore is staged"), "{}: {log}", case.what);
        if is_dir(&refused) {
            fs::remove_dir(&refused).unwrap();
        }
    }
}

#[test]
fn loop_wipe_root_removes_files_and_nested_subvolumes() {
    let Some(fs) = machine() else { return };
    write(&fs, "@root/etc/hostname", "old");
    fs::create_dir_all(fs.top().join("@root/var/lib/machines")).unwrap();
    sh(
        "btrfs",
        &[
            "-q",
            "subvolume",
            "create",
            &path(&fs, "@root/var/lib/machines/box"),
        ],
    );
    sh(
        "btrfs",
        &[
            "-q",
            "subvolume",
            "create",
            &path(&fs, "@root/var/lib/machines/box/inner"),
        ],
    );
    let old = fs.show("@root").expect("show")["Subvolume ID"].clone();
    let log = run_ok(&fs, "wipe-root");
    assert!(
        log.contains("exchanging @root and @root.tacid-swap"),
        "{log}"
    );
    assert_eq!(
        fs::read_dir(fs.top().join("@root")).unwrap().count(),
        0,
        "@root is empty"
    );
    assert_eq!(
        parent_uuid_of(&fs, "@root"),
        Some(uuid_of(&fs, layout::ROOT_BLANK_SUBVOLUME))
    );
    assert_ne!(fs.show("@root").expect("show")["Subvolume ID"], old);
    assert!(swap_names(&fs).is_empty());
    let names: Vec<String> = fs
        .subvolumes_snapshot()
        .expect("list")
        .into_iter()
        .map(|(p, _, _)| p)
        .collect();
    let mut expected: Vec<String> = layout::SUBVOLUMES
        .iter()
        .map(|s| s.name.to_owned())
        .collect();
    expected.sort();
    assert_eq!(names, expected);
    // Blank stays read-only and empty.
    assert_eq!(
        fs.show(layout::ROOT_BLANK_SUBVOLUME).unwrap()["Flags"],
        "readonly"
    );
    // Every boot wipes again.
    write(&fs, "@root/tmp/x", "y");
    run_ok(&fs, "wipe-root");
    assert!(!exists(&fs, "@root/tmp/x"));
}

#[test]
fn loop_wipe_root_makes_a_missing_root() {
    let Some(fs) = machine() else { return };
    sh("btrfs", &["-q", "subvolume", "delete", &path(&fs, "@root")]);
    let log = run_ok(&fs, "wipe-root");
    assert!(log.contains("@root is missing"), "{log}");
    assert_eq!(
        parent_uuid_of(&fs, "@root"),
        Some(uuid_of(&fs, layout::ROOT_BLANK_SUBVOLUME))
    );
}

/// A machine that keeps its root has no `@root-blank` and no wipe: restore-data neither
/// needs nor touches either; what is on `@root` stays.
#[test]
fn loop_restore_data_needs_no_root_blank() {
    let Some(fs) = machine() else { return };
    sh(
        "btrfs",
        &[
            "-q",
            "subvolume",
            "delete",
            &path(&fs, layout::ROOT_BLANK_SUBVOLUME),
        ],
    );
    write(&fs, "@root/etc/hostname", "kept");
    let request = home_story(&fs);
    stage(&fs, &request);
    let log = run_ok(&fs, "restore-data");
    assert!(!log.contains(layout::ROOT_BLANK_SUBVOLUME), "{log}");
    assert_home_restored(&fs, &request);
    assert_eq!(read(&fs, "@root/etc/hostname"), "kept");
    assert!(!exists(&fs, layout::ROOT_BLANK_SUBVOLUME));
}

#[test]
fn loop_wipe_root_without_blank_fails_and_changes_nothing() {
    let Some(fs) = machine() else { return };
    sh(
        "btrfs",
        &[
            "-q",
            "subvolume",
            "delete",
            &path(&fs, layout::ROOT_BLANK_SUBVOLUME),
        ],
    );
    write(&fs, "@root/etc/hostname", "old");
    let before = fs.subvolumes_snapshot().expect("list");
    let out = run(&fs, "wipe-root", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("@root-blank is missing"),
        "{}",
        stderr(&out)
    );
    assert_eq!(fs.subvolumes_snapshot().expect("list"), before);
    assert_eq!(read(&fs, "@root/etc/hostname"), "old");
}

#[test]
fn loop_not_a_btrfs_top_level_is_a_failure() {
    let Some(fs) = machine() else { return };
    let out = std::process::Command::new(BIN)
        .args(["restore-data", "--top", &path(&fs, "@home")])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot open the Btrfs top level"),
        "{}",
        stderr(&out)
    );
}

/// Without the `test-hooks` feature the fault switches do not exist: neither the stop nor the
/// pause (whose command line a test build would take from TACID_TEST_CMDLINE) is honoured.
#[cfg(not(feature = "test-hooks"))]
#[test]
fn loop_the_fault_switches_are_not_in_user_builds() {
    let Some(fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    let mut child = std::process::Command::new(BIN)
        .args(["restore-data", "--top", &path(&fs, ""), LOOP_FLOOR_ARG])
        .env("TACID_TEST_STOP_AFTER", "1")
        .env("TACID_TEST_CMDLINE", "tacid.test_pause_after=1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().expect("kill");
            panic!("a user build paused: the fault switch is compiled in");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("read");
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        !err.contains("test stop") && !err.contains("test pause") && !err.contains("TEST BUILD"),
        "{err}"
    );
    assert_home_restored(&fs, &request);
}

/// Without the `test-hooks` feature the hibernation facts come from the kernel only: a user
/// build ignores `TACID_TEST_CMDLINE`, `TACID_TEST_SYS_POWER_RESUME` and
/// `TACID_TEST_EFI_HIBERNATE_LOCATION` (which would say "a resume is pending"), and restores.
/// Runs without `--top`, as the unit does (the check applies only then).
#[cfg(not(feature = "test-hooks"))]
#[test]
fn loop_the_injected_hibernation_facts_are_not_in_user_builds() {
    use initrd::cmdline::Cmdline;
    use initrd::resume::ResumeFacts;
    if let Some(why) = ResumeFacts::read(&Cmdline::from_proc()).pending_resume() {
        eprintln!(
            "\n*** SKIPPED: this machine itself has a resume pending ({why}); the restore \
             would rightly wait ***\n"
        );
        return;
    }
    let Some(mut fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    let sys = fs.scratch().join("sys-power-resume");
    fs::write(&sys, "0:0\n").unwrap();
    let efi = fs.scratch().join("HibernateLocation-efivar");
    fs::write(&efi, b"\x07\0\0\0{}").unwrap();
    let device = fs.device().to_str().expect("utf-8").to_owned();
    fs.unmount().expect("unmount");
    let _only_one = testbed::turn(MOUNT_DIR);
    let out = std::process::Command::new(BIN)
        .args(["restore-data", "--device", &device, LOOP_FLOOR_ARG])
        .env("TACID_TEST_CMDLINE", "root=LABEL=tacid resume=/dev/vda3")
        .env("TACID_TEST_SYS_POWER_RESUME", &sys)
        .env("TACID_TEST_EFI_HIBERNATE_LOCATION", &efi)
        .output()
        .expect("run");
    fs.mount().expect("mount");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("TEST BUILD") && !err.contains("waits for a normal boot"),
        "{err}"
    );
    assert_home_restored(&fs, &request);
}

#[test]
fn loop_without_top_the_device_is_mounted_and_unmounted() {
    let Some(mut fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    write(&fs, "@root/etc/hostname", "old");
    fs.unmount().expect("unmount");
    let device = fs.device().to_str().expect("utf-8").to_owned();
    let _only_one = testbed::turn(MOUNT_DIR);
    for job in ["restore-data", "wipe-root"] {
        let out = std::process::Command::new(BIN)
            .args([job, "--device", &device, LOOP_FLOOR_ARG])
            .output()
            .expect("run");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{job}: {err}");
        assert!(
            err.contains(&format!(
                "mounted {device} (subvolid=5) at /run/tacid-initrd/{job}"
            )),
            "{err}"
        );
        assert!(
            !std::path::Path::new("/run/tacid-initrd").join(job).exists(),
            "unmounted and removed"
        );
    }
    fs.mount().expect("mount");
    assert_home_restored(&fs, &request);
    assert!(!exists(&fs, "@root/etc/hostname"));
}

/// A set of @persist, @log and @home in one run: every snapshot is copied before the first
/// exchange, the exchanges go in the layout's order, every member ends as its snapshot's copy
/// with its data, the log and the outcome name every member, and the next run does nothing.
#[test]
fn loop_a_set_of_three_is_put_back_whole_in_one_run() {
    let Some(mut fs) = machine() else { return };
    let request = set_story(&fs, 300);
    stage(&fs, &request);
    let log = run_ok(&fs, "restore-data");
    assert!(
        log.contains("a restore of 3 subvolumes is staged, all of them together or none"),
        "{log}"
    );
    let at = |needle: &str| {
        log.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in the log:\n{log}"))
    };
    let copies = ["@persist", "@log", "@home"].map(|s| at(&format!("to {s}.tacid-swap\n")));
    let exchanges =
        ["@persist", "@log", "@home"].map(|s| at(&format!("exchanging {s} and {s}.tacid-swap\n")));
    assert!(copies.windows(2).all(|w| w[0] < w[1]), "{log}");
    assert!(exchanges.windows(2).all(|w| w[0] < w[1]), "{log}");
    assert!(
        copies[2] < exchanges[0],
        "every copy before the first exchange:\n{log}"
    );
    let done = request
        .members()
        .iter()
        .map(|m| format!("{} is back to {}", m.subvolume(), m.snapshot()))
        .collect::<Vec<_>>()
        .join(", ");
    assert!(
        log.contains(&format!("restore-data: done: {done}\n")),
        "{log}"
    );
    assert_set_restored(&fs, &request);
    fs.remount().expect("remount");
    assert_set_restored(&fs, &request);
    let o = outcome(&fs);
    assert!(o.reason.as_str().contains("together"), "{o}");

    for sub in ["@persist", "@log", "@home"] {
        write(&fs, &format!("{sub}/new"), "after the restore");
    }
    let before = fs.subvolumes_snapshot().expect("list");
    let log = run_ok(&fs, "restore-data");
    assert!(log.contains("no restore is staged"), "{log}");
    for sub in ["@persist", "@log", "@home"] {
        assert_eq!(read(&fs, &format!("{sub}/new")), "after the restore");
    }
    assert_eq!(fs.subvolumes_snapshot().expect("list"), before);
    assert_eq!(outcome(&fs), o, "the outcome is not rewritten");
}

/// A set refused whole: no subvolume changed, no copy made, the outcome "refused" names every
/// member and says why, the request moved aside, the log says what was not changed.
fn assert_set_refused(fs: &testbed::LoopFs, request: &layout::RestoreRequest, reason: &str) {
    let before = fs.subvolumes_snapshot().expect("list");
    let log = run_ok(fs, "restore-data");
    assert!(log.contains("refusing the staged restore"), "{log}");
    assert!(!log.contains("copying"), "a copy was made:\n{log}");
    assert!(
        log.contains(&format!(
            "; none of {} was changed; the boot continues",
            request.subvolumes()
        )),
        "{log}"
    );
    assert_eq!(fs.subvolumes_snapshot().expect("list"), before);
    assert!(swap_names(fs).is_empty(), "{:?}", swap_names(fs));
    let o = outcome(fs);
    assert_eq!(o.result, OutcomeResult::Refused, "{o}");
    assert_eq!(o.request.as_ref(), Some(request), "names every member");
    assert!(o.reason.as_str().contains(reason), "{reason:?} not in {o}");
    assert!(request_path(fs).symlink_metadata().is_err());
    assert_eq!(
        fs::read(
            fs.top()
                .join(SNAPSHOTS_SUBVOLUME)
                .join(layout::REFUSED_REQUEST_FILE_NAME)
        )
        .expect("moved aside"),
        request.render().into_bytes()
    );
    for sub in ["@persist", "@log", "@home"] {
        assert_eq!(
            read(fs, &format!("{sub}/kept")),
            "changed after the snapshot"
        );
    }
    let log = run_ok(fs, "restore-data");
    assert!(log.contains("no restore is staged"), "{log}");
}

/// One bad member refuses the set, whichever member it is and whatever is wrong with it.
#[test]
fn loop_a_set_with_one_bad_member_changes_nothing_and_names_every_member() {
    type Spoil = fn(&testbed::LoopFs, &layout::RestoreRequest) -> layout::RestoreRequest;
    let cases: [(&str, &str, Spoil); 3] = [
        ("@log's snapshot made writable", "writable", |fs, r| {
            let snap = format!("{SNAPSHOTS_SUBVOLUME}/{}", r.members()[1].snapshot());
            sh(
                "btrfs",
                &["property", "set", &path(fs, &snap), "ro", "false"],
            );
            r.clone()
        }),
        ("@home's UUID not its snapshot's", "not the", |_, r| {
            let mut members = r.members().to_vec();
            let m = members[2];
            members[2] =
                layout::RestoreMember::new(m.subvolume(), m.snapshot(), uuid::Uuid::from_u128(7))
                    .unwrap();
            layout::RestoreRequest::new(members).unwrap()
        }),
        (
            "@persist's snapshot taken of @log",
            "a snapshot of @log",
            |fs, r| {
                let name = snapshot_name("@persist", 399);
                let uuid = snapshot_as(fs, "@log", &name.to_string(), false);
                let mut members = r.members().to_vec();
                members[0] = layout::RestoreMember::new(name.subvolume(), name, uuid).unwrap();
                layout::RestoreRequest::new(members).unwrap()
            },
        ),
    ];
    for (what, reason, spoil) in cases {
        let Some(fs) = machine() else { return };
        let good = set_story(&fs, 300);
        let request = spoil(&fs, &good);
        stage(&fs, &request);
        eprintln!("{what}");
        assert_set_refused(&fs, &request, reason);
    }
}

/// The last member's snapshot is gone (deleted after staging): refused before the first
/// copy, the first two members untouched too.
#[test]
fn loop_a_set_whose_later_member_snapshot_is_missing_is_refused_whole() {
    let Some(fs) = machine() else { return };
    let request = set_story(&fs, 300);
    stage(&fs, &request);
    let home = format!("{SNAPSHOTS_SUBVOLUME}/{}", request.members()[2].snapshot());
    sh("btrfs", &["-q", "subvolume", "delete", &path(&fs, &home)]);
    assert_set_refused(
        &fs,
        &request,
        &format!(
            "there is no snapshot {} in the store",
            request.members()[2].snapshot()
        ),
    );
}

/// A set found with @persist exchanged and @home without a copy (the steps never leave it;
/// made here by hand): @persist is exchanged back, the request refused, the copy deleted —
/// no member put back, and the log says so.
#[test]
fn loop_a_half_exchanged_set_without_a_copy_is_exchanged_back_and_refused() {
    let Some(mut fs) = machine() else { return };
    let request = half_exchanged_set(&fs, 400);
    let old_persist = uuid_of(&fs, "@persist.tacid-swap");
    let old_home = uuid_of(&fs, "@home");
    let log = run_ok(&fs, "restore-data");
    assert!(
        log.contains("warning: @persist exchanged already, but @home"),
        "{log}"
    );
    assert!(
        log.contains("exchanging @persist and @persist.tacid-swap back"),
        "{log}"
    );
    assert!(log.contains("done step 18 ("), "{log}");
    fs.remount().expect("remount");
    assert_eq!(uuid_of(&fs, "@persist"), old_persist);
    assert_eq!(uuid_of(&fs, "@home"), old_home);
    for sub in ["@persist", "@home"] {
        assert_eq!(
            read(&fs, &format!("{sub}/kept")),
            "changed after the snapshot"
        );
    }
    assert!(swap_names(&fs).is_empty(), "{:?}", swap_names(&fs));
    let o = outcome(&fs);
    assert_eq!(o.result, OutcomeResult::Refused, "{o}");
    assert_eq!(o.request.as_ref(), Some(&request));
    assert!(o.reason.as_str().contains("@persist exchanged back"), "{o}");
}
