//! The simulator's own tally of builds (independent of the metrics layer, so the report
//! can be checked against a scrape), forwarding every hook to the metrics observers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chain_fold::AdvanceOutcome;
use wal_index::IndexObserver;
use wal_index::labels::{DriveLabel, EvictReason, RehydrateLabel, WaitLabel};
use wal_index::report::IndexStats;

/// A build outcome, in the report's order (incomplete first, as the production note lists
/// them): each value's position is its place in every per-outcome array of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// `AdvanceOutcome::Incomplete`.
    Incomplete,
    /// `AdvanceOutcome::Incremental`.
    Incremental,
    /// `AdvanceOutcome::ColdRebuild`.
    ColdRebuild,
    /// `AdvanceOutcome::CacheHit`.
    CacheHit,
}

impl Outcome {
    /// Every outcome, in report order.
    pub const ALL: [Outcome; 4] = [
        Outcome::Incomplete,
        Outcome::Incremental,
        Outcome::ColdRebuild,
        Outcome::CacheHit,
    ];

    /// The outcome of a build.
    pub fn of(outcome: &AdvanceOutcome) -> Outcome {
        match outcome {
            AdvanceOutcome::Incomplete(_) => Outcome::Incomplete,
            AdvanceOutcome::Incremental(_) => Outcome::Incremental,
            AdvanceOutcome::ColdRebuild(_) => Outcome::ColdRebuild,
            AdvanceOutcome::CacheHit => Outcome::CacheHit,
        }
    }

    /// Its place in report order.
    pub const fn slot(self) -> usize {
        self as usize
    }

    /// The metrics label (`AdvanceOutcome::label`).
    pub fn label(self) -> &'static str {
        let example = match self {
            Outcome::Incomplete => AdvanceOutcome::Incomplete(chain_fold::Incomplete::NoEvents),
            Outcome::Incremental => AdvanceOutcome::Incremental(0),
            Outcome::ColdRebuild => AdvanceOutcome::ColdRebuild(0),
            Outcome::CacheHit => AdvanceOutcome::CacheHit,
        };
        example.label()
    }
}

fn slot(outcome: &AdvanceOutcome) -> usize {
    Outcome::of(outcome).slot()
}

/// A log-scale histogram of durations: 4 buckets per doubling from 100 ns.
#[derive(Debug)]
pub struct LogHistogram {
    buckets: Vec<AtomicU64>,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            buckets: (0..LogHistogram::BUCKETS)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
}

impl LogHistogram {
    /// Number of buckets (100 ns × 2^(100/4) ≈ 56 minutes at the top).
    pub const BUCKETS: usize = 100;

    /// The bucket holding `d`.
    pub fn index(d: Duration) -> usize {
        let ns = d.as_nanos().max(1) as f64;
        let i = (4.0 * (ns / 100.0).log2()).floor();
        (i.max(0.0) as usize).min(Self::BUCKETS - 1)
    }

    /// Lower bound of bucket `i`.
    pub fn lower_bound(i: usize) -> Duration {
        Duration::from_nanos((100.0 * 2f64.powf(i as f64 / 4.0)) as u64)
    }

    /// Counts one sample.
    pub fn record(&self, d: Duration) {
        // Relaxed: independent counters, read after the run has quiesced.
        self.buckets[Self::index(d)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts.
    pub fn counts(&self) -> Vec<u64> {
        self.buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }
}

/// Counts builds per outcome, their total and waited time, their duration distribution and
/// their outcome per time bucket; forwards every hook to `forward`.
pub struct SimObserver {
    started: Instant,
    /// Width of one timeline bucket.
    pub timeline_step: Duration,
    builds: [AtomicU64; 4],
    elapsed_ns: [AtomicU64; 4],
    waited_ns: [AtomicU64; 4],
    durations: [LogHistogram; 4],
    timeline: Vec<[AtomicU64; 4]>,
    wal_events: AtomicU64,
    /// Nanoseconds since start when `wal_events` first reached `backlog`; 0 until then.
    backlog_done_ns: AtomicU64,
    /// When the drain first said it was caught up (0: not yet).
    caught_up_ns: AtomicU64,
    backlog: u64,
    forward: Vec<Arc<dyn IndexObserver>>,
    /// The drain's health: when it went down (while down), time spent down, outages.
    health: std::sync::Mutex<Health>,
}

/// The drain's health over a run, from its `healthy` reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct Health {
    /// When the current outage began, while the drain is unhealthy.
    down_since: Option<Instant>,
    /// Time spent unhealthy in outages that ended.
    pub unhealthy: Duration,
    /// Outages: transitions from healthy to unhealthy.
    pub outages: u64,
    /// Recoveries: transitions from unhealthy back to healthy (a reconnected feed).
    pub recoveries: u64,
}

impl Health {
    /// Unhealthy time, counting an outage still in progress up to `now`.
    pub fn unhealthy_until(&self, now: Instant) -> Duration {
        self.unhealthy + self.down_since.map_or(Duration::ZERO, |t| now - t)
    }
}

/// A snapshot of one outcome's tally.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutcomeTally {
    /// Builds.
    pub builds: u64,
    /// Sum of build durations.
    pub elapsed: Duration,
    /// Sum of time blocked before reading the index.
    pub waited: Duration,
}

impl SimObserver {
    /// A tally starting now; `backlog` is the cold-start backlog size (0 for none).
    pub fn new(backlog: u64, forward: Vec<Arc<dyn IndexObserver>>) -> SimObserver {
        SimObserver {
            started: Instant::now(),
            timeline_step: Duration::from_millis(250),
            builds: Default::default(),
            elapsed_ns: Default::default(),
            waited_ns: Default::default(),
            durations: Default::default(),
            timeline: (0..4 * 600).map(|_| Default::default()).collect(),
            wal_events: AtomicU64::new(0),
            backlog_done_ns: AtomicU64::new(0),
            caught_up_ns: AtomicU64::new(0),
            backlog,
            forward,
            health: std::sync::Mutex::new(Health::default()),
        }
    }

    /// The drain's health so far.
    pub fn health(&self) -> Health {
        self.health.lock().map(|h| *h).unwrap_or_default()
    }

    /// When the tally started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The tally of one outcome (its [`Outcome::slot`]).
    pub fn tally(&self, i: usize) -> OutcomeTally {
        OutcomeTally {
            builds: self.builds[i].load(Ordering::Relaxed),
            elapsed: Duration::from_nanos(self.elapsed_ns[i].load(Ordering::Relaxed)),
            waited: Duration::from_nanos(self.waited_ns[i].load(Ordering::Relaxed)),
        }
    }

    /// Build duration distribution of one outcome.
    pub fn durations(&self, i: usize) -> Vec<u64> {
        self.durations[i].counts()
    }

    /// Builds per outcome per timeline bucket, trimmed to the last non-empty bucket.
    pub fn timeline(&self) -> Vec<[u64; 4]> {
        let mut rows: Vec<[u64; 4]> = self
            .timeline
            .iter()
            .map(|b| std::array::from_fn(|i| b[i].load(Ordering::Relaxed)))
            .collect();
        while rows.last().is_some_and(|r| r.iter().all(|&n| n == 0)) {
            rows.pop();
        }
        rows
    }

    /// How long after the start the drain had consumed the whole backlog.
    pub fn backlog_drained_after(&self) -> Option<Duration> {
        match self.backlog_done_ns.load(Ordering::Acquire) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// How long after the start the drain first said it had caught up with the log's head
    /// as it stood when its source subscribed.
    pub fn caught_up_after(&self) -> Option<Duration> {
        match self.caught_up_ns.load(Ordering::Acquire) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// WAL records the drain consumed.
    pub fn wal_events(&self) -> u64 {
        self.wal_events.load(Ordering::Relaxed)
    }
}

impl IndexObserver for SimObserver {
    fn build(&self, outcome: &AdvanceOutcome, elapsed: Duration, waited: Duration) {
        let i = slot(outcome);
        // Relaxed throughout: independent counters read after the run has quiesced.
        self.builds[i].fetch_add(1, Ordering::Relaxed);
        self.elapsed_ns[i].fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
        self.waited_ns[i].fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        self.durations[i].record(elapsed);
        let t = (self.started.elapsed().as_nanos() / self.timeline_step.as_nanos()) as usize;
        if let Some(bucket) = self.timeline.get(t) {
            bucket[i].fetch_add(1, Ordering::Relaxed);
        }
        for f in &self.forward {
            f.build(outcome, elapsed, waited);
        }
    }
    fn drive_wait(&self, outcome: WaitLabel) {
        self.forward.iter().for_each(|f| f.drive_wait(outcome));
    }
    fn drive(&self, outcome: DriveLabel) {
        self.forward.iter().for_each(|f| f.drive(outcome));
    }
    fn drive_tail(&self, applied: u32, rejected: u32) {
        self.forward
            .iter()
            .for_each(|f| f.drive_tail(applied, rejected));
    }
    fn residency(&self, stats: IndexStats) {
        self.forward.iter().for_each(|f| f.residency(stats));
    }
    fn evicted(&self, reason: EvictReason, count: usize) {
        self.forward.iter().for_each(|f| f.evicted(reason, count));
    }
    fn rehydrate(&self, outcome: RehydrateLabel) {
        self.forward.iter().for_each(|f| f.rehydrate(outcome));
    }
    fn wal_events(&self, count: u64) {
        let total = self.wal_events.fetch_add(count, Ordering::Relaxed) + count;
        if self.backlog > 0 && total >= self.backlog {
            let ns = self.started.elapsed().as_nanos().max(1) as u64;
            // Release pairs with the Acquire in `backlog_drained_after`; only the first
            // crossing is kept.
            let _ =
                self.backlog_done_ns
                    .compare_exchange(0, ns, Ordering::Release, Ordering::Relaxed);
        }
        self.forward.iter().for_each(|f| f.wal_events(count));
    }
    fn healthy(&self, up: bool) {
        if let Ok(mut health) = self.health.lock() {
            match (up, health.down_since) {
                (false, None) => {
                    health.down_since = Some(Instant::now());
                    health.outages += 1;
                }
                (true, Some(since)) => {
                    health.unhealthy += since.elapsed();
                    health.down_since = None;
                    health.recoveries += 1;
                }
                _ => {}
            }
        }
        self.forward.iter().for_each(|f| f.healthy(up));
    }
    fn stalled_chain(&self, stalled: &wal_index::stall::StalledChain) {
        self.forward.iter().for_each(|f| f.stalled_chain(stalled));
    }

    fn checkpoint(&self, outcome: wal_index::labels::CheckpointLabel) {
        self.forward.iter().for_each(|f| f.checkpoint(outcome));
    }

    fn checkpoint_refused(&self, reason: wal_index::labels::RefusalLabel) {
        self.forward
            .iter()
            .for_each(|f| f.checkpoint_refused(reason));
    }

    fn backfill(&self, state: wal_index::ingest::Backfill) {
        if state == wal_index::ingest::Backfill::CaughtUp {
            let ns = self.started.elapsed().as_nanos().max(1) as u64;
            // Release pairs with the Acquire in `caught_up_after`; the first one is kept.
            let _ = self
                .caught_up_ns
                .compare_exchange(0, ns, Ordering::Release, Ordering::Relaxed);
        }
        self.forward.iter().for_each(|f| f.backfill(state));
    }
}

impl std::fmt::Debug for SimObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimObserver")
            .field("timeline_step", &self.timeline_step)
            .field("timeline_buckets", &self.timeline.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_follow_the_production_notes_order_and_each_has_its_own_slot() {
        let labels: Vec<&str> = Outcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(
            labels,
            ["incomplete", "incremental", "cold_rebuild", "cache_hit"]
        );
        let outcomes = [
            AdvanceOutcome::CacheHit,
            AdvanceOutcome::Incremental(1),
            AdvanceOutcome::ColdRebuild(1),
            AdvanceOutcome::Incomplete(chain_fold::Incomplete::NoEvents),
        ];
        for outcome in outcomes {
            assert_eq!(Outcome::ALL[slot(&outcome)].label(), outcome.label());
        }
    }
}
