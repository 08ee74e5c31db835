//! `org.tacid.Stem1`: the stem's D-Bus interface, version 1 — the server side.
//!
//! The server ([`Stem1`]) checks the caller, converts arguments into domain types, hands the
//! act to the engine's thread and converts the answer back; nothing else happens here. The
//! wire types, the named errors and the client's proxy are the `stem_interface` crate's
//! (what the keeper builds on); the introspection committed there is what this serves (a
//! test holds them equal). Each wire type converts back into the engine's domain type with
//! `TryFrom`, validated by the layout's parsers.
//!
//! # What this interface deliberately lacks
//!
//! - No method reads or writes file content for anybody: there is no "show me this file as
//!   of Tuesday" and no "put back this one file". The only files the stem writes are the
//!   restore request; the only ones it reads are the request and the initrd's outcome.
//!   OpenSnapshot mounts a snapshot (or one home in it) read-only where one person may
//!   enter, and reads nothing in it: the person reads, with their own rights (adr/0019).
//! - No method restores anything now. A restore is staged and honoured at the next boot by
//!   the initrd, the only time the subvolume is not in use (docs/design.md section 4).
//! - No method takes a path. OpenSnapshot's part is one directory name, opened beneath
//!   the snapshot without following a symlink. Subvolumes are named by the layout's own names (`@home`) and
//!   snapshots by their canonical names; anything else is refused before the engine sees it.
//! - No method names a caller or a reason: who asked and why is the keeper's journal, and
//!   the stem trusts only the bus's record of who is calling.
//! - No method snapshots `@root`, `@root-blank` or `@snapshots`, restores `@nix`, or deletes
//!   a live subvolume; the layout's tables decide, not the caller.
//! - No signals and no properties: the keeper asks; nothing is pushed.
//!
//! Version 1 is frozen once shipped: a change of meaning is `org.tacid.Stem2`, served
//! beside this one for a release.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use layout::{RestoreRequest, SnapshotName, SubvolumeName};
use stem_interface::{
    request_from_infos, request_infos, ChangedPathInfo, ChangesInfo, CopiedInfo, CopyInfo,
    CopyProgressInfo, Error, HookInfo, OpenInfo, OutcomeInfo, RequestInfo, SentSealed,
    SnapshotInfo, SnapshotSpaceInfo, SpaceInfo, SpaceReportInfo, StagedRestore, StagedSetRestore,
    SubvolumeSpaceInfo, WireError,
};
use zbus::message::Header;
use zbus::object_server::Interface as _;
use zbus::{interface, Connection};

use crate::caller::{CallerRefused, KeeperOnly};
use crate::copies::CopyError;
use crate::copies::{Copied, Copies, CopyOnTarget, InFlight, Logged, Programs};
use crate::cut::{Cut, CutError};
use crate::engine::{self, Commit, EngineError, SpaceReport, Staged};
use crate::open::{check_home_part, Closed, OpenError, OpenFailure, OpenSnapshot, Opens, Part};
use crate::worker::{ActFailure, CountFailure, Worker, WorkerGone};
use layout::copies::CopiesConfig;

impl From<&engine::FreeSpace> for SpaceInfo {
    fn from(f: &engine::FreeSpace) -> SpaceInfo {
        SpaceInfo {
            free_bytes: f.free_bytes,
            size_bytes: f.size_bytes,
            hard_floor_bytes: f.hard_floor_bytes,
            deletions_pending: f.deletions_pending,
        }
    }
}

impl From<&Copied> for CopiedInfo {
    fn from(c: &Copied) -> Self {
        CopiedInfo {
            target: c.target.to_string(),
            name: c.name.to_string(),
            received_uuid: c.received_uuid.to_string(),
            parent: c.parent.map(|p| p.to_string()).unwrap_or_default(),
            bytes: c.bytes,
            incremental: c.parent.is_some(),
        }
    }
}

impl From<&crate::copies::SentSealed> for SentSealed {
    fn from(s: &crate::copies::SentSealed) -> Self {
        SentSealed {
            uuid: s.uuid.to_string(),
            parent_uuid: s.parent_uuid.map(|u| u.to_string()).unwrap_or_default(),
            bytes: s.bytes,
        }
    }
}

impl From<&CopyOnTarget> for CopyInfo {
    fn from(c: &CopyOnTarget) -> Self {
        CopyInfo {
            name: c.name.to_string(),
            uuid: c.uuid.to_string(),
            received_uuid: c.received_uuid.to_string(),
        }
    }
}

impl From<&InFlight> for CopyProgressInfo {
    fn from(f: &InFlight) -> Self {
        CopyProgressInfo {
            target: f.target.as_ref().map(|t| t.to_string()).unwrap_or_default(),
            name: f.name.to_string(),
            kind: f.kind.to_owned(),
            bytes: f.bytes,
            elapsed_ms: u64::try_from(f.elapsed.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl From<&OpenSnapshot> for OpenInfo {
    fn from(o: &OpenSnapshot) -> OpenInfo {
        OpenInfo {
            for_uid: o.for_uid,
            name: o.name.to_string(),
            part: o.part.clone(),
            path: o.path.to_string_lossy().into_owned(),
            opened_unix_micros: layout::human::unix_micros(o.opened),
            idle_close_unix_micros: layout::human::unix_micros(o.idle_close),
        }
    }
}
impl From<&EngineError> for Error {
    fn from(e: &EngineError) -> Error {
        let message = e.to_string();
        match e {
            EngineError::Store(_) => Error::StoreUnsafe(message),
            EngineError::NotSnapshottable(_) => Error::NotSnapshottable(message),
            EngineError::NotRestorable(_) => Error::NotRestorable(message),
            EngineError::LiveSubvolume { .. } => Error::LiveSubvolumeMissing(message),
            EngineError::NoSuchSnapshot(_) => Error::NoSuchSnapshot(message),
            EngineError::NotReadOnly(_) => Error::NotReadOnly(message),
            EngineError::OfAnotherSubvolume { .. } => Error::OfAnotherSubvolume(message),
            EngineError::AnotherRestoreStaged { .. } => Error::AnotherRestoreStaged(message),
            EngineError::Pinned(_) => Error::Pinned(message),
            EngineError::BeingSent(_) => Error::TargetBusy(message),
            EngineError::InUse { .. } => Error::InUse(message),
            EngineError::InvalidSet(_) => Error::InvalidArgument(message),
            EngineError::NoSpace { .. } => Error::NoSpace(message),
            EngineError::BelowHardFloor { .. } => Error::BelowHardFloor(message),
            // A set fails the way its member failed; the message names the member.
            EngineError::SetMember { source, .. } => match Error::from(source.as_ref()).kind() {
                Some(kind) => Error::new(kind, message),
                None => Error::Failed(message),
            },
            EngineError::BadRequestFile(_) => Error::BadRequestFile(message),
            EngineError::BadOutcomeFile(_) => Error::BadOutcomeFile(message),
            EngineError::NotInHistory { .. } => Error::NotInHistory(message),
            EngineError::AlreadyHere(_) => Error::AlreadyHere(message),
            EngineError::FetchUnverified { .. } => Error::TransferFailed(message),
            EngineError::NotTopLevel { .. }
            | EngineError::NoFreeName(_)
            | EngineError::Btrfs(_) => Error::Failed(message),
        }
    }
}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Error {
        Error::from(&e)
    }
}

impl From<CopyError> for Error {
    fn from(e: CopyError) -> Error {
        let message = e.to_string();
        match e {
            CopyError::NoSuchTarget(_) => Error::NoSuchTarget(message),
            CopyError::Sealed(_) | CopyError::BadPipe(_) | CopyError::BadParent(_) => {
                Error::InvalidArgument(message)
            }
            CopyError::SealedBusy { .. } | CopyError::FetchBusy => Error::TargetBusy(message),
            CopyError::SealedFailed { .. } => Error::TransferFailed(message),
            CopyError::NoSuchSnapshot(_) => Error::NoSuchSnapshot(message),
            CopyError::NotReadOnly(_) => Error::NotReadOnly(message),
            CopyError::TargetBusy(_) => Error::TargetBusy(message),
            // Unfit as a place the way an unreachable one is: every act on it fails alike.
            CopyError::TargetUnreachable { .. }
            | CopyError::OnTheTacidDisk { .. }
            | CopyError::Stalled(_) => Error::TargetUnreachable(message),
            CopyError::HostKeyChanged { .. } => Error::HostKeyChanged(message),
            CopyError::TargetNotBtrfs { .. } => Error::TargetNotBtrfs(message),
            CopyError::TargetFull { .. } => Error::TargetFull(message),
            CopyError::TransferFailed { .. } => Error::TransferFailed(message),
            CopyError::NoSuchCopy { .. } => Error::NoSuchCopy(message),
            CopyError::AlreadyHere(_) => Error::AlreadyHere(message),
            CopyError::Engine(e) => Error::from(&e),
            CopyError::Failed(_) => Error::Failed(message),
        }
    }
}

impl From<OpenError> for Error {
    fn from(e: OpenError) -> Error {
        let message = e.to_string();
        match e {
            OpenError::InvalidPart(_) | OpenError::PartOfNotHomes { .. } => {
                Error::InvalidArgument(message)
            }
            OpenError::PartRefused { .. } => Error::PartRefused(message),
            OpenError::TooManyForUser { .. } | OpenError::TooManyOverall { .. } => {
                Error::TooManyOpen(message)
            }
            OpenError::AlreadyOpen { .. } => Error::AlreadyOpen(message),
            OpenError::Engine(e) => Error::from(&e),
            OpenError::Unavailable(_) | OpenError::Sys { .. } => Error::Failed(message),
        }
    }
}

impl From<ActFailure> for Error {
    fn from(e: ActFailure) -> Error {
        match e {
            ActFailure::Engine(e) => Error::from(&e),
            ActFailure::WorkerGone(gone) => Error::from(gone),
        }
    }
}

impl From<CountFailure> for Error {
    fn from(e: CountFailure) -> Error {
        match e {
            CountFailure::Engine(e) => Error::from(&e),
            CountFailure::WorkerGone(gone) => Error::from(gone),
            f @ CountFailure::Stopped { .. } => Error::Failed(f.to_string()),
        }
    }
}

impl From<OpenFailure> for Error {
    fn from(f: OpenFailure) -> Error {
        match f {
            OpenFailure::Open(e) => e.into(),
            OpenFailure::WorkerGone(gone) => gone.into(),
            f @ OpenFailure::DeletedMeanwhile(_) => Error::NoSuchSnapshot(f.to_string()),
            f @ OpenFailure::OpenerLeft(_) => Error::Failed(f.to_string()),
        }
    }
}

impl From<WorkerGone> for Error {
    fn from(e: WorkerGone) -> Error {
        Error::Failed(e.to_string())
    }
}

fn refused(e: CallerRefused) -> Error {
    Error::AccessDenied(e.to_string())
}

/// The server side: the interface served at `/org/tacid/Stem1`.
#[derive(Debug)]
pub struct Stem1 {
    worker: Worker,
    keeper_only: KeeperOnly,
    copies: Arc<Copies>,
    opens: Opens,
    cut: Arc<Cut>,
}

impl Stem1 {
    /// Serve the engine running on `worker` to the one user `keeper_only` allows, with no
    /// copy targets.
    pub fn new(worker: Worker, keeper_only: KeeperOnly) -> Stem1 {
        let copies = Copies::new(
            CopiesConfig::default(),
            Programs::default(),
            worker.clone(),
            PathBuf::new(),
        );
        Stem1::with_copies(worker, keeper_only, Arc::new(copies))
    }

    /// As [`Stem1::new`], with the copy engine `copies` (root's configured targets).
    pub fn with_copies(worker: Worker, keeper_only: KeeperOnly, copies: Arc<Copies>) -> Stem1 {
        Stem1 {
            worker,
            keeper_only,
            copies,
            opens: Opens::unavailable("the stem was started without it"),
            cut: Arc::new(Cut::none()),
        }
    }

    /// As it is, with root's units paused around TakeCut's sets.
    pub fn with_cut(self, cut: Arc<Cut>) -> Stem1 {
        Stem1 { cut, ..self }
    }

    /// As it is, with `opens` serving OpenSnapshot, CloseSnapshot and OpenSnapshots.
    pub fn with_opens(self, opens: Opens) -> Stem1 {
        Stem1 { opens, ..self }
    }

    /// Admit the call or refuse it; every method starts here, before it looks at an argument.
    async fn admit(&self, connection: &Connection, header: &Header<'_>) -> Result<u32, Error> {
        let member = header
            .member()
            .map(|m| m.as_str().to_owned())
            .unwrap_or_default();
        match self.keeper_only.check(connection, header).await {
            Ok(uid) => {
                tracing::debug!(uid, member, "call admitted");
                Ok(uid)
            }
            Err(refusal) => {
                tracing::warn!(member, %refusal, "call refused");
                Err(refused(refusal))
            }
        }
    }

    /// Run `act` on the engine's thread ([`Worker::act`], which logs the answer).
    async fn act<T: Send + 'static>(
        &self,
        what: String,
        act: impl FnOnce(&engine::Engine) -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, Error> {
        Ok(self.worker.act(what, act).await?)
    }
}

/// `org.tacid.Stem1`: the stem's narrow set of privileged acts on Btrfs subvolumes.
/// Only the keeper's user may call it.
// The interface and bus names are literals because the macro needs literals; a unit test
// checks them against `layout::names`.
#[interface(name = "org.tacid.Stem1")]
impl Stem1 {
    /// Take one read-only snapshot of a subvolume, committed to disk before the answer.
    /// `subvolume`: the layout's own name of a snapshotted subvolume (`@home`), not a path.
    /// Returns the snapshot. Errors: AccessDenied, InvalidArgument, NotSnapshottable,
    /// LiveSubvolumeMissing, NoSpace, StoreUnsafe, Failed.
    #[zbus(out_args("snapshot"))]
    async fn take_snapshot(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        subvolume: &str,
    ) -> Result<SnapshotInfo, Error> {
        self.admit(connection, &header).await?;
        let subvolume = parse_subvolume(subvolume)?;
        let taken = self
            .act(format!("take {subvolume}"), move |e| e.take(subvolume))
            .await?;
        Ok(SnapshotInfo::from(&taken))
    }

    /// Take a set of snapshots, all or nothing: each committed; when one fails, the ones
    /// already taken are deleted again and the error names the member that failed.
    /// `subvolumes`: one or more layout names of snapshotted subvolumes, each at most once.
    /// Returns the snapshots in the order asked. Errors: as TakeSnapshot.
    #[zbus(out_args("snapshots"))]
    async fn take_set(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        subvolumes: Vec<String>,
    ) -> Result<Vec<SnapshotInfo>, Error> {
        self.admit(connection, &header).await?;
        let set = parse_set(&subvolumes)?;
        let what = format!("take set {}", subvolumes.join(" "));
        let taken = self.act(what, move |e| e.take_set(&set)).await?;
        Ok(taken.iter().map(SnapshotInfo::from).collect())
    }

    /// Take a set as TakeSet does, with the units root names for a consistent cut paused
    /// (their cgroups frozen) from before the first member until after the last, then
    /// thawed: the set is one moment of what they wrote. `subvolumes`: as TakeSet. Returns
    /// the snapshots in the order asked, the units paused (empty: none configured or none
    /// running, and the set is an ordinary one), and how long they were paused, in
    /// microseconds. A unit that does not freeze in time, or a pause that outlasts its
    /// limit, takes no set and leaves every unit thawed. `hooks`: every hook root configured
    /// for a paused unit that ran, in order: before the freeze (one that fails takes no
    /// set), then after the thaw (one that fails is reported here; the set stands).
    /// Errors: as TakeSet, and NotPaused.
    #[zbus(out_args("snapshots", "paused_units", "paused_us", "hooks"))]
    #[allow(clippy::type_complexity)]
    async fn take_cut(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        subvolumes: Vec<String>,
    ) -> Result<(Vec<SnapshotInfo>, Vec<String>, u64, Vec<HookInfo>), Error> {
        self.admit(connection, &header).await?;
        let set = parse_set(&subvolumes)?;
        let what = format!("take set {} (consistent cut)", subvolumes.join(" "));
        let started = std::time::Instant::now();
        match self.cut.take_set(&self.worker, set).await {
            Ok(taken) => {
                let paused: Vec<String> = taken.paused.iter().map(|u| u.to_string()).collect();
                tracing::info!(
                    took_us = started.elapsed().as_micros() as u64,
                    paused_us = taken.held.as_micros() as u64,
                    "{what}: done, paused: {}",
                    if paused.is_empty() {
                        "none".to_string()
                    } else {
                        paused.join(" ")
                    }
                );
                for h in taken.hooks.iter().filter(|h| !h.ok) {
                    tracing::warn!("{what}: the set stands, but the hook {}", h.line());
                }
                Ok((
                    taken.snapshots.iter().map(SnapshotInfo::from).collect(),
                    paused,
                    taken.held.as_micros() as u64,
                    taken
                        .hooks
                        .iter()
                        .map(|h| HookInfo {
                            unit: h.unit.to_string(),
                            when: h.when.as_str().to_owned(),
                            user: h.user.to_string(),
                            ok: h.ok,
                            summary: h.summary.clone(),
                        })
                        .collect(),
                ))
            }
            Err(e) => {
                tracing::warn!("{what}: refused or failed: {e}");
                Err(match e {
                    CutError::Act(a) => a.into(),
                    e => Error::NotPaused(e.to_string()),
                })
            }
        }
    }

    /// Every snapshot in the store, newest first.
    /// Errors: AccessDenied, StoreUnsafe, Failed.
    #[zbus(out_args("snapshots"))]
    async fn list(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<SnapshotInfo>, Error> {
        self.admit(connection, &header).await?;
        let all = self.act("list".into(), |e| e.list()).await?;
        Ok(all.iter().map(SnapshotInfo::from).collect())
    }

    /// The store's generation, and every snapshot in it, newest first, when that is not
    /// `known` (a generation this method answered before; empty: none). Answers the
    /// generation now, whether it differs from `known`, and the snapshots when it does (an
    /// empty array when it does not). A generation is only compared for equality: it
    /// changes with anything a list shows — in the store or at the top of the filesystem, by
    /// the stem or by root by hand — and with every start of the stem.
    /// Errors: AccessDenied, StoreUnsafe, Failed.
    #[zbus(out_args("generation", "changed", "snapshots"))]
    async fn list_since(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        known: Vec<u64>,
    ) -> Result<(Vec<u64>, bool, Vec<SnapshotInfo>), Error> {
        self.admit(connection, &header).await?;
        let (now, listed) = self
            .act("list since a generation".into(), move |e| {
                e.list_since(&known)
            })
            .await?;
        let changed = listed.is_some();
        let all = listed.unwrap_or_default();
        Ok((
            now.as_slice().to_vec(),
            changed,
            all.iter().map(SnapshotInfo::from).collect(),
        ))
    }

    /// Delete a snapshot. `name`: the snapshot's canonical name. The snapshot is unlinked
    /// before the answer; the commit and Btrfs's cleaner follow in the background (see
    /// FreeSpace for the space coming back).
    /// A snapshot that is open (OpenSnapshots lists it, for anybody) is in use and is not
    /// deleted: a process may hold it, and the kernel would keep it whole (adr/0021).
    /// Errors: AccessDenied, InvalidArgument, NoSuchSnapshot, Pinned (the staged restore
    /// names it), InUse (it is open), StoreUnsafe, Failed.
    async fn delete(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
    ) -> Result<(), Error> {
        self.admit(connection, &header).await?;
        let name = parse_snapshot(name)?;
        let opens = self.opens.clone();
        self.act(format!("delete {name}"), move |e| {
            opens.delete_unless_open(e, name)
        })
        .await
    }

    /// Stage a restore of a snapshot, written durably; the next boot honours it. Nothing is
    /// restored now. `name`: the canonical name of a read-only snapshot of a restorable
    /// subvolume. Staging the same request again changes nothing and says so.
    /// Errors: AccessDenied, InvalidArgument, NotRestorable, NoSuchSnapshot, NotReadOnly,
    /// OfAnotherSubvolume, AnotherRestoreStaged, NoSpace, StoreUnsafe, Failed.
    #[zbus(out_args("staged"))]
    async fn stage_restore(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
    ) -> Result<StagedRestore, Error> {
        self.admit(connection, &header).await?;
        let name = parse_snapshot(name)?;
        let staged = self
            .act(format!("stage restore of {name}"), move |e| {
                e.stage_restore(name)
            })
            .await?;
        Ok(StagedRestore::from(&staged))
    }

    /// Stage a restore of several snapshots together (a set): one request, written durably
    /// once, that the next boot honours whole or not at all. Nothing is restored now.
    /// `snapshots`: canonical names of read-only snapshots, each checked as StageRestore
    /// checks one, at most one per restorable subvolume, in any order (the request lists
    /// them in the layout's order). Exactly the staged request again changes nothing and
    /// says so; any other is refused while one is staged. Errors: as StageRestore, and
    /// InvalidArgument for no names or two of one subvolume.
    #[zbus(out_args("staged"))]
    async fn stage_set_restore(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        snapshots: Vec<String>,
    ) -> Result<StagedSetRestore, Error> {
        self.admit(connection, &header).await?;
        let names = parse_snapshot_set(&snapshots)?;
        let what = format!("stage restore of the set {}", snapshots.join(" "));
        let staged = self.act(what, move |e| e.stage_set_restore(&names)).await?;
        Ok(StagedSetRestore::from(&staged))
    }

    /// Withdraw the staged restore, every member of it. Returns the request withdrawn: zero
    /// elements when nothing was staged (and nothing changed), else one per member.
    /// Errors: AccessDenied, BadRequestFile, StoreUnsafe, Failed.
    #[zbus(out_args("withdrawn"))]
    async fn withdraw(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<RequestInfo>, Error> {
        self.admit(connection, &header).await?;
        let withdrawn = self.act("withdraw".into(), |e| e.withdraw()).await?;
        Ok(withdrawn.as_ref().map(request_infos).unwrap_or_default())
    }

    /// Remove the staged request file when it is bad (unreadable, malformed, not a regular
    /// file, not root's), whatever is under its name: the next boot would refuse it, and no
    /// restore can be staged beside it. Returns what was wrong with it: zero elements when
    /// nothing bad was there (no request, or a good one, which only Withdraw takes back).
    /// Errors: AccessDenied, StoreUnsafe, Failed.
    #[zbus(out_args("discarded"))]
    async fn discard_bad_request(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<String>, Error> {
        self.admit(connection, &header).await?;
        let why = self
            .act("discard a bad request".into(), |e| e.discard_bad_request())
            .await?;
        Ok(why.into_iter().collect())
    }

    /// The free space (statvfs of the top level), the hard floor, and how many deleted
    /// snapshots Btrfs is still cleaning up. Errors: AccessDenied, Failed.
    #[zbus(out_args("space"))]
    async fn free_space(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<SpaceInfo, Error> {
        self.admit(connection, &header).await?;
        let space = self
            .act("read free space".into(), |e| e.free_space())
            .await?;
        Ok(SpaceInfo::from(&space))
    }

    /// The staged restore request: zero elements when none is staged, else one per member,
    /// in the order the boot exchanges them.
    /// Errors: AccessDenied, BadRequestFile, StoreUnsafe, Failed.
    #[zbus(out_args("request"))]
    async fn staged(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<RequestInfo>, Error> {
        self.admit(connection, &header).await?;
        let staged = self.act("read staged".into(), |e| e.staged()).await?;
        Ok(staged.as_ref().map(request_infos).unwrap_or_default())
    }

    /// The initrd's record of what it did with the last request: zero elements when there
    /// is none, else one. Errors: AccessDenied, BadOutcomeFile, StoreUnsafe, Failed.
    #[zbus(out_args("outcome"))]
    async fn outcome(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<OutcomeInfo>, Error> {
        self.admit(connection, &header).await?;
        let outcome = self.act("read outcome".into(), |e| e.outcome()).await?;
        Ok(outcome.iter().map(OutcomeInfo::from).collect())
    }

    /// Which snapshot holds the disk (adr/0029): for the snapshots `names` (canonical names,
    /// each in the store, at most 65536; empty: every snapshot) the data bytes only each
    /// holds (what deleting it frees), those it shares, and those new since the snapshot
    /// before it; for every snapshotted subvolume its live bytes and how fast its snapshots
    /// grow; what the snapshots alone hold. From the file extents of every snapshot, the
    /// live snapshotted subvolumes and the store, without quotas; what was walked is kept
    /// per generation, so only what changed since the last answer is walked again. Does not
    /// commit: the live numbers are as of the last commit. `time_limit_ms`: past it (at most
    /// 20000) the answer has complete = false.
    /// Errors: AccessDenied, InvalidArgument, NoSuchSnapshot, StoreUnsafe, Failed.
    #[zbus(out_args("space"))]
    async fn space(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        names: Vec<String>,
        time_limit_ms: u32,
    ) -> Result<SpaceReportInfo, Error> {
        self.admit(connection, &header).await?;
        if names.len() > MAX_SPACE_NAMES {
            return Err(Error::InvalidArgument(format!(
                "{} names; ask about at most {MAX_SPACE_NAMES} snapshots at a time (none: all)",
                names.len()
            )));
        }
        let mut parsed: Vec<SnapshotName> = Vec::with_capacity(names.len());
        for name in &names {
            let name = parse_snapshot(name)?;
            if !parsed.contains(&name) {
                parsed.push(name);
            }
        }
        let report = self
            .worker
            .measure_space(parsed, changes_limit(time_limit_ms))
            .await?;
        Ok(space_report_info(&report))
    }

    /// What changed in the live subvolume since the snapshot `name`: files and directories
    /// added, modified and removed, and bytes written, from Btrfs metadata only (no file
    /// content is read). The filesystem is committed first, so every write so far counts.
    /// `time_limit_ms`: past it (at most 20000) the answer has complete = false and every
    /// number is a lower bound. `with_paths`: list the changed paths too. Without paths, a
    /// count made earlier is given again while the live subvolume's generation stands.
    /// Errors: AccessDenied, InvalidArgument, NotRestorable, NoSuchSnapshot, NotReadOnly,
    /// NotInHistory, LiveSubvolumeMissing, StoreUnsafe, Failed.
    #[zbus(out_args("changes"))]
    async fn changes_since(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        time_limit_ms: u32,
        with_paths: bool,
    ) -> Result<ChangesInfo, Error> {
        self.admit(connection, &header).await?;
        let name = parse_snapshot(name)?;
        let changes = self
            .worker
            .count_changes(
                name,
                changes_limit(time_limit_ms),
                with_paths,
                Commit::First,
                None,
            )
            .await?;
        Ok(changes_info(&changes))
    }

    /// What changed since the snapshot `name` in one person's home, as that person may see
    /// it (a person's diff): `part` is one directory name directly in a snapshot of `@home`,
    /// which must be a real directory owned by `owner_uid` in the snapshot, as OpenSnapshot
    /// checks it; `below` narrows to a path inside it (relative, `/`-separated, no `.` or
    /// `..`; empty for the whole home). Only the names are listed whose every directory
    /// from the home down `owner_uid` with the groups `gids` (all of them, the primary one
    /// too, at most 65536) may list (read and search), in the tree where the name is: the
    /// snapshot for a removed one, the live subvolume for the others. The rest of the part
    /// is counted in `paths_hidden`, never named. The counts are those of the listed paths,
    /// `bytes_written` is 0 (Btrfs counts it per subvolume), and nothing outside the part is
    /// counted. Commits first, as ChangesSince. Errors: as ChangesSince, and PartRefused.
    #[zbus(out_args("changes"))]
    #[allow(clippy::too_many_arguments)]
    async fn changes_in_part(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        part: Vec<u8>,
        owner_uid: u32,
        gids: Vec<u32>,
        below: Vec<u8>,
        time_limit_ms: u32,
    ) -> Result<ChangesInfo, Error> {
        self.admit(connection, &header).await?;
        let name = parse_snapshot(name)?;
        let Part::Home { component, .. } = Part::parse(&part, owner_uid)? else {
            return Err(Error::InvalidArgument(
                "a part is needed: one directory name directly in a snapshot of @home".into(),
            ));
        };
        if gids.len() > MAX_GIDS {
            return Err(Error::InvalidArgument(format!(
                "{} groups given; a uid has at most {MAX_GIDS}",
                gids.len()
            )));
        }
        let below = relative_below(&below)?;
        check_home_part(&self.worker, name, component.clone(), owner_uid).await?;
        let mut within = component;
        if !below.is_empty() {
            within.push(b'/');
            within.extend_from_slice(&below);
        }
        let viewer = btrfs::Viewer {
            uid: owner_uid,
            gids,
            within,
        };
        // Counted from the paths the person is shown.
        let changes = self
            .worker
            .count_changes(
                name,
                changes_limit(time_limit_ms),
                true,
                Commit::First,
                Some(viewer),
            )
            .await?;
        Ok(changes_info(&changes))
    }

    /// As ChangesSince without paths, but never commits the filesystem: it counts what the
    /// last commit holds (writes not yet committed may be missing), and gives a count made
    /// earlier again while the live subvolume's generation stands. For previews by people
    /// who may only look (adr/0016). Errors: as ChangesSince.
    #[zbus(out_args("changes"))]
    async fn changes_since_last_commit(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        time_limit_ms: u32,
    ) -> Result<ChangesInfo, Error> {
        self.admit(connection, &header).await?;
        let name = parse_snapshot(name)?;
        let changes = self
            .worker
            .count_changes(
                name,
                changes_limit(time_limit_ms),
                false,
                Commit::Never,
                None,
            )
            .await?;
        Ok(changes_info(&changes))
    }

    /// Copy a snapshot off the disk to a configured target: sent with
    /// BTRFS_IOC_SEND, incremental against the newest snapshot of the same subvolume whose
    /// identity the target holds as a copy's received UUID (a full send when there is none),
    /// received there by `btrfs receive`, and verified (read-only, received UUID = the
    /// snapshot's) before the answer. A transfer that dies leaves nothing half-received.
    /// Runs on a thread of its own; one act per target at a time. `name`: a canonical
    /// snapshot name; `target`: a configured target's name (never a path or a host).
    /// Errors: AccessDenied, InvalidArgument, NoSuchTarget, NoSuchSnapshot, NotReadOnly,
    /// TargetBusy, TargetUnreachable, HostKeyChanged, TargetNotBtrfs, TargetFull,
    /// TransferFailed, AlreadyHere (the target holds it already), StoreUnsafe, Failed.
    /// A sealed target is the copier's: InvalidArgument, as for every act on one.
    #[zbus(out_args("copied"))]
    async fn copy_to(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        target: &str,
    ) -> Result<CopiedInfo, Error> {
        self.admit(connection, &header).await?;
        let name = parse_snapshot(name)?;
        let target = parse_target(target)?;
        let what = format!("copy {name} to {target}");
        let copied = self
            .copies
            .act(what, Logged::EveryTime, move |c| c.copy_to(name, &target))
            .await?;
        Ok(CopiedInfo::from(&copied))
    }

    /// The verified copies a target holds, newest first (transfers that died are removed
    /// first, unless the target is busy). `target`: a configured target's name.
    /// Errors: AccessDenied, InvalidArgument, NoSuchTarget, TargetBusy (an SSH target in
    /// use), TargetUnreachable, HostKeyChanged, TargetNotBtrfs, Failed.
    #[zbus(out_args("copies"))]
    async fn copies_on(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
    ) -> Result<Vec<CopyInfo>, Error> {
        self.admit(connection, &header).await?;
        let target = parse_target(target)?;
        let what = format!("read copies on {target}");
        // Anybody may look at a target, through the keeper, as often as they like: a look
        // is not logged, its failure only within an allowance (the keeper passes no caller;
        // the answer is the same for every caller of a target).
        let copies = self
            .copies
            .act(what, Logged::WithinAllowance, move |c| c.copies_on(&target))
            .await?;
        Ok(copies.iter().map(CopyInfo::from).collect())
    }

    /// Delete the copy `name` on `target` (retention on the target is the keeper's).
    /// Errors: AccessDenied, InvalidArgument, NoSuchTarget, NoSuchCopy, TargetBusy,
    /// TargetUnreachable, HostKeyChanged, TargetNotBtrfs, Failed.
    async fn delete_copy(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
        name: &str,
    ) -> Result<(), Error> {
        self.admit(connection, &header).await?;
        let target = parse_target(target)?;
        let name = parse_snapshot(name)?;
        let what = format!("delete the copy {name} on {target}");
        self.copies
            .act(what, Logged::EveryTime, move |c| {
                c.delete_copy(&target, name)
            })
            .await
            .map_err(Error::from)
    }

    /// Fetch the copy `name` from `target` back into the store (a new disk): received into
    /// `@snapshots/.incoming`, verified (read-only, received UUID = the copy's), then put in
    /// the store under its name in one step; List and StageRestore see it from then on
    /// (origin name-only). Answers the snapshot and the bytes of the stream received.
    /// Errors: AccessDenied, InvalidArgument, NoSuchTarget, NoSuchCopy,
    /// AlreadyHere (a snapshot of that name is in the store), TargetBusy,
    /// TargetUnreachable, HostKeyChanged, TargetNotBtrfs, TransferFailed, NoSpace,
    /// StoreUnsafe, Failed.
    #[zbus(out_args("snapshot", "bytes"))]
    async fn fetch_from(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
        name: &str,
    ) -> Result<(SnapshotInfo, u64), Error> {
        self.admit(connection, &header).await?;
        let target = parse_target(target)?;
        let name = parse_snapshot(name)?;
        let what = format!("fetch {name} from {target}");
        let (fetched, bytes) = self
            .copies
            .act(what, Logged::EveryTime, move |c| {
                c.fetch_counted(&target, name)
            })
            .await?;
        Ok((SnapshotInfo::from(&fetched), bytes))
    }

    /// Send the snapshot `name` into the pipe `into`, for the copier to seal (a sealed
    /// copy: the stem sees no target, no key, no network). `parent`: "" for a full send, else
    /// a read-only snapshot of the same subvolume in the store to send against. `into`: a
    /// FIFO open for writing. The stream goes in frames (`stem_interface::pipe`): an END
    /// frame with the trailer (uuid, parent_uuid, bytes) once the send succeeded, an ABORT
    /// frame with the reason otherwise. A pipe that takes nothing for the stall time fails
    /// the act. Errors: AccessDenied, InvalidArgument (also: not a FIFO open for writing),
    /// NoSuchSnapshot, NotReadOnly, TargetBusy (this snapshot is being sent or received
    /// sealed already), TransferFailed, StoreUnsafe, Failed.
    #[zbus(out_args("sent"))]
    async fn send_sealed(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        parent: &str,
        into: zbus::OwnedFd,
    ) -> Result<SentSealed, Error> {
        self.admit(connection, &header).await?;
        let name = parse_snapshot(name)?;
        let parent = match parent {
            "" => None,
            p => Some(parse_snapshot(p)?),
        };
        let into = std::os::fd::OwnedFd::from(into);
        let what = format!("send {name} sealed");
        let sent = self
            .copies
            .act(what, Logged::EveryTime, move |c| {
                c.send_sealed(name, parent, into)
            })
            .await?;
        Ok(SentSealed::from(&sent))
    }

    /// Receive a sealed copy's plain streams from the pipe `from` into the store as the
    /// snapshot `name` (the copier verified and decrypted them). `from`: a FIFO open for
    /// reading, carrying frames (`stem_interface::pipe`): the chain's streams, full first,
    /// each incremental on the one before, then the END frame. They are received by
    /// `btrfs receive --chroot` into `@snapshots/.incoming`; only after the END frame, when
    /// the snapshot `name` received there is read-only with received UUID `uuid`, is it put
    /// in the store under its name in one step (origin name-only); everything received is
    /// deleted whatever happens, so nothing half-received stays. Answers the snapshot and
    /// the stream bytes received. Errors: AccessDenied, InvalidArgument (also: not a FIFO
    /// open for reading), AlreadyHere, TargetBusy (another fetch is being received),
    /// TransferFailed (an ABORT, no END, a stall, a stream that does not check out; a
    /// stream past the store's free space above its hard floor, or still going at the
    /// deadline: the stem trusts no size it is told), BelowHardFloor (before anything was
    /// received), NoSpace, StoreUnsafe, Failed.
    #[zbus(out_args("snapshot", "bytes"))]
    async fn receive_sealed(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        uuid: &str,
        from: zbus::OwnedFd,
    ) -> Result<(SnapshotInfo, u64), Error> {
        self.admit(connection, &header).await?;
        let name = parse_snapshot(name)?;
        let uuid = parse_uuid(uuid)?;
        let from = std::os::fd::OwnedFd::from(from);
        let what = format!("receive {name} sealed");
        let (received, bytes) = self
            .copies
            .act(what, Logged::EveryTime, move |c| {
                c.receive_sealed(name, uuid, from)
            })
            .await?;
        Ok((SnapshotInfo::from(&received), bytes))
    }

    /// The copies and fetches in flight: target, snapshot, "copy" or "fetch", bytes moved
    /// so far, milliseconds since it started; a sealed send or receive is there too, as
    /// "send-sealed" or "receive-sealed" with target "". Errors: AccessDenied.
    #[zbus(out_args("in_flight"))]
    async fn copy_progress(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<CopyProgressInfo>, Error> {
        self.admit(connection, &header).await?;
        Ok(self
            .copies
            .progress()
            .iter()
            .map(CopyProgressInfo::from)
            .collect())
    }

    /// Open a snapshot read-only for a person (adr/0019): mounted read-only, nosuid, nodev,
    /// noexec at `/run/tacid/<for_uid>/<name>` in the host's mount namespace, in a
    /// directory only `for_uid` (and root) may enter; files keep the owner and mode they had
    /// in the snapshot. No file is read. `name`: a read-only snapshot's canonical name.
    /// `part`: empty for the whole snapshot; else one directory name directly in a snapshot
    /// of `@home` (bytes; no `/`, no NUL, not `.` or `..`, at most 255), which must be a
    /// real directory (never a symlink, never followed) owned by `owner_uid` in the snapshot
    /// (`owner_uid` is not used for the whole). Who may open what is the keeper's decision;
    /// the stem checks what it can. The same open again answers `already_open` and starts
    /// its idle time again. An open is closed when its idle time passes and nobody uses it,
    /// when the connection that asked leaves the bus, and when the stem stops or starts.
    /// Errors: AccessDenied, InvalidArgument, NoSuchSnapshot, NotReadOnly, PartRefused,
    /// TooManyOpen, AlreadyOpen, StoreUnsafe, Failed.
    #[zbus(out_args("open", "already_open"))]
    async fn open_snapshot(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        name: &str,
        part: Vec<u8>,
        owner_uid: u32,
        for_uid: u32,
    ) -> Result<(OpenInfo, bool), Error> {
        self.admit(connection, &header).await?;
        let opener = header
            .sender()
            .map(|s| s.to_string())
            .ok_or_else(|| Error::AccessDenied("the call carries no sender".into()))?;
        let name = parse_snapshot(name)?;
        let part = Part::parse(&part, owner_uid)?;
        if for_uid == u32::MAX {
            return Err(Error::InvalidArgument(
                "uid 4294967295 is nobody's (the kernel's \"no uid\")".into(),
            ));
        }
        let asker = opener.clone();
        let opened = self
            .opens
            .open(
                &self.worker,
                for_uid,
                name,
                part,
                opener,
                still_on_the_bus(connection, &asker),
            )
            .await;
        let (open, again) = opened?;
        Ok((OpenInfo::from(&open), again))
    }

    /// Close the open snapshot `name` of `for_uid`: unmounted, and its mount point removed.
    /// Never detached while a process uses it (a working directory, an open file or a
    /// mapping in it): a detached mount would keep the snapshot alive unseen (adr/0021);
    /// then InUse, and it stays open. Returns false when it was not open (nothing changed).
    /// Errors: AccessDenied, InvalidArgument, InUse, Failed.
    #[zbus(out_args("closed"))]
    async fn close_snapshot(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        for_uid: u32,
        name: &str,
    ) -> Result<bool, Error> {
        self.admit(connection, &header).await?;
        let name = parse_snapshot(name)?;
        match self.opens.close(for_uid, name).await? {
            Closed::NotOpen => Ok(false),
            Closed::Busy => Err(Error::InUse(format!(
                "{name} is in use: a process has its working directory, an open file or a \
                 mapping in it; nothing was closed. Leave it (`cd` out of it, end what has \
                 files open in it), then close it again"
            ))),
            Closed::Closed => Ok(true),
        }
    }

    /// Every open snapshot, by uid and name. Errors: AccessDenied, Failed.
    #[zbus(out_args("opens"))]
    async fn open_snapshots(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<OpenInfo>, Error> {
        self.admit(connection, &header).await?;
        let opens = self.opens.run(|h| h.list()).await?;
        Ok(opens.iter().map(OpenInfo::from).collect())
    }
}

/// Whether the bus connection `unique` is still there; any failure to ask is "no".
async fn still_on_the_bus(connection: &Connection, unique: &str) -> bool {
    let Ok(bus) = zbus::fdo::DBusProxy::builder(connection)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
    else {
        return false;
    };
    let Ok(name) = zbus::names::BusName::try_from(unique) else {
        return false;
    };
    bus.name_has_owner(name).await.unwrap_or(false)
}

/// The most groups ChangesInPart takes (the kernel's NGROUPS_MAX).
const MAX_GIDS: usize = 65_536;

/// A path inside a part from the wire (ChangesInPart's `below`): relative, its components
/// normalised (empty ones dropped); `.`, `..` and NUL refused.
fn relative_below(below: &[u8]) -> Result<Vec<u8>, Error> {
    if below.len() > 4096 {
        return Err(Error::InvalidArgument(format!(
            "a path is at most 4096 bytes (this one: {})",
            below.len()
        )));
    }
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in below.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
        if c == b"." || c == b".." || c.contains(&0) || c.len() > 255 {
            return Err(Error::InvalidArgument(format!(
                "the path {} has a component that is `.`, `..`, over 255 bytes or holds NUL",
                crate::open::shown_bytes(below)
            )));
        }
        parts.push(c);
    }
    Ok(parts.join(&b'/'))
}

/// The longest a ChangesSince may run: inside dbus-daemon's default reply timeout (25 s).
const MAX_CHANGES_LIMIT_MS: u32 = 20_000;

/// A count's time limit from the wire, at most [`MAX_CHANGES_LIMIT_MS`].
/// The most snapshots one Space call names.
const MAX_SPACE_NAMES: usize = 65_536;

/// A space report as the wire carries it.
fn space_report_info(r: &SpaceReport) -> SpaceReportInfo {
    SpaceReportInfo {
        snapshots: r
            .snapshots
            .iter()
            .map(|s| SnapshotSpaceInfo {
                name: s.name.to_string(),
                exclusive_bytes: s.space.exclusive,
                shared_bytes: s.space.shared,
                new_bytes: s.space.new_since_previous.unwrap_or(0),
                has_previous: s.space.new_since_previous.is_some(),
            })
            .collect(),
        subvolumes: r
            .subvolumes
            .iter()
            .map(|v| SubvolumeSpaceInfo {
                subvolume: v.subvolume.to_string(),
                snapshots: v.snapshots,
                snapshots_exclusive_bytes: v.snapshots_exclusive,
                live_bytes: v.live.map_or(0, |l| l.referenced),
                live_exclusive_bytes: v.live.map_or(0, |l| l.exclusive),
                growth_bytes_per_day: v.growth_per_day.unwrap_or(0),
                has_growth: v.growth_per_day.is_some(),
            })
            .collect(),
        store_bytes: r.store_bytes,
        total_bytes: r.total_bytes,
        complete: r.complete,
        walked: r.walked,
    }
}

fn changes_limit(time_limit_ms: u32) -> Duration {
    Duration::from_millis(u64::from(time_limit_ms.min(MAX_CHANGES_LIMIT_MS)))
}

/// A count of changes as the wire carries it.
fn changes_info(c: &btrfs::Changes) -> ChangesInfo {
    ChangesInfo {
        files_added: c.files.added,
        files_modified: c.files.modified,
        files_removed: c.files.removed,
        directories_added: c.directories.added,
        directories_modified: c.directories.modified,
        directories_removed: c.directories.removed,
        bytes_written: c.bytes_written,
        complete: c.complete,
        paths: c
            .paths
            .iter()
            .map(|p| ChangedPathInfo {
                change: match p.change {
                    btrfs::Change::Added => "added",
                    btrfs::Change::Modified => "modified",
                    btrfs::Change::Removed => "removed",
                }
                .to_owned(),
                directory: p.directory,
                path: p.path.clone(),
            })
            .collect(),
        paths_left_off: c.paths_left_off,
        paths_hidden: c.paths_hidden,
    }
}

/// The introspection data of `org.tacid.Stem1`, as committed in `stem-interface/org.tacid.Stem1.xml`.
pub fn introspection_xml() -> String {
    let iface = Stem1::new(Worker::stopped(), crate::caller::nobody());
    let mut xml = String::from(
        "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \
         \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n\
         <!-- Generated by `tacid-stem --print-introspection`; do not edit. -->\n<node>\n",
    );
    iface.introspect_to_writer(&mut xml, 1);
    let _ = writeln!(xml, "</node>");
    xml
}

/// A target name from a caller: the grammar only here (the configured set is the copy
/// engine's check); never shown whole.
fn parse_target(name: &str) -> Result<String, Error> {
    layout::copies::TargetName::parse(name)
        .map(|n| n.to_string())
        .map_err(|e| {
            Error::InvalidArgument(format!(
                "{} is not a target name: {e}",
                layout::human::cap(name, 64)
            ))
        })
}

fn parse_subvolume(name: &str) -> Result<SubvolumeName, Error> {
    SubvolumeName::parse(name).map_err(|e| Error::InvalidArgument(e.to_string()))
}

fn parse_snapshot(name: &str) -> Result<SnapshotName, Error> {
    SnapshotName::parse(name).map_err(|e| {
        Error::InvalidArgument(format!(
            "{:?} is not a snapshot name: {e}",
            layout::human::cap(name, 128)
        ))
    })
}

/// A UUID from a caller, lowercase and hyphenated (what the stem answers); never shown
/// whole.
fn parse_uuid(text: &str) -> Result<uuid::Uuid, Error> {
    let bad = || {
        Error::InvalidArgument(format!(
            "{:?} is not a UUID (lowercase, hyphenated: what List answers)",
            layout::human::cap(text, 64)
        ))
    };
    let uuid = uuid::Uuid::try_parse(text).map_err(|_| bad())?;
    if uuid.hyphenated().to_string() != text {
        return Err(bad());
    }
    Ok(uuid)
}

fn parse_set(names: &[String]) -> Result<Vec<SubvolumeName>, Error> {
    if names.is_empty() {
        return Err(Error::InvalidArgument(
            "name at least one subvolume to snapshot".into(),
        ));
    }
    let mut set: Vec<SubvolumeName> = Vec::with_capacity(names.len());
    for name in names {
        let subvolume = parse_subvolume(name)?;
        if set.contains(&subvolume) {
            return Err(Error::InvalidArgument(format!(
                "{subvolume} is named twice in the set"
            )));
        }
        set.push(subvolume);
    }
    Ok(set)
}

/// The snapshots of a set restore: canonical names, at most one per restorable subvolume
/// (more than the layout has are refused before any is parsed).
fn parse_snapshot_set(names: &[String]) -> Result<Vec<SnapshotName>, Error> {
    if names.is_empty() {
        return Err(Error::InvalidArgument(
            "name at least one snapshot to put back".into(),
        ));
    }
    let most = SubvolumeName::restorable().len();
    if names.len() > most {
        return Err(Error::InvalidArgument(format!(
            "{} snapshots named; a restore puts back at most one of each of the {most} \
             restorable subvolumes",
            names.len()
        )));
    }
    let mut set: Vec<SnapshotName> = Vec::with_capacity(names.len());
    for name in names {
        let name = parse_snapshot(name)?;
        if let Some(earlier) = set.iter().find(|n| n.subvolume() == name.subvolume()) {
            return Err(Error::InvalidArgument(format!(
                "{earlier} and {name} are both of {}; a restore puts each subvolume back at \
                 most once",
                name.subvolume()
            )));
        }
        set.push(name);
    }
    Ok(set)
}

// --- Conversions between the engine's domain types and the wire types. ---

impl From<&engine::Snapshot> for SnapshotInfo {
    fn from(s: &engine::Snapshot) -> SnapshotInfo {
        SnapshotInfo {
            name: s.name.to_string(),
            id: s.id,
            uuid: s.uuid.hyphenated().to_string(),
            of: s.of.to_string(),
            origin: s.origin.into(),
            taken_unix_micros: layout::human::unix_micros(s.taken),
            readonly: s.readonly,
            staged: s.staged,
            received_uuid: s
                .received_uuid
                .map(|u| u.hyphenated().to_string())
                .unwrap_or_default(),
        }
    }
}

fn wire(field: &'static str) -> impl FnOnce(String) -> WireError {
    WireError::in_field(field)
}

impl TryFrom<&SnapshotInfo> for engine::Snapshot {
    type Error = WireError;
    fn try_from(s: &SnapshotInfo) -> Result<engine::Snapshot, WireError> {
        Ok(engine::Snapshot {
            name: SnapshotName::parse(&s.name).map_err(|e| wire("snapshot name")(e.to_string()))?,
            id: s.id,
            uuid: uuid::Uuid::try_parse(&s.uuid)
                .map_err(|e| wire("snapshot UUID")(e.to_string()))?,
            of: SubvolumeName::parse(&s.of).map_err(|e| wire("subvolume name")(e.to_string()))?,
            origin: s.origin.into(),
            taken: layout::human::from_unix_micros(s.taken_unix_micros),
            readonly: s.readonly,
            staged: s.staged,
            received_uuid: match s.received_uuid.as_str() {
                "" => None,
                u => Some(
                    uuid::Uuid::try_parse(u)
                        .map_err(|e| wire("snapshot received UUID")(e.to_string()))?,
                ),
            },
        })
    }
}

/// What a staged request's answer says: the request, whether it was there already, and the
/// sentence for the journal.
fn staged_parts(s: &Staged) -> (&RestoreRequest, bool, String) {
    match s {
        Staged::New(r) => (
            r,
            false,
            format!("staged: {r}; it is honoured at the next boot"),
        ),
        Staged::AlreadyStaged(r) => (r, true, format!("already staged ({r}); nothing changed")),
    }
}

fn staged_from(request: RestoreRequest, already_staged: bool) -> Staged {
    if already_staged {
        Staged::AlreadyStaged(request)
    } else {
        Staged::New(request)
    }
}

/// StageRestore's answer (a request of one member; of a longer one, its first member, which
/// StageRestore never stages).
impl From<&Staged> for StagedRestore {
    fn from(s: &Staged) -> StagedRestore {
        let (request, already_staged, message) = staged_parts(s);
        StagedRestore {
            request: RequestInfo::from(&request.members()[0]),
            already_staged,
            reboot_needed: true,
            message,
        }
    }
}

impl TryFrom<&StagedRestore> for Staged {
    type Error = WireError;
    fn try_from(s: &StagedRestore) -> Result<Staged, WireError> {
        let request = request_from_infos(std::slice::from_ref(&s.request))?;
        Ok(staged_from(request, s.already_staged))
    }
}

impl From<&Staged> for StagedSetRestore {
    fn from(s: &Staged) -> StagedSetRestore {
        let (request, already_staged, message) = staged_parts(s);
        StagedSetRestore {
            request: request_infos(request),
            already_staged,
            reboot_needed: true,
            message,
        }
    }
}

impl TryFrom<&StagedSetRestore> for Staged {
    type Error = WireError;
    fn try_from(s: &StagedSetRestore) -> Result<Staged, WireError> {
        let request = request_from_infos(&s.request)?;
        Ok(staged_from(request, s.already_staged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use layout::{Outcome, OutcomeResult, Reason, RestoreMember};
    use std::time::UNIX_EPOCH;
    use zbus::DBusError as _;

    #[test]
    fn a_path_below_a_part_is_normalised_and_never_leaves_it() {
        assert_eq!(relative_below(b"").unwrap(), b"");
        assert_eq!(relative_below(b"docs").unwrap(), b"docs");
        assert_eq!(relative_below(b"//docs//old/").unwrap(), b"docs/old");
        for bad in [&b"."[..], b"..", b"docs/../..", b"a/./b", b"a\0b"] {
            assert!(relative_below(bad).is_err(), "{bad:?}");
        }
        assert!(relative_below(&[b'a'; 256]).is_err());
        assert!(relative_below(&[b'a'; 5000]).is_err());
    }

    #[test]
    fn names_match_the_layout() {
        assert_eq!(Stem1::name().as_str(), layout::names::STEM_BUS_NAME);
        let xml = introspection_xml();
        assert!(xml.contains(&format!(
            "<interface name=\"{}\">",
            layout::names::STEM_BUS_NAME
        )));
        // The proxy's defaults are the same literals; the path is checked here.
        assert_eq!(layout::names::STEM_OBJECT_PATH, "/org/tacid/Stem1");
    }

    #[test]
    fn errors_have_their_own_names() {
        let e = Error::from(EngineError::Pinned(
            SnapshotName::parse("@home.2026-12-01T140200.123456Z").expect("canonical"),
        ));
        assert_eq!(e.name().as_str(), "org.tacid.Stem1.Error.Pinned");
        let set = EngineError::SetMember {
            member: SubvolumeName::parse("@log").expect("in layout"),
            source: Box::new(EngineError::NoSpace {
                doing: "taking @log".into(),
            }),
        };
        let e = Error::from(set);
        assert_eq!(e.name().as_str(), "org.tacid.Stem1.Error.NoSpace");
        assert!(e.description().is_some_and(|d| d.contains("@log")), "{e}");
    }

    #[test]
    fn arguments_are_layout_names_only() {
        for bad in ["/home", "home", "@home/../x", "", "@nope"] {
            assert!(
                matches!(parse_subvolume(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(parse_set(&[]), Err(Error::InvalidArgument(_))));
        let twice = vec!["@home".to_owned(), "@home".to_owned()];
        assert!(matches!(parse_set(&twice), Err(Error::InvalidArgument(m)) if m.contains("twice")));
        assert!(matches!(
            parse_snapshot("@home"),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_set_is_named_by_snapshots_at_most_one_per_subvolume() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let set = parse_snapshot_set(&names(&[
            "@home.2026-12-01T140200.123456Z",
            "@persist.2026-12-01T140200.123450Z",
        ]))
        .expect("a set of two");
        assert_eq!(set.len(), 2);
        for (bad, says) in [
            (names(&[]), "at least one"),
            (
                names(&[
                    "@home.2026-12-01T140200.123456Z",
                    "@home.2026-12-02T140200.123456Z",
                ]),
                "both of @home",
            ),
            (names(&["@home"]), "not a snapshot name"),
            (
                vec!["@home.2026-12-01T140200.123456Z".to_owned(); 4],
                "4 snapshots",
            ),
        ] {
            match parse_snapshot_set(&bad) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(says), "{m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let e = Error::from(EngineError::InvalidSet("x".into()));
        assert_eq!(e.name().as_str(), "org.tacid.Stem1.Error.InvalidArgument");
    }

    #[test]
    fn a_set_crosses_the_wire_one_element_per_member() {
        let members = ["@persist", "@log", "@home"].map(|sub| {
            let sv = SubvolumeName::parse(sub).expect("in layout");
            let n = SnapshotName::new(sv, UNIX_EPOCH + Duration::from_secs(9)).expect("a name");
            RestoreMember::new(sv, n, uuid::Uuid::from_u128(9)).expect("valid")
        });
        // Given in another order, staged in the layout's.
        let request = RestoreRequest::new([members[2], members[0], members[1]]).expect("a set");
        let staged = StagedSetRestore::from(&Staged::New(request.clone()));
        assert_eq!(
            staged
                .request
                .iter()
                .map(|r| r.subvolume.as_str())
                .collect::<Vec<_>>(),
            ["@persist", "@log", "@home"]
        );
        assert!(staged.message.contains("@log"), "{}", staged.message);
        assert_eq!(Staged::try_from(&staged), Ok(Staged::New(request.clone())));
        let outcome = Outcome::new(
            OutcomeResult::Done,
            UNIX_EPOCH + Duration::from_secs(99),
            Some(request),
            Reason::new("put back"),
        );
        let info = OutcomeInfo::from(&outcome);
        assert_eq!(info.request.len(), 3);
        assert_eq!(Outcome::try_from(&info), Ok(outcome));
        // Out of order on the wire is not the canonical form.
        let mut swapped = staged.clone();
        swapped.request.swap(0, 2);
        assert!(Staged::try_from(&swapped).is_err());
    }

    #[test]
    fn wire_types_round_trip() {
        let name = SnapshotName::parse("@home.2026-12-01T140200.123456Z").expect("canonical");
        let snapshot = engine::Snapshot {
            name,
            id: 261,
            uuid: uuid::Uuid::from_u128(0x0b7c0f3e_9f4a_4e8e_8a55_3c1d2f6b9a01),
            of: name.subvolume(),
            origin: engine::Origin::NameOnly,
            taken: name.taken(),
            readonly: true,
            staged: true,
            received_uuid: Some(uuid::Uuid::from_u128(0x7a)),
        };
        let info = SnapshotInfo::from(&snapshot);
        assert_eq!(info.received_uuid, "00000000-0000-0000-0000-00000000007a");
        let plain = engine::Snapshot {
            received_uuid: None,
            ..snapshot.clone()
        };
        let plain_info = SnapshotInfo::from(&plain);
        assert_eq!(plain_info.received_uuid, "");
        assert_eq!(engine::Snapshot::try_from(&plain_info), Ok(plain));
        assert_eq!(info.taken_unix_micros, name.taken_unix_micros());
        assert_eq!(engine::Snapshot::try_from(&info), Ok(snapshot.clone()));

        let request = RestoreRequest::one(name.subvolume(), name, snapshot.uuid).expect("valid");
        let staged = StagedRestore::from(&Staged::AlreadyStaged(request.clone()));
        assert!(staged.already_staged && staged.reboot_needed);
        assert_eq!(
            Staged::try_from(&staged),
            Ok(Staged::AlreadyStaged(request))
        );
        // An outcome and a request across the wire: stem-interface's own test.
    }
}
