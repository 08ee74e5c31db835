//! Bus tier, copies off the disk: the CLI, the keeper and the stem on a private
//! bus, a second loop Btrfs as the local target `usb`, a directory that is not on Btrfs as
//! the target `plain`. An approver copies (full, then incremental), anybody lists what the
//! target holds, `list` says where each snapshot has a copy, a stranger and a forged target
//! name are refused and journalled, a snapshot deleted here is fetched back and its restore
//! previewed, a target that is not Btrfs fails with its reason journalled, and the timer's
//! act copies the newest of each subvolume and applies the target's retention.

use crate::common::{self, json};

use std::fs;
use std::path::Path;

use crate::common::copies::world_with_usb;
use crate::common::{uid_of, World, APPROVER, STRANGER};
use keeper::journal::{CopyRow, Journal};
use serde_json::Value;

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

#[test]
fn bus_copies_to_a_local_target_and_back() {
    let Some((w, _target, usb)) = world_with_usb(&["--free-floor-bytes", "0"]) else {
        return;
    };
    let plain = w.dir.join("plain");

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
        held["copies"][0]["received_uuid"],
        Value::Null,
        "lookers see names only"
    );
    let (_, out, _) = w.tacid(APPROVER, &["data", "copies", "usb", "--json"]);
    assert!(json(&out)["copies"][0]["received_uuid"]
        .as_str()
        .is_some_and(|u| !u.is_empty()));
    let (code, text, _) = w.tacid(STRANGER, &["data", "copies", "usb"]);
    assert_eq!(code, 0);
    assert!(text.contains("usb holds 2 copies"), "{text}");

    // `list` says where each snapshot has a copy.
    let (code, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    assert_eq!(code, 0);
    let list = json(&out)["snapshots"].clone();
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
    let fetched = json(&out)["snapshots"]
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
    let list = json(&out)["snapshots"].clone();
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

/// Take a timeline set as the approver; its members' names.
fn timeline(w: &World) -> Vec<String> {
    let (code, out, err) = w.tacid(APPROVER, &["data", "snapshot", "--timeline", "--json"]);
    assert_eq!(code, 0, "timeline snapshot: {err}");
    json(&out)["snapshots"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["name"].as_str().expect("a name").to_owned())
        .collect()
}

fn home_of(set: &[String]) -> &str {
    set.iter()
        .find(|n| n.starts_with("@home."))
        .expect("a member of /home")
}

fn on_disk(w: &World) -> std::collections::BTreeSet<String> {
    w.disk_snapshots().0.into_iter().collect()
}

/// The target is away (its directory gone: unplugged) while the hourly retention runs over
/// more snapshots than it keeps; the newest snapshot the target holds stays (the prune's
/// dry run, `list` and `delete` say why), and once the target is back the next copy is
/// incremental against it. Then the free-space floor, with nothing left but that parent:
/// kept, said, journalled. The retention window is counted in snapshots, as retention
/// counts periods that have one: no clock moves.
#[test]
fn bus_retention_keeps_the_last_common_parent_while_the_target_is_away() {
    let Some((mut w, _target, usb)) = world_with_usb(common::KEEP_ONLY_THE_NEWEST_HOURLY) else {
        return;
    };
    // Something to copy: a full copy of /home is megabytes, an incremental one is not.
    let data: Vec<u8> = (0..8usize << 20)
        .map(|i| (i as u8).wrapping_mul(29) | 1)
        .collect();
    fs::write(w.top().join("@home/data"), data).unwrap();
    let t1 = timeline(&w);
    let (code, out, err) = w.tacid("root", &["data", "copy", "--to", "usb", "--json"]);
    assert_eq!(code, 0, "the timer's first copy: {out} {err}");
    let first = json(&out);
    let full_bytes = first["copied"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == home_of(&t1))
        .expect("/home copied")["bytes"]
        .as_u64()
        .unwrap();
    assert!(full_bytes > 8 << 20, "{first}");

    // Unplugged: the timer's copy fails, and what usb held is remembered.
    let away = usb.with_extension("away");
    fs::rename(&usb, &away).unwrap();
    let (code, _, err) = w.tacid("root", &["data", "copy", "--to", "usb"]);
    assert_ne!(code, 0, "a copy to a target away: {err}");
    fs::write(
        w.top().join("@home/notes.txt"),
        b"written while usb was away",
    )
    .unwrap();
    let t2 = timeline(&w);
    let t3 = timeline(&w);

    // The window passes: hourly 1 keeps t3 only; t1 is the last common parent with usb.
    let (code, out, err) = w.tacid(STRANGER, &["data", "prune", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    println!("{out}");
    for name in &t1 {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(name.as_str()))
            .unwrap_or_else(|| panic!("{name} not in:\n{out}"));
        assert!(line.contains("kept: last common parent with usb"), "{line}");
    }
    let (_, out, _) = w.tacid(STRANGER, &["data", "prune", "--dry-run", "--json"]);
    let report = json(&out);
    let spared: Vec<&Value> = report["spared"].as_array().unwrap().iter().collect();
    for name in &t1 {
        let e = spared
            .iter()
            .find(|e| e["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} not spared: {report}"));
        assert!(
            e["note"]
                .as_str()
                .unwrap()
                .starts_with("kept: last common parent with usb"),
            "{e}"
        );
    }
    let (_, text, _) = w.tacid(STRANGER, &["data", "list"]);
    assert!(
        text.contains("    kept   last common parent with usb"),
        "{text}"
    );
    let (_, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    let list = json(&out)["snapshots"].clone();
    for e in list.as_array().unwrap() {
        let want = if t1.iter().any(|n| e["name"] == n.as_str()) {
            serde_json::json!(["usb"])
        } else {
            serde_json::json!([])
        };
        assert_eq!(e["last_common_parent_of"], want, "{e}");
    }

    let (code, out, err) = w.tacid(APPROVER, &["data", "prune"]);
    assert_eq!(code, 0, "prune: {out} {err}");
    let left = on_disk(&w);
    assert!(
        t1.iter().all(|n| left.contains(n)),
        "the parent went: {left:?}"
    );
    assert!(t2.iter().all(|n| !left.contains(n)), "{left:?}");
    assert!(t3.iter().all(|n| left.contains(n)), "{left:?}");
    // A person's delete says why not, and how to anyway.
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", home_of(&t1)]);
    assert_eq!(code, 10, "{err}");
    assert!(
        err.contains("last common parent with usb") && err.contains("--next-copy-full"),
        "{err}"
    );
    assert!(on_disk(&w).contains(home_of(&t1)));

    // Back: the copy is incremental against the parent kept.
    fs::rename(&away, &usb).unwrap();
    let (code, out, err) = w.tacid("root", &["data", "copy", "--to", "usb", "--json"]);
    assert_eq!(code, 0, "the copy once usb is back: {out} {err}");
    let r = json(&out);
    let home = r["copied"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == home_of(&t3))
        .unwrap_or_else(|| panic!("/home's newest not copied: {r}"));
    assert_eq!(home["incremental"], true, "{r}");
    assert_eq!(home["parent"], home_of(&t1), "{r}");
    let bytes = home["bytes"].as_u64().unwrap();
    assert!(bytes < 1 << 20, "{bytes} bytes sent (full: {full_bytes})");
    eprintln!("after the target was away: {bytes} bytes sent (full: {full_bytes})");
    let rows = copy_rows(&w);
    let row = rows
        .iter()
        .rfind(|r| r.action == "copy" && r.subject == home_of(&t3))
        .unwrap();
    assert_eq!(row.state, "complete", "{row:?}");
    assert!(
        row.outcome.contains("incremental against") && !row.outcome.contains("(full)"),
        "{row:?}"
    );

    // Below a floor nothing can meet, with only the parent (t3 now) and nothing else
    // automatic left: the parent stays, the prune says so, and the journal too.
    let config = w.dir.join("copies.json");
    let floor = (1u64 << 40).to_string();
    let mut args: Vec<&str> = vec!["--copies-config", config.to_str().unwrap()];
    args.extend_from_slice(common::KEEP_ONLY_THE_NEWEST_HOURLY);
    let at = args
        .iter()
        .position(|a| *a == "--free-floor-bytes")
        .unwrap();
    args[at + 1] = &floor;
    w.stop_keeper_and_set_args(&args);
    w.start_keeper(None);
    let (code, out, err) = w.tacid(APPROVER, &["data", "prune"]);
    assert_eq!(code, 0, "prune below the floor: {out} {err}");
    println!("{out}");
    assert!(
        out.contains("what is left to delete is the last common parent with a copy target"),
        "{out}"
    );
    let left = on_disk(&w);
    assert!(t3.iter().all(|n| left.contains(n)), "{left:?}");
    let (requests, _) = w.journal_rows();
    let held = requests
        .iter()
        .rfind(|r| r.action == "delete" && r.subject == home_of(&t3))
        .expect("the floor's hold is journalled");
    assert_eq!(held.state, "failed", "{held:?}");
    assert!(
        held.outcome.contains("last common parent with usb") && held.reason.contains("floor"),
        "{held:?}"
    );

    // Said explicitly, a person may delete it; the journal says what it costs.
    let (code, out, err) = w.tacid(
        APPROVER,
        &["data", "delete", home_of(&t3), "--next-copy-full"],
    );
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("the next copy to usb is full"), "{out}");
    assert!(!on_disk(&w).contains(home_of(&t3)));
}

/// Wait until `path` exists (a transfer under way): false after a minute.
fn appears(path: &Path) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    false
}

/// The journal says only what happened: a copy and a fetch whose stem is killed mid-transfer
/// are "failed: the stem stopped" (the keeper never stopped), the fetch that follows is the
/// only complete one of that name even after a listing of the target, fetches count their
/// bytes, and a refused fetch is journalled "from" its target.
#[test]
fn bus_a_transfer_whose_stem_died_is_journalled_as_such_and_fetches_count_bytes() {
    let Some((mut w, _target, usb)) = world_with_usb(&["--free-floor-bytes", "0"]) else {
        return;
    };
    let big: Vec<u8> = (0..96usize << 20)
        .map(|i| (i as u8).wrapping_mul(31) | 1)
        .collect();
    fs::write(w.top().join("@home/big"), big).unwrap();
    let s1 = w.snapshot_home();
    let starts = w.keeper_starts();

    // A copy, the stem killed once the target has begun to receive it.
    let cli = w.spawn_tacid(APPROVER, &["data", "copy", &s1, "--to", "usb"]);
    assert!(appears(&usb.join(&s1)), "the copy never began");
    w.kill_stem();
    let out = cli.wait_with_output().unwrap();
    assert!(!out.status.success(), "a copy whose stem died succeeded");
    let rows = copy_rows(&w);
    let killed = rows
        .iter()
        .find(|r| r.action == "copy" && r.subject == s1)
        .expect("the copy is journalled");
    assert_eq!(killed.state, "failed", "{killed:?}");
    assert!(
        killed.outcome.contains("the stem stopped") && !killed.outcome.contains("keeper"),
        "{killed:?}"
    );
    w.start_stem();
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &s1, "--to", "usb", "--json"]);
    assert_eq!(code, 0, "the copy again: {out} {err}");

    // Deleted here (it is the last common parent with usb: said so), fetched back, the stem
    // killed once the store has begun to receive it.
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &s1, "--next-copy-full"]);
    assert_eq!(code, 0, "{err}");
    let incoming = w
        .top()
        .join(layout::SNAPSHOTS_SUBVOLUME)
        .join(layout::copies::INCOMING_DIR_NAME)
        .join(&s1);
    let cli = w.spawn_tacid(APPROVER, &["data", "fetch", &s1, "--from", "usb"]);
    assert!(appears(&incoming), "the fetch never began");
    w.kill_stem();
    let out = cli.wait_with_output().unwrap();
    assert!(!out.status.success(), "a fetch whose stem died succeeded");
    let rows = copy_rows(&w);
    let killed = rows
        .iter()
        .find(|r| r.action == "fetch" && r.subject == s1)
        .expect("the fetch is journalled");
    assert_eq!(killed.state, "failed", "{killed:?}");
    assert!(killed.outcome.contains("the stem stopped"), "{killed:?}");

    // Again, to the end: its bytes are counted.
    w.start_stem();
    let (code, out, err) = w.tacid(APPROVER, &["data", "fetch", &s1, "--from", "usb", "--json"]);
    assert_eq!(code, 0, "the fetch again: {out} {err}");
    let fetched = json(&out);
    let bytes = fetched["bytes"].as_u64().unwrap();
    assert!(
        bytes > 90 << 20,
        "a 96 MiB fetch said {bytes} bytes: {fetched}"
    );
    // A listing of the target settles nothing of this keeper's: one fetch of s1 complete.
    let (code, _, err) = w.tacid(STRANGER, &["data", "copies", "usb"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(w.keeper_starts(), starts, "the keeper never restarted");
    let rows = copy_rows(&w);
    let fetches: Vec<&CopyRow> = rows
        .iter()
        .filter(|r| r.action == "fetch" && r.subject == s1)
        .collect();
    assert_eq!(fetches.len(), 2, "{fetches:#?}");
    assert_eq!(fetches[0].id, killed.id);
    assert_eq!(fetches[0].state, "failed", "{fetches:#?}");
    assert_eq!(fetches[1].state, "complete", "{fetches:#?}");
    assert!(fetches[1].bytes > 90 << 20, "{fetches:#?}");
    assert!(
        rows.iter().all(|r| !r.outcome.contains("restarted")),
        "{rows:#?}"
    );

    // A fetch from a target that is not configured is refused "from" it.
    let (ok, _, err) = w.call_keeper_as(APPROVER, "Fetch", &[&s1, "nosuch"]);
    assert!(!ok && err.contains("NoSuchTarget"), "{err}");
    let refused = refusals(&w, "fetch");
    assert!(
        refused
            .iter()
            .any(|r| r.subject == format!("{s1} from nosuch")),
        "{refused:#?}"
    );
}

/// A read-only snapshot of @home in the store, made by hand with a name of the time `at`
/// (the fact injected: the keeper reads a snapshot's time from its name), as the engine
/// lists it.
fn snapshot_home_at(w: &World, at: std::time::SystemTime) -> stem::Snapshot {
    let home = layout::SubvolumeName::parse("@home").expect("a layout name");
    let name = layout::SnapshotName::new(home, at)
        .expect("a snapshot name")
        .to_string();
    common::ok(
        "btrfs",
        &[
            "subvolume",
            "snapshot",
            "-r",
            w.top().join("@home").to_str().expect("utf-8"),
            w.top()
                .join(layout::SNAPSHOTS_SUBVOLUME)
                .join(&name)
                .to_str()
                .expect("utf-8"),
        ],
    );
    stem::Engine::open(w.top())
        .expect("engine")
        .list()
        .expect("list")
        .into_iter()
        .find(|s| s.name.to_string() == name)
        .expect("the snapshot made by hand is listed")
}

/// The default counts (24 hourly, 7 daily, 4 weekly, 6 monthly) and a target away for two
/// days of hourly timeline sets: the copied set is older than the last 24 hours and not the
/// newest of its day, week or month, so the timeline rule chooses it; it stays, as the last
/// common parent with usb, and the copy once usb is back is incremental against it. The
/// days are injected as the snapshots' times (their names), journalled as the keeper
/// journals timeline sets: no clock is moved and nothing sleeps.
#[test]
fn bus_two_days_away_under_the_default_counts_keeps_the_parent() {
    let Some((mut w, _target, usb)) = world_with_usb(&["--free-floor-bytes", "0"]) else {
        return;
    };
    let data: Vec<u8> = (0..4usize << 20)
        .map(|i| (i as u8).wrapping_mul(37) | 1)
        .collect();
    fs::write(w.top().join("@home/data"), data).unwrap();
    let now = std::time::SystemTime::now();
    let since_midnight = now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() % 86_400;
    let hour = std::time::Duration::from_secs(3600);
    // 01:00 UTC the day before yesterday.
    let first = now - std::time::Duration::from_secs(since_midnight + 2 * 86_400) + hour;

    w.stop_keeper();
    let parent = snapshot_home_at(&w, first);
    w.journal_timeline_sets(std::slice::from_ref(&parent));
    w.start_keeper(None);
    let parent_name = parent.name.to_string();
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &parent_name, "--to", "usb"]);
    assert_eq!(code, 0, "{out} {err}");

    // Away: every hour since, a timeline set; two days of them.
    let away = usb.with_extension("away");
    fs::rename(&usb, &away).unwrap();
    w.stop_keeper();
    fs::write(
        w.top().join("@home/notes.txt"),
        b"written while usb was away",
    )
    .unwrap();
    let mut later = Vec::new();
    let mut at = first + hour;
    while at + std::time::Duration::from_secs(60) < now {
        later.push(snapshot_home_at(&w, at));
        at += hour;
    }
    assert!(later.len() > 47, "{} sets", later.len());
    w.journal_timeline_sets(&later);
    w.start_keeper(None);

    let (code, out, err) = w.tacid(APPROVER, &["data", "prune"]);
    assert_eq!(code, 0, "{out} {err}");
    let left = on_disk(&w);
    let second = later[0].name.to_string();
    assert!(!left.contains(&second), "the rules chose nothing: {out}");
    assert!(
        left.contains(&parent_name),
        "the last common parent with usb was deleted:\n{out}"
    );
    assert!(
        out.contains(&format!("{parent_name}  kept: last common parent with usb")),
        "{out}"
    );

    fs::rename(&away, &usb).unwrap();
    let (code, out, err) = w.tacid("root", &["data", "copy", "--to", "usb", "--json"]);
    assert_eq!(code, 0, "{out} {err}");
    let r = json(&out);
    let newest = later.last().unwrap().name.to_string();
    assert_eq!(r["copied"][0]["name"], newest.as_str(), "{r}");
    assert_eq!(r["copied"][0]["incremental"], true, "{r}");
    assert_eq!(r["copied"][0]["parent"], parent_name.as_str(), "{r}");
    let bytes = r["copied"][0]["bytes"].as_u64().unwrap();
    assert!(bytes < 1 << 20, "{bytes} bytes: {r}");
    eprintln!(
        "two days away, {} sets later: {bytes} bytes sent",
        later.len()
    );
}

/// What a restore replaced (adr/0027) is what a person chose to throw away: the copy timer
/// never ships it as the newest snapshot of its subvolume; named, it is copied like any.
#[test]
fn bus_the_copy_timer_never_copies_what_a_restore_replaced() {
    let Some((mut w, _target, _usb)) = world_with_usb(&[]) else {
        return;
    };
    let (code, out, err) = w.tacid(APPROVER, &["data", "snapshot", "/home", "--json"]);
    assert_eq!(code, 0, "{err}");
    let name = json(&out)["snapshots"][0]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    assert_eq!(w.tacid(APPROVER, &["data", "restore", &name, "--yes"]).0, 0);
    w.stop_keeper();
    w.run_initrd_restore();
    w.start_keeper(None);
    let (_, out, _) = w.tacid(APPROVER, &["data", "status", "--json"]);
    let undo = json(&out)["outcome_undo"]
        .as_str()
        .unwrap_or_else(|| panic!("no undo offered: {out}"))
        .to_owned();
    let kept = undo
        .strip_prefix("tacid data restore ")
        .expect("undo command")
        .to_owned();
    // The kept snapshot is the newest of @home on disk; the timer copies the one before.
    let (code, out, err) = w.tacid("root", &["data", "copy", "--to", "usb", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let report = json(&out);
    let named: Vec<String> = ["copied", "already_there", "failed"]
        .iter()
        .flat_map(|k| report[*k].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["name"].as_str().or(c.as_str()).map(str::to_owned))
        .collect();
    assert!(!named.contains(&kept), "{kept}: {report:#}");
    assert!(named.contains(&name), "{name}: {report:#}");
}
