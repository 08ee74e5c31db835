//! A target that loses things or fails: a listing without the copies this machine stored, a
//! delete the store refuses, a store that fails mid-verify, a chain with a glitched middle,
//! a parent whose manifest is older than this machine wrote.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use copier_interface::ErrorKind;

use crate::common::{
    self, incompressible, CopierDaemon, Ending, Places, PrivateBus, FULL, INCR, USB,
};

const THIRD: &str = "@home.2026-12-03T140200.123456Z";

fn copies(bus: &PrivateBus) -> Vec<copier_interface::SealedCopy> {
    common::call(bus, common::keeper(), |p| {
        Box::pin(async move { p.copies(USB).await })
    })
    .expect("copies")
}

fn verify_all(
    bus: &PrivateBus,
) -> Result<Vec<copier_interface::Verified>, copier_interface::Error> {
    common::call(bus, common::keeper(), |p| {
        Box::pin(async move { p.verify(USB, vec![]).await })
    })
}

fn delete(bus: &PrivateBus, name: &str) -> Result<(), copier_interface::Error> {
    let name = name.to_owned();
    common::call(bus, common::keeper(), move |p| {
        Box::pin(async move { p.delete(USB, &name).await })
    })
}

/// The one key directory under the target (`tacid-v1/<key id>`).
fn key_dir(places: &Places) -> PathBuf {
    let v1 = places.target.join("tacid-v1");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&v1)
        .expect("tacid-v1")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.remove(0)
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// Every part file last written `ago` before now.
fn age_parts(places: &Places, ago: Duration) {
    let when = SystemTime::now() - ago;
    for part in places.parts() {
        std::fs::File::options()
            .write(true)
            .open(places.target.join(&part))
            .and_then(|f| f.set_times(std::fs::FileTimes::new().set_modified(when)))
            .expect("set the time of a part");
    }
}

#[test]
fn a_listing_without_the_manifests_deletes_no_part_and_verify_says_what_is_missing() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible(100_000);
    let first = common::seal(
        &bus,
        FULL,
        uuid::Uuid::from_u128(0x61),
        None,
        &stream,
        Ending::End,
    )
    .expect("copy");
    let parts = places.parts();
    assert!(!parts.is_empty());
    // The manifests' directory gone from the listing (moved away: an unreadable or emptied
    // directory, a wrong mount); the parts are old enough to clean.
    age_parts(&places, Duration::from_secs(3 * 24 * 3600));
    let manifests = key_dir(&places).join("manifests");
    let aside = places.dir.path().join("manifests-aside");
    std::fs::rename(&manifests, &aside).expect("move the manifests away");
    // A writing act (and so a clean) on that listing: no part of the lost copy goes.
    common::seal(
        &bus,
        INCR,
        uuid::Uuid::from_u128(0x62),
        None,
        &stream,
        Ending::End,
    )
    .expect("another copy");
    for part in &parts {
        assert!(places.parts().contains(part), "{part} was deleted");
    }
    // Verify names what this machine wrote and the target no longer lists.
    let verified = verify_all(&bus).expect("verify answers");
    let missing = verified
        .iter()
        .find(|v| v.name == FULL)
        .unwrap_or_else(|| panic!("{FULL} is not in {verified:?}"));
    assert!(!missing.ok, "{verified:?}");
    assert!(
        missing.problem.contains(&format!(
            "missing: written on this machine at generation {}, not on target {USB} now",
            first.generation
        )),
        "{verified:?}"
    );
    assert!(
        verified.iter().any(|v| v.name == INCR && v.ok),
        "{verified:?}"
    );
    // Back: whole again, and verify is good.
    let status = std::process::Command::new("cp")
        .args(["-a", "-T"])
        .arg(&aside)
        .arg(&manifests)
        .status()
        .expect("cp back");
    assert!(status.success());
    let verified = verify_all(&bus).expect("verify answers");
    assert!(
        verified.len() == 2 && verified.iter().all(|v| v.ok),
        "{verified:?}"
    );
}

#[test]
fn a_record_from_before_stored_copies_were_kept_cleans_nothing_on_a_listing_without_them() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible(100_000);
    common::seal(
        &bus,
        FULL,
        uuid::Uuid::from_u128(0x67),
        None,
        &stream,
        Ending::End,
    )
    .expect("copy");
    copier.kill();
    // generations.json as a copier before this one wrote it: no record of stored copies.
    let record_path = places.state.join("generations.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record_path).expect("the record")).expect("JSON");
    let usb = record["targets"][USB].as_object_mut().expect("the target");
    assert!(usb.remove("sealed").is_some(), "{usb:?}");
    std::fs::write(&record_path, serde_json::to_vec(&record).expect("JSON")).expect("write");
    let parts = places.parts();
    age_parts(&places, Duration::from_secs(3 * 24 * 3600));
    let manifests = key_dir(&places).join("manifests");
    let aside = places.dir.path().join("manifests-aside");
    std::fs::rename(&manifests, &aside).expect("move the manifests away");
    let _copier = CopierDaemon::start(&bus, &places);
    common::seal(
        &bus,
        INCR,
        uuid::Uuid::from_u128(0x68),
        None,
        &stream,
        Ending::End,
    )
    .expect("another copy");
    for part in &parts {
        assert!(places.parts().contains(part), "{part} was deleted");
    }
}

#[test]
fn a_delete_the_store_refuses_is_a_copy_being_deleted_then_finished_not_an_alarm() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible(100_000);
    common::seal(
        &bus,
        FULL,
        uuid::Uuid::from_u128(0x63),
        None,
        &stream,
        Ending::End,
    )
    .expect("copy");
    let saved = places.dir.path().join("saved");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(&places.target)
        .arg(&saved)
        .status()
        .expect("cp");
    assert!(cp.success());
    // The store refuses to remove the manifest (the copier may not write its directory).
    let manifests = key_dir(&places).join("manifests");
    chmod(&manifests, 0o500);
    let e = delete(&bus, FULL).expect_err("the store refused the delete");
    assert_ne!(e.kind(), Some(ErrorKind::Untrusted), "{e:?}");
    let listed = copies(&bus);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].problem.contains("is being deleted"), "{listed:?}");
    assert!(!listed[0].problem.contains("put back"), "{listed:?}");
    // The store works again: the next writing act finishes the delete.
    chmod(&manifests, 0o700);
    common::seal(
        &bus,
        INCR,
        uuid::Uuid::from_u128(0x64),
        None,
        &stream,
        Ending::End,
    )
    .expect("another copy");
    let listed = copies(&bus);
    assert_eq!(
        listed.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        vec![INCR],
        "{listed:?}"
    );
    // Served again after the delete finished: the alarm.
    let status = std::process::Command::new("cp")
        .args(["-a", "-T"])
        .arg(&saved)
        .arg(&places.target)
        .status()
        .expect("cp back");
    assert!(status.success());
    let listed = copies(&bus);
    let back = listed
        .iter()
        .find(|c| c.name == FULL)
        .expect("served again");
    assert!(
        back.problem.contains("put back a deleted copy"),
        "{listed:?}"
    );
}

#[test]
fn a_store_failing_mid_verify_stops_the_act_with_its_error() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible(100_000);
    common::seal(
        &bus,
        FULL,
        uuid::Uuid::from_u128(0x65),
        None,
        &stream,
        Ending::End,
    )
    .expect("copy");
    common::seal(
        &bus,
        INCR,
        uuid::Uuid::from_u128(0x66),
        None,
        &stream,
        Ending::End,
    )
    .expect("copy");
    // The store cannot give a part (it refuses to read it): not the copy's fault.
    let part = places.target.join(&places.parts()[0]);
    chmod(&part, 0o000);
    let e = verify_all(&bus).expect_err("the act stops");
    assert_eq!(e.kind(), Some(ErrorKind::Failed), "{e:?}");
    assert!(e.message().contains("ermission denied"), "{}", e.message());
    chmod(&part, 0o600);
    let verified = verify_all(&bus).expect("verify answers");
    assert!(
        verified.len() == 2 && verified.iter().all(|v| v.ok),
        "{verified:?}"
    );
}

#[test]
fn a_glitched_copy_in_a_chain_still_needs_its_parent() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible(100_000);
    let (f, i1, i2) = (
        uuid::Uuid::from_u128(0x71),
        uuid::Uuid::from_u128(0x72),
        uuid::Uuid::from_u128(0x73),
    );
    common::seal(&bus, FULL, f, None, &stream, Ending::End).expect("full");
    let before = places.parts();
    common::seal(&bus, INCR, i1, Some((FULL, f)), &stream, Ending::End).expect("incremental");
    let incr_parts: Vec<String> = places
        .parts()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    common::seal(&bus, THIRD, i2, Some((INCR, i1)), &stream, Ending::End).expect("incremental");
    // The middle copy loses a part: not good, but its manifest authenticates.
    std::fs::remove_file(places.target.join(&incr_parts[0])).expect("drop a part");
    let listed = copies(&bus);
    let middle = listed.iter().find(|c| c.name == INCR).expect("listed");
    assert!(middle.problem.contains("missing"), "{listed:?}");
    assert_eq!(middle.parent_uuid, f.hyphenated().to_string(), "{listed:?}");
    assert_eq!(middle.depth, 1, "{listed:?}");
    let e = delete(&bus, FULL).expect_err("needed");
    assert_eq!(e.kind(), Some(ErrorKind::Needed), "{e:?}");
    assert!(e.message().contains(INCR), "{}", e.message());
}
