//! The copier (`tacid-copier`): the one tacid part that holds the recovery key and talks to
//! the network. It runs as its own user with no capabilities, serves `org.tacid.Copier1` to
//! the keeper's user only, and keeps sealed copies (the `seal` library's format) on the
//! sealed targets of root's copies configuration. Send streams reach it through a pipe the
//! stem writes (Seal); fetched streams leave it through a pipe the stem reads (Unseal),
//! every part authenticated before a byte of it is handed on.

pub mod caller;
pub mod config;
pub mod copier1;
pub mod credentials;
pub mod durable;
pub mod generations;
pub mod keys;
pub mod pipes;
pub mod service;
pub mod turns;
