//! The keeper SIGKILLed at named points of a request (a `test-hooks` build stops there
//! first): a restart leaves no half-made snapshot, loses no acknowledged row, and reconciles.

use std::collections::HashSet;

use crate::common::{json, World, APPROVER};
use keeper::journal::{Action, State};

/// SIGKILL at named points of a request (a `test-hooks` build stops there first); then a
/// restart must leave no half-made snapshot, lose no acknowledged row, and reconcile.
#[test]
fn bus_the_keeper_killed_mid_request_loses_nothing_acknowledged() {
    let Some(mut w) = World::start() else { return };
    let acknowledged = [w.snapshot_home(), w.snapshot_home()];

    for (point, expect) in [
        ("set-pending", State::Failed),
        ("set-taken", State::Complete),
    ] {
        w.kill_keeper();
        w.start_keeper(Some(point));
        let cli = w.spawn_tacid(
            APPROVER,
            &["data", "snapshot", "/home", "/var/log", "--json"],
        );
        w.wait_keeper_log(&format!("paused at {point}"));
        w.kill_keeper();
        let out = cli.wait_with_output().expect("tacid ends");
        assert_ne!(
            out.status.code(),
            Some(0),
            "a request the keeper died in was acknowledged"
        );
        w.start_keeper(None);
        let (code, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
        assert_eq!(code, 0);
        assert_eq!(json(&out)["unknown_origin"], 0, "after {point}");

        let (requests, snapshots) = w.journal_rows();
        assert!(
            requests.iter().all(|r| r.state != State::Pending),
            "pending after {point}: {requests:#?}"
        );
        let last = requests
            .iter()
            .rfind(|r| r.action == Action::Snapshot)
            .expect("the killed set");
        assert_eq!(last.state, expect, "after {point}: {last:?}");
        let members = snapshots
            .iter()
            .filter(|s| s.request.as_ref().is_some_and(|r| r.id == last.id))
            .count();
        assert_eq!(
            members,
            if expect == State::Complete { 2 } else { 0 },
            "after {point}"
        );
        for name in &acknowledged {
            let row = snapshots
                .iter()
                .find(|s| &s.name == name)
                .expect("an acknowledged snapshot is journalled");
            assert_eq!(row.request.as_ref().map(|r| r.state), Some(State::Complete));
        }
        // The disk agrees with the journal, and nothing half-made is left.
        let (on_disk, temps) = w.disk_snapshots();
        assert!(temps.is_empty(), "{temps:?}");
        let present: HashSet<_> = snapshots
            .iter()
            .filter(|s| s.state == "present")
            .map(|s| s.name.clone())
            .collect();
        assert_eq!(
            on_disk.into_iter().collect::<HashSet<_>>(),
            present,
            "after {point}"
        );
    }

    let name = acknowledged[0].clone();
    for (point, staged) in [("restore-pending", false), ("restore-staged", true)] {
        let last = w.kill_keeper_mid_restore(point, &name);
        assert_eq!(
            last.state,
            if staged { State::Staged } else { State::Failed },
            "after {point}: {last:?}"
        );
        assert_eq!(w.request_file().is_some(), staged, "after {point}");
        assert!(last.words_shown.starts_with("This puts /home back to"));
    }
}
