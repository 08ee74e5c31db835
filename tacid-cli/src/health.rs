//! `tacid data health`: the keeper's report as lines for people, as JSON for programs, and
//! as metrics for node_exporter's textfile collector (Prometheus' text format, in the
//! OpenMetrics conventions: freshness as `_timestamp_seconds`, sizes in `_bytes`, failures
//! as `_total` counters, labels for subvolume and target; adr/0028).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use keeper_interface::health::{HealthReport, FAIL, OK, WARN};
use serde::Serialize;

use crate::cli::exit;

/// The exit code for a report's level.
pub fn exit_code(r: &HealthReport) -> u8 {
    match r.level.as_str() {
        OK => exit::OK,
        WARN => exit::HEALTH_WARN,
        _ => exit::HEALTH_FAIL,
    }
}

/// The report for people: the level, then each finding, worst first, with what to do.
pub fn text(r: &HealthReport) -> String {
    let mut out = String::new();
    let head = match r.level.as_str() {
        OK => "tacid health: ok",
        WARN => "tacid health: WARNING",
        FAIL => "tacid health: FAILING",
        other => other,
    };
    let _ = writeln!(out, "{head}");
    for f in &r.findings {
        let mark = match f.level.as_str() {
            OK => "ok  ",
            WARN => "WARN",
            _ => "FAIL",
        };
        let _ = writeln!(out, "{mark} {}", f.says);
        if !f.todo.is_empty() {
            let _ = writeln!(out, "     what to do: {}", f.todo);
        }
    }
    out
}

/// Microseconds as seconds since the epoch; `None` for 0 (never).
fn seconds(micros: i64) -> Option<f64> {
    (micros != 0).then(|| micros as f64 / 1e6)
}

fn text_or_null(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// `tacid data health --json`.
#[derive(Debug, Serialize)]
pub struct Json<'a> {
    /// `ok`, `warn` or `fail`; the exit code says the same (0, 16, 17).
    level: &'a str,
    exit_code: u8,
    now_micros: i64,
    findings: Vec<JsonFinding<'a>>,
    subvolumes: Vec<JsonSubvolume<'a>>,
    targets: Vec<JsonTarget<'a>>,
    /// `null`, with the sizes: the stem did not answer.
    free_bytes: Option<u64>,
    size_bytes: Option<u64>,
    floor_bytes: u64,
    hard_floor_bytes: Option<u64>,
    /// `null`: the free space does not fall (or too little is recorded to say).
    falling_bytes_per_day: Option<u64>,
    days_left: Option<f64>,
    /// `null`: never.
    timeline_last_run_micros: Option<i64>,
    timeline_last_failure_micros: Option<i64>,
    timeline_last_failure: Option<&'a str>,
    timer_failures: u64,
}

#[derive(Debug, Serialize)]
struct JsonFinding<'a> {
    level: &'a str,
    kind: &'a str,
    about: Option<&'a str>,
    says: &'a str,
    todo: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct JsonSubvolume<'a> {
    subvolume: &'a str,
    of_path: &'a str,
    newest_micros: Option<i64>,
    newest_name: Option<&'a str>,
    newest_pre_switch_micros: Option<i64>,
}

#[derive(Debug, Serialize)]
struct JsonTarget<'a> {
    target: &'a str,
    sealed: bool,
    copies: Vec<JsonCopy<'a>>,
    last_failure_micros: Option<i64>,
    last_failure: Option<&'a str>,
    last_success_micros: Option<i64>,
    last_verified_micros: Option<i64>,
    verify_failed: u32,
    failures: u64,
}

#[derive(Debug, Serialize)]
struct JsonCopy<'a> {
    subvolume: &'a str,
    of_path: &'a str,
    newest_micros: Option<i64>,
    newest_name: Option<&'a str>,
}

fn micros(m: i64) -> Option<i64> {
    (m != 0).then_some(m)
}

impl<'a> From<&'a HealthReport> for Json<'a> {
    fn from(r: &'a HealthReport) -> Self {
        Json {
            level: &r.level,
            exit_code: exit_code(r),
            now_micros: r.now_micros,
            findings: r
                .findings
                .iter()
                .map(|f| JsonFinding {
                    level: &f.level,
                    kind: &f.kind,
                    about: text_or_null(&f.about),
                    says: &f.says,
                    todo: text_or_null(&f.todo),
                })
                .collect(),
            subvolumes: r
                .subvolumes
                .iter()
                .map(|s| JsonSubvolume {
                    subvolume: &s.subvolume,
                    of_path: &s.of_path,
                    newest_micros: micros(s.newest_micros),
                    newest_name: text_or_null(&s.newest_name),
                    newest_pre_switch_micros: micros(s.newest_pre_switch_micros),
                })
                .collect(),
            targets: r
                .targets
                .iter()
                .map(|t| JsonTarget {
                    target: &t.target,
                    sealed: t.sealed,
                    copies: t
                        .copies
                        .iter()
                        .map(|c| JsonCopy {
                            subvolume: &c.subvolume,
                            of_path: &c.of_path,
                            newest_micros: micros(c.newest_micros),
                            newest_name: text_or_null(&c.newest_name),
                        })
                        .collect(),
                    last_failure_micros: micros(t.last_failure_micros),
                    last_failure: text_or_null(&t.last_failure),
                    last_success_micros: micros(t.last_success_micros),
                    last_verified_micros: micros(t.last_verified_micros),
                    verify_failed: t.verify_failed,
                    failures: t.failures,
                })
                .collect(),
            free_bytes: r.space_known.then_some(r.free_bytes),
            size_bytes: r.space_known.then_some(r.size_bytes),
            floor_bytes: r.floor_bytes,
            hard_floor_bytes: r.space_known.then_some(r.hard_floor_bytes),
            falling_bytes_per_day: (r.falling_bytes_per_day > 0).then_some(r.falling_bytes_per_day),
            days_left: (r.days_left >= 0.0).then_some(r.days_left),
            timeline_last_run_micros: micros(r.timeline_last_run_micros),
            timeline_last_failure_micros: micros(r.timeline_last_failure_micros),
            timeline_last_failure: text_or_null(&r.timeline_last_failure),
            timer_failures: r.timer_failures,
        }
    }
}

/// A label value, escaped as the text format wants (`\\`, `\"`, `\n`).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Metrics(String);

impl Metrics {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let labels = if labels.is_empty() {
            String::new()
        } else {
            let inner: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", label(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        };
        let _ = writeln!(self.0, "{name}{labels} {value}");
    }
}

/// The report as metrics for node_exporter's textfile collector. A time never reached is
/// left out (no sample), never written as 0.
pub fn metrics(r: &HealthReport) -> String {
    let mut m = Metrics(String::new());
    m.family(
        "tacid_health_level",
        "gauge",
        "The health of tacid's data rollback: 0 ok, 1 warn, 2 fail (tacid data health).",
    );
    let level = match r.level.as_str() {
        OK => 0.0,
        WARN => 1.0,
        _ => 2.0,
    };
    m.sample("tacid_health_level", &[], level);
    m.family(
        "tacid_health_findings",
        "gauge",
        "Findings of tacid data health, by level.",
    );
    for l in [OK, WARN, FAIL] {
        let n = r.findings.iter().filter(|f| f.level == l).count();
        m.sample("tacid_health_findings", &[("level", l)], n as f64);
    }
    m.family(
        "tacid_snapshot_newest_timestamp_seconds",
        "gauge",
        "When the newest snapshot of the subvolume was taken.",
    );
    for s in &r.subvolumes {
        if let Some(t) = seconds(s.newest_micros) {
            let l = [
                ("subvolume", s.subvolume.as_str()),
                ("mount_point", s.of_path.as_str()),
            ];
            m.sample("tacid_snapshot_newest_timestamp_seconds", &l, t);
        }
    }
    m.family(
        "tacid_snapshot_pre_switch_newest_timestamp_seconds",
        "gauge",
        "When the newest snapshot of the subvolume taken before a switch was taken.",
    );
    for s in &r.subvolumes {
        if let Some(t) = seconds(s.newest_pre_switch_micros) {
            let l = [
                ("subvolume", s.subvolume.as_str()),
                ("mount_point", s.of_path.as_str()),
            ];
            m.sample("tacid_snapshot_pre_switch_newest_timestamp_seconds", &l, t);
        }
    }
    m.family(
        "tacid_timeline_last_run_timestamp_seconds",
        "gauge",
        "When the timeline timer last ran (took its set or failed).",
    );
    if let Some(t) = seconds(r.timeline_last_run_micros) {
        m.sample("tacid_timeline_last_run_timestamp_seconds", &[], t);
    }
    m.family(
        "tacid_timer_failures_total",
        "counter",
        "Runs of tacid's timers (timeline and copies) that failed, as journalled.",
    );
    m.sample("tacid_timer_failures_total", &[], r.timer_failures as f64);
    m.family(
        "tacid_copy_newest_timestamp_seconds",
        "gauge",
        "When the snapshot of the newest copy of the subvolume on the target was taken.",
    );
    for t in &r.targets {
        for c in &t.copies {
            if let Some(s) = seconds(c.newest_micros) {
                let l = [
                    ("target", t.target.as_str()),
                    ("subvolume", c.subvolume.as_str()),
                    ("mount_point", c.of_path.as_str()),
                ];
                m.sample("tacid_copy_newest_timestamp_seconds", &l, s);
            }
        }
    }
    m.family(
        "tacid_copy_last_success_timestamp_seconds",
        "gauge",
        "When a copy to the target last worked.",
    );
    for t in &r.targets {
        if let Some(s) = seconds(t.last_success_micros) {
            m.sample(
                "tacid_copy_last_success_timestamp_seconds",
                &[("target", t.target.as_str())],
                s,
            );
        }
    }
    m.family(
        "tacid_copy_last_failure_timestamp_seconds",
        "gauge",
        "When a copy to the target last failed, if it did since the last that worked.",
    );
    for t in &r.targets {
        if let Some(s) = seconds(t.last_failure_micros) {
            m.sample(
                "tacid_copy_last_failure_timestamp_seconds",
                &[("target", t.target.as_str())],
                s,
            );
        }
    }
    m.family(
        "tacid_copy_failures_total",
        "counter",
        "Copies to the target that failed, as journalled.",
    );
    for t in &r.targets {
        m.sample(
            "tacid_copy_failures_total",
            &[("target", t.target.as_str())],
            t.failures as f64,
        );
    }
    m.family(
        "tacid_copy_last_verified_timestamp_seconds",
        "gauge",
        "When the copies on a sealed target were last read back and checked.",
    );
    for t in &r.targets {
        if let Some(s) = seconds(t.last_verified_micros) {
            m.sample(
                "tacid_copy_last_verified_timestamp_seconds",
                &[("target", t.target.as_str())],
                s,
            );
        }
    }
    m.family(
        "tacid_copy_verify_failed",
        "gauge",
        "Copies on the target that failed their last verification.",
    );
    for t in &r.targets {
        m.sample(
            "tacid_copy_verify_failed",
            &[("target", t.target.as_str())],
            f64::from(t.verify_failed),
        );
    }
    if r.space_known {
        for (name, help, v) in [
            (
                "tacid_free_bytes",
                "Free bytes on the tacid filesystem.",
                r.free_bytes,
            ),
            (
                "tacid_size_bytes",
                "Size of the tacid filesystem in bytes.",
                r.size_bytes,
            ),
            (
                "tacid_floor_bytes",
                "Below this many free bytes retention deletes the oldest automatic snapshots.",
                r.floor_bytes,
            ),
            (
                "tacid_hard_floor_bytes",
                "Below this many free bytes snapshots are refused.",
                r.hard_floor_bytes,
            ),
            (
                "tacid_free_falling_bytes_per_day",
                "How fast the free space fell over the recent window, bytes a day.",
                r.falling_bytes_per_day,
            ),
        ] {
            m.family(name, "gauge", help);
            m.sample(name, &[], v as f64);
        }
    }
    m.0
}

/// Write `text` to `path` durably and at once (a temporary file beside it, fsync, rename),
/// readable by everybody (node_exporter runs as its own user).
pub fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the metrics file needs a file name"))?;
    // node_exporter reads only `*.prom`: the temporary name is not one.
    let temp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&temp)?;
    f.write_all(text.as_bytes())?;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&temp, path)?;
    std::fs::File::open(dir)?.sync_all()
}
