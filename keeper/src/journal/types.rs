//! The journal's small vocabularies, typed: what a request row records (its [`Action`]), how
//! it stands ([`State`]), what it names ([`Subject`]), whether a snapshot is still on the
//! disk ([`SnapshotState`]) and how the initrd's restore ended (the layout's
//! [`OutcomeResult`], stored as text here).
//!
//! Each is stored as the same text every keeper has written (old journals read as they are);
//! the text is spelled only here, and the schema's `CHECK` constraints hold the same lists
//! (a test keeps the two together).

use std::fmt;

use layout::{OutcomeResult, SnapshotName, SubvolumeName};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

/// A closed set of words stored as text: its spellings, conversions to and from SQL, and
/// comparison with text (for tests and logs that hold the text).
macro_rules! stored_words {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The text stored for it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )*
                }
            }

            /// The value stored as `text`, if any.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $( $text => Some($name::$variant), )*
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl FromSql for $name {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                let text = value.as_str()?;
                $name::parse(text).ok_or_else(|| {
                    FromSqlError::Other(
                        format!(
                            "{text:?} is not a {} this keeper knows ({})",
                            stringify!($name),
                            $name::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
                        )
                        .into(),
                    )
                })
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.as_str() == other
            }
        }
    };
}

stored_words! {
    /// What a request row records.
    pub enum Action {
        /// A snapshot set taken.
        Snapshot = "snapshot",
        /// What a restore would change, shown with the words that consent to it.
        RestorePreview = "restore-preview",
        Restore = "restore",
        /// The changed paths a restore would delete, listed to an approver.
        RestoreDetails = "restore-details",
        Cancel = "cancel",
        /// A snapshot opened read-only for a person (adr/0019); its row stays `open` until it
        /// is closed, and then says how.
        Open = "open",
        /// An open snapshot closed: by the person, by the stem when idle, or with a restart.
        Close = "close",
        /// The changed paths of a part of a snapshot, listed to root or an approver.
        Diff = "diff",
        /// A snapshot deleted, by a person or by a rule.
        Delete = "delete",
        /// A snapshot marked to keep.
        Keep = "keep",
        /// The mark taken off again.
        Unkeep = "unkeep",
        /// A snapshot sent to a copy target.
        Copy = "copy",
        /// A copy received back into the local store.
        Fetch = "fetch",
        /// A copy deleted on a target.
        DeleteCopy = "copy-delete",
        /// A look at what a copy target holds (journalled only when refused).
        Copies = "copies",
        /// Retention run by hand (journalled only when refused; its deletions are rows of
        /// their own).
        Prune = "prune",
        /// A sealed copy read back on its target and checked, down to its full copy, without
        /// receiving it: one row per copy checked.
        Verify = "verify",
    }
}

stored_words! {
    /// How a request row stands.
    pub enum State {
        Pending = "pending",
        Complete = "complete",
        Failed = "failed",
        Refused = "refused",
        Shown = "shown",
        Staged = "staged",
        AlreadyStaged = "already-staged",
        Withdrawn = "withdrawn",
        NothingStaged = "nothing-staged",
        /// An open snapshot still open, as far as the keeper knows.
        Open = "open",
        Closed = "closed",
    }
}

stored_words! {
    /// Whether a journalled snapshot is on the disk.
    pub enum SnapshotState {
        Present = "present",
        Gone = "gone",
    }
}

/// How the initrd's restore ended, as the `outcomes` table stores it (the type is the
/// layout's, which the outcome file is parsed into).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StoredOutcomeResult(pub OutcomeResult);

impl StoredOutcomeResult {
    /// Every value, as the `CHECK` constraint lists them.
    pub const ALL: &'static [OutcomeResult] = &[OutcomeResult::Done, OutcomeResult::Refused];

    pub fn as_str(self) -> &'static str {
        outcome_result_text(self.0)
    }

    pub fn parse(text: &str) -> Option<StoredOutcomeResult> {
        Self::ALL
            .iter()
            .find(|r| outcome_result_text(**r) == text)
            .map(|r| StoredOutcomeResult(*r))
    }
}

/// The text an outcome's result is stored (and shown) as: `done` or `refused`.
pub fn outcome_result_text(r: OutcomeResult) -> &'static str {
    match r {
        OutcomeResult::Done => "done",
        OutcomeResult::Refused => "refused",
    }
}

impl ToSql for StoredOutcomeResult {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for StoredOutcomeResult {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let text = value.as_str()?;
        StoredOutcomeResult::parse(text).ok_or_else(|| {
            FromSqlError::Other(
                format!("{text:?} is not an outcome's result (done, refused)").into(),
            )
        })
    }
}

/// The acts on a copy target: each is an [`Action`], named apart so that what only they do
/// (the stem's direction, what a listing settles) is matched without a wildcard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyAction {
    /// A snapshot sent to a target.
    Copy,
    /// A copy received back into the local store.
    Fetch,
    /// A copy deleted on a target.
    DeleteCopy,
}

impl CopyAction {
    pub fn action(self) -> Action {
        match self {
            CopyAction::Copy => Action::Copy,
            CopyAction::Fetch => Action::Fetch,
            CopyAction::DeleteCopy => Action::DeleteCopy,
        }
    }

    /// The act on a target `action` is, if it is one.
    pub fn of(action: Action) -> Option<CopyAction> {
        match action {
            Action::Copy => Some(CopyAction::Copy),
            Action::Fetch => Some(CopyAction::Fetch),
            Action::DeleteCopy => Some(CopyAction::DeleteCopy),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.action().as_str()
    }
}

impl From<CopyAction> for Action {
    fn from(a: CopyAction) -> Action {
        a.action()
    }
}

/// What a request row names, in the `subject` column. The grammars the keeper parses back
/// are written and read here only:
///
/// - a snapshot set being taken: its subvolumes, separated by single spaces (`@home @log`);
/// - a restore (its preview, its consent): the snapshot names it puts back, separated by
///   single spaces, in the order the boot exchanges them; for a set, after `set N: `
///   (`set 12: @persist.… @log.… @home.…`), so that a set's consent is never a single
///   restore's, nor the other way round;
/// - one snapshot's name, for the acts on one snapshot;
/// - anything else: text as a caller gave it (capped by the caller), or nothing.
///
/// Names in the first two hold no spaces (the layout's grammar: ASCII, no blanks), so the
/// single space separates them unambiguously; a caller's text, which may hold anything, is
/// only ever [`Subject::Named`] and is never split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// Nothing named (a cancel).
    Nothing,
    /// One snapshot (what is opened, diffed, deleted, kept, copied, fetched...).
    Snapshot(SnapshotName),
    /// A name or text as a caller gave it (capped): kept as it is, never split.
    Named(String),
    /// The subvolumes of a snapshot set, in the order asked.
    Set(Vec<SubvolumeName>),
    /// The snapshot names a restore puts back; `set`: the set's id, for a set's restore.
    Restore {
        set: Option<i64>,
        names: Vec<SnapshotName>,
    },
}

impl Subject {
    /// One name, or a caller's text, as it is.
    pub fn named(name: impl Into<String>) -> Subject {
        let name = name.into();
        if name.is_empty() {
            Subject::Nothing
        } else {
            Subject::Named(name)
        }
    }

    /// A restore of one snapshot.
    pub fn restore(name: SnapshotName) -> Subject {
        Subject::Restore {
            set: None,
            names: vec![name],
        }
    }

    /// The text stored for it.
    pub fn render(&self) -> String {
        self.to_string()
    }

    /// The subject of a row of `action` stored as `text`: the form the keeper writes for
    /// that action when the text is one, else the text as it is (a refused caller's).
    pub fn parse(action: Action, text: &str) -> Subject {
        let parsed = match action {
            Action::Snapshot => Subject::parse_set(text),
            Action::Restore | Action::RestorePreview => Subject::parse_restore(text),
            Action::Cancel => None,
            Action::RestoreDetails
            | Action::Open
            | Action::Close
            | Action::Diff
            | Action::Delete
            | Action::Keep
            | Action::Unkeep
            | Action::Copy
            | Action::Fetch
            | Action::DeleteCopy
            | Action::Verify => SnapshotName::parse(text).ok().map(Subject::Snapshot),
            Action::Copies | Action::Prune => None,
        };
        parsed.unwrap_or_else(|| Subject::named(text))
    }

    fn parse_set(text: &str) -> Option<Subject> {
        let subs = text
            .split(' ')
            .map(|w| SubvolumeName::parse(w).ok())
            .collect::<Option<Vec<_>>>()?;
        Some(Subject::Set(subs))
    }

    fn parse_restore(text: &str) -> Option<Subject> {
        let (set, names) = match text.split_once(": ") {
            Some((head, names)) if head.starts_with("set ") => {
                (Some(head["set ".len()..].parse::<i64>().ok()?), names)
            }
            _ => (None, text),
        };
        let names = restore_names(names)?;
        // One spelling only: what parses renders back to itself.
        let subject = Subject::Restore { set, names };
        (subject.to_string() == text).then_some(subject)
    }

    /// The snapshot names a restore's subject puts back, as they are written
    /// (space-separated, without a set's `set N: `); `None` for any other subject.
    pub fn restored_names(&self) -> Option<String> {
        match self {
            Subject::Restore { names, .. } => Some(join(names)),
            _ => None,
        }
    }
}

/// The snapshot names of a restore, as written (`@home.… @log.…`).
fn restore_names(text: &str) -> Option<Vec<SnapshotName>> {
    text.split(' ')
        .map(|n| SnapshotName::parse(n).ok())
        .collect()
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Nothing => Ok(()),
            Subject::Snapshot(name) => write!(f, "{name}"),
            Subject::Named(text) => f.write_str(text),
            Subject::Set(subs) => f.write_str(&join(subs)),
            Subject::Restore { set: None, names } => f.write_str(&join(names)),
            Subject::Restore {
                set: Some(id),
                names,
            } => write!(f, "set {id}: {}", join(names)),
        }
    }
}

impl ToSql for Subject {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> SnapshotName {
        SnapshotName::parse(s).unwrap()
    }

    #[test]
    fn every_word_reads_back_as_itself() {
        for a in Action::ALL {
            assert_eq!(Action::parse(a.as_str()), Some(*a));
        }
        for s in State::ALL {
            assert_eq!(State::parse(s.as_str()), Some(*s));
        }
        for s in SnapshotState::ALL {
            assert_eq!(SnapshotState::parse(s.as_str()), Some(*s));
        }
        for r in StoredOutcomeResult::ALL {
            assert_eq!(
                StoredOutcomeResult::parse(outcome_result_text(*r)),
                Some(StoredOutcomeResult(*r))
            );
        }
        for c in [CopyAction::Copy, CopyAction::Fetch, CopyAction::DeleteCopy] {
            assert_eq!(CopyAction::of(c.action()), Some(c));
        }
        assert_eq!(Action::parse("Snapshot"), None);
        assert_eq!(State::parse(""), None);
    }

    #[test]
    fn subjects_render_and_parse_back() {
        let a = name("@persist.2026-12-01T140200.123456Z");
        let b = name("@home.2026-12-01T140200.123456Z");
        let set = Subject::Restore {
            set: Some(12),
            names: vec![a, b],
        };
        let text = set.render();
        assert_eq!(
            text,
            "set 12: @persist.2026-12-01T140200.123456Z @home.2026-12-01T140200.123456Z"
        );
        assert_eq!(Subject::parse(Action::Restore, &text), set);
        assert_eq!(Subject::parse(Action::RestorePreview, &text), set);
        assert_eq!(
            set.restored_names().unwrap(),
            "@persist.2026-12-01T140200.123456Z @home.2026-12-01T140200.123456Z"
        );
        let single = Subject::Restore {
            set: None,
            names: vec![b],
        };
        assert_eq!(single.render(), b.to_string());
        assert_eq!(Subject::parse(Action::Restore, &single.render()), single);

        let subs = Subject::Set(vec![
            SubvolumeName::parse("@home").unwrap(),
            SubvolumeName::parse("@log").unwrap(),
        ]);
        assert_eq!(subs.render(), "@home @log");
        assert_eq!(Subject::parse(Action::Snapshot, "@home @log"), subs);

        assert_eq!(Subject::parse(Action::Cancel, ""), Subject::Nothing);
        assert_eq!(Subject::Nothing.render(), "");
    }

    #[test]
    fn a_callers_text_is_never_split_or_taken_for_a_grammar() {
        // What a refused caller sent (capped, escaped or not) reads back as it was.
        for odd in [
            "set 12: @home.2026-12-01T140200.123456Z  @log.x",
            "set x: @home.2026-12-01T140200.123456Z",
            "@home  @log",
            " @home",
            "@home\t@log",
            "@home\n@log",
            "a\u{0}b \u{fffd} \\x80 set 1: é",
            "@home.2026-12-01T140200.123456Z ",
            "set 12: ",
        ] {
            for action in [
                Action::Snapshot,
                Action::Restore,
                Action::Open,
                Action::Fetch,
            ] {
                let s = Subject::parse(action, odd);
                assert_eq!(s, Subject::Named(odd.to_owned()), "{action} {odd:?}");
                assert_eq!(s.render(), odd);
                assert_eq!(s.restored_names(), None);
            }
        }
        // One snapshot named to open reads back as that snapshot.
        let n = "@home.2026-12-01T140200.123456Z";
        let s = Subject::parse(Action::Open, n);
        assert_eq!(s, Subject::Snapshot(name(n)));
        assert_eq!(s.render(), n);
        assert_eq!(Subject::parse(Action::Cancel, n), Subject::Named(n.into()));
    }
}
