//! The layout as data, for the parts that are not Rust (the NixOS module, shell checks).
//!
//! `nixos-modules/layout.json` is this, rendered; a test fails when the committed copy
//! drifts, and the module reads names only from that file.

use serde::Serialize;

use crate::defaults::{Defaults, DEFAULTS};
use crate::names;
use crate::subvolume::{Subvolume, SUBVOLUMES};

/// Where the rendered contract is committed, relative to the repository root.
pub const CONTRACT_JSON_PATH: &str = "nixos-modules/layout.json";

/// Everything a non-Rust part may need to name.
#[derive(Debug, Serialize)]
pub struct Contract {
    pub subvolumes: &'static [Subvolume],
    pub snapshots_subvolume: &'static str,
    pub snapshots_mount_point: &'static str,
    pub root_subvolume: &'static str,
    pub root_blank_subvolume: &'static str,
    pub request_file: &'static str,
    pub outcome_file: &'static str,
    pub keeper_dir: &'static str,
    pub journal_file: &'static str,
    pub stem_bus_name: &'static str,
    pub stem_object_path: &'static str,
    pub keeper_bus_name: &'static str,
    pub keeper_object_path: &'static str,
    pub keeper_user: &'static str,
    pub stem_unit: &'static str,
    pub keeper_unit: &'static str,
    pub timeline_unit: &'static str,
    pub timeline_timer: &'static str,
    /// Alerts (adr/0028): the alert template unit, root's alert command, the notifier's
    /// user unit.
    pub alert_unit: &'static str,
    pub alert_command_path: &'static str,
    pub notify_user_unit: &'static str,
    /// The hourly health check's service and timer.
    pub health_unit: &'static str,
    pub health_timer: &'static str,
    pub initrd_restore_unit: &'static str,
    pub initrd_wipe_root_unit: &'static str,
    pub kernel_device_key: &'static str,
    pub kernel_hard_floor_key: &'static str,
    pub default_device: &'static str,
    pub filesystem_label: &'static str,
    /// Copies off the disk: the configuration file, and the grammar of target names and
    /// places as whole-string POSIX EREs (`builtins.match`).
    pub copies_config_path: &'static str,
    pub copy_target_name_pattern: &'static str,
    /// Root's configuration of the consistent cut, and a paused unit's name as a
    /// whole-string POSIX ERE.
    pub cut_config_path: &'static str,
    pub cut_unit_name_pattern: &'static str,
    /// The most units, and the longest limit (ms), the stem accepts.
    pub cut_max_units: usize,
    pub cut_max_limit_ms: u32,
    /// A hook's user name as a whole-string POSIX ERE, the longest a hook's limit may be
    /// (ms), and the most arguments a hook's command may have.
    pub cut_hook_user_pattern: &'static str,
    pub cut_max_hook_limit_ms: u32,
    pub cut_max_hook_args: usize,
    pub copy_place_pattern: &'static str,
    /// The per-target timer and service of the NixOS module: this prefix and the target.
    pub copy_unit_prefix: &'static str,
    /// The stem's drop-ins for copies, by file name.
    pub stem_copies_drop_in: &'static str,
    pub stem_copies_ssh_drop_in: &'static str,
    /// The receiver's socket and its units (adr/0025).
    pub stem_receive_socket: &'static str,
    pub stem_receive_socket_unit: &'static str,
    pub stem_receive_service_unit: &'static str,
    /// Sealed copies (adr/0024): the copier's bus name, user, unit, state directory and
    /// sealing key, and the per-target verification timer's prefix.
    pub copier_bus_name: &'static str,
    pub copier_object_path: &'static str,
    pub copier_user: &'static str,
    pub copier_unit: &'static str,
    pub copier_state_dir: &'static str,
    pub copier_dir: &'static str,
    pub seal_key_path: &'static str,
    pub verify_unit_prefix: &'static str,
    /// Where opened snapshots appear, and where people's homes are.
    pub open_dir: &'static str,
    pub homes_mount_point: &'static str,
    /// NixOS's system profile (`system` in this directory), whose generation links the
    /// pre-switch check reads (adr/0009).
    pub system_profiles_dir: &'static str,
    pub system_profile: &'static str,
    /// Every tunable default (`defaults`): the module's option defaults.
    pub defaults: &'static Defaults,
}

impl Contract {
    pub fn get() -> Self {
        Contract {
            subvolumes: &SUBVOLUMES,
            snapshots_subvolume: crate::SNAPSHOTS_SUBVOLUME,
            snapshots_mount_point: crate::SNAPSHOTS_MOUNT_POINT,
            root_subvolume: crate::ROOT_SUBVOLUME,
            root_blank_subvolume: crate::ROOT_BLANK_SUBVOLUME,
            request_file: crate::REQUEST_FILE_NAME,
            outcome_file: crate::OUTCOME_FILE_NAME,
            keeper_dir: crate::KEEPER_DIR_NAME,
            journal_file: crate::JOURNAL_FILE_NAME,
            stem_bus_name: names::STEM_BUS_NAME,
            stem_object_path: names::STEM_OBJECT_PATH,
            keeper_bus_name: names::KEEPER_BUS_NAME,
            keeper_object_path: names::KEEPER_OBJECT_PATH,
            keeper_user: names::KEEPER_USER,
            stem_unit: names::STEM_UNIT,
            keeper_unit: names::KEEPER_UNIT,
            timeline_unit: names::TIMELINE_UNIT,
            timeline_timer: names::TIMELINE_TIMER,
            alert_unit: names::ALERT_UNIT,
            alert_command_path: crate::ALERT_COMMAND_PATH,
            notify_user_unit: names::NOTIFY_USER_UNIT,
            health_unit: names::HEALTH_UNIT,
            health_timer: names::HEALTH_TIMER,
            initrd_restore_unit: names::INITRD_RESTORE_UNIT,
            initrd_wipe_root_unit: names::INITRD_WIPE_ROOT_UNIT,
            kernel_device_key: names::KERNEL_DEVICE_KEY,
            kernel_hard_floor_key: names::KERNEL_HARD_FLOOR_KEY,
            default_device: names::DEFAULT_DEVICE,
            filesystem_label: names::FILESYSTEM_LABEL,
            copies_config_path: crate::copies::CONFIG_PATH,
            copy_target_name_pattern: crate::copies::TARGET_NAME_PATTERN,
            cut_config_path: crate::cut::CONFIG_PATH,
            cut_unit_name_pattern: crate::cut::UNIT_NAME_PATTERN,
            cut_max_units: crate::cut::MAX_UNITS,
            cut_max_limit_ms: crate::cut::MAX_LIMIT_MS,
            cut_hook_user_pattern: crate::cut::HOOK_USER_PATTERN,
            cut_max_hook_limit_ms: crate::cut::MAX_HOOK_LIMIT_MS,
            cut_max_hook_args: crate::cut::MAX_HOOK_ARGS,
            copy_place_pattern: crate::copies::PLACE_PATTERN,
            copy_unit_prefix: names::COPY_UNIT_PREFIX,
            stem_copies_drop_in: names::STEM_COPIES_DROP_IN,
            stem_copies_ssh_drop_in: names::STEM_COPIES_SSH_DROP_IN,
            stem_receive_socket: names::STEM_RECEIVE_SOCKET,
            stem_receive_socket_unit: names::STEM_RECEIVE_SOCKET_UNIT,
            stem_receive_service_unit: names::STEM_RECEIVE_SERVICE_UNIT,
            copier_bus_name: names::COPIER_BUS_NAME,
            copier_object_path: names::COPIER_OBJECT_PATH,
            copier_user: names::COPIER_USER,
            copier_unit: names::COPIER_UNIT,
            copier_state_dir: crate::COPIER_STATE_DIR,
            copier_dir: crate::COPIER_DIR_NAME,
            seal_key_path: crate::SEAL_KEY_PATH,
            verify_unit_prefix: names::VERIFY_UNIT_PREFIX,
            open_dir: crate::OPEN_DIR,
            homes_mount_point: crate::HOMES_MOUNT_POINT,
            system_profiles_dir: crate::switch::SYSTEM_PROFILES_DIR,
            system_profile: crate::switch::SYSTEM_PROFILE,
            defaults: &DEFAULTS,
        }
    }

    /// The committed JSON's exact text.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("the contract serializes");
        s.push('\n');
        s
    }
}
