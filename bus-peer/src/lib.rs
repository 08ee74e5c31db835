//! Who is at the other end of a D-Bus call, for both daemons and the CLI, and the named
//! errors both interfaces declare the same way ([`named_errors!`]).
//!
//! - [`CallerUids`]: the uid of the connection that sent a call, from the bus's own record
//!   (`GetConnectionUnixUser` on the message's sender), never from anything in the call.
//!   Any failure to learn it is an error, which the daemons treat as a refusal (the polkit
//!   CVE-2021-3560 lesson: a caller that disconnects before the lookup must not be mistaken
//!   for root).
//! - [`peer_gone`]: whether a failed call failed because the peer is not on the bus, or
//!   left it while the call waited, rather than because it answered an error.
//! - [`only`]: a daemon that serves one user only (the stem and the copier serve the keeper).
//! - [`owner`]: the caller's side: which connection owns a well-known name and as which uid,
//!   checked before anything is handed to it.

pub mod only;
pub mod owner;

use std::collections::HashMap;
use std::sync::Mutex;

use zbus::message::Header;
use zbus::names::BusName;
use zbus::proxy::CacheProperties;
use zbus::{fdo, Connection};

/// Why the caller's uid could not be learnt. Either way the call is refused; the daemons
/// word it for their callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownCaller {
    /// The message names no sender.
    NoSender,
    /// The bus did not answer who the sender is (the text is the bus's error), or the
    /// lookups were closed.
    Bus(String),
}

/// The uids of the connections that called, learnt from the bus and remembered. A unique
/// name is never given to another connection while the bus runs, so what the bus said of
/// it stays true; remembering it saves a round trip to the bus on every call.
#[derive(Debug)]
pub struct CallerUids {
    known: Mutex<HashMap<String, u32>>,
    /// Past this many senders remembered, the memory of them starts again.
    remembered: usize,
    /// Lookups waiting for the bus at once: the bus refuses a connection's calls past its
    /// limit of waiting replies, and the rest of that share must stay free (adr/0016).
    lookups: tokio::sync::Semaphore,
}

impl CallerUids {
    /// Remember at most `remembered` senders; ask the bus at most `lookups_at_once` at once.
    pub fn new(remembered: usize, lookups_at_once: usize) -> CallerUids {
        CallerUids {
            known: Mutex::new(HashMap::new()),
            remembered,
            lookups: tokio::sync::Semaphore::new(lookups_at_once),
        }
    }

    fn known(&self, sender: &str) -> Option<u32> {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sender)
            .copied()
    }

    /// The uid of the sender of the call whose header is `header`, asking the bus on
    /// `connection` unless it is remembered.
    pub async fn of(
        &self,
        connection: &Connection,
        header: &Header<'_>,
    ) -> Result<u32, UnknownCaller> {
        let sender = header.sender().ok_or(UnknownCaller::NoSender)?;
        if let Some(uid) = self.known(sender.as_str()) {
            return Ok(uid);
        }
        let _turn = self
            .lookups
            .acquire()
            .await
            .map_err(|e| UnknownCaller::Bus(e.to_string()))?;
        // Another call of the same connection may have asked while this one waited.
        if let Some(uid) = self.known(sender.as_str()) {
            return Ok(uid);
        }
        let unknown = |e: zbus::Error| UnknownCaller::Bus(e.to_string());
        // No property cache: building the proxy then costs no round trip.
        let bus = fdo::DBusProxy::builder(connection)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(unknown)?;
        let uid = bus
            .get_connection_unix_user(BusName::Unique(sender.to_owned()))
            .await
            .map_err(|e| UnknownCaller::Bus(e.to_string()))?;
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= self.remembered {
            known.clear();
        }
        known.insert(sender.as_str().to_owned(), uid);
        Ok(uid)
    }
}

/// How a peer is gone, when a call failed for that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerGone {
    /// Nobody owns its name (and activation could not start it): the call was never
    /// delivered, so nothing was done.
    NotThere,
    /// It left the bus while the call was with it: it may have acted.
    WentAway,
}

/// The bus's error names for "nobody owns that name" (the `Spawn.` ones: activation failed).
const NOT_THERE: [&str; 2] = [
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
];
const SPAWN: &str = "org.freedesktop.DBus.Error.Spawn.";
const NO_REPLY: &str = "org.freedesktop.DBus.Error.NoReply";

/// Whether the call failed with `e` because the peer is not on the bus or left it, and
/// which; `None` for any other failure (an error the peer answered, a bus that refused).
pub fn peer_gone(e: &zbus::Error) -> Option<PeerGone> {
    match e {
        zbus::Error::MethodError(name, _, _) => {
            let name = name.as_str();
            if NOT_THERE.contains(&name) || name.starts_with(SPAWN) {
                Some(PeerGone::NotThere)
            } else if name == NO_REPLY {
                Some(PeerGone::WentAway)
            } else {
                None
            }
        }
        zbus::Error::FDO(fdo) => match **fdo {
            fdo::Error::ServiceUnknown(_)
            | fdo::Error::NameHasNoOwner(_)
            | fdo::Error::SpawnServiceNotFound(_)
            | fdo::Error::SpawnFailed(_) => Some(PeerGone::NotThere),
            fdo::Error::NoReply(_) | fdo::Error::Disconnected(_) => Some(PeerGone::WentAway),
            _ => None,
        },
        _ => None,
    }
}

/// Whether the call failed with `e` because the peer is not on the bus or left it.
pub fn is_peer_gone(e: &zbus::Error) -> bool {
    peer_gone(e).is_some()
}

/// The named errors of a tacid bus interface, from one list of kinds: `ErrorKind` (no data;
/// `ALL`, `name()`), and `Error` (zbus's `DBusError`, one variant per kind named on the bus
/// `<prefix>.<Kind>`, plus `ZBus` for a failure of the bus itself or a name the interface
/// does not know), with `Error::new(kind, message)`, `kind()` and `message()`. Every
/// match is written by the macro, so a kind cannot be left out of one.
#[macro_export]
macro_rules! named_errors {
    (
        $(#[$error_meta:meta])*
        prefix = $prefix:literal;
        $(#[$kind_meta:meta])*
        kinds { $( $(#[$doc:meta])* $kind:ident, )* }
    ) => {
        $(#[$error_meta])*
        #[derive(Debug, Clone, PartialEq, zbus::DBusError)]
        #[zbus(prefix = $prefix)]
        pub enum Error {
            /// Client side only: the bus or the connection failed, or an error this
            /// interface does not name came back.
            #[zbus(error)]
            ZBus(zbus::Error),
            $( $kind(String), )*
        }

        $(#[$kind_meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $( $(#[$doc])* $kind, )*
        }

        impl ErrorKind {
            /// Every kind, in the order the interface declares them.
            pub const ALL: [ErrorKind; [$(stringify!($kind)),*].len()] = [$(ErrorKind::$kind),*];

            /// The last part of its D-Bus error name (`NoSuchSnapshot`).
            pub fn name(self) -> &'static str {
                match self {
                    $( ErrorKind::$kind => stringify!($kind), )*
                }
            }
        }

        impl std::fmt::Display for ErrorKind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl Error {
            /// The error of `kind` with `message`.
            pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
                let m = message.into();
                match kind {
                    $( ErrorKind::$kind => Error::$kind(m), )*
                }
            }

            /// Its kind; `None` for a failure of the bus itself (or an error this
            /// interface does not name).
            pub fn kind(&self) -> Option<ErrorKind> {
                match self {
                    $( Error::$kind(_) => Some(ErrorKind::$kind), )*
                    Error::ZBus(_) => None,
                }
            }

            /// The message alone (without the error name).
            pub fn message(&self) -> String {
                match self {
                    $( Error::$kind(m) => m.clone(), )*
                    Error::ZBus(e) => e.to_string(),
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn method_error(name: &str) -> zbus::Error {
        zbus::Error::MethodError(
            zbus::names::OwnedErrorName::try_from(name).expect("an error name"),
            Some("m".into()),
            zbus::message::Message::method_call("/", "X")
                .build(&())
                .expect("a message"),
        )
    }

    #[test]
    fn a_peer_not_there_and_one_that_went_away_are_told_apart() {
        for name in [
            "org.freedesktop.DBus.Error.ServiceUnknown",
            "org.freedesktop.DBus.Error.NameHasNoOwner",
            "org.freedesktop.DBus.Error.Spawn.ServiceNotFound",
            "org.freedesktop.DBus.Error.Spawn.Failed",
        ] {
            assert_eq!(
                peer_gone(&method_error(name)),
                Some(PeerGone::NotThere),
                "{name}"
            );
        }
        assert_eq!(
            peer_gone(&method_error("org.freedesktop.DBus.Error.NoReply")),
            Some(PeerGone::WentAway)
        );
        for name in [
            "org.freedesktop.DBus.Error.AccessDenied",
            "org.tacid.Stem1.Error.NoSuchSnapshot",
            "org.freedesktop.DBus.Error.ServiceUnknownish",
        ] {
            assert_eq!(peer_gone(&method_error(name)), None, "{name}");
            assert!(!is_peer_gone(&method_error(name)));
        }
        let fdo = |e: fdo::Error| zbus::Error::FDO(Box::new(e));
        assert_eq!(
            peer_gone(&fdo(fdo::Error::NameHasNoOwner("x".into()))),
            Some(PeerGone::NotThere)
        );
        assert_eq!(
            peer_gone(&fdo(fdo::Error::Disconnected("x".into()))),
            Some(PeerGone::WentAway)
        );
        assert_eq!(peer_gone(&fdo(fdo::Error::AccessDenied("x".into()))), None);
        assert_eq!(peer_gone(&zbus::Error::Failure("x".into())), None);
    }
}
