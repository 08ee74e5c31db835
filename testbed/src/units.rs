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
}
