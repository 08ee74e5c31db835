//! The stem engine against its floor, on one loop Btrfs, in one run, interleaved.
//!
//! `cargo bench -p stem --bench engine` (root; needs btrfs-progs and snapper). Prints
//! medians and ratios: take against the raw snapshot ioctl (F), `btrfs subvolume snapshot`
//! and `snapper create`; list at 10/100/1000/5000 snapshots against a raw tree search,
//! `btrfs subvolume list` and `snapper list`; delete against the raw destroy ioctl.
//! Targets (adr/0006): take ≤ 1.3×F; list at 1000 ≤ 2× the tree search; both ≥ 5× faster
//! than snapper.

use std::os::fd::AsFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use layout::{SnapshotName, SubvolumeName, SNAPSHOTS_SUBVOLUME};
use stem::Engine;

const SNAPPER_CONFIG: &str = "tacid-bench";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed(), out)
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ms(d: Duration) -> String {
    format!("{:8.3} ms", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, floor: Duration) -> String {
    format!("{:6.2}×", a.as_secs_f64() / floor.as_secs_f64())
}

struct Snapper {
    ok: bool,
}

impl Snapper {
    /// A snapper config on `@persist` of the same filesystem (snapper nests its own
    /// `.snapshots` subvolume inside the subvolume it manages).
    fn new(subvolume: &Path) -> Snapper {
        let ok = Command::new("snapper")
            .args(["--no-dbus", "-c", SNAPPER_CONFIG, "create-config"])
            .arg(subvolume)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("bench: snapper is not usable here; its columns are left out");
        }
        Snapper { ok }
    }

    fn cmd(&self, args: &[&str]) -> Option<Duration> {
        if !self.ok {
            return None;
        }
        let mut full = vec!["--no-dbus", "-c", SNAPPER_CONFIG];
        full.extend_from_slice(args);
        Some(time(|| run("snapper", &full)).0)
    }
}

impl Drop for Snapper {
    fn drop(&mut self) {
        if self.ok {
            let _ = Command::new("snapper")
                .args(["--no-dbus", "-c", SNAPPER_CONFIG, "delete-config"])
                .status();
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` asks; this is a bench, not a test.
    }
    // TACID_BENCH_QUICK=1: fewer rounds and counts, for a run inside the test suite.
    let quick = std::env::var_os("TACID_BENCH_QUICK").is_some();
    let rounds = if quick { 11 } else { 31 };
    let counts: &[usize] = if quick {
        &[10, 100, 1000]
    } else {
        &[10, 100, 1000, 5000]
    };
    let snapper_max = if quick { 100 } else { 1000 };
    let Some(fs) = testbed::LoopFs::with_layout(4 << 30).expect("make a loop Btrfs") else {
        return;
    };
    let top = fs.top();
    let engine = Engine::open(top).expect("open the top level");
    let home = SubvolumeName::parse("@home").expect("layout name");
    // Some content, so a snapshot is of something; written and committed before timing.
    for i in 0..2000 {
        std::fs::write(
            top.join(format!("@home/file-{i}")),
            format!("content {i}\n"),
        )
        .expect("write");
    }
    run("sync", &[]);

    let btrfs_top = btrfs::Top::open(top).expect("top");
    let store = btrfs_top
        .dir()
        .open_dir(SNAPSHOTS_SUBVOLUME)
        .expect("store");
    let live = btrfs_top.dir().open_dir("@home").expect("live");
    let cli_store = top.join(SNAPSHOTS_SUBVOLUME);
    let snapper = Snapper::new(&top.join("@persist"));

    // Take, interleaved, the order rotating each round so no contender always follows the
    // one that left the most dirty state behind.
    let (mut floor, mut take, mut cli, mut snap) = (vec![], vec![], vec![], vec![]);
    let mut floor_ids = vec![];
    for round in 0..rounds {
        for which in (0..4).map(|k| (k + round) % 4) {
            match which {
                0 => {
                    let name = SnapshotName::new(home, SystemTime::now())
                        .expect("name")
                        .to_string()
                        + ".floor";
                    let (d, r) = time(|| {
                        btrfs::sys::snap_create(store.as_fd(), live.as_fd(), &name, 1 << 1)
                    });
                    r.expect("raw snapshot ioctl");
                    floor.push(d);
                    floor_ids.push(
                        store
                            .open_dir(&name)
                            .and_then(|d| d.subvolume_info())
                            .expect("info")
                            .id,
                    );
                }
                1 => take.push(time(|| engine.take(home).expect("engine take")).0),
                2 => {
                    let cli_name = cli_store.join(format!("cli-{round}"));
                    let cli_name = cli_name.to_str().expect("utf-8");
                    let src = top.join("@home");
                    let src = src.to_str().expect("utf-8");
                    cli.push(
                        time(|| {
                            run(
                                "btrfs",
                                &["-q", "subvolume", "snapshot", "-r", src, cli_name],
                            )
                        })
                        .0,
                    );
                }
                _ => snap.extend(snapper.cmd(&["create", "--description", "bench"])),
            }
        }
    }
    let f = median(floor.clone());
    println!("take a snapshot (median of {rounds}, interleaved, rotating order)");
    println!("  raw ioctl (F)            {}  {}", ms(f), ratio(f, f));
    let t = median(take);
    println!(
        "  engine take              {}  {}   target ≤ 1.30×",
        ms(t),
        ratio(t, f)
    );
    let c = median(cli);
    println!("  btrfs subvolume snapshot {}  {}", ms(c), ratio(c, f));
    if !snap.is_empty() {
        let s = median(snap);
        println!(
            "  snapper create           {}  {}   engine is {:.1}× faster (target ≥ 5×)",
            ms(s),
            ratio(s, f),
            s.as_secs_f64() / t.as_secs_f64()
        );
    }

    // List at growing counts: fill the store with raw snapshots up to each count.
    println!("list the store (median of {rounds})");
    let mut existing = engine.list().expect("list").len();
    let mut snapper_count = existing;
    for &target in counts {
        while existing < target {
            let name = SnapshotName::new(home, SystemTime::now()).expect("name");
            match btrfs::sys::snap_create(store.as_fd(), live.as_fd(), name.to_string(), 1 << 1) {
                Ok(()) => existing += 1,
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => panic!("raw snapshot: {e}"),
            }
        }
        // snapper lists its own snapshots; bring it to the same count, up to 1000 (each
        // create takes tens of milliseconds).
        let snapper_here = snapper.ok && target <= snapper_max;
        while snapper_here && snapper_count < target {
            snapper.cmd(&["create"]);
            snapper_count += 1;
        }
        let (mut raw, mut list, mut cli, mut snap) = (vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            raw.push(time(|| store.list_subvolumes().expect("tree search")).0);
            list.push(time(|| engine.list().expect("engine list")).0);
            if target <= 1000 || list.len() <= 5 {
                cli.push(
                    time(|| {
                        run(
                            "btrfs",
                            &["subvolume", "list", "-s", &top.to_string_lossy()],
                        )
                    })
                    .0,
                );
                if snapper_here {
                    snap.extend(snapper.cmd(&["list"]));
                }
            }
        }
        let r = median(raw);
        let l = median(list);
        let c = median(cli);
        print!(
            "  {target:>5}: tree search {}  engine {} {}  btrfs list {} {}",
            ms(r),
            ms(l),
            ratio(l, r),
            ms(c),
            ratio(c, r)
        );
        if !snap.is_empty() {
            let s = median(snap);
            print!(
                "  snapper list {} {} (engine {:.0}× faster)",
                ms(s),
                ratio(s, r),
                s.as_secs_f64() / l.as_secs_f64()
            );
        }
        println!();
    }

    // Delete, interleaved: the raw destroy ioctl against the engine's delete (which checks
    // the pin and commits).
    let taken: Vec<_> = engine
        .list()
        .expect("list")
        .into_iter()
        .filter(|s| !s.staged)
        .take(rounds * 2)
        .collect();
    let (mut raw, mut del) = (vec![], vec![]);
    for (pair, floor_id) in taken.chunks(2).zip(floor_ids) {
        raw.push(
            time(|| btrfs::sys::snap_destroy_by_id(store.as_fd(), floor_id).expect("raw destroy"))
                .0,
        );
        del.push(time(|| engine.delete(pair[0].name).expect("engine delete")).0);
    }
    let r = median(raw);
    let count = del.len();
    let d = median(del);
    println!("delete a snapshot (median of {count})");
    println!("  raw destroy ioctl        {}  {}", ms(r), ratio(r, r));
    println!("  engine delete           {}  {}", ms(d), ratio(d, r));
}
