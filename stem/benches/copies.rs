//! Copies to a local target: tacid's stem against its floor and against btrbk, same data,
//! same run, interleaved.
//!
//! `cargo bench -p stem --bench copies` (root; needs btrfs-progs and btrbk). A 100k-file
//! tree in `@home`, a snapshot of it, 1000 of its files changed, a second snapshot. Each
//! round, for each contender in a rotating order: a full copy of the first snapshot to an
//! empty directory on a second loop Btrfs, then an incremental copy of the second with the
//! first as parent; then the copies are deleted (and the cleaner waited for) for the next
//! round. Contenders:
//! - raw: `btrfs send [-p S0] S1 | btrfs receive DIR` (the floor), and the same followed by
//!   a commit of the target (`btrfs filesystem sync`): tacid commits before it says
//!   "copied", so that is the floor for a copy that is known to be on disk;
//! - btrbk: `btrbk resume` with its own snapshots of the same two states (btrbk only sends
//!   snapshots it named); it finds the parent itself, as tacid does;
//! - tacid: `stem::copies::Copies::copy_to`, the code behind Stem1.CopyTo, in process
//!   (no bus, no keeper): it lists the target, picks the parent, sends with the ioctl into
//!   `btrfs receive`, verifies, commits.
//!
//! Then the same full and incremental copies over SSH (testbed::ssh: a real sshd, the far
//! side's script as forced command): raw `btrfs send | ssh receive NAME` against the stem's
//! copy_to to an ssh:// target.
//!
//! Prints medians and ratios against raw. Targets: incremental ≤ 1.1× raw, faster than
//! btrbk. TACID_BENCH_QUICK=1: 10k files, 100 changed, 3 rounds. TACID_BENCH_ROUNDS=N.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use layout::{SnapshotName, SubvolumeName, SNAPSHOTS_SUBVOLUME};
use stem::copies::{Copies, Programs};
use stem::worker::Worker;
use stem::Engine;

const TARGET: &str = "bench";
const SSH_TARGET: &str = "remote";
const BTRBK_SNAPSHOTS: &str = "btrbk_snapshots";
const BTRBK_S0: &str = "home.20250101T0000";
const BTRBK_S1: &str = "home.20250101T0001";
/// btrbk's second snapshot while the full copies run (not its pattern, so not sent).
const BTRBK_S1_HIDDEN: &str = "hidden.home.20250101T0001";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// The fastest and slowest of the runs: how noisy this machine was.
fn spread(v: &[Duration]) -> String {
    let min = v.iter().min().copied().unwrap_or_default();
    let max = v.iter().max().copied().unwrap_or_default();
    format!(
        "{:.0}–{:.0} ms",
        min.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    )
}

fn ms(d: Duration) -> String {
    format!("{:9.1} ms", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, floor: Duration) -> String {
    format!("{:6.2}×", a.as_secs_f64() / floor.as_secs_f64())
}

/// `btrfs send [-p parent] snapshot | btrfs receive dir`, timed from the first spawn to
/// the last exit.
fn raw_copy(parent: Option<&Path>, snapshot: &Path, dir: &Path) -> Duration {
    let start = Instant::now();
    let mut send = Command::new("btrfs");
    send.args(["-q", "send"]);
    if let Some(p) = parent {
        send.arg("-p").arg(p);
    }
    let mut send = send
        .arg(snapshot)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("btrfs send");
    let receive = Command::new("btrfs")
        .arg("receive")
        .arg(dir)
        .stdin(Stdio::from(send.stdout.take().expect("pipe")))
        .output()
        .expect("btrfs receive");
    let sent = send.wait_with_output().expect("btrfs send");
    let took = start.elapsed();
    assert!(
        sent.status.success() && receive.status.success(),
        "raw copy: {} {}",
        String::from_utf8_lossy(&sent.stderr),
        String::from_utf8_lossy(&receive.stderr)
    );
    took
}

/// `btrfs send [-p parent] NAME | ssh ... receive NAME` into the far side's script.
fn raw_over_ssh(
    far: &testbed::ssh::SshTarget,
    store: &Path,
    name: SnapshotName,
    parent: Option<SnapshotName>,
) -> Duration {
    let start = Instant::now();
    let mut send = Command::new("btrfs");
    send.args(["-q", "send"]);
    if let Some(p) = parent {
        send.arg("-p").arg(store.join(p.to_string()));
    }
    let mut send = send
        .arg(store.join(name.to_string()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("btrfs send");
    let receive = far
        .ssh(&format!("receive {name}"))
        .stdin(Stdio::from(send.stdout.take().expect("pipe")))
        .output()
        .expect("ssh");
    let sent = send.wait_with_output().expect("btrfs send");
    let took = start.elapsed();
    assert!(
        sent.status.success() && receive.status.success(),
        "raw copy over ssh: {} {}\nsshd log:\n{}",
        String::from_utf8_lossy(&sent.stderr),
        String::from_utf8_lossy(&receive.stderr),
        far.log()
    );
    took
}

fn btrbk_copy(config: &Path) -> Duration {
    let start = Instant::now();
    run("btrbk", &["-c", s(config), "--preserve", "-q", "resume"]);
    start.elapsed()
}

/// Delete every subvolume directly in `dir` and wait for the cleaner, so the next round
/// starts from the same empty target.
fn empty(dir: &Path, target_top: &Path) {
    for entry in std::fs::read_dir(dir).expect("read target") {
        let path = entry.expect("entry").path();
        run("btrfs", &["-q", "subvolume", "delete", s(&path)]);
    }
    run("btrfs", &["filesystem", "sync", s(target_top)]);
    run("btrfs", &["-q", "subvolume", "sync", s(target_top)]);
}

fn content(dir: usize, file: usize, generation: u32) -> Vec<u8> {
    let mut text = format!("d{dir:03}/f{file:04} generation {generation}\n").into_bytes();
    text.resize(512, b'.');
    text
}

#[derive(Default)]
struct Column {
    full: Vec<Duration>,
    incremental: Vec<Duration>,
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` asks; this is a bench, not a test.
    }
    let quick = std::env::var_os("TACID_BENCH_QUICK").is_some();
    let (dirs, changed_every) = if quick { (10, 100) } else { (100, 100) };
    let files_per_dir = 1000;
    let rounds: usize = std::env::var("TACID_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick { 3 } else { 5 });
    for tool in ["btrfs", "btrbk"] {
        if !testbed::installed(tool) {
            eprintln!("\n*** SKIPPED: the copies bench needs {tool} (apt-get install btrfs-progs btrbk) ***\n");
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true: {tool} missing"
            );
            return;
        }
    }
    let Some(source) = testbed::LoopFs::with_layout(4 << 30).expect("source loop Btrfs") else {
        return;
    };
    let Some(target) = testbed::LoopFs::new(4 << 30).expect("target loop Btrfs") else {
        return;
    };
    // btrbk on a filesystem of its own: it takes as parent any related subvolume received
    // anywhere on the target filesystem, so beside the others' copies its "full" copy
    // would be an incremental one.
    let Some(btrbk_fs) = testbed::LoopFs::new(4 << 30).expect("btrbk's loop Btrfs") else {
        return;
    };
    let top = source.top();
    let home = top.join("@home");

    // The tree: `dirs` × 1000 files of 512 bytes (inline in the metadata, as most small
    // files of a home are).
    let made = Instant::now();
    for d in 0..dirs {
        let sub = home.join(format!("d{d:03}"));
        std::fs::create_dir(&sub).expect("mkdir");
        for f in 0..files_per_dir {
            std::fs::write(sub.join(format!("f{f:04}")), content(d, f, 0)).expect("write");
        }
    }
    run("sync", &[]);
    let files = dirs * files_per_dir;
    let changed = files / changed_every;
    eprintln!(
        "bench: {files} files made in {:.1} s; {rounds} rounds",
        made.elapsed().as_secs_f64()
    );

    let subvolume = SubvolumeName::parse("@home").expect("layout name");
    let store = top.join(SNAPSHOTS_SUBVOLUME);
    let btrbk_dir = top.join(BTRBK_SNAPSHOTS);
    std::fs::create_dir(&btrbk_dir).expect("btrbk snapshot dir");
    let snap = |to: &Path| {
        run(
            "btrfs",
            &["-q", "subvolume", "snapshot", "-r", s(&home), s(to)],
        )
    };
    let s0 = SnapshotName::new(subvolume, SystemTime::now()).expect("name");
    snap(&store.join(s0.to_string()));
    snap(&btrbk_dir.join(BTRBK_S0));
    for d in 0..dirs {
        for f in (0..files_per_dir).step_by(changed_every) {
            std::fs::write(home.join(format!("d{d:03}/f{f:04}")), content(d, f, 1))
                .expect("change");
        }
    }
    run("sync", &[]);
    let s1 = SnapshotName::new(subvolume, SystemTime::now()).expect("name");
    snap(&store.join(s1.to_string()));
    snap(&btrbk_dir.join(BTRBK_S1_HIDDEN));

    let raw_dir = target.top().join("raw");
    let raw_sync_dir = target.top().join("raw-sync");
    let btrbk_target = btrbk_fs.top().join("btrbk");
    let tacid_dir = target.top().join("tacid");
    for d in [&raw_dir, &raw_sync_dir, &btrbk_target, &tacid_dir] {
        std::fs::create_dir(d).expect("target dir");
    }
    let btrbk_config = source.scratch().join("btrbk.conf");
    std::fs::write(
        &btrbk_config,
        format!(
            "timestamp_format long\n\
             snapshot_create no\n\
             snapshot_preserve_min all\n\
             target_preserve_min all\n\
             volume {top}\n\
             \x20 snapshot_dir {BTRBK_SNAPSHOTS}\n\
             \x20 subvolume @home\n\
             \x20   snapshot_name home\n\
             \x20   target send-receive {target}\n",
            top = top.display(),
            target = btrbk_target.display()
        ),
    )
    .expect("btrbk config");

    // Over SSH too, when this machine can run the sshd harness: each contender's own sshd
    // (the far side is copies/tacid-copy-target) serving its own directory on one more
    // loop Btrfs.
    let ssh_fs = testbed::LoopFs::new(4 << 30).expect("ssh target loop Btrfs");
    let ssh_targets = ssh_fs.as_ref().and_then(|fs| {
        let raw = fs.top().join("raw");
        let tacid = fs.top().join("tacid");
        std::fs::create_dir(&raw).expect("dir");
        std::fs::create_dir(&tacid).expect("dir");
        let raw = testbed::ssh::SshTarget::start(&raw).expect("sshd")?;
        let tacid = testbed::ssh::SshTarget::start(&tacid).expect("sshd")?;
        Some((raw, tacid))
    });
    let remote = ssh_targets
        .as_ref()
        .map(|(_, t)| {
            format!(
                r#", "{SSH_TARGET}": {{ "place": "{}", "identity": "{}", "host_key": "{}" }}"#,
                t.place(),
                t.identity().display(),
                t.host_key()
            )
        })
        .unwrap_or_default();

    let engine = Engine::open(top).expect("open the top level");
    let worker = Worker::start(engine, || {}).expect("engine thread");
    let config = format!(
        r#"{{ "targets": {{ "{TARGET}": {{ "place": "{}" }}{remote} }} }}"#,
        tacid_dir.display()
    );
    let runtime_dir = source.scratch().join("stem-runtime");
    std::fs::create_dir(&runtime_dir).expect("runtime dir");
    // Every receive is the receiver's (tacid-stem-receive), as on a real machine.
    let config_path = runtime_dir.join("copies.json");
    std::fs::write(&config_path, &config).expect("write the copies configuration");
    let receiver = testbed::receive::Receiver::start(&testbed::receive::ReceiverArgs::new(
        env!("CARGO_BIN_EXE_tacid-stem-receive"),
        top,
        &config_path,
    ))
    .expect("start the receiver");
    let config = layout::copies::CopiesConfig::parse(config.as_bytes()).expect("copies config");
    let programs = Programs {
        receiver: receiver.socket(),
        ssh: ssh_targets
            .as_ref()
            .map(|(_, t)| t.ssh_program())
            .unwrap_or_else(|| "ssh".into()),
        runtime_dir,
        ..Programs::default()
    };
    let copies = Copies::new(config, programs, worker, top.to_owned());

    let s0_path = store.join(s0.to_string());
    let s1_path = store.join(s1.to_string());
    let full_bytes = run(
        "sh",
        &["-c", &format!("btrfs -q send {} | wc -c", s(&s0_path))],
    )
    .trim()
    .parse::<u64>()
    .expect("stream size");
    let incremental_bytes = run(
        "sh",
        &[
            "-c",
            &format!("btrfs -q send -p {} {} | wc -c", s(&s0_path), s(&s1_path)),
        ],
    )
    .trim()
    .parse::<u64>()
    .expect("stream size");

    let (mut raw, mut raw_sync, mut btrbk, mut tacid) = (
        Column::default(),
        Column::default(),
        Column::default(),
        Column::default(),
    );
    let target_top = target.top().to_owned();
    let btrbk_top = btrbk_fs.top().to_owned();
    let settle = || {
        run("btrfs", &["filesystem", "sync", s(&target_top)]);
        run("btrfs", &["filesystem", "sync", s(&btrbk_top)]);
    };
    let rename = |from: &str, to: &str| {
        std::fs::rename(btrbk_dir.join(from), btrbk_dir.join(to)).expect("btrbk snapshot rename")
    };
    for round in 0..rounds {
        let order: Vec<usize> = (0..4).map(|k| (k + round) % 4).collect();
        for &which in &order {
            settle();
            let took = match which {
                0 => raw_copy(None, &s0_path, &raw_dir),
                1 => {
                    let t = Instant::now();
                    raw_copy(None, &s0_path, &raw_sync_dir);
                    settle();
                    t.elapsed()
                }
                2 => btrbk_copy(&btrbk_config),
                _ => {
                    let t = Instant::now();
                    let copied = copies.copy_to(s0, TARGET).expect("tacid full copy");
                    let took = t.elapsed();
                    assert_eq!(copied.parent, None);
                    took
                }
            };
            [&mut raw, &mut raw_sync, &mut btrbk, &mut tacid][which]
                .full
                .push(took);
        }
        rename(BTRBK_S1_HIDDEN, BTRBK_S1);
        for &which in &order {
            settle();
            let took = match which {
                0 => raw_copy(Some(&s0_path), &s1_path, &raw_dir),
                1 => {
                    let t = Instant::now();
                    raw_copy(Some(&s0_path), &s1_path, &raw_sync_dir);
                    settle();
                    t.elapsed()
                }
                2 => btrbk_copy(&btrbk_config),
                _ => {
                    let t = Instant::now();
                    let copied = copies.copy_to(s1, TARGET).expect("tacid incremental copy");
                    let took = t.elapsed();
                    assert_eq!(copied.parent, Some(s0), "tacid sent incrementally");
                    took
                }
            };
            [&mut raw, &mut raw_sync, &mut btrbk, &mut tacid][which]
                .incremental
                .push(took);
        }
        // Every contender made the same two copies.
        for d in [&raw_dir, &raw_sync_dir, &btrbk_target, &tacid_dir] {
            let n = std::fs::read_dir(d).expect("read").count();
            assert_eq!(n, 2, "{} holds {n} copies, not 2", d.display());
        }
        rename(BTRBK_S1, BTRBK_S1_HIDDEN);
        for d in [&raw_dir, &raw_sync_dir, &tacid_dir] {
            empty(d, &target_top);
        }
        empty(&btrbk_target, &btrbk_top);
        eprintln!("bench: round {} of {rounds} done", round + 1);
    }

    let (mut ssh_raw, mut ssh_tacid) = (Column::default(), Column::default());
    if let (Some((raw_far, tacid_far)), Some(fs)) = (&ssh_targets, &ssh_fs) {
        for round in 0..rounds {
            for phase in 0..2 {
                let (name, parent) = if phase == 0 {
                    (s0, None)
                } else {
                    (s1, Some(s0))
                };
                for which in [round % 2, (round + 1) % 2] {
                    let took = if which == 0 {
                        raw_over_ssh(raw_far, &store, name, parent)
                    } else {
                        let t = Instant::now();
                        let copied = copies.copy_to(name, SSH_TARGET).unwrap_or_else(|e| {
                            panic!("tacid copy over ssh: {e}\nsshd log:\n{}", tacid_far.log())
                        });
                        let took = t.elapsed();
                        assert_eq!(copied.parent, parent, "tacid's parent over ssh");
                        took
                    };
                    let column = if which == 0 {
                        &mut ssh_raw
                    } else {
                        &mut ssh_tacid
                    };
                    if phase == 0 {
                        column.full.push(took);
                    } else {
                        column.incremental.push(took);
                    }
                }
            }
            for d in ["raw", "tacid"] {
                empty(&fs.top().join(d), fs.top());
            }
            eprintln!("bench: ssh round {} of {rounds} done", round + 1);
        }
    }

    let floor_full = median(raw.full.clone());
    let floor_incremental = median(raw.incremental.clone());
    let mib = |bytes: u64, d: Duration| bytes as f64 / (1 << 20) as f64 / d.as_secs_f64();
    println!(
        "\ncopies to a local target: {files} files, {changed} changed; medians of {rounds} interleaved rounds"
    );
    println!(
        "streams: full {:.1} MiB, incremental {:.2} MiB",
        full_bytes as f64 / (1 << 20) as f64,
        incremental_bytes as f64 / (1 << 20) as f64
    );
    let floor_sync_full = median(raw_sync.full.clone());
    let floor_sync_incremental = median(raw_sync.incremental.clone());
    println!(
        "{:<34} {:>12} {:>8} {:>9} {:>11}   {:>12} {:>8} {:>9}   {:<10}",
        "",
        "full",
        "× raw",
        "× raw+c",
        "MiB/s",
        "incremental",
        "× raw",
        "× raw+c",
        "incremental min–max"
    );
    for (label, column) in [
        ("raw send | receive (the floor)", &raw),
        ("raw send | receive + commit", &raw_sync),
        ("btrbk resume", &btrbk),
        ("tacid (stem copy_to)", &tacid),
    ] {
        let full = median(column.full.clone());
        let incremental = median(column.incremental.clone());
        println!(
            "{label:<34} {} {}   {} {:>11.1}   {} {}   {}   {}",
            ms(full),
            ratio(full, floor_full),
            ratio(full, floor_sync_full),
            mib(full_bytes, full),
            ms(incremental),
            ratio(incremental, floor_incremental),
            ratio(incremental, floor_sync_incremental),
            spread(&column.incremental)
        );
    }
    if !ssh_raw.full.is_empty() {
        let (raw_full, raw_incremental) = (median(ssh_raw.full), median(ssh_raw.incremental));
        let (full, incremental) = (median(ssh_tacid.full), median(ssh_tacid.incremental));
        println!(
            "\nover SSH (a real sshd on loopback in a network namespace, copies/tacid-copy-target \
             as the forced command), medians of {rounds} interleaved rounds"
        );
        println!(
            "{:<34} {:>12} {:>8} {:>11}   {:>12} {:>8}",
            "", "full", "× raw", "MiB/s", "incremental", "× raw"
        );
        for (label, f, i) in [
            ("raw send | ssh receive NAME", raw_full, raw_incremental),
            ("tacid (stem copy_to over ssh)", full, incremental),
        ] {
            println!(
                "{label:<34} {} {} {:>11.1}   {} {}",
                ms(f),
                ratio(f, raw_full),
                mib(full_bytes, f),
                ms(i),
                ratio(i, raw_incremental)
            );
        }
        println!(
            "(tacid lists the target before it sends, to choose the parent: one more ssh \
             connection than the raw pipe)\n"
        );
    }
    let tacid_incremental = median(tacid.incremental.clone());
    let btrbk_incremental = median(btrbk.incremental.clone());
    println!(
        "tacid commits the target before it answers; against raw + commit its incremental is {}",
        ratio(tacid_incremental, floor_sync_incremental).trim()
    );
    println!(
        "targets: incremental ≤ 1.10× raw: {} ({}); faster than btrbk: {} ({:.2}× btrbk's time)",
        if tacid_incremental.as_secs_f64() <= 1.1 * floor_incremental.as_secs_f64() {
            "met"
        } else {
            "NOT met"
        },
        ratio(tacid_incremental, floor_incremental).trim(),
        if tacid_incremental < btrbk_incremental {
            "met"
        } else {
            "NOT met"
        },
        tacid_incremental.as_secs_f64() / btrbk_incremental.as_secs_f64()
    );
}
