//! The engine's own thread: every act on Btrfs runs there, one at a time, in arrival order.
//!
//! Btrfs acts are short (a snapshot is one commit, a few milliseconds), so one thread is
//! enough, and it keeps blocking syscalls off the async executor that serves the bus. One
//! thread rather than a lock also means the engine needs no `Sync` and acts never interleave.

use actor::Actor;

use crate::engine::Engine;

/// A handle to the engine's thread. Cloning it gives another handle to the same thread.
#[derive(Debug, Clone)]
pub struct Worker {
    engine: Actor<Engine>,
}

/// The engine's thread has ended (a panic in an act); nothing more can be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stem's engine thread has stopped (see the journal); the stem must be restarted")]
pub struct WorkerGone;

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
