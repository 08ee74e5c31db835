//! `tacid data space`: which snapshot holds the disk (adr/0029), for people and as JSON.

use std::fmt::Write as _;

use keeper_interface::space::SpaceReport;
use layout::human::bytes;
use serde::Serialize;

/// What is counted, said under every answer.
pub const COUNTED: &str = "Counted: file data on disk (compressed size; an extent whole while \
anything still uses part of it), from the file extents, without quotas. Not counted: the \
filesystem's metadata and small files stored inside it.";

/// The report for people.
pub fn text(r: &SpaceReport) -> String {
    let mut out = String::new();
    if r.snapshots.is_empty() {
        let _ = writeln!(out, "No snapshot to show.");
    } else {
        let _ = writeln!(
            out,
            "Snapshots, oldest first. FREES: what deleting it frees now; SHARED: what it holds \
             with others; NEW: what it holds that the one before it did not."
        );
        let width = r.snapshots.iter().map(|s| s.name.len()).max().unwrap_or(4);
        let _ = writeln!(
            out,
            "  {:width$}  {:>10}  {:>10}  {:>10}",
            "NAME", "FREES", "SHARED", "NEW"
        );
        for s in &r.snapshots {
            let new = if s.has_previous {
                bytes(s.new_bytes)
            } else {
                "-".to_owned()
            };
            let _ = writeln!(
                out,
                "  {:width$}  {:>10}  {:>10}  {:>10}",
                s.name,
                bytes(s.exclusive_bytes),
                bytes(s.shared_bytes),
                new
            );
        }
    }
    let _ = writeln!(out);
    for v in &r.subvolumes {
        let growth = if v.has_growth {
            format!(
                "; its snapshots grow {} a day",
                bytes(v.growth_bytes_per_day)
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{}: {} snapshot{}, holding {} only they hold; live {} ({} only it){growth}.",
            v.subvolume,
            v.snapshots,
            if v.snapshots == 1 { "" } else { "s" },
            bytes(v.snapshots_exclusive_bytes),
            bytes(v.live_bytes),
            bytes(v.live_exclusive_bytes),
        );
    }
    let _ = writeln!(
        out,
        "The snapshots alone hold {}: deleting every one of them frees that (of {} measured).",
        bytes(r.store_bytes),
        bytes(r.total_bytes)
    );
    if r.hidden > 0 {
        let _ = writeln!(
            out,
            "{} snapshot{} of /home {} shown in their total only: one by one they would show \
             what people wrote; root and the approver group see them.",
            r.hidden,
            if r.hidden == 1 { "" } else { "s" },
            if r.hidden == 1 { "is" } else { "are" },
        );
    }
    if !r.complete {
        let _ = writeln!(
            out,
            "NOT COMPLETE: measuring took longer than the keeper waits, so no number above can \
             be relied on. What was measured is kept: ask again and it gets further."
        );
    }
    let _ = writeln!(out, "{COUNTED}");
    out
}

/// `tacid data space --json`.
#[derive(Debug, Serialize)]
pub struct Json<'a> {
    snapshots: Vec<JsonSnapshot<'a>>,
    subvolumes: Vec<JsonSubvolume<'a>>,
    store_bytes: u64,
    total_bytes: u64,
    /// False: no number may be relied on; asking again gets further.
    complete: bool,
    /// Snapshots of /home left out for somebody who may only look.
    hidden: u32,
}

#[derive(Debug, Serialize)]
struct JsonSnapshot<'a> {
    name: &'a str,
    of: &'a str,
    taken_micros: i64,
    exclusive_bytes: u64,
    shared_bytes: u64,
    /// `null` for the oldest snapshot of its subvolume.
    new_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct JsonSubvolume<'a> {
    subvolume: &'a str,
    snapshots: u32,
    snapshots_exclusive_bytes: u64,
    live_bytes: u64,
    live_exclusive_bytes: u64,
    /// `null` with fewer than two snapshots.
    growth_bytes_per_day: Option<u64>,
}

impl<'a> From<&'a SpaceReport> for Json<'a> {
    fn from(r: &'a SpaceReport) -> Self {
        Json {
            snapshots: r
                .snapshots
                .iter()
                .map(|s| JsonSnapshot {
                    name: &s.name,
                    of: &s.of,
                    taken_micros: s.taken_micros,
                    exclusive_bytes: s.exclusive_bytes,
                    shared_bytes: s.shared_bytes,
                    new_bytes: s.has_previous.then_some(s.new_bytes),
                })
                .collect(),
            subvolumes: r
                .subvolumes
                .iter()
                .map(|v| JsonSubvolume {
                    subvolume: &v.subvolume,
                    snapshots: v.snapshots,
                    snapshots_exclusive_bytes: v.snapshots_exclusive_bytes,
                    live_bytes: v.live_bytes,
                    live_exclusive_bytes: v.live_exclusive_bytes,
                    growth_bytes_per_day: v.has_growth.then_some(v.growth_bytes_per_day),
                })
                .collect(),
            store_bytes: r.store_bytes,
            total_bytes: r.total_bytes,
            complete: r.complete,
            hidden: r.hidden,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keeper_interface::space::{SnapshotSpace, SubvolumeSpace};

    fn report(complete: bool, hidden: u32) -> SpaceReport {
        SpaceReport {
            snapshots: vec![
                SnapshotSpace {
                    name: "@persist.2026-12-01T140200.123456Z".into(),
                    of: "/persist".into(),
                    taken_micros: 1,
                    exclusive_bytes: 3 << 20,
                    shared_bytes: 1 << 30,
                    new_bytes: 0,
                    has_previous: false,
                },
                SnapshotSpace {
                    name: "@persist.2026-12-02T140200.123456Z".into(),
                    of: "/persist".into(),
                    taken_micros: 2,
                    exclusive_bytes: 0,
                    shared_bytes: 1 << 30,
                    new_bytes: 5 << 20,
                    has_previous: true,
                },
            ],
            subvolumes: vec![SubvolumeSpace {
                subvolume: "/persist".into(),
                snapshots: 2,
                snapshots_exclusive_bytes: 3 << 20,
                live_bytes: 2 << 30,
                live_exclusive_bytes: 1 << 30,
                growth_bytes_per_day: 5 << 20,
                has_growth: true,
            }],
            store_bytes: 3 << 20,
            total_bytes: 3 << 30,
            complete,
            hidden,
        }
    }

    #[test]
    fn people_read_what_each_frees_and_how_fast_they_grow() {
        let t = text(&report(true, 0));
        assert!(
            t.contains("@persist.2026-12-01T140200.123456Z     3.0 MiB"),
            "{t}"
        );
        assert!(t.contains("5.0 MiB a day"), "{t}");
        assert!(t.contains("deleting every one of them frees that"), "{t}");
        assert!(
            !t.contains("NOT COMPLETE") && !t.contains("in their total only"),
            "{t}"
        );
        let t = text(&report(false, 2));
        assert!(t.contains("NOT COMPLETE"), "{t}");
        assert!(
            t.contains("2 snapshots of /home are shown in their total only"),
            "{t}"
        );
    }

    #[test]
    fn json_says_unknown_as_null() {
        let r = report(true, 0);
        let v = serde_json::to_value(Json::from(&r)).expect("json");
        assert_eq!(v["snapshots"][0]["new_bytes"], serde_json::Value::Null);
        assert_eq!(v["snapshots"][1]["new_bytes"], 5 << 20);
        assert_eq!(v["subvolumes"][0]["growth_bytes_per_day"], 5 << 20);
    }
}
