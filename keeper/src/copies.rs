//! Copies off the disk: the keeper's side. Authority, the journal, and the
//! timer's act (the newest snapshot of each subvolume the target lacks, then the target's
//! retention); the stem does the sending, and the send stream never passes through here.
//!
//! Who may: root and approvers copy and fetch; anybody may list what a target holds (names
//! and times; the received UUIDs only for those who may change). A target name from a
//! caller is capped and checked against the grammar and the configured targets before
//! anything else looks at it; a name that is not a configured target is refused and
//! journalled like every refusal.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use layout::copies::{CopiesConfig, Target, TargetName};
use layout::escape::escape;
use layout::{SnapshotName, SubvolumeName};
use stem_interface::ErrorKind;

use crate::authority::{Act, Authority};
use crate::caps;
use crate::caps::parse_snapshot;
use crate::handles::Handles;
use crate::journal::{Action, Asker, CopyAction, CopyEnd, Member, State};
use crate::reconcile::Reconcile;
use crate::refusals::Refusals;
use crate::retention::copies::{self as copy_retention, HeldCopy, TargetKeep};
use crate::stem_client::stem_error;
use crate::stem_client::{Copied, StemError};
use crate::wire::{
    CopyDeleted, CopyFailed, CopyHeld, CopyInFlight, CopyMade, CopyReport, Fetched, KeeperError,
    SnapshotEntry, TargetCopies,
};
use crate::words::of_path;

mod sealed;
pub use sealed::MAX_VERIFY_NAMES;

/// The longest an act waits for a looker's listing of its target to end.
const ACT_WAITS_FOR_LISTING: std::time::Duration = std::time::Duration::from_secs(120);

/// The rule journalled for the timer's copies of `target`.
fn timer_rule(target: &str) -> String {
    format!("timer of {target}")
}

/// The rule journalled for deletions by `target`'s retention.
fn retention_rule(target: &str) -> String {
    format!("retention of {target}")
}

/// Where people see the subvolume a snapshot name is of (`/home`), or `?`.
fn path_of_snapshot(name: &str) -> String {
    SnapshotName::parse(name)
        .map(|n| n.subvolume().display_path().to_owned())
        .unwrap_or_else(|_| "?".into())
}

/// The keeper's record of which acts on which targets are running: one at a time per
/// target, so the timer's act and a person's copy do not meet at the stem.
#[derive(Debug)]
struct TargetActs {
    running: std::sync::Mutex<HashMap<String, Arc<TargetTurn>>>,
    /// The journal rows of acts this keeper is running: a listing settles only rows a
    /// stopped keeper left pending, never these.
    rows: std::sync::Mutex<BTreeSet<i64>>,
    /// When this keeper started: a pending row older than that was left by a keeper that
    /// stopped; a younger one lost its answer (the journal says which).
    started_micros: i64,
}

/// The one turn on a target: an act's for as long as the act, a looker's for one listing.
/// A looker holding it is marked, so an act waits for it (short) rather than fail, and no
/// looker's listing ever meets an act at the stem or the copier: a stranger listing in a
/// loop cannot make a timer's act fail.
#[derive(Debug, Default)]
struct TargetTurn {
    lock: Arc<tokio::sync::Mutex<()>>,
    held_by_looker: std::sync::atomic::AtomicBool,
}

/// A looker's turn on a target, until dropped.
struct LookerTurn {
    turn: Arc<TargetTurn>,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for LookerTurn {
    fn drop(&mut self) {
        self.turn
            .held_by_looker
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Default for TargetActs {
    fn default() -> Self {
        TargetActs {
            running: Default::default(),
            rows: Default::default(),
            started_micros: layout::human::unix_micros(std::time::SystemTime::now()),
        }
    }
}

/// A journal row of an act in flight, until dropped.
struct RowInFlight<'a> {
    acts: &'a TargetActs,
    id: i64,
}

impl Drop for RowInFlight<'_> {
    fn drop(&mut self) {
        self.acts
            .rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl TargetActs {
    /// Mark the journal row `id` as an act in flight until the answer is dropped.
    fn row(&self, id: i64) -> RowInFlight<'_> {
        self.rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
        RowInFlight { acts: self, id }
    }

    fn rows_in_flight(&self) -> BTreeSet<i64> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn turn_of(&self, target: &str) -> Arc<TargetTurn> {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(target.to_owned())
            .or_default()
            .clone()
    }

    /// An act's turn on `target` (a configured name), or `None` when another act holds it.
    /// A looker's listing holding it is waited for (at most [`ACT_WAITS_FOR_LISTING`]);
    /// the act queues, and the lock is fair, so lookers that come later cannot overtake it.
    async fn try_turn(&self, target: &str) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let turn = self.turn_of(target);
        if let Ok(g) = turn.lock.clone().try_lock_owned() {
            return Some(g);
        }
        // A looker marks the turn just after taking it: look again, briefly, before saying
        // another act holds it.
        let mut looker = false;
        for _ in 0..5 {
            if turn
                .held_by_looker
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                looker = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            if let Ok(g) = turn.lock.clone().try_lock_owned() {
                return Some(g);
            }
        }
        if !looker {
            return None;
        }
        tokio::time::timeout(ACT_WAITS_FOR_LISTING, turn.lock.clone().lock_owned())
            .await
            .ok()
    }

    /// A looker's turn on `target` for one listing, or `None` while an act (or another
    /// looker) holds it: a looker never waits.
    fn looker_turn(&self, target: &str) -> Option<LookerTurn> {
        let turn = self.turn_of(target);
        let guard = turn.lock.clone().try_lock_owned().ok()?;
        turn.held_by_looker
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Some(LookerTurn {
            turn,
            _guard: guard,
        })
    }
}

/// Is this stem error one of the target as a whole (every further copy would fail alike)?
fn whole_target_failed(e: &StemError) -> bool {
    match e {
        StemError::Refused { kind, .. } => matches!(
            kind,
            ErrorKind::TargetUnreachable
                | ErrorKind::HostKeyChanged
                | ErrorKind::TargetNotBtrfs
                | ErrorKind::TargetFull
                | ErrorKind::NoSuchTarget
        ),
        StemError::NotRunning
        | StemError::WentAway
        | StemError::Bus(_)
        | StemError::NotTheStem(_) => true,
    }
}

/// A stem error's name for a report (`TargetFull`), or the class of a failure to reach it.
fn error_name(e: &StemError) -> String {
    match e {
        StemError::Refused { kind, .. } => kind.name().to_owned(),
        StemError::NotRunning | StemError::WentAway => keeper_interface::ErrorKind::StemNotRunning
            .name()
            .to_owned(),
        StemError::Bus(_) | StemError::NotTheStem(_) => {
            keeper_interface::ErrorKind::StemFailed.name().to_owned()
        }
    }
}

/// What the journal records of a failure: the stem's reason, capped (the far side of an SSH
/// target may be hostile, and the stem passes on what it said).
fn failure_reason(e: &StemError) -> String {
    layout::human::cap(&format!("failed: {e}"), caps::MAX_FAILURE_BYTES).into_owned()
}

/// What the journal records of an act whose stem stopped while it ran (the bus said the
/// stem left without answering): the keeper did not stop, and nothing of it counts.
fn stem_stopped(action: CopyAction) -> String {
    let what = match action {
        CopyAction::Copy => {
            "the copy is not counted (a half-received copy on the target is deleted by the \
             next act on it); `tacid data copy` again"
        }
        CopyAction::Fetch => {
            "nothing was fetched (the half-received copy is removed when the stem starts); \
             `tacid data fetch` again"
        }
        CopyAction::DeleteCopy => "the next listing of the target shows whether it went",
    };
    format!("failed: the stem stopped before it answered; {what}")
}

/// The copies service: who may copy and fetch, and the timer's act; owns the turns of the
/// acts on each target.
#[derive(Debug)]
pub struct Copies {
    h: Handles,
    refusals: Arc<Refusals>,
    reconcile: Arc<Reconcile>,
    /// The copy targets (root's configuration; none when it is missing).
    config: Arc<CopiesConfig>,
    /// One act at a time on each target.
    acts: TargetActs,
}

impl Copies {
    pub fn new(
        h: Handles,
        refusals: Arc<Refusals>,
        reconcile: Arc<Reconcile>,
        config: Arc<CopiesConfig>,
    ) -> Copies {
        Copies {
            h,
            refusals,
            reconcile,
            config,
            acts: TargetActs::default(),
        }
    }

    /// The configured copy targets.
    pub fn config(&self) -> &CopiesConfig {
        &self.config
    }

    /// The configured target a caller named, or a refusal, journalled. The name is capped
    /// and checked against the grammar before it is looked up, and nothing else about the
    /// request is looked at first.
    async fn configured_target(
        &self,
        asker: &Asker,
        act: Action,
        name: &str,
        target: &str,
    ) -> Result<&Target, KeeperError> {
        let shown = layout::human::cap(target, caps::MAX_TARGET_NAME_BYTES);
        let why = match TargetName::parse(target) {
            Err(e) => Some(format!("{shown:?} is not a target name: {e}")),
            Ok(_) => match self.config.target(target) {
                Some(t) => return Ok(t),
                None => Some(format!("no target {shown:?} is configured")),
            },
        };
        let configured: Vec<&str> = self.config.targets.keys().map(|t| t.as_str()).collect();
        let why = format!(
            "{}; targets are root's configuration ({}), not a caller's: {}",
            why.unwrap_or_default(),
            layout::copies::CONFIG_PATH,
            if configured.is_empty() {
                "none is configured".to_owned()
            } else {
                format!("configured: {}", configured.join(", "))
            }
        );
        // A fetch is from its target; a copy (and a listing) to or of it.
        let to = if act == Action::Fetch { "from" } else { "to" };
        // Journalled and logged: in the visible form, never a caller's control bytes (adr/0017).
        let shown = escape(shown.as_bytes());
        let subject = if name.is_empty() {
            format!("{to} {shown}")
        } else {
            format!("{} {to} {shown}", caps::name(name))
        };
        self.refusals
            .journal_refusal_of(asker, act, subject.into(), "", &why)
            .await;
        Err(KeeperError::NoSuchTarget(why))
    }

    /// The target's retention counts.
    fn keep_of(target: &Target) -> TargetKeep {
        TargetKeep {
            latest: target.keep.latest,
            daily: target.keep.daily,
            weekly: target.keep.weekly,
            monthly: target.keep.monthly,
        }
    }

    fn busy(target: &str) -> KeeperError {
        KeeperError::TargetBusy(format!(
            "another copy, fetch or deletion on {target} is running; `tacid data copies {target}` \
             shows what it holds, and you can try again when it is done"
        ))
    }

    fn busy_for_a_looker(target: &str) -> KeeperError {
        KeeperError::TargetBusy(format!(
            "a copy, fetch, verification or deletion on {target} is running (or another \
             listing of it); try again in a moment, or when `tacid data status` no longer shows it"
        ))
    }

    /// List `target` and record what it holds (settling acts a stopped keeper left pending).
    async fn list_target(
        &self,
        target: &str,
    ) -> Result<(Vec<crate::stem_client::HeldCopy>, BTreeSet<String>), StemError> {
        let held = self.h.stem.copies_on(target).await?;
        let members: Vec<Member> = self
            .h
            .stem
            .list()
            .await?
            .into_iter()
            .map(|d| d.member)
            .collect();
        let local: BTreeSet<String> = members.iter().map(|m| m.name.clone()).collect();
        let pairs: Vec<(String, String)> = held
            .iter()
            .map(|h| (h.name.clone(), h.received_uuid.clone()))
            .collect();
        let mut in_flight = self.acts.rows_in_flight();
        // A transfer the stem still runs for a keeper that stopped is not settled "not done"
        // yet: it may be done a moment later (what is already done is settled).
        let running: Vec<_> = match self.h.stem.copy_progress().await {
            Ok(all) => all.into_iter().filter(|f| f.target == target).collect(),
            Err(_) => Vec::new(),
        };
        if !running.is_empty() {
            if let Ok(rows) = self.h.journal(|j| j.copy_requests()).await {
                in_flight.extend(
                    rows.iter()
                        .filter(|r| {
                            r.state == State::Pending
                                && r.target == target
                                && running
                                    .iter()
                                    .any(|f| f.name == r.subject && r.action == f.direction)
                                && !match r.action {
                                    Action::Copy => held.iter().any(|h| h.name == r.subject),
                                    _ => local.contains(&r.subject),
                                }
                        })
                        .map(|r| r.id),
                );
            }
        }
        let started = self.acts.started_micros;
        let recording = {
            let (target, members) = (target.to_owned(), members.clone());
            move |j: &mut crate::journal::Journal| {
                j.record_target_listing(&target, &pairs, &members, &in_flight, started)
            }
        };
        if let Err(e) = self.h.journal(recording).await {
            tracing::warn!(target, "recording what the target holds: {}", e.message());
        }
        Ok((held, local))
    }

    /// List `target` for an act holding its turn here: the only listing that can make the
    /// stem answer TargetBusy then is a looker's (anybody may list), which is short; wait
    /// for it rather than fail the act (at most [`ACT_WAITS_FOR_LISTING`]).
    async fn list_target_for_act(
        &self,
        target: &str,
    ) -> Result<(Vec<crate::stem_client::HeldCopy>, BTreeSet<String>), StemError> {
        let started = Instant::now();
        loop {
            match self.list_target(target).await {
                Err(StemError::Refused {
                    kind: ErrorKind::TargetBusy,
                    ..
                }) if started.elapsed() < ACT_WAITS_FOR_LISTING => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                other => return other,
            }
        }
    }

    /// Journal an act on a target that failed before it reached the stem's transfer (the
    /// target could not be listed: unreachable, not Btrfs, its host key changed).
    async fn journal_failed_act(
        &self,
        asker: &Asker,
        action: CopyAction,
        target: &str,
        name: &str,
        rule: &str,
        e: &StemError,
    ) {
        let reason = failure_reason(e);
        let begun = self
            .h
            .journal({
                let (asker, target, name, rule) = (
                    asker.clone(),
                    target.to_owned(),
                    name.to_owned(),
                    rule.to_owned(),
                );
                move |j| j.begin_copy(&asker, action, &target, &name, &rule, "")
            })
            .await;
        let recorded = match begun {
            Ok(id) => {
                let _row = self.acts.row(id);
                let end = CopyEnd {
                    state: State::Failed,
                    outcome: reason.clone(),
                    parent: String::new(),
                    bytes: 0,
                    received_uuid: None,
                };
                self.h.journal(move |j| j.finish_copy(id, &end)).await
            }
            Err(e) => Err(e),
        };
        if let Err(je) = recorded {
            tracing::error!(
                "could not journal a failed {}: {}",
                action.as_str(),
                je.message()
            );
        }
        tracing::warn!(uid = asker.uid, user = %asker.name, rule, target, snapshot = name, "{} {reason}", action.as_str());
    }

    /// Copy one snapshot, journalled; `Ok` when verified on the target.
    async fn copy_one(
        &self,
        asker: &Asker,
        target: &str,
        name: &str,
        rule: &str,
    ) -> Result<(Copied, u64), (StemError, String)> {
        let id = self
            .h
            .journal({
                let (asker, target, name, rule) = (
                    asker.clone(),
                    target.to_owned(),
                    name.to_owned(),
                    rule.to_owned(),
                );
                move |j| j.begin_copy(&asker, CopyAction::Copy, &target, &name, &rule, "")
            })
            .await
            .map_err(|e| (StemError::Bus(e.message()), e.message()))?;
        let _row = self.acts.row(id);
        let started = Instant::now();
        let result = self.h.stem.copy_to(name, target).await;
        let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match result {
            Ok(c) => {
                let outcome = format!(
                    "copied to {target} ({}), {} in {:.1} s; verified: read-only, received \
                     UUID {}",
                    if c.incremental {
                        format!("incremental against {}", c.parent)
                    } else {
                        "full".to_owned()
                    },
                    crate::words::count(c.bytes, "byte", "bytes"),
                    took_ms as f64 / 1000.0,
                    layout::human::prefix(&c.received_uuid, 64)
                );
                let end = CopyEnd {
                    state: State::Complete,
                    outcome: outcome.clone(),
                    parent: caps::name(&c.parent).into_owned(),
                    bytes: c.bytes,
                    received_uuid: Some(layout::human::prefix(&c.received_uuid, 64).to_owned()),
                };
                self.h
                    .journal(move |j| j.finish_copy(id, &end))
                    .await
                    .map_err(|e| (StemError::Bus(e.message()), e.message()))?;
                tracing::info!(uid = asker.uid, user = %asker.name, rule, target, snapshot = name, bytes = c.bytes, took_ms, "{outcome}");
                Ok((c, took_ms))
            }
            Err(e) => {
                let reason = match e {
                    StemError::WentAway => stem_stopped(CopyAction::Copy),
                    _ => failure_reason(&e),
                };
                // Lost on the bus: it may have copied; the next listing of the target settles
                // it. A stem that stopped answers nothing: its copy is not counted.
                if !matches!(e, StemError::Bus(_)) {
                    let end = CopyEnd {
                        state: State::Failed,
                        outcome: reason.clone(),
                        parent: String::new(),
                        bytes: 0,
                        received_uuid: None,
                    };
                    if let Err(je) = self.h.journal(move |j| j.finish_copy(id, &end)).await {
                        tracing::error!("could not journal a failed copy: {}", je.message());
                    }
                }
                tracing::warn!(uid = asker.uid, user = %asker.name, rule, target, snapshot = name, "{reason}");
                Err((e, reason))
            }
        }
    }

    /// Copy the snapshot `name` to `target`; `name` empty: the timer's act.
    pub async fn copy(
        &self,
        uid: u32,
        name: &str,
        target: &str,
    ) -> Result<CopyReport, KeeperError> {
        let asker = Authority::asker(uid);
        let t = self
            .configured_target(&asker, Action::Copy, name, target)
            .await?;
        let target = t.name.as_str();
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            let subject = if name.is_empty() {
                format!("to {target}")
            } else {
                format!("{} to {target}", caps::name(name))
            };
            self.refusals
                .journal_refusal_of(&asker, Action::Copy, subject.into(), "", &why)
                .await;
            return Err(KeeperError::NotAuthorized(why));
        }
        if !name.is_empty() {
            parse_snapshot(name)?;
        }
        let _turn = self
            .acts
            .try_turn(target)
            .await
            .ok_or_else(|| Self::busy(target))?;
        self.reconcile.ensure().await;
        if t.is_sealed() {
            return self.copy_sealed(&asker, t, name).await;
        }
        if name.is_empty() {
            return self.copy_timer(&asker, t).await;
        }
        let (held, local) = match self.list_target_for_act(target).await {
            Ok(listed) => listed,
            Err(e) => {
                self.journal_failed_act(&asker, CopyAction::Copy, target, name, "", &e)
                    .await;
                return Err(stem_error(e));
            }
        };
        let mut report = empty_report(target);
        if held.iter().any(|h| h.name == name) {
            report.already_there.push(name.to_owned());
            report.message =
                format!("{target} already holds a verified copy of {name}; nothing was sent");
            return Ok(report);
        }
        if !local.contains(name) {
            return Err(KeeperError::NoSuchSnapshot(format!(
                "there is no snapshot named {name} here; see `tacid data list`"
            )));
        }
        match self.copy_one(&asker, target, name, "").await {
            Ok((c, took_ms)) => {
                report.message = format!(
                    "copied {name} to {target} ({}, {}); verified",
                    if c.incremental {
                        format!("incremental against {}", c.parent)
                    } else {
                        "a full copy".to_owned()
                    },
                    layout::human::bytes(c.bytes)
                );
                report.copied.push(made(&c, took_ms));
                Ok(report)
            }
            Err((e, _)) => Err(stem_error(e)),
        }
    }

    /// The timer's act: the newest snapshot of each subvolume the target lacks, then the
    /// target's retention. Failures are in the report (and the journal), not an error: the
    /// next run tries again.
    async fn copy_timer(&self, asker: &Asker, t: &Target) -> Result<CopyReport, KeeperError> {
        let target = t.name.as_str();
        let rule = timer_rule(target);
        let (held, _) = match self.list_target_for_act(target).await {
            Ok(listed) => listed,
            Err(e) => {
                self.journal_failed_act(asker, CopyAction::Copy, target, "", &rule, &e)
                    .await;
                return Err(stem_error(e));
            }
        };
        let disk = self.h.stem.list().await.map_err(stem_error)?;
        // What a restore replaced (adr/0027) is what a person chose to throw away: kept for
        // an undo, copied only when named, never as "the newest" of its subvolume.
        let replaced: BTreeSet<String> = self
            .h
            .journal(|j| j.replaced())
            .await?
            .into_iter()
            .map(|r| r.name)
            .collect();
        // The newest snapshot of each snapshotted subvolume.
        let mut newest: BTreeMap<String, (i64, String)> = BTreeMap::new();
        for d in &disk {
            let m = &d.member;
            let snapshotted =
                SubvolumeName::parse(&m.of_subvolume).is_ok_and(|s| s.subvolume().snapshottable());
            if !snapshotted || replaced.contains(&m.name) {
                continue;
            }
            let e = newest
                .entry(m.of_subvolume.clone())
                .or_insert((i64::MIN, String::new()));
            if (m.taken_micros, &m.name) > (e.0, &e.1) {
                *e = (m.taken_micros, m.name.clone());
            }
        }
        let mut report = empty_report(target);
        let held_names: BTreeSet<&str> = held.iter().map(|h| h.name.as_str()).collect();
        let mut stop: Option<String> = None;
        for (_, name) in newest.values() {
            if held_names.contains(name.as_str()) {
                report.already_there.push(name.clone());
                continue;
            }
            if let Some(why) = &stop {
                report.failed.push(CopyFailed {
                    name: name.clone(),
                    of_path: path_of_snapshot(name),
                    error: "NotTried".into(),
                    reason: format!("not tried: {why}"),
                });
                continue;
            }
            match self.copy_one(asker, target, name, &rule).await {
                Ok((c, took_ms)) => report.copied.push(made(&c, took_ms)),
                Err((e, reason)) => {
                    if whole_target_failed(&e) {
                        stop = Some(reason.clone());
                    }
                    report.failed.push(CopyFailed {
                        name: name.clone(),
                        of_path: path_of_snapshot(name),
                        error: error_name(&e),
                        reason,
                    });
                }
            }
        }
        // Retention, when the target can be listed (a full target may need it most).
        let retention_note = match self.list_target_for_act(target).await {
            Ok((held, local)) => {
                let keep = Self::keep_of(t);
                report.retention = keep.describe();
                self.target_retention(asker, target, &held, &local, &keep, &mut report)
                    .await;
                String::new()
            }
            Err(e) => format!("; retention not applied: {e}"),
        };
        report.message = format!(
            "{target}: {} copied, {} already there, {} failed, {} deleted by its retention{}",
            report.copied.len(),
            report.already_there.len(),
            report.failed.len(),
            report.deleted.iter().filter(|d| d.note.is_empty()).count(),
            retention_note
        );
        tracing::info!(uid = asker.uid, user = %asker.name, rule, "{}", report.message);
        Ok(report)
    }

    /// Delete on `target` what its retention chooses, each deletion journalled with the rule.
    async fn target_retention(
        &self,
        asker: &Asker,
        target: &str,
        held: &[crate::stem_client::HeldCopy],
        local: &BTreeSet<String>,
        keep: &TargetKeep,
        report: &mut CopyReport,
    ) {
        let copies: Vec<HeldCopy> = held
            .iter()
            .filter_map(|h| {
                // Only names of the layout's grammar are tacid's copies; others stay.
                let n = SnapshotName::parse(&h.name).ok()?;
                Some(HeldCopy {
                    name: h.name.clone(),
                    of: n.subvolume().to_string(),
                    taken_micros: n.taken_unix_micros(),
                    in_store: local.contains(&h.name),
                })
            })
            .collect();
        let rule = retention_rule(target);
        for d in copy_retention::plan(&copies, keep) {
            let why = format!("{rule}: {}", d.why);
            let begun = self
                .h
                .journal({
                    let (asker, target, name, rule, why) = (
                        asker.clone(),
                        target.to_owned(),
                        d.name.clone(),
                        rule.clone(),
                        why.clone(),
                    );
                    move |j| {
                        j.begin_copy(&asker, CopyAction::DeleteCopy, &target, &name, &rule, &why)
                    }
                })
                .await;
            let id = match begun {
                Ok(id) => id,
                Err(e) => {
                    report.deleted.push(CopyDeleted {
                        name: d.name.clone(),
                        of_path: path_of_snapshot(&d.name),
                        why,
                        note: format!("not tried: {}", e.message()),
                    });
                    break;
                }
            };
            let _row = self.acts.row(id);
            let result = self.h.stem.delete_copy(target, &d.name).await;
            let (st, outcome, note) = match &result {
                Ok(()) => (State::Complete, "deleted".to_owned(), String::new()),
                Err(StemError::WentAway) => {
                    let why = stem_stopped(CopyAction::DeleteCopy);
                    (State::Failed, why.clone(), why)
                }
                Err(e) => (State::Failed, failure_reason(e), failure_reason(e)),
            };
            if !matches!(result, Err(StemError::Bus(_))) {
                let end = CopyEnd {
                    state: st,
                    outcome,
                    parent: String::new(),
                    bytes: 0,
                    received_uuid: None,
                };
                if let Err(e) = self.h.journal(move |j| j.finish_copy(id, &end)).await {
                    tracing::error!("could not journal a deletion on {target}: {}", e.message());
                }
            }
            tracing::info!(uid = asker.uid, rule, target, copy = %d.name, note, "{why}");
            report.deleted.push(CopyDeleted {
                name: d.name.clone(),
                of_path: path_of_snapshot(&d.name),
                why,
                note,
            });
            if matches!(result, Err(ref e) if whole_target_failed(e)) {
                break;
            }
        }
    }

    /// What `target` holds. Anybody may ask; the received UUIDs only for root and approvers.
    pub async fn copies(&self, uid: u32, target: &str) -> Result<TargetCopies, KeeperError> {
        let asker = Authority::asker(uid);
        let t = self
            .configured_target(&asker, Action::Copies, "", target)
            .await?;
        let target = t.name.as_str();
        let may_change = self.h.may_change(uid);
        let _turn = self.h.looker_turn(may_change).await;
        let _target_turn = self
            .acts
            .looker_turn(target)
            .ok_or_else(|| Self::busy_for_a_looker(target))?;
        if t.is_sealed() {
            return self.copies_sealed(t, may_change).await;
        }
        let (held, local) = self.list_target(target).await.map_err(|e| {
            // The stem logs failed looks within one allowance for all callers: said here per
            // caller, so one caller's flood does not silence another's.
            let v = crate::refusals::stem_refusals_logged("copies", uid);
            if v.log() {
                tracing::warn!(uid, user = %asker.name, target, "listing the target failed: {}{}", failure_reason(&e), v.note());
            }
            stem_error(e)
        })?;
        let mut copies: Vec<CopyHeld> = held
            .iter()
            .map(|h| {
                let parsed = SnapshotName::parse(&h.name).ok();
                let of = parsed
                    .as_ref()
                    .map(|n| n.subvolume().to_string())
                    .unwrap_or_default();
                CopyHeld {
                    // What a hostile far side says is shown escaped, and capped.
                    name: escape(caps::name(&h.name).as_bytes()),
                    of_path: of_path(&of).to_owned(),
                    of,
                    taken_micros: parsed.map(|n| n.taken_unix_micros()).unwrap_or_default(),
                    received_uuid: if may_change {
                        escape(layout::human::prefix(&h.received_uuid, 64).as_bytes())
                    } else {
                        String::new()
                    },
                    local: local.contains(&h.name),
                    problem: String::new(),
                }
            })
            .collect();
        copies.sort_by(|a, b| {
            a.taken_micros
                .cmp(&b.taken_micros)
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(TargetCopies {
            target: target.to_owned(),
            copies,
            retention: Self::keep_of(t).describe(),
        })
    }

    /// Receive the copy `name` from `target` into the local store, verified; journalled.
    pub async fn fetch(&self, uid: u32, name: &str, target: &str) -> Result<Fetched, KeeperError> {
        let asker = Authority::asker(uid);
        let t = self
            .configured_target(&asker, Action::Fetch, name, target)
            .await?;
        let target = t.name.as_str();
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            let subject = format!("{} from {target}", caps::name(name));
            self.refusals
                .journal_refusal_of(&asker, Action::Fetch, subject.into(), "", &why)
                .await;
            return Err(KeeperError::NotAuthorized(why));
        }
        let snap = parse_snapshot(name)?;
        let _turn = self
            .acts
            .try_turn(target)
            .await
            .ok_or_else(|| Self::busy(target))?;
        self.reconcile.ensure().await;
        if t.is_sealed() {
            return self.fetch_sealed(&asker, t, &snap).await;
        }
        let reason = format!("fetched from {target}");
        let id = self
            .h
            .journal({
                let (asker, target, name, reason) = (
                    asker.clone(),
                    target.to_owned(),
                    name.to_owned(),
                    reason.clone(),
                );
                move |j| j.begin_copy(&asker, CopyAction::Fetch, &target, &name, "", &reason)
            })
            .await?;
        let _row = self.acts.row(id);
        let started = Instant::now();
        let result = match self.h.stem.fetch_from(target, name).await {
            // The stem stopped mid-fetch: it did nothing unless the store holds a snapshot of
            // that name that this attempt made (the stem may stop after its last step, before
            // its answer). A stem not back yet cannot be asked: a stem that stops mid-receive
            // keeps nothing, so the fetch is journalled failed.
            Err(StemError::WentAway) => match self.h.stem.list().await {
                Ok(disk) => {
                    let found = disk.into_iter().find(|d| d.member.name == name);
                    match found {
                        Some(d) => {
                            let member = d.member.clone();
                            if self.h.journal(move |j| j.fetched_by(id, &member)).await? {
                                Ok((d, 0))
                            } else {
                                Err(StemError::WentAway)
                            }
                        }
                        None => Err(StemError::WentAway),
                    }
                }
                Err(_) => Err(StemError::WentAway),
            },
            other => other,
        };
        let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match result {
            Ok((d, bytes)) => {
                let message = format!(
                    "fetched {name} from {target} into the local store ({} in {:.1} s); \
                     verified. `tacid data restore {name}` says what putting {} back to it costs",
                    if bytes == 0 {
                        "the stem stopped before it said how many bytes".to_owned()
                    } else {
                        layout::human::bytes(bytes)
                    },
                    took_ms as f64 / 1000.0,
                    snap.subvolume().display_path()
                );
                let member = Member {
                    taken_micros: snap.taken_unix_micros(),
                    ..d.member.clone()
                };
                self.h
                    .journal({
                        let (message, member) = (message.clone(), member.clone());
                        move |j| {
                            j.finish_copy(
                                id,
                                &CopyEnd {
                                    state: State::Complete,
                                    outcome: message,
                                    parent: String::new(),
                                    bytes,
                                    received_uuid: None,
                                },
                            )?;
                            j.record_fetched(id, &member)
                        }
                    })
                    .await?;
                tracing::info!(uid, user = %asker.name, target, snapshot = name, "{message}");
                let sub = snap.subvolume();
                Ok(Fetched {
                    target: target.to_owned(),
                    snapshot: SnapshotEntry {
                        name: member.name.clone(),
                        of: sub.to_string(),
                        of_path: sub.display_path().to_owned(),
                        taken_micros: member.taken_micros,
                        reason: escape(reason.as_bytes()),
                        asked_by: escape(asker.name.as_bytes()),
                        asked_by_uid: uid,
                        origin: "fetched".into(),
                        pre_switch: false,
                        pinned: d.staged,
                        // A fetch brings one snapshot back: it is in no set here.
                        set_id: 0,
                        copies: vec![target.to_owned()],
                        last_common_parent_of: Vec::new(),
                        cut_units: String::new(),
                        replaced_by_restore_of: String::new(),
                        replaced_micros: 0,
                        kept_until_micros: 0,
                    },
                    parent: String::new(),
                    bytes,
                    message,
                })
            }
            Err(e) => {
                let reason = match e {
                    StemError::WentAway => stem_stopped(CopyAction::Fetch),
                    _ => failure_reason(&e),
                };
                if !matches!(e, StemError::Bus(_)) {
                    let end = CopyEnd {
                        state: State::Failed,
                        outcome: reason.clone(),
                        parent: String::new(),
                        bytes: 0,
                        received_uuid: None,
                    };
                    self.h.journal(move |j| j.finish_copy(id, &end)).await?;
                }
                tracing::warn!(uid, user = %asker.name, target, snapshot = name, "fetch {reason}");
                Err(stem_error(e))
            }
        }
    }

    /// Copies and fetches in flight. Anybody may ask.
    pub async fn copy_progress(&self, uid: u32) -> Result<Vec<CopyInFlight>, KeeperError> {
        let _turn = self.h.looker_turn(self.h.may_change(uid)).await;
        let stem = self.h.stem.copy_progress().await.map_err(stem_error)?;
        let all = in_flight(stem, self.h.copier.progress().await);
        Ok(all
            .into_iter()
            .map(|f| CopyInFlight {
                target: escape(
                    layout::human::cap(&f.target, caps::MAX_TARGET_NAME_BYTES).as_bytes(),
                ),
                name: escape(caps::name(&f.name).as_bytes()),
                direction: escape(layout::human::prefix(&f.direction, 16).as_bytes()),
                bytes: f.bytes,
                elapsed_ms: f.elapsed_ms,
            })
            .collect())
    }
}

/// What is in flight, as a person reads it: each act named by its target, with what it is
/// doing (`copy`, `fetch`, `verify`, `list`, `clean`, `delete`). A sealed copy or fetch is
/// the copier's act on its target and the stem's send or receive of the same snapshot
/// (the stem knows no target of it): shown once, as the copy or fetch it is, with the
/// stem's bytes and time. The copier's other acts (a verification above all) have its
/// bytes read and no time.
fn in_flight(
    stem: Vec<crate::stem_client::InFlight>,
    copier: Vec<copier_interface::SealProgress>,
) -> Vec<crate::stem_client::InFlight> {
    let (mut all, sealed): (Vec<_>, Vec<_>) = stem.into_iter().partition(|f| !f.target.is_empty());
    for p in copier {
        let stem_side = sealed
            .iter()
            .find(|f| !p.name.is_empty() && f.name == p.name);
        let direction = match (stem_side.map(|f| f.direction.as_str()), p.doing.as_str()) {
            (Some("send-sealed"), _) | (None, "seal") => "copy",
            (Some("receive-sealed"), _) | (None, "unseal") => "fetch",
            (_, other) => other,
        };
        all.push(crate::stem_client::InFlight {
            target: p.target,
            name: p.name,
            direction: direction.to_owned(),
            bytes: stem_side.map_or(p.moved, |f| f.bytes),
            elapsed_ms: stem_side.map_or(0, |f| f.elapsed_ms),
        });
    }
    all
}

/// A report for `target` with nothing in it yet; each act fills in what it did.
fn empty_report(target: &str) -> CopyReport {
    CopyReport {
        target: target.to_owned(),
        copied: Vec::new(),
        already_there: Vec::new(),
        failed: Vec::new(),
        deleted: Vec::new(),
        retention: String::new(),
        message: String::new(),
    }
}

fn made(c: &Copied, took_ms: u64) -> CopyMade {
    CopyMade {
        name: c.name.clone(),
        of_path: path_of_snapshot(&c.name),
        parent: c.parent.clone(),
        incremental: c.incremental,
        bytes: c.bytes,
        received_uuid: c.received_uuid.clone(),
        took_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_what_each_act_does_on_which_target() {
        use crate::stem_client::InFlight;
        let stem = |target: &str, name: &str, kind: &str, bytes| InFlight {
            target: target.into(),
            name: name.into(),
            direction: kind.into(),
            bytes,
            elapsed_ms: 2000,
        };
        let copier =
            |target: &str, name: &str, doing: &str, moved| copier_interface::SealProgress {
                target: target.into(),
                name: name.into(),
                doing: doing.into(),
                moved,
            };
        let all = in_flight(
            vec![
                stem("usb", "@home.a", "copy", 10),
                stem("", "@log.b", "receive-sealed", 20),
                stem("", "@persist.c", "send-sealed", 30),
            ],
            vec![
                copier("nas", "@log.b", "unseal", 99),
                copier("stick", "@persist.c", "clean", 0),
                copier("cloud", "", "verify", 0),
                copier("vault", "@home.d", "verify", 40),
                copier("attic", "", "list", 0),
            ],
        );
        let said: Vec<(&str, &str, &str, u64, u64)> = all
            .iter()
            .map(|f| {
                (
                    f.target.as_str(),
                    f.name.as_str(),
                    f.direction.as_str(),
                    f.bytes,
                    f.elapsed_ms,
                )
            })
            .collect();
        assert_eq!(
            said,
            [
                ("usb", "@home.a", "copy", 10, 2000),
                ("nas", "@log.b", "fetch", 20, 2000),
                ("stick", "@persist.c", "copy", 30, 2000),
                ("cloud", "", "verify", 0, 0),
                ("vault", "@home.d", "verify", 40, 0),
                ("attic", "", "list", 0, 0),
            ]
        );
    }

    #[test]
    fn only_failures_of_the_whole_target_stop_the_timer() {
        let refused = |kind: ErrorKind| StemError::Refused {
            kind,
            message: String::new(),
        };
        assert!(whole_target_failed(&refused(ErrorKind::TargetFull)));
        assert!(whole_target_failed(&refused(ErrorKind::HostKeyChanged)));
        assert!(whole_target_failed(&StemError::NotRunning));
        assert!(!whole_target_failed(&refused(ErrorKind::TransferFailed)));
        assert!(!whole_target_failed(&refused(ErrorKind::NotReadOnly)));
        let long = StemError::Refused {
            kind: ErrorKind::TransferFailed,
            message: "x".repeat(100_000),
        };
        let r = failure_reason(&long);
        assert!(r.len() < caps::MAX_FAILURE_BYTES + 40, "{}", r.len());
        assert!(r.ends_with("bytes)"), "{r}");
    }
}
