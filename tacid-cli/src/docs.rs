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
    // The subcommands with words of their own (the restore's on sets, the copies' on
    // targets), with their options and examples.
    for (sub, name, bin_name, path) in [
        (
            "restore",
            "tacid-data-restore",
            "tacid data restore",
            "man/tacid-data-restore.1",
        ),
        (
            "copy",
            "tacid-data-copy",
            "tacid data copy",
            "man/tacid-data-copy.1",
        ),
        (
            "copies",
            "tacid-data-copies",
            "tacid data copies",
            "man/tacid-data-copies.1",
        ),
        (
            "fetch",
            "tacid-data-fetch",
            "tacid data fetch",
            "man/tacid-data-fetch.1",
        ),
        (
            "open",
            "tacid-data-open",
            "tacid data open",
            "man/tacid-data-open.1",
        ),
        (
            "close",
            "tacid-data-close",
            "tacid data close",
            "man/tacid-data-close.1",
        ),
        (
            "diff",
            "tacid-data-diff",
            "tacid data diff",
            "man/tacid-data-diff.1",
        ),
    ] {
        let mut page = Vec::new();
        let command = cmd
            .find_subcommand("data")
            .and_then(|d| d.find_subcommand(sub))
            .expect("tacid data has this subcommand")
            .clone()
            .name(name)
            .bin_name(bin_name);
        clap_mangen::Man::new(command)
            .render(&mut page)
            .expect("rendering to memory cannot fail");
        out.push((path, page));
    }
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
