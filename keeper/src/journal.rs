//! The consent journal: who asked for what, when, what they were told, and what happened.
//!
//! SQLite in WAL mode with `synchronous=FULL`, both set explicitly and read back at open: a
//! row the keeper has answered a caller about is on the disk (one fdatasync per commit).
//! The keeper holds it with `locking_mode=EXCLUSIVE`, set before WAL: the WAL index then
//! lives in the keeper's heap, not in a memory-mapped `-shm` file, whose pages need new
//! blocks on a copy-on-write filesystem and kill the process with SIGBUS when the disk is
//! full (adr/0013). A full disk is then "database or disk is full", an answer to the caller.
//! The price: while a keeper has the journal open, nobody else can read it.
//! It lives on the snapshots subvolume, which no restore replaces (adr/0011).
//! Schema changes are numbered migrations, recorded in `PRAGMA user_version`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rusqlite::{params, Connection, OptionalExtension};

use layout::human::unix_micros as to_micros;

/// Each entry moves the schema from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: requests, the snapshots they made (or found), and the initrd's outcomes.
    "CREATE TABLE requests (
        id INTEGER PRIMARY KEY,
        asked_micros INTEGER NOT NULL,
        uid INTEGER NOT NULL,
        user_name TEXT NOT NULL,
        action TEXT NOT NULL,
        subject TEXT NOT NULL,
        reason TEXT NOT NULL,
        pre_switch INTEGER NOT NULL DEFAULT 0,
        words_shown TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        outcome TEXT NOT NULL DEFAULT '',
        finished_micros INTEGER
    );
    CREATE INDEX requests_by_action ON requests(action, state);
    CREATE TABLE snapshots (
        name TEXT PRIMARY KEY,
        uuid TEXT NOT NULL,
        of_subvolume TEXT NOT NULL,
        taken_micros INTEGER NOT NULL,
        request_id INTEGER REFERENCES requests(id),
        state TEXT NOT NULL,
        seen_micros INTEGER NOT NULL,
        gone_micros INTEGER
    );
    CREATE TABLE outcomes (
        id TEXT PRIMARY KEY,
        result TEXT NOT NULL,
        request TEXT NOT NULL,
        reason TEXT NOT NULL,
        finished_micros INTEGER NOT NULL,
        read_micros INTEGER NOT NULL,
        reported_micros INTEGER
    );",
    // 2: an outcome is reported once to each user, not once to whoever asks first (a
    // readiness probe by root must not use up alice's news).
    "CREATE TABLE outcome_reports (
        outcome_id TEXT NOT NULL REFERENCES outcomes(id),
        uid INTEGER NOT NULL,
        reported_micros INTEGER NOT NULL,
        PRIMARY KEY (outcome_id, uid)
    );",
    // 3: retention (adr/0013): the rule that chose a deletion, sets taken by the timeline
    // timer, and the snapshots a person marked to keep.
    "ALTER TABLE requests ADD COLUMN rule TEXT NOT NULL DEFAULT '';
    ALTER TABLE requests ADD COLUMN timeline INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE keeps (
        name TEXT PRIMARY KEY,
        uid INTEGER NOT NULL,
        user_name TEXT NOT NULL,
        kept_micros INTEGER NOT NULL,
        request_id INTEGER NOT NULL REFERENCES requests(id)
    );",
    // 4: a refused row may stand for many calls: refusals past a caller's allowance are
    // counted in one row (adr/0016), from asked_micros to finished_micros.
    "ALTER TABLE requests ADD COLUMN calls INTEGER NOT NULL DEFAULT 1;",
    // 5: copies off the disk (issue 13): a copy, a fetch or a deletion on a target names
    // the target, the parent an incremental copy was sent against, and the bytes sent;
    // `copies` is what the keeper last knew each target to hold, verified.
    "ALTER TABLE requests ADD COLUMN target TEXT NOT NULL DEFAULT '';
    ALTER TABLE requests ADD COLUMN parent TEXT NOT NULL DEFAULT '';
    ALTER TABLE requests ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE copies (
        target TEXT NOT NULL,
        name TEXT NOT NULL,
        received_uuid TEXT NOT NULL,
        verified_micros INTEGER NOT NULL,
        PRIMARY KEY (target, name)
    );",
];

mod copies;
mod list;
mod retention;
pub use copies::{CopyAction, CopyEnd, CopyRow};
pub use list::ListedRequest;
pub use retention::{Deletion, DeletionResult, RetentionAction};

/// The version a journal has after every migration.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What can go wrong with the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
    #[error("journal {path}: {pragma} is {actual:?} after setting it to {wanted:?}; the journal's promises need it (is the directory on a filesystem SQLite can lock, and writable by the keeper?)")]
    Pragma {
        path: String,
        pragma: &'static str,
        wanted: &'static str,
        actual: String,
    },
    #[error("journal {path} has schema version {found}, newer than this keeper knows ({SCHEMA_VERSION}); run the newer keeper, or restore the journal's backup")]
    TooNew { path: String, found: i64 },
}

impl JournalError {
    /// SQLite could not write because the filesystem is full.
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self,
            JournalError::Sqlite {
                source: rusqlite::Error::SqliteFailure(e, _),
                ..
            } if e.code == rusqlite::ErrorCode::DiskFull
        )
    }
}

/// Who asked, from the bus's record and the user database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asker {
    pub uid: u32,
    pub name: String,
}

/// The states of a request row.
pub mod state {
    pub const PENDING: &str = "pending";
    pub const COMPLETE: &str = "complete";
    pub const FAILED: &str = "failed";
    pub const REFUSED: &str = "refused";
    pub const SHOWN: &str = "shown";
    pub const STAGED: &str = "staged";
    pub const ALREADY_STAGED: &str = "already-staged";
    pub const WITHDRAWN: &str = "withdrawn";
    pub const NOTHING_STAGED: &str = "nothing-staged";
    /// An open snapshot still open, as far as the keeper knows.
    pub const OPEN: &str = "open";
    pub const CLOSED: &str = "closed";
}

/// The actions a request row records.
pub mod action {
    pub const SNAPSHOT: &str = "snapshot";
    pub const RESTORE_PREVIEW: &str = "restore-preview";
    pub const RESTORE: &str = "restore";
    /// The changed paths a restore would delete, listed to an approver.
    pub const RESTORE_DETAILS: &str = "restore-details";
    pub const CANCEL: &str = "cancel";
    /// A snapshot opened read-only for a person (adr/0019); its row stays `open` until it
    /// is closed, and then says how.
    pub const OPEN: &str = "open";
    /// An open snapshot closed: by the person, by the stem when idle, or with a restart.
    pub const CLOSE: &str = "close";
    /// The changed paths of a part of a snapshot, listed to root or an approver.
    pub const DIFF: &str = "diff";
}

/// The subject of a restore's rows (its preview, its consent): the snapshot names it puts
/// back, separated by single spaces, in the order the boot exchanges them; for a set,
/// after `set N: ` (`set 12: @persist.… @log.… @home.…`), so that a set's consent is never
/// a single restore's, nor the other way round.
pub fn restore_subject(set: Option<i64>, names: &str) -> String {
    match set {
        Some(id) => format!("set {id}: {names}"),
        None => names.to_owned(),
    }
}

/// The snapshot names a restore row's subject puts back (a set's without its `set N: `).
pub fn restored_names(subject: &str) -> &str {
    match subject.split_once(": ") {
        Some((set, names)) if set.starts_with("set ") => names,
        _ => subject,
    }
}

/// A request as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRow {
    pub id: i64,
    pub asked_micros: i64,
    pub uid: u32,
    pub user_name: String,
    pub action: String,
    pub subject: String,
    pub reason: String,
    pub pre_switch: bool,
    pub words_shown: String,
    pub state: String,
    pub outcome: String,
    /// How many calls the row stands for: 1, or more for refusals counted in it (adr/0016).
    pub calls: u64,
}

/// A snapshot as recorded, with the request that made it (if the keeper made it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRow {
    pub name: String,
    pub uuid: String,
    pub of_subvolume: String,
    pub taken_micros: i64,
    /// `None`: found on disk, never asked for through the keeper (unknown origin).
    pub request: Option<RequestRow>,
    /// `present` or `gone`.
    pub state: String,
}

/// A member of a snapshot set, as the stem reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub uuid: String,
    pub of_subvolume: String,
    pub taken_micros: i64,
}

/// The initrd's outcome, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeRow {
    pub id: String,
    pub result: String,
    pub request: String,
    pub reason: String,
    pub finished_micros: i64,
    pub reported: bool,
}

/// The journal, open.
#[derive(Debug)]
pub struct Journal {
    conn: Connection,
    path: PathBuf,
}

const PRESENT: &str = "present";
const GONE: &str = "gone";

/// Set a pragma that answers with the mode in force, and check the answer: SQLite keeps
/// the old mode, without an error, when it cannot change it.
fn set_mode(
    conn: &Connection,
    path: &str,
    pragma: &'static str,
    wanted: &'static str,
) -> Result<(), JournalError> {
    let actual: String = conn
        .query_row(&format!("PRAGMA {pragma}={wanted}"), [], |r| r.get(0))
        .map_err(|source| JournalError::Sqlite {
            path: path.to_owned(),
            source,
        })?;
    if !actual.eq_ignore_ascii_case(wanted) {
        return Err(JournalError::Pragma {
            path: path.to_owned(),
            pragma,
            wanted,
            actual,
        });
    }
    Ok(())
}

/// A SQLite error as the journal's, naming its file. It borrows only the path, so it serves
/// while a transaction holds the connection (`self.conn` and `self.path` are apart).
fn sqlite_error(path: &Path) -> impl Fn(rusqlite::Error) -> JournalError + Copy + '_ {
    move |source| JournalError::Sqlite {
        path: path.display().to_string(),
        source,
    }
}

impl Journal {
    /// Open (creating if needed) the journal at `path`, set WAL and `synchronous=FULL` and
    /// check both took, and bring the schema up to date.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        let p = path.display().to_string();
        let sq = sqlite_error(path);
        let conn = Connection::open(path).map_err(sq)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sq)?;
        // Before anything reads the database, so that no shared-memory WAL index is made.
        set_mode(&conn, &p, "locking_mode", "exclusive")?;
        set_mode(&conn, &p, "journal_mode", "wal")?;
        conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")
            .map_err(sq)?;
        // FULL is 2.
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .map_err(sq)?;
        if sync != 2 {
            return Err(JournalError::Pragma {
                path: p,
                pragma: "synchronous",
                wanted: "2 (FULL)",
                actual: sync.to_string(),
            });
        }
        let mut journal = Journal {
            conn,
            path: path.to_owned(),
        };
        journal.migrate()?;
        Ok(journal)
    }

    /// Where the journal is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, source: rusqlite::Error) -> JournalError {
        sqlite_error(&self.path)(source)
    }

    fn migrate(&mut self) -> Result<(), JournalError> {
        let found: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if found > SCHEMA_VERSION {
            return Err(JournalError::TooNew {
                path: self.path.display().to_string(),
                found,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            let tx = self.conn.transaction().map_err(|e| JournalError::Sqlite {
                path: self.path.display().to_string(),
                source: e,
            })?;
            tx.execute_batch(sql)
                .and_then(|_| tx.execute_batch(&format!("PRAGMA user_version = {}", i + 1)))
                .and_then(|_| tx.commit())
                .map_err(|e| JournalError::Sqlite {
                    path: self.path.display().to_string(),
                    source: e,
                })?;
        }
        Ok(())
    }

    /// The schema version on disk.
    pub fn schema_version(&self) -> Result<i64, JournalError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// Record a request before acting on it; returns its id.
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        &self,
        asker: &Asker,
        action: &str,
        subject: &str,
        reason: &str,
        pre_switch: bool,
        words_shown: &str,
        state: &str,
        outcome: &str,
    ) -> Result<i64, JournalError> {
        let now = to_micros(SystemTime::now());
        let finished = if state == state::PENDING {
            None
        } else {
            Some(now)
        };
        self.conn
            .execute(
                "INSERT INTO requests (asked_micros, uid, user_name, action, subject, reason,
                     pre_switch, words_shown, state, outcome, finished_micros)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    now,
                    i64::from(asker.uid),
                    asker.name,
                    action,
                    subject,
                    reason,
                    pre_switch,
                    words_shown,
                    state,
                    outcome,
                    finished
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Record a snapshot set as pending, durable together with the commit that settles it.
    ///
    /// The row is committed to the WAL at once (a keeper that is killed leaves it for the
    /// reconciliation), but without its own fsync: the completing commit, which is FULL and
    /// comes before any answer, makes both durable. A power cut in between loses only an
    /// unanswered request, whose snapshots then list as of unknown origin (adr/0011).
    /// Restores are not begun this way: their consent must be on disk before the stem acts.
    pub fn begin_set(
        &self,
        asker: &Asker,
        subject: &str,
        reason: &str,
        pre_switch: bool,
    ) -> Result<i64, JournalError> {
        self.conn
            .execute_batch("PRAGMA synchronous=NORMAL")
            .map_err(|e| self.err(e))?;
        let id = self.begin(
            asker,
            action::SNAPSHOT,
            subject,
            reason,
            pre_switch,
            "",
            state::PENDING,
            "",
        );
        let restored = self
            .conn
            .execute_batch("PRAGMA synchronous=FULL")
            .map_err(|e| self.err(e));
        let id = id?;
        restored?;
        Ok(id)
    }

    /// Run `write` with commits that are not synced on their own (`synchronous=NORMAL`),
    /// then go back to FULL. Such a commit survives a killed keeper at once (it is in the
    /// WAL) and reaches the disk with the next synced commit or checkpoint; a power cut
    /// before that loses it. For rows the disk can stand in for: the end of an act whose
    /// request was synced before the act (the reconciliation reads the outcome from the
    /// disk), a preview's words (lost, they are only shown again) — adr/0011.
    pub fn unsynced<T>(
        &mut self,
        write: impl FnOnce(&mut Journal) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        self.conn
            .execute_batch("PRAGMA synchronous=NORMAL")
            .map_err(|e| self.err(e))?;
        let done = write(self);
        let restored = self
            .conn
            .execute_batch("PRAGMA synchronous=FULL")
            .map_err(|e| self.err(e));
        let done = done?;
        restored?;
        Ok(done)
    }

    /// Write the counts of refused rows that stand for many calls (adr/0016): row `id` now
    /// stands for `calls` refusals, the last at `last_micros`. One commit for all.
    pub fn count_refusals(&mut self, counts: &[(i64, u64, i64)]) -> Result<(), JournalError> {
        let sq = sqlite_error(&self.path);
        let tx = self.conn.transaction().map_err(sq)?;
        for (id, calls, last_micros) in counts {
            tx.execute(
                "UPDATE requests SET calls = ?2, finished_micros = ?3 WHERE id = ?1 AND state = ?4",
                params![
                    id,
                    i64::try_from(*calls).unwrap_or(i64::MAX),
                    last_micros,
                    state::REFUSED
                ],
            )
            .map_err(sq)?;
        }
        tx.commit().map_err(sq)
    }

    /// Record the end of a request.
    pub fn finish(&self, id: i64, state: &str, outcome: &str) -> Result<(), JournalError> {
        self.conn
            .execute(
                "UPDATE requests SET state = ?2, outcome = ?3, finished_micros = ?4 WHERE id = ?1",
                params![id, state, outcome, to_micros(SystemTime::now())],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Mark a snapshot set complete with its members, in one transaction.
    pub fn complete_set(
        &mut self,
        id: i64,
        members: &[Member],
        outcome: &str,
    ) -> Result<(), JournalError> {
        self.settle_set(id, members, state::COMPLETE, outcome)
    }

    /// Mark a snapshot set failed; `members` are those that exist anyway.
    pub fn fail_set(
        &mut self,
        id: i64,
        members: &[Member],
        outcome: &str,
    ) -> Result<(), JournalError> {
        self.settle_set(id, members, state::FAILED, outcome)
    }

    fn settle_set(
        &mut self,
        id: i64,
        members: &[Member],
        st: &str,
        outcome: &str,
    ) -> Result<(), JournalError> {
        let sq = sqlite_error(&self.path);
        let now = to_micros(SystemTime::now());
        let tx = self.conn.transaction().map_err(sq)?;
        for m in members {
            tx.execute(
                "INSERT INTO snapshots (name, uuid, of_subvolume, taken_micros, request_id, state, seen_micros)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT(name) DO UPDATE SET request_id = excluded.request_id, uuid = excluded.uuid",
                params![m.name, m.uuid, m.of_subvolume, m.taken_micros, id, PRESENT, now],
            )
            .map_err(sq)?;
        }
        tx.execute(
            "UPDATE requests SET state = ?2, outcome = ?3, finished_micros = ?4 WHERE id = ?1",
            params![id, st, outcome, now],
        )
        .map_err(sq)?;
        tx.commit().map_err(sq)
    }

    /// Snapshot sets still pending (only after a crash, or while being taken).
    pub fn pending_sets(&self) -> Result<Vec<RequestRow>, JournalError> {
        self.requests_where("action = 'snapshot' AND state = 'pending'", [])
    }

    /// Requests of `action` left pending (the keeper stopped before the stem answered).
    pub fn pending(&self, action: &str) -> Result<Vec<RequestRow>, JournalError> {
        self.requests_where("action = ?1 AND state = 'pending'", [action])
    }

    /// Record a snapshot found on disk that no request made.
    pub fn add_unknown_origin(&self, m: &Member) -> Result<(), JournalError> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO snapshots (name, uuid, of_subvolume, taken_micros, request_id, state, seen_micros)
                 VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?6)",
                params![m.name, m.uuid, m.of_subvolume, m.taken_micros, PRESENT, to_micros(SystemTime::now())],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Record that a journalled snapshot is no longer on disk.
    pub fn mark_gone(&self, name: &str) -> Result<(), JournalError> {
        self.conn
            .execute(
                "UPDATE snapshots SET state = ?2, gone_micros = ?3 WHERE name = ?1 AND state = ?4",
                params![name, GONE, to_micros(SystemTime::now()), PRESENT],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Every snapshot the journal knows, with the request that made it.
    pub fn snapshots(&self) -> Result<Vec<SnapshotRow>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT s.name, s.uuid, s.of_subvolume, s.taken_micros, s.state,
                        r.id, r.asked_micros, r.uid, r.user_name, r.action, r.subject, r.reason,
                        r.pre_switch, r.words_shown, r.state, r.outcome, r.calls
                 FROM snapshots s LEFT JOIN requests r ON r.id = s.request_id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                let request = match r.get::<_, Option<i64>>(5)? {
                    None => None,
                    Some(id) => Some(RequestRow {
                        id,
                        asked_micros: r.get(6)?,
                        uid: r.get::<_, i64>(7)? as u32,
                        user_name: r.get(8)?,
                        action: r.get(9)?,
                        subject: r.get(10)?,
                        reason: r.get(11)?,
                        pre_switch: r.get(12)?,
                        words_shown: r.get(13)?,
                        state: r.get(14)?,
                        outcome: r.get(15)?,
                        calls: r.get::<_, i64>(16)?.max(1) as u64,
                    }),
                };
                Ok(SnapshotRow {
                    name: r.get(0)?,
                    uuid: r.get(1)?,
                    of_subvolume: r.get(2)?,
                    taken_micros: r.get(3)?,
                    state: r.get(4)?,
                    request,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    fn requests_where<P: rusqlite::Params>(
        &self,
        cond: &str,
        p: P,
    ) -> Result<Vec<RequestRow>, JournalError> {
        let sql = format!(
            "SELECT id, asked_micros, uid, user_name, action, subject, reason, pre_switch,
                    words_shown, state, outcome, calls FROM requests WHERE {cond} ORDER BY id"
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(p, |r| {
                Ok(RequestRow {
                    id: r.get(0)?,
                    asked_micros: r.get(1)?,
                    uid: r.get::<_, i64>(2)? as u32,
                    user_name: r.get(3)?,
                    action: r.get(4)?,
                    subject: r.get(5)?,
                    reason: r.get(6)?,
                    pre_switch: r.get(7)?,
                    words_shown: r.get(8)?,
                    state: r.get(9)?,
                    outcome: r.get(10)?,
                    calls: r.get::<_, i64>(11)?.max(1) as u64,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// The opens journalled as still open (adr/0019), oldest first.
    pub fn open_rows(&self) -> Result<Vec<RequestRow>, JournalError> {
        self.requests_where(
            "action = ?1 AND state = ?2",
            params![action::OPEN, state::OPEN],
        )
    }

    /// Every request, oldest first (for tests and audits).
    pub fn requests(&self) -> Result<Vec<RequestRow>, JournalError> {
        self.requests_where("1", [])
    }

    /// The words this user was last shown for restoring `snapshot`, if shown since `since`.
    pub fn words_shown(
        &self,
        uid: u32,
        snapshot: &str,
        since_micros: i64,
    ) -> Result<Option<String>, JournalError> {
        self.conn
            .query_row(
                "SELECT words_shown FROM requests WHERE action = ?1 AND uid = ?2 AND subject = ?3
                   AND asked_micros >= ?4 ORDER BY id DESC LIMIT 1",
                params![
                    action::RESTORE_PREVIEW,
                    i64::from(uid),
                    snapshot,
                    since_micros
                ],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The latest request that staged a restore of exactly `names` (the snapshot names it
    /// puts back, as [`restore_subject`] writes them), of one snapshot or of a set.
    pub fn staging_of(&self, names: &str) -> Result<Option<RequestRow>, JournalError> {
        Ok(self
            .requests_where(
                "action = 'restore' AND state = 'staged' AND (subject = ?1 OR
                   (subject LIKE 'set %' AND substr(subject, instr(subject, ': ') + 2) = ?1))",
                [names],
            )?
            .pop())
    }

    /// Record an outcome of the initrd; `false` when it was already recorded.
    pub fn record_outcome(&self, o: &OutcomeRow) -> Result<bool, JournalError> {
        let n = self
            .conn
            .execute(
                "INSERT OR IGNORE INTO outcomes (id, result, request, reason, finished_micros, read_micros)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![o.id, o.result, o.request, o.reason, o.finished_micros, to_micros(SystemTime::now())],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }

    /// The latest outcome, and whether it had been reported to `uid` before; marks it
    /// reported to `uid`.
    pub fn report_latest_outcome(&self, uid: u32) -> Result<Option<OutcomeRow>, JournalError> {
        let row = self
            .conn
            .query_row(
                "SELECT o.id, o.result, o.request, o.reason, o.finished_micros, r.reported_micros
                 FROM outcomes o LEFT JOIN outcome_reports r ON r.outcome_id = o.id AND r.uid = ?1
                 ORDER BY o.finished_micros DESC LIMIT 1",
                [i64::from(uid)],
                |r| {
                    Ok(OutcomeRow {
                        id: r.get(0)?,
                        result: r.get(1)?,
                        request: r.get(2)?,
                        reason: r.get(3)?,
                        finished_micros: r.get(4)?,
                        reported: r.get::<_, Option<i64>>(5)?.is_some(),
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))?;
        if let Some(o) = &row {
            if !o.reported {
                let now = to_micros(SystemTime::now());
                self.conn
                    .execute(
                        "INSERT OR IGNORE INTO outcome_reports (outcome_id, uid, reported_micros)
                         VALUES (?1, ?2, ?3)",
                        params![o.id, i64::from(uid), now],
                    )
                    .map_err(|e| self.err(e))?;
                self.conn
                    .execute(
                        "UPDATE outcomes SET reported_micros = ?2 WHERE id = ?1 AND reported_micros IS NULL",
                        params![o.id, now],
                    )
                    .map_err(|e| self.err(e))?;
            }
        }
        Ok(row)
    }

    /// How many snapshot sets are marked failed.
    pub fn failed_sets(&self) -> Result<u32, JournalError> {
        self.conn
            .query_row(
                "SELECT count(*) FROM requests WHERE action = 'snapshot' AND state = 'failed'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }
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

    /// Alice's snapshot request, journalled pending; its id.
    fn pending_snapshot(j: &Journal) -> i64 {
        j.begin(
            &alice(),
            action::SNAPSHOT,
            "@home",
            "test",
            false,
            "",
            state::PENDING,
            "",
        )
        .unwrap()
    }

    #[test]
    fn opens_in_wal_full_at_the_current_schema_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sqlite");
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.schema_version().unwrap(), SCHEMA_VERSION);
        let id = pending_snapshot(&j);
        drop(j);
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.pending_sets().unwrap()[0].id, id);
        let mode: String = j
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let locking: String = j
            .conn
            .query_row("PRAGMA locking_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(locking, "exclusive");
    }

    #[test]
    fn the_wal_index_is_in_memory_and_the_journal_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sqlite");
        let j = Journal::open(&path).unwrap();
        pending_snapshot(&j);
        // No memory-mapped WAL index to fault on when the disk is full.
        assert!(path.with_extension("sqlite-wal").exists());
        assert!(!path.with_extension("sqlite-shm").exists());
        // A second opener is refused while the first holds it.
        let other = Connection::open(&path).unwrap();
        other.busy_timeout(std::time::Duration::ZERO).unwrap();
        let read = other.query_row("SELECT count(*) FROM requests", [], |r| r.get::<_, i64>(0));
        assert!(read.is_err(), "a second reader got in: {read:?}");
        drop(other);
        drop(j);
        assert_eq!(Journal::open(&path).unwrap().requests().unwrap().len(), 1);
    }

    #[test]
    fn a_pending_set_leaves_the_journal_at_synchronous_full() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("j")).unwrap();
        let id = j.begin_set(&alice(), "@home @log", "why", false).unwrap();
        let sync: i64 = j
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2);
        assert_eq!(j.pending_sets().unwrap()[0].id, id);
    }

    #[test]
    fn a_version_1_journal_is_migrated_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute_batch("PRAGMA user_version = 1").unwrap();
            conn.execute(
                "INSERT INTO requests (asked_micros, uid, user_name, action, subject, reason, state)
                 VALUES (1, 1000, 'alice', 'snapshot', '@home', 'old', 'complete')",
                [],
            )
            .unwrap();
        }
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(j.requests().unwrap()[0].reason, "old");
        // Version 4: an old row stands for one call.
        assert_eq!(j.requests().unwrap()[0].calls, 1);
        // Version 3: an old snapshot set is neither timeline nor kept.
        assert!(j.timeline_sets().unwrap().is_empty());
        assert!(j.keeps().unwrap().is_empty());
        assert_eq!(j.report_latest_outcome(0).unwrap(), None);
    }

    #[test]
    fn a_refused_row_counts_the_calls_it_stands_for() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j")).unwrap();
        let refused = j
            .begin(&alice(), "delete", "x", "", false, "", state::REFUSED, "no")
            .unwrap();
        let pending = pending_snapshot(&j);
        j.count_refusals(&[(refused, 10_000, 42), (pending, 5, 42)])
            .unwrap();
        let rows = j.requests().unwrap();
        assert_eq!(
            (rows[0].calls, rows[0].state.as_str()),
            (10_000, state::REFUSED)
        );
        // Only refused rows are counted.
        assert_eq!(rows[1].calls, 1);
    }

    #[test]
    fn a_set_restore_is_found_by_the_names_it_puts_back() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("j")).unwrap();
        let names = "@persist.a @log.a @home.a";
        let subject = restore_subject(Some(12), names);
        assert_eq!(subject, "set 12: @persist.a @log.a @home.a");
        assert_eq!(restored_names(&subject), names);
        assert_eq!(restored_names("@home.a"), "@home.a");
        let staging = |subject: &str| {
            j.begin(
                &alice(),
                action::RESTORE,
                subject,
                "",
                false,
                "words",
                state::STAGED,
                "staged",
            )
            .unwrap()
        };
        let single = staging("@home.a");
        let set = staging(&subject);
        assert_eq!(j.staging_of(names).unwrap().map(|r| r.id), Some(set));
        assert_eq!(j.staging_of("@home.a").unwrap().map(|r| r.id), Some(single));
        assert_eq!(j.staging_of("@log.a @home.a").unwrap(), None);
    }

    #[test]
    fn refuses_a_journal_from_the_future() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        Journal::open(&path)
            .unwrap()
            .conn
            .execute_batch("PRAGMA user_version = 99")
            .unwrap();
        match Journal::open(&path) {
            Err(JournalError::TooNew { found: 99, .. }) => {}
            other => panic!("expected TooNew, got {other:?}"),
        }
    }

    #[test]
    fn a_set_completes_with_its_members_and_outcomes_are_recorded_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&dir.path().join("j")).unwrap();
        let id = j
            .begin(
                &alice(),
                action::SNAPSHOT,
                "@home",
                "why",
                true,
                "",
                state::PENDING,
                "",
            )
            .unwrap();
        let m = Member {
            name: "@home.x".into(),
            uuid: "u".into(),
            of_subvolume: "@home".into(),
            taken_micros: 5,
        };
        j.complete_set(id, std::slice::from_ref(&m), "taken")
            .unwrap();
        let s = j.snapshots().unwrap();
        assert_eq!(s.len(), 1);
        let req = s[0].request.as_ref().unwrap();
        assert_eq!(
            (req.state.as_str(), req.pre_switch, req.reason.as_str()),
            (state::COMPLETE, true, "why")
        );
        assert!(j.pending_sets().unwrap().is_empty());

        let o = OutcomeRow {
            id: "t".into(),
            result: "done".into(),
            request: "r".into(),
            reason: "ok".into(),
            finished_micros: 1,
            reported: false,
        };
        assert!(j.record_outcome(&o).unwrap());
        assert!(!j.record_outcome(&o).unwrap());
        assert!(!j.report_latest_outcome(1000).unwrap().unwrap().reported);
        assert!(j.report_latest_outcome(1000).unwrap().unwrap().reported);
        // Root reading it first does not use up another user's news.
        assert!(!j.report_latest_outcome(0).unwrap().unwrap().reported);
        assert!(!j.report_latest_outcome(1001).unwrap().unwrap().reported);
    }
}
