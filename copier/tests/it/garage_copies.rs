//! A sealed S3 target on a real Garage: a copy made, listed, verified and unsealed; and a
//! credentials file others may read refused with the fix.

use std::os::unix::fs::PermissionsExt as _;

use copier_interface::ErrorKind;

use crate::common::{self, CopierDaemon, Ending, Places, PrivateBus, FULL, INCR};

const CLOUD: &str = "cloud";

#[test]
fn a_copy_round_trips_through_garage() {
    if !common::require() {
        return;
    }
    let Some(garage) = testbed::garage::Garage::start().expect("start Garage") else {
        return;
    };
    let Some(streams) = common::streams(100, 20) else {
        return;
    };
    let bus = PrivateBus::start();
    let dir = tempfile::tempdir().expect("a directory");
    let credentials = dir.path().join("cloud.credentials");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(
        &credentials,
        serde_json::json!({"access_key_id": garage.key_id(), "secret_access_key": garage.secret()})
            .to_string(),
    )
    .expect("write the credentials");
    let (cuid, cgid) = common::copier_user();
    common::chown(&credentials, cuid, cgid);
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let places = Places::new(&format!(
        r#""{CLOUD}": {{"place": "s3://{}:{}/{}/machines/one", "seal": {{"credentials": "{}", "region": "{}", "http": true}}}}"#,
        garage.host(),
        garage.port(),
        garage.bucket(),
        credentials.display(),
        garage.region()
    ));
    let _copier = CopierDaemon::start(&bus, &places);

    let seal = |name: &'static str,
                uuid: uuid::Uuid,
                parent: Option<(&'static str, uuid::Uuid)>,
                stream: Vec<u8>| {
        let (r, w) = common::pipe();
        let writer = common::write_frames(w, stream, uuid, parent.map(|p| p.1), Ending::End);
        let (pn, pu) = parent
            .map(|(n, u)| (n.to_owned(), u.to_string()))
            .unwrap_or_default();
        let answer = common::call(&bus, common::keeper(), move |p| {
            Box::pin(async move {
                p.seal(CLOUD, name, &uuid.to_string(), &pn, &pu, common::fd(r))
                    .await
            })
        });
        writer.join().expect("writer");
        answer
    };
    let full = seal(FULL, streams.full_uuid, None, streams.full.clone()).expect("the full copy");
    assert_eq!(full.depth, 0);
    let incr = seal(
        INCR,
        streams.incr_uuid,
        Some((FULL, streams.full_uuid)),
        streams.incr.clone(),
    )
    .expect("the incremental copy");
    assert_eq!(incr.depth, 1);
    let listed = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.copies(CLOUD).await })
    })
    .expect("copies");
    let names: Vec<&str> = listed.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, [FULL, INCR]);
    let verified = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.verify(CLOUD, vec![]).await })
    })
    .expect("verify");
    assert!(verified.iter().all(|v| v.ok), "{verified:?}");
    let (r, w) = common::pipe();
    let reader = common::read_frames(r);
    let unsealed = common::call(&bus, common::keeper(), move |p| {
        Box::pin(async move { p.unseal(CLOUD, INCR, common::fd(w)).await })
    })
    .expect("unseal");
    assert_eq!(unsealed.chain, [FULL, INCR]);
    let (bytes, _) = reader.join().expect("reader").expect("frames to the END");
    common::receive_and_compare(&streams.fs, &bytes, INCR);

    // Credentials others may read: refused, with the fix.
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let e = common::call(&bus, common::keeper(), |p| {
        Box::pin(async move { p.copies(CLOUD).await })
    })
    .expect_err("unsafe credentials");
    assert_eq!(e.kind(), Some(ErrorKind::KeyUnsafe), "{e:?}");
    assert!(e.message().contains("chmod 0600"), "{}", e.message());
}
