//! The bus tier for `tacid data list` from the keeper's kept list: answered from
//! what the keeper keeps while nothing changed, and never stale — after a snapshot, a
//! delete, a staged and a withdrawn restore, snapshots made and deleted by root by hand
//! behind the stem's back, and a restarted stem. `List` (nested) and `ListRows` (flat, what
//! the CLI reads) say the same.
//!
//! Run (root, loop devices): `cargo build -p stem -p tacid-cli -p initrd --bins &&
//! cargo test -p keeper --test it bus_list::`.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test

use std::process::Command;
use std::time::SystemTime;

use crate::common::{json, World, APPROVER};
use layout::{SnapshotName, SubvolumeName, SNAPSHOTS_SUBVOLUME};

/// `tacid data list --json` as an approver: (name, origin, pinned, reason) of each, in order.
fn listed(w: &World) -> Vec<(String, String, bool, String)> {
    let (code, out, err) = w.tacid(APPROVER, &["data", "list", "--json"]);
    assert_eq!(code, 0, "list: {err}");
    json(&out)["snapshots"]
        .as_array()
        .expect("an array")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["origin"].as_str().unwrap().to_owned(),
                e["pinned"].as_bool().unwrap(),
                // null: unknown origin (no reason).
                e["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn names(w: &World) -> Vec<String> {
    listed(w).into_iter().map(|e| e.0).collect()
}

/// The names on disk, newest first (the btrfs CLI as oracle).
fn on_disk(w: &World) -> Vec<String> {
    let mut all = w.disk_snapshots().0;
    all.sort();
    all.reverse();
    all
}

/// How many lists the keeper answered from what it kept (its debug log says).
fn kept_answers(w: &World) -> usize {
    std::fs::read_to_string(w.keeper_log())
        .unwrap_or_default()
        .matches("list timings (kept)")
        .count()
}

fn btrfs(args: &[&str]) {
    let out = Command::new("btrfs").args(args).output().expect("btrfs");
    assert!(
        out.status.success(),
        "btrfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bus_the_kept_list_is_never_stale() {
    let Some(mut w) = World::start() else { return };
    let store = w.top().join(SNAPSHOTS_SUBVOLUME);
    let a = w.snapshot_home();
    let first = listed(&w);
    assert_eq!(
        first,
        vec![(a.clone(), "journal".into(), false, "before the test".into())]
    );

    // Nothing changed: the same list, answered from what the keeper kept.
    let before = kept_answers(&w);
    for _ in 0..3 {
        assert_eq!(listed(&w), first);
    }
    assert!(
        kept_answers(&w) > before,
        "three lists of an unchanged store were all made again"
    );
    let (code, text1, _) = w.tacid(APPROVER, &["data", "list"]);
    let (_, text2, _) = w.tacid(APPROVER, &["data", "list"]);
    assert_eq!((code, &text1), (0, &text2));
    assert!(
        text1.contains(&a) && text1.contains("before the test"),
        "{text1}"
    );

    // `List` and `ListRows` agree, field by field.
    let keeper = w.keeper_as_root();
    let nested = keeper.run(keeper.proxy.list()).expect("List");
    let (_, out, _) = w.tacid(APPROVER, &["data", "list", "--json"]);
    // The CLI adds where each is open for the caller (nothing is open here), the switch a
    // pre-switch snapshot was taken before (none here) and the copies that failed
    // verification: the rest is `List`'s, field by field.
    let mut cli = json(&out);
    assert_eq!(cli["schema"], 1);
    let mut cli = cli["snapshots"].take();
    for entry in cli.as_array_mut().expect("an array") {
        let entry = entry.as_object_mut().expect("an object");
        let open_at = entry.remove("open_at");
        assert_eq!(open_at, Some(serde_json::Value::Null));
        assert_eq!(entry.remove("switch"), Some(serde_json::Value::Null));
        // And the copies whose last verification failed, from `ListRows`' copy rows (none
        // here), which `List`'s entries do not carry.
        assert_eq!(
            entry.remove("failed_verification"),
            Some(serde_json::json!({}))
        );
        // A consistent cut's units: a list in JSON, `null` for none; `List` says them as
        // one string, empty for none (no unit is paused here).
        assert_eq!(
            entry.remove("consistent_cut"),
            Some(serde_json::Value::Null)
        );
        entry.insert("cut_units".into(), "".into());
        // What a restore replaced: an object in JSON, `null` for none; `List` says it in
        // three fields, empty and zero for none (nothing was replaced here).
        assert_eq!(entry.remove("replaced"), Some(serde_json::Value::Null));
        entry.insert("replaced_by_restore_of".into(), "".into());
        entry.insert("replaced_micros".into(), 0.into());
        entry.insert("kept_until_micros".into(), 0.into());
    }
    assert_eq!(serde_json::to_value(&nested).unwrap(), cli);

    // Root, by hand, behind the stem's back: a snapshot into the store ...
    let by_hand = SnapshotName::new(SubvolumeName::parse("@home").unwrap(), SystemTime::now())
        .unwrap()
        .to_string();
    btrfs(&[
        "subvolume",
        "snapshot",
        "-r",
        w.top().join("@home").to_str().unwrap(),
        store.join(&by_hand).to_str().unwrap(),
    ]);
    let now = listed(&w);
    assert_eq!(names(&w), on_disk(&w));
    assert_eq!(now[0].0, by_hand);
    assert_eq!(now[0].1, "unknown-origin");
    // ... and deleted again, right away (no commit in between).
    btrfs(&[
        "subvolume",
        "delete",
        store.join(&by_hand).to_str().unwrap(),
    ]);
    assert_eq!(names(&w), vec![a.clone()]);

    // The keeper's own acts.
    let b = w.snapshot_home();
    assert_eq!(names(&w), vec![b.clone(), a.clone()]);
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &b, "--yes"]);
    assert_eq!(code, 0, "restore: {err}");
    assert!(listed(&w)[0].2, "the staged snapshot is pinned");
    assert!(!listed(&w)[1].2);
    let (code, _, err) = w.tacid(APPROVER, &["data", "cancel"]);
    assert_eq!(code, 0, "cancel: {err}");
    assert!(
        listed(&w).iter().all(|e| !e.2),
        "nothing pinned after cancel"
    );
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &a]);
    assert_eq!(code, 0, "delete: {err}");
    assert_eq!(names(&w), vec![b.clone()]);
    assert_eq!(names(&w), on_disk(&w));

    // A stem that restarts (a new generation), with a snapshot deleted by hand while it was
    // away.
    w.kill_stem();
    btrfs(&["subvolume", "delete", store.join(&b).to_str().unwrap()]);
    w.start_stem();
    assert_eq!(names(&w), Vec::<String>::new());
    let c = w.snapshot_home();
    assert_eq!(names(&w), vec![c]);
    assert_eq!(names(&w), on_disk(&w));
}
