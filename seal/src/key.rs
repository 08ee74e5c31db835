//! The machine's recovery key: an age x25519 identity, and a MAC key derived from it.

use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;
use std::str::FromStr as _;

use age::secrecy::ExposeSecret as _;
use sha2::Digest as _;

use crate::error::SealError;

/// The longest key file read (an identity line is 74 bytes; comments allowed).
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// What the manifest MAC key is derived for (HKDF-SHA256 info).
const MAC_INFO: &[u8] = b"tacid manifest mac v1";

/// An age x25519 identity and the MAC key derived from it. Debug never shows the secret.
pub struct SealKey {
    identity: age::x25519::Identity,
    recipient: age::x25519::Recipient,
    key_id: String,
    mac_key: [u8; 32],
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealKey")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl SealKey {
    /// A new random key.
    pub fn generate() -> SealKey {
        Self::from_identity(age::x25519::Identity::generate())
    }

    /// The key from the line a person kept (`AGE-SECRET-KEY-1…`; whitespace around it and
    /// `#` comment lines are ignored).
    pub fn from_recovery_text(text: &str) -> Result<SealKey, SealError> {
        let line = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect::<Vec<_>>();
        let [line] = line.as_slice() else {
            return Err(SealError::KeyMissing(
                "a recovery key is one line that starts with AGE-SECRET-KEY-1; \
                 give exactly that line (comments starting with # are allowed)"
                    .into(),
            ));
        };
        let identity = age::x25519::Identity::from_str(line).map_err(|_| {
            SealError::KeyMissing(
                "that is not a recovery key: it must be the AGE-SECRET-KEY-1… line shown when \
                 the key was made (check for a typo or a cut line)"
                    .into(),
            )
        })?;
        Ok(Self::from_identity(identity))
    }

    fn from_identity(identity: age::x25519::Identity) -> SealKey {
        let recipient = identity.to_public();
        let digest = sha2::Sha256::digest(recipient.to_string().as_bytes());
        let key_id = hex::encode(&digest[..8]);
        let secret = identity.to_string();
        let hk = hkdf::Hkdf::<sha2::Sha256>::new(None, secret.expose_secret().as_bytes());
        let mut mac_key = [0u8; 32];
        hk.expand(MAC_INFO, &mut mac_key)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        SealKey {
            identity,
            recipient,
            key_id,
            mac_key,
        }
    }

    /// The line a person keeps: the age identity, `AGE-SECRET-KEY-1…`.
    pub fn recovery_text(&self) -> String {
        self.identity.to_string().expose_secret().to_owned()
    }

    /// 16 hex chars: the first 8 bytes of SHA-256 of the recipient (`age1…`). Public.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    pub(crate) fn identity(&self) -> &age::x25519::Identity {
        &self.identity
    }

    pub(crate) fn recipient(&self) -> &age::x25519::Recipient {
        &self.recipient
    }

    pub(crate) fn mac_key(&self) -> &[u8; 32] {
        &self.mac_key
    }

    /// The key from its file, refused unless only this user can read or replace it: not a
    /// symlink (O_NOFOLLOW), a regular file, owned by the effective uid, no group or other
    /// permission bits.
    pub fn load(path: &Path) -> Result<SealKey, SealError> {
        let shown = path.display();
        let file = match fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_flags())
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SealError::KeyMissing(format!(
                    "there is no recovery key at {shown}; make one with `tacid-copier key init` \
                     (or bring the old machine's with `tacid-copier key import`)"
                )))
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                return Err(SealError::KeyUnsafe {
                    what: format!("at {shown} is a symbolic link"),
                    fix: format!(
                        "replace the link by the file itself (cp --remove-destination \"$(readlink -f {shown})\" {shown})"
                    ),
                })
            }
            Err(e) => return Err(SealError::Io(format!("cannot open the recovery key {shown}: {e}"))),
        };
        let meta = file
            .metadata()
            .map_err(|e| SealError::Io(format!("cannot stat the recovery key {shown}: {e}")))?;
        if !meta.file_type().is_file() {
            return Err(SealError::KeyUnsafe {
                what: format!("at {shown} is not a regular file"),
                fix: format!("put the key file itself at {shown}"),
            });
        }
        let euid = rustix::process::geteuid().as_raw();
        if meta.uid() != euid {
            return Err(SealError::KeyUnsafe {
                what: format!(
                    "at {shown} belongs to uid {}, not to uid {euid} who uses it",
                    meta.uid()
                ),
                fix: format!("chown {euid} {shown}"),
            });
        }
        if meta.mode() & 0o077 != 0 {
            return Err(SealError::KeyUnsafe {
                what: format!(
                    "at {shown} has mode {:04o}: others than its owner may read or change it",
                    meta.mode() & 0o7777
                ),
                fix: format!("chmod 0400 {shown}"),
            });
        }
        if meta.len() > MAX_KEY_FILE_BYTES {
            return Err(SealError::KeyMissing(format!(
                "{shown} is {} bytes, too long for a recovery key; put the AGE-SECRET-KEY-1… line there",
                meta.len()
            )));
        }
        let mut text = String::new();
        (&file)
            .take(MAX_KEY_FILE_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| SealError::Io(format!("cannot read the recovery key {shown}: {e}")))?;
        Self::from_recovery_text(&text).map_err(|e| match e {
            SealError::KeyMissing(m) => SealError::KeyMissing(format!("{shown}: {m}")),
            other => other,
        })
    }

    /// A new key written at `path` (which must not exist), mode 0400, owned by the caller;
    /// the file and its directory are synced before this returns. Written through a
    /// temporary file in the same directory renamed into place: a power cut or a full disk
    /// leaves no key or the whole key, never part of one.
    pub fn create(path: &Path) -> Result<SealKey, SealError> {
        Self::generate().store(path)
    }

    /// Write this key at `path` as [`SealKey::create`] does (for an imported key).
    pub fn store(self, path: &Path) -> Result<SealKey, SealError> {
        let shown = path.display();
        let already = || {
            SealError::Io(format!(
                "{shown} is already there; a recovery key is never overwritten \
                 (move it away first if you really mean to replace it: copies sealed with it need it)"
            ))
        };
        if fs::symlink_metadata(path).is_ok() {
            return Err(already());
        }
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let file_name = path.file_name().ok_or_else(|| {
            SealError::Io(format!("{shown} names no file; give the key file's path"))
        })?;
        // A name `load` never reads as the key: a leftover is only ever a leftover.
        let mut tmp_start = std::ffi::OsString::from(".");
        tmp_start.push(file_name);
        tmp_start.push(".tmp-");
        // What a power cut during an earlier attempt left holds a secret: it goes now.
        if let Ok(entries) = fs::read_dir(dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if name
                    .as_encoded_bytes()
                    .starts_with(tmp_start.as_encoded_bytes())
                    && entry.file_type().is_ok_and(|t| t.is_file())
                {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        let mut tmp_name = tmp_start;
        tmp_name.push(uuid::Uuid::new_v4().simple().to_string());
        let tmp = dir.join(tmp_name);
        let text = format!(
            "# tacid recovery key (age identity); keep a copy away from this machine\n{}\n",
            self.recovery_text()
        );
        let written = (|| -> std::io::Result<()> {
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o400)
                .custom_flags(libc_flags())
                .open(&tmp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            // Never over a key that appeared meanwhile.
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &tmp,
                rustix::fs::CWD,
                path,
                rustix::fs::RenameFlags::NOREPLACE,
            )?;
            Ok(())
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                return Err(already());
            }
            return Err(SealError::Io(format!(
                "cannot write the recovery key {shown}: {e}; nothing was kept there (free space or fix the directory, then run the command again)"
            )));
        }
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| SealError::Io(format!("cannot sync {}: {e}", dir.display())))?;
        Ok(self)
    }
}

fn libc_flags() -> i32 {
    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32
}
