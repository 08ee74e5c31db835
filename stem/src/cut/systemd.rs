//! systemd's freezer over the system bus: `FreezeUnit`/`ThawUnit` on the manager, the
//! unit's `FreezerState` and `ActiveState`. systemd answers `FreezeUnit` once the unit's
//! cgroup reports frozen, and keeps its own record of the unit's state right.

use std::os::fd::AsFd as _;

use layout::cut::UnitName;

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
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

/// Run a hook as a transient service of systemd's (adr/0026): `User=` the hook's user (with
/// its groups, as systemd sets them), `Type=oneshot` so that the start job ends when the
/// command does, `TimeoutStartSec=` the limit, `KillSignal=SIGKILL` over its cgroup (every
/// process it started), its output on a pipe the stem reads, gone once it ended
/// (`CollectMode=inactive-or-failed`).
pub async fn run_hook(
    bus: &zbus::Connection,
    unit: &UnitName,
    user: &layout::cut::HookUser,
    command: &layout::cut::HookCommand,
    when: layout::cut::HookWhen,
    limit: std::time::Duration,
) -> Result<super::hook::Ran, String> {
    use super::hook::{Capture, Ended, Ran};
    use zbus::export::futures_core::Stream;
    use zbus::{Fd, Variant as Value};
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let manager = ManagerProxy::new(bus)
        .await
        .map_err(|e| format!("cannot reach systemd: {e}"))?;
    manager
        .subscribe()
        .await
        .map_err(|e| format!("cannot subscribe to systemd's jobs: {e}"))?;
    let mut removed = manager
        .receive_job_removed()
        .await
        .map_err(|e| format!("cannot watch systemd's jobs: {e}"))?;
    let (mut read, write) = super::hook::output_pipe()?;
    let name = format!(
        "tacid-cut-hook-{}-{}.service",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let argv = command.argv().to_vec();
    let env: Vec<String> = super::hook::environment(unit, when)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let exec: Vec<(String, Vec<String>, bool)> = vec![(argv[0].clone(), argv, false)];
    let properties: Vec<(&str, Value<'_>)> = vec![
        (
            "Description",
            Value::from(format!("tacid: the {when} hook of {unit}")),
        ),
        ("Type", Value::from("oneshot")),
        ("ExecStart", Value::from(exec)),
        ("User", Value::from(user.as_str())),
        ("Environment", Value::from(env)),
        ("WorkingDirectory", Value::from("/")),
        (
            "TimeoutStartUSec",
            Value::from(limit.as_micros().min(u128::from(u64::MAX)) as u64),
        ),
        ("KillSignal", Value::from(libc::SIGKILL)),
        ("CollectMode", Value::from("inactive-or-failed")),
        ("StandardInput", Value::from("null")),
        (
            "StandardOutputFileDescriptor",
            Value::from(Fd::from(write.as_fd())),
        ),
        (
            "StandardErrorFileDescriptor",
            Value::from(Fd::from(write.as_fd())),
        ),
    ];
    let job = manager
        .start_transient_unit(&name, "fail", properties, Vec::new())
        .await
        .map_err(|e| format!("systemd would not start the hook: {e}"))?;
    drop(write);
    // The output, read on a thread of its own until every process of the hook is gone.
    let deadline = std::time::Instant::now() + limit + std::time::Duration::from_secs(5);
    let reader = tokio::task::spawn_blocking(move || {
        let mut out = Capture::default();
        out.read_until(&mut read, deadline);
        out
    });
    let result = tokio::time::timeout_at(deadline.into(), async {
        loop {
            let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut removed).poll_next(cx));
            let Some(signal) = next.await else {
                return Err("systemd stopped telling about jobs".to_string());
            };
            let Ok(args) = signal.args() else { continue };
            if args.job().as_str() == job.as_str() {
                return Ok(args.result().to_string());
            }
        }
    })
    .await
    .map_err(|_| "systemd did not finish the hook's job in time".to_string())??;
    let out = reader
        .await
        .map_err(|e| format!("the hook's output reader failed: {e}"))?;
    let ended = match result.as_str() {
        "done" => Ended::Exited(0),
        "timeout" => Ended::Limit,
        other => Ended::Other(format!(
            "systemd's job ended \"{other}\" (see `journalctl -u {name}`)"
        )),
    };
    Ok(Ran {
        ended,
        output: out.kept,
        output_bytes: out.total,
    })
}
