//! The two jobs, driven step by step over any [`Disk`]: the real filesystem and the model
//! run this same code.

use std::fmt;
use std::time::SystemTime;

use layout::origin::LiveSubvolume;
use layout::{
    Outcome, OutcomeResult, Reason, RestoreRequest, SubvolumeName, ROOT_BLANK_SUBVOLUME,
    ROOT_SUBVOLUME, SUBVOLUMES,
};
use uuid::Uuid;

use crate::disk::{Disk, Source};
use crate::machine::{
    plan_restore, plan_wipe, stuck_name, swap_name, Phase, RestoreAction, SwapState, WipeAction,
};
use crate::steps::Step;
use crate::validate::{check_snapshot, judge_request_file, Refusal};

/// Where the driver reports what it does, and where test hooks stop it.
pub trait Observer {
    /// One line for the log (the initrd's console and journal).
    fn log(&mut self, line: &str);
    /// Called right after `step` was performed.
    fn after(&mut self, step: Step);
    /// A subvolume stays set aside under a stuck name at the end of this run (`what` names
    /// it and says why): the job is done, but the next run must try the deletion again.
    fn left_behind(&mut self, what: &str);
}

/// Why a job could not finish. The disk is left in a state the next run finishes.
#[derive(Debug)]
pub enum RunError<E> {
    Disk(E),
    /// `@root-blank` is missing: there is nothing to make `@root` from.
    BlankMissing,
    /// The state machine went round more often than any swap needs (a bug, or a disk that
    /// does not do what it says).
    Stuck {
        subvolume: String,
        phase: Phase,
    },
}

impl<E: fmt::Display> fmt::Display for RunError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Disk(e) => write!(f, "{e}"),
            RunError::BlankMissing => write!(
                f,
                "{ROOT_BLANK_SUBVOLUME} is missing, so {ROOT_SUBVOLUME} cannot be made again; \
                 create it (an empty read-only subvolume at the top level)"
            ),
            RunError::Stuck { subvolume, phase } => write!(
                f,
                "the swap of {subvolume} does not settle (still: {phase}); this is a bug, please report it"
            ),
        }
    }
}

trait DiskResult<T, E> {
    fn disk(self) -> Result<T, RunError<E>>;
}

impl<T, E> DiskResult<T, E> for Result<T, E> {
    fn disk(self) -> Result<T, RunError<E>> {
        self.map_err(RunError::Disk)
    }
}

/// What a restore run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreReport {
    /// No request was staged (leftovers of earlier runs may have been cleaned up).
    NothingStaged,
    /// The request was honoured (by this run, or finished by it after a cut-short run).
    Restored(RestoreRequest),
    /// The request was refused; nothing was swapped.
    Refused(Refusal),
}

/// No swap takes more rounds than this (copy, exchange, finish, delete, and a leftover).
const MAX_ROUNDS: usize = 8;

/// Honour the staged restore request, if any, and clean up what cut-short runs left.
pub fn restore_data<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    now: SystemTime,
) -> Result<RestoreReport, RunError<D::Error>> {
    for subvolume in SubvolumeName::restorable() {
        retry_stuck(disk, obs, subvolume.as_str())?;
    }
    let file = disk.request().disk()?;
    let report = match judge_request_file(&file) {
        None => {
            obs.log("no restore is staged");
            RestoreReport::NothingStaged
        }
        Some(Err(refusal)) => {
            refuse(disk, obs, None, &refusal, now)?;
            RestoreReport::Refused(refusal)
        }
        Some(Ok(request)) => {
            obs.log(&format!(
                "a restore is staged: put {} back to {} (UUID {})",
                request.subvolume(),
                request.snapshot(),
                request.uuid()
            ));
            restore_one(disk, obs, &request, now)?
        }
    };
    for subvolume in SubvolumeName::restorable() {
        clean_leftovers(disk, obs, subvolume)?;
    }
    Ok(report)
}

fn swap_state<D: Disk>(disk: &mut D, live: &str) -> Result<SwapState, RunError<D::Error>> {
    Ok(SwapState {
        live: disk.top_subvolume(live).disk()?,
        swap: disk.top_subvolume(&swap_name(live)).disk()?,
    })
}

fn restore_one<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    request: &RestoreRequest,
    now: SystemTime,
) -> Result<RestoreReport, RunError<D::Error>> {
    let live = request.subvolume().as_str();
    let swap = swap_name(live);
    let snapshot = request.snapshot().to_string();
    let mut requested = true;
    for _ in 0..MAX_ROUNDS {
        let phase = Phase::of(&swap_state(disk, live)?, request.uuid());
        match plan_restore(requested, phase) {
            RestoreAction::CheckAndCopy => {
                if let Err(refusal) = check(disk, request)? {
                    refuse(disk, obs, Some(*request), &refusal, now)?;
                    return Ok(RestoreReport::Refused(refusal));
                }
                obs.log(&format!("copying snapshot {snapshot} to {swap}"));
                disk.copy(Source::Snapshot(&snapshot), &swap).disk()?;
                obs.after(Step::RestoreCopy);
                commit(disk, obs, Step::RestoreCommitCopy)?;
            }
            RestoreAction::CheckAndExchange => {
                obs.log(&format!(
                    "{swap} holds the copy of {snapshot}; checking the request again"
                ));
                if let Err(refusal) = check(disk, request)? {
                    refuse(disk, obs, Some(*request), &refusal, now)?;
                    return Ok(RestoreReport::Refused(refusal));
                }
                for dir in mount_point_dirs(request.subvolume()) {
                    obs.log(&format!("making mount point {dir} in {swap}"));
                    disk.ensure_dir(&swap, &dir).disk()?;
                }
                obs.after(Step::RestorePrepare);
                obs.log(&format!("exchanging {live} and {swap}"));
                disk.exchange(live, &swap).disk()?;
                obs.after(Step::RestoreExchange);
                commit(disk, obs, Step::RestoreCommitExchange)?;
            }
            RestoreAction::Finish => {
                obs.log(&format!(
                    "{live} is now the copy of {snapshot}; recording the outcome"
                ));
                let outcome = Outcome::new(
                    OutcomeResult::Done,
                    now,
                    Some(*request),
                    Reason::new(&format!(
                        "{} was put back to {}; everything written to {} after that snapshot is gone",
                        request.subvolume(),
                        request.snapshot(),
                        request.subvolume().display_path()
                    )),
                );
                disk.write_outcome(&outcome).disk()?;
                obs.after(Step::RestoreOutcome);
                disk.remove_request().disk()?;
                obs.after(Step::RestoreRemoveRequest);
                commit(disk, obs, Step::RestoreCommitRequest)?;
                requested = false;
            }
            RestoreAction::DeleteSwap => {
                let steps = match phase {
                    Phase::Exchanged => (Step::RestoreDeleteOld, Step::RestoreCommitDelete),
                    _ => (Step::DeleteStale, Step::CommitStale),
                };
                obs.log(&format!("deleting {swap} ({phase})"));
                delete_swap(disk, obs, live, steps)?;
            }
            RestoreAction::RefuseLiveMissing => {
                let refusal = Refusal::LiveMissing(request.subvolume());
                refuse(disk, obs, Some(*request), &refusal, now)?;
                return Ok(RestoreReport::Refused(refusal));
            }
            RestoreAction::Nothing => {
                obs.log(&format!("{live} was put back to {snapshot}"));
                return Ok(RestoreReport::Restored(*request));
            }
        }
    }
    let phase = Phase::of(&swap_state(disk, live)?, request.uuid());
    Err(RunError::Stuck {
        subvolume: live.to_owned(),
        phase,
    })
}

/// Whatever is under a restorable subvolume's swap name when no request names it any more.
fn clean_leftovers<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    subvolume: SubvolumeName,
) -> Result<(), RunError<D::Error>> {
    let live = subvolume.as_str();
    let swap = swap_name(live);
    for _ in 0..MAX_ROUNDS {
        let phase = Phase::of(&swap_state(disk, live)?, Uuid::nil());
        match plan_restore(false, phase) {
            RestoreAction::DeleteSwap => {
                obs.log(&format!("deleting {swap}, left over from an earlier run"));
                delete_swap(disk, obs, live, (Step::DeleteStale, Step::CommitStale))?;
            }
            _ => {
                if let Phase::LiveMissing { swap_present } = phase {
                    obs.log(&format!(
                        "warning: {live} is missing{}; left as it is for somebody to look at",
                        if swap_present {
                            format!(" and {swap} exists")
                        } else {
                            String::new()
                        }
                    ));
                }
                return Ok(());
            }
        }
    }
    let phase = Phase::of(&swap_state(disk, live)?, Uuid::nil());
    Err(RunError::Stuck {
        subvolume: live.to_owned(),
        phase,
    })
}

/// Delete what is under `live`'s swap name (`steps`: the deletion's and its commit's). What
/// cannot be deleted — whatever users made inside it, the deletion finds and removes by id, so
/// this is a filesystem refusing — must not keep the swap name taken for ever, or no later
/// boot could make a fresh `@root` or honour a restore: it is set aside under the stuck
/// name, the swap goes on, and the run says so (adr/0015).
fn delete_swap<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    live: &str,
    (delete, commit_step): (Step, Step),
) -> Result<(), RunError<D::Error>> {
    let swap = swap_name(live);
    let why = match disk.delete_tree(&swap) {
        Ok(done) => {
            log_deleted(obs, &swap, done);
            obs.after(delete);
            return commit(disk, obs, commit_step);
        }
        Err(why) => why,
    };
    let stuck = stuck_name(live);
    if disk.top_subvolume(&stuck).disk()?.is_some() {
        obs.log(&format!(
            "warning: {swap} cannot be deleted ({why}); moving it into {stuck}, which could not \
             be deleted either, so that {swap} is free"
        ));
        disk.move_into(&swap, &stuck).disk()?;
    } else {
        obs.log(&format!(
            "warning: {swap} cannot be deleted ({why}); setting it aside as {stuck} so that \
             {swap} is free"
        ));
        disk.rename(&swap, &stuck).disk()?;
    }
    obs.after(Step::SetAside);
    commit(disk, obs, Step::CommitSetAside)?;
    obs.left_behind(&format!("{stuck} (could not be deleted: {why})"));
    Ok(())
}

/// Try again to delete what an earlier run set aside under `live`'s stuck name. Failing again
/// is no failure of the run: it was set aside so that nothing waits for it.
fn retry_stuck<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    live: &str,
) -> Result<(), RunError<D::Error>> {
    let stuck = stuck_name(live);
    if disk.top_subvolume(&stuck).disk()?.is_none() {
        return Ok(());
    }
    obs.log(&format!(
        "deleting {stuck}, set aside by an earlier run that could not delete it"
    ));
    match disk.delete_tree(&stuck) {
        Ok(done) => {
            log_deleted(obs, &stuck, done);
            obs.after(Step::DeleteStale);
            commit(disk, obs, Step::CommitStale)
        }
        Err(why) => {
            obs.log(&format!(
                "warning: {stuck} still cannot be deleted ({why}); it stays set aside, and the \
                 next boot tries again"
            ));
            obs.left_behind(&format!("{stuck} (could not be deleted: {why})"));
            Ok(())
        }
    }
}

/// What a deletion took, when it took more than the one subvolume.
fn log_deleted<O: Observer>(obs: &mut O, name: &str, done: btrfs::TreeDeleted) {
    if done.deleted > 1 {
        obs.log(&format!(
            "deleted {name} and {} subvolumes nested in it (read-only ones made writable \
             first: {}; moved up first, their path being longer than the kernel takes: {})",
            done.deleted - 1,
            done.made_writable,
            done.moved_up
        ));
    }
}

fn commit<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    step: Step,
) -> Result<(), RunError<D::Error>> {
    disk.commit().disk()?;
    obs.after(step);
    Ok(())
}

/// Check a well-formed request against the disk (`Ok(Err(_))` is a refusal).
fn check<D: Disk>(
    disk: &mut D,
    request: &RestoreRequest,
) -> Result<Result<(), Refusal>, RunError<D::Error>> {
    let facts = disk.snapshot(&request.snapshot().to_string()).disk()?;
    let mut lives = Vec::new();
    for row in SUBVOLUMES {
        if let Some(s) = disk.top_subvolume(row.name).disk()? {
            let name = SubvolumeName::parse(row.name).expect("a layout row names itself");
            lives.push(LiveSubvolume {
                name,
                uuid: s.uuid,
                parent_uuid: s.parent_uuid,
            });
        }
    }
    let store = disk.store().disk()?;
    Ok(check_snapshot(request, facts, &lives, &store))
}

fn refuse<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    request: Option<RestoreRequest>,
    refusal: &Refusal,
    now: SystemTime,
) -> Result<(), RunError<D::Error>> {
    obs.log(&format!(
        "refusing the staged restore: {refusal}; nothing was changed"
    ));
    let outcome = Outcome::new(
        OutcomeResult::Refused,
        now,
        request,
        Reason::new(&refusal.to_string()),
    );
    disk.write_outcome(&outcome).disk()?;
    obs.after(Step::RefuseOutcome);
    disk.move_request_aside().disk()?;
    obs.after(Step::RefuseMoveAside);
    commit(disk, obs, Step::RefuseCommit)
}

/// Directories inside `subvolume` where other subvolumes are mounted (`.snapshots` in
/// `@persist`): a restored copy must have them, or the next mount fails.
pub fn mount_point_dirs(subvolume: SubvolumeName) -> Vec<String> {
    let Some(base) = subvolume.subvolume().mount_point else {
        return Vec::new();
    };
    let prefix = if base == "/" {
        "/".to_owned()
    } else {
        format!("{base}/")
    };
    SUBVOLUMES
        .iter()
        .filter(|row| row.name != subvolume.as_str())
        .filter_map(|row| row.mount_point?.strip_prefix(prefix.as_str()))
        .filter(|rel| !rel.is_empty())
        .map(str::to_owned)
        .collect()
}

/// What a wipe run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WipeReport {
    /// `@root` is a fresh copy of `@root-blank`.
    Wiped,
    /// `@root` was missing and was made from `@root-blank`.
    Created,
}

/// Make `@root` again from `@root-blank` (nested subvolumes of the old one are deleted too).
pub fn wipe_root<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
) -> Result<WipeReport, RunError<D::Error>> {
    let blank = disk
        .top_subvolume(ROOT_BLANK_SUBVOLUME)
        .disk()?
        .ok_or(RunError::BlankMissing)?;
    if !blank.readonly {
        obs.log(&format!(
            "warning: {ROOT_BLANK_SUBVOLUME} is writable; it should be read-only"
        ));
    }
    retry_stuck(disk, obs, ROOT_SUBVOLUME)?;
    let swap = swap_name(ROOT_SUBVOLUME);
    // Only a copy made by this run is known fresh: after a failed run the boot went on and
    // may have written to an exchanged-in copy.
    let mut fresh = false;
    let mut report = WipeReport::Wiped;
    for _ in 0..MAX_ROUNDS {
        let phase = Phase::of(&swap_state(disk, ROOT_SUBVOLUME)?, blank.uuid);
        match plan_wipe(phase, fresh) {
            WipeAction::Copy => {
                obs.log(&format!("copying {ROOT_BLANK_SUBVOLUME} to {swap}"));
                disk.copy(Source::Top(ROOT_BLANK_SUBVOLUME), &swap).disk()?;
                obs.after(Step::WipeCopy);
                commit(disk, obs, Step::WipeCommitCopy)?;
            }
            WipeAction::CopyToLive => {
                obs.log(&format!(
                    "{ROOT_SUBVOLUME} is missing; making it from {ROOT_BLANK_SUBVOLUME}"
                ));
                disk.copy(Source::Top(ROOT_BLANK_SUBVOLUME), ROOT_SUBVOLUME)
                    .disk()?;
                obs.after(Step::WipeCopy);
                commit(disk, obs, Step::WipeCommitCopy)?;
                fresh = true;
                report = WipeReport::Created;
            }
            WipeAction::Exchange => {
                obs.log(&format!("exchanging {ROOT_SUBVOLUME} and {swap}"));
                disk.exchange(ROOT_SUBVOLUME, &swap).disk()?;
                obs.after(Step::WipeExchange);
                commit(disk, obs, Step::WipeCommitExchange)?;
                fresh = true;
            }
            WipeAction::DeleteSwap => {
                obs.log(&format!("deleting {swap} ({phase})"));
                let steps = (Step::WipeDeleteOld, Step::WipeCommitDelete);
                delete_swap(disk, obs, ROOT_SUBVOLUME, steps)?;
            }
            WipeAction::Nothing => {
                obs.log(&format!(
                    "{ROOT_SUBVOLUME} is a fresh copy of {ROOT_BLANK_SUBVOLUME}"
                ));
                return Ok(report);
            }
        }
    }
    let phase = Phase::of(&swap_state(disk, ROOT_SUBVOLUME)?, blank.uuid);
    Err(RunError::Stuck {
        subvolume: ROOT_SUBVOLUME.to_owned(),
        phase,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is how a test reports
mod tests {
    use super::*;

    #[test]
    fn persist_needs_the_snapshots_mount_point() {
        let persist = SubvolumeName::parse("@persist").unwrap();
        assert_eq!(mount_point_dirs(persist), [".snapshots"]);
        assert!(mount_point_dirs(SubvolumeName::parse("@home").unwrap()).is_empty());
        assert!(mount_point_dirs(SubvolumeName::parse("@log").unwrap()).is_empty());
    }
}
