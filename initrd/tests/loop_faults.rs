//! The test-only fault switch against a real loop-device Btrfs: the real binary stops right
//! after step N (exit 99), and the next run converges — for every step, and with a second
//! stop during the recovery run. Needs `--features test-hooks` (this target requires it).
//!
//! A stopped process is not a power cut (the page cache survives it); the boot tier does real
//! power cuts, the model in `src/model.rs` every prefix of uncommitted work. This proves the
//! binary reads its state back from the disk and finishes from each step.
#![allow(clippy::unwrap_used)] // a panic is how a test reports

mod common;

use common::*;
use initrd::steps::Step;
use layout::OutcomeResult;

fn stop_after(fs: &testbed::LoopFs, job: &str, step: u32) -> bool {
    let n = step.to_string();
    let out = run(fs, job, &[("TACID_TEST_STOP_AFTER", &n)]);
    let err = stderr(&out);
    match out.status.code() {
        Some(99) => {
            assert!(
                err.contains(&format!("test stop after step {step} (")),
                "{err}"
            );
            true
        }
        Some(0) => false, // the run did not reach that step
        other => panic!("{job} stopped after {step}: exit {other:?}\n{err}"),
    }
}

fn live_exists(fs: &testbed::LoopFs, name: &str) {
    assert!(is_dir(&fs.top().join(name)), "{name} is missing");
}

#[test]
fn loop_a_restore_stopped_after_any_step_completes_once() {
    for step in Step::RESTORE {
        let Some(mut fs) = machine() else { return };
        let request = home_story(&fs);
        stage(&fs, &request);
        assert!(
            stop_after(&fs, "restore-data", step.number()),
            "{step} was not reached"
        );
        live_exists(&fs, "@home");
        fs.remount().expect("remount");
        // A second stop during the recovery, at the first step it takes (which also says
        // where the recovery picks up: a copy is exchanged, an exchange finished, ...).
        let again = match step.number() {
            1..=3 => Some(3),
            4..=6 => Some(6),
            7 | 8 => Some(14),
            _ => None,
        };
        if let Some(n) = again {
            assert!(
                stop_after(&fs, "restore-data", n),
                "after {step} the recovery did not take step {n}"
            );
            live_exists(&fs, "@home");
        }
        live_exists(&fs, "@home");
        let log = run_ok(&fs, "restore-data");
        assert_home_restored(&fs, &request);
        fs.remount().expect("remount");
        assert_home_restored(&fs, &request);
        // Nothing happens a second time.
        write(&fs, "@home/alice/after", "kept");
        let before = fs.subvolumes_snapshot().expect("list");
        run_ok(&fs, "restore-data");
        assert_eq!(
            read(&fs, "@home/alice/after"),
            "kept",
            "after {step}, then {again:?}: {log}"
        );
        assert_eq!(fs.subvolumes_snapshot().expect("list"), before);
    }
}

#[test]
fn loop_a_refusal_stopped_after_any_step_completes() {
    for step in Step::REFUSE {
        let Some(fs) = machine() else { return };
        stage_bytes(&fs, b"@home nonsense\n");
        let before = fs.subvolumes_snapshot().expect("list");
        assert!(
            stop_after(&fs, "restore-data", step.number()),
            "{step} was not reached"
        );
        run_ok(&fs, "restore-data");
        assert_eq!(fs.subvolumes_snapshot().expect("list"), before);
        assert_eq!(outcome(&fs).result, OutcomeResult::Refused);
        assert!(request_path(&fs).symlink_metadata().is_err());
    }
}

#[test]
fn loop_a_wipe_stopped_after_any_step_completes() {
    for step in Step::WIPE {
        let Some(fs) = machine() else { return };
        write(&fs, "@root/etc/hostname", "old");
        sh(
            "btrfs",
            &["-q", "subvolume", "create", &path(&fs, "@root/nested")],
        );
        assert!(
            stop_after(&fs, "wipe-root", step.number()),
            "{step} was not reached"
        );
        live_exists(&fs, "@root");
        let again = match step.number() {
            21 | 22 => 23,
            23 | 24 => 25,
            _ => 21,
        };
        assert!(
            stop_after(&fs, "wipe-root", again),
            "after {step} the recovery did not take step {again}"
        );
        live_exists(&fs, "@root");
        run_ok(&fs, "wipe-root");
        assert_eq!(
            std::fs::read_dir(fs.top().join("@root")).unwrap().count(),
            0,
            "after {step}, {again:?}"
        );
        assert!(swap_names(&fs).is_empty());
        assert_eq!(
            parent_uuid_of(&fs, "@root"),
            Some(uuid_of(&fs, layout::ROOT_BLANK_SUBVOLUME))
        );
    }
}

/// `tacid.test_pause_after=N`: the process says so and waits (here killed, as the boot tier
/// cuts the power); the next run finishes. The command line comes from TACID_TEST_CMDLINE.
#[test]
fn loop_a_pause_at_a_step_announces_itself_and_waits() {
    use std::io::{BufRead as _, BufReader};
    use std::process::{Command, Stdio};

    let Some(fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    let mut child = Command::new(BIN)
        .args(["restore-data", "--top", &path(&fs, "")])
        .env("TACID_TEST_CMDLINE", "quiet tacid.test_pause_after=4")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.starts_with("tacid-initrd: test pause after step 4 (") {
            break;
        }
    }
    assert!(
        seen.last()
            .is_some_and(|l| l.contains("test pause after step 4 (restore: exchange the names)")),
        "{seen:#?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(child.try_wait().unwrap(), None, "it waits at the pause");
    child.kill().unwrap();
    child.wait().unwrap();
    live_exists(&fs, "@home");
    run_ok(&fs, "restore-data");
    assert_home_restored(&fs, &request);
}
