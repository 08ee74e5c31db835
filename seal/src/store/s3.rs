//! S3-compatible object storage (Garage, MinIO, AWS) through `object_store`: path-style
//! requests, signed payloads (every request carries `x-amz-content-sha256`, which Garage
//! requires), client timeouts, and an overall bound on each operation.

use std::time::Duration;

use futures_util::TryStreamExt as _;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore as _, ObjectStoreExt as _, RetryConfig};

use super::{check_key, check_prefix, too_many_listed, Object, Store, StorePlace, MAX_LISTED};
use crate::error::{capped, StoreError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Retries of a failed request (object_store retries 5xx and connection errors).
const RETRIES: usize = 2;

/// A [`Store`] in an S3 bucket, under a prefix.
#[derive(Debug)]
pub struct S3Store {
    store: AmazonS3,
    runtime: tokio::runtime::Handle,
    prefix: String,
    shown: String,
    /// The most one operation may take in all (retries included).
    bound: Duration,
    max_listed: usize,
}

impl S3Store {
    /// The store at `place` (an [`StorePlace::S3`]); its requests run on `runtime`.
    pub fn open(
        place: &StorePlace,
        runtime: tokio::runtime::Handle,
    ) -> Result<S3Store, StoreError> {
        let StorePlace::S3 {
            host,
            port,
            bucket,
            prefix,
            region,
            credentials,
            allow_http,
            connect_timeout,
            request_timeout,
        } = place
        else {
            return Err(StoreError::Io("not an S3 place".into()));
        };
        let scheme = if *allow_http { "http" } else { "https" };
        let host_shown = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let endpoint = match port {
            Some(p) => format!("{scheme}://{host_shown}:{p}"),
            None => format!("{scheme}://{host_shown}"),
        };
        // Any prefix the configuration accepts (one rule for both, in layout), as the
        // object names it gives: object_store leaves its characters as they are.
        let prefix = prefix.trim_matches('/').to_owned();
        layout::copies::check_s3_prefix(&prefix).map_err(|e| {
            StoreError::Io(format!(
                "the S3 target {endpoint}/{bucket}: {e}; change the place's prefix"
            ))
        })?;
        let connect = connect_timeout.unwrap_or(CONNECT_TIMEOUT);
        let request = request_timeout.unwrap_or(REQUEST_TIMEOUT);
        let retry = RetryConfig {
            max_retries: RETRIES,
            retry_timeout: request * (RETRIES as u32 + 1),
            ..RetryConfig::default()
        };
        let store = AmazonS3Builder::new()
            .with_endpoint(&endpoint)
            .with_bucket_name(bucket)
            .with_region(region)
            .with_access_key_id(&credentials.access_key_id)
            .with_secret_access_key(&credentials.secret_access_key)
            .with_allow_http(*allow_http)
            .with_virtual_hosted_style_request(false)
            // Signed payloads: x-amz-content-sha256 is the body's digest, never UNSIGNED.
            .with_unsigned_payload(false)
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(*allow_http)
                    .with_connect_timeout(connect)
                    .with_timeout(request),
            )
            .with_retry(retry)
            .build()
            .map_err(|e| {
                StoreError::Io(format!(
                    "the S3 target {endpoint}/{bucket}: {}",
                    capped(&e.to_string())
                ))
            })?;
        let shown = if prefix.is_empty() {
            format!("the S3 bucket {bucket} at {endpoint}")
        } else {
            format!("the S3 bucket {bucket} at {endpoint} (under {prefix}/)")
        };
        Ok(S3Store {
            store,
            runtime,
            prefix,
            shown,
            bound: (connect + request) * (RETRIES as u32 + 1) + Duration::from_secs(5),
            max_listed: MAX_LISTED,
        })
    }

    /// Another cap on the objects one listing may return (tests of the cap).
    pub fn with_max_listed(mut self, max: usize) -> S3Store {
        self.max_listed = max;
        self
    }

    fn path(&self, key: &str) -> Result<ObjectPath, StoreError> {
        check_key(key)?;
        Ok(self.object_path(key))
    }

    fn object_path(&self, key: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(key)
        } else {
            ObjectPath::from_iter(self.prefix.split('/').chain(key.split('/')))
        }
    }

    /// Run `f` on the runtime, bounded in time.
    fn run<T>(
        &self,
        doing: &str,
        f: impl std::future::Future<Output = Result<T, object_store::Error>>,
    ) -> Result<T, StoreError> {
        let bound = self.bound;
        match self.runtime.block_on(async { tokio::time::timeout(bound, f).await }) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(doing, e)),
            Err(_) => Err(StoreError::Unreachable(format!(
                "{} did not answer to {doing} within {} s; check the endpoint and the network, then try again",
                self.shown,
                bound.as_secs()
            ))),
        }
    }

    fn error(&self, doing: &str, e: object_store::Error) -> StoreError {
        let said = capped(&format!("{e}"));
        // object_store's errors carry the HTTP answer only in words.
        let chain = {
            let mut text = said.clone();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        };
        let shown = &self.shown;
        // A request that never got an HTTP answer (connect, send, timeout, cut): the store
        // is unreachable, whatever the words of the layers below.
        let transport = {
            let mut source = std::error::Error::source(&e);
            let mut found = false;
            while let Some(s) = source {
                if let Some(http) = s.downcast_ref::<object_store::client::HttpError>() {
                    use object_store::client::HttpErrorKind as K;
                    found = matches!(
                        http.kind(),
                        K::Connect | K::Request | K::Timeout | K::Interrupted
                    );
                }
                source = s.source();
            }
            found
        };
        let says = |words: &[&str]| words.iter().any(|w| chain.contains(w));
        match e {
            object_store::Error::NotFound { .. } => {
                StoreError::NotFound(format!("{doing}: not on {shown}"))
            }
            _ if transport
                || says(&[
                    "timed out",
                    "error sending request",
                    "onnection refused",
                    "onnection reset",
                    "dns error",
                ]) =>
            {
                StoreError::Unreachable(format!(
                    "{shown} could not be reached or did not answer in time ({doing}): {}; check the endpoint and the network, then try again",
                    capped(&chain)
                ))
            }
            // Garage says "quota is reached" (403); others 507 or an S3 error code.
            _ if says(&[
                "status code: 507",
                "EntityTooLarge",
                "QuotaExceeded",
                "quota is reached",
                "InsufficientStorage",
                "No space left",
            ]) =>
            {
                StoreError::Full(format!(
                    "{shown} is full or refuses the size ({doing}): {said}; free space there or raise its quota"
                ))
            }
            _ if says(&[
                "status code: 403",
                "AccessDenied",
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
            ]) =>
            {
                StoreError::Io(format!(
                    "{shown} refused the credentials ({doing}): {said}; check the credentials file and the key's rights on the bucket"
                ))
            }
            _ => StoreError::Io(format!("{shown}: {doing}: {}", capped(&chain))),
        }
    }
}

impl Store for S3Store {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.path(key)?;
        let payload = object_store::PutPayload::from(bytes.to_vec());
        self.run(&format!("store {key}"), self.store.put(&path, payload))
            .map(drop)
    }

    fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, StoreError> {
        let path = self.path(key)?;
        let doing = format!("read {key}");
        let too_big = |size| StoreError::TooBig {
            store: self.shown.clone(),
            key: key.to_owned(),
            size,
            max,
        };
        self.run(&doing, async {
            let got = self.store.get(&path).await?;
            if got.meta.size > max {
                return Ok(Err(too_big(got.meta.size)));
            }
            let mut stream = got.into_stream();
            let mut bytes = Vec::new();
            while let Some(chunk) = stream.try_next().await? {
                if (bytes.len() + chunk.len()) as u64 > max {
                    return Ok(Err(too_big((bytes.len() + chunk.len()) as u64)));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(Ok(bytes))
        })?
    }

    fn list(&self, prefix: &str) -> Result<Vec<Object>, StoreError> {
        check_prefix(prefix)?;
        let dir = match prefix.rfind('/') {
            Some(i) => &prefix[..i],
            None => "",
        };
        let base = match (self.prefix.is_empty(), dir.is_empty()) {
            (true, true) => None,
            (true, false) => Some(ObjectPath::from(dir)),
            (false, true) => Some(ObjectPath::from_iter(self.prefix.split('/'))),
            (false, false) => Some(self.object_path(dir)),
        };
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!(
                "{}/",
                ObjectPath::from_iter(self.prefix.split('/')).as_ref()
            )
        };
        let max = self.max_listed;
        let doing = format!("list {prefix}");
        let mut found = self.run(&doing, async {
            let mut stream = self.store.list(base.as_ref());
            let mut found = Vec::new();
            let mut seen = 0usize;
            while let Some(m) = stream.try_next().await? {
                seen += 1;
                if seen > max {
                    return Ok(Err(too_many_listed(&self.shown, prefix, max)));
                }
                let Some(key) = m.location.as_ref().strip_prefix(&strip) else {
                    continue;
                };
                if key.starts_with(prefix) && check_key(key).is_ok() {
                    found.push(Object {
                        key: key.to_owned(),
                        size: m.size,
                        modified: Some(std::time::SystemTime::from(m.last_modified)),
                    });
                }
            }
            Ok(Ok(found))
        })??;
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        let path = self.path(key)?;
        match self.run(&format!("delete {key}"), self.store.delete(&path)) {
            Err(StoreError::NotFound(_)) => Ok(()),
            other => other,
        }
    }

    fn describe(&self) -> String {
        self.shown.clone()
    }
}
