//! The integration tests of `copier`, one binary: each module is a file of its own, its tier the prefix of its name (`cargo test -p copier --test it bus_`).

mod bus_copier;
mod bus_hostile;
mod bus_keys;
mod bus_limits;
mod bus_store;
mod common;
mod garage_copies;
mod introspection_drift;
mod no_privileged_deps;
mod ssh_copies;
mod unit_file;
