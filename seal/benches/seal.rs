//! Sealed copies to a directory: the seal crate against the raw pipeline and restic, same
//! data, same run, interleaved.
//!
//! `cargo bench -p seal --bench seal` (root; needs btrfs-progs, zstd, age and restic). The
//! copies bench's tree: 100 × 1000 files of 512 bytes in a subvolume, a read-only snapshot,
//! 1000 files changed, a second snapshot. Each round, for each contender in a rotating
//! order, a full copy of the first snapshot and an incremental one of the second into an
//! empty directory on a second loop Btrfs, each made durable (synced) before its time stops:
//! - seal: `btrfs send [-p S0] S` read by `seal::seal` into a `DirStore` (zstd, age parts,
//!   the manifest, every object read back);
//! - raw: `btrfs send [-p S0] S | zstd -3 | age -r RECIPIENT > FILE` and `sync FILE`;
//! - restic: `restic backup` of the snapshot's files (bind-mounted at one path, so the
//!   second backup finds the first as its parent, as a NixOS user's nightly backup does),
//!   then `sync -f` on the repository.
//!
//! Prints medians of time and bytes stored, and seal's ratios to each. Goals: time ≤ 1.2×
//! raw; the incremental's bytes ≤ restic's. TACID_BENCH_QUICK=1: 10k files, 100 changed,
//! 2 rounds. TACID_BENCH_ROUNDS=N.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use layout::SnapshotName;
use uuid::Uuid;

const FULL: &str = "@home.2026-12-01T140200.123456Z";
const INCR: &str = "@home.2026-12-02T140200.123456Z";

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn content(dir: usize, file: usize, generation: u32) -> Vec<u8> {
    let mut text = format!("d{dir:03}/f{file:04} generation {generation}\n").into_bytes();
    text.resize(512, b'.');
    text
}

fn median<T: Ord + Copy>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

/// Bytes of every file below `dir`.
fn du(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                total += du(&entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

fn uuid_of(path: &Path) -> Uuid {
    let out = run("btrfs", &["subvolume", "show", s(path)]);
    let line = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("UUID:"))
        .unwrap();
    line["UUID:".len()..].trim().parse().unwrap()
}

fn send(snapshot: &Path, parent: Option<&Path>) -> std::process::Child {
    let mut cmd = Command::new("btrfs");
    cmd.args(["-q", "send"]);
    if let Some(p) = parent {
        cmd.arg("-p").arg(p);
    }
    cmd.arg(snapshot)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

#[derive(Default)]
struct Column {
    full: Vec<Duration>,
    incr: Vec<Duration>,
    full_bytes: Vec<u64>,
    incr_bytes: Vec<u64>,
}

struct Bench {
    s0: PathBuf,
    s1: PathBuf,
    uuid0: Uuid,
    uuid1: Uuid,
    target: PathBuf,
    key: seal::SealKey,
    scratch: PathBuf,
}

impl Bench {
    fn fresh_dir(&self, name: &str) -> PathBuf {
        let dir = self.target.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        std::fs::create_dir(&dir).unwrap();
        run("sync", &["-f", s(&self.target)]);
        dir
    }

    fn seal(&self, column: &mut Column) {
        let dir = self.fresh_dir("seal");
        let store = seal::DirStore::open(&dir).unwrap();
        let one = |snapshot: &Path, parent: Option<&Path>, meta: seal::CopyMeta| {
            let start = Instant::now();
            let mut child = send(snapshot, parent);
            let mut stdout = child.stdout.take().unwrap();
            let m =
                seal::seal(&store, &self.key, meta, 1, &mut stdout, &AtomicU64::new(0)).unwrap();
            assert!(child.wait().unwrap().success());
            (start.elapsed(), m.stored_bytes)
        };
        let full = SnapshotName::parse(FULL).unwrap();
        let (t, _) = one(
            &self.s0,
            None,
            seal::CopyMeta {
                name: full,
                uuid: self.uuid0,
                parent: None,
            },
        );
        let full_bytes = du(&dir);
        let (t2, _) = one(
            &self.s1,
            Some(&self.s0),
            seal::CopyMeta {
                name: SnapshotName::parse(INCR).unwrap(),
                uuid: self.uuid1,
                parent: Some((full, self.uuid0)),
            },
        );
        column.full.push(t);
        column.incr.push(t2);
        column.full_bytes.push(full_bytes);
        column.incr_bytes.push(du(&dir) - full_bytes);
    }

    fn raw(&self, column: &mut Column) {
        let dir = self.fresh_dir("raw");
        let recipient = run("age-keygen", &["-y", s(&self.scratch.join("age.key"))]);
        let one = |snapshot: &Path, parent: Option<&Path>, file: &Path| {
            let start = Instant::now();
            let parent = parent
                .map(|p| format!("-p '{}' ", s(p)))
                .unwrap_or_default();
            run(
                "sh",
                &[
                    "-c",
                    &format!(
                        "set -e; btrfs -q send {parent}'{}' | zstd -q -3 | age -r '{}' > '{}'; sync '{}'",
                        s(snapshot),
                        recipient.trim(),
                        s(file),
                        s(file)
                    ),
                ],
            );
            let t = start.elapsed();
            (t, std::fs::metadata(file).unwrap().len())
        };
        let (t, b) = one(&self.s0, None, &dir.join("full.age"));
        let (t2, b2) = one(&self.s1, Some(&self.s0), &dir.join("incr.age"));
        column.full.push(t);
        column.incr.push(t2);
        column.full_bytes.push(b);
        column.incr_bytes.push(b2);
    }

    fn restic(&self, column: &mut Column) {
        let dir = self.fresh_dir("restic");
        let repo = dir.join("repo");
        let tree = self.scratch.join("tree");
        std::fs::create_dir_all(&tree).unwrap();
        let restic = |args: &[&str]| {
            let out = Command::new("restic")
                .args(["-q", "-r", s(&repo)])
                .args(args)
                .env("RESTIC_PASSWORD", "tacid-bench")
                .env("RESTIC_CACHE_DIR", self.scratch.join("restic-cache"))
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "restic {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        restic(&["init"]);
        let base = du(&repo);
        let one = |snapshot: &Path| {
            run("mount", &["--bind", s(snapshot), s(&tree)]);
            let start = Instant::now();
            restic(&["backup", "--host", "bench", s(&tree)]);
            run("sync", &["-f", s(&repo)]);
            let t = start.elapsed();
            run("umount", &[s(&tree)]);
            t
        };
        let t = one(&self.s0);
        let after_full = du(&repo);
        let t2 = one(&self.s1);
        column.full.push(t);
        column.incr.push(t2);
        column.full_bytes.push(after_full - base);
        column.incr_bytes.push(du(&repo) - after_full);
    }
}

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
        .unwrap_or(if quick { 2 } else { 3 });
    for tool in ["btrfs", "zstd", "age", "age-keygen", "restic"] {
        if !testbed::installed(tool) {
            eprintln!("\n*** SKIPPED: the sealed-copies bench needs {tool} (apt-get install btrfs-progs zstd age restic) ***\n");
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true: {tool} missing"
            );
            return;
        }
    }
    let Some(source) = testbed::LoopFs::new(2 << 30).expect("source loop Btrfs") else {
        return;
    };
    let Some(target) = testbed::LoopFs::new(4 << 30).expect("target loop Btrfs") else {
        return;
    };
    let top = source.top();
    let home = top.join("@home");
    run("btrfs", &["-q", "subvolume", "create", s(&home)]);
    let made = Instant::now();
    for d in 0..dirs {
        let sub = home.join(format!("d{d:03}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..files_per_dir {
            std::fs::write(sub.join(format!("f{f:04}")), content(d, f, 0)).unwrap();
        }
    }
    let s0 = top.join("s0");
    run(
        "btrfs",
        &["-q", "subvolume", "snapshot", "-r", s(&home), s(&s0)],
    );
    for d in 0..dirs {
        for f in (0..files_per_dir).step_by(changed_every) {
            std::fs::write(home.join(format!("d{d:03}/f{f:04}")), content(d, f, 1)).unwrap();
        }
    }
    let s1 = top.join("s1");
    run(
        "btrfs",
        &["-q", "subvolume", "snapshot", "-r", s(&home), s(&s1)],
    );
    run("sync", &[]);
    let files = dirs * files_per_dir;
    let changed = files / changed_every;
    eprintln!(
        "bench: {files} files made in {:.1} s; {rounds} rounds",
        made.elapsed().as_secs_f64()
    );

    let scratch = source.scratch().join("bench");
    std::fs::create_dir(&scratch).unwrap();
    let key = seal::SealKey::generate();
    std::fs::write(
        scratch.join("age.key"),
        format!("{}\n", key.recovery_text()),
    )
    .unwrap();
    let bench = Bench {
        uuid0: uuid_of(&s0),
        uuid1: uuid_of(&s1),
        s0,
        s1,
        target: target.top().to_owned(),
        key,
        scratch,
    };
    let mut columns: [(&str, Column); 3] = [
        ("seal", Column::default()),
        ("raw", Column::default()),
        ("restic", Column::default()),
    ];
    for round in 0..rounds {
        for k in 0..3 {
            let i = (round + k) % 3;
            let (name, column) = &mut columns[i];
            match *name {
                "seal" => bench.seal(column),
                "raw" => bench.raw(column),
                _ => bench.restic(column),
            }
        }
        eprintln!("bench: round {} of {rounds} done", round + 1);
    }
    let med = |c: &Column| {
        (
            median(c.full.clone()),
            median(c.incr.clone()),
            median(c.full_bytes.clone()),
            median(c.incr_bytes.clone()),
        )
    };
    println!("\nsealed copies to a directory: {files} files, {changed} changed; medians of {rounds} interleaved rounds");
    println!(
        "{:<8} {:>12} {:>14} {:>14} {:>14}",
        "", "full", "incremental", "full bytes", "incr bytes"
    );
    let results: Vec<_> = columns.iter().map(|(n, c)| (*n, med(c))).collect();
    for (name, (f, i, fb, ib)) in &results {
        println!(
            "{name:<8} {:>9.1} ms {:>11.1} ms {fb:>14} {ib:>14}",
            f.as_secs_f64() * 1e3,
            i.as_secs_f64() * 1e3
        );
    }
    let (_, (sf, si, sfb, sib)) = results[0];
    for (name, (f, i, fb, ib)) in &results[1..] {
        println!(
            "seal / {name:<6}: time full {:.2}×, incremental {:.2}×; bytes full {:.2}×, incremental {:.2}×",
            sf.as_secs_f64() / f.as_secs_f64(),
            si.as_secs_f64() / i.as_secs_f64(),
            sfb as f64 / *fb as f64,
            sib as f64 / *ib as f64,
        );
    }
    let (_, (rf, ri, _, _)) = results[1];
    let (_, (_, _, _, restic_ib)) = results[2];
    println!(
        "goals: time ≤ 1.2× raw (full {}, incremental {}); incremental bytes ≤ restic's ({})",
        if sf.as_secs_f64() <= 1.2 * rf.as_secs_f64() {
            "met"
        } else {
            "NOT met"
        },
        if si.as_secs_f64() <= 1.2 * ri.as_secs_f64() {
            "met"
        } else {
            "NOT met"
        },
        if sib <= restic_ib { "met" } else { "NOT met" },
    );
}
