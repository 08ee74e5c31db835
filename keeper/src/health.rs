//! Health (`tacid data health`, adr/0028): how old the newest snapshot and copy of each
//! subvolume are, what failed, and what to do, each finding one line with its level; and
//! whether health worsened since the keeper last looked, for its signal.
//!
//! The facts are gathered from the journal and the stem ([`Health::report`]); judging them
//! is pure ([`judge`]): times are given in, so tests need no clock. The keeper's clock for
//! health is the system's; a `test-hooks` build reads it from the file
//! `TACID_TEST_CLOCK_FILE` names (unix seconds) when it is set, so the bus tier moves time
//! past a threshold without sleeping.

use std::sync::Mutex;
use std::time::SystemTime;

use layout::copies::CopiesConfig;
use layout::defaults as d;
use layout::escape::escape;
use layout::human::unix_micros;
use layout::{names, SnapshotName, SubvolumeName};
use std::sync::Arc;

use crate::handles::Handles;
use crate::journal::{LastVerification, Newest, TargetActs, TimelineRuns};
use crate::stem_client::StagedOnDisk;
use crate::wire::health::{
    Finding, HealthReport, SubvolumeHealth, TargetCopyAge, TargetHealth, FAIL, OK, WARN,
};
use crate::wire::KeeperError;
use crate::words::of_path;

const MICROS: i64 = 1_000_000;
const DAY: i64 = 86_400 * MICROS;

/// The thresholds, in seconds (defaults: `layout::defaults::HEALTH_*`, derived from the
/// timers' schedules; the module sets each from `services.tacid.health.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthPolicy {
    pub snapshot_warn_secs: u64,
    pub snapshot_fail_secs: u64,
    pub copy_warn_secs: u64,
    pub copy_fail_secs: u64,
    pub verify_warn_secs: u64,
    pub staged_wait_secs: u64,
    pub days_left_warn: u64,
    pub days_left_fail: u64,
    /// The timeline timer takes a set every hour (`--timeline true`, the default). When it
    /// only prunes (NixOS: `services.tacid.retention.timeline = false`), snapshots are taken
    /// before switches and by hand: their age is no finding, only the lack of any
    /// (adr/0028).
    pub timeline: bool,
    /// Where the keeper writes the report as metrics (node_exporter's textfile collector)
    /// after every scheduled act and every `HEALTH_CHECK_EVERY_SECS`; `None`: nowhere.
    pub metrics_file: Option<std::path::PathBuf>,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            snapshot_warn_secs: d::HEALTH_SNAPSHOT_WARN_SECS,
            snapshot_fail_secs: d::HEALTH_SNAPSHOT_FAIL_SECS,
            copy_warn_secs: d::HEALTH_COPY_WARN_SECS,
            copy_fail_secs: d::HEALTH_COPY_FAIL_SECS,
            verify_warn_secs: d::HEALTH_VERIFY_WARN_SECS,
            staged_wait_secs: d::HEALTH_STAGED_WAIT_SECS,
            days_left_warn: d::HEALTH_DAYS_LEFT_WARN,
            days_left_fail: d::HEALTH_DAYS_LEFT_FAIL,
            timeline: true,
            metrics_file: None,
        }
    }
}

/// A level, ordered: ok < warn < fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    #[default]
    Ok,
    Warn,
    Fail,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => OK,
            Level::Warn => WARN,
            Level::Fail => FAIL,
        }
    }

    pub fn parse(text: &str) -> Level {
        match text {
            WARN => Level::Warn,
            FAIL => Level::Fail,
            _ => Level::Ok,
        }
    }
}

/// The keeper's clock for health: the system's, or in a `test-hooks` build the unix seconds
/// in the file `TACID_TEST_CLOCK_FILE` names, when it names one that holds a number.
pub fn now() -> SystemTime {
    #[cfg(feature = "test-hooks")]
    if let Some(path) = std::env::var_os("TACID_TEST_CLOCK_FILE") {
        if let Some(secs) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
        {
            return SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        }
    }
    SystemTime::now()
}

/// A copy target, as health sees it.
#[derive(Debug, Clone)]
pub struct TargetFacts {
    pub name: String,
    pub sealed: bool,
    pub acts: TargetActs,
    pub verified: Option<LastVerification>,
    /// Its own thresholds (derived from its timer's schedule), else the policy's.
    pub thresholds: Option<layout::copies::TargetHealth>,
}

/// An open snapshot, as health sees it.
#[derive(Debug, Clone)]
pub struct OpenFacts {
    pub name: String,
    pub path: String,
    pub opened_micros: i64,
    pub idle_close_micros: i64,
}

/// The free space, as the stem said.
#[derive(Debug, Clone, Copy)]
pub struct SpaceFacts {
    pub free_bytes: u64,
    pub size_bytes: u64,
    pub hard_floor_bytes: u64,
}

/// Everything health judges, gathered.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub now_micros: i64,
    pub newest: Vec<Newest>,
    pub newest_pre_switch: Vec<Newest>,
    pub timeline: TimelineRuns,
    pub targets: Vec<TargetFacts>,
    /// `None`: the stem did not answer.
    pub space: Option<SpaceFacts>,
    pub floor_bytes: u64,
    /// The free space recorded over the recent window, oldest first.
    pub samples: Vec<(i64, u64)>,
    /// The staged restore: where it puts back (`/home /persist`) and when it was staged
    /// (0: not journalled).
    pub staged: Option<(String, i64)>,
    pub bad_request: Option<String>,
    pub opens: Vec<OpenFacts>,
}

/// The health service: gathers, judges, and remembers the level it last found.
#[derive(Debug)]
pub struct Health {
    h: Handles,
    policy: HealthPolicy,
    floor_bytes: u64,
    config: Arc<CopiesConfig>,
    last: Mutex<Seen>,
}

/// Health worsened: the worst level among what is new, and those findings, for the
/// keeper's signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worsened {
    pub level: Level,
    pub says: String,
}

/// What the keeper last found wrong: each finding at `warn` or above, by its kind and what
/// it is about, at the worst level any finding of that pair had.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    bad: std::collections::BTreeMap<(String, String), Level>,
}

impl Seen {
    /// The findings of `report` at `warn` or above.
    pub fn of(report: &HealthReport) -> Seen {
        let mut bad = std::collections::BTreeMap::new();
        for f in &report.findings {
            let level = Level::parse(&f.level);
            if level >= Level::Warn {
                let at = bad
                    .entry((f.kind.clone(), f.about.clone()))
                    .or_insert(level);
                *at = (*at).max(level);
            }
        }
        Seen { bad }
    }
}

/// Did health worsen from `before` to `report`? Yes when a finding (a kind about a thing)
/// is at `warn` or above and was not before, or is now at a higher level than it was: not
/// only when the report's level rises, so a machine already warning about one thing still
/// signals that snapshots stopped, or that a disk is filling, when it begins. Pure.
pub fn worsened(before: &Seen, report: &HealthReport) -> (Seen, Option<Worsened>) {
    let now = Seen::of(report);
    let rose = |f: &Finding| {
        let level = Level::parse(&f.level);
        level >= Level::Warn
            && before
                .bad
                .get(&(f.kind.clone(), f.about.clone()))
                .is_none_or(|was| level > *was)
    };
    let new: Vec<&Finding> = report.findings.iter().filter(|f| rose(f)).collect();
    let worsened = new
        .iter()
        .map(|f| Level::parse(&f.level))
        .max()
        .map(|level| Worsened {
            level,
            says: new
                .iter()
                .map(|f| {
                    if f.todo.is_empty() {
                        f.says.clone()
                    } else {
                        format!("{} {}", f.says, f.todo)
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
        });
    (now, worsened)
}

impl Health {
    pub fn new(
        h: Handles,
        policy: HealthPolicy,
        floor_bytes: u64,
        config: Arc<CopiesConfig>,
    ) -> Health {
        Health {
            h,
            policy,
            floor_bytes,
            config,
            last: Mutex::new(Seen::default()),
        }
    }

    pub fn policy(&self) -> &HealthPolicy {
        &self.policy
    }

    /// The report, for `uid` (anybody may ask; somebody who may not change takes turns with
    /// the other lookers), and whether health worsened since the keeper last looked.
    pub async fn report(&self, uid: u32) -> Result<(HealthReport, Option<Worsened>), KeeperError> {
        let _turn = self.h.looker_turn(self.h.may_change(uid)).await;
        self.check().await
    }

    /// Look now (after an act, or on the keeper's own schedule).
    pub async fn check(&self) -> Result<(HealthReport, Option<Worsened>), KeeperError> {
        let facts = self.gather().await?;
        let report = judge(&facts, &self.policy);
        let worsened = {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            let (now, worsened) = worsened(&last, &report);
            *last = now;
            worsened
        };
        Ok((report, worsened))
    }

    /// Write the report as metrics, when a file is configured: at once (a temporary file,
    /// fsync, rename), so node_exporter never reads half of it. A failure is logged and
    /// changes nothing else: the timers' units write the same file as root after each run.
    pub async fn write_metrics(&self, report: &HealthReport) {
        let Some(path) = self.policy.metrics_file.clone() else {
            return;
        };
        let text = crate::wire::metrics::metrics(report);
        let wrote = tokio::task::spawn_blocking(move || {
            crate::wire::metrics::write_file(&path, &text).map_err(|e| (path, e))
        })
        .await;
        match wrote {
            Ok(Ok(())) => {}
            Ok(Err((path, e))) => tracing::warn!(
                "cannot write the health metrics to {} ({e}); is the directory there and \
                 writable by the keeper's user?",
                path.display()
            ),
            Err(e) => tracing::warn!("writing the health metrics stopped: {e}"),
        }
    }

    async fn gather(&self) -> Result<Facts, KeeperError> {
        let now_micros = unix_micros(now());
        let staged = self.h.stem.staged_or_bad().await;
        let (staged, bad_request, stem_up) = match staged {
            Ok(StagedOnDisk::Request(r)) => (Some(r), None, true),
            Ok(StagedOnDisk::Nothing) => (None, None, true),
            Ok(StagedOnDisk::Bad(why)) => (None, Some(why), true),
            Err(_) => (None, None, false),
        };
        let space = if stem_up {
            self.h.stem.free_space().await.ok().map(|s| SpaceFacts {
                free_bytes: s.free_bytes,
                size_bytes: s.size_bytes,
                hard_floor_bytes: s.hard_floor_bytes,
            })
        } else {
            None
        };
        let opens = if stem_up {
            self.h
                .stem
                .open_snapshots()
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|o| OpenFacts {
                    name: o.name,
                    path: o.path,
                    opened_micros: o.opened_unix_micros,
                    idle_close_micros: o.idle_close_unix_micros,
                })
                .collect()
        } else {
            Vec::new()
        };
        let staged = match staged {
            Some(members) => {
                let names = crate::stem_client::snapshot_names(&members);
                let paths = members
                    .iter()
                    .map(|m| of_path(&m.subvolume))
                    .collect::<Vec<_>>()
                    .join(" ");
                let row = self.h.journal(move |j| j.staging_of(&names)).await?;
                Some((paths, row.map(|r| r.asked_micros).unwrap_or(0)))
            }
            None => None,
        };
        let targets: Vec<(String, bool, Option<layout::copies::TargetHealth>)> = self
            .config
            .targets
            .values()
            .map(|t| (t.name.as_str().to_owned(), t.is_sealed(), t.health))
            .collect();
        let free_now = space.map(|s| s.free_bytes);
        let mut facts = self
            .h
            .journal(move |j| {
                if let Some(free) = free_now {
                    j.record_free_space(
                        now_micros,
                        free,
                        d::HEALTH_SPACE_SAMPLE_SECS as i64 * MICROS,
                        2 * d::HEALTH_GROWTH_WINDOW_SECS as i64 * MICROS,
                    )?;
                }
                let verified = j.last_verifications()?;
                let mut t = Vec::new();
                for (name, sealed, thresholds) in targets {
                    let acts = j.target_acts(&name)?;
                    let v = verified.iter().find(|v| v.target == name).cloned();
                    t.push(TargetFacts {
                        name,
                        sealed,
                        acts,
                        verified: v,
                        thresholds,
                    });
                }
                Ok(Facts {
                    now_micros,
                    newest: j.newest_snapshots(false)?,
                    newest_pre_switch: j.newest_snapshots(true)?,
                    timeline: j.timeline_runs()?,
                    targets: t,
                    samples: j.free_space_since(
                        now_micros - d::HEALTH_GROWTH_WINDOW_SECS as i64 * MICROS,
                    )?,
                    ..Facts::default()
                })
            })
            .await?;
        facts.space = space;
        facts.floor_bytes = self.floor_bytes;
        facts.staged = staged;
        facts.bad_request = bad_request;
        facts.opens = opens;
        Ok(facts)
    }
}

/// An age in words: `45 minutes`, `3 hours`, `2 days`.
pub fn age_words(micros: i64) -> String {
    let secs = (micros / MICROS).max(0);
    let (n, unit) = if secs < 120 {
        (secs, "second")
    } else if secs < 2 * 3600 {
        (secs / 60, "minute")
    } else if secs < 2 * 86_400 {
        (secs / 3600, "hour")
    } else {
        (secs / 86_400, "day")
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

fn finding(level: Level, kind: &str, about: &str, says: String, todo: String) -> Finding {
    Finding {
        level: level.as_str().to_owned(),
        kind: kind.to_owned(),
        about: about.to_owned(),
        says,
        todo,
    }
}

/// The level of an age against a warning and a failing threshold (seconds).
fn by_age(age_micros: i64, warn_secs: u64, fail_secs: u64) -> Level {
    if age_micros > fail_secs as i64 * MICROS {
        Level::Fail
    } else if age_micros > warn_secs as i64 * MICROS {
        Level::Warn
    } else {
        Level::Ok
    }
}

/// The free space's fall, bytes a day, from the oldest sample of the window to now; 0 when
/// it did not fall or less than an hour is recorded.
pub fn falling_per_day(samples: &[(i64, u64)], now_micros: i64, free_now: u64) -> u64 {
    let Some(&(at, then)) = samples.first() else {
        return 0;
    };
    let span = now_micros - at;
    if span < 3600 * MICROS || then <= free_now {
        return 0;
    }
    let fell = (then - free_now) as f64;
    (fell * DAY as f64 / span as f64) as u64
}

/// Judge the facts. Pure.
pub fn judge(f: &Facts, p: &HealthPolicy) -> HealthReport {
    let now = f.now_micros;
    let mut out: Vec<Finding> = Vec::new();
    let timeline_unit = names::TIMELINE_UNIT;
    let timeline_timer = names::TIMELINE_TIMER;

    // Snapshots, per subvolume of the default set (the timeline's).
    let mut subvolumes = Vec::new();
    for s in SubvolumeName::default_snapshot_set() {
        let name = s.as_str();
        let path = s.display_path();
        let newest = f.newest.iter().find(|n| n.of_subvolume == name);
        let pre = f.newest_pre_switch.iter().find(|n| n.of_subvolume == name);
        subvolumes.push(SubvolumeHealth {
            subvolume: name.to_owned(),
            of_path: path.to_owned(),
            newest_micros: newest.map_or(0, |n| n.taken_micros),
            newest_name: newest.map(|n| n.name.clone()).unwrap_or_default(),
            newest_pre_switch_micros: pre.map_or(0, |n| n.taken_micros),
        });
        match newest {
            None if !p.timeline => out.push(finding(
                Level::Warn,
                "snapshot-age",
                path,
                format!("there is no snapshot of {path} yet, and the timeline is off: the first is taken before the next switch."),
                "`tacid data snapshot` takes one now, so there is something to go back to.".to_owned(),
            )),
            None => out.push(finding(
                Level::Warn,
                "snapshot-age",
                path,
                format!("there is no snapshot of {path} yet."),
                format!(
                    "{timeline_timer} takes the first within the hour; `tacid data snapshot` takes one now; check `systemctl status {timeline_timer}`."
                ),
            )),
            Some(n) if !p.timeline => out.push(finding(
                Level::Ok,
                "snapshot-age",
                path,
                format!(
                    "the newest snapshot of {path} is {} old ({}); the timeline is off, so snapshots are taken before switches and by hand.",
                    age_words(now - n.taken_micros),
                    n.name
                ),
                String::new(),
            )),
            Some(n) => {
                let age = now - n.taken_micros;
                let level = by_age(age, p.snapshot_warn_secs, p.snapshot_fail_secs);
                let says = format!(
                    "the newest snapshot of {path} is {} old ({}).",
                    age_words(age),
                    n.name
                );
                let todo = if level == Level::Ok {
                    String::new()
                } else {
                    format!(
                        "snapshots have stopped: see `systemctl status {timeline_timer}` and `journalctl -u {timeline_unit}`; `tacid data snapshot` takes one now."
                    )
                };
                out.push(finding(level, "snapshot-age", path, says, todo));
            }
        }
    }

    // The timeline timer: its last run failed, or it has not run when due.
    // With the timeline off the timer only prunes: it takes no set, so none is due.
    let t = &f.timeline;
    if !p.timeline {
        // No finding.
    } else if t.last_failure.at_micros > t.last_success.at_micros {
        let why = escape(t.last_failure.words.as_bytes());
        let todo = if why.contains("floor") || why.contains("space") {
            "free space on the disk (delete snapshots you do not need: `tacid data prune --dry-run` says what retention would delete), then `systemctl start tacid-timeline.service`.".to_owned()
        } else {
            format!("see `journalctl -u {timeline_unit}`, fix the cause, then `systemctl start {timeline_unit}`.")
        };
        out.push(finding(
            Level::Warn,
            "timeline-timer",
            timeline_timer,
            format!(
                "the timeline timer's last run, {} ago, failed: {why}",
                age_words(now - t.last_failure.at_micros)
            ),
            todo,
        ));
    } else if t.last_success.at_micros == 0 {
        out.push(finding(
            Level::Warn,
            "timeline-timer",
            timeline_timer,
            "the timeline timer has not taken a set yet.".to_owned(),
            format!("it runs hourly; if this stays, check `systemctl status {timeline_timer}` (enabled?) and `journalctl -u {timeline_unit}`."),
        ));
    } else {
        let age = now - t.last_success.at_micros;
        let level = by_age(age, p.snapshot_warn_secs, p.snapshot_fail_secs).min(Level::Warn);
        let says = format!(
            "the timeline timer last took a set {} ago{}.",
            age_words(age),
            if level == Level::Ok {
                ""
            } else {
                "; it is due hourly"
            }
        );
        let todo = if level == Level::Ok {
            String::new()
        } else {
            format!("it did not run when due: check `systemctl status {timeline_timer}` (enabled? the machine asleep?) and `journalctl -u {timeline_unit}`.")
        };
        out.push(finding(level, "timeline-timer", timeline_timer, says, todo));
    }

    // Copy targets.
    let mut targets = Vec::new();
    for tf in &f.targets {
        let tname = tf.name.as_str();
        let unit = format!("{}{tname}.service", names::COPY_UNIT_PREFIX);
        let mut copies = Vec::new();
        for s in SubvolumeName::default_snapshot_set() {
            let path = s.display_path();
            let newest = tf
                .acts
                .held
                .iter()
                .filter_map(|n| SnapshotName::parse(n).ok().map(|p| (p, n)))
                .filter(|(p, _)| p.subvolume().as_str() == s.as_str())
                .map(|(p, n)| (p.taken_unix_micros(), n.clone()))
                .max();
            copies.push(TargetCopyAge {
                subvolume: s.as_str().to_owned(),
                of_path: path.to_owned(),
                newest_micros: newest.as_ref().map_or(0, |n| n.0),
                newest_name: newest.as_ref().map(|n| n.1.clone()).unwrap_or_default(),
            });
            match newest {
                None => out.push(finding(
                    Level::Warn,
                    "copy-age",
                    tname,
                    format!("{tname} holds no copy of {path} yet."),
                    format!("its timer copies on its schedule; `tacid data copy --to {tname}` copies now; check `systemctl status {}{tname}.timer`.", names::COPY_UNIT_PREFIX),
                )),
                Some((taken, name)) => {
                    let age = now - taken;
                    let (warn, fail) = tf.thresholds.map_or(
                        (p.copy_warn_secs, p.copy_fail_secs),
                        |t| (t.copy_warn_secs, t.copy_fail_secs),
                    );
                    let level = by_age(age, warn, fail);
                    let todo = if level == Level::Ok {
                        String::new()
                    } else {
                        format!("copies to {tname} have stopped: see `journalctl -u {unit}`; plug in or reach the target, then `tacid data copy --to {tname}`.")
                    };
                    out.push(finding(
                        level,
                        "copy-age",
                        tname,
                        format!(
                            "the newest copy of {path} on {tname} is of a snapshot {} old ({name}).",
                            age_words(age)
                        ),
                        todo,
                    ));
                }
            }
        }
        let a = &tf.acts;
        if a.last_failure.at_micros > a.last_success.at_micros {
            out.push(finding(
                Level::Warn,
                "copy-failed",
                tname,
                format!(
                    "the last copy to {tname}, {} ago, failed: {}",
                    age_words(now - a.last_failure.at_micros),
                    escape(a.last_failure.words.as_bytes())
                ),
                format!("see `journalctl -u {unit}`; plug in or reach the target (is it mounted? the host up?), then `tacid data copy --to {tname}`."),
            ));
        }
        let (verified_at, verify_failed) = tf
            .verified
            .as_ref()
            .map_or((0, 0), |v| (v.when_micros, v.failed.len() as u32));
        let verify_unit = format!("{}{tname}", names::VERIFY_UNIT_PREFIX);
        let verify_warn = tf
            .thresholds
            .and_then(|t| t.verify_warn_secs)
            .unwrap_or(p.verify_warn_secs);
        if tf.sealed && verified_at > 0 && now - verified_at > verify_warn as i64 * MICROS {
            out.push(finding(
                Level::Warn,
                "verify-late",
                tname,
                format!(
                    "the copies on {tname} were last verified {} ago: the verify timer did not run when due.",
                    age_words(now - verified_at)
                ),
                format!("check `systemctl status {verify_unit}.timer`; `tacid data verify --target {tname}` verifies now."),
            ));
        }
        if verify_failed > 0 {
            let what: Vec<String> = tf
                .verified
                .iter()
                .flat_map(|v| v.failed.iter())
                .take(3)
                .map(|(n, why)| {
                    if n.is_empty() {
                        escape(why.as_bytes())
                    } else {
                        format!("{}: {}", escape(n.as_bytes()), escape(why.as_bytes()))
                    }
                })
                .collect();
            out.push(finding(
                Level::Fail,
                "verify-failed",
                tname,
                format!(
                    "the last verification of {tname}, {} ago, found {verify_failed} copies not good ({}).",
                    age_words(now - verified_at),
                    what.join("; ")
                ),
                format!("those copies cannot be trusted for a restore: copy again (`tacid data copy --to {tname}`), then `tacid data verify --target {tname}`."),
            ));
        }
        targets.push(TargetHealth {
            target: tname.to_owned(),
            sealed: tf.sealed,
            copies,
            last_failure_micros: if a.last_failure.at_micros > a.last_success.at_micros {
                a.last_failure.at_micros
            } else {
                0
            },
            last_failure: if a.last_failure.at_micros > a.last_success.at_micros {
                escape(a.last_failure.words.as_bytes())
            } else {
                String::new()
            },
            last_success_micros: a.last_success.at_micros,
            last_verified_micros: verified_at,
            verify_failed,
            failures: a.failures,
        });
    }

    // Free space.
    let (mut falling, mut days_left) = (0u64, -1.0f64);
    match f.space {
        None => out.push(finding(
            Level::Fail,
            "stem",
            names::STEM_UNIT,
            "the stem did not answer: no snapshot can be taken and the free space is not known."
                .to_owned(),
            format!(
                "`systemctl start {}`; see `journalctl -u {}`.",
                names::STEM_UNIT,
                names::STEM_UNIT
            ),
        )),
        Some(s) => {
            let free = layout::human::bytes(s.free_bytes);
            if s.hard_floor_bytes > 0 && s.free_bytes < s.hard_floor_bytes {
                out.push(finding(
                    Level::Fail,
                    "free-space",
                    "",
                    format!(
                        "{free} free, below the hard floor of {}: new snapshots are refused.",
                        layout::human::bytes(s.hard_floor_bytes)
                    ),
                    "free space on the disk now (delete what you do not need; `tacid data prune --dry-run` says what retention would delete).".to_owned(),
                ));
            } else if f.floor_bytes > 0 && s.free_bytes < f.floor_bytes {
                out.push(finding(
                    Level::Warn,
                    "free-space",
                    "",
                    format!(
                        "{free} free, below the floor of {}: retention deletes the oldest automatic snapshots.",
                        layout::human::bytes(f.floor_bytes)
                    ),
                    "free space on the disk, or lower services.tacid.retention counts, before snapshots are refused.".to_owned(),
                ));
            } else {
                out.push(finding(
                    Level::Ok,
                    "free-space",
                    "",
                    format!("{free} free of {}.", layout::human::bytes(s.size_bytes)),
                    String::new(),
                ));
            }
            falling = falling_per_day(&f.samples, now, s.free_bytes);
            if falling > 0 {
                let room = s.free_bytes.saturating_sub(s.hard_floor_bytes) as f64;
                days_left = room / falling as f64;
                let level = if days_left < p.days_left_fail as f64 {
                    Level::Fail
                } else if days_left < p.days_left_warn as f64 {
                    Level::Warn
                } else {
                    Level::Ok
                };
                let todo = if level == Level::Ok {
                    String::new()
                } else {
                    "find what grows (`tacid data diff` against a recent snapshot says what changed) and free space before snapshots are refused.".to_owned()
                };
                out.push(finding(
                    level,
                    "days-left",
                    "",
                    format!(
                        "the free space falls by {} a day: about {days_left:.1} days until snapshots are refused.",
                        layout::human::bytes(falling)
                    ),
                    todo,
                ));
            }
        }
    }

    // The staged restore, and a bad request file.
    if let Some((paths, at)) = &f.staged {
        let waiting = if *at > 0 { now - at } else { 0 };
        if waiting > p.staged_wait_secs as i64 * MICROS {
            out.push(finding(
                Level::Warn,
                "staged-restore",
                paths,
                format!(
                    "a restore of {paths} has waited {} for a reboot; until then nothing is put back, and everything written meanwhile will be lost at the reboot.",
                    age_words(waiting)
                ),
                "reboot to put it back, or `tacid data cancel` to withdraw it.".to_owned(),
            ));
        } else {
            out.push(finding(
                Level::Ok,
                "staged-restore",
                paths,
                format!("a restore of {paths} is staged; it happens at the next reboot."),
                String::new(),
            ));
        }
    }
    if let Some(why) = &f.bad_request {
        out.push(finding(
            Level::Warn,
            "bad-request",
            "",
            format!(
                "the restore request file is bad ({}): the next boot refuses it and puts nothing back.",
                escape(why.as_bytes())
            ),
            "`tacid data cancel` removes it (root or an approver); then stage the restore again if one was meant.".to_owned(),
        ));
    }

    // Opens held in use past their idle close.
    for o in &f.opens {
        if now > o.idle_close_micros
            && now - o.opened_micros > d::HEALTH_OPEN_HELD_SECS as i64 * MICROS
        {
            out.push(finding(
                Level::Warn,
                "open-in-use",
                &o.name,
                format!(
                    "{} has been open at {} for {} and is still in use: retention keeps it and it cannot be deleted.",
                    o.name,
                    escape(o.path.as_bytes()),
                    age_words(now - o.opened_micros)
                ),
                format!("close the programs using it (`fuser -vm {}`), then `tacid data close {}`.", escape(o.path.as_bytes()), o.name),
            ));
        }
    }

    out.sort_by_key(|f| std::cmp::Reverse(Level::parse(&f.level)));
    let level = out
        .iter()
        .map(|f| Level::parse(&f.level))
        .max()
        .unwrap_or_default();
    HealthReport {
        level: level.as_str().to_owned(),
        now_micros: now,
        findings: out,
        subvolumes,
        targets,
        space_known: f.space.is_some(),
        free_bytes: f.space.map_or(0, |s| s.free_bytes),
        size_bytes: f.space.map_or(0, |s| s.size_bytes),
        floor_bytes: f.floor_bytes,
        hard_floor_bytes: f.space.map_or(0, |s| s.hard_floor_bytes),
        falling_bytes_per_day: falling,
        days_left,
        timeline_last_run_micros: t.last_success.at_micros.max(t.last_failure.at_micros),
        timeline_last_failure_micros: if t.last_failure.at_micros > t.last_success.at_micros {
            t.last_failure.at_micros
        } else {
            0
        },
        timeline_last_failure: if t.last_failure.at_micros > t.last_success.at_micros {
            escape(t.last_failure.words.as_bytes())
        } else {
            String::new()
        },
        timer_failures: t.failures + f.targets.iter().map(|t| t.acts.failures).sum::<u64>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::LastAct;

    const HOUR: i64 = 3600 * MICROS;

    fn healthy(now: i64) -> Facts {
        Facts {
            now_micros: now,
            newest: SubvolumeName::default_snapshot_set()
                .iter()
                .map(|s| Newest {
                    of_subvolume: s.as_str().to_owned(),
                    name: format!("{}.x", s.as_str()),
                    taken_micros: now - HOUR / 2,
                })
                .collect(),
            timeline: TimelineRuns {
                last_success: LastAct {
                    at_micros: now - HOUR / 2,
                    words: String::new(),
                },
                ..TimelineRuns::default()
            },
            space: Some(SpaceFacts {
                free_bytes: 100 << 30,
                size_bytes: 200 << 30,
                hard_floor_bytes: 512 << 20,
            }),
            floor_bytes: 2 << 30,
            ..Facts::default()
        }
    }

    #[test]
    fn a_machine_that_snapshotted_within_the_hour_is_ok() {
        let r = judge(&healthy(1_000 * DAY), &HealthPolicy::default());
        assert_eq!(r.level, OK, "{:#?}", r.findings);
    }

    #[test]
    fn snapshots_older_than_the_thresholds_warn_then_fail() {
        let p = HealthPolicy::default();
        let mut f = healthy(1_000 * DAY);
        f.now_micros += 3 * HOUR;
        let r = judge(&f, &p);
        assert_eq!(r.level, WARN);
        assert!(
            r.findings[0].says.contains("hours old"),
            "{:#?}",
            r.findings
        );
        assert!(r.findings[0].todo.contains("tacid-timeline.timer"));
        f.now_micros += 2 * DAY;
        assert_eq!(judge(&f, &p).level, FAIL);
    }

    #[test]
    fn below_the_hard_floor_fails_and_says_to_free_space() {
        let mut f = healthy(1_000 * DAY);
        if let Some(s) = f.space.as_mut() {
            s.free_bytes = 100 << 20;
        }
        let r = judge(&f, &HealthPolicy::default());
        assert_eq!(r.level, FAIL);
        assert_eq!(r.findings[0].kind, "free-space");
        assert!(r.findings[0].says.contains("refused"));
    }

    #[test]
    fn days_left_from_the_fall_of_free_space() {
        let now = 1_000 * DAY;
        let mut f = healthy(now);
        // 10 GiB fell over one day: 100 GiB free lasts about ten days (warn below 7).
        f.samples = vec![(now - DAY, 110 << 30)];
        let r = judge(&f, &HealthPolicy::default());
        assert_eq!(r.falling_bytes_per_day, 10 << 30);
        assert!((r.days_left - 9.95).abs() < 0.1, "{}", r.days_left);
        assert_eq!(r.level, OK);
        f.samples = vec![(now - DAY, 200 << 30)];
        let r = judge(&f, &HealthPolicy::default());
        assert_eq!(r.level, FAIL, "{:#?}", r.findings);
    }

    #[test]
    fn an_open_snapshot_still_in_use_a_day_on_warns_and_says_how_to_let_it_go() {
        let now = 1_000 * DAY;
        let mut f = healthy(now);
        f.opens.push(OpenFacts {
            name: "@home.x".into(),
            path: "/run/tacid/1000/@home.x".into(),
            opened_micros: now - 2 * DAY,
            idle_close_micros: now - 2 * DAY + 900 * MICROS,
        });
        let r = judge(&f, &HealthPolicy::default());
        assert_eq!(r.level, WARN);
        assert_eq!(r.findings[0].kind, "open-in-use");
        assert!(r.findings[0].todo.contains("tacid data close @home.x"));
        // Opened an hour ago: a person at work, not a finding.
        f.opens[0].opened_micros = now - HOUR;
        f.opens[0].idle_close_micros = now - HOUR + 900 * MICROS;
        assert_eq!(judge(&f, &HealthPolicy::default()).level, OK);
    }

    #[test]
    fn copies_that_failed_verification_fail_and_name_the_copy() {
        let now = 1_000 * DAY;
        let mut f = healthy(now);
        f.targets.push(TargetFacts {
            name: "usb".into(),
            sealed: true,
            acts: TargetActs {
                held: SubvolumeName::default_snapshot_set()
                    .iter()
                    .map(|s| format!("{}.2026-12-01T140200.123456Z", s.as_str()))
                    .collect(),
                ..TargetActs::default()
            },
            verified: Some(LastVerification {
                target: "usb".into(),
                when_micros: now - HOUR,
                user_name: String::new(),
                rule: "timer of usb".into(),
                good: 2,
                failed: vec![(
                    "@home.2026-12-01T140200.123456Z".into(),
                    "part 3: digest".into(),
                )],
            }),
            thresholds: None,
        });
        let r = judge(&f, &HealthPolicy::default());
        assert_eq!(r.level, FAIL);
        let v = r
            .findings
            .iter()
            .find(|f| f.kind == "verify-failed")
            .expect("said");
        assert!(
            v.says
                .contains("@home.2026-12-01T140200.123456Z: part 3: digest"),
            "{}",
            v.says
        );
        assert_eq!(r.targets[0].verify_failed, 1);
    }

    #[test]
    fn a_sealed_target_not_verified_for_two_weeks_warns() {
        let now = 1_000 * DAY;
        let mut f = healthy(now);
        f.targets.push(TargetFacts {
            name: "usb".into(),
            sealed: true,
            acts: TargetActs {
                held: SubvolumeName::default_snapshot_set()
                    .iter()
                    .map(|s| format!("{}.2026-12-01T140200.123456Z", s.as_str()))
                    .collect(),
                ..TargetActs::default()
            },
            verified: Some(LastVerification {
                target: "usb".into(),
                when_micros: now - 15 * DAY,
                user_name: String::new(),
                rule: "timer of usb".into(),
                good: 3,
                failed: Vec::new(),
            }),
            thresholds: None,
        });
        // The copies' own ages are not what is judged here.
        let p = HealthPolicy {
            copy_warn_secs: 10_000 * 86_400,
            copy_fail_secs: 20_000 * 86_400,
            ..HealthPolicy::default()
        };
        let r = judge(&f, &p);
        assert_eq!(r.level, WARN, "{:#?}", r.findings);
        let late = r
            .findings
            .iter()
            .find(|f| f.kind == "verify-late")
            .expect("said");
        assert!(late.says.contains("15 days ago"), "{}", late.says);
        assert!(
            late.todo.contains("tacid-verify-usb.timer"),
            "{}",
            late.todo
        );
    }

    #[test]
    fn a_stem_that_does_not_answer_fails() {
        let mut f = healthy(1_000 * DAY);
        f.space = None;
        let r = judge(&f, &HealthPolicy::default());
        assert_eq!(r.level, FAIL);
        assert_eq!(r.findings[0].kind, "stem");
        assert!(!r.space_known);
    }

    #[test]
    fn a_new_finding_at_warn_signals_though_the_level_was_warn_already() {
        let p = HealthPolicy::default();
        let now = 1_000 * DAY;
        let mut f = healthy(now);
        // A restore staged two days ago: the machine is at warn.
        f.staged = Some(("/home".into(), now - 2 * DAY));
        let first = judge(&f, &p);
        assert_eq!(first.level, WARN, "{:#?}", first.findings);
        let (seen, w) = worsened(&Seen::default(), &first);
        assert_eq!(w.expect("the first warning").level, Level::Warn);
        // Looked at again, nothing new: no signal.
        let (seen, w) = worsened(&seen, &judge(&f, &p));
        assert_eq!(w, None);
        // Three hours on, snapshots have stopped: the level is still warn, but that is new.
        f.now_micros += 3 * HOUR;
        let r = judge(&f, &p);
        assert_eq!(r.level, WARN);
        let (seen, w) = worsened(&seen, &r);
        let w = w.expect("snapshots stopping while at warn is signalled");
        assert_eq!(w.level, Level::Warn);
        assert!(
            w.says
                .contains("the newest snapshot of /home is 3 hours old"),
            "{}",
            w.says
        );
        assert!(
            !w.says.contains("has waited"),
            "only what is new: {}",
            w.says
        );
        let (seen, w) = worsened(&seen, &judge(&f, &p));
        assert_eq!(w, None, "said once");
        // A day on: the same findings fail; a finding that rose is signalled.
        f.now_micros += DAY;
        let (seen, w) = worsened(&seen, &judge(&f, &p));
        assert_eq!(w.expect("rose to fail").level, Level::Fail);
        // The snapshots come back, then stop again: new again.
        let fresh = healthy(f.now_micros);
        f.newest = fresh.newest.clone();
        f.timeline = fresh.timeline.clone();
        let (seen, w) = worsened(&seen, &judge(&f, &p));
        assert_eq!(w, None, "getting better is no signal");
        f.now_micros += 3 * HOUR;
        let (_, w) = worsened(&seen, &judge(&f, &p));
        assert!(w
            .expect("stopped again")
            .says
            .contains("/home is 3 hours old"));
    }

    #[test]
    fn with_the_timeline_off_old_snapshots_are_ok_with_a_note_and_no_timer_is_due() {
        let off = HealthPolicy {
            timeline: false,
            ..HealthPolicy::default()
        };
        let mut f = healthy(1_000 * DAY);
        // The timer only prunes: it never took a set; the last snapshot was a month ago.
        f.timeline = TimelineRuns::default();
        f.now_micros += 30 * DAY;
        assert_eq!(
            judge(&f, &HealthPolicy::default()).level,
            FAIL,
            "the control: with the timeline on, this fails"
        );
        let r = judge(&f, &off);
        assert_eq!(r.level, OK, "{:#?}", r.findings);
        assert!(
            !r.findings.iter().any(|f| f.kind == "timeline-timer"),
            "{:#?}",
            r.findings
        );
        let home = r
            .findings
            .iter()
            .find(|f| f.kind == "snapshot-age" && f.about == "/home")
            .expect("/home is judged");
        assert!(
            home.says.contains("is 30 days old") && home.says.contains("the timeline is off"),
            "{}",
            home.says
        );
        // No snapshot at all is still a warning: there is nothing to go back to.
        f.newest.clear();
        let r = judge(&f, &off);
        assert_eq!(r.level, WARN);
        assert!(r.findings[0].says.contains("the timeline is off"));
        assert!(r.findings[0].todo.contains("tacid data snapshot"));
    }

    #[test]
    fn ages_in_words() {
        assert_eq!(age_words(45 * 60 * MICROS), "45 minutes");
        assert_eq!(age_words(3 * HOUR), "3 hours");
        assert_eq!(age_words(3 * DAY), "3 days");
        assert_eq!(age_words(MICROS), "1 second");
    }

    #[test]
    fn a_weekly_targets_own_thresholds_judge_its_copies_not_the_daily_ones() {
        let now = 1_000 * DAY;
        let five_days_old = layout::SnapshotName::new(
            SubvolumeName::parse("@home").unwrap(),
            std::time::UNIX_EPOCH + std::time::Duration::from_micros((now - 5 * DAY) as u64),
        )
        .unwrap();
        let target = |thresholds| TargetFacts {
            name: "weekly".into(),
            sealed: false,
            acts: TargetActs {
                held: SubvolumeName::default_snapshot_set()
                    .iter()
                    .map(|s| five_days_old.to_string().replacen("@home", s.as_str(), 1))
                    .collect(),
                ..TargetActs::default()
            },
            verified: None,
            thresholds,
        };
        let copy_age = |f: &Facts| -> Vec<String> {
            judge(f, &HealthPolicy::default())
                .findings
                .into_iter()
                .filter(|x| x.kind == "copy-age")
                .map(|x| x.level)
                .collect()
        };
        let mut f = healthy(now);
        f.targets.push(target(None));
        assert!(
            copy_age(&f).iter().all(|l| l == WARN),
            "daily thresholds warn"
        );
        let mut f = healthy(now);
        f.targets.push(target(Some(layout::copies::TargetHealth {
            copy_warn_secs: 2 * 7 * 86_400 + 3_600,
            copy_fail_secs: 3 * 7 * 86_400,
            verify_warn_secs: None,
        })));
        let levels = copy_age(&f);
        assert!(
            !levels.is_empty() && levels.iter().all(|l| l == OK),
            "{levels:?}"
        );
    }
}
