//! `tacid alert --unit UNIT`: what `tacid-alert@.service` runs when a tacid timer's unit
//! failed (its `OnFailure=`). It journals the failure and the health report at warning
//! priority (each line on stderr with the `<4>` prefix systemd reads), then runs root's alert
//! command, if one is configured, with the report on its standard input (and
//! `TACID_ALERT_UNIT`, `TACID_HEALTH_LEVEL` in its environment): mail, a push service,
//! whatever root chose (NixOS: services.tacid.alerts.command).

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use keeper_interface::Keeper1Proxy;

use crate::cli::{exit, AlertArgs};
use crate::{health, Failure};

/// The alert's text: which unit failed, then the report (or why there is none).
pub async fn text(keeper: &Keeper1Proxy<'static>, unit: &str) -> (String, String) {
    // The hourly health check "fails" when health warns or fails: that is what it found.
    let what = if unit == layout::names::HEALTH_UNIT {
        format!(
            "{unit}, the hourly health check, found something that needs a person on this machine."
        )
    } else {
        format!(
            "{} failed on this machine.",
            layout::escape::escape(unit.as_bytes())
        )
    };
    let unit = layout::escape::escape(unit.as_bytes());
    match keeper.health().await {
        Ok(r) => (
            format!(
                "{what} `tacid data health` says:\n\n{}",
                health::text(&r)
            ),
            r.level.clone(),
        ),
        Err(e) => (
            format!(
                "{unit} failed on this machine, and the keeper did not answer for its health ({e}).\nSee `systemctl status tacid-keeper.service tacid-stem.service` and `journalctl -u {unit}`.\n"
            ),
            keeper_interface::health::FAIL.to_owned(),
        ),
    }
}

pub async fn run(keeper: &Keeper1Proxy<'static>, a: &AlertArgs) -> Result<u8, Failure> {
    let (report, level) = text(keeper, &a.unit).await;
    // Warning priority in the journal: systemd reads a `<4>` at the start of each line.
    let stderr = std::io::stderr();
    let mut err = stderr.lock();
    for line in report.lines() {
        let _ = writeln!(err, "<4>{line}");
    }
    drop(err);
    let Some(command) = &a.command else {
        return Ok(exit::OK);
    };
    if !command.is_absolute() {
        return Err(Failure {
            code: exit::USAGE,
            name: String::new(),
            message: format!(
                "the alert command must be an absolute path, not {}",
                command.display()
            ),
        });
    }
    if !Path::new(command).exists() {
        eprintln!(
            "<5>no alert command at {}: the failure is journalled only",
            command.display()
        );
        return Ok(exit::OK);
    }
    let mut child = Command::new(command)
        .env("TACID_ALERT_UNIT", &a.unit)
        .env("TACID_HEALTH_LEVEL", &level)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| Failure {
            code: exit::FAILED,
            name: String::new(),
            message: format!("cannot run the alert command {}: {e}", command.display()),
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its input is its own business.
        let _ = stdin.write_all(report.as_bytes());
    }
    let status = child.wait().map_err(|e| Failure {
        code: exit::FAILED,
        name: String::new(),
        message: format!("the alert command {}: {e}", command.display()),
    })?;
    if status.success() {
        Ok(exit::OK)
    } else {
        Err(Failure {
            code: exit::FAILED,
            name: String::new(),
            message: format!(
                "the alert command {} failed ({status}): nobody may have been told; the failure is in the journal",
                command.display()
            ),
        })
    }
}
