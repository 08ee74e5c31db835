//! The words people read: times, and what a restore costs (docs/design.md section 6).
//!
//! Times are shown in UTC and say so: the keeper is a long-running multi-threaded daemon,
//! where the local offset cannot be read soundly, and one clock for every user of the
//! machine is less surprising than one per terminal (adr/0011).

use std::time::SystemTime;

use layout::switch::{generation_link, Switch};

// Times and counts for people are the interface's (the CLI writes them too): re-exported
// here, where the keeper's words are.
pub use keeper_interface::words::{
    ago, count, exact_time, human_time, utc_year, write_taken, Ago, ExactTime, HumanTime,
};

/// What becomes, at the boot, of what a restore replaces (adr/0027).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aside {
    /// Set aside read-only for this many days (retention's), then deleted; undone by a
    /// restore of it.
    Kept { days: u64 },
    /// The disk is below the hard floor now: if it still is at the boot, it is deleted.
    BelowFloor { floor_bytes: u64 },
}

/// The subvolume seen at `of_path` (`/home` is `@home`), by the layout; the path itself when
/// no subvolume is seen there.
fn subvolume_at(of_path: &str) -> &str {
    layout::SUBVOLUMES
        .iter()
        .find(|s| s.mount_point == Some(of_path))
        .map_or(of_path, |s| s.name)
}

/// What happens to everything written to `of_path` since the snapshot, in words.
pub fn aside_words(of_path: &str, aside: Aside) -> String {
    let sub = subvolume_at(of_path);
    match aside {
        Aside::Kept { days } => format!(
            "Everything written to {of_path} since then is set aside as {sub}.\u{2026} for {} \
             (undo: `tacid data restore {sub}.\u{2026}`), then deleted.",
            count(days, "day", "days")
        ),
        Aside::BelowFloor { floor_bytes } => format!(
            "Everything written to {of_path} since then is deleted: the disk has less free than \
             the hard floor of {}, and while it has, the boot deletes what it replaces instead \
             of setting it aside for an undo.",
            layout::human::bytes(floor_bytes)
        ),
    }
}

/// What a restore costs, in the words of what is lost.
pub fn restore_words(of_path: &str, taken: SystemTime, now: SystemTime, aside: Aside) -> String {
    format!(
        "This puts {of_path} back to {} ({}). {} It happens at the next reboot.",
        human_time(taken, now),
        ago(taken, now),
        aside_words(of_path, aside)
    )
}

/// What changed since the snapshot, counted by the stem: the part of the restore's words
/// that says what is lost in numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeCounts {
    pub files_modified: u64,
    pub files_added: u64,
    pub files_removed: u64,
    pub directories_added: u64,
    pub directories_removed: u64,
    pub bytes_written: u64,
    /// False: the count was cut short by its time limit; every number is "at least".
    pub complete: bool,
}

impl ChangeCounts {
    /// Add `c` to these counts, each number saturating; the sum is complete only when both
    /// were.
    pub fn add(&mut self, c: &ChangeCounts) {
        self.files_modified = self.files_modified.saturating_add(c.files_modified);
        self.files_added = self.files_added.saturating_add(c.files_added);
        self.files_removed = self.files_removed.saturating_add(c.files_removed);
        self.directories_added = self.directories_added.saturating_add(c.directories_added);
        self.directories_removed = self
            .directories_removed
            .saturating_add(c.directories_removed);
        self.bytes_written = self.bytes_written.saturating_add(c.bytes_written);
        self.complete &= c.complete;
    }
}

/// `412 files changed, 37 added, 9 removed since then (1.2 GiB written)`, with "at least"
/// when the count was cut short, and the directories added or removed when there are any.
pub fn change_words(c: &ChangeCounts) -> String {
    let nothing_counted = [
        c.files_modified,
        c.files_added,
        c.files_removed,
        c.directories_added,
        c.directories_removed,
        c.bytes_written,
    ]
    .iter()
    .all(|n| *n == 0);
    if !c.complete && nothing_counted {
        // "at least 0 files changed" would read as "nothing changed".
        return "what changed since then could not be counted in time".into();
    }
    let at_least = if c.complete { "" } else { "at least " };
    let files = if c.files_modified == 1 {
        "file"
    } else {
        "files"
    };
    let mut out = format!(
        "{at_least}{} {files} changed, {} added, {} removed",
        c.files_modified, c.files_added, c.files_removed
    );
    if c.directories_added > 0 || c.directories_removed > 0 {
        let dirs = if c.directories_added == 1 {
            "directory"
        } else {
            "directories"
        };
        out.push_str(&format!(
            "; {} {dirs} added, {} removed",
            c.directories_added, c.directories_removed
        ));
    }
    out.push_str(&format!(
        " since then ({at_least}{} written)",
        layout::human::bytes(c.bytes_written)
    ));
    out
}

/// What a restore costs, with what changed since counted: the counts are part of the exact
/// words shown and journalled.
pub fn restore_words_counted(
    of_path: &str,
    taken: SystemTime,
    now: SystemTime,
    changes: &ChangeCounts,
    aside: Aside,
) -> String {
    counted_sentence(of_path, taken, now, changes, "", aside)
}

/// As [`restore_words_counted`], for counts of what the filesystem's last commit holds
/// (previews by people who may only look never make the stem commit, adr/0016).
pub fn restore_words_counted_at_last_commit(
    of_path: &str,
    taken: SystemTime,
    now: SystemTime,
    changes: &ChangeCounts,
    aside: Aside,
) -> String {
    counted_sentence(
        of_path,
        taken,
        now,
        changes,
        ", as of the filesystem's last commit",
        aside,
    )
}

fn counted_sentence(
    of_path: &str,
    taken: SystemTime,
    now: SystemTime,
    changes: &ChangeCounts,
    as_of: &str,
    aside: Aside,
) -> String {
    format!(
        "This puts {of_path} back to {} ({}): {}{as_of}. {} It happens at the next reboot.",
        human_time(taken, now),
        ago(taken, now),
        change_words(changes),
        aside_words(of_path, aside)
    )
}

/// A member of a set restore, for its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetMember<'a> {
    /// Where people see the subvolume (`/persist`).
    pub of_path: &'a str,
    /// When its snapshot was taken.
    pub taken: SystemTime,
    /// What changed since, when it was counted.
    pub counts: Option<ChangeCounts>,
    /// Of a restore of snapshots named one by one: the snapshot's name and where it came
    /// from in words (`fetched from cloud`, `set 12`, `unknown origin`); `None` in a set's.
    pub named: Option<(&'a str, &'a str)>,
}

/// What a restore puts back: a set (its id; taken before a switch: what its reason says of
/// the generations), or snapshots a person named one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutBack<'a> {
    Set {
        id: i64,
        before_switch: Option<&'a Switch>,
    },
    Named,
}

/// What a restore of a set costs, member by member and in all, in the words of what is lost
/// (one line for the set, one per member put back, the total, those left out), all of it
/// at one reboot. `before_switch`: the set was taken before a switch (what its reason says
/// of the generations; `Switch::default()` when nothing), and the words say how to put the
/// system back too, which tacid does not (adr/0001). `put_back` is in the order the boot
/// takes them; `left_out` is each member not put back, with why (`left out as asked`).
/// `at_last_commit`: the counts are of the filesystem's last commit (a looker's preview,
/// adr/0016).
pub fn set_restore_words(
    what: PutBack<'_>,
    put_back: &[SetMember<'_>],
    left_out: &[(&str, &str)],
    at_last_commit: bool,
    now: SystemTime,
    aside: Aside,
) -> String {
    let taken = put_back.iter().map(|m| m.taken).min().unwrap_or(now);
    let n = put_back.len();
    let subvolumes = count(n as u64, "subvolume", "subvolumes");
    let before_switch = match what {
        PutBack::Set { before_switch, .. } => before_switch,
        PutBack::Named => None,
    };
    let mut out = match what {
        PutBack::Set { id, before_switch } => format!(
            "This puts back {subvolumes} of set {id}, taken together{} on {} ({}):",
            match before_switch {
                Some(Switch {
                    from: None,
                    to: None,
                }) => " before switching configuration".to_owned(),
                Some(switch) => format!(" {switch}"),
                None => String::new(),
            },
            human_time(taken, now),
            ago(taken, now)
        ),
        // Named one by one, they are no set: each goes back to its own time, and nothing
        // says they were one cut.
        PutBack::Named if n == 1 => format!("This puts back {subvolumes} to the snapshot named:"),
        PutBack::Named => format!("This puts back {subvolumes}, each to the snapshot named:"),
    };
    let mut total = ChangeCounts {
        complete: true,
        ..ChangeCounts::default()
    };
    let mut uncounted: Vec<&str> = Vec::new();
    for m in put_back {
        let when = match m.named {
            Some((name, origin)) => format!("{name} ({}, {origin})", human_time(m.taken, now)),
            None => human_time(m.taken, now),
        };
        let path = m.of_path;
        match &m.counts {
            Some(c) => {
                out.push_str(&format!("\n  {path} back to {when}: {}.", change_words(c)));
                total.add(c);
            }
            None => {
                out.push_str(&format!("\n  {path} back to {when}."));
                uncounted.push(path);
            }
        }
        out.push(' ');
        match aside {
            // Said once for the set, below.
            Aside::BelowFloor { .. } => out.push_str(&format!(
                "Everything written to {path} since then is deleted."
            )),
            Aside::Kept { .. } => out.push_str(&aside_words(path, aside)),
        }
    }
    if n > 1 && uncounted.len() < n {
        out.push_str(&format!("\nIn all: {}", change_words(&total)));
        if !uncounted.is_empty() {
            out.push_str(&format!(
                ", not counting {}, which could not be counted",
                uncounted.join(" or ")
            ));
        }
        out.push('.');
    }
    if at_last_commit && uncounted.len() < n {
        out.push_str("\nCounted as of the filesystem's last commit.");
    }
    if let Aside::BelowFloor { floor_bytes } = aside {
        out.push_str(&format!(
            "\nThe disk has less free than the hard floor of {}: while it has, the boot deletes \
             what it replaces instead of setting it aside for an undo.",
            layout::human::bytes(floor_bytes)
        ));
    }
    if !left_out.is_empty() {
        let each: Vec<String> = left_out
            .iter()
            .map(|(path, why)| format!("{path} ({why})"))
            .collect();
        out.push_str(&format!(
            "\nNot put back: {}; {} as {} now.",
            each.join(", "),
            if left_out.len() == 1 {
                "it stays"
            } else {
                "they stay"
            },
            if left_out.len() == 1 {
                "it is"
            } else {
                "they are"
            }
        ));
    }
    if let Some(switch) = before_switch {
        out.push('\n');
        out.push_str(&system_back_words(switch));
    }
    out.push_str(if n == 1 {
        "\nIt happens at the next reboot."
    } else {
        "\nIt happens at the next reboot, to all of them together."
    });
    out
}

/// How to put the system back to the generation a pre-switch set was taken under: tacid
/// puts back data only, and says so (adr/0001).
pub fn system_back_words(switch: &Switch) -> String {
    const DATA_ONLY: &str = "This puts back data only, not the system: the next boot starts \
                             the generation the boot loader's default is.";
    match switch.from {
        Some(from) => format!(
            "{DATA_ONLY} To run generation {from} again too, make it the boot default \
             yourself, as root: `nixos-rebuild boot --rollback` (when {from} is the \
             generation just below the system profile's current one) or \
             `{}/bin/switch-to-configuration boot`.",
            generation_link(from)
        ),
        None => format!(
            "{DATA_ONLY} To run the earlier generation again too, choose it in the boot \
             menu or make it the boot default yourself (`nixos-rebuild list-generations` \
             lists them)."
        ),
    }
}

/// "/persist, /var/log and /home": the restorable subvolumes where people see them.
pub(crate) fn restorable_paths() -> String {
    let paths: Vec<&str> = layout::SubvolumeName::restorable()
        .iter()
        .map(|s| s.display_path())
        .collect();
    layout::human::and_list(&paths)
}

/// Where people see a subvolume of the layout (`/home`), or `?` for a name the layout lacks.
pub(crate) fn of_path(subvolume: &str) -> &'static str {
    layout::SubvolumeName::parse(subvolume)
        .map(|s| s.display_path())
        .unwrap_or("?")
}

/// Text a caller gave back, escaped (adr/0017) line by line: no control character but the
/// line breaks between lines.
pub(crate) fn escape_lines(text: &str) -> String {
    text.split('\n')
        .map(|line| layout::escape::escape(line.as_bytes()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn the_taken_line_written_by_hand_is_the_three_put_together() {
        let now = at(1_796_133_720 + 2 * 86_400 + 60);
        let year = utc_year(now);
        let mut seconds: Vec<u64> = vec![0, 1, 59, 86_399, 951_782_400, 1_796_133_720];
        // Every few hours over two years around `now`, and some odd microseconds.
        let mut t = 1_796_133_720 - 400 * 86_400;
        while t < 1_796_133_720 + 400 * 86_400 {
            seconds.push(t);
            t += 3 * 3600 + 7;
        }
        for s in seconds {
            for micros in [0u64, 1, 999_999, 123_456] {
                let when = at(s) + Duration::from_micros(micros);
                let mut out = Vec::new();
                write_taken(&mut out, when, now, year).unwrap();
                let expected = format!(
                    "{} ({}); exactly {}",
                    human_time(when, now),
                    ago(when, now),
                    exact_time(when)
                );
                assert_eq!(String::from_utf8(out).unwrap(), expected);
            }
        }
    }

    const SEVEN: Aside = Aside::Kept { days: 7 };

    #[test]
    fn below_the_hard_floor_the_words_say_deleted_and_why() {
        let taken = at(1_796_133_720);
        let now = at(1_796_133_720 + 2 * 86_400 + 60);
        let floor = Aside::BelowFloor {
            floor_bytes: 512 << 20,
        };
        assert_eq!(
            restore_words("/home", taken, now, floor),
            "This puts /home back to Tue 1 Dec 14:02 UTC (2 days ago). Everything written to \
             /home since then is deleted: the disk has less free than the hard floor of 512.0 \
             MiB, and while it has, the boot deletes what it replaces instead of setting it \
             aside for an undo. It happens at the next reboot."
        );
        let members = [SetMember {
            of_path: "/var/log",
            taken,
            counts: None,
            named: None,
        }];
        let words = set_restore_words(PutBack::Named, &members, &[], false, now, floor);
        assert!(
            words.contains(
                "Everything written to /var/log since then is deleted.\nThe disk has less free \
                 than the hard floor of 512.0 MiB"
            ),
            "{words}"
        );
    }

    fn at(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn the_documented_sentence() {
        // Tue 1 Dec 2026 14:02 UTC, read two days later.
        let taken = at(1_796_133_720);
        let now = at(1_796_133_720 + 2 * 86_400 + 60);
        assert_eq!(
            restore_words("/home", taken, now, SEVEN),
            "This puts /home back to Tue 1 Dec 14:02 UTC (2 days ago). Everything written to /home since then is set aside as @home.… for 7 days (undo: `tacid data restore @home.…`), then deleted. It happens at the next reboot."
        );
        assert_eq!(exact_time(taken), "2026-12-01 14:02:00.000000 UTC");
        assert_eq!(
            human_time(taken, at(1_900_000_000)),
            "Tue 1 Dec 2026 14:02 UTC"
        );
    }

    #[test]
    fn the_counted_sentence() {
        let counts = ChangeCounts {
            files_modified: 412,
            files_added: 37,
            files_removed: 9,
            directories_added: 0,
            directories_removed: 0,
            bytes_written: 1_288_490_189,
            complete: true,
        };
        assert_eq!(
            change_words(&counts),
            "412 files changed, 37 added, 9 removed since then (1.2 GiB written)"
        );
        let taken = at(1_796_133_720);
        let now = at(1_796_133_720 + 2 * 86_400 + 60);
        assert_eq!(
            restore_words_counted("/home", taken, now, &counts, SEVEN),
            "This puts /home back to Tue 1 Dec 14:02 UTC (2 days ago): 412 files changed, 37 \
             added, 9 removed since then (1.2 GiB written). Everything written to /home since then is set aside as @home.… for 7 days (undo: `tacid data restore @home.…`), then deleted. It happens at the next reboot."
        );
        assert_eq!(
            restore_words_counted_at_last_commit("/home", taken, now, &counts, SEVEN),
            "This puts /home back to Tue 1 Dec 14:02 UTC (2 days ago): 412 files changed, 37 \
             added, 9 removed since then (1.2 GiB written), as of the filesystem's last commit. \
             Everything written to /home since then is set aside as @home.… for 7 days (undo: `tacid data restore @home.…`), then deleted. It happens at the next reboot."
        );
        let cut = ChangeCounts {
            files_modified: 1,
            directories_added: 1,
            directories_removed: 2,
            bytes_written: 1,
            complete: false,
            ..ChangeCounts::default()
        };
        assert_eq!(
            change_words(&cut),
            "at least 1 file changed, 0 added, 0 removed; 1 directory added, 2 removed since \
             then (at least 1 B written)"
        );
        assert_eq!(
            change_words(&ChangeCounts::default()),
            "what changed since then could not be counted in time"
        );
        assert_eq!(
            change_words(&ChangeCounts {
                complete: true,
                ..ChangeCounts::default()
            }),
            "0 files changed, 0 added, 0 removed since then (0 B written)"
        );
    }

    fn set(id: i64) -> PutBack<'static> {
        PutBack::Set {
            id,
            before_switch: None,
        }
    }

    #[test]
    fn named_snapshots_are_no_set_and_each_says_where_it_came_from() {
        let taken = at(1_796_133_720);
        let now = at(1_796_133_720 + 2 * 86_400 + 60);
        let counted = ChangeCounts {
            files_modified: 1,
            files_added: 1,
            complete: true,
            ..ChangeCounts::default()
        };
        let members = [
            SetMember {
                of_path: "/persist",
                taken,
                counts: Some(counted),
                named: Some(("@persist.2026-12-01T140200.000000Z", "fetched from stick")),
            },
            SetMember {
                of_path: "/home",
                taken: taken + Duration::from_secs(3600),
                counts: Some(counted),
                named: Some(("@home.2026-12-01T150200.000000Z", "fetched from cloud")),
            },
        ];
        let words = set_restore_words(PutBack::Named, &members, &[], false, now, SEVEN);
        assert_eq!(
            words,
            "This puts back 2 subvolumes, each to the snapshot named:\n  \
             /persist back to @persist.2026-12-01T140200.000000Z (Tue 1 Dec 14:02 UTC, fetched \
             from stick): 1 file changed, 1 added, 0 removed since then (0 B written). \
             Everything written to /persist since then is set aside as @persist.… for 7 days (undo: `tacid data restore @persist.…`), then deleted.\n  \
             /home back to @home.2026-12-01T150200.000000Z (Tue 1 Dec 15:02 UTC, fetched from \
             cloud): 1 file changed, 1 added, 0 removed since then (0 B written). Everything written to /home since then is set aside as @home.… for 7 days (undo: `tacid data restore @home.…`), then deleted.\n\
             In all: 2 files changed, 2 added, 0 removed since then (0 B written).\n\
             It happens at the next reboot, to all of them together."
        );
        assert!(!words.replace("set aside", "").contains("set"), "{words}");
        let one = set_restore_words(PutBack::Named, &members[..1], &[], false, now, SEVEN);
        assert!(
            one.starts_with("This puts back 1 subvolume to the snapshot named:\n"),
            "{one}"
        );
    }

    #[test]
    fn the_set_words_say_each_member_the_total_and_what_stays() {
        let taken = at(1_796_133_720);
        let now = at(1_796_133_720 + 2 * 86_400 + 60);
        let counts = |files_modified, bytes_written| {
            Some(ChangeCounts {
                files_modified,
                files_added: 1,
                files_removed: 0,
                directories_added: 0,
                directories_removed: 0,
                bytes_written,
                complete: true,
            })
        };
        let members = [
            SetMember {
                of_path: "/persist",
                taken,
                counts: counts(412, 2048),
                named: None,
            },
            SetMember {
                of_path: "/var/log",
                taken,
                counts: counts(3, 1024),
                named: None,
            },
        ];
        let words = set_restore_words(
            PutBack::Set {
                id: 12,
                before_switch: Some(&Switch::default()),
            },
            &members,
            &[("/home", "left out as asked")],
            false,
            now,
            SEVEN,
        );
        assert_eq!(
            words,
            "This puts back 2 subvolumes of set 12, taken together before switching \
             configuration on Tue 1 Dec 14:02 UTC (2 days ago):\n  \
             /persist back to Tue 1 Dec 14:02 UTC: 412 files changed, 1 added, 0 removed since \
             then (2.0 KiB written). Everything written to /persist since then is set aside as @persist.… for 7 days (undo: `tacid data restore @persist.…`), then deleted.\n  \
             /var/log back to Tue 1 Dec 14:02 UTC: 3 files changed, 1 added, 0 removed since \
             then (1.0 KiB written). Everything written to /var/log since then is set aside as @log.… for 7 days (undo: `tacid data restore @log.…`), then deleted.\n\
             In all: 415 files changed, 2 added, 0 removed since then (3.0 KiB written).\n\
             Not put back: /home (left out as asked); it stays as it is now.\n\
             This puts back data only, not the system: the next boot starts the generation \
             the boot loader's default is. To run the earlier generation again too, choose \
             it in the boot menu or make it the boot default yourself \
             (`nixos-rebuild list-generations` lists them).\n\
             It happens at the next reboot, to all of them together."
        );
        assert!(!words.to_lowercase().contains("restored"));
        // A member not counted: its sentence without numbers, and the total says so.
        let mut partly = members;
        partly[1].counts = None;
        let words = set_restore_words(set(3), &partly, &[], true, now, SEVEN);
        assert!(
            words.contains("\n  /var/log back to Tue 1 Dec 14:02 UTC. Everything written"),
            "{words}"
        );
        assert!(
            words.contains(
                "(2.0 KiB written), not counting /var/log, which could not be counted.\n"
            ),
            "{words}"
        );
        assert!(
            words.contains("\nCounted as of the filesystem's last commit.\n"),
            "{words}"
        );
        assert!(words.starts_with("This puts back 2 subvolumes of set 3, taken together on"));
        // One member: no total, and no "all of them".
        let words = set_restore_words(set(3), &members[..1], &[], false, now, SEVEN);
        assert!(!words.contains("In all"), "{words}");
        assert!(
            words.ends_with("\nIt happens at the next reboot."),
            "{words}"
        );
    }

    #[test]
    fn ago_reads_naturally() {
        let now = at(10_000_000);
        assert_eq!(ago(at(10_000_000 - 5), now), "just now");
        assert_eq!(ago(at(10_000_000 - 60), now), "1 minute ago");
        assert_eq!(ago(at(10_000_000 - 7200), now), "2 hours ago");
        assert_eq!(ago(at(10_000_001), now), "in the future; check the clock");
    }
}
