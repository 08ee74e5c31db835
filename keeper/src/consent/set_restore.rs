//! Restores of several snapshots at one boot, as one request, with one consent that names
//! every member: the members of a snapshot set a person chooses, or snapshots a person names
//! one by one (at most one of each subvolume: after a dead disk, each fetched from its own
//! target).
//!
//! A set is what one `Snapshot` request took: the journal's request id, as `tacid data list`
//! shows it. The person names it by that id or by any member's name, and may leave members
//! out (`only`). A fetched snapshot is in no set here (a fetch brings one snapshot back; the
//! journal that knew its set died with its disk): it is named by its name. The preview
//! counts each member put back, one after another in the caller's one turn (as a single
//! preview does, adr/0016: a looker's counts never make the stem commit), and says what
//! each loses, the total, and which members stay as they are.

use std::time::SystemTime;

use layout::switch::Switch;
use layout::{SnapshotName, SubvolumeName};

use super::{parse_snapshot, stem_error, test_pause, Consent, CONSENT_WINDOW};
use crate::authority::{Act, Authority};
use crate::caps;
use crate::journal::{Action, SnapshotState, State, Subject};
use crate::stem_client::DiskSnapshot;
use crate::wire::{
    ChangeCount, KeeperError, SetRestoreMember, SetRestorePreview, SetRestoreStaged, StagedMember,
};
use crate::words;
use layout::human::and_list;
use layout::human::{from_unix_micros, unix_micros};

/// Why a member of the set is not put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeftOut {
    /// The person asked for other members only.
    NotAsked,
    /// Its subvolume is never put back (`@nix`, when a set holds it).
    NeverPutBack,
    /// Its snapshot is gone from the disk.
    Deleted,
}

impl LeftOut {
    /// On the wire.
    fn code(self) -> &'static str {
        match self {
            LeftOut::NotAsked => "left-out",
            LeftOut::NeverPutBack => "never-put-back",
            LeftOut::Deleted => "deleted",
        }
    }

    /// In the words.
    fn words(self) -> &'static str {
        match self {
            LeftOut::NotAsked => "left out as asked",
            LeftOut::NeverPutBack => "never put back: not restorable",
            LeftOut::Deleted => "its snapshot was deleted",
        }
    }
}

/// A member of the set, and whether this restore puts it back.
#[derive(Debug, Clone)]
struct Planned {
    name: SnapshotName,
    taken_micros: i64,
    staged: bool,
    left_out: Option<LeftOut>,
    /// Named one by one: where it came from, in words (`fetched from cloud`, `set 12`).
    origin: String,
}

impl Planned {
    fn path(&self) -> &'static str {
        self.name.subvolume().display_path()
    }
}

/// A set, as the journal and the disk know it, and the members this restore puts back; or
/// the snapshots a person named one by one (`set` `None`).
#[derive(Debug)]
struct SetPlan {
    set: Option<i64>,
    /// Taken before a switch: the generations its reason names (none when it names none).
    before_switch: Option<Switch>,
    /// Those put back first, in the order the boot takes them; then the others.
    members: Vec<Planned>,
    /// How many snapshots the staged request names now.
    staged_now: usize,
}

impl SetPlan {
    fn put_back(&self) -> impl Iterator<Item = &Planned> {
        self.members.iter().filter(|m| m.left_out.is_none())
    }

    /// The snapshot names put back, as the stem is asked for them.
    fn names(&self) -> Vec<String> {
        self.put_back().map(|m| m.name.to_string()).collect()
    }

    /// The journal's subject for this restore's preview and consent.
    fn subject(&self) -> Subject {
        Subject::Restore {
            set: self.set,
            names: self.put_back().map(|m| m.name).collect(),
        }
    }

    /// Exactly these members are staged already.
    fn already_staged(&self) -> bool {
        self.put_back().all(|m| m.staged) && self.put_back().count() == self.staged_now
    }

    /// What the words say is put back.
    fn what(&self) -> words::PutBack<'_> {
        match self.set {
            Some(id) => words::PutBack::Set {
                id,
                before_switch: self.before_switch.as_ref(),
            },
            None => words::PutBack::Named,
        }
    }

    /// The arguments of `tacid data restore` that ask for this restore again.
    fn again(&self) -> String {
        match self.set {
            Some(id) => id.to_string(),
            None => self.names().join(" "),
        }
    }
}

/// What a person asks to put back.
#[derive(Debug, Clone, Copy)]
enum Asked<'a> {
    /// A set (its id, or a member's name) and the members asked for (none: every one).
    Set { set: &'a str, only: &'a [String] },
    /// Snapshots named one by one.
    Named(&'a [String]),
}

impl Asked<'_> {
    /// The caller's strings, checked against their caps before anything else looks at them.
    fn check(&self) -> Result<(), KeeperError> {
        match self {
            Asked::Set { set, only } => check_set_arguments(set, only).map(|_| ()),
            Asked::Named(names) => check_named(names).map(|_| ()),
        }
    }

    /// The key of a preview in the caller's turn.
    fn key(&self) -> String {
        match self {
            Asked::Set { set, only } => format!("set {set} only {}", only.join(",")),
            Asked::Named(names) => format!("named {}", names.join(" ")),
        }
    }

    /// What it names, for a refusal's journal row.
    fn subject(&self) -> String {
        match self {
            Asked::Set { set, .. } => (*set).to_owned(),
            Asked::Named(names) => names
                .iter()
                .map(|n| caps::name(n).into_owned())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// The snapshots named one by one, checked: each a snapshot name within its cap, each once,
/// at most one of each subvolume; in the order the boot takes them.
fn check_named(names: &[String]) -> Result<Vec<SnapshotName>, KeeperError> {
    if names.is_empty() {
        return Err(KeeperError::InvalidArgument(
            "name at least one snapshot to put back; see `tacid data list`".into(),
        ));
    }
    if names.len() > caps::max_only_names() {
        return Err(KeeperError::InvalidArgument(format!(
            "{} snapshots named to put back; a restore puts back at most one snapshot of each \
             of {}",
            names.len(),
            words::restorable_paths()
        )));
    }
    let mut parsed: Vec<SnapshotName> = Vec::with_capacity(names.len());
    for n in names {
        let name = parse_snapshot(n)?;
        if parsed.contains(&name) {
            return Err(KeeperError::InvalidArgument(format!(
                "{name} is named twice; name each snapshot once"
            )));
        }
        if let Some(other) = parsed.iter().find(|p| p.subvolume() == name.subvolume()) {
            return Err(KeeperError::InvalidArgument(format!(
                "{other} and {name} are both of {}; a restore puts each subvolume back to one \
                 snapshot: name one of them",
                name.subvolume().display_path()
            )));
        }
        parsed.push(name);
    }
    parsed.sort_by_key(|n| layout_rank(n.subvolume()));
    Ok(parsed)
}

/// Where a snapshot came from, in words, as the journal knows it: the set that took it, the
/// target it was fetched from, or neither.
fn origin_words(row: Option<&crate::journal::SnapshotRow>) -> String {
    match row.and_then(|r| r.request.as_ref()) {
        Some(q) if q.action == Action::Snapshot => format!("set {}", q.id),
        // The keeper wrote the reason of its own fetch: "fetched from TARGET".
        Some(q) if q.action == Action::Fetch && q.reason.starts_with("fetched from ") => {
            q.reason.clone()
        }
        Some(q) if q.action == Action::Fetch => "fetched".into(),
        Some(_) => "taken through the keeper".into(),
        None => "unknown origin: not taken through the keeper".into(),
    }
}

/// Where a subvolume stands in the layout's table: the order a request takes members in.
fn layout_rank(subvolume: SubvolumeName) -> usize {
    layout::SUBVOLUMES
        .iter()
        .position(|row| row.name == subvolume.as_str())
        .unwrap_or(usize::MAX)
}

/// How a person names a set, for errors.
const NAME_A_SET: &str = "name a set by its number, as `tacid data list` shows it (\"set 12\"), \
                          or by the name of any snapshot in it";

/// The caller's strings, checked against their caps before anything else looks at them
/// (adr/0016); the set's id when it is given as a number.
fn check_set_arguments(set: &str, only: &[String]) -> Result<Option<i64>, KeeperError> {
    if only.len() > caps::max_only_names() {
        return Err(KeeperError::InvalidArgument(format!(
            "{} members named to put back; a set has at most {}, each named once",
            only.len(),
            caps::max_only_names()
        )));
    }
    if let Some(long) = only.iter().find(|o| o.len() > caps::MAX_NAME_BYTES) {
        return Err(KeeperError::InvalidArgument(format!(
            "{:?} is not a member of a set: name members by mount point or subvolume, \
             e.g. /persist,/var/log",
            caps::name(long)
        )));
    }
    if set.is_empty() || set.len() > caps::MAX_NAME_BYTES {
        return Err(KeeperError::InvalidArgument(format!(
            "{:?} is not a set: {NAME_A_SET}",
            caps::name(set)
        )));
    }
    if set.bytes().all(|b| b.is_ascii_digit()) {
        return match set.parse::<i64>() {
            Ok(id) if id > 0 => Ok(Some(id)),
            _ => Err(KeeperError::NoSuchSnapshot(format!(
                "there is no snapshot set {set}; `tacid data list` shows each snapshot's set"
            ))),
        };
    }
    Ok(None)
}

impl Consent {
    /// The set named by `set` (its id, or a member's name) and the members `only` asks for.
    async fn resolve_set(
        &self,
        set: &str,
        only: &[String],
        may_confirm: bool,
    ) -> Result<SetPlan, KeeperError> {
        let by_id = check_set_arguments(set, only)?;
        // As list and status do: a keeper just started knows its sets only once reconciled.
        self.reconcile.ensure().await;
        let by_name = match by_id {
            Some(_) => None,
            None => Some(parse_snapshot(set)?),
        };
        let disk: Vec<DiskSnapshot> = {
            let _turn = self.h.looker_turn(may_confirm).await;
            self.h.stem.list().await.map_err(stem_error)?
        };
        let rows = self.h.journal(|j| j.snapshots()).await?;
        let of_a_set = |r: &crate::journal::SnapshotRow| {
            r.request
                .as_ref()
                .filter(|q| q.action == Action::Snapshot)
                .map(|q| q.id)
        };
        let id = match (by_id, by_name) {
            (Some(id), _) => id,
            (None, Some(name)) => {
                let text = name.to_string();
                let row = rows.iter().find(|r| r.name == text);
                match row.and_then(of_a_set) {
                    Some(id) => id,
                    None if disk.iter().any(|d| d.member.name == text) => {
                        // A fetched snapshot came back alone: its set was known only to the
                        // journal of the disk it was taken on.
                        let why = match origin_words(row) {
                            o if o.starts_with("fetched") => format!(
                                "it was {o}, alone (a set is what one snapshot request took \
                                 on this machine)"
                            ),
                            o => format!("it was not taken as one ({o})"),
                        };
                        return Err(KeeperError::InvalidArgument(format!(
                            "{text} is in no set: {why}; put it back alone with `tacid data \
                             restore {text}`, or together with other snapshots, one of each \
                             subvolume, with `tacid data restore {text} NAME...`"
                        )));
                    }
                    None => {
                        return Err(KeeperError::NoSuchSnapshot(format!(
                            "there is no snapshot named {text}; see `tacid data list`"
                        )))
                    }
                }
            }
            (None, None) => unreachable!("a set is named by its id or by a member"),
        };
        let in_set: Vec<&crate::journal::SnapshotRow> =
            rows.iter().filter(|r| of_a_set(r) == Some(id)).collect();
        let Some(first) = in_set.first() else {
            return Err(KeeperError::NoSuchSnapshot(format!(
                "there is no snapshot set {id}; `tacid data list` shows each snapshot's set"
            )));
        };
        // A set cut short (a power cut or an error while it was taken) or still being taken
        // is not the one cut it claims to be: its members are not put back as a set.
        if let Some(q) = first
            .request
            .as_ref()
            .filter(|q| q.state != State::Complete)
        {
            let there: Vec<&str> = in_set
                .iter()
                .filter(|r| r.state == SnapshotState::Present)
                .filter_map(|r| SubvolumeName::parse(&r.of_subvolume).ok())
                .map(|s| s.display_path())
                .collect();
            let there = match there.as_slice() {
                [] => "none of its snapshots exists".to_owned(),
                [one] => format!("of its snapshots, only that of {one} exists"),
                more => format!("of its snapshots, only those of {} exist", and_list(more)),
            };
            return Err(KeeperError::NotAllowedForSubvolume(format!(
                "set {id} is not whole: it is {} ({there}), so its members are not one cut; put \
                 a member back alone with `tacid data restore NAME`, or choose a whole set from \
                 `tacid data list`",
                q.state
            )));
        }
        // The keeper took the reason only in a form of the grammar (or as one of the
        // person's own, which names no generation).
        let before_switch = first
            .request
            .as_ref()
            .filter(|q| q.pre_switch)
            .map(|q| Switch::parse(&q.reason).ok().flatten().unwrap_or_default());
        let paths_of_set = || {
            let paths: Vec<&str> = in_set
                .iter()
                .filter_map(|r| SubvolumeName::parse(&r.of_subvolume).ok())
                .map(|s| s.display_path())
                .collect();
            and_list(&paths)
        };

        // The members asked for, by mount point, subvolume or snapshot name.
        let mut asked: Vec<SubvolumeName> = Vec::new();
        for o in only {
            let sub = match SubvolumeName::from_name_or_mount_point(o) {
                Ok(sub) => sub,
                Err(_) => match SnapshotName::parse(o) {
                    Ok(n) if in_set.iter().any(|r| r.name == o.as_str()) => n.subvolume(),
                    _ => {
                        return Err(KeeperError::InvalidArgument(format!(
                            "{:?} is not a member of set {id}: name members by mount point or \
                             subvolume, e.g. /persist,/var/log (set {id} has {})",
                            caps::name(o),
                            paths_of_set()
                        )))
                    }
                },
            };
            if !in_set.iter().any(|r| r.of_subvolume == sub.as_str()) {
                return Err(KeeperError::InvalidArgument(format!(
                    "set {id} has no snapshot of {} ({sub}); it has {}",
                    sub.display_path(),
                    paths_of_set()
                )));
            }
            if !asked.contains(&sub) {
                asked.push(sub);
            }
        }

        let mut members: Vec<Planned> = Vec::with_capacity(in_set.len());
        for r in &in_set {
            let Ok(name) = SnapshotName::parse(&r.name) else {
                continue;
            };
            let sub = name.subvolume();
            let on_disk = disk.iter().find(|d| d.member.name == r.name);
            let named = asked.contains(&sub);
            let left_out = if !asked.is_empty() && !named {
                Some(LeftOut::NotAsked)
            } else if !sub.subvolume().restorable {
                if named {
                    return Err(KeeperError::NotAllowedForSubvolume(format!(
                        "{} ({sub}) is never put back; leave it out of the members asked for",
                        sub.display_path()
                    )));
                }
                Some(LeftOut::NeverPutBack)
            } else if on_disk.is_none() {
                if named {
                    return Err(KeeperError::NoSuchSnapshot(format!(
                        "{name}, the snapshot of {} in set {id}, was deleted; see `tacid data list`",
                        sub.display_path()
                    )));
                }
                Some(LeftOut::Deleted)
            } else {
                None
            };
            members.push(Planned {
                name,
                taken_micros: on_disk.map_or(r.taken_micros, |d| d.member.taken_micros),
                staged: on_disk.is_some_and(|d| d.staged),
                left_out,
                origin: String::new(),
            });
        }
        members.sort_by_key(|m| (m.left_out.is_some(), layout_rank(m.name.subvolume())));
        let plan = SetPlan {
            set: Some(id),
            before_switch,
            members,
            staged_now: disk.iter().filter(|d| d.staged).count(),
        };
        if plan.put_back().next().is_none() {
            let why: Vec<String> = plan
                .members
                .iter()
                .map(|m| {
                    let why = m.left_out.map_or("", LeftOut::words);
                    format!("{} ({why})", m.path())
                })
                .collect();
            return Err(KeeperError::NotAllowedForSubvolume(format!(
                "nothing of set {id} can be put back: {}",
                why.join(", ")
            )));
        }
        Ok(plan)
    }

    /// The snapshots named one by one, as the disk and the journal know them: each on disk,
    /// of a restorable subvolume, described by where it came from.
    async fn resolve_named(
        &self,
        names: &[String],
        may_confirm: bool,
    ) -> Result<SetPlan, KeeperError> {
        let parsed = check_named(names)?;
        self.reconcile.ensure().await;
        let disk: Vec<DiskSnapshot> = {
            let _turn = self.h.looker_turn(may_confirm).await;
            self.h.stem.list().await.map_err(stem_error)?
        };
        let rows = self.h.journal(|j| j.snapshots()).await?;
        let mut members = Vec::with_capacity(parsed.len());
        for name in parsed {
            let text = name.to_string();
            let sub = name.subvolume();
            if !sub.subvolume().restorable {
                return Err(KeeperError::NotAllowedForSubvolume(format!(
                    "{} ({sub}) is never put back, so {text} cannot be; leave it out",
                    sub.display_path()
                )));
            }
            let Some(d) = disk.iter().find(|d| d.member.name == text) else {
                return Err(KeeperError::NoSuchSnapshot(format!(
                    "there is no snapshot named {text} here; see `tacid data list` (a copy on \
                     a target is brought back first with `tacid data fetch {text} --from \
                     TARGET`)"
                )));
            };
            members.push(Planned {
                name,
                taken_micros: d.member.taken_micros,
                staged: d.staged,
                left_out: None,
                origin: origin_words(rows.iter().rev().find(|r| r.name == text)),
            });
        }
        Ok(SetPlan {
            set: None,
            before_switch: None,
            members,
            staged_now: disk.iter().filter(|d| d.staged).count(),
        })
    }

    /// The plan of what was asked.
    async fn resolve(&self, asked: Asked<'_>, may_confirm: bool) -> Result<SetPlan, KeeperError> {
        match asked {
            Asked::Set { set, only } => self.resolve_set(set, only, may_confirm).await,
            Asked::Named(names) => self.resolve_named(names, may_confirm).await,
        }
    }

    /// What restoring the set `set` (its id or a member's name) would do, member by member
    /// and in all, in words. Changes nothing on disk; the words shown to somebody who may
    /// confirm are journalled, under one subject naming every member put back, so the
    /// confirmation can be checked. A caller's previews take turns, as single ones do.
    pub async fn set_restore_preview(
        &self,
        uid: u32,
        set: &str,
        only: &[String],
    ) -> Result<SetRestorePreview, KeeperError> {
        self.several_preview(uid, Asked::Set { set, only }).await
    }

    /// What putting back the snapshots `names` (at most one of each subvolume) at one boot
    /// would do, each and in all, in words; as [`Consent::set_restore_preview`] does for a
    /// set.
    pub async fn named_restore_preview(
        &self,
        uid: u32,
        names: &[String],
    ) -> Result<SetRestorePreview, KeeperError> {
        self.several_preview(uid, Asked::Named(names)).await
    }

    async fn several_preview(
        &self,
        uid: u32,
        asked: Asked<'_>,
    ) -> Result<SetRestorePreview, KeeperError> {
        asked.check()?;
        self.previews
            .in_turn(uid, &asked.key(), || self.several_preview_now(uid, asked))
            .await
    }

    /// One preview, in the caller's turn: each member put back counted in turn.
    async fn several_preview_now(
        &self,
        uid: u32,
        asked: Asked<'_>,
    ) -> Result<SetRestorePreview, KeeperError> {
        let may_confirm = self.h.may_change(uid);
        let plan = self.resolve(asked, may_confirm).await?;
        let mut counts: Vec<Option<words::ChangeCounts>> = Vec::new();
        for m in plan.put_back() {
            counts.push(self.preview_count(&m.name, may_confirm).await);
        }
        let now = SystemTime::now();
        let names: Vec<String> = plan.put_back().map(|m| m.name.to_string()).collect();
        let put_back: Vec<words::SetMember<'_>> = plan
            .put_back()
            .zip(&counts)
            .zip(&names)
            .map(|((m, c), name)| words::SetMember {
                of_path: m.path(),
                taken: from_unix_micros(m.taken_micros),
                counts: *c,
                named: plan
                    .set
                    .is_none()
                    .then_some((name.as_str(), m.origin.as_str())),
            })
            .collect();
        let left_out: Vec<(&str, &str)> = plan
            .members
            .iter()
            .filter_map(|m| m.left_out.map(|l| (m.path(), l.words())))
            .collect();
        let aside = self.aside().await;
        let text =
            words::set_restore_words(plan.what(), &put_back, &left_out, !may_confirm, now, aside);
        if may_confirm {
            let asker = Authority::asker(uid);
            let subject = plan.subject();
            // Not synced: a preview changes nothing, and words lost to a power cut are only
            // shown again (the consent that quotes them is synced) — adr/0011.
            let shown = text.clone();
            self.h
                .journal(move |j| {
                    j.unsynced(|j| {
                        j.request(&asker, Action::RestorePreview, subject)
                            .words_shown(&shown)
                            .state(State::Shown)
                            .outcome("shown; nothing changed")
                            .begin()
                    })
                })
                .await?;
        }
        let mut sum = words::ChangeCounts {
            complete: true,
            ..words::ChangeCounts::default()
        };
        let mut any_counted = false;
        let mut members = Vec::with_capacity(plan.members.len());
        let mut counted = counts.iter();
        for m in &plan.members {
            let changes = match (m.left_out, m.left_out.is_none().then(|| counted.next())) {
                (None, Some(Some(Some(c)))) => {
                    any_counted = true;
                    sum.add(c);
                    counted_change(c)
                }
                (None, _) => {
                    sum.complete = false;
                    ChangeCount::default()
                }
                (Some(_), _) => ChangeCount::default(),
            };
            let sub = m.name.subvolume();
            members.push(SetRestoreMember {
                snapshot: m.name.to_string(),
                of: sub.to_string(),
                of_path: sub.display_path().to_owned(),
                taken_micros: m.taken_micros,
                put_back: m.left_out.is_none(),
                left_out: m.left_out.map(LeftOut::code).unwrap_or_default().to_owned(),
                changes,
            });
        }
        // Nothing counted: not counted in all, and so not complete.
        let total = if any_counted {
            counted_change(&sum)
        } else {
            ChangeCount::default()
        };
        let cut_units = match plan.set {
            Some(set_id) => self.h.journal(move |j| j.cut_of(set_id)).await?,
            // Snapshots named together, not one set: no cut to speak of.
            None => String::new(),
        };
        Ok(SetRestorePreview {
            cut_units: layout::escape::escape(cut_units.as_bytes()),
            set_id: plan.set.unwrap_or(0),
            pre_switch: plan.before_switch.is_some(),
            members,
            total,
            as_of_last_commit: !may_confirm,
            words: text,
            already_staged: plan.already_staged(),
        })
    }

    /// Stage the restore of the set's members as one request, given the words the caller
    /// was shown for exactly those members; one consent row names every member.
    pub async fn set_restore_confirm(
        &self,
        uid: u32,
        set: &str,
        only: &[String],
        words_shown: &str,
    ) -> Result<SetRestoreStaged, KeeperError> {
        self.several_confirm(uid, Asked::Set { set, only }, words_shown)
            .await
    }

    /// Stage the restore of the snapshots `names` as one request, given the words the
    /// caller was shown for exactly those; one consent row names every one.
    pub async fn named_restore_confirm(
        &self,
        uid: u32,
        names: &[String],
        words_shown: &str,
    ) -> Result<SetRestoreStaged, KeeperError> {
        self.several_confirm(uid, Asked::Named(names), words_shown)
            .await
    }

    async fn several_confirm(
        &self,
        uid: u32,
        asked: Asked<'_>,
        words_shown: &str,
    ) -> Result<SetRestoreStaged, KeeperError> {
        let asker = Authority::asker(uid);
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            return Err(self
                .refusals
                .refuse(&asker, Action::Restore, &asked.subject(), words_shown, why)
                .await);
        }
        let plan = self.resolve(asked, true).await?;
        let subject = plan.subject();
        let since = unix_micros(SystemTime::now() - CONSENT_WINDOW);
        // Words longer than any the keeper shows were not shown; they are not compared.
        let shown = if words_shown.len() > caps::MAX_WORDS_BYTES {
            None
        } else {
            let subject = subject.clone();
            self.h
                .journal(move |j| j.words_shown(uid, &subject, since))
                .await?
        };
        let what = match plan.set {
            Some(id) => format!("set {id} ("),
            None => "the snapshots named (".to_owned(),
        };
        if shown.as_deref() != Some(words_shown) {
            let why = format!(
                "these are not the words the keeper showed you for putting back {what}{}) in \
                 the last {} minutes; run `tacid data restore {}` again with the same {}, \
                 read what it costs, then add --yes",
                and_list(&plan.put_back().map(Planned::path).collect::<Vec<_>>()),
                CONSENT_WINDOW.as_secs() / 60,
                plan.again(),
                if plan.set.is_some() {
                    "members"
                } else {
                    "snapshots"
                },
            );
            self.refusals
                .journal_refusal_built(
                    &asker,
                    Action::Restore,
                    &subject.render(),
                    words_shown,
                    &why,
                )
                .await;
            return Err(KeeperError::WordsNotShown(why));
        }
        let id = self
            .h
            .journal({
                let (asker, words_shown) = (asker.clone(), words_shown.to_owned());
                move |j| {
                    j.request(&asker, Action::Restore, subject)
                        .words_shown(&words_shown)
                        .begin()
                }
            })
            .await?;
        test_pause("restore-pending").await;
        match self.h.stem.stage_set_restore(&plan.names()).await {
            Ok((request, already, _stem_message)) => {
                test_pause("restore-staged").await;
                let members: Vec<StagedMember> = request
                    .iter()
                    .map(|r| StagedMember {
                        snapshot: r.snapshot.clone(),
                        of: r.subvolume.clone(),
                        of_path: crate::words::of_path(&r.subvolume).to_owned(),
                    })
                    .collect();
                let paths: Vec<&str> = members.iter().map(|m| m.of_path.as_str()).collect();
                let snapshots: Vec<&str> = members.iter().map(|m| m.snapshot.as_str()).collect();
                let (verb, them) = if members.len() == 1 {
                    ("goes", "it")
                } else {
                    ("go", "them")
                };
                let what = format!(
                    "{} {verb} back to {}{}{} at the next reboot",
                    and_list(&paths),
                    and_list(&snapshots),
                    plan.set
                        .map(|id| format!(" (set {id})"))
                        .unwrap_or_default(),
                    if members.len() == 1 {
                        ""
                    } else {
                        ", together,"
                    }
                );
                let (st, message) = if already {
                    (
                        State::AlreadyStaged,
                        format!("already staged: {what}; nothing changed"),
                    )
                } else {
                    (
                        State::Staged,
                        format!("staged: {what}; reboot to put {them} back"),
                    )
                };
                // Synced consent before, a durable request from the stem: the disk stands
                // in for this row after a power cut (adr/0011).
                self.h
                    .journal({
                        let message = message.clone();
                        move |j| j.unsynced(|j| j.finish(id, st, &message))
                    })
                    .await?;
                tracing::info!(uid, user = %asker.name, set = plan.set.unwrap_or(0), "{message}");
                Ok(SetRestoreStaged {
                    set_id: plan.set.unwrap_or(0),
                    members,
                    already_staged: already,
                    reboot_needed: true,
                    message,
                })
            }
            Err(e) => {
                self.reconcile.settle_after_stem_error(id, &e).await?;
                Err(stem_error(e))
            }
        }
    }
}

/// A count made, as the bus carries it.
fn counted_change(c: &words::ChangeCounts) -> ChangeCount {
    ChangeCount {
        counted: true,
        complete: c.complete,
        files_modified: c.files_modified,
        files_added: c.files_added,
        files_removed: c.files_removed,
        directories_added: c.directories_added,
        directories_removed: c.directories_removed,
        bytes_written: c.bytes_written,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_named_by_a_number_or_a_member_and_every_string_is_capped() {
        assert_eq!(check_set_arguments("12", &[]), Ok(Some(12)));
        assert_eq!(
            check_set_arguments("@home.2026-12-01T140200.123456Z", &[]),
            Ok(None)
        );
        for bad in ["0", "99999999999999999999999"] {
            assert!(
                matches!(
                    check_set_arguments(bad, &[]),
                    Err(KeeperError::NoSuchSnapshot(_))
                ),
                "{bad}"
            );
        }
        let huge = "1".repeat(100_000);
        match check_set_arguments(&huge, &[]) {
            Err(KeeperError::InvalidArgument(m)) => {
                assert!(m.len() < 400 && m.contains("(100000 bytes)"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let many = vec!["/home".to_owned(); caps::max_only_names() + 1];
        assert!(matches!(
            check_set_arguments("12", &many),
            Err(KeeperError::InvalidArgument(_))
        ));
        let long = vec!["x".repeat(100_000)];
        match check_set_arguments("12", &long) {
            Err(KeeperError::InvalidArgument(m)) => assert!(m.len() < 400, "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            check_set_arguments("", &[]),
            Err(KeeperError::InvalidArgument(_))
        ));
    }
}
