//! Sentences for people (docs/design.md section 6). Every time is shown in UTC and says so.

use std::fmt::Write as _;
use std::time::SystemTime;

use keeper_interface::words::{ago, count, exact_time, human_time, utc_year, write_taken};
use keeper_interface::{
    ChangedPath, CopyInFlight, CopyOfRow, CopyReport, Opened, PartChanges, PruneEntry, PruneReport,
    RestoreDetails, RestorePreview, RestoreStaged, SetRestorePreview, SetRestoreStaged,
    SnapshotRow, SnapshotSet, Status, TargetCopies, VerifyReport,
};
use layout::human::{and_list, bytes, from_unix_micros};
use layout::switch::Switch;

const NO_BACKUP: &str =
    "A snapshot lives on the same disk as what it is of: it is no backup against a dead disk; \
     copy it off the disk with `tacid data copy`.";
const NOT_THE_WORLD: &str =
    "A restore puts back files, not the world outside: mail sent stays sent.";

/// Why a snapshot exists, written straight into `out`.
fn write_why(
    out: &mut impl std::io::Write,
    e: &SnapshotRow<'_>,
    now: SystemTime,
) -> std::io::Result<()> {
    if e.origin == "replaced" {
        // What a restore replaced, kept by the boot (adr/0027): an undo is a restore of it.
        return write!(
            out,
            "what {} held before the restore of {} (back to {}), kept until {}; undo: \
             `tacid data restore {}`",
            e.of_path,
            human_time(from_unix_micros(e.replaced_micros), now),
            if e.replaced_by_restore_of.is_empty() {
                "?"
            } else {
                e.replaced_by_restore_of
            },
            human_time(from_unix_micros(e.kept_until_micros), now),
            e.name
        );
    }
    if e.origin == "unknown-origin" {
        return out.write_all(b"unknown origin: on disk, but not taken through the keeper");
    }
    if e.origin == "fetched" {
        // Its reason is the keeper's own: "fetched from TARGET".
        out.write_all(e.reason.as_bytes())?;
        out.write_all(b", asked by ")?;
        out.write_all(e.asked_by.as_bytes())?;
        if e.asked_by_uid != u32::MAX {
            write!(out, " (uid {})", e.asked_by_uid)?;
        }
        return Ok(());
    }
    let switch = switch_of(e);
    match &switch {
        // The reason is the switch: said once, in its own words.
        Some(s) if s.from.is_some() || s.to.is_some() => write!(out, "{s}, ")?,
        _ if e.pre_switch => out.write_all(b"before switching configuration, ")?,
        _ => {}
    }
    out.write_all(b"asked by ")?;
    out.write_all(e.asked_by.as_bytes())?;
    if e.asked_by_uid != u32::MAX {
        write!(out, " (uid {})", e.asked_by_uid)?;
    }
    if !e.reason.is_empty() && switch.is_none() {
        out.write_all(b": ")?;
        out.write_all(e.reason.as_bytes())?;
    }
    Ok(())
}

/// The switch a pre-switch snapshot was taken before, from its reason.
fn switch_of(e: &SnapshotRow<'_>) -> Option<Switch> {
    crate::rows::switch_of(e.pre_switch, e.reason)
}

/// `tacid data list`, written into `out` (one buffered stdout): every field is written in
/// place, nothing is allocated per line. The strings are already in the visible form of
/// adr/0017 (the keeper escapes them once); they are written as they are.
pub fn write_list(
    out: &mut impl std::io::Write,
    rows: &[SnapshotRow<'_>],
    copies: &[CopyOfRow<'_>],
    opens: &[Opened],
    now: SystemTime,
) -> std::io::Result<()> {
    if rows.is_empty() {
        return writeln!(
            out,
            "No snapshots yet. Take one with `tacid data snapshot`."
        );
    }
    let n = rows.len();
    writeln!(
        out,
        "{n} snapshot{}, newest first. {NO_BACKUP}\n",
        if n == 1 { "" } else { "s" }
    )?;
    let staged = rows.iter().filter(|e| e.pinned).count();
    let now_year = utc_year(now);
    let mut at = 0;
    for (i, e) in rows.iter().enumerate() {
        out.write_all(e.name.as_bytes())?;
        out.write_all(b"  of ")?;
        out.write_all(e.of_path.as_bytes())?;
        out.write_all(b"\n    taken  ")?;
        write_taken(out, from_unix_micros(e.taken_micros), now, now_year)?;
        out.write_all(b"\n    why    ")?;
        write_why(out, e, now)?;
        out.write_all(b"\n")?;
        if e.set_id > 0 {
            writeln!(out, "    set    {}", e.set_id)?;
        }
        if !e.cut_units.is_empty() {
            writeln!(
                out,
                "    cut    a consistent cut: {} paused while the set was taken",
                e.cut_units.replace(' ', ", ")
            )?;
        }
        let held = crate::rows::copies_of(copies, &mut at, i);
        if let Some((first, rest)) = held.split_first() {
            write!(out, "    copies {}", first.target)?;
            for c in rest {
                write!(out, ", {}", c.target)?;
            }
            out.write_all(b"\n")?;
            for c in held.iter().filter(|c| !c.verify_failed.is_empty()) {
                writeln!(
                    out,
                    "    FAILED verification on {}: {} (`tacid data copy --to {}` makes a new copy)",
                    c.target, c.verify_failed, c.target
                )?;
            }
            let mut parents = held.iter().filter(|c| c.last_common_parent);
            if let Some(first) = parents.next() {
                write!(out, "    kept   last common parent with {}", first.target)?;
                for c in parents {
                    write!(out, ", {}", c.target)?;
                }
                out.write_all(b" (the next copy is sent against it; retention keeps it)\n")?;
            }
        }
        // A person has a few opens at most: a scan of them per row costs nothing.
        if let Some(o) = opens.iter().find(|o| o.snapshot == e.name) {
            writeln!(
                out,
                "    OPEN   for you, read-only, at {}{} (`tacid data close {}` closes it)",
                o.path,
                if o.whole { "" } else { " (your home)" },
                e.name
            )?;
        }
        if e.pinned && staged > 1 {
            let others = staged - 1;
            writeln!(
                out,
                "    STAGED the next reboot puts {} back to this snapshot, together with {others} other{} (`tacid data cancel` withdraws all of them)",
                e.of_path,
                if others == 1 { "" } else { "s" }
            )?;
        } else if e.pinned {
            writeln!(
                out,
                "    STAGED the next reboot puts {} back to this snapshot (`tacid data cancel` withdraws it)",
                e.of_path
            )?;
        }
    }
    Ok(())
}

/// `tacid data snapshot`.
pub fn snapshot_set(set: &SnapshotSet) -> String {
    let mut out = String::new();
    let n = set.snapshots.len();
    let _ = writeln!(
        out,
        "Took {n} snapshot{} (set {}), each committed to disk:",
        if n == 1 { "" } else { "s" },
        set.set_id
    );
    for e in &set.snapshots {
        let _ = writeln!(out, "  {}  of {}", e.name, e.of_path);
    }
    if let Some(cut) = set.snapshots.first().filter(|e| !e.cut_units.is_empty()) {
        let _ = writeln!(
            out,
            "A consistent cut: {} paused while every member was taken, then resumed.",
            cut.cut_units.replace(' ', ", ")
        );
    }
    for h in &set.hooks {
        if h.ok {
            let _ = writeln!(out, "  hook {}", h.says);
        } else {
            let _ = writeln!(
                out,
                "Warning: the set stands, but the hook {} (see `journalctl -u tacid-stem`).",
                h.says
            );
        }
    }
    let _ = writeln!(out, "{NO_BACKUP}");
    out
}

/// `tacid data restore NAME` without `--yes`.
pub fn preview(p: &RestorePreview) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", p.words);
    staged_or_how_to_stage(&mut out, p.already_staged, &p.of_path, &p.snapshot);
    out
}

/// A preview's last lines: that it is already staged (of `paths`), or that nothing has
/// changed and the command that stages it (`tacid data restore ARGS --yes`).
fn staged_or_how_to_stage(out: &mut String, already_staged: bool, paths: &str, args: &str) {
    if already_staged {
        let _ = writeln!(
            out,
            "This restore is already staged; reboot to put {paths} back, or `tacid data cancel`."
        );
    } else {
        let _ = writeln!(out, "{NOT_THE_WORLD}");
        let _ = writeln!(
            out,
            "Nothing has changed. To stage it: tacid data restore {args} --yes"
        );
    }
}

/// The changed paths under one heading per kind of change (in the order given), a
/// directory marked with a trailing `/`; a kind with no paths gets no heading.
fn write_paths_by_change(out: &mut String, paths: &[ChangedPath], headings: [(&str, &str); 3]) {
    for (change, heading) in headings {
        let mut paths = paths.iter().filter(|p| p.change == change).peekable();
        if paths.peek().is_none() {
            continue;
        }
        let _ = writeln!(out, "{heading}");
        for p in paths {
            let slash = if p.directory && !p.path.ends_with('/') {
                "/"
            } else {
                ""
            };
            let _ = writeln!(out, "  {}{slash}", p.path);
        }
    }
}

/// `tacid data restore NAME --details`: the changed paths, grouped by what a restore does
/// to them.
pub fn details(d: &RestoreDetails) -> String {
    let mut out = String::new();
    write_paths_by_change(
        &mut out,
        &d.paths,
        [
            ("added", "Deleted by the restore (added since):"),
            ("modified", "Put back as they were (changed since):"),
            ("removed", "Brought back (removed since):"),
        ],
    );
    if d.paths.is_empty() {
        let _ = writeln!(out, "Nothing in {} changed since then.", d.of_path);
    }
    if d.paths_left_off > 0 {
        let _ = writeln!(out, "... and {} more paths not listed.", d.paths_left_off);
    }
    if !d.complete {
        let _ = writeln!(
            out,
            "The count stopped at its time limit: there may be more changes than listed."
        );
    }
    out
}

/// `tacid data restore NAME --yes`.
pub fn staged(p: &RestorePreview, s: &RestoreStaged) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", p.words);
    if s.already_staged {
        let _ = writeln!(
            out,
            "Already staged; nothing changed. Reboot to put {} back.",
            s.of_path
        );
    } else {
        let _ = writeln!(
            out,
            "Staged. Nothing is put back yet: reboot to put {} back to {}. Until then, `tacid data cancel` withdraws it.",
            s.of_path, s.snapshot
        );
    }
    let _ = writeln!(out, "{NOT_THE_WORLD}");
    out
}

/// `tacid data restore SET` without `--yes`.
pub fn set_preview(p: &SetRestorePreview) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", p.words);
    // Snapshots named one by one are no set: whether they are one moment is not known.
    if p.set_id != 0 {
        let _ = writeln!(out, "{}", cut_sentence(&p.cut_units));
    }
    let put_back: Vec<&str> = p
        .members
        .iter()
        .filter(|m| m.put_back)
        .map(|m| m.of_path.as_str())
        .collect();
    let only = if p.members.iter().any(|m| m.left_out == "left-out") {
        format!(" --only {}", put_back.join(","))
    } else {
        String::new()
    };
    // Named one by one (no set): the same names again.
    let args = if p.set_id == 0 {
        p.members
            .iter()
            .filter(|m| m.put_back)
            .map(|m| m.snapshot.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        format!("{}{only}", p.set_id)
    };
    staged_or_how_to_stage(&mut out, p.already_staged, &and_list(&put_back), &args);
    out
}

/// Whether a set is one moment of the units paused while it was taken.
fn cut_sentence(units: &str) -> String {
    if units.is_empty() {
        "This set is not a consistent cut: its members were taken one after another, with no service paused.".into()
    } else {
        format!(
            "This set is a consistent cut: {} paused while every member was taken, so its members are one moment of what they wrote.",
            units.replace(' ', ", ")
        )
    }
}

/// `tacid data restore SET --details`: each member's changed paths, under its own heading.
pub fn set_details(all: &[RestoreDetails]) -> String {
    let mut out = String::new();
    for d in all {
        let _ = writeln!(out, "\nIn {} (since {}):", d.of_path, d.snapshot);
        out.push_str(&details(d));
    }
    out
}

/// `tacid data restore SET --yes`.
pub fn set_staged(p: &SetRestorePreview, s: &SetRestoreStaged) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", p.words);
    let paths: Vec<&str> = s.members.iter().map(|m| m.of_path.as_str()).collect();
    if s.already_staged {
        let _ = writeln!(
            out,
            "Already staged; nothing changed. Reboot to put {} back.",
            and_list(&paths)
        );
    } else if let [one] = &s.members[..] {
        let _ = writeln!(
            out,
            "Staged. Nothing is put back yet: reboot to put {} back to {}{}. Until then, `tacid data cancel` withdraws it.",
            one.of_path,
            one.snapshot,
            of_set(s.set_id)
        );
    } else {
        let _ = writeln!(
            out,
            "Staged, as one request. Nothing is put back yet: reboot to put {} back together{}. Until then, `tacid data cancel` withdraws all of it.",
            and_list(&paths),
            if s.set_id == 0 {
                ", each to the snapshot named".to_owned()
            } else {
                of_set(s.set_id)
            }
        );
    }
    let _ = writeln!(out, "{NOT_THE_WORLD}");
    out
}

/// " (set 12)", or nothing for snapshots named one by one (set 0).
fn of_set(set_id: i64) -> String {
    if set_id == 0 {
        String::new()
    } else {
        format!(" (set {set_id})")
    }
}

/// `tacid data status`.
pub fn status(s: &Status, now: SystemTime) -> String {
    let mut out = String::new();
    let snapshots: Vec<&str> = s.staged_snapshot.split(' ').collect();
    let paths: Vec<&str> = s.staged_of_path.split(' ').collect();
    if !s.staged_problem.is_empty() {
        let _ = writeln!(out, "No restore is staged: {}.", s.staged_problem);
    } else if s.staged_snapshot.is_empty() {
        let _ = writeln!(out, "No restore is staged.");
    } else if snapshots.len() > 1 && snapshots.len() == paths.len() {
        let _ = writeln!(
            out,
            "A restore of {} subvolumes is staged: the next reboot puts them back together:",
            snapshots.len()
        );
        for (path, snapshot) in paths.iter().zip(&snapshots) {
            let _ = writeln!(out, "  {path} to {snapshot}");
        }
        let _ = writeln!(
            out,
            "It needs a reboot; `tacid data cancel` withdraws all of it."
        );
    } else {
        let _ = writeln!(
            out,
            "A restore is staged: the next reboot puts {} back to {}. It needs a reboot; `tacid data cancel` withdraws it.",
            s.staged_of_path, s.staged_snapshot
        );
    }
    if s.staged_problem.is_empty() && !s.staged_snapshot.is_empty() && !s.staged_by.is_empty() {
        // A set's words are several lines: each under the first, indented.
        let _ = writeln!(
            out,
            "  staged by {}, who was shown: {}",
            s.staged_by,
            s.staged_words.replace('\n', "\n    ")
        );
    }
    if s.outcome_id.is_empty() {
        let _ = writeln!(out, "No boot has reported on a restore yet.");
    } else {
        let finished = from_unix_micros(s.outcome_finished_micros);
        let new = if s.outcome_new { "NEW: " } else { "" };
        let when = format!("{} ({})", human_time(finished, now), ago(finished, now));
        // "@home @home.…"; a set's members separated by "; ".
        let members: Vec<Option<(&str, &str)>> = s
            .outcome_request
            .split("; ")
            .map(|member| {
                let mut fields = member.split_whitespace();
                let path = fields
                    .next()
                    .and_then(|sub| layout::SubvolumeName::parse(sub).ok())
                    .map(|sub| sub.display_path());
                path.zip(fields.next())
            })
            .collect();
        let all_read = members.iter().all(Option::is_some);
        match (s.outcome_result.as_str(), &members[..]) {
            ("done", [Some((path, snapshot))]) => {
                let _ = writeln!(
                    out,
                    "{new}At the boot of {when}, {path} was put back to {snapshot}."
                );
            }
            ("done", several) if all_read && several.len() > 1 => {
                let each: Vec<String> = several
                    .iter()
                    .flatten()
                    .map(|(path, snapshot)| format!("{path} to {snapshot}"))
                    .collect();
                let each: Vec<&str> = each.iter().map(String::as_str).collect();
                let _ = writeln!(
                    out,
                    "{new}At the boot of {when}, {} subvolumes were put back together: {}.",
                    several.len(),
                    and_list(&each)
                );
            }
            _ => {
                let what = if s.outcome_request.is_empty() {
                    "an unreadable request"
                } else {
                    &s.outcome_request
                };
                let _ = writeln!(out, "{new}At the boot of {when}, the staged restore ({what}) was refused; nothing changed.");
            }
        }
        let _ = writeln!(out, "  the boot said: {}", s.outcome_reason);
        if !s.outcome_undo.is_empty() {
            let _ = writeln!(
                out,
                "  to undo it (put back what it replaced, at the next boot): {}",
                s.outcome_undo
            );
        }
    }
    if !s.stem_running {
        let _ = writeln!(out, "The stem is not running; start tacid-stem.service.");
    }
    for v in &s.verifications {
        let at = from_unix_micros(v.when_micros);
        let when = format!("{} ({})", human_time(at, now), ago(at, now));
        let by = if v.by.is_empty() { "?" } else { &v.by };
        if v.failed.is_empty() {
            let _ = writeln!(
                out,
                "Sealed target {}: last verified {when} by {by}: {} cop{} good.",
                v.target,
                v.good,
                if v.good == 1 { "y" } else { "ies" }
            );
            continue;
        }
        let _ = writeln!(
            out,
            "Sealed target {}: last verified {when} by {by}: FAILED ({} good, {} failed):",
            v.target,
            v.good,
            v.failed.iter().filter(|f| !f.name.is_empty()).count()
        );
        for f in &v.failed {
            if f.name.is_empty() {
                let _ = writeln!(out, "  nothing could be checked: {}", f.problem);
            } else {
                let _ = writeln!(out, "  {}: {}", f.name, f.problem);
            }
        }
    }
    if s.unknown_origin > 0 {
        let _ = writeln!(
            out,
            "{} on disk {} not taken through the keeper (unknown origin).",
            count(u64::from(s.unknown_origin), "snapshot", "snapshots"),
            if s.unknown_origin == 1 { "was" } else { "were" }
        );
    }
    if s.failed_sets > 0 {
        let _ = writeln!(
            out,
            "{} failed; `tacid data list` shows what exists.",
            count(u64::from(s.failed_sets), "snapshot set", "snapshot sets")
        );
    }
    if s.stem_running {
        let _ = writeln!(
            out,
            "Free space: {} of {}{}{}.",
            bytes(s.free_bytes),
            bytes(s.size_bytes),
            if s.floor_bytes > 0 {
                format!(
                    "; below {} the oldest automatic snapshots are pruned",
                    bytes(s.floor_bytes)
                )
            } else {
                String::new()
            },
            if s.hard_floor_bytes > 0 {
                format!(
                    "; below {} new snapshots are refused",
                    bytes(s.hard_floor_bytes)
                )
            } else {
                String::new()
            }
        );
        if s.deletions_pending > 0 {
            let _ = writeln!(
                out,
                "{} still giving {} space back (Btrfs's cleaner runs after the next commit).",
                count(
                    u64::from(s.deletions_pending),
                    "deleted snapshot",
                    "deleted snapshots"
                ),
                if s.deletions_pending == 1 {
                    "its"
                } else {
                    "their"
                }
            );
        }
    }
    let _ = writeln!(out, "Journal: {}", s.journal_path);
    out
}

/// `tacid data prune [--dry-run]`: what goes (or would), rule by rule, and under each rule
/// every distinct reason (for pre-switch sets, one per set) with the snapshots it chose.
pub fn prune(r: &PruneReport, now: SystemTime) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Policy: {}.", r.policy);
    let _ = writeln!(out, "Free space: {}.", bytes(r.free_bytes));
    let verb = if r.dry_run {
        "would be deleted"
    } else {
        "deleted"
    };
    if r.deleted.is_empty() {
        if r.spared.is_empty() && r.failed.is_empty() {
            let _ = writeln!(out, "Nothing {verb}: every snapshot is kept by a rule.");
        } else {
            let _ = writeln!(out, "Nothing {verb}.");
        }
    }
    // Rule by rule, in the order the rules are applied; a rule this CLI does not know (a
    // newer keeper's) after them, under its code, so that nothing deleted goes unlisted.
    // The per-set detail (which set, which counts) is each entry's own `why`: two sets
    // chosen by one rule have two reasons.
    let mut rules: Vec<(&str, String)> = keeper_interface::prune::RULES
        .iter()
        .map(|(code, name)| (*code, (*name).to_owned()))
        .collect();
    for e in &r.deleted {
        if !rules.iter().any(|(code, _)| *code == e.rule) {
            rules.push((e.rule.as_str(), format!("the rule {}", e.rule)));
        }
    }
    for (rule, name) in &rules {
        let chosen: Vec<&PruneEntry> = r.deleted.iter().filter(|e| e.rule == *rule).collect();
        if chosen.is_empty() {
            continue;
        }
        let n = chosen.len();
        let _ = writeln!(
            out,
            "\n{n} snapshot{} {verb} by {name}:",
            if n == 1 { "" } else { "s" }
        );
        // Each reason once, in the order its first snapshot comes (oldest first), then the
        // snapshots it chose.
        let mut reasons: Vec<&str> = Vec::new();
        for e in &chosen {
            if !reasons.contains(&e.why.as_str()) {
                reasons.push(&e.why);
            }
        }
        for why in reasons {
            let _ = writeln!(out, "  {why}:");
            for e in chosen.iter().filter(|e| e.why == why) {
                let taken = from_unix_micros(e.taken_micros);
                let _ = writeln!(
                    out,
                    "    {}  of {}, taken {} ({})",
                    e.name,
                    e.of_path,
                    human_time(taken, now),
                    ago(taken, now)
                );
            }
        }
    }
    if !r.spared.is_empty() {
        let _ = writeln!(out, "\nChosen by a rule but kept:");
        for e in &r.spared {
            let _ = writeln!(out, "  {}  {} ({})", e.name, e.note, e.why);
        }
    }
    if !r.failed.is_empty() {
        let _ = writeln!(out, "\nNot deleted:");
        for e in &r.failed {
            let _ = writeln!(out, "  {}  {} (chosen: {})", e.name, e.note, e.why);
        }
    }
    // The floor's rule among the spared: what it would delete next is a last common parent
    // with a copy target, kept (adr/0013).
    let held: Vec<&PruneEntry> = r
        .spared
        .iter()
        .filter(|e| e.rule == "free-space-floor")
        .collect();
    if r.floor_unmet && !held.is_empty() {
        let names: Vec<&str> = held.iter().map(|e| e.name.as_str()).collect();
        let _ = writeln!(
            out,
            "\nThe free space is below the floor of {} and what is left to delete is the last \
             common parent with a copy target ({}): {}, because without it the next copy to \
             that target is full (all of the subvolume, not what changed). If the space \
             matters more, delete it by hand with `tacid data delete NAME --next-copy-full`, \
             delete manual snapshots, or free space otherwise.",
            bytes(r.floor_bytes),
            and_list(&names),
            if names.len() == 1 {
                "it stays"
            } else {
                "they stay"
            }
        );
    } else if r.floor_unmet {
        let _ = writeln!(
            out,
            "\nThe free space is below the floor of {} and no automatic snapshot is left to \
             delete: delete manual snapshots (`tacid data delete NAME`) or free space otherwise.",
            bytes(r.floor_bytes)
        );
    }
    if r.dry_run {
        let _ = writeln!(
            out,
            "\nDry run: nothing was deleted. `tacid data prune` deletes these."
        );
    } else if !r.deleted.is_empty() {
        let _ = writeln!(
            out,
            "\nTheir space comes back in the background; `tacid data status` shows it."
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use keeper_interface::prune::Rule;
    use keeper_interface::{PruneEntry, PruneReport};

    /// 2026-12-02 12:00 UTC.
    const NOW_MICROS: i64 = 1_796_212_800_000_000;
    const HOUR: i64 = 3_600_000_000;

    fn now() -> std::time::SystemTime {
        UNIX_EPOCH + Duration::from_micros(NOW_MICROS as u64)
    }

    /// A pre-switch row with `reason` (as the keeper escapes it), listed in words and JSON.
    fn listed_before_switch(reason: &str) -> (String, serde_json::Value) {
        let row = keeper_interface::SnapshotRow {
            name: "@persist.2026-12-02T110000.000000Z",
            of: "@persist",
            of_path: "/persist",
            taken_micros: NOW_MICROS - HOUR,
            reason,
            asked_by: "root",
            asked_by_uid: 0,
            origin: "journal",
            pre_switch: true,
            pinned: false,
            set_id: 7,
            cut_units: "",
            replaced_by_restore_of: "",
            replaced_micros: 0,
            kept_until_micros: 0,
        };
        let mut text = Vec::new();
        super::write_list(&mut text, &[row], &[], &[], now()).unwrap();
        let mut json = Vec::new();
        crate::json::write_list(&mut json, &[row], &[], &[]).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
        (
            String::from_utf8(text).unwrap(),
            json["snapshots"][0]["switch"].clone(),
        )
    }

    #[test]
    fn what_a_restore_replaced_is_listed_with_the_restore_its_days_and_the_undo() {
        let row = keeper_interface::SnapshotRow {
            name: "@home.2026-12-02T110000.000000Z",
            of: "@home",
            of_path: "/home",
            taken_micros: NOW_MICROS - HOUR,
            reason: "",
            asked_by: "",
            asked_by_uid: u32::MAX,
            origin: "replaced",
            pre_switch: false,
            pinned: false,
            set_id: 0,
            cut_units: "",
            replaced_by_restore_of: "@home.2026-11-30T090000.000000Z",
            replaced_micros: NOW_MICROS - HOUR,
            kept_until_micros: NOW_MICROS - HOUR + 7 * 24 * HOUR,
        };
        let mut text = Vec::new();
        super::write_list(&mut text, &[row], &[], &[], now()).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains(
                "what /home held before the restore of Wed 2 Dec 11:00 UTC (back to \
                 @home.2026-11-30T090000.000000Z), kept until Wed 9 Dec 11:00 UTC; undo: \
                 `tacid data restore @home.2026-12-02T110000.000000Z`"
            ),
            "{text}"
        );
        let mut json = Vec::new();
        crate::json::write_list(&mut json, &[row], &[], &[]).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let s = &json["snapshots"][0];
        assert_eq!(s["origin"], "replaced");
        assert_eq!(
            s["replaced"]["restore_of"],
            "@home.2026-11-30T090000.000000Z"
        );
        assert_eq!(s["replaced"]["kept_until_micros"], row.kept_until_micros);
    }

    #[test]
    fn a_consistent_cut_is_listed_with_its_units_in_words_and_json() {
        let row = keeper_interface::SnapshotRow {
            name: "@persist.2026-12-02T110000.000000Z",
            of: "@persist",
            of_path: "/persist",
            taken_micros: NOW_MICROS - HOUR,
            reason: "",
            asked_by: "root",
            asked_by_uid: 0,
            origin: "journal",
            pre_switch: true,
            pinned: false,
            set_id: 7,
            cut_units: "postgresql.service app.service",
            replaced_by_restore_of: "",
            replaced_micros: 0,
            kept_until_micros: 0,
        };
        let plain = keeper_interface::SnapshotRow {
            cut_units: "",
            set_id: 6,
            ..row
        };
        let mut text = Vec::new();
        super::write_list(&mut text, &[row, plain], &[], &[], now()).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("\n    cut    a consistent cut: postgresql.service, app.service paused while the set was taken\n"),
            "{text}"
        );
        assert_eq!(text.matches("consistent cut").count(), 1, "{text}");
        let mut json = Vec::new();
        crate::json::write_list(&mut json, &[row, plain], &[], &[]).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            json["snapshots"][0]["consistent_cut"],
            serde_json::json!(["postgresql.service", "app.service"])
        );
        assert_eq!(
            json["snapshots"][1]["consistent_cut"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn a_pre_switch_snapshot_is_listed_with_the_generations_its_reason_names() {
        let (text, switch) = listed_before_switch("before switching from generation 42 to 43");
        assert!(
            text.contains(
                "\n    why    before switching from generation 42 to 43, asked by root (uid 0)\n"
            ),
            "{text}"
        );
        assert_eq!(
            switch,
            serde_json::json!({"from_generation": 42, "to_generation": 43, "to_toplevel": null})
        );
        let (text, switch) =
            listed_before_switch("before switching to /nix/store/abc-nixos-system");
        assert!(
            text.contains("why    before switching to /nix/store/abc-nixos-system, asked by root"),
            "{text}"
        );
        assert_eq!(
            switch,
            serde_json::json!({"from_generation": null, "to_generation": null,
                "to_toplevel": "/nix/store/abc-nixos-system"})
        );
        // A reason of the person's own (or one an older keeper took, escaped): no switch,
        // and the reason shown as it is.
        for own in ["my upgrade", "before switching to /nix/store/x\\x1b[2J"] {
            let (text, switch) = listed_before_switch(own);
            assert!(
                text.contains(&format!(
                    "why    before switching configuration, asked by root (uid 0): {own}\n"
                )),
                "{text}"
            );
            assert_eq!(switch, serde_json::Value::Null);
        }
    }

    /// An entry as the keeper makes it: the rule's code and its sentence.
    fn entry(name: &str, hours_ago: i64, rule: &Rule, note: &str) -> PruneEntry {
        PruneEntry {
            name: name.into(),
            of_path: if name.starts_with("@home") {
                "/home".into()
            } else {
                "/persist".into()
            },
            taken_micros: NOW_MICROS - hours_ago * HOUR,
            rule: rule.code().into(),
            why: rule.to_string(),
            note: note.into(),
        }
    }

    fn report(dry_run: bool, deleted: Vec<PruneEntry>) -> PruneReport {
        PruneReport {
            dry_run,
            deleted,
            spared: Vec::new(),
            failed: Vec::new(),
            policy: "keep the last 1 pre-switch set".into(),
            free_bytes: 300 << 20,
            floor_bytes: 0,
            floor_unmet: false,
        }
    }

    /// The reason line a snapshot's line is listed under (the nearest one above it), and
    /// the rule heading above that.
    fn listed_under<'a>(out: &'a str, name: &str) -> (&'a str, &'a str) {
        let (mut heading, mut reason) = ("", "");
        for line in out.lines() {
            if line.starts_with("    ") {
                if line.trim_start().starts_with(&format!("{name} ")) {
                    return (heading, reason);
                }
            } else if let Some(r) = line.strip_prefix("  ") {
                reason = r;
            } else {
                heading = line;
                reason = "";
            }
        }
        panic!("{name} is not listed in:\n{out}");
    }

    fn status(staged: &str, paths: &str, words: &str, outcome: &str) -> keeper_interface::Status {
        keeper_interface::Status {
            stem_running: false,
            staged_snapshot: staged.into(),
            staged_of_path: paths.into(),
            staged_words: words.into(),
            staged_by: if words.is_empty() { "" } else { "alice" }.into(),
            outcome_id: if outcome.is_empty() { "" } else { "x" }.into(),
            outcome_result: "done".into(),
            outcome_request: outcome.into(),
            outcome_reason: "put back".into(),
            outcome_undo: String::new(),
            outcome_finished_micros: NOW_MICROS - HOUR,
            outcome_new: true,
            unknown_origin: 0,
            failed_sets: 0,
            journal_path: "/j".into(),
            free_bytes: 0,
            size_bytes: 0,
            floor_bytes: 0,
            hard_floor_bytes: 0,
            deletions_pending: 0,
            staged_problem: String::new(),
            verifications: Vec::new(),
        }
    }

    #[test]
    fn status_says_each_sealed_targets_last_verification() {
        let mut s = status("", "", "", "");
        let v = |target: &str, good, failed: Vec<(&str, &str)>| keeper_interface::LastVerified {
            target: target.into(),
            when_micros: NOW_MICROS - HOUR,
            by: "timer of cloud".into(),
            good,
            failed: failed
                .into_iter()
                .map(|(n, p)| keeper_interface::CopyVerified {
                    name: n.into(),
                    ok: false,
                    problem: p.into(),
                    bytes_read: 0,
                })
                .collect(),
        };
        s.verifications = vec![
            v("cloud", 3, vec![("@home.b", "part 2 is missing")]),
            v("usb", 2, vec![]),
            v("nas", 0, vec![("", "the target did not answer")]),
        ];
        let out = super::status(&s, now());
        assert!(
            out.contains(
                "Sealed target cloud: last verified Wed 2 Dec 11:00 UTC (1 hour ago) by timer of \
                 cloud: FAILED (3 good, 1 failed):\n  @home.b: part 2 is missing\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "Sealed target usb: last verified Wed 2 Dec 11:00 UTC (1 hour ago) by timer of \
                 cloud: 2 copies good.\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("FAILED (0 good, 0 failed):\n  nothing could be checked: the target did not answer\n"),
            "{out}"
        );
    }

    #[test]
    fn a_verification_names_what_failed_and_what_to_do() {
        let r = keeper_interface::VerifyReport {
            target: "cloud".into(),
            copies: vec![
                keeper_interface::CopyVerified {
                    name: "@home.a".into(),
                    ok: true,
                    problem: String::new(),
                    bytes_read: 2048,
                },
                keeper_interface::CopyVerified {
                    name: "@home.b".into(),
                    ok: false,
                    problem: "part 2 is missing".into(),
                    bytes_read: 0,
                },
            ],
            message: "1 of 2 copies on cloud failed verification".into(),
        };
        assert_eq!(
            super::verified(&r),
            "good    @home.a  (2.0 KiB read)\nFAILED  @home.b: part 2 is missing\n\n\
             1 of 2 copies on cloud failed verification\n"
        );
    }

    #[test]
    fn status_names_every_member_of_a_staged_set_and_of_its_outcome() {
        let s = status(
            "@persist.a @log.a @home.a",
            "/persist /var/log /home",
            "This puts back 3 subvolumes of set 4:\n  /persist back to …",
            "@persist @persist.a; @log @log.a; @home @home.a",
        );
        let out = super::status(&s, now());
        assert!(
            out.starts_with(
                "A restore of 3 subvolumes is staged: the next reboot puts them back together:\n  \
                 /persist to @persist.a\n  /var/log to @log.a\n  /home to @home.a\n\
                 It needs a reboot; `tacid data cancel` withdraws all of it.\n  \
                 staged by alice, who was shown: This puts back 3 subvolumes of set 4:\n      \
                 /persist back to …\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "NEW: At the boot of Wed 2 Dec 11:00 UTC (1 hour ago), 3 subvolumes were put \
                 back together: /persist to @persist.a, /var/log to @log.a and /home to @home.a.\n"
            ),
            "{out}"
        );
        // One member reads as it always did.
        let s = status("@home.a", "/home", "", "@home @home.a");
        let out = super::status(&s, now());
        assert!(
            out.starts_with("A restore is staged: the next reboot puts /home back to @home.a."),
            "{out}"
        );
        assert!(out.contains("/home was put back to @home.a.\n"), "{out}");
        // A refused one says what was asked, whatever it was.
        let mut s = status("", "", "", "@persist @persist.a; @home @home.a");
        s.outcome_result = "refused".into();
        let out = super::status(&s, now());
        assert!(
            out.contains("the staged restore (@persist @persist.a; @home @home.a) was refused; nothing changed"),
            "{out}"
        );
    }

    #[test]
    fn prune_names_each_pre_switch_set_under_its_own_reason() {
        let set = |id| Rule::PreSwitchSets { keep: 1, set: id };
        let timeline = Rule::Timeline {
            hourly: 1,
            daily: 0,
            weekly: 0,
            monthly: 0,
        };
        let (s2, s3, s4) = (set(2), set(3), set(4));
        let deleted = vec![
            entry("@persist.a2", 30, &s2, ""),
            entry("@home.a2", 30, &s2, ""),
            entry("@persist.a3", 20, &s3, ""),
            entry("@home.a3", 20, &s3, ""),
            entry("@persist.a4", 10, &s4, ""),
            entry("@persist.t1", 5, &timeline, ""),
        ];
        for dry_run in [true, false] {
            let out = super::prune(&report(dry_run, deleted.clone()), now());
            println!("{out}");
            for (name, rule) in [
                ("@persist.a2", &s2),
                ("@home.a2", &s2),
                ("@persist.a3", &s3),
                ("@home.a3", &s3),
                ("@persist.a4", &s4),
                ("@persist.t1", &timeline),
            ] {
                let why = rule.to_string();
                let (heading, reason) = listed_under(&out, name);
                assert_eq!(
                    reason,
                    format!("{why}:"),
                    "{name} explained wrongly in:\n{out}"
                );
                // The heading holds for every snapshot under it: no set's detail in it.
                assert!(
                    !heading.contains("set 2") && !heading.contains("set 3"),
                    "{heading}"
                );
                assert_eq!(out.matches(&why).count(), 1, "{why} not said once:\n{out}");
            }
            let verb = if dry_run {
                "would be deleted"
            } else {
                "deleted"
            };
            assert!(
                out.contains(&format!(
                    "\n5 snapshots {verb} by the rule for pre-switch sets:\n"
                )),
                "{out}"
            );
            assert!(
                out.contains(&format!("\n1 snapshot {verb} by the timeline rule:\n")),
                "{out}"
            );
        }
    }

    #[test]
    fn prune_says_when_the_floor_is_held_by_a_last_common_parent() {
        let floor = Rule::FreeSpaceFloor {
            free_bytes: 1 << 20,
            floor_bytes: 2 << 30,
        };
        let parent = keeper_interface::prune::Protection::LastCommonParent(vec!["usb".into()]);
        let mut r = report(false, Vec::new());
        r.floor_unmet = true;
        r.floor_bytes = 2 << 30;
        r.spared = vec![entry("@home.p", 3, &floor, &format!("kept: {parent}"))];
        let out = super::prune(&r, now());
        assert!(
            out.contains("  @home.p  kept: last common parent with usb: the next copy to usb"),
            "{out}"
        );
        assert!(
            out.contains("what is left to delete is the last common parent with a copy target (@home.p): it stays")
                && out.contains("--next-copy-full"),
            "{out}"
        );
        assert!(!out.contains("no automatic snapshot is left"), "{out}");
    }

    #[test]
    fn prune_lists_a_rule_it_does_not_know_and_explains_failures() {
        let mut newer = entry(
            "@persist.n",
            3,
            &Rule::PreSwitchSets { keep: 1, set: 9 },
            "",
        );
        newer.rule = "some-future-rule".into();
        newer.why = "a reason from a newer keeper".into();
        let out = super::prune(&report(false, vec![newer]), now());
        let (heading, reason) = listed_under(&out, "@persist.n");
        assert_eq!(heading, "1 snapshot deleted by the rule some-future-rule:");
        assert_eq!(reason, "a reason from a newer keeper:");

        // Everything chosen failed: not "every snapshot is kept by a rule".
        let mut r = report(false, Vec::new());
        r.failed = vec![entry(
            "@persist.f",
            3,
            &Rule::PreSwitchSets { keep: 1, set: 5 },
            "not tried: the stem is not running",
        )];
        let out = super::prune(&r, now());
        assert!(!out.contains("kept by a rule"), "{out}");
        assert!(
            out.contains(
                "  @persist.f  not tried: the stem is not running (chosen: pre-switch set 5 is \
                 older than the newest 1 pre-switch set)"
            ),
            "{out}"
        );
        let out = super::prune(&report(true, Vec::new()), now());
        assert!(
            out.contains("Nothing would be deleted: every snapshot is kept by a rule."),
            "{out}"
        );
    }
}

/// `tacid data copy`.
pub fn copy_report(r: &CopyReport) -> String {
    let mut out = String::new();
    for c in &r.copied {
        let how = if c.incremental {
            format!("incremental against {}", c.parent)
        } else {
            "full copy".to_owned()
        };
        let _ = writeln!(
            out,
            "copied   {} ({}) to {}: {how}, {} in {:.1} s; verified",
            c.name,
            c.of_path,
            r.target,
            bytes(c.bytes),
            c.took_ms as f64 / 1000.0
        );
    }
    for n in &r.already_there {
        let _ = writeln!(
            out,
            "there    {n}: {} already holds it; nothing sent",
            r.target
        );
    }
    for f in &r.failed {
        let _ = writeln!(out, "FAILED   {} ({}): {}", f.name, f.of_path, f.reason);
    }
    for d in &r.deleted {
        if d.note.is_empty() {
            let _ = writeln!(out, "deleted  {} on {}: {}", d.name, r.target, d.why);
        } else {
            let _ = writeln!(
                out,
                "KEPT     {} on {}: deleting it {}",
                d.name, r.target, d.note
            );
        }
    }
    let timer = !r.retention.is_empty();
    if timer {
        let _ = writeln!(out, "{} keeps {}.", r.target, r.retention);
    }
    // A named copy's lines above already say all its message says; the timer's act ends with
    // its tally, and a report with no lines at all still says something.
    let said = r.copied.len() + r.already_there.len() + r.failed.len() + r.deleted.len();
    if timer || said == 0 {
        let _ = writeln!(out, "{}", r.message);
    }
    if !r.failed.is_empty() {
        let _ = writeln!(
            out,
            "Nothing half-received is left on {}; the next run tries again. \
             `journalctl -u tacid-stem` says more.",
            r.target
        );
    }
    out
}

/// `tacid data copies TARGET`.
pub fn target_copies(t: &TargetCopies, now: SystemTime) -> String {
    let mut out = String::new();
    if t.copies.is_empty() {
        let _ = writeln!(
            out,
            "{} holds no copies yet. `tacid data copy --to {}` copies the newest snapshot of each subvolume.",
            t.target, t.target
        );
        return out;
    }
    let n = t.copies.len();
    let _ = writeln!(
        out,
        "{} holds {n} cop{}, oldest first; it keeps {}.\n",
        t.target,
        if n == 1 { "y" } else { "ies" },
        t.retention
    );
    for c in &t.copies {
        let taken = from_unix_micros(c.taken_micros);
        let _ = writeln!(
            out,
            "{}  of {}{}",
            c.name,
            if c.of_path.is_empty() {
                "?"
            } else {
                &c.of_path
            },
            if c.local {
                ""
            } else {
                "  (not in the local store: `tacid data fetch` brings it back)"
            }
        );
        if c.taken_micros != 0 {
            let _ = writeln!(
                out,
                "    taken  {} ({})",
                human_time(taken, now),
                ago(taken, now)
            );
        }
        if !c.problem.is_empty() {
            let _ = writeln!(out, "    BAD    {}", c.problem);
        }
    }
    out
}

/// `tacid data verify`.
pub fn verified(r: &VerifyReport) -> String {
    let mut out = String::new();
    for c in &r.copies {
        if c.ok {
            let _ = writeln!(out, "good    {}  ({} read)", c.name, bytes(c.bytes_read));
        } else {
            let _ = writeln!(out, "FAILED  {}: {}", c.name, c.problem);
        }
    }
    if !r.copies.is_empty() {
        out.push('\n');
    }
    let _ = writeln!(out, "{}", r.message);
    out
}

/// One line of progress: `copying @home.… to usb: 1.2 GiB, 85.3 MiB/s, 14 s`.
pub fn progress(f: &CopyInFlight) -> String {
    let (name, target) = (f.name.as_str(), f.target.as_str());
    let what = match (f.direction.as_str(), name.is_empty()) {
        ("copy", false) => format!("copying {name} to {target}"),
        ("copy", true) => format!("copying to {target}"),
        ("fetch", _) => format!("fetching {name} from {target}"),
        ("verify", false) => format!("verifying {name} on {target}"),
        ("verify", true) => format!("verifying the copies on {target}"),
        ("list", _) => format!("reading what {target} holds"),
        ("clean", _) => format!("clearing {target} of what copies cut short left"),
        ("delete", _) => format!("deleting the copy {name} on {target}"),
        (other, true) => format!("{other} on {target}"),
        (other, false) => format!("{other} {name} on {target}"),
    };
    // What the bytes are: sent or received, or read back from the target.
    let read = if matches!(f.direction.as_str(), "verify" | "list" | "clean") {
        " read"
    } else {
        ""
    };
    if f.elapsed_ms == 0 {
        // No time known: bytes only, no rate made up.
        return format!("tacid: {what}: {}{read}", bytes(f.bytes));
    }
    let secs = f.elapsed_ms as f64 / 1000.0;
    let rate = format!("{}/s", bytes((f.bytes as f64 / secs) as u64));
    format!(
        "tacid: {what}: {}{read}, {rate}, {:.0} s",
        bytes(f.bytes),
        secs
    )
}

#[cfg(test)]
mod copy_tests {
    use super::*;
    use keeper_interface::{CopyDeleted, CopyFailed, CopyMade};

    #[test]
    fn progress_says_bytes_and_rate() {
        let f = CopyInFlight {
            target: "usb".into(),
            name: "@home.2026-12-01T140200.123456Z".into(),
            direction: "copy".into(),
            bytes: 200 * 1024 * 1024,
            elapsed_ms: 2000,
        };
        assert_eq!(
            progress(&f),
            "tacid: copying @home.2026-12-01T140200.123456Z to usb: 200.0 MiB, 100.0 MiB/s, 2 s"
        );
    }

    #[test]
    fn progress_says_what_is_done_where_with_bytes() {
        let f = |direction: &str, name: &str, bytes, elapsed_ms| CopyInFlight {
            target: "stick".into(),
            name: name.into(),
            direction: direction.into(),
            bytes,
            elapsed_ms,
        };
        let n = "@persist.2026-12-01T140200.123456Z";
        for (f, said) in [
            (
                f("fetch", n, 3 << 20, 3000),
                format!("tacid: fetching {n} from stick: 3.0 MiB, 1.0 MiB/s, 3 s"),
            ),
            (
                f("fetch", n, 2048, 0),
                format!("tacid: fetching {n} from stick: 2.0 KiB"),
            ),
            (
                f("verify", n, 1024, 0),
                format!("tacid: verifying {n} on stick: 1.0 KiB read"),
            ),
            (
                f("verify", "", 0, 0),
                "tacid: verifying the copies on stick: 0 B read".to_owned(),
            ),
            (
                f("list", "", 0, 0),
                "tacid: reading what stick holds: 0 B read".to_owned(),
            ),
            (
                f("copy", "", 5, 0),
                "tacid: copying to stick: 5 B".to_owned(),
            ),
        ] {
            let line = progress(&f);
            assert_eq!(line, said);
            assert!(!line.contains("  "), "{line}");
        }
    }

    #[test]
    fn a_report_says_what_was_copied_kept_deleted_and_failed() {
        let r = CopyReport {
            target: "usb".into(),
            copied: vec![CopyMade {
                name: "@home.b".into(),
                of_path: "/home".into(),
                parent: "@home.a".into(),
                incremental: true,
                bytes: 4096,
                received_uuid: "u".into(),
                took_ms: 1500,
            }],
            already_there: vec!["@persist.a".into()],
            failed: vec![CopyFailed {
                name: "@log.a".into(),
                of_path: "/var/log".into(),
                error: "TargetFull".into(),
                reason: "failed: the target is full".into(),
            }],
            deleted: vec![CopyDeleted {
                name: "@home.0".into(),
                of_path: "/home".into(),
                why: "retention of usb: not among ...".into(),
                note: String::new(),
            }],
            retention: "the newest 3 copies".into(),
            message: "usb: 1 copied".into(),
        };
        let text = copy_report(&r);
        assert!(
            text.contains("copied   @home.b (/home) to usb: incremental against @home.a, 4.0 KiB"),
            "{text}"
        );
        assert!(text.contains("there    @persist.a"), "{text}");
        assert!(
            text.contains("FAILED   @log.a (/var/log): failed: the target is full"),
            "{text}"
        );
        assert!(text.contains("deleted  @home.0 on usb"), "{text}");
        assert!(
            text.contains("Nothing half-received is left on usb"),
            "{text}"
        );
    }

    #[test]
    fn a_named_copy_is_said_once() {
        let r = CopyReport {
            target: "usb".into(),
            copied: vec![CopyMade {
                name: "@home.b".into(),
                of_path: "/home".into(),
                parent: String::new(),
                incremental: false,
                bytes: 12288,
                received_uuid: "u".into(),
                took_ms: 300,
            }],
            already_there: Vec::new(),
            failed: Vec::new(),
            deleted: Vec::new(),
            retention: String::new(),
            message: "copied @home.b to usb (a full copy, 12.0 KiB); verified".into(),
        };
        let text = copy_report(&r);
        assert_eq!(text.matches("@home.b").count(), 1, "{text}");
        assert_eq!(
            text,
            "copied   @home.b (/home) to usb: full copy, 12.0 KiB in 0.3 s; verified\n"
        );
        let there = CopyReport {
            copied: Vec::new(),
            already_there: vec!["@home.b".into()],
            message: "usb already holds a verified copy of @home.b; nothing was sent".into(),
            ..r.clone()
        };
        let text = copy_report(&there);
        assert_eq!(text.matches("@home.b").count(), 1, "{text}");
    }
}

/// `tacid data open`.
pub fn opened(o: &Opened, now: SystemTime) -> String {
    let mut out = String::new();
    let closes = from_unix_micros(o.idle_close_micros);
    if o.already_open {
        let _ = writeln!(
            out,
            "{} was already open for you at:\n  {}\nIts idle time starts again: it closes by itself at {} ({}) if nobody uses it then.",
            o.snapshot,
            o.path,
            human_time(closes, now),
            exact_time(closes)
        );
        return out;
    }
    let _ = writeln!(out, "Opened {} read-only at:\n  {}", o.snapshot, o.path);
    if o.whole {
        let _ = write!(out, "It is the whole snapshot of {}.", o.of_path);
        if !o.your_home.is_empty() {
            let _ = write!(out, " Your home as it was is at {}.", o.your_home);
        }
        let _ = writeln!(out);
    } else {
        let _ = writeln!(
            out,
            "It is your home ({}) as it was then, and nothing else.",
            o.shows
        );
    }
    let home = if o.your_home.is_empty() {
        &o.path
    } else {
        &o.your_home
    };
    let _ = writeln!(
        out,
        "Every file keeps the owner and mode it had then; nothing there can be written or run.\n\
         Nothing is restored: copy what you need out of it, e.g.\n  cp {home}/FILE ~/FILE\n\
         It closes with `tacid data close {}`, by itself at {} ({}) if nobody uses it then,\n\
         and at a reboot.",
        o.snapshot,
        human_time(closes, now),
        exact_time(closes)
    );
    out
}

/// `tacid data diff`.
pub fn part_changes(c: &PartChanges) -> String {
    let mut out = String::new();
    let at_least = if c.at_least { "at least " } else { "" };
    let _ = writeln!(out, "Changed in {} since {}:", c.subtree, c.snapshot);
    let _ = writeln!(
        out,
        "  files:       {at_least}{} added, {} changed, {} removed",
        c.files_added, c.files_modified, c.files_removed
    );
    let _ = writeln!(
        out,
        "  directories: {at_least}{} added, {} changed, {} removed",
        c.directories_added, c.directories_modified, c.directories_removed
    );
    if c.bytes_known {
        let _ = writeln!(out, "  written:     {at_least}{}", bytes(c.bytes_written));
    } else {
        let _ = writeln!(
            out,
            "  written:     not known for {} (Btrfs counts bytes written for the whole of {} only)",
            c.subtree, c.of_path
        );
    }
    write_paths_by_change(
        &mut out,
        &c.paths,
        [
            ("added", "Added since (not in the snapshot):"),
            (
                "modified",
                "Changed since (the snapshot has them as they were):",
            ),
            ("removed", "Removed since (the snapshot still has them):"),
        ],
    );
    if c.paths.is_empty() && c.paths_hidden == 0 {
        let _ = writeln!(out, "Nothing in {} changed since then.", c.subtree);
    }
    if c.paths_hidden > 0 {
        let _ = writeln!(
            out,
            "{} {} in directories you cannot read (counted, not named, and not in the numbers above).",
            c.paths_hidden,
            if c.paths_hidden == 1 {
                "change"
            } else {
                "changes"
            }
        );
    }
    if c.paths_cut {
        let _ = writeln!(
            out,
            "The list of changed paths was cut (it holds at most 10000): there may be more here than listed."
        );
    }
    if c.at_least && !c.paths_cut {
        let _ = writeln!(
            out,
            "The count stopped at its time limit: there may be more changes than listed."
        );
    }
    let _ = writeln!(
        out,
        "To take a file back: `tacid data open {}`, then copy it out.",
        c.snapshot
    );
    out
}
