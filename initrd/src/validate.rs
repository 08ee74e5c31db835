//! Checking a staged request, which is untrusted input: a file on a disk, at boot.
//!
//! Pure functions over what the disk reported, so every refusal is tested without a disk.

use std::fmt;

use btrfs::FileKind;
use layout::origin::{origin_of, Ancestry, LiveSubvolume, StoredSnapshot};
use layout::{
    RequestError, RestoreMember, RestoreRequest, SnapshotName, SubvolumeName, MAX_REQUEST_BYTES,
};
use uuid::Uuid;

use crate::disk::{FileFacts, ReadFailure, RequestFile, SnapshotFacts};
use crate::machine::Subvol;

/// Why a request is refused. The text is what the outcome record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestRefusal {
    NotARegularFile(FileKind),
    NotOwnedByRoot(u32),
    WritableByOthers(u32),
    Unreadable(String),
    Malformed(RequestError),
    SnapshotMissing(SnapshotName),
    SnapshotNotADirectory(SnapshotName, FileKind),
    SnapshotNotASubvolume(SnapshotName),
    SnapshotWritable(SnapshotName),
    UuidMismatch {
        snapshot: SnapshotName,
        requested: Uuid,
        found: Uuid,
    },
    OfAnotherSubvolume {
        snapshot: SnapshotName,
        by_parent: SubvolumeName,
    },
    LiveMissing(SubvolumeName),
    /// Members of a set were found exchanged while `member` had no copy of its snapshot to
    /// exchange (or its live subvolume was missing); they were exchanged back.
    HalfExchanged {
        exchanged: Vec<SubvolumeName>,
        member: SubvolumeName,
        live_missing: bool,
    },
}

fn kind_words(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Directory => "a directory",
        FileKind::Regular => "a regular file",
        FileKind::Symlink => "a symlink",
        FileKind::Fifo => "a fifo",
        FileKind::Other => "a special file (socket or device)",
    }
}

impl fmt::Display for RequestRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestRefusal::NotARegularFile(kind) => write!(
                f,
                "the request is {}, not a regular file; only a regular file written by the stem is read",
                kind_words(*kind)
            ),
            RequestRefusal::NotOwnedByRoot(uid) => write!(
                f,
                "the request file is owned by uid {uid}, not by root; only the stem (root) stages restores"
            ),
            RequestRefusal::WritableByOthers(mode) => write!(
                f,
                "the request file has mode {mode:04o}; a request writable by group or others is not trusted"
            ),
            RequestRefusal::Unreadable(e) => write!(f, "the request file could not be read: {e}"),
            RequestRefusal::Malformed(e) => write!(f, "the request is malformed: {e}"),
            RequestRefusal::SnapshotMissing(s) => write!(f, "there is no snapshot {s} in the store"),
            RequestRefusal::SnapshotNotADirectory(s, kind) => {
                write!(f, "{s} in the store is {}, not a snapshot", kind_words(*kind))
            }
            RequestRefusal::SnapshotNotASubvolume(s) => {
                write!(f, "{s} in the store is a plain directory, not a snapshot")
            }
            RequestRefusal::SnapshotWritable(s) => {
                write!(f, "{s} is writable; only read-only snapshots are restored")
            }
            RequestRefusal::UuidMismatch { snapshot, requested, found } => write!(
                f,
                "{snapshot} has UUID {found}, not the {requested} the request names; it is not the snapshot that was chosen"
            ),
            RequestRefusal::OfAnotherSubvolume { snapshot, by_parent } => write!(
                f,
                "{snapshot} is named for {} but its parent UUID says it is a snapshot of {by_parent}",
                snapshot.subvolume()
            ),
            RequestRefusal::LiveMissing(s) => write!(
                f,
                "the live subvolume {s} is missing; nothing is swapped until somebody looks"
            ),
            RequestRefusal::HalfExchanged {
                exchanged,
                member,
                live_missing,
            } => {
                let names = exchanged
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                let what = if *live_missing {
                    format!("the live subvolume {member} is missing")
                } else {
                    format!("{member} has no copy of its snapshot")
                };
                write!(
                    f,
                    "{names} had been exchanged while {what}, which tacid-initrd never leaves \
                     (something else changed the disk); {names} exchanged back, so no member \
                     of the set is put back"
                )
            }
        }
    }
}

/// The request file's verdict: `None` when no request is staged.
pub fn judge_request_file(file: &RequestFile) -> Option<Result<RestoreRequest, RequestRefusal>> {
    let RequestFile::Present { facts, bytes } = file else {
        return None;
    };
    Some(judge_present(facts, bytes))
}

fn judge_present(
    facts: &FileFacts,
    bytes: &Result<Vec<u8>, ReadFailure>,
) -> Result<RestoreRequest, RequestRefusal> {
    if facts.kind != FileKind::Regular {
        return Err(RequestRefusal::NotARegularFile(facts.kind));
    }
    if facts.uid != 0 {
        return Err(RequestRefusal::NotOwnedByRoot(facts.uid));
    }
    if facts.mode & 0o022 != 0 {
        return Err(RequestRefusal::WritableByOthers(facts.mode));
    }
    let bytes = match bytes {
        Ok(bytes) => bytes,
        Err(ReadFailure::TooLarge(size)) => {
            let size = usize::try_from(*size).unwrap_or(usize::MAX);
            return Err(RequestRefusal::Malformed(RequestError::TooLarge(size)));
        }
        Err(ReadFailure::NotRegular) => return Err(RequestRefusal::NotARegularFile(facts.kind)),
        Err(ReadFailure::Io(e)) => return Err(RequestRefusal::Unreadable(e.clone())),
    };
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(RequestRefusal::Malformed(RequestError::TooLarge(
            bytes.len(),
        )));
    }
    RestoreRequest::parse(bytes).map_err(RequestRefusal::Malformed)
}

/// Check the snapshot one member of a well-formed request names against the disk: it exists
/// in the store, is a read-only subvolume, has the member's UUID, and its parent UUID does not
/// say it is of another subvolume (`layout::origin`, the rule the stem lists and stages by).
///
/// `lives` are the live subvolumes of the layout, `store` every subvolume in the store.
pub fn check_snapshot(
    member: &RestoreMember,
    facts: SnapshotFacts,
    lives: &[LiveSubvolume],
    store: &[(String, Subvol)],
) -> Result<(), RequestRefusal> {
    let name = member.snapshot();
    let snapshot = match facts {
        SnapshotFacts::Missing => return Err(RequestRefusal::SnapshotMissing(name)),
        SnapshotFacts::NotADirectory(kind) => {
            return Err(RequestRefusal::SnapshotNotADirectory(name, kind))
        }
        SnapshotFacts::NotASubvolume => return Err(RequestRefusal::SnapshotNotASubvolume(name)),
        SnapshotFacts::Subvolume(s) => s,
    };
    if !snapshot.readonly {
        return Err(RequestRefusal::SnapshotWritable(name));
    }
    if snapshot.uuid != member.uuid() {
        return Err(RequestRefusal::UuidMismatch {
            snapshot: name,
            requested: member.uuid(),
            found: snapshot.uuid,
        });
    }
    if !lives.iter().any(|l| l.name == member.subvolume()) {
        return Err(RequestRefusal::LiveMissing(member.subvolume()));
    }
    let stored: Vec<StoredSnapshot> = store
        .iter()
        .filter_map(|(n, s)| {
            Some(StoredSnapshot {
                name: SnapshotName::parse(n).ok()?,
                uuid: s.uuid,
                parent_uuid: s.parent_uuid,
            })
        })
        .collect();
    let this = StoredSnapshot {
        name,
        uuid: snapshot.uuid,
        parent_uuid: snapshot.parent_uuid,
    };
    match origin_of(&this, lives, &stored) {
        Ancestry::Of(of, _) if of == member.subvolume() => Ok(()),
        Ancestry::Of(of, _) => Err(RequestRefusal::OfAnotherSubvolume {
            snapshot: name,
            by_parent: of,
        }),
        Ancestry::Contradicts { by_parent, .. } => Err(RequestRefusal::OfAnotherSubvolume {
            snapshot: name,
            by_parent,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is how a test reports
mod tests {
    use super::*;

    fn facts(kind: FileKind, uid: u32, mode: u32) -> FileFacts {
        FileFacts {
            kind,
            uid,
            mode,
            size: 10,
        }
    }

    fn req() -> RestoreRequest {
        RestoreRequest::parse(
            b"@home @home.2025-12-01T140200.123456Z 0b7c0f3e-9f4a-4e8e-8a55-3c1d2f6b9a01\n",
        )
        .unwrap()
    }

    #[test]
    fn a_half_exchanged_set_says_what_was_exchanged_back() {
        let sub = |s| SubvolumeName::parse(s).unwrap();
        let r = RequestRefusal::HalfExchanged {
            exchanged: vec![sub("@persist"), sub("@log")],
            member: sub("@home"),
            live_missing: false,
        };
        let text = r.to_string();
        assert!(
            text.starts_with("@persist, @log had been exchanged while @home has no copy"),
            "{text}"
        );
        assert!(text.contains("@persist, @log exchanged back"), "{text}");
    }

    #[test]
    fn file_shapes_are_refused_with_their_reason() {
        let good = req().render().into_bytes();
        let present = |f, b| RequestFile::Present { facts: f, bytes: b };
        assert_eq!(judge_request_file(&RequestFile::Absent), None);
        let cases = [
            (
                present(
                    facts(FileKind::Symlink, 0, 0o777),
                    Err(ReadFailure::NotRegular),
                ),
                "a symlink",
            ),
            (
                present(
                    facts(FileKind::Fifo, 0, 0o600),
                    Err(ReadFailure::NotRegular),
                ),
                "a fifo",
            ),
            (
                present(
                    facts(FileKind::Directory, 0, 0o700),
                    Err(ReadFailure::NotRegular),
                ),
                "a directory",
            ),
            (
                present(facts(FileKind::Regular, 1000, 0o600), Ok(good.clone())),
                "uid 1000",
            ),
            (
                present(facts(FileKind::Regular, 0, 0o666), Ok(good.clone())),
                "mode 0666",
            ),
            (
                present(
                    facts(FileKind::Regular, 0, 0o600),
                    Err(ReadFailure::TooLarge(1 << 20)),
                ),
                "1048576 bytes",
            ),
            (
                present(
                    facts(FileKind::Regular, 0, 0o600),
                    Err(ReadFailure::Io("EIO".into())),
                ),
                "could not be read",
            ),
            (
                present(facts(FileKind::Regular, 0, 0o600), Ok(b"\n".to_vec())),
                "malformed",
            ),
        ];
        for (file, words) in cases {
            let refusal = judge_request_file(&file).unwrap().unwrap_err();
            assert!(
                refusal.to_string().contains(words),
                "{refusal} lacks {words:?}"
            );
        }
        let ok = present(facts(FileKind::Regular, 0, 0o600), Ok(good));
        assert_eq!(judge_request_file(&ok), Some(Ok(req())));
    }

    #[test]
    fn snapshot_checks() {
        let r = req().members()[0];
        let home = SubvolumeName::parse("@home").unwrap();
        let log = SubvolumeName::parse("@log").unwrap();
        let lives = [
            LiveSubvolume {
                name: home,
                uuid: Uuid::from_u128(1),
                parent_uuid: None,
            },
            LiveSubvolume {
                name: log,
                uuid: Uuid::from_u128(2),
                parent_uuid: None,
            },
        ];
        let snap = |uuid: Uuid, parent: u128, readonly| Subvol {
            id: 300,
            uuid,
            parent_uuid: Some(Uuid::from_u128(parent)),
            readonly,
            generation: 1,
            created_generation: 1,
        };
        let good = snap(r.uuid(), 1, true);
        assert_eq!(
            check_snapshot(&r, SnapshotFacts::Subvolume(good), &lives, &[]),
            Ok(())
        );
        let refused = |facts| check_snapshot(&r, facts, &lives, &[]).unwrap_err();
        assert!(matches!(
            refused(SnapshotFacts::Missing),
            RequestRefusal::SnapshotMissing(_)
        ));
        assert!(matches!(
            refused(SnapshotFacts::NotADirectory(FileKind::Symlink)),
            RequestRefusal::SnapshotNotADirectory(_, FileKind::Symlink)
        ));
        assert!(matches!(
            refused(SnapshotFacts::NotASubvolume),
            RequestRefusal::SnapshotNotASubvolume(_)
        ));
        assert!(matches!(
            refused(SnapshotFacts::Subvolume(snap(r.uuid(), 1, false))),
            RequestRefusal::SnapshotWritable(_)
        ));
        assert!(matches!(
            refused(SnapshotFacts::Subvolume(snap(Uuid::from_u128(5), 1, true))),
            RequestRefusal::UuidMismatch { .. }
        ));
        assert_eq!(
            refused(SnapshotFacts::Subvolume(snap(r.uuid(), 2, true))),
            RequestRefusal::OfAnotherSubvolume {
                snapshot: r.snapshot(),
                by_parent: log
            }
        );
        // A parent nobody knows any more (replaced by an earlier restore): known by name.
        let orphan = snap(r.uuid(), 77, true);
        assert_eq!(
            check_snapshot(&r, SnapshotFacts::Subvolume(orphan), &lives, &[]),
            Ok(())
        );
        assert_eq!(
            check_snapshot(&r, SnapshotFacts::Subvolume(good), &lives[1..], &[]),
            Err(RequestRefusal::LiveMissing(home))
        );
    }
}
