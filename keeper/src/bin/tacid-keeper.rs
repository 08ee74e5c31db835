//! `tacid-keeper`: serves `org.tacid.Keeper1` on the system bus, as its own unprivileged user.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use keeper::authority::Authority;
use keeper::journal::Journal;
use keeper::keeper1::{introspection_xml, Keeper1};
use keeper::retention::Policy;
use keeper::service::Keeper;
use layout::copies::CopiesConfig;
use layout::names;

/// The keeper of tacid: authority, consent and the journal in front of the stem.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The journal (SQLite). On a machine: in the state directory, which the unit binds to
    /// the keeper's own directory on the snapshots subvolume, where no restore reaches.
    #[arg(long, default_value = layout::KEEPER_JOURNAL_PATH)]
    journal: PathBuf,
    /// Members of this group (and root) may snapshot, restore and cancel.
    #[arg(long, default_value = layout::defaults::APPROVER_GROUP)]
    approver_group: String,
    /// The copier's user: the keeper hands a sealed copy's pipe only to the owner of
    /// org.tacid.Copier1 that the bus says runs as this user.
    #[arg(long, value_name = "USER", default_value = names::COPIER_USER)]
    copier_user: String,
    /// Connect to this bus instead of the system bus (tests).
    #[arg(long, env = "TACID_BUS_ADDRESS", hide = true)]
    bus: Option<String>,
    /// The copy targets (root's configuration, JSON; a missing file means none). Read once
    /// at start: a changed configuration takes a restart of the keeper.
    #[arg(long, value_name = "PATH", default_value = layout::copies::CONFIG_PATH)]
    copies_config: PathBuf,
    /// Print the interface's introspection XML and exit.
    #[arg(long)]
    print_introspection: bool,
    #[command(flatten)]
    retention: RetentionArgs,
    #[command(flatten)]
    health: HealthArgs,
}

/// The health thresholds (`tacid data health`); the NixOS module passes
/// services.tacid.health.*. Defaults derived from the timers' schedules.
#[derive(Debug, clap::Args)]
struct HealthArgs {
    /// The newest snapshot of a subvolume older than this many seconds: a warning.
    #[arg(long, value_name = "SECS", default_value_t = layout::defaults::HEALTH_SNAPSHOT_WARN_SECS)]
    health_snapshot_warn_secs: u64,
    /// Older than this: a failure.
    #[arg(long, value_name = "SECS", default_value_t = layout::defaults::HEALTH_SNAPSHOT_FAIL_SECS)]
    health_snapshot_fail_secs: u64,
    /// The newest copy of a subvolume on a target older than this many seconds: a warning.
    #[arg(long, value_name = "SECS", default_value_t = layout::defaults::HEALTH_COPY_WARN_SECS)]
    health_copy_warn_secs: u64,
    /// Older than this: a failure.
    #[arg(long, value_name = "SECS", default_value_t = layout::defaults::HEALTH_COPY_FAIL_SECS)]
    health_copy_fail_secs: u64,
    /// A sealed target's copies last verified longer ago than this many seconds: a warning.
    #[arg(long, value_name = "SECS", default_value_t = layout::defaults::HEALTH_VERIFY_WARN_SECS)]
    health_verify_warn_secs: u64,
    /// A restore staged and waiting for a reboot longer than this: a warning.
    #[arg(long, value_name = "SECS", default_value_t = layout::defaults::HEALTH_STAGED_WAIT_SECS)]
    health_staged_wait_secs: u64,
    /// Fewer days than this until the free space reaches the hard floor: a warning.
    #[arg(long, value_name = "DAYS", default_value_t = layout::defaults::HEALTH_DAYS_LEFT_WARN)]
    health_days_left_warn: u64,
    /// Fewer days than this: a failure.
    #[arg(long, value_name = "DAYS", default_value_t = layout::defaults::HEALTH_DAYS_LEFT_FAIL)]
    health_days_left_fail: u64,
    /// Whether the timeline timer takes a set every hour. `false` (NixOS:
    /// services.tacid.retention.timeline = false): it only prunes, so health judges the age
    /// of snapshots by nothing and expects no timeline run (adr/0028).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    timeline: bool,
    /// Write the health report as metrics for node_exporter's textfile collector to this
    /// file (a `.prom` name in the collector's directory) after every scheduled act and
    /// every few minutes; the module sets it from services.tacid.metrics.directory.
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<PathBuf>,
}

impl HealthArgs {
    fn policy(&self) -> keeper::health::HealthPolicy {
        keeper::health::HealthPolicy {
            snapshot_warn_secs: self.health_snapshot_warn_secs,
            snapshot_fail_secs: self.health_snapshot_fail_secs,
            copy_warn_secs: self.health_copy_warn_secs,
            copy_fail_secs: self.health_copy_fail_secs,
            verify_warn_secs: self.health_verify_warn_secs,
            staged_wait_secs: self.health_staged_wait_secs,
            days_left_warn: self.health_days_left_warn,
            days_left_fail: self.health_days_left_fail,
            timeline: self.timeline,
            metrics_file: self.metrics_file.clone(),
        }
    }
}

/// The retention policy (adr/0013); the NixOS module passes services.tacid.retention.*.
#[derive(Debug, clap::Args)]
struct RetentionArgs {
    /// Keep the newest N pre-switch snapshot sets.
    #[arg(long, value_name = "N", default_value_t = Policy::default().pre_switch_sets)]
    keep_pre_switch_sets: usize,
    /// Keep the newest timeline set of each of the last N hours that have one.
    #[arg(long, value_name = "N", default_value_t = Policy::default().hourly)]
    keep_hourly: usize,
    /// Likewise for days.
    #[arg(long, value_name = "N", default_value_t = Policy::default().daily)]
    keep_daily: usize,
    /// Likewise for weeks (Monday to Sunday, UTC).
    #[arg(long, value_name = "N", default_value_t = Policy::default().weekly)]
    keep_weekly: usize,
    /// Likewise for months.
    #[arg(long, value_name = "N", default_value_t = Policy::default().monthly)]
    keep_monthly: usize,
    /// Delete manual snapshots older than N days (0: keep them until a person deletes them).
    #[arg(long, value_name = "DAYS", default_value_t = layout::defaults::MANUAL_MAX_AGE_DAYS)]
    manual_max_age_days: u64,
    /// Below this many free bytes, the oldest automatic snapshots are deleted (0: no floor).
    #[arg(long, value_name = "BYTES", default_value_t = Policy::default().floor_bytes)]
    free_floor_bytes: u64,
    /// Keep what a restore replaced (the read-only snapshots the boot made of it) this many
    /// days after that boot, then delete it; counted against no other rule.
    #[arg(
        long,
        value_name = "DAYS",
        default_value_t = Policy::default().replaced_days,
        value_parser = clap::value_parser!(u64).range(0..=keeper::caps::MAX_REPLACED_DAYS)
    )]
    keep_replaced_days: u64,
}

impl RetentionArgs {
    fn policy(&self) -> Policy {
        Policy {
            pre_switch_sets: self.keep_pre_switch_sets,
            hourly: self.keep_hourly,
            daily: self.keep_daily,
            weekly: self.keep_weekly,
            monthly: self.keep_monthly,
            manual_max_age: (self.manual_max_age_days > 0)
                .then(|| std::time::Duration::from_secs(self.manual_max_age_days * 86_400)),
            floor_bytes: self.free_floor_bytes,
            replaced_days: self.keep_replaced_days,
        }
    }
}

/// Threads for blocking work beside the two workers (the journal has a thread of its own).
const BLOCKING_THREADS: usize = 4;

fn init_logging() {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TACID_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    match tracing_journald::layer() {
        Ok(journald) => tracing_subscriber::registry()
            .with(filter)
            .with(journald)
            .init(),
        // No journald socket (CI, tests): plain lines on stderr.
        Err(_) => tracing_subscriber::registry()
            .with(filter)
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .init(),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.print_introspection {
        let dir = tempfile_dir();
        let journal = match Journal::open(&dir.join("introspection.sqlite")) {
            Ok(j) => j,
            Err(e) => {
                eprintln!("tacid-keeper: {e}");
                return ExitCode::FAILURE;
            }
        };
        print!(
            "{}",
            introspection_xml(Arc::new(Keeper::new(journal, Authority::new("root"))))
        );
        let _ = std::fs::remove_dir_all(&dir);
        return ExitCode::SUCCESS;
    }
    init_logging();
    // Journal writes run on the journal's own thread, one after another; the blocking pool
    // is kept small all the same, so a flood of requests cannot make hundreds (adr/0016).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("tacid-keeper: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A private directory for the throwaway journal `--print-introspection` needs.
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tacid-keeper-introspect-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// The copy targets. A missing file is none; a file that cannot be read or is not valid is
/// logged, and the keeper runs with none (snapshots and restores do not depend on it).
fn read_copies_config(path: &std::path::Path) -> CopiesConfig {
    use std::io::Read as _;
    let shown = path.display();
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path).and_then(|f| {
        f.take(layout::copies::MAX_CONFIG_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
    });
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(config = %shown, "no copy targets (no configuration file)");
            CopiesConfig::default()
        }
        Err(e) => {
            tracing::error!(config = %shown, "cannot read the copies configuration ({e}); running with no copy targets");
            CopiesConfig::default()
        }
        Ok(_) => match CopiesConfig::parse(&bytes) {
            Ok(c) => {
                let names: Vec<&str> = c.targets.keys().map(|t| t.as_str()).collect();
                tracing::info!(config = %shown, targets = %names.join(" "), "copy targets");
                c
            }
            Err(e) => {
                tracing::error!(config = %shown, "the copies configuration is not valid ({e}); running with no copy targets: fix it and restart tacid-keeper.service");
                CopiesConfig::default()
            }
        },
    }
}

async fn run(args: Args) -> Result<(), String> {
    let journal = Journal::open(&args.journal).map_err(|e| e.to_string())?;
    tracing::info!(journal = %args.journal.display(), approver_group = %args.approver_group, "journal open (WAL, synchronous=FULL)");
    let policy = args.retention.policy();
    tracing::info!(policy = %keeper::service::describe_policy(&policy), "retention");
    let copies = read_copies_config(&args.copies_config);
    let keeper = Arc::new(
        Keeper::new(journal, Authority::new(&args.approver_group))
            .with_policy(policy)
            .with_copies(copies)
            .with_health(args.health.policy()),
    );
    let builder = match &args.bus {
        Some(address) => zbus::connection::Builder::address(address.as_str()),
        None => zbus::connection::Builder::system(),
    };
    let connection = builder
        .serve_at(names::KEEPER_OBJECT_PATH, Keeper1::new(keeper.clone()))
        .build()
        .await
        .map_err(|e| format!("connecting to the bus: {e}"))?;
    keeper.stem().connect(connection.clone());
    keeper.copier().expect_user(&args.copier_user);
    keeper.copier().connect(connection.clone());
    connection
        .request_name(names::KEEPER_BUS_NAME)
        .await
        .map_err(|e| format!("owning {} on the bus: {e} (is another keeper running, or is the bus policy not installed?)", names::KEEPER_BUS_NAME))?;
    tracing::info!(
        "serving {} at {}",
        names::KEEPER_BUS_NAME,
        names::KEEPER_OBJECT_PATH
    );
    match keeper.reconcile().await {
        Ok(()) => tracing::info!("journal and disk reconciled"),
        Err(e) => tracing::warn!(
            "journal and disk not reconciled yet (retried at the next call): {}",
            e.message()
        ),
    }
    // Refusals counted rather than journalled one by one reach the journal once a second.
    let counting = keeper.clone();
    let flusher = tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            counting.flush_refusals().await;
        }
    });
    // The stem has no signals: opens it closed by itself (idle, a restart) are learnt by
    // asking, and journalled (adr/0019). Nothing is asked while nothing is open.
    let checking = keeper.clone();
    let open_checker = tokio::spawn(async move {
        let mut every = tokio::time::interval(keeper::service::OPEN_CHECK_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            checking.check_opens().await;
        }
    });
    // Health, looked at on the keeper's own schedule too: HealthWorsened reaches the
    // notifiers when time alone makes it worse (a timer that stopped running).
    let health_keeper = keeper.clone();
    let health_connection = connection.clone();
    let health_checker = tokio::spawn(async move {
        let every = std::time::Duration::from_secs(layout::defaults::HEALTH_CHECK_EVERY_SECS);
        // The first look one period after start: the stem it asks may still be starting,
        // and a scheduled act or a person's `health` looks sooner anyway.
        let mut every = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            match health_connection
                .object_server()
                .interface::<_, Keeper1>(names::KEEPER_OBJECT_PATH)
                .await
            {
                Ok(iface) => {
                    keeper::keeper1::check_and_signal(&health_keeper, iface.signal_emitter()).await
                }
                Err(e) => tracing::warn!("health: the interface is not served ({e})"),
            }
        }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    tracing::info!("stopping");
    flusher.abort();
    open_checker.abort();
    health_checker.abort();
    keeper.flush_refusals().await;
    Ok(())
}
