//! State owned by one thread, reached by jobs.
//!
//! Both daemons keep some state that blocks or must not be shared: the stem's engine (Btrfs
//! acts, one at a time, off the executor that serves the bus), the stem's table of opens
//! (on a thread that entered the host's mount namespace), the keeper's journal (a SQLite
//! connection). Each is owned by one thread; whoever needs it sends a job, a closure given
//! `&mut` the state, and waits for the job's answer, asynchronously ([`Actor::run`]) or by
//! blocking its own thread ([`Actor::run_blocking`]). Jobs run one at a time, in the order
//! they were sent, so the state needs no lock, nor even `Sync`.
//!
//! The thread ends when the last handle is dropped, after the jobs already sent. A job
//! that panics ends the thread too: every caller waiting then, and every later one, gets
//! [`Gone`] rather than waiting for ever.

use std::fmt;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// A handle to the thread that owns an `S`. Cloning it gives another handle to the same
/// thread.
pub struct Actor<S> {
    /// None for a handle with no thread ([`Actor::stopped`]).
    jobs: Option<mpsc::Sender<Job<S>>>,
    name: Arc<str>,
}

/// The actor's thread has ended (a job panicked, or it never started): nothing more can be
/// done with its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone {
    name: Arc<str>,
}

impl Gone {
    /// The name of the thread that ended.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for Gone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the thread {} has stopped (see the journal)", self.name)
    }
}

impl std::error::Error for Gone {}

/// Why [`Builder::spawn_with`] started no actor.
#[derive(Debug)]
pub enum StartError<E> {
    /// The thread could not be made.
    Thread(std::io::Error),
    /// Making the state failed, with this error.
    State(E),
    /// Making the state panicked.
    Panicked,
}

impl<E: fmt::Display> fmt::Display for StartError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Thread(e) => write!(f, "cannot start a thread: {e}"),
            StartError::State(e) => e.fmt(f),
            StartError::Panicked => f.write_str("the thread stopped while it started"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for StartError<E> {}

/// How an actor's thread starts and ends: [`Actor::builder`].
pub struct Builder<S> {
    name: String,
    on_stop: Option<Box<dyn FnOnce(S) + Send>>,
    on_exit: Option<Box<dyn FnOnce() + Send>>,
}

impl<S> fmt::Debug for Builder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder").field("name", &self.name).finish()
    }
}

impl<S: 'static> Builder<S> {
    /// Run `f` with the state when the last handle is gone and every job sent has run (not
    /// after a panic): to put away what the state holds.
    pub fn on_stop(mut self, f: impl FnOnce(S) + Send + 'static) -> Self {
        self.on_stop = Some(Box::new(f));
        self
    }

    /// Run `f` on the thread as it ends, for whatever reason, a panicking job included
    /// (a daemon uses it to exit, so that systemd restarts it).
    pub fn on_exit(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.on_exit = Some(Box::new(f));
        self
    }

    /// Start the thread, owning `state`.
    pub fn spawn(self, state: S) -> std::io::Result<Actor<S>>
    where
        S: Send,
    {
        match self.spawn_with(move || Ok::<S, std::convert::Infallible>(state)) {
            Ok(actor) => Ok(actor),
            Err(StartError::Thread(e)) => Err(e),
            Err(StartError::State(never)) => match never {},
            Err(StartError::Panicked) => Err(std::io::Error::other("the thread stopped")),
        }
    }

    /// Start the thread and make the state on it, with `make` (for state that belongs to
    /// its thread, such as one that entered another mount namespace); returns once `make`
    /// has answered.
    pub fn spawn_with<E: Send + 'static>(
        self,
        make: impl FnOnce() -> Result<S, E> + Send + 'static,
    ) -> Result<Actor<S>, StartError<E>> {
        let Builder {
            name,
            on_stop,
            on_exit,
        } = self;
        let (jobs, queue) = mpsc::channel::<Job<S>>();
        let (started, start_result) = mpsc::sync_channel::<Result<(), E>>(1);
        thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                // Runs on drop, so also when a job panics and unwinds this thread.
                let _on_exit = OnExit(on_exit);
                let mut state = match make() {
                    Ok(state) => state,
                    Err(e) => {
                        let _ = started.send(Err(e));
                        return;
                    }
                };
                let _ = started.send(Ok(()));
                for job in queue {
                    job(&mut state);
                }
                if let Some(f) = on_stop {
                    f(state);
                }
            })
            .map_err(StartError::Thread)?;
        match start_result.recv() {
            Ok(Ok(())) => Ok(Actor {
                jobs: Some(jobs),
                name: name.into(),
            }),
            Ok(Err(e)) => Err(StartError::State(e)),
            Err(_) => Err(StartError::Panicked),
        }
    }
}

struct OnExit(Option<Box<dyn FnOnce() + Send>>);

impl Drop for OnExit {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f()
        }
    }
}

impl<S: 'static> Actor<S> {
    /// Start a thread named `name` that owns `state`.
    pub fn spawn(name: impl Into<String>, state: S) -> std::io::Result<Actor<S>>
    where
        S: Send,
    {
        Actor::builder(name).spawn(state)
    }

    /// Start a thread named `name`, with what runs as it starts and ends.
    pub fn builder(name: impl Into<String>) -> Builder<S> {
        Builder {
            name: name.into(),
            on_stop: None,
            on_exit: None,
        }
    }

    /// A handle with no thread: every job answers [`Gone`]. For a daemon's interface made
    /// only to describe itself (its introspection data), which runs nothing.
    pub fn stopped(name: impl Into<String>) -> Actor<S> {
        Actor {
            jobs: None,
            name: Arc::from(name.into()),
        }
    }

    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn gone(&self) -> Gone {
        Gone {
            name: self.name.clone(),
        }
    }

    fn send(&self, job: Job<S>) -> Result<(), Gone> {
        self.jobs
            .as_ref()
            .ok_or_else(|| self.gone())?
            .send(job)
            .map_err(|_| self.gone())
    }

    /// Run `job` on the thread and wait, asynchronously, for its answer. The job is sent
    /// when the future is first polled; a caller that stops waiting does not stop it.
    pub async fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, Gone> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.send(Box::new(move |state| {
            // The caller may have gone away; the job is done anyway.
            let _ = answer.send(job(state));
        }))?;
        answered.await.map_err(|_| self.gone())
    }

    /// As [`Actor::run`], blocking this thread until the answer comes: for threads that
    /// are not async. Never call it from the actor's own thread (it would wait for itself).
    pub fn run_blocking<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, Gone> {
        let (answer, answered) = mpsc::sync_channel(1);
        self.send(Box::new(move |state| {
            let _ = answer.send(job(state));
        }))?;
        answered.recv().map_err(|_| self.gone())
    }
}

impl<S> Clone for Actor<S> {
    fn clone(&self) -> Self {
        Actor {
            jobs: self.jobs.clone(),
            name: self.name.clone(),
        }
    }
}

impl<S> fmt::Debug for Actor<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Actor")
            .field("name", &self.name)
            .field("running", &self.jobs.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(f)
    }

    #[test]
    fn jobs_run_in_the_order_sent_and_see_each_others_state() {
        let actor = Actor::spawn("test-order", Vec::new()).expect("spawn");
        let other = actor.clone();
        for i in 0..100 {
            let on = if i % 2 == 0 { &actor } else { &other };
            on.run_blocking(move |v: &mut Vec<i32>| v.push(i))
                .expect("ran");
        }
        // Async and blocking callers share one queue.
        let seen = block_on(actor.run(|v: &mut Vec<i32>| v.clone())).expect("ran");
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn jobs_sent_together_run_one_at_a_time_in_order() {
        let actor = Actor::spawn("test-queue", String::new()).expect("spawn");
        let answers = block_on(async {
            let slow = actor.run(|s: &mut String| {
                std::thread::sleep(Duration::from_millis(50));
                s.push('a');
                s.clone()
            });
            let fast = actor.run(|s: &mut String| {
                s.push('b');
                s.clone()
            });
            // Polled together: the first sent is the first run, and the second waits.
            futures_join(slow, fast).await
        });
        assert_eq!(answers, (Ok("a".into()), Ok("ab".into())));
    }

    /// Two futures polled together, without a dependency for `join!`.
    async fn futures_join<A: std::future::Future, B: std::future::Future>(
        a: A,
        b: B,
    ) -> (A::Output, B::Output) {
        let mut a = std::pin::pin!(a);
        let mut b = std::pin::pin!(b);
        let (mut ra, mut rb) = (None, None);
        std::future::poll_fn(|cx| {
            if ra.is_none() {
                if let std::task::Poll::Ready(v) = a.as_mut().poll(cx) {
                    ra = Some(v);
                }
            }
            if rb.is_none() {
                if let std::task::Poll::Ready(v) = b.as_mut().poll(cx) {
                    rb = Some(v);
                }
            }
            if ra.is_some() && rb.is_some() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        (ra.expect("ready"), rb.expect("ready"))
    }

    #[test]
    fn a_panicking_job_leaves_the_actor_gone_not_hanging() {
        let exited = Arc::new(AtomicBool::new(false));
        let flag = exited.clone();
        let actor = Actor::builder("test-panic")
            .on_exit(move || flag.store(true, Ordering::SeqCst))
            .spawn(0u32)
            .expect("spawn");
        // A job queued behind the panicking one, waiting already.
        let waiting = {
            let actor = actor.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                actor.run_blocking(|n: &mut u32| *n)
            })
        };
        let panicked = actor.run_blocking(|_: &mut u32| -> u32 {
            std::thread::sleep(Duration::from_millis(100));
            panic!("a job that panics (expected by this test)")
        });
        let gone = panicked.expect_err("gone");
        assert_eq!(gone.name(), "test-panic");
        assert!(gone.to_string().contains("test-panic"), "{gone}");
        assert!(waiting.join().expect("joined").is_err());
        assert!(actor.run_blocking(|n: &mut u32| *n).is_err());
        assert!(block_on(actor.run(|n: &mut u32| *n)).is_err());
        assert!(
            exited.load(Ordering::SeqCst),
            "on_exit ran as the thread unwound"
        );
    }

    #[test]
    fn dropping_the_last_handle_ends_the_thread_after_its_jobs() {
        struct Tell(mpsc::Sender<&'static str>);
        impl Drop for Tell {
            fn drop(&mut self) {
                let _ = self.0.send("dropped");
            }
        }
        let (tell, told) = mpsc::channel();
        let (stopped_tx, stopped) = mpsc::channel();
        let (exit_tx, exited) = mpsc::channel();
        let actor = Actor::builder("test-drop")
            .on_stop(move |s: Tell| {
                let _ = stopped_tx.send(());
                drop(s)
            })
            .on_exit(move || {
                let _ = exit_tx.send(());
            })
            .spawn(Tell(tell))
            .expect("spawn");
        let other = actor.clone();
        drop(actor);
        // One handle is left: the thread still runs.
        other
            .run_blocking(|t: &mut Tell| t.0.send("job").expect("send"))
            .expect("ran");
        assert_eq!(told.recv().expect("told"), "job");
        assert!(told.recv_timeout(Duration::from_millis(50)).is_err());
        drop(other);
        let wait = Duration::from_secs(10);
        assert_eq!(told.recv_timeout(wait).expect("dropped"), "dropped");
        stopped.recv_timeout(wait).expect("on_stop ran");
        exited.recv_timeout(wait).expect("the thread ended");
    }

    #[test]
    fn the_state_can_be_made_on_its_thread() {
        let actor = Actor::builder("test-made")
            .spawn_with(|| Ok::<_, String>(thread::current().name().map(str::to_owned)))
            .expect("started");
        let made_on = actor
            .run_blocking(|s: &mut Option<String>| s.clone())
            .expect("ran");
        assert_eq!(made_on.as_deref(), Some("test-made"));
        let refused = Actor::<()>::builder("test-refused").spawn_with(|| Err("no namespace"));
        assert!(matches!(refused, Err(StartError::State("no namespace"))));
        let panicked = Actor::<()>::builder("test-start-panic")
            .spawn_with(|| -> Result<(), ()> { panic!("making the state (expected)") });
        assert!(matches!(panicked, Err(StartError::Panicked)));
    }

    #[test]
    fn a_stopped_handle_answers_gone() {
        let actor = Actor::<u8>::stopped("test-stopped");
        assert!(actor.run_blocking(|_| ()).is_err());
        assert_eq!(
            block_on(actor.run(|_| ())).expect_err("gone").name(),
            "test-stopped"
        );
    }

    #[test]
    fn handles_are_send_and_sync_for_state_that_is_neither() {
        fn send_sync<T: Send + Sync>(_: &T) {}
        // An Rc is neither Send nor Sync; made on the thread, it never leaves it.
        let actor = Actor::builder("test-rc")
            .spawn_with(|| Ok::<_, ()>(std::rc::Rc::new(5)))
            .expect("started");
        send_sync(&actor);
        assert_eq!(actor.run_blocking(|rc| **rc).expect("ran"), 5);
    }
}
