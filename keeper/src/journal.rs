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

use layout::{OutcomeResult, SubvolumeName};
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
    // 5: copies off the disk: a copy, a fetch or a deletion on a target names
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
    // 6: the small vocabularies are checked by the database too: a request's action and
    // state, a snapshot's state, an outcome's result (the lists of `types`, which a test
    // keeps equal to these). SQLite adds a CHECK only to a new table, so each is rebuilt
    // with its rows, ids and index (the `foreign_keys` pragma is off while migrating, so
    // the rows that refer to them are kept as they are). `Journal::migrate` refuses, before
    // this runs, a journal with a value outside the lists, naming the row.
    "CREATE TABLE requests_checked (
        id INTEGER PRIMARY KEY,
        asked_micros INTEGER NOT NULL,
        uid INTEGER NOT NULL,
        user_name TEXT NOT NULL,
        action TEXT NOT NULL CHECK (action IN ('snapshot', 'restore-preview', 'restore',
            'restore-details', 'cancel', 'open', 'close', 'diff', 'delete', 'keep', 'unkeep',
            'copy', 'fetch', 'copy-delete', 'copies', 'prune')),
        subject TEXT NOT NULL,
        reason TEXT NOT NULL,
        pre_switch INTEGER NOT NULL DEFAULT 0,
        words_shown TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL CHECK (state IN ('pending', 'complete', 'failed', 'refused',
            'shown', 'staged', 'already-staged', 'withdrawn', 'nothing-staged', 'open',
            'closed')),
        outcome TEXT NOT NULL DEFAULT '',
        finished_micros INTEGER,
        rule TEXT NOT NULL DEFAULT '',
        timeline INTEGER NOT NULL DEFAULT 0,
        calls INTEGER NOT NULL DEFAULT 1,
        target TEXT NOT NULL DEFAULT '',
        parent TEXT NOT NULL DEFAULT '',
        bytes INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO requests_checked (id, asked_micros, uid, user_name, action, subject, reason,
        pre_switch, words_shown, state, outcome, finished_micros, rule, timeline, calls,
        target, parent, bytes)
    SELECT id, asked_micros, uid, user_name, action, subject, reason, pre_switch,
        words_shown, state, outcome, finished_micros, rule, timeline, calls, target, parent,
        bytes FROM requests;
    DROP TABLE requests;
    ALTER TABLE requests_checked RENAME TO requests;
    CREATE INDEX requests_by_action ON requests(action, state);
    CREATE TABLE snapshots_checked (
        name TEXT PRIMARY KEY,
        uuid TEXT NOT NULL,
        of_subvolume TEXT NOT NULL,
        taken_micros INTEGER NOT NULL,
        request_id INTEGER REFERENCES requests(id),
        state TEXT NOT NULL CHECK (state IN ('present', 'gone')),
        seen_micros INTEGER NOT NULL,
        gone_micros INTEGER
    );
    INSERT INTO snapshots_checked (rowid, name, uuid, of_subvolume, taken_micros, request_id,
        state, seen_micros, gone_micros)
    SELECT rowid, name, uuid, of_subvolume, taken_micros, request_id, state, seen_micros,
        gone_micros FROM snapshots;
    DROP TABLE snapshots;
    ALTER TABLE snapshots_checked RENAME TO snapshots;
    CREATE TABLE outcomes_checked (
        id TEXT PRIMARY KEY,
        result TEXT NOT NULL CHECK (result IN ('done', 'refused')),
        request TEXT NOT NULL,
        reason TEXT NOT NULL,
        finished_micros INTEGER NOT NULL,
        read_micros INTEGER NOT NULL,
        reported_micros INTEGER
    );
    INSERT INTO outcomes_checked (rowid, id, result, request, reason, finished_micros,
        read_micros, reported_micros)
    SELECT rowid, id, result, request, reason, finished_micros, read_micros, reported_micros
        FROM outcomes;
    DROP TABLE outcomes;
    ALTER TABLE outcomes_checked RENAME TO outcomes;",
    // 7: sealed copies are read back and checked on the target (`verify`), one row per copy
    // checked (or one for an act that checked nothing), naming the target. The action's
    // CHECK gains the word, so `requests` is rebuilt as in 6, with its rows, ids and index;
    // an index finds a copy's last verification for the list.
    "CREATE TABLE requests_checked (
        id INTEGER PRIMARY KEY,
        asked_micros INTEGER NOT NULL,
        uid INTEGER NOT NULL,
        user_name TEXT NOT NULL,
        action TEXT NOT NULL CHECK (action IN ('snapshot', 'restore-preview', 'restore',
            'restore-details', 'cancel', 'open', 'close', 'diff', 'delete', 'keep', 'unkeep',
            'copy', 'fetch', 'copy-delete', 'copies', 'prune', 'verify')),
        subject TEXT NOT NULL,
        reason TEXT NOT NULL,
        pre_switch INTEGER NOT NULL DEFAULT 0,
        words_shown TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL CHECK (state IN ('pending', 'complete', 'failed', 'refused',
            'shown', 'staged', 'already-staged', 'withdrawn', 'nothing-staged', 'open',
            'closed')),
        outcome TEXT NOT NULL DEFAULT '',
        finished_micros INTEGER,
        rule TEXT NOT NULL DEFAULT '',
        timeline INTEGER NOT NULL DEFAULT 0,
        calls INTEGER NOT NULL DEFAULT 1,
        target TEXT NOT NULL DEFAULT '',
        parent TEXT NOT NULL DEFAULT '',
        bytes INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO requests_checked (id, asked_micros, uid, user_name, action, subject, reason,
        pre_switch, words_shown, state, outcome, finished_micros, rule, timeline, calls,
        target, parent, bytes)
    SELECT id, asked_micros, uid, user_name, action, subject, reason, pre_switch,
        words_shown, state, outcome, finished_micros, rule, timeline, calls, target, parent,
        bytes FROM requests;
    DROP TABLE requests;
    ALTER TABLE requests_checked RENAME TO requests;
    CREATE INDEX requests_by_action ON requests(action, state);
    CREATE INDEX requests_by_copy ON requests(target, subject) WHERE target != '';",
    // 8: a set taken as a consistent cut: the units paused while its members were taken,
    // one row per such set, the names separated by one space.
    "CREATE TABLE cuts (
        request_id INTEGER PRIMARY KEY REFERENCES requests(id),
        units TEXT NOT NULL CHECK (units != '')
    );",
    // 9: what became of each hook of a consistent cut (before the freeze, after the thaw),
    // one line each, separated by a newline; empty: none ran.
    "ALTER TABLE cuts ADD COLUMN hooks TEXT NOT NULL DEFAULT '';",
    // 10: what a restore replaced, kept read-only in the store by the initrd (adr/0027): one
    // row per kept snapshot, from the outcome that names it; `restored` is the snapshot the
    // restore put back in its place, `boot_micros` when the initrd finished (the boot).
    "CREATE TABLE replaced (
        name TEXT PRIMARY KEY,
        of_subvolume TEXT NOT NULL,
        outcome_id TEXT NOT NULL,
        restored TEXT NOT NULL,
        boot_micros INTEGER NOT NULL
    );",
    // 11: the free space the keeper saw, a sample at most every few minutes over the last
    // days, for the rate it falls at (`tacid data health`'s days left).
    "CREATE TABLE free_space (
        at_micros INTEGER PRIMARY KEY,
        free_bytes INTEGER NOT NULL
    );",
];

/// The version whose migration adds the `CHECK` constraints: a journal below it is read for
/// values outside the lists before it is migrated.
const CHECKED_VERSION: i64 = 6;

mod copies;
mod cut;
mod health;
mod list;
mod retention;
mod types;
mod verify;
pub use copies::{CopyEnd, CopyRow};
pub use health::{LastAct, Newest, TargetActs, TimelineRuns};
pub use list::ListedRequest;
pub use retention::{Deletion, DeletionResult};
use types::StoredOutcomeResult;
pub use types::{outcome_result_text, Action, CopyAction, SnapshotState, State, Subject};
pub use verify::{Checked, LastVerification};

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
    #[error(transparent)]
    UnknownValue(Box<UnknownValue>),
}

/// A value, in a column the `CHECK` constraints cover, that no keeper writes: found in an
/// older journal before it is migrated.
#[derive(Debug, thiserror::Error)]
#[error("journal {path}: {table} row {row} has {column} {value:?}, which no keeper writes (known: {known}); the journal was changed by hand or is damaged: correct that row, or move the journal aside (the keeper then starts a new one)")]
pub struct UnknownValue {
    pub path: String,
    pub table: &'static str,
    /// The row's key: a request's id, a snapshot's name, an outcome's id.
    pub row: String,
    pub column: &'static str,
    pub value: String,
    pub known: String,
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

/// A request as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRow {
    pub id: i64,
    pub asked_micros: i64,
    pub uid: u32,
    pub user_name: String,
    pub action: Action,
    /// The subject as stored; [`RequestRow::parsed_subject`] reads its grammar.
    pub subject: String,
    pub reason: String,
    pub pre_switch: bool,
    pub words_shown: String,
    pub state: State,
    pub outcome: String,
    /// How many calls the row stands for: 1, or more for refusals counted in it (adr/0016).
    pub calls: u64,
}

impl RequestRow {
    /// What the row names, in the form its action writes.
    pub fn parsed_subject(&self) -> Subject {
        Subject::parse(self.action, &self.subject)
    }
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
    pub state: SnapshotState,
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
    pub result: OutcomeResult,
    pub request: String,
    pub reason: String,
    pub finished_micros: i64,
    pub reported: bool,
    /// What the restore replaced and kept (adr/0027): `(kept snapshot, of subvolume, the
    /// snapshot put back in its place)`; empty when nothing was kept.
    pub replaced: Vec<ReplacedRow>,
}

/// A snapshot that holds what a restore replaced (adr/0027).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplacedRow {
    /// The kept snapshot's name in the store.
    pub name: String,
    /// The subvolume (`@home`).
    pub of_subvolume: String,
    /// The snapshot the restore put back in its place.
    pub restored: String,
    /// When the boot's initrd finished the restore, µs since the epoch (its clock).
    pub boot_micros: i64,
    /// From when it is kept: the boot's time, or when the keeper read the outcome if that is
    /// later (an initrd without a set clock, months behind, would otherwise have it deleted
    /// by the first prune). Only read back; a row to record says the boot's time here.
    pub kept_from_micros: i64,
}

/// The journal, open.
#[derive(Debug)]
pub struct Journal {
    conn: Connection,
    path: PathBuf,
}

/// A request row about to be written: [`Journal::request`] or [`Journal::set_request`],
/// what else there is to say, then [`NewRequest::begin`].
#[derive(Debug)]
#[must_use = "nothing is journalled until `begin`"]
pub struct NewRequest<'a> {
    journal: &'a Journal,
    asker: &'a Asker,
    action: Action,
    subject: Subject,
    reason: &'a str,
    pre_switch: bool,
    words_shown: &'a str,
    state: State,
    outcome: &'a str,
    /// Committed with its own fsync (else left to the commit that settles it).
    synced: bool,
}

impl<'a> NewRequest<'a> {
    /// Why, in the asker's words.
    pub fn reason(self, reason: &'a str) -> Self {
        NewRequest { reason, ..self }
    }

    /// Asked for before a NixOS switch.
    pub fn pre_switch(self, pre_switch: bool) -> Self {
        NewRequest { pre_switch, ..self }
    }

    /// The words the asker was shown (a preview's), or gave back (a consent's).
    pub fn words_shown(self, words_shown: &'a str) -> Self {
        NewRequest {
            words_shown,
            ..self
        }
    }

    /// How it stands when written: anything but `pending` is finished at once.
    pub fn state(self, state: State) -> Self {
        NewRequest { state, ..self }
    }

    /// What the asker was told.
    pub fn outcome(self, outcome: &'a str) -> Self {
        NewRequest { outcome, ..self }
    }

    /// Write the row; its id.
    pub fn begin(self) -> Result<i64, JournalError> {
        let j = self.journal;
        if self.synced {
            return j.insert_request(&self);
        }
        j.conn
            .execute_batch("PRAGMA synchronous=NORMAL")
            .map_err(|e| j.err(e))?;
        let id = j.insert_request(&self);
        let restored = j
            .conn
            .execute_batch("PRAGMA synchronous=FULL")
            .map_err(|e| j.err(e));
        let id = id?;
        restored?;
        Ok(id)
    }
}

const PRESENT: SnapshotState = SnapshotState::Present;
const GONE: SnapshotState = SnapshotState::Gone;

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

/// The first value, in the columns the `CHECK` constraints cover, that no keeper writes: as
/// an error that names its row. Such a row was put there by hand or by damage; the keeper
/// does not guess what it meant (mapping it to a known value would rewrite a record of
/// consent), and starts only when it is put right.
fn unknown_values(conn: &Connection, path: &Path) -> Result<(), JournalError> {
    fn known(all: impl Iterator<Item = &'static str>) -> String {
        all.collect::<Vec<_>>().join(", ")
    }
    /// `(table, its key, column, whether a value is known, the values known)`.
    type Checked = (
        &'static str,
        &'static str,
        &'static str,
        fn(&str) -> bool,
        String,
    );
    let columns: [Checked; 4] = [
        (
            "requests",
            "id",
            "action",
            |v| Action::parse(v).is_some(),
            known(Action::ALL.iter().map(|a| a.as_str())),
        ),
        (
            "requests",
            "id",
            "state",
            |v| State::parse(v).is_some(),
            known(State::ALL.iter().map(|a| a.as_str())),
        ),
        (
            "snapshots",
            "name",
            "state",
            |v| SnapshotState::parse(v).is_some(),
            known(SnapshotState::ALL.iter().map(|a| a.as_str())),
        ),
        (
            "outcomes",
            "id",
            "result",
            |v| StoredOutcomeResult::parse(v).is_some(),
            known(
                StoredOutcomeResult::ALL
                    .iter()
                    .map(|r| outcome_result_text(*r)),
            ),
        ),
    ];
    let sq = sqlite_error(path);
    for (table, key, column, is_known, known) in columns {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT CAST({key} AS TEXT), {column} FROM {table} ORDER BY rowid"
            ))
            .map_err(sq)?;
        let mut rows = stmt.query([]).map_err(sq)?;
        while let Some(r) = rows.next().map_err(sq)? {
            // A value that is not text at all is outside the list too.
            let value: rusqlite::types::Value = r.get(1).map_err(sq)?;
            let text = match &value {
                rusqlite::types::Value::Text(t) => Some(t.as_str()),
                _ => None,
            };
            if !text.is_some_and(is_known) {
                return Err(JournalError::UnknownValue(Box::new(UnknownValue {
                    path: path.display().to_string(),
                    table,
                    row: r
                        .get::<_, Option<String>>(0)
                        .map_err(sq)?
                        .unwrap_or_default(),
                    column,
                    value: match value {
                        rusqlite::types::Value::Text(t) => t,
                        other => format!("{other:?}"),
                    },
                    known,
                })));
            }
        }
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
        conn.execute_batch("PRAGMA synchronous=FULL;").map_err(sq)?;
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
        // Migrations run without foreign keys (SQLite as built here has them on from the
        // start): one that rebuilds a table drops the table other rows refer to, and the
        // pragma cannot change inside the migration's transaction.
        journal
            .conn
            .execute_batch("PRAGMA foreign_keys=OFF;")
            .map_err(sq)?;
        journal.migrate()?;
        journal
            .conn
            .execute_batch("PRAGMA foreign_keys=ON;")
            .map_err(sq)?;
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
            if i as i64 + 1 == CHECKED_VERSION {
                unknown_values(&tx, &self.path)?;
            }
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

    /// A request of `action` on `subject` by `asker`, to be journalled before acting on it:
    /// `pending`, with no reason, words or outcome, synced, until the builder says other.
    pub fn request<'a>(
        &'a self,
        asker: &'a Asker,
        action: Action,
        subject: Subject,
    ) -> NewRequest<'a> {
        NewRequest {
            journal: self,
            asker,
            action,
            subject,
            reason: "",
            pre_switch: false,
            words_shown: "",
            state: State::Pending,
            outcome: "",
            synced: true,
        }
    }

    /// A snapshot set of `subvolumes`, to be journalled as pending and durable together with
    /// the commit that settles it.
    ///
    /// The row is committed to the WAL at once (a keeper that is killed leaves it for the
    /// reconciliation), but without its own fsync: the completing commit, which is FULL and
    /// comes before any answer, makes both durable. A power cut in between loses only an
    /// unanswered request, whose snapshots then list as of unknown origin (adr/0011).
    /// Restores are not begun this way: their consent must be on disk before the stem acts.
    pub fn set_request<'a>(
        &'a self,
        asker: &'a Asker,
        subvolumes: &[SubvolumeName],
    ) -> NewRequest<'a> {
        NewRequest {
            synced: false,
            ..self.request(asker, Action::Snapshot, Subject::Set(subvolumes.to_vec()))
        }
    }

    fn insert_request(&self, r: &NewRequest<'_>) -> Result<i64, JournalError> {
        let now = to_micros(SystemTime::now());
        let finished = if r.state == State::Pending {
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
                    i64::from(r.asker.uid),
                    r.asker.name,
                    r.action,
                    r.subject,
                    r.reason,
                    r.pre_switch,
                    r.words_shown,
                    r.state,
                    r.outcome,
                    finished
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
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
                    State::Refused
                ],
            )
            .map_err(sq)?;
        }
        tx.commit().map_err(sq)
    }

    /// Record the end of a request.
    pub fn finish(&self, id: i64, state: State, outcome: &str) -> Result<(), JournalError> {
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
        self.settle_set(id, members, State::Complete, outcome)
    }

    /// Mark a snapshot set failed; `members` are those that exist anyway.
    pub fn fail_set(
        &mut self,
        id: i64,
        members: &[Member],
        outcome: &str,
    ) -> Result<(), JournalError> {
        self.settle_set(id, members, State::Failed, outcome)
    }

    fn settle_set(
        &mut self,
        id: i64,
        members: &[Member],
        st: State,
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
        self.requests_where(
            "action = ?1 AND state = ?2",
            params![Action::Snapshot, State::Pending],
        )
    }

    /// Requests of `action` left pending (the keeper stopped before the stem answered).
    pub fn pending(&self, action: Action) -> Result<Vec<RequestRow>, JournalError> {
        self.requests_where(
            "action = ?1 AND state = ?2",
            params![action, State::Pending],
        )
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
            params![Action::Open, State::Open],
        )
    }

    /// Every request, oldest first (for tests and audits).
    pub fn requests(&self) -> Result<Vec<RequestRow>, JournalError> {
        self.requests_where("1", [])
    }

    /// The words this user was last shown for the restore `subject`, if shown since `since`.
    pub fn words_shown(
        &self,
        uid: u32,
        subject: &Subject,
        since_micros: i64,
    ) -> Result<Option<String>, JournalError> {
        self.conn
            .query_row(
                "SELECT words_shown FROM requests WHERE action = ?1 AND uid = ?2 AND subject = ?3
                   AND asked_micros >= ?4 ORDER BY id DESC LIMIT 1",
                params![
                    Action::RestorePreview,
                    i64::from(uid),
                    subject,
                    since_micros
                ],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The latest request that staged a restore of exactly `names` (the snapshot names it
    /// puts back, space-separated, as the stem reports them), of one snapshot or of a set.
    pub fn staging_of(&self, names: &str) -> Result<Option<RequestRow>, JournalError> {
        Ok(self
            .requests_where(
                "action = ?1 AND state = ?2",
                params![Action::Restore, State::Staged],
            )?
            .into_iter()
            .rfind(|r| r.parsed_subject().restored_names().as_deref() == Some(names)))
    }

    /// Record an outcome of the initrd; `false` when it was already recorded.
    pub fn record_outcome(&self, o: &OutcomeRow) -> Result<bool, JournalError> {
        let n = self
            .conn
            .execute(
                "INSERT OR IGNORE INTO outcomes (id, result, request, reason, finished_micros, read_micros)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![o.id, StoredOutcomeResult(o.result), o.request, o.reason, o.finished_micros, to_micros(SystemTime::now())],
            )
            .map_err(|e| self.err(e))?;
        for r in &o.replaced {
            self.conn
                .execute(
                    "INSERT OR IGNORE INTO replaced (name, of_subvolume, outcome_id, restored,
                         boot_micros)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![r.name, r.of_subvolume, o.id, r.restored, r.boot_micros],
                )
                .map_err(|e| self.err(e))?;
        }
        Ok(n == 1)
    }

    /// Every snapshot journalled as holding what a restore replaced, by name.
    pub fn replaced(&self) -> Result<Vec<ReplacedRow>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT r.name, r.of_subvolume, r.restored, r.boot_micros,
                     MAX(r.boot_micros, COALESCE(o.read_micros, r.boot_micros))
                 FROM replaced r LEFT JOIN outcomes o ON o.id = r.outcome_id ORDER BY r.name",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(ReplacedRow {
                    name: r.get(0)?,
                    of_subvolume: r.get(1)?,
                    restored: r.get(2)?,
                    boot_micros: r.get(3)?,
                    kept_from_micros: r.get(4)?,
                })
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        Ok(rows)
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
                        result: r.get::<_, StoredOutcomeResult>(1)?.0,
                        request: r.get(2)?,
                        reason: r.get(3)?,
                        finished_micros: r.get(4)?,
                        reported: r.get::<_, Option<i64>>(5)?.is_some(),
                        replaced: Vec::new(),
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let mut row = row;
        if let Some(o) = &mut row {
            let mut stmt = self
                .conn
                .prepare_cached(
                    "SELECT r.name, r.of_subvolume, r.restored, r.boot_micros,
                         MAX(r.boot_micros, COALESCE(o.read_micros, r.boot_micros))
                     FROM replaced r LEFT JOIN outcomes o ON o.id = r.outcome_id
                     WHERE r.outcome_id = ?1 ORDER BY r.rowid",
                )
                .map_err(|e| self.err(e))?;
            o.replaced = stmt
                .query_map([&o.id], |r| {
                    Ok(ReplacedRow {
                        name: r.get(0)?,
                        of_subvolume: r.get(1)?,
                        restored: r.get(2)?,
                        boot_micros: r.get(3)?,
                        kept_from_micros: r.get(4)?,
                    })
                })
                .map_err(|e| self.err(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.err(e))?;
        }
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
                "SELECT count(*) FROM requests WHERE action = ?1 AND state = ?2",
                params![Action::Snapshot, State::Failed],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }
}

impl From<JournalError> for crate::wire::KeeperError {
    fn from(e: JournalError) -> Self {
        if e.is_disk_full() {
            return crate::wire::KeeperError::Journal(format!(
                "{e}; nothing was done. The journal shares its filesystem with what tacid \
                 snapshots: free space on it (delete files, or old snapshots with \
                 `tacid data prune`) and ask again"
            ));
        }
        crate::wire::KeeperError::Journal(format!(
            "{e}; nothing was done. See `journalctl -u tacid-keeper`"
        ))
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
        j.set_request(&alice(), &[SubvolumeName::parse("@home").unwrap()])
            .reason("test")
            .begin()
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
        let subs = [
            SubvolumeName::parse("@home").unwrap(),
            SubvolumeName::parse("@log").unwrap(),
        ];
        let id = j
            .set_request(&alice(), &subs)
            .reason("why")
            .begin()
            .unwrap();
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
            .request(&alice(), Action::Delete, Subject::named("x"))
            .state(State::Refused)
            .outcome("no")
            .begin()
            .unwrap();
        let pending = pending_snapshot(&j);
        j.count_refusals(&[(refused, 10_000, 42), (pending, 5, 42)])
            .unwrap();
        let rows = j.requests().unwrap();
        assert_eq!((rows[0].calls, rows[0].state), (10_000, State::Refused));
        // Only refused rows are counted.
        assert_eq!(rows[1].calls, 1);
    }

    #[test]
    fn a_set_restore_is_found_by_the_names_it_puts_back() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("j")).unwrap();
        let name = |s: &str| layout::SnapshotName::parse(s).unwrap();
        let (p, l, h) = (
            name("@persist.2026-12-01T140200.123456Z"),
            name("@log.2026-12-01T140200.123456Z"),
            name("@home.2026-12-01T140200.123456Z"),
        );
        let names = format!("{p} {l} {h}");
        let subject = Subject::Restore {
            set: Some(12),
            names: vec![p, l, h],
        };
        assert_eq!(subject.render(), format!("set 12: {names}"));
        let staging = |subject: Subject| {
            j.request(&alice(), Action::Restore, subject)
                .words_shown("words")
                .state(State::Staged)
                .outcome("staged")
                .begin()
                .unwrap()
        };
        let single = staging(Subject::Restore {
            set: None,
            names: vec![h],
        });
        let set = staging(subject);
        assert_eq!(j.staging_of(&names).unwrap().map(|r| r.id), Some(set));
        assert_eq!(
            j.staging_of(&h.to_string()).unwrap().map(|r| r.id),
            Some(single)
        );
        assert_eq!(j.staging_of(&format!("{l} {h}")).unwrap(), None);
    }

    /// A journal as a keeper of schema `version` left it: the migrations up to `version`,
    /// and rows of that era (every action and every state the keeper writes today, which
    /// are all any keeper wrote, with the columns of that version). Request ids start at 1.
    fn journal_at(path: &Path, version: usize) {
        let conn = Connection::open(path).unwrap();
        for sql in &MIGRATIONS[..version] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch(&format!("PRAGMA user_version = {version}"))
            .unwrap();
        if version == 0 {
            return;
        }
        let request = |action: Action, subject: &str, state: State| {
            conn.execute(
                "INSERT INTO requests (asked_micros, uid, user_name, action, subject, reason,
                     state)
                 VALUES (1, 1000, 'alice', ?1, ?2, 'old', ?3)",
                params![action.as_str(), subject, state.as_str()],
            )
            .unwrap();
            conn.last_insert_rowid()
        };
        // Text, not the types: what was written then.
        for (i, action) in actions_at(version).enumerate() {
            request(*action, SUBJECT, State::ALL[i % State::ALL.len()]);
        }
        for state in State::ALL {
            request(Action::Snapshot, "@home @log", *state);
        }
        // Inserted out of name order: a list shows snapshots in the order journalled.
        for (name, state) in [("@log.b", "gone"), ("@home.a", "present")] {
            conn.execute(
                "INSERT INTO snapshots (name, uuid, of_subvolume, taken_micros, request_id,
                     state, seen_micros)
                 VALUES (?1, 'u', '@home', 1, 1, ?2, 1)",
                params![name, state],
            )
            .unwrap();
        }
        for (id, result, finished) in [("o1", "done", 1), ("o2", "refused", 2)] {
            conn.execute(
                "INSERT INTO outcomes (id, result, request, reason, finished_micros, read_micros)
                 VALUES (?1, ?2, 'r', 'why', ?3, 1)",
                params![id, result, finished],
            )
            .unwrap();
        }
        if version >= 2 {
            conn.execute(
                "INSERT INTO outcome_reports (outcome_id, uid, reported_micros)
                 VALUES ('o2', 1000, 5)",
                [],
            )
            .unwrap();
        }
        if version >= 3 {
            conn.execute_batch(
                "UPDATE requests SET timeline = 1, rule = 'timeline' WHERE id = 1;
                 INSERT INTO keeps (name, uid, user_name, kept_micros, request_id)
                 VALUES ('@home.a', 1000, 'alice', 3, 2);",
            )
            .unwrap();
        }
        if version >= 4 {
            conn.execute("UPDATE requests SET calls = 7 WHERE state = 'refused'", [])
                .unwrap();
        }
        if version >= 5 {
            conn.execute_batch(
                "UPDATE requests SET target = 'usb', parent = 'p', bytes = 4096
                     WHERE action = 'copy';
                 INSERT INTO copies (target, name, received_uuid, verified_micros)
                 VALUES ('usb', '@home.a', 'u', 6);",
            )
            .unwrap();
        }
    }

    const SUBJECT: &str = "@home.2026-12-01T140200.123456Z";

    /// The actions a keeper of schema `version` wrote: every one but those a later
    /// migration added to the CHECK (`verify`, 7).
    fn actions_at(version: usize) -> impl Iterator<Item = &'static Action> {
        Action::ALL
            .iter()
            .filter(move |a| version >= 7 || **a != Action::Verify)
    }

    #[test]
    fn a_journal_of_every_older_version_reads_back_typed_and_is_checked() {
        for version in 0..MIGRATIONS.len() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("j");
            journal_at(&path, version);
            let j = Journal::open(&path).unwrap_or_else(|e| panic!("version {version}: {e}"));
            assert_eq!(j.schema_version().unwrap(), SCHEMA_VERSION);
            let rows = j.requests().unwrap();
            if version == 0 {
                assert!(rows.is_empty());
            } else {
                let mut expected: Vec<(i64, Action, State)> = Vec::new();
                for (i, action) in actions_at(version).enumerate() {
                    expected.push((0, *action, State::ALL[i % State::ALL.len()]));
                }
                for state in State::ALL {
                    expected.push((0, Action::Snapshot, *state));
                }
                for (i, e) in expected.iter_mut().enumerate() {
                    e.0 = i as i64 + 1;
                }
                let got: Vec<(i64, Action, State)> =
                    rows.iter().map(|r| (r.id, r.action, r.state)).collect();
                assert_eq!(got, expected, "version {version}");
                let open = rows.iter().find(|r| r.action == Action::Open).unwrap();
                assert_eq!(
                    open.parsed_subject(),
                    Subject::Snapshot(layout::SnapshotName::parse(SUBJECT).unwrap())
                );
                let set = rows.iter().rfind(|r| r.action == Action::Snapshot).unwrap();
                assert_eq!(set.parsed_subject().render(), "@home @log");
                assert!(matches!(set.parsed_subject(), Subject::Set(s) if s.len() == 2));

                let snaps = j.snapshots().unwrap();
                let mut states: Vec<(String, SnapshotState)> =
                    snaps.iter().map(|s| (s.name.clone(), s.state)).collect();
                states.sort();
                assert_eq!(
                    states,
                    [
                        ("@home.a".to_owned(), SnapshotState::Present),
                        ("@log.b".to_owned(), SnapshotState::Gone)
                    ]
                );
                let mut listed = Vec::new();
                j.each_listed(|name, _| listed.push(name.to_owned()))
                    .unwrap();
                assert_eq!(listed, ["@log.b", "@home.a"], "journalled order kept");
                let latest = j.report_latest_outcome(1000).unwrap().unwrap();
                assert_eq!(
                    (latest.id.as_str(), latest.result),
                    ("o2", OutcomeResult::Refused)
                );
                // Version 2: alice's news was reported to her already.
                assert_eq!(latest.reported, version >= 2, "version {version}");
                let refused = rows.iter().find(|r| r.state == State::Refused).unwrap();
                assert_eq!(refused.calls, if version >= 4 { 7 } else { 1 });
                assert_eq!(
                    j.timeline_sets().unwrap().contains(&1),
                    version >= 3,
                    "version {version}"
                );
                assert_eq!(j.keeps().unwrap().len(), usize::from(version >= 3));
                let copy = j
                    .copy_requests()
                    .unwrap()
                    .into_iter()
                    .find(|r| r.action == Action::Copy)
                    .unwrap();
                if version >= 5 {
                    assert_eq!((copy.target.as_str(), copy.bytes), ("usb", 4096));
                    assert_eq!(j.copies_by_snapshot().unwrap()["@home.a"], ["usb"]);
                } else {
                    assert_eq!((copy.target.as_str(), copy.bytes), ("", 0));
                }
            }
            // The tables are whole again: their indexes, and foreign keys on and kept.
            let index: i64 = j
                .conn
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'index'
                       AND name = 'requests_by_action' AND tbl_name = 'requests'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(index, 1);
            let fk: i64 = j
                .conn
                .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
                .unwrap();
            assert_eq!(fk, 1);
            let broken = j
                .conn
                .prepare("PRAGMA foreign_key_check")
                .unwrap()
                .query_map([], |_| Ok(()))
                .unwrap()
                .count();
            assert_eq!(broken, 0, "version {version}");
            // The constraints hold for new rows.
            for bad in [
                "INSERT INTO requests (asked_micros, uid, user_name, action, subject, reason,
                     state) VALUES (1, 0, 'root', 'bogus', '', '', 'pending')",
                "INSERT INTO requests (asked_micros, uid, user_name, action, subject, reason,
                     state) VALUES (1, 0, 'root', 'snapshot', '', '', 'Pending')",
                "INSERT INTO snapshots (name, uuid, of_subvolume, taken_micros, state,
                     seen_micros) VALUES ('x', 'u', '@home', 1, 'lost', 1)",
                "INSERT INTO outcomes (id, result, request, reason, finished_micros,
                     read_micros) VALUES ('x', 'maybe', 'r', 'why', 1, 1)",
            ] {
                match j.conn.execute(bad, []) {
                    Err(rusqlite::Error::SqliteFailure(e, Some(m)))
                        if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_CHECK =>
                    {
                        assert!(m.contains("CHECK"), "{m}")
                    }
                    other => panic!("version {version}: {bad}: {other:?}"),
                }
            }
            // And every value of the types goes in.
            let root = Asker {
                uid: 0,
                name: "root".into(),
            };
            for action in Action::ALL {
                for state in State::ALL {
                    j.request(&root, *action, Subject::Nothing)
                        .state(*state)
                        .begin()
                        .unwrap();
                }
            }
        }
    }

    #[test]
    fn a_value_no_keeper_writes_stops_the_migration_naming_its_row() {
        let cases: [(&str, &str, &str, &str, &str); 5] = [
            (
                "UPDATE requests SET action = 'snapshot-set' WHERE id = 3",
                "requests",
                "3",
                "action",
                "snapshot-set",
            ),
            (
                "UPDATE requests SET state = 'done' WHERE id = 4",
                "requests",
                "4",
                "state",
                "done",
            ),
            (
                // Text affinity: stored as the text "7".
                "UPDATE requests SET state = 7 WHERE id = 5",
                "requests",
                "5",
                "state",
                "7",
            ),
            (
                "UPDATE snapshots SET state = 'Present' WHERE name = '@home.a'",
                "snapshots",
                "@home.a",
                "state",
                "Present",
            ),
            (
                "UPDATE outcomes SET result = '' WHERE id = 'o1'",
                "outcomes",
                "o1",
                "result",
                "",
            ),
        ];
        for (damage, table, row, column, value) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("j");
            journal_at(&path, 5);
            Connection::open(&path)
                .unwrap()
                .execute_batch(damage)
                .unwrap();
            match Journal::open(&path) {
                Err(e @ JournalError::UnknownValue(_)) => {
                    let JournalError::UnknownValue(u) = &e else {
                        unreachable!()
                    };
                    assert_eq!(
                        (u.table, u.row.as_str(), u.column, u.value.as_str()),
                        (table, row, column, value)
                    );
                    let message = e.to_string();
                    assert!(
                        message.contains(&format!("{table} row {row} has {column}")),
                        "{message}"
                    );
                }
                other => panic!("{damage}: expected UnknownValue, got {other:?}"),
            }
            // Nothing was changed: the journal is still at version 5, its rows as they were.
            let conn = Connection::open(&path).unwrap();
            let version: i64 = conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .unwrap();
            assert_eq!(version, 5);
        }
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
            .request(
                &alice(),
                Action::Snapshot,
                Subject::Set(vec![SubvolumeName::parse("@home").unwrap()]),
            )
            .reason("why")
            .pre_switch(true)
            .begin()
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
            (req.state, req.pre_switch, req.reason.as_str()),
            (State::Complete, true, "why")
        );
        assert!(j.pending_sets().unwrap().is_empty());

        let o = OutcomeRow {
            id: "t".into(),
            result: OutcomeResult::Done,
            request: "r".into(),
            reason: "ok".into(),
            finished_micros: 1,
            reported: false,
            replaced: vec![ReplacedRow {
                name: "@home.1970-01-01T000000.000001Z".into(),
                of_subvolume: "@home".into(),
                restored: "@home.1970-01-01T000000.000000Z".into(),
                boot_micros: 1,
                kept_from_micros: 1,
            }],
        };
        assert!(j.record_outcome(&o).unwrap());
        assert!(!j.record_outcome(&o).unwrap());
        // Kept from when the keeper read it: the boot's clock said 1970.
        let read_back = j.replaced().unwrap();
        assert!(
            read_back[0].kept_from_micros > 1_700_000_000_000_000,
            "{read_back:?}"
        );
        let expected: Vec<ReplacedRow> = o
            .replaced
            .iter()
            .map(|r| ReplacedRow {
                kept_from_micros: read_back[0].kept_from_micros,
                ..r.clone()
            })
            .collect();
        assert_eq!(read_back, expected, "journalled once");
        let reported = j.report_latest_outcome(1000).unwrap().unwrap();
        assert_eq!(reported.replaced, expected, "status can offer the undo");
        assert!(!reported.reported);
        assert!(j.report_latest_outcome(1000).unwrap().unwrap().reported);
        // Root reading it first does not use up another user's news.
        assert!(!j.report_latest_outcome(0).unwrap().unwrap().reported);
        assert!(!j.report_latest_outcome(1001).unwrap().unwrap().reported);
    }
}
