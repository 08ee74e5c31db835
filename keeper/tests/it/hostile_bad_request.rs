//! The hostile tier on the bus: a bad `.restore` (a directory, a fifo, a symlink out of the
//! filesystem, bytes that are no request) never blocks the stem or the keeper. `list`,
//! `delete` and `status` work beside it, `status` says what is wrong with it, a restore is
//! refused with the way out, and `tacid data cancel` removes it, journalled
//! (adr/0015). Real stem, keeper, bus and CLI users, as in the bus tier.

#![allow(clippy::unwrap_used)] // a panic is how a test reports

use std::fs;
use std::path::PathBuf;

use crate::common::{json, World, APPROVER, STRANGER};
use keeper::journal::{Action, State};

fn snapshot_home(w: &World) -> String {
    let (code, out, err) = w.tacid(APPROVER, &["data", "snapshot", "/home", "--json"]);
    assert_eq!(code, 0, "snapshot failed: {err}");
    json(&out)["snapshots"][0]["name"]
        .as_str()
        .expect("a name")
        .to_owned()
}

fn request_path(w: &World) -> PathBuf {
    w.top()
        .join(layout::SNAPSHOTS_SUBVOLUME)
        .join(layout::REQUEST_FILE_NAME)
}

/// The bad requests, each planted where the stem writes a real one, and what `status` must
/// say is wrong with it.
fn plant(w: &World, kind: &str) -> &'static str {
    let p = request_path(w);
    match kind {
        "directory" => {
            fs::create_dir_all(p.join("inside/deeper")).unwrap();
            fs::write(p.join("inside/deeper/file"), "x").unwrap();
            "not a regular file"
        }
        "fifo" => {
            testbed::make_fifo(&p).unwrap();
            "not a regular file"
        }
        "symlink" => {
            std::os::unix::fs::symlink(w.dir.join("outside"), &p).unwrap();
            "symlink"
        }
        _ => {
            fs::write(&p, b"@home \xff\xfe not a request\n").unwrap();
            "the request is not text"
        }
    }
}

#[test]
fn hostile_a_bad_request_never_blocks_the_stem_and_cancel_removes_it() {
    let Some(w) = World::start() else { return };
    fs::write(w.dir.join("outside"), "not ours").unwrap();
    for kind in ["directory", "fifo", "symlink", "garbage"] {
        let keep = snapshot_home(&w);
        let doomed = snapshot_home(&w);
        let problem = plant(&w, kind);

        // Looking, deleting and the status work beside it; nothing claims it is staged.
        let (code, out, err) = w.tacid(STRANGER, &["data", "list"]);
        assert_eq!(code, 0, "{kind}: list: {err}");
        assert!(
            out.contains(&keep) && !out.contains("STAGED"),
            "{kind}: {out}"
        );
        let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &doomed]);
        assert_eq!(code, 0, "{kind}: delete beside it: {err}");
        let (code, out, err) = w.tacid(APPROVER, &["data", "status"]);
        assert_eq!(code, 0, "{kind}: status: {err}");
        assert!(
            out.contains("No restore is staged: the restore request file is bad")
                && out.contains(problem)
                && out.contains("`tacid data cancel` removes it"),
            "{kind}: status says what is wrong:\n{out}"
        );
        let (_, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
        let said = json(&out)["staged_problem"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(said.contains(problem), "{kind}: {out}");

        // Staging beside it is refused with the way out.
        let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &keep, "--yes"]);
        assert_ne!(code, 0, "{kind}: staged beside a bad request");
        assert!(
            err.contains("`tacid data cancel` removes it"),
            "{kind}: {err}"
        );

        // A stranger cannot remove it; an approver can, and it is journalled.
        assert_eq!(w.tacid(STRANGER, &["data", "cancel"]).0, 4, "{kind}");
        assert!(request_path(&w).symlink_metadata().is_ok(), "{kind}");
        let (code, out, err) = w.tacid(APPROVER, &["data", "cancel"]);
        assert_eq!(code, 0, "{kind}: cancel: {err}");
        assert!(
            out.contains("removed a bad restore request file"),
            "{kind}: {out}"
        );
        assert!(
            request_path(&w).symlink_metadata().is_err(),
            "{kind}: still there"
        );
        assert_eq!(
            fs::read_to_string(w.dir.join("outside")).unwrap(),
            "not ours",
            "{kind}: the symlink was followed"
        );
        let (requests, _) = w.journal_rows();
        let row = requests
            .iter()
            .rev()
            .find(|r| r.action == Action::Cancel && r.state == State::Withdrawn)
            .unwrap_or_else(|| panic!("{kind}: no cancel journalled: {requests:#?}"));
        assert!(
            row.outcome.contains("removed a bad restore request file") && row.user_name == APPROVER,
            "{kind}: {row:?}"
        );

        // And the machine is as usable as before: a restore stages, and is withdrawn.
        let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &keep, "--yes"]);
        assert_eq!(code, 0, "{kind}: restore after the cancel: {err}");
        let (code, _, err) = w.tacid(APPROVER, &["data", "cancel"]);
        assert_eq!(code, 0, "{kind}: {err}");
    }
}
