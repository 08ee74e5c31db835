//! Who owns a well-known name, as the bus reports it: the caller's side of "who is at the
//! other end". A client that hands a daemon a pipe end (or anything it must not give a
//! stranger) asks which connection owns the name and as which uid, and then calls that
//! connection's unique name, which the bus never gives to another connection: so the
//! one checked is the one called, even if the name changes hands in between.

use zbus::fdo;
use zbus::names::{BusName, OwnedUniqueName, WellKnownName};
use zbus::proxy::CacheProperties;
use zbus::Connection;

/// Why the owner of a name is not one to call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotTheOwner {
    /// Nobody owns the name.
    NoOwner,
    /// The bus did not answer who owns it, or as which uid (the bus's error).
    Bus(String),
    /// A connection running as another uid owns it.
    Stranger { unique: String, uid: u32 },
}

/// The owner of one well-known name last found to run as the expected uid. A unique name is
/// never given to another connection while the bus runs, so what the bus said of its uid
/// stays true: while the same connection owns the name, a check costs one round trip.
#[derive(Debug, Default)]
pub struct Owners {
    verified: std::sync::Mutex<Option<(OwnedUniqueName, u32)>>,
}

impl Owners {
    /// The unique name of the connection owning `name`, when that connection runs as `uid`;
    /// any failure to learn it is an error (never a yes).
    pub async fn owned_by(
        &self,
        connection: &Connection,
        name: &str,
        uid: u32,
    ) -> Result<OwnedUniqueName, NotTheOwner> {
        let well_known =
            WellKnownName::try_from(name).map_err(|e| NotTheOwner::Bus(e.to_string()))?;
        // No property cache: building the proxy then costs no round trip.
        let bus = fdo::DBusProxy::builder(connection)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| NotTheOwner::Bus(e.to_string()))?;
        let no_owner = |e: fdo::Error| match e {
            fdo::Error::NameHasNoOwner(_) => NotTheOwner::NoOwner,
            other => NotTheOwner::Bus(other.to_string()),
        };
        let unique = bus
            .get_name_owner(BusName::WellKnown(well_known))
            .await
            .map_err(no_owner)?;
        let known = self
            .verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(u, _)| *u == unique)
            .map(|(_, uid)| *uid);
        let owner_uid = match known {
            Some(known) => known,
            None => {
                let found = bus
                    .get_connection_unix_user(BusName::Unique(unique.as_ref()))
                    .await
                    .map_err(no_owner)?;
                *self.verified.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((unique.clone(), found));
                found
            }
        };
        if owner_uid == uid {
            Ok(unique)
        } else {
            Err(NotTheOwner::Stranger {
                unique: unique.to_string(),
                uid: owner_uid,
            })
        }
    }
}

impl Owners {
    /// As [`Owners::owned_by`]; when nobody owns `name`, the bus is first asked to start
    /// its service (D-Bus activation), as a call to the name would have.
    pub async fn owned_by_or_started(
        &self,
        connection: &Connection,
        name: &str,
        uid: u32,
    ) -> Result<OwnedUniqueName, NotTheOwner> {
        match self.owned_by(connection, name, uid).await {
            Err(NotTheOwner::NoOwner) => {
                start_service(connection, name).await;
                self.owned_by(connection, name, uid).await
            }
            other => other,
        }
    }
}

/// Ask the bus to start `name`'s service (D-Bus activation), as a call to the name would;
/// whether it could is learnt by asking who owns the name afterwards.
async fn start_service(connection: &Connection, name: &str) {
    let Ok(well_known) = WellKnownName::try_from(name) else {
        return;
    };
    if let Ok(bus) = fdo::DBusProxy::builder(connection)
        .cache_properties(CacheProperties::No)
        .build()
        .await
    {
        let _ = bus.start_service_by_name(well_known, 0).await;
    }
}
