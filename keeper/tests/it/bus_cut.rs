//! A consistent cut through the whole chain: the CLI, the keeper, the real `tacid-stem`
//! with root's cut file naming a unit (a cgroup v2 of this test's, as where systemd is not
//! PID 1). The set taken before a switch is a consistent cut, the journal keeps it, `list`
//! (words and `--json`) and a set restore's preview say so; a unit that does not freeze
//! stops the pre-switch set with an error that names it, and leaves nothing frozen.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{json, World, APPROVER};

/// The cgroup v2 hierarchy, writable, with the freezer; `None` (said loudly; a failure under
/// CI=true) where there is none.
fn cgroup2() -> Option<PathBuf> {
    for root in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
        let root = Path::new(root);
        let probe = root.join(format!("tacid-kprobe-{}", std::process::id()));
        if root.join("cgroup.procs").is_file() && fs::create_dir(&probe).is_ok() {
            let ok = probe.join("cgroup.freeze").is_file();
            let _ = fs::remove_dir(&probe);
            if ok {
                return Some(root.to_path_buf());
            }
        }
    }
    let what = "needs a writable cgroup v2 hierarchy with cgroup.freeze";
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but this test cannot run: {what}"
    );
    eprintln!("\n*** SKIPPED: {what}; this consistent-cut test did not run ***\n");
    None
}

/// `system.slice/<unit>` cgroups of this test's, each with a process; gone on drop.
struct Units {
    root: PathBuf,
    children: Vec<Child>,
}

impl Units {
    fn start(v2: &Path, name: &str, script_of: &[(&str, String)]) -> Units {
        let root = v2.join(format!("tacid-ktest-{}-{name}", std::process::id()));
        let mut children = Vec::new();
        for (unit, script) in script_of {
            let dir = root.join("system.slice").join(unit);
            fs::create_dir_all(&dir).expect("a cgroup");
            children.push(
                Command::new("sh")
                    .arg("-c")
                    .arg(format!(
                        "echo $$ > '{}/cgroup.procs' && exec sh -c '{script}'",
                        dir.display()
                    ))
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("a unit's process"),
            );
        }
        Units { root, children }
    }

    fn dir(&self, unit: &str) -> PathBuf {
        self.root.join("system.slice").join(unit)
    }

    fn frozen(&self, unit: &str) -> bool {
        fs::read_to_string(self.dir(unit).join("cgroup.events"))
            .expect("cgroup.events")
            .lines()
            .any(|l| l == "frozen 1")
    }
}

impl Drop for Units {
    fn drop(&mut self) {
        if let Ok(entries) = fs::read_dir(self.root.join("system.slice")) {
            for e in entries.flatten() {
                let _ = fs::write(e.path().join("cgroup.freeze"), "0");
                let _ = fs::write(e.path().join("cgroup.kill"), "1");
            }
        }
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Ok(entries) = fs::read_dir(self.root.join("system.slice")) {
            for e in entries.flatten() {
                for _ in 0..100 {
                    if fs::remove_dir(e.path()).is_ok() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let _ = fs::remove_dir(self.root.join("system.slice"));
        let _ = fs::remove_dir(&self.root);
    }
}

/// The stem started again with root's cut file `config`, its units beneath `units`.
fn stem_with_cut(w: &mut World, units: &Units, config: &str, name: &str) {
    let file = w.dir.join(name);
    fs::write(&file, config).expect("the cut file");
    w.stem_args.extend([
        "--cut-config".to_owned(),
        file.display().to_string(),
        "--cgroup-root".to_owned(),
        units.root.display().to_string(),
    ]);
    w.kill_stem();
    w.start_stem();
}

#[test]
fn bus_the_pre_switch_set_is_a_consistent_cut_and_list_and_preview_say_so() {
    let Some(v2) = cgroup2() else { return };
    let Some(mut w) = World::start() else { return };
    let units = Units::start(
        &v2,
        "cut",
        &[("db.service", "while :; do sleep 0.001; done".into())],
    );
    stem_with_cut(&mut w, &units, r#"{"units":["db.service"]}"#, "cut.json");

    let (code, out, err) = w.tacid(
        APPROVER,
        &[
            "data",
            "snapshot",
            "--json",
            "--pre-switch",
            "--reason",
            "switch 1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let set = json(&out);
    let set_id = set["set_id"].as_i64().expect("a set id");
    for m in set["snapshots"].as_array().expect("members") {
        assert_eq!(
            m["consistent_cut"],
            serde_json::json!(["db.service"]),
            "{m}"
        );
    }
    assert!(!units.frozen("db.service"), "left frozen");

    let (_, list, _) = w.tacid(APPROVER, &["data", "list", "--json"]);
    let listed = json(&list);
    let rows = listed["snapshots"].as_array().expect("rows");
    assert!(!rows.is_empty());
    for r in rows {
        assert_eq!(
            r["consistent_cut"],
            serde_json::json!(["db.service"]),
            "{r}"
        );
    }
    let (_, text, _) = w.tacid(APPROVER, &["data", "list"]);
    assert!(
        text.contains("    cut    a consistent cut: db.service paused while the set was taken"),
        "{text}"
    );
    let (_, preview, err) = w.tacid(APPROVER, &["data", "restore", &set_id.to_string()]);
    assert!(
        preview.contains("This set is a consistent cut: db.service paused"),
        "{preview}{err}"
    );
}

#[test]
fn bus_a_unit_that_does_not_freeze_stops_the_pre_switch_set_and_nothing_stays_frozen() {
    let Some(v2) = cgroup2() else { return };
    let Some(mut w) = World::start() else { return };
    // A writer asleep in the kernel on a frozen filesystem: its cgroup never reports frozen.
    let other = testbed::LoopFs::new(128 << 20)
        .expect("a second Btrfs")
        .expect("loop devices");
    let fsfreeze = |how: &str| {
        assert!(Command::new("fsfreeze")
            .arg(how)
            .arg(other.top())
            .status()
            .expect("fsfreeze")
            .success());
    };
    fsfreeze("--freeze");
    let units = Units::start(
        &v2,
        "stuck",
        &[
            ("db.service", "while :; do sleep 0.001; done".into()),
            (
                "stuck.service",
                format!("echo x > {}/x", other.top().display()),
            ),
        ],
    );
    std::thread::sleep(Duration::from_millis(300));
    stem_with_cut(
        &mut w,
        &units,
        r#"{"units":["db.service","stuck.service"],"freeze_timeout_ms":300}"#,
        "cut-stuck.json",
    );
    let (_, before, _) = w.tacid(APPROVER, &["data", "list", "--json"]);
    let (code, out, err) = w.tacid(
        APPROVER,
        &["data", "snapshot", "--pre-switch", "--reason", "switch 2"],
    );
    assert_ne!(code, 0, "a set was taken: {out}");
    assert!(
        err.contains("stuck.service") && err.contains("no set was taken"),
        "{err}"
    );
    let (_, after, _) = w.tacid(APPROVER, &["data", "list", "--json"]);
    assert_eq!(
        json(&before)["snapshots"],
        json(&after)["snapshots"],
        "the store changed"
    );
    assert!(!units.frozen("db.service"), "db.service left frozen");
    let asked = fs::read_to_string(units.dir("stuck.service").join("cgroup.freeze"))
        .expect("cgroup.freeze");
    assert_eq!(asked.trim(), "0", "stuck.service left asked to freeze");
    fsfreeze("--unfreeze");
}

#[test]
fn bus_a_cut_with_hooks_journals_each_hooks_outcome_and_a_failed_after_hook_leaves_the_set() {
    let Some(v2) = cgroup2() else { return };
    let Some(mut w) = World::start() else { return };
    let (uid, _) = testbed::users::ensure_system_user("tacid-cut-db");
    let units = Units::start(
        &v2,
        "hooks",
        &[("db.service", "while :; do sleep 0.001; done".into())],
    );
    let config = serde_json::json!({
        "units": ["db.service"],
        "hooks": [{
            "unit": "db.service",
            "user": "tacid-cut-db",
            "before": ["/bin/sh", "-c", "test $(id -u) = $0", uid.to_string()],
            "after": ["/bin/sh", "-c", "echo would not resume >&2; exit 5"],
        }]
    });
    stem_with_cut(&mut w, &units, &config.to_string(), "cut-hooks.json");
    let (code, out, err) = w.tacid(
        APPROVER,
        &[
            "data",
            "snapshot",
            "--json",
            "--pre-switch",
            "--reason",
            "switch 3",
        ],
    );
    assert_eq!(code, 0, "the set stands: {out}{err}");
    let set_id = json(&out)["set_id"].as_i64().expect("a set id");
    assert!(!units.frozen("db.service"), "left frozen");
    // The person (and nixos-rebuild, for a pre-switch set) is told each hook's end.
    let answered = json(&out)["hooks"].clone();
    assert_eq!(answered[0]["ok"], true, "{answered}");
    assert_eq!(answered[1]["ok"], false, "{answered}");
    assert!(
        answered[1]["says"]
            .as_str()
            .is_some_and(|s| s.starts_with("after db.service as tacid-cut-db: failed: exited 5")),
        "{answered}"
    );
    let (code, text, err) = w.tacid(APPROVER, &["data", "snapshot", "--pre-switch"]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(
        text.contains("\n  hook before db.service as tacid-cut-db: exited 0")
            && text.contains(
                "\nWarning: the set stands, but the hook after db.service as tacid-cut-db: failed: exited 5"
            ),
        "{text}"
    );

    // The keeper's record of the cut: each hook's outcome, and the set's outcome names the
    // one that failed.
    let (_copy, copied) = w.copy_journal();
    let conn = rusqlite::Connection::open(&copied).expect("the journal");
    let (cut_units, hooks): (String, String) = conn
        .query_row(
            "SELECT units, hooks FROM cuts WHERE request_id = ?1",
            [set_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the set's cut row");
    let outcome: String = conn
        .query_row(
            "SELECT outcome FROM requests WHERE id = ?1",
            [set_id],
            |r| r.get(0),
        )
        .expect("the set's row");
    drop(conn);
    w.give_journal_back();
    assert_eq!(cut_units, "db.service");
    let lines: Vec<&str> = hooks.lines().collect();
    assert_eq!(lines.len(), 2, "{hooks}");
    assert!(
        lines[0].starts_with("before db.service as tacid-cut-db: exited 0"),
        "{hooks}"
    );
    assert!(
        lines[1].starts_with("after db.service as tacid-cut-db: failed: exited 5"),
        "{hooks}"
    );
    assert!(
        outcome.starts_with("complete: ")
            && outcome.contains(
                "the set stands, but the hook after db.service as tacid-cut-db: failed: exited 5"
            ),
        "{outcome}"
    );
}
