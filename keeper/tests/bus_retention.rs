//! The bus tier for retention: delete, keep, prune (dry run and for real) and the hard
//! floor, through the CLI, the keeper and the stem on a real dbus-daemon and loop Btrfs.
//!
//! Run (root, loop devices): `cargo build -p stem -p tacid-cli -p initrd --bins &&
//! cargo test -p keeper --test bus_retention`.

mod common;

use std::collections::BTreeSet;

use common::{World, APPROVER, STRANGER};

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Take a set as the approver; its members' names.
fn take(w: &World, args: &[&str]) -> Vec<String> {
    let mut all = vec!["data", "snapshot", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = w.tacid(APPROVER, &all);
    assert_eq!(code, 0, "snapshot {args:?} failed: {err}");
    json(&out)["snapshots"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["name"].as_str().expect("a name").to_owned())
        .collect()
}

fn on_disk(w: &World) -> BTreeSet<String> {
    w.disk_snapshots().0.into_iter().collect()
}

/// Write 1 MiB files into @home until fewer than `free` bytes are free; bytes written.
fn fill_until_free_below(w: &World, free: u64) -> u64 {
    use std::io::Write as _;
    let chunk = vec![0x5a_u8; 1 << 20];
    let mut written = 0;
    for i in 0.. {
        let st = rustix::fs::statvfs(w.top()).expect("statvfs");
        if st.f_bavail * st.f_frsize < free {
            break;
        }
        let mut f = std::fs::File::create(w.top().join(format!("@home/fill.{i}"))).expect("create");
        f.write_all(&chunk).expect("write");
        f.sync_all().expect("sync");
        written += chunk.len() as u64;
    }
    written
}

fn restart_keeper(w: &mut World, args: &[&str]) {
    w.stop_keeper();
    w.keeper_args = args.iter().map(|s| s.to_string()).collect();
    w.start_keeper(None);
}

#[test]
fn bus_prune_explains_every_choice_then_deletes_and_journals_the_rule() {
    let Some(mut w) = World::start() else { return };
    restart_keeper(
        &mut w,
        &[
            "--keep-pre-switch-sets",
            "1",
            "--keep-hourly",
            "1",
            "--keep-daily",
            "0",
            "--keep-weekly",
            "0",
            "--keep-monthly",
            "0",
            "--free-floor-bytes",
            "0",
        ],
    );
    let p1 = take(&w, &["--pre-switch", "--reason", "switch 1"]);
    let p2 = take(&w, &["--pre-switch", "--reason", "switch 2"]);
    let p3 = take(&w, &["--pre-switch", "--reason", "switch 3"]);
    let t1 = take(&w, &["--timeline"]);
    let t2 = take(&w, &["--timeline"]);
    let manual = take(&w, &["/home", "--reason", "mine"]);
    assert_eq!(p1.len(), 3, "the default set has three members");

    // A person keeps one member of the oldest set: the whole set stays.
    let (code, out, err) = w.tacid(APPROVER, &["data", "keep", &p1[0]]);
    assert_eq!(code, 0, "keep: {err}");
    assert!(out.contains("marked to keep"), "{out}");
    let (code, out, _) = w.tacid(APPROVER, &["data", "keep", &p1[0]]);
    assert_eq!(code, 0);
    assert!(
        out.contains("already marked to keep; nothing changed"),
        "{out}"
    );

    // Anybody may ask what would go; the answer names each snapshot and its rule.
    let before = on_disk(&w);
    let (code, out, err) = w.tacid(STRANGER, &["data", "prune", "--dry-run"]);
    assert_eq!(code, 0, "dry run: {err}");
    println!("{out}");
    for name in p2.iter().chain(&t1) {
        assert!(out.contains(name.as_str()), "{name} missing from:\n{out}");
    }
    assert!(
        out.contains("older than the newest 1 pre-switch sets"),
        "{out}"
    );
    assert!(
        out.contains("timeline: not the newest of any of the last 1 hours"),
        "{out}"
    );
    assert!(out.contains("kept: a person marked it to keep"), "{out}");
    assert!(
        out.contains("another member of its set is pinned or kept"),
        "{out}"
    );
    assert!(out.contains("Dry run: nothing was deleted"), "{out}");
    assert_eq!(on_disk(&w), before, "a dry run deleted something");
    let (code, out, _) = w.tacid(STRANGER, &["data", "prune", "--dry-run", "--json"]);
    assert_eq!(code, 0);
    let report = json(&out);
    let would: BTreeSet<String> = report["deleted"]
        .as_array()
        .expect("deleted")
        .iter()
        .map(|e| e["name"].as_str().expect("name").to_owned())
        .collect();
    let expected: BTreeSet<String> = p2.iter().chain(&t1).cloned().collect();
    assert_eq!(would, expected);

    // Only approvers change anything.
    assert_eq!(w.tacid(STRANGER, &["data", "prune"]).0, 4);
    assert_eq!(w.tacid(STRANGER, &["data", "delete", &manual[0]]).0, 4);
    assert_eq!(w.tacid(STRANGER, &["data", "keep", &manual[0]]).0, 4);
    assert_eq!(on_disk(&w), before);

    let (code, out, err) = w.tacid(APPROVER, &["data", "prune"]);
    assert_eq!(code, 0, "prune: {out}{err}");
    let after = on_disk(&w);
    for gone in p2.iter().chain(&t1) {
        assert!(!after.contains(gone), "{gone} still on disk");
    }
    for stays in p1.iter().chain(&p3).chain(&t2).chain(&manual) {
        assert!(after.contains(stays), "{stays} was deleted");
    }
    let (rows, snaps) = w.journal_rows();
    for gone in p2.iter().chain(&t1) {
        let row = rows
            .iter()
            .find(|r| r.action == "delete" && &r.subject == gone && r.user_name == APPROVER)
            .unwrap_or_else(|| panic!("no journal row for deleting {gone}"));
        assert_eq!(row.state, "complete", "{row:?}");
        assert_eq!(row.user_name, APPROVER);
        let rule = if p2.contains(gone) {
            "pre-switch set"
        } else {
            "timeline:"
        };
        assert!(row.reason.contains(rule), "{row:?}");
        let snap = snaps.iter().find(|s| &s.name == gone).expect("journalled");
        assert_eq!(snap.state, "gone");
    }

    // A person deletes; the journal names the person. The kept one is refused.
    let (code, out, err) = w.tacid(APPROVER, &["data", "delete", &manual[0]]);
    assert_eq!(code, 0, "delete: {err}");
    assert!(out.contains("asked by tacid-approver"), "{out}");
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &p1[0]]);
    assert_eq!(code, 10, "{err}");
    assert!(
        err.contains("marked to keep") && err.contains("--unkeep"),
        "{err}"
    );
    let (rows, _) = w.journal_rows();
    let row = rows
        .iter()
        .find(|r| r.action == "delete" && r.subject == manual[0] && r.user_name == APPROVER)
        .expect("journalled");
    assert!(row.reason.contains("asked by tacid-approver"), "{row:?}");

    // Pinned by a staged restore: refused, whatever asks.
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &p3[0], "--yes"]);
    assert_eq!(code, 0, "stage: {err}");
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &p3[0]]);
    assert_eq!(code, 10, "{err}");
    assert!(err.contains("staged restore"), "{err}");
    assert!(on_disk(&w).contains(&p3[0]));

    // Unkept, the oldest set goes at the next prune.
    let (code, out, _) = w.tacid(APPROVER, &["data", "keep", "--unkeep", &p1[0]]);
    assert_eq!(code, 0);
    assert!(out.contains("no longer marked to keep"), "{out}");
    assert_eq!(w.tacid(APPROVER, &["data", "prune"]).0, 0);
    let after = on_disk(&w);
    assert!(p1.iter().all(|n| !after.contains(n)), "{after:?}");
    assert!(p3.iter().all(|n| after.contains(n)), "{after:?}");

    // Status shows the space and the cleaner's backlog.
    let (code, out, _) = w.tacid(STRANGER, &["data", "status"]);
    assert_eq!(code, 0);
    assert!(out.contains("Free space:"), "{out}");
}

#[test]
fn bus_below_the_hard_floor_a_snapshot_is_refused_and_the_journal_says_why() {
    let Some(mut w) = World::start() else { return };
    // A floor above the filesystem's size: every snapshot is below it.
    w.kill_stem();
    w.stem_args = vec!["--hard-floor-bytes".into(), (1u64 << 40).to_string()];
    w.start_stem();
    let before = on_disk(&w);

    let (code, _, err) = w.tacid(APPROVER, &["data", "snapshot", "--reason", "full"]);
    assert_eq!(code, 11, "{err}");
    assert!(err.contains("below the hard floor"), "{err}");
    assert!(err.contains("nothing was taken"), "{err}");
    let (code, _, err) = w.tacid(APPROVER, &["data", "snapshot", "--timeline"]);
    assert_eq!(code, 11, "{err}");

    let (snaps, temps) = w.disk_snapshots();
    assert_eq!(snaps.into_iter().collect::<BTreeSet<_>>(), before);
    assert!(temps.is_empty(), "half-made: {temps:?}");
    let (rows, _) = w.journal_rows();
    let set = rows
        .iter()
        .rfind(|r| r.action == "snapshot" && r.reason == "full")
        .expect("the refused set is journalled");
    assert_eq!(set.state, "failed", "{set:?}");
    assert!(set.outcome.contains("hard floor"), "{set:?}");

    let (code, out, _) = w.tacid(STRANGER, &["data", "status"]);
    assert_eq!(code, 0);
    assert!(out.contains("new snapshots are refused"), "{out}");
}

/// The loop tier's scale test: 5000 timeline snapshots, pruned through the CLI, the keeper
/// and the stem. Every one was taken in the same hour, so `--keep-hourly 1` keeps the
/// newest and the rest go; the time is printed.
#[test]
fn loop_prune_of_5000_snapshots_through_the_keeper() {
    use keeper::journal::{Asker, Journal, Member};
    const COUNT: usize = 5000;
    let Some(mut w) = World::start() else { return };
    restart_keeper(
        &mut w,
        &[
            "--keep-hourly",
            "1",
            "--keep-daily",
            "0",
            "--keep-weekly",
            "0",
            "--keep-monthly",
            "0",
            "--free-floor-bytes",
            "0",
        ],
    );
    // Taken and journalled directly (as the keeper would, one timeline set each), to keep
    // the setup to a minute; the prune below is the real path.
    let started = std::time::Instant::now();
    let engine = stem::Engine::open(w.top()).expect("engine");
    let persist = layout::SubvolumeName::parse("@persist").expect("layout name");
    let mut taken = Vec::with_capacity(COUNT);
    for _ in 0..COUNT {
        taken.push(engine.take(persist).expect("take"));
    }
    let took_snapshots = started.elapsed();
    {
        let mut j = Journal::open(&w.journal).expect("journal");
        let root = Asker {
            uid: 0,
            name: "root".into(),
        };
        for s in &taken {
            let id = j
                .begin_set(&root, "@persist", "timeline", false)
                .expect("set");
            let m = Member {
                name: s.name.to_string(),
                uuid: s.uuid.hyphenated().to_string(),
                of_subvolume: "@persist".into(),
                taken_micros: s.name.taken_unix_micros(),
            };
            j.complete_set(id, &[m], "complete").expect("complete");
            j.mark_timeline(id).expect("timeline");
        }
    }
    let _ = w.journal_rows(); // gives the files back to the keeper's user
    println!(
        "setup: {COUNT} snapshots in {:.1} s, journalled in {:.1} s",
        took_snapshots.as_secs_f64(),
        (started.elapsed() - took_snapshots).as_secs_f64()
    );

    let (code, out, err) = w.tacid(APPROVER, &["data", "prune", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json(&out)["deleted"].as_array().expect("list").len(),
        COUNT - 1
    );

    let started = std::time::Instant::now();
    let (code, out, err) = w.tacid(APPROVER, &["data", "prune", "--json"]);
    let pruned = started.elapsed();
    assert_eq!(code, 0, "{err}");
    let report = json(&out);
    assert_eq!(report["deleted"].as_array().expect("list").len(), COUNT - 1);
    assert!(report["failed"].as_array().expect("list").is_empty());
    println!(
        "prune of {} snapshots through CLI, keeper and stem: {:.2} s ({:.3} ms each)",
        COUNT - 1,
        pruned.as_secs_f64(),
        pruned.as_secs_f64() * 1e3 / (COUNT - 1) as f64
    );
    let left = on_disk(&w);
    let newest = taken.last().expect("taken").name.to_string();
    assert!(left.contains(&newest), "the newest was deleted");
    assert_eq!(
        left.iter().filter(|n| n.starts_with("@persist.")).count(),
        1,
        "{left:?}"
    );
    let (rows, _) = w.journal_rows();
    let deletions = rows
        .iter()
        .filter(|r| r.action == "delete" && r.state == "complete")
        .count();
    assert_eq!(deletions, COUNT - 1);
}

/// A small filesystem filled to the floors: below the free-space floor a snapshot prunes
/// the oldest automatic set first (journalled with that rule); below the hard floor the
/// snapshot itself is refused, nothing half-made, and the journal says why.
#[test]
fn loop_a_filesystem_filled_to_the_floors() {
    let Some(mut w) = World::start() else { return };
    restart_keeper(&mut w, &["--free-floor-bytes", &(160u64 << 20).to_string()]);
    let p1 = take(&w, &["--pre-switch", "--reason", "switch 1"]);
    let p2 = take(&w, &["--pre-switch", "--reason", "switch 2"]);
    let manual = take(&w, &["/home", "--reason", "mine"]);
    w.kill_stem();
    w.stem_args = vec!["--hard-floor-bytes".into(), (64u64 << 20).to_string()];
    w.start_stem();

    // Filled to below the hard floor, not to the last byte: the journal (on the same
    // filesystem) still has room to say why.
    let written = fill_until_free_below(&w, 48 << 20);
    println!("filled @home with {} MiB", written >> 20);
    let before = on_disk(&w);
    let (code, _, err) = w.tacid(
        APPROVER,
        &["data", "snapshot", "--pre-switch", "--reason", "full"],
    );
    if code != 11 {
        let log = std::fs::read_to_string(w.keeper_log()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        println!("keeper log (newest first):\n{}", tail.join("\n"));
    }
    assert_eq!(code, 11, "{err}");
    assert!(
        err.contains("below the hard floor") && err.contains("nothing was taken"),
        "{err}"
    );

    // The snapshot pruned first: the oldest automatic set went, by the floor's rule.
    let after = on_disk(&w);
    assert!(p1.iter().all(|n| !after.contains(n)), "{after:?}");
    assert!(
        p2.iter().chain(&manual).all(|n| after.contains(n)),
        "{after:?}"
    );
    assert_eq!(
        after
            .union(&p1.iter().cloned().collect())
            .cloned()
            .collect::<BTreeSet<_>>(),
        before
            .union(&p1.iter().cloned().collect())
            .cloned()
            .collect::<BTreeSet<_>>(),
        "nothing half-made"
    );
    let (_, temps) = w.disk_snapshots();
    assert!(temps.is_empty(), "half-made: {temps:?}");
    let (rows, _) = w.journal_rows();
    for gone in &p1 {
        let row = rows
            .iter()
            .find(|r| r.action == "delete" && &r.subject == gone)
            .expect("journalled");
        assert!(row.reason.contains("below the floor"), "{row:?}");
    }
    let refused = rows
        .iter()
        .rfind(|r| r.action == "snapshot" && r.reason == "full")
        .expect("the refused set is journalled");
    assert_eq!(refused.state, "failed");
    assert!(refused.outcome.contains("hard floor"), "{refused:?}");

    // The next round takes the next set; then only the manual snapshot is left, which the
    // floor never takes, and prune says the floor cannot be met.
    let (code, out, _) = w.tacid(STRANGER, &["data", "prune", "--dry-run"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("below the floor") && out.contains(&p2[0]),
        "{out}"
    );
    assert_eq!(w.tacid(APPROVER, &["data", "prune"]).0, 0);
    let (code, out, _) = w.tacid(APPROVER, &["data", "prune"]);
    assert_eq!(code, 0);
    assert!(out.contains("no automatic snapshot is left"), "{out}");
    let left = on_disk(&w);
    assert!(p2.iter().all(|n| !left.contains(n)));
    assert!(left.contains(&manual[0]));
}
