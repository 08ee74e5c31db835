//! What `tacid data list` reads from the journal: only the columns it shows, one pass each,
//! and a counter that says whether anything was written since.

use rusqlite::types::Type;

use super::{Action, Journal, JournalError, State};

/// Column `i` as text, borrowed from the row.
fn text<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<&'r str> {
    r.get_ref(i)?
        .as_str()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, Type::Text, Box::new(e)))
}

/// What the journal says of one snapshot, borrowed for the length of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedRequest<'a> {
    /// The request that took it (a set) or fetched it.
    pub id: i64,
    /// `Snapshot` (a set took it) or `Fetch`.
    pub action: Action,
    pub uid: u32,
    pub user_name: &'a str,
    pub reason: &'a str,
    pub pre_switch: bool,
    /// The units paused while the set was taken, separated by one space; empty: none.
    pub cut_units: &'a str,
}

impl Journal {
    /// Rows written since the journal was opened (SQLite's `total_changes`): different after
    /// any insert, update or delete by the keeper, which alone has the journal open
    /// (exclusive locking). Equal means nothing a list shows changed in the journal.
    pub fn changes(&self) -> u64 {
        self.conn.total_changes()
    }

    /// Each journalled snapshot's name and the request that took it (`None`: the journal
    /// has the snapshot but no request for it), in the order they were journalled.
    pub fn each_listed(
        &self,
        mut each: impl FnMut(&str, Option<ListedRequest<'_>>),
    ) -> Result<(), JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT s.name, r.id, r.uid, r.user_name, r.reason, r.pre_switch, r.action,
                     COALESCE(c.units, '')
                 FROM snapshots s LEFT JOIN requests r ON r.id = s.request_id
                 LEFT JOIN cuts c ON c.request_id = r.id
                 ORDER BY s.rowid",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let name = text(r, 0).map_err(|e| self.err(e))?;
            let request = match r.get::<_, Option<i64>>(1).map_err(|e| self.err(e))? {
                None => None,
                Some(id) => Some(ListedRequest {
                    id,
                    uid: r.get::<_, i64>(2).map_err(|e| self.err(e))? as u32,
                    user_name: text(r, 3).map_err(|e| self.err(e))?,
                    reason: text(r, 4).map_err(|e| self.err(e))?,
                    pre_switch: r.get(5).map_err(|e| self.err(e))?,
                    action: r.get(6).map_err(|e| self.err(e))?,
                    cut_units: text(r, 7).map_err(|e| self.err(e))?,
                }),
            };
            each(name, request);
        }
        Ok(())
    }

    /// Each verified copy a target holds, by snapshot name, in name then target order, with
    /// what failed when its last verification failed (empty otherwise; a copy made again
    /// since is judged anew).
    pub fn each_copy(&self, mut each: impl FnMut(&str, &str, &str)) -> Result<(), JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT c.name, c.target, COALESCE((
                     SELECT CASE WHEN r.action = ?1 AND r.state = ?3 THEN r.outcome ELSE '' END
                     FROM requests r
                     WHERE r.target = c.target AND r.subject = c.name
                       AND ((r.action = ?1 AND r.state IN (?2, ?3))
                            OR (r.action = ?4 AND r.state = ?2))
                     ORDER BY r.id DESC LIMIT 1), '')
                 FROM copies c ORDER BY c.name, c.target",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt
            .query(rusqlite::params![
                Action::Verify,
                State::Complete,
                State::Failed,
                Action::Copy
            ])
            .map_err(|e| self.err(e))?;
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let name = text(r, 0).map_err(|e| self.err(e))?;
            let target = text(r, 1).map_err(|e| self.err(e))?;
            let problem = text(r, 2).map_err(|e| self.err(e))?;
            each(name, target, problem);
        }
        Ok(())
    }
}
