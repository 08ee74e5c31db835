#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test
//! A consistent cut through the real `tacid-stem` on a private bus: `TakeCut` pauses the
//! units root configured (a cgroup v2 tree of this test's, as where systemd is not PID 1),
//! and a stem killed with `SIGKILL` while a unit is frozen leaves nothing frozen: its guard
//! thaws them.

use std::fs;
use std::process::Child;
use std::time::Duration;

use crate::common::{as_user, ensure_user, require_root_and_tools, PrivateBus, StemDaemon};
use crate::loop_cut::{cgroup2, frozen, last_number, wait_until, CgroupTree};
use layout::names;
use stem_interface::Stem1Proxy;
use zbus::proxy::CacheProperties;

/// The stem on a loop Btrfs, told to pause `units` found beneath `tree`.
fn stem_with_cut(
    fs: &testbed::LoopFs,
    bus: &PrivateBus,
    tree: &CgroupTree,
    config: &str,
) -> (StemDaemon, tempfile::TempDir) {
    stem_with_cut_logging(fs, bus, tree, config, None)
}

/// As [`stem_with_cut`], the stem's log written to `log` when given.
fn stem_with_cut_logging(
    fs: &testbed::LoopFs,
    bus: &PrivateBus,
    tree: &CgroupTree,
    config: &str,
    log: Option<fs::File>,
) -> (StemDaemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cut.json");
    fs::write(&file, config).unwrap();
    let stem = StemDaemon::start_logging(
        bus,
        names::KEEPER_USER,
        &[
            "--top",
            &fs.top().display().to_string(),
            "--cut-config",
            &file.display().to_string(),
            "--cgroup-root",
            &tree.root.display().to_string(),
        ],
        log,
    );
    (stem, dir)
}

type Cutted = (Vec<String>, Vec<String>, u64, Vec<stem_interface::HookInfo>);

pub(crate) fn take_cut(bus: &PrivateBus) -> Result<Cutted, String> {
    let (uid, gid) = ensure_user(names::KEEPER_USER);
    let address = bus.address().to_owned();
    as_user(uid, gid, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let connection = zbus::connection::Builder::address(address.as_str())
                .build()
                .await
                .unwrap();
            let proxy = Stem1Proxy::builder(&connection)
                .cache_properties(CacheProperties::No)
                .build()
                .await
                .unwrap();
            proxy
                .take_cut(vec!["@persist".into(), "@log".into()])
                .await
                .map(|(s, u, us, h)| (s.into_iter().map(|s| s.name).collect(), u, us, h))
                .map_err(|e| e.to_string())
        })
    })
}

fn writer(fs: &testbed::LoopFs, tree: &CgroupTree) -> Child {
    for s in ["@persist", "@log"] {
        fs::create_dir_all(fs.top().join(s).join("cut")).unwrap();
    }
    let p = fs.top().join("@persist/cut/seq");
    let l = fs.top().join("@log/cut/seq");
    let child = tree.spawn(
        "writer.service",
        &format!(
            "exec 3>>{} 4>>{}; i=0; while :; do i=$((i+1)); echo $i >&3; echo $i >&4; done",
            p.display(),
            l.display()
        ),
    );
    wait_until("the writer writes", Duration::from_secs(10), || {
        p.exists() && last_number(&p) > 100
    });
    child
}

fn setup(name: &str) -> Option<(testbed::LoopFs, PrivateBus, CgroupTree)> {
    if !require_root_and_tools() {
        return None;
    }
    let v2 = cgroup2()?;
    let fs = testbed::LoopFs::with_layout(256 << 20).expect("make a loop Btrfs")?;
    ensure_user(names::KEEPER_USER);
    let bus = PrivateBus::start(&[&crate::common::shipped_policy()], "");
    let tree = CgroupTree::new(&v2, name);
    Some((fs, bus, tree))
}

#[test]
fn bus_take_cut_pauses_the_configured_unit_and_answers_it() {
    let Some((fs, bus, tree)) = setup("bus-take") else {
        return;
    };
    let mut w = writer(&fs, &tree);
    let (stem, _config) = stem_with_cut(&fs, &bus, &tree, r#"{"units":["writer.service"]}"#);
    for _ in 0..20 {
        let (names, paused, us, hooks) = take_cut(&bus).expect("TakeCut");
        assert!(hooks.is_empty(), "{hooks:?}");
        assert_eq!(paused, ["writer.service"]);
        assert!(us > 0 && us < 10_000_000, "paused {us} µs");
        let store = fs.top().join(layout::SNAPSHOTS_SUBVOLUME);
        let p = last_number(&store.join(&names[0]).join("cut/seq"));
        let l = last_number(&store.join(&names[1]).join("cut/seq"));
        assert!(l == p || l + 1 == p, "a paused set disagrees: {p} and {l}");
    }
    assert!(!frozen(&tree.unit_dir("writer.service")));
    drop(stem);
    w.kill().unwrap();
    w.wait().unwrap();
}

#[test]
fn bus_a_stem_killed_while_a_unit_is_frozen_leaves_it_thawed() {
    let Some((fs, bus, tree)) = setup("bus-kill") else {
        return;
    };
    let mut w = writer(&fs, &tree);
    // A second unit that cannot freeze (a writer asleep on a frozen filesystem) holds the
    // stem in its wait, the first unit frozen, long enough to kill it there.
    let other = testbed::LoopFs::new(128 << 20).unwrap().unwrap();
    let fsfreeze = |how: &str| {
        assert!(std::process::Command::new("fsfreeze")
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
    let (stem, _config) = stem_with_cut(
        &fs,
        &bus,
        &tree,
        r#"{"units":["writer.service","stuck.service"],"freeze_timeout_ms":60000,"hold_limit_ms":120000}"#,
    );
    let caller = {
        let bus = &bus;
        std::thread::scope(|s| {
            let call = s.spawn(|| take_cut(bus));
            let writer_dir = tree.unit_dir("writer.service");
            wait_until(
                "the writer frozen by the stem",
                Duration::from_secs(10),
                || frozen(&writer_dir),
            );
            let pid = rustix::process::Pid::from_raw(stem.pid() as i32).unwrap();
            rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
            call.join().unwrap()
        })
    };
    assert!(caller.is_err(), "{caller:?}");
    // The guard saw the stem's end of its pipe close: both thawed, the writer goes on.
    let writer_dir = tree.unit_dir("writer.service");
    wait_until("the writer thawed", Duration::from_secs(5), || {
        !frozen(&writer_dir)
    });
    let stuck_freeze = tree.unit_dir("stuck.service").join("cgroup.freeze");
    assert_eq!(fs::read_to_string(&stuck_freeze).unwrap().trim(), "0");
    let p = fs.top().join("@persist/cut/seq");
    let n = last_number(&p);
    wait_until("the writer goes on", Duration::from_secs(5), || {
        last_number(&p) > n
    });
    fsfreeze("--unfreeze");
    stuck.wait().unwrap();
    drop(stem);
    w.kill().unwrap();
    w.wait().unwrap();
}

/// The hooks' user, as in the loop tier: a real account, never removed.
const HOOK_USER: &str = "tacid-cut-db";

#[test]
fn bus_take_cut_runs_the_hooks_as_the_user_answers_them_and_journals_their_output() {
    let Some((fs, bus, tree)) = setup("bus-hooks") else {
        return;
    };
    let (uid, _) = ensure_user(HOOK_USER);
    let mut w = writer(&fs, &tree);
    let marks = fs.top().join("@persist/hooks");
    fs::create_dir_all(&marks).unwrap();
    std::os::unix::fs::chown(&marks, Some(uid), None).unwrap();
    let before = format!(
        "echo checkpoint asked by the hook; echo as $(id -un) > {}/before",
        marks.display()
    );
    let config = serde_json::json!({
        "units": ["writer.service"],
        "hooks": [{
            "unit": "writer.service",
            "user": HOOK_USER,
            "before": ["/bin/sh", "-c", before],
            "after": ["/bin/sh", "-c", "echo cannot resume >&2; exit 7"],
            "after_limit_ms": 5000
        }]
    });
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("stem.log");
    let (stem, _config) = stem_with_cut_logging(
        &fs,
        &bus,
        &tree,
        &config.to_string(),
        Some(fs::File::create(&log).unwrap()),
    );
    let (names, paused, _us, hooks) = take_cut(&bus).expect("TakeCut");
    assert_eq!(
        names.len(),
        2,
        "the set stands though the after hook failed"
    );
    assert_eq!(paused, ["writer.service"]);
    let summary: Vec<(String, String, bool)> = hooks
        .iter()
        .map(|h| (h.when.clone(), h.user.clone(), h.ok))
        .collect();
    assert_eq!(
        summary,
        [
            ("before".to_string(), HOOK_USER.to_string(), true),
            ("after".to_string(), HOOK_USER.to_string(), false)
        ]
    );
    assert!(hooks[1].summary.contains("exited 7"), "{hooks:?}");
    let mark = fs::metadata(marks.join("before")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&mark), uid);
    // In the set: the mark the hook made before the freeze.
    let store = fs.top().join(layout::SNAPSHOTS_SUBVOLUME);
    assert_eq!(
        fs::read_to_string(store.join(&names[0]).join("hooks/before")).unwrap(),
        format!("as {HOOK_USER}\n")
    );
    // Journalled by the stem (journald where it runs; here its stderr): each hook's
    // outcome with its output.
    let text = fs::read_to_string(&log).unwrap();
    let line_of = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in the stem's log:\n{text}"))
            .to_owned()
    };
    assert!(
        line_of("hook before writer.service as tacid-cut-db: exited 0")
            .contains("checkpoint asked by the hook")
    );
    assert!(
        line_of("hook after writer.service as tacid-cut-db: failed: exited 7")
            .contains("cannot resume")
    );
    assert!(text.contains("the set stands, but the hook after writer.service"));
    assert!(!frozen(&tree.unit_dir("writer.service")));
    drop(stem);

    // A before hook that fails: no set, NotPaused, and the unit never frozen.
    let config = serde_json::json!({
        "units": ["writer.service"],
        "hooks": [{
            "unit": "writer.service",
            "user": HOOK_USER,
            "before": ["/bin/sh", "-c", "echo the checkpoint failed; exit 1"],
        }]
    });
    let (stem, _config) = stem_with_cut(&fs, &bus, &tree, &config.to_string());
    let sets = fs::read_dir(&store).unwrap().count();
    let e = take_cut(&bus).unwrap_err();
    assert!(
        e.contains("NotPaused")
            && e.contains("before writer.service as tacid-cut-db: failed: exited 1")
            && e.contains("no set was taken"),
        "{e}"
    );
    assert_eq!(fs::read_dir(&store).unwrap().count(), sets);
    assert_eq!(
        fs::read_to_string(tree.unit_dir("writer.service").join("cgroup.freeze"))
            .unwrap()
            .trim(),
        "0"
    );
    drop(stem);
    w.kill().unwrap();
    w.wait().unwrap();
}
