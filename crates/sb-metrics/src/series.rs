//! Every series: name, type, labels, unit and help text, as dashboards already use them.

use metrics::Unit;
use wal_index::labels::{
    CheckpointLabel, DriveLabel, EvictReason, RefusalLabel, RehydrateLabel, ShardReadLabel,
    ShardVerifyLabel, StallReason, WaitLabel,
};

/// The prefix production dashboards use. Note `noetl_worker_`, not `noetl_state_builder_`.
pub const DEFAULT_PREFIX: &str = "noetl_worker_state_builder_";

/// `builds_total{outcome}` label values (`chain_fold::AdvanceOutcome::label`).
pub const BUILD_OUTCOMES: [&str; 4] = chain_fold::AdvanceOutcome::LABELS;
/// `drive_builds_total{outcome}` label values (`wal_index::labels::DriveLabel`), each one
/// way the worker's drive flow (`StateIndex::drive`) ends.
pub const DRIVE_OUTCOMES: [&str; 7] = DriveLabel::LABELS;
/// `drive_wait_total{outcome}` label values (`wal_index::labels::WaitLabel`).
pub const WAIT_OUTCOMES: [&str; 2] = WaitLabel::LABELS;
/// `evictions_total{reason}` label values (`terminal` and `explicit` added to today's three).
pub const EVICTION_REASONS: [&str; 5] = EvictReason::LABELS;
/// `drive_tail_events_total{outcome}` label values: a dispatch's tail event applied, or
/// rejected (undecodable, or of another execution).
pub const TAIL_OUTCOMES: [&str; 2] = ["applied", "rejected"];
/// `rehydrate_total{outcome}` label values (`wal_index::labels::RehydrateLabel`).
pub const REHYDRATE_OUTCOMES: [&str; 4] = RehydrateLabel::LABELS;

/// `stalled_chains_total{reason}` label values (`wal_index::labels::StallReason`).
pub const STALL_REASONS: [&str; StallReason::LABELS.len()] = StallReason::LABELS;
/// `checkpoints_total{outcome}` label values (`wal_index::labels::CheckpointLabel`).
pub const CHECKPOINT_OUTCOMES: [&str; CheckpointLabel::LABELS.len()] = CheckpointLabel::LABELS;
/// `checkpoint_refused_total{reason}` label values (`wal_index::labels::RefusalLabel`).
pub const REFUSAL_REASONS: [&str; RefusalLabel::LABELS.len()] = RefusalLabel::LABELS;

/// The prefix of the state-shard series ([`SHARD_SERIES`]) under a state-builder `prefix`:
/// `prefix` without its `state_builder_` ending, so the default gives production's
/// `noetl_worker_state_shard_reads_total` beside `noetl_worker_state_builder_*`.
///
/// ```
/// use sb_metrics::series::{DEFAULT_PREFIX, worker_prefix};
/// assert_eq!(worker_prefix(DEFAULT_PREFIX), "noetl_worker_");
/// assert_eq!(worker_prefix("pool_a_"), "pool_a_");
/// ```
pub fn worker_prefix(prefix: &str) -> &str {
    prefix.strip_suffix("state_builder_").unwrap_or(prefix)
}

/// `state_shard_reads_total{outcome}` label values (`wal_index::labels::ShardReadLabel`).
pub const SHARD_READ_OUTCOMES: [&str; ShardReadLabel::LABELS.len()] = ShardReadLabel::LABELS;
/// `state_shard_verify_total{outcome}` label values (`wal_index::labels::ShardVerifyLabel`).
pub const SHARD_VERIFY_OUTCOMES: [&str; ShardVerifyLabel::LABELS.len()] = ShardVerifyLabel::LABELS;
/// `state_shard_read_duration_seconds` buckets: production's run from 1 ms to 5 s (its
/// exact list is not in the reference; these are the build histogram's steps in that range).
pub const SHARD_READ_DURATION_BUCKETS: [f64; 10] =
    [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

/// `build_duration_seconds` buckets.
pub const BUILD_DURATION_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// `chain_hops` buckets (spine length of a cold rebuild).
pub const CHAIN_HOPS_BUCKETS: [f64; 10] =
    [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0];

/// The Prometheus type of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic counter.
    Counter,
    /// Gauge.
    Gauge,
    /// Histogram with explicit buckets.
    Histogram,
}

/// One series of the catalogue.
#[derive(Debug, Clone, Copy)]
pub struct Series {
    /// Name without the prefix.
    pub name: &'static str,
    /// Prometheus type as exported.
    pub kind: Kind,
    /// The label name and its values, if labelled.
    pub label: Option<(&'static str, &'static [&'static str])>,
    /// Unit.
    pub unit: Unit,
    /// Help text.
    pub help: &'static str,
}

/// Suffixes of every series, for building names.
pub mod name {
    /// Builds by outcome.
    pub const BUILDS_TOTAL: &str = "builds_total";
    /// Build duration by outcome (lock wait included).
    pub const BUILD_DURATION_SECONDS: &str = "build_duration_seconds";
    /// Spine length per cold rebuild.
    pub const CHAIN_HOPS: &str = "chain_hops";
    /// Drives by final outcome.
    pub const DRIVE_BUILDS_TOTAL: &str = "drive_builds_total";
    /// Drive waits by how they ended.
    pub const DRIVE_WAIT_TOTAL: &str = "drive_wait_total";
    /// Time builds spent blocked before reading the index, by outcome.
    pub const INDEX_LOCK_WAIT_SECONDS_TOTAL: &str = "index_lock_wait_seconds_total";
    /// Resident executions.
    pub const INDEXED_EXECUTIONS: &str = "indexed_executions";
    /// Resident events.
    pub const INDEX_EVENTS: &str = "index_events";
    /// Resident bytes (byte ledger).
    pub const INDEX_BYTES: &str = "index_bytes";
    /// Evictions by reason.
    pub const EVICTIONS_TOTAL: &str = "evictions_total";
    /// Tail events of dispatches, applied by drives before their first build.
    pub const DRIVE_TAIL_EVENTS_TOTAL: &str = "drive_tail_events_total";
    /// Rehydration attempts by outcome.
    pub const REHYDRATE_TOTAL: &str = "rehydrate_total";
    /// WAL records consumed by the drain.
    pub const WAL_EVENTS_TOTAL: &str = "wal_events_total";
    /// 1 while the drain's feed is healthy.
    pub const HEALTHY: &str = "healthy";
    /// 1 while the drain replays the log's history (behind the head it saw at subscription).
    pub const BACKFILLING: &str = "backfilling";
    /// Executions whose chain waited past the bound for a hop, by reason.
    pub const STALLED_CHAINS_TOTAL: &str = "stalled_chains_total";
    /// Checkpoints by outcome.
    pub const CHECKPOINTS_TOTAL: &str = "checkpoints_total";
    /// Checkpoints refused at restore, by reason.
    pub const CHECKPOINT_REFUSED_TOTAL: &str = "checkpoint_refused_total";
    /// State-shard reads by outcome (under [`worker_prefix`](super::worker_prefix)).
    pub const STATE_SHARD_READS_TOTAL: &str = "state_shard_reads_total";
    /// State-shard read duration (under [`worker_prefix`](super::worker_prefix)).
    pub const STATE_SHARD_READ_DURATION_SECONDS: &str = "state_shard_read_duration_seconds";
    /// Verify-mode comparisons by outcome (under [`worker_prefix`](super::worker_prefix)).
    pub const STATE_SHARD_VERIFY_TOTAL: &str = "state_shard_verify_total";
    /// Verify-mode mismatches (under [`worker_prefix`](super::worker_prefix)).
    pub const STATE_EQUIVALENCE_MISMATCH_TOTAL: &str = "state_equivalence_mismatch_total";
}

/// The state-shard reader's series, named under [`worker_prefix`] as production names
/// them (`noetl_worker_state_shard_reads_total`, ...). `state_shard_verify_total` is this
/// project's: it counts the comparisons that had nothing to compare with.
pub const SHARD_SERIES: [Series; 4] = [
    Series {
        name: name::STATE_SHARD_READS_TOTAL,
        kind: Kind::Counter,
        label: Some(("outcome", &SHARD_READ_OUTCOMES)),
        unit: Unit::Count,
        help: "State-shard reads of drives past their deadline: hit (served), miss (no shard, or none of the execution's events), fallback (failed, or its chain does not reach genesis).",
    },
    Series {
        name: name::STATE_SHARD_READ_DURATION_SECONDS,
        kind: Kind::Histogram,
        label: None,
        unit: Unit::Seconds,
        help: "Duration of one state-shard read (both keys, the decode).",
    },
    Series {
        name: name::STATE_SHARD_VERIFY_TOTAL,
        kind: Kind::Counter,
        label: Some(("outcome", &SHARD_VERIFY_OUTCOMES)),
        unit: Unit::Count,
        help: "Verify mode: served shards compared with the retained WAL (match, mismatch, unverified: nothing to compare with).",
    },
    Series {
        name: name::STATE_EQUIVALENCE_MISMATCH_TOTAL,
        kind: Kind::Counter,
        label: None,
        unit: Unit::Count,
        help: "Verify mode: served shards whose spine differed from the retained WAL's (the WAL's was served).",
    },
];

/// The whole catalogue, in the order of docs/domain.md.
pub const SERIES: [Series; 18] = [
    Series {
        name: name::BUILDS_TOTAL,
        kind: Kind::Counter,
        label: Some(("outcome", &BUILD_OUTCOMES)),
        unit: Unit::Count,
        help: "State builds by outcome (cache_hit, incremental, cold_rebuild, incomplete).",
    },
    Series {
        name: name::BUILD_DURATION_SECONDS,
        kind: Kind::Histogram,
        label: Some(("outcome", &BUILD_OUTCOMES)),
        unit: Unit::Seconds,
        help: "Build duration by outcome; the timer starts before any lock, so it includes index_lock_wait.",
    },
    Series {
        name: name::CHAIN_HOPS,
        kind: Kind::Histogram,
        label: None,
        unit: Unit::Count,
        help: "Spine length walked by each cold rebuild.",
    },
    Series {
        name: name::DRIVE_BUILDS_TOTAL,
        kind: Kind::Counter,
        label: Some(("outcome", &DRIVE_OUTCOMES)),
        unit: Unit::Count,
        help: "Drives by final outcome.",
    },
    Series {
        name: name::DRIVE_WAIT_TOTAL,
        kind: Kind::Counter,
        label: Some(("outcome", &WAIT_OUTCOMES)),
        unit: Unit::Count,
        help: "Drive waits by how they ended: woken by the execution's snapshot changing, or timeout at the per-wait cap.",
    },
    Series {
        name: name::INDEX_LOCK_WAIT_SECONDS_TOTAL,
        kind: Kind::Gauge,
        label: Some(("outcome", &BUILD_OUTCOMES)),
        unit: Unit::Seconds,
        help: "Total time builds spent blocked before they could read the index, by outcome (only ever increases; exported as a gauge because the metrics facade's counters are integers).",
    },
    Series {
        name: name::INDEXED_EXECUTIONS,
        kind: Kind::Gauge,
        label: None,
        unit: Unit::Count,
        help: "Resident executions (set together with index_events and index_bytes from one accounting).",
    },
    Series {
        name: name::INDEX_EVENTS,
        kind: Kind::Gauge,
        label: None,
        unit: Unit::Count,
        help: "Resident events.",
    },
    Series {
        name: name::INDEX_BYTES,
        kind: Kind::Gauge,
        label: None,
        unit: Unit::Bytes,
        help: "Resident bytes charged by the byte ledger (payloads plus per-event overhead).",
    },
    Series {
        name: name::EVICTIONS_TOTAL,
        kind: Kind::Counter,
        label: Some(("reason", &EVICTION_REASONS)),
        unit: Unit::Count,
        help: "Executions evicted, by reason.",
    },
    Series {
        name: name::DRIVE_TAIL_EVENTS_TOTAL,
        kind: Kind::Counter,
        label: Some(("outcome", &TAIL_OUTCOMES)),
        unit: Unit::Count,
        help: "Dispatch tail events a drive applied (or rejected) before its first build.",
    },
    Series {
        name: name::REHYDRATE_TOTAL,
        kind: Kind::Counter,
        label: Some(("outcome", &REHYDRATE_OUTCOMES)),
        unit: Unit::Count,
        help: "Rehydrate-on-miss attempts by outcome.",
    },
    Series {
        name: name::WAL_EVENTS_TOTAL,
        kind: Kind::Counter,
        label: None,
        unit: Unit::Count,
        help: "WAL records consumed by the drain (undecodable ones included).",
    },
    Series {
        name: name::HEALTHY,
        kind: Kind::Gauge,
        label: None,
        unit: Unit::Count,
        help: "1 while the drain's WAL feed is healthy, 0 while it is failing.",
    },
    Series {
        name: name::BACKFILLING,
        kind: Kind::Gauge,
        label: None,
        unit: Unit::Count,
        help: "1 while the drain replays the WAL's history (behind the head its source saw at subscription), 0 once caught up or when the source cannot tell.",
    },
    Series {
        name: name::STALLED_CHAINS_TOTAL,
        kind: Kind::Counter,
        label: Some(("reason", &STALL_REASONS)),
        unit: Unit::Count,
        help: "Holes in executions' chains open longer than the stall bound (missing_hop: an event other events link to that the WAL lost or has not delivered), each counted once.",
    },
    Series {
        name: name::CHECKPOINTS_TOTAL,
        kind: Kind::Counter,
        label: Some(("outcome", &CHECKPOINT_OUTCOMES)),
        unit: Unit::Count,
        help: "Checkpoints of the index by outcome: written, failed (the previous ones stay valid), skipped_busy (one was still being written), skipped_no_position (the source cannot resume), restored (used at start).",
    },
    Series {
        name: name::CHECKPOINT_REFUSED_TOTAL,
        kind: Kind::Counter,
        label: Some(("reason", &REFUSAL_REASONS)),
        unit: Unit::Count,
        help: "Checkpoints refused at restore, by reason (torn, checksum, version, index shape, another log, a log that no longer holds the checkpoint's record); nothing of a refused checkpoint is served.",
    },
];
