//! The journal's side of retention (adr/0013): deletions with the rule or the person that
//! chose them, timeline sets, and snapshots marked to keep.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use layout::SnapshotName;
use rusqlite::params;

use super::{Action, Asker, Journal, JournalError, State, Subject, GONE, PRESENT};
use layout::human::unix_micros as to_micros;

/// A deletion about to be asked of the stem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub name: String,
    /// The rule's code (`pre-switch-sets`, ...), or `person` when somebody asked.
    pub rule: String,
    /// Why, in words.
    pub why: String,
}

/// How one deletion ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionResult {
    pub id: i64,
    pub name: String,
    /// `Err` holds what went wrong.
    pub result: Result<(), String>,
}

impl Journal {
    fn tx_err(&self) -> impl Fn(rusqlite::Error) -> JournalError + '_ {
        move |e| self.err(e)
    }

    /// Record deletions as pending, all in one commit; their ids, in order.
    ///
    /// Like a pending snapshot set (adr/0011), the commit goes to the WAL without its own
    /// fsync; the commit of [`Journal::finish_deletions`], FULL and before any answer, makes
    /// both durable. A power cut in between loses only the pending rows of deletions nobody
    /// was told about; the snapshots' rows then say `present` for what is gone, which the
    /// reconciliation marks gone.
    pub fn begin_deletions(
        &mut self,
        asker: &Asker,
        deletions: &[Deletion],
    ) -> Result<Vec<i64>, JournalError> {
        self.conn
            .execute_batch("PRAGMA synchronous=NORMAL")
            .map_err(|e| self.err(e))?;
        let ids = self.begin_deletions_now(asker, deletions);
        let restored = self
            .conn
            .execute_batch("PRAGMA synchronous=FULL")
            .map_err(|e| self.err(e));
        let ids = ids?;
        restored?;
        Ok(ids)
    }

    /// Record a person's deletion as pending, synced before the stem is asked. The stem
    /// commits a deletion at once, off the request path, so the record of who asked must be
    /// on the disk before the deletion can be; its end then needs no sync of its own: after
    /// a power cut the disk says whether it happened (adr/0011). One fdatasync per delete.
    pub fn begin_deletion_synced(
        &mut self,
        asker: &Asker,
        deletion: &Deletion,
    ) -> Result<i64, JournalError> {
        let ids = self.begin_deletions_now(asker, std::slice::from_ref(deletion))?;
        Ok(ids.first().copied().unwrap_or_default())
    }

    fn begin_deletions_now(
        &mut self,
        asker: &Asker,
        deletions: &[Deletion],
    ) -> Result<Vec<i64>, JournalError> {
        let sq = super::sqlite_error(&self.path);
        let now = to_micros(SystemTime::now());
        let tx = self.conn.transaction().map_err(sq)?;
        let mut ids = Vec::with_capacity(deletions.len());
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO requests (asked_micros, uid, user_name, action, subject, reason,
                         rule, state)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(sq)?;
            for d in deletions {
                insert
                    .execute(params![
                        now,
                        i64::from(asker.uid),
                        asker.name,
                        Action::Delete,
                        d.name,
                        d.why,
                        d.rule,
                        State::Pending
                    ])
                    .map_err(sq)?;
                ids.push(tx.last_insert_rowid());
            }
        }
        tx.commit().map_err(sq)?;
        Ok(ids)
    }

    /// Record how deletions ended, all in one commit; the deleted snapshots are marked gone.
    pub fn finish_deletions(&mut self, results: &[DeletionResult]) -> Result<(), JournalError> {
        let sq = super::sqlite_error(&self.path);
        let now = to_micros(SystemTime::now());
        let tx = self.conn.transaction().map_err(sq)?;
        for r in results {
            let (st, outcome) = match &r.result {
                Ok(()) => (State::Complete, "deleted".to_owned()),
                Err(why) => (State::Failed, format!("failed: {why}")),
            };
            tx.execute(
                "UPDATE requests SET state = ?2, outcome = ?3, finished_micros = ?4 WHERE id = ?1",
                params![r.id, st, outcome, now],
            )
            .map_err(sq)?;
            if r.result.is_ok() {
                tx.execute(
                    "UPDATE snapshots SET state = ?2, gone_micros = ?3 WHERE name = ?1 AND state = ?4",
                    params![r.name, GONE, now, PRESENT],
                )
                .map_err(sq)?;
            }
        }
        tx.commit().map_err(sq)
    }

    /// Deletions left pending (the keeper stopped before the stem answered): `(id, name)`.
    pub fn pending_deletions(&self) -> Result<Vec<(i64, String)>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, subject FROM requests WHERE action = ?1 AND state = ?2 ORDER BY id",
            )
            .map_err(self.tx_err())?;
        let rows = stmt
            .query_map(params![Action::Delete, State::Pending], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(self.tx_err())?;
        rows.collect::<Result<_, _>>().map_err(self.tx_err())
    }

    /// Mark a snapshot set as taken by the timeline timer.
    pub fn mark_timeline(&self, set_id: i64) -> Result<(), JournalError> {
        self.conn
            .execute(
                "UPDATE requests SET timeline = 1 WHERE id = ?1",
                params![set_id],
            )
            .map_err(self.tx_err())?;
        Ok(())
    }

    /// The ids of the sets the timeline timer took.
    pub fn timeline_sets(&self) -> Result<BTreeSet<i64>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM requests WHERE timeline = 1")
            .map_err(self.tx_err())?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(self.tx_err())?;
        rows.collect::<Result<_, _>>().map_err(self.tx_err())
    }

    /// The snapshots marked to keep, with who marked them.
    pub fn keeps(&self) -> Result<BTreeMap<String, String>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name, user_name FROM keeps")
            .map_err(self.tx_err())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.tx_err())?;
        rows.collect::<Result<_, _>>().map_err(self.tx_err())
    }

    /// Mark `name` to keep (or take the mark off), journalled with the person; `false`
    /// when it was already so (the row then says nothing changed).
    pub fn set_keep(
        &mut self,
        asker: &Asker,
        name: &SnapshotName,
        keep: bool,
    ) -> Result<bool, JournalError> {
        let subject = Subject::Snapshot(*name);
        let name = name.to_string();
        let sq = super::sqlite_error(&self.path);
        let now = to_micros(SystemTime::now());
        let tx = self.conn.transaction().map_err(sq)?;
        let marked: bool = tx
            .query_row("SELECT COUNT(*) FROM keeps WHERE name = ?1", [&name], |r| {
                r.get::<_, i64>(0)
            })
            .map_err(sq)?
            > 0;
        let changed = marked != keep;
        let (act, outcome) = match (keep, changed) {
            (true, true) => (Action::Keep, "marked to keep: no rule deletes it"),
            (true, false) => (Action::Keep, "already marked to keep; nothing changed"),
            (false, true) => (
                Action::Unkeep,
                "no longer marked to keep: the retention rules apply to it again",
            ),
            (false, false) => (Action::Unkeep, "was not marked to keep; nothing changed"),
        };
        tx.execute(
            "INSERT INTO requests (asked_micros, uid, user_name, action, subject, reason, state,
                 outcome, finished_micros)
             VALUES (?1, ?2, ?3, ?4, ?5, '', ?6, ?7, ?1)",
            params![
                now,
                i64::from(asker.uid),
                asker.name,
                act,
                subject,
                State::Complete,
                outcome
            ],
        )
        .map_err(sq)?;
        let id = tx.last_insert_rowid();
        if changed && keep {
            tx.execute(
                "INSERT INTO keeps (name, uid, user_name, kept_micros, request_id)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![name, i64::from(asker.uid), asker.name, now, id],
            )
            .map_err(sq)?;
        } else if changed {
            tx.execute("DELETE FROM keeps WHERE name = ?1", [&name])
                .map_err(sq)?;
        }
        tx.commit().map_err(sq)?;
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Asker {
        Asker {
            uid: 0,
            name: "root".into(),
        }
    }

    #[test]
    fn deletions_record_their_rule_and_keeps_their_person() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.sqlite")).unwrap();
        let ds = vec![
            Deletion {
                name: "@home.2026-12-01T140200.123456Z".into(),
                rule: "timeline".into(),
                why: "timeline: not the newest of any ...".into(),
            },
            Deletion {
                name: "@log.2026-12-01T140200.123456Z".into(),
                rule: "person".into(),
                why: "asked by root".into(),
            },
        ];
        let ids = j.begin_deletions(&root(), &ds).unwrap();
        let sync: i64 = j
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2, "left at synchronous=FULL");
        assert_eq!(j.pending_deletions().unwrap().len(), 2);
        j.finish_deletions(&[
            DeletionResult {
                id: ids[0],
                name: ds[0].name.clone(),
                result: Ok(()),
            },
            DeletionResult {
                id: ids[1],
                name: ds[1].name.clone(),
                result: Err("pinned".into()),
            },
        ])
        .unwrap();
        assert!(j.pending_deletions().unwrap().is_empty());
        let rows = j.requests().unwrap();
        assert_eq!(rows[0].state, "complete");
        assert_eq!(rows[0].reason, ds[0].why);
        assert_eq!(rows[1].state, "failed");
        let rule: String = j
            .conn
            .query_row("SELECT rule FROM requests WHERE id = ?1", [ids[0]], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(rule, "timeline");

        let x = SnapshotName::parse("@home.2026-12-01T140200.123456Z").unwrap();
        assert!(j.set_keep(&root(), &x, true).unwrap());
        assert!(!j.set_keep(&root(), &x, true).unwrap());
        assert_eq!(
            j.keeps().unwrap().get(&x.to_string()).map(String::as_str),
            Some("root")
        );
        assert!(j.set_keep(&root(), &x, false).unwrap());
        assert!(j.keeps().unwrap().is_empty());

        j.mark_timeline(ids[0]).unwrap();
        assert!(j.timeline_sets().unwrap().contains(&ids[0]));
    }
}
