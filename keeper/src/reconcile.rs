//! Journal against disk, after a start or a crash (docs/design.md section 5).
//!
//! The disk is the truth about existence, the journal about who and why. A plain function
//! of both, so every case is a unit test; the keeper applies the plan it returns.

use std::collections::{HashMap, HashSet};

use crate::journal::{Member, RequestRow, SnapshotRow, SnapshotState, State, Subject};

/// What to write to the journal so that it agrees with the disk.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// On disk, in no journal row: of unknown origin.
    pub unknown_origin: Vec<Member>,
    /// Journalled as present, no longer on disk.
    pub gone: Vec<String>,
    /// Pending sets every member of which is on disk: complete.
    pub complete: Vec<(i64, Vec<Member>)>,
    /// Pending sets with a member missing: failed, with the members that do exist.
    pub failed: Vec<(i64, Vec<Member>, Vec<String>)>,
}

/// Plan the reconciliation. `pending` are snapshot requests left pending (their `subject`
/// is the subvolumes, space-separated); `disk` is the stem's list.
///
/// A pending set's members are found by subvolume among the snapshots no row claims, taken
/// no earlier than the set was asked for, oldest first. The keeper takes one set at a time
/// (adr/0011), so after a crash at most one set was in flight and the match is unambiguous.
pub fn plan(journal: &[SnapshotRow], pending: &[RequestRow], disk: &[Member]) -> Plan {
    let mut out = Plan::default();
    let on_disk: HashSet<&str> = disk.iter().map(|m| m.name.as_str()).collect();
    let known: HashMap<&str, &SnapshotRow> = journal.iter().map(|r| (r.name.as_str(), r)).collect();
    for row in journal {
        if row.state == SnapshotState::Present && !on_disk.contains(row.name.as_str()) {
            out.gone.push(row.name.clone());
        }
    }
    let mut unclaimed: Vec<&Member> = disk
        .iter()
        .filter(|m| !known.contains_key(m.name.as_str()))
        .collect();
    unclaimed.sort_by_key(|m| (m.taken_micros, m.name.clone()));
    for set in pending.iter().filter(|r| r.state == State::Pending) {
        let mut members = Vec::new();
        let mut missing = Vec::new();
        let subs: Vec<String> = match set.parsed_subject() {
            Subject::Set(subs) => subs.iter().map(|s| s.to_string()).collect(),
            Subject::Nothing => Vec::new(),
            // Not the subvolumes of a set (no keeper writes that): none of it is found.
            other => vec![other.render()],
        };
        for sub in subs {
            let found = unclaimed
                .iter()
                .position(|m| m.of_subvolume == sub && named_time(m) >= set.asked_micros);
            match found {
                Some(i) => members.push(unclaimed.remove(i).clone()),
                None => missing.push(sub),
            }
        }
        if missing.is_empty() {
            out.complete.push((set.id, members));
        } else {
            out.failed.push((set.id, members, missing));
        }
    }
    out.unknown_origin = unclaimed.into_iter().cloned().collect();
    out
}

/// When the stem named the snapshot (its clock, to the microsecond, read after the keeper's
/// request arrived). Not the Btrfs creation time: that comes from the kernel's coarse clock
/// and can read a few milliseconds earlier than the request.
fn named_time(m: &Member) -> i64 {
    layout::SnapshotName::parse(&m.name)
        .map(|n| n.taken_unix_micros())
        .unwrap_or(m.taken_micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, of: &str, t: i64) -> Member {
        Member {
            name: name.into(),
            uuid: format!("uuid-{name}"),
            of_subvolume: of.into(),
            taken_micros: t,
        }
    }

    fn row(name: &str, st: &str) -> SnapshotRow {
        SnapshotRow {
            name: name.into(),
            uuid: String::new(),
            of_subvolume: "@home".into(),
            taken_micros: 0,
            request: None,
            state: SnapshotState::parse(st).unwrap(),
        }
    }

    fn pending(id: i64, subs: &str, asked: i64) -> RequestRow {
        RequestRow {
            id,
            asked_micros: asked,
            uid: 0,
            user_name: "root".into(),
            action: crate::journal::Action::Snapshot,
            subject: subs.into(),
            reason: String::new(),
            pre_switch: false,
            words_shown: String::new(),
            state: State::Pending,
            outcome: String::new(),
            calls: 1,
        }
    }

    #[test]
    fn unknown_and_gone() {
        let p = plan(
            &[row("a", "present"), row("b", "gone"), row("c", "present")],
            &[],
            &[m("a", "@home", 1), m("x", "@log", 2)],
        );
        assert_eq!(p.gone, ["c"]);
        assert_eq!(p.unknown_origin, [m("x", "@log", 2)]);
        assert!(p.complete.is_empty() && p.failed.is_empty());
    }

    #[test]
    fn a_pending_set_with_every_member_completes() {
        let disk = [
            m("h", "@home", 10),
            m("l", "@log", 11),
            m("old", "@home", 5),
        ];
        let p = plan(&[], &[pending(7, "@home @log", 9)], &disk);
        assert_eq!(
            p.complete,
            [(7, vec![m("h", "@home", 10), m("l", "@log", 11)])]
        );
        // Taken before the set was asked for: not its member.
        assert_eq!(p.unknown_origin, [m("old", "@home", 5)]);
    }

    #[test]
    fn a_pending_set_missing_a_member_fails_and_lists_what_exists() {
        let p = plan(
            &[],
            &[pending(3, "@persist @log @home", 1)],
            &[m("p", "@persist", 2)],
        );
        assert_eq!(
            p.failed,
            [(
                3,
                vec![m("p", "@persist", 2)],
                vec!["@log".to_owned(), "@home".to_owned()]
            )]
        );
        assert!(p.unknown_origin.is_empty());
    }

    #[test]
    fn members_are_matched_by_the_time_in_their_name_not_the_coarse_creation_time() {
        // Named 2026-12-01T14:02:00.000500Z, but Btrfs says it was made 4 ms earlier.
        let named = 1_796_133_720_000_500;
        let snap = m("@home.2026-12-01T140200.000500Z", "@home", named - 4_000);
        let p = plan(
            &[],
            &[pending(1, "@home", named - 100)],
            std::slice::from_ref(&snap),
        );
        assert_eq!(p.complete, [(1, vec![snap])]);
    }
}
