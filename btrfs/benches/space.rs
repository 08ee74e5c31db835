//! Which snapshot holds the disk: `Top::space` against a quota rescan and
//! `btrfs filesystem du` on the same tree, and the cost of the sampling alternative (adr/0029).
//!
//! `cargo bench -p btrfs --bench space` (root; needs btrfs-progs). A subvolume of 100k files
//! (a third of 8 KiB, data extents; the rest 600 bytes, inline), then one read-only snapshot
//! a "day" after a day's churn (100 files rewritten, 20 added, 10 removed), 1000 days. At
//! 100 and at 1000 snapshots: the median time of `Top::space` over every subvolume; the
//! time of `btrfs quota enable` + `btrfs quota rescan -w` (then quotas go off again, so the
//! snapshots that follow are taken without them); `btrfs filesystem du -s` over a few
//! snapshots, scaled to all of them (it is per file and linear); and the time of one
//! `LOGICAL_INO_V2` back-reference walk per sampled extent, which is what a btdu-style
//! sampler pays per sample.
//!
//! `TACID_BENCH_FILES`, `TACID_BENCH_SNAPSHOTS` scale it down; `TACID_BENCH_QUICK=1` runs
//! one round each and leaves `fi du` out. The whole run takes about 45 minutes here, most of
//! it the quota rescans (each given at most 900 s) and two cold walks of 1000 snapshots (the
//! cache's answer a day later is checked against a fresh walk). Results: adr/0029.

use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use btrfs::sys::{SearchKey, TreeSearch};
use btrfs::Top;
use layout::SNAPSHOTS_SUBVOLUME;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:10.1} ms", d.as_secs_f64() * 1e3)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Run a command, output thrown away, with a time limit (`timeout`); its time, or `None` when
/// it failed or ran out of time.
fn timed(limit: Duration, cmd: &str, args: &[&str]) -> Option<Duration> {
    let start = Instant::now();
    let ok = Command::new("timeout")
        .arg(limit.as_secs().to_string())
        .arg(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then(|| start.elapsed())
}

fn path(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

struct Tree {
    dirs: usize,
}

impl Tree {
    fn file(&self, i: usize) -> String {
        format!("d{:03}/f{i}", i % self.dirs)
    }

    fn contents(i: usize, version: u64) -> Vec<u8> {
        if i.is_multiple_of(3) {
            noise(i as u64 * 7919 + version, 8192)
        } else {
            noise(i as u64 * 7919 + version, 600)
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` asks; this is a bench, not a test.
    }
    let quick = std::env::var_os("TACID_BENCH_QUICK").is_some();
    let files = env("TACID_BENCH_FILES", 100_000);
    let snapshots = env("TACID_BENCH_SNAPSHOTS", 1000);
    let checkpoints: Vec<usize> = [100, snapshots]
        .into_iter()
        .filter(|n| *n <= snapshots)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let Some(fs) = testbed::LoopFs::with_layout(32 << 30).expect("make a loop Btrfs") else {
        return;
    };
    let top = Top::open(fs.top()).expect("open the top level");
    let home_path = fs.top().join("@home");
    let home = top.dir().open_dir("@home").expect("@home");
    let store = top.dir().open_dir(SNAPSHOTS_SUBVOLUME).expect("store");
    let tree = Tree {
        dirs: (files / 1000).max(1),
    };

    let made = Instant::now();
    for d in 0..tree.dirs {
        std::fs::create_dir(home_path.join(format!("d{d:03}"))).expect("mkdir");
    }
    for i in 0..files {
        std::fs::write(home_path.join(tree.file(i)), Tree::contents(i, 0)).expect("write");
    }
    top.dir().commit().expect("commit");
    println!(
        "{files} files made in {:.1} s ({} dirs; every third 8 KiB, the rest 600 B inline)",
        made.elapsed().as_secs_f64(),
        tree.dirs
    );

    let home_id = home.subvolume_info().expect("info").id;
    let others: Vec<u64> = top
        .dir()
        .list_subvolumes()
        .expect("list")
        .into_iter()
        .map(|e| e.info.id)
        .filter(|id| *id != home_id)
        .collect();
    let mut ids = Vec::new();
    let mut added = files;
    let churn_start = Instant::now();
    for day in 1..=snapshots {
        // A day's churn: 100 files rewritten (a third of them data extents), 20 added, 10
        // removed.
        for k in 0..100 {
            let i = (day * 7919 + k * 104_729) % files;
            let _ = std::fs::write(home_path.join(tree.file(i)), Tree::contents(i, day as u64));
        }
        for _ in 0..20 {
            std::fs::write(home_path.join(tree.file(added)), Tree::contents(added, 0))
                .expect("add");
            added += 1;
        }
        for k in 0..10 {
            let _ = std::fs::remove_file(home_path.join(tree.file((day * 31 + k * 997) % files)));
        }
        let snap = home
            .snapshot_to(&store, format!("day{day:04}"), true)
            .expect("snapshot");
        ids.push(snap.id);
        if checkpoints.contains(&day) {
            println!(
                "\n{day} snapshots (churn and snapshots so far {:.1} s)",
                churn_start.elapsed().as_secs_f64()
            );
            measure(&fs, &top, &ids, home_id, &others, quick);
        }
    }
}

fn measure(
    fs: &testbed::LoopFs,
    top: &Top,
    snaps: &[u64],
    home_id: u64,
    others: &[u64],
    quick: bool,
) {
    top.dir().commit().expect("commit");
    let mut chain = snaps.to_vec();
    chain.push(home_id);
    let mut groups = vec![chain, vec![5]];
    groups.extend(others.iter().map(|id| vec![*id]));
    let rounds = if quick || snaps.len() > 100 { 1 } else { 3 };
    let far = || Instant::now() + Duration::from_secs(3600);
    let mut times = Vec::new();
    let mut answer = None;
    let mut cache = btrfs::space::SpaceCache::new();
    for _ in 0..rounds {
        cache = btrfs::space::SpaceCache::new();
        let start = Instant::now();
        let space = top.space_cached(&groups, far(), &mut cache).expect("space");
        times.push(start.elapsed());
        answer = Some(space);
    }
    let space = answer.expect("one round");
    let ours = median(times);
    // Asked again, nothing changed: from the cache.
    let start = Instant::now();
    let warm = top.space_cached(&groups, far(), &mut cache).expect("space");
    let warm_t = start.elapsed();
    assert_eq!(warm.roots, space.roots);
    // A day later: churn in @home, one more snapshot (outside the timing), asked again.
    let home_path = fs.top().join("@home");
    for k in 0..100usize {
        let p = home_path.join(format!("d{:03}/f{}", k % 100, k * 13));
        let _ = std::fs::write(p, noise(k as u64 + 1_000_000, 8192));
    }
    let store = top.dir().open_dir(SNAPSHOTS_SUBVOLUME).expect("store");
    let home = top.dir().open_dir("@home").expect("@home");
    let extra = home
        .snapshot_to(&store, format!("extra{}", snaps.len()), true)
        .expect("snapshot");
    let mut chain = snaps.to_vec();
    chain.push(extra.id);
    chain.push(home_id);
    let mut day_groups = vec![chain, vec![5]];
    day_groups.extend(others.iter().map(|id| vec![*id]));
    let start = Instant::now();
    let day = top
        .space_cached(&day_groups, far(), &mut cache)
        .expect("space");
    let day_t = start.elapsed();
    let fresh = top.space(&day_groups, far()).expect("space");
    assert_eq!(day.roots, fresh.roots, "the cache answers as a fresh walk");
    top.dir()
        .delete_subvolume_by_id(extra.id)
        .expect("delete the extra snapshot");
    println!(
        "  Top::space, cached   {} asked again (walked {}); {} a day later (walked {}: the new snapshot, @home and the store, whose directory changed)",
        ms(warm_t),
        warm.walked,
        ms(day_t),
        day.walked
    );
    let mut by_exclusive: Vec<_> = space.roots.iter().collect();
    by_exclusive.sort_by_key(|r| std::cmp::Reverse(r.exclusive));
    println!(
        "  Top::space, cold     {} ({:.2} ms a subvolume; {} extent items; {} MiB of distinct extents; complete {})",
        ms(ours),
        ours.as_secs_f64() * 1e3 / (snaps.len() + 1) as f64,
        space.items_seen,
        space.total >> 20,
        space.complete
    );
    println!(
        "  most exclusive: {}",
        by_exclusive
            .iter()
            .take(3)
            .map(|r| format!("{} → {} KiB", r.id, r.exclusive >> 10))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // The sampling alternative: one LOGICAL_INO_V2 walk per sample, on extents of the oldest
    // snapshot (shared by the most roots: the expensive case).
    let mut bytenrs = Vec::new();
    let key = SearchKey {
        tree_id: snaps[0],
        min: (256, 108, 0),
        max: (u64::MAX - 256, 108, u64::MAX),
    };
    TreeSearch::new()
        .for_each(top.dir().as_fd(), key, |item| {
            if item.item_type == 108 && item.data.len() >= 53 && item.data[20] == 1 {
                let mut b = [0u8; 8];
                b.copy_from_slice(&item.data[21..29]);
                let bytenr = u64::from_le_bytes(b);
                if bytenr != 0 {
                    bytenrs.push(bytenr);
                }
            }
        })
        .expect("collect extents");
    let samples = 200.min(bytenrs.len());
    let mut buf = vec![0u64; 1 << 18];
    let mut refs = 0usize;
    let start = Instant::now();
    for k in 0..samples {
        let b = bytenrs[(k * 7919) % bytenrs.len()];
        let (n, _missed) =
            btrfs::sys::logical_ino(top.dir().as_fd(), b, &mut buf).expect("logical_ino");
        refs += n;
    }
    let per_sample = start.elapsed() / samples.max(1) as u32;
    println!(
        "  LOGICAL_INO_V2       {} a sample ({} references a sample on average); 10 000 samples ≈ {:.1} s",
        ms(per_sample),
        refs / samples.max(1),
        per_sample.as_secs_f64() * 10_000.0
    );

    // Quotas: enable (the kernel starts a rescan), wait for it; then a second full rescan.
    let limit = Duration::from_secs(if quick { 120 } else { 900 });
    let top_path = path(fs.top());
    let enabled = timed(limit, "btrfs", &["quota", "enable", &top_path]);
    let first = timed(limit, "btrfs", &["quota", "rescan", "-w", &top_path]);
    let rescan = timed(limit, "btrfs", &["quota", "rescan", "-w", &top_path]);
    let _ = timed(limit, "btrfs", &["quota", "disable", &top_path]);
    match (enabled, first, rescan) {
        (Some(e), Some(f), Some(r)) => println!(
            "  quota enable+rescan  {}; a second rescan {}   → Top::space is {:.1}× faster than a rescan",
            ms(e + f),
            ms(r),
            r.as_secs_f64() / ours.as_secs_f64()
        ),
        _ => println!(
            "  quota rescan         did not finish within {} s   → Top::space is over {:.1}× faster",
            limit.as_secs(),
            limit.as_secs_f64() / ours.as_secs_f64()
        ),
    }

    if !quick {
        let few = snaps.len().min(5);
        let store = fs.top().join(SNAPSHOTS_SUBVOLUME);
        let mut args = vec!["filesystem".to_owned(), "du".to_owned(), "-s".to_owned()];
        for k in 0..few {
            args.push(path(&store.join(format!("day{:04}", k + 1))));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match timed(limit, "btrfs", &args) {
            Some(d) => {
                let all = d * (snaps.len() as u32 + 1) / few as u32;
                println!(
                    "  btrfs filesystem du  {} for {few} snapshots; ≈ {:.1} s for all {} (linear)   → Top::space is {:.1}× faster",
                    ms(d),
                    all.as_secs_f64(),
                    snaps.len() + 1,
                    all.as_secs_f64() / ours.as_secs_f64()
                );
            }
            None => println!(
                "  btrfs filesystem du  did not finish within {} s",
                limit.as_secs()
            ),
        }
    }
}
