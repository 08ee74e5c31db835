//! Root's copies configuration, as the copier reads it: the sealed targets only.

use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;

use layout::copies::{CopiesConfig, MAX_CONFIG_BYTES};

/// Read `path`: a missing file is no targets; a file that is not root's alone to change, or
/// not valid, is an error that says what to fix.
pub fn load(path: &Path) -> Result<CopiesConfig, String> {
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
    if meta.uid() != 0 {
        return Err(format!(
            "{shown} is owned by uid {}, not root; copy targets are root's configuration (chown root {shown})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by group or others (mode {:04o}); chmod 0644 {shown}",
            meta.mode() & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    CopiesConfig::parse(&bytes).map_err(|e| format!("{shown}: {e}"))
}
