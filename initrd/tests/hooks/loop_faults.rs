//! The test-only fault switch against a real loop-device Btrfs: the real binary stops right
//! after step N (exit 99), or after its k-th occurrence (`N.k`), and the next run converges —
//! for every step, and with a second stop during the recovery run. Every step the binary
//! defines is the first stop of some run: restores of @home and of @persist (1-10, 27, and keeping what they replaced: 29, 30), a
//! refusal (11-13, 28), leftovers under swap names with and without a request (14-15), wipes of
//! an existing and of a missing @root (21-26), a half-exchanged set exchanged back (18-19);
//! and every occurrence of every step of a restore of a set of three.
//! Needs `--features test-hooks` (this target requires it).
//!
//! A stopped process is not a power cut (the page cache survives it); the boot tier does real
//! power cuts, the model in `src/model.rs` every prefix of uncommitted work. This proves the
//! binary reads its state back from the disk and finishes from each step.
#![allow(clippy::unwrap_used)] // a panic is how a test reports

use std::fmt::Display;
use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use crate::common::*;
use initrd::steps::{Step, StepAt};
use layout::{OutcomeResult, RestoreRequest};

/// Run `job` with the stop switch at `step` (`N` or `N.k`): `Some(log)` when it stopped
/// there (exit 99), `None` when it finished without reaching it (exit 0).
fn stop_after(fs: &testbed::LoopFs, job: &str, step: impl Display) -> Option<String> {
    let n = step.to_string();
    let out = run(fs, job, &[("TACID_TEST_STOP_AFTER", &n)]);
    let err = stderr(&out);
    match out.status.code() {
        Some(99) => {
            assert!(
                err.contains(&format!("test stop after step {step} (")),
                "{err}"
            );
            Some(err)
        }
        Some(0) => None, // the run did not reach that step
        other => panic!("{job} stopped after {step}: exit {other:?}\n{err}"),
    }
}

/// Stop `job` after `step`, which it must reach; its log.
fn must_stop(fs: &testbed::LoopFs, job: &str, step: impl Display, what: &str) -> String {
    let at = step.to_string();
    stop_after(fs, job, step).unwrap_or_else(|| panic!("{what}: step {at} was not reached"))
}

fn live_exists(fs: &testbed::LoopFs, name: &str) {
    assert!(is_dir(&fs.top().join(name)), "{name} is missing");
}

/// The steps each test below stops after first, one run per step. Together they are every
/// step the binary defines (checked by `every_step_is_a_first_stop_point`).
const RESTORE_FIRST_STOPS: [Step; 13] = Step::RESTORE;
const REFUSE_FIRST_STOPS: [Step; 4] = Step::REFUSE;
/// A leftover alone (no request), and a leftover under the swap name a request needs.
const LEFTOVER_FIRST_STOPS: [Step; 2] = Step::LEFTOVER;
const WIPE_FIRST_STOPS: [Step; 6] = Step::WIPE;
/// A wipe whose old root cannot be deleted: it is set aside.
const SET_ASIDE_FIRST_STOPS: [Step; 2] = Step::SET_ASIDE;
/// A wipe with `@root` missing copies `@root-blank` straight to `@root`: those two steps only.
const WIPE_MISSING_ROOT_FIRST_STOPS: [Step; 2] = [Step::WipeCopy, Step::WipeCommitCopy];
/// A set found with a member exchanged and another without a copy: exchanged back.
const UNDO_FIRST_STOPS: [Step; 2] = Step::UNDO;

#[test]
fn every_step_is_a_first_stop_point() {
    let mut covered: Vec<u32> = [
        &RESTORE_FIRST_STOPS[..],
        &REFUSE_FIRST_STOPS[..],
        &LEFTOVER_FIRST_STOPS[..],
        &WIPE_FIRST_STOPS[..],
        &WIPE_MISSING_ROOT_FIRST_STOPS[..],
        &SET_ASIDE_FIRST_STOPS[..],
        &UNDO_FIRST_STOPS[..],
    ]
    .concat()
    .iter()
    .map(|s| s.number())
    .collect();
    covered.sort();
    covered.dedup();
    let all: Vec<u32> = Step::ALL.iter().map(|s| s.number()).collect();
    assert_eq!(covered, all, "a step no fault run stops after first");
}

/// A restore the fault runs take through every step: how to set it up (returns the request,
/// staged) and what the machine looks like once it has happened.
struct Story {
    live: &'static str,
    set_up: fn(&testbed::LoopFs) -> RestoreRequest,
    restored: fn(&testbed::LoopFs, &RestoreRequest),
}

const HOME: Story = Story {
    live: "@home",
    set_up: |fs| {
        let request = home_story(fs);
        stage(fs, &request);
        request
    },
    restored: assert_home_restored,
};

/// `@persist` holds the mount point of the snapshot store (`.snapshots`), which the snapshot
/// does not have: the restored copy must get it (step 3), or the next boot cannot mount it.
const PERSIST: Story = Story {
    live: "@persist",
    set_up: |fs| {
        write(fs, "@persist/etc/machine-id", "0123");
        assert!(!exists(fs, "@persist/.snapshots"));
        let request = snapshot(fs, "@persist", 2);
        write(fs, "@persist/etc/machine-id", "4567");
        write(fs, "@persist/var/lost", "written after the snapshot");
        stage(fs, &request);
        request
    },
    restored: |fs, request| {
        assert_eq!(read(fs, "@persist/etc/machine-id"), "0123");
        assert!(!exists(fs, "@persist/var/lost"));
        let rel = layout::SNAPSHOTS_MOUNT_POINT
            .strip_prefix("/persist/")
            .expect("under /persist");
        let meta = std::fs::symlink_metadata(fs.top().join("@persist").join(rel))
            .expect("the .snapshots mount point in the new @persist");
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(parent_uuid_of(fs, "@persist"), Some(only(request).uuid()));
        assert!(!request_path(fs).exists(), "the request is removed");
        assert!(swap_names(fs).is_empty(), "left over: {:?}", swap_names(fs));
        let o = outcome(fs);
        assert_eq!(o.result, OutcomeResult::Done, "{o}");
        assert_eq!(o.request.as_ref(), Some(request));
    },
};

/// After the recovery, nothing happens a second time: what was written since is kept and no
/// subvolume changes.
fn assert_not_again(fs: &testbed::LoopFs, live: &str, what: &str) {
    let after = format!("{live}/written-after-the-restore");
    write(fs, &after, "kept");
    let before = fs.subvolumes_snapshot().expect("list");
    let o = outcome(fs);
    let log = run_ok(fs, "restore-data");
    assert!(log.contains("no restore is staged"), "{what}: {log}");
    assert_eq!(read(fs, &after), "kept", "{what}: {log}");
    assert_eq!(fs.subvolumes_snapshot().expect("list"), before, "{what}");
    assert_eq!(outcome(fs), o, "{what}: the outcome is not rewritten");
}

fn restore_stopped_after_any_step(story: &Story) {
    for step in RESTORE_FIRST_STOPS {
        let Some(mut fs) = machine() else { return };
        let request = (story.set_up)(&fs);
        must_stop(&fs, "restore-data", step.number(), story.live);
        live_exists(&fs, story.live);
        fs.remount().expect("remount");
        live_exists(&fs, story.live);
        // A second stop during the recovery, at the first step it takes (which also says
        // where the recovery picks up: a copy is exchanged, an exchange finished, ...).
        let again = match step.number() {
            1..=3 => Some(3),
            // Exchanged: the recovery keeps what was replaced first.
            4 | 5 => Some(29),
            // Kept (found again, not kept twice): the outcome.
            29 | 30 | 6 | 27 => Some(6),
            7 | 8 => Some(14),
            _ => None,
        };
        if let Some(n) = again {
            must_stop(
                &fs,
                "restore-data",
                n,
                &format!("{}: the recovery after {step}", story.live),
            );
            live_exists(&fs, story.live);
        }
        let what = format!("{}: after {step}, then {again:?}", story.live);
        run_ok(&fs, "restore-data");
        (story.restored)(&fs, &request);
        fs.remount().expect("remount");
        (story.restored)(&fs, &request);
        assert_not_again(&fs, story.live, &what);
    }
}

#[test]
fn loop_a_restore_stopped_after_any_step_completes_once() {
    restore_stopped_after_any_step(&HOME);
}

#[test]
fn loop_a_restore_of_persist_stopped_after_any_step_completes_once_with_its_mount_point() {
    restore_stopped_after_any_step(&PERSIST);
}

/// A subvolume left under a swap name by an abandoned run, with a nested subvolume in it
/// (deleted first), as a plain subvolume: no parent, so it is no copy of any request.
fn leave_over(fs: &testbed::LoopFs, live: &str) {
    let swap = format!("{live}.tacid-swap");
    sh("btrfs", &["-q", "subvolume", "create", &path(fs, &swap)]);
    write(fs, &format!("{swap}/old/file"), "abandoned");
    sh(
        "btrfs",
        &[
            "-q",
            "subvolume",
            "create",
            &path(fs, &format!("{swap}/old/nested")),
        ],
    );
}

#[test]
fn loop_deleting_leftovers_stopped_after_any_step_completes() {
    for step in LEFTOVER_FIRST_STOPS {
        let Some(mut fs) = machine() else { return };
        write(&fs, "@home/alice/kept", "live data");
        write(&fs, "@log/journal", "live log");
        let before = fs.subvolumes_snapshot().expect("list");
        // Two leftovers and no request: each is deleted in turn.
        leave_over(&fs, "@home");
        leave_over(&fs, "@log");
        must_stop(&fs, "restore-data", step.number(), "leftovers");
        live_exists(&fs, "@home");
        live_exists(&fs, "@log");
        fs.remount().expect("remount");
        // The recovery deletes the other leftover: it takes step 14 first.
        must_stop(
            &fs,
            "restore-data",
            Step::DeleteStale.number(),
            &format!("the recovery after {step}"),
        );
        live_exists(&fs, "@home");
        live_exists(&fs, "@log");
        let log = run_ok(&fs, "restore-data");
        assert!(log.contains("no restore is staged"), "{log}");
        assert!(
            swap_names(&fs).is_empty(),
            "after {step}: {:?}",
            swap_names(&fs)
        );
        assert_eq!(
            fs.subvolumes_snapshot().expect("list"),
            before,
            "after {step}"
        );
        assert_eq!(read(&fs, "@home/alice/kept"), "live data");
        assert_eq!(read(&fs, "@log/journal"), "live log");
        assert!(
            !exists(
                &fs,
                &format!(
                    "{}/{}",
                    layout::SNAPSHOTS_SUBVOLUME,
                    layout::OUTCOME_FILE_NAME
                )
            ),
            "no request, no outcome"
        );
    }
}

#[test]
fn loop_a_restore_with_a_leftover_under_its_swap_name_stopped_after_any_step_completes_once() {
    for step in LEFTOVER_FIRST_STOPS {
        let Some(mut fs) = machine() else { return };
        let request = home_story(&fs);
        leave_over(&fs, "@home");
        stage(&fs, &request);
        let log = must_stop(&fs, "restore-data", step.number(), "leftover, then restore");
        assert!(log.contains("a leftover from an abandoned swap"), "{log}");
        live_exists(&fs, "@home");
        fs.remount().expect("remount");
        // The recovery goes on with the request: its copy first.
        must_stop(
            &fs,
            "restore-data",
            Step::RestoreCopy.number(),
            &format!("the recovery after {step}"),
        );
        live_exists(&fs, "@home");
        run_ok(&fs, "restore-data");
        assert_home_restored(&fs, &request);
        fs.remount().expect("remount");
        assert_home_restored(&fs, &request);
        assert_not_again(&fs, "@home", &format!("after {step}"));
    }
}

#[test]
fn loop_a_refusal_stopped_after_any_step_completes() {
    for step in REFUSE_FIRST_STOPS {
        let Some(fs) = machine() else { return };
        stage_bytes(&fs, b"@home nonsense\n");
        let before = fs.subvolumes_snapshot().expect("list");
        must_stop(&fs, "restore-data", step.number(), "refusal");
        run_ok(&fs, "restore-data");
        assert_eq!(fs.subvolumes_snapshot().expect("list"), before);
        assert_eq!(outcome(&fs).result, OutcomeResult::Refused);
        assert!(request_path(&fs).symlink_metadata().is_err());
        assert_eq!(store_temps(&fs), Vec::<String>::new(), "after {step}");
    }
}

#[test]
fn loop_a_wipe_stopped_after_any_step_completes() {
    for step in WIPE_FIRST_STOPS {
        let Some(fs) = machine() else { return };
        write(&fs, "@root/etc/hostname", "old");
        sh(
            "btrfs",
            &["-q", "subvolume", "create", &path(&fs, "@root/nested")],
        );
        must_stop(&fs, "wipe-root", step.number(), "wipe");
        live_exists(&fs, "@root");
        let again = match step.number() {
            21 | 22 => 23,
            23 | 24 => 25,
            _ => 21,
        };
        must_stop(
            &fs,
            "wipe-root",
            again,
            &format!("wipe: the recovery after {step}"),
        );
        live_exists(&fs, "@root");
        run_ok(&fs, "wipe-root");
        assert_root_is_fresh(&fs, &format!("after {step}, {again:?}"));
    }
}

/// A wipe converged: `@root` is empty, made from `@root-blank`, and nothing is left under a
/// swap name.
#[test]
fn loop_a_wipe_with_root_missing_stopped_after_any_step_completes() {
    for step in WIPE_MISSING_ROOT_FIRST_STOPS {
        let Some(mut fs) = machine() else { return };
        let before = fs.subvolumes_snapshot().expect("list");
        sh("btrfs", &["-q", "subvolume", "delete", &path(&fs, "@root")]);
        let log = must_stop(&fs, "wipe-root", step.number(), "wipe, @root missing");
        assert!(log.contains("@root is missing"), "{log}");
        // Made straight under the live name at step 21: from then on it exists.
        live_exists(&fs, "@root");
        assert!(swap_names(&fs).is_empty(), "{:?}", swap_names(&fs));
        fs.remount().expect("remount");
        live_exists(&fs, "@root");
        // The next boot does not know that @root is fresh (the boot may have written to it):
        // it wipes it as usual, starting with the copy.
        must_stop(
            &fs,
            "wipe-root",
            Step::WipeCopy.number(),
            &format!("wipe: the recovery after {step}"),
        );
        live_exists(&fs, "@root");
        let log = run_ok(&fs, "wipe-root");
        assert!(!log.contains("@root is missing"), "{log}");
        assert_root_is_fresh(&fs, &format!("after {step}"));
        // Only @root is new: the same layout names, every other subvolume as it was.
        let after = fs.subvolumes_snapshot().expect("list");
        let names =
            |l: &[(String, u64, String)]| l.iter().map(|(p, _, _)| p.clone()).collect::<Vec<_>>();
        assert_eq!(names(&after), names(&before));
        let others = |l: &[(String, u64, String)]| {
            l.iter()
                .filter(|(p, _, _)| p != "@root")
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(others(&after), others(&before));
    }
}

/// Run `restore-data` with the kernel command line `cmdline` (TACID_TEST_CMDLINE) and read
/// its log until a line starting with `pause_line` (or the end): the running process and the
/// lines seen, the last one that line.
fn run_to_pause(
    fs: &testbed::LoopFs,
    cmdline: &str,
    pause_line: &str,
) -> (std::process::Child, Vec<String>) {
    use std::io::{BufRead as _, BufReader};
    use std::process::{Command, Stdio};

    let mut child = Command::new(BIN)
        .args(["restore-data", "--top", &path(fs, "")])
        .arg(format!("--hard-floor-bytes={LOOP_HARD_FLOOR}"))
        .env("TACID_TEST_CMDLINE", cmdline)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.starts_with(pause_line) {
            break;
        }
    }
    (child, seen)
}

/// The process is still waiting at its pause a moment later; then it is killed (as the boot
/// tier cuts the power).
fn kill_at_pause(mut child: std::process::Child) {
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(child.try_wait().unwrap(), None, "it waits at the pause");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `tacid.test_pause_after=N`: the process says so and waits (here killed, as the boot tier
/// cuts the power); the next run finishes. The command line comes from TACID_TEST_CMDLINE.
#[test]
fn loop_a_pause_at_a_step_announces_itself_and_waits() {
    let Some(fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    let (child, seen) = run_to_pause(
        &fs,
        "quiet tacid.test_pause_after=4",
        "tacid-initrd: test pause after step 4 (",
    );
    assert!(
        seen.last()
            .is_some_and(|l| l.contains("test pause after step 4 (restore: exchange the names)")),
        "{seen:#?}"
    );
    kill_at_pause(child);
    live_exists(&fs, "@home");
    run_ok(&fs, "restore-data");
    assert_home_restored(&fs, &request);
}

#[test]
fn loop_setting_aside_a_root_that_cannot_be_deleted_stopped_after_any_step_completes() {
    for step in SET_ASIDE_FIRST_STOPS {
        let Some(mut fs) = machine() else { return };
        // No user can make this (it needs CAP_LINUX_IMMUTABLE); Btrfs then refuses to
        // delete the subvolume, which is what setting aside is for.
        sh(
            "btrfs",
            &["-q", "subvolume", "create", &path(&fs, "@root/box")],
        );
        sh("chattr", &["+i", &path(&fs, "@root/box")]);
        must_stop(&fs, "wipe-root", step.number(), "setting aside");
        fs.remount().expect("remount");
        let out = run(&fs, "wipe-root", &[]);
        let log = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "after {step}: left behind\n{log}"
        );
        assert!(log.contains("@root.tacid-stuck"), "after {step}: {log}");
        assert_root_is_a_blank_copy(&fs, &format!("after {step}"));
        assert_eq!(swap_names(&fs), ["@root.tacid-stuck"], "after {step}");
        sh("chattr", &["-i", &path(&fs, "@root.tacid-stuck/box")]);
        run_ok(&fs, "wipe-root");
        assert_root_is_fresh(&fs, &format!("after {step}, set aside and deleted"));
    }
}

const SET: [&str; 3] = ["@persist", "@log", "@home"];

/// After a set's recovery, nothing happens a second time: what was written to each member
/// since is kept, no subvolume changes, the outcome stays.
fn assert_set_not_again(fs: &testbed::LoopFs, what: &str) {
    for sub in SET {
        write(fs, &format!("{sub}/written-after-the-restore"), sub);
    }
    let before = fs.subvolumes_snapshot().expect("list");
    let o = outcome(fs);
    let log = run_ok(fs, "restore-data");
    assert!(log.contains("no restore is staged"), "{what}: {log}");
    for sub in SET {
        assert_eq!(
            read(fs, &format!("{sub}/written-after-the-restore")),
            sub,
            "{what}: {sub} restored twice"
        );
    }
    assert_eq!(fs.subvolumes_snapshot().expect("list"), before, "{what}");
    assert_eq!(outcome(fs), o, "{what}: the outcome is not rewritten");
}

/// Where a recovery after a stop at `step`'s `k`-th occurrence (in a set of three) is
/// stopped again: at an exchange it makes (the second, `4.2`, when it makes two or more), at
/// the outcome it writes again, or at a leftover it deletes; `None` when nothing is left
/// that it stops at.
fn set_second_stop(step: Step, k: u32) -> Option<&'static str> {
    let exchanges_left = |left: u32| match left {
        0 => "29.2", // every member is exchanged: it keeps all three replaced ones
        1 => "4",
        _ => "4.2",
    };
    let keeps_left = |left: u32| match left {
        0 => "6",
        1 => "29",
        _ => "29.2",
    };
    match step {
        Step::RestoreCopy | Step::RestoreCommitCopy => Some("4.2"),
        Step::RestorePrepare => Some(exchanges_left(3 - k + 1)),
        Step::RestoreExchange | Step::RestoreCommitExchange => Some(exchanges_left(3 - k)),
        // A kept one is found again, never kept twice: the recovery keeps only the rest.
        Step::RestoreKeep | Step::RestoreCommitKeep => Some(keeps_left(3 - k)),
        Step::RestoreOutcomeTemp | Step::RestoreOutcome => Some("6"),
        // The request is gone (a stopped process keeps what it wrote): no request, leftovers.
        Step::RestoreRemoveRequest | Step::RestoreCommitRequest => Some("14"),
        Step::RestoreDeleteOld | Step::RestoreCommitDelete if k < 3 => Some("14"),
        _ => None,
    }
}

/// A restore of @persist, @log and @home together, stopped after every occurrence of every
/// step it takes (31 stops), then stopped once more during the recovery, then run to the
/// end: every member is its snapshot's copy with the snapshot's data, put back once, and
/// the outcome names all three.
#[test]
fn loop_a_set_of_three_stopped_after_any_step_occurrence_completes_once() {
    let sequence = Step::restore_sequence(3);
    assert_eq!(sequence.len(), 31);
    let started = Instant::now();
    let mut slowest = (Duration::ZERO, String::new());
    for (step, k) in sequence {
        let at = StepAt::new(step, k);
        let one = Instant::now();
        let Some(mut fs) = machine() else { return };
        let request = set_story(&fs, 300);
        stage(&fs, &request);
        let log = must_stop(&fs, "restore-data", at, "a set of three");
        assert!(
            log.contains("a restore of 3 subvolumes is staged"),
            "{at}: {log}"
        );
        SET.iter().for_each(|sub| live_exists(&fs, sub));
        fs.remount().expect("remount");
        SET.iter().for_each(|sub| live_exists(&fs, sub));
        let again = set_second_stop(step, k);
        if let Some(n) = again {
            must_stop(
                &fs,
                "restore-data",
                n,
                &format!("a set of three: the recovery after step {at}"),
            );
            SET.iter().for_each(|sub| live_exists(&fs, sub));
        }
        let what = format!("a set of three: after step {at}, then {again:?}");
        let log = run_ok(&fs, "restore-data");
        assert_set_restored(&fs, &request);
        if step.number() < Step::RestoreRemoveRequest.number() {
            assert!(
                log.contains("restore-data: done: @persist is back to @persist."),
                "{what}: {log}"
            );
        }
        fs.remount().expect("remount");
        assert_set_restored(&fs, &request);
        assert_set_not_again(&fs, &what);
        let took = one.elapsed();
        if took > slowest.0 {
            slowest = (took, at.to_string());
        }
    }
    eprintln!(
        "a set of three, stopped after each of 24 step occurrences: {:.1} s in all, the slowest \
         stop {} ({:.1} s)",
        started.elapsed().as_secs_f64(),
        slowest.1,
        slowest.0.as_secs_f64()
    );
}

/// A set of @persist and @home found with @persist exchanged and @home without a copy
/// (which the steps never leave; made here by hand), stopped after exchanging @persist back
/// (18) and after its commit (19). The next run finds no member exchanged, so it starts the
/// set over: checks both, copies @home, exchanges both. All or none, either way; only a run
/// that is not cut short refuses (`loop_restore`).
#[test]
fn loop_a_half_exchanged_set_exchanged_back_stopped_after_any_step_converges_whole() {
    for step in UNDO_FIRST_STOPS {
        let Some(mut fs) = machine() else { return };
        let request = half_exchanged_set(&fs, 400);
        let log = must_stop(&fs, "restore-data", step.number(), "exchanging back");
        assert!(
            log.contains("exchanging @persist and @persist.tacid-swap back"),
            "{log}"
        );
        live_exists(&fs, "@persist");
        live_exists(&fs, "@home");
        fs.remount().expect("remount");
        let log = run_ok(&fs, "restore-data");
        assert!(
            log.contains("copying snapshot @home."),
            "after {step}: {log}"
        );
        for m in request.members() {
            let sub = m.subvolume().as_str();
            assert_eq!(read(&fs, &format!("{sub}/kept")), format!("{sub} then"));
            assert_eq!(parent_uuid_of(&fs, sub), Some(m.uuid()), "{sub}");
        }
        assert!(swap_names(&fs).is_empty(), "{:?}", swap_names(&fs));
        let o = outcome(&fs);
        assert_eq!(o.result, OutcomeResult::Done, "{o}");
        assert_eq!(o.request.as_ref(), Some(&request));
    }
}

/// `tacid.test_pause_after=N.k` pauses at the k-th occurrence and says `step N.k (name)`,
/// which the boot tier's parser never takes for step N; the next run finishes the set.
#[test]
fn loop_a_pause_at_a_later_occurrence_names_it() {
    let Some(fs) = machine() else { return };
    let request = set_story(&fs, 300);
    stage(&fs, &request);
    let (child, seen) = run_to_pause(
        &fs,
        "quiet tacid.test_pause_after=4.2",
        "tacid-initrd: test pause after step ",
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("tacid-initrd: test pause after step 4.2 (restore: exchange the names)"),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| l == "tacid-initrd: done step 4 (restore: exchange the names)"),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| l == "tacid-initrd: exchanging @log and @log.tacid-swap"),
        "{seen:#?}"
    );
    kill_at_pause(child);
    SET.iter().for_each(|sub| live_exists(&fs, sub));
    run_ok(&fs, "restore-data");
    assert_set_restored(&fs, &request);
}

/// A run that stopped after the copy (an I/O error lets the boot go on, adr/0007) leaves a
/// machine on which the stem snapshots the still-live @home, and people write on. Those
/// snapshots are read-only children of what the restore will replace, made after the copy:
/// the next boot must still keep what @home held at that boot, not take one of them for its
/// own kept snapshot (a real Btrfs's generations tell them apart).
#[test]
fn loop_a_snapshot_taken_while_the_copy_waited_is_not_taken_for_the_kept_one() {
    let Some(fs) = machine() else { return };
    let request = snapshot(&fs, "@home", 1);
    stage(&fs, &request);
    must_stop(
        &fs,
        "restore-data",
        Step::RestoreCommitCopy.number(),
        "@home",
    );
    // The booted machine: written to, snapshotted by the timeline, written to again.
    write(&fs, "@home/before-the-timeline", "1");
    let timeline = snapshot_name("@home", 500).to_string();
    snapshot_as(&fs, "@home", &timeline, false);
    write(&fs, "@home/after-the-timeline", "2");
    sh("sync", &[]);
    // The next boot finishes the restore and keeps what @home held at that boot.
    run_ok(&fs, "restore-data");
    let o = outcome(&fs);
    let kept = o.replaced[0]
        .kept
        .unwrap_or_else(|| panic!("not kept: {o}"))
        .to_string();
    assert_ne!(
        kept, timeline,
        "the timeline's snapshot was taken for the kept one: {o}"
    );
    assert_eq!(
        read(
            &fs,
            &format!("{}/{kept}/after-the-timeline", layout::SNAPSHOTS_SUBVOLUME)
        ),
        "2",
        "what @home held at the boot is kept"
    );
    assert!(!exists(&fs, "@home/after-the-timeline"), "@home put back");
}
