//! The staged restore request: `.restore` at the top of `@snapshots` (the initrd reaches it
//! as `@snapshots/.restore`, the running system as `/persist/.snapshots/.restore`).
//!
//! Grammar (one canonical form, nothing else is accepted):
//!
//! ```text
//! request   = 1*3member                     ; one line per member
//! member    = subvolume SP snapshot SP uuid LF
//! subvolume = a restorable name of the layout, e.g. "@home"
//! snapshot  = a canonical SnapshotName of that same subvolume
//! uuid      = the snapshot's Btrfs UUID, lowercase, hyphenated (8-4-4-4-12), not nil
//! ```
//!
//! A request names one member per line, at most one per restorable subvolume, in the order of
//! the layout's table ([`crate::SUBVOLUMES`]: `@persist`, `@log`, `@home`), which is also the
//! order the initrd exchanges them in. A request of one line is exactly the request of
//! before sets existed. The members of a set restore are the snapshots of one set, but the
//! grammar does not ask it: any members the keeper staged are put back together, in one
//! boot, or none is (adr/0005).
//!
//! At most [`MAX_REQUEST_BYTES`]. The initrd reads it as untrusted input: every way it can
//! be wrong has its own [`RequestError`], which is what the outcome records as the reason;
//! one bad line refuses the whole request.

use std::fmt;

use serde::Serialize;
use uuid::Uuid;

use crate::snapshot_name::{SnapshotName, SnapshotNameError};
use crate::subvolume::{SubvolumeName, SubvolumeNameError, SUBVOLUMES};

/// Larger files are refused before they are parsed (a canonical line is about 110 bytes, and
/// there are at most three).
pub const MAX_REQUEST_BYTES: usize = 512;

/// One line of a request: put `subvolume` back to `snapshot`, whose UUID is `uuid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RestoreMember {
    subvolume: SubvolumeName,
    snapshot: SnapshotName,
    uuid: Uuid,
}

/// A well-formed restore request: every member put back together, at one boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct RestoreRequest {
    /// Never empty; distinct subvolumes in the layout's order.
    members: Vec<RestoreMember>,
}

/// Every way a request can be wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("the request is empty")]
    Empty,
    #[error("the request is {0} bytes; at most {MAX_REQUEST_BYTES} are accepted")]
    TooLarge(usize),
    #[error("the request is not text (byte {0:#04x} at offset {1})")]
    NotText(u8, usize),
    #[error("the request has a carriage return; lines end with a single LF")]
    CarriageReturn,
    #[error("the request does not end with a newline")]
    MissingNewline,
    #[error("the request has an empty line")]
    EmptyLine,
    #[error("the request has {0} lines; at most one per restorable subvolume ({list})", list = SubvolumeName::restorable_list())]
    TooManyLines(usize),
    #[error("line {line}: {error}")]
    Line {
        line: usize,
        error: Box<RequestError>,
    },
    #[error(
        "the request must be three fields separated by single spaces: subvolume, snapshot, UUID"
    )]
    Fields,
    #[error("the subvolume: {0}")]
    Subvolume(#[from] SubvolumeNameError),
    #[error("{0} is not restorable (restorable: {list})", list = SubvolumeName::restorable_list())]
    NotRestorable(SubvolumeName),
    #[error("the snapshot name: {0}")]
    Snapshot(#[from] SnapshotNameError),
    #[error("snapshot {snapshot} is of {}, not of {subvolume}", snapshot.subvolume())]
    SnapshotOfOther {
        subvolume: SubvolumeName,
        snapshot: SnapshotName,
    },
    #[error("the UUID must be lowercase and hyphenated (8-4-4-4-12 hex digits), and not nil")]
    Uuid,
    #[error("{0} is named twice; a request puts each subvolume back at most once")]
    Twice(SubvolumeName),
    #[error("{later} comes before {earlier}; members are in the layout's order ({list})", list = SubvolumeName::restorable_list())]
    Order {
        earlier: SubvolumeName,
        later: SubvolumeName,
    },
}

impl RestoreMember {
    /// Put `subvolume` back to `snapshot` (whose Btrfs UUID is `uuid`).
    pub fn new(
        subvolume: SubvolumeName,
        snapshot: SnapshotName,
        uuid: Uuid,
    ) -> Result<Self, RequestError> {
        if !subvolume.subvolume().restorable {
            return Err(RequestError::NotRestorable(subvolume));
        }
        if snapshot.subvolume() != subvolume {
            return Err(RequestError::SnapshotOfOther {
                subvolume,
                snapshot,
            });
        }
        if uuid.is_nil() {
            return Err(RequestError::Uuid);
        }
        Ok(RestoreMember {
            subvolume,
            snapshot,
            uuid,
        })
    }

    /// One line's text, without its newline.
    fn parse_line(text: &str) -> Result<Self, RequestError> {
        let fields: Vec<&str> = text.split(' ').collect();
        let [subvolume, snapshot, uuid] = fields[..] else {
            return Err(RequestError::Fields);
        };
        if subvolume.is_empty() || snapshot.is_empty() || uuid.is_empty() {
            return Err(RequestError::Fields);
        }
        let subvolume = SubvolumeName::parse(subvolume)?;
        let snapshot = SnapshotName::parse(snapshot)?;
        let uuid = parse_uuid(uuid)?;
        RestoreMember::new(subvolume, snapshot, uuid)
    }

    /// The subvolume to put back.
    pub fn subvolume(&self) -> SubvolumeName {
        self.subvolume
    }

    /// The snapshot to put it back to.
    pub fn snapshot(&self) -> SnapshotName {
        self.snapshot
    }

    /// The Btrfs UUID the snapshot had when the request was staged.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }
}

/// Where a subvolume stands in the layout's table: the order members are written and
/// exchanged in.
fn layout_rank(subvolume: SubvolumeName) -> usize {
    SUBVOLUMES
        .iter()
        .position(|row| row.name == subvolume.as_str())
        .expect("a SubvolumeName is only built from the table")
}

impl RestoreRequest {
    /// A request of these members (in any order; they are put in the layout's order).
    /// Refused when empty or when a subvolume is named twice.
    pub fn new(members: impl IntoIterator<Item = RestoreMember>) -> Result<Self, RequestError> {
        let mut members: Vec<RestoreMember> = members.into_iter().collect();
        members.sort_by_key(|m| layout_rank(m.subvolume));
        if members.is_empty() {
            return Err(RequestError::Empty);
        }
        if let Some(pair) = members
            .windows(2)
            .find(|w| w[0].subvolume == w[1].subvolume)
        {
            return Err(RequestError::Twice(pair[0].subvolume));
        }
        Ok(RestoreRequest { members })
    }

    /// A request of one member: put `subvolume` back to `snapshot` (whose Btrfs UUID is
    /// `uuid`).
    pub fn one(
        subvolume: SubvolumeName,
        snapshot: SnapshotName,
        uuid: Uuid,
    ) -> Result<Self, RequestError> {
        Ok(RestoreRequest {
            members: vec![RestoreMember::new(subvolume, snapshot, uuid)?],
        })
    }

    /// Parse a request file's whole content.
    pub fn parse(bytes: &[u8]) -> Result<Self, RequestError> {
        if bytes.is_empty() {
            return Err(RequestError::Empty);
        }
        if bytes.len() > MAX_REQUEST_BYTES {
            return Err(RequestError::TooLarge(bytes.len()));
        }
        if bytes.contains(&b'\r') {
            return Err(RequestError::CarriageReturn);
        }
        let body = bytes
            .strip_suffix(b"\n")
            .ok_or(RequestError::MissingNewline)?;
        if let Some((i, &b)) = body
            .iter()
            .enumerate()
            .find(|(_, &b)| !(b' '..=b'~').contains(&b) && b != b'\n')
        {
            return Err(RequestError::NotText(b, i));
        }
        let text = std::str::from_utf8(body).expect("printable ASCII is UTF-8");
        let lines: Vec<&str> = text.split('\n').collect();
        if lines.iter().any(|l| l.is_empty()) {
            return Err(RequestError::EmptyLine);
        }
        let most = SubvolumeName::restorable().len();
        if lines.len() > most {
            return Err(RequestError::TooManyLines(lines.len()));
        }
        let several = lines.len() > 1;
        let mut members: Vec<RestoreMember> = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            // One line reads as it always did; in a set, the line says where it went wrong.
            let at = |error: RequestError| {
                if several {
                    RequestError::Line {
                        line: i + 1,
                        error: Box::new(error),
                    }
                } else {
                    error
                }
            };
            let member = RestoreMember::parse_line(line).map_err(at)?;
            if let Some(earlier) = members.last() {
                let (e, l) = (earlier.subvolume, member.subvolume);
                if e == l {
                    return Err(at(RequestError::Twice(l)));
                }
                if layout_rank(l) < layout_rank(e) {
                    return Err(at(RequestError::Order {
                        earlier: e,
                        later: l,
                    }));
                }
            }
            members.push(member);
        }
        let request = RestoreRequest { members };
        debug_assert_eq!(request.render().as_bytes(), bytes);
        Ok(request)
    }

    /// The file's canonical content: one line per member, each with its newline.
    pub fn render(&self) -> String {
        self.members.iter().map(|m| format!("{m}\n")).collect()
    }

    /// The members, in the layout's order (the order the initrd exchanges them in).
    pub fn members(&self) -> &[RestoreMember] {
        &self.members
    }

    /// The member that puts `subvolume` back, if any.
    pub fn member(&self, subvolume: SubvolumeName) -> Option<&RestoreMember> {
        self.members.iter().find(|m| m.subvolume == subvolume)
    }

    /// The subvolumes it puts back, for people: "@persist, @home".
    pub fn subvolumes(&self) -> String {
        self.members
            .iter()
            .map(|m| m.subvolume.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl From<RestoreMember> for RestoreRequest {
    fn from(member: RestoreMember) -> Self {
        RestoreRequest {
            members: vec![member],
        }
    }
}

/// Strict: exactly the lowercase hyphenated form the renderer writes.
pub(crate) fn parse_uuid(s: &str) -> Result<Uuid, RequestError> {
    let canonical_shape = s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        });
    if !canonical_shape {
        return Err(RequestError::Uuid);
    }
    let uuid = Uuid::try_parse(s).map_err(|_| RequestError::Uuid)?;
    if uuid.is_nil() {
        return Err(RequestError::Uuid);
    }
    Ok(uuid)
}

impl fmt::Display for RestoreMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.subvolume,
            self.snapshot,
            self.uuid.hyphenated()
        )
    }
}

/// The members, separated by "; " (for logs and messages; the file has one per line).
impl fmt::Display for RestoreRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, m) in self.members.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{m}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, UNIX_EPOCH};

    const GOOD: &str =
        "@home @home.2025-12-01T140200.123456Z 0b7c0f3e-9f4a-4e8e-8a55-3c1d2f6b9a01\n";

    fn request(sub: &str, micros: u64, uuid: u128) -> RestoreRequest {
        let sv = SubvolumeName::parse(sub).unwrap();
        let name = SnapshotName::new(sv, UNIX_EPOCH + Duration::from_micros(micros)).unwrap();
        RestoreRequest::one(sv, name, Uuid::from_u128(uuid)).unwrap()
    }

    #[test]
    fn the_documented_example_parses() {
        let r = RestoreRequest::parse(GOOD.as_bytes()).unwrap();
        assert_eq!(r.members().len(), 1);
        assert_eq!(r.members()[0].subvolume().as_str(), "@home");
        assert_eq!(r.render(), GOOD);
    }

    #[test]
    fn every_bad_shape_has_its_reason() {
        use RequestError as E;
        let u = "0b7c0f3e-9f4a-4e8e-8a55-3c1d2f6b9a01";
        let s = "@home.2025-12-01T140200.123456Z";
        type Expected = fn(&RequestError) -> bool;
        let cases: Vec<(Vec<u8>, Expected)> = vec![
            (b"".to_vec(), |e| *e == E::Empty),
            (vec![b'a'; 1 << 20], |e| matches!(e, E::TooLarge(_))),
            (GOOD.replace('\n', "\r\n").into_bytes(), |e| {
                *e == E::CarriageReturn
            }),
            (GOOD.trim_end().as_bytes().to_vec(), |e| {
                *e == E::MissingNewline
            }),
            (
                format!("{GOOD}{GOOD}").into_bytes(),
                |e| matches!(e, E::Line { line: 2, error } if matches!(**error, E::Twice(_))),
            ),
            (format!("{GOOD}\n").into_bytes(), |e| *e == E::EmptyLine),
            (format!("\n{GOOD}").into_bytes(), |e| *e == E::EmptyLine),
            (GOOD.replacen(' ', "\0", 1).into_bytes(), |e| {
                matches!(e, E::NotText(0, 5))
            }),
            (GOOD.replacen(' ', "\t", 1).into_bytes(), |e| {
                matches!(e, E::NotText(b'\t', _))
            }),
            (b"\xff\xfe\n".to_vec(), |e| matches!(e, E::NotText(0xff, 0))),
            (GOOD.replacen(' ', "  ", 1).into_bytes(), |e| {
                *e == E::Fields
            }),
            (format!(" {GOOD}").into_bytes(), |e| *e == E::Fields),
            (format!("@home {s}\n").into_bytes(), |e| *e == E::Fields),
            (format!("@home {s} {u} extra\n").into_bytes(), |e| {
                *e == E::Fields
            }),
            (format!("@nope {s} {u}\n").into_bytes(), |e| {
                matches!(e, E::Subvolume(_))
            }),
            (format!("/home {s} {u}\n").into_bytes(), |e| {
                matches!(e, E::Subvolume(_))
            }),
            (format!("../@home {s} {u}\n").into_bytes(), |e| {
                matches!(e, E::Subvolume(_))
            }),
            (
                format!("@nix @nix.2025-12-01T140200.123456Z {u}\n").into_bytes(),
                |e| matches!(e, E::NotRestorable(_)),
            ),
            (format!("@root {s} {u}\n").into_bytes(), |e| {
                matches!(e, E::NotRestorable(_))
            }),
            (format!("@snapshots {s} {u}\n").into_bytes(), |e| {
                matches!(e, E::NotRestorable(_))
            }),
            (format!("@home ../{s} {u}\n").into_bytes(), |e| {
                matches!(e, E::Snapshot(_))
            }),
            (format!("@home {s}/.. {u}\n").into_bytes(), |e| {
                matches!(e, E::Snapshot(_))
            }),
            (
                format!("@home @log.2025-12-01T140200.123456Z {u}\n").into_bytes(),
                |e| matches!(e, E::SnapshotOfOther { .. }),
            ),
            (
                format!("@home {s} {}\n", u.to_uppercase()).into_bytes(),
                |e| *e == E::Uuid,
            ),
            (
                format!("@home {s} {}\n", u.replace('-', "")).into_bytes(),
                |e| *e == E::Uuid,
            ),
            (format!("@home {s} {{{u}}}\n").into_bytes(), |e| {
                *e == E::Uuid
            }),
            (
                format!("@home {s} 00000000-0000-0000-0000-000000000000\n").into_bytes(),
                |e| *e == E::Uuid,
            ),
        ];
        for (input, expected) in cases {
            let err = RestoreRequest::parse(&input).expect_err(&String::from_utf8_lossy(&input));
            assert!(
                expected(&err),
                "{:?} gave {err:?}",
                String::from_utf8_lossy(&input)
            );
            assert!(!err.to_string().is_empty());
        }
    }

    fn set(micros: u64) -> RestoreRequest {
        let members = ["@home", "@persist", "@log"].map(|sub| {
            let sv = SubvolumeName::parse(sub).unwrap();
            let name = SnapshotName::new(sv, UNIX_EPOCH + Duration::from_micros(micros)).unwrap();
            RestoreMember::new(sv, name, Uuid::from_u128(micros as u128 + 1)).unwrap()
        });
        RestoreRequest::new(members).unwrap()
    }

    #[test]
    fn a_set_is_one_line_per_member_in_the_layouts_order() {
        let r = set(1);
        let order: Vec<&str> = r.members().iter().map(|m| m.subvolume().as_str()).collect();
        assert_eq!(order, ["@persist", "@log", "@home"]);
        let text = r.render();
        assert_eq!(text.lines().count(), 3);
        assert!(text.len() <= MAX_REQUEST_BYTES, "{} bytes", text.len());
        assert_eq!(RestoreRequest::parse(text.as_bytes()).unwrap(), r);
        assert_eq!(r.subvolumes(), "@persist, @log, @home");
    }

    #[test]
    fn one_bad_line_refuses_the_whole_set_and_says_which() {
        use RequestError as E;
        let text = set(1).render();
        let lines: Vec<&str> = text.lines().collect();
        let swapped = format!("{}\n{}\n{}\n", lines[1], lines[0], lines[2]);
        assert!(matches!(
            RestoreRequest::parse(swapped.as_bytes()),
            Err(E::Line { line: 2, ref error }) if matches!(**error, E::Order { .. })
        ));
        let broken = text.replacen("@log ", "@lag ", 1);
        let err = RestoreRequest::parse(broken.as_bytes()).unwrap_err();
        assert!(
            matches!(err, E::Line { line: 2, ref error } if matches!(**error, E::Subvolume(_))),
            "{err:?}"
        );
        assert!(err.to_string().starts_with("line 2: "), "{err}");
        let four = format!("{text}{}\n", lines[0]);
        assert_eq!(
            RestoreRequest::parse(four.as_bytes()),
            Err(E::TooManyLines(4))
        );
        assert_eq!(RestoreRequest::new([]), Err(E::Empty));
        let m = set(1).members()[0];
        assert_eq!(RestoreRequest::new([m, m]), Err(E::Twice(m.subvolume())));
    }

    proptest! {
        #[test]
        fn parse_render_round_trip(s in 0usize..3, micros in 0u64..4_000_000_000_000_000, uuid in 1u128..) {
            let subs = ["@home", "@log", "@persist"];
            let r = request(subs[s], micros, uuid);
            prop_assert_eq!(RestoreRequest::parse(r.render().as_bytes()).unwrap(), r);
        }

        #[test]
        fn only_the_canonical_form_parses(s in 0usize..3, micros in 0u64..4_000_000_000_000_000, uuid in 1u128.., pos in 0usize..200, byte in any::<u8>(), cut in any::<bool>()) {
            let subs = ["@home", "@log", "@persist"];
            let r = request(subs[s], micros, uuid);
            let mut bytes = r.render().into_bytes();
            let pos = pos % bytes.len();
            if cut { bytes.insert(pos, byte) } else { prop_assume!(bytes[pos] != byte); bytes[pos] = byte; }
            // Whatever parses must be canonical: its own rendering, byte for byte.
            if let Ok(other) = RestoreRequest::parse(&bytes) {
                prop_assert_eq!(other.render().into_bytes(), bytes);
                prop_assert_ne!(other, r);
            }
        }

        #[test]
        fn sets_round_trip_and_only_their_canonical_form_parses(micros in 0u64..4_000_000_000_000_000, keep in 1u8..8, pos in 0usize..400, byte in any::<u8>()) {
            let all = set(micros);
            let members = all.members().iter().enumerate().filter(|(i, _)| keep & (1 << i) != 0).map(|(_, m)| *m);
            let r = RestoreRequest::new(members).unwrap();
            prop_assert_eq!(RestoreRequest::parse(r.render().as_bytes()).unwrap(), r.clone());
            let mut bytes = r.render().into_bytes();
            let pos = pos % bytes.len();
            prop_assume!(bytes[pos] != byte);
            bytes[pos] = byte;
            if let Ok(other) = RestoreRequest::parse(&bytes) {
                prop_assert_eq!(other.render().into_bytes(), bytes);
                prop_assert_ne!(other, r);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(r) = RestoreRequest::parse(&bytes) {
                prop_assert_eq!(r.render().into_bytes(), bytes);
            }
        }
    }
}
