//! A state-shard writer beside the drain: production's materializer, fed by the drain's
//! batches instead of a consumer group of its own (noetl/worker's
//! `src/state_materializer.rs`, v5.120.0).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chain_fold::{Event, EventId, ExecutionId};
use wal_index::flow::ShardAnswer;
use wal_index::ingest::DecodeMode;

use crate::codec::encode;
use crate::key::{CellSettings, ShardKind};
use crate::reader::StateShardReader;
use crate::row::{DEFAULT_EXTRACTED_BUDGET, ShardRow};
use crate::store::ShardStore;

/// How the writer paces and bounds itself. Production's settings where it has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// An execution's `open` shard is rewritten at most once per this interval
    /// (`NOETL_STATE_SHARD_OPEN_MIN_INTERVAL_SECS`, 30 s; zero: at every batch). Its first
    /// write is immediate.
    pub open_min_interval: Duration,
    /// How often the writer wakes without a batch to write the `open` shards whose
    /// interval has passed since their last write (production has no timer: a throttled
    /// execution waits for its next event or its seal).
    pub tick: Duration,
    /// Executions held at most; above it the least recently active are written and dropped
    /// (`NOETL_STATE_SHARD_MAX_OPEN`, 8,192; 0: no cap).
    pub max_open: usize,
    /// An execution idle this long is written and dropped
    /// (`NOETL_STATE_SHARD_OPEN_TTL_SECS`, 3,600 s; production runs 900; zero: never).
    pub open_ttl: Duration,
    /// Batches queued between the drain and the writer; a batch that finds the queue full
    /// is dropped and counted, never waited for.
    pub queue_batches: usize,
    /// The cap on a row's `extracted` (`NOETL_STATE_SHARD_EXTRACTED_BUDGET`, 4,096 bytes).
    pub extracted_budget: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            open_min_interval: Duration::from_secs(30),
            tick: Duration::from_secs(1),
            max_open: 8192,
            open_ttl: Duration::from_secs(3600),
            queue_batches: 1024,
            extracted_budget: DEFAULT_EXTRACTED_BUDGET,
        }
    }
}

impl WriterConfig {
    /// How long [`ShardWriter::shut_down`] goes on writing the `open` shards it holds
    /// unwritten rows of (each request is bounded by
    /// [`ShardStore::DEFAULT_REQUEST_TIMEOUT`], so a shutdown ends within about the sum);
    /// the ones left are counted as errors.
    pub const SHUTDOWN_FLUSH_WITHIN: Duration = Duration::from_secs(10);

    /// The defaults overridden by production's variables in `lookup` (trimmed; an
    /// unparsable value keeps the default).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> WriterConfig {
        let mut config = WriterConfig::default();
        let number = |name: &str| lookup(name).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(secs) = number("NOETL_STATE_SHARD_OPEN_MIN_INTERVAL_SECS") {
            config.open_min_interval = Duration::from_secs(secs);
        }
        if let Some(n) = number("NOETL_STATE_SHARD_MAX_OPEN") {
            config.max_open = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(secs) = number("NOETL_STATE_SHARD_OPEN_TTL_SECS") {
            config.open_ttl = Duration::from_secs(secs);
        }
        if let Some(n) = number("NOETL_STATE_SHARD_EXTRACTED_BUDGET") {
            config.extracted_budget = usize::try_from(n).unwrap_or(usize::MAX);
        }
        config
    }

    /// [`WriterConfig::from_lookup`] over the process environment.
    pub fn from_env() -> WriterConfig {
        WriterConfig::from_lookup(|name| std::env::var(name).ok())
    }
}

/// What the writer did, counted since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Events received from the drain.
    pub events: u64,
    /// Events dropped because the queue was full (or the writer had stopped).
    pub dropped: u64,
    /// `open` shards written.
    pub open_written: u64,
    /// `sealed` shards written.
    pub sealed_written: u64,
    /// Rows in the shards written.
    pub rows: u64,
    /// Bytes of the shards written.
    pub bytes: u64,
    /// Writes that failed, and shards not written because the one in the store could not
    /// be read to merge with.
    pub errors: u64,
    /// Executions whose shard already in the store held rows this process had not seen,
    /// merged in before the first write.
    pub merged: u64,
    /// Executions dropped for idling past the TTL.
    pub evicted_idle: u64,
    /// Executions dropped over the cap.
    pub evicted_max_open: u64,
}

#[derive(Debug, Default)]
struct Counters([AtomicU64; 10]);

impl Counters {
    fn add(&self, which: usize, n: u64) {
        // Relaxed: independent tallies, read only for reports.
        self.0[which].fetch_add(n, Ordering::Relaxed);
    }
    fn snapshot(&self) -> WriterStats {
        let v = |i: usize| self.0[i].load(Ordering::Relaxed);
        WriterStats {
            events: v(EVENTS),
            dropped: v(DROPPED),
            open_written: v(OPEN_WRITTEN),
            sealed_written: v(SEALED_WRITTEN),
            rows: v(ROWS),
            bytes: v(BYTES),
            errors: v(ERRORS),
            merged: v(MERGED),
            evicted_idle: v(EVICTED_IDLE),
            evicted_max_open: v(EVICTED_MAX_OPEN),
        }
    }
}

const EVENTS: usize = 0;
const DROPPED: usize = 1;
const OPEN_WRITTEN: usize = 2;
const SEALED_WRITTEN: usize = 3;
const ROWS: usize = 4;
const BYTES: usize = 5;
const ERRORS: usize = 6;
const MERGED: usize = 7;
const EVICTED_IDLE: usize = 8;
const EVICTED_MAX_OPEN: usize = 9;

/// The series prefix of production's materializer.
const METRIC_PREFIX: &str = "noetl_worker_state_materializer_";

/// Writes state shards from the drain's batches, on a thread of its own.
///
/// Production's materializer, with three differences:
///
/// - it is fed by the pool's own drain ([`ShardWriter::feed`] on
///   [`Drain::on_batch`](wal_index::Drain::on_batch)), not a second consumer of the log;
/// - an `open` shard whose interval passed is written at the next tick even if no event
///   came (production waits for the next event or the seal);
/// - **a shard never loses a row it held**: before an execution's first write from memory
///   (it came into memory now, or again after an eviction, a seal, a restart, a batch
///   dropped at the queue), the writer reads its shard in the store (`sealed`, then
///   `open`) and merges the rows it lacks; it writes nothing for the execution if that
///   shard exists and cannot be read. One read per execution per stay in memory (a
///   404, usually: two GETs); what the writer writes afterwards is a superset of it.
///
/// Rows are one per event id, ascending, a redelivery replacing its row; the `sealed`
/// shard is written at the terminal event and the execution dropped from memory. Every
/// failure is counted ([`WriterStats`], and production's
/// `noetl_worker_state_materializer_*` series), never retried at once.
///
/// # What it costs the drain
///
/// [`feed`](ShardWriter::feed)'s closure copies the batch's event handles (one
/// reference-count increment each, no payload copy) and offers them to a bounded queue
/// without waiting: a full queue drops the batch and counts its events. The drain never
/// waits for a shard write.
///
/// ```
/// use std::sync::Arc;
/// use state_shard::{CellSettings, ShardStore, ShardWriter, StateShardReader, WriterConfig};
/// use wal_index::ingest::JsonLinesSource;
/// use wal_index::flow::ShardAnswer;
/// use wal_index::ingest::DecodeMode;
/// use wal_index::{Drain, DrainConfig, WalIndex};
///
/// # fn main() -> std::io::Result<()> {
/// let dir = std::env::temp_dir().join(format!("shards-writer-doc-{}", std::process::id()));
/// let store = ShardStore::open(dir.to_str().unwrap(), std::iter::empty())?;
/// let writer = ShardWriter::start(store.clone(), CellSettings::default(), WriterConfig::default())?;
/// let wal = "{\"event_id\":1,\"execution_id\":5,\"event_type\":\"playbook_started\"}\n\
///            {\"event_id\":2,\"execution_id\":5,\"prev_event_id\":1,\"event_type\":\"playbook_completed\"}\n";
/// let mut drain = Drain::new(Arc::new(WalIndex::default()), JsonLinesSource::new(wal.as_bytes()), DrainConfig::default())
///     .on_batch(writer.feed());
/// drain.run_until_closed()?;
/// let stats = writer.shut_down();
/// assert_eq!(stats.sealed_written, 1);
/// let reader = StateShardReader::new(store, CellSettings::default());
/// let ShardAnswer::Events(events) = reader.read_blocking(5, DecodeMode::Slim) else { panic!() };
/// assert_eq!(events.len(), 2);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ShardWriter {
    sender: Option<SyncSender<Message>>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl ShardWriter {
    /// Starts the writer's thread.
    pub fn start(
        store: ShardStore,
        cell: CellSettings,
        config: WriterConfig,
    ) -> io::Result<ShardWriter> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(config.queue_batches.max(1));
        let counters = Arc::new(Counters::default());
        let work = Work {
            reader: StateShardReader::new(store.clone(), cell.clone()),
            store,
            cell,
            config,
            counters: Arc::clone(&counters),
            held: HashMap::new(),
        };
        let thread = std::thread::Builder::new()
            .name("state-shard-writer".into())
            .spawn(move || work.run(receiver))?;
        Ok(ShardWriter {
            sender: Some(sender),
            counters,
            thread: Some(thread),
        })
    }

    /// The hook to give [`Drain::on_batch`](wal_index::Drain::on_batch): it offers each
    /// batch to the writer's queue and never waits.
    pub fn feed(&self) -> impl FnMut(&[Event]) + Send + 'static {
        let sender = self.sender.clone();
        let counters = Arc::clone(&self.counters);
        move |events: &[Event]| {
            let n = events.len() as u64;
            let sent = match &sender {
                Some(sender) => match sender.try_send(Message::Batch(events.to_vec())) {
                    Ok(()) => true,
                    Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
                },
                None => false,
            };
            if !sent {
                counters.add(DROPPED, n);
                metrics::counter!(format!("{METRIC_PREFIX}dropped_total")).increment(n);
            }
        }
    }

    /// What it did so far.
    pub fn stats(&self) -> WriterStats {
        self.counters.snapshot()
    }

    /// Stops taking batches, writes every execution it holds that has rows not yet
    /// written (whatever its interval), and returns the totals. Feeds still attached drop
    /// what they are given from then on.
    pub fn shut_down(mut self) -> WriterStats {
        self.stop();
        self.counters.snapshot()
    }

    fn stop(&mut self) {
        // Queued behind the batches already offered: they are written first. The send
        // waits only for the writer to take them (it fails if the writer is gone).
        if let Some(sender) = self.sender.take() {
            let _ = sender.send(Message::Stop);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ShardWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the writer's queue carries.
#[derive(Debug)]
enum Message {
    /// A batch from the drain.
    Batch(Vec<Event>),
    /// [`ShardWriter::shut_down`]: flush and end (feeds may still be attached).
    Stop,
}

/// One execution the writer holds.
struct Held {
    /// Each event's row, derived once when the event arrives.
    rows: BTreeMap<EventId, ShardRow>,
    last_active: Instant,
    /// When its `open` shard was last attempted.
    last_attempt: Option<Instant>,
    /// Rows not yet written.
    dirty: bool,
    /// Its terminal event arrived: `sealed` is due.
    terminal: bool,
    /// Merged with the store's shard: what this process writes holds at least what the store
    /// held when the execution came into memory.
    merged: bool,
}

struct Work {
    store: ShardStore,
    reader: StateShardReader,
    cell: CellSettings,
    config: WriterConfig,
    counters: Arc<Counters>,
    held: HashMap<ExecutionId, Held>,
}

impl Work {
    fn run(mut self, receiver: Receiver<Message>) {
        loop {
            match receiver.recv_timeout(self.config.tick) {
                Ok(Message::Batch(batch)) => {
                    self.absorb(batch);
                    // Whatever else is queued joins this cycle.
                    let mut stop = false;
                    for _ in 0..self.config.queue_batches {
                        match receiver.try_recv() {
                            Ok(Message::Batch(batch)) => self.absorb(batch),
                            Ok(Message::Stop) => {
                                stop = true;
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    self.cycle(stop);
                    if stop {
                        return self.refuse_queued(&receiver);
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.cycle(false),
                Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    self.cycle(true);
                    return self.refuse_queued(&receiver);
                }
            }
        }
    }

    /// Counts as dropped the batches offered after the stop (feeds still attached).
    fn refuse_queued(&self, receiver: &Receiver<Message>) {
        while let Ok(message) = receiver.try_recv() {
            if let Message::Batch(batch) = message {
                self.counters.add(DROPPED, batch.len() as u64);
            }
        }
    }

    fn absorb(&mut self, batch: Vec<Event>) {
        let now = Instant::now();
        self.counters.add(EVENTS, batch.len() as u64);
        metrics::counter!(format!("{METRIC_PREFIX}drained_total")).increment(batch.len() as u64);
        for event in batch {
            let held = self
                .held
                .entry(event.execution_id())
                .or_insert_with(|| Held {
                    rows: BTreeMap::new(),
                    last_active: now,
                    last_attempt: None,
                    dirty: false,
                    terminal: false,
                    merged: false,
                });
            held.terminal |= event.is_terminal();
            held.dirty = true;
            held.last_active = now;
            let row = ShardRow::from_event(&event, self.config.extracted_budget);
            held.rows.insert(event.id(), row);
        }
    }

    /// Seals what ended, writes the `open` shards that are due (all that are dirty when
    /// `flush`), then applies the cap and the TTL.
    fn cycle(&mut self, flush: bool) {
        let now = Instant::now();
        let ended: Vec<ExecutionId> = self
            .held
            .iter()
            .filter(|(_, h)| h.terminal)
            .map(|(&id, _)| id)
            .collect();
        // At the shutdown, the flush stops at its bound; what is left is counted unwritten.
        let flush_ends = Instant::now() + WriterConfig::SHUTDOWN_FLUSH_WITHIN;
        for id in ended {
            if flush && Instant::now() >= flush_ends {
                self.counters.add(ERRORS, 1);
                continue;
            }
            if let Some(mut held) = self.held.remove(&id) {
                self.write(id, &mut held, ShardKind::Sealed);
            }
        }
        let interval = self.config.open_min_interval;
        let due: Vec<ExecutionId> = self
            .held
            .iter()
            .filter(|(_, h)| {
                h.dirty
                    && (flush
                        || h.last_attempt
                            .is_none_or(|at| now.saturating_duration_since(at) >= interval))
            })
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            if flush && Instant::now() >= flush_ends {
                self.counters.add(ERRORS, 1);
                continue;
            }
            if let Some(mut held) = self.held.remove(&id) {
                held.last_attempt = Some(now);
                self.write(id, &mut held, ShardKind::Open);
                self.held.insert(id, held);
            }
        }
        self.evict(now);
        metrics::gauge!(format!("{METRIC_PREFIX}open_shards")).set(self.held.len() as f64);
    }

    /// Drops executions idle past the TTL and, over the cap, the least recently active;
    /// each is written first if it has rows not yet written.
    fn evict(&mut self, now: Instant) {
        let ttl = self.config.open_ttl;
        let mut victims: Vec<(ExecutionId, usize)> = Vec::new();
        if !ttl.is_zero() {
            victims.extend(
                self.held
                    .iter()
                    .filter(|(_, h)| now.saturating_duration_since(h.last_active) >= ttl)
                    .map(|(&id, _)| (id, EVICTED_IDLE)),
            );
        }
        let cap = self.config.max_open;
        if cap > 0 && self.held.len() - victims.len() > cap {
            let mut by_age: Vec<(Instant, ExecutionId)> = self
                .held
                .iter()
                .filter(|(id, _)| !victims.iter().any(|v| v.0 == **id))
                .map(|(&id, h)| (h.last_active, id))
                .collect();
            by_age.sort_unstable();
            let over = self.held.len() - victims.len() - cap;
            victims.extend(
                by_age
                    .into_iter()
                    .take(over)
                    .map(|(_, id)| (id, EVICTED_MAX_OPEN)),
            );
        }
        for (id, reason) in victims {
            if let Some(mut held) = self.held.remove(&id) {
                if held.dirty {
                    self.write(id, &mut held, ShardKind::Open);
                }
                self.counters.add(reason, 1);
                let label = if reason == EVICTED_IDLE {
                    "idle"
                } else {
                    "max_open"
                };
                metrics::counter!(format!("{METRIC_PREFIX}evicted_total"), "reason" => label)
                    .increment(1);
            }
        }
    }

    /// Writes one shard of `held`; merges it first with the store's at its first write.
    fn write(&mut self, id: ExecutionId, held: &mut Held, kind: ShardKind) {
        if !held.merged && !self.merge(id, held) {
            self.failed();
            return;
        }
        let rows: Vec<&ShardRow> = held.rows.values().collect();
        let bytes = match encode(&rows) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return,
            Err(_) => return self.failed(),
        };
        let len = bytes.len() as u64;
        match futures_lite::future::block_on(self.store.put(&self.cell.key(id, kind), bytes)) {
            Ok(()) => {
                held.dirty = false;
                let which = match kind {
                    ShardKind::Open => OPEN_WRITTEN,
                    ShardKind::Sealed => SEALED_WRITTEN,
                };
                self.counters.add(which, 1);
                self.counters.add(ROWS, rows.len() as u64);
                self.counters.add(BYTES, len);
                metrics::counter!(format!("{METRIC_PREFIX}shards_written_total"), "seal" => kind.label())
                    .increment(1);
                metrics::counter!(format!("{METRIC_PREFIX}rows_total"))
                    .increment(rows.len() as u64);
                metrics::counter!(format!("{METRIC_PREFIX}shard_bytes_total")).increment(len);
            }
            Err(_) => self.failed(),
        }
    }

    /// Adds the rows of the shard already in the store that `held` lacks. False when that
    /// shard exists but cannot be read: writing would replace it, perhaps with less.
    fn merge(&mut self, id: ExecutionId, held: &mut Held) -> bool {
        match self.reader.read_blocking(id, DecodeMode::Whole) {
            ShardAnswer::Events(events) => {
                let budget = self.config.extracted_budget;
                let before = held.rows.len();
                for event in events {
                    (held.rows.entry(event.id()))
                        .or_insert_with(|| ShardRow::from_event(&event, budget));
                }
                if held.rows.len() > before {
                    self.counters.add(MERGED, 1);
                }
            }
            ShardAnswer::NotFound | ShardAnswer::Empty | ShardAnswer::NoReader => {}
            ShardAnswer::Failed(_) => return false,
        }
        held.merged = true;
        true
    }

    fn failed(&self) {
        self.counters.add(ERRORS, 1);
        metrics::counter!(format!("{METRIC_PREFIX}errors_total")).increment(1);
    }
}
