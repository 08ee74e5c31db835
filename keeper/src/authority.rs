//! Who may ask for what (adr/0011).
//!
//! The caller's uid comes only from the bus (`GetConnectionUnixUser`); its groups from the
//! system's user and group databases (NSS). Root and members of the approver group may
//! change things (snapshot, restore, cancel); anybody may look (list, preview, status).
//! Any failure to decide is a refusal.

use layout::escape::Escaped;
use nix::unistd::{getgrouplist, Gid, Group, Uid, User};

use crate::journal::Asker;

/// What the caller wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// List, preview a restore, read the status: changes nothing.
    Look,
    /// Snapshot, stage a restore, cancel one.
    Change,
}

/// The approver group, by name.
#[derive(Debug, Clone)]
pub struct Authority {
    approver_group: String,
}

impl Authority {
    pub fn new(approver_group: &str) -> Self {
        Authority {
            approver_group: approver_group.to_owned(),
        }
    }

    pub fn approver_group(&self) -> &str {
        &self.approver_group
    }

    /// The caller as the journal records them: uid, and the user name (or `uid N`).
    pub fn asker(uid: u32) -> Asker {
        let name = match User::from_uid(Uid::from_raw(uid)) {
            Ok(Some(u)) => u.name,
            _ => format!("uid {uid}"),
        };
        Asker { uid, name }
    }

    /// May `uid` do `act`? `Err` carries the reason, in words for the person refused.
    pub fn decide(&self, uid: u32, act: Act) -> Result<(), String> {
        if act == Act::Look || uid == 0 {
            return Ok(());
        }
        let group = &self.approver_group;
        let refuse = |why: String| {
            Err(format!(
                "{why}; only root and members of the group {group:?} may snapshot, restore, \
                 cancel, delete, keep, prune, copy or fetch. Ask an administrator, or have one add you: `gpasswd -a USER {group}` \
                 (then log in again)"
            ))
        };
        let user = match User::from_uid(Uid::from_raw(uid)) {
            Ok(Some(u)) => u,
            Ok(None) => return refuse(format!("uid {uid} has no entry in the user database")),
            Err(e) => return refuse(format!("looking up uid {uid} failed ({e})")),
        };
        let approver_gid = match Group::from_name(group) {
            Ok(Some(g)) => g.gid,
            Ok(None) => return refuse(format!("the approver group {group:?} does not exist")),
            Err(e) => return refuse(format!("looking up the group {group:?} failed ({e})")),
        };
        // The groups are looked up by name, and `nix` has already made a name that is not
        // UTF-8 lossy: U+FFFD could then be another user's name. Such a name is a no.
        let Ok(cname) = std::ffi::CString::new(user.name.as_bytes()) else {
            return refuse(format!("user {:?} has an unusable name", user.name));
        };
        if user.name.contains(char::REPLACEMENT_CHARACTER) {
            return refuse(format!(
                "the user name of uid {uid} is not UTF-8 (shown as {}), so its groups cannot be \
                 looked up by it",
                Escaped(user.name.as_bytes())
            ));
        }
        match getgrouplist(&cname, user.gid) {
            Ok(groups) if member(&groups, user.gid, approver_gid) => Ok(()),
            Ok(_) => refuse(format!(
                "{} (uid {uid}) is not in the group {group:?}",
                Escaped(user.name.as_bytes())
            )),
            Err(e) => refuse(format!(
                "looking up the groups of {} failed ({e})",
                Escaped(user.name.as_bytes())
            )),
        }
    }
}

fn member(groups: &[Gid], primary: Gid, wanted: Gid) -> bool {
    primary == wanted || groups.contains(&wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_always_may_and_anyone_may_look() {
        let a = Authority::new("no-such-group-tacid");
        assert_eq!(a.decide(0, Act::Change), Ok(()));
        assert_eq!(a.decide(4_000_000_000, Act::Look), Ok(()));
    }

    #[test]
    fn failing_to_decide_is_no() {
        let a = Authority::new("root");
        let err = a.decide(4_000_000_000, Act::Change).unwrap_err();
        assert!(err.contains("uid 4000000000 has no entry"), "{err}");
        // A real user (nobody, 65534 on Debian) and a group that does not exist.
        let a = Authority::new("no-such-group-tacid");
        let err = a.decide(65534, Act::Change).unwrap_err();
        assert!(
            err.contains("does not exist") || err.contains("no entry"),
            "{err}"
        );
        assert!(err.contains("gpasswd -a USER no-such-group-tacid"), "{err}");
    }

    #[test]
    fn membership_by_primary_or_supplementary_group() {
        let g = |n| Gid::from_raw(n);
        assert!(member(&[g(1), g(10)], g(1), g(10)));
        assert!(member(&[], g(10), g(10)));
        assert!(!member(&[g(1), g(2)], g(1), g(10)));
    }
}
