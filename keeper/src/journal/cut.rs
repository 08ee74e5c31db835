//! Which sets are consistent cuts: the units the stem paused while their members were taken.

use rusqlite::{params, OptionalExtension as _};

use super::{Journal, JournalError};

impl Journal {
    /// Record that set `id` was taken with `units` paused (none: nothing is recorded).
    pub fn record_cut(&mut self, id: i64, units: &[String]) -> Result<(), JournalError> {
        if units.is_empty() {
            return Ok(());
        }
        self.conn
            .execute(
                "INSERT INTO cuts (request_id, units) VALUES (?1, ?2)
                 ON CONFLICT(request_id) DO UPDATE SET units = excluded.units",
                params![id, units.join(" ")],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The units paused while set `id` was taken, separated by one space; empty: none.
    pub fn cut_of(&self, id: i64) -> Result<String, JournalError> {
        Ok(self
            .conn
            .query_row(
                "SELECT units FROM cuts WHERE request_id = ?1",
                params![id],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| self.err(e))?
            .unwrap_or_default())
    }
}
