//! `tacid-copier key init | show | import`: the recovery key, at root's command line.
//!
//! The key file belongs to the copier's user (it alone reads it, as [`seal::SealKey::load`]
//! insists); root runs these commands, which do their work as that user (the thread's
//! uid and gid become the copier's), so the file is made and read exactly as the daemon
//! makes and reads it.
//!
//! Where: the copier's own directory on the snapshots subvolume ([`held_key_path`]), which
//! its unit binds onto its state directory — on an ephemeral root `/var/lib` is made anew
//! at every boot, and no restore replaces `@snapshots`. That directory lies under the
//! root-only snapshot store, which the copier's user cannot traverse: root opens it, checks
//! it is the copier's, and the work is done beneath that handle (`/proc/self/fd/N`).

use std::io::Read as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;

use rustix::process::{Gid, Uid};
use seal::SealKey;

/// The copier's directory's name on the snapshots subvolume (the module's tmpfiles rules and
/// the unit's `BindPaths=` name it too).
pub const COPIER_DIR_NAME: &str = ".copier";

/// Where the key commands find the key by default: the file the copier's unit sees as
/// [`layout::SEAL_KEY_PATH`].
pub fn held_key_path() -> std::path::PathBuf {
    let file = Path::new(layout::SEAL_KEY_PATH)
        .file_name()
        .unwrap_or_else(|| std::ffi::OsStr::new("recovery.key"));
    Path::new(layout::SNAPSHOTS_MOUNT_POINT)
        .join(COPIER_DIR_NAME)
        .join(file)
}

/// The longest recovery text read from stdin.
const MAX_IMPORT_BYTES: u64 = 4096;

/// Which key command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyCommand {
    Init,
    Show,
    Import,
}

/// Run `command` for the key at `path`, owned by `user`; what to print, or the error in words.
pub fn run(
    command: KeyCommand,
    path: &Path,
    user: &str,
    stdin: &mut dyn std::io::Read,
) -> Result<String, String> {
    if !rustix::process::geteuid().is_root() {
        return Err(
            "the recovery key is root's to manage: run this as root (sudo tacid-copier key …)"
                .into(),
        );
    }
    let (uid, gid) = match nix::unistd::User::from_name(user) {
        Ok(Some(u)) => (u.uid.as_raw(), u.gid.as_raw()),
        Ok(None) => {
            return Err(format!(
                "there is no user named {user:?}: the copier's user must exist first (the NixOS module makes {})",
                layout::names::COPIER_USER
            ))
        }
        Err(e) => return Err(format!("cannot look up user {user:?}: {e}")),
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .ok_or_else(|| format!("{} names no file", path.display()))?;
    make_dir_of(dir, uid, gid)?;
    let handle = open_dir_of(dir, uid, user)?;
    use std::os::fd::AsRawFd as _;
    let beneath = Path::new("/proc/self/fd")
        .join(handle.as_raw_fd().to_string())
        .join(file_name);
    // What the seal library says names the path it was given; a person needs the real one.
    let real = |m: String| m.replace(&beneath.display().to_string(), &path.display().to_string());
    // From here on this thread is the copier's user: the file is made and read as it is.
    rustix::thread::set_thread_groups(&[]).map_err(|e| format!("cannot drop groups: {e}"))?;
    rustix::thread::set_thread_res_gid(Gid::from_raw(gid), Gid::from_raw(gid), Gid::from_raw(gid))
        .map_err(|e| format!("cannot become group {gid}: {e}"))?;
    rustix::thread::set_thread_res_uid(Uid::from_raw(uid), Uid::from_raw(uid), Uid::from_raw(uid))
        .map_err(|e| format!("cannot become user {user}: {e}"))?;
    let shown = path.display();
    let path = beneath.as_path();
    match command {
        KeyCommand::Init => {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(format!(
                    "a recovery key exists at {shown} already; a new one would leave every copy \
                     sealed with it unreadable, so none is made. `tacid-copier key show` prints it"
                ));
            }
            let key = SealKey::create(path).map_err(|e| real(e.to_string()))?;
            Ok(words(&key, "A new recovery key was made"))
        }
        KeyCommand::Show => {
            let key = SealKey::load(path).map_err(|e| real(e.to_string()))?;
            Ok(words(&key, "The recovery key"))
        }
        KeyCommand::Import => {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(format!(
                    "a recovery key exists at {shown} already; it is never overwritten (copies \
                     sealed with it need it). Move it away first if you really mean to replace it"
                ));
            }
            let mut text = String::new();
            stdin
                .take(MAX_IMPORT_BYTES)
                .read_to_string(&mut text)
                .map_err(|e| format!("cannot read the recovery key from stdin: {e}"))?;
            let key = SealKey::from_recovery_text(&text).map_err(|e| e.to_string())?;
            let key = key.store(path).map_err(|e| real(e.to_string()))?;
            Ok(format!(
                "The recovery key (key id {}) is in {shown}: this machine reads the copies sealed \
                 with it. Configure the target in services.tacid.copies, then `tacid data fetch`.\n",
                key.key_id()
            ))
        }
    }
}

/// What a person reads when shown the key.
fn words(key: &SealKey, opening: &str) -> String {
    format!(
        "{opening} (key id {id}). It seals this machine's copies:\n\n    {text}\n\n\
         Keep it OFF this machine — on paper or in a password manager. With only this line and \
         a target's address, a new machine brings copies back: `tacid-copier key import` (the \
         line on stdin), configure the target, `tacid data fetch`. Without it nobody, you \
         included, can read the copies. Root can print it again with `tacid-copier key show`.\n",
        id = key.key_id(),
        text = key.recovery_text()
    )
}

/// `dir`, opened as root, refused unless it is the copier's alone.
fn open_dir_of(dir: &Path, uid: u32, user: &str) -> Result<std::os::fd::OwnedFd, String> {
    use rustix::fs::{Mode, OFlags};
    let shown = dir.display();
    let handle = rustix::fs::open(
        dir,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open {shown}: {e}"))?;
    let st = rustix::fs::fstat(&handle).map_err(|e| format!("cannot stat {shown}: {e}"))?;
    if st.st_uid != uid || st.st_mode & 0o077 != 0 {
        return Err(format!(
            "{shown} must be {user}'s alone (now uid {}, mode {:04o}); fix it: chown {user}: {shown} && chmod 0700 {shown}",
            st.st_uid,
            st.st_mode & 0o7777
        ));
    }
    Ok(handle)
}

/// `dir` as the copier's state directory: made (0700, the copier's) when missing.
fn make_dir_of(dir: &Path, uid: u32, gid: u32) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            rustix::fs::chown(dir, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
                .map_err(|e| format!("cannot give {} to uid {uid}: {e}", dir.display()))?;
            crate::durable::sync_dir(dir.parent().unwrap_or(Path::new("/")))
                .map_err(|e| format!("cannot sync the directory above {}: {e}", dir.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("cannot make {}: {e}", dir.display())),
    }
}
