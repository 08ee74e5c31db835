//! Sealed copies: tacid's seal against its floor and against restic, same data, same run,
//! interleaved.
//!
//! `cargo bench -p copier --bench sealed` (root; needs btrfs-progs, zstd, age and restic;
//! for the Garage rows `TACID_GARAGE=$(source scripts/deps.sh; ensure_garage)`, and rclone
//! for the raw one). The copies bench's tree: 100k files in `@home`, a
//! snapshot of it, 1000 of its files changed, a second snapshot. Each round, for each
//! contender in a rotating order: a full copy of the first snapshot, then an incremental
//! copy of the second against the first; then what each wrote is deleted for the next
//! round. The targets: a directory on a second loop filesystem, ext4 (a sealed target is
//! any filesystem), and a real Garage. Contenders:
//! - raw: `btrfs send [-p S0] S1 | zstd | age -r RECIPIENT > FILE`, then `sync -f` (the
//!   floor: the same compression and encryption, nothing checked, nothing read back); and
//!   the same into Garage with `rclone rcat`;
//! - tacid: the code behind a sealed copy, in process without the bus: the stem's
//!   `send_sealed` (BTRFS_IOC_SEND, framed) into a pipe on one thread, and `seal::seal`
//!   reading the frames on another into the store (parts and manifest durable, then every
//!   object read back);
//! - restic: `restic backup` of the same tree (the snapshot bind-mounted at one path, as a
//!   person backs up /home) into a repository in a directory on the same ext4, then the
//!   1000-file change backed up again, then `sync -f`.
//!
//! Prints medians, bytes stored and ratios against raw. Goals: ≤ 1.2× the raw pipeline's
//! time; an incremental's bytes stored ≤ restic's for the same change. Printed as met or
//! not, never asserted: this is a measurement, not a test. TACID_BENCH_QUICK=1: 10k files,
//! 100 changed, 3 rounds. TACID_BENCH_ROUNDS=N.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime};

use layout::{SnapshotName, SubvolumeName, SNAPSHOTS_SUBVOLUME};
use seal::{CopyMeta, S3Credentials, SealKey, Store, StorePlace};
use stem::copies::{Copies, Programs};
use stem::worker::Worker;
use stem::Engine;
use stem_interface::pipe::FrameReader;
use uuid::Uuid;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn run(cmd: &str, args: &[&str]) -> String {
    run_with(Command::new(cmd).args(args))
}

fn run_with(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn ms(d: Duration) -> String {
    format!("{:9.1} ms", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, floor: Duration) -> String {
    format!("{:6.2}×", a.as_secs_f64() / floor.as_secs_f64())
}

fn size(bytes: u64) -> String {
    if bytes >= 10 << 20 {
        format!("{:8.1} MiB", bytes as f64 / (1 << 20) as f64)
    } else {
        format!("{:8.1} KiB", bytes as f64 / 1024.0)
    }
}

/// The fastest and slowest of the runs: how noisy this machine was.
fn spread(v: &[Duration]) -> String {
    let min = v.iter().min().copied().unwrap_or_default();
    let max = v.iter().max().copied().unwrap_or_default();
    format!(
        "{:.0}–{:.0} ms",
        min.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    )
}

/// Bytes of the regular files under `path` (their lengths, as `du -b` counts a file;
/// directories not counted: each contender makes its own shape of them).
fn du(path: &Path) -> u64 {
    let meta = std::fs::symlink_metadata(path).expect("stat what a contender wrote");
    if meta.is_dir() {
        std::fs::read_dir(path)
            .expect("read a directory a contender wrote")
            .map(|e| du(&e.expect("entry").path()))
            .sum()
    } else if meta.is_file() {
        meta.len()
    } else {
        0
    }
}

fn content(dir: usize, file: usize, generation: u32) -> Vec<u8> {
    let mut text = format!("d{dir:03}/f{file:04} generation {generation}\n").into_bytes();
    text.resize(512, b'.');
    text
}

/// An ext4 on a loop device (`mount -o loop`: detached again at unmount), in a temporary
/// directory: the sealed targets' filesystem, which is not Btrfs.
struct Ext4 {
    dir: tempfile::TempDir,
}

impl Ext4 {
    fn new(size_bytes: u64) -> Ext4 {
        let dir = tempfile::Builder::new()
            .prefix("tacid-bench-ext4-")
            .tempdir()
            .expect("temporary directory");
        let image = dir.path().join("disk.img");
        File::create(&image)
            .and_then(|f| f.set_len(size_bytes))
            .expect("sparse image");
        std::fs::create_dir(dir.path().join("top")).expect("mount point");
        run("mkfs.ext4", &["-q", "-F", s(&image)]);
        run(
            "mount",
            &["-o", "loop", s(&image), s(&dir.path().join("top"))],
        );
        Ext4 { dir }
    }

    fn top(&self) -> PathBuf {
        self.dir.path().join("top")
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.top()).status();
    }
}

/// Start `cmd` with `stdin` and a piped stdout; stderr kept for the failure message.
fn spawn(cmd: &mut Command, stdin: Stdio) -> Child {
    let child = cmd
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    // The command holds its stdin until dropped: let go of the pipe, so that the writer
    // sees EPIPE if this child dies.
    cmd.stdin(Stdio::null());
    child
}

/// Wait for every stage of a pipeline; a failure shows what every stage said.
fn finish(stages: Vec<(&str, Child)>) {
    let outs: Vec<_> = stages
        .into_iter()
        .map(|(what, child)| (what, child.wait_with_output().expect(what)))
        .collect();
    assert!(
        outs.iter().all(|(_, out)| out.status.success()),
        "the raw pipeline failed:\n{}",
        outs.iter()
            .map(|(what, out)| format!(
                "{what}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `btrfs send [-p parent] snapshot | zstd | age -r recipient [-o file] [| sink]`, timed
/// from the first spawn to the last exit.
fn raw_pipeline(
    parent: Option<&Path>,
    snapshot: &Path,
    recipient: &str,
    file: Option<&Path>,
    sink: Option<&mut Command>,
) -> Duration {
    let start = Instant::now();
    let mut send = Command::new("btrfs");
    send.args(["-q", "send"]);
    if let Some(p) = parent {
        send.arg("-p").arg(p);
    }
    let mut send = spawn(send.arg(snapshot), Stdio::null());
    let mut zstd = spawn(
        Command::new("zstd").args(["-q", "-c"]),
        Stdio::from(send.stdout.take().expect("pipe")),
    );
    let mut age = Command::new("age");
    age.args(["-r", recipient]);
    if let Some(file) = file {
        age.arg("-o").arg(file);
    }
    let mut age = spawn(&mut age, Stdio::from(zstd.stdout.take().expect("pipe")));
    let sink = sink.map(|sink| spawn(sink, Stdio::from(age.stdout.take().expect("pipe"))));
    let mut stages = vec![("btrfs send", send), ("zstd", zstd), ("age", age)];
    stages.extend(sink.map(|sink| ("the sink", sink)));
    finish(stages);
    start.elapsed()
}

/// The raw pipeline into `file`, then `sync -f`: known to be on disk, as a sealed copy is.
fn raw_to_file(parent: Option<&Path>, snapshot: &Path, recipient: &str, file: &Path) -> Duration {
    let start = Instant::now();
    raw_pipeline(parent, snapshot, recipient, Some(file), None);
    run("sync", &["-f", s(file)]);
    start.elapsed()
}

/// restic's repository and the fixed path its tree is bind-mounted at: restic finds the
/// parent snapshot by path, as it does for a person who backs up /home every day.
struct Restic {
    repository: PathBuf,
    password_file: PathBuf,
    cache: PathBuf,
    tree: PathBuf,
}

impl Restic {
    fn command(&self) -> Command {
        let mut cmd = Command::new("restic");
        cmd.env("RESTIC_REPOSITORY", &self.repository)
            .env("RESTIC_PASSWORD_FILE", &self.password_file)
            .env("RESTIC_CACHE_DIR", &self.cache)
            .arg("--quiet");
        cmd
    }

    fn init(&self) {
        run_with(self.command().arg("init"));
    }

    /// `restic backup` of `snapshot` (seen at the fixed path), then `sync -f`.
    fn backup(&self, snapshot: &Path) -> Duration {
        run("mount", &["--bind", "-o", "ro", s(snapshot), s(&self.tree)]);
        let start = Instant::now();
        run_with(self.command().arg("backup").arg(&self.tree));
        run("sync", &["-f", s(&self.repository)]);
        let took = start.elapsed();
        run("umount", &[s(&self.tree)]);
        took
    }

    fn remove(&self) {
        std::fs::remove_dir_all(&self.repository).expect("remove restic's repository");
        let _ = std::fs::remove_dir_all(&self.cache);
    }
}

#[derive(Default)]
struct Column {
    full: Vec<Duration>,
    incremental: Vec<Duration>,
    /// Bytes stored by the full copy, and added by the incremental one (last round).
    full_bytes: u64,
    incremental_bytes: u64,
}

/// The raw pipeline into Garage: `... | age | rclone rcat`, rclone configured from the
/// environment only (no configuration file read or written).
fn rclone_rcat(garage: &testbed::garage::Garage, key: &str, scratch: &Path) -> Command {
    let mut cmd = Command::new("rclone");
    cmd.env("RCLONE_CONFIG", scratch.join("rclone.conf"))
        .env("RCLONE_S3_PROVIDER", "Other")
        .env("RCLONE_S3_ENDPOINT", garage.endpoint())
        .env("RCLONE_S3_REGION", garage.region())
        .env("RCLONE_S3_ACCESS_KEY_ID", garage.key_id())
        .env("RCLONE_S3_SECRET_ACCESS_KEY", garage.secret())
        .env("RCLONE_S3_FORCE_PATH_STYLE", "true")
        // Plain http to 127.0.0.1; a CA bundle from the environment makes rclone's S3
        // client refuse to start.
        .env_remove("AWS_CA_BUNDLE")
        .args(["-q", "rcat"])
        .arg(format!(":s3:{}/{key}", garage.bucket()));
    cmd
}

/// The UUID of the subvolume at `path` (`btrfs subvolume show`).
fn uuid_of(path: &Path) -> Uuid {
    run("btrfs", &["subvolume", "show", s(path)])
        .lines()
        .find_map(|l| l.trim().strip_prefix("UUID:"))
        .and_then(|u| Uuid::parse_str(u.trim()).ok())
        .expect("the snapshot's UUID")
}

/// A sealed copy as the copier makes one, in process: the stem's `send_sealed` (the code
/// behind Stem1.SendSealed) writes the framed stream into a pipe on one thread; `seal::seal`
/// reads it through a [`FrameReader`] on this one and stores it. Timed from the pipe's
/// making to both ends' return; the copy is complete only with its END frame.
fn tacid_seal(
    copies: &Copies,
    store: &dyn Store,
    key: &SealKey,
    meta: CopyMeta,
    generation: u64,
) -> Duration {
    let start = Instant::now();
    let (from, into) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("the pipe");
    let parent = meta.parent.map(|(name, _)| name);
    let (sealed, sent, ended) = std::thread::scope(|scope| {
        let sender = scope.spawn(move || copies.send_sealed(meta.name, parent, into));
        let mut frames = FrameReader::new(File::from(from));
        let moved = AtomicU64::new(0);
        let sealed = seal::seal(store, key, meta, generation, &mut frames, &moved);
        let ended = frames.ended();
        // Closed before the join: a seal that failed ends the send (EPIPE).
        drop(frames);
        (sealed, sender.join().expect("the send thread"), ended)
    });
    let took = start.elapsed();
    let sent = sent.unwrap_or_else(|e| panic!("the stem's sealed send of {}: {e}", meta.name));
    let sealed =
        sealed.unwrap_or_else(|e| panic!("seal {} into {}: {e}", meta.name, store.describe()));
    assert!(
        ended,
        "the copy of {} was sealed without its END frame",
        meta.name
    );
    assert_eq!(
        (sent.uuid, sent.parent_uuid),
        (meta.uuid, meta.parent.map(|(_, u)| u)),
        "the stem sent another snapshot than the one sealed"
    );
    assert_eq!(
        sealed.depth,
        u32::from(meta.parent.is_some()),
        "sealed incrementally"
    );
    took
}

/// Bytes of the objects `store` lists (all of them: one contender's store per prefix).
fn listed(store: &dyn Store) -> u64 {
    store
        .list("")
        .expect("list the store")
        .iter()
        .map(|o| o.size)
        .sum()
}

fn empty_store(store: &dyn Store) {
    for o in store.list("").expect("list the store") {
        store.delete(&o.key).expect("delete an object");
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Contender {
    RawDir,
    RawGarage,
    TacidDir,
    TacidGarage,
    Restic,
}

const LABELS: [(Contender, &str); 5] = [
    (Contender::RawDir, "raw send|zstd|age > file, sync (floor)"),
    (Contender::TacidDir, "tacid (stem send → seal, directory)"),
    (Contender::Restic, "restic backup (directory)"),
    (Contender::RawGarage, "raw send|zstd|age | rclone (floor)"),
    (Contender::TacidGarage, "tacid (stem send → seal, Garage)"),
];

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` asks; this is a bench, not a test.
    }
    let quick = std::env::var_os("TACID_BENCH_QUICK").is_some();
    let (dirs, changed_every) = if quick { (10, 100) } else { (100, 100) };
    let files_per_dir = 1000;
    let rounds: usize = std::env::var("TACID_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick { 3 } else { 5 });
    for (tool, package) in [
        ("btrfs", "btrfs-progs"),
        ("zstd", "zstd"),
        ("age", "age"),
        ("age-keygen", "age"),
        ("restic", "restic"),
        ("mkfs.ext4", "e2fsprogs"),
    ] {
        if !testbed::installed(tool) {
            eprintln!(
                "\n*** SKIPPED: the sealed copies bench needs {tool} (apt-get install {package}) ***\n"
            );
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true: {tool} missing"
            );
            return;
        }
    }
    let Some(source) = testbed::LoopFs::with_layout(4 << 30).expect("source loop Btrfs") else {
        return;
    };
    let target = Ext4::new(4 << 30);
    let top = source.top();
    let home = top.join("@home");

    // The copies bench's tree: `dirs` × 1000 files of 512 bytes.
    let made = Instant::now();
    for d in 0..dirs {
        let sub = home.join(format!("d{d:03}"));
        std::fs::create_dir(&sub).expect("mkdir");
        for f in 0..files_per_dir {
            std::fs::write(sub.join(format!("f{f:04}")), content(d, f, 0)).expect("write");
        }
    }
    run("sync", &[]);
    let files = dirs * files_per_dir;
    let changed = files / changed_every;
    eprintln!(
        "bench: {files} files made in {:.1} s; {rounds} rounds",
        made.elapsed().as_secs_f64()
    );

    let subvolume = SubvolumeName::parse("@home").expect("layout name");
    let store = top.join(SNAPSHOTS_SUBVOLUME);
    let snap = |to: &Path| {
        run(
            "btrfs",
            &["-q", "subvolume", "snapshot", "-r", s(&home), s(to)],
        )
    };
    let s0 = SnapshotName::new(subvolume, SystemTime::now()).expect("name");
    snap(&store.join(s0.to_string()));
    for d in 0..dirs {
        for f in (0..files_per_dir).step_by(changed_every) {
            std::fs::write(home.join(format!("d{d:03}/f{f:04}")), content(d, f, 1))
                .expect("change");
        }
    }
    run("sync", &[]);
    let s1 = SnapshotName::new(subvolume, SystemTime::now()).expect("name");
    snap(&store.join(s1.to_string()));
    let s0_path = store.join(s0.to_string());
    let s1_path = store.join(s1.to_string());

    let uuid0 = uuid_of(&s0_path);
    let uuid1 = uuid_of(&s1_path);
    let full_meta = CopyMeta {
        name: s0,
        uuid: uuid0,
        parent: None,
    };
    let incremental_meta = CopyMeta {
        name: s1,
        uuid: uuid1,
        parent: Some((s0, uuid0)),
    };

    // One key for every contender that encrypts: the raw pipeline's recipient is the seal
    // key's own (its identity is an age identity).
    let key = SealKey::generate();
    let identity_file = source.scratch().join("identity.txt");
    std::fs::write(&identity_file, key.recovery_text()).expect("the identity file");
    let recipient = run("age-keygen", &["-y", s(&identity_file)])
        .trim()
        .to_owned();

    let target_top = target.top();
    let raw_dir = target_top.join("raw");
    std::fs::create_dir(&raw_dir).expect("raw's directory");
    let tacid_dir = target_top.join("tacid");
    let tacid_store =
        seal::DirStore::open(&tacid_dir).unwrap_or_else(|e| panic!("the directory store: {e}"));
    let password_file = source.scratch().join("restic.password");
    std::fs::write(&password_file, "bench\n").expect("restic's password");
    let tree = source.scratch().join("home");
    std::fs::create_dir(&tree).expect("restic's mount point");
    let restic = Restic {
        repository: target_top.join("restic"),
        password_file,
        cache: source.scratch().join("restic-cache"),
        tree,
    };

    // Garage, when this machine has it: tacid's store and raw's objects under their own
    // prefixes of one bucket (raw's listed and deleted through a store too).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let garage = testbed::garage::Garage::start().expect("Garage");
    let rclone = testbed::installed("rclone");
    let garage_stores = garage.as_ref().map(|g| {
        let place = |prefix: &str| StorePlace::S3 {
            host: g.host().to_owned(),
            port: Some(g.port()),
            bucket: g.bucket().to_owned(),
            prefix: prefix.to_owned(),
            region: g.region().to_owned(),
            credentials: S3Credentials {
                access_key_id: g.key_id().to_owned(),
                secret_access_key: g.secret().to_owned(),
            },
            allow_http: true,
            connect_timeout: None,
            request_timeout: None,
        };
        let open = |prefix: &str| {
            seal::open_store(&place(prefix), runtime.handle().clone())
                .unwrap_or_else(|e| panic!("the S3 store: {e}"))
        };
        (open("tacid"), open("raw"))
    });
    if garage.is_some() && !rclone {
        eprintln!(
            "\n*** the raw row into Garage is not run: no rclone (apt-get install rclone) ***\n"
        );
    }

    let engine = Engine::open(top).expect("open the top level");
    let worker = Worker::start(engine, || {}).expect("engine thread");
    let config = layout::copies::CopiesConfig::parse(br#"{ "targets": {} }"#).expect("config");
    let runtime_dir = source.scratch().join("stem-runtime");
    std::fs::create_dir(&runtime_dir).expect("runtime dir");
    let programs = Programs {
        runtime_dir,
        ..Programs::default()
    };
    let copies = Copies::new(config, programs, worker, top.to_owned());

    let stream_bytes = |parent: Option<&Path>, snapshot: &Path| -> u64 {
        let p = parent.map(|p| format!("-p {}", s(p))).unwrap_or_default();
        run(
            "sh",
            &["-c", &format!("btrfs -q send {p} {} | wc -c", s(snapshot))],
        )
        .trim()
        .parse()
        .expect("stream size")
    };
    let full_stream = stream_bytes(None, &s0_path);
    let incremental_stream = stream_bytes(Some(&s0_path), &s1_path);

    let running = |c: Contender| match c {
        Contender::RawGarage => garage.is_some() && rclone,
        Contender::TacidGarage => garage.is_some(),
        _ => true,
    };
    let mut columns: Vec<(Contender, Column)> = LABELS
        .iter()
        .filter(|(c, _)| running(*c))
        .map(|(c, _)| (*c, Column::default()))
        .collect();
    let settle = || run("sync", &["-f", s(&target_top)]);
    for round in 0..rounds {
        let n = columns.len();
        let order: Vec<usize> = (0..n).map(|k| (k + round) % n).collect();
        restic.init();
        for incremental in [false, true] {
            let (parent, snapshot, meta, generation, object) = if incremental {
                (Some(s0_path.as_path()), &s1_path, incremental_meta, 2, "s1")
            } else {
                (None, &s0_path, full_meta, 1, "s0")
            };
            for &which in &order {
                let (contender, column) = &mut columns[which];
                settle();
                let (took, stored) = match contender {
                    Contender::RawDir => {
                        let file = raw_dir.join(object);
                        let took = raw_to_file(parent, snapshot, &recipient, &file);
                        (took, du(&file))
                    }
                    Contender::RawGarage => {
                        let (g, (_, raw_store)) = (
                            garage.as_ref().expect("Garage"),
                            garage_stores.as_ref().expect("stores"),
                        );
                        let before = listed(raw_store.as_ref());
                        let mut rcat = rclone_rcat(g, &format!("raw/{object}"), source.scratch());
                        let took =
                            raw_pipeline(parent, snapshot, &recipient, None, Some(&mut rcat));
                        (took, listed(raw_store.as_ref()) - before)
                    }
                    Contender::TacidDir => {
                        let before = du(&tacid_dir);
                        let took = tacid_seal(&copies, &tacid_store, &key, meta, generation);
                        (took, du(&tacid_dir) - before)
                    }
                    Contender::TacidGarage => {
                        let (store, _) = garage_stores.as_ref().expect("stores");
                        let before = listed(store.as_ref());
                        let took = tacid_seal(&copies, store.as_ref(), &key, meta, generation);
                        (took, listed(store.as_ref()) - before)
                    }
                    Contender::Restic => {
                        let before = if incremental {
                            du(&restic.repository)
                        } else {
                            0
                        };
                        let took = restic.backup(snapshot);
                        (took, du(&restic.repository) - before)
                    }
                };
                if incremental {
                    column.incremental.push(took);
                    column.incremental_bytes = stored;
                } else {
                    column.full.push(took);
                    column.full_bytes = stored;
                }
            }
        }
        // Every contender starts the next round from nothing.
        for entry in std::fs::read_dir(&raw_dir).expect("raw's directory") {
            std::fs::remove_file(entry.expect("entry").path()).expect("remove raw's file");
        }
        empty_store(&tacid_store);
        if let Some((tacid, raw)) = &garage_stores {
            empty_store(tacid.as_ref());
            empty_store(raw.as_ref());
        }
        restic.remove();
        settle();
        eprintln!("bench: round {} of {rounds} done", round + 1);
    }

    let column = |c: Contender| columns.iter().find(|(k, _)| *k == c).map(|(_, col)| col);
    let medians = |c: &Column| (median(c.full.clone()), median(c.incremental.clone()));
    let mib = |bytes: u64, d: Duration| bytes as f64 / (1 << 20) as f64 / d.as_secs_f64();
    println!(
        "\nsealed copies: {files} files, {changed} changed; medians of {rounds} interleaved rounds"
    );
    println!(
        "streams: full {:.1} MiB, incremental {:.2} MiB; targets: a directory on ext4 (loop), and {}",
        full_stream as f64 / (1 << 20) as f64,
        incremental_stream as f64 / (1 << 20) as f64,
        if garage.is_some() { "a real Garage on 127.0.0.1" } else { "no Garage (not on this machine)" }
    );
    println!(
        "{:<40} {:>12} {:>8} {:>8} {:>12}   {:>12} {:>8} {:>12}   {:<22} {:<10}",
        "",
        "full",
        "× raw",
        "MiB/s",
        "stored",
        "incremental",
        "× raw",
        "stored",
        "full min–max",
        "incremental min–max"
    );
    for (contender, label) in LABELS {
        let Some(c) = column(contender) else {
            continue;
        };
        // Each row against the raw pipeline into the same kind of target.
        let floor = match contender {
            Contender::RawGarage | Contender::TacidGarage => column(Contender::RawGarage),
            _ => column(Contender::RawDir),
        };
        let (full, incremental) = medians(c);
        let against = |d: Duration, f: Option<Duration>| {
            f.map(|f| ratio(d, f))
                .unwrap_or_else(|| format!("{:>7}", "–"))
        };
        let floor = floor.map(medians);
        println!(
            "{label:<40} {} {} {:>8.1} {}   {} {} {}   {:<22} {}",
            ms(full),
            against(full, floor.map(|f| f.0)),
            mib(full_stream, full),
            size(c.full_bytes),
            ms(incremental),
            against(incremental, floor.map(|f| f.1)),
            size(c.incremental_bytes),
            spread(&c.full),
            spread(&c.incremental)
        );
    }
    println!(
        "(stored: the bytes of the files each wrote; in Garage the objects' sizes as listed; an \
         incremental's is what the target grew by)"
    );
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let within = |row: Contender, floor: Contender, what: &str| {
        if let (Some(r), Some(f)) = (column(row), column(floor)) {
            let ((rf, ri), (ff, fi)) = (medians(r), medians(f));
            let (full, incremental) = (
                rf.as_secs_f64() / ff.as_secs_f64(),
                ri.as_secs_f64() / fi.as_secs_f64(),
            );
            println!(
                "goal: {what} ≤ 1.2× raw's time: full {} ({full:.3}×), incremental {} ({incremental:.3}×)",
                met(full <= 1.2),
                met(incremental <= 1.2),
            );
        }
    };
    within(
        Contender::TacidDir,
        Contender::RawDir,
        "tacid into a directory",
    );
    within(
        Contender::TacidGarage,
        Contender::RawGarage,
        "tacid into Garage",
    );
    if let Some(restic) = column(Contender::Restic) {
        for (row, what) in [
            (Contender::TacidDir, "directory"),
            (Contender::TacidGarage, "Garage"),
        ] {
            if let Some(c) = column(row) {
                println!(
                    "goal: tacid's incremental stores ≤ restic's for the {changed}-file change ({what}): {} ({} against {}, {:.3}×)",
                    met(c.incremental_bytes <= restic.incremental_bytes),
                    size(c.incremental_bytes).trim(),
                    size(restic.incremental_bytes).trim(),
                    c.incremental_bytes as f64 / restic.incremental_bytes as f64
                );
            }
        }
    }
}
