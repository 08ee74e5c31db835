//! The numbered steps of both jobs: what the log says, and where the test-only fault switches
//! (`TACID_TEST_STOP_AFTER=N`, `tacid.test_pause_after=N`) stop.
//!
//! The numbers are a contract with the boot tier (it pauses at each of them and cuts the
//! power): add new steps with new numbers, never renumber.

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
    /// The outcome record "done", written durably.
    RestoreOutcome,
    RestoreRemoveRequest,
    RestoreCommitRequest,
    /// The replaced subvolume (now under the swap name) deleted, nested subvolumes first.
    RestoreDeleteOld,
    RestoreCommitDelete,
    /// The outcome record "refused", written durably.
    RefuseOutcome,
    /// The refused request renamed to `.restore.refused`.
    RefuseMoveAside,
    RefuseCommit,
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
    pub const ALL: [Step; 23] = [
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
        Step::WipeCopy,
        Step::WipeCommitCopy,
        Step::WipeExchange,
        Step::WipeCommitExchange,
        Step::WipeDeleteOld,
        Step::WipeCommitDelete,
    ];

    /// The steps a restore that is honoured goes through, in order.
    pub const RESTORE: [Step; 10] = [
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
    ];

    /// The steps a refused request goes through.
    pub const REFUSE: [Step; 3] = [
        Step::RefuseOutcome,
        Step::RefuseMoveAside,
        Step::RefuseCommit,
    ];

    /// The steps that delete a subvolume left under a swap name by an earlier, abandoned run
    /// (with no request, or before a request's own copy is made).
    pub const LEFTOVER: [Step; 2] = [Step::DeleteStale, Step::CommitStale];

    /// The steps that set aside what cannot be deleted (in place of a deletion's two).
    pub const SET_ASIDE: [Step; 2] = [Step::SetAside, Step::CommitSetAside];

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
    /// aside 16-17, wipe 21-26).
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
            Step::WipeCopy => 21,
            Step::WipeCommitCopy => 22,
            Step::WipeExchange => 23,
            Step::WipeCommitExchange => 24,
            Step::WipeDeleteOld => 25,
            Step::WipeCommitDelete => 26,
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
            Step::RestoreOutcome => "restore: write the outcome",
            Step::RestoreRemoveRequest => "restore: remove the request",
            Step::RestoreCommitRequest => "restore: commit the request's removal",
            Step::RestoreDeleteOld => "restore: delete the replaced subvolume",
            Step::RestoreCommitDelete => "restore: commit the deletion",
            Step::RefuseOutcome => "refuse: write the outcome",
            Step::RefuseMoveAside => "refuse: move the request aside",
            Step::RefuseCommit => "refuse: commit",
            Step::DeleteStale => "delete a leftover subvolume",
            Step::CommitStale => "commit the leftover's deletion",
            Step::SetAside => "set aside a leftover that cannot be deleted",
            Step::CommitSetAside => "commit setting it aside",
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
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
        );
        assert_eq!(Step::REFUSE.map(|s| s.number()), [11, 12, 13]);
        assert_eq!(Step::LEFTOVER.map(|s| s.number()), [14, 15]);
        assert_eq!(Step::SET_ASIDE.map(|s| s.number()), [16, 17]);
        assert_eq!(Step::WIPE.map(|s| s.number()), [21, 22, 23, 24, 25, 26]);
        // The groups are every step, each once.
        let mut grouped: Vec<Step> = [
            &Step::RESTORE[..],
            &Step::REFUSE[..],
            &Step::LEFTOVER[..],
            &Step::SET_ASIDE[..],
            &Step::WIPE[..],
        ]
        .concat();
        assert_eq!(grouped.len(), Step::ALL.len());
        grouped.sort_by_key(|s| s.number());
        assert_eq!(grouped, Step::ALL);
    }
}
