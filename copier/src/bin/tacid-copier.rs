//! `tacid-copier`: the copier daemon, serving `org.tacid.Copier1` on the system bus (or on
//! the bus at an address, for tests) as its own unprivileged user; and, for root, the
//! recovery key's commands (`tacid-copier key init | show | import`).

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use copier::copier1::{introspection_xml, Copier1};
use copier::keys::KeyCommand;
use copier::service::{Copier, Paths};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::EnvFilter;

/// The copier: seals snapshots' send streams into encrypted, authenticated copies on any
/// storage, and unseals them. Only the keeper's user may call it.
#[derive(Debug, Parser)]
#[command(name = "tacid-copier", version)]
struct Args {
    /// `system` for the system bus, or a D-Bus address (a private bus in tests).
    #[arg(long, value_name = "system|ADDRESS", default_value = "system")]
    bus: String,

    /// The one user allowed to call the copier.
    #[arg(long, value_name = "NAME", default_value = layout::names::KEEPER_USER)]
    keeper_user: String,

    /// Root's configuration of copy targets (the sealed ones are the copier's), read once at
    /// start. It must be a regular file owned by root and writable by nobody else; a
    /// missing file means none.
    #[arg(long, value_name = "PATH", default_value = layout::copies::CONFIG_PATH)]
    copies_config: PathBuf,

    /// The recovery key. The daemon's default is /var/lib/tacid-copier/recovery.key (its
    /// unit binds its directory on the snapshots subvolume there); the key commands' is
    /// that directory's file, /persist/.snapshots/.copier/recovery.key.
    #[arg(long, value_name = "PATH", global = true)]
    key: Option<PathBuf>,

    /// The copier's own directory: what generation it gave each copy.
    #[arg(long, value_name = "DIR", default_value = layout::COPIER_STATE_DIR)]
    state_dir: PathBuf,

    /// The `ssh` client for SSH targets (a name looked up in PATH, or a path; the NixOS
    /// module passes OpenSSH's).
    #[arg(long, value_name = "PROGRAM", default_value = "ssh")]
    ssh: PathBuf,

    /// A pipe from or to the stem that moves nothing for this long is given up (the act
    /// fails, its parts are cleaned).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    stall_secs: u64,

    /// Print the interface's introspection XML (as committed in
    /// copier-interface/org.tacid.Copier1.xml) and exit.
    #[arg(long)]
    print_introspection: bool,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The recovery key (root only).
    Key {
        #[command(subcommand)]
        what: Key,
        /// The copier's user, who owns the key file.
        #[arg(long, value_name = "NAME", default_value = layout::names::COPIER_USER, global = true)]
        user: String,
    },
}

#[derive(Debug, Clone, Copy, Subcommand)]
enum Key {
    /// Make the recovery key and print it, once, with what to do with it. Refused when a
    /// key exists.
    Init,
    /// Print the recovery key again.
    Show,
    /// Read a recovery key (the AGE-SECRET-KEY-1… line) from stdin and keep it: on a new
    /// machine, to fetch the old one's copies.
    Import,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.print_introspection {
        print!("{}", introspection_xml());
        return ExitCode::SUCCESS;
    }
    if let Some(Command::Key { what, user }) = &args.command {
        let command = match what {
            Key::Init => KeyCommand::Init,
            Key::Show => KeyCommand::Show,
            Key::Import => KeyCommand::Import,
        };
        let key = args.key.clone().unwrap_or_else(copier::keys::held_key_path);
        return match copier::keys::run(command, &key, user, &mut std::io::stdin()) {
            Ok(words) => {
                print!("{words}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tacid-copier: {e}");
                ExitCode::FAILURE
            }
        };
    }
    init_logging();
    // One worker serves the bus and drives S3's connections; the acts run on the blocking
    // pool, one per target at a time.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(8)
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
            .with(journald.with_syslog_identifier("tacid-copier".into()))
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
    let keeper_only = copier::caller::keeper_only(&args.keeper_user).map_err(|e| e.to_string())?;
    // A configuration that cannot be used is said now, and to every caller that names a
    // target; the copier still serves (an exit would leave the keeper only "no such name").
    let config = copier::config::load(&args.copies_config);
    if let Err(e) = &config {
        tracing::error!(
            "{e}; serving no target: fix it, then restart {}",
            layout::names::COPIER_UNIT
        );
    }
    let key = args
        .key
        .clone()
        .unwrap_or_else(|| PathBuf::from(layout::SEAL_KEY_PATH));
    let paths = Paths {
        key: key.clone(),
        state: args.state_dir.clone(),
        ssh: args.ssh.clone(),
        stall: std::time::Duration::from_secs(args.stall_secs.max(1)),
    };
    let copier = Copier::new(config, paths)?;
    let targets: Vec<String> = copier.targets().into_iter().map(|t| t.name).collect();
    if targets.is_empty() {
        tracing::info!("no sealed targets in {}", args.copies_config.display());
    } else {
        tracing::info!("sealed targets: {}", targets.join(", "));
    }
    // Said now, loudly; every act says it again to whoever asks.
    if let Err(e) = seal::SealKey::load(&key) {
        tracing::warn!("{e}");
    }
    let builder = if args.bus == "system" {
        zbus::connection::Builder::system()
    } else {
        zbus::connection::Builder::address(args.bus.as_str())
    };
    let _connection = builder
        .serve_at(
            layout::names::COPIER_OBJECT_PATH,
            Copier1::new(copier, keeper_only.clone()),
        )
        .name(layout::names::COPIER_BUS_NAME)
        .build()
        .await
        .map_err(|e| {
            format!(
                "cannot serve {} on the {} bus: {e} (is the policy file org.tacid.Copier1.conf installed, and is this the copier's user?)",
                layout::names::COPIER_BUS_NAME,
                args.bus
            )
        })?;
    tracing::info!(
        keeper = keeper_only.user(),
        keeper_uid = keeper_only.uid(),
        "serving {} at {}",
        layout::names::COPIER_BUS_NAME,
        layout::names::COPIER_OBJECT_PATH
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
    }
    Ok(())
}
