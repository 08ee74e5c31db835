//! The health report as metrics for node_exporter's textfile collector (Prometheus' text
//! format, in the OpenMetrics conventions: freshness as `_timestamp_seconds`, sizes in
//! `_bytes`, failures as `_total` counters, labels for subvolume and target; adr/0028).
//! Here, not in the CLI, because both write them: the keeper after every scheduled act and
//! on its own schedule, the timers' units as root after each run.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use crate::health::{HealthReport, FAIL, OK, WARN};

/// Microseconds as seconds since the epoch; `None` for 0 (never).
fn seconds(micros: i64) -> Option<f64> {
    (micros != 0).then(|| micros as f64 / 1e6)
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
/// readable by everybody (node_exporter runs as its own user). The temporary file is made
/// new (`O_EXCL`, which never follows a link planted under its name: root writes here, in
/// a directory others may write in), and the rename replaces a link, never follows it.
pub fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the metrics file needs a file name"))?;
    let mut attempt = 0u32;
    let (temp, mut f) = loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        // node_exporter reads only `*.prom`: the temporary name is not one.
        let temp = dir.join(format!(
            ".{}.tmp-{}-{nanos}-{attempt}",
            name.to_string_lossy(),
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&temp)
        {
            Ok(f) => break (temp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    let written = f
        .write_all(text.as_bytes())
        .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(0o644)))
        .and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|()| std::fs::rename(&temp, path)) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_planted_under_the_metrics_name_is_replaced_not_followed() {
        let dir = std::env::temp_dir().join(format!("tacid-metrics-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let prom = dir.join("tacid.prom");
        std::os::unix::fs::symlink(&victim, &prom).unwrap();
        write_file(&prom, "tacid_health_level 0\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&prom).unwrap().is_file());
        assert_eq!(
            std::fs::read_to_string(&prom).unwrap(),
            "tacid_health_level 0\n"
        );
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
