//! The integration tests of `btrfs`, one binary: each module is a file of its own, its tier the prefix of its name (`cargo test -p btrfs --test it bus_`).

mod hostile_btrfs;
mod loop_btrfs;
mod loop_space;
