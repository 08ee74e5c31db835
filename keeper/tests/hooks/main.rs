//! The keeper's tests that stop it at a named point of a request (`--features test-hooks`,
//! which this target requires): a binary of their own, since the hooks change the build of
//! `tacid-keeper` itself; the rest, `it`, use the keeper as it ships.

#[path = "../it/common/mod.rs"]
mod common;

mod bus_health;
mod bus_keeper_killed;
mod bus_request_path;
mod bus_set_restore_killed;
