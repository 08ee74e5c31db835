//! Sealed targets: the keeper's side. The copier seals, stores, lists, verifies, unseals and
//! deletes; the stem sends into and receives from a pipe the keeper makes and hands over at
//! once (the stream never passes through the keeper). Authority, the journal and the
//! choices (the parent of a copy, what retention keeps) stay here, as for Btrfs targets.

use layout::copies::Target;

use super::{timer_rule, Copies};
use crate::authority::{Act, Authority};
use crate::caps;
use crate::copier_client::copier_error;
use crate::journal::{Action, Asker, Checked};
use crate::wire::{CopyVerified, KeeperError, VerifyReport};

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
    /// Read back and check copies on the sealed target `target` (`names` empty: every copy,
    /// the timer's act); each copy checked is journalled.
    pub async fn verify(
        &self,
        uid: u32,
        target: &str,
        names: &[String],
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
        if !t.is_sealed() {
            let why = not_sealed(target);
            self.refusals
                .journal_refusal_of(&asker, Action::Verify, subject().into(), "", &why)
                .await;
            return Err(KeeperError::InvalidArgument(why));
        }
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
        asked.sort();
        asked.dedup();
        let _turn = self
            .acts
            .try_turn(target)
            .ok_or_else(|| Self::busy(target))?;
        self.verify_turn(&asker, t, asked).await
    }

    /// [`Copies::verify`] once the turn on the target is held.
    async fn verify_turn(
        &self,
        asker: &Asker,
        t: &Target,
        asked: Vec<String>,
    ) -> Result<VerifyReport, KeeperError> {
        let target = t.name.to_string();
        let rule = if asked.is_empty() {
            timer_rule(&target)
        } else {
            String::new()
        };
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
            (n, 0) => format!("{n} copies on {target} verified: every part read back, authentic"),
            (n, f) => format!(
                "{f} of {n} copies on {target} failed verification; `tacid data status` and \
                 `tacid data list` show which (make a new copy of what failed: \
                 `tacid data copy --to {target}`)"
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
