//! Small things shown to people, written once for every part: a count of bytes
//! ([`bytes`]), a list of a few items ([`and_list`]), a string somebody else chose cut to a
//! length ([`cap`]), and times as microseconds since the epoch ([`unix_micros`]), the form
//! the wire and the journal carry them in.
//!
//! None of these escapes anything: a string a caller chose is shown in `crate::escape`'s
//! form, applied once, by whoever shows it.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Bytes for people, in binary units with one decimal: `512 B`, `3.4 KiB`, `1.2 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A few items for a sentence: `/persist`, `/persist and /home`,
/// `/persist, /var/log and /home`.
pub fn and_list(items: &[&str]) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => items.join(""),
    }
}

/// What marks where a string was cut, saying how long the whole was: `… (100000 bytes)`.
pub fn cut_mark(whole_bytes: usize) -> String {
    format!("… ({whole_bytes} bytes)")
}

/// The first `max` bytes of `text`, or fewer: cut back to a character boundary.
pub fn prefix(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The last `max` bytes of `text`, or fewer: cut forward to a character boundary.
pub fn suffix(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// `text` as it may be journalled, logged or shown back: itself when it is at most `max`
/// bytes, else its first `max` bytes (cut at a character boundary) and [`cut_mark`]:
/// `AAAA… (100000 bytes)`.
pub fn cap(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(format!("{}{}", prefix(text, max), cut_mark(text.len())))
    }
}

/// As [`cap`], keeping the end of `text` rather than its start (where a program's error
/// output says why): `… (100000 bytes) AAAA`.
pub fn cap_end(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(format!("{} {}", cut_mark(text.len()), suffix(text, max)))
    }
}

/// A time as microseconds since the epoch, negative before it; saturating at the ends of
/// `i64` (some 292 000 years either side).
pub fn unix_micros(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(before) => i128::try_from(before.duration().as_micros())
            .ok()
            .and_then(|m| i64::try_from(-m).ok())
            .unwrap_or(i64::MIN),
    }
}

/// Microseconds since the epoch as a time: the inverse of [`unix_micros`].
pub fn from_unix_micros(micros: i64) -> SystemTime {
    let d = Duration::from_micros(micros.unsigned_abs());
    if micros >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bytes_in_binary_units_with_one_decimal() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1), "1 B");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(3 * 1024 + 400), "3.4 KiB");
        assert_eq!(bytes(1536 * 1024 * 1024), "1.5 GiB");
        assert_eq!(bytes(5 << 40), "5.0 TiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn lists_read_as_a_sentence() {
        assert_eq!(and_list(&[]), "");
        assert_eq!(and_list(&["/persist"]), "/persist");
        assert_eq!(and_list(&["/persist", "/home"]), "/persist and /home");
        assert_eq!(
            and_list(&["/persist", "/var/log", "/home"]),
            "/persist, /var/log and /home"
        );
    }

    #[test]
    fn cut_at_a_character_boundary_and_say_how_long() {
        assert_eq!(prefix("short", 4096), "short");
        assert_eq!(prefix("abcdef", 3), "abc");
        // "é" is two bytes: a cut inside it goes back to before it.
        assert_eq!(prefix("aé", 2), "a");
        assert_eq!(suffix("éa", 2), "a");
        assert_eq!(cap("abc", 3), "abc");
        assert!(matches!(cap("abc", 3), Cow::Borrowed(_)));
        assert_eq!(cap("abcdef", 3), "abc… (6 bytes)");
        assert_eq!(cap("aé", 2), "a… (3 bytes)");
        assert_eq!(cap_end("abcdef", 3), "… (6 bytes) def");
        assert_eq!(cap_end("abc", 3), "abc");
        let huge = "A".repeat(100_000);
        assert!(cap(&huge, 64).ends_with("… (100000 bytes)"));
    }

    #[test]
    fn micros_either_side_of_the_epoch() {
        assert_eq!(unix_micros(UNIX_EPOCH), 0);
        let t = UNIX_EPOCH + Duration::from_micros(1_764_597_720_123_456);
        assert_eq!(unix_micros(t), 1_764_597_720_123_456);
        assert_eq!(from_unix_micros(1_764_597_720_123_456), t);
        let before = UNIX_EPOCH - Duration::from_micros(5);
        assert_eq!(unix_micros(before), -5);
        assert_eq!(from_unix_micros(-5), before);
    }

    proptest! {
        #[test]
        fn cap_is_a_prefix_within_the_cap_and_the_mark(text in ".{0,80}", max in 0usize..100) {
            let capped = cap(&text, max);
            // A `&str`, so valid UTF-8 by construction; its kept part is the input's start.
            let kept = capped.strip_suffix(cut_mark(text.len()).as_str()).unwrap_or(&capped);
            prop_assert!(text.starts_with(kept));
            prop_assert!(kept.len() <= max);
            prop_assert!(capped.len() <= max + cut_mark(text.len()).len());
            if text.len() <= max {
                prop_assert_eq!(capped.as_ref(), text.as_str());
            } else {
                prop_assert!(capped.ends_with(&cut_mark(text.len())));
                // Cut at the last character boundary at or before `max`.
                prop_assert!(kept.len() + 4 > max);
            }
            prop_assert!(std::str::from_utf8(capped.as_bytes()).is_ok());
        }

        #[test]
        fn cap_end_is_a_suffix_within_the_cap_and_the_mark(text in ".{0,80}", max in 0usize..100) {
            let capped = cap_end(&text, max);
            let mark = format!("{} ", cut_mark(text.len()));
            let kept = capped.strip_prefix(mark.as_str()).unwrap_or(&capped);
            prop_assert!(text.ends_with(kept));
            prop_assert!(kept.len() <= max);
            prop_assert!(capped.len() <= max + mark.len());
        }

        #[test]
        fn micros_round_trip(micros in any::<i64>()) {
            prop_assert_eq!(unix_micros(from_unix_micros(micros)), micros);
        }
    }
}
