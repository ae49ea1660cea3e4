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

use super::{Checkpoint, CheckpointStore, DirStore, SourcePosition};
use crate::config::{ConfigError, Vars};
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};

/// Where and how often a [`Drain`](crate::Drain) checkpoints its index, and how long its
/// last checkpoint may take when the pool shuts down.
///
/// ```
/// use std::time::Duration;
/// use wal_index::checkpoint::DirStore;
/// use wal_index::checkpoint::Checkpointing;
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
    /// At shutdown, the last checkpoint ([`Drain::shut_down`](crate::Drain::shut_down)) is
    /// given this long, the wait for a write already in flight included (default 10 s, a
    /// third of Kubernetes' 30 s grace period). A write that does not finish in it is left
    /// behind: the store's previous checkpoint stays the newest, whole.
    pub last_within: Duration,
    /// At start, how long a source may take to check a checkpoint's positions against its
    /// log ([`WalSource::resume`](crate::WalSource::resume)) before the checkpoint is
    /// given up for an older one (default 120 s: an EHDB writer replays a shard first).
    pub resume_within: Duration,
}

impl Checkpointing {
    /// Default time between checkpoints.
    pub const DEFAULT_EVERY: Duration = Duration::from_secs(60);
    /// Default payload bytes between checkpoints.
    pub const DEFAULT_EVERY_BYTES: u64 = 512 << 20;
    /// Default checkpoints kept.
    pub const DEFAULT_KEEP: usize = 3;
    /// Default bound of the last checkpoint at shutdown.
    pub const DEFAULT_LAST_WITHIN: Duration = Duration::from_secs(10);
    /// Default bound of a source's check of a checkpoint at start.
    pub const DEFAULT_RESUME_WITHIN: Duration = Duration::from_secs(120);

    /// Checkpoints to `store` at the default cadence.
    pub fn new(store: impl CheckpointStore + 'static) -> Checkpointing {
        Checkpointing {
            store: std::sync::Arc::new(store),
            every: Self::DEFAULT_EVERY,
            every_bytes: Self::DEFAULT_EVERY_BYTES,
            last_within: Self::DEFAULT_LAST_WITHIN,
            resume_within: Self::DEFAULT_RESUME_WITHIN,
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

    /// With another bound on a source's check of a checkpoint at start.
    pub fn resume_within(mut self, bound: Duration) -> Checkpointing {
        self.resume_within = bound;
        self
    }

    /// With another bound on the last checkpoint at shutdown.
    pub fn last_within(mut self, bound: Duration) -> Checkpointing {
        self.last_within = bound;
        self
    }

    /// From the environment: `NOETL_STATE_INDEX_CHECKPOINT_DIR` (a directory) or, with the
    /// `object-store` feature, `NOETL_STATE_INDEX_CHECKPOINT_URL` (`s3://bucket/prefix`, its
    /// client configured from the `AWS_*`, `GOOGLE_*` or `AZURE_*` variables); neither set
    /// (or empty): no checkpoints. `NOETL_STATE_INDEX_CHECKPOINT_SECS` (60),
    /// `NOETL_STATE_INDEX_CHECKPOINT_MB` (512) and `NOETL_STATE_INDEX_CHECKPOINT_KEEP` (3)
    /// set the cadence and how many are kept, `NOETL_STATE_INDEX_CHECKPOINT_LAST_SECS` (10)
    /// the bound of the last one at shutdown. A malformed value, or both places set, is an
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
        let secs = Self::DEFAULT_EVERY.as_secs();
        let secs = number("NOETL_STATE_INDEX_CHECKPOINT_SECS", secs).map_err(invalid)?;
        let mb = Self::DEFAULT_EVERY_BYTES >> 20;
        let mb = number("NOETL_STATE_INDEX_CHECKPOINT_MB", mb).map_err(invalid)?;
        let keep = Self::DEFAULT_KEEP as u64;
        let keep = number("NOETL_STATE_INDEX_CHECKPOINT_KEEP", keep).map_err(invalid)?;
        let last = Self::DEFAULT_LAST_WITHIN.as_secs();
        let last = number("NOETL_STATE_INDEX_CHECKPOINT_LAST_SECS", last).map_err(invalid)?;
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
                .every_bytes(mb.saturating_mul(1 << 20))
                .last_within(Duration::from_secs(last)),
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
    /// The last checkpoint at shutdown, once the drain was shut down.
    pub at_shutdown: Option<LastCheckpoint>,
}

/// What became of the last checkpoint a drain takes when it is shut down
/// ([`Drain::shut_down`](crate::Drain::shut_down)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LastCheckpoint {
    /// Written durably: a successor resumes from the last record applied.
    Written {
        /// Its size.
        bytes: u64,
        /// From the shutdown to the write's end (a write in flight waited for included).
        took: Duration,
    },
    /// Nothing was applied since the newest checkpoint written: that one is current.
    UpToDate,
    /// The source could not say where it stands (nothing delivered, or it cannot resume),
    /// or the index does not checkpoint: none taken.
    NoPosition,
    /// Its write failed; the store's previous checkpoint stays the newest.
    Failed(String),
    /// The bound ([`Checkpointing::last_within`]) passed before the write ended: it is left
    /// to finish or die with the process, and the store's previous checkpoint, whole, stays
    /// the newest until it does.
    TimedOut {
        /// The bound.
        bound: Duration,
    },
}

/// What the writer thread reports back.
#[derive(Default)]
struct Outcomes {
    written: AtomicU64,
    failed: AtomicU64,
    last_bytes: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Whether the newest write failed (the store's newest is older than its capture).
    last_failed: AtomicBool,
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
    /// Records were applied since the last checkpoint handed to the writer (a capture
    /// without a position hands none over).
    unsaved: bool,
    /// True from a hand-off until the writer finished that checkpoint.
    busy: Arc<AtomicBool>,
    outcomes: Arc<Outcomes>,
    sender: Option<Sender<Checkpoint>>,
    thread: Option<JoinHandle<()>>,
    captured: u64,
    skipped_busy: u64,
    skipped_no_position: u64,
    at_shutdown: Option<LastCheckpoint>,
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
            unsaved: false,
            busy,
            outcomes,
            sender: Some(sender),
            thread: Some(thread),
            captured: 0,
            skipped_busy: 0,
            skipped_no_position: 0,
            at_shutdown: None,
        })
    }

    /// After a batch of `bytes` payload bytes was applied: captures and hands off a
    /// checkpoint at the source's `position` if one is due and the writer is free.
    /// Called with 0 bytes at rest (nothing pulled), where it takes a checkpoint still due
    /// for what was applied since the last capture; with nothing applied since, there is
    /// nothing new to keep.
    pub(crate) fn after_batch(
        &mut self,
        position: impl FnOnce() -> Option<SourcePosition>,
        bytes: u64,
    ) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.unsaved |= bytes > 0;
        if self.bytes == 0 {
            return;
        }
        let due = self.due_now
            || self.since.elapsed() >= self.config.every
            || self.bytes >= self.config.every_bytes;
        if !due {
            return;
        }
        if self.writing() {
            // Counted once per batch that found it busy, not at every idle step after.
            if bytes > 0 {
                self.skipped_busy += 1;
            }
            return;
        }
        self.hand_off(position);
    }

    /// Whether the writer is still writing the last checkpoint handed to it.
    fn writing(&self) -> bool {
        // Acquire pairs with the writer's Release store when it finishes a checkpoint: a
        // drain that sees it free sees that write's outcome counted.
        self.busy.load(Ordering::Acquire)
    }

    /// Captures a checkpoint at `position` and hands it to the (free) writer; false if
    /// there was none to capture.
    fn hand_off(&mut self, position: impl FnOnce() -> Option<SourcePosition>) -> bool {
        let checkpoint = position().and_then(|at| (self.capture)(at));
        self.since = Instant::now();
        self.due_now = false;
        self.bytes = 0;
        let Some(checkpoint) = checkpoint else {
            self.skipped_no_position += 1;
            return false;
        };
        // Relaxed: the channel hands the checkpoint over and orders this store before the
        // writer's receive; the drain sets the flag, and clears it only below, when the
        // writer is gone.
        self.busy.store(true, Ordering::Relaxed);
        self.captured += 1;
        self.unsaved = false;
        if let Some(sender) = &self.sender
            && sender.try_send(checkpoint).is_ok()
        {
            return true;
        }
        // The writer is gone (it cannot be full: it was not busy): a failed write.
        self.outcomes.failed.fetch_add(1, Ordering::Relaxed);
        *self.outcomes.last_error.lock() = Some("the checkpoint writer thread ended".to_owned());
        self.outcomes.last_failed.store(true, Ordering::Relaxed);
        self.busy.store(false, Ordering::Relaxed);
        true
    }

    /// Waits until the writer is free or `deadline` passes (`None`: no deadline); true if
    /// it is free.
    fn wait_free(&self, deadline: Option<Instant>) -> bool {
        // The writer clears the flag however its write ends; a writer thread that ended
        // clears nothing more.
        while self.writing() && self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        !self.writing()
    }

    /// At the log's end: waits for the write in flight, if one is, then takes the checkpoint
    /// still due for what was applied since the last capture, so a log that ends is
    /// checkpointed up to its last record.
    pub(crate) fn at_close(&mut self, position: impl FnOnce() -> Option<SourcePosition>) {
        if self.bytes == 0 {
            return;
        }
        let _ = self.wait_free(None);
        self.due_now = true;
        self.after_batch(position, 0);
    }

    /// At shutdown, with nothing past `position` applied: the last checkpoint, written
    /// within [`Checkpointing::last_within`] (the write in flight, if one is, finished
    /// first), or left behind at the bound. Taken once; later calls return the first
    /// outcome.
    pub(crate) fn last(
        &mut self,
        position: impl FnOnce() -> Option<SourcePosition>,
    ) -> LastCheckpoint {
        if let Some(done) = &self.at_shutdown {
            return done.clone();
        }
        let started = Instant::now();
        // A bound past what the clock can add is no bound.
        let deadline = started.checked_add(self.config.last_within);
        let outcome = self.take_last(position, started, deadline);
        self.at_shutdown = Some(outcome.clone());
        outcome
    }

    fn take_last(
        &mut self,
        position: impl FnOnce() -> Option<SourcePosition>,
        started: Instant,
        deadline: Option<Instant>,
    ) -> LastCheckpoint {
        let timed_out = LastCheckpoint::TimedOut {
            bound: self.config.last_within,
        };
        if !self.wait_free(deadline) {
            return timed_out;
        }
        // Relaxed: the writer's Release on `busy`, seen free above, orders its outcomes.
        let failed_before = self.outcomes.failed.load(Ordering::Relaxed);
        let last_failed = self.outcomes.last_failed.load(Ordering::Relaxed);
        if !self.unsaved && !last_failed {
            return LastCheckpoint::UpToDate;
        }
        if !self.hand_off(position) {
            return LastCheckpoint::NoPosition;
        }
        if !self.wait_free(deadline) {
            return timed_out;
        }
        if self.outcomes.failed.load(Ordering::Relaxed) > failed_before {
            let why = self.outcomes.last_error.lock().clone().unwrap_or_default();
            return LastCheckpoint::Failed(why);
        }
        LastCheckpoint::Written {
            bytes: self.outcomes.last_bytes.load(Ordering::Relaxed),
            took: started.elapsed(),
        }
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
            at_shutdown: self.at_shutdown.clone(),
        }
    }
}

impl Drop for Checkpointer {
    /// Lets the write in flight finish (a checkpoint is whole or absent either way), except
    /// after a last checkpoint that timed out: that write is left to the process's end, so
    /// the shutdown's bound holds.
    fn drop(&mut self) {
        drop(self.sender.take());
        let abandoned = matches!(self.at_shutdown, Some(LastCheckpoint::TimedOut { .. }));
        if let Some(thread) = self.thread.take()
            && !abandoned
        {
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
        // Clears `busy` however this checkpoint ends.
        let _done = Done(busy);
        // A panicking encode or store is a failed write, counted as one, and the writer
        // goes on with the next checkpoint.
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let bytes = checkpoint.encode();
            drop(checkpoint);
            let len = bytes.len() as u64;
            store.write_owned(bytes).map(|_| len)
        }))
        .unwrap_or_else(|_| Err(io::Error::other("the checkpoint's write panicked")));
        // Relaxed counters: see `Checkpointer::report`.
        match written {
            Ok(len) => {
                outcomes.written.fetch_add(1, Ordering::Relaxed);
                outcomes.last_bytes.store(len, Ordering::Relaxed);
                outcomes.last_failed.store(false, Ordering::Relaxed);
            }
            Err(error) => {
                outcomes.failed.fetch_add(1, Ordering::Relaxed);
                *outcomes.last_error.lock() = Some(error.to_string());
                outcomes.last_failed.store(true, Ordering::Relaxed);
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
