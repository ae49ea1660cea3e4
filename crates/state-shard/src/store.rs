//! Where shards are kept: any `object_store` store (S3 and S3-protocol servers, GCS, Azure
//! Blob with this crate's cloud features; production's server over HTTP; a directory),
//! driven on a small runtime of the store's own so callers on any executor, or none, can
//! use it.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::ShardError;

/// A store of shards under a prefix.
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// let dir = std::env::temp_dir().join(format!("shards-doc-{}", std::process::id()));
/// let store = state_shard::ShardStore::open(dir.to_str().unwrap(), std::iter::empty())?;
/// assert!(store.location().starts_with("file://"));
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ShardStore {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    location: String,
    /// The bound on one request ([`ShardStore::DEFAULT_REQUEST_TIMEOUT`]).
    request_timeout: std::time::Duration,
    /// `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropped in place inside an async context a runtime panics; in the background it
        // never does. Requests still running are abandoned (their callers stopped waiting).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl fmt::Debug for ShardStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardStore")
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

impl ShardStore {
    /// The store `location` names:
    ///
    /// - `s3://bucket/prefix`, `gs://…`, `az://…` (with the `aws`, `gcp` or `azure`
    ///   feature), configured by `options`: the `object_store` builders' keys
    ///   (`aws_endpoint`, `aws_allow_http`, `google_service_account`, …), matched
    ///   case-insensitively; other keys are ignored, so `std::env::vars()` configures it as
    ///   the clouds' SDKs would;
    /// - `http://host/base` or `https://…`: production's server, whose objects are at
    ///   `{base}/{key}` (`http://server:8082/api/internal/objects`);
    /// - `file:///dir`, or a path: a directory (created if missing).
    pub fn open(
        location: &str,
        options: impl IntoIterator<Item = (String, String)>,
    ) -> io::Result<ShardStore> {
        let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        let local = |dir: &std::path::Path| -> io::Result<ShardStore> {
            std::fs::create_dir_all(dir)?;
            let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| invalid(format!("{}: {e}", dir.display())))?;
            let location = format!("file://{}", std::fs::canonicalize(dir)?.display());
            ShardStore::with_location(Arc::new(store), Path::default(), location)
        };
        if !location.contains("://") {
            return local(std::path::Path::new(location));
        }
        let parsed = url::Url::parse(location).map_err(|e| invalid(format!("{location}: {e}")))?;
        if parsed.scheme() == "file" {
            let dir = parsed
                .to_file_path()
                .map_err(|()| invalid(format!("{location}: not a local path")))?;
            return local(&dir);
        }
        let mut options: Vec<(String, String)> = options
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .filter(|(k, _)| {
                ["aws_", "google_", "azure_"]
                    .iter()
                    .any(|p| k.starts_with(p))
            })
            .collect();
        if parsed.scheme() == "http" {
            // Production's server is usually reached in the clear inside its cluster; the
            // HTTP client refuses plain `http://` unless told.
            options.push(("allow_http".into(), "true".into()));
        }
        let (store, prefix) = object_store::parse_url_opts(&parsed, options)
            .map_err(|e| invalid(format!("{location}: {e}")))?;
        ShardStore::with_location(Arc::from(store), prefix, location.to_owned())
    }

    /// Shards in `store` under `prefix`.
    pub fn from_store(
        store: Arc<dyn ObjectStore>,
        prefix: impl Into<Path>,
    ) -> io::Result<ShardStore> {
        let prefix = prefix.into();
        let location = format!("{store}/{prefix}");
        ShardStore::with_location(store, prefix, location)
    }

    fn with_location(
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        location: String,
    ) -> io::Result<ShardStore> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("state-shard-io")
            .enable_all()
            .build()?;
        Ok(ShardStore {
            inner: Arc::new(Inner {
                store,
                prefix,
                location,
                request_timeout: ShardStore::DEFAULT_REQUEST_TIMEOUT,
                runtime: Some(runtime),
            }),
        })
    }

    /// The bound on one request, the client's retries included: 10 s. A store that accepts
    /// and never answers costs a request this long (the client alone would retry for
    /// minutes), so a drive's read and the writer's shutdown stay bounded.
    pub const DEFAULT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

    /// Where the store is, for logs.
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    fn path(&self, key: &str) -> Path {
        let mut path = self.inner.prefix.clone();
        for part in key.split('/').filter(|p| !p.is_empty()) {
            path = path.join(part);
        }
        path
    }

    /// Reads `key`: `Ok(None)` if it does not exist; a [`ShardError::TooLarge`] without
    /// reading the body if the store says it is over `max_bytes`, or if its body turns out
    /// to be.
    pub fn get(
        &self,
        key: &str,
        max_bytes: u64,
    ) -> impl Future<Output = Result<Option<Bytes>, ShardError>> + Send + 'static + use<> {
        let store = Arc::clone(&self.inner.store);
        let path = self.path(key);
        self.spawn(async move {
            let got = match store.get(&path).await {
                Ok(got) => got,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(error) => return Err(ShardError::Store(error.to_string())),
            };
            if got.meta.size > max_bytes {
                return Err(ShardError::TooLarge {
                    size: got.meta.size,
                    limit: max_bytes,
                });
            }
            let bytes = got
                .bytes()
                .await
                .map_err(|e| ShardError::Store(e.to_string()))?;
            if bytes.len() as u64 > max_bytes {
                return Err(ShardError::TooLarge {
                    size: bytes.len() as u64,
                    limit: max_bytes,
                });
            }
            Ok(Some(bytes))
        })
    }

    /// Writes `bytes` at `key`, replacing what is there.
    pub fn put(
        &self,
        key: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Result<(), ShardError>> + Send + 'static + use<> {
        let store = Arc::clone(&self.inner.store);
        let path = self.path(key);
        self.spawn(async move {
            store
                .put(&path, PutPayload::from(bytes))
                .await
                .map(drop)
                .map_err(|e| ShardError::Store(e.to_string()))
        })
    }

    /// Runs `work` on the store's runtime; the returned future, on any executor, waits for
    /// it, and dropping it aborts the request.
    fn spawn<T, W>(
        &self,
        work: W,
    ) -> impl Future<Output = Result<T, ShardError>> + Send + 'static + use<T, W>
    where
        T: Send + 'static,
        W: Future<Output = Result<T, ShardError>> + Send + 'static,
    {
        // Each request whole (its client's retries included) within the store's bound: a
        // store that accepts and never answers costs a write this long, not the client's
        // minutes of retries.
        let within = self.inner.request_timeout;
        let bounded = async move {
            match tokio::time::timeout(within, work).await {
                Ok(result) => result,
                Err(_) => Err(ShardError::Store(format!("no answer within {within:?}"))),
            }
        };
        let task = self.inner.runtime.as_ref().map(|rt| rt.spawn(bounded));
        async move {
            let Some(task) = task else {
                return Err(ShardError::Store("the store was dropped".into()));
            };
            match (AbortOnDrop(task)).await {
                Ok(result) => result,
                Err(join) => Err(ShardError::Store(format!("a store request ended: {join}"))),
            }
        }
    }
}

/// A spawned request that is aborted if its caller stops waiting for it.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
