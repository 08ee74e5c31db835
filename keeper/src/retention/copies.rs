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

use std::collections::{BTreeMap, BTreeSet};

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
        use crate::words::count;
        format!(
            "the newest {} of each subvolume, and the newest of each of the last {}, {} and {}",
            count(self.latest as u64, "copy", "copies"),
            count(self.daily as u64, "day", "days"),
            count(self.weekly as u64, "week", "weeks"),
            count(self.monthly as u64, "month", "months")
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

/// One copy on a sealed target, as the copier lists it: what the parent choice and the
/// chains need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedHeld {
    pub name: String,
    /// The subvolume it is of (`@home`).
    pub of: String,
    pub taken_micros: i64,
    pub uuid: String,
    /// Empty for a full copy.
    pub parent_uuid: String,
    /// 0 for a full copy.
    pub depth: u32,
    pub stored_bytes: u64,
}

/// How long a sealed target lets a chain grow (its configuration's `seal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainBound {
    /// A chain holds at most this many copies, its full copy counted (0 and 1: every copy
    /// is full).
    pub full_every: u32,
    /// A full copy once the incrementals since the last full add up to more than this
    /// many stored bytes; `None`: more than the full's own.
    pub full_past_bytes: Option<u64>,
}

/// The copies `from`'s chain is made of, `from` first, down to its full copy; `None` when a
/// link is missing (a parent not listed, or a loop).
pub fn chain_of<'a>(from: &'a SealedHeld, held: &'a [SealedHeld]) -> Option<Vec<&'a SealedHeld>> {
    let mut out = vec![from];
    let mut at = from;
    while !at.parent_uuid.is_empty() {
        let parent = held.iter().find(|c| c.uuid == at.parent_uuid)?;
        if out.len() > held.len() {
            return None;
        }
        out.push(parent);
        at = parent;
    }
    Some(out)
}

/// The parent a new copy of a snapshot of `of` is sealed against: the newest copy of `of`
/// whose snapshot the store still holds (by UUID, `in_store`), unless the chain would grow
/// past `bound` (its length, or its incrementals' stored bytes) or is broken: then `None`,
/// a full copy.
pub fn sealed_parent<'a>(
    of: &str,
    held: &'a [SealedHeld],
    in_store: impl Fn(&str) -> bool,
    bound: ChainBound,
) -> Option<&'a SealedHeld> {
    let parent = held
        .iter()
        .filter(|c| c.of == of && in_store(&c.uuid))
        .max_by(|a, b| {
            a.taken_micros
                .cmp(&b.taken_micros)
                .then_with(|| a.name.cmp(&b.name))
        })?;
    // The new copy's chain is the parent's and itself.
    if parent.depth.saturating_add(2) > bound.full_every {
        return None;
    }
    let chain = chain_of(parent, held)?;
    let full = chain.last()?;
    let incrementals: u64 = chain
        .iter()
        .filter(|c| c.depth > 0)
        .map(|c| c.stored_bytes)
        .sum();
    if incrementals > bound.full_past_bytes.unwrap_or(full.stored_bytes) {
        return None;
    }
    Some(parent)
}

/// Of `deletions` (by name), those that may go: none that the chain of a copy that stays
/// needs. In the order to delete them: the deepest first, so that no copy is deleted
/// before one that was sent against it.
pub fn sealed_deletions(held: &[SealedHeld], deletions: Vec<CopyDeletion>) -> Vec<CopyDeletion> {
    let going: BTreeSet<&str> = deletions.iter().map(|d| d.name.as_str()).collect();
    let mut needed: BTreeSet<&str> = BTreeSet::new();
    for kept in held.iter().filter(|c| !going.contains(c.name.as_str())) {
        let mut at = kept;
        let mut steps = 0;
        while !at.parent_uuid.is_empty() && steps <= held.len() {
            match held.iter().find(|c| c.uuid == at.parent_uuid) {
                Some(p) => {
                    needed.insert(p.name.as_str());
                    at = p;
                }
                None => break,
            }
            steps += 1;
        }
    }
    let depth = |name: &str| held.iter().find(|c| c.name == name).map_or(0, |c| c.depth);
    let mut out: Vec<CopyDeletion> = deletions
        .into_iter()
        .filter(|d| !needed.contains(d.name.as_str()))
        .collect();
    out.sort_by(|a, b| {
        depth(&b.name)
            .cmp(&depth(&a.name))
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

#[cfg(test)]
mod sealed_tests {
    use super::*;

    /// A chain of `n` copies of @home, a full one then incrementals, a day apart, each of
    /// `bytes` stored bytes: names `@home.d0`…, UUIDs `u0`….
    fn chain(n: u32, bytes: u64) -> Vec<SealedHeld> {
        (0..n)
            .map(|i| SealedHeld {
                name: format!("@home.d{i}"),
                of: "@home".into(),
                taken_micros: i64::from(i) * 86_400_000_000,
                uuid: format!("u{i}"),
                parent_uuid: if i == 0 {
                    String::new()
                } else {
                    format!("u{}", i - 1)
                },
                depth: i,
                stored_bytes: bytes,
            })
            .collect()
    }

    const EVERY_2: ChainBound = ChainBound {
        full_every: 2,
        full_past_bytes: None,
    };

    #[test]
    fn a_chain_is_bounded_by_its_length_its_full_copy_counted() {
        let all = |_: &str| true;
        // The second copy is sent against the first; the third is full again.
        let one = chain(1, 10);
        assert_eq!(
            sealed_parent("@home", &one, all, EVERY_2).unwrap().name,
            "@home.d0"
        );
        let two = chain(2, 10);
        assert_eq!(sealed_parent("@home", &two, all, EVERY_2), None);
        // 0 and 1: every copy is full.
        for full_every in [0, 1] {
            let b = ChainBound {
                full_every,
                full_past_bytes: None,
            };
            assert_eq!(sealed_parent("@home", &one, all, b), None);
        }
        let thirty = ChainBound {
            full_every: 30,
            full_past_bytes: None,
        };
        assert_eq!(
            sealed_parent("@home", &two, all, thirty).unwrap().name,
            "@home.d1"
        );
        // Another subvolume's copies are not a parent.
        assert_eq!(sealed_parent("@log", &two, all, thirty), None);
    }

    /// Which of the first `copies` copies of one subvolume (numbered from 1) are full under
    /// `full_every`, each copy sealed against the parent [`sealed_parent`] chooses.
    fn full_copies(full_every: u32, copies: u32) -> Vec<u32> {
        let bound = ChainBound {
            full_every,
            full_past_bytes: Some(u64::MAX),
        };
        let mut held: Vec<SealedHeld> = Vec::new();
        let mut full = Vec::new();
        for number in 1..=copies {
            let parent = sealed_parent("@home", &held, |_| true, bound).cloned();
            if parent.is_none() {
                full.push(number);
            }
            held.push(SealedHeld {
                name: format!("@home.c{number}"),
                of: "@home".into(),
                taken_micros: i64::from(number),
                uuid: format!("c{number}"),
                parent_uuid: parent.as_ref().map(|p| p.uuid.clone()).unwrap_or_default(),
                depth: parent.map(|p| p.depth + 1).unwrap_or(0),
                stored_bytes: 1,
            });
        }
        full
    }

    #[test]
    fn full_every_n_is_a_full_copy_every_n_copies_the_full_counted() {
        // The meaning layout::copies::Seal::full_every, the module's option and docs/nixos.md
        // state: a chain holds at most N copies, its full copy counted.
        assert_eq!(full_copies(2, 7), [1, 3, 5, 7]);
        assert_eq!(full_copies(3, 7), [1, 4, 7]);
        assert_eq!(full_copies(1, 3), [1, 2, 3]);
        assert_eq!(full_copies(0, 3), [1, 2, 3]);
        let default = full_copies(layout::defaults::SEAL_FULL_EVERY, 61);
        assert_eq!(default, [1, 31, 61]);
    }

    #[test]
    fn a_chain_is_bounded_by_its_incrementals_bytes() {
        let all = |_: &str| true;
        let mut c = chain(3, 10);
        let b = ChainBound {
            full_every: 30,
            full_past_bytes: None,
        };
        // Incrementals 20 > the full's 10: full.
        assert_eq!(sealed_parent("@home", &c, all, b), None);
        c[0].stored_bytes = 20;
        assert_eq!(sealed_parent("@home", &c, all, b).unwrap().name, "@home.d2");
        let b = ChainBound {
            full_every: 30,
            full_past_bytes: Some(19),
        };
        assert_eq!(sealed_parent("@home", &c, all, b), None);
    }

    #[test]
    fn the_parent_is_a_snapshot_still_here_and_a_broken_chain_is_no_parent() {
        let c = chain(3, 1);
        let b = ChainBound {
            full_every: 30,
            full_past_bytes: Some(100),
        };
        // The newest copy whose snapshot the store holds.
        let here = |u: &str| u == "u1";
        assert_eq!(
            sealed_parent("@home", &c, here, b).unwrap().name,
            "@home.d1"
        );
        assert_eq!(sealed_parent("@home", &c, |_| false, b), None);
        // Its full copy gone: no chain to extend.
        let broken: Vec<SealedHeld> = c[1..].to_vec();
        assert_eq!(sealed_parent("@home", &broken, |_| true, b), None);
    }

    #[test]
    fn retention_never_deletes_what_a_kept_copys_chain_needs_and_goes_deepest_first() {
        let c = chain(4, 1);
        let del = |names: &[&str]| -> Vec<CopyDeletion> {
            names
                .iter()
                .map(|n| CopyDeletion {
                    name: (*n).into(),
                    why: "old".into(),
                })
                .collect()
        };
        // d3 stays: d0, d1, d2 are its chain.
        let out = sealed_deletions(&c, del(&["@home.d0", "@home.d1", "@home.d2"]));
        assert!(out.is_empty(), "{out:?}");
        // d1 stays: d0 stays with it; d2 and d3 go, d3 first.
        let out = sealed_deletions(&c, del(&["@home.d0", "@home.d2", "@home.d3"]));
        let names: Vec<&str> = out.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["@home.d3", "@home.d2"]);
    }
}
