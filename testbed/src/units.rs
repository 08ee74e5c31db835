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
