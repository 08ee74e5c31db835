//! `tacid data list` from the keeper's own state.
//!
//! The keeper keeps the last list it made, with what it was made from: the store's
//! generation as the stem answered it (`Stem1.ListSince`) and the journal's change count.
//! A list asks the stem only "has the store changed since this generation?"; when neither
//! it nor the journal has, the kept list is the answer, shared, not copied. When either has,
//! the list is made again from the stem's answer and the journal, read in one pass each.
//! The generation changes with anything a list shows, whoever changed it (the stem's own
//! acts, root's `btrfs subvolume delete` by hand, a boot's restore, a fetch), so the kept
//! list is never staler than a fresh one would be.
//!
//! The list is kept compact — every string of every row in one buffer, rows of plain fields
//! — and sent flat (`ListRows`: one array of plain structs, and the copies as one array of
//! row and target), written into the reply straight from that buffer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use layout::escape::Escaped;
use layout::SubvolumeName;
use serde::ser::{Serialize, SerializeSeq, Serializer};
use zbus::{Signature, Type};

use layout::copies::CopiesConfig;

use crate::handles::Handles;
use crate::journal::{Action, Journal, JournalError, ListedRequest};
use crate::reconcile::Reconcile;
use crate::stem_client::stem_error;
use crate::stem_client::OnDisk;
use crate::wire::{CopyOfRow, KeeperError, SnapshotEntry, SnapshotRow};

/// A piece of [`Listed::text`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    at: u32,
    len: u32,
}

#[derive(Debug, Clone, Copy)]
struct Row {
    name: Span,
    of: Span,
    of_path: &'static str,
    taken_micros: i64,
    reason: Span,
    asked_by: Span,
    asked_by_uid: u32,
    journalled: bool,
    /// The keeper fetched it from a copy target (its reason says which).
    fetched: bool,
    pre_switch: bool,
    pinned: bool,
    set_id: i64,
    cut_units: Span,
    /// It holds what a restore replaced: the snapshot put back in its place, the boot, and
    /// until when retention keeps it (adr/0027).
    replaced_by: Span,
    replaced_micros: i64,
    kept_until_micros: i64,
}

/// A list as the keeper keeps and sends it: newest first.
#[derive(Debug, Default)]
pub struct Listed {
    text: String,
    rows: Vec<Row>,
    /// (row, target, the row is the last common parent with it, what failed at its last
    /// verification), rows in order, each row's targets in name order.
    copies: Vec<(u32, Span, bool, Span)>,
}

impl Listed {
    fn push_text(&mut self, s: &str) -> Span {
        let at = self.text.len();
        self.text.push_str(s);
        span(at, self.text.len())
    }

    fn str(&self, s: Span) -> &str {
        &self.text[s.at as usize..(s.at + s.len) as usize]
    }

    /// How many snapshots.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn row(&self, r: &Row) -> SnapshotRow<'_> {
        SnapshotRow {
            name: self.str(r.name),
            of: self.str(r.of),
            of_path: r.of_path,
            taken_micros: r.taken_micros,
            reason: self.str(r.reason),
            asked_by: self.str(r.asked_by),
            asked_by_uid: r.asked_by_uid,
            origin: match (r.journalled, r.fetched) {
                (true, true) => "fetched",
                (true, false) => "journal",
                (false, _) if r.replaced_micros != 0 => "replaced",
                (false, _) => "unknown-origin",
            },
            pre_switch: r.pre_switch,
            pinned: r.pinned,
            set_id: r.set_id,
            cut_units: self.str(r.cut_units),
            replaced_by_restore_of: self.str(r.replaced_by),
            replaced_micros: r.replaced_micros,
            kept_until_micros: r.kept_until_micros,
        }
    }

    /// The rows, in order.
    pub fn rows(&self) -> impl Iterator<Item = SnapshotRow<'_>> {
        self.rows.iter().map(|r| self.row(r))
    }

    /// The targets holding copies, by row.
    pub fn copies(&self) -> impl Iterator<Item = CopyOfRow<'_>> {
        self.copies
            .iter()
            .map(|&(row, t, parent, failed)| CopyOfRow {
                row,
                target: self.str(t),
                last_common_parent: parent,
                verify_failed: self.str(failed),
            })
    }

    /// The list as `List` answers it (one entry per snapshot, its copies nested).
    pub fn to_entries(&self) -> Vec<SnapshotEntry> {
        let mut copies = self.copies.iter().peekable();
        self.rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut targets = Vec::new();
                let mut parent_of = Vec::new();
                while let Some(&&(row, t, parent, _)) = copies.peek() {
                    if row as usize != i {
                        break;
                    }
                    targets.push(self.str(t).to_owned());
                    if parent {
                        parent_of.push(self.str(t).to_owned());
                    }
                    copies.next();
                }
                self.row(r).to_entry(targets, parent_of)
            })
            .collect()
    }
}

fn span(at: usize, end: usize) -> Span {
    // A list's text stays far below 4 GiB: at most tens of thousands of rows of capped
    // strings (keeper::caps).
    Span {
        at: at as u32,
        len: (end - at) as u32,
    }
}

/// The rows of a [`Listed`], serialized straight from it (`ListRows`' first answer).
#[derive(Debug, Clone)]
pub struct ListedRows(pub Arc<Listed>);

impl Serialize for ListedRows {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.rows.len()))?;
        for row in self.0.rows() {
            seq.serialize_element(&row)?;
        }
        seq.end()
    }
}

impl Type for ListedRows {
    const SIGNATURE: &'static Signature = <Vec<SnapshotRow<'static>> as Type>::SIGNATURE;
}

/// The copies of a [`Listed`], serialized straight from it (`ListRows`' second answer).
#[derive(Debug, Clone)]
pub struct ListedCopies(pub Arc<Listed>);

impl Serialize for ListedCopies {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.copies.len()))?;
        for c in self.0.copies() {
            seq.serialize_element(&c)?;
        }
        seq.end()
    }
}

impl Type for ListedCopies {
    const SIGNATURE: &'static Signature = <Vec<CopyOfRow<'static>> as Type>::SIGNATURE;
}

/// The last list made, and what it was made from.
#[derive(Debug)]
struct Kept {
    /// The store's generation the stem answered with the snapshots listed.
    generation: Vec<u64>,
    /// The journal's change count when the list was made.
    journal_changes: u64,
    listed: Arc<Listed>,
}

/// The keeper's kept list (at most one).
#[derive(Debug, Default)]
struct ListCache(Mutex<Option<Kept>>);

impl ListCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Kept>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the journal says of a listed snapshot, its words already in the list's text.
#[derive(Debug, Clone, Copy)]
struct Journalled {
    /// The set that took it; 0 when a fetch brought it (a fetch is no set).
    set_id: i64,
    fetched: bool,
    uid: u32,
    pre_switch: bool,
    reason: Span,
    asked_by: Span,
    cut_units: Span,
}

/// The snapshots the stem listed, before the journal is read.
#[derive(Debug, Default)]
struct OnDiskRows {
    listed: Listed,
}

impl OnDiskRows {
    fn push(&mut self, d: OnDisk<'_>) {
        let l = &mut self.listed;
        let name = l.push_text(d.name);
        let of = l.push_text(d.of);
        l.rows.push(Row {
            name,
            of,
            of_path: SubvolumeName::parse(d.of)
                .map(|s| s.display_path())
                .unwrap_or("?"),
            taken_micros: d.taken_micros,
            reason: Span::default(),
            asked_by: Span::default(),
            asked_by_uid: u32::MAX,
            journalled: false,
            fetched: false,
            pre_switch: false,
            pinned: d.staged,
            set_id: 0,
            cut_units: Span::default(),
            replaced_by: Span::default(),
            replaced_micros: 0,
            kept_until_micros: 0,
        });
    }

    /// Add what the journal knows, in order: newest first, and the copies (each marked when
    /// the row is the last common parent with that target, among `configured` targets).
    fn finish(
        self,
        journal: &Journal,
        configured: &std::collections::BTreeSet<&str>,
        replaced_days: u64,
    ) -> Result<Listed, JournalError> {
        let mut l = self.listed;
        {
            let text = &l.text;
            let str = |s: Span| &text[s.at as usize..(s.at + s.len) as usize];
            l.rows.sort_by(|a, b| {
                b.taken_micros
                    .cmp(&a.taken_micros)
                    .then_with(|| str(b.name).cmp(str(a.name)))
            });
        }
        let mut by_name: HashMap<&str, usize> = HashMap::with_capacity(l.rows.len());
        for (i, r) in l.rows.iter().enumerate() {
            by_name.insert(
                &l.text[r.name.at as usize..(r.name.at + r.name.len) as usize],
                i,
            );
        }
        // Found first, written after: the rows' text cannot grow while it is borrowed.
        let mut facts: Vec<(usize, Option<Journalled>)> = Vec::new();
        let mut words = String::new();
        let mut escaped: HashMap<i64, (Span, Span, Span)> = HashMap::new();
        let base = l.text.len();
        journal.each_listed(|name, request: Option<ListedRequest<'_>>| {
            let Some(&i) = by_name.get(name) else { return };
            match request {
                None => facts.push((i, None)),
                Some(r) => {
                    let spans = *escaped.entry(r.id).or_insert_with(|| {
                        let at = base + words.len();
                        let _ = write!(words, "{}", Escaped(r.reason.as_bytes()));
                        let reason = span(at, base + words.len());
                        let at = base + words.len();
                        let _ = write!(words, "{}", Escaped(r.user_name.as_bytes()));
                        let asked_by = span(at, base + words.len());
                        let at = base + words.len();
                        let _ = write!(words, "{}", Escaped(r.cut_units.as_bytes()));
                        (reason, asked_by, span(at, base + words.len()))
                    });
                    facts.push((
                        i,
                        Some(Journalled {
                            set_id: if r.action == Action::Snapshot {
                                r.id
                            } else {
                                0
                            },
                            fetched: r.action == Action::Fetch,
                            uid: r.uid,
                            pre_switch: r.pre_switch,
                            reason: spans.0,
                            asked_by: spans.1,
                            cut_units: spans.2,
                        }),
                    ));
                }
            }
        })?;
        let mut copies: Vec<(u32, String)> = Vec::new();
        let mut failed: HashMap<(u32, String), String> = HashMap::new();
        journal.each_copy(|name, target, problem| {
            if let Some(&i) = by_name.get(name) {
                copies.push((i as u32, target.to_owned()));
                if !problem.is_empty() {
                    // The copier's words name what a target served: escaped here, once.
                    failed.insert(
                        (i as u32, target.to_owned()),
                        Escaped(problem.as_bytes()).to_string(),
                    );
                }
            }
        })?;
        let parents: std::collections::BTreeSet<(u32, String)> = {
            let text = &l.text;
            let str = |s: Span| &text[s.at as usize..(s.at + s.len) as usize];
            let local: Vec<crate::retention::InStore> = l
                .rows
                .iter()
                .map(|r| crate::retention::InStore {
                    name: str(r.name),
                    of: str(r.of),
                    taken_micros: r.taken_micros,
                })
                .collect();
            let held: Vec<(&str, &str)> = copies
                .iter()
                .map(|(i, t)| (t.as_str(), local[*i as usize].name))
                .collect();
            let by_parent = crate::retention::last_common_parents(&local, &held, configured);
            copies
                .iter()
                .filter(|(i, t)| {
                    by_parent
                        .get(local[*i as usize].name)
                        .is_some_and(|ts| ts.contains(t))
                })
                .cloned()
                .collect()
        };
        let replaced = journal.replaced()?;
        let kept_for =
            i64::try_from(replaced_days.saturating_mul(86_400_000_000)).unwrap_or(i64::MAX);
        let mut replaced_facts: Vec<(usize, Span, i64, i64)> = Vec::new();
        for r in &replaced {
            if let Some(&i) = by_name.get(r.name.as_str()) {
                let at = base + words.len();
                let _ = write!(words, "{}", Escaped(r.restored.as_bytes()));
                replaced_facts.push((
                    i,
                    span(at, base + words.len()),
                    r.boot_micros,
                    r.kept_from_micros,
                ));
            }
        }
        l.text.push_str(&words);
        for (i, by, boot, kept_from) in replaced_facts {
            let row = &mut l.rows[i];
            row.replaced_by = by;
            row.replaced_micros = boot;
            row.kept_until_micros = kept_from.saturating_add(kept_for);
        }
        // Later journal rows of one name win, as they always have.
        for (i, request) in facts {
            let row = &mut l.rows[i];
            match request {
                Some(j) => {
                    row.journalled = true;
                    row.fetched = j.fetched;
                    row.set_id = j.set_id;
                    row.asked_by_uid = j.uid;
                    row.pre_switch = j.pre_switch;
                    row.reason = j.reason;
                    row.asked_by = j.asked_by;
                    row.cut_units = j.cut_units;
                }
                None => {
                    row.journalled = false;
                    row.fetched = false;
                    row.set_id = 0;
                    row.asked_by_uid = u32::MAX;
                    row.pre_switch = false;
                    row.reason = Span::default();
                    row.asked_by = Span::default();
                    row.cut_units = Span::default();
                }
            }
        }
        copies.sort();
        for (row, target) in copies {
            let parent = parents.contains(&(row, target.clone()));
            let problem = failed.remove(&(row, target.clone())).unwrap_or_default();
            let t = l.push_text(&target);
            let p = l.push_text(&problem);
            l.copies.push((row, t, parent, p));
        }
        l.text.shrink_to_fit();
        l.rows.shrink_to_fit();
        l.copies.shrink_to_fit();
        Ok(l)
    }
}

/// The list service; owns the last list made.
#[derive(Debug)]
pub struct List {
    h: Handles,
    reconcile: Arc<Reconcile>,
    /// The copy targets, to say which snapshot is the last common parent with which.
    config: Arc<CopiesConfig>,
    /// The last list made, kept while the store and the journal stay as they were.
    cache: ListCache,
    /// Retention's days for what a restore replaced: the list says until when it is kept.
    replaced_days: u64,
}

impl List {
    pub fn new(
        h: Handles,
        reconcile: Arc<Reconcile>,
        config: Arc<CopiesConfig>,
        replaced_days: u64,
    ) -> List {
        List {
            h,
            reconcile,
            config,
            cache: ListCache::default(),
            replaced_days,
        }
    }

    /// Every snapshot, newest first, with what the journal knows of each (`List`).
    pub async fn list(&self, uid: u32) -> Result<Vec<SnapshotEntry>, KeeperError> {
        Ok(self.list_rows(uid).await?.to_entries())
    }

    /// Every snapshot, newest first, with what the journal knows of each, as kept
    /// (`ListRows`): made again only when the store or the journal changed.
    pub async fn list_rows(&self, uid: u32) -> Result<Arc<Listed>, KeeperError> {
        let _turn = self.h.looker_turn(self.h.may_change(uid)).await;
        self.reconcile.ensure().await;
        self.reconcile.settle_leftovers().await;
        let started = std::time::Instant::now();
        let changes = self.h.journal(|j| Ok(j.changes())).await?;
        let kept: Option<(Vec<u64>, Arc<Listed>)> = self
            .cache
            .lock()
            .as_ref()
            .filter(|k| k.journal_changes == changes)
            .map(|k| (k.generation.clone(), k.listed.clone()));
        // With the journal changed, nothing kept is any good: the stem lists everything.
        let known: &[u64] = kept.as_ref().map(|k| k.0.as_slice()).unwrap_or(&[]);
        let mut on_disk = OnDiskRows::default();
        let (generation, changed) = self
            .h
            .stem
            .list_since(known, |d| on_disk.push(d))
            .await
            .map_err(stem_error)?;
        let listed_at = started.elapsed();
        if !changed {
            if let Some((_, listed)) = kept {
                tracing::debug!(?listed_at, count = listed.len(), "list timings (kept)");
                return Ok(listed);
            }
        }
        let configured: std::collections::BTreeSet<String> = self
            .config
            .targets
            .keys()
            .map(|t| t.as_str().to_owned())
            .collect();
        let replaced_days = self.replaced_days;
        let (journal_changes, listed) = self
            .h
            .journal(move |j| {
                let changes = j.changes();
                let configured = configured.iter().map(String::as_str).collect();
                Ok((
                    changes,
                    Arc::new(on_disk.finish(j, &configured, replaced_days)?),
                ))
            })
            .await?;
        *self.cache.lock() = Some(Kept {
            generation,
            journal_changes,
            listed: listed.clone(),
        });
        tracing::debug!(?listed_at, made = ?started.elapsed(), count = listed.len(), "list timings (made)");
        Ok(listed)
    }
}
