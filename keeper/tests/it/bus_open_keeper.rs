//! Opening a snapshot read-only, through the keeper and the CLI (adr/0019), on
//! real parts: a loop Btrfs, a private bus with the shipped policies, the real stem as root
//! and the real keeper as its own user, the real `tacid` as real users: an approver, a
//! stranger, the owner, and users whose homes are hostile cases. The opens go to a
//! directory of the test's own (`--open-dir`), never the machine's `/run/tacid`.
//!
//! - The owner finds the file with `diff`, opens their home, copies the file back, sees
//!   yesterday's owner and mode, closes it; `list` says where it was open.
//! - A stranger gets nothing of others: no whole snapshot, no other snapshot, no way to
//!   name another home, a diff shows nothing outside their own home, and the owner's
//!   open directory does not let them in.
//! - A symlink in a home leads nowhere out of the opened part; a home replaced by a
//!   symlink since the snapshot opens the snapshot's real directory; a home that was a
//!   symlink in the snapshot, or is not directly under /home, is refused.
//! - Floods: the stem's cap per person, the keeper's allowance of opens, refusals counted.
//! - The keeper killed: the stem closes its opens, the next keeper journals them closed;
//!   an idle close and a killed stem are journalled; nothing stays mounted.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{json, mounts_under, ok, uid_of, World, APPROVER, STRANGER};
use keeper::journal::{Action, RequestRow, State};

const OWNER: &str = "tacid-open-owner";
/// Home directory replaced by a symlink since the snapshot.
const MOVED: &str = "tacid-open-moved";
/// Home directory that was a symlink (to the owner's) in the snapshot.
const PLANTED: &str = "tacid-open-planted";
/// Home directory not directly under /home.
const ELSEWHERE: &str = "tacid-open-elsewhere";

/// Made once under the lock every test process takes, never removed (testbed::users).
fn ensure_user(name: &str, home: &str) -> u32 {
    testbed::users::ensure_user(
        name,
        &["--user-group", "--no-create-home", "--home-dir", home],
    )
    .0
}

/// Whatever a failed test leaves mounted under the open directory goes (before the world's
/// own cleanup removes the directory).
struct Unmounter(PathBuf);

impl Drop for Unmounter {
    fn drop(&mut self) {
        for m in mounts_under(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
    }
}

/// A world whose stem opens beneath a directory of its own, with homes made in `@home`
/// and a snapshot of it taken by the approver; the live homes then change.
struct OpenWorld {
    w: World,
    open_dir: PathBuf,
    name: String,
}

fn open_world(stem_args: &[&str]) -> Option<(OpenWorld, Unmounter)> {
    let mut w = World::start()?;
    for user in [OWNER, MOVED, PLANTED, STRANGER, APPROVER] {
        ensure_user(user, &format!("{}/{user}", layout::HOMES_MOUNT_POINT));
    }
    ensure_user(ELSEWHERE, "/srv/tacid-open-elsewhere");
    let run = w.dir.join("run");
    std::fs::create_dir(&run).expect("run dir");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let open_dir = run.join("tacid");
    w.kill_stem();
    w.stem_args
        .extend(["--open-dir".to_owned(), open_dir.display().to_string()]);
    w.stem_args.extend(stem_args.iter().map(|s| s.to_string()));
    w.start_stem();
    let guard = Unmounter(open_dir.clone());

    let homes = w.top().join(layout::homes_subvolume().to_string());
    let home = |user: &str| {
        let dir = homes.join(user);
        std::fs::create_dir(&dir).expect("mkdir home");
        ok(
            "chown",
            &[&format!("{user}:{user}"), dir.to_str().expect("utf-8")],
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        dir
    };
    let file = |path: PathBuf, user: &str, text: &str, mode: u32| {
        std::fs::write(&path, text).expect("write");
        ok(
            "chown",
            &[&format!("{user}:{user}"), path.to_str().expect("utf-8")],
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let o = home(OWNER);
    file(
        o.join("notes.txt"),
        OWNER,
        "what the owner wrote yesterday\n",
        0o640,
    );
    std::fs::create_dir(o.join("docs")).expect("mkdir");
    ok(
        "chown",
        &[
            &format!("{OWNER}:{OWNER}"),
            o.join("docs").to_str().expect("utf-8"),
        ],
    );
    file(o.join("docs/plan.txt"), OWNER, "the plan\n", 0o600);
    // A symlink planted to lead out of the owner's part: to the stranger's secret.
    std::os::unix::fs::symlink(format!("../{STRANGER}/secret"), o.join("escape")).expect("symlink");
    let s = home(STRANGER);
    file(s.join("secret"), STRANGER, "the stranger's\n", 0o644);
    home(APPROVER);
    let m = home(MOVED);
    file(m.join("kept.txt"), MOVED, "in the real directory\n", 0o600);
    // The planted user's "home" in the snapshot is a symlink to the owner's.
    std::os::unix::fs::symlink(OWNER, homes.join(PLANTED)).expect("symlink");

    let name = w.snapshot_home();

    // Since the snapshot: the owner lost notes.txt and made new.txt; the stranger wrote a
    // file whose name the owner must never see; the moved user's home became a symlink.
    std::fs::remove_file(o.join("notes.txt")).expect("rm");
    file(o.join("new.txt"), OWNER, "new\n", 0o600);
    file(s.join("stranger-private-name.txt"), STRANGER, "x\n", 0o600);
    std::fs::remove_dir_all(&m).expect("rm moved home");
    std::os::unix::fs::symlink("/tmp", &m).expect("symlink");
    Some((OpenWorld { w, open_dir, name }, guard))
}

/// Run a command as `user`: (exit code, stdout, stderr).
fn as_user(user: &str, cmd: &[&str]) -> (i32, String, String) {
    let out = Command::new("/usr/bin/setpriv")
        .args([
            &format!("--reuid={user}"),
            &format!("--regid={user}"),
            "--init-groups",
        ])
        .args(cmd)
        .output()
        .expect("setpriv runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rows_of(w: &World, act: Action) -> Vec<RequestRow> {
    w.journal_rows()
        .0
        .into_iter()
        .filter(|r| r.action == act)
        .collect()
}

#[test]
fn bus_the_owner_takes_a_file_back_and_nobody_gets_anything_of_others() {
    let Some((ow, _guard)) = open_world(&["--opens-per-user", "2"]) else {
        return;
    };
    let (w, name) = (&ow.w, ow.name.as_str());
    let home = |user: &str| format!("{}/{user}", layout::HOMES_MOUNT_POINT);

    // The owner finds the file first: only their own home, counted, no bytes claimed.
    let started = Instant::now();
    let (code, out, err) = w.tacid(OWNER, &["data", "diff", name, "--json"]);
    eprintln!(
        "diff of a home (CLI, owner): {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(code, 0, "{err}");
    let d = json(&out);
    assert_eq!(d["subtree"], home(OWNER));
    assert_eq!(d["bytes_written"], serde_json::Value::Null);
    let paths: Vec<(String, String)> = d["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| {
            (
                p["change"].as_str().unwrap().to_owned(),
                p["path"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        paths.contains(&("removed".into(), format!("{}/notes.txt", home(OWNER)))),
        "{paths:?}"
    );
    assert!(
        paths.contains(&("added".into(), format!("{}/new.txt", home(OWNER)))),
        "{paths:?}"
    );
    for (_, p) in &paths {
        assert!(p.starts_with(&home(OWNER)), "outside the owner's home: {p}");
    }
    assert_eq!(
        (d["files_removed"].as_u64(), d["files_added"].as_u64()),
        (Some(1), Some(1))
    );
    let (code, text, _) = w.tacid(OWNER, &["data", "diff", name]);
    assert_eq!(code, 0);
    assert!(text.contains("not known for"), "{text}");
    assert!(!text.contains("stranger-private-name"), "{text}");
    // Narrowed to a directory of theirs: nothing changed there.
    let (code, out, _) = w.tacid(
        OWNER,
        &[
            "data",
            "diff",
            name,
            &format!("{}/docs", home(OWNER)),
            "--json",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(json(&out)["paths"].as_array().map(Vec::len), Some(0));

    // The stranger's diff: their own home only; another's home cannot even be asked for.
    let (code, out, _) = w.tacid(STRANGER, &["data", "diff", name]);
    assert_eq!(code, 0);
    assert!(out.contains("stranger-private-name.txt"), "{out}");
    assert!(!out.contains(OWNER) && !out.contains("new.txt"), "{out}");
    for other in [
        home(OWNER),
        layout::HOMES_MOUNT_POINT.to_owned(),
        format!("{}/../{OWNER}", home(STRANGER)),
    ] {
        let (code, out, err) = w.tacid(STRANGER, &["data", "diff", name, &other]);
        assert!(code == 4 || code == 5, "{other}: {code} {out} {err}");
        assert!(
            !out.contains("new.txt") && !err.contains("new.txt"),
            "{err}"
        );
    }
    // The approver sees the whole subvolume, bytes written included.
    let (code, out, err) = w.tacid(APPROVER, &["data", "diff", name, "--json"]);
    assert_eq!(code, 0, "{err}");
    let d = json(&out);
    assert_eq!(
        (d["subtree"].as_str(), d["bytes_written"].is_u64()),
        (Some("/home"), true)
    );
    assert!(out.contains("stranger-private-name.txt") && out.contains("new.txt"));

    // The owner opens their home: read-only, theirs alone, as it was.
    let started = Instant::now();
    let (code, out, err) = w.tacid(OWNER, &["data", "open", name, "--json"]);
    eprintln!(
        "open of a home (CLI, owner): {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(code, 0, "{err}");
    let o = json(&out);
    let path = o["path"].as_str().expect("path").to_owned();
    let owner_uid = uid_of(OWNER);
    assert_eq!(
        Path::new(&path),
        ow.open_dir.join(owner_uid.to_string()).join(name)
    );
    assert_eq!(
        (o["whole"].as_bool(), o["shows"].as_str()),
        (Some(false), Some(home(OWNER).as_str()))
    );
    assert_eq!(o["your_home"].as_str(), Some(path.as_str()));
    assert_eq!(mounts_under(&ow.open_dir).len(), 1);
    let (_, listing, _) = as_user(OWNER, &["ls", "-A", &path]);
    let mut listed: Vec<&str> = listing.lines().collect();
    listed.sort();
    assert_eq!(
        listed,
        ["docs", "escape", "notes.txt"],
        "only the home as it was"
    );
    // Yesterday's owner and mode.
    let (_, st, _) = as_user(
        OWNER,
        &["stat", "-c", "%U %a", &format!("{path}/notes.txt")],
    );
    assert_eq!(st.trim(), format!("{OWNER} 640"));
    // Copy it back (to a directory of the owner's; the live home is beneath the test's
    // root-only loop mount) and read it.
    let back = w.dir.join("owner-takes-back");
    std::fs::create_dir(&back).expect("mkdir");
    ok(
        "chown",
        &[&format!("{OWNER}:{OWNER}"), back.to_str().expect("utf-8")],
    );
    let dest = back.join("notes.txt");
    let (code, _, err) = as_user(
        OWNER,
        &["cp", &format!("{path}/notes.txt"), dest.to_str().unwrap()],
    );
    assert_eq!(code, 0, "cp: {err}");
    assert_eq!(
        std::fs::read_to_string(&dest).expect("copied"),
        "what the owner wrote yesterday\n"
    );
    // Nothing is written there; the planted symlink leads out of nothing.
    let (code, _, _) = as_user(OWNER, &["touch", &format!("{path}/new")]);
    assert_ne!(code, 0, "read-only");
    let (code, out, err) = as_user(OWNER, &["cat", &format!("{path}/escape")]);
    assert_ne!(code, 0, "the symlink led out: {out}");
    assert!(err.contains("No such file"), "{err}");
    // The stranger may not enter the owner's open directory.
    let (code, _, err) = as_user(STRANGER, &["ls", &path]);
    assert_ne!(code, 0);
    assert!(err.contains("Permission denied"), "{err}");
    // The owner's list says where it is open; the stranger's does not.
    let (code, out, _) = w.tacid(OWNER, &["data", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!("OPEN   for you, read-only, at {path}")),
        "{out}"
    );
    let (_, out, _) = w.tacid(OWNER, &["data", "list", "--json"]);
    let listed = json(&out)["snapshots"].clone();
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .expect("listed");
    assert_eq!(entry["open_at"].as_str(), Some(path.as_str()));
    let (_, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    assert!(
        json(&out)["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["open_at"].is_null()),
        "{out}"
    );

    // The stranger: their own home opens, nothing else of anybody's.
    let (code, out, err) = w.tacid(STRANGER, &["data", "open", name, "--json"]);
    assert_eq!(code, 0, "{err}");
    let s = json(&out);
    assert_eq!(s["whole"], false);
    let (_, listing, _) = as_user(STRANGER, &["ls", "-A", s["path"].as_str().unwrap()]);
    assert_eq!(
        listing.lines().collect::<Vec<_>>(),
        ["secret"],
        "the snapshot's, theirs only"
    );
    let (code, _, err) = w.tacid(STRANGER, &["data", "close", name]);
    assert_eq!(code, 0, "{err}");
    // Not a snapshot of /home: refused, journalled.
    let persist = {
        let (code, out, err) = w.tacid(APPROVER, &["data", "snapshot", "/persist", "--json"]);
        assert_eq!(code, 0, "{err}");
        json(&out)["snapshots"][0]["name"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (code, _, err) = w.tacid(STRANGER, &["data", "open", &persist]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("only your own home"), "{err}");
    let (code, _, err) = w.tacid(STRANGER, &["data", "diff", &persist]);
    assert_eq!(code, 4, "{err}");

    // Hostile homes.
    let (code, _, err) = w.tacid(PLANTED, &["data", "open", name]);
    assert_eq!(code, 6, "a home that was a symlink in the snapshot: {err}");
    assert!(err.contains("not a directory of yours there"), "{err}");
    let (code, _, err) = w.tacid(ELSEWHERE, &["data", "open", name]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("not one directory directly under /home"),
        "{err}"
    );
    // Replaced by a symlink since: the snapshot's real directory is what opens.
    let (code, out, err) = w.tacid(MOVED, &["data", "open", name, "--json"]);
    assert_eq!(code, 0, "{err}");
    let moved = json(&out)["path"].as_str().unwrap().to_owned();
    let (_, listing, _) = as_user(MOVED, &["ls", "-A", &moved]);
    assert_eq!(listing.lines().collect::<Vec<_>>(), ["kept.txt"]);
    assert_eq!(w.tacid(MOVED, &["data", "close", name]).0, 0);

    // The approver opens whole; the stem's cap (2 here) stops a third.
    let (code, out, err) = w.tacid(APPROVER, &["data", "open", name, "--json"]);
    assert_eq!(code, 0, "{err}");
    let a = json(&out);
    assert_eq!(a["whole"], true);
    assert_eq!(
        a["your_home"].as_str().map(String::from),
        Some(format!("{}/{APPROVER}", a["path"].as_str().unwrap()))
    );
    let (_, listing, _) = as_user(APPROVER, &["ls", a["path"].as_str().unwrap()]);
    assert!(
        listing.contains(OWNER) && listing.contains(STRANGER),
        "{listing}"
    );
    assert_eq!(w.tacid(APPROVER, &["data", "open", &persist]).0, 0);
    let third = w.snapshot_home();
    let (code, _, err) = w.tacid(APPROVER, &["data", "open", &third]);
    assert_eq!(code, 6, "{err}");
    assert!(err.contains("tacid data close"), "{err}");

    // The owner closes: gone, journalled with who and where.
    let (code, out, err) = w.tacid(OWNER, &["data", "close", name]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("closed"), "{out}");
    assert!(!Path::new(&path).exists());
    let (code, out, _) = w.tacid(OWNER, &["data", "close", name]);
    assert_eq!(code, 0);
    assert!(out.contains("was not open"), "{out}");
    let opens = rows_of(w, Action::Open);
    let owner_open = opens
        .iter()
        .find(|r| r.uid == owner_uid && r.state == State::Closed)
        .expect("the owner's open, closed");
    assert!(owner_open.outcome.contains(&path), "{}", owner_open.outcome);
    assert!(
        owner_open.outcome.contains(&format!("closed by {OWNER}")),
        "{}",
        owner_open.outcome
    );
    let refused: Vec<&RequestRow> = opens.iter().filter(|r| r.state == State::Refused).collect();
    for user in [STRANGER, PLANTED, ELSEWHERE, APPROVER] {
        assert!(
            refused.iter().any(|r| r.user_name == user),
            "{user}'s refusal is journalled: {refused:?}"
        );
    }
    assert!(rows_of(w, Action::Close).iter().any(|r| r.uid == owner_uid));

    // A caller flooding opens: the keeper's allowance, then refusals counted, not written.
    let calls = 40;
    let started = Instant::now();
    let mut refusals = 0;
    for _ in 0..calls {
        let (ok, _, err) = w.call_keeper_as(STRANGER, "Open", &[name]);
        if !ok {
            assert!(err.contains("OpenRefused"), "{err}");
            refusals += 1;
        }
    }
    eprintln!(
        "{calls} opens by one caller in {:.2} s; {refusals} refused",
        started.elapsed().as_secs_f64()
    );
    assert!(refusals >= calls - keeper::service::OPENS_PER_WINDOW as usize);
    std::thread::sleep(Duration::from_millis(1500)); // counted refusals reach the journal each second
    let stranger_refused: Vec<RequestRow> = rows_of(w, Action::Open)
        .into_iter()
        .filter(|r| {
            r.user_name == STRANGER && r.state == State::Refused && r.outcome.contains("times in")
        })
        .collect();
    let counted: u64 = stranger_refused.iter().map(|r| r.calls).sum();
    eprintln!(
        "the flood's refusals: {} journal rows for {counted} calls",
        stranger_refused.len()
    );
    assert_eq!(counted, refusals as u64);
    assert!(stranger_refused.len() <= 11, "{}", stranger_refused.len());
    assert_eq!(w.tacid(STRANGER, &["data", "close", name]).0, 0);
}

#[test]
fn bus_closes_the_keeper_did_not_ask_for_are_journalled_and_nothing_stays_mounted() {
    let Some((mut ow, _guard)) = open_world(&["--open-idle-secs", "1"]) else {
        return;
    };
    let name = ow.name.clone();
    let owner_uid = uid_of(OWNER);

    // Idle: the stem closes it; the keeper journals it at its next look.
    assert_eq!(ow.w.tacid(OWNER, &["data", "open", &name]).0, 0);
    let idle = testbed::wait_until(Duration::from_secs(6), || {
        mounts_under(&ow.open_dir).is_empty()
    })
    .expect("the idle open is closed");
    eprintln!(
        "idle close after {:.2} s (idle time 1 s)",
        idle.as_secs_f64()
    );
    assert_eq!(ow.w.tacid(OWNER, &["data", "list"]).0, 0);
    let closes = rows_of(&ow.w, Action::Close);
    assert!(
        closes
            .iter()
            .any(|r| r.uid == owner_uid && r.outcome.starts_with("closed (idle)")),
        "{closes:?}"
    );

    // The keeper killed while opens are open: the stem closes them at once; the next
    // keeper journals them closed.
    let w = &mut ow.w;
    w.kill_stem();
    w.stem_args.retain(|a| a != "--open-idle-secs" && a != "1");
    w.start_stem();
    assert_eq!(w.tacid(OWNER, &["data", "open", &name]).0, 0);
    assert_eq!(w.tacid(APPROVER, &["data", "open", &name]).0, 0);
    assert_eq!(mounts_under(&ow.open_dir).len(), 2);
    w.kill_keeper();
    let gone = testbed::wait_until(Duration::from_secs(5), || {
        mounts_under(&ow.open_dir).is_empty()
    })
    .expect("the stem closes a killed keeper's opens");
    eprintln!(
        "a killed keeper's 2 opens closed after {:.0} ms",
        gone.as_secs_f64() * 1e3
    );
    w.start_keeper(None);
    let settled = testbed::wait_until(Duration::from_secs(10), || {
        rows_of(w, Action::Open)
            .iter()
            .all(|r| r.state != State::Open)
    });
    assert!(settled.is_some(), "the next keeper journals them closed");
    let closes = rows_of(w, Action::Close);
    assert_eq!(
        closes
            .iter()
            .filter(|r| r.outcome.starts_with("closed when the keeper stopped"))
            .count(),
        2,
        "{closes:?}"
    );

    // The stem killed with an open: it stays until the next stem starts, which closes it;
    // the keeper journals it.
    assert_eq!(w.tacid(OWNER, &["data", "open", &name]).0, 0);
    w.kill_stem();
    assert_eq!(mounts_under(&ow.open_dir).len(), 1, "SIGKILL leaves it");
    w.start_stem();
    assert_eq!(
        mounts_under(&ow.open_dir),
        Vec::<PathBuf>::new(),
        "closed at start"
    );
    assert_eq!(w.tacid(OWNER, &["data", "list"]).0, 0);
    assert!(
        rows_of(w, Action::Close).iter().any(|r| r
            .outcome
            .starts_with("closed by the stem before its idle time")),
        "the killed stem's close is journalled"
    );
    assert!(rows_of(w, Action::Open)
        .iter()
        .all(|r| r.state != State::Open));
}

/// Home directory name that was another uid's directory in the snapshot (a login name
/// reused after an account was removed).
const REUSED: &str = "tacid-open-reused";

#[test]
fn bus_a_diff_shows_a_person_only_what_open_would_let_them_read() {
    let Some(w) = World::start() else { return };
    let owner = ensure_user(OWNER, &format!("{}/{OWNER}", layout::HOMES_MOUNT_POINT));
    ensure_user(REUSED, &format!("{}/{REUSED}", layout::HOMES_MOUNT_POINT));
    let stranger = uid_of(STRANGER);
    let homes = w.top().join(layout::homes_subvolume().to_string());
    let make = |path: &Path, owner: &str, mode: u32, dir: bool| {
        if dir {
            std::fs::create_dir(path).expect("mkdir");
        } else {
            std::fs::write(path, "x\n").expect("write");
        }
        ok("chown", &[owner, path.to_str().expect("utf-8")]);
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let o = homes.join(OWNER);
    make(&o, &format!("{OWNER}:{OWNER}"), 0o700, true);
    // Root's 0700 directory in the owner's home; a directory of root's the owner's group
    // may list; another user's 0700 directory in a folder the owner shares.
    make(&o.join("rootonly"), "root:root", 0o700, true);
    make(
        &o.join("rootonly/root-removed.txt"),
        "root:root",
        0o644,
        false,
    );
    make(&o.join("bygroup"), &format!("root:{OWNER}"), 0o750, true);
    make(&o.join("shared"), &format!("{OWNER}:{OWNER}"), 0o777, true);
    make(
        &o.join("shared/theirs"),
        &format!("{STRANGER}:{STRANGER}"),
        0o700,
        true,
    );
    make(
        &o.join("shared/theirs/their-removed.txt"),
        &format!("{STRANGER}:{STRANGER}"),
        0o600,
        false,
    );
    // The reused name's directory was the stranger's in the snapshot.
    let r = homes.join(REUSED);
    make(&r, &format!("{STRANGER}:{STRANGER}"), 0o755, true);
    make(
        &r.join("old-owners.txt"),
        &format!("{STRANGER}:{STRANGER}"),
        0o644,
        false,
    );

    let name = w.snapshot_home();

    std::fs::remove_file(o.join("rootonly/root-removed.txt")).expect("rm");
    make(
        &o.join("rootonly/root-added.txt"),
        "root:root",
        0o644,
        false,
    );
    make(
        &o.join("bygroup/group-added.txt"),
        "root:root",
        0o644,
        false,
    );
    std::fs::remove_file(o.join("shared/theirs/their-removed.txt")).expect("rm");
    make(
        &o.join("shared/theirs/their-added.txt"),
        &format!("{STRANGER}:{STRANGER}"),
        0o600,
        false,
    );
    make(
        &o.join("mine.txt"),
        &format!("{OWNER}:{OWNER}"),
        0o600,
        false,
    );
    std::fs::remove_file(r.join("old-owners.txt")).expect("rm");
    make(
        &r.join("old-owners-new.txt"),
        &format!("{STRANGER}:{STRANGER}"),
        0o644,
        false,
    );
    ok(
        "chown",
        &[&format!("{REUSED}:{REUSED}"), r.to_str().expect("utf-8")],
    );

    let home = format!("{}/{OWNER}", layout::HOMES_MOUNT_POINT);
    let secret = ["root-removed", "root-added", "their-removed", "their-added"];
    let diff = |who: &str, path: Option<&str>| {
        let mut args = vec!["data", "diff", name.as_str()];
        args.extend(path);
        let (code, out, err) = w.tacid(who, &args);
        let mut json_args = args.clone();
        json_args.push("--json");
        let (jcode, jout, jerr) = w.tacid(who, &json_args);
        assert_eq!(code, jcode, "{err} {jerr}");
        (code, out, err, (jcode == 0).then(|| json(&jout)))
    };

    // The owner, every path form: names in what they cannot list are counted, not named.
    for (path, hidden, named) in [
        (
            None,
            4,
            &[
                "mine.txt",
                "bygroup/group-added.txt",
                "rootonly",
                "shared/theirs",
            ][..],
        ),
        (
            Some(home.clone()),
            4,
            &["mine.txt", "bygroup/group-added.txt"][..],
        ),
        (Some(format!("{home}/")), 4, &["mine.txt"][..]),
        (
            Some(format!("/home/./{OWNER}//rootonly/")),
            2,
            &["rootonly"][..],
        ),
        (
            Some(format!("{home}/shared/theirs")),
            2,
            &["shared/theirs"][..],
        ),
        (
            Some(format!("{home}/bygroup")),
            0,
            &["bygroup/group-added.txt"][..],
        ),
    ] {
        let (code, out, err, d) = diff(OWNER, path.as_deref());
        assert_eq!(code, 0, "{path:?}: {err}");
        let d = d.expect("json");
        for s in secret {
            assert!(
                !out.contains(s) && !err.contains(s),
                "{path:?} names {s}: {out}"
            );
            assert!(!d.to_string().contains(s), "{path:?} names {s}: {d}");
        }
        assert_eq!(d["paths_hidden"].as_u64(), Some(hidden), "{path:?}: {d}");
        for n in named {
            assert!(
                out.contains(&format!("{home}/{n}")),
                "{path:?}: {n} not in {out}"
            );
        }
        let shown = d["files_added"].as_u64().unwrap() + d["files_removed"].as_u64().unwrap();
        assert!(shown <= 2, "{path:?}: hidden files counted: {d}");
        if hidden > 0 {
            assert!(
                out.contains(&format!("{hidden} changes in directories you cannot read")),
                "{out}"
            );
        }
    }
    // The approver still sees every name (and counts), as restore details show them.
    let (code, out, err, _) = diff(APPROVER, None);
    assert_eq!(code, 0, "{err}");
    for s in secret {
        assert!(out.contains(s), "{s} not in {out}");
    }

    // A reused name: the directory was the stranger's in the snapshot. Refused as an open
    // is, whatever form the path takes; nothing of the old owner's is named.
    let rhome = format!("{}/{REUSED}", layout::HOMES_MOUNT_POINT);
    for path in [
        None,
        Some(rhome.clone()),
        Some(format!("{rhome}/")),
        Some(format!("/home/./{REUSED}/.")),
        Some(format!("//home//{REUSED}/sub/")),
    ] {
        let (code, out, err, _) = diff(REUSED, path.as_deref());
        assert_eq!(code, 4, "{path:?}: {out} {err}");
        assert!(
            err.contains(&format!("owned by uid {stranger} in the snapshot")),
            "{path:?}: {err}"
        );
        assert!(
            !out.contains("old-owners") && !err.contains("old-owners"),
            "{err}"
        );
    }
    // The owner's own home is theirs: not refused for that.
    assert_ne!(owner, stranger);
}
