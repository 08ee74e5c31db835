//! Test-only: values of systemd unit files, read as text, for tests of the shipped units.

/// The last value assigned to `key` in `text` (systemd lets a later one win), if any.
pub fn value(text: &str, key: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with(';'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_owned())
        .next_back()
}

/// A size as systemd writes it for `MemoryMax=` and friends (`512M`, `1G`, `4096`), in
/// bytes; `None` for anything else (`infinity`, a percentage).
pub fn size_bytes(value: &str) -> Option<u64> {
    let digits = value.trim_end_matches(['K', 'M', 'G', 'T']);
    let n: u64 = digits.parse().ok()?;
    let shift = match &value[digits.len()..] {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// The overall exposure score in what `systemd-analyze security` prints for one unit (the
/// line `→ Overall exposure level for NAME: 0.5 SAFE 😀`), on its scale of 0 to 10.
pub fn overall_exposure(security_output: &str) -> Result<f64, String> {
    let overall = security_output
        .lines()
        .find_map(|l| {
            l.split_once("Overall exposure level for ")
                .map(|(_, rest)| rest)
        })
        .ok_or("no overall exposure line")?;
    overall
        .split_once(": ")
        .and_then(|(_, s)| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("unreadable overall exposure line: {overall}"))
}

/// `systemd-analyze`, a test oracle of the shipped units; `None` after a loud message where
/// it is missing (a failure under CI=true).
pub fn systemd_analyze() -> Option<&'static str> {
    let found = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("systemd-analyze");
    }
    let message = "systemd-analyze is not installed: the unit's verify and security checks \
                   DID NOT RUN (apt-get install systemd)";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{message}");
    }
    eprintln!("\n*** {message} ***\n");
    None
}

/// `systemd-analyze verify` accepts `units` (run in the first one's directory) with nothing
/// to say; panics with what it said otherwise.
pub fn assert_verifies(analyze: &str, units: &[&std::path::Path]) {
    let dir = units
        .first()
        .and_then(|u| u.parent())
        .unwrap_or(std::path::Path::new("."));
    let out = std::process::Command::new(analyze)
        .args(["verify", "--man=no"])
        .args(units)
        .current_dir(dir)
        .output()
        .expect("run systemd-analyze verify");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify {units:?} (exit {:?}):\n{stderr}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The exposure score of `unit` (`systemd-analyze security --offline`), which must be at
/// most `max` (`--threshold` makes systemd-analyze itself fail above it too); returned.
pub fn assert_exposure_at_most(analyze: &str, unit: &std::path::Path, max: f64) -> f64 {
    let threshold = format!("--threshold={}", (max * 10.0) as u32);
    let out = std::process::Command::new(analyze)
        .args(["security", "--offline=true", &threshold, "--no-pager"])
        .arg(unit)
        .output()
        .expect("run systemd-analyze security");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let score = overall_exposure(&stdout)
        .unwrap_or_else(|e| panic!("{e} in:\n{stdout}{}", String::from_utf8_lossy(&out.stderr)));
    eprintln!("{}: exposure {score}", unit.display());
    assert!(score <= max, "exposure {score} > {max}:\n{stdout}");
    assert!(
        out.status.success(),
        "systemd-analyze security {threshold} failed:\n{stdout}"
    );
    score
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_sizes() {
        let unit = "[Service]\nTasksMax=8\n# TasksMax=99\nTasksMax=16\nMemoryMax=512M\n";
        assert_eq!(value(unit, "TasksMax").as_deref(), Some("16"));
        assert_eq!(value(unit, "LimitNOFILE"), None);
        assert_eq!(size_bytes("512M"), Some(512 << 20));
        assert_eq!(size_bytes("4096"), Some(4096));
        assert_eq!(size_bytes("1G"), Some(1 << 30));
        assert_eq!(size_bytes("infinity"), None);
        assert_eq!(size_bytes("50%"), None);
    }

    #[test]
    fn the_overall_exposure_is_read_from_systemd_analyze_security() {
        let out = "✓ UMask=   Files created by service are accessible only by ...\n\n\
                   → Overall exposure level for tacid-keeper.service: 0.5 SAFE 😀\n";
        assert_eq!(overall_exposure(out), Ok(0.5));
        let out = "→ Overall exposure level for tacid-stem.service: 1.6 OK 🙂";
        assert_eq!(overall_exposure(out), Ok(1.6));
        assert!(overall_exposure("Failed to open unit\n").is_err());
        assert!(overall_exposure("→ Overall exposure level for x.service: ?? UNSAFE").is_err());
    }
}
