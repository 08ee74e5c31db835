//! What `clean` removes and what it leaves: another writer's copy in flight is never lost,
//! and what a cut-short seal or put left goes once older than the grace period.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use seal::{DirStore, SealKey, Store, StoreError};
use uuid::Uuid;

use crate::common::{self, meta, seal_small, synthetic};

const PART: usize = 16 << 10;
const A: &str = "@home.2026-12-01T140200.123456Z";
const B: &str = "@home.2026-12-02T140200.123456Z";

/// A store on which, the moment a manifest is about to be put, another machine with the
/// same key runs a writing act (and so `clean`) on the same place.
struct OtherWriter<'a> {
    inner: &'a DirStore,
    key: &'a SealKey,
}

impl Store for OtherWriter<'_> {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        if key.contains("/manifests/") {
            seal::clean(self.inner, self.key).map_err(|e| StoreError::Io(e.to_string()))?;
        }
        self.inner.put(key, bytes)
    }
    fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, StoreError> {
        self.inner.get(key, max)
    }
    fn list(&self, prefix: &str) -> Result<Vec<seal::Object>, StoreError> {
        self.inner.list(prefix)
    }
    fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key)
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[test]
fn another_writers_clean_does_not_take_the_parts_of_a_copy_being_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open(&dir.path().join("t")).unwrap();
    let key = SealKey::generate();
    let stream = synthetic(200_000, 1);
    let racing = OtherWriter {
        inner: &store,
        key: &key,
    };
    let m = seal_small(
        &racing,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &stream,
        PART,
    );
    assert!(m.parts.len() > 5, "{}", m.parts.len());
    // Reported durable, and it is: every part still there and whole.
    seal::verify(&store, &key, &common::name(A), &AtomicU64::new(0)).unwrap();
    let listed = seal::copies(&store, &key).unwrap();
    assert_eq!(listed, vec![seal::Listed::Good(m)]);
}

#[test]
fn reading_acts_never_remove_anything() {
    // An orphan older than the grace period stays through list, verify and unseal: only
    // an act that writes cleans.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    let store = DirStore::open(&root).unwrap();
    let key = SealKey::generate();
    let m = seal_small(
        &store,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &synthetic(40_000, 1),
        PART,
    );
    let orphan = format!("tacid-v1/{}/parts/{}/000000", key.key_id(), "ab".repeat(16));
    store
        .put(&orphan, b"left by a copier killed a week ago")
        .unwrap();
    common::age(&root.join(&orphan), Duration::from_secs(7 * 24 * 3600));
    seal::copies(&store, &key).unwrap();
    seal::verify(&store, &key, &m.name, &AtomicU64::new(0)).unwrap();
    let chain = seal::chain(&store, &key, &m.name).unwrap();
    seal::unseal(&store, &key, &chain, &mut Vec::new(), &AtomicU64::new(0)).unwrap();
    assert!(
        store.get(&orphan, 100).is_ok(),
        "a reading act removed the orphan"
    );
    let report = seal::clean(&store, &key).unwrap();
    assert_eq!(report.parts, 1, "{report:?}");
    assert!(store.get(&orphan, 100).is_err());
}

#[test]
fn temporaries_a_power_cut_left_are_removed_once_old() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    let store = DirStore::open(&root).unwrap();
    let key = SealKey::generate();
    let m = seal_small(
        &store,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &synthetic(40_000, 1),
        PART,
    );
    let parts_dir = root.join(format!("tacid-v1/{}/parts/{}", key.key_id(), m.copy_id));
    let manifests_dir = root.join(format!("tacid-v1/{}/manifests", key.key_id()));
    let old = parts_dir.join(".tmp-0123456789abcdef0123456789abcdef");
    let old_manifest = manifests_dir.join(".tmp-fedcba9876543210fedcba9876543210");
    let young = parts_dir.join(".tmp-00000000000000000000000000000000");
    for path in [&old, &old_manifest, &young] {
        std::fs::write(path, b"half a part").unwrap();
    }
    common::age(&old, seal::CLEAN_GRACE + Duration::from_secs(60));
    common::age(&old_manifest, seal::CLEAN_GRACE * 3);
    // Not a temporary of the store's (no .tmp- name) and old: a person's file, left.
    let other = root.join(".keep");
    std::fs::write(&other, b"mine").unwrap();
    common::age(&other, seal::CLEAN_GRACE * 3);
    let report = seal::clean(&store, &key).unwrap();
    assert_eq!(report.temporaries, 2, "{report:?}");
    assert!(!old.exists() && !old_manifest.exists());
    assert!(young.exists(), "a put in flight keeps its temporary");
    assert!(other.exists());
    seal::verify(&store, &key, &m.name, &AtomicU64::new(0)).unwrap();
    // With no grace (the injected age), the young one goes too.
    assert_eq!(store.remove_temporaries(Duration::ZERO).unwrap(), 1);
    assert!(!young.exists());
}

#[test]
fn a_half_deleted_copys_parts_go_once_old_and_an_unauthenticated_manifest_still_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    let store = DirStore::open(&root).unwrap();
    let key = SealKey::generate();
    let a = seal_small(
        &store,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &synthetic(40_000, 1),
        PART,
    );
    let b = seal_small(
        &store,
        &key,
        meta(B, Uuid::from_u128(2), None),
        2,
        &synthetic(40_000, 2),
        PART,
    );
    // A's manifest gone (a delete cut short), B's damaged (kept: a person decides).
    std::fs::remove_file(root.join(seal::manifest_key(key.key_id(), A))).unwrap();
    let bm = root.join(seal::manifest_key(key.key_id(), B));
    let mut bytes = std::fs::read(&bm).unwrap();
    bytes[20] ^= 1;
    std::fs::write(&bm, bytes).unwrap();
    let report = seal::clean_older_than(&store, &key, Duration::ZERO).unwrap();
    assert_eq!(report.copies, vec![a.copy_id.clone()], "{report:?}");
    assert_eq!(report.parts, a.parts.len() as u64);
    let left = store
        .list(&format!("tacid-v1/{}/parts/", key.key_id()))
        .unwrap();
    assert_eq!(left.len(), b.parts.len());
    assert!(left.iter().all(|o| o.key.contains(&b.copy_id)));
}

#[test]
fn a_listing_without_the_manifests_the_caller_stored_removes_no_part() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    let store = DirStore::open(&root).unwrap();
    let key = SealKey::generate();
    let a = seal_small(
        &store,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &synthetic(40_000, 1),
        PART,
    );
    // The manifests' directory moved away (a wrong mount, a rolled-back store): the parts
    // look orphaned, and are old.
    let manifests = root.join(format!("tacid-v1/{}/manifests", key.key_id()));
    let aside = dir.path().join("aside");
    std::fs::rename(&manifests, &aside).unwrap();
    let expected = std::collections::BTreeSet::from([A.to_owned()]);
    let report = seal::clean_expecting(&store, &key, Duration::ZERO, &expected).unwrap();
    let refused = report.refused.expect("refused");
    assert!(
        refused.contains("no part was removed") && refused.contains(A),
        "{refused}"
    );
    assert_eq!(report.parts, 0);
    let parts_prefix = format!("tacid-v1/{}/parts/", key.key_id());
    assert_eq!(store.list(&parts_prefix).unwrap().len(), a.parts.len());
    // Back: the copy is whole, and a clean expecting it removes nothing of it.
    std::fs::rename(&aside, &manifests).unwrap();
    let report = seal::clean_expecting(&store, &key, Duration::ZERO, &expected).unwrap();
    assert_eq!(report, seal::CleanReport::default());
    assert_eq!(
        seal::copies(&store, &key).unwrap(),
        vec![seal::Listed::Good(a)]
    );
}
