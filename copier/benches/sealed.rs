//! Sealed copies: tacid's seal against its floor and against restic, same data, same run,
//! interleaved.
//!
//! `cargo bench -p copier --bench sealed` (root; needs btrfs-progs, zstd, age and restic;
//! rclone for the raw row into Garage). The copies bench's tree: 100k files in `@home`, a
//! snapshot of it, 1000 of its files changed, a second snapshot. Each round, for each
//! contender in a rotating order: a full copy of the first snapshot, then an incremental
//! copy of the second against the first; then what each wrote is deleted for the next
//! round. The targets: a directory on a second loop filesystem, ext4 (a sealed target is
//! any filesystem), and a real Garage. Contenders:
//! - raw: `btrfs send [-p S0] S1 | zstd | age -r RECIPIENT > FILE`, then `sync -f` (the
//!   floor: the same compression and encryption, nothing checked, nothing read back); and
//!   the same into Garage with `rclone rcat`;
//! - tacid: the code behind a sealed copy, in process without the bus: the stem's send
//!   (BTRFS_IOC_SEND, framed) into a pipe, and on another thread `seal::seal` reading the
//!   frames into the store (parts and manifest durable, then every object read back);
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
use std::time::{Duration, Instant, SystemTime};

use layout::{SnapshotName, SubvolumeName, SNAPSHOTS_SUBVOLUME};

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

/// Bytes of the files under `path` (their lengths, `du -sb`).
fn du(path: &Path) -> u64 {
    run("du", &["-sb", s(path)])
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("du's number")
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
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn finish(what: &str, child: Child) {
    let out = child.wait_with_output().expect(what);
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
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
    finish("btrfs send", send);
    finish("zstd", zstd);
    finish("age", age);
    if let Some(sink) = sink {
        finish("the sink", sink);
    }
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Contender {
    RawDir,
    Restic,
}

const LABELS: [(Contender, &str); 2] = [
    (Contender::RawDir, "raw send|zstd|age > file, sync (floor)"),
    (Contender::Restic, "restic backup"),
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

    // One age identity for every contender that encrypts to it.
    let identity_file = source.scratch().join("identity.txt");
    run("age-keygen", &["-o", s(&identity_file)]);
    let recipient = run("age-keygen", &["-y", s(&identity_file)])
        .trim()
        .to_owned();

    let target_top = target.top();
    let raw_dir = target_top.join("raw");
    std::fs::create_dir(&raw_dir).expect("raw's directory");
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

    let mut columns: Vec<(Contender, Column)> = LABELS
        .iter()
        .map(|(c, _)| (*c, Column::default()))
        .collect();
    let settle = || run("sync", &["-f", s(&target_top)]);
    for round in 0..rounds {
        let n = columns.len();
        let order: Vec<usize> = (0..n).map(|k| (k + round) % n).collect();
        restic.init();
        for incremental in [false, true] {
            for &which in &order {
                let (contender, column) = &mut columns[which];
                settle();
                let (took, stored) = match contender {
                    Contender::RawDir => {
                        let file = raw_dir.join(if incremental { "s1" } else { "s0" });
                        let parent = incremental.then_some(s0_path.as_path());
                        let snapshot = if incremental { &s1_path } else { &s0_path };
                        let took = raw_to_file(parent, snapshot, &recipient, &file);
                        (took, du(&file))
                    }
                    Contender::Restic => {
                        let before = if incremental {
                            du(&restic.repository)
                        } else {
                            0
                        };
                        let snapshot = if incremental { &s1_path } else { &s0_path };
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
        restic.remove();
        settle();
        eprintln!("bench: round {} of {rounds} done", round + 1);
    }

    let column = |c: Contender| &columns.iter().find(|(k, _)| *k == c).expect("column").1;
    let floor = column(Contender::RawDir);
    let (floor_full, floor_incremental) = (
        median(floor.full.clone()),
        median(floor.incremental.clone()),
    );
    let mib = |bytes: u64, d: Duration| bytes as f64 / (1 << 20) as f64 / d.as_secs_f64();
    println!(
        "\nsealed copies: {files} files, {changed} changed; medians of {rounds} interleaved rounds"
    );
    println!(
        "streams: full {:.1} MiB, incremental {:.2} MiB; targets: a directory on ext4 (loop)",
        full_stream as f64 / (1 << 20) as f64,
        incremental_stream as f64 / (1 << 20) as f64
    );
    println!(
        "{:<40} {:>12} {:>8} {:>8} {:>12}   {:>12} {:>8} {:>12}   {:<10}",
        "",
        "full",
        "× raw",
        "MiB/s",
        "stored",
        "incremental",
        "× raw",
        "stored",
        "incremental min–max"
    );
    for (contender, label) in LABELS {
        let c = column(contender);
        let (full, incremental) = (median(c.full.clone()), median(c.incremental.clone()));
        println!(
            "{label:<40} {} {} {:>8.1} {}   {} {} {}   {}",
            ms(full),
            ratio(full, floor_full),
            mib(full_stream, full),
            size(c.full_bytes),
            ms(incremental),
            ratio(incremental, floor_incremental),
            size(c.incremental_bytes),
            spread(&c.incremental)
        );
    }
    println!(
        "(stored: the bytes each wrote, du -sb; restic's incremental: what its repository grew by)"
    );
}
