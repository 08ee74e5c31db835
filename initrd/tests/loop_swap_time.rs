//! How long the swap takes for a subvolume of 100,000 files against one of 10: it must not
//! grow with size (a snapshot and an exchange are O(1) in Btrfs; the replaced subvolume is
//! deleted by the cleaner after the boot). Prints the numbers; asserts only that each
//! restore really happened, never a time (timings on shared CI machines are noise).
//!
//! Run alone to see the numbers:
//! `cargo test -p initrd --release --test loop_swap_time -- --nocapture`
#![allow(clippy::unwrap_used)] // a panic is how a test reports

mod common;

use std::fs;
use std::time::{Duration, Instant, SystemTime};

use common::*;
use initrd::btrfs_disk::BtrfsDisk;
use initrd::driver::{restore_data, Observer, RestoreReport};
use initrd::steps::Step;

/// Time of each step since the run began.
struct Clock {
    start: Instant,
    steps: Vec<(Step, Duration)>,
}

impl Observer for Clock {
    fn log(&mut self, _line: &str) {}
    fn after(&mut self, step: Step) {
        self.steps.push((step, self.start.elapsed()));
    }
}

fn at(clock: &Clock, step: Step) -> Duration {
    clock
        .steps
        .iter()
        .find(|(s, _)| *s == step)
        .unwrap_or_else(|| panic!("{step} not taken"))
        .1
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median over `rounds` restores of a @home with `files` files: (to the committed exchange,
/// whole run).
fn measure(files: usize, rounds: usize) -> Option<(Duration, Duration)> {
    let mut fs = machine()?;
    for i in 0..files {
        let dir = fs.top().join(format!("@home/d{}", i / 1000));
        if i % 1000 == 0 {
            fs::create_dir_all(&dir).unwrap();
        }
        fs::write(dir.join(format!("f{i}")), b"x").unwrap();
    }
    let request = snapshot(&fs, "@home", 1);
    let mut exchanged = Vec::new();
    let mut whole = Vec::new();
    for _ in 0..rounds {
        write(&fs, "@home/changed", "after the snapshot");
        stage(&fs, &request);
        fs.remount().unwrap(); // as at boot: nothing cached, nothing dirty
        let mut disk = BtrfsDisk::open(fs.top()).unwrap();
        let mut clock = Clock {
            start: Instant::now(),
            steps: Vec::new(),
        };
        let report = restore_data(&mut disk, &mut clock, SystemTime::now()).unwrap();
        whole.push(clock.start.elapsed());
        drop(disk);
        assert_eq!(report, RestoreReport::Restored(request));
        exchanged.push(at(&clock, Step::RestoreCommitExchange));
        assert!(!exists(&fs, "@home/changed"));
    }
    let count: usize = fs::read_dir(fs.top().join("@home"))
        .unwrap()
        .map(|d| fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum();
    assert_eq!(
        count, files,
        "the restored @home has every file of the snapshot"
    );
    Some((median(exchanged), median(whole)))
}

#[test]
fn loop_swap_time_does_not_grow_with_the_number_of_files() {
    let Some((small_x, small)) = measure(10, 5) else {
        return;
    };
    let Some((large_x, large)) = measure(100_000, 5) else {
        return;
    };
    println!(
        "swap time, median of 5 (to the committed exchange / whole restore-data run):\n  \
         10 files:      {small_x:?} / {small:?}\n  100000 files:  {large_x:?} / {large:?}"
    );
}
