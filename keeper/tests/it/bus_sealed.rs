//! Bus tier, sealed targets: the CLI, the keeper and the stem on a private bus with a Btrfs
//! target `usb` and a sealed directory target `vault`. With no copier on the bus (a machine
//! that never started it), every act on `vault` fails with words naming the copier's unit,
//! journalled, and `status` says its last verification could check nothing; `usb` copies
//! as ever; a Btrfs target is not verified (its copies are checked as they are made); a
//! stranger may not verify.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;

use crate::common::{json, World, APPROVER, STRANGER};
use keeper::journal::{Journal, State};

/// Root's configuration: `usb` (Btrfs, at `usb`), `vault` (sealed, at `vault`).
fn write_config(path: &std::path::Path, usb: &std::path::Path, vault: &std::path::Path) {
    let text = format!(
        r#"{{"targets": {{"usb": {{"place": {:?}}}, "vault": {{"place": {:?}, "seal": {{"full_every": 2}}}}}}}}"#,
        usb.display().to_string(),
        vault.display().to_string()
    );
    fs::write(path, text).expect("config");
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).expect("chmod");
}

/// A world with `usb` and `vault` configured for the stem and the keeper.
fn world_with_vault() -> Option<(World, testbed::LoopFs)> {
    let mut w = World::start()?;
    let target = testbed::LoopFs::new(512 << 20).expect("the target Btrfs")?;
    let usb = target.top().join("tacid");
    fs::create_dir(&usb).expect("target dir");
    let vault = w.dir.join("vault");
    fs::create_dir(&vault).expect("vault dir");
    let config = w.dir.join("copies.json");
    write_config(&config, &usb, &vault);
    crate::common::sealed::configure_daemons(&mut w, &config);
    Some((w, target))
}

#[test]
fn bus_sealed_targets_without_a_copier_say_which_unit_to_start() {
    let Some((w, _target)) = world_with_vault() else {
        return;
    };
    assert!(!w.has_owner(layout::names::COPIER_BUS_NAME));
    let s1 = w.snapshot_home();

    // A copy to the sealed target: the copier's unit named, exit 14, journalled failed.
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &s1, "--to", "vault", "--json"]);
    assert_eq!(code, 14, "{out} {err}");
    let e = json(&out);
    assert_eq!(e["error"], "CopierNotRunning", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains(layout::names::COPIER_UNIT),
        "{e}"
    );
    // The Btrfs target is not touched by any of it.
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", &s1, "--to", "usb", "--json"]);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(json(&out)["copied"][0]["name"], s1.as_str());

    // Verifying: nothing can be checked; exit 14; journalled; status says so.
    let (code, text, err) = w.tacid(APPROVER, &["data", "verify", "--target", "vault"]);
    assert_eq!(code, 14, "{text} {err}");
    assert!(err.contains(layout::names::COPIER_UNIT), "{err}");
    let (code, out, _) = w.tacid(STRANGER, &["data", "status", "--json"]);
    assert_eq!(code, 0);
    let v = &json(&out)["verifications"];
    assert_eq!(v[0]["target"], "vault", "{v}");
    // A person's verification: journalled as theirs.
    assert_eq!(v[0]["by"], APPROVER, "{v}");
    assert_eq!(v[0]["failed"][0]["name"], serde_json::Value::Null, "{v}");
    assert!(
        v[0]["failed"][0]["problem"]
            .as_str()
            .unwrap()
            .contains(layout::names::COPIER_UNIT),
        "{v}"
    );
    let (_, text, _) = w.tacid(STRANGER, &["data", "status"]);
    assert!(
        text.contains("Sealed target vault: last verified")
            && text.contains("nothing could be checked: the copier is not running"),
        "{text}"
    );

    // Listing and fetching from it say the same.
    let (code, _, err) = w.tacid(STRANGER, &["data", "copies", "vault"]);
    assert_eq!(code, 14, "{err}");
    let (code, _, err) = w.tacid(APPROVER, &["data", "fetch", &s1, "--from", "vault"]);
    assert_eq!(code, 14, "{err}");

    // A Btrfs target is not verified; a stranger may not verify: both refused, journalled.
    let (code, _, err) = w.tacid(APPROVER, &["data", "verify", "--target", "usb"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("target usb is not sealed"), "{err}");
    let (code, _, err) = w.tacid(STRANGER, &["data", "verify", "--target", "vault"]);
    assert_eq!(code, 4, "{err}");
    let (code, _, err) = w.tacid(
        APPROVER,
        &["data", "verify", "--target", "vault", "nonsense"],
    );
    assert_eq!(code, 5, "{err}");

    let (_copy, copied) = w.copy_journal();
    let j = Journal::open(&copied).expect("journal opens");
    let rows = j.requests().expect("rows");
    w.give_journal_back();
    let verify: Vec<_> = rows.iter().filter(|r| r.action == "verify").collect();
    let states: Vec<&str> = verify.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states, ["failed", "refused", "refused"], "{verify:?}");
    let copies: Vec<(String, State)> = j
        .copy_requests()
        .expect("copy rows")
        .into_iter()
        .map(|r| (r.target, r.state))
        .collect();
    assert!(
        copies.contains(&("vault".into(), State::Failed)),
        "{copies:?}"
    );
    assert!(
        copies.contains(&("usb".into(), State::Complete)),
        "{copies:?}"
    );
}
