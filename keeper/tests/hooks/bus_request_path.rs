//! The request path's one durable write (adr/0011): a delete and a cancel are
//! journalled (synced) before the stem acts and settled from the disk after a crash, so a
//! keeper SIGKILLed at any point of them, or a stem frozen and killed under them, leaves
//! nothing pending and nothing acknowledged lost once the keeper is back.

use crate::common::{self, json};

use crate::common::{World, APPROVER};
use keeper::journal::{RequestRow, State};

/// The journal's last row of `action`.
fn last_of(w: &World, action: &str) -> RequestRow {
    let (requests, _) = w.journal_rows();
    assert!(
        requests.iter().all(|r| r.state != State::Pending),
        "left pending: {requests:#?}"
    );
    requests
        .into_iter()
        .rfind(|r| r.action == action)
        .unwrap_or_else(|| panic!("no {action} row"))
}

/// Start the keeper paused at `point`, run `args` as an approver, SIGKILL the keeper there,
/// start it again and ask for the status (which settles what was left pending).
fn kill_keeper_at(w: &mut World, point: &str, args: &[&str]) {
    w.kill_keeper();
    w.start_keeper(Some(point));
    let cli = w.spawn_tacid(APPROVER, args);
    w.wait_keeper_log(&format!("paused at {point}"));
    w.kill_keeper();
    let out = cli.wait_with_output().expect("tacid ends");
    assert_ne!(
        out.status.code(),
        Some(0),
        "a request the keeper died in was acknowledged"
    );
    w.start_keeper(None);
    assert_eq!(w.tacid(APPROVER, &["data", "status"]).0, 0);
}

#[test]
fn bus_a_delete_or_cancel_killed_at_any_point_is_settled_from_the_disk() {
    let Some(mut w) = World::start() else { return };

    // Delete: before the stem acted the snapshot stays (failed, still on disk); after it,
    // the deletion is journalled complete and the snapshot gone.
    for (point, deleted) in [("delete-pending", false), ("delete-done", true)] {
        let name = w.snapshot_home();
        kill_keeper_at(&mut w, point, &["data", "delete", &name]);
        let row = last_of(&w, "delete");
        assert_eq!(row.subject, name, "after {point}");
        assert_eq!(
            row.state,
            if deleted {
                State::Complete
            } else {
                State::Failed
            },
            "after {point}: {row:?}"
        );
        let (on_disk, _) = w.disk_snapshots();
        assert_eq!(!on_disk.contains(&name), deleted, "after {point}");
        assert!(row.user_name.contains(APPROVER), "{row:?}");
    }

    // Cancel: staged, then killed before and after the stem withdrew it.
    let name = w.snapshot_home();
    for (point, withdrawn) in [("cancel-pending", false), ("cancel-done", true)] {
        if w.request_file().is_none() {
            assert_eq!(w.tacid(APPROVER, &["data", "restore", &name]).0, 3);
            assert_eq!(w.tacid(APPROVER, &["data", "restore", &name, "--yes"]).0, 0);
        }
        kill_keeper_at(&mut w, point, &["data", "cancel"]);
        let row = last_of(&w, "cancel");
        assert_eq!(
            row.state,
            if withdrawn {
                State::Withdrawn
            } else {
                State::Failed
            },
            "after {point}: {row:?}"
        );
        assert_eq!(w.request_file().is_none(), withdrawn, "after {point}");
    }

    // The stem frozen under a delete, then killed: the caller is told, the row is settled
    // from the disk once the stem is back.
    let name = w.snapshot_home();
    w.freeze_stem();
    let cli = w.spawn_tacid(APPROVER, &["data", "delete", &name]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    w.kill_stem();
    let out = cli.wait_with_output().expect("tacid ends");
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    w.start_stem();
    let (code, listed, _) = w.tacid(APPROVER, &["data", "list", "--json"]);
    assert_eq!(code, 0);
    let row = last_of(&w, "delete");
    let (on_disk, _) = w.disk_snapshots();
    assert_eq!(
        row.state == State::Complete,
        !on_disk.contains(&name),
        "{row:?}"
    );
    assert!(json(&listed).is_array() || json(&listed).is_object());
}

/// Every request answered yes is journalled as done, with nothing pending, while the
/// keeper is killed at moments nobody chose during a stream of deletes and keeps.
#[test]
fn bus_deletes_and_keeps_under_random_kills_lose_nothing_acknowledged() {
    let Some(mut w) = World::start() else { return };
    let names: Vec<String> = (0..16).map(|_| w.snapshot_home()).collect();
    let address = w.address.clone();
    let tacid = common::bin("tacid");
    let work = names.clone();
    let stream = std::thread::spawn(move || {
        let mut acknowledged = Vec::new();
        for (i, name) in work.iter().enumerate() {
            let args: Vec<&str> = if i % 2 == 0 {
                vec!["data", "delete", name]
            } else {
                vec!["data", "keep", name]
            };
            let out = std::process::Command::new("/usr/bin/setpriv")
                .args([
                    &format!("--reuid={APPROVER}"),
                    &format!("--regid={APPROVER}"),
                    "--init-groups",
                ])
                .arg(&tacid)
                .args(&args)
                .env("TACID_BUS_ADDRESS", &address)
                .output()
                .expect("tacid runs");
            if out.status.success() {
                acknowledged.push((args[1].to_owned(), name.clone()));
            }
        }
        acknowledged
    });
    w.kill_keeper_at_random_moments(3, 15, 90, 41);
    let acknowledged = stream.join().expect("the stream ends");
    assert_eq!(w.tacid(APPROVER, &["data", "status"]).0, 0);
    let (requests, _) = w.journal_rows();
    assert!(
        requests.iter().all(|r| r.state != State::Pending),
        "{requests:#?}"
    );
    let (on_disk, _) = w.disk_snapshots();
    for (act, name) in &acknowledged {
        let row = requests
            .iter()
            .rfind(|r| r.action == *act && &r.subject == name)
            .unwrap_or_else(|| panic!("an acknowledged {act} of {name} is journalled"));
        if act == "delete" {
            assert_eq!(row.state, State::Complete, "{row:?}");
            assert!(!on_disk.contains(name), "{name} acknowledged deleted");
        }
    }
}
