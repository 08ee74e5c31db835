//! `boot-tier`: build the test machine and boot it by hand.
//!
//! ```text
//! cargo run -p boot-tier -- build                   # build or reuse every part, say where
//! cargo run -p boot-tier -- boot --console          # one boot of a fresh machine, console live
//! cargo run -p boot-tier -- boot --pause-after 3    # cut the power after tacid-initrd's step 3
//! cargo run -p boot-tier -- boot --pause-after 4.2  # ... after the second time it does step 4
//! cargo run -p boot-tier -- boot --disk my.img      # boot (and keep changing) your own disk
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use boot_tier::machine::{self, BootOptions, Ending, StepAt};
use boot_tier::parts::{InitrdInputs, Parts};
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(about = "Build the boot tier's test machine and boot it by hand (needs root).")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Build (or reuse from checks/boot/cache/) the kernel, initrd and disk; print them.
    Build(Inputs),
    /// Boot a test machine once and say what it reported.
    Boot {
        #[command(flatten)]
        inputs: Inputs,
        /// Show the console (serial port 1) as it comes.
        #[arg(long)]
        console: bool,
        /// Cut the power once tacid-initrd pauses after this step: `N` (the first time it
        /// does step N) or `N.k` (the k-th time; a set restore does some steps per member).
        #[arg(long, value_name = "N[.k]", value_parser = step_at)]
        pause_after: Option<StepAt>,
        /// Boot this disk image instead of a fresh copy (it is changed by the boot).
        #[arg(long, value_name = "IMAGE")]
        disk: Option<PathBuf>,
        /// Keep the fresh machine's directory (disk and console) and print its path.
        #[arg(long)]
        keep: bool,
        /// More kernel command-line words.
        #[arg(long = "append", value_name = "WORD")]
        append: Vec<String>,
        /// Log every write and flush the guest makes to its disk to this file (dm-log-writes
        /// format, qemu's blklogwrites; made anew).
        #[arg(long, value_name = "FILE")]
        write_log: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
struct Inputs {
    /// Use this tacid-initrd binary (static) instead of building the workspace's.
    #[arg(long, value_name = "PATH", requires = "unit_dir")]
    initrd_binary: Option<PathBuf>,
    /// Use the unit files in this directory instead of initrd/systemd/.
    #[arg(long, value_name = "DIR", requires = "initrd_binary")]
    unit_dir: Option<PathBuf>,
}

/// `N` or `N.k` where N is one of tacid-initrd's step numbers (a pause elsewhere never comes).
fn step_at(text: &str) -> Result<StepAt, String> {
    let at = StepAt::parse(text)
        .ok_or_else(|| format!("{text:?} is not N or N.k (digits, k from 1)"))?;
    match initrd::steps::Step::from_number(at.number) {
        Some(_) => Ok(at),
        None => Err(format!(
            "tacid-initrd has no step {}; its steps: {}",
            at.number,
            initrd::steps::Step::ALL
                .iter()
                .map(|s| s.number().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        )),
    }
}

impl Inputs {
    fn parts(&self) -> boot_tier::Result<Parts> {
        match (&self.initrd_binary, &self.unit_dir) {
            (Some(binary), Some(unit_dir)) => Parts::build(&InitrdInputs {
                binary: binary.clone(),
                unit_dir: unit_dir.clone(),
                left_out: Vec::new(),
            }),
            _ => Parts::for_workspace(),
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("boot-tier: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> boot_tier::Result<ExitCode> {
    if let Some(why) = boot_tier::env::missing_prerequisite() {
        return Err(boot_tier::Error::Other(why));
    }
    match cli.command {
        Cmd::Build(inputs) => {
            let parts = inputs.parts()?;
            for (what, took) in &parts.timings {
                println!("{what:<28} {:>7.2} s", took.as_secs_f64());
            }
            println!(
                "kernel {}\ninitrd {}\ndisk   {}",
                parts.kernel.boot_image.display(),
                parts.initrd.display(),
                parts.disk.display()
            );
            println!("accel  {:?}", machine::accel(&parts));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Boot {
            inputs,
            console,
            pause_after,
            disk,
            keep,
            append,
            write_log,
        } => {
            let parts = inputs.parts()?;
            let options = BootOptions {
                pause_after,
                extra_cmdline: append,
                echo_console: console,
                write_log,
            };
            eprintln!(
                "kernel command line: {}",
                machine::cmdline(&options).join(" ")
            );
            let (boot, kept) = match disk {
                Some(disk) => {
                    let dir =
                        tempfile::tempdir().map_err(|e| boot_tier::Error::Other(e.to_string()))?;
                    (machine::boot(&parts, &disk, dir.path(), &options)?, None)
                }
                None => {
                    let mut m = machine::Machine::new(&parts, "by-hand")?;
                    let boot = m.boot(&options)?;
                    (boot, keep.then(|| m.keep()))
                }
            };
            println!(
                "\nboot ended: {:?} after {:.1} s",
                boot.ending,
                boot.took.as_secs_f64()
            );
            for unit in [
                layout::names::INITRD_RESTORE_UNIT,
                layout::names::INITRD_WIPE_ROOT_UNIT,
            ] {
                if let Some(s) = boot.unit_seconds(unit) {
                    println!("{unit}: {:.3} s (kernel clock, Starting → Finished)", s);
                }
            }
            match &boot.report {
                Some(r) => println!("report: {r:#?}"),
                None if boot.ending == Ending::PoweredOff => {
                    println!(
                        "no report: the machine did not reach its root. Console tail:\n{}",
                        boot.console_tail(40)
                    )
                }
                None => {}
            }
            if let Some(dir) = kept {
                println!("kept: {}", dir.display());
            }
            let ok = match boot.ending {
                Ending::PoweredOff => boot.report.is_some(),
                Ending::PowerCut { .. } => true,
                Ending::TimedOut => false,
            };
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
