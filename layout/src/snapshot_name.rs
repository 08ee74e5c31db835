//! Snapshot names: `@home.2026-12-01T140200.123456Z`.
//!
//! A name says which subvolume and when (UTC, to the microsecond), sorts by time, and has
//! one canonical spelling. Two snapshots in one microsecond are kept apart by the stem,
//! which creates with the filesystem's "already exists" check and steps to
//! [`SnapshotName::next`] on a collision.

use std::cmp::Ordering;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

use crate::subvolume::{SubvolumeName, SubvolumeNameError};

/// Longest possible canonical name; anything longer is rejected before parsing.
pub const MAX_NAME_BYTES: usize = 64;

/// A valid snapshot name. It can only be built canonical.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnapshotName {
    subvolume: SubvolumeName,
    /// UTC, whole microseconds.
    taken: PrimitiveDateTime,
}

/// Why a string is not a snapshot name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotNameError {
    #[error("a snapshot name is at most {MAX_NAME_BYTES} bytes")]
    TooLong,
    #[error(
        "a snapshot name looks like @home.2026-12-01T140200.123456Z (subvolume, '.', UTC time)"
    )]
    Shape,
    #[error(transparent)]
    Subvolume(#[from] SubvolumeNameError),
    #[error("snapshots of {0} are never taken")]
    NotSnapshottable(SubvolumeName),
    #[error("the time in a snapshot name is not a real UTC time: {0}")]
    Time(String),
}

impl SnapshotName {
    /// The name of a snapshot of `subvolume` taken at `when` (truncated to microseconds).
    pub fn new(subvolume: SubvolumeName, when: SystemTime) -> Result<Self, SnapshotNameError> {
        if !subvolume.subvolume().snapshottable() {
            return Err(SnapshotNameError::NotSnapshottable(subvolume));
        }
        Ok(SnapshotName {
            subvolume,
            taken: Stamp::from_system_time(when)?.0,
        })
    }

    /// The same subvolume, one microsecond later: the next name to try on a collision.
    pub fn next(&self) -> Self {
        SnapshotName {
            subvolume: self.subvolume,
            taken: self.taken + Duration::from_micros(1),
        }
    }

    /// Parse the canonical spelling; anything else is rejected.
    pub fn parse(input: &str) -> Result<Self, SnapshotNameError> {
        if input.len() > MAX_NAME_BYTES {
            return Err(SnapshotNameError::TooLong);
        }
        if !input.is_ascii() {
            return Err(SnapshotNameError::Shape);
        }
        // The time part has a fixed width: "YYYY-MM-DDTHHMMSS.ffffffZ" is 25 bytes.
        const TIME_LEN: usize = 25;
        if input.len() < TIME_LEN + 2 {
            return Err(SnapshotNameError::Shape);
        }
        let (head, stamp) = input.split_at(input.len() - TIME_LEN);
        let subvolume = head.strip_suffix('.').ok_or(SnapshotNameError::Shape)?;
        let subvolume = SubvolumeName::parse(subvolume)?;
        if !subvolume.subvolume().snapshottable() {
            return Err(SnapshotNameError::NotSnapshottable(subvolume));
        }
        let taken = parse_stamp(stamp.as_bytes())?;
        let name = SnapshotName { subvolume, taken };
        // One spelling only: what parses must render back to itself.
        if name.to_string() != input {
            return Err(SnapshotNameError::Shape);
        }
        Ok(name)
    }

    /// The subvolume this is (by its name) a snapshot of.
    pub fn subvolume(&self) -> SubvolumeName {
        self.subvolume
    }

    /// When it was taken, UTC.
    pub fn taken(&self) -> SystemTime {
        Stamp(self.taken).to_system_time()
    }

    /// Seconds since the epoch (UTC), for programs.
    pub fn taken_unix_micros(&self) -> i64 {
        (self.taken.assume_utc().unix_timestamp_nanos() / 1000) as i64
    }
}

fn digits(b: &[u8]) -> Result<u32, SnapshotNameError> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return Err(SnapshotNameError::Shape);
    }
    Ok(b.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')))
}

pub(crate) fn parse_stamp(s: &[u8]) -> Result<PrimitiveDateTime, SnapshotNameError> {
    // YYYY-MM-DDTHHMMSS.ffffffZ
    let punct_ok = s[4] == b'-' && s[7] == b'-' && s[10] == b'T' && s[17] == b'.' && s[24] == b'Z';
    if !punct_ok {
        return Err(SnapshotNameError::Shape);
    }
    let year = digits(&s[0..4])? as i32;
    let month = digits(&s[5..7])? as u8;
    let day = digits(&s[8..10])? as u8;
    let hour = digits(&s[11..13])? as u8;
    let minute = digits(&s[13..15])? as u8;
    let second = digits(&s[15..17])? as u8;
    let micro = digits(&s[18..24])?;
    let month = Month::try_from(month).map_err(|e| SnapshotNameError::Time(e.to_string()))?;
    let date = Date::from_calendar_date(year, month, day)
        .map_err(|e| SnapshotNameError::Time(e.to_string()))?;
    let time = Time::from_hms_micro(hour, minute, second, micro)
        .map_err(|e| SnapshotNameError::Time(e.to_string()))?;
    let when = PrimitiveDateTime::new(date, time);
    // Nothing on a tacid machine happened before 1970: an earlier time is refused here,
    // not carried on to wrap into a far future where it is read as a time since the epoch.
    if when.assume_utc().unix_timestamp() < 0 {
        return Err(SnapshotNameError::Time(BEFORE_1970.into()));
    }
    Ok(when)
}

const BEFORE_1970: &str = "it is before 1970-01-01 00:00:00 UTC";

/// The UTC time stamp used in snapshot names and outcome records.
pub(crate) struct Stamp(pub(crate) PrimitiveDateTime);

impl Stamp {
    pub(crate) fn from_system_time(when: SystemTime) -> Result<Self, SnapshotNameError> {
        let micros = when
            .duration_since(UNIX_EPOCH)
            .map_err(|_| SnapshotNameError::Time(BEFORE_1970.into()))?
            .as_micros();
        let whole = OffsetDateTime::from_unix_timestamp_nanos(micros as i128 * 1000)
            .map_err(|e| SnapshotNameError::Time(e.to_string()))?;
        Ok(Stamp(PrimitiveDateTime::new(whole.date(), whole.time())))
    }

    /// Exact for every stamp [`parse_stamp`] and [`Stamp::from_system_time`] make (1970 to
    /// 9999): whole seconds and the microseconds, never nanoseconds squeezed into 64 bits.
    pub(crate) fn to_system_time(&self) -> SystemTime {
        let utc = self.0.assume_utc();
        let seconds = u64::try_from(utc.unix_timestamp()).unwrap_or(0);
        UNIX_EPOCH + Duration::new(seconds, utc.nanosecond())
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.0;
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}{:02}{:02}.{:06}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.microsecond()
        )
    }
}

impl fmt::Display for SnapshotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.subvolume, Stamp(self.taken))
    }
}

impl fmt::Debug for SnapshotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SnapshotName({self})")
    }
}

/// Oldest first by time; the subvolume breaks ties, so the order is total.
impl Ord for SnapshotName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.taken
            .cmp(&other.taken)
            .then(self.subvolume.cmp(&other.subvolume))
    }
}

impl PartialOrd for SnapshotName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for SnapshotName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::str::FromStr for SnapshotName {
    type Err = SnapshotNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SnapshotName::parse(s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn home() -> SubvolumeName {
        SubvolumeName::parse("@home").unwrap()
    }

    #[test]
    fn renders_the_documented_form() {
        let t = UNIX_EPOCH + Duration::from_micros(1_764_597_720_123_456);
        let n = SnapshotName::new(home(), t).unwrap();
        assert_eq!(n.to_string(), "@home.2025-12-01T140200.123456Z");
        assert_eq!(SnapshotName::parse(&n.to_string()).unwrap(), n);
        assert_eq!(n.taken(), t);
    }

    #[test]
    fn collisions_step_forward() {
        let n = SnapshotName::new(home(), UNIX_EPOCH + Duration::from_secs(59)).unwrap();
        assert!(n.next() > n);
        assert_eq!(n.next().to_string(), "@home.1970-01-01T000059.000001Z");
    }

    #[test]
    fn rejects_what_is_not_canonical() {
        for bad in [
            "",
            "@home",
            "@home.",
            "@home.2025-12-01T140200.123456z",
            "@home.2025-12-01T14:02:00.123456Z",
            "@home.2025-12-01T140200.12345Z",
            "@home.2025-13-01T140200.123456Z",
            "@home.2025-02-30T140200.123456Z",
            "@home.2025-12-01T250200.123456Z",
            "@home.2025-12-01T140260.123456Z",
            "@home 2025-12-01T140200.123456Z",
            "home.2025-12-01T140200.123456Z",
            "/home.2025-12-01T140200.123456Z",
            "@root.2025-12-01T140200.123456Z",
            "@snapshots.2025-12-01T140200.123456Z",
            "@home.2025-12-01T140200.123456Z/..",
            "../@home.2025-12-01T140200.123456Z",
            "@home.2025-12-01T140200.123456Z\n",
            "@home.+025-12-01T140200.123456Z",
            "@home.2025-12-01T140200.12345\u{0}Z",
            "@home.2025-12-01T1402００.123456Z",
        ] {
            assert!(SnapshotName::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(
            SnapshotName::parse(&"x".repeat(300)),
            Err(SnapshotNameError::TooLong)
        );
    }

    #[test]
    fn times_before_1970_are_refused_not_wrapped() {
        for before in [
            "@home.1969-12-31T235959.999999Z",
            "@home.1900-01-01T000000.000000Z",
            "@home.0000-01-01T000000.000000Z",
        ] {
            assert_eq!(
                SnapshotName::parse(before),
                Err(SnapshotNameError::Time(BEFORE_1970.into())),
                "{before}"
            );
        }
        let epoch = SnapshotName::parse("@home.1970-01-01T000000.000000Z").unwrap();
        assert_eq!(epoch.taken(), UNIX_EPOCH);
        assert_eq!(
            SnapshotName::new(home(), UNIX_EPOCH - Duration::from_micros(1)),
            Err(SnapshotNameError::Time(BEFORE_1970.into()))
        );
        // The far end: 64 bits of nanoseconds end in 2554; names go on to 9999, exactly.
        let last = SnapshotName::parse("@home.9999-12-31T235959.999999Z").unwrap();
        assert_eq!(last.taken_unix_micros(), 253_402_300_799_999_999);
        assert_eq!(
            last.taken(),
            UNIX_EPOCH + Duration::from_micros(253_402_300_799_999_999)
        );
        assert_eq!(SnapshotName::new(home(), last.taken()).unwrap(), last);
    }

    #[test]
    fn ephemeral_and_store_subvolumes_have_no_snapshots() {
        let root = SubvolumeName::parse("@root").unwrap();
        assert!(matches!(
            SnapshotName::new(root, SystemTime::now()),
            Err(SnapshotNameError::NotSnapshottable(_))
        ));
    }

    proptest! {
        #[test]
        fn round_trips_and_sorts_by_time(a in 0u64..8_000_000_000_000_000, b in 0u64..8_000_000_000_000_000, s in 0usize..4) {
            let subs = ["@home", "@log", "@persist", "@nix"];
            let sv = SubvolumeName::parse(subs[s]).unwrap();
            let na = SnapshotName::new(sv, UNIX_EPOCH + Duration::from_micros(a)).unwrap();
            let nb = SnapshotName::new(home(), UNIX_EPOCH + Duration::from_micros(b)).unwrap();
            prop_assert_eq!(SnapshotName::parse(&na.to_string()).unwrap(), na);
            if a != b {
                prop_assert_eq!(na.cmp(&nb), a.cmp(&b));
                // Sorting the strings of one subvolume's names sorts them by time too.
                let na_home = SnapshotName::new(home(), UNIX_EPOCH + Duration::from_micros(a)).unwrap();
                prop_assert_eq!(na_home.to_string().cmp(&nb.to_string()), a.cmp(&b));
            }
        }

        #[test]
        fn any_change_to_a_canonical_name_is_caught(a in 0u64..4_000_000_000_000_000, pos in 0usize..40, byte in any::<u8>()) {
            let n = SnapshotName::new(home(), UNIX_EPOCH + Duration::from_micros(a)).unwrap();
            let mut s = n.to_string().into_bytes();
            let pos = pos % s.len();
            prop_assume!(s[pos] != byte);
            s[pos] = byte;
            if let Ok(text) = String::from_utf8(s) {
                // A different digit may name a different valid time; it must then be canonical.
                if let Ok(other) = SnapshotName::parse(&text) {
                    prop_assert_ne!(other, n);
                    prop_assert_eq!(other.to_string(), text);
                }
            }
        }
    }
}
