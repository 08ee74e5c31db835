//! A far directory over SSH, behind the forced command `tacid-copy-target DIR`.

use super::{Store, StorePlace};
use crate::error::StoreError;

/// A [`Store`] on an SSH host.
#[derive(Debug)]
pub struct SshStore {
    label: String,
}

impl SshStore {
    pub fn open(place: &StorePlace) -> Result<SshStore, StoreError> {
        let StorePlace::Ssh { label, .. } = place else {
            return Err(StoreError::Io("not an ssh place".into()));
        };
        Ok(SshStore {
            label: label.clone(),
        })
    }
}

impl Store for SshStore {
    fn put(&self, _key: &str, _bytes: &[u8]) -> Result<(), StoreError> {
        Err(StoreError::Io("the ssh store is not written yet".into()))
    }
    fn get(&self, _key: &str, _max: u64) -> Result<Vec<u8>, StoreError> {
        Err(StoreError::Io("the ssh store is not written yet".into()))
    }
    fn list(&self, _prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        Err(StoreError::Io("the ssh store is not written yet".into()))
    }
    fn delete(&self, _key: &str) -> Result<(), StoreError> {
        Err(StoreError::Io("the ssh store is not written yet".into()))
    }
    fn describe(&self) -> String {
        format!("the ssh target {}", self.label)
    }
}
