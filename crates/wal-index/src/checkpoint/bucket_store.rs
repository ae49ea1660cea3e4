//! [`BucketStore`]: checkpoints in an object store (S3, GCS, Azure Blob, or anything the
//! `object_store` crate reaches), which follows a pool that a roll reschedules onto
//! another node.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion, WriteMultipart,
};

use super::CheckpointStore;
use super::name::CheckpointName;
use crate::sync::Mutex;

/// The pointer's key under the prefix, and its first line.
const POINTER: &str = "NEWEST";
const POINTER_HEADER: &str = "sbix-newest 1";
/// A body's name: `checkpoint-<ms>-<writer>-<n>.sbix`.
/// Bodies above this size are uploaded in parts of this size.
const PART_BYTES: usize = 32 << 20;
/// Parts of one body uploaded at once.
const PARTS_IN_FLIGHT: usize = 4;
/// Conditional updates of the pointer tried before a write gives up (each failure means
/// another writer published in between).
const POINTER_ATTEMPTS: usize = 16;
/// A body no pointer names is deleted once it is this old: younger, it may be another
/// writer's, uploaded and not yet published.
const ORPHAN_AGE: Duration = Duration::from_secs(3600);

/// Checkpoints in a bucket: each body under a key never reused, then a small pointer
/// object (`<prefix>/NEWEST`, the newest `keep` names, newest first) replaced by a
/// conditional put, so the pointer never names a body that is not whole and two writers
/// (the old pool and the new one, during a roll) never lose each other's update.
///
/// # The protocol
///
/// A write uploads the body as `<prefix>/checkpoint-<ms>-<writer>-<n>.sbix`, where
/// `<writer>` is random per store, so no key is ever written twice. It then reads the
/// pointer with its version (its `ETag`), puts the new list conditioned on that version
/// (`If-Match`; `If-None-Match: *` when there is no pointer yet) and, if another writer
/// published in between, reads again and retries. Only once the pointer names the body
/// is the write reported durable. Bodies that dropped off the list are deleted after; a
/// reader that read the previous pointer may then find one gone, which it treats as a
/// refusal and moves on to the next. A body that no pointer names (its writer died
/// between the upload and the publish) is deleted by a later write once it is an hour old.
///
/// [`newest_first`](CheckpointStore::newest_first) reads the pointer; where there is none
/// (or it does not parse), it lists the prefix and orders the bodies by name.
///
/// # Costs and limits
///
/// Each write is a body upload (in 32 MiB parts above 32 MiB), a pointer read, a pointer
/// put, and a delete per body past `keep`. The store needs conditional puts: S3 (and
/// S3-protocol servers that honour `If-Match`/`If-None-Match`), GCS and Azure have them.
/// Requests run on a one-thread Tokio runtime the store owns, so the blocking methods can
/// be called from any thread (not from inside an async task without `spawn_blocking`:
/// they block it). Give each store its own `ObjectStore` client: a client's pooled
/// connections belong to the runtime that opened them. Timeouts and retries are the
/// `object_store` client's (configure them on its builder); a pointer put whose answer
/// is lost is not retried by it (it is not idempotent), and the write reports an error
/// although the pointer may name the new checkpoint, which is then used as any other.
///
/// Ages for the orphan sweep are the server's (each object's last-modified time against
/// the pointer's); an upload in parts is dated by some servers from its start, so a body
/// uploading for more than an hour could be swept before it is published: keep
/// checkpoints well under that.
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// use wal_index::checkpoint::{BucketStore, CheckpointStore, Checkpointing};
///
/// // Credentials and region from AWS_* variables, as the AWS SDKs read them.
/// let store = BucketStore::from_url("s3://noetl-checkpoints/pool-a", std::env::vars(), 3)?;
/// let checkpoints = Checkpointing::new(store);
/// # Ok(()) }
/// ```
pub struct BucketStore {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    keep: usize,
    writer: u64,
    /// The newest name this store wrote.
    written: Mutex<Option<CheckpointName>>,
    /// `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for BucketStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketStore")
            .field("store", &self.store.to_string())
            .field("prefix", &self.prefix.as_ref())
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

impl Drop for BucketStore {
    fn drop(&mut self) {
        // Requests end with their callers (they block on them); nothing is left to finish.
        // A runtime dropped in place panics inside an async context (a drain run as a task
        // drops its store there); shutting it down in the background never does.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl BucketStore {
    /// The store under `prefix` in `store`, keeping the newest `keep` checkpoints (at
    /// least 1).
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: impl Into<Path>,
        keep: usize,
    ) -> io::Result<BucketStore> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("wal-index-bucket")
            .enable_all()
            .build()?;
        Ok(BucketStore {
            store,
            prefix: prefix.into(),
            keep: keep.max(1),
            writer: writer_tag(),
            written: Mutex::new(None),
            runtime: Some(runtime),
        })
    }

    /// The store a URL names (`s3://bucket/prefix`, `gs://…`, `az://…`, with the
    /// `object-store-aws`, `-gcp` or `-azure` feature), configured by `options`: the
    /// `object_store` builders' keys (`aws_endpoint`, `aws_allow_http`, `aws_region`,
    /// `google_service_account`, …) case-insensitively; others are ignored. Pass
    /// `std::env::vars()` to configure it as the cloud's SDKs would from the environment.
    pub fn from_url(
        url: &str,
        options: impl IntoIterator<Item = (String, String)>,
        keep: usize,
    ) -> io::Result<BucketStore> {
        let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        let parsed = url::Url::parse(url).map_err(|e| invalid(format!("{url}: {e}")))?;
        let options: Vec<(String, String)> = options
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .filter(|(k, _)| {
                ["aws_", "google_", "azure_"]
                    .iter()
                    .any(|p| k.starts_with(p))
            })
            .collect();
        let (store, prefix) = object_store::parse_url_opts(&parsed, options)
            .map_err(|e| invalid(format!("{url}: {e}")))?;
        BucketStore::new(Arc::from(store), prefix, keep)
    }

    /// Runs one request sequence on the store's runtime and waits for it.
    fn block_on<T: Send + 'static>(
        &self,
        work: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> io::Result<T> {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| io::Error::other("dropped"))?;
        let handle = runtime.spawn(work);
        match futures_lite::future::block_on(handle) {
            Ok(result) => result.map_err(into_io),
            Err(join) => Err(io::Error::other(format!(
                "a bucket request panicked: {join}"
            ))),
        }
    }

    /// The next body name: above this store's newest, unique to this store.
    fn next_name(&self) -> String {
        let mut written = self.written.lock();
        let name = CheckpointName::next(*written, Some(self.writer));
        *written = Some(name);
        name.to_string()
    }
}

impl CheckpointStore for BucketStore {
    /// Uploads the body, then publishes it in the pointer (conditional put, retried while
    /// other writers publish in between), then deletes the bodies it pushed out. After a
    /// failed publish the body stays until a later write finds no pointer naming it.
    fn write(&self, bytes: &[u8]) -> io::Result<String> {
        self.write_owned(bytes.to_vec())
    }

    /// [`write`](CheckpointStore::write) without a copy: the body goes to the client as it
    /// is, and in parts as slices of it.
    fn write_owned(&self, bytes: Vec<u8>) -> io::Result<String> {
        let name = self.next_name();
        let (store, prefix, keep) = (Arc::clone(&self.store), self.prefix.clone(), self.keep);
        let body = bytes::Bytes::from(bytes);
        let published = name.clone();
        self.block_on(async move {
            let key = prefix.clone().join(published.as_str());
            upload(&*store, &key, body).await?;
            // A failed publish leaves the body: the put may have been applied before its
            // answer was lost, so the pointer may name it. A later write deletes it once no
            // pointer names it and it is old (the orphan sweep).
            let dropped = publish(&*store, &prefix, &published, keep).await?;
            prune(&*store, &prefix, &published, dropped).await;
            Ok(())
        })?;
        Ok(name)
    }

    fn newest_first(&self) -> io::Result<Vec<String>> {
        let (store, prefix) = (Arc::clone(&self.store), self.prefix.clone());
        self.block_on(async move {
            if let Some(pointer) = read_pointer(&*store, &prefix).await?
                && let Some(names) = pointer.names.filter(|names| !names.is_empty())
            {
                return Ok(names);
            }
            let mut names = list_bodies(&*store, &prefix)
                .await?
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>();
            names.sort_unstable_by(|a, b| b.cmp(a));
            Ok(names)
        })
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let (store, key) = (Arc::clone(&self.store), self.prefix.clone().join(name));
        self.block_on(async move { Ok(store.get(&key).await?.bytes().await?.to_vec()) })
    }

    fn location(&self) -> String {
        format!("{}/{}", self.store, self.prefix)
    }
}

/// Uploads a body: one put, or parts of [`PART_BYTES`] above it, at most
/// [`PARTS_IN_FLIGHT`] at once, the upload aborted on a failure so no part outlives it.
async fn upload(
    store: &dyn ObjectStore,
    key: &Path,
    body: bytes::Bytes,
) -> object_store::Result<()> {
    if body.len() <= PART_BYTES {
        store.put(key, PutPayload::from(body)).await?;
        return Ok(());
    }
    let mut parts =
        WriteMultipart::new_with_chunk_size(store.put_multipart(key).await?, PART_BYTES);
    let mut sent = Ok(());
    let mut at = 0;
    while at < body.len() {
        sent = parts.wait_for_capacity(PARTS_IN_FLIGHT).await;
        if sent.is_err() {
            break;
        }
        let end = (at + PART_BYTES).min(body.len());
        // A slice of the one body: no part is a copy.
        parts.put(body.slice(at..end));
        at = end;
    }
    if sent.is_ok() {
        sent = parts.wait_for_capacity(0).await;
    }
    match sent {
        Ok(()) => parts.finish().await.map(drop),
        Err(error) => {
            let _ = parts.abort().await;
            Err(error)
        }
    }
}

/// The pointer as read.
struct Pointer {
    /// Its names, newest first; `None` where it does not parse (a newer format, a torn
    /// write on a server without atomic puts, an edit).
    names: Option<Vec<String>>,
    /// Its version, for the conditional put that replaces it.
    version: UpdateVersion,
    /// When the server last wrote it (Unix seconds): the server's clock, for the orphan
    /// sweep's ages.
    written: i64,
}

/// The pointer, or `None` where there is none.
async fn read_pointer(
    store: &dyn ObjectStore,
    prefix: &Path,
) -> object_store::Result<Option<Pointer>> {
    let got = match store.get(&prefix.clone().join(POINTER)).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(error) => return Err(error),
    };
    let version = UpdateVersion {
        e_tag: got.meta.e_tag.clone(),
        version: got.meta.version.clone(),
    };
    let written = got.meta.last_modified.timestamp();
    let bytes = got.bytes().await?;
    Ok(Some(Pointer {
        names: parse_pointer(&bytes),
        version,
        written,
    }))
}

/// A pointer's names, if it is one.
fn parse_pointer(bytes: &[u8]) -> Option<Vec<String>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != POINTER_HEADER {
        return None;
    }
    let names: Vec<String> = lines.map(str::to_owned).collect();
    names
        .iter()
        .all(|n| CheckpointName::parse(n).is_some())
        .then_some(names)
}

/// Puts `name` first in the pointer, keeping `keep` names, conditioned on the version
/// read; retries while another writer publishes in between. Returns the names it pushed
/// out.
async fn publish(
    store: &dyn ObjectStore,
    prefix: &Path,
    name: &str,
    keep: usize,
) -> object_store::Result<Vec<String>> {
    let key = prefix.clone().join(POINTER);
    for _ in 0..POINTER_ATTEMPTS {
        // A pointer that does not parse is replaced (readers list the prefix meanwhile).
        let (mut names, mode) = match read_pointer(store, prefix).await? {
            Some(pointer) => (
                pointer.names.unwrap_or_default(),
                PutMode::Update(pointer.version),
            ),
            None => (Vec::new(), PutMode::Create),
        };
        names.retain(|n| n != name);
        names.insert(0, name.to_owned());
        let dropped = names.split_off(names.len().min(keep));
        let text = std::iter::once(POINTER_HEADER)
            .chain(names.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        let options = PutOptions::from(mode);
        match store.put_opts(&key, PutPayload::from(text), options).await {
            Ok(_) => return Ok(dropped),
            // Another writer published (or created the pointer) in between: read again.
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::AlreadyExists { .. }) => continue,
            Err(error) => return Err(error),
        }
    }
    Err(object_store::Error::Generic {
        store: "BucketStore",
        source: format!("the pointer kept changing under {POINTER_ATTEMPTS} conditional puts")
            .into(),
    })
}

/// Deletes the bodies the publish pushed out, and bodies no pointer names that are older
/// than [`ORPHAN_AGE`]. Failures leave extra objects, never a broken pointer.
async fn prune(store: &dyn ObjectStore, prefix: &Path, published: &str, dropped: Vec<String>) {
    for name in &dropped {
        let _ = store.delete(&prefix.clone().join(name.as_str())).await;
    }
    let Ok(Some(pointer)) = read_pointer(store, prefix).await else {
        return;
    };
    let (Some(named), now) = (pointer.names, pointer.written) else {
        return;
    };
    let Ok(bodies) = list_bodies(store, prefix).await else {
        return;
    };
    for (name, modified) in bodies {
        let old = now.saturating_sub(modified) > ORPHAN_AGE.as_secs() as i64;
        if old && name != published && !named.contains(&name) {
            let _ = store.delete(&prefix.clone().join(name.as_str())).await;
        }
    }
}

/// The bodies directly under the prefix (not under deeper prefixes), with when each was
/// written (Unix seconds, the server's clock).
async fn list_bodies(
    store: &dyn ObjectStore,
    prefix: &Path,
) -> object_store::Result<Vec<(String, i64)>> {
    let listed = store.list_with_delimiter(Some(prefix)).await?;
    let mut bodies = Vec::new();
    for meta in listed.objects {
        if let Some(name) = meta.location.filename()
            && CheckpointName::parse(name).is_some()
        {
            bodies.push((name.to_owned(), meta.last_modified.timestamp()));
        }
    }
    Ok(bodies)
}

/// A random tag per store, so two stores (two pools, or one restarted) never write a key
/// twice.
fn writer_tag() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// An `object_store` error as an I/O error of the matching kind.
fn into_io(error: object_store::Error) -> io::Error {
    let kind = match &error {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, error)
}
