//! The store's generation: a cheap value that changes whenever a list could answer
//! differently, so the keeper asks for the whole list only then.
//!
//! A list is made of the store's direct children (names, ids, UUIDs, parents, times), the
//! staged request in the store, and the live subvolumes at the top (whose UUIDs decide each
//! snapshot's lineage). Btrfs stamps a subvolume's root item with the transaction and the
//! time of its last change whenever any inode in it changes, before any commit:
//! `btrfs subvolume snapshot` into the store, `btrfs subvolume delete` (by path or by id),
//! a rename, the request written or edited in place — whoever does it, the stem or root by
//! hand. So the generation is, read in this order before the list is made:
//!
//! - this stem process (a new stem has listed nothing yet);
//! - the store subvolume's last change (transaction, nanosecond time);
//! - the top level's last change (a live subvolume replaced or renamed; the store itself
//!   replaced).
//!
//! Not in it, because the list does not show them: a snapshot's read-only flag and its
//! contents. A change made between the read and the list is in the list but not in the
//! generation answered with it: the next ask sees a different generation and lists again,
//! so a list kept by the generation is never older than the generation says. The stamps can
//! only repeat if the clock steps back to the same nanosecond within one transaction.
//!
//! The keeper's journal lives in the store too (`.keeper`), so each of its writes changes
//! the generation: a list is then made again that did not need to be. That costs a list,
//! never a stale one.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use btrfs::Dir;

use super::EngineError;

/// Compared for equality only; on the wire an array of integers (`Stem1.ListSince`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreGeneration(pub [u64; 5]);

impl StoreGeneration {
    pub fn as_slice(&self) -> &[u64] {
        &self.0
    }

    /// `known` from the wire: anything but a generation this stem answered never matches.
    pub fn matches(&self, known: &[u64]) -> bool {
        known == self.0.as_slice()
    }
}

/// This process: the time the first generation was read, in nanoseconds.
fn instance() -> u64 {
    static INSTANCE: OnceLock<u64> = OnceLock::new();
    *INSTANCE.get_or_init(|| {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        u64::try_from(t.as_nanos()).unwrap_or(u64::MAX) ^ u64::from(std::process::id())
    })
}

/// Read the generation of the (checked) store and of the top level.
pub(super) fn read(top: &Dir, store: &Dir) -> Result<StoreGeneration, EngineError> {
    let (store_trans, store_time) = store.subvolume_last_change()?;
    let (top_trans, top_time) = top.subvolume_last_change()?;
    Ok(StoreGeneration([
        instance(),
        store_trans,
        store_time,
        top_trans,
        top_time,
    ]))
}
