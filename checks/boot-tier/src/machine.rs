//! Booting a test machine in qemu, watching its console, and cutting its power.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use initrd::steps::StepAt;

use crate::env::tools;
use crate::guest::Report;
use crate::parts::Parts;
use crate::{shown, Error, IoContext as _, Result};

/// Kernel command-line key that makes a test-hooked `tacid-initrd` stop after step N (its
/// first occurrence) or `N.k` (its k-th, in a set restore that repeats it per member).
pub const PAUSE_KEY: &str = "tacid.test_pause_after";
/// What `tacid-initrd` prints when it stops there: `<prefix> N (<name>)`, or
/// `<prefix> N.k (<name>)` for a later occurrence.
pub const PAUSE_LINE_PREFIX: &str = "tacid-initrd: test pause after step ";
/// How long one boot may take before it counts as hung (TCG, two machines at once).
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(240);

/// The hard floor the test machines' initrd is given (`tacid.hard_floor_bytes=`): far below
/// the test disk's free space, so a restore keeps what it replaces (see [`cmdline`]).
pub const HARD_FLOOR_BYTES: u64 = 1 << 20;

/// How qemu runs guests here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    /// Emulation; why KVM is not used.
    Tcg(String),
}

impl Accel {
    fn args(&self) -> Vec<&'static str> {
        match self {
            Accel::Kvm => vec!["-accel", "kvm", "-cpu", "host"],
            // RDRAND (emulated from the host's random source) seeds the guest's random
            // generator at once, with `random.trust_cpu=on` (see `cmdline`).
            Accel::Tcg(_) => vec!["-accel", "tcg", "-cpu", "qemu64,+rdrand"],
        }
    }
}

/// KVM when it truly boots a stock kernel here, TCG otherwise (decided once).
///
/// `/dev/kvm` may be `kvm_pvm`, which accepts a stock kernel and hangs it silently
/// (docs/machine-facts.md), so KVM must prove itself: an 8 s probe boot must print
/// "Linux version".
pub fn accel(parts: &Parts) -> Accel {
    static ACCEL: OnceLock<Accel> = OnceLock::new();
    ACCEL.get_or_init(|| decide_accel(parts)).clone()
}

fn decide_accel(parts: &Parts) -> Accel {
    if std::env::var("BOOT_TIER_ACCEL").is_ok_and(|v| v == "tcg") {
        return Accel::Tcg("BOOT_TIER_ACCEL=tcg".into());
    }
    if Path::new("/sys/module/kvm_pvm").exists() {
        return Accel::Tcg("/dev/kvm is kvm_pvm, which hangs a stock kernel".into());
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return Accel::Tcg("no usable /dev/kvm".into());
    }
    let probe = || -> Result<bool> {
        let dir = tempfile::tempdir().context(|| "probe dir".into())?;
        let console = dir.path().join("console");
        let mut child = Command::new(tools::QEMU)
            .args(Accel::Kvm.args())
            .args([
                "-machine",
                "q35",
                "-m",
                "512",
                "-smp",
                "1",
                "-nodefaults",
                "-no-reboot",
                "-display",
                "none",
            ])
            .arg("-kernel")
            .arg(&parts.kernel.boot_image)
            .args(["-append", "console=ttyS0 panic=-1"])
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context(|| "starting the KVM probe".into())?;
        let started = Instant::now();
        let mut seen = false;
        while started.elapsed() < Duration::from_secs(8) && !seen {
            std::thread::sleep(Duration::from_millis(200));
            seen = std::fs::read_to_string(&console).is_ok_and(|c| c.contains("Linux version"));
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok(seen)
    };
    match probe() {
        Ok(true) => Accel::Kvm,
        Ok(false) => Accel::Tcg("a KVM probe boot printed nothing in 8 s".into()),
        Err(e) => Accel::Tcg(format!("the KVM probe failed: {e}")),
    }
}

/// At most this many machines run at once: one per core (one vCPU each).
fn slots() -> &'static (Mutex<usize>, Condvar) {
    static SLOTS: OnceLock<(Mutex<usize>, Condvar)> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        (Mutex::new(n), Condvar::new())
    })
}

struct Slot;

impl Slot {
    fn take() -> Slot {
        let (free, cv) = slots();
        let mut n = free.lock().unwrap_or_else(|e| e.into_inner());
        while *n == 0 {
            n = cv.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        *n -= 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (free, cv) = slots();
        *free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        cv.notify_one();
    }
}

/// Kills qemu if the boot is abandoned (a panic, an error).
struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How to boot.
#[derive(Debug, Clone, Default)]
pub struct BootOptions {
    /// Stop `tacid-initrd` after this occurrence of a step and cut the power there.
    pub pause_after: Option<StepAt>,
    /// More kernel command-line words.
    pub extra_cmdline: Vec<String>,
    /// Copy the console to stdout as it comes.
    pub echo_console: bool,
    /// Log every write and flush the guest makes to its disk to this file (made anew), in
    /// the dm-log-writes format, through qemu's `blklogwrites` driver ([`crate::write_log`]).
    pub write_log: Option<PathBuf>,
}

/// How a boot ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The machine powered itself off.
    PoweredOff,
    /// `tacid-initrd` paused after this occurrence of a step (its name as printed) and the
    /// power was cut.
    PowerCut { at: StepAt, name: String },
    /// It ran past [`BOOT_TIMEOUT`] and was killed.
    TimedOut,
}

/// One boot: what it printed and said, how it ended, how long it took.
#[derive(Debug, Clone)]
pub struct Boot {
    pub console: String,
    pub report: Option<Report>,
    pub ending: Ending,
    pub took: Duration,
}

impl Boot {
    /// The console's last lines, for failure messages.
    pub fn console_tail(&self, lines: usize) -> String {
        let all: Vec<&str> = self.console.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The kernel clock of the console's last stamped line: how far the guest got.
    pub fn kernel_seconds(&self) -> Option<f64> {
        self.console.lines().rev().find_map(kernel_time)
    }

    /// The longest silence on the console (kernel clock) and the line that ended it.
    pub fn longest_quiet(&self) -> Option<(f64, String)> {
        let mut last: Option<f64> = None;
        let mut best: Option<(f64, String)> = None;
        for line in self.console.lines() {
            let Some(t) = kernel_time(line) else { continue };
            if let Some(prev) = last {
                if best.as_ref().is_none_or(|(g, _)| t - prev > *g) {
                    best = Some((t - prev, line.to_owned()));
                }
            }
            last = Some(t);
        }
        best
    }

    /// Seconds (kernel clock) a unit spent from "Starting" to "Finished"/"Failed", from
    /// systemd's own log lines on the console (`systemd.log_target=kmsg`).
    pub fn unit_seconds(&self, unit: &str) -> Option<f64> {
        let at = |words: &[&str]| {
            self.console.lines().find_map(|l| {
                let rest = l.split_once("] systemd[1]: ")?.1;
                if !words
                    .iter()
                    .any(|w| rest.starts_with(&format!("{w} {unit}")))
                {
                    return None;
                }
                l.trim_start_matches('[')
                    .split(']')
                    .next()?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
        };
        Some(at(&["Finished", "Failed to start"])? - at(&["Starting"])?)
    }
}

/// The kernel timestamp of a console line (`[   12.345678] ...`).
fn kernel_time(line: &str) -> Option<f64> {
    line.strip_prefix('[')?
        .split(']')
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The kernel command line of a test machine.
pub fn cmdline(options: &BootOptions) -> Vec<String> {
    let mut words: Vec<String> = vec![
        "console=ttyS0".into(),
        format!("root=LABEL={}", layout::names::FILESYSTEM_LABEL),
        format!("rootflags=subvol={}", layout::ROOT_SUBVOLUME),
        "rootfstype=btrfs".into(),
        "rw".into(),
        format!("init={}", crate::guest::init_path()),
        // A machine that cannot boot stops at once (a failed initrd powers off through the
        // test image's parts::emergency_poweroff_unit).
        "panic=-1".into(),
        // systemd's unit start/finish lines get kernel timestamps on the console.
        "systemd.log_target=kmsg".into(),
        "printk.devkmsg=on".into(),
        // Under TCG on a busy host the kernel's IO-APIC timer check can fail and panic
        // ("IO-APIC + timer doesn't work!"); virtual machines skip it.
        "no_timer_check".into(),
        // Less emulated work per boot (adr/0008, measured): systemd's coloured status lines
        // only repeat its kmsg lines on the serial console, and speculation barriers guard
        // nothing the tier proves.
        "systemd.show_status=false".into(),
        "mitigations=off".into(),
        // Against the rare stall of an idle guest on a loaded host (adr/0008: ~2 min right
        // after /sysroot is mounted, with and without the changes above): a periodic tick,
        // and a random generator ready from the start rather than never during a boot.
        "nohz=off".into(),
        "random.trust_cpu=on".into(),
        // The test disk (IMAGE_BYTES) is about the size of the shipped hard floor, below which
        // the boot deletes what a restore replaces instead of keeping it (adr/0027); the
        // machines here keep it, as a machine with room does. The deletion below the floor
        // is the loop tier's (`loop_below_the_hard_floor_…`).
        format!(
            "{}={HARD_FLOOR_BYTES}",
            layout::names::KERNEL_HARD_FLOOR_KEY
        ),
    ];
    if let Some(at) = options.pause_after {
        words.push(format!("{PAUSE_KEY}={at}"));
    }
    words.extend(options.extra_cmdline.iter().cloned());
    words
}

/// Boot the machine whose disk is `disk`, keeping its console and report in `dir`.
pub fn boot(parts: &Parts, disk: &Path, dir: &Path, options: &BootOptions) -> Result<Boot> {
    let console_path = dir.join("console");
    let report_path = dir.join("report");
    for p in [&console_path, &report_path] {
        let _ = std::fs::remove_file(p);
    }
    let accel = accel(parts);
    let _slot = Slot::take();
    let started = Instant::now();
    let child = Command::new(tools::QEMU)
        .args(accel.args())
        .args([
            "-machine",
            "q35",
            "-m",
            "1024",
            "-smp",
            "1",
            "-nodefaults",
            "-no-reboot",
        ])
        .args(["-display", "none", "-monitor", "none"])
        .arg("-kernel")
        .arg(&parts.kernel.boot_image)
        .arg("-initrd")
        .arg(&parts.initrd)
        .arg("-append")
        .arg(cmdline(options).join(" "))
        .args(drive_args(disk, options.write_log.as_deref())?)
        .arg("-serial")
        .arg(format!("file:{}", console_path.display()))
        .arg("-serial")
        .arg(format!("file:{}", report_path.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context(|| format!("starting {}", tools::QEMU))?;
    let mut qemu = Qemu(child);
    let mut console = String::new();
    let mut read_to = 0u64;
    let ending = loop {
        std::thread::sleep(Duration::from_millis(100));
        read_new(
            &console_path,
            &mut read_to,
            &mut console,
            options.echo_console,
        );
        if let Some(at) = options.pause_after {
            if let Some(name) = pause_seen(&console, at) {
                // The power cut: SIGKILL, no flush, no shutdown.
                let _ = qemu.0.kill();
                let _ = qemu.0.wait();
                break Ending::PowerCut { at, name };
            }
        }
        if let Some(status) = qemu.0.try_wait().context(|| "waiting for qemu".into())? {
            if !status.success() {
                let mut err = String::new();
                if let Some(mut e) = qemu.0.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(Error::Other(format!("qemu exited with {status}: {err}")));
            }
            break Ending::PoweredOff;
        }
        if started.elapsed() > BOOT_TIMEOUT {
            let _ = qemu.0.kill();
            let _ = qemu.0.wait();
            break Ending::TimedOut;
        }
    };
    let took = started.elapsed();
    read_new(
        &console_path,
        &mut read_to,
        &mut console,
        options.echo_console,
    );
    let report_text = std::fs::read_to_string(&report_path).unwrap_or_default();
    Ok(Boot {
        console,
        report: Report::parse(&report_text),
        ending,
        took,
    })
}

/// A path as a value in qemu's option syntax (a comma is written twice).
fn qemu_value(path: &Path) -> String {
    path.display().to_string().replace(',', ",,")
}

/// The machine's one disk: a virtio disk with a write cache the guest must flush (the
/// guest's writes reach the host's page cache, which survives a SIGKILL of qemu), or the same
/// disk under `blklogwrites`, which logs each write the disk completes, and each flush, in
/// the order they complete. The host's cache mode is the same either way (`cache=writeback`:
/// no O_DIRECT, flushes honoured).
fn drive_args(disk: &Path, write_log: Option<&Path>) -> Result<Vec<String>> {
    let Some(log) = write_log else {
        return Ok(vec![
            "-drive".into(),
            format!(
                "file={},format=raw,if=virtio,cache=writeback",
                qemu_value(disk)
            ),
        ]);
    };
    std::fs::File::create(log).context(|| format!("creating the write log {}", shown(log)))?;
    Ok(vec![
        "-blockdev".into(),
        format!(
            "driver=file,node-name=disk0,filename={},cache.direct=off,cache.no-flush=off",
            qemu_value(disk)
        ),
        "-blockdev".into(),
        format!(
            "driver=file,node-name=log0,filename={},cache.direct=off,cache.no-flush=off",
            qemu_value(log)
        ),
        "-blockdev".into(),
        // 512-byte log sectors: the guest's smallest write fits one.
        "driver=blklogwrites,node-name=logged0,file=disk0,log=log0,log-sector-size=512".into(),
        "-device".into(),
        "virtio-blk-pci,drive=logged0,write-cache=on".into(),
    ])
}

fn read_new(path: &Path, from: &mut u64, into: &mut String, echo: bool) {
    let Ok(mut f) = std::fs::File::open(path) else {
        return;
    };
    if f.seek(SeekFrom::Start(*from)).is_err() {
        return;
    }
    let mut bytes = Vec::new();
    if f.read_to_end(&mut bytes).is_ok() {
        *from += bytes.len() as u64;
        let text = String::from_utf8_lossy(&bytes);
        if echo {
            print!("{text}");
            let _ = std::io::stdout().flush();
        }
        into.push_str(&text);
    }
}

/// The step's name when the console shows the pause line for this occurrence of a step
/// (`N (` for a first, `N.k (` for a later one: neither is taken for the other).
pub fn pause_seen(console: &str, at: StepAt) -> Option<String> {
    let needle = format!("{PAUSE_LINE_PREFIX}{at} (");
    let at = console.find(&needle)? + needle.len();
    let rest = &console[at..];
    let end = rest.find(')')?;
    Some(rest[..end].to_owned())
}

/// A test machine: its own copy of the disk, in its own directory.
#[derive(Debug)]
pub struct Machine {
    pub parts: Parts,
    dir: tempfile::TempDir,
    pub disk: PathBuf,
    boots: u32,
}

impl Machine {
    /// A new machine with a fresh copy of the laid-out disk.
    pub fn new(parts: &Parts, name: &str) -> Result<Machine> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("boot-tier-{name}."))
            .tempdir()
            .context(|| "making a machine directory".into())?;
        let disk = dir.path().join("disk.img");
        crate::image::copy_disk(&parts.disk, &disk)?;
        Ok(Machine {
            parts: parts.clone(),
            dir,
            disk,
            boots: 0,
        })
    }

    /// Boot it once; the console of boot k is kept as `console.k` in its directory.
    pub fn boot(&mut self, options: &BootOptions) -> Result<Boot> {
        self.boots += 1;
        let boot_dir = self.dir.path().join(format!("boot.{}", self.boots));
        std::fs::create_dir_all(&boot_dir).context(|| format!("creating {}", shown(&boot_dir)))?;
        boot(&self.parts, &self.disk, &boot_dir, options)
    }

    /// Mount the disk's top level (only while the machine is off).
    pub fn disk_top(&self) -> Result<crate::image::Mounted> {
        crate::image::Mounted::top(&self.disk)
    }

    /// Keep the machine's directory (disk, consoles) after it is dropped; returns its path.
    pub fn keep(self) -> PathBuf {
        self.dir.keep()
    }

    /// The machine's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> StepAt {
        StepAt::parse(text).expect("N or N.k")
    }

    #[test]
    fn the_pause_line_is_found_with_its_name() {
        let console =
            "[   12.1] x\n[   13.2] tacid-initrd: test pause after step 3 (exchange the names)\n";
        assert_eq!(
            pause_seen(console, at("3")).as_deref(),
            Some("exchange the names")
        );
        assert_eq!(
            pause_seen(console, at("3.1")).as_deref(),
            Some("exchange the names")
        );
        assert_eq!(pause_seen(console, at("2")), None);
        assert_eq!(pause_seen(console, at("3.2")), None);
        assert_eq!(
            pause_seen("tacid-initrd: test pause after step 13 (x)", at("1")),
            None
        );
        // A later occurrence of a step (a set's second exchange) is not the step's first,
        // nor its third, and is found as itself.
        let second = "tacid-initrd: test pause after step 4.2 (restore: exchange the names)";
        assert_eq!(pause_seen(second, at("4")), None);
        assert_eq!(pause_seen(second, at("4.3")), None);
        assert_eq!(
            pause_seen(second, at("4.2")).as_deref(),
            Some("restore: exchange the names")
        );
        assert_eq!(
            pause_seen("tacid-initrd: test pause after step 4.22 (x)", at("4.2")),
            None
        );
    }

    #[test]
    fn unit_time_comes_from_systemds_lines() {
        let boot = Boot {
            console: "[   12.500000] systemd[1]: Starting a.service - A...\n\
                      [   12.750000] systemd[1]: Finished a.service - A.\n"
                .into(),
            report: None,
            ending: Ending::PoweredOff,
            took: Duration::ZERO,
        };
        let s = boot.unit_seconds("a.service").expect("both lines");
        assert!((s - 0.25).abs() < 1e-9, "{s}");
        assert_eq!(boot.unit_seconds("b.service"), None);
    }

    #[test]
    fn the_longest_silence_is_found() {
        let boot = Boot {
            console:
                "[    1.000000] a\nno stamp\n[    2.000000] b\n[   30.500000] c\n[   31.000000] d\n"
                    .into(),
            report: None,
            ending: Ending::PoweredOff,
            took: Duration::ZERO,
        };
        let (gap, line) = boot.longest_quiet().expect("lines with stamps");
        assert!((gap - 28.5).abs() < 1e-9, "{gap}");
        assert_eq!(line, "[   30.500000] c");
    }

    #[test]
    fn the_command_line_names_the_layouts_root_and_the_pause() {
        let words = cmdline(&BootOptions {
            pause_after: Some(at("4")),
            ..Default::default()
        });
        assert!(words.contains(&format!("rootflags=subvol={}", layout::ROOT_SUBVOLUME)));
        assert!(words.contains(&format!("{PAUSE_KEY}=4")));
        let words = cmdline(&BootOptions {
            pause_after: Some(at("4.2")),
            ..Default::default()
        });
        assert!(words.contains(&format!("{PAUSE_KEY}=4.2")));
        assert_eq!(words.iter().filter(|w| w.starts_with(PAUSE_KEY)).count(), 1);
    }
}
