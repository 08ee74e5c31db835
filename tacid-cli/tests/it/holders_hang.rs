//! The CLI's search for the processes holding an open (adr/0021) looks at every process it
//! may: root's CLI looks at all. A process of a hostile user sitting in a FUSE filesystem
//! whose server stops answering must not make that search hang (a stat that follows
//! /proc/PID/cwd asks the FUSE server). Needs root and /dev/fuse.

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn a_process_in_a_hung_fuse_filesystem_does_not_hang_the_search_for_holders() {
    if !rustix::process::geteuid().is_root() || !std::path::Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: needs root and /dev/fuse");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let flag = dir.path().join("hang");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/hung_fuse.py");
    let mut server = Command::new("python3")
        .arg(script)
        .arg(&mnt)
        .arg(&flag)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the FUSE server starts");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready", "the FUSE server did not mount");
    let mut holder = Command::new("/bin/sh")
        .args(["-c", "cd \"$1\" && exec sleep 600", "sh"])
        .arg(&mnt)
        .spawn()
        .expect("a holder starts");
    let cwd = format!("/proc/{}/cwd", holder.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_link(&cwd).map_or(true, |p| p != mnt) {
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never sat in the mount"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&flag, b"").unwrap();
    let (done, finished) = std::sync::mpsc::channel();
    let look = dir.path().to_owned();
    std::thread::spawn(move || {
        let _ = done.send(tacid_cli::holders_of(&look));
    });
    let answered = finished.recv_timeout(Duration::from_secs(10));
    // Whatever happened, the server goes (its requests then fail) and the mount with it.
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = server.kill();
    let _ = server.wait();
    let _ = Command::new("umount").arg(&mnt).status();
    assert!(
        answered.is_ok(),
        "the search for holders hung on a process in a FUSE filesystem that stopped answering"
    );
}
