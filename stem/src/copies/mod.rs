//! Copies off the disk (issue 13): snapshots sent to root's configured targets, and fetched
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
//! Acts run on the caller's thread (the interface gives each its own, never the engine's);
//! one act per target at a time. The engine's thread is used only for the short steps that
//! touch the store: opening the snapshot to send, and putting a fetched snapshot in place.

mod pump;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btrfs::{Dir, SubvolumeInfo};
use layout::copies::{CopiesConfig, Place, Target, TargetName, MAX_CONFIG_BYTES};
use layout::SnapshotName;
use uuid::Uuid;

use crate::allowance::allowed;
pub use crate::engine::CopySource;
use crate::engine::{EngineError, Snapshot};
use crate::worker::{Worker, WorkerGone};
use pump::{pump, Drain, Pumped};

/// Most bytes of a child's stderr kept for the reason of a failure.
const STDERR_CAP: usize = 4096;
/// Most bytes of a far side's answer read (a `list` of [`MAX_COPIES_LISTED`] copies, about
/// 105 bytes a line, fits); more is refused, never parsed cut short.
const STDOUT_CAP: usize = 2 << 20;
/// At most this many bytes of a reason are put in an error or a log line.
const REASON_CAP: usize = 400;
/// The most copies one target's list may name.
const MAX_COPIES_LISTED: usize = 10_000;
/// The longest a copy, fetch or deletion waits for a listing of its target to end (a listing
/// is short, and anybody may ask for one: it must never make an act fail as busy).
const WAIT_FOR_LISTING: Duration = Duration::from_secs(120);

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
    pub target: TargetName,
    pub name: SnapshotName,
    /// "copy" or "fetch".
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
            e => CopyError::Engine(e),
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

/// Load root's configuration: a regular file owned by root, writable by nobody else,
/// opened without following a symlink. A missing file is no targets.
pub fn load_config(path: &Path) -> Result<CopiesConfig, String> {
    let shown = path.display();
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(CopiesConfig::default()),
        Err(e) => {
            return Err(format!(
                "cannot open {shown}: {e} (it must be a regular file, not a symlink)"
            ))
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat {shown}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    use std::os::unix::fs::MetadataExt as _;
    if meta.uid() != 0 {
        return Err(format!(
            "{shown} is owned by uid {}, not root; copy targets are root's configuration (chown root {shown})",
            meta.uid()
        ));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by group or others (mode {:04o}); chmod 0644 {shown}",
            meta.permissions().mode() & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    CopiesConfig::parse(&bytes).map_err(|e| e.to_string())
}

/// The programs and places the copy engine uses.
#[derive(Debug, Clone)]
pub struct Programs {
    /// `btrfs` (btrfs-progs), for `btrfs receive`: a name looked up in PATH, or a path.
    pub btrfs: PathBuf,
    /// `ssh` (OpenSSH).
    pub ssh: PathBuf,
    /// Where the stem writes each SSH target's pinned `known_hosts` (root-only).
    pub runtime_dir: PathBuf,
    /// How long a transfer or a far side's answer may move nothing at all before the act
    /// gives up and kills its children (ssh's keepalives catch a dead link in 15 s; this
    /// catches a live far side that never answers, which would hold the target forever).
    pub stall: Duration,
}

/// [`Programs::stall`]'s default: generous, as a slow disk may take long to commit a receive.
pub const DEFAULT_STALL: Duration = Duration::from_secs(600);

impl Default for Programs {
    fn default() -> Self {
        Programs {
            btrfs: "btrfs".into(),
            ssh: "ssh".into(),
            runtime_dir: std::env::var_os("RUNTIME_DIRECTORY")
                .map(PathBuf::from)
                .unwrap_or_else(|| "/run/tacid-stem".into()),
            stall: DEFAULT_STALL,
        }
    }
}

#[derive(Debug)]
struct Busy {
    name: Option<SnapshotName>,
    kind: &'static str,
    bytes: Arc<AtomicU64>,
    started: Instant,
}

/// The copy engine: the configured targets, and which of them is busy.
#[derive(Debug)]
pub struct Copies {
    config: CopiesConfig,
    programs: Programs,
    worker: Worker,
    /// The top of the tacid filesystem as mounted for the stem (btrfs receive takes a path).
    top_path: PathBuf,
    busy: Mutex<Turns>,
    /// Signalled whenever a target is freed.
    freed: std::sync::Condvar,
}

/// Which targets are busy, and how many acts wait for a listing of each to end.
#[derive(Debug, Default)]
struct Turns {
    busy: BTreeMap<TargetName, Busy>,
    waiting: BTreeMap<TargetName, usize>,
}

/// Holds a target for one act; frees it when dropped.
struct Turn<'a> {
    copies: &'a Copies,
    target: TargetName,
    bytes: Arc<AtomicU64>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.copies
            .busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .busy
            .remove(&self.target);
        self.copies.freed.notify_all();
    }
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
            busy: Mutex::new(Turns::default()),
            freed: std::sync::Condvar::new(),
        }
    }

    pub fn config(&self) -> &CopiesConfig {
        &self.config
    }

    /// The configured target a caller named; the caller's string is never shown whole.
    fn target(&self, name: &str) -> Result<&Target, CopyError> {
        self.config
            .target(name)
            .ok_or_else(|| CopyError::NoSuchTarget(shown_capped(name)))
    }

    fn take_turn(
        &self,
        target: &Target,
        name: Option<SnapshotName>,
        kind: &'static str,
    ) -> Result<Turn<'_>, CopyError> {
        let mut turns = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        let listing = kind == "list";
        if listing {
            // A listing gives way to an act that waits, and never waits itself.
            if turns.busy.contains_key(&target.name) || turns.waiting.contains_key(&target.name) {
                return Err(CopyError::TargetBusy(target.name.clone()));
            }
        } else {
            // An act waits for a listing (anybody's, through the keeper) to end; only
            // another act makes it busy.
            let deadline = Instant::now() + WAIT_FOR_LISTING;
            *turns.waiting.entry(target.name.clone()).or_default() += 1;
            let waited = loop {
                match turns.busy.get(&target.name) {
                    None => break Ok(()),
                    Some(b) if b.kind == "list" => {}
                    Some(_) => break Err(()),
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break Err(());
                }
                turns = self
                    .freed
                    .wait_timeout(turns, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            };
            if let Some(n) = turns.waiting.get_mut(&target.name) {
                *n -= 1;
                if *n == 0 {
                    turns.waiting.remove(&target.name);
                }
            }
            if waited.is_err() {
                return Err(CopyError::TargetBusy(target.name.clone()));
            }
        }
        let bytes = Arc::new(AtomicU64::new(0));
        turns.busy.insert(
            target.name.clone(),
            Busy {
                name,
                kind,
                bytes: bytes.clone(),
                started: Instant::now(),
            },
        );
        Ok(Turn {
            copies: self,
            target: target.name.clone(),
            bytes,
        })
    }

    /// Copies and fetches in flight.
    pub fn progress(&self) -> Vec<InFlight> {
        let turns = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        turns
            .busy
            .iter()
            .filter_map(|(target, b)| {
                Some(InFlight {
                    target: target.clone(),
                    name: b.name?,
                    kind: match b.kind {
                        "copy" | "fetch" => b.kind,
                        _ => return None,
                    },
                    bytes: b.bytes.load(Ordering::Relaxed),
                    elapsed: b.started.elapsed(),
                })
            })
            .collect()
    }

    /// Send the snapshot `name` to `target`, incremental against the newest snapshot of the
    /// same subvolume the target holds a copy of; verified before the answer.
    pub fn copy_to(&self, name: SnapshotName, target: &str) -> Result<Copied, CopyError> {
        let target = self.target(target)?;
        let turn = self.take_turn(target, Some(name), "copy")?;
        let source = self.worker.run_blocking(move |e| e.open_for_copy(name))??;
        if !source.info.readonly {
            return Err(CopyError::NotReadOnly(name));
        }
        let sent_as = identity(&source.info);
        let side = self.open_side(target)?;
        let held = side.list(self)?;
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
        let sender = move |out: OwnedFd| snapshot.send(out.as_fd(), parent_dir.as_ref());
        let result = side.receive(self, name, sent_as, sender, &turn.bytes);
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
        match self.take_turn(target, None, "list") {
            Ok(_turn) => {
                let side = self.open_side(target)?;
                side.list(self)
            }
            // A local target can be looked at while it receives (nothing is cleaned then).
            Err(CopyError::TargetBusy(_)) if !target.place.is_ssh() => {
                self.open_side(target)?.list_verified()
            }
            Err(e) => Err(e),
        }
    }

    /// Delete the copy `name` on `target`.
    pub fn delete_copy(&self, target: &str, name: SnapshotName) -> Result<(), CopyError> {
        let target = self.target(target)?;
        let _turn = self.take_turn(target, Some(name), "delete")?;
        let side = self.open_side(target)?;
        side.delete(self, name)
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
        let turn = self.take_turn(target, Some(name), "fetch")?;
        let side = self.open_side(target)?;
        let held = side.list(self)?;
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
        let incoming = self
            .top_path
            .join(layout::SNAPSHOTS_SUBVOLUME)
            .join(layout::copies::INCOMING_DIR_NAME);
        let received = side.send_into(self, name, &incoming, &turn.bytes);
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

    fn open_side<'t>(&self, target: &'t Target) -> Result<Side<'t>, CopyError> {
        match &target.place {
            Place::Local(path) => {
                let dir = Dir::open_configured(Path::new(path)).map_err(|e| {
                    CopyError::TargetUnreachable {
                        target: target.name.clone(),
                        reason: format!("{path}: {e} (is the disk mounted?)"),
                    }
                })?;
                let on_btrfs = dir
                    .is_on_btrfs()
                    .map_err(|e| failed("statfs the target", e))?;
                if !on_btrfs {
                    return Err(CopyError::TargetNotBtrfs {
                        target: target.name.clone(),
                        reason: format!("{path} is on another kind of filesystem"),
                    });
                }
                // A copy on the tacid disk itself dies with it: no backup at all.
                let top = Dir::open_configured(&self.top_path)
                    .map_err(|e| failed("open the tacid filesystem", e))?;
                let same = dir
                    .filesystem_uuid()
                    .and_then(|t| Ok(t == top.filesystem_uuid()?))
                    .map_err(|e| failed("compare the target's filesystem with tacid's", e))?;
                if same {
                    return Err(CopyError::OnTheTacidDisk {
                        target: target.name.clone(),
                        path: path.clone(),
                    });
                }
                Ok(Side::Local {
                    target,
                    path: PathBuf::from(path),
                    dir,
                })
            }
            Place::Ssh { .. } => Ok(Side::Ssh { target }),
        }
    }
}

/// What a snapshot is known as to `btrfs receive`: its received UUID when it was itself
/// received (a fetched snapshot), else its UUID.
pub fn identity(info: &SubvolumeInfo) -> Uuid {
    info.received_uuid.unwrap_or(info.uuid)
}

/// One target, opened for an act.
enum Side<'t> {
    Local {
        target: &'t Target,
        path: PathBuf,
        dir: Dir,
    },
    Ssh {
        target: &'t Target,
    },
}

/// The exit codes of the far side's forced command (copies/tacid-copy-target).
mod far {
    pub const BAD_COMMAND: i32 = 2;
    pub const NOT_BTRFS: i32 = 3;
    pub const NO_SPACE: i32 = 4;
    pub const NO_SUCH_COPY: i32 = 5;
    pub const ALREADY_THERE: i32 = 6;
    /// ssh's own failures (connection, authentication, host key).
    pub const SSH: i32 = 255;
}

/// What a child said and how it ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

fn capped(text: &str) -> String {
    let text = text.trim();
    // The end of stderr says why; keep it.
    let start = text.len().saturating_sub(REASON_CAP);
    let mut start = start;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    let one_line: String = cut
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if start > 0 {
        format!("…{one_line}")
    } else {
        one_line
    }
}

impl<'t> Side<'t> {
    fn target(&self) -> &'t Target {
        match self {
            Side::Local { target, .. } | Side::Ssh { target } => target,
        }
    }

    /// Delete every subvolume with a snapshot's name that is not a verified copy: transfers
    /// that died. Local only; the far side does it itself at every verb.
    fn clean(&self) {
        let Side::Local { dir, target, .. } = self else {
            return;
        };
        let Ok(names) = dir.entry_names() else { return };
        for entry in names {
            let Some(Ok(_)) = entry.to_str().map(SnapshotName::parse) else {
                continue;
            };
            let Ok(sub) = dir.open_dir(&entry) else {
                continue;
            };
            if !sub.is_subvolume_root().unwrap_or(false) {
                continue;
            }
            let verified = sub
                .subvolume_info()
                .is_ok_and(|i| i.readonly && i.received_uuid.is_some());
            drop(sub);
            if !verified {
                match dir.remove_all(&entry) {
                    Ok(_) => tracing::info!(
                        target = %target.name,
                        "removed a half-received {} (a transfer that died)",
                        entry.to_string_lossy()
                    ),
                    Err(e) => {
                        tracing::warn!(target = %target.name, "cannot remove a half-received subvolume: {e}")
                    }
                }
            }
        }
        let _ = dir.commit();
    }

    /// The verified copies, without cleaning.
    fn list_verified(&self) -> Result<Vec<CopyOnTarget>, CopyError> {
        let Side::Local { dir, .. } = self else {
            return Err(CopyError::Failed("not a local target".into()));
        };
        let mut out = Vec::new();
        for entry in dir
            .entry_names()
            .map_err(|e| failed("read the target", e))?
        {
            let Some(Ok(name)) = entry.to_str().map(SnapshotName::parse) else {
                continue;
            };
            let Ok(sub) = dir.open_dir(&entry) else {
                continue;
            };
            if !sub.is_subvolume_root().unwrap_or(false) {
                continue;
            }
            let Ok(info) = sub.subvolume_info() else {
                continue;
            };
            if let (true, Some(received_uuid)) = (info.readonly, info.received_uuid) {
                out.push(CopyOnTarget {
                    name,
                    uuid: info.uuid,
                    received_uuid,
                });
            }
            if out.len() >= MAX_COPIES_LISTED {
                break;
            }
        }
        out.sort_by_key(|c| std::cmp::Reverse(c.name));
        Ok(out)
    }

    /// Clean, then list the verified copies.
    fn list(&self, copies: &Copies) -> Result<Vec<CopyOnTarget>, CopyError> {
        match self {
            Side::Local { .. } => {
                self.clean();
                self.list_verified()
            }
            Side::Ssh { .. } => {
                let ran = run_plain(self.ssh_command(copies, &["list"])?, copies.programs.stall)?;
                let ran = self.far_result(ran, None)?;
                parse_far_list(&ran.stdout).map_err(|reason| CopyError::TransferFailed {
                    target: self.target().name.clone(),
                    name: SnapshotName::parse("@home.1970-01-01T000000.000000Z")
                        .expect("a valid name"),
                    reason,
                })
            }
        }
    }

    fn delete(&self, copies: &Copies, name: SnapshotName) -> Result<(), CopyError> {
        let target = self.target();
        match self {
            Side::Local { dir, .. } => {
                self.clean();
                let held = self.list_verified()?;
                if !held.iter().any(|c| c.name == name) {
                    return Err(CopyError::NoSuchCopy {
                        target: target.name.clone(),
                        name,
                    });
                }
                dir.remove_all(name.to_string())
                    .map_err(|e| failed("delete the copy", e))?;
                dir.commit().map_err(|e| failed("commit the target", e))?;
                Ok(())
            }
            Side::Ssh { .. } => {
                let n = name.to_string();
                let ran = run_plain(
                    self.ssh_command(copies, &["delete", &n])?,
                    copies.programs.stall,
                )?;
                self.far_result(ran, Some(name)).map(drop)
            }
        }
    }

    /// Receive the stream `send` writes as the copy `name`, then verify it: read-only,
    /// received UUID = `identity`. Returns the received UUID.
    fn receive(
        &self,
        copies: &Copies,
        name: SnapshotName,
        identity: Uuid,
        send: impl FnOnce(OwnedFd) -> btrfs::Result<()> + Send + 'static,
        moved: &AtomicU64,
    ) -> Result<Uuid, CopyError> {
        let target = self.target();
        let transfer_failed = |reason: String| CopyError::TransferFailed {
            target: target.name.clone(),
            name,
            reason,
        };
        let (ran, sent) = match self {
            Side::Local { path, .. } => {
                let mut cmd = Command::new(&copies.programs.btrfs);
                cmd.arg("receive").arg(path);
                run_fed(cmd, send, moved, copies.programs.stall)?
            }
            Side::Ssh { .. } => {
                let n = name.to_string();
                let cmd = self.ssh_command(copies, &["receive", &n])?;
                run_fed(cmd, send, moved, copies.programs.stall)?
            }
        };
        if let Err(e) = &sent {
            // The sender's failure is the cause unless the receiver stopped first (EPIPE).
            if ran.ok() {
                return Err(transfer_failed(format!("sending: {e}")));
            }
        }
        match self {
            Side::Local { dir, .. } => {
                if !ran.ok() {
                    let full = ran.stderr.contains("No space left")
                        || dir.free_bytes().is_ok_and(|b| b < 1 << 20);
                    let reason = format!("btrfs receive: {}", capped(&ran.stderr));
                    return Err(if full {
                        CopyError::TargetFull {
                            target: target.name.clone(),
                            reason,
                        }
                    } else {
                        transfer_failed(reason)
                    });
                }
                if let Err(e) = sent {
                    return Err(transfer_failed(format!("sending: {e}")));
                }
                let sub = dir
                    .open_dir(name.to_string())
                    .map_err(|e| transfer_failed(format!("the received copy: {e}")))?;
                let info = sub
                    .subvolume_info()
                    .map_err(|e| transfer_failed(format!("the received copy: {e}")))?;
                if !sub.is_subvolume_root().unwrap_or(false)
                    || !info.readonly
                    || info.received_uuid != Some(identity)
                {
                    return Err(transfer_failed(format!(
                        "the received copy does not check out (read-only: {}, received UUID {:?}, expected {identity})",
                        info.readonly, info.received_uuid
                    )));
                }
                dir.commit().map_err(|e| failed("commit the target", e))?;
                Ok(identity)
            }
            Side::Ssh { .. } => {
                let ran = self.far_result(ran, Some(name))?;
                if let Err(e) = sent {
                    return Err(transfer_failed(format!("sending: {e}")));
                }
                // "received NAME RECEIVED_UUID", nothing else.
                let line = ran.stdout.lines().last().unwrap_or("");
                let mut words = line.split(' ');
                let ok = words.next() == Some("received")
                    && words.next() == Some(name.to_string().as_str())
                    && words
                        .next()
                        .and_then(|u| Uuid::parse_str(u).ok())
                        .is_some_and(|u| u == identity)
                    && words.next().is_none();
                if !ok {
                    return Err(transfer_failed(format!(
                        "the far side did not confirm the copy: {:?}",
                        capped(&ran.stdout)
                    )));
                }
                Ok(identity)
            }
        }
    }

    /// Send the copy `name` from the target into `incoming` (a directory of the store).
    fn send_into(
        &self,
        copies: &Copies,
        name: SnapshotName,
        incoming: &Path,
        moved: &AtomicU64,
    ) -> Result<(), CopyError> {
        let target = self.target();
        let transfer_failed = |reason: String| CopyError::TransferFailed {
            target: target.name.clone(),
            name,
            reason,
        };
        // The stream comes from the target, which may be hostile: `btrfs receive` follows
        // the paths a stream names, `..` and symlinks the stream made itself included, so
        // unconfined it writes anywhere as root. --chroot confines it to `.incoming` (a fetch
        // is always a full stream, so no parent needs finding outside it); -e stops it at the
        // first stream's end.
        let mut receive = Command::new(&copies.programs.btrfs);
        receive.args(["receive", "-e", "--chroot"]).arg(incoming);
        let (ran, sent) = match self {
            Side::Local { dir, .. } => {
                let copy = dir
                    .open_dir(name.to_string())
                    .map_err(|e| failed("open the copy", e))?;
                run_fed(
                    receive,
                    move |out| copy.send(out.as_fd(), None),
                    moved,
                    copies.programs.stall,
                )?
            }
            Side::Ssh { .. } => {
                let n = name.to_string();
                let far = self.ssh_command(copies, &["send", &n])?;
                let (ran, far_ran) = run_piped(far, receive, moved, copies.programs.stall)?;
                self.far_result(far_ran, Some(name))?;
                (ran, Ok(()))
            }
        };
        if !ran.ok() {
            let reason = format!("btrfs receive: {}", capped(&ran.stderr));
            return Err(if ran.stderr.contains("No space left") {
                CopyError::Engine(EngineError::NoSpace {
                    doing: format!("fetching {name}: {reason}"),
                })
            } else {
                transfer_failed(reason)
            });
        }
        sent.map_err(|e| transfer_failed(format!("sending: {e}")))
    }

    /// The ssh command for `args` on this target, with the pinned host key written out.
    fn ssh_command(&self, copies: &Copies, args: &[&str]) -> Result<Command, CopyError> {
        let target = self.target();
        let Place::Ssh { port, .. } = &target.place else {
            return Err(CopyError::Failed("not an ssh target".into()));
        };
        let (Some(identity), Some(line), Some(destination)) = (
            target.identity.as_ref(),
            target.known_hosts_line(),
            target.place.ssh_destination(),
        ) else {
            return Err(CopyError::Failed("the ssh target lacks its keys".into()));
        };
        let known_hosts = copies
            .programs
            .runtime_dir
            .join(format!("known_hosts.{}", target.name));
        write_private(&known_hosts, line.as_bytes())
            .map_err(|e| failed(&format!("write {}", known_hosts.display()), e))?;
        let mut cmd = Command::new(&copies.programs.ssh);
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.args(["-F", "/dev/null", "-i"])
            .arg(identity)
            .args(["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"])
            .args(["-o", "StrictHostKeyChecking=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(["-o", "GlobalKnownHostsFile=/dev/null"])
            .args(["-o", "ConnectTimeout=10"])
            .args(["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"])
            .arg("-p")
            .arg(port.to_string())
            .arg("--")
            .arg(destination)
            .args(args);
        Ok(cmd)
    }

    /// Classify how the far side ended.
    fn far_result(&self, ran: Ran, name: Option<SnapshotName>) -> Result<Ran, CopyError> {
        let target = self.target().name.clone();
        let reason = capped(&ran.stderr);
        match ran.code {
            Some(0) => Ok(ran),
            Some(far::SSH) => {
                if ran.stderr.contains("HOST IDENTIFICATION HAS CHANGED")
                    || ran.stderr.contains("Host key verification failed")
                {
                    Err(CopyError::HostKeyChanged { target, reason })
                } else {
                    Err(CopyError::TargetUnreachable { target, reason })
                }
            }
            Some(far::NOT_BTRFS) => Err(CopyError::TargetNotBtrfs { target, reason }),
            Some(far::NO_SPACE) => Err(CopyError::TargetFull { target, reason }),
            Some(far::NO_SUCH_COPY) => match name {
                Some(name) => Err(CopyError::NoSuchCopy { target, name }),
                None => Err(CopyError::Failed(reason)),
            },
            Some(far::ALREADY_THERE) => Err(CopyError::AlreadyHere(format!(
                "target {target} already holds that copy: {reason}"
            ))),
            Some(far::BAD_COMMAND) => Err(CopyError::Failed(format!(
                "the far side of {target} refused the command (is its forced command tacid-copy-target?): {reason}"
            ))),
            code => match name {
                Some(name) => Err(CopyError::TransferFailed {
                    target,
                    name,
                    reason: format!("exit {code:?}: {reason}"),
                }),
                None => Err(CopyError::Failed(format!("target {target}: exit {code:?}: {reason}"))),
            },
        }
    }
}

/// Parse the far side's `list`: `NAME<TAB>UUID<TAB>RECEIVED_UUID` lines, strictly.
fn parse_far_list(text: &str) -> Result<Vec<CopyOnTarget>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split('\t').collect();
        let [name, uuid, received] = parts[..] else {
            return Err(format!(
                "the far side's list has a bad line: {:?}",
                capped(line)
            ));
        };
        let bad = || format!("the far side's list has a bad line: {:?}", capped(line));
        out.push(CopyOnTarget {
            name: SnapshotName::parse(name).map_err(|_| bad())?,
            uuid: Uuid::parse_str(uuid).map_err(|_| bad())?,
            received_uuid: Uuid::parse_str(received).map_err(|_| bad())?,
        });
        if out.len() > MAX_COPIES_LISTED {
            return Err("the far side lists too many copies".into());
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.name));
    Ok(out)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

fn spawn(mut cmd: Command, stdin: Stdio) -> Result<std::process::Child, CopyError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            failed(
                &format!("run {program} (is it installed and in the stem's PATH?)"),
                e,
            )
        })
}

/// Run `cmd` with no input; capture its output (capped).
fn run_plain(cmd: Command, stall: Duration) -> Result<Ran, CopyError> {
    let mut child = spawn(cmd, Stdio::null())?;
    let mut drains = [
        Drain::first(child.stdout.take().expect("piped").into(), STDOUT_CAP),
        Drain::last(child.stderr.take().expect("piped").into(), STDERR_CAP),
    ];
    // No stream: an empty pipe as the source, its write end closed at once.
    let (src, snk) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| failed("pipe", e))?;
    let (_, unused_sink) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| failed("pipe", e))?;
    drop(snk);
    if let Err(e) = pump(src, unused_sink, &mut drains, &AtomicU64::new(0), stall) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(stalled(e, "reading a child's output"));
    }
    finish(child, drains)
}

fn finish(mut child: std::process::Child, drains: [Drain; 2]) -> Result<Ran, CopyError> {
    let status = child.wait().map_err(|e| failed("wait for a child", e))?;
    let [stdout, stderr] = drains;
    let mut stderr_text = stderr.text();
    if status.code().is_none() {
        use std::os::unix::process::ExitStatusExt as _;
        stderr_text.push_str(&format!(
            " (killed by signal {})",
            status.signal().unwrap_or(0)
        ));
    }
    Ok(Ran {
        code: status.code(),
        stdout: stdout.text(),
        stderr: stderr_text,
    })
}

/// Run `cmd` with the stream `send` writes as its stdin, counted into `moved`. The send runs
/// on a thread of its own (the ioctl blocks until the whole stream is written).
fn run_fed(
    cmd: Command,
    send: impl FnOnce(OwnedFd) -> btrfs::Result<()> + Send + 'static,
    moved: &AtomicU64,
    stall: Duration,
) -> Result<(Ran, btrfs::Result<()>), CopyError> {
    let (stream_out, stream_in) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| failed("pipe", e))?;
    let mut child = spawn(cmd, Stdio::piped())?;
    let stdin: OwnedFd = child.stdin.take().expect("piped").into();
    let sender = std::thread::Builder::new()
        .name("stem-send".into())
        .spawn(move || send(stream_in))
        .map_err(|e| failed("start the send thread", e))?;
    let mut drains = [
        Drain::first(child.stdout.take().expect("piped").into(), STDOUT_CAP),
        Drain::last(child.stderr.take().expect("piped").into(), STDERR_CAP),
    ];
    // On a stall the stream's read end is closed here, so the send ends with EPIPE.
    let pumped = pump(stream_out, stdin, &mut drains, moved, stall);
    if pumped.is_err() {
        let _ = child.kill();
    }
    let sent = sender
        .join()
        .map_err(|_| CopyError::Failed("the send thread panicked".into()))?;
    let ran = finish(child, drains)?;
    if let Ok(Pumped::SinkClosed) = pumped {
        tracing::debug!("the receiver stopped before the stream ended");
    }
    pumped.map_err(|e| stalled(e, "moving the stream"))?;
    Ok((ran, sent))
}

/// Run `from | to`, counting the bytes between them. Returns how `to` and `from` ended.
fn run_piped(
    from: Command,
    to: Command,
    moved: &AtomicU64,
    stall: Duration,
) -> Result<(Ran, Ran), CopyError> {
    let mut source = spawn(from, Stdio::null())?;
    let mut sink = spawn(to, Stdio::piped())?;
    let stdin: OwnedFd = sink.stdin.take().expect("piped").into();
    let stream: OwnedFd = source.stdout.take().expect("piped").into();
    let mut all = [
        Drain::first(sink.stdout.take().expect("piped").into(), STDOUT_CAP),
        Drain::last(sink.stderr.take().expect("piped").into(), STDERR_CAP),
        Drain::last(source.stderr.take().expect("piped").into(), STDERR_CAP),
    ];
    let pumped = pump(stream, stdin, &mut all, moved, stall);
    if pumped.is_err() {
        let _ = source.kill();
        let _ = sink.kill();
    }
    let [out, err, source_err] = all;
    let to_ran = finish(sink, [out, err])?;
    let from_ran = finish(source, [Drain::empty(), source_err])?;
    pumped.map_err(|e| stalled(e, "moving the stream"))?;
    Ok((to_ran, from_ran))
}

/// The error of a pump that failed: a stall says the other side stopped answering.
fn stalled(e: std::io::Error, what: &str) -> CopyError {
    if e.kind() == std::io::ErrorKind::TimedOut {
        CopyError::Stalled(e.to_string())
    } else {
        failed(what, e)
    }
}

/// A caller's string as it may be shown: escaped (adr/0017), at most 64 bytes of it.
pub fn shown_capped(text: &str) -> String {
    let bytes = text.as_bytes();
    let cut = bytes.len().min(64);
    let mut shown = layout::escape::escape(&bytes[..cut]);
    if cut < bytes.len() {
        shown.push_str(&format!("… ({} bytes)", bytes.len()));
    }
    shown
}
