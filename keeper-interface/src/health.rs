//! What `Health` answers: how old the newest snapshot and copy of each subvolume are, what
//! failed, and what to do; each finding one line with its level.

use serde::{Deserialize, Serialize};
use zbus::Type;

/// The levels, worst last. `Health`'s `level` is the worst of its findings.
pub const OK: &str = "ok";
pub const WARN: &str = "warn";
pub const FAIL: &str = "fail";

/// The answer to `Health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
pub struct HealthReport {
    /// `ok`, `warn` or `fail`: the worst finding.
    pub level: String,
    /// The keeper's clock when it looked, µs since the epoch (UTC): every age is from it.
    pub now_micros: i64,
    /// Every finding, the worst first; an `ok` machine has its `ok` lines too.
    pub findings: Vec<Finding>,
    /// Each snapshotted subvolume, in layout order.
    pub subvolumes: Vec<SubvolumeHealth>,
    /// Each configured copy target, in name order.
    pub targets: Vec<TargetHealth>,
    /// The free space (0 and `space_known` false when the stem did not answer).
    pub space_known: bool,
    pub free_bytes: u64,
    pub size_bytes: u64,
    /// Retention's floor, and the stem's hard floor (snapshots refused below it).
    pub floor_bytes: u64,
    pub hard_floor_bytes: u64,
    /// The free space fell this many bytes a day over the recent window (0 when it did not
    /// fall, or too little is recorded to say).
    pub falling_bytes_per_day: u64,
    /// Days until the free space reaches the hard floor at that rate; negative when it does
    /// not fall (or is not known).
    pub days_left: f64,
    /// The timeline timer's last run (µs; 0: never), and whether it failed (its words).
    pub timeline_last_run_micros: i64,
    pub timeline_last_failure_micros: i64,
    pub timeline_last_failure: String,
    /// Timer runs that failed, as journalled (the timeline's and the copy targets').
    pub timer_failures: u64,
}

/// One finding: what it is about, how bad, what is so, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Finding {
    /// `ok`, `warn` or `fail`.
    pub level: String,
    /// What kind of finding, a stable word for programs: `snapshot-age`, `timeline-timer`,
    /// `copy-age`, `copy-failed`, `verify-failed`, `verify-late`, `free-space`, `days-left`,
    /// `staged-restore`, `bad-request`, `open-in-use`, `stem`, `failed-sets`.
    pub kind: String,
    /// What it is about: a mount point (`/home`), a target's name, or empty.
    pub about: String,
    /// What is so, in one sentence (escaped where somebody else chose the words).
    pub says: String,
    /// What to do, in one sentence; empty when nothing is to be done.
    pub todo: String,
}

/// A snapshotted subvolume's newest snapshot and newest pre-switch set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SubvolumeHealth {
    pub subvolume: String,
    pub of_path: String,
    /// µs since the epoch; 0 when there is none.
    pub newest_micros: i64,
    pub newest_name: String,
    pub newest_pre_switch_micros: i64,
}

/// A copy target's newest copy of each subvolume, its last failure, its last verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct TargetHealth {
    pub target: String,
    pub sealed: bool,
    pub copies: Vec<TargetCopyAge>,
    /// The last act on it that failed (µs; 0: none since the last that worked), and why.
    pub last_failure_micros: i64,
    pub last_failure: String,
    /// The last act on it that worked (µs; 0: never).
    pub last_success_micros: i64,
    /// The last verification (sealed targets; µs, 0: never), and how many copies failed it.
    pub last_verified_micros: i64,
    pub verify_failed: u32,
    /// Acts on it that failed, as journalled.
    pub failures: u64,
}

/// The newest copy of one subvolume on a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct TargetCopyAge {
    pub subvolume: String,
    pub of_path: String,
    /// µs since the epoch that the copied snapshot was taken; 0 when the target holds none.
    pub newest_micros: i64,
    pub newest_name: String,
}
