//! Space accounting without quotas, held against quotas (adr/0029): a loop Btrfs with quotas
//! on, snapshots of `@home` after heavy, no and light churn, reflinks within a subvolume and
//! across subvolumes, compressed and preallocated files; after `btrfs quota rescan -w`,
//! every subvolume's qgroup must equal what `Top::space` says of its data plus the tree
//! blocks `dump-tree` finds in its tree alone (referenced and exclusive alike).

use std::fs;
use std::io::{Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use btrfs::{RootSpace, Top};
use layout::SNAPSHOTS_SUBVOLUME as SNAPSHOTS;
use testbed::LoopFs;

/// Bytes that do not compress, from a seed.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Bytes that compress well (zstd: to a few percent).
fn text(seed: u64, len: usize) -> Vec<u8> {
    let line = format!("line {seed} of a log that repeats itself over and over\n");
    line.bytes().cycle().take(len).collect()
}

fn write(path: &Path, data: &[u8]) {
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn tool(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn reflink(from: &Path, to: &Path) {
    tool(
        "cp",
        &[
            "--reflink=always",
            from.to_str().expect("utf-8"),
            to.to_str().expect("utf-8"),
        ],
    );
}

#[test]
fn loop_space_equals_quotas_over_churn_reflinks_and_compression() {
    let Some(fs) = LoopFs::with_layout(1 << 30).expect("make a loop-device Btrfs") else {
        return;
    };
    fs.enable_quotas().expect("btrfs quota enable");
    let top = Top::open(fs.top()).expect("open the top level");
    let home = top.dir().open_dir("@home").expect("@home");
    let store = top.dir().open_dir(SNAPSHOTS).expect("@snapshots");
    let h = fs.top().join("@home");
    let persist = fs.top().join("@persist");

    // The first state: 40 files of incompressible data (48 KiB to ~1 MiB, sizes not
    // multiples of a tree block), a directory of compressed text, a preallocated file,
    // small files stored inline.
    fs::create_dir(h.join("data")).expect("mkdir");
    for i in 0..40u64 {
        let len = 48 * 1024 + (i as usize * 24_580) % (1 << 20);
        write(&h.join(format!("data/f{i}")), &noise(i, len));
    }
    fs::create_dir(h.join("logs")).expect("mkdir");
    tool(
        "btrfs",
        &[
            "property",
            "set",
            h.join("logs").to_str().expect("utf-8"),
            "compression",
            "zstd",
        ],
    );
    for i in 0..8u64 {
        write(&h.join(format!("logs/l{i}")), &text(i, 600 * 1024));
    }
    let vm = fs::File::create(h.join("vm.img")).expect("create");
    rustix::fs::fallocate(&vm, rustix::fs::FallocateFlags::empty(), 0, 3 << 20).expect("fallocate");
    vm.write_all_at(&noise(99, 256 * 1024), 1 << 20)
        .expect("write into the preallocated file");
    drop(vm);
    for i in 0..30u64 {
        write(&h.join(format!("small{i}")), &noise(1000 + i, 700));
    }
    top.dir().commit().expect("commit");
    let s1 = home.snapshot_to(&store, "s1", true).expect("s1");

    // Heavy churn: a third of the files rewritten, a few removed, some new, one written
    // into the middle of (the old extent stays whole in both), compressed logs appended.
    for i in (0..40u64).step_by(3) {
        write(
            &h.join(format!("data/f{i}")),
            &noise(i + 500, 200 * 1024 + 4096),
        );
    }
    for i in [1u64, 4, 7] {
        fs::remove_file(h.join(format!("data/f{i}"))).expect("remove");
    }
    for i in 0..10u64 {
        write(&h.join(format!("data/new{i}")), &noise(i + 700, 100 * 1024));
    }
    let f2 = fs::OpenOptions::new()
        .write(true)
        .open(h.join("data/f2"))
        .expect("open f2");
    f2.write_all_at(&noise(5, 12 * 1024), 16 * 1024)
        .expect("write into f2");
    drop(f2);
    for i in 0..4u64 {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(h.join(format!("logs/l{i}")))
            .expect("open log");
        f.write_all(&text(i + 50, 300 * 1024)).expect("append");
    }
    top.dir().commit().expect("commit");
    let s2 = home.snapshot_to(&store, "s2", true).expect("s2");

    // No churn at all.
    let s3 = home.snapshot_to(&store, "s3", true).expect("s3");

    // Light churn: one file rewritten, a reflink inside @home (one extent, two files), a
    // reflink of a snapshot's file into @persist (shared across subvolumes), and one file
    // that only this snapshot and the live subvolume will ever hold, removed afterwards.
    write(&h.join("data/f5"), &noise(5005, 64 * 1024 + 4096));
    reflink(&h.join("data/f8"), &h.join("data/f8.copy"));
    reflink(
        &fs.top().join(SNAPSHOTS).join("s1/data/f1"),
        &persist.join("f1.kept"),
    );
    write(&h.join("data/brief"), &noise(4242, 333 * 1024));
    top.dir().commit().expect("commit");
    let s4 = home.snapshot_to(&store, "s4", true).expect("s4");
    fs::remove_file(h.join("data/brief")).expect("remove");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(h.join("data/f10"))
        .expect("open");
    f.seek(SeekFrom::Start(0)).expect("seek");
    f.write_all(&noise(10_010, 40 * 1024)).expect("overwrite");
    drop(f);
    top.dir().commit().expect("commit");

    // Every subvolume on the filesystem, so that exclusive means the same as for quotas.
    let live: Vec<(String, u64)> = top
        .dir()
        .list_subvolumes()
        .expect("list the top")
        .into_iter()
        .map(|e| (e.name.to_string_lossy().into_owned(), e.info.id))
        .collect();
    let home_id = home.subvolume_info().expect("info").id;
    let mut groups = vec![vec![s1.id, s2.id, s3.id, s4.id, home_id], vec![5]];
    groups.extend(
        live.iter()
            .filter(|(_, id)| *id != home_id)
            .map(|(_, id)| vec![*id]),
    );
    let started = Instant::now();
    let space = top
        .space(&groups, Instant::now() + Duration::from_secs(60))
        .expect("measure space");
    let took = started.elapsed();
    assert!(space.complete);
    let of = |id: u64| -> RootSpace {
        *space
            .roots
            .iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("no answer for {id}"))
    };

    // The snapshots together, in one level-1 qgroup: its exclusive is what they alone hold.
    let snapshots = [s1.id, s2.id, s3.id, s4.id];
    fs.qgroup_of(1, &snapshots).expect("qgroup 1/1");
    let rescan = fs.quota_rescan().expect("btrfs quota rescan -w");
    let qgroups = fs.qgroups().expect("btrfs qgroup show");
    let together = fs.qgroups_level1().expect("btrfs qgroup show")[&1];
    let ids: Vec<u64> = groups.iter().flatten().copied().collect();
    let (blocks, blocks_within) = fs.tree_blocks_of(&ids, &snapshots).expect("dump-tree");
    let node = fs.nodesize().expect("nodesize");
    eprintln!(
        "space of {} subvolumes in {:.2} ms ({} extent items); quota rescan {:.1} ms",
        ids.len(),
        took.as_secs_f64() * 1e3,
        space.items_seen,
        rescan.as_secs_f64() * 1e3
    );
    let name = |id: u64| -> String {
        [(s1.id, "s1"), (s2.id, "s2"), (s3.id, "s3"), (s4.id, "s4")]
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, n)| n.to_string())
            .or_else(|| live.iter().find(|(_, i)| *i == id).map(|(n, _)| n.clone()))
            .unwrap_or_else(|| id.to_string())
    };
    let mut wrong = Vec::new();
    for id in &ids {
        let ours = of(*id);
        let q = qgroups
            .get(id)
            .unwrap_or_else(|| panic!("no qgroup 0/{id}: {qgroups:?}"));
        let (tree, only) = blocks[id];
        eprintln!(
            "{:>10}: data referenced {:>9} exclusive {:>9} new {:>9?} inline {:>6} | \
             qgroup rfer {:>9} excl {:>9} | tree blocks {tree} ({only} alone)",
            name(*id),
            ours.referenced,
            ours.exclusive,
            ours.new_since_previous,
            ours.inline,
            q.referenced,
            q.exclusive
        );
        if ours.referenced + tree * node != q.referenced
            || ours.exclusive + only * node != q.exclusive
        {
            wrong.push(name(*id));
        }
    }
    assert!(
        wrong.is_empty(),
        "data + tree blocks differ from the qgroups for {wrong:?} (table above)"
    );
    eprintln!(
        "snapshots alone: data {} + {blocks_within} tree blocks; qgroup 1/1 excl {}",
        space.history_only, together.exclusive
    );
    assert_eq!(
        space.history_only + blocks_within * node,
        together.exclusive,
        "what the snapshots alone hold, against their level-1 qgroup"
    );

    // What a person reads off it, by the story: the heavy churn left s1 holding the old
    // data alone; s2 and s3 hold the same data, so neither frees any by itself; s4 holds
    // the file removed after it; the compressed logs count at their size on disk.
    let s1s = of(s1.id);
    assert!(
        s1s.exclusive > 4 << 20,
        "s1 holds the rewritten files: {s1s:?}"
    );
    assert_eq!(of(s2.id).exclusive, 0, "s3 holds all that s2 holds");
    assert_eq!(of(s3.id).exclusive, 0, "s2 holds all that s3 holds");
    assert_eq!(of(s2.id).referenced, of(s3.id).referenced);
    assert_eq!(of(s3.id).new_since_previous, Some(0), "nothing changed");
    // The file removed after s4, rounded up to whole blocks. f10's overwritten start is
    // not s4's alone: the rest of f10 keeps its old extent whole in @home.
    assert_eq!(of(s4.id).exclusive, (333 * 1024u64).div_ceil(4096) * 4096);
    assert_eq!(of(home_id).exclusive, 40 * 1024, "f10's new start");
    assert!(of(s2.id).new_since_previous.expect("s2 has a previous") > 2 << 20);
    assert!(of(home_id).inline > 30 * 700 / 2, "small files are inline");
    let total: u64 = space.total;
    assert!(total >= s1s.referenced && total > 0);
    let alone: u64 = snapshots.iter().map(|id| of(*id).exclusive).sum();
    assert!(
        space.history_only > alone,
        "f5's old extent is s2–s4's together"
    );
}

/// The cache answers as a fresh walk does, and walks only what changed: nothing when nothing
/// did; the new snapshot and the live subvolume after a day; nothing after a snapshot in the
/// middle is deleted (the one after it is replayed from the deleted one's difference).
#[test]
fn loop_space_cache_walks_only_what_changed_and_answers_the_same() {
    let Some(fs) = LoopFs::with_layout(512 << 20).expect("make a loop-device Btrfs") else {
        return;
    };
    let top = Top::open(fs.top()).expect("open the top level");
    let home = top.dir().open_dir("@home").expect("@home");
    let store = top.dir().open_dir(SNAPSHOTS).expect("@snapshots");
    let h = fs.top().join("@home");
    let home_id = home.subvolume_info().expect("info").id;
    let mut snaps = Vec::new();
    for day in 0..6u64 {
        for i in 0..20u64 {
            if (i + day).is_multiple_of(3) || day == 0 {
                write(&h.join(format!("f{i}")), &noise(day * 100 + i, 20_000));
            }
        }
        if day == 2 {
            fs::remove_file(h.join("f1")).expect("remove");
        }
        top.dir().commit().expect("commit");
        snaps.push(
            home.snapshot_to(&store, format!("day{day}"), true)
                .expect("snapshot")
                .id,
        );
    }
    let far = || Instant::now() + Duration::from_secs(60);
    let groups = |snaps: &[u64]| {
        let mut g = snaps.to_vec();
        g.push(home_id);
        vec![g]
    };
    let mut cache = btrfs::space::SpaceCache::new();
    // Out of time before anything is walked: said so, nothing kept.
    let late = top
        .space_cached(&groups(&snaps), Instant::now(), &mut cache)
        .expect("late");
    assert!(!late.complete);
    assert_eq!(late.walked, 0);
    // What one question walked is kept for the next: the first three days, then all.
    let part = top
        .space_cached(&[snaps[..3].to_vec()], far(), &mut cache)
        .expect("part");
    assert_eq!((part.walked, part.complete), (3, true));
    let first = top
        .space_cached(&groups(&snaps), far(), &mut cache)
        .expect("first");
    assert_eq!(first.walked, 4, "the other three days and @home");
    let fresh = top.space(&groups(&snaps), far()).expect("fresh");
    assert_eq!(first.roots, fresh.roots);
    let again = top
        .space_cached(&groups(&snaps), far(), &mut cache)
        .expect("again");
    assert_eq!(again.walked, 0, "nothing changed, nothing walked");
    assert_eq!(again.roots, first.roots);
    assert_eq!(again.total, first.total);

    // A day: the live subvolume changes, a snapshot is taken.
    write(&h.join("f7"), &noise(7777, 30_000));
    top.dir().commit().expect("commit");
    snaps.push(home.snapshot_to(&store, "day6", true).expect("snapshot").id);
    write(&h.join("f8"), &noise(8888, 30_000));
    top.dir().commit().expect("commit");
    let cached = top
        .space_cached(&groups(&snaps), far(), &mut cache)
        .expect("cached");
    assert_eq!(cached.walked, 2, "the new snapshot and @home");
    let fresh = top.space(&groups(&snaps), far()).expect("fresh");
    assert_eq!(cached.roots, fresh.roots);
    assert_eq!(cached.total, fresh.total);

    // Retention deletes day2 (and the cleaner frees it); day3 was kept as its difference
    // from day2.
    let gone = snaps.remove(2);
    top.dir().delete_subvolume_by_id(gone).expect("delete");
    top.dir().commit().expect("commit");
    tool(
        "btrfs",
        &["subvolume", "sync", fs.top().to_str().expect("utf-8")],
    );
    let cached = top
        .space_cached(&groups(&snaps), far(), &mut cache)
        .expect("cached after a deletion");
    assert_eq!(cached.walked, 0);
    let fresh = top.space(&groups(&snaps), far()).expect("fresh");
    assert_eq!(cached.roots, fresh.roots);
    assert!(
        fresh.roots.iter().any(|r| r.exclusive > 0),
        "{:?}",
        fresh.roots
    );
    let e = top
        .space_cached(&groups(&[gone]), far(), &mut cache)
        .expect_err("a deleted subvolume");
    assert_eq!(e.kind, btrfs::ErrorKind::NotFound);
}
