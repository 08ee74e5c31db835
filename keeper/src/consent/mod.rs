//! Consent: snapshots taken, restores previewed, confirmed with the words shown, staged,
//! withdrawn; the status of it all (adr/0011).
//!
//! Every method takes the caller's uid (from the bus) and returns wire results or a named
//! error; the interface only converts. Journal writes are synchronous (one fsync), done one
//! at a time on the journal's own thread; snapshot sets are taken one at a time (adr/0011).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use layout::escape::{escape, Escaped};
use layout::SubvolumeName;

use crate::authority::{Act, Authority};
use crate::caps;
use crate::caps::parse_snapshot;
use crate::handles::{test_pause, Handles};
use crate::journal::{outcome_result_text, Action, SnapshotState, State, Subject};
use crate::reconcile::Reconcile;
use crate::refusals::Refusals;
use crate::retention::prune::Retention;
use crate::stem_client::{snapshot_names, stem_error, StagedOnDisk, StemError};
use crate::wire::{
    Cancelled, ChangedPath, KeeperError, RestoreDetails, RestoreStaged, SnapshotEntry, SnapshotSet,
    Status,
};
use crate::words::{escape_lines, of_path};
use layout::human::{and_list, unix_micros};
use stem_interface::ErrorKind;

mod preview;
mod set_restore;
pub use preview::MAX_LOOKER_COUNTS;

/// How long the words of a preview stay good for a confirmation.
pub const CONSENT_WINDOW: Duration = Duration::from_secs(layout::defaults::CONSENT_WINDOW_SECS);

/// How long a preview counts what changed since the snapshot before it answers "at least".
pub const PREVIEW_COUNT_LIMIT: Duration = Duration::from_secs(5);
/// How long `--details` may take to count and list the changed paths.
pub const DETAILS_COUNT_LIMIT: Duration = Duration::from_secs(15);

/// The consent service; owns each caller's turn to preview.
#[derive(Debug)]
pub struct Consent {
    h: Handles,
    refusals: Arc<Refusals>,
    reconcile: Arc<Reconcile>,
    /// Below the free-space floor a snapshot prunes first.
    retention: Arc<Retention>,
    /// Each caller's turn to preview, and the lookers' counts in flight (adr/0016).
    previews: preview::Previews,
}

impl Consent {
    pub fn new(
        h: Handles,
        refusals: Arc<Refusals>,
        reconcile: Arc<Reconcile>,
        retention: Arc<Retention>,
    ) -> Consent {
        Consent {
            h,
            refusals,
            reconcile,
            retention,
            previews: preview::Previews::new(),
        }
    }

    /// Take a set of snapshots: journalled pending, then taken, then marked complete.
    pub async fn snapshot(
        &self,
        uid: u32,
        subvolumes: &[String],
        reason: &str,
        pre_switch: bool,
    ) -> Result<SnapshotSet, KeeperError> {
        let started = std::time::Instant::now();
        let asker = Authority::asker(uid);
        // Every string is checked against its cap before anything else looks at it.
        if reason.len() > caps::MAX_REASON_BYTES || reason.chars().any(char::is_control) {
            return Err(KeeperError::InvalidArgument(format!(
                "a reason is one line of at most {} bytes, what the journal keeps (this one: {} bytes{})",
                caps::MAX_REASON_BYTES,
                reason.len(),
                if reason.len() <= caps::MAX_REASON_BYTES { ", with a control character" } else { "" }
            )));
        }
        // A pre-switch set's generations are shown as numbers and offered in a command
        // line (adr/0009): its reason is one of the grammar's forms, or says nothing of a
        // switch at all.
        if pre_switch {
            if let Err(e) = layout::switch::Switch::parse(reason) {
                return Err(KeeperError::InvalidArgument(e.to_string()));
            }
        }
        if subvolumes.len() > caps::max_set_names() {
            return Err(KeeperError::InvalidArgument(format!(
                "a snapshot set names at most {} subvolumes (this one: {}); name each once",
                caps::max_set_names(),
                subvolumes.len()
            )));
        }
        let mut set: Vec<SubvolumeName> = Vec::new();
        for s in subvolumes {
            let parsed = if s.len() > caps::MAX_NAME_BYTES {
                Err(format!(
                    "{:?} is not a subvolume of the tacid layout",
                    caps::name(s)
                ))
            } else {
                SubvolumeName::from_name_or_mount_point(s).map_err(|e| e.to_string())
            };
            let sub = parsed.map_err(|e| {
                KeeperError::InvalidArgument(format!(
                    "{e}; name a subvolume or its mount point, e.g. /home"
                ))
            })?;
            if !sub.subvolume().snapshottable() {
                return Err(KeeperError::NotAllowedForSubvolume(format!(
                    "snapshots of {} ({}) are never taken",
                    sub.display_path(),
                    sub
                )));
            }
            if !set.contains(&sub) {
                set.push(sub);
            }
        }
        if set.is_empty() {
            set = SubvolumeName::default_snapshot_set();
        }
        let names: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            let subject = Subject::Set(set.clone()).render();
            return Err(self
                .refusals
                .refuse(&asker, Action::Snapshot, &subject, "", why)
                .await);
        }
        self.reconcile.ensure().await;
        // Below the free-space floor the oldest automatic snapshots go first (adr/0013).
        self.retention.prune_below_floor(uid).await;
        let _one_at_a_time = self.reconcile.one_at_a_time().await;
        // Sets left pending by an earlier failure are settled before a new one starts, so the
        // disk can tell them apart.
        if !self.h.journal(|j| j.pending_sets()).await?.is_empty() {
            self.reconcile.resolve_with_disk().await?;
        }
        let decided = started.elapsed();
        let id = self
            .h
            .journal({
                let (asker, set, reason) = (asker.clone(), set.clone(), reason.to_owned());
                move |j| {
                    j.set_request(&asker, &set)
                        .reason(&reason)
                        .pre_switch(pre_switch)
                        .begin()
                }
            })
            .await?;
        let pending = started.elapsed();
        test_pause("set-pending").await;
        // With root's units paused (a consistent cut, adr/0026); none configured: an
        // ordinary set.
        match self.h.stem.take_cut(&names).await {
            Ok((members, paused, hooks)) => {
                let taken = started.elapsed();
                test_pause("set-taken").await;
                let outcome = format!(
                    "complete: {}{}",
                    members
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    if paused.is_empty() {
                        String::new()
                    } else {
                        format!("; a consistent cut of {}", paused.join(" "))
                    }
                ) + &hooks
                    .iter()
                    .filter(|(ok, _)| !ok)
                    .map(|(_, line)| format!("; the set stands, but the hook {line}"))
                    .collect::<String>();
                for (_, line) in hooks.iter().filter(|(ok, _)| !ok) {
                    tracing::warn!(set = id, "the hook {}", escape(line.as_bytes()));
                }
                let hook_lines: Vec<String> = hooks.iter().map(|(_, l)| l.clone()).collect();
                let cut_hooks: Vec<crate::wire::CutHook> = hooks
                    .iter()
                    .map(|(ok, line)| crate::wire::CutHook {
                        ok: *ok,
                        says: escape(line.as_bytes()),
                    })
                    .collect();
                // The cut first: a set left pending and settled from the disk later is
                // still known for what it is.
                self.h
                    .journal({
                        let (members, outcome, paused) =
                            (members.clone(), outcome.clone(), paused.clone());
                        move |j| {
                            j.record_cut(id, &paused, &hook_lines)?;
                            j.complete_set(id, &members, &outcome)
                        }
                    })
                    .await?;
                let cut_units = escape(paused.join(" ").as_bytes());
                tracing::info!(set = id, uid, user = %asker.name, "{outcome}");
                let us = |d: Duration| d.as_micros() as u64;
                tracing::debug!(
                    decided_us = us(decided),
                    pending_us = us(pending),
                    taken_us = us(taken),
                    complete_us = us(started.elapsed()),
                    "set timings (cumulative)"
                );
                let snapshots = members
                    .iter()
                    .map(|m| SnapshotEntry {
                        name: m.name.clone(),
                        of: m.of_subvolume.clone(),
                        of_path: SubvolumeName::parse(&m.of_subvolume)
                            .map(|s| s.display_path())
                            .unwrap_or("?")
                            .to_owned(),
                        taken_micros: m.taken_micros,
                        reason: escape(reason.as_bytes()),
                        asked_by: escape(asker.name.as_bytes()),
                        asked_by_uid: uid,
                        origin: "journal".into(),
                        pre_switch,
                        pinned: false,
                        set_id: id,
                        copies: Vec::new(),
                        last_common_parent_of: Vec::new(),
                        cut_units: cut_units.clone(),
                        replaced_by_restore_of: String::new(),
                        replaced_micros: 0,
                        kept_until_micros: 0,
                    })
                    .collect();
                Ok(SnapshotSet {
                    set_id: id,
                    snapshots,
                    hooks: cut_hooks,
                })
            }
            Err(e) => {
                // The stem's take_set is all or nothing; if it went away mid-set, the disk
                // says what exists, now or at the next reconciliation.
                match &e {
                    StemError::Refused { .. } => {
                        let outcome = format!("failed: {e}");
                        self.h
                            .journal(move |j| j.fail_set(id, &[], &outcome))
                            .await?;
                    }
                    _ => {
                        if let Err(again) = self.reconcile.resolve_with_disk().await {
                            tracing::warn!(
                                set = id,
                                "set left pending until the stem is back: {}",
                                again.message()
                            );
                        }
                    }
                }
                Err(stem_error(e))
            }
        }
    }

    /// The paths a restore of `name` would put back or delete: the changes since the
    /// snapshot, path by path. Approvers and root only (paths name other people's files);
    /// each listing is journalled with its counts.
    pub async fn restore_details(
        &self,
        uid: u32,
        name: &str,
    ) -> Result<RestoreDetails, KeeperError> {
        let asker = Authority::asker(uid);
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            return Err(self
                .refusals
                .refuse(&asker, Action::RestoreDetails, name, "", why)
                .await);
        }
        let snap = parse_snapshot(name)?;
        let sub = snap.subvolume();
        if !sub.subvolume().restorable {
            return Err(KeeperError::NotAllowedForSubvolume(format!(
                "{} ({sub}) is never put back, so nothing of it is deleted",
                sub.display_path()
            )));
        }
        let c = self
            .h
            .stem
            .changes_since(name, DETAILS_COUNT_LIMIT, true)
            .await
            .map_err(stem_error)?;
        let root = sub.display_path().trim_end_matches('/');
        let paths: Vec<ChangedPath> = c
            .paths
            .iter()
            .map(|p| ChangedPath {
                change: p.change.clone(),
                directory: p.directory,
                path: if p.path.is_empty() {
                    sub.display_path().to_owned()
                } else {
                    format!("{root}/{}", Escaped(&p.path))
                },
            })
            .collect();
        let summary = format!(
            "listed {} changed paths{}",
            paths.len(),
            if c.complete {
                ""
            } else {
                " (the count was cut short)"
            }
        );
        self.h
            .journal({
                let asker = asker.clone();
                move |j| {
                    j.request(&asker, Action::RestoreDetails, Subject::Snapshot(snap))
                        .words_shown(&summary)
                        .state(State::Shown)
                        .outcome("shown; nothing changed")
                        .begin()
                }
            })
            .await?;
        Ok(RestoreDetails {
            snapshot: name.to_owned(),
            of_path: sub.display_path().to_owned(),
            complete: c.complete,
            paths,
            paths_left_off: c.paths_left_off,
        })
    }

    /// Stage the restore, given the words the caller was shown.
    pub async fn restore_confirm(
        &self,
        uid: u32,
        name: &str,
        words_shown: &str,
    ) -> Result<RestoreStaged, KeeperError> {
        let asker = Authority::asker(uid);
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            return Err(self
                .refusals
                .refuse(&asker, Action::Restore, name, words_shown, why)
                .await);
        }
        let snap = parse_snapshot(name)?;
        let since = unix_micros(SystemTime::now() - CONSENT_WINDOW);
        // Words longer than any the keeper shows were not shown; they are not compared.
        let shown = if words_shown.len() > caps::MAX_WORDS_BYTES {
            None
        } else {
            self.h
                .journal(move |j| j.words_shown(uid, &Subject::restore(snap), since))
                .await?
        };
        if shown.as_deref() != Some(words_shown) {
            let why = format!(
                "these are not the words the keeper showed you for {name} in the last {} minutes; \
                 run `tacid data restore {name}` again, read what it costs, then add --yes",
                CONSENT_WINDOW.as_secs() / 60
            );
            // A refused request is journalled as refused, with the words given (adr/0011).
            self.refusals
                .journal_refusal(&asker, Action::Restore, name, words_shown, &why)
                .await;
            return Err(KeeperError::WordsNotShown(why));
        }
        let id = self
            .h
            .journal({
                let (asker, words_shown) = (asker.clone(), words_shown.to_owned());
                move |j| {
                    j.request(&asker, Action::Restore, Subject::restore(snap))
                        .words_shown(&words_shown)
                        .begin()
                }
            })
            .await?;
        test_pause("restore-pending").await;
        match self.h.stem.stage_restore(name).await {
            Ok((_request, already, _stem_message)) => {
                test_pause("restore-staged").await;
                let path = snap.subvolume().display_path();
                let (st, message) = if already {
                    (State::AlreadyStaged, format!("already staged: {path} goes back to {name} at the next reboot; nothing changed"))
                } else {
                    (State::Staged, format!("staged: {path} goes back to {name} at the next reboot; reboot to put it back"))
                };
                // The consent was synced before the stem acted and the stem's request is
                // durable: after a power cut the reconciliation finds it staged (adr/0011).
                self.h
                    .journal({
                        let message = message.clone();
                        move |j| j.unsynced(|j| j.finish(id, st, &message))
                    })
                    .await?;
                tracing::info!(uid, user = %asker.name, snapshot = name, "{message}");
                Ok(RestoreStaged {
                    snapshot: name.to_owned(),
                    of: snap.subvolume().to_string(),
                    of_path: path.to_owned(),
                    already_staged: already,
                    reboot_needed: true,
                    message,
                })
            }
            Err(e) => {
                self.reconcile.settle_after_stem_error(id, &e).await?;
                Err(stem_error(e))
            }
        }
    }

    /// Withdraw the staged restore.
    pub async fn cancel(&self, uid: u32) -> Result<Cancelled, KeeperError> {
        let asker = Authority::asker(uid);
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            return Err(self
                .refusals
                .refuse(&asker, Action::Cancel, "", "", why)
                .await);
        }
        // Synced before the stem acts: the stem makes a withdrawal durable before it answers,
        // and the record of who withdrew must never be later than that (adr/0011).
        let id = self
            .h
            .journal({
                let asker = asker.clone();
                move |j| j.request(&asker, Action::Cancel, Subject::Nothing).begin()
            })
            .await?;
        test_pause("cancel-pending").await;
        let withdrawn = self.h.stem.withdraw().await;
        test_pause("cancel-done").await;
        match withdrawn {
            Ok(Some(members)) => {
                let paths: Vec<&str> = members.iter().map(|m| of_path(&m.subvolume)).collect();
                let message = if let [one] = &members[..] {
                    format!(
                        "withdrawn: {} will not go back to {}; nothing else changed",
                        paths[0], one.snapshot
                    )
                } else {
                    let each: Vec<String> = members
                        .iter()
                        .zip(&paths)
                        .map(|(m, path)| format!("{path} to {}", m.snapshot))
                        .collect();
                    format!(
                        "withdrawn, all {} together: {} will not go back ({}); nothing else changed",
                        members.len(),
                        and_list(&paths),
                        each.join(", ")
                    )
                };
                // The request to cancel was synced before the stem acted; the disk says
                // what is staged after a power cut (adr/0011).
                self.h
                    .journal({
                        let message = message.clone();
                        move |j| j.unsynced(|j| j.finish(id, State::Withdrawn, &message))
                    })
                    .await?;
                Ok(Cancelled {
                    withdrawn: true,
                    snapshot: snapshot_names(&members),
                    of_path: paths.join(" "),
                    message,
                })
            }
            Ok(None) => self.nothing_to_cancel(id).await,
            // A bad request file is no request, yet it must go: no restore can be staged
            // beside it (adr/0015).
            Err(StemError::Refused {
                kind: ErrorKind::BadRequestFile,
                ..
            }) => match self.h.stem.discard_bad_request().await {
                Ok(Some(why)) => {
                    let message = format!(
                        "removed a bad restore request file ({why}); no restore was staged, \
                             nothing else changed"
                    );
                    self.h
                        .journal({
                            let message = message.clone();
                            move |j| j.unsynced(|j| j.finish(id, State::Withdrawn, &message))
                        })
                        .await?;
                    Ok(Cancelled {
                        withdrawn: true,
                        snapshot: String::new(),
                        of_path: String::new(),
                        message,
                    })
                }
                Ok(None) => self.nothing_to_cancel(id).await,
                Err(e) => {
                    self.reconcile.settle_after_stem_error(id, &e).await?;
                    Err(stem_error(e))
                }
            },
            Err(e) => {
                self.reconcile.settle_after_stem_error(id, &e).await?;
                Err(stem_error(e))
            }
        }
    }

    /// Cancel's answer when nothing was staged: journalled, nothing changed.
    async fn nothing_to_cancel(&self, id: i64) -> Result<Cancelled, KeeperError> {
        let message = "no restore was staged; nothing changed".to_owned();
        self.h
            .journal({
                let message = message.clone();
                move |j| j.unsynced(|j| j.finish(id, State::NothingStaged, &message))
            })
            .await?;
        Ok(Cancelled {
            withdrawn: false,
            snapshot: String::new(),
            of_path: String::new(),
            message,
        })
    }

    /// The staged restore, the latest outcome of a boot, and the journal's state.
    pub async fn status(&self, uid: u32) -> Result<Status, KeeperError> {
        let _turn = self.h.looker_turn(self.h.may_change(uid)).await;
        self.reconcile.ensure().await;
        self.reconcile.settle_leftovers().await;
        let staged = self.h.stem.staged_or_bad().await;
        let stem_running = !matches!(staged, Err(StemError::NotRunning | StemError::WentAway));
        if stem_running {
            if let Err(e) = self.reconcile.read_outcome().await {
                tracing::warn!("reading the boot's outcome: {}", e.message());
            }
        }
        let (staged, staged_problem) = match staged {
            Ok(StagedOnDisk::Request(r)) => (Some(r), String::new()),
            Ok(StagedOnDisk::Nothing) | Err(StemError::NotRunning | StemError::WentAway) => {
                (None, String::new())
            }
            Ok(StagedOnDisk::Bad(why)) => (None, why),
            Err(e) => return Err(stem_error(e)),
        };
        let staging = match &staged {
            Some(s) => {
                let names = snapshot_names(s);
                self.h.journal(move |j| j.staging_of(&names)).await?
            }
            None => None,
        };
        let (outcome, unknown, failed) = self
            .h
            .journal(move |j| {
                let o = j.report_latest_outcome(uid)?;
                let unknown = j
                    .snapshots()?
                    .iter()
                    .filter(|s| s.request.is_none() && s.state == SnapshotState::Present)
                    .count() as u32;
                Ok((o, unknown, j.failed_sets()?))
            })
            .await?;
        let verifications = self
            .h
            .journal(|j| j.last_verifications())
            .await?
            .into_iter()
            .map(last_verified)
            .collect();
        let path = self
            .h
            .journal(|j| Ok(j.path().display().to_string()))
            .await?;
        let space = if stem_running {
            self.h.stem.free_space().await.ok()
        } else {
            None
        };
        // The undo is offered while what it puts back is there: retention deletes it after
        // its days, and a person may delete it sooner. (Unknown with the stem away: offered.)
        let undo_gone = match outcome.as_ref().filter(|o| !o.replaced.is_empty()) {
            Some(o) if stem_running => match self.h.stem.list().await {
                Ok(disk) => o
                    .replaced
                    .iter()
                    .any(|r| !disk.iter().any(|d| d.member.name == r.name)),
                Err(_) => false,
            },
            _ => false,
        };
        Ok(Status {
            stem_running,
            // One per member, separated by spaces (a set's in the order the boot takes them).
            staged_snapshot: staged.as_deref().map(snapshot_names).unwrap_or_default(),
            staged_of_path: staged
                .as_ref()
                .map(|s| {
                    s.iter()
                        .map(|m| of_path(&m.subvolume))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default(),
            // Given back by the caller (checked equal to the keeper's own words), so shown
            // like anything else a caller sent: escaped, line by line (a set's words are
            // several lines).
            staged_words: staging
                .as_ref()
                .map(|r| escape_lines(&r.words_shown))
                .unwrap_or_default(),
            staged_by: staging
                .as_ref()
                .map(|r| escape(r.user_name.as_bytes()))
                .unwrap_or_default(),
            outcome_id: outcome.as_ref().map(|o| o.id.clone()).unwrap_or_default(),
            outcome_result: outcome
                .as_ref()
                .map(|o| outcome_result_text(o.result).to_owned())
                .unwrap_or_default(),
            outcome_request: outcome
                .as_ref()
                .map(|o| o.request.clone())
                .unwrap_or_default(),
            outcome_reason: outcome
                .as_ref()
                .map(|o| escape(o.reason.as_bytes()))
                .unwrap_or_default(),
            outcome_undo: outcome
                .as_ref()
                .filter(|o| !o.replaced.is_empty() && !undo_gone)
                .map(|o| {
                    let names: Vec<String> = o
                        .replaced
                        .iter()
                        .map(|r| escape(r.name.as_bytes()))
                        .collect();
                    format!("tacid data restore {}", names.join(" "))
                })
                .unwrap_or_default(),
            outcome_finished_micros: outcome
                .as_ref()
                .map(|o| o.finished_micros)
                .unwrap_or_default(),
            outcome_new: outcome.as_ref().is_some_and(|o| !o.reported),
            unknown_origin: unknown,
            failed_sets: failed,
            journal_path: path,
            free_bytes: space.map(|s| s.free_bytes).unwrap_or_default(),
            size_bytes: space.map(|s| s.size_bytes).unwrap_or_default(),
            floor_bytes: self.retention.policy().floor_bytes,
            hard_floor_bytes: space.map(|s| s.hard_floor_bytes).unwrap_or_default(),
            deletions_pending: space.map(|s| s.deletions_pending).unwrap_or_default(),
            staged_problem,
            verifications,
        })
    }

    /// Take the timeline's snapshot set (below the free-space floor, `snapshot` prunes
    /// first).
    pub async fn snapshot_timeline(&self, uid: u32) -> Result<SnapshotSet, KeeperError> {
        let asker = Authority::asker(uid);
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            return Err(self
                .refusals
                .refuse(&asker, Action::Snapshot, "timeline", "", why)
                .await);
        }
        let set = self.snapshot(uid, &[], "timeline", false).await?;
        // A crash before this line leaves the set manual: kept until deleted, the safe side.
        self.retention.mark_timeline(set.set_id).await?;
        Ok(set)
    }
}

/// A target's last verification as `Status` says it: who asked escaped, or the rule; what
/// failed escaped (the copier's words name what a target served).
fn last_verified(v: crate::journal::LastVerification) -> crate::wire::LastVerified {
    crate::wire::LastVerified {
        target: v.target,
        when_micros: v.when_micros,
        by: if v.rule.is_empty() {
            escape(v.user_name.as_bytes())
        } else {
            v.rule
        },
        good: v.good,
        failed: v
            .failed
            .into_iter()
            .map(|(name, problem)| crate::wire::CopyVerified {
                name: escape(name.as_bytes()),
                ok: false,
                problem: escape(problem.as_bytes()),
                bytes_read: 0,
            })
            .collect(),
    }
}
