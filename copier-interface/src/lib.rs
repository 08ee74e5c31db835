//! `org.tacid.Copier1`, the copier's D-Bus interface, version 1, as both sides see it: the
//! types that cross the bus, the named errors, and the client's proxy ([`Copier1Proxy`]).
//!
//! The copier (`tacid-copier`, its own user, no capabilities) is the only part that holds
//! the recovery key and talks to the network: it seals send streams the stem writes into a
//! pipe, keeps them on sealed targets, and unseals them into a pipe the stem reads. Only
//! the keeper's user may call it. The server is the copier's `copier1` module; its
//! introspection is committed beside this crate (`org.tacid.Copier1.xml`) and a test in
//! the copier holds the two equal. The keeper links this crate only (never the copier, never
//! the seal library).
//!
//! Version 1 is frozen once shipped: a change of meaning is `org.tacid.Copier2`, served
//! beside this one for a release; additions are new methods.

use serde::{Deserialize, Serialize};
use zbus::{OwnedFd, Type};

/// One sealed target of root's copies configuration (Targets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SealedTarget {
    /// The target's configured name.
    pub name: String,
    /// Where its copies are kept, as shown to a person (no credentials).
    pub place_shown: String,
    /// A full copy every this many copies: a chain holds at most this many copies, its
    /// full copy counted (`layout::copies::Seal::full_every`).
    pub full_every: u32,
    /// A full copy when the incrementals since the last full add up past this many stored
    /// bytes; 0: past the full's own stored bytes.
    pub full_past_bytes: u64,
}

/// The answer to Seal: the copy made, stored durably and read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Sealed {
    /// The snapshot sealed (the copy has its name).
    pub name: String,
    /// The copy's generation: higher than every copy the copier wrote to the target before.
    pub generation: u64,
    /// How many parts the copy is stored in.
    pub parts: u32,
    /// Bytes of send stream sealed.
    pub plain_bytes: u64,
    /// Bytes stored on the target (compressed and encrypted, manifest excluded).
    pub stored_bytes: u64,
    /// 0 for a full copy; otherwise its parent's depth + 1.
    pub depth: u32,
}

/// One copy on a sealed target (Copies). A copy whose manifest does not authenticate is
/// listed with `problem` set and its other fields empty or 0 (except `name`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SealedCopy {
    /// The copy's name: the snapshot's name (as the store names it when `problem` is set).
    pub name: String,
    /// The snapshot's Btrfs UUID, lowercase and hyphenated.
    pub uuid: String,
    /// The UUID of the snapshot it was sent against; "" for a full copy.
    pub parent_uuid: String,
    /// 0 for a full copy; otherwise its parent's depth + 1.
    pub depth: u32,
    pub generation: u64,
    /// Bytes of send stream it holds.
    pub plain_bytes: u64,
    /// Bytes stored on the target.
    pub stored_bytes: u64,
    /// When it was sealed, in microseconds since the Unix epoch.
    pub created_micros: u64,
    /// "" for a good copy; otherwise what is wrong with it and what to do.
    pub problem: String,
}

/// The answer to Verify, one per copy checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Verified {
    pub name: String,
    /// True when the copy and its whole chain down to the full copy read back whole and
    /// authentic.
    pub ok: bool,
    /// "" when ok; otherwise what failed and what to do.
    pub problem: String,
    /// Bytes read from the target for it.
    pub bytes_read: u64,
}

/// The answer to Unseal: what was written into the pipe (framed, END last).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Unsealed {
    pub name: String,
    /// The Btrfs UUID of the snapshot the last stream makes.
    pub uuid: String,
    /// The copies whose streams were written, full first, `name` last.
    pub chain: Vec<String>,
    /// Bytes of send stream written.
    pub bytes: u64,
}

/// One act in flight (Progress).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SealProgress {
    pub target: String,
    /// The copy acted on; "" for an act on the whole target (cleaning, listing).
    pub name: String,
    /// "seal", "unseal", "verify", "delete", "clean" or "list".
    pub doing: String,
    /// Bytes moved so far.
    pub moved: u64,
}

bus_peer::named_errors! {
    /// The errors of `org.tacid.Copier1`: one variant per [`ErrorKind`], named on the bus
    /// `org.tacid.Copier1.Error.<Kind>`, with a message that says what to do.
    prefix = "org.tacid.Copier1.Error";
    /// Why the copier said no: every error `org.tacid.Copier1` names, without its message.
    /// The D-Bus name is `org.tacid.Copier1.Error.` and [`ErrorKind::name`].
    kinds {
        /// The caller is not the keeper's user, or the bus could not say who the caller is.
        NotPermitted,
        /// An argument is malformed: not a canonical snapshot name, not a UUID, not a pipe.
        InvalidArgument,
        /// No sealed target of that name is configured (or the configuration is unreadable).
        NotConfigured,
        /// There is no recovery key yet: run `tacid-copier key init` as root.
        NoKey,
        /// The key or a credentials file is not the copier's alone (owner, mode, a link).
        KeyUnsafe,
        /// The target cannot be reached, or did not answer in time.
        Unreachable,
        /// The target served something this machine's key does not authenticate (a changed
        /// byte, a missing or swapped part, another machine's copy, an older manifest).
        Untrusted,
        /// The target holds no copy of that name.
        NotFound,
        /// The copy is the parent of another copy on the target; delete that one first.
        Needed,
        /// The target is full; the parts of the copy cut short are cleaned by the next act.
        Full,
        /// The target is busy with another act (one at a time per target).
        Busy,
        /// Anything else went wrong; the message says what.
        Failed,
    }
}

/// The client side of `org.tacid.Copier1` (the keeper's way in). Each method is the
/// server's of the same name (`seal` is `Seal`); what it does and which errors it answers
/// is documented there, in the copier's `copier1.rs` and the committed XML.
// The names are literals because the macro needs literals; a test checks them against
// `layout::names`.
#[zbus::proxy(
    interface = "org.tacid.Copier1",
    default_service = "org.tacid.Copier1",
    default_path = "/org/tacid/Copier1"
)]
pub trait Copier1 {
    fn targets(&self) -> Result<Vec<SealedTarget>, Error>;
    /// Seal the frames read from `from` (the stem's SendSealed writes them) as the copy
    /// `name` on `target`. `parent_name` "" (and `parent_uuid` "") for a full copy.
    #[allow(clippy::too_many_arguments)]
    fn seal(
        &self,
        target: &str,
        name: &str,
        uuid: &str,
        parent_name: &str,
        parent_uuid: &str,
        from: OwnedFd,
    ) -> Result<Sealed, Error>;
    fn copies(&self, target: &str) -> Result<Vec<SealedCopy>, Error>;
    fn verify(&self, target: &str, names: Vec<String>) -> Result<Vec<Verified>, Error>;
    /// Write the copy `name`'s whole chain, full first, authenticated, as frames into `into`
    /// (the stem's ReceiveSealed reads them); END last.
    fn unseal(&self, target: &str, name: &str, into: OwnedFd) -> Result<Unsealed, Error>;
    fn delete(&self, target: &str, name: &str) -> Result<(), Error>;
    fn progress(&self) -> Result<Vec<SealProgress>, Error>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::DBusError as _;

    #[test]
    fn every_kind_is_named_on_the_bus_and_read_back_as_itself() {
        for kind in ErrorKind::ALL {
            let e = Error::new(kind, "a message");
            let name = format!("org.tacid.Copier1.Error.{kind:?}");
            assert_eq!(e.name().as_str(), name);
            assert_eq!(e.kind(), Some(kind));
            assert_eq!(e.message(), "a message");
            assert_eq!(kind.name(), format!("{kind:?}"));
            let received = zbus::Error::MethodError(
                zbus::names::OwnedErrorName::try_from(name.as_str()).expect("an error name"),
                Some("a message".into()),
                zbus::message::Message::method_call("/", "X")
                    .build(&())
                    .expect("a message"),
            );
            let back = Error::from(received);
            assert_eq!(back.kind(), Some(kind), "{name}");
            assert_eq!(back.message(), "a message");
        }
        assert_eq!(
            Error::from(zbus::Error::Failure("gone".into())).kind(),
            None
        );
    }

    #[test]
    fn the_proxys_names_are_the_layouts() {
        let src = include_str!("lib.rs");
        for literal in [
            format!("interface = \"{}\"", layout::names::COPIER_BUS_NAME),
            format!("default_service = \"{}\"", layout::names::COPIER_BUS_NAME),
            format!("default_path = \"{}\"", layout::names::COPIER_OBJECT_PATH),
        ] {
            assert!(src.contains(&literal), "{literal}");
        }
        let _ = std::marker::PhantomData::<Copier1Proxy<'static>>;
    }

    #[test]
    fn the_wire_signatures_are_the_contracts() {
        assert_eq!(SealedTarget::SIGNATURE.to_string(), "(ssut)");
        assert_eq!(Sealed::SIGNATURE.to_string(), "(stuttu)");
        assert_eq!(SealedCopy::SIGNATURE.to_string(), "(sssutttts)");
        assert_eq!(Verified::SIGNATURE.to_string(), "(sbst)");
        assert_eq!(Unsealed::SIGNATURE.to_string(), "(ssast)");
        assert_eq!(SealProgress::SIGNATURE.to_string(), "(ssst)");
    }
}
