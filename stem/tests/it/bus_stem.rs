//! The bus tier of the stem: the real `tacid-stem` as root on a real loop-device Btrfs, a
//! private `dbus-daemon` with the shipped policy, and callers that are real system users.
//!
//! - A stranger is refused by the bus policy, and — where a policy lets it through — by the
//!   stem's own check inside every method, with the stem's named error; nothing changes.
//! - The keeper's user, through the published `Stem1Proxy`, takes, lists, stages,
//!   withdraws and deletes, and gets the named errors the interface promises.
//! - Started with `--device`, the stem mounts the top level in a namespace of its own.

use crate::common;

use std::time::Instant;

use crate::common::{
    as_user, dbus_send_as, ensure_user, require_root_and_tools, PrivateBus, Reply, StemDaemon,
};
use layout::names;
use stem_interface::{self as stem1, Stem1Proxy};
use zbus::proxy::CacheProperties;
use zbus::DBusError as _;

const STRANGER: &str = "tacid-stranger";

/// Every method, with arguments that would succeed for the keeper (dbus-send syntax).
const EVERY_METHOD: &[(&str, &[&str])] = &[
    ("TakeSnapshot", &["string:@home"]),
    ("TakeSet", &["array:string:@home,@log"]),
    ("TakeCut", &["array:string:@home,@log"]),
    ("List", &[]),
    ("ListSince", &["array:uint64:1,2,3"]),
    ("Delete", &["string:@home.2026-12-01T140200.123456Z"]),
    ("StageRestore", &["string:@home.2026-12-01T140200.123456Z"]),
    (
        "StageSetRestore",
        &["array:string:@home.2026-12-01T140200.123456Z,@log.2026-12-01T140200.123456Z"],
    ),
    ("Withdraw", &[]),
    ("DiscardBadRequest", &[]),
    ("FreeSpace", &[]),
    ("Staged", &[]),
    ("Outcome", &[]),
    (
        "ChangesSince",
        &[
            "string:@home.2026-12-01T140200.123456Z",
            "uint32:1000",
            "boolean:true",
        ],
    ),
    (
        "ChangesSinceLastCommit",
        &["string:@home.2026-12-01T140200.123456Z", "uint32:1000"],
    ),
    (
        "CopyTo",
        &["string:@home.2026-12-01T140200.123456Z", "string:usb"],
    ),
    ("CopiesOn", &["string:usb"]),
    (
        "DeleteCopy",
        &["string:usb", "string:@home.2026-12-01T140200.123456Z"],
    ),
    (
        "FetchFrom",
        &["string:usb", "string:@home.2026-12-01T140200.123456Z"],
    ),
    ("CopyProgress", &[]),
    // dbus-send passes no file descriptor: these two are tried through zbus where the
    // stem itself must refuse (FD_METHODS); the bus's policy refuses them whatever they carry.
    (
        "SendSealed",
        &["string:@home.2026-12-01T140200.123456Z", "string:"],
    ),
    (
        "ReceiveSealed",
        &[
            "string:@home.2026-12-01T140200.123456Z",
            "string:6b1ee1b4-3dcd-4ad5-9d0b-2a0cf0b5d2a1",
        ],
    ),
    (
        "OpenSnapshot",
        &[
            "string:@home.2026-12-01T140200.123456Z",
            "array:byte:97",
            "uint32:1000",
            "uint32:1000",
        ],
    ),
    (
        "CloseSnapshot",
        &["uint32:1000", "string:@home.2026-12-01T140200.123456Z"],
    ),
    ("OpenSnapshots", &[]),
    (
        "Space",
        &[
            "array:string:@home.2026-12-01T140200.123456Z",
            "uint32:1000",
        ],
    ),
    (
        "ChangesInPart",
        &[
            "string:@home.2026-12-01T140200.123456Z",
            "array:byte:97",
            "uint32:1000",
            "array:uint32:1000",
            "array:byte:",
            "uint32:5000",
        ],
    ),
];

/// The methods that take a file descriptor.
const FD_METHODS: &[&str] = &["SendSealed", "ReceiveSealed"];

#[test]
fn every_method_of_the_committed_interface_is_tried_by_the_stranger_tests() {
    // A method added to Stem1 and left out of EVERY_METHOD would escape both refusal tests.
    let xml = include_str!("../../../stem-interface/org.tacid.Stem1.xml");
    let mut committed: Vec<&str> = xml
        .split("<method name=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().expect("a closing quote"))
        .collect();
    let mut tried: Vec<&str> = EVERY_METHOD.iter().map(|(member, _)| *member).collect();
    committed.sort_unstable();
    tried.sort_unstable();
    assert!(
        !committed.is_empty(),
        "no methods found in org.tacid.Stem1.xml"
    );
    assert_eq!(
        tried, committed,
        "EVERY_METHOD must list every Stem1 method"
    );
}

/// A loop Btrfs with the layout, the bus, and the users; `None` when this machine cannot.
fn setup(extra_policy: &str) -> Option<(testbed::LoopFs, PrivateBus)> {
    if !require_root_and_tools() {
        return None;
    }
    let fs = testbed::LoopFs::with_layout(256 << 20).expect("make a loop Btrfs")?;
    ensure_user(names::KEEPER_USER);
    ensure_user(STRANGER);
    let bus = PrivateBus::start(&[&common::shipped_policy()], extra_policy);
    Some((fs, bus))
}

fn top_arg(fs: &testbed::LoopFs) -> String {
    fs.top().display().to_string()
}

#[test]
fn bus_stranger_is_refused_by_the_shipped_policy() {
    let Some((fs, bus)) = setup("") else { return };
    // The stem would accept the stranger: only the policy stands in the way.
    let _stem = StemDaemon::start(&bus, STRANGER, &["--top", &top_arg(&fs)]);
    let (uid, gid) = ensure_user(STRANGER);
    let before = fs.subvolumes_snapshot().expect("list subvolumes");
    for (member, args) in EVERY_METHOD {
        let reply = dbus_send_as(&bus, uid, gid, member, args);
        assert_eq!(
            reply.error_name(),
            Some("org.freedesktop.DBus.Error.AccessDenied"),
            "{member} by a stranger must be refused by the bus policy: {reply:?}"
        );
    }
    assert_eq!(
        before,
        fs.subvolumes_snapshot().expect("list subvolumes"),
        "nothing may change"
    );
}

#[test]
fn bus_stranger_is_refused_inside_every_method() {
    // A policy mistake that lets the stranger send: the stem's own check must still refuse.
    let hole = format!(
        "<policy user=\"{STRANGER}\"><allow send_destination=\"{0}\"/></policy>\n\
         <policy user=\"root\"><allow send_destination=\"{0}\"/></policy>",
        names::STEM_BUS_NAME
    );
    let Some((fs, bus)) = setup(&hole) else {
        return;
    };
    let _stem = StemDaemon::start(&bus, names::KEEPER_USER, &["--top", &top_arg(&fs)]);
    let (uid, gid) = ensure_user(STRANGER);
    let before = fs.subvolumes_snapshot().expect("list subvolumes");
    for (member, args) in EVERY_METHOD {
        if FD_METHODS.contains(member) {
            continue;
        }
        match dbus_send_as(&bus, uid, gid, member, args) {
            Reply::Error { name, message } => {
                assert_eq!(
                    name, "org.tacid.Stem1.Error.AccessDenied",
                    "{member}: {message}"
                );
                assert!(
                    message.contains(&format!("uid {uid}")) && message.contains(names::KEEPER_USER),
                    "{member}: the refusal names the caller and who may call: {message}"
                );
            }
            ok => panic!("{member} by a stranger was answered: {ok:?}"),
        }
    }
    assert_eq!(
        before,
        fs.subvolumes_snapshot().expect("list subvolumes"),
        "nothing may change"
    );

    // The methods that take a pipe, called properly (with one) by the stranger.
    let address = bus.address().to_owned();
    let refusals = as_user(uid, gid, move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(async move {
                let connection = zbus::connection::Builder::address(address.as_str())
                    .build()
                    .await
                    .expect("the stranger connects");
                let proxy = Stem1Proxy::builder(&connection)
                    .cache_properties(CacheProperties::No)
                    .build()
                    .await
                    .expect("a Stem1 proxy");
                let name = "@home.2026-12-01T140200.123456Z";
                let (r, w) = pipe();
                let sent = proxy.send_sealed(name, "", w.into()).await.map(|_| ());
                let received = proxy
                    .receive_sealed(name, "6b1ee1b4-3dcd-4ad5-9d0b-2a0cf0b5d2a1", r.into())
                    .await
                    .map(|_| ());
                [("SendSealed", sent), ("ReceiveSealed", received)]
                    .map(|(m, r)| (m, r.map_err(|e| error_name(&e))))
            })
    });
    for (member, result) in refusals {
        assert_eq!(
            result,
            Err("org.tacid.Stem1.Error.AccessDenied".to_owned()),
            "{member} by a stranger"
        );
    }

    // Root is not the keeper either: let through by the same hole, the stem refuses it.
    let reply = dbus_send_as(&bus, 0, 0, "TakeSnapshot", &["string:@home"]);
    assert_eq!(
        reply.error_name(),
        Some("org.tacid.Stem1.Error.AccessDenied"),
        "root: {reply:?}"
    );
    assert_eq!(
        before,
        fs.subvolumes_snapshot().expect("list subvolumes"),
        "nothing may change"
    );
}

/// The keeper's user talking to the stem through the published proxy, on its own thread.
fn as_keeper<T: Send + 'static>(
    bus: &PrivateBus,
    f: impl for<'p> FnOnce(
            &'p Stem1Proxy<'static>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'p>>
        + Send
        + 'static,
) -> T {
    let (uid, gid) = ensure_user(names::KEEPER_USER);
    let address = bus.address().to_owned();
    as_user(uid, gid, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let connection = zbus::connection::Builder::address(address.as_str())
                .build()
                .await
                .expect("the keeper connects to the bus");
            let proxy = Stem1Proxy::builder(&connection)
                .cache_properties(CacheProperties::No)
                .build()
                .await
                .expect("a Stem1 proxy");
            f(&proxy).await
        })
    })
}

fn error_name(e: &stem1::Error) -> String {
    match e {
        stem1::Error::ZBus(zbus::Error::MethodError(name, _, _)) => name.to_string(),
        other => other.name().to_string(),
    }
}

#[test]
fn bus_keeper_takes_lists_stages_withdraws_and_deletes() {
    let Some((fs, bus)) = setup("") else { return };
    let stem = StemDaemon::start(&bus, names::KEEPER_USER, &["--top", &top_arg(&fs)]);
    let idle_kib = stem.rss_kib();

    let report = as_keeper(&bus, |stem| {
        Box::pin(async move {
            let mut report = Vec::new();
            // Take one, then a set.
            let home = stem.take_snapshot("@home").await.expect("take @home");
            assert_eq!(home.of, "@home");
            assert!(home.readonly && !home.staged, "{home:?}");
            let set = stem
                .take_set(vec!["@persist".into(), "@log".into()])
                .await
                .expect("take a set");
            assert_eq!(
                set.iter().map(|s| s.of.as_str()).collect::<Vec<_>>(),
                ["@persist", "@log"]
            );

            // List: all three, newest first, each converting into the engine's type.
            let all = stem.list().await.expect("list");
            assert_eq!(all.len(), 3, "{all:?}");
            assert!(
                all.windows(2)
                    .all(|w| w[0].taken_unix_micros >= w[1].taken_unix_micros),
                "{all:?}"
            );
            for s in &all {
                stem::Snapshot::try_from(s).expect("a well-formed snapshot on the wire");
            }

            // Stage; again (already staged, nothing changed); the staged snapshot is pinned.
            let staged = stem.stage_restore(&home.name).await.expect("stage");
            assert!(!staged.already_staged && staged.reboot_needed, "{staged:?}");
            assert_eq!(
                (
                    staged.request.subvolume.as_str(),
                    staged.request.snapshot.as_str()
                ),
                ("@home", home.name.as_str())
            );
            assert_eq!(
                staged.request.uuid, home.uuid,
                "the request names the very snapshot"
            );
            let again = stem.stage_restore(&home.name).await.expect("stage again");
            assert!(again.already_staged, "{again:?}");
            assert!(
                again.message.contains("nothing changed"),
                "{}",
                again.message
            );
            let pinned = stem
                .delete(&home.name)
                .await
                .expect_err("a staged snapshot cannot be deleted");
            assert_eq!(error_name(&pinned), "org.tacid.Stem1.Error.Pinned");
            let other = stem
                .stage_restore(&set[0].name)
                .await
                .expect_err("another restore");
            assert_eq!(
                error_name(&other),
                "org.tacid.Stem1.Error.AnotherRestoreStaged"
            );
            assert_eq!(
                stem.staged().await.expect("staged"),
                vec![staged.request.clone()]
            );
            assert!(stem
                .list()
                .await
                .expect("list")
                .iter()
                .any(|s| s.name == home.name && s.staged));

            // Withdraw; again (nothing to withdraw); then delete.
            assert_eq!(
                stem.withdraw().await.expect("withdraw"),
                vec![staged.request.clone()]
            );
            assert_eq!(stem.withdraw().await.expect("withdraw again"), vec![]);
            assert_eq!(stem.staged().await.expect("staged"), vec![]);
            stem.delete(&home.name).await.expect("delete");
            let left = stem.list().await.expect("list");
            assert_eq!(left.len(), 2, "{left:?}");

            // Named refusals for what the interface does not do.
            let cases: Vec<(&str, Result<(), stem1::Error>)> = vec![
                ("NoSuchSnapshot", stem.delete(&home.name).await),
                (
                    "InvalidArgument",
                    stem.take_snapshot("/home").await.map(drop),
                ),
                ("InvalidArgument", stem.delete("../@home").await),
                ("InvalidArgument", stem.take_set(vec![]).await.map(drop)),
                (
                    "NotSnapshottable",
                    stem.take_snapshot(layout::SNAPSHOTS_SUBVOLUME)
                        .await
                        .map(drop),
                ),
                (
                    "NotSnapshottable",
                    stem.take_snapshot(layout::ROOT_SUBVOLUME).await.map(drop),
                ),
            ];
            for (expected, result) in cases {
                let e = result.expect_err(expected);
                assert_eq!(
                    error_name(&e),
                    format!("org.tacid.Stem1.Error.{expected}"),
                    "{e}"
                );
            }
            let nix = stem
                .take_snapshot("@nix")
                .await
                .expect("@nix may be snapshotted when named");
            let e = stem
                .stage_restore(&nix.name)
                .await
                .expect_err("@nix is not restorable");
            assert_eq!(error_name(&e), "org.tacid.Stem1.Error.NotRestorable", "{e}");
            assert_eq!(
                stem.outcome().await.expect("outcome"),
                vec![],
                "no boot has run"
            );

            // Round trip of a cheap call (read the staged request), median of 200.
            let mut times = Vec::with_capacity(200);
            for _ in 0..200 {
                let t = Instant::now();
                stem.staged().await.expect("staged");
                times.push(t.elapsed());
            }
            times.sort();
            report.push(format!(
                "round trip (Staged, median of 200): {:?}",
                times[100]
            ));
            let t = Instant::now();
            stem.take_snapshot("@home").await.expect("take @home");
            report.push(format!("TakeSnapshot over the bus: {:?}", t.elapsed()));
            report
        })
    });

    // What the bus said is what the disk holds (the btrfs CLI as an independent oracle).
    let on_disk = fs.subvolumes_snapshot().expect("list subvolumes");
    let snapshots = on_disk
        .iter()
        .filter(|(path, _, _)| path.starts_with(layout::SNAPSHOTS_SUBVOLUME) && path.contains('/'))
        .count();
    assert_eq!(
        snapshots, 4,
        "two of the set, @nix, and the last @home: {on_disk:?}"
    );

    let busy_kib = stem.rss_kib();
    eprintln!("tacid-stem RSS: idle {idle_kib} KiB after start, {busy_kib} KiB after ~220 calls");
    for line in report {
        eprintln!("{line}");
    }
    assert!(stem.stop().success(), "tacid-stem exits cleanly on SIGTERM");
}

#[test]
fn bus_keeper_stages_a_set_as_one_request_and_withdraws_it_whole() {
    let Some((fs, bus)) = setup("") else { return };
    let stem = StemDaemon::start(&bus, names::KEEPER_USER, &["--top", &top_arg(&fs)]);
    let (set, staged) = as_keeper(&bus, |stem| {
        Box::pin(async move {
            let set = stem
                .take_set(vec!["@home".into(), "@log".into(), "@persist".into()])
                .await
                .expect("take a set");
            let names: Vec<String> = set.iter().map(|s| s.name.clone()).collect();
            let staged = stem
                .stage_set_restore(names.clone())
                .await
                .expect("stage the set");
            assert!(!staged.already_staged && staged.reboot_needed, "{staged:?}");
            (set, staged)
        })
    });
    // One request of three lines, in the layout's order, each with its snapshot's UUID.
    let order: Vec<&str> = staged
        .request
        .iter()
        .map(|r| r.subvolume.as_str())
        .collect();
    assert_eq!(order, ["@persist", "@log", "@home"]);
    for r in &staged.request {
        let s = set.iter().find(|s| s.of == r.subvolume).expect("a member");
        assert_eq!((&r.snapshot, &r.uuid), (&s.name, &s.uuid));
    }
    let file = std::fs::read_to_string(
        fs.top()
            .join(layout::SNAPSHOTS_SUBVOLUME)
            .join(layout::REQUEST_FILE_NAME),
    )
    .expect("the request is on disk");
    let expected: String = staged
        .request
        .iter()
        .map(|r| format!("{} {} {}\n", r.subvolume, r.snapshot, r.uuid))
        .collect();
    assert_eq!(file, expected);

    let request = staged.request.clone();
    as_keeper(&bus, move |stem| {
        Box::pin(async move {
            let names: Vec<String> = set.iter().map(|s| s.name.clone()).collect();
            let again = stem
                .stage_set_restore(names.iter().rev().cloned().collect())
                .await
                .expect("the same set again");
            assert!(again.already_staged, "{again:?}");
            assert_eq!(again.request, request);
            assert_eq!(stem.staged().await.expect("staged"), request);
            let listed = stem.list().await.expect("list");
            assert_eq!(listed.iter().filter(|s| s.staged).count(), 3, "{listed:?}");
            // Part of the set, one member alone: another restore.
            for other in [
                stem.stage_set_restore(names[..2].to_vec()).await.map(drop),
                stem.stage_restore(&names[0]).await.map(drop),
            ] {
                let e = other.expect_err("refused while the set is staged");
                assert_eq!(error_name(&e), "org.tacid.Stem1.Error.AnotherRestoreStaged");
            }
            for name in &names {
                let e = stem.delete(name).await.expect_err("every member is pinned");
                assert_eq!(error_name(&e), "org.tacid.Stem1.Error.Pinned");
            }
            // Withdrawn whole: every member comes back in the answer.
            assert_eq!(stem.withdraw().await.expect("withdraw"), request);
            assert_eq!(stem.staged().await.expect("staged"), vec![]);
            // Named refusals for what is not a set.
            let twice = vec![names[0].clone(), names[0].clone()];
            for bad in [vec![], twice, vec!["/home".to_owned()]] {
                let e = stem
                    .stage_set_restore(bad.clone())
                    .await
                    .expect_err("not a set");
                assert_eq!(
                    error_name(&e),
                    "org.tacid.Stem1.Error.InvalidArgument",
                    "{bad:?}: {e}"
                );
            }
            let nix = stem.take_snapshot("@nix").await.expect("@nix when named");
            let e = stem
                .stage_set_restore(vec![names[0].clone(), nix.name])
                .await
                .expect_err("@nix is not restorable");
            assert_eq!(error_name(&e), "org.tacid.Stem1.Error.NotRestorable");
            assert_eq!(stem.staged().await.expect("staged"), vec![]);
        })
    });
    assert!(stem.stop().success(), "tacid-stem exits cleanly on SIGTERM");
}

/// A stem cut short between the request's temporary file and its rename left that file;
/// the next stem removes it at its start, before it serves, and nothing else.
#[test]
fn bus_a_starting_stem_removes_what_cut_short_writes_left_and_only_that() {
    let Some((fs, bus)) = setup("") else { return };
    let store = fs.top().join(layout::SNAPSHOTS_SUBVOLUME);
    let target = fs.top().join("@home/target");
    std::fs::write(&target, "must stay").expect("write");
    std::fs::write(store.join(".tmp.812.0"), "@home a request cut short\n").expect("plant");
    std::fs::write(store.join(".tmp.1.7"), "").expect("plant");
    std::os::unix::fs::symlink(&target, store.join(".tmp.812.1")).expect("symlink");
    std::fs::create_dir(store.join(".tmp.812.2")).expect("mkdir");
    std::fs::write(store.join(".tmp.notours"), "kept").expect("plant");
    let stem = StemDaemon::start(&bus, names::KEEPER_USER, &["--top", &top_arg(&fs)]);
    let mut left: Vec<String> = std::fs::read_dir(&store)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(layout::TEMP_PREFIX))
        .collect();
    left.sort();
    assert_eq!(left, [".tmp.812.1", ".tmp.812.2", ".tmp.notours"]);
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "must stay");
    drop(stem);
}

#[test]
fn bus_keeper_is_answered_by_a_foreign_client_too() {
    // dbus-send is not zbus: the wire format is D-Bus's, not something only our proxy reads.
    let Some((fs, bus)) = setup("") else { return };
    let _stem = StemDaemon::start(&bus, names::KEEPER_USER, &["--top", &top_arg(&fs)]);
    let (uid, gid) = ensure_user(names::KEEPER_USER);
    let Reply::Ok(taken) = dbus_send_as(&bus, uid, gid, "TakeSnapshot", &["string:@log"]) else {
        panic!("the keeper's TakeSnapshot failed")
    };
    assert!(
        taken.contains("string \"@log.") && taken.contains("string \"parent-uuid\""),
        "{taken}"
    );
    let Reply::Ok(listed) = dbus_send_as(&bus, uid, gid, "List", &[]) else {
        panic!("List failed")
    };
    assert!(listed.contains("string \"@log\""), "{listed}");
    let reply = dbus_send_as(&bus, uid, gid, "StageRestore", &["string:@log.not-a-stamp"]);
    assert_eq!(
        reply.error_name(),
        Some("org.tacid.Stem1.Error.InvalidArgument"),
        "{reply:?}"
    );
}

#[test]
fn bus_stem_mounts_its_own_top_privately() {
    let Some((fs, bus)) = setup("") else { return };
    let private = tempfile::Builder::new()
        .prefix("tacid-stem-top-")
        .tempdir()
        .expect("a temporary directory");
    let top = private.path().join("top");
    let device = fs.device().display().to_string();
    let stem = StemDaemon::start(
        &bus,
        names::KEEPER_USER,
        &["--device", &device, "--top", &top.display().to_string()],
    );

    let taken = as_keeper(&bus, |stem| {
        Box::pin(async move { stem.take_snapshot("@home").await.expect("take @home") })
    });
    // The snapshot is on the filesystem, seen through the test's own mount...
    let path = fs.top().join(layout::SNAPSHOTS_SUBVOLUME).join(&taken.name);
    assert!(path.is_dir(), "{} exists", path.display());
    // ...while the stem's mount is in its namespace alone: not in ours, but in its own.
    let ours = std::fs::read_to_string("/proc/self/mountinfo").expect("read our mountinfo");
    let top_text = top.display().to_string();
    assert!(
        !ours.contains(&top_text),
        "the stem's mount leaked into the host namespace:\n{ours}"
    );
    let its = std::fs::read_to_string(format!("/proc/{}/mountinfo", stem.pid()))
        .expect("read its mountinfo");
    let line = its
        .lines()
        .find(|l| l.contains(&top_text))
        .unwrap_or_else(|| panic!("no mount at {top_text} in the stem:\n{its}"));
    assert!(
        line.contains(" / ") && line.contains("subvolid=5"),
        "the top level, subvolid=5: {line}"
    );
    assert!(
        line.contains("nosuid") && line.contains("nodev") && line.contains("noexec"),
        "{line}"
    );
    assert!(stem.stop().success(), "tacid-stem exits cleanly on SIGTERM");
}

#[test]
fn bus_keeper_asks_which_snapshot_holds_the_disk() {
    let Some((fs, bus)) = setup("") else { return };
    let _stem = StemDaemon::start(&bus, names::KEEPER_USER, &["--top", &top_arg(&fs)]);
    let home = fs.top().join("@home");
    std::fs::write(home.join("kept"), common::megabytes(2, 7)).expect("write");
    let first = as_keeper(&bus, |stem| {
        Box::pin(async move { stem.take_snapshot("@home").await.expect("take").name })
    });
    std::fs::remove_file(home.join("kept")).expect("remove");
    // Committed, so that no commit between the two questions moves @home's generation.
    assert!(std::process::Command::new("btrfs")
        .args(["filesystem", "sync"])
        .arg(fs.top())
        .status()
        .expect("btrfs filesystem sync")
        .success());
    let answers = as_keeper(&bus, move |stem| {
        Box::pin(async move {
            let all = stem.space(vec![], 5000).await;
            let again = stem.space(vec![first.clone()], 5000).await;
            let missing = stem
                .space(vec!["@home.2026-12-01T140200.123456Z".into()], 5000)
                .await;
            let bad = stem.space(vec!["@home".into()], 5000).await;
            (first, all, again, missing, bad)
        })
    });
    let (first, all, again, missing, bad) = answers;
    let all = all.expect("space");
    assert!(all.complete);
    assert_eq!(all.snapshots.len(), 1);
    let s = &all.snapshots[0];
    assert_eq!(s.name, first);
    // Removed from @home after the snapshot: only the snapshot holds it now (the stem
    // answers without a commit, but the snapshot itself committed the file).
    assert_eq!(s.exclusive_bytes, 2 << 20, "{all:?}");
    assert!(!s.has_previous);
    let home_row = all
        .subvolumes
        .iter()
        .find(|v| v.subvolume == "@home")
        .expect("@home");
    assert_eq!(
        (home_row.snapshots, home_row.snapshots_exclusive_bytes),
        (1, 2 << 20)
    );
    assert!(!home_row.has_growth, "one snapshot has no growth");
    assert_eq!(all.store_bytes, 2 << 20);
    let again = again.expect("space of one");
    assert_eq!(again.snapshots.len(), 1);
    assert_eq!(
        again.walked, 0,
        "nothing changed, nothing walked again: {again:?}"
    );
    assert_eq!(
        missing.expect_err("not in the store").name(),
        "org.tacid.Stem1.Error.NoSuchSnapshot"
    );
    assert_eq!(
        bad.expect_err("not a snapshot name").name(),
        "org.tacid.Stem1.Error.InvalidArgument"
    );
}

#[test]
fn bus_keeper_asks_what_changed_since_a_snapshot() {
    let Some((fs, bus)) = setup("") else { return };
    let _stem = StemDaemon::start(&bus, names::KEEPER_USER, &["--top", &top_arg(&fs)]);
    let home = fs.top().join("@home");
    let name = as_keeper(&bus, |stem| {
        Box::pin(async move { stem.take_snapshot("@home").await.expect("take").name })
    });
    std::fs::write(home.join("added"), vec![b'x'; 4096]).expect("write");
    std::fs::create_dir(home.join("dir")).expect("mkdir");

    let changes = as_keeper(&bus, move |stem| {
        Box::pin(async move {
            let counted = stem.changes_since(&name, 5000, true).await;
            let nix = stem
                .changes_since("@nix.2026-12-01T140200.123456Z", 5000, false)
                .await;
            let missing = stem
                .changes_since("@home.2026-12-01T140200.123456Z", 5000, false)
                .await;
            (counted, nix, missing)
        })
    });
    let (counted, nix, missing) = changes;
    let c = counted.expect("counted");
    assert_eq!(
        (
            c.files_added,
            c.files_modified,
            c.files_removed,
            c.directories_added,
            c.directories_modified,
            c.bytes_written,
            c.complete
        ),
        (1, 0, 0, 1, 1, 4096, true),
        "{c:?}"
    );
    let mut paths: Vec<_> = c
        .paths
        .iter()
        .map(|p| {
            let path = std::str::from_utf8(&p.path).expect("UTF-8 names here");
            (p.change.as_str(), p.directory, path)
        })
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            ("added", false, "added"),
            ("added", true, "dir"),
            ("modified", true, "")
        ]
    );
    assert_eq!(
        error_name(&nix.expect_err("@nix is never restored")),
        "org.tacid.Stem1.Error.NotRestorable"
    );
    assert_eq!(
        error_name(&missing.expect_err("no such snapshot")),
        "org.tacid.Stem1.Error.NoSuchSnapshot"
    );
}

#[test]
fn bus_keeper_forged_copy_targets_are_refused() {
    let Some((fs, bus)) = setup("") else { return };
    // No configuration file: no targets at all.
    let missing = fs.scratch().join("no-copies.json");
    let _stem = StemDaemon::start(
        &bus,
        names::KEEPER_USER,
        &[
            "--top",
            &top_arg(&fs),
            "--copies-config",
            &missing.display().to_string(),
        ],
    );
    let (uid, gid) = ensure_user(names::KEEPER_USER);
    let before = fs.subvolumes_snapshot().expect("list subvolumes");
    let huge = format!("string:{}", "u".repeat(100_000));
    let name = "string:@home.2026-12-01T140200.123456Z";
    for (target, expected) in [
        ("string:../x", "org.tacid.Stem1.Error.InvalidArgument"),
        (
            "string:/mnt/backup",
            "org.tacid.Stem1.Error.InvalidArgument",
        ),
        (
            "string:ssh://evil/x",
            "org.tacid.Stem1.Error.InvalidArgument",
        ),
        (huge.as_str(), "org.tacid.Stem1.Error.InvalidArgument"),
        ("string:usb", "org.tacid.Stem1.Error.NoSuchTarget"),
    ] {
        for (member, args) in [
            ("CopyTo", vec![name, target]),
            ("CopiesOn", vec![target]),
            ("FetchFrom", vec![target, name]),
        ] {
            match dbus_send_as(&bus, uid, gid, member, &args) {
                Reply::Error { name, message } => {
                    assert_eq!(name, expected, "{member} {target:.40}: {message}");
                    assert!(message.len() < 400, "capped: {} bytes", message.len());
                }
                ok => panic!("{member} {target:.40} was answered: {ok:?}"),
            }
        }
    }
    match dbus_send_as(&bus, uid, gid, "CopyProgress", &[]) {
        Reply::Error { name, message } => panic!("CopyProgress: {name}: {message}"),
        _ok => {}
    }
    assert_eq!(before, fs.subvolumes_snapshot().expect("list subvolumes"));
}

fn pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a pipe")
}

/// The keeper's part in a sealed copy and fetch, played by the test: it hands the stem one
/// end of a pipe and reads (or writes) the other, as the copier would.
#[test]
fn bus_keeper_sends_and_receives_sealed_through_pipes() {
    use std::io::{Read as _, Write as _};
    use stem_interface::pipe::{FrameReader, FrameWriter};

    let Some((fs, bus)) = setup("") else { return };
    let _stem = StemDaemon::start(&bus, names::KEEPER_USER, &["--top", &top_arg(&fs)]);
    std::fs::write(fs.top().join("@home/letter"), b"dear disk").expect("write");
    let before = fs.subvolumes_snapshot().expect("list subvolumes");
    as_keeper(&bus, |stem| {
        Box::pin(async move {
            let s1 = stem.take_snapshot("@home").await.expect("take @home");
            let s2 = stem.take_snapshot("@home").await.expect("take @home again");

            // Send s1 full into a pipe; a thread reads it as the copier would.
            let (r, w) = pipe();
            let reader = std::thread::spawn(move || {
                let mut framed = Vec::new();
                std::fs::File::from(r)
                    .read_to_end(&mut framed)
                    .expect("read");
                framed
            });
            let sent = stem
                .send_sealed(&s1.name, "", w.into())
                .await
                .expect("send s1 sealed");
            let framed = reader.join().expect("the reader");
            assert_eq!(sent.uuid, s1.uuid);
            assert_eq!(sent.parent_uuid, "");
            let mut frames = FrameReader::new(&framed[..]);
            let mut stream = Vec::new();
            frames
                .read_to_end(&mut stream)
                .expect("whole frames, END last");
            assert_eq!(stream.len() as u64, sent.bytes);
            let trailer: serde_json::Value =
                serde_json::from_slice(frames.trailer().expect("a trailer")).expect("JSON");
            assert_eq!(trailer["uuid"], s1.uuid);

            // And s2 against s1.
            let (r, w) = pipe();
            let reader = std::thread::spawn(move || {
                std::fs::File::from(r)
                    .read_to_end(&mut Vec::new())
                    .expect("read")
            });
            let sent2 = stem
                .send_sealed(&s2.name, &s1.name, w.into())
                .await
                .expect("send s2 sealed on s1");
            reader.join().expect("the reader");
            assert_eq!(sent2.parent_uuid, s1.uuid);

            // Not a pipe: refused before anything is sent.
            let file = tempfile::tempfile().expect("a file");
            let refused = stem
                .send_sealed(&s1.name, "", std::os::fd::OwnedFd::from(file).into())
                .await
                .expect_err("a regular file is no pipe");
            assert_eq!(
                error_name(&refused),
                "org.tacid.Stem1.Error.InvalidArgument"
            );

            // s1 gone from the store, fetched back from the pipe.
            stem.delete(&s1.name).await.expect("delete s1");
            let (r, w) = pipe();
            let mut framer = FrameWriter::new(std::fs::File::from(w));
            let uuid = s1.uuid.clone();
            let writer = std::thread::spawn(move || {
                framer.write_all(&stream).expect("write the stream");
                framer
                    .end(&serde_json::json!({"uuid": uuid, "streams": 1, "bytes": stream.len()}))
                    .expect("write the end");
            });
            let (back, bytes) = stem
                .receive_sealed(&s1.name, &s1.uuid, r.into())
                .await
                .expect("receive s1 sealed");
            writer.join().expect("the writer");
            assert_eq!(bytes, sent.bytes);
            assert_eq!(back.name, s1.name);
            assert_eq!(back.origin, stem1::OriginInfo::NameOnly);
            assert!(back.readonly);

            // A forged UUID is refused with the argument capped.
            let (r, _w) = pipe();
            let forged = stem
                .receive_sealed(&s1.name, &"u".repeat(100_000), r.into())
                .await
                .expect_err("not a UUID");
            assert_eq!(error_name(&forged), "org.tacid.Stem1.Error.InvalidArgument");
            assert!(forged.to_string().len() < 400);
            // The write end of a pipe is no place to read from.
            let (_r, w) = pipe();
            let wrong = stem
                .receive_sealed(&s2.name, &s2.uuid, w.into())
                .await
                .expect_err("a write end");
            assert_eq!(error_name(&wrong), "org.tacid.Stem1.Error.InvalidArgument");
        })
    });
    let store = fs.top().join(layout::SNAPSHOTS_SUBVOLUME);
    assert_eq!(
        std::fs::read_dir(store.join(layout::copies::INCOMING_DIR_NAME))
            .expect(".incoming")
            .count(),
        0
    );
    let after = fs.subvolumes_snapshot().expect("list subvolumes");
    assert_eq!(after.len(), before.len() + 2, "s1 (fetched back) and s2");
}
