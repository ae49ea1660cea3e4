//! [`StateBuilderMetrics`]: metric handles registered once, recorded from the index hooks.

use std::sync::Arc;
use std::time::Duration;

use chain_fold::AdvanceOutcome;
use metrics::{Counter, Gauge, Histogram, Label};
use wal_index::IndexObserver;
use wal_index::labels::{
    DriveLabel, EvictReason, RehydrateLabel, ShardReadLabel, ShardVerifyLabel, WaitLabel,
};
use wal_index::report::IndexStats;

use crate::series::{
    BUILD_OUTCOMES, CHECKPOINT_OUTCOMES, DEFAULT_PREFIX, DRIVE_OUTCOMES, EVICTION_REASONS, Kind,
    REFUSAL_REASONS, REHYDRATE_OUTCOMES, SERIES, SHARD_READ_OUTCOMES, SHARD_SERIES,
    SHARD_VERIFY_OUTCOMES, STALL_REASONS, TAIL_OUTCOMES, WAIT_OUTCOMES, name, worker_prefix,
};

/// Registers help texts and units of every series with the installed recorder.
pub fn describe(prefix: &str) {
    let shard_prefix = worker_prefix(prefix);
    let all = SERIES
        .iter()
        .map(|series| (prefix, series))
        .chain(SHARD_SERIES.iter().map(|series| (shard_prefix, series)));
    for (prefix, series) in all {
        let full = format!("{prefix}{}", series.name);
        match series.kind {
            Kind::Counter => metrics::describe_counter!(full, series.unit, series.help),
            Kind::Gauge => metrics::describe_gauge!(full, series.unit, series.help),
            Kind::Histogram => metrics::describe_histogram!(full, series.unit, series.help),
        }
    }
}

/// The state-builder series, as handles bound to the recorder that was current when
/// [`StateBuilderMetrics::register`] ran.
///
/// Pass it to an index as its observer:
///
/// ```
/// use std::sync::Arc;
/// use sb_metrics::StateBuilderMetrics;
/// use wal_index::{IndexConfig, StateIndex, WalIndex};
///
/// let metrics = StateBuilderMetrics::register();
/// let index = WalIndex::with_observer(IndexConfig::default(), metrics);
/// # let _ = index;
/// ```
///
/// Handles are resolved once, so recording is a few atomic operations with no name lookup.
/// The flip side, as everywhere in the `metrics` facade: register *after* installing the
/// recorder (or inside `metrics::with_local_recorder`), or the handles record nowhere.
/// This crate never installs a recorder itself except through [`crate::exporter`].
#[derive(Debug)]
pub struct StateBuilderMetrics {
    builds: [Counter; 4],
    build_duration: [Histogram; 4],
    lock_wait: [Gauge; 4],
    chain_hops: Histogram,
    drive_builds: [Counter; 7],
    drive_wait: [Counter; 2],
    drive_tail: [Counter; 2],
    executions: Gauge,
    events: Gauge,
    bytes: Gauge,
    evictions: [Counter; 5],
    rehydrate: [Counter; 4],
    wal_events: Counter,
    healthy: Gauge,
    backfilling: Gauge,
    stalled_chains: [Counter; STALL_REASONS.len()],
    checkpoints: [Counter; CHECKPOINT_OUTCOMES.len()],
    checkpoint_refused: [Counter; REFUSAL_REASONS.len()],
    shard: ShardReadSeries,
}

/// The state-shard reader's series, named under [`worker_prefix`].
#[derive(Debug)]
struct ShardReadSeries {
    reads: [Counter; SHARD_READ_OUTCOMES.len()],
    duration: Histogram,
    verify: [Counter; SHARD_VERIFY_OUTCOMES.len()],
    equivalence_mismatch: Counter,
}

impl ShardReadSeries {
    /// Registered under the worker prefix of `prefix`, with `extra` on every series.
    fn register(prefix: &str, extra: &[Label]) -> ShardReadSeries {
        let shard_prefix = worker_prefix(prefix);
        let with_extra = |mut own: Vec<Label>| {
            own.extend(extra.iter().cloned());
            own
        };
        let counter = |suffix: &str| {
            let name = format!("{shard_prefix}{suffix}");
            move |own: Vec<Label>| metrics::counter!(name.clone(), with_extra(own))
        };
        ShardReadSeries {
            reads: labelled(
                &SHARD_READ_OUTCOMES,
                counter(name::STATE_SHARD_READS_TOTAL),
                "outcome",
            ),
            duration: metrics::histogram!(
                format!("{shard_prefix}{}", name::STATE_SHARD_READ_DURATION_SECONDS),
                with_extra(Vec::new())
            ),
            verify: labelled(
                &SHARD_VERIFY_OUTCOMES,
                counter(name::STATE_SHARD_VERIFY_TOTAL),
                "outcome",
            ),
            equivalence_mismatch: counter(name::STATE_EQUIVALENCE_MISMATCH_TOTAL)(Vec::new()),
        }
    }
}

fn labelled<T, const N: usize>(
    values: &[&'static str; N],
    make: impl Fn(Vec<Label>) -> T,
    key: &'static str,
) -> [T; N] {
    std::array::from_fn(|i| make(vec![Label::new(key, values[i])]))
}

impl StateBuilderMetrics {
    /// Describes and registers every series under [`DEFAULT_PREFIX`], pre-registering each
    /// counter label value at zero so dashboards see the series before the first event.
    pub fn register() -> Arc<StateBuilderMetrics> {
        Self::register_with_prefix(DEFAULT_PREFIX)
    }

    /// [`StateBuilderMetrics::register`] under another prefix.
    pub fn register_with_prefix(prefix: &str) -> Arc<StateBuilderMetrics> {
        Self::register_with_labels(prefix, &[])
    }

    /// [`StateBuilderMetrics::register`] under `prefix`, with `labels` added to every
    /// series (for instance `engine="mutex"` when two indexes share one recorder).
    pub fn register_with_labels(
        prefix: &str,
        labels: &[(&'static str, &'static str)],
    ) -> Arc<StateBuilderMetrics> {
        describe(prefix);
        let extra: Vec<Label> = labels.iter().map(|&(k, v)| Label::new(k, v)).collect();
        let with_extra = |mut own: Vec<Label>| {
            own.extend(extra.iter().cloned());
            own
        };
        let n = |suffix: &str| format!("{prefix}{suffix}");
        let counter = |suffix: &str| {
            let name = n(suffix);
            move |own: Vec<Label>| metrics::counter!(name.clone(), with_extra(own))
        };
        let gauge = |suffix: &str| {
            let name = n(suffix);
            move |own: Vec<Label>| metrics::gauge!(name.clone(), with_extra(own))
        };
        let histogram = |suffix: &str| {
            let name = n(suffix);
            move |own: Vec<Label>| metrics::histogram!(name.clone(), with_extra(own))
        };
        let m = StateBuilderMetrics {
            builds: labelled(&BUILD_OUTCOMES, counter(name::BUILDS_TOTAL), "outcome"),
            build_duration: labelled(
                &BUILD_OUTCOMES,
                histogram(name::BUILD_DURATION_SECONDS),
                "outcome",
            ),
            lock_wait: labelled(
                &BUILD_OUTCOMES,
                gauge(name::INDEX_LOCK_WAIT_SECONDS_TOTAL),
                "outcome",
            ),
            chain_hops: histogram(name::CHAIN_HOPS)(Vec::new()),
            drive_builds: labelled(
                &DRIVE_OUTCOMES,
                counter(name::DRIVE_BUILDS_TOTAL),
                "outcome",
            ),
            drive_wait: labelled(&WAIT_OUTCOMES, counter(name::DRIVE_WAIT_TOTAL), "outcome"),
            drive_tail: labelled(
                &TAIL_OUTCOMES,
                counter(name::DRIVE_TAIL_EVENTS_TOTAL),
                "outcome",
            ),
            executions: gauge(name::INDEXED_EXECUTIONS)(Vec::new()),
            events: gauge(name::INDEX_EVENTS)(Vec::new()),
            bytes: gauge(name::INDEX_BYTES)(Vec::new()),
            evictions: labelled(&EVICTION_REASONS, counter(name::EVICTIONS_TOTAL), "reason"),
            rehydrate: labelled(
                &REHYDRATE_OUTCOMES,
                counter(name::REHYDRATE_TOTAL),
                "outcome",
            ),
            wal_events: counter(name::WAL_EVENTS_TOTAL)(Vec::new()),
            healthy: gauge(name::HEALTHY)(Vec::new()),
            backfilling: gauge(name::BACKFILLING)(Vec::new()),
            stalled_chains: labelled(
                &STALL_REASONS,
                counter(name::STALLED_CHAINS_TOTAL),
                "reason",
            ),
            checkpoints: labelled(
                &CHECKPOINT_OUTCOMES,
                counter(name::CHECKPOINTS_TOTAL),
                "outcome",
            ),
            checkpoint_refused: labelled(
                &REFUSAL_REASONS,
                counter(name::CHECKPOINT_REFUSED_TOTAL),
                "reason",
            ),
            shard: ShardReadSeries::register(prefix, &extra),
        };
        m.pre_register();
        Arc::new(m)
    }

    /// Every counter label value and every gauge at zero, so each series exists from the
    /// start (a dashboard's `increase()` reads 0, not "no data", before the first event).
    fn pre_register(&self) {
        let counters = self
            .builds
            .iter()
            .chain(&self.drive_builds)
            .chain(&self.drive_wait)
            .chain(&self.drive_tail)
            .chain(&self.evictions)
            .chain(&self.rehydrate)
            .chain(&self.stalled_chains)
            .chain(&self.checkpoints)
            .chain(&self.checkpoint_refused)
            .chain(&self.shard.reads)
            .chain(&self.shard.verify)
            .chain([&self.wal_events, &self.shard.equivalence_mismatch]);
        for c in counters {
            c.increment(0);
        }
        for g in self.lock_wait.iter().chain([
            &self.executions,
            &self.events,
            &self.bytes,
            &self.healthy,
            &self.backfilling,
        ]) {
            g.increment(0.0);
        }
    }

    /// Records a drive outcome by hand, for a caller that decides it outside
    /// `StateIndex::drive` (which reports every outcome itself).
    pub fn drive_outcome(&self, outcome: DriveLabel) {
        self.drive_builds[outcome.index()].increment(1);
    }
}

impl IndexObserver for StateBuilderMetrics {
    fn build(&self, outcome: &AdvanceOutcome, elapsed: Duration, waited: Duration) {
        let i = outcome.index();
        self.builds[i].increment(1);
        self.build_duration[i].record(elapsed.as_secs_f64());
        self.lock_wait[i].increment(waited.as_secs_f64());
        if let AdvanceOutcome::ColdRebuild(len) = outcome {
            self.chain_hops.record(*len as f64);
        }
    }

    fn drive_wait(&self, outcome: WaitLabel) {
        self.drive_wait[outcome.index()].increment(1);
    }

    fn drive(&self, outcome: DriveLabel) {
        self.drive_builds[outcome.index()].increment(1);
    }

    fn residency(&self, stats: IndexStats) {
        self.executions.set(stats.executions as f64);
        self.events.set(stats.events as f64);
        self.bytes.set(stats.bytes as f64);
    }

    fn evicted(&self, reason: EvictReason, count: usize) {
        self.evictions[reason.index()].increment(count as u64);
    }

    fn drive_tail(&self, applied: u32, rejected: u32) {
        self.drive_tail[0].increment(u64::from(applied));
        self.drive_tail[1].increment(u64::from(rejected));
    }

    fn rehydrate(&self, outcome: RehydrateLabel) {
        self.rehydrate[outcome.index()].increment(1);
    }

    fn wal_events(&self, count: u64) {
        self.wal_events.increment(count);
    }

    fn backfill(&self, state: wal_index::ingest::Backfill) {
        self.backfilling
            .set(if state.is_behind() { 1.0 } else { 0.0 });
    }

    fn healthy(&self, up: bool) {
        self.healthy.set(if up { 1.0 } else { 0.0 });
    }

    fn stalled_chain(&self, stalled: &wal_index::stall::StalledChain) {
        self.stalled_chains[stalled.reason.index()].increment(1);
    }

    fn checkpoint(&self, outcome: wal_index::labels::CheckpointLabel) {
        self.checkpoints[outcome.index()].increment(1);
    }

    fn checkpoint_refused(&self, reason: wal_index::labels::RefusalLabel) {
        self.checkpoint_refused[reason.index()].increment(1);
    }

    fn state_shard_read(&self, outcome: ShardReadLabel, took: Duration) {
        self.shard.reads[outcome.index()].increment(1);
        self.shard.duration.record(took.as_secs_f64());
    }

    fn state_shard_verify(&self, outcome: ShardVerifyLabel) {
        self.shard.verify[outcome.index()].increment(1);
        if outcome == ShardVerifyLabel::Mismatched {
            self.shard.equivalence_mismatch.increment(1);
        }
    }
}
