//! Who may call the stem: the keeper's user, and nobody else. The check is the one the
//! copier makes too ([`bus_peer::only`]): the caller as the bus reports it, any error in
//! learning it a refusal.

pub use bus_peer::only::{CallerRefused, UserError as KeeperUserError};

/// The one user allowed to call the stem.
pub type KeeperOnly = bus_peer::only::OnlyUser;

/// How the stem is named in a refusal.
pub const SERVES: &str = "the stem";

/// Only the user named `user` (resolved now, through NSS) may call the stem.
pub fn keeper_only(user: &str) -> Result<KeeperOnly, KeeperUserError> {
    KeeperOnly::of_user(user, SERVES)
}

/// Nobody at all may call: for producing introspection data, where nothing is called.
pub fn nobody() -> KeeperOnly {
    KeeperOnly::nobody(SERVES)
}
