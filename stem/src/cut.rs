//! A consistent cut: the units root names are paused (their cgroups frozen) while every
//! member of a set is taken, then thawed, so that the set is one moment of what they wrote.
//!
//! The order is fixed (adr/0026): a guard process is started and says it is ready; every
//! unit is frozen and each must report frozen before `freeze_timeout_ms`; every member is
//! taken; the units must still be frozen and the guard must not have fired; then they are
//! thawed. A unit that does not freeze in time thaws them all and takes no set; a pause
//! that outlived the guard's limit deletes the members again. Never a half-consistent set.
//!
//! Two ways to freeze: where systemd is PID 1, `FreezeUnit`/`ThawUnit` over the system bus
//! (systemd keeps the unit's state right); elsewhere (CI, containers) the cgroup v2 files
//! of the unit's cgroup, found beneath a cgroup root by the unit's name.
//!
//! Unit names come from root's configuration ([`layout::cut`]), never from a caller.
//!
//! Hooks ([`hook`]): before anything is frozen, the `before` command of each unit to be
//! paused runs as its user, one after the other; one that fails or outlives its limit means
//! no set, as a unit that does not freeze does. Once every unit is thawed (whether a set was
//! taken or not), the `after` command of each unit whose `before` succeeded (or that has
//! none) runs; one that fails is reported with the set, which stands. The thaw never waits
//! for a hook: no hook runs while anything is frozen.

pub mod cgroup;
pub mod guard;
pub mod hook;
pub mod systemd;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use layout::cut::{CutConfig, HookWhen, UnitName};
use layout::SubvolumeName;

use crate::engine::Snapshot;
use crate::worker::{ActFailure, Worker};

/// How the units are frozen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freezer {
    /// systemd is PID 1: `FreezeUnit`/`ThawUnit` on the system bus.
    Systemd,
    /// The cgroup v2 files beneath `root` (a unit's cgroup is the directory named as the unit).
    Cgroup { root: PathBuf },
}

impl Freezer {
    /// systemd where it runs as PID 1 (`/run/systemd/system` exists, as `sd_booted` checks),
    /// else the cgroup files beneath `cgroup_root`.
    pub fn detect(cgroup_root: PathBuf) -> Freezer {
        if std::path::Path::new("/run/systemd/system").is_dir() {
            Freezer::Systemd
        } else {
            Freezer::Cgroup { root: cgroup_root }
        }
    }
}

/// One unit as the pause reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Its cgroup directory.
    Cgroup { unit: UnitName, dir: PathBuf },
    /// Its name, for systemd.
    Unit(UnitName),
}

impl Target {
    pub fn unit(&self) -> &UnitName {
        match self {
            Target::Cgroup { unit, .. } | Target::Unit(unit) => unit,
        }
    }
}

/// What a set taken with the pause is.
#[derive(Debug)]
pub struct CutTaken {
    pub snapshots: Vec<Snapshot>,
    /// The units that were frozen while every member was taken (empty: none configured, or
    /// none running; the set is then taken as any set is).
    pub paused: Vec<UnitName>,
    /// How long the units were frozen, from the first freeze to the last thaw.
    pub held: Duration,
    /// Every hook that ran, in the order they ran (before the freeze, then after the thaw).
    pub hooks: Vec<hook::HookOutcome>,
}

/// Why no set was taken with the pause.
#[derive(Debug, thiserror::Error)]
pub enum CutError {
    #[error("{unit} did not report frozen within {waited_ms} ms, so no set was taken and every unit paused for it was thawed again. Something in it cannot be paused now (a process in uninterruptible I/O, a stuck filesystem): see `systemctl status {unit}`; try again, raise services.tacid.consistentCut.freezeTimeoutMs, or remove it from services.tacid.consistentCut.units")]
    DidNotFreeze { unit: UnitName, waited_ms: u64 },
    #[error("{unit} could not be paused: {why}; no set was taken and every unit paused for it was thawed again. Check the unit (`systemctl status {unit}`) or remove it from services.tacid.consistentCut.units")]
    CannotFreeze { unit: UnitName, why: String },
    #[error("the pause did not hold until every member was taken ({why}; the limit is {limit_ms} ms), so the set would not be one moment: the members taken were deleted again and no set was taken. Try again; if the limit passed, raise services.tacid.consistentCut.holdLimitMs; if something else thaws the unit, stop it doing so")]
    HeldTooLong { limit_ms: u32, why: String },
    #[error("the guard that thaws the units if the stem dies could not start: {0}; nothing was paused and no set was taken")]
    Guard(String),
    #[error("the hook {0}, so no set was taken and nothing was paused. Its output is in the stem's journal (`journalctl -u tacid-stem`); fix the hook, raise its limit (services.tacid.consistentCut.hooks), or remove it")]
    HookFailed(String),
    #[error(transparent)]
    Act(#[from] ActFailure),
}

/// The pause around a set: root's units, how they are frozen, and the guard's program.
#[derive(Debug)]
pub struct Cut {
    config: CutConfig,
    freezer: Freezer,
    /// The program started as the guard (`tacid-stem`, run as `tacid-stem thaw-guard ...`).
    guard_program: PathBuf,
    systemd: tokio::sync::OnceCell<zbus::Connection>,
}

impl Cut {
    pub fn new(config: CutConfig, freezer: Freezer, guard_program: PathBuf) -> Cut {
        Cut {
            config,
            freezer,
            guard_program,
            systemd: tokio::sync::OnceCell::new(),
        }
    }

    /// No units: sets are taken unpaused.
    pub fn none() -> Cut {
        Cut::new(
            CutConfig::default(),
            Freezer::Cgroup {
                root: PathBuf::new(),
            },
            PathBuf::new(),
        )
    }

    pub fn config(&self) -> &CutConfig {
        &self.config
    }

    async fn bus(&self) -> Result<&zbus::Connection, String> {
        self.systemd
            .get_or_try_init(|| async { zbus::Connection::system().await })
            .await
            .map_err(|e| format!("cannot reach systemd on the system bus: {e}"))
    }

    /// The units to pause now: those running. A unit that is not running writes nothing
    /// and is left out (and logged).
    async fn targets(&self) -> Result<Vec<Target>, CutError> {
        let mut targets = Vec::with_capacity(self.config.units.len());
        for unit in &self.config.units {
            let found = match &self.freezer {
                Freezer::Cgroup { root } => cgroup::find(root, unit)
                    .map(|d| {
                        d.map(|dir| Target::Cgroup {
                            unit: unit.clone(),
                            dir,
                        })
                    })
                    .map_err(|why| CutError::CannotFreeze {
                        unit: unit.clone(),
                        why,
                    })?,
                Freezer::Systemd => {
                    let bus = self.bus().await.map_err(|why| CutError::CannotFreeze {
                        unit: unit.clone(),
                        why,
                    })?;
                    systemd::running(bus, unit)
                        .await
                        .map_err(|why| CutError::CannotFreeze {
                            unit: unit.clone(),
                            why,
                        })?
                        .then(|| Target::Unit(unit.clone()))
                }
            };
            match found {
                Some(t) => targets.push(t),
                None => tracing::info!("{unit} is not running: not paused for this set"),
            }
        }
        Ok(targets)
    }

    /// Ask for `t` to be frozen; `false` when systemd had not answered by `deadline` (it
    /// answers `FreezeUnit` once the unit is frozen).
    async fn freeze(&self, t: &Target, deadline: Instant) -> Result<bool, String> {
        match t {
            Target::Cgroup { dir, .. } => cgroup::set_frozen(dir, true).map(|()| true),
            Target::Unit(unit) => {
                let bus = self.bus().await?;
                let left = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, systemd::freeze(bus, unit)).await {
                    Ok(answer) => answer.map(|()| true),
                    Err(_) => Ok(false),
                }
            }
        }
    }

    async fn thaw(&self, t: &Target) -> Result<(), String> {
        match t {
            Target::Cgroup { dir, .. } => cgroup::set_frozen(dir, false),
            Target::Unit(unit) => systemd::thaw(self.bus().await?, unit).await,
        }
    }

    async fn is_frozen(&self, t: &Target) -> Result<bool, String> {
        match t {
            Target::Cgroup { dir, .. } => cgroup::is_frozen(dir),
            Target::Unit(unit) => systemd::is_frozen(self.bus().await?, unit).await,
        }
    }

    /// Wait until `t` reports frozen, or `deadline`.
    async fn wait_frozen(&self, t: &Target, deadline: Instant) -> Result<bool, String> {
        let mut nap = Duration::from_micros(50);
        loop {
            if self.is_frozen(t).await? {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            match t {
                // The kernel sets `frozen 1` as the last task stops, usually well within a
                // millisecond: short naps growing to one, which hold the bus's thread for at
                // most the freeze timeout (nothing else should run during a pause anyway).
                Target::Cgroup { .. } => {
                    std::thread::sleep(nap.min(deadline - now));
                    nap = (nap * 2).min(Duration::from_millis(1));
                }
                Target::Unit(_) => {
                    tokio::time::sleep(Duration::from_millis(1).min(deadline - now)).await
                }
            }
        }
    }

    /// Thaw every target, logging what would not thaw (the guard tries again).
    async fn thaw_all(&self, targets: &[Target]) -> bool {
        let mut all = true;
        for t in targets {
            if let Err(e) = self.thaw(t).await {
                tracing::error!("cannot thaw {}: {e}", t.unit());
                all = false;
            }
        }
        all
    }

    /// Take the set `members` with root's units paused: see the module's text.
    pub async fn take_set(
        &self,
        worker: &Worker,
        members: Vec<SubvolumeName>,
    ) -> Result<CutTaken, CutError> {
        let targets = self.targets().await?;
        if targets.is_empty() {
            let snapshots = worker
                .run(move |e| e.take_set(&members))
                .await
                .map_err(ActFailure::from)?
                .map_err(ActFailure::from)?;
            return Ok(CutTaken {
                snapshots,
                paused: Vec::new(),
                held: Duration::ZERO,
                hooks: Vec::new(),
            });
        }
        // Hooks before anything is frozen, one after the other; the first that fails ends it.
        let mut hooks = Vec::new();
        let mut reached = Vec::with_capacity(targets.len());
        for t in &targets {
            let Some(h) = self.config.hook_of(t.unit()) else {
                reached.push(t.unit().clone());
                continue;
            };
            if h.before.is_none() {
                reached.push(t.unit().clone());
                continue;
            }
            let outcome = self.run_hook(h, HookWhen::Before).await;
            let ok = outcome.ok;
            let line = outcome.line();
            hooks.push(outcome);
            if !ok {
                self.after_hooks(&reached, &mut hooks).await;
                return Err(CutError::HookFailed(line));
            }
            reached.push(t.unit().clone());
        }
        let paused = self.pause_and_take(worker, members, &targets).await;
        // Every unit is thawed by now (or was never frozen): the after hooks, whatever came of
        // the set.
        self.after_hooks(&reached, &mut hooks).await;
        let (snapshots, held) = paused?;
        Ok(CutTaken {
            snapshots,
            paused: targets.iter().map(|t| t.unit().clone()).collect(),
            held,
            hooks,
        })
    }

    /// How hooks run here: as systemd's transient services where it is PID 1, else directly.
    async fn run_hook(&self, h: &layout::cut::Hook, when: HookWhen) -> hook::HookOutcome {
        let outcome = match self.freezer {
            Freezer::Systemd => match self.bus().await {
                Ok(bus) => hook::run(hook::Runner::Systemd, Some(bus), h, when).await,
                Err(_) => hook::run(hook::Runner::Systemd, None, h, when).await,
            },
            Freezer::Cgroup { .. } => hook::run(hook::Runner::Direct, None, h, when).await,
        };
        outcome.journal();
        outcome
    }

    /// The after hooks of the units in `reached`, in order, each whatever the one before did.
    async fn after_hooks(&self, reached: &[UnitName], into: &mut Vec<hook::HookOutcome>) {
        for unit in reached {
            if let Some(h) = self.config.hook_of(unit) {
                if h.after.is_some() {
                    into.push(self.run_hook(h, HookWhen::After).await);
                }
            }
        }
    }

    /// Freeze `targets`, take `members`, thaw: the pause itself, with no hook inside it.
    async fn pause_and_take(
        &self,
        worker: &Worker,
        members: Vec<SubvolumeName>,
        targets: &[Target],
    ) -> Result<(Vec<Snapshot>, Duration), CutError> {
        let targets = targets.to_vec();
        let limit = Duration::from_millis(self.config.hold_limit_ms.into());
        let mut guard =
            guard::Guard::start(&self.guard_program, &targets, limit).map_err(CutError::Guard)?;
        let started = Instant::now();
        let freeze_deadline = started + Duration::from_millis(self.config.freeze_timeout_ms.into());
        // Every freeze is asked for first, then each awaited: they stop in parallel.
        let mut failed: Option<CutError> = None;
        for t in &targets {
            match self.freeze(t, freeze_deadline).await {
                Ok(true) => {}
                Ok(false) => {
                    failed = Some(CutError::DidNotFreeze {
                        unit: t.unit().clone(),
                        waited_ms: started.elapsed().as_millis() as u64,
                    });
                    break;
                }
                Err(why) => {
                    failed = Some(CutError::CannotFreeze {
                        unit: t.unit().clone(),
                        why,
                    });
                    break;
                }
            }
        }
        if failed.is_none() {
            for t in &targets {
                match self.wait_frozen(t, freeze_deadline).await {
                    Ok(true) => {}
                    Ok(false) => {
                        failed = Some(CutError::DidNotFreeze {
                            unit: t.unit().clone(),
                            waited_ms: started.elapsed().as_millis() as u64,
                        });
                        break;
                    }
                    Err(why) => {
                        failed = Some(CutError::CannotFreeze {
                            unit: t.unit().clone(),
                            why,
                        });
                        break;
                    }
                }
            }
        }
        if let Some(e) = failed {
            let thawed = self.thaw_all(&targets).await;
            guard.finish(thawed);
            return Err(e);
        }
        let taken = worker.run(move |e| e.take_set(&members)).await;
        // Still one moment? Every unit still frozen, and the guard has not thawed them.
        let mut broken: Option<String> = guard.fired();
        if broken.is_none() {
            for t in &targets {
                match self.is_frozen(t).await {
                    Ok(true) => {}
                    Ok(false) => {
                        broken = Some(format!("{} was no longer frozen", t.unit()));
                        break;
                    }
                    Err(e) => {
                        broken = Some(format!("{} cannot be read: {e}", t.unit()));
                        break;
                    }
                }
            }
        }
        let thawed = self.thaw_all(&targets).await;
        let held = started.elapsed();
        guard.finish(thawed);
        // Past its limit is no set, whether or not the guard (a process of its own, which
        // may start late on a loaded machine) got there first.
        let limit = std::time::Duration::from_millis(u64::from(self.config.hold_limit_ms));
        if broken.is_none() && held > limit {
            broken = Some(format!(
                "the units were held {} ms, past the limit",
                held.as_millis()
            ));
        }
        let snapshots = taken.map_err(ActFailure::from)?.map_err(ActFailure::from)?;
        if let Some(why) = broken {
            let ids: Vec<Snapshot> = snapshots;
            let _ = worker
                .run(move |e| {
                    for s in &ids {
                        if let Err(err) = e.delete(s.name) {
                            tracing::error!("cannot delete {} of a broken cut: {err}", s.name);
                        }
                    }
                })
                .await;
            return Err(CutError::HeldTooLong {
                limit_ms: self.config.hold_limit_ms,
                why,
            });
        }
        Ok((snapshots, held))
    }

    /// Thaw every configured unit that is found: what a stop of the stem runs
    /// (`ExecStopPost=`), so that no stop, however it came, leaves a unit frozen by it.
    pub async fn thaw_configured(&self) -> Result<(), String> {
        let targets = self.targets().await.map_err(|e| e.to_string())?;
        if self.thaw_all(&targets).await {
            Ok(())
        } else {
            Err("some units could not be thawed (see above)".into())
        }
    }
}

/// Load root's configuration: a regular file owned by root, writable by nobody else,
/// opened without following a symlink. A missing file is no units.
pub fn load_config(path: &std::path::Path) -> Result<CutConfig, String> {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let shown = path.display();
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(CutConfig::default()),
        Err(e) => {
            return Err(format!(
                "cannot open {shown}: {e} (it must be a regular file, not a symlink)"
            ))
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat {shown}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    if meta.uid() != 0 {
        return Err(format!(
            "{shown} is owned by uid {}, not root; the units paused are root's configuration (chown root {shown})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by group or others (mode {:04o}); chmod 0644 {shown}",
            meta.mode() & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    file.take(layout::cut::MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    CutConfig::parse(&bytes).map_err(|e| format!("{shown}: {e}"))
}
