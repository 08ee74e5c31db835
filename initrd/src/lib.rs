//! tacid-initrd: the part of tacid that runs in the initrd, before anything is mounted.
//!
//! Two jobs, each a swap of one name at the top of the Btrfs filesystem:
//! - [`driver::restore_data`] honours a staged restore request (docs/design.md section 4);
//! - [`driver::wipe_root`] makes `@root` again from `@root-blank`.
//!
//! Both are one state machine ([`machine`]) over an abstract disk ([`disk::Disk`]): the pure
//! planner decides the next step from what is on disk, the driver performs it and commits.
//! The real disk ([`btrfs_disk::BtrfsDisk`]) and the model in the property tests
//! (`model.rs`) run the very same driver code.

pub mod btrfs_disk;
pub mod cmdline;
pub mod disk;
pub mod driver;
pub mod machine;
#[cfg(test)]
mod model;
pub mod resume;
pub mod steps;
pub mod validate;
