//! The integration tests of `keeper`, one binary: each module is a file of its own, its tier the prefix of its name (`cargo test -p keeper --test it bus_`).

mod bus_alerts;
mod bus_attacks_on_parents_transfers_and_opens;
mod bus_consent_and_reconcile;
mod bus_copier_impostor;
mod bus_copies;
mod bus_cut;
mod bus_fetched_restore;
mod bus_full_disk;
mod bus_health_copies;
mod bus_keeper;
mod bus_list;
mod bus_open_in_use;
mod bus_open_keeper;
mod bus_retention;
mod bus_sealed;
mod bus_sealed_copies;
mod bus_set_restore;
mod bus_space;
mod common;
mod hostile_bad_request;
mod hostile_flood;
mod hostile_previews;
mod hostile_words;
mod introspection_drift;
mod no_privileged_deps;
mod unit_files;
