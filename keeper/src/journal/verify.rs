//! The journal's side of verifying sealed copies: each copy read back and checked on its
//! target is one `verify` row (complete or failed, the problem as its outcome, the bytes
//! read), all of one act written in one commit with one time; an act that checked nothing
//! (the copier absent, the target unreachable) is one failed row, its subject `on T[: names]`
//! (never a copy's name). What `status` shows is
//! each target's last act; what `list` shows is each copy's last verification, unless the
//! copy was made again since.

use std::time::SystemTime;

use layout::SnapshotName;
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
                // Never a copy's name: what failed was the act, not a copy.
                Err(why) => {
                    let subject = if asked.is_empty() {
                        format!("on {target}")
                    } else {
                        format!("on {target}: {}", asked.join(" "))
                    };
                    row(&subject, State::Failed, why, 0).map_err(sq)?
                }
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
            } else if SnapshotName::parse(&subject).is_ok() {
                last.failed.push((subject, outcome));
            } else {
                last.failed.push((String::new(), outcome));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::CopyEnd;
    use super::*;
    use crate::journal::CopyAction;

    const A: &str = "@home.2026-12-01T140200.123456Z";
    const B: &str = "@home.2026-12-02T140200.123456Z";

    fn root() -> Asker {
        Asker {
            uid: 0,
            name: "root".into(),
        }
    }

    fn checked(name: &str, problem: &str) -> Checked {
        Checked {
            name: name.into(),
            ok: problem.is_empty(),
            problem: problem.into(),
            bytes_read: 7,
        }
    }

    /// What `list` shows of the copies: (name, target, what failed).
    fn listed(j: &Journal) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        j.each_copy(|n, t, p| out.push((n.into(), t.into(), p.into())))
            .unwrap();
        out
    }

    fn copied(j: &mut Journal, target: &str, name: &str) {
        let id = j
            .begin_copy(&root(), CopyAction::Copy, target, name, "", "")
            .unwrap();
        j.finish_copy(
            id,
            &CopyEnd {
                state: State::Complete,
                outcome: "copied".into(),
                parent: String::new(),
                bytes: 1,
                received_uuid: Some("u".into()),
            },
        )
        .unwrap();
    }

    #[test]
    fn the_last_verification_of_each_target_and_each_copy_is_what_is_shown() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j")).unwrap();
        assert!(j.last_verifications().unwrap().is_empty());
        copied(&mut j, "cloud", A);
        copied(&mut j, "cloud", B);
        copied(&mut j, "usb", A);
        let bad = "part 2 of @home.b: its digest is not the manifest's";
        j.record_verification(
            &root(),
            "cloud",
            "timer of cloud",
            &[],
            Ok(&[checked(A, ""), checked(B, bad)]),
        )
        .unwrap();
        let last = j.last_verifications().unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!(
            (last[0].target.as_str(), last[0].rule.as_str(), last[0].good),
            ("cloud", "timer of cloud", 1)
        );
        assert_eq!(last[0].failed, vec![(B.to_owned(), bad.to_owned())]);
        assert_eq!(
            listed(&j),
            vec![
                (A.into(), "cloud".into(), String::new()),
                (A.into(), "usb".into(), String::new()),
                (B.into(), "cloud".into(), bad.into()),
            ]
        );
        // Each row is journalled, typed, with the bytes read.
        let rows = j.requests().unwrap();
        let verify: Vec<_> = rows.iter().filter(|r| r.action == Action::Verify).collect();
        assert_eq!(verify.len(), 2);
        assert_eq!(verify[1].state, State::Failed);

        // A later act that could check nothing is the target's last; the copy's own last
        // verification still stands.
        std::thread::sleep(std::time::Duration::from_millis(2));
        j.record_verification(
            &root(),
            "cloud",
            "",
            &[B.into()],
            Err("the copier is not running"),
        )
        .unwrap();
        let last = j.last_verifications().unwrap();
        assert_eq!(last[0].user_name, "root");
        assert_eq!(
            last[0].failed,
            vec![(String::new(), "the copier is not running".to_owned())]
        );
        assert_eq!(last[0].good, 0);
        assert_eq!(listed(&j)[2].2, bad, "the copy was not checked again");

        // A good verification clears the mark; so does the copy made again.
        std::thread::sleep(std::time::Duration::from_millis(2));
        j.record_verification(&root(), "cloud", "", &[], Ok(&[checked(B, bad)]))
            .unwrap();
        assert_eq!(listed(&j)[2].2, bad);
        copied(&mut j, "cloud", B);
        assert_eq!(listed(&j)[2].2, "");
        j.record_verification(&root(), "cloud", "", &[], Ok(&[checked(B, bad)]))
            .unwrap();
        assert_eq!(listed(&j)[2].2, bad);
        std::thread::sleep(std::time::Duration::from_millis(2));
        j.record_verification(&root(), "cloud", "", &[], Ok(&[checked(B, "")]))
            .unwrap();
        assert_eq!(listed(&j)[2].2, "");
        // Another target's verification is its own.
        j.record_verification(&root(), "usb", "", &[], Ok(&[checked(A, "")]))
            .unwrap();
        let last = j.last_verifications().unwrap();
        assert_eq!(
            last.iter().map(|l| l.target.as_str()).collect::<Vec<_>>(),
            ["cloud", "usb"]
        );
    }
}
