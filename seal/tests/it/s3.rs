//! A real Garage, through the S3 store.

use std::time::Duration;

use seal::{S3Credentials, Store as _, StorePlace};

use crate::common;

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub fn place(garage: &testbed::garage::Garage, prefix: &str) -> StorePlace {
    StorePlace::S3 {
        host: garage.host().into(),
        port: Some(garage.port()),
        bucket: garage.bucket().into(),
        prefix: prefix.into(),
        region: garage.region().into(),
        credentials: S3Credentials {
            access_key_id: garage.key_id().into(),
            secret_access_key: garage.secret().into(),
        },
        allow_http: true,
        connect_timeout: Some(Duration::from_secs(5)),
        request_timeout: Some(Duration::from_secs(30)),
    }
}

#[test]
fn round_trip_through_garage() {
    let Some(garage) = testbed::garage::Garage::start().unwrap() else {
        return;
    };
    let Some(streams) = common::streams(300, 100) else {
        return;
    };
    let rt = runtime();
    let store = seal::open_store(&place(&garage, "machines/laptop"), rt.handle().clone()).unwrap();
    common::round_trip(&*store, &streams);
}

#[test]
fn garage_a_part_changed_in_the_bucket_is_refused_and_a_full_bucket_is_full() {
    use std::sync::atomic::AtomicU64;
    let Some(garage) = testbed::garage::Garage::start().unwrap() else {
        return;
    };
    let rt = runtime();
    let store = seal::open_store(&place(&garage, ""), rt.handle().clone()).unwrap();
    let key = seal::SealKey::generate();
    let stream = common::synthetic(100_000, 1);
    let a = "@home.2026-12-01T140200.123456Z";
    let m = common::seal_small(
        &*store,
        &key,
        common::meta(a, uuid::Uuid::from_u128(1), None),
        1,
        &stream,
        16 << 10,
    );
    // The bucket's owner rewrites part 2 with other bytes of the same size.
    let part = seal::part_key(key.key_id(), &m.copy_id, 2);
    let mut bytes = store.get(&part, 1 << 20).unwrap();
    bytes[500] ^= 0xff;
    store.put(&part, &bytes).unwrap();
    let chain = seal::chain(&*store, &key, &common::name(a)).unwrap();
    let mut out = Vec::new();
    let e = seal::unseal(&*store, &key, &chain, &mut out, &AtomicU64::new(0)).unwrap_err();
    assert!(matches!(e, seal::SealError::Untrusted(_)), "{e:?}");
    assert!(e.to_string().contains("part 2 of"), "{e}");
    assert!(
        e.to_string().contains(garage.bucket()),
        "names the store: {e}"
    );
    assert!(stream.starts_with(&out) && out.len() <= 2 * (16 << 10));

    // A quota reached: Full, in words.
    garage
        .cli(&[
            "bucket",
            "set-quotas",
            "--max-size",
            "200KB",
            garage.bucket(),
        ])
        .unwrap();
    let b = "@home.2026-12-02T140200.123456Z";
    let e = seal::seal_with(
        &*store,
        &key,
        common::meta(b, uuid::Uuid::from_u128(2), None),
        2,
        &mut &common::synthetic(400_000, 2)[..],
        &AtomicU64::new(0),
        16 << 10,
    )
    .unwrap_err();
    assert!(matches!(e, seal::SealError::Full(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("free space there or raise its quota"),
        "{e}"
    );
    // Nothing of the refused copy is counted.
    let listed = seal::copies(&*store, &key).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
}

#[test]
fn garage_wrong_credentials_are_said_so() {
    let Some(garage) = testbed::garage::Garage::start().unwrap() else {
        return;
    };
    let mut place = place(&garage, "");
    if let StorePlace::S3 { credentials: c, .. } = &mut place {
        *c = S3Credentials {
            access_key_id: garage.key_id().into(),
            secret_access_key: "0".repeat(64),
        };
        assert!(
            !format!("{c:?}").contains(&"0".repeat(64)),
            "Debug shows the secret"
        );
    }
    let rt = runtime();
    let store = seal::open_store(&place, rt.handle().clone()).unwrap();
    let e = store.put("tacid-v1/x", b"x").unwrap_err();
    assert!(matches!(e, seal::StoreError::Io(_)), "{e:?}");
    assert!(e.to_string().contains("refused the credentials"), "{e}");
    assert!(e.to_string().contains("check the credentials file"), "{e}");
}

#[test]
fn garage_every_prefix_the_configuration_accepts_holds_copies() {
    use std::sync::atomic::AtomicU64;
    let Some(garage) = testbed::garage::Garage::start().unwrap() else {
        return;
    };
    let rt = runtime();
    let key = seal::SealKey::generate();
    let a = "@home.2026-12-01T140200.123456Z";
    // Spaces, leading dots, '%', '#', '~' and non-ASCII: all valid in a place's prefix.
    for (i, prefix) in [
        "machines/laptop",
        "a b/.x/..y",
        "100%/#1/~z/\u{e9}t\u{e9}",
        "p",
    ]
    .into_iter()
    .enumerate()
    {
        let text = format!(
            "s3://{}:{}/{}/{prefix}",
            garage.host(),
            garage.port(),
            garage.bucket()
        );
        let layout::copies::Place::S3 { prefix: parsed, .. } =
            layout::copies::Place::parse(&text).unwrap()
        else {
            panic!("{text}")
        };
        let store = seal::open_store(&place(&garage, &parsed), rt.handle().clone())
            .unwrap_or_else(|e| panic!("{prefix:?}: {e}"));
        let m = common::seal_small(
            &*store,
            &key,
            common::meta(a, uuid::Uuid::from_u128(i as u128 + 1), None),
            1,
            &common::synthetic(40_000, i as u64),
            16 << 10,
        );
        // Each prefix sees its own copy only.
        let listed = seal::copies(&*store, &key).unwrap();
        assert_eq!(listed, vec![seal::Listed::Good(m)], "{prefix:?}");
        seal::verify(&*store, &key, &common::name(a), &AtomicU64::new(0)).unwrap();
    }
    // What the configuration refuses, the store refuses alike.
    for bad in [
        "a//b",
        "a/../b",
        "a/\n",
        &"p".repeat(layout::copies::S3_MAX_PREFIX_BYTES + 1),
    ] {
        assert!(layout::copies::check_s3_prefix(bad).is_err());
        assert!(
            seal::open_store(&place(&garage, bad), rt.handle().clone()).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn garage_orphans_are_kept_while_young_and_listings_are_capped() {
    use std::time::Duration;
    let Some(garage) = testbed::garage::Garage::start().unwrap() else {
        return;
    };
    let rt = runtime();
    let place = place(&garage, "cap");
    let store = seal::S3Store::open(&place, rt.handle().clone()).unwrap();
    let key = seal::SealKey::generate();
    let orphan = format!("tacid-v1/{}/parts/{}/000000", key.key_id(), "ab".repeat(16));
    store.put(&orphan, b"a part of a copy in flight").unwrap();
    let listed = store.list("tacid-v1/").unwrap();
    assert!(listed[0].modified.is_some(), "{listed:?}");
    let report = seal::clean(&store, &key).unwrap();
    assert_eq!((report.parts, report.young.len()), (0, 1), "{report:?}");
    assert!(store.get(&orphan, 100).is_ok());
    // Aged past the grace period (injected: a grace of nothing).
    let report = seal::clean_older_than(&store, &key, Duration::ZERO).unwrap();
    assert_eq!(report.parts, 1, "{report:?}");
    assert!(store.get(&orphan, 100).is_err());
    for i in 0..4 {
        store.put(&format!("tacid-v1/x/{i:06}"), b"x").unwrap();
    }
    let capped = seal::S3Store::open(&place, rt.handle().clone())
        .unwrap()
        .with_max_listed(3);
    let e = capped.list("tacid-v1/").unwrap_err();
    assert!(e.to_string().contains("more than 3 objects"), "{e}");
}
