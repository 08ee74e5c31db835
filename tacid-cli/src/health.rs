//! `tacid data health`: the keeper's report as lines for people and as JSON for programs;
//! its metrics are `keeper_interface::metrics` (the keeper writes them too).

use std::fmt::Write as _;

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
