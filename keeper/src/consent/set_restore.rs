//! Restores of a snapshot set: the members a person chooses put back together,
//! at one boot, as one request, with one consent that names every member.
//!
//! A set is what one `Snapshot` request took: the journal's request id, as `tacid data list`
//! shows it. The person names it by that id or by any member's name, and may leave members
//! out (`only`). The preview counts each member put back, one after another in the caller's
//! one turn (as a single preview does, adr/0016: a looker's counts never make the stem
//! commit), and says what each loses, the total, and which members stay as they are.

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
}

impl Planned {
    fn path(&self) -> &'static str {
        self.name.subvolume().display_path()
    }
}

/// A set, as the journal and the disk know it, and the members this restore puts back.
#[derive(Debug)]
struct SetPlan {
    id: i64,
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
            set: Some(self.id),
            names: self.put_back().map(|m| m.name).collect(),
        }
    }

    /// Exactly these members are staged already.
    fn already_staged(&self) -> bool {
        self.put_back().all(|m| m.staged) && self.put_back().count() == self.staged_now
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
                match rows.iter().find(|r| r.name == text).and_then(of_a_set) {
                    Some(id) => id,
                    None if disk.iter().any(|d| d.member.name == text) => {
                        return Err(KeeperError::InvalidArgument(format!(
                            "{text} is in no set: it was not taken through the keeper \
                             (unknown origin); put it back alone with `tacid data restore {text}`"
                        )))
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
            });
        }
        members.sort_by_key(|m| (m.left_out.is_some(), layout_rank(m.name.subvolume())));
        let plan = SetPlan {
            id,
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
        check_set_arguments(set, only)?;
        let key = format!("set {set} only {}", only.join(","));
        self.previews
            .in_turn(uid, &key, || self.set_preview_now(uid, set, only))
            .await
    }

    /// One set preview, in the caller's turn: each member put back counted in turn.
    async fn set_preview_now(
        &self,
        uid: u32,
        set: &str,
        only: &[String],
    ) -> Result<SetRestorePreview, KeeperError> {
        let may_confirm = self.h.may_change(uid);
        let plan = self.resolve_set(set, only, may_confirm).await?;
        let mut counts: Vec<Option<words::ChangeCounts>> = Vec::new();
        for m in plan.put_back() {
            counts.push(self.preview_count(&m.name, may_confirm).await);
        }
        let now = SystemTime::now();
        let put_back: Vec<words::SetMember<'_>> = plan
            .put_back()
            .zip(&counts)
            .map(|(m, c)| words::SetMember {
                of_path: m.path(),
                taken: from_unix_micros(m.taken_micros),
                counts: *c,
            })
            .collect();
        let left_out: Vec<(&str, &str)> = plan
            .members
            .iter()
            .filter_map(|m| m.left_out.map(|l| (m.path(), l.words())))
            .collect();
        let text = words::set_restore_words(
            plan.id,
            plan.before_switch.as_ref(),
            &put_back,
            &left_out,
            !may_confirm,
            now,
        );
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
        let set_id = plan.id;
        let cut_units = self.h.journal(move |j| j.cut_of(set_id)).await?;
        Ok(SetRestorePreview {
            cut_units: layout::escape::escape(cut_units.as_bytes()),
            set_id: plan.id,
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
        let asker = Authority::asker(uid);
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            return Err(self
                .refusals
                .refuse(&asker, Action::Restore, set, words_shown, why)
                .await);
        }
        let plan = self.resolve_set(set, only, true).await?;
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
        if shown.as_deref() != Some(words_shown) {
            let why = format!(
                "these are not the words the keeper showed you for putting back set {} ({}) in \
                 the last {} minutes; run `tacid data restore {}` again with the same members, \
                 read what it costs, then add --yes",
                plan.id,
                and_list(&plan.put_back().map(Planned::path).collect::<Vec<_>>()),
                CONSENT_WINDOW.as_secs() / 60,
                plan.id
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
                    "{} {verb} back to {} (set {}){} at the next reboot",
                    and_list(&paths),
                    and_list(&snapshots),
                    plan.id,
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
                tracing::info!(uid, user = %asker.name, set = plan.id, "{message}");
                Ok(SetRestoreStaged {
                    set_id: plan.id,
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
