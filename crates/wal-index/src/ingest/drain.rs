//! The drain: pulls batches from a [`WalSource`], applies them, sweeps on an interval, and
//! reports bad records without stopping.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chain_fold::Event;

use super::decode::decode_records;
use super::source::{Backfill, Pull, RecordError, WalSource};
use crate::checkpoint::{
    CheckpointReport, Checkpointable, Checkpointer, Checkpointing, LastCheckpoint,
};
use crate::index::StateIndex;
use crate::labels::CheckpointLabel;
use crate::report::EvictionStats;
use crate::stall::StalledChain;
use crate::sync::{Waiting, run_to_completion};

/// Drain settings. The defaults are production's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainConfig {
    /// Largest batch pulled and applied at once (production: 200).
    pub batch_max: usize,
    /// How long one pull waits for the first record (production sleeps 25 ms between
    /// empty pulls).
    pub idle_wait: Duration,
    /// How often, at most, the eviction sweep runs (today: `NOETL_STATE_INDEX_SWEEP_SECS`,
    /// 15 s by default).
    pub sweep_every: Duration,
    /// What a source error does: `Some` retries after a growing pause (the default; a
    /// broker outage is not the end of the drain), `None` ends the run with the error.
    /// Errors of kind [`InvalidInput`](io::ErrorKind::InvalidInput) always end it: they
    /// say the source is misconfigured, which waiting cannot fix.
    pub retry: Option<Backoff>,
    /// Threads that decode a large pull (a backfill's batches): its records are split in
    /// this many runs, decoded (and projected to slim, when the index stores slim events)
    /// side by side, and applied in log order. A pull under 256 KiB, or a setting of 1,
    /// decodes on the drain's own thread and leaves the projection to the index. (With more
    /// than one, today's design, `MutexIndex`, receives projected events, so its drain does
    /// less than today's worker: keep 1 to measure it at today's costs.)
    ///
    /// Default 1. More threads pay where cores sit idle during a backfill (docs/benchmarks.md
    /// measures the drain alone over production's retained volume with 1 and 2). Where the
    /// cores are shared (a broker on the same machine, or
    /// drives that read their executions meanwhile), the decode takes them from the rest:
    /// through a broker on the same 2 cores the backfill and the drives' reads were slower.
    pub decode_threads: usize,
}

impl Default for DrainConfig {
    fn default() -> Self {
        DrainConfig {
            batch_max: 200,
            idle_wait: Duration::from_millis(25),
            sweep_every: Duration::from_secs(DrainConfig::DEFAULT_SWEEP_SECS),
            retry: Some(Backoff::default()),
            decode_threads: 1,
        }
    }
}

impl DrainConfig {
    /// Today's sweep interval, in seconds.
    pub const DEFAULT_SWEEP_SECS: u64 = 15;

    /// The defaults, with `NOETL_STATE_INDEX_SWEEP_SECS` (seconds between sweeps, at least
    /// 1; unset or empty: 15) read from the process environment. A value that is set but
    /// not a positive integer is an error naming the variable.
    pub fn from_env() -> Result<DrainConfig, crate::config::ConfigError> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// [`DrainConfig::from_env`] over any lookup function.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wal_index::DrainConfig;
    ///
    /// let config = DrainConfig::from_lookup(|_| None).unwrap();
    /// assert_eq!(config.sweep_every, Duration::from_secs(15));
    /// let config = DrainConfig::from_lookup(|_| Some("60".to_owned())).unwrap();
    /// assert_eq!(config.sweep_every, Duration::from_secs(60));
    /// assert!(DrainConfig::from_lookup(|_| Some("0".to_owned())).is_err());
    /// ```
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<DrainConfig, crate::config::ConfigError> {
        const VAR: &str = "NOETL_STATE_INDEX_SWEEP_SECS";
        let mut config = DrainConfig::default();
        if let Some(value) = crate::config::Vars(lookup).get(VAR) {
            match value.parse::<u64>() {
                Ok(secs) if secs > 0 => config.sweep_every = Duration::from_secs(secs),
                _ => {
                    return Err(crate::config::ConfigError {
                        var: VAR,
                        value,
                        expected: "a positive number of seconds",
                    });
                }
            }
        }
        Ok(config)
    }
}

/// Capped exponential backoff between retries of a failing source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The pause after the first error (default 25 ms).
    pub first: Duration,
    /// The longest pause (default 1 s); each further consecutive error doubles the pause
    /// up to this.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(25),
            max: Duration::from_secs(1),
        }
    }
}

impl Backoff {
    /// The pause after `consecutive` errors in a row (1 = the first).
    ///
    /// ```
    /// use std::time::Duration;
    /// use wal_index::ingest::Backoff;
    ///
    /// let backoff = Backoff::default();
    /// assert_eq!(backoff.pause(1), Duration::from_millis(25));
    /// assert_eq!(backoff.pause(3), Duration::from_millis(100));
    /// assert_eq!(backoff.pause(40), Duration::from_secs(1));
    /// ```
    pub fn pause(&self, consecutive: u32) -> Duration {
        let doublings = consecutive.saturating_sub(1).min(20);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }
}

/// What one pull gave the drain.
enum Step {
    Closed,
    Idle,
    Events(Vec<Event>),
}

/// A record the drain could not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord {
    /// Its position in the WAL.
    pub position: u64,
    /// Why.
    pub error: RecordError,
}

/// What a drain has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Batches applied.
    pub batches: u64,
    /// Events applied, each as often as it was delivered.
    pub events: u64,
    /// Of those, the events whose id the index did not hold when they were applied: the
    /// distinct records a replay delivers once (an execution re-created after its eviction
    /// counts again).
    pub new_events: u64,
    /// Of those, the events whose id the index already held (a redelivery, a record stored
    /// twice): `events - new_events`. A loss never hides behind a full `events` count: the
    /// distinct count is `new_events`.
    pub redelivered: u64,
    /// Records that failed to decode (skipped; their neighbours were applied).
    pub bad: u64,
    /// The first [`DrainReport::BAD_SAMPLES`] bad records.
    pub bad_samples: Vec<BadRecord>,
    /// Executions evicted after their terminal event.
    pub terminal_evictions: u64,
    /// Sweeps run, and what they evicted in total.
    pub sweeps: u64,
    /// Executions evicted by sweeps.
    pub swept: u64,
    /// Source errors (failed pulls and commits) that were retried.
    pub source_errors: u64,
    /// The last of them, as text.
    pub last_source_error: Option<String>,
    /// Holes reported by the drain's stall checks ([`crate::stall`]).
    pub stalled: u64,
    /// The first [`DrainReport::STALLED_SAMPLES`] of them.
    pub stalled_samples: Vec<StalledChain>,
    /// What its checkpoints did ([`Drain::checkpoint_to`]).
    pub checkpoints: CheckpointReport,
}

impl DrainReport {
    /// How many bad records are kept as samples.
    pub const BAD_SAMPLES: usize = 64;
    /// How many stalled chains are kept as samples.
    pub const STALLED_SAMPLES: usize = 64;
}

/// Pulls from `source` into `index`.
///
/// It reports `wal_events` (records consumed, bad ones included) and `healthy` (up after a
/// successful pull, down when the source errors) to the index's observer. After each
/// applied batch it calls [`WalSource::commit`]. A source error is retried with
/// [`DrainConfig::retry`]'s backoff (the drain stays responsive to `stop` meanwhile) unless
/// retries are off or the error is [`InvalidInput`](io::ErrorKind::InvalidInput).
///
/// ```
/// use std::sync::Arc;
/// use wal_index::ingest::JsonLinesSource;
/// use wal_index::{Drain, DrainConfig, StateIndex, WalIndex};
///
/// let wal = "{\"event_id\":1,\"execution_id\":5,\"event_type\":\"playbook_started\"}\n\
///            not json\n\
///            {\"event_id\":2,\"execution_id\":5,\"prev_event_id\":1}\n\
///            {\"event_id\":2,\"execution_id\":5,\"prev_event_id\":1}\n";
/// let index = Arc::new(WalIndex::default());
/// let mut drain = Drain::new(index.clone(), JsonLinesSource::new(wal.as_bytes()), DrainConfig::default());
/// let report = drain.run_until_closed().unwrap();
/// assert_eq!((report.events, report.bad), (3, 1));
/// // The record stored twice is counted apart: two distinct events, one redelivery.
/// assert_eq!((report.new_events, report.redelivered), (2, 1));
/// assert_eq!(report.bad_samples[0].position, 2);
/// assert_eq!(index.build(5, Some(2)).spine.unwrap().ids(), vec![1, 2]);
/// ```
pub struct Drain<I: StateIndex, S> {
    index: Arc<I>,
    source: S,
    /// The last backfill state noted to the index.
    backfill: Backfill,
    config: DrainConfig,
    report: DrainReport,
    last_sweep: Instant,
    last_stall_check: Instant,
    healthy: Option<bool>,
    /// Consecutive source errors, and when the next attempt is due.
    failing: Option<(u32, Instant)>,
    /// Where and when it checkpoints the index, if it does.
    checkpointer: Option<Checkpointer>,
    /// What the pool's probes read.
    health: Arc<DrainHealth>,
    /// Handed each batch before it is applied ([`Drain::on_batch`]).
    on_batch: Option<BatchTap>,
}

/// A hook on the drain's batches: see [`Drain::on_batch`].
type BatchTap = Box<dyn FnMut(&[Event]) + Send>;

impl<I: StateIndex, S: WalSource> Drain<I, S> {
    /// A drain that has not pulled anything yet.
    pub fn new(index: Arc<I>, mut source: S, config: DrainConfig) -> Self {
        // A source that decodes its own records decodes them as this index stores them.
        source.decode_as(index.decode_mode());
        Drain {
            index,
            source,
            config,
            report: DrainReport::default(),
            backfill: Backfill::Unknown,
            last_sweep: Instant::now(),
            last_stall_check: Instant::now(),
            healthy: None,
            failing: None,
            checkpointer: None,
            health: Arc::new(DrainHealth::new()),
            on_batch: None,
        }
    }

    /// Hands `tap` every batch of events, on the drain's thread, just before the index
    /// applies it (bad records are not in it). A state-shard writer beside the drain feeds
    /// on it (the `state-shard` crate's `ShardWriter::feed`). The drain waits for `tap` on every batch,
    /// so it must not block: hand the events on (cloning an [`Event`] is one reference-count
    /// increment) through a bounded queue whose sender never waits, and count what it drops.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use wal_index::ingest::JsonLinesSource;
    /// use wal_index::{Drain, DrainConfig, WalIndex};
    ///
    /// let wal = "{\"event_id\":1,\"execution_id\":5,\"event_type\":\"playbook_started\"}\n";
    /// let seen = Arc::new(AtomicUsize::new(0));
    /// let counted = Arc::clone(&seen);
    /// let mut drain = Drain::new(Arc::new(WalIndex::default()), JsonLinesSource::new(wal.as_bytes()), DrainConfig::default())
    ///     .on_batch(move |events| { counted.fetch_add(events.len(), Ordering::Relaxed); });
    /// drain.run_until_closed().unwrap();
    /// assert_eq!(seen.load(Ordering::Relaxed), 1);
    /// ```
    pub fn on_batch(mut self, tap: impl FnMut(&[Event]) + Send + 'static) -> Self {
        self.on_batch = Some(Box::new(tap));
        self
    }

    /// One pull-apply-commit step (and a sweep if one is due), blocking the calling thread:
    /// the pull waits up to `idle_wait` for a first record. Returns false once the source is
    /// closed; an error only when the source failed and is not retried.
    pub fn step(&mut self) -> io::Result<bool> {
        run_to_completion(self.step_waiting(Waiting::Park))
    }

    /// [`Drain::step`] as a task on an executor, as today's drain runs: the pull does not
    /// wait (an empty pull sleeps `idle_wait` on a timer instead), and the batch and the
    /// sweep await rather than block on the index's locks (today's mutex is awaited per
    /// event). The source's `pull` is still called inline: the channel and broker sources
    /// return at once with a zero wait, but [`JsonLinesSource`](super::JsonLinesSource)
    /// reading a pipe blocks the executor's thread until a line arrives.
    pub async fn step_async(&mut self) -> io::Result<bool> {
        self.step_waiting(Waiting::Timer).await
    }

    /// Nothing pulled: the index and the source's position agree, so a checkpoint that came
    /// due while the writer was busy is taken now rather than at the next batch, which on a
    /// quiet log may be long in coming.
    fn checkpoint_at_rest(&mut self) {
        if let Some(checkpointer) = &mut self.checkpointer {
            checkpointer.after_batch(|| self.source.position(), 0);
        }
    }

    /// The one body of a step. `waiting` decides only how a pause passes and where an idle
    /// source's wait happens: inside the pull for a parked thread, on a timer after it for a
    /// task.
    async fn step_waiting(&mut self, waiting: Waiting) -> io::Result<bool> {
        // Every step, a backoff's pause and a failed pull included, is the drain alive.
        self.health.stepped();
        if let Some(pause) = self.backing_off() {
            // Short slices, so `run_until`'s stop flag is seen promptly.
            waiting.sleep(pause).await;
            return Ok(true);
        }
        let pull_wait = match waiting {
            Waiting::Park => self.config.idle_wait,
            Waiting::Timer => Duration::ZERO,
        };
        let pulled = self.source.pull(self.config.batch_max, pull_wait);
        if pulled.is_ok() {
            self.note_backfill(self.source.backfill());
        }
        // A source that does not know its head has reached it when a pull finds less than a
        // whole batch (nothing more was there); one that knows says so (`note_backfill`).
        let short = match &pulled {
            Ok(Pull::Records(records)) => records.len() < self.config.batch_max,
            Ok(Pull::Decoded(records)) => records.len() < self.config.batch_max,
            Ok(Pull::Idle | Pull::Closed) => true,
            Err(_) => false,
        };
        if (short && self.backfill == Backfill::Unknown) || matches!(pulled, Ok(Pull::Closed)) {
            self.health.head_reached();
        }
        let more = match self.decode(pulled) {
            Err(error) => return self.source_failed(error),
            Ok(Step::Closed) => {
                if let Some(checkpointer) = &mut self.checkpointer {
                    checkpointer.at_close(|| self.source.position());
                }
                false
            }
            Ok(Step::Idle) => {
                self.checkpoint_at_rest();
                if waiting == Waiting::Timer {
                    waiting.sleep(self.config.idle_wait).await;
                }
                true
            }
            Ok(Step::Events(events)) => {
                let bytes: u64 = events.iter().map(|e| e.payload().len() as u64).sum();
                if !events.is_empty() {
                    if let Some(tap) = &mut self.on_batch {
                        tap(&events);
                    }
                    let batch = self.index.apply_batch_async(events).await;
                    self.report.terminal_evictions += batch.terminal_evicted.len() as u64;
                    self.report.new_events += batch.new as u64;
                    self.report.redelivered += batch.applied.saturating_sub(batch.new) as u64;
                }
                // Between this batch and the next pull: the source's position and the
                // index agree, whether or not the commit that follows succeeds (a failed
                // one has the records delivered again, which the index absorbs).
                if let Some(checkpointer) = &mut self.checkpointer {
                    // A batch of bad records only still moved the position.
                    checkpointer.after_batch(|| self.source.position(), bytes.max(1));
                }
                if let Err(error) = self.source.commit() {
                    return self.source_failed(error);
                }
                true
            }
        };
        if self.pulled() {
            let stats = self.index.enforce_limits_async(self.last_sweep).await;
            self.swept(&stats);
        }
        self.check_stalls_if_due();
        self.note_checkpoints();
        Ok(more)
    }

    /// Copies the checkpoint writer's outcomes into the report, and tells the observer what
    /// changed since the last time: they arrive on the writer's thread.
    fn note_checkpoints(&mut self) {
        let Some(checkpointer) = &self.checkpointer else {
            return;
        };
        let now = checkpointer.report();
        let before = std::mem::replace(&mut self.report.checkpoints, now);
        let after = &self.report.checkpoints;
        let observer = self.index.observer();
        for (label, was, is) in [
            (CheckpointLabel::Written, before.written, after.written),
            (CheckpointLabel::Failed, before.failed, after.failed),
            (
                CheckpointLabel::SkippedBusy,
                before.skipped_busy,
                after.skipped_busy,
            ),
            (
                CheckpointLabel::SkippedNoPosition,
                before.skipped_no_position,
                after.skipped_no_position,
            ),
        ] {
            for _ in was..is {
                observer.checkpoint(label);
            }
        }
    }

    /// Shuts the drain down for a roll: it pulls nothing more (every record it pulled is
    /// applied: a step applies its whole pull before it returns) and takes the last
    /// checkpoint at the last record applied, within [`Checkpointing::last_within`], so a
    /// successor resumes there and replays only what was published after. Returns what
    /// became of it (`None`: this drain does not checkpoint), also in
    /// [`DrainReport::checkpoints`]. A drain shut down may be stepped again; its last
    /// checkpoint is taken once.
    pub fn shut_down(&mut self) -> Option<LastCheckpoint> {
        let checkpointer = self.checkpointer.as_mut()?;
        let last = checkpointer.last(|| self.source.position());
        self.note_checkpoints();
        Some(last)
    }

    /// What a pool's probes ask ([`DrainHealth`]); updated after every step.
    pub fn health(&self) -> Arc<DrainHealth> {
        Arc::clone(&self.health)
    }

    /// While backing off after a source error: how long to pause before looking again.
    fn backing_off(&self) -> Option<Duration> {
        let (_, due) = self.failing?;
        let now = Instant::now();
        (now < due).then(|| (due - now).min(self.config.idle_wait.max(Duration::from_millis(1))))
    }

    /// Counts and decodes a pull's records (bad ones are counted and skipped).
    fn decode(&mut self, pulled: io::Result<Pull>) -> io::Result<Step> {
        Ok(match pulled? {
            Pull::Closed => Step::Closed,
            Pull::Idle => Step::Idle,
            Pull::Records(records) => {
                self.index.observer().wal_events(records.len() as u64);
                let mode = self.index.decode_mode();
                let mut events = Vec::with_capacity(records.len());
                for (position, decoded) in decode_records(records, mode, self.config.decode_threads)
                {
                    match decoded {
                        Ok(event) => events.push(event),
                        Err(error) => self.bad(position, error.into()),
                    }
                }
                self.decoded(events)
            }
            Pull::Decoded(records) => {
                self.index.observer().wal_events(records.len() as u64);
                let mut events = Vec::with_capacity(records.len());
                for record in records {
                    match record.event {
                        Ok(event) => events.push(event),
                        Err(error) => self.bad(record.position, error),
                    }
                }
                self.decoded(events)
            }
        })
    }

    /// Counts a pull's events as one batch (if it had any).
    fn decoded(&mut self, events: Vec<Event>) -> Step {
        if !events.is_empty() {
            self.report.events += events.len() as u64;
            self.report.batches += 1;
        }
        Step::Events(events)
    }

    /// The bookkeeping after a successful pull: the source is healthy again. Returns true
    /// when a sweep is due, with its instant already taken as `last_sweep`.
    fn pulled(&mut self) -> bool {
        self.failing = None;
        self.set_healthy(true);
        let due = self.last_sweep.elapsed() >= self.config.sweep_every;
        if due {
            self.last_sweep = Instant::now();
        }
        due
    }

    fn source_failed(&mut self, error: io::Error) -> io::Result<bool> {
        self.set_healthy(false);
        let retry = self
            .config
            .retry
            .filter(|_| error.kind() != io::ErrorKind::InvalidInput);
        let Some(backoff) = retry else {
            return Err(error);
        };
        let consecutive = self.failing.map_or(1, |(n, _)| n.saturating_add(1));
        self.failing = Some((consecutive, Instant::now() + backoff.pause(consecutive)));
        self.report.source_errors += 1;
        self.report.last_source_error = Some(error.to_string());
        Ok(true)
    }

    /// Tells the index where the source stands, when that changed.
    fn note_backfill(&mut self, state: Backfill) {
        if state != self.backfill {
            self.backfill = state;
            self.index.note_backfill(state);
        }
        if state == Backfill::CaughtUp {
            self.health.head_reached();
        }
    }

    fn set_healthy(&mut self, up: bool) {
        if self.healthy != Some(up) {
            self.healthy = Some(up);
            self.index.observer().healthy(up);
        }
    }

    fn bad(&mut self, position: u64, error: RecordError) {
        self.report.bad += 1;
        if self.report.bad_samples.len() < DrainReport::BAD_SAMPLES {
            self.report.bad_samples.push(BadRecord { position, error });
        }
    }

    /// Runs the index's stall check every quarter of
    /// [`IndexConfig::stall_after`](crate::IndexConfig::stall_after) (after a step, so a
    /// drain blocked in a quiet source's pull checks when the pull returns).
    fn check_stalls_if_due(&mut self) {
        let Some(bound) = self.index.config().stall_bound() else {
            return;
        };
        // A failing feed checks nothing: a hole's clock runs only while the drain is
        // healthy (and a gap of more than a bound between checks restarts every clock).
        if self.healthy != Some(true) || self.last_stall_check.elapsed() < bound / 4 {
            return;
        }
        self.last_stall_check = Instant::now();
        let found = self.index.check_stalls_at(self.last_stall_check);
        self.stalled(found);
    }

    fn stalled(&mut self, found: Vec<StalledChain>) {
        for stalled in found {
            self.report.stalled += 1;
            if self.report.stalled_samples.len() < DrainReport::STALLED_SAMPLES {
                self.report.stalled_samples.push(stalled);
            }
        }
    }

    /// Runs one eviction sweep now.
    pub fn sweep(&mut self) -> EvictionStats {
        self.last_sweep = Instant::now();
        let stats = self.index.enforce_limits_at(self.last_sweep);
        self.swept(&stats);
        stats
    }

    fn swept(&mut self, stats: &EvictionStats) {
        self.report.sweeps += 1;
        self.report.swept += stats.evicted.len() as u64;
    }

    /// Steps until the source closes.
    pub fn run_until_closed(&mut self) -> io::Result<&DrainReport> {
        while self.step()? {}
        Ok(&self.report)
    }

    /// Steps until the source closes or `stop` is set.
    pub fn run_until(&mut self, stop: &AtomicBool) -> io::Result<&DrainReport> {
        // Relaxed: the flag carries no data; the drain only needs to see it eventually.
        while !stop.load(Ordering::Relaxed) && self.step()? {}
        Ok(&self.report)
    }

    /// [`Drain::run_until`] as a task: steps with [`Drain::step_async`] until the source
    /// closes or `stop` is set.
    pub async fn run_until_async(&mut self, stop: &AtomicBool) -> io::Result<&DrainReport> {
        // Relaxed: as in `run_until`.
        while !stop.load(Ordering::Relaxed) && self.step_async().await? {}
        Ok(&self.report)
    }

    /// The report so far.
    pub fn report(&self) -> &DrainReport {
        &self.report
    }

    /// Where this drain last said it stands against the log's head (what it noted to its
    /// index, whether or not the index keeps it).
    pub fn backfill(&self) -> Backfill {
        self.backfill
    }
}

/// A drain that goes away while it was behind takes its word back: with no drain left to
/// catch up, the index's drives wait (or read their execution) as today's worker does.
impl<I: StateIndex, S> Drop for Drain<I, S> {
    fn drop(&mut self) {
        if self.backfill.is_behind() {
            self.index.note_backfill(Backfill::Unknown);
        }
    }
}

impl<I: StateIndex, S: WalSource + 'static> Drain<I, S> {
    /// Runs the drain on its own thread until the source closes or the handle stops it
    /// ([`DrainHandle::stop`]) or shuts it down ([`DrainHandle::shut_down`]).
    pub fn spawn(mut self) -> DrainHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let graceful = Arc::new(AtomicBool::new(false));
        let (flag, last) = (Arc::clone(&stop), Arc::clone(&graceful));
        let health = self.health();
        let thread = std::thread::Builder::new()
            .name("wal-drain".into())
            .spawn(move || {
                self.run_until(&flag)?;
                // Acquire pairs with the Release store of `stop` in `DrainHandle::stop`: a
                // `graceful` set before it (by `shut_down`) is seen by the Relaxed load.
                if flag.load(Ordering::Acquire) && last.load(Ordering::Relaxed) {
                    self.shut_down();
                }
                Ok(self.report.clone())
            });
        DrainHandle {
            stop,
            graceful,
            thread,
            health,
        }
    }
}

/// A drain running on its own thread.
#[derive(Debug)]
pub struct DrainHandle {
    stop: Arc<AtomicBool>,
    /// Set by `shut_down`: the drain takes its last checkpoint once stopped.
    graceful: Arc<AtomicBool>,
    thread: io::Result<std::thread::JoinHandle<io::Result<DrainReport>>>,
    health: Arc<DrainHealth>,
}

impl DrainHandle {
    /// Waits for the source to close, then returns the report.
    pub fn join(self) -> io::Result<DrainReport> {
        self.thread?
            .join()
            .map_err(|_| io::Error::other("the drain thread panicked"))?
    }

    /// Whether the drain has ended by itself (its source closed, or failed with an error
    /// that is not retried): [`join`](Self::join) then returns at once.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().map_or(true, |t| t.is_finished())
    }

    /// What the pool's probes ask of the drain ([`DrainHealth`]).
    pub fn health(&self) -> Arc<DrainHealth> {
        Arc::clone(&self.health)
    }

    /// Shuts the drain down after its current step, as a roll wants ([`Drain::shut_down`]:
    /// a drain with checkpoints takes its last one, within its bound), and returns the
    /// report ([`CheckpointReport::at_shutdown`] says what became of the last checkpoint).
    pub fn shut_down(self) -> io::Result<DrainReport> {
        // Relaxed: published by the Release store of `stop` that follows (see `spawn`).
        self.graceful.store(true, Ordering::Relaxed);
        self.stop()
    }

    /// Stops the drain after its current step, taking no last checkpoint (a checkpoint
    /// being written finishes), and returns the report.
    pub fn stop(self) -> io::Result<DrainReport> {
        // Release pairs with the Acquire load in `spawn`'s thread (publishes `graceful`).
        self.stop.store(true, Ordering::Release);
        self.join()
    }
}

impl<I: StateIndex + Checkpointable, S: WalSource> Drain<I, S> {
    /// This drain with checkpoints: between two batches, whenever one is due, it captures
    /// the index and its source's position and hands them to a writer thread
    /// ([`Checkpointing`] says when, [`crate::checkpoint`] what). A source that cannot say
    /// where it stands ([`WalSource::position`]), or an index that does not checkpoint
    /// (the comparators keep today's behaviour, where nothing survives a restart), gets
    /// none: they are counted as skipped. An error only if the writer thread cannot be
    /// started.
    pub fn checkpoint_to(mut self, checkpointing: Checkpointing) -> io::Result<Self> {
        let index = Arc::clone(&self.index);
        let capture = Box::new(move |at| index.checkpoint(at));
        self.checkpointer = Some(Checkpointer::start(checkpointing, capture)?);
        Ok(self)
    }
}

/// What a pool's readiness and liveness probes ask of its drain (Kubernetes' `/ready` and
/// `/livez`), shared with the drain and updated after every step.
///
/// - **Ready** once the drain reached the log's head: its source said it caught up with the
///   head it learned at subscription, or, for a source that does not know its head (a
///   file), a pull found less than a whole batch (nothing more was there).
///   A pool restored from a checkpoint is ready once it has replayed the records after it.
///   It stays ready after (a drain falling behind under load is still serving).
/// - **Live** while its steps keep coming: a pull waits at most
///   [`DrainConfig::idle_wait`], so no step begun for long (a source stuck in a call, an
///   apply that never ends) is a stuck drain, which a restart cures. A drain whose source
///   fails is live: each retry, and each slice of its backoff, is a step, and the outage is
///   reported on `healthy`.
#[derive(Debug)]
pub struct DrainHealth {
    started: Instant,
    /// Set once the drain reached the log's head.
    ready: crate::sync::AtomicBool,
    /// Milliseconds from `started` to the end of the last step.
    last_step_ms: crate::sync::AtomicU64,
}

impl DrainHealth {
    fn new() -> DrainHealth {
        DrainHealth {
            started: Instant::now(),
            ready: crate::sync::AtomicBool::new(false),
            last_step_ms: crate::sync::AtomicU64::new(0),
        }
    }

    fn head_reached(&self) {
        // Relaxed: a flag a probe reads eventually; it publishes no data.
        self.ready.store(true, crate::sync::Ordering::Relaxed);
    }

    /// A step begins.
    fn stepped(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        // Relaxed: a clock reading for a probe; it publishes no data.
        self.last_step_ms.store(ms, crate::sync::Ordering::Relaxed);
    }

    /// Whether the drain has reached the log's head (then for good).
    pub fn is_ready(&self) -> bool {
        // Relaxed: see `head_reached`.
        self.ready.load(crate::sync::Ordering::Relaxed)
    }

    /// How long since the drain's last step began (since it was made, before its first).
    pub fn since_last_step(&self) -> Duration {
        // Relaxed: see `stepped`.
        let ms = self.last_step_ms.load(crate::sync::Ordering::Relaxed);
        self.started
            .elapsed()
            .saturating_sub(Duration::from_millis(ms))
    }

    /// Whether a step began within `stuck_after` (a probe's threshold: several times the
    /// longest step the pool expects, 30 s say): a drain stuck inside one step, or no
    /// longer stepped, is not live.
    pub fn is_live(&self, stuck_after: Duration) -> bool {
        self.since_last_step() <= stuck_after
    }
}

impl<I: StateIndex, S> std::fmt::Debug for Drain<I, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drain")
            .field("config", &self.config)
            .field("backfill", &self.backfill)
            .field("healthy", &self.healthy)
            .field("report", &self.report)
            .field("checkpointer", &self.checkpointer)
            .finish_non_exhaustive()
    }
}
