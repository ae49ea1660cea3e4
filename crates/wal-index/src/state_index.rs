//! [`StateIndex`]: the one interface the engine and the baselines share, so the simulator,
//! the benches and the tests run any of them.

use std::future::Future;
use std::time::Instant;

use chain_fold::{Chain, Event, EventId, ExecutionId};

use crate::config::{DriveBudget, IndexConfig};
use crate::observe::{DriveLabel, IndexObserver, RehydrateLabel};
use crate::rehydrate::RehydrateGate;
use crate::report::{
    Applied, ApplyError, BatchReport, Build, Drive, EvictionStats, IndexStats, RehydrateReport,
};

/// The state-builder index interface. See [`WalIndex`](crate::WalIndex) for the semantics
/// of each method; implementations differ only in how they synchronize.
pub trait StateIndex: Send + Sync + 'static {
    /// A short name for reports (`lockfree`, `mutex`, ...).
    const NAME: &'static str;
    /// An empty index.
    fn with_config(config: IndexConfig) -> Self
    where
        Self: Sized;
    /// An empty index reporting to `observer`.
    fn with_observer(config: IndexConfig, observer: std::sync::Arc<dyn IndexObserver>) -> Self
    where
        Self: Sized;
    /// The configuration.
    fn config(&self) -> &IndexConfig;
    /// The observer the index reports to.
    fn observer(&self) -> &dyn IndexObserver;
    /// Indexes one event (never evicts).
    fn apply(&self, event: Event) -> Applied;
    /// Decodes and indexes one payload.
    fn apply_json(&self, payload: &[u8]) -> Result<Applied, ApplyError>;
    /// Indexes a batch, then evicts its terminal executions.
    fn apply_batch(&self, events: Vec<Event>) -> BatchReport;
    /// One build at `expected_head` (`None`: the max-id head).
    fn build(&self, execution_id: ExecutionId, expected_head: Option<EventId>) -> Build;
    /// Builds and waits until served or out of budget.
    fn drive(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> impl Future<Output = Drive> + Send;
    /// [`StateIndex::drive`], parking the thread.
    fn drive_blocking(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive;
    /// The drive loop without reporting its final outcome. Used by
    /// [`StateIndex::drive_or_rehydrate_blocking`]; not meant to be called directly.
    #[doc(hidden)]
    fn drive_blocking_unobserved(
        &self,
        execution_id: ExecutionId,
        expected_head: Option<EventId>,
        budget: DriveBudget,
    ) -> Drive;
    /// Refreshes recency.
    fn touch(&self, execution_id: ExecutionId) -> bool;
    /// Evicts one execution now (unless gated).
    fn evict(&self, execution_id: ExecutionId) -> bool;
    /// One eviction sweep as of `now`.
    fn enforce_limits_at(&self, now: Instant) -> EvictionStats;
    /// Marks an execution as holding unsunk context.
    fn mark_pending_sink(&self, execution_id: ExecutionId);
    /// Unmarks without dropping the chain.
    fn release_pending_sink(&self, execution_id: ExecutionId, reason: &str) -> bool;
    /// Unmarks after sinking.
    fn confirm_sunk(&self, execution_id: ExecutionId) -> bool;
    /// Resident totals.
    fn stats(&self) -> IndexStats;
    /// Replays one execution's retained events.
    fn rehydrate(&self, execution_id: ExecutionId, events: Vec<Event>) -> RehydrateReport;
    /// A snapshot of one execution's chain.
    fn chain(&self, execution_id: ExecutionId) -> Option<Chain>;
    /// Resident execution ids, ascending.
    fn execution_ids(&self) -> Vec<ExecutionId>;

    /// A drive with today's rehydrate-on-miss: if the budget runs out, replay the
    /// execution's retained events (`retained` is called only then) and build once more.
    /// At most `gate.max_concurrent()` replays run at once; past that the drive falls back
    /// (`throttled`). Reports `drive_builds_total` as `served`, `served_rehydrated` or
    /// `fallback_incomplete`, and `rehydrate_total` for the replay.
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
        let mut drive = self.drive_blocking_unobserved(execution_id, expected_head, budget);
        if drive.outcome.spine().is_some() {
            self.observer().drive(DriveLabel::Served);
            return (drive, None);
        }
        let replay = match gate.try_enter() {
            None => RehydrateLabel::Throttled,
            Some(_permit) => {
                let events = retained(execution_id);
                if events.is_empty() {
                    RehydrateLabel::Empty
                } else {
                    self.rehydrate(execution_id, events);
                    let build = self.build(execution_id, expected_head);
                    drive.builds += 1;
                    match build.spine {
                        Some(spine) => {
                            drive.outcome = crate::DriveOutcome::Served(spine);
                            RehydrateLabel::Served
                        }
                        None => {
                            if let chain_fold::AdvanceOutcome::Incomplete(why) = build.outcome {
                                drive.outcome = crate::DriveOutcome::Incomplete(why);
                            }
                            RehydrateLabel::Incomplete
                        }
                    }
                }
            }
        };
        self.observer().rehydrate(replay);
        self.observer().drive(if replay == RehydrateLabel::Served {
            DriveLabel::ServedRehydrated
        } else {
            DriveLabel::FallbackIncomplete
        });
        (drive, Some(replay))
    }
}

macro_rules! delegate_state_index {
    ($ty:ty, $name:literal) => {
        impl $crate::StateIndex for $ty {
            const NAME: &'static str = $name;
            fn with_config(config: $crate::IndexConfig) -> Self {
                <$ty>::new(config)
            }
            fn with_observer(
                config: $crate::IndexConfig,
                observer: std::sync::Arc<dyn $crate::IndexObserver>,
            ) -> Self {
                <$ty>::with_observer(config, observer)
            }
            fn config(&self) -> &$crate::IndexConfig {
                <$ty>::config(self)
            }
            fn observer(&self) -> &dyn $crate::IndexObserver {
                <$ty>::observer(self)
            }
            fn drive_blocking_unobserved(
                &self,
                execution_id: chain_fold::ExecutionId,
                expected_head: Option<chain_fold::EventId>,
                budget: $crate::DriveBudget,
            ) -> $crate::Drive {
                <$ty>::drive_blocking_unobserved(self, execution_id, expected_head, budget)
            }
            fn apply(&self, event: chain_fold::Event) -> $crate::Applied {
                <$ty>::apply(self, event)
            }
            fn apply_json(&self, payload: &[u8]) -> Result<$crate::Applied, $crate::ApplyError> {
                <$ty>::apply_json(self, payload)
            }
            fn apply_batch(&self, events: Vec<chain_fold::Event>) -> $crate::BatchReport {
                <$ty>::apply_batch(self, events)
            }
            fn build(
                &self,
                execution_id: chain_fold::ExecutionId,
                expected_head: Option<chain_fold::EventId>,
            ) -> $crate::Build {
                <$ty>::build(self, execution_id, expected_head)
            }
            fn drive(
                &self,
                execution_id: chain_fold::ExecutionId,
                expected_head: Option<chain_fold::EventId>,
                budget: $crate::DriveBudget,
            ) -> impl std::future::Future<Output = $crate::Drive> + Send {
                <$ty>::drive(self, execution_id, expected_head, budget)
            }
            fn drive_blocking(
                &self,
                execution_id: chain_fold::ExecutionId,
                expected_head: Option<chain_fold::EventId>,
                budget: $crate::DriveBudget,
            ) -> $crate::Drive {
                <$ty>::drive_blocking(self, execution_id, expected_head, budget)
            }
            fn touch(&self, execution_id: chain_fold::ExecutionId) -> bool {
                <$ty>::touch(self, execution_id)
            }
            fn evict(&self, execution_id: chain_fold::ExecutionId) -> bool {
                <$ty>::evict(self, execution_id)
            }
            fn enforce_limits_at(&self, now: std::time::Instant) -> $crate::EvictionStats {
                <$ty>::enforce_limits_at(self, now)
            }
            fn mark_pending_sink(&self, execution_id: chain_fold::ExecutionId) {
                <$ty>::mark_pending_sink(self, execution_id)
            }
            fn release_pending_sink(
                &self,
                execution_id: chain_fold::ExecutionId,
                reason: &str,
            ) -> bool {
                <$ty>::release_pending_sink(self, execution_id, reason)
            }
            fn confirm_sunk(&self, execution_id: chain_fold::ExecutionId) -> bool {
                <$ty>::confirm_sunk(self, execution_id)
            }
            fn stats(&self) -> $crate::IndexStats {
                <$ty>::stats(self)
            }
            fn rehydrate(
                &self,
                execution_id: chain_fold::ExecutionId,
                events: Vec<chain_fold::Event>,
            ) -> $crate::RehydrateReport {
                <$ty>::rehydrate(self, execution_id, events)
            }
            fn chain(&self, execution_id: chain_fold::ExecutionId) -> Option<chain_fold::Chain> {
                <$ty>::chain(self, execution_id)
            }
            fn execution_ids(&self) -> Vec<chain_fold::ExecutionId> {
                <$ty>::execution_ids(self)
            }
        }
    };
}

delegate_state_index!(crate::WalIndex, "lockfree");
delegate_state_index!(crate::MutexIndex, "mutex");
delegate_state_index!(crate::ShardedMutexIndex, "sharded");
