//! What a snapshot is a snapshot of: one rule, used by the stem (to list and to stage) and by
//! the initrd (to check a request before it swaps anything).
//!
//! Btrfs records, for every snapshot, the UUID of the subvolume it was taken of (its parent
//! UUID). A live subvolume's own UUID changes at every restore (the initrd makes a writable
//! snapshot of the chosen snapshot and swaps it in), and the replaced subvolume is deleted.
//! So the UUIDs known to be "this subvolume" are: the live one's, and — when the live one
//! was made from a snapshot in the store — that snapshot's parent, the live one before it.
//!
//! A snapshot whose parent is among those is [`Origin::ParentUuid`]. One whose parent is
//! unknown (taken of a subvolume that a later restore replaced) is known by its name alone,
//! [`Origin::NameOnly`]: names in the store are written only by the stem, which is root, in
//! a directory only root can enter. One whose parent is known to be *another* subvolume is
//! refused, whatever its name says.

use std::collections::HashMap;

use serde::Serialize;
use uuid::Uuid;

use crate::{SnapshotName, SubvolumeName};

/// How a snapshot's subvolume is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Its parent UUID is the live subvolume's, or the one the live subvolume replaced.
    ParentUuid,
    /// Its parent was replaced by an earlier restore; its name says what it is of.
    NameOnly,
}

/// A live subvolume, as Btrfs reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveSubvolume {
    pub name: SubvolumeName,
    pub uuid: Uuid,
    pub parent_uuid: Option<Uuid>,
}

/// A subvolume in the store, as Btrfs reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredSnapshot {
    pub name: SnapshotName,
    pub uuid: Uuid,
    pub parent_uuid: Option<Uuid>,
}

/// The answer for one snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ancestry {
    /// It is a snapshot of this subvolume, known this way.
    Of(SubvolumeName, Origin),
    /// Its name says one subvolume, its parent UUID proves another.
    Contradicts {
        by_name: SubvolumeName,
        by_parent: SubvolumeName,
    },
}

/// Which subvolume each known UUID was: the live subvolumes' own, and the ones each live
/// subvolume replaced. Built once per look at the disk; each question is then a lookup.
#[derive(Debug, Clone, Default)]
pub struct Lineages {
    by_uuid: HashMap<Uuid, SubvolumeName>,
}

impl Lineages {
    pub fn new(lives: &[LiveSubvolume], store: &[StoredSnapshot]) -> Self {
        let store_by_uuid: HashMap<Uuid, &StoredSnapshot> =
            store.iter().map(|s| (s.uuid, s)).collect();
        let mut by_uuid = HashMap::new();
        for live in lives {
            by_uuid.entry(live.uuid).or_insert(live.name);
            let replaced = live
                .parent_uuid
                .and_then(|from| store_by_uuid.get(&from))
                .and_then(|made_from| made_from.parent_uuid);
            if let Some(replaced) = replaced {
                by_uuid.entry(replaced).or_insert(live.name);
            }
        }
        Lineages { by_uuid }
    }

    /// What `snapshot` is a snapshot of.
    pub fn origin_of(&self, snapshot: &StoredSnapshot) -> Ancestry {
        let by_name = snapshot.name.subvolume();
        let by_parent = snapshot
            .parent_uuid
            .and_then(|p| self.by_uuid.get(&p).copied());
        match by_parent {
            Some(by_parent) if by_parent == by_name => Ancestry::Of(by_name, Origin::ParentUuid),
            Some(by_parent) => Ancestry::Contradicts { by_name, by_parent },
            None => Ancestry::Of(by_name, Origin::NameOnly),
        }
    }
}

/// What `snapshot` is a snapshot of, given every live subvolume and the whole store.
pub fn origin_of(
    snapshot: &StoredSnapshot,
    lives: &[LiveSubvolume],
    store: &[StoredSnapshot],
) -> Ancestry {
    Lineages::new(lives, store).origin_of(snapshot)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn snap(sub: &str, t: u64, uuid: u128, parent: u128) -> StoredSnapshot {
        let sv = SubvolumeName::parse(sub).unwrap();
        StoredSnapshot {
            name: SnapshotName::new(sv, UNIX_EPOCH + Duration::from_secs(t)).unwrap(),
            uuid: Uuid::from_u128(uuid),
            parent_uuid: Some(Uuid::from_u128(parent)),
        }
    }

    fn live(sub: &str, uuid: u128, parent: Option<u128>) -> LiveSubvolume {
        LiveSubvolume {
            name: SubvolumeName::parse(sub).unwrap(),
            uuid: Uuid::from_u128(uuid),
            parent_uuid: parent.map(Uuid::from_u128),
        }
    }

    #[test]
    fn through_two_restores() {
        let home = SubvolumeName::parse("@home").unwrap();
        // L0 = 1; A, B of L0; restore A -> L1 = 2 (parent A); C of L1; restore B -> L2 = 3.
        let a = snap("@home", 10, 100, 1);
        let b = snap("@home", 20, 101, 1);
        let c = snap("@home", 30, 102, 2);
        let store = [a, b, c];
        let lives = [live("@home", 3, Some(101)), live("@log", 50, None)];
        assert_eq!(
            origin_of(&a, &lives, &store),
            Ancestry::Of(home, Origin::ParentUuid)
        );
        assert_eq!(
            origin_of(&b, &lives, &store),
            Ancestry::Of(home, Origin::ParentUuid)
        );
        assert_eq!(
            origin_of(&c, &lives, &store),
            Ancestry::Of(home, Origin::NameOnly)
        );
    }

    #[test]
    fn a_name_that_lies_is_caught() {
        let liar = snap("@home", 10, 100, 50);
        let lives = [live("@home", 3, None), live("@log", 50, None)];
        assert!(matches!(
            origin_of(&liar, &lives, &[liar]),
            Ancestry::Contradicts { .. }
        ));
    }
}
