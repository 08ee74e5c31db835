//! How long the swap takes for a subvolume of 100,000 files against one of 10: it must not
//! grow with size (a snapshot and an exchange are O(1) in Btrfs; the replaced subvolume is
//! deleted by the cleaner after the boot). A measurement first: it prints the medians. It
//! fails only on a gross regression, with a bound loose enough for a shared 2-core machine:
//! the 100,000-file median must stay within `SLOWER_AT_MOST` times the 10-file one plus
//! `SLACK` (both for the swap, to the committed exchange, and for the whole run). A swap that
//! copied or walked the files would take seconds and break it; noise cannot.
//!
//! Run alone to see the numbers:
//! `cargo test -p initrd --release --test it loop_swap_time:: -- --nocapture`
#![allow(clippy::unwrap_used)] // a panic is how a test reports

use std::fs;
use std::time::{Duration, Instant, SystemTime};

use crate::common::*;
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
    fn left_behind(&mut self, what: &str) {
        panic!("a plain @home left something behind: {what}");
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

/// Medians (and every round) over some restores of one @home.
struct Timing {
    /// From the start of the run to the committed exchange: the swap itself.
    exchanged: Duration,
    /// The whole `restore_data` run (also the outcome, and deleting the replaced subvolume).
    whole: Duration,
    exchanged_rounds: Vec<Duration>,
    whole_rounds: Vec<Duration>,
}

/// `rounds` restores of a @home with `files` files; `None` when no loop Btrfs can be made.
fn measure(files: usize, rounds: usize) -> Option<Timing> {
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
        let report =
            restore_data(&mut disk, &mut clock, SystemTime::now(), LOOP_HARD_FLOOR).unwrap();
        whole.push(clock.start.elapsed());
        drop(disk);
        assert_eq!(report, RestoreReport::Restored(request.clone()));
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
    Some(Timing {
        exchanged: median(exchanged.clone()),
        whole: median(whole.clone()),
        exchanged_rounds: exchanged,
        whole_rounds: whole,
    })
}

/// The bound: large <= small * SLOWER_AT_MOST + SLACK.
const SLOWER_AT_MOST: u32 = 10;
const SLACK: Duration = Duration::from_millis(200);

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[test]
fn loop_swap_time_does_not_grow_with_the_number_of_files() {
    const ROUNDS: usize = 5;
    let Some(small) = measure(10, ROUNDS) else {
        return;
    };
    let Some(large) = measure(100_000, ROUNDS) else {
        return;
    };
    let rounds = |v: &[Duration]| v.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ");
    println!(
        "swap time, median of {ROUNDS} restores of @home after a remount (debug or release as built):\n  \
         to the committed exchange:  10 files {}  |  100000 files {}\n  \
         whole restore-data run:     10 files {}  |  100000 files {}\n  \
         rounds, exchange: 10 files [{}], 100000 files [{}]\n  \
         rounds, whole:    10 files [{}], 100000 files [{}]\n  \
         bound: 100000-file median <= {SLOWER_AT_MOST} x 10-file median + {}",
        ms(small.exchanged),
        ms(large.exchanged),
        ms(small.whole),
        ms(large.whole),
        rounds(&small.exchanged_rounds),
        rounds(&large.exchanged_rounds),
        rounds(&small.whole_rounds),
        rounds(&large.whole_rounds),
        ms(SLACK),
    );
    for (what, s, l) in [
        (
            "the swap (to the committed exchange)",
            small.exchanged,
            large.exchanged,
        ),
        ("the whole restore-data run", small.whole, large.whole),
    ] {
        let bound = s * SLOWER_AT_MOST + SLACK;
        assert!(
            l <= bound,
            "{what} grows with the number of files: median {} for 100000 files against {} \
             for 10 (bound {}); a swap must not copy or walk the files",
            ms(l),
            ms(s),
            ms(bound)
        );
    }
}
