//! A directory store.

use crate::common;

#[test]
fn round_trip_through_a_directory() {
    let Some(streams) = common::streams(300, 100) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = seal::DirStore::open(&dir.path().join("target")).unwrap();
    common::round_trip(&store, &streams);
}

#[test]
fn a_hung_filesystem_fails_in_bounded_time_in_words() {
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};
    // A frozen filesystem (fsfreeze) blocks every write until it is thawed: what a dead
    // NFS server or a stuck disk does to a writer.
    let Some(fs) = testbed::LoopFs::new(testbed::MIN_SIZE).unwrap() else {
        return;
    };
    let store = seal::DirStore::open(&fs.top().join("target"))
        .unwrap()
        .with_deadline(Duration::from_secs(2));
    let key = seal::SealKey::generate();
    let a = "@home.2026-12-01T140200.123456Z";
    let m = common::seal_small(
        &store,
        &key,
        common::meta(a, uuid::Uuid::from_u128(1), None),
        1,
        &common::synthetic(20_000, 1),
        16 << 10,
    );
    struct Thaw<'a>(&'a std::path::Path);
    impl Drop for Thaw<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("fsfreeze")
                .arg("-u")
                .arg(self.0)
                .status();
        }
    }
    let frozen = std::process::Command::new("fsfreeze")
        .arg("-f")
        .arg(fs.top())
        .status()
        .unwrap();
    assert!(frozen.success());
    let thaw = Thaw(fs.top());
    let start = Instant::now();
    let b = "@home.2026-12-02T140200.123456Z";
    let e = seal::seal_with(
        &store,
        &key,
        common::meta(b, uuid::Uuid::from_u128(2), None),
        2,
        &mut &common::synthetic(20_000, 2)[..],
        &AtomicU64::new(0),
        16 << 10,
    )
    .unwrap_err();
    assert!(matches!(e, seal::SealError::Unreachable(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("within 2 s (a hung disk or network filesystem?)"),
        "{e}"
    );
    assert!(e.to_string().contains("check the disk or the mount"), "{e}");
    // The failed put (2 s) and the clean-up deletes (2 s each, also hung) are bounded.
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    drop(thaw);
    // Thawed: the first copy is whole; the given-up one is never a copy that does not verify.
    for listed in seal::copies(&store, &key).unwrap() {
        let seal::Listed::Good(found) = listed else {
            panic!("{listed:?}");
        };
        seal::verify(&store, &key, &found.name, &AtomicU64::new(0)).unwrap();
    }
    seal::verify(&store, &key, &m.name, &AtomicU64::new(0)).unwrap();
}

#[test]
fn opening_a_store_on_a_hung_filesystem_is_bounded() {
    use std::time::{Duration, Instant};
    let Some(fs) = testbed::LoopFs::new(testbed::MIN_SIZE).unwrap() else {
        return;
    };
    let frozen = std::process::Command::new("fsfreeze")
        .arg("-f")
        .arg(fs.top())
        .status()
        .unwrap();
    assert!(frozen.success());
    // Thawed after a minute whatever happens, so a hang fails the assertion below instead
    // of holding the test forever.
    let top = fs.top().to_owned();
    let thaw = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        let _ = std::process::Command::new("fsfreeze")
            .arg("-u")
            .arg(&top)
            .status();
    });
    let start = Instant::now();
    // The directory is not there yet: opening makes it, a write the frozen filesystem holds.
    let e =
        seal::DirStore::open_within(&fs.top().join("target"), Duration::from_secs(2)).unwrap_err();
    let took = start.elapsed();
    let _ = std::process::Command::new("fsfreeze")
        .arg("-u")
        .arg(fs.top())
        .status();
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(matches!(e, seal::StoreError::Unreachable(_)), "{e:?}");
    assert!(e.to_string().contains("did not open within 2 s"), "{e}");
    drop(thaw);
}
