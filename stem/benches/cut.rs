//! A consistent cut's added time, on one loop Btrfs, in one run, interleaved.
//!
//! `cargo bench -p stem --bench cut` (root; loop devices; a writable cgroup v2 hierarchy).
//! Sets of `@persist` and `@log` taken plain (no unit paused: the floor, F), with one and
//! with five units paused (each a cgroup v2 of its own holding a process, frozen by the
//! files, as where systemd is not PID 1). Prints medians, the added time and ratios to F.
//! What is added: the guard's start (a fork and exec of `tacid-stem`), the freezes and the
//! wait for `frozen 1`, the check that each is still frozen, the thaws.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use layout::cut::{CutConfig, UnitName};
use layout::{SubvolumeName, SNAPSHOTS_SUBVOLUME};
use stem::cut::{Cut, Freezer};
use stem::worker::Worker;
use stem::Engine;

const ROUNDS: usize = 60;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:8.3} ms", d.as_secs_f64() * 1e3)
}

fn cgroup2() -> Option<PathBuf> {
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .iter()
        .map(PathBuf::from)
        .find(|r| r.join("cgroup.procs").is_file() && r.join("cgroup.subtree_control").is_file())
}

struct Tree {
    root: PathBuf,
    children: Vec<Child>,
}

impl Tree {
    fn new(v2: &Path, units: usize) -> Tree {
        let root = v2.join(format!("tacid-bench-{}", std::process::id()));
        let mut children = Vec::new();
        for i in 0..units {
            let dir = root.join("system.slice").join(format!("u{i}.service"));
            fs::create_dir_all(&dir).expect("make a cgroup");
            // A process that wakes often, as a service does: it must be stopped each time.
            children.push(
                Command::new("sh")
                    .arg("-c")
                    .arg(format!(
                        "echo $$ > '{}/cgroup.procs' && exec sh -c 'while :; do sleep 0.001; done'",
                        dir.display()
                    ))
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("start a process"),
            );
        }
        Tree { root, children }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(entries) = fs::read_dir(self.root.join("system.slice")) {
            for e in entries.flatten() {
                let _ = fs::write(e.path().join("cgroup.freeze"), "0");
                let _ = fs::remove_dir(e.path());
            }
        }
        let _ = fs::remove_dir(self.root.join("system.slice"));
        let _ = fs::remove_dir(&self.root);
    }
}

fn main() {
    let Some(v2) = cgroup2() else {
        eprintln!("*** SKIPPED: no cgroup v2 hierarchy; the cut bench did not run ***");
        return;
    };
    let Some(fs_) = testbed::LoopFs::with_layout(512 << 20).expect("make a loop Btrfs") else {
        return;
    };
    let tree = Tree::new(&v2, 5);
    let worker = Worker::start(Engine::open(fs_.top()).expect("open"), || {}).expect("worker");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cut = |n: usize| {
        Cut::new(
            CutConfig {
                units: (0..n)
                    .map(|i| UnitName::parse(&format!("u{i}.service")).expect("a unit name"))
                    .collect(),
                ..CutConfig::default()
            },
            Freezer::Cgroup {
                root: tree.root.clone(),
            },
            PathBuf::from(env!("CARGO_BIN_EXE_tacid-stem")),
        )
    };
    let cuts = [(0, cut(0)), (1, cut(1)), (5, cut(5))];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); cuts.len()];
    let store = fs_.top().join(SNAPSHOTS_SUBVOLUME);
    let members = || {
        vec![
            SubvolumeName::parse("@persist").expect("layout"),
            SubvolumeName::parse("@log").expect("layout"),
        ]
    };
    for _ in 0..ROUNDS {
        for (i, (_, c)) in cuts.iter().enumerate() {
            let t = Instant::now();
            let taken = rt.block_on(c.take_set(&worker, members())).expect("a set");
            times[i].push(t.elapsed());
            for s in &taken.snapshots {
                let _ = fs::metadata(store.join(s.name.to_string()));
            }
            let names: Vec<_> = taken.snapshots.iter().map(|s| s.name).collect();
            rt.block_on(worker.run(move |e| {
                for n in names {
                    e.delete(n).expect("delete");
                }
            }))
            .expect("engine");
        }
    }
    let medians: Vec<Duration> = times.into_iter().map(median).collect();
    let floor = medians[0];
    println!("A set of @persist and @log, {ROUNDS} rounds interleaved, medians:");
    for ((n, _), m) in cuts.iter().zip(&medians) {
        println!(
            "  {n} unit(s) paused: {}  added {}  {:5.2}× the plain set",
            ms(*m),
            ms(m.saturating_sub(floor)),
            m.as_secs_f64() / floor.as_secs_f64()
        );
    }
}
