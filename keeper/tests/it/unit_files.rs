//! The shipped unit, bus policy and activation file say what adr/0011 says, and systemd
//! accepts the unit (`systemd-analyze verify`) with an exposure score of at most 0.5.

use std::path::Path;

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

#[test]
fn the_unit_binds_the_journal_from_the_snapshots_subvolume_and_runs_as_the_keeper() {
    let unit = read("systemd/tacid-keeper.service");
    let user = layout::names::KEEPER_USER;
    let keeper_dir = format!(
        "{}/{}",
        layout::SNAPSHOTS_MOUNT_POINT,
        layout::KEEPER_DIR_NAME
    );
    assert!(unit.contains(&format!("\nUser={user}\n")), "{unit}");
    assert!(unit.contains("\nType=dbus\n"));
    assert!(unit.contains(&format!("\nBusName={}\n", layout::names::KEEPER_BUS_NAME)));
    assert!(unit.contains("\nStateDirectory=tacid-keeper\n"));
    assert!(
        unit.contains(&format!("\nBindPaths={keeper_dir}:/var/lib/tacid-keeper\n")),
        "{unit}"
    );
    assert!(unit.contains(&format!(
        "--journal /var/lib/tacid-keeper/{}",
        layout::JOURNAL_FILE_NAME
    )));
    assert!(unit.contains("\nCapabilityBoundingSet=\n"));
}

#[test]
fn the_bus_policy_lets_only_the_keeper_own_the_name_and_anybody_call() {
    let conf = read("dbus/org.tacid.Keeper1.conf");
    let name = layout::names::KEEPER_BUS_NAME;
    let owns: Vec<&str> = conf.lines().filter(|l| l.contains("allow own=")).collect();
    assert_eq!(owns, [format!("    <allow own=\"{name}\"/>")], "{conf}");
    assert!(conf.contains(&format!("<policy user=\"{}\">", layout::names::KEEPER_USER)));
    assert!(conf.contains(&format!(
        "<allow send_destination=\"{name}\" send_interface=\"{name}\"/>"
    )));
    let activation = read("dbus/org.tacid.Keeper1.service");
    assert!(activation.contains(&format!("\nName={name}\n")));
    assert!(activation.contains(&format!(
        "\nSystemdService={}\n",
        layout::names::KEEPER_UNIT
    )));
    assert!(activation.contains(&format!("\nUser={}\n", layout::names::KEEPER_USER)));
}

#[test]
fn systemd_accepts_the_unit_and_scores_it_hardened() {
    let Some(analyze) = testbed::units::systemd_analyze() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    // verify checks that ExecStart exists: point it at the binary this build made.
    let unit = read("systemd/tacid-keeper.service")
        .replace("/usr/bin/tacid-keeper", env!("CARGO_BIN_EXE_tacid-keeper"));
    let path = dir.path().join(layout::names::KEEPER_UNIT);
    std::fs::write(&path, unit).expect("write unit");
    testbed::units::assert_verifies(analyze, &[&path]);
    // At most what it was before the limits on hostile callers (adr/0016): limits must not
    // cost hardening.
    testbed::units::assert_exposure_at_most(analyze, &path, MAX_EXPOSURE);
}

/// The keeper's exposure score (`systemd-analyze security`, 0 to 10): 0.5 before the limits
/// on hostile callers, and no more after them (adr/0016).
const MAX_EXPOSURE: f64 = 0.5;

#[test]
fn the_unit_limits_threads_files_and_memory_and_filters_obsolete_calls() {
    let unit = read("systemd/tacid-keeper.service");
    let value = |key: &str| {
        testbed::units::value(&unit, key).unwrap_or_else(|| panic!("no {key}= in the unit"))
    };
    // The measured needs are checked against these in the hostile tier (hostile_*.rs).
    let tasks: u64 = value("TasksMax").parse().expect("TasksMax= a number");
    let files: u64 = value("LimitNOFILE").parse().expect("LimitNOFILE= a number");
    assert!((8..=64).contains(&tasks) && (32..=1024).contains(&files));
    let size = |key: &str| testbed::units::size_bytes(&value(key)).expect("a size");
    assert!(size("MemoryHigh") < size("MemoryMax"));
    let filters: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("SystemCallFilter=~"))
        .collect();
    assert!(
        filters
            .iter()
            .any(|f| f.split_whitespace().any(|g| g == "@obsolete")),
        "the keeper's syscall filter must drop @obsolete: {filters:?}"
    );
}

#[test]
fn the_units_flags_are_the_layouts_defaults_and_the_keepers_own() {
    use layout::defaults as d;
    let unit = read("systemd/tacid-keeper.service");
    let flags = testbed::command_line::exec_start_flags(&unit);
    for (flag, value) in [
        ("--approver-group", d::APPROVER_GROUP.to_owned()),
        (
            "--keep-pre-switch-sets",
            d::KEEP_PRE_SWITCH_SETS.to_string(),
        ),
        ("--keep-hourly", d::KEEP_HOURLY.to_string()),
        ("--keep-daily", d::KEEP_DAILY.to_string()),
        ("--keep-weekly", d::KEEP_WEEKLY.to_string()),
        ("--keep-monthly", d::KEEP_MONTHLY.to_string()),
        ("--manual-max-age-days", d::MANUAL_MAX_AGE_DAYS.to_string()),
        ("--free-floor-bytes", d::FREE_FLOOR_BYTES.to_string()),
        ("--keep-replaced-days", d::KEEP_REPLACED_DAYS.to_string()),
        (
            "--health-snapshot-warn-secs",
            d::HEALTH_SNAPSHOT_WARN_SECS.to_string(),
        ),
        (
            "--health-snapshot-fail-secs",
            d::HEALTH_SNAPSHOT_FAIL_SECS.to_string(),
        ),
        (
            "--health-copy-warn-secs",
            d::HEALTH_COPY_WARN_SECS.to_string(),
        ),
        (
            "--health-copy-fail-secs",
            d::HEALTH_COPY_FAIL_SECS.to_string(),
        ),
        (
            "--health-verify-warn-secs",
            d::HEALTH_VERIFY_WARN_SECS.to_string(),
        ),
        (
            "--health-staged-wait-secs",
            d::HEALTH_STAGED_WAIT_SECS.to_string(),
        ),
        (
            "--health-days-left-warn",
            d::HEALTH_DAYS_LEFT_WARN.to_string(),
        ),
        (
            "--health-days-left-fail",
            d::HEALTH_DAYS_LEFT_FAIL.to_string(),
        ),
        ("--timeline", "true".to_owned()),
    ] {
        assert_eq!(
            flags.get(flag),
            Some(&value),
            "the unit's {flag} is not layout::defaults' {value}"
        );
    }
    // A keeper started by hand, with no flags, behaves as the shipped unit does.
    testbed::command_line::assert_unit_passes_the_binarys_defaults(
        &unit,
        Path::new(env!("CARGO_BIN_EXE_tacid-keeper")),
        &[],
    );
}

#[test]
fn systemd_accepts_the_timeline_service_and_timer() {
    let Some(analyze) = testbed::units::systemd_analyze() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    // verify checks that the programs exist: any executable stands in for the CLI.
    let service = read("systemd/tacid-timeline.service").replace("/usr/bin/tacid ", "/bin/true ");
    assert!(service.contains("ExecStart=/bin/true data snapshot --timeline\n"));
    // The prune runs after every run, a failed snapshot too (ExecStopPost, not Post-Start).
    assert!(service.contains("ExecStopPost=/bin/true data prune\n"));
    assert!(!service.contains("ExecStartPost="));
    let timer = read("systemd/tacid-timeline.timer");
    assert!(timer.contains("\nOnCalendar=hourly\n") && timer.contains("\nPersistent=true\n"));
    let service_path = dir.path().join(layout::names::TIMELINE_UNIT);
    let timer_path = dir.path().join(layout::names::TIMELINE_TIMER);
    std::fs::write(&service_path, service).expect("write unit");
    std::fs::write(&timer_path, timer).expect("write timer");
    testbed::units::assert_verifies(analyze, &[&timer_path, &service_path]);
}
