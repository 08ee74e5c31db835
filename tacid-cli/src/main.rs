//! `tacid`: see `tacid --help` and the man page tacid(1).

use clap::Parser;

fn main() -> std::process::ExitCode {
    tacid_cli::run(tacid_cli::cli::Cli::parse())
}
