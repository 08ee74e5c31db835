//! What the driver needs from a disk: a handful of observations and the swap's moves.
//!
//! Implemented by [`crate::btrfs_disk::BtrfsDisk`] on a real filesystem and by the model in
//! the property tests; the driver is the same code for both.

use std::fmt;

use btrfs::{FileKind, TreeDeleted};
use layout::Outcome;

use crate::machine::Subvol;

/// Owner, mode, kind and size of the request file, from `fstat` of the opened file (or from
/// `lstat` when it is not a regular file and so is not opened at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFacts {
    pub kind: FileKind,
    pub uid: u32,
    /// Permission bits only.
    pub mode: u32,
    pub size: u64,
}

/// Why the request's bytes could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadFailure {
    /// Larger than the request's limit; not read.
    TooLarge(u64),
    /// Not a regular file; not opened.
    NotRegular,
    /// Opening or reading failed.
    Io(String),
}

/// The staged request file, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestFile {
    Absent,
    Present {
        facts: FileFacts,
        bytes: Result<Vec<u8>, ReadFailure>,
    },
}

/// What is under a snapshot's name in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotFacts {
    Missing,
    /// Something that is not a directory (a symlink, a file, ...).
    NotADirectory(FileKind),
    /// A plain directory, not the root of a subvolume.
    NotASubvolume,
    Subvolume(Subvol),
}

/// Where a swap's copy is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source<'a> {
    /// A snapshot in the store (`@snapshots/<name>`).
    Snapshot(&'a str),
    /// A subvolume at the top level (`@root-blank`).
    Top(&'a str),
}

/// A Btrfs filesystem's top level with its snapshot store, as the driver sees it.
pub trait Disk {
    type Error: fmt::Display;

    /// The staged request, read as untrusted input (never follows a symlink, never blocks).
    fn request(&mut self) -> Result<RequestFile, Self::Error>;
    /// The subvolume under `name` at the top level; `None` if nothing is there. Anything
    /// other than a subvolume root under a name the swap uses is an error.
    fn top_subvolume(&mut self, name: &str) -> Result<Option<Subvol>, Self::Error>;
    /// What is under `name` in the store.
    fn snapshot(&mut self, name: &str) -> Result<SnapshotFacts, Self::Error>;
    /// Every subvolume in the store whose name is UTF-8, by its name there (no other name
    /// can be a snapshot's).
    fn store(&mut self) -> Result<Vec<(String, Subvol)>, Self::Error>;

    /// A writable snapshot of `source` at `dest` at the top level.
    fn copy(&mut self, source: Source<'_>, dest: &str) -> Result<(), Self::Error>;
    /// A read-only snapshot of the top-level subvolume `source` at `name` in the store (made
    /// read-only in the one ioctl, so it is never writable there). Fails if `name` exists.
    fn keep(&mut self, source: &str, name: &str) -> Result<(), Self::Error>;
    /// Bytes still free on the filesystem for an ordinary writer (`f_bavail`).
    fn free_bytes(&mut self) -> Result<u64, Self::Error>;
    /// Make the directory `path` (relative, `/`-separated) inside the top-level subvolume
    /// `subvolume`, each missing component with mode 0700; existing ones are left alone.
    fn ensure_dir(&mut self, subvolume: &str, path: &str) -> Result<(), Self::Error>;
    /// Swap the two top-level names in one step.
    fn exchange(&mut self, a: &str, b: &str) -> Result<(), Self::Error>;
    /// Make everything done so far durable.
    fn commit(&mut self) -> Result<(), Self::Error>;
    /// The first half of writing the outcome record durably: a temporary file in the store,
    /// fsynced. It is not the outcome until [`Disk::put_outcome`].
    fn write_outcome_temp(&mut self, outcome: &Outcome) -> Result<(), Self::Error>;
    /// The second half: rename the temporary file over the outcome's name, fsync the store.
    fn put_outcome(&mut self) -> Result<(), Self::Error>;
    /// Remove the temporary files of durable writes (the outcome's, the request's) that a run
    /// cut short before their rename left in the store; only regular files of that name,
    /// never following a symlink. Not durable until a commit. Returns the names removed.
    fn remove_leftover_temps(&mut self) -> Result<Vec<String>, Self::Error>;
    /// Remove the request file (not durable until a commit).
    fn remove_request(&mut self) -> Result<(), Self::Error>;
    /// Rename whatever is under the request's name to the refused request's name.
    fn move_request_aside(&mut self) -> Result<(), Self::Error>;
    /// Delete the top-level subvolume `name` and every subvolume nested in it, deepest first,
    /// whatever users made inside (found and deleted by id; adr/0015). Says what it took.
    fn delete_tree(&mut self, name: &str) -> Result<TreeDeleted, Self::Error>;
    /// Rename the top-level subvolume `from` to `to`, which must not exist.
    fn rename(&mut self, from: &str, to: &str) -> Result<(), Self::Error>;
    /// Move the top-level subvolume `from` into the root directory of the top-level
    /// subvolume `into`, under a name of its own there.
    fn move_into(&mut self, from: &str, into: &str) -> Result<(), Self::Error>;
}
