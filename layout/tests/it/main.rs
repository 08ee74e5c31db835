//! The integration tests of `layout`, one binary: each module is a file of its own, its tier the prefix of its name (`cargo test -p layout --test it bus_`).

mod docs_defaults;
mod fuzz_seeds;
mod module_graph;
mod nix_names;
mod no_issue_numbers;
mod rust_version;
mod self_contained;
