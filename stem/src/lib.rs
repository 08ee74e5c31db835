//! The stem: the only part of tacid that runs as root and touches subvolumes.
//!
//! [`engine`] is the narrow set of privileged acts as plain Rust over the `btrfs` crate;
//! the D-Bus interface (elsewhere in this crate) only converts and delegates to it.
//! It reads or writes no file content for anybody: the only files it writes are the
//! restore request, and the only ones it reads are the request and the initrd's outcome.

pub mod allowance;
pub mod caller;
pub mod copies;
pub mod cut;
pub mod engine;
pub mod open;
pub mod private_top;
pub mod receive_protocol;
pub mod receiver;
pub mod stem1;
pub mod worker;

pub use engine::{
    ByteCount, Engine, EngineError, FreeSpace, Origin, Snapshot, Staged, StoreProblem,
};
