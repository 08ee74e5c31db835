//! The keeper's acts as plain Rust: authority, consent, journal, then the stem.
//!
//! Every method takes the caller's uid (from the bus) and returns wire results or a named
//! error; the interface module only converts. Journal writes are synchronous (one fsync),
//! done one at a time on the journal's own thread; snapshot sets are taken one at a time
//! (adr/0011).

use std::sync::Mutex;

use actor::Actor;
use std::time::{Duration, Instant, SystemTime};

use layout::escape::{escape, Escaped};
use layout::{SnapshotName, SubvolumeName};

use crate::authority::{Act, Authority};
use crate::caps;
use crate::caps::parse_snapshot;
use crate::journal::{
    outcome_result_text, Action, Asker, Journal, JournalError, Member, OutcomeRow, SnapshotState,
    State, Subject,
};
use crate::reconcile;
use crate::refusals::{self, Journalling};
use crate::stem_client::{snapshot_names, stem_error, StagedOnDisk, StemClient, StemError};
use crate::wire::{
    Cancelled, ChangedPath, KeeperError, RestoreDetails, RestoreStaged, SnapshotEntry, SnapshotSet,
    Status,
};
use crate::words::{escape_lines, of_path};
use layout::human::{and_list, unix_micros};
use stem_interface::ErrorKind;

mod copies;
mod list;
mod open;
mod preview;
mod retention;
mod set_restore;
pub use list::{Listed, ListedCopies, ListedRows};
pub use open::{home_part, CHECK_EVERY as OPEN_CHECK_EVERY, OPENS_PER_WINDOW};
pub use preview::MAX_LOOKER_COUNTS;
pub use retention::describe as describe_policy;

/// How long the words of a preview stay good for a confirmation.
pub const CONSENT_WINDOW: Duration = Duration::from_secs(layout::defaults::CONSENT_WINDOW_SECS);

/// How long a preview counts what changed since the snapshot before it answers "at least".
pub const PREVIEW_COUNT_LIMIT: Duration = Duration::from_secs(5);
/// How long `--details` may take to count and list the changed paths.
pub const DETAILS_COUNT_LIMIT: Duration = Duration::from_secs(15);

/// In a `test-hooks` build, stop for good at `point` when `TACID_KEEPER_PAUSE_AT` names it,
/// so the bus tier can SIGKILL the keeper exactly there. Nothing in other builds.
async fn test_pause(point: &str) {
    #[cfg(feature = "test-hooks")]
    {
        if std::env::var("TACID_KEEPER_PAUSE_AT").as_deref() == Ok(point) {
            eprintln!("tacid-keeper: TEST BUILD: paused at {point}");
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = point;
}

/// The keeper: journal, authority and the stem.
#[derive(Debug)]
pub struct Keeper {
    journal: Actor<Journal>,
    stem: StemClient,
    authority: Authority,
    /// One snapshot set at a time, so a crash leaves at most one set pending.
    sets: tokio::sync::Mutex<()>,
    /// Journal and disk have been reconciled since start (retried while the stem is away).
    reconciled: tokio::sync::Mutex<bool>,
    /// What retention keeps (adr/0013).
    policy: crate::retention::Policy,
    /// Refusals past a caller's allowance, counted rather than journalled one by one.
    refusals: Mutex<refusals::Limiter>,
    /// Each caller's turn to preview, and the lookers' counts in flight (adr/0016).
    previews: preview::Previews,
    /// Lookers' requests that reach the stem, in flight at once (adr/0016).
    looker_requests: tokio::sync::Semaphore,
    /// The copy targets (root's configuration; none when it is missing).
    copies: layout::copies::CopiesConfig,
    /// One act at a time on each target.
    copy_acts: copies::TargetActs,
    /// The opens this keeper journalled, and the turns of diffs (adr/0019).
    opens: open::OpenState,
    /// The last list made, kept while the store and the journal stay as they were.
    list_cache: list::ListCache,
}

/// Requests of people who may only look (list, status, a preview, a dry run of prune) that
/// reach the stem, in flight at once over all of them: however many such calls arrive, the
/// rest wait in the keeper, and root's and approvers' requests never queue behind them.
pub const MAX_LOOKER_REQUESTS: usize = 8;

/// The journal's own thread; a keeper whose thread cannot start answers every call with
/// the journal's error (and says why in the log).
fn spawn_journal(journal: Journal) -> Actor<Journal> {
    Actor::spawn(JOURNAL_THREAD, journal).unwrap_or_else(|e| {
        tracing::error!("cannot start the journal's thread: {e}");
        Actor::stopped(JOURNAL_THREAD)
    })
}

/// The name of the thread that owns the journal.
const JOURNAL_THREAD: &str = "keeper-journal";

impl Keeper {
    pub fn new(journal: Journal, authority: Authority) -> Keeper {
        Keeper {
            journal: spawn_journal(journal),
            stem: StemClient::new(),
            authority,
            sets: tokio::sync::Mutex::new(()),
            reconciled: tokio::sync::Mutex::new(false),
            policy: crate::retention::Policy::default(),
            refusals: Mutex::new(refusals::Limiter::new(Instant::now())),
            previews: preview::Previews::new(),
            looker_requests: tokio::sync::Semaphore::new(MAX_LOOKER_REQUESTS),
            copies: layout::copies::CopiesConfig::default(),
            copy_acts: copies::TargetActs::default(),
            opens: open::OpenState::new(),
            list_cache: list::ListCache::default(),
        }
    }

    /// The stem client (to give it the bus connection).
    pub fn stem(&self) -> &StemClient {
        &self.stem
    }

    /// Run `f` on the journal's thread and wait for it: it blocks (an fsync), so it runs
    /// off the executor that serves the bus, one job at a time, in the order asked.
    async fn journal<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Journal) -> Result<T, JournalError> + Send + 'static,
    ) -> Result<T, KeeperError> {
        match self.journal.run(f).await {
            Ok(answer) => answer.map_err(KeeperError::from),
            Err(_gone) => Err(KeeperError::Journal(
                "the journal's thread stopped after a crash in the keeper; restart tacid-keeper.service".into(),
            )),
        }
    }

    async fn refuse(
        &self,
        asker: &Asker,
        act: Action,
        subject: &str,
        words: &str,
        why: String,
    ) -> KeeperError {
        self.journal_refusal(asker, act, subject, words, &why).await;
        KeeperError::NotAuthorized(why)
    }

    /// Log and journal a refused request, with its subject and the words it was sent
    /// capped; past the caller's allowance, only counted (adr/0016). A journal that cannot
    /// take it is logged, and the refusal stands.
    async fn journal_refusal(
        &self,
        asker: &Asker,
        act: Action,
        subject: &str,
        words: &str,
        why: &str,
    ) {
        self.journal_refusal_of(asker, act, caps::name(subject), words, why)
            .await;
    }

    /// [`Self::journal_refusal`] for a subject the keeper built from names it parsed (a set's
    /// members), capped at what such a subject can be rather than at one name.
    async fn journal_refusal_built(
        &self,
        asker: &Asker,
        act: Action,
        subject: &str,
        words: &str,
        why: &str,
    ) {
        let subject = layout::human::cap(subject, caps::MAX_BUILT_SUBJECT_BYTES);
        self.journal_refusal_of(asker, act, subject, words, why)
            .await;
    }

    async fn journal_refusal_of(
        &self,
        asker: &Asker,
        act: Action,
        subject: std::borrow::Cow<'_, str>,
        words: &str,
        why: &str,
    ) {
        let words = layout::human::cap(words, caps::MAX_WORDS_BYTES);
        let verdict = self
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .decide(
                asker.uid,
                act,
                Instant::now(),
                unix_micros(SystemTime::now()),
            );
        let (row_asker, outcome, key) = match verdict {
            Journalling::Counted => return,
            Journalling::OwnRow => {
                tracing::warn!(uid = asker.uid, user = %asker.name, act = %act, subject = %subject, "refused: {why}");
                (asker.clone(), why.to_owned(), None)
            }
            Journalling::OpenRow(key) => {
                let minutes = refusals::WINDOW.as_secs() / 60;
                let (who, row_asker) = if key.uid == refusals::SEVERAL_CALLERS {
                    (
                        "callers past the keeper's overall allowance".to_owned(),
                        Asker {
                            uid: refusals::SEVERAL_CALLERS,
                            name: format!("several callers, the first {}", asker.name),
                        },
                    )
                } else {
                    (format!("{} (uid {})", asker.name, asker.uid), asker.clone())
                };
                tracing::warn!(
                    uid = asker.uid, user = %asker.name, act = %act, subject = %subject,
                    "refused again and again: {why}; the refusals of {act} from {who} are counted in one journal row for {minutes} minutes, not journalled or logged one by one"
                );
                let outcome = format!(
                    "{why} (this row counts the refusals of {act} from {who} over {minutes} \
                     minutes, in its calls; the subject shown is the first one's)"
                );
                (row_asker, outcome, Some(key))
            }
        };
        let (subject, words) = (subject.into_owned(), words.into_owned());
        let recorded = self
            .journal(move |j| {
                j.request(&row_asker, act, Subject::named(subject))
                    .words_shown(&words)
                    .state(State::Refused)
                    .outcome(&outcome)
                    .begin()
            })
            .await;
        if let Err(e) = &recorded {
            tracing::error!("could not journal a refusal: {}", e.message());
        }
        if let Some(key) = key {
            self.refusals
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .opened(key, recorded.ok());
        }
    }

    /// Write the counts of refusals the journal does not have yet, in one commit; the
    /// daemon calls this every second and when it stops (adr/0016).
    pub async fn flush_refusals(&self) {
        let counts = self
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .to_flush();
        if !counts.is_empty() {
            let rows: Vec<(i64, u64, i64)> = counts
                .iter()
                .map(|f| (f.id, f.calls, f.last_micros))
                .collect();
            if let Err(e) = self.journal(move |j| j.count_refusals(&rows)).await {
                tracing::error!("could not journal the count of refusals: {}", e.message());
                return;
            }
        }
        let closed = self
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .flushed(&counts, Instant::now());
        for c in closed {
            tracing::info!(
                uid = c.key.uid,
                act = %c.key.act,
                row = c.id,
                "{} refusals of {} counted in journal row {}",
                c.calls,
                c.key.act,
                c.id
            );
        }
    }

    /// A turn among the lookers' requests for somebody who may only look (`None`, no turn
    /// needed, for root and approvers).
    async fn looker_turn(&self, may_change: bool) -> Option<tokio::sync::SemaphorePermit<'_>> {
        if may_change {
            return None;
        }
        self.looker_requests.acquire().await.ok()
    }

    fn may_change(&self, uid: u32) -> bool {
        self.authority.decide(uid, Act::Change).is_ok()
    }

    /// Bring the journal in line with the disk; once per start, retried while the stem is away.
    pub async fn reconcile(&self) -> Result<(), KeeperError> {
        let mut done = self.reconciled.lock().await;
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

    /// Apply [`reconcile::plan`] with the stem's list. Call with `sets` held.
    async fn resolve_with_disk(&self) -> Result<(), KeeperError> {
        let disk: Vec<Member> = self
            .stem
            .list()
            .await
            .map_err(stem_error)?
            .into_iter()
            .map(|d| d.member)
            .collect();
        // A bad request file stages nothing: the next boot refuses it.
        let staged = self.stem.staged_or_bad().await.map_err(stem_error)?;
        let staged = staged.request().map(snapshot_names);
        self.journal(move |j| {
            let plan = reconcile::plan(&j.snapshots()?, &j.pending_sets()?, &disk);
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

    /// Read the initrd's outcome and journal it, once per outcome.
    async fn read_outcome(&self) -> Result<(), KeeperError> {
        let Some(o) = self.stem.outcome().await.map_err(stem_error)? else {
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
        };
        let recording = row.clone();
        if self.journal(move |j| j.record_outcome(&recording)).await? {
            tracing::info!(outcome = %row.id, result = outcome_result_text(row.result), request = %row.request, "boot's restore outcome: {}", row.reason);
        }
        Ok(())
    }

    /// Reconcile when that has not happened yet; a failure is only logged (the act that
    /// follows reports the stem's absence itself).
    async fn ensure_reconciled(&self) {
        if let Err(e) = self.reconcile().await {
            tracing::warn!("reconciling journal and disk: {}", e.message());
        }
    }

    /// Settle rows left pending by a stem that went away mid-call, when no set is in flight.
    async fn settle_leftovers(&self) {
        let Ok(_sets) = self.sets.try_lock() else {
            return;
        };
        let pending = self
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
        if let Err(why) = self.authority.decide(uid, Act::Change) {
            let subject = Subject::Set(set.clone()).render();
            return Err(self
                .refuse(&asker, Action::Snapshot, &subject, "", why)
                .await);
        }
        self.ensure_reconciled().await;
        // Below the free-space floor the oldest automatic snapshots go first (adr/0013).
        self.prune_below_floor(uid).await;
        let _one_at_a_time = self.sets.lock().await;
        // Sets left pending by an earlier failure are settled before a new one starts, so the
        // disk can tell them apart.
        if !self.journal(|j| j.pending_sets()).await?.is_empty() {
            self.resolve_with_disk().await?;
        }
        let decided = started.elapsed();
        let id = self
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
        match self.stem.take_set(&names).await {
            Ok(members) => {
                let taken = started.elapsed();
                test_pause("set-taken").await;
                let outcome = format!(
                    "complete: {}",
                    members
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                self.journal({
                    let (members, outcome) = (members.clone(), outcome.clone());
                    move |j| j.complete_set(id, &members, &outcome)
                })
                .await?;
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
                    })
                    .collect();
                Ok(SnapshotSet {
                    set_id: id,
                    snapshots,
                })
            }
            Err(e) => {
                // The stem's take_set is all or nothing; if it went away mid-set, the disk
                // says what exists, now or at the next reconciliation.
                match &e {
                    StemError::Refused { .. } => {
                        let outcome = format!("failed: {e}");
                        self.journal(move |j| j.fail_set(id, &[], &outcome)).await?;
                    }
                    _ => {
                        if let Err(again) = self.resolve_with_disk().await {
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

    /// Find a snapshot on disk by name.
    async fn find(
        &self,
        name: &SnapshotName,
    ) -> Result<crate::stem_client::DiskSnapshot, KeeperError> {
        let text = name.to_string();
        self.stem
            .list()
            .await
            .map_err(stem_error)?
            .into_iter()
            .find(|d| d.member.name == text)
            .ok_or_else(|| {
                KeeperError::NoSuchSnapshot(format!(
                    "there is no snapshot named {text}; see `tacid data list`"
                ))
            })
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
        if let Err(why) = self.authority.decide(uid, Act::Change) {
            return Err(self
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
        self.journal({
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
        if let Err(why) = self.authority.decide(uid, Act::Change) {
            return Err(self
                .refuse(&asker, Action::Restore, name, words_shown, why)
                .await);
        }
        let snap = parse_snapshot(name)?;
        let since = unix_micros(SystemTime::now() - CONSENT_WINDOW);
        // Words longer than any the keeper shows were not shown; they are not compared.
        let shown = if words_shown.len() > caps::MAX_WORDS_BYTES {
            None
        } else {
            self.journal(move |j| j.words_shown(uid, &Subject::restore(snap), since))
                .await?
        };
        if shown.as_deref() != Some(words_shown) {
            let why = format!(
                "these are not the words the keeper showed you for {name} in the last {} minutes; \
                 run `tacid data restore {name}` again, read what it costs, then add --yes",
                CONSENT_WINDOW.as_secs() / 60
            );
            // A refused request is journalled as refused, with the words given (adr/0011).
            self.journal_refusal(&asker, Action::Restore, name, words_shown, &why)
                .await;
            return Err(KeeperError::WordsNotShown(why));
        }
        let id = self
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
        match self.stem.stage_restore(name).await {
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
                self.journal({
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
                self.settle_after_stem_error(id, &e).await?;
                Err(stem_error(e))
            }
        }
    }

    /// Record how a restore or cancel ended when the stem did not answer yes. When it may
    /// have acted (it went away mid-call), the row stays pending and the disk settles it.
    async fn settle_after_stem_error(&self, id: i64, e: &StemError) -> Result<(), KeeperError> {
        match e {
            StemError::Refused { .. } | StemError::NotRunning => {
                // The request was synced before the stem was asked; the disk settles it.
                let outcome = format!("failed: {e}");
                self.journal(move |j| j.unsynced(|j| j.finish(id, State::Failed, &outcome)))
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

    /// Withdraw the staged restore.
    pub async fn cancel(&self, uid: u32) -> Result<Cancelled, KeeperError> {
        let asker = Authority::asker(uid);
        if let Err(why) = self.authority.decide(uid, Act::Change) {
            return Err(self.refuse(&asker, Action::Cancel, "", "", why).await);
        }
        // Synced before the stem acts: the stem makes a withdrawal durable before it answers,
        // and the record of who withdrew must never be later than that (adr/0011).
        let id = self
            .journal({
                let asker = asker.clone();
                move |j| j.request(&asker, Action::Cancel, Subject::Nothing).begin()
            })
            .await?;
        test_pause("cancel-pending").await;
        let withdrawn = self.stem.withdraw().await;
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
                self.journal({
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
            }) => match self.stem.discard_bad_request().await {
                Ok(Some(why)) => {
                    let message = format!(
                        "removed a bad restore request file ({why}); no restore was staged, \
                             nothing else changed"
                    );
                    self.journal({
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
                    self.settle_after_stem_error(id, &e).await?;
                    Err(stem_error(e))
                }
            },
            Err(e) => {
                self.settle_after_stem_error(id, &e).await?;
                Err(stem_error(e))
            }
        }
    }

    /// Cancel's answer when nothing was staged: journalled, nothing changed.
    async fn nothing_to_cancel(&self, id: i64) -> Result<Cancelled, KeeperError> {
        let message = "no restore was staged; nothing changed".to_owned();
        self.journal({
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
        let _turn = self.looker_turn(self.may_change(uid)).await;
        self.ensure_reconciled().await;
        self.settle_leftovers().await;
        let staged = self.stem.staged_or_bad().await;
        let stem_running = !matches!(staged, Err(StemError::NotRunning | StemError::WentAway));
        if stem_running {
            if let Err(e) = self.read_outcome().await {
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
                self.journal(move |j| j.staging_of(&names)).await?
            }
            None => None,
        };
        let (outcome, unknown, failed) = self
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
        let path = self.journal(|j| Ok(j.path().display().to_string())).await?;
        let space = if stem_running {
            self.stem.free_space().await.ok()
        } else {
            None
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
            floor_bytes: self.policy.floor_bytes,
            hard_floor_bytes: space.map(|s| s.hard_floor_bytes).unwrap_or_default(),
            deletions_pending: space.map(|s| s.deletions_pending).unwrap_or_default(),
            staged_problem,
        })
    }
}
