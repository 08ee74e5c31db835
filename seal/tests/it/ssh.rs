//! A real sshd whose key may only run copies/tacid-copy-target, serving a directory that is
//! not on Btrfs.

use std::path::Path;

use seal::StorePlace;

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
