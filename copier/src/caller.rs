//! Who may call the copier: the keeper's user, and nobody else.
//!
//! The caller is the bus's own record of the connection that sent the call
//! (`GetConnectionUnixUser` on the message's sender), never anything in the call. Any
//! failure to learn it is a refusal. The bus policy file refuses strangers too; this check
//! is the one that does not depend on a file being installed right.

use std::sync::Arc;

use bus_peer::{CallerUids, UnknownCaller};
use zbus::message::Header;
use zbus::Connection;

/// The one user allowed to call the copier.
#[derive(Debug, Clone)]
pub struct KeeperOnly {
    user: String,
    uid: u32,
    callers: Arc<CallerUids>,
}

/// The keeper holds one connection (a new one when it restarts); past this, the memory of
/// callers starts again.
const CALLERS_REMEMBERED: usize = 64;
/// Questions "who is calling?" waiting for the bus at once.
const CALLER_LOOKUPS: usize = 32;

/// Why a call was refused. The text is for the caller and the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallerRefused {
    #[error("the call carries no sender; refused")]
    NoSender,
    #[error("the bus could not say who sent the call ({0}); refused")]
    UnknownCaller(String),
    #[error("uid {uid} may not call the copier; only {user} (uid {allowed}) may — ask through the keeper (`tacid data …`)")]
    NotTheKeeper {
        uid: u32,
        user: String,
        allowed: u32,
    },
}

/// The allowed user could not be resolved at start.
#[derive(Debug, thiserror::Error)]
pub enum KeeperUserError {
    #[error("there is no user named {0:?}; create the keeper's system user (the NixOS module does) or name another with --keeper-user")]
    NoSuchUser(String),
    #[error("looking up user {user:?} failed: {source}")]
    Lookup { user: String, source: nix::Error },
}

impl KeeperOnly {
    /// The user named `user`, resolved now through the system's user database (NSS).
    pub fn of_user(user: &str) -> Result<KeeperOnly, KeeperUserError> {
        match nix::unistd::User::from_name(user) {
            Ok(Some(found)) => Ok(KeeperOnly::of_uid(user, found.uid.as_raw())),
            Ok(None) => Err(KeeperUserError::NoSuchUser(user.to_owned())),
            Err(source) => Err(KeeperUserError::Lookup {
                user: user.to_owned(),
                source,
            }),
        }
    }

    fn of_uid(user: &str, uid: u32) -> KeeperOnly {
        KeeperOnly {
            user: user.to_owned(),
            uid,
            callers: Arc::new(CallerUids::new(CALLERS_REMEMBERED, CALLER_LOOKUPS)),
        }
    }

    /// Nobody at all may call: for producing introspection data, where nothing is called.
    pub fn nobody() -> KeeperOnly {
        // (uid_t)-1 is never a process's uid.
        KeeperOnly::of_uid("(nobody)", u32::MAX)
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Whether `uid` is the allowed user.
    pub fn permits(&self, uid: u32) -> Result<(), CallerRefused> {
        if uid == self.uid {
            Ok(())
        } else {
            Err(CallerRefused::NotTheKeeper {
                uid,
                user: self.user.clone(),
                allowed: self.uid,
            })
        }
    }

    /// Check the sender of the call whose header is `header`, asking the bus on `connection`.
    pub async fn check(
        &self,
        connection: &Connection,
        header: &Header<'_>,
    ) -> Result<u32, CallerRefused> {
        let uid = self
            .callers
            .of(connection, header)
            .await
            .map_err(|e| match e {
                UnknownCaller::NoSender => CallerRefused::NoSender,
                UnknownCaller::Bus(m) => CallerRefused::UnknownCaller(m),
            })?;
        self.permits(uid)?;
        Ok(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_keepers_uid_is_permitted() {
        let only = KeeperOnly::of_uid("tacid-keeper", 990);
        assert_eq!(only.permits(990), Ok(()));
        let refused = only.permits(0).expect_err("root is not the keeper");
        assert!(refused
            .to_string()
            .contains("uid 0 may not call the copier"));
        assert!(KeeperOnly::nobody().permits(0).is_err());
    }
}
