//! `tacid-stem-receive`: one `btrfs receive` for the stem, per connection to its socket
//! (`tacid-stem-receive.socket`, `Accept=yes`; outside systemd,
//! `systemd-socket-activate --accept --inetd`). The connection is stdin and stdout; what it
//! is sent is untrusted (`stem::receiver`). Its log goes to stderr (the journal).

use std::os::fd::AsFd as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use stem::receive_protocol::Answer;
use stem::receiver::{serve, Options};

/// Receive one send stream from the stem into the store's `.incoming` or a local Btrfs copy
/// target named in root's configuration, under `btrfs receive --chroot`.
#[derive(Debug, Parser)]
#[command(name = "tacid-stem-receive", version)]
struct Args {
    /// Where the store (`@snapshots`) is mounted; its `.incoming` is received into.
    #[arg(long, value_name = "DIR", default_value = layout::SNAPSHOTS_MOUNT_POINT)]
    snapshots: PathBuf,

    /// Root's copies configuration: the local targets that may be received into.
    #[arg(long, value_name = "PATH", default_value = layout::copies::CONFIG_PATH)]
    copies_config: PathBuf,

    /// `btrfs` (btrfs-progs): a name looked up in PATH, or a path.
    #[arg(long, value_name = "PROGRAM", default_value = "btrfs")]
    btrfs: PathBuf,

    /// Seconds `btrfs receive` may go on after the stream ended.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    stall_secs: u64,

    /// Seconds one receive may take in all (a disk's worth from a slow link fits).
    #[arg(long, value_name = "SECONDS", default_value_t = 48 * 3600)]
    deadline_secs: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let opts = Options {
        snapshots: args.snapshots,
        copies_config: args.copies_config,
        btrfs: args.btrfs,
        stall: Duration::from_secs(args.stall_secs),
        deadline: Duration::from_secs(args.deadline_secs),
    };
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    match serve(&opts, stdin.as_fd(), &mut stdout) {
        Answer::Ok => {
            eprintln!("received");
            ExitCode::SUCCESS
        }
        Answer::Failed(why) => {
            eprintln!("not received: {why}");
            ExitCode::FAILURE
        }
    }
}
