//! Root's configuration of the copy targets, and the programs and places the copies use.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use layout::copies::{CopiesConfig, MAX_CONFIG_BYTES};

/// Load root's configuration: a regular file owned by root, writable by nobody else,
/// opened without following a symlink. A missing file is no targets.
pub fn load_config(path: &Path) -> Result<CopiesConfig, String> {
    let shown = path.display();
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(CopiesConfig::default()),
        Err(e) => {
            return Err(format!(
                "cannot open {shown}: {e} (it must be a regular file, not a symlink)"
            ))
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat {shown}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    use std::os::unix::fs::MetadataExt as _;
    if meta.uid() != 0 {
        return Err(format!(
            "{shown} is owned by uid {}, not root; copy targets are root's configuration (chown root {shown})",
            meta.uid()
        ));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by group or others (mode {:04o}); chmod 0644 {shown}",
            meta.permissions().mode() & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    CopiesConfig::parse(&bytes).map_err(|e| e.to_string())
}

/// The programs and places the copy engine uses.
#[derive(Debug, Clone)]
pub struct Programs {
    /// The receiver's socket (`tacid-stem-receive`): every `btrfs receive` runs there, in a
    /// unit of its own, never in the stem (adr/0025).
    pub receiver: PathBuf,
    /// `ssh` (OpenSSH).
    pub ssh: PathBuf,
    /// Where the stem writes each SSH target's pinned `known_hosts` (root-only).
    pub runtime_dir: PathBuf,
    /// How long a transfer or a far side's answer may move nothing at all before the act
    /// gives up and kills its children (ssh's keepalives catch a dead link in 15 s; this
    /// catches a live far side that never answers, which would hold the target forever).
    pub stall: Duration,
}

/// [`Programs::stall`]'s default: generous, as a slow disk may take long to commit a receive.
pub const DEFAULT_STALL: Duration = Duration::from_secs(600);

impl Default for Programs {
    fn default() -> Self {
        Programs {
            receiver: layout::names::STEM_RECEIVE_SOCKET.into(),
            ssh: "ssh".into(),
            runtime_dir: std::env::var_os("RUNTIME_DIRECTORY")
                .map(PathBuf::from)
                .unwrap_or_else(|| "/run/tacid-stem".into()),
            stall: DEFAULT_STALL,
        }
    }
}
