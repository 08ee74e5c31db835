//! Turn-taking: one act per target at a time. A listing gives way to an act that waits for
//! it and never waits itself; an act waits for a listing to end, and only another act makes
//! its target busy.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use layout::copies::TargetName;
use layout::SnapshotName;

use super::{CopyError, InFlight};

/// The longest a copy, fetch or deletion waits for a listing of its target to end (a listing
/// is short, and anybody may ask for one: it must never make an act fail as busy).
const WAIT_FOR_LISTING: Duration = Duration::from_secs(120);

#[derive(Debug)]
struct Busy {
    name: Option<SnapshotName>,
    kind: &'static str,
    bytes: Arc<AtomicU64>,
    started: Instant,
}

/// Which targets are busy, and how many acts wait for a listing of each to end; which
/// snapshots a sealed act moves.
#[derive(Debug, Default)]
struct Held {
    busy: BTreeMap<TargetName, Busy>,
    waiting: BTreeMap<TargetName, usize>,
    sealed: BTreeMap<SnapshotName, Busy>,
}

/// The targets' turns.
#[derive(Debug, Default)]
pub struct Turns {
    held: Mutex<Held>,
    /// Signalled whenever a target is freed.
    freed: Condvar,
}

/// Holds a target for one act; frees it when dropped.
pub struct Turn<'a> {
    turns: &'a Turns,
    target: TargetName,
    /// The bytes the act has moved so far.
    pub bytes: Arc<AtomicU64>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turns
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .busy
            .remove(&self.target);
        self.turns.freed.notify_all();
    }
}

/// Holds a snapshot for one sealed act (its send or its receive); frees it when dropped.
pub struct SealedTurn<'a> {
    turns: &'a Turns,
    name: SnapshotName,
    /// The bytes the act has moved so far.
    pub bytes: Arc<AtomicU64>,
}

impl Drop for SealedTurn<'_> {
    fn drop(&mut self) {
        self.turns
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sealed
            .remove(&self.name);
    }
}

impl Turns {
    /// Take the snapshot `name` for a sealed act of `kind` ("send-sealed" or
    /// "receive-sealed"): one such act per snapshot at a time (the target is the copier's,
    /// and the copier takes its turns).
    pub fn take_sealed(
        &self,
        name: SnapshotName,
        kind: &'static str,
    ) -> Result<SealedTurn<'_>, CopyError> {
        let mut turns = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = turns.sealed.get(&name) {
            return Err(CopyError::SealedBusy {
                name,
                doing: b.kind,
            });
        }
        let bytes = Arc::new(AtomicU64::new(0));
        turns.sealed.insert(
            name,
            Busy {
                name: Some(name),
                kind,
                bytes: bytes.clone(),
                started: Instant::now(),
            },
        );
        Ok(SealedTurn {
            turns: self,
            name,
            bytes,
        })
    }

    /// Take `target` for an act of `kind` ("copy", "fetch", "delete" or "list") on `name`.
    pub fn take(
        &self,
        target: &TargetName,
        name: Option<SnapshotName>,
        kind: &'static str,
    ) -> Result<Turn<'_>, CopyError> {
        let mut turns = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let listing = kind == "list";
        if listing {
            // A listing gives way to an act that waits, and never waits itself.
            if turns.busy.contains_key(target) || turns.waiting.contains_key(target) {
                return Err(CopyError::TargetBusy(target.clone()));
            }
        } else {
            // An act waits for a listing (anybody's, through the keeper) to end; only
            // another act makes it busy.
            let deadline = Instant::now() + WAIT_FOR_LISTING;
            *turns.waiting.entry(target.clone()).or_default() += 1;
            let waited = loop {
                match turns.busy.get(target) {
                    None => break Ok(()),
                    Some(b) if b.kind == "list" => {}
                    Some(_) => break Err(()),
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break Err(());
                }
                turns = self
                    .freed
                    .wait_timeout(turns, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            };
            if let Some(n) = turns.waiting.get_mut(target) {
                *n -= 1;
                if *n == 0 {
                    turns.waiting.remove(target);
                }
            }
            if waited.is_err() {
                return Err(CopyError::TargetBusy(target.clone()));
            }
        }
        let bytes = Arc::new(AtomicU64::new(0));
        turns.busy.insert(
            target.clone(),
            Busy {
                name,
                kind,
                bytes: bytes.clone(),
                started: Instant::now(),
            },
        );
        Ok(Turn {
            turns: self,
            target: target.clone(),
            bytes,
        })
    }

    /// Copies and fetches in flight.
    pub fn in_flight(&self) -> Vec<InFlight> {
        let turns = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let on_targets = turns.busy.iter().map(|(t, b)| (Some(t), b));
        let sealed = turns.sealed.values().map(|b| (None, b));
        on_targets
            .chain(sealed)
            .filter_map(|(target, b)| {
                Some(InFlight {
                    target: target.cloned(),
                    name: b.name?,
                    kind: match b.kind {
                        "copy" | "fetch" | "send-sealed" | "receive-sealed" => b.kind,
                        _ => return None,
                    },
                    bytes: b.bytes.load(Ordering::Relaxed),
                    elapsed: b.started.elapsed(),
                })
            })
            .collect()
    }
}
