//! The initrd's tests that need its fault hooks (`--features test-hooks`, which this target requires): a binary of its own, since the hooks change the build of `tacid-initrd` itself.

#[path = "../it/common/mod.rs"]
mod common;
mod loop_durable_leftovers;
mod loop_faults;
mod loop_resume;
