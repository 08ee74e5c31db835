//! Where sealed objects are kept: a [`Store`] is a flat map of keys to bytes.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::error::StoreError;

pub mod dir;
pub mod s3;
pub mod ssh;

/// The longest key any store accepts.
pub const MAX_KEY_BYTES: usize = 255;

/// The most objects one listing may return. A sealed target holds a few objects per 16 MiB
/// stored (a million is 16 TiB); a store that lists more is not a sealed target of this
/// machine's alone, and reading all it says would hold the copier's memory hostage.
pub const MAX_LISTED: usize = 1_000_000;

/// One object in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub key: String,
    pub size: u64,
    /// When the store last wrote it, by the store's clock; None when the store does not say
    /// (such an object is never old enough to be cleaned).
    pub modified: Option<SystemTime>,
}

/// The error of a listing that passed [`MAX_LISTED`] objects.
pub(crate) fn too_many_listed(store: &str, prefix: &str, max: usize) -> StoreError {
    StoreError::Io(format!(
        "{store} lists more than {max} objects under {:?}; a sealed target holds far fewer: \
         something else keeps objects there. Give the target a place of its own (another \
         directory, bucket or prefix), or remove what is not tacid's",
        crate::error::capped(prefix)
    ))
}

/// A place that keeps objects. Every `put` is durable when it returns (fsync'd, the far side
/// synced, or the PUT answered); every operation fails in bounded time.
pub trait Store: Send + Sync {
    /// Store `bytes` under `key`, replacing what was there.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError>;
    /// The bytes under `key`; [`StoreError::TooBig`] (nothing read into memory past `max`)
    /// when there are more than `max`.
    fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, StoreError>;
    /// Every key that starts with `prefix`, with its size and time, sorted by key; an error
    /// past [`MAX_LISTED`] objects.
    fn list(&self, prefix: &str) -> Result<Vec<Object>, StoreError>;
    /// Remove `key`; not an error when it is not there.
    fn delete(&self, key: &str) -> Result<(), StoreError>;
    /// The store in words, for messages ("the directory /mnt/usb/tacid").
    fn describe(&self) -> String;
    /// Remove the store's own temporary files (puts a power cut or a kill left) older than
    /// `grace`; how many. None by default: a store whose puts leave nothing behind.
    fn remove_temporaries(&self, grace: Duration) -> Result<u64, StoreError> {
        let _ = grace;
        Ok(0)
    }
}

/// Everything needed to reach a store. The copier builds it from its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorePlace {
    /// A directory on any filesystem (made if missing; its parent must exist).
    Dir { path: PathBuf },
    /// A far directory behind the forced command `tacid-copy-target DIR` (its object verbs).
    Ssh {
        /// The ssh client to run (normally `ssh` from PATH).
        program: PathBuf,
        user: String,
        host: String,
        port: u16,
        /// The private key (owned by the caller, not readable by others).
        identity: PathBuf,
        /// The far side's host key, `TYPE BASE64`, pinned.
        host_key: String,
        /// A directory the caller owns where the pinned known_hosts file is written.
        known_hosts_dir: PathBuf,
        /// A name for the known_hosts file and messages (the target's name).
        label: String,
    },
    /// S3-compatible object storage, path-style requests.
    S3 {
        host: String,
        port: Option<u16>,
        bucket: String,
        /// Objects are kept under this prefix ("" for the bucket's top).
        prefix: String,
        region: String,
        credentials: S3Credentials,
        /// Plain http (a store on this host or a trusted link): the sealed bytes are
        /// encrypted and authenticated anyway; the credentials' signatures are not secret.
        allow_http: bool,
        /// How long a connection may take to open (default 10 s).
        connect_timeout: Option<Duration>,
        /// How long one request may take in all (default 120 s).
        request_timeout: Option<Duration>,
    },
}

/// An S3 access key.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// Open the store at `place`. S3 requests run on `runtime` (call the store's methods from
/// threads that are not the runtime's own).
pub fn open_store(
    place: &StorePlace,
    runtime: tokio::runtime::Handle,
) -> Result<Box<dyn Store>, StoreError> {
    Ok(match place {
        StorePlace::Dir { path } => Box::new(dir::DirStore::open(path)?),
        StorePlace::Ssh { .. } => Box::new(ssh::SshStore::open(place)?),
        StorePlace::S3 { .. } => Box::new(s3::S3Store::open(place, runtime)?),
    })
}

/// A key this library makes: 1..=255 bytes of `[A-Za-z0-9._@/-]`, `/`-separated segments
/// that are not empty and do not start with `.` (so no `..`, no hidden or temporary name,
/// no absolute path). Anything else is refused before a store sees it.
pub fn check_key(key: &str) -> Result<(), StoreError> {
    let bad = |why: &str| {
        Err(StoreError::BadKey(format!(
            "refused the object key {:?}: {why}",
            crate::error::capped(key)
        )))
    };
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return bad("a key is 1 to 255 bytes");
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/' | b'@'))
    {
        return bad("only letters, digits, '.', '_', '-', '@' and '/' are allowed");
    }
    if key.split('/').any(|s| s.is_empty() || s.starts_with('.')) {
        return bad("no empty segment, none starting with '.', not absolute");
    }
    Ok(())
}

/// A list prefix: a key, or a key followed by `/`, or empty.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), StoreError> {
    let trimmed = prefix.strip_suffix('/').unwrap_or(prefix);
    if trimmed.is_empty() && prefix.is_empty() {
        return Ok(());
    }
    check_key(trimmed)
}
