//! `org.tacid.Copier1`: the copier's D-Bus interface, version 1 — the server side.
//!
//! Every method first checks that the caller is the keeper's user (the bus's record of
//! the connection), then parses its arguments into the layout's types, then hands the act to
//! [`Copier`]. The wire types, the errors and the proxy are `copier_interface`'s; the
//! introspection committed there is what this serves (a test holds them equal).
//!
//! # What this interface deliberately lacks
//!
//! - No method takes a path, a host or a credential: targets are root's configuration,
//!   named by their names only.
//! - No method shows, exports or changes the recovery key: that is root's, at the copier's
//!   command line (`tacid-copier key …`).
//! - No method reads a snapshot or writes one: send streams arrive through a pipe the stem
//!   writes, and leave through a pipe the stem reads.

use std::fmt::Write as _;
use std::os::fd::OwnedFd;

use copier_interface::{
    Error, ErrorKind, SealProgress, Sealed, SealedCopy, SealedTarget, Unsealed, Verified,
};
use layout::SnapshotName;
use uuid::Uuid;
use zbus::message::Header;
use zbus::object_server::Interface as _;
use zbus::{interface, Connection};

use crate::caller::KeeperOnly;
use crate::pipes::{self, End};
use crate::service::Copier;

/// The server: the interface served at `/org/tacid/Copier1`.
#[derive(Debug)]
pub struct Copier1 {
    copier: Option<Copier>,
    keeper_only: KeeperOnly,
}

impl Copier1 {
    pub fn new(copier: Copier, keeper_only: KeeperOnly) -> Copier1 {
        Copier1 {
            copier: Some(copier),
            keeper_only,
        }
    }

    /// Admit the call or refuse it; every method starts here, before it looks at an argument.
    async fn admit(&self, connection: &Connection, header: &Header<'_>) -> Result<&Copier, Error> {
        let member = header
            .member()
            .map(|m| m.as_str().to_owned())
            .unwrap_or_default();
        match self.keeper_only.check(connection, header).await {
            Ok(uid) => tracing::debug!(uid, member, "call admitted"),
            Err(refusal) => {
                tracing::warn!(member, %refusal, "call refused");
                return Err(Error::new(ErrorKind::NotPermitted, refusal.to_string()));
            }
        }
        self.copier
            .as_ref()
            .ok_or_else(|| Error::new(ErrorKind::Failed, "this copier serves nothing"))
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, message)
}

fn capped(text: &str) -> String {
    layout::human::cap(text, 128).into_owned()
}

fn parse_name(name: &str) -> Result<SnapshotName, Error> {
    SnapshotName::parse(name)
        .map_err(|e| invalid(format!("{} is not a snapshot name: {e}", capped(name))))
}

fn parse_uuid(uuid: &str, what: &str) -> Result<Uuid, Error> {
    Uuid::parse_str(uuid)
        .map_err(|e| invalid(format!("{what} {} is not a UUID: {e}", capped(uuid))))
}

fn parse_target(name: &str) -> Result<String, Error> {
    layout::copies::TargetName::parse(name)
        .map(|n| n.to_string())
        .map_err(|e| invalid(format!("{} is not a target name: {e}", capped(name))))
}

fn pipe_end(fd: zbus::OwnedFd, end: End, argument: &str) -> Result<OwnedFd, Error> {
    let fd = OwnedFd::from(fd);
    pipes::check(&fd, end, argument).map_err(invalid)?;
    Ok(fd)
}

/// `org.tacid.Copier1`: sealed copies, kept off the machine, encrypted and authenticated.
/// Only the keeper's user may call it.
// The names are literals because the macro needs literals; a unit test checks them against
// `layout::names`.
#[interface(name = "org.tacid.Copier1")]
impl Copier1 {
    /// The sealed targets of root's configuration. Errors: NotPermitted.
    #[zbus(out_args("targets"))]
    async fn targets(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<SealedTarget>, Error> {
        Ok(self.admit(connection, &header).await?.targets())
    }

    /// Seal the frames read from `from` (the read end of a pipe the stem's SendSealed
    /// writes) as the copy `name` on `target`, against the copy `parent_name` ("" and
    /// `parent_uuid` "" for a full copy). Only an END whose trailer names `uuid` and
    /// `parent_uuid` makes the copy; parts then manifest are stored durably and read back
    /// before the answer. ABORT, EOF or any failure: nothing is listed, the parts are
    /// removed (or by the next act). Errors: NotPermitted, InvalidArgument, NotConfigured,
    /// NoKey, KeyUnsafe, Busy, NotFound (no such parent copy), Unreachable, Untrusted, Full,
    /// Failed.
    #[zbus(out_args("sealed"))]
    #[allow(clippy::too_many_arguments)]
    async fn seal(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
        name: &str,
        uuid: &str,
        parent_name: &str,
        parent_uuid: &str,
        from: zbus::OwnedFd,
    ) -> Result<Sealed, Error> {
        let copier = self.admit(connection, &header).await?;
        let target = parse_target(target)?;
        let name = parse_name(name)?;
        let uuid = parse_uuid(uuid, "uuid")?;
        let parent = match (parent_name, parent_uuid) {
            ("", "") => None,
            ("", _) | (_, "") => {
                return Err(invalid(
                    "parent_name and parent_uuid are both given (an incremental copy) or both \"\" (a full one)".into(),
                ))
            }
            (n, u) => Some((parse_name(n)?, parse_uuid(u, "parent_uuid")?)),
        };
        let from = pipe_end(from, End::Read, "from")?;
        copier.seal(&target, name, uuid, parent, from).await
    }

    /// The copies on `target`, each with its manifest's facts; a copy whose manifest does
    /// not authenticate, or is older than this machine wrote, has `problem` set. Errors:
    /// NotPermitted, InvalidArgument, NotConfigured, NoKey, KeyUnsafe, Busy, Unreachable,
    /// Untrusted, Failed.
    #[zbus(out_args("copies"))]
    async fn copies(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
    ) -> Result<Vec<SealedCopy>, Error> {
        let copier = self.admit(connection, &header).await?;
        let target = parse_target(target)?;
        copier.copies(&target).await
    }

    /// Read back `names` on `target` (every copy when empty): every part of each chain down
    /// to its full copy, digest-checked, decrypted and decompressed, nothing received.
    /// Errors: as Copies, and InvalidArgument for a name that is not a snapshot name.
    #[zbus(out_args("verified"))]
    async fn verify(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
        names: Vec<String>,
    ) -> Result<Vec<Verified>, Error> {
        let copier = self.admit(connection, &header).await?;
        let target = parse_target(target)?;
        let names = names
            .iter()
            .map(|n| parse_name(n))
            .collect::<Result<Vec<_>, _>>()?;
        copier.verify(&target, names).await
    }

    /// Write the chain of the copy `name` on `target` (full first) into `into` (the write
    /// end of a pipe the stem's ReceiveSealed reads), as frames: each part is checked
    /// against its authenticated manifest before it is decrypted and handed on; END after
    /// the whole chain, ABORT with the reason on any failure. Errors: NotPermitted,
    /// InvalidArgument, NotConfigured, NoKey, KeyUnsafe, Busy, NotFound, Unreachable,
    /// Untrusted, Failed.
    #[zbus(out_args("unsealed"))]
    async fn unseal(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
        name: &str,
        into: zbus::OwnedFd,
    ) -> Result<Unsealed, Error> {
        let copier = self.admit(connection, &header).await?;
        let target = parse_target(target)?;
        let name = parse_name(name)?;
        let into = pipe_end(into, End::Write, "into")?;
        copier.unseal(&target, name, into).await
    }

    /// Delete the copy `name` on `target`: its manifest, then its parts. Refused while
    /// another copy's parent is it. Errors: NotPermitted, InvalidArgument, NotConfigured,
    /// NoKey, KeyUnsafe, Busy, NotFound, Needed, Unreachable, Untrusted, Failed.
    async fn delete(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
        target: &str,
        name: &str,
    ) -> Result<(), Error> {
        let copier = self.admit(connection, &header).await?;
        let target = parse_target(target)?;
        let name = parse_name(name)?;
        copier.delete(&target, name).await
    }

    /// The acts in flight, one per busy target, with the bytes each has moved. Errors:
    /// NotPermitted.
    #[zbus(out_args("progress"))]
    async fn progress(
        &self,
        #[zbus(connection)] connection: &Connection,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<SealProgress>, Error> {
        Ok(self.admit(connection, &header).await?.progress())
    }
}

/// The introspection data of `org.tacid.Copier1`, as committed in
/// `copier-interface/org.tacid.Copier1.xml`.
pub fn introspection_xml() -> String {
    let iface = Copier1 {
        copier: None,
        keeper_only: crate::caller::nobody(),
    };
    let mut xml = String::from(
        "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n \
         \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n\
         <!-- Generated by `tacid-copier --print-introspection`; do not edit. -->\n<node>\n",
    );
    iface.introspect_to_writer(&mut xml, 1);
    let _ = writeln!(xml, "</node>");
    xml
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_interface_name_is_the_layouts() {
        let src = include_str!("copier1.rs");
        let literal = format!(
            "#[interface(name = \"{}\")]",
            layout::names::COPIER_BUS_NAME
        );
        assert!(src.contains(&literal), "{literal}");
        let xml = super::introspection_xml();
        assert!(xml.contains(&format!(
            "<interface name=\"{}\">",
            layout::names::COPIER_BUS_NAME
        )));
    }
}
