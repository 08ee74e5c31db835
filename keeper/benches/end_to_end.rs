//! End-to-end figures for the keeper, on a loop Btrfs, against floors taken in the same run:
//!
//! - `tacid data snapshot /home` (CLI process → keeper → stem → ioctl → journal), interleaved
//!   with the raw snapshot ioctl (F); target ≤ 2.0 × F.
//! - `tacid data list` at 1000 snapshots against a process that only does the tree search
//!   and prints the names; target ≤ 1.5×.
//! - The idle resident memory of the keeper and the stem; target ≤ 10 MiB each.
//!
//! Run (root): `cargo build --release -p stem -p tacid-cli --bins &&
//! cargo bench -p keeper --bench end_to_end`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use layout::{SnapshotName, SubvolumeName};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The raw tree-search process: list the subvolumes in the store and print their names.
fn raw_list(top: &str) {
    let top = btrfs::Top::open(std::path::Path::new(top)).expect("top");
    let store = top
        .dir()
        .open_dir(layout::SNAPSHOTS_SUBVOLUME)
        .expect("store");
    let mut out = String::new();
    for e in store.list_subvolumes().expect("tree search") {
        out.push_str(&e.name.to_string_lossy());
        out.push('\n');
    }
    print!("{out}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--raw-list" {
        raw_list(&args[2]);
        return;
    }
    // `cargo bench` passes `--bench`; anything else (e.g. `cargo test --benches`) does not bench.
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    // Plain log lines, so the bench can quote the keeper's own timings.
    std::env::set_var("NO_COLOR", "1");
    let Some(w) = common::World::start() else {
        return;
    };
    // Idle after start (and one status call, so the keeper has reconciled).
    assert!(w.tacid_as_root(&["data", "status"]).status.success());
    std::thread::sleep(Duration::from_secs(1));
    println!(
        "idle RSS after start: keeper {:.1} MiB, stem {:.1} MiB (target <= 10 MiB each)",
        w.keeper_pid().map(rss_kib).unwrap_or(0) as f64 / 1024.0,
        w.stem_pid().map(rss_kib).unwrap_or(0) as f64 / 1024.0
    );
    let top = btrfs::Top::open(w.top()).expect("top");
    let home_sub = SubvolumeName::parse("@home").expect("layout");
    let home = top.dir().open_dir(home_sub.as_str()).expect("@home");
    let store = top
        .dir()
        .open_dir(layout::SNAPSHOTS_SUBVOLUME)
        .expect("@snapshots");

    // Warm up both paths.
    for _ in 0..3 {
        assert!(w
            .tacid_as_root(&["data", "snapshot", "/home"])
            .status
            .success());
    }
    const ROUNDS: usize = 40;
    let mut floor = Vec::new();
    let mut e2e = Vec::new();
    for _ in 0..ROUNDS {
        let name = SnapshotName::new(home_sub, SystemTime::now())
            .expect("name")
            .to_string();
        let t = Instant::now();
        home.snapshot_to(&store, &name, true).expect("raw snapshot");
        floor.push(t.elapsed());
        let t = Instant::now();
        let out = w.tacid_as_root(&["data", "snapshot", "/home"]);
        e2e.push(t.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (f, e) = (median(floor), median(e2e));
    println!("snapshot: raw ioctl F = {} (median of {ROUNDS}); `tacid data snapshot /home` = {}; ratio {:.2} (target <= 2.0)", ms(f), ms(e), e.as_secs_f64() / f.as_secs_f64());

    let log = std::fs::read_to_string(w.keeper_log()).unwrap_or_default();
    for line in log
        .lines()
        .filter(|l| l.contains("set timings"))
        .rev()
        .take(3)
    {
        println!(
            "  keeper: {}",
            line.split("set timings").nth(1).unwrap_or_default()
        );
    }

    if let Ok(path) = std::env::var("TACID_BENCH_STRACE") {
        let _ = Command::new("strace")
            .args(["-f", "-r", "-o", &path])
            .arg(common::bin("tacid"))
            .args(["data", "snapshot", "/home"])
            .env("TACID_BUS_ADDRESS", &w.address)
            .output();
    }
    // Where the CLI's own time goes: a process that only starts, and a call that does no I/O.
    let time = |args: &[&str]| {
        let mut v = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let _ = w.tacid_as_root(args);
            v.push(t.elapsed());
        }
        median(v)
    };
    println!(
        "  `tacid --version` (process start only): {}",
        ms(time(&["--version"]))
    );
    println!("  `tacid data cancel` with nothing staged (CLI + bus + keeper + stem + one journal row): {}", ms(time(&["data", "cancel"])));

    // Fill the store to 1000 snapshots with raw ioctls (they list as of unknown origin).
    let have = w.disk_snapshots().0.len();
    for _ in have..1000 {
        let name = SnapshotName::new(home_sub, SystemTime::now())
            .expect("name")
            .to_string();
        home.snapshot_to(&store, &name, true).expect("raw snapshot");
    }
    assert_eq!(w.disk_snapshots().0.len(), 1000);
    let exe = std::env::current_exe().expect("own path");
    let top_str = w.top().to_str().expect("utf-8").to_owned();
    let mut raw = Vec::new();
    let mut list = Vec::new();
    for i in 0..15 {
        let t = Instant::now();
        let out = Command::new(&exe)
            .args(["--raw-list", &top_str])
            .output()
            .expect("raw list");
        let d_raw = t.elapsed();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1000);
        let t = Instant::now();
        let out = w.tacid_as_root(&["data", "list"]);
        let d_list = t.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if i > 0 {
            raw.push(d_raw);
            list.push(d_list);
        }
    }
    let (r, l) = (median(raw), median(list));
    println!("list at 1000: raw tree-search process = {}; `tacid data list` = {}; ratio {:.2} (target <= 1.5)", ms(r), ms(l), l.as_secs_f64() / r.as_secs_f64());
    let log = std::fs::read_to_string(w.keeper_log()).unwrap_or_default();
    for line in log
        .lines()
        .filter(|l| l.contains("list timings"))
        .rev()
        .take(3)
    {
        println!(
            "  keeper: {}",
            line.split("list timings").nth(1).unwrap_or_default()
        );
    }
    let t = Instant::now();
    let out = w.tacid_as_root(&["data", "list", "--json"]);
    println!("list at 1000, --json: {}", ms(t.elapsed()));
    assert!(out.status.success());

    std::thread::sleep(Duration::from_secs(2));
    let keeper = w.keeper_pid().map(rss_kib).unwrap_or(0);
    let stem = w.stem_pid().map(rss_kib).unwrap_or(0);
    println!(
        "idle RSS after all of the above (1000 snapshots listed): keeper {:.1} MiB, stem {:.1} MiB (target <= 10 MiB each)",
        keeper as f64 / 1024.0,
        stem as f64 / 1024.0
    );
}
