//! Attacks on the fixes of the last common parent, the journal of transfers, opens in use
//! and the log allowance, on real parts: a loop Btrfs, a private bus with the shipped
//! policies, the real stem and keeper, the real `tacid` as a stranger.
//!
//! - A stranger listing a configured target again and again (anybody may look at what a
//!   target holds) adds a bounded number of lines to the stem's and the keeper's logs,
//!   whether the target answers or cannot be used; so do the other calls anybody can make
//!   that reach the stem or the keeper's refusals (delete --next-copy-full, prune --dry-run).

use crate::common;

use std::fs;

use std::time::Instant;

use crate::common::copies::{logged_lines, strip_ansi, world_with_usb};
use crate::common::{World, STRANGER};

#[test]
fn bus_a_stranger_listing_a_target_again_and_again_leaves_a_bounded_log() {
    let Some((w, _target, _usb)) = world_with_usb(&["--free-floor-bytes", "0"]) else {
        return;
    };
    let name = w.snapshot_home();
    const CALLS: usize = 60;
    let floods: [(&str, Vec<&str>); 4] = [
        (
            "copies of a configured target",
            vec!["data", "copies", "usb"],
        ),
        (
            "copies of a target that is not Btrfs",
            vec!["data", "copies", "plain"],
        ),
        (
            "delete --next-copy-full (refused)",
            vec!["data", "delete", &name, "--next-copy-full"],
        ),
        ("prune --dry-run", vec!["data", "prune", "--dry-run"]),
    ];
    let mut over = Vec::new();
    for (what, args) in &floods {
        let (stem_before, keeper_before) =
            (logged_lines(&w.stem_log()), logged_lines(&w.keeper_log()));
        let started = Instant::now();
        w.tacid_again_and_again(STRANGER, CALLS, args);
        let stem = logged_lines(&w.stem_log()) - stem_before;
        let keeper = logged_lines(&w.keeper_log()) - keeper_before;
        eprintln!(
            "{CALLS} × {what} in {:.1} s: {stem} lines in the stem's log, {keeper} in the keeper's",
            started.elapsed().as_secs_f64()
        );
        let most = layout::defaults::ALLOWANCE_PER_CALLER as usize + 2;
        if stem > most || keeper > most {
            over.push(format!("{what}: {stem} stem lines, {keeper} keeper lines"));
        }
    }
    assert!(over.is_empty(), "{CALLS} calls each: {over:#?}");
    // After the stranger's flood, an approver's failed listing is still said.
    let (code, _, _) = w.tacid(common::APPROVER, &["data", "copies", "plain"]);
    assert_ne!(code, 0, "a target that is not Btrfs was listed");
    let approver = format!("uid={}", common::uid_of(common::APPROVER));
    let said = fs::read_to_string(w.keeper_log())
        .unwrap_or_default()
        .lines()
        .chain(fs::read_to_string(w.stem_log()).unwrap_or_default().lines())
        .map(strip_ansi)
        .filter(|l| l.contains(&approver) && l.contains("plain") && l.contains(" WARN "))
        .count();
    assert!(
        said >= 1,
        "the approver's failed listing is in no log after a stranger's flood"
    );
}

/// One stranger's flood of diffs of a snapshot that is not there must not use up the log
/// for everybody: another caller's refused diff afterwards is still in a log (the stem's
/// or the keeper's), with the name it asked for.
#[test]
fn bus_a_strangers_flood_of_refused_diffs_does_not_silence_another_callers() {
    let Some(w) = World::start() else {
        return;
    };
    let flooded = "@home.2001-01-01T000000.000000Z";
    let theirs = "@home.2002-02-02T000000.000000Z";
    w.tacid_again_and_again(STRANGER, 30, &["data", "diff", flooded]);
    let (code, _, err) = w.tacid(common::APPROVER, &["data", "diff", theirs]);
    assert_ne!(
        code, 0,
        "a diff of a snapshot that is not there was answered"
    );
    assert!(err.contains("2002"), "{err}");
    let logs = format!(
        "{}\n{}",
        fs::read_to_string(w.stem_log()).unwrap_or_default(),
        fs::read_to_string(w.keeper_log()).unwrap_or_default()
    );
    let said = logs
        .lines()
        .filter(|l| {
            let plain = strip_ansi(l);
            plain.contains(theirs) && (plain.contains(" WARN ") || plain.contains(" INFO "))
        })
        .count();
    assert!(
        said >= 1,
        "the approver's refused diff of {theirs} is in no log after a stranger's flood"
    );
}

fn signal(pid: i32, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid).expect("a pid");
    rustix::process::kill_process(pid, sig).expect("signal");
}

/// The keeper is killed mid-copy while the stem goes on; a new keeper starts and a stranger
/// lists the target while the stem still receives: the act is not settled "not done" then,
/// and once the copy is on the target, its row says complete (never "failed ... not done"
/// for a copy the target holds).
#[test]
fn bus_a_copy_the_stem_still_runs_for_a_keeper_that_stopped_is_not_written_off() {
    let Some((mut w, target, _usb)) = world_with_usb(&["--free-floor-bytes", "0"]) else {
        return;
    };
    let usb = target.top().join("tacid");
    let big: Vec<u8> = (0..64usize << 20)
        .map(|i| (i as u8).wrapping_mul(31) | 1)
        .collect();
    fs::write(w.top().join("@home/big"), big).unwrap();
    let s1 = w.snapshot_home();
    let cli = w.spawn_tacid(common::APPROVER, &["data", "copy", &s1, "--to", "usb"]);
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    let receive = loop {
        // The stem's receiver runs it (tacid-stem-receive), not the stem.
        if let Some(pid) = testbed::receive::btrfs_receive_for(w.top()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the copy never began");
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    signal(receive, rustix::process::Signal::STOP);
    w.kill_keeper();
    let _ = cli.wait_with_output();
    w.start_keeper(None);
    let (code, out, err) = w.tacid(STRANGER, &["data", "copies", "usb"]);
    signal(receive, rustix::process::Signal::CONT);
    assert_eq!(code, 0, "{out} {err}");
    // The stem finishes the copy for nobody; the target then holds it, verified.
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (code, out, _) = w.tacid(STRANGER, &["data", "copies", "usb", "--json"]);
        if code == 0 && out.contains(&s1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the copy never reached the target"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(usb.join(&s1).exists());
    let (_copy, copied) = w.copy_journal();
    let rows = keeper::journal::Journal::open(&copied)
        .expect("journal opens")
        .copy_requests()
        .expect("copy rows");
    w.give_journal_back();
    let row = rows
        .iter()
        .find(|r| r.action == "copy" && r.subject == s1)
        .expect("the copy is journalled");
    assert_eq!(
        row.state, "complete",
        "the target holds {s1}, verified, yet its row says: {row:?}"
    );
}
