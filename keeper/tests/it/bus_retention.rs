//! The bus tier for retention: delete, keep, prune (dry run and for real) and the hard
//! floor, through the CLI, the keeper and the stem on a real dbus-daemon and loop Btrfs.
//!
//! Run (root, loop devices): `cargo build -p stem -p tacid-cli -p initrd --bins &&
//! cargo test -p keeper --test it bus_retention::`.

use std::collections::BTreeSet;

use crate::common::{json, World, APPROVER, KEEP_ONLY_THE_NEWEST_HOURLY, STRANGER};

/// Take a set as the approver; its members' names.
fn take(w: &World, args: &[&str]) -> Vec<String> {
    take_set(w, args).1
}

/// Take a set as the approver; its id and its members' names.
fn take_set(w: &World, args: &[&str]) -> (i64, Vec<String>) {
    let mut all = vec!["data", "snapshot", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = w.tacid(APPROVER, &all);
    assert_eq!(code, 0, "snapshot {args:?} failed: {err}");
    let set = json(&out);
    let names = set["snapshots"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["name"].as_str().expect("a name").to_owned())
        .collect();
    (set["set_id"].as_i64().expect("a set id"), names)
}

/// The reason a prune's text lists `name` under: the nearest line above it indented by two
/// spaces (a rule's heading is not indented, its snapshots are indented by four).
fn listed_under<'a>(out: &'a str, name: &str) -> &'a str {
    let mut reason = "";
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("    ") {
            if rest.split_whitespace().next() == Some(name) {
                return reason;
            }
        } else if let Some(r) = line.strip_prefix("  ") {
            reason = r;
        } else {
            reason = "";
        }
    }
    panic!("{name} is not listed in:\n{out}");
}

/// The deleted snapshots `tacid data status` says Btrfs is still cleaning up (0: no line).
fn backlog(status: &str) -> usize {
    status
        .lines()
        .find(|l| l.contains("space back (Btrfs's cleaner runs after the next commit)"))
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no count in {l:?}"))
        })
        .unwrap_or(0)
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
    w.stop_keeper_and_set_args(args);
    w.start_keeper(None);
}

#[test]
fn bus_prune_explains_every_choice_then_deletes_and_journals_the_rule() {
    let Some(mut w) = World::start() else { return };
    restart_keeper(
        &mut w,
        &[
            &["--keep-pre-switch-sets", "1"],
            KEEP_ONLY_THE_NEWEST_HOURLY,
        ]
        .concat(),
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
        out.contains("older than the newest 1 pre-switch set"),
        "{out}"
    );
    assert!(
        out.contains("timeline: not the newest of any of the last 1 hour, "),
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

    // Status shows the space (the cleaner's backlog: the next test, where it is certain).
    let (code, out, _) = w.tacid(STRANGER, &["data", "status"]);
    assert_eq!(code, 0);
    assert!(out.contains("Free space:"), "{out}");
}

/// Three pre-switch sets chosen at once: the dry run and the prune say the rule once and,
/// under it, each set's own reason with that set's members (each set named by its id, not
/// by the first set's); and right after the prune, `tacid data status` shows what Btrfs is
/// still cleaning up.
///
/// The backlog is made certain by holding a directory open in one deleted snapshot: Btrfs's
/// cleaner drops no tree while an inode of it is in use (measured: held past 40 s and the
/// filesystem's periodic commit; dropped ~10 ms after the close). Without that it is a
/// race: the stem's commit (`BTRFS_IOC_SYNC`, which on current kernels wakes the cleaner)
/// has small snapshots like these dropped within ~10-30 ms, about the time the CLI takes to
/// ask for the status.
#[test]
fn bus_prune_names_each_pre_switch_set_and_status_shows_the_backlog() {
    let Some(mut w) = World::start() else { return };
    restart_keeper(
        &mut w,
        &["--keep-pre-switch-sets", "1", "--free-floor-bytes", "0"],
    );
    let sets: Vec<(i64, Vec<String>)> = (1..=4)
        .map(|i| take_set(&w, &["--pre-switch", "--reason", &format!("switch {i}")]))
        .collect();
    let (old, newest) = sets.split_at(3);
    let ids: BTreeSet<i64> = sets.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 4, "four distinct sets: {sets:?}");
    let reason = |id: i64| format!("pre-switch set {id} is older than the newest 1 pre-switch set");
    let members: usize = old.iter().map(|(_, names)| names.len()).sum();
    let explained_set_by_set = |out: &str, verb: &str| {
        assert!(
            out.contains(&format!(
                "\n{members} snapshots {verb} by the rule for pre-switch sets:\n"
            )),
            "{out}"
        );
        for (id, names) in old {
            assert_eq!(out.matches(&reason(*id)).count(), 1, "set {id}:\n{out}");
            for name in names {
                assert_eq!(
                    listed_under(out, name),
                    format!("{}:", reason(*id)),
                    "{name} (set {id}) explained wrongly in:\n{out}"
                );
            }
        }
        for name in &newest[0].1 {
            assert!(!out.contains(name.as_str()), "{name} listed:\n{out}");
        }
    };

    // The dry run: anybody may ask.
    let before = on_disk(&w);
    let (code, out, err) = w.tacid(STRANGER, &["data", "prune", "--dry-run"]);
    assert_eq!(code, 0, "dry run: {err}");
    println!("{out}");
    explained_set_by_set(&out, "would be deleted");
    assert_eq!(on_disk(&w), before, "a dry run deleted something");
    // Each JSON entry carries its own set's reason.
    let (code, out, _) = w.tacid(STRANGER, &["data", "prune", "--dry-run", "--json"]);
    assert_eq!(code, 0);
    let report = json(&out);
    let entries = report["deleted"].as_array().expect("deleted");
    assert_eq!(entries.len(), members, "{out}");
    for e in entries {
        let name = e["name"].as_str().expect("name");
        let (id, _) = old
            .iter()
            .find(|(_, names)| names.iter().any(|n| n == name))
            .unwrap_or_else(|| panic!("{name} is not in an old set"));
        assert_eq!(e["rule"], "pre-switch-sets", "{e}");
        assert_eq!(e["why"].as_str(), Some(reason(*id).as_str()), "{e}");
    }

    // For real, with a directory held open in one snapshot that goes.
    let held_name = &old[0].1[0];
    let held = std::fs::File::open(w.top().join(layout::SNAPSHOTS_SUBVOLUME).join(held_name))
        .expect("open a snapshot's root directory");
    let (code, out, err) = w.tacid(APPROVER, &["data", "prune"]);
    assert_eq!(code, 0, "prune: {out}{err}");
    println!("{out}");
    explained_set_by_set(&out, "deleted");
    assert!(out.contains("`tacid data status` shows it"), "{out}");
    let after = on_disk(&w);
    for (_, names) in old {
        assert!(names.iter().all(|n| !after.contains(n)), "{after:?}");
    }
    assert!(newest[0].1.iter().all(|n| after.contains(n)), "{after:?}");

    // Right after: the held one at least is still giving its space back.
    let (code, out, _) = w.tacid(STRANGER, &["data", "status"]);
    assert_eq!(code, 0);
    println!("{out}");
    let pending = backlog(&out);
    assert!(
        (1..=members).contains(&pending),
        "{pending} pending:\n{out}"
    );
    let (code, out, _) = w.tacid(STRANGER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    let n = json(&out)["deletions_pending"].as_u64().expect("a count");
    assert!(n >= 1, "{out}");

    // Closed, the cleaner drops it, and status stops saying so. (A commit wakes the
    // cleaner now rather than at the filesystem's next periodic commit.)
    drop(held);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let _ = std::process::Command::new("btrfs")
            .args(["filesystem", "sync"])
            .arg(w.top())
            .status();
        let (code, out, _) = w.tacid(STRANGER, &["data", "status"]);
        assert_eq!(code, 0);
        if backlog(&out) == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the backlog never went:\n{out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
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
    const COUNT: usize = 5000;
    let Some(mut w) = World::start() else { return };
    // The journal is written below as the keeper would write it, so the keeper is stopped
    // (it holds the journal exclusively) and started again once it is written.
    w.stop_keeper_and_set_args(KEEP_ONLY_THE_NEWEST_HOURLY);
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
    w.journal_timeline_sets(&taken);
    w.start_keeper(None);
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
