//! Who may call a daemon: one user (the keeper's), and nobody else. The stem and the copier
//! both serve only the keeper; this is the check they share.
//!
//! The caller is the bus's own record of the connection that sent the call
//! (`GetConnectionUnixUser` on the message's sender, through [`CallerUids`]), never anything
//! in the call. Any failure to learn it is a refusal. The bus policy files refuse strangers
//! too; this check is the one that does not depend on a file being installed right.

use std::sync::Arc;

use zbus::message::Header;
use zbus::Connection;

use crate::{CallerUids, UnknownCaller};

/// How many callers' uids are remembered: the keeper holds one connection (a new one when
/// it restarts); past this, the memory starts again.
const CALLERS_REMEMBERED: usize = 64;

/// Questions "who is calling?" waiting for the bus at once.
const CALLER_LOOKUPS: usize = 32;

/// The one user allowed to call a daemon (`serves` names the daemon in refusals).
#[derive(Debug, Clone)]
pub struct OnlyUser {
    user: String,
    uid: u32,
    serves: &'static str,
    callers: Arc<CallerUids>,
}

impl PartialEq for OnlyUser {
    fn eq(&self, other: &Self) -> bool {
        self.user == other.user && self.uid == other.uid && self.serves == other.serves
    }
}

impl Eq for OnlyUser {}

/// Why a call was refused. The text is for the caller, the log and the journal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallerRefused {
    #[error("the call carries no sender; refused")]
    NoSender,
    #[error("the bus could not say who sent the call ({0}); refused")]
    UnknownCaller(String),
    #[error("uid {uid} may not call {serves}; only {user} (uid {allowed}) may — ask through the keeper (`tacid data …`)")]
    NotTheKeeper {
        uid: u32,
        user: String,
        allowed: u32,
        serves: &'static str,
    },
}

/// The allowed user could not be resolved at start.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("there is no user named {0:?}; create the keeper's system user (the NixOS module does) or name another with --keeper-user")]
    NoSuchUser(String),
    #[error("looking up user {user:?} failed: {source}")]
    Lookup { user: String, source: nix::Error },
}

/// The uid of the user named `user`, through the system's user database (NSS).
pub fn uid_of_user(user: &str) -> Result<u32, UserError> {
    match nix::unistd::User::from_name(user) {
        Ok(Some(found)) => Ok(found.uid.as_raw()),
        Ok(None) => Err(UserError::NoSuchUser(user.to_owned())),
        Err(source) => Err(UserError::Lookup {
            user: user.to_owned(),
            source,
        }),
    }
}

impl OnlyUser {
    /// Only the user named `user` (resolved now) may call `serves` ("the stem").
    pub fn of_user(user: &str, serves: &'static str) -> Result<OnlyUser, UserError> {
        Ok(OnlyUser::of_uid(user, uid_of_user(user)?, serves))
    }

    /// Only `uid` (shown as `user`) may call `serves`.
    pub fn of_uid(user: &str, uid: u32, serves: &'static str) -> OnlyUser {
        OnlyUser {
            user: user.to_owned(),
            uid,
            serves,
            callers: Arc::new(CallerUids::new(CALLERS_REMEMBERED, CALLER_LOOKUPS)),
        }
    }

    /// Nobody at all may call: for producing introspection data, where nothing is called.
    pub fn nobody(serves: &'static str) -> OnlyUser {
        // (uid_t)-1 is never a process's uid; the kernel reserves it as "no change".
        OnlyUser::of_uid("(nobody)", u32::MAX, serves)
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
                serves: self.serves,
            })
        }
    }

    /// Check the sender of the call whose header is `header`, asking the bus on
    /// `connection`; the caller's uid when it is allowed.
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
    fn only_the_one_uid_is_permitted_and_the_refusal_names_the_daemon() {
        let a = OnlyUser::of_uid("k", 991, "the stem");
        assert_eq!(a.permits(991), Ok(()));
        let refused = a.permits(0).expect_err("root is not the keeper");
        assert_eq!(
            refused,
            CallerRefused::NotTheKeeper {
                uid: 0,
                user: "k".into(),
                allowed: 991,
                serves: "the stem",
            }
        );
        assert!(refused
            .to_string()
            .starts_with("uid 0 may not call the stem; only k (uid 991) may"));
        assert!(OnlyUser::nobody("the copier").permits(0).is_err());
    }

    #[test]
    fn root_resolves_and_a_missing_user_is_named() {
        let root = OnlyUser::of_user("root", "the copier").expect("root exists");
        assert_eq!(root.uid(), 0);
        match OnlyUser::of_user("tacid-no-such-user-xyz", "the stem") {
            Err(UserError::NoSuchUser(name)) => assert_eq!(name, "tacid-no-such-user-xyz"),
            other => panic!("expected NoSuchUser, got {other:?}"),
        }
    }
}
