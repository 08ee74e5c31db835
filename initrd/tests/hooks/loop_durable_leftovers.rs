//! A power cut after the outcome's temporary file reached the disk and before its rename
//! leaves that file (`@snapshots/.tmp.<pid>.<n>`). In an initrd the pid repeats boot after
//! boot, and the counter starts at 0 in every process, so the next boot's `tacid-initrd`
//! reaches the very same name for its own outcome. Here every run is pid 1 of a new pid
//! namespace (`unshare --pid --fork`), as in an initrd: the same pid every time.
//!
//! Each test first plants the file a cut-short run leaves under the name the next run takes
//! (`.tmp.1.0`) and runs once: the request must be honoured or refused, and reported. Then,
//! on a new machine, the real state: the run stopped right after the temporary file was
//! synced (step 27 or 28), the filesystem remounted, the next run at the same pid.
//! Needs `--features test-hooks` (this target requires it).
#![allow(clippy::unwrap_used)] // a panic is how a test reports

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Output};
use std::time::SystemTime;

use crate::common::*;
use initrd::steps::Step;
use layout::{Outcome, OutcomeResult, Reason, RestoreRequest, SNAPSHOTS_SUBVOLUME};

/// The temporary name of the first durable write of pid 1: the outcome's, in every run.
const NEXT_TEMP: &str = ".tmp.1.0";

/// Run `tacid-initrd JOB --top <top>` as pid 1 of a new pid namespace, with extra
/// environment.
fn run_at_pid_1(fs: &testbed::LoopFs, job: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", BIN, job, "--top", &path(fs, "")]);
    cmd.arg(format!("--hard-floor-bytes={LOOP_HARD_FLOOR}"));
    cmd.env_remove("TACID_TEST_STOP_AFTER");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .expect("run tacid-initrd under unshare --pid --fork")
}

/// Run at pid 1 to the end; exit 0 required. Its log.
fn finish_at_pid_1(fs: &testbed::LoopFs, what: &str) -> String {
    let out = run_at_pid_1(fs, "restore-data", &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{what}: the run failed:\n{err}");
    err
}

/// The file a run cut short between its temp and its rename leaves: root's, mode 0600,
/// holding the outcome it was writing.
fn plant_leftover(fs: &testbed::LoopFs, outcome: &Outcome) {
    let p = fs.top().join(SNAPSHOTS_SUBVOLUME).join(NEXT_TEMP);
    std::fs::write(&p, outcome.render()).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn leftover_outcome(result: OutcomeResult, request: Option<&RestoreRequest>) -> Outcome {
    Outcome::new(
        result,
        SystemTime::now(),
        request.cloned(),
        Reason::new("written by the run that was cut short"),
    )
}

/// Stop the run at pid 1 right after the outcome's temporary file is synced: the exact
/// state a power cut there leaves (the file durable, the rename not done). Then the cut: a
/// remount.
fn cut_after_the_temp(fs: &mut testbed::LoopFs, step: Step, result: OutcomeResult) {
    let out = run_at_pid_1(
        fs,
        "restore-data",
        &[("TACID_TEST_STOP_AFTER", &step.number().to_string())],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(99), "no stop after {step}:\n{err}");
    assert_eq!(store_temps(fs), [NEXT_TEMP], "the temp a pid-1 run leaves");
    fs.remount().expect("remount");
    assert_eq!(store_temps(fs), [NEXT_TEMP], "the temp is durable");
    let bytes = std::fs::read(fs.top().join(SNAPSHOTS_SUBVOLUME).join(NEXT_TEMP)).unwrap();
    assert_eq!(Outcome::parse(&bytes).expect("an outcome").result, result);
}

/// The run after the leftover: it said it removed it, and it is gone.
fn assert_leftover_removed(fs: &testbed::LoopFs, log: &str) {
    assert!(
        log.contains(&format!("removed {SNAPSHOTS_SUBVOLUME}/{NEXT_TEMP}")),
        "{log}"
    );
    assert_eq!(store_temps(fs), Vec::<String>::new());
}

/// The boot after: nothing staged, nothing done again, the outcome as it was.
fn assert_nothing_again(fs: &testbed::LoopFs, what: &str) {
    let before = fs.subvolumes_snapshot().expect("list");
    let o = outcome(fs);
    let log = finish_at_pid_1(fs, what);
    assert!(log.contains("no restore is staged"), "{what}: {log}");
    assert_eq!(fs.subvolumes_snapshot().expect("list"), before, "{what}");
    assert_eq!(outcome(fs), o, "{what}: the outcome is not rewritten");
}

#[test]
fn loop_a_leftover_outcome_temp_at_the_next_runs_name_never_blocks_a_restore() {
    let Some(fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    plant_leftover(&fs, &leftover_outcome(OutcomeResult::Done, Some(&request)));
    let log = finish_at_pid_1(&fs, "planted");
    assert_home_restored(&fs, &request);
    assert_leftover_removed(&fs, &log);
    assert_nothing_again(&fs, "planted");

    let Some(mut fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    cut_after_the_temp(&mut fs, Step::RestoreOutcomeTemp, OutcomeResult::Done);
    let log = finish_at_pid_1(&fs, "cut");
    assert_home_restored(&fs, &request);
    assert_leftover_removed(&fs, &log);
    assert_nothing_again(&fs, "cut");
}

#[test]
fn loop_a_leftover_outcome_temp_at_the_next_runs_name_never_blocks_a_set() {
    let Some(fs) = machine() else { return };
    let request = set_story(&fs, 300);
    stage(&fs, &request);
    plant_leftover(&fs, &leftover_outcome(OutcomeResult::Done, Some(&request)));
    let log = finish_at_pid_1(&fs, "planted");
    // The outcome reports, the request is gone and the replaced subvolumes are deleted.
    assert_set_restored(&fs, &request);
    assert_leftover_removed(&fs, &log);
    assert_nothing_again(&fs, "planted");

    let Some(mut fs) = machine() else { return };
    let request = set_story(&fs, 300);
    stage(&fs, &request);
    cut_after_the_temp(&mut fs, Step::RestoreOutcomeTemp, OutcomeResult::Done);
    let log = finish_at_pid_1(&fs, "cut");
    assert_set_restored(&fs, &request);
    assert_leftover_removed(&fs, &log);
    assert_nothing_again(&fs, "cut");
}

/// A request whose UUID is not its snapshot's: refused, reported, moved aside, once.
fn assert_refused_once(fs: &testbed::LoopFs, bad: &[u8], log: &str, what: &str) {
    assert!(log.contains("restore-data: refused:"), "{what}: {log}");
    assert_eq!(outcome(fs).result, OutcomeResult::Refused, "{what}");
    assert!(
        !request_path(fs).exists(),
        "{what}: the request is still staged"
    );
    let aside = fs
        .top()
        .join(SNAPSHOTS_SUBVOLUME)
        .join(layout::REFUSED_REQUEST_FILE_NAME);
    assert_eq!(std::fs::read(aside).ok().as_deref(), Some(bad), "{what}");
    assert_leftover_removed(fs, log);
    assert_nothing_again(fs, what);
}

fn stage_a_bad_request(fs: &testbed::LoopFs) -> Vec<u8> {
    let good = only(&home_story(fs));
    let other = uuid::Uuid::from_u128(good.uuid().as_u128() ^ 1);
    let bad = RestoreRequest::one(good.subvolume(), good.snapshot(), other).expect("well-formed");
    let bytes = bad.render().into_bytes();
    stage_bytes(fs, &bytes);
    bytes
}

#[test]
fn loop_a_leftover_outcome_temp_at_the_next_runs_name_never_blocks_a_refusal() {
    let Some(fs) = machine() else { return };
    let bad = stage_a_bad_request(&fs);
    let staged = fs.subvolumes_snapshot().expect("list");
    plant_leftover(&fs, &leftover_outcome(OutcomeResult::Refused, None));
    let log = finish_at_pid_1(&fs, "planted");
    assert_eq!(fs.subvolumes_snapshot().expect("list"), staged);
    assert_refused_once(&fs, &bad, &log, "planted");

    let Some(mut fs) = machine() else { return };
    let bad = stage_a_bad_request(&fs);
    let staged = fs.subvolumes_snapshot().expect("list");
    cut_after_the_temp(&mut fs, Step::RefuseOutcomeTemp, OutcomeResult::Refused);
    let log = finish_at_pid_1(&fs, "cut");
    assert_eq!(fs.subvolumes_snapshot().expect("list"), staged);
    assert_refused_once(&fs, &bad, &log, "cut");
}

/// What is not a leftover temporary file is left alone, whatever its name: a symlink under
/// the next run's temporary name (its target untouched), a directory, names of another
/// form. The run still writes its outcome.
#[test]
fn loop_only_regular_files_of_durable_writes_are_removed() {
    let Some(fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    let store = fs.top().join(SNAPSHOTS_SUBVOLUME);
    write(&fs, "@persist/target", "must stay");
    std::os::unix::fs::symlink(fs.top().join("@persist/target"), store.join(NEXT_TEMP)).unwrap();
    std::fs::create_dir(store.join(".tmp.1.1")).unwrap();
    std::fs::write(store.join(".tmp.1.2"), "a leftover").unwrap();
    std::fs::write(store.join(".tmp.notours"), "kept").unwrap();
    let log = finish_at_pid_1(&fs, "hostile names");
    assert_eq!(read(&fs, "@persist/target"), "must stay");
    assert!(log.contains("removed @snapshots/.tmp.1.2"), "{log}");
    assert_eq!(store_temps(&fs), [NEXT_TEMP, ".tmp.1.1", ".tmp.notours"]);
    assert!(store
        .join(NEXT_TEMP)
        .symlink_metadata()
        .unwrap()
        .is_symlink());
    let o = outcome(&fs);
    assert_eq!(o.result, OutcomeResult::Done, "{o}");
    assert_eq!(o.request.as_ref(), Some(&request));
}
