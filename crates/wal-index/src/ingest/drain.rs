//! The drain: pulls batches from a [`WalSource`], applies them, sweeps on an interval, and
//! reports bad records without stopping.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chain_fold::{Event, EventError};

use super::source::{Pull, WalSource};
use crate::report::EvictionStats;
use crate::state_index::StateIndex;

/// Drain settings. The defaults are production's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainConfig {
    /// Largest batch pulled and applied at once (production: 200).
    pub batch_max: usize,
    /// How long one pull waits for the first record (production sleeps 25 ms between
    /// empty pulls).
    pub idle_wait: Duration,
    /// How often the eviction sweep runs.
    pub sweep_every: Duration,
    /// What a source error does: `Some` retries after a growing pause (the default; a
    /// broker outage is not the end of the drain), `None` ends the run with the error.
    /// Errors of kind [`InvalidInput`](io::ErrorKind::InvalidInput) always end it: they
    /// say the source is misconfigured, which waiting cannot fix.
    pub retry: Option<Backoff>,
}

impl Default for DrainConfig {
    fn default() -> Self {
        DrainConfig {
            batch_max: 200,
            idle_wait: Duration::from_millis(25),
            sweep_every: Duration::from_secs(1),
            retry: Some(Backoff::default()),
        }
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

/// A record the drain could not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord {
    /// Its position in the WAL.
    pub position: u64,
    /// Why.
    pub error: EventError,
}

/// What a drain has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Batches applied.
    pub batches: u64,
    /// Events applied.
    pub events: u64,
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
}

impl DrainReport {
    /// How many bad records are kept as samples.
    pub const BAD_SAMPLES: usize = 64;
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
///            {\"event_id\":2,\"execution_id\":5,\"prev_event_id\":1}\n";
/// let index = Arc::new(WalIndex::default());
/// let mut drain = Drain::new(index.clone(), JsonLinesSource::new(wal.as_bytes()), DrainConfig::default());
/// let report = drain.run_until_closed().unwrap();
/// assert_eq!((report.events, report.bad), (2, 1));
/// assert_eq!(report.bad_samples[0].position, 2);
/// assert_eq!(index.build(5, Some(2)).spine.unwrap().ids(), vec![1, 2]);
/// ```
pub struct Drain<I, S> {
    index: Arc<I>,
    source: S,
    config: DrainConfig,
    report: DrainReport,
    last_sweep: Instant,
    healthy: Option<bool>,
    /// Consecutive source errors, and when the next attempt is due.
    failing: Option<(u32, Instant)>,
}

impl<I: StateIndex, S: WalSource> Drain<I, S> {
    /// A drain that has not pulled anything yet.
    pub fn new(index: Arc<I>, source: S, config: DrainConfig) -> Self {
        Drain {
            index,
            source,
            config,
            report: DrainReport::default(),
            last_sweep: Instant::now(),
            healthy: None,
            failing: None,
        }
    }

    /// One pull-apply-commit step (and a sweep if one is due). Returns false once the
    /// source is closed; an error only when the source failed and is not retried.
    pub fn step(&mut self) -> io::Result<bool> {
        if let Some((_, due)) = self.failing {
            let now = Instant::now();
            if now < due {
                // Sleep in short slices so `run_until`'s stop flag is seen promptly.
                std::thread::sleep(
                    (due - now).min(self.config.idle_wait.max(Duration::from_millis(1))),
                );
                return Ok(true);
            }
        }
        let pulled = match self
            .source
            .pull(self.config.batch_max, self.config.idle_wait)
        {
            Ok(pulled) => pulled,
            Err(error) => return self.source_failed(error),
        };
        let more = match pulled {
            Pull::Closed => false,
            Pull::Idle => true,
            Pull::Records(records) => {
                self.index.observer().wal_events(records.len() as u64);
                let mut events = Vec::with_capacity(records.len());
                for record in records {
                    match Event::from_json_bytes(record.payload) {
                        Ok(event) => events.push(event),
                        Err(error) => self.bad(record.position, error),
                    }
                }
                if !events.is_empty() {
                    self.report.events += events.len() as u64;
                    self.report.batches += 1;
                    let batch = self.index.apply_batch(events);
                    self.report.terminal_evictions += batch.terminal_evicted.len() as u64;
                }
                if let Err(error) = self.source.commit() {
                    return self.source_failed(error);
                }
                true
            }
        };
        self.failing = None;
        self.set_healthy(true);
        if self.last_sweep.elapsed() >= self.config.sweep_every {
            self.sweep();
        }
        Ok(more)
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

    fn set_healthy(&mut self, up: bool) {
        if self.healthy != Some(up) {
            self.healthy = Some(up);
            self.index.observer().healthy(up);
        }
    }

    fn bad(&mut self, position: u64, error: EventError) {
        self.report.bad += 1;
        if self.report.bad_samples.len() < DrainReport::BAD_SAMPLES {
            self.report.bad_samples.push(BadRecord { position, error });
        }
    }

    /// Runs one eviction sweep now.
    pub fn sweep(&mut self) -> EvictionStats {
        self.last_sweep = Instant::now();
        let stats = self.index.enforce_limits_at(self.last_sweep);
        self.report.sweeps += 1;
        self.report.swept += stats.evicted.len() as u64;
        stats
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

    /// The report so far.
    pub fn report(&self) -> &DrainReport {
        &self.report
    }
}

impl<I: StateIndex, S: WalSource + 'static> Drain<I, S> {
    /// Runs the drain on its own thread until the source closes or the handle stops it.
    pub fn spawn(mut self) -> DrainHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("wal-drain".into())
            .spawn(move || self.run_until(&flag).cloned());
        DrainHandle { stop, thread }
    }
}

/// A drain running on its own thread.
#[derive(Debug)]
pub struct DrainHandle {
    stop: Arc<AtomicBool>,
    thread: io::Result<std::thread::JoinHandle<io::Result<DrainReport>>>,
}

impl DrainHandle {
    /// Waits for the source to close, then returns the report.
    pub fn join(self) -> io::Result<DrainReport> {
        self.thread?
            .join()
            .map_err(|_| io::Error::other("the drain thread panicked"))?
    }

    /// Stops the drain after its current step and returns the report.
    pub fn stop(self) -> io::Result<DrainReport> {
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }
}
