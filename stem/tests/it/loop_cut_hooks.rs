#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test
//! Hooks of a consistent cut (adr/0026), with real parts: a real user of the machine owns a
//! writer that keeps its state in memory and writes it to `@persist` only when asked (as a
//! database checkpoints); root's hook, run as that user before the freeze, asks it to and
//! waits; the set then holds the checkpoint. The hook runs as the user (the files it makes
//! are the user's, with the user's groups), with nothing of the stem's environment or open
//! files, never while anything is frozen; a hook past its limit is killed with everything
//! it started and no set is taken; output is capped; an after hook that fails is reported
//! and the set stands.
//!
//! The stem runs hooks itself here, as it does where systemd is not PID 1.

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use layout::cut::{CutConfig, Hook, HookCommand, HookUser, HookWhen, UnitName};
use layout::{SubvolumeName, SNAPSHOTS_SUBVOLUME};
use stem::cut::{Cut, CutError, Freezer};
use stem::worker::Worker;
use stem::Engine;
use testbed::LoopFs;

use crate::loop_cut::{cgroup2, frozen, wait_until, CgroupTree, GUARD};

/// The writer's user: a real account of this machine, made once and never removed.
const DB_USER: &str = "tacid-cut-db";
/// A supplementary group of it, which its hooks must hold.
const DB_GROUP: &str = "tacid-cut-dbextra";

fn sv(name: &str) -> SubvolumeName {
    SubvolumeName::parse(name).unwrap()
}

fn unit(name: &str) -> UnitName {
    UnitName::parse(name).unwrap()
}

fn sh(script: &str) -> HookCommand {
    HookCommand::parse(vec!["/bin/sh".into(), "-c".into(), script.into()]).unwrap()
}

struct Machine {
    fs: LoopFs,
    worker: Worker,
    rt: tokio::runtime::Runtime,
    tree: CgroupTree,
    /// The user's uid, primary gid, and the extra group's gid.
    ids: (u32, u32, u32),
}

fn machine(name: &str) -> Option<Machine> {
    let v2 = cgroup2()?;
    let fs = LoopFs::with_layout(256 << 20).expect("make a loop Btrfs")?;
    let (uid, gid) = testbed::users::ensure_system_user(DB_USER);
    let extra = testbed::users::ensure_group(DB_GROUP, &["--system"]);
    testbed::users::ensure_member(DB_USER, DB_GROUP);
    let engine = Engine::open(fs.top()).unwrap();
    let worker = Worker::start(engine, || {}).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tree = CgroupTree::new(&v2, name);
    // The user's own directory on @persist, as a database's data directory is.
    let db = fs.top().join("@persist/db");
    fs::create_dir_all(&db).unwrap();
    std::os::unix::fs::chown(&db, Some(uid), Some(gid)).unwrap();
    Some(Machine {
        fs,
        worker,
        rt,
        tree,
        ids: (uid, gid, extra),
    })
}

impl Machine {
    fn db(&self) -> PathBuf {
        self.fs.top().join("@persist/db")
    }

    fn cut(&self, hooks: Vec<Hook>) -> Cut {
        Cut::new(
            CutConfig {
                units: vec![unit("db.service")],
                freeze_timeout_ms: 2_000,
                hold_limit_ms: 10_000,
                hooks,
            },
            Freezer::Cgroup {
                root: self.tree.root.clone(),
            },
            PathBuf::from(GUARD),
        )
    }

    /// The writer, as the user, in the cgroup of `db.service`: it counts in memory and
    /// writes its count to `db/data` (temp and rename, as a checkpoint) only when
    /// `db/checkpoint-asked` appears, which it then removes.
    fn writer(&self) -> Child {
        let db = self.db();
        let dir = self.tree.unit_dir("db.service");
        let (uid, gid, _) = self.ids;
        let script = format!(
            "i=0; while :; do i=$((i+1)); if [ -e {db}/checkpoint-asked ]; then \
             echo $i > {db}/data.tmp && mv {db}/data.tmp {db}/data && rm {db}/checkpoint-asked; \
             fi; done",
            db = db.display()
        );
        // Into the unit's cgroup as root (cgroup.procs is root's), then the user's.
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > '{}/cgroup.procs' && exec setpriv --reuid={uid} --regid={gid} \
                 --init-groups sh -c '{script}'",
                dir.display()
            ))
            .spawn()
            .unwrap();
        let pid = child.id();
        wait_until(
            "the writer runs as its user",
            Duration::from_secs(10),
            || {
                fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == uid)
                    && fs::read_to_string(dir.join("cgroup.procs"))
                        .is_ok_and(|p| p.lines().any(|l| l == pid.to_string()))
            },
        );
        child
    }

    fn store(&self) -> PathBuf {
        self.fs.top().join(SNAPSHOTS_SUBVOLUME)
    }

    fn count(&self) -> usize {
        self.rt
            .block_on(self.worker.run(|e| e.list()))
            .unwrap()
            .unwrap()
            .len()
    }
}

/// The cgroup's `frozen` line as the hook reads it: `frozen 0` or `frozen 1`.
fn frozen_line(dir: &Path) -> String {
    format!("cat {}/cgroup.events | grep frozen", dir.display())
}

#[test]
fn loop_a_hook_before_the_freeze_runs_as_the_units_user_and_its_checkpoint_is_in_the_set() {
    let Some(m) = machine("hook-user") else {
        return;
    };
    let (uid, gid, extra) = m.ids;
    let mut writer = m.writer();
    let db = m.db();
    let dir = m.tree.unit_dir("db.service");
    // Before: ask for a checkpoint and wait until the writer made it; say who we are, what
    // we hold open and in our environment, and whether the unit is frozen; leave a mark.
    let before = format!(
        "touch {db}/checkpoint-asked; while [ -e {db}/checkpoint-asked ]; do sleep 0.01; done; \
         echo ids $(id -u) $(id -g) groups $(id -G); ls -l /proc/self/fd; env; {frozen}; \
         echo hook > {db}/before-mark",
        db = db.display(),
        frozen = frozen_line(&dir)
    );
    let after = format!(
        "{frozen}; echo hook > {db}/after-mark",
        db = db.display(),
        frozen = frozen_line(&dir)
    );
    let cut = m.cut(vec![Hook {
        unit: unit("db.service"),
        user: HookUser::parse(DB_USER).unwrap(),
        before: Some(sh(&before)),
        before_limit_ms: 10_000,
        after: Some(sh(&after)),
        after_limit_ms: 10_000,
    }]);
    assert!(
        !db.join("data").exists(),
        "the writer wrote before it was asked"
    );
    // A descriptor of this process that an exec would keep (no close-on-exec): the hook
    // must not get it.
    let probe = tempfile::tempdir().unwrap();
    let leak = fs::File::create(probe.path().join("tacid-leak-probe")).unwrap();
    rustix::io::fcntl_setfd(&leak, rustix::io::FdFlags::empty()).unwrap();

    let taken =
        m.rt.block_on(cut.take_set(&m.worker, vec![sv("@persist"), sv("@log")]))
            .unwrap();
    assert_eq!(taken.paused, [unit("db.service")]);
    let [b, a] = &taken.hooks[..] else {
        panic!("two hooks ran: {:?}", taken.hooks);
    };
    let out = String::from_utf8_lossy(&b.output).into_owned();
    eprintln!("before hook: {} / output:\n{out}", b.line());
    assert!(b.ok && b.when == HookWhen::Before, "{}", b.line());
    assert!(b.summary.starts_with("exited 0"), "{}", b.summary);
    // As the user, with its primary and supplementary groups and none of root's.
    assert!(out.contains(&format!("ids {uid} {gid} groups")), "{out}");
    let groups: Vec<u32> = out
        .lines()
        .find_map(|l| l.split_once(" groups "))
        .unwrap()
        .1
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    assert!(
        groups.contains(&extra),
        "no {DB_GROUP} ({extra}) in {groups:?}"
    );
    assert!(!groups.contains(&0), "root's group in {groups:?}");
    let mark = fs::metadata(db.join("before-mark")).unwrap();
    assert_eq!((mark.uid(), mark.gid()), (uid, gid));
    // Nothing of the stem's open files: the shell holds only 0, 1 and 2.
    // (`ls` holds 0, 1, 2 and the directory it lists.)
    assert!(!out.contains("tacid-leak-probe"), "{out}");
    let fds: Vec<&str> = out
        .lines()
        .filter_map(|l| {
            l.split_once(" -> ")
                .map(|(a, _)| a.rsplit(' ').next().unwrap())
        })
        .collect();
    assert_eq!(fds, ["0", "1", "2", "3"], "{out}");
    drop(leak);
    // Nothing of the stem's environment (cargo sets CARGO_* for this test process).
    assert!(!out.contains("CARGO"), "{out}");
    for line in [
        "TACID_HOOK=before",
        "TACID_UNIT=db.service",
        "USER=tacid-cut-db",
    ] {
        assert!(out.lines().any(|l| l == line), "no {line} in {out}");
    }
    // Not frozen while the hook ran, nor while the after hook ran.
    assert!(out.contains("frozen 0"), "{out}");
    let after_out = String::from_utf8_lossy(&a.output).into_owned();
    assert!(a.ok && a.when == HookWhen::After, "{}", a.line());
    assert!(after_out.contains("frozen 0"), "{after_out}");
    assert_eq!(fs::metadata(db.join("after-mark")).unwrap().uid(), uid);

    // The checkpoint the hook asked for is in the set: the writer's data, as it wrote it.
    let snap = m.store().join(taken.snapshots[0].name.to_string());
    let in_set = fs::read_to_string(snap.join("db/data")).unwrap();
    assert!(in_set.trim().parse::<u64>().unwrap() > 0, "{in_set:?}");
    assert!(snap.join("db/before-mark").exists());
    assert!(
        !snap.join("db/after-mark").exists(),
        "the after hook ran before the set"
    );
    assert!(!frozen(&dir));
    writer.kill().unwrap();
    writer.wait().unwrap();
}

#[test]
fn loop_a_hook_past_its_limit_is_killed_with_what_it_started_and_no_set_is_taken() {
    let Some(m) = machine("hook-limit") else {
        return;
    };
    let (uid, ..) = m.ids;
    let mut writer = m.writer();
    let db = m.db();
    let dir = m.tree.unit_dir("db.service");
    // A hook that hangs, with a child of its own that would outlive it.
    let before = format!(
        "sleep 1000 & echo $! > {db}/child; echo started; sleep 1000",
        db = db.display()
    );
    let cut = m.cut(vec![Hook {
        unit: unit("db.service"),
        user: HookUser::parse(DB_USER).unwrap(),
        before: Some(sh(&before)),
        before_limit_ms: 300,
        after: None,
        after_limit_ms: 10_000,
    }]);
    let sets = m.count();
    let t = Instant::now();
    let e =
        m.rt.block_on(cut.take_set(&m.worker, vec![sv("@persist"), sv("@log")]))
            .unwrap_err();
    let waited = t.elapsed();
    let text = e.to_string();
    eprintln!("a hanging hook: {text} (after {waited:?})");
    assert!(matches!(e, CutError::HookFailed(_)), "{text}");
    assert!(
        text.contains("before db.service as tacid-cut-db")
            && text.contains("limit of 300 ms")
            && text.contains("no set was taken"),
        "{text}"
    );
    assert!(waited < Duration::from_secs(2), "gave up after {waited:?}");
    assert_eq!(m.count(), sets, "a set was taken anyway");
    // Never frozen.
    assert_eq!(
        fs::read_to_string(dir.join("cgroup.freeze"))
            .unwrap()
            .trim(),
        "0"
    );
    // Its child, the user's, is gone with it.
    let child: i32 = fs::read_to_string(db.join("child"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until(
        "the hook's child is killed",
        Duration::from_secs(2),
        || match fs::metadata(format!("/proc/{child}")) {
            Err(_) => true,
            // A zombie of an init that has not reaped it yet is gone as a process.
            Ok(meta) => {
                meta.uid() != uid
                    || fs::read_to_string(format!("/proc/{child}/stat"))
                        .map(|s| s.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')))
                        .unwrap_or(true)
            }
        },
    );
    writer.kill().unwrap();
    writer.wait().unwrap();
}

#[test]
fn loop_hook_output_is_capped_and_an_after_hook_that_fails_is_reported_and_the_set_stands() {
    let Some(m) = machine("hook-out") else {
        return;
    };
    let mut writer = m.writer();
    let cut = m.cut(vec![Hook {
        unit: unit("db.service"),
        user: HookUser::parse(DB_USER).unwrap(),
        // 100 000 bytes of output.
        before: Some(sh("head -c 100000 /dev/zero | tr '\\0' x")),
        before_limit_ms: 10_000,
        after: Some(sh("echo the database would not resume >&2; exit 3")),
        after_limit_ms: 10_000,
    }]);
    let sets = m.count();
    let taken =
        m.rt.block_on(cut.take_set(&m.worker, vec![sv("@persist"), sv("@log")]))
            .unwrap();
    assert_eq!(taken.snapshots.len(), 2, "the set stands");
    assert_eq!(m.count(), sets + 2);
    let [b, a] = &taken.hooks[..] else {
        panic!("two hooks ran: {:?}", taken.hooks);
    };
    assert!(b.ok, "{}", b.line());
    assert_eq!(b.output_bytes, 100_000);
    assert_eq!(b.output.len(), layout::cut::MAX_HOOK_OUTPUT_BYTES);
    assert!(b.output.iter().all(|&c| c == b'x'));
    assert!(!a.ok, "{}", a.line());
    assert!(
        a.line()
            .starts_with("after db.service as tacid-cut-db: failed: exited 3"),
        "{}",
        a.line()
    );
    assert_eq!(a.output, b"the database would not resume\n");
    assert!(!frozen(&m.tree.unit_dir("db.service")));
    writer.kill().unwrap();
    writer.wait().unwrap();
}

#[test]
fn loop_a_hook_whose_user_is_missing_or_cannot_run_its_program_takes_no_set() {
    let Some(m) = machine("hook-nouser") else {
        return;
    };
    let mut writer = m.writer();
    let cut = m.cut(vec![Hook {
        unit: unit("db.service"),
        user: HookUser::parse("tacid-nobody-here").unwrap(),
        before: Some(sh("exit 0")),
        before_limit_ms: 1_000,
        after: None,
        after_limit_ms: 1_000,
    }]);
    let sets = m.count();
    let e =
        m.rt.block_on(cut.take_set(&m.worker, vec![sv("@persist")]))
            .unwrap_err();
    assert!(
        e.to_string().contains("there is no user tacid-nobody-here"),
        "{e}"
    );
    assert_eq!(m.count(), sets);
    // The program must exist and be executable by the user; a root-only one is refused.
    let private = tempfile::tempdir().unwrap();
    fs::set_permissions(private.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let program = private.path().join("hook");
    fs::write(&program, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    let cut = m.cut(vec![Hook {
        unit: unit("db.service"),
        user: HookUser::parse(DB_USER).unwrap(),
        before: Some(HookCommand::parse(vec![program.display().to_string()]).unwrap()),
        before_limit_ms: 1_000,
        after: None,
        after_limit_ms: 1_000,
    }]);
    let e =
        m.rt.block_on(cut.take_set(&m.worker, vec![sv("@persist")]))
            .unwrap_err();
    assert!(
        e.to_string().contains("could not run") && e.to_string().contains("denied"),
        "{e}"
    );
    assert_eq!(m.count(), sets);
    writer.kill().unwrap();
    writer.wait().unwrap();
}
