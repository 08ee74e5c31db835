//! The far side of an SSH target: the forced command `copies/tacid-copy-target` and the
//! line protocol spoken with it. Verbs: `list`, `receive NAME` (a stream on stdin),
//! `send NAME` (a stream on stdout), `delete NAME`; the answer is on stdout, the reason on
//! stderr, the kind of failure in the exit code.

use layout::copies::TargetName;
use layout::SnapshotName;
use uuid::Uuid;

use super::process::{capped, Ran};
use super::{CopyError, CopyOnTarget, MAX_COPIES_LISTED};

/// The exit codes of the far side's forced command (copies/tacid-copy-target).
mod exit {
    pub const BAD_COMMAND: i32 = 2;
    pub const NOT_BTRFS: i32 = 3;
    pub const NO_SPACE: i32 = 4;
    pub const NO_SUCH_COPY: i32 = 5;
    pub const ALREADY_THERE: i32 = 6;
    /// ssh's own failures (connection, authentication, host key).
    pub const SSH: i32 = 255;
}

/// Classify how the far side of `target` ended (an act on `name`, when it names one).
pub fn result(target: &TargetName, ran: Ran, name: Option<SnapshotName>) -> Result<Ran, CopyError> {
    let target = target.clone();
    let reason = capped(&ran.stderr);
    match ran.code {
        Some(0) => Ok(ran),
        Some(exit::SSH) => {
            if ran.stderr.contains("HOST IDENTIFICATION HAS CHANGED")
                || ran.stderr.contains("Host key verification failed")
            {
                Err(CopyError::HostKeyChanged { target, reason })
            } else {
                Err(CopyError::TargetUnreachable { target, reason })
            }
        }
        Some(exit::NOT_BTRFS) => Err(CopyError::TargetNotBtrfs { target, reason }),
        Some(exit::NO_SPACE) => Err(CopyError::TargetFull { target, reason }),
        Some(exit::NO_SUCH_COPY) => match name {
            Some(name) => Err(CopyError::NoSuchCopy { target, name }),
            None => Err(CopyError::Failed(reason)),
        },
        Some(exit::ALREADY_THERE) => Err(CopyError::AlreadyHere(format!(
            "target {target} already holds that copy: {reason}"
        ))),
        Some(exit::BAD_COMMAND) => Err(CopyError::Failed(format!(
            "the far side of {target} refused the command (is its forced command tacid-copy-target?): {reason}"
        ))),
        code => match name {
            Some(name) => Err(CopyError::TransferFailed {
                target,
                name,
                reason: format!("exit {code:?}: {reason}"),
            }),
            None => Err(CopyError::Failed(format!("target {target}: exit {code:?}: {reason}"))),
        },
    }
}

/// Whether the far side's answer to `receive NAME` confirms the copy: its last line is
/// "received NAME RECEIVED_UUID", with `identity` as the UUID, and nothing else.
pub fn confirms_receipt(answer: &str, name: SnapshotName, identity: Uuid) -> bool {
    let line = answer.lines().last().unwrap_or("");
    let mut words = line.split(' ');
    words.next() == Some("received")
        && words.next() == Some(name.to_string().as_str())
        && words
            .next()
            .and_then(|u| Uuid::parse_str(u).ok())
            .is_some_and(|u| u == identity)
        && words.next().is_none()
}

/// Parse the far side's `list`: `NAME<TAB>UUID<TAB>RECEIVED_UUID` lines, strictly.
pub fn parse_list(text: &str) -> Result<Vec<CopyOnTarget>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split('\t').collect();
        let [name, uuid, received] = parts[..] else {
            return Err(format!(
                "the far side's list has a bad line: {:?}",
                capped(line)
            ));
        };
        let bad = || format!("the far side's list has a bad line: {:?}", capped(line));
        out.push(CopyOnTarget {
            name: SnapshotName::parse(name).map_err(|_| bad())?,
            uuid: Uuid::parse_str(uuid).map_err(|_| bad())?,
            received_uuid: Uuid::parse_str(received).map_err(|_| bad())?,
        });
        if out.len() > MAX_COPIES_LISTED {
            return Err("the far side lists too many copies".into());
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.name));
    Ok(out)
}
