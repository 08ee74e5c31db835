//! Send streams and helpers shared by the store tests.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU64;

use layout::SnapshotName;
use seal::{CopyMeta, Manifest, SealKey, Store};
use uuid::Uuid;

/// A full stream and an incremental one on it, made by `btrfs send` on a loop Btrfs.
pub struct Streams {
    pub full_name: SnapshotName,
    pub full_uuid: Uuid,
    pub full: Vec<u8>,
    pub incr_name: SnapshotName,
    pub incr_uuid: Uuid,
    pub incr: Vec<u8>,
    /// Keeps the filesystem for a receive check.
    pub fs: testbed::LoopFs,
}

pub fn name(s: &str) -> SnapshotName {
    SnapshotName::parse(s).unwrap()
}

pub const FULL: &str = "@home.2026-12-01T140200.123456Z";
pub const INCR: &str = "@home.2026-12-02T140200.123456Z";

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.stderr(Stdio::piped()).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn uuid_of(path: &Path) -> Uuid {
    let out = String::from_utf8(run(Command::new("btrfs")
        .arg("subvolume")
        .arg("show")
        .arg(path)))
    .unwrap();
    let line = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("UUID:"))
        .unwrap();
    line["UUID:".len()..].trim().parse().unwrap()
}

/// A tree of `files` files (some compressible, some not), snapshotted, changed
/// (`changes` files rewritten), snapshotted again; both sent. None when the machine
/// cannot make a loop Btrfs (already said loudly).
pub fn streams(files: usize, changes: usize) -> Option<Streams> {
    let fs = testbed::LoopFs::new(512 << 20).unwrap()?;
    let top = fs.top();
    let sub = top.join("@home");
    run(Command::new("btrfs")
        .args(["subvolume", "create"])
        .arg(&sub));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..files {
        let mut bytes = format!("file {i}\n").repeat(50).into_bytes();
        if i % 3 == 0 {
            for _ in 0..512 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                bytes.extend_from_slice(&seed.to_le_bytes());
            }
        }
        std::fs::create_dir_all(sub.join(format!("d{}", i % 20))).unwrap();
        std::fs::write(sub.join(format!("d{}/f{i}", i % 20)), bytes).unwrap();
    }
    let s1 = top.join(FULL);
    run(Command::new("btrfs")
        .args(["subvolume", "snapshot", "-r"])
        .arg(&sub)
        .arg(&s1));
    for i in 0..changes {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(sub.join(format!("d{}/f{i}", i % 20)))
            .unwrap();
        writeln!(f, "changed {i}").unwrap();
    }
    let s2 = top.join(INCR);
    run(Command::new("btrfs")
        .args(["subvolume", "snapshot", "-r"])
        .arg(&sub)
        .arg(&s2));
    let full = run(Command::new("btrfs").args(["-q", "send"]).arg(&s1));
    let incr = run(Command::new("btrfs")
        .args(["-q", "send", "-p"])
        .arg(&s1)
        .arg(&s2));
    Some(Streams {
        full_name: name(FULL),
        full_uuid: uuid_of(&s1),
        full,
        incr_name: name(INCR),
        incr_uuid: uuid_of(&s2),
        incr,
        fs,
    })
}

/// A synthetic send stream (header and one big write command) of about `bytes` bytes
/// that zstd cannot shrink much: for many small parts without a loop device.
pub fn synthetic(bytes: usize, seed: u64) -> Vec<u8> {
    use testbed::send_stream::{attr, cmd, stream};
    let mut s = seed | 1;
    let mut chunks = Vec::new();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(60_000);
        let mut data = Vec::with_capacity(n);
        while data.len() < n {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            data.extend_from_slice(&s.to_le_bytes());
        }
        data.truncate(n);
        chunks.push((
            cmd::WRITE,
            vec![(attr::PATH, b"f".to_vec()), (attr::DATA, data)],
        ));
        left -= n;
    }
    stream(&chunks)
}

pub fn meta(n: &str, uuid: Uuid, parent: Option<(&str, Uuid)>) -> CopyMeta {
    CopyMeta {
        name: name(n),
        uuid,
        parent: parent.map(|(p, u)| (name(p), u)),
    }
}

pub fn seal_small(
    store: &dyn Store,
    key: &SealKey,
    m: CopyMeta,
    generation: u64,
    stream: &[u8],
    part: usize,
) -> Manifest {
    seal::seal_with(
        store,
        key,
        m,
        generation,
        &mut &stream[..],
        &AtomicU64::new(0),
        part,
    )
    .unwrap()
}

/// Seal the full and the incremental stream, verify, unseal the chain, compare, and
/// receive it into the loop Btrfs: the files are back.
pub fn round_trip(store: &dyn Store, streams: &Streams) {
    let key = SealKey::generate();
    let moved = AtomicU64::new(0);
    let full = seal::seal(
        store,
        &key,
        meta(FULL, streams.full_uuid, None),
        1,
        &mut &streams.full[..],
        &moved,
    )
    .unwrap();
    assert_eq!(full.depth, 0);
    assert_eq!(full.plain_bytes, streams.full.len() as u64);
    let incr = seal::seal(
        store,
        &key,
        meta(INCR, streams.incr_uuid, Some((FULL, streams.full_uuid))),
        2,
        &mut &streams.incr[..],
        &moved,
    )
    .unwrap();
    assert_eq!(incr.depth, 1);
    assert!(
        incr.stored_bytes < full.stored_bytes,
        "an incremental stores less than the full"
    );
    let listed = seal::copies(store, &key).unwrap();
    assert_eq!(
        listed,
        vec![
            seal::Listed::Good(full.clone()),
            seal::Listed::Good(incr.clone())
        ]
    );
    let chain = seal::verify(store, &key, &streams.incr_name, &AtomicU64::new(0)).unwrap();
    assert_eq!(chain, vec![full.clone(), incr.clone()]);
    let mut out = Vec::new();
    let n = seal::unseal(store, &key, &chain, &mut out, &AtomicU64::new(0)).unwrap();
    assert_eq!(n as usize, out.len());
    let mut both = streams.full.clone();
    both.extend_from_slice(&streams.incr);
    assert!(out == both, "unsealed bytes differ from the streams sent");

    // What a person checks: received, the changed file is there with its change.
    let into = streams.fs.top().join("received");
    std::fs::create_dir(&into).unwrap();
    let mut child = Command::new("btrfs")
        .args(["receive", "--chroot"])
        .arg(&into)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&out).unwrap();
    let received = child.wait_with_output().unwrap();
    assert!(
        received.status.success(),
        "{}",
        String::from_utf8_lossy(&received.stderr)
    );
    let changed = std::fs::read_to_string(into.join(INCR).join("d1/f1")).unwrap();
    assert!(changed.ends_with("changed 1\n"), "{changed:?}");

    // Deleted: no copy listed, nothing left but the empty directories.
    seal::delete_copy(store, &key, &streams.incr_name).unwrap();
    seal::delete_copy(store, &key, &streams.full_name).unwrap();
    assert_eq!(seal::copies(store, &key).unwrap(), vec![]);
    assert_eq!(store.list("tacid-v1/").unwrap(), vec![]);
}

/// Set the time `path` was last written to `ago` before now: a file that old.
pub fn age(path: &Path, ago: std::time::Duration) {
    let when = std::time::SystemTime::now() - ago;
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_times(std::fs::FileTimes::new().set_modified(when)))
        .unwrap_or_else(|e| panic!("set the time of {}: {e}", path.display()));
}
