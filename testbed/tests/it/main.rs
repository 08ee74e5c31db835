//! The integration tests of `testbed`, one binary: each module is a file of its own, its tier the prefix of its name (`cargo test -p testbed --test it ssh_`).

mod ssh_far_side;
