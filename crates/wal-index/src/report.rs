//! What the index's operations return.

use std::time::Duration;

use chain_fold::{AdvanceOutcome, EventError, EventId, ExecutionId, Incomplete, Spine};

use crate::labels::{DriveLabel, EvictReason, RehydrateLabel, ShardReadLabel};

/// The result of applying one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The event's execution.
    pub execution_id: ExecutionId,
    /// The event's id.
    pub event_id: EventId,
    /// False for a redelivery of an id already indexed.
    pub is_new: bool,
    /// The event has a terminal type (the batch that holds it evicts the execution).
    pub is_terminal: bool,
}

/// Why `apply_json` refused a payload. Nothing was indexed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The payload is not a chainable event.
    #[error(transparent)]
    Decode(#[from] EventError),
}

/// The result of applying one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Events applied (redeliveries included).
    pub applied: usize,
    /// Events whose id was new.
    pub new: usize,
    /// Distinct executions the batch touched (each published and woken once).
    pub executions: usize,
    /// Executions evicted after the batch because it held their terminal event, ascending.
    pub terminal_evicted: Vec<ExecutionId>,
    /// Executions whose terminal event arrived but that the sink gate kept resident,
    /// ascending.
    pub terminal_kept_by_sink_gate: Vec<ExecutionId>,
}

/// The result of one build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    /// What the build did.
    pub outcome: AdvanceOutcome,
    /// The spine, unless the outcome is `Incomplete`.
    pub spine: Option<Spine>,
    /// Time the build was blocked before it could read the index: the mutex wait in the
    /// baseline (production's `index_lock_wait_seconds_total`). Always zero in the engine,
    /// whose build has no step that can block; its snapshot loads count as work, in
    /// `elapsed`.
    pub waited: Duration,
    /// The whole build, `waited` included (production's `build_duration_seconds`). Zero
    /// from the engine when its observer does not time builds
    /// ([`IndexObserver::times_builds`](crate::IndexObserver::times_builds): the default
    /// [`NoopObserver`](crate::observe::NoopObserver) does not).
    pub elapsed: Duration,
}

/// How a drive ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriveOutcome {
    /// A build produced the spine at the expected head.
    Served(Spine),
    /// The budget ran out; this is why the last build was incomplete.
    Incomplete(Incomplete),
}

impl DriveOutcome {
    /// The spine, if served.
    pub fn spine(&self) -> Option<&Spine> {
        match self {
            DriveOutcome::Served(spine) => Some(spine),
            DriveOutcome::Incomplete(_) => None,
        }
    }
}

/// The result of one drive: the tail applied, builds and waits between them until served
/// or past the deadline, and what the worker did after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drive {
    /// Served or incomplete.
    pub outcome: DriveOutcome,
    /// How it ended, as `drive_builds_total{outcome}` labels it.
    pub label: DriveLabel,
    /// Builds performed (the deadline loop's, and the one after a replay).
    pub builds: u32,
    /// Waits that ended because the execution's snapshot changed (or it was evicted).
    pub wakes: u32,
    /// Waits that ended at the per-wait cap or the deadline.
    pub timeouts: u32,
    /// Tail events applied before the first build.
    pub tail_applied: u32,
    /// Tail events skipped: undecodable, of another execution, or of an execution the
    /// engine knows finished and was evicted (applying them would re-create it).
    pub tail_rejected: u32,
    /// Time spent decoding the tail's payloads, on the drive's own thread: the part of a
    /// warm drive that is the same work in every index design (the decode into the
    /// index's mode), as opposed to the applies and builds around it.
    pub tail_decode: Duration,
    /// The last replay attempted, if any (after the deadline, or early: see
    /// `backfill_skip`).
    pub rehydrate: Option<RehydrateLabel>,
    /// What the state-shard read came to, if the drive read one (step 3).
    pub shard: Option<ShardReadLabel>,
    /// The drive left its deadline loop at an unserved build because the engine's drain was
    /// backfilling, and read its execution at once ([`flow`](crate::flow) says when).
    pub backfill_skip: bool,
    /// From the drive's start to its end.
    pub elapsed: Duration,
}

/// What one `enforce_limits_at` sweep evicted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvictionStats {
    /// Evicted for idling past the TTL.
    pub ttl: usize,
    /// Evicted (LRU) to get under the execution cap.
    pub max_executions: usize,
    /// Evicted (LRU) to get under the byte ceiling.
    pub byte_ceiling: usize,
    /// Executions a limit would have evicted but the sink gate kept.
    pub kept_by_sink_gate: usize,
    /// The evicted executions, in eviction order.
    pub evicted: Vec<Victim>,
}

/// One execution a sweep evicted, and what the sweep judged of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The rule that evicted it.
    pub reason: EvictReason,
    /// Its last use (apply or build) in the state the sweep judged and evicted. Every apply
    /// refreshes recency, so an event applied after this instant was not part of that state,
    /// and no sweep evicts it on this verdict. The sweep's `now` minus this is how long the
    /// victim had been idle (zero if it was used after `now`).
    pub last_used: std::time::Instant,
}

/// Resident totals. All three always describe the same state of the index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Executions holding at least one event.
    pub executions: usize,
    /// Events resident.
    pub events: usize,
    /// Bytes charged by the byte ledger (payloads plus per-event overhead).
    pub bytes: usize,
}

/// What one `rehydrate` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RehydrateReport {
    /// Events applied to the execution.
    pub applied: usize,
    /// Of those, events that were not indexed before.
    pub new: usize,
    /// Events skipped because they belong to another execution.
    pub other_execution: usize,
}

impl RehydrateReport {
    /// A replay of `events` for `execution_id`, before it runs: the events to apply, and a
    /// report that already counts them (`applied`) and the skipped events of other
    /// executions. `new` is the caller's to count.
    pub(crate) fn sorted(
        execution_id: ExecutionId,
        events: impl IntoIterator<Item = chain_fold::Event>,
    ) -> (RehydrateReport, Vec<chain_fold::Event>) {
        let mut report = RehydrateReport::default();
        let mine: Vec<_> = events
            .into_iter()
            .filter(|e| {
                let ours = e.execution_id() == execution_id;
                report.other_execution += usize::from(!ours);
                ours
            })
            .collect();
        report.applied = mine.len();
        (report, mine)
    }
}
