//! The numbered steps of both jobs: what the log says, and where the test-only fault switches
//! (`TACID_TEST_STOP_AFTER`, `tacid.test_pause_after`) stop.
//!
//! The numbers are a contract with the boot tier (it pauses at each of them and cuts the
//! power): add new steps with new numbers, never renumber.
//!
//! A restore of several members (a set) takes some steps once per member, so a step can
//! occur more than once in a run: the switches take `N` (the first time step N is done, as
//! always) or `N.k` (the k-th time, from 1), which is [`StepAt`]; the order of a set's
//! occurrences is [`Step::restore_sequence`].

use std::collections::HashMap;
use std::fmt;

/// One durable-or-not change the initrd makes; a crash can come right after any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Writable snapshot of the chosen snapshot under the swap name (e.g. `@home.tacid-swap`).
    RestoreCopy,
    RestoreCommitCopy,
    /// Mount-point directories of nested mounts (`.snapshots` in `@persist`) in the copy.
    RestorePrepare,
    /// `RENAME_EXCHANGE` of the live name and the swap name.
    RestoreExchange,
    RestoreCommitExchange,
    /// The replaced subvolume (under the swap name) kept: a read-only snapshot of it made in
    /// the store under the layout's name grammar (adr/0027).
    RestoreKeep,
    RestoreCommitKeep,
    /// The outcome record "done" written to a temporary file and synced, not yet renamed
    /// into place (a power cut here leaves that file; the next run removes it).
    RestoreOutcomeTemp,
    /// The outcome record "done", renamed into place durably.
    RestoreOutcome,
    RestoreRemoveRequest,
    RestoreCommitRequest,
    /// The replaced subvolume (now under the swap name) deleted, nested subvolumes first.
    RestoreDeleteOld,
    RestoreCommitDelete,
    /// The outcome record "refused" written to a temporary file and synced, not renamed yet.
    RefuseOutcomeTemp,
    /// The outcome record "refused", renamed into place durably.
    RefuseOutcome,
    /// The refused request renamed to `.restore.refused`.
    RefuseMoveAside,
    RefuseCommit,
    /// A member found exchanged while another has no copy of its snapshot (which the order of
    /// the steps never leaves, but the disk is untrusted): the exchanged one is exchanged
    /// back, before the request is refused.
    RestoreUndo,
    RestoreCommitUndo,
    /// A swap name left over from an earlier, abandoned request, deleted; or what an earlier
    /// run set aside because it could not delete it.
    DeleteStale,
    CommitStale,
    /// What is under a swap name could not be deleted: renamed to the stuck name (or moved
    /// inside what is already there), so the swap name is free.
    SetAside,
    CommitSetAside,
    /// Writable snapshot of `@root-blank` under `@root.tacid-swap` (or `@root` when missing).
    WipeCopy,
    WipeCommitCopy,
    WipeExchange,
    WipeCommitExchange,
    WipeDeleteOld,
    WipeCommitDelete,
}

impl Step {
    /// Every step, in number order.
    pub const ALL: [Step; 29] = [
        Step::RestoreCopy,
        Step::RestoreCommitCopy,
        Step::RestorePrepare,
        Step::RestoreExchange,
        Step::RestoreCommitExchange,
        Step::RestoreOutcome,
        Step::RestoreRemoveRequest,
        Step::RestoreCommitRequest,
        Step::RestoreDeleteOld,
        Step::RestoreCommitDelete,
        Step::RefuseOutcome,
        Step::RefuseMoveAside,
        Step::RefuseCommit,
        Step::DeleteStale,
        Step::CommitStale,
        Step::SetAside,
        Step::CommitSetAside,
        Step::RestoreUndo,
        Step::RestoreCommitUndo,
        Step::WipeCopy,
        Step::WipeCommitCopy,
        Step::WipeExchange,
        Step::WipeCommitExchange,
        Step::WipeDeleteOld,
        Step::WipeCommitDelete,
        Step::RestoreOutcomeTemp,
        Step::RefuseOutcomeTemp,
        Step::RestoreKeep,
        Step::RestoreCommitKeep,
    ];

    /// The steps a restore of one member that is honoured goes through, in order (a set's:
    /// [`Step::restore_sequence`]). Below the hard floor the two steps that keep the replaced
    /// subvolume are left out ([`Step::restore_sequence_deleting`]).
    pub const RESTORE: [Step; 13] = [
        Step::RestoreCopy,
        Step::RestoreCommitCopy,
        Step::RestorePrepare,
        Step::RestoreExchange,
        Step::RestoreCommitExchange,
        Step::RestoreKeep,
        Step::RestoreCommitKeep,
        Step::RestoreOutcomeTemp,
        Step::RestoreOutcome,
        Step::RestoreRemoveRequest,
        Step::RestoreCommitRequest,
        Step::RestoreDeleteOld,
        Step::RestoreCommitDelete,
    ];

    /// The steps a refused request goes through.
    pub const REFUSE: [Step; 4] = [
        Step::RefuseOutcomeTemp,
        Step::RefuseOutcome,
        Step::RefuseMoveAside,
        Step::RefuseCommit,
    ];

    /// The steps that delete a subvolume left under a swap name by an earlier, abandoned run
    /// (with no request, or before a request's own copy is made).
    pub const LEFTOVER: [Step; 2] = [Step::DeleteStale, Step::CommitStale];

    /// The steps that set aside what cannot be deleted (in place of a deletion's two).
    pub const SET_ASIDE: [Step; 2] = [Step::SetAside, Step::CommitSetAside];

    /// The steps that exchange a member back (once per exchanged member) before a set found
    /// half exchanged, with a member that has no copy, is refused.
    pub const UNDO: [Step; 2] = [Step::RestoreUndo, Step::RestoreCommitUndo];

    /// The steps of a wipe of an existing `@root`.
    pub const WIPE: [Step; 6] = [
        Step::WipeCopy,
        Step::WipeCommitCopy,
        Step::WipeExchange,
        Step::WipeCommitExchange,
        Step::WipeDeleteOld,
        Step::WipeCommitDelete,
    ];

    /// The step's number (stable; restore 1-10, refusal 11-13, leftovers 14-15, setting
    /// aside 16-17, exchanging back 18-19, wipe 21-26; the outcome's temporary file before
    /// its rename, of a restore 27 and of a refusal 28; keeping the replaced subvolume 29-30).
    pub fn number(self) -> u32 {
        match self {
            Step::RestoreCopy => 1,
            Step::RestoreCommitCopy => 2,
            Step::RestorePrepare => 3,
            Step::RestoreExchange => 4,
            Step::RestoreCommitExchange => 5,
            Step::RestoreOutcome => 6,
            Step::RestoreRemoveRequest => 7,
            Step::RestoreCommitRequest => 8,
            Step::RestoreDeleteOld => 9,
            Step::RestoreCommitDelete => 10,
            Step::RefuseOutcome => 11,
            Step::RefuseMoveAside => 12,
            Step::RefuseCommit => 13,
            Step::DeleteStale => 14,
            Step::CommitStale => 15,
            Step::SetAside => 16,
            Step::CommitSetAside => 17,
            Step::RestoreUndo => 18,
            Step::RestoreCommitUndo => 19,
            Step::WipeCopy => 21,
            Step::WipeCommitCopy => 22,
            Step::WipeExchange => 23,
            Step::WipeCommitExchange => 24,
            Step::WipeDeleteOld => 25,
            Step::WipeCommitDelete => 26,
            Step::RestoreOutcomeTemp => 27,
            Step::RefuseOutcomeTemp => 28,
            Step::RestoreKeep => 29,
            Step::RestoreCommitKeep => 30,
        }
    }

    /// A short name for logs and the pause message.
    pub fn name(self) -> &'static str {
        match self {
            Step::RestoreCopy => "restore: copy the snapshot",
            Step::RestoreCommitCopy => "restore: commit the copy",
            Step::RestorePrepare => "restore: make mount points in the copy",
            Step::RestoreExchange => "restore: exchange the names",
            Step::RestoreCommitExchange => "restore: commit the exchange",
            Step::RestoreKeep => "restore: keep the replaced subvolume as a read-only snapshot",
            Step::RestoreCommitKeep => "restore: commit the kept snapshot",
            Step::RestoreOutcomeTemp => "restore: write the outcome's temporary file",
            Step::RestoreOutcome => "restore: write the outcome",
            Step::RestoreRemoveRequest => "restore: remove the request",
            Step::RestoreCommitRequest => "restore: commit the request's removal",
            Step::RestoreDeleteOld => "restore: delete the replaced subvolume",
            Step::RestoreCommitDelete => "restore: commit the deletion",
            Step::RefuseOutcomeTemp => "refuse: write the outcome's temporary file",
            Step::RefuseOutcome => "refuse: write the outcome",
            Step::RefuseMoveAside => "refuse: move the request aside",
            Step::RefuseCommit => "refuse: commit",
            Step::DeleteStale => "delete a leftover subvolume",
            Step::CommitStale => "commit the leftover's deletion",
            Step::SetAside => "set aside a leftover that cannot be deleted",
            Step::CommitSetAside => "commit setting it aside",
            Step::RestoreUndo => "restore: exchange a member back",
            Step::RestoreCommitUndo => "restore: commit the exchange back",
            Step::WipeCopy => "wipe-root: copy the blank root",
            Step::WipeCommitCopy => "wipe-root: commit the copy",
            Step::WipeExchange => "wipe-root: exchange the names",
            Step::WipeCommitExchange => "wipe-root: commit the exchange",
            Step::WipeDeleteOld => "wipe-root: delete the old root",
            Step::WipeCommitDelete => "wipe-root: commit the deletion",
        }
    }

    /// The step with this number.
    pub fn from_number(n: u32) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.number() == n)
    }

    /// Every step occurrence of an honoured restore of `members` members that a run goes
    /// through from the start, in order, each with its occurrence (from 1): every copy and
    /// its commit, then for each member the mount points, the exchange and its commit, then
    /// each replaced subvolume kept as a read-only snapshot and the commit, then the outcome,
    /// the request's removal and its commit, then each replaced subvolume's deletion (from
    /// under the swap name) and its commit. For one member this is [`Step::RESTORE`], each
    /// once; for none, nothing.
    pub fn restore_sequence(members: usize) -> Vec<(Step, u32)> {
        Step::sequence(members, true)
    }

    /// [`Step::restore_sequence`] of a boot below the hard floor: nothing is kept.
    pub fn restore_sequence_deleting(members: usize) -> Vec<(Step, u32)> {
        Step::sequence(members, false)
    }

    fn sequence(members: usize, keep: bool) -> Vec<(Step, u32)> {
        if members == 0 {
            return Vec::new();
        }
        let each = |steps: &[Step]| steps.repeat(members);
        let steps = [
            each(&[Step::RestoreCopy, Step::RestoreCommitCopy]),
            each(&[
                Step::RestorePrepare,
                Step::RestoreExchange,
                Step::RestoreCommitExchange,
            ]),
            if keep {
                each(&[Step::RestoreKeep, Step::RestoreCommitKeep])
            } else {
                Vec::new()
            },
            vec![
                Step::RestoreOutcomeTemp,
                Step::RestoreOutcome,
                Step::RestoreRemoveRequest,
                Step::RestoreCommitRequest,
            ],
            each(&[Step::RestoreDeleteOld, Step::RestoreCommitDelete]),
        ]
        .concat();
        let mut count = Occurrences::default();
        steps.into_iter().map(|s| (s, count.next(s))).collect()
    }
}

/// Counts the steps of one run as they are done: which occurrence of its step each one is.
#[derive(Debug, Clone, Default)]
pub struct Occurrences(HashMap<u32, u32>);

impl Occurrences {
    /// `step` was done (again): the how-many-th time in this run, from 1.
    pub fn next(&mut self, step: Step) -> u32 {
        let n = self.0.entry(step.number()).or_insert(0);
        *n += 1;
        *n
    }
}

/// An occurrence of a step, where a fault switch stops: written `N` (the first, `N.1` too)
/// or `N.k` (the k-th, from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepAt {
    pub number: u32,
    pub occurrence: u32,
}

impl StepAt {
    /// The first occurrence of `step`.
    pub fn first(step: Step) -> StepAt {
        StepAt::new(step, 1)
    }

    /// The `occurrence`-th occurrence of `step` (from 1).
    pub fn new(step: Step, occurrence: u32) -> StepAt {
        StepAt {
            number: step.number(),
            occurrence,
        }
    }

    /// `N` or `N.k`, digits only, `k` at least 1; anything else is `None`. `N` need not be a
    /// step's number (then it never matches).
    pub fn parse(text: &str) -> Option<StepAt> {
        let digits = |s: &str| -> Option<u32> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let (number, occurrence) = match text.split_once('.') {
            None => (digits(text)?, 1),
            Some((n, k)) => (digits(n)?, digits(k)?),
        };
        (occurrence >= 1).then_some(StepAt { number, occurrence })
    }

    /// True for the `occurrence`-th time `step` is done.
    pub fn is(self, step: Step, occurrence: u32) -> bool {
        self == StepAt::new(step, occurrence)
    }
}

/// `N` for a first occurrence (what the switches and the pause line always said), `N.k` for
/// a later one.
impl fmt::Display for StepAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.occurrence == 1 {
            write!(f, "{}", self.number)
        } else {
            write!(f, "{}.{}", self.number, self.occurrence)
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {} ({})", self.number(), self.name())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is how a test reports
mod tests {
    use super::*;

    #[test]
    fn numbers_are_unique_and_round_trip() {
        let mut numbers: Vec<u32> = Step::ALL.iter().map(|s| s.number()).collect();
        numbers.sort();
        numbers.dedup();
        assert_eq!(numbers.len(), Step::ALL.len());
        for s in Step::ALL {
            assert_eq!(Step::from_number(s.number()), Some(s));
        }
        assert_eq!(Step::from_number(0), None);
        assert_eq!(
            Step::RESTORE.map(|s| s.number()),
            [1, 2, 3, 4, 5, 29, 30, 27, 6, 7, 8, 9, 10]
        );
        assert_eq!(Step::REFUSE.map(|s| s.number()), [28, 11, 12, 13]);
        assert_eq!(Step::LEFTOVER.map(|s| s.number()), [14, 15]);
        assert_eq!(Step::SET_ASIDE.map(|s| s.number()), [16, 17]);
        assert_eq!(Step::UNDO.map(|s| s.number()), [18, 19]);
        assert_eq!(Step::WIPE.map(|s| s.number()), [21, 22, 23, 24, 25, 26]);
        // The groups are every step, each once.
        let mut grouped: Vec<Step> = [
            &Step::RESTORE[..],
            &Step::REFUSE[..],
            &Step::LEFTOVER[..],
            &Step::SET_ASIDE[..],
            &Step::UNDO[..],
            &Step::WIPE[..],
        ]
        .concat();
        assert_eq!(grouped.len(), Step::ALL.len());
        grouped.sort_by_key(|s| s.number());
        assert_eq!(grouped, Step::ALL);
    }

    #[test]
    fn a_sets_sequence_repeats_the_per_member_steps() {
        assert_eq!(Step::restore_sequence(0), []);
        let one: Vec<(Step, u32)> = Step::RESTORE.iter().map(|&s| (s, 1)).collect();
        assert_eq!(Step::restore_sequence(1), one);
        let three: Vec<String> = Step::restore_sequence(3)
            .into_iter()
            .map(|(s, k)| StepAt::new(s, k).to_string())
            .collect();
        assert_eq!(
            three.join(" "),
            "1 2 1.2 2.2 1.3 2.3 3 4 5 3.2 4.2 5.2 3.3 4.3 5.3 29 30 29.2 30.2 29.3 30.3 \
             27 6 7 8 9 10 9.2 10.2 9.3 10.3"
        );
        let deleting: Vec<String> = Step::restore_sequence_deleting(1)
            .into_iter()
            .map(|(s, k)| StepAt::new(s, k).to_string())
            .collect();
        assert_eq!(deleting.join(" "), "1 2 3 4 5 27 6 7 8 9 10");
    }

    #[test]
    fn a_stop_point_is_n_or_n_dot_k() {
        let at = |n, k| {
            Some(StepAt {
                number: n,
                occurrence: k,
            })
        };
        assert_eq!(StepAt::parse("4"), at(4, 1));
        assert_eq!(StepAt::parse("4.1"), at(4, 1));
        assert_eq!(StepAt::parse("4.3"), at(4, 3));
        assert_eq!(StepAt::parse("21"), at(21, 1));
        for bad in [
            "", "4.", ".2", "4.0", "4.2.1", "-4", "+4", " 4", "4 ", "x", "4.x", "4,2",
        ] {
            assert_eq!(StepAt::parse(bad), None, "{bad:?}");
        }
        assert_eq!(StepAt::first(Step::RestoreExchange).to_string(), "4");
        assert_eq!(StepAt::new(Step::RestoreExchange, 2).to_string(), "4.2");
        assert!(StepAt::parse("4.2").unwrap().is(Step::RestoreExchange, 2));
        assert!(!StepAt::parse("4").unwrap().is(Step::RestoreExchange, 2));
        let mut count = Occurrences::default();
        assert_eq!(count.next(Step::RestoreCopy), 1);
        assert_eq!(count.next(Step::RestoreCommitCopy), 1);
        assert_eq!(count.next(Step::RestoreCopy), 2);
    }
}
