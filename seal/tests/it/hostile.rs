//! Hostile storage, at the library level: each way a store can lie or fail is refused
//! with words that say what and what to do, and an unseal writes nothing past the last
//! authenticated part (nothing at all when the manifest fails).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use seal::{DirStore, Listed, SealError, SealKey, Store, StoreError};
use uuid::Uuid;

use crate::common::{self, meta, name, seal_small, synthetic, FULL, INCR};

/// Parts this small make a stream of a few hundred KiB many parts.
const PART: usize = 16 << 10;
const A: &str = "@home.2026-12-01T140200.123456Z";
const B: &str = "@home.2026-12-03T140200.123456Z";

struct Bench {
    _dir: tempfile::TempDir,
    root: PathBuf,
    store: DirStore,
    key: SealKey,
    stream: Vec<u8>,
    manifest: seal::Manifest,
}

impl Bench {
    /// One copy A of a ~300 KiB stream in ~19 parts.
    fn new() -> Bench {
        Bench::with(300_000)
    }

    /// One copy A of a stream of `bytes` (incompressible) in parts of [`PART`].
    fn with(bytes: usize) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("target");
        let store = DirStore::open(&root).unwrap();
        let key = SealKey::generate();
        let stream = synthetic(bytes, 1);
        let manifest = seal_small(
            &store,
            &key,
            meta(A, Uuid::from_u128(1), None),
            1,
            &stream,
            PART,
        );
        assert!(manifest.parts.len() >= 10, "{}", manifest.parts.len());
        Bench {
            _dir: dir,
            root,
            store,
            key,
            stream,
            manifest,
        }
    }

    fn part(&self, m: &seal::Manifest, i: usize) -> PathBuf {
        self.root
            .join(seal::part_key(self.key.key_id(), &m.copy_id, i))
    }

    fn manifest_path(&self, n: &str) -> PathBuf {
        self.root.join(seal::manifest_key(self.key.key_id(), n))
    }

    /// What the copier does for a fetch: the chain, then unseal it; the error and what
    /// reached `out`.
    fn fetch(&self, n: &str) -> (Result<u64, SealError>, Vec<u8>) {
        fetch(&self.store, &self.key, n)
    }

    /// The fetch of A failed at part `k` with words containing `words`: `out` holds only
    /// plaintext of parts before `k` (a prefix of the stream, no longer than k parts can
    /// hold: the synthetic stream does not compress), and verify fails likewise.
    fn expect_refused_at_part(&self, k: usize, words: &str) {
        let (result, out) = self.fetch(A);
        let e = result.unwrap_err();
        assert!(matches!(e, SealError::Untrusted(_)), "{e:?}");
        let said = e.to_string();
        assert!(said.contains(&format!("part {k} of ")), "{said}");
        assert!(said.contains(words), "{said}");
        assert!(said.contains("seal it again"), "says what to do: {said}");
        assert!(
            self.stream.starts_with(&out),
            "what was written is not the stream's start"
        );
        assert!(
            out.len() <= k * PART,
            "{} bytes written from {k} parts",
            out.len()
        );
        let verified = seal::verify(&self.store, &self.key, &name(A), &AtomicU64::new(0));
        assert_eq!(verified.unwrap_err(), e);
    }

    /// The fetch of `n` failed before a byte was written, Untrusted, with `words`.
    fn expect_refused_manifest(&self, n: &str, words: &str) {
        let (result, out) = self.fetch(n);
        let e = result.unwrap_err();
        assert!(matches!(e, SealError::Untrusted(_)), "{e:?}");
        assert!(e.to_string().contains(words), "{e}");
        assert!(out.is_empty(), "{} bytes written", out.len());
        let listed = seal::copies(&self.store, &self.key).unwrap();
        assert!(
            listed.iter().any(|l| matches!(l, Listed::Bad { name, problem, .. } if name == n && problem.contains(words))),
            "{listed:?}"
        );
    }
}

fn fetch(store: &dyn Store, key: &SealKey, n: &str) -> (Result<u64, SealError>, Vec<u8>) {
    let mut out = Vec::new();
    let result = seal::chain(store, key, &name(n))
        .and_then(|chain| seal::unseal(store, key, &chain, &mut out, &AtomicU64::new(0)));
    (result, out)
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn an_untouched_copy_unseals_whole() {
    let b = Bench::new();
    let (result, out) = b.fetch(A);
    assert_eq!(result.unwrap(), b.stream.len() as u64);
    assert!(out == b.stream);
}

#[test]
fn a_flipped_byte_in_a_part_is_refused_before_it_is_decrypted() {
    let b = Bench::new();
    // In the middle of the ciphertext, where age alone would notice only at that chunk.
    let len = std::fs::metadata(b.part(&b.manifest, 3)).unwrap().len() as usize;
    flip(&b.part(&b.manifest, 3), len / 2);
    b.expect_refused_at_part(3, "is not the part sealed there");
}

#[test]
fn a_flipped_byte_in_the_first_part_writes_nothing() {
    let b = Bench::new();
    flip(&b.part(&b.manifest, 0), 100);
    b.expect_refused_at_part(0, "is not the part sealed there");
    assert!(b.fetch(A).1.is_empty());
}

#[test]
fn a_truncated_part_is_refused() {
    let b = Bench::new();
    let path = b.part(&b.manifest, 5);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
    b.expect_refused_at_part(5, "cut short");
    let listed = seal::copies(&b.store, &b.key).unwrap();
    assert!(
        matches!(&listed[..], [Listed::Bad { problem, .. }] if problem.contains("part 5 of")),
        "{listed:?}"
    );
}

#[test]
fn a_grown_part_is_refused_without_reading_it_whole() {
    let b = Bench::new();
    let path = b.part(&b.manifest, 2);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(&vec![0u8; 1 << 20]).unwrap();
    b.expect_refused_at_part(2, "its manifest says");
}

#[test]
fn a_dropped_part_is_refused() {
    let b = Bench::new();
    std::fs::remove_file(b.part(&b.manifest, 4)).unwrap();
    b.expect_refused_at_part(4, "is missing");
    let listed = seal::copies(&b.store, &b.key).unwrap();
    assert!(
        matches!(&listed[..], [Listed::Bad { problem, .. }] if problem.contains("part 4 of") && problem.contains("missing")),
        "{listed:?}"
    );
    // Its manifest authenticates: it comes with the problem, so the copy still names its
    // parent (a chain with a glitched middle keeps its links).
    assert!(
        matches!(&listed[..], [Listed::Bad { manifest: Some(m), .. }] if *m == b.manifest),
        "{listed:?}"
    );
    // A manifest that does not authenticate comes with none.
    let mpath = b.root.join(seal::manifest_key(b.key.key_id(), A));
    let mut bytes = std::fs::read(&mpath).unwrap();
    bytes[20] ^= 1;
    std::fs::write(&mpath, bytes).unwrap();
    let listed = seal::copies(&b.store, &b.key).unwrap();
    assert!(
        matches!(&listed[..], [Listed::Bad { manifest: None, .. }]),
        "{listed:?}"
    );
}

/// Two indices of full parts (not the last) with the same stored size: age's headers vary
/// in length (by some tens of bytes), and parts of one size leave only the digests to tell
/// them apart. With ~70 parts a pair of one size is all but certain.
fn same_size(a: &seal::Manifest, b: &seal::Manifest, distinct: bool) -> (usize, usize) {
    let full = |m: &seal::Manifest| m.parts.len() - 1;
    for i in 0..full(a) {
        for j in 0..full(b) {
            if (!distinct || i < j) && a.parts[i].bytes == b.parts[j].bytes {
                return (i, j);
            }
        }
    }
    panic!("no two parts of one size: {:?} {:?}", a.parts, b.parts);
}

fn swap(x: &Path, y: &Path) {
    let tmp = x.with_extension("x");
    std::fs::rename(x, &tmp).unwrap();
    std::fs::rename(y, x).unwrap();
    std::fs::rename(&tmp, y).unwrap();
}

#[test]
fn two_parts_reordered_are_refused() {
    let b = Bench::with(1_200_000);
    let (i, j) = same_size(&b.manifest, &b.manifest, true);
    swap(&b.part(&b.manifest, i), &b.part(&b.manifest, j));
    // Sizes as listed all match: only the digests tell.
    assert!(seal::copies(&b.store, &b.key)
        .unwrap()
        .iter()
        .all(|l| matches!(l, Listed::Good(_))));
    b.expect_refused_at_part(i, "another part or copy's put in its place");
}

#[test]
fn two_copies_parts_swapped_are_refused() {
    let b = Bench::with(1_200_000);
    let other = seal_small(
        &b.store,
        &b.key,
        meta(B, Uuid::from_u128(2), None),
        2,
        &synthetic(1_200_000, 2),
        PART,
    );
    let (i, j) = same_size(&b.manifest, &other, false);
    swap(&b.part(&b.manifest, i), &b.part(&other, j));
    b.expect_refused_at_part(i, "another part or copy's put in its place");
    let (result, out) = b.fetch(B);
    assert!(result
        .unwrap_err()
        .to_string()
        .contains(&format!("part {j} of")));
    assert!(out.len() <= j * PART);
}

#[test]
fn a_flipped_byte_in_a_manifest_is_refused_before_it_is_parsed() {
    let b = Bench::new();
    let path = b.manifest_path(A);
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    // In the JSON (a part's size digit or digest), and in the MAC line.
    flip(&path, len - 40);
    b.expect_refused_manifest(A, "does not authenticate with this machine's key");
    flip(&path, len - 40);
    flip(&path, 30);
    b.expect_refused_manifest(A, "does not authenticate with this machine's key");
    assert!(b
        .fetch(A)
        .0
        .unwrap_err()
        .to_string()
        .contains("Delete it and seal it again"));
}

#[test]
fn a_cut_or_huge_manifest_is_refused() {
    let b = Bench::new();
    let path = b.manifest_path(A);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    b.expect_refused_manifest(A, "does not authenticate");
    std::fs::write(&path, &bytes[..40]).unwrap();
    b.expect_refused_manifest(A, "no MAC line");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(seal::MAX_MANIFEST_BYTES + 1).unwrap();
    b.expect_refused_manifest(A, "more than a manifest may have");
}

#[test]
fn a_manifest_of_another_copy_under_this_name_is_refused() {
    let b = Bench::new();
    seal_small(
        &b.store,
        &b.key,
        meta(B, Uuid::from_u128(2), None),
        2,
        &synthetic(300_000, 2),
        PART,
    );
    std::fs::copy(b.manifest_path(B), b.manifest_path(A)).unwrap();
    b.expect_refused_manifest(A, &format!("is the one of {B} (another copy's)"));
}

#[test]
fn another_machines_key_neither_sees_nor_accepts_the_copies() {
    let b = Bench::new();
    let stranger = SealKey::generate();
    assert_ne!(stranger.key_id(), b.key.key_id());
    assert_eq!(seal::copies(&b.store, &stranger).unwrap(), vec![]);
    let (result, out) = fetch(&b.store, &stranger, A);
    assert!(
        matches!(result, Err(SealError::NotFound(ref m)) if m.contains("no sealed copy named")),
        "{result:?}"
    );
    assert!(out.is_empty());
    // The store moves this machine's copy under the stranger's key id: refused by its MAC.
    let theirs = b.root.join(seal::manifest_key(stranger.key_id(), A));
    std::fs::create_dir_all(theirs.parent().unwrap()).unwrap();
    std::fs::copy(b.manifest_path(A), &theirs).unwrap();
    let (result, out) = fetch(&b.store, &stranger, A);
    let e = result.unwrap_err();
    assert!(e.to_string().contains("another machine made it"), "{e}");
    assert!(out.is_empty());
    // And a copy sealed with another key put in this machine's place: refused too.
    let dir2 = tempfile::tempdir().unwrap();
    let store2 = DirStore::open(&dir2.path().join("t")).unwrap();
    seal_small(
        &store2,
        &stranger,
        meta(B, Uuid::from_u128(2), None),
        1,
        &synthetic(1000, 3),
        PART,
    );
    std::fs::copy(
        dir2.path()
            .join("t")
            .join(seal::manifest_key(stranger.key_id(), B)),
        b.manifest_path(B),
    )
    .unwrap();
    b.expect_refused_manifest(B, "another machine made it");
}

#[test]
fn an_older_manifest_is_refused_against_the_remembered_generation() {
    let b = Bench::new();
    // The store keeps generation 1 of A (manifest and parts) aside, then serves it again
    // after A was sealed anew as generation 5.
    let old_manifest = std::fs::read(b.manifest_path(A)).unwrap();
    let old_parts_dir = b.part(&b.manifest, 0).parent().unwrap().to_owned();
    let aside = b.root.parent().unwrap().join("aside");
    copy_dir(&old_parts_dir, &aside);
    seal::delete_copy(&b.store, &b.key, &name(A)).unwrap();
    let newer = seal_small(
        &b.store,
        &b.key,
        meta(A, Uuid::from_u128(1), None),
        5,
        &synthetic(300_000, 9),
        PART,
    );
    std::fs::write(b.manifest_path(A), old_manifest).unwrap();
    copy_dir(&aside, &old_parts_dir);
    let remembered = |n: &layout::SnapshotName| (n == &name(A)).then_some(newer.generation);
    let e = seal::chain_checked(&b.store, &b.key, &name(A), &remembered).unwrap_err();
    assert!(matches!(e, SealError::Untrusted(_)), "{e:?}");
    assert!(
        e.to_string().contains(&format!(
            "served an older manifest of {A} (generation 1; this machine wrote 5)"
        )),
        "{e}"
    );
    let e2 = seal::verify_checked(&b.store, &b.key, &name(A), &AtomicU64::new(0), &remembered)
        .unwrap_err();
    assert_eq!(e, e2);
    // Without what this machine remembers, the old copy is genuine: it is accepted. This
    // is what cannot be known from the store alone (after a dead disk).
    assert_eq!(
        seal::chain(&b.store, &b.key, &name(A)).unwrap()[0].generation,
        1
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn an_incremental_on_a_parent_that_is_not_there_or_another_is_refused() {
    let b = Bench::new();
    let stream = synthetic(10_000, 4);
    // Sealing on a parent with another uuid than the sealed one.
    let e = seal::seal_with(
        &b.store,
        &b.key,
        meta(B, Uuid::from_u128(2), Some((A, Uuid::from_u128(99)))),
        2,
        &mut &stream[..],
        &AtomicU64::new(0),
        PART,
    )
    .unwrap_err();
    assert!(e.to_string().contains("seal a full copy instead"), "{e}");
    let incr = seal_small(
        &b.store,
        &b.key,
        meta(B, Uuid::from_u128(2), Some((A, Uuid::from_u128(1)))),
        2,
        &stream,
        PART,
    );
    assert_eq!(incr.depth, 1);
    // The store swaps the parent for another full copy of the same name and another uuid.
    let other = tempfile::tempdir().unwrap();
    let store2 = DirStore::open(&other.path().join("t")).unwrap();
    seal_small(
        &store2,
        &b.key,
        meta(A, Uuid::from_u128(7), None),
        1,
        &synthetic(1000, 5),
        PART,
    );
    std::fs::copy(
        other
            .path()
            .join("t")
            .join(seal::manifest_key(b.key.key_id(), A)),
        b.manifest_path(A),
    )
    .unwrap();
    let (result, out) = fetch(&b.store, &b.key, B);
    let e = result.unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("is not the parent {B} was sealed on")),
        "{e}"
    );
    assert!(out.is_empty());
    // The parent gone: the chain cannot be restored, in those words.
    std::fs::remove_file(b.manifest_path(A)).unwrap();
    let e = fetch(&b.store, &b.key, B).0.unwrap_err();
    assert!(matches!(e, SealError::NotFound(_)), "{e:?}");
    assert!(e.to_string().contains("cannot be restored"), "{e}");
}

/// A store that stops working after `puts` puts, as a copier killed mid-upload leaves it:
/// its parts stay (the dead process deletes nothing).
struct CutOff<'a> {
    inner: &'a DirStore,
    puts: AtomicUsize,
}

impl Store for CutOff<'_> {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        if self.puts.fetch_sub(1, Ordering::SeqCst) == 0 {
            self.puts.store(0, Ordering::SeqCst);
            return Err(StoreError::Unreachable("the copier was killed".into()));
        }
        self.inner.put(key, bytes)
    }
    fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, StoreError> {
        self.inner.get(key, max)
    }
    fn list(&self, prefix: &str) -> Result<Vec<seal::Object>, StoreError> {
        self.inner.list(prefix)
    }
    fn delete(&self, _key: &str) -> Result<(), StoreError> {
        Err(StoreError::Unreachable("the copier was killed".into()))
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[test]
fn a_copy_cut_mid_upload_is_never_listed_and_clean_removes_its_parts_once_old() {
    let b = Bench::new();
    let cut = CutOff {
        inner: &b.store,
        puts: AtomicUsize::new(7),
    };
    let e = seal::seal_with(
        &cut,
        &b.key,
        meta(B, Uuid::from_u128(2), None),
        2,
        &mut &synthetic(300_000, 2)[..],
        &AtomicU64::new(0),
        PART,
    )
    .unwrap_err();
    assert!(matches!(e, SealError::Unreachable(_)), "{e:?}");
    let parts_prefix = format!("tacid-v1/{}/parts/", b.key.key_id());
    let before = b.store.list(&parts_prefix).unwrap().len();
    assert_eq!(
        before,
        b.manifest.parts.len() + 7,
        "the cut copy's 7 parts are there"
    );
    // Never counted: only A is a copy.
    let listed = seal::copies(&b.store, &b.key).unwrap();
    assert_eq!(listed, vec![Listed::Good(b.manifest.clone())]);
    let (result, _) = b.fetch(B);
    assert!(matches!(result, Err(SealError::NotFound(_))));
    // Young: perhaps a copy another writer is sealing now; kept.
    let report = seal::clean(&b.store, &b.key).unwrap();
    assert_eq!(
        (report.parts, report.copies.len(), report.young.len()),
        (0, 0, 1)
    );
    assert_eq!(b.store.list(&parts_prefix).unwrap().len(), before);
    // Older than the grace period (its parts last written a day and a minute ago): removed.
    for part in b.store.list(&parts_prefix).unwrap() {
        if !part.key.contains(&b.manifest.copy_id) {
            common::age(
                &b.root.join(&part.key),
                seal::CLEAN_GRACE + Duration::from_secs(60),
            );
        }
    }
    let report = seal::clean(&b.store, &b.key).unwrap();
    assert_eq!(report.parts, 7);
    assert_eq!(report.copies.len(), 1);
    assert!(report.young.is_empty(), "{report:?}");
    assert_eq!(
        b.store.list(&parts_prefix).unwrap().len(),
        b.manifest.parts.len()
    );
    // A is untouched.
    assert!(b.fetch(A).1 == b.stream);
    assert_eq!(
        seal::clean(&b.store, &b.key).unwrap(),
        seal::CleanReport::default()
    );
}

#[test]
fn a_copy_whose_stream_breaks_leaves_nothing() {
    let b = Bench::new();
    struct Breaks(usize);
    impl std::io::Read for Breaks {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("the stem aborted the send"));
            }
            let stream = synthetic(70_000, 8);
            let n = buf.len().min(stream.len()).min(self.0);
            buf[..n].copy_from_slice(&stream[..n]);
            self.0 -= n;
            Ok(n)
        }
    }
    let e = seal::seal_with(
        &b.store,
        &b.key,
        meta(B, Uuid::from_u128(2), None),
        2,
        &mut Breaks(200_000),
        &AtomicU64::new(0),
        PART,
    )
    .unwrap_err();
    assert!(e.to_string().contains("the stem aborted the send"), "{e}");
    let parts = b
        .store
        .list(&format!("tacid-v1/{}/parts/", b.key.key_id()))
        .unwrap();
    assert_eq!(
        parts.len(),
        b.manifest.parts.len(),
        "the broken copy's parts were removed"
    );
    assert_eq!(seal::copies(&b.store, &b.key).unwrap().len(), 1);
}

#[test]
fn not_a_send_stream_is_not_sealed() {
    let b = Bench::new();
    let e = seal::seal_with(
        &b.store,
        &b.key,
        meta(B, Uuid::from_u128(2), None),
        2,
        &mut &b"hello, world, this is text"[..],
        &AtomicU64::new(0),
        PART,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a btrfs send stream"), "{e}");
    assert_eq!(seal::copies(&b.store, &b.key).unwrap().len(), 1);
}

/// A TCP listener that accepts every connection and never says a word.
fn silent_listener() -> (u16, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(16) {
            held.push(stream);
        }
        std::thread::sleep(Duration::from_secs(120));
    });
    (port, handle)
}

#[test]
fn an_s3_store_that_never_answers_fails_in_bounded_time() {
    let (port, _listener) = silent_listener();
    let rt = crate::s3::runtime();
    let place = seal::StorePlace::S3 {
        host: "127.0.0.1".into(),
        port: Some(port),
        bucket: "silent".into(),
        prefix: String::new(),
        region: "garage".into(),
        credentials: seal::S3Credentials {
            access_key_id: "GK0".into(),
            secret_access_key: "0".into(),
        },
        allow_http: true,
        connect_timeout: Some(Duration::from_secs(2)),
        request_timeout: Some(Duration::from_secs(3)),
    };
    let store = seal::open_store(&place, rt.handle().clone()).unwrap();
    let key = SealKey::generate();
    let start = Instant::now();
    let e = seal::seal_with(
        &*store,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &mut &synthetic(1000, 1)[..],
        &AtomicU64::new(0),
        PART,
    )
    .unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, SealError::Unreachable(_)), "{e:?}");
    let said = e.to_string();
    assert!(
        said.contains("did not answer") || said.contains("could not be reached"),
        "{said}"
    );
    assert!(
        said.contains("check the endpoint and the network"),
        "{said}"
    );
    // 3 tries of at most 3 s each, with backoff: well under a minute.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let start = Instant::now();
    let e = seal::copies(&*store, &key).unwrap_err();
    assert!(matches!(e, SealError::Unreachable(_)), "{e:?}");
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn an_ssh_store_that_never_answers_fails_in_bounded_time() {
    let (port, _listener) = silent_listener();
    let mine = tempfile::tempdir().unwrap();
    let identity = mine.path().join("id");
    std::fs::write(&identity, "not used").unwrap();
    let place = seal::StorePlace::Ssh {
        program: "/usr/bin/ssh".into(),
        user: "tacid".into(),
        host: "127.0.0.1".into(),
        port,
        identity,
        host_key:
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
                .into(),
        known_hosts_dir: mine.path().to_owned(),
        label: "silent".into(),
    };
    if !Path::new("/usr/bin/ssh").exists() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true but no /usr/bin/ssh"
        );
        eprintln!("\n*** SKIPPED: no /usr/bin/ssh; this test did not run ***\n");
        return;
    }
    let store = seal::SshStore::open(&place).unwrap();
    let start = Instant::now();
    let e = store.list("tacid-v1/").unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, StoreError::Unreachable(_)), "{e:?}");
    assert!(e.to_string().contains("check the host, the network"), "{e}");
    // ssh's ConnectTimeout (10 s) covers the silent handshake.
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn a_full_directory_is_full_in_words_and_keeps_nothing_of_the_copy() {
    if !rustix::process::geteuid().is_root() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true but not root: cannot mount a small tmpfs"
        );
        eprintln!("\n*** SKIPPED: needs root to mount a small tmpfs; this test did not run ***\n");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("small");
    std::fs::create_dir(&mount).unwrap();
    let status = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=256k,mode=0700",
            "tacid-test-full",
        ])
        .arg(&mount)
        .status()
        .unwrap();
    assert!(status.success());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mount.clone());
    let store = DirStore::open(&mount.join("target")).unwrap();
    let key = SealKey::generate();
    let e = seal::seal_with(
        &store,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &mut &synthetic(1 << 20, 1)[..],
        &AtomicU64::new(0),
        PART,
    )
    .unwrap_err();
    assert!(matches!(e, SealError::Full(_)), "{e:?}");
    let said = e.to_string();
    assert!(said.contains("no space left"), "{said}");
    assert!(said.contains("free space there"), "{said}");
    assert_eq!(
        store.list("tacid-v1/").unwrap(),
        vec![],
        "parts of the failed copy were left"
    );
    assert_eq!(seal::copies(&store, &key).unwrap(), vec![]);
    // Room again (a smaller copy): it works.
    seal_small(
        &store,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &synthetic(20_000, 1),
        PART,
    );
}

#[test]
fn a_key_file_anyone_else_could_read_or_swap_is_refused_with_the_fix() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recovery.key");
    let e = SealKey::load(&path).unwrap_err();
    assert!(matches!(e, SealError::KeyMissing(_)), "{e:?}");
    assert!(e.to_string().contains("tacid-copier key init"), "{e}");
    let made = SealKey::create(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        0o400
    );
    assert_eq!(SealKey::load(&path).unwrap().key_id(), made.key_id());
    assert!(SealKey::create(&path)
        .unwrap_err()
        .to_string()
        .contains("never overwritten"));

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o440)).unwrap();
    let e = SealKey::load(&path).unwrap_err();
    assert!(matches!(e, SealError::KeyUnsafe { .. }), "{e:?}");
    assert!(e.to_string().contains("mode 0440"), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("chmod 0400 {}", path.display())),
        "{e}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();

    let link = dir.path().join("link.key");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let e = SealKey::load(&link).unwrap_err();
    assert!(e.to_string().contains("is a symbolic link"), "{e}");

    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let e = SealKey::load(&path).unwrap_err();
        assert!(matches!(e, SealError::KeyUnsafe { .. }), "{e:?}");
        assert!(e.to_string().contains("belongs to uid 65534"), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("chown 0 {}", path.display())),
            "{e}"
        );
    } else {
        eprintln!("\n*** SKIPPED (part): the wrong-owner case needs root ***\n");
    }
    let not_file = dir.path().join("dir.key");
    std::fs::create_dir(&not_file).unwrap();
    std::fs::set_permissions(&not_file, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(SealKey::load(&not_file)
        .unwrap_err()
        .to_string()
        .contains("not a regular file"));
}

#[test]
fn the_recovery_text_alone_brings_the_key_back() {
    let key = SealKey::generate();
    let text = key.recovery_text();
    assert!(text.starts_with("AGE-SECRET-KEY-1"), "{text}");
    let again = SealKey::from_recovery_text(&format!("  \n{text}\n\n")).unwrap();
    assert_eq!(again.key_id(), key.key_id());
    assert_eq!(key.key_id().len(), 16);
    assert!(
        !format!("{key:?}").contains(&text[16..]),
        "Debug shows the secret"
    );
    let e = SealKey::from_recovery_text("AGE-SECRET-KEY-1QQQ").unwrap_err();
    assert!(e.to_string().contains("AGE-SECRET-KEY-1"), "{e}");
    // A copy sealed with one key unseals with the key brought back from its text.
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open(&dir.path().join("t")).unwrap();
    let stream = synthetic(50_000, 3);
    seal_small(
        &store,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &stream,
        PART,
    );
    let (result, out) = fetch(&store, &again, A);
    result.unwrap();
    assert!(out == stream);
}

#[test]
fn directory_keys_cannot_leave_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open(&dir.path().join("t")).unwrap();
    for key in [
        "../x",
        "/etc/passwd",
        "a/../../x",
        "a//b",
        ".hidden",
        "a/.tmp-x",
        "",
        "a b",
        "a\nb",
        "tacid-v1/\u{e9}",
    ] {
        let e = store.put(key, b"x").unwrap_err();
        assert!(matches!(e, StoreError::BadKey(_)), "{key:?}: {e:?}");
        assert!(
            matches!(store.get(key, 10), Err(StoreError::BadKey(_))),
            "{key:?}"
        );
        assert!(
            matches!(store.delete(key), Err(StoreError::BadKey(_))),
            "{key:?}"
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // A symlink planted in the directory is not followed.
    let outside = dir.path().join("outside");
    std::fs::write(&outside, b"secret").unwrap();
    std::os::unix::fs::symlink(&outside, dir.path().join("t/tacid-v1")).unwrap_or(());
    std::fs::create_dir_all(dir.path().join("t/a")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.path().join("t/a/link")).unwrap();
    assert!(store.get("a/link", 100).is_err());
    assert_eq!(store.list("a/").unwrap(), vec![]);
}

#[test]
fn the_full_and_incremental_of_a_real_send_stream_fail_alike_when_damaged() {
    // The chain case with real streams: the incremental's part damaged, the full intact:
    // what was written is the full stream and nothing of the incremental.
    let Some(streams) = common::streams(200, 50) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    let store = DirStore::open(&root).unwrap();
    let key = SealKey::generate();
    seal_small(
        &store,
        &key,
        meta(FULL, streams.full_uuid, None),
        1,
        &streams.full,
        64 << 10,
    );
    let incr = seal_small(
        &store,
        &key,
        meta(INCR, streams.incr_uuid, Some((FULL, streams.full_uuid))),
        2,
        &streams.incr,
        64 << 10,
    );
    flip(
        &root.join(seal::part_key(key.key_id(), &incr.copy_id, 0)),
        200,
    );
    let (result, out) = fetch(&store, &key, INCR);
    assert!(result.unwrap_err().to_string().contains(&format!(
        "part 0 of {} of the sealed copy {INCR}",
        incr.parts.len()
    )));
    assert!(
        out == streams.full,
        "exactly the full stream was written, nothing of the damaged incremental"
    );
}

/// A store that keeps other bytes than it was given for parts, and remembers what
/// manifests it was asked to put.
struct Loses<'a> {
    inner: &'a DirStore,
    manifests_put: AtomicUsize,
}

impl Store for Loses<'_> {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        if key.contains("/manifests/") {
            self.manifests_put.fetch_add(1, Ordering::SeqCst);
            return self.inner.put(key, bytes);
        }
        let mut kept = bytes.to_vec();
        kept[bytes.len() / 2] ^= 1;
        self.inner.put(key, &kept)
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
fn a_part_the_store_does_not_keep_fails_the_seal_before_any_manifest_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open(&dir.path().join("t")).unwrap();
    let key = SealKey::generate();
    let losing = Loses {
        inner: &store,
        manifests_put: AtomicUsize::new(0),
    };
    let e = seal::seal_with(
        &losing,
        &key,
        meta(A, Uuid::from_u128(1), None),
        1,
        &mut &synthetic(100_000, 1)[..],
        &AtomicU64::new(0),
        PART,
    )
    .unwrap_err();
    assert!(matches!(e, SealError::Untrusted(_)), "{e:?}");
    assert!(e.to_string().contains("did not keep part 0"), "{e}");
    assert_eq!(
        losing.manifests_put.load(Ordering::SeqCst),
        0,
        "a manifest was put naming a part the store did not hold"
    );
    assert!(seal::copies(&store, &key).unwrap().is_empty());
}

/// A store that counts the bytes of parts read.
struct Counting<'a> {
    inner: &'a DirStore,
    part_gets: AtomicUsize,
}

impl Store for Counting<'_> {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.inner.put(key, bytes)
    }
    fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, StoreError> {
        if key.contains("/parts/") {
            self.part_gets.fetch_add(1, Ordering::SeqCst);
        }
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
fn verifying_every_copy_reads_each_stored_copy_once_and_counts_bytes_per_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open(&dir.path().join("t")).unwrap();
    let key = SealKey::generate();
    // A chain of four: a full and three incrementals, each on the one before.
    let names = [
        "@home.2026-12-01T140200.123456Z",
        "@home.2026-12-02T140200.123456Z",
        "@home.2026-12-03T140200.123456Z",
        "@home.2026-12-04T140200.123456Z",
    ];
    let mut manifests = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let parent = (i > 0).then(|| (names[i - 1], Uuid::from_u128(i as u128)));
        manifests.push(seal_small(
            &store,
            &key,
            meta(n, Uuid::from_u128(i as u128 + 1), parent),
            i as u64 + 1,
            &synthetic(60_000, i as u64 + 1),
            PART,
        ));
    }
    let counting = Counting {
        inner: &store,
        part_gets: AtomicUsize::new(0),
    };
    let moved = AtomicU64::new(0);
    let mut verifier = seal::Verifier::new(&counting, &key, &moved, &|_| None);
    // The newest first: its chain reads all four; each older one then reads nothing again.
    let mut bytes = Vec::new();
    for n in names.iter().rev() {
        let (result, read) = verifier.verify(&name(n));
        result.unwrap();
        bytes.push(read);
    }
    let all_parts: usize = manifests.iter().map(|m| m.parts.len()).sum();
    let all_bytes: u64 = manifests.iter().map(|m| m.stored_bytes).sum();
    assert_eq!(
        counting.part_gets.load(Ordering::SeqCst),
        all_parts,
        "each part read once"
    );
    assert_eq!(
        bytes,
        vec![all_bytes, 0, 0, 0],
        "bytes per name, not cumulative"
    );
    assert_eq!(moved.load(Ordering::Relaxed), all_bytes);
    // The oldest first: each name reads its own copy only.
    let counting = Counting {
        inner: &store,
        part_gets: AtomicUsize::new(0),
    };
    let mut verifier = seal::Verifier::new(&counting, &key, &moved, &|_| None);
    let own: Vec<u64> = names.iter().map(|n| verifier.verify(&name(n)).1).collect();
    assert_eq!(
        own,
        manifests.iter().map(|m| m.stored_bytes).collect::<Vec<_>>()
    );
    assert_eq!(counting.part_gets.load(Ordering::SeqCst), all_parts);
    // A damaged full fails every name whose chain needs it, read once.
    flip(
        &dir.path()
            .join("t")
            .join(seal::part_key(key.key_id(), &manifests[0].copy_id, 0)),
        100,
    );
    let counting = Counting {
        inner: &store,
        part_gets: AtomicUsize::new(0),
    };
    let mut verifier = seal::Verifier::new(&counting, &key, &moved, &|_| None);
    for n in names.iter().rev() {
        let e = verifier.verify(&name(n)).0.unwrap_err();
        assert!(e.to_string().contains("part 0 of"), "{e}");
    }
    assert_eq!(counting.part_gets.load(Ordering::SeqCst), 1);
}

#[test]
fn a_symlinked_directory_inside_the_store_is_never_followed() {
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
    // Outside the store: a directory shaped like a copy's parts.
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(outside.join("x")).unwrap();
    std::fs::write(outside.join("x/000000"), b"not the store's").unwrap();
    std::fs::write(outside.join("000000"), b"not the store's either").unwrap();
    // Inside: the parts directory of another copy id is a link to it, and so is a middle
    // directory of the key path.
    let parts = root.join(format!("tacid-v1/{}/parts", key.key_id()));
    let linked = "ab".repeat(16);
    std::os::unix::fs::symlink(&outside, parts.join(&linked)).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("tacid-v1/other")).unwrap();
    let through = [
        format!("tacid-v1/{}/parts/{linked}/000000", key.key_id()),
        format!("tacid-v1/{}/parts/{linked}/x/000000", key.key_id()),
        "tacid-v1/other/x/000000".to_owned(),
        "tacid-v1/other/000000".to_owned(),
    ];
    for k in &through {
        let e = store.get(k, 1000).unwrap_err();
        assert!(
            e.to_string().contains("symbolic link"),
            "{k}: read through a link: {e:?}"
        );
        let e = store.delete(k).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{k}: {e:?}");
        let e = store.put(k, b"x").unwrap_err();
        assert!(
            e.to_string().contains("symbolic link") || e.to_string().contains("in the way"),
            "{k}: {e:?}"
        );
    }
    let listed: Vec<String> = store
        .list("tacid-v1/")
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert!(
        listed
            .iter()
            .all(|k| !k.contains(&linked) && !k.contains("other")),
        "{listed:?}"
    );
    assert!(
        store.list("tacid-v1/other/").is_err(),
        "listing through a link"
    );
    // Clean does not reach through either: the outside files are all there.
    seal::clean_older_than(&store, &key, Duration::ZERO).unwrap();
    assert_eq!(
        std::fs::read(outside.join("x/000000")).unwrap(),
        b"not the store's"
    );
    assert_eq!(
        std::fs::read(outside.join("000000")).unwrap(),
        b"not the store's either"
    );
    assert!(!outside.join("x/.tmp-").exists());
    seal::verify(&store, &key, &m.name, &AtomicU64::new(0)).unwrap();
}

#[test]
fn a_listing_past_the_cap_is_refused_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open(&dir.path().join("t"))
        .unwrap()
        .with_max_listed(5);
    for i in 0..6 {
        store.put(&format!("tacid-v1/x/{i:06}"), b"x").unwrap();
    }
    let e = store.list("tacid-v1/").unwrap_err();
    let words = e.to_string();
    assert!(words.contains("more than 5 objects"), "{words}");
    assert!(words.contains("a place of its own"), "{words}");
    store.delete("tacid-v1/x/000000").unwrap();
    assert_eq!(store.list("tacid-v1/").unwrap().len(), 5);
}

#[test]
fn a_leftover_temporary_key_file_is_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recovery.key");
    // What a power cut during `key init` leaves: a temporary beside the key, half written.
    let leftover = dir
        .path()
        .join(".recovery.key.tmp-0123456789abcdef0123456789abcdef");
    std::fs::write(
        &leftover,
        b"# tacid recovery key (age identity); keep a copy away\nAGE-SECRET-KEY-1QQQ",
    )
    .unwrap();
    let e = SealKey::load(&path).unwrap_err();
    assert!(matches!(e, SealError::KeyMissing(_)), "{e:?}");
    let key = SealKey::create(&path).unwrap();
    assert_eq!(SealKey::load(&path).unwrap().key_id(), key.key_id());
    // The key alone stays: neither its own temporary nor the leftover (it held a secret).
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["recovery.key"]);
    // Never over a key.
    let e = SealKey::generate().store(&path).unwrap_err();
    assert!(e.to_string().contains("never overwritten"), "{e}");
    assert_eq!(SealKey::load(&path).unwrap().key_id(), key.key_id());
}

#[test]
fn a_key_written_on_a_full_disk_leaves_no_key_file() {
    // A tmpfs of one page, filled: the key cannot be written. Before, the key's own file
    // was made and left empty: `load` then failed and `create` refused to replace it.
    if !rustix::process::geteuid().is_root() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true but not root: a full tmpfs needs root to mount"
        );
        eprintln!("\n*** SKIPPED: a full tmpfs needs root to mount; this test did not run ***\n");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4k,mode=0700", "tacid-full"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(mounted.success());
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&mnt);
    let filler = mnt.join("filler");
    let _ = std::fs::write(&filler, vec![7u8; 64 << 10]);
    let path = mnt.join("recovery.key");
    let e = SealKey::create(&path).unwrap_err();
    assert!(e.to_string().contains("nothing was kept"), "{e}");
    assert!(
        std::fs::symlink_metadata(&path).is_err(),
        "a key file was left behind"
    );
    assert_eq!(
        std::fs::read_dir(&mnt).unwrap().count(),
        1,
        "only the filler"
    );
    std::fs::remove_file(&filler).unwrap();
    let key = SealKey::create(&path).unwrap();
    assert_eq!(SealKey::load(&path).unwrap().key_id(), key.key_id());
}
