//! What a hostile local user does, on real parts: calls from the user's own bus connections,
//! many at once; and what it costs the daemons, read from `/proc` and the superblock.
//!
//! A connection "as" a user is made from a thread of this (root) test process that has
//! dropped to the user's uid, gid and no supplementary groups with the raw per-thread
//! syscalls: the bus learns the caller from the socket's peer credentials, taken at
//! `connect()`, so it sees exactly that user, as it would a process of theirs. Nothing else
//! in the test process changes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use keeper::wire::{Keeper1Proxy, KeeperError};

use testbed::peaks::{watch, Peaks, Watch};

use super::World;

fn id_of(user: &str, flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, user])
        .output()
        .expect("id runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("id {flag} {user}: {out:?}"))
}

/// Run `body` on a thread of its own that is `user` (uid, primary gid, no other groups),
/// with a current-thread runtime and the keeper's proxy on a connection of that user's.
pub fn as_user<T, F, Fut>(w: &World, user: &str, body: F) -> JoinHandle<T>
where
    T: Send + 'static,
    F: FnOnce(Keeper1Proxy<'static>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    let (uid, gid) = (id_of(user, "-u"), id_of(user, "-g"));
    let address = w.address.clone();
    std::thread::spawn(move || {
        use rustix::process::{Gid, Uid};
        // Groups first, then gid, then uid: after the uid the thread may no longer change them.
        rustix::thread::set_thread_groups(&[]).expect("drop the groups");
        let gid = Gid::from_raw(gid);
        rustix::thread::set_thread_res_gid(gid, gid, gid).expect("become the user's group");
        let uid = Uid::from_raw(uid);
        rustix::thread::set_thread_res_uid(uid, uid, uid).expect("become the user");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let conn = zbus::connection::Builder::address(address.as_str())
                .build()
                .await
                .expect("the user connects to the private bus");
            let proxy = Keeper1Proxy::builder(&conn)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
                .expect("the keeper's proxy");
            body(proxy).await
        })
    })
}

/// Run `calls` futures made by `call(i)`, at most `in_flight` at a time, on one connection.
pub async fn pipelined<T, F, Fut>(calls: usize, in_flight: usize, call: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let mut running = tokio::task::JoinSet::new();
    let mut out = Vec::with_capacity(calls);
    for i in 0..calls {
        if running.len() >= in_flight {
            out.push(running.join_next().await.expect("a call").expect("joined"));
        }
        running.spawn(call(i));
    }
    while let Some(done) = running.join_next().await {
        out.push(done.expect("joined"));
    }
    out
}

/// `connections` connections of `user`, each keeping `in_flight` calls `call(keeper, i)`
/// going until `stop` is set; then the total answered and every error.
pub fn keep_calling<F, Fut>(
    w: &World,
    user: &str,
    connections: usize,
    in_flight: usize,
    stop: Arc<AtomicBool>,
    call: F,
) -> impl FnOnce() -> (usize, Vec<KeeperError>)
where
    F: Fn(Keeper1Proxy<'static>, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), KeeperError>> + Send + 'static,
{
    let threads: Vec<_> = (0..connections)
        .map(|_| {
            let (stop, call) = (stop.clone(), call.clone());
            as_user(w, user, move |keeper| async move {
                let (mut answered, mut failures) = (0, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let (keeper, call) = (keeper.clone(), call.clone());
                    let batch =
                        pipelined(in_flight, in_flight, move |i| call(keeper.clone(), i)).await;
                    answered += batch.len();
                    failures.extend(batch.into_iter().filter_map(Result::err));
                }
                (answered, failures)
            })
        })
        .collect();
    move || {
        threads
            .into_iter()
            .map(|t| t.join().expect("a caller's thread"))
            .fold((0, Vec::new()), |(n, mut all), (m, mut failed)| {
                all.append(&mut failed);
                (n + m, all)
            })
    }
}

/// The journal's bytes on disk: the database and its write-ahead log.
pub fn journal_bytes(w: &World) -> u64 {
    let wal = PathBuf::from(format!("{}-wal", w.journal.display()));
    [w.journal.clone(), wal]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// The shipped units, by daemon.
fn stem_unit() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../stem/systemd/tacid-stem.service")
}

fn keeper_unit() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/tacid-keeper.service")
}

/// Both daemons of the world, watched.
pub struct Daemons {
    keeper: Watch,
    stem: Watch,
}

pub fn watch_daemons(w: &World) -> Daemons {
    Daemons {
        keeper: watch(w.keeper_pid().expect("the keeper runs")),
        stem: watch(w.stem_pid().expect("the stem runs")),
    }
}

/// The daemons' peaks, checked against their units' limits.
pub struct DaemonPeaks {
    pub keeper: Peaks,
    pub stem: Peaks,
}

impl Daemons {
    pub fn finish(self) -> DaemonPeaks {
        DaemonPeaks {
            keeper: self.keeper.finish(),
            stem: self.stem.finish(),
        }
    }
}

impl DaemonPeaks {
    pub fn assert_within_unit_limits(&self) {
        testbed::peaks::assert_within_unit_limits("the keeper", self.keeper, &keeper_unit());
        testbed::peaks::assert_within_unit_limits("the stem", self.stem, &stem_unit());
    }
}

impl std::fmt::Display for DaemonPeaks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "keeper peak {}; stem peak {}", self.keeper, self.stem)
    }
}

/// The median of some durations.
pub fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

/// Milliseconds, for figures.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Wait until `done()` or `limit`.
pub fn wait_until(limit: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}
