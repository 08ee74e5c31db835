//! The engine's own thread: every act on Btrfs runs there, one at a time, in arrival order.
//!
//! Btrfs acts are short (a snapshot is one commit, a few milliseconds), so one thread is
//! enough, and it keeps blocking syscalls off the async executor that serves the bus. One
//! thread rather than a lock also means the engine needs no `Sync` and acts never interleave.

use std::sync::mpsc;
use std::thread;

use crate::engine::Engine;

type Job = Box<dyn FnOnce(&Engine) + Send>;

/// A handle to the engine's thread. Cloning it gives another handle to the same thread.
#[derive(Debug, Clone)]
pub struct Worker {
    jobs: mpsc::Sender<Job>,
}

/// The engine's thread has ended (a panic in an act); nothing more can be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stem's engine thread has stopped (see the journal); the stem must be restarted")]
pub struct WorkerGone;

impl Worker {
    /// Start the thread that owns `engine`. `on_exit` runs on that thread when it ends, for
    /// whatever reason (the daemon uses it to exit, so that systemd restarts it).
    pub fn start(
        engine: Engine,
        on_exit: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Worker> {
        let (jobs, queue) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("stem-engine".into())
            .spawn(move || {
                // Runs on drop, so also when a job panics and unwinds this thread.
                struct OnExit<F: FnOnce()>(Option<F>);
                impl<F: FnOnce()> Drop for OnExit<F> {
                    fn drop(&mut self) {
                        if let Some(f) = self.0.take() {
                            f()
                        }
                    }
                }
                let _on_exit = OnExit(Some(on_exit));
                for job in queue {
                    job(&engine);
                }
            })?;
        Ok(Worker { jobs })
    }

    /// A handle whose thread is not running: every act answers [`WorkerGone`]. Only for
    /// producing the interface's introspection data, which calls nothing.
    pub fn stopped() -> Worker {
        let (jobs, _queue) = mpsc::channel::<Job>();
        Worker { jobs }
    }

    /// Run `act` on the engine's thread and block this thread until it answers: for the
    /// copy threads, which are not async.
    pub fn run_blocking<T: Send + 'static>(
        &self,
        act: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, WorkerGone> {
        let (answer, answered) = mpsc::sync_channel(1);
        self.jobs
            .send(Box::new(move |engine| {
                let _ = answer.send(act(engine));
            }))
            .map_err(|_| WorkerGone)?;
        answered.recv().map_err(|_| WorkerGone)
    }

    /// Run `act` on the engine's thread and wait (asynchronously) for its answer.
    pub async fn run<T: Send + 'static>(
        &self,
        act: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, WorkerGone> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move |engine| {
                // The caller may have gone away (its connection closed); the act is done anyway.
                let _ = answer.send(act(engine));
            }))
            .map_err(|_| WorkerGone)?;
        answered.await.map_err(|_| WorkerGone)
    }
}
