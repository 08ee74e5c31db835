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
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use layout::SnapshotName;

use super::{parse_snapshot, restorable_paths, Keeper, PREVIEW_COUNT_LIMIT};
use crate::authority::Authority;
use crate::journal::{action, state};
use crate::wire::{KeeperError, RestorePreview, SetRestorePreview};
use crate::words::{self, from_micros};

/// Counts for people who may only look, in flight at once over all of them.
pub const MAX_LOOKER_COUNTS: usize = 2;

/// Past this many callers, those with no preview in flight are forgotten.
const REMEMBERED_CALLERS: usize = 256;

/// The last preview answered in a caller's turn.
#[derive(Debug)]
pub(super) struct Answered {
    /// What was asked: a snapshot's name, or a set and its members asked for.
    pub(super) key: String,
    pub(super) finished: Instant,
    pub(super) answer: Answer,
}

/// A preview's answer, of one snapshot or of a set.
#[derive(Debug)]
pub(super) enum Answer {
    One(Result<RestorePreview, KeeperError>),
    Set(Result<SetRestorePreview, KeeperError>),
}

pub(super) type Turn = Arc<tokio::sync::Mutex<Option<Answered>>>;

/// Each caller's turn, and the counts of lookers in flight.
#[derive(Debug)]
pub(super) struct Previews {
    turns: Mutex<HashMap<u32, Turn>>,
    pub(super) lookers: tokio::sync::Semaphore,
}

impl Previews {
    pub(super) fn new() -> Previews {
        Previews {
            turns: Mutex::new(HashMap::new()),
            lookers: tokio::sync::Semaphore::new(MAX_LOOKER_COUNTS),
        }
    }

    pub(super) fn turn(&self, uid: u32) -> Turn {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if turns.len() > REMEMBERED_CALLERS {
            turns.retain(|_, t| Arc::strong_count(t) > 1);
        }
        turns.entry(uid).or_default().clone()
    }
}

impl Keeper {
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
        let turn = self.previews.turn(uid);
        let arrived = Instant::now();
        let mut last = turn.lock().await;
        if let Some(Answered {
            key,
            finished,
            answer: Answer::One(answer),
        }) = last.as_ref()
        {
            // Answered while this call waited for its turn: the same question, just asked.
            if key == name && *finished >= arrived {
                return answer.clone();
            }
        }
        let answer = self.preview_now(uid, &snap).await;
        *last = Some(Answered {
            key: name.to_owned(),
            finished: Instant::now(),
            answer: Answer::One(answer.clone()),
        });
        answer
    }

    /// One preview, in the caller's turn.
    async fn preview_now(
        &self,
        uid: u32,
        snap: &SnapshotName,
    ) -> Result<RestorePreview, KeeperError> {
        let name = snap.to_string();
        let sub = snap.subvolume();
        let may_confirm = self.may_change(uid);
        let disk = {
            let _turn = self.looker_turn(may_confirm).await;
            self.find(snap).await?
        };
        let words = self
            .restore_words(snap, disk.member.taken_micros, may_confirm)
            .await;
        if may_confirm {
            let asker = Authority::asker(uid);
            self.journal(|j| {
                j.begin(
                    &asker,
                    action::RESTORE_PREVIEW,
                    &name,
                    "",
                    false,
                    &words,
                    state::SHOWN,
                    "shown; nothing changed",
                )
            })?;
        }
        Ok(RestorePreview {
            snapshot: name.clone(),
            of: sub.to_string(),
            of_path: sub.display_path().to_owned(),
            taken_micros: disk.member.taken_micros,
            words,
            already_staged: disk.staged,
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
        let (taken, now) = (from_micros(taken_micros), SystemTime::now());
        match self.preview_count(snap, may_confirm).await {
            Some(counts) if may_confirm => {
                words::restore_words_counted(sub.display_path(), taken, now, &counts)
            }
            Some(counts) => {
                words::restore_words_counted_at_last_commit(sub.display_path(), taken, now, &counts)
            }
            None => words::restore_words(sub.display_path(), taken, now),
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
            self.stem
                .changes_since(&name, PREVIEW_COUNT_LIMIT, false)
                .await
        } else {
            let started = Instant::now();
            let Ok(Ok(_turn)) =
                tokio::time::timeout(PREVIEW_COUNT_LIMIT, self.previews.lookers.acquire()).await
            else {
                return uncounted(&"other previews were being counted");
            };
            self.stem
                .changes_since_last_commit(
                    &name,
                    PREVIEW_COUNT_LIMIT.saturating_sub(started.elapsed()),
                )
                .await
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
