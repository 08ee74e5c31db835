//! The recovery key: made once, shown again, imported on a new machine, all by root as
//! the copier's user; and a key file that is not the copier's alone refused by every act,
//! with the fix in words.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

use copier_interface::ErrorKind;

use crate::common::{self, CopierDaemon, Places, PrivateBus, USB};

fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `AGE-SECRET-KEY-1…` line of what a key command printed.
fn key_line(stdout: &str) -> String {
    stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("AGE-SECRET-KEY-1"))
        .unwrap_or_else(|| panic!("no recovery key printed: {stdout}"))
        .to_owned()
}

#[test]
fn the_key_is_made_once_shown_again_and_imported_elsewhere() {
    if !common::require() {
        return;
    }
    // Places::new ran `key init`; run it again on a fresh path to see its words.
    let places = Places::new("");
    let fresh = places.state.join("fresh.key");
    let out = places.key_command_at(&fresh, &["init"], "");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let line = key_line(&stdout);
    assert!(stdout.contains("Keep it OFF this machine"), "{stdout}");
    assert!(stdout.contains("tacid-copier key import"), "{stdout}");
    assert!(stdout.contains("target's address"), "{stdout}");
    let (cuid, _) = common::copier_user();
    let meta = std::fs::metadata(&fresh).expect("the key file");
    assert_eq!(meta.uid(), cuid, "the copier's user owns the key");
    assert_eq!(meta.mode() & 0o777, 0o400);
    let dir = std::fs::metadata(&places.state).expect("the state directory");
    assert_eq!((dir.uid(), dir.mode() & 0o777), (cuid, 0o700));

    // Never twice: the file is unchanged and the words say why.
    let before = std::fs::read(&fresh).expect("read");
    let again = places.key_command_at(&fresh, &["init"], "");
    let (_, stderr) = text(&again);
    assert!(!again.status.success());
    assert!(
        stderr.contains("exists") && stderr.contains("key show"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&fresh).expect("read"), before);

    let shown = places.key_command_at(&fresh, &["show"], "");
    assert!(shown.status.success(), "{:?}", text(&shown));
    assert_eq!(key_line(&text(&shown).0), line, "show prints the same key");

    // A new machine: the line on stdin is all it needs.
    let imported = places.state.join("imported.key");
    let out = places.key_command_at(&imported, &["import"], &format!("{line}\n"));
    assert!(out.status.success(), "{:?}", text(&out));
    let shown = places.key_command_at(&imported, &["show"], "");
    assert_eq!(key_line(&text(&shown).0), line);
    let refused = places.key_command_at(&imported, &["import"], &line);
    assert!(!refused.status.success());
    assert!(
        text(&refused).1.contains("never overwritten"),
        "{:?}",
        text(&refused)
    );
    let garbage = places.state.join("garbage.key");
    let out = places.key_command_at(&garbage, &["import"], "AGE-SECRET-KEY-1NOTAKEY\n");
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("not a recovery key"),
        "{:?}",
        text(&out)
    );
    assert!(!garbage.exists());

    // Not root: refused with what to do.
    let (uid, gid) = common::copier_user();
    let out = std::process::Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg(env!("CARGO_BIN_EXE_tacid-copier"))
        .args(["key", "show", "--key"])
        .arg(&fresh)
        .output()
        .expect("run as the copier");
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("run this as root"),
        "{:?}",
        text(&out)
    );
}

#[test]
fn a_key_file_that_is_not_the_copiers_alone_is_refused_with_the_fix() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let copies = || {
        common::call(&bus, common::keeper(), |p| {
            Box::pin(async move { p.copies(USB).await })
        })
    };
    copies().expect("the key is good");

    std::fs::set_permissions(&places.key, std::fs::Permissions::from_mode(0o440)).expect("chmod");
    let e = copies().expect_err("group may read it");
    assert_eq!(e.kind(), Some(ErrorKind::KeyUnsafe), "{e:?}");
    assert!(e.message().contains("chmod 0400"), "{}", e.message());

    std::fs::set_permissions(&places.key, std::fs::Permissions::from_mode(0o400)).expect("chmod");
    common::chown(&places.key, 0, 0);
    let e = copies().expect_err("root's, not the copier's");
    assert_eq!(e.kind(), Some(ErrorKind::KeyUnsafe), "{e:?}");
    assert!(e.message().contains("chown"), "{}", e.message());

    std::fs::remove_file(&places.key).expect("remove");
    let e = copies().expect_err("no key");
    assert_eq!(e.kind(), Some(ErrorKind::NoKey), "{e:?}");
    assert!(
        e.message().contains("tacid-copier key init"),
        "{}",
        e.message()
    );
}

#[test]
fn the_key_is_kept_beneath_a_root_only_directory_the_copier_cannot_traverse() {
    if !common::require() {
        return;
    }
    let places = Places::new("");
    // As /persist/.snapshots: root's alone; the copier's directory made in it on first use.
    let store = places.dir.path().join("snapshots");
    std::fs::create_dir(&store).expect("mkdir");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let key = store.join(".copier").join("recovery.key");
    let out = places.key_command_at(&key, &["init"], "");
    assert!(out.status.success(), "{:?}", text(&out));
    let line = key_line(&text(&out).0);
    let (cuid, _) = common::copier_user();
    let dir = std::fs::metadata(key.parent().expect("a directory")).expect("made");
    assert_eq!((dir.uid(), dir.mode() & 0o777), (cuid, 0o700));
    let meta = std::fs::metadata(&key).expect("the key");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (cuid, 0o400));
    let shown = places.key_command_at(&key, &["show"], "");
    assert_eq!(key_line(&text(&shown).0), line);
    // The messages name the real path, not the handle's.
    let again = places.key_command_at(&key, &["init"], "");
    let (_, stderr) = text(&again);
    assert!(
        stderr.contains(&key.display().to_string()) && !stderr.contains("/proc/self"),
        "{stderr}"
    );

    // A directory that is not the copier's alone is refused before anything is written.
    let other = store.join("other");
    std::fs::create_dir(&other).expect("mkdir");
    let out = places.key_command_at(&other.join("recovery.key"), &["init"], "");
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("must be tacid-copier's alone"),
        "{:?}",
        text(&out)
    );
    assert!(!other.join("recovery.key").exists());
}
