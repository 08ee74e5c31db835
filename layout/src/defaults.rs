//! Every tunable default, once.
//!
//! The binaries' command-line defaults are these values, so a daemon started by hand behaves
//! as the shipped unit does; the shipped units pass the same values (a test reads them
//! back); the NixOS module's option defaults come from `layout.json`, where [`Defaults`]
//! is rendered. Change a default here and nowhere else.

use serde::Serialize;

/// Members of this group (and root) may snapshot, restore, cancel, delete and keep.
pub const APPROVER_GROUP: &str = "wheel";

/// Retention (adr/0013): the newest this many pre-switch sets stay.
pub const KEEP_PRE_SWITCH_SETS: usize = 10;
/// Retention: the newest timeline set of each of the last this many hours that have one.
pub const KEEP_HOURLY: usize = 24;
/// Retention: likewise for days.
pub const KEEP_DAILY: usize = 7;
/// Retention: likewise for weeks (Monday to Sunday, UTC).
pub const KEEP_WEEKLY: usize = 4;
/// Retention: likewise for months.
pub const KEEP_MONTHLY: usize = 6;
/// Retention: manual snapshots older than this many days go; 0 keeps them until a person
/// deletes them.
pub const MANUAL_MAX_AGE_DAYS: u64 = 0;

/// Retention: what a restore replaced (kept read-only by the initrd, adr/0027) stays this
/// many days after the boot of that restore, then goes; counted against no other rule.
pub const KEEP_REPLACED_DAYS: u64 = 7;

/// Below this many free bytes the keeper deletes the oldest automatic snapshots, and every
/// snapshot prunes first (the keeper's floor; 0 is none).
pub const FREE_FLOOR_BYTES: u64 = 2 << 30;
/// Below this many free bytes the stem refuses a snapshot, inside the act (0 is none).
/// Lower than [`FREE_FLOOR_BYTES`], so pruning comes first and refusal only when it could
/// not free enough.
pub const HARD_FLOOR_BYTES: u64 = 512 << 20;
const _: () = assert!(HARD_FLOOR_BYTES < FREE_FLOOR_BYTES);

/// Copies off the disk, each target's own counts unless its configuration says
/// otherwise: the newest this many copies stay on the target.
pub const KEEP_COPIES_LATEST: usize = 3;
/// Copies: the newest copy of each of the last this many days that have one.
pub const KEEP_COPIES_DAILY: usize = 7;
/// Copies: likewise for weeks.
pub const KEEP_COPIES_WEEKLY: usize = 4;
/// Copies: likewise for months.
pub const KEEP_COPIES_MONTHLY: usize = 6;
/// Sealed copies: a full copy every this many copies of a chain: a chain holds at most this
/// many copies, its full copy counted (2: full, incremental, full, …; 0 and 1: every copy
/// full), so that a fetch replays at most this many streams and one lost part costs at most
/// one chain.
pub const SEAL_FULL_EVERY: u32 = 30;
/// Sealed copies: the stored bytes of one part (the compressed stream cut into pieces, each
/// encrypted on its own), so that a part is retried, checked and fetched whole in memory.
pub const SEAL_PART_BYTES: usize = 16 << 20;

/// How long the words a preview showed a person stand as what they may consent to.
pub const CONSENT_WINDOW_SECS: u64 = 15 * 60;

/// Opening a snapshot read-only (adr/0019): an open is closed this many seconds
/// after it was opened (or last opened again) once nobody uses it; while a process still
/// sits in it, it stays open and the close is tried again until it is let go (adr/0021).
pub const OPEN_IDLE_SECS: u64 = 15 * 60;
/// Opening: at most this many snapshots open at once for one person (uid).
pub const OPENS_PER_USER: usize = 4;
/// Opening: at most this many open at once over everybody.
pub const OPENS_TOTAL: usize = 64;
const _: () = assert!(OPENS_PER_USER <= OPENS_TOTAL);

/// What a caller may have logged or journalled one by one, in windows of this many seconds
/// (adr/0016): past the allowances below, their calls are counted, not written each.
pub const ALLOWANCE_WINDOW_SECS: u64 = 10 * 60;
/// The allowance of one caller (a uid, or one kind of call where the caller is unknown).
pub const ALLOWANCE_PER_CALLER: u32 = 10;
/// The allowance of all callers together.
pub const ALLOWANCE_OVERALL: u32 = 100;

/// How often the timeline timer (`tacid-timeline.timer`, `OnCalendar=hourly`) runs, and
/// the most its `RandomizedDelaySec=` moves a run: the health thresholds below are derived
/// from them, so that one missed run is not yet a warning and two are.
pub const TIMELINE_PERIOD_SECS: u64 = 60 * 60;
/// The timeline timer's `RandomizedDelaySec=`.
pub const TIMELINE_RANDOM_DELAY_SECS: u64 = 5 * 60;
/// A copy target's timer, by default (`daily` in the module): the period the copy
/// thresholds are derived from.
pub const COPY_PERIOD_SECS: u64 = 24 * 60 * 60;

/// Health (`tacid data health`): the newest snapshot of a snapshotted subvolume older than
/// this is a warning: two timeline periods and the timer's delay, so two runs were missed.
pub const HEALTH_SNAPSHOT_WARN_SECS: u64 = 2 * TIMELINE_PERIOD_SECS + TIMELINE_RANDOM_DELAY_SECS;
/// Health: older than this is a failure: a day without a snapshot.
pub const HEALTH_SNAPSHOT_FAIL_SECS: u64 = 24 * TIMELINE_PERIOD_SECS;
/// Health: the newest copy of a subvolume on a target older than this is a warning (two of
/// the target's periods and an hour).
pub const HEALTH_COPY_WARN_SECS: u64 = 2 * COPY_PERIOD_SECS + TIMELINE_PERIOD_SECS;
/// Health: older than this is a failure (a week of the target's runs).
pub const HEALTH_COPY_FAIL_SECS: u64 = 7 * COPY_PERIOD_SECS;
/// A sealed target's verify timer, by default (`weekly` in the module).
pub const VERIFY_PERIOD_SECS: u64 = 7 * 24 * 60 * 60;
/// Health: a sealed target whose copies were last verified longer ago than this (two of its
/// verify timer's periods and an hour) warns: the timer did not run when due.
pub const HEALTH_VERIFY_WARN_SECS: u64 = 2 * VERIFY_PERIOD_SECS + TIMELINE_PERIOD_SECS;
/// Health: a restore staged and waiting for a reboot longer than this is a warning.
pub const HEALTH_STAGED_WAIT_SECS: u64 = 24 * 60 * 60;
/// Health: the free space reaches the hard floor in fewer days than this, at the rate it
/// fell over the last [`HEALTH_GROWTH_WINDOW_SECS`]: a warning.
pub const HEALTH_DAYS_LEFT_WARN: u64 = 7;
/// Health: likewise, a failure.
pub const HEALTH_DAYS_LEFT_FAIL: u64 = 1;
/// Health: the rate of growth is measured over this window of the free space the keeper
/// recorded (at most one sample every [`HEALTH_SPACE_SAMPLE_SECS`]).
pub const HEALTH_GROWTH_WINDOW_SECS: u64 = 3 * 24 * 60 * 60;
/// Health: the keeper records the free space at most this often.
pub const HEALTH_SPACE_SAMPLE_SECS: u64 = 10 * 60;
/// Health: the keeper checks health by itself this often (and after every act), and
/// signals when it worsened.
pub const HEALTH_CHECK_EVERY_SECS: u64 = 5 * 60;
/// Health: an open snapshot in use longer than this is a warning (retention keeps it).
pub const HEALTH_OPEN_HELD_SECS: u64 = 24 * 60 * 60;
const _: () = assert!(HEALTH_SNAPSHOT_WARN_SECS < HEALTH_SNAPSHOT_FAIL_SECS);
const _: () = assert!(HEALTH_COPY_WARN_SECS < HEALTH_COPY_FAIL_SECS);
const _: () = assert!(HEALTH_DAYS_LEFT_FAIL < HEALTH_DAYS_LEFT_WARN);

/// The defaults as data, for `layout.json` and through it the NixOS module.
#[derive(Debug, Serialize)]
pub struct Defaults {
    pub approver_group: &'static str,
    pub keep_pre_switch_sets: usize,
    pub keep_hourly: usize,
    pub keep_daily: usize,
    pub keep_weekly: usize,
    pub keep_monthly: usize,
    pub manual_max_age_days: u64,
    pub keep_replaced_days: u64,
    pub free_floor_bytes: u64,
    pub hard_floor_bytes: u64,
    pub consent_window_secs: u64,
    pub keep_copies_latest: usize,
    pub keep_copies_daily: usize,
    pub keep_copies_weekly: usize,
    pub keep_copies_monthly: usize,
    pub seal_full_every: u32,
    pub open_idle_secs: u64,
    pub opens_per_user: usize,
    pub opens_total: usize,
    pub cut_freeze_timeout_ms: u32,
    pub cut_hold_limit_ms: u32,
    pub cut_hook_limit_ms: u32,
    pub health_snapshot_warn_secs: u64,
    pub health_snapshot_fail_secs: u64,
    pub health_copy_warn_secs: u64,
    pub health_copy_fail_secs: u64,
    pub health_verify_warn_secs: u64,
    pub health_staged_wait_secs: u64,
    pub health_days_left_warn: u64,
    pub health_days_left_fail: u64,
}

/// A consistent cut: how long the stem waits for every paused unit to report frozen.
pub const CUT_FREEZE_TIMEOUT_MS: u32 = 2_000;
/// A consistent cut: how long units may stay frozen in all before the guard thaws them.
pub const CUT_HOLD_LIMIT_MS: u32 = 10_000;
/// A consistent cut: how long a unit's hook (before the freeze, after the thaw) may run
/// before its process group is killed.
pub const CUT_HOOK_LIMIT_MS: u32 = 30_000;

/// The one instance.
pub const DEFAULTS: Defaults = Defaults {
    approver_group: APPROVER_GROUP,
    keep_pre_switch_sets: KEEP_PRE_SWITCH_SETS,
    keep_hourly: KEEP_HOURLY,
    keep_daily: KEEP_DAILY,
    keep_weekly: KEEP_WEEKLY,
    keep_monthly: KEEP_MONTHLY,
    manual_max_age_days: MANUAL_MAX_AGE_DAYS,
    keep_replaced_days: KEEP_REPLACED_DAYS,
    free_floor_bytes: FREE_FLOOR_BYTES,
    hard_floor_bytes: HARD_FLOOR_BYTES,
    consent_window_secs: CONSENT_WINDOW_SECS,
    keep_copies_latest: KEEP_COPIES_LATEST,
    keep_copies_daily: KEEP_COPIES_DAILY,
    keep_copies_weekly: KEEP_COPIES_WEEKLY,
    keep_copies_monthly: KEEP_COPIES_MONTHLY,
    seal_full_every: SEAL_FULL_EVERY,
    open_idle_secs: OPEN_IDLE_SECS,
    opens_per_user: OPENS_PER_USER,
    opens_total: OPENS_TOTAL,
    cut_freeze_timeout_ms: CUT_FREEZE_TIMEOUT_MS,
    cut_hold_limit_ms: CUT_HOLD_LIMIT_MS,
    cut_hook_limit_ms: CUT_HOOK_LIMIT_MS,
    health_snapshot_warn_secs: HEALTH_SNAPSHOT_WARN_SECS,
    health_snapshot_fail_secs: HEALTH_SNAPSHOT_FAIL_SECS,
    health_copy_warn_secs: HEALTH_COPY_WARN_SECS,
    health_copy_fail_secs: HEALTH_COPY_FAIL_SECS,
    health_verify_warn_secs: HEALTH_VERIFY_WARN_SECS,
    health_staged_wait_secs: HEALTH_STAGED_WAIT_SECS,
    health_days_left_warn: HEALTH_DAYS_LEFT_WARN,
    health_days_left_fail: HEALTH_DAYS_LEFT_FAIL,
};
