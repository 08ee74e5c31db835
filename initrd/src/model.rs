//! A model of the disk for the property tests: subvolumes by name with ids, UUIDs, parent
//! UUIDs and contents, and a power cut that keeps what was committed, any prefix of what was
//! not (a Btrfs transaction commits in order), and whatever was fsynced through the log.
//!
//! The driver under test is the real one (`crate::driver`); only the disk is modelled.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use btrfs::{FileKind, TreeDeleted};
use layout::{Outcome, SubvolumeName};
use uuid::Uuid;

use crate::disk::{Disk, FileFacts, ReadFailure, RequestFile, SnapshotFacts, Source};
use crate::machine::Subvol;

/// One subvolume; `content` is the history of writes it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MSub {
    pub id: u64,
    pub uuid: Uuid,
    pub parent_uuid: Option<Uuid>,
    pub readonly: bool,
    pub content: Vec<u32>,
    pub dirs: BTreeSet<String>,
    pub nested: Vec<MSub>,
    /// The filesystem refuses to delete it (what no user can make, but a disk can: the model's
    /// stand-in for a leftover that cannot go).
    pub pinned: bool,
}

impl MSub {
    pub fn info(&self) -> Subvol {
        Subvol {
            id: self.id,
            uuid: self.uuid,
            parent_uuid: self.parent_uuid,
            readonly: self.readonly,
            // The model's transactions are its writes: a subvolume's history is as long as
            // the writes it holds, and a snapshot's never grows after it is made.
            generation: self.content.len() as u64,
            created_generation: self.content.len() as u64,
        }
    }
}

/// The request file as the model holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MFile {
    pub bytes: Vec<u8>,
    pub uid: u32,
    pub mode: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskState {
    pub top: BTreeMap<String, MSub>,
    pub store: BTreeMap<String, MSub>,
    pub request: Option<MFile>,
    pub refused: Option<MFile>,
    pub outcome: Option<String>,
    pub next_id: u64,
}

#[derive(Debug, Clone)]
enum Op {
    Copy {
        from_store: bool,
        source: String,
        dest: String,
        uuid: Uuid,
    },
    EnsureDir {
        subvolume: String,
        path: String,
    },
    Exchange {
        a: String,
        b: String,
    },
    /// A read-only snapshot of the top-level `source` in the store.
    Keep {
        source: String,
        name: String,
        uuid: Uuid,
    },
    WriteOutcome(String),
    RemoveRequest,
    MoveAside,
    DeleteDeepest {
        name: String,
    },
    DeleteTop {
        name: String,
    },
    Rename {
        from: String,
        to: String,
    },
    MoveInto {
        from: String,
        into: String,
    },
}

impl Op {
    /// Made durable by the operation itself (fsync through the log tree).
    fn fsynced(&self) -> bool {
        matches!(self, Op::WriteOutcome(_))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// The power went off: the driver stops here.
    Crash,
    /// An injected I/O error (ENOSPC, EIO): the driver stops, the boot goes on.
    Injected,
    /// A pinned subvolume is in the tree to delete: the filesystem refuses (EPERM).
    Pinned,
    /// The driver asked for something the filesystem would refuse: a driver bug.
    Refused(String),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

fn refused<T>(what: String) -> Result<T, ModelError> {
    Err(ModelError::Refused(what))
}

fn apply(state: &mut DiskState, op: &Op) -> Result<(), ModelError> {
    match op {
        Op::Copy {
            from_store,
            source,
            dest,
            uuid,
        } => {
            let src = if *from_store {
                state.store.get(source)
            } else {
                state.top.get(source)
            };
            let Some(src) = src else {
                return refused(format!("copy: no {source}"));
            };
            if state.top.contains_key(dest) {
                return refused(format!("copy: {dest} exists"));
            }
            let copy = MSub {
                id: state.next_id,
                uuid: *uuid,
                parent_uuid: Some(src.uuid),
                readonly: false,
                content: src.content.clone(),
                dirs: src.dirs.clone(),
                nested: Vec::new(),
                pinned: false,
            };
            state.next_id += 1;
            state.top.insert(dest.clone(), copy);
        }
        Op::EnsureDir { subvolume, path } => {
            let Some(s) = state.top.get_mut(subvolume) else {
                return refused(format!("mkdir: no {subvolume}"));
            };
            s.dirs.insert(path.clone());
        }
        Op::Exchange { a, b } => {
            let (Some(x), Some(y)) = (state.top.remove(a), state.top.remove(b)) else {
                return refused(format!("exchange: {a} or {b} missing"));
            };
            state.top.insert(a.clone(), y);
            state.top.insert(b.clone(), x);
        }
        Op::Keep { source, name, uuid } => {
            let Some(src) = state.top.get(source) else {
                return refused(format!("keep: no {source}"));
            };
            if state.store.contains_key(name) {
                return refused(format!("keep: {name} exists in the store"));
            }
            let kept = MSub {
                id: state.next_id,
                uuid: *uuid,
                parent_uuid: Some(src.uuid),
                readonly: true,
                content: src.content.clone(),
                dirs: src.dirs.clone(),
                nested: Vec::new(),
                pinned: false,
            };
            state.next_id += 1;
            state.store.insert(name.clone(), kept);
        }
        Op::WriteOutcome(text) => state.outcome = Some(text.clone()),
        Op::RemoveRequest => {
            if state.request.take().is_none() {
                return refused("remove: no request".into());
            }
        }
        Op::MoveAside => match state.request.take() {
            Some(r) => state.refused = Some(r),
            None => return refused("move aside: no request".into()),
        },
        Op::DeleteDeepest { name } => {
            let Some(s) = state.top.get_mut(name) else {
                return refused(format!("delete: no {name}"));
            };
            fn remove_leaf(s: &mut MSub) -> bool {
                let Some(last) = s.nested.last_mut() else {
                    return false;
                };
                if !remove_leaf(last) {
                    s.nested.pop();
                }
                true
            }
            if !remove_leaf(s) {
                return refused(format!("delete nested: {name} has none"));
            }
        }
        Op::DeleteTop { name } => match state.top.get(name) {
            Some(s) if !s.nested.is_empty() => return refused(format!("delete {name}: not empty")),
            Some(_) => {
                state.top.remove(name);
            }
            None => return refused(format!("delete: no {name}")),
        },
        Op::Rename { from, to } => {
            if state.top.contains_key(to) {
                return refused(format!("rename: {to} exists"));
            }
            let Some(s) = state.top.remove(from) else {
                return refused(format!("rename: no {from}"));
            };
            state.top.insert(to.clone(), s);
        }
        Op::MoveInto { from, into } => {
            if !state.top.contains_key(into) {
                return refused(format!("move into: no {into}"));
            }
            let Some(s) = state.top.remove(from) else {
                return refused(format!("move into: no {from}"));
            };
            state.top.get_mut(into).expect("checked").nested.push(s);
        }
    }
    Ok(())
}

fn holds_pinned(s: &MSub) -> bool {
    s.pinned || s.nested.iter().any(holds_pinned)
}

/// The model disk, with a crash or an error armed after a number of changes.
#[derive(Debug)]
pub struct Model {
    pub durable: DiskState,
    pub current: DiskState,
    pending: Vec<Op>,
    /// Changes (and commits) still allowed before the armed fault.
    budget: Option<usize>,
    fault: ModelError,
    uuid_counter: u128,
    /// Names that must exist in every state, crash states included.
    pub guarded: BTreeSet<String>,
    /// Every state the disk could be found in after a crash, checked as it happens.
    pub states_checked: usize,
    /// Reading the request file fails (EIO) while this is set.
    pub request_unreadable: bool,
    /// The outcome written under a temporary name, not yet put in place.
    outcome_temp: Option<String>,
    /// What `free_bytes` answers.
    pub free: u64,
    /// Subvolumes (by UUID) whose data must be found in every state: at the top level under
    /// that UUID, or kept read-only in the store (a snapshot whose parent it is).
    pub not_lost: Vec<Uuid>,
    /// The next id when the model was made: a store subvolume with a higher id was made by
    /// the runs under test.
    first_new_id: u64,
}

impl Model {
    pub fn new(state: DiskState) -> Model {
        let state_next_id = state.next_id;
        let guarded = state
            .top
            .keys()
            .filter(|k| !k.contains(".tacid-"))
            .cloned()
            .collect();
        Model {
            durable: state.clone(),
            current: state,
            pending: Vec::new(),
            budget: None,
            fault: ModelError::Crash,
            uuid_counter: 0xfeed_0000,
            guarded,
            states_checked: 0,
            request_unreadable: false,
            outcome_temp: None,
            free: u64::MAX,
            not_lost: Vec::new(),
            first_new_id: state_next_id,
        }
    }

    /// The next `budget` changes succeed; the one after fails with `fault`.
    pub fn arm(&mut self, budget: usize, fault: ModelError) {
        self.budget = Some(budget);
        self.fault = fault;
    }

    pub fn disarm(&mut self) {
        self.budget = None;
    }

    fn check(&mut self, state: &DiskState, when: &str) {
        for name in &self.guarded {
            assert!(
                state.top.contains_key(name),
                "{name} is missing {when}: {state:#?}"
            );
        }
        for (name, s) in &state.store {
            // Only what the runs made: a test may plant a writable snapshot as a bad request.
            assert!(
                s.readonly || s.id < self.first_new_id,
                "a writable {name} in the store {when}: {state:#?}"
            );
        }
        for uuid in &self.not_lost {
            let live = state.top.values().any(|s| s.uuid == *uuid);
            let kept = state
                .store
                .values()
                .any(|s| s.parent_uuid == Some(*uuid) && s.readonly && s.id >= self.first_new_id);
            assert!(
                live || kept,
                "the data of {uuid} is lost {when}: {state:#?}"
            );
        }
        self.states_checked += 1;
    }

    fn spend(&mut self) -> Result<(), ModelError> {
        match self.budget {
            // An injected I/O error is transient: the next change may work (a driver that
            // backs out after an error gets to try); a power cut ends everything.
            Some(0) if self.fault == ModelError::Injected => {
                self.budget = None;
                Err(ModelError::Injected)
            }
            Some(0) => Err(self.fault.clone()),
            Some(n) => {
                self.budget = Some(n - 1);
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn change(&mut self, op: Op) -> Result<(), ModelError> {
        self.spend()?;
        apply(&mut self.current, &op)?;
        self.pending.push(op);
        let current = self.current.clone();
        self.check(&current, "after a change");
        Ok(())
    }

    /// The power goes off: committed changes stay, of the rest the first `keep` (a background
    /// commit may have caught them) and every fsynced one.
    pub fn crash(&mut self, keep: usize) {
        let mut state = self.durable.clone();
        for (i, op) in std::mem::take(&mut self.pending).iter().enumerate() {
            if i < keep || op.fsynced() {
                apply(&mut state, op).expect("a change that applied once applies again");
            }
        }
        self.check(&state, "after a power cut");
        self.durable = state.clone();
        self.current = state;
        self.budget = None;
        self.outcome_temp = None;
    }

    /// Everything done so far is durable (a commit). An armed fault stays armed.
    fn make_durable(&mut self) {
        self.pending.clear();
        self.durable = self.current.clone();
    }

    /// The machine booted and shut down cleanly: everything is committed, nothing is armed.
    pub fn settle(&mut self) {
        self.make_durable();
        self.budget = None;
    }

    /// Somebody leaves, in the live subvolume `name` of the booted machine, a nested
    /// subvolume the filesystem will refuse to delete.
    pub fn user_pins(&mut self, name: &str) {
        self.settle();
        nest_pinned(&mut self.current, name, 0, true);
        self.durable = self.current.clone();
    }

    /// Whatever was pinned can be deleted now (the filesystem was mended).
    pub fn unpin_all(&mut self) {
        fn unpin(s: &mut MSub) {
            s.pinned = false;
            s.nested.iter_mut().for_each(unpin);
        }
        self.settle();
        self.current.top.values_mut().for_each(unpin);
        self.durable = self.current.clone();
    }

    /// Somebody writes to the live subvolume `name` of the booted machine.
    pub fn user_write(&mut self, name: &str, write: u32) {
        self.settle();
        let s = self
            .current
            .top
            .get_mut(name)
            .expect("the live subvolume exists at boot");
        s.content.push(write);
        self.durable = self.current.clone();
    }
}

impl Disk for Model {
    type Error = ModelError;

    fn request(&mut self) -> Result<RequestFile, ModelError> {
        Ok(match &self.current.request {
            None => RequestFile::Absent,
            Some(f) => RequestFile::Present {
                facts: FileFacts {
                    kind: FileKind::Regular,
                    uid: f.uid,
                    mode: f.mode,
                    size: f.bytes.len() as u64,
                },
                bytes: if self.request_unreadable {
                    Err(ReadFailure::Io("Input/output error (os error 5)".into()))
                } else {
                    Ok(f.bytes.clone())
                },
            },
        })
    }

    fn top_subvolume(&mut self, name: &str) -> Result<Option<Subvol>, ModelError> {
        Ok(self.current.top.get(name).map(MSub::info))
    }

    fn snapshot(&mut self, name: &str) -> Result<SnapshotFacts, ModelError> {
        Ok(match self.current.store.get(name) {
            Some(s) => SnapshotFacts::Subvolume(s.info()),
            None => SnapshotFacts::Missing,
        })
    }

    fn store(&mut self) -> Result<Vec<(String, Subvol)>, ModelError> {
        Ok(self
            .current
            .store
            .iter()
            .map(|(n, s)| (n.clone(), s.info()))
            .collect())
    }

    fn copy(&mut self, source: Source<'_>, dest: &str) -> Result<(), ModelError> {
        self.uuid_counter += 1;
        let (from_store, source) = match source {
            Source::Snapshot(n) => (true, n),
            Source::Top(n) => (false, n),
        };
        let op = Op::Copy {
            from_store,
            source: source.to_owned(),
            dest: dest.to_owned(),
            uuid: Uuid::from_u128(self.uuid_counter),
        };
        self.change(op)
    }

    fn keep(&mut self, source: &str, name: &str) -> Result<(), ModelError> {
        self.uuid_counter += 1;
        self.change(Op::Keep {
            source: source.to_owned(),
            name: name.to_owned(),
            uuid: Uuid::from_u128(self.uuid_counter),
        })
    }

    fn free_bytes(&mut self) -> Result<u64, ModelError> {
        Ok(self.free)
    }

    fn ensure_dir(&mut self, subvolume: &str, path: &str) -> Result<(), ModelError> {
        self.change(Op::EnsureDir {
            subvolume: subvolume.to_owned(),
            path: path.to_owned(),
        })
    }

    fn exchange(&mut self, a: &str, b: &str) -> Result<(), ModelError> {
        self.change(Op::Exchange {
            a: a.to_owned(),
            b: b.to_owned(),
        })
    }

    fn commit(&mut self) -> Result<(), ModelError> {
        self.spend()?;
        self.make_durable();
        Ok(())
    }

    fn write_outcome_temp(&mut self, outcome: &Outcome) -> Result<(), ModelError> {
        // The temporary file is not modelled: a leftover one blocks nothing (the real disk
        // removes it, `loop_durable_leftovers` proves that); the power can go off here.
        self.spend()?;
        self.outcome_temp = Some(outcome.render());
        Ok(())
    }

    fn put_outcome(&mut self) -> Result<(), ModelError> {
        let Some(text) = self.outcome_temp.take() else {
            return refused("the outcome put in place before it was written".into());
        };
        self.change(Op::WriteOutcome(text))
    }

    fn remove_leftover_temps(&mut self) -> Result<Vec<String>, ModelError> {
        Ok(Vec::new())
    }

    fn remove_request(&mut self) -> Result<(), ModelError> {
        self.change(Op::RemoveRequest)
    }

    fn move_request_aside(&mut self) -> Result<(), ModelError> {
        self.change(Op::MoveAside)
    }

    fn delete_tree(&mut self, name: &str) -> Result<TreeDeleted, ModelError> {
        let mut done = TreeDeleted::default();
        if self.current.top.get(name).is_some_and(holds_pinned) {
            self.spend()?;
            return Err(ModelError::Pinned);
        }
        while self
            .current
            .top
            .get(name)
            .is_some_and(|s| !s.nested.is_empty())
        {
            self.change(Op::DeleteDeepest {
                name: name.to_owned(),
            })?;
            done.deleted += 1;
        }
        self.change(Op::DeleteTop {
            name: name.to_owned(),
        })?;
        done.deleted += 1;
        Ok(done)
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), ModelError> {
        self.change(Op::Rename {
            from: from.to_owned(),
            to: to.to_owned(),
        })
    }

    fn move_into(&mut self, from: &str, into: &str) -> Result<(), ModelError> {
        self.change(Op::MoveInto {
            from: from.to_owned(),
            into: into.to_owned(),
        })
    }
}

/// A laid-out machine: every layout subvolume, ids from 256 in table order, contents tagged
/// by id; `@root-blank` read-only and empty.
pub fn laid_out() -> DiskState {
    let mut top = BTreeMap::new();
    let mut id = 256;
    for row in layout::SUBVOLUMES {
        let blank = row.name == layout::ROOT_BLANK_SUBVOLUME;
        top.insert(
            row.name.to_owned(),
            MSub {
                id,
                uuid: Uuid::from_u128(u128::from(id)),
                parent_uuid: None,
                readonly: blank,
                content: if blank { Vec::new() } else { vec![id as u32] },
                dirs: BTreeSet::new(),
                nested: Vec::new(),
                pinned: false,
            },
        );
        id += 1;
    }
    DiskState {
        top,
        store: BTreeMap::new(),
        request: None,
        refused: None,
        outcome: None,
        next_id: id,
    }
}

/// Take a read-only snapshot of the live `subvolume` into the store under `name`.
pub fn take_snapshot(state: &mut DiskState, subvolume: SubvolumeName, name: &str) -> Uuid {
    let live = &state.top[subvolume.as_str()];
    let uuid = Uuid::from_u128(0x5_0000 + u128::from(state.next_id));
    let snap = MSub {
        id: state.next_id,
        uuid,
        parent_uuid: Some(live.uuid),
        readonly: true,
        content: live.content.clone(),
        dirs: live.dirs.clone(),
        nested: Vec::new(),
        pinned: false,
    };
    state.next_id += 1;
    state.store.insert(name.to_owned(), snap);
    uuid
}

/// A nested subvolume (with `depth` more inside it) for the live `name`; with `pinned`, the
/// innermost cannot be deleted.
pub fn nest_pinned(state: &mut DiskState, name: &str, depth: usize, pinned: bool) {
    nest(state, name, depth);
    if pinned {
        let mut s = state
            .top
            .get_mut(name)
            .and_then(|s| s.nested.last_mut())
            .expect("just nested");
        while !s.nested.is_empty() {
            s = s.nested.last_mut().expect("not empty");
        }
        s.pinned = true;
    }
}

/// A nested subvolume (with `depth` more inside it) for the live `name`.
pub fn nest(state: &mut DiskState, name: &str, depth: usize) {
    let mut inner: Option<MSub> = None;
    for _ in 0..=depth {
        let id = state.next_id;
        state.next_id += 1;
        let mut s = MSub {
            id,
            uuid: Uuid::from_u128(0x6_0000 + u128::from(id)),
            parent_uuid: None,
            readonly: false,
            content: vec![id as u32],
            dirs: BTreeSet::new(),
            nested: Vec::new(),
            pinned: false,
        };
        s.nested.extend(inner.take());
        inner = Some(s);
    }
    state.top.get_mut(name).expect("live").nested.extend(inner);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is how a test reports
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use layout::{OutcomeResult, RestoreMember, RestoreRequest, SnapshotName};
    use proptest::prelude::*;

    use super::*;
    use crate::driver::{restore_data, wipe_root, Observer, RestoreReport, RunError};
    use crate::machine::{stuck_name, swap_name};
    use crate::steps::Step;

    #[derive(Default)]
    struct Steps(Vec<Step>, Vec<String>);

    impl Observer for Steps {
        fn log(&mut self, _line: &str) {}
        fn after(&mut self, step: Step) {
            self.0.push(step);
        }
        fn left_behind(&mut self, what: &str) {
            self.1.push(what.to_owned());
        }
    }

    /// The hard floor the runs are given (the model's disk has more free, unless a test says).
    const FLOOR: u64 = layout::defaults::HARD_FLOOR_BYTES;

    /// In the layout's order, which is a request's.
    const RESTORABLE: [&str; 3] = ["@persist", "@log", "@home"];

    fn now() -> std::time::SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    /// The members a bit mask picks (bit i: `RESTORABLE[i]`; never empty).
    fn set_of(mask: u8) -> Vec<&'static str> {
        let subs: Vec<&str> = RESTORABLE
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, s)| *s)
            .collect();
        assert!(!subs.is_empty(), "mask {mask}");
        subs
    }

    /// A machine with a snapshot of each of `subs` and a request for all of them staged. With
    /// `again`, each live subvolume was itself made from its snapshot by an earlier restore
    /// (and written to).
    fn staged_set(subs: &[&str], nested: usize, again: bool) -> (DiskState, RestoreRequest) {
        let mut state = laid_out();
        let mut members = Vec::new();
        for (k, sub) in subs.iter().enumerate() {
            let name = SubvolumeName::parse(sub).unwrap();
            let snap =
                SnapshotName::new(name, UNIX_EPOCH + Duration::from_secs(1_700_000_000)).unwrap();
            let uuid = take_snapshot(&mut state, name, &snap.to_string());
            if again {
                let id = state.next_id;
                state.next_id += 1;
                let live = state.top.get_mut(*sub).unwrap();
                live.id = id;
                live.uuid = Uuid::from_u128(0x7_0000 + k as u128);
                live.parent_uuid = Some(uuid);
                live.content.push(5);
            }
            for depth in 0..nested {
                nest(&mut state, sub, depth);
            }
            members.push(RestoreMember::new(name, snap, uuid).unwrap());
        }
        let request = RestoreRequest::new(members).unwrap();
        state.request = Some(MFile {
            bytes: request.render().into_bytes(),
            uid: 0,
            mode: 0o600,
        });
        (state, request)
    }

    /// An abandoned swap of `sub`: a copy of it with an id and UUID of its own and no parent.
    fn plant_stale_swap(state: &mut DiskState, sub: &str) {
        let mut stale = state.top[sub].clone();
        stale.id = state.next_id;
        stale.uuid = Uuid::from_u128(0x8_0000);
        stale.parent_uuid = None;
        state.next_id += 1;
        state.top.insert(swap_name(sub), stale);
    }

    fn staged(sub: &str, nested: usize, again: bool) -> (DiskState, RestoreRequest) {
        staged_set(&[sub], nested, again)
    }

    /// What the people using the machine saw of the subvolumes a schedule restores.
    struct Watch {
        subs: Vec<String>,
        /// Each subvolume's UUID before it was put back.
        original: Vec<Uuid>,
        /// The writes made to each while it was the put-back one.
        after_restore: Vec<Vec<u32>>,
        /// The writes made to each before it was put back.
        before_restore: Vec<Vec<u32>>,
        /// Each one's UUIDs at the boots that followed a run.
        seen: Vec<BTreeSet<Uuid>>,
    }

    impl Watch {
        fn new(subs: &[&str], original: Vec<Uuid>) -> Watch {
            Watch {
                subs: subs.iter().map(|s| s.to_string()).collect(),
                original,
                after_restore: vec![Vec::new(); subs.len()],
                before_restore: vec![Vec::new(); subs.len()],
                seen: vec![BTreeSet::new(); subs.len()],
            }
        }

        /// Before anything was put back: the live subvolumes as they are now.
        fn of(state: &DiskState, subs: &[&str]) -> Watch {
            Watch::new(subs, subs.iter().map(|s| state.top[*s].uuid).collect())
        }

        /// Which subvolumes are put back.
        fn restored(&self, m: &Model) -> Vec<bool> {
            self.subs
                .iter()
                .zip(&self.original)
                .map(|(s, o)| m.current.top.get(s).map(|l| l.uuid) != Some(*o))
                .collect()
        }

        /// After a run that returned Ok: all put back or none.
        fn assert_not_mixed(&self, m: &Model, when: &str) {
            let restored = self.restored(m);
            assert!(
                restored.iter().all(|r| *r) || restored.iter().all(|r| !*r),
                "a mix after {when}: {:?} put back: {restored:?}",
                self.subs
            );
        }
    }

    /// Run the driver under the fault schedule, with people writing to the booted machine
    /// between runs that did not lose power (a unit's failure does not stop the boot); then
    /// once more without faults. Every run that returns Ok leaves the watched subvolumes all
    /// put back or none; with `errors_leave_no_mix`, so does every run failed by one I/O
    /// error (false only for a disk found mixed, whose undo an error may cut short).
    fn run_schedule(
        m: &mut Model,
        watch: &mut Watch,
        schedule: &[(usize, usize, bool)],
        errors_leave_no_mix: bool,
        job: impl Fn(&mut Model) -> Result<(), RunError<ModelError>>,
    ) {
        for (i, &(budget, keep, fail)) in schedule.iter().enumerate() {
            let fault = if fail {
                ModelError::Injected
            } else {
                ModelError::Crash
            };
            m.arm(budget, fault);
            match job(m) {
                Err(RunError::Disk(ModelError::Crash)) => {
                    m.crash(keep);
                    continue;
                }
                Ok(()) => watch.assert_not_mixed(m, &format!("run {i}")),
                // A failed unit does not stop the boot, so it too must leave no mix.
                Err(RunError::Disk(ModelError::Injected)) => {
                    if errors_leave_no_mix {
                        watch.assert_not_mixed(m, &format!("run {i}, failed by an I/O error"));
                    }
                }
                Err(other) => {
                    panic!("the driver failed for a reason the model did not inject: {other}")
                }
            }
            // The machine boots and is used.
            let write = 1000 + i as u32;
            let restored = watch.restored(m);
            for (k, sub) in watch.subs.clone().iter().enumerate() {
                m.user_write(sub, write);
                watch.seen[k].insert(m.current.top[sub].uuid);
                if restored[k] {
                    watch.after_restore[k].push(write);
                } else {
                    watch.before_restore[k].push(write);
                }
            }
        }
        m.disarm();
        job(m).expect("a run without faults finishes");
        watch.assert_not_mixed(m, "the last run");
    }

    fn schedule() -> impl Strategy<Value = Vec<(usize, usize, bool)>> {
        proptest::collection::vec(
            (0usize..48, 0usize..4, proptest::bool::weighted(0.25)),
            0..6,
        )
    }

    /// The subvolumes with a swap or stuck name.
    fn tacid_names(state: &DiskState) -> Vec<&String> {
        state.top.keys().filter(|k| k.contains(".tacid-")).collect()
    }

    /// A set cut short after its first exchange, then a boot that cannot read the request
    /// (EIO): nothing is refused and nothing cleaned up (that would delete the replaced
    /// subvolume and the other members' copies, leaving a mix for good); the next boot that
    /// can read it finishes the set whole.
    #[test]
    fn an_unreadable_request_after_a_cut_short_set_touches_nothing_and_the_set_finishes() {
        let subs = set_of(7);
        let (state, _request) = staged_set(&subs, 0, false);
        let watch = Watch::of(&state, &subs);
        // Power off at the first moment only the first member is exchanged, durably.
        let mut steps = Steps(Vec::new(), Vec::new());
        let mut m = (0..64)
            .find_map(|budget| {
                let mut m = Model::new(state.clone());
                m.arm(budget, ModelError::Crash);
                let cut = restore_data(&mut m, &mut Steps(Vec::new(), Vec::new()), now(), FLOOR);
                assert!(
                    matches!(cut, Err(RunError::Disk(ModelError::Crash))),
                    "{cut:?}"
                );
                m.crash(0);
                (watch.restored(&m) == [true, false, false]).then_some(m)
            })
            .expect("a power cut leaves the first member alone exchanged");
        let before = m.current.clone();

        m.request_unreadable = true;
        let unreadable = restore_data(&mut m, &mut steps, now(), FLOOR);
        assert!(
            matches!(unreadable, Err(RunError::RequestUnreadable(_))),
            "{unreadable:?}"
        );
        assert_eq!(
            m.current, before,
            "a run that could not read the request changed the disk"
        );

        m.request_unreadable = false;
        restore_data(&mut m, &mut steps, now(), FLOOR).expect("the next boot finishes the set");
        assert_eq!(watch.restored(&m), [true, true, true]);
        watch.assert_not_mixed(&m, "the boot after");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        #[test]
        fn a_set_restore_happens_exactly_once_whatever_the_power_does(
            mask in 1u8..8,
            nested in 0usize..3,
            again in any::<bool>(),
            leftover in any::<bool>(),
            pinned in any::<bool>(),
            below_floor in proptest::bool::weighted(0.2),
            faults in schedule(),
        ) {
            let subs = set_of(mask);
            let (mut state, request) = staged_set(&subs, nested, again);
            let first = subs[0];
            if pinned {
                // Something in a replaced subvolume the filesystem refuses to delete.
                nest_pinned(&mut state, first, nested, true);
            }
            if leftover {
                // An abandoned swap, from a request that was withdrawn: of a subvolume not in
                // the set, or (for a set of all three) under the first member's swap name.
                let other = RESTORABLE.into_iter().find(|s| !subs.contains(s)).unwrap_or(first);
                plant_stale_swap(&mut state, other);
            }
            let initial = state.clone();
            let mut m = Model::new(state);
            let mut watch = Watch::of(&initial, &subs);
            if below_floor {
                m.free = FLOOR - 1;
            } else {
                // Neither the put-back data nor what it replaced is lost, in any state.
                m.not_lost = watch.original.clone();
            }
            let job = |m: &mut Model| restore_data(m, &mut Steps::default(), now(), FLOOR).map(|_| ());
            run_schedule(&mut m, &mut watch, &faults, true, job);

            let end = &m.current;
            let outcome = Outcome::parse(end.outcome.as_deref().unwrap().as_bytes()).unwrap();
            // What each member held before: kept read-only, all of the set under one time,
            // once (or, below the floor, not at all), and the outcome names it.
            let new_in_store: Vec<(&String, &MSub)> =
                end.store.iter().filter(|(n, _)| !initial.store.contains_key(*n)).collect();
            prop_assert_eq!(outcome.replaced.len(), subs.len());
            if below_floor {
                prop_assert!(new_in_store.is_empty(), "{new_in_store:?}");
                prop_assert!(outcome.replaced.iter().all(|r| r.kept.is_none()));
                prop_assert!(outcome.reason.as_str().contains("below the hard floor"));
            } else {
                prop_assert_eq!(new_in_store.len(), subs.len(), "{:?}", new_in_store);
                let mut stamps = BTreeSet::new();
                for (k, sub) in subs.iter().enumerate() {
                    let (name, kept) = new_in_store
                        .iter()
                        .find(|(_, s)| s.parent_uuid == Some(watch.original[k]))
                        .expect("a kept snapshot of each member");
                    let parsed = SnapshotName::parse(name).unwrap();
                    prop_assert_eq!(parsed.subvolume().as_str(), *sub);
                    prop_assert!(kept.readonly);
                    let mut held = initial.top[*sub].content.clone();
                    held.extend(&watch.before_restore[k]);
                    prop_assert_eq!(&kept.content, &held, "{}: kept is not what it held", sub);
                    prop_assert_eq!(outcome.replaced[k].kept, Some(parsed));
                    stamps.insert(parsed.taken());
                }
                prop_assert_eq!(stamps.len(), 1, "one time for the set");
            }
            for (k, member) in request.members().iter().enumerate() {
                let sub = subs[k];
                prop_assert_eq!(member.subvolume().as_str(), sub);
                let live = &end.top[sub];
                // Put back: a copy of its snapshot, holding exactly what was written since.
                prop_assert_eq!(live.parent_uuid, Some(member.uuid()));
                prop_assert_ne!(live.uuid, initial.top[sub].uuid);
                let mut expected = initial.store[&member.snapshot().to_string()].content.clone();
                expected.extend(&watch.after_restore[k]);
                prop_assert_eq!(&live.content, &expected, "{}: a write after the restore was lost: restored twice", sub);
                prop_assert!(watch.seen[k].len() <= 2, "people saw {} different {sub}s", watch.seen[k].len());
                prop_assert!(live.nested.is_empty());
                if sub == "@persist" {
                    prop_assert!(live.dirs.contains(".snapshots"));
                }
            }
            // Clean: no swap names (what could not go set aside under one name), no request,
            // an outcome saying done, naming every member.
            let stuck = stuck_name(first);
            let expected_left: Vec<&String> = if pinned { vec![&stuck] } else { Vec::new() };
            prop_assert_eq!(tacid_names(end), expected_left);
            prop_assert_eq!(&end.request, &None);
            prop_assert_eq!(&end.refused, &None);
            prop_assert_eq!(outcome.result, OutcomeResult::Done);
            prop_assert_eq!(outcome.request.as_ref(), Some(&request));
            // Nothing else changed.
            for (name, s) in &initial.store {
                prop_assert_eq!(&end.store[name], s);
            }
            for (name, s) in &initial.top {
                if !subs.contains(&name.as_str()) && !name.contains(".tacid-") {
                    prop_assert_eq!(&end.top[name], s);
                }
            }
            if pinned {
                m.unpin_all();
                restore_data(&mut m, &mut Steps::default(), now(), FLOOR).unwrap();
                prop_assert!(!m.current.top.contains_key(&stuck), "deleted once it can go");
            }
            // And the next boots do nothing more.
            for sub in &subs {
                m.user_write(sub, 7777);
            }
            let report = restore_data(&mut m, &mut Steps::default(), now(), FLOOR).unwrap();
            prop_assert_eq!(report, RestoreReport::NothingStaged);
            for sub in &subs {
                prop_assert_eq!(m.current.top[*sub].content.last(), Some(&7777));
            }
            prop_assert!(m.states_checked > 0);
        }

        #[test]
        fn a_set_with_a_bad_member_changes_no_subvolume_whatever_the_power_does(
            mask in 1u8..8,
            bad in 0usize..3,
            flaw in 0usize..4,
            faults in schedule(),
        ) {
            let subs = set_of(mask);
            let (mut state, request) = staged_set(&subs, 1, false);
            let snapshot = request.members()[bad % subs.len()].snapshot().to_string();
            match flaw {
                0 => state.store.get_mut(&snapshot).unwrap().readonly = false,
                1 => state.store.get_mut(&snapshot).unwrap().uuid = Uuid::from_u128(0x9_9999),
                2 => { state.store.remove(&snapshot); }
                _ => state.request.as_mut().unwrap().uid = 1000,
            }
            let initial = state.clone();
            let mut m = Model::new(state);
            let mut watch = Watch::of(&initial, &subs);
            let job = |m: &mut Model| restore_data(m, &mut Steps::default(), now(), FLOOR).map(|_| ());
            run_schedule(&mut m, &mut watch, &faults, true, job);
            let end = &m.current;
            let ids = |s: &DiskState| s.top.iter().map(|(n, s)| (n.clone(), s.id, s.uuid)).collect::<Vec<_>>();
            prop_assert_eq!(ids(end), ids(&initial));
            prop_assert_eq!(&end.store, &initial.store);
            prop_assert_eq!(&end.request, &None);
            prop_assert_eq!(&end.refused, &initial.request);
            let outcome = Outcome::parse(end.outcome.as_deref().unwrap().as_bytes()).unwrap();
            prop_assert_eq!(outcome.result, OutcomeResult::Refused);
            if flaw < 3 {
                // Refused for one member, the outcome names every member.
                prop_assert_eq!(outcome.request.as_ref(), Some(&request));
            }
        }

        /// A state the steps never leave (the disk is untrusted): the first member exchanged,
        /// the middle ones with their copies, and the last with no copy (nothing, or a
        /// leftover under its swap name). Every run that returns leaves all members put back
        /// or none; without power cuts, none (exchanged back, refused).
        #[test]
        fn a_half_exchanged_set_without_a_copy_is_exchanged_back_never_left_mixed(
            mask in prop_oneof![Just(3u8), Just(5u8), Just(6u8), Just(7u8)],
            stale_last in any::<bool>(),
            faults in schedule(),
        ) {
            let subs = set_of(mask);
            let (mut state, request) = staged_set(&subs, 1, false);
            let original = Watch::of(&state, &subs).original;
            let copy = |state: &mut DiskState, member: &RestoreMember| {
                let snap = &state.store[&member.snapshot().to_string()];
                let c = MSub {
                    id: state.next_id,
                    uuid: Uuid::from_u128(0xc_0000 + u128::from(state.next_id)),
                    parent_uuid: Some(snap.uuid),
                    readonly: false,
                    content: snap.content.clone(),
                    dirs: snap.dirs.clone(),
                    nested: Vec::new(),
                    pinned: false,
                };
                state.next_id += 1;
                state.top.insert(swap_name(member.subvolume().as_str()), c);
            };
            let members = request.members();
            for member in &members[..members.len() - 1] {
                copy(&mut state, member);
            }
            let first = subs[0];
            let swap = swap_name(first);
            let (live, copied) = (state.top.remove(first).unwrap(), state.top.remove(&swap).unwrap());
            state.top.insert(first.to_owned(), copied);
            state.top.insert(swap, live);
            let last = subs[subs.len() - 1];
            if stale_last {
                plant_stale_swap(&mut state, last);
            }
            let initial = state.clone();
            let mut m = Model::new(state);
            let mut watch = Watch::new(&subs, original.clone());
            let job = |m: &mut Model| restore_data(m, &mut Steps::default(), now(), FLOOR).map(|_| ());
            run_schedule(&mut m, &mut watch, &faults, false, job);
            let end = &m.current;
            prop_assert_eq!(tacid_names(end), Vec::<&String>::new());
            prop_assert_eq!(&end.request, &None);
            let outcome = Outcome::parse(end.outcome.as_deref().unwrap().as_bytes()).unwrap();
            prop_assert_eq!(outcome.request.as_ref(), Some(&request));
            if watch.restored(&m).iter().all(|r| *r) {
                prop_assert_eq!(outcome.result, OutcomeResult::Done);
                for member in members {
                    prop_assert_eq!(end.top[member.subvolume().as_str()].parent_uuid, Some(member.uuid()));
                }
            } else {
                prop_assert_eq!(outcome.result, OutcomeResult::Refused);
                prop_assert!(outcome.reason.as_str().contains("exchanged back"), "{}", outcome.reason.as_str());
                prop_assert_eq!(&end.refused, &initial.request);
                for (k, sub) in subs.iter().enumerate() {
                    prop_assert_eq!(end.top[*sub].uuid, original[k]);
                }
            }
            if faults.is_empty() {
                prop_assert_eq!(outcome.result, OutcomeResult::Refused);
            }
            for (name, s) in &initial.store {
                prop_assert_eq!(&end.store[name], s);
            }
            // Kept only when the set was put back (what it replaced), never when refused.
            let kept = end.store.len() - initial.store.len();
            let expected = if outcome.result == OutcomeResult::Done { subs.len() } else { 0 };
            prop_assert_eq!(kept, expected);
        }

        #[test]
        fn a_wipe_leaves_a_fresh_root_whatever_the_power_does(
            nested in 0usize..3,
            pinned_boots in 0usize..4,
            faults in schedule(),
        ) {
            const ROOT: &str = layout::ROOT_SUBVOLUME;
            let mut state = laid_out();
            for depth in 0..nested {
                nest(&mut state, ROOT, depth);
            }
            if pinned_boots > 0 {
                nest_pinned(&mut state, ROOT, nested, true);
            }
            let initial = state.clone();
            let mut m = Model::new(state);
            let mut watch = Watch::of(&initial, &[ROOT]);
            let job = |m: &mut Model| wipe_root(m, &mut Steps::default()).map(|_| ());
            run_schedule(&mut m, &mut watch, &faults, true, job);
            // A root the filesystem will not let go of, boot after boot: every boot still
            // gets a fresh one, and what cannot go keeps one name.
            for _ in 1..pinned_boots {
                m.user_pins(ROOT);
                let mut steps = Steps::default();
                wipe_root(&mut m, &mut steps).unwrap();
                prop_assert!(!steps.1.is_empty(), "says what is left behind");
            }
            let stuck = stuck_name(ROOT);
            let fresh = |m: &Model| -> Result<(), TestCaseError> {
                let end = &m.current;
                let root = &end.top[ROOT];
                let blank = &initial.top[layout::ROOT_BLANK_SUBVOLUME];
                prop_assert_eq!(root.parent_uuid, Some(blank.uuid));
                prop_assert!(root.content.is_empty() && root.nested.is_empty(), "{root:?}");
                for (name, s) in &initial.top {
                    if name != ROOT {
                        prop_assert_eq!(&end.top[name], s);
                    }
                }
                Ok(())
            };
            fresh(&m)?;
            let expected: Vec<&String> = if pinned_boots > 0 { vec![&stuck] } else { Vec::new() };
            prop_assert_eq!(tacid_names(&m.current), expected);
            if pinned_boots > 0 {
                prop_assert_eq!(m.current.top[&stuck].nested.len() >= pinned_boots - 1, true);
                m.unpin_all();
                let mut steps = Steps::default();
                wipe_root(&mut m, &mut steps).unwrap();
                prop_assert!(steps.1.is_empty(), "{:?}", steps.1);
                fresh(&m)?;
                prop_assert!(m.current.top.keys().all(|k| !k.contains(".tacid-")));
            }
        }
    }

    #[test]
    fn an_honoured_restore_goes_through_every_step_in_order() {
        let (state, request) = staged("@persist", 2, false);
        let mut m = Model::new(state);
        let mut steps = Steps::default();
        let report = restore_data(&mut m, &mut steps, now(), FLOOR).unwrap();
        assert_eq!(report, RestoreReport::Restored(request));
        assert_eq!(steps.0, Step::RESTORE);
    }

    #[test]
    fn an_honoured_set_goes_through_its_sequence_in_order() {
        for mask in 1..8 {
            let subs = set_of(mask);
            let (state, request) = staged_set(&subs, 1, false);
            let mut m = Model::new(state);
            let mut steps = Steps::default();
            let report = restore_data(&mut m, &mut steps, now(), FLOOR).unwrap();
            assert_eq!(report, RestoreReport::Restored(request));
            let expected: Vec<Step> = Step::restore_sequence(subs.len())
                .into_iter()
                .map(|(s, _)| s)
                .collect();
            assert_eq!(steps.0, expected, "{subs:?}");
        }
    }

    #[test]
    fn below_the_floor_nothing_is_kept_and_the_steps_say_so() {
        for mask in 1..8 {
            let subs = set_of(mask);
            let (state, request) = staged_set(&subs, 1, false);
            let mut m = Model::new(state);
            m.free = FLOOR - 1;
            let mut steps = Steps::default();
            let report = restore_data(&mut m, &mut steps, now(), FLOOR).unwrap();
            assert_eq!(report, RestoreReport::Restored(request));
            let expected: Vec<Step> = Step::restore_sequence_deleting(subs.len())
                .into_iter()
                .map(|(s, _)| s)
                .collect();
            assert_eq!(steps.0, expected, "{subs:?}");
        }
    }

    /// A set cut short after its first member was kept, then a boot on a disk that has
    /// fallen below the floor: the rest of the set is kept too, under the same time.
    #[test]
    fn once_one_member_is_kept_the_set_is_kept_whatever_the_free_space() {
        let subs = set_of(7);
        let (state, request) = staged_set(&subs, 0, false);
        let initial = state.clone();
        let mut m = Model::new(state);
        // Three copies and commits; @persist's mount point, and three exchanges and commits;
        // one keep, not committed.
        m.arm(3 * 2 + 1 + 3 * 2 + 1, ModelError::Crash);
        let cut = restore_data(&mut m, &mut Steps::default(), now(), FLOOR);
        assert!(
            matches!(cut, Err(RunError::Disk(ModelError::Crash))),
            "{cut:?}"
        );
        m.crash(1);
        assert_eq!(m.current.store.len(), initial.store.len() + 1, "one kept");
        m.free = 0;
        let later = now() + Duration::from_secs(3600);
        let mut steps = Steps::default();
        restore_data(&mut m, &mut steps, later, FLOOR).unwrap();
        let outcome = Outcome::parse(m.current.outcome.as_deref().unwrap().as_bytes()).unwrap();
        assert_eq!(outcome.request, Some(request));
        let kept: Vec<SnapshotName> = outcome.replaced.iter().map(|r| r.kept.unwrap()).collect();
        assert_eq!(kept.len(), 3);
        assert!(kept.iter().all(|k| k.taken() == now()), "{kept:?}");
        assert_eq!(m.current.store.len(), initial.store.len() + 3);
        assert_eq!(
            steps.0.iter().filter(|s| **s == Step::RestoreKeep).count(),
            2
        );
    }

    /// A run that stopped with an error after the copy (the boot went on, as
    /// adr/0007 lets it) leaves a machine on which the stem snapshots the still-live
    /// subvolume; those snapshots' ids are above the copy's. The next boot's keep must keep
    /// what the subvolume held at that boot, not take such a snapshot for its own.
    #[test]
    fn a_stem_snapshot_taken_while_the_copy_waited_is_not_taken_for_the_kept_one() {
        let (state, request) = staged("@home", 0, false);
        let mut m = Model::new(state);
        let home = SubvolumeName::parse("@home").unwrap();
        // The copy and its commit; then the exchange fails (an I/O error): the boot goes on.
        let mut stopped_at = None;
        for budget in 1..8 {
            let mut t = Model::new(m.current.clone());
            t.arm(budget, ModelError::Injected);
            let r = restore_data(&mut t, &mut Steps::default(), now(), FLOOR);
            if r.is_err() && t.current.top.contains_key(&swap_name("@home")) {
                let swap = &t.current.top[&swap_name("@home")];
                if swap.parent_uuid == Some(request.members()[0].uuid()) {
                    stopped_at = Some(t);
                    break;
                }
            }
        }
        m = stopped_at.expect("a run that stops with the copy made");
        m.disarm();
        m.settle();
        // The booted machine: written to, snapshotted by the timeline, written to again.
        m.user_write("@home", 4141);
        let taken = SnapshotName::new(home, now() - Duration::from_secs(600)).unwrap();
        take_snapshot(&mut m.current, home, &taken.to_string());
        m.durable = m.current.clone();
        m.user_write("@home", 4242);
        let held = m.current.top["@home"].content.clone();
        // The next boot finishes the restore.
        restore_data(&mut m, &mut Steps::default(), now(), FLOOR).unwrap();
        let o = Outcome::parse(m.current.outcome.as_deref().unwrap().as_bytes()).unwrap();
        let kept = o.replaced[0].kept.expect("kept");
        assert_ne!(
            kept, taken,
            "the timeline's snapshot was taken for the kept one"
        );
        assert_eq!(
            m.current.store[&kept.to_string()].content,
            held,
            "what /home held at the boot"
        );
    }

    /// The copies are made, then (before any exchange) a member's snapshot turns out bad: the
    /// whole request is refused, no member swapped, and the copies deleted as leftovers.
    #[test]
    fn a_member_gone_bad_after_the_copies_refuses_all_and_the_copies_go() {
        let subs = set_of(7);
        let (state, request) = staged_set(&subs, 0, false);
        let initial = state.clone();
        let mut m = Model::new(state);
        // Three copies and three commits, then the power goes.
        m.arm(6, ModelError::Crash);
        let err = restore_data(&mut m, &mut Steps::default(), now(), FLOOR).unwrap_err();
        assert!(matches!(err, RunError::Disk(ModelError::Crash)), "{err}");
        m.crash(0);
        assert_eq!(tacid_names(&m.current).len(), 3, "every copy is made first");
        let last = request.members()[2].snapshot().to_string();
        m.current.store.get_mut(&last).unwrap().readonly = false;
        m.settle();
        let mut steps = Steps::default();
        let report = restore_data(&mut m, &mut steps, now(), FLOOR).unwrap();
        assert!(
            matches!(&report, RestoreReport::Refused { request: Some(r), .. } if *r == request),
            "{report:?}"
        );
        assert!(!steps.0.contains(&Step::RestoreExchange), "{:?}", steps.0);
        for sub in &subs {
            assert_eq!(m.current.top[*sub], initial.top[*sub], "{sub}");
        }
        assert!(tacid_names(&m.current).is_empty());
        let outcome = Outcome::parse(m.current.outcome.as_deref().unwrap().as_bytes()).unwrap();
        assert_eq!(outcome.result, OutcomeResult::Refused);
        assert_eq!(outcome.request, Some(request));
    }

    /// Once one member is exchanged, the others are exchanged without a new check: a
    /// snapshot gone bad by then does not stop the set from being put back whole.
    #[test]
    fn once_a_member_is_exchanged_the_rest_follow_without_a_check() {
        let subs = set_of(7);
        let (state, request) = staged_set(&subs, 0, false);
        let mut m = Model::new(state);
        // Three copies and commits, mount point, first exchange, its commit.
        m.arm(9, ModelError::Crash);
        restore_data(&mut m, &mut Steps::default(), now(), FLOOR).unwrap_err();
        m.crash(0);
        assert_eq!(
            m.current.top["@persist"].parent_uuid,
            Some(request.members()[0].uuid())
        );
        let home = request.members()[2].snapshot().to_string();
        m.current.store.remove(&home);
        m.settle();
        let mut steps = Steps::default();
        let report = restore_data(&mut m, &mut steps, now(), FLOOR).unwrap();
        assert_eq!(report, RestoreReport::Restored(request.clone()));
        for member in request.members() {
            assert_eq!(
                m.current.top[member.subvolume().as_str()].parent_uuid,
                Some(member.uuid())
            );
        }
    }

    #[test]
    fn a_missing_root_is_made_from_blank() {
        let mut state = laid_out();
        state.top.remove(layout::ROOT_SUBVOLUME);
        let mut m = Model::new(state);
        let mut steps = Steps::default();
        assert_eq!(
            wipe_root(&mut m, &mut steps).unwrap(),
            crate::driver::WipeReport::Created
        );
        assert_eq!(steps.0, [Step::WipeCopy, Step::WipeCommitCopy]);
        let root = &m.current.top[layout::ROOT_SUBVOLUME];
        assert_eq!(
            root.parent_uuid,
            Some(m.current.top[layout::ROOT_BLANK_SUBVOLUME].uuid)
        );
        let mut steps = Steps::default();
        wipe_root(&mut m, &mut steps).unwrap();
        assert_eq!(steps.0, Step::WIPE);
    }

    #[test]
    fn a_missing_blank_is_an_error_and_changes_nothing() {
        let mut state = laid_out();
        state.top.remove(layout::ROOT_BLANK_SUBVOLUME);
        let before = state.clone();
        let mut m = Model::new(state);
        let err = wipe_root(&mut m, &mut Steps::default()).unwrap_err();
        assert!(matches!(err, RunError::BlankMissing), "{err}");
        assert_eq!(m.current, before);
    }
}
