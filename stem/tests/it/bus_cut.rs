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
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cut.json");
    fs::write(&file, config).unwrap();
    let stem = StemDaemon::start(
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
