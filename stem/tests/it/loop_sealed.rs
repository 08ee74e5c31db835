#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test
//! Sealed copies, the stem's side, on real loop-device Btrfs: a snapshot's send framed into
//! a pipe (the test reads it as the copier would, and `btrfs receive`s the payload on
//! another Btrfs: the oracle), and a framed chain received from a pipe into a fresh store.
//! Every way a receive can go wrong leaves `.incoming` empty and the store as it was.
//!
//! Needs root, loop devices and btrfs-progs; elsewhere each test says SKIPPED loudly (and
//! fails under CI=true, through testbed).

use std::fs;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{megabytes, Receiving};
use layout::copies::CopiesConfig;
use layout::origin::Origin;
use layout::{SnapshotName, SubvolumeName, SNAPSHOTS_SUBVOLUME};
use stem::copies::{Copies, CopyError, SentSealed, DEFAULT_SEALED_DEADLINE};
use stem::worker::Worker;
use stem::{Engine, Snapshot};
use stem_interface::pipe::{FrameReader, FrameWriter};
use testbed::{LoopFs, Options};
use uuid::Uuid;

const SIZE: u64 = 256 << 20;

/// A tacid machine and its copy engine (no Btrfs targets: the sealed acts name none).
struct Machine {
    fs: LoopFs,
    worker: Worker,
    copies: Copies,
    _runtime: Receiving,
}

fn machine_with(stall: Duration, config: CopiesConfig) -> Option<Machine> {
    machine_bounded(stall, DEFAULT_SEALED_DEADLINE, "btrfs".as_ref(), config)
}

/// A machine whose sealed receives stall after `stall`, end at `deadline`, and run `btrfs`.
fn machine_bounded(
    stall: Duration,
    deadline: Duration,
    btrfs: &Path,
    config: CopiesConfig,
) -> Option<Machine> {
    let fs = LoopFs::with_layout(SIZE).expect("make a loop Btrfs")?;
    let worker = Worker::start(Engine::open(fs.top()).unwrap(), || {}).unwrap();
    let runtime = Receiving::start(fs.top(), "{\"targets\": {}}", btrfs, stall);
    let programs = runtime.programs("ssh".into(), stall);
    let copies = Copies::new(config, programs, worker.clone(), fs.top().to_owned())
        .with_sealed_deadline(deadline);
    Some(Machine {
        fs,
        worker,
        copies,
        _runtime: runtime,
    })
}

fn machine() -> Option<Machine> {
    machine_with(stem::copies::DEFAULT_STALL, CopiesConfig::default())
}

fn pipe() -> (OwnedFd, OwnedFd) {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap()
}

impl Machine {
    fn take(&self, subvolume: &str) -> Snapshot {
        let s = SubvolumeName::parse(subvolume).unwrap();
        self.worker
            .run_blocking(move |e| e.take(s))
            .unwrap()
            .unwrap()
    }

    fn write(&self, rel: &str, bytes: &[u8]) {
        fs::write(self.fs.top().join(rel), bytes).unwrap();
    }

    fn store(&self) -> std::path::PathBuf {
        self.fs.top().join(SNAPSHOTS_SUBVOLUME)
    }

    /// Send `name` sealed into a pipe the test reads whole, as the copier would.
    fn send(
        &self,
        name: SnapshotName,
        parent: Option<SnapshotName>,
    ) -> (Result<SentSealed, CopyError>, Vec<u8>) {
        let (r, w) = pipe();
        let reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            fs::File::from(r).read_to_end(&mut bytes).unwrap();
            bytes
        });
        let sent = self.copies.send_sealed(name, parent, w);
        (sent, reader.join().unwrap())
    }

    /// Receive `framed` (the bytes a copier writes) as `name` with received UUID `uuid`.
    fn receive(
        &self,
        name: SnapshotName,
        uuid: Uuid,
        framed: Vec<u8>,
    ) -> Result<(Snapshot, u64), CopyError> {
        let (r, w) = pipe();
        let writer = std::thread::spawn(move || {
            // The stem may stop reading early (that is the point of some tests).
            let _ = fs::File::from(w).write_all(&framed);
        });
        let received = self.copies.receive_sealed(name, uuid, r);
        writer.join().unwrap();
        received
    }

    /// What is left in `.incoming` (it must be empty, or absent, after every receive).
    fn incoming(&self) -> Vec<String> {
        match fs::read_dir(self.store().join(layout::copies::INCOMING_DIR_NAME)) {
            Ok(entries) => entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("{e}"),
        }
    }

    /// Every subvolume of the filesystem (the oracle), to compare before and after.
    fn subvolumes(&self) -> Vec<String> {
        self.fs.subvolume_paths().unwrap()
    }
}

/// The stream in `framed`, and the END frame's trailer as JSON.
fn unframe(framed: &[u8]) -> (Vec<u8>, serde_json::Value) {
    let mut reader = FrameReader::new(framed);
    let mut data = Vec::new();
    reader.read_to_end(&mut data).unwrap();
    let trailer = serde_json::from_slice(reader.trailer().unwrap()).unwrap();
    (data, trailer)
}

/// `streams` framed as the copier's Unseal writes them, with its trailer.
fn framed_chain(streams: &[&[u8]], uuid: Uuid) -> Vec<u8> {
    let mut w = FrameWriter::new(Vec::new());
    for s in streams {
        w.write_all(s).unwrap();
    }
    let bytes: usize = streams.iter().map(|s| s.len()).sum();
    w.end(&serde_json::json!({"uuid": uuid.to_string(), "streams": streams.len(), "bytes": bytes}))
        .unwrap()
}

/// `btrfs receive` of `stream` into `dir` (the oracle's side), ending at the stream's end.
fn btrfs_receive(dir: &Path, stream: &[u8]) {
    let mut child = Command::new("btrfs")
        .args(["receive", "-e"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stream).unwrap();
    assert!(child.wait().unwrap().success(), "btrfs receive failed");
}

/// Three snapshots of @home, each changing something, sent sealed: full, then each on the
/// one before. Returns the snapshots and each stream (unframed).
fn chain_of_three(m: &Machine) -> (Vec<Snapshot>, Vec<Vec<u8>>) {
    m.write("@home/big", &megabytes(2, 3));
    let s1 = m.take("@home");
    m.write("@home/letter", b"monday");
    let s2 = m.take("@home");
    m.write("@home/letter", b"tuesday");
    fs::remove_file(m.fs.top().join("@home/big")).unwrap();
    let s3 = m.take("@home");
    let mut streams = Vec::new();
    let mut parent = None;
    for s in [&s1, &s2, &s3] {
        let (sent, framed) = m.send(s.name, parent);
        let sent = sent.unwrap();
        let (data, trailer) = unframe(&framed);
        assert_eq!(sent.bytes, data.len() as u64);
        assert_eq!(trailer["uuid"], s.uuid.to_string());
        streams.push(data);
        parent = Some(s.name);
    }
    (vec![s1, s2, s3], streams)
}

#[test]
fn loop_sealed_send_full_and_incremental_yield_the_same_files_elsewhere() {
    let Some(m) = machine() else { return };
    m.write("@home/big", &megabytes(3, 1));
    let s1 = m.take("@home");
    let (sent, framed) = m.send(s1.name, None);
    let sent = sent.unwrap();
    assert_eq!(sent.uuid, s1.uuid);
    assert_eq!(sent.parent_uuid, None);
    assert!(sent.bytes > 3 << 20, "the full stream holds the file");
    let (full, trailer) = unframe(&framed);
    assert_eq!(
        trailer,
        serde_json::json!({"uuid": s1.uuid.to_string(), "parent_uuid": null, "bytes": full.len()})
    );
    assert!(full.starts_with(b"btrfs-stream\0"), "a send stream");

    m.write("@home/small", b"tuesday");
    let s2 = m.take("@home");
    let (sent, framed) = m.send(s2.name, Some(s1.name));
    let sent = sent.unwrap();
    assert_eq!(sent.parent_uuid, Some(s1.uuid));
    let (incremental, trailer) = unframe(&framed);
    assert_eq!(trailer["parent_uuid"], s1.uuid.to_string());
    assert_eq!(trailer["bytes"], incremental.len());
    assert!(
        incremental.len() < 1 << 20,
        "the incremental holds the change only: {}",
        incremental.len()
    );

    // The oracle: the payloads received by btrfs-progs on another Btrfs.
    let other = LoopFs::create(SIZE, Options::default()).unwrap().unwrap();
    btrfs_receive(other.top(), &full);
    btrfs_receive(other.top(), &incremental);
    let got = other.top().join(s2.name.to_string());
    assert_eq!(fs::read(got.join("big")).unwrap(), megabytes(3, 1));
    assert_eq!(fs::read_to_string(got.join("small")).unwrap(), "tuesday");
    let shown = other.show(&s2.name.to_string()).unwrap();
    assert_eq!(shown["Received UUID"], s2.uuid.to_string(), "{shown:?}");
}

#[test]
fn loop_sealed_send_refuses_what_it_cannot_send() {
    let Some(m) = machine() else { return };
    let home = m.take("@home");
    let log = m.take("@log");
    // A parent of another subvolume, or itself.
    for parent in [log.name, home.name] {
        let (sent, framed) = m.send(home.name, Some(parent));
        assert!(matches!(sent, Err(CopyError::BadParent(_))), "{sent:?}");
        assert!(framed.is_empty(), "nothing is sent");
    }
    // A parent that is not there: refused, and the reader told so with an ABORT.
    let gone = SnapshotName::parse("@home.2001-01-01T000000.000000Z").unwrap();
    let (sent, framed) = m.send(home.name, Some(gone));
    assert!(
        matches!(sent, Err(CopyError::NoSuchSnapshot(n)) if n == gone),
        "{sent:?}"
    );
    let e = FrameReader::new(&framed[..])
        .read_to_end(&mut Vec::new())
        .unwrap_err();
    assert!(e.to_string().contains("aborted"), "{e}");
    assert!(e.to_string().contains(&gone.to_string()), "{e}");
}

#[test]
fn loop_sealed_send_stops_when_the_reader_goes_or_stalls() {
    let Some(m) = machine_with(Duration::from_secs(2), CopiesConfig::default()) else {
        return;
    };
    m.write("@home/big", &megabytes(8, 5));
    let s = m.take("@home");
    // The reader reads a little and goes: the send ends at once, no thread left stuck.
    let (r, w) = pipe();
    let reader = std::thread::spawn(move || {
        let mut f = fs::File::from(r);
        let mut buf = vec![0u8; 4096];
        f.read_exact(&mut buf).unwrap();
    });
    let started = Instant::now();
    let sent = m.copies.send_sealed(s.name, None, w);
    reader.join().unwrap();
    let Err(e) = sent else {
        panic!("sent to nobody")
    };
    assert!(matches!(e, CopyError::SealedFailed { .. }), "{e:?}");
    assert!(e.to_string().contains("reader is gone"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(30));

    // The reader holds the pipe open and reads nothing: the stall ends the act. Meanwhile
    // CopyProgress shows it, with no target (the stem sees only a pipe).
    let (r, w) = pipe();
    let started = Instant::now();
    let (sent, seen) = std::thread::scope(|scope| {
        // Looked at until it shows bytes moved (a loaded machine may take a while to start
        // the send) or the act ends; the last look that saw it in flight is kept.
        let look = scope.spawn(|| {
            let mut seen = Vec::new();
            let until = Instant::now() + Duration::from_secs(30);
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
                let now = m.copies.progress();
                if now.is_empty() && !seen.is_empty() {
                    break;
                }
                if !now.is_empty() {
                    let moved = now.iter().any(|p| p.bytes > 0);
                    seen = now;
                    if moved {
                        break;
                    }
                }
            }
            seen
        });
        (m.copies.send_sealed(s.name, None, w), look.join().unwrap())
    });
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        (seen[0].target.as_ref(), seen[0].name, seen[0].kind),
        (None, s.name, "send-sealed")
    );
    assert!(seen[0].bytes > 0, "{seen:?}");
    let e = sent.unwrap_err();
    assert!(
        e.to_string().contains("nothing moved through the pipe"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    drop(r);
    assert!(m.copies.progress().is_empty(), "nothing in flight after");
}

#[test]
fn loop_sealed_chain_received_into_a_fresh_store() {
    let Some(m) = machine() else { return };
    let (snaps, streams) = chain_of_three(&m);
    let last = &snaps[2];

    // A new disk: the layout made, nothing else.
    let Some(fresh) = machine() else { return };
    let refs: Vec<&[u8]> = streams.iter().map(Vec::as_slice).collect();
    let total: usize = streams.iter().map(Vec::len).sum();
    let (fetched, bytes) = fresh
        .receive(last.name, last.uuid, framed_chain(&refs, last.uuid))
        .unwrap();
    assert_eq!(bytes, total as u64);
    assert_eq!(fetched.name, last.name);
    assert!(fetched.readonly);
    assert_eq!(fetched.origin, Origin::NameOnly);
    assert_eq!(
        fetched.received_uuid,
        Some(last.uuid),
        "its identity, for a copy of it elsewhere"
    );
    assert_eq!(last.received_uuid, None, "a snapshot taken here has none");
    let listed = fresh.worker.run_blocking(|e| e.list()).unwrap().unwrap();
    assert_eq!(
        listed.iter().map(|s| s.name).collect::<Vec<_>>(),
        vec![last.name],
        "only the snapshot asked for is kept, not the chain's others"
    );
    let got = fresh.store().join(last.name.to_string());
    assert_eq!(fs::read_to_string(got.join("letter")).unwrap(), "tuesday");
    assert!(
        !got.join("big").exists(),
        "the last stream's deletion applied"
    );
    assert!(fresh.incoming().is_empty(), "{:?}", fresh.incoming());
    let shown = fresh
        .fs
        .show(&format!("{SNAPSHOTS_SUBVOLUME}/{}", last.name))
        .unwrap();
    assert_eq!(shown["Received UUID"], last.uuid.to_string(), "{shown:?}");
    assert!(shown["Flags"].contains("readonly"), "{shown:?}");

    // Again: the store holds it; nothing received.
    let before = fresh.subvolumes();
    let e = fresh
        .receive(last.name, last.uuid, framed_chain(&refs, last.uuid))
        .unwrap_err();
    assert!(matches!(e, CopyError::AlreadyHere(_)), "{e:?}");
    assert_eq!(fresh.subvolumes(), before);
}

#[test]
fn loop_sealed_receive_failures_leave_nothing_half_received() {
    let Some(m) = machine_with(Duration::from_secs(3), CopiesConfig::default()) else {
        return;
    };
    let (snaps, streams) = chain_of_three(&m);
    let (s2, s3) = (&snaps[1], &snaps[2]);
    // Make room: the store must not hold the name received.
    let name = s3.name;
    m.worker
        .run_blocking(move |e| e.delete(name))
        .unwrap()
        .unwrap();
    let full_two: Vec<&[u8]> = vec![&streams[0], &streams[1]];
    let chain: Vec<&[u8]> = streams.iter().map(Vec::as_slice).collect();
    let whole_chain: Vec<u8> = streams.concat();

    let cases: Vec<(&str, Vec<u8>, Uuid, &str)> = vec![
        (
            "an ABORT after two streams",
            {
                let mut out = Vec::new();
                let mut w = FrameWriter::new(&mut out);
                w.write_all(&streams[0]).unwrap();
                w.write_all(&streams[1]).unwrap();
                w.abort("part 7 of the copy is not what its manifest says");
                out
            },
            s3.uuid,
            "not what its manifest says",
        ),
        (
            "an EOF without END, the chain whole",
            {
                let mut out = Vec::new();
                FrameWriter::new(&mut out).write_all(&whole_chain).unwrap();
                out
            },
            s3.uuid,
            "without an end frame",
        ),
        (
            "an EOF mid-stream",
            {
                let mut out = Vec::new();
                FrameWriter::new(&mut out)
                    .write_all(&whole_chain[..whole_chain.len() / 2])
                    .unwrap();
                out
            },
            s3.uuid,
            "without an end frame",
        ),
        (
            "a trailer naming another snapshot than the one asked for",
            framed_chain(&chain, Uuid::nil()),
            s3.uuid,
            "another snapshot",
        ),
        (
            "the wrong received UUID",
            framed_chain(&chain, s2.uuid),
            s2.uuid,
            "not the snapshot named",
        ),
        (
            "a chain that ends at another snapshot than the one named",
            framed_chain(&full_two, s3.uuid),
            s3.uuid,
            "not the snapshot named",
        ),
        (
            "a trailer that miscounts",
            {
                let mut w = FrameWriter::new(Vec::new());
                w.write_all(&whole_chain).unwrap();
                w.end(&serde_json::json!({"uuid": s3.uuid.to_string(), "bytes": 7}))
                    .unwrap()
            },
            s3.uuid,
            "counts 7 bytes",
        ),
        (
            "garbage, framed",
            framed_chain(&[&megabytes(1, 9)], s3.uuid),
            s3.uuid,
            "btrfs receive",
        ),
        (
            "a garbage tail after a good stream",
            framed_chain(&[&streams[0], &megabytes(1, 9)], s3.uuid),
            s3.uuid,
            "btrfs receive",
        ),
        (
            "not framed at all",
            whole_chain.clone(),
            s3.uuid,
            "unknown type",
        ),
        (
            "data after the END",
            {
                let mut framed = framed_chain(&chain, s3.uuid);
                let mut out = Vec::new();
                FrameWriter::new(&mut out).write_all(b"more").unwrap();
                framed.extend_from_slice(&out);
                framed
            },
            s3.uuid,
            "after its end frame",
        ),
    ];
    for (what, framed, uuid, words) in cases {
        let before = m.subvolumes();
        let e = m.receive(name, uuid, framed).unwrap_err();
        assert!(matches!(e, CopyError::SealedFailed { .. }), "{what}: {e:?}");
        assert!(e.to_string().contains(words), "{what}: {e}");
        assert!(m.incoming().is_empty(), "{what}: {:?}", m.incoming());
        assert_eq!(m.subvolumes(), before, "{what}: the store is as it was");
    }

    // The writer killed mid-way: a real process, SIGKILLed while the stem reads.
    let before = m.subvolumes();
    let partial = {
        let mut out = Vec::new();
        FrameWriter::new(&mut out).write_all(&whole_chain).unwrap();
        out.truncate(out.len() * 2 / 3);
        out
    };
    let file = tempfile::NamedTempFile::new().unwrap();
    fs::write(file.path(), &partial).unwrap();
    let (r, w) = pipe();
    // `exec`: once `cat` has written, the writer holding the pipe is this one process.
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg("cat \"$0\"; exec sleep 600")
        .arg(file.path())
        .stdout(Stdio::from(w))
        .spawn()
        .unwrap();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let _ = writer.kill();
        let _ = writer.wait();
    });
    let started = Instant::now();
    let e = m.copies.receive_sealed(name, s3.uuid, r).unwrap_err();
    killer.join().unwrap();
    assert!(matches!(e, CopyError::SealedFailed { .. }), "{e:?}");
    assert!(
        e.to_string().contains("without an end frame") || e.to_string().contains("ended inside"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(m.incoming().is_empty(), "{:?}", m.incoming());
    assert_eq!(m.subvolumes(), before);

    // A writer that stops writing but keeps the pipe: the stall ends it.
    let (r, w) = pipe();
    let started = Instant::now();
    let mut w = fs::File::from(w);
    // Less than a pipe holds: written at once, with nobody reading yet.
    w.write_all(&partial[..60_000]).unwrap();
    let e = m.copies.receive_sealed(name, s3.uuid, r).unwrap_err();
    assert!(
        e.to_string().contains("nothing moved through the pipe"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    drop(w);
    assert!(m.incoming().is_empty(), "{:?}", m.incoming());
    assert_eq!(m.subvolumes(), before);

    // And after all that, the whole chain is received.
    let (got, _) = m
        .receive(name, s3.uuid, framed_chain(&chain, s3.uuid))
        .unwrap();
    assert_eq!(got.name, name);
    assert!(m.incoming().is_empty());
}

#[test]
fn loop_sealed_pipes_that_are_not_pipes_are_refused() {
    let Some(m) = machine() else { return };
    let s = m.take("@home");
    let file = tempfile::tempfile().unwrap();
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (r, w) = pipe();
    let before = m.subvolumes();
    for (what, fd) in [
        ("a regular file", OwnedFd::from(file.try_clone().unwrap())),
        ("a socket", OwnedFd::from(a.try_clone().unwrap())),
        ("a pipe's read end", r.try_clone().unwrap()),
    ] {
        let e = m.copies.send_sealed(s.name, None, fd).unwrap_err();
        assert!(
            matches!(e, CopyError::BadPipe(_)),
            "send into {what}: {e:?}"
        );
    }
    for (what, fd) in [
        ("a regular file", OwnedFd::from(file)),
        ("a socket", OwnedFd::from(a)),
        ("a pipe's write end", w),
    ] {
        let e = m.copies.receive_sealed(s.name, s.uuid, fd).unwrap_err();
        assert!(
            matches!(e, CopyError::BadPipe(_)),
            "receive from {what}: {e:?}"
        );
        assert!(e.to_string().contains("pipe"), "{e}");
    }
    assert_eq!(m.subvolumes(), before);
    assert!(m.incoming().is_empty());
}

#[test]
fn loop_sealed_targets_are_the_copiers_not_the_stems() {
    let config = CopiesConfig::parse(
        br#"{"targets": {"cloud": {"place": "s3://127.0.0.1:3900/bucket",
                "seal": {"credentials": "/var/lib/tacid-copier/cloud.credentials", "http": true}},
            "usb": {"place": "/mnt/usb/tacid", "seal": {}}}}"#,
    )
    .unwrap();
    let Some(m) = machine_with(stem::copies::DEFAULT_STALL, config) else {
        return;
    };
    let s = m.take("@home");
    for target in ["cloud", "usb"] {
        let words = format!("target {target} is sealed: its copies are kept by the copier");
        let results = [
            m.copies.copy_to(s.name, target).map(|_| ()).unwrap_err(),
            m.copies.copies_on(target).map(|_| ()).unwrap_err(),
            m.copies.delete_copy(target, s.name).unwrap_err(),
            m.copies.fetch_from(target, s.name).map(|_| ()).unwrap_err(),
        ];
        for e in results {
            assert!(matches!(e, CopyError::Sealed(_)), "{e:?}");
            assert!(e.to_string().contains(&words), "{e}");
        }
    }
}

#[test]
fn loop_sealed_one_receive_into_the_store_at_a_time() {
    let Some(m) = machine_with(Duration::from_secs(3), CopiesConfig::default()) else {
        return;
    };
    let s = m.take("@home");
    let other = SnapshotName::parse("@home.2001-01-01T000000.000000Z").unwrap();
    // A receive whose writer says nothing holds `.incoming` until its stall ends it.
    let (r, w) = pipe();
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| m.copies.receive_sealed(other, s.uuid, r));
        std::thread::sleep(Duration::from_millis(700));
        let (r2, w2) = pipe();
        let second = m.copies.receive_sealed(s.name, s.uuid, r2);
        drop(w2);
        (first.join().unwrap(), second)
    });
    drop(w);
    let second = second.unwrap_err();
    assert!(matches!(second, CopyError::FetchBusy), "{second:?}");
    assert!(second.to_string().contains("try again"), "{second}");
    let first = first.unwrap_err();
    assert!(
        first.to_string().contains("nothing moved through the pipe"),
        "{first}"
    );
    assert!(m.incoming().is_empty());
}

/// A snapshot of @home holding `mib` MiB, sent sealed, then deleted from the store (so it
/// can be received again): the snapshot and its stream, framed whole with its trailer.
fn sent_and_deleted(m: &Machine, mib: usize) -> (Snapshot, Vec<u8>) {
    m.write("@home/big", &megabytes(mib, 5));
    let s = m.take("@home");
    let (sent, framed) = m.send(s.name, None);
    sent.unwrap();
    let name = s.name;
    m.worker
        .run_blocking(move |e| e.delete(name))
        .unwrap()
        .unwrap();
    (s, framed)
}

#[test]
fn loop_sealed_receive_is_bounded_by_the_room_above_the_hard_floor() {
    let Some(m) = machine_with(Duration::from_secs(5), CopiesConfig::default()) else {
        return;
    };
    let (s, framed) = sent_and_deleted(&m, 24);
    let free = m
        .worker
        .run_blocking(|e| e.free_space())
        .unwrap()
        .unwrap()
        .free_bytes;
    let before = m.subvolumes();

    // Room for 4 MiB above the floor: the 24 MiB stream is stopped, nothing kept.
    let floor = free - (4 << 20);
    m.worker
        .run_blocking(move |e| e.set_hard_floor(floor))
        .unwrap();
    let started = Instant::now();
    let e = m.receive(s.name, s.uuid, framed.clone()).unwrap_err();
    assert!(matches!(e, CopyError::SealedFailed { .. }), "{e:?}");
    let words = e.to_string();
    assert!(words.contains("hard floor"), "{words}");
    assert!(words.contains("Free space in the store"), "{words}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(m.incoming().is_empty(), "{:?}", m.incoming());
    assert_eq!(m.subvolumes(), before, "nothing kept");
    assert!(m.copies.progress().is_empty());

    // Below the floor already: refused before anything is received.
    let floor = free + (1 << 30);
    m.worker
        .run_blocking(move |e| e.set_hard_floor(floor))
        .unwrap();
    let e = m.receive(s.name, s.uuid, framed.clone()).unwrap_err();
    assert!(
        matches!(
            e,
            CopyError::Engine(stem::EngineError::BelowHardFloor { .. })
        ),
        "{e:?}"
    );
    assert!(m.incoming().is_empty(), "{:?}", m.incoming());
    assert_eq!(m.subvolumes(), before);

    // Room enough: the same stream is received whole (the room, not the stream, stopped it).
    m.worker
        .run_blocking(|e| e.set_hard_floor(8 << 20))
        .unwrap();
    let (got, bytes) = m.receive(s.name, s.uuid, framed).unwrap();
    assert_eq!(got.name, s.name);
    assert!(bytes > 24 << 20, "{bytes}");
    assert_eq!(
        fs::read(m.store().join(s.name.to_string()).join("big")).unwrap(),
        megabytes(24, 5)
    );
    assert!(m.incoming().is_empty());
}

#[test]
fn loop_sealed_receive_that_stalls_or_trickles_is_ended_in_time() {
    let stall = Duration::from_secs(2);
    let deadline = Duration::from_secs(4);
    let Some(m) = machine_bounded(stall, deadline, "btrfs".as_ref(), CopiesConfig::default())
    else {
        return;
    };
    let (s, framed) = sent_and_deleted(&m, 3);
    let before = m.subvolumes();

    // A copier that sends a part and then nothing, its pipe held open: the idle bound.
    let (r, w) = pipe();
    let mut w = fs::File::from(w);
    // Less than a pipe holds: written at once, with nobody reading yet.
    w.write_all(&framed[..40_000]).unwrap();
    let started = Instant::now();
    let e = m.copies.receive_sealed(s.name, s.uuid, r).unwrap_err();
    let took = started.elapsed();
    drop(w);
    assert!(matches!(e, CopyError::SealedFailed { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("nothing moved through the pipe for 2 s"),
        "{e}"
    );
    assert!(took >= stall && took < stall * 4, "{took:?}");
    assert!(m.incoming().is_empty(), "{:?}", m.incoming());
    assert_eq!(m.subvolumes(), before);

    // A copier that never stalls but never ends: 4 KiB every 50 ms, the real stream
    // (12 s of it), ended by the deadline.
    let (r, w) = pipe();
    let trickle = framed.clone();
    let writer = std::thread::spawn(move || {
        let mut w = fs::File::from(w);
        for chunk in trickle.chunks(4096) {
            if w.write_all(chunk).is_err() {
                return; // the stem stopped reading: that is the point
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let started = Instant::now();
    let e = m.copies.receive_sealed(s.name, s.uuid, r).unwrap_err();
    let took = started.elapsed();
    writer.join().unwrap();
    assert!(matches!(e, CopyError::SealedFailed { .. }), "{e:?}");
    assert!(e.to_string().contains("still going after 4 s"), "{e}");
    assert!(took >= deadline && took < deadline * 3, "{took:?}");
    assert!(m.incoming().is_empty(), "{:?}", m.incoming());
    assert_eq!(m.subvolumes(), before);
    assert!(m.copies.progress().is_empty());

    // Within its bounds, the same stream is received.
    let (got, _) = m.receive(s.name, s.uuid, framed).unwrap();
    assert_eq!(got.name, s.name);
    assert!(m.incoming().is_empty());
}

#[test]
fn loop_sealed_receive_whose_btrfs_receive_stops_taking_the_stream_is_ended() {
    // A `btrfs` that never reads its input (a receive stuck in the kernel, say).
    let dir = tempfile::tempdir().unwrap();
    let stuck = dir.path().join("btrfs");
    fs::write(&stuck, "#!/bin/sh\nexec sleep 600\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(&stuck, fs::Permissions::from_mode(0o755)).unwrap();
    let stall = Duration::from_secs(2);
    let Some(m) = machine_with(stall, CopiesConfig::default()) else {
        return;
    };
    let (s, framed) = sent_and_deleted(&m, 3);
    let Some(stuck_m) = machine_bounded(
        stall,
        DEFAULT_SEALED_DEADLINE,
        &stuck,
        CopiesConfig::default(),
    ) else {
        return;
    };
    let started = Instant::now();
    let e = stuck_m.receive(s.name, s.uuid, framed).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, CopyError::SealedFailed { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("btrfs receive stopped taking the stream"),
        "{e}"
    );
    assert!(took < stall * 4, "{took:?}");
    assert!(stuck_m.incoming().is_empty(), "{:?}", stuck_m.incoming());
    assert!(stuck_m.copies.progress().is_empty());
}

/// `BTRFS_IOC_SET_RECEIVED_SUBVOL`'s argument (kernel uapi `btrfs.h`).
#[repr(C)]
struct ReceivedSubvolArgs {
    uuid: [u8; 16],
    stransid: u64,
    rtransid: u64,
    stime: [u64; 2],
    rtime: [u64; 2],
    flags: u64,
    reserved: [u64; 16],
}

/// As `uid`: a subvolume at `path` that claims to be a received copy of `claimed`, read-only,
/// as any user may make one where they may write (a subvolume's owner may set its received
/// UUID; a snapshot's UUID is readable by whoever may open it). Returns whether it worked.
fn plant_as(uid: u32, path: &Path, claimed: Uuid) -> bool {
    use std::os::unix::process::CommandExt;
    let made = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
        ])
        .args(["btrfs", "-q", "subvolume", "create"])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(made, "a user made a subvolume at {}", path.display());
    // What the planted tree needs for the chain's streams to apply to it: their parent's files.
    for (file, bytes) in [("planted", &b"by a user"[..]), ("big", b"any")] {
        fs::write(path.join(file), bytes).unwrap();
        std::os::unix::fs::chown(path.join(file), Some(uid), Some(uid)).unwrap();
    }
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut args = ReceivedSubvolArgs {
        uuid: *claimed.as_bytes(),
        stransid: 999,
        rtransid: 0,
        stime: [0; 2],
        rtime: [0; 2],
        flags: 0,
        reserved: [0; 16],
    };
    // _IOWR(0x94, 37, struct btrfs_ioctl_received_subvol_args)
    let request = (3u64 << 30)
        | ((std::mem::size_of::<ReceivedSubvolArgs>() as u64) << 16)
        | (0x94 << 8)
        | 37;
    let args_ptr = std::ptr::addr_of_mut!(args) as usize;
    let mut child = Command::new("true");
    // SAFETY: between fork and exec only raw syscalls, on memory the parent made before forking.
    #[allow(unsafe_code)]
    unsafe {
        child.pre_exec(move || {
            if libc::setresgid(uid, uid, uid) != 0 || libc::setresuid(uid, uid, uid) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::open(c_path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 || libc::ioctl(fd, request as _, args_ptr as *mut libc::c_void) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let set = child.status().map(|s| s.success()).unwrap_or(false);
    let readonly = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
        ])
        .args(["btrfs", "property", "set"])
        .arg(path)
        .args(["ro", "true"])
        .status()
        .unwrap()
        .success();
    set && readonly
}

#[test]
fn loop_sealed_receive_never_takes_a_parent_a_user_planted() {
    let Some(m) = machine() else { return };
    let (snaps, streams) = chain_of_three(&m);
    let (s1, last) = (&snaps[0], &snaps[2]);
    let Some(fresh) = machine() else { return };
    // Where every user may write on the same filesystem (on a machine: /tmp on @root).
    let tmp = fresh.fs.top().join("tmp");
    fs::create_dir(&tmp).unwrap();
    fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let nobody = 65534;
    assert!(
        plant_as(nobody, &tmp.join("evil"), s1.uuid),
        "nobody planted a read-only subvolume claiming to be {}",
        s1.name
    );
    let shown = fresh.fs.show("tmp/evil").unwrap();
    assert_eq!(shown["Received UUID"], s1.uuid.to_string(), "{shown:?}");

    let refs: Vec<&[u8]> = streams.iter().map(Vec::as_slice).collect();
    let received = fresh.receive(last.name, last.uuid, framed_chain(&refs, last.uuid));
    // btrfs receive looks a parent up by received UUID across the whole filesystem: the
    // planted one must never be it. Refused, or received on the chain's own full copy.
    match received {
        Ok((fetched, _)) => {
            let got = fresh.store().join(fetched.name.to_string());
            assert!(
                !got.join("planted").exists(),
                "the user's subvolume was the parent"
            );
            assert_eq!(fs::read_to_string(got.join("letter")).unwrap(), "tuesday");
            let owner = std::os::unix::fs::MetadataExt::uid(&fs::metadata(&got).unwrap());
            assert_eq!(
                owner, 0,
                "the received root is the snapshot's, not the user's"
            );
        }
        Err(e) => {
            eprintln!("refused: {e}");
            let listed = fresh.worker.run_blocking(|e| e.list()).unwrap().unwrap();
            assert!(listed.is_empty(), "nothing kept: {listed:?}");
            assert!(
                e.to_string().contains("outside the store"),
                "the error says why and what to do: {e}"
            );
        }
    }
    assert!(fresh.incoming().is_empty(), "{:?}", fresh.incoming());
}
