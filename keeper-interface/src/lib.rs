//! `org.tacid.Keeper1` as both sides see it, what crosses the bus between the CLI and the
//! keeper: the proxy ([`Keeper1Proxy`]), its argument and result types, and its named
//! errors. The server is the keeper's `keeper1` module; its introspection is committed
//! beside this crate (`org.tacid.Keeper1.xml`) and a test in the keeper holds the two equal.
//!
//! D-Bus has no "absent": an empty string or `0` means "none" in the fields that say so.
//! Times are microseconds since the epoch, UTC. Strings that somebody other than the keeper
//! chose (paths, user names, reasons, what a boot said) are in the visible form of
//! `layout::escape` (adr/0017): `\\` and `\xHH`, no control character, and reversible
//! (`layout::escape::unescape`) to the exact bytes.

pub mod health;
pub mod metrics;
pub mod prune;
pub mod space;
pub mod words;

use serde::{Deserialize, Serialize};
use zbus::Type;

/// One snapshot as the keeper knows it: the disk says it exists, the journal says why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SnapshotEntry {
    /// Its name in the store (`@home.2026-12-01T140200.123456Z`).
    pub name: String,
    /// The subvolume it is of (`@home`).
    pub of: String,
    /// Where that subvolume is mounted, for people (`/home`).
    pub of_path: String,
    /// When it was taken, µs since the epoch (UTC).
    pub taken_micros: i64,
    /// The reason given when it was taken, escaped; empty when none or unknown.
    pub reason: String,
    /// Who asked: user name (escaped), and uid (`u32::MAX` when the journal does not know).
    pub asked_by: String,
    pub asked_by_uid: u32,
    /// `journal` (the keeper took it), `fetched` (the keeper fetched it from a copy target:
    /// `reason` says which), `replaced` (the boot kept what a restore replaced, adr/0027), or
    /// `unknown-origin` (on disk, never journalled).
    pub origin: String,
    /// Taken before a switch to a new configuration.
    pub pre_switch: bool,
    /// The staged restore names it (it cannot be deleted until that is cancelled).
    pub pinned: bool,
    /// The journal's id of the set it was taken in (0 when it is in no set: fetched, or
    /// of unknown origin).
    pub set_id: i64,
    /// The targets holding a verified copy of it, as the keeper last knew (its journal of
    /// copies, corrected each time it lists a target), in name order.
    pub copies: Vec<String>,
    /// The configured targets it is the last common parent with (the newest snapshot of its
    /// subvolume each holds a copy of): retention keeps it, and `Delete` refuses it.
    pub last_common_parent_of: Vec<String>,
    /// The set is a consistent cut: the units root named were paused while every member
    /// was taken. Their names, escaped, separated by one space; empty when it is not.
    pub cut_units: String,
    /// It holds what a restore replaced (origin `replaced`, adr/0027): the snapshot that
    /// restore put back in its place; empty when it does not.
    pub replaced_by_restore_of: String,
    /// Of such a snapshot: when the boot put that restore in place, and until when retention
    /// keeps it (µs since the epoch, UTC); 0 otherwise.
    pub replaced_micros: i64,
    pub kept_until_micros: i64,
}

/// One snapshot in the answer to `ListRows`: the fields of [`SnapshotEntry`] but `copies`,
/// plain (no nesting), borrowed from the message where it is read. The targets holding a
/// copy are the same answer's [`CopyOfRow`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SnapshotRow<'a> {
    pub name: &'a str,
    pub of: &'a str,
    pub of_path: &'a str,
    pub taken_micros: i64,
    pub reason: &'a str,
    pub asked_by: &'a str,
    pub asked_by_uid: u32,
    pub origin: &'a str,
    pub pre_switch: bool,
    pub pinned: bool,
    pub set_id: i64,
    pub cut_units: &'a str,
    pub replaced_by_restore_of: &'a str,
    pub replaced_micros: i64,
    pub kept_until_micros: i64,
}

/// A target holding a verified copy of the snapshot in row `row` (from 0) of the same
/// `ListRows` answer; rows in order, targets of a row in name order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyOfRow<'a> {
    pub row: u32,
    pub target: &'a str,
    /// The row is the last common parent with this target (a configured one): retention
    /// keeps it.
    pub last_common_parent: bool,
    /// What failed when the copy's last verification failed (a sealed target's copy read
    /// back and checked; escaped); empty when it passed, was never verified, or was made
    /// again since.
    pub verify_failed: &'a str,
}

impl SnapshotRow<'_> {
    /// The entry `List` answers for this row, with its targets.
    pub fn to_entry(
        &self,
        copies: Vec<String>,
        last_common_parent_of: Vec<String>,
    ) -> SnapshotEntry {
        SnapshotEntry {
            name: self.name.to_owned(),
            of: self.of.to_owned(),
            of_path: self.of_path.to_owned(),
            taken_micros: self.taken_micros,
            reason: self.reason.to_owned(),
            asked_by: self.asked_by.to_owned(),
            asked_by_uid: self.asked_by_uid,
            origin: self.origin.to_owned(),
            pre_switch: self.pre_switch,
            pinned: self.pinned,
            set_id: self.set_id,
            copies,
            last_common_parent_of,
            cut_units: self.cut_units.to_owned(),
            replaced_by_restore_of: self.replaced_by_restore_of.to_owned(),
            replaced_micros: self.replaced_micros,
            kept_until_micros: self.kept_until_micros,
        }
    }
}

/// The answer to `Snapshot`: every member exists and is committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SnapshotSet {
    /// The journal's id of the set.
    pub set_id: i64,
    /// The members, one per subvolume asked for.
    pub snapshots: Vec<SnapshotEntry>,
    /// What became of each hook of a consistent cut (adr/0026: before the freeze, after
    /// the thaw), in the order they ran; empty when none ran.
    pub hooks: Vec<CutHook>,
}

/// One hook of a consistent cut, as it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CutHook {
    /// It exited 0 within its limit.
    pub ok: bool,
    /// `before db.service as postgres: exited 0 in 0.2 s, …` (escaped; its output capped).
    pub says: String,
}

/// What a restore of one snapshot would do, in the words shown to the person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct RestorePreview {
    pub snapshot: String,
    pub of: String,
    pub of_path: String,
    pub taken_micros: i64,
    /// The exact words; `RestoreConfirm` must be given these same words back.
    pub words: String,
    /// This very restore is already staged.
    pub already_staged: bool,
}

/// What changed in a subvolume since a snapshot, as counted for a restore's preview.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct ChangeCount {
    /// False when it was not counted (a member not put back, or a count that could not be
    /// made in time); every number is then 0.
    pub counted: bool,
    /// False when the count was cut short by its time limit: every number is "at least".
    pub complete: bool,
    pub files_modified: u64,
    pub files_added: u64,
    pub files_removed: u64,
    pub directories_added: u64,
    pub directories_removed: u64,
    pub bytes_written: u64,
}

/// One member of a snapshot set, in a set restore's preview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SetRestoreMember {
    pub snapshot: String,
    pub of: String,
    pub of_path: String,
    pub taken_micros: i64,
    /// This restore puts it back.
    pub put_back: bool,
    /// Why it is not put back (empty when it is): `left-out` (not among those asked for),
    /// `never-put-back` (its subvolume is not restorable) or `deleted` (its snapshot is gone).
    pub left_out: String,
    /// What a restore of it loses, counted (for a member put back).
    pub changes: ChangeCount,
}

/// What a restore of a snapshot set would do, member by member and in all, in the words
/// shown to the person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SetRestorePreview {
    /// The journal's id of the set, as `tacid data list` shows it; 0 for snapshots named one
    /// by one (`NamedRestorePreview`).
    pub set_id: i64,
    /// The set was taken before a switch of configuration.
    pub pre_switch: bool,
    /// Every member of the set, put back or not: those put back in the order the boot takes
    /// them, then the others.
    pub members: Vec<SetRestoreMember>,
    /// The members put back, counted, added up (`complete` false when any member's count
    /// was cut short or could not be made).
    pub total: ChangeCount,
    /// The counts are of what the filesystem's last commit holds (a preview by somebody who
    /// may not confirm, adr/0016).
    pub as_of_last_commit: bool,
    /// The exact words, several lines; `SetRestoreConfirm` must be given these same words
    /// back.
    pub words: String,
    /// Exactly this restore is already staged.
    pub already_staged: bool,
    /// The set is a consistent cut of these units (escaped, separated by one space);
    /// empty when it is not.
    pub cut_units: String,
}

/// One member a staged restore puts back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct StagedMember {
    pub snapshot: String,
    pub of: String,
    pub of_path: String,
}

/// The answer to `SetRestoreConfirm`. It is never "restored": a restore happens at a boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SetRestoreStaged {
    pub set_id: i64,
    /// The members the next boot puts back, together, in the order it takes them.
    pub members: Vec<StagedMember>,
    /// The same request was already staged; nothing changed.
    pub already_staged: bool,
    /// Always true: nothing is put back until the next boot.
    pub reboot_needed: bool,
    /// The sentence the journal recorded as the outcome.
    pub message: String,
}

/// The answer to `RestoreDetails`: what a restore would delete or put back, path by path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct RestoreDetails {
    pub snapshot: String,
    pub of_path: String,
    /// False when the count was cut short by its time limit: the list is then partial.
    pub complete: bool,
    /// The changed paths (at most 10000), sorted added, modified, removed.
    pub paths: Vec<ChangedPath>,
    /// How many changed paths were left out of `paths`.
    pub paths_left_off: u64,
}

/// One path changed since the snapshot. A rename or a new hard link shows as the file and
/// its directories modified; a file with several names is listed under one of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct ChangedPath {
    /// `added` (a restore deletes it), `modified` (a restore puts the old one back) or
    /// `removed` (a restore brings it back).
    pub change: String,
    pub directory: bool,
    /// The full path where people see it (`/home/alice/notes.txt`), escaped: a name of
    /// any bytes is one line, and `layout::escape::unescape` gives its bytes back. For a
    /// removed one, where it was.
    pub path: String,
}

/// The answer to `RestoreConfirm`. It is never "restored": a restore happens at a boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct RestoreStaged {
    pub snapshot: String,
    pub of: String,
    pub of_path: String,
    /// The same request was already staged; nothing changed.
    pub already_staged: bool,
    /// Always true: nothing is put back until the next boot.
    pub reboot_needed: bool,
    /// The sentence the journal recorded as the outcome.
    pub message: String,
}

/// The answer to `Cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Cancelled {
    /// A staged restore was withdrawn (false: nothing was staged; nothing changed).
    pub withdrawn: bool,
    /// The restore that was withdrawn (empty when none): its snapshots, and where their
    /// subvolumes are seen, one per member separated by spaces (a set's in the order the
    /// boot would have taken them).
    pub snapshot: String,
    pub of_path: String,
    pub message: String,
}

/// The answer to `Status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Status {
    /// The stem answered just now.
    pub stem_running: bool,
    /// The staged restore (empty `staged_snapshot` when none): its snapshots, and where
    /// their subvolumes are seen, one per member separated by spaces (a set's in the order
    /// the boot takes them; one member is exactly the single restore of before sets).
    pub staged_snapshot: String,
    pub staged_of_path: String,
    /// The words shown when it was staged, and to whom (both escaped, the words line by
    /// line: a set's are several lines; empty when not journalled).
    pub staged_words: String,
    pub staged_by: String,
    /// The initrd's last outcome (empty `outcome_id` when none was ever read).
    pub outcome_id: String,
    /// `done` or `refused`.
    pub outcome_result: String,
    /// What the request put back: `@home @home.…` (subvolume and snapshot), a set's
    /// members separated by `; `; empty when the request could not be read.
    pub outcome_request: String,
    /// What the boot said, escaped.
    pub outcome_reason: String,
    /// The command that undoes the boot's restore (a restore of the snapshots that hold what
    /// it replaced, adr/0027), `tacid data restore @home.…`; empty when nothing was kept.
    pub outcome_undo: String,
    pub outcome_finished_micros: i64,
    /// This is the first status that reports this outcome to this caller (by uid).
    pub outcome_new: bool,
    /// Snapshots on disk the journal does not know.
    pub unknown_origin: u32,
    /// Snapshot sets the journal marked failed (a crash or a stem failure).
    pub failed_sets: u32,
    /// Where the journal is.
    pub journal_path: String,
    /// Free bytes on the filesystem now (0 with `stem_running` false).
    pub free_bytes: u64,
    /// The filesystem's size in bytes.
    pub size_bytes: u64,
    /// Below this many free bytes retention deletes the oldest automatic snapshots.
    pub floor_bytes: u64,
    /// Below this many free bytes new snapshots are refused (0: none).
    pub hard_floor_bytes: u64,
    /// Deleted snapshots whose space Btrfs is still giving back.
    pub deletions_pending: u32,
    /// What is wrong with the restore request file when it is bad (empty otherwise): it
    /// stages nothing, the next boot refuses it, and `Cancel` removes it.
    pub staged_problem: String,
    /// Each sealed target's last verification, as journalled, in target name order (a
    /// target never verified is not here).
    pub verifications: Vec<LastVerified>,
}

/// A target's last verification (`Verify`, by a person or its timer), as journalled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct LastVerified {
    pub target: String,
    /// When, µs since the epoch (UTC).
    pub when_micros: i64,
    /// Who asked (escaped), or the rule (`timer of usb`).
    pub by: String,
    /// Copies read back and found good.
    pub good: u32,
    /// What failed: each copy that failed, or the act itself (an empty name: nothing
    /// could be checked).
    pub failed: Vec<CopyVerified>,
}

/// One copy read back on a sealed target and checked, down to its full copy, without
/// receiving it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyVerified {
    pub name: String,
    /// Every part of it and of the copies its chain needs was read, its digest and its
    /// authentication checked.
    pub ok: bool,
    /// What failed, in words (escaped; empty when good).
    pub problem: String,
    /// Bytes read from the target.
    pub bytes_read: u64,
}

/// The answer to `Verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct VerifyReport {
    pub target: String,
    /// Every copy checked, in name order.
    pub copies: Vec<CopyVerified>,
    /// What the journal recorded, in one sentence.
    pub message: String,
}

/// One snapshot retention chose, with the rule that chose it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct PruneEntry {
    pub name: String,
    pub of_path: String,
    pub taken_micros: i64,
    /// The rule's code: `pre-switch-sets`, `timeline`, `manual-max-age`, `free-space-floor`.
    pub rule: String,
    /// The rule in words.
    pub why: String,
    /// Empty when it went (or would go); else why it stays or what failed.
    pub note: String,
}

/// The answer to `Prune`: what went (or, in a dry run, would go), rule by rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct PruneReport {
    /// Nothing was deleted; `deleted` is what would go.
    pub dry_run: bool,
    /// Deleted (or would be), oldest first.
    pub deleted: Vec<PruneEntry>,
    /// Chosen by a rule but kept: pinned by the staged restore, marked to keep, open, or a
    /// last common parent with a copy target; `note` says which.
    pub spared: Vec<PruneEntry>,
    /// The stem refused or failed these; `note` says why.
    pub failed: Vec<PruneEntry>,
    /// The policy, in one line.
    pub policy: String,
    pub free_bytes: u64,
    pub floor_bytes: u64,
    /// Below the floor with no automatic snapshot left to delete.
    pub floor_unmet: bool,
}

/// The answer to `Delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Deleted {
    pub name: String,
    pub of_path: String,
    /// What the journal recorded.
    pub message: String,
}

/// The answer to `Keep`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct KeepMarked {
    pub name: String,
    /// Marked to keep now.
    pub kept: bool,
    /// False: it was already so; nothing changed.
    pub changed: bool,
    pub message: String,
}

/// One snapshot copied to a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyMade {
    pub name: String,
    pub of_path: String,
    /// The snapshot it was sent against (both sides hold it); empty for a full send.
    pub parent: String,
    pub incremental: bool,
    /// Bytes of the send stream.
    pub bytes: u64,
    /// The received UUID of the copy on the target, checked equal to the snapshot's UUID.
    pub received_uuid: String,
    /// How long the copy took, in milliseconds.
    pub took_ms: u64,
}

/// One snapshot the act tried to copy and could not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyFailed {
    pub name: String,
    pub of_path: String,
    /// The error's name (`TargetFull`, `TransferFailed`, ...).
    pub error: String,
    /// What went wrong, as journalled.
    pub reason: String,
}

/// One copy deleted on a target by its retention (or that retention could not delete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyDeleted {
    pub name: String,
    pub of_path: String,
    /// Why retention chose it, in words.
    pub why: String,
    /// Empty when it went; else what failed.
    pub note: String,
}

/// The answer to `Copy`: what was copied, what the target already held, what failed, and
/// (for the timer's act) what the target's retention deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyReport {
    pub target: String,
    pub copied: Vec<CopyMade>,
    /// Snapshots the target already held, verified: nothing was sent for them.
    pub already_there: Vec<String>,
    pub failed: Vec<CopyFailed>,
    pub deleted: Vec<CopyDeleted>,
    /// The target's retention counts in words, when retention ran (empty otherwise).
    pub retention: String,
    /// What the journal recorded, in one sentence.
    pub message: String,
}

/// One copy a target holds, verified (read-only, received UUID set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyHeld {
    pub name: String,
    pub of: String,
    pub of_path: String,
    /// When its snapshot was taken, µs since the epoch (UTC); 0 when the name says nothing.
    pub taken_micros: i64,
    /// The copy's received UUID (the source snapshot's UUID); empty for somebody who may
    /// only look.
    pub received_uuid: String,
    /// The local store still holds the snapshot.
    pub local: bool,
    /// What is wrong with it (a sealed target's copy whose manifest does not authenticate,
    /// or that failed its last verification), escaped; empty when nothing is known wrong.
    pub problem: String,
}

/// The answer to `Copies`: what a target holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct TargetCopies {
    pub target: String,
    /// Oldest first.
    pub copies: Vec<CopyHeld>,
    /// The target's retention counts in words.
    pub retention: String,
}

/// The answer to `Fetch`: the copy received into the local store, verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Fetched {
    pub target: String,
    pub snapshot: SnapshotEntry,
    /// The local snapshot it was sent against; empty for a full send.
    pub parent: String,
    pub bytes: u64,
    pub message: String,
}

/// An act on a target in flight, for a progress line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyInFlight {
    pub target: String,
    pub name: String,
    /// What is done: `copy`, `fetch`, `verify` (the copy `name`, or "" before the first),
    /// `list`, `clean` or `delete`.
    pub direction: String,
    /// Bytes sent or received so far; of `verify`, `list` and `clean`, read from the target.
    pub bytes: u64,
    /// 0: not known (the copier's own acts).
    pub elapsed_ms: u64,
}

/// A snapshot open read-only for its caller (`Open`, `Opens`; adr/0019): mounted read-only,
/// nosuid, nodev, noexec at `path`, in a directory only the caller (and root) may enter.
/// Files keep the owner and mode they had in the snapshot; nothing is restored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Opened {
    pub snapshot: String,
    /// Where the snapshot's subvolume is mounted, for people (`/home`).
    pub of_path: String,
    /// Where it is open (`/run/tacid/<uid>/<snapshot>`): copy files out of it from there.
    pub path: String,
    /// The whole snapshot is open (root and approvers); false: only the caller's home.
    pub whole: bool,
    /// What `path` shows, as people knew it then: `/home/alice` (the caller's home as it
    /// was) or `/home` (the whole snapshot). Escaped (adr/0017).
    pub shows: String,
    /// Where the caller's own home as it was is inside `path` (the same as `path` for a
    /// home opened alone; empty when the open snapshot holds no home of the caller's).
    /// Escaped.
    pub your_home: String,
    /// It was open already: nothing changed but its idle time, which starts again.
    pub already_open: bool,
    /// When it was first opened, µs since the epoch (UTC).
    pub opened_micros: i64,
    /// When it closes by itself if nobody uses it then, µs since the epoch (UTC). It
    /// also closes at a reboot.
    pub idle_close_micros: i64,
    /// What the journal recorded.
    pub message: String,
}

/// The answer to `Close`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct ClosedOpen {
    pub snapshot: String,
    /// False: it was not open for the caller; nothing changed.
    pub closed: bool,
    pub message: String,
}

/// The answer to `Diff`: what changed since a snapshot in the caller's part of it (their
/// home, for somebody who is not root or an approver), or below the path asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct PartChanges {
    pub snapshot: String,
    pub of_path: String,
    /// The subtree counted, where people see it (`/home/alice/docs`), escaped.
    pub subtree: String,
    /// Every number is "at least": the count stopped at its time limit, or the list of
    /// changed paths it is made from was cut.
    pub at_least: bool,
    pub files_added: u64,
    pub files_modified: u64,
    pub files_removed: u64,
    pub directories_added: u64,
    pub directories_modified: u64,
    pub directories_removed: u64,
    /// Bytes written since the snapshot, when they are of the subtree: only for the whole
    /// subvolume. A subtree's share of them cannot be told apart, so for any subtree this
    /// is 0 and `bytes_known` false.
    pub bytes_written: u64,
    pub bytes_known: bool,
    /// The changed paths in the subtree, sorted added, modified, removed.
    pub paths: Vec<ChangedPath>,
    /// The stem's list of changed paths was cut (it lists at most 10000): there may be
    /// more in the subtree than listed.
    pub paths_cut: bool,
    /// Changed paths in the subtree that are not named (nor in the counts above) because a
    /// directory on the way to them is one the caller may not list: in the snapshot for a
    /// removed one, in the live subvolume for the others. Only for somebody who is not root
    /// or an approver; 0 otherwise.
    pub paths_hidden: u64,
}

bus_peer::named_errors! {
    /// Named errors on the wire: one variant per [`ErrorKind`], named on the bus
    /// `org.tacid.Keeper1.Error.<Kind>`, each with a message that says what went wrong and what
    /// to do.
    prefix = "org.tacid.Keeper1.Error";
    /// Why the keeper said no: every error `org.tacid.Keeper1` names, without its message.
    kinds {
        /// The caller may not do this (not root, not in the approver group, or unknown).
        NotAuthorized,
        /// The stem is not on the bus.
        StemNotRunning,
        /// No snapshot by that name exists.
        NoSuchSnapshot,
        /// A name or argument is not valid (not a subvolume of the layout, not a snapshot name).
        InvalidArgument,
        /// The subvolume's snapshots may not be put back, or it is never snapshotted.
        NotAllowedForSubvolume,
        /// Another restore is already staged.
        AnotherRestoreStaged,
        /// The words given back are not the words the keeper showed this caller.
        WordsNotShown,
        /// The stem refused or failed; the message is the stem's.
        StemFailed,
        /// The journal could not record the request; nothing was done.
        Journal,
        /// The snapshot is protected: the staged restore names it, or a person marked it to keep.
        Protected,
        /// The free space is below the hard floor; no snapshot was taken.
        NoSpace,
        /// No target of that name is configured (or the name is not a target name).
        NoSuchTarget,
        /// Another copy, fetch or deletion on that target is running.
        TargetBusy,
        /// The target could not be reached (not mounted, host down, key refused).
        TargetUnreachable,
        /// The backup host's key is not the pinned one; nothing was sent.
        HostKeyChanged,
        /// The target's directory is not on Btrfs.
        TargetNotBtrfs,
        /// The target has no room; nothing half-received was left.
        TargetFull,
        /// The transfer died (link cut, a side killed); nothing half-received was left.
        TransferFailed,
        /// A snapshot of that name is already in the local store; nothing was fetched.
        AlreadyHere,
        /// Opening refused: too many open (for the caller or overall), the caller's home is not
        /// a directory of theirs in the snapshot, or that snapshot is open another way.
        OpenRefused,
        /// The snapshot is open and a process uses it (its working directory, a file or a
        /// mapping is in it): not closed, or not deleted; nothing changed (adr/0021).
        InUse,
        /// The copier (the unprivileged daemon that seals and stores copies for a sealed
        /// target) is not on the bus; Btrfs targets are not affected.
        CopierNotRunning,
        /// The copier cannot act: no recovery key yet, its key or a credentials file not its
        /// own alone, or it failed; the message says what to do.
        CopierFailed,
        /// What a sealed target holds failed its checks (a digest, the authentication, a
        /// part missing or of another copy, an older manifest): it was refused, and nothing
        /// half-received was left.
        Untrusted,
    }
}

/// The client side of `org.tacid.Keeper1` (the CLI's only way in).
#[zbus::proxy(
    interface = "org.tacid.Keeper1",
    default_service = "org.tacid.Keeper1",
    default_path = "/org/tacid/Keeper1"
)]
pub trait Keeper1 {
    /// Every snapshot, newest first.
    fn list(&self) -> Result<Vec<SnapshotEntry>, Error>;
    // `ListRows` (the same list, flat) answers rows that borrow from the reply, which no
    // generated method can return: `Keeper1Proxy::list_rows`, below, is its method.
    /// Take a set of snapshots (empty list: the default set).
    fn snapshot(
        &self,
        subvolumes: Vec<String>,
        reason: &str,
        pre_switch: bool,
    ) -> Result<SnapshotSet, Error>;
    /// What restoring `snapshot` would do, in words. Changes nothing.
    fn restore_preview(&self, snapshot: &str) -> Result<RestorePreview, Error>;
    /// The changed paths a restore of `snapshot` would delete or put back (approvers only).
    fn restore_details(&self, snapshot: &str) -> Result<RestoreDetails, Error>;
    /// Stage the restore, given back the words `RestorePreview` showed this caller.
    fn restore_confirm(&self, snapshot: &str, words_shown: &str) -> Result<RestoreStaged, Error>;
    /// What restoring a snapshot set would do, member by member, in words (`set`: its id,
    /// or any member's name; `only`: the members to put back, by mount point or name;
    /// empty: all). Changes nothing.
    fn set_restore_preview(&self, set: &str, only: Vec<String>)
        -> Result<SetRestorePreview, Error>;
    /// Stage the restore of the set's members as one request, given back the words
    /// `SetRestorePreview` showed this caller.
    fn set_restore_confirm(
        &self,
        set: &str,
        only: Vec<String>,
        words_shown: &str,
    ) -> Result<SetRestoreStaged, Error>;
    /// What putting back the snapshots `names` (at most one of each subvolume) together at
    /// one boot would do, each and in all, in words (`set_id` 0). Changes nothing.
    fn named_restore_preview(&self, names: Vec<String>) -> Result<SetRestorePreview, Error>;
    /// Stage the restore of the snapshots `names` as one request, given back the words
    /// `NamedRestorePreview` showed this caller.
    fn named_restore_confirm(
        &self,
        names: Vec<String>,
        words_shown: &str,
    ) -> Result<SetRestoreStaged, Error>;
    /// The staged restore, the last outcome of a boot, and the journal's health.
    fn status(&self) -> Result<Status, Error>;
    /// Withdraw the staged restore.
    fn cancel(&self) -> Result<Cancelled, Error>;
    /// How old the newest snapshot and copy of each subvolume are, what failed, and what
    /// to do (`tacid data health`). Anybody may ask.
    fn health(&self) -> Result<health::HealthReport, Error>;
    /// Which snapshot holds the disk (`tacid data space`): per snapshot what deleting it
    /// frees, what it shares, what is new in it; per subvolume its growth. `names`: empty
    /// for every snapshot. Anybody may ask; lookers see /home's snapshots in total only.
    fn space(&self, names: Vec<String>) -> Result<space::SpaceReport, Error>;
    /// Health worsened (`level`: `warn` or `fail`; `says`: its worst findings, one a line,
    /// each with what to do).
    #[zbus(signal)]
    fn health_worsened(&self, level: &str, says: &str) -> zbus::Result<()>;
    /// A scheduled act failed (`act`: `timeline` or `copy to TARGET`; `says`: why, and
    /// what to do).
    #[zbus(signal)]
    fn scheduled_act_failed(&self, act: &str, says: &str) -> zbus::Result<()>;
    /// Delete a snapshot, journalled with the person who asked.
    fn delete(&self, name: &str) -> Result<Deleted, Error>;

    /// Delete a snapshot also when it is the last common parent with a copy target (the
    /// next copy there is then full).
    fn delete_next_copy_full(&self, name: &str) -> Result<Deleted, Error>;
    /// Mark a snapshot to keep (`keep` false: take the mark off).
    fn keep(&self, name: &str, keep: bool) -> Result<KeepMarked, Error>;
    /// Apply the retention policy (`dry_run`: only say what would go, and why).
    fn prune(&self, dry_run: bool) -> Result<PruneReport, Error>;
    /// Take a timeline snapshot set (the timer's), pruning first when below the floor.
    fn snapshot_timeline(&self) -> Result<SnapshotSet, Error>;
    /// Copy the snapshot `name` to `target` (`name` empty: the newest of each subvolume the
    /// target lacks, then the target's retention: the timer's act).
    fn copy(&self, name: &str, target: &str) -> Result<CopyReport, Error>;
    /// What `target` holds.
    fn copies(&self, target: &str) -> Result<TargetCopies, Error>;
    /// Receive the copy `name` from `target` into the local store.
    fn fetch(&self, name: &str, target: &str) -> Result<Fetched, Error>;
    /// Copies and fetches in flight.
    fn copy_progress(&self) -> Result<Vec<CopyInFlight>, Error>;
    /// Read back the copies `names` on the sealed target `target` (empty: every copy) and
    /// check each, down to its full copy, without receiving it.
    fn verify(&self, target: &str, names: Vec<String>) -> Result<VerifyReport, Error>;
    /// The target's verify timer's act: every copy on `target` checked, journalled with the
    /// rule "timer of TARGET".
    fn verify_timer(&self, target: &str) -> Result<VerifyReport, Error>;
    /// Open the snapshot `name` read-only for the caller: their own home in it, or (root
    /// and approvers) all of it.
    fn open(&self, name: &str) -> Result<Opened, Error>;
    /// Close the caller's open snapshot `name`.
    fn close(&self, name: &str) -> Result<ClosedOpen, Error>;
    /// The caller's open snapshots.
    fn opens(&self) -> Result<Vec<Opened>, Error>;
    /// What changed since the snapshot `name` in the caller's part, or below `path` (bytes,
    /// a path where people see the subvolume; empty: the whole part).
    fn diff(&self, name: &str, path: &[u8]) -> Result<PartChanges, Error>;
}

impl Keeper1Proxy<'_> {
    /// `ListRows`: the same list as `list`, flat. Its rows borrow from the reply, so the
    /// answer is the reply's body; [`ListRowsReply::rows`] reads them in place.
    pub async fn list_rows(&self) -> Result<ListRowsReply, Error> {
        let reply = self.inner().call_method("ListRows", &()).await?;
        Ok(ListRowsReply(reply.body()))
    }
}

/// The answer to `ListRows`, unread.
#[derive(Debug)]
pub struct ListRowsReply(zbus::message::Body);

impl ListRowsReply {
    /// The rows and the targets holding copies of them, borrowed from the reply.
    pub fn rows(&self) -> Result<(Vec<SnapshotRow<'_>>, Vec<CopyOfRow<'_>>), Error> {
        Ok(self.0.deserialize()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::DBusError as _;

    #[test]
    fn every_kind_is_named_on_the_bus_and_read_back_as_itself() {
        for kind in ErrorKind::ALL {
            let e = Error::new(kind, "a message");
            let name = format!("org.tacid.Keeper1.Error.{kind:?}");
            assert_eq!(e.name().as_str(), name);
            assert_eq!(e.kind(), Some(kind));
            assert_eq!(e.message(), "a message");
            let received = zbus::Error::MethodError(
                zbus::names::OwnedErrorName::try_from(name.as_str()).expect("an error name"),
                Some("a message".into()),
                zbus::message::Message::method_call("/", "X")
                    .build(&())
                    .expect("a message"),
            );
            let back = Error::from(received);
            assert_eq!(back.kind(), Some(kind), "{name}");
            assert_eq!(back.message(), "a message");
        }
        assert_eq!(Error::from(zbus::Error::Failure("x".into())).kind(), None);
    }
}
