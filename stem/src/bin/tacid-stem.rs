//! `tacid-stem`: the stem daemon. Serves `org.tacid.Stem1` on the system bus (or on the bus
//! at an address, for tests) over the top-level mount of the tacid filesystem.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use stem::caller::Authority;
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
        required_unless_present = "print_introspection"
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

    /// Root's configuration of copy targets (issue 13). It must be a regular file owned by
    /// root and writable by nobody else, or the stem refuses to start; a missing file means
    /// no targets. The NixOS module renders it from services.tacid.copies.
    #[arg(long, value_name = "PATH", default_value = layout::copies::CONFIG_PATH)]
    copies_config: PathBuf,

    /// Print the interface's introspection XML (as committed in stem/org.tacid.Stem1.xml)
    /// and exit.
    #[arg(long)]
    print_introspection: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.print_introspection {
        print!("{}", introspection_xml());
        return ExitCode::SUCCESS;
    }
    init_logging();
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
    match runtime.block_on(serve(args)) {
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

async fn serve(args: Args) -> Result<(), String> {
    let top = args.top.ok_or("--top is required")?;
    let authority = Authority::of_user(&args.keeper_user).map_err(|e| e.to_string())?;
    let copies_config = stem::copies::load_config(&args.copies_config)?;
    let engine = Engine::open(&top).map_err(|e| format!("cannot open {}: {e}", top.display()))?;
    engine.set_hard_floor(args.hard_floor_bytes);
    // An unsafe store is said now, loudly, but the stem still serves: every act checks the
    // store again and answers StoreUnsafe with what to do, which reaches a person.
    if let Err(e) = engine.check_store() {
        tracing::error!("{e}");
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
        stem::copies::Programs::default(),
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
    let _connection = builder
        .serve_at(
            layout::names::STEM_OBJECT_PATH,
            Stem1::with_copies(worker, authority.clone(), copies),
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
        keeper = authority.user(),
        keeper_uid = authority.uid(),
        "serving {} at {}",
        layout::names::STEM_BUS_NAME,
        layout::names::STEM_OBJECT_PATH
    );

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
        _ = &mut on_engine_stop => {
            return Err("the engine's thread stopped (a panic; see above); exiting so that systemd restarts the stem".into());
        }
    }
    Ok(())
}
