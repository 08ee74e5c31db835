//! Writes tacid's man page and shell completions into the directory given (default:
//! `tacid-cli/`), generated from the clap definitions. `cargo run -p tacid-cli --bin
//! tacid-gen-docs -- tacid-cli` after changing the command line; a test checks the copies.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("tacid-cli"));
    for (path, text) in tacid_cli::docs::generated() {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            if let Err(e) = std::fs::create_dir_all(parent) {
                eprintln!("tacid-gen-docs: creating {}: {e}", parent.display());
                return ExitCode::FAILURE;
            }
        }
        if let Err(e) = std::fs::write(&target, text) {
            eprintln!("tacid-gen-docs: writing {}: {e}", target.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", target.display());
    }
    ExitCode::SUCCESS
}
