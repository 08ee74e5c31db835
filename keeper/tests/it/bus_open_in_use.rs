//! An open in use, and calls that change nothing, on real parts (adr/0021, adr/0016): a
//! loop Btrfs, a private bus with the shipped policies, the real stem and keeper, the real
//! `tacid` as real users of this test's own (made once, never removed).
//!
//! - The attack: a person opens their home, leaves a process inside, closes; an approver
//!   deletes the snapshot. Neither is done while the process holds it (the close names
//!   it); once it lets go, the close and the deletion go through and nothing is pinned:
//!   Btrfs's cleaner finishes the deleted subvolume.
//! - A person taken out of the approvers loses their whole-snapshot open: at once when
//!   nothing uses it, at the first check after it is let go when something does.
//! - A stranger repeating calls that change nothing (closing what they have not open, a
//!   diff or an open of a snapshot that does not exist) adds a bounded number of lines to
//!   the stem's and the keeper's logs, however many calls.

use crate::common::{self, json};

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::copies::logged_lines;
use crate::common::{mounts_under, ok, uid_of, World, APPROVER, APPROVER_GROUP, STRANGER};

/// A person whose home is in the snapshot.
const OWNER: &str = "tacid-inuse-owner";
/// An approver of this test's own, taken out of the approver group by the test.
const DROPPED: &str = "tacid-inuse-dropped";

fn ensure_user(name: &str) -> u32 {
    let exists = Command::new("getent")
        .args(["passwd", name])
        .output()
        .expect("getent")
        .status
        .success();
    if !exists {
        let home = format!("{}/{name}", layout::HOMES_MOUNT_POINT);
        // Made by several tests at once: a second useradd of the same name may fail.
        let _ = Command::new("useradd")
            .args([
                "--user-group",
                "--no-create-home",
                "--home-dir",
                &home,
                name,
            ])
            .status();
    }
    uid_of(name)
}

/// Whatever a failed test leaves mounted under the open directory goes, and the holders.
struct Cleanup(PathBuf, Vec<Child>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &mut self.1 {
            let _ = c.kill();
            let _ = c.wait();
        }
        for m in mounts_under(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
    }
}

/// A world whose stem opens beneath a directory of its own, the owner's home in `@home`,
/// and the approver's snapshot of it.
fn world() -> Option<(World, PathBuf, String, Cleanup)> {
    let mut w = World::start()?;
    let owner = ensure_user(OWNER);
    ensure_user(DROPPED);
    let run = w.dir.join("run");
    std::fs::create_dir(&run).expect("run dir");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let open_dir = run.join("tacid");
    w.kill_stem();
    w.stem_args
        .extend(["--open-dir".to_owned(), open_dir.display().to_string()]);
    w.start_stem();
    let home = w
        .top()
        .join(layout::homes_subvolume().to_string())
        .join(OWNER);
    std::fs::create_dir(&home).expect("mkdir home");
    // Big enough that keeping it alive would be seen: 8 MiB of another person's data.
    std::fs::write(home.join("big"), vec![7u8; 8 << 20]).expect("write");
    ok(
        "chown",
        &[
            "-R",
            &format!("{owner}:{owner}"),
            home.to_str().expect("utf-8"),
        ],
    );
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let name = w.snapshot_home();
    let cleanup = Cleanup(open_dir.clone(), Vec::new());
    Some((w, open_dir, name, cleanup))
}

/// A process of `user`'s with its working directory in `dir`, waited for until it is there.
fn hold(user: &str, dir: &str) -> Child {
    let child = Command::new("/usr/bin/setpriv")
        .args([
            &format!("--reuid={user}"),
            &format!("--regid={user}"),
            "--init-groups",
            "/bin/sh",
            "-c",
            "cd \"$1\" && exec sleep 600",
            "sh",
            dir,
        ])
        .spawn()
        .expect("a holder starts");
    let cwd = PathBuf::from(format!("/proc/{}/cwd", child.id()));
    testbed::wait_until(Duration::from_secs(10), || {
        std::fs::read_link(&cwd).is_ok_and(|p| p.starts_with(dir))
    })
    .expect("the holder sits in the open");
    child
}

/// No deleted subvolume is left for Btrfs's cleaner, within `limit`: none is pinned.
fn nothing_pinned(w: &World, limit: Duration) -> Result<Duration, String> {
    let top = w.top().to_str().expect("utf-8").to_owned();
    let started = Instant::now();
    let synced = Command::new("timeout")
        .args([
            &limit.as_secs().to_string(),
            "btrfs",
            "subvolume",
            "sync",
            &top,
        ])
        .output()
        .expect("btrfs subvolume sync");
    let left = Command::new("btrfs")
        .args(["subvolume", "list", "-d", &top])
        .output()
        .expect("btrfs subvolume list -d");
    let left = String::from_utf8_lossy(&left.stdout).into_owned();
    if synced.status.success() && left.trim().is_empty() {
        Ok(started.elapsed())
    } else {
        Err(format!(
            "deleted subvolumes still not cleaned after {limit:?} (pinned): {left}"
        ))
    }
}

#[test]
fn bus_an_open_in_use_is_neither_closed_nor_deleted_and_nothing_stays_pinned() {
    let Some((w, open_dir, name, mut cleanup)) = world() else {
        return;
    };
    let (code, out, err) = w.tacid(OWNER, &["data", "open", &name, "--json"]);
    assert_eq!(code, 0, "open: {err}");
    let path = json(&out)["path"].as_str().expect("a path").to_owned();
    cleanup.1.push(hold(OWNER, &path));
    let holder = cleanup.1[0].id();

    // The person's close: refused while the process sits there, naming it.
    let (code, _, err) = w.tacid(OWNER, &["data", "close", &name]);
    eprintln!("close in use: exit {code}: {err}");
    assert_eq!(code, 13, "in use has its own exit code: {err}");
    assert!(err.contains("in use"), "{err}");
    assert!(
        err.contains(&format!("PID {holder} (sleep)")),
        "names the holder: {err}"
    );
    assert_eq!(mounts_under(&open_dir).len(), 1, "still open, still seen");

    // The approver's deletion: refused, saying where it is open; the snapshot stays.
    let (code, out, err) = w.tacid(APPROVER, &["data", "delete", &name]);
    eprintln!("delete in use: exit {code}: {err}");
    assert_eq!(code, 13, "{out}{err}");
    assert!(!out.contains("comes back"), "{out}");
    assert!(
        err.contains("in use") && err.contains(&format!("open for uid {}", uid_of(OWNER))),
        "{err}"
    );
    assert!(w.disk_snapshots().0.contains(&name), "not deleted");
    // Root, who may look into every process, is told which holds it.
    let out = w.tacid_as_root(&["data", "delete", &name]);
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("root's delete in use: {:?}: {err}", out.status.code());
    assert_eq!(out.status.code(), Some(13), "{err}");
    assert!(
        err.contains(&format!("held by PID {holder} (sleep)")),
        "{err}"
    );
    assert!(w.disk_snapshots().0.contains(&name), "not deleted");

    // The holder lets go: the close and the deletion go through, and nothing is pinned.
    for mut c in cleanup.1.drain(..) {
        c.kill().expect("end the holder");
        c.wait().expect("reap the holder");
    }
    let (code, out, err) = w.tacid(OWNER, &["data", "close", &name]);
    assert_eq!(code, 0, "close once let go: {out}{err}");
    assert!(mounts_under(&open_dir).is_empty(), "unmounted");
    let (code, out, err) = w.tacid(APPROVER, &["data", "delete", &name]);
    assert_eq!(code, 0, "delete once closed: {out}{err}");
    assert!(!w.disk_snapshots().0.contains(&name));
    let cleaned = nothing_pinned(&w, Duration::from_secs(60)).expect("nothing pinned");
    eprintln!(
        "the deleted snapshot was cleaned {:.2} s after its deletion",
        cleaned.as_secs_f64()
    );
}

#[test]
fn bus_a_person_taken_out_of_the_approvers_loses_their_whole_open() {
    let Some((w, open_dir, name, mut cleanup)) = world() else {
        return;
    };
    let dropped = uid_of(DROPPED);
    ok("gpasswd", &["--add", DROPPED, APPROVER_GROUP]);
    let (code, out, err) = w.tacid(DROPPED, &["data", "open", &name, "--json"]);
    assert_eq!(code, 0, "an approver opens whole: {err}");
    let opened = json(&out);
    assert_eq!(opened["whole"], true, "{out}");
    let path = opened["path"].as_str().expect("a path").to_owned();
    cleanup.1.push(hold(DROPPED, &path));
    ok("gpasswd", &["--delete", DROPPED, APPROVER_GROUP]);

    // Anybody's list makes the keeper check the opens: in use, it stays (seen, and its
    // snapshot not deleted)...
    let (code, _, err) = w.tacid(STRANGER, &["data", "list"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        mounts_under(&open_dir).len(),
        1,
        "in use: not detached unseen"
    );
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &name]);
    assert_eq!(code, 13, "{err}");
    // Every list tries again; what the daemons log of it stays within an allowance.
    let (stem_before, keeper_before) = (logged_lines(&w.stem_log()), logged_lines(&w.keeper_log()));
    for _ in 0..40 {
        assert_eq!(w.tacid(STRANGER, &["data", "list"]).0, 0);
    }
    let (stem, keeper) = (
        logged_lines(&w.stem_log()) - stem_before,
        logged_lines(&w.keeper_log()) - keeper_before,
    );
    eprintln!("40 lists while it stays in use: {stem} stem lines, {keeper} keeper lines");
    let most = layout::defaults::ALLOWANCE_PER_CALLER as usize;
    assert!(stem <= most && keeper <= most, "{stem} and {keeper} lines");

    // ...and is closed at the first check once let go.
    for mut c in cleanup.1.drain(..) {
        c.kill().expect("end the holder");
        c.wait().expect("reap the holder");
    }
    let (code, _, err) = w.tacid(STRANGER, &["data", "list"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        mounts_under(&open_dir),
        Vec::<PathBuf>::new(),
        "the whole open of somebody no longer an approver is closed"
    );
    let closes: Vec<_> = w
        .journal_rows()
        .0
        .into_iter()
        .filter(|r| r.action == keeper::journal::Action::Close && r.uid == dropped)
        .collect();
    assert!(
        closes
            .iter()
            .any(|r| r.outcome.contains("no longer root or an approver")),
        "{closes:?}"
    );
    let (code, out, err) = w.tacid(APPROVER, &["data", "delete", &name]);
    assert_eq!(code, 0, "{out}{err}");
    nothing_pinned(&w, Duration::from_secs(60)).expect("nothing pinned");
}

#[test]
fn bus_retention_does_not_delete_an_open_in_use() {
    let Some((mut w, open_dir, _, mut cleanup)) = world() else {
        return;
    };
    w.stop_keeper_and_set_args(common::KEEP_ONLY_THE_NEWEST_HOURLY);
    w.start_keeper(None);
    // The set's names.
    let timeline = |w: &World| -> Vec<String> {
        let (code, out, err) = w.tacid(APPROVER, &["data", "snapshot", "--timeline", "--json"]);
        assert_eq!(code, 0, "{err}");
        let v = json(&out);
        v["snapshots"]
            .as_array()
            .expect("snapshots")
            .iter()
            .filter_map(|s| s["name"].as_str().map(str::to_owned))
            .collect()
    };
    let older_set = timeline(&w);
    let older = older_set
        .iter()
        .find(|n| n.starts_with("@home."))
        .expect("a snapshot of /home")
        .clone();
    timeline(&w);
    let (code, out, err) = w.tacid(OWNER, &["data", "open", &older, "--json"]);
    assert_eq!(code, 0, "open: {err}");
    let path = json(&out)["path"].as_str().expect("a path").to_owned();
    cleanup.1.push(hold(OWNER, &path));

    // The rule chooses it, but it is open: the dry run and the real run both keep it and say
    // why (the real run does not try, and fails nothing); its set stays whole.
    let named = |report: &serde_json::Value, list: &str| -> Vec<(String, String)> {
        report[list]
            .as_array()
            .expect("a list")
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or_default().to_owned(),
                    e["note"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let kept_open = format!("kept: open at {path} (in use until it is closed");
    for dry in [true, false] {
        let mut args = vec!["data", "prune", "--json"];
        if dry {
            args.push("--dry-run");
        }
        let (code, out, err) = w.tacid(APPROVER, &args);
        assert_eq!(code, 0, "prune (dry run {dry}): {out}{err}");
        eprintln!("prune (dry run {dry}) while open and in use: {out}{err}");
        let report = json(&out);
        let deleted = named(&report, "deleted");
        assert!(
            !deleted.iter().any(|(n, _)| *n == older),
            "an open snapshot is not reported deleted (dry run {dry}): {out}"
        );
        assert!(
            named(&report, "spared")
                .iter()
                .any(|(n, note)| *n == older && note.starts_with(&kept_open)),
            "an open snapshot is reported kept because it is open (dry run {dry}): {out}"
        );
        assert!(
            named(&report, "failed").is_empty(),
            "nothing fails (dry run {dry}): {out}"
        );
        assert!(
            !deleted.iter().any(|(n, _)| older_set.contains(n)),
            "a set with an open member stays whole (dry run {dry}): {out}"
        );
        assert!(w.disk_snapshots().0.contains(&older));
    }
    // Anybody may ask for a dry run; whose open it is, and where, is not theirs to see.
    let (code, out, err) = w.tacid(STRANGER, &["data", "prune", "--dry-run", "--json"]);
    assert_eq!(code, 0, "a stranger's dry run: {out}{err}");
    let report = json(&out);
    assert!(
        named(&report, "spared").iter().any(|(n, note)| *n == older
            && note.starts_with("kept: open at a place shown only to its opener and approvers")),
        "{out}"
    );
    assert!(
        !out.contains(&path),
        "a stranger is shown where it is open: {out}"
    );

    // Let go and closed: the next prune deletes it, and nothing is pinned.
    for mut c in cleanup.1.drain(..) {
        c.kill().expect("end the holder");
        c.wait().expect("reap the holder");
    }
    let (code, _, err) = w.tacid(OWNER, &["data", "close", &older]);
    assert_eq!(code, 0, "{err}");
    assert!(mounts_under(&open_dir).is_empty());
    let (code, out, err) = w.tacid(APPROVER, &["data", "prune", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!w.disk_snapshots().0.contains(&older), "{out}");
    nothing_pinned(&w, Duration::from_secs(60)).expect("nothing pinned");
}

#[test]
fn bus_a_keeper_that_leaves_does_not_close_an_open_in_use_and_the_next_one_follows_it() {
    use keeper::journal::{Action, State};
    let Some((mut w, open_dir, name, mut cleanup)) = world() else {
        return;
    };
    let (code, out, err) = w.tacid(OWNER, &["data", "open", &name, "--json"]);
    assert_eq!(code, 0, "open: {err}");
    let path = json(&out)["path"].as_str().expect("a path").to_owned();
    cleanup.1.push(hold(OWNER, &path));

    // The keeper killed: the stem closes its opens, but not one in use; the next keeper
    // keeps its journal row open and follows it.
    w.kill_keeper();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        mounts_under(&open_dir).len(),
        1,
        "in use: not detached unseen"
    );
    w.start_keeper(None);
    let (code, out, err) = w.tacid(OWNER, &["data", "list", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&path),
        "still listed open for its owner: {out}"
    );
    let open_rows = |w: &World| -> Vec<State> {
        w.journal_rows()
            .0
            .into_iter()
            .filter(|r| r.action == Action::Open && r.subject == name)
            .map(|r| r.state)
            .collect()
    };
    assert_eq!(open_rows(&w), vec![State::Open], "not journalled closed");
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &name]);
    assert_eq!(code, 13, "{err}");

    for mut c in cleanup.1.drain(..) {
        c.kill().expect("end the holder");
        c.wait().expect("reap the holder");
    }
    let (code, out, err) = w.tacid(OWNER, &["data", "close", &name]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(mounts_under(&open_dir).is_empty());
    assert_eq!(open_rows(&w), vec![State::Closed]);
    let (code, out, err) = w.tacid(APPROVER, &["data", "delete", &name]);
    assert_eq!(code, 0, "{out}{err}");
    nothing_pinned(&w, Duration::from_secs(60)).expect("nothing pinned");
}

#[test]
fn bus_a_stranger_repeating_calls_that_change_nothing_leaves_a_bounded_log() {
    let Some((w, _open_dir, name, _cleanup)) = world() else {
        return;
    };
    let missing = "@home.2001-01-01T000000.000000Z";
    const CALLS: usize = 100;
    // Each path a stranger reaches that logs per call: a close of what they have not open
    // (the stem), a diff and an open of a snapshot that is not there (the stem; the
    // keeper's refusals past its allowances), and the opens the keeper checks at each list.
    let floods: [(&str, Vec<&str>); 8] = [
        ("close of what is not open", vec!["data", "close", &name]),
        ("diff of a missing snapshot", vec!["data", "diff", missing]),
        ("open of a missing snapshot", vec!["data", "open", missing]),
        ("list (checks the opens)", vec!["data", "list"]),
        (
            "preview of a missing snapshot",
            vec!["data", "restore", missing],
        ),
        ("delete (refused)", vec!["data", "delete", &name]),
        (
            "copies of a missing target",
            vec!["data", "copies", "nowhere"],
        ),
        ("status", vec!["data", "status"]),
    ];
    for (what, args) in &floods {
        let (stem_before, keeper_before) =
            (logged_lines(&w.stem_log()), logged_lines(&w.keeper_log()));
        let started = Instant::now();
        // One shell of the stranger's making the calls one after another.
        w.tacid_again_and_again(STRANGER, CALLS, args);
        let took = started.elapsed();
        let stem = logged_lines(&w.stem_log()) - stem_before;
        let keeper = logged_lines(&w.keeper_log()) - keeper_before;
        eprintln!(
            "{CALLS} × {what} in {:.1} s: {stem} lines in the stem's log, {keeper} in the keeper's",
            took.as_secs_f64()
        );
        // The allowance is 10 lines a caller per kind per 10 minutes (adr/0016); the keeper
        // may add the line that says it counts from now on.
        let most = layout::defaults::ALLOWANCE_PER_CALLER as usize + 2;
        assert!(stem <= most, "{what}: {stem} stem lines for {CALLS} calls");
        assert!(
            keeper <= most,
            "{what}: {keeper} keeper lines for {CALLS} calls"
        );
    }
}
