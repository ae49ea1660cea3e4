//! The drain's checkpoints: when one is due, the capture between two batches, and the
//! write on a thread of its own.
//!
//! A checkpoint is due when [`Checkpointing::every`] has passed or
//! [`Checkpointing::every_bytes`] of payload were applied since the last one. The drain
//! captures it right after applying a batch and before pulling the next, so the source's
//! position and the index agree ([`crate::checkpoint`] says why that is enough). Capturing
//! loads each resident execution's published snapshot: the drain's thread pays a pointer
//! load and a vector of handles per execution, never the encoding or the write, which a
//! writer thread does. One write is in flight at most: a checkpoint due while the previous
//! one is still being written is skipped, not queued, and taken at the next batch, or at
//! the next step that pulls nothing (a quiet log) if that comes first; at the log's end
//! the drain waits for the write in flight and takes it. With nothing applied since the
//! last capture, none is taken.

use std::io;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::source::WalSource;
use crate::checkpoint::{Checkpoint, CheckpointStore, DirStore, SourcePosition};
use crate::config::{ConfigError, Vars};
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};

/// Where and how often a [`Drain`](super::Drain) checkpoints its index.
///
/// ```
/// use std::time::Duration;
/// use wal_index::checkpoint::DirStore;
/// use wal_index::ingest::Checkpointing;
///
/// let dir = std::env::temp_dir().join(format!("sbix-cadence-{}", std::process::id()));
/// let checkpoints = Checkpointing::new(DirStore::open(&dir, 3)?).every(Duration::from_secs(30));
/// assert_eq!(checkpoints.every_bytes, Checkpointing::DEFAULT_EVERY_BYTES);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Checkpointing {
    /// Where they are written.
    pub store: std::sync::Arc<dyn CheckpointStore>,
    /// A checkpoint is due this long after the last one (default 60 s).
    pub every: Duration,
    /// ... or after this many payload bytes were applied since (default 512 MiB).
    pub every_bytes: u64,
}

impl Checkpointing {
    /// Default time between checkpoints.
    pub const DEFAULT_EVERY: Duration = Duration::from_secs(60);
    /// Default payload bytes between checkpoints.
    pub const DEFAULT_EVERY_BYTES: u64 = 512 << 20;
    /// Default checkpoints kept.
    pub const DEFAULT_KEEP: usize = 3;

    /// Checkpoints to `store` at the default cadence.
    pub fn new(store: impl CheckpointStore + 'static) -> Checkpointing {
        Checkpointing {
            store: std::sync::Arc::new(store),
            every: Self::DEFAULT_EVERY,
            every_bytes: Self::DEFAULT_EVERY_BYTES,
        }
    }

    /// With another time between checkpoints.
    pub fn every(mut self, every: Duration) -> Checkpointing {
        self.every = every;
        self
    }

    /// With another payload volume between checkpoints.
    pub fn every_bytes(mut self, bytes: u64) -> Checkpointing {
        self.every_bytes = bytes;
        self
    }

    /// From the environment: `NOETL_STATE_INDEX_CHECKPOINT_DIR` (a directory) or, with the
    /// `object-store` feature, `NOETL_STATE_INDEX_CHECKPOINT_URL` (`s3://bucket/prefix`, its
    /// client configured from the `AWS_*`, `GOOGLE_*` or `AZURE_*` variables); neither set
    /// (or empty): no checkpoints. `NOETL_STATE_INDEX_CHECKPOINT_SECS` (60),
    /// `NOETL_STATE_INDEX_CHECKPOINT_MB` (512) and `NOETL_STATE_INDEX_CHECKPOINT_KEEP` (3)
    /// set the cadence and how many are kept. A malformed value, or both places set, is an
    /// error naming its variable; a directory that cannot be created is an I/O error.
    pub fn from_env() -> Result<Option<Checkpointing>, io::Error> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// [`from_env`](Checkpointing::from_env) over any lookup (a bucket's client is still
    /// configured from the process environment).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Checkpointing>, io::Error> {
        let vars = Vars(lookup);
        let invalid = |e: ConfigError| io::Error::new(io::ErrorKind::InvalidInput, e);
        let dir = vars.get("NOETL_STATE_INDEX_CHECKPOINT_DIR");
        let url = vars.get("NOETL_STATE_INDEX_CHECKPOINT_URL");
        if dir.is_none() && url.is_none() {
            return Ok(None);
        }
        let number = |var: &'static str, default: u64| -> Result<u64, ConfigError> {
            match vars.get(var) {
                None => Ok(default),
                Some(value) => match value.parse::<u64>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(ConfigError {
                        var,
                        value,
                        expected: "a positive integer",
                    }),
                },
            }
        };
        let secs = number("NOETL_STATE_INDEX_CHECKPOINT_SECS", 60).map_err(invalid)?;
        let mb = number("NOETL_STATE_INDEX_CHECKPOINT_MB", 512).map_err(invalid)?;
        let keep = number("NOETL_STATE_INDEX_CHECKPOINT_KEEP", 3).map_err(invalid)?;
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        let store: Checkpointing = match (dir, url) {
            (Some(dir), None) => Checkpointing::new(DirStore::open(PathBuf::from(dir), keep)?),
            (None, Some(url)) => bucket_from_url(url, keep)?,
            (Some(_), Some(url)) => {
                return Err(invalid(ConfigError {
                    var: "NOETL_STATE_INDEX_CHECKPOINT_URL",
                    value: url,
                    expected: "unset while NOETL_STATE_INDEX_CHECKPOINT_DIR is set (one place)",
                }));
            }
            (None, None) => unreachable!("returned above"),
        };
        Ok(Some(
            store
                .every(Duration::from_secs(secs))
                .every_bytes(mb.saturating_mul(1 << 20)),
        ))
    }
}

/// Checkpoints to the bucket `NOETL_STATE_INDEX_CHECKPOINT_URL` names.
#[cfg(feature = "object-store")]
fn bucket_from_url(url: String, keep: usize) -> io::Result<Checkpointing> {
    // The variables that are not Unicode are not a client's: skipped, not a panic.
    let vars = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let store = crate::checkpoint::BucketStore::from_url(&url, vars, keep)?;
    Ok(Checkpointing::new(store))
}

/// Without the `object-store` feature, a bucket URL is a configuration error.
#[cfg(not(feature = "object-store"))]
fn bucket_from_url(url: String, _keep: usize) -> io::Result<Checkpointing> {
    let error = ConfigError {
        var: "NOETL_STATE_INDEX_CHECKPOINT_URL",
        value: url,
        expected: "unset: this build has no object-store feature",
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, error))
}

/// What the drain's checkpoints did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointReport {
    /// Checkpoints captured and handed to the writer.
    pub captured: u64,
    /// Of those, written durably.
    pub written: u64,
    /// Of those, whose write failed (the previous checkpoints stay as they were).
    pub failed: u64,
    /// Due while the previous one was still being written: skipped, taken at a later
    /// batch.
    pub skipped_busy: u64,
    /// Due while the source could not say where it stands (it has not delivered yet, or
    /// cannot resume), or on an index that does not checkpoint: skipped.
    pub skipped_no_position: u64,
    /// The size of the last checkpoint written, in bytes.
    pub last_bytes: u64,
    /// The last write's error, if one failed.
    pub last_error: Option<String>,
}

/// What the writer thread reports back.
#[derive(Default)]
struct Outcomes {
    written: AtomicU64,
    failed: AtomicU64,
    last_bytes: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// Captures the index at a source position (`None`: an index that does not checkpoint).
pub(crate) type Capture = Box<dyn Fn(SourcePosition) -> Option<Checkpoint> + Send>;

/// The drain's side: the cadence, and the hand-off to the writer.
pub(crate) struct Checkpointer {
    config: Checkpointing,
    capture: Capture,
    since: Instant,
    bytes: u64,
    /// Due whatever the cadence says (the log ended).
    due_now: bool,
    /// True from a hand-off until the writer finished that checkpoint.
    busy: Arc<AtomicBool>,
    outcomes: Arc<Outcomes>,
    sender: Option<Sender<Checkpoint>>,
    thread: Option<JoinHandle<()>>,
    captured: u64,
    skipped_busy: u64,
    skipped_no_position: u64,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("config", &self.config)
            .field("captured", &self.captured)
            .finish_non_exhaustive()
    }
}

impl Checkpointer {
    pub(crate) fn start(config: Checkpointing, capture: Capture) -> io::Result<Checkpointer> {
        let (sender, receiver) = crossbeam_channel::bounded::<Checkpoint>(1);
        let busy = Arc::new(AtomicBool::new(false));
        let outcomes = Arc::new(Outcomes::default());
        let thread = std::thread::Builder::new()
            .name("wal-index-checkpoint".into())
            .spawn({
                let (store, busy, outcomes) = (
                    config.store.clone(),
                    Arc::clone(&busy),
                    Arc::clone(&outcomes),
                );
                move || write_loop(&*store, &receiver, &busy, &outcomes)
            })?;
        Ok(Checkpointer {
            config,
            capture,
            since: Instant::now(),
            bytes: 0,
            due_now: false,
            busy,
            outcomes,
            sender: Some(sender),
            thread: Some(thread),
            captured: 0,
            skipped_busy: 0,
            skipped_no_position: 0,
        })
    }

    /// After a batch of `bytes` payload bytes was applied: captures and hands off a
    /// checkpoint if one is due and the writer is free.
    /// Called with 0 bytes at rest (nothing pulled), where it takes a checkpoint still due
    /// for what was applied since the last capture; with nothing applied since, there is
    /// nothing new to keep.
    pub(crate) fn after_batch<S: WalSource>(&mut self, source: &S, bytes: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes == 0 {
            return;
        }
        let due = self.due_now
            || self.since.elapsed() >= self.config.every
            || self.bytes >= self.config.every_bytes;
        if !due {
            return;
        }
        // Acquire pairs with the writer's Release store when it finishes a checkpoint: a
        // drain that sees it free sees that write's outcome counted.
        if self.busy.load(Ordering::Acquire) {
            // Counted once per batch that found it busy, not at every idle step after.
            if bytes > 0 {
                self.skipped_busy += 1;
            }
            return;
        }
        let checkpoint = source.position().and_then(|at| (self.capture)(at));
        self.since = Instant::now();
        self.due_now = false;
        self.bytes = 0;
        let Some(checkpoint) = checkpoint else {
            self.skipped_no_position += 1;
            return;
        };
        // Relaxed: the channel hands the checkpoint over and orders this store before the
        // writer's receive; only the drain sets the flag, only the writer clears it.
        self.busy.store(true, Ordering::Relaxed);
        self.captured += 1;
        if let Some(sender) = &self.sender
            && sender.try_send(checkpoint).is_ok()
        {
            return;
        }
        // The writer is gone (it cannot be full: it was not busy): a failed write.
        self.outcomes.failed.fetch_add(1, Ordering::Relaxed);
        *self.outcomes.last_error.lock() = Some("the checkpoint writer thread ended".to_owned());
        self.busy.store(false, Ordering::Relaxed);
    }

    /// At the log's end: waits for the write in flight, if one is, then takes the checkpoint
    /// still due for what was applied since the last capture, so a log that ends is
    /// checkpointed up to its last record.
    pub(crate) fn at_close<S: WalSource>(&mut self, source: &S) {
        if self.bytes == 0 {
            return;
        }
        // Acquire: as in `after_batch`. The writer clears the flag however its write ends.
        while self.busy.load(Ordering::Acquire)
            && self.thread.as_ref().is_some_and(|t| !t.is_finished())
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.due_now = true;
        self.after_batch(source, 0);
    }

    /// What the checkpoints did so far.
    pub(crate) fn report(&self) -> CheckpointReport {
        // Relaxed: counters read for a report; the writer's Release on `busy` orders them
        // for a drain that waits for it (`Drop`).
        CheckpointReport {
            captured: self.captured,
            written: self.outcomes.written.load(Ordering::Relaxed),
            failed: self.outcomes.failed.load(Ordering::Relaxed),
            skipped_busy: self.skipped_busy,
            skipped_no_position: self.skipped_no_position,
            last_bytes: self.outcomes.last_bytes.load(Ordering::Relaxed),
            last_error: self.outcomes.last_error.lock().clone(),
        }
    }
}

impl Drop for Checkpointer {
    /// Lets the write in flight finish (a checkpoint is whole or absent either way).
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writer thread: encodes and writes each checkpoint handed over, until the drain goes.
fn write_loop(
    store: &dyn CheckpointStore,
    receiver: &Receiver<Checkpoint>,
    busy: &AtomicBool,
    outcomes: &Outcomes,
) {
    for checkpoint in receiver {
        // Clears `busy` however this checkpoint ends, a panic included, so a panicking
        // write costs that checkpoint, not every later one.
        let _done = Done(busy);
        let bytes = checkpoint.encode();
        drop(checkpoint);
        let len = bytes.len() as u64;
        // Relaxed counters: see `Checkpointer::report`.
        match store.write_owned(bytes) {
            Ok(_) => {
                outcomes.written.fetch_add(1, Ordering::Relaxed);
                outcomes.last_bytes.store(len, Ordering::Relaxed);
            }
            Err(error) => {
                outcomes.failed.fetch_add(1, Ordering::Relaxed);
                *outcomes.last_error.lock() = Some(error.to_string());
            }
        }
    }
}

/// Clears the writer's `busy` flag when dropped.
struct Done<'a>(&'a AtomicBool);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        // Release pairs with the drain's Acquire load in `after_batch`: the outcome counted
        // above is seen by a drain that sees the writer free.
        self.0.store(false, Ordering::Release);
    }
}
