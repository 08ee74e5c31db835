//! Times and counts for people, as the keeper's words and the CLI's list write them.
//!
//! Times are shown in UTC and say so: the keeper is a long-running multi-threaded daemon,
//! where the local offset cannot be read soundly, and one clock for every user of the
//! machine is less surprising than one per terminal (adr/0011).

use std::time::SystemTime;

use time::OffsetDateTime;

/// `n` things in words: "1 copy", "3 copies", "0 copies" (`one` for exactly one, else
/// `many`).
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A time for people: `Tue 1 Dec 14:02 UTC` (the year only when it is not `now`'s).
pub fn human_time(when: SystemTime, now: SystemTime) -> String {
    HumanTime(when, now).to_string()
}

/// [`human_time`] written straight into a formatter (no allocation): `HumanTime(when, now)`.
#[derive(Debug, Clone, Copy)]
pub struct HumanTime(pub SystemTime, pub SystemTime);

impl std::fmt::Display for HumanTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = utc(self.0);
        let n = utc(self.1);
        const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let weekday = WEEKDAYS[usize::from(w.weekday().number_days_from_monday())];
        let month = MONTHS[usize::from(u8::from(w.month()) - 1)];
        write!(f, "{weekday} {} {month}", w.day())?;
        if w.year() != n.year() {
            write!(f, " {}", w.year())?;
        }
        write!(f, " {:02}:{:02} UTC", w.hour(), w.minute())
    }
}

/// The exact time, for people who need it: `2026-12-01 14:02:00.123456 UTC`.
pub fn exact_time(when: SystemTime) -> String {
    ExactTime(when).to_string()
}

/// [`exact_time`] written straight into a formatter (no allocation).
#[derive(Debug, Clone, Copy)]
pub struct ExactTime(pub SystemTime);

impl std::fmt::Display for ExactTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = utc(self.0);
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06} UTC",
            w.year(),
            u8::from(w.month()),
            w.day(),
            w.hour(),
            w.minute(),
            w.second(),
            w.microsecond()
        )
    }
}

/// How long ago, roughly: `just now`, `5 minutes ago`, `2 days ago`, `in the future`.
pub fn ago(when: SystemTime, now: SystemTime) -> String {
    Ago(when, now).to_string()
}

/// [`ago`] written straight into a formatter (no allocation): `Ago(when, now)`.
#[derive(Debug, Clone, Copy)]
pub struct Ago(pub SystemTime, pub SystemTime);

impl std::fmt::Display for Ago {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Ok(d) = self.1.duration_since(self.0) else {
            return f.write_str("in the future; check the clock");
        };
        let s = d.as_secs();
        let (n, unit) = match s {
            0..60 => return f.write_str("just now"),
            60..3600 => (s / 60, "minute"),
            3600..86_400 => (s / 3600, "hour"),
            86_400..2_592_000 => (s / 86_400, "day"),
            2_592_000..31_536_000 => (s / 2_592_000, "month"),
            _ => (s / 31_536_000, "year"),
        };
        write!(f, "{n} {unit}{} ago", if n == 1 { "" } else { "s" })
    }
}

/// `{human_time} ({ago}); exactly {exact_time}` — the list's "taken" line after its label —
/// written into `out` with the calendar worked out once and the digits written by hand: a
/// list of 10 000 writes it 10 000 times. The same text as the three put together (a test
/// holds them equal).
pub fn write_taken(
    out: &mut impl std::io::Write,
    when: SystemTime,
    now: SystemTime,
    now_year: i32,
) -> std::io::Result<()> {
    const WEEKDAYS: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
    const MONTHS: [&[u8]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    /// A line's worth of bytes on the stack: no allocation per line.
    struct Buf {
        b: [u8; 64],
        n: usize,
    }
    impl Buf {
        fn put(&mut self, s: &[u8]) {
            self.b[self.n..self.n + s.len()].copy_from_slice(s);
            self.n += s.len();
        }
        fn digits(&mut self, v: u32, width: usize) {
            let mut d = [b'0'; 10];
            let mut i = d.len();
            let mut v = v;
            loop {
                i -= 1;
                d[i] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            let len = (d.len() - i).max(width);
            self.put(&d[d.len() - len..]);
        }
        fn bytes(&self) -> &[u8] {
            &self.b[..self.n]
        }
    }
    let w = utc(when);
    // `utc` clamps to what `time` represents: years 1970 to 9999, four digits.
    let year = w.year().clamp(0, 9999) as u32;
    let month = u8::from(w.month());
    let mut b = Buf { b: [0; 64], n: 0 };
    b.put(WEEKDAYS[usize::from(w.weekday().number_days_from_monday())]);
    b.put(b" ");
    b.digits(u32::from(w.day()), 1);
    b.put(b" ");
    b.put(MONTHS[usize::from(month - 1)]);
    if w.year() != now_year {
        b.put(b" ");
        b.digits(year, 1);
    }
    b.put(b" ");
    b.digits(u32::from(w.hour()), 2);
    b.put(b":");
    b.digits(u32::from(w.minute()), 2);
    b.put(b" UTC (");
    out.write_all(b.bytes())?;
    write!(out, "{}", Ago(when, now))?;
    let mut b = Buf { b: [0; 64], n: 0 };
    b.put(b"); exactly ");
    b.digits(year, 4);
    b.put(b"-");
    b.digits(u32::from(month), 2);
    b.put(b"-");
    b.digits(u32::from(w.day()), 2);
    b.put(b" ");
    b.digits(u32::from(w.hour()), 2);
    b.put(b":");
    b.digits(u32::from(w.minute()), 2);
    b.put(b":");
    b.digits(u32::from(w.second()), 2);
    b.put(b".");
    b.digits(w.microsecond(), 6);
    b.put(b" UTC");
    out.write_all(b.bytes())
}

/// The year of `t`, in UTC (for [`write_taken`]).
pub fn utc_year(t: SystemTime) -> i32 {
    utc(t).year()
}

fn utc(t: SystemTime) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(layout::human::unix_micros(t)) * 1000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

#[cfg(test)]
mod count_tests {
    use super::count;

    #[test]
    fn one_thing_is_singular_and_any_other_number_plural() {
        assert_eq!(count(1, "copy", "copies"), "1 copy");
        assert_eq!(count(0, "copy", "copies"), "0 copies");
        assert_eq!(count(2, "copy", "copies"), "2 copies");
        assert_eq!(count(1, "day", "days"), "1 day");
        assert_eq!(count(21, "snapshot", "snapshots"), "21 snapshots");
    }
}
