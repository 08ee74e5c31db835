//! What `tacid` says, without a bus: the command line's shape and its refusals.

use std::process::Command;

fn tacid() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tacid"))
}

#[test]
fn a_wrong_command_line_exits_2() {
    let out = tacid().args(["data", "restore"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn only_without_a_set_is_a_wrong_command_line() {
    let out = tacid()
        .args([
            "data",
            "restore",
            "@home.2026-12-01T140200.123456Z",
            "--only",
            "/home",
        ])
        .env("TACID_BUS_ADDRESS", "unix:path=/nonexistent/tacid-test-bus")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--only chooses members of a set"), "{err}");
    let out = tacid()
        .args(["data", "restore", "--help"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Restoring a set:") && text.contains("--only /persist,/var/log --yes"),
        "{text}"
    );
}

#[test]
fn no_bus_is_exit_8_with_what_to_do() {
    let out = tacid()
        .args(["data", "list", "--json"])
        .env("TACID_BUS_ADDRESS", "unix:path=/nonexistent/tacid-test-bus")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(8));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["exit_code"], 8);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is D-Bus running?"));
}

#[test]
fn json_is_one_flag_before_or_after_the_command_and_says_its_schema() {
    for args in [["data", "status", "--json"], ["--json", "data", "status"]] {
        let out = tacid()
            .args(args)
            .env("TACID_BUS_ADDRESS", "unix:path=/nonexistent/tacid-test-bus")
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(8), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        assert_eq!(
            (&v["schema"], &v["error"], &v["exit_code"]),
            (
                &serde_json::json!(1),
                &serde_json::Value::Null,
                &serde_json::json!(8)
            ),
            "{args:?}"
        );
    }
}

#[test]
fn help_states_the_boundaries() {
    let out = tacid()
        .args(["data", "snapshot", "--help"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no backup against a dead"), "{text}");
    assert!(text.contains("not the world outside"), "{text}");
}

#[test]
fn help_names_the_layouts_default_approver_group() {
    let out = tacid().args(["--help"]).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let said = format!("(default: {})", layout::defaults::APPROVER_GROUP);
    assert!(text.contains(&said), "--help must say {said}:\n{text}");
}
