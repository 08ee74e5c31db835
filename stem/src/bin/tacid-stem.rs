//! `tacid-stem`: the stem daemon. Serves `org.tacid.Stem1` on the system bus (or on the bus
//! at an address, for tests) over the top-level mount of the tacid filesystem.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use stem::engine::Engine;
use stem::stem1::{introspection_xml, Stem1};
use stem::worker::Worker;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::EnvFilter;

/// The stem: the only tacid process that runs as root and touches subvolumes.
///
/// It accepts calls from the keeper's user only, checked from the bus's own record of
/// each caller.
#[derive(Debug, Parser)]
#[command(name = "tacid-stem", version)]
struct Args {
    /// The top level (subvolid=5) of the tacid Btrfs filesystem. With --device, the stem
    /// mounts it here itself, in a mount namespace of its own; without, it must be mounted.
    #[arg(
        long,
        value_name = "PATH",
        required_unless_present_any = ["print_introspection", "thaw_cut"]
    )]
    top: Option<PathBuf>,

    /// The tacid filesystem's block device, to mount privately at --top (the system unit
    /// does this; tests on an already mounted filesystem leave it out).
    #[arg(long, value_name = "DEVICE")]
    device: Option<PathBuf>,

    /// `system` for the system bus, or a D-Bus address (a private bus in tests).
    #[arg(long, value_name = "system|ADDRESS", default_value = "system")]
    bus: String,

    /// The one user allowed to call the stem.
    #[arg(long, value_name = "NAME", default_value = layout::names::KEEPER_USER)]
    keeper_user: String,

    /// Refuse new snapshots while fewer than this many bytes are free (0: no hard floor).
    /// The NixOS module sets it from services.tacid.retention.hardFloorBytes.
    #[arg(long, value_name = "BYTES", default_value_t = layout::defaults::HARD_FLOOR_BYTES)]
    hard_floor_bytes: u64,

    /// Root's configuration of copy targets. It must be a regular file owned by
    /// root and writable by nobody else, or the stem refuses to start; a missing file means
    /// no targets. The NixOS module renders it from services.tacid.copies.
    #[arg(long, value_name = "PATH", default_value = layout::copies::CONFIG_PATH)]
    copies_config: PathBuf,

    /// The receiver's socket: every `btrfs receive` (a fetch, a copy to a local target, a
    /// sealed fetch) is done by `tacid-stem-receive` behind it, in a unit of its own.
    #[arg(long, value_name = "PATH", default_value = layout::names::STEM_RECEIVE_SOCKET)]
    receiver_socket: PathBuf,

    /// Where opened snapshots are mounted for people, in the host's mount namespace:
    /// `DIR/<uid>/<snapshot name>`. Made (root's, 0755) when missing; whatever is mounted
    /// beneath it when the stem starts is unmounted (a stem that died left it), or kept open
    /// while a process uses it.
    #[arg(long, value_name = "DIR", default_value = layout::OPEN_DIR)]
    open_dir: PathBuf,

    /// An open snapshot is closed this many seconds after it was (last) opened, once no
    /// process uses it; while one does, it stays open until it is let go.
    #[arg(long, value_name = "SECONDS", default_value_t = layout::defaults::OPEN_IDLE_SECS)]
    open_idle_secs: u64,

    /// At most this many snapshots open at once for one person (uid).
    #[arg(long, value_name = "N", default_value_t = layout::defaults::OPENS_PER_USER)]
    opens_per_user: usize,

    /// At most this many snapshots open at once over everybody.
    #[arg(long, value_name = "N", default_value_t = layout::defaults::OPENS_TOTAL)]
    opens_total: usize,

    /// Root's configuration of the consistent cut: the units paused while a set is taken
    /// (TakeCut). It must be a regular file owned by root and writable by nobody else, or
    /// the stem refuses to start; a missing file means none. The NixOS module renders it
    /// from services.tacid.consistentCut.
    #[arg(long, value_name = "PATH", default_value = layout::cut::CONFIG_PATH)]
    cut_config: PathBuf,

    /// Where systemd is not PID 1: the cgroup v2 hierarchy beneath which each paused unit's
    /// cgroup is the directory named as the unit. Where systemd is PID 1 the stem asks
    /// systemd (FreezeUnit) and this is not used.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup")]
    cgroup_root: PathBuf,

    /// Thaw every unit named in --cut-config and exit: the unit's ExecStopPost=, so that no
    /// stop of the stem, however it came, leaves a unit it froze frozen.
    #[arg(long)]
    thaw_cut: bool,

    /// Print the interface's introspection XML (as committed in stem-interface/org.tacid.Stem1.xml)
    /// and exit.
    #[arg(long)]
    print_introspection: bool,
}

fn main() -> ExitCode {
    // The guard (adr/0026) is this program under another first argument: nothing else of
    // the stem starts in it.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw.get(1).map(|a| a.as_os_str()) == Some(stem::cut::guard::SUBCOMMAND.as_ref()) {
        return stem::cut::guard::main(&raw[2..]);
    }
    let args = Args::parse();
    if args.print_introspection {
        print!("{}", introspection_xml());
        return ExitCode::SUCCESS;
    }
    init_logging();
    if args.thaw_cut {
        return thaw_cut(&args);
    }
    // Before the stem leaves it: the namespace people live in, where opened snapshots are
    // mounted (adr/0019).
    let host_ns = stem::open::Opens::host_namespace();
    // Before any thread exists (the runtime's, the engine's): a mount namespace is per thread.
    if let (Some(device), Some(top)) = (&args.device, &args.top) {
        if let Err(e) = stem::private_top::mount_private_top(device, top) {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
        tracing::info!(
            "mounted {} (subvolid=5) privately at {}",
            device.display(),
            top.display()
        );
    }
    // One thread serves the bus; the engine has its own. Small and enough: calls are few.
    // Counts run on the blocking pool one at a time; two threads bound it (TasksMax=).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args, host_ns)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Root's pause, as configured; the guard is this very program.
fn load_cut(args: &Args) -> Result<stem::cut::Cut, String> {
    let config = stem::cut::load_config(&args.cut_config)?;
    let program = std::env::current_exe()
        .map_err(|e| format!("cannot learn this program's path, to start the guard: {e}"))?;
    Ok(stem::cut::Cut::new(
        config,
        stem::cut::Freezer::detect(args.cgroup_root.clone()),
        program,
    ))
}

fn thaw_cut(args: &Args) -> ExitCode {
    let cut = match load_cut(args) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        tracing::error!("cannot start the async runtime");
        return ExitCode::FAILURE;
    };
    match rt.block_on(cut.thaw_configured()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The journal where its socket exists; stderr otherwise (containers, CI, a test's child).
fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    match tracing_journald::layer() {
        Ok(journald) if std::path::Path::new("/run/systemd/journal/socket").exists() => registry
            .with(journald.with_syslog_identifier("tacid-stem".into()))
            .init(),
        _ => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .init(),
    }
}

/// The thread that mounts opened snapshots in the host's namespace, leftovers closed; when
/// it cannot start, the stem serves everything else and says why at each open.
fn start_opens(host_ns: Result<std::os::fd::OwnedFd, String>, args: &Args) -> stem::open::Opens {
    use stem::open::{OpenLimits, Opens};
    let limits = OpenLimits {
        idle: std::time::Duration::from_secs(args.open_idle_secs.max(1)),
        per_user: args.opens_per_user,
        total: args.opens_total,
    };
    let started = host_ns
        .map_err(|e| e.to_string())
        .and_then(|ns| Opens::start(ns, args.open_dir.clone(), limits).map_err(|e| e.to_string()));
    match started {
        Ok((opens, leftovers)) => {
            for path in &leftovers {
                tracing::info!("closed {} (left open by an earlier stem)", path.display());
            }
            opens
        }
        Err(e) => {
            tracing::error!("opening snapshots for people is unavailable: {e}");
            Opens::unavailable(e)
        }
    }
}

/// Close what an opener asked for when its bus connection goes (the keeper stopped or
/// died), and what has been idle long enough.
async fn watch_opens(
    connection: zbus::Connection,
    opens: stem::open::Opens,
    idle: std::time::Duration,
) -> Result<(), String> {
    use zbus::export::futures_core::Stream;
    let bus = zbus::fdo::DBusProxy::new(&connection)
        .await
        .map_err(|e| format!("cannot ask the bus about connections: {e}"))?;
    let mut gone = bus
        .receive_name_owner_changed()
        .await
        .map_err(|e| format!("cannot watch connections leave the bus: {e}"))?;
    // Often enough that an idle close is late by at most a quarter of the idle time.
    let tick = (idle / 4).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(60),
    );
    let mut ticks = tokio::time::interval(tick);
    loop {
        tokio::select! {
            change = std::future::poll_fn(|cx| std::pin::Pin::new(&mut gone).poll_next(cx)) => {
                let Some(change) = change else {
                    return Err("the bus stopped telling connections leave".into());
                };
                let Ok(args) = change.args() else { continue };
                if args.new_owner().is_none() && args.name().starts_with(':') {
                    let name = args.name().to_string();
                    let _ = opens.run(move |h| h.close_of_opener(&name)).await;
                }
            }
            _ = ticks.tick() => {
                let _ = opens.run(|h| h.close_idle(std::time::Instant::now())).await;
            }
        }
    }
}

async fn serve(args: Args, host_ns: Result<std::os::fd::OwnedFd, String>) -> Result<(), String> {
    let opens = start_opens(host_ns, &args);
    let idle = std::time::Duration::from_secs(args.open_idle_secs.max(1));
    let top = args.top.clone().ok_or("--top is required")?;
    let keeper_only = stem::caller::keeper_only(&args.keeper_user).map_err(|e| e.to_string())?;
    let copies_config = stem::copies::load_config(&args.copies_config)?;
    let cut = std::sync::Arc::new(load_cut(&args)?);
    if !cut.config().units.is_empty() {
        tracing::info!(
            "consistent cut: {} paused around a set ({:?})",
            cut.config()
                .units
                .iter()
                .map(|u| u.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            stem::cut::Freezer::detect(args.cgroup_root.clone())
        );
    }
    let engine = Engine::open(&top).map_err(|e| format!("cannot open {}: {e}", top.display()))?;
    engine.set_hard_floor(args.hard_floor_bytes);
    // An unsafe store is said now, loudly, but the stem still serves: every act checks the
    // store again and answers StoreUnsafe with what to do, which reaches a person.
    if let Err(e) = engine.check_store() {
        tracing::error!("{e}");
    } else {
        // A write of the request cut short before its rename left its temporary file; none
        // blocks a later write, but they would pile up.
        match engine.remove_leftover_temps() {
            Ok(removed) => {
                for name in removed {
                    tracing::info!(
                        "removed {}/{}, the temporary file of a write of the request cut short \
                         before its rename",
                        layout::SNAPSHOTS_MOUNT_POINT,
                        name.to_string_lossy()
                    );
                }
            }
            Err(e) => tracing::warn!(
                "cannot remove the temporary files left in {}: {e}; they block nothing",
                layout::SNAPSHOTS_MOUNT_POINT
            ),
        }
    }

    let (engine_stopped, mut on_engine_stop) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::start(engine, move || {
        let _ = engine_stopped.send(());
    })
    .map_err(|e| format!("cannot start the engine's thread: {e}"))?;

    let targets: Vec<String> = copies_config
        .targets
        .keys()
        .map(|t| t.to_string())
        .collect();
    let copies = std::sync::Arc::new(stem::copies::Copies::new(
        copies_config,
        stem::copies::Programs {
            receiver: args.receiver_socket.clone(),
            ..stem::copies::Programs::default()
        },
        worker.clone(),
        top.clone(),
    ));
    if !targets.is_empty() {
        tracing::info!("copy targets: {}", targets.join(", "));
    }
    // A fetch a stopped stem left half-received holds space until removed; no fetch runs yet.
    copies.clean_dead_fetches();

    let builder = if args.bus == "system" {
        zbus::connection::Builder::system()
    } else {
        zbus::connection::Builder::address(args.bus.as_str())
    };
    let connection = builder
        .serve_at(
            layout::names::STEM_OBJECT_PATH,
            Stem1::with_copies(worker, keeper_only.clone(), copies)
                .with_opens(opens.clone())
                .with_cut(cut),
        )
        .name(layout::names::STEM_BUS_NAME)
        .build()
        .await
        .map_err(|e| {
            format!(
                "cannot serve {} on the {} bus: {e} (is the policy file org.tacid.Stem1.conf installed, and is this root?)",
                layout::names::STEM_BUS_NAME,
                args.bus
            )
        })?;
    tracing::info!(
        top = %top.display(),
        keeper = keeper_only.user(),
        keeper_uid = keeper_only.uid(),
        "serving {} at {}",
        layout::names::STEM_BUS_NAME,
        layout::names::STEM_OBJECT_PATH
    );

    let watch = watch_opens(connection.clone(), opens.clone(), idle);

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let stopped = tokio::select! {
        _ = terminate.recv() => { tracing::info!("SIGTERM: stopping"); Ok(()) }
        _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: stopping"); Ok(()) }
        _ = &mut on_engine_stop => {
            Err("the engine's thread stopped (a panic; see above); exiting so that systemd restarts the stem".into())
        }
        Err(e) = watch => Err(format!("{e}; exiting so that nothing stays open unwatched")),
    };
    // Nothing a stem opened outlives it.
    let _ = opens.run(|h| h.close_all("the stem stops")).await;
    stopped
}
