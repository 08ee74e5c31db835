//! Retention: which snapshots go, each with the rule that chose it (adr/0013).
//!
//! A pure function of its input — the snapshots, the policy, the time and the free space —
//! so `tacid data prune --dry-run` shows exactly what `prune` does, and a test can hold the
//! rules to their word. The rules, in the order they are applied:
//!
//! 1. **Pre-switch sets**: the newest `pre_switch_sets` sets stay; older sets go, each whole.
//! 2. **Timeline**: a timeline set stays when it is the newest of its hour among the last
//!    `hourly` hours that have one, or likewise of its day, week (Monday to Sunday) or
//!    month, UTC; the others go, each whole.
//! 3. **Manual**: stays until deleted by a person, or until older than `manual_max_age`.
//! 4. **Replaced**: what a restore replaced, kept read-only by the initrd (adr/0027), stays
//!    `replaced_days` days after the boot of that restore, then goes; the snapshots of one
//!    restore go together. They count against no other rule, and the floor never takes
//!    them early: they are somebody's way back from a restore.
//! 5. **Free-space floor**: when the free space is below `floor_bytes`, the oldest
//!    automatic snapshots (pre-switch sets and timeline) the rules above kept go too, one
//!    unit (a set) per round: without qgroups nobody can say how
//!    much deleting one frees, so the keeper measures again before the next round.
//!
//! Never chosen, whatever the rules say: a snapshot the staged restore names (pinned), one a
//! person marked to keep, one that is open (the stem refuses to delete it until it is closed,
//! adr/0021: a plan that counted on it would not be what `prune` does), one of unknown
//! origin (nobody can say what it is for), and the last common parent with a configured copy target (the newest snapshot of its subvolume
//! the target holds a copy of: deleted, the next copy there would be sent full). A set
//! (pre-switch or timeline) goes whole or not at all: if any member is protected, every
//! member stays. When the free-space floor could only be met by deleting a last common
//! parent, it is not deleted: the plan says so ([`Plan::floor_held_by_parents`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub mod copies;
pub mod prune;
pub use prune::describe;

/// What made a snapshot, for retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A member of a set taken before a switch of configuration; `set` is the journal's id.
    PreSwitch { set: i64 },
    /// A member of a set taken by the timeline timer; `set` is the journal's id.
    Timeline { set: i64 },
    /// Asked for by a person.
    Manual,
    /// On disk, never taken through the keeper: never chosen automatically.
    UnknownOrigin,
    /// What a restore replaced (adr/0027), kept from `kept_from_micros` (the boot, or when the
    /// keeper learnt it if later; µs since the epoch):
    /// the snapshots of one restore are one unit.
    Replaced { kept_from_micros: i64 },
}

/// One snapshot as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    /// When it was taken, µs since the epoch (UTC).
    pub taken_micros: i64,
    pub kind: Kind,
    /// A person marked it to keep.
    pub kept: bool,
    /// The staged restore names it.
    pub pinned: bool,
    /// The configured copy targets it is the last common parent with ([`last_common_parents`]),
    /// in name order.
    pub parent_of: Vec<String>,
    /// Where it is open (one place for each opener), in order; empty: not open.
    pub open_at: Vec<String>,
}

/// The retention policy (the module's `services.tacid.retention.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// How many of the newest pre-switch sets stay.
    pub pre_switch_sets: usize,
    pub hourly: usize,
    pub daily: usize,
    pub weekly: usize,
    pub monthly: usize,
    /// Manual snapshots older than this go; `None`: kept until a person deletes them.
    pub manual_max_age: Option<Duration>,
    /// Below this many free bytes, the oldest automatic snapshots go; 0: no floor. (The
    /// hard floor, below which a snapshot is refused, is the stem's: it checks it inside
    /// the act.)
    pub floor_bytes: u64,
    /// What a restore replaced stays this many days after its boot (adr/0027).
    pub replaced_days: u64,
}

impl Default for Policy {
    /// The documented defaults (adr/0013), from `layout::defaults`.
    fn default() -> Self {
        use layout::defaults as d;
        Policy {
            pre_switch_sets: d::KEEP_PRE_SWITCH_SETS,
            hourly: d::KEEP_HOURLY,
            daily: d::KEEP_DAILY,
            weekly: d::KEEP_WEEKLY,
            monthly: d::KEEP_MONTHLY,
            // 0 days means no age limit.
            manual_max_age: Some(d::MANUAL_MAX_AGE_DAYS)
                .filter(|&days| days > 0)
                .map(|days| Duration::from_secs(days * 86_400)),
            floor_bytes: d::FREE_FLOOR_BYTES,
            replaced_days: d::KEEP_REPLACED_DAYS,
        }
    }
}

// The rules' names and sentences are the interface's (a prune report carries them, and the
// CLI groups by them): re-exported here, where retention is.
pub use keeper_interface::prune::{Protection, Rule, RULES};

/// One snapshot chosen to go, and the rule that chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub name: String,
    pub rule: Rule,
}

/// A snapshot in the store, as [`last_common_parents`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InStore<'a> {
    pub name: &'a str,
    /// The subvolume it is of (`@home`).
    pub of: &'a str,
    pub taken_micros: i64,
}

/// For each configured target and subvolume, the newest snapshot in the store that the
/// target holds a copy of (as the journal last knew it: copies verified and listings, so a
/// target away is remembered): the parent of the next incremental copy to it. `held`:
/// `(target, snapshot name)`; targets not in `configured` are ignored. The answer: snapshot
/// name to its targets, in name order.
pub fn last_common_parents<'a>(
    local: &[InStore<'a>],
    held: &[(&str, &str)],
    configured: &BTreeSet<&str>,
) -> BTreeMap<&'a str, Vec<String>> {
    let here: BTreeMap<&str, &InStore<'a>> = local.iter().map(|l| (l.name, l)).collect();
    // (target, subvolume) -> the newest held snapshot: (time, name).
    let mut newest: BTreeMap<(&str, &str), (i64, &'a str)> = BTreeMap::new();
    for &(target, name) in held {
        if !configured.contains(target) {
            continue;
        }
        let Some(l) = here.get(name) else { continue };
        let e = newest
            .entry((target, l.of))
            .or_insert((l.taken_micros, l.name));
        if (l.taken_micros, l.name) > *e {
            *e = (l.taken_micros, l.name);
        }
    }
    let mut out: BTreeMap<&'a str, Vec<String>> = BTreeMap::new();
    for ((target, _), (_, name)) in newest {
        out.entry(name).or_default().push(target.to_owned());
    }
    for targets in out.values_mut() {
        targets.sort();
        targets.dedup();
    }
    out
}

/// A snapshot a rule chose that stays anyway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spared {
    pub name: String,
    pub rule: Rule,
    pub protection: Protection,
}

/// What retention decided: the snapshots to delete (oldest first) and those spared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub delete: Vec<Deletion>,
    pub spared: Vec<Spared>,
    /// The free space is below the floor and no automatic snapshot is left to delete.
    pub floor_unmet: bool,
    /// The floor is unmet because what it would delete next is a last common parent with a
    /// copy target (in `spared`, under the floor's rule): it stays, and the plan says so
    /// rather than making the next copy silently full.
    pub floor_held_by_parents: bool,
}

const HOUR: i64 = 3_600_000_000;
const DAY: i64 = 24 * HOUR;

/// Periods of one granularity a timeline snapshot can be the newest of.
pub(crate) fn period(micros: i64, g: usize) -> i64 {
    let day = micros.div_euclid(DAY);
    match g {
        0 => micros.div_euclid(HOUR),
        1 => day,
        // 1970-01-01 was a Thursday: shifting by 3 days makes weeks start on Monday.
        2 => (day + 3).div_euclid(7),
        _ => {
            let date =
                time::Date::from_julian_day(2_440_588 + day as i32).unwrap_or(time::Date::MIN);
            i64::from(date.year()) * 12 + i64::from(u8::from(date.month()))
        }
    }
}

/// A unit that goes whole or not at all: a pre-switch set, or one snapshot.
struct Unit<'a> {
    members: Vec<&'a Candidate>,
    /// The newest member's time (sets are ordered by it).
    newest: i64,
    oldest: i64,
}

impl Unit<'_> {
    fn protection(&self, c: &Candidate) -> Option<Protection> {
        if c.pinned {
            Some(Protection::Pinned)
        } else if c.kept {
            Some(Protection::Kept)
        } else if !c.open_at.is_empty() {
            Some(Protection::Open(c.open_at.clone()))
        } else if !c.parent_of.is_empty() {
            Some(Protection::LastCommonParent(c.parent_of.clone()))
        } else if self
            .members
            .iter()
            .any(|m| m.pinned || m.kept || !m.open_at.is_empty() || !m.parent_of.is_empty())
        {
            Some(Protection::SetMemberProtected)
        } else {
            None
        }
    }
}

/// Decide what goes. Deterministic: the same input gives the same plan, whatever the order
/// of `snapshots`. `free_bytes`: the free space now.
pub fn plan(snapshots: &[Candidate], policy: &Policy, now_micros: i64, free_bytes: u64) -> Plan {
    let mut sorted: Vec<&Candidate> = snapshots.iter().collect();
    sorted.sort_by(|a, b| {
        a.taken_micros
            .cmp(&b.taken_micros)
            .then_with(|| a.name.cmp(&b.name))
    });
    sorted.dedup_by(|a, b| a.name == b.name);

    // Units: pre-switch and timeline sets grouped by id; everything else alone.
    let mut sets: BTreeMap<Kind, Vec<&Candidate>> = BTreeMap::new();
    let mut singles: Vec<Unit> = Vec::new();
    for c in &sorted {
        match c.kind {
            Kind::PreSwitch { .. } | Kind::Timeline { .. } | Kind::Replaced { .. } => {
                sets.entry(c.kind).or_default().push(c)
            }
            _ => singles.push(Unit {
                members: vec![c],
                newest: c.taken_micros,
                oldest: c.taken_micros,
            }),
        }
    }
    let mut pre_switch: Vec<(i64, Unit)> = Vec::new();
    let mut timeline: Vec<(i64, Unit)> = Vec::new();
    let mut replaced: Vec<(i64, Unit)> = Vec::new();
    for (kind, members) in sets {
        let newest = members.iter().map(|m| m.taken_micros).max().unwrap_or(0);
        let oldest = members.iter().map(|m| m.taken_micros).min().unwrap_or(0);
        let unit = Unit {
            members,
            newest,
            oldest,
        };
        match kind {
            Kind::PreSwitch { set } => pre_switch.push((set, unit)),
            Kind::Timeline { set } => timeline.push((set, unit)),
            Kind::Replaced { kept_from_micros } => replaced.push((kept_from_micros, unit)),
            _ => {}
        }
    }
    // Newest set first; the id breaks ties.
    let newest_first =
        |a: &(i64, Unit), b: &(i64, Unit)| b.1.newest.cmp(&a.1.newest).then(b.0.cmp(&a.0));
    pre_switch.sort_by(newest_first);
    timeline.sort_by(newest_first);

    // Each unit with the rule that chose it, if any.
    let mut chosen: Vec<(Unit, Option<Rule>)> = Vec::new();
    for (i, (id, unit)) in pre_switch.into_iter().enumerate() {
        let rule = (i >= policy.pre_switch_sets).then_some(Rule::PreSwitchSets {
            keep: policy.pre_switch_sets,
            set: id,
        });
        chosen.push((unit, rule));
    }

    // Timeline: the newest set of each of the last N periods that have one.
    let mut timeline_keep: BTreeSet<i64> = BTreeSet::new();
    let counts = [policy.hourly, policy.daily, policy.weekly, policy.monthly];
    for (g, count) in counts.iter().enumerate() {
        let mut seen: Vec<i64> = Vec::new();
        for (id, unit) in &timeline {
            if seen.len() >= *count {
                break;
            }
            let p = period(unit.newest, g);
            if !seen.contains(&p) {
                seen.push(p);
                timeline_keep.insert(*id);
            }
        }
    }
    for (id, unit) in timeline {
        let rule = (!timeline_keep.contains(&id)).then_some(Rule::Timeline {
            hourly: policy.hourly,
            daily: policy.daily,
            weekly: policy.weekly,
            monthly: policy.monthly,
        });
        chosen.push((unit, rule));
    }
    // Replaced: by the boot's time, not the snapshots' (they are named at that boot too).
    let replaced_for =
        i64::try_from(policy.replaced_days.saturating_mul(86_400_000_000)).unwrap_or(i64::MAX);
    for (kept_from_micros, unit) in replaced {
        let rule = (now_micros.saturating_sub(kept_from_micros) > replaced_for).then_some(
            Rule::ReplacedKeptDays {
                days: policy.replaced_days,
            },
        );
        chosen.push((unit, rule));
    }
    for unit in singles {
        let c = unit.members[0];
        let rule = match c.kind {
            Kind::Manual => policy.manual_max_age.and_then(|max_age| {
                let age = now_micros.saturating_sub(c.taken_micros);
                (age > i64::try_from(max_age.as_micros()).unwrap_or(i64::MAX))
                    .then_some(Rule::ManualMaxAge { max_age })
            }),
            _ => None,
        };
        chosen.push((unit, rule));
    }

    // The floor: one more automatic unit the rules kept, the oldest first; never one with an
    // open member (its deletion would be refused, and the space not come back). A unit that
    // is only held by a last common parent is named (spared, under the floor's rule) when no
    // other is left, so the plan says why the floor is unmet.
    let mut floor_unmet = false;
    let mut floor_held_by_parents = false;
    if policy.floor_bytes > 0 && free_bytes < policy.floor_bytes {
        let floor_rule = Rule::FreeSpaceFloor {
            free_bytes,
            floor_bytes: policy.floor_bytes,
        };
        let pick = |chosen: &[(Unit, Option<Rule>)], parents_too: bool| {
            chosen
                .iter()
                .enumerate()
                .filter(|(_, (u, rule))| {
                    rule.is_none()
                        && u.members.iter().all(|m| {
                            !m.pinned
                                && !m.kept
                                && m.open_at.is_empty()
                                && (parents_too || m.parent_of.is_empty())
                        })
                        && matches!(
                            u.members[0].kind,
                            Kind::PreSwitch { .. } | Kind::Timeline { .. }
                        )
                })
                .min_by(|(_, a), (_, b)| {
                    a.0.oldest
                        .cmp(&b.0.oldest)
                        .then_with(|| a.0.members[0].name.cmp(&b.0.members[0].name))
                })
                .map(|(i, _)| i)
        };
        match pick(&chosen, false) {
            Some(i) => chosen[i].1 = Some(floor_rule),
            None => {
                floor_unmet = true;
                if let Some(i) = pick(&chosen, true) {
                    chosen[i].1 = Some(floor_rule);
                    floor_held_by_parents = true;
                }
            }
        }
    }

    let mut out = Plan {
        floor_unmet,
        floor_held_by_parents,
        ..Plan::default()
    };
    for (unit, rule) in &chosen {
        let Some(rule) = rule else { continue };
        for m in &unit.members {
            match unit.protection(m) {
                Some(protection) => out.spared.push(Spared {
                    name: m.name.clone(),
                    rule: rule.clone(),
                    protection,
                }),
                None => out.delete.push(Deletion {
                    name: m.name.clone(),
                    rule: rule.clone(),
                }),
            }
        }
    }
    let time_of: BTreeMap<&str, i64> = sorted
        .iter()
        .map(|c| (c.name.as_str(), c.taken_micros))
        .collect();
    let key = |n: &str| (time_of.get(n).copied().unwrap_or(0), n.to_owned());
    out.delete.sort_by_key(|d| key(&d.name));
    out.spared.sort_by_key(|s| key(&s.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(name: &str, hours_ago: i64, kind: Kind) -> Candidate {
        Candidate {
            name: name.into(),
            taken_micros: NOW - hours_ago * HOUR,
            kind,
            kept: false,
            pinned: false,
            parent_of: Vec::new(),
            open_at: Vec::new(),
        }
    }

    #[test]
    fn what_a_restore_replaced_goes_after_its_days_whole_and_counts_against_nothing() {
        let policy = Policy {
            pre_switch_sets: 1,
            hourly: 0,
            daily: 0,
            weekly: 0,
            monthly: 0,
            manual_max_age: None,
            floor_bytes: 100,
            replaced_days: 7,
        };
        let boot = |days: i64| Kind::Replaced {
            kept_from_micros: NOW - days * 24 * HOUR,
        };
        let snaps = vec![
            c("pre-old", 30 * 24, Kind::PreSwitch { set: 1 }),
            c("pre-new", 29 * 24, Kind::PreSwitch { set: 2 }),
            // One restore of two members eight days ago, one of one member yesterday.
            c("@home.old", 8 * 24, boot(8)),
            c("@log.old", 8 * 24, boot(8)),
            c("@home.new", 24, boot(1)),
        ];
        // Plenty of space: the eight-day-old restore's go, together; the other stays, and
        // the pre-switch rule counts none of them.
        let p = plan(&snaps, &policy, NOW, 1000);
        assert_eq!(names(&p), ["pre-old", "@home.old", "@log.old"]);
        assert!(p
            .delete
            .iter()
            .filter(|d| d.name.ends_with(".old"))
            .all(|d| d.rule == Rule::ReplacedKeptDays { days: 7 }));
        // Below the floor, the floor takes automatic snapshots, never a way back early.
        let p = plan(&snaps, &policy, NOW, 10);
        assert!(!names(&p).contains(&"@home.new"), "{:?}", names(&p));
    }

    /// 2026-12-02 12:00 UTC.
    const NOW: i64 = 1_796_212_800_000_000;

    fn names(p: &Plan) -> Vec<&str> {
        p.delete.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn older_pre_switch_sets_go_whole() {
        let policy = Policy {
            pre_switch_sets: 1,
            floor_bytes: 0,
            replaced_days: 7,
            ..Policy::default()
        };
        let snaps = vec![
            c("a1", 10, Kind::PreSwitch { set: 1 }),
            c("a2", 10, Kind::PreSwitch { set: 1 }),
            c("b1", 5, Kind::PreSwitch { set: 2 }),
            c("b2", 5, Kind::PreSwitch { set: 2 }),
        ];
        let p = plan(&snaps, &policy, NOW, u64::MAX);
        assert_eq!(names(&p), ["a1", "a2"]);
        assert!(matches!(
            p.delete[0].rule,
            Rule::PreSwitchSets { keep: 1, set: 1 }
        ));
    }

    #[test]
    fn a_protected_member_keeps_its_whole_set() {
        let policy = Policy {
            pre_switch_sets: 0,
            floor_bytes: 0,
            replaced_days: 7,
            ..Policy::default()
        };
        let mut snaps = vec![
            c("a1", 10, Kind::PreSwitch { set: 1 }),
            c("a2", 10, Kind::PreSwitch { set: 1 }),
        ];
        snaps[1].pinned = true;
        let p = plan(&snaps, &policy, NOW, u64::MAX);
        assert!(p.delete.is_empty());
        assert_eq!(p.spared[0].protection, Protection::SetMemberProtected);
        assert_eq!(p.spared[1].protection, Protection::Pinned);
    }

    /// Timeline retention by the hour alone: `hourly` kept, no other period, no floor.
    fn hourly_only(hourly: usize) -> Policy {
        Policy {
            hourly,
            daily: 0,
            weekly: 0,
            monthly: 0,
            floor_bytes: 0,
            replaced_days: 7,
            ..Policy::default()
        }
    }

    #[test]
    fn timeline_keeps_the_newest_of_each_period() {
        let policy = hourly_only(2);
        // Two in the newest hour, one in the hour before, one three hours ago.
        let mut snaps = vec![
            c("t3", 3, Kind::Timeline { set: 1 }),
            c("t1", 1, Kind::Timeline { set: 2 }),
            c("t0a", 0, Kind::Timeline { set: 3 }),
            c("t0b", 0, Kind::Timeline { set: 4 }),
        ];
        snaps[2].taken_micros += 10 * 60_000_000;
        snaps[3].taken_micros += 20 * 60_000_000;
        let p = plan(&snaps, &policy, NOW, u64::MAX);
        assert_eq!(names(&p), ["t3", "t0a"]);
    }

    #[test]
    fn manual_stays_unless_a_max_age_is_stated() {
        let snaps = vec![c("m", 24 * 400, Kind::Manual)];
        let mut policy = Policy {
            floor_bytes: 0,
            replaced_days: 7,
            ..Policy::default()
        };
        assert!(plan(&snaps, &policy, NOW, 0).delete.is_empty());
        policy.manual_max_age = Some(Duration::from_secs(365 * 86_400));
        let p = plan(&snaps, &policy, NOW, 0);
        assert_eq!(names(&p), ["m"]);
        assert_eq!(p.delete[0].rule.code(), "manual-max-age");
    }

    #[test]
    fn below_the_floor_the_oldest_automatic_goes_first() {
        let policy = Policy {
            floor_bytes: 100,
            replaced_days: 7,
            ..Policy::default()
        };
        let snaps = vec![
            c("manual-old", 50, Kind::Manual),
            c("unknown-old", 60, Kind::UnknownOrigin),
            c("t-old", 20, Kind::Timeline { set: 7 }),
            c("s-new1", 2, Kind::PreSwitch { set: 9 }),
            c("s-old1", 30, Kind::PreSwitch { set: 3 }),
            c("s-old2", 30, Kind::PreSwitch { set: 3 }),
        ];
        let p = plan(&snaps, &policy, NOW, 99);
        assert_eq!(names(&p), ["s-old1", "s-old2"]);
        assert_eq!(p.delete[0].rule.code(), "free-space-floor");
        assert!(p.delete[0].rule.to_string().contains("below the floor"));
        assert!(plan(&snaps, &policy, NOW, 100).delete.is_empty());
        // Nothing automatic left: the floor cannot be met, and the plan says so.
        let only_manual = vec![c("m", 5, Kind::Manual)];
        let p = plan(&only_manual, &policy, NOW, 1);
        assert!(p.delete.is_empty() && p.floor_unmet);
    }

    #[test]
    fn weeks_start_on_monday_and_months_are_calendar_months() {
        let monday = time::macros::datetime!(2026-11-30 00:00 UTC).unix_timestamp() * 1_000_000;
        assert_ne!(period(monday, 2), period(monday - 1, 2));
        assert_eq!(period(monday, 2), period(monday + 7 * DAY - 1, 2));
        let december = time::macros::datetime!(2026-12-01 00:00 UTC).unix_timestamp() * 1_000_000;
        assert_eq!(period(december, 3), period(december - 1, 3) + 1);
        assert_eq!(period(december, 1), period(december - 1, 1) + 1);
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            (0i64..6).prop_map(|set| Kind::PreSwitch { set }),
            (10i64..40).prop_map(|set| Kind::Timeline { set }),
            (10i64..40).prop_map(|set| Kind::Timeline { set }),
            Just(Kind::Manual),
            Just(Kind::UnknownOrigin),
        ]
    }

    fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
        prop::collection::vec(
            (
                0i64..90 * DAY,
                kind(),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.05),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
            ),
            0..80,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (ago, kind, kept, pinned, parent, open))| Candidate {
                    name: format!("s{i:03}"),
                    taken_micros: NOW - ago,
                    kind,
                    kept,
                    pinned,
                    parent_of: if parent {
                        vec!["usb".into()]
                    } else {
                        Vec::new()
                    },
                    open_at: if open {
                        vec![format!("/run/tacid/1000/s{i:03}")]
                    } else {
                        Vec::new()
                    },
                })
                .collect()
        })
    }

    fn policy() -> impl Strategy<Value = Policy> {
        (
            0usize..4,
            0usize..30,
            0usize..10,
            0usize..6,
            0usize..4,
            prop::option::of(0u64..100),
            0u64..200,
        )
            .prop_map(|(sets, h, d, w, m, age_days, floor)| Policy {
                pre_switch_sets: sets,
                hourly: h,
                daily: d,
                weekly: w,
                monthly: m,
                manual_max_age: age_days.map(|d| Duration::from_secs(d * 86_400)),
                floor_bytes: floor,
                replaced_days: 7,
            })
    }

    #[test]
    fn the_last_common_parent_with_a_target_stays_whatever_the_rule() {
        // Three hourly timeline sets of /home, the oldest copied to usb; a target away keeps
        // nothing newer. Hourly 1 chooses the two older sets; the copied one stays.
        let policy = hourly_only(1);
        let mut snaps = vec![
            c("@home.a", 30, Kind::Timeline { set: 1 }),
            c("@home.b", 20, Kind::Timeline { set: 2 }),
            c("@home.c", 10, Kind::Timeline { set: 3 }),
            c("@var-log.a", 30, Kind::Timeline { set: 1 }),
        ];
        let local: Vec<InStore> = snaps
            .iter()
            .map(|s| InStore {
                name: &s.name,
                of: s.name.split('.').next().unwrap(),
                taken_micros: s.taken_micros,
            })
            .collect();
        // usb holds a and b of /home (b the newest); gone is not configured.
        let held = [
            ("usb", "@home.a"),
            ("usb", "@home.b"),
            ("gone", "@home.c"),
            ("usb", "@home.deleted-here"),
        ];
        let parents = last_common_parents(&local, &held, &["usb"].into());
        assert_eq!(
            parents,
            [("@home.b", vec!["usb".to_owned()])].into_iter().collect()
        );
        snaps[1].parent_of = vec!["usb".into()];
        let p = plan(&snaps, &policy, NOW, u64::MAX);
        assert_eq!(names(&p), ["@home.a", "@var-log.a"]);
        assert_eq!(
            p.spared[0].protection,
            Protection::LastCommonParent(vec!["usb".into()])
        );
        assert!(p.spared[0]
            .protection
            .to_string()
            .starts_with("last common parent with usb"));

        // Below the floor with only the parent's set left: it stays, and the plan says so.
        let floor = Policy {
            floor_bytes: 100,
            replaced_days: 7,
            ..policy
        };
        let only = vec![snaps[1].clone()];
        let p = plan(&only, &floor, NOW, 1);
        assert!(p.delete.is_empty());
        assert!(p.floor_unmet && p.floor_held_by_parents);
        assert_eq!(p.spared[0].rule.code(), "free-space-floor");
        // Another automatic set is there: the floor takes that one instead.
        let two = vec![snaps[1].clone(), c("@home.z", 1, Kind::Timeline { set: 9 })];
        let p = plan(&two, &floor, NOW, 1);
        assert_eq!(names(&p), ["@home.z"]);
        assert!(!p.floor_unmet);
    }

    #[test]
    fn an_open_snapshot_keeps_its_set_and_the_floor_does_not_count_on_it() {
        let policy = hourly_only(1);
        let mut snaps = vec![
            c("@home.a", 30, Kind::Timeline { set: 1 }),
            c("@var-log.a", 30, Kind::Timeline { set: 1 }),
            c("@home.b", 20, Kind::Timeline { set: 2 }),
            c("@home.c", 10, Kind::Timeline { set: 3 }),
        ];
        snaps[0].open_at = vec!["/run/tacid/1000/@home.a".into()];
        let p = plan(&snaps, &policy, NOW, u64::MAX);
        assert_eq!(names(&p), ["@home.b"]);
        assert_eq!(
            p.spared[0].protection,
            Protection::Open(vec!["/run/tacid/1000/@home.a".into()])
        );
        assert!(p.spared[0]
            .protection
            .to_string()
            .starts_with("open at /run/tacid/1000/@home.a (in use until it is closed"));
        assert_eq!(p.spared[1].protection, Protection::SetMemberProtected);

        // Below the floor, the oldest set is open: the floor takes the next one instead, and
        // with only the open one left it is unmet, deleting nothing.
        let floor = Policy {
            floor_bytes: 100,
            replaced_days: 7,
            hourly: 3,
            ..policy
        };
        let p = plan(&snaps, &floor, NOW, 1);
        assert_eq!(names(&p), ["@home.b"]);
        assert_eq!(p.delete[0].rule.code(), "free-space-floor");
        let p = plan(&snaps[..2], &floor, NOW, 1);
        assert!(p.delete.is_empty() && p.floor_unmet && !p.floor_held_by_parents);
    }

    proptest! {
        #[test]
        fn never_deletes_pinned_kept_open_unknown_or_a_last_common_parent(snaps in candidates(), p in policy(), free in 0u64..300) {
            let out = plan(&snaps, &p, NOW, free);
            for d in &out.delete {
                let s = snaps.iter().find(|s| s.name == d.name).unwrap();
                prop_assert!(!s.pinned && !s.kept, "{} deleted though protected", d.name);
                prop_assert!(s.open_at.is_empty(), "{} deleted though open", d.name);
                prop_assert!(s.parent_of.is_empty(), "{} deleted though a last common parent", d.name);
                prop_assert!(s.kind != Kind::UnknownOrigin);
            }
            prop_assert!(!out.floor_held_by_parents || out.floor_unmet);
        }

        /// From what targets hold to the plan: for every configured target and subvolume,
        /// the newest snapshot here the target holds survives, whatever the rules and floor.
        #[test]
        fn the_newest_snapshot_each_target_holds_survives(
            mut snaps in candidates(),
            p in policy(),
            free in 0u64..300,
            held_bits in prop::collection::vec((0usize..80, 0usize..3), 0..40),
        ) {
            let targets = ["usb", "offsite", "unconfigured"];
            let configured: BTreeSet<&str> = ["usb", "offsite"].into();
            for s in &mut snaps {
                s.parent_of.clear();
            }
            let subvolume = |i: usize| ["@home", "@persist", "@var-log"][i % 3];
            let names: Vec<String> = snaps.iter().map(|s| s.name.clone()).collect();
            let held: Vec<(&str, &str)> = held_bits
                .iter()
                .filter(|(i, _)| *i < names.len())
                .map(|(i, t)| (targets[*t], names[*i].as_str()))
                .collect();
            let local: Vec<InStore> = snaps
                .iter()
                .enumerate()
                .map(|(i, s)| InStore { name: &names[i], of: subvolume(i), taken_micros: s.taken_micros })
                .collect();
            let parents = last_common_parents(&local, &held, &configured);
            let mut with = snaps.clone();
            for s in &mut with {
                if let Some(t) = parents.get(s.name.as_str()) {
                    s.parent_of = t.clone();
                }
            }
            let out = plan(&with, &p, NOW, free);
            let gone: BTreeSet<&str> = out.delete.iter().map(|d| d.name.as_str()).collect();
            for t in ["usb", "offsite"] {
                for sub in ["@home", "@persist", "@var-log"] {
                    let newest = local
                        .iter()
                        .filter(|l| l.of == sub && held.contains(&(t, l.name)))
                        .max_by_key(|l| (l.taken_micros, l.name));
                    if let Some(n) = newest {
                        prop_assert!(!gone.contains(n.name), "{} (newest on {t}) deleted", n.name);
                    }
                }
            }
            // An unconfigured target protects nothing.
            for (name, ts) in &parents {
                prop_assert!(!ts.iter().any(|t| t == "unconfigured"), "{name}");
            }
        }

        #[test]
        fn same_input_same_choice_in_any_order(snaps in candidates(), p in policy(), free in 0u64..300, seed in any::<u64>()) {
            let a = plan(&snaps, &p, NOW, free);
            let mut shuffled = snaps.clone();
            // A deterministic shuffle from the seed.
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(&a, &plan(&shuffled, &p, NOW, free));
        }

        #[test]
        fn a_set_goes_whole_or_not_at_all(snaps in candidates(), p in policy(), free in 0u64..300) {
            let out = plan(&snaps, &p, NOW, free);
            let gone: BTreeSet<&str> = out.delete.iter().map(|d| d.name.as_str()).collect();
            for s in &snaps {
                if let Kind::PreSwitch { set } | Kind::Timeline { set } = s.kind {
                    let members: Vec<&Candidate> = snaps.iter().filter(|m| m.kind == s.kind).collect();
                    let n = members.iter().filter(|m| gone.contains(m.name.as_str())).count();
                    prop_assert!(n == 0 || n == members.len(), "set {set}: {n} of {} go", members.len());
                }
            }
        }

        #[test]
        fn counts_are_respected(snaps in candidates(), p in policy()) {
            // Above the floor only the counts decide.
            let out = plan(&snaps, &p, NOW, u64::MAX);
            let gone: BTreeSet<&str> = out.delete.iter().map(|d| d.name.as_str()).collect();
            // The newest `pre_switch_sets` sets all stay; no set beyond them stays unless protected.
            let mut sets: BTreeMap<i64, (i64, bool)> = BTreeMap::new();
            for s in &snaps {
                if let Kind::PreSwitch { set } = s.kind {
                    let e = sets.entry(set).or_insert((i64::MIN, false));
                    e.0 = e.0.max(s.taken_micros);
                    e.1 |= s.pinned || s.kept || !s.open_at.is_empty() || !s.parent_of.is_empty();
                }
            }
            let mut order: Vec<(i64, i64, bool)> = sets.iter().map(|(id, (t, prot))| (*t, *id, *prot)).collect();
            order.sort_by(|a, b| b.cmp(a));
            for (i, (_, id, prot)) in order.iter().enumerate() {
                let any_gone = snaps.iter().any(|s| s.kind == Kind::PreSwitch { set: *id } && gone.contains(s.name.as_str()));
                prop_assert_eq!(any_gone, i >= p.pre_switch_sets && !prot, "set {}", id);
            }
            // Timeline, by set (its time: its newest member): unprotected survivors are at
            // most hourly+daily+weekly+monthly, the newest stays whenever a count is
            // non-zero, and each of the last N periods that have a set keeps one.
            let mut tsets: BTreeMap<i64, (i64, bool, bool)> = BTreeMap::new();
            for s in &snaps {
                if let Kind::Timeline { set } = s.kind {
                    let e = tsets.entry(set).or_insert((i64::MIN, false, false));
                    e.0 = e.0.max(s.taken_micros);
                    e.1 |= s.pinned || s.kept || !s.open_at.is_empty() || !s.parent_of.is_empty();
                    e.2 |= gone.contains(s.name.as_str());
                }
            }
            let total = p.hourly + p.daily + p.weekly + p.monthly;
            let stay = tsets.values().filter(|(_, prot, g)| !g && !prot).count();
            prop_assert!(stay <= total);
            if let Some((_, (_, _, g))) = tsets.iter().max_by(|a, b| (a.1).0.cmp(&(b.1).0).then(a.0.cmp(b.0))) {
                if total > 0 {
                    prop_assert!(!g);
                }
            }
            for (g, n) in [p.hourly, p.daily, p.weekly, p.monthly].into_iter().enumerate() {
                let mut periods: Vec<i64> = tsets.values().map(|(t, _, _)| period(*t, g)).collect();
                periods.sort_unstable_by(|a, b| b.cmp(a));
                periods.dedup();
                for per in periods.into_iter().take(n) {
                    prop_assert!(tsets.values().any(|(t, _, gone)| period(*t, g) == per && !gone));
                }
            }
            // Manual: only by age, never by count.
            for s in snaps.iter().filter(|s| s.kind == Kind::Manual) {
                if gone.contains(s.name.as_str()) {
                    let max = p.manual_max_age.unwrap();
                    prop_assert!(NOW - s.taken_micros > max.as_micros() as i64);
                }
            }
        }

        #[test]
        fn below_the_floor_at_most_one_more_unit_goes(snaps in candidates(), p in policy(), free in 0u64..300) {
            let above: BTreeSet<String> = plan(&snaps, &p, NOW, u64::MAX).delete.into_iter().map(|d| d.name).collect();
            let below = plan(&snaps, &p, NOW, free);
            let extra: Vec<&Deletion> = below.delete.iter().filter(|d| !above.contains(&d.name)).collect();
            let units: BTreeSet<Kind> = extra.iter().map(|d| snaps.iter().find(|s| s.name == d.name).unwrap().kind).collect();
            prop_assert!(units.len() <= 1);
            for d in extra {
                prop_assert_eq!(d.rule.code(), "free-space-floor");
            }
        }
    }
}
