//! Refusals, rate-limited and coalesced in the journal (adr/0016).
//!
//! A refused request is journalled with the reason (adr/0011), and anybody can be refused
//! as often as they like. So, in windows of [`WINDOW`]: each caller's first
//! [`OWN_ROWS_PER_CALLER`] refusals get rows of their own, and all callers together at most
//! [`OWN_ROWS_OVERALL`]. Past its own allowance, a caller's refusals of one act are counted
//! in one row (its `calls`) until the window ends; past the overall one, every caller's
//! refusals of one act are counted in one row for "several callers". A row of its own costs
//! one commit; a counted refusal costs none: the counts reach the journal at most once a
//! second, by [`Limiter::to_flush`], in one commit for all of them.
//!
//! Pure logic: times are given in, so tests need no clock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use layout::human::unix_micros;

use crate::caps;
use crate::handles::Handles;
use crate::journal::{Action, Asker, State, Subject};
use crate::wire::KeeperError;

/// How long a window of allowances, and a row that counts refusals, lasts.
/// The same window and numbers as every allowance of log lines (`layout::allowance`).
pub const WINDOW: Duration = layout::allowance::WINDOW;
/// Rows of their own per caller per window.
pub const OWN_ROWS_PER_CALLER: u32 = layout::defaults::ALLOWANCE_PER_CALLER;
/// Rows of their own over all callers per window.
pub const OWN_ROWS_OVERALL: u32 = layout::defaults::ALLOWANCE_OVERALL;
/// The uid journalled for a row that counts the refusals of several callers.
pub const SEVERAL_CALLERS: u32 = u32::MAX;

/// Which refusals one counting row stands for: one caller's (or several callers') of one act.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub uid: u32,
    pub act: Action,
}

/// What to do with one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Journalling {
    /// Journal it in a row of its own, and log it.
    OwnRow,
    /// Journal it as the row that counts the refusals of `key` from now on, then tell
    /// [`Limiter::opened`] the row's id.
    OpenRow(Key),
    /// Counted in that row; nothing to write or log now.
    Counted,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    own_rows: u32,
}

impl Window {
    fn new(now: Instant) -> Window {
        Window {
            started: now,
            own_rows: 0,
        }
    }

    fn over(&self, now: Instant) -> bool {
        now.duration_since(self.started) >= WINDOW
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    /// Being written (by the refusal that opened it).
    Opening,
    Open(i64),
    /// The journal could not take it: the next refusal of the key opens it again.
    Failed,
}

#[derive(Debug, Clone, Copy)]
struct Counting {
    opened: Instant,
    row: Row,
    /// Refusals the row stands for, and how many of them the journal has.
    calls: u64,
    flushed: u64,
    last_micros: i64,
}

/// A count to write: row `id` stands for `calls` refusals, the last at `last_micros`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flush {
    pub id: i64,
    pub calls: u64,
    pub last_micros: i64,
}

/// A counting row whose window is over and whose count the journal has: for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    pub key: Key,
    pub id: i64,
    pub calls: u64,
}

/// The allowances and the counting rows.
#[derive(Debug)]
pub struct Limiter {
    overall: Window,
    callers: HashMap<u32, Window>,
    counting: HashMap<Key, Counting>,
}

impl Limiter {
    pub fn new(now: Instant) -> Limiter {
        Limiter {
            overall: Window::new(now),
            callers: HashMap::new(),
            counting: HashMap::new(),
        }
    }

    /// Decide what to do with a refusal of `act` for `uid`, at `now` (`now_micros` on the
    /// wall clock, for the journal).
    pub fn decide(&mut self, uid: u32, act: Action, now: Instant, now_micros: i64) -> Journalling {
        // An open counting row takes every refusal of its key until its window is over.
        for key in [
            Key { uid, act },
            Key {
                uid: SEVERAL_CALLERS,
                act,
            },
        ] {
            if let Some(c) = self.counting.get_mut(&key) {
                if now.duration_since(c.opened) < WINDOW {
                    return match c.row {
                        Row::Failed => {
                            c.row = Row::Opening;
                            c.calls += 1;
                            c.last_micros = now_micros;
                            Journalling::OpenRow(key)
                        }
                        Row::Opening | Row::Open(_) => {
                            c.calls += 1;
                            c.last_micros = now_micros;
                            Journalling::Counted
                        }
                    };
                }
            }
        }
        if self.overall.over(now) {
            self.overall = Window::new(now);
        }
        // Callers' windows are made only with a row of their own, so at most
        // OWN_ROWS_OVERALL a window: forget the ones that are over.
        if self.callers.len() > 2 * OWN_ROWS_OVERALL as usize {
            self.callers.retain(|_, w| !w.over(now));
        }
        let caller = self
            .callers
            .get(&uid)
            .filter(|w| !w.over(now))
            .copied()
            .unwrap_or_else(|| Window::new(now));
        let key = if caller.own_rows >= OWN_ROWS_PER_CALLER {
            Key { uid, act }
        } else if self.overall.own_rows >= OWN_ROWS_OVERALL {
            Key {
                uid: SEVERAL_CALLERS,
                act,
            }
        } else {
            self.overall.own_rows += 1;
            self.callers.insert(
                uid,
                Window {
                    own_rows: caller.own_rows + 1,
                    ..caller
                },
            );
            return Journalling::OwnRow;
        };
        match self.counting.get_mut(&key) {
            // A row whose window is over but whose count the journal does not have yet (or
            // that is still being written): counted there, since it is about to be written.
            Some(old) if old.row == Row::Opening || old.flushed < old.calls => {
                old.calls += 1;
                old.last_micros = now_micros;
                Journalling::Counted
            }
            _ => {
                self.counting.insert(
                    key,
                    Counting {
                        opened: now,
                        row: Row::Opening,
                        calls: 1,
                        flushed: 0,
                        last_micros: now_micros,
                    },
                );
                Journalling::OpenRow(key)
            }
        }
    }

    /// The row for `key` was journalled as `id` (`None`: the journal could not take it).
    /// It already stands for the refusal that opened it.
    pub fn opened(&mut self, key: Key, id: Option<i64>) {
        if let Some(c) = self.counting.get_mut(&key) {
            match id {
                Some(id) => {
                    c.row = Row::Open(id);
                    c.flushed = 1;
                }
                None => c.row = Row::Failed,
            }
        }
    }

    /// The counts the journal does not have yet.
    pub fn to_flush(&self) -> Vec<Flush> {
        self.counting
            .values()
            .filter_map(|c| match c.row {
                Row::Open(id) if c.calls > c.flushed => Some(Flush {
                    id,
                    calls: c.calls,
                    last_micros: c.last_micros,
                }),
                _ => None,
            })
            .collect()
    }

    /// The journal has `written`. Rows whose window is over and whose count is written are
    /// forgotten; they are returned, for the log.
    pub fn flushed(&mut self, written: &[Flush], now: Instant) -> Vec<Closed> {
        for c in self.counting.values_mut() {
            if let Row::Open(id) = c.row {
                if let Some(f) = written.iter().find(|f| f.id == id) {
                    c.flushed = c.flushed.max(f.calls);
                }
            }
        }
        let mut closed = Vec::new();
        self.counting.retain(|key, c| {
            let over = now.duration_since(c.opened) >= WINDOW;
            let done = c.flushed >= c.calls || c.row == Row::Failed;
            if over && done {
                if let Row::Open(id) = c.row {
                    closed.push(Closed {
                        key: *key,
                        id,
                        calls: c.calls,
                    });
                }
                return false;
            }
            true
        });
        closed
    }
}

/// The refusals service: journals and logs a refused request, or only counts it past the
/// caller's allowance; owns the counts.
#[derive(Debug)]
pub struct Refusals {
    limiter: Mutex<Limiter>,
    h: Handles,
}

impl Refusals {
    pub fn new(h: Handles) -> Refusals {
        Refusals {
            limiter: Mutex::new(Limiter::new(Instant::now())),
            h,
        }
    }

    /// The limiter, whatever a panicking holder left in it (counts are only counts).
    fn limiter(&self) -> std::sync::MutexGuard<'_, Limiter> {
        self.limiter.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub async fn refuse(
        &self,
        asker: &Asker,
        act: Action,
        subject: &str,
        words: &str,
        why: String,
    ) -> KeeperError {
        self.journal_refusal(asker, act, subject, words, &why).await;
        KeeperError::NotAuthorized(why)
    }

    /// Log and journal a refused request, with its subject and the words it was sent
    /// capped; past the caller's allowance, only counted (adr/0016). A journal that cannot
    /// take it is logged, and the refusal stands.
    pub async fn journal_refusal(
        &self,
        asker: &Asker,
        act: Action,
        subject: &str,
        words: &str,
        why: &str,
    ) {
        self.journal_refusal_of(asker, act, caps::name(subject), words, why)
            .await;
    }

    /// [`Self::journal_refusal`] for a subject the keeper built from names it parsed (a set's
    /// members), capped at what such a subject can be rather than at one name.
    pub async fn journal_refusal_built(
        &self,
        asker: &Asker,
        act: Action,
        subject: &str,
        words: &str,
        why: &str,
    ) {
        let subject = layout::human::cap(subject, caps::MAX_BUILT_SUBJECT_BYTES);
        self.journal_refusal_of(asker, act, subject, words, why)
            .await;
    }

    pub async fn journal_refusal_of(
        &self,
        asker: &Asker,
        act: Action,
        subject: std::borrow::Cow<'_, str>,
        words: &str,
        why: &str,
    ) {
        let words = layout::human::cap(words, caps::MAX_WORDS_BYTES);
        let verdict = self.limiter().decide(
            asker.uid,
            act,
            Instant::now(),
            unix_micros(SystemTime::now()),
        );
        let (row_asker, outcome, key) = match verdict {
            Journalling::Counted => return,
            Journalling::OwnRow => {
                tracing::warn!(uid = asker.uid, user = %asker.name, act = %act, subject = %subject, "refused: {why}");
                (asker.clone(), why.to_owned(), None)
            }
            Journalling::OpenRow(key) => {
                let minutes = WINDOW.as_secs() / 60;
                let (who, row_asker) = if key.uid == SEVERAL_CALLERS {
                    (
                        "callers past the keeper's overall allowance".to_owned(),
                        Asker {
                            uid: SEVERAL_CALLERS,
                            name: format!("several callers, the first {}", asker.name),
                        },
                    )
                } else {
                    (format!("{} (uid {})", asker.name, asker.uid), asker.clone())
                };
                tracing::warn!(
                    uid = asker.uid, user = %asker.name, act = %act, subject = %subject,
                    "refused again and again: {why}; the refusals of {act} from {who} are counted in one journal row for {minutes} minutes, not journalled or logged one by one"
                );
                let outcome = format!(
                    "{why} (this row counts the refusals of {act} from {who} over {minutes} \
                     minutes, in its calls; the subject shown is the first one's)"
                );
                (row_asker, outcome, Some(key))
            }
        };
        let (subject, words) = (subject.into_owned(), words.into_owned());
        let recorded = self
            .h
            .journal(move |j| {
                j.request(&row_asker, act, Subject::named(subject))
                    .words_shown(&words)
                    .state(State::Refused)
                    .outcome(&outcome)
                    .begin()
            })
            .await;
        if let Err(e) = &recorded {
            tracing::error!("could not journal a refusal: {}", e.message());
        }
        if let Some(key) = key {
            self.limiter().opened(key, recorded.ok());
        }
    }

    /// Write the counts of refusals the journal does not have yet, in one commit; the
    /// daemon calls this every second and when it stops (adr/0016).
    pub async fn flush(&self) {
        let counts = self.limiter().to_flush();
        if !counts.is_empty() {
            let rows: Vec<(i64, u64, i64)> = counts
                .iter()
                .map(|f| (f.id, f.calls, f.last_micros))
                .collect();
            if let Err(e) = self.h.journal(move |j| j.count_refusals(&rows)).await {
                tracing::error!("could not journal the count of refusals: {}", e.message());
                return;
            }
        }
        let closed = self.limiter().flushed(&counts, Instant::now());
        for c in closed {
            tracing::info!(
                uid = c.key.uid,
                act = %c.key.act,
                row = c.id,
                "{} of {} counted in journal row {}",
                crate::words::count(c.calls, "refusal", "refusals"),
                c.key.act,
                c.id
            );
        }
    }
}

/// Whether a look of `kind` the stem refused (a diff, a listing of a target) may be logged
/// now for `uid`: within adr/0016's allowance per caller, kind and time.
pub fn stem_refusals_logged(kind: &'static str, uid: u32) -> layout::allowance::Logging {
    static LOGS: std::sync::LazyLock<Mutex<layout::allowance::LogAllowance<(&'static str, u32)>>> =
        std::sync::LazyLock::new(|| {
            Mutex::new(layout::allowance::LogAllowance::new(Instant::now()))
        });
    LOGS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .admit(&(kind, uid), Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELETE: Action = Action::Delete;
    const KEEP: Action = Action::Keep;

    #[test]
    fn a_caller_gets_rows_of_its_own_then_one_counting_row_per_act() {
        let t0 = Instant::now();
        let mut l = Limiter::new(t0);
        for i in 0..OWN_ROWS_PER_CALLER {
            assert_eq!(
                l.decide(1000, DELETE, t0, i64::from(i)),
                Journalling::OwnRow
            );
        }
        let key = Key {
            uid: 1000,
            act: DELETE,
        };
        assert_eq!(l.decide(1000, DELETE, t0, 10), Journalling::OpenRow(key));
        // Before the row has an id, refusals are counted, not opened twice.
        assert_eq!(l.decide(1000, DELETE, t0, 11), Journalling::Counted);
        l.opened(key, Some(7));
        for i in 0..10_000 {
            assert_eq!(l.decide(1000, DELETE, t0, 12 + i), Journalling::Counted);
        }
        // Another act of the same caller: a row of its own that counts.
        let keep = Key {
            uid: 1000,
            act: KEEP,
        };
        assert_eq!(l.decide(1000, KEEP, t0, 1), Journalling::OpenRow(keep));
        // Another caller still has its allowance.
        assert_eq!(l.decide(1001, DELETE, t0, 1), Journalling::OwnRow);
        let f = l.to_flush();
        assert_eq!(
            f,
            [Flush {
                id: 7,
                calls: 10_002,
                last_micros: 10_011
            }]
        );
        assert!(l.flushed(&f, t0).is_empty(), "the window is not over");
        assert!(l.to_flush().is_empty());
    }

    #[test]
    fn past_the_overall_allowance_several_callers_share_one_row() {
        let t0 = Instant::now();
        let mut l = Limiter::new(t0);
        for uid in 0..OWN_ROWS_OVERALL {
            assert_eq!(l.decide(uid, DELETE, t0, 0), Journalling::OwnRow);
        }
        let several = Key {
            uid: SEVERAL_CALLERS,
            act: DELETE,
        };
        assert_eq!(l.decide(5000, DELETE, t0, 0), Journalling::OpenRow(several));
        l.opened(several, Some(1));
        for uid in 5001..70_000 {
            assert_eq!(l.decide(uid, DELETE, t0, 0), Journalling::Counted);
        }
        assert!(
            l.callers.len() <= OWN_ROWS_OVERALL as usize,
            "{}",
            l.callers.len()
        );
    }

    #[test]
    fn a_new_window_gives_the_allowance_back_after_the_count_is_written() {
        let t0 = Instant::now();
        let mut l = Limiter::new(t0);
        for _ in 0..OWN_ROWS_PER_CALLER {
            l.decide(1000, DELETE, t0, 0);
        }
        let key = Key {
            uid: 1000,
            act: DELETE,
        };
        assert_eq!(l.decide(1000, DELETE, t0, 0), Journalling::OpenRow(key));
        l.opened(key, Some(3));
        assert_eq!(l.decide(1000, DELETE, t0, 5), Journalling::Counted);
        let later = t0 + WINDOW;
        // A new window: rows of its own again; the old row's count is still written.
        assert_eq!(l.decide(1000, DELETE, later, 6), Journalling::OwnRow);
        let f = l.to_flush();
        assert_eq!(f[0].calls, 2);
        let closed = l.flushed(&f, later);
        assert_eq!(
            closed,
            [Closed {
                key,
                id: 3,
                calls: 2
            }]
        );
        assert!(l.counting.is_empty());
    }

    #[test]
    fn a_row_the_journal_could_not_take_is_opened_again() {
        let t0 = Instant::now();
        let mut l = Limiter::new(t0);
        for _ in 0..OWN_ROWS_PER_CALLER {
            l.decide(1, DELETE, t0, 0);
        }
        let key = Key {
            uid: 1,
            act: DELETE,
        };
        assert_eq!(l.decide(1, DELETE, t0, 0), Journalling::OpenRow(key));
        l.opened(key, None);
        assert!(l.to_flush().is_empty());
        assert_eq!(l.decide(1, DELETE, t0, 0), Journalling::OpenRow(key));
        l.opened(key, Some(9));
        assert_eq!(l.decide(1, DELETE, t0, 0), Journalling::Counted);
        assert_eq!(l.to_flush()[0].calls, 3);
    }
}
