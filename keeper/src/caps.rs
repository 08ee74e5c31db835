//! How long a string a caller sends may be (adr/0016).
//!
//! Anybody on the machine can call the keeper, with strings of any length the bus carries
//! (tens of MiB). Every such string is checked against its cap before it is parsed,
//! journalled, logged or echoed in an error; what goes into the journal or a log beyond a
//! cap is cut, and says how long it was.

use std::borrow::Cow;

use layout::SnapshotName;

use crate::wire::KeeperError;

/// A name (of a snapshot, a subvolume or a mount point): at most a snapshot name's length,
/// which is longer than every name of the layout.
pub const MAX_NAME_BYTES: usize = layout::MAX_SNAPSHOT_NAME_BYTES;

/// A copy target's name (`usb`): the layout's grammar allows no longer one.
pub const MAX_TARGET_NAME_BYTES: usize = layout::copies::MAX_TARGET_NAME_BYTES;

/// A failure's reason as journalled and answered: the stem passes on what a copy target
/// said, and the far side of an SSH target may be hostile.
pub const MAX_FAILURE_BYTES: usize = 1024;

/// A subject the keeper built from names it parsed: `set N: NAME NAME NAME`, a set's id
/// and one name per restorable subvolume.
pub const MAX_BUILT_SUBJECT_BYTES: usize =
    "set 18446744073709551615: ".len() + layout::SUBVOLUMES.len() * (MAX_NAME_BYTES + 1);

/// A snapshot's reason: one line of at most this many bytes, what the journal keeps.
pub const MAX_REASON_BYTES: usize = 500;

/// The words given back to a restore's confirmation: longer than any words the keeper
/// shows (a test checks the longest, a set's of three members included), so words beyond
/// it cannot be the words shown. A refusal journals at most this many of them.
pub const MAX_WORDS_BYTES: usize = 4096;

/// The most days the keeper keeps what a restore replaced (`--keep-replaced-days`): a
/// century, so that the words that say it stay within [`MAX_WORDS_BYTES`].
pub const MAX_REPLACED_DAYS: u64 = 36_500;

/// A path a caller names inside a snapshot (`tacid data diff NAME PATH`): at most the
/// kernel's PATH_MAX, longer than any path a person can open.
pub const MAX_PATH_BYTES: usize = 4096;

/// A set restore's `--only` names at most this many members (each of the layout once).
pub fn max_only_names() -> usize {
    layout::SUBVOLUMES.len()
}

/// A snapshot set names at most this many subvolumes (each of the layout once).
pub fn max_set_names() -> usize {
    layout::SUBVOLUMES.len()
}

/// A name as it may be journalled, logged or shown back.
pub fn name(text: &str) -> Cow<'_, str> {
    layout::human::cap(text, MAX_NAME_BYTES)
}

/// A snapshot name from a caller; one longer than any name is refused before it is parsed,
/// and the error shows it capped.
pub(crate) fn parse_snapshot(name: &str) -> Result<SnapshotName, KeeperError> {
    let parsed = if name.len() > MAX_NAME_BYTES {
        Err(layout::SnapshotNameError::TooLong)
    } else {
        SnapshotName::parse(name)
    };
    parsed.map_err(|e| {
        KeeperError::InvalidArgument(format!(
            "{:?} is not a snapshot name: {e}; see `tacid data list` for names",
            self::name(name)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_cut_and_says_how_long() {
        // The cut itself is `layout::human::cap`'s, tested there.
        let huge = "A".repeat(100_000);
        let shown = name(&huge);
        assert!(shown.len() < MAX_NAME_BYTES + 32, "{shown}");
        assert!(shown.ends_with("… (100000 bytes)"), "{shown}");
    }

    #[test]
    fn the_longest_words_the_keeper_shows_are_within_the_cap() {
        use crate::words;
        // Either fate of what a restore replaces (adr/0027), at its longest: the days are
        // at most the keeper's option allows.
        for fate in [
            words::Aside::BelowFloor {
                floor_bytes: u64::MAX,
            },
            words::Aside::Kept {
                days: MAX_REPLACED_DAYS,
            },
        ] {
            longest_words_with(fate);
        }
    }

    fn longest_words_with(fate: crate::words::Aside) {
        use crate::words::{self, ChangeCounts};
        use std::time::{Duration, UNIX_EPOCH};
        let most = ChangeCounts {
            files_modified: u64::MAX,
            files_added: u64::MAX,
            files_removed: u64::MAX,
            directories_added: u64::MAX,
            directories_removed: u64::MAX,
            bytes_written: u64::MAX,
            complete: false,
        };
        let (taken, now) = (UNIX_EPOCH, UNIX_EPOCH + Duration::from_secs(1 << 40));
        for s in layout::SUBVOLUMES {
            let path = s.mount_point.unwrap_or(s.name);
            for w in [
                words::restore_words(path, taken, now, fate),
                words::restore_words_counted(path, taken, now, &most, fate),
                words::restore_words_counted_at_last_commit(path, taken, now, &most, fate),
            ] {
                assert!(w.len() < MAX_WORDS_BYTES / 2, "{} bytes: {w}", w.len());
            }
        }
        // A set of every restorable subvolume, each cut short at the most, with every other
        // subvolume of the layout left out.
        let put_back: Vec<words::SetMember<'_>> = layout::SubvolumeName::restorable()
            .iter()
            .map(|s| words::SetMember {
                of_path: s.display_path(),
                taken,
                counts: Some(most),
                named: None,
            })
            .collect();
        let left_out: Vec<(&str, &str)> = layout::SUBVOLUMES
            .iter()
            .map(|s| {
                (
                    s.mount_point.unwrap_or(s.name),
                    "never put back: not restorable",
                )
            })
            .collect();
        let w = words::set_restore_words(
            words::PutBack::Set {
                id: i64::MAX,
                before_switch: Some(&layout::switch::Switch::default()),
            },
            &put_back,
            &left_out,
            true,
            now,
            fate,
        );
        // The fate of what the restore replaces (adr/0027) adds up to some 250 bytes to a
        // set of three: still well within the cap.
        assert!(w.len() < MAX_WORDS_BYTES * 5 / 8, "{} bytes: {w}", w.len());
        // Before a switch between the longest generations to the longest toplevel: the
        // path and the way back add at most some 600 bytes (adr/0009).
        let switch = layout::switch::Switch {
            from: Some(999_999_999_999_999_999),
            to: Some(layout::switch::SwitchTo::Toplevel(format!(
                "/{}",
                "a".repeat(layout::switch::MAX_TOPLEVEL_BYTES - 1)
            ))),
        };
        let set = words::PutBack::Set {
            id: i64::MAX,
            before_switch: Some(&switch),
        };
        let w = words::set_restore_words(set, &put_back, &left_out, true, now, fate);
        assert!(w.len() < MAX_WORDS_BYTES * 3 / 4, "{} bytes: {w}", w.len());
        // Snapshots named one by one, each of the longest name, fetched from a target of the
        // longest name.
        let longest = "@".repeat(MAX_NAME_BYTES);
        let origin = format!("fetched from {}", "t".repeat(MAX_TARGET_NAME_BYTES));
        let named: Vec<words::SetMember<'_>> = put_back
            .iter()
            .map(|m| words::SetMember {
                named: Some((longest.as_str(), origin.as_str())),
                ..*m
            })
            .collect();
        let w = words::set_restore_words(words::PutBack::Named, &named, &[], true, now, fate);
        assert!(w.len() < MAX_WORDS_BYTES * 5 / 8, "{} bytes: {w}", w.len());
    }

    #[test]
    fn every_name_of_the_layout_is_within_the_cap() {
        for s in layout::SUBVOLUMES {
            assert!(s.name.len() <= MAX_NAME_BYTES, "{}", s.name);
            if let Some(m) = s.mount_point {
                assert!(m.len() <= MAX_NAME_BYTES, "{m}");
            }
        }
    }
}
