//! `tacid`: see `tacid --help` and the man page tacid(1).

use clap::Parser;

fn main() -> std::process::ExitCode {
    tacid_cli::timings::start(std::time::Instant::now());
    let cli = tacid_cli::cli::Cli::parse();
    tacid_cli::timings::mark("parse");
    tacid_cli::run(cli)
}
