//! Bus tier: after a dead disk, snapshots fetched one by one (each a member of one set on
//! the old disk, each from a sealed target) go back together at one boot, named one by one:
//! one preview saying what each loses and where it came from, one consent, one request the
//! real initrd honours. A fetched snapshot is in no set here, and `list` and `restore` say
//! the same of it.

use crate::common::sealed::world_with_vault;
use crate::common::{a_set_and_changes_since, json, APPROVER, STRANGER};
use keeper::journal::{Action, State};

#[test]
fn bus_snapshots_fetched_one_by_one_go_back_together_at_one_boot() {
    let Some((mut w, _copier)) = world_with_vault("") else {
        return;
    };
    let set = a_set_and_changes_since(&w);
    // Each member copied off the disk, then gone from it (as with a dead disk), then
    // fetched back by itself.
    for name in set.names() {
        let (code, out, err) = w.tacid(APPROVER, &["data", "copy", name, "--to", "vault"]);
        assert_eq!(code, 0, "copy {name}: {out} {err}");
        let (code, _, err) = w.tacid(APPROVER, &["data", "delete", name, "--next-copy-full"]);
        assert_eq!(code, 0, "delete {name}: {err}");
    }
    for name in set.names() {
        let (code, out, err) = w.tacid(
            APPROVER,
            &["data", "fetch", name, "--from", "vault", "--json"],
        );
        assert_eq!(code, 0, "fetch {name}: {out} {err}");
        let fetched = json(&out);
        assert_eq!(fetched["snapshot"]["origin"], "fetched", "{fetched}");
        assert!(fetched["snapshot"]["set_id"].is_null(), "{fetched}");
    }

    // The list says each was fetched, and puts it in no set (a number it showed, `restore`
    // would refuse).
    let (_, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    let list = json(&out);
    for name in set.names() {
        let e = list["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not listed: {list}"));
        assert_eq!(e["origin"], "fetched", "{e}");
        assert!(
            e["set_id"].is_null(),
            "a fetched snapshot listed in a set: {e}"
        );
    }
    let (_, text, _) = w.tacid(STRANGER, &["data", "list"]);
    assert!(
        text.contains("    why    fetched from vault, asked by tacid-approver (uid "),
        "{text}"
    );
    // Named as a set, it says why it is none, truly, and what to do.
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &set.home, "--set"]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("is in no set: it was fetched from vault, alone"),
        "{err}"
    );
    assert!(!err.contains("unknown origin"), "{err}");
    assert!(
        err.contains(&format!("`tacid data restore {} NAME...`", set.home)),
        "{err}"
    );

    // What not to name: two of one subvolume; a set's number among names; --set with them.
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &set.home, &set.home]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("named twice"), "{err}");
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &set.home, "7"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &set.home, &set.log, "--set"]);
    assert_eq!(code, 2, "{err}");

    // The three named, in any order: one preview, each member with where it came from and
    // what it loses; nothing changed (exit 3).
    let args = ["data", "restore", &set.home, &set.persist, &set.log];
    let (code, preview, err) = w.tacid(APPROVER, &args);
    assert_eq!(code, 3, "{preview} {err}");
    assert!(
        preview.starts_with("This puts back 3 subvolumes, each to the snapshot named:\n"),
        "{preview}"
    );
    for (path, name) in [
        ("/persist", &set.persist),
        ("/var/log", &set.log),
        ("/home", &set.home),
    ] {
        assert!(
            preview.contains(&format!("\n  {path} back to {name} (")),
            "{path}: {preview}"
        );
    }
    // What changed since a fetched snapshot cannot be counted (it is no ancestor of what is
    // there now): each member says what is deleted, without numbers.
    assert_eq!(
        preview.matches(", fetched from vault)").count(),
        3,
        "{preview}"
    );
    assert!(
        preview.contains(
            ". Everything written to /home since then is set aside as @home.\u{2026} for 7 days \
             (undo: `tacid data restore @home.\u{2026}`), then deleted.\n"
        ),
        "{preview}"
    );
    assert!(
        !preview.replace("set aside", "").contains("set "),
        "named snapshots are no set: {preview}"
    );
    let again = format!(
        "To stage it: tacid data restore {} {} {} --yes",
        set.persist, set.log, set.home
    );
    assert!(preview.contains(&again), "{preview}");
    assert!(w.request_file().is_none(), "a preview staged something");

    // A stranger may look, not stage.
    let mut yes = args.to_vec();
    yes.push("--yes");
    let (code, _, err) = w.tacid(STRANGER, &yes);
    assert_eq!(code, 4, "{err}");
    assert!(w.request_file().is_none());

    // The approver says yes: one request, three members, one consent quoting the words.
    let (code, out, err) = w.tacid(APPROVER, &yes);
    assert_eq!(code, 0, "{out} {err}");
    assert!(
        out.contains(
            "Staged, as one request. Nothing is put back yet: reboot to put /persist, /var/log \
             and /home back together, each to the snapshot named."
        ),
        "{out}"
    );
    let request = layout::RestoreRequest::parse(w.request_file().expect("staged").as_bytes())
        .expect("a request");
    assert_eq!(request.members().len(), 3, "{request:?}");
    let (requests, _) = w.journal_rows();
    let consent = requests
        .iter()
        .rfind(|r| r.action == Action::Restore)
        .expect("the consent");
    assert_eq!(consent.state, State::Staged, "{consent:?}");
    assert_eq!(consent.user_name, APPROVER);
    assert_eq!(
        consent.subject,
        format!("{} {} {}", set.persist, set.log, set.home)
    );
    let shown = requests
        .iter()
        .rfind(|r| r.action == Action::RestorePreview && r.uid == consent.uid)
        .expect("the preview journalled");
    assert_eq!(consent.words_shown, shown.words_shown);
    assert!(consent.words_shown.contains("fetched from vault"));
    let (_, status, _) = w.tacid(STRANGER, &["data", "status"]);
    assert!(
        status.contains("A restore of 3 subvolumes is staged"),
        "{status}"
    );

    // "Reboot": the real initrd puts all three back at once.
    w.stop_keeper();
    w.run_initrd_restore();
    for (sub, written_since) in [
        ("@persist", "p-new"),
        ("@log", "l-new1"),
        ("@log", "l-new2"),
    ] {
        assert!(
            !w.top().join(sub).join(written_since).exists(),
            "{sub}/{written_since} survived the restore"
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
}
