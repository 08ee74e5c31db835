//! A sealed S3 target's credentials file: the copier's alone, or refused with the fix.

use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;

/// An S3 access key, as the file holds it.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// Larger than any credentials file.
const MAX_BYTES: u64 = 64 << 10;

/// Why a credentials file is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Missing or unreadable: the message says which and what to do.
    Unusable(String),
    /// Others could read or replace it: the message says what and the fix.
    Unsafe(String),
}

/// Read `path` after checking it as the seal library checks the key: not a symlink, a
/// regular file, owned by the effective uid, no group or other permission bits. It holds
/// JSON: `{"access_key_id": "…", "secret_access_key": "…"}`.
pub fn read(path: &Path) -> Result<Credentials, Refused> {
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                Refused::Unsafe(format!(
                    "the credentials file {shown} is a symbolic link; put the file itself there"
                ))
            } else {
                Refused::Unusable(format!(
                    "cannot open the credentials file {shown}: {e}; write it as JSON \
                     {{\"access_key_id\": …, \"secret_access_key\": …}}, owned by the copier's user, mode 0600"
                ))
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|e| Refused::Unusable(format!("cannot stat {shown}: {e}")))?;
    if !meta.file_type().is_file() {
        return Err(Refused::Unsafe(format!(
            "the credentials file {shown} is not a regular file"
        )));
    }
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(Refused::Unsafe(format!(
            "the credentials file {shown} belongs to uid {}, not to the copier (uid {euid}); \
             fix it: chown {euid} {shown}",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(Refused::Unsafe(format!(
            "the credentials file {shown} has mode {:04o}: others than the copier may read or \
             change it; fix it: chmod 0600 {shown}",
            meta.mode() & 0o7777
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| Refused::Unusable(format!("cannot read {shown}: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Refused::Unusable(format!(
            "the credentials file {shown} is not JSON {{\"access_key_id\": …, \"secret_access_key\": …}} \
             (line {}, column {}); write it so",
            e.line(),
            e.column()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_file_others_may_read_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("cloud.credentials");
        std::fs::write(
            &path,
            br#"{"access_key_id": "GK1", "secret_access_key": "hidden-secret"}"#,
        )
        .expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let got = read(&path).expect("good");
        assert_eq!(got.access_key_id, "GK1");
        assert_eq!(got.secret_access_key, "hidden-secret");
        assert!(
            !format!("{got:?}").contains("hidden-secret"),
            "no secret in logs"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        match read(&path) {
            Err(Refused::Unsafe(m)) => {
                assert!(m.contains("mode 0640") && m.contains("chmod 0600"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::write(&path, b"access_key_id = GK1").expect("write");
        assert!(matches!(read(&path), Err(Refused::Unusable(m)) if m.contains("is not JSON")));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert!(matches!(read(&link), Err(Refused::Unsafe(m)) if m.contains("symbolic link")));
        assert!(matches!(
            read(&dir.path().join("none")),
            Err(Refused::Unusable(_))
        ));
    }
}
