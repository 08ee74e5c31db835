//! `tacid-initrd`: run by systemd units in the initrd (see `initrd/systemd/`).
//!
//! Exit status: 0 whenever the boot should simply go on (done, nothing to do, a refused
//! request, a resume from hibernation pending); 1 when the job could not finish and the next
//! boot must try again (adr/0007). Every line on stderr starts with `tacid-initrd:`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::{Args, Parser, Subcommand};
use initrd::btrfs_disk::BtrfsDisk;
use initrd::cmdline::Cmdline;
use initrd::driver::{restore_data, wipe_root, Observer, RestoreReport, WipeReport};
use initrd::resume::{ResumeFacts, ResumeSources};
use initrd::steps::{Occurrences, Step, StepAt};
use layout::names::{DEFAULT_DEVICE, KERNEL_DEVICE_KEY};

#[derive(Debug, Parser)]
#[command(
    name = "tacid-initrd",
    version,
    about = "Runs in the initrd: honours a staged tacid restore, makes @root again from @root-blank."
)]
struct Cli {
    #[command(subcommand)]
    job: Job,
}

#[derive(Debug, Subcommand)]
enum Job {
    /// Honour the restore request staged in the snapshot store, if any (exactly once).
    RestoreData(Target),
    /// Make @root again from @root-blank (the old @root and subvolumes nested in it go).
    WipeRoot(Target),
}

#[derive(Debug, Args)]
struct Target {
    /// Use this already mounted top level (subvolid=5) of the Btrfs filesystem. Without it,
    /// the device named by `tacid.device=` on the kernel command line (default
    /// /dev/disk/by-label/tacid) is mounted under /run/tacid-initrd and unmounted afterwards.
    #[arg(long, value_name = "DIR", conflicts_with = "device")]
    top: Option<PathBuf>,
    /// Mount this device instead of the one the kernel command line names.
    #[arg(long, value_name = "DEVICE")]
    device: Option<PathBuf>,
    /// restore-data: below this many free bytes the subvolumes a restore replaces are deleted
    /// instead of kept for an undo. Without it, `tacid.hard_floor_bytes=` on the kernel
    /// command line, else the layout's default (the stem's hard floor).
    #[arg(long, value_name = "BYTES")]
    hard_floor_bytes: Option<u64>,
}

fn say(line: &str) {
    eprintln!("tacid-initrd: {line}");
}

/// The log, what a run leaves behind, how often each step was done, and (only in test
/// builds) the fault switches: `N` stops after the first time step N is done, `N.k` after
/// the k-th (a set restore repeats its per-member steps).
#[derive(Debug, Default)]
struct Console {
    left_behind: Vec<String>,
    done: Occurrences,
    #[cfg(feature = "test-hooks")]
    stop_after: Option<StepAt>,
    #[cfg(feature = "test-hooks")]
    pause_after: Option<StepAt>,
}

impl Console {
    #[cfg_attr(not(feature = "test-hooks"), allow(unused_variables))]
    fn new(cmdline: &Cmdline) -> Console {
        #[cfg(feature = "test-hooks")]
        {
            let stop_after = std::env::var("TACID_TEST_STOP_AFTER")
                .ok()
                .and_then(|v| StepAt::parse(&v));
            let pause_after = cmdline
                .value("tacid.test_pause_after")
                .and_then(StepAt::parse);
            if stop_after.is_some() || pause_after.is_some() {
                let shown = |at: Option<StepAt>| at.map_or("none".to_owned(), |a| a.to_string());
                say(&format!(
                    "TEST BUILD: fault switches armed (stop after {}, pause after {})",
                    shown(stop_after),
                    shown(pause_after)
                ));
            }
            Console {
                left_behind: Vec::new(),
                done: Occurrences::default(),
                stop_after,
                pause_after,
            }
        }
        #[cfg(not(feature = "test-hooks"))]
        Console::default()
    }
}

impl Observer for Console {
    fn log(&mut self, line: &str) {
        say(line);
    }

    fn left_behind(&mut self, what: &str) {
        self.left_behind.push(what.to_owned());
    }

    fn after(&mut self, step: Step) {
        let at = StepAt::new(step, self.done.next(step));
        say(&format!("done step {at} ({})", step.name()));
        #[cfg(feature = "test-hooks")]
        {
            if self.stop_after == Some(at) {
                say(&format!("test stop after step {at} ({})", step.name()));
                std::process::exit(99);
            }
            if self.pause_after == Some(at) {
                test_pause(step, at);
            }
        }
    }
}

/// Announce the pause on stderr and the kernel log (the serial console shows it), then wait
/// for the boot tier to cut the power. The filesystem is deliberately not synced: a pause
/// after an uncommitted step must let the power cut lose that step, as a real one would.
/// (Writes to /dev/kmsg reach the kernel log and console synchronously.) The line is
/// `test pause after step N (name)`, or `step N.k (name)` for a later occurrence, which the
/// boot tier's parser (`checks/boot-tier/src/machine.rs`) never takes for step N.
#[cfg(feature = "test-hooks")]
fn test_pause(step: Step, at: StepAt) -> ! {
    use std::io::Write as _;
    let line = format!("tacid-initrd: test pause after step {at} ({})", step.name());
    eprintln!("{line}");
    if let Ok(mut kmsg) = std::fs::OpenOptions::new().write(true).open("/dev/kmsg") {
        let _ = writeln!(kmsg, "{line}");
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The kernel command line. Test builds may take it from `TACID_TEST_CMDLINE` instead, so the
/// loop tests can drive what only the boot tier can set for real.
fn kernel_cmdline() -> Cmdline {
    #[cfg(feature = "test-hooks")]
    if let Ok(text) = std::env::var("TACID_TEST_CMDLINE") {
        return Cmdline::parse(&text);
    }
    Cmdline::from_proc()
}

/// What the initrd can see about hibernation. Test builds may read `/sys/power/resume` and
/// systemd's `HibernateLocation` EFI variable from other files (`TACID_TEST_SYS_POWER_RESUME`,
/// `TACID_TEST_EFI_HIBERNATE_LOCATION`), so the loop tests can drive the resume check with
/// the real binary; with `TACID_TEST_CMDLINE` that covers every input of `resume.rs`. A build
/// for users always reads the kernel's own files.
fn resume_facts(cmdline: &Cmdline) -> ResumeFacts {
    #[cfg_attr(not(feature = "test-hooks"), allow(unused_mut))]
    let mut sources = ResumeSources::default();
    #[cfg(feature = "test-hooks")]
    {
        if let Some(path) = std::env::var_os("TACID_TEST_SYS_POWER_RESUME") {
            sources.sys_power_resume = PathBuf::from(path);
        }
        if let Some(path) = std::env::var_os("TACID_TEST_EFI_HIBERNATE_LOCATION") {
            sources.efi_hibernate_location = PathBuf::from(path);
        }
        if sources != ResumeSources::default() {
            say(&format!(
                "TEST BUILD: hibernation facts from {} and {}",
                sources.sys_power_resume.display(),
                sources.efi_hibernate_location.display()
            ));
        }
    }
    ResumeFacts::read_from(cmdline, &sources)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cmdline = kernel_cmdline();
    let mut console = Console::new(&cmdline);
    let (name, target) = match &cli.job {
        Job::RestoreData(t) => ("restore-data", t),
        Job::WipeRoot(t) => ("wipe-root", t),
    };
    let started = Instant::now();
    // The pid names the temporary files of this run's durable writes (`.tmp.<pid>.<n>`).
    say(&format!("{name}: starting (pid {})", std::process::id()));
    let hard_floor = target
        .hard_floor_bytes
        .or_else(|| {
            cmdline
                .value(layout::names::KERNEL_HARD_FLOOR_KEY)?
                .parse()
                .ok()
        })
        .unwrap_or(layout::defaults::HARD_FLOOR_BYTES);
    let status = match &target.top {
        Some(top) => run(&cli.job, top, &mut console, hard_floor),
        None => {
            if let Some(why) = resume_facts(&cmdline).pending_resume() {
                say(&format!(
                    "{name}: {why}; a hibernated system may still resume from this disk, so nothing \
                     is changed now (a staged restore waits for a normal boot)"
                ));
                return ExitCode::SUCCESS;
            }
            let device = match &target.device {
                Some(device) => device.clone(),
                None => PathBuf::from(cmdline.value(KERNEL_DEVICE_KEY).unwrap_or(DEFAULT_DEVICE)),
            };
            match Mounted::new(&device, name) {
                Ok(mounted) => {
                    let status = run(&cli.job, &mounted.path, &mut console, hard_floor);
                    drop(mounted);
                    status
                }
                Err(e) => {
                    say(&format!(
                        "{name}: {e}; nothing was changed, the next boot tries again"
                    ));
                    ExitCode::FAILURE
                }
            }
        }
    };
    say(&format!(
        "{name}: finished in {} ms",
        started.elapsed().as_millis()
    ));
    status
}

fn run(job: &Job, top: &Path, console: &mut Console, hard_floor: u64) -> ExitCode {
    let mut disk = match BtrfsDisk::open(top) {
        Ok(disk) => disk,
        Err(e) => {
            say(&format!(
                "cannot open the Btrfs top level at {}: {e}; the next boot tries again",
                top.display()
            ));
            return ExitCode::FAILURE;
        }
    };
    let status = match job {
        Job::RestoreData(_) => {
            match restore_data(&mut disk, console, SystemTime::now(), hard_floor) {
                Ok(RestoreReport::NothingStaged) => ExitCode::SUCCESS,
                Ok(RestoreReport::Restored(r)) => {
                    let each: Vec<String> = r
                        .members()
                        .iter()
                        .map(|m| format!("{} is back to {}", m.subvolume(), m.snapshot()))
                        .collect();
                    say(&format!("restore-data: done: {}", each.join(", ")));
                    ExitCode::SUCCESS
                }
                Ok(RestoreReport::Refused { refusal, request }) => {
                    let unchanged = match &request {
                        Some(r) if r.members().len() == 1 => {
                            format!("; {} was not changed", r.subvolumes())
                        }
                        Some(r) => format!("; none of {} was changed", r.subvolumes()),
                        None => String::new(),
                    };
                    say(&format!(
                        "restore-data: refused: {refusal}{unchanged}; the boot continues"
                    ));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    say(&format!(
                    "restore-data: could not finish: {e}; the live subvolume is intact and the \
                     next boot finishes the work"
                ));
                    ExitCode::FAILURE
                }
            }
        }
        Job::WipeRoot(_) => match wipe_root(&mut disk, console) {
            Ok(WipeReport::Wiped | WipeReport::Created) => {
                if !console.left_behind.is_empty() {
                    say("wipe-root: @root is fresh");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                say(&format!(
                    "wipe-root: could not finish: {e}; this boot may run on the old root, the next \
                     boot tries again"
                ));
                ExitCode::FAILURE
            }
        },
    };
    // The job is done, but what could not be deleted stays: the unit says so by failing, and
    // the next boot tries again (adr/0015).
    if status == ExitCode::SUCCESS && !console.left_behind.is_empty() {
        for what in &console.left_behind {
            say(&format!(
                "left behind: {what}; the next boot tries to delete it again"
            ));
        }
        return ExitCode::FAILURE;
    }
    status
}

/// The filesystem's top level mounted at a private directory under /run, for one job.
#[derive(Debug)]
struct Mounted {
    path: PathBuf,
}

/// How long to wait for the device node (udev may still be creating the by-label link).
const DEVICE_WAIT: Duration = Duration::from_secs(30);
const RUN_DIR: &str = "/run/tacid-initrd";

impl Mounted {
    fn new(device: &Path, job: &str) -> Result<Mounted, String> {
        let deadline = Instant::now() + DEVICE_WAIT;
        while !device.exists() {
            if Instant::now() > deadline {
                return Err(format!(
                    "device {} did not appear within {} s (set {KERNEL_DEVICE_KEY}= on the kernel command line)",
                    device.display(),
                    DEVICE_WAIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let run_dir = Path::new(RUN_DIR);
        std::fs::create_dir_all(run_dir).map_err(|e| format!("cannot create {RUN_DIR}: {e}"))?;
        rustix::fs::chmod(run_dir, rustix::fs::Mode::from_raw_mode(0o700))
            .map_err(|e| format!("cannot chmod {RUN_DIR}: {e}"))?;
        let path = run_dir.join(job);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
        }
        use rustix::mount::{mount, MountFlags};
        mount(
            device,
            &path,
            "btrfs",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            c"subvolid=5",
        )
        .map_err(|e| {
            format!(
                "cannot mount {} (btrfs, subvolid=5) at {}: {e}",
                device.display(),
                path.display()
            )
        })?;
        say(&format!(
            "mounted {} (subvolid=5) at {}",
            device.display(),
            path.display()
        ));
        Ok(Mounted { path })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        use rustix::mount::{unmount, UnmountFlags};
        match unmount(&self.path, UnmountFlags::empty()) {
            Ok(()) => {
                let _ = std::fs::remove_dir(&self.path);
            }
            Err(e) => say(&format!(
                "warning: cannot unmount {}: {e}",
                self.path.display()
            )),
        }
    }
}
