//! System users and groups that tests share (the keeper's user, the approvers' group, the
//! people of the bus tiers): made once, under one lock taken by every test process, and
//! never removed. Test binaries run their tests in parallel and several binaries may run at
//! once; a user removed while another test had planted files by its uid would hand those
//! files to whoever is made next with that uid, and two makers racing could each think a
//! name theirs. So nothing here removes, and every lookup after a make is checked both ways
//! (the name gives the uid, the uid gives the name back).

use std::process::Command;
use std::time::Duration;

/// shadow's exit status when another program holds /etc/passwd's or /etc/group's lock.
const SHADOW_LOCKED: i32 = 10;

/// Run `f` holding the turn every test process takes around making users and groups
/// (`/run/tacid-test-users.lock`; a script takes it with flock(1)).
fn locked<T>(f: impl FnOnce() -> T) -> T {
    let _turn = crate::turn("users");
    f()
}

/// `getent DB KEY`'s fields, or `None` when there is no such entry.
fn getent(db: &str, key: &str) -> Option<Vec<String>> {
    let out = Command::new("getent")
        .args([db, key])
        .output()
        .expect("run getent");
    if !out.status.success() {
        return None;
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let line = line.lines().next()?;
    Some(line.split(':').map(str::to_owned).collect())
}

/// `cmd args`, again while shadow's own lock is held by another program (it fails at once
/// then); panics with its words on any other failure unless `tolerate` says it is fine.
fn shadow(cmd: &str, args: &[&str], tolerate: impl Fn() -> bool) {
    for _ in 0..100 {
        let out = Command::new(cmd)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
        if out.status.success() || tolerate() {
            return;
        }
        if out.status.code() != Some(SHADOW_LOCKED) {
            panic!(
                "{cmd} {args:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{cmd} {args:?}: the user database stayed locked for 10 s");
}

fn uid_gid(name: &str) -> Option<(u32, u32)> {
    let f = getent("passwd", name)?;
    Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
}

/// The user `name`'s uid and primary gid, made with `useradd ARGS name` when missing (the
/// args say what kind: `--system`, `--user-group`, `--home-dir`, ...). Never removed.
/// Panics when the uid is not this name's alone in the user database.
pub fn ensure_user(name: &str, useradd_args: &[&str]) -> (u32, u32) {
    let (uid, gid) = locked(|| {
        if let Some(ids) = uid_gid(name) {
            return ids;
        }
        let mut args = useradd_args.to_vec();
        args.push(name);
        shadow("useradd", &args, || uid_gid(name).is_some());
        uid_gid(name).unwrap_or_else(|| panic!("useradd {name} left no user {name}"))
    });
    let back = getent("passwd", &uid.to_string()).and_then(|f| f.into_iter().next());
    assert_eq!(
        back.as_deref(),
        Some(name),
        "uid {uid} of {name} is another user's first: two users share it, so files planted \
         for one are the other's; remove the duplicate user"
    );
    (uid, gid)
}

/// A daemon's system user `name` (its own group, no home, no shell), made when missing:
/// the kind the NixOS module makes for the keeper and the copier. Never removed.
pub fn ensure_system_user(name: &str) -> (u32, u32) {
    ensure_user(
        name,
        &[
            "--system",
            "--user-group",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ],
    )
}

/// The group `name`'s gid, made with `groupadd ARGS name` when missing. Never removed.
pub fn ensure_group(name: &str, groupadd_args: &[&str]) -> u32 {
    let gid = |n: &str| getent("group", n).and_then(|f| f.get(2)?.parse().ok());
    locked(|| {
        if let Some(g) = gid(name) {
            return g;
        }
        let mut args = groupadd_args.to_vec();
        args.push(name);
        shadow("groupadd", &args, || gid(name).is_some());
        gid(name).unwrap_or_else(|| panic!("groupadd {name} left no group {name}"))
    })
}

/// `user` is a member of `group` (added with `usermod --append` when not). Never taken out.
pub fn ensure_member(user: &str, group: &str) {
    let member = || {
        getent("group", group)
            .is_some_and(|f| f.get(3).is_some_and(|m| m.split(',').any(|u| u == user)))
    };
    locked(|| {
        if !member() {
            shadow("usermod", &["--append", "--groups", group, user], member);
        }
    });
}
