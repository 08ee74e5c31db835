//! Journal against disk, after a start or a crash (docs/design.md section 5).
//!
//! The disk is the truth about existence, the journal about who and why. [`plan`] is a
//! plain function of both, so every case is a unit test; [`Reconcile`] applies it.

use std::collections::{HashMap, HashSet};

use crate::handles::Handles;
use crate::journal::{
    outcome_result_text, Action, DeletionResult, Member, OutcomeRow, ReplacedRow, RequestRow,
    SnapshotRow, SnapshotState, State, Subject,
};
use crate::stem_client::{snapshot_names, stem_error, StemError};
use crate::wire::KeeperError;

/// What to write to the journal so that it agrees with the disk.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// On disk, in no journal row: of unknown origin.
    pub unknown_origin: Vec<Member>,
    /// Journalled as present, no longer on disk.
    pub gone: Vec<String>,
    /// Pending sets every member of which is on disk: complete.
    pub complete: Vec<(i64, Vec<Member>)>,
    /// Pending sets with a member missing: failed, with the members that do exist.
    pub failed: Vec<(i64, Vec<Member>, Vec<String>)>,
}

/// Plan the reconciliation. `pending` are snapshot requests left pending (their `subject`
/// is the subvolumes, space-separated); `disk` is the stem's list.
///
/// A pending set's members are found by subvolume among the snapshots no row claims, taken
/// no earlier than the set was asked for, oldest first. The keeper takes one set at a time
/// (adr/0011), so after a crash at most one set was in flight and the match is unambiguous.
pub fn plan(journal: &[SnapshotRow], pending: &[RequestRow], disk: &[Member]) -> Plan {
    let mut out = Plan::default();
    let on_disk: HashSet<&str> = disk.iter().map(|m| m.name.as_str()).collect();
    let known: HashMap<&str, &SnapshotRow> = journal.iter().map(|r| (r.name.as_str(), r)).collect();
    for row in journal {
        if row.state == SnapshotState::Present && !on_disk.contains(row.name.as_str()) {
            out.gone.push(row.name.clone());
        }
    }
    let mut unclaimed: Vec<&Member> = disk
        .iter()
        .filter(|m| !known.contains_key(m.name.as_str()))
        .collect();
    unclaimed.sort_by_key(|m| (m.taken_micros, m.name.clone()));
    for set in pending.iter().filter(|r| r.state == State::Pending) {
        let mut members = Vec::new();
        let mut missing = Vec::new();
        let subs: Vec<String> = match set.parsed_subject() {
            Subject::Set(subs) => subs.iter().map(|s| s.to_string()).collect(),
            Subject::Nothing => Vec::new(),
            // Not the subvolumes of a set (no keeper writes that): none of it is found.
            other => vec![other.render()],
        };
        for sub in subs {
            let found = unclaimed
                .iter()
                .position(|m| m.of_subvolume == sub && named_time(m) >= set.asked_micros);
            match found {
                Some(i) => members.push(unclaimed.remove(i).clone()),
                None => missing.push(sub),
            }
        }
        if missing.is_empty() {
            out.complete.push((set.id, members));
        } else {
            out.failed.push((set.id, members, missing));
        }
    }
    out.unknown_origin = unclaimed.into_iter().cloned().collect();
    out
}

/// When the stem named the snapshot (its clock, to the microsecond, read after the keeper's
/// request arrived). Not the Btrfs creation time: that comes from the kernel's coarse clock
/// and can read a few milliseconds earlier than the request.
fn named_time(m: &Member) -> i64 {
    layout::SnapshotName::parse(&m.name)
        .map(|n| n.taken_unix_micros())
        .unwrap_or(m.taken_micros)
}

/// The reconcile service: brings the journal in line with the disk, once per start (retried
/// while the stem is away), and settles what a stem gone mid-call left pending. Owns the
/// turn of acts that leave rows pending (a snapshot set, a deletion), so that pending rows
/// are settled only while none is in flight.
#[derive(Debug)]
pub struct Reconcile {
    h: Handles,
    /// One snapshot set (or deletion) at a time, so a crash leaves at most one pending.
    sets: tokio::sync::Mutex<()>,
    /// Journal and disk have been reconciled since start.
    done: tokio::sync::Mutex<bool>,
}

impl Reconcile {
    pub fn new(h: Handles) -> Reconcile {
        Reconcile {
            h,
            sets: tokio::sync::Mutex::new(()),
            done: tokio::sync::Mutex::new(false),
        }
    }

    /// The turn of acts that leave rows pending: hold it while one is in flight.
    pub async fn one_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.sets.lock().await
    }

    /// Bring the journal in line with the disk; once per start, retried while the stem is away.
    pub async fn reconcile(&self) -> Result<(), KeeperError> {
        let mut done = self.done.lock().await;
        if *done {
            return Ok(());
        }
        let _sets = self.sets.lock().await;
        self.resolve_with_disk().await?;
        self.settle_pending_deletions().await?;
        self.read_outcome().await?;
        *done = true;
        Ok(())
    }

    /// Reconcile when that has not happened yet; a failure is only logged (the act that
    /// follows reports the stem's absence itself).
    pub async fn ensure(&self) {
        if let Err(e) = self.reconcile().await {
            tracing::warn!("reconciling journal and disk: {}", e.message());
        }
    }

    /// Apply [`reconcile::plan`] with the stem's list. Call with `sets` held.
    pub async fn resolve_with_disk(&self) -> Result<(), KeeperError> {
        let disk: Vec<Member> = self
            .h
            .stem
            .list()
            .await
            .map_err(stem_error)?
            .into_iter()
            .map(|d| d.member)
            .collect();
        // A bad request file stages nothing: the next boot refuses it.
        let staged = self.h.stem.staged_or_bad().await.map_err(stem_error)?;
        let staged = staged.request().map(snapshot_names);
        self.h.journal(move |j| {
            let plan = plan(&j.snapshots()?, &j.pending_sets()?, &disk);
            for name in &plan.gone {
                j.mark_gone(name)?;
                tracing::info!(snapshot = %name, "journalled snapshot is gone from disk");
            }
            for (id, members) in &plan.complete {
                j.complete_set(
                    *id,
                    members,
                    "complete (found whole on disk after the keeper restarted)",
                )?;
                tracing::info!(set = id, "pending set found complete on disk");
            }
            for (id, members, missing) in &plan.failed {
                let existing: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
                let outcome = format!(
                    "failed: the keeper stopped while it was taken; missing {}; on disk: {}",
                    missing.join(", "),
                    if existing.is_empty() {
                        "none".into()
                    } else {
                        existing.join(", ")
                    }
                );
                j.fail_set(*id, members, &outcome)?;
                tracing::warn!(set = id, "{outcome}");
            }
            for m in &plan.unknown_origin {
                j.add_unknown_origin(m)?;
                tracing::info!(snapshot = %m.name, "snapshot of unknown origin found on disk");
            }
            // A restore the keeper asked for but never heard back about: the disk says.
            for r in j.pending(Action::Cancel)? {
                let outcome = if staged.is_none() {
                    "withdrawn or never staged: nothing is staged now (the keeper stopped before the stem answered)"
                } else {
                    "failed: the keeper stopped before the stem answered; a restore is still staged"
                };
                j.finish(r.id, if staged.is_none() { State::Withdrawn } else { State::Failed }, outcome)?;
            }
            for r in j.pending(Action::Restore)? {
                let staged_it = staged
                    .as_deref()
                    .is_some_and(|s| Some(s) == r.parsed_subject().restored_names().as_deref());
                let (st, outcome) = if staged_it {
                    (
                        State::Staged,
                        "staged (found staged after the keeper restarted)",
                    )
                } else {
                    (
                        State::Failed,
                        "failed: the keeper stopped before the stem answered; nothing is staged",
                    )
                };
                j.finish(r.id, st, outcome)?;
            }
            Ok(())
        })
        .await
    }

    /// Settle deletions a stopped keeper left pending: the disk says whether they happened.
    /// Call with `sets` held (a delete in flight holds it too).
    pub async fn settle_pending_deletions(&self) -> Result<(), KeeperError> {
        let pending = self.h.journal(|j| j.pending_deletions()).await?;
        if pending.is_empty() {
            return Ok(());
        }
        let disk = self.h.stem.list().await.map_err(stem_error)?;
        let results: Vec<DeletionResult> = pending
            .into_iter()
            .map(|(id, name)| {
                let there = disk.iter().any(|d| d.member.name == name);
                DeletionResult {
                    id,
                    name,
                    result: if there {
                        Err(
                            "the keeper stopped before the stem answered; it is still on disk"
                                .into(),
                        )
                    } else {
                        Ok(())
                    },
                }
            })
            .collect();
        self.h.journal(move |j| j.finish_deletions(&results)).await
    }

    /// Read the initrd's outcome and journal it, once per outcome.
    pub async fn read_outcome(&self) -> Result<(), KeeperError> {
        let Some(o) = self.h.stem.outcome().await.map_err(stem_error)? else {
            return Ok(());
        };
        let row = OutcomeRow {
            id: o.id.clone(),
            result: o.result,
            // "@home @home.…", one member; a set's members separated by "; ".
            request: o
                .request
                .iter()
                .map(|r| format!("{} {}", r.subvolume, r.snapshot))
                .collect::<Vec<_>>()
                .join("; "),
            reason: o.reason.clone(),
            finished_micros: o.finished_micros,
            reported: false,
            replaced: o
                .replaced
                .iter()
                .filter(|(_, kept)| !kept.is_empty())
                .map(|(sub, kept)| ReplacedRow {
                    name: kept.clone(),
                    of_subvolume: sub.clone(),
                    restored: o
                        .request
                        .iter()
                        .find(|r| r.subvolume == *sub)
                        .map(|r| r.snapshot.clone())
                        .unwrap_or_default(),
                    boot_micros: o.finished_micros,
                    kept_from_micros: o.finished_micros,
                })
                .collect(),
        };
        let recording = row.clone();
        if self
            .h
            .journal(move |j| j.record_outcome(&recording))
            .await?
        {
            tracing::info!(outcome = %row.id, result = outcome_result_text(row.result), request = %row.request, "boot's restore outcome: {}", row.reason);
        }
        Ok(())
    }

    /// Settle rows left pending by a stem that went away mid-call, when no set is in flight.
    pub async fn settle_leftovers(&self) {
        let Ok(_sets) = self.sets.try_lock() else {
            return;
        };
        let pending = self
            .h
            .journal(|j| {
                Ok(!j.pending_sets()?.is_empty()
                    || !j.pending(Action::Restore)?.is_empty()
                    || !j.pending(Action::Cancel)?.is_empty()
                    || !j.pending_deletions()?.is_empty())
            })
            .await;
        if matches!(pending, Ok(true)) {
            if let Err(e) = self.resolve_with_disk().await {
                tracing::warn!("settling requests left pending: {}", e.message());
            }
            if let Err(e) = self.settle_pending_deletions().await {
                tracing::warn!("settling deletions left pending: {}", e.message());
            }
        }
    }

    /// Record how a restore or cancel ended when the stem did not answer yes. When it may
    /// have acted (it went away mid-call), the row stays pending and the disk settles it.
    pub async fn settle_after_stem_error(&self, id: i64, e: &StemError) -> Result<(), KeeperError> {
        match e {
            // The stem was not called (NotTheStem: whoever owns its name is not root).
            StemError::Refused { .. } | StemError::NotRunning | StemError::NotTheStem(_) => {
                // The request was synced before the stem was asked; the disk settles it.
                let outcome = format!("failed: {e}");
                self.h
                    .journal(move |j| j.unsynced(|j| j.finish(id, State::Failed, &outcome)))
                    .await
            }
            StemError::WentAway | StemError::Bus(_) => {
                let _sets = self.sets.lock().await;
                if let Err(again) = self.resolve_with_disk().await {
                    tracing::warn!(
                        request = id,
                        "left pending until the stem is back: {}",
                        again.message()
                    );
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, of: &str, t: i64) -> Member {
        Member {
            name: name.into(),
            uuid: format!("uuid-{name}"),
            of_subvolume: of.into(),
            taken_micros: t,
        }
    }

    fn row(name: &str, st: &str) -> SnapshotRow {
        SnapshotRow {
            name: name.into(),
            uuid: String::new(),
            of_subvolume: "@home".into(),
            taken_micros: 0,
            request: None,
            state: SnapshotState::parse(st).unwrap(),
        }
    }

    fn pending(id: i64, subs: &str, asked: i64) -> RequestRow {
        RequestRow {
            id,
            asked_micros: asked,
            uid: 0,
            user_name: "root".into(),
            action: crate::journal::Action::Snapshot,
            subject: subs.into(),
            reason: String::new(),
            pre_switch: false,
            words_shown: String::new(),
            state: State::Pending,
            outcome: String::new(),
            calls: 1,
        }
    }

    #[test]
    fn unknown_and_gone() {
        let p = plan(
            &[row("a", "present"), row("b", "gone"), row("c", "present")],
            &[],
            &[m("a", "@home", 1), m("x", "@log", 2)],
        );
        assert_eq!(p.gone, ["c"]);
        assert_eq!(p.unknown_origin, [m("x", "@log", 2)]);
        assert!(p.complete.is_empty() && p.failed.is_empty());
    }

    #[test]
    fn a_pending_set_with_every_member_completes() {
        let disk = [
            m("h", "@home", 10),
            m("l", "@log", 11),
            m("old", "@home", 5),
        ];
        let p = plan(&[], &[pending(7, "@home @log", 9)], &disk);
        assert_eq!(
            p.complete,
            [(7, vec![m("h", "@home", 10), m("l", "@log", 11)])]
        );
        // Taken before the set was asked for: not its member.
        assert_eq!(p.unknown_origin, [m("old", "@home", 5)]);
    }

    #[test]
    fn a_pending_set_missing_a_member_fails_and_lists_what_exists() {
        let p = plan(
            &[],
            &[pending(3, "@persist @log @home", 1)],
            &[m("p", "@persist", 2)],
        );
        assert_eq!(
            p.failed,
            [(
                3,
                vec![m("p", "@persist", 2)],
                vec!["@log".to_owned(), "@home".to_owned()]
            )]
        );
        assert!(p.unknown_origin.is_empty());
    }

    #[test]
    fn members_are_matched_by_the_time_in_their_name_not_the_coarse_creation_time() {
        // Named 2026-12-01T14:02:00.000500Z, but Btrfs says it was made 4 ms earlier.
        let named = 1_796_133_720_000_500;
        let snap = m("@home.2026-12-01T140200.000500Z", "@home", named - 4_000);
        let p = plan(
            &[],
            &[pending(1, "@home", named - 100)],
            std::slice::from_ref(&snap),
        );
        assert_eq!(p.complete, [(1, vec![snap])]);
    }
}
