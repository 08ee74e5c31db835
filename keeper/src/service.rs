//! The keeper's services, composed: what [`crate::keeper1::Keeper1`] serves on the bus.
//!
//! Each service owns its state and no other reaches it; they share only the handles meant
//! to be shared ([`Handles`]: the journal's thread, the stem, who may do what) and, where
//! one needs another's act, the service itself, handed over when they are made. This file
//! only builds them and delegates.

use std::sync::Arc;

use layout::copies::CopiesConfig;

use crate::authority::Authority;
use crate::consent::Consent;
use crate::copies::Copies;
use crate::handles::Handles;
use crate::health::{Health, HealthPolicy, Worsened};
use crate::journal::Journal;
use crate::list::List;
use crate::opens::Opens;
use crate::reconcile::Reconcile;
use crate::refusals::Refusals;
use crate::retention::prune::Retention;
use crate::retention::Policy;
use crate::stem_client::StemClient;
use crate::wire::{
    Cancelled, ClosedOpen, CopyInFlight, CopyReport, Deleted, Fetched, KeepMarked, KeeperError,
    Opened, PartChanges, PruneReport, RestoreDetails, RestorePreview, RestoreStaged,
    SetRestorePreview, SetRestoreStaged, SnapshotEntry, SnapshotSet, Status, TargetCopies,
};

pub use crate::consent::{
    CONSENT_WINDOW, DETAILS_COUNT_LIMIT, MAX_LOOKER_COUNTS, PREVIEW_COUNT_LIMIT,
};
pub use crate::handles::MAX_LOOKER_REQUESTS;
pub use crate::list::{Listed, ListedCopies, ListedRows};
pub use crate::opens::{home_part, CHECK_EVERY as OPEN_CHECK_EVERY, OPENS_PER_WINDOW};
pub use crate::retention::describe as describe_policy;

/// The keeper: its services, composed.
#[derive(Debug)]
pub struct Keeper {
    /// Kept to give the stem its connection, and to compose the services again with a
    /// policy or copy targets given after [`Keeper::new`].
    h: Handles,
    refusals: Arc<Refusals>,
    reconcile: Arc<Reconcile>,
    retention: Arc<Retention>,
    consent: Consent,
    copies: Copies,
    opens: Opens,
    list: List,
    health: Arc<Health>,
    space: crate::space::Space,
}

impl Keeper {
    /// A keeper over `journal` (its thread starts now), with the default retention policy
    /// and no copy targets.
    pub fn new(journal: Journal, authority: Authority) -> Keeper {
        Keeper::compose(
            Handles::new(journal, authority),
            Policy::default(),
            Arc::new(CopiesConfig::default()),
            HealthPolicy::default(),
        )
    }

    fn compose(
        h: Handles,
        policy: Policy,
        config: Arc<CopiesConfig>,
        health: HealthPolicy,
    ) -> Keeper {
        let floor_bytes = policy.floor_bytes;
        let refusals = Arc::new(Refusals::new(h.clone()));
        let reconcile = Arc::new(Reconcile::new(h.clone()));
        let replaced_days = policy.replaced_days;
        let retention = Arc::new(Retention::new(
            h.clone(),
            refusals.clone(),
            reconcile.clone(),
            policy,
            config.clone(),
        ));
        Keeper {
            consent: Consent::new(
                h.clone(),
                refusals.clone(),
                reconcile.clone(),
                retention.clone(),
            ),
            copies: Copies::new(
                h.clone(),
                refusals.clone(),
                reconcile.clone(),
                config.clone(),
            ),
            opens: Opens::new(h.clone(), refusals.clone()),
            health: Arc::new(Health::new(h.clone(), health, floor_bytes, config.clone())),
            list: List::new(h.clone(), reconcile.clone(), config, replaced_days),
            space: crate::space::Space::new(h.clone()),
            h,
            refusals,
            reconcile,
            retention,
        }
    }

    /// Use `policy` for retention (from the keeper's flags).
    pub fn with_policy(self, policy: Policy) -> Keeper {
        let config = Arc::new(self.copies.config().clone());
        let health = self.health.policy().clone();
        Keeper::compose(self.h, policy, config, health)
    }

    /// Use `health` for the health thresholds (from the keeper's flags).
    pub fn with_health(self, health: HealthPolicy) -> Keeper {
        let config = Arc::new(self.copies.config().clone());
        let policy = self.retention.policy().clone();
        Keeper::compose(self.h, policy, config, health)
    }

    /// Use `config` for the copy targets (from `--copies-config`).
    pub fn with_copies(self, config: CopiesConfig) -> Keeper {
        let policy = self.retention.policy().clone();
        let health = self.health.policy().clone();
        Keeper::compose(self.h, policy, Arc::new(config), health)
    }

    /// The stem client (to give it the bus connection).
    pub fn stem(&self) -> &StemClient {
        &self.h.stem
    }

    /// The copier client (to give it the bus connection).
    pub fn copier(&self) -> &crate::copier_client::CopierClient {
        &self.h.copier
    }

    /// The retention policy in force.
    pub fn policy(&self) -> &Policy {
        self.retention.policy()
    }

    /// The configured copy targets.
    pub fn copies_config(&self) -> &CopiesConfig {
        self.copies.config()
    }

    /// Bring the journal in line with the disk; once per start, retried while the stem is away.
    pub async fn reconcile(&self) -> Result<(), KeeperError> {
        self.reconcile.reconcile().await
    }

    /// Write the counts of refusals the journal does not have yet, in one commit; the
    /// daemon calls this every second and when it stops (adr/0016).
    pub async fn flush_refusals(&self) {
        self.refusals.flush().await
    }

    // Consent.

    pub async fn snapshot(
        &self,
        uid: u32,
        subvolumes: &[String],
        reason: &str,
        pre_switch: bool,
    ) -> Result<SnapshotSet, KeeperError> {
        self.consent
            .snapshot(uid, subvolumes, reason, pre_switch)
            .await
    }

    pub async fn snapshot_timeline(&self, uid: u32) -> Result<SnapshotSet, KeeperError> {
        self.consent.snapshot_timeline(uid).await
    }

    pub async fn restore_preview(
        &self,
        uid: u32,
        name: &str,
    ) -> Result<RestorePreview, KeeperError> {
        self.consent.restore_preview(uid, name).await
    }

    pub async fn restore_details(
        &self,
        uid: u32,
        name: &str,
    ) -> Result<RestoreDetails, KeeperError> {
        self.consent.restore_details(uid, name).await
    }

    pub async fn restore_confirm(
        &self,
        uid: u32,
        name: &str,
        words_shown: &str,
    ) -> Result<RestoreStaged, KeeperError> {
        self.consent.restore_confirm(uid, name, words_shown).await
    }

    pub async fn set_restore_preview(
        &self,
        uid: u32,
        set: &str,
        only: &[String],
    ) -> Result<SetRestorePreview, KeeperError> {
        self.consent.set_restore_preview(uid, set, only).await
    }

    pub async fn set_restore_confirm(
        &self,
        uid: u32,
        set: &str,
        only: &[String],
        words_shown: &str,
    ) -> Result<SetRestoreStaged, KeeperError> {
        self.consent
            .set_restore_confirm(uid, set, only, words_shown)
            .await
    }

    pub async fn named_restore_preview(
        &self,
        uid: u32,
        names: &[String],
    ) -> Result<SetRestorePreview, KeeperError> {
        self.consent.named_restore_preview(uid, names).await
    }

    pub async fn named_restore_confirm(
        &self,
        uid: u32,
        names: &[String],
        words_shown: &str,
    ) -> Result<SetRestoreStaged, KeeperError> {
        self.consent
            .named_restore_confirm(uid, names, words_shown)
            .await
    }

    pub async fn cancel(&self, uid: u32) -> Result<Cancelled, KeeperError> {
        self.consent.cancel(uid).await
    }

    pub async fn status(&self, uid: u32) -> Result<Status, KeeperError> {
        self.consent.status(uid).await
    }

    // Health.

    /// The health report for `uid`, and whether health worsened since the keeper last looked.
    pub async fn health(
        &self,
        uid: u32,
    ) -> Result<(crate::wire::health::HealthReport, Option<Worsened>), KeeperError> {
        self.health.report(uid).await
    }

    /// Look at health now (after a scheduled act, or on the keeper's own schedule).
    pub async fn check_health(
        &self,
    ) -> Result<(crate::wire::health::HealthReport, Option<Worsened>), KeeperError> {
        self.health.check().await
    }

    /// Write a health report as metrics, when the keeper was given a file for them.
    pub async fn write_metrics(&self, report: &crate::wire::health::HealthReport) {
        self.health.write_metrics(report).await
    }

    // Space.

    /// Which snapshot holds the disk, as `uid` may see it.
    pub async fn space(
        &self,
        uid: u32,
        names: &[String],
    ) -> Result<crate::wire::space::SpaceReport, KeeperError> {
        self.space.report(uid, names).await
    }

    // The list.

    pub async fn list(&self, uid: u32) -> Result<Vec<SnapshotEntry>, KeeperError> {
        self.list.list(uid).await
    }

    pub async fn list_rows(&self, uid: u32) -> Result<Arc<Listed>, KeeperError> {
        self.list.list_rows(uid).await
    }

    // Retention.

    pub async fn delete(
        &self,
        uid: u32,
        name: &str,
        next_copy_full: bool,
    ) -> Result<Deleted, KeeperError> {
        self.retention.delete(uid, name, next_copy_full).await
    }

    pub async fn keep(&self, uid: u32, name: &str, keep: bool) -> Result<KeepMarked, KeeperError> {
        self.retention.keep(uid, name, keep).await
    }

    pub async fn prune(&self, uid: u32, dry_run: bool) -> Result<PruneReport, KeeperError> {
        self.retention.prune(uid, dry_run).await
    }

    // Copies.

    pub async fn copy(
        &self,
        uid: u32,
        name: &str,
        target: &str,
    ) -> Result<CopyReport, KeeperError> {
        self.copies.copy(uid, name, target).await
    }

    pub async fn copies(&self, uid: u32, target: &str) -> Result<TargetCopies, KeeperError> {
        self.copies.copies(uid, target).await
    }

    pub async fn fetch(&self, uid: u32, name: &str, target: &str) -> Result<Fetched, KeeperError> {
        self.copies.fetch(uid, name, target).await
    }

    pub async fn copy_progress(&self, uid: u32) -> Result<Vec<CopyInFlight>, KeeperError> {
        self.copies.copy_progress(uid).await
    }

    pub async fn verify(
        &self,
        uid: u32,
        target: &str,
        names: &[String],
        by_timer: bool,
    ) -> Result<crate::wire::VerifyReport, KeeperError> {
        self.copies.verify(uid, target, names, by_timer).await
    }

    // Opens.

    pub async fn open(&self, uid: u32, name: &str) -> Result<Opened, KeeperError> {
        self.opens.open(uid, name).await
    }

    pub async fn close(&self, uid: u32, name: &str) -> Result<ClosedOpen, KeeperError> {
        self.opens.close(uid, name).await
    }

    pub async fn opens(&self, uid: u32) -> Result<Vec<Opened>, KeeperError> {
        self.opens.opens(uid).await
    }

    pub async fn diff(
        &self,
        uid: u32,
        name: &str,
        path: &[u8],
    ) -> Result<PartChanges, KeeperError> {
        self.opens.diff(uid, name, path).await
    }

    /// Journal the opens the stem closed by itself; the daemon calls this every
    /// [`OPEN_CHECK_EVERY`].
    pub async fn check_opens(&self) {
        self.opens.check_opens().await
    }
}
