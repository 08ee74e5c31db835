//! The integration tests of `initrd`, one binary: each module is a file of its own, its tier the prefix of its name (`cargo test -p initrd --test it bus_`).

mod common;
mod hostile_leftovers;
mod loop_restore;
mod loop_swap_time;
mod units;
