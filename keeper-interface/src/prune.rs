//! Why retention deletes a snapshot or keeps it, in the words a prune report carries: each
//! rule's stable code ([`Rule::code`], [`RULES`]) and its sentence, and why a chosen snapshot
//! stays ([`Protection`]). The keeper's retention decides; the CLI groups a report by them.

use std::fmt;
use std::time::Duration;

use crate::words::count;

/// Why a snapshot goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Its pre-switch set is older than the newest `keep` sets.
    PreSwitchSets { keep: usize, set: i64 },
    /// A timeline snapshot that none of the counts keeps.
    Timeline {
        hourly: usize,
        daily: usize,
        weekly: usize,
        monthly: usize,
    },
    /// A manual snapshot older than the stated age.
    ManualMaxAge { max_age: Duration },
    /// The free space is below the floor; the oldest automatic snapshot goes first.
    FreeSpaceFloor { free_bytes: u64, floor_bytes: u64 },
    /// What a restore replaced, kept for `days` days after the boot of that restore
    /// (adr/0027), and they are over.
    ReplacedKeptDays { days: u64 },
}

const PRE_SWITCH_SETS: &str = "pre-switch-sets";
const TIMELINE: &str = "timeline";
const MANUAL_MAX_AGE: &str = "manual-max-age";
const FREE_SPACE_FLOOR: &str = "free-space-floor";
const REPLACED_KEPT_DAYS: &str = "replaced-kept-days";

/// Each rule's code, in the order the rules are applied, with what holds for every
/// snapshot it chooses (the per-set detail is each choice's own sentence, [`Rule`]'s
/// `Display`).
pub const RULES: [(&str, &str); 5] = [
    (PRE_SWITCH_SETS, "the rule for pre-switch sets"),
    (TIMELINE, "the timeline rule"),
    (MANUAL_MAX_AGE, "the maximum age of manual snapshots"),
    (FREE_SPACE_FLOOR, "the free-space floor"),
    (
        REPLACED_KEPT_DAYS,
        "the days what a restore replaced is kept for",
    ),
];

impl Rule {
    /// A short stable name, for the journal and for programs.
    pub fn code(&self) -> &'static str {
        match self {
            Rule::PreSwitchSets { .. } => PRE_SWITCH_SETS,
            Rule::Timeline { .. } => TIMELINE,
            Rule::ManualMaxAge { .. } => MANUAL_MAX_AGE,
            Rule::FreeSpaceFloor { .. } => FREE_SPACE_FLOOR,
            Rule::ReplacedKeptDays { .. } => REPLACED_KEPT_DAYS,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::PreSwitchSets { keep, set } => write!(
                f,
                "pre-switch set {set} is older than the newest {}",
                count(*keep as u64, "pre-switch set", "pre-switch sets")
            ),
            Rule::Timeline {
                hourly,
                daily,
                weekly,
                monthly,
            } => write!(
                f,
                "timeline: not the newest of any of the last {}, {}, {} or {}",
                count(*hourly as u64, "hour", "hours"),
                count(*daily as u64, "day", "days"),
                count(*weekly as u64, "week", "weeks"),
                count(*monthly as u64, "month", "months")
            ),
            Rule::ManualMaxAge { max_age } => write!(
                f,
                "manual snapshot older than {}",
                count(max_age.as_secs() / 86_400, "day", "days")
            ),
            Rule::FreeSpaceFloor {
                free_bytes,
                floor_bytes,
            } => write!(
                f,
                "free space {} is below the floor of {}; the oldest automatic snapshots go first",
                layout::human::bytes(*free_bytes),
                layout::human::bytes(*floor_bytes)
            ),
            Rule::ReplacedKeptDays { days } => write!(
                f,
                "what a restore replaced, kept {} after that boot, and they are over",
                count(*days, "day", "days")
            ),
        }
    }
}

/// Why a snapshot a rule chose stays anyway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    Pinned,
    Kept,
    /// The newest snapshot of its subvolume these configured targets hold a copy of: the
    /// parent their next incremental copy is sent against.
    LastCommonParent(Vec<String>),
    /// Open at these places: the stem does not delete it until it is closed (adr/0021).
    Open(Vec<String>),
    /// Another member of its set is pinned, kept, open or a last common parent.
    SetMemberProtected,
}

impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protection::Pinned => f.write_str("the staged restore names it"),
            Protection::Kept => f.write_str("a person marked it to keep"),
            Protection::LastCommonParent(targets) => {
                let t = targets.join(", ");
                write!(
                    f,
                    "last common parent with {t}: the next copy to {t} is sent against it, and \
                     without it that copy would be full"
                )
            }
            Protection::Open(places) => write!(
                f,
                "open at {} (in use until it is closed; it cannot be deleted before)",
                places.join(", ")
            ),
            Protection::SetMemberProtected => f.write_str(
                "another member of its set is pinned or kept or open, or a last common parent with \
                 a copy target, and a set goes whole or not at all",
            ),
        }
    }
}
