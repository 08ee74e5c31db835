//! What `Space` answers: which snapshot holds the disk (adr/0029). Data bytes on disk, from
//! the file extents, without quotas: an extent counts whole, at its size on disk, once per
//! subvolume; tree blocks and small files stored inline are not counted.

use serde::{Deserialize, Serialize};
use zbus::Type;

/// The answer to `Space`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SpaceReport {
    /// The snapshots asked about (all when none were named) that the caller may see the
    /// sizes of, oldest first.
    pub snapshots: Vec<SnapshotSpace>,
    /// Each snapshotted subvolume, in the layout's order.
    pub subvolumes: Vec<SubvolumeSpace>,
    /// What the snapshots alone hold: deleting every one of them frees this.
    pub store_bytes: u64,
    /// Every data extent measured: the live subvolumes, the store and the snapshots.
    pub total_bytes: u64,
    /// False when the stem's time ran out: no number may be relied on then; what it
    /// measured is kept, so asking again gets further.
    pub complete: bool,
    /// Snapshots of /home left out because the caller may only look: a person's home
    /// snapshot by snapshot would show what they wrote day by day. Their subvolume's row
    /// holds them in total.
    pub hidden: u32,
}

/// One snapshot's space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SnapshotSpace {
    pub name: String,
    /// What it is a snapshot of, for people (`/home`).
    pub of: String,
    /// When it was taken, µs since the epoch.
    pub taken_micros: i64,
    /// What deleting it frees now (once Btrfs's cleaner has run).
    pub exclusive_bytes: u64,
    /// What it holds together with the live subvolume or other snapshots.
    pub shared_bytes: u64,
    /// What it holds that the snapshot before it does not (0 and `has_previous` false for
    /// the oldest).
    pub new_bytes: u64,
    pub has_previous: bool,
}

/// One snapshotted subvolume's space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SubvolumeSpace {
    /// For people (`/home`).
    pub subvolume: String,
    pub snapshots: u32,
    /// Its snapshots' exclusive bytes, summed.
    pub snapshots_exclusive_bytes: u64,
    /// The live subvolume's data, and what only it holds.
    pub live_bytes: u64,
    pub live_exclusive_bytes: u64,
    /// How fast its snapshots grow: bytes a day (`has_growth` false with fewer than two).
    pub growth_bytes_per_day: u64,
    pub has_growth: bool,
}
