//! Bus tier, sealed copies end to end: the CLI, the keeper, the stem and the copier (its own
//! user, its key made by `tacid-copier key init`) on a private bus, the sealed directory
//! target `vault` (a chain at most 2 copies long, keeping the newest copy). Copies are
//! sealed full, incremental, then full again; listed, verified; one is fetched back into
//! the store and its restore previewed; a damaged part fails verification, journalled, and
//! `status` and `list` say so; the timer's act applies retention without deleting a copy a
//! kept copy's chain needs; a copier or a stem killed mid-copy leaves the other side
//! waiting for nothing (the keeper holds neither end of the pipe).
//! And a sealed target on a real Garage (S3): copied, listed, verified.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use crate::common::sealed::world_with_vault;
use crate::common::{json, uid_of, World, APPROVER, STRANGER};
use keeper::journal::{Journal, State};
use serde_json::Value;

/// A change in /home, then a snapshot of it.
fn changed_snapshot(w: &World, what: &str) -> String {
    fs::write(
        w.top().join("@home").join(format!("{what}.txt")),
        what.repeat(1000),
    )
    .expect("a change");
    w.snapshot_home()
}

/// An approver's copy of `name` to `target`, as JSON; the exit code must be 0.
fn copy(w: &World, name: &str, target: &str) -> Value {
    let (code, out, err) = w.tacid(APPROVER, &["data", "copy", name, "--to", target, "--json"]);
    assert_eq!(code, 0, "copy {name} to {target}: {out} {err}");
    json(&out)
}

/// The names a target holds, oldest first, and their problems.
fn held(w: &World, target: &str) -> Vec<(String, Value)> {
    let (code, out, err) = w.tacid(APPROVER, &["data", "copies", target, "--json"]);
    assert_eq!(code, 0, "copies {target}: {out} {err}");
    json(&out)["copies"]
        .as_array()
        .expect("copies")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().expect("a name").to_owned(),
                c["problem"].clone(),
            )
        })
        .collect()
}

fn verify_rows(w: &World) -> Vec<keeper::journal::RequestRow> {
    let (_copy, copied) = w.copy_journal();
    let rows = Journal::open(&copied)
        .expect("journal opens")
        .requests()
        .expect("rows");
    w.give_journal_back();
    rows.into_iter().filter(|r| r.action == "verify").collect()
}

#[test]
fn bus_sealed_copies_made_verified_fetched_and_kept_whole() {
    let Some((w, copier)) = world_with_vault("") else {
        return;
    };

    // Full, incremental, then full again: a chain holds at most 2 copies.
    let s1 = changed_snapshot(&w, "one");
    let r = copy(&w, &s1, "vault");
    assert_eq!(r["copied"][0]["incremental"], false, "{r}");
    let s2 = changed_snapshot(&w, "two");
    let r = copy(&w, &s2, "vault");
    assert_eq!(r["copied"][0]["incremental"], true, "{r}");
    assert_eq!(r["copied"][0]["parent"], s1.as_str(), "{r}");
    let s3 = changed_snapshot(&w, "three");
    let r = copy(&w, &s3, "vault");
    assert_eq!(
        r["copied"][0]["incremental"], false,
        "the third copy is full: {r}"
    );
    let names: Vec<String> = held(&w, "vault").into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, [s1.clone(), s2.clone(), s3.clone()]);
    let (_, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    let list = json(&out)["snapshots"].clone();
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|e| e["copies"] == serde_json::json!(["vault"])),
        "{list}"
    );

    // Verified: every copy good, exit 0; journalled; status says when and how.
    let (code, out, err) = w.tacid(APPROVER, &["data", "verify", "--target", "vault", "--json"]);
    assert_eq!(code, 0, "{out} {err}");
    let v = json(&out);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["copies"].as_array().unwrap().len(), 3, "{v}");
    let (_, text, _) = w.tacid(STRANGER, &["data", "status"]);
    assert!(
        text.contains("Sealed target vault: last verified"),
        "{text}"
    );
    assert!(text.contains("3 copies good"), "{text}");
    // A person's verification of every copy is journalled as theirs, not as the timer's.
    assert!(
        text.contains(" by tacid-approver: 3 copies good."),
        "{text}"
    );
    let rows = verify_rows(&w);
    assert_eq!(rows.len(), 3, "{rows:#?}");
    assert!(
        rows.iter()
            .all(|r| r.uid == uid_of(APPROVER) && r.user_name == APPROVER),
        "{rows:#?}"
    );
    // The timer's act (its unit runs `--timer` as root): the rule, and root as the caller.
    let (code, out, err) = w.tacid("root", &["data", "verify", "--target", "vault", "--timer"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("3 copies on vault verified"), "{out}");
    let (_, text, _) = w.tacid(STRANGER, &["data", "status"]);
    assert!(
        text.contains(" by timer of vault: 3 copies good."),
        "{text}"
    );
    let rows = verify_rows(&w);
    assert!(
        rows.len() == 6 && rows[3..].iter().all(|r| r.uid == 0),
        "{rows:#?}"
    );
    // The timer checks every copy: it names none.
    let (code, _, err) = w.tacid(
        "root",
        &["data", "verify", "--target", "vault", "--timer", &s1],
    );
    assert_eq!(code, 2, "{err}");

    // The way back: s2 deleted here, fetched (its chain: s1 then s2), its restore previewed.
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &s2, "--next-copy-full"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = w.tacid(
        APPROVER,
        &["data", "fetch", &s2, "--from", "vault", "--json"],
    );
    assert_eq!(code, 0, "fetch: {out} {err}");
    assert_eq!(json(&out)["snapshot"]["name"], s2.as_str());
    let (code, text, err) = w.tacid(APPROVER, &["data", "restore", &s2]);
    assert_eq!(
        code, 3,
        "the fetched snapshot's restore is previewed: {text} {err}"
    );
    let (code, _, err) = w.tacid(APPROVER, &["data", "fetch", &s2, "--from", "vault"]);
    assert_eq!(code, 6, "already here: {err}");

    // A damaged part: s2's copy fails verification (exit 15), journalled, shown. Its
    // manifest (visible to the store by design) names its copy's parts' directory.
    let objects = copier.objects();
    let manifest = objects
        .iter()
        .find(|p| p.to_string_lossy().ends_with(&format!("/manifests/{s2}")))
        .expect("s2's manifest");
    let text = fs::read_to_string(manifest).expect("a manifest");
    let body: Value = serde_json::from_str(text.splitn(3, '\n').nth(2).expect("a body"))
        .expect("the manifest's body is JSON");
    let copy_id = body["copy_id"].as_str().expect("copy_id").to_owned();
    let victim = objects
        .iter()
        .find(|p| p.to_string_lossy().contains(&format!("/parts/{copy_id}/")))
        .expect("a part of s2's copy")
        .clone();
    let mut bytes = fs::read(&victim).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    fs::write(&victim, &bytes).unwrap();
    let (code, out, err) = w.tacid(APPROVER, &["data", "verify", "--target", "vault", "--json"]);
    assert_eq!(code, 15, "{out} {err}");
    let v = json(&out);
    let failed: Vec<&str> = v["copies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(failed, [s2.as_str()], "{v}");
    let rows = verify_rows(&w);
    assert!(
        rows.iter()
            .any(|r| r.subject == s2 && r.state == State::Failed && !r.outcome.is_empty()),
        "{rows:#?}"
    );
    let (_, text, _) = w.tacid(STRANGER, &["data", "status"]);
    assert!(text.contains("FAILED (2 good, 1 failed)"), "{text}");
    assert!(text.contains(&format!("  {s2}: ")), "{text}");
    let (_, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    let entry = json(&out)["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == s2.as_str())
        .cloned()
        .unwrap();
    assert!(entry["failed_verification"]["vault"].is_string(), "{entry}");
    let (_, text, _) = w.tacid(STRANGER, &["data", "list"]);
    assert!(text.contains("FAILED verification on vault"), "{text}");
    // A fetch of it is refused before a byte reaches the stem, and nothing is left.
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &s2, "--next-copy-full"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = w.tacid(APPROVER, &["data", "fetch", &s2, "--from", "vault"]);
    assert_ne!(code, 0, "a damaged copy was fetched: {err}");
    let (_, out, _) = w.tacid(STRANGER, &["data", "list", "--json"]);
    assert!(!out.contains(&format!("\"{s2}\"")), "{out}");

    // The timer's act: s4 sealed against s3, then retention (the newest copy kept): s4 and
    // s3, the full copy s4's chain needs, stay; s1 and s2 go.
    let s4 = changed_snapshot(&w, "four");
    let (code, out, err) = w.tacid("root", &["data", "copy", "--to", "vault", "--json"]);
    assert_eq!(code, 0, "{out} {err}");
    let r = json(&out);
    assert_eq!(r["copied"][0]["name"], s4.as_str(), "{r}");
    assert_eq!(r["copied"][0]["parent"], s3.as_str(), "{r}");
    let deleted: Vec<&str> = r["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(deleted, [s2.as_str(), s1.as_str()], "{r}");
    let names: Vec<String> = held(&w, "vault").into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, [s3.clone(), s4.clone()]);
    let (code, out, err) = w.tacid(APPROVER, &["data", "verify", "--target", "vault", "--json"]);
    assert_eq!(code, 0, "what stays is whole: {out} {err}");
}

/// A side that dies does not leave the other waiting: the copier killed while the stem
/// sends, the act ends at once (not after a stall limit), journalled failed, and nothing of
/// the copy counts.
#[test]
fn bus_a_sealed_copy_whose_copier_dies_ends_at_once() {
    let Some((w, mut copier)) = world_with_vault("") else {
        return;
    };
    big_file(&w);
    let s1 = w.snapshot_home();
    let cli = w.spawn_tacid(APPROVER, &["data", "copy", &s1, "--to", "vault"]);
    wait_for_a_part(&copier);
    let killed = Instant::now();
    copier.kill();
    let out = cli.wait_with_output().expect("the CLI ends");
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "the copy went on {:?} after the copier died",
        killed.elapsed()
    );
    assert_eq!(out.status.code(), Some(14), "{out:?}");
    let (_copy, copied) = w.copy_journal();
    let rows = Journal::open(&copied)
        .expect("journal opens")
        .copy_requests()
        .expect("rows");
    w.give_journal_back();
    assert!(
        rows.iter()
            .any(|r| r.subject == s1 && r.state == State::Failed),
        "{rows:#?}"
    );
    // The stem is free for the next act.
    let (code, _, err) = w.tacid(APPROVER, &["data", "copies", "vault"]);
    assert_eq!(code, 14, "{err}");
}

/// 200 MiB that do not compress in /home: a copy of it is still running when a side of
/// it is killed.
fn big_file(w: &World) {
    let big = w.top().join("@home/big");
    let mut f = fs::File::create(&big).expect("big");
    let mut x: u64 = 1;
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..200 {
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        std::io::Write::write_all(&mut f, &buf).expect("write");
    }
}

/// Wait until the copier has stored a part of a copy in the vault.
fn wait_for_a_part(copier: &crate::common::sealed::Copier) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !copier
        .objects()
        .iter()
        .any(|p| p.to_string_lossy().contains("/parts/"))
    {
        assert!(Instant::now() < deadline, "the copy never began");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The stem killed while it sends: the copier sees the stream end without its END frame
/// and ends at once; the act is journalled failed; the vault holds no copy of it.
#[test]
fn bus_a_sealed_copy_whose_stem_dies_ends_at_once() {
    let Some((mut w, copier)) = world_with_vault("") else {
        return;
    };
    big_file(&w);
    let s1 = w.snapshot_home();
    let cli = w.spawn_tacid(APPROVER, &["data", "copy", &s1, "--to", "vault"]);
    wait_for_a_part(&copier);
    let killed = Instant::now();
    w.kill_stem();
    let out = cli.wait_with_output().expect("the CLI ends");
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "the copy went on {:?} after the stem died",
        killed.elapsed()
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let (_copy, copied) = w.copy_journal();
    let rows = Journal::open(&copied)
        .expect("journal opens")
        .copy_requests()
        .expect("rows");
    w.give_journal_back();
    assert!(
        rows.iter()
            .any(|r| r.subject == s1 && r.state == State::Failed),
        "{rows:#?}"
    );
    w.start_stem();
    let (code, out, err) = w.tacid(APPROVER, &["data", "copies", "vault", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["copies"], serde_json::json!([]), "{out}");
}

#[test]
fn bus_sealed_copies_on_garage() {
    let Some(garage) = testbed::garage::Garage::start().expect("start Garage") else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("tacid-keeper-garage-")
        .tempdir()
        .expect("dir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let credentials = dir.path().join("cloud.credentials");
    fs::write(
        &credentials,
        serde_json::json!({"access_key_id": garage.key_id(), "secret_access_key": garage.secret()})
            .to_string(),
    )
    .expect("credentials");
    let (cuid, cgid) = testbed::users::ensure_system_user(layout::names::COPIER_USER);
    std::os::unix::fs::chown(&credentials, Some(cuid), Some(cgid)).expect("chown");
    fs::set_permissions(&credentials, fs::Permissions::from_mode(0o600)).expect("chmod");
    let cloud = format!(
        r#""cloud": {{"place": "s3://{}:{}/{}/machines/one", "seal": {{"credentials": {:?}, "region": "{}", "http": true}}}}"#,
        garage.host(),
        garage.port(),
        garage.bucket(),
        credentials.display().to_string(),
        garage.region()
    );
    let Some((w, _copier)) = world_with_vault(&cloud) else {
        return;
    };
    let s1 = changed_snapshot(&w, "one");
    let r = copy(&w, &s1, "cloud");
    assert_eq!(r["copied"][0]["incremental"], false, "{r}");
    let s2 = changed_snapshot(&w, "two");
    let r = copy(&w, &s2, "cloud");
    assert_eq!(r["copied"][0]["parent"], s1.as_str(), "{r}");
    let names: Vec<String> = held(&w, "cloud").into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, [s1.clone(), s2.clone()]);
    let (code, out, err) = w.tacid(APPROVER, &["data", "verify", "--target", "cloud", "--json"]);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(json(&out)["copies"].as_array().unwrap().len(), 2);
    // Fetched back from the object store into the store, its restore previewed.
    let (code, _, err) = w.tacid(APPROVER, &["data", "delete", &s2, "--next-copy-full"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = w.tacid(
        APPROVER,
        &["data", "fetch", &s2, "--from", "cloud", "--json"],
    );
    assert_eq!(code, 0, "fetch: {out} {err}");
    let (code, text, err) = w.tacid(APPROVER, &["data", "restore", &s2]);
    assert_eq!(code, 3, "{text} {err}");
}

#[test]
fn bus_a_fetched_snapshot_is_sealed_to_another_target_and_its_chain_holds() {
    // A second sealed directory, `vault2`, chains up to 5 long.
    let vault2 = tempfile::tempdir().expect("a temp dir");
    let place = vault2.path().join("copies");
    let extra = format!(
        r#""vault2": {{"place": {:?}, "seal": {{"full_every": 5}}}}"#,
        place.display().to_string()
    );
    let Some((w, _copier)) = world_with_vault(&extra) else {
        return;
    };
    let copier_user = nix_user(layout::names::COPIER_USER);
    fs::create_dir(&place).expect("mkdir");
    std::os::unix::fs::chown(&place, Some(copier_user.0), Some(copier_user.1)).expect("chown");

    // s1 and s2 sealed to vault, then gone from the store; s2 fetched back (a received
    // snapshot: its Btrfs UUID is new, its identity the one sealed).
    let s1 = changed_snapshot(&w, "one");
    copy(&w, &s1, "vault");
    let s2 = changed_snapshot(&w, "two");
    copy(&w, &s2, "vault");
    for s in [&s1, &s2] {
        let (code, _, err) = w.tacid(APPROVER, &["data", "delete", s, "--next-copy-full"]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, err) = w.tacid(APPROVER, &["data", "fetch", &s2, "--from", "vault"]);
    assert_eq!(code, 0, "fetch: {out} {err}");

    // The fetched s2 sealed to vault2 (full: vault2 holds nothing), then s3 against it.
    let r = copy(&w, &s2, "vault2");
    assert_eq!(r["copied"][0]["incremental"], false, "{r}");
    let s3 = changed_snapshot(&w, "three");
    let r = copy(&w, &s3, "vault2");
    assert_eq!(r["copied"][0]["incremental"], true, "{r}");
    assert_eq!(
        r["copied"][0]["parent"],
        s2.as_str(),
        "the fetched s2 is the parent: {r}"
    );
    let (code, out, err) = w.tacid(APPROVER, &["data", "verify", "--target", "vault2"]);
    assert_eq!(code, 0, "{out} {err}");

    // Every snapshot of the chain gone from the store: s3 fetched from vault2 alone (its
    // chain s2 then s3), whole.
    for s in [&s2, &s3] {
        let (code, _, err) = w.tacid(APPROVER, &["data", "delete", s, "--next-copy-full"]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, err) = w.tacid(
        APPROVER,
        &["data", "fetch", &s3, "--from", "vault2", "--json"],
    );
    assert_eq!(code, 0, "fetch from vault2: {out} {err}");
    assert_eq!(json(&out)["snapshot"]["name"], s3.as_str());
    let got = w.top().join(layout::SNAPSHOTS_SUBVOLUME).join(&s3);
    for what in ["one", "two", "three"] {
        assert_eq!(
            fs::read_to_string(got.join(format!("{what}.txt"))).expect("a file"),
            what.repeat(1000),
            "{what}.txt"
        );
    }
    // And s2 from vault2 too: a copy of a fetched snapshot is a copy like any other.
    let (code, out, err) = w.tacid(APPROVER, &["data", "fetch", &s2, "--from", "vault2"]);
    assert_eq!(code, 0, "fetch s2 from vault2: {out} {err}");
}

/// The uid and gid of `name`.
fn nix_user(name: &str) -> (u32, u32) {
    let out = std::process::Command::new("id")
        .args(["-u", name])
        .output()
        .expect("id");
    let uid = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a uid");
    let out = std::process::Command::new("id")
        .args(["-g", name])
        .output()
        .expect("id");
    let gid = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a gid");
    (uid, gid)
}

/// A stranger listing the target in a loop, from three connections at once, never makes an
/// approver's copy or verification fail: a looker's listing holds the target's turn for
/// itself alone, an act waits for it, and a looker that finds an act is told to try again.
#[test]
fn bus_a_strangers_listing_loop_never_fails_a_copy() {
    let Some((w, _copier)) = world_with_vault("") else {
        return;
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let (listed, busy) = (
        std::sync::atomic::AtomicUsize::new(0),
        std::sync::atomic::AtomicUsize::new(0),
    );
    /// Ends the stranger's loops however the approver's part ends (a failed assertion too).
    struct Done<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let (code, out, err) = w.tacid(STRANGER, &["data", "copies", "vault"]);
                    match code {
                        0 => listed.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                        _ => {
                            assert!(
                                err.contains("try again"),
                                "a looker's refusal says what to do: {code} {out} {err}"
                            );
                            busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                        }
                    };
                }
            });
        }
        let _done = Done(&done);
        for i in 0..6 {
            let name = changed_snapshot(&w, &format!("loop{i}"));
            copy(&w, &name, "vault");
            let (code, out, err) =
                w.tacid(APPROVER, &["data", "verify", "--target", "vault", "--json"]);
            assert_eq!(code, 0, "verify {i} while a stranger lists: {out} {err}");
        }
    });
    let (listed, busy) = (listed.into_inner(), busy.into_inner());
    eprintln!("the stranger's listings: {listed} answered, {busy} told to try again");
    assert!(listed > 0, "the stranger's loop listed nothing");
    assert_eq!(held(&w, "vault").len(), 6);
}
