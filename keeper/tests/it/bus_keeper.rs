//! The bus tier for the keeper: real dbus-daemon with the shipped policies, the stem as
//! root, the keeper as `tacid-keeper`, the CLI as an approver (in the approver group,
//! `layout::defaults::APPROVER_GROUP`) and a stranger.
//!
//! Run (root, loop devices): `cargo build -p stem -p tacid-cli -p initrd --bins &&
//! cargo test -p keeper --test it bus_keeper::`. The keeper killed at named points of a
//! request is in the `hooks` binary (`--features test-hooks --test hooks`).

use crate::common::{self, json};

use std::collections::HashSet;

use crate::common::{uid_of, World, APPROVER, APPROVER_GROUP, STRANGER};
use keeper::journal::{Action, State};

#[test]
fn bus_a_stranger_is_refused_and_journalled_an_approver_stages() {
    let Some(w) = World::start() else { return };
    let name = w.snapshot_home();

    // The stranger may look, but not restore, snapshot or cancel.
    let (code, _, err) = w.tacid(STRANGER, &["data", "restore", &name, "--yes"]);
    assert_eq!(code, 4, "stranger restore: {err}");
    assert!(
        err.contains(&format!(
            "{STRANGER} (uid {}) is not in the group \"{APPROVER_GROUP}\"",
            uid_of(STRANGER)
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("gpasswd -a USER {APPROVER_GROUP}")),
        "{err}"
    );
    assert_eq!(w.tacid(STRANGER, &["data", "snapshot"]).0, 4);
    assert_eq!(w.tacid(STRANGER, &["data", "cancel"]).0, 4);
    let (code, out, _) = w.tacid(STRANGER, &["data", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&name) && out.contains("asked by tacid-approver"),
        "{out}"
    );
    assert!(
        w.request_file().is_none(),
        "a refused restore staged something"
    );

    // Nobody but the keeper's user reaches the stem, not even an approver.
    for user in [STRANGER, APPROVER] {
        let (answered, _, err) = w.dbus_send_as(
            user,
            layout::names::STEM_BUS_NAME,
            layout::names::STEM_OBJECT_PATH,
            "List",
            &[],
        );
        assert!(
            !answered && err.contains("AccessDenied"),
            "{user} reached the stem: {err}"
        );
    }

    let (requests, _) = w.journal_rows();
    let refused: Vec<_> = requests
        .iter()
        .filter(|r| r.state == State::Refused)
        .collect();
    assert_eq!(refused.len(), 3, "{requests:#?}");
    let r = refused[0];
    assert_eq!(
        (r.action, r.uid, r.user_name.as_str(), r.subject.as_str()),
        (Action::Restore, uid_of(STRANGER), STRANGER, name.as_str())
    );
    assert!(
        r.outcome
            .contains(&format!("is not in the group \"{APPROVER_GROUP}\"")),
        "{r:?}"
    );
    assert!(
        r.words_shown.starts_with("This puts /home back to"),
        "{r:?}"
    );

    // The approver: a preview changes nothing and exits 3; --yes stages; never "restored".
    let (code, out, _) = w.tacid(APPROVER, &["data", "restore", &name]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.starts_with("This puts /home back to ")
            && out.contains(
                "Everything written to /home since then is set aside as @home.\u{2026} for 7 days \
                 (undo: `tacid data restore @home.\u{2026}`), then deleted. It happens at the next \
                 reboot."
            ),
        "{out}"
    );
    assert!(w.request_file().is_none());
    let (code, out, err) = w.tacid(APPROVER, &["data", "restore", &name, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Staged. Nothing is put back yet: reboot"),
        "{out}"
    );
    assert!(!out.to_lowercase().contains("restored"), "{out}");
    let request = w.request_file().expect("the request is staged");
    assert!(request.starts_with(&format!("@home {name} ")), "{request}");
    let (code, out, _) = w.tacid(APPROVER, &["data", "restore", &name, "--yes", "--json"]);
    assert_eq!(code, 0);
    let v = json(&out);
    assert_eq!(
        (
            v["staged"]["already_staged"].as_bool(),
            v["staged"]["reboot_needed"].as_bool()
        ),
        (Some(true), Some(true))
    );

    let (code, out, _) = w.tacid(STRANGER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    let status = json(&out);
    assert_eq!(status["staged_snapshot"], name.as_str());
    assert_eq!(status["staged_by"], APPROVER);
    assert!(status["staged_words"]
        .as_str()
        .is_some_and(|s| s.starts_with("This puts /home back to")));
    let (_, out, _) = w.tacid(APPROVER, &["data", "list", "--json"]);
    let list = json(&out)["snapshots"].clone();
    assert_eq!(list[0]["name"], name.as_str());
    assert_eq!(
        (list[0]["pinned"].as_bool(), list[0]["reason"].as_str()),
        (Some(true), Some("before the test"))
    );

    let (requests, _) = w.journal_rows();
    let staged: Vec<_> = requests
        .iter()
        .filter(|r| r.action == Action::Restore && r.uid == uid_of(APPROVER))
        .collect();
    assert_eq!(
        staged.iter().map(|r| r.state).collect::<Vec<_>>(),
        [State::Staged, State::AlreadyStaged]
    );
    assert_eq!(
        staged[0].words_shown,
        status["staged_words"].as_str().unwrap_or_default()
    );

    // What a person reads (shown with --nocapture).
    for args in [
        &["data", "list"][..],
        &["data", "status"][..],
        &["data", "restore", &name][..],
    ] {
        let (_, out, _) = w.tacid(STRANGER, args);
        eprintln!("$ tacid {}\n{out}", args.join(" "));
    }
    let (code, out, _) = w.tacid(STRANGER, &["data", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("STAGED the next reboot puts /home back to this snapshot"),
        "{out}"
    );

    let (code, _, err) = w.tacid(APPROVER, &["data", "cancel"]);
    assert_eq!(code, 0, "{err}");
    assert!(w.request_file().is_none());
    let (code, out, _) = w.tacid(APPROVER, &["data", "cancel"]);
    assert_eq!(
        (code, out.trim()),
        (0, "no restore was staged; nothing changed")
    );
}

#[test]
fn bus_fifty_concurrent_snapshots_all_complete_unique_and_journalled() {
    let Some(w) = World::start() else { return };
    let children: Vec<_> = (0..50)
        .map(|_| w.spawn_tacid(APPROVER, &["data", "snapshot", "/home", "--json"]))
        .collect();
    let mut names = HashSet::new();
    for c in children {
        let out = c.wait_with_output().expect("tacid runs");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json(&String::from_utf8_lossy(&out.stdout));
        names.insert(v["snapshots"][0]["name"].as_str().expect("name").to_owned());
    }
    assert_eq!(names.len(), 50, "names are not unique");
    let (requests, snapshots) = w.journal_rows();
    let complete = requests
        .iter()
        .filter(|r| r.action == Action::Snapshot && r.state == State::Complete)
        .count();
    assert_eq!(complete, 50);
    let journalled: HashSet<_> = snapshots
        .iter()
        .filter(|s| s.request.is_some())
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(journalled, names);
    let (on_disk, temps) = w.disk_snapshots();
    assert_eq!(on_disk.into_iter().collect::<HashSet<_>>(), names);
    assert!(temps.is_empty(), "{temps:?}");
}

#[test]
fn bus_the_stem_going_away_and_back_is_survived() {
    let Some(mut w) = World::start() else { return };
    w.snapshot_home();
    w.kill_stem();
    let (code, _, err) = w.tacid(APPROVER, &["data", "snapshot", "/home"]);
    assert_eq!(code, 7, "{err}");
    assert!(
        err.contains("the stem is not running; start tacid-stem.service"),
        "{err}"
    );
    let (code, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["stem_running"], false);
    w.start_stem();
    w.snapshot_home();
    let (code, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["stem_running"], true);
    // The stem dies with the call in its hands: the caller is told, nothing is retried
    // behind its back, and the set is settled from the disk once the stem is back.
    w.freeze_stem();
    let cli = w.spawn_tacid(APPROVER, &["data", "snapshot", "/home"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    w.kill_stem();
    let out = cli.wait_with_output().expect("tacid ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(err.contains("it stopped while answering"), "{err}");
    w.start_stem();
    assert_eq!(w.tacid(STRANGER, &["data", "list"]).0, 0);

    // Every set asked for while the stem was away or dying is settled, not left pending.
    let (requests, _) = w.journal_rows();
    let states: Vec<_> = requests
        .iter()
        .filter(|r| r.action == Action::Snapshot)
        .map(|r| r.state)
        .collect();
    assert_eq!(
        states,
        [
            State::Complete,
            State::Failed,
            State::Complete,
            State::Failed
        ],
        "{requests:#?}"
    );
}

/// The journal lives on @snapshots: putting @persist back (by the initrd's own binary)
/// leaves every row, and the boot's outcome is journalled and reported once.
#[test]
fn bus_a_restore_of_persist_leaves_the_journal_whole_and_its_outcome_is_reported_once() {
    let Some(mut w) = World::start() else { return };
    let (code, out, err) = w.tacid(APPROVER, &["data", "snapshot", "/persist", "--json"]);
    assert_eq!(code, 0, "{err}");
    let name = json(&out)["snapshots"][0]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let marker = w.top().join("@persist").join("written-after-the-snapshot");
    std::fs::write(&marker, "lost at the restore").expect("write");
    assert_eq!(w.tacid(APPROVER, &["data", "restore", &name]).0, 3);
    assert_eq!(w.tacid(APPROVER, &["data", "restore", &name, "--yes"]).0, 0);
    let (before, _) = w.journal_rows();

    // "Reboot": the keeper stops, the initrd honours the request, the keeper starts again.
    w.stop_keeper();
    w.run_initrd_restore();
    assert!(!marker.exists(), "the restore did not put @persist back");
    w.start_keeper(None);

    let (code, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    let status = json(&out);
    assert_eq!(
        (
            status["outcome_result"].as_str(),
            status["outcome_new"].as_bool()
        ),
        (Some("done"), Some(true)),
        "{status}"
    );
    assert!(status["outcome_request"]
        .as_str()
        .is_some_and(|r| r.contains(&name)));
    assert_eq!(status["staged_snapshot"], serde_json::Value::Null);
    let (_, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    assert_eq!(
        json(&out)["outcome_new"],
        false,
        "an outcome is new only once"
    );
    let (code, out, _) = w.tacid(APPROVER, &["data", "status"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!("/persist was put back to {name}.")) && !out.contains("NEW:"),
        "{out}"
    );
    // Once to each person: the stranger has not been told yet.
    let (code, out, _) = w.tacid(STRANGER, &["data", "status"]);
    assert_eq!(code, 0);
    assert!(out.contains("NEW: At the boot of"), "{out}");

    let (after, _) = w.journal_rows();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "rows changed or were lost across the restore"
    );
}

/// A restore is undone by a restore of what it replaced (adr/0027): the boot keeps it, the
/// keeper learns it from the outcome, `status` offers the undo, `list` shows it with its
/// restore and how long it is kept, and restoring it at the next boot brings back what was
/// written after the first snapshot.
#[test]
fn bus_a_restore_is_undone_across_two_boots_by_restoring_what_it_replaced() {
    let Some(mut w) = World::start() else { return };
    let (code, out, err) = w.tacid(APPROVER, &["data", "snapshot", "/home", "--json"]);
    assert_eq!(code, 0, "{err}");
    let name = json(&out)["snapshots"][0]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let later = w.top().join("@home").join("written-after-the-snapshot");
    std::fs::write(&later, "wanted after all").expect("write");
    let (code, preview, _) = w.tacid(APPROVER, &["data", "restore", &name]);
    assert_eq!(code, 3);
    assert!(
        preview.contains("is set aside as @home.\u{2026} for 7 days"),
        "{preview}"
    );
    assert_eq!(w.tacid(APPROVER, &["data", "restore", &name, "--yes"]).0, 0);

    // The first boot puts /home back and keeps what it replaced.
    w.stop_keeper();
    w.run_initrd_restore();
    assert!(!later.exists(), "the restore did not put /home back");
    w.start_keeper(None);
    let (code, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    let undo = json(&out)["outcome_undo"]
        .as_str()
        .unwrap_or_else(|| panic!("no undo offered: {out}"))
        .to_owned();
    let kept = undo
        .strip_prefix("tacid data restore ")
        .unwrap_or_else(|| panic!("{undo}"))
        .to_owned();
    assert!(kept.starts_with("@home."), "{undo}");
    let (code, text, _) = w.tacid(STRANGER, &["data", "status"]);
    assert_eq!(code, 0);
    assert!(
        text.contains(&format!(
            "to undo it (put back what it replaced, at the next boot): {undo}"
        )),
        "{text}"
    );

    let (code, out, _) = w.tacid(APPROVER, &["data", "list", "--json"]);
    assert_eq!(code, 0);
    let list = json(&out);
    let row = list["snapshots"]
        .as_array()
        .expect("snapshots")
        .iter()
        .find(|s| s["name"] == kept.as_str())
        .unwrap_or_else(|| panic!("{kept} not listed: {list}"))
        .clone();
    assert_eq!(row["origin"], "replaced", "{row}");
    assert_eq!(row["replaced"]["restore_of"], name.as_str(), "{row}");
    // Kept a week from the boot, or from when the keeper read the outcome (a moment later
    // here; much later after a boot whose clock was not set).
    let week = 7 * 86_400 * 1_000_000_i64;
    let kept_for = row["replaced"]["kept_until_micros"].as_i64().unwrap()
        - row["replaced"]["replaced_micros"].as_i64().unwrap();
    assert!((week..week + 600 * 1_000_000).contains(&kept_for), "{row}");
    let (_, text, _) = w.tacid(APPROVER, &["data", "list"]);
    assert!(
        text.contains("what /home held before the restore of"),
        "{text}"
    );

    // The undo is an ordinary restore, with the same consent; the second boot honours it.
    assert_eq!(w.tacid(APPROVER, &["data", "restore", &kept]).0, 3);
    assert_eq!(w.tacid(STRANGER, &["data", "restore", &kept, "--yes"]).0, 4);
    assert_eq!(w.tacid(APPROVER, &["data", "restore", &kept, "--yes"]).0, 0);
    w.stop_keeper();
    w.run_initrd_restore();
    w.start_keeper(None);
    assert_eq!(
        std::fs::read_to_string(&later).expect("the file written after the snapshot is back"),
        "wanted after all"
    );
    let (_, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    let status = json(&out);
    assert!(
        status["outcome_request"]
            .as_str()
            .is_some_and(|r| r.contains(&kept)),
        "{status}"
    );
    let undo_again = status["outcome_undo"]
        .as_str()
        .unwrap_or_else(|| panic!("the undo is undoable too: {status}"))
        .to_owned();
    // Once what the undo would put back is deleted, it is no longer offered.
    let gone = undo_again
        .strip_prefix("tacid data restore ")
        .expect("undo command")
        .to_owned();
    let (code, out, err) = w.tacid(APPROVER, &["data", "delete", &gone]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    let status = json(&out);
    assert!(
        status["outcome_undo"].is_null() || status["outcome_undo"] == "",
        "an undo of a deleted snapshot is offered: {status}"
    );
}

/// SIGKILL at moments nobody chose, during a stream of requests: every request the CLI saw
/// succeed is journalled complete, nothing is left pending, and disk and journal agree.
#[test]
fn bus_the_keeper_killed_at_random_moments_loses_nothing_acknowledged() {
    let Some(mut w) = World::start() else { return };
    let address = w.address.clone();
    let tacid = common::bin("tacid");
    let stream = std::thread::spawn(move || {
        let mut acknowledged = Vec::new();
        for _ in 0..30 {
            let out = std::process::Command::new("/usr/bin/setpriv")
                .args([
                    &format!("--reuid={APPROVER}"),
                    &format!("--regid={APPROVER}"),
                    "--init-groups",
                ])
                .arg(&tacid)
                .args(["data", "snapshot", "/home", "/var/log", "--json"])
                .env("TACID_BUS_ADDRESS", &address)
                .output()
                .expect("tacid runs");
            if out.status.success() {
                let v = json(&String::from_utf8_lossy(&out.stdout));
                acknowledged.push(v["set_id"].as_i64().expect("set id"));
            }
        }
        acknowledged
    });
    w.kill_keeper_at_random_moments(4, 20, 120, 37);
    let acknowledged = stream.join().expect("the stream ends");
    assert!(!acknowledged.is_empty(), "no request got through at all");
    let (code, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["unknown_origin"], 0);
    let (requests, snapshots) = w.journal_rows();
    assert!(
        requests.iter().all(|r| r.state != State::Pending),
        "{requests:#?}"
    );
    let settled: Vec<_> = requests
        .iter()
        .filter(|r| r.outcome.contains("keeper"))
        .map(|r| r.outcome.as_str())
        .collect();
    eprintln!(
        "acknowledged {} of 30; settled after a kill: {settled:#?}",
        acknowledged.len()
    );
    for id in &acknowledged {
        let row = requests
            .iter()
            .find(|r| r.id == *id)
            .expect("an acknowledged set is journalled");
        assert_eq!(row.state, State::Complete, "{row:?}");
        let members = snapshots
            .iter()
            .filter(|s| s.request.as_ref().is_some_and(|r| r.id == *id))
            .count();
        assert_eq!(members, 2, "{row:?}");
    }
    let (on_disk, temps) = w.disk_snapshots();
    assert!(temps.is_empty(), "{temps:?}");
    let present: HashSet<_> = snapshots
        .iter()
        .filter(|s| s.state == "present")
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(on_disk.into_iter().collect::<HashSet<_>>(), present);
}

#[test]
fn bus_the_preview_counts_what_changed_and_details_are_for_approvers() {
    let Some(w) = World::start() else { return };
    let home = w.top().join("@home");
    let write = |name: &str, bytes: usize| std::fs::write(home.join(name), vec![b'x'; bytes]);
    write("kept", 10).unwrap();
    write("edited", 10).unwrap();
    write("removed", 10).unwrap();
    let name = w.snapshot_home();

    // A real change set: two files added, one edited, one removed, one directory added.
    write("new1", 4096).unwrap();
    write("new2", 4096).unwrap();
    write("edited", 8192).unwrap();
    std::fs::remove_file(home.join("removed")).unwrap();
    std::fs::create_dir(home.join("newdir")).unwrap();

    let counts = "1 file changed, 2 added, 1 removed; 1 directory added, 0 removed since then \
                  (16.0 KiB written)";
    // The approver's preview commits first, so every write so far is counted.
    let (code, out, err) = w.tacid(APPROVER, &["data", "restore", &name]);
    assert_eq!(code, 3, "{err}");
    assert!(
        out.starts_with("This puts /home back to ") && out.contains(counts),
        "{out}"
    );
    // A stranger's never makes the stem commit (adr/0016): it counts what the last commit
    // holds, here the approver's, and says so.
    let (code, out, err) = w.tacid(STRANGER, &["data", "restore", &name]);
    assert_eq!(code, 3, "{err}");
    assert!(
        out.contains(&format!("{counts}, as of the filesystem's last commit.")),
        "{out}"
    );
    // The counts are part of the words journalled as shown to the approver.
    let (requests, _) = w.journal_rows();
    let shown = requests
        .iter()
        .rfind(|r| r.action == Action::RestorePreview && r.uid == uid_of(APPROVER))
        .expect("the preview is journalled");
    assert!(shown.words_shown.contains(counts), "{shown:?}");

    // The paths: to approvers only.
    let (code, _, err) = w.tacid(STRANGER, &["data", "restore", &name, "--details"]);
    assert_eq!(code, 4, "stranger --details: {err}");
    assert!(
        err.contains(&format!("is not in the group \"{APPROVER_GROUP}\"")),
        "{err}"
    );
    let (code, out, err) = w.tacid(APPROVER, &["data", "restore", &name, "--details"]);
    assert_eq!(code, 3, "{err}");
    eprintln!("$ tacid data restore {name} --details\n{out}");
    for expected in [
        "Deleted by the restore (added since):\n  /home/new1\n  /home/new2\n  /home/newdir/\n",
        "Put back as they were (changed since):\n  /home/\n  /home/edited\n",
        "Brought back (removed since):\n  /home/removed\n",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    let (requests, _) = w.journal_rows();
    let listed: Vec<_> = requests
        .iter()
        .filter(|r| r.action == Action::RestoreDetails)
        .map(|r| (r.uid, r.state, r.words_shown.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            (uid_of(STRANGER), State::Refused, ""),
            (uid_of(APPROVER), State::Shown, "listed 6 changed paths"),
        ]
    );
}
