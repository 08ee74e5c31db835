//! The journal's side of health (`tacid data health`): the newest snapshot of each
//! subvolume and the newest pre-switch one, the timeline timer's last run and last failure,
//! each target's newest copies, last failure and last success, and the free space the
//! keeper recorded over time (for the rate it falls at). Reads only, but for the free
//! space's samples.

use rusqlite::params;

use super::{Action, Journal, JournalError, State, PRESENT};

/// A snapshot's name and when it was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Newest {
    pub of_subvolume: String,
    pub name: String,
    pub taken_micros: i64,
}

/// An act's time and words.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LastAct {
    /// µs since the epoch; 0: never.
    pub at_micros: i64,
    pub words: String,
}

/// What the journal says about a copy target.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetActs {
    pub last_success: LastAct,
    pub last_failure: LastAct,
    pub failures: u64,
    /// The copies the keeper last knew the target to hold (names).
    pub held: Vec<String>,
}

/// The timeline timer's runs, as journalled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TimelineRuns {
    pub last_success: LastAct,
    pub last_failure: LastAct,
    pub failures: u64,
}

impl Journal {
    /// The newest present snapshot of each subvolume (`pre_switch`: of pre-switch sets only).
    pub fn newest_snapshots(&self, pre_switch: bool) -> Result<Vec<Newest>, JournalError> {
        let sql = if pre_switch {
            "SELECT s.of_subvolume, s.name, MAX(s.taken_micros) FROM snapshots s
             JOIN requests r ON r.id = s.request_id
             WHERE s.state = ?1 AND r.pre_switch = 1 GROUP BY s.of_subvolume"
        } else {
            "SELECT of_subvolume, name, MAX(taken_micros) FROM snapshots
             WHERE state = ?1 GROUP BY of_subvolume"
        };
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![PRESENT], |r| {
                Ok(Newest {
                    of_subvolume: r.get(0)?,
                    name: r.get(1)?,
                    taken_micros: r.get(2)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// The timeline timer's last run that took its set, its last that failed (or was
    /// refused: below the hard floor, say), and how many failed.
    pub fn timeline_runs(&self) -> Result<TimelineRuns, JournalError> {
        let last_success = self.last_act(
            "action = ?1 AND timeline = 1 AND state = ?2",
            params![Action::Snapshot, State::Complete],
        )?;
        let failed = "action = ?1 AND reason = 'timeline' AND state IN (?2, ?3)";
        let last_failure = self.last_act(
            failed,
            params![Action::Snapshot, State::Failed, State::Refused],
        )?;
        let failures = self.count_where(
            failed,
            params![Action::Snapshot, State::Failed, State::Refused],
        )?;
        Ok(TimelineRuns {
            last_success,
            last_failure,
            failures,
        })
    }

    /// What the journal says of the copies to `target`.
    pub fn target_acts(&self, target: &str) -> Result<TargetActs, JournalError> {
        let last_success = self.last_act(
            "action = ?1 AND target = ?2 AND state = ?3",
            params![Action::Copy, target, State::Complete],
        )?;
        let failed = "action = ?1 AND target = ?2 AND state = ?3";
        let last_failure = self.last_act(failed, params![Action::Copy, target, State::Failed])?;
        let failures = self.count_where(failed, params![Action::Copy, target, State::Failed])?;
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name FROM copies WHERE target = ?1 ORDER BY name")
            .map_err(|e| self.err(e))?;
        let held = stmt
            .query_map([target], |r| r.get(0))
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        Ok(TargetActs {
            last_success,
            last_failure,
            failures,
            held,
        })
    }

    fn last_act<P: rusqlite::Params>(&self, filter: &str, p: P) -> Result<LastAct, JournalError> {
        let sql = format!(
            "SELECT asked_micros, outcome FROM requests WHERE {filter}
             ORDER BY asked_micros DESC, id DESC LIMIT 1"
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query(p).map_err(|e| self.err(e))?;
        match rows.next().map_err(|e| self.err(e))? {
            Some(r) => Ok(LastAct {
                at_micros: r.get(0).map_err(|e| self.err(e))?,
                words: r.get(1).map_err(|e| self.err(e))?,
            }),
            None => Ok(LastAct::default()),
        }
    }

    fn count_where<P: rusqlite::Params>(&self, filter: &str, p: P) -> Result<u64, JournalError> {
        let sql = format!("SELECT count(*) FROM requests WHERE {filter}");
        self.conn
            .query_row(&sql, p, |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .map_err(|e| self.err(e))
    }

    /// Record the free space at `at_micros`, unless a sample is younger than `every_micros`;
    /// samples older than `keep_micros` before it go. True when it was recorded.
    pub fn record_free_space(
        &self,
        at_micros: i64,
        free_bytes: u64,
        every_micros: i64,
        keep_micros: i64,
    ) -> Result<bool, JournalError> {
        let recent: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM free_space WHERE at_micros > ?1 AND at_micros <= ?2",
                params![at_micros - every_micros, at_micros],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if recent > 0 {
            return Ok(false);
        }
        self.conn
            .execute(
                "INSERT OR REPLACE INTO free_space (at_micros, free_bytes) VALUES (?1, ?2)",
                params![at_micros, i64::try_from(free_bytes).unwrap_or(i64::MAX)],
            )
            .map_err(|e| self.err(e))?;
        self.conn
            .execute(
                "DELETE FROM free_space WHERE at_micros < ?1",
                params![at_micros - keep_micros],
            )
            .map_err(|e| self.err(e))?;
        Ok(true)
    }

    /// The free space recorded since `since_micros`, oldest first: (µs, bytes).
    pub fn free_space_since(&self, since_micros: i64) -> Result<Vec<(i64, u64)>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT at_micros, free_bytes FROM free_space WHERE at_micros >= ?1
                 ORDER BY at_micros",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([since_micros], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}
