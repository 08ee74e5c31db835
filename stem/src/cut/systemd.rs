//! systemd's freezer over the system bus: `FreezeUnit`/`ThawUnit` on the manager, the
//! unit's `FreezerState` and `ActiveState`. systemd answers `FreezeUnit` once the unit's
//! cgroup reports frozen, and keeps its own record of the unit's state right.

use layout::cut::UnitName;

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
pub(crate) trait Manager {
    fn subscribe(&self) -> zbus::Result<()>;
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: Vec<(&str, zbus::Variant<'_>)>,
        aux: Vec<(&str, Vec<(&str, zbus::Variant<'_>)>)>,
    ) -> zbus::Result<zbus::OwnedObjectPath>;
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: zbus::ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
    fn freeze_unit(&self, name: &str) -> zbus::Result<()>;
    fn thaw_unit(&self, name: &str) -> zbus::Result<()>;
    fn get_unit(&self, name: &str) -> zbus::Result<zbus::OwnedObjectPath>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1"
)]
trait Unit {
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn freezer_state(&self) -> zbus::Result<String>;
}

async fn unit<'a>(
    bus: &'a zbus::Connection,
    name: &UnitName,
) -> Result<Option<UnitProxy<'a>>, String> {
    let manager = ManagerProxy::new(bus)
        .await
        .map_err(|e| format!("cannot reach systemd: {e}"))?;
    let path = match manager.get_unit(name.as_str()).await {
        Ok(path) => path,
        // Not loaded: not running.
        Err(zbus::Error::MethodError(..)) => return Ok(None),
        Err(e) => return Err(format!("cannot ask systemd about {name}: {e}")),
    };
    let proxy = UnitProxy::builder(bus)
        .path(path)
        // Each read asks systemd: a cached state could say frozen after a thaw.
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(|e| format!("cannot ask systemd about {name}: {e}"))?;
    Ok(Some(proxy))
}

/// Whether `name` is running (active or reloading): only then has it processes to pause.
pub async fn running(bus: &zbus::Connection, name: &UnitName) -> Result<bool, String> {
    let Some(u) = unit(bus, name).await? else {
        return Ok(false);
    };
    let state = u
        .active_state()
        .await
        .map_err(|e| format!("cannot read {name}'s state: {e}"))?;
    Ok(matches!(
        state.as_str(),
        "active" | "reloading" | "activating"
    ))
}

pub async fn freeze(bus: &zbus::Connection, name: &UnitName) -> Result<(), String> {
    let manager = ManagerProxy::new(bus)
        .await
        .map_err(|e| format!("cannot reach systemd: {e}"))?;
    manager
        .freeze_unit(name.as_str())
        .await
        .map_err(|e| format!("systemd refused to freeze it: {e}"))
}

pub async fn thaw(bus: &zbus::Connection, name: &UnitName) -> Result<(), String> {
    let manager = ManagerProxy::new(bus)
        .await
        .map_err(|e| format!("cannot reach systemd: {e}"))?;
    manager
        .thaw_unit(name.as_str())
        .await
        .map_err(|e| format!("systemd refused to thaw it: {e}"))
}

pub async fn is_frozen(bus: &zbus::Connection, name: &UnitName) -> Result<bool, String> {
    let Some(u) = unit(bus, name).await? else {
        return Ok(false);
    };
    let state = u
        .freezer_state()
        .await
        .map_err(|e| format!("cannot read {name}'s freezer state: {e}"))?;
    Ok(state == "frozen")
}
