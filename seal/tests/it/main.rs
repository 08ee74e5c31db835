//! The seal crate against real stores: a directory, an sshd, a Garage; real send streams.
#![allow(clippy::unwrap_used)]

mod clean;
#[allow(dead_code)] // each store test uses a part
mod common;
mod dir;
mod hostile;
mod s3;
mod ssh;
