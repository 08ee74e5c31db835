//! Retention figures on one loop Btrfs, in one run (adr/0013):
//!
//! - `tacid data prune` deleting 999 of 1000 timeline snapshots (CLI → keeper → stem,
//!   journalled) against `snapper cleanup number` deleting 999 of 1000 snapper snapshots of
//!   the same subvolume on the same filesystem; target: tacid ≥ 10× faster.
//! - The request-path cost of a delete: the keeper's `Delete` over the bus (client's view,
//!   no process start), and the stem engine's own `delete`; target ≤ 2 ms.
//!
//! Run (root): `cargo build --release -p stem -p tacid-cli --bins &&
//! cargo bench -p keeper --bench prune`.

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

const COUNT: usize = 1000;
const SNAPPER_CONFIG: &str = "tacid-prune-bench";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn snapper(args: &[&str]) -> bool {
    Command::new("snapper")
        .args(["--no-dbus", "-c", SNAPPER_CONFIG])
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A run cut short leaves its snapper config behind, naming a filesystem that is gone, and
/// snapper then refuses to create it again; snapper cannot delete it either (its
/// subvolume is gone), so its two records are removed by hand.
fn forget_stale_snapper_config() {
    let config = std::path::Path::new("/etc/snapper/configs").join(SNAPPER_CONFIG);
    if !config.exists() {
        return;
    }
    eprintln!("bench: removing the snapper config {SNAPPER_CONFIG} an earlier run left");
    let _ = std::fs::remove_file(&config);
    let default = std::path::Path::new("/etc/default/snapper");
    if let Ok(text) = std::fs::read_to_string(default) {
        let cleaned: String = text
            .lines()
            .map(|line| match line.strip_prefix("SNAPPER_CONFIGS=") {
                Some(list) => {
                    let kept: Vec<&str> = list
                        .trim_matches('"')
                        .split_whitespace()
                        .filter(|name| *name != SNAPPER_CONFIG)
                        .collect();
                    format!("SNAPPER_CONFIGS=\"{}\"\n", kept.join(" "))
                }
                None => format!("{line}\n"),
            })
            .collect();
        let _ = std::fs::write(default, cleaned);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let Some(mut w) = common::World::start() else {
        return;
    };
    w.stop_keeper_and_set_args(common::KEEP_ONLY_THE_NEWEST_HOURLY);
    // The keeper starts once the journal is written below: it holds it exclusively.
    let persist = layout::SubvolumeName::parse("@persist").expect("layout");
    let engine = stem::Engine::open(w.top()).expect("engine");

    // tacid: 1000 timeline sets of one member, journalled as the keeper journals them.
    let taken: Vec<_> = (0..COUNT)
        .map(|_| engine.take(persist).expect("take"))
        .collect();
    w.journal_timeline_sets(&taken);
    w.start_keeper(None);

    // snapper: 1000 snapshots of the same subvolume, cleaned up by its number rule.
    forget_stale_snapper_config();
    let snapper_ok = snapper(&["create-config", &w.top().join("@persist").to_string_lossy()])
        && snapper(&[
            "set-config",
            "NUMBER_LIMIT=1",
            "NUMBER_LIMIT_IMPORTANT=0",
            "NUMBER_MIN_AGE=0",
        ]);
    if snapper_ok {
        for _ in 0..COUNT {
            assert!(
                snapper(&["create", "--cleanup-algorithm", "number"]),
                "snapper create"
            );
        }
    } else {
        eprintln!(
            "bench: SNAPPER IS NOT USABLE HERE (apt-get install snapper); no ratio against it"
        );
    }
    Command::new("sync").status().expect("sync");

    let t = Instant::now();
    let out = w.tacid_as_root(&["data", "prune", "--json"]);
    let tacid = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let deleted = report["deleted"].as_array().expect("deleted").len();
    println!(
        "tacid data prune: {deleted} snapshots in {:.1} ms ({:.3} ms each)",
        tacid.as_secs_f64() * 1e3,
        tacid.as_secs_f64() * 1e3 / deleted as f64
    );
    if snapper_ok {
        let t = Instant::now();
        assert!(snapper(&["cleanup", "number"]), "snapper cleanup");
        let s = t.elapsed();
        println!(
            "snapper cleanup number: {COUNT} → 1 in {:.1} ms; tacid is {:.1}× faster (target ≥ 10×)",
            s.as_secs_f64() * 1e3,
            s.as_secs_f64() / tacid.as_secs_f64()
        );
        snapper(&["delete-config"]);
    }

    // The request path of one delete.
    const ROUNDS: usize = 50;
    let home = layout::SubvolumeName::parse("@home").expect("layout");
    let victims: Vec<_> = (0..2 * ROUNDS)
        .map(|_| engine.take(home).expect("take"))
        .collect();
    let mut stem_side = Vec::new();
    for v in &victims[..ROUNDS] {
        let t = Instant::now();
        engine.delete(v.name).expect("engine delete");
        stem_side.push(t.elapsed());
    }
    let root = w.keeper_as_root();
    let over_bus = root.run(async {
        let keeper = &root.proxy;
        // The keeper learns of them through its reconciliation (unknown origin): list once.
        keeper.list().await.expect("list");
        let mut times = Vec::new();
        for v in &victims[ROUNDS..] {
            let t = Instant::now();
            keeper.delete(&v.name.to_string()).await.expect("delete");
            times.push(t.elapsed());
        }
        times
    });
    println!(
        "delete, request path (median of {ROUNDS}): stem engine {:.3} ms; keeper Delete over the bus {:.3} ms (target ≤ 2 ms)",
        median(stem_side).as_secs_f64() * 1e3,
        median(over_bus).as_secs_f64() * 1e3
    );
}
