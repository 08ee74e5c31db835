//! The copier's systemd unit, D-Bus policy and activation file, read as text; and what
//! systemd makes of the unit (`systemd-analyze verify` and `security`), where it exists
//! (a loud skip otherwise, a failure under CI=true).

use std::path::{Path, PathBuf};

use layout::names;

fn copier_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn unit_path() -> PathBuf {
    copier_dir().join("systemd").join(names::COPIER_UNIT)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `(key, value)` for every assignment, in order; comments, blanks and sections skipped.
fn assignments(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not an assignment: {l:?}"));
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect()
}

/// The one value of `key`; fails when it is missing or given twice.
fn value<'a>(unit: &'a [(String, String)], key: &str) -> &'a str {
    let all: Vec<&str> = unit
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect();
    match all[..] {
        [one] => one,
        ref other => panic!("{key}= must be set exactly once in the unit, found {other:?}"),
    }
}

/// The ExecStart= command's value for `--option`.
fn exec_option<'a>(unit: &'a [(String, String)], option: &str) -> &'a str {
    let exec = value(unit, "ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == option)
        .unwrap_or_else(|| panic!("ExecStart= must pass {option}: {exec}"));
    words
        .get(at + 1)
        .unwrap_or_else(|| panic!("{option} has no value in ExecStart="))
}

#[test]
fn the_unit_runs_as_the_copier_with_no_capability_and_its_state_directory() {
    let unit = assignments(&read(&unit_path()));
    assert_eq!(value(&unit, "Type"), "dbus");
    assert_eq!(value(&unit, "BusName"), names::COPIER_BUS_NAME);
    assert_eq!(value(&unit, "User"), names::COPIER_USER);
    assert_eq!(value(&unit, "Group"), names::COPIER_USER);
    assert_eq!(value(&unit, "CapabilityBoundingSet"), "");
    assert_eq!(value(&unit, "AmbientCapabilities"), "");
    assert_eq!(value(&unit, "NoNewPrivileges"), "yes");
    assert_eq!(value(&unit, "ProtectSystem"), "strict");
    // The state directory systemd makes is the layout's, and the key and the generations
    // are in it.
    let state = format!("/var/lib/{}", value(&unit, "StateDirectory"));
    assert_eq!(state, layout::COPIER_STATE_DIR);
    assert_eq!(value(&unit, "StateDirectoryMode"), "0700");
    assert_eq!(exec_option(&unit, "--state-dir"), layout::COPIER_STATE_DIR);
    // The key is the daemon's default, in the state directory; that directory is the
    // copier's on the snapshots subvolume, where the key commands make the key.
    assert!(!value(&unit, "ExecStart").contains("--key"));
    let held = copier::keys::held_key_path();
    let held_dir = held.parent().expect("a directory").display().to_string();
    assert_eq!(
        value(&unit, "BindPaths"),
        format!("{held_dir}:{}", layout::COPIER_STATE_DIR)
    );
    assert_eq!(
        held.file_name(),
        Path::new(layout::SEAL_KEY_PATH).file_name(),
        "the key commands' file is the daemon's, seen through the bind"
    );
    assert_eq!(
        value(&unit, "RequiresMountsFor"),
        layout::SNAPSHOTS_MOUNT_POINT
    );
    assert_eq!(
        value(&unit, "ExecStartPre"),
        format!(
            "+/usr/bin/install -d -o {0} -g {0} -m 0700 {held_dir}",
            names::COPIER_USER
        )
    );
    assert_eq!(exec_option(&unit, "--keeper-user"), names::KEEPER_USER);
    assert_eq!(
        exec_option(&unit, "--copies-config"),
        layout::copies::CONFIG_PATH
    );
    assert_eq!(exec_option(&unit, "--bus"), "system");
    // The network is the copier's job (S3, SSH): allowed, and nothing else of the kernel's.
    assert_eq!(
        value(&unit, "RestrictAddressFamilies"),
        "AF_UNIX AF_INET AF_INET6"
    );
    assert!(
        value(&unit, "ExecStart").starts_with("/usr/bin/tacid-copier "),
        "ExecStart= must be /usr/bin/tacid-copier (the package rewrites /usr/bin/)"
    );
    // A copier started by hand behaves as the shipped unit does.
    testbed::command_line::assert_unit_passes_the_binarys_defaults(
        &read(&unit_path()),
        Path::new(env!("CARGO_BIN_EXE_tacid-copier")),
        &[],
    );
}

#[test]
fn the_activation_file_and_policy_name_the_copier_and_the_keeper() {
    let dbus = copier_dir().join("dbus");
    let service = assignments(&read(
        &dbus.join(format!("{}.service", names::COPIER_BUS_NAME)),
    ));
    assert_eq!(value(&service, "Name"), names::COPIER_BUS_NAME);
    assert_eq!(value(&service, "SystemdService"), names::COPIER_UNIT);
    assert_eq!(value(&service, "User"), names::COPIER_USER);

    let policy = read(&dbus.join(format!("{}.conf", names::COPIER_BUS_NAME)));
    let own = format!("<allow own=\"{}\"/>", names::COPIER_BUS_NAME);
    assert_eq!(policy.matches(&own).count(), 1, "one user owns the name");
    let block = |user: &str| -> String {
        policy
            .split(&format!("<policy user=\"{user}\">"))
            .nth(1)
            .and_then(|b| b.split("</policy>").next())
            .unwrap_or_else(|| panic!("no policy for {user}"))
            .to_owned()
    };
    assert!(
        block(names::COPIER_USER).contains(&own),
        "the copier owns the name"
    );
    assert!(!block(names::COPIER_USER).contains("send_destination"));
    let keeper = block(names::KEEPER_USER);
    assert!(keeper.contains(&format!(
        "<allow send_destination=\"{0}\" send_interface=\"{0}\"/>",
        names::COPIER_BUS_NAME
    )));
    assert!(
        !keeper.contains("own="),
        "the keeper does not own the copier's name"
    );
    assert_eq!(
        policy.matches("<policy user=").count(),
        2,
        "policies for the copier and the keeper only"
    );
    let default = policy
        .split("<policy context=\"default\">")
        .nth(1)
        .expect("a default policy");
    assert!(default.contains(&format!("<deny own=\"{}\"/>", names::COPIER_BUS_NAME)));
    assert!(default.contains(&format!(
        "<deny send_destination=\"{}\"/>",
        names::COPIER_BUS_NAME
    )));
    assert!(!policy.contains("<allow send_destination=\"org.tacid.Copier1\"/>"));
    assert!(!policy.contains("context=\"mandatory\""));
}

#[test]
fn systemd_analyze_verify_is_clean() {
    let Some(analyze) = testbed::units::systemd_analyze() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bin = Path::new(env!("CARGO_BIN_EXE_tacid-copier"));
    // As the package installs it: the copier where the binary is (`install` stays
    // coreutils', which this machine has at /usr/bin too).
    let text = read(&unit_path()).replace("/usr/bin/tacid-copier", &bin.display().to_string());
    let unit = dir.path().join(names::COPIER_UNIT);
    std::fs::write(&unit, text).expect("write the rewritten unit");
    testbed::units::assert_verifies(analyze, &[&unit]);
}

/// The exposure score (`systemd-analyze security`, 0 to 10), measured 1.2: what is left is
/// the network (0.5 PrivateNetwork, 0.3 INET, 0.2 no IP allow list: S3 and SSH targets need
/// it; an allow list of the targets' addresses would be the module's to render), 0.2 for
/// PrivateUsers (root's copies.json must be seen as root's) and 0.2 of small items.
const MAX_EXPOSURE: f64 = 1.2;

#[test]
fn systemd_analyze_security_exposure_is_at_most_1_2() {
    let Some(analyze) = testbed::units::systemd_analyze() else {
        return;
    };
    testbed::units::assert_exposure_at_most(analyze, &unit_path(), MAX_EXPOSURE);
}
