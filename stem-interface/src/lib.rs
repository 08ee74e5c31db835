//! `org.tacid.Stem1`, the stem's D-Bus interface, version 1, as both sides see it: the
//! types that cross the bus, the named errors, and the client's proxy ([`Stem1Proxy`]).
//!
//! The server is the stem's `stem1` module; its introspection is committed beside this
//! crate (`org.tacid.Stem1.xml`) and a test in the stem holds the two equal. This crate
//! holds no privileged code: the keeper builds on it without building the stem (adr/0003).
//! What the interface deliberately lacks is written at the top of the stem's `stem1.rs`.
//!
//! Version 1 is frozen once shipped: a change of meaning is `org.tacid.Stem2`, served
//! beside this one for a release.

pub mod pipe;

use layout::{Outcome, OutcomeResult, Reason, RestoreMember, RestoreRequest};
use serde::{Deserialize, Serialize};
use zbus::Type;

/// How the engine knows what a snapshot is of: [`layout::origin::Origin`] as the wire
/// carries it (`"parent-uuid"` or `"name-only"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[zbus(signature = "s")]
#[serde(rename_all = "kebab-case")]
pub enum OriginInfo {
    /// Its parent UUID is the live subvolume's, or one the live subvolume descends from.
    ParentUuid,
    /// Its parent is gone (replaced by an earlier restore); only its name says what it is of.
    NameOnly,
}

/// What became of one hook of a consistent cut (adr/0026): a command root configured for a
/// paused unit, run as its user before the freeze or after the thaw. Its output is in the
/// stem's journal, not here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct HookInfo {
    /// The unit it is a hook of.
    pub unit: String,
    /// "before" (the freeze) or "after" (the thaw).
    pub when: String,
    /// The user it ran as.
    pub user: String,
    /// Whether it exited 0 within its limit.
    pub ok: bool,
    /// What happened, in words (`exited 0 in 12 ms`, `failed: exited 3 after 40 ms`).
    pub summary: String,
}

/// One snapshot in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SnapshotInfo {
    /// The snapshot's canonical name (`@home.2026-12-01T140200.123456Z`).
    pub name: String,
    /// Its Btrfs subvolume id.
    pub id: u64,
    /// Its Btrfs UUID, lowercase and hyphenated.
    pub uuid: String,
    /// The subvolume it is a snapshot of (`@home`).
    pub of: String,
    /// How `of` is known.
    pub origin: OriginInfo,
    /// When it was taken (the Btrfs creation time, or the time in its name when Btrfs
    /// holds no valid one), in microseconds since the Unix epoch.
    pub taken_unix_micros: i64,
    /// Whether it is read-only (only read-only snapshots are restored).
    pub readonly: bool,
    /// Whether the staged restore request names it (it cannot be deleted while so).
    pub staged: bool,
    /// When it was received (fetched from a copy), the UUID of the snapshot it was
    /// received from, lowercase and hyphenated; else "". Its identity to `btrfs send` and
    /// `receive`: a copy of it, or a stream against it as parent, names this UUID, not
    /// `uuid`.
    pub received_uuid: String,
}

/// A restore request: put `subvolume` back to `snapshot`, whose Btrfs UUID is `uuid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct RequestInfo {
    /// The subvolume to put back (`@home`).
    pub subvolume: String,
    /// The snapshot to put it back to.
    pub snapshot: String,
    /// The snapshot's Btrfs UUID when the request was staged; the boot restores only that.
    pub uuid: String,
}

/// The answer to StageRestore: a request of one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct StagedRestore {
    /// The request now staged.
    pub request: RequestInfo,
    /// True when exactly this request was staged already and nothing changed.
    pub already_staged: bool,
    /// Always true: nothing is restored until the next boot.
    pub reboot_needed: bool,
    /// One sentence saying what happened, for the journal.
    pub message: String,
}

/// The answer to StageSetRestore: a request of one or more members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct StagedSetRestore {
    /// The request now staged: one element per member, in the order the boot exchanges them.
    pub request: Vec<RequestInfo>,
    /// True when exactly this request was staged already and nothing changed.
    pub already_staged: bool,
    /// Always true: nothing is restored until the next boot.
    pub reboot_needed: bool,
    /// One sentence saying what happened, for the journal.
    pub message: String,
}

/// The filesystem's space (statvfs of the top level) and the cleaner's backlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SpaceInfo {
    /// Bytes a writer could still use.
    pub free_bytes: u64,
    /// The filesystem's size in bytes.
    pub size_bytes: u64,
    /// Below this many free bytes snapshots are refused (0: no hard floor).
    pub hard_floor_bytes: u64,
    /// Deleted snapshots whose space Btrfs has not given back yet.
    pub deletions_pending: u32,
}

/// What the initrd did with a restore request (on the wire: `"done"` or `"refused"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[zbus(signature = "s")]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeResultInfo {
    /// The subvolume was put back to the snapshot.
    Done,
    /// Nothing was changed; the reason says why.
    Refused,
}

/// The initrd's record of what it did with the last request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct OutcomeInfo {
    /// Done or refused.
    pub result: OutcomeResultInfo,
    /// When the initrd finished with the request, in microseconds since the Unix epoch; it
    /// identifies the outcome (the keeper reports each one once).
    pub finished_unix_micros: i64,
    /// The request, when it parsed: zero elements, or one per member.
    pub request: Vec<RequestInfo>,
    /// Why it was refused, or a note on what was done.
    pub reason: String,
    /// Of a restore that was done by an initrd that keeps what it replaces (adr/0027): per
    /// member, in the request's order, the read-only snapshot in the store now holding what
    /// the member held before, or an empty name when it was deleted (below the hard floor).
    /// Empty for a refusal and for an initrd from before.
    pub replaced: Vec<ReplacedInfo>,
}

/// What became of the subvolume a restore replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct ReplacedInfo {
    /// The member (`@home`).
    pub subvolume: String,
    /// The kept snapshot's name in the store; empty when it was deleted.
    pub kept: String,
}

/// What changed in a live subvolume since one of its snapshots (ChangesSince), from Btrfs
/// metadata only. "Files" are everything that is not a directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct ChangesInfo {
    pub files_added: u64,
    /// Files whose content or metadata changed (a rename or a new hard link modifies the
    /// file and its directories; it never adds or removes).
    pub files_modified: u64,
    pub files_removed: u64,
    pub directories_added: u64,
    pub directories_modified: u64,
    pub directories_removed: u64,
    /// Logical bytes of file data written since the snapshot and still there.
    pub bytes_written: u64,
    /// False when the time limit cut the count short: every number is then "at least".
    pub complete: bool,
    /// The changed paths, when asked for (at most 10000), relative to the subvolume root.
    pub paths: Vec<ChangedPathInfo>,
    /// How many changed paths were left out of `paths`.
    pub paths_left_off: u64,
    /// ChangesInPart only: changed paths in the part that are not named, because a
    /// directory on the way to them is one the person may not list. 0 otherwise.
    pub paths_hidden: u64,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct ChangedPathInfo {
    /// `added`, `modified` or `removed`.
    pub change: String,
    pub directory: bool,
    /// Relative to the subvolume's root; for a removed one, where it was in the snapshot.
    /// Bytes (`ay`), not a string: a name is any bytes but NUL and `/`, and D-Bus strings
    /// are UTF-8 only. Whoever shows it escapes it (`layout::escape`, adr/0017).
    pub path: Vec<u8>,
}

/// Which snapshot holds the disk (Space): data bytes on disk, from the file extents,
/// without quotas (adr/0029). An extent counts whole, at its size on disk (compressed when
/// compressed), once per subvolume; tree blocks and inline data are not data extents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SpaceReportInfo {
    /// The snapshots asked about (all when none were named), oldest first.
    pub snapshots: Vec<SnapshotSpaceInfo>,
    /// Every snapshotted subvolume, in the layout's order.
    pub subvolumes: Vec<SubvolumeSpaceInfo>,
    /// What the snapshots alone hold: deleting every one of them frees this.
    pub store_bytes: u64,
    /// Every data extent walked: the live snapshotted subvolumes, the store, the snapshots.
    pub total_bytes: u64,
    /// False when the time limit cut the walk short: then no number may be relied on (what
    /// was walked is kept, so asking again gets further).
    pub complete: bool,
    /// Subvolumes walked for this answer; the others were kept from earlier answers.
    pub walked: u64,
}

/// One snapshot's space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SnapshotSpaceInfo {
    /// Its canonical name.
    pub name: String,
    /// What deleting it frees now (once Btrfs's cleaner has run): extents nothing else holds.
    pub exclusive_bytes: u64,
    /// What it holds together with the live subvolume, other snapshots or the store.
    pub shared_bytes: u64,
    /// Extents it holds that the snapshot before it (of the same subvolume) does not:
    /// what was written between the two and still there at it. 0 for the first.
    pub new_bytes: u64,
    /// False for the oldest snapshot of its subvolume (`new_bytes` means nothing then).
    pub has_previous: bool,
}

/// One snapshotted subvolume's space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SubvolumeSpaceInfo {
    /// The layout's name (`@home`).
    pub subvolume: String,
    /// How many snapshots of it the store holds.
    pub snapshots: u32,
    /// The sum of those snapshots' exclusive bytes.
    pub snapshots_exclusive_bytes: u64,
    /// The live subvolume's data bytes, and those only it holds (0 when it is missing).
    pub live_bytes: u64,
    pub live_exclusive_bytes: u64,
    /// How fast its snapshots grow: the bytes each holds that the one before did not,
    /// summed, per day from the first snapshot to the last.
    pub growth_bytes_per_day: u64,
    /// False with fewer than two snapshots (no growth to speak of).
    pub has_growth: bool,
}

/// The answer to CopyTo: the copy made and verified on the target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopiedInfo {
    /// The target's configured name.
    pub target: String,
    /// The snapshot copied (the copy has the same name on the target).
    pub name: String,
    /// The copy's received UUID, checked equal to the snapshot's UUID (or, for a fetched
    /// snapshot, the UUID it was itself received from).
    pub received_uuid: String,
    /// The snapshot the stream was made against; "" for a full send.
    pub parent: String,
    /// Bytes of send stream moved.
    pub bytes: u64,
    /// True when sent against `parent`.
    pub incremental: bool,
}

/// The answer to SendSealed: the stream framed into the pipe, as its END frame's trailer
/// says it too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SentSealed {
    /// The stream's UUID, lowercase and hyphenated: the snapshot's UUID, or for a snapshot
    /// that was itself fetched, the UUID it was received from (what a receive of the stream
    /// records as received UUID; ReceiveSealed's `uuid`).
    pub uuid: String,
    /// The parent's UUID as the stream names it (the same rule); "" for a full send.
    pub parent_uuid: String,
    /// Bytes of send stream sent (the frames' headers not counted).
    pub bytes: u64,
}

/// One verified copy on a target (CopiesOn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyInfo {
    /// The copy's name: the snapshot's name.
    pub name: String,
    /// The copy's own UUID on the target.
    pub uuid: String,
    /// The UUID of the snapshot it was received from.
    pub received_uuid: String,
}

/// One copy or fetch in flight (CopyProgress).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct CopyProgressInfo {
    pub target: String,
    pub name: String,
    /// "copy" or "fetch"; "send-sealed" or "receive-sealed" (then `target` is "": the
    /// stem sees only a pipe).
    pub kind: String,
    /// Bytes of stream moved so far.
    pub bytes: u64,
    /// Milliseconds since it started.
    pub elapsed_ms: u64,
}

/// One snapshot open read-only for a person (OpenSnapshot, OpenSnapshots; adr/0019).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct OpenInfo {
    /// Whose it is: it is mounted under `/run/tacid/<for_uid>/`, which that uid alone (and
    /// root) may enter.
    pub for_uid: u32,
    /// The snapshot's canonical name; also the mount point's name.
    pub name: String,
    /// The home directory shown (one name, bytes); empty for the whole snapshot.
    pub part: Vec<u8>,
    /// Where it is mounted (`/run/tacid/<for_uid>/<name>`).
    pub path: String,
    /// When it was first opened, in microseconds since the Unix epoch.
    pub opened_unix_micros: i64,
    /// When it is closed if nobody uses it then (the last open plus the idle time).
    pub idle_close_unix_micros: i64,
}

bus_peer::named_errors! {
    /// The errors of `org.tacid.Stem1`: one variant per [`ErrorKind`], named on the bus
    /// `org.tacid.Stem1.Error.<Kind>`, with a message that says what to do.
    prefix = "org.tacid.Stem1.Error";
    /// Why the stem said no: every error `org.tacid.Stem1` names, without its message. The
    /// D-Bus name is `org.tacid.Stem1.Error.` and [`ErrorKind::name`].
    kinds {
        /// The caller is not the keeper's user, or the bus could not say who the caller is.
        AccessDenied,
        /// An argument is not a subvolume of the layout or not a canonical snapshot name.
        InvalidArgument,
        /// Snapshots of that subvolume are not taken (`@root`, `@snapshots`, ...).
        NotSnapshottable,
        /// That subvolume's snapshots are never put back (`@nix`, ...).
        NotRestorable,
        /// There is no snapshot of that name in the store.
        NoSuchSnapshot,
        /// The snapshot is writable; only read-only snapshots are restored.
        NotReadOnly,
        /// The snapshot is of another subvolume than its name says.
        OfAnotherSubvolume,
        /// A different restore is already staged; withdraw it first.
        AnotherRestoreStaged,
        /// The snapshot is named by the staged restore; withdraw the restore before deleting it.
        Pinned,
        /// The filesystem is full; nothing was left half-made.
        NoSpace,
        /// The free space is below the hard floor; no snapshot was taken.
        BelowHardFloor,
        /// The snapshot store (`@snapshots`) is missing, not a subvolume, or not root-only.
        StoreUnsafe,
        /// The live subvolume to snapshot is missing or not a subvolume.
        LiveSubvolumeMissing,
        /// The staged request file is bad (unreadable, malformed, not a regular file, not
        /// root's): the next boot refuses it; DiscardBadRequest removes it.
        BadRequestFile,
        /// The initrd's outcome file is unreadable or malformed.
        BadOutcomeFile,
        /// The snapshot holds no state the live subvolume descends from (an earlier restore
        /// left that line behind): changes since it cannot be counted.
        NotInHistory,
        /// No copy target of that name is configured (or the name is not a target name).
        NoSuchTarget,
        /// The target is busy with another act (one at a time per target).
        TargetBusy,
        /// The target cannot be reached (not mounted; host down; refused the key).
        TargetUnreachable,
        /// The SSH target's host key is not the pinned one.
        HostKeyChanged,
        /// The target directory is not on Btrfs.
        TargetNotBtrfs,
        /// The target filesystem is full; nothing half-received was left.
        TargetFull,
        /// The transfer failed (the message says why); nothing half-received was left.
        TransferFailed,
        /// The target holds no copy of that name.
        NoSuchCopy,
        /// It is there already: the target holds that copy (CopyTo), or the store a snapshot of
        /// that name (FetchFrom). Nothing changed.
        AlreadyHere,
        /// The part asked to open is not the owner's directory in the snapshot (missing, a
        /// symlink or a file, or owned by another uid there).
        PartRefused,
        /// A cap on open snapshots is reached (per person or overall); close one first.
        TooManyOpen,
        /// That snapshot is open for that uid already, showing another part; close it first.
        AlreadyOpen,
        /// The snapshot is open and a process uses it (its working directory, a file or a
        /// mapping is in it): not closed (CloseSnapshot) or not deleted (Delete); nothing changed.
        InUse,
        /// A unit root names for a consistent cut did not freeze in time, could not be
        /// frozen, its hook before the freeze failed or outlived its limit, or the pause
        /// outlasted its limit: no set was taken and every unit was thawed; the message names
        /// the unit and what to do.
        NotPaused,
        /// Anything else went wrong (an I/O error from Btrfs); the message says what.
        Failed,
    }
}

/// A wire value that does not convert into its domain type (a stem that speaks another
/// dialect, or a bug); the text names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the stem answered a malformed {field}: {problem}")]
pub struct WireError {
    pub field: &'static str,
    pub problem: String,
}

impl WireError {
    /// The error for `field`, given the problem (for `map_err` after a parser).
    pub fn in_field(field: &'static str) -> impl FnOnce(String) -> WireError {
        move |problem| WireError { field, problem }
    }
}

impl From<layout::origin::Origin> for OriginInfo {
    fn from(o: layout::origin::Origin) -> OriginInfo {
        match o {
            layout::origin::Origin::ParentUuid => OriginInfo::ParentUuid,
            layout::origin::Origin::NameOnly => OriginInfo::NameOnly,
        }
    }
}

impl From<OriginInfo> for layout::origin::Origin {
    fn from(o: OriginInfo) -> layout::origin::Origin {
        match o {
            OriginInfo::ParentUuid => layout::origin::Origin::ParentUuid,
            OriginInfo::NameOnly => layout::origin::Origin::NameOnly,
        }
    }
}

impl From<&RestoreMember> for RequestInfo {
    fn from(m: &RestoreMember) -> RequestInfo {
        RequestInfo {
            subvolume: m.subvolume().to_string(),
            snapshot: m.snapshot().to_string(),
            uuid: m.uuid().hyphenated().to_string(),
        }
    }
}

/// A request on the wire: one element per member, in the request's order.
pub fn request_infos(r: &RestoreRequest) -> Vec<RequestInfo> {
    r.members().iter().map(RequestInfo::from).collect()
}

/// A request from the wire, through the request file's own strict parser: one canonical form
/// for both.
pub fn request_from_infos(members: &[RequestInfo]) -> Result<RestoreRequest, WireError> {
    let text: String = members
        .iter()
        .map(|r| format!("{} {} {}\n", r.subvolume, r.snapshot, r.uuid))
        .collect();
    RestoreRequest::parse(text.as_bytes())
        .map_err(|e| WireError::in_field("restore request")(e.to_string()))
}

impl From<&Outcome> for OutcomeInfo {
    fn from(o: &Outcome) -> OutcomeInfo {
        OutcomeInfo {
            result: match o.result {
                OutcomeResult::Done => OutcomeResultInfo::Done,
                OutcomeResult::Refused => OutcomeResultInfo::Refused,
            },
            finished_unix_micros: unix_micros(o.finished),
            request: o.request.as_ref().map(request_infos).unwrap_or_default(),
            reason: o.reason.as_str().to_owned(),
            replaced: o
                .replaced
                .iter()
                .map(|r| ReplacedInfo {
                    subvolume: r.subvolume.to_string(),
                    kept: r.kept.map(|k| k.to_string()).unwrap_or_default(),
                })
                .collect(),
        }
    }
}

impl TryFrom<&OutcomeInfo> for Outcome {
    type Error = WireError;
    fn try_from(o: &OutcomeInfo) -> Result<Outcome, WireError> {
        let request = match o.request.as_slice() {
            [] => None,
            members => Some(request_from_infos(members)?),
        };
        let result = match o.result {
            OutcomeResultInfo::Done => OutcomeResult::Done,
            OutcomeResultInfo::Refused => OutcomeResult::Refused,
        };
        let replaced = o
            .replaced
            .iter()
            .map(|r| {
                let subvolume = layout::SubvolumeName::parse(&r.subvolume)
                    .map_err(|e| WireError::in_field("replaced subvolume")(e.to_string()))?;
                let kept = match r.kept.as_str() {
                    "" => None,
                    name => Some(
                        layout::SnapshotName::parse(name)
                            .map_err(|e| WireError::in_field("kept snapshot")(e.to_string()))?,
                    ),
                };
                Ok(layout::Replaced { subvolume, kept })
            })
            .collect::<Result<Vec<_>, WireError>>()?;
        Ok(Outcome::new(
            result,
            from_unix_micros(o.finished_unix_micros),
            request,
            Reason::new(&o.reason),
        )
        .with_replaced(replaced))
    }
}

use layout::human::{from_unix_micros, unix_micros};

/// The client side of `org.tacid.Stem1` (the keeper's way in). Each method is the server's
/// of the same name (`take_snapshot` is `TakeSnapshot`); what it does and which errors it
/// answers is documented there, in the stem's `stem1.rs` and the committed XML.
// The names are literals because the macro needs literals; a test checks them against
// `layout::names`.
#[zbus::proxy(
    interface = "org.tacid.Stem1",
    default_service = "org.tacid.Stem1",
    default_path = "/org/tacid/Stem1"
)]
pub trait Stem1 {
    fn take_snapshot(&self, subvolume: &str) -> Result<SnapshotInfo, Error>;
    fn take_set(&self, subvolumes: Vec<String>) -> Result<Vec<SnapshotInfo>, Error>;
    #[allow(clippy::type_complexity)]
    fn take_cut(
        &self,
        subvolumes: Vec<String>,
    ) -> Result<(Vec<SnapshotInfo>, Vec<String>, u64, Vec<HookInfo>), Error>;
    fn list(&self) -> Result<Vec<SnapshotInfo>, Error>;
    fn list_since(&self, known: Vec<u64>) -> Result<(Vec<u64>, bool, Vec<SnapshotInfo>), Error>;
    fn delete(&self, name: &str) -> Result<(), Error>;
    fn stage_restore(&self, name: &str) -> Result<StagedRestore, Error>;
    fn stage_set_restore(&self, snapshots: Vec<String>) -> Result<StagedSetRestore, Error>;
    fn withdraw(&self) -> Result<Vec<RequestInfo>, Error>;
    fn discard_bad_request(&self) -> Result<Vec<String>, Error>;
    fn free_space(&self) -> Result<SpaceInfo, Error>;
    fn staged(&self) -> Result<Vec<RequestInfo>, Error>;
    fn outcome(&self) -> Result<Vec<OutcomeInfo>, Error>;
    fn changes_since(
        &self,
        name: &str,
        time_limit_ms: u32,
        with_paths: bool,
    ) -> Result<ChangesInfo, Error>;
    #[allow(clippy::too_many_arguments)]
    fn changes_in_part(
        &self,
        name: &str,
        part: Vec<u8>,
        owner_uid: u32,
        gids: Vec<u32>,
        below: Vec<u8>,
        time_limit_ms: u32,
    ) -> Result<ChangesInfo, Error>;
    fn changes_since_last_commit(
        &self,
        name: &str,
        time_limit_ms: u32,
    ) -> Result<ChangesInfo, Error>;
    fn space(&self, names: Vec<String>, time_limit_ms: u32) -> Result<SpaceReportInfo, Error>;
    fn copy_to(&self, name: &str, target: &str) -> Result<CopiedInfo, Error>;
    fn copies_on(&self, target: &str) -> Result<Vec<CopyInfo>, Error>;
    fn delete_copy(&self, target: &str, name: &str) -> Result<(), Error>;
    fn fetch_from(&self, target: &str, name: &str) -> Result<(SnapshotInfo, u64), Error>;
    fn copy_progress(&self) -> Result<Vec<CopyProgressInfo>, Error>;
    fn send_sealed(
        &self,
        name: &str,
        parent: &str,
        into: zbus::OwnedFd,
    ) -> Result<SentSealed, Error>;
    fn receive_sealed(
        &self,
        name: &str,
        uuid: &str,
        from: zbus::OwnedFd,
    ) -> Result<(SnapshotInfo, u64), Error>;
    fn open_snapshot(
        &self,
        name: &str,
        part: Vec<u8>,
        owner_uid: u32,
        for_uid: u32,
    ) -> Result<(OpenInfo, bool), Error>;
    fn close_snapshot(&self, for_uid: u32, name: &str) -> Result<bool, Error>;
    fn open_snapshots(&self) -> Result<Vec<OpenInfo>, Error>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::DBusError as _;

    #[test]
    fn every_kind_is_named_on_the_bus_and_read_back_as_itself() {
        for kind in ErrorKind::ALL {
            let e = Error::new(kind, "a message");
            let name = format!("org.tacid.Stem1.Error.{kind:?}");
            assert_eq!(e.name().as_str(), name);
            assert_eq!(e.kind(), Some(kind));
            assert_eq!(e.message(), "a message");
            assert_eq!(kind.name(), format!("{kind:?}"));
            // What the proxy receives: a method error of that name, read back by name.
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
        let other = Error::from(zbus::Error::Failure("gone".into()));
        assert_eq!(other.kind(), None);
    }

    #[test]
    fn the_proxys_names_are_the_layouts() {
        let src = include_str!("lib.rs");
        for literal in [
            format!("interface = \"{}\"", layout::names::STEM_BUS_NAME),
            format!("default_service = \"{}\"", layout::names::STEM_BUS_NAME),
            format!("default_path = \"{}\"", layout::names::STEM_OBJECT_PATH),
        ] {
            assert!(src.contains(&literal), "{literal}");
        }
        let _ = std::marker::PhantomData::<Stem1Proxy<'static>>;
    }

    #[test]
    fn a_request_crosses_the_wire_in_its_canonical_form() {
        let name =
            layout::SnapshotName::parse("@home.2026-12-01T140200.123456Z").expect("canonical");
        let request =
            RestoreRequest::one(name.subvolume(), name, uuid_of(7)).expect("a request of one");
        let infos = request_infos(&request);
        assert_eq!(request_from_infos(&infos), Ok(request.clone()));
        let outcome = Outcome::new(
            OutcomeResult::Refused,
            name.taken(),
            Some(request.clone()),
            Reason::new("x"),
        );
        assert_eq!(Outcome::try_from(&OutcomeInfo::from(&outcome)), Ok(outcome));
        let done = Outcome::new(
            OutcomeResult::Done,
            name.taken(),
            Some(request.clone()),
            Reason::new("x"),
        )
        .with_replaced(vec![layout::Replaced {
            subvolume: name.subvolume(),
            kept: Some(name.next()),
        }]);
        assert_eq!(Outcome::try_from(&OutcomeInfo::from(&done)), Ok(done));
        let bad = RequestInfo {
            subvolume: "/home".into(),
            ..infos[0].clone()
        };
        assert!(request_from_infos(&[bad]).is_err());
    }

    fn uuid_of(n: u128) -> uuid::Uuid {
        uuid::Uuid::from_u128(n)
    }
}
