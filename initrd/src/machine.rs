//! The swap as a pure state machine: from what is on disk to the next thing to do.
//!
//! A swap replaces the subvolume under a live name (`@home`) by a writable copy of a source
//! (a snapshot, or `@root-blank`) in three durable moves, each followed by a commit:
//!
//! 1. copy the source to the swap name (`@home.tacid-swap`);
//! 2. `RENAME_EXCHANGE` the live name and the swap name: the live name never disappears,
//!    and the replaced subvolume is now under the swap name;
//! 3. delete what is under the swap name.
//!
//! The disk alone says how far a swap got, so a run after a power cut finishes it. Both names
//! exist between moves 1 and 3, and they hold the copy and the replaced subvolume in one
//! order or the other. Which one is which is told by the subvolume ids: Btrfs gives every
//! new subvolume an id above every existing one, and the copy was made while the replaced
//! subvolume existed, so the copy has the higher id. The copy's parent UUID (the source's
//! UUID) says whether the copy belongs to *this* swap (adr/0007).
//!
//! A restore of several members (a set) is one swap per member, moved on together so that
//! the machine sees all of them put back or none ([`plan_set`]): every copy is made before
//! the first exchange, and once one member is exchanged the others are exchanged too.

use std::fmt;

use uuid::Uuid;

/// What Btrfs says about a subvolume, as far as the swap cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subvol {
    pub id: u64,
    pub uuid: Uuid,
    pub parent_uuid: Option<Uuid>,
    pub readonly: bool,
    /// The transaction that last changed it, and the one that made it: a read-only snapshot
    /// holds what its source holds now exactly when the source's `generation` is not past
    /// the snapshot's `created_generation` (a snapshot changes its source's generation to
    /// its own; a rename, an exchange included, changes neither).
    pub generation: u64,
    pub created_generation: u64,
}

/// The two names of one swap, as found on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapState {
    pub live: Option<Subvol>,
    pub swap: Option<Subvol>,
}

/// How far a swap from a source with a given UUID got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Only the live name: nothing of a swap on disk.
    NotStarted,
    /// The swap name holds a copy of this source, made after the live subvolume: exchange next.
    CopyMade,
    /// The live name holds the copy of this source, the swap name the replaced subvolume.
    Exchanged,
    /// The swap name holds something that is not part of a swap from this source (an abandoned
    /// swap for another request): it is deleted, the live name untouched.
    Stale,
    /// The live name is missing. Nothing a swap did can cause this (the live name always
    /// exists); somebody must look. `swap_present` says whether the swap name exists.
    LiveMissing { swap_present: bool },
}

impl Phase {
    /// Read the phase of a swap from `source` off the disk.
    pub fn of(state: &SwapState, source: Uuid) -> Phase {
        let Some(live) = state.live else {
            return Phase::LiveMissing {
                swap_present: state.swap.is_some(),
            };
        };
        let Some(swap) = state.swap else {
            return Phase::NotStarted;
        };
        if swap.id > live.id && swap.parent_uuid == Some(source) {
            Phase::CopyMade
        } else if swap.id < live.id && live.parent_uuid == Some(source) {
            Phase::Exchanged
        } else {
            Phase::Stale
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::NotStarted => "not started",
            Phase::CopyMade => "copy made, not yet exchanged",
            Phase::Exchanged => "exchanged, the replaced subvolume not yet deleted",
            Phase::Stale => "a leftover from an abandoned swap under the swap name",
            Phase::LiveMissing { .. } => "the live subvolume is missing",
        })
    }
}

/// What a restore does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreAction {
    /// Check the request; if good, copy the snapshot to the swap name.
    CheckAndCopy,
    /// Check the request again (nothing is final before the exchange); if good, exchange.
    CheckAndExchange,
    /// Write the outcome "done" and remove the request.
    Finish,
    /// Delete what is under the swap name (the replaced subvolume, or a leftover).
    DeleteSwap,
    /// Refuse the request: the live subvolume is missing.
    RefuseLiveMissing,
    /// Nothing (more) to do for this subvolume.
    Nothing,
}

/// The restore's state machine. `requested` is true when a parsed request names this
/// subvolume and this source; `phase` is read with the request's snapshot UUID as source
/// (with any UUID when there is no request: then every swap leftover is stale or finished).
pub fn plan_restore(requested: bool, phase: Phase) -> RestoreAction {
    match (requested, phase) {
        (true, Phase::NotStarted) => RestoreAction::CheckAndCopy,
        (true, Phase::CopyMade) => RestoreAction::CheckAndExchange,
        (true, Phase::Exchanged) => RestoreAction::Finish,
        (true, Phase::Stale) => RestoreAction::DeleteSwap,
        (true, Phase::LiveMissing { .. }) => RestoreAction::RefuseLiveMissing,
        // No request (any more): the request is removed only after the exchange is durable,
        // so whatever is under the swap name is the replaced subvolume or an abandoned copy.
        (false, Phase::CopyMade | Phase::Exchanged | Phase::Stale) => RestoreAction::DeleteSwap,
        (false, Phase::NotStarted) => RestoreAction::Nothing,
        // Never delete anything when the live name is gone: the swap name may hold the data.
        (false, Phase::LiveMissing { .. }) => RestoreAction::Nothing,
    }
}

/// What a restore of a set does next, while its request is staged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetAction {
    /// Delete what is under member `i`'s swap name: not a copy for this request (a leftover
    /// of an abandoned one).
    DeleteStale(usize),
    /// Check every member; if all are good, copy the snapshot of each member that has no
    /// copy yet, in order.
    CheckAndCopy,
    /// Every member has its copy and none is exchanged: check every member again (nothing is
    /// final before the first exchange); if all are good, exchange each, in order.
    CheckAndExchange,
    /// Some member is exchanged and member `i` holds its copy: exchange it, with no new check
    /// (its parent UUID says it is the copy of the chosen snapshot, and a set half put back
    /// is finished, never left so).
    RollForward(usize),
    /// Every member is exchanged: write the outcome "done" and remove the request.
    Finish,
    /// Some member is exchanged and member `i` has no copy to exchange (or its live name is
    /// missing), which the order of the steps never leaves: exchange the exchanged members
    /// back, then refuse the request.
    Undo(usize),
    /// No member is exchanged and member `i`'s live subvolume is missing: refuse.
    RefuseLiveMissing(usize),
}

/// The set restore's state machine: `phases` are the members' phases, in the request's order,
/// each read with its own snapshot's UUID as source. For one member it is [`plan_restore`]
/// with a request.
pub fn plan_set(phases: &[Phase]) -> SetAction {
    let exchanged = |p: &Phase| *p == Phase::Exchanged;
    if phases.iter().any(exchanged) {
        if phases.iter().all(exchanged) {
            return SetAction::Finish;
        }
        if let Some(i) = phases
            .iter()
            .position(|p| !exchanged(p) && *p != Phase::CopyMade)
        {
            return SetAction::Undo(i);
        }
        if let Some(i) = phases.iter().position(|p| *p == Phase::CopyMade) {
            return SetAction::RollForward(i);
        }
    }
    if let Some(i) = phases
        .iter()
        .position(|p| matches!(p, Phase::LiveMissing { .. }))
    {
        return SetAction::RefuseLiveMissing(i);
    }
    if let Some(i) = phases.iter().position(|p| *p == Phase::Stale) {
        return SetAction::DeleteStale(i);
    }
    if phases.contains(&Phase::NotStarted) {
        return SetAction::CheckAndCopy;
    }
    SetAction::CheckAndExchange
}

/// What a wipe of `@root` does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WipeAction {
    /// Copy the blank root to the swap name.
    Copy,
    /// `@root` is missing: copy the blank root straight to `@root`.
    CopyToLive,
    Exchange,
    DeleteSwap,
    Nothing,
}

/// The wipe's state machine. `fresh` is true once this run exchanged in a fresh copy, or
/// found one exchanged in by a run that was cut short (nothing runs between the two).
pub fn plan_wipe(phase: Phase, fresh: bool) -> WipeAction {
    match phase {
        Phase::NotStarted if fresh => WipeAction::Nothing,
        Phase::NotStarted => WipeAction::Copy,
        Phase::CopyMade => WipeAction::Exchange,
        Phase::Exchanged | Phase::Stale => WipeAction::DeleteSwap,
        Phase::LiveMissing { swap_present: true } => WipeAction::DeleteSwap,
        Phase::LiveMissing {
            swap_present: false,
        } => WipeAction::CopyToLive,
    }
}

/// The swap name for a live name: beside it at the top level, never a layout name.
pub fn swap_name(live: &str) -> String {
    format!("{live}{}", layout::SWAP_SUFFIX)
}

/// Where a subvolume under the swap name goes when it cannot be deleted, so that the swap
/// name is free for the next swap: one name per live name, beside it. A second leftover that
/// cannot go either is moved inside the first, so the names never grow in number; every run
/// tries to delete the whole of it again (adr/0015).
pub fn stuck_name(live: &str) -> String {
    format!("{live}{}", layout::STUCK_SUFFIX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is how a test reports
mod tests {
    use super::*;

    fn sv(id: u64, uuid: u128, parent: Option<u128>) -> Subvol {
        Subvol {
            id,
            uuid: Uuid::from_u128(uuid),
            parent_uuid: parent.map(Uuid::from_u128),
            readonly: false,
            generation: 1,
            created_generation: 1,
        }
    }

    const SRC: u128 = 99;

    #[test]
    fn phases_from_ids_and_parents() {
        let src = Uuid::from_u128(SRC);
        let live = sv(256, 1, None);
        let copy = sv(300, 2, Some(SRC));
        let st = |live, swap| SwapState { live, swap };
        assert_eq!(Phase::of(&st(Some(live), None), src), Phase::NotStarted);
        assert_eq!(Phase::of(&st(Some(live), Some(copy)), src), Phase::CopyMade);
        assert_eq!(
            Phase::of(&st(Some(copy), Some(live)), src),
            Phase::Exchanged
        );
        // A copy of another source, either way round, is a leftover.
        let other = sv(300, 3, Some(7));
        assert_eq!(Phase::of(&st(Some(live), Some(other)), src), Phase::Stale);
        assert_eq!(Phase::of(&st(Some(other), Some(live)), src), Phase::Stale);
        assert_eq!(
            Phase::of(&st(None, Some(copy)), src),
            Phase::LiveMissing { swap_present: true }
        );
    }

    #[test]
    fn restoring_the_same_snapshot_again_is_told_apart_by_ids() {
        // The live subvolume was itself made from SRC by an earlier restore.
        let src = Uuid::from_u128(SRC);
        let live = sv(256, 1, Some(SRC));
        let copy = sv(300, 2, Some(SRC));
        let st = |live, swap| SwapState {
            live: Some(live),
            swap: Some(swap),
        };
        assert_eq!(Phase::of(&st(live, copy), src), Phase::CopyMade);
        assert_eq!(Phase::of(&st(copy, live), src), Phase::Exchanged);
    }

    const ALL_PHASES: [Phase; 6] = [
        Phase::NotStarted,
        Phase::CopyMade,
        Phase::Exchanged,
        Phase::Stale,
        Phase::LiveMissing {
            swap_present: false,
        },
        Phase::LiveMissing { swap_present: true },
    ];

    #[test]
    fn a_set_of_one_is_planned_as_one_swap() {
        for phase in ALL_PHASES {
            let one = match plan_set(&[phase]) {
                SetAction::DeleteStale(0) => RestoreAction::DeleteSwap,
                SetAction::CheckAndCopy => RestoreAction::CheckAndCopy,
                SetAction::CheckAndExchange => RestoreAction::CheckAndExchange,
                SetAction::Finish => RestoreAction::Finish,
                SetAction::RefuseLiveMissing(0) => RestoreAction::RefuseLiveMissing,
                other => panic!("{phase}: {other:?}"),
            };
            assert_eq!(one, plan_restore(true, phase), "{phase}");
        }
    }

    #[test]
    fn a_set_is_finished_once_a_member_is_exchanged_and_undone_only_without_copies() {
        use Phase::*;
        let missing = LiveMissing {
            swap_present: false,
        };
        let cases: &[(&[Phase], SetAction)] = &[
            (
                &[NotStarted, NotStarted, NotStarted],
                SetAction::CheckAndCopy,
            ),
            (&[CopyMade, NotStarted, NotStarted], SetAction::CheckAndCopy),
            (&[CopyMade, CopyMade, CopyMade], SetAction::CheckAndExchange),
            (&[CopyMade, Stale, NotStarted], SetAction::DeleteStale(1)),
            (&[CopyMade, Stale, missing], SetAction::RefuseLiveMissing(2)),
            (&[Exchanged, CopyMade, CopyMade], SetAction::RollForward(1)),
            (&[Exchanged, Exchanged, CopyMade], SetAction::RollForward(2)),
            (&[CopyMade, Exchanged], SetAction::RollForward(0)),
            (&[Exchanged, Exchanged, Exchanged], SetAction::Finish),
            (&[Exchanged, NotStarted, CopyMade], SetAction::Undo(1)),
            (&[Exchanged, CopyMade, Stale], SetAction::Undo(2)),
            (&[Exchanged, missing], SetAction::Undo(1)),
        ];
        for (phases, action) in cases {
            assert_eq!(plan_set(phases), *action, "{phases:?}");
        }
        // Whatever the phases, a member is never exchanged while another has no copy, and
        // nothing is checked or copied once one is exchanged.
        for a in ALL_PHASES {
            for b in ALL_PHASES {
                for c in ALL_PHASES {
                    let phases = [a, b, c];
                    let action = plan_set(&phases);
                    if let SetAction::RollForward(i) | SetAction::DeleteStale(i) = action {
                        assert!(i < 3);
                    }
                    let any_exchanged = phases.contains(&Exchanged);
                    let others_copied = phases.iter().all(|p| matches!(p, Exchanged | CopyMade));
                    match action {
                        SetAction::RollForward(_) | SetAction::Finish => {
                            assert!(any_exchanged && others_copied, "{phases:?}")
                        }
                        SetAction::Undo(_) => {
                            assert!(any_exchanged && !others_copied, "{phases:?}")
                        }
                        _ => assert!(!any_exchanged, "{phases:?}: {action:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn nothing_is_deleted_when_the_live_name_is_gone() {
        for requested in [true, false] {
            let action = plan_restore(requested, Phase::LiveMissing { swap_present: true });
            assert_ne!(action, RestoreAction::DeleteSwap);
        }
        assert_eq!(swap_name("@home"), "@home.tacid-swap");
        assert_eq!(stuck_name("@root"), "@root.tacid-stuck");
    }
}
