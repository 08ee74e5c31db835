//! Bus tier, copies off the disk (issue 13): the CLI, the keeper and the stem on a private
//! bus, a second loop Btrfs as the local target `usb`, a directory that is not on Btrfs as
//! the target `plain`. An approver copies (full, then incremental), anybody lists what the
//! target holds, `list` says where each snapshot has a copy, a stranger and a forged target
//! name are refused and journalled, a snapshot deleted here is fetched back and its restore
//! previewed, a target that is not Btrfs fails with its reason journalled, and the timer's
//! act copies the newest of each subvolume and applies the target's retention.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use common::{uid_of, World, APPROVER, STRANGER};
use keeper::journal::{CopyRow, Journal};
use serde_json::Value;

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Every act on a target the journal holds (read from a copy of it).
fn copy_rows(w: &World) -> Vec<CopyRow> {
    let (_copy, copied) = w.copy_journal();
    let rows = Journal::open(&copied)
        .expect("journal opens")
        .copy_requests()
        .expect("copy rows");
    w.give_journal_back();
    rows
}

/// The refused rows of `action` (the journal's requests).
fn refusals(w: &World, action: &str) -> Vec<keeper::journal::RequestRow> {
    w.journal_rows()
        .0
        .into_iter()
        .filter(|r| r.action == action && r.state == "refused")
        .collect()
}

/// Root's copies configuration: `usb` on the target Btrfs keeping only the newest copy of
/// each subvolume, `plain` in a directory that is not on Btrfs.
fn write_config(path: &Path, usb: &Path, plain: &Path) {
    let keep = r#"{"latest": 1, "daily": 0, "weekly": 0, "monthly": 0}"#;
    let text = format!(
        r#"{{"targets": {{"usb": {{"place": {:?}, "keep": {keep}}}, "plain": {{"place": {:?}}}}}}}"#,
        usb.display().to_string(),
        plain.display().to_string()
    );
    fs::write(path, text).expect("config");
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).expect("chmod");
}

#[test]
fn bus_copies_to_a_local_target_and_back() {
    let Some(mut w) = World::start() else { return };
    let Some(target) = testbed::LoopFs::new(256 << 20).expect("the target Btrfs") else {
        return;
    };
    let usb = target.top().join("tacid");
    fs::create_dir(&usb).expect("target dir");
    let plain = w.dir.join("plain");
    fs::create_dir(&plain).expect("plain dir");
    let config = w.dir.join("copies.json");
    write_config(&config, &usb, &plain);
    let config_arg = config.to_str().expect("utf-8").to_owned();
    w.stem_args
        .extend(["--copies-config".to_owned(), config_arg.clone()]);
    w.kill_stem();
    w.start_stem();
    w.stop_keeper_and_set_args(&["--free-floor-bytes", "0", "--copies-config", &config_arg]);
    w.start_keeper(None);

    // An approver's first copy: full, verified.
    let s1 = w.snapshot_home();
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &s1, "--to", "usb", "--json"]);
    assert_eq!(code, 0, "first copy: {out} {err}");
    let r = json(&out);
    assert_eq!(r["copied"][0]["name"], s1.as_str());
    assert_eq!(r["copied"][0]["incremental"], false, "{r}");
    assert!(!r["copied"][0]["received_uuid"].as_str().unwrap().is_empty());
    assert!(
        usb.join(&s1).is_dir(),
        "the copy is on the target, by its name"
    );

    // A change, a second snapshot, a second copy: incremental against the first.
    fs::write(
        w.top().join("@home/notes.txt"),
        b"written after the first copy",
    )
    .unwrap();
    let s2 = w.snapshot_home();
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &s2, "--to", "usb", "--json"]);
    assert_eq!(code, 0, "second copy: {out} {err}");
    let r = json(&out);
    assert_eq!(r["copied"][0]["incremental"], true, "{r}");
    assert_eq!(r["copied"][0]["parent"], s1.as_str(), "{r}");
    let incremental_bytes = r["copied"][0]["bytes"].as_u64().unwrap();
    // Copying it again sends nothing.
    let (code, out, _) = w.tacid(APPROVER, &["data", "copy", &s2, "--to", "usb", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["already_there"][0], s2.as_str());

    // Anybody may list what the target holds; the received UUIDs only for approvers.
    let (code, out, err) = w.tacid(STRANGER, &["data", "copies", "usb", "--json"]);
    assert_eq!(code, 0, "a stranger lists: {err}");
    let held = json(&out);
    let names: Vec<&str> = held["copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec![s1.as_str(), s2.as_str()], "oldest first");
    assert_eq!(
        held["copies"][0]["received_uuid"], "",
        "lookers see names only"
    );
    let (_, out, _) = w.tacid(APPROVER, &["data", "copies", "usb", "--json"]);
    assert_ne!(json(&out)["copies"][0]["received_uuid"], "");
    let (code, text, _) = w.tacid(STRANGER, &["data", "copies", "usb"]);
    assert_eq!(code, 0);
    assert!(text.contains("usb holds 2 copies"), "{text}");

    // `list` says where each snapshot has a copy.
    let (code, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    assert_eq!(code, 0);
    let list = json(&out);
    let entry = |name: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} listed: {list}"))
    };
    assert_eq!(entry(&s2)["copies"], serde_json::json!(["usb"]));
    let (_, text, _) = w.tacid(STRANGER, &["data", "list"]);
    assert!(text.contains("    copies usb"), "{text}");

    // A stranger may neither copy nor fetch: refused (exit 4), journalled.
    let (code, _, err) = w.tacid(STRANGER, &["data", "copy", &s2, "--to", "usb"]);
    assert_eq!(code, 4, "{err}");
    let (code, _, err) = w.tacid(STRANGER, &["data", "fetch", &s1, "--from", "usb"]);
    assert_eq!(code, 4, "{err}");
    let stranger = uid_of(STRANGER);
    assert!(refusals(&w, "copy").iter().any(|r| r.uid == stranger));
    assert!(refusals(&w, "fetch").iter().any(|r| r.uid == stranger));

    // Forged target names: refused before anything else, with what to do, and journalled
    // capped (the 100 KB one included).
    let (code, _, err) = w.tacid(APPROVER, &["data", "copy", &s2, "--to", "../etc"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("not a target name"), "{err}");
    assert!(err.contains("configured: plain, usb"), "{err}");
    let huge = "a".repeat(100_000);
    for forged in ["tmp", "usb\u{1b}[2J", huge.as_str()] {
        let (ok, _, err) = w.call_keeper_as(APPROVER, "Copy", &[&s2, forged]);
        assert!(!ok);
        assert!(err.contains("NoSuchTarget"), "{err}");
        assert!(err.len() < 2000, "the error does not echo the name whole");
    }
    let (ok, _, err) = w.call_keeper_as(STRANGER, "Fetch", &[&s1, &huge]);
    assert!(!ok && err.contains("NoSuchTarget"), "{err}");
    let (ok, _, err) = w.call_keeper_as(STRANGER, "Copies", &[&huge]);
    assert!(
        !ok && err.contains("NoSuchTarget") && err.len() < 2000,
        "{err}"
    );
    // A huge snapshot name to a real target: not a name, shown capped.
    let (ok, _, err) = w.call_keeper_as(APPROVER, "Copy", &[&huge, "usb"]);
    assert!(
        !ok && err.contains("InvalidArgument") && err.contains("(100000 bytes)"),
        "{err}"
    );
    // Anybody may ask what is in flight (nothing now).
    let (ok, out, err) = w.call_keeper_as(STRANGER, "CopyProgress", &[]);
    assert!(ok, "{err}");
    assert!(
        out.contains("array [\n") && !out.contains("struct"),
        "{out}"
    );
    let forged_rows = refusals(&w, "copy");
    assert!(
        forged_rows
            .iter()
            .any(|r| r.outcome.contains("not a target name") && r.subject.contains("100000 bytes")),
        "{forged_rows:#?}"
    );
    assert!(forged_rows.iter().all(|r| r.subject.len() < 400));

    // The disaster, small: the snapshot deleted here, fetched back from the copy, and its
    // restore previewed as for any snapshot.
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &s1]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = w.tacid(APPROVER, &["data", "fetch", &s1, "--from", "usb", "--json"]);
    assert_eq!(code, 0, "fetch: {out} {err}");
    assert_eq!(json(&out)["snapshot"]["name"], s1.as_str());
    let (_, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    let fetched = json(&out)
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == s1.as_str())
        .cloned()
        .expect("the fetched snapshot is listed");
    assert!(
        fetched["reason"]
            .as_str()
            .unwrap()
            .contains("fetched from usb"),
        "{fetched}"
    );
    let (code, text, err) = w.tacid(APPROVER, &["data", "restore", &s1]);
    assert_eq!(
        code, 3,
        "the restore of a fetched snapshot is previewed: {text} {err}"
    );
    let (code, _, err) = w.tacid(APPROVER, &["data", "fetch", &s1, "--from", "usb"]);
    assert_eq!(code, 6, "already here: {err}");

    // A target that is not Btrfs: the failure and its reason, journalled.
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &s2, "--to", "plain", "--json"]);
    assert_eq!(code, 12, "{out} {err}");
    assert_eq!(json(&out)["error"], "TargetNotBtrfs", "{out}");
    let rows = copy_rows(&w);
    let failed = rows
        .iter()
        .find(|r| r.target == "plain")
        .expect("the failed copy is journalled");
    assert_eq!(failed.state, "failed");
    assert!(failed.outcome.contains("failed: "), "{failed:?}");
    assert!(
        fs::read_dir(&plain).unwrap().next().is_none(),
        "nothing left in the directory that is not Btrfs"
    );

    // The timer's act: a new set of every subvolume; each one's newest copied, then the
    // target's retention (keep 1) deletes the older copies of /home, never the newest.
    let (code, out, err) = w.tacid(APPROVER, &["data", "snapshot", "--json"]);
    assert_eq!(code, 0, "{err}");
    let set: Vec<String> = json(&out)["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    let (code, out, err) = w.tacid("root", &["data", "copy", "--to", "usb", "--json"]);
    assert_eq!(code, 0, "the timer's act: {out} {err}");
    let r = json(&out);
    let mut copied: Vec<String> = r["copied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    copied.sort();
    let mut want = set.clone();
    want.sort();
    assert_eq!(copied, want, "{r}");
    let home3 = set.iter().find(|n| n.starts_with("@home.")).unwrap();
    let home_copy = r["copied"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == home3.as_str())
        .unwrap();
    assert_eq!(
        home_copy["parent"],
        s2.as_str(),
        "incremental against the newest common"
    );
    let mut deleted: Vec<&str> = r["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    deleted.sort();
    let mut older = vec![s1.as_str(), s2.as_str()];
    older.sort();
    assert_eq!(deleted, older, "{r}");
    assert!(!usb.join(&s1).exists() && !usb.join(&s2).exists());
    assert!(usb.join(home3).is_dir(), "the newest copy stays");
    let rows = copy_rows(&w);
    assert!(rows
        .iter()
        .filter(|r| r.action == "copy" && set.contains(&r.subject))
        .all(|r| r.rule == "timer of usb" && r.state == "complete" && r.bytes > 0));
    let deletions: Vec<&CopyRow> = rows.iter().filter(|r| r.action == "copy-delete").collect();
    assert_eq!(deletions.len(), 2, "{deletions:#?}");
    assert!(deletions
        .iter()
        .all(|r| r.rule == "retention of usb" && r.state == "complete" && !r.reason.is_empty()));
    // The journal of verified copies follows: s2 no longer on usb.
    let (_, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    let list = json(&out);
    let s2_entry = list
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == s2.as_str())
        .unwrap();
    assert_eq!(s2_entry["copies"], serde_json::json!([]));
    eprintln!("incremental copy of a one-file change: {incremental_bytes} bytes");

    // A copy long enough to be watched: its progress on stderr (not a terminal here: a
    // plain line, the first at once).
    let big: Vec<u8> = (0..96usize << 20)
        .map(|i| (i as u8).wrapping_mul(31) | 1)
        .collect();
    fs::write(w.top().join("@home/big"), big).unwrap();
    let s4 = w.snapshot_home();
    let started = std::time::Instant::now();
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &s4, "--to", "usb", "--json"]);
    let took = started.elapsed();
    assert_eq!(code, 0, "{out} {err}");
    let r = json(&out);
    let bytes = r["copied"][0]["bytes"].as_u64().unwrap();
    eprintln!(
        "a 96 MiB change copied in {:.2} s ({} bytes sent, {:.0} MiB/s); stderr: {err:?}",
        took.as_secs_f64(),
        bytes,
        bytes as f64 / took.as_secs_f64() / f64::from(1 << 20)
    );
    if took > std::time::Duration::from_millis(2500) {
        assert!(
            err.contains(&format!("tacid: copying {s4} to usb: ")) && err.contains("/s, "),
            "a copy of {took:?} said no progress: {err:?}"
        );
    }
}
