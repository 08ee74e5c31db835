//! A real Garage, through the S3 store.

use std::time::Duration;

use seal::{S3Credentials, StorePlace};

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
