//! The keeper's side of `org.tacid.Stem1`: the stem's proxy, its answers turned into the
//! keeper's terms, and the stem's absence turned into one clear sentence.
//!
//! The proxy sends to the stem's well-known name, so a stem that restarts (new unique name)
//! is reached again by the next call with nothing to reconnect; a call that finds no stem
//! is tried once more after a short pause, in case it is starting.

use std::sync::OnceLock;
use std::time::Duration;

use stem_interface::{self as stem1, ErrorKind, Stem1Proxy};
use zbus::proxy::CacheProperties;
use zbus::Connection;

use bus_peer::owner::NotTheOwner;

use crate::journal::Member;
use crate::wire::KeeperError;

/// What the caller is told when the stem is not on the bus.
pub const STEM_NOT_RUNNING: &str =
    "the stem is not running; start tacid-stem.service (`systemctl start tacid-stem.service`) and try again";

/// A snapshot on disk, as the stem lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSnapshot {
    pub member: Member,
    /// The staged restore names it.
    pub staged: bool,
    /// Its identity to `btrfs send` and `receive`: its received UUID when it was fetched,
    /// else its UUID. A copy of it, and a stream against it as parent, name this.
    pub identity: String,
}

/// A snapshot on disk as `list_since` gives it, borrowed from the stem's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnDisk<'a> {
    pub name: &'a str,
    pub of: &'a str,
    pub taken_micros: i64,
    pub staged: bool,
}

/// A `SnapshotInfo` of `ListSince`'s answer, borrowed (a test holds the two alike).
type ListedRow<'a> = (
    &'a str,
    u64,
    &'a str,
    &'a str,
    &'a str,
    i64,
    bool,
    bool,
    &'a str,
);

/// One member of a staged request, as the stem reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub subvolume: String,
    pub snapshot: String,
    pub uuid: String,
}

/// The snapshot names of a request's members, separated by single spaces, in the request's
/// order: how the journal names what a restore puts back (`@persist.… @log.… @home.…`).
pub fn snapshot_names(members: &[Request]) -> String {
    members
        .iter()
        .map(|m| m.snapshot.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What is staged, as the stem reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StagedOnDisk {
    Nothing,
    /// A request of one or more members, in the order the boot exchanges them.
    Request(Vec<Request>),
    /// The request file is bad; the stem's words on what is wrong with it.
    Bad(String),
}

impl StagedOnDisk {
    /// The request's members, when a good one is staged.
    pub fn request(&self) -> Option<&[Request]> {
        match self {
            StagedOnDisk::Request(r) => Some(r),
            StagedOnDisk::Nothing | StagedOnDisk::Bad(_) => None,
        }
    }
}

/// The initrd's outcome, as the stem reports it (what the journal records of one; the
/// outcome file itself is `layout::Outcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootOutcome {
    pub id: String,
    pub result: layout::OutcomeResult,
    pub finished_micros: i64,
    /// The request's members (none when the request did not parse).
    pub request: Vec<Request>,
    pub reason: String,
    /// What each member's replaced subvolume became: `(subvolume, kept snapshot)`, the
    /// name empty when it was deleted (adr/0027).
    pub replaced: Vec<(String, String)>,
}

/// The stem said no, or could not be reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StemError {
    /// Nobody owns the stem's name: the call was never delivered.
    #[error("{STEM_NOT_RUNNING}")]
    NotRunning,
    /// The stem went away while the call was with it: it may have acted. Not retried; the
    /// journal is settled from the disk.
    #[error(
        "{STEM_NOT_RUNNING} (it stopped while answering; `tacid data list` shows what exists)"
    )]
    WentAway,
    /// A named error of `org.tacid.Stem1`.
    #[error("the stem refused: {message}")]
    Refused { kind: ErrorKind, message: String },
    #[error("talking to the stem failed: {0}")]
    Bus(String),
    /// Whoever owns the stem's name is not root, or who it is could not be learnt: it is
    /// not called (the words say what and what to do).
    #[error("{0}")]
    NotTheStem(String),
}

/// The stem runs as root.
const STEM_UID: u32 = 0;

/// The most calls the keeper has waiting for the stem's answer at once. The bus lets one
/// connection wait for at most 128 replies (the system bus's `max_replies_per_connection`)
/// and refuses the call past that, whoever it is for: a flood of requests must queue here,
/// in the keeper, not be refused there (adr/0016).
pub const MAX_CALLS_IN_FLIGHT: usize = 48;

/// The stem, over the keeper's bus connection (set once the connection exists).
#[derive(Debug)]
pub struct StemClient {
    connection: OnceLock<Connection>,
    in_flight: tokio::sync::Semaphore,
    owners: bus_peer::owner::Owners,
}

impl Default for StemClient {
    fn default() -> Self {
        StemClient {
            connection: OnceLock::new(),
            in_flight: tokio::sync::Semaphore::new(MAX_CALLS_IN_FLIGHT),
            owners: bus_peer::owner::Owners::default(),
        }
    }
}

fn member(s: &stem1::SnapshotInfo) -> DiskSnapshot {
    DiskSnapshot {
        member: Member {
            name: s.name.clone(),
            uuid: s.uuid.clone(),
            of_subvolume: s.of.clone(),
            // The time in the name: the stem's clock to the microsecond, and what the name
            // says to people. The Btrfs creation time comes from a coarse kernel clock.
            taken_micros: layout::SnapshotName::parse(&s.name)
                .map(|n| n.taken_unix_micros())
                .unwrap_or(s.taken_unix_micros),
        },
        staged: s.staged,
        identity: if s.received_uuid.is_empty() {
            s.uuid.clone()
        } else {
            s.received_uuid.clone()
        },
    }
}

fn request(r: &stem1::RequestInfo) -> Request {
    Request {
        subvolume: r.subvolume.clone(),
        snapshot: r.snapshot.clone(),
        uuid: r.uuid.clone(),
    }
}

/// A request's members from the wire; `None` for no element (nothing staged).
fn members(infos: &[stem1::RequestInfo]) -> Option<Vec<Request>> {
    if infos.is_empty() {
        None
    } else {
        Some(infos.iter().map(request).collect())
    }
}

fn classify(e: stem1::Error) -> StemError {
    match e.kind() {
        Some(kind) => StemError::Refused {
            kind,
            message: e.message(),
        },
        None => match e {
            stem1::Error::ZBus(e) => match bus_peer::peer_gone(&e) {
                Some(bus_peer::PeerGone::NotThere) => StemError::NotRunning,
                Some(bus_peer::PeerGone::WentAway) => StemError::WentAway,
                // An error this interface does not name (a newer stem's), or the bus's own.
                None => match e {
                    zbus::Error::MethodError(name, message, _) => StemError::Bus(format!(
                        "{} (stem error {name})",
                        message.unwrap_or_default()
                    )),
                    zbus::Error::FDO(fdo) => StemError::Bus(fdo.to_string()),
                    other => StemError::Bus(other.to_string()),
                },
            },
            named => StemError::Bus(named.to_string()),
        },
    }
}

impl StemClient {
    pub fn new() -> Self {
        StemClient::default()
    }

    /// Use `connection` from now on (once).
    pub fn connect(&self, connection: Connection) {
        let _ = self.connection.set(connection);
    }

    /// A proxy to the connection that owns the stem's name, once the bus has said that
    /// connection runs as root (the stem's user): the keeper hands the stem pipe ends and
    /// takes its word on the disk, so a policy file installed wrong must not be enough for a
    /// stranger to stand in for it. The proxy calls the owner's unique name, which no other
    /// connection can take over between this check and the call. Any error deciding is a
    /// refusal.
    async fn proxy(&self) -> Result<Stem1Proxy<'static>, StemError> {
        let conn = self.connection.get().ok_or(StemError::NotRunning)?;
        let name = layout::names::STEM_BUS_NAME;
        let owner = self.owners.owned_by_or_started(conn, name, STEM_UID).await;
        let owner = owner.map_err(|e| match e {
            NotTheOwner::NoOwner => StemError::NotRunning,
            NotTheOwner::Bus(m) => StemError::NotTheStem(format!(
                "cannot tell who owns {name} on the bus ({m}); nothing was asked of it: \
                 check that the bus is running and try again"
            )),
            NotTheOwner::Stranger { unique, uid } => StemError::NotTheStem(format!(
                "{name} is owned by {unique}, which runs as uid {uid}, not as root: refused \
                 to call it. Find and stop that process (`busctl --system status {name}`), \
                 check that the bus policy lets only root own {name}, then start {unit}",
                unit = layout::names::STEM_UNIT
            )),
        })?;
        Stem1Proxy::builder(conn)
            .destination(owner)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| StemError::Bus(e.to_string()))
    }

    /// Call `f` on the proxy; when the stem is not there (the call was never delivered), wait
    /// a moment and try once more, in case it is starting.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T, StemError>
    where
        F: Fn(Stem1Proxy<'static>) -> Fut,
        Fut: std::future::Future<Output = Result<T, stem1::Error>>,
    {
        let _turn = self
            .in_flight
            .acquire()
            .await
            .map_err(|e| StemError::Bus(e.to_string()))?;
        let first = match self.proxy().await {
            Ok(proxy) => f(proxy).await.map_err(classify),
            Err(e) => Err(e),
        };
        match first {
            Err(StemError::NotRunning) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                f(self.proxy().await?).await.map_err(classify)
            }
            other => other,
        }
    }

    /// Every snapshot in the store, newest first.
    pub async fn list(&self) -> Result<Vec<DiskSnapshot>, StemError> {
        let all = self.call(|p| async move { p.list().await }).await?;
        Ok(all.iter().map(member).collect())
    }

    /// The store's generation, and — when it is not `known` — each snapshot on disk, newest
    /// first, given to `each` borrowed from the stem's answer (nothing is copied that the
    /// caller does not keep). Returns the generation and whether it changed.
    pub async fn list_since(
        &self,
        known: &[u64],
        mut each: impl FnMut(OnDisk<'_>),
    ) -> Result<(Vec<u64>, bool), StemError> {
        let known = known.to_vec();
        let reply = self
            .call(|p| {
                let known = known.clone();
                async move {
                    p.inner()
                        .call_method("ListSince", &(known,))
                        .await
                        .map_err(stem1::Error::from)
                }
            })
            .await?;
        let body = reply.body();
        let (generation, changed, rows): (Vec<u64>, bool, Vec<ListedRow<'_>>) = body
            .deserialize()
            .map_err(|e| StemError::Bus(format!("the stem's list does not read: {e}")))?;
        for (name, _id, _uuid, of, _origin, taken, _readonly, staged, _received) in rows {
            each(OnDisk {
                name,
                of,
                // As `member`: the time in the name, to the microsecond.
                taken_micros: layout::SnapshotName::parse(name)
                    .map(|n| n.taken_unix_micros())
                    .unwrap_or(taken),
                staged,
            });
        }
        Ok((generation, changed))
    }

    /// Take a set, all or nothing; the members in the order asked.
    pub async fn take_set(&self, subvolumes: &[String]) -> Result<Vec<Member>, StemError> {
        let subs = subvolumes.to_vec();
        let taken = self
            .call(|p| {
                let subs = subs.clone();
                async move { p.take_set(subs).await }
            })
            .await?;
        Ok(taken.iter().map(|s| member(s).member).collect())
    }

    /// Take a set with root's units paused (a consistent cut), all or nothing; the members
    /// in the order asked, the units that were paused (none: an ordinary set), and what
    /// became of each hook that ran, one line each (`before pg.service as postgres: exited
    /// 0 in 12 ms`, capped), and whether it succeeded.
    #[allow(clippy::type_complexity)]
    pub async fn take_cut(
        &self,
        subvolumes: &[String],
    ) -> Result<(Vec<Member>, Vec<String>, Vec<(bool, String)>), StemError> {
        let subs = subvolumes.to_vec();
        let (taken, paused, _us, hooks) = self
            .call(|p| {
                let subs = subs.clone();
                async move { p.take_cut(subs).await }
            })
            .await?;
        let hooks = hooks
            .iter()
            .take(2 * layout::cut::MAX_UNITS)
            .map(|h| {
                let line = format!("{} {} as {}: {}", h.when, h.unit, h.user, h.summary);
                (h.ok, layout::human::cap(&line, 400).into_owned())
            })
            .collect();
        Ok((
            taken.iter().map(|s| member(s).member).collect(),
            paused,
            hooks,
        ))
    }

    /// Stage a restore; `(request, already_staged, message)`.
    pub async fn stage_restore(&self, name: &str) -> Result<(Request, bool, String), StemError> {
        let name = name.to_owned();
        let s = self
            .call(|p| {
                let name = name.clone();
                async move { p.stage_restore(&name).await }
            })
            .await?;
        Ok((request(&s.request), s.already_staged, s.message))
    }

    /// Stage a restore of several snapshots together, as one request; `(members,
    /// already_staged, message)`, the members in the order the boot exchanges them.
    pub async fn stage_set_restore(
        &self,
        names: &[String],
    ) -> Result<(Vec<Request>, bool, String), StemError> {
        let names = names.to_vec();
        let s = self
            .call(|p| {
                let names = names.clone();
                async move { p.stage_set_restore(names).await }
            })
            .await?;
        Ok((
            s.request.iter().map(request).collect(),
            s.already_staged,
            s.message,
        ))
    }

    /// What changed in the live subvolume since the snapshot `name` (stopping after
    /// `limit`), with the changed paths when `with_paths`.
    pub async fn changes_since(
        &self,
        name: &str,
        limit: Duration,
        with_paths: bool,
    ) -> Result<stem1::ChangesInfo, StemError> {
        let name = name.to_owned();
        let limit_ms = u32::try_from(limit.as_millis()).unwrap_or(u32::MAX);
        self.call(|p| {
            let name = name.clone();
            async move { p.changes_since(&name, limit_ms, with_paths).await }
        })
        .await
    }

    /// What changed since the snapshot `name` as far as the filesystem's last commit shows,
    /// without committing (stopping after `limit`); for previews by people who only look.
    pub async fn changes_since_last_commit(
        &self,
        name: &str,
        limit: Duration,
    ) -> Result<stem1::ChangesInfo, StemError> {
        let name = name.to_owned();
        let limit_ms = u32::try_from(limit.as_millis()).unwrap_or(u32::MAX);
        self.call(|p| {
            let name = name.clone();
            async move { p.changes_since_last_commit(&name, limit_ms).await }
        })
        .await
    }

    /// Withdraw the staged request, every member; the members withdrawn, if any.
    pub async fn withdraw(&self) -> Result<Option<Vec<Request>>, StemError> {
        let w = self.call(|p| async move { p.withdraw().await }).await?;
        Ok(members(&w))
    }

    /// The staged request's members, if one is staged.
    pub async fn staged(&self) -> Result<Option<Vec<Request>>, StemError> {
        let s = self.call(|p| async move { p.staged().await }).await?;
        Ok(members(&s))
    }

    /// The staged request, if any, or what is wrong with the request file when it is bad:
    /// a bad one stages nothing (the next boot refuses it), so it never stops the keeper.
    pub async fn staged_or_bad(&self) -> Result<StagedOnDisk, StemError> {
        match self.staged().await {
            Ok(Some(r)) => Ok(StagedOnDisk::Request(r)),
            Ok(None) => Ok(StagedOnDisk::Nothing),
            Err(StemError::Refused {
                kind: ErrorKind::BadRequestFile,
                message,
            }) => Ok(StagedOnDisk::Bad(message)),
            Err(e) => Err(e),
        }
    }

    /// Remove a bad request file; what was wrong with it, `None` when nothing bad was there.
    pub async fn discard_bad_request(&self) -> Result<Option<String>, StemError> {
        let d = self
            .call(|p| async move { p.discard_bad_request().await })
            .await?;
        Ok(d.into_iter().next())
    }

    /// The initrd's last outcome, if any.
    pub async fn outcome(&self) -> Result<Option<BootOutcome>, StemError> {
        let o = self.call(|p| async move { p.outcome().await }).await?;
        let Some(o) = o.first() else { return Ok(None) };
        // The same identity the layout gives an outcome: its finishing time, as stamped.
        let id = layout::Outcome::try_from(o)
            .map(|x| x.id())
            .unwrap_or_else(|_| o.finished_unix_micros.to_string());
        Ok(Some(BootOutcome {
            id,
            result: match o.result {
                stem1::OutcomeResultInfo::Done => layout::OutcomeResult::Done,
                stem1::OutcomeResultInfo::Refused => layout::OutcomeResult::Refused,
            },
            finished_micros: o.finished_unix_micros,
            request: o.request.iter().map(request).collect(),
            reason: o.reason.clone(),
            replaced: o
                .replaced
                .iter()
                .map(|r| (r.subvolume.clone(), r.kept.clone()))
                .collect(),
        }))
    }

    /// Delete a snapshot (unlinked now; committed and cleaned in the background). Not
    /// retried when the stem went away mid-call: the disk says whether it happened.
    pub async fn delete(&self, name: &str) -> Result<(), StemError> {
        let name = name.to_owned();
        self.call(|p| {
            let name = name.clone();
            async move { p.delete(&name).await }
        })
        .await
    }

    /// Which snapshot holds the disk: the snapshots `names` (empty: all), measured until
    /// `limit` (adr/0029).
    pub async fn space(
        &self,
        names: Vec<String>,
        limit: Duration,
    ) -> Result<stem1::SpaceReportInfo, StemError> {
        let limit_ms = u32::try_from(limit.as_millis()).unwrap_or(u32::MAX);
        self.call(|p| {
            let names = names.clone();
            async move { p.space(names, limit_ms).await }
        })
        .await
    }

    /// The free space, the stem's hard floor, and deletions the cleaner still holds.
    pub async fn free_space(&self) -> Result<stem1::SpaceInfo, StemError> {
        self.call(|p| async move { p.free_space().await }).await
    }
}

/// A copy the stem made and verified on a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub name: String,
    /// The copy's received UUID on the target (the snapshot's UUID).
    pub received_uuid: String,
    /// The snapshot it was sent against; empty for a full send.
    pub parent: String,
    pub bytes: u64,
    pub incremental: bool,
}

/// A verified copy a target holds, as the stem lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCopy {
    pub name: String,
    pub received_uuid: String,
}

/// A copy or fetch in flight, as the stem reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub target: String,
    pub name: String,
    /// `copy` or `fetch`.
    pub direction: String,
    pub bytes: u64,
    pub elapsed_ms: u64,
}

impl StemClient {
    /// Send the snapshot `name` to `target` (incremental when both sides hold a parent),
    /// verified before the stem answers. A call that went away mid-copy is settled from
    /// what the target holds.
    pub async fn copy_to(&self, name: &str, target: &str) -> Result<Copied, StemError> {
        let (name, target) = (name.to_owned(), target.to_owned());
        let c = self
            .call(|p| {
                let (name, target) = (name.clone(), target.clone());
                async move { p.copy_to(&name, &target).await }
            })
            .await?;
        Ok(Copied {
            name: c.name,
            received_uuid: c.received_uuid,
            parent: c.parent,
            bytes: c.bytes,
            incremental: c.incremental,
        })
    }

    /// The verified copies `target` holds.
    pub async fn copies_on(&self, target: &str) -> Result<Vec<HeldCopy>, StemError> {
        let target = target.to_owned();
        let held = self
            .call(|p| {
                let target = target.clone();
                async move { p.copies_on(&target).await }
            })
            .await?;
        Ok(held
            .into_iter()
            .map(|c| HeldCopy {
                name: c.name,
                received_uuid: c.received_uuid,
            })
            .collect())
    }

    /// Delete the copy `name` on `target`.
    pub async fn delete_copy(&self, target: &str, name: &str) -> Result<(), StemError> {
        let (target, name) = (target.to_owned(), name.to_owned());
        self.call(|p| {
            let (target, name) = (target.clone(), name.clone());
            async move { p.delete_copy(&target, &name).await }
        })
        .await
    }

    /// Receive the copy `name` from `target` into the local store, verified; the snapshot
    /// and the bytes of the stream received.
    pub async fn fetch_from(
        &self,
        target: &str,
        name: &str,
    ) -> Result<(DiskSnapshot, u64), StemError> {
        let (target, name) = (target.to_owned(), name.to_owned());
        let (s, bytes) = self
            .call(|p| {
                let (target, name) = (target.clone(), name.clone());
                async move { p.fetch_from(&target, &name).await }
            })
            .await?;
        Ok((member(&s), bytes))
    }

    /// Copies and fetches in flight.
    pub async fn copy_progress(&self) -> Result<Vec<InFlight>, StemError> {
        let all = self
            .call(|p| async move { p.copy_progress().await })
            .await?;
        Ok(all
            .into_iter()
            .map(|f| InFlight {
                target: f.target,
                name: f.name,
                direction: f.kind,
                bytes: f.bytes,
                elapsed_ms: f.elapsed_ms,
            })
            .collect())
    }
}

/// Opening snapshots read-only for people (adr/0019).
impl StemClient {
    /// Open `name` (its `part`, one directory name; empty: whole) for `for_uid`, the part
    /// owned by `owner_uid` in the snapshot; `(open, already_open)`.
    pub async fn open_snapshot(
        &self,
        name: &str,
        part: &[u8],
        owner_uid: u32,
        for_uid: u32,
    ) -> Result<(stem1::OpenInfo, bool), StemError> {
        let (name, part) = (name.to_owned(), part.to_vec());
        self.call(|p| {
            let (name, part) = (name.clone(), part.clone());
            async move { p.open_snapshot(&name, part, owner_uid, for_uid).await }
        })
        .await
    }

    /// Close `for_uid`'s open `name`; false when it was not open.
    pub async fn close_snapshot(&self, for_uid: u32, name: &str) -> Result<bool, StemError> {
        let name = name.to_owned();
        self.call(|p| {
            let name = name.clone();
            async move { p.close_snapshot(for_uid, &name).await }
        })
        .await
    }

    /// What changed since `name` in the home `part` (owned by `owner_uid` in the snapshot),
    /// below `below` inside it, as `owner_uid` with `gids` may see it: names in directories
    /// they may not list are counted in `paths_hidden`, not named.
    pub async fn changes_in_part(
        &self,
        name: &str,
        part: &[u8],
        owner_uid: u32,
        gids: &[u32],
        below: &[u8],
        limit: Duration,
    ) -> Result<stem1::ChangesInfo, StemError> {
        let (name, part, gids, below) = (
            name.to_owned(),
            part.to_vec(),
            gids.to_vec(),
            below.to_vec(),
        );
        let limit_ms = u32::try_from(limit.as_millis()).unwrap_or(u32::MAX);
        self.call(|p| {
            let (name, part, gids, below) =
                (name.clone(), part.clone(), gids.clone(), below.clone());
            async move {
                p.changes_in_part(&name, part, owner_uid, gids, below, limit_ms)
                    .await
            }
        })
        .await
    }

    /// Every open snapshot, everybody's.
    pub async fn open_snapshots(&self) -> Result<Vec<stem1::OpenInfo>, StemError> {
        self.call(|p| async move { p.open_snapshots().await }).await
    }

    /// Send the snapshot `name` (against `parent`, "" for a full send), framed, into the
    /// pipe whose write end is `into` (closed here once the call is sent); the stream's
    /// `(uuid, parent_uuid, bytes)`. Not retried: the end is handed over once. Called by
    /// name rather than through the proxy's method, which would keep the descriptor it is
    /// given until the answer comes (see `HandOver`).
    pub async fn send_sealed(
        &self,
        name: &str,
        parent: &str,
        into: crate::copier_client::HandOver,
    ) -> Result<(String, String, u64), StemError> {
        let _turn = self
            .in_flight
            .acquire()
            .await
            .map_err(|e| StemError::Bus(e.to_string()))?;
        let proxy = self.proxy().await?;
        let reply = proxy
            .inner()
            .call_method("SendSealed", &(name, parent, &into))
            .await
            .map_err(|e| classify(e.into()))?;
        let sent: stem1::SentSealed = reply
            .body()
            .deserialize()
            .map_err(|e| StemError::Bus(format!("the stem's answer does not read: {e}")))?;
        Ok((sent.uuid, sent.parent_uuid, sent.bytes))
    }

    /// Receive the framed chain read from the pipe whose read end is `from` (closed here
    /// once the call is sent) as the snapshot `name`, whose last stream must make `uuid`;
    /// the snapshot made and the bytes received.
    pub async fn receive_sealed(
        &self,
        name: &str,
        uuid: &str,
        from: crate::copier_client::HandOver,
    ) -> Result<(DiskSnapshot, u64), StemError> {
        let _turn = self
            .in_flight
            .acquire()
            .await
            .map_err(|e| StemError::Bus(e.to_string()))?;
        let proxy = self.proxy().await?;
        let reply = proxy
            .inner()
            .call_method("ReceiveSealed", &(name, uuid, &from))
            .await
            .map_err(|e| classify(e.into()))?;
        let (s, bytes): (stem1::SnapshotInfo, u64) = reply
            .body()
            .deserialize()
            .map_err(|e| StemError::Bus(format!("the stem's answer does not read: {e}")))?;
        Ok((member(&s), bytes))
    }
}

/// The stem's answer as the keeper's error to its caller: kind to kind, every kind named.
pub(crate) fn stem_error(e: StemError) -> KeeperError {
    match e {
        StemError::NotRunning | StemError::WentAway => KeeperError::StemNotRunning(e.to_string()),
        StemError::Refused { kind, ref message } => {
            let message = message.clone();
            match kind {
                ErrorKind::NoSuchSnapshot => {
                    KeeperError::NoSuchSnapshot(format!("{message}; see `tacid data list`"))
                }
                ErrorKind::NotRestorable
                | ErrorKind::NotSnapshottable
                | ErrorKind::NotReadOnly
                | ErrorKind::OfAnotherSubvolume
                | ErrorKind::NotInHistory => KeeperError::NotAllowedForSubvolume(message),
                ErrorKind::AnotherRestoreStaged => KeeperError::AnotherRestoreStaged(message),
                ErrorKind::Pinned => KeeperError::Protected(message),
                ErrorKind::BelowHardFloor | ErrorKind::NoSpace => KeeperError::NoSpace(message),
                ErrorKind::InvalidArgument => KeeperError::InvalidArgument(message),
                // Quotes the caller's name as given (capped): shown escaped, here, once.
                ErrorKind::NoSuchTarget => {
                    KeeperError::NoSuchTarget(layout::escape::escape(message.as_bytes()))
                }
                ErrorKind::TargetBusy => KeeperError::TargetBusy(message),
                ErrorKind::TargetUnreachable => KeeperError::TargetUnreachable(message),
                ErrorKind::HostKeyChanged => KeeperError::HostKeyChanged(message),
                ErrorKind::TargetNotBtrfs => KeeperError::TargetNotBtrfs(message),
                ErrorKind::TargetFull => KeeperError::TargetFull(message),
                ErrorKind::TransferFailed => KeeperError::TransferFailed(message),
                ErrorKind::AlreadyHere => KeeperError::AlreadyHere(message),
                ErrorKind::InUse => KeeperError::InUse(message),
                ErrorKind::NoSuchCopy => KeeperError::NoSuchSnapshot(format!(
                    "{message}; see `tacid data copies TARGET`"
                )),
                ErrorKind::AccessDenied
                | ErrorKind::StoreUnsafe
                | ErrorKind::LiveSubvolumeMissing
                | ErrorKind::BadRequestFile
                | ErrorKind::BadOutcomeFile
                | ErrorKind::PartRefused
                | ErrorKind::TooManyOpen
                | ErrorKind::AlreadyOpen
                | ErrorKind::NotPaused
                | ErrorKind::Failed => {
                    KeeperError::StemFailed(format!("{message} (stem error {kind})"))
                }
            }
        }
        StemError::Bus(_) | StemError::NotTheStem(_) => KeeperError::StemFailed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use zbus::Type as _;

    #[test]
    fn the_borrowed_list_row_is_the_stems_snapshot_info() {
        assert_eq!(
            <super::ListedRow<'static>>::SIGNATURE,
            <stem_interface::SnapshotInfo>::SIGNATURE
        );
    }
}
