//! Opening a snapshot read-only for a person (adr/0019).
//!
//! The stem mounts and never reads: it clones the mount of exactly the part to show (a
//! snapshot's root, or one home directory in it, each opened beneath the store without
//! following a symlink), makes the clone read-only, nosuid, nodev and noexec while it is
//! still detached, and attaches it in the host's mount namespace at
//! `<open dir>/<uid>/<snapshot name>`. Files keep the owner and mode they had in the
//! snapshot; whoever reads them does so with their own rights.
//!
//! Two threads take part. The clone is made on the engine's thread, in the stem's own mount
//! namespace where the store is mounted (a mount can only be cloned from the namespace it is
//! in). Everything in the host's namespace — the directories, attaching, detaching, the
//! table of what is open — happens on one thread of its own ([`Opens`]), which entered the
//! host's namespace once at start and never leaves it. [`Opens::open`] is the act across
//! both.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use actor::{Actor, StartError};
use layout::SnapshotName;
use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};
use rustix::io::Errno;
use rustix::mount::{MoveMountFlags, OpenTreeFlags, UnmountFlags};

use crate::allowance::allowed;
use crate::engine::{Engine, EngineError};
use crate::worker::{Worker, WorkerGone};

/// The longest name a directory entry may have (NAME_MAX).
pub const MAX_PART_BYTES: usize = 255;

/// How many opens, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenLimits {
    /// An open is closed this long after it was (last) opened, once nobody uses it; while
    /// somebody does, it stays open (and its snapshot in use) until they let go.
    pub idle: Duration,
    /// At most this many open at once for one uid.
    pub per_user: usize,
    /// At most this many open at once over everybody.
    pub total: usize,
}

impl Default for OpenLimits {
    fn default() -> Self {
        OpenLimits {
            idle: Duration::from_secs(layout::defaults::OPEN_IDLE_SECS),
            per_user: layout::defaults::OPENS_PER_USER,
            total: layout::defaults::OPENS_TOTAL,
        }
    }
}

/// What of a snapshot to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// The whole snapshot.
    Whole,
    /// One directory directly in a snapshot of the homes subvolume, which must be a real
    /// directory owned by `owner_uid` in the snapshot.
    Home { component: Vec<u8>, owner_uid: u32 },
}

impl Part {
    /// The part from the wire: empty bytes for the whole snapshot, else one checked path
    /// component (1 to 255 bytes, no `/`, no NUL, not `.` or `..`).
    pub fn parse(component: &[u8], owner_uid: u32) -> Result<Part, OpenError> {
        if component.is_empty() {
            return Ok(Part::Whole);
        }
        let problem = if component.len() > MAX_PART_BYTES {
            Some("longer than a file name may be (255 bytes)")
        } else if component.contains(&b'/') {
            Some("contains '/'; a part is one directory name")
        } else if component.contains(&0) {
            Some("contains a NUL byte")
        } else if component == b"." || component == b".." {
            Some("is '.' or '..'")
        } else {
            None
        };
        match problem {
            Some(why) => Err(OpenError::InvalidPart(format!(
                "the part {} {why}",
                shown_bytes(component)
            ))),
            None => Ok(Part::Home {
                component: component.to_vec(),
                owner_uid,
            }),
        }
    }

    /// The component's bytes; empty for the whole snapshot.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Part::Whole => b"",
            Part::Home { component, .. } => component,
        }
    }
}

/// One open snapshot, as the table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenSnapshot {
    /// Whose it is: the mount is under `<open dir>/<for_uid>/`.
    pub for_uid: u32,
    pub name: SnapshotName,
    /// The home directory shown; empty for the whole snapshot.
    pub part: Vec<u8>,
    /// Where it is mounted.
    pub path: PathBuf,
    /// When it was first opened.
    pub opened: SystemTime,
    /// When it is closed if nobody uses it (its last open plus the idle time).
    pub idle_close: SystemTime,
}

/// Why an open or a close did not happen.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    InvalidPart(String),
    #[error("{name} is a snapshot of {of}; only a snapshot of {homes} ({homes_path}) has a person's part to open; open it whole (root and approvers) instead")]
    PartOfNotHomes {
        name: SnapshotName,
        of: String,
        homes: String,
        homes_path: &'static str,
    },
    #[error("{what} in {name} is not opened: {why}")]
    PartRefused {
        what: String,
        name: SnapshotName,
        why: String,
    },
    #[error("uid {uid} has {open} snapshots open, the most one person may ({most}); close one (`tacid data close NAME`) first")]
    TooManyForUser { uid: u32, open: usize, most: usize },
    #[error("{open} snapshots are open on this machine, the most there may be ({most}); try again after some are closed")]
    TooManyOverall { open: usize, most: usize },
    #[error(
        "{name} is open for uid {uid} already, showing {shown}; close it first to open {asked}"
    )]
    AlreadyOpen {
        name: SnapshotName,
        uid: u32,
        shown: String,
        asked: String,
    },
    #[error("opening snapshots is not available on this stem: {0}")]
    Unavailable(String),
    #[error("{doing}: {source}")]
    Sys {
        doing: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

fn sys(doing: impl Into<String>) -> impl FnOnce(Errno) -> OpenError {
    let doing = doing.into();
    move |e| OpenError::Sys {
        doing,
        source: e.into(),
    }
}

/// Bytes from a caller, for a message or a log: escaped, and cut at 64 bytes with the length.
pub fn shown_bytes(bytes: &[u8]) -> String {
    let cut = bytes.len().min(64);
    let mut shown = format!("\"{}\"", layout::escape::escape(&bytes[..cut]));
    if cut < bytes.len() {
        shown.push_str(&layout::human::cut_mark(bytes.len()));
    }
    shown
}

fn shown_part(part: &[u8]) -> String {
    if part.is_empty() {
        "the whole snapshot".into()
    } else {
        format!("the part {}", shown_bytes(part))
    }
}

// --- The engine's side: the detached, read-only clone. ---

/// A detached mount of `part` of the snapshot `name`, read-only, nosuid, nodev, noexec and
/// private. Runs on the engine's thread (the store's mount namespace).
pub fn detached_mount(
    engine: &Engine,
    name: SnapshotName,
    part: &Part,
) -> Result<OwnedFd, OpenError> {
    let snapshot = engine.open_snapshot_root(name)?;
    let tree = match part {
        Part::Whole => clone_tree(snapshot.as_fd())?,
        Part::Home {
            component,
            owner_uid,
        } => {
            let dir = home_part_dir(snapshot.as_fd(), name, component, *owner_uid)?;
            clone_tree(dir.as_fd())?
        }
    };
    set_read_only(tree.as_fd())?;
    Ok(tree)
}

/// The home `component` in the root `snapshot` of the snapshot `name` (of the homes
/// subvolume), opened `O_PATH`: it must be a real directory (a symlink is refused, never
/// followed) owned by `owner_uid` in the snapshot. What an open mounts, and the home a
/// person's diff is narrowed to (`Stem1.ChangesInPart`).
pub fn home_part_dir(
    snapshot: BorrowedFd<'_>,
    name: SnapshotName,
    component: &[u8],
    owner_uid: u32,
) -> Result<OwnedFd, OpenError> {
    let homes = layout::homes_subvolume();
    if name.subvolume() != homes {
        return Err(OpenError::PartOfNotHomes {
            name,
            of: name.subvolume().to_string(),
            homes: homes.to_string(),
            homes_path: layout::HOMES_MOUNT_POINT,
        });
    }
    let refused = |why: String| OpenError::PartRefused {
        what: shown_part(component),
        name,
        why,
    };
    // O_PATH: the stem needs no right to read the directory (it has none over a person's
    // 0700 home) to mount it; O_NOFOLLOW: a symlink there is refused, not followed.
    let dir = rustix::fs::openat(
        snapshot,
        OsStr::from_bytes(component),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::NOENT => refused("there is no such directory in the snapshot".into()),
        Errno::NOTDIR | Errno::LOOP => refused(
            "it is not a directory in the snapshot (a symlink or a file is never followed)".into(),
        ),
        e => OpenError::Sys {
            doing: format!("open {} in {name}", shown_part(component)),
            source: e.into(),
        },
    })?;
    let st = rustix::fs::fstat(&dir).map_err(sys(format!("stat the part of {name}")))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory {
        return Err(refused("it is not a directory in the snapshot".into()));
    }
    if st.st_uid != owner_uid {
        return Err(refused(format!(
            "it is owned by uid {} in the snapshot, not by uid {owner_uid}",
            st.st_uid
        )));
    }
    Ok(dir)
}

/// A detached copy of the mount at `dir`, that directory its root (no submount comes with it).
fn clone_tree(dir: BorrowedFd<'_>) -> Result<OwnedFd, OpenError> {
    rustix::mount::open_tree(
        dir,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH,
    )
    .map_err(sys("clone the mount (open_tree)"))
}

/// Read-only, nosuid, nodev, noexec, private: set on the detached tree, before anybody can
/// reach it.
fn set_read_only(tree: BorrowedFd<'_>) -> Result<(), OpenError> {
    use linux_raw_sys::general::{
        mount_attr, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
        MS_PRIVATE,
    };
    let attr = mount_attr {
        attr_set: u64::from(
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        ),
        attr_clr: 0,
        propagation: u64::from(MS_PRIVATE),
        userns_fd: 0,
    };
    let empty = c"";
    // SAFETY: mount_setattr(2) reads `size` bytes of `attr`, a live, initialised
    // `struct mount_attr` of exactly that size, and the NUL-terminated empty path; `tree`
    // is an open descriptor borrowed for the call. Nothing is written to our memory.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            std::os::fd::AsRawFd::as_raw_fd(&tree),
            empty.as_ptr(),
            (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            &attr as *const mount_attr,
            std::mem::size_of::<mount_attr>(),
        )
    };
    if rc != 0 {
        return Err(OpenError::Sys {
            doing: "make the mount read-only, nosuid, nodev, noexec (mount_setattr)".into(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

// --- The host's side: a thread in the host's mount namespace. ---

/// A handle to the thread that attaches and detaches opens in the host's mount namespace,
/// and holds the table of what is open. Cloning gives another handle to the same thread.
#[derive(Debug, Clone)]
pub struct Opens {
    host: Actor<HostSide>,
    /// Why there is no thread (the stem serves everything else).
    unavailable: Option<String>,
}

/// The thread's name.
const NAME: &str = "stem-host-ns";

/// Drop CAP_SYS_PTRACE from this thread's sets (every thread made later inherits them).
fn drop_ptrace() {
    use rustix::thread::{capabilities, set_capabilities, CapabilitySet};
    match capabilities(None) {
        Ok(mut sets) if sets.permitted.contains(CapabilitySet::SYS_PTRACE) => {
            sets.effective.remove(CapabilitySet::SYS_PTRACE);
            sets.permitted.remove(CapabilitySet::SYS_PTRACE);
            sets.inheritable.remove(CapabilitySet::SYS_PTRACE);
            if let Err(e) = set_capabilities(None, sets) {
                tracing::warn!("cannot drop CAP_SYS_PTRACE, needed only at start: {e}");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot read the stem's capabilities: {e}"),
    }
}

/// The thread has stopped (a panic; see the journal).
fn gone() -> OpenError {
    OpenError::Unavailable("the thread that mounts in the host's namespace has stopped".into())
}

impl Opens {
    /// The host's mount namespace, opened before the stem makes a namespace of its own:
    /// pid 1's when the stem may open it (under systemd, the unit's sandbox is a namespace
    /// of its own, and people live in pid 1's), else this process's own (started by hand,
    /// as tests do: it is then the namespace of whoever started it). Started by systemd
    /// (`INVOCATION_ID` set) without access to pid 1's, there is no host namespace to use.
    ///
    /// Opening pid 1's takes CAP_SYS_PTRACE (pid 1 holds capabilities the stem does not);
    /// the stem needs it for nothing else, so it is dropped here, for good, before any
    /// other thread exists. Call this first thing in `main`.
    pub fn host_namespace() -> Result<OwnedFd, String> {
        let open = |path: &str| {
            rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| format!("cannot open {path}: {e}"))
        };
        let host = match open("/proc/1/ns/mnt") {
            Ok(fd) => Ok(fd),
            Err(e) if std::env::var_os("INVOCATION_ID").is_some() => Err(format!(
                "{e} (under systemd the stem needs pid 1's mount namespace to show opened \
                 snapshots to people: CapabilityBoundingSet= must hold CAP_SYS_PTRACE)"
            )),
            Err(_) => open("/proc/self/ns/mnt"),
        };
        drop_ptrace();
        host
    }

    /// Opens that always answer `Unavailable` with `why`.
    pub fn unavailable(why: impl Into<String>) -> Opens {
        Opens {
            host: Actor::stopped(NAME),
            unavailable: Some(why.into()),
        }
    }

    /// Start the thread: it enters `host_ns`, makes `open_dir` (root's, 0755) when missing
    /// and checks it, and closes whatever is left mounted beneath it (a stem that died).
    /// Returns the handle and the mount points of the leftovers it closed. When the last
    /// handle is gone (the stem stops), every open is closed: nothing stays mounted.
    pub fn start(
        host_ns: OwnedFd,
        open_dir: PathBuf,
        limits: OpenLimits,
    ) -> Result<(Opens, Vec<PathBuf>), OpenError> {
        let host = Actor::builder(NAME)
            // A job that panicked leaves every open unreachable, mounts included: the stem
            // exits then, as it does when the engine's thread dies, so that systemd starts a
            // whole one again, which closes what was left mounted.
            .on_exit(|| {
                if std::thread::panicking() {
                    tracing::error!("the opens' thread crashed; the stem exits to be restarted");
                    std::process::exit(70);
                }
            })
            .on_stop(|mut host: HostSide| {
                host.close_all("the stem stops");
            })
            .spawn_with(move || HostSide::enter(host_ns, &open_dir, limits))
            .map_err(|e| match e {
                StartError::Thread(source) => OpenError::Sys {
                    doing: "start the host namespace's thread".into(),
                    source,
                },
                StartError::State(e) => e,
                StartError::Panicked => gone(),
            })?;
        // The first job, before any handle is given out.
        let leftovers = host
            .run_blocking(HostSide::close_leftovers)
            .map_err(|_| gone())?;
        let opens = Opens {
            host,
            unavailable: None,
        };
        Ok((opens, leftovers))
    }

    /// Why a job could not run: there is no thread, or it has stopped.
    fn not_run(&self) -> OpenError {
        match &self.unavailable {
            Some(why) => OpenError::Unavailable(why.clone()),
            None => gone(),
        }
    }

    /// Run `act` on the host namespace's thread and wait for its answer.
    pub async fn run<T: Send + 'static>(
        &self,
        act: impl FnOnce(&mut HostSide) -> T + Send + 'static,
    ) -> Result<T, OpenError> {
        self.host.run(act).await.map_err(|_| self.not_run())
    }

    /// As [`Opens::run`], blocking this thread.
    pub fn run_blocking<T: Send + 'static>(
        &self,
        act: impl FnOnce(&mut HostSide) -> T + Send + 'static,
    ) -> Result<T, OpenError> {
        self.host.run_blocking(act).map_err(|_| self.not_run())
    }
}

/// Why [`Opens::open`] opened nothing (each is logged where it happened).
#[derive(Debug, thiserror::Error)]
pub enum OpenFailure {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    WorkerGone(#[from] WorkerGone),
    /// A deletion ran between the clone and the attach.
    #[error("{0} was deleted while it was being opened; nothing is open")]
    DeletedMeanwhile(SnapshotName),
    /// The asker left the bus before the open was recorded (the act, as logged).
    #[error("{0}: the caller left the bus; closed again")]
    OpenerLeft(String),
}

impl Opens {
    /// Open `part` of the snapshot `name` for `for_uid`, asked by the bus connection
    /// `opener`: the clone on the engine's thread (`worker`), the attach on the host
    /// namespace's; `opener_still_there` answers, once the open is recorded, whether the
    /// asker is still on the bus. Answers the open and whether it was open already.
    pub async fn open(
        &self,
        worker: &Worker,
        for_uid: u32,
        name: SnapshotName,
        part: Part,
        opener: String,
        opener_still_there: impl std::future::Future<Output = bool>,
    ) -> Result<(OpenSnapshot, bool), OpenFailure> {
        let what = format!("open {name} ({}) for uid {for_uid}", logged_part(&part));
        let asked = part.bytes().to_vec();
        let again = self
            .run(move |h| h.admit(for_uid, name, &asked))
            .await
            .and_then(|r| r);
        match again {
            Ok(Some(open)) => {
                tracing::info!("{what}: open already at {}", open.path.display());
                return Ok((open, true));
            }
            Ok(None) => {}
            Err(e) => {
                let v = allowed("open refused", for_uid);
                if v.log() {
                    tracing::warn!("{what}: refused: {e}{}", v.note());
                }
                return Err(e.into());
            }
        }
        let clone_part = part.clone();
        let tree = match worker
            .run(move |e| detached_mount(e, name, &clone_part))
            .await?
        {
            Ok(tree) => tree,
            Err(e) => {
                let v = allowed("open refused", for_uid);
                if v.log() {
                    tracing::warn!("{what}: refused or failed: {e}{}", v.note());
                }
                return Err(e.into());
            }
        };
        let bytes = part.bytes().to_vec();
        let attach_opener = opener.clone();
        let opened = self
            .run(move |h| h.attach(for_uid, name, bytes, attach_opener, tree))
            .await
            .and_then(|r| r);
        let open = match opened {
            Ok(open) => open,
            Err(e) => {
                tracing::warn!("{what}: failed: {e}");
                return Err(e.into());
            }
        };
        // A deletion that ran between the clone and the attach did not see this open: the
        // snapshot must still be there, or the open would hold a deleted snapshot.
        let there = worker
            .run(move |e| e.open_snapshot_root(name).map(drop))
            .await;
        if !matches!(there, Ok(Ok(()))) {
            let _ = self.run(move |h| h.close(for_uid, name)).await;
            tracing::warn!("{what}: deleted while it was being opened; closed again");
            return Err(OpenFailure::DeletedMeanwhile(name));
        }
        tracing::info!("{what}: open at {}", open.path.display());
        // The asker may have left the bus before the open was recorded: then no signal of
        // its going will close it, so it is closed now.
        if !opener_still_there.await {
            let _ = self.run(move |h| h.close_of_opener(&opener)).await;
            return Err(OpenFailure::OpenerLeft(what));
        }
        Ok((open, false))
    }
}

impl Opens {
    /// Close the open `name` of `for_uid` ([`HostSide::close`]), and log how it went.
    pub async fn close(&self, for_uid: u32, name: SnapshotName) -> Result<Closed, OpenError> {
        let closed = self
            .run(move |h| h.close(for_uid, name))
            .await
            .and_then(|r| r);
        match &closed {
            Ok(Closed::NotOpen) => {
                // Anybody may ask the keeper to close anything, as often as they like.
                let v = allowed("close of what is not open", for_uid);
                if v.log() {
                    tracing::info!(
                        "close {name} for uid {for_uid}: it was not open; nothing changed{}",
                        v.note()
                    );
                }
            }
            Ok(Closed::Busy) => {
                let v = allowed("close of an open in use", for_uid);
                if v.log() {
                    tracing::info!(
                        "close {name} for uid {for_uid}: in use; it stays open{}",
                        v.note()
                    );
                }
            }
            Ok(Closed::Closed) => tracing::info!("close {name} for uid {for_uid}: closed"),
            Err(e) => tracing::warn!("close {name} for uid {for_uid}: failed: {e}"),
        }
        closed
    }
}

impl Opens {
    /// Delete the snapshot `name` unless it is open: on the engine's thread (`engine`), as
    /// an open's own check after it attaches, so an open is either in the table when this
    /// looks, or finds the snapshot gone and closes.
    pub fn delete_unless_open(
        &self,
        engine: &Engine,
        name: SnapshotName,
    ) -> Result<(), EngineError> {
        // No thread in the host's namespace: nothing is open.
        let open = self
            .run_blocking(move |h| h.opens_of(name))
            .unwrap_or_default();
        if !open.is_empty() {
            let held = open
                .iter()
                .map(|o| format!("open for uid {} at {}", o.for_uid, o.path.display()))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(EngineError::InUse { name, held });
        }
        engine.delete(name)
    }
}

/// Check, on the engine's thread (`worker`), that `component` in the snapshot `name` of
/// homes is a part `owner_uid` may be shown (as an open of it would).
pub async fn check_home_part(
    worker: &Worker,
    name: SnapshotName,
    component: Vec<u8>,
    owner_uid: u32,
) -> Result<(), OpenFailure> {
    worker
        .run(move |e| {
            let root = e.open_snapshot_root(name)?;
            home_part_dir(root.as_fd(), name, &component, owner_uid).map(drop)
        })
        .await?
        .map_err(|e| {
            // The keeper journals the refusal within its allowance (adr/0016).
            tracing::debug!("the changes in a part of {name}: refused: {e}");
            OpenFailure::Open(e)
        })
}

/// A part as logged.
fn logged_part(part: &Part) -> String {
    match part {
        Part::Whole => "whole".into(),
        Part::Home {
            component,
            owner_uid,
        } => format!("the part {} of uid {owner_uid}", shown_bytes(component)),
    }
}

/// One open in the table.
#[derive(Debug)]
struct Entry {
    part: Vec<u8>,
    /// The mount's id (statx STATX_MNT_ID), so a close detaches only what the stem attached.
    mount_id: u64,
    opened: SystemTime,
    /// The last open (the first, or an open of the same again).
    last_opened: Instant,
    last_opened_wall: SystemTime,
    /// The bus connection that asked (the keeper's): when it goes, the open goes.
    opener: String,
}

/// The host namespace's side: the open directory, and what is open. Lives on its thread.
#[derive(Debug)]
pub struct HostSide {
    base: OwnedFd,
    base_path: PathBuf,
    limits: OpenLimits,
    table: BTreeMap<(u32, SnapshotName), Entry>,
}

/// How a close went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Detached and its mount point removed.
    Closed,
    /// Nothing of that name was open.
    NotOpen,
    /// A process uses it (a working directory, an open file or a mapping in it); it stays.
    Busy,
}

impl HostSide {
    fn enter(host_ns: OwnedFd, open_dir: &Path, limits: OpenLimits) -> Result<HostSide, OpenError> {
        // A thread shares its root and working directory with the others (CLONE_FS), and
        // setns refuses a mount namespace to such a thread: this one takes its own copy.
        // SAFETY: only FS, never FILES: the descriptor table stays shared, so no descriptor
        // another thread holds is invalidated.
        #[allow(unsafe_code)]
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) }.map_err(
            sys("leave the shared root and working directory (unshare CLONE_FS)"),
        )?;
        rustix::thread::move_into_link_name_space(
            host_ns.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Mount),
        )
        .map_err(sys(
            "enter the host's mount namespace (setns; the unit must allow CAP_SYS_CHROOT)",
        ))?;
        drop(host_ns);
        let base = open_base_dir(open_dir)?;
        // Mount points in /proc's mountinfo are the resolved path.
        let base_path = std::fs::canonicalize(open_dir).map_err(|source| OpenError::Sys {
            doing: format!("resolve {}", open_dir.display()),
            source,
        })?;
        Ok(HostSide {
            base,
            base_path,
            limits,
            table: BTreeMap::new(),
        })
    }

    fn path_of(&self, uid: u32, name: SnapshotName) -> PathBuf {
        self.base_path.join(uid.to_string()).join(name.to_string())
    }

    fn info(&self, (uid, name): (u32, SnapshotName), e: &Entry) -> OpenSnapshot {
        OpenSnapshot {
            for_uid: uid,
            name,
            part: e.part.clone(),
            path: self.path_of(uid, name),
            opened: e.opened,
            idle_close: e.last_opened_wall + self.limits.idle,
        }
    }

    /// What is open, by uid and name.
    pub fn list(&self) -> Vec<OpenSnapshot> {
        self.table.iter().map(|(k, e)| self.info(*k, e)).collect()
    }

    /// Before the clone is made: the same open again is answered now (its idle time starts
    /// again); another part under the same name, or one over a cap, is refused.
    pub fn admit(
        &mut self,
        for_uid: u32,
        name: SnapshotName,
        part: &[u8],
    ) -> Result<Option<OpenSnapshot>, OpenError> {
        if let Some(e) = self.table.get_mut(&(for_uid, name)) {
            if e.part != part {
                return Err(OpenError::AlreadyOpen {
                    name,
                    uid: for_uid,
                    shown: shown_part(&e.part),
                    asked: shown_part(part),
                });
            }
            e.last_opened = Instant::now();
            e.last_opened_wall = SystemTime::now();
            let e = &self.table[&(for_uid, name)];
            return Ok(Some(self.info((for_uid, name), e)));
        }
        let mine = self.table.keys().filter(|(u, _)| *u == for_uid).count();
        if mine >= self.limits.per_user {
            return Err(OpenError::TooManyForUser {
                uid: for_uid,
                open: mine,
                most: self.limits.per_user,
            });
        }
        if self.table.len() >= self.limits.total {
            return Err(OpenError::TooManyOverall {
                open: self.table.len(),
                most: self.limits.total,
            });
        }
        Ok(None)
    }

    /// Attach the detached `tree` at `<open dir>/<for_uid>/<name>`, the uid's directory made
    /// (root's, 0750 with an ACL entry giving `for_uid` alone r-x) when missing.
    pub fn attach(
        &mut self,
        for_uid: u32,
        name: SnapshotName,
        part: Vec<u8>,
        opener: String,
        tree: OwnedFd,
    ) -> Result<OpenSnapshot, OpenError> {
        if let Some(open) = self.admit(for_uid, name, &part)? {
            return Ok(open); // opened meanwhile by the same ask; `tree` is dropped unattached
        }
        let user_dir = self.user_dir(for_uid)?;
        let point = name.to_string();
        match rustix::fs::mkdirat(&user_dir, point.as_str(), Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(sys(format!("make the mount point for {name}"))(e)),
        }
        let target = rustix::fs::openat(
            &user_dir,
            point.as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(sys(format!("open the mount point for {name}")))?;
        rustix::mount::move_mount(
            &tree,
            "",
            &target,
            "",
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
        )
        .map_err(sys(format!(
            "attach {name} in the host's namespace (move_mount)"
        )))?;
        let mount_id =
            mount_id_of(tree.as_fd(), "").map_err(sys(format!("read the mount id of {name}")))?;
        // Our handle on the tree would make it busy forever: an idle close could never
        // tell whether a person still uses it.
        drop(tree);
        let now = SystemTime::now();
        self.table.insert(
            (for_uid, name),
            Entry {
                part,
                mount_id,
                opened: now,
                last_opened: Instant::now(),
                last_opened_wall: now,
                opener,
            },
        );
        Ok(self.info((for_uid, name), &self.table[&(for_uid, name)]))
    }

    /// The uid's directory: made when missing, and (again each time) root's, 0750, with
    /// `uid` alone allowed to enter and list it by an ACL entry. Nobody but root can write
    /// in it, so nothing a person plants there can meet the stem's mkdir, mount or rmdir.
    fn user_dir(&self, uid: u32) -> Result<OwnedFd, OpenError> {
        let name = uid.to_string();
        match rustix::fs::mkdirat(&self.base, name.as_str(), Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(sys(format!("make {}/{name}", self.base_path.display()))(e)),
        }
        let dir = rustix::fs::openat(
            &self.base,
            name.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(sys(format!(
            "open {}/{name} (it must be a directory)",
            self.base_path.display()
        )))?;
        let st = rustix::fs::fstat(&dir).map_err(sys("stat the uid's directory"))?;
        if st.st_uid != 0 {
            return Err(OpenError::Sys {
                doing: format!(
                    "{}/{name} is owned by uid {}, not root; remove it",
                    self.base_path.display(),
                    st.st_uid
                ),
                source: io::Error::from(io::ErrorKind::PermissionDenied),
            });
        }
        if uid == 0 {
            rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o700))
                .map_err(sys("set the mode of root's directory"))?;
            match rustix::fs::fremovexattr(&dir, ACL_XATTR) {
                Ok(()) | Err(Errno::NODATA) | Err(Errno::OPNOTSUPP) => {}
                Err(e) => return Err(sys("remove the ACL of root's directory")(e)),
            }
        } else {
            rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o750))
                .map_err(sys("set the mode of the uid's directory"))?;
            rustix::fs::fsetxattr(
                &dir,
                ACL_XATTR,
                &acl_for(uid),
                rustix::fs::XattrFlags::empty(),
            )
            .map_err(sys(format!(
                "give uid {uid} alone the right to enter {}/{name} (a POSIX ACL; the \
                 filesystem must support them, as tmpfs does)",
                self.base_path.display()
            )))?;
        }
        Ok(dir)
    }

    /// Close the open `name` of `uid`: unmounted and its mount point removed, unless a
    /// process uses it (a working directory, an open file, a mapping in it): then it stays
    /// open and `Busy` says so. Never detached lazily: a detached mount nobody can see would
    /// keep its snapshot alive after a deletion (adr/0021).
    pub fn close(&mut self, uid: u32, name: SnapshotName) -> Result<Closed, OpenError> {
        let Some(entry) = self.table.get(&(uid, name)) else {
            return Ok(Closed::NotOpen);
        };
        let closed = self.unmount(uid, name, entry.mount_id)?;
        if closed == Closed::Closed {
            self.table.remove(&(uid, name));
        }
        Ok(closed)
    }

    /// The opens of the snapshot `name`, whoever they are for: while there is one, the
    /// snapshot is in use and is not deleted.
    pub fn opens_of(&self, name: SnapshotName) -> Vec<OpenSnapshot> {
        self.table
            .iter()
            .filter(|((_, n), _)| *n == name)
            .map(|(k, e)| self.info(*k, e))
            .collect()
    }

    /// Unmount what is mounted at `<uid>/<name>` when it is the mount `mount_id`, and
    /// remove the mount point; `Busy` when a process uses it.
    fn unmount(&self, uid: u32, name: SnapshotName, mount_id: u64) -> Result<Closed, OpenError> {
        let path = self.path_of(uid, name);
        let user_dir = match rustix::fs::openat(
            &self.base,
            uid.to_string().as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(d) => d,
            Err(Errno::NOENT) => return Ok(Closed::Closed),
            Err(e) => return Err(sys(format!("open the directory of uid {uid}"))(e)),
        };
        let point = name.to_string();
        let still_ours = match mount_id_of(user_dir.as_fd(), &point) {
            Ok(id) => id == mount_id,
            Err(Errno::NOENT) => return Ok(Closed::Closed),
            Err(e) => return Err(sys(format!("stat {}", path.display()))(e)),
        };
        if still_ours {
            match rustix::mount::unmount(&path, UnmountFlags::NOFOLLOW) {
                // EINVAL: not a mount point (any more).
                Ok(()) | Err(Errno::INVAL) => {}
                Err(Errno::BUSY) => return Ok(Closed::Busy),
                Err(e) => return Err(sys(format!("unmount {}", path.display()))(e)),
            }
        }
        match rustix::fs::unlinkat(&user_dir, point.as_str(), AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) | Err(Errno::NOTEMPTY) | Err(Errno::BUSY) => {}
            Err(e) => tracing::warn!("cannot remove the mount point {}: {e}", path.display()),
        }
        Ok(Closed::Closed)
    }

    /// Close every open asked for by the bus connection `opener` (it has gone). One in use
    /// stays open, with no opener, and is closed at the next idle check after it is let go.
    pub fn close_of_opener(&mut self, opener: &str) -> Vec<OpenSnapshot> {
        let keys: Vec<_> = self
            .table
            .iter()
            .filter(|(_, e)| e.opener == opener)
            .map(|(k, _)| *k)
            .collect();
        self.close_keys(keys, &format!("{opener} left the bus"))
    }

    /// Close every open; those in use stay mounted (the next start closes them, or keeps
    /// them while they are still in use).
    pub fn close_all(&mut self, why: &str) -> Vec<OpenSnapshot> {
        let keys: Vec<_> = self.table.keys().copied().collect();
        self.close_keys(keys, why)
    }

    fn close_keys(&mut self, keys: Vec<(u32, SnapshotName)>, why: &str) -> Vec<OpenSnapshot> {
        let mut closed = Vec::new();
        for key in keys {
            let info = self.info(key, &self.table[&key]);
            match self.close(key.0, key.1) {
                Ok(Closed::Closed) => {
                    tracing::info!(uid = key.0, "closed {} ({why})", info.path.display());
                    closed.push(info);
                }
                Ok(Closed::Busy) => {
                    tracing::warn!(
                        uid = key.0,
                        "{} is in use; it stays open until it is let go ({why})",
                        info.path.display()
                    );
                    if let Some(e) = self.table.get_mut(&key) {
                        e.opener.clear();
                        e.last_opened = Instant::now()
                            .checked_sub(self.limits.idle)
                            .unwrap_or(e.last_opened);
                    }
                }
                Ok(Closed::NotOpen) => {}
                Err(e) => tracing::error!("cannot close {}: {e}", info.path.display()),
            }
        }
        closed
    }

    /// Close the opens whose idle time has passed and that nobody uses; one in use is tried
    /// again at the next check, however long that takes.
    pub fn close_idle(&mut self, now: Instant) -> Vec<OpenSnapshot> {
        let idle = self.limits.idle;
        let due: Vec<_> = self
            .table
            .iter()
            .filter(|(_, e)| now.saturating_duration_since(e.last_opened) >= idle)
            .map(|(k, _)| *k)
            .collect();
        let mut closed = Vec::new();
        for key in due {
            let info = self.info(key, &self.table[&key]);
            match self.close(key.0, key.1) {
                Ok(Closed::Closed) => {
                    tracing::info!(uid = key.0, "closed {} (idle)", info.path.display());
                    closed.push(info);
                }
                Ok(Closed::Busy) => {
                    tracing::debug!("{} is in use; closing it later", info.path.display())
                }
                Ok(Closed::NotOpen) => {}
                Err(e) => tracing::error!("cannot close {}: {e}", info.path.display()),
            }
        }
        closed
    }

    /// Unmount everything mounted beneath the open directory (a stem that died or stopped
    /// left it). What is still in use stays mounted and is taken into the table, so that it
    /// counts as open (its snapshot in use) and closes once it is let go.
    fn close_leftovers(&mut self) -> Vec<PathBuf> {
        let text = match std::fs::read("/proc/thread-self/mountinfo") {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("cannot read the host's mounts to close leftover opens: {e}");
                return Vec::new();
            }
        };
        let mut leftovers: Vec<(PathBuf, PathBuf)> = mounts(&text)
            .into_iter()
            .filter(|(_, p)| p.starts_with(&self.base_path) && *p != self.base_path)
            .collect();
        // Deepest first; a path mounted twice is unmounted twice.
        leftovers.sort_by_key(|(_, p)| std::cmp::Reverse(p.components().count()));
        let mut closed = Vec::new();
        for (root, path) in leftovers {
            match rustix::mount::unmount(&path, UnmountFlags::NOFOLLOW) {
                Ok(()) => {
                    let _ = std::fs::remove_dir(&path);
                    closed.push(path);
                }
                Err(Errno::BUSY) => self.adopt(&root, &path),
                Err(e) => tracing::error!("cannot unmount the leftover {}: {e}", path.display()),
            }
        }
        closed
    }

    /// Take a leftover open still in use at `path` (`<open dir>/<uid>/<name>`, showing
    /// `root` of the filesystem) into the table.
    fn adopt(&mut self, root: &Path, path: &Path) {
        let parsed = path.strip_prefix(&self.base_path).ok().and_then(|rel| {
            let mut c = rel.components();
            let uid = c.next()?.as_os_str().to_str()?.parse::<u32>().ok()?;
            let name = SnapshotName::parse(c.next()?.as_os_str().to_str()?).ok()?;
            c.next().is_none().then_some((uid, name))
        });
        let mount_id = rustix::fs::statx(
            rustix::fs::CWD,
            path,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::MNT_ID,
        )
        .map(|st| st.stx_mnt_id);
        let (Some((uid, name)), Ok(mount_id)) = (parsed, mount_id) else {
            tracing::error!(
                "{} is in use and not an open this stem can take over; unmount it by hand",
                path.display()
            );
            return;
        };
        // The mount's root is the snapshot's (whole) or one directory in it (a home).
        let last = root.file_name().map(|n| n.as_bytes().to_vec());
        let part = match last {
            Some(l) if l != name.to_string().as_bytes() => l,
            _ => Vec::new(),
        };
        tracing::warn!(
            uid,
            "{} is in use: kept open until it is let go (a stem before this one opened it)",
            path.display()
        );
        let now = SystemTime::now();
        self.table.insert(
            (uid, name),
            Entry {
                part,
                mount_id,
                opened: now,
                last_opened: Instant::now()
                    .checked_sub(self.limits.idle)
                    .unwrap_or_else(Instant::now),
                last_opened_wall: now,
                opener: String::new(),
            },
        );
    }
}

/// Every mount in a mountinfo text: its root in its filesystem and its mount point, octal
/// escapes (`\040`) decoded.
fn mounts(mountinfo: &[u8]) -> Vec<(PathBuf, PathBuf)> {
    mountinfo
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            let mut fields = line.split(|b| *b == b' ');
            let root = fields.nth(3)?;
            let point = fields.next()?;
            Some((
                PathBuf::from(OsStr::from_bytes(&unescape_octal(root))),
                PathBuf::from(OsStr::from_bytes(&unescape_octal(point))),
            ))
        })
        .collect()
}

fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && i + 3 < field.len()
            && field[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = field[i + 1..i + 4]
                .iter()
                .fold(0u32, |v, b| v * 8 + u32::from(b - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    out
}

fn mount_id_of(dir: BorrowedFd<'_>, name: &str) -> Result<u64, Errno> {
    let flags = if name.is_empty() {
        AtFlags::EMPTY_PATH
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    let st = rustix::fs::statx(dir, name, flags, StatxFlags::MNT_ID)?;
    Ok(st.stx_mnt_id)
}

/// The open directory: made (root's, 0755) when missing; it must be a real directory of
/// root's that nobody else may write to.
fn open_base_dir(path: &Path) -> Result<OwnedFd, OpenError> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| OpenError::Unavailable(format!("{} contains a NUL byte", path.display())))?;
    match rustix::fs::mkdir(c.as_c_str(), Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(sys(format!("make {}", path.display()))(e)),
    }
    let dir = rustix::fs::open(
        c.as_c_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(sys(format!(
        "open {} (it must be a directory, not a symlink)",
        path.display()
    )))?;
    let st = rustix::fs::fstat(&dir).map_err(sys(format!("stat {}", path.display())))?;
    if st.st_uid != 0 {
        return Err(OpenError::Unavailable(format!(
            "{} is owned by uid {}, not root; remove it",
            path.display(),
            st.st_uid
        )));
    }
    // People pass through it to their own directory; only root writes in it.
    rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o755))
        .map_err(sys(format!("set the mode of {}", path.display())))?;
    Ok(dir)
}

const ACL_XATTR: &str = "system.posix_acl_access";

/// A POSIX access ACL in the kernel's xattr form: owner rwx, `uid` r-x, group none,
/// mask r-x, others none.
fn acl_for(uid: u32) -> Vec<u8> {
    const VERSION: u32 = 2;
    const UNDEFINED: u32 = u32::MAX;
    let entries: [(u16, u16, u32); 5] = [
        (0x01, 7, UNDEFINED), // ACL_USER_OBJ
        (0x02, 5, uid),       // ACL_USER
        (0x04, 0, UNDEFINED), // ACL_GROUP_OBJ
        (0x10, 5, UNDEFINED), // ACL_MASK
        (0x20, 0, UNDEFINED), // ACL_OTHER
    ];
    let mut out = VERSION.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_one_checked_component() {
        assert_eq!(Part::parse(b"", 7).expect("whole"), Part::Whole);
        assert_eq!(
            Part::parse(b"alice", 1000).expect("a home"),
            Part::Home {
                component: b"alice".to_vec(),
                owner_uid: 1000
            }
        );
        let long = vec![b'a'; 100_000];
        for bad in [&b"a/b"[..], b"/", b".", b"..", b"a\0b", &long] {
            match Part::parse(bad, 1000) {
                Err(OpenError::InvalidPart(m)) => assert!(m.len() < 200, "{m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(Part::parse(&[b'a'; 255], 1).is_ok());
        assert!(Part::parse(&[0xff, b'x'], 1).is_ok(), "names are bytes");
        let m = Part::parse(&long, 1).unwrap_err().to_string();
        assert!(m.contains("(100000 bytes)"), "{m}");
    }

    #[test]
    fn mountinfo_mounts_are_decoded() {
        let text = b"36 35 98:0 /@snapshots/@home.x/alice /run/tacid/1000/@home.x rw,nosuid - btrfs /dev/loop0 ro\n\
                     37 35 98:0 / /run/a\\040b rw - tmpfs tmpfs rw\n";
        assert_eq!(
            mounts(text),
            [
                (
                    PathBuf::from("/@snapshots/@home.x/alice"),
                    PathBuf::from("/run/tacid/1000/@home.x")
                ),
                (PathBuf::from("/"), PathBuf::from("/run/a b"))
            ]
        );
    }

    #[test]
    fn the_acl_gives_one_uid_read_and_search() {
        let acl = acl_for(1000);
        assert_eq!(acl.len(), 4 + 5 * 8);
        assert_eq!(&acl[12..20], &[2, 0, 5, 0, 0xe8, 3, 0, 0]);
    }
}
