//! The engine's own thread: every act on Btrfs runs there, one at a time, in arrival order.
//!
//! Btrfs acts are short (a snapshot is one commit, a few milliseconds), so one thread is
//! enough, and it keeps blocking syscalls off the async executor that serves the bus. One
//! thread rather than a lock also means the engine needs no `Sync` and acts never interleave.

use std::time::{Duration, Instant};

use actor::Actor;
use layout::SnapshotName;

use crate::allowance::allowed;
use crate::engine::{counted_from_paths, Commit, CountStopped, Engine, EngineError, SpaceReport};

/// A handle to the engine's thread. Cloning it gives another handle to the same thread.
#[derive(Debug, Clone)]
pub struct Worker {
    engine: Actor<Engine>,
}

/// The engine's thread has ended (a panic in an act); nothing more can be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stem's engine thread has stopped (see the journal); the stem must be restarted")]
pub struct WorkerGone;

/// Why an act gave no answer (each is logged where it happened).
#[derive(Debug, thiserror::Error)]
pub enum ActFailure {
    /// Refused or failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    WorkerGone(#[from] WorkerGone),
}

/// Why a count of changes gave no answer (each is logged where it happened).
#[derive(Debug, thiserror::Error)]
pub enum CountFailure {
    /// Refused or failed, in the checks or in the count.
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    WorkerGone(#[from] WorkerGone),
    /// The count was given no turn, or its thread stopped.
    #[error("{what}: the count stopped: {why}")]
    Stopped { what: String, why: CountStopped },
}

/// The thread's name.
const NAME: &str = "stem-engine";

impl Worker {
    /// Start the thread that owns `engine`. `on_exit` runs on that thread when it ends, for
    /// whatever reason (the daemon uses it to exit, so that systemd restarts it).
    pub fn start(
        engine: Engine,
        on_exit: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Worker> {
        let engine = Actor::builder(NAME).on_exit(on_exit).spawn(engine)?;
        Ok(Worker { engine })
    }

    /// A handle whose thread is not running: every act answers [`WorkerGone`]. Only for
    /// producing the interface's introspection data, which calls nothing.
    pub fn stopped() -> Worker {
        Worker {
            engine: Actor::stopped(NAME),
        }
    }

    /// Run `act` on the engine's thread and block this thread until it answers: for the
    /// copy threads, which are not async.
    pub fn run_blocking<T: Send + 'static>(
        &self,
        act: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, WorkerGone> {
        self.engine
            .run_blocking(move |engine| act(engine))
            .map_err(|_| WorkerGone)
    }

    /// Run `act` on the engine's thread and wait (asynchronously) for its answer. The
    /// caller may go away (its connection closed); the act is done anyway.
    pub async fn run<T: Send + 'static>(
        &self,
        act: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, WorkerGone> {
        self.engine
            .run(move |engine| act(engine))
            .await
            .map_err(|_| WorkerGone)
    }
}

impl Worker {
    /// Run `act` on the engine's thread and log its answer: what was done and how long it
    /// took, or why it was refused or failed.
    pub async fn act<T: Send + 'static>(
        &self,
        what: String,
        act: impl FnOnce(&Engine) -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, ActFailure> {
        let started = Instant::now();
        match self.run(act).await {
            Ok(Ok(answer)) => {
                // The act's time on the engine's thread, with the hop there and back: what
                // the end-to-end bench subtracts from the keeper's view of the call.
                let took_us = started.elapsed().as_micros() as u64;
                // Reads are frequent and change nothing: kept out of the journal by default.
                if what.starts_with("list") || what.starts_with("read ") {
                    tracing::debug!(took_us, "{what}: done");
                } else {
                    tracing::info!(took_us, "{what}: done");
                }
                Ok(answer)
            }
            Ok(Err(e)) => {
                tracing::warn!("{what}: refused or failed: {e}");
                Err(e.into())
            }
            Err(gone) => {
                tracing::error!("{what}: {gone}");
                Err(gone.into())
            }
        }
    }

    /// What changed since the snapshot `name`, counted until `limit` has passed: the checks
    /// (and, with [`Commit::First`], the commit) on the engine's thread; then a count kept
    /// from earlier when there is one (without paths), else the count off that thread, in
    /// turn with every other count. With a `viewer` the paths are those it may see, and the
    /// counts are of those paths alone ([`counted_from_paths`]).
    pub async fn count_changes(
        &self,
        name: SnapshotName,
        limit: Duration,
        with_paths: bool,
        commit: Commit,
        viewer: Option<btrfs::Viewer>,
    ) -> Result<btrfs::Changes, CountFailure> {
        let deadline = Instant::now() + limit;
        let what = format!("read changes since {name}");
        // Lookers' previews and diffs reach here with any name, as often as they like: a
        // failure is logged within an allowance (the keeper passes no caller; per kind).
        let count = match self
            .run(move |e| e.prepare_change_count(name, commit))
            .await
        {
            Ok(Ok(count)) => count,
            Ok(Err(e)) => {
                let v = allowed("changes refused", u32::MAX);
                if v.log() {
                    tracing::warn!("{what}: refused or failed: {e}{}", v.note());
                }
                return Err(e.into());
            }
            Err(gone) => {
                tracing::error!("{what}: {gone}");
                return Err(gone.into());
            }
        };
        let narrowed = viewer.is_some();
        let shown = move |changes: btrfs::Changes| {
            if narrowed {
                counted_from_paths(changes)
            } else {
                changes
            }
        };
        if !with_paths {
            if let Some(kept) = count.reused() {
                tracing::debug!(
                    "{what}: given again (the live subvolume has not changed since it was counted)"
                );
                return Ok(shown(kept));
            }
        }
        let counted = match count
            .run_in_turn(deadline, with_paths, viewer, move |p| {
                tracing::info!(
                    items_seen = p.items_seen,
                    changes_found = p.changes_found,
                    "counting changes since {name}: {} s so far",
                    p.elapsed.as_secs()
                );
            })
            .await
        {
            Ok(counted) => counted,
            Err(why) => return Err(CountFailure::Stopped { what, why }),
        };
        match counted {
            Ok(changes) => {
                tracing::debug!("{what}: counted");
                Ok(shown(changes))
            }
            Err(e) => {
                let v = allowed("changes failed", u32::MAX);
                if v.log() {
                    tracing::warn!("{what}: failed: {e}{}", v.note());
                }
                Err(e.into())
            }
        }
    }

    /// The space of the snapshots `names` (empty: all) and of every snapshotted subvolume
    /// (adr/0029): the checks on the engine's thread, the walk off it (one at a time: the
    /// kept walks are behind one lock), until `limit` has passed.
    pub async fn measure_space(
        &self,
        names: Vec<SnapshotName>,
        limit: Duration,
    ) -> Result<SpaceReport, ActFailure> {
        let deadline = Instant::now() + limit;
        let started = Instant::now();
        let what = "measure space";
        let measure = match self.run(move |e| e.prepare_space(&names)).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => {
                let v = allowed("space refused", u32::MAX);
                if v.log() {
                    tracing::warn!("{what}: refused or failed: {e}{}", v.note());
                }
                return Err(e.into());
            }
            Err(gone) => {
                tracing::error!("{what}: {gone}");
                return Err(gone.into());
            }
        };
        let walked = tokio::task::spawn_blocking(move || measure.run(deadline)).await;
        let answer = match walked {
            Ok(answer) => answer,
            Err(e) => Err(EngineError::Btrfs(btrfs::Error {
                op: "measure space",
                name: Default::default(),
                kind: btrfs::ErrorKind::Other,
                source: std::io::Error::other(format!("the walk stopped: {e}")),
            })),
        };
        match answer {
            Ok(report) => {
                tracing::info!(
                    took_us = started.elapsed().as_micros() as u64,
                    walked = report.walked,
                    complete = report.complete,
                    "{what}: done"
                );
                Ok(report)
            }
            Err(e) => {
                tracing::warn!("{what}: failed: {e}");
                Err(e.into())
            }
        }
    }
}
