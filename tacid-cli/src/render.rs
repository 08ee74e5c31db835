//! Sentences for people (DESIGN.md section 6). Every time is shown in UTC and says so.

use std::fmt::Write as _;
use std::time::SystemTime;

use keeper::wire::{
    PruneEntry, PruneReport, RestoreDetails, RestorePreview, RestoreStaged, SnapshotEntry,
    SnapshotSet, Status,
};
use keeper::words::{ago, exact_time, from_micros, human_time};

const NO_BACKUP: &str =
    "A snapshot lives on the same disk as what it is of: it is no backup against a dead disk.";
const NOT_THE_WORLD: &str =
    "A restore puts back files, not the world outside: mail sent stays sent.";

fn why(e: &SnapshotEntry) -> String {
    if e.origin == "unknown-origin" {
        return "unknown origin: on disk, but not taken through the keeper".into();
    }
    let who = if e.asked_by_uid == u32::MAX {
        e.asked_by.clone()
    } else {
        format!("{} (uid {})", e.asked_by, e.asked_by_uid)
    };
    let mut s = if e.pre_switch {
        format!("before switching configuration, asked by {who}")
    } else {
        format!("asked by {who}")
    };
    if !e.reason.is_empty() {
        let _ = write!(s, ": {}", e.reason);
    }
    s
}

/// `tacid data list`.
pub fn list(all: &[SnapshotEntry], now: SystemTime) -> String {
    let mut out = String::new();
    if all.is_empty() {
        let _ = writeln!(
            out,
            "No snapshots yet. Take one with `tacid data snapshot`."
        );
        return out;
    }
    let n = all.len();
    let _ = writeln!(
        out,
        "{n} snapshot{}, newest first. {NO_BACKUP}\n",
        if n == 1 { "" } else { "s" }
    );
    for e in all {
        let taken = from_micros(e.taken_micros);
        let _ = writeln!(out, "{}  of {}", e.name, e.of_path);
        let _ = writeln!(
            out,
            "    taken  {} ({}); exactly {}",
            human_time(taken, now),
            ago(taken, now),
            exact_time(taken)
        );
        let _ = writeln!(out, "    why    {}", why(e));
        if e.pinned {
            let _ = writeln!(
                out,
                "    STAGED the next reboot puts {} back to this snapshot (`tacid data cancel` withdraws it)",
                e.of_path
            );
        }
    }
    out
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
    let _ = writeln!(out, "{NO_BACKUP}");
    out
}

/// `tacid data restore NAME` without `--yes`.
pub fn preview(p: &RestorePreview) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", p.words);
    if p.already_staged {
        let _ = writeln!(
            out,
            "This restore is already staged; reboot to put {} back, or `tacid data cancel`.",
            p.of_path
        );
    } else {
        let _ = writeln!(out, "{NOT_THE_WORLD}");
        let _ = writeln!(
            out,
            "Nothing has changed. To stage it: tacid data restore {} --yes",
            p.snapshot
        );
    }
    out
}

/// `tacid data restore NAME --details`: the changed paths, grouped by what a restore does
/// to them.
pub fn details(d: &RestoreDetails) -> String {
    let mut out = String::new();
    for (change, heading) in [
        ("added", "Deleted by the restore (added since):"),
        ("modified", "Put back as they were (changed since):"),
        ("removed", "Brought back (removed since):"),
    ] {
        let mut paths = d.paths.iter().filter(|p| p.change == change).peekable();
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

/// `tacid data status`.
pub fn status(s: &Status, now: SystemTime) -> String {
    let mut out = String::new();
    if s.staged_snapshot.is_empty() {
        let _ = writeln!(out, "No restore is staged.");
    } else {
        let _ = writeln!(
            out,
            "A restore is staged: the next reboot puts {} back to {}. It needs a reboot; `tacid data cancel` withdraws it.",
            s.staged_of_path, s.staged_snapshot
        );
        if !s.staged_by.is_empty() {
            let _ = writeln!(
                out,
                "  staged by {}, who was shown: {}",
                s.staged_by, s.staged_words
            );
        }
    }
    if s.outcome_id.is_empty() {
        let _ = writeln!(out, "No boot has reported on a restore yet.");
    } else {
        let finished = from_micros(s.outcome_finished_micros);
        let new = if s.outcome_new { "NEW: " } else { "" };
        let when = format!("{} ({})", human_time(finished, now), ago(finished, now));
        let mut request = s.outcome_request.split_whitespace();
        let path = request
            .next()
            .and_then(|sub| layout::SubvolumeName::parse(sub).ok())
            .map(|sub| sub.display_path());
        match (s.outcome_result.as_str(), path, request.next()) {
            ("done", Some(path), Some(snapshot)) => {
                let _ = writeln!(
                    out,
                    "{new}At the boot of {when}, {path} was put back to {snapshot}."
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
    }
    if !s.stem_running {
        let _ = writeln!(out, "The stem is not running; start tacid-stem.service.");
    }
    if s.unknown_origin > 0 {
        let _ = writeln!(
            out,
            "{} snapshot(s) on disk were not taken through the keeper (unknown origin).",
            s.unknown_origin
        );
    }
    if s.failed_sets > 0 {
        let _ = writeln!(
            out,
            "{} snapshot set(s) failed; `tacid data list` shows what exists.",
            s.failed_sets
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
                "{} deleted snapshot(s) still giving their space back (Btrfs's cleaner runs after the next commit).",
                s.deletions_pending
            );
        }
    }
    let _ = writeln!(out, "Journal: {}", s.journal_path);
    out
}

/// `tacid data prune [--dry-run]`: what goes (or would), rule by rule.
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
        let _ = writeln!(out, "Nothing {verb}: every snapshot is kept by a rule.");
    }
    // Rule by rule, in the order the rules are applied.
    for rule in [
        "pre-switch-sets",
        "timeline",
        "manual-max-age",
        "free-space-floor",
    ] {
        let chosen: Vec<&PruneEntry> = r.deleted.iter().filter(|e| e.rule == rule).collect();
        let Some(first) = chosen.first() else {
            continue;
        };
        let _ = writeln!(out, "\n{} {verb}: {}.", chosen.len(), first.why);
        for e in chosen {
            let taken = from_micros(e.taken_micros);
            let _ = writeln!(
                out,
                "  {}  of {}, taken {} ({})",
                e.name,
                e.of_path,
                human_time(taken, now),
                ago(taken, now)
            );
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
            let _ = writeln!(out, "  {}  {}", e.name, e.note);
        }
    }
    if r.floor_unmet {
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

fn bytes(n: u64) -> String {
    keeper::retention::bytes(n)
}
