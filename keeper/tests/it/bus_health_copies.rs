//! Health of a copy target on real parts (adr/0028): a second loop Btrfs as the target
//! `usb`, unplugged (its directory gone) so the timer's copy fails, then plugged back. The
//! keeper's ScheduledActFailed is heard on the bus; the metrics count the failure and
//! promtool accepts them, the CLI's and those the keeper wrote itself after the act.
//!
//! Run (root, loop devices): `cargo test -p keeper --test it bus_health_copies::`.

use std::time::Duration;

use futures_util::StreamExt as _;

use crate::common::copies::world_with_usb;
use crate::common::APPROVER;

fn health(w: &crate::common::World) -> (i32, serde_json::Value) {
    let (code, out, err) = w.tacid(APPROVER, &["data", "health", "--json"]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}{err}"));
    (code, v)
}

fn usb(v: &serde_json::Value) -> serde_json::Value {
    v["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| t["target"] == "usb")
        .expect("usb is judged")
        .clone()
}

fn findings_about(v: &serde_json::Value, kind: &str, about: &str) -> Vec<serde_json::Value> {
    v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["kind"] == kind && f["about"] == about)
        .cloned()
        .collect()
}

#[test]
fn bus_health_says_a_copy_failed_while_the_target_is_unplugged_and_clears_once_it_is_back() {
    // node_exporter's textfile directory, writable by the keeper's user (the module gives
    // it an ACL): the keeper writes the metrics there after every scheduled act.
    let textfiles = std::env::temp_dir().join(format!("tacid-textfiles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&textfiles);
    std::fs::create_dir(&textfiles).expect("textfile directory");
    let chown = std::process::Command::new("chown")
        .arg(layout::names::KEEPER_USER)
        .arg(&textfiles)
        .status()
        .expect("chown");
    assert!(chown.success());
    let prom = textfiles.join("tacid.prom");
    let prom_arg = prom.to_str().expect("utf-8").to_owned();
    let Some((w, _target, usb_dir)) = world_with_usb(&["--metrics-file", &prom_arg]) else {
        return;
    };
    let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, out, err) = w.tacid("root", &["data", "copy", "--to", "usb"]);
    assert_eq!(code, 0, "the timer's copy: {out}{err}");
    let (_, v) = health(&w);
    let t = usb(&v);
    assert!(t["last_success_micros"].as_i64().is_some(), "{t:#}");
    assert!(t["last_failure_micros"].is_null(), "{t:#}");
    let home = t["copies"]
        .as_array()
        .expect("copies")
        .iter()
        .find(|c| c["of_path"] == "/home")
        .expect("/home")
        .clone();
    assert!(
        home["newest_name"]
            .as_str()
            .is_some_and(|n| n.starts_with("@home.")),
        "{home:#}"
    );
    assert!(
        findings_about(&v, "copy-age", "usb")
            .iter()
            .all(|f| f["level"] == "ok"),
        "fresh copies on usb are ok: {v:#}"
    );

    let root = w.keeper_as_root();
    let mut failed = root
        .run(root.proxy.receive_scheduled_act_failed())
        .expect("subscribe to ScheduledActFailed");

    // Unplugged: the timer's copy fails.
    let away = usb_dir.with_extension("away");
    std::fs::rename(&usb_dir, &away).expect("unplug");
    let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert!(out.status.success());
    let (code, _, err) = w.tacid("root", &["data", "copy", "--to", "usb"]);
    assert_ne!(code, 0, "a copy to a target away: {err}");
    let signal = root
        .run(async { tokio::time::timeout(Duration::from_secs(10), failed.next()).await })
        .expect("ScheduledActFailed within 10 s")
        .expect("a signal");
    let args = signal.args().expect("args");
    assert_eq!(args.act(), &"copy to usb");

    let (code, v) = health(&w);
    assert!(code == 16 || code == 17, "{v:#}");
    let said = findings_about(&v, "copy-failed", "usb");
    assert_eq!(said.len(), 1, "{v:#}");
    assert_eq!(said[0]["level"], "warn");
    let says = said[0]["says"].as_str().expect("says");
    let todo = said[0]["todo"].as_str().expect("todo");
    assert!(
        says.starts_with("the last copy to usb, ") && says.contains(" failed: "),
        "{says}"
    );
    assert!(
        todo.contains("plug in or reach the target") && todo.contains("tacid data copy --to usb"),
        "{todo}"
    );
    let t = usb(&v);
    assert!(t["last_failure"].as_str().is_some(), "{t:#}");
    assert_eq!(t["failures"], 1, "{t:#}");

    let (code, metrics, err) = w.tacid(APPROVER, &["data", "health", "--metrics"]);
    assert!(code == 16 || code == 17, "{err}");
    assert!(
        metrics.contains("tacid_copy_failures_total{target=\"usb\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tacid_copy_last_failure_timestamp_seconds{target=\"usb\"} "),
        "{metrics}"
    );
    crate::common::check_with_promtool(&metrics);
    // The keeper wrote them too, after the failed act, without anybody asking.
    let written = std::fs::read_to_string(&prom).expect("the keeper wrote tacid.prom");
    assert!(
        written.contains("tacid_copy_failures_total{target=\"usb\"} 1\n"),
        "{written}"
    );
    crate::common::check_with_promtool(&written);
    let leftovers: Vec<_> = std::fs::read_dir(&textfiles)
        .expect("read")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| n != "tacid.prom")
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary file left: {leftovers:?}"
    );

    // Plugged back: the next copy works and the failure is no longer news.
    std::fs::rename(&away, &usb_dir).expect("plug back");
    let (code, out, err) = w.tacid("root", &["data", "copy", "--to", "usb"]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, v) = health(&w);
    assert!(findings_about(&v, "copy-failed", "usb").is_empty(), "{v:#}");
    assert!(usb(&v)["last_failure_micros"].is_null());
    assert_eq!(usb(&v)["failures"], 1, "the failure stays counted");
    let _ = std::fs::remove_dir_all(&textfiles);
}
