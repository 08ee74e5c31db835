//! Hibernation and the real binary on a real loop-device Btrfs: a resume that is configured
//! but was not attempted before the unit changes nothing (the request waits for a normal
//! boot); a boot after a resume attempt that found no image, or with `noresume`, or on a
//! kernel without hibernation, restores (adr/0007, `src/resume.rs`).
//!
//! The binary runs as the unit does, without `--top` (the check applies only then): it mounts
//! the device itself under /run/tacid-initrd. Every input of the check is injected, which only
//! test builds honour (this target requires `--features test-hooks`): the kernel command line
//! (`TACID_TEST_CMDLINE`), `/sys/power/resume` (`TACID_TEST_SYS_POWER_RESUME`) and systemd's
//! `HibernateLocation` EFI variable (`TACID_TEST_EFI_HIBERNATE_LOCATION`). That a build for
//! users ignores them is checked in `loop_restore.rs`.
#![allow(clippy::unwrap_used)] // a panic is how a test reports

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::process::Command;

use crate::common::*;
use layout::{OutcomeResult, RestoreRequest};
use testbed::LoopFs;

/// Without `--top` the binary mounts at /run/tacid-initrd/<job>, one path for every test
/// and every test process (loop_restore and loop_resume): they take turns.
const MOUNT_DIR: &str = "initrd-mount-dir";

/// What the initrd sees about hibernation at one boot.
struct Boot<'a> {
    cmdline: &'a str,
    /// The contents of /sys/power/resume; `None`: a kernel without hibernation (no file).
    sys_power_resume: Option<&'a str>,
    /// systemd's HibernateLocation EFI variable exists.
    efi_variable: bool,
}

/// Hibernation configured on the command line, and no resume attempted (yet).
const UNATTEMPTED: Boot<'static> = Boot {
    cmdline: "root=LABEL=tacid resume=/dev/vda3 quiet",
    sys_power_resume: Some("0:0\n"),
    efi_variable: false,
};

/// Boot the job as the unit runs it (no `--top`; the binary mounts the loop device itself),
/// with the filesystem unmounted meanwhile as at boot. Every line must carry the prefix.
fn boot(fs: &mut LoopFs, job: &str, b: &Boot) -> (Option<i32>, String) {
    let sys = fs.scratch().join("sys-power-resume");
    let efi = fs.scratch().join("HibernateLocation-efivar");
    let _ = fs::remove_file(&sys);
    let _ = fs::remove_file(&efi);
    if let Some(text) = b.sys_power_resume {
        fs::write(&sys, text).unwrap();
    }
    if b.efi_variable {
        // An efivarfs file: 4 bytes of attributes, then the value (systemd's JSON).
        fs::write(&efi, b"\x07\0\0\0{\"uuid\":\"x\",\"offset\":0}").unwrap();
    }
    let device = fs.device().to_str().unwrap().to_owned();
    fs.unmount().unwrap();
    let out = {
        let _only_one = testbed::turn(MOUNT_DIR);
        Command::new(BIN)
            .args([job, "--device", &device])
            .arg(format!("--hard-floor-bytes={LOOP_HARD_FLOOR}"))
            .env_remove("TACID_TEST_STOP_AFTER")
            .env("TACID_TEST_CMDLINE", b.cmdline)
            .env("TACID_TEST_SYS_POWER_RESUME", &sys)
            .env("TACID_TEST_EFI_HIBERNATE_LOCATION", &efi)
            .output()
            .unwrap()
    };
    fs.mount().unwrap();
    let err = stderr(&out);
    for line in err.lines() {
        assert!(
            line.starts_with("tacid-initrd: "),
            "unprefixed line {line:?}"
        );
    }
    (out.status.code(), err)
}

/// Everything a run must not change while a resume is pending: every subvolume (path, id,
/// UUID), the request file (bytes, inode, mtime), and whether an outcome was written.
#[derive(Debug, PartialEq, Eq)]
struct Untouched {
    subvolumes: Vec<(String, u64, String)>,
    request: Option<(Vec<u8>, u64, i64, i64)>,
    outcome: bool,
    home_kept: Option<String>,
}

fn untouched(fs: &LoopFs) -> Untouched {
    let p = request_path(fs);
    let request = fs::symlink_metadata(&p)
        .ok()
        .map(|m| (fs::read(&p).unwrap(), m.ino(), m.mtime(), m.mtime_nsec()));
    let outcome = fs
        .top()
        .join(layout::SNAPSHOTS_SUBVOLUME)
        .join(layout::OUTCOME_FILE_NAME);
    Untouched {
        subvolumes: fs.subvolumes_snapshot().unwrap(),
        request,
        outcome: outcome.symlink_metadata().is_ok(),
        home_kept: fs::read_to_string(fs.top().join("@home/alice/kept")).ok(),
    }
}

fn assert_waits(code: Option<i32>, log: &str, why: &str) {
    assert_eq!(code, Some(0), "the boot continues:\n{log}");
    for words in [
        why,
        "a hibernated system may still resume from this disk, so nothing is changed now",
        "a staged restore waits for a normal boot",
    ] {
        assert!(log.contains(words), "the log lacks {words:?}:\n{log}");
    }
    // Decided before the device is even mounted.
    assert!(!log.contains("mounted "), "{log}");
    assert!(!log.contains("exchanging"), "{log}");
}

#[test]
fn loop_a_configured_unattempted_resume_changes_nothing_and_the_restore_waits_for_a_normal_boot() {
    let Some(mut fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    write(&fs, "@root/etc/hostname", "old");
    let before = untouched(&fs);
    assert!(before.request.is_some());
    assert!(!before.outcome);

    // resume= on the command line, /sys/power/resume still 0:0.
    let (code, log) = boot(&mut fs, "restore-data", &UNATTEMPTED);
    assert_waits(
        code,
        &log,
        "restore-data: resume=/dev/vda3 is on the kernel command line but no resume was \
         attempted before this unit (/sys/power/resume is 0:0)",
    );
    assert_eq!(untouched(&fs), before, "{log}");
    // The wipe, ordered after the restore, leaves @root alone too.
    let (code, log) = boot(&mut fs, "wipe-root", &UNATTEMPTED);
    assert_waits(code, &log, "wipe-root: resume=/dev/vda3");
    assert_eq!(read(&fs, "@root/etc/hostname"), "old");
    assert_eq!(untouched(&fs), before, "{log}");

    // systemd's EFI variable instead of resume= (systemd 255 resumes from it alone).
    let efi = Boot {
        cmdline: "root=LABEL=tacid quiet",
        sys_power_resume: Some("0:0\n"),
        efi_variable: true,
    };
    let (code, log) = boot(&mut fs, "restore-data", &efi);
    assert_waits(
        code,
        &log,
        "systemd's HibernateLocation EFI variable is set",
    );
    assert_eq!(untouched(&fs), before, "{log}");

    // What the disk holds is what a fresh mount sees: still nothing changed.
    fs.remount().unwrap();
    assert_eq!(untouched(&fs), before);

    // A normal boot (no hibernation configured): the waiting request is honoured.
    let normal = Boot {
        cmdline: "root=LABEL=tacid quiet",
        sys_power_resume: Some("0:0\n"),
        efi_variable: false,
    };
    let (code, log) = boot(&mut fs, "restore-data", &normal);
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("exchanging @home and @home.tacid-swap"),
        "{log}"
    );
    assert!(!log.contains("waits for a normal boot"), "{log}");
    assert_home_restored(&fs, &request);
    let first = outcome(&fs);

    // Exactly once: the next normal boot keeps what was written after the restore.
    write(&fs, "@home/alice/after", "kept");
    let subvolumes = fs.subvolumes_snapshot().unwrap();
    let (code, log) = boot(&mut fs, "restore-data", &normal);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("no restore is staged"), "{log}");
    assert_eq!(read(&fs, "@home/alice/after"), "kept");
    assert_eq!(fs.subvolumes_snapshot().unwrap(), subvolumes);
    assert_eq!(outcome(&fs), first, "the outcome is not rewritten");
}

/// Stage a restore of @home to a snapshot holding `f` = `v{n}`, then change `f`.
fn stage_version(fs: &LoopFs, n: u64) -> RestoreRequest {
    write(fs, "@home/f", &format!("v{n}"));
    let request = snapshot(fs, "@home", n);
    write(fs, "@home/f", "changed after the snapshot");
    stage(fs, &request);
    request
}

fn assert_restored_once(fs: &mut LoopFs, request: &RestoreRequest, n: u64, b: &Boot) {
    let (code, log) = boot(fs, "restore-data", b);
    assert_eq!(code, Some(0), "{}:\n{log}", b.cmdline);
    assert!(!log.contains("waits for a normal boot"), "{log}");
    assert!(
        log.contains("exchanging @home and @home.tacid-swap"),
        "{log}"
    );
    assert_eq!(read(fs, "@home/f"), format!("v{n}"));
    assert_eq!(parent_uuid_of(fs, "@home"), Some(only(request).uuid()));
    assert!(!request_path(fs).exists());
    assert!(swap_names(fs).is_empty(), "{:?}", swap_names(fs));
    let o = outcome(fs);
    assert_eq!(o.result, OutcomeResult::Done, "{o}");
    assert_eq!(o.request.as_ref(), Some(request));
    // And not again.
    write(fs, "@home/f", "written after the restore");
    let subvolumes = fs.subvolumes_snapshot().unwrap();
    let (code, log) = boot(fs, "restore-data", b);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("no restore is staged"), "{log}");
    assert_eq!(read(fs, "@home/f"), "written after the restore");
    assert_eq!(fs.subvolumes_snapshot().unwrap(), subvolumes);
}

#[test]
fn loop_a_resume_that_was_attempted_or_cannot_happen_does_not_hold_the_restore() {
    let Some(mut fs) = machine() else { return };
    // Configured, and systemd attempted it (wrote the device to /sys/power/resume) and found
    // no image, or this unit would never run: a normal boot.
    let r = stage_version(&fs, 1);
    assert_restored_once(
        &mut fs,
        &r,
        1,
        &Boot {
            cmdline: "root=LABEL=tacid resume=/dev/vda3 quiet",
            sys_power_resume: Some("254:3\n"),
            efi_variable: true,
        },
    );
    // The person booted with noresume: the image is given up.
    let r = stage_version(&fs, 2);
    assert_restored_once(
        &mut fs,
        &r,
        2,
        &Boot {
            cmdline: "root=LABEL=tacid resume=/dev/vda3 noresume",
            sys_power_resume: Some("0:0\n"),
            efi_variable: true,
        },
    );
    // A kernel without hibernation (no /sys/power/resume) cannot resume anything.
    let r = stage_version(&fs, 3);
    assert_restored_once(
        &mut fs,
        &r,
        3,
        &Boot {
            cmdline: "root=LABEL=tacid resume=/dev/vda3",
            sys_power_resume: None,
            efi_variable: false,
        },
    );
}

/// `--top` is how the tests and an operator run the job on a mounted filesystem by hand;
/// the check is the unit's (adr/0007: "without `--top` the binary also checks").
#[test]
fn loop_with_top_the_resume_check_does_not_apply() {
    let Some(fs) = machine() else { return };
    let request = home_story(&fs);
    stage(&fs, &request);
    let sys: PathBuf = fs.scratch().join("sys-power-resume");
    fs::write(&sys, "0:0\n").unwrap();
    let out = run(
        &fs,
        "restore-data",
        &[
            ("TACID_TEST_CMDLINE", UNATTEMPTED.cmdline),
            ("TACID_TEST_SYS_POWER_RESUME", sys.to_str().unwrap()),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("waits for a normal boot"));
    assert_home_restored(&fs, &request);
}
