//! The hostile tier, on disk: what an ordinary user can leave in `@root` or in a home, and
//! what can sit where a refused request goes, against the real `tacid-initrd` binary run as
//! its unit runs it (`ulimit -n 1024`) on a real loop-device Btrfs. Every leftover is made
//! as an unprivileged user (uid 4242, no capabilities) through the kernel's own interfaces.
//!
//! Nothing here may keep the next boot from making a fresh `@root` or from honouring a
//! restore, and nothing may stick for ever (adr/0015).
#![allow(clippy::unwrap_used)] // a panic is how a test reports

use std::fs;
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::time::Instant;

use crate::common::hostile;
use crate::common::*;
use layout::OutcomeResult;
use testbed::LoopFs;

/// `@root/var/tmp` as a running system has it: root's, world-writable, sticky.
fn root_var_tmp(fs: &LoopFs) -> std::os::fd::OwnedFd {
    hostile::dir_for_user(fs.top(), "@root/var/tmp", 0o1777, 0)
}

/// A home of the hostile user's own in `@home`.
fn home(fs: &LoopFs) -> std::os::fd::OwnedFd {
    hostile::dir_for_user(fs.top(), "@home/mallory", 0o700, hostile::UID)
}

/// Every subvolume but the layout's (and the store's snapshots), by the `btrfs` tool.
fn beyond_the_layout(fs: &LoopFs) -> Vec<String> {
    fs.subvolumes_snapshot()
        .expect("btrfs subvolume list")
        .into_iter()
        .map(|(path, _, _)| path)
        .filter(|p| {
            !layout::SUBVOLUMES.iter().any(|s| s.name == p)
                && !p.starts_with(&format!("{}/", layout::SNAPSHOTS_SUBVOLUME))
        })
        .collect()
}

/// What the deletions took, as the log says.
fn print_deletions(log: &str) {
    for line in log.lines().filter(|l| l.contains("nested in it")) {
        println!("    {line}");
    }
}

/// Run `job` as its unit runs it; exit 0, and how long it took.
fn run_unit_ok(fs: &LoopFs, job: &str, context: &str) -> (String, f64) {
    let started = Instant::now();
    let out = run_as_unit(fs, job);
    let took = started.elapsed().as_secs_f64();
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{context}: {job} failed after {took:.2} s:\n{err}"
    );
    (err, took)
}

/// The wipe of a root holding what the user made: one run, a fresh root, nothing left;
/// and the next boot wipes as usual.
fn assert_wiped_clean(fs: &LoopFs, made: usize, context: &str) {
    let (log, took) = run_unit_ok(fs, "wipe-root", context);
    println!("{context}: {made} user subvolumes in @root, wiped in {took:.2} s");
    print_deletions(&log);
    assert_root_is_fresh(fs, context);
    assert_eq!(beyond_the_layout(fs), Vec::<String>::new(), "{context}");
    assert!(
        log.contains("exchanging @root and @root.tacid-swap"),
        "{log}"
    );
    write(fs, "@root/tmp/next-boot", "x");
    run_unit_ok(fs, "wipe-root", context);
    assert_root_is_fresh(fs, &format!("{context}, the boot after"));
}

#[test]
fn hostile_a_subvolume_named_with_a_byte_that_is_not_utf8_holding_another() {
    let Some(fs) = machine() else { return };
    let tmp = root_var_tmp(&fs);
    let made = hostile::as_hostile_user(&tmp, hostile::odd_names);
    assert!(fs
        .top()
        .join("@root/var/tmp/\u{fffd}")
        .symlink_metadata()
        .is_err());
    let odd = std::ffi::OsStr::from_bytes(b"\xff");
    assert!(fs.top().join("@root/var/tmp").join(odd).is_dir());
    assert_wiped_clean(&fs, made, "a \\xff subvolume holding a subvolume");
}

#[test]
fn hostile_3000_directories_deep_with_a_subvolume_in_the_last_under_1024_descriptors() {
    let Some(fs) = machine() else { return };
    let tmp = root_var_tmp(&fs);
    let made = hostile::as_hostile_user(&tmp, |dir| hostile::deep_chain(dir, hostile::DEEP));
    assert_wiped_clean(&fs, made, "3000 directories deep");
}

#[test]
fn hostile_read_only_nested_subvolumes_and_thousands_of_the_users_own_snapshots() {
    let Some(fs) = machine() else { return };
    let tmp = root_var_tmp(&fs);
    let started = Instant::now();
    let made = hostile::as_hostile_user(&tmp, |dir| {
        hostile::read_only_nest(dir) + hostile::own_snapshots(dir, 500, 2000)
    });
    println!(
        "made {made} subvolumes as the user in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_wiped_clean(&fs, made, "read-only nests and thousands of snapshots");
}

#[test]
fn hostile_the_same_in_a_home_never_blocks_an_home_restore() {
    let Some(fs) = machine() else { return };
    let request = home_story(&fs);
    let home = home(&fs);
    let made = hostile::as_hostile_user(&home, |dir| hostile::all_of_it(dir, 50, 200));
    stage(&fs, &request);
    let (log, took) = run_unit_ok(&fs, "restore-data", "a home full of user subvolumes");
    println!("{made} user subvolumes in the replaced @home, restored in {took:.2} s");
    print_deletions(&log);
    assert_home_restored(&fs, &request);
    assert_eq!(beyond_the_layout(&fs), Vec::<String>::new());
    // And a later restore works as well.
    let again = snapshot(&fs, "@home", 9);
    stage(&fs, &again);
    run_unit_ok(&fs, "restore-data", "the next restore");
    assert_eq!(parent_uuid_of(&fs, "@home"), Some(only(&again).uuid()));
}

/// What can sit where a refused request is moved, and what can be the request itself.
#[derive(Debug, Clone, Copy)]
enum InTheWay {
    Directory,
    Fifo,
    Symlink,
}

/// `name` in the snapshot store.
fn in_store(fs: &LoopFs, name: &str) -> std::path::PathBuf {
    fs.top().join(layout::SNAPSHOTS_SUBVOLUME).join(name)
}

fn put(fs: &LoopFs, name: &str, what: InTheWay) {
    let p = in_store(fs, name);
    match what {
        InTheWay::Directory => {
            fs::create_dir_all(p.join("a/b")).unwrap();
            fs::write(p.join("a/b/file"), "inside").unwrap();
            testbed::make_fifo(&p.join("a/fifo")).unwrap();
        }
        InTheWay::Fifo => testbed::make_fifo(&p).unwrap(),
        InTheWay::Symlink => {
            std::os::unix::fs::symlink(fs.scratch().join("outside"), &p).unwrap();
        }
    }
}

#[test]
fn hostile_a_refused_request_is_moved_aside_whatever_is_in_the_way() {
    for what in [InTheWay::Directory, InTheWay::Fifo, InTheWay::Symlink] {
        let Some(fs) = machine() else { return };
        fs::write(fs.scratch().join("outside"), "not ours").unwrap();
        put(&fs, layout::REFUSED_REQUEST_FILE_NAME, what);
        stage_bytes(&fs, b"@home nonsense\n");
        let context = format!("a {what:?} at .restore.refused");
        let (log, _) = run_unit_ok(&fs, "restore-data", &context);
        assert!(log.contains("refused"), "{context}: {log}");
        assert_eq!(outcome(&fs).result, OutcomeResult::Refused, "{context}");
        assert!(request_path(&fs).symlink_metadata().is_err(), "{context}");
        let aside = in_store(&fs, layout::REFUSED_REQUEST_FILE_NAME);
        assert_eq!(fs::read(&aside).unwrap(), b"@home nonsense\n", "{context}");
        assert!(aside.symlink_metadata().unwrap().is_file(), "{context}");
        assert_eq!(
            fs::read_to_string(fs.scratch().join("outside")).unwrap(),
            "not ours",
            "{context}: the symlink was followed"
        );
        // The next boot has nothing to do.
        let (log, _) = run_unit_ok(&fs, "restore-data", &context);
        assert!(log.contains("no restore is staged"), "{context}: {log}");
    }
}

#[test]
fn hostile_a_request_that_is_a_directory_is_moved_aside_over_an_older_refused_one() {
    for older in [None, Some(InTheWay::Directory), Some(InTheWay::Fifo)] {
        let Some(fs) = machine() else { return };
        match older {
            Some(what) => put(&fs, layout::REFUSED_REQUEST_FILE_NAME, what),
            None => fs::write(
                in_store(&fs, layout::REFUSED_REQUEST_FILE_NAME),
                "an older refused request\n",
            )
            .unwrap(),
        }
        put(&fs, layout::REQUEST_FILE_NAME, InTheWay::Directory);
        let context = format!("a directory as the request, {older:?} already aside");
        run_unit_ok(&fs, "restore-data", &context);
        assert_eq!(outcome(&fs).result, OutcomeResult::Refused, "{context}");
        assert!(request_path(&fs).symlink_metadata().is_err(), "{context}");
        let aside = in_store(&fs, layout::REFUSED_REQUEST_FILE_NAME);
        assert!(
            aside.join("a/b/file").is_file(),
            "{context}: not moved aside"
        );
        let (log, _) = run_unit_ok(&fs, "restore-data", &context);
        assert!(log.contains("no restore is staged"), "{context}: {log}");
    }
}

/// `chattr +i` on a nested subvolume's root: no ordinary user can do it, and Btrfs then
/// refuses to delete it (EPERM) — the stand-in for any leftover that cannot go.
fn pin(fs: &LoopFs, rel: &str, on: bool) {
    sh("chattr", &[if on { "+i" } else { "-i" }, &path(fs, rel)]);
}

#[test]
fn hostile_a_leftover_that_cannot_go_never_blocks_a_fresh_root() {
    let Some(fs) = machine() else { return };
    let tmp = root_var_tmp(&fs);
    hostile::as_hostile_user(&tmp, |dir| {
        let outer = hostile::subvolume(dir, "outer");
        hostile::subvolume(outer.as_fd(), "pinned");
        2
    });
    pin(&fs, "@root/var/tmp/outer/pinned", true);
    let stuck = "@root.tacid-stuck";
    for boot in 1..=3 {
        let context = format!("boot {boot} with an undeletable leftover");
        write(&fs, &format!("@root/written-in-boot-{boot}"), "x");
        let out = run_as_unit(&fs, "wipe-root");
        let log = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{context}: says so:\n{log}");
        assert!(
            log.contains("cannot be deleted"),
            "{context}: says why:\n{log}"
        );
        assert!(log.contains("@root is fresh"), "{context}:\n{log}");
        assert_root_is_a_blank_copy(&fs, &context);
        assert_eq!(
            swap_names(&fs),
            [stuck],
            "{context}: one name set aside, no more"
        );
    }
    // Once it can go (here: the flag is cleared), the next boot deletes it.
    pin(&fs, &format!("{stuck}/var/tmp/outer/pinned"), false);
    let (log, _) = run_unit_ok(&fs, "wipe-root", "the boot after it can go");
    assert!(log.contains(stuck), "{log}");
    assert_root_is_fresh(&fs, "the boot after it can go");
    assert_eq!(beyond_the_layout(&fs), Vec::<String>::new());
}
