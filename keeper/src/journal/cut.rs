//! Which sets are consistent cuts: the units the stem paused while their members were taken.

use rusqlite::{params, OptionalExtension as _};

use super::{Journal, JournalError};

impl Journal {
    /// Record that set `id` was taken with `units` paused (none: nothing is recorded), and
    /// what became of each of their hooks that ran (`hooks`, one line each, without a
    /// newline).
    pub fn record_cut(
        &mut self,
        id: i64,
        units: &[String],
        hooks: &[String],
    ) -> Result<(), JournalError> {
        if units.is_empty() {
            return Ok(());
        }
        let hooks: Vec<String> = hooks.iter().map(|h| h.replace('\n', " ")).collect();
        self.conn
            .execute(
                "INSERT INTO cuts (request_id, units, hooks) VALUES (?1, ?2, ?3)
                 ON CONFLICT(request_id) DO UPDATE SET units = excluded.units,
                 hooks = excluded.hooks",
                params![id, units.join(" "), hooks.join("\n")],
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

    /// What became of the hooks of set `id`'s cut, one line each; empty: none ran.
    pub fn cut_hooks_of(&self, id: i64) -> Result<Vec<String>, JournalError> {
        let text = self
            .conn
            .query_row(
                "SELECT hooks FROM cuts WHERE request_id = ?1",
                params![id],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| self.err(e))?
            .unwrap_or_default();
        Ok(text.lines().map(str::to_owned).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Asker, Journal};
    use layout::SubvolumeName;

    #[test]
    fn a_cut_is_recorded_with_what_became_of_each_hook() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j.sqlite")).unwrap();
        let asker = Asker {
            uid: 0,
            name: "root".into(),
        };
        let id = j
            .set_request(&asker, &[SubvolumeName::parse("@persist").unwrap()])
            .reason("test")
            .begin()
            .unwrap();
        let hooks = [
            "before pg.service as postgres: exited 0 in 12 ms".to_string(),
            "after pg.service as postgres: failed: exited 3\nafter 4 ms".to_string(),
        ];
        j.record_cut(id, &["pg.service".into()], &hooks).unwrap();
        assert_eq!(j.cut_of(id).unwrap(), "pg.service");
        let got = j.cut_hooks_of(id).unwrap();
        assert_eq!(
            got,
            [
                "before pg.service as postgres: exited 0 in 12 ms",
                "after pg.service as postgres: failed: exited 3 after 4 ms"
            ]
        );
        // A set with no unit paused records nothing, hooks or not.
        let other = j
            .set_request(&asker, &[SubvolumeName::parse("@log").unwrap()])
            .reason("test")
            .begin()
            .unwrap();
        j.record_cut(other, &[], &[]).unwrap();
        assert!(j.cut_hooks_of(other).unwrap().is_empty());
        assert_eq!(j.cut_of(other).unwrap(), "");
    }
}
