//! The JSON `tacid --json` prints: the CLI's own view of the keeper's answers, converted
//! from the bus's types, so the bus can change without a script noticing and a script's
//! contract is written here, once.
//!
//! Every document is an object whose `schema` field is [`SCHEMA`]. What nobody knows, or
//! what names nothing, is `null`: the bus has no "absent" and says it with `u32::MAX`, `0`
//! or an empty string, which these types turn back into `null`. A field that only said
//! whether another is known is not here: that other is `null`. Names are as the bus's.
//! Strings are in the visible form of adr/0017, as the keeper sent them.

use keeper_interface as wire;
use layout::switch::SwitchTo;
use serde::Serialize;

/// The version of the documents' shape. Raised (and said in `--help`, the man page and
/// docs/design.md) whenever a field is taken away or changes meaning.
pub const SCHEMA: u32 = 1;

/// One document: `{"schema": SCHEMA, ...the body's fields}`.
#[derive(Debug, Serialize)]
pub struct Document<T> {
    schema: u32,
    #[serde(flatten)]
    body: T,
}

/// `body` as a document of this schema.
pub fn document<T: Serialize>(body: T) -> Document<T> {
    Document {
        schema: SCHEMA,
        body,
    }
}

/// An empty string on the bus: nothing.
fn text(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// A failure: the D-Bus error name when there is one, the message and the exit code.
#[derive(Debug, Serialize)]
pub struct Failure<'a> {
    pub error: Option<&'a str>,
    pub message: &'a str,
    pub exit_code: u8,
}

impl<'a> From<&'a crate::Failure> for Failure<'a> {
    fn from(f: &'a crate::Failure) -> Self {
        Failure {
            error: text(&f.name),
            message: &f.message,
            exit_code: f.code,
        }
    }
}

/// A pre-switch snapshot's generations: `null` when it is not one, or its reason names
/// none of them.
#[derive(Debug, Serialize)]
pub struct SwitchJson {
    from_generation: Option<u64>,
    to_generation: Option<u64>,
    to_toplevel: Option<String>,
}

fn switch_json(pre_switch: bool, reason: &str) -> Option<SwitchJson> {
    let sw = crate::rows::switch_of(pre_switch, reason)?;
    let (to_generation, to_toplevel) = match sw.to {
        Some(SwitchTo::Generation(n)) => (Some(n), None),
        Some(SwitchTo::Toplevel(t)) => (None, Some(t.as_str().to_owned())),
        None => (None, None),
    };
    Some(SwitchJson {
        from_generation: sw.from,
        to_generation,
        to_toplevel,
    })
}

/// Target names, lent from wherever the answer holds them.
#[derive(Debug, Clone, Copy)]
enum Targets<'a> {
    /// Every target of a row of `ListRows`.
    OfRow(&'a [wire::CopyOfRow<'a>]),
    /// The targets a row of `ListRows` is the last common parent with.
    ParentOfRow(&'a [wire::CopyOfRow<'a>]),
    Names(&'a [String]),
}

impl Serialize for Targets<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Targets::OfRow(c) => s.collect_seq(c.iter().map(|c| c.target)),
            Targets::ParentOfRow(c) => {
                s.collect_seq(c.iter().filter(|c| c.last_common_parent).map(|c| c.target))
            }
            Targets::Names(n) => s.collect_seq(n),
        }
    }
}

/// The copies of a row of `ListRows` whose last verification failed: `{target: what
/// failed}` (empty where nothing is known of verifications).
#[derive(Debug, Clone, Copy)]
struct FailedOf<'a>(&'a [wire::CopyOfRow<'a>]);

impl Serialize for FailedOf<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(
            self.0
                .iter()
                .filter(|c| !c.verify_failed.is_empty())
                .map(|c| (c.target, c.verify_failed)),
        )
    }
}

/// One snapshot, in a list, a snapshot set or a fetch: the one shape of a snapshot.
#[derive(Debug, Serialize)]
pub struct Snapshot<'a> {
    name: &'a str,
    of: &'a str,
    of_path: &'a str,
    taken_micros: i64,
    /// `null`: none given, or unknown origin.
    reason: Option<&'a str>,
    /// `null` (both): the journal does not know who asked.
    asked_by: Option<&'a str>,
    asked_by_uid: Option<u32>,
    /// `journal` (taken through the keeper), `fetched` (fetched from a copy target: the
    /// reason says which), `replaced` (what a restore replaced, kept by the boot) or
    /// `unknown-origin`.
    origin: &'a str,
    pre_switch: bool,
    pinned: bool,
    /// `null`: in no set (fetched from a copy target, or of unknown origin).
    set_id: Option<i64>,
    copies: Targets<'a>,
    last_common_parent_of: Targets<'a>,
    /// The targets whose copy of it failed its last verification, with what failed.
    failed_verification: FailedOf<'a>,
    switch: Option<SwitchJson>,
    /// The units paused while its set was taken (a consistent cut); `null`: it is not one.
    consistent_cut: Option<Vec<&'a str>>,
    /// It holds what a restore replaced (origin `replaced`, adr/0027); `null`: it does not.
    replaced: Option<ReplacedJson<'a>>,
}

/// What a restore replaced, kept: which restore, and until when.
#[derive(Debug, Serialize)]
struct ReplacedJson<'a> {
    /// The snapshot that restore put back in its place.
    restore_of: &'a str,
    /// When the boot did that restore, µs since the epoch (UTC).
    replaced_micros: i64,
    /// Until when retention keeps it, µs since the epoch (UTC).
    kept_until_micros: i64,
}

/// The units of a consistent cut, from the keeper's space-separated names.
fn cut_units(units: &str) -> Option<Vec<&str>> {
    (!units.is_empty()).then(|| units.split(' ').collect())
}

impl<'a> Snapshot<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        (name, of, of_path, taken_micros): (&'a str, &'a str, &'a str, i64),
        reason: &'a str,
        asked_by: &'a str,
        asked_by_uid: u32,
        origin: &'a str,
        (pre_switch, pinned, set_id): (bool, bool, i64),
        copies: Targets<'a>,
        last_common_parent_of: Targets<'a>,
        failed_verification: FailedOf<'a>,
        cut: &'a str,
        (restore_of, replaced_micros, kept_until_micros): (&'a str, i64, i64),
    ) -> Self {
        Snapshot {
            name,
            of,
            of_path,
            taken_micros,
            reason: text(reason),
            asked_by: text(asked_by),
            asked_by_uid: (asked_by_uid != u32::MAX).then_some(asked_by_uid),
            origin,
            pre_switch,
            pinned,
            set_id: (set_id != 0).then_some(set_id),
            copies,
            last_common_parent_of,
            failed_verification,
            switch: switch_json(pre_switch, reason),
            consistent_cut: cut_units(cut),
            replaced: (replaced_micros != 0).then_some(ReplacedJson {
                restore_of,
                replaced_micros,
                kept_until_micros,
            }),
        }
    }

    /// A row of `ListRows`, with its targets.
    pub fn of_row(r: &'a wire::SnapshotRow<'a>, copies: &'a [wire::CopyOfRow<'a>]) -> Self {
        Snapshot::new(
            (r.name, r.of, r.of_path, r.taken_micros),
            r.reason,
            r.asked_by,
            r.asked_by_uid,
            r.origin,
            (r.pre_switch, r.pinned, r.set_id),
            Targets::OfRow(copies),
            Targets::ParentOfRow(copies),
            FailedOf(copies),
            r.cut_units,
            (
                r.replaced_by_restore_of,
                r.replaced_micros,
                r.kept_until_micros,
            ),
        )
    }
}

impl<'a> From<&'a wire::SnapshotEntry> for Snapshot<'a> {
    fn from(e: &'a wire::SnapshotEntry) -> Self {
        Snapshot::new(
            (&e.name, &e.of, &e.of_path, e.taken_micros),
            &e.reason,
            &e.asked_by,
            e.asked_by_uid,
            &e.origin,
            (e.pre_switch, e.pinned, e.set_id),
            Targets::Names(&e.copies),
            Targets::Names(&e.last_common_parent_of),
            FailedOf(&[]),
            &e.cut_units,
            (
                &e.replaced_by_restore_of,
                e.replaced_micros,
                e.kept_until_micros,
            ),
        )
    }
}

/// One snapshot in `tacid data list`: where it is open for the caller (`null`: it is not).
#[derive(Debug, Serialize)]
struct Listed<'a> {
    #[serde(flatten)]
    snapshot: Snapshot<'a>,
    open_at: Option<&'a str>,
}

/// `tacid data list`: `{"schema", "snapshots": [...]}`, newest first.
struct List<'a> {
    rows: &'a [wire::SnapshotRow<'a>],
    copies: &'a [wire::CopyOfRow<'a>],
    opens: &'a [wire::Opened],
}

impl Serialize for List<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeSeq as _, SerializeStruct as _};
        struct Rows<'r, 'a>(&'r List<'a>);
        impl Serialize for Rows<'_, '_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let l = self.0;
                let mut seq = s.serialize_seq(Some(l.rows.len()))?;
                let mut at = 0;
                for (i, r) in l.rows.iter().enumerate() {
                    let held = crate::rows::copies_of(l.copies, &mut at, i);
                    // A person has a few opens at most: a scan of them per row costs nothing.
                    let open_at = l
                        .opens
                        .iter()
                        .find(|o| o.snapshot == r.name)
                        .map(|o| o.path.as_str());
                    seq.serialize_element(&Listed {
                        snapshot: Snapshot::of_row(r, held),
                        open_at,
                    })?;
                }
                seq.end()
            }
        }
        let mut st = s.serialize_struct("List", 1)?;
        st.serialize_field("snapshots", &Rows(self))?;
        st.end()
    }
}

/// `tacid data list --json`, written into `out` from the flat rows (nothing is allocated
/// per row but its entry's switch).
pub fn write_list(
    out: &mut impl std::io::Write,
    rows: &[wire::SnapshotRow<'_>],
    copies: &[wire::CopyOfRow<'_>],
    opens: &[wire::Opened],
) -> std::io::Result<()> {
    serde_json::to_writer_pretty(
        &mut *out,
        &document(List {
            rows,
            copies,
            opens,
        }),
    )
    .map_err(std::io::Error::other)?;
    out.write_all(b"\n")
}

/// `tacid data snapshot`.
#[derive(Debug, Serialize)]
pub struct SnapshotSet<'a> {
    set_id: i64,
    snapshots: Vec<Snapshot<'a>>,
    /// Each hook of the consistent cut as it ended (`ok`, `says`); empty: none ran.
    hooks: &'a [wire::CutHook],
}

impl<'a> From<&'a wire::SnapshotSet> for SnapshotSet<'a> {
    fn from(s: &'a wire::SnapshotSet) -> Self {
        SnapshotSet {
            set_id: s.set_id,
            snapshots: s.snapshots.iter().map(Snapshot::from).collect(),
            hooks: &s.hooks,
        }
    }
}

/// A preview with what it was shown with: the paths (`--details`) or what was staged.
#[derive(Debug, Serialize)]
pub struct Shown<P, D> {
    pub shown: P,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<D>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staged: Option<D>,
}

/// `tacid data restore NAME`.
#[derive(Debug, Serialize)]
pub struct RestorePreview<'a> {
    snapshot: &'a str,
    of: &'a str,
    of_path: &'a str,
    taken_micros: i64,
    words: &'a str,
    already_staged: bool,
}

impl<'a> From<&'a wire::RestorePreview> for RestorePreview<'a> {
    fn from(p: &'a wire::RestorePreview) -> Self {
        RestorePreview {
            snapshot: &p.snapshot,
            of: &p.of,
            of_path: &p.of_path,
            taken_micros: p.taken_micros,
            words: &p.words,
            already_staged: p.already_staged,
        }
    }
}

/// What a restore loses, counted; `null` where it was not counted.
#[derive(Debug, Serialize)]
pub struct Changes {
    /// False: the count was cut short; every number is "at least".
    complete: bool,
    files_modified: u64,
    files_added: u64,
    files_removed: u64,
    directories_added: u64,
    directories_removed: u64,
    bytes_written: u64,
}

fn changes(c: &wire::ChangeCount) -> Option<Changes> {
    c.counted.then_some(Changes {
        complete: c.complete,
        files_modified: c.files_modified,
        files_added: c.files_added,
        files_removed: c.files_removed,
        directories_added: c.directories_added,
        directories_removed: c.directories_removed,
        bytes_written: c.bytes_written,
    })
}

#[derive(Debug, Serialize)]
pub struct SetRestoreMember<'a> {
    snapshot: &'a str,
    of: &'a str,
    of_path: &'a str,
    taken_micros: i64,
    put_back: bool,
    /// Why it is not put back; `null` when it is.
    left_out: Option<&'a str>,
    changes: Option<Changes>,
}

/// `tacid data restore SET`.
#[derive(Debug, Serialize)]
pub struct SetRestorePreview<'a> {
    /// `null`: snapshots named one by one, no set.
    set_id: Option<i64>,
    pre_switch: bool,
    members: Vec<SetRestoreMember<'a>>,
    total: Option<Changes>,
    as_of_last_commit: bool,
    words: &'a str,
    already_staged: bool,
    /// The units paused while the set was taken (a consistent cut); `null`: it is not one.
    consistent_cut: Option<Vec<&'a str>>,
}

impl<'a> From<&'a wire::SetRestorePreview> for SetRestorePreview<'a> {
    fn from(p: &'a wire::SetRestorePreview) -> Self {
        SetRestorePreview {
            set_id: (p.set_id != 0).then_some(p.set_id),
            pre_switch: p.pre_switch,
            members: p
                .members
                .iter()
                .map(|m| SetRestoreMember {
                    snapshot: &m.snapshot,
                    of: &m.of,
                    of_path: &m.of_path,
                    taken_micros: m.taken_micros,
                    put_back: m.put_back,
                    left_out: text(&m.left_out),
                    changes: changes(&m.changes),
                })
                .collect(),
            total: changes(&p.total),
            as_of_last_commit: p.as_of_last_commit,
            words: &p.words,
            already_staged: p.already_staged,
            consistent_cut: cut_units(&p.cut_units),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct StagedMember<'a> {
    snapshot: &'a str,
    of: &'a str,
    of_path: &'a str,
}

#[derive(Debug, Serialize)]
pub struct SetRestoreStaged<'a> {
    /// `null`: snapshots named one by one, no set.
    set_id: Option<i64>,
    members: Vec<StagedMember<'a>>,
    already_staged: bool,
    reboot_needed: bool,
    message: &'a str,
}

impl<'a> From<&'a wire::SetRestoreStaged> for SetRestoreStaged<'a> {
    fn from(s: &'a wire::SetRestoreStaged) -> Self {
        SetRestoreStaged {
            set_id: (s.set_id != 0).then_some(s.set_id),
            members: s
                .members
                .iter()
                .map(|m| StagedMember {
                    snapshot: &m.snapshot,
                    of: &m.of,
                    of_path: &m.of_path,
                })
                .collect(),
            already_staged: s.already_staged,
            reboot_needed: s.reboot_needed,
            message: &s.message,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ChangedPath<'a> {
    change: &'a str,
    directory: bool,
    path: &'a str,
}

fn paths(p: &[wire::ChangedPath]) -> Vec<ChangedPath<'_>> {
    p.iter()
        .map(|p| ChangedPath {
            change: &p.change,
            directory: p.directory,
            path: &p.path,
        })
        .collect()
}

/// `--details`: the changed paths of one snapshot.
#[derive(Debug, Serialize)]
pub struct RestoreDetails<'a> {
    snapshot: &'a str,
    of_path: &'a str,
    complete: bool,
    paths: Vec<ChangedPath<'a>>,
    paths_left_off: u64,
}

impl<'a> From<&'a wire::RestoreDetails> for RestoreDetails<'a> {
    fn from(d: &'a wire::RestoreDetails) -> Self {
        RestoreDetails {
            snapshot: &d.snapshot,
            of_path: &d.of_path,
            complete: d.complete,
            paths: paths(&d.paths),
            paths_left_off: d.paths_left_off,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct RestoreStaged<'a> {
    snapshot: &'a str,
    of: &'a str,
    of_path: &'a str,
    already_staged: bool,
    reboot_needed: bool,
    message: &'a str,
}

impl<'a> From<&'a wire::RestoreStaged> for RestoreStaged<'a> {
    fn from(s: &'a wire::RestoreStaged) -> Self {
        RestoreStaged {
            snapshot: &s.snapshot,
            of: &s.of,
            of_path: &s.of_path,
            already_staged: s.already_staged,
            reboot_needed: s.reboot_needed,
            message: &s.message,
        }
    }
}

/// `tacid data cancel`.
#[derive(Debug, Serialize)]
pub struct Cancelled<'a> {
    withdrawn: bool,
    /// The restore withdrawn (`null`: none): its snapshots, and where their subvolumes are
    /// seen, separated by spaces.
    snapshot: Option<&'a str>,
    of_path: Option<&'a str>,
    message: &'a str,
}

impl<'a> From<&'a wire::Cancelled> for Cancelled<'a> {
    fn from(c: &'a wire::Cancelled) -> Self {
        Cancelled {
            withdrawn: c.withdrawn,
            snapshot: text(&c.snapshot),
            of_path: text(&c.of_path),
            message: &c.message,
        }
    }
}

/// `tacid data status`.
#[derive(Debug, Serialize)]
pub struct Status<'a> {
    stem_running: bool,
    /// The staged restore (`null`: none), separated by spaces per member.
    staged_snapshot: Option<&'a str>,
    staged_of_path: Option<&'a str>,
    /// `null`: not journalled.
    staged_words: Option<&'a str>,
    staged_by: Option<&'a str>,
    /// The boot's last outcome (`null`, all of them: none was ever read).
    outcome_id: Option<&'a str>,
    outcome_result: Option<&'a str>,
    /// `null` also when the request could not be read.
    outcome_request: Option<&'a str>,
    outcome_reason: Option<&'a str>,
    /// The command that undoes the boot's restore (`null`: nothing was kept to undo it).
    outcome_undo: Option<&'a str>,
    outcome_finished_micros: Option<i64>,
    outcome_new: bool,
    unknown_origin: u32,
    failed_sets: u32,
    journal_path: &'a str,
    /// The filesystem's space (`null`, all four: the stem did not say).
    free_bytes: Option<u64>,
    size_bytes: Option<u64>,
    floor_bytes: u64,
    /// 0: no hard floor.
    hard_floor_bytes: Option<u64>,
    deletions_pending: Option<u32>,
    /// `null`: the request file, if any, is good.
    staged_problem: Option<&'a str>,
    /// Each sealed target's last verification, in target name order (a target never
    /// verified is not here).
    verifications: Vec<LastVerified<'a>>,
}

/// A sealed target's last verification, in `status`.
#[derive(Debug, Serialize)]
pub struct LastVerified<'a> {
    target: &'a str,
    when_micros: i64,
    /// Who asked, or the rule (`timer of usb`).
    by: Option<&'a str>,
    good: u32,
    /// What failed: each copy (`name`), or the act (`name` null: nothing was checked).
    failed: Vec<CopyVerified<'a>>,
}

/// One copy read back and checked.
#[derive(Debug, Serialize)]
pub struct CopyVerified<'a> {
    name: Option<&'a str>,
    ok: bool,
    /// `null` when good.
    problem: Option<&'a str>,
    bytes_read: u64,
}

impl<'a> From<&'a wire::CopyVerified> for CopyVerified<'a> {
    fn from(c: &'a wire::CopyVerified) -> Self {
        CopyVerified {
            name: text(&c.name),
            ok: c.ok,
            problem: text(&c.problem),
            bytes_read: c.bytes_read,
        }
    }
}

/// `tacid data verify`.
#[derive(Debug, Serialize)]
pub struct VerifyReport<'a> {
    target: &'a str,
    copies: Vec<CopyVerified<'a>>,
    /// Every copy checked is good.
    ok: bool,
    message: &'a str,
}

impl<'a> From<&'a wire::VerifyReport> for VerifyReport<'a> {
    fn from(r: &'a wire::VerifyReport) -> Self {
        VerifyReport {
            target: &r.target,
            copies: r.copies.iter().map(CopyVerified::from).collect(),
            ok: r.copies.iter().all(|c| c.ok),
            message: &r.message,
        }
    }
}

impl<'a> From<&'a wire::Status> for Status<'a> {
    fn from(s: &'a wire::Status) -> Self {
        let outcome = !s.outcome_id.is_empty();
        // A filesystem has a size: 0 is the bus's "the stem did not say".
        let space = s.size_bytes > 0;
        Status {
            stem_running: s.stem_running,
            staged_snapshot: text(&s.staged_snapshot),
            staged_of_path: text(&s.staged_of_path),
            staged_words: text(&s.staged_words),
            staged_by: text(&s.staged_by),
            outcome_id: text(&s.outcome_id),
            outcome_result: text(&s.outcome_result),
            outcome_request: text(&s.outcome_request),
            outcome_reason: text(&s.outcome_reason),
            outcome_undo: text(&s.outcome_undo),
            outcome_finished_micros: outcome.then_some(s.outcome_finished_micros),
            outcome_new: s.outcome_new,
            unknown_origin: s.unknown_origin,
            failed_sets: s.failed_sets,
            journal_path: &s.journal_path,
            free_bytes: space.then_some(s.free_bytes),
            size_bytes: space.then_some(s.size_bytes),
            floor_bytes: s.floor_bytes,
            hard_floor_bytes: space.then_some(s.hard_floor_bytes),
            deletions_pending: space.then_some(s.deletions_pending),
            staged_problem: text(&s.staged_problem),
            verifications: s
                .verifications
                .iter()
                .map(|v| LastVerified {
                    target: &v.target,
                    when_micros: v.when_micros,
                    by: text(&v.by),
                    good: v.good,
                    failed: v.failed.iter().map(CopyVerified::from).collect(),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct PruneEntry<'a> {
    name: &'a str,
    of_path: &'a str,
    taken_micros: i64,
    rule: &'a str,
    why: &'a str,
    /// `null`: it went (or would go); else why it stays or what failed.
    note: Option<&'a str>,
}

fn prune_entries(e: &[wire::PruneEntry]) -> Vec<PruneEntry<'_>> {
    e.iter()
        .map(|e| PruneEntry {
            name: &e.name,
            of_path: &e.of_path,
            taken_micros: e.taken_micros,
            rule: &e.rule,
            why: &e.why,
            note: text(&e.note),
        })
        .collect()
}

/// `tacid data prune`.
#[derive(Debug, Serialize)]
pub struct PruneReport<'a> {
    dry_run: bool,
    deleted: Vec<PruneEntry<'a>>,
    spared: Vec<PruneEntry<'a>>,
    failed: Vec<PruneEntry<'a>>,
    policy: &'a str,
    free_bytes: u64,
    floor_bytes: u64,
    floor_unmet: bool,
}

impl<'a> From<&'a wire::PruneReport> for PruneReport<'a> {
    fn from(r: &'a wire::PruneReport) -> Self {
        PruneReport {
            dry_run: r.dry_run,
            deleted: prune_entries(&r.deleted),
            spared: prune_entries(&r.spared),
            failed: prune_entries(&r.failed),
            policy: &r.policy,
            free_bytes: r.free_bytes,
            floor_bytes: r.floor_bytes,
            floor_unmet: r.floor_unmet,
        }
    }
}

/// `tacid data delete`.
#[derive(Debug, Serialize)]
pub struct Deleted<'a> {
    name: &'a str,
    of_path: &'a str,
    message: &'a str,
}

impl<'a> From<&'a wire::Deleted> for Deleted<'a> {
    fn from(d: &'a wire::Deleted) -> Self {
        Deleted {
            name: &d.name,
            of_path: &d.of_path,
            message: &d.message,
        }
    }
}

/// `tacid data keep`.
#[derive(Debug, Serialize)]
pub struct KeepMarked<'a> {
    name: &'a str,
    kept: bool,
    changed: bool,
    message: &'a str,
}

impl<'a> From<&'a wire::KeepMarked> for KeepMarked<'a> {
    fn from(k: &'a wire::KeepMarked) -> Self {
        KeepMarked {
            name: &k.name,
            kept: k.kept,
            changed: k.changed,
            message: &k.message,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct CopyMade<'a> {
    name: &'a str,
    of_path: &'a str,
    /// `null`: a full send.
    parent: Option<&'a str>,
    incremental: bool,
    bytes: u64,
    received_uuid: &'a str,
    took_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct CopyFailed<'a> {
    name: &'a str,
    of_path: &'a str,
    error: &'a str,
    reason: &'a str,
}

#[derive(Debug, Serialize)]
pub struct CopyDeleted<'a> {
    name: &'a str,
    of_path: &'a str,
    why: &'a str,
    /// `null`: it went; else what failed.
    note: Option<&'a str>,
}

/// `tacid data copy`.
#[derive(Debug, Serialize)]
pub struct CopyReport<'a> {
    target: &'a str,
    copied: Vec<CopyMade<'a>>,
    already_there: &'a [String],
    failed: Vec<CopyFailed<'a>>,
    deleted: Vec<CopyDeleted<'a>>,
    /// `null`: retention did not run.
    retention: Option<&'a str>,
    message: &'a str,
}

impl<'a> From<&'a wire::CopyReport> for CopyReport<'a> {
    fn from(r: &'a wire::CopyReport) -> Self {
        CopyReport {
            target: &r.target,
            copied: r
                .copied
                .iter()
                .map(|c| CopyMade {
                    name: &c.name,
                    of_path: &c.of_path,
                    parent: text(&c.parent),
                    incremental: c.incremental,
                    bytes: c.bytes,
                    received_uuid: &c.received_uuid,
                    took_ms: c.took_ms,
                })
                .collect(),
            already_there: &r.already_there,
            failed: r
                .failed
                .iter()
                .map(|f| CopyFailed {
                    name: &f.name,
                    of_path: &f.of_path,
                    error: &f.error,
                    reason: &f.reason,
                })
                .collect(),
            deleted: r
                .deleted
                .iter()
                .map(|d| CopyDeleted {
                    name: &d.name,
                    of_path: &d.of_path,
                    why: &d.why,
                    note: text(&d.note),
                })
                .collect(),
            retention: text(&r.retention),
            message: &r.message,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct CopyHeld<'a> {
    name: &'a str,
    of: &'a str,
    of_path: &'a str,
    /// `null`: the name says nothing of when.
    taken_micros: Option<i64>,
    /// `null`: not shown to somebody who may only look.
    received_uuid: Option<&'a str>,
    local: bool,
    /// `null`: nothing is known wrong with it; else what (a sealed copy whose manifest does
    /// not authenticate, or that failed its last verification).
    problem: Option<&'a str>,
}

/// `tacid data copies`.
#[derive(Debug, Serialize)]
pub struct TargetCopies<'a> {
    target: &'a str,
    copies: Vec<CopyHeld<'a>>,
    retention: &'a str,
}

impl<'a> From<&'a wire::TargetCopies> for TargetCopies<'a> {
    fn from(t: &'a wire::TargetCopies) -> Self {
        TargetCopies {
            target: &t.target,
            copies: t
                .copies
                .iter()
                .map(|c| CopyHeld {
                    name: &c.name,
                    of: &c.of,
                    of_path: &c.of_path,
                    taken_micros: (c.taken_micros != 0).then_some(c.taken_micros),
                    received_uuid: text(&c.received_uuid),
                    local: c.local,
                    problem: text(&c.problem),
                })
                .collect(),
            retention: &t.retention,
        }
    }
}

/// `tacid data fetch`.
#[derive(Debug, Serialize)]
pub struct Fetched<'a> {
    target: &'a str,
    snapshot: Snapshot<'a>,
    /// `null`: a full send.
    parent: Option<&'a str>,
    bytes: u64,
    message: &'a str,
}

impl<'a> From<&'a wire::Fetched> for Fetched<'a> {
    fn from(f: &'a wire::Fetched) -> Self {
        Fetched {
            target: &f.target,
            snapshot: Snapshot::from(&f.snapshot),
            parent: text(&f.parent),
            bytes: f.bytes,
            message: &f.message,
        }
    }
}

/// `tacid data open`.
#[derive(Debug, Serialize)]
pub struct Opened<'a> {
    snapshot: &'a str,
    of_path: &'a str,
    path: &'a str,
    whole: bool,
    shows: &'a str,
    /// `null`: the open snapshot holds no home of the caller's.
    your_home: Option<&'a str>,
    already_open: bool,
    opened_micros: i64,
    idle_close_micros: i64,
    message: &'a str,
}

impl<'a> From<&'a wire::Opened> for Opened<'a> {
    fn from(o: &'a wire::Opened) -> Self {
        Opened {
            snapshot: &o.snapshot,
            of_path: &o.of_path,
            path: &o.path,
            whole: o.whole,
            shows: &o.shows,
            your_home: text(&o.your_home),
            already_open: o.already_open,
            opened_micros: o.opened_micros,
            idle_close_micros: o.idle_close_micros,
            message: &o.message,
        }
    }
}

/// `tacid data close`.
#[derive(Debug, Serialize)]
pub struct ClosedOpen<'a> {
    snapshot: &'a str,
    closed: bool,
    message: &'a str,
}

impl<'a> From<&'a wire::ClosedOpen> for ClosedOpen<'a> {
    fn from(c: &'a wire::ClosedOpen) -> Self {
        ClosedOpen {
            snapshot: &c.snapshot,
            closed: c.closed,
            message: &c.message,
        }
    }
}

/// `tacid data diff`.
#[derive(Debug, Serialize)]
pub struct PartChanges<'a> {
    snapshot: &'a str,
    of_path: &'a str,
    subtree: &'a str,
    at_least: bool,
    files_added: u64,
    files_modified: u64,
    files_removed: u64,
    directories_added: u64,
    directories_modified: u64,
    directories_removed: u64,
    /// `null`: not known for a subtree (Btrfs counts them for the whole subvolume only).
    bytes_written: Option<u64>,
    paths: Vec<ChangedPath<'a>>,
    paths_cut: bool,
    paths_hidden: u64,
}

impl<'a> From<&'a wire::PartChanges> for PartChanges<'a> {
    fn from(c: &'a wire::PartChanges) -> Self {
        PartChanges {
            snapshot: &c.snapshot,
            of_path: &c.of_path,
            subtree: &c.subtree,
            at_least: c.at_least,
            files_added: c.files_added,
            files_modified: c.files_modified,
            files_removed: c.files_removed,
            directories_added: c.directories_added,
            directories_modified: c.directories_modified,
            directories_removed: c.directories_removed,
            bytes_written: c.bytes_known.then_some(c.bytes_written),
            paths: paths(&c.paths),
            paths_cut: c.paths_cut,
            paths_hidden: c.paths_hidden,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::{json, Value};

    fn value<T: Serialize>(body: T) -> Value {
        serde_json::to_value(document(body)).unwrap()
    }

    /// A snapshot on disk the journal never heard of, as the keeper lists it.
    fn unknown_origin_row() -> wire::SnapshotRow<'static> {
        wire::SnapshotRow {
            name: "@home.2026-12-02T110000.000000Z",
            of: "@home",
            of_path: "/home",
            taken_micros: 1_796_209_200_000_000,
            reason: "",
            asked_by: "",
            asked_by_uid: u32::MAX,
            origin: "unknown-origin",
            pre_switch: false,
            pinned: false,
            set_id: 0,
            cut_units: "",
            replaced_by_restore_of: "",
            replaced_micros: 0,
            kept_until_micros: 0,
        }
    }

    fn listed(rows: &[wire::SnapshotRow<'_>], copies: &[wire::CopyOfRow<'_>]) -> Value {
        let mut out = Vec::new();
        write_list(&mut out, rows, copies, &[]).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn an_unknown_uid_set_and_reason_are_null_not_stand_ins() {
        let v = listed(&[unknown_origin_row()], &[]);
        assert_eq!(v["schema"], SCHEMA);
        let e = &v["snapshots"][0];
        assert_eq!(e["asked_by_uid"], Value::Null, "{e}");
        assert_eq!(e["asked_by"], Value::Null, "{e}");
        assert_eq!(e["set_id"], Value::Null, "{e}");
        assert_eq!(e["reason"], Value::Null, "{e}");
        assert_eq!(e["open_at"], Value::Null, "{e}");
        assert_eq!(e["switch"], Value::Null, "{e}");
        assert!(!v.to_string().contains("4294967295"), "{v}");
    }

    #[test]
    fn a_list_and_its_entries_say_the_same_as_the_nested_list() {
        let journalled = wire::SnapshotRow {
            reason: "before the test",
            asked_by: "alice",
            asked_by_uid: 1000,
            origin: "journal",
            set_id: 7,
            ..unknown_origin_row()
        };
        let copies = [
            wire::CopyOfRow {
                row: 0,
                target: "nas",
                last_common_parent: false,
                verify_failed: "",
            },
            wire::CopyOfRow {
                row: 0,
                target: "usb",
                last_common_parent: true,
                verify_failed: "",
            },
        ];
        let v = listed(&[journalled], &copies);
        let mut e = v["snapshots"][0].clone();
        assert_eq!(
            e.as_object_mut().unwrap().remove("open_at"),
            Some(Value::Null)
        );
        let entry = journalled.to_entry(vec!["nas".into(), "usb".into()], vec!["usb".into()]);
        assert_eq!(serde_json::to_value(Snapshot::from(&entry)).unwrap(), e);
        assert_eq!(
            e,
            json!({
                "name": "@home.2026-12-02T110000.000000Z", "of": "@home", "of_path": "/home",
                "taken_micros": 1_796_209_200_000_000_i64, "reason": "before the test",
                "asked_by": "alice", "asked_by_uid": 1000, "origin": "journal",
                "pre_switch": false, "pinned": false, "set_id": 7,
                "copies": ["nas", "usb"], "last_common_parent_of": ["usb"],
                "failed_verification": {}, "switch": null, "consistent_cut": null,
                "replaced": null
            })
        );
        // A copy whose last verification failed says so, by target.
        let failed = [wire::CopyOfRow {
            row: 0,
            target: "cloud",
            last_common_parent: false,
            verify_failed: "part 3 of @home.x: its digest is not the manifest's",
        }];
        let v = listed(&[journalled], &failed);
        assert_eq!(
            v["snapshots"][0]["failed_verification"],
            json!({"cloud": "part 3 of @home.x: its digest is not the manifest's"})
        );
        assert_eq!(v["snapshots"][0]["copies"], json!(["cloud"]));
        // Root's uid is a uid: 0 stays 0.
        let root = wire::SnapshotRow {
            asked_by_uid: 0,
            ..journalled
        };
        assert_eq!(listed(&[root], &[])["snapshots"][0]["asked_by_uid"], 0);
    }

    #[test]
    fn an_empty_list_is_an_object_with_no_snapshots() {
        assert_eq!(listed(&[], &[]), json!({"schema": SCHEMA, "snapshots": []}));
    }

    #[test]
    fn a_failure_without_a_bus_name_has_a_null_error() {
        let f = crate::Failure {
            code: 8,
            name: String::new(),
            message: "cannot connect".into(),
        };
        assert_eq!(
            value(Failure::from(&f)),
            json!({"schema": SCHEMA, "error": null, "message": "cannot connect", "exit_code": 8})
        );
    }

    #[test]
    fn status_without_a_staged_restore_outcome_or_space_is_null_there() {
        let s = wire::Status {
            stem_running: false,
            staged_snapshot: String::new(),
            staged_of_path: String::new(),
            staged_words: String::new(),
            staged_by: String::new(),
            outcome_id: String::new(),
            outcome_result: String::new(),
            outcome_request: String::new(),
            outcome_reason: String::new(),
            outcome_undo: String::new(),
            outcome_finished_micros: 0,
            outcome_new: false,
            unknown_origin: 0,
            failed_sets: 0,
            journal_path: "/var/lib/tacid/journal.sqlite".into(),
            free_bytes: 0,
            size_bytes: 0,
            floor_bytes: 1 << 30,
            hard_floor_bytes: 0,
            deletions_pending: 0,
            staged_problem: String::new(),
            verifications: Vec::new(),
        };
        let v = value(Status::from(&s));
        assert_eq!(v["verifications"], json!([]));
        for null in [
            "staged_snapshot",
            "staged_words",
            "outcome_id",
            "outcome_finished_micros",
            "free_bytes",
            "size_bytes",
            "hard_floor_bytes",
            "deletions_pending",
            "staged_problem",
        ] {
            assert_eq!(v[null], Value::Null, "{null}: {v}");
        }
        assert_eq!(v["floor_bytes"], 1u64 << 30);
        let known = wire::Status {
            stem_running: true,
            free_bytes: 5,
            size_bytes: 10,
            ..s
        };
        let v = value(Status::from(&known));
        assert_eq!(
            (
                &v["free_bytes"],
                &v["hard_floor_bytes"],
                &v["deletions_pending"]
            ),
            (&json!(5), &json!(0), &json!(0))
        );
    }

    #[test]
    fn a_verification_says_each_copy_and_whether_all_were_good() {
        let r = wire::VerifyReport {
            target: "cloud".into(),
            copies: vec![
                wire::CopyVerified {
                    name: "@home.a".into(),
                    ok: true,
                    problem: String::new(),
                    bytes_read: 10,
                },
                wire::CopyVerified {
                    name: "@home.b".into(),
                    ok: false,
                    problem: "part 2 is missing".into(),
                    bytes_read: 4,
                },
            ],
            message: "1 of 2 copies on cloud failed verification".into(),
        };
        let v = value(VerifyReport::from(&r));
        assert_eq!(
            v,
            json!({"schema": SCHEMA, "target": "cloud", "ok": false,
                   "message": "1 of 2 copies on cloud failed verification",
                   "copies": [
                       {"name": "@home.a", "ok": true, "problem": null, "bytes_read": 10},
                       {"name": "@home.b", "ok": false, "problem": "part 2 is missing",
                        "bytes_read": 4}]})
        );
        let s = wire::Status {
            verifications: vec![wire::LastVerified {
                target: "cloud".into(),
                when_micros: 5,
                by: "timer of cloud".into(),
                good: 0,
                failed: vec![wire::CopyVerified {
                    name: String::new(),
                    ok: false,
                    problem: "the copier is not running".into(),
                    bytes_read: 0,
                }],
            }],
            ..wire::Status::default()
        };
        let v = value(Status::from(&s));
        assert_eq!(
            v["verifications"],
            json!([{"target": "cloud", "when_micros": 5, "by": "timer of cloud", "good": 0,
                    "failed": [{"name": null, "ok": false,
                                "problem": "the copier is not running", "bytes_read": 0}]}])
        );
    }

    #[test]
    fn what_was_not_counted_or_not_known_is_null() {
        let c = wire::PartChanges {
            snapshot: "s".into(),
            of_path: "/home".into(),
            subtree: "/home/alice".into(),
            at_least: false,
            files_added: 1,
            files_modified: 0,
            files_removed: 0,
            directories_added: 0,
            directories_modified: 0,
            directories_removed: 0,
            bytes_written: 0,
            bytes_known: false,
            paths: vec![],
            paths_cut: false,
            paths_hidden: 0,
        };
        let v = value(PartChanges::from(&c));
        assert_eq!(v["bytes_written"], Value::Null);
        assert!(v.get("bytes_known").is_none(), "{v}");
        assert!(changes(&wire::ChangeCount::default()).is_none());
        let held = wire::CopyHeld {
            name: "x".into(),
            of: "@home".into(),
            of_path: "/home".into(),
            taken_micros: 0,
            received_uuid: String::new(),
            local: true,
            problem: String::new(),
        };
        let t = wire::TargetCopies {
            target: "usb".into(),
            copies: vec![held],
            retention: "keeps 3".into(),
        };
        let v = value(TargetCopies::from(&t));
        assert_eq!(
            (
                &v["copies"][0]["taken_micros"],
                &v["copies"][0]["received_uuid"]
            ),
            (&Value::Null, &Value::Null)
        );
    }
}
