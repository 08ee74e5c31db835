//! The bus tier on a filesystem filled to its last byte by something other than tacid: the
//! keeper's journal lives there too, and a full disk must be an answer to the person, not
//! a keeper killed by SIGBUS from a memory-mapped WAL index (adr/0013).
//!
//! Run (root, loop devices): `cargo test -p keeper --test it bus_full_disk::`.

use std::io::Write as _;

use crate::common::{World, APPROVER};

/// Whether the process is still running (not gone, not a zombie waiting to be reaped).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// Write into @home until the filesystem refuses: 1 MiB writes, then 4 KiB ones with an
/// fsync each, so that even the last scraps of data space are used. Files written.
fn fill_to_the_last_byte(w: &World) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for (chunk, sync_each) in [(1usize << 20, false), (4 << 10, true)] {
        let path = w.top().join(format!("@home/fill.{}", files.len()));
        let mut f = std::fs::File::create(&path).expect("create a fill file");
        files.push(path);
        let data = vec![0x5a_u8; chunk];
        loop {
            let wrote = f
                .write_all(&data)
                .and_then(|()| if sync_each { f.sync_all() } else { Ok(()) });
            match wrote {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(enospc()) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        let _ = f.sync_all();
    }
    rustix::fs::sync();
    files
}

fn enospc() -> i32 {
    rustix::io::Errno::NOSPC.raw_os_error()
}

#[test]
fn bus_a_disk_full_to_the_last_byte_is_an_answer_not_a_dead_keeper() {
    let Some(mut w) = World::start() else { return };
    // No hard floor: the stem would refuse before the disk is full, and this test is about
    // what happens when something else has filled it anyway.
    w.kill_stem();
    w.stem_args = vec!["--hard-floor-bytes".into(), "0".into()];
    w.start_stem();

    let (code, _, err) = w.tacid(APPROVER, &["data", "snapshot", "--reason", "before"]);
    assert_eq!(code, 0, "a snapshot on a disk with room: {err}");
    let keeper = w.keeper_pid().expect("the keeper runs");

    let files = fill_to_the_last_byte(&w);
    let st = rustix::fs::statvfs(w.top()).expect("statvfs");
    println!(
        "filled: {} KiB left for a writer",
        (st.f_bavail * st.f_frsize) >> 10
    );

    // A few requests that each write the journal: every one is answered.
    for reason in ["full 1", "full 2", "full 3"] {
        let (code, out, err) = w.tacid(APPROVER, &["data", "snapshot", "--reason", reason]);
        assert!(
            running(keeper),
            "the keeper died on a full disk (asked {reason:?}; CLI exit {code}): {err}"
        );
        assert!(code >= 0, "the CLI was killed: {err}");
        println!(
            "asked {reason:?} on a full disk: exit {code}: {}",
            err.trim()
        );
        if code != 0 {
            assert!(
                err.contains("disk is full") && err.contains("free space"),
                "a refusal on a full disk says the disk is full: exit {code}: {err}{out}"
            );
        }
    }
    let (code, _, err) = w.tacid(APPROVER, &["data", "list"]);
    assert_eq!(code, 0, "list on a full disk: {err}");
    assert!(running(keeper), "the keeper died listing on a full disk");

    // Space back: the same keeper, never restarted, takes a snapshot and journals it.
    for f in &files {
        std::fs::remove_file(f).expect("remove a fill file");
    }
    rustix::fs::sync();
    let mut taken = false;
    for _ in 0..40 {
        // Freed extents come back after a commit and the cleaner.
        let (code, _, _) = w.tacid(APPROVER, &["data", "snapshot", "--reason", "after"]);
        if code == 0 {
            taken = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert!(taken, "no snapshot once the space came back");
    assert_eq!(w.keeper_pid(), Some(keeper));
    assert!(running(keeper));
    let (rows, _) = w.journal_rows();
    assert!(
        rows.iter()
            .any(|r| r.action == "snapshot" && r.reason == "after" && r.state == "complete"),
        "the snapshot after the disk had room again is journalled complete"
    );
}
