//! What changed since a snapshot: the engine against its floor and against snapper, on one
//! loop Btrfs, between the same two states.
//!
//! `cargo bench -p stem --bench changes` (root; needs btrfs-progs and snapper). A
//! subvolume of 100k files, a snapshot, then 1000 changes (500 edits, 300 additions, 200
//! removals). Prints medians and ratios: `Engine::changes_since` against the raw
//! generation-bounded tree search it is built on (the floor, F), against
//! `snapper status 1..0` (the same question: a snapshot against the live subvolume), and,
//! for reference, against `btrfs send --no-data -p SNAP NEW` (the send-stream method,
//! without the cost of making and deleting NEW). Target (adr/0012): ≥ 10× faster than
//! snapper.

use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use btrfs::sys::{SearchKey, TreeSearch};
use layout::{SubvolumeName, SNAPSHOTS_SUBVOLUME};
use stem::Engine;

const SNAPPER_CONFIG: &str = "tacid-bench-changes";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed(), out)
}

fn ms(d: Duration) -> String {
    format!("{:9.3} ms", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, floor: Duration) -> String {
    format!("{:7.2}×", a.as_secs_f64() / floor.as_secs_f64())
}

/// Run a command with its output thrown away (as a person's `> /dev/null`); true on success.
fn quiet(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` asks; this is a bench, not a test.
    }
    // TACID_BENCH_QUICK=1: fewer rounds, for a run inside the test suite.
    let quick = std::env::var_os("TACID_BENCH_QUICK").is_some();
    let rounds = if quick { 3 } else { 9 };
    let snapper_rounds = if quick { 1 } else { 3 };
    let Some(fs) = testbed::LoopFs::with_layout(2 << 30).expect("make a loop Btrfs") else {
        return;
    };
    let top = fs.top();
    let home = top.join("@home");
    let engine = Engine::open(top).expect("open the top level");

    // snapper nests its `.snapshots` subvolume in the subvolume it manages: made first,
    // so both tools see the same changes after their snapshots.
    let snapper = quiet(
        "snapper",
        &[
            "--no-dbus",
            "-c",
            SNAPPER_CONFIG,
            "create-config",
            &path(&home),
        ],
    );
    if !snapper {
        eprintln!("bench: snapper is not usable here; its column is left out");
    }

    let (made, ()) = time(|| {
        for d in 0..100 {
            let dir = home.join(format!("d{d:03}"));
            std::fs::create_dir(&dir).expect("mkdir");
            for f in 0..1000 {
                std::fs::File::create(dir.join(format!("f{f:04}"))).expect("create");
            }
        }
    });
    println!("100k files made in {:.1} s", made.as_secs_f64());
    let snap = engine
        .take(SubvolumeName::parse("@home").expect("layout name"))
        .expect("snapshot");
    let snapper_ok = snapper && quiet("snapper", &["--no-dbus", "-c", SNAPPER_CONFIG, "create"]);

    for i in 0..500 {
        let p = home.join(format!("d{:03}/f{:04}", i % 100, i * 7 % 1000));
        std::fs::write(p, b"edited").expect("edit");
    }
    for i in 0..300 {
        std::fs::File::create(home.join(format!("d{:03}/new{i}", i % 50))).expect("add");
    }
    for i in 0..200 {
        let p = home.join(format!("d{:03}/f{:04}", 50 + i % 50, 999 - i));
        std::fs::remove_file(p).expect("remove");
    }
    let btrfs_top = btrfs::Top::open(top).expect("top");
    btrfs_top.dir().commit().expect("commit");

    // The send stream's new side: a read-only snapshot of the live state, made once and
    // outside the timing (the send method would make and delete it each time).
    let store = top.join(SNAPSHOTS_SUBVOLUME);
    let old = store.join(snap.name.to_string());
    let new = store.join("bench-new");
    assert!(quiet(
        "btrfs",
        &["subvolume", "snapshot", "-r", &path(&home), &path(&new)]
    ));

    let live_info = btrfs_top
        .dir()
        .open_dir("@home")
        .and_then(|d| d.subvolume_info())
        .expect("live info");
    let since = btrfs_top
        .dir()
        .open_dir(SNAPSHOTS_SUBVOLUME)
        .and_then(|s| s.open_dir(snap.name.to_string()))
        .and_then(|d| d.subvolume_info())
        .expect("snapshot info")
        .created_generation;

    let first = engine
        .changes_since(snap.name, Duration::from_secs(60), false, &mut |_| {})
        .expect("changes");
    println!(
        "changes: files {:?}, directories {:?}, {} bytes written, complete {}",
        first.files, first.directories, first.bytes_written, first.complete
    );

    let (mut floor, mut engine_t, mut send) = (vec![], vec![], vec![]);
    let mut items = 0u64;
    let mut search = TreeSearch::new();
    for round in 0..rounds {
        for which in (0..3).map(|k| (k + round) % 3) {
            match which {
                0 => {
                    let (d, n) = time(|| {
                        let mut n = 0u64;
                        let key = SearchKey {
                            tree_id: live_info.id,
                            min: (256, 0, 0),
                            max: (u64::MAX - 256, u8::MAX, u64::MAX),
                        };
                        search
                            .scan(btrfs_top.dir().as_fd(), key, since + 1, |_| {
                                n += 1;
                                ControlFlow::Continue(())
                            })
                            .expect("tree search");
                        n
                    });
                    items = n;
                    floor.push(d);
                }
                1 => engine_t.push(
                    time(|| {
                        engine
                            .changes_since(snap.name, Duration::from_secs(60), false, &mut |_| {})
                            .expect("changes")
                    })
                    .0,
                ),
                _ => send.push(
                    time(|| {
                        assert!(quiet(
                            "btrfs",
                            &["send", "-q", "--no-data", "-p", &path(&old), &path(&new)]
                        ))
                    })
                    .0,
                ),
            }
        }
    }
    let mut snapper_t = vec![];
    if snapper_ok {
        for _ in 0..snapper_rounds {
            snapper_t.push(
                time(|| {
                    assert!(quiet(
                        "snapper",
                        &["--no-dbus", "-c", SNAPPER_CONFIG, "status", "1..0"]
                    ))
                })
                .0,
            );
        }
        // snapper as an oracle: its status lines by their first flag (+ created,
        // - deleted, c content, others metadata only).
        let out = Command::new("snapper")
            .args(["--no-dbus", "-c", SNAPPER_CONFIG, "status", "1..0"])
            .output()
            .expect("snapper status");
        let text = String::from_utf8_lossy(&out.stdout);
        let by = |flag: char| text.lines().filter(|l| l.starts_with(flag)).count();
        println!(
            "snapper status 1..0 lists {} paths: {} created, {} deleted, {} with content changed, \
             the rest metadata only",
            text.lines().count(),
            by('+'),
            by('-'),
            by('c')
        );
        let _ = quiet(
            "snapper",
            &["--no-dbus", "-c", SNAPPER_CONFIG, "delete-config"],
        );
    }

    let f = median(floor);
    let e = median(engine_t);
    let s = median(send);
    println!(
        "what changed since a snapshot: 100k files, 1000 changes (median of {rounds}, \
         interleaved; snapper median of {snapper_rounds})"
    );
    println!(
        "  raw tree search (F, {items} items)   {}  {}",
        ms(f),
        ratio(f, f)
    );
    println!(
        "  engine changes_since               {}  {}   (includes a commit)",
        ms(e),
        ratio(e, f)
    );
    println!(
        "  btrfs send --no-data -p            {}  {}   engine is {:.1}× faster",
        ms(s),
        ratio(s, f),
        s.as_secs_f64() / e.as_secs_f64()
    );
    if !snapper_t.is_empty() {
        let sn = median(snapper_t);
        println!(
            "  snapper status 1..0                {}  {}   engine is {:.1}× faster; target ≥ 10×",
            ms(sn),
            ratio(sn, f),
            sn.as_secs_f64() / e.as_secs_f64()
        );
    }
    drop(fs);
}

fn path(p: &Path) -> String {
    p.to_str().expect("a UTF-8 path").to_owned()
}
