//! The integration tests of `copier`, one binary: each module a file, its tier the prefix of its name.
