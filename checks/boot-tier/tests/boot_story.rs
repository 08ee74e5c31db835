//! The boot tier's story: a real kernel, a systemd initrd with `tacid-initrd` and its unit
//! files, a real Btrfs disk, real reboots and real power cuts (qemu killed with SIGKILL).
//!
//! Between boots the host mounts the machine's disk and acts through the real stem engine,
//! as the stem would on the running machine. Needs root and qemu; without them each test
//! prints a loud SKIPPED line and passes, and under `CI=true` fails instead.
//!
//! Run alone: `cargo test -p boot-tier --test boot_story -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use boot_tier::guest::ROOT_MARKER;
use boot_tier::image::{Mounted, SubvolumeRecord};
use boot_tier::machine::{Boot, BootOptions, Ending, Machine};
use boot_tier::parts::Parts;
use initrd::steps::{Step, StepAt};
use layout::{Outcome, OutcomeResult, RestoreMember, RestoreRequest, SubvolumeName};
use stem::{Engine, Snapshot, Staged};

/// What an ordinary user can leave in `@root` (the hostile tier's makers, shared).
#[path = "../../../initrd/tests/it/common/hostile.rs"]
mod hostile;

// ---------------------------------------------------------------------------------------
// The machine and the words of the story.

/// Every part, built once per test process (the first test to ask builds; others wait).
fn parts(test: &str) -> Option<&'static Parts> {
    boot_tier::env::require(test)?;
    static PARTS: OnceLock<Result<Parts, String>> = OnceLock::new();
    let parts = PARTS.get_or_init(|| {
        let started = Instant::now();
        let parts = Parts::for_workspace().map_err(|e| e.to_string())?;
        println!("parts ready in {:.1} s:", started.elapsed().as_secs_f64());
        for (what, took) in &parts.timings {
            println!("  {what:<28} {:>7.2} s", took.as_secs_f64());
        }
        println!("  accel: {:?}", boot_tier::machine::accel(&parts));
        Ok(parts)
    });
    match parts {
        Ok(p) => Some(p),
        Err(e) => panic!("building the test machine failed: {e}"),
    }
}

/// One story's narration: numbered steps with the time since the story began.
struct Story {
    name: String,
    started: Instant,
    step: u32,
}

impl Story {
    fn new(name: impl Into<String>) -> Story {
        let name = name.into();
        println!("=== {name}");
        Story {
            name,
            started: Instant::now(),
            step: 0,
        }
    }

    fn step(&mut self, what: &str) {
        self.step += 1;
        println!(
            "[{} +{:5.1}s] step {}: {what}",
            self.name,
            self.started.elapsed().as_secs_f64(),
            self.step
        );
    }
}

/// The subvolume a person calls by its mount point (`/home`), from the layout.
fn subvolume(mount_point: &str) -> SubvolumeName {
    SubvolumeName::from_name_or_mount_point(mount_point).expect("a mount point of the layout")
}

fn write(top: &Mounted, mount_point: &str, file: &str, content: &str) {
    let path = top.in_subvolume(subvolume(mount_point).as_str(), file);
    std::fs::write(&path, content).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn read(top: &Mounted, mount_point: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(top.in_subvolume(subvolume(mount_point).as_str(), file)).ok()
}

/// The files directly in a subvolume, with their contents.
fn contents(top: &Mounted, sub: &str) -> BTreeMap<String, String> {
    let dir = top.path().join(sub);
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect()
}

fn engine(top: &Mounted) -> Engine {
    Engine::open(top.path()).unwrap_or_else(|e| panic!("opening the stem engine on the disk: {e}"))
}

fn request_path(top: &Mounted, name: &str) -> std::path::PathBuf {
    top.path().join(layout::SNAPSHOTS_SUBVOLUME).join(name)
}

fn outcome(top: &Mounted) -> Option<Outcome> {
    engine(top)
        .outcome()
        .unwrap_or_else(|e| panic!("reading the outcome: {e}"))
}

/// Every subvolume but the ephemeral root (made again at every boot by design).
fn lasting_subvolumes(top: &Mounted) -> BTreeMap<String, SubvolumeRecord> {
    let mut all = top
        .subvolumes()
        .unwrap_or_else(|e| panic!("listing subvolumes: {e}"));
    all.remove(layout::ROOT_SUBVOLUME);
    all
}

/// No swap names, temp names or anything else beyond the layout and the snapshots.
fn assert_only_layout_and_snapshots(top: &Mounted, context: &str) {
    assert_only_layout_and_snapshots_of(top, context, Root::Ephemeral)
}

/// Whether the machine's root is made again at every boot (the wipe unit in its initrd,
/// `@root-blank` on its disk) or kept (`services.tacid.ephemeralRoot = false`: neither).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Root {
    Ephemeral,
    Kept,
}

/// The temporary files of durable writes (and anything else of their prefix) at the top
/// of the store.
fn store_temps(top: &Mounted) -> Vec<String> {
    let store = top.path().join(layout::SNAPSHOTS_SUBVOLUME);
    let mut names: Vec<String> = std::fs::read_dir(&store)
        .unwrap_or_else(|e| panic!("listing {}: {e}", store.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(layout::TEMP_PREFIX))
        .collect();
    names.sort();
    names
}

/// [`assert_only_layout_and_snapshots`] on a machine whose root is `root` (a kept root has
/// no `@root-blank`).
fn assert_only_layout_and_snapshots_of(top: &Mounted, context: &str, root: Root) {
    assert_eq!(
        store_temps(top),
        Vec::<String>::new(),
        "{context}: temporary files left in the store"
    );
    let snapshots: BTreeSet<String> = engine(top)
        .list()
        .unwrap_or_else(|e| panic!("listing snapshots: {e}"))
        .iter()
        .map(|s| format!("{}/{}", layout::SNAPSHOTS_SUBVOLUME, s.name))
        .collect();
    let expected: BTreeSet<String> = layout::SUBVOLUMES
        .iter()
        .map(|s| s.name.to_owned())
        .filter(|s| root == Root::Ephemeral || s != layout::ROOT_BLANK_SUBVOLUME)
        .chain(snapshots)
        .collect();
    let found: BTreeSet<String> = top
        .subvolumes()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_keys()
        .collect();
    assert_eq!(
        found, expected,
        "{context}: subvolumes beyond the layout and its snapshots (a leftover?)"
    );
}

/// A boot that went all the way: powered off by the guest, every subvolume mounted where
/// the layout says, `/` is a fresh `@root` (the previous boot's marker is gone).
fn assert_booted_clean(boot: &Boot, context: &str) {
    assert_booted(boot, context, None)
}

/// [`assert_booted_clean`], but for a machine that keeps its root: `/` is `@root` with the
/// marker that was left on it (`marker`, its first line), and the initrd has no wipe.
fn assert_booted_keeping_root(boot: &Boot, context: &str, marker: &str) {
    assert_booted(boot, context, Some(marker));
    assert!(
        !boot.console.contains("tacid-initrd: wipe-root:"),
        "{context}: the wipe ran on a machine that keeps its root:\n{}",
        boot.console_tail(60)
    );
}

fn assert_booted(boot: &Boot, context: &str, marker: Option<&str>) {
    let tail = || boot.console_tail(60);
    assert_eq!(
        boot.ending,
        Ending::PoweredOff,
        "{context}: the machine did not power off by itself:\n{}",
        tail()
    );
    let Some(report) = &boot.report else {
        panic!(
            "{context}: the machine never reached its root (no report). Console:\n{}",
            tail()
        );
    };
    assert!(
        report.mount_failures().is_empty(),
        "{context}: mounts failed: {:?}\n{}",
        report.mount_failures(),
        tail()
    );
    assert_eq!(
        report.subvolume_at("/").as_deref(),
        Some(layout::ROOT_SUBVOLUME),
        "{context}: / is not {}",
        layout::ROOT_SUBVOLUME
    );
    match marker {
        None => assert_eq!(
            report.root_marker, None,
            "{context}: {ROOT_MARKER} written on / by the previous boot survived the reboot"
        ),
        Some(marker) => assert_eq!(
            report.root_marker.as_deref(),
            Some(marker),
            "{context}: {ROOT_MARKER} left on the kept root did not survive the boot"
        ),
    }
}

/// After a boot the guest's marker is on `@root` (so its absence next time means the wipe).
fn assert_marker_left_on_root(top: &Mounted, context: &str) {
    let marker = top.in_subvolume(layout::ROOT_SUBVOLUME, ROOT_MARKER);
    assert!(
        marker.exists(),
        "{context}: the guest's marker {} is not on {}",
        ROOT_MARKER,
        layout::ROOT_SUBVOLUME
    );
}

fn boot(m: &mut Machine, options: &BootOptions) -> Boot {
    let b = m.boot(options).unwrap_or_else(|e| panic!("booting: {e}"));
    println!(
        "    boot ended {:?} after {:.1} s",
        b.ending,
        b.took.as_secs_f64()
    );
    if b.took.as_secs() > 60 {
        // Rare here (about one boot in forty, not reproducible alone): say where the time went.
        let (gap, line) = b.longest_quiet().unwrap_or_default();
        let lines: Vec<&str> = b.console.lines().collect();
        let end = lines.iter().position(|l| *l == line).unwrap_or(lines.len());
        println!(
            "    slow boot: kernel clock at the last console line {:?} s, init started at {:?} s, \
             longest silence {gap:.1} s; the console around it:\n{}",
            b.kernel_seconds(),
            b.report.as_ref().and_then(|r| r.uptime_at_init),
            lines[end.saturating_sub(12)..(end + 1).min(lines.len())].join("\n")
        );
    }
    b
}

fn machine(parts: &Parts, name: &str) -> Machine {
    Machine::new(parts, name).unwrap_or_else(|e| panic!("making a machine: {e}"))
}

/// Keep a failed machine's disk and consoles for a look; say where.
struct KeepOnPanic(Option<Machine>);

impl Drop for KeepOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("BOOT_TIER_KEEP").is_some() {
            if let Some(m) = self.0.take() {
                eprintln!(
                    "the machine's disk and consoles are kept in {}",
                    m.keep().display()
                );
            }
        }
    }
}

impl std::ops::Deref for KeepOnPanic {
    type Target = Machine;
    fn deref(&self) -> &Machine {
        self.0.as_ref().expect("machine")
    }
}

impl std::ops::DerefMut for KeepOnPanic {
    fn deref_mut(&mut self) -> &mut Machine {
        self.0.as_mut().expect("machine")
    }
}

/// Mount the disk, do `f`, unmount (every handle must be closed by then).
fn on_disk<T>(m: &Machine, f: impl FnOnce(&Mounted) -> T) -> T {
    let top = m
        .disk_top()
        .unwrap_or_else(|e| panic!("mounting the disk: {e}"));
    let out = f(&top);
    top.unmount()
        .unwrap_or_else(|e| panic!("unmounting the disk: {e}"));
    out
}

/// Write files in /home and /persist, snapshot both, change them; returns the snapshot of
/// /home and what its files said when it was taken (/persist's is there to be left alone).
struct Prepared {
    home: Snapshot,
    home_then: BTreeMap<String, String>,
}

fn write_snapshot_change(top: &Mounted, story: &mut Story) -> Prepared {
    story.step("write files in /home and /persist");
    write(top, "/home", "notes.txt", "written before the snapshot\n");
    write(
        top,
        "/home",
        "doomed.txt",
        "deleted after the snapshot; must come back\n",
    );
    write(top, "/persist", "config.txt", "version 1\n");
    story.step("take a snapshot of /home and of /persist");
    let e = engine(top);
    let home = e
        .take(subvolume("/home"))
        .unwrap_or_else(|e| panic!("snapshot of /home: {e}"));
    e.take(subvolume("/persist"))
        .unwrap_or_else(|e| panic!("snapshot of /persist: {e}"));
    drop(e);
    let home_then = contents(top, subvolume("/home").as_str());
    story.step("change them: edit, add, delete");
    write(top, "/home", "notes.txt", "edited after the snapshot\n");
    write(
        top,
        "/home",
        "new.txt",
        "written after the snapshot; must go\n",
    );
    std::fs::remove_file(top.in_subvolume(subvolume("/home").as_str(), "doomed.txt"))
        .expect("delete doomed.txt");
    write(top, "/persist", "config.txt", "version 2\n");
    write(top, "/persist", "new.txt", "written after the snapshot\n");
    Prepared { home, home_then }
}

fn stage(top: &Mounted, snapshot: &Snapshot) -> RestoreRequest {
    match engine(top)
        .stage_restore(snapshot.name)
        .unwrap_or_else(|e| panic!("staging the restore: {e}"))
    {
        Staged::New(r) => r,
        Staged::AlreadyStaged(r) => panic!("a restore was already staged: {r}"),
    }
}

/// What each member held before the restore `o` reports is kept read-only in the store
/// (adr/0027): a snapshot named by the outcome, holding `new.txt` as the story wrote it
/// after the snapshot, that nobody can write to.
fn assert_kept_what_was_replaced(top: &Mounted, o: &Outcome, context: &str) {
    let request = o
        .request
        .as_ref()
        .expect("a done outcome names its request");
    assert_eq!(
        o.replaced.len(),
        request.members().len(),
        "{context}: the outcome does not say what became of each replaced member: {o}"
    );
    for r in &o.replaced {
        let kept = r
            .kept
            .unwrap_or_else(|| panic!("{context}: {} was not kept: {o}", r.subvolume));
        let dir = top
            .path()
            .join(layout::SNAPSHOTS_SUBVOLUME)
            .join(kept.to_string());
        assert_eq!(
            std::fs::read_to_string(dir.join("new.txt")).ok().as_deref(),
            Some("written after the snapshot; must go\n"),
            "{context}: {kept} does not hold what {} held before the restore",
            r.subvolume.display_path()
        );
        let probe = std::fs::write(dir.join("probe.txt"), "x");
        assert_eq!(
            probe.map_err(|e| e.raw_os_error()),
            Err(Some(30)),
            "{context}: {kept} is writable (EROFS expected)"
        );
    }
}

/// The restore of `snapshot` was done exactly as asked: contents as in the snapshot, the
/// live subvolume a copy of that very snapshot, the outcome "done" naming the request, the
/// request gone, nothing left over.
fn assert_restored(
    top: &Mounted,
    snapshot: &Snapshot,
    then: &BTreeMap<String, String>,
    request: &RestoreRequest,
    context: &str,
) {
    let sub = snapshot.of.as_str();
    assert_eq!(
        &contents(top, sub),
        then,
        "{context}: {} is not as in {}",
        snapshot.of.display_path(),
        snapshot.name
    );
    let subs = top.subvolumes().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        subs[sub].parent_uuid,
        Some(snapshot.uuid),
        "{context}: live {sub} is not a copy of {}",
        snapshot.name
    );
    let o = outcome(top).unwrap_or_else(|| panic!("{context}: no outcome record"));
    assert_eq!(o.result, OutcomeResult::Done, "{context}: outcome {o}");
    assert_eq!(
        o.request.as_ref(),
        Some(request),
        "{context}: the outcome names another request: {o}"
    );
    assert_kept_what_was_replaced(top, &o, context);
    assert!(
        !request_path(top, layout::REQUEST_FILE_NAME).exists(),
        "{context}: the request is still staged"
    );
    assert_only_layout_and_snapshots(top, context);
}

fn unit_costs(boot: &Boot) -> String {
    [
        layout::names::INITRD_RESTORE_UNIT,
        layout::names::INITRD_WIPE_ROOT_UNIT,
    ]
    .iter()
    .map(|u| match boot.unit_seconds(u) {
        Some(s) => format!("{u} {:.0} ms", s * 1000.0),
        None => format!("{u} (no start/finish lines on the console)"),
    })
    .collect::<Vec<_>>()
    .join(", ")
}

// ---------------------------------------------------------------------------------------
// The stories.

#[test]
fn boot_story_restore_happens_once_and_root_is_always_fresh() {
    let Some(parts) = parts("boot tier: the restore story") else {
        return;
    };
    let mut story = Story::new("restore story");
    let mut m = KeepOnPanic(Some(machine(parts, "story")));

    story.step(
        "first boot, nothing staged: the machine reaches its root with every subvolume mounted",
    );
    let first = boot(&mut m, &BootOptions::default());
    assert_booted_clean(&first, "first boot");
    println!(
        "    units' boot cost with nothing staged (TCG, kernel clock): {}",
        unit_costs(&first)
    );
    on_disk(&m, |top| {
        assert_marker_left_on_root(top, "first boot");
        assert_eq!(
            outcome(top),
            None,
            "first boot: an outcome without any request"
        );
    });

    let (prepared, request, before) = on_disk(&m, |top| {
        let p = write_snapshot_change(top, &mut story);
        story.step("stage the restore of /home");
        let request = stage(top, &p.home);
        println!("    staged: {request}");
        (p, request, lasting_subvolumes(top))
    });

    story.step("reboot: /home is as in the snapshot, everything written since is gone, / is fresh");
    let second = boot(&mut m, &BootOptions::default());
    assert_booted_clean(&second, "the restore boot");
    let report = second.report.as_ref().expect("checked");
    assert_eq!(
        report.files.get("/home/notes.txt").map(String::as_str),
        Some("written before the snapshot"),
        "the running system does not see the restored /home: {:?}",
        report.files
    );
    assert!(
        !report.files.contains_key("/home/new.txt"),
        "the running system still sees /home/new.txt"
    );
    println!(
        "    units' boot cost with a restore staged (TCG, kernel clock): {}",
        unit_costs(&second)
    );
    let (home_after, done) = on_disk(&m, |top| {
        assert_marker_left_on_root(top, "the restore boot");
        assert_restored(
            top,
            &prepared.home,
            &prepared.home_then,
            &request,
            "the restore boot",
        );
        assert_eq!(
            read(top, "/home", "new.txt"),
            None,
            "a file written after the snapshot survived the restore"
        );
        assert_eq!(
            read(top, "/home", "doomed.txt").as_deref(),
            Some("deleted after the snapshot; must come back\n")
        );
        assert_eq!(
            read(top, "/persist", "config.txt").as_deref(),
            Some("version 2\n"),
            "/persist changed though only /home was restored"
        );
        let after = lasting_subvolumes(top);
        for (path, rec) in &before {
            if path != subvolume("/home").as_str() {
                assert_eq!(
                    after.get(path),
                    Some(rec),
                    "{path} changed though only /home was restored"
                );
            }
        }
        let done = outcome(top).expect("checked in assert_restored");
        println!("    outcome: {}", done.render().replace('\n', " | "));
        story.step("write to /home after the restore");
        write(
            top,
            "/home",
            "after-restore.txt",
            "written after the restore; must stay\n",
        );
        story.step(
            "as an ordinary user, leave subvolumes in /var/tmp: one named \\xff holding \
             another, read-only nests, own snapshots, one 3000 directories deep",
        );
        let tmp = hostile::dir_for_user(top.path(), "@root/var/tmp", 0o1777, 0);
        let made = hostile::as_hostile_user(&tmp, |dir| hostile::all_of_it(dir, 10, 40));
        println!(
            "    {made} subvolumes left in @root by uid {}",
            hostile::UID
        );
        (after[subvolume("/home").as_str()].clone(), done)
    });

    story.step("reboot again: nothing happens a second time, and / is fresh all the same");
    let third = boot(&mut m, &BootOptions::default());
    assert_booted_clean(&third, "the boot after the restore");
    let deleted = third
        .console
        .lines()
        .find(|l| l.contains("subvolumes nested in it"))
        .unwrap_or_else(|| {
            panic!(
                "no deletion of the user's subvolumes:\n{}",
                third.console_tail(60)
            )
        });
    println!("    {}", deleted.trim());
    println!(
        "    units' boot cost with the user's leftover in @root (TCG, kernel clock): {}",
        unit_costs(&third)
    );
    on_disk(&m, |top| {
        assert_marker_left_on_root(top, "the boot after the restore");
        let home_now = &lasting_subvolumes(top)[subvolume("/home").as_str()];
        assert_eq!(home_now, &home_after, "/home was replaced again");
        assert_eq!(
            read(top, "/home", "after-restore.txt").as_deref(),
            Some("written after the restore; must stay\n"),
            "a file written after the restore is gone: the restore happened twice"
        );
        assert_eq!(
            outcome(top),
            Some(done),
            "the outcome changed on a boot with nothing staged"
        );
        assert_only_layout_and_snapshots(top, "the boot after the restore");
    });
    println!(
        "    boots took {:.1} s, {:.1} s, {:.1} s",
        first.took.as_secs_f64(),
        second.took.as_secs_f64(),
        third.took.as_secs_f64()
    );
}

/// Bad requests, each on its own machine: the boot goes on, nothing changes, the outcome
/// says refused and why, the request is moved aside.
#[test]
fn boot_story_a_bad_request_changes_nothing_and_the_boot_goes_on() {
    let Some(parts) = parts("boot tier: bad requests") else {
        return;
    };
    type Writer = fn(&Mounted, &Snapshot) -> Vec<u8>;
    let cases: [(&str, Writer); 2] = [
        (
            "a request naming the store (@nix), which is never restorable",
            |_, snap| {
                let nix = boot_tier::guest::store_subvolume();
                let stamp = snap.name.to_string();
                let stamp = stamp.split_once('.').map(|(_, t)| t).unwrap_or_default();
                format!("{nix} {nix}.{stamp} {}\n", snap.uuid.hyphenated()).into_bytes()
            },
        ),
        (
            "a well-formed request whose UUID is not the snapshot's",
            |_, snap| {
                RestoreRequest::one(snap.of, snap.name, other_uuid(&snap.uuid))
                    .expect("well-formed")
                    .render()
                    .into_bytes()
            },
        ),
    ];
    std::thread::scope(|s| {
        for (what, make) in cases {
            s.spawn(move || {
                let mut story = Story::new(what);
                let mut m = KeepOnPanic(Some(machine(parts, "bad-request")));
                let (bytes, before, home_before) = on_disk(&m, |top| {
                    let p = write_snapshot_change(top, &mut story);
                    story.step(&format!("stage {what}"));
                    let bytes = make(top, &p.home);
                    std::fs::write(request_path(top, layout::REQUEST_FILE_NAME), &bytes)
                        .expect("writing the request");
                    (
                        bytes,
                        lasting_subvolumes(top),
                        contents(top, subvolume("/home").as_str()),
                    )
                });
                story.step("reboot: the boot goes on, nothing changes, the reason is recorded");
                let b = boot(&mut m, &BootOptions::default());
                assert_booted_clean(&b, what);
                on_disk(&m, |top| {
                    assert_eq!(
                        lasting_subvolumes(top),
                        before,
                        "{what}: a subvolume changed (ids and UUIDs compared)"
                    );
                    assert_eq!(
                        contents(top, subvolume("/home").as_str()),
                        home_before,
                        "{what}: /home changed"
                    );
                    let o = outcome(top).unwrap_or_else(|| panic!("{what}: no outcome recorded"));
                    assert_eq!(o.result, OutcomeResult::Refused, "{what}: {o}");
                    assert!(o.reason.as_str().len() > 5, "{what}: no reason: {o}");
                    println!("    refused: {}", o.reason.as_str());
                    assert!(
                        !request_path(top, layout::REQUEST_FILE_NAME).exists(),
                        "{what}: request still staged"
                    );
                    let aside = std::fs::read(request_path(top, layout::REFUSED_REQUEST_FILE_NAME));
                    assert_eq!(
                        aside.ok(),
                        Some(bytes),
                        "{what}: the refused request was not moved aside intact"
                    );
                });
            });
        }
    });
}

/// Which kind of work a power cut interrupts.
#[derive(Clone, Copy, Debug)]
enum Work {
    /// A set restore of /persist, /var/log and /home, as after a switch gone wrong.
    Set,
    Refusal,
    Wipe,
}

/// The mount points of the set the power cuts interrupt: every restorable subvolume, as a
/// set taken before a switch holds them.
const SET: [&str; 3] = ["/persist", "/var/log", "/home"];

/// Every case of the power-cut story: each step occurrence of a set restore of three
/// members (25), of a refusal and of a wipe, in that order, with the root of its machine.
///
/// The cut between the outcome's temporary file and its rename is made once, in the set
/// (step 27): the next boot's `tacid-initrd` finds that file under the name it would take
/// itself (its pid repeats), finishes and reports; the boot after does nothing again. The
/// refusal's own cut there (step 28) is the loop tier's, at the very same pid
/// (`initrd/tests/loop_durable_leftovers.rs`): the same code, a boot saved.
///
/// The machine of that one cut keeps its root: its initrd has no wipe unit and its disk no
/// `@root-blank`, and what is on `@root` must survive every boot while the set is put back.
/// So a machine without the ephemeral root costs no boot of its own.
fn power_cut_cases() -> Vec<(Step, StepAt, Work, Root)> {
    let root = |s: Step| {
        if s == Step::RestoreOutcomeTemp {
            Root::Kept
        } else {
            Root::Ephemeral
        }
    };
    Step::restore_sequence(SET.len())
        .into_iter()
        .map(|(s, k)| (s, StepAt::new(s, k), Work::Set, root(s)))
        .chain(
            Step::REFUSE
                .iter()
                .filter(|&&s| s != Step::RefuseOutcomeTemp)
                .map(|&s| (s, StepAt::first(s), Work::Refusal, Root::Ephemeral)),
        )
        .chain(
            Step::WIPE
                .iter()
                .map(|&s| (s, StepAt::first(s), Work::Wipe, Root::Ephemeral)),
        )
        .collect()
}

/// The parts of a machine that keeps its root, built once per test process.
fn kept_root_parts(parts: &'static Parts) -> &'static Parts {
    static KEPT: OnceLock<Result<Parts, String>> = OnceLock::new();
    let kept = KEPT.get_or_init(|| {
        let kept = parts.keeping_root().map_err(|e| e.to_string())?;
        for (what, took) in &kept.timings {
            println!("  {what:<28} {:>7.2} s", took.as_secs_f64());
        }
        Ok(kept)
    });
    match kept {
        Ok(p) => p,
        Err(e) => panic!("building the machine that keeps its root failed: {e}"),
    }
}

/// What the story leaves on a kept root before the first boot (the marker's first line).
const KEPT_ROOT_MARKER: &str = "left on the kept root before the restore";
/// What the guest leaves on `/` at every boot (guest.rs's init script).
const GUEST_ROOT_MARKER: &str = "left by the previous boot";

/// Cut the power right after every step occurrence of a three-member set restore, the
/// refusal and the wipe; the next boot must come up and finish the work, exactly once.
///
/// A restore of one member is proven at boot by the other stories and at every step by the
/// loop and test-hook tiers; here the set's repeated steps are each cut after, so a boot
/// never runs on a mix of members put back and not.
#[test]
fn boot_story_a_power_cut_at_every_step_still_restores_exactly_once() {
    let Some(parts) = parts("boot tier: power cuts") else {
        return;
    };
    let only = only_steps();
    let cases: Vec<(Step, StepAt, Work, Root)> = power_cut_cases()
        .into_iter()
        .filter(|(_, at, _, _)| only.as_ref().is_none_or(|only| only.contains(at)))
        .collect();
    assert!(
        !cases.is_empty(),
        "BOOT_TIER_STEPS={:?} names no step occurrence of the power-cut cases",
        std::env::var("BOOT_TIER_STEPS").unwrap_or_default()
    );
    println!(
        "{} power cuts: after {}",
        cases.len(),
        cases
            .iter()
            .map(|(_, at, work, root)| format!("{at} ({work:?}, root {root:?})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let started = Instant::now();
    let queue = Mutex::new(cases.into_iter());
    let failures = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((step, at, work, root)) = next else {
                    break;
                };
                let result = std::panic::catch_unwind(|| power_cut_at(parts, step, at, work, root));
                if let Err(e) = result {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
                    failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!(
                            "step {at} ({}): {}",
                            step.name(),
                            msg.unwrap_or_default()
                        ));
                }
            });
        }
    });
    println!(
        "power cuts took {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(
        failures.is_empty(),
        "power cuts that did not converge:\n{}",
        failures.join("\n\n")
    );
}

/// `BOOT_TIER_STEPS=6,4.2` runs the power cuts after only those step occurrences (to look
/// at one): `N` is a step's first occurrence, `N.k` its k-th, as the fault switches say.
fn only_steps() -> Option<Vec<StepAt>> {
    let v = std::env::var("BOOT_TIER_STEPS").ok()?;
    Some(
        v.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                StepAt::parse(n).unwrap_or_else(|| panic!("BOOT_TIER_STEPS: {n:?} is not N or N.k"))
            })
            .collect(),
    )
}

/// A set taken and changed since: the snapshots (in the layout's order) and what each
/// member's files said when they were taken.
struct PreparedSet {
    snapshots: Vec<Snapshot>,
    then: BTreeMap<SubvolumeName, BTreeMap<String, String>>,
}

/// Write files in every member of [`SET`], take one set of all three (as before a switch),
/// then edit, add and delete in each.
fn write_snapshot_set_change(top: &Mounted, story: &mut Story) -> PreparedSet {
    let members = || SET.iter().map(|mp| (*mp, subvolume(mp)));
    story.step(&format!("write files in {}", SET.join(", ")));
    for (mp, _) in members() {
        write(top, mp, "kept.txt", &format!("{mp} before the snapshot\n"));
        write(
            top,
            mp,
            "doomed.txt",
            "deleted after the snapshot; must come back\n",
        );
    }
    story.step("take one set of all three, as before a switch");
    let subvolumes: Vec<SubvolumeName> = members().map(|(_, s)| s).collect();
    let snapshots = engine(top)
        .take_set(&subvolumes)
        .unwrap_or_else(|e| panic!("a set of {}: {e}", SET.join(", ")));
    assert_eq!(
        snapshots.iter().map(|s| s.of).collect::<Vec<_>>(),
        subvolumes,
        "the set's members"
    );
    let then = members()
        .map(|(_, s)| (s, contents(top, s.as_str())))
        .collect();
    story.step("change each: edit, add, delete");
    for (mp, s) in members() {
        write(
            top,
            mp,
            "kept.txt",
            &format!("{mp} edited after the snapshot\n"),
        );
        write(top, mp, "new.txt", "written after the snapshot; must go\n");
        std::fs::remove_file(top.in_subvolume(s.as_str(), "doomed.txt"))
            .unwrap_or_else(|e| panic!("deleting {mp}/doomed.txt: {e}"));
    }
    PreparedSet { snapshots, then }
}

/// Stage the set's restore: one request of a line per member, written durably (a temporary
/// file synced, renamed into place, the store synced), root's and mode 0600, as the stem
/// writes one.
fn stage_set(top: &Mounted, snapshots: &[Snapshot]) -> RestoreRequest {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let request = RestoreRequest::new(snapshots.iter().map(|s| {
        RestoreMember::new(s.of, s.name, s.uuid).unwrap_or_else(|e| panic!("{}: {e}", s.name))
    }))
    .unwrap_or_else(|e| panic!("a request of the set: {e}"));
    let path = request_path(top, layout::REQUEST_FILE_NAME);
    let temp = path.with_extension("boot-tier-tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .unwrap_or_else(|e| panic!("creating {}: {e}", temp.display()));
    f.write_all(request.render().as_bytes())
        .and_then(|()| f.sync_all())
        .unwrap_or_else(|e| panic!("writing {}: {e}", temp.display()));
    drop(f);
    std::fs::rename(&temp, &path).unwrap_or_else(|e| panic!("staging {}: {e}", path.display()));
    let store = path.parent().expect("the store");
    std::fs::File::open(store)
        .and_then(|d| d.sync_all())
        .unwrap_or_else(|e| panic!("syncing {}: {e}", store.display()));
    assert_eq!(
        engine(top).staged().unwrap_or_else(|e| panic!("{e}")),
        Some(request.clone()),
        "the stem does not read the request back as written"
    );
    request
}

/// The set was put back whole, as asked: every member's files as in its snapshot (and so
/// seen by the running system), each live member a copy of that very snapshot, everything
/// else untouched, the outcome "done" naming every member, the request gone, nothing left
/// over.
fn assert_set_restored(
    top: &Mounted,
    boot: &Boot,
    set: &PreparedSet,
    request: &RestoreRequest,
    before: &BTreeMap<String, SubvolumeRecord>,
    context: &str,
    root: Root,
) {
    let subs = top.subvolumes().unwrap_or_else(|e| panic!("{e}"));
    let report = boot
        .report
        .as_ref()
        .expect("checked by assert_booted_clean");
    for snapshot in &set.snapshots {
        let (sub, mp) = (snapshot.of.as_str(), snapshot.of.display_path());
        let then = &set.then[&snapshot.of];
        assert_eq!(
            &contents(top, sub),
            then,
            "{context}: {mp} is not as in {}",
            snapshot.name
        );
        assert_eq!(
            subs[sub].parent_uuid,
            Some(snapshot.uuid),
            "{context}: live {sub} is not a copy of {}",
            snapshot.name
        );
        let seen: BTreeMap<String, String> = report
            .files
            .iter()
            .filter_map(|(path, first)| {
                let name = path.strip_prefix(&format!("{mp}/"))?;
                (!name.contains('/')).then(|| (name.to_owned(), first.clone()))
            })
            .collect();
        let expected: BTreeMap<String, String> = then
            .iter()
            .map(|(name, text)| (name.clone(), text.lines().next().unwrap_or("").to_owned()))
            .collect();
        assert_eq!(
            seen, expected,
            "{context}: the running system does not see {mp} as in {}",
            snapshot.name
        );
    }
    let members: Vec<&str> = set.snapshots.iter().map(|s| s.of.as_str()).collect();
    let after = lasting_subvolumes(top);
    for (path, record) in before
        .iter()
        .filter(|(p, _)| !members.contains(&p.as_str()))
    {
        assert_eq!(
            after.get(path),
            Some(record),
            "{context}: {path} changed though it is not in the set"
        );
    }
    let o = outcome(top).unwrap_or_else(|| panic!("{context}: no outcome record"));
    assert_eq!(o.result, OutcomeResult::Done, "{context}: outcome {o}");
    assert_eq!(
        o.request.as_ref(),
        Some(request),
        "{context}: the outcome does not name the set's {} members: {o}",
        request.members().len()
    );
    assert_kept_what_was_replaced(top, &o, context);
    assert!(
        !request_path(top, layout::REQUEST_FILE_NAME).exists(),
        "{context}: the request is still staged"
    );
    assert_only_layout_and_snapshots_of(top, context, root);
}

fn power_cut_at(parts: &'static Parts, step: Step, at: StepAt, work: Work, root: Root) {
    let kept = root == Root::Kept;
    let parts = if kept { kept_root_parts(parts) } else { parts };
    let on_a = if kept { ", on a root that is kept" } else { "" };
    let mut story = Story::new(format!("{work:?} {at}: {}{on_a}", step.name()));
    let mut m = KeepOnPanic(Some(machine(parts, &format!("cut-{at}"))));
    let context = format!("power cut after step {at} ({}){on_a}", step.name());
    // The root's subvolume as it was before the first boot (a kept root stays that one).
    let mut root_before = None;
    // What the boot after the cut must find.
    let (set, request, bad_bytes, before) = on_disk(&m, |top| {
        let (set, request, bad) = match work {
            Work::Set => {
                let set = write_snapshot_set_change(top, &mut story);
                story.step(
                    "stage the restore of all three in one request (the copy of /persist must \
                     get the store's mount point)",
                );
                let request = stage_set(top, &set.snapshots);
                println!("    staged: {request}");
                (Some(set), Some(request), None)
            }
            Work::Refusal => {
                let p = write_snapshot_change(top, &mut story);
                story.step("stage a request whose UUID is not the snapshot's");
                let bad = RestoreRequest::one(p.home.of, p.home.name, other_uuid(&p.home.uuid))
                    .expect("well-formed");
                let bytes = bad.render().into_bytes();
                std::fs::write(request_path(top, layout::REQUEST_FILE_NAME), &bytes)
                    .expect("writing the request");
                (None, None, Some(bytes))
            }
            Work::Wipe => {
                write_snapshot_change(top, &mut story);
                story.step("leave a marker on the root, as a running system would");
                let marker = top.in_subvolume(layout::ROOT_SUBVOLUME, ROOT_MARKER);
                std::fs::write(marker, "left by the previous boot\n").expect("writing the marker");
                (None, None, None)
            }
        };
        if kept {
            story.step("leave a marker on the root, which this machine keeps");
            let marker = top.in_subvolume(layout::ROOT_SUBVOLUME, ROOT_MARKER);
            std::fs::write(marker, format!("{KEPT_ROOT_MARKER}\n")).expect("writing the marker");
            assert!(
                !top.path().join(layout::ROOT_BLANK_SUBVOLUME).exists(),
                "{context}: the disk of a machine that keeps its root has {}",
                layout::ROOT_BLANK_SUBVOLUME
            );
            root_before = top
                .subvolumes()
                .expect("list")
                .remove(layout::ROOT_SUBVOLUME);
        }
        (set, request, bad, lasting_subvolumes(top))
    });

    story.step(&format!("boot and cut the power right after step {at}"));
    let cut = boot(
        &mut m,
        &BootOptions {
            pause_after: Some(at),
            ..Default::default()
        },
    );
    match &cut.ending {
        Ending::PowerCut { at: paused, name } => {
            assert_eq!(
                (*paused, name.as_str()),
                (at, step.name()),
                "{context}: paused elsewhere"
            );
        }
        other => panic!(
            "{context}: tacid-initrd never paused there ({other:?}). Console:\n{}",
            cut.console_tail(60)
        ),
    }
    // Cut between the outcome's temporary file and its rename: that file is on the disk
    // (synced before the cut), the outcome is not.
    let leftover = matches!(step, Step::RestoreOutcomeTemp | Step::RefuseOutcomeTemp).then(|| {
        on_disk(&m, |top| {
            let temps = store_temps(top);
            let [temp] = &temps[..] else {
                panic!("{context}: not one temporary file in the store: {temps:?}")
            };
            let path = request_path(top, temp);
            let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{context}: {e}"));
            let o = Outcome::parse(&text)
                .unwrap_or_else(|e| panic!("{context}: {temp} holds no outcome: {e}"));
            assert_eq!(outcome(top), None, "{context}: the rename was done");
            println!(
                "    the cut left {temp}, holding an outcome \"{:?}\"",
                o.result
            );
            temp.clone()
        })
    });

    story.step("boot again: the machine comes up and the work is finished");
    let again = boot(&mut m, &BootOptions::default());
    if kept {
        assert_booted_keeping_root(&again, &context, KEPT_ROOT_MARKER);
    } else {
        assert_booted_clean(&again, &context);
    }
    if let Some(temp) = &leftover {
        let pid = again
            .console
            .split("tacid-initrd: restore-data: starting (pid ")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .unwrap_or("unknown");
        println!("    the boot after ran tacid-initrd restore-data as pid {pid}, the cut one left {temp}");
        let said = format!(
            "tacid-initrd: removed {}/{temp},",
            layout::SNAPSHOTS_SUBVOLUME
        );
        assert!(
            again.console.contains(&said),
            "{context}: the boot did not remove the leftover {temp}:\n{}",
            again.console_tail(60)
        );
    }
    on_disk(&m, |top| match work {
        Work::Set => {
            let (set, request) = (
                set.as_ref().expect("taken"),
                request.as_ref().expect("staged"),
            );
            assert_set_restored(top, &again, set, request, &before, &context, root);
        }
        Work::Refusal => {
            assert_eq!(
                lasting_subvolumes(top),
                before,
                "{context}: a subvolume changed (ids and UUIDs compared)"
            );
            let o = outcome(top).unwrap_or_else(|| panic!("{context}: no outcome"));
            assert_eq!(o.result, OutcomeResult::Refused, "{context}: {o}");
            assert!(
                !request_path(top, layout::REQUEST_FILE_NAME).exists(),
                "{context}: the request is still staged"
            );
            let aside = std::fs::read(request_path(top, layout::REFUSED_REQUEST_FILE_NAME)).ok();
            assert_eq!(
                aside, bad_bytes,
                "{context}: the refused request was not moved aside intact"
            );
        }
        Work::Wipe => {
            assert_eq!(
                lasting_subvolumes(top),
                before,
                "{context}: a lasting subvolume changed"
            );
            assert_only_layout_and_snapshots(top, &context);
            assert_eq!(
                outcome(top),
                None,
                "{context}: an outcome without a request"
            );
        }
    });
    println!(
        "    {context}: converged (boots took {:.1} s and {:.1} s)",
        cut.took.as_secs_f64(),
        again.took.as_secs_f64()
    );

    // Where the outcome is written but the request's removal may not be durable yet, a
    // second restore is the danger: prove the next boot leaves later writes alone.
    let risky = [
        Step::RestoreOutcomeTemp,
        Step::RestoreOutcome,
        Step::RestoreRemoveRequest,
        Step::RestoreCommitRequest,
    ];
    if matches!(work, Work::Set) && risky.contains(&step) {
        let (done, members_now) = on_disk(&m, |top| {
            story.step(&format!("write to {} after the restore", SET.join(", ")));
            for mp in SET {
                write(top, mp, "after-restore.txt", "must stay\n");
            }
            let now = lasting_subvolumes(top);
            (outcome(top), now)
        });
        story.step("boot once more: nothing happens a second time");
        let third = boot(&mut m, &BootOptions::default());
        if kept {
            assert_booted_keeping_root(&third, &context, GUEST_ROOT_MARKER);
        } else {
            assert_booted_clean(&third, &context);
        }
        on_disk(&m, |top| {
            if kept {
                assert_eq!(
                    top.subvolumes()
                        .expect("list")
                        .remove(layout::ROOT_SUBVOLUME),
                    root_before,
                    "{context}: the kept root was made again"
                );
            }
            for mp in SET {
                assert_eq!(
                    read(top, mp, "after-restore.txt").as_deref(),
                    Some("must stay\n"),
                    "{context}: {mp} restored twice"
                );
            }
            assert_eq!(
                lasting_subvolumes(top),
                members_now,
                "{context}: a subvolume was replaced on a later boot"
            );
            assert_eq!(
                outcome(top),
                done,
                "{context}: the outcome changed on a later boot"
            );
        });
        println!(
            "    {context}: the boot after took {:.1} s, nothing happened twice",
            third.took.as_secs_f64()
        );
    }
}

/// The snapshot's UUID with its last bit flipped: well-formed, and not that snapshot.
fn other_uuid(of: &uuid::Uuid) -> uuid::Uuid {
    uuid::Uuid::from_u128(of.as_u128() ^ 1)
}
