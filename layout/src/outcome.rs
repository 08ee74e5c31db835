//! The outcome record: what the initrd did with the last request.
//!
//! Written by `tacid-initrd` to `.restore-outcome` on the snapshots subvolume, read by the
//! keeper after boot. Five lines or more, in this order, each `key SP value LF`:
//!
//! ```text
//! tacid-restore-outcome 1
//! result done|refused
//! finished 2026-12-01T140200.123456Z
//! request @home @home.2026-12-01T120000.000000Z <uuid>   (or "-" when it did not parse)
//! reason <one line of printable text>
//! ```
//!
//! A request of several members (a set) has one `request` line per member, in the request's
//! own order; a request of one member has exactly the five lines of before sets existed.
//!
//! A restore that was done says, after the request lines, what became of each member's
//! replaced subvolume (adr/0027), one `replaced` line per member in the request's order:
//!
//! ```text
//! replaced @home @home.2026-12-03T080000.000000Z   (kept, read-only, under that name)
//! replaced @home -                                  (deleted: the disk was below the floor)
//! ```
//!
//! An outcome of an initrd from before replaced subvolumes were kept has no such lines (its
//! replaced subvolumes were deleted).
//!
//! `finished` identifies the outcome: the keeper reports each one once.

use std::fmt;
use std::time::SystemTime;

use serde::Serialize;

use crate::request::RestoreRequest;
use crate::snapshot_name::{parse_stamp, SnapshotName, Stamp};
use crate::subvolume::SubvolumeName;

/// Larger files are refused before they are parsed.
pub const MAX_OUTCOME_BYTES: usize = 2048;
const MAX_REASON_BYTES: usize = 600;
const MAGIC: &str = "tacid-restore-outcome 1";

/// Done, or refused (with the reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeResult {
    /// The subvolume was put back to the snapshot.
    Done,
    /// Nothing was changed; the reason says why.
    Refused,
}

/// One line of printable text (no control characters), at most 600 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Reason(String);

impl Reason {
    /// Any text made safe: control characters become '?', long text is cut (on a char boundary).
    pub fn new(text: &str) -> Self {
        let mut out = String::new();
        for c in text.chars() {
            let c = if c.is_control() { '?' } else { c };
            if out.len() + c.len_utf8() > MAX_REASON_BYTES {
                break;
            }
            out.push(c);
        }
        if out.is_empty() {
            out.push('-');
        }
        Reason(out)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What the initrd did with a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub result: OutcomeResult,
    /// When the initrd finished with the request (UTC, microseconds).
    #[serde(serialize_with = "serialize_time")]
    pub finished: SystemTime,
    /// The request, where it parsed.
    pub request: Option<RestoreRequest>,
    pub reason: Reason,
    /// What became of each member's replaced subvolume, in the request's order (a restore
    /// done by an initrd that keeps them); empty otherwise.
    pub replaced: Vec<Replaced>,
}

/// What a restore did with the subvolume it replaced (adr/0027).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Replaced {
    /// The member.
    pub subvolume: SubvolumeName,
    /// The read-only snapshot in the store that holds what the member held before the
    /// restore; `None` when it was deleted (the disk was below the hard floor at the boot).
    pub kept: Option<SnapshotName>,
}

impl fmt::Display for Replaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kept {
            Some(name) => write!(f, "{} {name}", self.subvolume),
            None => write!(f, "{} -", self.subvolume),
        }
    }
}

impl Replaced {
    fn parse(text: &str) -> Option<Replaced> {
        let (sub, kept) = text.split_once(' ')?;
        let subvolume = SubvolumeName::parse(sub).ok()?;
        let kept = match kept {
            "-" => None,
            name => {
                let name = SnapshotName::parse(name).ok()?;
                if name.subvolume() != subvolume {
                    return None;
                }
                Some(name)
            }
        };
        Some(Replaced { subvolume, kept })
    }
}

fn serialize_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    match Stamp::from_system_time(*t) {
        Ok(stamp) => s.collect_str(&stamp),
        Err(e) => Err(serde::ser::Error::custom(e)),
    }
}

/// Why an outcome file does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutcomeError {
    #[error("the outcome record is {0} bytes; at most {MAX_OUTCOME_BYTES}")]
    TooLarge(usize),
    #[error("the outcome record is not UTF-8 text")]
    NotText,
    #[error("the outcome record's line {0} is not what the format says")]
    Line(usize),
    #[error("the outcome record's request: {0}")]
    Request(#[from] crate::request::RequestError),
}

impl Outcome {
    /// An outcome finished at `finished` (truncated to microseconds).
    pub fn new(
        result: OutcomeResult,
        finished: SystemTime,
        request: Option<RestoreRequest>,
        reason: Reason,
    ) -> Self {
        let finished = Stamp::from_system_time(finished)
            .map(|s| s.to_system_time())
            .unwrap_or(std::time::UNIX_EPOCH);
        Outcome {
            result,
            finished,
            request,
            reason,
            replaced: Vec::new(),
        }
    }

    /// The same outcome, saying what became of each member's replaced subvolume.
    pub fn with_replaced(mut self, replaced: Vec<Replaced>) -> Self {
        self.replaced = replaced;
        self
    }

    /// The file's canonical content.
    pub fn render(&self) -> String {
        let result = match self.result {
            OutcomeResult::Done => "done",
            OutcomeResult::Refused => "refused",
        };
        let finished = Stamp::from_system_time(self.finished)
            .map(|s| s.to_string())
            .unwrap_or_else(|_| "1970-01-01T000000.000000Z".into());
        let request: String = match &self.request {
            Some(r) => r
                .members()
                .iter()
                .map(|m| format!("request {m}\n"))
                .collect(),
            None => "request -\n".into(),
        };
        let replaced: String = self
            .replaced
            .iter()
            .map(|r| format!("replaced {r}\n"))
            .collect();
        format!(
            "{MAGIC}\nresult {result}\nfinished {finished}\n{request}{replaced}reason {}\n",
            self.reason.0
        )
    }

    /// Parse a record; only the canonical form is accepted.
    pub fn parse(bytes: &[u8]) -> Result<Self, OutcomeError> {
        if bytes.len() > MAX_OUTCOME_BYTES {
            return Err(OutcomeError::TooLarge(bytes.len()));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| OutcomeError::NotText)?;
        let body = text.strip_suffix('\n').ok_or(OutcomeError::Line(5))?;
        let lines: Vec<&str> = body.split('\n').collect();
        let most = 4 + 2 * SubvolumeName::restorable().len();
        if !(5..=most).contains(&lines.len()) {
            return Err(OutcomeError::Line(lines.len().min(most) + 1));
        }
        let last = lines.len() - 1;
        if lines[0] != MAGIC {
            return Err(OutcomeError::Line(1));
        }
        let value = |i: usize, key: &str| {
            lines[i]
                .strip_prefix(key)
                .and_then(|v| v.strip_prefix(' '))
                .ok_or(OutcomeError::Line(i + 1))
        };
        let result = match value(1, "result")? {
            "done" => OutcomeResult::Done,
            "refused" => OutcomeResult::Refused,
            _ => return Err(OutcomeError::Line(2)),
        };
        let stamp = value(2, "finished")?;
        if stamp.len() != 25 {
            return Err(OutcomeError::Line(3));
        }
        let finished = Stamp(parse_stamp(stamp.as_bytes()).map_err(|_| OutcomeError::Line(3))?)
            .to_system_time();
        let request = match value(3, "request")? {
            "-" if last == 4 => None,
            "-" => return Err(OutcomeError::Line(4)),
            _ => {
                let mut text = String::new();
                for i in (3..last).take_while(|i| lines[*i].starts_with("request ")) {
                    text.push_str(value(i, "request")?);
                    text.push('\n');
                }
                Some(RestoreRequest::parse(text.as_bytes())?)
            }
        };
        let members = request.as_ref().map_or(1, |r| r.members().len());
        let mut replaced = Vec::new();
        for i in 3 + members..last {
            let r = Replaced::parse(value(i, "replaced")?).ok_or(OutcomeError::Line(i + 1))?;
            replaced.push(r);
        }
        // None (an initrd from before), or one per member, in the request's order.
        if !replaced.is_empty() {
            let subs = request
                .as_ref()
                .map(|r| r.members().iter().map(|m| m.subvolume()));
            let same = subs.is_some_and(|s| s.eq(replaced.iter().map(|r| r.subvolume)));
            if result != OutcomeResult::Done || !same {
                return Err(OutcomeError::Line(4 + members));
            }
        }
        if result == OutcomeResult::Done && request.is_none() {
            return Err(OutcomeError::Line(4));
        }
        let reason = value(last, "reason")?;
        let outcome = Outcome {
            result,
            finished,
            request,
            reason: Reason::new(reason),
            replaced,
        };
        if outcome.render().as_bytes() != bytes {
            return Err(OutcomeError::Line(last + 1));
        }
        Ok(outcome)
    }

    /// A stable identity for "report each outcome once": its finishing time.
    pub fn id(&self) -> String {
        Stamp::from_system_time(self.finished)
            .map(|s| s.to_string())
            .unwrap_or_default()
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{SnapshotName, SubvolumeName};
    use proptest::prelude::*;
    use std::time::{Duration, UNIX_EPOCH};
    use uuid::Uuid;

    fn req(micros: u64) -> RestoreRequest {
        let h = SubvolumeName::parse("@home").unwrap();
        let n = SnapshotName::new(h, UNIX_EPOCH + Duration::from_micros(micros)).unwrap();
        RestoreRequest::one(h, n, Uuid::from_u128(7)).unwrap()
    }

    #[test]
    fn documented_form() {
        let o = Outcome::new(
            OutcomeResult::Done,
            UNIX_EPOCH + Duration::from_secs(1_764_597_720),
            Some(req(1)),
            Reason::new("put @home back"),
        );
        assert_eq!(
            o.render(),
            "tacid-restore-outcome 1\nresult done\nfinished 2025-12-01T140200.000000Z\n\
             request @home @home.1970-01-01T000000.000001Z 00000000-0000-0000-0000-000000000007\n\
             reason put @home back\n"
        );
        assert_eq!(Outcome::parse(o.render().as_bytes()).unwrap(), o);
    }

    #[test]
    fn a_set_has_one_request_line_per_member() {
        let members = ["@persist", "@log", "@home"].map(|sub| {
            let sv = SubvolumeName::parse(sub).unwrap();
            let n = SnapshotName::new(sv, UNIX_EPOCH + Duration::from_secs(9)).unwrap();
            crate::RestoreMember::new(sv, n, Uuid::from_u128(9)).unwrap()
        });
        let o = Outcome::new(
            OutcomeResult::Done,
            UNIX_EPOCH + Duration::from_secs(1_764_597_720),
            Some(RestoreRequest::new(members).unwrap()),
            Reason::new(&"x".repeat(MAX_REASON_BYTES)),
        );
        let text = o.render();
        assert_eq!(
            text.lines().filter(|l| l.starts_with("request @")).count(),
            3
        );
        assert!(text.len() <= MAX_OUTCOME_BYTES, "{} bytes", text.len());
        assert_eq!(Outcome::parse(text.as_bytes()).unwrap(), o);
        // A "-" beside members, or a member line dropped out of order, is not the format.
        let dash = text.replacen("request @log", "request -\nrequest @log", 1);
        assert!(Outcome::parse(dash.as_bytes()).is_err());
    }

    #[test]
    fn a_done_set_says_what_became_of_each_replaced_member() {
        let members = ["@persist", "@log", "@home"].map(|sub| {
            let sv = SubvolumeName::parse(sub).unwrap();
            let n = SnapshotName::new(sv, UNIX_EPOCH + Duration::from_secs(9)).unwrap();
            crate::RestoreMember::new(sv, n, Uuid::from_u128(9)).unwrap()
        });
        let request = RestoreRequest::new(members).unwrap();
        let boot = UNIX_EPOCH + Duration::from_secs(1_764_597_720);
        let replaced: Vec<Replaced> = members
            .iter()
            .enumerate()
            .map(|(i, m)| Replaced {
                subvolume: m.subvolume(),
                kept: (i != 1).then(|| SnapshotName::new(m.subvolume(), boot).unwrap()),
            })
            .collect();
        let o = Outcome::new(
            OutcomeResult::Done,
            boot,
            Some(request),
            Reason::new(&"x".repeat(MAX_REASON_BYTES)),
        )
        .with_replaced(replaced);
        let text = o.render();
        assert!(
            text.contains(
                "replaced @persist @persist.2025-12-01T140200.000000Z\nreplaced @log -\n\
                 replaced @home @home.2025-12-01T140200.000000Z\nreason "
            ),
            "{text}"
        );
        assert!(text.len() <= MAX_OUTCOME_BYTES, "{} bytes", text.len());
        assert_eq!(Outcome::parse(text.as_bytes()).unwrap(), o);
        // Out of order, a name of another subvolume, one missing, or on a refusal: not the
        // format.
        for bad in [
            text.replacen("replaced @log -\n", "", 1),
            text.replacen(
                "replaced @log -",
                "replaced @log @home.2025-12-01T140200.000000Z",
                1,
            ),
            text.replacen("replaced @persist", "replaced @log", 1),
            text.replacen("result done", "result refused", 1),
        ] {
            assert!(Outcome::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn reasons_are_one_line() {
        let r = Reason::new("two\nlines\0and \u{7f}");
        assert_eq!(r.as_str(), "two?lines?and ?");
        assert!(Reason::new(&"é".repeat(1000)).as_str().len() <= MAX_REASON_BYTES);
        assert_eq!(Reason::new("").as_str(), "-");
    }

    #[test]
    fn refused_without_request_is_fine_done_without_is_not() {
        let o = Outcome::new(
            OutcomeResult::Refused,
            UNIX_EPOCH,
            None,
            Reason::new("empty"),
        );
        assert_eq!(Outcome::parse(o.render().as_bytes()).unwrap(), o);
        let bad = o.render().replace("refused", "done");
        assert!(Outcome::parse(bad.as_bytes()).is_err());
    }

    #[test]
    fn a_finish_before_1970_is_refused_not_wrapped() {
        let o = Outcome::new(
            OutcomeResult::Refused,
            UNIX_EPOCH + Duration::from_secs(1),
            None,
            Reason::new("x"),
        );
        let text = o.render();
        assert!(
            text.contains("finished 1970-01-01T000001.000000Z\n"),
            "{text}"
        );
        let before = text.replace("1970-01-01T000001", "1969-12-31T235959");
        assert_eq!(
            Outcome::parse(before.as_bytes()),
            Err(OutcomeError::Line(3))
        );
        // Late ones are exact, not wrapped past 2554.
        let late = text.replace("1970-01-01T000001", "9000-01-01T000000");
        let parsed = Outcome::parse(late.as_bytes()).unwrap();
        assert_eq!(
            parsed
                .finished
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            221_845_392_000
        );
        assert_eq!(parsed.render(), late);
    }

    proptest! {
        #[test]
        fn round_trip(done in any::<bool>(), secs in 0u64..4_000_000_000, micros in 0u64..4_000_000_000_000_000, reason in "\\PC{0,700}") {
            let result = if done { OutcomeResult::Done } else { OutcomeResult::Refused };
            let o = Outcome::new(result, UNIX_EPOCH + Duration::from_secs(secs), Some(req(micros)), Reason::new(&reason));
            prop_assert_eq!(Outcome::parse(o.render().as_bytes()).unwrap(), o);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
            if let Ok(o) = Outcome::parse(&bytes) {
                prop_assert_eq!(o.render().into_bytes(), bytes);
            }
        }
    }
}
