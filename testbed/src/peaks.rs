//! Test-only: what a daemon needed while a test pushed it (its threads, open files and peak
//! resident memory, read from `/proc`), held against the limits its shipped unit sets.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The most threads and open files a process had while watched, and its peak resident
/// memory since it started (the kernel's high-water mark).
#[derive(Debug, Clone, Copy, Default)]
pub struct Peaks {
    pub threads: u64,
    pub fds: u64,
    pub rss_kib: u64,
}

fn status_field(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn open_files(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Samples a process every 2 ms until finished.
#[derive(Debug)]
pub struct Watch {
    pid: u32,
    stop: Arc<AtomicBool>,
    sampler: JoinHandle<Peaks>,
}

pub fn watch(pid: u32) -> Watch {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let sampler = std::thread::spawn(move || {
        let mut peaks = Peaks::default();
        loop {
            if let Some(t) = status_field(pid, "Threads:") {
                peaks.threads = peaks.threads.max(t);
            }
            if let Some(n) = open_files(pid) {
                peaks.fds = peaks.fds.max(n);
            }
            if stopped.load(Ordering::Relaxed) {
                return peaks;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    Watch { pid, stop, sampler }
}

impl Watch {
    pub fn finish(self) -> Peaks {
        self.stop.store(true, Ordering::Relaxed);
        let mut peaks = self.sampler.join().expect("the sampler");
        peaks.rss_kib = status_field(self.pid, "VmHWM:").unwrap_or_default();
        peaks
    }
}

impl std::fmt::Display for Peaks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} threads, {} fds, {} KiB resident",
            self.threads, self.fds, self.rss_kib
        )
    }
}

/// What the daemon needed leaves at least half of each limit its unit sets (TasksMax,
/// LimitNOFILE, MemoryHigh): the limits are the measured needs with room (adr/0016), and
/// this keeps them so.
pub fn assert_within_unit_limits(daemon: &str, peaks: Peaks, unit_file: &Path) {
    let text = std::fs::read_to_string(unit_file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", unit_file.display()));
    let limit = |key: &str| {
        crate::units::value(&text, key)
            .unwrap_or_else(|| panic!("{} sets no {key}=", unit_file.display()))
    };
    let tasks: u64 = limit("TasksMax").parse().expect("TasksMax= a number");
    let files: u64 = limit("LimitNOFILE").parse().expect("LimitNOFILE= a number");
    let memory = crate::units::size_bytes(&limit("MemoryHigh")).expect("MemoryHigh= a size") >> 10;
    assert!(
        peaks.threads * 2 <= tasks && peaks.fds * 2 <= files && peaks.rss_kib * 2 <= memory,
        "{daemon} needed {peaks}; its unit allows TasksMax={tasks} LimitNOFILE={files} \
         MemoryHigh={memory} KiB: less than twice the need"
    );
}
