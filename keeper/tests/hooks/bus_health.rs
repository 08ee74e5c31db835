//! Health on real parts (adr/0028): the stem as root on a loop Btrfs, the keeper as its
//! user, the CLI as an approver and as root running the timer's act. The keeper's clock
//! for health is injected (a test-hooks build reads `TACID_TEST_CLOCK_FILE`), never slept
//! past; the timer's act is made to fail by filling the disk past the stem's hard floor.
//! The keeper's signals are received on the bus as any notifier would.
//!
//! Run (root, loop devices): `cargo test -p keeper --features test-hooks --test hooks bus_health::`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt as _;

use crate::common::{World, APPROVER};

/// `tacid data health --json` as an approver: (exit code, the document).
fn health(w: &World) -> (i32, serde_json::Value) {
    let (code, out, err) = w.tacid(APPROVER, &["data", "health", "--json"]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}{err}"));
    (code, v)
}

/// The findings of `level` and `kind`, as (says, todo).
fn findings(v: &serde_json::Value, level: &str, kind: &str) -> Vec<(String, String)> {
    v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["level"] == level && f["kind"] == kind)
        .map(|f| {
            (
                f["says"].as_str().unwrap_or_default().to_owned(),
                f["todo"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// The keeper's health clock, `secs` since the epoch (readable by the keeper's user).
fn set_clock(w: &World, secs: u64) {
    let path = w.dir.join("clock");
    std::fs::write(&path, format!("{secs}\n")).expect("the clock file");
}

fn clear_clock(w: &World) {
    let _ = std::fs::remove_file(w.dir.join("clock"));
}

/// A keeper whose health clock the test sets.
fn world_with_a_clock() -> Option<World> {
    let mut w = World::start()?;
    w.stop_keeper();
    let clock = w.dir.join("clock").display().to_string();
    w.keeper_env.push(("TACID_TEST_CLOCK_FILE".into(), clock));
    w.start_keeper(None);
    Some(w)
}

#[test]
fn bus_health_turns_warn_then_fail_as_time_passes_and_ok_after_the_timer_runs() {
    let Some(w) = world_with_a_clock() else {
        return;
    };

    // A new machine: nothing taken yet is a warning, which says what to do.
    let (code, v) = health(&w);
    assert_eq!(code, 16, "a machine with no snapshot yet warns: {v:#}");
    assert_eq!(v["level"], "warn");
    let none = findings(&v, "warn", "snapshot-age");
    assert!(
        none.iter()
            .any(|(says, todo)| says == "there is no snapshot of /home yet."
                && todo.contains("tacid data snapshot")),
        "{none:?}"
    );

    // The timer's act (as the timeline service runs it: root, over the bus).
    let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, v) = health(&w);
    assert_eq!(code, 0, "just after the timer's set: ok: {v:#}");
    assert_eq!(v["level"], "ok");
    let home = v["subvolumes"]
        .as_array()
        .expect("subvolumes")
        .iter()
        .find(|s| s["of_path"] == "/home")
        .expect("/home is judged")
        .clone();
    assert!(home["newest_micros"].as_i64().is_some(), "{home:#}");
    assert!(
        home["newest_pre_switch_micros"].is_null(),
        "no pre-switch set yet: {home:#}"
    );

    // The signals a notifier would hear, from here on.
    let root = w.keeper_as_root();
    let mut worsened = root
        .run(root.proxy.receive_health_worsened())
        .expect("subscribe to HealthWorsened");

    // Three hours on, and the timer never ran again: a warning naming the timer.
    let t0 = unix_now();
    set_clock(&w, t0 + 3 * 3600 + 60);
    let (code, v) = health(&w);
    assert_eq!(code, 16, "{v:#}");
    let stale = findings(&v, "warn", "snapshot-age");
    assert!(
        stale.iter().any(|(says, todo)| says
            .starts_with("the newest snapshot of /home is 3 hours old")
            && todo.contains("systemctl status tacid-timeline.timer")),
        "{stale:?}"
    );
    let late = findings(&v, "warn", "timeline-timer");
    assert!(
        late.iter().any(
            |(says, todo)| says.contains("3 hours ago; it is due hourly")
                && todo.contains("did not run when due")
        ),
        "{late:?}"
    );
    let signal = root
        .run(async { tokio::time::timeout(Duration::from_secs(10), worsened.next()).await })
        .expect("HealthWorsened within 10 s")
        .expect("a signal");
    let args = signal.args().expect("its arguments");
    assert_eq!(args.level(), &"warn");
    assert!(
        args.says().contains("/home is 3 hours old"),
        "{}",
        args.says()
    );

    // Two days on: failing.
    set_clock(&w, t0 + 2 * 86_400 + 60);
    let (code, v) = health(&w);
    assert_eq!(code, 17, "{v:#}");
    assert_eq!(v["level"], "fail");
    assert!(
        findings(&v, "fail", "snapshot-age")
            .iter()
            .any(|(says, _)| says.starts_with("the newest snapshot of /home is 2 days old")),
        "{v:#}"
    );
    let signal = root
        .run(async { tokio::time::timeout(Duration::from_secs(10), worsened.next()).await })
        .expect("HealthWorsened (fail) within 10 s")
        .expect("a signal");
    assert_eq!(signal.args().expect("args").level(), &"fail");

    // The fix: the clock is the machine's again and the timer runs; back to ok, with the
    // text for people saying so.
    clear_clock(&w);
    let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, v) = health(&w);
    assert_eq!(code, 0, "{v:#}");
    let (code, text, _) = w.tacid(APPROVER, &["data", "health"]);
    assert_eq!(code, 0);
    assert!(text.starts_with("tacid health: ok\n"), "{text}");
}

/// Take `bytes` of the filesystem with one preallocated file in @home; its path.
fn fill(w: &World, bytes: u64) -> std::path::PathBuf {
    let path = w.top().join("@home/fill");
    let f = std::fs::File::create(&path).expect("the fill file");
    rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, bytes).expect("fallocate");
    f.sync_all().expect("sync");
    rustix::fs::sync();
    path
}

fn free_bytes(w: &World) -> u64 {
    let st = rustix::fs::statvfs(w.top()).expect("statvfs");
    st.f_bavail * st.f_frsize
}

#[test]
fn bus_health_fails_when_the_timers_act_fails_on_a_full_disk_and_is_ok_once_space_is_back() {
    let Some(mut w) = world_with_a_clock() else {
        return;
    };
    // The stem's hard floor: 150 MiB (the loop filesystem has 512).
    let floor: u64 = 150 << 20;
    w.kill_stem();
    w.stem_args = vec!["--hard-floor-bytes".into(), floor.to_string()];
    w.start_stem();
    let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, v) = health(&w);
    assert_eq!(code, 0, "{v:#}");

    let root = w.keeper_as_root();
    let mut act_failed = root
        .run(root.proxy.receive_scheduled_act_failed())
        .expect("subscribe to ScheduledActFailed");

    // Something else fills the disk to below the floor; the timer's act fails.
    let free = free_bytes(&w);
    let file = fill(&w, free.saturating_sub(floor / 2));
    println!("free after the fill: {} MiB", free_bytes(&w) >> 20);
    let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert_eq!(
        out.status.code(),
        Some(11),
        "the timer's act below the hard floor: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let signal = root
        .run(async { tokio::time::timeout(Duration::from_secs(10), act_failed.next()).await })
        .expect("ScheduledActFailed within 10 s")
        .expect("a signal");
    let args = signal.args().expect("args");
    assert_eq!(args.act(), &"timeline");
    assert!(args.says().contains("tacid data health"), "{}", args.says());

    let (code, v) = health(&w);
    assert_eq!(code, 17, "below the hard floor is failing: {v:#}");
    let space = findings(&v, "fail", "free-space");
    assert!(
        space
            .iter()
            .any(|(says, todo)| says.contains("below the hard floor")
                && says.contains("new snapshots are refused")
                && todo.starts_with("free space on the disk")),
        "{v:#}"
    );
    let timer = findings(&v, "warn", "timeline-timer");
    assert!(
        timer.iter().any(
            |(says, todo)| says.contains("the timeline timer's last run")
                && says.contains("failed")
                && todo.starts_with("free space on the disk")
        ),
        "{v:#}"
    );
    assert_eq!(v["timer_failures"], 1, "{v:#}");

    // The fix: space back, the timer runs again, health is ok.
    std::fs::remove_file(&file).expect("remove the fill");
    rustix::fs::sync();
    let mut ok = false;
    for _ in 0..40 {
        // Freed extents come back after a commit and the cleaner.
        let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
        if out.status.success() {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(ok, "the timer's act works once space is back");
    let (code, v) = health(&w);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["timer_failures"], 1, "the failure stays counted: {v:#}");
}

#[test]
fn bus_health_metrics_are_written_where_asked_and_name_each_subvolume() {
    let Some(w) = world_with_a_clock() else {
        return;
    };
    let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = w.dir.join("tacid.prom");
    let out = w.tacid_as_root(&[
        "data",
        "health",
        "--metrics-file",
        file.to_str().expect("utf-8"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).expect("the metrics file");
    assert!(text.contains("tacid_health_level 0\n"), "{text}");
    assert!(
        text.contains(
            "tacid_snapshot_newest_timestamp_seconds{subvolume=\"@home\",mount_point=\"/home\"} "
        ),
        "{text}"
    );
    crate::common::check_with_promtool(&text);
}

#[test]
fn bus_health_warns_of_a_restore_waiting_days_for_a_reboot_and_of_a_bad_request_file() {
    let Some(w) = world_with_a_clock() else {
        return;
    };
    let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = w.snapshot_home();
    let (code, _, err) = w.tacid(APPROVER, &["data", "restore", &name, "--yes"]);
    assert_eq!(code, 0, "staged: {err}");
    let (code, v) = health(&w);
    assert_eq!(code, 0, "a restore just staged is no warning: {v:#}");
    assert!(
        findings(&v, "ok", "staged-restore")
            .iter()
            .any(|(says, _)| says == "a restore of /home is staged; it happens at the next reboot."),
        "{v:#}"
    );
    // Two days on, nobody rebooted.
    set_clock(&w, unix_now() + 2 * 86_400 + 60);
    let (_, v) = health(&w);
    let waiting = findings(&v, "warn", "staged-restore");
    assert!(
        waiting.iter().any(|(says, todo)| says
            .starts_with("a restore of /home has waited 2 days for a reboot")
            && todo == "reboot to put it back, or `tacid data cancel` to withdraw it."),
        "{v:#}"
    );
    clear_clock(&w);
    let (code, _, err) = w.tacid(APPROVER, &["data", "cancel"]);
    assert_eq!(code, 0, "{err}");
    let (code, v) = health(&w);
    assert_eq!(code, 0, "{v:#}");
    assert!(findings(&v, "warn", "staged-restore").is_empty());

    // A bad request file, planted where the stem writes a real one.
    let request = w
        .top()
        .join(layout::SNAPSHOTS_SUBVOLUME)
        .join(layout::REQUEST_FILE_NAME);
    std::fs::write(&request, b"@home \xff\xfe not a request\n").expect("plant");
    let (code, v) = health(&w);
    assert_eq!(code, 16, "{v:#}");
    let bad = findings(&v, "warn", "bad-request");
    assert!(
        bad.iter().any(
            |(says, todo)| says.starts_with("the restore request file is bad (")
                && says.ends_with("the next boot refuses it and puts nothing back.")
                && todo.starts_with("`tacid data cancel` removes it")
        ),
        "{v:#}"
    );
    let (code, _, err) = w.tacid(APPROVER, &["data", "cancel"]);
    assert_eq!(code, 0, "{err}");
    let (code, v) = health(&w);
    assert_eq!(code, 0, "{v:#}");
}

/// A pre-switch set as root, as the NixOS module's check before a switch takes it.
fn pre_switch_set(w: &World) {
    let out = w.tacid_as_root(&[
        "data",
        "snapshot",
        "--pre-switch",
        "--reason",
        "before switching to generation 42",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bus_health_worsened_is_signalled_when_snapshots_stop_on_a_machine_already_warning() {
    let Some(w) = world_with_a_clock() else {
        return;
    };
    // A pre-switch set, but the timeline timer never took one: at warn already.
    pre_switch_set(&w);
    let (code, v) = health(&w);
    assert_eq!(code, 16, "{v:#}");
    assert!(
        !findings(&v, "warn", "timeline-timer").is_empty(),
        "the timer has not taken a set yet: {v:#}"
    );
    assert!(findings(&v, "warn", "snapshot-age").is_empty(), "{v:#}");

    let root = w.keeper_as_root();
    let mut worsened = root
        .run(root.proxy.receive_health_worsened())
        .expect("subscribe to HealthWorsened");
    // Three hours on: the level is still warn, but the snapshots have stopped, which is new.
    set_clock(&w, unix_now() + 3 * 3600 + 60);
    let (code, v) = health(&w);
    assert_eq!(code, 16, "{v:#}");
    assert_eq!(v["level"], "warn");
    let signal = root
        .run(async { tokio::time::timeout(Duration::from_secs(10), worsened.next()).await })
        .expect("HealthWorsened within 10 s, though the level was warn before")
        .expect("a signal");
    let args = signal.args().expect("its arguments");
    assert_eq!(args.level(), &"warn");
    assert!(
        args.says().contains("/home is 3 hours old"),
        "{}",
        args.says()
    );
    assert!(
        !args.says().contains("has not taken a set yet"),
        "only what is new is said: {}",
        args.says()
    );
}

#[test]
fn bus_health_with_the_timeline_off_is_ok_on_pre_switch_sets_days_old() {
    let Some(mut w) = World::start() else {
        return;
    };
    w.stop_keeper();
    let clock = w.dir.join("clock").display().to_string();
    w.keeper_env.push(("TACID_TEST_CLOCK_FILE".into(), clock));
    w.keeper_args
        .extend(["--timeline".to_owned(), "false".to_owned()]);
    w.start_keeper(None);

    // Nothing taken yet: a warning all the same, saying how to take one.
    let (code, v) = health(&w);
    assert_eq!(code, 16, "{v:#}");
    assert!(
        findings(&v, "warn", "snapshot-age")
            .iter()
            .any(|(says, _)| says.contains("the timeline is off")),
        "{v:#}"
    );
    // Only pre-switch sets, the newest three days old, no timeline run ever: ok.
    pre_switch_set(&w);
    set_clock(&w, unix_now() + 3 * 86_400 + 60);
    let (code, v) = health(&w);
    assert_eq!(code, 0, "{v:#}");
    assert!(findings(&v, "warn", "timeline-timer").is_empty(), "{v:#}");
    assert!(
        findings(&v, "ok", "snapshot-age")
            .iter()
            .any(
                |(says, _)| says.starts_with("the newest snapshot of /home is 3 days old")
                    && says.contains("the timeline is off")
            ),
        "{v:#}"
    );
}
