//! The bus tier for consent, reconciliation and the refusals a person meets: the keeper's
//! RestoreConfirm checks the words (wrong, shown to another uid, for another snapshot,
//! expired), a keeper start reconciles its journal with snapshots made and deleted behind
//! its back, and each refusal of `tacid data restore` has its documented exit code, says
//! what to do, and changes nothing.
//!
//! Run (root, loop devices): `cargo build -p stem -p tacid-cli -p initrd --bins &&
//! cargo test -p keeper --test it bus_consent_and_reconcile:: -- --test-threads=1`.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::{json, uid_of, World, APPROVER, STRANGER};
use keeper::journal::{Action, RequestRow, State};
use keeper::wire::KeeperError;
use layout::{SnapshotName, SubvolumeName};

const WORDS_NOT_SHOWN: &str = "org.tacid.Keeper1.Error.WordsNotShown";

/// Take a set as the approver; its members' names, in the order asked.
fn take(w: &World, subvolumes: &[&str]) -> Vec<String> {
    let mut args = vec!["data", "snapshot", "--json"];
    args.extend_from_slice(subvolumes);
    let (code, out, err) = w.tacid(APPROVER, &args);
    assert_eq!(code, 0, "snapshot {subvolumes:?} failed: {err}");
    json(&out)["snapshots"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["name"].as_str().expect("a name").to_owned())
        .collect()
}

/// What `tacid data status --json` says is staged (the stem's own answer, via the keeper).
fn staged_per_status(w: &World) -> String {
    let (code, out, err) = w.tacid(STRANGER, &["data", "status", "--json"]);
    assert_eq!(code, 0, "status: {err}");
    let v = json(&out);
    // null: nothing staged.
    match &v["staged_snapshot"] {
        serde_json::Value::Null => String::new(),
        s => s.as_str().expect("staged_snapshot").to_owned(),
    }
}

fn restore_rows(w: &World) -> Vec<RequestRow> {
    w.journal_rows()
        .0
        .into_iter()
        .filter(|r| r.action == Action::Restore)
        .collect()
}

/// The approver's preview of `name` through the CLI: the exact words it was shown.
fn preview_words(w: &World, name: &str) -> String {
    let (code, out, err) = w.tacid(APPROVER, &["data", "restore", name, "--json"]);
    assert_eq!(code, 3, "preview of {name}: {err}");
    json(&out)["words"].as_str().expect("words").to_owned()
}

/// Ask the keeper to stage `name` as the approver with these words, as a program would.
fn confirm_as_approver(w: &World, name: &str, words: &str) -> (bool, String, String) {
    w.call_keeper_as(APPROVER, "RestoreConfirm", &[name, words])
}

fn assert_words_not_shown(what: &str, (ok, out, err): (bool, String, String), name: &str) {
    assert!(!ok, "{what}: the keeper staged it: {out}");
    assert!(err.contains(WORDS_NOT_SHOWN), "{what}: {err}");
    // It says what to do.
    assert!(
        err.contains(&format!(
            "run `tacid data restore {name}` again, read what it costs, then add --yes"
        )),
        "{what}: {err}"
    );
}

#[test]
fn bus_restore_confirm_refuses_words_not_shown_to_that_uid_for_that_snapshot_recently() {
    let Some(mut w) = World::start() else { return };
    let a = take(&w, &["/home"]).remove(0);
    let b = take(&w, &["/home"]).remove(0);
    let approver = uid_of(APPROVER);
    let words = preview_words(&w, &a);
    assert!(words.starts_with("This puts /home back to"), "{words}");

    // Wrong words: changed, and none at all.
    let changed = words.replace("then deleted", "then kept");
    assert_ne!(changed, words);
    assert_words_not_shown("changed words", confirm_as_approver(&w, &a, &changed), &a);
    assert_words_not_shown("no words", confirm_as_approver(&w, &a, ""), &a);

    // Root, through the keeper's own proxy: its own preview, given back with one more space.
    let root = w.keeper_as_root();
    let root_words = root
        .run(root.proxy.restore_preview(&b))
        .expect("root previews")
        .words;
    match root.run(root.proxy.restore_confirm(&b, &format!("{root_words} "))) {
        Err(KeeperError::WordsNotShown(m)) => assert!(m.contains("tacid data restore"), "{m}"),
        other => panic!("root's changed words: {other:?}"),
    }
    // Shown to another uid: the approver's exact words, given back by root, who was never
    // shown a preview of `a` (the text would match: it is what root would have been shown).
    match root.run(root.proxy.restore_confirm(&a, &words)) {
        Err(KeeperError::WordsNotShown(_)) => {}
        other => panic!("words shown to another uid: {other:?}"),
    }
    drop(root);
    // Shown for another snapshot: the approver was shown `a`'s words, never `b`'s.
    assert_words_not_shown(
        "words of another snapshot",
        confirm_as_approver(&w, &b, &words),
        &b,
    );

    // Expired: the very words shown, but 16 minutes ago (the window is 15).
    w.stop_keeper();
    assert!(w.age_previews(approver, &a, Duration::from_secs(16 * 60)) >= 1);
    w.start_keeper(None);
    assert_words_not_shown("expired words", confirm_as_approver(&w, &a, &words), &a);

    // Nothing was staged, by any of them: no request on disk, the stem says none, and the
    // journal says each was refused, with the words given and what to do.
    assert!(w.request_file().is_none(), "a refused confirmation staged");
    assert_eq!(staged_per_status(&w), "");
    let refused: Vec<_> = restore_rows(&w)
        .into_iter()
        .map(|r| {
            assert!(
                r.outcome.contains("not the words the keeper showed you"),
                "{r:?}"
            );
            (r.uid, r.subject, r.words_shown, r.state)
        })
        .collect();
    let expect = |uid: u32, name: &str, words: &str| {
        (uid, name.to_owned(), words.to_owned(), State::Refused)
    };
    assert_eq!(
        refused,
        [
            expect(approver, &a, &changed),
            expect(approver, &a, ""),
            expect(0, &b, &format!("{root_words} ")),
            expect(0, &a, &words),
            expect(approver, &b, &words),
            expect(approver, &a, &words),
        ]
    );

    // The same words inside the window (14 minutes ago) do stage: the refusal above was the
    // age alone, and the direct call works when the words are right.
    w.stop_keeper();
    assert!(w.age_previews(approver, &a, Duration::from_secs(14 * 60)) >= 1);
    w.start_keeper(None);
    let (ok, out, err) = confirm_as_approver(&w, &a, &words);
    assert!(ok, "words shown 14 minutes ago: {err}");
    assert!(out.contains("reboot to put it back"), "{out}");
    let request = w.request_file().expect("staged");
    assert!(request.starts_with(&format!("@home {a} ")), "{request}");
    assert_eq!(staged_per_status(&w), a);
    let last = restore_rows(&w).pop().expect("the staging row");
    assert_eq!(
        (last.uid, last.state, last.words_shown.as_str()),
        (approver, State::Staged, words.as_str())
    );
}

/// The lines of `tacid data list` about one snapshot: its name line and the indented ones.
fn entry_of<'a>(list: &'a str, name: &str) -> Option<Vec<&'a str>> {
    let mut lines = list.lines().skip_while(|l| !l.starts_with(name));
    let first = lines.next()?;
    let mut out = vec![first];
    out.extend(lines.take_while(|l| l.starts_with(' ')));
    Some(out)
}

fn btrfs(args: &[&str]) {
    let out = Command::new("btrfs")
        .args(args)
        .output()
        .expect("btrfs runs");
    assert!(
        out.status.success(),
        "btrfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bus_a_keeper_start_reconciles_snapshots_made_and_deleted_behind_its_back() {
    let Some(mut w) = World::start() else { return };
    let set = take(&w, &["/home", "/var/log"]);
    let (kept, deleted) = (set[0].clone(), set[1].clone());
    let store = w.top().join(layout::SNAPSHOTS_SUBVOLUME);
    w.stop_keeper();

    // Behind its back: two read-only snapshots with tacid names, one journalled one deleted.
    let mut strangers = Vec::new();
    for sub in ["@home", "@log"] {
        let name = SnapshotName::new(
            SubvolumeName::parse(sub).expect("a subvolume"),
            SystemTime::now(),
        )
        .expect("a name")
        .to_string();
        btrfs(&[
            "subvolume",
            "snapshot",
            "-r",
            w.top().join(sub).to_str().expect("utf-8"),
            store.join(&name).to_str().expect("utf-8"),
        ]);
        strangers.push(name);
    }
    btrfs(&[
        "subvolume",
        "delete",
        "--commit-after",
        store.join(&deleted).to_str().expect("utf-8"),
    ]);

    // The start itself reconciles: the journal says so before anybody asks anything.
    w.start_keeper(None);
    w.wait_keeper_log_times("journal and disk reconciled", 2);
    let (_, rows) = w.journal_rows();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} is not in the journal: {rows:#?}"))
    };
    let gone = row(&deleted);
    assert_eq!(gone.state, "gone", "{gone:?}");
    // Gone from disk, but the record of who asked and why stays.
    assert_eq!(
        gone.request.as_ref().map(|r| r.user_name.as_str()),
        Some(APPROVER)
    );
    for name in &strangers {
        let r = row(name);
        assert_eq!(
            (r.state.as_str(), r.request.is_none()),
            ("present", true),
            "{r:?}"
        );
    }
    assert_eq!(row(&kept).state, "present");

    // What anybody reads.
    let (code, out, err) = w.tacid(STRANGER, &["data", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("3 snapshots, newest first."), "{out}");
    assert!(
        entry_of(&out, &deleted).is_none(),
        "a deleted one is listed:\n{out}"
    );
    for (name, path) in strangers.iter().zip(["/home", "/var/log"]) {
        let entry = entry_of(&out, name).unwrap_or_else(|| panic!("{name} not listed:\n{out}"));
        assert_eq!(entry[0], format!("{name}  of {path}"), "{out}");
        assert!(
            entry.contains(&"    why    unknown origin: on disk, but not taken through the keeper"),
            "{entry:#?}"
        );
    }
    let entry = entry_of(&out, &kept).expect("the kept one is listed");
    assert!(
        entry.contains(
            &format!("    why    asked by {APPROVER} (uid {})", uid_of(APPROVER)).as_str()
        ),
        "{entry:#?}"
    );

    let (code, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    assert_eq!(code, 0);
    let list = json(&out);
    let list = &list["snapshots"];
    let listed: BTreeSet<&str> = list
        .as_array()
        .expect("an array")
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    let expected: BTreeSet<&str> = strangers
        .iter()
        .chain([&kept])
        .map(String::as_str)
        .collect();
    assert_eq!(listed, expected);
    let entry = |name: &str| {
        list.as_array()
            .expect("an array")
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .expect("listed")
    };
    for (name, of) in strangers.iter().zip(["@home", "@log"]) {
        let e = entry(name);
        assert_eq!(
            (
                e["origin"].as_str(),
                e["of"].as_str(),
                e["asked_by"].as_str(),
                e["asked_by_uid"].as_u64(),
                e["set_id"].as_i64(),
                e["reason"].as_str()
            ),
            (Some("unknown-origin"), Some(of), None, None, None, None),
            "{e}"
        );
    }
    let e = entry(&kept);
    assert_eq!(
        (e["origin"].as_str(), e["asked_by"].as_str()),
        (Some("journal"), Some(APPROVER)),
        "{e}"
    );

    // Status counts them, for programs and for people.
    let (code, out, _) = w.tacid(STRANGER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["unknown_origin"], 2, "{out}");
    let (code, out, _) = w.tacid(STRANGER, &["data", "status"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("2 snapshots on disk were not taken through the keeper (unknown origin)."),
        "{out}"
    );

    // Another start finds nothing new: no row twice, the gone one stays gone.
    w.stop_keeper();
    w.start_keeper(None);
    w.wait_keeper_log_times("journal and disk reconciled", 3);
    let (code, out, _) = w.tacid(STRANGER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["unknown_origin"], 2, "{out}");
    let (_, again) = w.journal_rows();
    assert_eq!(again, rows, "a second reconciliation changed the journal");
}

#[test]
fn bus_restore_refusals_have_their_exit_codes_say_what_to_do_and_change_nothing() {
    let Some(w) = World::start() else { return };
    let home = take(&w, &["/home"]).remove(0);
    let log = take(&w, &["/var/log"]).remove(0);
    let nix = take(&w, &["/nix"]).remove(0);
    assert!(nix.starts_with("@nix."), "{nix}");
    let disk_before = w.disk_snapshots();
    let rows_before = w.journal_rows().0.len();

    // No such snapshot (a well-formed name), not a snapshot name, and @nix: with and
    // without --yes, for people and as JSON.
    let ghost = SnapshotName::new(
        SubvolumeName::parse("@home").expect("@home"),
        UNIX_EPOCH + Duration::from_secs(1_600_000_000),
    )
    .expect("a name")
    .to_string();
    let cases: [(&str, i32, &str, &[&str]); 4] = [
        (
            ghost.as_str(),
            5,
            "NoSuchSnapshot",
            &[
                &format!("there is no snapshot named {ghost}"),
                "see `tacid data list`",
            ],
        ),
        (
            "not-a-snapshot",
            5,
            "InvalidArgument",
            &[
                "\"not-a-snapshot\" is not a snapshot name",
                "see `tacid data list`",
            ],
        ),
        (
            "@root.2026-12-01T140200.000000Z",
            5,
            "InvalidArgument",
            &[
                "snapshots of @root are never taken",
                "see `tacid data list`",
            ],
        ),
        (
            nix.as_str(),
            6,
            "NotAllowedForSubvolume",
            &[
                "/nix (@nix) is never put back",
                "only /persist, /var/log and /home are put back",
                "boot an older NixOS generation",
            ],
        ),
    ];
    for (name, code, error, says) in cases {
        for args in [
            &["data", "restore", name][..],
            &["data", "restore", name, "--yes"][..],
        ] {
            let (got, out, err) = w.tacid(APPROVER, args);
            assert_eq!(got, code, "tacid {args:?}: {out}{err}");
            assert!(out.is_empty(), "tacid {args:?} printed: {out}");
            for s in says {
                assert!(err.contains(s), "tacid {args:?}: {s:?} not in {err}");
            }
        }
        let (got, out, _) = w.tacid(APPROVER, &["data", "restore", name, "--yes", "--json"]);
        assert_eq!(got, code);
        let v = json(&out);
        assert_eq!(
            (v["error"].as_str(), v["exit_code"].as_i64()),
            (Some(error), Some(i64::from(code))),
            "{v}"
        );
        assert!(
            v["message"].as_str().is_some_and(|m| m.contains(says[0])),
            "{v}"
        );
    }
    assert!(w.request_file().is_none());
    assert_eq!(w.disk_snapshots(), disk_before);
    assert_eq!(
        w.journal_rows().0.len(),
        rows_before,
        "a refused preview or restore was journalled as shown or asked"
    );

    // The preview as JSON: the documented fields, and nothing staged.
    let (code, out, _) = w.tacid(APPROVER, &["data", "list", "--json"]);
    assert_eq!(code, 0);
    let taken = json(&out)["snapshots"]
        .as_array()
        .expect("an array")
        .iter()
        .find(|e| e["name"] == log.as_str())
        .expect("listed")["taken_micros"]
        .as_i64();
    let (code, out, err) = w.tacid(APPROVER, &["data", "restore", &log, "--json"]);
    assert_eq!(code, 3, "{err}");
    let p = json(&out);
    assert_eq!(
        (
            p["snapshot"].as_str(),
            p["of"].as_str(),
            p["of_path"].as_str(),
            p["taken_micros"].as_i64(),
            p["already_staged"].as_bool()
        ),
        (
            Some(log.as_str()),
            Some("@log"),
            Some("/var/log"),
            taken,
            Some(false)
        ),
        "{p}"
    );
    assert!(
        p["words"]
            .as_str()
            .is_some_and(|s| s.starts_with("This puts /var/log back to")
                && s.ends_with("It happens at the next reboot.")),
        "{p}"
    );
    assert!(w.request_file().is_none(), "a preview staged");

    // A second, different restore while one is staged: refused, and the staged one stands.
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &home, "--yes"]);
    assert_eq!(code, 0, "{err}");
    let staged = w.request_file().expect("staged");
    for args in [
        &["data", "restore", &log, "--yes"][..],
        &["data", "restore", &log, "--yes", "--json"][..],
    ] {
        let (code, out, err) = w.tacid(APPROVER, args);
        assert_eq!(code, 6, "tacid {args:?}: {out}{err}");
        assert!(
            err.contains(&format!("a restore is already staged (@home {home} "))
                && err.contains("cancel it first with `tacid data cancel`"),
            "tacid {args:?}: {err}"
        );
        if args.contains(&"--json") {
            let v = json(&out);
            assert_eq!(
                (v["error"].as_str(), v["exit_code"].as_i64()),
                (Some("AnotherRestoreStaged"), Some(6)),
                "{v}"
            );
        }
        assert_eq!(w.request_file().as_deref(), Some(staged.as_str()));
        assert_eq!(staged_per_status(&w), home);
    }
    let refused: Vec<_> = restore_rows(&w)
        .into_iter()
        .filter(|r| r.subject == log)
        .collect();
    assert_eq!(refused.len(), 2, "{refused:#?}");
    for r in &refused {
        assert_eq!(r.state, State::Failed, "{r:?}");
        assert!(r.outcome.contains("already staged"), "{r:?}");
    }
    let (code, out, _) = w.tacid(APPROVER, &["data", "restore", &home, "--json"]);
    assert_eq!(code, 3);
    assert_eq!(json(&out)["already_staged"], true, "{out}");

    // Cancel as JSON: the documented fields, then "nothing was staged".
    let (code, out, err) = w.tacid(STRANGER, &["data", "cancel", "--json"]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(json(&out)["error"], "NotAuthorized", "{out}");
    assert!(
        w.request_file().is_some(),
        "a stranger withdrew the restore"
    );
    let (code, out, err) = w.tacid(APPROVER, &["data", "cancel", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json(&out),
        serde_json::json!({
            "schema": 1,
            "withdrawn": true,
            "snapshot": home,
            "of_path": "/home",
            "message": format!("withdrawn: /home will not go back to {home}; nothing else changed"),
        })
    );
    assert!(w.request_file().is_none());
    let (code, out, _) = w.tacid(APPROVER, &["data", "cancel", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(
        json(&out),
        serde_json::json!({
            "schema": 1,
            "withdrawn": false,
            "snapshot": null,
            "of_path": null,
            "message": "no restore was staged; nothing changed",
        })
    );

    // With nothing staged, the restore refused above goes through: the refusal was the
    // staged one alone.
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &log, "--yes"]);
    assert_eq!(code, 0, "{err}");
    let request = w.request_file().expect("staged");
    assert!(request.starts_with(&format!("@log {log} ")), "{request}");
}
