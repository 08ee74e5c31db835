//! Sealed copies: a Btrfs send stream compressed (one zstd stream), cut into parts, each part
//! an age file to this machine's key, with a manifest that names every part's size and
//! SHA-256 and is authenticated by an HMAC keyed from the same key. Kept in a [`Store`]: a
//! directory on any filesystem, a far directory over SSH, or S3-compatible object storage.
//!
//! What the store can see: object names (the snapshot names, in the manifests' keys), sizes,
//! counts and times. What it cannot do without the key: read a copy, or make one that
//! [`unseal`] accepts. What nobody can know from the store alone: whether a genuine but older
//! manifest is the newest (the caller remembers generations; see [`chain_checked`]).

mod error;
mod format;
mod key;
mod store;

pub use error::{SealError, StoreError};
pub use format::{
    chain, chain_checked, clean, clean_expecting, clean_older_than, copies, delete_copy, seal,
    seal_with, unseal, verify, verify_checked, CleanReport, CopyMeta, Listed, Manifest, PartEntry,
    Verifier, CLEAN_GRACE, MANIFEST_MAGIC, MAX_MANIFEST_BYTES, STREAM_MAGIC,
};
pub use key::SealKey;
pub use store::dir::DirStore;
pub use store::s3::S3Store;
pub use store::ssh::SshStore;
pub use store::{check_key, open_store, Object, S3Credentials, Store, StorePlace, MAX_LISTED};

/// The prefix of every object a sealed target holds: the format's version, then the key's id.
pub const FORMAT_PREFIX: &str = "tacid-v1";

/// `tacid-v1/<key_id>/manifests/<name>`.
pub fn manifest_key(key_id: &str, name: &str) -> String {
    format!("{FORMAT_PREFIX}/{key_id}/manifests/{name}")
}

/// `tacid-v1/<key_id>/parts/<copy_id>/<index:06>`.
pub fn part_key(key_id: &str, copy_id: &str, index: usize) -> String {
    format!("{FORMAT_PREFIX}/{key_id}/parts/{copy_id}/{index:06}")
}
