//! Retention on a copy target: which copies go, by the target's own counts.
//!
//! A pure function, like [`crate::retention::plan`], whose periods it shares: per
//! subvolume, a copy stays when it is among the newest `latest` copies, or the newest copy
//! of its day, week (Monday to Sunday) or month (UTC) among the last `daily`, `weekly` or
//! `monthly` such periods that have a copy. Whatever the counts say, the newest copy of each
//! subvolume stays, and so does the newest copy whose snapshot the local store still holds:
//! that one is the last common parent the next incremental copy is sent against (the newest
//! copy is not, when its snapshot was deleted here), and without it the next copy is a full
//! one.

use std::collections::BTreeMap;

use crate::retention::period;

/// One copy on the target, as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCopy {
    /// Its name, the snapshot's (`@home.2026-12-01T140200.123456Z`).
    pub name: String,
    /// The subvolume it is of (`@home`).
    pub of: String,
    /// When its snapshot was taken, µs since the epoch (UTC).
    pub taken_micros: i64,
    /// The local store still holds its snapshot: it can be the next incremental's parent.
    pub in_store: bool,
}

/// A target's counts (the configuration's `keep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetKeep {
    pub latest: usize,
    pub daily: usize,
    pub weekly: usize,
    pub monthly: usize,
}

impl TargetKeep {
    /// The counts in words: "the newest 3 copies of each subvolume, and the newest of each
    /// of the last 7 days, 4 weeks and 6 months".
    pub fn describe(&self) -> String {
        format!(
            "the newest {} copies of each subvolume, and the newest of each of the last {} days, \
             {} weeks and {} months",
            self.latest, self.daily, self.weekly, self.monthly
        )
    }
}

/// A copy chosen to go, and why in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyDeletion {
    pub name: String,
    pub why: String,
}

/// Decide which copies on one target go, oldest first. Deterministic: the same copies in
/// any order give the same answer.
pub fn plan(copies: &[HeldCopy], keep: &TargetKeep) -> Vec<CopyDeletion> {
    let mut by_subvolume: BTreeMap<&str, Vec<&HeldCopy>> = BTreeMap::new();
    for c in copies {
        by_subvolume.entry(c.of.as_str()).or_default().push(c);
    }
    let mut out: Vec<(i64, CopyDeletion)> = Vec::new();
    for (of, mut held) in by_subvolume {
        // Newest first; the name breaks ties, and a name listed twice counts once.
        held.sort_by(|a, b| {
            b.taken_micros
                .cmp(&a.taken_micros)
                .then_with(|| b.name.cmp(&a.name))
        });
        held.dedup_by(|a, b| a.name == b.name);
        let mut stays = vec![false; held.len()];
        // The newest, and the newest the store also holds: the next incremental's parent.
        if let Some(first) = stays.first_mut() {
            *first = true;
        }
        if let Some(i) = held.iter().position(|c| c.in_store) {
            stays[i] = true;
        }
        for s in stays.iter_mut().take(keep.latest) {
            *s = true;
        }
        // Days, weeks, months: `period`'s granularities 1, 2 and 3.
        for (g, count) in [(1, keep.daily), (2, keep.weekly), (3, keep.monthly)] {
            let mut seen: Vec<i64> = Vec::new();
            for (i, c) in held.iter().enumerate() {
                if seen.len() >= count {
                    break;
                }
                let p = period(c.taken_micros, g);
                if !seen.contains(&p) {
                    seen.push(p);
                    stays[i] = true;
                }
            }
        }
        for (c, stays) in held.iter().zip(stays) {
            if !stays {
                out.push((
                    c.taken_micros,
                    CopyDeletion {
                        name: c.name.clone(),
                        why: format!("not among {} (of {of})", keep.describe()),
                    },
                ));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    out.into_iter().map(|(_, d)| d).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    const HOUR: i64 = 3_600_000_000;
    const DAY: i64 = 24 * HOUR;
    /// 2026-12-02 12:00 UTC.
    const NOW: i64 = 1_796_212_800_000_000;

    fn copy(of: &str, ago: i64) -> HeldCopy {
        HeldCopy {
            name: format!("{of}.{ago}"),
            of: of.into(),
            taken_micros: NOW - ago,
            in_store: false,
        }
    }

    fn gone(d: &[CopyDeletion]) -> Vec<&str> {
        d.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn the_latest_and_the_newest_of_each_day_stay() {
        let keep = TargetKeep {
            latest: 2,
            daily: 2,
            weekly: 0,
            monthly: 0,
        };
        // Three today (hours apart), one yesterday, one the day before.
        let copies = vec![
            copy("@home", 1),
            copy("@home", 2 * HOUR),
            copy("@home", 4 * HOUR),
            copy("@home", DAY),
            copy("@home", 2 * DAY),
        ];
        let d = plan(&copies, &keep);
        // Kept: the newest two (latest), today's newest and yesterday's (daily).
        let expect = vec![format!("@home.{}", 2 * DAY), format!("@home.{}", 4 * HOUR)];
        assert_eq!(gone(&d), expect);
        assert!(d[0].why.contains("of @home"), "{}", d[0].why);
    }

    #[test]
    fn with_every_count_zero_the_newest_of_each_subvolume_stays() {
        let keep = TargetKeep {
            latest: 0,
            daily: 0,
            weekly: 0,
            monthly: 0,
        };
        let copies = vec![
            copy("@home", 1),
            copy("@home", DAY),
            copy("@persist", 5),
            copy("@persist", 3 * DAY),
        ];
        let d = plan(&copies, &keep);
        assert_eq!(
            gone(&d),
            vec![format!("@persist.{}", 3 * DAY), format!("@home.{DAY}")]
        );
    }

    #[test]
    fn the_last_common_parent_stays_when_the_newest_copy_is_gone_from_the_store() {
        let keep = TargetKeep {
            latest: 1,
            daily: 0,
            weekly: 0,
            monthly: 0,
        };
        // The target holds three copies; the newest one's snapshot was deleted here, so the
        // next incremental is sent against the one before it, which the store still holds.
        let copies = vec![
            copy("@home", HOUR),
            HeldCopy {
                in_store: true,
                ..copy("@home", 2 * HOUR)
            },
            HeldCopy {
                in_store: true,
                ..copy("@home", 3 * HOUR)
            },
        ];
        let d = plan(&copies, &keep);
        assert_eq!(gone(&d), vec![format!("@home.{}", 3 * HOUR)]);
    }

    fn copies() -> impl Strategy<Value = Vec<HeldCopy>> {
        proptest::collection::vec(
            (
                prop::sample::select(vec!["@home", "@persist", "@log"]),
                0i64..(400 * DAY),
                any::<bool>(),
            ),
            0..40,
        )
        .prop_map(|v| {
            v.into_iter()
                .map(|(of, ago, in_store)| HeldCopy {
                    in_store,
                    ..copy(of, ago)
                })
                .collect()
        })
    }

    fn keep() -> impl Strategy<Value = TargetKeep> {
        (0usize..5, 0usize..10, 0usize..6, 0usize..8).prop_map(
            |(latest, daily, weekly, monthly)| TargetKeep {
                latest,
                daily,
                weekly,
                monthly,
            },
        )
    }

    proptest! {
        #[test]
        fn never_deletes_the_newest_of_a_subvolume(cs in copies(), k in keep()) {
            let d = plan(&cs, &k);
            let gone: BTreeSet<&str> = d.iter().map(|d| d.name.as_str()).collect();
            for of in ["@home", "@persist", "@log"] {
                let newest = cs.iter().filter(|c| c.of == of)
                    .max_by(|a, b| a.taken_micros.cmp(&b.taken_micros).then_with(|| a.name.cmp(&b.name)));
                if let Some(n) = newest {
                    prop_assert!(!gone.contains(n.name.as_str()), "{} deleted", n.name);
                }
                // Nor the last common parent: the newest copy the store still holds.
                let parent = cs.iter().filter(|c| c.of == of && c.in_store)
                    .max_by(|a, b| a.taken_micros.cmp(&b.taken_micros).then_with(|| a.name.cmp(&b.name)));
                if let Some(p) = parent {
                    prop_assert!(!gone.contains(p.name.as_str()), "parent {} deleted", p.name);
                }
            }
        }

        #[test]
        fn keeps_the_latest_count_and_deletes_only_what_it_was_given(cs in copies(), k in keep()) {
            let d = plan(&cs, &k);
            let gone: BTreeSet<&str> = d.iter().map(|d| d.name.as_str()).collect();
            prop_assert_eq!(gone.len(), d.len(), "each once");
            for g in &gone {
                prop_assert!(cs.iter().any(|c| c.name == *g));
            }
            for of in ["@home", "@persist", "@log"] {
                let names: BTreeSet<&str> = cs.iter().filter(|c| c.of == of).map(|c| c.name.as_str()).collect();
                let left = names.iter().filter(|n| !gone.contains(*n)).count();
                prop_assert!(left >= k.latest.max(1).min(names.len()));
                // At most the counts (and the newest, and the last common parent) stay.
                prop_assert!(left <= (k.latest + k.daily + k.weekly + k.monthly).max(1) + 1);
            }
        }

        #[test]
        fn same_copies_same_choice_in_any_order(cs in copies(), k in keep()) {
            let mut rev = cs.clone();
            rev.reverse();
            prop_assert_eq!(plan(&cs, &k), plan(&rev, &k));
        }
    }
}
