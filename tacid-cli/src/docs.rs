//! The man page and completions, rendered from [`crate::cli::Cli`].

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// Every generated file: its path under `tacid-cli/`, and its text.
pub fn generated() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let cmd = Cli::command();
    let mut man = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut man)
        .expect("rendering to memory cannot fail");
    out.push(("man/tacid.1", man));
    let mut data_man = Vec::new();
    let data = cmd
        .find_subcommand("data")
        .expect("tacid has a data subcommand")
        .clone()
        .name("tacid-data");
    clap_mangen::Man::new(data)
        .render(&mut data_man)
        .expect("rendering to memory cannot fail");
    out.push(("man/tacid-data.1", data_man));
    // The restore, with its options, its words on sets and its examples.
    let mut restore_man = Vec::new();
    let restore = cmd
        .find_subcommand("data")
        .and_then(|d| d.find_subcommand("restore"))
        .expect("tacid data has a restore subcommand")
        .clone()
        .name("tacid-data-restore")
        .bin_name("tacid data restore");
    clap_mangen::Man::new(restore)
        .render(&mut restore_man)
        .expect("rendering to memory cannot fail");
    out.push(("man/tacid-data-restore.1", restore_man));
    for (shell, path) in [
        (Shell::Bash, "completions/tacid.bash"),
        (Shell::Zsh, "completions/_tacid"),
        (Shell::Fish, "completions/tacid.fish"),
    ] {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "tacid", &mut text);
        out.push((path, text));
    }
    out
}
