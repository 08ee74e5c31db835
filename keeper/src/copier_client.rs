//! The keeper's side of `org.tacid.Copier1`: the copier's proxy, its answers and errors in
//! the keeper's terms, and its absence as one sentence naming the unit to start. The
//! copier seals and stores the copies of sealed targets; the keeper only asks it, and never
//! sees a key or a byte of a copy.
//!
//! A machine with no sealed target runs no copier: then every act on a sealed target fails
//! with [`COPIER_NOT_RUNNING`], and Btrfs targets are not touched by any of this.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use copier_interface::{self as copier1, Copier1Proxy, ErrorKind};
use serde::ser::{Error as _, Serialize, Serializer};
use zbus::proxy::CacheProperties;
use zbus::Connection;
use zbus::{Fd, Signature, Type};

use bus_peer::owner::NotTheOwner;

use crate::wire::KeeperError;

/// What the caller is told when the copier is not on the bus.
pub fn copier_not_running() -> String {
    format!(
        "the copier is not running (it seals and keeps the copies of sealed targets): \
         start {unit} (`systemctl start {unit}`) and try again; Btrfs targets do not need it",
        unit = layout::names::COPIER_UNIT
    )
}

/// One end of a pipe handed to a daemon in a call, and closed here as soon as the call's
/// message is built (which holds its own duplicate, closed once the message is sent). A
/// proxy's method would keep the descriptor it is given until the answer comes; then a
/// side that dies could leave the other waiting on a pipe the keeper still holds open.
#[derive(Debug)]
pub struct HandOver(Mutex<Option<OwnedFd>>);

impl HandOver {
    pub fn new(fd: OwnedFd) -> HandOver {
        HandOver(Mutex::new(Some(fd)))
    }

    /// The end has been handed over (the message was built) and is closed here.
    pub fn handed_over(&self) -> bool {
        self.0.lock().map(|g| g.is_none()).unwrap_or(true)
    }
}

impl Serialize for HandOver {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut slot = self
            .0
            .lock()
            .map_err(|_| S::Error::custom("a pipe's end was poisoned"))?;
        let fd = slot
            .take()
            .ok_or_else(|| S::Error::custom("a pipe's end was handed over already"))?;
        // The message's serializer duplicates the descriptor; this one closes on return.
        Fd::from(fd.as_fd()).serialize(s)
    }
}

impl Type for HandOver {
    const SIGNATURE: &'static Signature = &Signature::Fd;
}

/// The copier said no, or could not be reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopierError {
    /// Nobody owns the copier's name: the call was never delivered.
    #[error("{}", copier_not_running())]
    NotRunning,
    /// The copier went away while the call was with it.
    #[error(
        "the copier stopped while answering; start {} and try again",
        layout::names::COPIER_UNIT
    )]
    WentAway,
    /// Whoever owns the copier's name is not the copier's user, or who it is could not be
    /// learnt: nothing is handed to it (the words say what and what to do).
    #[error("{0}")]
    NotTheCopier(String),
    /// A named error of `org.tacid.Copier1`.
    #[error("the copier refused: {message}")]
    Refused { kind: ErrorKind, message: String },
    #[error("talking to the copier failed: {0}")]
    Bus(String),
}

fn classify(e: copier1::Error) -> CopierError {
    match e.kind() {
        Some(kind) => CopierError::Refused {
            kind,
            message: e.message(),
        },
        None => match e {
            copier1::Error::ZBus(e) => match bus_peer::peer_gone(&e) {
                Some(bus_peer::PeerGone::NotThere) => CopierError::NotRunning,
                Some(bus_peer::PeerGone::WentAway) => CopierError::WentAway,
                None => match e {
                    zbus::Error::MethodError(name, message, _) => CopierError::Bus(format!(
                        "{} (copier error {name})",
                        message.unwrap_or_default()
                    )),
                    zbus::Error::FDO(fdo) => CopierError::Bus(fdo.to_string()),
                    other => CopierError::Bus(other.to_string()),
                },
            },
            named => CopierError::Bus(named.to_string()),
        },
    }
}

/// The copier's error as the keeper's, kind to kind.
pub(crate) fn copier_error(e: CopierError) -> KeeperError {
    match e {
        CopierError::NotRunning | CopierError::WentAway => {
            KeeperError::CopierNotRunning(e.to_string())
        }
        CopierError::Bus(m) => KeeperError::CopierFailed(format!("the copier failed: {m}")),
        CopierError::NotTheCopier(m) => KeeperError::CopierFailed(m),
        CopierError::Refused { kind, message } => match kind {
            ErrorKind::NotPermitted
            | ErrorKind::NoKey
            | ErrorKind::KeyUnsafe
            | ErrorKind::Failed => KeeperError::CopierFailed(format!("the copier: {message}")),
            ErrorKind::InvalidArgument => KeeperError::InvalidArgument(message),
            ErrorKind::NotConfigured => KeeperError::NoSuchTarget(message),
            ErrorKind::Unreachable => KeeperError::TargetUnreachable(message),
            ErrorKind::Untrusted => KeeperError::Untrusted(message),
            ErrorKind::NotFound => {
                KeeperError::NoSuchSnapshot(format!("{message}; see `tacid data copies`"))
            }
            ErrorKind::Needed => KeeperError::Protected(message),
            ErrorKind::Full => KeeperError::TargetFull(message),
            ErrorKind::Busy => KeeperError::TargetBusy(message),
        },
    }
}

/// The copier, over the keeper's bus connection (set once the connection exists), called
/// only once the bus says its name is owned by the copier's user.
#[derive(Debug, Default)]
pub struct CopierClient {
    connection: OnceLock<Connection>,
    /// The copier's user (`--copier-user`); `layout::names::COPIER_USER` unless told.
    user: OnceLock<String>,
    owners: bus_peer::owner::Owners,
}

impl CopierClient {
    /// Use `connection` from now on (once).
    pub fn connect(&self, connection: Connection) {
        let _ = self.connection.set(connection);
    }

    /// The copier runs as `user` (once; before the first call).
    pub fn expect_user(&self, user: &str) {
        let _ = self.user.set(user.to_owned());
    }

    fn user(&self) -> &str {
        self.user
            .get()
            .map(String::as_str)
            .unwrap_or(layout::names::COPIER_USER)
    }

    /// A proxy to the connection that owns the copier's name, once the bus has said that
    /// connection runs as the copier's user: the bus policy says only that user may own the
    /// name, but a policy file installed wrong must not be enough to hand a stranger a pipe
    /// or a copy's name. The proxy calls the owner's unique name, which no other connection
    /// can take over between this check and the call. Any error deciding is a refusal.
    async fn proxy(&self) -> Result<Copier1Proxy<'static>, CopierError> {
        let conn = self.connection.get().ok_or(CopierError::NotRunning)?;
        let name = layout::names::COPIER_BUS_NAME;
        let user = self.user();
        let uid = bus_peer::only::uid_of_user(user).map_err(|e| {
            CopierError::NotTheCopier(format!(
                "cannot tell whether {name} is the copier: the copier's user {user} cannot be \
                 looked up ({e}); create it (the NixOS module does when a target is sealed) \
                 or name it with tacid-keeper's --copier-user"
            ))
        })?;
        let owner = self.owners.owned_by_or_started(conn, name, uid).await;
        let owner = owner.map_err(|e| match e {
            NotTheOwner::NoOwner => CopierError::NotRunning,
            NotTheOwner::Bus(m) => CopierError::NotTheCopier(format!(
                "cannot tell who owns {name} on the bus ({m}); nothing was handed to it: \
                 check that the bus is running and try again"
            )),
            NotTheOwner::Stranger {
                unique,
                uid: theirs,
            } => CopierError::NotTheCopier(format!(
                "{name} is owned by {unique}, which runs as uid {theirs}, not as the copier's \
                 user {user} (uid {uid}): refused to hand it anything. Find and stop that \
                 process (`busctl --system status {name}`), check that the bus policy lets \
                 only {user} own {name}, then start {unit}",
                unit = layout::names::COPIER_UNIT
            )),
        })?;
        Copier1Proxy::builder(conn)
            .destination(owner)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| CopierError::Bus(e.to_string()))
    }

    /// Call `f` on the proxy; when the copier is not there, wait a moment and try once more
    /// (it may be starting), the owner checked again.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T, CopierError>
    where
        F: Fn(Copier1Proxy<'static>) -> Fut,
        Fut: std::future::Future<Output = Result<T, copier1::Error>>,
    {
        let first = match self.proxy().await {
            Ok(proxy) => f(proxy).await.map_err(classify),
            Err(e) => Err(e),
        };
        match first {
            Err(CopierError::NotRunning) => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                f(self.proxy().await?).await.map_err(classify)
            }
            other => other,
        }
    }

    /// What the sealed target `target` holds, every copy (a bad one with its problem).
    pub async fn copies(&self, target: &str) -> Result<Vec<copier1::SealedCopy>, CopierError> {
        let target = target.to_owned();
        self.call(|p| {
            let target = target.clone();
            async move { p.copies(&target).await }
        })
        .await
    }

    /// Read back and check `names` on `target` (empty: every copy).
    pub async fn verify(
        &self,
        target: &str,
        names: &[String],
    ) -> Result<Vec<copier1::Verified>, CopierError> {
        let target = target.to_owned();
        let names = names.to_vec();
        self.call(|p| {
            let (target, names) = (target.clone(), names.clone());
            async move { p.verify(&target, names).await }
        })
        .await
    }

    /// The copier's acts in flight (none when it is not running).
    pub async fn progress(&self) -> Vec<copier1::SealProgress> {
        match self.proxy().await {
            Ok(p) => p.progress().await.unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Delete the copy `name` on `target` (refused while another copy needs it).
    pub async fn delete(&self, target: &str, name: &str) -> Result<(), CopierError> {
        let (target, name) = (target.to_owned(), name.to_owned());
        self.call(|p| {
            let (target, name) = (target.clone(), name.clone());
            async move { p.delete(&target, &name).await }
        })
        .await
    }

    /// Seal what the stem writes into the pipe whose read end is `from`. The end is closed
    /// here once the call is sent. Not retried: the end is handed over once.
    pub async fn seal(
        &self,
        target: &str,
        name: &str,
        (uuid, parent_name, parent_uuid): (&str, &str, &str),
        from: HandOver,
    ) -> Result<copier1::Sealed, CopierError> {
        let proxy = self.proxy().await?;
        let reply = proxy
            .inner()
            .call_method(
                "Seal",
                &(target, name, uuid, parent_name, parent_uuid, &from),
            )
            .await
            .map_err(|e| classify(e.into()))?;
        reply
            .body()
            .deserialize()
            .map_err(|e| CopierError::Bus(format!("the copier's answer does not read: {e}")))
    }

    /// Write the copy `name`'s chain, authenticated, into the pipe whose write end is
    /// `into`; closed here once the call is sent.
    pub async fn unseal(
        &self,
        target: &str,
        name: &str,
        into: HandOver,
    ) -> Result<copier1::Unsealed, CopierError> {
        let proxy = self.proxy().await?;
        let reply = proxy
            .inner()
            .call_method("Unseal", &(target, name, &into))
            .await
            .map_err(|e| classify(e.into()))?;
        reply
            .body()
            .deserialize()
            .map_err(|e| CopierError::Bus(format!("the copier's answer does not read: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn a_handed_over_end_is_closed_here_once_the_message_is_built() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let w = HandOver::new(w);
        let msg = zbus::Message::method_call("/org/tacid/Copier1", "Seal")
            .build(&("usb", &w))
            .unwrap();
        assert!(w.handed_over());
        assert_eq!(msg.data().fds().len(), 1);
        // The message holds the only write end left: once it goes (it is sent and dropped),
        // the reader sees the end of the pipe, as a reader does when the writer dies.
        drop(msg);
        let mut buf = [0u8; 1];
        let n = std::fs::File::from(r).read(&mut buf).unwrap();
        assert_eq!(n, 0);
        // Handed over once only: a second message cannot carry it.
        assert!(zbus::Message::method_call("/", "X").build(&(&w,)).is_err());
    }
}
