//! The bus tier for a set restore: a set of three taken before a switch, put back
//! as one request under one consent, through the real daemons and the CLI as an approver
//! (in wheel) and a stranger.
//!
//! The request is honoured by the real `tacid-initrd restore-data --top`, as a boot would:
//! every member put back, the outcome journalled once and reported once to each person,
//! naming every member.
//!
//! Run (root, loop devices): `cargo build -p stem -p tacid-cli -p initrd --bins &&
//! cargo test -p keeper --test it bus_set_restore::`.

use crate::common::{self, json};

use std::time::SystemTime;

use crate::common::{a_set_and_changes_since, uid_of, World, APPROVER, STRANGER};
use keeper::journal::{Action, State};

/// A snapshot's UUID, from the btrfs CLI (an oracle independent of the stem).
fn uuid_of(w: &World, name: &str) -> String {
    w.fs.show(&format!("{}/{name}", layout::SNAPSHOTS_SUBVOLUME))
        .expect("btrfs subvolume show")
        .get("UUID")
        .cloned()
        .expect("a UUID")
}

/// Commit whatever is dirty, so that the superblock's generation moves only for a commit
/// somebody asks for after this.
fn sync(w: &World) {
    let ok = std::process::Command::new("sync")
        .arg("-f")
        .arg(w.top())
        .status()
        .expect("sync runs");
    assert!(ok.success());
}

#[test]
fn bus_a_set_is_previewed_staged_as_one_request_with_one_consent_and_cancelled_whole() {
    let Some(w) = World::start() else { return };
    let set = a_set_and_changes_since(&w);
    let id = set.id.as_str();

    // The list says which set each snapshot is of.
    let (code, out, _) = w.tacid(STRANGER, &["data", "list"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.matches(&format!("\n    set    {id}\n")).count(),
        3,
        "{out}"
    );

    // The approver's preview: each member and the total, in the words of what is lost; it
    // changes nothing (exit 3) and never says "restored".
    let (code, out, err) = w.tacid(APPROVER, &["data", "restore", id]);
    assert_eq!(code, 3, "{err}");
    eprintln!("$ tacid data restore {id}\n{out}");
    assert!(
        out.starts_with(&format!(
            "This puts back 3 subvolumes of set {id}, taken together before switching to \
             generation 42 on "
        )),
        "{out}"
    );
    for (path, counts) in [
        (
            "/persist",
            "0 files changed, 1 added, 0 removed since then (4.0 KiB written)",
        ),
        (
            "/var/log",
            "0 files changed, 2 added, 0 removed since then (8.0 KiB written)",
        ),
        (
            "/home",
            "1 file changed, 0 added, 0 removed since then (8.0 KiB written)",
        ),
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("  {path} back to ")))
            .unwrap_or_else(|| panic!("no line for {path} in:\n{out}"));
        assert!(
            line.contains(&format!(
                ": {counts}. Everything written to {path} since then is set aside as {sub}.\u{2026} \
                 for 7 days (undo: `tacid data restore {sub}.\u{2026}`), then deleted.",
                sub = layout::SUBVOLUMES
                    .iter()
                    .find(|s| s.mount_point == Some(path))
                    .map_or("?", |s| s.name)
            )),
            "{line}"
        );
    }
    assert!(
        out.contains(
            "\nIn all: 1 file changed, 3 added, 0 removed since then (20.0 KiB written).\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("\nIt happens at the next reboot, to all of them together.\n"),
        "{out}"
    );
    assert!(!out.contains("Not put back"), "{out}");
    assert!(
        out.contains(&format!("To stage it: tacid data restore {id} --yes")),
        "{out}"
    );
    assert!(!out.to_lowercase().contains("restored"), "{out}");
    assert!(w.request_file().is_none(), "a preview staged something");

    // The same in JSON, for programs: every member's counts, and the total.
    let (code, out, _) = w.tacid(APPROVER, &["data", "restore", id, "--json"]);
    assert_eq!(code, 3);
    let p = json(&out);
    let members = p["members"].as_array().expect("members");
    assert_eq!(
        members
            .iter()
            .map(|m| (m["of_path"].as_str(), m["put_back"].as_bool()))
            .collect::<Vec<_>>(),
        [
            (Some("/persist"), Some(true)),
            (Some("/var/log"), Some(true)),
            (Some("/home"), Some(true))
        ]
    );
    assert_eq!(members[1]["changes"]["files_added"], 2);
    assert_eq!(
        (
            p["total"]["files_added"].as_u64(),
            p["total"]["files_modified"].as_u64(),
            p["total"]["bytes_written"].as_u64(),
            p["total"]["complete"].as_bool()
        ),
        (Some(3), Some(1), Some(20480), Some(true))
    );

    // --only leaves a member out, and the words say so; by a member's name with --set.
    let (code, out, err) = w.tacid(
        APPROVER,
        &[
            "data",
            "restore",
            &set.home,
            "--set",
            "--only",
            "/persist,@log",
        ],
    );
    assert_eq!(code, 3, "{err}");
    eprintln!(
        "$ tacid data restore {} --set --only /persist,@log\n{out}",
        set.home
    );
    assert!(
        out.starts_with(&format!("This puts back 2 subvolumes of set {id}, ")),
        "{out}"
    );
    assert!(
        out.contains("\nNot put back: /home (left out as asked); it stays as it is now.\n"),
        "{out}"
    );
    assert!(!out.contains("\n  /home back to"), "{out}");
    assert!(
        out.contains(&format!(
            "To stage it: tacid data restore {id} --only /persist,/var/log --yes"
        )),
        "{out}"
    );
    // Without --set, a member's name is the single restore it always was.
    let (code, out, _) = w.tacid(APPROVER, &["data", "restore", &set.home]);
    assert_eq!(code, 3);
    assert!(out.starts_with("This puts /home back to "), "{out}");
    // What is not a member, or not a set, is named as such.
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", id, "--only", "/nix"]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains(&format!("set {id} has no snapshot of /nix")),
        "{err}"
    );
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", "999"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("there is no snapshot set 999"), "{err}");

    // A stranger may look, and the stem does not commit for it (adr/0016); it may not
    // stage, nor list the paths.
    sync(&w);
    let generation = w.fs.superblock_generation().expect("the superblock");
    let (code, out, err) = w.tacid(STRANGER, &["data", "restore", id]);
    assert_eq!(code, 3, "{err}");
    assert!(
        out.contains("\nCounted as of the filesystem's last commit.\n")
            && out.contains("\nIn all: 1 file changed, 3 added, 0 removed since then"),
        "{out}"
    );
    assert_eq!(
        w.fs.superblock_generation().expect("the superblock"),
        generation,
        "a stranger's set preview made the filesystem commit"
    );
    let (code, _, err) = w.tacid(STRANGER, &["data", "restore", id, "--yes"]);
    assert_eq!(code, 4, "stranger --yes: {err}");
    assert!(err.contains("is not in the group \"wheel\""), "{err}");
    let (code, _, err) = w.tacid(STRANGER, &["data", "restore", id, "--details"]);
    assert_eq!(code, 4, "stranger --details: {err}");
    assert!(
        w.request_file().is_none(),
        "a refused restore staged something"
    );

    // The approver's paths, member by member.
    let (code, out, err) = w.tacid(APPROVER, &["data", "restore", id, "--details"]);
    assert_eq!(code, 3, "{err}");
    for expected in [
        format!("\nIn /persist (since {}):\nDeleted by the restore (added since):\n  /persist/p-new\n", set.persist),
        format!("\nIn /var/log (since {}):\nDeleted by the restore (added since):\n  /var/log/l-new1\n  /var/log/l-new2\n", set.log),
        format!("\nIn /home (since {}):\nPut back as they were (changed since):\n  /home/edited\n", set.home),
    ] {
        assert!(out.contains(&expected), "missing {expected:?} in:\n{out}");
    }

    // --yes: one request of three lines, in the layout's order, each with its UUID.
    let (code, out, err) = w.tacid(APPROVER, &["data", "restore", id, "--yes"]);
    assert_eq!(code, 0, "{err}");
    eprintln!("$ tacid data restore {id} --yes\n{out}");
    assert!(
        out.contains(&format!(
            "Staged, as one request. Nothing is put back yet: reboot to put /persist, /var/log \
             and /home back together (set {id})."
        )),
        "{out}"
    );
    assert!(!out.to_lowercase().contains("restored"), "{out}");
    let request = w.request_file().expect("the request is staged");
    let expected: String = [
        ("@persist", &set.persist),
        ("@log", &set.log),
        ("@home", &set.home),
    ]
    .iter()
    .map(|(sub, name)| format!("{sub} {name} {}\n", uuid_of(&w, name)))
    .collect();
    assert_eq!(request, expected);
    let (code, out, _) = w.tacid(APPROVER, &["data", "restore", id, "--yes", "--json"]);
    assert_eq!(code, 0);
    let again = json(&out);
    assert_eq!(
        (
            again["staged"]["already_staged"].as_bool(),
            again["staged"]["reboot_needed"].as_bool(),
            again["staged"]["members"].as_array().map(Vec::len)
        ),
        (Some(true), Some(true), Some(3))
    );
    assert_eq!(w.request_file().as_deref(), Some(expected.as_str()));

    // Another restore is refused while the set is staged: a member alone, or part of it.
    // A member's own preview does not call it "already staged": only the whole set is.
    let (code, out, _) = w.tacid(APPROVER, &["data", "restore", &set.home]);
    assert_eq!(code, 3);
    assert!(!out.contains("already staged"), "{out}");
    let (_, out, _) = w.tacid(APPROVER, &["data", "restore", &set.home, "--json"]);
    assert_eq!(json(&out)["already_staged"], false, "{out}");
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &set.home, "--yes"]);
    assert_eq!(code, 6, "{err}");
    assert!(err.contains("a restore is already staged"), "{err}");
    let (code, _, err) = w.tacid(
        APPROVER,
        &["data", "restore", id, "--only", "/home", "--yes"],
    );
    assert_eq!(code, 6, "{err}");
    // Every member is protected while it is staged.
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &set.log]);
    assert_eq!(code, 10, "{err}");

    // Status and list name every member the staged restore puts back.
    let (code, out, _) = w.tacid(STRANGER, &["data", "status"]);
    assert_eq!(code, 0);
    eprintln!("$ tacid data status\n{out}");
    assert!(
        out.starts_with(&format!(
            "A restore of 3 subvolumes is staged: the next reboot puts them back together:\n  \
             /persist to {}\n  /var/log to {}\n  /home to {}\n",
            set.persist, set.log, set.home
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "  staged by {APPROVER}, who was shown: This puts back 3 subvolumes of set {id}"
        )),
        "{out}"
    );
    let (_, out, _) = w.tacid(STRANGER, &["data", "status", "--json"]);
    let status = json(&out);
    assert_eq!(status["staged_snapshot"], set.names().join(" "));
    assert_eq!(status["staged_of_path"], "/persist /var/log /home");
    let (_, out, _) = w.tacid(STRANGER, &["data", "list"]);
    for path in ["/persist", "/var/log", "/home"] {
        assert!(
            out.contains(&format!(
                "STAGED the next reboot puts {path} back to this snapshot, together with 2 others"
            )),
            "{out}"
        );
    }

    // The journal: one consent row, naming every member, with the whole set's words; the
    // stranger's attempt refused.
    let (requests, _) = w.journal_rows();
    let consents: Vec<_> = requests
        .iter()
        .filter(|r| r.action == Action::Restore && r.uid == uid_of(APPROVER))
        .collect();
    assert_eq!(
        consents
            .iter()
            .map(|r| (r.state, r.subject.as_str()))
            .collect::<Vec<_>>(),
        [
            (
                State::Staged,
                format!("set {id}: {}", set.names().join(" ")).as_str()
            ),
            (
                State::AlreadyStaged,
                format!("set {id}: {}", set.names().join(" ")).as_str()
            ),
            (State::Failed, set.home.as_str()),
            (State::Failed, format!("set {id}: {}", set.home).as_str()),
        ],
        "{consents:#?}"
    );
    let consent = consents[0];
    assert!(
        consent
            .words_shown
            .starts_with(&format!("This puts back 3 subvolumes of set {id}")),
        "{consent:?}"
    );
    for path in ["/persist", "/var/log", "/home"] {
        assert!(
            consent
                .words_shown
                .contains(&format!("\n  {path} back to ")),
            "{consent:?}"
        );
    }
    assert_eq!(
        status["staged_words"].as_str(),
        Some(consent.words_shown.as_str())
    );
    let refused: Vec<_> = requests
        .iter()
        .filter(|r| r.action == Action::Restore && r.uid == uid_of(STRANGER))
        .collect();
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(
        (refused[0].state, refused[0].subject.as_str()),
        (State::Refused, id)
    );

    // Cancel withdraws every member.
    let (code, out, err) = w.tacid(APPROVER, &["data", "cancel"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("withdrawn, all 3 together: /persist, /var/log and /home will not go back"),
        "{out}"
    );
    assert!(w.request_file().is_none());
    let (_, out, _) = w.tacid(STRANGER, &["data", "list"]);
    assert!(!out.contains("STAGED"), "{out}");
    let (_, out, _) = w.tacid(STRANGER, &["data", "status"]);
    assert!(out.starts_with("No restore is staged."), "{out}");
}

/// The words a person confirms are the words shown for exactly those members: the words
/// of the whole set do not stage a part of it, nor a single member's the set.
#[test]
fn bus_a_sets_consent_is_for_exactly_the_members_shown() {
    let Some(w) = World::start() else { return };
    let set = a_set_and_changes_since(&w);
    let id = set.id.as_str();
    let root = w.keeper_as_root();
    let all = root
        .run(root.proxy.set_restore_preview(id, vec![]))
        .expect("a preview of the set");
    let home = root
        .run(root.proxy.restore_preview(&set.home))
        .expect("a preview of /home alone");
    let only_home = vec!["/home".to_owned()];
    for (only, words) in [
        (only_home.clone(), all.words.as_str()),
        (vec![], home.words.as_str()),
        (only_home.clone(), home.words.as_str()),
    ] {
        let e = root
            .run(root.proxy.set_restore_confirm(id, only.clone(), words))
            .expect_err("words not shown for these members");
        assert!(
            matches!(e, keeper::wire::KeeperError::WordsNotShown(_)),
            "{only:?}: {e:?}"
        );
    }
    assert!(w.request_file().is_none());
    // Each refusal is journalled under the members it was for, whole (not cut as a name is).
    let (requests, _) = w.journal_rows();
    let refused: Vec<&str> = requests
        .iter()
        .filter(|r| r.action == Action::Restore && r.state == State::Refused)
        .map(|r| r.subject.as_str())
        .collect();
    let whole = format!("set {id}: {}", set.names().join(" "));
    assert!(refused.contains(&whole.as_str()), "{refused:?}");
    let staged = root
        .run(root.proxy.set_restore_confirm(id, vec![], &all.words))
        .expect("the set's own words");
    assert_eq!(staged.members.len(), 3);
    assert!(staged.reboot_needed && !staged.already_staged);
    assert_eq!(w.request_file().map(|r| r.lines().count()), Some(3));
}

/// A set honoured by the real `tacid-initrd` (as the boot runs it): every member put back,
/// the outcome journalled once and reported once to each person, naming every member.
#[test]
fn bus_a_set_honoured_by_the_initrd_is_put_back_whole_and_reported_once_naming_every_member() {
    let Some(mut w) = World::start() else { return };
    let set = a_set_and_changes_since(&w);
    let id = set.id.as_str();
    assert_eq!(w.tacid(APPROVER, &["data", "restore", id]).0, 3);
    assert_eq!(w.tacid(APPROVER, &["data", "restore", id, "--yes"]).0, 0);
    let text = w.request_file().expect("staged");
    let request = layout::RestoreRequest::parse(text.as_bytes()).expect("a request");
    assert_eq!(request.members().len(), 3);

    // "Reboot": the keeper stops, the initrd honours the request, the keeper starts again.
    w.stop_keeper();
    w.run_initrd_restore();
    for (sub, written_since) in [
        ("@persist", "p-new"),
        ("@log", "l-new1"),
        ("@log", "l-new2"),
    ] {
        assert!(
            !w.top().join(sub).join(written_since).exists(),
            "{sub}/{written_since} survived: the set was not put back whole"
        );
    }
    assert_eq!(
        std::fs::read(w.top().join("@home").join("edited"))
            .map(|b| b.len())
            .ok(),
        Some(10),
        "/home is not as it was"
    );
    assert!(w.request_file().is_none(), "the request is still staged");
    let outcome = layout::Outcome::parse(
        &std::fs::read(
            w.top()
                .join(layout::SNAPSHOTS_SUBVOLUME)
                .join(layout::OUTCOME_FILE_NAME),
        )
        .expect("an outcome"),
    )
    .expect("a well-formed outcome");
    assert_eq!(outcome.result, layout::OutcomeResult::Done);
    assert_eq!(outcome.request.as_ref(), Some(&request));
    w.start_keeper(None);

    let (code, out, _) = w.tacid(APPROVER, &["data", "status"]);
    assert_eq!(code, 0);
    eprintln!("$ tacid data status\n{out}");
    assert!(
        out.contains(&format!(
            "NEW: At the boot of {}",
            keeper::words::human_time(outcome.finished, SystemTime::now())
        )) && out.contains(&format!(
            ", 3 subvolumes were put back together: /persist to {}, /var/log to {} and /home \
             to {}.\n",
            set.persist, set.log, set.home
        )),
        "{out}"
    );
    // Once to each person.
    let (_, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    let status = json(&out);
    assert_eq!(status["outcome_new"], false, "an outcome is new only once");
    assert_eq!(
        status["outcome_request"],
        format!(
            "@persist {}; @log {}; @home {}",
            set.persist, set.log, set.home
        )
    );
    assert_eq!(status["staged_snapshot"], serde_json::Value::Null);
    let (_, out, _) = w.tacid(STRANGER, &["data", "status"]);
    assert!(out.contains("NEW: At the boot of"), "{out}");

    // Journalled once, across a restart of the keeper too.
    w.stop_keeper();
    w.start_keeper(None);
    assert_eq!(w.tacid(STRANGER, &["data", "status"]).0, 0);
    let (_copy, copied) = w.copy_journal();
    let conn = rusqlite::Connection::open(&copied).expect("the copy opens");
    let rows: Vec<(String, String)> = conn
        .prepare("SELECT result, request FROM outcomes")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()
        })
        .expect("the outcomes");
    assert_eq!(
        rows,
        [(
            "done".to_owned(),
            format!(
                "@persist {}; @log {}; @home {}",
                set.persist, set.log, set.home
            )
        )]
    );
    w.give_journal_back();
}

/// A set cut short while it was taken (its request failed, not every member made) is not one
/// cut: it is refused as a set, and each member it has may still be put back alone.
#[test]
fn bus_a_set_cut_short_is_refused_as_a_set() {
    let Some(mut w) = World::start() else { return };
    let set = a_set_and_changes_since(&w);
    let id = set.id.as_str();
    // As a power cut in the middle of taking it leaves it: /home never made, the set failed.
    w.stop_keeper();
    let snapshots = w.top().join(layout::SNAPSHOTS_SUBVOLUME);
    common::ok(
        "btrfs",
        &[
            "subvolume",
            "delete",
            snapshots.join(&set.home).to_str().expect("utf-8"),
        ],
    );
    {
        let conn = rusqlite::Connection::open(&w.journal).expect("the journal, the keeper stopped");
        let changed = conn
            .execute(
                "UPDATE requests SET state = ?1 WHERE id = ?2",
                rusqlite::params![State::Failed, set.id.parse::<i64>().expect("an id")],
            )
            .expect("the set's row");
        assert_eq!(changed, 1);
    }
    w.give_journal_back();
    w.start_keeper(None);

    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", id]);
    assert_eq!(code, 6, "{err}");
    assert!(
        err.contains(&format!(
            "set {id} is not whole: it is failed (of its snapshots, only those of /persist and \
             /var/log exist)"
        )),
        "{err}"
    );
    assert_eq!(w.tacid(APPROVER, &["data", "restore", id, "--yes"]).0, 6);
    assert!(w.request_file().is_none(), "a cut-short set was staged");
    // Its members, alone, as ever.
    assert_eq!(w.tacid(APPROVER, &["data", "restore", &set.persist]).0, 3);
}

/// A set taken before a switch names the generations it was taken between, in the list
/// (words and JSON) and in its restore's preview, which says how to put the system back
/// too and does not do it; a reason that looks like a switch and is not one is refused.
#[test]
fn bus_a_set_before_a_switch_names_the_generations_and_how_to_put_the_system_back() {
    let Some(w) = World::start() else { return };
    let (code, out, err) = w.tacid(
        APPROVER,
        &[
            "data",
            "snapshot",
            "--pre-switch",
            "--reason",
            "before switching from generation 42 to 43",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let id = json(&out)["set_id"].as_i64().expect("a set id").to_string();
    std::fs::write(w.top().join("@persist/after"), b"x").expect("write");

    // The list, to anybody: the switch is the reason, said once.
    let (code, out, _) = w.tacid(STRANGER, &["data", "list"]);
    assert_eq!(code, 0);
    let approver = APPROVER;
    let why = format!(
        "\n    why    before switching from generation 42 to 43, asked by {approver} (uid {})\n",
        uid_of(APPROVER)
    );
    assert_eq!(out.matches(&why).count(), 3, "{out}");
    assert!(!out.contains("before switching configuration"), "{out}");
    let (code, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    assert_eq!(code, 0);
    let listed = json(&out)["snapshots"].clone();
    let listed = listed.as_array().expect("a list");
    assert_eq!(listed.len(), 3, "{out}");
    for s in listed {
        assert_eq!(
            s["switch"],
            serde_json::json!({"from_generation": 42, "to_generation": 43, "to_toplevel": null}),
            "{s}"
        );
        assert_eq!(s["pre_switch"], true);
    }

    // The preview: the generations, and the system's own way back, which it does not take.
    let (code, out, err) = w.tacid(APPROVER, &["data", "restore", &id]);
    assert_eq!(code, 3, "{err}");
    eprintln!("$ tacid data restore {id}\n{out}");
    assert!(
        out.starts_with(&format!(
            "This puts back 3 subvolumes of set {id}, taken together before switching from \
             generation 42 to 43 on "
        )),
        "{out}"
    );
    let back = "\nThis puts back data only, not the system: the next boot starts the \
                generation the boot loader's default is. To run generation 42 again too, make \
                it the boot default yourself, as root: `nixos-rebuild boot --rollback` (when \
                42 is the generation just below the system profile's current one) or \
                `/nix/var/nix/profiles/system-42-link/bin/switch-to-configuration boot`.\n";
    assert!(out.contains(back), "{out}");
    let (code, out, _) = w.tacid(STRANGER, &["data", "restore", &id, "--json"]);
    assert_eq!(code, 3);
    let p = json(&out);
    assert_eq!(p["pre_switch"], true);
    let words = p["words"].as_str().expect("words");
    assert!(
        words.contains("before switching from generation 42 to 43 on "),
        "{words}"
    );
    assert!(words.contains(back.trim_matches('\n')), "{words}");
    assert!(w.request_file().is_none(), "a preview staged something");

    // A reason that begins like a switch's must be one: nothing is taken.
    let before = w.disk_snapshots().0.len();
    for hostile in [
        "before switching from generation 4x2 to 43",
        "before switching to /nix/store/x;reboot",
        "before switching from generation 042 to 43",
    ] {
        let (code, _, err) = w.tacid(
            APPROVER,
            &["data", "snapshot", "--pre-switch", "--reason", hostile],
        );
        assert_eq!(code, 5, "{hostile}: {err}");
        assert!(err.contains("from generation N"), "{err}");
    }
    assert_eq!(w.disk_snapshots().0.len(), before);
    // Without --pre-switch it is the person's own reason, taken as it is.
    let (code, _, err) = w.tacid(
        APPROVER,
        &[
            "data",
            "snapshot",
            "--reason",
            "before switching from generation 4x2",
        ],
    );
    assert_eq!(code, 0, "{err}");
}
