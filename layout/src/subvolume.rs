//! The subvolume table: docs/design.md section 2, in code, once.

use std::fmt;

use serde::Serialize;

/// Whether a subvolume's snapshots are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Snapshotted {
    /// In every snapshot set (manual and before a switch).
    Yes,
    /// Only when named explicitly (configurable); never restorable.
    Optional,
    /// Never: its contents are made again (ephemeral root) or it is the template.
    No,
    /// Never, and must never be: it holds the snapshots themselves.
    Never,
}

/// One row of the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Subvolume {
    /// The subvolume's own name at the top level of the filesystem (`@home`).
    pub name: &'static str,
    /// Where the running system mounts it, if anywhere.
    pub mount_point: Option<&'static str>,
    /// Whether snapshots of it are taken.
    pub snapshotted: Snapshotted,
    /// Whether a snapshot of it may be put back at the next boot.
    pub restorable: bool,
}

impl Subvolume {
    /// Snapshots of it may be taken at all (by default or by explicit request).
    pub fn snapshottable(&self) -> bool {
        matches!(self.snapshotted, Snapshotted::Yes | Snapshotted::Optional)
    }
}

/// Every subvolume of a tacid machine, all at the top level (subvolid 5).
pub const SUBVOLUMES: [Subvolume; 7] = [
    Subvolume {
        name: crate::ROOT_SUBVOLUME,
        mount_point: Some("/"),
        snapshotted: Snapshotted::No,
        restorable: false,
    },
    Subvolume {
        name: crate::ROOT_BLANK_SUBVOLUME,
        mount_point: None,
        snapshotted: Snapshotted::No,
        restorable: false,
    },
    Subvolume {
        name: "@nix",
        mount_point: Some("/nix"),
        snapshotted: Snapshotted::Optional,
        restorable: false,
    },
    Subvolume {
        name: "@persist",
        mount_point: Some("/persist"),
        snapshotted: Snapshotted::Yes,
        restorable: true,
    },
    Subvolume {
        name: "@log",
        mount_point: Some("/var/log"),
        snapshotted: Snapshotted::Yes,
        restorable: true,
    },
    Subvolume {
        name: "@home",
        mount_point: Some("/home"),
        snapshotted: Snapshotted::Yes,
        restorable: true,
    },
    Subvolume {
        name: crate::SNAPSHOTS_SUBVOLUME,
        mount_point: Some(crate::SNAPSHOTS_MOUNT_POINT),
        snapshotted: Snapshotted::Never,
        restorable: false,
    },
];

/// The name of a subvolume in [`SUBVOLUMES`]; cannot be built for anything else.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubvolumeName(&'static str);

/// Why a string is not a subvolume of the layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubvolumeNameError {
    #[error("{0:?} is not a subvolume of the tacid layout (known: {known})", known = known_names())]
    Unknown(String),
}

fn known_names() -> String {
    join(SUBVOLUMES.iter())
}

fn join<'a>(subvolumes: impl Iterator<Item = &'a Subvolume>) -> String {
    subvolumes.map(|s| s.name).collect::<Vec<_>>().join(", ")
}

impl SubvolumeName {
    /// The name, exactly as in the table (`@home`); nothing else is accepted.
    pub fn parse(name: &str) -> Result<Self, SubvolumeNameError> {
        SUBVOLUMES
            .iter()
            .find(|s| s.name == name)
            .map(|s| SubvolumeName(s.name))
            .ok_or_else(|| SubvolumeNameError::Unknown(name.to_owned()))
    }

    /// The subvolume's name or its mount point (`@home` or `/home`), for people.
    pub fn from_name_or_mount_point(input: &str) -> Result<Self, SubvolumeNameError> {
        let trimmed = if input.len() > 1 {
            input.trim_end_matches('/')
        } else {
            input
        };
        SUBVOLUMES
            .iter()
            .find(|s| s.name == input || s.mount_point == Some(trimmed))
            .map(|s| SubvolumeName(s.name))
            .ok_or_else(|| SubvolumeNameError::Unknown(input.to_owned()))
    }

    /// The subvolumes in every default snapshot set.
    pub fn default_snapshot_set() -> Vec<SubvolumeName> {
        SUBVOLUMES
            .iter()
            .filter(|s| s.snapshotted == Snapshotted::Yes)
            .map(|s| SubvolumeName(s.name))
            .collect()
    }

    /// "@persist, @log, @home": the restorable names, for messages.
    pub fn restorable_list() -> String {
        join(SUBVOLUMES.iter().filter(|s| s.restorable))
    }

    /// The names whose snapshots may be taken, for messages.
    pub fn snapshottable_list() -> String {
        join(SUBVOLUMES.iter().filter(|s| s.snapshottable()))
    }

    /// Every subvolume whose snapshots may be put back.
    pub fn restorable() -> Vec<SubvolumeName> {
        SUBVOLUMES
            .iter()
            .filter(|s| s.restorable)
            .map(|s| SubvolumeName(s.name))
            .collect()
    }

    /// The subvolume's own name.
    pub fn as_str(&self) -> &'static str {
        self.0
    }

    /// Its row in the table.
    pub fn subvolume(&self) -> &'static Subvolume {
        SUBVOLUMES
            .iter()
            .find(|s| s.name == self.0)
            .expect("a SubvolumeName is only built from the table")
    }

    /// Where the running system mounts it, for people (`/home`); the name where none.
    pub fn display_path(&self) -> &'static str {
        self.subvolume().mount_point.unwrap_or(self.0)
    }
}

impl fmt::Display for SubvolumeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Debug for SubvolumeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SubvolumeName({})", self.0)
    }
}

impl Serialize for SubvolumeName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_flat_and_marked() {
        let mut names: Vec<_> = SUBVOLUMES.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), SUBVOLUMES.len());
        for s in SUBVOLUMES {
            assert!(s.name.starts_with('@') && !s.name.contains('/'), "{s:?}");
            assert!(!s.restorable || s.snapshotted == Snapshotted::Yes, "{s:?}");
        }
    }

    #[test]
    fn the_homes_are_one_restorable_snapshotted_subvolume() {
        let homes = crate::homes_subvolume();
        assert_eq!(homes.as_str(), "@home");
        assert!(homes.subvolume().restorable && homes.subvolume().snapshottable());
        assert_eq!(
            SUBVOLUMES
                .iter()
                .filter(|s| s.mount_point == Some(crate::HOMES_MOUNT_POINT))
                .count(),
            1
        );
    }

    #[test]
    fn restorable_set_is_persist_log_home() {
        let r: Vec<_> = SubvolumeName::restorable()
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(r, ["@persist", "@log", "@home"]);
        assert_eq!(
            SubvolumeName::default_snapshot_set(),
            SubvolumeName::restorable()
        );
    }

    #[test]
    fn nothing_outside_the_table_parses() {
        for bad in [
            "", "home", "/home", "@home/", "@HOME", "@home\0", "..", "@nix/..", "@",
        ] {
            assert!(SubvolumeName::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            SubvolumeName::parse("@home").unwrap().display_path(),
            "/home"
        );
    }

    #[test]
    fn people_may_say_the_mount_point() {
        let h = SubvolumeName::from_name_or_mount_point("/home/").unwrap();
        assert_eq!(h.as_str(), "@home");
        assert_eq!(
            SubvolumeName::from_name_or_mount_point("/var/log")
                .unwrap()
                .as_str(),
            "@log"
        );
        assert!(SubvolumeName::from_name_or_mount_point("/etc").is_err());
    }
}
