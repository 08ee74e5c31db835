//! The keeper's retention acts: delete, keep, prune and the timeline set (adr/0013).
//!
//! Who may: deleting, marking to keep and pruning for real are changes (root and
//! approvers); a dry run only looks, so anybody may ask what would go and why.

use std::collections::BTreeMap;
use std::time::SystemTime;

use std::sync::Arc;

use layout::copies::CopiesConfig;

use crate::authority::{Act, Authority};
use crate::caps::parse_snapshot;
use crate::handles::Handles;
use crate::journal::{Action, Deletion, DeletionResult};
use crate::reconcile::Reconcile;
use crate::refusals::Refusals;
use crate::retention::{self, Candidate, InStore, Kind, Policy};
use crate::stem_client::stem_error;
use crate::stem_client::{DiskSnapshot, StemError};
use crate::wire::{Deleted, KeepMarked, KeeperError, PruneEntry, PruneReport};
use layout::human::unix_micros;

/// The rule code journalled when a person asked for a deletion.
const BY_PERSON: &str = "person";

fn of_path(name: &str) -> String {
    layout::SnapshotName::parse(name)
        .map(|n| n.subvolume().display_path().to_owned())
        .unwrap_or_else(|_| "?".into())
}

/// The policy in one line, for people.
pub fn describe(p: &Policy) -> String {
    let manual = match p.manual_max_age {
        Some(age) => format!(
            "until {} old",
            crate::words::count(age.as_secs() / 86_400, "day", "days")
        ),
        None => "until deleted".into(),
    };
    let floor = if p.floor_bytes == 0 {
        "no free-space floor".into()
    } else {
        format!("free-space floor {}", layout::human::bytes(p.floor_bytes))
    };
    format!(
        "keep the last {}; timeline {} hourly, {} daily, {} weekly, {} monthly; \
         manual snapshots {manual}; {floor}",
        crate::words::count(
            p.pre_switch_sets as u64,
            "pre-switch set",
            "pre-switch sets"
        ),
        p.hourly,
        p.daily,
        p.weekly,
        p.monthly
    )
}

/// The retention service: delete, keep and prune; owns the policy.
#[derive(Debug)]
pub struct Retention {
    h: Handles,
    refusals: Arc<Refusals>,
    reconcile: Arc<Reconcile>,
    /// What retention keeps (adr/0013).
    policy: Policy,
    /// The copy targets: the last common parent with one is kept.
    config: Arc<CopiesConfig>,
}

impl Retention {
    pub fn new(
        h: Handles,
        refusals: Arc<Refusals>,
        reconcile: Arc<Reconcile>,
        policy: Policy,
        config: Arc<CopiesConfig>,
    ) -> Retention {
        Retention {
            h,
            refusals,
            reconcile,
            policy,
            config,
        }
    }

    /// For each snapshot on `disk` that is the last common parent with a configured copy
    /// target, those targets (adr/0013): from the journal's record of what each target
    /// held (verified copies and listings), so a target away is remembered, not listed.
    fn parents_on_disk(
        &self,
        disk: &[DiskSnapshot],
        copies: &BTreeMap<String, Vec<String>>,
    ) -> BTreeMap<String, Vec<String>> {
        let local: Vec<InStore> = disk
            .iter()
            .map(|d| InStore {
                name: &d.member.name,
                of: &d.member.of_subvolume,
                taken_micros: d.member.taken_micros,
            })
            .collect();
        let held: Vec<(&str, &str)> = copies
            .iter()
            .flat_map(|(name, targets)| targets.iter().map(|t| (t.as_str(), name.as_str())))
            .collect();
        let configured = self.configured_target_names();
        retention::last_common_parents(&local, &held, &configured)
            .into_iter()
            .map(|(n, t)| (n.to_owned(), t))
            .collect()
    }

    /// The names of the configured copy targets.
    fn configured_target_names(&self) -> std::collections::BTreeSet<&str> {
        self.config.targets.keys().map(|t| t.as_str()).collect()
    }

    /// The retention policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Delete one snapshot a person named; journalled with the person. The last common
    /// parent with a copy target is refused unless `next_copy_full` says the person knows
    /// the next copy there is then sent full.
    pub async fn delete(
        &self,
        uid: u32,
        name: &str,
        next_copy_full: bool,
    ) -> Result<Deleted, KeeperError> {
        let asker = Authority::asker(uid);
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            return Err(self
                .refusals
                .refuse(&asker, Action::Delete, name, "", why)
                .await);
        }
        parse_snapshot(name)?;
        let (keeps, copies) = self
            .h
            .journal(|j| Ok((j.keeps()?, j.copies_by_snapshot()?)))
            .await?;
        if let Some(by) = keeps.get(name) {
            return Err(KeeperError::Protected(format!(
                "{name} is marked to keep (by {by}); take the mark off first with \
                 `tacid data keep --unkeep {name}`"
            )));
        }
        let mut parent_of = Vec::new();
        if copies.contains_key(name) {
            let disk = self.h.stem.list().await.map_err(stem_error)?;
            parent_of = self
                .parents_on_disk(&disk, &copies)
                .remove(name)
                .unwrap_or_default();
        }
        if !parent_of.is_empty() && !next_copy_full {
            let t = parent_of.join(", ");
            return Err(KeeperError::Protected(format!(
                "{name} is the last common parent with {t}: the next copy to {t} is sent \
                 against it, and without it that copy is full (all of {}, not what changed); \
                 nothing was deleted. To delete it anyway: `tacid data delete {name} \
                 --next-copy-full`",
                of_path(name)
            )));
        }
        let mut why = format!("asked by {} (uid {uid})", asker.name);
        if !parent_of.is_empty() {
            let t = parent_of.join(", ");
            why.push_str(&format!(
                ", knowing it was the last common parent with {t}: the next copy to {t} is full"
            ));
        }
        let deletion = Deletion {
            name: name.to_owned(),
            rule: BY_PERSON.into(),
            why: why.clone(),
        };
        // A pending deletion is settled from the disk only while no delete is in flight.
        let _one_at_a_time = self.reconcile.one_at_a_time().await;
        let id = self
            .h
            .journal({
                let asker = asker.clone();
                move |j| j.begin_deletion_synced(&asker, &deletion)
            })
            .await?;
        crate::handles::test_pause("delete-pending").await;
        let result = self.h.stem.delete(name).await;
        match result {
            Ok(()) => {
                crate::handles::test_pause("delete-done").await;
                // Synced before the act, settled from the disk after a power cut: the end
                // needs no sync of its own (adr/0011).
                let name_owned = name.to_owned();
                self.h
                    .journal(move |j| {
                        j.unsynced(|j| {
                            j.finish_deletions(&[DeletionResult {
                                id,
                                name: name_owned,
                                result: Ok(()),
                            }])
                        })
                    })
                    .await?;
                let message = format!(
                    "deleted {name} ({why}); its space comes back in the background \
                     (`tacid data status` shows it)"
                );
                tracing::info!(uid, user = %asker.name, snapshot = name, "{message}");
                Ok(Deleted {
                    name: name.to_owned(),
                    of_path: of_path(name),
                    message,
                })
            }
            Err(e) => {
                // Gone mid-call: left pending, settled from the disk by the next prune.
                if matches!(
                    e,
                    StemError::Refused { .. } | StemError::NotRunning | StemError::NotTheStem(_)
                ) {
                    let (name, failed) = (name.to_owned(), e.to_string());
                    self.h
                        .journal(move |j| {
                            j.unsynced(|j| {
                                j.finish_deletions(&[DeletionResult {
                                    id,
                                    name,
                                    result: Err(failed),
                                }])
                            })
                        })
                        .await?;
                }
                Err(match stem_error(e) {
                    KeeperError::Protected(m) => KeeperError::Protected(format!(
                        "{m}; cancel the restore first with `tacid data cancel`"
                    )),
                    other => other,
                })
            }
        }
    }

    /// Mark a snapshot to keep, or take the mark off.
    pub async fn keep(&self, uid: u32, name: &str, keep: bool) -> Result<KeepMarked, KeeperError> {
        let asker = Authority::asker(uid);
        let act = if keep { Action::Keep } else { Action::Unkeep };
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            return Err(self.refusals.refuse(&asker, act, name, "", why).await);
        }
        let snap = parse_snapshot(name)?;
        if keep {
            // Only what exists can be kept; a mark may be taken off a snapshot already gone.
            self.h.find(&snap).await?;
        }
        let changed = self
            .h
            .journal({
                let asker = asker.clone();
                move |j| j.set_keep(&asker, &snap, keep)
            })
            .await?;
        let message = match (keep, changed) {
            (true, true) => format!("{name} is marked to keep: no retention rule deletes it"),
            (true, false) => format!("{name} was already marked to keep; nothing changed"),
            (false, true) => {
                format!("{name} is no longer marked to keep: the retention rules apply to it again")
            }
            (false, false) => format!("{name} was not marked to keep; nothing changed"),
        };
        tracing::info!(uid, user = %asker.name, snapshot = name, "{message}");
        Ok(KeepMarked {
            name: name.to_owned(),
            kept: keep,
            changed,
            message,
        })
    }

    /// What retention would delete now, from the disk, the stem's opens and the journal.
    /// `may_change`: the asker is shown where each open is; to anybody else an open is
    /// somebody's, not whose.
    async fn retention_plan(
        &self,
        may_change: bool,
    ) -> Result<(retention::Plan, u64, BTreeMap<String, i64>), KeeperError> {
        let disk = self.h.stem.list().await.map_err(stem_error)?;
        let space = self.h.stem.free_space().await.map_err(stem_error)?;
        // An open snapshot is not deleted (adr/0021): the plan keeps it, so that a dry run
        // says what the real run does, and the real run does not try.
        let mut open_at: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for o in self.h.stem.open_snapshots().await.map_err(stem_error)? {
            let place = if may_change {
                o.path
            } else {
                "a place shown only to its opener and approvers".to_owned()
            };
            open_at.entry(o.name).or_default().push(place);
        }
        for places in open_at.values_mut() {
            places.sort();
            places.dedup();
        }
        let (rows, timeline, keeps, copies, replaced) = self
            .h
            .journal(|j| {
                Ok((
                    j.snapshots()?,
                    j.timeline_sets()?,
                    j.keeps()?,
                    j.copies_by_snapshot()?,
                    j.replaced()?,
                ))
            })
            .await?;
        let replaced: BTreeMap<&str, i64> = replaced
            .iter()
            .map(|r| (r.name.as_str(), r.kept_from_micros))
            .collect();
        let mut parents = self.parents_on_disk(&disk, &copies);
        let requests: BTreeMap<&str, _> = rows
            .iter()
            .filter_map(|r| r.request.as_ref().map(|q| (r.name.as_str(), q)))
            .collect();
        let mut taken = BTreeMap::new();
        let candidates: Vec<Candidate> = disk
            .iter()
            .map(|d| {
                let name = d.member.name.as_str();
                taken.insert(name.to_owned(), d.member.taken_micros);
                let kind = match requests.get(name) {
                    // What a restore replaced (the journal learned it from the boot's
                    // outcome, adr/0027).
                    None if replaced.contains_key(name) => Kind::Replaced {
                        kept_from_micros: replaced[name],
                    },
                    None => Kind::UnknownOrigin,
                    // Fetched back from a copy (after a disaster, most likely): nobody can
                    // say what it is for, so no rule chooses it.
                    Some(r) if r.action == Action::Fetch => Kind::UnknownOrigin,
                    Some(r) if r.pre_switch => Kind::PreSwitch { set: r.id },
                    Some(r) if timeline.contains(&r.id) => Kind::Timeline { set: r.id },
                    Some(_) => Kind::Manual,
                };
                Candidate {
                    name: name.to_owned(),
                    taken_micros: d.member.taken_micros,
                    kind,
                    kept: keeps.contains_key(name),
                    pinned: d.staged,
                    parent_of: parents.remove(name).unwrap_or_default(),
                    open_at: open_at.remove(name).unwrap_or_default(),
                }
            })
            .collect();
        let plan = retention::plan(
            &candidates,
            &self.policy,
            unix_micros(SystemTime::now()),
            space.free_bytes,
        );
        Ok((plan, space.free_bytes, taken))
    }

    /// Apply the retention policy; with `dry_run`, only say what would go and why.
    pub async fn prune(&self, uid: u32, dry_run: bool) -> Result<PruneReport, KeeperError> {
        let asker = Authority::asker(uid);
        let may_change = match self.h.authority.decide(uid, Act::Change) {
            Ok(()) => true,
            Err(why) if !dry_run => {
                return Err(self
                    .refusals
                    .refuse(&asker, Action::Prune, "", "", why)
                    .await)
            }
            Err(_) => false,
        };
        let _turn = self.h.looker_turn(may_change).await;
        self.reconcile.ensure().await;
        // No set is taken while retention looks at the store.
        let _sets = self.reconcile.one_at_a_time().await;
        if !dry_run {
            self.reconcile.settle_pending_deletions().await?;
        }
        let started = std::time::Instant::now();
        let (plan, free_bytes, taken) = self.retention_plan(may_change).await?;
        let planned = started.elapsed();
        let entry = |name: &str, rule: &retention::Rule, note: String| PruneEntry {
            name: name.to_owned(),
            of_path: of_path(name),
            taken_micros: taken.get(name).copied().unwrap_or_default(),
            rule: rule.code().to_owned(),
            why: rule.to_string(),
            note,
        };
        let spared: Vec<PruneEntry> = plan
            .spared
            .iter()
            .map(|s| entry(&s.name, &s.rule, format!("kept: {}", s.protection)))
            .collect();
        let mut report = PruneReport {
            dry_run,
            deleted: Vec::new(),
            spared,
            failed: Vec::new(),
            policy: describe(&self.policy),
            free_bytes,
            floor_bytes: self.policy.floor_bytes,
            floor_unmet: plan.floor_unmet,
        };
        if plan.floor_held_by_parents {
            self.journal_floor_held(&asker, &plan, dry_run).await;
        }
        if dry_run || plan.delete.is_empty() {
            report.deleted = plan
                .delete
                .iter()
                .map(|d| entry(&d.name, &d.rule, String::new()))
                .collect();
            return Ok(report);
        }
        let deletions: Vec<Deletion> = plan
            .delete
            .iter()
            .map(|d| Deletion {
                name: d.name.clone(),
                rule: d.rule.code().to_owned(),
                why: d.rule.to_string(),
            })
            .collect();
        let ids = self
            .h
            .journal({
                let asker = asker.clone();
                move |j| j.begin_deletions(&asker, &deletions)
            })
            .await?;
        let mut results = Vec::with_capacity(ids.len());
        let mut stem_gone = None;
        for (d, id) in plan.delete.iter().zip(&ids) {
            if let Some(why) = &stem_gone {
                results.push(DeletionResult {
                    id: *id,
                    name: d.name.clone(),
                    result: Err(format!("not tried: {why}")),
                });
                report
                    .failed
                    .push(entry(&d.name, &d.rule, format!("not tried: {why}")));
                continue;
            }
            match self.h.stem.delete(&d.name).await {
                Ok(()) => {
                    results.push(DeletionResult {
                        id: *id,
                        name: d.name.clone(),
                        result: Ok(()),
                    });
                    report.deleted.push(entry(&d.name, &d.rule, String::new()));
                }
                // It may have acted: the row stays pending; the next prune settles it.
                Err(e @ StemError::WentAway) | Err(e @ StemError::Bus(_)) => {
                    report.failed.push(entry(&d.name, &d.rule, e.to_string()));
                    stem_gone = Some(e.to_string());
                }
                Err(e) => {
                    if matches!(e, StemError::NotRunning | StemError::NotTheStem(_)) {
                        stem_gone = Some(e.to_string());
                    }
                    results.push(DeletionResult {
                        id: *id,
                        name: d.name.clone(),
                        result: Err(e.to_string()),
                    });
                    report.failed.push(entry(&d.name, &d.rule, e.to_string()));
                }
            }
        }
        self.h
            .journal(move |j| j.finish_deletions(&results))
            .await?;
        tracing::info!(
            uid,
            user = %asker.name,
            deleted = report.deleted.len(),
            failed = report.failed.len(),
            spared = report.spared.len(),
            ?planned,
            took = ?started.elapsed(),
            "pruned"
        );
        Ok(report)
    }

    /// The floor could be met only by deleting a last common parent with a copy target: it
    /// stays, and the journal says so (a failed deletion by the floor's rule, with why), as
    /// does the log; a dry run only logs.
    async fn journal_floor_held(
        &self,
        asker: &crate::journal::Asker,
        plan: &retention::Plan,
        dry_run: bool,
    ) {
        let held: Vec<&retention::Spared> = plan
            .spared
            .iter()
            .filter(|s| matches!(s.rule, retention::Rule::FreeSpaceFloor { .. }))
            .collect();
        for s in &held {
            tracing::warn!(
                snapshot = %s.name,
                dry_run,
                "{}; not deleted (kept: {}); the floor is not met",
                s.rule,
                s.protection
            );
        }
        if dry_run || held.is_empty() {
            return;
        }
        let deletions: Vec<Deletion> = held
            .iter()
            .map(|s| Deletion {
                name: s.name.clone(),
                rule: s.rule.code().to_owned(),
                why: s.rule.to_string(),
            })
            .collect();
        let failed: Vec<(String, String)> = held
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    format!(
                        "not deleted: kept: {}; the free-space floor is not met (delete it by \
                         hand with `tacid data delete {} --next-copy-full` if the space matters \
                         more than an incremental copy)",
                        s.protection, s.name
                    ),
                )
            })
            .collect();
        let asker = asker.clone();
        let recorded = self
            .h
            .journal(move |j| {
                let ids = j.begin_deletions(&asker, &deletions)?;
                let results: Vec<DeletionResult> = failed
                    .into_iter()
                    .zip(ids)
                    .map(|((name, why), id)| DeletionResult {
                        id,
                        name,
                        result: Err(why),
                    })
                    .collect();
                j.finish_deletions(&results)
            })
            .await;
        if let Err(e) = recorded {
            tracing::error!(
                "could not journal the floor held by a last common parent: {}",
                e.message()
            );
        }
    }

    /// Below the free-space floor, prune before a snapshot. A failure is only logged: the
    /// snapshot is still tried, and the stem's hard floor still protects the disk.
    pub async fn prune_below_floor(&self, uid: u32) {
        if self.policy.floor_bytes == 0 {
            return;
        }
        match self.h.stem.free_space().await {
            Ok(space) if space.free_bytes < self.policy.floor_bytes => {
                match self.prune(uid, false).await {
                    Ok(r) => tracing::info!(
                        deleted = r.deleted.len(),
                        free = space.free_bytes,
                        "below the free-space floor before a snapshot: pruned first"
                    ),
                    Err(e) => tracing::warn!(
                        "pruning below the free-space floor before a snapshot: {}",
                        e.message()
                    ),
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("reading the free space before a snapshot: {e}"),
        }
    }

    /// Mark the set `set_id` as the timeline's: retention's rules for the timeline apply.
    pub async fn mark_timeline(&self, set_id: i64) -> Result<(), KeeperError> {
        self.h.journal(move |j| j.mark_timeline(set_id)).await
    }
}
