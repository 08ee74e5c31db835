//! The copier on a real bus, as its own user, called as the keeper would call it: sealed
//! copies of real Btrfs send streams into a directory target, listed, verified, unsealed
//! and received again; and every way a call or a stream is refused.

use std::time::Duration;

use copier_interface::ErrorKind;

use crate::common::{self, CopierDaemon, Ending, Places, PrivateBus, FULL, INCR, PLAIN, USB};

fn kind<T: std::fmt::Debug>(r: &Result<T, copier_interface::Error>) -> Option<ErrorKind> {
    r.as_ref().err().and_then(|e| e.kind())
}

#[test]
fn only_the_keepers_user_is_served() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let stranger = common::user(common::STRANGER);
    let refused = common::call(&bus, stranger, |p| {
        Box::pin(async move { p.targets().await })
    });
    let e = refused.expect_err("a stranger is refused");
    assert_eq!(e.kind(), Some(ErrorKind::NotPermitted), "{e:?}");
    assert!(
        e.message().contains("may not call the copier"),
        "{}",
        e.message()
    );
    // The copier's own user is not the keeper either: the bus refuses it before the
    // copier (its policy lets only the keeper's user send).
    let own = common::call(&bus, common::copier_user(), |p| {
        Box::pin(async move { p.targets().await })
    });
    assert!(own.is_err(), "{own:?}");
    let targets = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.targets().await })
    })
    .expect("the keeper is served");
    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, [USB], "only the sealed target");
    assert_eq!(targets[0].full_every, layout::defaults::SEAL_FULL_EVERY);
    assert_eq!(targets[0].place_shown, places.target.display().to_string());
    // A Btrfs target is the stem's, an unknown one nobody's.
    for target in [PLAIN, "nowhere"] {
        let r = common::call(&bus, common::keeper(), move |p| {
            Box::pin(async move { p.copies(target).await })
        });
        assert_eq!(kind(&r), Some(ErrorKind::NotConfigured), "{target}: {r:?}");
    }
    // Not a pipe: refused before a byte is read.
    let file = std::fs::File::open("/dev/null").expect("null");
    let r = common::call(&bus, common::keeper(), move |p| {
        Box::pin(async move {
            p.seal(
                USB,
                FULL,
                &uuid::Uuid::nil().to_string(),
                "",
                "",
                common::fd(file.into()),
            )
            .await
        })
    });
    assert_eq!(kind(&r), Some(ErrorKind::InvalidArgument), "{r:?}");
}

#[test]
fn sealed_copies_round_trip_and_a_needed_parent_is_kept() {
    if !common::require() {
        return;
    }
    let Some(streams) = common::streams(200, 40) else {
        return;
    };
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);

    let full = common::seal(
        &bus,
        FULL,
        streams.full_uuid,
        None,
        &streams.full,
        Ending::End,
    )
    .expect("the full copy");
    assert_eq!((full.depth, full.generation), (0, 1));
    assert_eq!(full.plain_bytes, streams.full.len() as u64);
    let incr = common::seal(
        &bus,
        INCR,
        streams.incr_uuid,
        Some((FULL, streams.full_uuid)),
        &streams.incr,
        Ending::End,
    )
    .expect("the incremental copy");
    assert_eq!((incr.depth, incr.generation), (1, 2));
    assert!(incr.stored_bytes < full.stored_bytes);

    let copies = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.copies(USB).await })
    })
    .expect("copies");
    let listed: Vec<(&str, u32, &str)> = copies
        .iter()
        .map(|c| (c.name.as_str(), c.depth, c.problem.as_str()))
        .collect();
    assert_eq!(listed, [(FULL, 0, ""), (INCR, 1, "")]);
    assert_eq!(copies[1].parent_uuid, streams.full_uuid.to_string());

    let verified = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.verify(USB, vec![]).await })
    })
    .expect("verify");
    assert_eq!(verified.len(), 2);
    for v in &verified {
        assert!(v.ok && v.problem.is_empty(), "{v:?}");
    }
    // Each stored copy read once, and its bytes counted for its own name: the full's chain
    // is read for FULL, and not again (nor counted again) for INCR.
    let read: Vec<(&str, u64)> = verified
        .iter()
        .map(|v| (v.name.as_str(), v.bytes_read))
        .collect();
    assert_eq!(read, [(FULL, full.stored_bytes), (INCR, incr.stored_bytes)]);

    let (answer, read) = common::unseal(&bus, INCR);
    let unsealed = answer.expect("unseal");
    assert_eq!(unsealed.chain, [FULL, INCR]);
    assert_eq!(unsealed.uuid, streams.incr_uuid.to_string());
    let (bytes, trailer) = read.expect("frames up to the END");
    let mut both = streams.full.clone();
    both.extend_from_slice(&streams.incr);
    assert_eq!(bytes.len(), both.len());
    assert!(
        bytes == both,
        "the unsealed chain is the two streams, byte for byte"
    );
    let trailer: serde_json::Value = serde_json::from_slice(&trailer).expect("JSON trailer");
    assert_eq!(trailer["uuid"], streams.incr_uuid.to_string());
    assert_eq!(trailer["streams"], 2);
    assert_eq!(trailer["bytes"], both.len() as u64);
    common::receive_and_compare(&streams.fs, &bytes, INCR);

    // The full copy is the incremental's parent: not deleted while so.
    let r = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.delete(USB, FULL).await })
    });
    let e = r.expect_err("needed");
    assert_eq!(e.kind(), Some(ErrorKind::Needed));
    assert!(
        e.message().contains(&format!("needed by {INCR}")),
        "{}",
        e.message()
    );
    for name in [INCR, FULL] {
        common::call(&bus, common::keeper(), move |p| {
            Box::pin(async move { p.delete(USB, name).await })
        })
        .expect("delete");
    }
    assert!(places.objects().is_empty(), "{:?}", places.objects());
}

#[test]
fn a_stream_cut_short_or_misnamed_leaves_no_copy_and_its_parts_are_cleaned() {
    if !common::require() {
        return;
    }
    let Some(streams) = common::streams(100, 10) else {
        return;
    };
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    let wrong = serde_json::json!({"uuid": uuid::Uuid::from_u128(7), "parent_uuid": null, "bytes": streams.full.len()});
    for (ending, words) in [
        (Ending::AbortHalfway, "the test says so"),
        (Ending::DieHalfway, "end"),
        (Ending::Trailer(wrong), "not"),
    ] {
        let r = common::seal(
            &bus,
            FULL,
            streams.full_uuid,
            None,
            &streams.full,
            ending.clone(),
        );
        let e = r.expect_err("no copy");
        assert!(e.message().contains(words), "{ending:?}: {}", e.message());
        let copies = common::call(&bus, common::keeper(), |p| {
            Box::pin(async move { p.copies(USB).await })
        })
        .expect("copies");
        assert!(copies.is_empty(), "{ending:?}: {copies:?}");
        assert!(
            places.parts().is_empty(),
            "{ending:?}: parts left: {:?}",
            places.parts()
        );
    }
    // And the copy is made when the stream is whole.
    common::seal(
        &bus,
        FULL,
        streams.full_uuid,
        None,
        &streams.full,
        Ending::End,
    )
    .expect("a whole stream makes the copy");
}

#[test]
fn one_act_per_target_and_progress_shows_it() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    let _copier = CopierDaemon::start(&bus, &places);
    // A writer that sends a little and then waits: the seal holds the target.
    let (r, w) = common::pipe();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let stream = testbed::send_stream::stream(&[]);
    let uuid = uuid::Uuid::from_u128(1);
    let writer = std::thread::spawn(move || {
        use std::io::Write as _;
        let mut out = stem_interface::pipe::FrameWriter::new(std::fs::File::from(w));
        out.write_all(&stream).expect("write");
        out.flush().expect("flush");
        let _ = wait.recv();
        out.abort("the test is done");
    });
    let sealing = {
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
            let seen = testbed::wait_until(Duration::from_secs(20), || {
                common::call(&bus, common::keeper(), |p| {
                    Box::pin(async move { p.progress().await })
                })
                .expect("progress")
                .iter()
                .any(|a| a.target == USB && a.name == FULL && a.doing == "seal" && a.moved > 0)
            });
            assert!(seen.is_some(), "Progress never showed the seal");
            let busy = common::call(&bus, common::keeper(), |p| {
                Box::pin(async move { p.copies(USB).await })
            });
            let e = busy.expect_err("busy");
            assert_eq!(e.kind(), Some(ErrorKind::Busy), "{e:?}");
            assert!(
                e.message().contains("target usb is busy (seal"),
                "{}",
                e.message()
            );
            go.send(()).expect("let the writer go");
            sealing.join().expect("the sealing call")
        })
    };
    writer.join().expect("the writer");
    assert!(sealing.is_err(), "an aborted stream is no copy");
    let after = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.progress().await })
    })
    .expect("progress");
    assert!(after.is_empty(), "{after:?}");
    assert!(places.parts().is_empty());
}

#[test]
fn a_configuration_others_may_change_serves_no_target_and_says_why() {
    if !common::require() {
        return;
    }
    let bus = PrivateBus::start();
    let places = Places::new("");
    std::fs::set_permissions(
        &places.config,
        std::os::unix::fs::PermissionsExt::from_mode(0o664),
    )
    .expect("chmod");
    let _copier = CopierDaemon::start(&bus, &places);
    let targets = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.targets().await })
    })
    .expect("targets");
    assert!(targets.is_empty(), "{targets:?}");
    let e = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.copies(USB).await })
    })
    .expect_err("no target");
    assert_eq!(e.kind(), Some(ErrorKind::NotConfigured));
    assert!(
        e.message().contains("writable by group or others") && e.message().contains("chmod 0644"),
        "{}",
        e.message()
    );
}
