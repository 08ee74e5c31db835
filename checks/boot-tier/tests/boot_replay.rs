//! The boot tier's write-level power cuts: one real boot of a restore with every write and
//! flush the guest makes to its disk logged (qemu's `blklogwrites`), then every disk a power
//! cut during that boot can leave, each checked on the host.
//!
//! The step cuts of `boot_story` stop `tacid-initrd` between two of its steps; a power cut can
//! also come in the middle of one, between any two writes of a Btrfs commit or a file's
//! fsync, and a disk with a write cache may lose some of the writes since its last flush and
//! not others. The logged boot honours (or refuses) the staged request and, in the cases that
//! keep what a restore replaces, also wipes the root (the initrd's two units); it is cut right
//! after the last step of the last, so its log holds every write of them and nothing after.
//! The cases: `/home` alone and a set of all three restorable subvolumes, through the wipe;
//! `/home` below the hard floor (nothing kept) and a refused request, to the end of
//! `restore-data`. The disk as it was before the boot is copied and a crash state of the log
//! is replayed onto the copy (`boot_tier::write_log::crash_states`); each such disk is
//! loop-mounted on the host and given to the static, test-hooked `tacid-initrd` that was in
//! the machine's initrd, run as the next boot runs it: `restore-data` at the pid the logged
//! boot's run had (so a temporary file the cut left is at the very name the next run takes
//! first, as when an initrd's pid repeats; where the cut left one, also at another pid on a
//! copy), then `wipe-root`, then `restore-data` once more. What a user would check is
//! asserted on each (for a refusal: no subvolume ever changes, the request is staged or moved
//! aside byte for byte and never lost, the outcome says "refused" before the request is moved
//! aside, and the next boot finishes the refusal once); for a restore:
//!
//! - right after the cut: each member's live subvolume is there and holds either what it held
//!   before (the same subvolume) or the snapshot's content (a copy of that snapshot), never a
//!   mix, never missing; what it replaced is kept in the store read-only at most once, and
//!   nothing writable is in the store; the request is there byte for byte, or gone only with
//!   an outcome "done" beside it; an outcome that is there is whole, "done", names the
//!   request, and is true (every member restored, every kept snapshot it names is there,
//!   read-only);
//! - after the next boot: `restore-data` succeeded; every member holds the snapshot's content
//!   and is a copy of it; the outcome is "done", names the request, and is the one the cut
//!   left when it left one (recorded again, the same but for its finish time, when the request
//!   was still staged beside it: a run records the outcome before it removes the request); it
//!   names for each member the one read-only snapshot in the store that holds what the member
//!   held before (the one the cut left, if it left one: never kept twice), or, below the hard
//!   floor, that nothing was kept, and nothing is; the request is gone, no temporary file is
//!   left; `wipe-root` succeeded; the disk holds the layout, the store's snapshots and a
//!   fresh root (a copy of the blank one) and nothing else; the subvolumes outside the
//!   restore are unchanged; a further `restore-data` finds nothing staged and changes
//!   nothing.
//!
//! Crash states (`crash_states`): after each flush (and at the start), every subset of the
//! writes up to the next flush while there are at most [`MAX_SUBSET_WRITES`] of them, else
//! each prefix, each with one write left out, and each alone. Every prefix of the log is
//! among them. The replay also proves it reaches each stage of the restore (none kept yet,
//! one and every member kept, the outcome's temporary file, the outcome beside the request,
//! the request gone before the old is deleted, the wipe under way): a log that missed them
//! would prove nothing. Not covered: a write torn within itself, and orders of writes other
//! than the completion order the log holds beyond the subsets above (adr/0008, amended).
//!
//! Needs root and qemu, like every boot-tier test: without them it prints a loud SKIPPED line
//! and passes, and under `CI=true` fails instead. Run alone:
//! `cargo test -p boot-tier --test boot_replay -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Instant;

use boot_tier::guest::ROOT_MARKER;
use boot_tier::image::{Mounted, SubvolumeRecord};
use boot_tier::machine::{BootOptions, Ending, Machine, HARD_FLOOR_BYTES};
use boot_tier::parts::Parts;
use boot_tier::write_log::{CrashState, WriteLog};
use initrd::steps::{Step, StepAt};
use layout::{Outcome, OutcomeResult, RestoreMember, RestoreRequest, SubvolumeName};
use stem::{Engine, Snapshot, Staged};
use uuid::Uuid;

/// Every part, built once per test process.
fn parts(test: &str) -> Option<&'static Parts> {
    boot_tier::env::require(test)?;
    static PARTS: OnceLock<Result<Parts, String>> = OnceLock::new();
    let parts = PARTS.get_or_init(|| {
        let started = Instant::now();
        let parts = Parts::for_workspace().map_err(|e| e.to_string())?;
        println!("parts ready in {:.1} s", started.elapsed().as_secs_f64());
        println!("  accel: {:?}", boot_tier::machine::accel(&parts));
        Ok(parts)
    });
    match parts {
        Ok(p) => Some(p),
        Err(e) => panic!("building the test machine failed: {e}"),
    }
}

fn subvolume(mount_point: &str) -> SubvolumeName {
    SubvolumeName::from_name_or_mount_point(mount_point).expect("a mount point of the layout")
}

fn engine(top: &Mounted) -> Engine {
    Engine::open(top.path()).unwrap_or_else(|e| panic!("opening the stem engine on the disk: {e}"))
}

/// The files directly in a subvolume, with their contents.
fn contents(top: &Mounted, sub: &str) -> Result<BTreeMap<String, String>, String> {
    let dir = top.path().join(sub);
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    Ok(entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect())
}

fn write(top: &Mounted, sub: &str, file: &str, content: &str) {
    let path = top.in_subvolume(sub, file);
    std::fs::write(&path, content).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// One member of the restore: what it held before, its snapshot and what that holds.
#[derive(Debug, Clone)]
struct Member {
    sub: SubvolumeName,
    /// The live subvolume before the boot (what the restore replaces).
    old: SubvolumeRecord,
    old_files: BTreeMap<String, String>,
    snapshot: Snapshot,
    snapshot_files: BTreeMap<String, String>,
}

/// What the logged boot started from.
#[derive(Debug, Clone)]
struct Staging {
    members: Vec<Member>,
    request: RestoreRequest,
    request_bytes: Vec<u8>,
    /// Every subvolume before the boot (the ephemeral root aside).
    before: BTreeMap<String, SubvolumeRecord>,
    /// The hard floor the boots are given; below it what a restore replaces is deleted.
    hard_floor: u64,
    /// Whether what the restore replaces is kept (the disk is above the hard floor).
    keeps: bool,
    /// The staged request is one the boot refuses (its UUID is not the snapshot's).
    refused: bool,
}

/// Write files in each member, take one snapshot of them all (a set when more than one),
/// change them (edit, add, delete), stage the restore through the stem's engine.
fn prepare(top: &Mounted, mount_points: &[&str], hard_floor: u64, refused: bool) -> Staging {
    let subs: Vec<SubvolumeName> = mount_points.iter().map(|m| subvolume(m)).collect();
    for (mp, s) in mount_points.iter().zip(&subs) {
        write(
            top,
            s.as_str(),
            "kept.txt",
            &format!("{mp} before the snapshot\n"),
        );
        write(
            top,
            s.as_str(),
            "doomed.txt",
            "deleted after the snapshot; must come back\n",
        );
    }
    let e = engine(top);
    let snapshots = if subs.len() == 1 {
        vec![e
            .take(subs[0])
            .unwrap_or_else(|e| panic!("a snapshot: {e}"))]
    } else {
        e.take_set(&subs).unwrap_or_else(|e| panic!("a set: {e}"))
    };
    let snapshot_files: Vec<BTreeMap<String, String>> = subs
        .iter()
        .map(|s| contents(top, s.as_str()).expect("contents"))
        .collect();
    for (mp, s) in mount_points.iter().zip(&subs) {
        write(
            top,
            s.as_str(),
            "kept.txt",
            &format!("{mp} edited after the snapshot\n"),
        );
        write(
            top,
            s.as_str(),
            "new.txt",
            "written after the snapshot; must go\n",
        );
        std::fs::remove_file(top.in_subvolume(s.as_str(), "doomed.txt")).expect("delete");
    }
    let names: Vec<_> = snapshots.iter().map(|s| s.name).collect();
    let request = match e
        .stage_set_restore(&names)
        .unwrap_or_else(|e| panic!("staging: {e}"))
    {
        Staged::New(r) => r,
        Staged::AlreadyStaged(r) => panic!("already staged: {r}"),
    };
    drop(e);
    let request = if refused {
        // The same members, each with a UUID that is not its snapshot's: well-formed, and
        // refused at the boot. (Durable once the disk is unmounted.)
        let bad = RestoreRequest::new(request.members().iter().map(|m| {
            let other = Uuid::from_u128(m.uuid().as_u128() ^ 1);
            RestoreMember::new(m.subvolume(), m.snapshot(), other).expect("well-formed")
        }))
        .expect("well-formed");
        std::fs::write(request_file(top), bad.render()).expect("writing the request");
        bad
    } else {
        request
    };
    let request_bytes = std::fs::read(request_file(top)).expect("the staged request");
    let all = top.subvolumes().unwrap_or_else(|e| panic!("{e}"));
    let members = subs
        .iter()
        .zip(snapshots)
        .zip(snapshot_files)
        .map(|((s, snapshot), snapshot_files)| Member {
            sub: *s,
            old: all[s.as_str()].clone(),
            old_files: contents(top, s.as_str()).expect("contents"),
            snapshot,
            snapshot_files,
        })
        .collect();
    let mut before = all;
    before.remove(layout::ROOT_SUBVOLUME);
    Staging {
        members,
        request,
        request_bytes,
        before,
        hard_floor,
        keeps: hard_floor == HARD_FLOOR_BYTES,
        refused,
    }
}

fn request_file(top: &Mounted) -> PathBuf {
    top.path()
        .join(layout::SNAPSHOTS_SUBVOLUME)
        .join(layout::REQUEST_FILE_NAME)
}

fn store_temps(top: &Mounted) -> Vec<String> {
    let store = top.path().join(layout::SNAPSHOTS_SUBVOLUME);
    let mut names: Vec<String> = std::fs::read_dir(&store)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(layout::TEMP_PREFIX))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// What a crash state held, before the next boot touched it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    /// Members whose live subvolume is the snapshot's copy.
    restored: usize,
    /// Names at the top level under a swap name.
    swaps: usize,
    /// Members whose replaced subvolume is kept in the store.
    kept: usize,
    outcome: bool,
    request: bool,
    temps: usize,
    /// The wipe's copy or the old root under the root's swap name.
    root_swap: bool,
    /// A refused request moved aside.
    aside: bool,
    /// The case is a refusal (its outcome says "refused", not "done").
    refusal: bool,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "restored {}, swap names {}, kept {}, outcome {}, request {}, temporary files {}{}{}",
            self.restored,
            self.swaps,
            self.kept,
            if !self.outcome {
                "none"
            } else if self.refusal {
                "refused"
            } else {
                "done"
            },
            if self.request { "staged" } else { "gone" },
            self.temps,
            if self.root_swap {
                ", wipe under way"
            } else {
                ""
            },
            if self.aside { ", moved aside" } else { "" },
        )
    }
}

/// `btrfs subvolume list -r`: the paths of the read-only subvolumes.
fn readonly_paths(top: &Mounted) -> Result<BTreeSet<String>, String> {
    let out = Command::new(boot_tier::env::tools::BTRFS)
        .args(["subvolume", "list", "-r"])
        .arg(top.path())
        .output()
        .map_err(|e| format!("btrfs subvolume list -r: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "btrfs subvolume list -r: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(" path ").map(|(_, p)| p.to_owned()))
        .map(|p| p.trim_start_matches("<FS_TREE>/").to_owned())
        .collect())
}

/// Store subvolumes made since the staging that hold what `m` held: snapshots of it.
fn kept_of<'a>(
    m: &Member,
    subs: &'a BTreeMap<String, SubvolumeRecord>,
    staging: &Staging,
) -> Vec<&'a SubvolumeRecord> {
    let store = format!("{}/", layout::SNAPSHOTS_SUBVOLUME);
    subs.values()
        .filter(|r| r.path.starts_with(&store) && !staging.before.contains_key(&r.path))
        .filter(|r| r.parent_uuid == Some(m.old.uuid))
        .collect()
}

/// The crash state on `top`, checked: what it holds (or the first thing that is wrong).
fn check_cut(top: &Mounted, staging: &Staging) -> Result<(Seen, Option<Outcome>), String> {
    let subs = top.subvolumes().map_err(|e| e.to_string())?;
    let ro = readonly_paths(top)?;
    let store = format!("{}/", layout::SNAPSHOTS_SUBVOLUME);
    let writable: Vec<&String> = subs
        .keys()
        .filter(|p| p.starts_with(&store) && !ro.contains(*p))
        .collect();
    if !writable.is_empty() {
        return Err(format!("writable subvolumes in the store: {writable:?}"));
    }
    let mut seen = Seen {
        restored: 0,
        swaps: 0,
        kept: 0,
        outcome: false,
        request: false,
        temps: store_temps(top).len(),
        root_swap: top
            .path()
            .join(format!("{}{}", layout::ROOT_SUBVOLUME, layout::SWAP_SUFFIX))
            .exists(),
        aside: false,
        refusal: false,
    };
    for m in &staging.members {
        let sub = m.sub.as_str();
        let live = subs
            .get(sub)
            .ok_or_else(|| format!("{} is missing", m.sub.display_path()))?;
        let files = contents(top, sub)?;
        if live.parent_uuid == Some(m.snapshot.uuid) && files == m.snapshot_files {
            seen.restored += 1;
        } else if live.uuid != m.old.uuid || files != m.old_files {
            return Err(format!(
                "{} is neither what it was nor a copy of {}: uuid {} (was {}), parent {:?}, \
                 files {files:?}",
                m.sub.display_path(),
                m.snapshot.name,
                live.uuid,
                m.old.uuid,
                live.parent_uuid
            ));
        }
        let kept = kept_of(m, &subs, staging);
        if !staging.keeps && !kept.is_empty() {
            return Err(format!(
                "what {} held is kept below the hard floor: {:?}",
                m.sub.display_path(),
                kept.iter().map(|r| &r.path).collect::<Vec<_>>()
            ));
        }
        if kept.len() > 1 {
            return Err(format!(
                "what {} held is kept {} times: {:?}",
                m.sub.display_path(),
                kept.len(),
                kept.iter().map(|r| &r.path).collect::<Vec<_>>()
            ));
        }
        seen.kept += kept.len();
        if top
            .path()
            .join(format!("{sub}{}", layout::SWAP_SUFFIX))
            .exists()
        {
            seen.swaps += 1;
        }
    }
    match std::fs::read(request_file(top)) {
        Ok(bytes) if bytes == staging.request_bytes => seen.request = true,
        Ok(bytes) => {
            return Err(format!(
                "the request file is not as staged: {:?}",
                String::from_utf8_lossy(&bytes)
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("reading the request: {e}")),
    }
    let outcome = engine(top)
        .outcome()
        .map_err(|e| format!("the outcome is not whole: {e}"))?;
    if let Some(o) = &outcome {
        seen.outcome = true;
        if o.result != OutcomeResult::Done || o.request.as_ref() != Some(&staging.request) {
            return Err(format!("an outcome that is not this restore's done: {o}"));
        }
        if seen.restored != staging.members.len() {
            return Err(format!(
                "the outcome says done with {} of {} members restored: {o}",
                seen.restored,
                staging.members.len()
            ));
        }
        for r in &o.replaced {
            let kept = match (r.kept, staging.keeps) {
                (Some(kept), true) => kept,
                (None, false) => continue,
                (None, true) => return Err(format!("{} was not kept: {o}", r.subvolume)),
                (Some(_), false) => {
                    return Err(format!(
                        "{} was kept below the hard floor: {o}",
                        r.subvolume
                    ))
                }
            };
            let path = format!("{store}{kept}");
            if !ro.contains(&path) {
                return Err(format!("the outcome names {kept}, which is not there: {o}"));
            }
        }
    } else if !seen.request {
        return Err("the request is gone and no outcome says what became of it".into());
    }
    Ok((seen, outcome))
}

/// Run `tacid-initrd restore-data` on `top` as pid `pid` of a new pid namespace (the pid the
/// logged boot's run had: the next boot's run has it too); its stderr.
fn restore_data_at_pid(
    parts: &Parts,
    top: &Mounted,
    staging: &Staging,
    pid: u32,
) -> Result<String, String> {
    // The shell is pid 1 of the new namespace; its child, the next pid after the one written
    // to ns_last_pid.
    let out = Command::new(boot_tier::env::tools::UNSHARE)
        .args(["--pid", "--fork", "/bin/sh", "-c"])
        .arg(
            "echo \"$1\" > /proc/sys/kernel/ns_last_pid && \
             \"$0\" restore-data --top \"$2\" --hard-floor-bytes=\"$3\"; exit $?",
        )
        .arg(&parts.inputs.binary)
        .arg((pid - 1).to_string())
        .arg(top.path())
        .arg(staging.hard_floor.to_string())
        .env_remove("TACID_TEST_STOP_AFTER")
        .output()
        .map_err(|e| format!("running tacid-initrd under unshare: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if !err.contains(&format!("restore-data: starting (pid {pid})")) {
        return Err(format!("tacid-initrd did not run as pid {pid}:\n{err}"));
    }
    if out.status.code() != Some(0) {
        return Err(format!("restore-data failed ({}):\n{err}", out.status));
    }
    Ok(err)
}

fn run_job(parts: &Parts, top: &Mounted, staging: &Staging, job: &str) -> Result<String, String> {
    let mut cmd = Command::new(&parts.inputs.binary);
    cmd.args([job, "--top"]).arg(top.path());
    if job == "restore-data" {
        cmd.arg(format!("--hard-floor-bytes={}", staging.hard_floor));
    }
    let out = cmd
        .env_remove("TACID_TEST_STOP_AFTER")
        .output()
        .map_err(|e| format!("running tacid-initrd {job}: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.code() != Some(0) {
        return Err(format!("{job} failed ({}):\n{err}", out.status));
    }
    Ok(err)
}

/// The next boot on the crash state on `top`: it must finish the restore exactly once.
fn check_next_boot(
    parts: &Parts,
    top: &Mounted,
    staging: &Staging,
    pid: u32,
    cut_seen: &Seen,
    cut_outcome: Option<&Outcome>,
) -> Result<(), String> {
    let cut_subs = top.subvolumes().map_err(|e| e.to_string())?;
    let cut_kept: Vec<Option<SubvolumeRecord>> = staging
        .members
        .iter()
        .map(|m| kept_of(m, &cut_subs, staging).first().map(|r| (*r).clone()))
        .collect();
    let log = restore_data_at_pid(parts, top, staging, pid)?;
    let subs = top.subvolumes().map_err(|e| e.to_string())?;
    let ro = readonly_paths(top)?;
    for m in &staging.members {
        let sub = m.sub.as_str();
        let live = subs
            .get(sub)
            .ok_or_else(|| format!("{} is missing after the next boot", m.sub.display_path()))?;
        if live.parent_uuid != Some(m.snapshot.uuid) || contents(top, sub)? != m.snapshot_files {
            return Err(format!(
                "{} is not as in {} after the next boot:\n{log}",
                m.sub.display_path(),
                m.snapshot.name
            ));
        }
    }
    let o = engine(top)
        .outcome()
        .map_err(|e| format!("the outcome is not whole after the next boot: {e}"))?
        .ok_or_else(|| format!("no outcome after the next boot:\n{log}"))?;
    if o.result != OutcomeResult::Done || o.request.as_ref() != Some(&staging.request) {
        return Err(format!(
            "the outcome is not this restore's done: {o}\n{log}"
        ));
    }
    if let Some(cut) = cut_outcome {
        // With the request gone the restore was over: the outcome stays as it is. With the
        // request still staged beside it, the next run records it again (its own `finished`
        // time): the same words, the same snapshots kept.
        let same_but_its_time = Outcome {
            finished: o.finished,
            ..cut.clone()
        } == o
            && o.finished >= cut.finished;
        let as_left = if cut_seen.request {
            same_but_its_time
        } else {
            cut == &o
        };
        if !as_left {
            return Err(format!(
                "the outcome the cut left (request {}) became another: {cut} became {o}",
                if cut_seen.request { "staged" } else { "gone" }
            ));
        }
    }
    if o.replaced.len() != staging.members.len() {
        return Err(format!(
            "the outcome does not name each replaced member: {o}"
        ));
    }
    let store = format!("{}/", layout::SNAPSHOTS_SUBVOLUME);
    let mut kept_names = BTreeSet::new();
    for (m, cut) in staging.members.iter().zip(&cut_kept) {
        let r = o
            .replaced
            .iter()
            .find(|r| r.subvolume == m.sub)
            .ok_or_else(|| format!("the outcome does not name {}: {o}", m.sub))?;
        let all = kept_of(m, &subs, staging);
        if !staging.keeps {
            if r.kept.is_some() || !all.is_empty() {
                return Err(format!(
                    "what {} held is kept below the hard floor: {o}",
                    m.sub.display_path()
                ));
            }
            continue;
        }
        let kept = r
            .kept
            .ok_or_else(|| format!("what {} held was not kept: {o}", m.sub.display_path()))?;
        let path = format!("{store}{kept}");
        let [one] = all[..] else {
            return Err(format!(
                "what {} held is kept {} times after the next boot: {:?}",
                m.sub.display_path(),
                all.len(),
                all.iter().map(|r| &r.path).collect::<Vec<_>>()
            ));
        };
        if one.path != path || !ro.contains(&path) {
            return Err(format!(
                "the outcome names {kept}, the store keeps {} (read-only: {})",
                one.path,
                ro.contains(&one.path)
            ));
        }
        if let Some(cut) = cut {
            if cut.uuid != one.uuid {
                return Err(format!(
                    "the next boot kept {} again as {} ({} was kept before the cut)",
                    m.sub.display_path(),
                    one.path,
                    cut.path
                ));
            }
        }
        let held = contents(top, &path)?;
        if held != m.old_files {
            return Err(format!(
                "{kept} does not hold what {} held before the restore: {held:?}",
                m.sub.display_path()
            ));
        }
        kept_names.insert(path);
    }
    if request_file(top).exists() {
        return Err(format!(
            "the request is still staged after the next boot:\n{log}"
        ));
    }
    let temps = store_temps(top);
    if !temps.is_empty() {
        return Err(format!(
            "temporary files left in the store: {temps:?}\n{log}"
        ));
    }
    // The wipe of the same boot (the cut may have come in the middle of the logged boot's
    // own): then the disk holds the layout, the store's snapshots, and a fresh root.
    run_job(parts, top, staging, "wipe-root")?;
    let subs = top.subvolumes().map_err(|e| e.to_string())?;
    let members: BTreeSet<&str> = staging.members.iter().map(|m| m.sub.as_str()).collect();
    let mut expected: BTreeSet<String> = staging.before.keys().cloned().collect();
    expected.extend(kept_names);
    expected.insert(layout::ROOT_SUBVOLUME.to_owned());
    let found: BTreeSet<String> = subs.keys().cloned().collect();
    if found != expected {
        return Err(format!(
            "subvolumes after the next boot are not the layout and the store's snapshots: \
             beyond {:?}, missing {:?}",
            found.difference(&expected).collect::<Vec<_>>(),
            expected.difference(&found).collect::<Vec<_>>()
        ));
    }
    for (path, record) in &staging.before {
        if !members.contains(path.as_str()) && subs.get(path) != Some(record) {
            return Err(format!("{path} changed though it is not in the restore"));
        }
    }
    let blank = &staging.before[layout::ROOT_BLANK_SUBVOLUME];
    let marker = top.in_subvolume(layout::ROOT_SUBVOLUME, ROOT_MARKER);
    if subs[layout::ROOT_SUBVOLUME].parent_uuid != Some(blank.uuid) || marker.exists() {
        return Err(format!(
            "{} is not a fresh copy of {} after the next boot",
            layout::ROOT_SUBVOLUME,
            layout::ROOT_BLANK_SUBVOLUME
        ));
    }
    let settled = top.subvolumes().map_err(|e| e.to_string())?;
    let again = run_job(parts, top, staging, "restore-data")?;
    if !again.contains("no restore is staged") {
        return Err(format!("a further run found something to do:\n{again}"));
    }
    let after: BTreeMap<String, SubvolumeRecord> = top.subvolumes().map_err(|e| e.to_string())?;
    if after != settled {
        return Err("a further run changed the subvolumes".into());
    }
    let o2 = engine(top).outcome().map_err(|e| e.to_string())?;
    if o2.as_ref() != Some(&o) {
        return Err(format!(
            "a further run changed the outcome: {o} became {o2:?}"
        ));
    }
    Ok(())
}

type CutCheck = fn(&Mounted, &Staging) -> Result<(Seen, Option<Outcome>), String>;
type NextCheck = fn(&Parts, &Mounted, &Staging, u32, &Seen, Option<&Outcome>) -> Result<(), String>;

/// Every subvolume but the root and what its wipe leaves under the root's swap name.
fn lasting(top: &Mounted) -> Result<BTreeMap<String, SubvolumeRecord>, String> {
    let mut all = top.subvolumes().map_err(|e| e.to_string())?;
    all.remove(layout::ROOT_SUBVOLUME);
    all.remove(&format!(
        "{}{}",
        layout::ROOT_SUBVOLUME,
        layout::SWAP_SUFFIX
    ));
    Ok(all)
}

/// Whether the refused request is moved aside, byte for byte as staged.
fn moved_aside(top: &Mounted, staging: &Staging) -> Result<bool, String> {
    let path = top
        .path()
        .join(layout::SNAPSHOTS_SUBVOLUME)
        .join(layout::REFUSED_REQUEST_FILE_NAME);
    match std::fs::read(path) {
        Ok(bytes) if bytes == staging.request_bytes => Ok(true),
        Ok(bytes) => Err(format!(
            "the refused request moved aside is not as staged: {:?}",
            String::from_utf8_lossy(&bytes)
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("reading the refused request: {e}")),
    }
}

/// A crash state of a boot that refuses the request: no subvolume changed, the request staged
/// or moved aside byte for byte (one of the two, never neither), an outcome that is there
/// whole and "refused", and there before the request is moved aside.
fn check_refusal_cut(top: &Mounted, staging: &Staging) -> Result<(Seen, Option<Outcome>), String> {
    if lasting(top)? != staging.before {
        return Err("a subvolume changed (ids and UUIDs compared)".into());
    }
    let mut seen = Seen {
        restored: 0,
        swaps: 0,
        kept: 0,
        outcome: false,
        request: false,
        temps: store_temps(top).len(),
        root_swap: top
            .path()
            .join(format!("{}{}", layout::ROOT_SUBVOLUME, layout::SWAP_SUFFIX))
            .exists(),
        aside: moved_aside(top, staging)?,
        refusal: true,
    };
    match std::fs::read(request_file(top)) {
        Ok(bytes) if bytes == staging.request_bytes => seen.request = true,
        Ok(bytes) => {
            return Err(format!(
                "the request file is not as staged: {:?}",
                String::from_utf8_lossy(&bytes)
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("reading the request: {e}")),
    }
    if seen.request == seen.aside {
        return Err(format!(
            "the request is {}",
            if seen.request {
                "both staged and moved aside"
            } else {
                "neither staged nor moved aside: lost"
            }
        ));
    }
    let outcome = engine(top)
        .outcome()
        .map_err(|e| format!("the outcome is not whole: {e}"))?;
    match &outcome {
        Some(o) if o.result == OutcomeResult::Refused => seen.outcome = true,
        Some(o) => return Err(format!("an outcome that is not a refusal: {o}")),
        None if seen.aside => {
            return Err("the request is moved aside and no outcome says why".into())
        }
        None => {}
    }
    Ok((seen, outcome))
}

/// The next boot on a crash state of a refusal: it finishes the refusal, once, and changes
/// no subvolume.
fn check_refusal_next_boot(
    parts: &Parts,
    top: &Mounted,
    staging: &Staging,
    pid: u32,
    cut_seen: &Seen,
    cut_outcome: Option<&Outcome>,
) -> Result<(), String> {
    let log = restore_data_at_pid(parts, top, staging, pid)?;
    if lasting(top)? != staging.before {
        return Err(format!("a subvolume changed at the next boot:\n{log}"));
    }
    let o = engine(top)
        .outcome()
        .map_err(|e| format!("the outcome is not whole after the next boot: {e}"))?
        .ok_or_else(|| format!("no outcome after the next boot:\n{log}"))?;
    if o.result != OutcomeResult::Refused || o.reason.as_str().is_empty() {
        return Err(format!("the outcome is not a refusal that says why: {o}"));
    }
    if let Some(cut) = cut_outcome {
        // As for a restore: recorded again, the same but for its time, while the request was
        // still staged beside it; as it was once the request was moved aside.
        let same_but_its_time = Outcome {
            finished: o.finished,
            ..cut.clone()
        } == o
            && o.finished >= cut.finished;
        let as_left = if cut_seen.request {
            same_but_its_time
        } else {
            cut == &o
        };
        if !as_left {
            return Err(format!(
                "the outcome the cut left became another: {cut} became {o}"
            ));
        }
    }
    if request_file(top).exists() || !moved_aside(top, staging)? {
        return Err(format!(
            "the refused request was not moved aside intact:\n{log}"
        ));
    }
    let temps = store_temps(top);
    if !temps.is_empty() {
        return Err(format!(
            "temporary files left in the store: {temps:?}\n{log}"
        ));
    }
    run_job(parts, top, staging, "wipe-root")?;
    let settled = top.subvolumes().map_err(|e| e.to_string())?;
    let blank = &staging.before[layout::ROOT_BLANK_SUBVOLUME];
    let root_swap = format!("{}{}", layout::ROOT_SUBVOLUME, layout::SWAP_SUFFIX);
    if settled
        .get(layout::ROOT_SUBVOLUME)
        .and_then(|r| r.parent_uuid)
        != Some(blank.uuid)
        || settled.contains_key(&root_swap)
    {
        return Err("the root is not a fresh copy of the blank one after the next boot".into());
    }
    let again = run_job(parts, top, staging, "restore-data")?;
    if !again.contains("no restore is staged") {
        return Err(format!("a further run found something to do:\n{again}"));
    }
    if top.subvolumes().map_err(|e| e.to_string())? != settled
        || engine(top).outcome().map_err(|e| e.to_string())?.as_ref() != Some(&o)
    {
        return Err("a further run changed the subvolumes or the outcome".into());
    }
    Ok(())
}

/// One crash state's disk, made on the host, to be checked.
struct StateDisk {
    /// Its place in the list of states.
    n: usize,
    state: CrashState,
    image: PathBuf,
}

/// Check one crash state's disk with the next boot's `restore-data` at `pid`; when the cut
/// left a temporary file in the store, again on a copy of the disk at `other_pid` (a pid
/// names only the temporary files of a run, so elsewhere the pid changes nothing). What the
/// state held.
fn check_state(
    parts: &Parts,
    disk: &StateDisk,
    staging: &Staging,
    pid: u32,
    other_pid: u32,
) -> Result<Seen, String> {
    let copy = disk.image.with_extension("other-pid.img");
    boot_tier::image::copy_disk(&disk.image, &copy).map_err(|e| e.to_string())?;
    let check = |image: &PathBuf, pid: u32| -> Result<Seen, String> {
        let top = Mounted::top(image).map_err(|e| format!("the disk does not mount: {e}"))?;
        let (cut, next): (CutCheck, NextCheck) = if staging.refused {
            (check_refusal_cut, check_refusal_next_boot)
        } else {
            (check_cut, check_next_boot)
        };
        let result = cut(&top, staging).and_then(|(seen, cut)| {
            next(parts, &top, staging, pid, &seen, cut.as_ref())
                .map(|()| seen)
                .map_err(|e| format!("the next boot's restore-data at pid {pid}: {e}"))
        });
        top.unmount().map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(image);
        result
    };
    let seen = check(&disk.image, pid);
    let seen = match seen {
        Ok(seen) if seen.temps > 0 => check(&copy, other_pid).map(|_| seen),
        other => other,
    };
    let _ = std::fs::remove_file(&copy);
    seen
}

/// How many crash states are checked at once: one per core, where the host's kernel mounts
/// two copies of one filesystem at once (Linux 6.7 and later give the second a temporary
/// fsid); one at a time on an older kernel, which refuses the second mount.
fn checkers() -> usize {
    let release = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    if version >= (6, 7) {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    } else {
        1
    }
}

/// At most this many writes between two flushes are tried in every subset (2^8 disks);
/// past it, the prefixes, each with one write left out, and each alone (`boot_tier::write_log::crash_states`).
const MAX_SUBSET_WRITES: usize = 8;

/// Replay every crash state of the log of a boot that honoured the restore of
/// `mount_points` (`boot_tier::write_log::crash_states`) and check each.
/// One case of the replay: what the logged boot does.
struct Case {
    name: &'static str,
    /// The members of the restore, by mount point.
    mount_points: &'static [&'static str],
    /// The hard floor the boots are given.
    hard_floor: u64,
    /// The request is one the boot refuses.
    refused: bool,
    /// The log goes on through the wipe of the root (the boot's next unit); else it ends at
    /// `restore-data`'s last step. The wipe is the same code whatever the restore did, so the
    /// cases that differ only in the restore leave it out (about half their states).
    through_wipe: bool,
}

fn replay_every_write(parts: &'static Parts, case: &Case) {
    let Case {
        name,
        mount_points,
        hard_floor,
        refused,
        through_wipe,
    } = *case;
    let started = Instant::now();
    println!("=== {name}: {}", mount_points.join(", "));
    let m = Machine::new(parts, name).unwrap_or_else(|e| panic!("making a machine: {e}"));
    let mut keep = KeepOnPanic(Some(m));
    let m = keep.0.as_mut().expect("machine");
    let top = m
        .disk_top()
        .unwrap_or_else(|e| panic!("mounting the disk: {e}"));
    let staging = prepare(&top, mount_points, hard_floor, refused);
    top.unmount().unwrap_or_else(|e| panic!("unmounting: {e}"));
    println!("    staged: {}", staging.request);
    let base = m.dir().join("base.img");
    boot_tier::image::copy_disk(&m.disk, &base).unwrap_or_else(|e| panic!("{e}"));
    let log_path = m.dir().join("writes.log");

    // The logged boot: the restore, then (through_wipe) the wipe of the root, the same boot's
    // next unit; cut right after the last step of the last. What the boot writes after that
    // (the root mounted, the guest's own writes) is no tacid's, and is left out.
    let last = if refused {
        StepAt::first(Step::RefuseCommit)
    } else {
        StepAt::new(Step::RestoreCommitDelete, mount_points.len() as u32)
    };
    let end = if through_wipe {
        StepAt::first(Step::WipeCommitDelete)
    } else {
        last
    };
    let boot = m
        .boot(&BootOptions {
            pause_after: Some(end),
            write_log: Some(log_path.clone()),
            // Last on the command line, so it wins over the test machines' own.
            extra_cmdline: vec![format!(
                "{}={hard_floor}",
                layout::names::KERNEL_HARD_FLOOR_KEY
            )],
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("the logged boot: {e}"));
    let done_last = format!("tacid-initrd: done step {last} (");
    assert!(
        matches!(boot.ending, Ending::PowerCut { at, .. } if at == end)
            && boot.console.contains(&done_last),
        "the logged boot did not do the restore to its step {last} and stop after step {end} \
         ({:?}):\n{}",
        boot.ending,
        boot.console_tail(60)
    );
    let pid: u32 = boot
        .console
        .split("tacid-initrd: restore-data: starting (pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no pid of restore-data on the console:\n{}",
                boot.console_tail(60)
            )
        });
    let log = WriteLog::open(&log_path).unwrap_or_else(|e| panic!("{e}"));
    let flushes = log.flushes().count();
    let writes = log.entries.iter().filter(|e| e.changes_disk()).count();
    println!(
        "    logged boot took {:.1} s; restore-data ran as pid {pid}; the log holds {} entries \
         ({writes} writes or discards, {flushes} flushes; {} counted by its super block{})",
        boot.took.as_secs_f64(),
        log.entries.len(),
        log.counted,
        if log.torn_tail {
            ", a torn last entry left out"
        } else {
            ""
        }
    );
    assert!(
        flushes >= 2 * mount_points.len(),
        "a restore's commits flush the disk; the log holds {flushes} flushes"
    );

    // The states: the durable part replayed incrementally on one image; each state a copy of
    // it with its writes since the last flush, handed to the checkers (one per core).
    let states = log.crash_states(MAX_SUBSET_WRITES);
    let prefixes = states.iter().filter(|s| s.prefix.is_some()).count();
    // The next boot's run at the pid the logged run had (a temporary file the cut left is at
    // the very name it takes first) and, where the cut left one, at another.
    let other_pid = pid + 1;
    let replay_started = Instant::now();
    let total = states.len();
    let (tx, rx) = mpsc::sync_channel::<StateDisk>(2);
    let rx = Mutex::new(rx);
    let failures = Mutex::new(Vec::<String>::new());
    let seen = Mutex::new(BTreeMap::<Seen, Vec<usize>>::new());
    let workers = checkers();
    let dir = m.dir().to_owned();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                let Ok(disk) = next else { break };
                match check_state(parts, &disk, &staging, pid, other_pid) {
                    Ok(kind) => seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(kind)
                        .or_default()
                        .push(disk.n),
                    Err(e) => failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("state {} ({}): {e}", disk.n, disk.state)),
                }
            });
        }
        let replay = dir.join("replay.img");
        boot_tier::image::copy_disk(&base, &replay).unwrap_or_else(|e| panic!("{e}"));
        let image = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&replay)
            .unwrap_or_else(|e| panic!("opening {}: {e}", replay.display()));
        let mut durable = 0;
        for (n, state) in states.into_iter().enumerate() {
            log.replay(durable..state.flushed, &image)
                .unwrap_or_else(|e| panic!("replaying: {e}"));
            durable = state.flushed;
            let path = dir.join(format!("state-{n}.img"));
            boot_tier::image::copy_disk(&replay, &path).unwrap_or_else(|e| panic!("{e}"));
            let copy = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
            log.replay_only(state.kept.iter().copied(), &copy)
                .unwrap_or_else(|e| panic!("replaying: {e}"));
            drop(copy);
            let disk = StateDisk {
                n,
                state,
                image: path,
            };
            if tx.send(disk).is_err() {
                break;
            }
        }
        drop(tx);
    });
    let seen = seen.into_inner().unwrap_or_else(|e| e.into_inner());
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    let took = replay_started.elapsed().as_secs_f64();
    println!(
        "    {total} crash states ({prefixes} of them prefixes of the log, every prefix among \
         them; {} other subsets of the writes since a flush), each with the next boot at pid \
         {pid} (and at pid {other_pid} where the cut left a temporary file): checked in \
         {took:.1} s ({:.2} s a state); {} failed. What the states held:",
        total - prefixes,
        took / total as f64,
        failures.len()
    );
    for (kind, at) in &seen {
        println!(
            "      {:>5} states: {kind} (states {}..={})",
            at.len(),
            at.iter().min().unwrap_or(&0),
            at.iter().max().unwrap_or(&0)
        );
    }
    println!(
        "    {name}: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {total} crash states did not converge (the first ten):\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    // The replay reached every stage of the restore, the new ones among them: a log that
    // missed them would prove nothing about them.
    let n = mount_points.len();
    type Holds = Box<dyn Fn(&Seen) -> bool>;
    let mut stages: Vec<(&str, Holds)> = if refused {
        vec![
            (
                "nothing done yet",
                Box::new(|s: &Seen| s.request && !s.outcome && s.temps == 0),
            ),
            (
                "the outcome's temporary file, no outcome yet",
                Box::new(|s: &Seen| s.temps > 0 && !s.outcome),
            ),
            (
                "the outcome written, the request still staged",
                Box::new(|s: &Seen| s.outcome && s.request),
            ),
            (
                "the request moved aside",
                Box::new(|s: &Seen| s.outcome && s.aside),
            ),
            (
                "in the middle of the wipe",
                Box::new(|s: &Seen| s.outcome && s.root_swap),
            ),
        ]
    } else {
        vec![
            (
                "nothing done yet",
                Box::new(|s: &Seen| s.restored == 0 && s.request && !s.outcome),
            ),
            (
                "exchanged, nothing kept yet",
                Box::new(move |s: &Seen| s.restored == n && s.kept == 0 && !s.outcome),
            ),
            (
                "the outcome's temporary file, no outcome yet",
                Box::new(|s: &Seen| s.temps > 0 && !s.outcome),
            ),
            (
                "the outcome written, the request still staged",
                Box::new(|s: &Seen| s.outcome && s.request),
            ),
            (
                "the request gone, a replaced subvolume not yet deleted",
                Box::new(|s: &Seen| s.outcome && !s.request && s.swaps > 0),
            ),
            (
                "all done",
                Box::new(|s: &Seen| s.outcome && !s.request && s.swaps == 0),
            ),
            (
                "in the middle of the wipe",
                Box::new(|s: &Seen| s.outcome && s.root_swap),
            ),
        ]
    };
    if !through_wipe {
        stages.retain(|(what, _)| *what != "in the middle of the wipe");
    }
    if staging.keeps && !refused {
        stages.push((
            "one member kept, no outcome yet",
            Box::new(|s: &Seen| s.kept == 1 && !s.outcome),
        ));
        stages.push((
            "every member kept, no outcome yet",
            Box::new(move |s: &Seen| s.kept == n && !s.outcome),
        ));
    }
    for (what, holds) in &stages {
        assert!(
            seen.keys().any(holds),
            "no crash state was {what}; the states held: {:?}",
            seen.keys().map(|s| s.to_string()).collect::<Vec<_>>()
        );
    }
}

/// Keep a failed machine's directory (disk, log, consoles) for a look; say where.
struct KeepOnPanic(Option<Machine>);

impl Drop for KeepOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("BOOT_TIER_KEEP").is_some() {
            if let Some(m) = self.0.take() {
                eprintln!(
                    "the machine's disks, write log and consoles are kept in {}",
                    m.keep().display()
                );
            }
        }
    }
}

/// A restore of /home alone, cut at every write of its boot (the keep and commit steps of
/// adr/0027 among them); the next boot finishes it exactly once.
#[test]
fn boot_replay_a_power_cut_at_every_write_of_a_restore_converges_exactly_once() {
    let Some(parts) = parts("boot tier: a power cut at every write") else {
        return;
    };
    replay_every_write(
        parts,
        &Case {
            name: "replay-home",
            mount_points: &["/home"],
            hard_floor: HARD_FLOOR_BYTES,
            refused: false,
            through_wipe: true,
        },
    );
}

/// A set restore of every restorable subvolume (/persist, /var/log, /home), as after a switch
/// gone wrong, cut at every write of its boot: every member's copy, exchange, keep and commit
/// repeat, and a state must never hold some members put back and others not, once the next
/// boot is done.
#[test]
fn boot_replay_a_power_cut_at_every_write_of_a_set_restore_converges_exactly_once() {
    let Some(parts) = parts("boot tier: a power cut at every write of a set") else {
        return;
    };
    replay_every_write(
        parts,
        &Case {
            name: "replay-set",
            mount_points: &["/persist", "/var/log", "/home"],
            hard_floor: HARD_FLOOR_BYTES,
            refused: false,
            through_wipe: true,
        },
    );
}

/// Below the hard floor what a restore replaces is deleted, not kept (adr/0027): a restore of
/// /home on a boot told that its disk is below the floor, cut at every write; no state keeps
/// anything, and the outcome says nothing was kept.
#[test]
fn boot_replay_a_power_cut_at_every_write_below_the_hard_floor_keeps_nothing_and_converges() {
    let Some(parts) = parts("boot tier: a power cut at every write, below the hard floor") else {
        return;
    };
    replay_every_write(
        parts,
        &Case {
            name: "replay-below-floor",
            mount_points: &["/home"],
            hard_floor: BELOW_ANY_TEST_DISK,
            refused: false,
            through_wipe: false,
        },
    );
}

/// A hard floor far above the test disk's size (1 GiB): every boot is below it.
const BELOW_ANY_TEST_DISK: u64 = 1 << 50;

/// A refused request (its member's UUID not its snapshot's), cut at every write of its boot:
/// no subvolume ever changes, the request is staged or moved aside whole, never lost, and the
/// outcome says "refused" before the request is moved aside; the next boot finishes the
/// refusal once.
#[test]
fn boot_replay_a_power_cut_at_every_write_of_a_refusal_changes_nothing_and_converges() {
    let Some(parts) = parts("boot tier: a power cut at every write of a refusal") else {
        return;
    };
    replay_every_write(
        parts,
        &Case {
            name: "replay-refusal",
            mount_points: &["/home"],
            hard_floor: HARD_FLOOR_BYTES,
            refused: true,
            through_wipe: false,
        },
    );
}
