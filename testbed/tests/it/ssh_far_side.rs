//! The far side of SSH copies, `copies/tacid-copy-target`, on real parts: a real sshd in a
//! network namespace ([`testbed::ssh::SshTarget`]), the script as the key's forced command,
//! real `btrfs send` streams of real read-only snapshots on one loop Btrfs, received into a
//! directory on another. The `btrfs` CLI is the oracle for what landed.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, UNIX_EPOCH};

use layout::{SnapshotName, SubvolumeName, SUBVOLUMES};
use testbed::ssh::SshTarget;
use testbed::LoopFs;

const N1: &str = "@home.2025-12-01T140200.123456Z";
const N2: &str = "@home.2025-12-02T140200.000001Z";

// --- the far side's contract, from copies-spec.md --------------------------------------
const BAD_COMMAND: i32 = 2;
const NOT_BTRFS: i32 = 3;
const NO_SPACE: i32 = 4;
const NO_SUCH_COPY: i32 = 5;
const ALREADY_THERE: i32 = 6;
/// What ssh itself exits with when it cannot connect or refuses the host.
const SSH_FAILED: i32 = 255;

/// A source Btrfs with `@home`-named read-only snapshots under `snaps/`, and a target Btrfs
/// with the directory `copies` served over ssh.
struct Bench {
    source: LoopFs,
    target_fs: LoopFs,
    ssh: SshTarget,
}

impl Bench {
    fn new() -> Option<Bench> {
        Self::with_target(LoopFs::new(testbed::MIN_SIZE).unwrap()?)
    }

    fn with_target(target_fs: LoopFs) -> Option<Bench> {
        let source = LoopFs::new(testbed::MIN_SIZE).unwrap()?;
        run(
            "btrfs",
            &["-q", "subvolume", "create"],
            &[&source.top().join("src")],
        );
        std::fs::create_dir(source.top().join("snaps")).unwrap();
        let dir = target_fs.top().join("copies");
        std::fs::create_dir(&dir).unwrap();
        let ssh = SshTarget::start(&dir).unwrap()?;
        Some(Bench {
            source,
            target_fs,
            ssh,
        })
    }

    fn write(&self, file: &str, bytes: &[u8]) {
        std::fs::write(self.source.top().join("src").join(file), bytes).unwrap();
    }

    /// A read-only snapshot of `src` named `name` under `snaps/`; its UUID.
    fn snapshot(&self, name: &str) -> String {
        run(
            "btrfs",
            &["-q", "subvolume", "snapshot", "-r"],
            &[&self.source.top().join("src"), &self.snap(name)],
        );
        self.source.show(&format!("snaps/{name}")).unwrap()["UUID"].clone()
    }

    fn snap(&self, name: &str) -> PathBuf {
        self.source.top().join("snaps").join(name)
    }

    /// `btrfs send [-p snaps/PARENT] snaps/NAME | ssh ... REQUEST`.
    fn send_to(&self, name: &str, parent: Option<&str>, request: &str) -> Output {
        let stream = self.stream(name, parent);
        self.ssh_with_input(request, &stream)
    }

    /// The whole send stream of `snaps/NAME`, in memory (the tests' snapshots are small).
    fn stream(&self, name: &str, parent: Option<&str>) -> Vec<u8> {
        let mut args = vec!["-q".as_ref(), "send".as_ref()];
        let parent_path;
        if let Some(parent) = parent {
            parent_path = self.snap(parent);
            args.extend(["-p".as_ref(), parent_path.as_os_str()]);
        }
        let path = self.snap(name);
        args.push(path.as_os_str());
        let out = Command::new("btrfs").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "btrfs send: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn ssh_with_input(&self, request: &str, input: &[u8]) -> Output {
        let mut child = self
            .ssh
            .ssh(request)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        let writer = std::thread::spawn(move || {
            // The far side may refuse before it reads: a broken pipe is its answer, not ours.
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out
    }

    fn ssh_run(&self, request: &str) -> Output {
        self.ssh.ssh(request).stdin(Stdio::null()).output().unwrap()
    }

    /// `list`, parsed: name → (uuid on the target, received uuid).
    fn list(&self) -> BTreeMap<String, (String, String)> {
        let out = self.ssh_run("list");
        self.expect_ok(&out, "list");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split('\t').collect();
                assert_eq!(fields.len(), 3, "list line {line:?}");
                (
                    fields[0].to_owned(),
                    (fields[1].to_owned(), fields[2].to_owned()),
                )
            })
            .collect()
    }

    /// Every subvolume on the target filesystem, by path (the oracle).
    fn target_subvolumes(&self) -> Vec<String> {
        self.target_fs.subvolume_paths().unwrap()
    }

    fn expect_ok(&self, out: &Output, what: &str) {
        assert!(
            out.status.success(),
            "{what}: {}\nstderr: {}\nsshd log:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.ssh.log()
        );
    }

    /// Nothing was left on the target: no subvolume, received or half-received.
    fn expect_no_subvolumes(&self) {
        let left = self.target_subvolumes();
        assert!(left.is_empty(), "{left:?}");
    }

    fn expect_code(&self, out: &Output, code: i32, what: &str) {
        assert_eq!(
            out.status.code(),
            Some(code),
            "{what}\nstdout: {}\nstderr: {}\nsshd log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.ssh.log()
        );
    }

    /// The far side has finished whatever the last connection started (its clean-up too).
    fn wait_far_side_idle(&self) {
        assert!(
            self.ssh.wait_far_side_idle(Duration::from_secs(10)),
            "the far side is still running: {:?}\nsshd log:\n{}",
            self.ssh.far_side_processes(),
            self.ssh.log()
        );
    }
}

fn run(cmd: &str, args: &[&str], paths: &[&Path]) {
    let out = Command::new(cmd).args(args).args(paths).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?} {paths:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn ssh_full_then_incremental_copy_list_fetch_back_and_delete() {
    let Some(b) = Bench::new() else { return };
    b.write("a", b"first");
    let uuid1 = b.snapshot(N1);
    b.write("b", &vec![7u8; 300_000]);
    let uuid2 = b.snapshot(N2);

    let out = b.send_to(N1, None, &format!("receive {N1}"));
    b.expect_ok(&out, "a full copy");
    assert_eq!(stdout(&out), format!("received {N1} {uuid1}\n"));

    let full_size = b.stream(N2, None).len();
    let incremental = b.stream(N2, Some(N1));
    assert!(
        incremental.len() < full_size,
        "the incremental is smaller than a full send"
    );
    let out = b.ssh_with_input(&format!("receive {N2}"), &incremental);
    b.expect_ok(&out, "an incremental copy");
    assert_eq!(stdout(&out), format!("received {N2} {uuid2}\n"));

    let list = b.list();
    assert_eq!(list.keys().collect::<Vec<_>>(), [N1, N2]);
    assert_eq!(
        list[N1].1, uuid1,
        "the copy's received UUID is the snapshot's UUID"
    );
    assert_eq!(list[N2].1, uuid2);
    // The oracle agrees: read-only, received UUID, on the target filesystem.
    let shown = b.target_fs.show(&format!("copies/{N2}")).unwrap();
    assert_eq!(shown["UUID"], list[N2].0);
    assert_eq!(shown["Received UUID"], uuid2);
    assert!(shown["Flags"].contains("readonly"), "{shown:?}");
    assert_eq!(
        std::fs::read(b.target_fs.top().join("copies").join(N2).join("b")).unwrap(),
        vec![7u8; 300_000]
    );

    // Fetch back, incrementally: the source still has N1, whose UUID is the parent's
    // received UUID on the target.
    let fetched_dir = b.source.top().join("fetched");
    std::fs::create_dir(&fetched_dir).unwrap();
    let mut fetch = b
        .ssh
        .ssh(&format!("send {N2} {N1}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let receive = Command::new("btrfs")
        .args(["-q", "receive"])
        .arg(&fetched_dir)
        .stdin(Stdio::from(fetch.stdout.take().unwrap()))
        .output()
        .unwrap();
    let mut fetch_err = String::new();
    fetch
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut fetch_err)
        .unwrap();
    assert!(
        fetch.wait().unwrap().success(),
        "send back: {fetch_err}\n{}",
        b.ssh.log()
    );
    assert!(
        receive.status.success(),
        "{}",
        String::from_utf8_lossy(&receive.stderr)
    );
    let back = b.source.show(&format!("fetched/{N2}")).unwrap();
    assert_eq!(
        back["Received UUID"], uuid2,
        "a fetched copy is known by the source's UUID"
    );
    assert_eq!(
        std::fs::read(fetched_dir.join(N2).join("a")).unwrap(),
        b"first"
    );

    let out = b.ssh_run(&format!("delete {N1}"));
    b.expect_ok(&out, "delete");
    assert_eq!(stdout(&out), format!("deleted {N1}\n"));
    assert_eq!(b.list().keys().collect::<Vec<_>>(), [N2]);
    b.expect_code(
        &b.ssh_run(&format!("delete {N1}")),
        NO_SUCH_COPY,
        "delete twice",
    );
    b.expect_code(
        &b.ssh_run(&format!("send {N1}")),
        NO_SUCH_COPY,
        "send a deleted copy",
    );
    b.expect_code(
        &b.ssh_run(&format!("send {N2} {N1}")),
        NO_SUCH_COPY,
        "send with a deleted parent",
    );
    b.expect_code(
        &b.send_to(N2, None, &format!("receive {N2}")),
        ALREADY_THERE,
        "receive a copy that is there",
    );

    let out = b.ssh_run("space");
    b.expect_ok(&out, "space");
    let free: u64 = stdout(&out).trim().parse().unwrap();
    assert!(
        free > 10 << 20 && free < testbed::MIN_SIZE,
        "free bytes {free}"
    );
}

#[test]
fn ssh_refuses_every_other_command_and_touches_nothing() {
    let Some(b) = Bench::new() else { return };
    b.write("a", b"x");
    b.snapshot(N1);
    b.expect_ok(&b.send_to(N1, None, &format!("receive {N1}")), "a copy");
    let before = b.target_subvolumes();
    let marker = b.target_fs.scratch().join("ran");
    let long_name = format!("@home.{}", "9".repeat(100_000));
    // Over ssh, one of each kind; every spelling is checked without ssh in
    // script_refuses_anything_but_its_five_commands.
    let refused = [
        "bash".to_owned(),
        format!("touch {}", marker.display()),
        format!("list; touch {}", marker.display()),
        "receive ../x".to_owned(),
        format!("receive {long_name}"),
        "delete /etc/passwd".to_owned(),
        format!("delete ../copies/{N1}"),
        "scp -t /tmp".to_owned(),
    ];
    for request in &refused {
        let out = b.ssh_run(request);
        b.expect_code(&out, BAD_COMMAND, &format!("{:.80}", request));
    }
    // No command at all: ssh asks for a shell; the forced command runs with none.
    let out = b.ssh.ssh("").stdin(Stdio::null()).output().unwrap();
    b.expect_code(&out, BAD_COMMAND, "a session with no command (a shell)");
    assert!(!marker.exists(), "a refused command ran");
    assert_eq!(
        b.target_subvolumes(),
        before,
        "a refused command changed the target"
    );
    assert_eq!(b.list().keys().collect::<Vec<_>>(), [N1]);
}

#[test]
fn ssh_a_stream_of_another_snapshot_is_not_kept() {
    let Some(b) = Bench::new() else { return };
    b.write("a", b"x");
    b.snapshot(N1);
    let out = b.send_to(N1, None, &format!("receive {N2}"));
    b.expect_code(&out, 1, "a stream whose subvolume is not NAME");
    b.expect_no_subvolumes();
    assert!(b.list().is_empty());
    // Two snapshots in one stream (`btrfs send A B`): NAME and another; neither is kept.
    b.snapshot(N2);
    let mut both = b.stream(N1, None);
    both.extend(b.stream(N2, Some(N1)));
    let out = b.ssh_with_input(&format!("receive {N1}"), &both);
    b.expect_code(&out, 1, "a stream of two snapshots");
    b.expect_no_subvolumes();
}

#[test]
fn ssh_a_hostile_stream_writes_nothing_outside_the_directory() {
    // Whoever holds the key (a tacid machine gone bad) sends a stream of NAME whose commands
    // write outside DIR: through a symlink the stream makes, and up and out with `..`.
    let Some(b) = Bench::new() else { return };
    let victim = tempfile::tempdir().unwrap();
    let stream =
        testbed::send_stream::escaping(N1, [7u8; 16], &victim.path().display().to_string());
    let out = b.ssh_with_input(&format!("receive {N1}"), &stream);
    b.wait_far_side_idle();
    let escaped: Vec<_> = std::fs::read_dir(victim.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(escaped.is_empty(), "written outside DIR: {escaped:?}");
    b.expect_code(&out, 1, "a stream that writes outside DIR");
    b.expect_no_subvolumes();
}

#[test]
fn ssh_a_cut_link_mid_transfer_leaves_nothing() {
    let Some(b) = Bench::new() else { return };
    // Incompressible data, so the stream is long enough to stop halfway.
    let mut data = vec![0u8; 4 << 20];
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    b.write("big", &data);
    let uuid = b.snapshot(N1);
    let stream = b.stream(N1, None);

    // Half the stream in, then every sshd session killed: the client sees the link drop.
    let mut child = b
        .ssh
        .ssh(&format!("receive {N1}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&stream[..stream.len() / 2]).unwrap();
    stdin.flush().unwrap();
    // The far side has started receiving (a subvolume is there), then the cut.
    let start = std::time::Instant::now();
    while b.target_subvolumes().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", b.ssh.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(b.ssh.cut_link().unwrap() > 0, "no session to cut");
    let _ = stdin.write_all(&stream[stream.len() / 2..]);
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    b.expect_code(&out, SSH_FAILED, "ssh after the link was cut");
    // After the failed act, before any other: nothing half-received is left.
    b.wait_far_side_idle();
    assert!(
        b.target_subvolumes().is_empty(),
        "left behind: {:?}",
        b.target_subvolumes()
    );
    assert!(b.list().is_empty());

    // The stream ends early but cleanly (EOF right before its END command): refused too.
    let short = &stream[..stream.len() - 10];
    let out = b.ssh_with_input(&format!("receive {N1}"), short);
    b.expect_code(&out, 1, "a stream without its end");
    b.wait_far_side_idle();
    assert!(
        b.target_subvolumes().is_empty(),
        "left behind: {:?}",
        b.target_subvolumes()
    );

    // The next run tries again and succeeds.
    let out = b.ssh_with_input(&format!("receive {N1}"), &stream);
    b.expect_ok(&out, "the copy again");
    assert_eq!(b.list()[N1].1, uuid);
}

#[test]
fn ssh_a_full_target_says_so_and_leaves_nothing() {
    let Some(target_fs) = LoopFs::create(
        testbed::MIN_SIZE,
        testbed::Options {
            mixed: true,
            ..Default::default()
        },
    )
    .unwrap() else {
        return;
    };
    let Some(b) = Bench::with_target(target_fs) else {
        return;
    };
    b.write("big", &vec![0x33u8; 8 << 20]);
    b.snapshot(N1);
    std::fs::create_dir(b.target_fs.top().join("filler")).unwrap();
    b.target_fs.fill("filler", 1 << 20).unwrap();
    let out = b.send_to(N1, None, &format!("receive {N1}"));
    b.expect_code(&out, NO_SPACE, "receive onto a full target");
    b.wait_far_side_idle();
    assert!(
        b.target_subvolumes().is_empty(),
        "left behind: {:?}",
        b.target_subvolumes()
    );
}

#[test]
fn ssh_a_target_that_is_not_btrfs_is_exit_3() {
    if !rustix::process::geteuid().is_root() {
        // SshTarget::start says SKIPPED (or fails under CI) for the same reason.
        assert!(SshTarget::start(Path::new("/nonexistent"))
            .unwrap()
            .is_none());
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let mount_point = scratch.path().join("tmpfs");
    std::fs::create_dir(&mount_point).unwrap();
    run(
        "mount",
        &["-t", "tmpfs", "-o", "size=1m", "tacid-test"],
        &[&mount_point],
    );
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mount_point.clone());
    let Some(ssh) = SshTarget::start(&mount_point).unwrap() else {
        return;
    };
    for request in [
        "list",
        "space",
        &format!("delete {N1}"),
        &format!("receive {N1}"),
    ] {
        let out = ssh.ssh(request).stdin(Stdio::null()).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(NOT_BTRFS),
            "{request}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            ssh.log()
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("not Btrfs"));
    }
}

#[test]
fn ssh_a_changed_host_key_is_refused() {
    let Some(b) = Bench::new() else { return };
    let pinned = b.ssh.host_key().to_owned();
    assert!(pinned.starts_with("ssh-ed25519 "), "{pinned}");
    b.list();
    let mut b = b;
    let new_key = b.ssh.change_host_key().unwrap();
    assert_ne!(new_key, pinned);
    let out = b.ssh_run("list");
    b.expect_code(&out, SSH_FAILED, "list against a changed host key");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Host key verification failed"), "{err}");
    assert!(
        b.ssh.log().matches("Accepted publickey").count() == 1,
        "it logged in anyway"
    );
    // Pinning the new key (what root does after checking it) lets it in again.
    std::fs::write(
        b.ssh.known_hosts(),
        format!("{}\n", b.ssh.known_hosts_line()),
    )
    .unwrap();
    b.list();
}

#[test]
fn ssh_the_stems_own_ssh_reaches_the_target_from_inside_the_namespace() {
    let Some(b) = Bench::new() else { return };
    // A thread moved into the namespace runs plain /usr/bin/ssh, as the stem would.
    let out = b.ssh.in_netns(|| {
        Command::new("/usr/bin/ssh")
            .args(b.ssh.ssh_args())
            .arg("list")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    });
    b.expect_ok(&out, "ssh from a thread in the namespace");
    // A whole program started with the prefix.
    let prefix = b.ssh.exec_prefix();
    let out = Command::new(&prefix[0])
        .args(&prefix[1..])
        .arg("/usr/bin/ssh")
        .args(b.ssh.ssh_args())
        .arg("space")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    b.expect_ok(&out, "ssh started with the exec prefix");
    // And from the test's own namespace it is not there.
    let out = Command::new("/usr/bin/ssh")
        .args(b.ssh.ssh_args())
        .arg("list")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(SSH_FAILED));
    assert!(b.ssh.place().starts_with("ssh://root@127.0.0.1:2222/"));
}

/// Every other spelling of a command is refused before anything is touched: run without
/// ssh (SSH_ORIGINAL_COMMAND set by hand) on a directory that does not exist, a request
/// the script accepts fails later (exit 1) and one it refuses is a bad command (exit 2).
#[test]
fn script_refuses_anything_but_its_five_commands() {
    let dir = "/nonexistent/tacid-copies";
    let exit_code = |request: &str| -> Option<i32> {
        let mut command = Command::new(testbed::ssh::repo_script());
        command.arg(dir);
        if request != "<unset>" {
            command.env("SSH_ORIGINAL_COMMAND", request);
        } else {
            command.env_remove("SSH_ORIGINAL_COMMAND");
        }
        command.output().unwrap().status.code()
    };
    let long_name = format!("@home.{}", "9".repeat(100_000));
    for request in [
        "<unset>".to_owned(),
        "".to_owned(),
        " ".to_owned(),
        "bash".to_owned(),
        "sh -c id".to_owned(),
        "list; id".to_owned(),
        "list $(id)".to_owned(),
        "list `id`".to_owned(),
        "list\nid".to_owned(),
        "list\n".to_owned(),
        "receive ../x".to_owned(),
        "receive ..".to_owned(),
        "receive .".to_owned(),
        format!("receive {N1}/x"),
        format!("receive ../{N1}"),
        format!("receive {long_name}"),
        format!("receive {}", "@".repeat(200)),
        "delete /etc/passwd".to_owned(),
        format!("delete ../copies/{N1}"),
        format!("delete /{N1}"),
        format!("delete  {N1}"),
        format!(" delete {N1}"),
        format!("delete {N1} "),
        format!("delete\t{N1}"),
        format!("delete {N1} {N1}"),
        format!("receive {N1} {N2}"),
        format!("send {N1} {N1} {N1}"),
        format!("send {N1} ../{N2}"),
        "send @root.2025-12-01T140200.123456Z".to_owned(),
        "send @snapshots.2025-12-01T140200.123456Z".to_owned(),
        "delete @home.2025-02-29T140200.123456Z".to_owned(),
        "delete @home.2025-12-01T140200.123456z".to_owned(),
        "delete @home.2025-12-01T14:02:00.123456Z".to_owned(),
        format!("delete {}", N1.replace('@', "")),
        "delete *".to_owned(),
        "delete @home.*".to_owned(),
        "list extra".to_owned(),
        "space now".to_owned(),
        "LIST".to_owned(),
        "scp -t /tmp".to_owned(),
        "internal-sftp".to_owned(),
        "rsync --server".to_owned(),
    ] {
        assert_eq!(exit_code(&request), Some(BAD_COMMAND), "{request:.80?}");
    }
    // What it accepts gets as far as the directory (which is not there: exit 1).
    for request in [
        "list".to_owned(),
        "space".to_owned(),
        format!("receive {N1}"),
        format!("delete {N1}"),
        format!("send {N2}"),
        format!("send {N2} {N1}"),
    ] {
        assert_eq!(exit_code(&request), Some(1), "{request}");
    }
}

/// The script's grammar is the layout's: run it with no ssh (SSH_ORIGINAL_COMMAND set by
/// hand) on a directory that does not exist, so a name it accepts fails later (exit 1)
/// and a name it refuses is a bad command (exit 2), before anything is touched.
#[test]
fn script_names_are_exactly_the_layouts_snapshot_names() {
    let script = testbed::ssh::repo_script();
    let accepts = |name: &[u8]| -> bool {
        let mut request = b"delete ".to_vec();
        request.extend_from_slice(name);
        let out = Command::new(&script)
            .arg("/nonexistent/tacid-copies")
            .env("SSH_ORIGINAL_COMMAND", OsStr::from_bytes(&request))
            .output()
            .unwrap();
        match out.status.code() {
            Some(1) => true,
            Some(2) => false,
            other => panic!(
                "{:?}: exit {other:?}: {}",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    };
    for subvolume in SUBVOLUMES {
        let name = format!("{}.2025-12-01T140200.123456Z", subvolume.name);
        assert_eq!(
            accepts(name.as_bytes()),
            subvolume.snapshottable(),
            "{name}: the script's list of snapshotted subvolumes drifted from layout::SUBVOLUMES"
        );
    }
    // Canonical names, and one byte changed in each at a pseudo-random place: the script
    // and SnapshotName::parse agree on every one.
    let replacements = b"0123456789@./ -Z:TzX\n\t\x00\xff";
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let snapshotted: Vec<_> = SUBVOLUMES.iter().filter(|s| s.snapshottable()).collect();
    let mut checked = 0;
    for i in 0..120 {
        let subvolume = SubvolumeName::parse(snapshotted[i % snapshotted.len()].name).unwrap();
        let at = UNIX_EPOCH + Duration::from_micros(next() % 253_402_300_799_999_999);
        let name = SnapshotName::new(subvolume, at).unwrap().to_string();
        assert!(accepts(name.as_bytes()), "{name} refused");
        let mut bytes = name.into_bytes();
        let pos = (next() % bytes.len() as u64) as usize;
        bytes[pos] = replacements[(next() % replacements.len() as u64) as usize];
        // An empty byte cannot be in an environment variable; ssh cannot carry it either.
        if bytes.contains(&0) {
            continue;
        }
        let layout_says = std::str::from_utf8(&bytes).is_ok_and(|s| SnapshotName::parse(s).is_ok());
        assert_eq!(
            accepts(&bytes),
            layout_says,
            "{:?}",
            String::from_utf8_lossy(&bytes)
        );
        checked += 1;
    }
    assert!(checked > 100);
    for edge in [
        "@home.2024-02-29T235959.999999Z",
        "@home.2000-02-29T000000.000000Z",
        "@home.1970-01-01T000000.000000Z",
        "@home.9999-12-31T235959.999999Z",
    ] {
        assert!(accepts(edge.as_bytes()), "{edge}");
        assert!(SnapshotName::parse(edge).is_ok(), "{edge}");
    }
    for edge in [
        "@home.2100-02-29T000000.000000Z",
        "@home.2023-02-29T000000.000000Z",
        "@home.2025-04-31T000000.000000Z",
        "@home.1969-12-31T235959.999999Z",
        "@home.2025-00-10T000000.000000Z",
        "@home.2025-01-00T000000.000000Z",
        "@home.2025-01-01T235960.000000Z",
        "@home.2025-01-01T236000.000000Z",
        "@home.2025-01-01T240000.000000Z",
    ] {
        assert!(!accepts(edge.as_bytes()), "{edge}");
        assert!(SnapshotName::parse(edge).is_err(), "{edge}");
    }
}

#[test]
fn script_is_shellcheck_clean_posix_sh() {
    if !testbed::installed("shellcheck") {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true but shellcheck is not installed (apt-get install shellcheck)"
        );
        eprintln!("\n*** SKIPPED: shellcheck is not installed; the script was not checked ***\n");
        return;
    }
    let out = Command::new("shellcheck")
        .args(["-s", "sh"])
        .arg(testbed::ssh::repo_script())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = std::fs::read_to_string(testbed::ssh::repo_script()).unwrap();
    assert!(text.starts_with("#!/bin/sh\n"), "POSIX sh, not bash");
}
