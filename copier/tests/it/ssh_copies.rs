//! A sealed SSH target: a real sshd (in a network namespace of its own) whose key may only
//! run `tacid-copy-target` on a directory that is not on Btrfs; the copier reaches it with
//! its own key, as its own user.

use crate::common::{self, CopierDaemon, Ending, Places, PrivateBus, FULL, INCR};

const NAS: &str = "nas";

#[test]
fn a_chain_round_trips_through_an_ssh_host_without_btrfs() {
    if !common::require() {
        return;
    }
    let Some(streams) = common::streams(100, 20) else {
        return;
    };
    let far = tempfile::tempdir().expect("the far directory");
    let Some(target) = testbed::ssh::SshTarget::start(far.path()).expect("sshd") else {
        return;
    };
    let bus = PrivateBus::start();
    let (cuid, cgid) = common::copier_user();
    // The copier's own copy of the client key: its alone, as the copier insists.
    let keys = tempfile::tempdir().expect("a directory");
    std::fs::set_permissions(
        keys.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let identity = keys.path().join("id_ed25519");
    std::fs::copy(target.identity(), &identity).expect("copy the key");
    common::chown(&identity, cuid, cgid);
    let places = Places::new(&format!(
        r#""{NAS}": {{"place": "{}", "identity": "{}", "host_key": "{}", "seal": {{}}}}"#,
        target.place(),
        identity.display(),
        target.host_key()
    ));
    let _copier = CopierDaemon::start_with(&bus, &places, &target.exec_prefix());

    let seal = |name: &'static str,
                uuid: uuid::Uuid,
                parent: Option<(&'static str, uuid::Uuid)>,
                stream: Vec<u8>| {
        let (r, w) = common::pipe();
        let writer = common::write_frames(w, stream, uuid, parent.map(|p| p.1), Ending::End);
        let (pn, pu) = parent
            .map(|(n, u)| (n.to_owned(), u.to_string()))
            .unwrap_or_default();
        let answer = common::call(&bus, common::keeper(), move |p| {
            Box::pin(async move {
                p.seal(NAS, name, &uuid.to_string(), &pn, &pu, common::fd(r))
                    .await
            })
        });
        writer.join().expect("writer");
        answer
    };
    seal(FULL, streams.full_uuid, None, streams.full.clone()).expect("the full copy");
    seal(
        INCR,
        streams.incr_uuid,
        Some((FULL, streams.full_uuid)),
        streams.incr.clone(),
    )
    .expect("the incremental copy");
    let verified = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.verify(NAS, vec![]).await })
    })
    .expect("verify");
    assert_eq!(verified.len(), 2);
    assert!(verified.iter().all(|v| v.ok), "{verified:?}");
    // The far directory holds only sealed objects: no file of the tree in plaintext.
    let mut plain = false;
    for entry in walk(far.path()) {
        let bytes = std::fs::read(&entry).expect("read");
        plain |= bytes.windows(8).any(|w| w == b"file 10\n");
    }
    assert!(!plain, "a file's content is readable on the far side");

    let (r, w) = common::pipe();
    let reader = common::read_frames(r);
    let unsealed = common::call(&bus, common::keeper(), move |p| {
        Box::pin(async move { p.unseal(NAS, INCR, common::fd(w)).await })
    })
    .expect("unseal");
    assert_eq!(unsealed.chain, [FULL, INCR]);
    let (bytes, _) = reader.join().expect("reader").expect("frames to the END");
    common::receive_and_compare(&streams.fs, &bytes, INCR);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A far host whose root cannot read past a directory's mode (root squashed on NFS, an
/// SELinux denial): the forced command run without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH.
#[test]
fn an_unreadable_manifests_directory_on_the_far_side_fails_the_act_and_deletes_no_part() {
    use std::os::unix::fs::PermissionsExt as _;
    if !common::require() {
        return;
    }
    let far = tempfile::tempdir().expect("the far directory");
    let wrapper_dir = tempfile::tempdir().expect("a directory");
    let wrapper = wrapper_dir.path().join("tacid-copy-target-no-dac");
    let script = std::fs::canonicalize(testbed::ssh::repo_script()).expect("the script");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec setpriv --bounding-set -dac_override,-dac_read_search -- {} \"$@\"\n",
            script.display()
        ),
    )
    .expect("write the wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let Some(target) =
        testbed::ssh::SshTarget::start_with_script(&wrapper, far.path()).expect("sshd")
    else {
        return;
    };
    let bus = PrivateBus::start();
    let (cuid, cgid) = common::copier_user();
    let keys = tempfile::tempdir().expect("a directory");
    std::fs::set_permissions(keys.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let identity = keys.path().join("id_ed25519");
    std::fs::copy(target.identity(), &identity).expect("copy the key");
    common::chown(&identity, cuid, cgid);
    let places = Places::new(&format!(
        r#""{NAS}": {{"place": "{}", "identity": "{}", "host_key": "{}", "seal": {{}}}}"#,
        target.place(),
        identity.display(),
        target.host_key()
    ));
    let _copier = CopierDaemon::start_with(&bus, &places, &target.exec_prefix());
    let stream = common::incompressible(100_000);
    common::seal_to(
        &bus,
        NAS,
        FULL,
        uuid::Uuid::from_u128(0x81),
        None,
        &stream,
        Ending::End,
    )
    .expect("the first copy");
    let parts: Vec<std::path::PathBuf> = walk(far.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/parts/"))
        .collect();
    assert!(!parts.is_empty());
    // Old enough to clean, were they orphans.
    let when = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 24 * 3600);
    for p in &parts {
        std::fs::File::options()
            .write(true)
            .open(p)
            .and_then(|f| f.set_times(std::fs::FileTimes::new().set_modified(when)))
            .expect("age a part");
    }
    let manifests = walk(far.path())
        .into_iter()
        .find(|p| p.to_string_lossy().contains("/manifests/"))
        .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
        .expect("the manifests' directory");
    std::fs::set_permissions(&manifests, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let e = common::seal_to(
        &bus,
        NAS,
        INCR,
        uuid::Uuid::from_u128(0x82),
        None,
        &stream,
        Ending::End,
    )
    .expect_err("the listing fails, so the act does");
    assert!(e.message().contains("could not list"), "{}", e.message());
    std::fs::set_permissions(&manifests, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    for p in &parts {
        assert!(p.exists(), "{} was deleted", p.display());
    }
}
