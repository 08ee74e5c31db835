//! S3-compatible object storage.

use super::{Store, StorePlace};
use crate::error::StoreError;

/// A [`Store`] on an SSH host.
#[derive(Debug)]
pub struct S3Store {
    label: String,
}

impl S3Store {
    pub fn open(
        place: &StorePlace,
        _runtime: tokio::runtime::Handle,
    ) -> Result<S3Store, StoreError> {
        let StorePlace::S3 { bucket, .. } = place else {
            return Err(StoreError::Io("not an S3 place".into()));
        };
        Ok(S3Store {
            label: bucket.clone(),
        })
    }
}

impl Store for S3Store {
    fn put(&self, _key: &str, _bytes: &[u8]) -> Result<(), StoreError> {
        Err(StoreError::Io("the S3 store is not written yet".into()))
    }
    fn get(&self, _key: &str, _max: u64) -> Result<Vec<u8>, StoreError> {
        Err(StoreError::Io("the S3 store is not written yet".into()))
    }
    fn list(&self, _prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        Err(StoreError::Io("the S3 store is not written yet".into()))
    }
    fn delete(&self, _key: &str) -> Result<(), StoreError> {
        Err(StoreError::Io("the S3 store is not written yet".into()))
    }
    fn describe(&self) -> String {
        format!("the S3 bucket {}", self.label)
    }
}
