//! `org.tacid.Keeper1`: the keeper's D-Bus interface, version 1 (server side).
//!
//! Each method learns the caller's uid from the bus (`GetConnectionUnixUser` on the
//! message's sender) — any failure to learn it is a refusal — and delegates to
//! [`Keeper`]. The client side is [`crate::wire::Keeper1Proxy`].
//!
//! # What this interface deliberately lacks
//!
//! - No method deletes a snapshot the staged restore names or a person marked to keep,
//!   whatever the caller says: the mark is taken off first, by a person, journalled.
//! - No method restores now, or reads or writes file content. A restore is staged; the
//!   next boot honours it.
//! - No method takes the caller's identity or the words shown as trusted facts: the caller
//!   is who the bus says, and the words are checked against what the keeper showed them.
//! - No method takes a path, a host or a file descriptor to copy to or from: a caller names
//!   a target, and the targets are root's configuration.
//! - No method opens a path a caller names, or another person's home: `Open` shows root
//!   and approvers a snapshot whole, anybody else only the home the user database gives
//!   them, read-only, with the owners and modes it had (adr/0019). Nothing is restored.
//! - No properties, and two signals only (`HealthWorsened`, `ScheduledActFailed`, adr/0028):
//!   they carry what is wrong and what to do, never a name or a reason a caller chose
//!   unescaped; anybody on the bus may hear them, as anybody may ask `Health`.

use std::fmt::Write as _;
use std::sync::Arc;

use bus_peer::{CallerUids, UnknownCaller};
use zbus::message::Header;
use zbus::object_server::Interface as _;
use zbus::object_server::SignalEmitter;
use zbus::{interface, Connection};

use crate::service::{Keeper, ListedCopies, ListedRows};
use crate::wire::{
    Cancelled, ClosedOpen, CopyInFlight, CopyReport, Deleted, Fetched, KeepMarked, KeeperError,
    Opened, PartChanges, PruneReport, RestoreDetails, RestorePreview, RestoreStaged,
    SetRestorePreview, SetRestoreStaged, SnapshotEntry, SnapshotSet, Status, TargetCopies,
    VerifyReport,
};

/// The interface served at `/org/tacid/Keeper1`.
#[derive(Debug, Clone)]
pub struct Keeper1 {
    keeper: Arc<Keeper>,
    callers: Arc<Callers>,
}

impl Keeper1 {
    pub fn new(keeper: Arc<Keeper>) -> Self {
        Keeper1 {
            keeper,
            callers: Arc::new(new_callers()),
        }
    }
}

/// The most questions "who is calling?" the keeper has waiting for the bus at once: the bus
/// refuses a connection's calls past 128 waiting replies, and the stem's share of those
/// must stay free (adr/0016).
pub const MAX_CALLER_LOOKUPS: usize = 32;

/// Past this many senders remembered, the memory of them starts again.
const REMEMBERED_SENDERS: usize = 4096;

/// The uids of the connections that called (`bus_peer`'s memory of what the bus said).
type Callers = CallerUids;

fn new_callers() -> Callers {
    CallerUids::new(REMEMBERED_SENDERS, MAX_CALLER_LOOKUPS)
}

/// The caller's uid from the bus's own record; any failure is a refusal.
async fn caller(
    callers: &Callers,
    connection: &Connection,
    header: &Header<'_>,
) -> Result<u32, KeeperError> {
    callers.of(connection, header).await.map_err(|e| match e {
        UnknownCaller::NoSender => {
            KeeperError::NotAuthorized("the call carries no sender; refused".into())
        }
        UnknownCaller::Bus(e) => KeeperError::NotAuthorized(format!(
            "the bus could not say who is calling ({e}); refused"
        )),
    })
}

/// `org.tacid.Keeper1`: authority, consent and the journal in front of the stem.
/// Anybody may call; who may do what is decided inside each method.
// Literal names because the macro needs literals; a test checks them against layout::names.
#[interface(name = "org.tacid.Keeper1")]
impl Keeper1 {
    /// Every snapshot, newest first: what it is of, when, why, who asked, and whether the
    /// staged restore names it. Anybody may list. Errors: NotAuthorized (caller unknown),
    /// StemNotRunning, StemFailed, Journal.
    async fn list(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<SnapshotEntry>, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.list(uid).await
    }

    /// The same list as `List`, flat: one row per snapshot, newest first, and the targets
    /// holding a copy as (row from 0, target) pairs, rows in order and each row's targets
    /// in name order. The keeper answers from the list it keeps while neither the store nor
    /// its journal has changed. Anybody may list. Errors: as `List`.
    #[zbus(out_args("rows", "copies"))]
    async fn list_rows(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<(ListedRows, ListedCopies), KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        let listed = self.keeper.list_rows(uid).await?;
        Ok((ListedRows(listed.clone()), ListedCopies(listed)))
    }

    /// Take a set of snapshots, journalled pending first and complete only when the stem
    /// confirms every member. `subvolumes`: layout names or mount points (empty: the default
    /// set); `reason`: one line, shown in the list to every user; `pre_switch`: taken before
    /// a switch of configuration. Root and approvers only. Errors: NotAuthorized,
    /// InvalidArgument, NotAllowedForSubvolume, StemNotRunning, StemFailed, Journal.
    async fn snapshot(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        subvolumes: Vec<String>,
        reason: &str,
        pre_switch: bool,
    ) -> Result<SnapshotSet, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper
            .snapshot(uid, &subvolumes, reason, pre_switch)
            .await
    }

    /// What restoring `snapshot` would cost, in the words of what is lost. Changes nothing.
    /// Anybody may ask; for somebody who may not confirm, the changes are counted as of the
    /// filesystem's last commit (adr/0016), and a caller's previews take turns. Errors: NotAuthorized (caller unknown), InvalidArgument,
    /// NotAllowedForSubvolume, NoSuchSnapshot, StemNotRunning, StemFailed, Journal.
    async fn restore_preview(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        snapshot: &str,
    ) -> Result<RestorePreview, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.restore_preview(uid, snapshot).await
    }

    /// The paths that changed since `snapshot`: what a restore of it would delete (added),
    /// put back (modified) or bring back (removed). Changes nothing; journalled. Root and
    /// approvers only: paths name other people's files. Errors: NotAuthorized,
    /// InvalidArgument, NotAllowedForSubvolume, NoSuchSnapshot, StemNotRunning, StemFailed,
    /// Journal.
    async fn restore_details(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        snapshot: &str,
    ) -> Result<RestoreDetails, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.restore_details(uid, snapshot).await
    }

    /// Stage the restore of `snapshot` for the next boot. `words_shown`: exactly the words
    /// RestorePreview gave this caller (within 15 minutes); they are journalled as the
    /// consent. Root and approvers only. The answer always has reboot_needed = true.
    /// Errors: NotAuthorized, WordsNotShown, InvalidArgument, NotAllowedForSubvolume,
    /// NoSuchSnapshot, AnotherRestoreStaged, StemNotRunning, StemFailed, Journal.
    async fn restore_confirm(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        snapshot: &str,
        words_shown: &str,
    ) -> Result<RestoreStaged, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper
            .restore_confirm(uid, snapshot, words_shown)
            .await
    }

    /// What restoring a snapshot set would cost, member by member and in all, in the words
    /// of what is lost, and which members stay as they are. Changes nothing. `set`: the
    /// set's number, as List gives it (`set_id`), or the name of any snapshot in it;
    /// `only`: the members to put back, by mount point (`/persist`), subvolume (`@persist`)
    /// or snapshot name (empty: every member that can be). Anybody may ask; the members
    /// are counted one after another in the caller's one turn of previews, for somebody
    /// who may not confirm as of the filesystem's last commit (adr/0016). Errors:
    /// NotAuthorized (caller unknown), InvalidArgument, NotAllowedForSubvolume,
    /// NoSuchSnapshot, StemNotRunning, StemFailed, Journal.
    async fn set_restore_preview(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        set: &str,
        only: Vec<String>,
    ) -> Result<SetRestorePreview, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.set_restore_preview(uid, set, &only).await
    }

    /// Stage the restore of a set's members for the next boot as one request: the boot
    /// puts all of them back together, or none. `set`, `only`: as SetRestorePreview;
    /// `words_shown`: exactly the words SetRestorePreview gave this caller for those members
    /// (within 15 minutes), journalled as one consent naming every member. Root and
    /// approvers only. The answer always has reboot_needed = true. Errors: NotAuthorized,
    /// WordsNotShown, InvalidArgument, NotAllowedForSubvolume, NoSuchSnapshot,
    /// AnotherRestoreStaged, StemNotRunning, StemFailed, Journal.
    async fn set_restore_confirm(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        set: &str,
        only: Vec<String>,
        words_shown: &str,
    ) -> Result<SetRestoreStaged, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper
            .set_restore_confirm(uid, set, &only, words_shown)
            .await
    }

    /// What putting back the snapshots `names` together at one boot would cost, each and in
    /// all, in the words of what is lost, each with where it came from (a set here, or the
    /// target it was fetched from). Changes nothing. `names`: snapshot names, at most one of
    /// each restorable subvolume; they need not be of one set (after a dead disk, each is
    /// fetched from its own target). Anybody may ask; counted as SetRestorePreview counts.
    /// The answer's set_id is 0. Errors: NotAuthorized (caller unknown), InvalidArgument,
    /// NotAllowedForSubvolume, NoSuchSnapshot, StemNotRunning, StemFailed, Journal.
    async fn named_restore_preview(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        names: Vec<String>,
    ) -> Result<SetRestorePreview, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.named_restore_preview(uid, &names).await
    }

    /// Stage the restore of the snapshots `names` for the next boot as one request: the boot
    /// puts all of them back together, or none. `words_shown`: exactly the words
    /// NamedRestorePreview gave this caller for those names (within 15 minutes), journalled
    /// as one consent naming every one. Root and approvers only. The answer's set_id is 0,
    /// reboot_needed true. Errors: NotAuthorized, WordsNotShown, InvalidArgument,
    /// NotAllowedForSubvolume, NoSuchSnapshot, AnotherRestoreStaged, StemNotRunning,
    /// StemFailed, Journal.
    async fn named_restore_confirm(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        names: Vec<String>,
        words_shown: &str,
    ) -> Result<SetRestoreStaged, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper
            .named_restore_confirm(uid, &names, words_shown)
            .await
    }

    /// The staged restore and who staged it, the latest outcome of a boot (and whether this
    /// is the first report of it), and the journal's findings. Anybody may ask.
    /// Errors: NotAuthorized (caller unknown), StemFailed, Journal.
    async fn status(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Status, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.status(uid).await
    }

    /// How old the newest snapshot and copy of each subvolume are, what failed and what to
    /// do, each finding with its level (`ok`, `warn`, `fail`); the report's level is the
    /// worst. Anybody may ask. When health worsened since the keeper last looked, it also
    /// signals `HealthWorsened`. Errors: NotAuthorized (caller unknown), Journal.
    async fn health(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<crate::wire::health::HealthReport, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        let (report, worsened) = self.keeper.health(uid).await?;
        if let Some(w) = worsened {
            signal_worsened(&emitter, &w).await;
        }
        Ok(report)
    }

    /// Which snapshot holds the disk (adr/0029): per snapshot the bytes only it holds (what
    /// deleting it frees now), those it shares and those new since the snapshot before it;
    /// per subvolume its live bytes and how fast its snapshots grow; what the snapshots alone
    /// hold. `names`: snapshot names (empty: every snapshot). Anybody may ask; somebody who
    /// is not root or an approver sees the snapshots of /home in total only (`hidden` counts
    /// them). Errors: NotAuthorized (caller unknown), InvalidArgument, NoSuchSnapshot,
    /// StemNotRunning, StemFailed.
    async fn space(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        names: Vec<String>,
    ) -> Result<crate::wire::space::SpaceReport, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.space(uid, &names).await
    }

    /// Health worsened since the keeper last looked (after an act, when asked, and every
    /// few minutes): a finding at `warn` or above is new, or rose, though the report's level
    /// may have been as bad already. `level` is `warn` or `fail`, the worst of them; `says`,
    /// those findings, one a line, each with what to do.
    #[zbus(signal)]
    async fn health_worsened(
        emitter: &SignalEmitter<'_>,
        level: &str,
        says: &str,
    ) -> zbus::Result<()>;

    /// A scheduled act failed: `act` is `timeline` (the timeline timer's set) or `copy to
    /// TARGET` (a copy target's timer); `says`, why, and what to do.
    #[zbus(signal)]
    async fn scheduled_act_failed(
        emitter: &SignalEmitter<'_>,
        act: &str,
        says: &str,
    ) -> zbus::Result<()>;

    /// Withdraw the staged restore, every member of a set's (nothing staged: says so,
    /// changes nothing). Root and approvers only. Errors: NotAuthorized, StemNotRunning,
    /// StemFailed, Journal.
    async fn cancel(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Cancelled, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.cancel(uid).await
    }

    /// Delete the snapshot `name`, journalled with the person who asked; its space comes
    /// back in the background (Status shows it). Root and approvers only. Errors:
    /// NotAuthorized, InvalidArgument, NoSuchSnapshot, Protected (staged restore, marked
    /// to keep, or the last common parent with a copy target), InUse (it is open: nothing
    /// would come back while it is used), StemNotRunning, StemFailed, Journal.
    async fn delete(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
    ) -> Result<Deleted, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.delete(uid, name, false).await
    }

    /// Delete as `Delete` does, also when `name` is the last common parent with a copy
    /// target: the caller accepts that the next copy to that target is sent full, and the
    /// journal says so. Root and approvers only. Errors: as `Delete`.
    async fn delete_next_copy_full(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
    ) -> Result<Deleted, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.delete(uid, name, true).await
    }

    /// Mark the snapshot `name` to keep (no retention rule deletes it), or with `keep`
    /// false take the mark off. Journalled. Root and approvers only. Errors: NotAuthorized,
    /// InvalidArgument, NoSuchSnapshot, StemNotRunning, StemFailed, Journal.
    async fn keep(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        keep: bool,
    ) -> Result<KeepMarked, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.keep(uid, name, keep).await
    }

    /// Apply the retention policy: every deletion journalled with the rule that chose it.
    /// With `dry_run`, delete nothing and say what would go, rule by rule; anybody may ask
    /// that. For real: root and approvers only. Errors: NotAuthorized, StemNotRunning,
    /// StemFailed, Journal.
    async fn prune(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        dry_run: bool,
    ) -> Result<PruneReport, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.prune(uid, dry_run).await
    }

    /// Take the timeline's snapshot set (the default set, marked timeline; the timer calls
    /// this); below the free-space floor, prune first. Root and approvers only. Errors: as
    /// Snapshot, and NoSpace (below the hard floor).
    async fn snapshot_timeline(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<SnapshotSet, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        let answer = self.keeper.snapshot_timeline(uid).await;
        let failed = answer.as_ref().err().and_then(act_failure);
        if uid == 0 {
            self.after_scheduled(&emitter, "timeline", failed).await;
        }
        answer
    }

    /// Copy the snapshot `name` to the configured target `target`, incremental against the
    /// newest snapshot both sides hold, verified on the target before the answer; the send
    /// stream goes from the stem to the target, never through the keeper. `name` empty: the
    /// timer's act, the newest snapshot of each subvolume the target lacks, then the
    /// target's retention (never its newest copy of a subvolume); its failures are in the
    /// answer. Journalled with the caller, or the rule. Root and approvers only. Errors:
    /// NoSuchTarget (checked first), NotAuthorized, InvalidArgument, NoSuchSnapshot,
    /// TargetBusy, TargetUnreachable, HostKeyChanged, TargetNotBtrfs, TargetFull,
    /// TransferFailed, NotAllowedForSubvolume (not read-only), StemNotRunning, StemFailed,
    /// Journal. A sealed target's copy goes through a pipe from the stem to the copier,
    /// which seals and stores it (a full copy when the chain would grow past the target's
    /// bound); it counts only when both answered so. Errors then also: CopierNotRunning,
    /// CopierFailed, Untrusted (the parent's copy does not authenticate).
    async fn copy(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        target: &str,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<CopyReport, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        let answer = self.keeper.copy(uid, name, target).await;
        // The timer's act (root's unit; a person's copy is told its failure in the answer):
        // a failure is an error, or copies the report says failed. A target nobody
        // configured is no act that failed, and its name is the caller's, never signalled.
        let configured = !matches!(
            &answer,
            Err(e) if e.kind() == Some(crate::wire::ErrorKind::NoSuchTarget)
        );
        if name.is_empty() && uid == 0 && configured {
            let failed = match &answer {
                Err(e) => act_failure(e),
                Ok(r) if !r.failed.is_empty() => Some(
                    r.failed
                        .iter()
                        .map(|f| format!("{}: {}", f.name, f.reason))
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                Ok(_) => None,
            };
            let act = format!(
                "copy to {}",
                layout::escape::escape(crate::caps::name(target).as_bytes())
            );
            self.after_scheduled(&emitter, &act, failed).await;
        }
        answer
    }

    /// The verified copies the configured target `target` holds, oldest first, and whether
    /// the local store still holds each. Anybody may ask; the received UUIDs are given to
    /// root and approvers only. Errors: NoSuchTarget, NotAuthorized (caller unknown),
    /// TargetUnreachable, HostKeyChanged, TargetNotBtrfs, StemNotRunning, StemFailed. A
    /// sealed target is listed by the copier, each copy with what is known wrong with it
    /// (a manifest that does not authenticate, a failed last verification); errors then
    /// also: CopierNotRunning, CopierFailed, TargetBusy (the copier is acting on it).
    async fn copies(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
    ) -> Result<TargetCopies, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.copies(uid, target).await
    }

    /// Receive the copy `name` from the configured target `target` into the local store,
    /// verified (read-only, received UUID the copy's), after which List shows it and a
    /// restore of it can be staged. Journalled. Root and approvers only. Errors:
    /// NoSuchTarget, NotAuthorized, InvalidArgument, NoSuchSnapshot (not on the target),
    /// AlreadyHere, TargetBusy, TargetUnreachable, HostKeyChanged, TransferFailed, NoSpace,
    /// StemNotRunning, StemFailed, Journal. From a sealed target the copier writes the
    /// copy's whole chain, every part checked before it is decrypted, into a pipe the stem
    /// receives from; errors then also: CopierNotRunning, CopierFailed, Untrusted (nothing
    /// half-received is left).
    async fn fetch(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        target: &str,
    ) -> Result<Fetched, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.fetch(uid, name, target).await
    }

    /// The acts on targets in flight (copies, fetches, verifications, listings): target,
    /// snapshot, what is done (`copy`, `fetch`, `verify`, `list`, `clean`, `delete`), bytes
    /// so far and time taken (0: not known), for a progress line. Anybody may ask. Errors:
    /// NotAuthorized (caller unknown), StemNotRunning, StemFailed.
    async fn copy_progress(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<CopyInFlight>, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.copy_progress(uid).await
    }

    /// Read back the copies `names` (empty: every copy) on the sealed target `target`, and
    /// check each down to its full copy (every part's digest and authentication), without
    /// receiving anything. Each copy checked is journalled with the caller (a failure with
    /// what failed); `Status` shows each target's last verification and `ListRows` a copy
    /// that failed. Root and approvers only. Errors: NoSuchTarget, NotAuthorized,
    /// InvalidArgument (a name, or a target that is not sealed), TargetBusy,
    /// CopierNotRunning, TargetUnreachable, Untrusted, NoSuchSnapshot, StemFailed, Journal.
    async fn verify(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
        names: Vec<String>,
    ) -> Result<VerifyReport, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.verify(uid, target, &names, false).await
    }

    /// The target's verify timer's act (tacid-verify-<target>.service calls it): every copy
    /// on `target` read back and checked, as Verify does, journalled with the caller and
    /// the rule "timer of <target>". Root and approvers only. Errors: as Verify.
    async fn verify_timer(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
    ) -> Result<VerifyReport, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.verify(uid, target, &[], true).await
    }

    /// Open the snapshot `name` read-only for the caller, in the host's mount namespace, at
    /// `/run/tacid/<uid>/<name>`, which the caller alone (and root) may enter: read-only,
    /// nosuid, nodev, noexec, every file with the owner and mode it had in the snapshot, so
    /// nobody reads what they could not read then. Root and approvers: the whole snapshot.
    /// Anybody else: only their own home (from the user database; it must be directly under
    /// /home) in a snapshot of /home, and only when it was a directory of theirs in the
    /// snapshot. Nothing is restored: copy files out of it. It closes with Close, by itself
    /// after its idle time unused, and at a reboot. The same open again restarts its idle
    /// time. Journalled, refusals too (counted past a caller's allowance). Errors:
    /// NotAuthorized, InvalidArgument, NoSuchSnapshot, NotAllowedForSubvolume, OpenRefused
    /// (caps, the home not the caller's there, open another way), StemNotRunning,
    /// StemFailed, Journal.
    async fn open(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
    ) -> Result<Opened, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.open(uid, name).await
    }

    /// Close the caller's open snapshot `name`. `closed` false: it was not open; nothing
    /// changed. Journalled when it closed. While a process uses it (a working directory, an
    /// open file or a mapping in it) it is not closed: InUse, nothing changed (adr/0021).
    /// Errors: NotAuthorized (caller unknown), InvalidArgument, InUse, StemNotRunning,
    /// StemFailed.
    async fn close(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
    ) -> Result<ClosedOpen, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.close(uid, name).await
    }

    /// The caller's open snapshots, and where. Anybody may ask; each sees only their own.
    /// Errors: NotAuthorized (caller unknown), StemNotRunning, StemFailed.
    async fn opens(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<Opened>, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.opens(uid).await
    }

    /// What changed since the snapshot `name`, path by path and counted, in the caller's
    /// part: their own home in a snapshot of /home for anybody but root and approvers
    /// (nothing outside it is shown), and below `path` when it is not empty (bytes: a path
    /// where people see the subvolume, e.g. /home/alice/docs). Bytes written are known only
    /// for a whole subvolume. A listing to root or an approver is journalled. Errors:
    /// NotAuthorized, InvalidArgument, NoSuchSnapshot, NotAllowedForSubvolume,
    /// StemNotRunning, StemFailed, Journal.
    async fn diff(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        path: Vec<u8>,
    ) -> Result<PartChanges, KeeperError> {
        let uid = caller(&self.callers, connection, &header).await?;
        self.keeper.diff(uid, name, &path).await
    }
}

/// The introspection data of `org.tacid.Keeper1`, as committed in `keeper-interface/org.tacid.Keeper1.xml`.
pub fn introspection_xml(keeper: Arc<Keeper>) -> String {
    let iface = Keeper1::new(keeper);
    let mut xml = String::from(
        "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \
         \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n\
         <!-- Generated by `tacid-keeper --print-introspection`; do not edit. -->\n<node>\n",
    );
    iface.introspect_to_writer(&mut xml, 1);
    let _ = writeln!(xml, "</node>");
    xml
}

/// The interface's name, from the macro (checked against the layout in a test).
pub fn interface_name() -> String {
    Keeper1::name().to_string()
}

impl Keeper1 {
    /// After a scheduled act: signal its failure, then look at health and signal when it
    /// worsened. Failing to signal is logged; the act's answer stands.
    async fn after_scheduled(
        &self,
        emitter: &SignalEmitter<'_>,
        act: &str,
        failed: Option<String>,
    ) {
        if let Some(why) = failed {
            let stop = if why.ends_with('.') { "" } else { "." };
            let says = format!("{why}{stop} See `tacid data health` for what to do.");
            tracing::warn!(act, "a scheduled act failed: {why}");
            if let Err(e) = Keeper1::scheduled_act_failed(emitter, act, &says).await {
                tracing::warn!("could not signal ScheduledActFailed: {e}");
            }
        }
        check_and_signal(&self.keeper, emitter).await;
    }
}

/// What a scheduled act's error says, as a failure worth telling people: not when the
/// caller was refused or asked wrongly (the caller is told; a timer never is).
fn act_failure(e: &KeeperError) -> Option<String> {
    use crate::wire::ErrorKind as K;
    match e.kind() {
        Some(K::NotAuthorized | K::InvalidArgument | K::NoSuchTarget) => None,
        _ => Some(e.message()),
    }
}

/// Look at health, write its metrics (when configured), and signal `HealthWorsened` when it
/// worsened (the daemon calls this every `layout::defaults::HEALTH_CHECK_EVERY_SECS`, and
/// after every scheduled act).
pub async fn check_and_signal(keeper: &Keeper, emitter: &SignalEmitter<'_>) {
    match keeper.check_health().await {
        Ok((report, worsened)) => {
            keeper.write_metrics(&report).await;
            if let Some(w) = worsened {
                signal_worsened(emitter, &w).await;
            }
        }
        Err(e) => tracing::warn!("health could not be checked: {}", e.message()),
    }
}

async fn signal_worsened(emitter: &SignalEmitter<'_>, w: &crate::health::Worsened) {
    tracing::warn!(level = w.level.as_str(), "health worsened: {}", w.says);
    if let Err(e) = Keeper1::health_worsened(emitter, w.level.as_str(), &w.says).await {
        tracing::warn!("could not signal HealthWorsened: {e}");
    }
}
