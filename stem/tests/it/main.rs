//! The integration tests of `stem`, one binary: each module is a file of its own, its tier the prefix of its name (`cargo test -p stem --test it bus_`).

mod bus_cut;
mod bus_open;
mod bus_stem;
mod common;
mod introspection_drift;
mod loop_changes;
mod loop_copies;
mod loop_cut;
mod loop_cut_hooks;
mod loop_engine;
mod loop_generation;
mod loop_retention;
mod loop_sealed;
mod ssh_copies;
mod unit_file;
