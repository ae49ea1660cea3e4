//! What a drive may do besides waiting: today's worker flow, step by step.
//!
//! A dispatch asks for the spine at `expected_head`. Today's worker then:
//!
//! | step | what | `drive_builds_total{outcome}` |
//! |---|---|---|
//! | 0 | a worker that is not authoritative for building does not drive | `fallback_disabled` |
//! | 1 | applies the dispatch's `tail_events` (the payloads the server just published for this execution): a warm index serves on the first build without waiting for the drain | — |
//! | 2 | the deadline loop: register, build, wait for the execution to change (or the per-wait cap, or the deadline), build again after every wake | `served` |
//! | 3 | after the deadline, the execution's state shard (one keyed read of each event's slim payload), applied to the index and built from the expected head: served only when that build reaches genesis | `served_shard`, `served_shard_mismatch` (verify mode) |
//! | 4 | rehydrate from the retained WAL, at most `RehydrateGate::max_concurrent` at once, and build once more | `served_rehydrated` |
//! | 5 | give up: the caller uses the server-built state (on the stateless edge, it retries) | `fallback_incomplete`, `stateless_retry` |
//!
//! [`DriveFlow`] says which of those steps a worker has; [`StateIndex::drive`] runs them
//! on any index. The shard loader and the retained WAL are the caller's, behind
//! [`DriveFallbacks`].
//!
//! # While the drain backfills
//!
//! After a restart the drain replays the log's history, and until it is through, a drive
//! whose execution is still behind it cannot be served by waiting: step 2 would spend the
//! whole deadline and serve nothing. The engine knows when its drain is behind
//! ([`Backfill`](crate::ingest::Backfill)); a drive on it that can read its execution
//! ([`DriveFlow::can_rehydrate`]) then reads it at its first unserved build instead of
//! after the deadline: its state shard first, if the flow has a shard reader (step 3, one
//! keyed read; a shard that does not serve is not read again after the deadline), then the
//! retained WAL (step 4's cap and labels). An async drive goes on waiting for the drain
//! meanwhile, within its deadline, and whichever serves it first wins; past the deadline it
//! awaits the read alone. A blocking drive reads first. If the read does not serve it, the
//! drive waits out what is left of its deadline, then goes on as above, step 4's read
//! included: an early read that did not serve the drive (answered short or empty,
//! throttled, unanswered) takes nothing away from the read today's flow makes: such a drive
//! reads again after its deadline unless the drain serves it meanwhile. Every read that
//! answered is reported. A rehydrated execution is served only when its walk
//! reaches genesis, like any build, and the drain's later replay of the same events is an
//! overwrite that changes no served byte. The outcomes stay the worker's: such a drive is
//! `served_rehydrated`, and [`Drive::backfill_skip`](crate::Drive::backfill_skip) says it
//! left its wait early. Today's design keeps the worker's flow exactly.
//!
//! ```
//! use bytes::Bytes;
//! use wal_index::{DriveBudget, DriveFlow, StateIndex, WalIndex};
//! use wal_index::labels::DriveLabel;
//!
//! let index = WalIndex::default();
//! // The dispatch carries the two events the server just published: a warm start without
//! // the drain.
//! let tail = vec![
//!     Bytes::from_static(br#"{"event_id":1,"execution_id":3,"event_type":"playbook_started"}"#),
//!     Bytes::from_static(br#"{"event_id":2,"execution_id":3,"prev_event_id":1}"#),
//! ];
//! let flow = DriveFlow::new(DriveBudget::default()).tail_events(tail);
//! let drive = index.drive(3, Some(2), &flow);
//! assert_eq!(drive.label, DriveLabel::Served);
//! assert_eq!((drive.builds, drive.tail_applied), (1, 2));
//! ```
//!
//! [`StateIndex::drive`]: crate::StateIndex::drive

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use chain_fold::{Event, ExecutionId};

use crate::config::DriveBudget;
use crate::ingest::DecodeMode;
use crate::rehydrate::RehydrateGate;

/// What a fallback read returns: a boxed future, so [`DriveFallbacks`] stays usable as a
/// `dyn` object while its reads are network I/O that a drive awaits.
pub type FallbackRead<'a> = Pin<Box<dyn Future<Output = Option<Vec<Event>>> + Send + 'a>>;

/// What a state-shard read returns: a boxed future, as [`FallbackRead`].
pub type ShardRead<'a> = Pin<Box<dyn Future<Output = ShardAnswer> + Send + 'a>>;

/// What a state-shard read answered: the reader outcomes of production's worker
/// (noetl/worker v5.120.0's `src/state_reader.rs`), before the drive's build says whether the
/// shard served.
///
/// | answer | production's reader | `state_shard_reads_total{outcome}` |
/// |---|---|---|
/// | [`NoReader`](ShardAnswer::NoReader) | shard reads off | not counted |
/// | [`NotFound`](ShardAnswer::NotFound) | both keys 404 | `miss` |
/// | [`Empty`](ShardAnswer::Empty) | no event of the execution | `miss` |
/// | [`Failed`](ShardAnswer::Failed) | transport, status, decode, `payload` column | `fallback` |
/// | [`Events`](ShardAnswer::Events) | applied | `hit` if the build from it reaches genesis, else `fallback` |
///
/// A read still running at the drive's [`fallback_timeout`](DriveFlow::fallback_timeout)
/// is dropped and counts as `Failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardAnswer {
    /// This worker reads no state shards (the default of [`DriveFallbacks`]).
    NoReader,
    /// Neither the `sealed` nor the `open` shard exists.
    NotFound,
    /// A shard was read and held none of the execution's events.
    Empty,
    /// The read or its decoding failed, with why (for logs; the drive counts it
    /// `fallback` and goes on to the retained WAL).
    Failed(String),
    /// The execution's events as the shard holds them, any order.
    Events(Vec<Event>),
}

/// The worker's per-execution reads for the steps after the deadline (and, on the engine,
/// for a drive whose execution is still behind a backfilling drain). Both default to
/// "none".
///
/// Both reads are async: an object-store GET, a broker or feed read. A drive awaits each
/// one for at most [`DriveFlow::fallback_timeout`] and drops it there, so a read must be
/// cancel-safe (dropping the future abandons it). The blocking drive runs the same future
/// to completion on its own thread. A source whose client only blocks wraps each read in
/// [`blocking_read`], which runs it on a thread of its own and never parks the thread that
/// polls the future (an executor's worker, for the async drive).
///
/// ```
/// use wal_index::ExecutionId;
/// use wal_index::flow::{DriveFallbacks, FallbackRead, blocking_read};
/// use wal_index::ingest::DecodeMode;
///
/// struct Retained;
/// impl DriveFallbacks for Retained {
///     fn retained(&self, execution: ExecutionId, mode: DecodeMode) -> FallbackRead<'_> {
///         // A blocking client: the read runs on a thread of its own, and decodes each
///         // record once, the way the index stores it.
///         blocking_read(move || {
///             let record = format!(r#"{{"event_id":1,"execution_id":{execution},"worker_id":"w"}}"#);
///             mode.decode(record.as_bytes()).ok().map(|event| vec![event])
///         })
///     }
/// }
/// let events = futures_lite::future::block_on(Retained.retained(4, DecodeMode::Slim)).unwrap();
/// assert_eq!(events[0].execution_id(), 4);
/// assert_eq!(events[0].payload(), br#"{"event_id":1,"execution_id":4}"#);
/// ```
pub trait DriveFallbacks: Send + Sync {
    /// The execution's state shard: each of its events with its slim payload, any order,
    /// decoded once as `mode` says (the index's: a slim index is handed slim events, so
    /// applying them parses nothing again). The default reads none
    /// ([`ShardAnswer::NoReader`]).
    fn state_shard(&self, execution_id: ExecutionId, mode: DecodeMode) -> ShardRead<'_> {
        let _ = (execution_id, mode);
        Box::pin(std::future::ready(ShardAnswer::NoReader))
    }

    /// The execution's events retained by the WAL, for rehydrate, each record decoded once
    /// as `mode` says (the index's, as the drain decodes). `None` when this worker cannot
    /// read the retained WAL (no replay is attempted).
    fn retained(&self, execution_id: ExecutionId, mode: DecodeMode) -> FallbackRead<'_> {
        let _ = (execution_id, mode);
        Box::pin(std::future::ready(None))
    }
}

/// A shared reader reads as the one it points to (a pool keeps its reads in an `Arc` that
/// its drives share).
impl<T: DriveFallbacks + ?Sized> DriveFallbacks for std::sync::Arc<T> {
    fn state_shard(&self, execution_id: ExecutionId, mode: DecodeMode) -> ShardRead<'_> {
        (**self).state_shard(execution_id, mode)
    }
    fn retained(&self, execution_id: ExecutionId, mode: DecodeMode) -> FallbackRead<'_> {
        (**self).retained(execution_id, mode)
    }
}

/// A [`FallbackRead`] for a client that blocks: `read` runs on a thread of its own, and the
/// future waits for its answer without blocking the thread that polls it.
///
/// Dropping the future (a drive at its fallback timeout) stops waiting at once; the read
/// itself runs on until it returns, and its answer is discarded, so `read` must carry a
/// deadline of its own, and the flow's [`fallback_timeout`](DriveFlow::fallback_timeout)
/// should sit above it (the defaults: 3 s and 3.5 s). A dropped read no longer holds its
/// drive's [`RehydrateGate`] permit, so at most [`MAX_BLOCKING_READS`] run at once in the
/// process: past that a read answers `None` at once, as a worker without the source would.
///
/// A thread per read is the price of never parking an executor's worker: reads are rare (at
/// most two replays and one shard read per unserved drive, replays capped by the gate), and
/// a thread costs tens of microseconds against a network read's milliseconds. `None` if
/// the thread cannot be started.
pub fn blocking_read(
    read: impl FnOnce() -> Option<Vec<Event>> + Send + 'static,
) -> FallbackRead<'static> {
    // Relaxed: a count that bounds threads; no data is published through it.
    let running = BLOCKING_READS.fetch_add(1, Ordering::Relaxed);
    if running >= MAX_BLOCKING_READS {
        BLOCKING_READS.fetch_sub(1, Ordering::Relaxed);
        return Box::pin(std::future::ready(None));
    }
    let (answer, receiver) = futures_channel::oneshot::channel();
    let started = std::thread::Builder::new()
        .name("wal-index-fallback".into())
        .spawn(move || {
            let ends = ReadEnds;
            // The drive may have stopped waiting: then nobody takes the answer.
            let _ = answer.send(read());
            drop(ends);
        });
    if started.is_err() {
        BLOCKING_READS.fetch_sub(1, Ordering::Relaxed);
    }
    Box::pin(async move {
        started.ok()?;
        receiver.await.ok().flatten()
    })
}

/// The most [`blocking_read`] threads that run at once in a process.
pub const MAX_BLOCKING_READS: usize = 16;

/// [`blocking_read`] threads running now.
static BLOCKING_READS: AtomicUsize = AtomicUsize::new(0);

/// Counts a blocking read's thread out when it ends, a panicking read included.
struct ReadEnds;

impl Drop for ReadEnds {
    fn drop(&mut self) {
        // Relaxed: as in `blocking_read`.
        BLOCKING_READS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The bounds on one per-execution read of the retained WAL (step 4), as today's worker
/// sets them: a deadline for the whole read (3 s, clamped to 100 ms–30 s as
/// `NOETL_REHYDRATE_DEADLINE_MS` is) and a cap on the records it reads (100,000, at least
/// 1). Every source's per-execution read embeds one, and the drive's default
/// [`fallback_timeout`](DriveFlow::fallback_timeout) is computed from the default, so the
/// drive never drops a read that is still within its own bound.
///
/// ```
/// use std::time::Duration;
/// use wal_index::DriveFlow;
/// use wal_index::flow::ReadBounds;
///
/// let bounds = ReadBounds::default().with_deadline(Duration::from_secs(60));
/// assert_eq!(bounds.deadline(), Duration::from_secs(30)); // clamped
/// assert_eq!(ReadBounds::DEFAULT.fallback_timeout(), DriveFlow::DEFAULT_FALLBACK_TIMEOUT);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadBounds {
    deadline: Duration,
    max_records: u64,
}

impl ReadBounds {
    /// Today's worker: 3 s and 100,000 records.
    pub const DEFAULT: ReadBounds = ReadBounds {
        deadline: Duration::from_secs(3),
        max_records: 100_000,
    };
    /// The shortest deadline a read is given.
    pub const MIN_DEADLINE: Duration = Duration::from_millis(100);
    /// The longest deadline a read is given.
    pub const MAX_DEADLINE: Duration = Duration::from_secs(30);
    /// How far above a read's deadline the drive waits for it, so a read ends by its own
    /// bound and its outcome is reported.
    pub const FALLBACK_MARGIN: Duration = Duration::from_millis(500);

    /// With another deadline for the whole read, clamped to
    /// [`MIN_DEADLINE`](ReadBounds::MIN_DEADLINE)–[`MAX_DEADLINE`](ReadBounds::MAX_DEADLINE).
    pub fn with_deadline(self, deadline: Duration) -> ReadBounds {
        ReadBounds {
            deadline: deadline.clamp(Self::MIN_DEADLINE, Self::MAX_DEADLINE),
            ..self
        }
    }

    /// With another cap on the records one read takes, of any execution (at least 1).
    pub fn with_max_records(self, max_records: u64) -> ReadBounds {
        ReadBounds {
            max_records: max_records.max(1),
            ..self
        }
    }

    /// The deadline of the whole read.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The cap on the records one read takes.
    pub fn max_records(&self) -> u64 {
        self.max_records
    }

    /// How long a drive should await a read with these bounds before it drops it: the
    /// deadline plus [`FALLBACK_MARGIN`](ReadBounds::FALLBACK_MARGIN).
    pub const fn fallback_timeout(&self) -> Duration {
        self.deadline.saturating_add(Self::FALLBACK_MARGIN)
    }
}

impl Default for ReadBounds {
    fn default() -> Self {
        ReadBounds::DEFAULT
    }
}

/// How one drive runs: its budget, its tail, and which steps after the deadline the worker
/// has. [`DriveFlow::new`] is the deadline loop alone, authoritative, not stateless; each
/// builder method sets one step, so a field added later is a method, not a breaking change.
#[derive(Clone)]
pub struct DriveFlow<'a> {
    /// The deadline and the per-wait cap.
    pub(crate) budget: DriveBudget,
    /// The dispatch's `tail_events`, raw WAL payloads, applied before the first build.
    pub(crate) tail_events: Vec<Bytes>,
    /// The shard loader and retained WAL.
    pub(crate) fallbacks: Option<&'a dyn DriveFallbacks>,
    /// How long the drive awaits one fallback read before it drops it (default 3.5 s: above
    /// the reads' own 3 s deadline, so a read ends by its own bound, and its outcome is
    /// reported). An early read behind a backfill is also bounded by the drive's deadline.
    pub(crate) fallback_timeout: Duration,
    /// The cap on concurrent replays; without one no replay is attempted.
    pub(crate) rehydrate_gate: Option<&'a RehydrateGate>,
    /// The stateless edge: an unserved drive is `stateless_retry`, not
    /// `fallback_incomplete`.
    pub(crate) stateless: bool,
    /// False for a worker that does not build: the drive returns `fallback_disabled`
    /// without building.
    pub(crate) authoritative: bool,
    /// Compare a spine the state shard served with the retained WAL's.
    pub(crate) verify_shard: bool,
}

impl std::fmt::Debug for DriveFlow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveFlow")
            .field("budget", &self.budget)
            .field("tail_events", &self.tail_events.len())
            .field("fallbacks", &self.fallbacks.is_some())
            .field("fallback_timeout", &self.fallback_timeout)
            .field("rehydrate_gate", &self.rehydrate_gate)
            .field("stateless", &self.stateless)
            .field("authoritative", &self.authoritative)
            .field("verify_shard", &self.verify_shard)
            .finish()
    }
}

impl Default for DriveFlow<'_> {
    /// Today's default budget, the deadline loop alone.
    fn default() -> Self {
        DriveFlow::new(DriveBudget::default())
    }
}

impl<'a> DriveFlow<'a> {
    /// The default bound on one fallback read: [`ReadBounds::DEFAULT`]'s fallback timeout
    /// (3.5 s, half a second above the reads' own 3 s deadline).
    pub const DEFAULT_FALLBACK_TIMEOUT: Duration = ReadBounds::DEFAULT.fallback_timeout();

    /// The deadline loop alone: no tail, no shard, no replay.
    pub fn new(budget: DriveBudget) -> DriveFlow<'a> {
        DriveFlow {
            budget,
            tail_events: Vec::new(),
            fallbacks: None,
            fallback_timeout: DriveFlow::DEFAULT_FALLBACK_TIMEOUT,
            rehydrate_gate: None,
            stateless: false,
            authoritative: true,
            verify_shard: false,
        }
    }

    /// With the dispatch's tail events.
    pub fn tail_events(mut self, tail: Vec<Bytes>) -> Self {
        self.tail_events = tail;
        self
    }

    /// With a shard loader and retained WAL; a replay also needs
    /// [`rehydrate_gate`](DriveFlow::rehydrate_gate).
    pub fn fallbacks(mut self, fallbacks: &'a dyn DriveFallbacks) -> Self {
        self.fallbacks = Some(fallbacks);
        self
    }

    /// Verify mode (production's `NOETL_STATE_SHARD_READ_VERIFY`, off by default): after
    /// the state shard served, the drive also reads the retained WAL (within the
    /// [`rehydrate_gate`](DriveFlow::rehydrate_gate)'s cap) and compares the served spine's
    /// slim payloads with the spine the WAL's events give from the same head, byte for byte.
    /// A difference serves the WAL's spine, replays it into the index and labels the drive
    /// `served_shard_mismatch`. When there is nothing to compare with (the cap is reached,
    /// the WAL does not answer, its events stop short of genesis) the shard's spine is
    /// served and the comparison is counted `unverified`: the drive never compares a build
    /// with itself.
    pub fn verify_shard(mut self, verify: bool) -> Self {
        self.verify_shard = verify;
        self
    }

    /// With `timeout` as the bound on each fallback read (a read still running then is
    /// dropped, and the step reports what it would without a source).
    pub fn fallback_timeout(mut self, timeout: Duration) -> Self {
        self.fallback_timeout = timeout;
        self
    }

    /// Whether this flow can read its execution (a retained WAL and a replay cap): only
    /// such a drive leaves its wait early while the drain backfills. (The flow cannot tell
    /// whether its [`DriveFallbacks`] implements `retained`; one that does not answers
    /// `None`, and the drive goes back to waiting.)
    pub fn can_rehydrate(&self) -> bool {
        self.fallbacks.is_some() && self.rehydrate_gate.is_some()
    }

    /// With rehydrate on miss, capped by `gate`.
    pub fn rehydrate_gate(mut self, gate: &'a RehydrateGate) -> Self {
        self.rehydrate_gate = Some(gate);
        self
    }

    /// On the stateless edge (a miss is `stateless_retry`).
    pub fn stateless(mut self, stateless: bool) -> Self {
        self.stateless = stateless;
        self
    }

    /// Whether this worker builds at all.
    pub fn authoritative(mut self, authoritative: bool) -> Self {
        self.authoritative = authoritative;
        self
    }
}
