//! The journal's side of copies off the disk: every copy to a target, every fetch
//! from one and every deletion on one, with who asked or which rule, the parent an
//! incremental copy was sent against, the bytes sent, and the failure's reason; and what
//! each target held, verified, when the keeper last looked.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use rusqlite::params;

use super::{Action, Asker, CopyAction, Journal, JournalError, Member, State, PRESENT};
use layout::human::unix_micros as to_micros;

/// How an act on a target ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyEnd {
    /// `complete`, `failed` or `refused`.
    pub state: State,
    /// The sentence journalled as the outcome (a failure's reason, capped by the caller).
    pub outcome: String,
    /// The parent an incremental copy or fetch was sent against; empty for a full send.
    pub parent: String,
    pub bytes: u64,
    /// A copy verified on the target: its received UUID (the source snapshot's UUID).
    pub received_uuid: Option<String>,
}

/// One act on a target, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyRow {
    pub id: i64,
    pub uid: u32,
    pub user_name: String,
    pub action: Action,
    /// The snapshot (or copy) acted on.
    pub subject: String,
    pub target: String,
    /// Empty when a person asked; else the rule (`timer of usb`, `retention of usb`).
    pub rule: String,
    /// Why, in words (a retention deletion's rule in words).
    pub reason: String,
    pub parent: String,
    pub bytes: u64,
    pub state: State,
    pub outcome: String,
}

impl Journal {
    /// Record an act on a target before asking the stem; its id. Committed with its own
    /// fsync: a copy may take hours, and a keeper killed meanwhile leaves the row for the
    /// next act on that target to settle from what the target holds.
    pub fn begin_copy(
        &self,
        asker: &Asker,
        action: CopyAction,
        target: &str,
        name: &str,
        rule: &str,
        reason: &str,
    ) -> Result<i64, JournalError> {
        self.conn
            .execute(
                "INSERT INTO requests (asked_micros, uid, user_name, action, subject, reason,
                     rule, target, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    to_micros(SystemTime::now()),
                    i64::from(asker.uid),
                    asker.name,
                    action.action(),
                    name,
                    reason,
                    rule,
                    target,
                    State::Pending
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Record how an act on a target ended, and what the target now holds, in one commit.
    pub fn finish_copy(&mut self, id: i64, end: &CopyEnd) -> Result<(), JournalError> {
        let sq = super::sqlite_error(&self.path);
        let now = to_micros(SystemTime::now());
        let tx = self.conn.transaction().map_err(sq)?;
        let (action, target, name): (Action, String, String) = tx
            .query_row(
                "SELECT action, target, subject FROM requests WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(sq)?;
        tx.execute(
            "UPDATE requests SET state = ?2, outcome = ?3, parent = ?4, bytes = ?5,
                 finished_micros = ?6 WHERE id = ?1",
            params![
                id,
                end.state,
                end.outcome,
                end.parent,
                i64::try_from(end.bytes).unwrap_or(i64::MAX),
                now
            ],
        )
        .map_err(sq)?;
        if end.state == State::Complete {
            match (CopyAction::of(action), &end.received_uuid) {
                (Some(CopyAction::Copy), Some(uuid)) => {
                    tx.execute(
                        "INSERT INTO copies (target, name, received_uuid, verified_micros)
                         VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT(target, name) DO UPDATE SET
                             received_uuid = excluded.received_uuid,
                             verified_micros = excluded.verified_micros",
                        params![target, name, uuid, now],
                    )
                    .map_err(sq)?;
                }
                (Some(CopyAction::DeleteCopy), _) => {
                    tx.execute(
                        "DELETE FROM copies WHERE target = ?1 AND name = ?2",
                        params![target, name],
                    )
                    .map_err(sq)?;
                }
                _ => {}
            }
        }
        tx.commit().map_err(sq)
    }

    /// What `target` holds, verified, as the stem just listed it: the keeper's record of the
    /// target is replaced by it, and acts on the target left pending (their answer never
    /// reached the keeper: it stopped, or the call was lost) are settled by it: a copy is
    /// complete when the target holds it, a deletion when it does not, a fetch when the
    /// local store holds a snapshot of that name that no other request made (see
    /// [`Journal::fetched_by`]; a later fetch of the same name owns what it fetched).
    /// `held`: `(name, received UUID)`; `local`: the store's snapshots; `in_flight`: rows of
    /// acts this keeper is running (never settled here); `started_micros`: when this keeper
    /// started (a row older than that was left by a keeper that stopped).
    pub fn record_target_listing(
        &mut self,
        target: &str,
        held: &[(String, String)],
        local: &[Member],
        in_flight: &BTreeSet<i64>,
        started_micros: i64,
    ) -> Result<(), JournalError> {
        let sq = super::sqlite_error(&self.path);
        let now = to_micros(SystemTime::now());
        let tx = self.conn.transaction().map_err(sq)?;
        tx.execute("DELETE FROM copies WHERE target = ?1", [target])
            .map_err(sq)?;
        for (name, uuid) in held {
            tx.execute(
                "INSERT OR REPLACE INTO copies (target, name, received_uuid, verified_micros)
                 VALUES (?1, ?2, ?3, ?4)",
                params![target, name, uuid, now],
            )
            .map_err(sq)?;
        }
        let on_target: BTreeSet<&str> = held.iter().map(|(n, _)| n.as_str()).collect();
        let pending: Vec<(i64, Action, String, i64)> = {
            let mut stmt = tx
                .prepare(
                    "SELECT id, action, subject, asked_micros FROM requests
                     WHERE target = ?1 AND state = ?2 ORDER BY id",
                )
                .map_err(sq)?;
            let rows = stmt
                .query_map(params![target, State::Pending], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .map_err(sq)?;
            rows.collect::<Result<_, _>>().map_err(sq)?
        };
        for (id, action, name, asked) in pending {
            // An act still running is this keeper's to settle when it ends.
            if in_flight.contains(&id) {
                continue;
            }
            let mut fetched = None;
            let done = match CopyAction::of(action) {
                Some(CopyAction::Copy) => on_target.contains(name.as_str()),
                Some(CopyAction::DeleteCopy) => !on_target.contains(name.as_str()),
                Some(CopyAction::Fetch) => match local.iter().find(|m| m.name == name) {
                    Some(m) if fetched_by_tx(&tx, id, m).map_err(sq)? => {
                        fetched = Some(m);
                        true
                    }
                    _ => false,
                },
                None => continue,
            };
            let restarted = asked < started_micros;
            let (st, outcome) = match (done, restarted) {
                (true, true) => (
                    State::Complete,
                    "complete (found done after the keeper restarted)",
                ),
                (true, false) => (
                    State::Complete,
                    "complete (found done when the target was next listed; the stem's answer \
                     never reached the keeper)",
                ),
                (false, true) => (
                    State::Failed,
                    "failed: the keeper stopped before the stem answered, and it is not done; \
                     the next run tries again",
                ),
                (false, false) => (
                    State::Failed,
                    "failed: the stem's answer never reached the keeper, and it is not done; \
                     the next run tries again",
                ),
            };
            tx.execute(
                "UPDATE requests SET state = ?2, outcome = ?3, finished_micros = ?4 WHERE id = ?1",
                params![id, st, outcome, now],
            )
            .map_err(sq)?;
            if let Some(m) = fetched {
                record_fetched_tx(&tx, id, m).map_err(sq)?;
            }
        }
        tx.commit().map_err(sq)
    }

    /// Whether the store's snapshot `m` can be what the fetch `id` received: no journal row
    /// says another request made this very snapshot (its name and UUID). A name fetched
    /// twice, the first attempt cut short, is the second's; one taken here is its set's.
    pub fn fetched_by(&self, id: i64, m: &Member) -> Result<bool, JournalError> {
        fetched_by_tx(&self.conn, id, m).map_err(|e| self.err(e))
    }

    /// A snapshot received back from a target: recorded as made by the fetch `id` (its row
    /// says who fetched it and from where), present.
    pub fn record_fetched(&self, id: i64, m: &Member) -> Result<(), JournalError> {
        record_fetched_tx(&self.conn, id, m).map_err(|e| self.err(e))
    }

    /// For each snapshot name, the targets the keeper last knew to hold a verified copy of
    /// it, in name order.
    pub fn copies_by_snapshot(&self) -> Result<BTreeMap<String, Vec<String>>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name, target FROM copies ORDER BY name, target")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for row in rows {
            let (name, target) = row.map_err(|e| self.err(e))?;
            out.entry(name).or_default().push(target);
        }
        Ok(out)
    }

    /// Every act on a target, oldest first.
    pub fn copy_requests(&self) -> Result<Vec<CopyRow>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, uid, user_name, action, subject, target, rule, reason, parent,
                        bytes, state, outcome
                 FROM requests WHERE action IN (?1, ?2, ?3) ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(
                params![Action::Copy, Action::Fetch, Action::DeleteCopy],
                |r| {
                    Ok(CopyRow {
                        id: r.get(0)?,
                        uid: r.get::<_, i64>(1)? as u32,
                        user_name: r.get(2)?,
                        action: r.get(3)?,
                        subject: r.get(4)?,
                        target: r.get(5)?,
                        rule: r.get(6)?,
                        reason: r.get(7)?,
                        parent: r.get(8)?,
                        bytes: r.get::<_, i64>(9)?.max(0) as u64,
                        state: r.get(10)?,
                        outcome: r.get(11)?,
                    })
                },
            )
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

fn fetched_by_tx(conn: &rusqlite::Connection, id: i64, m: &Member) -> rusqlite::Result<bool> {
    let other: i64 = conn.query_row(
        "SELECT COUNT(*) FROM snapshots
         WHERE name = ?1 AND uuid = ?2 AND request_id IS NOT NULL AND request_id != ?3",
        params![m.name, m.uuid, id],
        |r| r.get(0),
    )?;
    Ok(other == 0)
}

fn record_fetched_tx(conn: &rusqlite::Connection, id: i64, m: &Member) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO snapshots (name, uuid, of_subvolume, taken_micros, request_id, state, seen_micros)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(name) DO UPDATE SET request_id = excluded.request_id,
             uuid = excluded.uuid, state = excluded.state, gone_micros = NULL",
        params![
            m.name,
            m.uuid,
            m.of_subvolume,
            m.taken_micros,
            id,
            PRESENT,
            to_micros(SystemTime::now())
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Asker {
        Asker {
            uid: 1000,
            name: "alice".into(),
        }
    }

    /// Alice asks for `action` of `name` on `target`, by hand (no rule, no reason): its id.
    fn alice_asks(j: &Journal, action: CopyAction, target: &str, name: &str) -> i64 {
        j.begin_copy(&alice(), action, target, name, "", "")
            .unwrap()
    }

    /// The state of the request `id`, as journalled now.
    fn state_of(j: &Journal, id: i64) -> State {
        let rows = j.copy_requests().unwrap();
        rows.iter().find(|r| r.id == id).unwrap().state
    }

    const A: &str = "@home.2026-12-01T140200.123456Z";
    const B: &str = "@home.2026-12-02T140200.123456Z";

    #[test]
    fn a_copy_is_journalled_with_its_parent_and_bytes_and_recorded_as_held() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.sqlite")).unwrap();
        assert_eq!(j.schema_version().unwrap(), super::super::SCHEMA_VERSION);
        let id = alice_asks(&j, CopyAction::Copy, "usb", B);
        assert_eq!(j.copy_requests().unwrap()[0].state, State::Pending);
        j.finish_copy(
            id,
            &CopyEnd {
                state: State::Complete,
                outcome: "copied".into(),
                parent: A.into(),
                bytes: 4096,
                received_uuid: Some("u-b".into()),
            },
        )
        .unwrap();
        let row = &j.copy_requests().unwrap()[0];
        assert_eq!(
            (row.action, row.target.as_str(), row.parent.as_str()),
            (Action::Copy, "usb", A)
        );
        assert_eq!((row.bytes, row.state), (4096, State::Complete));
        assert_eq!(j.copies_by_snapshot().unwrap()[B], vec!["usb".to_owned()]);

        // A failed copy records its reason and holds nothing.
        let id = j
            .begin_copy(&alice(), CopyAction::Copy, "usb", A, "timer of usb", "")
            .unwrap();
        j.finish_copy(
            id,
            &CopyEnd {
                state: State::Failed,
                outcome: "failed: the target is full".into(),
                parent: String::new(),
                bytes: 0,
                received_uuid: None,
            },
        )
        .unwrap();
        assert!(!j.copies_by_snapshot().unwrap().contains_key(A));
        let row = &j.copy_requests().unwrap()[1];
        assert_eq!(row.rule, "timer of usb");
        assert!(row.outcome.contains("full"));

        // A deletion on the target takes the copy off the record.
        let id = j
            .begin_copy(
                &alice(),
                CopyAction::DeleteCopy,
                "usb",
                B,
                "retention of usb",
                "",
            )
            .unwrap();
        j.finish_copy(
            id,
            &CopyEnd {
                state: State::Complete,
                outcome: "deleted".into(),
                parent: String::new(),
                bytes: 0,
                received_uuid: None,
            },
        )
        .unwrap();
        assert!(j.copies_by_snapshot().unwrap().is_empty());
    }

    #[test]
    fn a_listing_corrects_the_record_and_settles_what_a_stopped_keeper_left() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.sqlite")).unwrap();
        let copied = alice_asks(&j, CopyAction::Copy, "usb", A);
        let lost = alice_asks(&j, CopyAction::Copy, "usb", B);
        let elsewhere = alice_asks(&j, CopyAction::Copy, "offsite", B);
        let fetched = alice_asks(&j, CopyAction::Fetch, "usb", A);
        let local = [member(A, "u-a-fetched")];
        j.record_target_listing(
            "usb",
            &[(A.into(), "u-a".into())],
            &local,
            &BTreeSet::new(),
            i64::MAX,
        )
        .unwrap();
        let st = |id: i64| state_of(&j, id);
        assert_eq!(st(copied), "complete");
        assert_eq!(st(lost), "failed");
        assert_eq!(
            st(elsewhere),
            "pending",
            "another target's rows wait for it"
        );
        assert_eq!(st(fetched), "complete");
        assert_eq!(j.copies_by_snapshot().unwrap()[A], vec!["usb".to_owned()]);
        // The target lost the copy (deleted by hand): the record follows.
        j.record_target_listing("usb", &[], &local, &BTreeSet::new(), i64::MAX)
            .unwrap();
        assert!(j.copies_by_snapshot().unwrap().is_empty());
        let row = |id: i64| {
            j.copy_requests()
                .unwrap()
                .into_iter()
                .find(|r| r.id == id)
                .unwrap()
        };
        assert!(row(copied).outcome.contains("after the keeper restarted"));
        // The fetch found done is recorded as what that fetch made.
        let snaps = j.snapshots().unwrap();
        let a = snaps.iter().find(|s| s.name == A).unwrap();
        assert_eq!(a.uuid, "u-a-fetched");
    }

    fn member(name: &str, uuid: &str) -> Member {
        Member {
            name: name.into(),
            uuid: uuid.into(),
            of_subvolume: "@home".into(),
            taken_micros: 1,
        }
    }

    #[test]
    fn a_fetch_cut_short_is_not_settled_by_a_later_fetch_of_the_same_name() {
        // Fetch A, the stem dies (the row is left pending); fetch A again, complete; then a
        // listing: the store's A is the second fetch's, so the first did not happen.
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.sqlite")).unwrap();
        let first = alice_asks(&j, CopyAction::Fetch, "usb", A);
        let second = alice_asks(&j, CopyAction::Fetch, "usb", A);
        let fetched = member(A, "u-second");
        j.finish_copy(
            second,
            &CopyEnd {
                state: State::Complete,
                outcome: "fetched".into(),
                parent: String::new(),
                bytes: 11 << 20,
                received_uuid: None,
            },
        )
        .unwrap();
        j.record_fetched(second, &fetched).unwrap();
        assert!(!j.fetched_by(first, &fetched).unwrap());
        assert!(j.fetched_by(second, &fetched).unwrap());
        // This keeper has run all along (started before both rows).
        j.record_target_listing(
            "usb",
            &[(A.into(), "u-a".into())],
            std::slice::from_ref(&fetched),
            &BTreeSet::new(),
            0,
        )
        .unwrap();
        let rows = j.copy_requests().unwrap();
        let first_row = rows.iter().find(|r| r.id == first).unwrap();
        assert_eq!(first_row.state, "failed", "{first_row:?}");
        assert!(
            !first_row.outcome.contains("restarted"),
            "the keeper never restarted: {first_row:?}"
        );
        let complete = rows
            .iter()
            .filter(|r| r.action == "fetch" && r.state == "complete")
            .count();
        assert_eq!(complete, 1, "{rows:#?}");
        assert_eq!(
            rows.iter().find(|r| r.id == second).unwrap().bytes,
            11 << 20
        );
    }

    #[test]
    fn a_listing_leaves_an_act_still_running_pending() {
        // Anybody may list a target while an approver's copy runs: the listing must not
        // journal that copy as failed by a stopped keeper.
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.sqlite")).unwrap();
        let running = alice_asks(&j, CopyAction::Copy, "usb", B);
        let left = alice_asks(&j, CopyAction::Copy, "usb", A);
        j.record_target_listing("usb", &[], &[], &[running].into(), i64::MAX)
            .unwrap();
        let st = |id: i64| state_of(&j, id);
        assert_eq!(st(running), "pending");
        assert_eq!(st(left), "failed");
    }
}
