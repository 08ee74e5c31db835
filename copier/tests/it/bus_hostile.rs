//! A target that serves an older genuine manifest, or a deleted copy's again, and a copier
//! killed mid-upload.

use std::io::Write as _;
use std::time::Duration;

use copier_interface::ErrorKind;

use crate::common::{
    self, incompressible, CopierDaemon, Ending, Places, PrivateBus, FULL, INCR, USB,
};

fn copies(bus: &PrivateBus) -> Vec<copier_interface::SealedCopy> {
    common::call(bus, common::keeper(), |p| {
        Box::pin(async move { p.copies(USB).await })
    })
    .expect("copies")
}

/// The parts stored under their names; not the directory store's own temporary file of a
/// put the kill cut short (`.tmp-…`), which is the store's to remove, not the copier's.
fn stored_parts(places: &Places) -> Vec<String> {
    places
        .parts()
        .into_iter()
        .filter(|p| !p.rsplit('/').next().unwrap_or("").starts_with(".tmp-"))
        .collect()
}

/// A copy of everything the target holds now, as a hostile store would keep it.
fn keep_aside(places: &Places) -> std::path::PathBuf {
    let saved = places.dir.path().join("saved");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(&places.target)
        .arg(&saved)
        .status()
        .expect("cp");
    assert!(cp.success());
    saved
}

/// What was kept aside, put back over what the target holds now.
fn put_back(places: &Places, saved: &std::path::Path) {
    let status = std::process::Command::new("cp")
        .args(["-a", "-T"])
        .arg(saved)
        .arg(&places.target)
        .status()
        .expect("cp back");
    assert!(status.success());
}

#[test]
fn an_older_manifest_put_back_is_untrusted() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible(100_000);
    let uuid = uuid::Uuid::from_u128(0x51);
    let first = common::seal(&bus, FULL, uuid, None, &stream, Ending::End).expect("copy");
    assert_eq!(first.generation, 1);
    // What a hostile store keeps: the whole first copy, manifest and parts.
    let saved = keep_aside(&places);
    common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.delete(USB, FULL).await })
    })
    .expect("delete");
    let second = common::seal(&bus, FULL, uuid, None, &stream, Ending::End).expect("copy again");
    assert_eq!(second.generation, 2);
    // Put the first copy back over the second.
    put_back(&places, &saved);

    let listed = copies(&bus);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(
        listed[0]
            .problem
            .contains("older manifest of @home.2026-12-01T140200.123456Z (generation 1; this machine wrote 2)"),
        "{listed:?}"
    );
    let (answer, read) = common::unseal(&bus, FULL);
    let e = answer.expect_err("refused");
    assert_eq!(e.kind(), Some(ErrorKind::Untrusted), "{e:?}");
    assert!(e.message().contains("older manifest"), "{}", e.message());
    let stem_saw = read.expect_err("the stem gets no END");
    assert!(stem_saw.contains("older manifest"), "{stem_saw}");
    let verified = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.verify(USB, vec![FULL.into()]).await })
    })
    .expect("verify answers");
    assert!(
        !verified[0].ok && verified[0].problem.contains("older manifest"),
        "{verified:?}"
    );
    // Nor is a copy sealed on it: its chain would restore from the copy put back.
    let e = common::seal(
        &bus,
        INCR,
        uuid::Uuid::from_u128(0x52),
        Some((FULL, uuid)),
        &stream,
        Ending::End,
    )
    .expect_err("refused");
    assert_eq!(e.kind(), Some(ErrorKind::Untrusted), "{e:?}");
    assert!(
        e.message().contains("older manifest") && e.message().contains("was not sealed on it"),
        "{}",
        e.message()
    );
}

#[test]
fn a_deleted_copy_put_back_is_untrusted() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible(100_000);
    let uuid = uuid::Uuid::from_u128(0x53);
    let copy = common::seal(&bus, FULL, uuid, None, &stream, Ending::End).expect("copy");
    // What a hostile store keeps: the whole copy, manifest and parts.
    let saved = keep_aside(&places);
    let before = std::time::SystemTime::now();
    common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.delete(USB, FULL).await })
    })
    .expect("delete");
    let after = std::time::SystemTime::now();
    assert!(places.objects().is_empty(), "{:?}", places.objects());
    // The copier's record names it, durably (the file is what outlives a restart).
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(places.state.join("generations.json")).expect("the record"),
    )
    .expect("JSON");
    let tomb = &record["targets"][USB]["deleted"][FULL];
    assert_eq!(tomb["uuid"], uuid.hyphenated().to_string(), "{record}");
    assert_eq!(tomb["generation"], copy.generation, "{record}");
    // Put the deleted copy back, whole and genuine.
    put_back(&places, &saved);

    let deleted_at = |text: &str| {
        text.contains(&format!(
            "a manifest of {FULL} (generation {}), a copy that was deleted on this machine at ",
            copy.generation
        )) && [before, after]
            .iter()
            .any(|t| text.contains(&format!("at {}:", time_of(*t))))
    };
    let listed = copies(&bus);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(deleted_at(&listed[0].problem), "{listed:?}");
    let (answer, read) = common::unseal(&bus, FULL);
    let e = answer.expect_err("refused");
    assert_eq!(e.kind(), Some(ErrorKind::Untrusted), "{e:?}");
    assert!(deleted_at(&e.message()), "{}", e.message());
    let stem_saw = read.expect_err("the stem gets no END");
    assert!(stem_saw.contains("deleted on this machine"), "{stem_saw}");
    let verified = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.verify(USB, vec![FULL.into()]).await })
    })
    .expect("verify answers");
    assert!(
        !verified[0].ok && deleted_at(&verified[0].problem),
        "{verified:?}"
    );
    // A new copy of the same snapshot is good again; the deleted one stays refused.
    common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.delete(USB, FULL).await })
    })
    .expect("the served-again copy deleted");
    let again = common::seal(&bus, FULL, uuid, None, &stream, Ending::End).expect("copy again");
    assert!(again.generation > copy.generation);
    let listed = copies(&bus);
    assert_eq!(listed[0].problem, "", "{listed:?}");
}

/// `t` to the minute, in UTC, as the copier words a time (`2026-12-05 14:10`).
fn time_of(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%d %H:%M"])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_copier_killed_mid_upload_leaves_nothing_listed_and_a_writing_act_cleans_once_old() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible((layout::defaults::SEAL_PART_BYTES * 2) + (1 << 20));
    let uuid = uuid::Uuid::from_u128(0x52);
    let (r, w) = common::pipe();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    // Two parts' worth: the compressor (one zstd worker) holds a job of input before any of
    // it comes out, so one part's worth and a little may not yet have filled a part.
    let half = 2 * layout::defaults::SEAL_PART_BYTES;
    let head = stream[..half].to_vec();
    let writer = std::thread::spawn(move || {
        let mut out = stem_interface::pipe::FrameWriter::new(std::fs::File::from(w));
        // The copier is killed while this writes: a broken pipe then is the point.
        if out.write_all(&head).and_then(|()| out.flush()).is_ok() {
            let _ = wait.recv();
        }
    });
    let address_bus = &bus;
    std::thread::scope(|s| {
        let sealing = s.spawn(move || {
            common::call(address_bus, common::keeper(), move |p| {
                Box::pin(async move {
                    p.seal(USB, FULL, &uuid.to_string(), "", "", common::fd(r))
                        .await
                })
            })
        });
        let uploaded = testbed::wait_until(Duration::from_secs(60), || {
            !stored_parts(&places).is_empty()
        });
        if uploaded.is_none() {
            let doing = common::call(address_bus, common::keeper(), |p| {
                Box::pin(async move { p.progress().await })
            });
            panic!("no part was stored while the stream was cut short; the copier was doing {doing:?}; in the store: {:?}", places.parts());
        }
        copier.kill();
        let answer = sealing.join().expect("the call");
        assert!(answer.is_err(), "{answer:?}");
    });
    let _ = go.send(());
    writer.join().expect("the writer");
    assert!(
        !stored_parts(&places).is_empty(),
        "the dead copier left its parts"
    );

    let _copier = CopierDaemon::start(&bus, &places);
    assert!(copies(&bus).is_empty(), "nothing listed");
    let orphans = places.parts();
    // Young, they may be another machine's copy in flight on the same place (the same key
    // imported during a move): neither a listing nor a writing act removes them.
    assert_eq!(places.parts(), orphans, "a listing removed parts");
    let other = uuid::Uuid::from_u128(0x54);
    common::seal(
        &bus,
        INCR,
        other,
        None,
        &incompressible(50_000),
        Ending::End,
    )
    .expect("a copy");
    for orphan in &orphans {
        assert!(
            places.parts().contains(orphan),
            "{orphan} was removed while young"
        );
    }
    // A day and a minute later (their time set back, the store's own clock): the next act
    // that writes removes them, and the temporary file the kill left.
    for orphan in &orphans {
        let when = std::time::SystemTime::now() - Duration::from_secs(24 * 3600 + 60);
        std::fs::File::options()
            .write(true)
            .open(places.target.join(orphan))
            .and_then(|f| f.set_times(std::fs::FileTimes::new().set_modified(when)))
            .expect("age the orphan");
    }
    common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.delete(USB, INCR).await })
    })
    .expect("delete");
    let parts = places.parts();
    assert!(parts.is_empty(), "cleaned: {parts:?}");
}

#[test]
fn a_flipped_byte_fails_verify_and_unseal_hands_the_stem_an_abort_not_an_end() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let stream = incompressible(200_000);
    let uuid = uuid::Uuid::from_u128(0x53);
    common::seal(&bus, FULL, uuid, None, &stream, Ending::End).expect("copy");
    let part = places.target.join(&stored_parts(&places)[0]);
    let mut bytes = std::fs::read(&part).expect("read the part");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&part, &bytes).expect("write the part back");

    let verified = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.verify(USB, vec![]).await })
    })
    .expect("verify answers");
    assert_eq!(verified.len(), 1);
    assert!(!verified[0].ok, "{verified:?}");
    assert!(!verified[0].problem.is_empty());
    let (answer, read) = common::unseal(&bus, FULL);
    let e = answer.expect_err("refused");
    assert_eq!(e.kind(), Some(ErrorKind::Untrusted), "{e:?}");
    let stem_saw = read.expect_err("no END reaches the stem");
    assert!(stem_saw.contains("abort"), "{stem_saw}");
}

#[test]
fn a_stem_that_stops_writing_is_given_up_and_the_target_is_free_again() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start_args(&bus, &places, &[], &["--stall-secs", "2"]);
    let (r, w) = common::pipe();
    let stream = incompressible(50_000);
    let uuid = uuid::Uuid::from_u128(0x54);
    let (done, wait) = std::sync::mpsc::channel::<()>();
    // Writes part of the stream and then neither writes nor closes, until the test ends.
    let writer = std::thread::spawn(move || {
        let mut out = stem_interface::pipe::FrameWriter::new(std::fs::File::from(w));
        let _ = out.write_all(&stream[..20_000]).and_then(|()| out.flush());
        let _ = wait.recv();
    });
    let started = std::time::Instant::now();
    let answer = common::call(&bus, common::keeper(), move |p| {
        Box::pin(async move {
            p.seal(USB, FULL, &uuid.to_string(), "", "", common::fd(r))
                .await
        })
    });
    let e = answer.expect_err("given up");
    assert!(
        e.message().contains("moved nothing for 2 s"),
        "{}",
        e.message()
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let _ = done.send(());
    writer.join().expect("writer");
    assert!(copies(&bus).is_empty());
    assert!(stored_parts(&places).is_empty());
}
