#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test
//! A consistent cut, measured with real parts: a writer in a cgroup v2 of its own appends
//! the same sequence numbers, alternately, to a file on `@persist` and one on `@log` of a
//! loop-device Btrfs as fast as it can; sets of both are taken while it runs, without and
//! with the writer paused (its cgroup frozen by the files, as where systemd is not PID 1).
//!
//! A set is one moment of the writer when its two members show a state it passed through:
//! it writes `n` to `@persist`, then `n` to `@log`, so `@log`'s last number is `@persist`'s
//! or one less. Anything else is a set that never existed as one moment.
//!
//! Needs root, loop devices and a writable cgroup v2 hierarchy; elsewhere each test says
//! SKIPPED loudly (and fails under CI=true).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use layout::cut::{CutConfig, UnitName};
use layout::{SubvolumeName, SNAPSHOTS_SUBVOLUME};
use stem::cut::guard::Guard;
use stem::cut::{Cut, CutError, Freezer, Target};
use stem::worker::Worker;
use stem::Engine;
use testbed::LoopFs;

const SIZE: u64 = 512 << 20;
pub(crate) const GUARD: &str = env!("CARGO_BIN_EXE_tacid-stem");

fn sv(name: &str) -> SubvolumeName {
    SubvolumeName::parse(name).unwrap()
}

fn unit(name: &str) -> UnitName {
    UnitName::parse(name).unwrap()
}

/// The cgroup v2 hierarchy, where one is mounted and writable (hybrid: `unified`).
pub(crate) fn cgroup2() -> Option<PathBuf> {
    for root in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
        let root = Path::new(root);
        if root.join("cgroup.procs").is_file() && fs::metadata(root).is_ok() {
            // One name per probe: the tests of this binary probe at once, from threads.
            static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let probe = root.join(format!("tacid-probe-{}-{n}", std::process::id()));
            if fs::create_dir(&probe).is_ok() {
                let freezable = probe.join("cgroup.freeze").is_file();
                let _ = fs::remove_dir(&probe);
                if freezable {
                    return Some(root.to_path_buf());
                }
            }
        }
    }
    let what = "needs a writable cgroup v2 hierarchy with cgroup.freeze";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true but this test cannot run: {what}");
    }
    eprintln!("\n*** SKIPPED: {what}; this consistent-cut test did not run ***\n");
    None
}

/// A tree of cgroups of this test's own, shaped as systemd's (`system.slice/<unit>`),
/// removed (its processes killed) on drop.
pub(crate) struct CgroupTree {
    pub(crate) root: PathBuf,
}

impl CgroupTree {
    pub(crate) fn new(v2: &Path, name: &str) -> CgroupTree {
        let root = v2.join(format!("tacid-test-{}-{name}", std::process::id()));
        fs::create_dir_all(root.join("system.slice")).unwrap();
        CgroupTree { root }
    }

    pub(crate) fn unit_dir(&self, unit: &str) -> PathBuf {
        let dir = self.root.join("system.slice").join(unit);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `script` run by `sh` inside the cgroup of `unit`.
    pub(crate) fn spawn(&self, unit: &str, script: &str) -> Child {
        let dir = self.unit_dir(unit);
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > '{}/cgroup.procs' && exec sh -c '{script}'",
                dir.display()
            ))
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        let mut dirs = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(d) = stack.pop() {
            if let Ok(entries) = fs::read_dir(&d) {
                for e in entries.flatten() {
                    if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        stack.push(e.path());
                    }
                }
            }
            dirs.push(d);
        }
        for d in dirs.iter().rev() {
            let _ = fs::write(d.join("cgroup.freeze"), "0");
            let _ = fs::write(d.join("cgroup.kill"), "1");
        }
        for d in dirs.iter().rev() {
            for _ in 0..200 {
                if fs::remove_dir(d).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

pub(crate) fn frozen(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .unwrap()
        .lines()
        .any(|l| l == "frozen 1")
}

/// The last whole number in `file`.
pub(crate) fn last_number(file: &Path) -> u64 {
    let text = fs::read(file).unwrap();
    let end = text.iter().rposition(|&b| b == b'\n').unwrap_or(0);
    let start = text[..end]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    std::str::from_utf8(&text[start..end])
        .unwrap_or("0")
        .parse()
        .unwrap_or(0)
}

struct Machine {
    fs: LoopFs,
    worker: Worker,
    rt: tokio::runtime::Runtime,
}

fn machine() -> Option<(Machine, PathBuf)> {
    let v2 = cgroup2()?;
    let fs = LoopFs::with_layout(SIZE).expect("make a loop Btrfs")?;
    let engine = Engine::open(fs.top()).unwrap();
    let worker = Worker::start(engine, || {}).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    Some((Machine { fs, worker, rt }, v2))
}

fn cut(units: &[&str], root: &Path, freeze_timeout_ms: u32) -> Cut {
    Cut::new(
        CutConfig {
            units: units.iter().map(|u| unit(u)).collect(),
            freeze_timeout_ms,
            hold_limit_ms: 10_000,

            hooks: Vec::new(),
        },
        Freezer::Cgroup {
            root: root.to_path_buf(),
        },
        PathBuf::from(GUARD),
    )
}

impl Machine {
    /// Take `n` sets of `@persist` and `@log` with `cut`; count those whose members
    /// disagree; delete each set. Also the median time of a set.
    fn sets(&self, cut: &Cut, n: usize) -> (usize, Duration) {
        let store = self.fs.top().join(SNAPSHOTS_SUBVOLUME);
        let mut bad = 0;
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let taken = self
                .rt
                .block_on(cut.take_set(&self.worker, vec![sv("@persist"), sv("@log")]))
                .unwrap();
            times.push(t.elapsed());
            let [p, l] = [&taken.snapshots[0], &taken.snapshots[1]]
                .map(|s| last_number(&store.join(s.name.to_string()).join("cut/seq")));
            if !(l == p || l + 1 == p) {
                bad += 1;
            }
            let names: Vec<_> = taken.snapshots.iter().map(|s| s.name).collect();
            self.rt
                .block_on(self.worker.run(move |e| {
                    for n in names {
                        e.delete(n).unwrap();
                    }
                }))
                .unwrap();
        }
        times.sort();
        (bad, times[n / 2])
    }

    fn writer(&self, tree: &CgroupTree, unit: &str) -> Child {
        for s in ["@persist", "@log"] {
            fs::create_dir_all(self.fs.top().join(s).join("cut")).unwrap();
        }
        let p = self.fs.top().join("@persist/cut/seq");
        let l = self.fs.top().join("@log/cut/seq");
        let child = tree.spawn(
            unit,
            &format!(
                "exec 3>>{} 4>>{}; i=0; while :; do i=$((i+1)); echo $i >&3; echo $i >&4; done",
                p.display(),
                l.display()
            ),
        );
        // Running: both files have numbers.
        wait_until("the writer writes", Duration::from_secs(10), || {
            p.exists() && last_number(&p) > 100
        });
        child
    }
}

#[test]
fn loop_without_the_pause_sets_disagree_and_with_it_none_do() {
    let Some((m, v2)) = machine() else { return };
    let tree = CgroupTree::new(&v2, "writer");
    let mut writer = m.writer(&tree, "writer.service");
    let plain = cut(&[], &tree.root, 2_000);
    let paused = cut(&["writer.service"], &tree.root, 2_000);

    let n = 200;
    let (bad_plain, t_plain) = m.sets(&plain, n);
    let (bad_paused, t_paused) = m.sets(&paused, n);
    eprintln!(
        "consistent cut: {n} sets without the pause: {bad_plain} disagree (median {t_plain:?}); \
         {n} with it: {bad_paused} disagree (median {t_paused:?})"
    );
    assert!(
        bad_plain > 0,
        "without the pause no set of {n} disagreed: the test shows nothing"
    );
    assert_eq!(bad_paused, 0, "{bad_paused} paused sets of {n} disagree");
    // The writer runs on, thawed.
    let dir = tree.unit_dir("writer.service");
    assert!(!frozen(&dir), "the writer was left frozen");
    let p = m.fs.top().join("@persist/cut/seq");
    let before = last_number(&p);
    wait_until("the writer goes on", Duration::from_secs(5), || {
        last_number(&p) > before
    });
    writer.kill().unwrap();
    writer.wait().unwrap();
}

#[test]
fn loop_a_unit_that_does_not_freeze_leaves_no_set_and_nothing_frozen() {
    let Some((m, v2)) = machine() else { return };
    let tree = CgroupTree::new(&v2, "stuck");
    let mut writer = m.writer(&tree, "writer.service");
    // A process writing to a frozen filesystem sleeps uninterruptibly in the kernel, where
    // the cgroup freezer cannot stop it: its cgroup never reports frozen.
    let other = LoopFs::new(128 << 20).unwrap().unwrap();
    let fsfreeze = |how: &str| {
        assert!(Command::new("fsfreeze")
            .arg(how)
            .arg(other.top())
            .status()
            .unwrap()
            .success())
    };
    fsfreeze("--freeze");
    let mut stuck = tree.spawn(
        "stuck.service",
        &format!("echo x > {}/x", other.top().display()),
    );
    let stuck_dir = tree.unit_dir("stuck.service");
    wait_until(
        "the stuck writer sleeps in D",
        Duration::from_secs(5),
        || {
            fs::read_to_string(stuck_dir.join("cgroup.procs"))
                .unwrap()
                .lines()
                .filter_map(|p| fs::read_to_string(format!("/proc/{p}/stat")).ok())
                .any(|stat| stat.split(") ").nth(1).is_some_and(|s| s.starts_with('D')))
        },
    );
    let before = m.rt.block_on(m.worker.run(|e| e.list())).unwrap().unwrap();

    let cut = cut(&["writer.service", "stuck.service"], &tree.root, 300);
    let t = Instant::now();
    let e =
        m.rt.block_on(cut.take_set(&m.worker, vec![sv("@persist"), sv("@log")]))
            .unwrap_err();
    let waited = t.elapsed();
    let text = e.to_string();
    assert!(
        matches!(&e, CutError::DidNotFreeze { unit, .. } if unit.as_str() == "stuck.service"),
        "{text}"
    );
    assert!(
        text.contains("stuck.service") && text.contains("no set was taken"),
        "{text}"
    );
    assert!(waited < Duration::from_secs(3), "gave up after {waited:?}");
    let after = m.rt.block_on(m.worker.run(|e| e.list())).unwrap().unwrap();
    assert_eq!(before.len(), after.len(), "a set was taken anyway");
    // Nothing left frozen: neither cgroup, and the writer goes on.
    assert!(!frozen(&tree.unit_dir("writer.service")));
    let freeze = fs::read_to_string(stuck_dir.join("cgroup.freeze")).unwrap();
    assert_eq!(
        freeze.trim(),
        "0",
        "the stuck unit was left asked to freeze"
    );
    let p = m.fs.top().join("@persist/cut/seq");
    let n = last_number(&p);
    wait_until("the writer goes on", Duration::from_secs(5), || {
        last_number(&p) > n
    });
    fsfreeze("--unfreeze");
    stuck.wait().unwrap();
    writer.kill().unwrap();
    writer.wait().unwrap();
}

#[test]
fn loop_the_guard_thaws_when_the_stem_goes_or_the_limit_passes() {
    let Some((m, v2)) = machine() else { return };
    let tree = CgroupTree::new(&v2, "guard");
    let mut writer = m.writer(&tree, "writer.service");
    let dir = tree.unit_dir("writer.service");
    let target = [Target::Cgroup {
        unit: unit("writer.service"),
        dir: dir.clone(),
    }];
    let freeze = || {
        fs::write(dir.join("cgroup.freeze"), "1").unwrap();
        wait_until("frozen", Duration::from_secs(5), || frozen(&dir));
    };

    // The stem's end of the pipe closes (as when it dies, by any signal): the guard thaws,
    // even though a stop's SIGTERM reached it first.
    let mut guard = Guard::start(Path::new(GUARD), &target, Duration::from_secs(60)).unwrap();
    freeze();
    assert!(guard.fired().is_none());
    let pid = guard_pid(&guard);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(guard.fired().is_none(), "SIGTERM ended the guard");
    assert!(frozen(&dir));
    drop(guard);
    wait_until("thawed by the guard", Duration::from_secs(5), || {
        !frozen(&dir)
    });

    // Its limit passes while the stem holds them: it thaws, and says so.
    let mut guard = Guard::start(Path::new(GUARD), &target, Duration::from_millis(300)).unwrap();
    freeze();
    wait_until("thawed at the limit", Duration::from_secs(5), || {
        !frozen(&dir)
    });
    wait_until("the guard ends", Duration::from_secs(5), || {
        guard.fired().is_some()
    });
    assert!(guard.fired().unwrap().contains("limit"));

    // Told done, it thaws nothing: a unit frozen by somebody else afterwards stays so.
    let guard = Guard::start(Path::new(GUARD), &target, Duration::from_secs(60)).unwrap();
    guard.finish(true);
    freeze();
    std::thread::sleep(Duration::from_millis(100));
    assert!(frozen(&dir));
    fs::write(dir.join("cgroup.freeze"), "0").unwrap();
    writer.kill().unwrap();
    writer.wait().unwrap();
}

fn guard_pid(g: &Guard) -> rustix::process::Pid {
    rustix::process::Pid::from_raw(g.id() as i32).unwrap()
}

/// Wait until `f` says yes, or fail saying what did not happen.
pub(crate) fn wait_until(what: &str, timeout: Duration, f: impl FnMut() -> bool) {
    assert!(
        testbed::wait_until(timeout, f).is_some(),
        "{what}: not within {timeout:?}"
    );
}

#[test]
fn loop_the_stop_of_the_stem_thaws_every_configured_unit() {
    // What the unit's ExecStopPost= runs: `tacid-stem --thaw-cut`, with root's file.
    let Some(v2) = cgroup2() else { return };
    let tree = CgroupTree::new(&v2, "stop");
    let mut a = tree.spawn("a.service", "while :; do sleep 0.01; done");
    let mut b = tree.spawn("b.service", "while :; do sleep 0.01; done");
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("cut.json");
    fs::write(&file, r#"{"units":["a.service","b.service","c.service"]}"#).unwrap();
    for u in ["a.service", "b.service"] {
        let dir = tree.unit_dir(u);
        fs::write(dir.join("cgroup.freeze"), "1").unwrap();
        wait_until("frozen", Duration::from_secs(5), || frozen(&dir));
    }
    let status = Command::new(GUARD)
        .args(["--thaw-cut", "--cut-config"])
        .arg(&file)
        .arg("--cgroup-root")
        .arg(&tree.root)
        .status()
        .unwrap();
    // c.service is not running: nothing to thaw there, and no failure.
    assert!(status.success(), "{status}");
    for u in ["a.service", "b.service"] {
        assert!(!frozen(&tree.unit_dir(u)), "{u} left frozen");
    }
    a.kill().unwrap();
    b.kill().unwrap();
    a.wait().unwrap();
    b.wait().unwrap();
}

#[test]
fn loop_a_pause_past_its_limit_keeps_no_set() {
    // The guard's limit passes at once: whichever way the race goes (it thaws before the
    // freeze, during the wait, or while the members are taken), no set is kept and
    // nothing stays frozen.
    let Some((m, v2)) = machine() else { return };
    let tree = CgroupTree::new(&v2, "limit");
    let mut writer = m.writer(&tree, "writer.service");
    let cut = Cut::new(
        CutConfig {
            units: vec![unit("writer.service")],
            freeze_timeout_ms: 200,
            hold_limit_ms: 1,

            hooks: Vec::new(),
        },
        Freezer::Cgroup {
            root: tree.root.clone(),
        },
        PathBuf::from(GUARD),
    );
    let before = m.rt.block_on(m.worker.run(|e| e.list())).unwrap().unwrap();
    for _ in 0..5 {
        let e =
            m.rt.block_on(cut.take_set(&m.worker, vec![sv("@persist"), sv("@log")]))
                .unwrap_err();
        assert!(
            matches!(
                e,
                CutError::HeldTooLong { .. } | CutError::DidNotFreeze { .. }
            ),
            "{e}"
        );
    }
    let after = m.rt.block_on(m.worker.run(|e| e.list())).unwrap().unwrap();
    assert_eq!(before.len(), after.len(), "a set was kept");
    assert!(!frozen(&tree.unit_dir("writer.service")), "left frozen");
    writer.kill().unwrap();
    writer.wait().unwrap();
}
