//! The bus tier for `tacid data space`: the CLI, the keeper as its own user and the stem as
//! root, on a loop Btrfs. A file only a snapshot still holds is what deleting that snapshot
//! frees, for an approver; somebody who may only look sees /home's snapshots in total only.
//!
//! Run (root, loop devices): `cargo build -p stem -p tacid-cli -p initrd --bins &&
//! cargo test -p keeper --test it bus_space::`.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test

use std::process::Command;

use crate::common::{json, World, APPROVER, STRANGER};

#[test]
fn bus_space_says_what_each_snapshot_frees_and_hides_homes_from_lookers() {
    let Some(w) = World::start() else { return };
    let home = w.top().join("@home");
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(home.join("big"), &data).unwrap();
    let snap = w.snapshot_home();
    std::fs::remove_file(home.join("big")).unwrap();
    let (code, out, err) = w.tacid(
        APPROVER,
        &["data", "snapshot", "/persist", "--reason", "test", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let persist = json(&out)["snapshots"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let synced = Command::new("btrfs")
        .args(["filesystem", "sync"])
        .arg(w.top())
        .status()
        .unwrap();
    assert!(synced.success());

    let (code, out, err) = w.tacid(APPROVER, &["data", "space", "--json"]);
    assert_eq!(code, 0, "space: {err}");
    let v = json(&out);
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(v["hidden"], 0);
    let row = v["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == snap.as_str())
        .unwrap_or_else(|| panic!("{snap} in {v}"))
        .clone();
    assert_eq!(row["exclusive_bytes"], 3u64 << 20, "{v}");
    assert_eq!(
        row["new_bytes"],
        serde_json::Value::Null,
        "the first has none"
    );
    assert_eq!(row["of"], "/home");
    let home_row = v["subvolumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subvolume"] == "/home")
        .unwrap()
        .clone();
    assert_eq!(home_row["snapshots"], 1);
    assert_eq!(home_row["snapshots_exclusive_bytes"], 3u64 << 20);
    assert!(v["store_bytes"].as_u64().unwrap() >= 3 << 20, "{v}");

    let (code, out, err) = w.tacid(APPROVER, &["data", "space", &snap]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("FREES") && out.contains("3.0 MiB"), "{out}");
    assert!(!out.contains(&persist), "only the one named: {out}");

    // Somebody who may only look: /home's snapshot in its total only.
    let (code, out, err) = w.tacid(STRANGER, &["data", "space", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["hidden"], 1, "{v}");
    let names: Vec<&str> = v["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec![persist.as_str()]);
    let home_total = v["subvolumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subvolume"] == "/home")
        .unwrap()["snapshots_exclusive_bytes"]
        .clone();
    assert_eq!(home_total, 3u64 << 20, "the total stays");
    let (_, text, _) = w.tacid(STRANGER, &["data", "space"]);
    assert!(
        text.contains("1 snapshot of /home is shown in their total only"),
        "{text}"
    );

    let (code, _, err) = w.tacid(STRANGER, &["data", "space", "not-a-name"]);
    assert_ne!(code, 0);
    assert!(err.contains("not a snapshot name"), "{err}");
    let (code, _, err) = w.tacid(
        APPROVER,
        &["data", "space", "@home.2020-01-01T000000.000000Z"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("no snapshot named"), "{err}");
}
