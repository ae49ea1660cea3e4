//! [`StateIndex`]: the surface every index of this crate offers, so a worker pool, the
//! simulator, the benches and the tests can hold any of them.

use std::future::Future;
use std::time::Instant;

use chain_fold::{AdvanceOutcome, Chain, Event, EventId, ExecutionId};

use crate::config::{DriveBudget, IndexConfig};
use crate::drive::{DriveHooks, Mode, drive_loop, observed, run_blocking};
use crate::observe::{DriveLabel, IndexObserver, RehydrateLabel};
use crate::rehydrate::RehydrateGate;
use crate::report::{
    Applied, ApplyError, BatchReport, Build, Drive, DriveOutcome, EvictionStats, IndexStats,
    RehydrateReport,
};

/// The state-builder index: apply the WAL, build spines, drive until a tip lands, evict.
///
/// [`WalIndex`](crate::WalIndex) is the engine a worker pool uses; with the `baselines`
/// feature, `MutexIndex` (today's design) and `ShardedMutexIndex` (one lock per
/// execution) implement it too, so every figure this project reports is measured through
/// the same calls. Implementations differ only in how they synchronize; each one's
/// documentation says what each operation may wait for.
///
/// The drive methods are written once, here, over hooks each index supplies (the trait is
/// sealed for that reason: it cannot be implemented outside this crate).
///
/// ```
/// use wal_index::{DriveBudget, Event, StateIndex, WalIndex};
///
/// fn spine_ids(index: &impl StateIndex, execution: i64, tip: i64) -> Option<Vec<i64>> {
///     let drive = index.drive_blocking(execution, Some(tip), DriveBudget::default());
///     drive.outcome.spine().map(|spine| spine.ids())
/// }
///
/// let index = WalIndex::default();
/// index.apply(Event::minimal(1, 7, None, "playbook_started"));
/// index.apply(Event::minimal(2, 7, Some(1), "step"));
/// assert_eq!(spine_ids(&index, 7, 2), Some(vec![1, 2]));
/// ```
pub trait StateIndex: DriveHooks + Send + Sync + 'static {
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
    fn chain(&self, execution_id: ExecutionId) -> Option<Chain>;

    /// The ids of resident executions (those holding at least one event), ascending.
    fn execution_ids(&self) -> Vec<ExecutionId>;

    /// Builds until served, waiting between builds for the execution to change, within
    /// `budget`. Runtime-agnostic: it awaits the index's locks (if any) and its wait list,
    /// and times each wait out with its own timer.
    fn drive(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> impl Future<Output = Drive> + Send
    where
        Self: Sized,
    {
        async move {
            let drive = drive_loop(self, execution_id, expected_head, budget, Mode::Async).await;
            observed(drive, self.observer())
        }
    }

    /// [`drive`](StateIndex::drive), parking the calling thread between builds.
    fn drive_blocking(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive
    where
        Self: Sized,
    {
        let drive = run_blocking(drive_loop(
            self,
            execution_id,
            expected_head,
            budget,
            Mode::Blocking,
        ));
        observed(drive, self.observer())
    }

    /// The production drive: [`drive_blocking`](StateIndex::drive_blocking), and if the
    /// budget runs out, today's rehydrate on miss: replay the execution's retained events
    /// (`retained` is called only then) and build once more. At most
    /// `gate.max_concurrent()` replays run at once; past that the drive falls back
    /// (`throttled`). Reports `drive_builds_total` as `served`, `served_rehydrated` or
    /// `fallback_incomplete`, and `rehydrate_total` for the replay, if one was attempted.
    ///
    /// ```
    /// use wal_index::{DriveBudget, Event, StateIndex, WalIndex};
    /// use wal_index::rehydrate::RehydrateGate;
    /// use wal_index::observe::RehydrateLabel;
    ///
    /// let index = WalIndex::default();
    /// let retained = |execution| vec![
    ///     Event::minimal(1, execution, None, "playbook_started"),
    ///     Event::minimal(2, execution, Some(1), "step"),
    /// ];
    /// let budget = DriveBudget { waits: 0, ..DriveBudget::default() };
    /// let (drive, replay) =
    ///     index.drive_or_rehydrate_blocking(9, Some(2), budget, &RehydrateGate::default(), retained);
    /// assert_eq!(drive.outcome.spine().unwrap().ids(), vec![1, 2]);
    /// assert_eq!(replay, Some(RehydrateLabel::Served));
    /// ```
    fn drive_or_rehydrate_blocking(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
        gate: &RehydrateGate,
        retained: impl FnOnce(ExecutionId) -> Vec<Event>,
    ) -> (Drive, Option<RehydrateLabel>)
    where
        Self: Sized,
    {
        let drive = run_blocking(drive_loop(
            self,
            execution_id,
            expected_head,
            budget,
            Mode::Blocking,
        ));
        rehydrate_on_miss(self, execution_id, drive, expected_head, gate, retained)
    }

    /// [`drive_or_rehydrate_blocking`](StateIndex::drive_or_rehydrate_blocking) on an
    /// executor. The replay itself (reading `retained` and applying it) runs inline.
    fn drive_or_rehydrate(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
        gate: &RehydrateGate,
        retained: impl FnOnce(ExecutionId) -> Vec<Event> + Send,
    ) -> impl Future<Output = (Drive, Option<RehydrateLabel>)> + Send
    where
        Self: Sized,
    {
        async move {
            let drive = drive_loop(self, execution_id, expected_head, budget, Mode::Async).await;
            rehydrate_on_miss(self, execution_id, drive, expected_head, gate, retained)
        }
    }
}

/// The tail of the production drive: report a served drive, or replay and build once more.
fn rehydrate_on_miss<I: StateIndex>(
    index: &I,
    execution_id: ExecutionId,
    mut drive: Drive,
    expected_head: Option<EventId>,
    gate: &RehydrateGate,
    retained: impl FnOnce(ExecutionId) -> Vec<Event>,
) -> (Drive, Option<RehydrateLabel>) {
    if drive.outcome.spine().is_some() {
        index.observer().drive(DriveLabel::Served);
        return (drive, None);
    }
    let replay = match gate.try_enter() {
        None => RehydrateLabel::Throttled,
        Some(_permit) => {
            let events = retained(execution_id);
            if events.is_empty() {
                RehydrateLabel::Empty
            } else {
                index.rehydrate(execution_id, events);
                let build = index.build(execution_id, expected_head);
                drive.builds += 1;
                match build.spine {
                    Some(spine) => {
                        drive.outcome = DriveOutcome::Served(spine);
                        RehydrateLabel::Served
                    }
                    None => {
                        if let AdvanceOutcome::Incomplete(why) = build.outcome {
                            drive.outcome = DriveOutcome::Incomplete(why);
                        }
                        RehydrateLabel::Incomplete
                    }
                }
            }
        }
    };
    index.observer().rehydrate(replay);
    index.observer().drive(if replay == RehydrateLabel::Served {
        DriveLabel::ServedRehydrated
    } else {
        DriveLabel::FallbackIncomplete
    });
    (drive, Some(replay))
}
