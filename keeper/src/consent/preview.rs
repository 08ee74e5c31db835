//! Restore previews (adr/0011, adr/0012), and why they cannot load the machine (adr/0016).
//!
//! Anybody may preview, and a preview counts what changed since the snapshot. So:
//! - **One at a time per caller.** A caller's previews take turns; one that arrives while
//!   the same caller's preview of the same snapshot is being answered is given that answer.
//! - **Lookers never make the stem commit.** For people who may not confirm, the stem counts
//!   what the filesystem's last commit holds (`ChangesSinceLastCommit`), at most
//!   [`MAX_LOOKER_COUNTS`] such counts at a time over all of them; a preview that cannot
//!   start its count within its time limit is answered without counts.
//! - **Counts are reused.** The stem gives a count again while the live subvolume's
//!   generation has not moved, so a repeated preview costs a list and a lookup.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use layout::SnapshotName;

use super::{parse_snapshot, stem_error, Consent, PREVIEW_COUNT_LIMIT};
use crate::authority::Authority;
use crate::journal::{Action, State, Subject};
use crate::wire::{KeeperError, RestorePreview, SetRestorePreview};
use crate::words;
use crate::words::restorable_paths;
use layout::human::from_unix_micros;

/// Counts for people who may only look, in flight at once over all of them.
pub const MAX_LOOKER_COUNTS: usize = 2;

/// Past this many callers, those with no preview in flight are forgotten.
const REMEMBERED_CALLERS: usize = 256;

/// The last preview answered in a caller's turn.
#[derive(Debug)]
struct Answered {
    /// What was asked: a snapshot's name, or a set and its members asked for.
    key: String,
    finished: Instant,
    answer: Answer,
}

/// A preview's answer, of one snapshot or of a set.
#[derive(Debug)]
pub(super) enum Answer {
    One(Result<RestorePreview, KeeperError>),
    Set(Result<SetRestorePreview, KeeperError>),
}

/// What a caller's turn keeps of an answer, to give it again.
pub(super) trait KeptAnswer: Clone {
    fn kept(self) -> Answer;
    /// This kind of answer, if `answer` is one.
    fn again(answer: &Answer) -> Option<Self>;
}

impl KeptAnswer for Result<RestorePreview, KeeperError> {
    fn kept(self) -> Answer {
        Answer::One(self)
    }
    fn again(answer: &Answer) -> Option<Self> {
        match answer {
            Answer::One(a) => Some(a.clone()),
            Answer::Set(_) => None,
        }
    }
}

impl KeptAnswer for Result<SetRestorePreview, KeeperError> {
    fn kept(self) -> Answer {
        Answer::Set(self)
    }
    fn again(answer: &Answer) -> Option<Self> {
        match answer {
            Answer::Set(a) => Some(a.clone()),
            Answer::One(_) => None,
        }
    }
}

type Turn = Arc<tokio::sync::Mutex<Option<Answered>>>;

/// Each caller's turn, and the counts of lookers in flight.
#[derive(Debug)]
pub(super) struct Previews {
    turns: Mutex<HashMap<u32, Turn>>,
    lookers: tokio::sync::Semaphore,
}

impl Previews {
    pub(super) fn new() -> Previews {
        Previews {
            turns: Mutex::new(HashMap::new()),
            lookers: tokio::sync::Semaphore::new(MAX_LOOKER_COUNTS),
        }
    }

    fn turn(&self, uid: u32) -> Turn {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if turns.len() > REMEMBERED_CALLERS {
            turns.retain(|_, t| Arc::strong_count(t) > 1);
        }
        turns.entry(uid).or_default().clone()
    }

    /// `answer` for `uid`'s preview of `key` (a snapshot, or a set and its members asked for),
    /// in that caller's turn: one at a time per caller; a call that arrived while the same
    /// caller's preview of the same thing was being answered is given that answer, and
    /// `answer` is not run for it.
    pub(super) async fn in_turn<T, F, Fut>(&self, uid: u32, key: &str, answer: F) -> T
    where
        T: KeptAnswer,
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let turn = self.turn(uid);
        let arrived = Instant::now();
        let mut last = turn.lock().await;
        if let Some(a) = last.as_ref() {
            // Answered while this call waited for its turn: the same question, just asked.
            if a.key == key && a.finished >= arrived {
                if let Some(again) = T::again(&a.answer) {
                    return again;
                }
            }
        }
        let answer = answer().await;
        *last = Some(Answered {
            key: key.to_owned(),
            finished: Instant::now(),
            answer: answer.clone().kept(),
        });
        answer
    }

    /// `count`, in one of the [`MAX_LOOKER_COUNTS`] turns lookers' counts share, given what
    /// is left of `limit`; `None` when no turn came within `limit`.
    async fn looker_count<T, F, Fut>(&self, limit: Duration, count: F) -> Option<T>
    where
        F: FnOnce(Duration) -> Fut,
        Fut: Future<Output = T>,
    {
        let started = Instant::now();
        let Ok(Ok(_turn)) = tokio::time::timeout(limit, self.lookers.acquire()).await else {
            return None;
        };
        Some(count(limit.saturating_sub(started.elapsed())).await)
    }
}

impl Consent {
    /// What restoring `name` would do, in words. Changes nothing on disk; the words shown
    /// to somebody who may confirm are journalled, so the confirmation can be checked.
    pub async fn restore_preview(
        &self,
        uid: u32,
        name: &str,
    ) -> Result<RestorePreview, KeeperError> {
        let snap = parse_snapshot(name)?;
        let sub = snap.subvolume();
        if !sub.subvolume().restorable {
            return Err(KeeperError::NotAllowedForSubvolume(format!(
                "{} ({sub}) is never put back: its snapshots exist, but restoring it would strand what depends on it; \
                 only {} are put back{}",
                sub.display_path(),
                restorable_paths(),
                // Snapshotted only when asked, never restorable: the store (docs/design.md section 2),
                // which goes back with the system leg.
                if sub.subvolume().snapshotted == layout::Snapshotted::Optional {
                    format!(
                        " (to go back to an older {}, boot an older NixOS generation)",
                        sub.display_path()
                    )
                } else {
                    String::new()
                }
            )));
        }
        self.previews
            .in_turn(uid, name, || self.preview_now(uid, &snap))
            .await
    }

    /// One preview, in the caller's turn.
    async fn preview_now(
        &self,
        uid: u32,
        snap: &SnapshotName,
    ) -> Result<RestorePreview, KeeperError> {
        let name = snap.to_string();
        let sub = snap.subvolume();
        let may_confirm = self.h.may_change(uid);
        let (disk, staged_alone) = {
            let _turn = self.h.looker_turn(may_confirm).await;
            let listed = self.h.stem.list().await.map_err(stem_error)?;
            // "Already staged" is for exactly this restore: a set's request names several
            // snapshots, each shown staged, and staging this one alone would be refused.
            let staged_alone = listed.iter().filter(|d| d.staged).count() == 1;
            let text = snap.to_string();
            let disk = listed
                .into_iter()
                .find(|d| d.member.name == text)
                .ok_or_else(|| {
                    KeeperError::NoSuchSnapshot(format!(
                        "there is no snapshot named {text}; see `tacid data list`"
                    ))
                })?;
            (disk, staged_alone)
        };
        let words = self
            .restore_words(snap, disk.member.taken_micros, may_confirm)
            .await;
        if may_confirm {
            let asker = Authority::asker(uid);
            // Not synced: a preview changes nothing, and words lost to a power cut are only
            // shown again (the consent that quotes them is synced) — adr/0011.
            let (snap, shown) = (*snap, words.clone());
            self.h
                .journal(move |j| {
                    j.unsynced(|j| {
                        j.request(&asker, Action::RestorePreview, Subject::restore(snap))
                            .words_shown(&shown)
                            .state(State::Shown)
                            .outcome("shown; nothing changed")
                            .begin()
                    })
                })
                .await?;
        }
        Ok(RestorePreview {
            snapshot: name.clone(),
            of: sub.to_string(),
            of_path: sub.display_path().to_owned(),
            taken_micros: disk.member.taken_micros,
            words,
            already_staged: disk.staged && staged_alone,
        })
    }

    /// The words of a restore preview: with what changed since counted by the stem, or,
    /// when it cannot count (a snapshot off the live subvolume's history, a stem without
    /// ChangesSince, no turn for a looker's count in time), the words without the counts.
    /// For somebody who may confirm the stem commits first, so every write so far counts;
    /// for a looker it counts what the last commit holds, and the words say so.
    async fn restore_words(
        &self,
        snap: &SnapshotName,
        taken_micros: i64,
        may_confirm: bool,
    ) -> String {
        let sub = snap.subvolume();
        let (taken, now) = (from_unix_micros(taken_micros), SystemTime::now());
        let aside = self.aside().await;
        let path = sub.display_path();
        match self.preview_count(snap, may_confirm).await {
            Some(counts) if may_confirm => {
                words::restore_words_counted(path, taken, now, &counts, aside)
            }
            Some(counts) => {
                words::restore_words_counted_at_last_commit(path, taken, now, &counts, aside)
            }
            None => words::restore_words(path, taken, now, aside),
        }
    }

    /// What the boot will do with what a restore replaces, as far as can be said now: set
    /// aside for retention's days, or, with the disk below the stem's hard floor now, deleted
    /// (adr/0027). The stem's space not known: set aside, the usual case.
    pub(super) async fn aside(&self) -> words::Aside {
        match self.h.stem.free_space().await {
            Ok(s) if s.hard_floor_bytes > 0 && s.free_bytes < s.hard_floor_bytes => {
                words::Aside::BelowFloor {
                    floor_bytes: s.hard_floor_bytes,
                }
            }
            _ => words::Aside::Kept {
                days: self.retention.policy().replaced_days,
            },
        }
    }

    /// What changed since `snap`, counted by the stem for a preview, or `None` (logged) when
    /// it cannot be counted. For somebody who may confirm the stem commits first; for a
    /// looker it counts what the last commit holds, after waiting at most the preview's
    /// limit for a turn among the lookers' counts (adr/0016).
    pub(super) async fn preview_count(
        &self,
        snap: &SnapshotName,
        may_confirm: bool,
    ) -> Option<words::ChangeCounts> {
        let name = snap.to_string();
        let uncounted = |why: &dyn std::fmt::Display| {
            if may_confirm {
                tracing::warn!(snapshot = %name, "the changes since it were not counted: {why}");
            } else {
                tracing::debug!(snapshot = %name, "the changes since it were not counted for a looker: {why}");
            }
            None
        };
        let counted = if may_confirm {
            self.h
                .stem
                .changes_since(&name, PREVIEW_COUNT_LIMIT, false)
                .await
        } else {
            let counted = self
                .previews
                .looker_count(PREVIEW_COUNT_LIMIT, |left| {
                    self.h.stem.changes_since_last_commit(&name, left)
                })
                .await;
            let Some(counted) = counted else {
                return uncounted(&"other previews were being counted");
            };
            counted
        };
        match counted {
            Ok(c) => Some(words::ChangeCounts {
                files_modified: c.files_modified,
                files_added: c.files_added,
                files_removed: c.files_removed,
                directories_added: c.directories_added,
                directories_removed: c.directories_removed,
                bytes_written: c.bytes_written,
                complete: c.complete,
            }),
            Err(e) => uncounted(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The turns and bounds of adr/0016, without a bus: callers' answers are stand-ins that
    //! wait at a gate the test opens, and count how many of them are running at once.

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::Semaphore;

    use super::{Previews, MAX_LOOKER_COUNTS};
    use crate::authority::Authority;
    use crate::handles::{Handles, MAX_LOOKER_REQUESTS};
    use crate::journal::Journal;
    use crate::wire::{KeeperError, RestorePreview};

    /// What adr/0016 promises: at most 2 lookers' counts and 8 lookers' requests at once.
    const ADR_LOOKER_COUNTS: usize = 2;
    const ADR_LOOKER_REQUESTS: usize = 8;
    const _: () = assert!(
        MAX_LOOKER_COUNTS <= ADR_LOOKER_COUNTS,
        "adr/0016 says at most 2"
    );
    const _: () = assert!(
        MAX_LOOKER_REQUESTS <= ADR_LOOKER_REQUESTS,
        "adr/0016 says at most 8"
    );

    /// How many stand-ins are running, the most at once, and how many ran in all.
    #[derive(Debug, Default)]
    struct Probe {
        now: AtomicUsize,
        peak: AtomicUsize,
        runs: AtomicUsize,
    }

    impl Probe {
        fn enter(&self) -> usize {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            self.runs.fetch_add(1, Ordering::SeqCst) + 1
        }
        fn leave(&self) {
            self.now.fetch_sub(1, Ordering::SeqCst);
        }
        fn now(&self) -> usize {
            self.now.load(Ordering::SeqCst)
        }
        fn peak(&self) -> usize {
            self.peak.load(Ordering::SeqCst)
        }
        fn runs(&self) -> usize {
            self.runs.load(Ordering::SeqCst)
        }
    }

    /// A stand-in for what is bounded: enters, waits for the gate, leaves; returns its run.
    async fn stand_in(probe: &Probe, gate: &Semaphore) -> usize {
        let run = probe.enter();
        drop(gate.acquire().await);
        probe.leave();
        run
    }

    /// Lets every spawned task run until it waits (the runtime has one thread).
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    fn preview(snapshot: &str, run: usize) -> RestorePreview {
        RestorePreview {
            snapshot: snapshot.to_owned(),
            of: "@home".to_owned(),
            of_path: "/home".to_owned(),
            taken_micros: 0,
            words: format!("answer {run}"),
            already_staged: false,
        }
    }

    /// `uid`'s preview of `snapshot`, answered by a stand-in.
    fn ask(
        previews: &Arc<Previews>,
        probe: &Arc<Probe>,
        gate: &Arc<Semaphore>,
        uid: u32,
        snapshot: &'static str,
    ) -> tokio::task::JoinHandle<Result<RestorePreview, KeeperError>> {
        let (previews, probe, gate) = (previews.clone(), probe.clone(), gate.clone());
        tokio::spawn(async move {
            previews
                .in_turn(uid, snapshot, || async {
                    Ok(preview(snapshot, stand_in(&probe, &gate).await))
                })
                .await
        })
    }

    #[tokio::test]
    async fn one_preview_in_flight_per_caller_and_those_waiting_are_given_its_answer() {
        let (previews, probe) = (Arc::new(Previews::new()), Arc::new(Probe::default()));
        let gate = Arc::new(Semaphore::new(0));
        let calls: Vec<_> = (0..200)
            .map(|_| ask(&previews, &probe, &gate, 1000, "@home.2025-01-01T00:00:00Z"))
            .collect();
        settle().await;
        assert_eq!(probe.now(), 1, "previews of one caller in flight at once");
        gate.add_permits(1);
        for c in calls {
            let answer = c.await.unwrap().unwrap();
            assert_eq!(answer.words, "answer 1");
        }
        assert_eq!((probe.peak(), probe.runs()), (1, 1));
    }

    #[tokio::test]
    async fn a_callers_previews_of_other_snapshots_take_turns_and_get_their_own_answers() {
        let (previews, probe) = (Arc::new(Previews::new()), Arc::new(Probe::default()));
        let gate = Arc::new(Semaphore::new(0));
        let names = ["@home.2025-01-01T00:00:00Z", "@home.2025-02-01T00:00:00Z"];
        let calls: Vec<_> = (0..20)
            .map(|i| {
                let name = names[i % 2];
                (name, ask(&previews, &probe, &gate, 1000, name))
            })
            .collect();
        settle().await;
        assert_eq!(probe.now(), 1);
        gate.add_permits(1);
        for (name, c) in calls {
            assert_eq!(c.await.unwrap().unwrap().snapshot, name);
        }
        assert_eq!(probe.peak(), 1, "previews of one caller in flight at once");
    }

    #[tokio::test]
    async fn a_preview_asked_after_the_last_was_answered_is_answered_afresh() {
        let (previews, probe) = (Arc::new(Previews::new()), Arc::new(Probe::default()));
        let gate = Arc::new(Semaphore::new(1));
        let name = "@home.2025-01-01T00:00:00Z";
        let first = ask(&previews, &probe, &gate, 1000, name).await.unwrap();
        let second = ask(&previews, &probe, &gate, 1000, name).await.unwrap();
        assert_eq!(
            (first.unwrap().words, second.unwrap().words),
            ("answer 1".to_owned(), "answer 2".to_owned())
        );
    }

    #[tokio::test]
    async fn callers_do_not_wait_for_each_others_turns() {
        let (previews, probe) = (Arc::new(Previews::new()), Arc::new(Probe::default()));
        let gate = Arc::new(Semaphore::new(0));
        let calls: Vec<_> = (0..4)
            .flat_map(|uid| (0..5).map(move |_| uid))
            .map(|uid| {
                ask(
                    &previews,
                    &probe,
                    &gate,
                    1000 + uid,
                    "@home.2025-01-01T00:00:00Z",
                )
            })
            .collect();
        settle().await;
        assert_eq!(
            probe.now(),
            4,
            "one preview in flight for each of 4 callers"
        );
        gate.add_permits(1);
        for c in calls {
            c.await.unwrap().unwrap();
        }
        assert_eq!((probe.peak(), probe.runs()), (4, 4));
    }

    #[tokio::test]
    async fn lookers_counts_are_bounded_over_all_callers_and_one_without_a_turn_is_not_made() {
        let (previews, probe) = (Arc::new(Previews::new()), Arc::new(Probe::default()));
        let gate = Arc::new(Semaphore::new(0));
        let limit = Duration::from_secs(30);
        let counts: Vec<_> = (0..50)
            .map(|_| {
                let (previews, probe, gate) = (previews.clone(), probe.clone(), gate.clone());
                tokio::spawn(async move {
                    previews
                        .looker_count(limit, |left| async move {
                            assert!(left <= limit);
                            stand_in(&probe, &gate).await
                        })
                        .await
                })
            })
            .collect();
        settle().await;
        assert_eq!(probe.now(), MAX_LOOKER_COUNTS, "lookers' counts at once");

        // With every turn taken, a count that cannot start within its limit is not made.
        let late = previews
            .looker_count(Duration::from_millis(20), |_| async { unreachable!() })
            .await;
        assert_eq!(late, None::<()>);

        gate.add_permits(1);
        for c in counts {
            assert!(c.await.unwrap().is_some());
        }
        assert_eq!((probe.peak(), probe.runs()), (MAX_LOOKER_COUNTS, 50));
    }

    #[tokio::test]
    async fn lookers_requests_to_the_stem_are_bounded_over_all_and_approvers_never_wait() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(&dir.path().join("journal.sqlite")).unwrap();
        let keeper = Arc::new(Handles::new(
            journal,
            Authority::new("tacid-no-such-group-in-a-unit-test"),
        ));
        let (looker, root) = (65_534, 0);
        assert!(!keeper.may_change(looker) && keeper.may_change(root));
        let (probe, gate) = (Arc::new(Probe::default()), Arc::new(Semaphore::new(0)));
        let requests: Vec<_> = (0..40)
            .map(|_| {
                let (keeper, probe, gate) = (keeper.clone(), probe.clone(), gate.clone());
                tokio::spawn(async move {
                    let _turn = keeper.looker_turn(keeper.may_change(looker)).await;
                    stand_in(&probe, &gate).await
                })
            })
            .collect();
        settle().await;
        assert_eq!(
            probe.now(),
            MAX_LOOKER_REQUESTS,
            "lookers' requests at once"
        );
        // Root (as any approver) needs no turn, however many lookers wait.
        let turn = tokio::time::timeout(
            Duration::from_millis(20),
            keeper.looker_turn(keeper.may_change(root)),
        )
        .await;
        assert!(matches!(turn, Ok(None)), "root waited for a looker's turn");
        gate.add_permits(1);
        for r in requests {
            r.await.unwrap();
        }
        assert_eq!((probe.peak(), probe.runs()), (MAX_LOOKER_REQUESTS, 40));
    }
}
