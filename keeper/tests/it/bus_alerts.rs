//! Alerts on real parts (adr/0028). The alert unit as shipped: systemd accepts it beside the
//! timeline service that names it in `OnFailure=` (systemd is not PID 1 here, so the real
//! OnFailure= path cannot run: the rendered units are verified, and the alert program is run
//! exactly as the unit's ExecStart says, against the real keeper and stem); root's command
//! gets the health report on its standard input. And the notifier: a real session bus of the
//! approver's, a real notification server (dunst on a real X server, Xvfb) whose history is
//! read back with dunstctl, the keeper's signals from a real failing timer's act.
//!
//! Run (root, loop devices; dunst and xvfb for the notifier):
//! `cargo test -p keeper --test it bus_alerts::`.

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{bin, ok, World, APPROVER, STRANGER};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_owned()
}

fn shipped(rel: &str) -> String {
    fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The alert unit's ExecStart, its `%i` the failed unit, its programs where they are here.
fn alert_command_line(unit: &str, command: &Path) -> Vec<String> {
    command_line(layout::names::ALERT_UNIT, unit, command)
}

/// A shipped unit of the CLI's: its ExecStart, `%i` the failed unit, its programs here.
fn command_line(shipped_unit: &str, unit: &str, command: &Path) -> Vec<String> {
    let text = shipped(&format!("tacid-cli/systemd/{shipped_unit}"));
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the alert unit has an ExecStart");
    exec.split_whitespace()
        .map(|w| match w {
            "/usr/bin/tacid" => bin("tacid").display().to_string(),
            "%i" => unit.to_owned(),
            w if w == layout::ALERT_COMMAND_PATH => command.display().to_string(),
            w => w.to_owned(),
        })
        .collect()
}

#[test]
fn bus_systemd_accepts_the_alert_unit_named_by_the_timeline_services_on_failure() {
    let Some(analyze) = testbed::units::systemd_analyze() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let timeline = shipped("keeper/systemd/tacid-timeline.service");
    assert!(
        timeline.contains("\nOnFailure=tacid-alert@%n.service\n"),
        "the timeline service alerts when it fails"
    );
    let alert = shipped(&format!("tacid-cli/systemd/{}", layout::names::ALERT_UNIT));
    // verify checks that the programs exist: any executable stands in for the CLI.
    let timeline = timeline.replace("/usr/bin/tacid ", "/bin/true ");
    let alert = alert.replace("/usr/bin/tacid ", "/bin/true ");
    let service = dir.path().join(layout::names::TIMELINE_UNIT);
    let template = dir.path().join(layout::names::ALERT_UNIT);
    // The instance the timeline's failure starts, as systemd names it.
    let instance = dir.path().join(format!(
        "tacid-alert@{}.service",
        layout::names::TIMELINE_UNIT
    ));
    fs::write(&service, timeline).expect("write");
    fs::write(&template, &alert).expect("write");
    fs::write(&instance, &alert).expect("write");
    testbed::units::assert_verifies(analyze, &[&service, &instance]);
    let notify = shipped(&format!(
        "tacid-cli/systemd/{}",
        layout::names::NOTIFY_USER_UNIT
    ))
    .replace("/usr/bin/tacid ", "/bin/true ");
    let notify_path = dir.path().join(layout::names::NOTIFY_USER_UNIT);
    fs::write(&notify_path, notify).expect("write");
    let out = Command::new(analyze)
        .args(["verify", "--user", "--man=no"])
        .arg(&notify_path)
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", dir.path())
        .output()
        .expect("systemd-analyze verify --user");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && stderr.lines().all(|l| l.contains("XDG_RUNTIME_DIR")
                || l.trim().is_empty()
                || l.contains("user manager")),
        "systemd-analyze verify --user {}: {stderr}",
        notify_path.display()
    );
}

#[test]
fn bus_the_alert_journals_at_warning_and_gives_roots_command_the_health_report() {
    let Some(w) = World::start() else { return };
    // Root's command: keeps what it was given, and its environment.
    let command = w.dir.join("alert-command");
    let got = w.dir.join("alert-stdin");
    let env = w.dir.join("alert-env");
    fs::write(
        &command,
        format!(
            "#!/bin/sh\ncat > {}\necho \"$TACID_ALERT_UNIT $TACID_HEALTH_LEVEL\" > {}\n",
            got.display(),
            env.display()
        ),
    )
    .expect("the command");
    fs::set_permissions(&command, fs::Permissions::from_mode(0o755)).expect("chmod");
    let line = alert_command_line(layout::names::TIMELINE_UNIT, &command);
    let out = Command::new(&line[0])
        .args(&line[1..])
        .env("TACID_BUS_ADDRESS", &w.address)
        .output()
        .expect("the alert runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Every line at warning priority, the first saying which unit failed.
    assert!(
        stderr.starts_with("<4>tacid-timeline.service failed on this machine."),
        "{stderr}"
    );
    assert!(stderr.lines().all(|l| l.starts_with("<4>")), "{stderr}");
    let report = fs::read_to_string(&got).expect("the command got its input");
    // A new machine with no snapshot yet: the report warns and says what to do.
    assert!(report.contains("tacid health: WARNING"), "{report}");
    assert!(
        report.contains("there is no snapshot of /home yet."),
        "{report}"
    );
    assert!(report.contains("what to do: "), "{report}");
    assert_eq!(
        fs::read_to_string(&env).expect("env").trim(),
        "tacid-timeline.service warn"
    );

    // A command that fails is said, with the exit code of a failure.
    fs::write(&command, "#!/bin/sh\ncat >/dev/null\nexit 3\n").expect("the command");
    let out = Command::new(&line[0])
        .args(&line[1..])
        .env("TACID_BUS_ADDRESS", &w.address)
        .output()
        .expect("the alert runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the alert command") && stderr.contains("failed"),
        "{stderr}"
    );

    // No command configured: journalled only, and that is no failure of the alert.
    fs::remove_file(&command).expect("rm");
    let out = Command::new(&line[0])
        .args(&line[1..])
        .env("TACID_BUS_ADDRESS", &w.address)
        .output()
        .expect("the alert runs");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the failure is journalled only"));
}

#[test]
fn bus_systemd_accepts_the_hourly_health_check_which_alerts_when_it_warns_or_fails() {
    let Some(analyze) = testbed::units::systemd_analyze() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let service = shipped(&format!("tacid-cli/systemd/{}", layout::names::HEALTH_UNIT));
    let timer = shipped(&format!(
        "tacid-cli/systemd/{}",
        layout::names::HEALTH_TIMER
    ));
    assert!(
        service.contains("\nOnFailure=tacid-alert@%n.service\n"),
        "the health check alerts when it fails: {service}"
    );
    assert!(
        service.contains("\nExecStart=/usr/bin/tacid data health\n"),
        "{service}"
    );
    // Warn (16) and fail (17) must fail the unit, or OnFailure= never starts the alert.
    assert!(!service.contains("SuccessExitStatus="), "{service}");
    assert!(
        timer.contains("\nOnCalendar=hourly\n")
            && timer.contains("\nPersistent=true\n")
            && timer.contains("\nWantedBy=timers.target\n"),
        "{timer}"
    );
    let alert = shipped(&format!("tacid-cli/systemd/{}", layout::names::ALERT_UNIT))
        .replace("/usr/bin/tacid ", "/bin/true ");
    let service_path = dir.path().join(layout::names::HEALTH_UNIT);
    let timer_path = dir.path().join(layout::names::HEALTH_TIMER);
    let instance = dir.path().join(format!(
        "tacid-alert@{}.service",
        layout::names::HEALTH_UNIT
    ));
    fs::write(
        &service_path,
        service.replace("/usr/bin/tacid ", "/bin/true "),
    )
    .expect("write");
    fs::write(&timer_path, timer).expect("write");
    fs::write(dir.path().join(layout::names::ALERT_UNIT), &alert).expect("write");
    fs::write(&instance, &alert).expect("write");
    testbed::units::assert_verifies(analyze, &[&timer_path, &service_path, &instance]);
}

#[test]
fn bus_the_hourly_health_check_fails_at_warn_and_its_alert_gives_roots_command_the_report() {
    let Some(w) = World::start() else { return };
    // The health unit's ExecStart, as root: a new machine with no snapshot yet warns, and
    // the exit code (16) is not 0, so systemd marks the unit failed and starts the alert.
    let none = w.dir.join("no-command");
    let line = command_line(layout::names::HEALTH_UNIT, "", &none);
    let out = Command::new(&line[0])
        .args(&line[1..])
        .env("TACID_BUS_ADDRESS", &w.address)
        .output()
        .expect("the health check runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(16), "{stdout}");
    assert!(
        stdout.contains("there is no snapshot of /home yet."),
        "{stdout}"
    );

    // The alert OnFailure= starts for it, with root's command.
    let command = w.dir.join("alert-command");
    let got = w.dir.join("alert-stdin");
    fs::write(&command, format!("#!/bin/sh\ncat > {}\n", got.display())).expect("the command");
    fs::set_permissions(&command, fs::Permissions::from_mode(0o755)).expect("chmod");
    let line = alert_command_line(layout::names::HEALTH_UNIT, &command);
    let out = Command::new(&line[0])
        .args(&line[1..])
        .env("TACID_BUS_ADDRESS", &w.address)
        .output()
        .expect("the alert runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with(
            "<4>tacid-health.service, the hourly health check, found something that needs a person"
        ),
        "{stderr}"
    );
    let report = fs::read_to_string(&got).expect("the command got its input");
    assert!(
        report.contains("there is no snapshot of /home yet."),
        "{report}"
    );

    // Once a set is taken, the check passes: no alert.
    let taken = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert!(taken.status.success());
    let line = command_line(layout::names::HEALTH_UNIT, "", &none);
    let out = Command::new(&line[0])
        .args(&line[1..])
        .env("TACID_BUS_ADDRESS", &w.address)
        .output()
        .expect("the health check runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A process that is killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn as_user(user: &str, program: &str) -> Command {
    let mut c = Command::new("/usr/bin/setpriv");
    c.args([
        &format!("--reuid={user}"),
        &format!("--regid={user}"),
        "--init-groups",
        program,
    ]);
    c
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn tool_missing(tools: &[&str]) -> Option<String> {
    tools
        .iter()
        .find(|t| !Path::new(t).exists())
        .map(|t| t.to_string())
}

#[test]
fn bus_the_notifier_shows_the_keepers_alerts_on_a_real_notification_server() {
    if let Some(t) = tool_missing(&[
        "/usr/bin/dunst",
        "/usr/bin/Xvfb",
        "/usr/bin/dunstctl",
        "/usr/bin/busctl",
    ]) {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{t} is missing under CI=true (apt-get install dunst xvfb systemd)");
        }
        eprintln!("\n!!!!!!!!!!\n!!! SKIPPED the notifier's test: {t} is missing (apt-get install dunst xvfb)\n!!!!!!!!!!\n");
        return;
    }
    let Some(mut w) = World::start() else { return };

    // A real X server, and the approver's own session: its bus and dunst on it.
    let display_number = 40 + (std::process::id() % 400);
    let display = format!(":{display_number}");
    let _x = Killed(
        Command::new("/usr/bin/Xvfb")
            .args([
                display.as_str(),
                "-ac",
                "-nolisten",
                "tcp",
                "-screen",
                "0",
                "800x600x24",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb starts"),
    );
    let socket = PathBuf::from(format!("/tmp/.X11-unix/X{display_number}"));
    wait_for("the X server", Duration::from_secs(20), || socket.exists());
    let home = w.dir.join("approver-home");
    fs::create_dir_all(&home).expect("home");
    ok("chown", &[APPROVER, home.to_str().expect("utf-8")]);
    // A session bus as the approver's own, but with no activation: only the dunst started
    // here (on the X server) may answer for the notifications.
    let session_config = w.dir.join("session.conf");
    fs::write(
        &session_config,
        format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
            home.join("session.sock").display()
        ),
    )
    .expect("the session bus config");
    let mut session = as_user(APPROVER, "/usr/bin/dbus-daemon")
        .arg(format!("--config-file={}", session_config.display()))
        .args(["--nofork", "--nopidfile", "--print-address=1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the session bus starts");
    let mut address = String::new();
    BufReader::new(session.stdout.take().expect("stdout"))
        .read_line(&mut address)
        .expect("its address");
    let address = address.trim().to_owned();
    let _session = Killed(session);
    let env = |c: &mut Command| {
        c.env("DISPLAY", &display)
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env_remove("XDG_RUNTIME_DIR");
    };
    let mut dunst = as_user(APPROVER, "/usr/bin/dunst");
    env(&mut dunst);
    let dunst_log = w.dir.join("dunst.log");
    let _dunst = Killed(
        dunst
            .stdout(fs::File::create(&dunst_log).expect("log"))
            .stderr(fs::File::create(w.dir.join("dunst.err")).expect("log"))
            .spawn()
            .expect("dunst starts"),
    );
    let dunstctl = |args: &[&str]| {
        let mut c = as_user(APPROVER, "/usr/bin/dunstctl");
        env(&mut c);
        c.args(args).output().expect("dunstctl")
    };
    wait_for(
        "dunst on the approver's session bus",
        Duration::from_secs(20),
        || {
            let mut c = as_user(APPROVER, "/usr/bin/dbus-send");
            env(&mut c);
            let out = c
                .args([
                    "--session",
                    "--print-reply",
                    "--dest=org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.NameHasOwner",
                    "string:org.freedesktop.Notifications",
                ])
                .output()
                .expect("dbus-send");
            String::from_utf8_lossy(&out.stdout).contains("boolean true")
        },
    );

    // The approver's notifier, on the keeper's bus and their session's.
    let notify_log = w.dir.join("notify.log");
    let _notify = Killed(
        as_user(APPROVER, bin("tacid").to_str().expect("utf-8"))
            .args(["notify", "--session-bus", &address])
            .env("TACID_BUS_ADDRESS", &w.address)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&notify_log).expect("log"))
            .spawn()
            .expect("the notifier starts"),
    );
    let log = || fs::read_to_string(&notify_log).unwrap_or_default();
    wait_for("the notifier listening", Duration::from_secs(20), || {
        log().contains("listening to the keeper's alerts")
    });
    // A new machine with no snapshot yet: told at once, at the notifier's start.
    assert!(
        log().contains("shown ("),
        "{}\ndunst: {}",
        log(),
        fs::read_to_string(w.dir.join("dunst.err")).unwrap_or_default()
    );

    // The timer's act fails: the stem's hard floor is above the whole disk.
    w.kill_stem();
    w.stem_args = vec!["--hard-floor-bytes".into(), (100u64 << 30).to_string()];
    w.start_stem();
    let out = w.tacid_as_root(&["data", "snapshot", "--timeline"]);
    assert_eq!(
        out.status.code(),
        Some(11),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(
        "two more notifications shown",
        Duration::from_secs(20),
        || log().matches("shown (").count() >= 3,
    );

    // What dunst showed, read back from its history.
    let closed = dunstctl(&["close-all"]);
    assert!(closed.status.success());
    let mut history = String::new();
    wait_for("dunst's history", Duration::from_secs(10), || {
        let out = dunstctl(&["history"]);
        history = String::from_utf8_lossy(&out.stdout).into_owned();
        history.matches("\"appname\"").count() >= 3
    });
    let v: serde_json::Value = serde_json::from_str(&history).expect("dunstctl history is JSON");
    let shown: Vec<(String, String)> = v["data"][0]
        .as_array()
        .expect("the history's notifications")
        .iter()
        .map(|n| {
            (
                n["summary"]["data"].as_str().unwrap_or_default().to_owned(),
                n["body"]["data"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    println!("dunst's history: {shown:#?}");
    assert!(
        shown
            .iter()
            .any(|(s, b)| s == "tacid: the data rollback needs a look"
                && b.contains("there is no snapshot of /home yet.")),
        "{shown:#?}"
    );
    assert!(
        shown
            .iter()
            .any(|(s, b)| s == "tacid: timeline failed" && b.contains("tacid data health")),
        "{shown:#?}"
    );
    assert!(
        shown
            .iter()
            .any(|(s, b)| s == "tacid: the data rollback is failing"
                && b.contains("below the hard floor")
                && b.contains("free space on the disk")),
        "{shown:#?}"
    );

    // Somebody who cannot act is not notified: their notifier says so and ends.
    let (code, _, err) = w.tacid(STRANGER, &["notify", "--session-bus", &address]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("only root and the approver group"), "{err}");
}
