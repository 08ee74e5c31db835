//! The integration tests of `tacid-cli`, one binary: each module is a file of its own, its tier the prefix of its name (`cargo test -p tacid-cli --test it bus_`).

mod generated_docs;
mod holders_hang;
mod words;
