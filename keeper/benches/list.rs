//! `tacid data list` at 100, 1000 and 10 000 snapshots, against the floor measured in the
//! same run: a process that only does the tree search of the store and prints the names.
//! Interleaved rounds, median and spread (min–max). Two lists are timed:
//!
//! - unchanged: the store and the journal are as at the last list (the keeper answers from
//!   the list it keeps);
//! - changed: before each round one snapshot is deleted and one taken behind the stem's
//!   back, by raw ioctls (the keeper must ask the stem again), and the new one must be listed.
//!
//! And the keeper's and the stem's resident memory, idle and after a list of 10 000
//! (target <= 10 MiB each).
//!
//! Run (root): `cargo build --release -p stem -p tacid-cli --bins &&
//! cargo bench -p keeper --bench list`.

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use layout::{SnapshotName, SubvolumeName};

const ROUNDS: usize = 11;

fn stats(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn show(v: Vec<Duration>) -> (Duration, String) {
    let (m, lo, hi) = stats(v);
    (m, format!("{} ms ({}–{})", ms(m), ms(lo), ms(hi)))
}

fn rss_mib(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return 0.0 };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0) as f64
        / 1024.0
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

fn run(cmd: &str, args: &[&str]) {
    let st = Command::new(cmd).args(args).status().expect(cmd);
    assert!(st.success(), "{cmd} {args:?}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--raw-list" {
        raw_list(&args[2]);
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    // As the shipped unit runs the keeper and the stem (its `Environment=GLIBC_TUNABLES`).
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/tacid-keeper.service"
    ))
    .expect("the keeper's unit");
    let tunables = unit
        .lines()
        .find_map(|l| l.strip_prefix("Environment=GLIBC_TUNABLES="))
        .expect("the unit sets GLIBC_TUNABLES");
    std::env::set_var("GLIBC_TUNABLES", tunables);
    let Some(w) = common::World::start() else {
        return;
    };
    // 10 000 snapshots need more metadata room than the tier's 512 MiB: grow the image.
    run(
        "truncate",
        &["-s", "4G", w.fs.image().to_str().expect("utf-8")],
    );
    run("losetup", &["-c", w.fs.device().to_str().expect("utf-8")]);
    run(
        "btrfs",
        &[
            "filesystem",
            "resize",
            "max",
            w.top().to_str().expect("utf-8"),
        ],
    );
    assert!(w.tacid_as_root(&["data", "status"]).status.success());
    std::thread::sleep(Duration::from_secs(1));
    println!(
        "idle RSS after start: keeper {:.1} MiB, stem {:.1} MiB (target <= 10 MiB each)",
        rss_mib(w.keeper_pid()),
        rss_mib(w.stem_pid())
    );

    let top = btrfs::Top::open(w.top()).expect("top");
    let home_sub = SubvolumeName::parse("@home").expect("layout");
    let home = top.dir().open_dir(home_sub.as_str()).expect("@home");
    let store = top
        .dir()
        .open_dir(layout::SNAPSHOTS_SUBVOLUME)
        .expect("@snapshots");
    let take = || {
        let name = SnapshotName::new(home_sub, SystemTime::now())
            .expect("name")
            .to_string();
        home.snapshot_to(&store, &name, true).expect("raw snapshot");
        name
    };
    let exe = std::env::current_exe().expect("own path");
    let top_str = w.top().to_str().expect("utf-8").to_owned();
    let mut names: Vec<String> = Vec::new();
    for n in [100usize, 1000, 10_000] {
        while names.len() < n {
            names.push(take());
        }
        // Once, so that the keeper has the list.
        assert!(w.tacid_as_root(&["data", "list"]).status.success());
        let (mut raw, mut same, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let out = Command::new(&exe)
                .args(["--raw-list", &top_str])
                .output()
                .expect("raw list");
            raw.push(t.elapsed());
            assert!(out.status.success());
            assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), n);

            let t = Instant::now();
            let out = w.tacid_as_root(&["data", "list"]);
            same.push(t.elapsed());
            assert!(out.status.success());

            // Behind the stem's back: one gone, one new.
            let gone = names.remove(0);
            let id = store
                .open_dir(&gone)
                .and_then(|d| d.subvolume_info())
                .expect("oldest")
                .id;
            store.delete_subvolume_by_id(id).expect("raw delete");
            let new = take();
            names.push(new.clone());
            let t = Instant::now();
            let out = w.tacid_as_root(&["data", "list"]);
            changed.push(t.elapsed());
            assert!(out.status.success());
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains(&new), "the new snapshot {new} is listed");
            assert!(!text.contains(&gone), "the deleted {gone} is not");
        }
        let (r, raw) = show(raw);
        let (s, same) = show(same);
        let (c, changed) = show(changed);
        println!("list at {n}: raw tree-search process {raw}; `tacid data list` unchanged {same}, ratio {:.2}; changed {changed}, ratio {:.2} (target <= 1.5)",
            s.as_secs_f64() / r.as_secs_f64(), c.as_secs_f64() / r.as_secs_f64());
        let t = Instant::now();
        let out = w.tacid_as_root(&["data", "list", "--json"]);
        assert!(out.status.success());
        println!("  list at {n}, --json: {} ms", ms(t.elapsed()));
    }
    std::thread::sleep(Duration::from_secs(1));
    println!(
        "RSS after lists of 10 000: keeper {:.1} MiB, stem {:.1} MiB (target <= 10 MiB each)",
        rss_mib(w.keeper_pid()),
        rss_mib(w.stem_pid())
    );
}
