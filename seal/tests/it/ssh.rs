//! A real sshd whose key may only run copies/tacid-copy-target, serving a directory that is
//! not on Btrfs.

use std::path::Path;

use seal::{Store as _, StorePlace};

use crate::common;

pub fn place(target: &testbed::ssh::SshTarget, known_hosts_dir: &Path) -> StorePlace {
    StorePlace::Ssh {
        program: target.ssh_program(),
        user: target.user().into(),
        host: target.host().into(),
        port: target.port(),
        identity: target.identity(),
        host_key: target.host_key().into(),
        known_hosts_dir: known_hosts_dir.to_owned(),
        label: "nas".into(),
    }
}

#[test]
fn round_trip_over_ssh_to_a_directory_not_on_btrfs() {
    let Some(streams) = common::streams(300, 100) else {
        return;
    };
    let far = tempfile::tempdir().unwrap();
    let fstype = rustix::fs::statfs(far.path()).unwrap().f_type;
    assert_ne!(
        fstype as i64, 0x9123_683E,
        "the far directory must not be Btrfs here"
    );
    let Some(target) = testbed::ssh::SshTarget::start(far.path()).unwrap() else {
        return;
    };
    let mine = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = seal::open_store(&place(&target, mine.path()), rt.handle().clone()).unwrap();
    common::round_trip(&*store, &streams);
}

#[test]
fn ssh_a_part_changed_on_the_far_side_is_refused_and_keys_are_checked_there_too() {
    use std::sync::atomic::AtomicU64;
    let far = tempfile::tempdir().unwrap();
    let Some(target) = testbed::ssh::SshTarget::start(far.path()).unwrap() else {
        return;
    };
    let mine = tempfile::tempdir().unwrap();
    let store = seal::SshStore::open(&place(&target, mine.path())).unwrap();
    let key = seal::SealKey::generate();
    let stream = common::synthetic(60_000, 1);
    let a = "@home.2026-12-01T140200.123456Z";
    let m = common::seal_small(
        &store,
        &key,
        common::meta(a, uuid::Uuid::from_u128(1), None),
        1,
        &stream,
        16 << 10,
    );
    // The far host's owner changes a byte of part 1 in place.
    let path = far.path().join(seal::part_key(key.key_id(), &m.copy_id, 1));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[300] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let chain = seal::chain(&store, &key, &common::name(a)).unwrap();
    let mut out = Vec::new();
    let e = seal::unseal(&store, &key, &chain, &mut out, &AtomicU64::new(0)).unwrap_err();
    assert!(e.to_string().contains("part 1 of"), "{e}");
    assert!(stream.starts_with(&out) && out.len() <= 16 << 10);

    // The far side refuses what the client never sends (exit 2, nothing touched).
    let marker = far.path().join("ran");
    for request in [
        "obj-get tacid-v1/../../etc/passwd".to_owned(),
        "obj-get /etc/passwd".to_owned(),
        "obj-put tacid-v1/x 99999999999".to_owned(),
        "obj-put tacid-v1/.tmp-x 1".to_owned(),
        "obj-put tacid-v1/x".to_owned(),
        "obj-list /".to_owned(),
        "obj-list ../".to_owned(),
        format!("obj-delete tacid-v1/x; touch {}", marker.display()),
        "obj-delete tacid-v1//x".to_owned(),
        "obj-get other/x".to_owned(),
    ] {
        let out = target
            .ssh(&request)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{request}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!marker.exists());
    // A put cut short (fewer bytes than announced) keeps nothing.
    let mut child = target
        .ssh("obj-put tacid-v1/cut/000000 1000")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&[7u8; 400]).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("received 400 bytes, announced 1000"));
    assert!(!far.path().join("tacid-v1/cut/000000").exists());
    assert_eq!(
        std::fs::read_dir(far.path().join("tacid-v1/cut"))
            .unwrap()
            .count(),
        0,
        "no temporary file left"
    );
}

#[test]
fn ssh_listings_carry_the_far_sides_times_and_old_temporaries_are_cleaned_there() {
    use std::time::{Duration, SystemTime};
    let far = tempfile::tempdir().unwrap();
    let Some(target) = testbed::ssh::SshTarget::start(far.path()).unwrap() else {
        return;
    };
    let mine = tempfile::tempdir().unwrap();
    let store = seal::SshStore::open(&place(&target, mine.path())).unwrap();
    let key = seal::SealKey::generate();
    let a = "@home.2026-12-01T140200.123456Z";
    common::seal_small(
        &store,
        &key,
        common::meta(a, uuid::Uuid::from_u128(1), None),
        1,
        &common::synthetic(40_000, 1),
        16 << 10,
    );
    // Times: the far side's clock, within a minute of this one.
    let listed = store.list("tacid-v1/").unwrap();
    assert!(!listed.is_empty());
    for o in &listed {
        let t = o
            .modified
            .unwrap_or_else(|| panic!("no time for {}", o.key));
        let off = SystemTime::now()
            .duration_since(t)
            .unwrap_or_else(|e| e.duration());
        assert!(off < Duration::from_secs(60), "{}: {off:?}", o.key);
    }
    // An orphan part written a week ago, a young one, and two temporaries of puts a power
    // cut stopped (one old, one young).
    let old_orphan = format!("tacid-v1/{}/parts/{}/000000", key.key_id(), "ab".repeat(16));
    let young_orphan = format!("tacid-v1/{}/parts/{}/000000", key.key_id(), "cd".repeat(16));
    store.put(&old_orphan, b"old").unwrap();
    store.put(&young_orphan, b"young").unwrap();
    common::age(
        &far.path().join(&old_orphan),
        Duration::from_secs(7 * 24 * 3600),
    );
    let parts_dir = far.path().join(format!("tacid-v1/{}/parts", key.key_id()));
    let old_tmp = parts_dir.join(".tmp-put.4242");
    let young_tmp = parts_dir.join(".tmp-put.4343");
    std::fs::write(&old_tmp, b"half").unwrap();
    std::fs::write(&young_tmp, b"half").unwrap();
    common::age(&old_tmp, seal::CLEAN_GRACE + Duration::from_secs(120));
    let report = seal::clean(&store, &key).unwrap();
    assert_eq!(
        (report.parts, report.young.len(), report.temporaries),
        (1, 1, 1),
        "{report:?}"
    );
    assert!(store.get(&old_orphan, 10).is_err());
    assert!(store.get(&young_orphan, 10).is_ok());
    assert!(!old_tmp.exists() && young_tmp.exists());
    // The verb takes minutes only.
    let out = target
        .ssh("obj-clean 1h")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn ssh_a_listing_past_the_cap_is_refused_in_words() {
    let far = tempfile::tempdir().unwrap();
    let Some(target) = testbed::ssh::SshTarget::start(far.path()).unwrap() else {
        return;
    };
    let mine = tempfile::tempdir().unwrap();
    let store = seal::SshStore::open(&place(&target, mine.path()))
        .unwrap()
        .with_max_listed(3);
    for i in 0..4 {
        std::fs::create_dir_all(far.path().join("tacid-v1/x")).unwrap();
        std::fs::write(far.path().join(format!("tacid-v1/x/{i:06}")), b"x").unwrap();
    }
    let e = store.list("tacid-v1/").unwrap_err();
    assert!(e.to_string().contains("more than 3 objects"), "{e}");
}

/// The far side as a host whose root cannot read past a directory's mode (root squashed on
/// NFS, an SELinux denial): the forced command run without CAP_DAC_OVERRIDE and
/// CAP_DAC_READ_SEARCH.
fn start_without_dac(far: &Path, wrapper_dir: &Path) -> Option<testbed::ssh::SshTarget> {
    use std::os::unix::fs::PermissionsExt as _;
    if !testbed::installed("setpriv") {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true but setpriv is not installed (apt-get install util-linux)"
        );
        eprintln!("\n*** SKIPPED: setpriv is not installed; this sshd test did not run ***\n");
        return None;
    }
    let script = std::fs::canonicalize(testbed::ssh::repo_script()).unwrap();
    let wrapper = wrapper_dir.join("tacid-copy-target-no-dac");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec setpriv --bounding-set -dac_override,-dac_read_search -- {} \"$@\"\n",
            script.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    testbed::ssh::SshTarget::start_with_script(&wrapper, far).unwrap()
}

#[test]
fn ssh_an_unreadable_manifests_directory_fails_the_listing_and_clean_deletes_nothing() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Duration;
    let far = tempfile::tempdir().unwrap();
    let wrapper_dir = tempfile::tempdir().unwrap();
    let Some(target) = start_without_dac(far.path(), wrapper_dir.path()) else {
        return;
    };
    let mine = tempfile::tempdir().unwrap();
    let store = seal::SshStore::open(&place(&target, mine.path())).unwrap();
    let key = seal::SealKey::generate();
    let a = "@home.2026-12-01T140200.123456Z";
    let m = common::seal_small(
        &store,
        &key,
        common::meta(a, uuid::Uuid::from_u128(1), None),
        1,
        &common::synthetic(60_000, 1),
        16 << 10,
    );
    let parts_dir = far
        .path()
        .join(format!("tacid-v1/{}/parts/{}", key.key_id(), m.copy_id));
    // The parts are long past the grace period: only the manifests keep them.
    for entry in std::fs::read_dir(&parts_dir).unwrap() {
        common::age(&entry.unwrap().path(), seal::CLEAN_GRACE * 3);
    }
    let before = std::fs::read_dir(&parts_dir).unwrap().count();
    assert_eq!(before, m.parts.len());
    let manifests = far
        .path()
        .join(format!("tacid-v1/{}/manifests", key.key_id()));
    std::fs::set_permissions(&manifests, std::fs::Permissions::from_mode(0o000)).unwrap();
    let listed = store.list(&format!("tacid-v1/{}/manifests/", key.key_id()));
    let e = listed.expect_err("an unreadable directory is no empty listing");
    assert!(e.to_string().contains("could not list"), "{e}");
    assert!(seal::copies(&store, &key).is_err());
    assert!(seal::clean_older_than(&store, &key, Duration::ZERO).is_err());
    assert_eq!(
        std::fs::read_dir(&parts_dir).unwrap().count(),
        before,
        "no part was deleted"
    );
    // Readable again: the copy is whole.
    std::fs::set_permissions(&manifests, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(
        seal::copies(&store, &key).unwrap(),
        vec![seal::Listed::Good(m)]
    );
}

#[test]
fn ssh_an_oddly_named_file_is_skipped_not_a_broken_listing() {
    let far = tempfile::tempdir().unwrap();
    let Some(target) = testbed::ssh::SshTarget::start(far.path()).unwrap() else {
        return;
    };
    let mine = tempfile::tempdir().unwrap();
    let store = seal::SshStore::open(&place(&target, mine.path())).unwrap();
    let key = seal::SealKey::generate();
    let a = "@home.2026-12-01T140200.123456Z";
    let m = common::seal_small(
        &store,
        &key,
        common::meta(a, uuid::Uuid::from_u128(1), None),
        1,
        &common::synthetic(40_000, 1),
        16 << 10,
    );
    // A sync tool's conflict copy beside a part.
    let odd = far.path().join(format!(
        "tacid-v1/{}/parts/{}/000000 (conflicted copy)",
        key.key_id(),
        m.copy_id
    ));
    std::fs::write(&odd, b"x").unwrap();
    assert_eq!(
        seal::copies(&store, &key).unwrap(),
        vec![seal::Listed::Good(m)]
    );
    assert!(store.skipped() >= 1);
    assert!(odd.exists(), "not this format's: left alone");
}
