//! The staged restore request: `.restore` at the top of `@snapshots` (the initrd reaches it
//! as `@snapshots/.restore`, the running system as `/persist/.snapshots/.restore`).
//!
//! Grammar (one canonical form, nothing else is accepted):
//!
//! ```text
//! request   = subvolume SP snapshot SP uuid LF
//! subvolume = a restorable name of the layout, e.g. "@home"
//! snapshot  = a canonical SnapshotName of that same subvolume
//! uuid      = the snapshot's Btrfs UUID, lowercase, hyphenated (8-4-4-4-12), not nil
//! ```
//!
//! At most [`MAX_REQUEST_BYTES`]. The initrd reads it as untrusted input: every way it can
//! be wrong has its own [`RequestError`], which is what the outcome records as the reason.

use std::fmt;

use serde::Serialize;
use uuid::Uuid;

use crate::snapshot_name::{SnapshotName, SnapshotNameError};
use crate::subvolume::{SubvolumeName, SubvolumeNameError};

/// Larger files are refused before they are parsed (the canonical form is about 110 bytes).
pub const MAX_REQUEST_BYTES: usize = 256;

/// A well-formed restore request: put `subvolume` back to `snapshot`, whose UUID is `uuid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RestoreRequest {
    subvolume: SubvolumeName,
    snapshot: SnapshotName,
    uuid: Uuid,
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
    #[error("the request has more than one line")]
    ExtraLines,
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
}

impl RestoreRequest {
    /// A request to put `subvolume` back to `snapshot` (whose Btrfs UUID is `uuid`).
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
        Ok(RestoreRequest {
            subvolume,
            snapshot,
            uuid,
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
        if body.contains(&b'\n') {
            return Err(RequestError::ExtraLines);
        }
        if let Some((i, &b)) = body
            .iter()
            .enumerate()
            .find(|(_, &b)| !(b' '..=b'~').contains(&b))
        {
            return Err(RequestError::NotText(b, i));
        }
        let text = std::str::from_utf8(body).expect("printable ASCII is UTF-8");
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
        let request = RestoreRequest::new(subvolume, snapshot, uuid)?;
        debug_assert_eq!(request.render().as_bytes(), bytes);
        Ok(request)
    }

    /// The file's canonical content, newline included.
    pub fn render(&self) -> String {
        format!(
            "{} {} {}\n",
            self.subvolume,
            self.snapshot,
            self.uuid.hyphenated()
        )
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

impl fmt::Display for RestoreRequest {
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
        RestoreRequest::new(sv, name, Uuid::from_u128(uuid)).unwrap()
    }

    #[test]
    fn the_documented_example_parses() {
        let r = RestoreRequest::parse(GOOD.as_bytes()).unwrap();
        assert_eq!(r.subvolume().as_str(), "@home");
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
            (format!("{GOOD}{GOOD}").into_bytes(), |e| {
                *e == E::ExtraLines
            }),
            (format!("{GOOD}\n").into_bytes(), |e| *e == E::ExtraLines),
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
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(r) = RestoreRequest::parse(&bytes) {
                prop_assert_eq!(r.render().into_bytes(), bytes);
            }
        }
    }
}
