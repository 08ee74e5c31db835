//! The journal's side of verifying sealed copies: each copy read back and checked on its
//! target is one `verify` row (complete or failed, the problem as its outcome, the bytes
//! read), all of one act written in one commit with one time; an act that checked nothing
//! (the copier absent, the target unreachable) is one failed row. What `status` shows is
//! each target's last act; what `list` shows is each copy's last verification, unless the
//! copy was made again since.

use std::time::SystemTime;

use rusqlite::params;

use super::{Action, Asker, Journal, JournalError, State};
use layout::human::unix_micros as to_micros;

/// One copy checked on a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub name: String,
    pub ok: bool,
    /// What failed, in words (empty when it is good).
    pub problem: String,
    pub bytes_read: u64,
}

/// A target's last verification, as journalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastVerification {
    pub target: String,
    pub when_micros: i64,
    /// Who asked (a user's name), and the rule when a timer did (`timer of usb`).
    pub user_name: String,
    pub rule: String,
    /// Copies read and found good.
    pub good: u32,
    /// What failed: `(copy name, problem)`; the name is empty when the act checked nothing.
    pub failed: Vec<(String, String)>,
}

impl Journal {
    /// Record one verification of `target`: every copy checked (`Ok`), or why none was
    /// (`Err`; `asked`: the names asked for, empty for every copy). One commit.
    pub fn record_verification(
        &mut self,
        asker: &Asker,
        target: &str,
        rule: &str,
        asked: &[String],
        result: Result<&[Checked], &str>,
    ) -> Result<(), JournalError> {
        let sq = super::sqlite_error(&self.path);
        let now = to_micros(SystemTime::now());
        let tx = self.conn.transaction().map_err(sq)?;
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO requests (asked_micros, uid, user_name, action, subject, reason,
                         rule, target, state, outcome, bytes, finished_micros)
                     VALUES (?1, ?2, ?3, ?4, ?5, '', ?6, ?7, ?8, ?9, ?10, ?1)",
                )
                .map_err(sq)?;
            let mut row = |subject: &str, state: State, outcome: &str, bytes: u64| {
                insert
                    .execute(params![
                        now,
                        i64::from(asker.uid),
                        asker.name,
                        Action::Verify,
                        subject,
                        rule,
                        target,
                        state,
                        outcome,
                        i64::try_from(bytes).unwrap_or(i64::MAX)
                    ])
                    .map(|_| ())
            };
            match result {
                Ok(checked) => {
                    for c in checked {
                        let (state, outcome) = if c.ok {
                            (State::Complete, "verified")
                        } else {
                            (State::Failed, c.problem.as_str())
                        };
                        row(&c.name, state, outcome, c.bytes_read).map_err(sq)?;
                    }
                }
                Err(why) => row(&asked.join(" "), State::Failed, why, 0).map_err(sq)?,
            }
        }
        tx.commit().map_err(sq)
    }

    /// Each target's last verification, in target order.
    pub fn last_verifications(&self) -> Result<Vec<LastVerification>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT r.target, r.asked_micros, r.user_name, r.rule, r.subject, r.state,
                        r.outcome
                 FROM requests r
                 JOIN (SELECT target, MAX(asked_micros) AS last FROM requests
                       WHERE action = ?1 AND state IN (?2, ?3) GROUP BY target) l
                   ON l.target = r.target AND l.last = r.asked_micros
                 WHERE r.action = ?1 AND r.state IN (?2, ?3)
                 ORDER BY r.target, r.id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(
                params![Action::Verify, State::Complete, State::Failed],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, State>(5)?,
                        r.get::<_, String>(6)?,
                    ))
                },
            )
            .map_err(|e| self.err(e))?;
        let mut out: Vec<LastVerification> = Vec::new();
        for row in rows {
            let (target, when, user, rule, subject, state, outcome) =
                row.map_err(|e| self.err(e))?;
            if out.last().map(|l| &l.target) != Some(&target) {
                out.push(LastVerification {
                    target,
                    when_micros: when,
                    user_name: user,
                    rule,
                    good: 0,
                    failed: Vec::new(),
                });
            }
            let last = out.last_mut().expect("pushed above");
            if state == State::Complete {
                last.good += 1;
            } else {
                last.failed.push((subject, outcome));
            }
        }
        Ok(out)
    }
}
