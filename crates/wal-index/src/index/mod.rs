//! [`StateIndex`]: the surface every index of this crate offers, so a worker pool, the
//! simulator, the benches and the tests can hold any of them, and the one drive they share.
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the trait, and the sealed hooks an index supplies to the drive |
//! | `drive.rs` | the drive loop and the worker's flow around it, written once as async code |
//! | [`flow`] | what a drive is given: its budget, tail events and fallbacks |

mod drive;
pub mod flow;

use std::future::Future;
use std::time::Instant;

use chain_fold::{Chain, Event, EventId, ExecutionId};

use crate::backfill::Backfill;
use crate::config::IndexConfig;
use crate::ingest::DecodeMode;
use crate::observe::IndexObserver;
use crate::report::{
    Applied, ApplyError, BatchReport, Build, Drive, EvictionStats, IndexStats, RehydrateReport,
};
use crate::stall::StalledChain;
use crate::sync::{Clock, Waiting, run_to_completion};
use crate::waiting_room::Registered;
use drive::run_flow;
use flow::DriveFlow;

/// What an index supplies to the shared drive and to the [`Drain`](crate::Drain) beyond
/// its [`StateIndex`] operations: the plumbing a pool never calls. Sealed: a supertrait of
/// [`StateIndex`] in a private module, so only this crate's indexes implement it and only
/// this crate calls it.
pub trait IndexHooks {
    /// Registers a waiter that any publish of `execution_id` after this call wakes,
    /// including the publish that makes a non-resident execution resident. Must not create
    /// state the index keeps after the drive ends.
    fn listen(&self, execution_id: ExecutionId) -> Registered<'_>;

    /// The index's clock (a model advances it; the deadline is measured on it).
    fn clock(&self) -> &Clock;

    /// Asked after an unserved build: true when no wait can serve the drive (the engine:
    /// the execution finished and was evicted). Today's design never ends a drive early.
    fn finished_and_gone(&self, execution_id: ExecutionId) -> bool {
        let _ = execution_id;
        false
    }

    /// Asked after an unserved build of a drive that has a per-execution read: true while
    /// the drain is replaying the log's history ([`Backfill::Behind`]), so the drive reads
    /// its execution at once instead of waiting out its deadline first. A hint: a stale
    /// answer costs a wait or an early read, never a wrong spine (only a build serves).
    /// Today's design keeps the worker's flow and never says so.
    fn backfilling(&self) -> bool {
        false
    }

    /// Whether a drain decodes records for this index straight to their slim projection
    /// ([`Event::from_json_slim`](chain_fold::Event::from_json_slim), one pass). The engine
    /// says yes when [`IndexConfig::slim`](crate::IndexConfig::slim) is set. Today's design
    /// and the comparator say no: today's drain parses every whole envelope and projects
    /// under its lock, and they keep that cost.
    fn drain_decodes_slim(&self) -> bool;

    /// How every route decodes records for this index: the drain's pulls, a source that
    /// decodes its own, the drive's tail events and its per-execution reads.
    fn decode_mode(&self) -> DecodeMode {
        DecodeMode::for_slim(self.drain_decodes_slim())
    }

    /// The drain's word on where it stands against the log's head (see [`Backfill`]),
    /// after each pull and once more, as [`Backfill::Unknown`], when a drain that was
    /// behind goes away. Every index reports it to its observer (the `backfilling` gauge);
    /// the engine also keeps it for its drives ([`flow`](crate::flow) says what they do).
    fn note_backfill(&self, state: Backfill);

    /// [`StateIndex::apply_batch`], awaiting rather than blocking on the index's locks (the
    /// drain run as a task).
    fn apply_batch_async(&self, events: Vec<Event>) -> impl Future<Output = BatchReport> + Send;

    /// [`StateIndex::enforce_limits_at`], awaiting rather than blocking on the index's
    /// locks (the drain run as a task).
    fn enforce_limits_async(&self, now: Instant) -> impl Future<Output = EvictionStats> + Send;
}

/// The state-builder index: apply the WAL, build spines, drive until a tip lands, evict.
///
/// [`WalIndex`](crate::WalIndex) is the engine a worker pool uses; with the `baselines`
/// feature, `MutexIndex` (today's design) and `ShardedMutexIndex` (one lock per
/// execution) implement it too, so every figure this project reports is measured through
/// the same calls. Implementations differ only in how they synchronize; each one's
/// documentation says what each operation may wait for.
///
/// A pool calls six of its operations: [`apply_json`](StateIndex::apply_json) or
/// [`apply`](StateIndex::apply) only if it has no [`Drain`](crate::Drain) (the drain
/// applies the WAL), [`drive`](StateIndex::drive) or [`drive_async`](StateIndex::drive_async)
/// per dispatch, [`mark_pending_sink`](StateIndex::mark_pending_sink) and
/// [`confirm_sunk`](StateIndex::confirm_sunk) around its sink, and
/// [`stats`](StateIndex::stats) for its dashboards. The rest serve tests, tools and the
/// drain's maintenance.
///
/// One naming rule: a bare name returns its value, blocking the calling thread if the index
/// has a lock to wait for; the same name with `_async` returns a future that awaits rather
/// than blocks on it. Only today's design holds a lock a task can be made to wait for; the
/// engine's and the per-execution comparator's async forms are their synchronous
/// operations. The drive is written once, here, over hooks each index supplies (the trait
/// is sealed for that reason: it cannot be implemented outside this crate).
///
/// ```
/// use wal_index::{DriveBudget, DriveFlow, Event, StateIndex, WalIndex};
///
/// fn spine_ids(index: &impl StateIndex, execution: i64, tip: i64) -> Option<Vec<i64>> {
///     let drive = index.drive(execution, Some(tip), &DriveFlow::new(DriveBudget::default()));
///     drive.outcome.spine().map(|spine| spine.ids())
/// }
///
/// let index = WalIndex::default();
/// index.apply(Event::minimal(1, 7, None, "playbook_started"));
/// index.apply(Event::minimal(2, 7, Some(1), "step"));
/// assert_eq!(spine_ids(&index, 7, 2), Some(vec![1, 2]));
/// ```
pub trait StateIndex: IndexHooks + Send + Sync + 'static {
    /// A short name for reports (`lockfree`, `mutex`, `sharded`).
    const NAME: &'static str;

    /// An empty index reporting to `observer` (for instance
    /// `sb_metrics::StateBuilderMetrics`).
    fn with_observer(config: IndexConfig, observer: std::sync::Arc<dyn IndexObserver>) -> Self
    where
        Self: Sized;

    /// An empty index that reports to nobody.
    fn with_config(config: IndexConfig) -> Self
    where
        Self: Sized,
    {
        Self::with_observer(config, std::sync::Arc::new(crate::observe::NoopObserver))
    }

    /// The configuration the index was built with.
    fn config(&self) -> &IndexConfig;

    /// The observer this index reports to.
    fn observer(&self) -> &dyn IndexObserver;

    /// Indexes one event, publishes its execution's new state and wakes its waiters.
    /// Never evicts: terminal eviction happens at a batch boundary
    /// ([`apply_batch`](StateIndex::apply_batch)).
    fn apply(&self, event: Event) -> Applied;

    /// Decodes and applies one WAL payload; a payload that is not a chainable event is an
    /// error and indexes nothing.
    fn apply_json(&self, payload: &[u8]) -> Result<Applied, ApplyError> {
        Ok(self.apply(Event::from_json(payload)?))
    }

    /// Applies a batch, then evicts the executions whose terminal event it held (unless the
    /// sink gate holds them).
    fn apply_batch(&self, events: Vec<Event>) -> BatchReport;

    /// One build of the spine at `expected_head` (`None`: at the largest indexed id, the
    /// legacy path).
    fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build;

    /// Refreshes `execution_id`'s recency; false if it is not resident.
    fn touch(&self, execution_id: ExecutionId) -> bool;

    /// Evicts one execution now. Returns true if an execution holding events was removed;
    /// false if none was resident or the sink gate holds it.
    fn evict(&self, execution_id: ExecutionId) -> bool;

    /// One sweep of the eviction policy as of `now`: TTL, then LRU to the execution cap,
    /// then LRU to the byte ceiling, skipping executions the sink gate holds.
    fn enforce_limits_at(&self, now: Instant) -> EvictionStats;

    /// One stall check as of `now` ([`crate::stall`] states the rule): the holes (ids an
    /// event links to and the index does not hold, in chains that hold their genesis) open
    /// for longer than [`IndexConfig::stall_after`](crate::IndexConfig::stall_after) while
    /// the drain was caught up, each reported to the observer and returned once. It
    /// consumes what it reports: the drain runs it every quarter of the bound and keeps
    /// what it found in its report, so another caller takes those reports away from the
    /// drain's. Checks must come more often than once per bound: a gap of more than a
    /// bound between two checks restarts every clock (the drain was not watching). Nothing is evicted or changed. Today's design and the comparator do not
    /// check: the default reports nothing.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use wal_index::{Event, IndexConfig, StateIndex, WalIndex};
    ///
    /// let index = WalIndex::new(IndexConfig { stall_after: Some(Duration::from_secs(4)), ..Default::default() });
    /// index.apply(Event::minimal(1, 7, None, "playbook_started"));
    /// index.apply(Event::minimal(3, 7, Some(2), "step")); // 2 never arrives
    /// // The drain checks every quarter of the bound; here, every second for 8 s.
    /// let t0 = Instant::now();
    /// let found: Vec<_> = (0..=8)
    ///     .flat_map(|s| index.check_stalls_at(t0 + Duration::from_secs(s)))
    ///     .collect();
    /// assert_eq!(found.len(), 1); // once
    /// assert_eq!((found[0].execution_id, found[0].missing_event_id), (7, 2));
    /// ```
    fn check_stalls_at(&self, now: Instant) -> Vec<StalledChain> {
        let _ = now;
        Vec::new()
    }

    /// Marks `execution_id` as holding unsunk business context: with the sink gate on, no
    /// eviction (terminal, TTL, LRU, byte ceiling, explicit) removes it until released.
    fn mark_pending_sink(&self, execution_id: ExecutionId);

    /// Unmarks `execution_id` without dropping its chain (`reason` is for the caller's logs
    /// and metrics). Returns whether it was marked.
    fn release_pending_sink(&self, execution_id: ExecutionId, reason: &str) -> bool;

    /// Unmarks `execution_id` after its context was sunk. Returns whether it was marked.
    fn confirm_sunk(&self, execution_id: ExecutionId) -> bool;

    /// The resident totals, all three from one state.
    fn stats(&self) -> IndexStats;

    /// Replays one execution's retained events into the index (rehydrate on miss). Events
    /// of other executions are skipped and counted. Never evicts, even if a terminal event
    /// is replayed.
    fn rehydrate(
        &self,
        execution_id: ExecutionId,
        events: impl IntoIterator<Item = Event>,
    ) -> RehydrateReport
    where
        Self: Sized;

    /// A snapshot of one execution's chain.
    ///
    /// The snapshot shares the index's storage and never changes. Successive snapshots of
    /// one execution are versions of one chain, so a `SpineCache` fed them builds
    /// incrementally, and never reuses a spine across an eviction and re-creation, a
    /// rewrite, or two snapshots changed different ways (`chain_fold`'s lineage).
    ///
    /// Applying events to a snapshot is allowed and leaves the index's events untouched,
    /// but it costs the index twice: the snapshot's first append takes the next cell of the
    /// buffer the index writes in place, so the index's next append to that execution
    /// copies its log (O(events)) into a buffer of its own; and it takes the chain's next
    /// version, so the index's next apply starts a fresh lineage and its next build of
    /// that execution is a cold rebuild. Clone the events into a fresh chain instead where
    /// a caller keeps applying to snapshots of a live execution.
    fn chain(&self, execution_id: ExecutionId) -> Option<Chain>;

    /// The ids of resident executions (those holding at least one event), ascending.
    fn execution_ids(&self) -> Vec<ExecutionId>;

    /// What the byte ledger charges for one resident execution (its share of
    /// [`IndexStats::bytes`]): what evicting it would free. `None` if it is not resident.
    /// The comparators charge its chain ([`Chain::bytes`]); the engine also charges its
    /// slot and its cached spine.
    fn resident_bytes(&self, execution_id: ExecutionId) -> Option<usize> {
        self.chain(execution_id).map(|chain| chain.bytes())
    }

    /// The worker's drive, blocking the calling thread between builds: apply the tail
    /// events, the deadline loop, the state shard, rehydrate on a miss, fall back
    /// ([`flow`](crate::flow) has the table). [`DriveFlow::new`] is the deadline loop
    /// alone. Reports `drive_builds_total` with [`Drive::label`], `drive_wait_total` per
    /// wait, `rehydrate_total` for a replay, and the tail applies.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wal_index::{DriveBudget, DriveFlow, Event, StateIndex, WalIndex};
    ///
    /// let index = WalIndex::default();
    /// index.apply(Event::minimal(1, 7, None, "playbook_started"));
    /// index.apply(Event::minimal(2, 7, Some(1), "step"));
    /// let flow = DriveFlow::new(DriveBudget::new(50, Duration::from_secs(1)));
    /// let drive = index.drive(7, Some(2), &flow);
    /// assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2]);
    /// ```
    fn drive(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        flow: &DriveFlow<'_>,
    ) -> Drive
    where
        Self: Sized,
    {
        run_to_completion(run_flow(
            self,
            execution_id,
            expected_head,
            flow,
            Waiting::Park,
        ))
    }

    /// [`drive`](StateIndex::drive) as a future: runtime-agnostic, it awaits the index's
    /// locks (if any) and its wait list, and times each wait out with its own timer.
    ///
    /// ```
    /// use wal_index::{DriveBudget, DriveFallbacks, DriveFlow, Event, ExecutionId, StateIndex, WalIndex};
    /// use wal_index::flow::FallbackRead;
    /// use wal_index::ingest::DecodeMode;
    /// use wal_index::labels::{DriveLabel, RehydrateLabel};
    /// use wal_index::rehydrate::RehydrateGate;
    ///
    /// struct RetainedWal;
    /// impl DriveFallbacks for RetainedWal {
    ///     fn retained(&self, execution: ExecutionId, _: DecodeMode) -> FallbackRead<'_> {
    ///         Box::pin(std::future::ready(Some(vec![
    ///             Event::minimal(1, execution, None, "playbook_started"),
    ///             Event::minimal(2, execution, Some(1), "step"),
    ///         ])))
    ///     }
    /// }
    ///
    /// let index = WalIndex::default();
    /// let gate = RehydrateGate::default();
    /// let flow = DriveFlow::new(DriveBudget::new(0, std::time::Duration::ZERO))
    ///     .fallbacks(&RetainedWal)
    ///     .rehydrate_gate(&gate);
    /// # futures_lite::future::block_on(async {
    /// let drive = index.drive_async(9, Some(2), &flow).await;
    /// assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2]);
    /// assert_eq!((drive.label, drive.rehydrate), (DriveLabel::ServedRehydrated, Some(RehydrateLabel::Served)));
    /// # });
    /// ```
    fn drive_async(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        flow: &DriveFlow<'_>,
    ) -> impl Future<Output = Drive> + Send
    where
        Self: Sized,
    {
        run_flow(self, execution_id, expected_head, flow, Waiting::Timer)
    }

    /// [`build`](StateIndex::build), awaiting rather than blocking on the index's locks.
    fn build_async(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
    ) -> impl Future<Output = Build> + Send
    where
        Self: Sized,
    {
        async move { self.build(execution_id, expected_head) }
    }

    /// [`apply`](StateIndex::apply), awaiting rather than blocking on the index's locks (a
    /// drive's tail event).
    fn apply_async(&self, event: Event) -> impl Future<Output = Applied> + Send
    where
        Self: Sized,
    {
        async move { self.apply(event) }
    }

    /// [`rehydrate`](StateIndex::rehydrate), awaiting rather than blocking on the index's
    /// locks.
    fn rehydrate_async(
        &self,
        execution_id: ExecutionId,
        events: Vec<Event>,
    ) -> impl Future<Output = RehydrateReport> + Send
    where
        Self: Sized,
    {
        async move { self.rehydrate(execution_id, events) }
    }

    /// [`chain`](StateIndex::chain), awaiting rather than blocking on the index's locks.
    fn chain_async(&self, execution_id: ExecutionId) -> impl Future<Output = Option<Chain>> + Send
    where
        Self: Sized,
    {
        async move { self.chain(execution_id) }
    }
}
