//! What every service of the keeper is handed, and only this: the journal's thread, the
//! stem, who may do what, and the lookers' turns. Each is meant to be shared; every other
//! piece of state belongs to one service ([`crate::service::Keeper`] composes them).

use std::sync::Arc;

use actor::Actor;
use layout::SnapshotName;

use crate::authority::{Act, Authority};
use crate::copier_client::CopierClient;
use crate::journal::{Journal, JournalError};
use crate::stem_client::{stem_error, DiskSnapshot, StemClient};
use crate::wire::KeeperError;

/// Requests of people who may only look (list, status, a preview, a dry run of prune) that
/// reach the stem, in flight at once over all of them: however many such calls arrive, the
/// rest wait in the keeper, and root's and approvers' requests never queue behind them.
pub const MAX_LOOKER_REQUESTS: usize = 8;

/// The name of the thread that owns the journal.
const JOURNAL_THREAD: &str = "keeper-journal";

/// The shared handles, cloned into each service.
#[derive(Debug, Clone)]
pub struct Handles {
    /// The journal, on its own thread: jobs run one at a time, in the order sent.
    journal: Actor<Journal>,
    pub stem: Arc<StemClient>,
    /// The copier (sealed targets only; absent on a machine without them).
    pub copier: Arc<CopierClient>,
    pub authority: Authority,
    /// Lookers' requests that reach the stem, in flight at once (adr/0016).
    lookers: Arc<tokio::sync::Semaphore>,
}

impl Handles {
    /// Start the journal's thread; a keeper whose thread cannot start exits (and says why in
    /// the log).
    pub fn new(journal: Journal, authority: Authority) -> Handles {
        // A job that panics leaves the journal unusable: the keeper exits then, as the stem
        // does when its engine's thread dies, so that systemd starts a whole one again
        // (`Restart=on-failure`) rather than one answering "the journal stopped" forever.
        let journal = Actor::builder(JOURNAL_THREAD)
            .on_exit(|| {
                if std::thread::panicking() {
                    tracing::error!(
                        "the journal's thread crashed; the keeper exits to be restarted"
                    );
                    std::process::exit(70);
                }
            })
            .spawn(journal)
            .unwrap_or_else(|e| {
                // A keeper without its journal could only refuse: exit, to be started again.
                tracing::error!("cannot start the journal's thread: {e}; the keeper exits");
                std::process::exit(71);
            });
        Handles {
            journal,
            stem: Arc::new(StemClient::new()),
            copier: Arc::new(CopierClient::default()),
            authority,
            lookers: Arc::new(tokio::sync::Semaphore::new(MAX_LOOKER_REQUESTS)),
        }
    }

    /// Run `f` on the journal's thread and wait for it: it blocks (an fsync), so it runs
    /// off the executor that serves the bus, one job at a time, in the order asked.
    pub async fn journal<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Journal) -> Result<T, JournalError> + Send + 'static,
    ) -> Result<T, KeeperError> {
        match self.journal.run(f).await {
            Ok(answer) => answer.map_err(KeeperError::from),
            Err(_gone) => Err(KeeperError::Journal(
                "the journal's thread stopped after a crash in the keeper; restart tacid-keeper.service".into(),
            )),
        }
    }

    /// Whether `uid` may change things (root and approvers).
    pub fn may_change(&self, uid: u32) -> bool {
        self.authority.decide(uid, Act::Change).is_ok()
    }

    /// A turn among the lookers' requests for somebody who may only look (`None`, no turn
    /// needed, for root and approvers).
    pub async fn looker_turn(&self, may_change: bool) -> Option<tokio::sync::SemaphorePermit<'_>> {
        if may_change {
            return None;
        }
        self.lookers.acquire().await.ok()
    }

    /// Find a snapshot on disk by name.
    pub async fn find(&self, name: &SnapshotName) -> Result<DiskSnapshot, KeeperError> {
        let text = name.to_string();
        self.stem
            .list()
            .await
            .map_err(stem_error)?
            .into_iter()
            .find(|d| d.member.name == text)
            .ok_or_else(|| {
                KeeperError::NoSuchSnapshot(format!(
                    "there is no snapshot named {text}; see `tacid data list`"
                ))
            })
    }
}

/// In a `test-hooks` build, stop for good at `point` when `TACID_KEEPER_PAUSE_AT` names it,
/// so the bus tier can SIGKILL the keeper exactly there. Nothing in other builds.
pub async fn test_pause(point: &str) {
    #[cfg(feature = "test-hooks")]
    {
        if std::env::var("TACID_KEEPER_PAUSE_AT").as_deref() == Ok(point) {
            eprintln!("tacid-keeper: TEST BUILD: paused at {point}");
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
        }
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = point;
}
