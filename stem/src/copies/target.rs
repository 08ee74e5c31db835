//! A target opened for an act: what every kind of target does ([`OpenTarget`]), whatever its
//! place (a local directory, `super::local`; a far host over SSH, `super::ssh`).

use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;

use layout::copies::Target as Configured;
use layout::SnapshotName;
use uuid::Uuid;

use super::process::{capped, Ran, Sink};
use super::{CopyError, CopyOnTarget, Programs};
use crate::engine::EngineError;

/// A stream's writer: the snapshot's send, writing into the fd it is given.
pub type Stream = Box<dyn FnOnce(OwnedFd) -> btrfs::Result<()> + Send>;

/// One target, opened for an act.
pub trait OpenTarget {
    /// Clean (transfers that died), then list the verified copies.
    fn list(&self) -> Result<Vec<CopyOnTarget>, CopyError>;

    /// The verified copies, without cleaning (a look while another act has the target).
    fn list_verified(&self) -> Result<Vec<CopyOnTarget>, CopyError>;

    /// Delete the copy `name`.
    fn delete(&self, name: SnapshotName) -> Result<(), CopyError>;

    /// Receive the stream `send` writes as the copy `name`, then verify it: read-only,
    /// received UUID = `identity`. Returns the received UUID.
    fn receive(
        &self,
        name: SnapshotName,
        identity: Uuid,
        send: Stream,
        moved: &AtomicU64,
    ) -> Result<Uuid, CopyError>;

    /// Send the copy `name` from the target into the store's `.incoming` (by the receiver).
    fn send_into(&self, name: SnapshotName, moved: &AtomicU64) -> Result<(), CopyError>;

    /// Delete what a transfer that died left (after a failed receive).
    fn clean(&self);
}

/// The failure of moving `name` to or from `target`.
pub fn transfer_failed(target: &Configured, name: SnapshotName, reason: String) -> CopyError {
    CopyError::TransferFailed {
        target: target.name.clone(),
        name,
        reason,
    }
}

/// `btrfs receive` of a stream from a target into the store's `.incoming`, by the receiver.
/// The stream comes from the target, which may be hostile: `btrfs receive` follows the
/// paths a stream names, `..` and symlinks the stream made itself included, so unconfined
/// it writes anywhere as root. The receiver confines it to `.incoming` with --chroot (a
/// fetch is always a full stream, so no parent needs finding outside it) and stops it at
/// the first stream's end (-e).
pub fn receive_into_store(programs: &Programs) -> Sink<'_> {
    Sink::Receiver {
        socket: &programs.receiver,
        place: crate::receive_protocol::Where::Store,
    }
}

/// btrfs receive's failure in words, with what to do where btrfs's own say too little.
pub fn receive_failure(stderr: &str) -> String {
    let words = format!("btrfs receive: {}", capped(stderr));
    if stderr.contains("not reachable") {
        format!(
            "{words}; a subvolume outside the store claims to be a copy of a snapshot this \
             stream builds on (anybody may make one where they may write, e.g. in /tmp): find \
             it with `btrfs subvolume list -R /` (the received UUID the chain's parent has), \
             delete it, then fetch again"
        )
    } else {
        words
    }
}

/// How a fetch's `btrfs receive` into the store ended, with how the send ended.
pub fn received_into_store(
    target: &Configured,
    name: SnapshotName,
    ran: Ran,
    sent: btrfs::Result<()>,
) -> Result<(), CopyError> {
    if !ran.ok() {
        let reason = receive_failure(&ran.stderr);
        return Err(if ran.stderr.contains("No space left") {
            CopyError::Engine(EngineError::NoSpace {
                doing: format!("fetching {name}: {reason}"),
            })
        } else {
            transfer_failed(target, name, reason)
        });
    }
    sent.map_err(|e| transfer_failed(target, name, format!("sending: {e}")))
}
