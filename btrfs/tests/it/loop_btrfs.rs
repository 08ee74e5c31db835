//! The `loop_` tier of the btrfs crate: every operation on a real loop-device Btrfs laid
//! out from the layout crate, checked against `btrfs subvolume show/list` as an oracle.
//! Needs root and loop devices; skips loudly without them, fails under `CI=true`.

use std::os::unix::fs::{symlink, PermissionsExt as _};
use std::time::{Duration, Instant, SystemTime};

use btrfs::{ErrorKind, FileKind, Top};
use layout::SNAPSHOTS_SUBVOLUME as SNAPSHOTS;
use testbed::LoopFs;

const SIZE: u64 = 512 << 20;

fn laid_out() -> Option<LoopFs> {
    LoopFs::with_layout(SIZE).expect("make a loop-device Btrfs")
}

/// `btrfs subvolume show`'s view of `path`, the fields compared here.
fn oracle(fs: &LoopFs, path: &str) -> (String, String, u64, u64, u64, bool) {
    let show = fs.show(path).expect("btrfs subvolume show");
    let get = |k: &str| {
        show.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("no {k:?} in {show:?}"))
    };
    let num = |k: &str| {
        get(k)
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("{k:?} not a number in {show:?}"))
    };
    (
        get("UUID"),
        get("Parent UUID"),
        num("Subvolume ID"),
        num("Generation"),
        num("Gen at creation"),
        get("Flags") == "readonly",
    )
}

fn near_now(t: SystemTime) -> bool {
    let now = SystemTime::now();
    let diff = now.duration_since(t).unwrap_or_else(|e| e.duration());
    diff < Duration::from_secs(30)
}

#[test]
fn loop_top_is_checked() {
    let Some(fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open the top level");
    assert_eq!(top.dir().subvolume_id().expect("id"), 5);

    let e = Top::open(&fs.top().join("@home")).expect_err("a subvolume is not the top");
    assert_eq!(e.kind, ErrorKind::NotTopLevel);
    std::fs::create_dir(fs.top().join("plain")).expect("mkdir");
    let e = Top::open(&fs.top().join("plain")).expect_err("a directory in the top is not the top");
    assert_eq!(e.kind, ErrorKind::NotTopLevel);
    let e = Top::open(fs.scratch()).expect_err("not Btrfs");
    assert_eq!(e.kind, ErrorKind::NotTopLevel);
    let e = Top::open(&fs.top().join("missing")).expect_err("missing");
    assert_eq!(e.kind, ErrorKind::NotFound);
}

#[test]
fn loop_snapshots_readonly_and_writable_match_the_oracle() {
    let Some(fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let home = top.dir().open_dir("@home").expect("open @home");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open @snapshots");
    std::fs::write(fs.top().join("@home/file"), b"tuesday").expect("write");
    let source = home.subvolume_info().expect("info of @home");
    assert_eq!(
        source.parent_uuid, None,
        "a subvolume made empty has no parent uuid"
    );

    let ro = home
        .snapshot_to(&store, "ro", true)
        .expect("read-only snapshot");
    let rw = home
        .snapshot_to(&store, "rw", false)
        .expect("writable snapshot");

    for (info, path, readonly) in [(&ro, "@snapshots/ro", true), (&rw, "@snapshots/rw", false)] {
        assert_eq!(info.readonly, readonly);
        assert_eq!(info.parent_uuid, Some(source.uuid));
        assert_eq!(info.parent_id, store.subvolume_id().expect("store id"));
        assert_eq!(info.dir_id, 256);
        assert!(
            info.created.is_some_and(near_now),
            "created {:?} is not about now",
            info.created
        );
        let (uuid, parent_uuid, id, generation, created_generation, oracle_ro) = oracle(&fs, path);
        assert_eq!(info.uuid.to_string(), uuid);
        assert_eq!(parent_uuid, source.uuid.to_string());
        assert_eq!(info.id, id);
        assert_eq!(info.created_generation, created_generation);
        assert_eq!(info.generation, generation);
        assert_eq!(oracle_ro, readonly);
        assert_eq!(
            std::fs::read(fs.top().join(path).join("file")).expect("read"),
            b"tuesday"
        );
        // The same through the tree search, by id.
        assert_eq!(&top.subvolume_info_by_id(info.id).expect("by id"), info);
    }
    assert_ne!(ro.uuid, rw.uuid);
    let e = std::fs::write(fs.top().join("@snapshots/ro/new"), b"x").expect_err("read-only");
    assert_eq!(e.raw_os_error(), Some(30), "EROFS");
    std::fs::write(fs.top().join("@snapshots/rw/new"), b"x").expect("writable");

    let e = home
        .snapshot_to(&store, "ro", true)
        .expect_err("name taken");
    assert_eq!(e.kind, ErrorKind::AlreadyExists);
}

#[test]
fn loop_snapshot_of_a_plain_directory_or_bad_name_is_refused_and_makes_nothing() {
    let Some(fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let home = top.dir().open_dir("@home").expect("open @home");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open @snapshots");
    assert!(home.create_dir("plain", 0o755).expect("mkdir"));
    let plain = home.open_dir("plain").expect("open plain");
    assert!(!plain.is_subvolume_root().expect("check"));
    let before = fs.subvolumes_snapshot().expect("oracle");

    let e = plain
        .snapshot_to(&store, "x", true)
        .expect_err("not a subvolume");
    assert_eq!(e.kind, ErrorKind::NotASubvolume);
    let long = "n".repeat(300);
    for name in ["", ".", "..", "a/b", "../escape", "nul\0", long.as_str()] {
        let e = home.snapshot_to(&store, name, true).expect_err(name);
        assert_eq!(e.kind, ErrorKind::InvalidName, "{name:?}");
    }
    assert_eq!(
        fs.subvolumes_snapshot().expect("oracle"),
        before,
        "nothing was made"
    );
}

#[test]
fn loop_lists_a_thousand_children_completely_and_fast() {
    let Some(fs) = LoopFs::with_layout(1 << 30).expect("make a loop-device Btrfs") else {
        return;
    };
    let top = Top::open(fs.top()).expect("open");
    let home = top.dir().open_dir("@home").expect("open @home");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open @snapshots");
    // Interleave other subvolumes' ids with the store's children, so the list must skip
    // items that are not its own.
    let nested_parent = top.dir().open_dir("@persist").expect("open @persist");
    let mut made = Vec::new();
    for i in 0..1000 {
        // Long names on some, so the ROOT_REF pass alone spans several 64 KiB batches.
        let name = if i % 2 == 0 {
            format!("snap-{i:04}")
        } else {
            format!("snap-{i:04}-{}", "x".repeat(100))
        };
        let info = if i % 10 == 0 {
            home.snapshot_to(&store, &name, true).expect("snapshot")
        } else {
            store.create_subvolume(&name).expect("create subvolume") // no commit each: faster
        };
        made.push((name, info.id));
        if i % 100 == 0 {
            nested_parent
                .create_subvolume(format!("other-{i}"))
                .expect("other");
        }
    }
    // One in a nested directory: listed, with its directory's inode as dir_id.
    assert!(store.create_dir("deeper", 0o700).expect("mkdir"));
    let deeper = store.open_dir("deeper").expect("open deeper");
    let nested = deeper.create_subvolume("nested").expect("nested");
    // One deleted: not listed.
    let gone = store.create_subvolume("gone").expect("gone");
    store.delete_subvolume_by_id(gone.id).expect("delete");

    let started = Instant::now();
    let list = store.list_subvolumes().expect("list");
    let took = started.elapsed();
    let mut again = Vec::new();
    let mut best = took;
    for _ in 0..5 {
        let t = Instant::now();
        again = store.list_subvolumes().expect("list");
        best = best.min(t.elapsed());
    }
    eprintln!("list_subvolumes of 1001 children: first {took:?}, best of 5 {best:?}");
    assert_eq!(list, again);
    assert!(
        best < Duration::from_millis(100),
        "listing 1001 children took {best:?}"
    );

    assert_eq!(list.len(), 1001, "1000 flat children and one nested");
    let store_id = store.subvolume_id().expect("id");
    let mut flat: Vec<(String, u64)> = list
        .iter()
        .filter(|e| e.info.dir_id == 256)
        .map(|e| {
            (
                e.name.clone().into_string().expect("UTF-8 names"),
                e.info.id,
            )
        })
        .collect();
    flat.sort();
    assert_eq!(flat, made);
    let nested_entry = list
        .iter()
        .find(|e| e.name == "nested")
        .expect("nested listed");
    assert_eq!(nested_entry.info.id, nested.id);
    assert_eq!(nested_entry.info.dir_id, deeper.stat().expect("stat").ino);
    assert!(list.iter().all(|e| e.info.parent_id == store_id));

    // Against the oracle: every subvolume under @snapshots, same ids and uuids.
    let mut from_list: Vec<(u64, String)> = list
        .iter()
        .map(|e| (e.info.id, e.info.uuid.to_string()))
        .collect();
    from_list.sort();
    let prefix = format!("{SNAPSHOTS}/");
    let mut from_oracle: Vec<(u64, String)> = fs
        .subvolumes_snapshot()
        .expect("oracle")
        .into_iter()
        .filter(|(path, _, _)| path.starts_with(&prefix))
        .map(|(_, id, uuid)| (id, uuid))
        .collect();
    from_oracle.sort();
    assert_eq!(from_list, from_oracle);
    // Readonly and parent uuid as made.
    let snap0 = list
        .iter()
        .find(|e| e.name == "snap-0000")
        .expect("snap-0000");
    assert!(snap0.info.readonly);
    assert_eq!(
        snap0.info.parent_uuid,
        Some(home.subvolume_info().expect("info").uuid)
    );
    assert_eq!(
        snap0.info,
        store
            .open_dir("snap-0000")
            .expect("open")
            .subvolume_info()
            .expect("info")
    );
    let snap2 = list
        .iter()
        .find(|e| e.name == "snap-0002")
        .expect("snap-0002");
    assert!(!snap2.info.readonly);
    assert_eq!(snap2.info.parent_uuid, None);
}

#[test]
fn loop_empty_store_lists_nothing_and_a_plain_directory_is_refused() {
    let Some(fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open");
    assert_eq!(store.list_subvolumes().expect("list"), vec![]);
    store.create_dir("d", 0o700).expect("mkdir");
    let e = store
        .open_dir("d")
        .expect("open")
        .list_subvolumes()
        .expect_err("plain dir");
    assert_eq!(e.kind, ErrorKind::NotASubvolume);
}

#[test]
fn loop_deletes_by_id() {
    let Some(mut fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let home = top.dir().open_dir("@home").expect("open @home");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open @snapshots");
    let snap = home.snapshot_to(&store, "doomed", true).expect("snapshot");
    let keep = home.snapshot_to(&store, "kept", true).expect("snapshot");

    // Holding a subvolume inside: refused, nothing deleted.
    let outer = store.create_subvolume("outer").expect("outer");
    store
        .open_dir("outer")
        .expect("open")
        .create_subvolume("inner")
        .expect("inner");
    let e = top
        .dir()
        .delete_subvolume_by_id(outer.id)
        .expect_err("has a child");
    assert_eq!(e.kind, ErrorKind::NotEmpty);

    // Any directory of the filesystem will do as the handle.
    home.delete_subvolume_by_id(snap.id).expect("delete");
    store.sync().expect("sync");
    let e = top.subvolume_info_by_id(snap.id).expect_err("gone");
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(store
        .list_subvolumes()
        .expect("list")
        .iter()
        .all(|e| e.info.id != snap.id));
    assert_eq!(
        store.stat_at("doomed").expect_err("no entry").kind,
        ErrorKind::NotFound
    );

    let e = top
        .dir()
        .delete_subvolume_by_id(snap.id)
        .expect_err("already gone");
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e = top.dir().delete_subvolume_by_id(5).expect_err("top level");
    assert_eq!(e.kind, ErrorKind::NotASubvolume);

    drop((home, store, top));
    fs.remount().expect("remount");
    let paths: Vec<String> = fs
        .subvolumes_snapshot()
        .expect("oracle")
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert!(!paths.contains(&"@snapshots/doomed".to_owned()));
    assert!(paths.contains(&"@snapshots/kept".to_owned()));
    assert_eq!(oracle(&fs, "@snapshots/kept").2, keep.id);
}

#[test]
fn loop_exchange_swaps_two_subvolumes_durably() {
    let Some(mut fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let home = top.dir().open_dir("@home").expect("open @home");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open @snapshots");
    std::fs::write(fs.top().join("@home/which"), b"live").expect("write");
    let snap = home
        .snapshot_to(&store, "tuesday", false)
        .expect("snapshot");
    std::fs::write(fs.top().join("@home/which"), b"changed").expect("write");
    let live = home.subvolume_info().expect("info");
    drop(home);
    // Bring the snapshot up beside @home and swap them: ids follow the names' swap.
    store
        .rename_noreplace("tuesday", "x")
        .expect("rename within the store");
    let e = store.rename_noreplace("x", "x").err();
    assert!(
        e.is_none() || e.as_ref().map(|e| e.kind) == Some(ErrorKind::AlreadyExists),
        "{e:?}"
    );

    let a = top.dir().create_subvolume("a").expect("a");
    let b = top.dir().create_subvolume("b").expect("b");
    let e = top.dir().rename_noreplace("a", "b").expect_err("b exists");
    assert_eq!(e.kind, ErrorKind::AlreadyExists);
    top.dir().exchange("a", "b").expect("exchange");
    assert_eq!(
        top.dir()
            .open_dir("a")
            .expect("a")
            .subvolume_info()
            .expect("info")
            .id,
        b.id
    );
    assert_eq!(
        top.dir()
            .open_dir("b")
            .expect("b")
            .subvolume_info()
            .expect("info")
            .id,
        a.id
    );
    top.dir().exchange("@home", "a").expect("exchange @home");
    top.dir()
        .sync()
        .expect("the rename is durable after fsync of the directory");

    drop((store, top));
    fs.remount().expect("remount");
    let top = Top::open(fs.top()).expect("open");
    assert_eq!(
        top.dir()
            .open_dir("a")
            .expect("a")
            .subvolume_info()
            .expect("info")
            .id,
        live.id
    );
    assert_eq!(
        top.dir()
            .open_dir("@home")
            .expect("home")
            .subvolume_info()
            .expect("info")
            .id,
        b.id
    );
    assert_eq!(
        std::fs::read(fs.top().join("a/which")).expect("read"),
        b"changed"
    );
    assert_eq!(oracle(&fs, "@snapshots/x").2, snap.id);
    let e = top.dir().exchange("a", "missing").expect_err("missing");
    assert_eq!(e.kind, ErrorKind::NotFound);
}

#[test]
fn loop_open_dir_refuses_symlinks_dotdot_and_files() {
    let Some(fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    symlink("/", fs.top().join("to-root")).expect("symlink");
    symlink("@home", fs.top().join("to-sibling")).expect("symlink");
    symlink("/etc", fs.top().join("@persist/to-etc")).expect("symlink");
    std::fs::write(fs.top().join("file"), b"x").expect("write");

    for name in ["to-root", "to-sibling"] {
        let e = top.dir().open_dir(name).expect_err(name);
        assert_eq!(e.kind, ErrorKind::Escapes, "{name}: {e}");
    }
    let persist = top.dir().open_dir("@persist").expect("open");
    assert_eq!(
        persist.open_dir("to-etc").expect_err("symlink").kind,
        ErrorKind::Escapes
    );
    assert_eq!(
        persist.open_dir("..").expect_err("..").kind,
        ErrorKind::InvalidName
    );
    assert_eq!(
        top.dir().open_dir("@persist/..").expect_err("slash").kind,
        ErrorKind::InvalidName
    );
    assert_eq!(
        top.dir().open_dir("file").expect_err("file").kind,
        ErrorKind::NotADirectory
    );
    assert_eq!(
        top.dir().open_dir("missing").expect_err("missing").kind,
        ErrorKind::NotFound
    );
    assert_eq!(
        top.dir().stat_at("to-root").expect("lstat").kind,
        FileKind::Symlink
    );
    // A symlink is not made a directory by create_dir either.
    assert_eq!(
        top.dir()
            .create_dir("to-root", 0o700)
            .expect_err("symlink")
            .kind,
        ErrorKind::Escapes
    );
    assert_eq!(
        top.dir().create_dir("file", 0o700).expect_err("file").kind,
        ErrorKind::NotADirectory
    );
}

/// What a process with this pid left when it was cut short between each temp and its
/// rename, under every name this process's next writes can take: regular files (the
/// leftovers), and symlinks and directories in between (not ours: never followed, never
/// removed). Every durable write still succeeds, and the leftovers are cleared on request.
#[test]
fn loop_leftover_temp_files_never_block_a_durable_write() {
    let Some(fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open");
    let dir = fs.top().join(SNAPSHOTS);
    let elsewhere = fs.top().join("@home/not-the-store");
    std::fs::write(&elsewhere, "must stay\n").expect("write");
    let pid = std::process::id();
    // This test binary's own writes: far fewer than this, so the next counter is below it.
    const PLANTED: u64 = 200;
    for n in 0..PLANTED {
        let p = dir.join(format!(".tmp.{pid}.{n}"));
        match n % 4 {
            1 => symlink(&elsewhere, &p).expect("symlink"),
            3 => std::fs::create_dir(&p).expect("mkdir"),
            _ => std::fs::write(&p, "an outcome a cut-short write left\n").expect("plant"),
        }
    }
    for other in [".tmp.keep", ".tmp.1.0x", "..tmp.1.0"] {
        std::fs::write(dir.join(other), "not a durable write's").expect("plant");
    }
    for (i, text) in ["first\n", "second\n", "third\n"].iter().enumerate() {
        store
            .write_file_durably(".restore", text.as_bytes(), 0o600)
            .unwrap_or_else(|e| panic!("write {i} over the leftovers: {e}"));
        assert_eq!(
            std::fs::read_to_string(dir.join(".restore")).expect("read"),
            *text
        );
    }
    assert_eq!(
        std::fs::read_to_string(&elsewhere).expect("read"),
        "must stay\n"
    );
    let removed = store.remove_leftover_temp_files().expect("clear");
    assert!(!removed.is_empty());
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp.") || n.starts_with("..tmp"))
        .collect();
    left.sort();
    let mut expected: Vec<String> = (0..PLANTED)
        .filter(|n| n % 2 == 1)
        .map(|n| format!(".tmp.{pid}.{n}"))
        .chain([".tmp.keep", ".tmp.1.0x", "..tmp.1.0"].map(String::from))
        .collect();
    expected.sort();
    assert_eq!(
        left, expected,
        "only the regular files of durable writes go"
    );
    assert!(dir
        .join(format!(".tmp.{pid}.1"))
        .symlink_metadata()
        .expect("lstat")
        .is_symlink());
    assert_eq!(
        std::fs::read_to_string(&elsewhere).expect("read"),
        "must stay\n",
        "a symlink was followed"
    );
}

#[test]
fn loop_write_file_durably_survives_remount_with_exact_mode() {
    let Some(mut fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open");
    store
        .write_file_durably(".restore", b"first\n", 0o600)
        .expect("write");
    store
        .write_file_durably(".restore", b"second\n", 0o640)
        .expect("replace");
    let names: Vec<String> = std::fs::read_dir(fs.top().join(SNAPSHOTS))
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, [".restore"], "no temp file left behind");
    let e = store
        .write_file_durably("../x", b"", 0o600)
        .expect_err("bad name");
    assert_eq!(e.kind, ErrorKind::InvalidName);

    drop((store, top));
    fs.remount().expect("remount");
    let path = fs.top().join(SNAPSHOTS).join(".restore");
    assert_eq!(std::fs::read(&path).expect("read"), b"second\n");
    assert_eq!(
        std::fs::metadata(&path).expect("stat").permissions().mode() & 0o7777,
        0o640
    );
}

#[test]
fn loop_read_file_limited_refuses_what_is_not_a_small_regular_file() {
    let Some(fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let dir = top.dir().open_dir("@persist").expect("open");
    let base = fs.top().join("@persist");
    std::fs::write(base.join("ok"), b"hello").expect("write");
    std::fs::write(base.join("big"), vec![b'x'; 4097]).expect("write");
    std::fs::create_dir(base.join("dir")).expect("mkdir");
    symlink("ok", base.join("link")).expect("symlink");
    rustix::fs::mknodat(
        &dir,
        "fifo",
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");

    let (st, data) = dir
        .read_file_limited("ok", 5)
        .expect("read")
        .expect("exists");
    assert_eq!(data, b"hello");
    assert_eq!((st.kind, st.size, st.uid), (FileKind::Regular, 5, 0));
    assert_eq!(
        dir.read_file_limited("ok", 4).expect_err("over").kind,
        ErrorKind::TooLarge
    );
    assert_eq!(
        dir.read_file_limited("big", 4096).expect_err("big").kind,
        ErrorKind::TooLarge
    );
    assert_eq!(
        dir.read_file_limited("big", 4097)
            .expect("read")
            .expect("exists")
            .1
            .len(),
        4097
    );
    assert!(dir
        .read_file_limited("missing", 10)
        .expect("missing is not an error")
        .is_none());
    assert_eq!(
        dir.read_file_limited("link", 10).expect_err("symlink").kind,
        ErrorKind::Escapes
    );
    assert_eq!(
        dir.read_file_limited("dir", 10).expect_err("dir").kind,
        ErrorKind::NotARegularFile
    );

    // A fifo with no writer would block a plain open forever: it must return at once.
    let started = Instant::now();
    let e = dir.read_file_limited("fifo", 10).expect_err("fifo");
    assert_eq!(e.kind, ErrorKind::NotARegularFile);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(
        dir.read_file_limited("a/b", 10).expect_err("name").kind,
        ErrorKind::InvalidName
    );

    assert!(dir.remove_file("ok").expect("remove"));
    assert!(!dir.remove_file("ok").expect("already gone"));
    assert_eq!(
        dir.remove_file("dir").expect_err("a directory").kind,
        ErrorKind::NotARegularFile
    );
}

#[test]
fn loop_set_readonly_and_commit() {
    let Some(fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let home = top.dir().open_dir("@home").expect("open");
    let blank = top
        .dir()
        .open_dir(layout::ROOT_BLANK_SUBVOLUME)
        .expect("open");
    assert!(
        blank.subvolume_info().expect("info").readonly,
        "testbed made it read-only"
    );
    home.set_readonly(true).expect("set");
    assert!(home.subvolume_info().expect("info").readonly);
    assert!(oracle(&fs, "@home").5);
    home.set_readonly(false).expect("clear");
    assert!(!home.subvolume_info().expect("info").readonly);
    home.create_dir("d", 0o755).expect("mkdir");
    let e = home
        .open_dir("d")
        .expect("open")
        .set_readonly(true)
        .expect_err("plain dir");
    assert_eq!(e.kind, ErrorKind::NotASubvolume);

    let before = home.subvolume_info().expect("info").generation;
    std::fs::write(fs.top().join("@home/f"), b"x").expect("write");
    top.dir().commit().expect("commit");
    top.dir().sync().expect("sync");
    assert!(home.subvolume_info().expect("info").generation > before);
    let e = top.subvolume_info_by_id(987_654).expect_err("no such id");
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(top.subvolume_info_by_id(5).expect("top").id, 5);
}

#[test]
fn loop_no_space_is_a_clean_error_and_leaves_no_half_made_snapshot() {
    // Mixed block groups: once data fills the disk, metadata has no room either.
    let options = testbed::Options {
        layout: true,
        mixed: true,
    };
    let Some(fs) = LoopFs::create(testbed::MIN_SIZE, options).expect("make a loop-device Btrfs")
    else {
        return;
    };
    let top = Top::open(fs.top()).expect("open");
    let home = top.dir().open_dir("@home").expect("open");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open");
    fs.fill("@home", 1 << 20).expect("fill");
    fs.fill("@home", 4 << 10).expect("fill the rest");
    top.dir().commit().expect("commit");
    let before = fs.subvolumes_snapshot().expect("oracle");

    let mut result = Ok(());
    for i in 0..20 {
        // Each success eats metadata; the disk is full, so one soon fails.
        match home.snapshot_to(&store, format!("s{i}"), true) {
            Ok(_) => continue,
            Err(e) => {
                result = Err((i, e));
                break;
            }
        }
    }
    let (i, e) = result.expect_err("a snapshot on a full filesystem must fail");
    assert_eq!(e.kind, ErrorKind::NoSpace, "{e}");
    let name = format!("s{i}");
    assert_eq!(
        store.stat_at(&name).expect_err("nothing half-made").kind,
        ErrorKind::NotFound
    );
    let after = fs.subvolumes_snapshot().expect("oracle");
    assert!(!after
        .iter()
        .any(|(p, _, _)| p == &format!("{SNAPSHOTS}/{name}")));
    assert_eq!(
        after.len(),
        before.len() + i,
        "only the snapshots that succeeded exist"
    );
    let e = store
        .write_file_durably(".restore", &vec![b'r'; 1 << 20], 0o600)
        .expect_err("full");
    assert_eq!(e.kind, ErrorKind::NoSpace, "{e}");
    assert_eq!(
        store.stat_at(".restore").expect_err("no file").kind,
        ErrorKind::NotFound
    );
}

#[test]
fn loop_snapshot_to_adds_nothing_measurable_over_the_ioctl() {
    let Some(fs) = laid_out() else { return };
    let top = Top::open(fs.top()).expect("open");
    let home = top.dir().open_dir("@home").expect("open");
    let store = top.dir().open_dir(SNAPSHOTS).expect("open");
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut whole = Vec::new();
    let mut extra = Vec::new();
    for i in 0..25 {
        let name = format!("s{i}");
        let t = Instant::now();
        home.snapshot_to(&store, &name, true).expect("snapshot");
        whole.push(t.elapsed());
        // What snapshot_to does besides the ioctl: check the source, open and ask the result.
        let t = Instant::now();
        assert!(home.is_subvolume_root().expect("check"));
        store
            .open_dir(&name)
            .expect("open")
            .subvolume_info()
            .expect("info");
        extra.push(t.elapsed());
    }
    let (whole, extra) = (median(whole), median(extra));
    eprintln!("snapshot_to median {whole:?}; of which checks and info {extra:?}");
    assert!(
        extra * 20 < whole,
        "the checks ({extra:?}) are over 5% of a snapshot ({whole:?})"
    );
}
