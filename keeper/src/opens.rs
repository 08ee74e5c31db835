//! Opening a snapshot read-only for a person, and what changed in their part of it
//! (adr/0019).
//!
//! The stem mounts; the keeper decides who may open what, and journals every open, every
//! close and every refusal:
//! - **Root and approvers** open any snapshot whole.
//! - **Anybody else** opens only their own home in a snapshot of `/home`: the keeper takes
//!   the caller's home from the user database (getpwuid_r of the uid the bus gave), which
//!   must be one directory directly under [`layout::HOMES_MOUNT_POINT`], and asks the stem
//!   for that one name, owned by the caller *in the snapshot*. Nobody names a part: a
//!   stranger cannot even say "bob's home".
//! - **Closes**: by the person (`Close`); by the stem when an open is idle, or when the
//!   stem stops or starts; by the stem when the keeper leaves the bus. The stem has no
//!   signals, so the keeper learns of the ones it did not ask for by listing the stem's
//!   opens ([`Opens::check_opens`]): at each `Open`, `Close` and `Opens`, and every
//!   [`CHECK_EVERY`] while it has journalled opens that are not closed. Rows left open by
//!   an earlier keeper are closed in the journal at the first check after a start.
//! - **Floods**: the stem caps opens per person and overall; the keeper also allows one
//!   caller at most [`OPENS_PER_WINDOW`] opens per [`OPENS_WINDOW`], so that open-close
//!   loops cannot write journal rows without bound; refusals are counted as adr/0016 says.
//!
//! A diff shows what `open` would let its caller read. Root and approvers: the stem's
//! ChangesSince with paths, narrowed here to the path asked for. Anybody else: the stem's
//! ChangesInPart for their home, which must be theirs in the snapshot (as for an open), and
//! the path asked for inside it; the stem names only what lies in directories they may
//! list (with their uid and groups) and counts the rest, unnamed. Nothing outside that
//! subtree is shown, not even how many paths changed elsewhere. Bytes written cannot be
//! narrowed (Btrfs counts them per subvolume), so a subtree's answer says it does not know.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use layout::escape::escape;
use layout::subtree::within;
use layout::{SnapshotName, HOMES_MOUNT_POINT};
use nix::unistd::{Uid, User};
use stem_interface::{ErrorKind, OpenInfo};

use crate::authority::Authority;
use crate::caps;
use crate::caps::parse_snapshot;
use crate::consent::{DETAILS_COUNT_LIMIT, PREVIEW_COUNT_LIMIT};
use crate::handles::Handles;
use crate::journal::{Action, Asker, Journal, JournalError, State, Subject};
use crate::refusals::Refusals;
use crate::stem_client::stem_error;
use crate::stem_client::StemError;
use crate::wire::{ChangedPath, ClosedOpen, KeeperError, Opened, PartChanges};
use layout::human::unix_micros;

/// How many opens one caller may ask for in [`OPENS_WINDOW`] (root: no limit).
pub const OPENS_PER_WINDOW: u32 = 20;
/// The window of [`OPENS_PER_WINDOW`].
pub const OPENS_WINDOW: Duration = Duration::from_secs(10 * 60);
/// How often the daemon asks the stem which opens are left, while it has journalled opens
/// that are not closed: an idle close is journalled at most this long after it happened.
pub const CHECK_EVERY: Duration = Duration::from_secs(30);
/// Diffs of people who may only look, counted at once over all of them: a diff needs the
/// paths, which only a count after a commit gives, so each one makes the stem commit.
pub const MAX_LOOKER_DIFFS: usize = 1;

/// Past this many callers remembered for their rate, the ones whose window is over go.
const REMEMBERED_CALLERS: usize = 1024;

/// An open this keeper journalled, until it is journalled closed.
#[derive(Debug, Clone)]
struct Journalled {
    row: i64,
    asker: Asker,
    path: String,
    idle_close_micros: i64,
    /// When it was recorded: a list of the stem's opens asked for before this is no proof
    /// that it is gone.
    recorded: Instant,
}

/// What the keeper keeps about opens and diffs.
#[derive(Debug)]
struct OpenState {
    journalled: Mutex<HashMap<(u32, String), Journalled>>,
    rates: Mutex<HashMap<u32, (Instant, u32)>>,
    diff_turns: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>,
    looker_diffs: tokio::sync::Semaphore,
    /// One check at a time; true once the rows an earlier keeper left open are settled.
    checking: tokio::sync::Mutex<bool>,
    /// Lines about opens that stay in use, which every check (and so anybody's `Opens`)
    /// would write again: within an allowance per uid and time (adr/0016).
    in_use_logs: Mutex<layout::allowance::LogAllowance<u32>>,
}

impl OpenState {
    fn new() -> OpenState {
        OpenState {
            journalled: Mutex::new(HashMap::new()),
            rates: Mutex::new(HashMap::new()),
            diff_turns: Mutex::new(HashMap::new()),
            looker_diffs: tokio::sync::Semaphore::new(MAX_LOOKER_DIFFS),
            checking: tokio::sync::Mutex::new(false),
            in_use_logs: Mutex::new(layout::allowance::LogAllowance::new(Instant::now())),
        }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, HashMap<(u32, String), Journalled>> {
        self.journalled.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count an open asked for by `uid`; `Err` with the words when past its allowance.
    fn allow_open(&self, uid: u32, now: Instant) -> Result<(), String> {
        if uid == 0 {
            return Ok(());
        }
        let mut rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        if rates.len() > REMEMBERED_CALLERS {
            rates.retain(|_, (start, _)| now.duration_since(*start) < OPENS_WINDOW);
        }
        let (start, count) = rates.entry(uid).or_insert((now, 0));
        if now.duration_since(*start) >= OPENS_WINDOW {
            (*start, *count) = (now, 0);
        }
        if *count >= OPENS_PER_WINDOW {
            return Err(format!(
                "you asked to open snapshots {OPENS_PER_WINDOW} times in {} minutes, the most \
                 the keeper allows one person; use what is open (`tacid data list` says where), \
                 or wait a few minutes",
                OPENS_WINDOW.as_secs() / 60
            ));
        }
        *count += 1;
        Ok(())
    }

    fn diff_turn(&self, uid: u32) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.diff_turns.lock().unwrap_or_else(|p| p.into_inner());
        if turns.len() > REMEMBERED_CALLERS {
            turns.retain(|_, t| Arc::strong_count(t) > 1);
        }
        turns.entry(uid).or_default().clone()
    }
}

/// The name of the caller's home directory under [`HOMES_MOUNT_POINT`], from the user
/// database; `Err` with the words for the person when there is none that can be opened.
pub fn home_part(uid: u32) -> Result<Vec<u8>, String> {
    let user = match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(u)) => u,
        Ok(None) => {
            return Err(format!(
                "uid {uid} has no entry in the user database, so no home of yours can be opened"
            ))
        }
        Err(e) => return Err(format!("looking up uid {uid} failed ({e}); refused")),
    };
    part_of_home(user.dir.as_os_str().as_bytes())
}

/// Every group of `uid` in the user database (its primary group too): what a person's diff
/// lists directories with.
pub fn groups_of(uid: u32) -> Result<Vec<u32>, String> {
    let user = match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(u)) => u,
        Ok(None) => return Err(format!("uid {uid} has no entry in the user database")),
        Err(e) => return Err(format!("looking up uid {uid} failed ({e})")),
    };
    let name = std::ffi::CString::new(user.name.as_bytes())
        .map_err(|_| format!("the user name of uid {uid} holds a NUL byte"))?;
    let groups = nix::unistd::getgrouplist(&name, user.gid)
        .map_err(|e| format!("looking up the groups of uid {uid} failed ({e})"))?;
    let mut gids: Vec<u32> = groups.iter().map(|g| g.as_raw()).collect();
    gids.push(user.gid.as_raw());
    gids.sort_unstable();
    gids.dedup();
    Ok(gids)
}

/// The one directory name of a home directly under [`HOMES_MOUNT_POINT`]: `/home/alice`
/// gives `alice`. Taken as a string, never resolved on the live system: what opens is that
/// name *in the snapshot*, which the stem opens without following a link.
pub fn part_of_home(dir: &[u8]) -> Result<Vec<u8>, String> {
    let shown = escape(&dir[..dir.len().min(caps::MAX_PATH_BYTES)]);
    let mut trimmed = dir;
    while trimmed.len() > 1 && trimmed.ends_with(b"/") {
        trimmed = &trimmed[..trimmed.len() - 1];
    }
    let prefix = format!("{HOMES_MOUNT_POINT}/");
    let part = trimmed.strip_prefix(prefix.as_bytes()).unwrap_or_default();
    if part.is_empty()
        || part.contains(&b'/')
        || part.contains(&0)
        || part == b"."
        || part == b".."
        || part.len() > 255
    {
        return Err(format!(
            "your home directory in the user database is {shown}, not one directory directly \
             under {HOMES_MOUNT_POINT}, so there is no part of a snapshot of {HOMES_MOUNT_POINT} \
             that is yours to open; ask root or an approver, who may open a snapshot whole"
        ));
    }
    Ok(part.to_vec())
}

/// `path` (bytes, absolute, where people see the subvolume mounted at `mount`) relative to
/// `mount`, normalised: empty and `.` components dropped, `..` refused.
pub fn relative_to(mount: &str, path: &[u8]) -> Result<Vec<u8>, String> {
    let shown = escape(path);
    if !path.starts_with(b"/") {
        return Err(format!(
            "{shown} is not an absolute path; name a path where people see it, under {mount} \
             (e.g. {mount}/...)"
        ));
    }
    if path.contains(&0) {
        return Err(format!("{shown} contains a NUL byte; no path does"));
    }
    let components = |p: &[u8]| -> Result<Vec<Vec<u8>>, String> {
        p.split(|b| *b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .map(|c| {
                if c == b".." {
                    Err(format!(
                        "{shown} contains `..`; name the path without it, under {mount}"
                    ))
                } else {
                    Ok(c.to_vec())
                }
            })
            .collect()
    };
    let base = components(mount.as_bytes())?;
    let all = components(path)?;
    match all.strip_prefix(base.as_slice()) {
        Some(rest) => Ok(rest.join(&b'/')),
        None => Err(format!(
            "{shown} is not under {mount}, where this snapshot's subvolume is mounted"
        )),
    }
}

/// Where people see `rel` (relative to the root of the subvolume mounted at `mount`),
/// escaped.
fn shown_path(mount: &str, rel: &[u8]) -> String {
    if rel.is_empty() {
        mount.to_owned()
    } else {
        format!("{}/{}", mount.trim_end_matches('/'), escape(rel))
    }
}

/// The stem's refusals of an open that are the person's to hear, not a failure.
fn open_refusal(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::PartRefused | ErrorKind::TooManyOpen | ErrorKind::AlreadyOpen
    )
}

/// The opens service: who may open what, and diffs narrowed to a person's part; owns what
/// the keeper keeps about opens and diffs.
#[derive(Debug)]
pub struct Opens {
    h: Handles,
    refusals: Arc<Refusals>,
    state: OpenState,
}

impl Opens {
    pub fn new(h: Handles, refusals: Arc<Refusals>) -> Opens {
        Opens {
            h,
            refusals,
            state: OpenState::new(),
        }
    }

    /// Open the snapshot `name` read-only for `uid`: whole for root and approvers, else only
    /// the caller's home in a snapshot of `/home`. Journalled; so is every refusal.
    pub async fn open(&self, uid: u32, name: &str) -> Result<Opened, KeeperError> {
        let asker = Authority::asker(uid);
        let snap = parse_snapshot(name)?;
        let sub = snap.subvolume();
        if let Err(why) = self.state.allow_open(uid, Instant::now()) {
            self.refusals
                .journal_refusal(&asker, Action::Open, name, "", &why)
                .await;
            return Err(KeeperError::OpenRefused(why));
        }
        let whole = self.h.may_change(uid);
        let part = if whole {
            Vec::new()
        } else {
            if sub != layout::homes_subvolume() {
                let why = format!(
                    "{name} is a snapshot of {}; you may open only your own home, in a snapshot \
                     of {HOMES_MOUNT_POINT}. Root and members of the group {:?} may open any \
                     snapshot whole",
                    sub.display_path(),
                    self.h.authority.approver_group()
                );
                return Err(self
                    .refusals
                    .refuse(&asker, Action::Open, name, "", why)
                    .await);
            }
            match home_part(uid) {
                Ok(p) => p,
                Err(why) => {
                    return Err(self
                        .refusals
                        .refuse(&asker, Action::Open, name, "", why)
                        .await)
                }
            }
        };
        let shown_part = if whole {
            sub.display_path().to_owned()
        } else {
            shown_path(HOMES_MOUNT_POINT, &part)
        };
        let opened = {
            let _turn = self.h.looker_turn(whole).await;
            self.h.stem.open_snapshot(name, &part, uid, uid).await
        };
        let (info, already) = match opened {
            Ok(o) => o,
            Err(StemError::Refused { kind, message }) if open_refusal(kind) => {
                let why = match kind {
                    ErrorKind::PartRefused => format!(
                        "your home ({shown_part}) in {name} is not a directory of yours there \
                         ({message}); nothing was opened. A home made, moved or given to you \
                         since the snapshot is not in it as yours"
                    ),
                    ErrorKind::TooManyOpen => format!(
                        "{message}; nothing was opened. Close one with `tacid data close NAME` \
                         (`tacid data list` says which are open), or wait: an unused open \
                         closes by itself after {}",
                        crate::words::count(
                            layout::defaults::OPEN_IDLE_SECS / 60,
                            "minute",
                            "minutes"
                        )
                    ),
                    // AlreadyOpen, the one other the guard lets through.
                    _ => format!(
                        "{message}; close it with `tacid data close {name}`, then open it again"
                    ),
                };
                self.refusals
                    .journal_refusal(&asker, Action::Open, name, "", &why)
                    .await;
                return Err(KeeperError::OpenRefused(why));
            }
            Err(e) => return Err(stem_error(e)),
        };
        let mut out = self.opened(uid, &snap, &info, already);
        if already {
            if let Some(j) = self.state.ledger().get_mut(&(uid, name.to_owned())) {
                j.idle_close_micros = info.idle_close_unix_micros;
            }
            tracing::info!(uid, user = %asker.name, snapshot = name, path = %info.path, "open again: its idle time starts again");
            return Ok(out);
        }
        out.message = format!(
            "opened {name} read-only at {}: {} as it was then, with the owners and modes it had \
             then; copy what you need out of it. Nothing is restored. It closes with `tacid data \
             close {name}`, by itself after {} unused, and at a reboot",
            info.path,
            out.shows,
            crate::words::count(
                ((info.idle_close_unix_micros - info.opened_unix_micros).max(0) / 60_000_000)
                    as u64,
                "minute",
                "minutes"
            )
        );
        let recorded = self
            .h
            .journal({
                let (asker, outcome) = (
                    asker.clone(),
                    format!("open at {} ({})", info.path, out.shows),
                );
                move |j| {
                    j.request(&asker, Action::Open, Subject::Snapshot(snap))
                        .state(State::Open)
                        .outcome(&outcome)
                        .begin()
                }
            })
            .await;
        let row = match recorded {
            Ok(row) => row,
            Err(e) => {
                // Nothing stays open that the journal does not record.
                if let Err(again) = self.h.stem.close_snapshot(uid, name).await {
                    tracing::error!(
                        uid,
                        snapshot = name,
                        "an open the journal could not record could not be closed: {again}"
                    );
                }
                return Err(e);
            }
        };
        self.state.ledger().insert(
            (uid, name.to_owned()),
            Journalled {
                row,
                asker: asker.clone(),
                path: info.path.clone(),
                idle_close_micros: info.idle_close_unix_micros,
                recorded: Instant::now(),
            },
        );
        tracing::info!(uid, user = %asker.name, snapshot = name, path = %info.path, whole, "{}", out.message);
        Ok(out)
    }

    /// The wire form of an open of `uid`'s.
    fn opened(&self, uid: u32, snap: &SnapshotName, info: &OpenInfo, already: bool) -> Opened {
        let sub = snap.subvolume();
        let whole = info.part.is_empty();
        let shows = if whole {
            sub.display_path().to_owned()
        } else {
            shown_path(HOMES_MOUNT_POINT, &info.part)
        };
        let your_home = if !whole {
            info.path.clone()
        } else if sub == layout::homes_subvolume() {
            home_part(uid)
                .map(|p| format!("{}/{}", info.path, escape(&p)))
                .unwrap_or_default()
        } else {
            String::new()
        };
        Opened {
            snapshot: info.name.clone(),
            of_path: sub.display_path().to_owned(),
            path: info.path.clone(),
            whole,
            shows,
            your_home,
            already_open: already,
            opened_micros: info.opened_unix_micros,
            idle_close_micros: info.idle_close_unix_micros,
            message: if already {
                format!(
                    "already open at {}; its idle time starts again, nothing else changed",
                    info.path
                )
            } else {
                String::new()
            },
        }
    }

    /// Close `uid`'s open snapshot `name`. Journalled when something closed.
    pub async fn close(&self, uid: u32, name: &str) -> Result<ClosedOpen, KeeperError> {
        let asker = Authority::asker(uid);
        parse_snapshot(name)?;
        let key = (uid, name.to_owned());
        let known = self.state.ledger().remove(&key);
        let closed = match self.h.stem.close_snapshot(uid, name).await {
            Ok(c) => c,
            Err(e) => {
                if let Some(j) = known {
                    self.state.ledger().insert(key, j);
                }
                return Err(stem_error(e));
            }
        };
        if !closed {
            // Journalled open, yet the stem had it no more: it closed it itself.
            if let Some(j) = known {
                self.journal_closed(uid, name, &j, &self.closed_by_stem(&j))
                    .await;
            }
            return Ok(ClosedOpen {
                snapshot: name.to_owned(),
                closed: false,
                message: format!("{name} was not open for you; nothing changed"),
            });
        }
        let message = format!(
            "closed {name}: {} is gone; nothing was restored",
            known
                .as_ref()
                .map(|j| j.path.clone())
                .unwrap_or_else(|| "its mount".into())
        );
        let how = format!("closed by {} (uid {uid})", escape(asker.name.as_bytes()));
        match known {
            Some(j) => self.journal_closed(uid, name, &j, &how).await,
            None => {
                // Opened by an earlier keeper is impossible (the stem closed those when it
                // left); the row, if any, is settled at the next check.
                let (asker, name, how) = (asker.clone(), name.to_owned(), how.clone());
                let _ = self
                    .h
                    .journal(move |j| begin_closed(j, &asker, &name, &how))
                    .await;
            }
        }
        tracing::info!(uid, user = %asker.name, snapshot = name, "{message}");
        Ok(ClosedOpen {
            snapshot: name.to_owned(),
            closed: true,
            message,
        })
    }

    /// Journal that the open `j` of `uid`'s `name` is closed, and `how`: a close row, and
    /// the open's row settled.
    async fn journal_closed(&self, uid: u32, name: &str, j: &Journalled, how: &str) {
        let asker = if j.asker.uid == uid {
            j.asker.clone()
        } else {
            Authority::asker(uid)
        };
        let (name_owned, closed, settled, row) = (
            name.to_owned(),
            format!("{} at {}", how, j.path),
            format!("was open at {}; {how}", j.path),
            j.row,
        );
        let done = self
            .h
            .journal(move |jn| {
                begin_closed(jn, &asker, &name_owned, &closed)?;
                jn.finish(row, State::Closed, &settled)
            })
            .await;
        match done {
            Ok(()) => tracing::info!(uid, snapshot = name, path = %j.path, "{how}"),
            Err(e) => tracing::error!(
                uid,
                snapshot = name,
                "could not journal a close ({how}): {}",
                e.message()
            ),
        }
    }

    /// Why the stem closed `j` without being asked to.
    fn closed_by_stem(&self, j: &Journalled) -> String {
        // The stem closes an idle open at its idle time, or later while it was in use.
        if unix_micros(SystemTime::now()) + 2_000_000 >= j.idle_close_micros {
            "closed (idle): nobody used it, and the stem closed it at its idle time".into()
        } else {
            "closed by the stem before its idle time (the stem stopped or started again: \
             nothing it opened outlives it)"
                .into()
        }
    }

    /// Learn which journalled opens the stem has closed by itself (idle, or a restart) and
    /// journal them; at the first check after a start, also the rows an earlier keeper left
    /// open (the stem closed those when that keeper left the bus). Costs nothing when there
    /// is nothing to settle.
    pub async fn check_opens(&self) {
        let Ok(mut earlier_settled) = self.state.checking.try_lock() else {
            return;
        };
        if *earlier_settled && self.state.ledger().is_empty() {
            return;
        }
        let asked = Instant::now();
        let listed = match self.h.stem.open_snapshots().await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!("checking opens: {e}");
                return;
            }
        };
        let live: HashSet<(u32, &str)> = listed
            .iter()
            .map(|o| (o.for_uid, o.name.as_str()))
            .collect();
        let gone: Vec<((u32, String), Journalled)> = {
            let mut ledger = self.state.ledger();
            for o in &listed {
                if let Some(j) = ledger.get_mut(&(o.for_uid, o.name.clone())) {
                    j.idle_close_micros = o.idle_close_unix_micros;
                }
            }
            let keys: Vec<(u32, String)> = ledger
                .iter()
                .filter(|(k, j)| j.recorded < asked && !live.contains(&(k.0, k.1.as_str())))
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter()
                .filter_map(|k| ledger.remove(&k).map(|j| (k, j)))
                .collect()
        };
        for ((uid, name), j) in gone {
            let how = self.closed_by_stem(&j);
            self.journal_closed(uid, &name, &j, &how).await;
        }
        if !*earlier_settled {
            let mine: HashSet<i64> = self.state.ledger().values().map(|j| j.row).collect();
            let rows = match self.h.journal(|j| j.open_rows()).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!("reading the journal's open rows: {}", e.message());
                    return;
                }
            };
            for r in rows.into_iter().filter(|r| !mine.contains(&r.id)) {
                let path = r
                    .outcome
                    .strip_prefix("open at ")
                    .and_then(|o| o.split(' ').next())
                    .unwrap_or("")
                    .to_owned();
                if live.contains(&(r.uid, r.subject.as_str())) {
                    // Still open: it was in use when that keeper left (adr/0021); this
                    // keeper follows it to its close.
                    let idle_close_micros = listed
                        .iter()
                        .find(|o| o.for_uid == r.uid && o.name == r.subject)
                        .map_or(0, |o| o.idle_close_unix_micros);
                    self.state.ledger().insert(
                        (r.uid, r.subject.clone()),
                        Journalled {
                            row: r.id,
                            asker: Asker {
                                uid: r.uid,
                                name: r.user_name.clone(),
                            },
                            path,
                            idle_close_micros,
                            recorded: asked,
                        },
                    );
                    continue;
                }
                let how = "closed when the keeper stopped: the stem closes every open of a \
                           keeper that leaves the bus";
                let j = Journalled {
                    row: r.id,
                    asker: Asker {
                        uid: r.uid,
                        name: r.user_name.clone(),
                    },
                    path,
                    idle_close_micros: 0,
                    recorded: asked,
                };
                self.journal_closed(r.uid, &r.subject, &j, how).await;
            }
            *earlier_settled = true;
        }
        self.close_whole_opens_of_non_approvers(&listed).await;
    }

    /// A whole snapshot is open only for root and approvers: the opens of somebody who is
    /// no longer one (taken out of the group since) are closed. One in use stays open (a
    /// detached mount would hold the snapshot unseen, adr/0021) and is closed at a later
    /// check, once let go.
    async fn close_whole_opens_of_non_approvers(&self, listed: &[OpenInfo]) {
        for o in listed
            .iter()
            .filter(|o| o.part.is_empty() && !self.h.may_change(o.for_uid))
        {
            let (uid, name) = (o.for_uid, o.name.as_str());
            match self.h.stem.close_snapshot(uid, name).await {
                Ok(closed) => {
                    let how = format!(
                        "closed by the keeper: uid {uid} is no longer root or an approver, who \
                         alone may open a snapshot whole"
                    );
                    let known = self.state.ledger().remove(&(uid, name.to_owned()));
                    match known {
                        Some(j) => self.journal_closed(uid, name, &j, &how).await,
                        None if closed => {
                            let asker = Authority::asker(uid);
                            let name = name.to_owned();
                            let _ = self
                                .h
                                .journal(move |j| begin_closed(j, &asker, &name, &how))
                                .await;
                        }
                        None => {}
                    }
                }
                Err(e) => {
                    let v = self
                        .state
                        .in_use_logs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .admit(&uid, Instant::now());
                    if v.log() {
                        tracing::warn!(
                            uid,
                            snapshot = name,
                            "uid {uid} is no longer root or an approver, but its whole open of \
                             {name} at {} is not closed: {e}; tried again at the next check{}",
                            o.path,
                            v.note()
                        );
                    }
                }
            }
        }
    }

    /// `uid`'s open snapshots (anybody may ask; each sees only their own).
    pub async fn opens(&self, uid: u32) -> Result<Vec<Opened>, KeeperError> {
        let _turn = self.h.looker_turn(self.h.may_change(uid)).await;
        self.check_opens().await;
        let listed = self.h.stem.open_snapshots().await.map_err(stem_error)?;
        Ok(listed
            .iter()
            .filter(|o| o.for_uid == uid)
            .filter_map(|o| {
                let snap = SnapshotName::parse(&o.name).ok()?;
                Some(self.opened(uid, &snap, o, false))
            })
            .collect())
    }

    /// What changed since the snapshot `name` in `uid`'s part of it, or below `path`.
    pub async fn diff(
        &self,
        uid: u32,
        name: &str,
        path: &[u8],
    ) -> Result<PartChanges, KeeperError> {
        let asker = Authority::asker(uid);
        if path.len() > caps::MAX_PATH_BYTES {
            return Err(KeeperError::InvalidArgument(format!(
                "a path is at most {} bytes (this one: {} bytes)",
                caps::MAX_PATH_BYTES,
                path.len()
            )));
        }
        let snap = parse_snapshot(name)?;
        let sub = snap.subvolume();
        let mount = sub.display_path();
        let may = self.h.may_change(uid);
        let shown_asked = escape(path);
        let base = if may {
            Vec::new()
        } else {
            if sub != layout::homes_subvolume() {
                let why = format!(
                    "{name} is a snapshot of {mount}; you may see what changed only in your own \
                     home, in a snapshot of {HOMES_MOUNT_POINT}. Root and members of the group \
                     {:?} may see any snapshot's changes",
                    self.h.authority.approver_group()
                );
                return Err(self
                    .refusals
                    .refuse(&asker, Action::Diff, name, &shown_asked, why)
                    .await);
            }
            match home_part(uid) {
                Ok(p) => p,
                Err(why) => {
                    return Err(self
                        .refusals
                        .refuse(&asker, Action::Diff, name, &shown_asked, why)
                        .await)
                }
            }
        };
        let subtree = if path.is_empty() {
            base.clone()
        } else {
            let rel = relative_to(mount, path).map_err(KeeperError::InvalidArgument)?;
            if !within(&rel, &base) {
                let why = format!(
                    "{shown_asked} is outside your home ({}); you may see what changed only in it",
                    shown_path(HOMES_MOUNT_POINT, &base)
                );
                return Err(self
                    .refusals
                    .refuse(&asker, Action::Diff, name, &shown_asked, why)
                    .await);
            }
            rel
        };
        let counted = if may {
            self.h
                .stem
                .changes_since(name, DETAILS_COUNT_LIMIT, true)
                .await
        } else {
            let gids = match groups_of(uid) {
                Ok(g) => g,
                Err(why) => {
                    let why = format!("{why}; refused");
                    return Err(self
                        .refusals
                        .refuse(&asker, Action::Diff, name, &shown_asked, why)
                        .await);
                }
            };
            // Inside the home: `subtree` is the home or below it (checked above).
            let below = subtree.get(base.len() + 1..).unwrap_or_default();
            // One at a time per caller, and at most MAX_LOOKER_DIFFS over all lookers.
            let turn = self.state.diff_turn(uid);
            let _mine = turn.lock().await;
            let _looker = self.h.looker_turn(false).await;
            let _count = self.state.looker_diffs.acquire().await;
            self.h
                .stem
                .changes_in_part(name, &base, uid, &gids, below, PREVIEW_COUNT_LIMIT)
                .await
        };
        let c = match counted {
            Ok(c) => c,
            Err(StemError::Refused {
                kind: ErrorKind::PartRefused,
                message,
            }) => {
                let why = format!(
                    "your home ({}) in {name} is not a directory of yours there ({message}); \
                     there is nothing of yours to compare. A home made, moved or given to you \
                     since the snapshot is not in it as yours",
                    shown_path(HOMES_MOUNT_POINT, &base)
                );
                return Err(self
                    .refusals
                    .refuse(&asker, Action::Diff, name, &shown_asked, why)
                    .await);
            }
            Err(e) => {
                // The stem logs its refusals of counts within one allowance for all callers
                // (it is not told who asks): said here per caller, so one caller's flood
                // does not silence another's.
                if let StemError::Refused { message, .. } = &e {
                    let v = crate::refusals::stem_refusals_logged("diff", uid);
                    if v.log() {
                        tracing::warn!(uid, user = %asker.name, snapshot = %caps::name(name), "diff refused by the stem: {}{}", layout::human::cap(message, caps::MAX_FAILURE_BYTES), v.note());
                    }
                }
                return Err(stem_error(e));
            }
        };
        let mut out = PartChanges {
            snapshot: name.to_owned(),
            of_path: mount.to_owned(),
            subtree: shown_path(mount, &subtree),
            at_least: !c.complete,
            files_added: 0,
            files_modified: 0,
            files_removed: 0,
            directories_added: 0,
            directories_modified: 0,
            directories_removed: 0,
            bytes_written: 0,
            bytes_known: false,
            paths: Vec::new(),
            paths_cut: c.paths_left_off > 0,
            paths_hidden: c.paths_hidden,
        };
        for p in c.paths.iter().filter(|p| within(&p.path, &subtree)) {
            let n = match (p.change.as_str(), p.directory) {
                ("added", false) => &mut out.files_added,
                ("modified", false) => &mut out.files_modified,
                ("removed", false) => &mut out.files_removed,
                ("added", true) => &mut out.directories_added,
                ("modified", true) => &mut out.directories_modified,
                ("removed", true) => &mut out.directories_removed,
                _ => continue,
            };
            *n += 1;
            out.paths.push(ChangedPath {
                change: p.change.clone(),
                directory: p.directory,
                path: shown_path(mount, &p.path),
            });
        }
        if subtree.is_empty() {
            // The whole subvolume (root or an approver): the stem's own counts, exact even
            // when the list of paths was cut.
            out.files_added = c.files_added;
            out.files_modified = c.files_modified;
            out.files_removed = c.files_removed;
            out.directories_added = c.directories_added;
            out.directories_modified = c.directories_modified;
            out.directories_removed = c.directories_removed;
            out.bytes_written = c.bytes_written;
            out.bytes_known = true;
        } else {
            out.at_least |= out.paths_cut;
        }
        if may {
            // Paths name other people's files: each listing to an approver is journalled,
            // as restore details are. A person's own part is theirs to see, unjournalled.
            let summary = format!(
                "listed {} changed paths below {}{}",
                out.paths.len(),
                out.subtree,
                if out.at_least { " (at least)" } else { "" }
            );
            let (asker, shown) = (
                asker.clone(),
                layout::human::cap(&summary, caps::MAX_WORDS_BYTES).into_owned(),
            );
            self.h
                .journal(move |j| {
                    j.request(&asker, Action::Diff, Subject::Snapshot(snap))
                        .words_shown(&shown)
                        .state(State::Shown)
                        .outcome("shown; nothing changed")
                        .begin()
                })
                .await?;
        }
        Ok(out)
    }
}

/// A close of `name` by `asker`, done already (`outcome` says how): its row.
fn begin_closed(
    j: &Journal,
    asker: &Asker,
    name: &str,
    outcome: &str,
) -> Result<i64, JournalError> {
    j.request(asker, Action::Close, Subject::parse(Action::Close, name))
        .state(State::Closed)
        .outcome(outcome)
        .begin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_is_one_directory_directly_under_the_homes() {
        assert_eq!(part_of_home(b"/home/alice").unwrap(), b"alice");
        assert_eq!(part_of_home(b"/home/alice//").unwrap(), b"alice");
        assert_eq!(part_of_home(b"/home/\xffname").unwrap(), b"\xffname");
        for bad in [
            &b"/home"[..],
            b"/home/",
            b"/",
            b"",
            b"/home/a/b",
            b"/home/..",
            b"/home/.",
            b"/var/lib/alice",
            b"home/alice",
            b"/homes/alice",
            b"/home/a\0b",
        ] {
            let e = part_of_home(bad).unwrap_err();
            assert!(e.contains("not one directory directly under /home"), "{e}");
        }
        let long = [b"/home/".as_slice(), &[b'a'; 256]].concat();
        assert!(part_of_home(&long).is_err());
        // What a hostile database could hold is shown escaped, and capped.
        let e = part_of_home(b"/srv/\x1b[2J").unwrap_err();
        assert!(e.contains("\\x1B[2J") && !e.contains('\x1b'), "{e}");
    }

    #[test]
    fn a_path_is_taken_relative_to_the_mount_point_without_dot_dot() {
        assert_eq!(relative_to("/home", b"/home").unwrap(), b"");
        assert_eq!(relative_to("/home", b"/home/").unwrap(), b"");
        assert_eq!(relative_to("/home", b"/home/alice").unwrap(), b"alice");
        assert_eq!(
            relative_to("/home", b"//home/./alice//docs/").unwrap(),
            b"alice/docs"
        );
        assert_eq!(relative_to("/var/log", b"/var/log/app").unwrap(), b"app");
        assert!(relative_to("/home", b"/home/alice/../bob").is_err());
        assert!(relative_to("/home", b"/homes/alice").is_err());
        assert!(relative_to("/home", b"/persist").is_err());
        assert!(relative_to("/home", b"alice").is_err());
        assert!(relative_to("/home", b"/home/a\0").is_err());
    }

    #[test]
    fn a_caller_opens_at_most_so_many_times_a_window() {
        let s = OpenState::new();
        let t = Instant::now();
        for _ in 0..OPENS_PER_WINDOW {
            assert!(s.allow_open(1000, t).is_ok());
        }
        let e = s.allow_open(1000, t).unwrap_err();
        assert!(e.contains("wait a few minutes"), "{e}");
        assert!(
            s.allow_open(1001, t).is_ok(),
            "another caller has their own"
        );
        assert!(s.allow_open(0, t).is_ok(), "root is not counted");
        assert!(s.allow_open(1000, t + OPENS_WINDOW).is_ok(), "a new window");
    }
}
