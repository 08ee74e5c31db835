//! The one description of a tacid machine's disk and of the files its parts exchange.
//!
//! Every other part — stem, keeper, CLI, initrd, the NixOS module, the tests — takes
//! subvolume names, mount points, the restorable set, snapshot naming and the restore
//! request's format from here. This crate does no I/O.

pub mod allowance;
mod contract;
pub mod copies;
pub mod cut;
pub mod defaults;
pub mod escape;
pub mod human;
pub mod origin;
mod outcome;
mod request;
mod snapshot_name;
pub mod subtree;
mod subvolume;
pub mod switch;

pub use contract::{Contract, CONTRACT_JSON_PATH};
pub use outcome::{Outcome, OutcomeError, OutcomeResult, Reason, Replaced, MAX_OUTCOME_BYTES};
pub use request::{RequestError, RestoreMember, RestoreRequest, MAX_REQUEST_BYTES};
pub use snapshot_name::{
    SnapshotName, SnapshotNameError, MAX_NAME_BYTES as MAX_SNAPSHOT_NAME_BYTES,
};
pub use subvolume::{Snapshotted, Subvolume, SubvolumeName, SubvolumeNameError, SUBVOLUMES};

/// The subvolume that holds every snapshot, the staged request and the keeper's journal.
pub const SNAPSHOTS_SUBVOLUME: &str = "@snapshots";
/// Where the running system mounts [`SNAPSHOTS_SUBVOLUME`].
pub const SNAPSHOTS_MOUNT_POINT: &str = "/persist/.snapshots";
/// The ephemeral root, made again from [`ROOT_BLANK_SUBVOLUME`] at every boot.
pub const ROOT_SUBVOLUME: &str = "@root";
/// The read-only, empty template of [`ROOT_SUBVOLUME`].
pub const ROOT_BLANK_SUBVOLUME: &str = "@root-blank";

/// The staged restore request, a file at the top of [`SNAPSHOTS_SUBVOLUME`]. One file, two
/// names: the initrd, which mounts only the top of the filesystem, reaches it as
/// `@snapshots/.restore`; the running system, which mounts the subvolume at
/// [`SNAPSHOTS_MOUNT_POINT`], sees it as `/persist/.snapshots/.restore` ([`request_path`]).
pub const REQUEST_FILE_NAME: &str = ".restore";
/// Where the initrd moves a request it refused, so it is not retried at every boot.
pub const REFUSED_REQUEST_FILE_NAME: &str = ".restore.refused";
/// The initrd's record of what it did with the last request; read by the keeper.
pub const OUTCOME_FILE_NAME: &str = ".restore-outcome";
/// The keeper's own directory on [`SNAPSHOTS_SUBVOLUME`] (owned by the keeper's user),
/// bound into the keeper's state directory by its unit; no restore replaces it.
pub const KEEPER_DIR_NAME: &str = ".keeper";
/// The keeper's SQLite journal, inside [`KEEPER_DIR_NAME`].
pub const JOURNAL_FILE_NAME: &str = "journal.sqlite";
/// The keeper's state directory on a running system, onto which its unit binds
/// [`KEEPER_DIR_NAME`].
pub const KEEPER_STATE_DIR: &str = "/var/lib/tacid-keeper";
/// The journal where the keeper opens it: [`JOURNAL_FILE_NAME`] in [`KEEPER_STATE_DIR`]
/// (a test keeps the three equal).
pub const KEEPER_JOURNAL_PATH: &str = "/var/lib/tacid-keeper/journal.sqlite";
/// The copier's own directory on [`SNAPSHOTS_SUBVOLUME`] (owned by the copier's user), bound
/// onto [`COPIER_STATE_DIR`] by its unit, as the keeper's is: on an ephemeral root
/// `/var/lib` is made again at every boot, and no restore replaces `@snapshots`, so the
/// sealing key and the generations it wrote live as long as the disk.
pub const COPIER_DIR_NAME: &str = ".copier";
/// The copier's state directory: the sealing key and the generations it wrote.
pub const COPIER_STATE_DIR: &str = "/var/lib/tacid-copier";
/// The sealing key (the recovery key a person keeps), owned by the copier's user, mode 0400.
pub const SEAL_KEY_PATH: &str = "/var/lib/tacid-copier/recovery.key";
/// What the initrd appends to a live name for the copy it exchanges in (`@home.tacid-swap`):
/// beside it at the top level, never a layout name.
pub const SWAP_SUFFIX: &str = ".tacid-swap";
/// What the initrd appends to a live name for what it could not delete (`@root.tacid-stuck`),
/// one per live name (adr/0015).
pub const STUCK_SUFFIX: &str = ".tacid-stuck";
/// Prefix of the stem's temporary names (request temp files, half-made snapshots).
/// Nothing with this prefix is ever listed as a snapshot. A regular file named
/// `.tmp.<pid>.<n>` at the top of [`SNAPSHOTS_SUBVOLUME`] is the temporary of a durable write
/// of the request or the outcome (written, synced, then renamed into place): one found there
/// was left by a write cut short before its rename, and `tacid-initrd restore-data` and the
/// stem remove those at their start (adr/0007).
pub const TEMP_PREFIX: &str = ".tmp.";

/// Where a person's opened snapshots appear (adr/0019): `OPEN_DIR/<uid>/<snapshot
/// name>`, read-only. Root's, mode 0755, on the /run tmpfs, so nothing outlives a boot.
pub const OPEN_DIR: &str = "/run/tacid";

/// Root's alert command (adr/0028): an executable run by the alert unit with the health
/// report on its standard input; none there, the failure is only journalled. NixOS writes it
/// from `services.tacid.alerts.command`.
pub const ALERT_COMMAND_PATH: &str = "/etc/tacid/alert";
/// Where people's home directories are: the mount point of the subvolume whose snapshots a
/// person who is not an approver may open their own part of (their home, directly under it).
pub const HOMES_MOUNT_POINT: &str = "/home";

/// The subvolume mounted at [`HOMES_MOUNT_POINT`] (`@home`).
pub fn homes_subvolume() -> SubvolumeName {
    SubvolumeName::from_name_or_mount_point(HOMES_MOUNT_POINT)
        .expect("the layout has a subvolume mounted at HOMES_MOUNT_POINT (a test checks)")
}

/// The full path of the staged request on a running system.
pub fn request_path() -> String {
    format!("{SNAPSHOTS_MOUNT_POINT}/{REQUEST_FILE_NAME}")
}

/// Names on the system bus and in systemd, shared by the daemons, the CLI and the module.
pub mod names {
    /// The stem's well-known bus name and interface (versioned).
    pub const STEM_BUS_NAME: &str = "org.tacid.Stem1";
    /// The stem's object path.
    pub const STEM_OBJECT_PATH: &str = "/org/tacid/Stem1";
    /// The keeper's well-known bus name and interface (versioned).
    pub const KEEPER_BUS_NAME: &str = "org.tacid.Keeper1";
    /// The keeper's object path.
    pub const KEEPER_OBJECT_PATH: &str = "/org/tacid/Keeper1";
    /// The keeper's system user and group.
    pub const KEEPER_USER: &str = "tacid-keeper";
    /// The copier's well-known bus name and interface (versioned): the unprivileged daemon
    /// that seals copies for storage that is not trusted (adr/0024).
    pub const COPIER_BUS_NAME: &str = "org.tacid.Copier1";
    /// The copier's object path.
    pub const COPIER_OBJECT_PATH: &str = "/org/tacid/Copier1";
    /// The copier's system user and group: the only holder of the sealing key.
    pub const COPIER_USER: &str = "tacid-copier";
    pub const COPIER_UNIT: &str = "tacid-copier.service";
    /// systemd units shipped in the package.
    pub const STEM_UNIT: &str = "tacid-stem.service";
    pub const KEEPER_UNIT: &str = "tacid-keeper.service";
    /// The timeline: a service that takes a timeline set and prunes, and its timer.
    pub const TIMELINE_UNIT: &str = "tacid-timeline.service";
    pub const TIMELINE_TIMER: &str = "tacid-timeline.timer";
    /// The alert (adr/0028): a template the timers' units name in `OnFailure=`, with the
    /// failed unit as its instance; it journals at warning priority and runs root's alert
    /// command ([`crate::ALERT_COMMAND_PATH`]) with the health report on its standard input.
    pub const ALERT_UNIT: &str = "tacid-alert@.service";
    /// Health, hourly (adr/0028): a service running `tacid data health` as root, which
    /// names the alert in `OnFailure=` (it fails at warn and fail), and its timer.
    pub const HEALTH_UNIT: &str = "tacid-health.service";
    pub const HEALTH_TIMER: &str = "tacid-health.timer";
    /// A person's notifier (a systemd user unit): the keeper's alerts as desktop
    /// notifications, for root and the approver group.
    pub const NOTIFY_USER_UNIT: &str = "tacid-notify.service";
    /// Copies off the disk: the NixOS module's timer and service for target `T` are
    /// `tacid-copy-T` (adr/0018).
    pub const COPY_UNIT_PREFIX: &str = "tacid-copy-";
    /// Sealed copies: the NixOS module's timer and service that verify target `T`'s copies
    /// without restoring them are `tacid-verify-T` (adr/0024).
    pub const VERIFY_UNIT_PREFIX: &str = "tacid-verify-";
    /// The stem's drop-ins for copies (adr/0018), shipped apart from its unit's `.d`
    /// directory and linked in only on machines with copies (and SSH targets).
    pub const STEM_COPIES_DROP_IN: &str = "copies.conf";
    pub const STEM_COPIES_SSH_DROP_IN: &str = "copies-ssh.conf";
    /// The receiver (adr/0025): `btrfs receive` in a root unit of its own, one instance per
    /// connection to its socket, so the stem holds none of what a receive needs.
    pub const STEM_RECEIVE_SOCKET_UNIT: &str = "tacid-stem-receive.socket";
    pub const STEM_RECEIVE_SERVICE_UNIT: &str = "tacid-stem-receive@.service";
    /// Where the receiver listens (root only, mode 0600).
    pub const STEM_RECEIVE_SOCKET: &str = "/run/tacid-stem-receive.sock";
    /// initrd units shipped in the package.
    pub const INITRD_RESTORE_UNIT: &str = "tacid-restore-data.service";
    pub const INITRD_WIPE_ROOT_UNIT: &str = "tacid-wipe-root.service";
    /// Kernel command-line key naming the Btrfs device for the initrd.
    pub const KERNEL_DEVICE_KEY: &str = "tacid.device";
    /// Kernel command-line key giving the initrd the hard floor (bytes): below it, what a
    /// restore replaces is deleted at the boot, not kept (adr/0027). Without it the initrd
    /// uses [`crate::defaults::HARD_FLOOR_BYTES`], the stem's default.
    pub const KERNEL_HARD_FLOOR_KEY: &str = "tacid.hard_floor_bytes";
    /// The device the initrd uses when the kernel command line names none.
    pub const DEFAULT_DEVICE: &str = "/dev/disk/by-label/tacid";
    /// The filesystem label a tacid machine's Btrfs carries.
    pub const FILESYSTEM_LABEL: &str = "tacid";
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_journal_path_is_the_journal_file_in_the_state_directory() {
        assert_eq!(
            super::KEEPER_JOURNAL_PATH,
            format!("{}/{}", super::KEEPER_STATE_DIR, super::JOURNAL_FILE_NAME)
        );
    }

    #[test]
    fn the_sealing_key_is_in_the_copiers_state_directory() {
        assert_eq!(
            std::path::Path::new(super::SEAL_KEY_PATH).parent(),
            Some(std::path::Path::new(super::COPIER_STATE_DIR))
        );
    }
}
