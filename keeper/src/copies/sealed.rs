//! Sealed targets: the keeper's side. The copier seals, stores, lists, verifies, unseals and
//! deletes; the stem sends into and receives from a pipe the keeper makes and hands over at
//! once (the stream never passes through the keeper). Authority, the journal and the
//! choices (the parent of a copy, what retention keeps) stay here, as for Btrfs targets.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use copier_interface::SealedCopy;
use layout::copies::Target;
use layout::escape::escape;
use layout::{SnapshotName, SubvolumeName};

use super::{empty_report, path_of_snapshot, retention_rule, timer_rule, Copies};
use crate::authority::{Act, Authority};
use crate::caps;
use crate::copier_client::{copier_error, CopierError, HandOver};
use crate::journal::{Action, Asker, Checked, CopyAction, CopyEnd, Member, State};
use crate::retention::copies::{
    self as copy_retention, sealed_deletions, sealed_parent, ChainBound, HeldCopy, SealedHeld,
    TargetKeep,
};
use crate::stem_client::{stem_error, DiskSnapshot, StemError};
use crate::wire::{
    CopyDeleted, CopyFailed, CopyHeld, CopyMade, CopyReport, CopyVerified, Fetched, KeeperError,
    SnapshotEntry, TargetCopies, VerifyReport,
};
use crate::words::{count, of_path};

/// The most copies one verification may name (every copy: none named).
pub const MAX_VERIFY_NAMES: usize = 1000;

/// The refusal of an act that needs a sealed target, on one that is not.
fn not_sealed(target: &str) -> String {
    format!(
        "target {target} is not sealed: its copies are Btrfs subvolumes, checked when they \
         are made (read-only, received UUID); `tacid data verify` reads sealed copies back"
    )
}

impl Copies {
    /// Read back and check copies on the sealed target `target` (`names` empty: every
    /// copy); each copy checked is journalled with the caller, and with the rule "timer of
    /// TARGET" when `by_timer` (the target's verify timer calls; it names no copy).
    pub async fn verify(
        &self,
        uid: u32,
        target: &str,
        names: &[String],
        by_timer: bool,
    ) -> Result<VerifyReport, KeeperError> {
        let asker = Authority::asker(uid);
        let t = self
            .configured_target(&asker, Action::Verify, "", target)
            .await?;
        let target = t.name.as_str();
        let subject = || format!("on {target}");
        if let Err(why) = self.h.authority.decide(uid, Act::Change) {
            self.refusals
                .journal_refusal_of(&asker, Action::Verify, subject().into(), "", &why)
                .await;
            return Err(KeeperError::NotAuthorized(why));
        }
        // What the caller sent is checked before anything else is said of it.
        if names.len() > MAX_VERIFY_NAMES {
            return Err(KeeperError::InvalidArgument(format!(
                "{} copies named; at most {MAX_VERIFY_NAMES} at once (name none for every copy)",
                names.len()
            )));
        }
        let mut asked = Vec::with_capacity(names.len());
        for n in names {
            asked.push(caps::parse_snapshot(n)?.to_string());
        }
        if !t.is_sealed() {
            let why = not_sealed(target);
            self.refusals
                .journal_refusal_of(&asker, Action::Verify, subject().into(), "", &why)
                .await;
            return Err(KeeperError::InvalidArgument(why));
        }
        if by_timer && !asked.is_empty() {
            return Err(KeeperError::InvalidArgument(format!(
                "the verify timer of {target} checks every copy there: name no copy"
            )));
        }
        asked.sort();
        asked.dedup();
        let _turn = self
            .acts
            .try_turn(target)
            .await
            .ok_or_else(|| Self::busy(target))?;
        // Who asked is always the caller; the rule says the timer's act, and only that.
        let rule = if by_timer {
            timer_rule(target)
        } else {
            String::new()
        };
        self.verify_turn(&asker, t, asked, rule).await
    }

    /// [`Copies::verify`] once the turn on the target is held.
    async fn verify_turn(
        &self,
        asker: &Asker,
        t: &Target,
        asked: Vec<String>,
        rule: String,
    ) -> Result<VerifyReport, KeeperError> {
        let target = t.name.to_string();
        let answer = self.h.copier.verify(&target, &asked).await;
        let checked: Result<Vec<Checked>, _> = answer.map(|list| {
            list.into_iter()
                .map(|v| Checked {
                    // What the copier says names what a target served: capped here, escaped
                    // where it is shown.
                    name: caps::name(&v.name).into_owned(),
                    ok: v.ok,
                    problem: layout::human::cap(&v.problem, caps::MAX_FAILURE_BYTES).into_owned(),
                    bytes_read: v.bytes_read,
                })
                .collect()
        });
        let record: Result<Vec<Checked>, String> = match &checked {
            Ok(list) => Ok(list.clone()),
            Err(e) => Err(layout::human::cap(&e.to_string(), caps::MAX_FAILURE_BYTES).into_owned()),
        };
        let (asker2, t2, r2) = (asker.clone(), target.clone(), rule);
        self.h
            .journal(move |j| {
                let result = match &record {
                    Ok(list) => Ok(list.as_slice()),
                    Err(why) => Err(why.as_str()),
                };
                j.record_verification(&asker2, &t2, &r2, &asked, result)
            })
            .await?;
        let list = checked.map_err(copier_error)?;
        let failed = list.iter().filter(|c| !c.ok).count();
        let message = match (list.len(), failed) {
            (0, _) => format!("{target} holds no sealed copy to verify"),
            (n, 0) => format!(
                "{} on {target} verified: every part read back, authentic",
                count(n as u64, "copy", "copies")
            ),
            (n, f) => format!(
                "{f} of {} on {target} failed verification; `tacid data status` and \
                 `tacid data list` show which (make a new copy of what failed: \
                 `tacid data copy --to {target}`)",
                count(n as u64, "copy", "copies")
            ),
        };
        Ok(VerifyReport {
            target: target.clone(),
            copies: list
                .into_iter()
                .map(|c| CopyVerified {
                    name: layout::escape::escape(c.name.as_bytes()),
                    ok: c.ok,
                    problem: layout::escape::escape(c.problem.as_bytes()),
                    bytes_read: c.bytes_read,
                })
                .collect(),
            message,
        })
    }
}

/// An act on a sealed target that failed: the keeper's error, the words journalled, and
/// whether every further act on the target would fail alike (the timer stops then).
#[derive(Debug)]
pub(super) struct SealedFailed {
    pub error: KeeperError,
    pub reason: String,
    pub whole_target: bool,
}

impl SealedFailed {
    fn error_name(&self) -> String {
        self.error
            .kind()
            .map(|k| k.name().to_owned())
            .unwrap_or_else(|| "Failed".into())
    }
}

/// Whether the copier's error is of the target (or the copier) as a whole.
fn copier_whole(e: &CopierError) -> bool {
    use copier_interface::ErrorKind as K;
    match e {
        CopierError::NotRunning | CopierError::WentAway | CopierError::NotTheCopier(_) => true,
        CopierError::Refused { kind, .. } => matches!(
            kind,
            K::Unreachable | K::Full | K::NoKey | K::KeyUnsafe | K::NotConfigured | K::NotPermitted
        ),
        CopierError::Bus(_) => false,
    }
}

/// A failure from either side or both of a transfer through a pipe. The copier's error is
/// the one to show when it is of the target or the key (the stem then only saw the pipe
/// close); else the stem's, which is then the cause (the copier only saw the stream end
/// without its END frame).
fn pair_failed(stem: Option<StemError>, copier: Option<CopierError>) -> SealedFailed {
    let mut words = Vec::new();
    if let Some(e) = &stem {
        words.push(format!("the stem: {e}"));
    }
    if let Some(e) = &copier {
        words.push(format!("the copier: {e}"));
    }
    let reason = layout::human::cap(&words.join("; "), caps::MAX_FAILURE_BYTES).into_owned();
    let whole_target = copier.as_ref().is_some_and(copier_whole);
    let error = match (stem, copier) {
        (_, Some(c))
            if copier_whole(&c)
                || matches!(
                    c,
                    CopierError::Refused {
                        kind: copier_interface::ErrorKind::Untrusted,
                        ..
                    }
                ) =>
        {
            copier_error(c)
        }
        (Some(s), _) => match stem_error(s) {
            KeeperError::StemFailed(_) | KeeperError::TransferFailed(_) => {
                KeeperError::TransferFailed(reason.clone())
            }
            other => other,
        },
        (None, Some(c)) => copier_error(c),
        (None, None) => KeeperError::TransferFailed(reason.clone()),
    };
    SealedFailed {
        error,
        reason,
        whole_target,
    }
}

/// A copy as the copier lists it, in the terms of the chains.
fn held_of(c: &SealedCopy) -> Option<SealedHeld> {
    // Only good copies with names of the layout's grammar are tacid's copies.
    if !c.problem.is_empty() {
        return None;
    }
    let n = SnapshotName::parse(&c.name).ok()?;
    Some(SealedHeld {
        name: c.name.clone(),
        of: n.subvolume().to_string(),
        taken_micros: n.taken_unix_micros(),
        uuid: c.uuid.clone(),
        parent_uuid: c.parent_uuid.clone(),
        depth: c.depth,
        stored_bytes: c.stored_bytes,
    })
}

/// A copy the copier could authenticate but found a problem with (a part missing, say) still
/// names its parent: it protects that chain as a good copy does, for a repaired store or a
/// person's later look may want it. Never a candidate for retention itself.
fn protecting_of(c: &SealedCopy) -> Option<SealedHeld> {
    if let Some(h) = held_of(c) {
        return Some(h);
    }
    if c.uuid.is_empty() {
        return None;
    }
    Some(SealedHeld {
        name: c.name.clone(),
        of: String::new(),
        taken_micros: 0,
        uuid: c.uuid.clone(),
        parent_uuid: c.parent_uuid.clone(),
        depth: c.depth,
        stored_bytes: c.stored_bytes,
    })
}

/// The chain bound of a sealed target.
fn bound_of(t: &Target) -> ChainBound {
    match &t.seal {
        Some(s) => ChainBound {
            full_every: s.full_every,
            full_past_bytes: s.full_past_bytes,
        },
        None => ChainBound {
            full_every: 0,
            full_past_bytes: None,
        },
    }
}

impl Copies {
    /// List the sealed target `target` through the copier and record what it holds (the
    /// good copies; pending acts a stopped keeper left are settled by it, as for a Btrfs
    /// target); with the store's snapshots.
    pub(super) async fn list_sealed(
        &self,
        target: &str,
        for_act: bool,
    ) -> Result<(Vec<SealedCopy>, Vec<DiskSnapshot>), KeeperError> {
        // The copier is busy with the target only for a looker's listing while the keeper
        // holds the target's turn: short; an act waits for it, as for a Btrfs target. A
        // looker does not wait (an act may hold the copier for hours).
        let waited = Instant::now();
        let listed = loop {
            match self.h.copier.copies(target).await {
                Err(CopierError::Refused {
                    kind: copier_interface::ErrorKind::Busy,
                    ..
                }) if for_act && waited.elapsed() < super::ACT_WAITS_FOR_LISTING => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                other => break other.map_err(copier_error)?,
            }
        };
        let disk = self.h.stem.list().await.map_err(stem_error)?;
        let pairs: Vec<(String, String)> = listed
            .iter()
            .filter(|c| c.problem.is_empty())
            .map(|c| (caps::name(&c.name).into_owned(), c.uuid.clone()))
            .collect();
        let members: Vec<Member> = disk.iter().map(|d| d.member.clone()).collect();
        let in_flight = self.acts.rows_in_flight();
        let started = self.acts.started_micros;
        let target_owned = target.to_owned();
        if let Err(e) = self
            .h
            .journal(move |j| {
                j.record_target_listing(&target_owned, &pairs, &members, &in_flight, started)
            })
            .await
        {
            tracing::warn!(target, "recording what the target holds: {}", e.message());
        }
        Ok((listed, disk))
    }

    /// What the sealed target `t` holds, for `Copies`.
    pub(super) async fn copies_sealed(
        &self,
        t: &Target,
        may_change: bool,
    ) -> Result<TargetCopies, KeeperError> {
        let target = t.name.as_str();
        let (listed, disk) = self.list_sealed(target, false).await?;
        let local: BTreeSet<&str> = disk.iter().map(|d| d.member.name.as_str()).collect();
        let mut failed: HashMap<String, String> = HashMap::new();
        let owned = target.to_owned();
        let verify_failed = self
            .h
            .journal(move |j| {
                let mut out = Vec::new();
                j.each_copy(|n, t, p| {
                    if t == owned && !p.is_empty() {
                        out.push((n.to_owned(), p.to_owned()));
                    }
                })?;
                Ok(out)
            })
            .await?;
        failed.extend(verify_failed);
        let mut copies: Vec<CopyHeld> = listed
            .iter()
            .map(|c| {
                let parsed = SnapshotName::parse(&c.name).ok();
                let of = parsed
                    .as_ref()
                    .map(|n| n.subvolume().to_string())
                    .unwrap_or_default();
                let problem = if c.problem.is_empty() {
                    failed
                        .get(&c.name)
                        .map(|p| format!("failed its last verification: {p}"))
                        .unwrap_or_default()
                } else {
                    c.problem.clone()
                };
                CopyHeld {
                    // What a target served is shown escaped, and capped.
                    name: escape(caps::name(&c.name).as_bytes()),
                    of_path: of_path(&of).to_owned(),
                    of,
                    taken_micros: parsed.map(|n| n.taken_unix_micros()).unwrap_or_default(),
                    received_uuid: if may_change {
                        escape(layout::human::prefix(&c.uuid, 64).as_bytes())
                    } else {
                        String::new()
                    },
                    local: local.contains(c.name.as_str()),
                    problem: escape(
                        layout::human::cap(&problem, caps::MAX_FAILURE_BYTES).as_bytes(),
                    ),
                }
            })
            .collect();
        copies.sort_by(|a, b| {
            a.taken_micros
                .cmp(&b.taken_micros)
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(TargetCopies {
            target: target.to_owned(),
            copies,
            retention: Self::keep_of(t).describe(),
        })
    }

    /// Copy to the sealed target `t` (the turn on it held): `name`, or (empty) the timer's
    /// act, the newest snapshot of each subvolume it lacks, then its retention.
    pub(super) async fn copy_sealed(
        &self,
        asker: &Asker,
        t: &Target,
        name: &str,
    ) -> Result<CopyReport, KeeperError> {
        let target = t.name.as_str();
        let rule = if name.is_empty() {
            timer_rule(target)
        } else {
            String::new()
        };
        let (listed, disk) = match self.list_sealed(target, true).await {
            Ok(l) => l,
            Err(e) => {
                self.journal_failed_sealed(
                    asker,
                    CopyAction::Copy,
                    target,
                    name,
                    &rule,
                    &e.message(),
                )
                .await;
                return Err(e);
            }
        };
        let mut report = empty_report(target);
        let held_names: BTreeSet<&str> = listed
            .iter()
            .filter(|c| c.problem.is_empty())
            .map(|c| c.name.as_str())
            .collect();
        if !name.is_empty() {
            if held_names.contains(name) {
                report.already_there.push(name.to_owned());
                report.message =
                    format!("{target} already holds a sealed copy of {name}; nothing was sent");
                return Ok(report);
            }
            if !disk.iter().any(|d| d.member.name == name) {
                return Err(KeeperError::NoSuchSnapshot(format!(
                    "there is no snapshot named {name} here; see `tacid data list`"
                )));
            }
            return match self.seal_one(asker, t, name, "", &listed, &disk).await {
                Ok(made) => {
                    report.message = format!(
                        "sealed {name} to {target} ({}, {}); stored, read back and checked",
                        if made.incremental {
                            format!("incremental against {}", made.parent)
                        } else {
                            "a full copy".to_owned()
                        },
                        layout::human::bytes(made.bytes)
                    );
                    report.copied.push(made);
                    Ok(report)
                }
                Err(f) => Err(f.error),
            };
        }
        // The timer's act: the newest snapshot of each snapshotted subvolume.
        let mut newest: BTreeMap<String, (i64, String)> = BTreeMap::new();
        for d in &disk {
            let m = &d.member;
            let snapshotted =
                SubvolumeName::parse(&m.of_subvolume).is_ok_and(|s| s.subvolume().snapshottable());
            if !snapshotted {
                continue;
            }
            let e = newest
                .entry(m.of_subvolume.clone())
                .or_insert((i64::MIN, String::new()));
            if (m.taken_micros, &m.name) > (e.0, &e.1) {
                *e = (m.taken_micros, m.name.clone());
            }
        }
        let mut stop: Option<String> = None;
        for (_, name) in newest.values() {
            if held_names.contains(name.as_str()) {
                report.already_there.push(name.clone());
                continue;
            }
            if let Some(why) = &stop {
                report.failed.push(CopyFailed {
                    name: name.clone(),
                    of_path: path_of_snapshot(name),
                    error: "NotTried".into(),
                    reason: format!("not tried: {why}"),
                });
                continue;
            }
            match self.seal_one(asker, t, name, &rule, &listed, &disk).await {
                Ok(made) => report.copied.push(made),
                Err(f) => {
                    if f.whole_target {
                        stop = Some(f.reason.clone());
                    }
                    report.failed.push(CopyFailed {
                        name: name.clone(),
                        of_path: path_of_snapshot(name),
                        error: f.error_name(),
                        reason: f.reason,
                    });
                }
            }
        }
        let retention_note = match self.list_sealed(target, true).await {
            Ok((listed, disk)) => {
                let keep = Self::keep_of(t);
                report.retention = keep.describe();
                self.sealed_retention(asker, target, &listed, &disk, &keep, &mut report)
                    .await;
                String::new()
            }
            Err(e) => format!("; retention not applied: {}", e.message()),
        };
        report.message = format!(
            "{target}: {} sealed, {} already there, {} failed, {} deleted by its retention{}",
            report.copied.len(),
            report.already_there.len(),
            report.failed.len(),
            report.deleted.iter().filter(|d| d.note.is_empty()).count(),
            retention_note
        );
        tracing::info!(uid = asker.uid, user = %asker.name, rule, "{}", report.message);
        Ok(report)
    }

    /// Journal an act on a sealed target that failed before its transfer began.
    async fn journal_failed_sealed(
        &self,
        asker: &Asker,
        action: CopyAction,
        target: &str,
        name: &str,
        rule: &str,
        reason: &str,
    ) {
        let (a, t, n, r) = (
            asker.clone(),
            target.to_owned(),
            name.to_owned(),
            rule.to_owned(),
        );
        let reason = layout::human::cap(reason, caps::MAX_FAILURE_BYTES).into_owned();
        let end = CopyEnd {
            state: State::Failed,
            outcome: reason.clone(),
            parent: String::new(),
            bytes: 0,
            received_uuid: None,
        };
        let recorded = self
            .h
            .journal(move |j| {
                let id = j.begin_copy(&a, action, &t, &n, &r, "")?;
                j.finish_copy(id, &end)
            })
            .await;
        if let Err(je) = recorded {
            tracing::error!(
                "could not journal a failed {}: {}",
                action.as_str(),
                je.message()
            );
        }
        tracing::warn!(uid = asker.uid, user = %asker.name, rule, target, snapshot = name, "{} {reason}", action.as_str());
    }

    /// Seal one snapshot to `t`, journalled: a pipe, the stem sending into it and the
    /// copier sealing from it at once; "copied" only when both answered so.
    async fn seal_one(
        &self,
        asker: &Asker,
        t: &Target,
        name: &str,
        rule: &str,
        listed: &[SealedCopy],
        disk: &[DiskSnapshot],
    ) -> Result<CopyMade, SealedFailed> {
        let target = t.name.as_str();
        let failed = |error: KeeperError| SealedFailed {
            reason: error.message(),
            error,
            whole_target: false,
        };
        let snap = SnapshotName::parse(name)
            .map_err(|e| failed(KeeperError::InvalidArgument(format!("{name}: {e}"))))?;
        // The snapshot's identity: what the stem's stream names (its received UUID when it
        // was itself fetched), so also what the copy, and a chain against it, are known by.
        let uuid = disk
            .iter()
            .find(|d| d.member.name == name)
            .map(|d| d.identity.clone())
            .ok_or_else(|| {
                failed(KeeperError::NoSuchSnapshot(format!(
                    "there is no snapshot named {name} here; see `tacid data list`"
                )))
            })?;
        let held: Vec<SealedHeld> = listed.iter().filter_map(held_of).collect();
        let in_store = |u: &str| disk.iter().any(|d| d.identity == u);
        let parent = sealed_parent(&snap.subvolume().to_string(), &held, in_store, bound_of(t))
            // A copy is never its own parent (a name sealed again after it was deleted here).
            .filter(|p| p.uuid != uuid);
        // The parent's snapshot in the store, by its identity.
        let (parent_name, parent_uuid) = match parent {
            Some(p) => match disk.iter().find(|d| d.identity == p.uuid) {
                Some(d) => (d.member.name.clone(), p.uuid.clone()),
                None => (String::new(), String::new()),
            },
            None => (String::new(), String::new()),
        };
        let id = self
            .h
            .journal({
                let (asker, target, name, rule) = (
                    asker.clone(),
                    target.to_owned(),
                    name.to_owned(),
                    rule.to_owned(),
                );
                move |j| j.begin_copy(&asker, CopyAction::Copy, &target, &name, &rule, "")
            })
            .await
            .map_err(failed)?;
        let _row = self.acts.row(id);
        let started = Instant::now();
        let (sent, sealed) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
            Ok((r, w)) => {
                // Both calls at once; each end is closed here as its call is sent, so a
                // side that dies closes the pipe under the other.
                tokio::join!(
                    self.h
                        .stem
                        .send_sealed(name, &parent_name, HandOver::new(w)),
                    self.h.copier.seal(
                        target,
                        name,
                        (&uuid, &parent_name, &parent_uuid),
                        HandOver::new(r)
                    )
                )
            }
            Err(e) => (
                Err(StemError::Bus(format!("cannot make a pipe: {e}"))),
                Err(CopierError::Bus("no pipe was made".into())),
            ),
        };
        let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let end_failed = |reason: String| CopyEnd {
            state: State::Failed,
            outcome: reason,
            parent: String::new(),
            bytes: 0,
            received_uuid: None,
        };
        // The copier answers Ok only for a stream that ended with the stem's END frame,
        // whose trailer names this snapshot, stored durably and read back: the copy is whole
        // even when the stem's own answer was lost (it died, or the bus dropped the reply
        // after the END was written). Journalled as copied, with what was lost said.
        let (sent, stem_lost) = match (sent, &sealed) {
            (Err(e), Ok(s)) => (
                Ok((uuid.clone(), String::new(), s.plain_bytes)),
                format!(
                    "; the stem's answer was lost ({}), but the copier had its end of the \
                     stream, naming this snapshot",
                    layout::human::cap(&e.to_string(), 200)
                ),
            ),
            (sent, _) => (sent, String::new()),
        };
        match (sent, sealed) {
            (Ok((sent_uuid, _, bytes)), Ok(s)) if sent_uuid == uuid => {
                let outcome = format!(
                    "sealed to {target} ({}), {} of stream, {} stored in {}, \
                     generation {}, in {:.1} s; stored durably, read back and checked{stem_lost}",
                    if parent_name.is_empty() {
                        "full".to_owned()
                    } else {
                        format!("incremental against {parent_name}, depth {}", s.depth)
                    },
                    count(bytes, "byte", "bytes"),
                    count(s.stored_bytes, "byte", "bytes"),
                    count(u64::from(s.parts), "part", "parts"),
                    s.generation,
                    took_ms as f64 / 1000.0
                );
                let end = CopyEnd {
                    state: State::Complete,
                    outcome: outcome.clone(),
                    parent: parent_name.clone(),
                    bytes,
                    received_uuid: Some(uuid.clone()),
                };
                self.h
                    .journal(move |j| j.finish_copy(id, &end))
                    .await
                    .map_err(failed)?;
                tracing::info!(uid = asker.uid, user = %asker.name, rule, target, snapshot = name, bytes, took_ms, "{outcome}");
                Ok(CopyMade {
                    name: name.to_owned(),
                    of_path: path_of_snapshot(name),
                    incremental: !parent_name.is_empty(),
                    parent: parent_name,
                    bytes,
                    received_uuid: uuid,
                    took_ms,
                })
            }
            (Ok((sent_uuid, _, _)), Ok(_)) => {
                let f = pair_failed(
                    Some(StemError::Bus(format!(
                        "the stem sent a stream of {} for {name}, whose UUID is {uuid}",
                        layout::human::prefix(&sent_uuid, 64)
                    ))),
                    None,
                );
                let end = end_failed(f.reason.clone());
                let _ = self.h.journal(move |j| j.finish_copy(id, &end)).await;
                Err(f)
            }
            (sent, sealed) => {
                let f = pair_failed(sent.err(), sealed.err());
                let end = end_failed(f.reason.clone());
                if let Err(je) = self.h.journal(move |j| j.finish_copy(id, &end)).await {
                    tracing::error!("could not journal a failed copy: {}", je.message());
                }
                tracing::warn!(uid = asker.uid, user = %asker.name, rule, target, snapshot = name, "{}", f.reason);
                Err(f)
            }
        }
    }

    /// Delete on the sealed target what its retention chooses, never a copy that a kept
    /// copy's chain needs; deepest first, each deletion journalled with the rule.
    async fn sealed_retention(
        &self,
        asker: &Asker,
        target: &str,
        listed: &[SealedCopy],
        disk: &[DiskSnapshot],
        keep: &TargetKeep,
        report: &mut CopyReport,
    ) {
        let held: Vec<SealedHeld> = listed.iter().filter_map(held_of).collect();
        let copies: Vec<HeldCopy> = held
            .iter()
            .map(|h| HeldCopy {
                name: h.name.clone(),
                of: h.of.clone(),
                taken_micros: h.taken_micros,
                in_store: disk.iter().any(|d| d.identity == h.uuid),
            })
            .collect();
        let rule = retention_rule(target);
        let protecting: Vec<SealedHeld> = listed.iter().filter_map(protecting_of).collect();
        for d in sealed_deletions(&protecting, copy_retention::plan(&copies, keep)) {
            let why = format!("{rule}: {}", d.why);
            let begun = self
                .h
                .journal({
                    let (asker, target, name, rule, why) = (
                        asker.clone(),
                        target.to_owned(),
                        d.name.clone(),
                        rule.clone(),
                        why.clone(),
                    );
                    move |j| {
                        j.begin_copy(&asker, CopyAction::DeleteCopy, &target, &name, &rule, &why)
                    }
                })
                .await;
            let id = match begun {
                Ok(id) => id,
                Err(e) => {
                    report.deleted.push(CopyDeleted {
                        name: d.name.clone(),
                        of_path: path_of_snapshot(&d.name),
                        why,
                        note: format!("not tried: {}", e.message()),
                    });
                    break;
                }
            };
            let _row = self.acts.row(id);
            let result = self.h.copier.delete(target, &d.name).await;
            // The copier refuses to delete a copy a stored copy's chain needs (one this
            // keeper's listing could not count): that copy is kept, which is no failure.
            let (st, note) = match &result {
                Ok(()) => (State::Complete, String::new()),
                Err(CopierError::Refused {
                    kind: copier_interface::ErrorKind::Needed,
                    ..
                }) => (
                    State::Refused,
                    "kept: a stored copy's chain needs it".to_owned(),
                ),
                Err(e) => (State::Failed, format!("the copier: {e}")),
            };
            let end = CopyEnd {
                state: st,
                outcome: if note.is_empty() {
                    "deleted".to_owned()
                } else {
                    layout::human::cap(&note, caps::MAX_FAILURE_BYTES).into_owned()
                },
                parent: String::new(),
                bytes: 0,
                received_uuid: None,
            };
            if let Err(e) = self.h.journal(move |j| j.finish_copy(id, &end)).await {
                tracing::error!("could not journal a deletion on {target}: {}", e.message());
            }
            tracing::info!(uid = asker.uid, rule, target, copy = %d.name, note, "{why}");
            report.deleted.push(CopyDeleted {
                name: d.name.clone(),
                of_path: path_of_snapshot(&d.name),
                why,
                note,
            });
            if matches!(result, Err(ref e) if copier_whole(e)) {
                break;
            }
        }
    }

    /// Fetch the copy `name` from the sealed target `t` (the turn on it held): the copier
    /// unseals the chain into a pipe (each part checked before it is decrypted) and the stem
    /// receives from it at once; journalled.
    pub(super) async fn fetch_sealed(
        &self,
        asker: &Asker,
        t: &Target,
        snap: &SnapshotName,
    ) -> Result<Fetched, KeeperError> {
        let target = t.name.as_str();
        let name = snap.to_string();
        let (listed, disk) = match self.list_sealed(target, true).await {
            Ok(l) => l,
            Err(e) => {
                self.journal_failed_sealed(
                    asker,
                    CopyAction::Fetch,
                    target,
                    &name,
                    "",
                    &e.message(),
                )
                .await;
                return Err(e);
            }
        };
        if disk.iter().any(|d| d.member.name == name) {
            return Err(KeeperError::AlreadyHere(format!(
                "a snapshot named {name} is already in the local store; nothing was fetched"
            )));
        }
        let copy = listed.iter().find(|c| c.name == name).ok_or_else(|| {
            KeeperError::NoSuchSnapshot(format!(
                "{target} holds no copy named {name}; see `tacid data copies {target}`"
            ))
        })?;
        if !copy.problem.is_empty() {
            return Err(KeeperError::Untrusted(escape(
                layout::human::cap(&copy.problem, caps::MAX_FAILURE_BYTES).as_bytes(),
            )));
        }
        let uuid = copy.uuid.clone();
        let reason = format!("fetched from {target}");
        let id = self
            .h
            .journal({
                let (asker, target, name, reason) = (
                    asker.clone(),
                    target.to_owned(),
                    name.clone(),
                    reason.clone(),
                );
                move |j| j.begin_copy(&asker, CopyAction::Fetch, &target, &name, "", &reason)
            })
            .await?;
        let _row = self.acts.row(id);
        let started = Instant::now();
        let (unsealed, received) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
            Ok((r, w)) => tokio::join!(
                self.h.copier.unseal(target, &name, HandOver::new(w)),
                self.h.stem.receive_sealed(&name, &uuid, HandOver::new(r))
            ),
            Err(e) => (
                Err(CopierError::Bus(format!("cannot make a pipe: {e}"))),
                Err(StemError::Bus("no pipe was made".into())),
            ),
        };
        let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match (unsealed, received) {
            (Ok(u), Ok((d, bytes))) => {
                let message = format!(
                    "fetched {name} from {target} into the local store (its chain: {}, \
                     {} in {:.1} s); every part authenticated before it was received. \
                     `tacid data restore {name}` says what putting {} back to it costs",
                    count(u.chain.len() as u64, "copy", "copies"),
                    layout::human::bytes(bytes),
                    took_ms as f64 / 1000.0,
                    snap.subvolume().display_path()
                );
                let member = Member {
                    taken_micros: snap.taken_unix_micros(),
                    ..d.member.clone()
                };
                self.h
                    .journal({
                        let (message, member) = (message.clone(), member.clone());
                        move |j| {
                            j.finish_copy(
                                id,
                                &CopyEnd {
                                    state: State::Complete,
                                    outcome: message,
                                    parent: String::new(),
                                    bytes,
                                    received_uuid: None,
                                },
                            )?;
                            j.record_fetched(id, &member)
                        }
                    })
                    .await?;
                tracing::info!(uid = asker.uid, user = %asker.name, target, snapshot = %name, "{message}");
                let sub = snap.subvolume();
                Ok(Fetched {
                    target: target.to_owned(),
                    snapshot: SnapshotEntry {
                        name: member.name.clone(),
                        of: sub.to_string(),
                        of_path: sub.display_path().to_owned(),
                        taken_micros: member.taken_micros,
                        reason: escape(reason.as_bytes()),
                        asked_by: escape(asker.name.as_bytes()),
                        asked_by_uid: asker.uid,
                        origin: "fetched".into(),
                        pre_switch: false,
                        pinned: d.staged,
                        // A fetch brings one snapshot back: it is in no set here.
                        set_id: 0,
                        copies: vec![target.to_owned()],
                        last_common_parent_of: Vec::new(),
                        cut_units: String::new(),
                        replaced_by_restore_of: String::new(),
                        replaced_micros: 0,
                        kept_until_micros: 0,
                    },
                    parent: String::new(),
                    bytes,
                    message,
                })
            }
            (unsealed, received) => {
                let f = pair_failed(received.err(), unsealed.err());
                let end = CopyEnd {
                    state: State::Failed,
                    outcome: f.reason.clone(),
                    parent: String::new(),
                    bytes: 0,
                    received_uuid: None,
                };
                self.h.journal(move |j| j.finish_copy(id, &end)).await?;
                tracing::warn!(uid = asker.uid, user = %asker.name, target, snapshot = %name, "fetch {}", f.reason);
                Err(f.error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retention::copies::CopyDeletion;
    use copier_interface::ErrorKind as C;
    use stem_interface::ErrorKind as S;

    fn listed(name: &str, uuid: &str, parent: &str, depth: u32, problem: &str) -> SealedCopy {
        SealedCopy {
            name: name.into(),
            uuid: uuid.into(),
            parent_uuid: parent.into(),
            depth,
            generation: 1,
            plain_bytes: 1,
            stored_bytes: 1,
            created_micros: 0,
            problem: problem.into(),
        }
    }

    #[test]
    fn a_damaged_copy_whose_manifest_is_authentic_keeps_its_chain() {
        let full = "@home.2026-01-01T000000.000000Z";
        let mid = "@home.2026-01-02T000000.000000Z";
        let top = "@home.2026-01-03T000000.000000Z";
        let copies = [
            listed(full, "u0", "", 0, ""),
            listed(mid, "u1", "u0", 1, ""),
            listed(top, "u2", "u1", 2, "part 3 is missing: fetch refuses it"),
            // A listing with nothing authentic to say protects nothing.
            listed("junk", "", "u1", 9, "not a sealed copy"),
        ];
        // Retention, seeing only good copies, would delete both good ones.
        let all: Vec<CopyDeletion> = [full, mid]
            .iter()
            .map(|n| CopyDeletion {
                name: (*n).into(),
                why: "old".into(),
            })
            .collect();
        let good: Vec<SealedHeld> = copies.iter().filter_map(held_of).collect();
        assert_eq!(good.len(), 2);
        assert_eq!(sealed_deletions(&good, all.clone()).len(), 2);
        let protecting: Vec<SealedHeld> = copies.iter().filter_map(protecting_of).collect();
        assert_eq!(protecting.len(), 3);
        let out = sealed_deletions(&protecting, all);
        assert!(out.is_empty(), "the damaged copy's chain went: {out:?}");
    }

    fn copier(kind: C) -> CopierError {
        CopierError::Refused {
            kind,
            message: format!("copier {kind:?}"),
        }
    }

    fn stem(kind: S) -> StemError {
        StemError::Refused {
            kind,
            message: format!("stem {kind:?}"),
        }
    }

    #[test]
    fn a_transfer_failed_on_both_sides_says_both_and_shows_the_cause() {
        // The target full: the stem only saw its pipe close; the copier's is the error.
        let f = pair_failed(Some(stem(S::TransferFailed)), Some(copier(C::Full)));
        assert!(
            matches!(f.error, KeeperError::TargetFull(_)),
            "{:?}",
            f.error
        );
        assert!(f.whole_target);
        assert!(
            f.reason.contains("the stem: ") && f.reason.contains("the copier: "),
            "{}",
            f.reason
        );
        // The copier gone: it names its unit, and the timer stops for the target.
        let f = pair_failed(Some(stem(S::TransferFailed)), Some(CopierError::WentAway));
        assert!(matches!(f.error, KeeperError::CopierNotRunning(_)));
        assert!(f.whole_target);
        // What the target served did not authenticate: that, whatever the stem saw.
        let f = pair_failed(Some(stem(S::TransferFailed)), Some(copier(C::Untrusted)));
        assert!(matches!(f.error, KeeperError::Untrusted(_)));
        assert!(!f.whole_target);
        // The stem refused (no such snapshot): the copier only saw the stream end without
        // its END frame; the stem's is the cause.
        let f = pair_failed(Some(stem(S::NoSuchSnapshot)), Some(copier(C::Failed)));
        assert!(
            matches!(f.error, KeeperError::NoSuchSnapshot(_)),
            "{:?}",
            f.error
        );
        assert!(!f.whole_target);
        // One side only.
        let f = pair_failed(None, Some(copier(C::Unreachable)));
        assert!(matches!(f.error, KeeperError::TargetUnreachable(_)));
        let f = pair_failed(Some(StemError::WentAway), None);
        assert!(
            matches!(f.error, KeeperError::StemNotRunning(_)),
            "{:?}",
            f.error
        );
    }

    #[test]
    fn a_copier_error_is_the_keepers_kind_for_kind() {
        for kind in C::ALL {
            let e = copier_error(copier(kind));
            let expected = match kind {
                C::NotPermitted | C::NoKey | C::KeyUnsafe | C::Failed => "CopierFailed",
                C::InvalidArgument => "InvalidArgument",
                C::NotConfigured => "NoSuchTarget",
                C::Unreachable => "TargetUnreachable",
                C::Untrusted => "Untrusted",
                C::NotFound => "NoSuchSnapshot",
                C::Needed => "Protected",
                C::Full => "TargetFull",
                C::Busy => "TargetBusy",
            };
            assert_eq!(e.kind().map(|k| k.name()), Some(expected), "{kind:?}");
            assert!(
                e.message().contains(&format!("copier {kind:?}")),
                "{kind:?}"
            );
        }
        assert_eq!(
            copier_error(CopierError::NotRunning)
                .kind()
                .map(|k| k.name()),
            Some("CopierNotRunning")
        );
    }
}
