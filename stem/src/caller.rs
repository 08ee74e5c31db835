//! Who may call the stem: the keeper's user, and nobody else.
//!
//! The caller is identified by the bus's own record of the connection that sent the call
//! (`GetConnectionUnixUser` on the message's sender), never by anything in the call itself.
//! Any failure to learn the caller is a refusal (the polkit CVE-2021-3560 lesson: a caller
//! that disconnects before the lookup must not be mistaken for root). The bus policy file
//! refuses strangers too; this check is the one that does not depend on a file being
//! installed right.

use std::sync::Arc;

use bus_peer::{CallerUids, UnknownCaller};
use zbus::message::Header;
use zbus::Connection;

/// The one user allowed to call the stem.
#[derive(Debug, Clone)]
pub struct KeeperOnly {
    user: String,
    uid: u32,
    /// The uids of the unique bus names that called, as the bus said. The bus never gives
    /// a unique name to a second connection, so the answer stands for the connection's
    /// life; remembering it saves a round trip to the bus on every call.
    callers: Arc<CallerUids>,
}

/// How many callers' uids are remembered: the keeper holds one connection (a new one when
/// it restarts); past this, the memory starts again.
const CALLERS_REMEMBERED: usize = 64;

/// Questions "who is calling?" waiting for the bus at once.
const CALLER_LOOKUPS: usize = 32;

fn callers() -> Arc<CallerUids> {
    Arc::new(CallerUids::new(CALLERS_REMEMBERED, CALLER_LOOKUPS))
}

impl PartialEq for KeeperOnly {
    fn eq(&self, other: &Self) -> bool {
        self.user == other.user && self.uid == other.uid
    }
}

impl Eq for KeeperOnly {}

/// Why a call was refused. The text is for the caller and the journal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallerRefused {
    #[error("the call carries no sender; refused")]
    NoSender,
    #[error("the bus could not say who sent the call ({0}); refused")]
    UnknownCaller(String),
    #[error("uid {uid} may not call the stem; only {user} (uid {allowed}) may — ask through the keeper (`tacid data …`)")]
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
            Ok(Some(found)) => Ok(KeeperOnly {
                user: user.to_owned(),
                uid: found.uid.as_raw(),
                callers: callers(),
            }),
            Ok(None) => Err(KeeperUserError::NoSuchUser(user.to_owned())),
            Err(source) => Err(KeeperUserError::Lookup {
                user: user.to_owned(),
                source,
            }),
        }
    }

    /// Nobody at all may call: for producing introspection data, where nothing is called.
    pub fn nobody() -> KeeperOnly {
        // (uid_t)-1 is never a process's uid; the kernel reserves it as "no change".
        KeeperOnly {
            user: "(nobody)".into(),
            uid: u32::MAX,
            callers: callers(),
        }
    }

    /// The allowed user's name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The allowed user's uid.
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
    /// Returns the caller's uid when it is allowed.
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
                UnknownCaller::Bus(e) => CallerRefused::UnknownCaller(e),
            })?;
        self.permits(uid)?;
        Ok(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_one_uid_is_permitted() {
        let a = KeeperOnly {
            user: "k".into(),
            uid: 991,
            callers: callers(),
        };
        assert_eq!(a.permits(991), Ok(()));
        assert_eq!(
            a.permits(0),
            Err(CallerRefused::NotTheKeeper {
                uid: 0,
                user: "k".into(),
                allowed: 991
            })
        );
        assert!(KeeperOnly::nobody().permits(0).is_err());
    }

    #[test]
    fn root_resolves_and_a_missing_user_is_named() {
        assert_eq!(KeeperOnly::of_user("root").expect("root exists").uid(), 0);
        match KeeperOnly::of_user("tacid-no-such-user-xyz") {
            Err(KeeperUserError::NoSuchUser(name)) => assert_eq!(name, "tacid-no-such-user-xyz"),
            other => panic!("expected NoSuchUser, got {other:?}"),
        }
    }
}
