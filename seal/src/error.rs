//! What went wrong, in words that say what and what to do.

/// A sealed-copy act failed. Every message says what happened and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// What the store holds is not what this machine sealed: a MAC, digest, size or
    /// decryption failed, a part is missing, reordered or another copy's, the manifest is
    /// another copy's or another key's, or older than remembered. Nothing of it was used.
    #[error("{0}")]
    Untrusted(String),
    /// No such copy on the target.
    #[error("{0}")]
    NotFound(String),
    /// The store did not answer in time or could not be reached.
    #[error("{0}")]
    Unreachable(String),
    /// The store is full (ENOSPC, quota, an S3 size refusal).
    #[error("{0}")]
    Full(String),
    /// There is no key file.
    #[error("{0}")]
    KeyMissing(String),
    /// The key file may be read or swapped by someone else.
    #[error("the recovery key {what}; fix it: {fix}")]
    KeyUnsafe { what: String, fix: String },
    /// Anything else: reading the stream, a store that refused, a broken file.
    #[error("{0}")]
    Io(String),
}

/// A store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    /// The object is larger than the caller accepts: nothing of it was kept.
    #[error("{key} on {store} is {size} bytes, more than the {max} expected; the store holds something this machine did not put there")]
    TooBig {
        store: String,
        key: String,
        size: u64,
        max: u64,
    },
    #[error("{0}")]
    Unreachable(String),
    #[error("{0}")]
    Full(String),
    /// The key is not one this library makes (a bug, or a hostile listing).
    #[error("{0}")]
    BadKey(String),
    #[error("{0}")]
    Io(String),
}

impl From<StoreError> for SealError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => SealError::NotFound(m),
            e @ StoreError::TooBig { .. } => SealError::Untrusted(e.to_string()),
            StoreError::Unreachable(m) => SealError::Unreachable(m),
            StoreError::Full(m) => SealError::Full(m),
            StoreError::BadKey(m) | StoreError::Io(m) => SealError::Io(m),
        }
    }
}

/// At most this many bytes of anything a store or a peer said, in a message.
pub(crate) const MAX_SAID: usize = 400;

/// `text` cut to [`MAX_SAID`] bytes (on a char boundary), with "…" when cut.
pub(crate) fn capped(text: &str) -> String {
    if text.len() <= MAX_SAID {
        return text.to_owned();
    }
    let mut end = MAX_SAID;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
