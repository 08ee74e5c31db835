//! Copies off the disk: snapshots sent to root's configured targets, and fetched
//! back.
//!
//! A copy is a read-only subvolume directly in the target directory, named exactly as the
//! snapshot, whose received UUID is the snapshot's identity (its received UUID when it has
//! one, else its UUID: what `btrfs send` puts in the stream). Only such subvolumes are
//! copies; any other subvolume with a snapshot's name there is a transfer that died, deleted
//! at the start of every act on the target and when an act fails. (Copies are received in
//! place rather than beside and renamed: the kernel refuses to move a read-only subvolume
//! into another directory, EROFS; a receive sets read-only and the received UUID last.)
//!
//! Acts run on a thread of their own ([`Copies::act`]), never the engine's nor the async
//! runtime's; one act per target at a time (`turns`). The engine's thread is used only for the short steps that
//! touch the store: opening the snapshot to send, and putting a fetched snapshot in place.

mod config;
mod far_side;
mod local;
mod process;
mod sealed;
mod ssh;
mod target;
mod turns;

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use btrfs::SubvolumeInfo;
use layout::copies::{CopiesConfig, Place, Target as Configured, TargetName};
use layout::SnapshotName;
use uuid::Uuid;

use crate::allowance::allowed;
pub use crate::engine::CopySource;
use crate::engine::{EngineError, Snapshot};
use crate::worker::{Worker, WorkerGone};
pub use config::{load_config, Programs, DEFAULT_STALL};
use local::Local;
pub use sealed::{PipeEnd, SentSealed, Way, DEFAULT_SEALED_DEADLINE};
use ssh::Ssh;
use target::OpenTarget;
use turns::Turns;

/// The most copies one target's list may name.
const MAX_COPIES_LISTED: usize = 10_000;

/// What CopyTo answers: the copy made and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub target: TargetName,
    pub name: SnapshotName,
    /// The copy's received UUID (= the snapshot's identity), checked.
    pub received_uuid: Uuid,
    /// The parent the stream was made against, when incremental.
    pub parent: Option<SnapshotName>,
    /// Bytes of stream moved.
    pub bytes: u64,
}

/// One verified copy on a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOnTarget {
    pub name: SnapshotName,
    /// The copy's own UUID on the target.
    pub uuid: Uuid,
    /// The UUID of the snapshot it was received from.
    pub received_uuid: Uuid,
}

/// A copy or fetch in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// `None` for a sealed copy's send or fetch's receive: the stem sees only a pipe, the
    /// target is the copier's.
    pub target: Option<TargetName>,
    pub name: SnapshotName,
    /// "copy" or "fetch"; "send-sealed" or "receive-sealed".
    pub kind: &'static str,
    pub bytes: u64,
    pub elapsed: Duration,
}

/// Why a copy act was refused or failed. Messages say what to do.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("there is no copy target named {0} (targets are root's configuration: /etc/tacid/copies.json, services.tacid.copies)")]
    NoSuchTarget(String),
    #[error("there is no snapshot named {0}")]
    NoSuchSnapshot(SnapshotName),
    #[error("{0} is writable; only read-only snapshots are copied")]
    NotReadOnly(SnapshotName),
    #[error("target {0} is sealed: its copies are kept by the copier (tacid-copier), not on a Btrfs the stem receives into; ask for it through the keeper")]
    Sealed(TargetName),
    #[error("a {doing} of {name} is running already; try again when it is done")]
    SealedBusy {
        name: SnapshotName,
        doing: &'static str,
    },
    #[error("another fetch is being received into the store; try again when it is done")]
    FetchBusy,
    #[error("the pipe given is refused: {0}")]
    BadPipe(String),
    #[error("{0}")]
    BadParent(String),
    #[error("the sealed transfer of {name} through the pipe failed: {reason}; nothing half-received was left")]
    SealedFailed { name: SnapshotName, reason: String },
    #[error("target {0} is busy with another copy, fetch or deletion; try again when it is done")]
    TargetBusy(TargetName),
    #[error("target {target} cannot be reached: {reason}")]
    TargetUnreachable { target: TargetName, reason: String },
    #[error("target {target}'s host key is not the pinned one: {reason}. If the backup host was really reinstalled, put its new key in the configuration (host_key); otherwise someone is in between")]
    HostKeyChanged { target: TargetName, reason: String },
    #[error("target {target}'s directory is not on a Btrfs filesystem: {reason}")]
    TargetNotBtrfs { target: TargetName, reason: String },
    #[error("target {target}'s directory {path} is on the tacid filesystem itself: a copy there dies with the disk, so it is no copy. Configure a place on another disk (services.tacid.copies, /etc/tacid/copies.json)")]
    OnTheTacidDisk { target: TargetName, path: String },
    #[error("target {target} is full: {reason}; nothing half-received was left. Free space there (fewer copies kept) and try again")]
    TargetFull { target: TargetName, reason: String },
    #[error("the transfer of {name} to or from target {target} failed: {reason}; nothing half-received was left, and the next run tries again")]
    TransferFailed {
        target: TargetName,
        name: SnapshotName,
        reason: String,
    },
    #[error("target {target} holds no copy named {name}")]
    NoSuchCopy {
        target: TargetName,
        name: SnapshotName,
    },
    #[error("{0}")]
    AlreadyHere(String),
    #[error("the target stopped answering ({0}); the act was given up, nothing half-received was left, and the next run tries again")]
    Stalled(String),
    #[error(transparent)]
    Engine(EngineError),
    #[error("{0}")]
    Failed(String),
}

impl From<EngineError> for CopyError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::NoSuchSnapshot(n) => CopyError::NoSuchSnapshot(n),
            EngineError::NotReadOnly(n) => CopyError::NotReadOnly(n),
            EngineError::AlreadyHere(n) => CopyError::AlreadyHere(format!(
                "a snapshot named {n} is already in the store; nothing was fetched"
            )),
            // Named by the message the engine gives it.
            e @ (EngineError::Store(_)
            | EngineError::NotSnapshottable(_)
            | EngineError::NotRestorable(_)
            | EngineError::LiveSubvolume { .. }
            | EngineError::OfAnotherSubvolume { .. }
            | EngineError::AnotherRestoreStaged { .. }
            | EngineError::Pinned(_)
            | EngineError::BeingSent(_)
            | EngineError::InUse { .. }
            | EngineError::InvalidSet(_)
            | EngineError::NoSpace { .. }
            | EngineError::BelowHardFloor { .. }
            | EngineError::SetMember { .. }
            | EngineError::BadRequestFile(_)
            | EngineError::BadOutcomeFile(_)
            | EngineError::NotInHistory { .. }
            | EngineError::FetchUnverified { .. }
            | EngineError::NotTopLevel { .. }
            | EngineError::NoFreeName(_)
            | EngineError::Btrfs(_)) => CopyError::Engine(e),
        }
    }
}

impl From<WorkerGone> for CopyError {
    fn from(e: WorkerGone) -> Self {
        CopyError::Failed(e.to_string())
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> CopyError {
    CopyError::Failed(format!("{what}: {e}"))
}

/// The copy engine: the configured targets, and which of them is busy.
#[derive(Debug)]
pub struct Copies {
    config: CopiesConfig,
    programs: Programs,
    worker: Worker,
    /// The top of the tacid filesystem as mounted for the stem (btrfs receive takes a path).
    top_path: PathBuf,
    turns: Turns,
    /// Held by the fetch receiving into the store's one `.incoming` (each fetch cleans it
    /// first: two at once would delete each other's).
    incoming: std::sync::Mutex<()>,
    /// The most a sealed receive may take in all (its idle bound is `programs.stall`).
    sealed_deadline: Duration,
}

/// How a copy act's answer is logged: a copy, fetch or deletion every time; a look that
/// anybody may repeat within the allowance (adr/0016).
#[derive(Debug, Clone, Copy)]
pub enum Logged {
    EveryTime,
    WithinAllowance,
}

impl Copies {
    /// Run a copy act on a thread of its own (a transfer may take hours: never the
    /// engine's thread, never the async runtime's); log the answer as `logged` says.
    pub async fn act<T: Send + 'static>(
        self: &Arc<Self>,
        what: String,
        logged: Logged,
        act: impl FnOnce(&Copies) -> Result<T, CopyError> + Send + 'static,
    ) -> Result<T, CopyError> {
        let copies = self.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("stem-copy".into())
            .spawn(move || {
                let _ = answer.send(act(&copies));
            })
            .map_err(|e| CopyError::Failed(format!("{what}: cannot start a thread: {e}")))?;
        match (answered.await, logged) {
            (Ok(Ok(answer)), Logged::EveryTime) => {
                tracing::info!("{what}: done");
                Ok(answer)
            }
            (Ok(Ok(answer)), Logged::WithinAllowance) => {
                tracing::debug!("{what}: done");
                Ok(answer)
            }
            (Ok(Err(e)), Logged::EveryTime) => {
                tracing::warn!("{what}: refused or failed: {e}");
                Err(e)
            }
            (Ok(Err(e)), Logged::WithinAllowance) => {
                let v = allowed("copies look refused", u32::MAX);
                if v.log() {
                    tracing::warn!("{what}: refused or failed: {e}{}", v.note());
                }
                Err(e)
            }
            (Err(_), _) => {
                tracing::error!("{what}: the copy thread stopped (a panic; see above)");
                Err(CopyError::Failed(format!(
                    "{what}: the copy thread stopped"
                )))
            }
        }
    }
}

impl Copies {
    pub fn new(
        config: CopiesConfig,
        programs: Programs,
        worker: Worker,
        top_path: PathBuf,
    ) -> Copies {
        Copies {
            config,
            programs,
            worker,
            top_path,
            turns: Turns::default(),
            incoming: std::sync::Mutex::new(()),
            sealed_deadline: DEFAULT_SEALED_DEADLINE,
        }
    }

    /// The most a sealed receive may take in all ([`DEFAULT_SEALED_DEADLINE`] unless set).
    pub fn with_sealed_deadline(mut self, deadline: Duration) -> Copies {
        self.sealed_deadline = deadline;
        self
    }

    /// The store's `.incoming`, for one fetch; another at the same time is refused as busy.
    fn incoming_turn(&self) -> Result<std::sync::MutexGuard<'_, ()>, CopyError> {
        match self.incoming.try_lock() {
            Ok(guard) => Ok(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(CopyError::FetchBusy),
        }
    }

    pub fn config(&self) -> &CopiesConfig {
        &self.config
    }

    /// The configured target a caller named; the caller's string is never shown whole.
    /// Every Btrfs act goes through here, so none touches a sealed target.
    fn target(&self, name: &str) -> Result<&Configured, CopyError> {
        let target = self
            .config
            .target(name)
            .ok_or_else(|| CopyError::NoSuchTarget(layout::human::cap(name, 64).into_owned()))?;
        if target.is_sealed() {
            return Err(CopyError::Sealed(target.name.clone()));
        }
        Ok(target)
    }

    /// Copies and fetches in flight.
    pub fn progress(&self) -> Vec<InFlight> {
        self.turns.in_flight()
    }

    /// Send the snapshot `name` to `target`, incremental against the newest snapshot of the
    /// same subvolume the target holds a copy of; verified before the answer.
    pub fn copy_to(&self, name: SnapshotName, target: &str) -> Result<Copied, CopyError> {
        let target = self.target(target)?;
        let turn = self.turns.take(&target.name, Some(name), "copy")?;
        let source = self.worker.run_blocking(move |e| e.open_for_copy(name))??;
        if !source.info.readonly {
            return Err(CopyError::NotReadOnly(name));
        }
        let sent_as = identity(&source.info);
        let side = self.open(target)?;
        let held = side.list()?;
        if held
            .iter()
            .any(|c| c.name == name && c.received_uuid == sent_as)
        {
            return Err(CopyError::AlreadyHere(format!(
                "target {} already holds a verified copy of {name}; nothing was sent",
                target.name
            )));
        }
        if held.iter().any(|c| c.name == name) {
            return Err(CopyError::TransferFailed {
                target: target.name.clone(),
                name,
                reason: "the target holds another subvolume of that name, not a copy of this \
                         snapshot; remove it there"
                    .into(),
            });
        }
        // The parent: the newest snapshot of the same subvolume whose identity the target
        // holds as a copy's received UUID.
        let parent = source
            .siblings
            .iter()
            .filter(|(n, info)| {
                *n != name
                    && info.readonly
                    && held.iter().any(|c| c.received_uuid == identity(info))
            })
            .max_by_key(|(n, _)| *n)
            .map(|(n, _)| *n);
        let snapshot = source
            .store
            .open_dir(name.to_string())
            .map_err(|e| failed("open the snapshot", e))?;
        let parent_dir = match parent {
            Some(p) => Some(
                source
                    .store
                    .open_dir(p.to_string())
                    .map_err(|e| failed("open the parent snapshot", e))?,
            ),
            None => None,
        };
        tracing::info!(
            target = %target.name,
            parent = parent.map(|p| p.to_string()).unwrap_or_default(),
            "copying {name}"
        );
        let sender = Box::new(move |out: OwnedFd| snapshot.send(out.as_fd(), parent_dir.as_ref()));
        let result = side.receive(name, sent_as, sender, &turn.bytes);
        if result.is_err() {
            side.clean();
        }
        let received_uuid = result?;
        Ok(Copied {
            target: target.name.clone(),
            name,
            received_uuid,
            parent,
            bytes: turn.bytes.load(Ordering::Relaxed),
        })
    }

    /// The verified copies on `target`, by name.
    pub fn copies_on(&self, target: &str) -> Result<Vec<CopyOnTarget>, CopyError> {
        let target = self.target(target)?;
        match self.turns.take(&target.name, None, "list") {
            Ok(_turn) => {
                let side = self.open(target)?;
                side.list()
            }
            // A local target can be looked at while it receives (nothing is cleaned then).
            Err(CopyError::TargetBusy(_)) if !target.place.is_ssh() => {
                self.open(target)?.list_verified()
            }
            Err(e) => Err(e),
        }
    }

    /// Delete the copy `name` on `target`.
    pub fn delete_copy(&self, target: &str, name: SnapshotName) -> Result<(), CopyError> {
        let target = self.target(target)?;
        let _turn = self.turns.take(&target.name, Some(name), "delete")?;
        let side = self.open(target)?;
        side.delete(name)
    }

    /// Receive the copy `name` from `target` into the store, verified, under its name.
    pub fn fetch_from(&self, target: &str, name: SnapshotName) -> Result<Snapshot, CopyError> {
        self.fetch_counted(target, name).map(|(s, _)| s)
    }

    /// [`Copies::fetch_from`], with the bytes of the stream received (the keeper journals
    /// them, as it does a copy's).
    pub fn fetch_counted(
        &self,
        target: &str,
        name: SnapshotName,
    ) -> Result<(Snapshot, u64), CopyError> {
        let target = self.target(target)?;
        let turn = self.turns.take(&target.name, Some(name), "fetch")?;
        let _incoming = self.incoming_turn()?;
        let side = self.open(target)?;
        let held = side.list()?;
        let copy = held
            .iter()
            .find(|c| c.name == name)
            .cloned()
            .ok_or_else(|| CopyError::NoSuchCopy {
                target: target.name.clone(),
                name,
            })?;
        // The store's side: checked, the name free, an empty `.incoming` to receive into.
        self.worker.run_blocking(move |e| e.prepare_fetch(name))??;
        let received = side.send_into(name, &turn.bytes);
        let finished = match received {
            Ok(()) => self
                .worker
                .run_blocking(move |e| e.finish_fetch(name, copy.received_uuid))?
                .map_err(CopyError::from),
            Err(e) => Err(e),
        };
        if finished.is_err() {
            let _ = self.worker.run_blocking(|e| e.clean_incoming());
        }
        finished.map(|s| (s, turn.bytes.load(Ordering::Relaxed)))
    }

    /// Remove what fetches left in the store's `.incoming` when the stem stopped mid-way
    /// (a half-received snapshot can be as big as the snapshot). Call at start, before any
    /// fetch runs; a failure is logged, and the next fetch tries again.
    pub fn clean_dead_fetches(&self) {
        match self.worker.run_blocking(|e| e.clean_incoming()) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("cannot clean the store's .incoming: {e}"),
            Err(e) => tracing::warn!("cannot clean the store's .incoming: {e}"),
        }
    }

    /// Open `target` for an act.
    fn open<'t>(&'t self, target: &'t Configured) -> Result<Box<dyn OpenTarget + 't>, CopyError> {
        Ok(match &target.place {
            Place::Local(path) => {
                Box::new(Local::open(target, path, &self.programs, &self.top_path)?)
            }
            Place::Ssh { .. } => Box::new(Ssh::new(target, &self.programs)),
            // Only a sealed target has an s3:// place, and `target` refused it already.
            Place::S3 { .. } => return Err(CopyError::Sealed(target.name.clone())),
        })
    }
}

/// What a snapshot is known as to `btrfs receive`: its received UUID when it was itself
/// received (a fetched snapshot), else its UUID.
pub fn identity(info: &SubvolumeInfo) -> Uuid {
    info.received_uuid.unwrap_or(info.uuid)
}
