//! The two jobs, driven step by step over any [`Disk`]: the real filesystem and the model
//! run this same code.

use std::fmt;
use std::time::SystemTime;

use layout::human::bytes;
use layout::origin::LiveSubvolume;
use layout::{
    Outcome, OutcomeResult, Reason, Replaced, RestoreMember, RestoreRequest, SnapshotName,
    SubvolumeName, ROOT_BLANK_SUBVOLUME, ROOT_SUBVOLUME, SNAPSHOTS_SUBVOLUME, SUBVOLUMES,
};
use uuid::Uuid;

use crate::disk::{Disk, ReadFailure, RequestFile, Source};
use crate::machine::{
    plan_restore, plan_set, plan_wipe, stuck_name, swap_name, Phase, RestoreAction, SetAction,
    SwapState, WipeAction,
};
use crate::steps::Step;
use crate::validate::{check_snapshot, judge_request_file, RequestRefusal};

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
    /// The request file is there but could not be read: nothing was changed.
    RequestUnreadable(String),
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
            RunError::RequestUnreadable(e) => write!(
                f,
                "the staged request could not be read ({e}); nothing was changed, it stays \
                 staged, and the next boot reads it again"
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
    /// The request was honoured, every member of it (by this run, or finished by it after a
    /// cut-short run).
    Restored(RestoreRequest),
    /// The request was refused; no member was swapped. `request` is the request, when it
    /// parsed.
    Refused {
        refusal: RequestRefusal,
        request: Option<RestoreRequest>,
    },
}

/// No swap takes more rounds than this per member (copy, exchange, finish, delete, and a
/// leftover).
const MAX_ROUNDS: usize = 8;

/// Honour the staged restore request, if any, and clean up what cut-short runs left.
/// `hard_floor`: below this many free bytes the subvolumes a restore replaces are deleted, not
/// kept (adr/0027).
pub fn restore_data<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    now: SystemTime,
    hard_floor: u64,
) -> Result<RestoreReport, RunError<D::Error>> {
    remove_leftover_temps(disk, obs);
    for subvolume in SubvolumeName::restorable() {
        retry_stuck(disk, obs, subvolume.as_str())?;
    }
    let file = disk.request().disk()?;
    // A request that is there but cannot be read now (EIO) is not a bad request: refusing it
    // and cleaning up would delete what a cut-short set left under its swap names, and with
    // it the way to finish the set. Nothing is touched; the next boot reads it again.
    if let RequestFile::Present {
        bytes: Err(ReadFailure::Io(e)),
        ..
    } = &file
    {
        return Err(RunError::RequestUnreadable(e.clone()));
    }
    let report = match judge_request_file(&file) {
        None => {
            obs.log("no restore is staged");
            RestoreReport::NothingStaged
        }
        Some(Err(refusal)) => {
            refuse(disk, obs, None, &refusal, now)?;
            RestoreReport::Refused {
                refusal,
                request: None,
            }
        }
        Some(Ok(request)) => {
            obs.log(&staged_words(&request));
            restore_set(disk, obs, &request, now, hard_floor)?
        }
    };
    for subvolume in SubvolumeName::restorable() {
        clean_leftovers(disk, obs, subvolume)?;
    }
    Ok(report)
}

/// A durable write cut short between its temporary file and its rename leaves that file; in
/// an initrd the pid, and so the name, repeats at the next boot. They go before this run
/// writes anything (its own writes would step over them anyway). A failure only costs the
/// space of a small file, so it is said and the run goes on.
fn remove_leftover_temps<D: Disk, O: Observer>(disk: &mut D, obs: &mut O) {
    match disk.remove_leftover_temps() {
        Ok(names) => {
            for name in names {
                obs.log(&format!(
                    "removed {SNAPSHOTS_SUBVOLUME}/{name}, the temporary file of a write an \
                     earlier run was cut short in (before its rename)"
                ));
            }
        }
        Err(e) => obs.log(&format!(
            "warning: cannot remove the temporary files earlier runs left in \
             {SNAPSHOTS_SUBVOLUME} ({e}); they stay, and block nothing"
        )),
    }
}

/// The log line that says what is staged, every member named.
fn staged_words(request: &RestoreRequest) -> String {
    let each = |m: &RestoreMember| format!("{} (UUID {})", m.snapshot(), m.uuid());
    match request.members() {
        [m] => format!(
            "a restore is staged: put {} back to {}",
            m.subvolume(),
            each(m)
        ),
        members => format!(
            "a restore of {} subvolumes is staged, all of them together or none: put {}",
            members.len(),
            members
                .iter()
                .map(|m| format!("{} back to {}", m.subvolume(), each(m)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn swap_state<D: Disk>(disk: &mut D, live: &str) -> Result<SwapState, RunError<D::Error>> {
    Ok(SwapState {
        live: disk.top_subvolume(live).disk()?,
        swap: disk.top_subvolume(&swap_name(live)).disk()?,
    })
}

/// Each member's phase, in the request's order, read with its own snapshot's UUID.
fn phases<D: Disk>(
    disk: &mut D,
    request: &RestoreRequest,
) -> Result<Vec<Phase>, RunError<D::Error>> {
    request
        .members()
        .iter()
        .map(|m| {
            Ok(Phase::of(
                &swap_state(disk, m.subvolume().as_str())?,
                m.uuid(),
            ))
        })
        .collect()
}

/// Honour a well-formed request: every member put back, or none (adr/0007, adr/0005).
///
/// While the request is staged, [`plan_set`] decides from every member's phase: each
/// snapshot is checked and copied before any member is exchanged; all are checked again and
/// exchanged in the request's order, a commit after each; once one is exchanged the rest are
/// exchanged without a new check, so a run cut short anywhere is finished by the next one.
/// Then the outcome names every member, the request is removed, and each replaced subvolume
/// is deleted. A set of one takes exactly the steps of [`Step::RESTORE`].
///
/// Before the first exchange, a member that fails its check refuses the whole request (the
/// copies are then deleted as leftovers). A member found exchanged while another has no copy
/// to follow it (which these steps never leave; the disk is untrusted) is exchanged back
/// (steps 18, 19) and the request refused; a power cut during that leaves no member
/// exchanged, and the next run starts the set over, all members or none.
fn restore_set<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    request: &RestoreRequest,
    now: SystemTime,
    hard_floor: u64,
) -> Result<RestoreReport, RunError<D::Error>> {
    let members = request.members();
    let mut requested = true;
    for _ in 0..MAX_ROUNDS * members.len() {
        let phases = phases(disk, request)?;
        if !requested {
            // Done and recorded: what is under the swap names is what the exchanges replaced.
            let Some((member, phase)) = members
                .iter()
                .zip(&phases)
                .find(|(_, p)| plan_restore(false, **p) == RestoreAction::DeleteSwap)
            else {
                obs.log(&put_back_words(request));
                return Ok(RestoreReport::Restored(request.clone()));
            };
            let live = member.subvolume().as_str();
            let steps = match phase {
                Phase::Exchanged => (Step::RestoreDeleteOld, Step::RestoreCommitDelete),
                _ => (Step::DeleteStale, Step::CommitStale),
            };
            obs.log(&format!("deleting {} ({phase})", swap_name(live)));
            delete_swap(disk, obs, live, steps)?;
            continue;
        }
        match plan_set(&phases) {
            SetAction::DeleteStale(i) => {
                let live = members[i].subvolume().as_str();
                obs.log(&format!("deleting {} ({})", swap_name(live), phases[i]));
                delete_swap(disk, obs, live, (Step::DeleteStale, Step::CommitStale))?;
            }
            SetAction::CheckAndCopy => {
                if let Err(refusal) = check(disk, request)? {
                    return refused(disk, obs, request, refusal, now);
                }
                if members.len() > 1 {
                    obs.log(&format!(
                        "every member checks out against the disk ({}); copying each snapshot \
                         before any is exchanged",
                        request.subvolumes()
                    ));
                }
                for (m, phase) in members.iter().zip(&phases) {
                    if *phase != Phase::NotStarted {
                        continue;
                    }
                    let snapshot = m.snapshot().to_string();
                    let swap = swap_name(m.subvolume().as_str());
                    obs.log(&format!("copying snapshot {snapshot} to {swap}"));
                    disk.copy(Source::Snapshot(&snapshot), &swap).disk()?;
                    obs.after(Step::RestoreCopy);
                    commit(disk, obs, Step::RestoreCommitCopy)?;
                }
            }
            SetAction::CheckAndExchange => {
                match members {
                    [m] => obs.log(&format!(
                        "{} holds the copy of {}; checking the request again",
                        swap_name(m.subvolume().as_str()),
                        m.snapshot()
                    )),
                    _ => obs.log(&format!(
                        "every member's copy is made ({}); checking the request again before \
                         the first exchange",
                        members
                            .iter()
                            .map(|m| swap_name(m.subvolume().as_str()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                }
                if let Err(refusal) = check(disk, request)? {
                    return refused(disk, obs, request, refusal, now);
                }
                for m in members {
                    if let Err(error) = exchange(disk, obs, m) {
                        return Err(back_out_after_error(disk, obs, request, m, error));
                    }
                }
            }
            SetAction::RollForward(i) => {
                let m = &members[i];
                obs.log(&format!(
                    "{} exchanged already and {} holds the copy of {}: exchanging it without a \
                     new check, so that the set is put back whole",
                    exchanged_names(members, &phases).join(", "),
                    swap_name(m.subvolume().as_str()),
                    m.snapshot()
                ));
                if let Err(error) = exchange(disk, obs, m) {
                    return Err(back_out_after_error(disk, obs, request, m, error));
                }
            }
            SetAction::Finish => {
                let replaced = keep_replaced(disk, obs, request, now, hard_floor)?;
                let outcome = Outcome::new(
                    OutcomeResult::Done,
                    now,
                    Some(request.clone()),
                    Reason::new(&done_reason(request, &replaced)),
                )
                .with_replaced(replaced.members);
                match members {
                    [m] => obs.log(&format!(
                        "{} is now the copy of {}; recording the outcome",
                        m.subvolume(),
                        m.snapshot()
                    )),
                    _ => obs.log(&format!(
                        "every member is exchanged ({}); recording the outcome",
                        members
                            .iter()
                            .map(|m| format!("{} is the copy of {}", m.subvolume(), m.snapshot()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                }
                disk.write_outcome_temp(&outcome).disk()?;
                obs.after(Step::RestoreOutcomeTemp);
                disk.put_outcome().disk()?;
                obs.after(Step::RestoreOutcome);
                disk.remove_request().disk()?;
                obs.after(Step::RestoreRemoveRequest);
                commit(disk, obs, Step::RestoreCommitRequest)?;
                requested = false;
            }
            SetAction::Undo(i) => {
                let exchanged = exchanged_names(members, &phases);
                let refusal = RequestRefusal::HalfExchanged {
                    exchanged: members
                        .iter()
                        .zip(&phases)
                        .filter(|(_, p)| **p == Phase::Exchanged)
                        .map(|(m, _)| m.subvolume())
                        .collect(),
                    member: members[i].subvolume(),
                    live_missing: matches!(phases[i], Phase::LiveMissing { .. }),
                };
                obs.log(&format!(
                    "warning: {} exchanged already, but {} ({}); exchanging back what was \
                     exchanged, so that no member is put back",
                    exchanged.join(", "),
                    members[i].subvolume(),
                    phases[i]
                ));
                exchange_back(disk, obs, members, &phases)?;
                return refused(disk, obs, request, refusal, now);
            }
            SetAction::RefuseLiveMissing(i) => {
                let refusal = RequestRefusal::LiveMissing(members[i].subvolume());
                return refused(disk, obs, request, refusal, now);
            }
        }
    }
    let (member, phase) = match phases(disk, request)?
        .into_iter()
        .zip(members)
        .find(|(p, _)| *p != Phase::NotStarted)
    {
        Some((p, m)) => (m.subvolume(), p),
        None => (members[0].subvolume(), Phase::NotStarted),
    };
    Err(RunError::Stuck {
        subvolume: member.as_str().to_owned(),
        phase,
    })
}

/// An exchange of `failed` went wrong (a disk error; a power cut ends the run before this).
/// The boot goes on after a failed unit (adr/0007), so it must not go on with some members
/// put back and others not: the members found exchanged are exchanged back, newest first, a
/// commit after each, and the request stays staged for the next boot, which starts the set
/// over from its copies. Only when that fails too does the boot run on a mix, and the log
/// says so; the next boot finishes the set (it rolls forward). Returns the first error.
fn back_out_after_error<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    request: &RestoreRequest,
    failed: &RestoreMember,
    error: RunError<D::Error>,
) -> RunError<D::Error>
where
    D::Error: fmt::Display,
{
    let members = request.members();
    let undo = |disk: &mut D, obs: &mut O| -> Result<Vec<&'static str>, RunError<D::Error>> {
        let phases = phases(disk, request)?;
        let exchanged = exchanged_names(members, &phases);
        if exchanged.is_empty() || exchanged.len() == members.len() {
            // None put back, or all: no mix to undo.
            return Ok(Vec::new());
        }
        obs.log(&format!(
            "warning: exchanging {} failed ({error}) with {} exchanged already; exchanging \
             back, so that this boot runs on none of the set and the next boot tries it again",
            failed.subvolume(),
            exchanged.join(", ")
        ));
        exchange_back(disk, obs, members, &phases)?;
        Ok(exchanged)
    };
    match undo(disk, obs) {
        Ok(undone) if !undone.is_empty() => obs.log(&format!(
            "{} exchanged back: none of {} is put back at this boot; the request stays staged",
            undone.join(", "),
            request.subvolumes()
        )),
        Ok(_) => {}
        Err(second) => obs.log(&format!(
            "error: the exchange back failed too ({second}): this boot runs with part of the \
             set put back ({}); the next boot finishes it before the root is mounted",
            request.subvolumes()
        )),
    }
    error
}

/// Exchanges back the members found exchanged, newest first, a commit after each.
fn exchange_back<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    members: &[RestoreMember],
    phases: &[Phase],
) -> Result<(), RunError<D::Error>> {
    for (m, _) in members
        .iter()
        .zip(phases)
        .rev()
        .filter(|(_, p)| **p == Phase::Exchanged)
    {
        let live = m.subvolume().as_str();
        let swap = swap_name(live);
        obs.log(&format!("exchanging {live} and {swap} back"));
        disk.exchange(live, &swap).disk()?;
        obs.after(Step::RestoreUndo);
        commit(disk, obs, Step::RestoreCommitUndo)?;
    }
    Ok(())
}

/// The members found exchanged, by name.
fn exchanged_names(members: &[RestoreMember], phases: &[Phase]) -> Vec<&'static str> {
    members
        .iter()
        .zip(phases)
        .filter(|(_, p)| **p == Phase::Exchanged)
        .map(|(m, _)| m.subvolume().as_str())
        .collect()
}

/// Make the member's mount points in its copy, exchange it in, commit.
fn exchange<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    member: &RestoreMember,
) -> Result<(), RunError<D::Error>> {
    let live = member.subvolume().as_str();
    let swap = swap_name(live);
    for dir in mount_point_dirs(member.subvolume()) {
        obs.log(&format!("making mount point {dir} in {swap}"));
        disk.ensure_dir(&swap, &dir).disk()?;
    }
    obs.after(Step::RestorePrepare);
    obs.log(&format!("exchanging {live} and {swap}"));
    disk.exchange(live, &swap).disk()?;
    obs.after(Step::RestoreExchange);
    commit(disk, obs, Step::RestoreCommitExchange)
}

/// Refuse the whole request (it names every member) and say so.
fn refused<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    request: &RestoreRequest,
    refusal: RequestRefusal,
    now: SystemTime,
) -> Result<RestoreReport, RunError<D::Error>> {
    refuse(disk, obs, Some(request.clone()), &refusal, now)?;
    Ok(RestoreReport::Refused {
        refusal,
        request: Some(request.clone()),
    })
}

/// What a run did with the subvolumes the exchanges replaced.
struct KeptReplaced {
    members: Vec<Replaced>,
    /// Set when they were deleted: the free bytes and the floor.
    below_floor: Option<(u64, u64)>,
}

/// Keep what each exchange replaced (now under the member's swap name) as a read-only
/// snapshot in the store, named by the layout's grammar at this boot's time; all of a set
/// under one time stamp (adr/0027). A snapshot made by a run that was cut short is found again
/// by what only it can be: a read-only subvolume in the store whose parent UUID is the
/// replaced subvolume's, whose id is above the live copy's (made after the copy), and which
/// holds what the replaced subvolume holds now (nothing written to it since the snapshot was
/// made: no generation past the snapshot's). A snapshot the stem took of it while a run that
/// stopped with an error left the copy waiting, with writes after, is not one: what the
/// subvolume held at this boot is kept anew. Once one is kept the rest of the set is kept too, whatever the free
/// space says now; with none kept yet and the disk below `hard_floor`, none is kept and the
/// replaced subvolumes are deleted as before.
fn keep_replaced<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    request: &RestoreRequest,
    now: SystemTime,
    hard_floor: u64,
) -> Result<KeptReplaced, RunError<D::Error>> {
    let members = request.members();
    let store = disk.store().disk()?;
    let mut kept: Vec<Option<SnapshotName>> = Vec::new();
    for m in members {
        let state = swap_state(disk, m.subvolume().as_str())?;
        let (Some(live), Some(old)) = (state.live, state.swap) else {
            kept.push(None);
            continue;
        };
        let found = store
            .iter()
            .filter(|(_, s)| {
                s.readonly
                    && s.parent_uuid == Some(old.uuid)
                    && s.id > live.id
                    && s.created_generation >= old.generation
            })
            .filter_map(|(name, _)| SnapshotName::parse(name).ok())
            .find(|name| name.subvolume() == m.subvolume());
        kept.push(found);
    }
    if kept.iter().all(Option::is_none) {
        match disk.free_bytes() {
            Ok(free) if free < hard_floor => {
                obs.log(&format!(
                    "the disk has {} free, below the hard floor of {}: the replaced {} {} \
                     deleted, not kept (an undo of this restore will not be possible)",
                    bytes(free),
                    bytes(hard_floor),
                    if members.len() == 1 {
                        "subvolume"
                    } else {
                        "subvolumes"
                    },
                    if members.len() == 1 { "is" } else { "are" },
                ));
                return Ok(KeptReplaced {
                    members: members
                        .iter()
                        .map(|m| Replaced {
                            subvolume: m.subvolume(),
                            kept: None,
                        })
                        .collect(),
                    below_floor: Some((free, hard_floor)),
                });
            }
            Ok(_) => {}
            // Keeping costs no space now; not knowing is no reason to lose the way back.
            Err(e) => obs.log(&format!(
                "warning: cannot read the free space ({e}); keeping the replaced subvolumes"
            )),
        }
    }
    // One time for the whole set: that of a snapshot kept already, or this boot's.
    let when = kept
        .iter()
        .flatten()
        .next()
        .map_or(now, SnapshotName::taken);
    let mut taken: Vec<String> = store.iter().map(|(n, _)| n.clone()).collect();
    let mut out = Vec::new();
    for (m, found) in members.iter().zip(kept) {
        let live = m.subvolume().as_str();
        let name = match found {
            Some(name) => name,
            None => {
                let mut name = SnapshotName::new(m.subvolume(), when)
                    .expect("a restorable subvolume is snapshotted, and the time is after 1970");
                while taken.contains(&name.to_string()) {
                    name = name.next();
                }
                let swap = swap_name(live);
                obs.log(&format!(
                    "keeping {swap} (what {} held before this restore) as the read-only \
                     snapshot {name}",
                    m.subvolume().display_path()
                ));
                disk.keep(&swap, &name.to_string()).disk()?;
                taken.push(name.to_string());
                obs.after(Step::RestoreKeep);
                commit(disk, obs, Step::RestoreCommitKeep)?;
                name
            }
        };
        out.push(Replaced {
            subvolume: m.subvolume(),
            kept: Some(name),
        });
    }
    Ok(KeptReplaced {
        members: out,
        below_floor: None,
    })
}

/// What the outcome "done" says.
fn done_reason(request: &RestoreRequest, replaced: &KeptReplaced) -> String {
    let put_back = request
        .members()
        .iter()
        .map(|m| format!("{} was put back to {}", m.subvolume(), m.snapshot()))
        .collect::<Vec<_>>()
        .join(", ");
    let paths = request
        .members()
        .iter()
        .map(|m| m.subvolume().display_path().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let together = if request.members().len() > 1 {
        ", together, in one boot"
    } else {
        ""
    };
    if let Some((free, floor)) = replaced.below_floor {
        return format!(
            "{put_back}{together}; everything written to {paths} after that is gone: the disk \
             had {} free, below the hard floor of {}, so what was replaced was deleted, not \
             kept",
            bytes(free),
            bytes(floor)
        );
    }
    let kept = replaced
        .members
        .iter()
        .filter_map(|r| r.kept.map(|k| k.to_string()))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{put_back}{together}; what {paths} held before is kept, read-only, as {kept} until \
         retention deletes it (an undo is a restore of it)"
    )
}

/// The log line at the end of an honoured request.
fn put_back_words(request: &RestoreRequest) -> String {
    request
        .members()
        .iter()
        .map(|m| format!("{} was put back to {}", m.subvolume(), m.snapshot()))
        .collect::<Vec<_>>()
        .join(", ")
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

/// Check every member of a well-formed request against the disk (`Ok(Err(_))` is a
/// refusal: the first member that fails, in the request's order).
fn check<D: Disk>(
    disk: &mut D,
    request: &RestoreRequest,
) -> Result<Result<(), RequestRefusal>, RunError<D::Error>> {
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
    for member in request.members() {
        let facts = disk.snapshot(&member.snapshot().to_string()).disk()?;
        if let Err(refusal) = check_snapshot(member, facts, &lives, &store) {
            return Ok(Err(refusal));
        }
    }
    Ok(Ok(()))
}

fn refuse<D: Disk, O: Observer>(
    disk: &mut D,
    obs: &mut O,
    request: Option<RestoreRequest>,
    refusal: &RequestRefusal,
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
    disk.write_outcome_temp(&outcome).disk()?;
    obs.after(Step::RefuseOutcomeTemp);
    disk.put_outcome().disk()?;
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
