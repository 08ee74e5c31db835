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
