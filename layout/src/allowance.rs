//! An allowance of log lines per caller and time (adr/0016: bounded per time, not per
//! call). Each caller's first [`ALLOWANCE_PER_CALLER`] lines in a window of
//! [`ALLOWANCE_WINDOW_SECS`], and all callers' first [`ALLOWANCE_OVERALL`] together, are
//! written; past that a caller's calls are only counted, and the next line written for it
//! says how many were not. The keeper's refusals (`keeper::refusals`) count their journal
//! rows with the same numbers.
//!
//! Pure logic: times are given in, so tests need no clock.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::defaults::{ALLOWANCE_OVERALL, ALLOWANCE_PER_CALLER, ALLOWANCE_WINDOW_SECS};

/// The window of the allowances.
pub const WINDOW: Duration = Duration::from_secs(ALLOWANCE_WINDOW_SECS);

/// Whether to write a line now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logging {
    /// Write it, saying how many of this caller's calls, and how many of callers past the
    /// overall allowance, were not written since its last line.
    Log {
        unlogged: u64,
        unlogged_overall: u64,
    },
    /// Counted; write nothing.
    Quiet,
}

#[derive(Debug, Clone, Copy)]
struct Caller {
    started: Instant,
    logged: u32,
    unlogged: u64,
}

/// Lines per caller `K` and time.
#[derive(Debug)]
pub struct LogAllowance<K> {
    started: Instant,
    logged: u32,
    unlogged_overall: u64,
    callers: HashMap<K, Caller>,
}

impl<K: Hash + Eq + Clone> LogAllowance<K> {
    pub fn new(now: Instant) -> Self {
        LogAllowance {
            started: now,
            logged: 0,
            unlogged_overall: 0,
            callers: HashMap::new(),
        }
    }

    /// One call of `caller` at `now` that would write a line.
    pub fn admit(&mut self, caller: &K, now: Instant) -> Logging {
        if now.saturating_duration_since(self.started) >= WINDOW {
            self.started = now;
            self.logged = 0;
        }
        // A caller is remembered only once it logged, so at most the overall allowance a
        // window; those whose window is over and who have nothing left to say go.
        if self.callers.len() > 2 * ALLOWANCE_OVERALL as usize {
            self.callers
                .retain(|_, c| now.saturating_duration_since(c.started) < WINDOW || c.unlogged > 0);
        }
        let over_overall = self.logged >= ALLOWANCE_OVERALL;
        match self.callers.get_mut(caller) {
            Some(c) => {
                if now.saturating_duration_since(c.started) >= WINDOW {
                    c.started = now;
                    c.logged = 0;
                }
                if c.logged >= ALLOWANCE_PER_CALLER || over_overall {
                    c.unlogged += 1;
                    return Logging::Quiet;
                }
                c.logged += 1;
                self.logged += 1;
                let unlogged = std::mem::take(&mut c.unlogged);
                Logging::Log {
                    unlogged,
                    unlogged_overall: std::mem::take(&mut self.unlogged_overall),
                }
            }
            None if over_overall => {
                self.unlogged_overall += 1;
                Logging::Quiet
            }
            None => {
                self.callers.insert(
                    caller.clone(),
                    Caller {
                        started: now,
                        logged: 1,
                        unlogged: 0,
                    },
                );
                self.logged += 1;
                Logging::Log {
                    unlogged: 0,
                    unlogged_overall: std::mem::take(&mut self.unlogged_overall),
                }
            }
        }
    }
}

impl Logging {
    /// What to add to the line written: empty when nothing went unwritten.
    pub fn note(&self) -> String {
        match *self {
            Logging::Log {
                unlogged,
                unlogged_overall,
            } if unlogged > 0 || unlogged_overall > 0 => {
                let mut parts = Vec::new();
                if unlogged > 0 {
                    parts.push(format!("{unlogged} more like it from this caller"));
                }
                if unlogged_overall > 0 {
                    parts.push(format!(
                        "{unlogged_overall} from callers past the overall allowance"
                    ));
                }
                format!(
                    " (not logged one by one before this: {}; at most {ALLOWANCE_PER_CALLER} lines a caller and {ALLOWANCE_OVERALL} in all per {} minutes)",
                    parts.join(", "),
                    ALLOWANCE_WINDOW_SECS / 60
                )
            }
            _ => String::new(),
        }
    }

    pub fn log(&self) -> bool {
        matches!(self, Logging::Log { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_bounded_per_window_and_the_next_line_counts_it() {
        let t0 = Instant::now();
        let mut a = LogAllowance::<u32>::new(t0);
        let logged = (0..10_000)
            .filter(|i| a.admit(&7, t0 + Duration::from_millis(*i)).log())
            .count();
        assert_eq!(logged, ALLOWANCE_PER_CALLER as usize);
        let next = a.admit(&7, t0 + WINDOW + Duration::from_secs(11));
        assert_eq!(
            next,
            Logging::Log {
                unlogged: 10_000 - u64::from(ALLOWANCE_PER_CALLER),
                unlogged_overall: 0
            }
        );
        assert!(next.note().contains("9990 more"), "{}", next.note());
    }

    #[test]
    fn many_callers_share_the_overall_allowance() {
        let t0 = Instant::now();
        let mut a = LogAllowance::<u32>::new(t0);
        let logged = (0..100_000u32).filter(|uid| a.admit(uid, t0).log()).count();
        assert_eq!(logged, ALLOWANCE_OVERALL as usize);
        assert!(a.callers.len() <= ALLOWANCE_OVERALL as usize);
        match a.admit(&1, t0 + WINDOW) {
            Logging::Log {
                unlogged_overall, ..
            } => assert_eq!(unlogged_overall, 100_000 - u64::from(ALLOWANCE_OVERALL)),
            v => panic!("{v:?}"),
        }
    }
}
